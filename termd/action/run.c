/* run.c — the `run`, `keys` and `screen` actions: their waiters (pending
 * actions, a list per session in arrival order), typing what they carry in
 * that order once the shell is ready (commands, input, keys), answering
 * with what is new since the last observation (cmd.c, output.c), hard and
 * idle timeouts, and noticing a program waiting for terminal input. A
 * session listener after cmd.c's: on the shell's marks it answers what can
 * be answered and types what waited for the prompt. */
#include "action.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

enum waiter_kind { WAIT_RUN, WAIT_KEYS };

/* An action that is waiting for something in a session. A session's
 * waiters are a list in arrival order: one `run` of a command (or a poll,
 * `run ""`) at a time, and any number of `run is_input` and `keys`, which
 * never wait behind an answer (PROTOCOL.md §4 run item 11). What they type
 * is typed in that order. */
struct waiter {
	struct pending p;         /* first: the registry's handle (id, conn) */
	struct waiter *next;      /* in the session's list */
	enum waiter_kind kind;
	struct session *s;
	int is_input;             /* run: is_input (else a command or a poll) */
	uint64_t start_us;
	uint64_t hard_us;         /* absolute deadline or 0 */
	uint64_t idle_us;         /* idle period or 0 */
	uint64_t settle_us;       /* keys: quiet period */
	size_t max_output;
	int restarted;
	int typed;                /* run: its text has been typed (or had none) */
	int detached;             /* run: answered while the shell was still starting;
				   * its command is typed at the prompt, then it goes */
	uint64_t input_seen_us;   /* run: first time it looked blocked on input */
	pid_t reader;             /* run: the process seen waiting then */
	struct cmd *pending_cmd;  /* run: the command to type when the shell is ready */
	buf_t pending_input;      /* run is_input: bytes to type after earlier waiters' */
	cJSON *pending_keys;      /* keys: typed when the shell is ready */
	lws_sorted_usec_list_t sul;
};


#define QUIET_FOR_INPUT_US    700000u  /* "nothing new for about a second" */
#define RELAY_QUIET_US      10000000u  /* a relay with no question on screen */
#define INPUT_RECHECK_US      250000u
#define DEFAULT_IDLE_S       30.0
#define DEFAULT_MAX_OUTPUT   30000
#define MAX_MAX_OUTPUT       (16 * 1024 * 1024)

/* --------------------------------------------------------------- waiters */

static void waiter_free(struct waiter *w)
{
	if (!w)
		return;
	lws_sul_cancel(&w->sul);
	if (w->s) {
		struct waiter **pp = &w->s->waiters;
		while (*pp && *pp != w)
			pp = &(*pp)->next;
		if (*pp)
			*pp = w->next;
	}
	pending_del(&w->p);
	cJSON_Delete(w->pending_keys);
	cmd_free(w->pending_cmd);
	buf_free(&w->pending_input);
	free(w);
}

static void waiter_session_gone(struct pending *p)
{
	waiter_free((struct waiter *)p);
}

static const struct pending_ops waiter_ops = {"run", waiter_session_gone};

/* A new waiter for action a, last in the session's list. */
static struct waiter *waiter_new(enum waiter_kind kind, struct session *s, struct act *a)
{
	struct waiter *w = xcalloc(1, sizeof *w);
	w->kind = kind;
	w->s = s;
	pending_add(&w->p, &waiter_ops, a, s);
	w->start_us = mono_us();
	struct waiter **pp = &s->waiters;
	while (*pp)
		pp = &(*pp)->next;
	*pp = w;
	return w;
}

/* Something the waiter still has to type (behind earlier waiters). */
static int waiter_pending(const struct waiter *w)
{
	return w->pending_cmd || w->pending_input.len || w->pending_keys;
}

static int session_has_pending(struct session *s)
{
	for (struct waiter *w = s->waiters; w; w = w->next)
		if (waiter_pending(w))
			return 1;
	return 0;
}

/* The run of a command (or a poll) waiting on s, if any: only one at a time. */
static struct waiter *command_waiter(struct session *s)
{
	for (struct waiter *w = s->waiters; w; w = w->next)
		if (w->kind == WAIT_RUN && !w->is_input && !w->detached)
			return w;
	return NULL;
}

/* Another typed run waiter that will still answer about the command. */
static int other_run_waiter(struct session *s, const struct waiter *self)
{
	for (struct waiter *w = s->waiters; w; w = w->next)
		if (w != self && w->kind == WAIT_RUN && w->typed)
			return 1;
	return 0;
}

static cJSON *screen_extras(struct session *s)
{
	cJSON *ex = cJSON_CreateObject();
	int row, col, vis;
	screen_cursor(session_screen(s), &row, &col, &vis);
	cJSON_AddStringToObject(ex, "session", s->name);
	cJSON_AddNumberToObject(ex, "cols", s->cols);
	cJSON_AddNumberToObject(ex, "rows", s->rows);
	cJSON *cur = cJSON_AddObjectToObject(ex, "cursor");
	cJSON_AddNumberToObject(cur, "row", row);
	cJSON_AddNumberToObject(cur, "col", col);
	cJSON_AddBoolToObject(ex, "cursor_visible", vis);
	cJSON_AddBoolToObject(ex, "alt_screen", screen_alt(session_screen(s)));
	cJSON_AddStringToObject(ex, "title", screen_title(session_screen(s)));
	return ex;
}

/* scrollback: lines of history to show above the screen */
static void emit_screen(struct session *s, struct conn *conn, const cJSON *id, int restarted,
			size_t scrollback, struct pending *p)
{
	buf_t text = {0};
	if (scrollback && !screen_alt(session_screen(s)))
		screen_scrollback_text(session_screen(s), scrollback, &text);
	screen_text(session_screen(s), &text);
	cJSON *ex = screen_extras(s);
	cJSON_AddNumberToObject(ex, "scrollback_lines", (double)screen_scrollback_lines(session_screen(s)));
	if (restarted)
		cJSON_AddBoolToObject(ex, "restarted", 1);
	events_emit(conn, id, "screen", text.p ? text.p : "", p ? pending_extras(p, ex) : ex);
	buf_free(&text);
}

/* The shell's foreground program, as "argv0 arg1 ..." (for a shell still
 * starting: what its rc files are running). */
static void fg_command(struct session *s, buf_t *out)
{
	char path[96];
	int pid = (int)session_fg_pid(s);
	if (pid == s->pty.pid) {
		/* the shell itself: the newest program it started, if any */
		snprintf(path, sizeof path, "/proc/%d/task/%d/children", pid, pid);
		FILE *c = fopen(path, "r");
		if (c) {
			int child;
			while (fscanf(c, "%d", &child) == 1)
				pid = child;
			fclose(c);
		}
	}
	snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	char b[256];
	size_t n = fread(b, 1, sizeof b - 1, f);
	fclose(f);
	while (n && b[n - 1] == 0)
		n--;
	for (size_t i = 0; i < n; i++)
		if (!b[i])
			b[i] = ' ';
	buf_put_text(out, b, n);   /* valid UTF-8, no control character */
}

/* A run answered before its command could be typed: the shell has not
 * shown its first prompt yet (slow rc files), or its line editor does not
 * read yet. It says so, and for how long and what the shell is running; the command stays queued and is
 * typed once, at the prompt (a `run ""` then waits for it). */
static void run_answer_starting(struct waiter *w, const char *timed_out)
{
	struct session *s = w->s;
	uint64_t now = mono_us();
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "session", s->name);
	cJSON_AddNumberToObject(ex, "exit_code", -1);
	cJSON_AddBoolToObject(ex, "running", s->pty.alive);
	cJSON_AddStringToObject(ex, "cwd", s->cwd ? s->cwd : "");
	cJSON_AddNumberToObject(ex, "pid", s->pty.pid);
	cJSON_AddNumberToObject(ex, "duration_ms", (double)(now - w->start_us) / 1000.0);
	if (timed_out)
		cJSON_AddStringToObject(ex, "timed_out", timed_out);
	else
		cJSON_AddNullToObject(ex, "timed_out");
	cJSON_AddBoolToObject(ex, "waiting_for_input", 0);
	cJSON_AddBoolToObject(ex, "alt_screen", screen_alt(session_screen(s)));
	cJSON_AddBoolToObject(ex, "truncated", 0);
	/* before its first prompt the shell is starting; after one it is up
	 * but its line editor does not read yet (a PROMPT_COMMAND or PS1's
	 * $(...) still running: at a pids limit bash retries its forks for
	 * seconds): not "starting" since its spawn */
	int up = s->state != SH_STARTING;
	cJSON *st = cJSON_AddObjectToObject(ex, up ? "shell_not_reading" : "shell_starting");
	cJSON_AddNumberToObject(st, "for_ms",
				(double)(now - (up ? s->prompt_us : s->spawned_us)) / 1000.0);
	buf_t prog = {0};
	fg_command(s, &prog);
	cJSON_AddStringToObject(st, "running", prog.p ? prog.p : "");
	cJSON_AddBoolToObject(st, "queued", w->pending_cmd != NULL);
	buf_free(&prog);
	if (w->restarted)   /* 2: the session was created for it */
		cJSON_AddBoolToObject(ex, w->restarted == 2 ? "created" : "restarted", 1);
	pending_emit(&w->p, "run", "", ex);
	if (!w->pending_cmd) {   /* a poll */
		waiter_free(w);
		return;
	}
	/* answered: no id, no client, no timers; the command waits for the
	 * prompt (still in the pending registry, so the session's end frees it) */
	cJSON_Delete(w->p.id);
	w->p.id = NULL;
	w->p.conn = NULL;
	lws_sul_cancel(&w->sul);
	w->detached = 1;
	w->hard_us = w->idle_us = 0;
}

/* The last non-empty line of the screen, trailing blanks cut. */
static void screen_last_line(struct session *s, buf_t *out)
{
	buf_t t = {0};
	screen_text(session_screen(s), &t);
	size_t end = t.len;
	while (end && (t.p[end - 1] == ' ' || t.p[end - 1] == '\n' || t.p[end - 1] == '\t'))
		end--;
	size_t start = end;
	while (start && t.p[start - 1] != '\n')
		start--;
	if (end > start)   /* what the program printed: no control character */
		buf_put_text(out, t.p + start, end - start);
	buf_free(&t);
}

/* extras.waiting: what the program waiting for input waits for (the
 * contract's §11) */
static void add_waiting(cJSON *ex, struct session *s, pid_t reader)
{
	struct inputwait_what what;
	inputwait_describe(s, reader, &what);
	cJSON *wj = cJSON_AddObjectToObject(ex, "waiting");
	cJSON_AddStringToObject(wj, "kind", inputwait_kind_name(what.kind));
	if (what.shell)
		cJSON_AddBoolToObject(wj, "shell", 1);
	buf_t prompt = {0};
	screen_last_line(s, &prompt);
	cJSON_AddStringToObject(wj, "prompt", prompt.p ? prompt.p : "");
	buf_free(&prompt);
	if (what.pid > 0)
		cJSON_AddNumberToObject(wj, "pid", what.pid);
	else
		cJSON_AddNullToObject(wj, "pid");
	buf_t cmdline = {0};
	buf_put_text(&cmdline, what.command, strlen(what.command));   /* the program's name */
	cJSON_AddStringToObject(wj, "command", cmdline.p ? cmdline.p : "");
	buf_free(&cmdline);
}

/* The run observation for waiter w, which then ends. */
static void run_answer(struct waiter *w, const char *timed_out, int waiting_input)
{
	struct session *s = w->s;
	if (w->kind == WAIT_RUN && s->pty.alive &&
	    ((w->pending_cmd && !w->detached) || (!s->cmd && !w->is_input && session_has_pending(s)))) {
		run_answer_starting(w, timed_out);
		return;
	}
	struct cmd *cmd = s->cmd;
	int finished = !cmd || cmd->finished;
	int alt = screen_alt(session_screen(s));
	int truncated = 0;
	buf_t content = {0};
	if (cmd) {
		cmd_collect(cmd, w->max_output, &content, &truncated);
		if (alt && !finished) {
			buf_reset(&content);
			truncated = 0;
			screen_text(session_screen(s), &content);
		}
	}
	uint64_t now = mono_us();
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "session", s->name);
	cJSON_AddNumberToObject(ex, "exit_code", finished ? (cmd ? cmd->exit_code : -1) : -1);
	cJSON_AddBoolToObject(ex, "running", !finished);
	cJSON_AddStringToObject(ex, "cwd", s->cwd ? s->cwd : "");
	cJSON_AddNumberToObject(ex, "pid", finished ? s->pty.pid : session_fg_pid(s));
	uint64_t end = finished && cmd && cmd->end_us ? cmd->end_us : now;
	cJSON_AddNumberToObject(ex, "duration_ms",
				cmd ? (double)(end - cmd->start_us) / 1000.0 : 0.0);
	if (timed_out)
		cJSON_AddStringToObject(ex, "timed_out", timed_out);
	else
		cJSON_AddNullToObject(ex, "timed_out");
	cJSON_AddBoolToObject(ex, "waiting_for_input", waiting_input);
	if (waiting_input)
		add_waiting(ex, s, w->reader);
	cJSON_AddBoolToObject(ex, "alt_screen", alt);
	cJSON_AddBoolToObject(ex, "truncated", truncated);
	if (truncated && cmd && cmd->out.file_path)
		cJSON_AddStringToObject(ex, "output_file", cmd->out.file_path);
	if (cmd && cmd->out.err)
		cJSON_AddStringToObject(ex, "output_error", cmd->out.err);
	if (cmd && cmd->cleared)
		cJSON_AddStringToObject(ex, "cleared", cmd->cleared);
	if (w->restarted)   /* 2: the session was created for it */
		cJSON_AddBoolToObject(ex, w->restarted == 2 ? "created" : "restarted", 1);
	if (finished && cmd)   /* left_running, killed "oom", forks_refused */
		session_cmd_extras(s, ex);
	pending_emit(&w->p, "run", content.p ? content.p : "", ex);
	buf_free(&content);
	int others = other_run_waiter(s, w);
	waiter_free(w);
	if (cmd && finished && s->cmd == cmd && !others) {
		/* nothing more to say about it: an idle session holds no output
		 * (a second waiter, e.g. the C-c that ended it, answers first) */
		cmd_free(cmd);
		s->cmd = NULL;
	}
}

static void run_check(struct waiter *w);

static void waiter_timer(lws_sorted_usec_list_t *sul)
{
	struct waiter *w = lws_container_of(sul, struct waiter, sul);
	run_check(w);
}

static void schedule_at(struct waiter *w, uint64_t when)
{
	uint64_t now = mono_us();
	server_timer(&w->sul, waiter_timer, when > now ? when - now : 1);
}

/* Decide whether waiter w can answer now; if not, set its timer. */
static void run_check(struct waiter *w)
{
	if (w->detached)
		return;   /* answered already: only its typing is left */
	struct session *s = w->s;
	uint64_t now = mono_us();
	uint64_t last = s->last_output_us > w->start_us ? s->last_output_us : w->start_us;

	if (w->kind == WAIT_KEYS) {
		if (w->pending_keys && !(w->hard_us && now >= w->hard_us) && s->pty.alive) {
			schedule_at(w, w->hard_us);
			return;
		}
		if (now - last >= w->settle_us || (w->hard_us && now >= w->hard_us) || !s->pty.alive) {
			emit_screen(s, w->p.conn, w->p.id, w->restarted, 0, &w->p);
			waiter_free(w);
			return;
		}
		uint64_t next = last + w->settle_us;
		if (w->hard_us && w->hard_us < next)
			next = w->hard_us;
		schedule_at(w, next);
		return;
	}

	if (s->cmd && s->cmd->finished && w->typed) {
		run_answer(w, NULL, 0);
		return;
	}
	if (w->hard_us && now >= w->hard_us) {
		run_answer(w, "hard", 0);
		return;
	}
	int quiet_check = (w->idle_us && now - last >= w->idle_us) ||
			  (w->typed && now - last >= QUIET_FOR_INPUT_US);
	if (quiet_check && pty_unread(&s->pty)) {
		/* e.g. the command just ended: its done mark is still unread */
		schedule_at(w, now + 5000);
		return;
	}
	if (w->idle_us && now - last >= w->idle_us) {
		run_answer(w, "idle", 0);
		return;
	}
	/* still typing: bytes not yet written to the pty, or a command typed
	 * that the shell has not shown it read (no mark yet) */
	int typing = s->pty.inq.len > 0 || (s->cmd && s->cmd->awaiting_shell);
	enum inputwait iw = IW_NO;
	pid_t reader = 0;
	if (w->typed && !typing && now - last >= QUIET_FOR_INPUT_US)
		iw = inputwait_blocked_on_tty(s, &reader);
	/* a relay (polling the tty among other descriptors) waits for input
	 * only when its screen looks like a question, or after a long quiet;
	 * a process termd cannot look into only with a question on screen */
	if (iw == IW_RELAY && !screen_cursor_after_text(session_screen(s)) &&
	    now - last < RELAY_QUIET_US)
		iw = IW_NO;
	if (iw == IW_HIDDEN && !screen_cursor_after_text(session_screen(s)))
		iw = IW_NO;
	if (iw != IW_NO) {
		/* seen twice, 30 ms apart, with no output between: a shell that
		 * just finished sits in readline too, its last bytes in flight */
		if (w->input_seen_us && w->input_seen_us > last && w->reader == reader) {
			run_answer(w, NULL, 1);
			return;
		}
		w->input_seen_us = now;
		w->reader = reader;
		schedule_at(w, now + 30000);
		return;
	}
	w->input_seen_us = 0;
	uint64_t next = UINT64_MAX;
	if (w->hard_us)
		next = w->hard_us;
	if (w->idle_us && last + w->idle_us < next)
		next = last + w->idle_us;
	if (w->typed) {
		uint64_t q = now - last >= QUIET_FOR_INPUT_US ? now + INPUT_RECHECK_US
							    : last + QUIET_FOR_INPUT_US;
		if (q < next)
			next = q;
	}
	if (next == UINT64_MAX)
		next = now + INPUT_RECHECK_US * 4;
	schedule_at(w, next);
}

/* Every waiter of s looks again (a mark came, the session ended). */
static void check_all(struct session *s)
{
	struct waiter *next;
	for (struct waiter *w = s->waiters; w; w = next) {
		next = w->next;
		if (w->typed || w->kind == WAIT_KEYS)
			run_check(w);
	}
}

/* ------------------------------------------------------- typing commands */

static void type_keys(struct session *s, const cJSON *keys)
{
	static const struct { const char *name, *bytes; } noted[] = {
		{"Enter", "\r"}, {"BSpace", "\x7f"}, {"Space", " "}, {"C-u", "\x15"},
	};
	const cJSON *k;
	cJSON_ArrayForEach(k, keys) {
		const char *v = k->valuestring;
		if (!keys_type(s, v)) {
			cmd_note_typed(s, v, strlen(v), 1);   /* literal text */
			continue;
		}
		/* the named keys that matter for naming a typed command */
		for (size_t i = 0; i < sizeof noted / sizeof noted[0]; i++)
			if (strcmp(v, noted[i].name) == 0)
				cmd_note_typed(s, noted[i].bytes, strlen(noted[i].bytes), 1);
	}
}

/* Keys and commands wait for the shell's line editor: typed earlier they
 * would reach a terminal still in cooked mode (echoed, not edited). */
static int shell_not_ready(struct session *s)
{
	return s->is_shell && s->pty.alive &&
	       (s->state == SH_STARTING || (s->state == SH_IDLE && !s->ready));
}

/* Writes a run is_input's bytes; typed into the shell's continuation
 * (PS2) they are a command being typed until the shell answers with a
 * mark. */
static void type_input(struct session *s, struct waiter *w)
{
	session_write(s, w->pending_input.p, w->pending_input.len);
	buf_free(&w->pending_input);
	w->typed = 1;
	w->start_us = mono_us();
	if (s->cont && s->cmd && !s->cmd->finished)
		s->cmd->awaiting_shell = 1;
}

/* Types what the session's waiters have pending, in their order, as far
 * as the shell is ready for it: a command needs the prompt, keys need the
 * line editor, input only that everything before it was typed. */
static void type_pending(struct session *s)
{
	struct waiter *next;
	for (struct waiter *w = s->waiters; w; w = next) {
		next = w->next;
		if (w->pending_keys) {
			if (shell_not_ready(s))
				return;
			cJSON *keys = w->pending_keys;
			w->pending_keys = NULL;
			w->start_us = mono_us();
			type_keys(s, keys);
			cJSON_Delete(keys);
			run_check(w);
		} else if (w->pending_cmd) {
			if (s->state != SH_IDLE || !s->ready)
				return;
			struct cmd *cmd = w->pending_cmd;
			w->pending_cmd = NULL;
			buf_t b = {0};
			cmd->cleared = cmd_typed_line(s);   /* the typing clears it first */
			shellint_type_command(s, cmd->text, &b);
			s->ready = 0;
			s->cont = 0;
			w->typed = 1;
			w->start_us = mono_us();
			cmd->start_us = w->start_us;
			cmd->typed = 1;
			cmd->awaiting_shell = 1;
			cmd_set(s, cmd);
			session_write(s, b.p, b.len);
			s->line_clean = 1;   /* (after the write, which clears it) */
			buf_free(&b);
			if (w->detached) {
				/* polls that came while it was queued now wait on it */
				for (struct waiter *o = s->waiters; o; o = o->next)
					if (o != w && o->kind == WAIT_RUN && !o->typed && !waiter_pending(o))
						o->typed = 1;
				waiter_free(w);
				continue;
			}
			run_check(w);
		} else if (w->pending_input.len) {
			type_input(s, w);
			run_check(w);
		}
	}
}

/* ------------------------------------------------- the session's events */

/* After cmd.c's listener has updated the shell's state: answer what can
 * be answered, type what waits for the prompt. */
static void run_on_mark(struct session *s, enum si_event ev, const char *data, size_t n,
			int code)
{
	(void)data;
	(void)n;
	(void)code;
	switch (ev) {
	case SI_MARK_DONE:
		check_all(s);
		type_pending(s);
		break;
	case SI_MARK_CONT:
		check_all(s);
		break;
	case SI_READY:
		type_pending(s);
		break;
	default:
		break;
	}
}

/* The session's process ended (cmd.c finished its command first): every
 * run answers now; nothing pending will be typed. */
static void run_on_exit(struct session *s)
{
	for (struct waiter *w = s->waiters; w; w = w->next) {
		if (w->kind != WAIT_RUN)
			continue;
		w->typed = 1;
		cmd_free(w->pending_cmd);
		w->pending_cmd = NULL;
		buf_free(&w->pending_input);
	}
	struct waiter *next;
	for (struct waiter *w = s->waiters; w; w = next) {
		next = w->next;
		if (w->detached)
			waiter_free(w);   /* answered when the shell was starting */
		else if (w->kind == WAIT_RUN && s->cmd)
			run_answer(w, NULL, 0);
		else
			run_check(w);
	}
}

/* ---------------------------------------------------------------- actions */

/* run and keys type at a terminal: a pipe session has none */
static int not_a_pipe(struct act *a, struct session *s)
{
	if (!s->is_pipe)
		return 0;
	return act_error(a, TD_ERR_BAD_REQUEST,
			 "session '%s' is a pipe session (no terminal): write its stdin with "
			 "session.stdin, read its output from session.output events or screen, "
			 "stop it with session.signal", s->name);
}

/* what a busy answer says to do next */
#define RUN_BUSY_HOW ": wait for it with an empty run (command \"\"), answer it with " \
	"is_input (termctl run --input), or stop it with C-c"

static int run_action(struct act *a)
{
	const char *command = NULL;
	int is_input = 0;
	double timeout = 0, idle = 0, max_out = DEFAULT_MAX_OUTPUT;
	int has_timeout = 0, has_idle = 0, has_max = 0;
	ARGS_KNOWN(a, "command", "session", "is_input", "timeout", "idle_timeout", "max_output");
	if (arg_string(a, "command", &command, 1) < 0 ||
	    arg_bool(a, "is_input", &is_input) < 0 ||
	    arg_number(a, "timeout", &timeout, &has_timeout) < 0 ||
	    arg_number(a, "idle_timeout", &idle, &has_idle) < 0 ||
	    arg_number(a, "max_output", &max_out, &has_max) < 0)
		return -1;
	if ((has_timeout && timeout <= 0) || (has_idle && idle < 0) || (has_max && max_out < 1)) {
		act_error(a, TD_ERR_BAD_REQUEST, "timeout must be > 0, idle_timeout >= 0, max_output >= 1");
		return -1;
	}
	int restarted;
	struct session *s;
	if (arg_session(a, "session", SESS_CREATE | SESS_RESPAWN, &s, &restarted) < 0 ||
	    not_a_pipe(a, s) < 0)
		return -1;
	/* input never waits behind an answer; a second command does */
	int new_command = !is_input && s->is_shell;
	if (new_command && command_waiter(s)) {
		act_error(a, TD_ERR_BUSY, "another action is waiting on session '%s'" RUN_BUSY_HOW,
			  s->name);
		return -1;
	}
	/* running: a command the shell runs or reads the rest of (PS2), or
	 * one still being typed */
	int running = s->state == SH_RUNNING || !s->is_shell ||
		      (s->cmd && !s->cmd->finished && (s->cmd->started || s->cmd->typed)) ||
		      session_has_pending(s);
	int has_cmd = s->cmd != NULL;   /* freed once its final answer is out */

	if (new_command && command[0]) {
		if (running) {
			act_error(a, TD_ERR_BUSY, "a command is still running in '%s'" RUN_BUSY_HOW,
				  s->name);
			return -1;
		}
	} else if ((!is_input && !command[0]) ? !(has_cmd || session_has_pending(s)) : !running) {
		int left = is_input && s->is_shell ? session_leftovers(s) : 0;
		if (left > 0) {   /* C-c with nothing in front: what runs behind it */
			cJSON *ex = cJSON_CreateObject();
			cJSON_AddNumberToObject(ex, "left_running", left);
			return act_error_extras(a, TD_ERR_NO_COMMAND, ex,
						"nothing is running in the foreground of '%s', but %d "
						"process%s earlier commands started still run%s in the "
						"background: session.signal with \"tree\": true ends them",
						s->name, left, left == 1 ? "" : "es", left == 1 ? "s" : "");
		}
		act_error(a, TD_ERR_NO_COMMAND, "nothing is running in '%s'", s->name);
		return -1;
	}

	struct waiter *w = waiter_new(WAIT_RUN, s, a);
	w->is_input = is_input;
	w->restarted = restarted;
	w->max_output = max_out > MAX_MAX_OUTPUT ? MAX_MAX_OUTPUT : (size_t)max_out;
	if (has_timeout)
		w->hard_us = w->start_us + (uint64_t)(timeout * 1e6);
	if (has_idle)
		w->idle_us = (uint64_t)(idle * 1e6);
	else if (!has_timeout)
		w->idle_us = (uint64_t)(DEFAULT_IDLE_S * 1e6);

	if (new_command && command[0]) {
		/* a new command line, typed when the shell shows its prompt */
		w->pending_cmd = cmd_new(s, command, 0);
		type_pending(s);
		if (w->pending_cmd)   /* shell not ready yet: typed on its prompt */
			run_check(w);
		return 0;
	}
	if (!s->cmd) {
		/* a session program with no command record yet */
		struct cmd *cmd = cmd_new(s, NULL, 0);
		cmd->started = 1;
		cmd_set(s, cmd);
	}
	if (is_input || (!s->is_shell && command[0])) {
		char b;
		if (keys_is_control_name(command, &b)) {
			buf_putc(&w->pending_input, b);
		} else {
			buf_puts(&w->pending_input, command);
			buf_putc(&w->pending_input, '\r');
		}
		/* typed now, unless a command or keys before it wait for the
		 * prompt: then in order, after them */
		type_pending(s);
		if (!w->typed)
			run_check(w);   /* arms its timeouts */
		return 0;
	}
	/* a poll of a command still queued for the prompt waits until typed */
	w->typed = has_cmd;
	run_check(w);
	return 0;
}

static int keys_action(struct act *a)
{
	ARGS_KNOWN(a, "session", "keys", "settle_ms", "timeout");
	const cJSON *keys = arg_json(a, "keys");
	if (!cJSON_IsArray(keys)) {
		act_error(a, TD_ERR_BAD_REQUEST, "'keys' must be an array of strings");
		return -1;
	}
	const cJSON *k;
	cJSON_ArrayForEach(k, keys) {
		if (!cJSON_IsString(k)) {
			act_error(a, TD_ERR_BAD_REQUEST, "'keys' must be an array of strings");
			return -1;
		}
	}
	double settle = 100, timeout = 5;
	int has;
	if (arg_number(a, "settle_ms", &settle, &has) < 0 ||
	    arg_number(a, "timeout", &timeout, &has) < 0)
		return -1;
	if (settle < 0 || timeout <= 0) {
		act_error(a, TD_ERR_BAD_REQUEST, "settle_ms must be >= 0 and timeout > 0");
		return -1;
	}
	int restarted;
	struct session *s;
	if (arg_session(a, "session", SESS_RESPAWN, &s, &restarted) < 0 || not_a_pipe(a, s) < 0)
		return -1;
	struct waiter *w = waiter_new(WAIT_KEYS, s, a);
	w->restarted = restarted;
	w->settle_us = (uint64_t)(settle * 1000.0);
	w->hard_us = w->start_us + (uint64_t)(timeout * 1e6);
	if (shell_not_ready(s) || session_has_pending(s)) {
		w->pending_keys = cJSON_Duplicate(keys, 1);
		run_check(w);   /* arms the timeout */
		return 0;
	}
	type_keys(s, keys);
	run_check(w);
	return 0;
}

static int screen_action(struct act *a)
{
	int restarted;
	double sb = 0;
	int has_sb = 0;
	const cJSON *sbj = arg_json(a, "scrollback");
	if (cJSON_IsBool(sbj)) {
		sb = cJSON_IsTrue(sbj) ? (double)opts.scrollback : 0;
	} else if (arg_number(a, "scrollback", &sb, &has_sb) < 0) {
		return -1;
	} else if (has_sb && (sb < 0 || sb != floor(sb))) {
		act_error(a, TD_ERR_BAD_REQUEST,
			     "scrollback is a number of lines (0 or more) or a boolean");
		return -1;
	}
	struct session *s;
	if (arg_session(a, "session", SESS_RESPAWN | SESS_ALLOW_DEAD, &s, &restarted) < 0)
		return -1;
	emit_screen(s, a->conn, a->id, restarted, sb > 1e9 ? (size_t)1e9 : (size_t)sb, NULL);
	return 0;
}

/* An upgrade in place is about to exec (handover.c): keys in flight are
 * answered now, so that their id re-sent after the reconnect gets this
 * answer and does not type them twice: keys already typed with the screen
 * as it is, keys still waiting for the shell with an error saying they
 * were not typed. */
void run_handover_answer_keys(void)
{
	for (struct session *s = srv.sessions; s; s = s->next) {
		struct waiter *next;
		for (struct waiter *w = s->waiters; w; w = next) {
			next = w->next;
			if (w->kind != WAIT_KEYS || w->detached)
				continue;
			if (w->pending_keys) {
				cJSON *ex = cJSON_CreateObject();
				cJSON_AddStringToObject(ex, "code", td_err_name(TD_ERR_BUSY));
				pending_emit(&w->p, "error", "termd was upgraded in place before these keys "
					     "could be typed (the shell was not ready): they were not typed; "
					     "send them again", ex);
			} else {
				emit_screen(s, w->p.conn, w->p.id, w->restarted, 0, &w->p);
			}
			waiter_free(w);
		}
	}
}

void run_register(void)
{
	static const struct session_listener l = {
		.mark = run_on_mark,
		.exit = run_on_exit,
	};
	session_listen(&l);
	static const struct action_def defs[] = {
		{"run", run_action, 0},
		{"keys", keys_action, 0},
		{"screen", screen_action, ACT_READONLY},
	};
	actions_register(defs, sizeof defs / sizeof defs[0]);
}
