/* pty.c — one process on a pty: allocating it, forking the child with the
 * pty as its controlling terminal (the owner's hook sets the environment
 * and execs), the master fd adopted into termd's loop, reading with a
 * budget per wakeup (one flooding pty cannot starve the loop), the input
 * queue written as the pty accepts it, resizing, and the end: reaped
 * (child.c) and drained, or a grace time after the reaping. Reports to its
 * owner only through struct pty_hooks. */
#include "core.h"

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
#define END_GRACE_US 150000   /* after the child is reaped, wait this long for pty EOF */

static int pty_event(struct lws *wsi, enum lws_callback_reasons reason, void *arg);

/* Reaped and drained (or the grace time passed): the process has ended. */
static void pty_end(struct pty *p)
{
	if (!p->alive)
		return;
	p->alive = 0;
	lws_sul_cancel(&p->end_sul);
	pty_release(p);
	buf_reset(&p->inq);
	p->hooks->ended(p->owner);
}

static void end_timer(lws_sorted_usec_list_t *sul)
{
	pty_end(lws_container_of(sul, struct pty, end_sul));
}

static void pty_reaped(void *arg, pid_t pid, int st)
{
	struct pty *p = arg;
	(void)pid;
	if (!p->alive || p->reaped)
		return;
	p->reaped = 1;
	if (WIFEXITED(st)) {
		p->exit_code = WEXITSTATUS(st);
	} else if (WIFSIGNALED(st)) {
		p->exit_signal = WTERMSIG(st);
		p->exit_code = 128 + p->exit_signal;
	}
	if (p->closed)
		pty_end(p);
	else
		server_timer(&p->end_sul, end_timer, END_GRACE_US);
}

int pty_spawn(struct pty *p, int cols, int rows, const struct pty_hooks *hooks, void *owner,
	      char *err, size_t errlen)
{
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0 ||
	    ptsname_r(m, p->slave, sizeof p->slave) != 0) {
		snprintf(err, errlen, "cannot allocate a pty: %s", strerror(errno));
		if (m >= 0)
			close(m);
		return -1;
	}
	struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
	ioctl(m, TIOCSWINSZ, &ws);
	/* set sane modes on the slave before the child opens it */
	int sfd = open(p->slave, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (sfd >= 0) {
		struct termios t;
		if (tcgetattr(sfd, &t) == 0) {
			t.c_iflag |= IUTF8;
			tcsetattr(sfd, TCSANOW, &t);
		}
	}
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "fork failed: %s", strerror(errno));
		close(m);
		if (sfd >= 0)
			close(sfd);
		return -1;
	}
	if (pid == 0) {
		setsid();
		int fd = open(p->slave, O_RDWR);
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
		hooks->child(owner);
		_exit(127);
	}
	if (sfd >= 0)
		close(sfd);
	fcntl(m, F_SETFL, fcntl(m, F_GETFL) | O_NONBLOCK);
	p->fd = m;
	p->pid = pid;
	p->alive = 1;
	p->reaped = p->closed = 0;
	p->exit_code = -1;
	p->exit_signal = 0;
	p->hooks = hooks;
	p->owner = owner;
	child_watch(pid, pty_reaped, p);
	p->wsi = server_adopt_fd(m, pty_event, p);
	if (!p->wsi) {
		snprintf(err, errlen, "cannot watch the pty");
		child_unwatch(pid);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		close(m);
		p->fd = -1;
		p->alive = 0;
		return -1;
	}
	return 0;
}

static void flush_input(struct pty *p)
{
	while (p->inq.len && p->fd >= 0) {
		ssize_t w = write(p->fd, p->inq.p, p->inq.len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				buf_reset(&p->inq);   /* pty gone: input is lost */
			break;
		}
		buf_consume(&p->inq, (size_t)w);
	}
	if (p->inq.len && p->wsi)
		lws_callback_on_writable(p->wsi);
}

void pty_write(struct pty *p, const void *data, size_t n)
{
	if (!p->alive || p->fd < 0 || !n)
		return;
	buf_append(&p->inq, data, n);
	flush_input(p);
}

void pty_resize(struct pty *p, int cols, int rows)
{
	if (p->fd < 0)
		return;
	struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
	ioctl(p->fd, TIOCSWINSZ, &ws);
}

pid_t pty_fg_pid(struct pty *p)
{
	if (p->fd >= 0 && p->alive) {
		pid_t pg = tcgetpgrp(p->fd);
		if (pg > 0)
			return pg;
	}
	return p->pid;
}

int pty_unread(struct pty *p)
{
	int n = 0;
	return p->fd >= 0 && ioctl(p->fd, FIONREAD, &n) == 0 && n > 0;
}

void pty_signal_end(struct pty *p, int kill_it)
{
	if (!p->alive || p->pid <= 0 || p->reaped)
		return;
	if (!kill_it) {
		kill(-p->pid, SIGHUP);
		kill(p->pid, SIGHUP);
		return;
	}
	kill(-p->pid, SIGKILL);
	kill(p->pid, SIGKILL);
	child_unwatch(p->pid);
	waitpid(p->pid, NULL, 0);
	p->reaped = 1;
	p->alive = 0;
}

void pty_release(struct pty *p)
{
	lws_sul_cancel(&p->end_sul);
	if (!p->reaped && p->pid > 0 && p->alive) {
		/* still running: nobody waits for it any more */
		child_unwatch(p->pid);
	}
	if (p->wsi) {
		struct lws *w = p->wsi;
		p->wsi = NULL;
		lws_set_opaque_user_data(w, NULL);
		lws_set_timeout(w, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
	}
	p->fd = -1;
}

void pty_hold(struct pty *p, int hold, int once)
{
	if (!p->wsi || (p->held == hold && !once))
		return;
	p->held = hold;
	p->read_once = once;
	lws_rx_flow_control(p->wsi, !hold);
}

/* Drain what the pty has (up to a budget): fewer trips through poll for a
 * fast producer. A read after the first only when the kernel says there
 * is more: a read of an empty pty waits for the kernel's worker to move
 * what the writer wrote (n_tty's flush_work), which can take milliseconds
 * on a busy machine. */
static void on_readable(struct pty *p)
{
	static char buf[PTY_READ_MAX];
	size_t budget = PTY_READ_BUDGET;
	int full = 0, first = 1;
	if (p->held)
		return;
	while (p->fd >= 0) {
		int avail = 0;
		if (!budget) {
			full = 1;
			break;
		}
		if (!first && (ioctl(p->fd, FIONREAD, &avail) < 0 || avail <= 0))
			break;
		first = 0;
		ssize_t n = read(p->fd, buf, sizeof buf);
		if (n > 0) {
			p->hooks->output(p->owner, buf, (size_t)n);
			budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
			if (p->read_once) {
				full = 1;   /* still bulk: held again */
				break;
			}
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		/* EOF / EIO: every slave fd is closed */
		p->closed = 1;
		return;
	}
	p->read_once = 0;
	if (p->hooks->read_done)
		p->hooks->read_done(p->owner, full);
}

/* the master's events; p is NULL once the owner let go of it */
static int pty_event(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
{
	struct pty *p = arg;
	switch (reason) {
	case LWS_CALLBACK_RAW_RX_FILE:
		if (!p)
			return -1;
		on_readable(p);
		if (p->closed) {
			p->wsi = NULL;
			p->fd = -1;
			lws_set_opaque_user_data(wsi, NULL);
			if (p->reaped)
				pty_end(p);
			return -1;   /* lws closes the fd */
		}
		break;
	case LWS_CALLBACK_RAW_WRITEABLE_FILE:
		if (p)
			flush_input(p);
		break;
	case LWS_CALLBACK_RAW_CLOSE_FILE:
		if (p && p->wsi == wsi) {
			p->wsi = NULL;
			p->fd = -1;
			p->closed = 1;
			if (p->reaped)
				pty_end(p);
		}
		break;
	default:
		break;
	}
	return 0;
}
