/* pty.c — one process on a pty, or on pipes: allocating the pty, forking
 * the child with it as its controlling terminal (or, for a pipe process,
 * in a session of its own with pipes on 0-2: stdin or /dev/null, stdout
 * and stderr apart; the owner's hook sets the environment and execs), the
 * master fd (the pipes' read ends) adopted into termd's loop, reading with
 * a budget per wakeup (one flooding process cannot starve the loop), the
 * input queue written as the pty (stdin pipe) accepts it, resizing, and
 * the end: reaped (child.c) and drained, or a grace time after the
 * reaping. Reports to its owner only through struct pty_hooks. A stub: a
 * process forked ahead of need (its owner's preparation done, e.g. its
 * cgroup joined) that waits for its terminal and plan and execs. */
#include "core.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#define PTY_READ_MAX 65536
/* bytes taken from one pty per wakeup: a flooding session must not keep
 * the loop from the other sessions and clients for long */
#define PTY_READ_BUDGET 16384
#define END_GRACE_US 150000   /* after the child is reaped, wait this long for pty EOF */
#define INPUT_RETRY_US 5000   /* a full stdin pipe is tried again this often */

static int pty_event(struct lws *wsi, enum lws_callback_reasons reason, void *arg);
static void inq_fix(struct pty *p);

/* Reaped and drained (or the grace time passed): the process has ended. */
static void pty_end(struct pty *p)
{
	if (!p->alive)
		return;
	p->alive = 0;
	lws_sul_cancel(&p->end_sul);
	pty_release(p);
	p->inq_off = p->inq.len;
	inq_fix(p);
	p->hooks->ended(p->owner);
}

/* Read one output fd now, whatever the hold says, until it has nothing
 * more (EAGAIN), or has ended (EOF; a pty's EIO once its slave is
 * closed), or 4 MiB were read: a read, not FIONREAD, decides, because
 * FIONREAD on a pty leaves out what the kernel has not yet moved to the
 * line discipline, which the read waits for. */
static void drain_fd(struct pty *p, int fd, int stream)
{
	static char buf[PTY_READ_MAX];
	size_t left = 4u << 20;
	while (fd >= 0 && left && p->alive) {
		ssize_t n = read(fd, buf, left < sizeof buf ? left : sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		p->hooks->output(p->owner, stream, buf, (size_t)n);
		left -= (size_t)n;
	}
}

/* What the output fds hold now, read whatever the hold says: the grace
 * time ends a process whose output never reaches EOF (a background job
 * keeps the pty or a pipe open), not the bytes it wrote before it exited
 * (a session held for fairness, or a slow loop, had not read them yet:
 * a pipe's last 64 KiB of stderr were lost). */
static void drain_now(struct pty *p)
{
	drain_fd(p, p->fd, 1);
	drain_fd(p, p->err_fd, 2);
}

static void end_timer(lws_sorted_usec_list_t *sul)
{
	struct pty *p = lws_container_of(sul, struct pty, end_sul);
	drain_now(p);
	pty_end(p);
}

static void reaped_with(struct pty *p, int st)
{
	p->reaped = 1;
	if (WIFEXITED(st)) {
		p->exit_code = WEXITSTATUS(st);
	} else if (WIFSIGNALED(st)) {
		p->exit_signal = WTERMSIG(st);
		p->exit_code = 128 + p->exit_signal;
	}
}

static void pty_reaped(void *arg, pid_t pid, int st)
{
	struct pty *p = arg;
	(void)pid;
	if (!p->alive || p->reaped)
		return;
	reaped_with(p, st);
	if (p->closed)
		pty_end(p);
	else
		server_timer(&p->end_sul, end_timer, END_GRACE_US);
}

/* The signals glibc keeps for itself (32 and 33: thread cancellation and
 * setxid) are refused by signal(); a program still inherits them ignored
 * when termd's own parent ignored them. The kernel's call sets them back to
 * the default (the child is one thread, about to exec). */
static void default_disposition(int sig)
{
	struct {
		void (*handler)(int);
		unsigned long flags;
		void (*restorer)(void);
		unsigned long mask;
	} ksa = {SIG_DFL, 0, NULL, 0};
	syscall(SYS_rt_sigaction, sig, &ksa, NULL, sizeof ksa.mask);
}

/* the child's side, after fork: its own session, 0-2 set, every other
 * descriptor closed, signals as new; the owner's hook execs */
static void child_setup(struct pty *p, const int fds[3], const struct pty_hooks *hooks,
			void *owner)
{
	setsid();
	if (!p->pipes) {
		int fd = open(p->slave, O_RDWR);
		if (fd < 0)
			_exit(127);
		ioctl(fd, TIOCSCTTY, 0);
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		if (fd > 2)
			close(fd);
	} else {
		/* each moved above 2 first, so a dup2 cannot close another */
		int hi[3];
		for (int i = 0; i < 3; i++)
			hi[i] = fcntl(fds[i], F_DUPFD, 10);
		for (int i = 0; i < 3; i++)
			if (hi[i] < 0 || dup2(hi[i], i) < 0)
				_exit(127);
	}
	close_fds_from(3);   /* every other descriptor termd holds */
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int sig = 1; sig < NSIG; sig++)
		if (signal(sig, SIG_DFL) == SIG_ERR && sig != SIGKILL && sig != SIGSTOP)
			default_disposition(sig);
	hooks->child(owner);
	_exit(127);
}

/* a pty's master, its slave with sane modes: 0, or -1 */
static int open_terminal(struct pty *p, int cols, int rows, int *m, int *sfd, char *err,
			 size_t errlen)
{
	*m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (*m < 0 || grantpt(*m) < 0 || unlockpt(*m) < 0 ||
	    ptsname_r(*m, p->slave, sizeof p->slave) != 0) {
		snprintf(err, errlen, "cannot allocate a pty: %s", strerror(errno));
		if (*m >= 0)
			close(*m);
		return -1;
	}
	struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
	ioctl(*m, TIOCSWINSZ, &ws);
	/* set sane modes on the slave before the child opens it */
	*sfd = open(p->slave, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (*sfd >= 0) {
		struct termios t;
		if (tcgetattr(*sfd, &t) == 0) {
			t.c_iflag |= IUTF8;
			tcsetattr(*sfd, TCSANOW, &t);
		}
	}
	return 0;
}

static void close_all(int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (fds[i] >= 0) {
			close(fds[i]);
			fds[i] = -1;
		}
}

/* three pipes (stdin's only with_stdin, else /dev/null): the child's ends
 * in child[0-2], termd's in ours[0-2] (ours[0] -1 without stdin) */
static int open_pipes(int with_stdin, int child[3], int ours[3], char *err, size_t errlen)
{
	int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1};
	if ((with_stdin ? pipe2(pin, O_CLOEXEC) : 0) < 0 || pipe2(pout, O_CLOEXEC) < 0 ||
	    pipe2(perr, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "cannot make pipes: %s", strerror(errno));
		int all[6] = {pin[0], pin[1], pout[0], pout[1], perr[0], perr[1]};
		close_all(all, 6);
		return -1;
	}
	if (!with_stdin && (pin[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
		snprintf(err, errlen, "cannot open /dev/null: %s", strerror(errno));
		int all[4] = {pout[0], pout[1], perr[0], perr[1]};
		close_all(all, 4);
		return -1;
	}
	child[0] = pin[0], child[1] = pout[1], child[2] = perr[1];
	ours[0] = pin[1], ours[1] = pout[0], ours[2] = perr[0];
	return 0;
}

static int adopt_spawned(struct pty *p, pid_t pid, int ours[3], const struct pty_hooks *hooks,
			 void *owner, char *err, size_t errlen);

/* clone3's arguments: linux/sched.h's struct clone_args up to cgroup
 * (CLONE_ARGS_SIZE_VER2); glibc 2.36 has no wrapper */
struct clone3_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
	uint64_t set_tid, set_tid_size, cgroup;
};
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
static int clone3_off;   /* refused for good (or TERMD_TEST_NO_CLONE3): fork and join */

/* A child born in cgroup cgfd, as fork() makes one but with none of
 * glibc's fork handling (its locks as other threads held them: the child
 * keeps to async-signal-safe calls). Its pid, 0 in it; -2: not made, fork
 * instead (clone3 unknown, filtered, or this cgroup refused). */
static pid_t clone_into(int cgfd)
{
	static int looked;
	if (!looked) {
		looked = 1;
		const char *t = getenv("TERMD_TEST_NO_CLONE3");
		if (t && *t) {
			clone3_off = 1;
			log_info("cgroups: clone3 not used (TERMD_TEST_NO_CLONE3): a session's process "
				 "forks and joins its cgroup");
		}
	}
	if (cgfd < 0 || clone3_off)
		return -2;
#ifdef SYS_clone3
	struct clone3_args a = {.flags = CLONE_INTO_CGROUP, .exit_signal = SIGCHLD,
				.cgroup = (uint64_t)cgfd};
	long r = syscall(SYS_clone3, &a, sizeof a);
	if (r >= 0)
		return (pid_t)r;
	int e = errno;
#else
	int e = ENOSYS;
#endif
	if (e == ENOSYS || e == EINVAL || e == E2BIG || e == EPERM) {
		clone3_off = 1;
		log_info("cgroups: clone3(CLONE_INTO_CGROUP) refused (%s): a session's process forks "
			 "and joins its cgroup", strerror(e));
	} else {
		log_warn("cgroups: clone3 into a session's cgroup failed (%s): forking", strerror(e));
	}
	return -2;
}

int pty_spawn(struct pty *p, int mode, int cols, int rows, const struct pty_hooks *hooks,
	      void *owner, char *err, size_t errlen)
{
	return pty_spawn_in(p, -1, mode, cols, rows, hooks, owner, err, errlen);
}

int pty_spawn_in(struct pty *p, int cgfd, int mode, int cols, int rows,
		 const struct pty_hooks *hooks, void *owner, char *err, size_t errlen)
{
	int child[3] = {-1, -1, -1}, ours[3] = {-1, -1, -1};
	p->pipes = mode != PTY_TERMINAL;
	p->err_fd = p->in_fd = p->hold_fd = -1;
	p->err_wsi = NULL;
	p->in_eof = 0;
	if (!p->pipes) {
		if (open_terminal(p, cols, rows, &ours[1], &child[1], err, errlen) < 0)
			return -1;
	} else {
		p->slave[0] = 0;
		if (open_pipes(mode == PTY_PIPES_STDIN, child, ours, err, errlen) < 0)
			return -1;
	}
	pid_t pid = cgfd >= 0 ? clone_into(cgfd) : -2;
	p->in_cgroup = pid >= 0;
	if (pid == -2)
		pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "fork failed: %s", strerror(errno));
		close_all(child, 3);
		close_all(ours, 3);
		return -1;
	}
	if (pid == 0)
		child_setup(p, child, hooks, owner);
	close_all(child, 3);
	return adopt_spawned(p, pid, ours, hooks, owner, err, errlen);
}

/* the parent's side of a spawn: ours[1] the master (pipes: stdout's read
 * end), ours[2] stderr's, ours[0] stdin's write end, pid the child */
static int adopt_spawned(struct pty *p, pid_t pid, int ours[3], const struct pty_hooks *hooks,
			 void *owner, char *err, size_t errlen)
{
	for (int i = 0; i < 3; i++)
		if (ours[i] >= 0)
			fcntl(ours[i], F_SETFL, fcntl(ours[i], F_GETFL) | O_NONBLOCK);
	p->fd = ours[1];
	/* a program with stdin elsewhere that closes stdout and stderr before
	 * it exits (coreutils do) leaves the master at EIO while it still
	 * runs: the master stays open until it is reaped, else the hangup
	 * kills it first (SIGHUP, 37 runs in 40 of `exec id -un </dev/null`) */
	p->hold_fd = p->pipes ? -1 : fcntl(p->fd, F_DUPFD_CLOEXEC, 3);
	p->err_fd = ours[2];
	p->in_fd = ours[0];
	p->pid = pid;
	p->alive = 1;
	p->reaped = p->closed = 0;
	p->exit_code = -1;
	p->exit_signal = 0;
	p->hooks = hooks;
	p->owner = owner;
	child_watch(pid, pty_reaped, p);
	p->wsi = server_adopt_fd(p->fd, pty_event, p);
	if (p->wsi && p->err_fd >= 0)
		p->err_wsi = server_adopt_fd(p->err_fd, pty_event, p);
	if (!p->wsi || (p->err_fd >= 0 && !p->err_wsi)) {
		snprintf(err, errlen, p->pipes ? "cannot watch the pipes" : "cannot watch the pty");
		child_unwatch(pid);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		/* the loop closes what it adopted; the rest is closed here */
		int out_adopted = p->wsi != NULL, err_adopted = p->err_wsi != NULL;
		p->alive = 0;
		p->reaped = 1;
		pty_release(p);
		if (!out_adopted)
			close(ours[1]);
		if (!err_adopted && ours[2] >= 0)
			close(ours[2]);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------- stubs */

static int read_full(int fd, void *b, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, (char *)b + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

/* the next NUL-terminated string of the plan at *at (before end), or NULL */
static char *plan_str(char **at, char *end)
{
	char *s = *at;
	char *z = s < end ? memchr(s, 0, (size_t)(end - s)) : NULL;
	if (!z)
		return NULL;
	*at = z + 1;
	return s;
}

/* n strings of the plan into a NULL-terminated array, or NULL */
static char **plan_vec(char **at, char *end)
{
	char *c = plan_str(at, end);
	long n = c ? strtol(c, NULL, 10) : -1;
	if (n < 0 || n > 100000)
		return NULL;
	char **v = calloc((size_t)n + 1, sizeof *v);
	for (long i = 0; v && i < n; i++)
		if (!(v[i] = plan_str(at, end)))
			return NULL;
	return v;
}

/* The stub, waiting on fd 3 for its terminal, or its three pipe ends
 * (stdin, stdout, stderr), passed along, and its plan: cwd, argv, envp
 * (pty_spawn_stub's). Never returns. */
void pty_stub_main(void)
{
	/* said from here, the image that will wait: a stub whose exec ran
	 * something else (under valgrind /proc/self/exe is valgrind's tool,
	 * which refuses to run) never says it, and is never taken */
	char ready = PTY_STUB_READY;
	if (write(3, &ready, 1) != 1)
		_exit(0);
	uint32_t n = 0;
	int fds[3] = {-1, -1, -1}, nfds = 0;
	char cbuf[CMSG_SPACE(sizeof fds)];
	struct iovec iov = {&n, sizeof n};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof cbuf};
	ssize_t r;
	do
		r = recvmsg(3, &mh, MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	struct cmsghdr *cm = r == (ssize_t)sizeof n ? CMSG_FIRSTHDR(&mh) : NULL;
	if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
		nfds = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		if (nfds > 3)
			nfds = 3;
		memcpy(fds, CMSG_DATA(cm), (size_t)nfds * sizeof(int));
	}
	char *b = (nfds == 1 || nfds == 3) && n && n < (1u << 24) ? malloc(n) : NULL;
	if (!b || read_full(3, b, n) < 0)
		_exit(0);   /* not wanted after all (termd ended, or dropped it) */
	close(3);
	char *at = b, *end = b + n;
	char *cwd = plan_str(&at, end);
	char **argv = plan_vec(&at, end);
	char **envp = plan_vec(&at, end);
	if (!cwd || !argv || !argv[0] || !envp)
		_exit(127);
	if (nfds == 1) {   /* a terminal: the session's controlling one */
		ioctl(fds[0], TIOCSCTTY, 0);
		for (int i = 0; i < 3; i++)
			dup2(fds[0], i);
	} else {   /* pipes: each moved above 2 first, so a dup2 cannot close another */
		int hi[3];
		for (int i = 0; i < 3; i++)
			hi[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 10);
		for (int i = 0; i < 3; i++)
			if (hi[i] < 0 || dup2(hi[i], i) < 0)
				_exit(127);
	}
	close_fds_from(3);
	if (*cwd && chdir(cwd) != 0)
		fprintf(stderr, "termd: cannot cd to %s: %s\n", cwd, strerror(errno));
	execve(argv[0], argv, envp);
	fprintf(stderr, "termd: cannot run %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

pid_t pty_stub_fork(int *ctl, int (*prepare)(void *), void *arg)
{
	/* TERMD_TEST_STUB_EXE (tests only): exec this instead of termd */
	const char *exe = getenv("TERMD_TEST_STUB_EXE");
	if (!exe || !*exe)
		exe = "/proc/self/exe";
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
		return -1;
	pid_t pid = fork();
	if (pid < 0) {
		close(sp[0]);
		close(sp[1]);
		return -1;
	}
	if (pid == 0) {
		setsid();   /* none of termd's terminal's signals */
		if (sp[0] != 3 && dup2(sp[0], 3) < 0)
			_exit(127);
		close_fds_from(4);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		for (int sig = 1; sig < NSIG; sig++)
			if (signal(sig, SIG_DFL) == SIG_ERR && sig != SIGKILL && sig != SIGSTOP)
				default_disposition(sig);   /* exec keeps what is ignored */
		if (prepare(arg) != 0) {
			char said = PTY_STUB_FAILED;
			ssize_t w = write(3, &said, 1);
			(void)w;
			_exit(0);
		}
		/* a fresh small image to wait in: a fork would keep termd's
		 * memory as it was (copied as termd goes on writing it); it
		 * says it is ready (pty_stub_main), or here if exec fails */
		execl(exe, "termd", "--stub", (char *)NULL);
		pty_stub_main();
	}
	close(sp[0]);
	*ctl = sp[1];
	return pid;
}

int pty_spawn_stub(struct pty *p, pid_t pid, int ctl, int mode, const char *plan, size_t plen,
		   int cols, int rows, const struct pty_hooks *hooks, void *owner, char *err,
		   size_t errlen)
{
	int child[3] = {-1, -1, -1}, ours[3] = {-1, -1, -1}, nfds;
	p->pipes = mode != PTY_TERMINAL;
	p->err_fd = p->in_fd = p->hold_fd = -1;
	p->err_wsi = NULL;
	p->in_eof = 0;
	if (!p->pipes) {
		nfds = 1;
		if (open_terminal(p, cols, rows, &ours[1], &child[0], err, errlen) < 0) {
			close(ctl);
			return -1;
		}
	} else {
		nfds = 3;
		p->slave[0] = 0;
		if (open_pipes(mode == PTY_PIPES_STDIN, child, ours, err, errlen) < 0) {
			close(ctl);
			return -1;
		}
	}
	uint32_t n = (uint32_t)plen;
	char cbuf[CMSG_SPACE(sizeof child)];
	memset(cbuf, 0, sizeof cbuf);
	struct iovec iov = {&n, sizeof n};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int))};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
	memcpy(CMSG_DATA(cm), child, (size_t)nfds * sizeof(int));
	int ok = sendmsg(ctl, &mh, MSG_NOSIGNAL) == (ssize_t)sizeof n;
	for (size_t off = 0; ok && off < plen;) {
		ssize_t w = send(ctl, plan + off, plen - off, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			ok = 0;
		else
			off += (size_t)w;
	}
	close_all(child, 3);   /* the stub holds them now */
	close(ctl);
	if (!ok) {
		snprintf(err, errlen, "cannot hand the session to its process: %s", strerror(errno));
		close_all(ours, 3);
		return -1;
	}
	return adopt_spawned(p, pid, ours, hooks, owner, err, errlen);
}

/* A process handed over by the termd this one replaced (handover.c): its
 * fds were kept across execve and it is still our child. */
int pty_wait_status(const struct pty *p)
{
	if (!p->reaped)
		return -1;
	return p->exit_signal ? p->exit_signal & 0x7f : (p->exit_code & 0xff) << 8;
}

int pty_adopt(struct pty *p, int pipes, pid_t pid, int fd, int hold_fd, int err_fd, int in_fd,
	      int wait_status, const struct pty_hooks *hooks, void *owner)
{
	p->pipes = pipes;
	p->fd = fd;
	p->hold_fd = hold_fd;
	p->err_fd = err_fd;
	p->in_fd = in_fd;
	p->err_wsi = NULL;
	p->in_eof = 0;
	p->slave[0] = 0;
	if (!p->pipes) {
		const char *n = ptsname(fd);
		snprintf(p->slave, sizeof p->slave, "%s", n ? n : "");
	}
	int kept[4] = {fd, hold_fd, err_fd, in_fd};
	for (int i = 0; i < 4; i++)
		if (kept[i] >= 0)
			fcntl(kept[i], F_SETFD, FD_CLOEXEC);
	p->pid = pid;
	p->alive = 1;
	p->reaped = 0;
	p->closed = fd < 0 && err_fd < 0;   /* its output ended before the upgrade */
	p->exit_code = -1;
	p->exit_signal = 0;
	p->hooks = hooks;
	p->owner = owner;
	p->wsi = fd >= 0 ? server_adopt_fd(fd, pty_event, p) : NULL;
	if (err_fd >= 0)
		p->err_wsi = server_adopt_fd(err_fd, pty_event, p);
	if (wait_status < 0) {
		child_watch(pid, pty_reaped, p);
	} else {
		/* reaped by the old termd, its output not yet drained: the
		 * grace time again (at once when its output ended), from the
		 * loop, once the owners follow the session again */
		reaped_with(p, wait_status);
		server_timer(&p->end_sul, end_timer, p->closed ? 1 : END_GRACE_US);
	}
	return (fd < 0 || p->wsi) && (err_fd < 0 || p->err_wsi) ? 0 : -1;
}

static void input_timer(lws_sorted_usec_list_t *sul);
static void input_rearm(lws_sorted_usec_list_t *sul);

static void close_input(struct pty *p)
{
	lws_sul_cancel(&p->in_sul);
	if (p->in_fd >= 0)
		close(p->in_fd);
	p->in_fd = -1;
	p->in_eof = 0;
}

#define INQ_COMPACT (1u << 20)   /* written bytes kept at the front before a move */
#define INQ_TURN (1u << 20)      /* bytes written per turn of the loop, at most */

/* the queue is empty (inq.len 0) whenever everything was written; the
 * owner may have reset inq itself */
static void inq_fix(struct pty *p)
{
	if (p->inq_off >= p->inq.len) {
		/* a big queue's memory goes back once it is written */
		if (p->inq.cap > 4 * INQ_COMPACT)
			buf_free(&p->inq);
		buf_reset(&p->inq);
		p->inq_off = 0;
	}
}

size_t pty_queued(const struct pty *p)
{
	return p->inq.len > p->inq_off ? p->inq.len - p->inq_off : 0;
}

/* Write what the process takes now, INQ_TURN bytes a turn at most. What
 * it took is skipped (inq_off), not moved (a memmove of the rest after
 * every 64 KiB pipe write stalled the loop 8.6 s for 128 MiB); pty_write
 * moves the rest down before it adds more, once the written part is at
 * least INQ_COMPACT and as big as the rest: a move of r bytes comes after
 * r bytes were written, so moving costs at most what was written. */
static void flush_input(struct pty *p)
{
	int fd = p->pipes ? p->in_fd : p->fd;
	size_t budget = INQ_TURN;
	inq_fix(p);
	while (p->inq.len && fd >= 0 && budget) {
		size_t n = p->inq.len - p->inq_off;
		ssize_t w = write(fd, p->inq.p + p->inq_off, n < budget ? n : budget);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN) {
				p->inq_off = p->inq.len;   /* gone (EPIPE: it closed stdin): input is lost */
				inq_fix(p);
			}
			break;
		}
		p->inq_off += (size_t)w;
		budget -= (size_t)w;
		inq_fix(p);
	}
	if (!p->pipes) {
		/* asked from a timer: lws takes POLLOUT off a raw file's wsi
		 * after its WRITEABLE callback (where this runs), so a wish
		 * made here would be lost and the rest of the input with it */
		if (p->inq.len && p->wsi)
			server_timer(&p->in_sul, input_rearm, 1);
	} else if (p->inq.len && p->in_fd >= 0) {
		/* the stdin pipe is not in the loop: try again a turn later
		 * when it took this turn's share, soon when it took some (its
		 * reader is reading), else shortly */
		server_timer(&p->in_sul, input_timer, !budget ? 1 : budget < INQ_TURN ?
			     INPUT_RETRY_US / 10 : INPUT_RETRY_US);
	} else if (p->in_eof) {
		close_input(p);
	}
}

static void input_timer(lws_sorted_usec_list_t *sul)
{
	flush_input(lws_container_of(sul, struct pty, in_sul));
}

static void input_rearm(lws_sorted_usec_list_t *sul)
{
	struct pty *p = lws_container_of(sul, struct pty, in_sul);
	if (p->wsi)
		lws_callback_on_writable(p->wsi);
}

void pty_write(struct pty *p, const void *data, size_t n)
{
	if (!p->alive || !n || (p->pipes ? p->in_fd < 0 || p->in_eof : p->fd < 0))
		return;
	inq_fix(p);
	if (p->inq_off >= INQ_COMPACT && p->inq_off >= p->inq.len - p->inq_off) {
		buf_consume(&p->inq, p->inq_off);
		p->inq_off = 0;
	}
	buf_append(&p->inq, data, n);
	flush_input(p);
}

int pty_input_open(const struct pty *p)
{
	return p->pipes && p->alive && p->in_fd >= 0 && !p->in_eof;
}

int pty_close_input(struct pty *p)
{
	if (!pty_input_open(p))
		return -1;
	p->in_eof = 1;
	flush_input(p);
	return 0;
}

void pty_resize(struct pty *p, int cols, int rows)
{
	if (p->fd < 0 || p->pipes)
		return;
	struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
	ioctl(p->fd, TIOCSWINSZ, &ws);
}

pid_t pty_fg_pid(struct pty *p)
{
	if (p->fd >= 0 && p->alive && !p->pipes) {
		pid_t pg = tcgetpgrp(p->fd);
		if (pg > 0)
			return pg;
	}
	return p->pid;
}

int pty_unread(struct pty *p)
{
	int n = 0, e = 0;
	return (p->fd >= 0 && ioctl(p->fd, FIONREAD, &n) == 0 && n > 0) ||
	       (p->err_fd >= 0 && ioctl(p->err_fd, FIONREAD, &e) == 0 && e > 0);
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
	struct lws **ws[2] = {&p->wsi, &p->err_wsi};
	for (int i = 0; i < 2; i++) {
		if (*ws[i]) {
			struct lws *w = *ws[i];
			*ws[i] = NULL;
			lws_set_opaque_user_data(w, NULL);
			lws_set_timeout(w, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
		}
	}
	p->fd = p->err_fd = -1;
	if (p->hold_fd >= 0)
		close(p->hold_fd);
	p->hold_fd = -1;
	close_input(p);
}

void pty_hold(struct pty *p, int hold, int once)
{
	if ((!p->wsi && !p->err_wsi) || (p->held == hold && !once))
		return;
	p->held = hold;
	p->read_once = once;
	if (p->wsi)
		lws_rx_flow_control(p->wsi, !hold);
	if (p->err_wsi)
		lws_rx_flow_control(p->err_wsi, !hold);
}

/* Drain what the pty (a pipe) has, up to a budget: fewer trips through
 * poll for a fast producer. A read after the first only when the kernel
 * says there is more: a read of an empty pty waits for the kernel's
 * worker to move what the writer wrote (n_tty's flush_work), which can
 * take milliseconds on a busy machine. 1 at EOF / EIO (every writer has
 * closed it). */
static int on_readable(struct pty *p, int fd, int stream)
{
	static char buf[PTY_READ_MAX];
	size_t budget = PTY_READ_BUDGET;
	int full = 0, first = 1;
	if (p->held)
		return 0;
	for (;;) {
		int avail = 0;
		if (!budget) {
			full = 1;
			break;
		}
		if (!first && (ioctl(fd, FIONREAD, &avail) < 0 || avail <= 0))
			break;
		first = 0;
		ssize_t n = read(fd, buf, sizeof buf);
		if (n > 0) {
			p->hooks->output(p->owner, stream, buf, (size_t)n);
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
		return 1;
	}
	p->read_once = 0;
	if (p->hooks->read_done)
		p->hooks->read_done(p->owner, full);
	return 0;
}

/* one of its output fds is gone: the process's output has ended when
 * every one is (the pty's master; a pipe process's stdout and stderr) */
static void output_closed(struct pty *p, struct lws *wsi)
{
	if (wsi == p->err_wsi) {
		p->err_wsi = NULL;
		p->err_fd = -1;
	} else {
		p->wsi = NULL;
		p->fd = -1;
	}
	if (p->fd >= 0 || p->err_fd >= 0)
		return;
	p->closed = 1;
	if (p->reaped)
		pty_end(p);
}

/* the output fds' events; p is NULL once the owner let go of it */
static int pty_event(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
{
	struct pty *p = arg;
	switch (reason) {
	case LWS_CALLBACK_RAW_RX_FILE:
		if (!p)
			return -1;
		int err = wsi == p->err_wsi;
		if (on_readable(p, err ? p->err_fd : p->fd, err ? 2 : 1)) {
			lws_set_opaque_user_data(wsi, NULL);
			output_closed(p, wsi);
			return -1;   /* lws closes the fd */
		}
		break;
	case LWS_CALLBACK_RAW_WRITEABLE_FILE:
		if (p)
			flush_input(p);
		break;
	case LWS_CALLBACK_RAW_CLOSE_FILE:
		if (p && (p->wsi == wsi || p->err_wsi == wsi)) {
			/* The loop closes an fd that hangs up (its writers
			 * are gone: the process exited) when it was not asked
			 * for POLLIN, which is so while the session is held
			 * (pty_hold): the bytes the process wrote last, up to
			 * a pipe's 64 KiB, are still in it. They are read
			 * here, before the fd is closed, so all of a
			 * session's output comes before its end (issue 46). */
			drain_fd(p, wsi == p->err_wsi ? p->err_fd : p->fd,
				 wsi == p->err_wsi ? 2 : 1);
			output_closed(p, wsi);
		}
		break;
	default:
		break;
	}
	return 0;
}
