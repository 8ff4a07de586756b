/* sessionctl.c — the session management actions: `session.open` (a
 * shell, a program on a pty, or a program on pipes), `session.list`,
 * `session.signal` (the foreground group, or with tree every process of
 * the session), `session.stdin` (bytes and end of file to a session's
 * input) and `session.close` (ending a session's whole process tree: HUP,
 * then KILL after 2 s, then freeing it once its process is reaped); the
 * session.exit event, and a pipe session's output as `session.output`
 * events (stdout and stderr apart, UTF-8 text or base64). */
#include "action.h"
#include "fsio.h"
#include "utf8hold.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CLOSE_KILL_DELAY_US 2000000u

static const struct {
	const char *name;
	int sig;
} signals[] = {
	{"INT", SIGINT}, {"TERM", SIGTERM}, {"KILL", SIGKILL}, {"HUP", SIGHUP},
	{"QUIT", SIGQUIT}, {"STOP", SIGSTOP}, {"CONT", SIGCONT}, {"USR1", SIGUSR1},
	{"USR2", SIGUSR2},
};

static int signal_by_name(const char *n)
{
	if (strncasecmp(n, "SIG", 3) == 0)
		n += 3;
	for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
		if (strcasecmp(signals[i].name, n) == 0)
			return signals[i].sig;
	return 0;
}

static const char *signal_name(int sig)
{
	for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
		if (signals[i].sig == sig)
			return signals[i].name;
	return "?";
}

/* usage: session.list's (session.open's answer has the limits only) */
static cJSON *session_json(struct session *s, int usage)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "name", s->name);
	cJSON_AddNumberToObject(o, "pid", s->pty.pid);
	cJSON_AddBoolToObject(o, "alive", s->pty.alive);
	if (s->pty.alive)
		cJSON_AddNullToObject(o, "exit_code");
	else
		cJSON_AddNumberToObject(o, "exit_code", s->pty.exit_code);
	const char *running = NULL;
	if (s->pty.alive) {
		if (!s->is_shell)
			running = s->command;
		else if (s->state == SH_RUNNING && s->cmd && !s->cmd->finished)
			running = s->cmd->text ? s->cmd->text : "";
	}
	if (running)
		cJSON_AddStringToObject(o, "command", running);
	else
		cJSON_AddNullToObject(o, "command");
	cJSON_AddStringToObject(o, "cwd", s->cwd ? s->cwd : "");
	cJSON_AddNumberToObject(o, "cols", s->cols);
	cJSON_AddNumberToObject(o, "rows", s->rows);
	cJSON_AddNumberToObject(o, "viewers", s->nviewers);
	cJSON_AddBoolToObject(o, "shell", s->is_shell);
	cJSON_AddStringToObject(o, "kind", s->is_pipe ? "pipe" : "pty");
	if (s->is_pipe)
		cJSON_AddBoolToObject(o, "stdin", pty_input_open(&s->pty));
	session_limits_json(s, o, usage);   /* limits, and usage where there are cgroups */
	return o;
}

static int session_open_action(struct act *a)
{
	const char *name = NULL, *command = NULL, *cwd = NULL, *kind = NULL;
	double cols = 0, rows = 0;
	int has, with_stdin = 0, has_stdin = -1;
	ARGS_KNOWN(a, "name", "command", "cwd", "kind", "stdin", "cols", "rows", "env", "limits");
	if (arg_session_name(a, "name", 1, &name) < 0 ||
	    arg_string(a, "command", &command, 0) < 0 ||
	    arg_string(a, "cwd", &cwd, 0) < 0 ||
	    arg_string(a, "kind", &kind, 0) < 0 ||
	    arg_bool(a, "stdin", &has_stdin) < 0 ||
	    arg_number(a, "cols", &cols, &has) < 0 ||
	    arg_number(a, "rows", &rows, &has) < 0)
		return -1;
	int pipe = kind && strcmp(kind, "pipe") == 0;
	if (kind && !pipe && strcmp(kind, "pty") != 0)
		return act_error(a, TD_ERR_BAD_REQUEST, "argument 'kind' is \"pty\" or \"pipe\"");
	if (pipe && (!command || !*command))
		return act_error(a, TD_ERR_BAD_REQUEST,
				 "a pipe session runs a program: argument 'command' is required");
	if (has_stdin >= 0 && !pipe)
		return act_error(a, TD_ERR_BAD_REQUEST,
				 "argument 'stdin' is for pipe sessions (a pty's input is always open)");
	with_stdin = has_stdin > 0;
	const cJSON *env = arg_json(a, "env");
	if (env) {
		const cJSON *e;
		if (!cJSON_IsObject(env)) {
			act_error(a, TD_ERR_BAD_REQUEST, "'env' must be an object of strings");
			return -1;
		}
		cJSON_ArrayForEach(e, env) {
			if (!cJSON_IsString(e) || !e->string || !*e->string || strchr(e->string, '=')) {
				act_error(a, TD_ERR_BAD_REQUEST, "'env' must be an object of strings");
				return -1;
			}
		}
	} else {
		env = NULL;
	}
	if ((cols && (cols < 2 || cols > 1000)) || (rows && (rows < 1 || rows > 1000))) {
		act_error(a, TD_ERR_BAD_REQUEST, "cols must be 2-1000 and rows 1-1000");
		return -1;
	}
	if (session_find(name)) {
		act_error(a, TD_ERR_SESSION_EXISTS, "a session named '%s' exists", name);
		return -1;
	}
	if (command && !*command)
		command = NULL;
	char err[512];
	struct cg_limits lim;
	if (session_limits_parse(arg_json(a, "limits"),
				 &lim, err, sizeof err) < 0)
		return act_error(a, TD_ERR_BAD_REQUEST, "%s", err);
	td_err code;
	struct session *s = session_open_with(name, command, cwd, env,
					      !pipe ? PTY_TERMINAL : with_stdin ? PTY_PIPES_STDIN : PTY_PIPES,
					      (int)cols, (int)rows, &lim, &code, err, sizeof err);
	if (!s)
		return act_error(a, code, "cannot open session '%s': %s", name, err);
	/* a pty program is the session's command (its output rendered as a
	 * run's is); a pipe session's output is its session.output events */
	if (command && !pipe)
		cmd_program_started(s);
	sessionctl_announce(a->conn, a->id, s);
	return 0;
}

void sessionctl_announce(struct conn *c, const cJSON *id, struct session *s)
{
	events_emit(c, id, "session.open", "", session_json(s, 0));
}

static int session_list_action(struct act *a)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON *arr = cJSON_AddArrayToObject(ex, "sessions");
	for (struct session *s = srv.sessions; s; s = s->next)
		cJSON_AddItemToArray(arr, session_json(s, 1));
	events_emit(a->conn, a->id, "session.list", "", ex);
	return 0;
}

/* session.signal with tree: every process of the session (its cgroup, or
 * its tree from /proc), a shell session's shell spared: what its commands
 * started, double-forked daemons included. Also after the session's own
 * process has ended, while something it started still runs. */
static int signal_tree_action(struct act *a, struct session *s, int sig, const char *signame)
{
	int n = session_signal_tree(s, sig, 1);
	if (!n && !s->pty.alive)
		return act_error(a, TD_ERR_NO_COMMAND, "session '%s' has ended (exit code %d) and "
				 "left nothing running", s->name, s->pty.exit_code);
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "session", s->name);
	cJSON_AddStringToObject(ex, "signal", signame);
	cJSON_AddNumberToObject(ex, "pid", s->pty.pid);
	cJSON_AddBoolToObject(ex, "tree", 1);
	cJSON_AddNumberToObject(ex, "processes", n);
	events_emit(a->conn, a->id, "session.signal", "", ex);
	return 0;
}

static int session_signal_action(struct act *a)
{
	const char *signame = NULL;
	struct session *s;
	int tree = 0;
	ARGS_KNOWN(a, "session", "signal", "tree");
	if (arg_string(a, "signal", &signame, 1) < 0 || arg_bool(a, "tree", &tree) < 0 ||
	    arg_session(a, "session", 0, &s, NULL) < 0)
		return -1;
	int sig = signal_by_name(signame);
	if (!sig) {
		act_error(a, TD_ERR_BAD_REQUEST,
			     "unknown signal '%.32s' (INT TERM KILL HUP QUIT STOP CONT USR1 USR2)", signame);
		return -1;
	}
	if (tree)
		return signal_tree_action(a, s, sig, signame);
	if (!s->pty.alive) {
		act_error(a, TD_ERR_NO_COMMAND, "session '%s' has ended (exit code %d)",
			     s->name, s->pty.exit_code);
		return -1;
	}
	pid_t pg = session_fg_pid(s);
	if (kill(-pg, sig) != 0 && kill(pg, sig) != 0) {
		act_error(a, TD_ERR_IO_ERROR, "cannot signal process group %d", (int)pg);
		return -1;
	}
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "session", s->name);
	cJSON_AddStringToObject(ex, "signal", signame);
	cJSON_AddNumberToObject(ex, "pid", pg);
	char msg[256] = "";
	if (s->is_shell && pg == s->pty.pid && s->state == SH_IDLE && !s->cont) {
		/* no job in the foreground: only the shell at its prompt got it
		 * (not one still starting, running its rc files, nor one running
		 * a loop or builtin of its own, nor reading a PS2 continuation) */
		cJSON_AddBoolToObject(ex, "job", 0);
		snprintf(msg, sizeof msg, "no foreground job in session %s: SIG%s reached only its "
			 "shell (pid %d) at its prompt; tree: true signals what runs behind it",
			 s->name, signal_name(sig), (int)pg);
	} else {
		cJSON_AddBoolToObject(ex, "job", 1);
	}
	events_emit(a->conn, a->id, "session.signal", msg, ex);
	return 0;
}

/* Every process of the session, the shell too: its cgroup, or (no
 * cgroups) the processes whose session id is the leader's, the leader's
 * descendants and its orphans (core/proctree.c). */
static void signal_tree(struct session *s, int sig)
{
	session_signal_tree(s, sig, 0);
}

static void close_kill_timer(lws_sorted_usec_list_t *sul)
{
	struct session *s = lws_container_of(sul, struct session, close_sul);
	/* the leader may be gone already; its session id still names the rest */
	signal_tree(s, SIGKILL);
	s->close_killed = 1;
	if (!s->pty.alive)
		session_destroy(s);
}

static int session_close_action(struct act *a)
{
	const char *name = NULL;
	ARGS_KNOWN(a, "name", "session");
	if (arg_session_name(a, "name", 0, &name) < 0)
		return -1;
	if (!name && arg_session_name(a, "session", 1, &name) < 0)
		return -1;
	if (strcmp(name, "main") == 0) {
		act_error(a, TD_ERR_BAD_REQUEST,
			     "main cannot be closed (use session.signal, or run exit to restart it)");
		return -1;
	}
	struct session *s = session_find(name);
	if (!s) {
		act_error(a, TD_ERR_NO_SUCH_SESSION, "no session named '%.64s'", name);
		return -1;
	}
	/* out of the list at once: the name is free again */
	for (struct session **pp = &srv.sessions; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	srv.nsessions--;
	s->next = srv.closing;
	srv.closing = s;
	s->closing = 1;
	int was_alive = s->pty.alive;
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "name", s->name);
	cJSON_AddBoolToObject(ex, "was_alive", was_alive);
	events_emit(a->conn, a->id, "session.close", "", ex);
	if (was_alive) {
		signal_tree(s, SIGHUP);
		server_timer(&s->close_sul, close_kill_timer, CLOSE_KILL_DELAY_US);
	} else {
		s->close_killed = 1;
		session_destroy(s);
	}
	return 0;
}

/* `session.stdin`: bytes to the session's input as they are (no key
 * names: `keys` is for terminals), and with eof a pipe session's stdin is
 * closed once they are written. */
static int session_stdin_action(struct act *a)
{
	const char *content = NULL;
	int b64 = 0, eof = 0;
	struct session *s;
	ARGS_KNOWN(a, "session", "content", "encoding", "eof");
	if (arg_string(a, "content", &content, 0) < 0 || arg_encoding(a, &b64) < 0 ||
	    arg_bool(a, "eof", &eof) < 0 || arg_session(a, "session", 0, &s, NULL) < 0)
		return -1;
	if (!content && !eof)
		return act_error(a, TD_ERR_BAD_REQUEST, "give 'content', 'eof': true, or both");
	if (!s->pty.alive)
		return act_error(a, TD_ERR_NO_COMMAND, "session '%s' has ended (exit code %d)",
				 s->name, s->pty.exit_code);
	if (s->is_pipe && !pty_input_open(&s->pty))
		return act_error(a, TD_ERR_BAD_REQUEST,
				 "session '%s' has no stdin open (opened without \"stdin\": true, "
				 "or closed with eof)", s->name);
	if (!s->is_pipe && eof)
		return act_error(a, TD_ERR_BAD_REQUEST,
				 "session '%s' is a terminal: its input cannot be closed (send C-d "
				 "with keys for end of file)", s->name);
	buf_t bytes = {0};
	size_t n = content ? strlen(content) : 0;
	const char *data = content;
	if (content && b64) {
		if (fsio_b64_decode(content, n, &bytes) < 0) {
			buf_free(&bytes);
			return act_error(a, TD_ERR_BAD_REQUEST, "argument 'content' is not valid base64");
		}
		data = bytes.p;
		n = bytes.len;
	}
	/* input waits in termd's memory while the program does not read: up
	 * to --stdin-max, then refused whole (nothing written: never lost
	 * without a word) */
	size_t queued = pty_queued(&s->pty);
	if (n && (n > opts.stdin_max || queued > opts.stdin_max - n)) {
		buf_free(&bytes);
		cJSON *ex = cJSON_CreateObject();
		cJSON_AddStringToObject(ex, "session", s->name);
		cJSON_AddNumberToObject(ex, "queued", (double)queued);
		cJSON_AddNumberToObject(ex, "limit", (double)opts.stdin_max);
		return act_error_extras(a, TD_ERR_TOO_LARGE, ex,
					"session '%s' has %zu bytes of input waiting that its program has "
					"not read; %zu more would pass --stdin-max (%zu bytes): nothing "
					"was written", s->name, queued, n, opts.stdin_max);
	}
	if (n)
		session_write(s, data, n);
	buf_free(&bytes);
	if (eof)
		session_close_stdin(s);
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "session", s->name);
	cJSON_AddNumberToObject(ex, "bytes", (double)n);
	cJSON_AddBoolToObject(ex, "eof", eof);
	events_emit(a->conn, a->id, "session.stdin", "", ex);
	return 0;
}

/* ------------------------------------------- a pipe session's output */

/* a pipe session's output kept whole in the event ring and log: the
 * first 4 MiB; past that its events reach subscribers whole, and the ring
 * keeps a note of the bytes (a flood cannot push every other event out) */
#define OUTPUT_KEPT_MAX (4u << 20)

/* per pipe session: the end of a stream's last chunk that began a UTF-8
 * character still to come, and the bytes kept so far */
struct tail {
	struct tail *next;
	struct session *s;
	struct utf8hold held[2];   /* stdout's, stderr's */
	size_t kept;
};
static struct tail *tails;

static struct tail **tail_find(struct session *s)
{
	struct tail **pp = &tails;
	while (*pp && (*pp)->s != s)
		pp = &(*pp)->next;
	return pp;
}

static void output_event(struct session *s, struct tail *t, int stream, const char *data,
			 size_t n)
{
	int keep = t->kept + n <= OUTPUT_KEPT_MAX;
	const char *sname = stream == 2 ? "stderr" : "stdout";
	if (!keep && !events_subscribers()) {   /* only its note is kept: the note alone */
		cJSON *note = cJSON_CreateObject();
		cJSON_AddStringToObject(note, "session", s->name);
		cJSON_AddStringToObject(note, "stream", sname);
		cJSON_AddStringToObject(note, "encoding", "utf-8");
		cJSON_AddNumberToObject(note, "bytes", (double)n);
		cJSON_AddBoolToObject(note, "kept", 0);
		events_emit_live("session.output", "", cJSON_CreateObject(), note);
		return;
	}
	int text = utf8_text(data, n, NULL);
	buf_t b = {0};
	if (!text)
		fsio_b64_encode(data, n, &b);
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "session", s->name);
	cJSON_AddStringToObject(ex, "stream", sname);
	cJSON_AddStringToObject(ex, "encoding", text ? "utf-8" : "base64");
	cJSON_AddNumberToObject(ex, "bytes", (double)n);
	if (text) {
		buf_append(&b, data, n);
		buf_putc(&b, 0);
	}
	if (keep) {
		t->kept += n;
		events_emit(NULL, NULL, "session.output", b.p ? b.p : "", ex);
	} else {
		cJSON_AddBoolToObject(ex, "kept", 0);
		cJSON *note = cJSON_Duplicate(ex, 1);
		cJSON_ReplaceItemInObject(note, "encoding", cJSON_CreateString("utf-8"));
		events_emit_live("session.output", b.p ? b.p : "", ex, note);
	}
	buf_free(&b);
}

static void on_stream(struct session *s, int stream, const char *data, size_t n)
{
	struct tail **pp = tail_find(s), *t = *pp;
	int k = stream == 2;
	buf_t b = {0};
	if (!t) {
		t = *pp = xcalloc(1, sizeof *t);
		t->s = s;
	}
	utf8hold_raw(&t->held[k], data, n, &b);
	if (b.len)
		output_event(s, t, stream, b.p, b.len);
	buf_free(&b);
}

/* a held-back beginning of a character that never came, and the record */
static void tail_flush(struct session *s)
{
	struct tail **pp = tail_find(s), *t = *pp;
	if (!t)
		return;
	*pp = t->next;
	for (int k = 0; k < 2; k++)
		if (t->held[k].n)
			output_event(s, t, k + 1, t->held[k].b, t->held[k].n);
	free(t);
}

/* The held-back beginnings go across an upgrade in place with their
 * sessions (else the character's first bytes were lost, the rest sent
 * alone as base64), with the count of bytes kept (the 4 MiB bound goes
 * on, not again from 0). */
cJSON *sessionctl_handover_save(void)
{
	cJSON *a = cJSON_CreateArray();
	for (struct tail *t = tails; t; t = t->next) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "session", t->s->name);
		cJSON_AddNumberToObject(o, "kept", (double)t->kept);
		for (int k = 0; k < 2; k++)
			utf8hold_save(&t->held[k], o, k ? "stderr" : "stdout");
		cJSON_AddItemToArray(a, o);
	}
	return a;
}

void sessionctl_handover_load(const cJSON *arr)
{
	const cJSON *o;
	cJSON_ArrayForEach(o, arr) {
		const cJSON *name = cJSON_GetObjectItem(o, "session");
		const cJSON *kept = cJSON_GetObjectItem(o, "kept");
		struct session *s = cJSON_IsString(name) ? session_find(name->valuestring) : NULL;
		if (!s || !s->is_pipe || *tail_find(s))
			continue;
		struct tail *t = xcalloc(1, sizeof *t);
		t->s = s;
		t->kept = cJSON_IsNumber(kept) && kept->valuedouble > 0 ? (size_t)kept->valuedouble : 0;
		for (int k = 0; k < 2; k++)
			utf8hold_load(&t->held[k], o, k ? "stderr" : "stdout");
		t->next = tails;
		tails = t;
	}
}

static void on_gone(struct session *s)
{
	struct tail **pp = tail_find(s), *t = *pp;
	if (t) {
		*pp = t->next;
		free(t);
	}
}

/* The session's process ended: the session.exit event (after the
 * listeners registered before: answers, viewers' exit frames). */
static void sessionctl_on_exit(struct session *s)
{
	tail_flush(s);
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "name", s->name);
	cJSON_AddNumberToObject(ex, "exit_code", s->pty.exit_code);
	int sig = s->pty.exit_signal;
	const char *signame = sig ? sigabbrev_np(sig) : NULL;
	if (signame)
		cJSON_AddStringToObject(ex, "signal", signame);   /* "KILL", as session.signal names it */
	else if (sig)
		cJSON_AddNumberToObject(ex, "signal", sig);
	else
		cJSON_AddNullToObject(ex, "signal");
	events_emit(NULL, NULL, "session.exit", "", ex);
}

/* a session arg_session opened (actions.c's hook): announced as
 * session.open's are, with no client's id */
static void announce_opened(struct session *s)
{
	sessionctl_announce(NULL, NULL, s);
}

void sessionctl_register(void)
{
	actions_on_session_opened(announce_opened);
	static const struct session_listener l = {
		.exit = sessionctl_on_exit, .stream = on_stream, .gone = on_gone,
	};
	session_listen(&l);
	static const struct action_def defs[] = {
		{"session.open", session_open_action, 0},
		{"session.list", session_list_action, ACT_READONLY},
		{"session.signal", session_signal_action, 0},
		{"session.close", session_close_action, 0},
		{"session.stdin", session_stdin_action, 0},
	};
	actions_register(defs, sizeof defs / sizeof defs[0]);
}
