/* bash.c — OpenHands V1's commands: start_bash_command and
 * execute_bash_command. Each command runs as V1 runs it — a new `sh -c`,
 * no terminal, concurrently with the others, its own process group — in a
 * pipe session of its own ("ohv1-<id>", through session.open, so it is on
 * /events and in session.list), closed once it ended. Its output becomes
 * BashOutput events while it flows (at most V1_FLUSH_US after it came,
 * each stdout/stderr piece once, in order, at most V1_PIECE_MAX bytes a
 * piece), the last one with exit_code; `timeout` seconds end its whole
 * tree (TERM, KILL a second later) with exit_code -1. execute_bash_command
 * answers once it ended with its last BashOutput carrying the last
 * V1_PIECE_MAX bytes of all its stdout and stderr, as V1's last chunk does. */
#include "ohv1.h"
#include "utf8hold.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define V1_FLUSH_US (50 * 1000)        /* output waits at most this long for its event */
#define V1_PIECE_MAX (1u << 20)        /* V1's MAX_CONTENT_CHAR_LENGTH */
#define V1_KILL_GRACE_US (1000 * 1000) /* TERM, then KILL */

struct waiter {
	struct waiter *next;
	struct http_txn *t;
	struct v1cmd *c;
};

struct v1cmd {
	struct v1cmd *next;
	char id[33];
	char name[TD_SESSION_NAME_MAX + 1];
	struct session *s;
	int order;
	buf_t out, err;           /* output not in an event yet */
	struct utf8hold held_out, held_err; /* after it: a character's first bytes */
	buf_t tail_out, tail_err; /* the last V1_PIECE_MAX bytes of each */
	int ended, timed_out, exit_code;
	uint64_t deadline;        /* mono_us its timeout ends it (0: none) */
	uint64_t last_flush;      /* mono_us of the last output event */
	int flush_armed;
	lws_sorted_usec_list_t flush_sul, timeout_sul, kill_sul, close_sul;
	struct waiter *waiters;   /* execute_bash_command calls */
};

static struct v1cmd *cmds;

static struct v1cmd *by_session(struct session *s)
{
	for (struct v1cmd *c = cmds; c; c = c->next)
		if (c->s == s)
			return c;
	return NULL;
}

/* ========================================================== JSON text */

/* n bytes of valid UTF-8 as a JSON string (NUL and controls escaped) */
static void json_str(buf_t *b, const char *p, size_t n)
{
	buf_putc(b, '"');
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)p[i];
		if (ch == '"' || ch == '\\') {
			buf_putc(b, '\\');
			buf_putc(b, (char)ch);
		} else if (ch == '\n') {
			buf_puts(b, "\\n");
		} else if (ch == '\r') {
			buf_puts(b, "\\r");
		} else if (ch == '\t') {
			buf_puts(b, "\\t");
		} else if (ch < 0x20 || ch == 0x7f) {
			buf_printf(b, "\\u%04x", ch);
		} else {
			buf_putc(b, (char)ch);
		}
	}
	buf_putc(b, '"');
}

/* ============================================================= events */

static void add_event(struct v1_event *e, buf_t *json)
{
	e->json = json->p;
	e->len = json->len;
	v1_event_add(e);
}

static void emit_command(struct v1cmd *c, const char *command, const char *cwd, int timeout)
{
	struct v1_event *e = xcalloc(1, sizeof *e);
	memcpy(e->id, c->id, 33);
	memcpy(e->command_id, c->id, 33);
	e->kind = V1_COMMAND;
	e->ts_us = v1_now_us();
	char ts[40];
	v1_timestamp(e->ts_us, ts, sizeof ts);
	buf_t b = {0};
	buf_printf(&b, "{\"kind\":\"BashCommand\",\"id\":\"%s\",\"timestamp\":\"%s\",\"command\":",
		   e->id, ts);
	json_str(&b, command, strlen(command));
	buf_puts(&b, ",\"cwd\":");
	if (cwd)
		json_str(&b, cwd, strlen(cwd));
	else
		buf_puts(&b, "null");
	buf_printf(&b, ",\"timeout\":%d}", timeout);
	add_event(e, &b);
}

static void put_piece(buf_t *b, const char *key, const buf_t *s)
{
	buf_printf(b, ",\"%s\":", key);
	if (s->len)
		json_str(b, s->p, s->len);
	else
		buf_puts(b, "null");
}

/* one BashOutput: the pieces given, exit_code when it ended (has_exit) */
static void output_json(buf_t *b, const struct v1_event *e, const buf_t *so, const buf_t *se,
			int has_exit, int exit_code)
{
	char ts[40];
	v1_timestamp(e->ts_us, ts, sizeof ts);
	buf_printf(b, "{\"kind\":\"BashOutput\",\"id\":\"%s\",\"timestamp\":\"%s\","
		   "\"command_id\":\"%s\",\"order\":%d,\"exit_code\":", e->id, ts, e->command_id,
		   e->order);
	if (has_exit)
		buf_printf(b, "%d", exit_code);
	else
		buf_puts(b, "null");
	put_piece(b, "stdout", so);
	put_piece(b, "stderr", se);
	buf_putc(b, '}');
}

static void tail_keep(buf_t *tail, const char *p, size_t n)
{
	if (n >= V1_PIECE_MAX) {
		buf_reset(tail);
		buf_append(tail, p + n - V1_PIECE_MAX, V1_PIECE_MAX);
		return;
	}
	buf_append(tail, p, n);
	if (tail->len > 2 * V1_PIECE_MAX)
		buf_consume(tail, tail->len - V1_PIECE_MAX);
}

/* the tail as valid UTF-8 starting on a character */
static void tail_text(buf_t *tail, buf_t *out)
{
	if (tail->len > V1_PIECE_MAX)
		buf_consume(tail, tail->len - V1_PIECE_MAX);
	size_t skip = 0;
	while (skip < tail->len && skip < 3 && ((unsigned char)tail->p[skip] & 0xc0) == 0x80)
		skip++;
	buf_consume(tail, skip);
	struct utf8hold none = {0};
	utf8hold_text(&none, tail->p, tail->len, out, 1);
	buf_consume(tail, tail->len);
}

static void answer_waiters(struct v1cmd *c, const struct v1_event *last);

/* how much of a stream's output goes in its next piece, after what is held */
static size_t piece_len(const buf_t *b, const struct utf8hold *h)
{
	size_t room = V1_PIECE_MAX - h->n;
	return b->len > room ? room : b->len;
}

/* the output so far as events of at most V1_PIECE_MAX bytes a stream;
 * last: the final one, with exit_code (even without output) */
static void flush(struct v1cmd *c, int last)
{
	lws_sul_cancel(&c->flush_sul);
	c->flush_armed = 0;
	for (;;) {
		buf_t so = {0}, se = {0};
		/* a piece of at most V1_PIECE_MAX input bytes per stream, held ones first */
		size_t on = piece_len(&c->out, &c->held_out);
		size_t en = piece_len(&c->err, &c->held_err);
		int more = on < c->out.len || en < c->err.len;
		int final = last && !more;
		utf8hold_text(&c->held_out, c->out.p, on, &so, final);
		utf8hold_text(&c->held_err, c->err.p, en, &se, final);
		buf_consume(&c->out, on);
		buf_consume(&c->err, en);
		if (!so.len && !se.len && !final) {
			buf_free(&so);
			buf_free(&se);
			break;
		}
		struct v1_event *e = xcalloc(1, sizeof *e);
		v1_new_id(e->id);
		memcpy(e->command_id, c->id, 33);
		e->kind = V1_OUTPUT;
		e->order = c->order++;
		e->ts_us = v1_now_us();
		buf_t b = {0};
		output_json(&b, e, &so, &se, final, c->exit_code);
		buf_free(&so);
		buf_free(&se);
		add_event(e, &b);
		if (final) {
			answer_waiters(c, e);
			break;
		}
		if (!more)
			break;
	}
	c->last_flush = mono_us();
}

static void flush_timer(lws_sorted_usec_list_t *sul)
{
	struct v1cmd *c = lws_container_of(sul, struct v1cmd, flush_sul);
	c->flush_armed = 0;
	if (!c->ended)
		flush(c, 0);
}

/* ============================================================ waiters */

static void waiter_gone(struct http_txn *t)
{
	struct waiter *w = t->user;
	if (!w)
		return;
	for (struct waiter **pp = &w->c->waiters; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	free(w);
	t->user = NULL;
}

static void answer_waiters(struct v1cmd *c, const struct v1_event *last)
{
	if (!c->waiters)
		return;
	buf_t so = {0}, se = {0};
	tail_text(&c->tail_out, &so);
	tail_text(&c->tail_err, &se);
	buf_t b = {0};
	output_json(&b, last, &so, &se, 1, c->exit_code);
	while (c->waiters) {
		struct waiter *w = c->waiters;
		c->waiters = w->next;
		w->t->user = NULL;
		w->t->gone = NULL;
		http_answer(w->t, 200, "application/json", b.p, b.len);
		free(w);
	}
	buf_free(&b);
	buf_free(&so);
	buf_free(&se);
}

/* =========================================================== the life */

static void v1cmd_free(struct v1cmd *c)
{
	for (struct v1cmd **pp = &cmds; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	while (c->waiters) {
		struct waiter *w = c->waiters;
		c->waiters = w->next;
		w->t->user = NULL;
		w->t->gone = NULL;
		v1_detail(w->t, 503, "termd is stopping");
		free(w);
	}
	lws_sul_cancel(&c->flush_sul);
	lws_sul_cancel(&c->timeout_sul);
	lws_sul_cancel(&c->kill_sul);
	lws_sul_cancel(&c->close_sul);
	buf_free(&c->out);
	buf_free(&c->err);
	buf_free(&c->tail_out);
	buf_free(&c->tail_err);
	free(c);
}

static void signal_tree(struct v1cmd *c, const char *sig)
{
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "session", c->name);
	cJSON_AddStringToObject(a, "signal", sig);
	cJSON_AddBoolToObject(a, "tree", 1);
	cJSON_Delete(v1_action("session.signal", a));
}

static void kill_timer(lws_sorted_usec_list_t *sul)
{
	struct v1cmd *c = lws_container_of(sul, struct v1cmd, kill_sul);
	if (!c->ended && c->s)
		signal_tree(c, "KILL");
}

static void timeout_timer(lws_sorted_usec_list_t *sul)
{
	struct v1cmd *c = lws_container_of(sul, struct v1cmd, timeout_sul);
	if (c->ended || !c->s)
		return;
	c->timed_out = 1;
	signal_tree(c, "TERM");
	server_timer(&c->kill_sul, kill_timer, V1_KILL_GRACE_US);
}

/* after the end: the session closed through the action layer */
static void close_timer(lws_sorted_usec_list_t *sul)
{
	struct v1cmd *c = lws_container_of(sul, struct v1cmd, close_sul);
	if (c->s) {
		cJSON *a = cJSON_CreateObject();
		cJSON_AddStringToObject(a, "name", c->name);
		cJSON_Delete(v1_action("session.close", a));
	}
	v1cmd_free(c);
}

static void on_stream(struct session *s, int stream, const char *data, size_t n)
{
	struct v1cmd *c = by_session(s);
	if (!c || c->ended || !n)
		return;
	buf_append(stream == 2 ? &c->err : &c->out, data, n);
	tail_keep(stream == 2 ? &c->tail_err : &c->tail_out, data, n);
	uint64_t now = mono_us();
	if (c->out.len + c->held_out.n >= V1_PIECE_MAX ||
	    c->err.len + c->held_err.n >= V1_PIECE_MAX ||
	    now - c->last_flush >= V1_FLUSH_US) {
		flush(c, 0);
	} else if (!c->flush_armed) {
		c->flush_armed = 1;
		server_timer(&c->flush_sul, flush_timer, c->last_flush + V1_FLUSH_US - now);
	}
}

static void end(struct v1cmd *c, int code)
{
	if (c->ended)
		return;
	c->ended = 1;
	c->exit_code = c->timed_out ? -1 : code;
	lws_sul_cancel(&c->timeout_sul);
	lws_sul_cancel(&c->kill_sul);
	flush(c, 1);
	v1_touch();
	server_timer(&c->close_sul, close_timer, 1);   /* not from inside its exit */
}

static void on_exit_(struct session *s)
{
	struct v1cmd *c = by_session(s);
	if (c)
		end(c, s->pty.exit_signal ? -s->pty.exit_signal : s->pty.exit_code);
}

static void on_gone(struct session *s)
{
	struct v1cmd *c = by_session(s);
	if (!c)
		return;
	c->s = NULL;
	end(c, -1);   /* closed by someone else first */
}

/* =========================================================== starting */

int v1_bash_start(const cJSON *req, char id[33], const char **field, const char **msg)
{
	const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(req, "command");
	const cJSON *cwd = cJSON_GetObjectItemCaseSensitive(req, "cwd");
	const cJSON *to = cJSON_GetObjectItemCaseSensitive(req, "timeout");
	*field = NULL;
	if (!cJSON_IsObject(req)) {
		*msg = "Input should be a valid dictionary or object to extract fields from";
		return -1;
	}
	if (!cmd) {
		*field = "command";
		*msg = "Field required";
		return -1;
	}
	if (!cJSON_IsString(cmd)) {
		*field = "command";
		*msg = "Input should be a valid string";
		return -1;
	}
	if (cwd && !cJSON_IsNull(cwd) && !cJSON_IsString(cwd)) {
		*field = "cwd";
		*msg = "Input should be a valid string";
		return -1;
	}
	int timeout = 300;
	if (to && !cJSON_IsNull(to)) {
		double d = cJSON_IsNumber(to) ? to->valuedouble : 0.5;
		if (cJSON_IsString(to)) {   /* "30" is an int to pydantic */
			char *e;
			long long v = strtoll(to->valuestring, &e, 10);
			d = e != to->valuestring && !*e ? (double)v : 0.5;
		}
		if (d != (double)(long long)d || d < -1e9 || d > 1e9) {
			*field = "timeout";
			*msg = "Input should be a valid integer";
			return -1;
		}
		timeout = (int)d;
	}
	const char *cwd_s = cJSON_IsString(cwd) ? cwd->valuestring : NULL;

	struct v1cmd *c = xcalloc(1, sizeof *c);
	v1_new_id(c->id);
	memcpy(id, c->id, 33);
	snprintf(c->name, sizeof c->name, "ohv1-%s", c->id);
	c->next = cmds;
	cmds = c;
	v1_touch();
	emit_command(c, cmd->valuestring, cwd_s, timeout);

	struct stat st;
	int bad = cwd_s ? stat(cwd_s, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR : 0;
	if (bad) {
		/* as asyncio's spawn fails on it */
		int e = bad;
		buf_printf(&c->err, "Error executing command: [Errno %d] %s: '%s'", e, strerror(e),
			   cwd_s);
		tail_keep(&c->tail_err, c->err.p, c->err.len);
		end(c, -1);
		return 0;
	}
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "name", c->name);
	cJSON_AddStringToObject(a, "command", cmd->valuestring);
	cJSON_AddStringToObject(a, "kind", "pipe");
	cJSON_AddBoolToObject(a, "stdin", 0);
	if (cwd_s)
		cJSON_AddStringToObject(a, "cwd", cwd_s);
	/* sh -c COMMAND itself, as asyncio.create_subprocess_shell runs it */
	char *argv[] = {"/bin/sh", "-c", cmd->valuestring, NULL};
	struct session_exec x = {.argv = argv};
	session_exec_next(&x);
	cJSON *ans = v1_action("session.open", a);
	session_exec_next(NULL);
	const cJSON *obs = ans ? cJSON_GetObjectItemCaseSensitive(ans, "observation") : NULL;
	c->s = cJSON_IsString(obs) && strcmp(obs->valuestring, "error") != 0 ?
	       session_find(c->name) : NULL;
	if (!c->s) {   /* as V1 says a spawn that failed */
		const cJSON *why = ans ? cJSON_GetObjectItemCaseSensitive(ans, "content") : NULL;
		buf_printf(&c->err, "Error executing command: %s",
			   cJSON_IsString(why) ? why->valuestring : "cannot start it");
		tail_keep(&c->tail_err, c->err.p, c->err.len);
		cJSON_Delete(ans);
		end(c, -1);
		return 0;
	}
	cJSON_Delete(ans);
	if (timeout > 0) {
		c->deadline = mono_us() + (uint64_t)timeout * 1000000u;
		server_timer(&c->timeout_sul, timeout_timer, (uint64_t)timeout * 1000000u);
	}
	return 0;
}

/* ============================================================== routes */

/* the request's body as an ExecuteBashRequest, started: 0 and its id, or
 * -1 once a 422 is answered */
static int start_from(struct http_txn *t, char id[33])
{
	cJSON *req = cJSON_ParseWithLength(t->body.p ? t->body.p : "", t->body.len);
	if (!req) {
		v1_422(t, "body", NULL, "json_invalid", "JSON decode error", NULL, NULL, 0);
		return -1;
	}
	const char *field, *msg;
	int r = v1_bash_start(req, id, &field, &msg);
	cJSON_Delete(req);
	if (r < 0) {
		v1_422(t, "body", field, strcmp(msg, "Field required") == 0 ? "missing" :
		       field && !strcmp(field, "timeout") ? "int_parsing" :
		       field ? "string_type" : "model_attributes_type", msg, NULL, NULL, 0);
		return -1;
	}
	return 0;
}

static void answer_event(struct http_txn *t, const struct v1_event *e)
{
	if (e)
		http_answer(t, 200, "application/json", e->json, e->len);
	else   /* (its events were dropped at once: the bound) */
		v1_detail(t, 500, "the command's event is gone");
}

static void start_route(struct http_txn *t)
{
	char id[33];
	if (start_from(t, id) == 0)   /* its BashCommand is the answer */
		answer_event(t, v1_event_find(id));
}

static void execute_route(struct http_txn *t)
{
	char id[33];
	if (start_from(t, id) < 0)
		return;
	struct v1cmd *c = cmds;
	while (c && strcmp(c->id, id) != 0)
		c = c->next;
	if (c && !c->ended) {
		struct waiter *w = xcalloc(1, sizeof *w);
		w->t = t;
		w->c = c;
		w->next = c->waiters;
		c->waiters = w;
		t->user = w;
		t->gone = waiter_gone;
		return;
	}
	/* it ended at once (it could not start): its last output event */
	answer_event(t, v1_event_last_output(id));
}

/* ============================================= upgrade in place */

/* the running commands (their output so far made events first, what is
 * held back at a character's split kept): their sessions go across, the
 * new termd follows them on */
cJSON *v1_bash_save(void)
{
	cJSON *a = cJSON_CreateArray();
	for (struct v1cmd *c = cmds; c; c = c->next) {
		if (c->ended || !c->s)
			continue;
		flush(c, 0);
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "id", c->id);
		cJSON_AddNumberToObject(o, "order", c->order);
		cJSON_AddBoolToObject(o, "timed_out", c->timed_out);
		uint64_t now = mono_us();
		cJSON_AddNumberToObject(o, "left_us", !c->deadline ? -1.0 :
					c->deadline > now ? (double)(c->deadline - now) : 0.0);
		utf8hold_save(&c->held_out, o, "held_out");
		utf8hold_save(&c->held_err, o, "held_err");
		cJSON_AddItemToArray(a, o);
	}
	return a;
}

void v1_bash_load(const cJSON *a)
{
	const cJSON *o;
	cJSON_ArrayForEach(o, a) {
		const cJSON *id = cJSON_GetObjectItem(o, "id");
		if (!cJSON_IsString(id) || strlen(id->valuestring) != 32)
			continue;
		struct v1cmd *c = xcalloc(1, sizeof *c);
		memcpy(c->id, id->valuestring, 33);
		snprintf(c->name, sizeof c->name, "ohv1-%s", c->id);
		c->order = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "order"));
		c->timed_out = cJSON_IsTrue(cJSON_GetObjectItem(o, "timed_out"));
		double left = cJSON_GetNumberValue(cJSON_GetObjectItem(o, "left_us"));
		if (left >= 0)
			c->deadline = mono_us() + (uint64_t)left;
		utf8hold_load(&c->held_out, o, "held_out");
		utf8hold_load(&c->held_err, o, "held_err");
		c->next = cmds;
		cmds = c;
	}
}

/* after the sessions are adopted: each command follows its own again;
 * one whose session did not come across ended meanwhile */
void v1_bash_loaded(void)
{
	for (struct v1cmd *c = cmds; c; c = c->next) {
		if (c->s || c->ended)
			continue;
		c->s = session_find(c->name);
		if (!c->s) {
			end(c, -1);
			continue;
		}
		if (c->timed_out)
			server_timer(&c->kill_sul, kill_timer, V1_KILL_GRACE_US);
		else if (c->deadline) {
			uint64_t now = mono_us();
			server_timer(&c->timeout_sul, timeout_timer,
				     c->deadline > now ? c->deadline - now : 1);
		}
	}
}

void v1_bash_routes(void)
{
	static const struct http_route routes[] = {
		{"POST", "/api/bash/start_bash_command", v1_admit, start_route, 0, TD_API_OPENHANDS},
		{"POST", "/api/bash/execute_bash_command", v1_admit, execute_route, 0,
		 TD_API_OPENHANDS},
	};
	static const struct session_listener l = {
		.stream = on_stream, .exit = on_exit_, .gone = on_gone,
	};
	http_routes_register(routes, sizeof routes / sizeof routes[0]);
	session_listen(&l);
}

void v1_bash_shutdown(void)
{
	while (cmds) {
		cmds->s = NULL;
		v1cmd_free(cmds);
	}
}
