/* run.c — the `run`, `keys` and `screen` actions and the life of a command
 * in a session: typing it when the shell is ready, following the shell's
 * marks (start, done with exit code and cwd), rendering its output into a
 * store (memory, spilled to a file past --output-mem), answering with what is new
 * since the last observation (head + tail when over max_output), hard and
 * idle timeouts, and noticing a program waiting for terminal input. */
#include "termd.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define QUIET_FOR_INPUT_US   1000000u  /* "nothing new for about a second" */
#define RELAY_QUIET_US      10000000u  /* a relay with no question on screen */
#define INPUT_RECHECK_US      250000u
#define READY_FALLBACK_US     300000u  /* no readline ready signal: type anyway */
#define STORE_WRITE_CHUNK    (64u * 1024u)
#define RENDER_WINDOW        200
#define DEFAULT_IDLE_S       30.0
#define DEFAULT_MAX_OUTPUT   30000
#define MAX_MAX_OUTPUT       (16 * 1024 * 1024)

static unsigned out_counter;

/* ---------------------------------------------------------------- store */

/* The output file could not be created or written (disk full, file size
 * limit): said once — log, an io_error event for subscribers, and
 * extras.output_error on the command's run answers — and the command goes
 * on with its text in memory: the file's part, then a bounded tail. */
static void store_failed(struct cmd *cmd, const char *path, int err)
{
	if (cmd->store_err)
		return;
	buf_t m = {0};
	if (cmd->file_fd < 0)
		buf_printf(&m, "cannot create the output file %s: %s", path, strerror(err));
	else
		buf_printf(&m, "cannot write the output file %s: %s (it holds the first %zu bytes "
			   "of the output)", path, strerror(err), cmd->file_bytes);
	buf_printf(&m, "; of the rest termd keeps only the last %zu KiB or more",
		   opts.output_mem / 2 / 1024);
	cmd->store_err = buf_steal(&m);
	log_warn("session %s: %s", cmd->sname, cmd->store_err);
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "code", td_err_name(TD_ERR_IO_ERROR));
	cJSON_AddStringToObject(ex, "session", cmd->sname);
	cJSON_AddStringToObject(ex, "path", path);
	events_emit(NULL, NULL, "error", cmd->store_err, ex);
}

static int store_spill(struct cmd *cmd)
{
	if (cmd->file_fd >= 0)
		return 0;
	if (cmd->store_err)
		return -1;
	buf_t p = {0};
	buf_printf(&p, "%s/output-%s-%u.txt", srv.rundir, cmd->sname, ++out_counter);
	int fd = open(p.p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		store_failed(cmd, p.p, errno);
		buf_free(&p);
		return -1;
	}
	cmd->file_fd = fd;
	cmd->file_path = buf_steal(&p);
	return 0;
}

/* In file mode `mem` holds the bytes not written yet. */
static void store_flush(struct cmd *cmd)
{
	if (cmd->file_fd < 0 || cmd->store_err || !cmd->mem.len)
		return;
	size_t off = 0;
	int err = 0;
	while (off < cmd->mem.len) {
		ssize_t w = write(cmd->file_fd, cmd->mem.p + off, cmd->mem.len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			err = w < 0 ? errno : ENOSPC;
			break;
		}
		off += (size_t)w;
	}
	buf_consume(&cmd->mem, off);
	cmd->file_bytes += off;
	cmd->mem_base = cmd->file_bytes;
	if (err)
		store_failed(cmd, cmd->file_path, err);
}

/* After a failure: keep the last half of the memory cap (from a line
 * start) once mem is over the cap. */
static void store_trim(struct cmd *cmd)
{
	if (cmd->mem.len <= opts.output_mem)
		return;
	size_t cut = cmd->mem.len - opts.output_mem / 2;
	const char *nl = memchr(cmd->mem.p + cut, '\n', cmd->mem.len - cut);
	size_t n = nl ? (size_t)(nl - cmd->mem.p) + 1 : cut;
	buf_consume(&cmd->mem, n);
	cmd->mem_base += n;
}

static void store_line(void *user, const char *line, size_t len)
{
	struct cmd *cmd = user;
	buf_append(&cmd->mem, line, len);
	buf_putc(&cmd->mem, '\n');
	cmd->total_bytes += len + 1;
	cmd->total_lines++;
	if (cmd->store_err) {
		store_trim(cmd);
	} else if (cmd->file_fd >= 0) {
		if (cmd->mem.len >= STORE_WRITE_CHUNK)
			store_flush(cmd);
	} else if (cmd->mem.len > opts.output_mem) {
		if (store_spill(cmd) == 0)
			store_flush(cmd);
	}
}

/* Bytes [off, off + n) of the text, as far as they are kept; a line in
 * their place says where text was lost to a failed output file. */
static void store_read(struct cmd *cmd, size_t off, size_t n, buf_t *out)
{
	if (off >= cmd->total_bytes)
		return;
	if (off + n > cmd->total_bytes)
		n = cmd->total_bytes - off;
	size_t end = off + n;
	if (off < cmd->file_bytes && cmd->file_fd >= 0) {
		size_t fe = end < cmd->file_bytes ? end : cmd->file_bytes;
		buf_reserve(out, fe - off);
		while (off < fe) {
			ssize_t r = pread(cmd->file_fd, out->p + out->len, fe - off, (off_t)off);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				break;
			out->len += (size_t)r;
			off += (size_t)r;
		}
		out->p[out->len] = 0;
		off = fe;
	}
	if (off >= end)
		return;
	if (off < cmd->mem_base) {
		if (out->len && out->p[out->len - 1] != '\n')
			buf_putc(out, '\n');
		buf_printf(out, "[... %zu bytes of output not kept: the output file could not be "
			   "written ...]\n", cmd->mem_base - cmd->file_bytes);
		off = cmd->mem_base;
	}
	if (off < end)
		buf_append(out, cmd->mem.p + (off - cmd->mem_base), end - off);
}

static struct cmd *cmd_new(struct session *s, const char *text, int by_viewer)
{
	struct cmd *cmd = xcalloc(1, sizeof *cmd);
	cmd->text = text ? xstrdup(text) : NULL;
	cmd->by_viewer = by_viewer;
	cmd->file_fd = -1;
	cmd->exit_code = -1;
	cmd->start_us = mono_us();
	cmd->render = render_new(RENDER_WINDOW, store_line, cmd);
	snprintf(cmd->sname, sizeof cmd->sname, "%s", s->name);
	return cmd;
}

void cmd_free(struct cmd *cmd)
{
	if (!cmd)
		return;
	render_free(cmd->render);
	buf_free(&cmd->mem);
	if (cmd->file_fd >= 0)
		close(cmd->file_fd);
	free(cmd->file_path);
	free(cmd->store_err);
	free(cmd->shown_live);
	free(cmd->text);
	free(cmd);
}

static void session_set_cmd(struct session *s, struct cmd *cmd)
{
	if (s->cmd && s->cmd != cmd)
		cmd_free(s->cmd);
	s->cmd = cmd;
}

/* ------------------------------------------------------- new output text */

/* Append to out the first `chars` characters' worth of whole lines of src
 * (a partial first line if none fits). Returns the number of lines. */
static size_t take_head(const char *src, size_t n, size_t chars, buf_t *out)
{
	size_t pos = 0, used = 0, lines = 0;
	while (pos < n) {
		const char *nl = memchr(src + pos, '\n', n - pos);
		size_t end = nl ? (size_t)(nl - src) : n;
		size_t c = utf8_count(src + pos, end - pos);
		if (used + c + (lines ? 1 : 0) > chars)
			break;
		if (lines)
			buf_putc(out, '\n');
		buf_append(out, src + pos, end - pos);
		used += c + (lines ? 1 : 0);
		lines++;
		pos = end + 1;
	}
	if (!lines && n) {
		const char *nl = memchr(src, '\n', n);
		size_t end = nl ? (size_t)(nl - src) : n;
		buf_append(out, src, utf8_offset(src, end, chars));
		lines = 1;
	}
	return lines;
}

/* Like take_head from the end of src; `start_partial`: src[0] may be in the
 * middle of a line, which is then never taken. */
static size_t take_tail(const char *src, size_t n, size_t chars, int start_partial, buf_t *out)
{
	size_t end = n, used = 0, lines = 0, first = n;
	while (end > 0) {
		size_t b = end;
		while (b > 0 && src[b - 1] != '\n')
			b--;
		if (b == 0 && start_partial)
			break;
		size_t c = utf8_count(src + b, end - b);
		if (used + c + (lines ? 1 : 0) > chars)
			break;
		used += c + (lines ? 1 : 0);
		lines++;
		first = b;
		if (b == 0)
			break;
		end = b - 1;
	}
	if (!lines && n) {
		size_t b = n;
		while (b > 0 && src[b - 1] != '\n')
			b--;
		size_t c = utf8_count(src + b, n - b);
		size_t skip = c > chars ? c - chars : 0;
		size_t off = b + utf8_offset(src + b, n - b, skip);
		buf_append(out, src + off, n - off);
		return 1;
	}
	if (lines)
		buf_append(out, src + first, n - first);
	return lines;
}

static size_t count_lines(const char *p, size_t n)
{
	if (!n)
		return 0;
	size_t k = 1;
	for (const char *q = p; (q = memchr(q, '\n', n - (size_t)(q - p))); q++)
		k++;
	return k;
}

/* What the command printed since the last observation, as content; sets
 * *truncated and makes sure the output file exists when it is. */
static void cmd_collect(struct cmd *cmd, size_t max_output,
			buf_t *out, int *truncated)
{
	*truncated = 0;
	/* head + marker line + tail stay within max_output characters */
	size_t budget = max_output > 200 ? max_output - 48 : max_output;
	if (!cmd->finished)
		render_commit_above_cursor(cmd->render);
	buf_t live = {0};
	if (!cmd->finished)
		render_live(cmd->render, &live);
	buf_reserve(&live, 0);

	size_t D = cmd->delivered, T = cmd->total_bytes;
	size_t seg = T - D;

	/* small enough to look at whole */
	size_t limit = 4 * max_output + 4096;
	if (seg + live.len <= limit) {
		buf_t all = {0};
		store_read(cmd, D, seg, &all);
		if (live.len)
			buf_append(&all, live.p, live.len);
		else if (all.len && all.p[all.len - 1] == '\n')
			all.len--;
		size_t skip = 0;
		if (cmd->shown_live && *cmd->shown_live) {
			size_t sl = strlen(cmd->shown_live);
			if (all.len >= sl && memcmp(all.p, cmd->shown_live, sl) == 0)
				skip = sl;
		}
		/* the partial line shown last time (a prompt) was trimmed of its
		 * trailing spaces: drop the space that separated it from what
		 * followed on the same line */
		if (skip)
			while (skip < all.len && all.p[skip] == ' ')
				skip++;
		const char *p = all.p ? all.p + skip : "";
		size_t n = all.len - skip;
		if (utf8_count(p, n) <= max_output) {
			buf_append(out, p, n);
		} else {
			*truncated = 1;
			size_t total = count_lines(p, n);
			size_t h = take_head(p, n, budget / 2, out);
			buf_t tail = {0};
			size_t t = take_tail(p, n, budget - budget / 2, 0, &tail);
			size_t omitted = total > h + t ? total - h - t : 0;
			buf_printf(out, "\n[... %zu lines truncated ...]\n", omitted);
			buf_append(out, tail.p ? tail.p : "", tail.len);
			buf_free(&tail);
		}
		buf_free(&all);
	} else {
		*truncated = 1;
		size_t total = cmd->total_lines - cmd->delivered_lines + (live.len ? 1 : 0);
		size_t window = 4 * (budget / 2) + 4096;
		buf_t head = {0}, tailsrc = {0}, tail = {0};
		store_read(cmd, D, window < seg ? window : seg, &head);
		size_t h = take_head(head.p, head.len, budget / 2, out);
		size_t from = seg > window ? T - window : D;
		store_read(cmd, from, T - from, &tailsrc);
		if (live.len)
			buf_append(&tailsrc, live.p, live.len);
		else if (tailsrc.len && tailsrc.p[tailsrc.len - 1] == '\n')
			tailsrc.len--;
		size_t t = take_tail(tailsrc.p, tailsrc.len, budget - budget / 2, from > D, &tail);
		size_t omitted = total > h + t ? total - h - t : 0;
		buf_printf(out, "\n[... %zu lines truncated ...]\n", omitted);
		buf_append(out, tail.p ? tail.p : "", tail.len);
		buf_free(&head);
		buf_free(&tailsrc);
		buf_free(&tail);
	}
	if (*truncated && cmd->file_fd < 0 && store_spill(cmd) == 0)
		store_flush(cmd);
	if (*truncated)
		store_flush(cmd);
	cmd->delivered = T;
	cmd->delivered_lines = cmd->total_lines;
	free(cmd->shown_live);
	cmd->shown_live = live.len ? buf_steal(&live) : NULL;
	buf_free(&live);
}

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
		if (w->kind == WAIT_RUN && !w->is_input)
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
	screen_cursor(s->screen, &row, &col, &vis);
	cJSON_AddStringToObject(ex, "session", s->name);
	cJSON_AddNumberToObject(ex, "cols", s->cols);
	cJSON_AddNumberToObject(ex, "rows", s->rows);
	cJSON *cur = cJSON_AddObjectToObject(ex, "cursor");
	cJSON_AddNumberToObject(cur, "row", row);
	cJSON_AddNumberToObject(cur, "col", col);
	cJSON_AddBoolToObject(ex, "cursor_visible", vis);
	cJSON_AddBoolToObject(ex, "alt_screen", screen_alt(s->screen));
	cJSON_AddStringToObject(ex, "title", screen_title(s->screen));
	return ex;
}

/* scrollback: lines of history to show above the screen */
static void emit_screen(struct session *s, struct conn *conn, const cJSON *id, int restarted,
			size_t scrollback)
{
	buf_t text = {0};
	if (scrollback && !screen_alt(s->screen))
		screen_scrollback_text(s->screen, scrollback, &text);
	screen_text(s->screen, &text);
	cJSON *ex = screen_extras(s);
	cJSON_AddNumberToObject(ex, "scrollback_lines", (double)screen_scrollback_lines(s->screen));
	if (restarted)
		cJSON_AddBoolToObject(ex, "restarted", 1);
	events_emit(conn, id, "screen", text.p ? text.p : "", ex);
	buf_free(&text);
}

/* The run observation for waiter w, which then ends. */
static void run_answer(struct waiter *w, const char *timed_out, int waiting_input)
{
	struct session *s = w->s;
	struct cmd *cmd = s->cmd;
	int finished = !cmd || cmd->finished;
	int alt = screen_alt(s->screen);
	int truncated = 0;
	buf_t content = {0};
	if (cmd) {
		cmd_collect(cmd, w->max_output, &content, &truncated);
		if (alt && !finished) {
			buf_reset(&content);
			truncated = 0;
			screen_text(s->screen, &content);
		}
	}
	uint64_t now = mono_us();
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "session", s->name);
	cJSON_AddNumberToObject(ex, "exit_code", finished ? (cmd ? cmd->exit_code : -1) : -1);
	cJSON_AddBoolToObject(ex, "running", !finished);
	cJSON_AddStringToObject(ex, "cwd", s->cwd ? s->cwd : "");
	cJSON_AddNumberToObject(ex, "pid", finished ? s->pid : session_fg_pid(s));
	uint64_t end = finished && cmd && cmd->end_us ? cmd->end_us : now;
	cJSON_AddNumberToObject(ex, "duration_ms",
				cmd ? (double)(end - cmd->start_us) / 1000.0 : 0.0);
	if (timed_out)
		cJSON_AddStringToObject(ex, "timed_out", timed_out);
	else
		cJSON_AddNullToObject(ex, "timed_out");
	cJSON_AddBoolToObject(ex, "waiting_for_input", waiting_input);
	cJSON_AddBoolToObject(ex, "alt_screen", alt);
	cJSON_AddBoolToObject(ex, "truncated", truncated);
	if (truncated && cmd && cmd->file_path)
		cJSON_AddStringToObject(ex, "output_file", cmd->file_path);
	if (cmd && cmd->store_err)
		cJSON_AddStringToObject(ex, "output_error", cmd->store_err);
	if (w->restarted)
		cJSON_AddBoolToObject(ex, "restarted", 1);
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

/* Output the pty holds that termd has not read yet: the program was not
 * quiet, whatever last_output_us says (the loop will read it next). */
static int pty_unread(struct session *s)
{
	int n = 0;
	return s->master_fd >= 0 && ioctl(s->master_fd, FIONREAD, &n) == 0 && n > 0;
}

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
	struct session *s = w->s;
	uint64_t now = mono_us();
	uint64_t last = s->last_output_us > w->start_us ? s->last_output_us : w->start_us;

	if (w->kind == WAIT_KEYS) {
		if (w->pending_keys && !(w->hard_us && now >= w->hard_us) && s->alive) {
			schedule_at(w, w->hard_us);
			return;
		}
		if (now - last >= w->settle_us || (w->hard_us && now >= w->hard_us) || !s->alive) {
			emit_screen(s, w->p.conn, w->p.id, w->restarted, 0);
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
	if (quiet_check && pty_unread(s)) {
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
	int typing = s->inq.len > 0 || (s->cmd && s->cmd->awaiting_shell);
	enum inputwait iw = IW_NO;
	if (w->typed && !typing && now - last >= QUIET_FOR_INPUT_US)
		iw = inputwait_blocked_on_tty(s);
	/* a relay (polling the tty among other descriptors) waits for input
	 * only when its screen looks like a question, or after a long quiet */
	if (iw == IW_RELAY && !screen_cursor_after_text(s->screen) &&
	    now - last < RELAY_QUIET_US)
		iw = IW_NO;
	if (iw != IW_NO) {
		/* seen twice, 30 ms apart, with no output between: a shell that
		 * just finished sits in readline too, its last bytes in flight */
		if (w->input_seen_us && w->input_seen_us > last) {
			run_answer(w, NULL, 1);
			return;
		}
		w->input_seen_us = now;
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
			run_note_typed(s, v, strlen(v));   /* literal text */
			continue;
		}
		/* the named keys that matter for naming a typed command */
		for (size_t i = 0; i < sizeof noted / sizeof noted[0]; i++)
			if (strcmp(v, noted[i].name) == 0)
				run_note_typed(s, noted[i].bytes, strlen(noted[i].bytes));
	}
}

/* Keys and commands wait for the shell's line editor: typed earlier they
 * would reach a terminal still in cooked mode (echoed, not edited). */
static int shell_not_ready(struct session *s)
{
	return s->is_shell && s->alive &&
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
			shellint_type_command(s, cmd->text, &b);
			s->ready = 0;
			s->cont = 0;
			w->typed = 1;
			w->start_us = mono_us();
			cmd->start_us = w->start_us;
			cmd->typed = 1;
			cmd->awaiting_shell = 1;
			session_set_cmd(s, cmd);
			session_write(s, b.p, b.len);
			buf_free(&b);
			run_check(w);
		} else if (w->pending_input.len) {
			type_input(s, w);
			run_check(w);
		}
	}
}

static void ready_fallback(lws_sorted_usec_list_t *sul)
{
	struct session *s = lws_container_of(sul, struct session, ready_sul);
	if (s->state == SH_IDLE && !s->ready) {
		s->ready = 1;
		type_pending(s);
	}
}

void run_on_ready(struct session *s)
{
	if (s->state != SH_IDLE)
		return;
	lws_sul_cancel(&s->ready_sul);
	s->ready = 1;
	type_pending(s);
}

void run_on_output(struct session *s, const char *data, size_t n)
{
	struct cmd *cmd = s->cmd;
	if (cmd && cmd->started && !cmd->finished)
		render_feed(cmd->render, data, n);
	if (s->expect)
		expect_on_output(s, data, n);
}

#define TYPED_MAX 8192

void run_note_typed(struct session *s, const char *data, size_t n)
{
	if (!s->is_shell || s->typed.len + n > TYPED_MAX)
		return;
	buf_append(&s->typed, data, n);
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

static void emit_command_start(struct session *s, struct cmd *cmd)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "session", s->name);
	if (cmd->text)
		cJSON_AddStringToObject(ex, "command", cmd->text);
	else
		cJSON_AddNullToObject(ex, "command");
	cJSON_AddStringToObject(ex, "by", cmd->by_viewer ? "viewer" : "agent");
	events_emit(NULL, NULL, "command.start", "", ex);
}

void run_on_mark_start(struct session *s)
{
	if (s->state != SH_IDLE)
		return;   /* a multi-command unit prints PS0 once per command */
	s->state = SH_RUNNING;
	s->ready = 0;
	s->cont = 0;
	lws_sul_cancel(&s->ready_sul);
	struct cmd *cmd = s->cmd;
	if (!cmd || cmd->started || cmd->finished || !cmd->typed) {
		/* not typed by a `run`: a person at a viewer, or agent `keys` */
		int by_keys = 0;
		for (struct waiter *w = s->waiters; w; w = w->next)
			by_keys |= w->kind == WAIT_KEYS;
		cmd = cmd_new(s, NULL, !by_keys);
		cmd->text = typed_command(&s->typed);
		session_set_cmd(s, cmd);
	}
	buf_reset(&s->typed);
	cmd->started = 1;
	cmd->awaiting_shell = 0;
	emit_command_start(s, cmd);
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
	events_emit(NULL, NULL, "command.end", "", ex);
}

void run_on_mark_done(struct session *s, int exit_code, const char *cwd)
{
	enum shell_state prev = s->state;
	if (cwd && *cwd) {
		free(s->cwd);
		s->cwd = xstrdup(cwd);
	}
	s->state = SH_IDLE;
	s->ready = 0;
	s->cont = 0;
	/* text typed before the first prompt is still unread: the shell's line
	 * editor reads it now, so it names the first command */
	if (prev != SH_STARTING)
		buf_reset(&s->typed);
	if (s->shell_kind == 0)
		server_timer(&s->ready_sul, ready_fallback, READY_FALLBACK_US);
	else
		s->ready = 1;   /* no line editor: the shell reads lines as they come */
	struct cmd *cmd = s->cmd;
	if (cmd && !cmd->finished && (prev == SH_RUNNING || cmd->typed)) {
		/* the latter: a line with nothing to run (blank, comment), or a
		 * continuation ended by C-c */
		cmd->started = 1;
		cmd_finish(s, cmd, exit_code);
	}
	if (cmd)
		cmd->awaiting_shell = 0;
	check_all(s);
	type_pending(s);
}

/* The shell shows PS2: it reads the rest of an unfinished command (heredoc
 * body, open quote, trailing \ or |), a program waiting for input. */
void run_on_mark_cont(struct session *s)
{
	if (s->state != SH_IDLE)
		return;
	s->cont = 1;
	if (s->cmd && !s->cmd->finished)
		s->cmd->awaiting_shell = 0;
	check_all(s);
}

void run_on_session_exit(struct session *s)
{
	struct cmd *cmd = s->cmd;
	if (cmd && !cmd->finished) {
		cmd->started = 1;
		cmd_finish(s, cmd, s->exit_code);
	}
	/* every run answers now; nothing pending will be typed */
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
		if (w->kind == WAIT_RUN && s->cmd)
			run_answer(w, NULL, 0);
		else
			run_check(w);
	}
	expect_on_session_exit(s);
}

/* A session.open program: it is the session's one command, by the agent. */
void run_program_started(struct session *s)
{
	struct cmd *cmd = cmd_new(s, s->command, 0);
	cmd->started = 1;
	session_set_cmd(s, cmd);
	emit_command_start(s, cmd);
}

void cmd_session_gone(struct session *s)
{
	cmd_free(s->cmd);
	s->cmd = NULL;
}

/* ---------------------------------------------------------------- actions */

static int run_action(struct act *a)
{
	const char *command = NULL;
	int is_input = 0;
	double timeout = 0, idle = 0, max_out = DEFAULT_MAX_OUTPUT;
	int has_timeout = 0, has_idle = 0, has_max = 0;
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
	if (arg_session(a, "session", SESS_CREATE | SESS_RESPAWN, &s, &restarted) < 0)
		return -1;
	/* input never waits behind an answer; a second command does */
	int new_command = !is_input && s->is_shell;
	if (new_command && command_waiter(s)) {
		act_error(a, TD_ERR_BUSY, "another action is waiting on session '%s'", s->name);
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
			act_error(a, TD_ERR_BUSY, "a command is still running in '%s'", s->name);
			return -1;
		}
	} else if ((!is_input && !command[0]) ? !has_cmd : !running) {
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
		session_set_cmd(s, cmd);
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
	w->typed = 1;
	run_check(w);
	return 0;
}

static int keys_action(struct act *a)
{
	const cJSON *keys = a->args ? cJSON_GetObjectItemCaseSensitive(a->args, "keys") : NULL;
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
	if (arg_session(a, "session", SESS_RESPAWN, &s, &restarted) < 0)
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
	const cJSON *sbj = cJSON_GetObjectItemCaseSensitive(a->args, "scrollback");
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
	emit_screen(s, a->conn, a->id, restarted, sb > 1e9 ? (size_t)1e9 : (size_t)sb);
	return 0;
}

void run_register(void)
{
	static const struct action_def defs[] = {
		{"run", run_action, 0},
		{"keys", keys_action, 0},
		{"screen", screen_action, ACT_READONLY},
	};
	actions_register(defs, sizeof defs / sizeof defs[0]);
}
