/* pty.h — one process on a pty (pty.c): spawn, the master fd in termd's
 * loop, input queue, resize, reaping. It knows nothing of sessions, runs,
 * viewers or events: it reports output and its end through hooks. */
#ifndef TERMD_PTY_H
#define TERMD_PTY_H

#include <sys/types.h>
#include <libwebsockets.h>
#include "util.h"

struct pty_hooks {
	void (*output)(void *owner, const char *data, size_t n);
	/* a read turn is over: full = it used the whole budget (optional) */
	void (*read_done)(void *owner, int full);
	/* the process was reaped and the pty drained (or a grace time
	 * passed): exit_code / exit_signal are set */
	void (*ended)(void *owner);
	/* in the child, the pty its controlling terminal on 0-2: set the
	 * environment and exec; must not return */
	void (*child)(void *owner);
};

struct pty {
	int fd;                   /* master, -1 once closed */
	char slave[64];
	pid_t pid;
	struct lws *wsi;          /* the master in the loop */
	buf_t inq;                /* bytes waiting to be written */
	int alive;                /* spawned and not yet ended */
	int reaped, closed;
	int exit_code, exit_signal;
	const struct pty_hooks *hooks;
	void *owner;
	lws_sorted_usec_list_t end_sul;
	int held;                 /* not read (pty_hold) */
	int read_once;            /* released for one read, then held */
};

int pty_spawn(struct pty *p, int cols, int rows, const struct pty_hooks *hooks, void *owner,
	      char *err, size_t errlen);
void pty_write(struct pty *p, const void *data, size_t n);
void pty_resize(struct pty *p, int cols, int rows);
/* the foreground process group (the process itself when it cannot tell) */
pid_t pty_fg_pid(struct pty *p);
/* output the pty holds that termd has not read yet */
int pty_unread(struct pty *p);
/* Stop reading it (hold = 1: the kernel blocks its writer once its buffer
 * is full), or read it again; once = 1: for one read (reported as a full
 * turn, so the owner holds it again). */
void pty_hold(struct pty *p, int hold, int once);
/* HUP its process group (kill = 0) or KILL it and wait (kill = 1) */
void pty_signal_end(struct pty *p, int kill);
/* stop watching: the owner goes away (the fd is closed by the loop) */
void pty_release(struct pty *p);

#endif
