/* proctree.c — a session's processes, the session's side of its cgroup
 * (cgroup.c): who they are (its cgroup's cgroup.procs; without cgroups,
 * the process tree from /proc: the session id of its leader, the leader's
 * descendants, and what was re-parented to termd, the subreaper, with the
 * session's TERMD_SESSION in its environment), signalling all of them
 * (a shell session's shell spared when asked; KILL without cgroups stops
 * them first, pass after pass, so a fork bomb cannot outrun it), what a
 * command left running (its shell's own subshells, in the shell's process
 * group, do not count), the reasons a run gives (a process killed for
 * memory, forks refused at the pids limit), `limits` and `usage` in
 * session.list, and session.open's `limits` read against the defaults. */
#include "core.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STOP_PASSES 50

/* a shell session's shell while it lives (the one process a tree signal
 * may spare) */
static pid_t shell_of(struct session *s)
{
	return s->is_shell && s->pty.alive ? s->pty.pid : 0;
}

/* ---------------------------------------------------------- from /proc */

/* TERMD_SESSION=name in the process's environment */
static int env_names(pid_t pid, const char *name)
{
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/environ", (int)pid);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	buf_t b = {0};
	buf_reserve(&b, 65536);
	ssize_t n;
	while (b.len < 65536 && (n = read(fd, b.p + b.len, 65536 - b.len)) > 0)
		b.len += (size_t)n;
	close(fd);
	char want[TD_SESSION_NAME_MAX + 16];
	int wl = snprintf(want, sizeof want, "TERMD_SESSION=%s", name);
	int found = 0;
	for (size_t i = 0; i < b.len && !found; i += strlen(b.p + i) + 1) {
		size_t l = strnlen(b.p + i, b.len - i);
		found = l == (size_t)wl && memcmp(b.p + i, want, l) == 0;
	}
	buf_free(&b);
	return found;
}

/* Is v[i] one of s's processes? Its session id is the leader's, or the
 * leader is an ancestor, or its line of parents reaches termd (an orphan
 * re-parented to the subreaper) and it carries s's TERMD_SESSION. */
static int of_session(const struct proc_info *v, int n, const struct proc_info *pi,
		      struct session *s, pid_t self)
{
	pid_t leader = s->pty.pid;
	if (pi->pid == self || pi->pid <= 1)
		return 0;
	if (leader > 0 && pi->sid == leader)
		return 1;
	const struct proc_info *at = pi;
	for (int depth = 0; at && depth < 4096; depth++) {
		if (leader > 0 && at->pid == leader)
			return 1;
		if (at->ppid == self)
			return env_names(pi->pid, s->name);
		if (at->ppid <= 1)
			return 0;
		at = procscan_find(v, n, at->ppid);
	}
	return 0;
}

/* s's processes from /proc (zombies left out), not termd, not spare */
static int tree_list(struct session *s, pid_t spare, struct proc_info **out)
{
	struct proc_info *v;
	int n = procscan_all(&v), k = 0;
	if (n < 0)
		n = 0;   /* no /proc: none */
	pid_t self = getpid();
	struct proc_info *keep = n ? xmalloc((size_t)n * sizeof *keep) : NULL;
	for (int i = 0; i < n; i++)
		if (v[i].pid != spare && v[i].state != 'Z' && of_session(v, n, &v[i], s, self))
			keep[k++] = v[i];
	free(v);
	*out = keep;
	return k;
}

static int in_list(const pid_t *v, int n, pid_t p)
{
	for (int i = 0; i < n; i++)
		if (v[i] == p)
			return 1;
	return 0;
}

/* without cgroups: KILL stops every process first, again until a pass
 * finds none new (what they fork meanwhile is found next pass), then
 * kills them all; any other signal goes to each once */
static int tree_signal(struct session *s, int sig, pid_t spare)
{
	struct proc_info *l;
	int n;
	if (sig != SIGKILL) {
		n = tree_list(s, spare, &l);
		for (int i = 0; i < n; i++) {
			kill(l[i].pid, sig);
			if (sig == SIGHUP)
				kill(l[i].pid, SIGCONT);
		}
		free(l);
		return n;
	}
	pid_t *stopped = NULL;
	int ns = 0, cap = 0;
	for (int pass = 0; pass < STOP_PASSES; pass++) {
		n = tree_list(s, spare, &l);
		int fresh = 0;
		for (int i = 0; i < n; i++) {
			if (in_list(stopped, ns, l[i].pid))
				continue;
			if (ns == cap) {
				cap = cap ? 2 * cap : 64;
				stopped = xrealloc(stopped, (size_t)cap * sizeof *stopped);
			}
			stopped[ns++] = l[i].pid;
			kill(l[i].pid, SIGSTOP);
			fresh++;
		}
		free(l);
		if (!fresh)
			break;
	}
	for (int i = 0; i < ns; i++)
		kill(stopped[i], SIGKILL);
	free(stopped);
	return ns;
}

/* --------------------------------------------------------- the session */

int session_signal_tree(struct session *s, int sig, int spare_shell)
{
	pid_t spare = spare_shell ? shell_of(s) : 0;
	int n;
	if (s->cg) {
		pid_t leader = s->pty.alive ? s->pty.pid : 0;
		n = cgroup_signal(s->cg, sig, spare, leader);
		if (sig == SIGHUP)   /* a stopped process gets it once it runs */
			cgroup_signal(s->cg, SIGCONT, spare, leader);
	} else {
		if (!spare && s->pty.alive && s->pty.pid > 0)
			kill(-s->pty.pid, sig);   /* its process group first, as before cgroups */
		n = tree_signal(s, sig, spare);
	}
	return n < 0 ? 0 : n;
}

/* The session's leader (its shell) has ended: what is still in the
 * terminal's session gets SIGHUP and SIGCONT, as a hangup would give it.
 * The kernel hangs up only the foreground process group when the leader
 * dies; a job the shell had forked but not yet given the terminal (the
 * leader killed between its fork and its tcsetpgrp) would run on, orphaned
 * to termd, for as long as it likes. Only the session id counts here: what
 * left the session (setsid, nohup's daemons) is left alone. */
int session_hangup_rest(struct session *s)
{
	pid_t leader = s->pty.pid;
	if (leader <= 0)
		return 0;
	struct proc_info *v;
	int n = procscan_all(&v), k = 0;
	for (int i = 0; i < n; i++) {
		if (v[i].sid != leader || v[i].pid == leader || v[i].state == 'Z')
			continue;
		kill(v[i].pid, SIGHUP);
		kill(v[i].pid, SIGCONT);
		k++;
	}
	free(v);
	return k;
}

int session_leftovers(struct session *s)
{
	pid_t shell = shell_of(s);
	int left = 0;
	if (s->cg) {
		pid_t *p;
		int n = cgroup_procs(s->cg, &p);
		for (int i = 0; i < n; i++) {
			struct proc_info pi;
			if (p[i] == shell || p[i] == getpid())
				continue;
			/* the shell's own subshells (a prompt's $(...)) share its group */
			if (shell && procscan_stat(p[i], &pi) == 0 &&
			    (pi.pgrp == shell || pi.state == 'Z'))
				continue;
			left++;
		}
		free(p);
		return left;
	}
	struct proc_info *l;
	int n = tree_list(s, shell, &l);
	for (int i = 0; i < n; i++)
		if (!shell || l[i].pgrp != shell)
			left++;
	free(l);
	return left;
}

void session_cmd_begin(struct session *s)
{
	if (s->cg)
		cgroup_mark(s->cg);
}

void session_cmd_extras(struct session *s, cJSON *ex)
{
	if (s->cg) {
		long long oom, refused;
		cgroup_check(s->cg, &oom, &refused);   /* session.limit events come first */
		if (oom > 0) {
			const struct cg_limits *l = cgroup_limits(s->cg);
			cJSON_AddStringToObject(ex, "killed", "oom");
			if (l->memory)
				cJSON_AddNumberToObject(ex, "limit", (double)l->memory);
			else   /* a limit above the session's (the container's) */
				cJSON_AddNullToObject(ex, "limit");
		}
		if (refused > 0)
			cJSON_AddNumberToObject(ex, "forks_refused", (double)refused);
	}
	/* (without a cgroup only C-c asks: a /proc walk for every answer would
	 * cost a run more than the run) */
	if (s->is_shell && s->cg) {
		int left = session_leftovers(s);
		if (left > 0)
			cJSON_AddNumberToObject(ex, "left_running", left);
	}
}

static void add_num(cJSON *o, const char *k, double v)
{
	if (v >= 0)
		cJSON_AddNumberToObject(o, k, v);
	else
		cJSON_AddNullToObject(o, k);
}

void session_limits_json(struct session *s, cJSON *o, int usage)
{
	if (!cgroup_version()) {
		cJSON_AddNullToObject(o, "limits");
		return;
	}
	const struct cg_limits none = {0}, *l = s->cg ? cgroup_limits(s->cg) : &none;
	cJSON *lim = cJSON_AddObjectToObject(o, "limits");
	add_num(lim, "memory", l->memory ? (double)l->memory : -1);
	add_num(lim, "pids", l->pids ? (double)l->pids : -1);
	add_num(lim, "cpu", l->cpu > 0 ? l->cpu : -1);
	if (!usage)
		return;
	struct cg_usage u;
	if (!s->cg || cgroup_usage(s->cg, &u) < 0) {
		cJSON_AddNullToObject(o, "usage");
		return;
	}
	cJSON *us = cJSON_AddObjectToObject(o, "usage");
	add_num(us, "memory", (double)u.memory);
	add_num(us, "memory_peak", (double)u.memory_peak);
	add_num(us, "pids", (double)u.pids);
	add_num(us, "cpu_s", u.cpu_s >= 0 ? round(u.cpu_s * 1000.0) / 1000.0 : -1);
	add_num(us, "oom_kills", (double)u.oom_kills);
	add_num(us, "forks_refused", (double)u.pids_refused);
}

long long cg_parse_size(const char *s)
{
	char *end;
	errno = 0;
	if (!s || !isdigit((unsigned char)*s))
		return -1;
	double v = strtod(s, &end);
	if (errno || end == s || !isfinite(v))
		return -1;
	double mul = 1;
	switch (toupper((unsigned char)*end)) {
	case 'K': mul = 1024.0; end++; break;
	case 'M': mul = 1024.0 * 1024; end++; break;
	case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
	case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
	default: break;
	}
	if (mul > 1 && (end[0] == 'i' || end[0] == 'I') && (end[1] == 'B' || end[1] == 'b'))
		end += 2;
	else if (*end == 'B' || *end == 'b')
		end++;
	v *= mul;
	if (*end || v >= 9.2e18)
		return -1;
	return (long long)v;
}

#define MEMORY_MIN (1LL << 20)
#define PIDS_MAX   4194304
#define CPU_MAX    4096.0

int session_limits_parse(const cJSON *j, struct cg_limits *lim, char *err, size_t errlen)
{
	/* the defaults, where they can be enforced */
	lim->memory = cgroup_can_limit("memory") ? opts.session_memory_max : 0;
	lim->pids = cgroup_can_limit("pids") ? opts.session_pids_max : 0;
	lim->cpu = cgroup_can_limit("cpu") ? opts.session_cpu_max : 0;
	if (!j || cJSON_IsNull(j))
		return 0;
	if (!cJSON_IsObject(j)) {
		snprintf(err, errlen, "'limits' must be an object {memory, pids, cpu}");
		return -1;
	}
	const cJSON *e;
	cJSON_ArrayForEach(e, j) {
		const char *k = e->string ? e->string : "";
		int mem = !strcmp(k, "memory"), pids = !strcmp(k, "pids"), cpu = !strcmp(k, "cpu");
		if (!mem && !pids && !cpu) {
			snprintf(err, errlen, "unknown limit '%.64s' (limits are memory, pids and cpu)", k);
			return -1;
		}
		if (cJSON_IsNull(e)) {   /* none, whatever the default */
			if (mem)
				lim->memory = 0;
			else if (pids)
				lim->pids = 0;
			else
				lim->cpu = 0;
			continue;
		}
		if (!cgroup_can_limit(k)) {
			snprintf(err, errlen, "a %s limit needs cgroups with the %s controller, and termd "
				 "has none here (%s)", k, k, cgroup_version() ? "not mounted or not writable"
				 : cgroup_why());
			return -1;
		}
		if (mem) {
			double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
			long long b = cJSON_IsString(e) ? cg_parse_size(e->valuestring)
				      : v >= 0 && v == floor(v) && v < 9.2e18 ? (long long)v : -1;
			if (b < MEMORY_MIN) {
				snprintf(err, errlen, "limits.memory is bytes (an integer, or a string such "
					 "as \"512M\" or \"2G\"), at least 1M");
				return -1;
			}
			lim->memory = b;
		} else if (pids) {
			double v = cJSON_IsNumber(e) ? e->valuedouble : 0;
			if (v < 1 || v > PIDS_MAX || v != floor(v)) {
				snprintf(err, errlen, "limits.pids is an integer from 1 to %d", PIDS_MAX);
				return -1;
			}
			lim->pids = (long long)v;
		} else {
			double v = cJSON_IsNumber(e) ? e->valuedouble : 0;
			if (!(v >= 0.01 && v <= CPU_MAX)) {
				snprintf(err, errlen, "limits.cpu is a fraction of one core from 0.01 to %g "
					 "(0.5: half a core)", CPU_MAX);
				return -1;
			}
			lim->cpu = v;
		}
	}
	return 0;
}
