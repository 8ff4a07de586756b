/* prog.c — a plugin's program (PROTOCOL.md §7): started on first
 * use with its own run folder, fed JSON lines on stdin through a
 * non-blocking queue, its answers read from stdout line by line and matched
 * to the requests in flight (pending actions, timed out by termd's net past
 * the program's own timeout), and a program that dies or closes stdout
 * answered for and started again on the next action (restarted: true). */
#include "plugin.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------- requests */

void preq_free(struct preq *q)
{
	lws_sul_cancel(&q->sul);
	pending_del(&q->p);
	free(q->action);
	cJSON_Delete(q->args);
	free(q);
}

/* Out of whichever list of its plugin it is in. */
void preq_unlink(struct preq *q)
{
	struct preq **lists[2] = {&q->pl->reqs, &q->pl->waiting};
	for (int l = 0; l < 2; l++) {
		for (struct preq **pp = lists[l]; *pp; pp = &(*pp)->next) {
			if (*pp == q) {
				*pp = q->next;
				return;
			}
		}
	}
}

void preq_fail(struct preq *q, td_err code, const char *msg)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "code", td_err_name(code));
	if (q->restarted)
		cJSON_AddBoolToObject(ex, "restarted", 1);
	pending_emit(&q->p, "error", msg, ex);
	preq_unlink(q);
	preq_free(q);
}

void preq_session_gone(struct pending *p)
{
	/* plugin actions name no session */
	(void)p;
}

const struct pending_ops preq_ops = {"plugin", preq_session_gone};

void preq_timeout(lws_sorted_usec_list_t *sul)
{
	struct preq *q = lws_container_of(sul, struct preq, sul);
	buf_t m = {0};
	if (q->pl->state == P_INSTALLING)
		buf_printf(&m, "plugin '%s' is still installing; try again once plugin.status says "
			   "ready", q->pl->name);
	else
		buf_printf(&m, "plugin '%s' did not answer '%s' in time", q->pl->name, q->action);
	preq_fail(q, q->pl->state == P_INSTALLING ? TD_ERR_BUSY : TD_ERR_INTERNAL, m.p);
	buf_free(&m);
}

/* ------------------------------------------------------------- programs */

void program_close_fds(struct plugin *pl)
{
	struct lws *ws[2] = {pl->in_wsi, pl->out_wsi};
	for (int i = 0; i < 2; i++) {
		if (ws[i]) {
			lws_set_opaque_user_data(ws[i], NULL);
			lws_set_timeout(ws[i], PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
		}
	}
	lws_sul_cancel(&pl->in_sul);
	pl->in_wsi = pl->out_wsi = NULL;
	pl->in_fd = -1;
	buf_reset(&pl->outq);
	buf_reset(&pl->rx);
}

static void in_rearm(lws_sorted_usec_list_t *sul)
{
	struct plugin *pl = lws_container_of(sul, struct plugin, in_sul);
	if (pl->in_wsi)
		lws_callback_on_writable(pl->in_wsi);
}

static void flush_out(struct plugin *pl)
{
	while (pl->outq.len && pl->in_fd >= 0) {
		ssize_t w = write(pl->in_fd, pl->outq.p, pl->outq.len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			break;
		if (w <= 0) {
			program_dead(pl, "its stdin was closed");
			return;
		}
		buf_consume(&pl->outq, (size_t)w);
	}
	/* asked from a timer: lws takes POLLOUT off a raw file's wsi after
	 * its WRITEABLE callback (where this also runs), so a wish made here
	 * would be lost, and the rest of a long request line with it */
	if (pl->outq.len && pl->in_wsi)
		server_timer(&pl->in_sul, in_rearm, 1);
}

static const char *known_code(const char *c)
{
	for (int e = 0; e < TD_ERR__COUNT; e++)
		if (c && strcmp(c, td_err_name((td_err)e)) == 0)
			return c;
	return td_err_name(TD_ERR_INTERNAL);
}

/* One line from the program: the answer to one of its requests. */
static void answer_line(struct plugin *pl, const char *line, size_t len)
{
	while (len && (line[len - 1] == '\r' || line[len - 1] == ' '))
		len--;
	if (!len)
		return;
	cJSON *o = cJSON_ParseWithLength(line, len);
	const cJSON *id = o ? cJSON_GetObjectItemCaseSensitive(o, "id") : NULL;
	const cJSON *obs = o ? cJSON_GetObjectItemCaseSensitive(o, "observation") : NULL;
	struct preq *q = NULL;
	if (cJSON_IsNumber(id))
		for (q = pl->reqs; q && (double)q->rid != id->valuedouble; q = q->next)
			;
	if (!q || !cJSON_IsString(obs)) {
		log_warn("plugin %s: a line that answers no request of termd's, ignored: %.*s",
			 pl->name, (int)(len > 200 ? 200 : len), line);
		cJSON_Delete(o);
		return;
	}
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(o, "content");
	cJSON *ex = cJSON_DetachItemFromObjectCaseSensitive(o, "extras");
	if (!cJSON_IsObject(ex)) {
		cJSON_Delete(ex);
		ex = cJSON_CreateObject();
	}
	if (strcmp(obs->valuestring, "error") == 0) {
		const cJSON *code = cJSON_GetObjectItemCaseSensitive(ex, "code");
		const char *c = known_code(cJSON_IsString(code) ? code->valuestring : NULL);
		char *keep = xstrdup(c);
		cJSON_DeleteItemFromObject(ex, "code");
		cJSON_AddStringToObject(ex, "code", keep);
		free(keep);
	}
	if (q->restarted) {
		cJSON_DeleteItemFromObject(ex, "restarted");
		cJSON_AddBoolToObject(ex, "restarted", 1);
	}
	pending_emit(&q->p, obs->valuestring,
		     cJSON_IsString(content) ? content->valuestring : "", ex);
	cJSON_Delete(o);
	preq_unlink(q);
	preq_free(q);
}

static void read_answers(struct plugin *pl)
{
	char buf[65536];
	size_t budget = PLUGIN_READ_BUDGET;
	while (budget && pl->out_wsi) {
		ssize_t n = read(lws_get_socket_fd(pl->out_wsi), buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			program_eof(pl);
			return;
		}
		budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
		buf_append(&pl->rx, buf, (size_t)n);
		size_t start = 0;
		char *nl;
		while ((nl = memchr(pl->rx.p + start, '\n', pl->rx.len - start))) {
			size_t end = (size_t)(nl - pl->rx.p);
			answer_line(pl, pl->rx.p + start, end - start);
			if (!pl->out_wsi)
				return;   /* an answer's emit cannot end it, but be safe */
			start = end + 1;
		}
		buf_consume(&pl->rx, start);
		if (pl->rx.len > PLUGIN_LINE_MAX) {
			kill(-pl->pid, SIGKILL);
			program_dead(pl, "it wrote a line over 64 MiB");
			return;
		}
	}
	if (pl->out_wsi)
		lws_callback_on_writable(pl->out_wsi);   /* more to read: come back */
}

static void eof_timer(lws_sorted_usec_list_t *sul)
{
	struct plugin *pl = lws_container_of(sul, struct plugin, eof_sul);
	program_dead(pl, "it closed its stdout");
}

/* stdout closed: the program is ending, most likely; its exit status
 * (child.c) says why, unless it keeps running without an stdout */
void program_eof(struct plugin *pl)
{
	program_close_fds(pl);
	if (pl->pid > 0)
		server_timer(&pl->eof_sul, eof_timer, 500000);
	else
		program_dead(pl, "it closed its stdout");
}

static int out_event(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
{
	struct plugin *pl = arg;
	(void)wsi;
	if (!pl)
		return reason == LWS_CALLBACK_RAW_RX_FILE ? -1 : 0;
	switch (reason) {
	case LWS_CALLBACK_RAW_RX_FILE:
	case LWS_CALLBACK_RAW_WRITEABLE_FILE:
		read_answers(pl);
		break;
	case LWS_CALLBACK_RAW_CLOSE_FILE:
		if (pl->out_wsi == wsi) {
			pl->out_wsi = NULL;
			program_eof(pl);
		}
		break;
	default:
		break;
	}
	return 0;
}

static int in_event(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
{
	struct plugin *pl = arg;
	if (!pl)
		return 0;
	if (reason == LWS_CALLBACK_RAW_WRITEABLE_FILE)
		flush_out(pl);
	else if (reason == LWS_CALLBACK_RAW_CLOSE_FILE && pl->in_wsi == wsi)
		pl->in_wsi = NULL;
	return 0;
}

static void program_reaped(void *arg, pid_t pid, int st)
{
	struct plugin *pl = arg;
	if (pl->pid != pid)
		return;
	char why[96];
	if (WIFSIGNALED(st))
		snprintf(why, sizeof why, "it was killed by signal %d", WTERMSIG(st));
	else
		snprintf(why, sizeof why, "it exited with status %d", WEXITSTATUS(st));
	pl->pid = 0;
	program_dead(pl, why);
}

/* The program ended (or cannot be talked to): its requests fail; the next
 * action starts it again. */
void program_dead(struct plugin *pl, const char *why)
{
	lws_sul_cancel(&pl->eof_sul);
	if (pl->pid > 0) {
		kill(-pl->pid, SIGKILL);
		/* its status still comes to program_reaped, which finds pid 0 */
		pl->pid = 0;
	}
	program_close_fds(pl);
	pl->died = 1;
	while (pl->reqs) {
		buf_t m = {0};
		buf_printf(&m, "the %s plugin's program ended while it ran this action (%s); "
			   "it is started again on the next action", pl->name, why);
		preq_fail(pl->reqs, TD_ERR_INTERNAL, m.p);
		buf_free(&m);
	}
}

int program_start(struct plugin *pl, char *err, size_t errlen)
{
	if (!pl->run) {
		snprintf(err, errlen, "plugin '%s' has no program (plugin.json names no \"run\")",
			 pl->name);
		return -1;
	}
	if (!pl->rundir[0]) {
		snprintf(pl->rundir, sizeof pl->rundir, "%s/plugin-%s", srv.rundir, pl->name);
		mkdir(pl->rundir, 0700);
	}
	int in[2], out[2];
	if (pipe2(in, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "cannot start plugin '%s': %s", pl->name, strerror(errno));
		return -1;
	}
	if (pipe2(out, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "cannot start plugin '%s': %s", pl->name, strerror(errno));
		close(in[0]);
		close(in[1]);
		return -1;
	}
	cgroup_settle();   /* the program starts in termd's own cgroup */
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "cannot start plugin '%s': %s", pl->name, strerror(errno));
		close(in[0]), close(in[1]), close(out[0]), close(out[1]);
		return -1;
	}
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		child_prepare();
		child_env(pl);
		const char *cwd = opts.cwd;
		struct session *m = session_find("main");
		if (m && m->cwd)
			cwd = m->cwd;
		if (chdir(cwd) != 0 && chdir(pl->dir) != 0)
			_exit(126);
		execl(pl->run, pl->run, (char *)NULL);
		fprintf(stderr, "termd: cannot run plugin program %s: %s\n", pl->run, strerror(errno));
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	set_nonblock(in[1]);
	set_nonblock(out[0]);
	pl->pid = pid;
	pl->in_fd = in[1];
	child_watch(pid, program_reaped, pl);
	pl->out_wsi = server_adopt_fd(out[0], out_event, pl);
	pl->in_wsi = server_adopt_fd(in[1], in_event, pl);
	if (!pl->out_wsi || !pl->in_wsi) {
		snprintf(err, errlen, "cannot watch plugin '%s''s pipes", pl->name);
		if (!pl->out_wsi)
			close(out[0]);
		if (!pl->in_wsi)
			close(in[1]);
		program_dead(pl, "termd could not watch its pipes");
		return -1;
	}
	log_info("plugin %s: program %s started (pid %d)", pl->name, pl->run, (int)pid);
	return 0;
}

/* A program kept across an upgrade in place (keep.c): the same pid,
 * still termd's child, and its two pipes, watched again as at start. */
int program_adopt(struct plugin *pl, pid_t pid, int in_fd, int out_fd)
{
	fcntl(in_fd, F_SETFD, FD_CLOEXEC);
	fcntl(out_fd, F_SETFD, FD_CLOEXEC);
	set_nonblock(in_fd);
	set_nonblock(out_fd);
	if (!pl->rundir[0])
		snprintf(pl->rundir, sizeof pl->rundir, "%s/plugin-%s", srv.rundir, pl->name);
	pl->pid = pid;
	pl->in_fd = in_fd;
	child_watch(pid, program_reaped, pl);
	pl->out_wsi = server_adopt_fd(out_fd, out_event, pl);
	pl->in_wsi = server_adopt_fd(in_fd, in_event, pl);
	if (!pl->out_wsi || !pl->in_wsi) {
		if (!pl->out_wsi)
			close(out_fd);
		if (!pl->in_wsi)
			close(in_fd);
		program_dead(pl, "termd could not watch its pipes after the upgrade");
		return -1;
	}
	flush_out(pl);   /* a request line left half written goes on */
	log_info("plugin %s: program kept across the upgrade (pid %d)", pl->name, (int)pid);
	return 0;
}

/* Send a request to the program (started first if it is not running). */
void preq_send(struct preq *q)
{
	struct plugin *pl = q->pl;
	if (pl->pid <= 0) {
		char err[512];
		int again = pl->died;
		if (program_start(pl, err, sizeof err) < 0) {
			preq_fail(q, TD_ERR_INTERNAL, err);
			return;
		}
		q->restarted = again;
		pl->died = 0;
	}
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "id", (double)q->rid);
	cJSON_AddStringToObject(o, "action", q->action);
	cJSON_AddItemToObject(o, "args", q->args ? cJSON_Duplicate(q->args, 1)
						 : cJSON_CreateObject());
	struct session *m = session_find("main");
	cJSON_AddStringToObject(o, "cwd", m && m->cwd ? m->cwd : opts.cwd);
	char *line = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	q->next = pl->reqs;
	pl->reqs = q;
	if (!line) {
		preq_fail(q, TD_ERR_INTERNAL, "cannot encode the request");
		return;
	}
	buf_puts(&pl->outq, line);
	buf_putc(&pl->outq, '\n');
	free(line);
	flush_out(pl);
}

