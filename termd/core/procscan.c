/* procscan.c — the walk of /proc that the process finders share
 * (proctree.c: a session's processes without cgroups; inputwait.c: the
 * foreground group's readers; portscan.c: the sockets of a session's
 * tree): every process in /proc with its /proc/PID/stat fields (state,
 * parent, process group, session id, controlling terminal), or all of
 * them at once sorted by pid, and a process's descriptors with what their
 * links name. */
#include "core.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int procscan_stat(pid_t pid, struct proc_info *pi)
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
	/* the name, in parentheses, may hold anything: the fields follow its last ')' */
	char *rp = strrchr(buf, ')');
	int ppid, pg, se;
	if (!rp || sscanf(rp + 1, " %c %d %d %d %lu", &pi->state, &ppid, &pg, &se,
			  &pi->tty_nr) != 5)
		return -1;
	pi->pid = pid;
	pi->ppid = ppid;
	pi->pgrp = pg;
	pi->sid = se;
	return 0;
}

int procscan_each(procscan_fn *fn, void *arg)
{
	DIR *d = opendir("/proc");
	if (!d)
		return -1;
	int r = 0;
	struct dirent *e;
	while (!r && (e = readdir(d))) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		struct proc_info pi;
		if (end == e->d_name || *end || pid <= 0 || procscan_stat((pid_t)pid, &pi) < 0)
			continue;   /* not a process, or gone since */
		r = fn(&pi, arg);
	}
	closedir(d);
	return r;
}

static int by_pid(const void *a, const void *b)
{
	pid_t x = ((const struct proc_info *)a)->pid, y = ((const struct proc_info *)b)->pid;
	return (x > y) - (x < y);
}

struct all {
	struct proc_info *v;
	size_t n, cap;
};

static int add_one(const struct proc_info *pi, void *arg)
{
	struct all *a = arg;
	if (a->n == a->cap) {
		a->cap = a->cap ? 2 * a->cap : 256;
		a->v = xrealloc(a->v, a->cap * sizeof *a->v);
	}
	a->v[a->n++] = *pi;
	return 0;
}

int procscan_all(struct proc_info **out)
{
	struct all a = {0};
	*out = NULL;
	if (procscan_each(add_one, &a) < 0)
		return -1;
	if (a.n)
		qsort(a.v, a.n, sizeof *a.v, by_pid);
	*out = a.v;
	return (int)a.n;
}

const struct proc_info *procscan_find(const struct proc_info *v, int n, pid_t pid)
{
	struct proc_info key = {.pid = pid};
	return n > 0 ? bsearch(&key, v, (size_t)n, sizeof *v, by_pid) : NULL;
}

ssize_t procscan_fd_link(pid_t pid, long fd, char *target, size_t size)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/fd/%ld", (int)pid, fd);
	ssize_t n = readlink(p, target, size - 1);
	if (n <= 0)
		return -1;
	target[n] = 0;
	return n;
}

int procscan_fds(pid_t pid, procscan_fd_fn *fn, void *arg)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/fd", (int)pid);
	DIR *d = opendir(p);
	if (!d)
		return 0;
	int r = 0;
	struct dirent *e;
	while (!r && (e = readdir(d))) {
		char *end, target[256];
		long fd = strtol(e->d_name, &end, 10);
		if (end == e->d_name || *end || fd < 0 ||
		    procscan_fd_link(pid, fd, target, sizeof target) < 0)
			continue;
		r = fn(pid, fd, target, arg);
	}
	closedir(d);
	return r;
}
