/* cgroup-int.h — what cgroup.c (the hierarchies found, termd's own cgroup)
 * and cgroup-session.c (a session's cgroup) share and nothing else sees:
 * the controllers, a hierarchy, a session's cgroup, the one state, and
 * the file helpers of cgroup.c. */
#ifndef TERMD_CGROUP_INT_H
#define TERMD_CGROUP_INT_H

#include "core.h"

enum { C_MEM, C_PIDS, C_CPU, C_CPUACCT, C_FREEZER, C_N };

/* one hierarchy: v2's one, or a v1 mount (with one or more controllers) */
struct hier {
	char *root;               /* termd's cgroup as it started: mount point + path */
	char *base;               /* root/termd-<pid> */
	char *self;               /* base/termd: where termd is */
	unsigned ctrls;           /* 1 << C_* */
	int moved;                /* termd is in self */
	int move_err;             /* the mover thread's errno */
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

/* (defined in cgroup.c) */
extern struct cg_state {
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
} cgs;

/* ---- cgroup.c ---- */
/* v written to dir/file: 0, or -errno */
int cg_wrf(const char *dir, const char *file, const char *v);
/* the whole of dir/file (file may be NULL: dir is the file) into b,
 * NUL-terminated: 0, or -1 */
int cg_rdb(const char *dir, const char *file, buf_t *b);
/* "a/b", malloc'd */
char *cg_join(const char *a, const char *b);

/* ---- cgroup-session.c ---- */
/* At exit: every session's cgroup killed and removed (a second for what is
 * still exiting), no more timer. */
void cg_sessions_end(void);

#endif
