/* process.c — envd's process.Process on termd sessions: Start opens
 * a session (session.open through the action layer, so it is on the
 * event stream, has a screen, viewers, /tty and recordings like any
 * other) running the process, and streams its output; Connect (by pid or
 * tag) attaches again and first gets what was printed while nobody was
 * attached; List, SendInput, SendSignal (session.signal with tree), Update
 * (resize), CloseStdin. A process asked for without a PTY is a pipe
 * session (session.open kind "pipe": no terminal, stdin a pipe only when
 * asked for, stdout and stderr apart); its input and end of file go
 * through session.stdin. A session listener follows the processes'
 * output (a PTY's bytes, a pipe's two streams) and end. The session
 * execs the program itself (session_exec_next: no shell in between), as
 * the request's user when termd is root (ids switched in the child); its
 * command reads as `exec setpriv ... -- CMD ARGS`, what it runs. A
 * stream whose client reads slower than the process writes holds the
 * process (its output is not read while the stream is behind: its pipe
 * or terminal fills and the writer blocks); nothing is dropped, and a
 * client that takes nothing for --stream-stall seconds is cut
 * (envd_stream_hold). The table goes across an upgrade in place
 * (envd_handover_save/load/done): the processes run on as sessions and
 * their clients Connect again. */
#include "envd.h"
#include "fsio.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MISSED_MAX (8u << 20)     /* output kept while nobody is attached */
#define ENDED_KEEP_US (60u * 1000000u) /* an end nobody saw is kept this long */

struct eproc {
	struct eproc *next;
	char name[TD_SESSION_NAME_MAX + 1]; /* its termd session */
	struct session *s;        /* NULL once the session is gone */
	pid_t pid;
	int pty;                  /* a PTY process (else stdout only) */
	char *tag;
	cJSON *config;            /* ProcessConfig as given, for List */
	buf_t missed;             /* output while no stream was attached:
				   * records of kind (1: stdout/pty, 2: stderr),
				   * 4-byte length, bytes */
	struct envd_stream *streams;
	int ended, end_seen, closed;
	int exit_code, exited;
	int holding;              /* its output held for a stream that is behind */
	int adopting;             /* taken over by an upgrade: its session not found yet */
	char status[64];
	lws_sorted_usec_list_t close_sul, free_sul;
};

static struct {
	struct eproc *procs;
	unsigned long long nseq;
	int adopting;             /* processes taken over whose session is not found yet */
} ep;

static struct eproc *by_session(struct session *s)
{
	for (struct eproc *p = ep.procs; p; p = p->next)
		if (p->s == s)
			return p;
	/* during an upgrade's adoption: its session by name */
	for (struct eproc *p = ep.procs; ep.adopting && p; p = p->next)
		if (p->adopting && !p->ended && strcmp(p->name, s->name) == 0) {
			p->adopting = 0;
			ep.adopting--;
			p->s = s;
			return p;
		}
	return NULL;
}

static void eproc_free(struct eproc *p)
{
	if (p->holding && p->s)
		fair_out_hold(p->s, 0);
	p->holding = 0;
	for (struct eproc **pp = &ep.procs; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	while (p->streams) {
		struct envd_stream *st = p->streams;
		p->streams = st->next;
		st->p = NULL;
		envd_stream_finish(st, EC_UNAVAILABLE, "termd is stopping");
	}
	lws_sul_cancel(&p->close_sul);
	lws_sul_cancel(&p->free_sul);
	free(p->tag);
	cJSON_Delete(p->config);
	buf_free(&p->missed);
	free(p);
}

/* ================================================================ events */

static cJSON *event_msg(const char *kind, cJSON **inner)
{
	cJSON *m = cJSON_CreateObject();
	cJSON *e = cJSON_AddObjectToObject(m, "event");
	*inner = cJSON_AddObjectToObject(e, kind);
	return m;
}

static cJSON *start_msg(struct eproc *p)
{
	cJSON *in, *m = event_msg("start", &in);
	cJSON_AddNumberToObject(in, "pid", p->pid);
	return m;
}

static cJSON *data_msg(struct eproc *p, int kind, const char *data, size_t n)
{
	cJSON *in, *m = event_msg("data", &in);
	envd_add_bytes(in, kind == 2 ? "stderr" : p->pty ? "pty" : "stdout", data, n);
	return m;
}

static cJSON *end_msg(struct eproc *p)
{
	cJSON *in, *m = event_msg("end", &in);
	cJSON_AddNumberToObject(in, "exitCode", p->exit_code);
	cJSON_AddBoolToObject(in, "exited", p->exited);
	cJSON_AddStringToObject(in, "status", p->status);
	return m;
}

/* its output held while a stream of its is behind (and it runs) */
static void proc_hold_update(struct eproc *p)
{
	int hold = 0;
	for (struct envd_stream *st = p->streams; st; st = st->next)
		hold |= st->held;
	if (p->ended || !p->s)
		hold = 0;
	if (hold == p->holding)
		return;
	p->holding = hold;
	fair_out_hold(p->s, hold);
}

static void stream_held_changed(struct envd_stream *st)
{
	if (st->p)
		proc_hold_update(st->p);
}

static void unlink_stream(struct eproc *p, struct envd_stream *st)
{
	for (struct envd_stream **pp = &p->streams; *pp; pp = &(*pp)->next)
		if (*pp == st) {
			*pp = st->next;
			break;
		}
	st->p = NULL;
	proc_hold_update(p);
}

static void stream_unlink(struct envd_stream *st)
{
	if (st->p)
		unlink_stream(st->p, st);
}

static size_t rec_len(const char *r)
{
	const unsigned char *u = (const unsigned char *)r + 1;
	return (size_t)u[0] << 24 | (size_t)u[1] << 16 | (size_t)u[2] << 8 | u[3];
}

/* data to every attached stream, or kept for the next one (the oldest
 * records dropped past MISSED_MAX) */
static void deliver(struct eproc *p, int kind, const char *data, size_t n)
{
	if (!n)
		return;
	if (!p->streams) {
		if (n > MISSED_MAX) {
			data += n - MISSED_MAX;
			n = MISSED_MAX;
		}
		unsigned char h[5] = {(unsigned char)kind, (unsigned char)(n >> 24),
				      (unsigned char)(n >> 16), (unsigned char)(n >> 8), (unsigned char)n};
		buf_append(&p->missed, h, 5);
		buf_append(&p->missed, data, n);
		/* past the limit, the oldest records go down to 3/4 of it
		 * (a process printing fast moves the buffer now and then) */
		if (p->missed.len > MISSED_MAX + 5) {
			size_t drop = 0;
			while (p->missed.len - drop > MISSED_MAX / 4 * 3)
				drop += 5 + rec_len(p->missed.p + drop);
			buf_consume(&p->missed, drop);
		}
		return;
	}
	/* {"event":{"data":{KEY:BASE64}}} written once, for every stream, as
	 * data_msg would print it (base64 needs no escapes) */
	buf_t b = {0};
	buf_reserve(&b, 5 + 40 + (n + 2) / 3 * 4);
	b.len = 5;
	buf_puts(&b, "{\"event\":{\"data\":{\"");
	buf_puts(&b, kind == 2 ? "stderr" : p->pty ? "pty" : "stdout");
	buf_puts(&b, "\":\"");
	fsio_b64_encode(data, n, &b);
	buf_puts(&b, "\"}}}");
	for (struct envd_stream *st = p->streams, *next; st; st = next) {
		next = st->next;
		/* a client that reads slower holds the process
		 * (envd_stream_hold): only one message over --stream-max cuts */
		if (envd_stream_send_json(st, &b) == HTTP_STREAM_CUT) {
			unlink_stream(p, st);
			envd_stream_finish(st, EC_RESOURCE_EXHAUSTED,
					   "a message larger than --stream-max");
		}
	}
	buf_free(&b);
}

/* the end to every attached stream; the process is freed once someone saw it */
static void deliver_end(struct eproc *p)
{
	while (p->streams) {
		struct envd_stream *st = p->streams;
		p->streams = st->next;
		st->p = NULL;
		envd_stream_send(st, end_msg(p));
		envd_stream_finish(st, 0, NULL);
		p->end_seen = 1;
	}
}

static void free_timer(lws_sorted_usec_list_t *sul)
{
	eproc_free(lws_container_of(sul, struct eproc, free_sul));
}

/* after the exit: the session closed through the action layer (the name
 * is free again); the record kept for a reconnect if nobody saw the end */
static void close_timer(lws_sorted_usec_list_t *sul)
{
	struct eproc *p = lws_container_of(sul, struct eproc, close_sul);
	if (p->s) {
		cJSON *args = cJSON_CreateObject();
		cJSON_AddStringToObject(args, "name", p->name);
		cJSON_Delete(envd_action("session.close", args));
	}
	p->closed = 1;
	if (p->end_seen)
		eproc_free(p);
	else
		server_timer(&p->free_sul, free_timer, ENDED_KEEP_US);
}

/* a PTY process's bytes */
static void proc_on_output(struct session *s, const char *data, size_t n)
{
	struct eproc *p = s->is_pipe ? NULL : by_session(s);
	if (p && !p->ended)
		deliver(p, 1, data, n);
}

/* a pipe process's stdout (1) and stderr (2) */
static void proc_on_stream(struct session *s, int stream, const char *data, size_t n)
{
	struct eproc *p = by_session(s);
	if (p && !p->ended)
		deliver(p, stream, data, n);
}

static void proc_on_exit(struct session *s)
{
	struct eproc *p = by_session(s);
	if (!p || p->ended)
		return;
	p->ended = 1;
	proc_hold_update(p);
	int sig = s->pty.exit_signal;
	if (sig) {
		/* as Go's ProcessState says it */
		const char *d = strsignal(sig);
		char low[48];
		snprintf(low, sizeof low, "%s", d ? d : "unknown");
		if (low[0] >= 'A' && low[0] <= 'Z')
			low[0] = (char)(low[0] - 'A' + 'a');
		snprintf(p->status, sizeof p->status, "signal: %s", low);
		p->exit_code = -1;
		p->exited = 0;
	} else {
		p->exit_code = s->pty.exit_code;
		p->exited = 1;
		snprintf(p->status, sizeof p->status, "exit status %d", p->exit_code);
	}
	deliver_end(p);
	/* not from inside the session's own exit */
	server_timer(&p->close_sul, close_timer, 1);
}

static void proc_on_gone(struct session *s)
{
	struct eproc *p = by_session(s);
	if (!p)
		return;
	p->holding = 0;   /* (the session is gone, with its hold) */
	p->s = NULL;
	if (!p->ended) {   /* closed by someone else before its end was seen */
		p->ended = 1;
		p->exit_code = -1;
		snprintf(p->status, sizeof p->status, "signal: killed");
		deliver_end(p);
		server_timer(&p->close_sul, close_timer, 1);
	}
}

/* ============================================================= selectors */

/* the process a ProcessSelector names: running ones, and ended ones whose
 * end nobody has seen yet */
static struct eproc *find_proc(struct envd_call *c, const cJSON *sel)
{
	double pid;
	const char *tag = envd_str(sel, "tag", NULL);
	if (envd_num(sel, "pid", NULL, &pid) == 0) {
		for (struct eproc *p = ep.procs; p; p = p->next)
			if (p->pid == (pid_t)pid && !p->end_seen)
				return p;
		envd_fail(c, EC_NOT_FOUND, "process with pid %.0f not found", pid);
		return NULL;
	}
	if (tag) {
		for (struct eproc *p = ep.procs; p; p = p->next)
			if (p->tag && strcmp(p->tag, tag) == 0 && !p->end_seen)
				return p;
		envd_fail(c, EC_NOT_FOUND, "process with tag %.64s not found", tag);
		return NULL;
	}
	envd_fail(c, EC_INVALID_ARGUMENT, "a process selector needs pid or tag");
	return NULL;
}

static struct eproc *running(struct envd_call *c)
{
	struct eproc *p = find_proc(c, envd_field(c->req, "process", NULL));
	if (p && (p->ended || !p->s)) {
		envd_fail(c, EC_NOT_FOUND, "process with pid %d has ended", (int)p->pid);
		return NULL;
	}
	return p;
}

/* ================================================================ calls */

static void shell_quote(buf_t *b, const char *s)
{
	buf_putc(b, '\'');
	for (; *s; s++) {
		if (*s == '\'')
			buf_puts(b, "'\\''");
		else
			buf_putc(b, *s);
	}
	buf_putc(b, '\'');
}

/* the error a termd action answered, as a Connect error */
static int action_failed(struct envd_call *c, cJSON *ans, const char *what)
{
	const cJSON *ex = envd_field(ans, "extras", NULL);
	const char *code = envd_str(ex, "code", NULL);
	const char *msg = envd_str(ans, "content", NULL);
	enum envd_code ec = EC_INTERNAL;
	if (code && strcmp(code, "bad_request") == 0)
		ec = EC_INVALID_ARGUMENT;
	else if (code && strcmp(code, "too_large") == 0)
		ec = EC_RESOURCE_EXHAUSTED;
	else if (code && (strcmp(code, "no_such_session") == 0 || strcmp(code, "no_command") == 0))
		ec = EC_NOT_FOUND;
	envd_fail(c, ec, "%s: %s", what, msg ? msg : "no answer");
	cJSON_Delete(ans);
	return 0;
}

static int is_error(const cJSON *ans)
{
	const char *o = envd_str(ans, "observation", NULL);
	return !o || strcmp(o, "error") == 0;
}

static int proc_start(struct envd_call *c)
{
	const cJSON *pc = envd_field(c->req, "process", NULL);
	const char *cmd = envd_str(pc, "cmd", NULL);
	if (!cmd || !*cmd)
		return envd_fail(c, EC_INVALID_ARGUMENT, "process.cmd is required");
	const cJSON *args = envd_field(pc, "args", NULL);
	if (args && !cJSON_IsArray(args))
		return envd_fail(c, EC_INVALID_ARGUMENT, "process.args must be a list of strings");
	const cJSON *a;
	cJSON_ArrayForEach(a, args) {
		if (!cJSON_IsString(a))
			return envd_fail(c, EC_INVALID_ARGUMENT, "process.args must be a list of strings");
	}
	const cJSON *envs = envd_field(pc, "envs", NULL);
	if (envs && !cJSON_IsObject(envs))
		return envd_fail(c, EC_INVALID_ARGUMENT, "process.envs must be a map of strings");
	const cJSON *pty = envd_field(c->req, "pty", NULL);
	const cJSON *size = envd_field(pty, "size", NULL);
	double cols = 0, rows = 0;
	if (pty && (envd_num(size, "cols", NULL, &cols) < 0 || envd_num(size, "rows", NULL, &rows) < 0 ||
		    cols < 2 || cols > 1000 || rows < 1 || rows > 1000))
		return envd_fail(c, EC_INVALID_ARGUMENT, "pty.size needs cols 2-1000 and rows 1-1000");
	const cJSON *stdin_v = envd_field(c->req, "stdin", NULL);
	int want_stdin = pty || cJSON_IsTrue(stdin_v);
	const char *tag = envd_str(c->req, "tag", NULL);
	const char *cwd_in = envd_str(pc, "cwd", NULL);
	char *cwd = envd_path(cwd_in ? cwd_in : "");
	struct stat sb;
	if (!cwd || stat(cwd, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
		envd_fail(c, EC_INVALID_ARGUMENT, "cwd '%s': no such directory", cwd ? cwd : "");
		free(cwd);
		return 0;
	}

	char name[TD_SESSION_NAME_MAX + 1];
	/* after an upgrade in place the count starts again while processes of
	 * the termd before it may still run: a name in use is skipped (issue
	 * 52's soak: "a session named 'e2b-11' exists") */
	do
		snprintf(name, sizeof name, "e2b-%llu", ++ep.nseq);
	while (session_find(name));
	struct eproc *p = xcalloc(1, sizeof *p);
	buf_t line = {0};
	buf_puts(&line, "exec ");
	if (!envd_cur.self)   /* termd is root: the process runs as the user */
		buf_printf(&line, "setpriv --reuid=%u --regid=%u --init-groups -- ",
			   (unsigned)envd_cur.uid, (unsigned)envd_cur.gid);
	shell_quote(&line, cmd);
	cJSON_ArrayForEach(a, args) {
		buf_putc(&line, ' ');
		shell_quote(&line, a->valuestring);
	}
	buf_putc(&line, 0);

	cJSON *oargs = cJSON_CreateObject();
	cJSON_AddStringToObject(oargs, "name", name);
	cJSON_AddStringToObject(oargs, "command", line.p);
	if (!pty) {
		cJSON_AddStringToObject(oargs, "kind", "pipe");
		cJSON_AddBoolToObject(oargs, "stdin", want_stdin);
	}
	cJSON_AddStringToObject(oargs, "cwd", cwd);
	cJSON *env = envs ? cJSON_Duplicate(envs, 1) : cJSON_CreateObject();
	if (!envd_cur.self) {   /* the user's own, unless given */
		static const char *keys[] = {"HOME", "USER", "LOGNAME"};
		const char *vals[] = {envd_cur.home, envd_cur.name, envd_cur.name};
		for (int i = 0; i < 3; i++)
			if (!cJSON_GetObjectItemCaseSensitive(env, keys[i]))
				cJSON_AddStringToObject(env, keys[i], vals[i]);
	}
	cJSON_AddItemToObject(oargs, "env", env);
	cJSON_AddNumberToObject(oargs, "cols", pty ? cols : 200);
	cJSON_AddNumberToObject(oargs, "rows", pty ? rows : 50);
	buf_free(&line);
	/* the session runs the program itself, as the user (the command above
	 * is what it shows: the same program, the same user) */
	size_t argc = 1 + (size_t)cJSON_GetArraySize(args);
	char **argv = xcalloc(argc + 1, sizeof *argv);
	argv[0] = (char *)cmd;
	argc = 1;
	cJSON_ArrayForEach(a, args)
		argv[argc++] = a->valuestring;
	struct session_exec x = {
		.argv = argv, .as_user = !envd_cur.self, .uid = envd_cur.cred.uid,
		.gid = envd_cur.cred.gid, .ngroups = envd_cur.cred.ngroups,
		.groups = envd_cur.cred.groups,
	};
	session_exec_next(&x);
	cJSON *ans = envd_action("session.open", oargs);
	session_exec_next(NULL);
	free(argv);
	if (!ans || is_error(ans)) {
		eproc_free(p);
		free(cwd);
		return action_failed(c, ans, "cannot start the process");
	}
	cJSON_Delete(ans);
	struct session *s = session_find(name);
	if (!s) {
		eproc_free(p);
		free(cwd);
		return envd_fail(c, EC_INTERNAL, "the session went at once");
	}
	snprintf(p->name, sizeof p->name, "%s", name);
	p->s = s;
	p->pid = s->pty.pid;
	p->pty = pty != NULL;
	p->tag = tag ? xstrdup(tag) : NULL;
	p->config = cJSON_Duplicate(pc, 1);
	if (!envd_field(p->config, "cwd", NULL))
		cJSON_AddStringToObject(p->config, "cwd", cwd);
	free(cwd);
	p->next = ep.procs;
	ep.procs = p;
	struct envd_stream *st = envd_stream_open(c);
	envd_stream_hold(st, stream_held_changed);
	st->p = p;
	st->gone = stream_unlink;
	p->streams = st;
	envd_stream_send(st, start_msg(p));
	return 0;
}

static int proc_connect(struct envd_call *c)
{
	struct eproc *p = find_proc(c, envd_field(c->req, "process", NULL));
	if (!p)
		return 0;
	struct envd_stream *st = envd_stream_open(c);
	envd_stream_hold(st, stream_held_changed);
	envd_stream_send(st, start_msg(p));
	/* what it printed while nobody was attached */
	for (size_t off = 0; off + 5 <= p->missed.len;) {
		size_t n = rec_len(p->missed.p + off);
		envd_stream_send(st, data_msg(p, p->missed.p[off], p->missed.p + off + 5, n));
		off += 5 + n;
	}
	buf_free(&p->missed);
	if (p->ended) {
		envd_stream_send(st, end_msg(p));
		envd_stream_finish(st, 0, NULL);
		p->end_seen = 1;
		if (p->closed) {   /* else close_timer frees it */
			lws_sul_cancel(&p->free_sul);
			server_timer(&p->free_sul, free_timer, 1);
		}
		return 0;
	}
	st->p = p;
	st->gone = stream_unlink;
	st->next = p->streams;
	p->streams = st;
	return 0;
}

static int proc_list(struct envd_call *c)
{
	cJSON *m = cJSON_CreateObject();
	cJSON *arr = cJSON_AddArrayToObject(m, "processes");
	for (struct eproc *p = ep.procs; p; p = p->next) {
		if (p->ended)
			continue;
		cJSON *o = cJSON_CreateObject();
		cJSON_AddItemToObject(o, "config", cJSON_Duplicate(p->config, 1));
		cJSON_AddNumberToObject(o, "pid", p->pid);
		if (p->tag)
			cJSON_AddStringToObject(o, "tag", p->tag);
		cJSON_AddItemToArray(arr, o);
	}
	envd_reply(c, m);
	return 0;
}

/* session.stdin: bytes (base64) and/or end of file */
static int stdin_action(struct envd_call *c, struct eproc *p, const char *b64, int eof)
{
	cJSON *args = cJSON_CreateObject();
	cJSON_AddStringToObject(args, "session", p->name);
	if (b64) {
		cJSON_AddStringToObject(args, "content", b64);
		cJSON_AddStringToObject(args, "encoding", "base64");
	}
	if (eof)
		cJSON_AddBoolToObject(args, "eof", 1);
	cJSON *ans = envd_action("session.stdin", args);
	if (!ans || is_error(ans)) {
		const char *code = envd_str(envd_field(ans, "extras", NULL), "code", NULL);
		if (code && strcmp(code, "bad_request") == 0) {   /* no stdin open */
			envd_fail(c, EC_FAILED_PRECONDITION, "%s", envd_str(ans, "content", "no stdin"));
			cJSON_Delete(ans);
			return 0;
		}
		return action_failed(c, ans, "cannot write the process's input");
	}
	cJSON_Delete(ans);
	envd_reply(c, cJSON_CreateObject());
	return 0;
}

static int proc_send_input(struct envd_call *c)
{
	struct eproc *p = running(c);
	if (!p)
		return 0;
	const cJSON *in = envd_field(c->req, "input", NULL);
	buf_t b = {0};
	if (envd_bytes(in, "stdin", &b) < 0 || envd_bytes(in, "pty", &b) < 0) {
		buf_free(&b);
		return envd_fail(c, EC_INVALID_ARGUMENT, "input bytes are not base64");
	}
	if (!b.len) {
		buf_free(&b);
		envd_reply(c, cJSON_CreateObject());
		return 0;
	}
	/* standard base64 again (proto3's JSON also takes the URL-safe kind) */
	buf_t b64 = {0};
	fsio_b64_encode(b.p, b.len, &b64);
	buf_putc(&b64, 0);
	buf_free(&b);
	stdin_action(c, p, b64.p, 0);
	buf_free(&b64);
	return 0;
}

static int proc_close_stdin(struct envd_call *c)
{
	struct eproc *p = running(c);
	if (!p)
		return 0;
	if (p->pty)
		return envd_fail(c, EC_FAILED_PRECONDITION, "a PTY process has no stdin to close");
	return stdin_action(c, p, NULL, 1);
}

static int proc_send_signal(struct envd_call *c)
{
	struct eproc *p = running(c);
	if (!p)
		return 0;
	const cJSON *sv = envd_field(c->req, "signal", NULL);
	const char *sig = NULL;
	if (cJSON_IsString(sv)) {
		if (strcmp(sv->valuestring, "SIGNAL_SIGKILL") == 0)
			sig = "KILL";
		else if (strcmp(sv->valuestring, "SIGNAL_SIGTERM") == 0)
			sig = "TERM";
	} else if (cJSON_IsNumber(sv)) {
		if (sv->valueint == SIGKILL)
			sig = "KILL";
		else if (sv->valueint == SIGTERM)
			sig = "TERM";
	}
	if (!sig)
		return envd_fail(c, EC_INVALID_ARGUMENT, "signal is SIGNAL_SIGKILL or SIGNAL_SIGTERM");
	cJSON *args = cJSON_CreateObject();
	cJSON_AddStringToObject(args, "session", p->name);
	cJSON_AddStringToObject(args, "signal", sig);
	/* every process it started, re-parented and double-forked ones too
	 * (envd kills the leader's group only: e2b #1031's orphans) */
	cJSON_AddBoolToObject(args, "tree", 1);
	cJSON *ans = envd_action("session.signal", args);
	if (!ans || is_error(ans))
		return action_failed(c, ans, "cannot signal the process");
	cJSON_Delete(ans);
	envd_reply(c, cJSON_CreateObject());
	return 0;
}

static int proc_update(struct envd_call *c)
{
	struct eproc *p = running(c);
	if (!p)
		return 0;
	const cJSON *pty = envd_field(c->req, "pty", NULL);
	if (pty) {
		const cJSON *size = envd_field(pty, "size", NULL);
		double cols = 0, rows = 0;
		if (envd_num(size, "cols", NULL, &cols) < 0 || envd_num(size, "rows", NULL, &rows) < 0 ||
		    cols < 2 || cols > 1000 || rows < 1 || rows > 1000)
			return envd_fail(c, EC_INVALID_ARGUMENT, "pty.size needs cols 2-1000 and rows 1-1000");
		if (!p->pty)
			return envd_fail(c, EC_FAILED_PRECONDITION, "not a PTY process");
		session_resize(p->s, (int)cols, (int)rows);
	}
	envd_reply(c, cJSON_CreateObject());
	return 0;
}

int envd_process_call(struct envd_call *c, const char *method)
{
	static const struct {
		const char *name;
		int (*fn)(struct envd_call *);
	} methods[] = {
		{"Start", proc_start}, {"Connect", proc_connect}, {"List", proc_list},
		{"SendInput", proc_send_input}, {"SendSignal", proc_send_signal},
		{"Update", proc_update}, {"CloseStdin", proc_close_stdin},
	};
	for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
		if (strcmp(methods[i].name, method) == 0) {
			methods[i].fn(c);
			return 0;
		}
	return -2;
}

void envd_process_register(void)
{
	static const struct session_listener l = {
		.output = proc_on_output, .stream = proc_on_stream, .exit = proc_on_exit,
		.gone = proc_on_gone,
	};
	session_listen(&l);
}

void envd_process_shutdown(void)
{
	while (ep.procs)
		eproc_free(ep.procs);
	ep.adopting = 0;
}

/* ============================================= upgrade in place */

/* The processes as List and Connect know them (issue 52: after an upgrade
 * they were missing from List, not found by Connect, and their sessions
 * never closed): pid, tag, config, PTY or not, the output nobody saw yet,
 * and an end nobody saw. Their sessions (stdin included) go across as
 * sessions; the streams are cut and the clients Connect again. */
cJSON *envd_handover_save(void)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "nseq", (double)ep.nseq);
	cJSON *a = cJSON_AddArrayToObject(o, "procs");
	for (struct eproc *p = ep.procs; p; p = p->next) {
		if (p->end_seen || (!p->ended && !p->s))
			continue;
		cJSON *r = cJSON_CreateObject();
		cJSON_AddStringToObject(r, "name", p->name);
		cJSON_AddNumberToObject(r, "pid", p->pid);
		cJSON_AddBoolToObject(r, "pty", p->pty);
		if (p->tag)
			cJSON_AddStringToObject(r, "tag", p->tag);
		cJSON_AddItemToObject(r, "config", cJSON_Duplicate(p->config, 1));
		if (p->missed.len)
			envd_add_bytes(r, "missed", p->missed.p, p->missed.len);
		if (p->ended) {
			cJSON_AddNumberToObject(r, "exit_code", p->exit_code);
			cJSON_AddBoolToObject(r, "exited", p->exited);
			cJSON_AddStringToObject(r, "status", p->status);
		}
		cJSON_AddBoolToObject(r, "ended", p->ended);
		cJSON_AddItemToArray(a, r);
	}
	return o;
}

void envd_handover_load(const cJSON *o)
{
	double n;
	if (envd_num(o, "nseq", NULL, &n) == 0 && n > (double)ep.nseq)
		ep.nseq = (unsigned long long)n;
	const cJSON *r;
	cJSON_ArrayForEach(r, envd_field(o, "procs", NULL)) {
		const char *name = envd_str(r, "name", NULL);
		double pid;
		if (!name || strlen(name) > TD_SESSION_NAME_MAX || envd_num(r, "pid", NULL, &pid) < 0)
			continue;
		struct eproc *p = xcalloc(1, sizeof *p);
		snprintf(p->name, sizeof p->name, "%s", name);
		p->pid = (pid_t)pid;
		p->pty = cJSON_IsTrue(envd_field(r, "pty", NULL));
		const char *tag = envd_str(r, "tag", NULL);
		p->tag = tag ? xstrdup(tag) : NULL;
		const cJSON *cfg = envd_field(r, "config", NULL);
		p->config = cfg ? cJSON_Duplicate(cfg, 1) : cJSON_CreateObject();
		if (envd_bytes(r, "missed", &p->missed) < 0)
			buf_free(&p->missed);
		p->ended = cJSON_IsTrue(envd_field(r, "ended", NULL));
		p->adopting = 1;   /* (by_session takes running ones only) */
		if (p->ended) {
			double code = -1;
			envd_num(r, "exit_code", NULL, &code);
			p->exit_code = (int)code;
			p->exited = cJSON_IsTrue(envd_field(r, "exited", NULL));
			const char *st = envd_str(r, "status", NULL);
			snprintf(p->status, sizeof p->status, "%s", st ? st : "");
		} else {
			ep.adopting++;
		}
		p->next = ep.procs;
		ep.procs = p;
	}
}

/* after the sessions are adopted: each process follows its session again
 * (by_session took those an event came for already); one whose session
 * did not come across ended meanwhile, as one closed by someone else. One
 * that had ended is kept for a Connect (its session closed, should it
 * have come across), then let go. */
void envd_handover_done(void)
{
	for (struct eproc *p = ep.procs; p; p = p->next) {
		if (!p->adopting)
			continue;
		p->adopting = 0;
		p->s = session_find(p->name);
		if (!p->ended && !p->s) {
			p->ended = 1;
			p->exit_code = -1;
			snprintf(p->status, sizeof p->status, "signal: killed");
		}
		if (p->ended)
			server_timer(&p->close_sul, close_timer, 1);
	}
	ep.adopting = 0;
}