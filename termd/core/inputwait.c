/* inputwait.c — is a session's foreground program waiting for the
 * keyboard? Looks at each process of the pty's foreground process group in
 * /proc: the system call it sleeps in (/proc/PID/task/TID/syscall) and
 * whether that call waits on the session's terminal: read on the tty fd,
 * poll/select with the tty among the fds (read from /proc/PID/mem), or
 * epoll with the tty registered (/proc/PID/fdinfo). A server sleeping in
 * poll on a socket, or `sleep`, is not waiting for input. A program that
 * reads the tty, or polls it alone, waits for it (IW_READ); one that polls
 * it among other descriptors may be a relay (apt passing the terminal to
 * dpkg, ssh, script) waiting for whichever comes first (IW_RELAY): run.c
 * asks the screen before it calls that waiting for input. */
#include "core.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* 1 if /proc/pid/fd/fd is the session's tty */
static int fd_is_tty(pid_t pid, long fd, const char *slave)
{
	char p[64], target[128];
	snprintf(p, sizeof p, "/proc/%d/fd/%ld", (int)pid, fd);
	ssize_t n = readlink(p, target, sizeof target - 1);
	if (n <= 0)
		return 0;
	target[n] = 0;
	return strcmp(target, slave) == 0;
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

static enum inputwait poll_has_tty(pid_t pid, unsigned long addr, unsigned long nfds,
				   const char *slave)
{
	if (nfds == 0 || nfds > 4096)
		return IW_NO;
	struct pollfd *pf = xcalloc(nfds, sizeof *pf);
	int tty = 0;
	unsigned long others = 0;
	if (read_mem(pid, addr, pf, nfds * sizeof *pf) == 0) {
		for (unsigned long i = 0; i < nfds; i++) {
			if (pf[i].fd < 0 || !(pf[i].events & POLLIN))
				continue;
			if (!tty && fd_is_tty(pid, pf[i].fd, slave))
				tty = 1;
			else
				others++;
		}
	}
	free(pf);
	return level(tty, others);
}

static enum inputwait select_has_tty(pid_t pid, unsigned long nfds, unsigned long readfds,
				     const char *slave)
{
	if (!readfds || nfds == 0 || nfds > 65536)
		return IW_NO;
	size_t bytes = ((nfds + 63) / 64) * 8;
	unsigned char *bits = xcalloc(1, bytes);
	int tty = 0;
	unsigned long others = 0;
	if (read_mem(pid, readfds, bits, bytes) == 0) {
		for (unsigned long fd = 0; fd < nfds; fd++) {
			if (!((bits[fd / 8] >> (fd % 8)) & 1))
				continue;
			if (!tty && fd_is_tty(pid, (long)fd, slave))
				tty = 1;
			else
				others++;
		}
	}
	free(bits);
	return level(tty, others);
}

static enum inputwait epoll_has_tty(pid_t pid, long epfd, const char *slave)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/fdinfo/%ld", (int)pid, epfd);
	FILE *f = fopen(p, "re");
	if (!f)
		return IW_NO;
	char line[256];
	int tty = 0;
	unsigned long others = 0;
	while (fgets(line, sizeof line, f)) {
		long tfd;
		if (sscanf(line, "tfd: %ld", &tfd) != 1)
			continue;
		if (!tty && fd_is_tty(pid, tfd, slave))
			tty = 1;
		else
			others++;
	}
	fclose(f);
	return level(tty, others);
}

/* One thread: is it in a system call that waits on the tty? */
static enum inputwait task_waits_on_tty(pid_t pid, const char *task_dir, const char *slave)
{
	char p[640];
	snprintf(p, sizeof p, "%s/syscall", task_dir);
	FILE *f = fopen(p, "re");
	if (!f)
		return IW_NO;
	char line[512];
	enum inputwait yes = IW_NO;
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
				yes = fd_is_tty(pid, (long)a[0], slave) ? IW_READ : IW_NO;
				break;
#ifdef SYS_poll
			case SYS_poll:
#endif
			case SYS_ppoll:
				yes = poll_has_tty(pid, a[0], a[1], slave);
				break;
#ifdef SYS_select
			case SYS_select:
#endif
			case SYS_pselect6:
				yes = select_has_tty(pid, a[0], a[1], slave);
				break;
#ifdef SYS_epoll_wait
			case SYS_epoll_wait:
#endif
			case SYS_epoll_pwait:
#ifdef SYS_epoll_pwait2
			case SYS_epoll_pwait2:
#endif
				yes = epoll_has_tty(pid, (long)a[0], slave);
				break;
			default:
				break;
			}
		}
	}
	fclose(f);
	return yes;
}

/* Reads state, process group and session id of a process from
 * /proc/PID/stat. 0 or -1. */
int proc_stat(pid_t pid, char *state, pid_t *pgrp, pid_t *sid)
{
	char p[64], buf[1024];
	snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	char *rp = strrchr(buf, ')');
	if (!rp)
		return -1;
	int ppid, pg, se;
	if (sscanf(rp + 2, "%c %d %d %d", state, &ppid, &pg, &se) != 4)
		return -1;
	*pgrp = pg;
	*sid = se;
	return 0;
}

enum inputwait inputwait_blocked_on_tty(struct session *s)
{
	if (!s->pty.alive || s->pty.fd < 0)
		return IW_NO;
	pid_t fg = tcgetpgrp(s->pty.fd);
	if (fg <= 0)
		return IW_NO;
	DIR *d = opendir("/proc");
	if (!d)
		return IW_NO;
	enum inputwait waiting = IW_NO;
	int busy = 0;
	struct dirent *e;
	while ((e = readdir(d)) && !busy) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 0)
			continue;
		char st;
		pid_t pg, sid;
		if (proc_stat((pid_t)pid, &st, &pg, &sid) < 0 || pg != fg)
			continue;
		if (st == 'R') {
			busy = 1;   /* computing, not waiting */
			break;
		}
		char tdir[64];
		snprintf(tdir, sizeof tdir, "/proc/%ld/task", pid);
		DIR *td = opendir(tdir);
		if (!td)
			continue;
		struct dirent *te;
		while (waiting != IW_READ && (te = readdir(td))) {
			if (te->d_name[0] == '.')
				continue;
			char tpath[384];
			snprintf(tpath, sizeof tpath, "%s/%s", tdir, te->d_name);
			enum inputwait w = task_waits_on_tty((pid_t)pid, tpath, s->pty.slave);
			if (w > waiting)
				waiting = w;
		}
		closedir(td);
	}
	closedir(d);
	return busy ? IW_NO : waiting;
}
