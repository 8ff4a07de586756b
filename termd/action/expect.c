/* expect.c — the `expect` action: wait until a POSIX extended regex matches
 * a session's current screen or the rendered output that appears after the
 * action arrives, or until its timeout. */
#include "action.h"

#include <regex.h>
#include <stdlib.h>
#include <string.h>

#define EXPECT_TEXT_MAX   (1u << 20)   /* rendered text kept while waiting */
#define EXPECT_SCAN_MAX   (256u * 1024u) /* tail searched on each new output */
#define EXPECT_GROUPS     10

struct expect {
	struct pending p;      /* first: the registry's handle (id, conn, session) */
	struct session *s;
	regex_t re;
	render_t *render;
	buf_t text;            /* finished lines, newline-terminated */
	lws_sorted_usec_list_t sul;
};

static void exp_line(void *user, const char *line, size_t len)
{
	struct expect *e = user;
	buf_append(&e->text, line, len);
	buf_putc(&e->text, '\n');
	if (e->text.len > EXPECT_TEXT_MAX)
		buf_consume(&e->text, e->text.len - EXPECT_TEXT_MAX / 2);
}

static void exp_free(struct expect *e)
{
	lws_sul_cancel(&e->sul);
	pending_del(&e->p);
	if (e->s && e->s->expect == e)
		e->s->expect = NULL;
	regfree(&e->re);
	render_free(e->render);
	buf_free(&e->text);
	free(e);
}

static void exp_session_gone(struct pending *p)
{
	exp_free((struct expect *)p);
}

static const struct pending_ops expect_ops = {"expect", exp_session_gone};

/* Try the regex on text; on a match, answer (to conn/id; p: the pending
 * action answering, or NULL) and return 1. */
static int try_match(struct conn *conn, const cJSON *id, struct pending *p, regex_t *re,
		     const char *text, size_t len, const char *session)
{
	size_t off = len > EXPECT_SCAN_MAX ? len - EXPECT_SCAN_MAX : 0;
	regmatch_t m[EXPECT_GROUPS];
	if (regexec(re, text + off, EXPECT_GROUPS, m, 0) != 0)
		return 0;
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "session", session);
	cJSON_AddBoolToObject(ex, "matched", 1);
	const char *base = text + off;
	char *match = xstrndup(base + m[0].rm_so, (size_t)(m[0].rm_eo - m[0].rm_so));
	cJSON_AddStringToObject(ex, "match", match);
	free(match);
	cJSON *groups = cJSON_AddArrayToObject(ex, "groups");
	for (size_t i = 1; i < EXPECT_GROUPS && i <= re->re_nsub; i++) {
		if (m[i].rm_so < 0) {
			cJSON_AddItemToArray(groups, cJSON_CreateNull());
		} else {
			char *g = xstrndup(base + m[i].rm_so, (size_t)(m[i].rm_eo - m[i].rm_so));
			cJSON_AddItemToArray(groups, cJSON_CreateString(g));
			free(g);
		}
	}
	char *content = xstrndup(base, (size_t)m[0].rm_eo);
	events_emit(conn, id, "expect", content, p ? pending_extras(p, ex) : ex);
	free(content);
	return 1;
}

/* Finished lines (only the tail try_match searches) + the live lines. */
static void exp_text(struct expect *e, size_t keep, buf_t *all)
{
	size_t off = e->text.len > keep ? e->text.len - keep : 0;
	buf_append(all, e->text.p ? e->text.p + off : "", e->text.len - off);
	render_live(e->render, all);
}

static void exp_check(struct expect *e)
{
	/* this runs on every output chunk while expect waits: copy no more
	 * than the tail that is searched */
	buf_t all = {0};
	exp_text(e, EXPECT_SCAN_MAX, &all);
	int done = try_match(e->p.conn, e->p.id, &e->p, &e->re, all.p ? all.p : "", all.len, e->s->name);
	buf_free(&all);
	if (done)
		exp_free(e);
}

static void exp_timeout(lws_sorted_usec_list_t *sul)
{
	struct expect *e = lws_container_of(sul, struct expect, sul);
	buf_t all = {0};
	exp_text(e, EXPECT_TEXT_MAX, &all);
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "session", e->s->name);
	cJSON_AddBoolToObject(ex, "matched", 0);
	cJSON_AddNullToObject(ex, "match");
	cJSON_AddArrayToObject(ex, "groups");
	cJSON_AddBoolToObject(ex, "timed_out", 1);
	pending_emit(&e->p, "expect", all.p ? all.p : "", ex);
	buf_free(&all);
	exp_free(e);
}

static void expect_on_output(struct session *s, const char *data, size_t n)
{
	struct expect *e = s->expect;
	if (!e)
		return;
	render_feed(e->render, data, n);
	exp_check(e);
}

static void expect_on_session_exit(struct session *s)
{
	struct expect *e = s->expect;
	if (!e)
		return;
	render_finish(e->render);
	lws_sul_cancel(&e->sul);
	exp_timeout(&e->sul);
}

static int expect_action(struct act *a)
{
	const char *pattern = NULL;
	double timeout = 30;
	int has;
	struct session *s;
	ARGS_KNOWN(a, "session", "pattern", "timeout");
	if (arg_string(a, "pattern", &pattern, 1) < 0 ||
	    arg_number(a, "timeout", &timeout, &has) < 0)
		return -1;
	if (timeout < 0 || timeout > 86400)
		return act_error(a, TD_ERR_BAD_REQUEST, "timeout must be 0-86400 seconds");
	if (arg_session(a, "session", 0, &s, NULL) < 0)
		return -1;
	if (s->expect) {
		act_error(a, TD_ERR_BUSY, "another expect is waiting on '%s'", s->name);
		return -1;
	}
	struct expect *e = xcalloc(1, sizeof *e);
	int rc = regcomp(&e->re, pattern, REG_EXTENDED | REG_NEWLINE);
	if (rc != 0) {
		char msg[256];
		regerror(rc, &e->re, msg, sizeof msg);
		free(e);
		act_error(a, TD_ERR_BAD_REQUEST, "bad pattern: %s", msg);
		return -1;
	}
	/* the current screen first */
	buf_t scr = {0};
	screen_text(session_screen(s), &scr);
	int done = try_match(a->conn, a->id, NULL, &e->re, scr.p ? scr.p : "", scr.len, s->name);
	buf_free(&scr);
	if (done) {
		regfree(&e->re);
		free(e);
		return 0;
	}
	e->s = s;
	pending_add(&e->p, &expect_ops, a, s);
	/* an upgrade in place re-arms it with the time left */
	pending_redo(&e->p, a->args, mono_us() + (uint64_t)(timeout * 1e6));
	e->render = render_new(200, exp_line, e);
	s->expect = e;
	if (!s->pty.alive) {
		exp_timeout(&e->sul);
		return 0;
	}
	server_timer(&e->sul, exp_timeout, timeout > 0 ? (uint64_t)(timeout * 1e6) : 1);
	return 0;
}

void expect_register(void)
{
	static const struct session_listener l = {
		.text = expect_on_output,
		.exit = expect_on_session_exit,
	};
	session_listen(&l);
	static const struct action_def defs[] = {
		{"expect", expect_action, 0},
	};
	actions_register(defs, sizeof defs / sizeof defs[0]);
}
