/* pty.h — one process on a pty, or on pipes (pty.c): spawn, the master
 * fd (or stdout's and stderr's read ends) in termd's loop, input queue,
 * resize, reaping. It knows nothing of sessions, runs, viewers or events:
 * it reports output and its end through hooks. */
#ifndef TERMD_PTY_H
#define TERMD_PTY_H

#include <sys/types.h>
#include <libwebsockets.h>
#include "util.h"

struct pty_hooks {
	/* stream 1: the pty (or a pipe process's stdout), 2: its stderr */
	void (*output)(void *owner, int stream, const char *data, size_t n);
	/* a read turn is over: full = it used the whole budget (optional) */
	void (*read_done)(void *owner, int full);
	/* the process was reaped and the pty drained (or a grace time
	 * passed): exit_code / exit_signal are set */
	void (*ended)(void *owner);
	/* in the child, the pty its controlling terminal on 0-2: set the
	 * environment and exec; must not return */
	void (*child)(void *owner);
};

/* spawn with pipes instead of a pty: no terminal; stdin a pipe when
 * asked for (else /dev/null), stdout and stderr pipes kept apart */
enum { PTY_TERMINAL = 0, PTY_PIPES = 1, PTY_PIPES_STDIN = 2 };

struct pty {
	int fd;                   /* master (pipes: stdout's read end), -1 once closed */
	int pipes;                /* spawned with PTY_PIPES*: no terminal */
	int hold_fd;              /* a second master fd, closed once the process is
				   * reaped: the master read's EIO closes the loop's,
				   * and the last close hangs the terminal up */
	int err_fd;               /* pipes: stderr's read end, -1 once closed */
	struct lws *err_wsi;
	int in_fd;                /* pipes: stdin's write end, -1 when none or closed */
	int in_eof;               /* pty_close_input: close it once inq is written */
	lws_sorted_usec_list_t in_sul; /* pipes: write inq again (the pipe was full) */
	char slave[64];
	pid_t pid;
	struct lws *wsi;          /* the master in the loop */
	buf_t inq;                /* bytes waiting to be written, from inq_off */
	size_t inq_off;           /* ... written up to here (moved down now and then) */
	int alive;                /* spawned and not yet ended */
	int reaped, closed;
	int exit_code, exit_signal;
	const struct pty_hooks *hooks;
	void *owner;
	lws_sorted_usec_list_t end_sul;
	int held;                 /* not read (pty_hold) */
	int read_once;            /* released for one read, then held */
	int in_cgroup;            /* its process was born in the cgroup pty_spawn_in
				   * was given (clone3): in the child, nothing to join */
};

/* mode: PTY_TERMINAL or PTY_PIPES[_STDIN] */
int pty_spawn(struct pty *p, int mode, int cols, int rows, const struct pty_hooks *hooks,
	      void *owner, char *err, size_t errlen);
/* pty_spawn with the child born in the cgroup v2 folder cgfd (an open
 * directory; -1: none) by clone3(CLONE_INTO_CGROUP): p->in_cgroup set.
 * Where the kernel (or a seccomp filter) refuses clone3 a plain fork, said
 * once in the log, and p->in_cgroup 0: the child joins itself. The child
 * of a clone3 is a raw copy of a threaded process: the hook must use
 * async-signal-safe calls only (no malloc, no stdio, no glibc setxid). */
int pty_spawn_in(struct pty *p, int cgfd, int mode, int cols, int rows,
		 const struct pty_hooks *hooks, void *owner, char *err, size_t errlen);
/* A stub forked ahead of need: prepare(arg) runs in it and the stub tells
 * how it went with one byte on *ctl (termd's end): PTY_STUB_FAILED (and
 * it ends), or PTY_STUB_READY once it has exec'd into `termd --stub`
 * (prepare gave 0); then it waits on *ctl for pty_spawn_stub.
 * Its pid, or -1. Closing *ctl unused ends it. */
#define PTY_STUB_READY 'r'
#define PTY_STUB_FAILED 'f'
pid_t pty_stub_fork(int *ctl, int (*prepare)(void *), void *arg);
/* the stub's waiting (`termd --stub`, fd 3 its end): never returns */
void pty_stub_main(void) __attribute__((noreturn));
/* pty_spawn with a stub (taken off any child_watch first), mode as
 * pty_spawn's: the pty (or the pipes) made here, the slave (or the
 * child's three pipe ends) passed on ctl (closed after) with the plan:
 * NUL-terminated cwd, then argc and argv, envc and envp (counts as
 * decimal strings), each NUL-terminated. ctl is closed. 0, or -1 (the
 * stub is the caller's to end). */
int pty_spawn_stub(struct pty *p, pid_t pid, int ctl, int mode, const char *plan, size_t plen,
		   int cols, int rows, const struct pty_hooks *hooks, void *owner, char *err,
		   size_t errlen);
/* take over a running process whose fds survived an execve (handover.c);
 * an output fd may be -1 (closed already: both closed, it waits for the
 * process); wait_status: the status the old termd reaped it with, -1 when
 * not reaped yet (then ended from the loop once its output is drained) */
int pty_adopt(struct pty *p, int pipes, pid_t pid, int fd, int hold_fd, int err_fd, int in_fd,
	      int wait_status, const struct pty_hooks *hooks, void *owner);
/* the status a reaped process was reaped with (exit_code, exit_signal) */
int pty_wait_status(const struct pty *p);
/* pipes: end of file on stdin once what is queued is written; -1 when
 * there is no stdin pipe (a terminal, /dev/null, closed already) */
int pty_close_input(struct pty *p);
/* pipes: stdin is a pipe still open */
int pty_input_open(const struct pty *p);
void pty_write(struct pty *p, const void *data, size_t n);
/* bytes written with pty_write that the process has not taken yet */
size_t pty_queued(const struct pty *p);
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
