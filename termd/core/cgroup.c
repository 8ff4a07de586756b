/* cgroup.c — the kernel's side of a cgroup per session, v1 and v2: what
 * is there and termd's own cgroup (a session's cgroup is cgroup-session.c).
 * At start termd finds a cgroup2 mount whose cgroup (termd's, in
 * /proc/self/cgroup) offers memory and pids (/sys/fs/cgroup, else
 * /sys/fs/cgroup/unified), else the v1 hierarchies of memory, pids, cpu,
 * cpuacct and freezer (from /proc/self/mountinfo), and moves itself into
 * <its cgroup>/termd-<pid>/termd: a session's limits never count termd,
 * and on v2 termd-<pid> holds no process so its controllers can be given
 * to the sessions. On v1 that move is made by a thread once the first
 * session was started (each v1 move waits an RCU grace period, 2-15 ms,
 * holding the kernel's cgroup lock that a session's mkdir needs too; a
 * session's process joins its own cgroup itself, so nothing waits for
 * termd's); it is waited for before a plugin's program is forked, before
 * an upgrade in place and at exit. termd takes oom_score_adj -1000 when
 * allowed (every child gets 0 back before exec). At exit, after the sessions' cgroups,
 * termd goes back where it was and its folders are removed. Folders of a
 * termd that died (no such pid) are removed at start when they are empty.
 * Also the file helpers both files use. */
#include "cgroup-int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const cnames[C_N] = {"memory", "pids", "cpu", "cpuacct", "freezer"};

struct cg_state cgs = {.of = {-1, -1, -1, -1, -1}, .track = -1};

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

int cg_wrf(const char *dir, const char *file, const char *v)
{
	char p[PATH_MAX];
	if (snprintf(p, sizeof p, "%s/%s", dir, file) >= (int)sizeof p)
		return -ENAMETOOLONG;
	return wr(p, v);
}

/* the whole file into b (NUL-terminated): 0, or -1 */
int cg_rdb(const char *dir, const char *file, buf_t *b)
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

char *cg_join(const char *a, const char *b)
{
	/* its exact size: a session keeps four of them (a buf_t's 256 each) */
	size_t la = strlen(a), lb = strlen(b);
	char *p = xmalloc(la + lb + 2);
	memcpy(p, a, la);
	p[la] = '/';
	memcpy(p + la + 1, b, lb + 1);
	return p;
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
 * list holds ctrl ("" for v2's "0::"): 0, or -1; *there: termd is in its
 * termd-<pid>/termd already (an upgrade in place) */
static int self_path(const char *ctrl, char *out, size_t n, int *there)
{
	*there = 0;
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
	/* after an upgrade in place (same pid, execve) termd is still in the
	 * termd-<pid>/termd it made: the root is the cgroup above it, or every
	 * upgrade would nest one level deeper */
	if (found == 0) {
		char tail[48];
		snprintf(tail, sizeof tail, "/termd-%d/termd", (int)getpid());
		size_t ol = strlen(out), tl = strlen(tail);
		if (ol >= tl && strcmp(out + ol - tl, tail) == 0) {
			out[ol - tl] = 0;
			*there = 1;
			if (!*out)
				snprintf(out, n, "/");
		}
	}
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
		char *dir = cg_join(root, e->d_name);
		DIR *sd = opendir(dir);
		if (sd) {
			struct dirent *se;
			while ((se = readdir(sd))) {
				if (se->d_name[0] == '.' || se->d_type != DT_DIR)
					continue;
				char *sub = cg_join(dir, se->d_name);
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
	if (h->self && cg_wrf(h->root, "cgroup.procs", pid) < 0)
		log_debug("cgroups: cannot move termd back to %s", h->root);
	buf_t b = {0};
	if (h->self && cg_rdb(h->self, "cgroup.procs", &b) == 0)
		for (char *p = b.p, *end; p && *p; p = end) {
			long other = strtol(p, &end, 10);
			if (end == p)
				break;
			snprintf(pid, sizeof pid, "%ld", other);
			cg_wrf(h->root, "cgroup.procs", pid);
		}
	buf_free(&b);
	if (h->self)
		rmdir(h->self);
	if (h->base)
		rmdir(h->base);
	hier_free(h);
}

/* <root>/termd-<pid>/termd made and (now: v2 needs termd out of root
 * before it gives controllers; not when it is there already) termd moved
 * into it: 0, or -1 and why */
static int hier_setup(struct hier *h, int now, char *why, size_t n)
{
	char name[32], pid[32];
	snprintf(name, sizeof name, "termd-%d", (int)getpid());
	snprintf(pid, sizeof pid, "%d", (int)getpid());
	sweep_stale(h->root);
	h->base = cg_join(h->root, name);
	if (mkdir(h->base, 0755) < 0 && errno != EEXIST) {
		snprintf(why, n, "cannot make %s: %s", h->base, strerror(errno));
		goto fail;
	}
	h->self = cg_join(h->base, "termd");
	if (mkdir(h->self, 0755) < 0 && errno != EEXIST) {
		snprintf(why, n, "cannot make %s: %s", h->self, strerror(errno));
		goto fail;
	}
	int r = h->moved || !now ? 0 : cg_wrf(h->self, "cgroup.procs", pid);
	if (r == 0 && now)
		h->moved = 1;
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
	int there;
	if (self_path("", path, sizeof path, &there) < 0) {
		snprintf(why, n, "termd's cgroup2 path is not in /proc/self/cgroup");
		return -1;
	}
	struct hier *h = &cgs.h[0];
	h->root = cg_dir(&best, path);
	h->moved = there;
	buf_t ctl = {0};
	cg_rdb(h->root, "cgroup.controllers", &ctl);
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
	if (hier_setup(h, 1, why, n) < 0) {
		buf_free(&ctl);
		hier_free(h);
		return -1;
	}
	/* the controllers from termd's cgroup down to termd-<pid>'s children:
	 * termd's cgroup may hold other processes (then it cannot give them,
	 * unless they are given already) */
	static const char *const want[] = {"memory", "pids", "cpu"};
	buf_t sub = {0};
	cg_rdb(h->root, "cgroup.subtree_control", &sub);
	for (size_t i = 0; i < 3; i++) {
		char v[16];
		if (!ctl.p || !has_word(ctl.p, want[i]))
			continue;
		snprintf(v, sizeof v, "+%s", want[i]);
		if (!sub.p || !has_word(sub.p, want[i]))
			cg_wrf(h->root, "cgroup.subtree_control", v);
		cg_wrf(h->base, "cgroup.subtree_control", v);
	}
	cg_rdb(h->base, "cgroup.subtree_control", &sub);
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
	cgs.nh = 1;
	for (int c = 0; c < C_N; c++)
		cgs.of[c] = (h->ctrls >> c) & 1 ? 0 : -1;
	cgs.track = 0;
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
		if (!found || cgs.of[c] >= 0)
			continue;
		char path[PATH_MAX];
		int there;
		if (self_path(cnames[c], path, sizeof path, &there) < 0)
			continue;
		char *root = cg_dir(&m, path);
		int same = -1;
		for (int i = 0; i < cgs.nh; i++)
			if (strcmp(cgs.h[i].root, root) == 0)
				same = i;
		if (same >= 0) {   /* co-mounted with one found already (cpu,cpuacct) */
			free(root);
			cgs.h[same].ctrls |= 1u << c;
			cgs.of[c] = same;
			continue;
		}
		struct hier *h = &cgs.h[cgs.nh];
		h->root = root;
		h->moved = there;
		char w[400];
		if (access(root, W_OK) != 0) {
			snprintf(w, sizeof w, "%s is not writable: %s", root, strerror(errno));
			hier_free(h);
		} else if (hier_setup(h, 0, w, sizeof w) < 0) {
			hier_free(h);
		} else {
			h->ctrls = 1u << c;
			/* a co-mount names more than this one */
			for (int o = c + 1; o < C_N; o++)
				if (has_word(m.super, cnames[o]))
					h->ctrls |= 1u << o;
			for (int o = c; o < C_N; o++)
				if ((h->ctrls >> o) & 1)
					cgs.of[o] = cgs.nh;
			cgs.nh++;
			continue;
		}
		if (!first_why[0])
			snprintf(first_why, sizeof first_why, "%s", w);
	}
	if (!cgs.nh || (!forced && cgs.of[C_MEM] < 0 && cgs.of[C_PIDS] < 0)) {
		snprintf(why, n, "%s", first_why[0] ? first_why : "no cgroup v1 memory or pids hierarchy");
		for (int i = 0; i < cgs.nh; i++)
			hier_undo(&cgs.h[i]);
		cgs.nh = 0;
		for (int c = 0; c < C_N; c++)
			cgs.of[c] = -1;
		return -1;
	}
	static const int pref[] = {C_PIDS, C_MEM, C_FREEZER, C_CPU, C_CPUACCT};
	for (size_t i = 0; i < sizeof pref / sizeof pref[0] && cgs.track < 0; i++)
		cgs.track = cgs.of[pref[i]];
	return 0;
}

/* ------------------------------------------------------ termd's move */

static pthread_t mover;
static int mover_on;

/* the thread: termd into each hierarchy's termd-<pid>/termd (cgroup.procs
 * takes every thread of termd). Only open/write/close on paths made
 * before it started, so the loop may fork meanwhile; a child forked before
 * the move joins its session's cgroup itself all the same. */
static void *move_self(void *arg)
{
	(void)arg;
	char pid[32];
	snprintf(pid, sizeof pid, "%d", (int)getpid());
	for (int i = 0; i < cgs.nh; i++) {
		struct hier *h = &cgs.h[i];
		if (h->moved || !h->self)
			continue;
		h->move_err = -cg_wrf(h->self, "cgroup.procs", pid);
	}
	return NULL;
}

/* after the thread: what it could not do said, the rest noted as done */
static void move_done(void)
{
	for (int i = 0; i < cgs.nh; i++) {
		struct hier *h = &cgs.h[i];
		if (h->move_err)
			log_warn("cgroups: cannot move termd into %s: %s", h->self, strerror(h->move_err));
		else if (h->self)
			h->moved = 1;
		h->move_err = 0;
	}
}

void cgroup_move_self(void)
{
	int todo = 0;
	for (int i = 0; i < cgs.nh; i++)
		todo |= cgs.h[i].self && !cgs.h[i].moved;
	if (!todo)
		return;
	/* no signal for it: termd's are read from a signalfd once the loop
	 * blocks them, and a SIGCHLD taken by this thread would be lost */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int r = pthread_create(&mover, NULL, move_self, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r == 0) {
		mover_on = 1;
		return;
	}
	move_self(NULL);   /* no thread: here, then */
	move_done();
}

void cgroup_settle(void)
{
	if (!mover_on)
		return;
	pthread_join(mover, NULL);
	mover_on = 0;
	move_done();
}

void cgroup_init(cg_event_fn *emit)
{
	cgs.emit = emit;
	/* headroom: the kernel's OOM killer takes a session's process before
	 * termd (a child gets 0 back in cgroup_child_join) */
	if (wr("/proc/self/oom_score_adj", "-1000") == 0)
		cgs.adj = 1;
	if (opts.cgroups == CG_OFF) {
		snprintf(cgs.why, sizeof cgs.why, "--cgroups off");
	} else {
		char w2[400] = "", w1[400] = "";
		if (opts.cgroups != CG_V1 && try_v2(opts.cgroups == CG_V2, w2, sizeof w2) == 0)
			cgs.version = 2;
		else if (opts.cgroups != CG_V2 && try_v1(opts.cgroups == CG_V1, w1, sizeof w1) == 0)
			cgs.version = 1;
		else
			snprintf(cgs.why, sizeof cgs.why, "%s%s%s", w2, w2[0] && w1[0] ? "; " : "", w1);
	}
	if (!cgs.version) {
		log_info("cgroups: not used (%s): no session limits; whole-tree signals follow /proc",
			 cgs.why);
		if (opts.session_memory_max || opts.session_pids_max || opts.session_cpu_max)
			log_info("cgroups: --session-*-max are not enforced");
		return;
	}
	buf_t b = {0};
	for (int c = 0; c < C_N; c++)
		if (cgs.of[c] >= 0)
			buf_printf(&b, " %s", cnames[c]);
	log_info("cgroups: v%d (%s), sessions under %s", cgs.version, b.p ? b.p + 1 : "",
		 cgs.h[cgs.track].base);
	buf_free(&b);
}

const char *cgroup_version(void)
{
	return cgs.version == 2 ? "v2" : cgs.version == 1 ? "v1" : NULL;
}

const char *cgroup_why(void)
{
	return cgs.why;
}

int cgroup_can_limit(const char *what)
{
	int c = strcmp(what, "memory") == 0 ? C_MEM : strcmp(what, "pids") == 0 ? C_PIDS
		: strcmp(what, "cpu") == 0 ? C_CPU : -1;
	return cgs.version && c >= 0 && cgs.of[c] >= 0;
}

void cgroup_shutdown(void)
{
	cgroup_settle();
	cg_sessions_end();
	for (int i = 0; i < cgs.nh; i++)
		hier_undo(&cgs.h[i]);
	cgs.nh = 0;
	cgs.version = 0;
	for (int c = 0; c < C_N; c++)
		cgs.of[c] = -1;
	cgs.track = -1;
}
