/* cgroup-session.c — a session's cgroup (the hierarchies are cgroup.c's):
 * <its cgroup>/termd-<pid>/s-<name>-<n> (in each v1 hierarchy), its
 * limits written before its process joins it (from the child, between
 * fork and exec, so nothing it starts is ever outside; or a spare one,
 * its process already in it, renamed the session's and its limits
 * written before that process execs). Signalling every
 * process in it: v2's cgroup.kill for KILL when nothing is spared; else
 * the cgroup is frozen (v2 cgroup.freeze, v1 freezer.state) while its
 * cgroup.procs is read and signalled, then thawed, again until only what
 * is spared is left for KILL. Usage and limit hits from
 * memory.current/peak/events, pids.current/events, cpu.stat (v1:
 * memory.usage_in_bytes, max_usage_in_bytes, oom_control's oom_kill,
 * cpuacct.usage). A timer reads the hit counters once a second while
 * session cgroups exist and sends session.limit. When a session is freed
 * (or at exit) what is left is killed and the folders removed; a folder
 * the kernel still holds is tried again on the timer and at exit. */
#include "cgroup-int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define POLL_US        1000000u   /* limit counters read this often */
#define SAY_AGAIN_US   10000000u  /* pids and cpu hits: one event per 10 s at most */
#define FREEZE_WAIT_US 200000u    /* a freeze that has not settled by then goes on anyway */
#define KILL_WAIT_US   1000000u   /* KILL passes until the cgroup is empty, at most */
#define DEAD_KEEP_US   60000000u  /* a busy folder is tried again this long */

/* ------------------------------------------------------------- files */

/* dir/file, a small file, in one read into v (NUL-terminated): its
 * length, or -1 */
static ssize_t rd_small(const char *dir, const char *file, char *v, size_t size)
{
	if (!dir)
		return -1;
	char p[PATH_MAX];
	if (snprintf(p, sizeof p, "%s/%s", dir, file) >= (int)sizeof p)
		return -1;
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, v, size - 1);
	close(fd);
	if (n <= 0)
		return -1;
	v[n] = 0;
	return n;
}

/* a file holding one number ("max" is LLONG_MAX), or -1 */
static long long rd_ll(const char *dir, const char *file)
{
	char v[64];
	if (rd_small(dir, file, v, sizeof v) < 0)
		return -1;
	if (strncmp(v, "max", 3) == 0)
		return LLONG_MAX;
	char *end;
	long long r = strtoll(v, &end, 10);
	return end == v ? -1 : r;
}

/* N of the line "key N" in text, or -1 */
static long long key_in(char *text, const char *key)
{
	size_t kl = strlen(key);
	for (char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (strncmp(l, key, kl) == 0 && l[kl] == ' ')
			return strtoll(l + kl + 1, NULL, 10);
	return -1;
}

/* "key N" lines (memory.events, cpu.stat, memory.oom_control): N, or -1 */
static long long rd_key(const char *dir, const char *file, const char *key)
{
	char v[2048];
	return rd_small(dir, file, v, sizeof v) < 0 ? -1 : key_in(v, key);
}

static int has_file(const char *dir, const char *file)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/%s", dir, file);
	return access(p, F_OK) == 0;
}

/* ------------------------------------------------------------ sessions */

static void poll_timer(lws_sorted_usec_list_t *sul);
static void open_counters(struct cgroup *c);

static void arm(void)
{
	if (!cgs.timer && !cgs.stopping && (cgs.live || cgs.dead)) {
		cgs.timer = 1;
		server_timer(&cgs.sul, poll_timer, POLL_US);
	}
}

static int set_limits(struct cgroup *c, const struct cg_limits *l, char *err, size_t n)
{
	char v[64];
	int r = 0;
	const char *what = "";
	if (l->memory) {
		const char *d = c->dir[cgs.of[C_MEM]];
		snprintf(v, sizeof v, "%lld", l->memory);
		what = "memory";
		if (cgs.version == 2) {
			r = cg_wrf(d, "memory.max", v);
			if (!r && has_file(d, "memory.swap.max"))
				cg_wrf(d, "memory.swap.max", "0");   /* the limit is memory, swapped or not */
		} else {
			r = cg_wrf(d, "memory.limit_in_bytes", v);
			if (!r && has_file(d, "memory.memsw.limit_in_bytes"))
				cg_wrf(d, "memory.memsw.limit_in_bytes", v);
		}
	}
	if (!r && l->pids) {
		snprintf(v, sizeof v, "%lld", l->pids);
		what = "pids";
		r = cg_wrf(c->dir[cgs.of[C_PIDS]], "pids.max", v);
	}
	if (!r && l->cpu > 0) {
		const char *d = c->dir[cgs.of[C_CPU]];
		long q = lround(l->cpu * 100000.0);
		if (q < 1000)
			q = 1000;
		what = "cpu";
		if (cgs.version == 2) {
			snprintf(v, sizeof v, "%ld 100000", q);
			r = cg_wrf(d, "cpu.max", v);
		} else {
			snprintf(v, sizeof v, "%ld", q);
			r = cg_wrf(d, "cpu.cfs_period_us", "100000");
			if (!r)
				r = cg_wrf(d, "cpu.cfs_quota_us", v);
		}
	}
	if (r < 0)
		snprintf(err, n, "cannot set the session's %s limit: %s", what, strerror(-r));
	return r < 0 ? -1 : 0;
}

static void cg_release(struct cgroup *c)
{
	for (int k = 0; k < 3; k++)
		if (c->cfd[k] >= 0)
			close(c->cfd[k]);
	for (int i = 0; i < cgs.nh; i++) {
		free(c->dir[i]);
		free(c->procs[i]);
	}
	free(c);
}

/* every folder removed: 1, or 0 while the kernel still holds one */
static int cg_rmdir(struct cgroup *c)
{
	int all = 1;
	for (int i = 0; i < cgs.nh; i++) {
		if (!c->dir[i])
			continue;
		if (rmdir(c->dir[i]) == 0 || errno == ENOENT) {
			free(c->dir[i]);
			c->dir[i] = NULL;
		} else {
			all = 0;
		}
	}
	return all;
}

struct cgroup *cgroup_new(const char *name, const struct cg_limits *lim, char *err,
			  size_t errlen)
{
	err[0] = 0;
	if (!cgs.version)
		return NULL;
	struct cgroup *c = xcalloc(1, sizeof *c);
	snprintf(c->name, sizeof c->name, "%s", name);
	c->lim = *lim;
	c->cfd[0] = c->cfd[1] = c->cfd[2] = -1;
	char sub[TD_SESSION_NAME_MAX + 32];
	snprintf(sub, sizeof sub, "s-%s-%lu", name, ++cgs.n);
	for (int i = 0; i < cgs.nh; i++) {
		/* v1's cpu alone is only for a cpu limit (a hierarchy less to join) */
		if (cgs.version == 1 && cgs.h[i].ctrls == 1u << C_CPU && !(lim->cpu > 0))
			continue;
		c->dir[i] = cg_join(cgs.h[i].base, sub);
		c->procs[i] = cg_join(c->dir[i], "cgroup.procs");
		if (mkdir(c->dir[i], 0755) < 0) {
			snprintf(err, errlen, "cannot make the session's cgroup %s: %s", c->dir[i],
				 strerror(errno));
			free(c->dir[i]);
			c->dir[i] = NULL;
			cg_rmdir(c);
			cg_release(c);
			return NULL;
		}
	}
	if (set_limits(c, lim, err, errlen) < 0) {
		cg_rmdir(c);
		cg_release(c);
		return NULL;
	}
	open_counters(c);
	c->next = cgs.live;
	cgs.live = c;
	arm();
	return c;
}

int cgroup_claim(struct cgroup *c, const char *name, const struct cg_limits *lim, char *err,
		 size_t errlen)
{
	err[0] = 0;
	if (cgs.version != 1 || lim->cpu > 0)
		return -1;   /* v2 folders are not renamed; a cpu limit is another hierarchy */
	char sub[TD_SESSION_NAME_MAX + 32];
	snprintf(sub, sizeof sub, "s-%s-%lu", name, ++cgs.n);
	for (int i = 0; i < cgs.nh; i++) {
		if (!c->dir[i])
			continue;
		char *to = cg_join(cgs.h[i].base, sub);
		if (rename(c->dir[i], to) < 0) {
			free(to);
			return -1;   /* the ones renamed are removed with it, under their new names */
		}
		free(c->dir[i]);
		free(c->procs[i]);
		c->dir[i] = to;
		c->procs[i] = cg_join(to, "cgroup.procs");
	}
	snprintf(c->name, sizeof c->name, "%s", name);
	c->lim = *lim;
	return set_limits(c, lim, err, errlen);
}

int cgroup_child_join(const struct cgroup *c)
{
	int res = 0;
	if (cgs.adj) {
		int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
		if (fd >= 0) {
			if (write(fd, "0", 1) < 0) {
				/* nothing to do about it here */
			}
			close(fd);
		}
	}
	if (!c)
		return 0;
	for (int i = 0; i < cgs.nh; i++) {
		int fd = c->procs[i] ? open(c->procs[i], O_WRONLY | O_CLOEXEC) : -1;
		int ok = fd >= 0 && write(fd, "0", 1) == 1;
		if (fd >= 0)
			close(fd);
		if (!ok && c->procs[i]) {
			static const char msg[] = "termd: cannot join the session's cgroup\r\n";
			if (write(2, msg, sizeof msg - 1) < 0) {
				/* nor can this be told */
			}
			res = -1;
		}
	}
	return res;
}

int cgroup_clone_fd(const struct cgroup *c)
{
	if (!c || cgs.version != 2 || !c->dir[0])
		return -1;
	return open(c->dir[0], O_PATH | O_DIRECTORY | O_CLOEXEC);
}

const struct cg_limits *cgroup_limits(const struct cgroup *c)
{
	return &c->lim;
}

const char *cgroup_name(const struct cgroup *c)
{
	return c->name;
}

int cgroup_procs(const struct cgroup *c, pid_t **out)
{
	*out = NULL;
	if (!c || cgs.track < 0 || !c->dir[cgs.track])
		return 0;
	buf_t b = {0};
	if (cg_rdb(c->dir[cgs.track], "cgroup.procs", &b) < 0) {
		buf_free(&b);
		return 0;
	}
	size_t cap = 0, n = 0;
	pid_t *v = NULL;
	for (char *p = b.p; p && *p;) {
		char *end;
		long pid = strtol(p, &end, 10);
		if (end == p)
			break;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			v = xrealloc(v, cap * sizeof *v);
		}
		v[n++] = (pid_t)pid;
		p = end;
		while (*p == '\n' || *p == ' ')
			p++;
	}
	buf_free(&b);
	*out = v;
	return (int)n;
}

/* freeze (on) or thaw: 1 if it has a freezer */
static int freeze(const struct cgroup *c, int on)
{
	int i = cgs.of[C_FREEZER];
	if (i < 0 || !c->dir[i])
		return 0;
	const char *d = c->dir[i];
	if (cgs.version == 2 ? cg_wrf(d, "cgroup.freeze", on ? "1" : "0") < 0
			   : cg_wrf(d, "freezer.state", on ? "FROZEN" : "THAWED") < 0)
		return 0;
	if (!on)
		return 1;
	/* until it has settled (a task in the kernel stops when it leaves) */
	uint64_t until = mono_us() + FREEZE_WAIT_US;
	buf_t b = {0};
	for (;;) {
		int done;
		if (cgs.version == 2) {
			done = rd_key(d, "cgroup.events", "frozen") == 1;
		} else {
			done = cg_rdb(d, "freezer.state", &b) == 0 && b.p && strncmp(b.p, "FROZEN", 6) == 0;
		}
		if (done || mono_us() > until)
			break;
		usleep(500);
	}
	buf_free(&b);
	return 1;
}

int cgroup_signal(struct cgroup *c, int sig, pid_t spare, pid_t leader)
{
	if (!c)
		return -1;
	pid_t self = getpid(), *p = NULL;
	/* a process just spawned joins its cgroup itself, before it execs: one
	 * not in it yet has started nothing, and is signalled directly */
	int early = 0;
	if (leader > 0 && leader != spare) {
		int n = cgroup_procs(c, &p);
		early = 1;
		for (int i = 0; i < n && early; i++)
			early = p[i] != leader;
		free(p);
		p = NULL;
		if (early && kill(leader, sig) < 0)
			early = 0;
	}
	if (cgs.version == 2 && sig == SIGKILL && !spare && has_file(c->dir[0], "cgroup.kill")) {
		int n = cgroup_procs(c, &p);
		free(p);
		if (cg_wrf(c->dir[0], "cgroup.kill", "1") == 0) {
			n += early;
			uint64_t until = mono_us() + KILL_WAIT_US;
			while (mono_us() < until) {
				int left = cgroup_procs(c, &p);
				free(p);
				if (!left)
					break;
				usleep(1000);
			}
			return n;
		}
	}
	int first = -1;
	uint64_t until = mono_us() + KILL_WAIT_US;
	for (int pass = 0;; pass++) {
		int frozen = freeze(c, 1);
		int n = cgroup_procs(c, &p), sent = 0;
		for (int i = 0; i < n; i++) {
			if (p[i] == spare || p[i] == self || p[i] <= 0)
				continue;
			if (kill(p[i], sig) == 0)
				sent++;
		}
		free(p);
		p = NULL;
		if (frozen)
			freeze(c, 0);
		if (first < 0)
			first = sent + early;
		if (sig != SIGKILL || !sent || mono_us() > until)
			break;
		usleep(pass < 20 ? 1000 : 5000);   /* they go once the kernel has them exit */
	}
	return first;
}

int cgroup_usage(const struct cgroup *c, struct cg_usage *u)
{
	u->memory = u->memory_peak = u->pids = -1;
	u->cpu_s = -1;
	u->oom_kills = u->pids_refused = u->cpu_throttled = -1;
	if (!c)
		return -1;
	const char *m = cgs.of[C_MEM] >= 0 ? c->dir[cgs.of[C_MEM]] : NULL;
	const char *p = cgs.of[C_PIDS] >= 0 ? c->dir[cgs.of[C_PIDS]] : NULL;
	const char *cpu = cgs.of[C_CPU] >= 0 ? c->dir[cgs.of[C_CPU]] : NULL;
	const char *acct = cgs.of[C_CPUACCT] >= 0 ? c->dir[cgs.of[C_CPUACCT]] : NULL;
	if (cgs.version == 2) {
		u->memory = rd_ll(m, "memory.current");
		u->memory_peak = rd_ll(m, "memory.peak");
		u->oom_kills = rd_key(m, "memory.events", "oom_kill");
		long long us = rd_key(c->dir[0], "cpu.stat", "usage_usec");
		if (us >= 0)
			u->cpu_s = (double)us / 1e6;
		u->cpu_throttled = rd_key(cpu, "cpu.stat", "nr_throttled");
	} else {
		u->memory = rd_ll(m, "memory.usage_in_bytes");
		u->memory_peak = rd_ll(m, "memory.max_usage_in_bytes");
		u->oom_kills = rd_key(m, "memory.oom_control", "oom_kill");
		if (u->oom_kills < 0 && m)   /* before 4.13: the times the limit was hit */
			u->oom_kills = rd_ll(m, "memory.failcnt");
		long long ns = rd_ll(acct, "cpuacct.usage");
		if (ns >= 0)
			u->cpu_s = (double)ns / 1e9;
		u->cpu_throttled = rd_key(cpu, "cpu.stat", "nr_throttled");
	}
	u->pids = rd_ll(p, "pids.current");
	u->pids_refused = rd_key(p, "pids.events", "max");
	return 0;
}

/* the hit counters' files: oom kills, forks refused, periods throttled
 * (the last only under a cpu limit) */
static void open_counters(struct cgroup *c)
{
	static const char *const file[2][3] = {
		{"memory.oom_control", "pids.events", "cpu.stat"},
		{"memory.events", "pids.events", "cpu.stat"},
	};
	static const int ctrl[3] = {C_MEM, C_PIDS, C_CPU};
	for (int k = 0; k < 3; k++) {
		char p[PATH_MAX];
		int i = cgs.of[ctrl[k]];
		if (i < 0 || !c->dir[i] || (k == 2 && !(c->lim.cpu > 0)))
			continue;
		snprintf(p, sizeof p, "%s/%s", c->dir[i], file[cgs.version == 2][k]);
		c->cfd[k] = open(p, O_RDONLY | O_CLOEXEC);
	}
}

/* "key N" from an open counters file, read again from its start */
static long long pread_key(int fd, const char *key)
{
	char v[2048];
	if (fd < 0)
		return -1;
	ssize_t n = pread(fd, v, sizeof v - 1, 0);
	if (n <= 0)
		return -1;
	v[n] = 0;
	return key_in(v, key);
}

/* the hit counters alone (what every run's answer reads): oom kills, forks
 * refused, periods throttled; -1 where unknown */
static void counters(const struct cgroup *c, long long v[3])
{
	v[0] = pread_key(c->cfd[0], "oom_kill");
	if (v[0] < 0 && cgs.version == 1 && c->cfd[0] >= 0)   /* before 4.13: the limit's hits */
		v[0] = rd_ll(c->dir[cgs.of[C_MEM]], "memory.failcnt");
	v[1] = pread_key(c->cfd[1], "max");
	v[2] = pread_key(c->cfd[2], "nr_throttled");
}

/* a counter read now against the last poll's: session.limit when it grew */
static void hit(struct cgroup *c, int k, long long now, const char *what, cJSON *limit)
{
	uint64_t t = mono_us();
	if (now < 0 || now <= c->seen[k]) {
		cJSON_Delete(limit);
		return;
	}
	long long more = now - c->seen[k];
	c->seen[k] = now;
	if (k && c->said_us[k] && t - c->said_us[k] < SAY_AGAIN_US) {
		cJSON_Delete(limit);
		return;
	}
	c->said_us[k] = t;
	if (!cgs.emit) {
		cJSON_Delete(limit);
		return;
	}
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "session", c->name);
	cJSON_AddStringToObject(ex, "what", what);
	cJSON_AddItemToObject(ex, "limit", limit);
	cJSON_AddNumberToObject(ex, k == 0 ? "oom_kills" : k == 1 ? "forks_refused" : "throttled",
				(double)more);
	cgs.emit("session.limit", "", ex);
}

static cJSON *num_or_null(double v)
{
	return v > 0 ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

static void poll_with(struct cgroup *c, const long long v[3])
{
	hit(c, 0, v[0], "memory", num_or_null((double)c->lim.memory));
	hit(c, 1, v[1], "pids", num_or_null((double)c->lim.pids));
	if (c->lim.cpu > 0)
		hit(c, 2, v[2], "cpu", num_or_null(c->lim.cpu));
}

void cgroup_poll(struct cgroup *c)
{
	long long v[3];
	if (!c)
		return;
	counters(c, v);
	poll_with(c, v);
}

/* no read: the counters as the last poll or answer saw them (a hit in
 * the second before the command is counted as the command's) */
void cgroup_mark(struct cgroup *c)
{
	if (!c)
		return;
	c->mark[0] = c->seen[0];
	c->mark[1] = c->seen[1];
}

void cgroup_check(struct cgroup *c, long long *oom, long long *refused)
{
	long long v[3];
	*oom = *refused = 0;
	if (!c)
		return;
	counters(c, v);
	poll_with(c, v);
	if (v[0] > c->mark[0] && c->mark[0] >= 0)
		*oom = v[0] - c->mark[0];
	if (v[1] > c->mark[1] && c->mark[1] >= 0)
		*refused = v[1] - c->mark[1];
}

void cgroup_free(struct cgroup *c)
{
	if (!c)
		return;
	for (struct cgroup **pp = &cgs.live; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	cgroup_signal(c, SIGKILL, 0, 0);
	if (cg_rmdir(c)) {
		cg_release(c);
		return;
	}
	/* a process still exiting: tried again on the timer and at exit */
	c->dead_since = mono_us();
	c->next = cgs.dead;
	cgs.dead = c;
	arm();
}

static void retry_dead(int at_exit)
{
	for (struct cgroup **pp = &cgs.dead; *pp;) {
		struct cgroup *c = *pp;
		cgroup_signal(c, SIGKILL, 0, 0);
		int gone = cg_rmdir(c);
		if (!gone && (at_exit || mono_us() - c->dead_since > DEAD_KEEP_US)) {
			for (int i = 0; i < cgs.nh; i++)
				if (c->dir[i])
					log_warn("cgroups: cannot remove %s: %s", c->dir[i], strerror(errno));
			gone = 1;
		}
		if (gone) {
			*pp = c->next;
			cg_release(c);
		} else {
			pp = &c->next;
		}
	}
}

static void poll_timer(lws_sorted_usec_list_t *sul)
{
	(void)sul;
	cgs.timer = 0;
	for (struct cgroup *c = cgs.live; c; c = c->next)
		cgroup_poll(c);
	retry_dead(0);
	arm();
}

void cgroup_stop(void)
{
	cgs.stopping = 1;
	if (cgs.timer)
		lws_sul_cancel(&cgs.sul);
	cgs.timer = 0;
}

void cg_sessions_end(void)
{
	cgs.stopping = 1;
	while (cgs.live)
		cgroup_free(cgs.live);
	/* a second for what is still exiting */
	for (int i = 0; cgs.dead && i < 100; i++) {
		usleep(10000);
		for (struct cgroup **pp = &cgs.dead; *pp;) {
			struct cgroup *c = *pp;
			if (cg_rmdir(c)) {
				*pp = c->next;
				cg_release(c);
			} else {
				pp = &c->next;
			}
		}
	}
	retry_dead(1);
}

/* ------------------------------------------- across an upgrade in place */

/* what the next binary needs to take a session's cgroup back: its folder's
 * name (the same in every hierarchy), its limits and the counters seen */
cJSON *cgroup_record(const struct cgroup *c)
{
	const char *sub = NULL;
	for (int i = 0; i < cgs.nh && !sub; i++)
		if (c->dir[i] && strrchr(c->dir[i], '/'))
			sub = strrchr(c->dir[i], '/') + 1;
	if (!sub)
		return NULL;
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "sub", sub);
	cJSON_AddNumberToObject(o, "memory", (double)c->lim.memory);
	cJSON_AddNumberToObject(o, "pids", (double)c->lim.pids);
	cJSON_AddNumberToObject(o, "cpu", c->lim.cpu);
	cJSON *seen = cJSON_AddArrayToObject(o, "seen");
	for (int k = 0; k < 3; k++)
		cJSON_AddItemToArray(seen, cJSON_CreateNumber((double)c->seen[k]));
	cJSON *mark = cJSON_AddArrayToObject(o, "mark");
	for (int k = 0; k < 2; k++)
		cJSON_AddItemToArray(mark, cJSON_CreateNumber((double)c->mark[k]));
	return o;
}

static double rec_num(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItem(o, k);
	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* the folders named sub (s-NAME-N) in every hierarchy where they still
 * are, as a cgroup named name; NULL when there are none to take */
static struct cgroup *cg_take(const char *name, const cJSON *sub)
{
	if (!cgs.version || !cJSON_IsString(sub) || strncmp(sub->valuestring, "s-", 2) != 0 ||
	    strchr(sub->valuestring, '/') || strstr(sub->valuestring, ".."))
		return NULL;
	struct cgroup *c = xcalloc(1, sizeof *c);
	snprintf(c->name, sizeof c->name, "%s", name);
	c->cfd[0] = c->cfd[1] = c->cfd[2] = -1;
	int found = 0;
	for (int i = 0; i < cgs.nh; i++) {
		struct stat st;
		char *d = cg_join(cgs.h[i].base, sub->valuestring);
		if (stat(d, &st) < 0 || !S_ISDIR(st.st_mode)) {
			free(d);
			continue;
		}
		c->dir[i] = d;
		c->procs[i] = cg_join(d, "cgroup.procs");
		found++;
	}
	if (!found) {
		cg_release(c);
		return NULL;
	}
	return c;
}

/* a session's cgroup from the record of the termd before (same pid, so the
 * same termd-<pid>): its folders where they still are, its limits as they
 * were set; NULL when there is none to take */
struct cgroup *cgroup_adopt(const char *name, const cJSON *rec)
{
	const cJSON *sub = cJSON_GetObjectItem(rec, "sub");
	struct cgroup *c = cg_take(name, sub);
	if (!c)
		return NULL;
	c->lim.memory = (long long)rec_num(rec, "memory");
	c->lim.pids = (long long)rec_num(rec, "pids");
	c->lim.cpu = rec_num(rec, "cpu");
	const cJSON *seen = cJSON_GetObjectItem(rec, "seen"), *mark = cJSON_GetObjectItem(rec, "mark");
	for (int k = 0; k < 3; k++) {
		const cJSON *v = cJSON_GetArrayItem(seen, k);
		c->seen[k] = cJSON_IsNumber(v) ? (long long)v->valuedouble : 0;
	}
	for (int k = 0; k < 2; k++) {
		const cJSON *v = cJSON_GetArrayItem(mark, k);
		c->mark[k] = cJSON_IsNumber(v) ? (long long)v->valuedouble : 0;
	}
	/* new sessions' folders are numbered past it */
	const char *dash = strrchr(sub->valuestring, '-');
	unsigned long n = dash ? strtoul(dash + 1, NULL, 10) : 0;
	if (n > cgs.n)
		cgs.n = n;
	open_counters(c);
	c->next = cgs.live;
	cgs.live = c;
	arm();
	return c;
}

/* what is no session's: the folders' count, so that new ones are numbered
 * past every earlier one (a closed session's too), and the folders of
 * closed sessions the kernel still held, for the next termd to remove */
cJSON *cgroup_handover_save(void)
{
	cgroup_settle();   /* the next image finds termd where it will stay */
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "n", (double)cgs.n);
	cJSON *dead = cJSON_AddArrayToObject(o, "dead");
	for (struct cgroup *c = cgs.dead; c; c = c->next)
		for (int i = 0; i < cgs.nh; i++)
			if (c->dir[i] && strrchr(c->dir[i], '/')) {
				cJSON_AddItemToArray(dead, cJSON_CreateString(strrchr(c->dir[i], '/') + 1));
				break;
			}
	return o;
}

void cgroup_handover_load(const cJSON *rec)
{
	const cJSON *n = cJSON_GetObjectItem(rec, "n");
	if (cJSON_IsNumber(n) && n->valuedouble > (double)cgs.n)
		cgs.n = (unsigned long)n->valuedouble;
	const cJSON *sub;
	cJSON_ArrayForEach(sub, cJSON_GetObjectItem(rec, "dead")) {
		struct cgroup *c = cg_take(cJSON_IsString(sub) ? sub->valuestring : "", sub);
		if (!c)
			continue;
		c->dead_since = mono_us();   /* tried again on the timer and at exit */
		c->next = cgs.dead;
		cgs.dead = c;
		arm();
	}
}
