/* inputwait.c — is a session's foreground program waiting for the
 * keyboard, and for what? Looks at each process of the pty's foreground
 * process group in /proc: the system call it sleeps in
 * (/proc/PID/task/TID/syscall) and whether that call waits on the
 * session's terminal: read on a tty fd, poll/select with the tty among
 * the fds (read from /proc/PID/mem), or epoll with the tty registered
 * (/proc/PID/fdinfo). "The tty" is the device, not a path: stdin, a dup,
 * /dev/pts/N opened again, or /dev/tty (the process's controlling
 * terminal) all count, and so does any process of the group (a child or
 * grandchild of the command reading while its parent waits). A server
 * sleeping in poll on a socket, `sleep`, or a process computing (state R)
 * is not waiting for input. A program that reads the tty, or polls it
 * alone, waits for it (IW_READ); one that polls it among other
 * descriptors may be a relay (apt passing the terminal to dpkg, ssh,
 * script) waiting for whichever comes first (IW_RELAY); one termd may not
 * inspect (a set-uid sudo when termd is not root), asleep while the
 * terminal is in password mode, may be asking for one (IW_HIDDEN): run.c
 * asks the screen before it calls either waiting for input.
 *
 * What it waits for (inputwait_describe): a pager or an editor by the
 * reader's name (or an editor git, crontab, visudo... opened on a file),
 * else the terminal's mode as the program set it, read from termd's
 * master (tcgetattr on a pty master gives the slave's termios): a line
 * (canonical, echo on), a password (canonical, echo off) or a key (raw or
 * cbreak). */
#include "core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <termios.h>
#include <unistd.h>

/* /proc/PID/stat's tty_nr as a dev_t (minor bits 0-7 and 20-31, major 8-19) */
static dev_t tty_nr_dev(unsigned long nr)
{
	return makedev((nr >> 8) & 0xfff, (nr & 0xff) | ((nr >> 12) & 0xfff00));
}

/* 1 if the process's descriptor fd is the terminal tty: the same device,
 * or /dev/tty while the terminal is its controlling one */
static int fd_is_tty(pid_t pid, long fd, dev_t tty)
{
	char p[64], target[128];
	if (fd < 0)
		return 0;
	/* the name first: anything but a device (a socket, a pipe, a file on
	 * a slow network file system) is not stat'ed; a device's path may be
	 * longer (a chroot's /srv/root/dev/pts/3) or shown in another mount
	 * namespace */
	if (procscan_fd_link(pid, fd, target, sizeof target) < 0)
		return 0;
	if (target[0] != '/' || (!strstr(target, "/dev/") && !strstr(target, "/pts/")))
		return 0;
	struct stat st;
	snprintf(p, sizeof p, "/proc/%d/fd/%ld", (int)pid, fd);
	if (stat(p, &st) < 0 || !S_ISCHR(st.st_mode))
		return 0;
	if (st.st_rdev == tty)
		return 1;
	if (major(st.st_rdev) == 5 && minor(st.st_rdev) == 0) {   /* /dev/tty */
		struct proc_info ps;
		return procscan_stat(pid, &ps) == 0 && ps.tty_nr && tty_nr_dev(ps.tty_nr) == tty;
	}
	return 0;
}

static int read_mem(pid_t pid, unsigned long addr, void *out, size_t n)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/mem", (int)pid);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t r = pread(fd, out, n, (off_t)addr);
	close(fd);
	return r == (ssize_t)n ? 0 : -1;
}

/* The wait covers the tty: IW_READ if it is the only descriptor waited
 * on for input, IW_RELAY if there are others. */
static enum inputwait level(int tty, unsigned long others)
{
	return !tty ? IW_NO : others ? IW_RELAY : IW_READ;
}

static enum inputwait poll_has_tty(pid_t pid, unsigned long addr, unsigned long nfds, dev_t tty)
{
	if (nfds == 0 || nfds > 4096)
		return IW_NO;
	struct pollfd *pf = xcalloc(nfds, sizeof *pf);
	int has = 0;
	unsigned long others = 0;
	if (read_mem(pid, addr, pf, nfds * sizeof *pf) == 0) {
		for (unsigned long i = 0; i < nfds; i++) {
			if (pf[i].fd < 0 || !(pf[i].events & POLLIN))
				continue;
			if (!has && fd_is_tty(pid, pf[i].fd, tty))
				has = 1;
			else
				others++;
		}
	}
	free(pf);
	return level(has, others);
}

static enum inputwait select_has_tty(pid_t pid, unsigned long nfds, unsigned long readfds,
				     dev_t tty)
{
	if (!readfds || nfds == 0 || nfds > 65536)
		return IW_NO;
	size_t bytes = ((nfds + 63) / 64) * 8;
	unsigned char *bits = xcalloc(1, bytes);
	int has = 0;
	unsigned long others = 0;
	if (read_mem(pid, readfds, bits, bytes) == 0) {
		for (unsigned long fd = 0; fd < nfds; fd++) {
			if (!((bits[fd / 8] >> (fd % 8)) & 1))
				continue;
			if (!has && fd_is_tty(pid, (long)fd, tty))
				has = 1;
			else
				others++;
		}
	}
	free(bits);
	return level(has, others);
}

static enum inputwait epoll_has_tty(pid_t pid, long epfd, dev_t tty)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/fdinfo/%ld", (int)pid, epfd);
	FILE *f = fopen(p, "re");
	if (!f)
		return IW_NO;
	char line[256];
	int has = 0;
	unsigned long others = 0;
	while (fgets(line, sizeof line, f)) {
		long tfd;
		if (sscanf(line, "tfd: %ld", &tfd) != 1)
			continue;
		if (!has && fd_is_tty(pid, tfd, tty))
			has = 1;
		else
			others++;
	}
	fclose(f);
	return level(has, others);
}

/* One thread: is it in a system call that waits on the tty? -1 when
 * termd may not look (another user's process, termd not root). */
static int task_waits_on_tty(pid_t pid, const char *task_dir, dev_t tty)
{
	char p[640];
	snprintf(p, sizeof p, "%s/syscall", task_dir);
	FILE *f = fopen(p, "re");
	if (!f)
		return errno == EACCES || errno == EPERM ? -1 : IW_NO;
	char line[512];
	int yes = IW_NO;
	errno = 0;
	if (fgets(line, sizeof line, f)) {
		long nr;
		unsigned long a[6] = {0};
		int n = sscanf(line, "%ld %lx %lx %lx %lx %lx %lx", &nr, &a[0], &a[1], &a[2], &a[3],
			       &a[4], &a[5]);
		if (n >= 2) {
			switch (nr) {
			case SYS_read:
			case SYS_readv:
			case SYS_pread64:
				yes = fd_is_tty(pid, (long)a[0], tty) ? IW_READ : IW_NO;
				break;
#ifdef SYS_poll
			case SYS_poll:
#endif
			case SYS_ppoll:
				yes = poll_has_tty(pid, a[0], a[1], tty);
				break;
#ifdef SYS_select
			case SYS_select:
#endif
			case SYS_pselect6:
				yes = select_has_tty(pid, a[0], a[1], tty);
				break;
#ifdef SYS_epoll_wait
			case SYS_epoll_wait:
#endif
			case SYS_epoll_pwait:
#ifdef SYS_epoll_pwait2
			case SYS_epoll_pwait2:
#endif
				yes = epoll_has_tty(pid, (long)a[0], tty);
				break;
			default:
				break;
			}
		}
	} else if (errno == EACCES || errno == EPERM) {
		yes = -1;
	}
	fclose(f);
	return yes;
}

/* the walk of the foreground group: its processes' threads */
struct fgwalk {
	pid_t fg;
	dev_t tty;
	enum inputwait waiting;
	pid_t who, hidden;
	int busy;
};

static int fg_process(const struct proc_info *ps, void *arg)
{
	struct fgwalk *w = arg;
	pid_t pid = ps->pid;
	if (ps->pgrp != w->fg)
		return 0;
	if (ps->state == 'R') {
		w->busy = 1;   /* computing, not waiting */
		return 1;
	}
	char tdir[64];
	snprintf(tdir, sizeof tdir, "/proc/%ld/task", (long)pid);
	DIR *td = opendir(tdir);
	if (!td)
		return 0;
	struct dirent *te;
	while (w->waiting != IW_READ && (te = readdir(td))) {
		if (te->d_name[0] == '.')
			continue;
		char tpath[384];
		snprintf(tpath, sizeof tpath, "%s/%s", tdir, te->d_name);
		int r = task_waits_on_tty(pid, tpath, w->tty);
		if (r < 0) {
			if (ps->state == 'S' && !w->hidden)
				w->hidden = pid;
			break;
		}
		if (r > (int)w->waiting) {
			w->waiting = (enum inputwait)r;
			w->who = pid;
		}
	}
	closedir(td);
	return 0;
}

enum inputwait inputwait_blocked_on_tty(struct session *s, pid_t *reader)
{
	*reader = 0;
	if (!s->pty.alive || s->pty.fd < 0 || s->pty.pipes)
		return IW_NO;
	struct stat tst;
	if (stat(s->pty.slave, &tst) < 0)
		return IW_NO;
	struct fgwalk w = {.tty = tst.st_rdev, .waiting = IW_NO};
	w.fg = tcgetpgrp(s->pty.fd);
	if (w.fg <= 0)
		return IW_NO;
	if (procscan_each(fg_process, &w) < 0 || w.busy)
		return IW_NO;
	if (w.waiting == IW_NO && w.hidden) {
		/* a process termd may not look into, asleep, the terminal in
		 * password mode (canonical, no echo): sudo asking */
		struct termios t;
		if (tcgetattr(s->pty.fd, &t) == 0 && (t.c_lflag & ICANON) && !(t.c_lflag & ECHO)) {
			w.waiting = IW_HIDDEN;
			w.who = w.hidden;
		}
	}
	*reader = w.waiting == IW_NO ? 0 : w.who;
	return w.waiting;
}

/* ------------------------------------------------------ what it waits for */

static const char *const pagers[] = {
	"less", "more", "most", "pg", "pager", "sensible-pager", "lv", "moar", "moor", NULL,
};
static const char *const editors[] = {
	"vi", "vim", "vim.basic", "vim.tiny", "vim.nox", "vim.gtk", "vim.gtk3", "vim.athena",
	"view", "vimdiff", "rvim", "rview", "ex", "nvim", "gvim", "nano", "rnano", "pico",
	"emacs", "emacs-nox", "emacsclient", "jed", "joe", "jmacs", "jpico", "jstar", "mg",
	"micro", "ne", "mcedit", "kak", "hx", "helix", "editor", "sensible-editor", "vis",
	"zile", "elvis", "nvi", "vile", "ed", "red", "busybox-vi", NULL,
};
/* programs that open an editor on a file for the person to write (not
 * sudo: `sudo python3 ask.py` is no editor) */
static const char *const openers[] = {
	"git", "crontab", "visudo", "vipw", "vigr", "sudoedit", "edquota", "hg", "svn",
	"bzr", "fossil", "systemctl", "kubectl", "virsh", NULL,
};

static const char *const shells[] = {
	"bash", "sh", "dash", "zsh", "ksh", "ksh93", "mksh", "ash", "fish", "tcsh", "csh",
	"yash", "busybox", NULL,
};

static int in_list(const char *name, const char *const *list)
{
	if (!name[0])
		return 0;
	for (; *list; list++)
		if (strcmp(name, *list) == 0)
			return 1;
	return 0;
}

static const char *base_name(const char *p)
{
	const char *b = strrchr(p, '/');
	return b ? b + 1 : p;
}

/* /proc/PID/cmdline: the arguments, NUL-separated; length or 0 */
static size_t read_cmdline(pid_t pid, char *buf, size_t size)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/cmdline", (int)pid);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, size - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	return (size_t)n;
}

static void read_comm(pid_t pid, char *out, size_t size)
{
	char p[64];
	out[0] = 0;
	snprintf(p, sizeof p, "/proc/%d/comm", (int)pid);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, out, size - 1);
	close(fd);
	if (n < 0)
		n = 0;
	out[n] = 0;
	out[strcspn(out, "\n")] = 0;
}

/* The process's names: comm, argv[0]'s and its executable's base names
 * (vi started as /usr/bin/vi is vim.basic); 1 if one is in list. */
static int named(pid_t pid, const char *argv0, const char *const *list)
{
	char comm[64], p[64], exe[512];
	read_comm(pid, comm, sizeof comm);
	if (in_list(comm, list) || in_list(base_name(argv0), list))
		return 1;
	snprintf(p, sizeof p, "/proc/%d/exe", (int)pid);
	ssize_t n = readlink(p, exe, sizeof exe - 1);
	if (n <= 0)
		return 0;
	exe[n] = 0;
	return in_list(base_name(exe), list);
}

/* The last argument names a regular file (the reader's cwd for a
 * relative one): what an opened editor is given. */
static int last_arg_is_file(pid_t pid, const char *args, size_t n)
{
	const char *last = NULL;
	for (size_t i = 0; i < n; i += strlen(args + i) + 1)
		if (i > 0 && args[i])
			last = args + i;
	if (!last || last[0] == '-')
		return 0;
	char p[4200];
	if (last[0] == '/')
		snprintf(p, sizeof p, "%s", last);
	else
		snprintf(p, sizeof p, "/proc/%d/cwd/%s", (int)pid, last);
	struct stat st;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* An ancestor below the session's shell (up to a few levels) is a
 * program that opens editors. */
static int opened_by_opener(struct session *s, pid_t pid)
{
	struct proc_info ps;
	for (int i = 0; i < 6 && procscan_stat(pid, &ps) == 0; i++) {
		pid = ps.ppid;
		if (pid <= 1 || pid == s->pty.pid)
			return 0;
		char comm[64];
		read_comm(pid, comm, sizeof comm);
		if (in_list(comm, openers))
			return 1;
	}
	return 0;
}

const char *inputwait_kind_name(enum iw_kind k)
{
	switch (k) {
	case IWK_PASSWORD: return "password";
	case IWK_KEY: return "key";
	case IWK_PAGER: return "pager";
	case IWK_EDITOR: return "editor";
	case IWK_LINE: break;
	}
	return "line";
}

/* An interactive shell other than the session's own (su's, a nested
 * bash): a shell by name whose arguments are options only (no script, no
 * -c). args: reader's n bytes of /proc/PID/cmdline. */
static int nested_shell(struct session *s, pid_t reader, const char *args, size_t n)
{
	if (reader <= 0 || reader == s->pty.pid)
		return 0;
	char comm[64];
	read_comm(reader, comm, sizeof comm);
	const char *a0 = base_name(args);
	if (!in_list(comm, shells) && !in_list(a0[0] == '-' ? a0 + 1 : a0, shells))
		return 0;
	for (size_t i = strlen(args) + 1; i < n; i += strlen(args + i) + 1) {
		const char *a = args + i;
		if (a[0] != '-' || !strcmp(a, "-c") || (a[1] != '-' && strchr(a, 'c')))
			return 0;   /* a script, or a command string */
	}
	return 1;
}

void inputwait_describe(struct session *s, pid_t reader, struct inputwait_what *w)
{
	memset(w, 0, sizeof *w);
	w->kind = IWK_LINE;
	w->pid = reader;
	char args[4096];
	size_t n = reader > 0 ? read_cmdline(reader, args, sizeof args) : 0;
	if (!n)
		args[0] = 0;
	/* the command: its arguments joined by spaces */
	size_t len = n;
	while (len && args[len - 1] == 0)
		len--;
	if (len >= sizeof w->command)
		len = sizeof w->command - 1;
	for (size_t i = 0; i < len; i++)
		w->command[i] = args[i] ? args[i] : ' ';
	w->command[len] = 0;

	struct termios t;
	int have_mode = s->pty.fd >= 0 && tcgetattr(s->pty.fd, &t) == 0;
	int password = have_mode && (t.c_lflag & ICANON) && !(t.c_lflag & ECHO);
	if (reader > 0 && named(reader, args, pagers))
		w->kind = IWK_PAGER;
	else if (reader > 0 && named(reader, args, editors))
		w->kind = IWK_EDITOR;
	else if (reader > 0 && !password && opened_by_opener(s, reader) &&
		 last_arg_is_file(reader, args, n))
		w->kind = IWK_EDITOR;
	else if (reader == s->pty.pid && s->cont)
		w->kind = IWK_LINE;   /* the shell reads the rest of a command (PS2) */
	else if (!password && nested_shell(s, reader, args, n))
		w->shell = 1;         /* a command line (its readline keeps the tty raw) */
	else if (have_mode && !(t.c_lflag & ICANON))
		w->kind = IWK_KEY;
	else if (password)
		w->kind = IWK_PASSWORD;
}
