/* session.c — named pty sessions: spawning the shell (or a session program)
 * in a new pty, the pty master adopted into the lws event loop, the output
 * path (screen, shell-integration scan, command output), input queueing,
 * resizing, child reaping and the end of a session's process. */
#include "termd.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#define PTY_READ_MAX 65536
/* bytes taken from one pty per wakeup: a flooding session must not keep
 * the loop from the other sessions and clients for long */
#define PTY_READ_BUDGET 16384
#define FINALIZE_GRACE_US 150000   /* after the child is reaped, wait this long for pty EOF */

static int rc_written;

static int pty_event(struct lws *wsi, enum lws_callback_reasons reason, void *arg);
static void session_reaped(void *arg, pid_t pid, int st);

struct session *session_find(const char *name)
{
	for (struct session *s = srv.sessions; s; s = s->next)
		if (strcmp(s->name, name) == 0)
			return s;
	return NULL;
}

cJSON *session_names_json(void)
{
	cJSON *a = cJSON_CreateArray();
	for (struct session *s = srv.sessions; s; s = s->next)
		cJSON_AddItemToArray(a, cJSON_CreateString(s->name));
	return a;
}

static void vt_answer(const char *data, size_t n, void *user)
{
	session_write(user, data, n);
}

/* ------------------------------------------------------------ listeners */

#define MAX_LISTENERS 8
static const struct session_listener *listeners[MAX_LISTENERS];
static size_t nlisteners;

void session_listen(const struct session_listener *l)
{
	if (nlisteners == MAX_LISTENERS) {   /* a start-up wiring error */
		log_warn("session_listen: more than %d listeners", MAX_LISTENERS);
		abort();
	}
	listeners[nlisteners++] = l;
}

void session_mark(struct session *s, enum si_event ev, const char *data, size_t n, int code)
{
	for (size_t i = 0; i < nlisteners; i++)
		if (listeners[i]->mark)
			listeners[i]->mark(s, ev, data, n, code);
}

void session_gone(struct session *s)
{
	for (size_t i = 0; i < nlisteners; i++)
		if (listeners[i]->gone)
			listeners[i]->gone(s);
}

static void session_exited(struct session *s)
{
	for (size_t i = 0; i < nlisteners; i++)
		if (listeners[i]->exit)
			listeners[i]->exit(s);
}

/* The shell-integration scanner's events: text (the output without
 * termd's marks) and marks go to the listeners; titles to the screen and
 * its viewers. */
static void on_shellint(void *user, enum si_event ev, const char *data, size_t len, int code)
{
	struct session *s = user;
	switch (ev) {
	case SI_TEXT:
		for (size_t i = 0; i < nlisteners; i++)
			if (listeners[i]->text)
				listeners[i]->text(s, data, len);
		break;
	case SI_TITLE:
		screen_set_title(s->screen, data, len);
		tty_on_title(s, data, len);
		break;
	default:
		session_mark(s, ev, data, len, code);
		break;
	}
}

static const char *shell_path(void)
{
	if (opts.shell)
		return opts.shell;
	if (access("/bin/bash", X_OK) == 0)
		return "/bin/bash";
	return "/bin/sh";
}

static void setenv_default(const char *k, const char *v)
{
	const char *cur = getenv(k);
	if (!cur || !*cur)
		setenv(k, v, 1);
}

/* In the child: become the session leader with the pty as controlling
 * terminal, set the environment and exec. Never returns. */
static void child_exec(struct session *s, const char *slave, const char *cwd, const cJSON *env)
{
	setsid();
	int fd = open(slave, O_RDWR);
	if (fd < 0)
		_exit(127);
	ioctl(fd, TIOCSCTTY, 0);
	dup2(fd, 0);
	dup2(fd, 1);
	dup2(fd, 2);
	if (fd > 2)
		close(fd);
	/* close every other descriptor termd holds */
	long maxfd = sysconf(_SC_OPEN_MAX);
	if (maxfd < 0 || maxfd > 65536)
		maxfd = 65536;
	for (int i = 3; i < maxfd; i++)
		close(i);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);

	setenv("TERM", "xterm-256color", 1);
	setenv_default("PAGER", "cat");
	setenv_default("GIT_PAGER", "cat");
	setenv_default("LANG", "C.UTF-8");
	setenv("TERMD_SESSION", s->name, 1);
	unsetenv("TERMD_TOKEN");
	if (env && cJSON_IsObject(env)) {
		const cJSON *e;
		cJSON_ArrayForEach(e, env) {
			if (cJSON_IsString(e) && e->string)
				setenv(e->string, e->valuestring, 1);
		}
	}
	if (cwd && chdir(cwd) != 0) {
		fprintf(stderr, "termd: cannot cd to %s: %s\n", cwd, strerror(errno));
	}
	const char *sh = shell_path();
	char rc[4200];
	if (s->is_shell && s->shell_kind == SHELL_BASH) {
		setenv("TERMD_NONCE", shellint_nonce(s->si), 1);
		snprintf(rc, sizeof rc, "%s/termd.bash", srv.rundir);
		execl(sh, sh, "--noprofile", "--rcfile", rc, "-i", (char *)NULL);
	} else if (s->is_shell) {
		setenv("TERMD_NONCE", shellint_nonce(s->si), 1);
		const char *user_env = getenv("ENV");
		if (user_env)
			setenv("TERMD_USER_ENV", user_env, 1);
		snprintf(rc, sizeof rc, "%s/termd.sh", srv.rundir);
		setenv("ENV", rc, 1);
		execl(sh, sh, "-i", (char *)NULL);
	} else {
		execl(sh, sh, "-c", s->command, (char *)NULL);
	}
	fprintf(stderr, "termd: cannot run %s: %s\n", sh, strerror(errno));
	_exit(127);
}

static int spawn(struct session *s, const char *cwd, const cJSON *env, char *err, size_t errlen)
{
	if (!rc_written) {
		if (shellint_write_rc(srv.rundir) < 0) {
			snprintf(err, errlen, "cannot write the shell integration files");
			return -1;
		}
		rc_written = 1;
	}
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0 ||
	    ptsname_r(m, s->slave_name, sizeof s->slave_name) != 0) {
		snprintf(err, errlen, "cannot allocate a pty: %s", strerror(errno));
		if (m >= 0)
			close(m);
		return -1;
	}
	struct winsize ws = {.ws_row = (unsigned short)s->rows, .ws_col = (unsigned short)s->cols};
	ioctl(m, TIOCSWINSZ, &ws);
	/* set sane modes on the slave before the child opens it */
	int sfd = open(s->slave_name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (sfd >= 0) {
		struct termios t;
		if (tcgetattr(sfd, &t) == 0) {
			t.c_iflag |= IUTF8;
			tcsetattr(sfd, TCSANOW, &t);
		}
	}
	const char *sh = shell_path();
	const char *base = strrchr(sh, '/');
	base = base ? base + 1 : sh;
	s->shell_kind = strcmp(base, "bash") == 0 ? SHELL_BASH : SHELL_SH;

	pid_t pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "fork failed: %s", strerror(errno));
		close(m);
		if (sfd >= 0)
			close(sfd);
		return -1;
	}
	if (pid == 0)
		child_exec(s, s->slave_name, cwd, env);
	child_watch(pid, session_reaped, s);
	if (sfd >= 0)
		close(sfd);
	fcntl(m, F_SETFL, fcntl(m, F_GETFL) | O_NONBLOCK);
	s->master_fd = m;
	s->pid = pid;
	s->alive = 1;
	s->reaped = 0;
	s->pty_closed = 0;
	s->exit_code = -1;
	s->exit_signal = 0;
	s->state = s->is_shell ? SH_STARTING : SH_RUNNING;
	s->ready = 0;
	s->wsi = server_adopt_fd(m, pty_event, s);
	if (!s->wsi) {
		snprintf(err, errlen, "cannot watch the pty");
		kill(pid, SIGKILL);
		return -1;
	}
	log_debug("session %s: pid %d on %s", s->name, (int)pid, s->slave_name);
	return 0;
}

struct session *session_open(const char *name, const char *command, const char *cwd,
			     const cJSON *env, int cols, int rows, td_err *code, char *err,
			     size_t errlen)
{
	*code = TD_ERR_INTERNAL;
	if ((size_t)srv.nsessions >= opts.max_sessions) {
		*code = TD_ERR_TOO_LARGE;
		snprintf(err, errlen, "termd already has %d sessions, its limit (--max-sessions); "
			 "close one first", srv.nsessions);
		return NULL;
	}
	struct session *s = xcalloc(1, sizeof *s);
	snprintf(s->name, sizeof s->name, "%s", name);
	s->command = command ? xstrdup(command) : NULL;
	s->is_shell = command == NULL;
	s->cols = cols > 0 ? cols : TD_DEFAULT_COLS;
	s->rows = rows > 0 ? rows : TD_DEFAULT_ROWS;
	s->master_fd = -1;
	s->screen = screen_new(s->rows, s->cols);
	screen_set_scrollback(s->screen, opts.scrollback);
	screen_set_output(s->screen, vt_answer, s);
	s->si = shellint_new(on_shellint, s);
	s->cwd = xstrdup(cwd ? cwd : opts.cwd);
	if (spawn(s, s->cwd, env, err, errlen) < 0) {
		screen_free(s->screen);
		shellint_free(s->si);
		free(s->cwd);
		free(s->command);
		free(s);
		return NULL;
	}
	/* append to keep creation order */
	struct session **pp = &srv.sessions;
	while (*pp)
		pp = &(*pp)->next;
	*pp = s;
	srv.nsessions++;
	return s;
}

int session_respawn(struct session *s, char *err, size_t errlen)
{
	shellint_free(s->si);
	s->si = shellint_new(on_shellint, s);
	buf_reset(&s->inq);
	free(s->cwd);
	s->cwd = xstrdup(opts.cwd);
	return spawn(s, s->cwd, NULL, err, errlen);
}

static void flush_input(struct session *s)
{
	while (s->inq.len && s->master_fd >= 0) {
		ssize_t w = write(s->master_fd, s->inq.p, s->inq.len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				buf_reset(&s->inq);   /* pty gone: input is lost */
			break;
		}
		buf_consume(&s->inq, (size_t)w);
	}
	if (s->inq.len && s->wsi)
		lws_callback_on_writable(s->wsi);
}

void session_write(struct session *s, const void *data, size_t len)
{
	if (!s->alive || s->master_fd < 0 || !len)
		return;
	buf_append(&s->inq, data, len);
	flush_input(s);
}

void session_resize(struct session *s, int cols, int rows)
{
	if (cols < 2 || rows < 1 || cols > 1000 || rows > 1000)
		return;
	if (cols == s->cols && rows == s->rows)
		return;
	s->cols = cols;
	s->rows = rows;
	screen_resize(s->screen, rows, cols);
	if (s->master_fd >= 0) {
		struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
		ioctl(s->master_fd, TIOCSWINSZ, &ws);
	}
	tty_on_resize(s);
}

pid_t session_fg_pid(struct session *s)
{
	if (s->master_fd >= 0 && s->alive) {
		pid_t pg = tcgetpgrp(s->master_fd);
		if (pg > 0)
			return pg;
	}
	return s->pid;
}

/* Both the child is reaped and the pty drained (or the grace time passed):
 * the session's process has ended. */
static void finalize_exit(struct session *s)
{
	if (!s->alive)
		return;
	s->alive = 0;
	s->state = SH_DEAD;
	lws_sul_cancel(&s->ready_sul);
	lws_sul_cancel(&s->exit_sul);
	if (s->wsi) {
		struct lws *w = s->wsi;
		s->wsi = NULL;
		lws_set_opaque_user_data(w, NULL);
		lws_set_timeout(w, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
	}
	s->master_fd = -1;
	buf_reset(&s->inq);
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "name", s->name);
	cJSON_AddNumberToObject(ex, "exit_code", s->exit_code);
	const char *signame = s->exit_signal ? sigabbrev_np(s->exit_signal) : NULL;
	if (signame)
		cJSON_AddStringToObject(ex, "signal", signame);   /* "KILL", as session.signal names it */
	else if (s->exit_signal)
		cJSON_AddNumberToObject(ex, "signal", s->exit_signal);
	else
		cJSON_AddNullToObject(ex, "signal");
	log_debug("session %s: exited (code %d, signal %d)", s->name, s->exit_code, s->exit_signal);
	session_exited(s);
	tty_on_exit(s);
	events_emit(NULL, NULL, "session.exit", "", ex);
	/* a closed one is freed here, or by its KILL timer if that is still to
	 * run; a shell (main included) starts again on the next action */
	if (s->closing && s->close_killed)
		session_destroy(s);
}

static void finalize_timer(lws_sorted_usec_list_t *sul)
{
	struct session *s = lws_container_of(sul, struct session, exit_sul);
	finalize_exit(s);
}

/* The session's process was reaped (child.c): its exit status; the end
 * is final once the pty is drained too (or after a grace time). */
static void session_reaped(void *arg, pid_t pid, int st)
{
	struct session *s = arg;
	(void)pid;
	if (!s->alive || s->reaped)
		return;
	s->reaped = 1;
	if (WIFEXITED(st)) {
		s->exit_code = WEXITSTATUS(st);
	} else if (WIFSIGNALED(st)) {
		s->exit_signal = WTERMSIG(st);
		s->exit_code = 128 + s->exit_signal;
	}
	if (s->pty_closed || s->closing)
		finalize_exit(s);
	else
		server_timer(&s->exit_sul, finalize_timer, FINALIZE_GRACE_US);
}

/* Drain what the pty has (up to a budget, so one busy session cannot
 * starve the others): fewer trips through poll for a fast producer. */
static void on_pty_readable(struct session *s)
{
	static char buf[PTY_READ_MAX];
	size_t budget = PTY_READ_BUDGET;
	while (budget && s->master_fd >= 0) {
		ssize_t n = read(s->master_fd, buf, sizeof buf);
		if (n > 0) {
			s->last_output_us = mono_us();
			screen_feed(s->screen, buf, (size_t)n);
			shellint_feed(s->si, buf, (size_t)n);
			if (s->viewers)
				tty_on_output(s, buf, (size_t)n);
			budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		/* EOF / EIO: every slave fd is closed */
		s->pty_closed = 1;
		return;
	}
}

/* the pty master's events; s is NULL once the session let go of it */
static int pty_event(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
{
	struct session *s = arg;
	switch (reason) {
	case LWS_CALLBACK_RAW_RX_FILE:
		if (!s)
			return -1;
		on_pty_readable(s);
		if (s->pty_closed) {
			s->wsi = NULL;
			lws_set_opaque_user_data(wsi, NULL);
			if (s->reaped)
				finalize_exit(s);
			s->master_fd = -1;
			return -1;   /* lws closes the fd */
		}
		break;
	case LWS_CALLBACK_RAW_WRITEABLE_FILE:
		if (s)
			flush_input(s);
		break;
	case LWS_CALLBACK_RAW_CLOSE_FILE:
		if (s && s->wsi == wsi) {
			s->wsi = NULL;
			s->master_fd = -1;
			s->pty_closed = 1;
			if (s->reaped)
				finalize_exit(s);
		}
		break;
	default:
		break;
	}
	return 0;
}

static void session_free(struct session *s)
{
	if (!s->reaped && s->pid > 0)
		child_unwatch(s->pid);
	lws_sul_cancel(&s->ready_sul);
	lws_sul_cancel(&s->exit_sul);
	lws_sul_cancel(&s->close_sul);
	session_gone(s);
	tty_session_gone(s);
	if (s->wsi) {
		lws_set_opaque_user_data(s->wsi, NULL);
		lws_set_timeout(s->wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
		s->wsi = NULL;
	}
	screen_free(s->screen);
	shellint_free(s->si);
	buf_free(&s->inq);
	buf_free(&s->typed);
	free(s->cwd);
	free(s->command);
	free(s);
}

void session_destroy(struct session *s)
{
	for (struct session **pp = &srv.closing; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	session_free(s);
}

void session_stop_all(void)
{
	struct session *lists[2] = {srv.sessions, srv.closing};
	for (int l = 0; l < 2; l++) {
		for (struct session *s = lists[l]; s; s = s->next) {
			lws_sul_cancel(&s->ready_sul);
			lws_sul_cancel(&s->exit_sul);
			lws_sul_cancel(&s->close_sul);
			session_gone(s);
			tty_session_gone(s);
			if (s->alive && s->pid > 0) {
				kill(-s->pid, SIGHUP);
				kill(s->pid, SIGHUP);
			}
		}
	}
	usleep(50000);
	for (int l = 0; l < 2; l++) {
		for (struct session *s = lists[l]; s; s = s->next) {
			if (s->alive && s->pid > 0 && !s->reaped) {
				kill(-s->pid, SIGKILL);
				kill(s->pid, SIGKILL);
				child_unwatch(s->pid);
				waitpid(s->pid, NULL, 0);
			}
			s->alive = 0;
			/* the loop closes the pty fds as it goes away */
			if (s->wsi)
				lws_set_opaque_user_data(s->wsi, NULL);
			s->wsi = NULL;
		}
	}
}

void session_free_all(void)
{
	struct session *lists[2] = {srv.sessions, srv.closing};
	srv.sessions = srv.closing = NULL;
	for (int l = 0; l < 2; l++) {
		while (lists[l]) {
			struct session *s = lists[l];
			lists[l] = s->next;
			session_free(s);
		}
	}
	srv.nsessions = 0;
	rc_written = 0;
}
