/* cgroup.c — the kernel's side of a cgroup per session, v1 and v2 in this
 * one file. At start termd finds a cgroup2 mount whose cgroup (termd's, in
 * /proc/self/cgroup) offers memory and pids (/sys/fs/cgroup, else
 * /sys/fs/cgroup/unified), else the v1 hierarchies of memory, pids, cpu,
 * cpuacct and freezer (from /proc/self/mountinfo), and moves itself into
 * <its cgroup>/termd-<pid>/termd: a session's limits never count termd,
 * and on v2 termd-<pid> holds no process so its controllers can be given
 * to the sessions. termd takes oom_score_adj -1000 when allowed, and every
 * child gets 0 back before exec. A session's cgroup is
 * <its cgroup>/termd-<pid>/s-<name>-<n> (in each v1 hierarchy), its limits
 * written before its process joins it (from the child, between fork and
 * exec, so nothing it starts is ever outside). Signalling every process in
 * it: v2's cgroup.kill for KILL when nothing is spared; else the cgroup is
 * frozen (v2 cgroup.freeze, v1 freezer.state) while its cgroup.procs is
 * read and signalled, then thawed, again until only what is spared is
 * left for KILL. Usage and limit hits from memory.current/peak/events,
 * pids.current/events, cpu.stat (v1: memory.usage_in_bytes,
 * max_usage_in_bytes, oom_control's oom_kill, cpuacct.usage). A timer
 * reads the hit counters once a second while session cgroups exist and
 * sends session.limit. At exit (or when a session is freed) what is left is
 * killed and the folders removed; a folder the kernel still holds is tried
 * again on the timer and at exit. Folders of a termd that died (no such
 * pid) are removed at start when they are empty. */
#include "core.h"

#include <dirent.h>
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

enum { C_MEM, C_PIDS, C_CPU, C_CPUACCT, C_FREEZER, C_N };
static const char *const cnames[C_N] = {"memory", "pids", "cpu", "cpuacct", "freezer"};

#define POLL_US        1000000u   /* limit counters read this often */
#define SAY_AGAIN_US   10000000u  /* pids and cpu hits: one event per 10 s at most */
#define FREEZE_WAIT_US 200000u    /* a freeze that has not settled by then goes on anyway */
#define KILL_WAIT_US   1000000u   /* KILL passes until the cgroup is empty, at most */
#define DEAD_KEEP_US   60000000u  /* a busy folder is tried again this long */

/* one hierarchy: v2's one, or a v1 mount (with one or more controllers) */
struct hier {
	char *root;               /* termd's cgroup as it started: mount point + path */
	char *base;               /* root/termd-<pid> */
	char *self;               /* base/termd: where termd is */
	unsigned ctrls;           /* 1 << C_* */
};

struct cgroup {
	struct cgroup *next;
	char name[TD_SESSION_NAME_MAX + 1];
	char *dir[C_N];           /* per hierarchy */
	char *procs[C_N];         /* dir/cgroup.procs: what the child writes */
	struct cg_limits lim;
	long long seen[3];        /* oom kills, forks refused, cpu throttled: at the last poll */
	long long mark[2];        /* oom kills, forks refused: when the command began */
	uint64_t said_us[3];      /* the last session.limit of each kind */
	int cfd[3];               /* those counters' files, kept open (pread is one syscall) */
	uint64_t dead_since;      /* freed, its folders still held by the kernel */
};

static struct {
	int version;              /* 0: none, 1, 2 */
	char why[1024];
	struct hier h[C_N];
	int nh;
	int of[C_N];              /* each controller's hierarchy, or -1 */
	int track;                /* the hierarchy whose cgroup.procs lists a session */
	int adj;                  /* termd's oom_score_adj was set: children go back to 0 */
	unsigned long n;
	cg_event_fn *emit;
	struct cgroup *live, *dead;
	lws_sorted_usec_list_t sul;
	int timer, stopping;
} G = {.of = {-1, -1, -1, -1, -1}, .track = -1};

/* ------------------------------------------------------------- files */

static int wr(const char *path, const char *v)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = write(fd, v, strlen(v));
	int e = n < 0 ? errno : 0;
	close(fd);
	return n < 0 ? -e : 0;
}

static int wrf(const char *dir, const char *file, const char *v)
{
	char p[PATH_MAX];
	if (snprintf(p, sizeof p, "%s/%s", dir, file) >= (int)sizeof p)
		return -ENAMETOOLONG;
	return wr(p, v);
}

/* the whole file into b (NUL-terminated): 0, or -1 */
static int rdb(const char *dir, const char *file, buf_t *b)
{
	char p[PATH_MAX];
	buf_reset(b);
	if (snprintf(p, sizeof p, "%s%s%s", dir, file ? "/" : "", file ? file : "") >= (int)sizeof p)
		return -1;
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	for (;;) {
		buf_reserve(b, 4096);
		ssize_t n = read(fd, b->p + b->len, 4095);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			close(fd);
			buf_putc(b, 0);
			b->len--;
			return n < 0 ? -1 : 0;
		}
		b->len += (size_t)n;
	}
}

/* a file holding one number ("max" is LLONG_MAX), or -1 */
static long long rd_ll(const char *dir, const char *file)
{
	if (!dir)
		return -1;
	char p[PATH_MAX], v[64];
	if (snprintf(p, sizeof p, "%s/%s", dir, file) >= (int)sizeof p)
		return -1;
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, v, sizeof v - 1);
	close(fd);
	if (n <= 0)
		return -1;
	v[n] = 0;
	if (strncmp(v, "max", 3) == 0)
		return LLONG_MAX;
	char *end;
	long long r = strtoll(v, &end, 10);
	return end == v ? -1 : r;
}

/* "key N" lines (memory.events, cpu.stat, memory.oom_control): N, or -1 */
static long long rd_key(const char *dir, const char *file, const char *key)
{
	if (!dir)
		return -1;
	char p[PATH_MAX], v[2048];
	if (snprintf(p, sizeof p, "%s/%s", dir, file) >= (int)sizeof p)
		return -1;
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, v, sizeof v - 1);
	close(fd);
	if (n <= 0)
		return -1;
	v[n] = 0;
	size_t kl = strlen(key);
	for (char *l = v; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (strncmp(l, key, kl) == 0 && l[kl] == ' ')
			return strtoll(l + kl + 1, NULL, 10);
	return -1;
}

static int has_file(const char *dir, const char *file)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/%s", dir, file);
	return access(p, F_OK) == 0;
}

static char *join(const char *a, const char *b)
{
	buf_t x = {0};
	buf_printf(&x, "%s/%s", a, b);
	return buf_steal(&x);
}

/* does the comma- or space-separated list hold word? */
static int has_word(const char *list, const char *word)
{
	size_t wl = strlen(word);
	for (const char *p = list; (p = strstr(p, word)); p += wl) {
		int start = p == list || p[-1] == ',' || p[-1] == ' ';
		char e = p[wl];
		if (start && (e == 0 || e == ',' || e == ' ' || e == '\n'))
			return 1;
	}
	return 0;
}

/* ------------------------------------------------------------ finding */

/* mountinfo's \040-style escapes */
static void unescape(char *s)
{
	char *o = s;
	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = 0;
}

struct mnt {
	char point[PATH_MAX], root[PATH_MAX], fstype[32], super[512];
};

/* the next cgroup or cgroup2 line of mountinfo into m: 1, or 0 at the end */
static int next_mount(FILE *f, struct mnt *m)
{
	char line[4 * PATH_MAX];
	while (fgets(line, sizeof line, f)) {
		char *field[16];
		int n = 0;
		for (char *t = strtok(line, " \n"); t && n < 16; t = strtok(NULL, " \n"))
			field[n++] = t;
		int dash = -1;
		for (int i = 6; i < n; i++)
			if (strcmp(field[i], "-") == 0) {
				dash = i;
				break;
			}
		if (dash < 0 || dash + 1 >= n)
			continue;
		if (strcmp(field[dash + 1], "cgroup") && strcmp(field[dash + 1], "cgroup2"))
			continue;
		snprintf(m->root, sizeof m->root, "%s", field[3]);
		snprintf(m->point, sizeof m->point, "%s", field[4]);
		snprintf(m->fstype, sizeof m->fstype, "%s", field[dash + 1]);
		snprintf(m->super, sizeof m->super, "%s", dash + 3 < n ? field[dash + 3] : "");
		unescape(m->root);
		unescape(m->point);
		return 1;
	}
	return 0;
}

/* termd's cgroup path in the hierarchy whose /proc/self/cgroup controller
 * list holds ctrl ("" for v2's "0::"): 0, or -1 */
static int self_path(const char *ctrl, char *out, size_t n)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	if (!f)
		return -1;
	char line[PATH_MAX + 256];
	int found = -1;
	while (found < 0 && fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c1 = *c2 = 0;
		const char *list = c1 + 1;
		if (*ctrl ? has_word(list, ctrl) : (!*list && strcmp(line, "0") == 0)) {
			snprintf(out, n, "%s", c2 + 1);
			found = 0;
		}
	}
	fclose(f);
	return found;
}

/* mount point + the path below the mount's own root */
static char *cg_dir(const struct mnt *m, const char *path)
{
	const char *rel = path;
	size_t rl = strlen(m->root);
	if (strcmp(m->root, "/") != 0 && strncmp(path, m->root, rl) == 0 &&
	    (path[rl] == '/' || path[rl] == 0))
		rel = path + rl;
	buf_t b = {0};
	buf_printf(&b, "%s%s", m->point, strcmp(rel, "/") == 0 ? "" : rel);
	return buf_steal(&b);
}

/* folders of a termd that is gone (its pid names no process): removed when empty */
static void sweep_stale(const char *root)
{
	DIR *d = opendir(root);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		char *end;
		if (strncmp(e->d_name, "termd-", 6) != 0)
			continue;
		long pid = strtol(e->d_name + 6, &end, 10);
		if (*end || pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		char *dir = join(root, e->d_name);
		DIR *sd = opendir(dir);
		if (sd) {
			struct dirent *se;
			while ((se = readdir(sd))) {
				if (se->d_name[0] == '.' || se->d_type != DT_DIR)
					continue;
				char *sub = join(dir, se->d_name);
				rmdir(sub);
				free(sub);
			}
			closedir(sd);
		}
		if (rmdir(dir) == 0)
			log_debug("cgroups: removed %s (its termd is gone)", dir);
		free(dir);
	}
	closedir(d);
}

static void hier_free(struct hier *h)
{
	free(h->root);
	free(h->base);
	free(h->self);
	memset(h, 0, sizeof *h);
}

/* termd back where it was (and what is still in its cgroup with it: a
 * plugin's program on its way out), its folders removed */
static void hier_undo(struct hier *h)
{
	char pid[32];
	snprintf(pid, sizeof pid, "%d", (int)getpid());
	if (h->self && wrf(h->root, "cgroup.procs", pid) < 0)
		log_debug("cgroups: cannot move termd back to %s", h->root);
	buf_t b = {0};
	if (h->self && rdb(h->self, "cgroup.procs", &b) == 0)
		for (char *p = b.p, *end; p && *p; p = end) {
			long other = strtol(p, &end, 10);
			if (end == p)
				break;
			snprintf(pid, sizeof pid, "%ld", other);
			wrf(h->root, "cgroup.procs", pid);
		}
	buf_free(&b);
	if (h->self)
		rmdir(h->self);
	if (h->base)
		rmdir(h->base);
	hier_free(h);
}

/* <root>/termd-<pid>/termd made and termd moved into it: 0, or -1 and why */
static int hier_setup(struct hier *h, char *why, size_t n)
{
	char name[32], pid[32];
	snprintf(name, sizeof name, "termd-%d", (int)getpid());
	snprintf(pid, sizeof pid, "%d", (int)getpid());
	sweep_stale(h->root);
	h->base = join(h->root, name);
	if (mkdir(h->base, 0755) < 0 && errno != EEXIST) {
		snprintf(why, n, "cannot make %s: %s", h->base, strerror(errno));
		goto fail;
	}
	h->self = join(h->base, "termd");
	if (mkdir(h->self, 0755) < 0 && errno != EEXIST) {
		snprintf(why, n, "cannot make %s: %s", h->self, strerror(errno));
		goto fail;
	}
	int r = wrf(h->self, "cgroup.procs", pid);
	if (r < 0) {
		snprintf(why, n, "cannot move termd into %s: %s", h->self, strerror(-r));
		goto fail;
	}
	return 0;
fail:
	if (h->self)
		rmdir(h->self);
	free(h->self);
	h->self = NULL;
	rmdir(h->base);
	return -1;
}

/* v2: the cgroup2 mount (/sys/fs/cgroup, else .../unified, else the first)
 * and termd's cgroup in it with memory and pids given to termd-<pid>'s
 * children (forced: whatever it offers). 0, or -1 and why. */
static int try_v2(int forced, char *why, size_t n)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f) {
		snprintf(why, n, "cannot read /proc/self/mountinfo: %s", strerror(errno));
		return -1;
	}
	struct mnt m, best;
	int have = 0;
	while (next_mount(f, &m)) {
		if (strcmp(m.fstype, "cgroup2") != 0)
			continue;
		int rank = strcmp(m.point, "/sys/fs/cgroup") == 0 ? 3
			   : strcmp(m.point, "/sys/fs/cgroup/unified") == 0 ? 2 : 1;
		int brank = !have ? 0 : strcmp(best.point, "/sys/fs/cgroup") == 0 ? 3
			    : strcmp(best.point, "/sys/fs/cgroup/unified") == 0 ? 2 : 1;
		if (rank > brank) {
			best = m;
			have = 1;
		}
	}
	fclose(f);
	if (!have) {
		snprintf(why, n, "no cgroup2 mount");
		return -1;
	}
	char path[PATH_MAX];
	if (self_path("", path, sizeof path) < 0) {
		snprintf(why, n, "termd's cgroup2 path is not in /proc/self/cgroup");
		return -1;
	}
	struct hier *h = &G.h[0];
	h->root = cg_dir(&best, path);
	buf_t ctl = {0};
	rdb(h->root, "cgroup.controllers", &ctl);
	while (ctl.len && (ctl.p[ctl.len - 1] == '\n' || ctl.p[ctl.len - 1] == ' '))
		ctl.p[--ctl.len] = 0;
	if (!forced && !(ctl.p && has_word(ctl.p, "memory") && has_word(ctl.p, "pids"))) {
		snprintf(why, n, "cgroup v2 at %s offers no memory and pids controllers (%s)", h->root,
			 ctl.p && *ctl.p ? ctl.p : "none");
		buf_free(&ctl);
		hier_free(h);
		return -1;
	}
	if (access(h->root, W_OK) != 0) {
		snprintf(why, n, "cgroup v2 at %s is not writable: %s", h->root, strerror(errno));
		buf_free(&ctl);
		hier_free(h);
		return -1;
	}
	if (hier_setup(h, why, n) < 0) {
		buf_free(&ctl);
		hier_free(h);
		return -1;
	}
	/* the controllers from termd's cgroup down to termd-<pid>'s children:
	 * termd's cgroup may hold other processes (then it cannot give them,
	 * unless they are given already) */
	static const char *const want[] = {"memory", "pids", "cpu"};
	buf_t sub = {0};
	rdb(h->root, "cgroup.subtree_control", &sub);
	for (size_t i = 0; i < 3; i++) {
		char v[16];
		if (!ctl.p || !has_word(ctl.p, want[i]))
			continue;
		snprintf(v, sizeof v, "+%s", want[i]);
		if (!sub.p || !has_word(sub.p, want[i]))
			wrf(h->root, "cgroup.subtree_control", v);
		wrf(h->base, "cgroup.subtree_control", v);
	}
	rdb(h->base, "cgroup.subtree_control", &sub);
	for (size_t i = 0; i < 3; i++)
		if (sub.p && has_word(sub.p, want[i]))
			h->ctrls |= 1u << (i == 0 ? C_MEM : i == 1 ? C_PIDS : C_CPU);
	buf_free(&ctl);
	buf_free(&sub);
	if (!forced && !((h->ctrls & (1u << C_MEM)) && (h->ctrls & (1u << C_PIDS)))) {
		snprintf(why, n, "cgroup v2 at %s: memory and pids cannot be given to termd's "
			 "sessions (its cgroup holds other processes?)", h->root);
		hier_undo(h);
		return -1;
	}
	h->ctrls |= 1u << C_CPUACCT;   /* cpu.stat usage_usec is always there */
	char probe[PATH_MAX];
	snprintf(probe, sizeof probe, "%s/cgroup.freeze", h->self);
	if (access(probe, F_OK) == 0)
		h->ctrls |= 1u << C_FREEZER;
	G.nh = 1;
	for (int c = 0; c < C_N; c++)
		G.of[c] = (h->ctrls >> c) & 1 ? 0 : -1;
	G.track = 0;
	return 0;
}

/* v1: a hierarchy per mount of memory, pids, cpu, cpuacct, freezer (a
 * mount may hold several); those termd can use. 0, or -1 and why. */
static int try_v1(int forced, char *why, size_t n)
{
	struct mnt m;
	char first_why[400] = "";
	for (int c = 0; c < C_N; c++) {
		FILE *f = fopen("/proc/self/mountinfo", "re");
		if (!f)
			break;
		int found = 0;
		while (!found && next_mount(f, &m))
			found = strcmp(m.fstype, "cgroup") == 0 && has_word(m.super, cnames[c]);
		fclose(f);
		if (!found || G.of[c] >= 0)
			continue;
		char path[PATH_MAX];
		if (self_path(cnames[c], path, sizeof path) < 0)
			continue;
		char *root = cg_dir(&m, path);
		int same = -1;
		for (int i = 0; i < G.nh; i++)
			if (strcmp(G.h[i].root, root) == 0)
				same = i;
		if (same >= 0) {   /* co-mounted with one found already (cpu,cpuacct) */
			free(root);
			G.h[same].ctrls |= 1u << c;
			G.of[c] = same;
			continue;
		}
		struct hier *h = &G.h[G.nh];
		h->root = root;
		char w[400];
		if (access(root, W_OK) != 0) {
			snprintf(w, sizeof w, "%s is not writable: %s", root, strerror(errno));
			hier_free(h);
		} else if (hier_setup(h, w, sizeof w) < 0) {
			hier_free(h);
		} else {
			h->ctrls = 1u << c;
			/* a co-mount names more than this one */
			for (int o = c + 1; o < C_N; o++)
				if (has_word(m.super, cnames[o]))
					h->ctrls |= 1u << o;
			for (int o = c; o < C_N; o++)
				if ((h->ctrls >> o) & 1)
					G.of[o] = G.nh;
			G.nh++;
			continue;
		}
		if (!first_why[0])
			snprintf(first_why, sizeof first_why, "%s", w);
	}
	if (!G.nh || (!forced && G.of[C_MEM] < 0 && G.of[C_PIDS] < 0)) {
		snprintf(why, n, "%s", first_why[0] ? first_why : "no cgroup v1 memory or pids hierarchy");
		for (int i = 0; i < G.nh; i++)
			hier_undo(&G.h[i]);
		G.nh = 0;
		for (int c = 0; c < C_N; c++)
			G.of[c] = -1;
		return -1;
	}
	static const int pref[] = {C_PIDS, C_MEM, C_FREEZER, C_CPU, C_CPUACCT};
	for (size_t i = 0; i < sizeof pref / sizeof pref[0] && G.track < 0; i++)
		G.track = G.of[pref[i]];
	return 0;
}

void cgroup_init(cg_event_fn *emit)
{
	G.emit = emit;
	/* headroom: the kernel's OOM killer takes a session's process before
	 * termd (a child gets 0 back in cgroup_child_join) */
	if (wr("/proc/self/oom_score_adj", "-1000") == 0)
		G.adj = 1;
	if (opts.cgroups == CG_OFF) {
		snprintf(G.why, sizeof G.why, "--cgroups off");
	} else {
		char w2[400] = "", w1[400] = "";
		if (opts.cgroups != CG_V1 && try_v2(opts.cgroups == CG_V2, w2, sizeof w2) == 0)
			G.version = 2;
		else if (opts.cgroups != CG_V2 && try_v1(opts.cgroups == CG_V1, w1, sizeof w1) == 0)
			G.version = 1;
		else
			snprintf(G.why, sizeof G.why, "%s%s%s", w2, w2[0] && w1[0] ? "; " : "", w1);
	}
	if (!G.version) {
		log_info("cgroups: not used (%s): no session limits; whole-tree signals follow /proc",
			 G.why);
		if (opts.session_memory_max || opts.session_pids_max || opts.session_cpu_max)
			log_info("cgroups: --session-*-max are not enforced");
		return;
	}
	buf_t b = {0};
	for (int c = 0; c < C_N; c++)
		if (G.of[c] >= 0)
			buf_printf(&b, " %s", cnames[c]);
	log_info("cgroups: v%d (%s), sessions under %s", G.version, b.p ? b.p + 1 : "",
		 G.h[G.track].base);
	buf_free(&b);
}

const char *cgroup_version(void)
{
	return G.version == 2 ? "v2" : G.version == 1 ? "v1" : NULL;
}

const char *cgroup_why(void)
{
	return G.why;
}

int cgroup_can_limit(const char *what)
{
	int c = strcmp(what, "memory") == 0 ? C_MEM : strcmp(what, "pids") == 0 ? C_PIDS
		: strcmp(what, "cpu") == 0 ? C_CPU : -1;
	return G.version && c >= 0 && G.of[c] >= 0;
}

/* ------------------------------------------------------------ sessions */

static void poll_timer(lws_sorted_usec_list_t *sul);
static void open_counters(struct cgroup *c);

static void arm(void)
{
	if (!G.timer && !G.stopping && (G.live || G.dead)) {
		G.timer = 1;
		server_timer(&G.sul, poll_timer, POLL_US);
	}
}

static int set_limits(struct cgroup *c, const struct cg_limits *l, char *err, size_t n)
{
	char v[64];
	int r = 0;
	const char *what = "";
	if (l->memory) {
		const char *d = c->dir[G.of[C_MEM]];
		snprintf(v, sizeof v, "%lld", l->memory);
		what = "memory";
		if (G.version == 2) {
			r = wrf(d, "memory.max", v);
			if (!r && has_file(d, "memory.swap.max"))
				wrf(d, "memory.swap.max", "0");   /* the limit is memory, swapped or not */
		} else {
			r = wrf(d, "memory.limit_in_bytes", v);
			if (!r && has_file(d, "memory.memsw.limit_in_bytes"))
				wrf(d, "memory.memsw.limit_in_bytes", v);
		}
	}
	if (!r && l->pids) {
		snprintf(v, sizeof v, "%lld", l->pids);
		what = "pids";
		r = wrf(c->dir[G.of[C_PIDS]], "pids.max", v);
	}
	if (!r && l->cpu > 0) {
		const char *d = c->dir[G.of[C_CPU]];
		long q = lround(l->cpu * 100000.0);
		if (q < 1000)
			q = 1000;
		what = "cpu";
		if (G.version == 2) {
			snprintf(v, sizeof v, "%ld 100000", q);
			r = wrf(d, "cpu.max", v);
		} else {
			snprintf(v, sizeof v, "%ld", q);
			r = wrf(d, "cpu.cfs_period_us", "100000");
			if (!r)
				r = wrf(d, "cpu.cfs_quota_us", v);
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
	for (int i = 0; i < G.nh; i++) {
		free(c->dir[i]);
		free(c->procs[i]);
	}
	free(c);
}

/* every folder removed: 1, or 0 while the kernel still holds one */
static int cg_rmdir(struct cgroup *c)
{
	int all = 1;
	for (int i = 0; i < G.nh; i++) {
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
	if (!G.version)
		return NULL;
	struct cgroup *c = xcalloc(1, sizeof *c);
	snprintf(c->name, sizeof c->name, "%s", name);
	c->lim = *lim;
	c->cfd[0] = c->cfd[1] = c->cfd[2] = -1;
	char sub[TD_SESSION_NAME_MAX + 32];
	snprintf(sub, sizeof sub, "s-%s-%lu", name, ++G.n);
	for (int i = 0; i < G.nh; i++) {
		/* v1's cpu alone is only for a cpu limit (a hierarchy less to join) */
		if (G.version == 1 && G.h[i].ctrls == 1u << C_CPU && !(lim->cpu > 0))
			continue;
		c->dir[i] = join(G.h[i].base, sub);
		c->procs[i] = join(c->dir[i], "cgroup.procs");
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
	c->next = G.live;
	G.live = c;
	arm();
	return c;
}

void cgroup_child_join(const struct cgroup *c)
{
	if (G.adj) {
		int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
		if (fd >= 0) {
			if (write(fd, "0", 1) < 0) {
				/* nothing to do about it here */
			}
			close(fd);
		}
	}
	if (!c)
		return;
	for (int i = 0; i < G.nh; i++) {
		int fd = c->procs[i] ? open(c->procs[i], O_WRONLY | O_CLOEXEC) : -1;
		int ok = fd >= 0 && write(fd, "0", 1) == 1;
		if (fd >= 0)
			close(fd);
		if (!ok && c->procs[i]) {
			static const char msg[] = "termd: cannot join the session's cgroup\r\n";
			if (write(2, msg, sizeof msg - 1) < 0) {
				/* nor can this be told */
			}
		}
	}
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
	if (!c || G.track < 0 || !c->dir[G.track])
		return 0;
	buf_t b = {0};
	if (rdb(c->dir[G.track], "cgroup.procs", &b) < 0) {
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
	int i = G.of[C_FREEZER];
	if (i < 0 || !c->dir[i])
		return 0;
	const char *d = c->dir[i];
	if (G.version == 2 ? wrf(d, "cgroup.freeze", on ? "1" : "0") < 0
			   : wrf(d, "freezer.state", on ? "FROZEN" : "THAWED") < 0)
		return 0;
	if (!on)
		return 1;
	/* until it has settled (a task in the kernel stops when it leaves) */
	uint64_t until = mono_us() + FREEZE_WAIT_US;
	buf_t b = {0};
	for (;;) {
		int done;
		if (G.version == 2) {
			done = rd_key(d, "cgroup.events", "frozen") == 1;
		} else {
			done = rdb(d, "freezer.state", &b) == 0 && b.p && strncmp(b.p, "FROZEN", 6) == 0;
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
	if (G.version == 2 && sig == SIGKILL && !spare && has_file(c->dir[0], "cgroup.kill")) {
		int n = cgroup_procs(c, &p);
		free(p);
		if (wrf(c->dir[0], "cgroup.kill", "1") == 0) {
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
	const char *m = G.of[C_MEM] >= 0 ? c->dir[G.of[C_MEM]] : NULL;
	const char *p = G.of[C_PIDS] >= 0 ? c->dir[G.of[C_PIDS]] : NULL;
	const char *cpu = G.of[C_CPU] >= 0 ? c->dir[G.of[C_CPU]] : NULL;
	const char *acct = G.of[C_CPUACCT] >= 0 ? c->dir[G.of[C_CPUACCT]] : NULL;
	if (G.version == 2) {
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
		int i = G.of[ctrl[k]];
		if (i < 0 || !c->dir[i] || (k == 2 && !(c->lim.cpu > 0)))
			continue;
		snprintf(p, sizeof p, "%s/%s", c->dir[i], file[G.version == 2][k]);
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
	size_t kl = strlen(key);
	for (char *l = v; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (strncmp(l, key, kl) == 0 && l[kl] == ' ')
			return strtoll(l + kl + 1, NULL, 10);
	return -1;
}

/* the hit counters alone (what every run's answer reads): oom kills, forks
 * refused, periods throttled; -1 where unknown */
static void counters(const struct cgroup *c, long long v[3])
{
	v[0] = pread_key(c->cfd[0], "oom_kill");
	if (v[0] < 0 && G.version == 1 && c->cfd[0] >= 0)   /* before 4.13: the limit's hits */
		v[0] = rd_ll(c->dir[G.of[C_MEM]], "memory.failcnt");
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
	if (!G.emit) {
		cJSON_Delete(limit);
		return;
	}
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "session", c->name);
	cJSON_AddStringToObject(ex, "what", what);
	cJSON_AddItemToObject(ex, "limit", limit);
	cJSON_AddNumberToObject(ex, k == 0 ? "oom_kills" : k == 1 ? "forks_refused" : "throttled",
				(double)more);
	G.emit("session.limit", "", ex);
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
	for (struct cgroup **pp = &G.live; *pp; pp = &(*pp)->next)
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
	c->next = G.dead;
	G.dead = c;
	arm();
}

static void retry_dead(int at_exit)
{
	for (struct cgroup **pp = &G.dead; *pp;) {
		struct cgroup *c = *pp;
		cgroup_signal(c, SIGKILL, 0, 0);
		int gone = cg_rmdir(c);
		if (!gone && (at_exit || mono_us() - c->dead_since > DEAD_KEEP_US)) {
			for (int i = 0; i < G.nh; i++)
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
	G.timer = 0;
	for (struct cgroup *c = G.live; c; c = c->next)
		cgroup_poll(c);
	retry_dead(0);
	arm();
}

void cgroup_stop(void)
{
	G.stopping = 1;
	if (G.timer)
		lws_sul_cancel(&G.sul);
	G.timer = 0;
}

void cgroup_shutdown(void)
{
	G.stopping = 1;
	while (G.live)
		cgroup_free(G.live);
	/* a second for what is still exiting */
	for (int i = 0; G.dead && i < 100; i++) {
		usleep(10000);
		for (struct cgroup **pp = &G.dead; *pp;) {
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
	for (int i = 0; i < G.nh; i++)
		hier_undo(&G.h[i]);
	G.nh = 0;
	G.version = 0;
	for (int c = 0; c < C_N; c++)
		G.of[c] = -1;
	G.track = -1;
}
