/* cgroup.h — a cgroup per session and what hangs off it: the kernel's
 * side (cgroup.c: v2 or v1 found and set up, termd in a cgroup of its own;
 * cgroup-session.c: a session's cgroup made with its limits, joined by its
 * process before exec, listed, frozen and signalled, read for usage and
 * limit hits, removed) and the session's side (proctree.c: a session's
 * processes from its cgroup or, without cgroups, from /proc; signalling
 * the whole tree, counting what a command left running, the reasons a run
 * gives, the limits and usage in session.list, the session.limit events). */
#ifndef TERMD_CGROUP_H
#define TERMD_CGROUP_H

#include <sys/types.h>
#include <cJSON.h>
#include "util.h"

struct session;
struct cgroup;

/* A session's limits: 0 for none. */
struct cg_limits {
	long long memory;         /* bytes (memory.max / memory.limit_in_bytes) */
	long long pids;           /* processes and threads (pids.max) */
	double cpu;               /* cores (cpu.max / cfs_quota_us per 100 ms) */
};

/* What a session's cgroup has used; -1 where the kernel does not say. */
struct cg_usage {
	long long memory, memory_peak, pids;
	double cpu_s;
	long long oom_kills;      /* memory.events oom_kill / memory.oom_control oom_kill */
	long long pids_refused;   /* forks refused at pids.max (pids.events max) */
	long long cpu_throttled;  /* periods throttled by the cpu limit (cpu.stat nr_throttled) */
};

/* --cgroups */
enum cg_mode { CG_AUTO, CG_OFF, CG_V1, CG_V2 };

/* ---- the kernel's side (cgroup.c, cgroup-session.c) ---- */
/* an event no action caused (session.limit): takes extras */
typedef void cg_event_fn(const char *observation, const char *content, cJSON *extras);
/* At start, before anything is spawned: find cgroups (opts.cgroups), make
 * <its cgroup>/termd-<pid>/termd (v2: move termd into it; v1:
 * cgroup_move_self), oom_score_adj -1000 when allowed; says once on
 * stderr what it found or why none. */
void cgroup_init(cg_event_fn *emit);
/* v1: termd moved into its termd-<pid>/termd by a thread (cgroup_init
 * made the folders): each move waits an RCU grace period holding the
 * kernel's cgroup lock, which the first session's mkdirs would wait for,
 * so it is called once the first session was started. v2 moved in
 * cgroup_init (its controllers need termd out of its cgroup). */
void cgroup_move_self(void);
/* That move done: before forking what belongs in termd's cgroup (a
 * plugin's program), an upgrade in place, exit. */
void cgroup_settle(void);
/* At exit, after the sessions: termd back where it was, its folders removed. */
void cgroup_shutdown(void);
/* "v2", "v1", or NULL when cgroups are not in use (then cgroup_why says why) */
const char *cgroup_version(void);
const char *cgroup_why(void);
/* the limits a controller is there for: memory, pids, cpu */
int cgroup_can_limit(const char *what);
/* A session's cgroup <termd-pid>/s-<name>-<n> with its limits. NULL with
 * err[0] == 0 when cgroups are not in use; NULL with err when it cannot be
 * made or a limit cannot be set. */
struct cgroup *cgroup_new(const char *name, const struct cg_limits *lim, char *err,
			  size_t errlen);
/* Kill what is left in it, remove it (later, if the kernel still holds it). */
void cgroup_free(struct cgroup *cg);
/* In a child of termd between fork and exec: join cg (may be NULL) and
 * take oom_score_adj 0 again. Async-signal-safe. 0, or -1 when a
 * hierarchy's cgroup.procs refused it (told on stderr too). */
int cgroup_child_join(const struct cgroup *cg);
/* v2: cg's folder opened (O_PATH, close-on-exec) for a child to be born
 * in (clone3's CLONE_INTO_CGROUP, pty_spawn_in): nothing to join, nothing
 * of it runs outside. -1 on v1, without cgroups, or when cg is NULL. */
int cgroup_clone_fd(const struct cgroup *cg);
/* A cgroup made ahead of need (cgroup_new with no limits, a stub already
 * in it) made the session name's: its folders renamed s-<name>-<n> and
 * lim written. 0; -1 when it cannot be (v2, a cpu limit on v1, a rename
 * refused; err set when the limits failed): the caller frees it. */
int cgroup_claim(struct cgroup *c, const char *name, const struct cg_limits *lim, char *err,
		 size_t errlen);
const struct cg_limits *cgroup_limits(const struct cgroup *cg);
int cgroup_usage(const struct cgroup *cg, struct cg_usage *u);
/* The processes in it (cgroup.procs): count, *out malloc'd (may be NULL). */
int cgroup_procs(const struct cgroup *cg, pid_t **out);
/* Signal every process in it but `spare` (0: none). KILL: until none is
 * left but spare (the cgroup frozen while it is read and signalled; v2's
 * cgroup.kill when nothing is spared). `leader` (0: none), the session's
 * process, is signalled directly while it has not joined yet (it joins
 * between fork and exec, after its session.open may have been answered).
 * The processes signalled, or -1. */
int cgroup_signal(struct cgroup *cg, int sig, pid_t spare, pid_t leader);
/* The session name it was made for. */
const char *cgroup_name(const struct cgroup *cg);
/* The hit counters now against the last poll's: session.limit for each
 * that grew (also on a timer, once a second, while session cgroups exist). */
void cgroup_poll(struct cgroup *cg);
/* A command begins: its counters. Its answer: cgroup_poll, and what they
 * grew by since (oom kills, forks refused at pids.max). */
void cgroup_mark(struct cgroup *cg);
void cgroup_check(struct cgroup *cg, long long *oom, long long *refused);
/* Before the loop goes: no more timer. */
void cgroup_stop(void);
/* across an upgrade in place: a session's cgroup written to the record, taken back */
cJSON *cgroup_record(const struct cgroup *cg);
struct cgroup *cgroup_adopt(const char *name, const cJSON *rec);
/* and what is no session's: the folders' count, closed sessions' folders
 * still held by the kernel */
cJSON *cgroup_handover_save(void);
void cgroup_handover_load(const cJSON *rec);

/* ---- the session's side (proctree.c) ---- */
/* A session's processes but its shell (a shell session's; a program
 * session's leader counts) and the shell's own subshells (prompt
 * expansions): from its cgroup, or from /proc. */
int session_leftovers(struct session *s);
/* SIGHUP+SIGCONT to what is left in the session of its ended leader: how many */
int session_hangup_rest(struct session *s);
/* Signal every process of the session (spare_shell: a shell session's
 * shell is left alone): the processes signalled. */
int session_signal_tree(struct session *s, int sig, int spare_shell);
/* A command begins in s (cmd_set): the counters its answer compares with. */
void session_cmd_begin(struct session *s);
/* A finished command's answer: left_running, killed "oom" and its limit,
 * forks_refused; the limit events before it. */
void session_cmd_extras(struct session *s, cJSON *ex);
/* "limits" (and with usage, "usage" when cgroups are in use) into a
 * session's object */
void session_limits_json(struct session *s, cJSON *o, int usage);
/* session.open's `limits` (may be NULL: the defaults) read into lim; -1 and
 * err when it is not one or cgroups cannot enforce it */
int session_limits_parse(const cJSON *j, struct cg_limits *lim, char *err, size_t errlen);
/* "512M", "1.5G", "1048576": bytes, or -1 */
long long cg_parse_size(const char *s);

#endif
