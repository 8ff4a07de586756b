/* session.c — SWE-ReX's bash sessions on termd pty sessions named
 * swerex-<name>: /create_session (bash with SWE-ReX's PS1/PS2/PS0, the
 * startup files sourced), /run_in_session (the `bash -n` check, the
 * command typed as one unit by termd's `run`, its output the raw text
 * between the shell's start and done marks with SWE-ReX's cleaning, the
 * exit code from the done mark, check/error_msg/expect/timeout,
 * interactive commands and quits, interrupts with retries and the ^Z +
 * kill -9 fallback), /close_session, and /close's "closed but kept". A
 * command waiting for input (termd's input-wait) is still answered at the
 * timeout, as SWE-ReX does, with what it waits for in extra_info. */
#include "swerex.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXC "swerex.exceptions."
#define TEXT_KEEP (8u << 20)      /* raw text kept per session while nobody waits */

enum phase {
	P_NONE,
	P_CHECK,      /* bash -n */
	P_PREV,       /* a command left running: wait for its end first */
	P_RUN,        /* typed: wait for the done mark, an expect, the timeout */
	P_START,      /* create_session's startup line */
	P_INTR,       /* ^C sent: wait for the prompt */
	P_SUSPEND,    /* ^Z sent */
	P_KILL,       /* kill -9 %1 typed */
	P_PS1,        /* done: its prompt comes next (prev_phase: what was done) */
};

struct swsess *sw_sess_list;   /* swerex.h */

struct swsess *sw_sess_find(const char *name)
{
	for (struct swsess *s = sw_sess_list; s; s = s->next)
		if (strcmp(s->name, name) == 0)
			return s;
	return NULL;
}

static struct swsess *sess_by_termd(const struct session *ts)
{
	if (strncmp(ts->name, SW_PREFIX, strlen(SW_PREFIX)) != 0)
		return NULL;
	for (struct swsess *s = sw_sess_list; s; s = s->next)
		if (s->s == ts)
			return s;
	return NULL;
}

static void sess_free(struct swsess *s)
{
	for (struct swsess **p = &sw_sess_list; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	if (s->cur)
		s->cur->ss = NULL;
	for (struct swreq *q = s->queue; q; q = q->qnext)
		q->ss = NULL;
	buf_free(&s->text);
	free(s->name);
	free(s);
}

static void run_begin(struct swreq *r);

static void queued_start(lws_sorted_usec_list_t *sul)
{
	struct swreq *r = lws_container_of(sul, struct swreq, timer);
	if (!r->ss) {
		sw_raise(r, "builtins.RuntimeError", "shell not initialized", NULL);
		return;
	}
	run_begin(r);
}

void sw_session_req_done(struct swreq *r)
{
	struct swsess *ss = r->ss;
	r->ss = NULL;
	if (!ss)
		return;
	for (struct swreq **p = &ss->queue; *p; p = &(*p)->qnext)
		if (*p == r) {
			*p = r->qnext;
			return;
		}
	if (ss->cur != r)
		return;
	ss->cur = NULL;
	struct swreq *n = ss->queue;
	if (n) {   /* the next in line runs now (from the loop) */
		ss->queue = n->qnext;
		n->qnext = NULL;
		ss->cur = n;
		sw_timer(n, queued_start, 0);
	}
}

/* the requests in line get exc; none is left */
static void queue_raise(struct swsess *ss, const char *exc, const char *msg)
{
	while (ss->queue) {
		struct swreq *q = ss->queue;
		ss->queue = q->qnext;
		q->qnext = NULL;
		q->ss = NULL;
		sw_raise(q, exc, msg, NULL);
	}
}

/* ====================================================== the answers */

static cJSON *obs_new(const char *out, size_t n, int has_code, int code, const char *expect)
{
	cJSON *o = cJSON_CreateObject();
	char *s = xstrndup(out ? out : "", out ? n : 0);
	cJSON_AddStringToObject(o, "output", s);
	free(s);
	if (has_code)
		cJSON_AddNumberToObject(o, "exit_code", code);
	else
		cJSON_AddNullToObject(o, "exit_code");
	cJSON_AddStringToObject(o, "failure_reason", "");
	cJSON_AddStringToObject(o, "expect_string", expect ? expect : "");
	cJSON_AddStringToObject(o, "session_type", "bash");
	return o;
}

/* the raw text since from, cleaned as SWE-ReX cleans it */
static void text_since(struct swsess *ss, size_t from, size_t to, buf_t *out)
{
	if (!ss || from > ss->text.len)
		return;
	if (to > ss->text.len)
		to = ss->text.len;
	buf_t raw = {0};
	if (ss->orphan) {
		size_t end = ss->orphan_end && ss->orphan_end < from ? ss->orphan_end : from;
		if (ss->orphan_from < end)
			sw_backslashreplace(&raw, ss->text.p + ss->orphan_from, end - ss->orphan_from);
		ss->orphan = 0;
	}
	sw_backslashreplace(&raw, ss->text.p + from, to - from);
	sw_strip_control(out, raw.p ? raw.p : "", raw.len);
	buf_free(&raw);
}

/* Python's str.strip() on ASCII white space */
static void py_strip(buf_t *b)
{
	size_t a = 0, e = b->len;
	while (a < e && strchr(" \t\n\r\x0b\x0c", b->p[a]))
		a++;
	while (e > a && strchr(" \t\n\r\x0b\x0c", b->p[e - 1]))
		e--;
	memmove(b->p, b->p + a, e - a);
	b->len = e - a;
	if (b->p)
		b->p[b->len] = 0;
}

static void timeout_raise(struct swreq *r)
{
	buf_t m = {0};
	buf_puts(&m, "timeout after ");
	if (r->timeout < 0)
		buf_puts(&m, "None");
	else
		sw_float(&m, r->timeout);
	buf_puts(&m, " seconds while running command ");
	sw_repr(&m, r->cmd, strlen(r->cmd));
	cJSON *extra = NULL;
	if (r->waiting) {   /* termd knows more: what it waits for */
		extra = cJSON_CreateObject();
		cJSON_AddBoolToObject(extra, "waiting_for_input", 1);
		cJSON_AddItemToObject(extra, "waiting", r->waiting);
		r->waiting = NULL;
	}
	sw_raise(r, EXC "CommandTimeoutError", m.p, extra);
	buf_free(&m);
}

/* A normal command's end: its output and exit code, checked as asked. */
static void finish_normal(struct swreq *r, int code, const char *expect, size_t upto)
{
	struct swsess *ss = r->ss;
	buf_t out = {0};
	text_since(ss, r->text_from, upto, &out);
	int has_code = r->check != 2 && !expect;
	if (expect && r->check == 0) {   /* the exit code cannot be asked for */
		buf_free(&out);
		sw_raise(r, EXC "NoExitCodeError", "timeout while getting exit code", NULL);
		return;
	}
	if (has_code && r->check == 0 && code != 0) {
		buf_t m = {0};
		if (r->error_msg && *r->error_msg)
			buf_printf(&m, "%s: ", r->error_msg);
		buf_puts(&m, "Command ");
		sw_repr(&m, r->cmd, strlen(r->cmd));
		buf_printf(&m, " failed with exit code %d. Here is the output:\n", code);
		sw_repr(&m, out.p ? out.p : "", out.len);
		sw_raise(r, EXC "NonZeroExitCodeError", m.p, NULL);
		buf_free(&m);
		buf_free(&out);
		return;
	}
	sw_answer_obj(r, obs_new(out.p, out.len, has_code, code, expect ? expect : SW_PS1));
	buf_free(&out);
}

/* An interactive command's or quit's end (exit code 0, the pattern). */
static void finish_interactive(struct swreq *r, const char *expect, size_t upto)
{
	buf_t out = {0};
	text_since(r->ss, r->text_from, upto, &out);
	/* output.lstrip().removeprefix(command).strip(); the quit's echo too */
	py_strip(&out);
	buf_t c = {0};
	buf_puts(&c, r->cmd);
	py_strip(&c);
	if (c.len && out.len >= c.len && memcmp(out.p, c.p, c.len) == 0) {
		memmove(out.p, out.p + c.len, out.len - c.len);
		out.len -= c.len;
		out.p[out.len] = 0;
	}
	buf_free(&c);
	py_strip(&out);
	sw_answer_obj(r, obs_new(out.p, out.len, 1, 0, expect ? expect : SW_PS1));
	buf_free(&out);
}

static void finish_interrupt(struct swreq *r, const char *expect, size_t upto)
{
	buf_t out = {0};
	text_since(r->ss, r->text_from, upto, &out);
	py_strip(&out);
	/* the terminal's echo of ^C (SWE-ReX's has echo off) */
	while (out.len >= 2 && out.p[0] == '^' && out.p[1] == 'C') {
		memmove(out.p, out.p + 2, out.len - 2);
		out.len -= 2;
		out.p[out.len] = 0;
		py_strip(&out);
	}
	sw_answer_obj(r, obs_new(out.p, out.len, 1, 0, expect ? expect : SW_PS1));
	buf_free(&out);
}

/* The command is over, its prompt printed: SWE-ReX's output runs up to
 * its PS1, so what bash prints after the done mark and before the prompt
 * (job notices: "[1]+  Killed ...") is the command's too. */
static void finish_at(struct swreq *r, size_t upto)
{
	r->phase = r->prev_phase;
	if (r->phase == P_START) {
		/* SWE-ReX's: what came before the first SHELLPS1PREFIX — what
		 * the shell printed before its first prompt, that prompt (the
		 * startup line printed it: "${PS1@P}") and what the startup files
		 * printed; when the first prompt is SHELLPS1PREFIX already (the
		 * rc files left PS1 alone), only what came before it */
		buf_t pre = {0}, out = {0};
		if (r->ss) {
			r->ss->ready = 1;
			text_since(r->ss, 0, r->ss->pre_at, &pre);
		}
		text_since(r->ss, r->text_from, upto, &out);
		size_t k = 0;
		for (size_t i = 0; i < out.len; i++)   /* \[ \] of the prompt */
			if (out.p[i] != '\001' && out.p[i] != '\002')
				out.p[k++] = out.p[i];
		out.len = k;
		if (out.p)
			out.p[k] = 0;
		if (!(out.len >= strlen(SW_PS1) && !memcmp(out.p, SW_PS1, strlen(SW_PS1))))
			buf_append(&pre, out.p ? out.p : "", out.len);
		buf_free(&out);
		out = pre;
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "output", out.p ? out.p : "");
		cJSON_AddStringToObject(o, "session_type", "bash");
		buf_free(&out);
		sw_answer_obj(r, o);
	} else if (r->phase == P_INTR || r->phase == P_KILL) {
		finish_interrupt(r, NULL, upto);
	} else if (r->interactive || r->quit) {
		finish_interactive(r, NULL, upto);
	} else {
		finish_normal(r, r->done_code, NULL, upto);
	}
}

static void check_ps1(struct swreq *r)
{
	struct swsess *ss = r->ss;
	if (!ss || r->done_at > ss->text.len)
		return;
	const char *p = memmem(ss->text.p + r->done_at, ss->text.len - r->done_at, SW_PS1,
			       strlen(SW_PS1));
	if (p)
		finish_at(r, (size_t)(p - ss->text.p));
}

static void ps1_late(lws_sorted_usec_list_t *sul)
{
	/* PS1 changed by the command (SWE-ReX would wait for its own for
	 * ever): what there is */
	struct swreq *r = lws_container_of(sul, struct swreq, timer);
	finish_at(r, r->ss ? r->ss->text.len : 0);
}

/* the command is over (done mark, or run's answer): its prompt comes next */
static void on_done(struct swreq *r, int code)
{
	if (r->phase == P_PS1)
		return;
	r->prev_phase = r->phase;
	r->phase = P_PS1;
	r->done_code = code;
	r->done_at = r->ss ? r->ss->text.len : 0;
	sw_timer(r, ps1_late, 5);
	check_ps1(r);
}

/* ============================================================ expect */

/* Python's \d, \s, \w as POSIX classes (the rest is ERE already) */
static char *py_to_ere(const char *p)
{
	buf_t b = {0};
	for (; *p; p++) {
		if (p[0] == '\\' && p[1]) {
			const char *cls = NULL;
			switch (p[1]) {
			case 'd': cls = "[0-9]"; break;
			case 'D': cls = "[^0-9]"; break;
			case 's': cls = "[[:space:]]"; break;
			case 'S': cls = "[^[:space:]]"; break;
			case 'w': cls = "[[:alnum:]_]"; break;
			case 'W': cls = "[^[:alnum:]_]"; break;
			}
			if (cls) {
				buf_puts(&b, cls);
				p++;
				continue;
			}
		}
		buf_putc(&b, *p);
	}
	return buf_steal(&b);
}

/* The first of the request's expect regexes found in its output (the
 * earliest match): its pattern, and where the match starts in ss->text. */
static const char *expect_match(struct swreq *r, size_t *at)
{
	struct swsess *ss = r->ss;
	if (!r->expect || !ss || r->text_from >= ss->text.len)
		return NULL;
	buf_t hay = {0};
	buf_append(&hay, ss->text.p + r->text_from, ss->text.len - r->text_from);
	buf_putc(&hay, 0);
	const char *best = NULL;
	size_t best_at = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, r->expect) {
		if (!cJSON_IsString(e) || !e->valuestring[0])
			continue;
		char *ere = py_to_ere(e->valuestring);
		regex_t re;
		if (regcomp(&re, ere, REG_EXTENDED) == 0) {
			regmatch_t m;
			if (regexec(&re, hay.p, 1, &m, 0) == 0 &&
			    (!best || (size_t)m.rm_so < best_at)) {
				best = e->valuestring;
				best_at = (size_t)m.rm_so;
			}
			regfree(&re);
		}
		free(ere);
	}
	buf_free(&hay);
	*at = r->text_from + best_at;
	return best;
}

static void check_expect(struct swreq *r)
{
	if ((r->phase != P_RUN || !r->started) && r->phase != P_INTR)
		return;   /* (the command's own echo is not its output) */
	size_t at;
	const char *pat = expect_match(r, &at);
	if (!pat)
		return;
	if (r->phase == P_INTR)
		finish_interrupt(r, pat, at);
	else if (r->interactive || r->quit)
		finish_interactive(r, pat, at);
	else
		finish_normal(r, 0, pat, at);
}

/* ==================================================== the listener */

static void on_text(struct session *s, const char *data, size_t n)
{
	struct swsess *ss = sess_by_termd(s);
	if (!ss)
		return;
	if (!ss->cur && ss->text.len > TEXT_KEEP) {
		buf_reset(&ss->text);
		ss->orphan = 0;
	}
	buf_append(&ss->text, data, n);
	if (ss->cur && ss->cur->phase == P_PS1)
		check_ps1(ss->cur);
	else if (ss->cur)
		check_expect(ss->cur);
}

static void send_command(struct swreq *r);
static void check_ps1(struct swreq *r);
static void suspend_timer(lws_sorted_usec_list_t *sul);

static void on_mark(struct session *s, enum si_event ev, const char *data, size_t n, int code)
{
	(void)data;
	(void)n;
	struct swsess *ss = sess_by_termd(s);
	if (!ss)
		return;
	if (ev == SI_READY && !ss->prompted) {
		ss->prompted = 1;
		ss->pre_at = ss->text.len;
	} else if (ev == SI_MARK_START) {
		ss->running = 1;
		struct swreq *r = ss->cur;
		if (r && (r->phase == P_RUN || r->phase == P_START) && !r->started) {
			r->text_from = ss->text.len;   /* the output starts here */
			r->started = 1;
		}
	} else if (ev == SI_MARK_DONE) {
		ss->running = 0;
		if (ss->orphan && !ss->orphan_end)
			ss->orphan_end = ss->text.len;
		struct swreq *r = ss->cur;
		if (!r)
			return;
		if (r->phase == P_PREV)
			send_command(r);
		else if (r->phase == P_SUSPEND)
			sw_timer(r, suspend_timer, 0);
		else if (((r->phase == P_RUN || r->phase == P_START) && r->started) ||
			 r->phase == P_INTR || r->phase == P_KILL)
			on_done(r, code);   /* (a prompt before its command ran is not its end) */
	}
}

static void on_gone(struct session *s)
{
	struct swsess *ss = sess_by_termd(s);
	if (!ss)
		return;
	ss->running = 0;
	ss->s = NULL;
	struct swreq *r = ss->cur;
	if (r && r->phase != P_CHECK)
		sw_raise(r, "builtins.RuntimeError", "shell not initialized", NULL);
}

static const struct session_listener listener = {
	.text = on_text,
	.mark = on_mark,
	.gone = on_gone,
};

void sw_sessions_init(void)
{
	session_listen(&listener);
}

/* ================================================== create_session */

static void started(struct swreq *r, cJSON *ans)
{
	if (!sw_is_error(ans))
		return;   /* answered at the done mark */
	sw_raise(r, "builtins.RuntimeError", sw_ans_content(ans), NULL);
}

static void start_timeout(lws_sorted_usec_list_t *sul)
{
	struct swreq *r = lws_container_of(sul, struct swreq, timer);
	sw_raise(r, "pexpect.exceptions.TIMEOUT", "Timeout exceeded.", NULL);
}

static void opened(struct swreq *r, cJSON *ans)
{
	if (sw_is_error(ans)) {
		struct swsess *ss = r->ss;
		sw_raise(r, "builtins.RuntimeError", sw_ans_content(ans), NULL);
		if (ss)
			sess_free(ss);
		return;
	}
	r->ss->s = session_find(r->ss->sname);
	/* SWE-ReX's startup line: the files sourced, then its prompts */
	buf_t line = {0};
	buf_puts(&line, "printf %s \"${PS1@P}\" ; ");   /* the first prompt, for the answer */
	const cJSON *src = cJSON_GetObjectItemCaseSensitive(r->body, "startup_source"), *e;
	cJSON_ArrayForEach(e, src)
		if (cJSON_IsString(e))
			buf_printf(&line, "source %s ; ", e->valuestring);
	buf_puts(&line, "export PS1='" SW_PS1 "' ; export PS2='' ; export PS0=''");
	r->phase = P_START;
	r->text_from = r->ss->text.len;
	r->cmd = buf_steal(&line);
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "command", r->cmd);
	cJSON_AddStringToObject(a, "session", r->ss->sname);
	cJSON_AddNumberToObject(a, "idle_timeout", 0);
	/* startup_timeout counts for the sourcing, not for the shell's own
	 * start (a loaded machine) */
	sw_timer(r, start_timeout, sw_jnum(r->body, "startup_timeout", 1.0) + 30);
	sw_call(r, "run", a, started);
}

void sw_create_session(struct http_txn *t)
{
	struct swreq *r = sw_req_new(t);
	r->body = cJSON_ParseWithLength(t->body.p ? t->body.p : "", t->body.len);
	if (!cJSON_IsObject(r->body)) {
		sw_answer_422(r, NULL, "JSON decode error");
		return;
	}
	const char *name = sw_jstr(r->body, "session", "default");
	if (sw_sess_find(name)) {
		sw_raisef(r, EXC "SessionExistsError", "session %s already exists", name);
		return;
	}
	char sname[TD_SESSION_NAME_MAX + 1];
	if (strlen(SW_PREFIX) + strlen(name) > TD_SESSION_NAME_MAX ||
	    (snprintf(sname, sizeof sname, SW_PREFIX "%s", name), !td_valid_session_name(sname))) {
		sw_raisef(r, "builtins.ValueError", "termd cannot name a session %s%s", SW_PREFIX, name);
		return;
	}
	struct swsess *ss = xcalloc(1, sizeof *ss);
	ss->name = xstrdup(name);
	snprintf(ss->sname, sizeof ss->sname, "%s", sname);
	ss->next = sw_sess_list;
	sw_sess_list = ss;
	ss->cur = r;
	r->ss = ss;
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "name", sname);
	cJSON *env = cJSON_AddObjectToObject(a, "env");
	cJSON_AddStringToObject(env, "PS1", SW_PS1);
	cJSON_AddStringToObject(env, "PS2", "");
	cJSON_AddStringToObject(env, "PS0", "");
	cJSON_AddNumberToObject(a, "cols", 200);
	cJSON_AddNumberToObject(a, "rows", 50);
	sw_call(r, "session.open", a, opened);
}

/* ================================================== run_in_session */

static void run_timeout(lws_sorted_usec_list_t *sul)
{
	struct swreq *r = lws_container_of(sul, struct swreq, timer);
	struct swsess *ss = r->ss;
	if (ss && r->phase == P_RUN && r->started && !r->interactive && !r->quit && !ss->orphan) {
		ss->orphan = 1;   /* the command goes on; its output is kept */
		ss->orphan_from = r->text_from;
		ss->orphan_end = 0;
	}
	timeout_raise(r);
}

static void run_answered(struct swreq *r, cJSON *ans)
{
	if (sw_is_error(ans)) {
		const char *code = sw_ans_code(ans);
		if (!strcmp(code, "busy") && r->phase == P_RUN) {
			r->phase = P_PREV;   /* typed when what runs now ends */
			return;
		}
		sw_raise(r, "builtins.RuntimeError", sw_ans_content(ans), NULL);
		return;
	}
	const cJSON *ex = sw_extras(ans);
	if (!sw_jbool(ex, "running", 0)) {
		on_done(r, (int)sw_jnum(ex, "exit_code", -1));
		return;
	}
	if (sw_jbool(ex, "waiting_for_input", 0) && !r->waiting) {
		const cJSON *w = cJSON_GetObjectItemCaseSensitive(ex, "waiting");
		r->waiting = w ? cJSON_Duplicate(w, 1) : cJSON_CreateObject();
		if (r->timeout < 0 && !r->interactive && !r->quit)
			return;   /* timeout None: SWE-ReX waits for ever, so do we */
	}
	/* else the done mark, an expect or the timeout answers */
}

static void send_command(struct swreq *r)
{
	struct swsess *ss = r->ss;
	cJSON *a = cJSON_CreateObject();
	int input = (r->interactive || r->quit) && ss->running;
	char *c = xstrdup(r->cmd);
	if (input) {   /* sendline: a trailing newline is the Enter */
		size_t l = strlen(c);
		while (l && c[l - 1] == '\n')
			c[--l] = 0;
	}
	cJSON_AddStringToObject(a, "command", c);
	free(c);
	cJSON_AddStringToObject(a, "session", ss->sname);
	cJSON_AddBoolToObject(a, "is_input", input);
	cJSON_AddNumberToObject(a, "idle_timeout", 0);
	r->phase = P_RUN;
	r->started = input;   /* typed into a program: its echo is output */
	r->text_from = ss->text.len;
	sw_call(r, "run", a, run_answered);
}

/* the command as SWE-ReX runs it: nothing to run when it is only blank
 * lines and comments */
static int only_comments(const char *c)
{
	for (const char *l = c; *l;) {
		const char *e = strchr(l, '\n');
		size_t n = e ? (size_t)(e - l) : strlen(l);
		size_t i = 0;
		while (i < n && strchr(" \t\r", l[i]))
			i++;
		if (i < n && l[i] != '#')
			return 0;
		l += n + (e ? 1 : 0);
	}
	return 1;
}

static void checked(struct swreq *r, const buf_t *out, const buf_t *err, int code, int timed_out,
		    const char *why)
{
	(void)timed_out;
	if (why) {
		sw_raise(r, "builtins.RuntimeError", why, NULL);
		return;
	}
	if (code != 0) {
		buf_t m = {0}, so = {0}, se = {0};
		sw_backslashreplace(&so, out->p ? out->p : "", out->len);
		sw_backslashreplace(&se, err->p ? err->p : "", err->len);
		buf_printf(&m, "Error (exit code %d) while checking bash command \n", code);
		sw_repr(&m, r->cmd, strlen(r->cmd));
		buf_printf(&m, "\n---- Stderr ----\n%s\n---- Stdout ----\n%s", se.p ? se.p : "",
			   so.p ? so.p : "");
		cJSON *extra = cJSON_CreateObject();
		cJSON_AddStringToObject(extra, "bash_stdout", so.p ? so.p : "");
		cJSON_AddStringToObject(extra, "bash_stderr", se.p ? se.p : "");
		sw_raise(r, EXC "BashIncorrectSyntaxError", m.p, extra);
		buf_free(&m);
		buf_free(&so);
		buf_free(&se);
		return;
	}
	if (!r->ss) {   /* closed meanwhile */
		sw_raise(r, "builtins.RuntimeError", "shell not initialized", NULL);
		return;
	}
	if (only_comments(r->cmd)) {
		sw_answer_obj(r, obs_new("", 0, r->check != 2, 0, SW_PS1));
		return;
	}
	if (r->timeout >= 0)
		sw_timer(r, run_timeout, r->timeout);
	send_command(r);
}

/* ---- interrupt: ^C up to n_retry times, then ^Z and kill -9 %1 ---- */

static void intr_step(struct swreq *r);

static void intr_timer(lws_sorted_usec_list_t *sul)
{
	struct swreq *r = lws_container_of(sul, struct swreq, timer);
	r->retries++;
	intr_step(r);
}

static void intr_answered(struct swreq *r, cJSON *ans)
{
	if (sw_is_error(ans)) {
		if (!strcmp(sw_ans_code(ans), "no_command")) {   /* the prompt is there */
			finish_interrupt(r, NULL, (size_t)-1);
			return;
		}
		if (!strcmp(sw_ans_code(ans), "busy"))
			return;
		sw_raise(r, "builtins.RuntimeError", sw_ans_content(ans), NULL);
		return;
	}
	if (!sw_jbool(sw_extras(ans), "running", 0))
		on_done(r, 0);
}

static void kill_typed(struct swreq *r, cJSON *ans)
{
	if (sw_is_error(ans) && strcmp(sw_ans_code(ans), "busy") != 0) {
		sw_raise(r, "pexpect.exceptions.TIMEOUT", "Failed to interrupt session", NULL);
		return;
	}
	if (!sw_is_error(ans) && !sw_jbool(sw_extras(ans), "running", 0))
		on_done(r, 0);
}

static void kill_timeout(lws_sorted_usec_list_t *sul)
{
	struct swreq *r = lws_container_of(sul, struct swreq, timer);
	sw_raise(r, "pexpect.exceptions.TIMEOUT", "Failed to interrupt session", NULL);
}

static void kill_send(struct swreq *r)
{
	/* the job stopped: kill it as SWE-ReX does */
	r->phase = P_KILL;
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "command", "kill -9 %1");
	cJSON_AddStringToObject(a, "session", r->ss->sname);
	cJSON_AddNumberToObject(a, "idle_timeout", 0);
	sw_timer(r, kill_timeout, r->timeout > 9 ? r->timeout + 1 : 10);
	sw_call(r, "run", a, kill_typed);
}

/* ^Z was sent: the prompt back (the job stopped), or not in time */
static void suspend_timer(lws_sorted_usec_list_t *sul)
{
	struct swreq *r = lws_container_of(sul, struct swreq, timer);
	if (r->ss && !r->ss->running)
		kill_send(r);
	else
		sw_raise(r, "pexpect.exceptions.TIMEOUT", "Failed to interrupt session", NULL);
}

static void suspend_answered(struct swreq *r, cJSON *ans)
{
	if (!sw_is_error(ans) && !sw_jbool(sw_extras(ans), "running", 0) && r->phase == P_SUSPEND)
		sw_timer(r, suspend_timer, 0);   /* from the loop, not inside the answer */
}

static void intr_step(struct swreq *r)
{
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "session", r->ss->sname);
	cJSON_AddBoolToObject(a, "is_input", 1);
	cJSON_AddNumberToObject(a, "idle_timeout", 0);
	if (r->retries < r->n_retry) {
		r->phase = P_INTR;
		cJSON_AddStringToObject(a, "command", "C-c");
		sw_timer(r, intr_timer, (r->timeout > 0 ? r->timeout : 0) + 0.2);
		sw_call(r, "run", a, intr_answered);
		return;
	}
	r->phase = P_SUSPEND;
	cJSON_AddStringToObject(a, "command", "C-z");
	/* SWE-ReX gives the prompt `timeout` seconds; a loaded machine gets
	 * more here (the prompt's coming is what moves on, not the clock) */
	sw_timer(r, suspend_timer, r->timeout > 10 ? r->timeout : 10);
	sw_call(r, "run", a, suspend_answered);
}

static void run_interrupt(struct swreq *r)
{
	r->interrupt = 1;
	r->timeout = sw_jnum(r->body, "timeout", 0.2);
	r->n_retry = (int)sw_jnum(r->body, "n_retry", 3);
	r->text_from = r->ss->text.len;
	r->cmd = xstrdup("");
	if (!r->ss->running) {
		finish_interrupt(r, NULL, (size_t)-1);   /* ^C at a prompt: a new prompt */
		return;
	}
	intr_step(r);
}

void sw_run_in_session(struct http_txn *t)
{
	struct swreq *r = sw_req_new(t);
	r->body = cJSON_ParseWithLength(t->body.p ? t->body.p : "", t->body.len);
	if (!cJSON_IsObject(r->body)) {
		sw_answer_422(r, NULL, "JSON decode error");
		return;
	}
	const char *type = sw_jstr(r->body, "action_type", "bash");
	const char *name = sw_jstr(r->body, "session", "default");
	int interrupt = strcmp(type, "bash_interrupt") == 0;
	const char *cmd = sw_jstr(r->body, "command", NULL);
	if (!interrupt && !cmd) {
		sw_answer_422(r, "command", "Field required");
		return;
	}
	struct swsess *ss = sw_sess_find(name);
	if (!ss) {
		buf_t m = {0};
		buf_puts(&m, "session ");
		sw_repr(&m, name, strlen(name));
		buf_puts(&m, " does not exist");
		sw_raise(r, EXC "SessionDoesNotExistError", m.p, NULL);
		buf_free(&m);
		return;
	}
	if (ss->closed) {
		sw_raise(r, "builtins.RuntimeError", "shell not initialized", NULL);
		return;
	}
	r->ss = ss;
	if (ss->cur) {   /* SWE-ReX's server answers one request at a time: in line */
		struct swreq **p = &ss->queue;
		while (*p)
			p = &(*p)->qnext;
		*p = r;
		return;
	}
	ss->cur = r;
	run_begin(r);
}

/* the request's turn: it runs */
static void run_begin(struct swreq *r)
{
	int interrupt = strcmp(sw_jstr(r->body, "action_type", "bash"), "bash_interrupt") == 0;
	const char *cmd = sw_jstr(r->body, "command", "");
	if (r->ss->closed) {
		sw_raise(r, "builtins.RuntimeError", "shell not initialized", NULL);
		return;
	}
	if (interrupt) {
		const cJSON *ex = cJSON_GetObjectItemCaseSensitive(r->body, "expect");
		r->expect = cJSON_IsArray(ex) && cJSON_GetArraySize(ex) ? (cJSON *)ex : NULL;
		run_interrupt(r);
		return;
	}
	r->cmd = xstrdup(cmd);
	const cJSON *to = cJSON_GetObjectItemCaseSensitive(r->body, "timeout");
	r->timeout = cJSON_IsNumber(to) ? to->valuedouble : -1;
	const char *check = sw_jstr(r->body, "check", "raise");
	r->check = !strcmp(check, "silent") ? 1 : !strcmp(check, "ignore") ? 2 : 0;
	r->error_msg = xstrdup(sw_jstr(r->body, "error_msg", ""));
	r->interactive = sw_jbool(r->body, "is_interactive_command", 0);
	r->quit = sw_jbool(r->body, "is_interactive_quit", 0);
	const cJSON *ex = cJSON_GetObjectItemCaseSensitive(r->body, "expect");
	r->expect = cJSON_IsArray(ex) && cJSON_GetArraySize(ex) ? (cJSON *)ex : NULL;
	if (r->interactive || r->quit) {
		if (r->timeout >= 0)
			sw_timer(r, run_timeout, r->timeout);
		send_command(r);
		return;
	}
	/* SWE-ReX's _check_bash_command */
	buf_t sh = {0};
	buf_printf(&sh, "/usr/bin/env bash -n << 'SOUNIQUEEOF'\n%s\nSOUNIQUEEOF", cmd);
	char *argv[] = {"/bin/sh", "-c", sh.p, NULL};
	r->phase = P_CHECK;
	sw_proc_start(r, argv, NULL, NULL, 0, -1, checked);
	buf_free(&sh);
}

/* =================================================== close_session */

static void closed_one(struct swreq *r, cJSON *ans)
{
	(void)ans;
	sw_answer_json(r, 200, "{\"session_type\":\"bash\"}");
}

void sw_close_session(struct http_txn *t)
{
	struct swreq *r = sw_req_new(t);
	r->body = cJSON_ParseWithLength(t->body.p ? t->body.p : "", t->body.len);
	const char *name = sw_jstr(r->body, "session", "default");
	struct swsess *ss = sw_sess_find(name);
	if (!ss) {
		buf_t m = {0};
		buf_puts(&m, "session ");
		sw_repr(&m, name, strlen(name));
		buf_puts(&m, " does not exist");
		sw_raise(r, EXC "SessionDoesNotExistError", m.p, NULL);
		buf_free(&m);
		return;
	}
	char sname[TD_SESSION_NAME_MAX + 1];
	snprintf(sname, sizeof sname, "%s", ss->sname);
	int was_closed = ss->closed;
	buf_t m = {0};
	buf_puts(&m, "session ");
	sw_repr(&m, name, strlen(name));
	buf_puts(&m, " does not exist");
	queue_raise(ss, EXC "SessionDoesNotExistError", m.p);   /* their turn: it is gone */
	buf_free(&m);
	if (ss->cur)
		sw_raise(ss->cur, "builtins.RuntimeError", "the session was closed", NULL);
	sess_free(ss);
	if (was_closed) {
		closed_one(r, NULL);
		return;
	}
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "name", sname);
	sw_call(r, "session.close", a, closed_one);
}

/* /close: every shell ended, the names kept (SWE-ReX's runtime.close) */
void sw_sessions_close_all(void)
{
	for (struct swsess *ss = sw_sess_list; ss; ss = ss->next) {
		if (ss->closed)
			continue;
		ss->closed = 1;
		queue_raise(ss, "builtins.RuntimeError", "shell not initialized");
		if (ss->cur)
			sw_raise(ss->cur, "builtins.RuntimeError", "the runtime was closed", NULL);
		cJSON *a = cJSON_CreateObject();
		cJSON_AddStringToObject(a, "name", ss->sname);
		sw_call_detached("session.close", a);
	}
}

void sw_sessions_shutdown(void)
{
	while (sw_sess_list)
		sess_free(sw_sess_list);
}
