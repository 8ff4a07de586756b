/* cmd.c — the life of a command in a session, driven by the shell's marks:
 * the shell's state (starting, at its prompt, running, reading a
 * continuation; ready for typing), the command record (typed by an agent's
 * `run`, or named from what a person or `keys` typed), its rendered output
 * (output.c), and the command.start / command.end events. A session
 * listener: session.c hands it the output without termd's marks, and the
 * marks, before run.c's listener sees them. */
#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RENDER_WINDOW        200
#define READY_FIRST_US       5000u     /* no readline ready signal yet: look */
#define READY_POLL_US        50000u    /* ... again, twice as late each time up
					* to this, until the shell reads */
#define TYPED_MAX            8192
#define PRE_MAX              65536     /* a rejected command's echo and message */

/* the event stream, registered from above by cmd_init's caller */
static cmd_event_fn *emit_fn;

static void cmd_emit(const char *observation, const char *content, cJSON *extras)
{
	if (emit_fn)
		emit_fn(observation, content, extras);
	else
		cJSON_Delete(extras);
}

static void cmd_output_error(void *user, const char *msg, const char *path)
{
	struct cmd *cmd = user;
	log_warn("session %s: %s", cmd->sname, msg);
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "code", td_err_name(TD_ERR_IO_ERROR));
	cJSON_AddStringToObject(ex, "session", cmd->sname);
	cJSON_AddStringToObject(ex, "path", path);
	cmd_emit("error", msg, ex);
}

struct cmd *cmd_new(struct session *s, const char *text, int by_viewer)
{
	struct cmd *cmd = xcalloc(1, sizeof *cmd);
	cmd->text = text ? xstrdup(text) : NULL;
	cmd->by_viewer = by_viewer;
	cmd->exit_code = -1;
	cmd->start_us = mono_us();
	snprintf(cmd->sname, sizeof cmd->sname, "%s", s->name);
	output_init(&cmd->out, srv.rundir, s->name, opts.output_mem);
	cmd->out.on_error = cmd_output_error;
	cmd->out.user = cmd;
	cmd->render = render_new(RENDER_WINDOW, output_line, &cmd->out);
	return cmd;
}

/* A command a `run` typed that was still running when termd upgraded in
 * place (handover.c): its text, what it printed so far (fed again as
 * lines) and how long it has run; it goes on as the session's command.
 * Not started: the shell was still reading the rest of it (PS2). */
struct cmd *cmd_adopt(struct session *s, const char *text, const char *output, uint64_t ran_us,
		      int started)
{
	struct cmd *cmd = cmd_new(s, text, 0);
	cmd->typed = 1;
	cmd->started = started;
	cmd->rec_start = started;   /* its start marker is in the recording already */
	uint64_t now = mono_us();
	cmd->start_us = ran_us < now ? now - ran_us : 0;
	/* lines, the last one too (the collect drops the final newline; a
	 * line left unfinished, a prompt, is ended here) */
	for (const char *p = output; p && *p; ) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		render_feed(cmd->render, p, n);
		render_feed(cmd->render, "\r\n", 2);
		p += n + (nl != NULL);
	}
	cmd_set(s, cmd);
	return cmd;
}

void cmd_free(struct cmd *cmd)
{
	if (!cmd)
		return;
	render_free(cmd->render);
	output_free(&cmd->out);
	buf_free(&cmd->pre);
	free(cmd->cleared);
	free(cmd->text);
	free(cmd);
}

void cmd_set(struct session *s, struct cmd *cmd)
{
	if (s->cmd && s->cmd != cmd)
		cmd_free(s->cmd);
	if (cmd && s->cmd != cmd)
		session_cmd_begin(s);   /* what its answer's reasons are counted from */
	s->cmd = cmd;
}

void cmd_collect(struct cmd *cmd, size_t max_output, buf_t *out, int *truncated)
{
	buf_t live = {0};
	if (!cmd->finished) {
		render_commit_above_cursor(cmd->render);
		render_live(cmd->render, &live);
	}
	output_collect(&cmd->out, &live, max_output, out, truncated);
}

void cmd_note_typed(struct session *s, const char *data, size_t n, int by_agent)
{
	if (!s->is_shell || s->typed.len + n > TYPED_MAX)
		return;
	buf_append(&s->typed, data, n);
	if (by_agent)
		s->typed_by_agent = 1;
}

/* The command line as typed: backspaces applied, escape sequences and
 * other control bytes left out, up to the first Enter. */
static char *typed_command(const buf_t *raw)
{
	buf_t out = {0};
	buf_reserve(&out, 1);
	for (size_t i = 0; i < raw->len; i++) {
		unsigned char c = (unsigned char)raw->p[i];
		if (c == '\r' || c == '\n')
			break;
		if (c == 0x7f || c == 0x08) {
			while (out.len && ((unsigned char)out.p[out.len - 1] & 0xC0) == 0x80)
				out.len--;
			if (out.len)
				out.len--;
		} else if (c == 0x15) {          /* C-u */
			out.len = 0;
		} else if (c == 0x1b) {          /* skip an escape sequence */
			if (i + 1 < raw->len && (raw->p[i + 1] == '[' || raw->p[i + 1] == 'O')) {
				i += 2;
				while (i < raw->len && !((unsigned char)raw->p[i] >= 0x40 &&
							 (unsigned char)raw->p[i] <= 0x7e))
					i++;
			} else {
				i++;
			}
		} else if (c >= 0x20) {
			buf_putc(&out, (char)c);
		}
	}
	out.p[out.len] = 0;
	if (!out.len) {
		buf_free(&out);
		return NULL;
	}
	return buf_steal(&out);
}

char *cmd_typed_line(struct session *s)
{
	return typed_command(&s->typed);
}

static void forget_typed(struct session *s)
{
	buf_reset(&s->typed);
	s->typed_by_agent = 0;
}

static void emit_command_start(struct session *s, struct cmd *cmd)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "session", s->name);
	if (cmd->text)
		cJSON_AddStringToObject(ex, "command", cmd->text);
	else
		cJSON_AddNullToObject(ex, "command");
	cJSON_AddStringToObject(ex, "by", cmd->by_viewer ? "viewer" : "agent");
	cmd_emit("command.start", "", ex);
}

static void cmd_finish(struct session *s, struct cmd *cmd, int code)
{
	cmd->finished = 1;
	cmd->exit_code = code;
	cmd->end_us = mono_us();
	render_finish(cmd->render);
	render_free(cmd->render);   /* an idle session keeps no renderer */
	cmd->render = NULL;
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "session", s->name);
	cJSON_AddNumberToObject(ex, "exit_code", code);
	cJSON_AddStringToObject(ex, "cwd", s->cwd ? s->cwd : "");
	cJSON_AddNumberToObject(ex, "duration_ms", (double)(cmd->end_us - cmd->start_us) / 1000.0);
	cJSON_AddStringToObject(ex, "by", cmd->by_viewer ? "viewer" : "agent");
	cmd_emit("command.end", "", ex);
}

/* ------------------------------------------------------------ the marks */

static void mark_start(struct session *s)
{
	s->state = SH_RUNNING;
	s->ready = 0;
	s->cont = 0;
	lws_sul_cancel(&s->ready_sul);
	struct cmd *cmd = s->cmd;
	if (!cmd || cmd->started || cmd->finished || !cmd->typed) {
		/* not typed by a `run`: a person at a viewer, or agent `keys` */
		cmd = cmd_new(s, NULL, !s->typed_by_agent);
		cmd->text = typed_command(&s->typed);
		cmd_set(s, cmd);
	}
	forget_typed(s);
	cmd->started = 1;
	cmd->awaiting_shell = 0;
	emit_command_start(s, cmd);
}

/* No ready signal (bracketed paste on) came after the prompt's D mark:
 * readline may be off, or late (PS1's command substitutions run after the
 * mark; under load bash took 640 ms). The shell is ready once it sleeps
 * reading its terminal; typed before, the text would meet a terminal in
 * cooked mode that echoes it, paste markers and all. Looked at soon after
 * the mark, then less often: a shell without the signal (no line editor,
 * readline without bracketed paste) is ready in milliseconds, and its
 * first command waited 300 ms for the first look before. */
static void ready_fallback(lws_sorted_usec_list_t *sul)
{
	struct session *s = lws_container_of(sul, struct session, ready_sul);
	if (s->state != SH_IDLE || s->ready)
		return;
	pid_t reader;
	if (inputwait_blocked_on_tty(s, &reader) >= IW_RELAY) {
		session_mark(s, SI_READY, NULL, 0, 0);
	} else if (s->pty.alive) {
		s->ready_poll_us = s->ready_poll_us * 2 > READY_POLL_US ? READY_POLL_US
									: s->ready_poll_us * 2;
		server_timer(&s->ready_sul, ready_fallback, s->ready_poll_us);
	}
}

static void pre_line(void *user, const char *line, size_t len)
{
	buf_t *b = user;
	buf_append(b, line, len);
	buf_putc(b, '\n');
}

/* Where the shell's own echo of the typed text ends in its rendered output
 * r: the text as typed, matched character by character (a line break in r
 * that the text does not have is the echo wrapping), up to the end of the
 * line holding its last character; 0 when r does not start with it. */
static size_t echo_end(const char *r, size_t rn, const char *t)
{
	size_t i = 0, j = 0, tn = strlen(t);
	while (tn && t[tn - 1] == '\n')
		tn--;
	while (j < tn) {
		if (i >= rn)
			return 0;
		if (r[i] == t[j]) {
			i++;
			j++;
		} else if (t[j] == '\t' && r[i] == ' ') {
			i++;   /* readline shows a tab as spaces */
			if (i >= rn || r[i] != ' ')
				j++;
		} else if (r[i] == '\n') {
			i++;   /* the echo wrapped */
		} else {
			return 0;
		}
	}
	while (i < rn && r[i] != '\n')
		i++;
	return i < rn ? i + 1 : i;
}

/* The shell refused the typed text before running any of it (a syntax
 * error: no C mark; bash says 2, or 0 for a bad [[ ]]). What it printed after the echo of the
 * text is the command's output, as `bash -c` would print it. */
static void salvage_rejected(struct cmd *cmd, int after_cont)
{
	if (!cmd->pre.len || !cmd->render)
		return;
	buf_t text = {0};
	render_t *r = render_new(RENDER_WINDOW, pre_line, &text);
	render_feed(r, cmd->pre.p, cmd->pre.len);
	render_finish(r);
	render_free(r);
	/* after continuation lines the echo is not the text alone (PS2, the
	 * lines typed as input): keep from the shell's first message */
	size_t from = cmd->text && !after_cont ? echo_end(text.p, text.len, cmd->text) : 0;
	if (!from) {
		/* not the echo we expected: keep from the shell's first message */
		const char *m = NULL;
		for (size_t i = 0; i < text.len; i = i + 1) {
			if ((i == 0 || text.p[i - 1] == '\n') && text.len - i >= 6 &&
			    (!memcmp(text.p + i, "bash: ", 6) || !memcmp(text.p + i, "-bash:", 6))) {
				m = text.p + i;
				break;
			}
		}
		from = m ? (size_t)(m - text.p) : text.len;
	}
	for (size_t i = from; i < text.len; i++) {
		if (text.p[i] == '\n')
			render_feed(cmd->render, "\r\n", 2);
		else
			render_feed(cmd->render, text.p + i, 1);
	}
	buf_free(&text);
	buf_free(&cmd->pre);
}

static void mark_done(struct session *s, int exit_code, const char *cwd, size_t cwd_len)
{
	enum shell_state prev = s->state;
	int was_cont = s->cont;
	if (cwd_len) {
		free(s->cwd);
		s->cwd = xstrndup(cwd, cwd_len);
	}
	s->state = SH_IDLE;
	s->ready = 0;
	s->cont = 0;
	s->prompt_us = mono_us();
	/* text typed before the first prompt is still unread: the shell's line
	 * editor reads it now, so it names the first command */
	if (prev != SH_STARTING)
		forget_typed(s);
	if (s->shell_kind == SHELL_BASH) {
		s->ready_poll_us = READY_FIRST_US;
		server_timer(&s->ready_sul, ready_fallback, s->ready_poll_us);
	}
	else
		s->ready = 1;   /* no line editor: the shell reads lines as they come */
	struct cmd *cmd = s->cmd;
	if (cmd && !cmd->finished && (prev == SH_RUNNING || cmd->typed)) {
		/* the latter: a line with nothing to run (blank, comment), a
		 * continuation ended by C-c, or a text the shell rejected */
		if (prev != SH_RUNNING && cmd->typed && !(was_cont && exit_code == 130))
			salvage_rejected(cmd, was_cont);
		cmd->started = 1;
		cmd_finish(s, cmd, exit_code);
	}
	if (cmd)
		cmd->awaiting_shell = 0;
}

static void cmd_on_mark(struct session *s, enum si_event ev, const char *data, size_t n,
			int code)
{
	switch (ev) {
	case SI_MARK_START:
		if (s->state == SH_IDLE)   /* a multi-command unit prints PS0 once per command */
			mark_start(s);
		break;
	case SI_MARK_DONE:
		mark_done(s, code, data, n);
		break;
	case SI_MARK_CONT:
		/* PS2: the shell reads the rest of an unfinished command
		 * (heredoc body, open quote, trailing \ or |) */
		if (s->state != SH_IDLE)
			break;
		s->cont = 1;
		if (s->cmd && !s->cmd->finished)
			s->cmd->awaiting_shell = 0;
		break;
	case SI_READY:
		if (s->state != SH_IDLE)
			break;
		lws_sul_cancel(&s->ready_sul);
		s->ready = 1;
		break;
	default:
		break;
	}
}

static void cmd_on_text(struct session *s, const char *data, size_t n)
{
	struct cmd *cmd = s->cmd;
	if (cmd && cmd->started && !cmd->finished)
		render_feed(cmd->render, data, n);
	else if (cmd && cmd->typed && !cmd->finished && s->state == SH_IDLE &&
		 cmd->pre.len + n <= PRE_MAX)
		buf_append(&cmd->pre, data, n);
}

static void cmd_on_exit(struct session *s)
{
	lws_sul_cancel(&s->ready_sul);
	struct cmd *cmd = s->cmd;
	if (cmd && !cmd->finished) {
		/* e.g. end of input (C-d) at a continuation prompt: bash says
		 * "unexpected end of file" and, at end of input, exits */
		if (!cmd->started && cmd->typed)
			salvage_rejected(cmd, s->cont);
		cmd->started = 1;
		cmd_finish(s, cmd, s->pty.exit_code);
	}
}

static void cmd_on_gone(struct session *s)
{
	lws_sul_cancel(&s->ready_sul);
	cmd_free(s->cmd);
	s->cmd = NULL;
	forget_typed(s);
}

/* A session.open program: it is the session's one command, by the agent. */
void cmd_program_started(struct session *s)
{
	struct cmd *cmd = cmd_new(s, s->command, 0);
	cmd->started = 1;
	cmd_set(s, cmd);
	emit_command_start(s, cmd);
}

void cmd_init(cmd_event_fn *emit)
{
	emit_fn = emit;
	static const struct session_listener l = {
		.text = cmd_on_text,
		.mark = cmd_on_mark,
		.exit = cmd_on_exit,
		.gone = cmd_on_gone,
	};
	session_listen(&l);
}
