/* session.c — named sessions: the registry (open, find, respawn, close's
 * destroy, stop and free at shutdown), each session's process on a pty
 * (pty.c; a pipe session's on pipes) with termd's shell integration, its screen (screen.c) and the
 * shell-integration scanner (shellint.c) fed from the pty's output, and
 * the fan-out of what happens to a session to the modules that listen
 * (session_listen): the process started, what is written to it, raw
 * output, text without termd's marks, marks, title, resize, the
 * process's end, and the session going away. On cgroup v1 a new shell
 * session takes a spare: a process forked ahead of need, already in a
 * cgroup of its own that becomes the session's. */
#include "core.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>


static int rc_written;
static const struct session_exec *exec_next;   /* session_exec_next's */

void session_exec_next(const struct session_exec *x)
{
	exec_next = x;
}


struct session *session_find(const char *name)
{
	for (struct session *s = srv.sessions; s; s = s->next)
		if (strcmp(s->name, name) == 0)
			return s;
	return NULL;
}

cJSON *session_names_json(void)
{
	cJSON *a = cJSON_CreateArray();
	for (struct session *s = srv.sessions; s; s = s->next)
		cJSON_AddItemToArray(a, cJSON_CreateString(s->name));
	return a;
}

static void vt_answer(const char *data, size_t n, void *user)
{
	struct session *s = user;
	if (s->is_pipe)   /* the screen is termd's view: its answers are not the program's input */
		return;
	session_write(s, data, n);
}

/* ------------------------------------------------------------ listeners */

#define MAX_LISTENERS 16
static const struct session_listener *listeners[MAX_LISTENERS];
static size_t nlisteners;

void session_listen(const struct session_listener *l)
{
	if (nlisteners == MAX_LISTENERS) {   /* a start-up wiring error */
		log_warn("session_listen: more than %d listeners", MAX_LISTENERS);
		abort();
	}
	listeners[nlisteners++] = l;
}

void session_mark(struct session *s, enum si_event ev, const char *data, size_t n, int code)
{
	for (size_t i = 0; i < nlisteners; i++)
		if (listeners[i]->mark)
			listeners[i]->mark(s, ev, data, n, code);
}

void session_gone(struct session *s)
{
	for (size_t i = 0; i < nlisteners; i++)
		if (listeners[i]->gone)
			listeners[i]->gone(s);
}

static void session_exited(struct session *s)
{
	if (!s->pty.pipes)
		session_hangup_rest(s);   /* the terminal is gone for all of them */
	for (size_t i = 0; i < nlisteners; i++)
		if (listeners[i]->exit)
			listeners[i]->exit(s);
}

static void session_resized(struct session *s)
{
	for (size_t i = 0; i < nlisteners; i++)
		if (listeners[i]->resize)
			listeners[i]->resize(s);
}

/* The shell-integration scanner's events: text (the output without
 * termd's marks) and marks go to the listeners; titles to the screen and
 * its viewers. */
static void on_shellint(void *user, enum si_event ev, const char *data, size_t len, int code)
{
	struct session *s = user;
	switch (ev) {
	case SI_TEXT:
		for (size_t i = 0; i < nlisteners; i++)
			if (listeners[i]->text)
				listeners[i]->text(s, data, len);
		break;
	case SI_TITLE:
		screen_set_title(s->screen, data, len);
		for (size_t i = 0; i < nlisteners; i++)
			if (listeners[i]->title)
				listeners[i]->title(s, data, len);
		break;
	default:
		session_mark(s, ev, data, len, code);
		break;
	}
}

const char *session_shell_path(void)
{
	if (opts.shell)
		return opts.shell;
	if (access("/bin/bash", X_OK) == 0)
		return "/bin/bash";
	return "/bin/sh";
}

/* An environment being made: NULL-terminated "k=v" strings (malloc'd
 * copies). */
struct envl {
	char **v;
	size_t n, cap;
};

static ssize_t envl_find(const struct envl *e, const char *k)
{
	size_t kl = strlen(k);
	for (size_t i = 0; i < e->n; i++)
		if (strncmp(e->v[i], k, kl) == 0 && e->v[i][kl] == '=')
			return (ssize_t)i;
	return -1;
}

static const char *envl_get(const struct envl *e, const char *k)
{
	ssize_t i = envl_find(e, k);
	return i < 0 ? NULL : e->v[i] + strlen(k) + 1;
}

static void envl_unset(struct envl *e, const char *k)
{
	ssize_t i = envl_find(e, k);
	if (i < 0)
		return;
	free(e->v[i]);
	e->v[i] = e->v[--e->n];
	e->v[e->n] = NULL;
}

/* overwrite 0: only when unset or empty */
static void envl_set(struct envl *e, const char *k, const char *val, int overwrite)
{
	const char *cur = envl_get(e, k);
	if (cur && (!overwrite && *cur))
		return;
	envl_unset(e, k);
	if (e->n + 2 > e->cap) {
		e->cap = e->cap ? e->cap * 2 : 64;
		e->v = xrealloc(e->v, e->cap * sizeof *e->v);
	}
	size_t kl = strlen(k), vl = strlen(val);
	char *kv = xmalloc(kl + vl + 2);
	memcpy(kv, k, kl);
	kv[kl] = '=';
	memcpy(kv + kl + 1, val, vl + 1);
	e->v[e->n++] = kv;
	e->v[e->n] = NULL;
}

static void envl_free(struct envl *e)
{
	for (size_t i = 0; i < e->n; i++)
		free(e->v[i]);
	free(e->v);
}

/* A session's process's environment: termd's, with what a session
 * sets (env from session.open, the shell integration's nonce and files) */
static void session_env(const struct session *s, const cJSON *spawn_env, struct envl *e)
{
	extern char **environ;
	for (char **p = environ; p && *p; p++) {
		char *eq = strchr(*p, '=');
		if (!eq)
			continue;
		char *k = xstrndup(*p, (size_t)(eq - *p));
		envl_set(e, k, eq + 1, 1);
		free(k);
	}
	envl_set(e, "TERM", "xterm-256color", 1);
	envl_set(e, "PAGER", "cat", 0);
	envl_set(e, "GIT_PAGER", "cat", 0);
	envl_set(e, "LANG", "C.UTF-8", 0);
	envl_set(e, "TERMD_SESSION", s->name, 1);
	envl_unset(e, "TERMD_TOKEN");
	if (spawn_env && cJSON_IsObject(spawn_env)) {
		const cJSON *v;
		cJSON_ArrayForEach(v, spawn_env) {
			if (cJSON_IsString(v) && v->string)
				envl_set(e, v->string, v->valuestring, 1);
		}
	}
	if (!s->is_shell || s->spawn_exec)
		return;
	envl_set(e, "TERMD_NONCE", shellint_nonce(s->si), 1);
	if (s->shell_kind != SHELL_BASH) {
		const char *user_env = envl_get(e, "ENV");
		if (user_env) {
			char *u = xstrdup(user_env);
			envl_set(e, "TERMD_USER_ENV", u, 1);
			free(u);
		}
		char rc[4200];
		snprintf(rc, sizeof rc, "%s/termd.sh", srv.rundir);
		envl_set(e, "ENV", rc, 1);
	}
}

/* the shell's argv (a -c command, or an interactive shell with termd's
 * rc file), into v (5 entries at most, then NULL), rc its buffer */
static void session_argv(const struct session *s, const char *v[6], char *rc, size_t rcn)
{
	const char *sh = session_shell_path();
	v[0] = sh;
	v[1] = v[2] = v[3] = v[4] = v[5] = NULL;
	if (s->is_shell && s->shell_kind == SHELL_BASH) {
		snprintf(rc, rcn, "%s/termd.bash", srv.rundir);
		v[1] = "--noprofile", v[2] = "--rcfile", v[3] = rc, v[4] = "-i";
	} else if (s->is_shell) {
		v[1] = "-i";
	} else {
		v[1] = "-c", v[2] = s->command;
	}
}

/* "termd: <what><arg>: <errno's text>" on stderr, async-signal-safe (a
 * clone3 child has no stdio to lock, nor gettext for strerror) */
static void child_say(const char *what, const char *arg, int e)
{
#ifdef __GLIBC__
	const char *d = strerrordesc_np(e);
#else
	const char *d = strerror(e);   /* musl's: a static table, no locale */
#endif
	const char *part[] = {"termd: ", what, arg, ": ", d ? d : "error", "\n"};
	for (size_t i = 0; i < sizeof part / sizeof part[0]; i++)
		if (write(2, part[i], strlen(part[i])) < 0)
			return;
}

/* pty.c's child hook: the environment and exec. Never returns.
 * Async-signal-safe where it was born in its cgroup (pty_spawn_in). */
static void child_exec(void *owner)
{
	struct session *s = owner;
	/* before anything runs: all it starts is inside (born there: only
	 * oom_score_adj) */
	cgroup_child_join(s->pty.in_cgroup ? NULL : s->cg);
	extern char **environ;
	if (s->spawn_envp) {
		environ = s->spawn_envp;
	} else {
		struct envl e = {0};
		session_env(s, s->spawn_env, &e);
		environ = e.v;
	}
	if (s->cwd && chdir(s->cwd) != 0)
		child_say("cannot cd to ", s->cwd, errno);
	const struct session_exec *x = s->spawn_exec;
	if (x) {   /* the program itself, as the user: no shell, no setpriv */
		/* the kernel's calls: glibc's setxid would signal termd's
		 * other threads, which a clone3 child does not have */
		if (x->as_user && (syscall(SYS_setgroups, (size_t)x->ngroups, x->groups) != 0 ||
				   syscall(SYS_setresgid, x->gid, x->gid, x->gid) != 0 ||
				   syscall(SYS_setresuid, x->uid, x->uid, x->uid) != 0)) {
			char uid[24];
			snprintf(uid, sizeof uid, "%u", (unsigned)x->uid);
			child_say("cannot switch to uid ", uid, errno);
			_exit(126);
		}
		execvp(x->argv[0], x->argv);
		int e = errno;
		child_say("cannot run ", x->argv[0], e);
		_exit(e == ENOENT || e == ENOTDIR ? 127 : 126);
	}
	const char *v[6];
	char rc[4200];
	session_argv(s, v, rc, sizeof rc);
	execv(v[0], (char *const *)v);
	child_say("cannot run ", v[0], errno);
	_exit(127);
}

/* A pipe session's screen is fed when read, not byte by byte as its
 * output comes (a program printing megabytes nobody looks at costs no
 * terminal emulation). What is due is kept while it can still show: the
 * last scrollback + rows + 1 lines (older lines would have scrolled out of
 * the scrollback by then), cut at a line's start; the screen and its
 * scrollback come out as if fed every byte, unless a program moves the
 * cursor back up over more lines than that (or set a colour or mode in a
 * line dropped that still holds: it is not carried). Lines too long to keep (over
 * DUE_MAX bytes in all) are fed at once: the screen is exact, as before. */
#define DUE_MAX ((size_t)4 << 20)

static void due_trim(struct session *s)
{
	buf_t *d = &s->screen_due;
	size_t keep = (size_t)opts.scrollback + (size_t)s->rows + 1, off = 0;
	if (s->screen_due_lines <= 4 * keep && d->len <= DUE_MAX)
		return;   /* (trimmed now and then: a byte is moved less than once) */
	while (s->screen_due_lines > keep) {
		const char *nl = memchr(d->p + off, '\n', d->len - off);
		off = (size_t)(nl - d->p) + 1;
		s->screen_due_lines--;
	}
	memmove(d->p, d->p + off, d->len - off);
	d->len -= off;
	if (d->len > DUE_MAX)
		session_screen(s);
	else if (d->cap > 2 * DUE_MAX) {   /* a burst grew it: give memory back */
		d->p = xrealloc(d->p, d->len + 1);
		d->cap = d->len + 1;
	}
}

struct screen *session_screen(struct session *s)
{
	if (s->screen_due.len) {
		screen_feed(s->screen, s->screen_due.p, s->screen_due.len);
		if (s->screen_due.cap > 65536)
			buf_free(&s->screen_due);
		else
			buf_reset(&s->screen_due);
		s->screen_due_lines = 0;
	}
	return s->screen;
}

/* pty.c's output hook: the screen, the scanner (text and marks to the
 * listeners), then the raw bytes to the listeners (viewers). A pipe
 * session's bytes go to the stream listeners as they are, then on the same
 * way with each \n as \r\n: a terminal shows them as lines (its screen
 * fed when read). */
static void on_output(void *owner, int stream, const char *data, size_t n)
{
	struct session *s = owner;
	s->last_output_us = mono_us();
	if (s->is_pipe) {
		for (size_t i = 0; i < nlisteners; i++)
			if (listeners[i]->stream)
				listeners[i]->stream(s, stream, data, n);
		buf_t *d = &s->screen_due;
		size_t at = d->len;
		buf_reserve(d, n + n / 8 + 16);
		for (const char *p = data, *end = data + n; p < end;) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			size_t k = (size_t)((nl ? nl : end) - p);
			buf_append(d, p, k);
			p += k;
			if (nl) {
				buf_append(d, "\r\n", 2);
				s->screen_due_lines++;
				p++;
			}
		}
		shellint_feed(s->si, d->p + at, d->len - at);
		for (size_t i = 0; i < nlisteners; i++)
			if (listeners[i]->output)
				listeners[i]->output(s, d->p + at, d->len - at);
		due_trim(s);
		return;
	}
	screen_feed(s->screen, data, n);
	shellint_feed(s->si, data, n);
	for (size_t i = 0; i < nlisteners; i++)
		if (listeners[i]->output)
			listeners[i]->output(s, data, n);
}

/* pty.c's end hook: reaped and drained, the session's process has ended. */
static void on_ended(void *owner)
{
	struct session *s = owner;
	s->state = SH_DEAD;
	lws_sul_cancel(&s->ready_sul);
	log_debug("session %s: exited (code %d, signal %d)", s->name, s->pty.exit_code,
		  s->pty.exit_signal);
	session_exited(s);
	/* a closed one is freed here, or by its KILL timer if that is still to
	 * run; a shell (main included) starts again on the next action */
	if (s->closing && s->close_killed)
		session_destroy(s);
}

static void on_read_done(void *owner, int full)
{
	fair_read(owner, full);
}

static const struct pty_hooks pty_hooks = {
	.output = on_output,
	.read_done = on_read_done,
	.ended = on_ended,
	.child = child_exec,
};

/* ----------------------------------------------------------- spares
 * On cgroup v1 a process's first move into a cgroup after a quiet spell
 * waits out an RCU grace period (5-15 ms, in the kernel, for whoever
 * moves; and every fork on the machine waits behind a move): a new shell
 * session would wait it out before its shell starts. So stubs are forked
 * ahead of need, each joining a spare cgroup of its own (waiting out the
 * grace there) and waiting; a new session (on a pty or on pipes: OpenHands
 * V1 and agent-sandbox open one per command) takes one: the folder
 * renamed to the session's, its limits written, then the stub gets its
 * terminal (or its three pipe ends) and plan and execs (pty_spawn_stub). Nothing runs outside
 * the cgroup, and the limits are there before the shell's first
 * instruction (a shell's, or a command's: `sh -c` execs it). Made
 * again once sessions have not been opened for a while (a move then
 * would hold up the new sessions' forks). */
#define SPARES 3
#define SPARE_QUIET_US 50000u    /* made again after this long without a new session */

static struct spare {
	pid_t pid;
	int ctl;
	int ready;   /* the stub said it is in its cgroup (PTY_STUB_READY) */
	struct cgroup *cg;
} spares[SPARES];
static int spares_stopped;
static lws_sorted_usec_list_t spare_sul;

/* TERMD_TEST_SPARE_DELAY_MS (tests only): a stub waits this long before
 * joining its spare cgroup, so a session opened meanwhile finds it not
 * ready (read once, in termd; -1 not yet) */
static long spare_delay_ms = -1;

static int spare_join(void *arg)
{
	if (spare_delay_ms > 0) {
		struct timespec ts = {spare_delay_ms / 1000, (spare_delay_ms % 1000) * 1000000L};
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
		}
	}
	return cgroup_child_join(arg);
}

static void spare_forget(struct spare *sp)
{
	if (sp->ctl > 0)
		close(sp->ctl);
	memset(sp, 0, sizeof *sp);
}

/* A stub that ends without having said it is ready failed to start
 * (could not join its cgroup, or its exec ran something else: under
 * valgrind /proc/self/exe is valgrind's own tool). After SPARE_FAILS such
 * in a row no more are made: sessions fork their own child. */
#define SPARE_FAILS 3
static int spare_fails;

static void spare_failed(void)
{
	if (++spare_fails == SPARE_FAILS && !spares_stopped) {
		spares_stopped = 1;
		log_warn("spare session processes do not start; sessions fork their own");
	}
}

static void spare_died(void *arg, pid_t pid, int status)
{
	(void)pid, (void)status;
	struct spare *sp = arg;
	char c = 0;
	if (!sp->ready && !(recv(sp->ctl, &c, 1, MSG_DONTWAIT) == 1 && c == PTY_STUB_READY))
		spare_failed();
	struct cgroup *cg = sp->cg;
	spare_forget(sp);
	cgroup_free(cg);
}

static void spares_make(lws_sorted_usec_list_t *sul)
{
	(void)sul;
	if (spare_delay_ms < 0) {
		const char *d = getenv("TERMD_TEST_SPARE_DELAY_MS");
		spare_delay_ms = d ? strtol(d, NULL, 10) : 0;
	}
	for (int i = 0; i < SPARES && !spares_stopped; i++) {
		struct spare *sp = &spares[i];
		if (sp->pid)
			continue;
		struct cg_limits none = {0};
		char err[512];
		struct cgroup *cg = cgroup_new("spare", &none, err, sizeof err);
		if (!cg)
			return;
		int ctl = -1;
		pid_t pid = pty_stub_fork(&ctl, spare_join, cg);
		if (pid < 0) {
			cgroup_free(cg);
			return;
		}
		sp->pid = pid;
		sp->ctl = ctl;
		sp->cg = cg;
		child_watch(pid, spare_died, sp);
	}
}

/* a session was opened: spares again once none has been for a while */
static void spares_later(void)
{
	const char *v = cgroup_version();
	if (!spares_stopped && v && strcmp(v, "v1") == 0)
		server_timer(&spare_sul, spares_make, SPARE_QUIET_US);
}

static void spare_drop(struct spare *sp)
{
	child_unwatch(sp->pid);
	struct cgroup *cg = sp->cg;
	spare_forget(sp);   /* its end of the socket closed: the stub ends */
	cgroup_free(cg);    /* and is killed with its folder */
}

void session_spare_stop(void)
{
	spares_stopped = 1;
	lws_sul_cancel(&spare_sul);
	for (int i = 0; i < SPARES; i++)
		if (spares[i].pid)
			spare_drop(&spares[i]);
}

/* Has the stub said it is in its cgroup? Not yet: it may still be waiting
 * out the move (taken now, its folder renamed under it, it would fail to
 * join and the session's processes would run outside any cgroup: a close
 * would not find them to kill). One that could not join is dropped. */
static int spare_ready(struct spare *sp)
{
	char c = 0;
	ssize_t r;
	if (!sp->ready) {
		r = recv(sp->ctl, &c, 1, MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return 0;
		if (r != 1 || c != PTY_STUB_READY) {
			spare_failed();
			spare_drop(sp);
			return 0;
		}
		sp->ready = 1;
		spare_fails = 0;
	}
	/* still there? One that ended since (its exit not yet seen) has
	 * its end of the socket closed */
	r = recv(sp->ctl, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 1;
	spare_drop(sp);
	return 0;
}

/* a spare for a session with lim (on a pty or pipes): its cgroup made the
 * session's (s->cg), its pid; 0 when there is none to take */
static pid_t spare_take(struct session *s, const struct cg_limits *lim, int *ctl)
{
	struct spare *sp = NULL;
	if (!lim || s->spawn_exec)
		return 0;
	for (int i = 0; i < SPARES && !sp; i++)
		if (spares[i].pid && spare_ready(&spares[i]))
			sp = &spares[i];
	if (!sp)
		return 0;
	char err[512];
	pid_t pid = sp->pid;
	struct cgroup *cg = sp->cg;
	child_unwatch(pid);
	*ctl = sp->ctl;
	sp->ctl = -1;
	spare_forget(sp);
	if (cgroup_claim(cg, s->name, lim, err, sizeof err) < 0) {
		close(*ctl);
		cgroup_free(cg);   /* the stub with it; the session makes its own */
		return 0;
	}
	s->cg = cg;
	return pid;
}

/* the stub's plan (pty.h): cwd, argv, envp */
static void spare_plan(const struct session *s, const cJSON *env, buf_t *b)
{
	buf_puts(b, s->cwd ? s->cwd : "");
	buf_putc(b, 0);
	const char *v[6];
	char rc[4200], num[24];
	session_argv(s, v, rc, sizeof rc);
	int argc = 0;
	while (v[argc])
		argc++;
	snprintf(num, sizeof num, "%d", argc);
	buf_append(b, num, strlen(num) + 1);
	for (int i = 0; i < argc; i++)
		buf_append(b, v[i], strlen(v[i]) + 1);
	struct envl e = {0};
	session_env(s, env, &e);
	snprintf(num, sizeof num, "%zu", e.n);
	buf_append(b, num, strlen(num) + 1);
	for (size_t i = 0; i < e.n; i++)
		buf_append(b, e.v[i], strlen(e.v[i]) + 1);
	envl_free(&e);
}

static int spawn(struct session *s, const cJSON *env, int mode, pid_t stub, int ctl, char *err,
		 size_t errlen)
{
	if (!rc_written) {
		if (shellint_write_rc(srv.rundir) < 0) {
			snprintf(err, errlen, "cannot write the shell integration files");
			return -1;
		}
		rc_written = 1;
	}
	const char *sh = session_shell_path();
	const char *base = strrchr(sh, '/');
	base = base ? base + 1 : sh;
	s->shell_kind = strcmp(base, "bash") == 0 ? SHELL_BASH : SHELL_SH;
	s->spawn_env = env;   /* read by child_exec in the child only */
	int r;
	if (stub) {
		buf_t plan = {0};
		spare_plan(s, env, &plan);
		r = pty_spawn_stub(&s->pty, stub, ctl, mode, plan.p, plan.len, s->cols, s->rows,
				   &pty_hooks, s, err, errlen);
		buf_free(&plan);
		if (r < 0) {
			kill(stub, SIGKILL);   /* reaped by the loop's SIGCHLD */
		}
	} else {
		/* cgroup v2: born in its cgroup (no move, nothing outside);
		 * its environment made here, the child may not malloc */
		int cgfd = cgroup_clone_fd(s->cg);
		struct envl e = {0};
		if (cgfd >= 0) {
			session_env(s, env, &e);
			s->spawn_envp = e.v;
		}
		r = pty_spawn_in(&s->pty, cgfd, mode, s->cols, s->rows, &pty_hooks, s, err, errlen);
		if (cgfd >= 0) {
			close(cgfd);
			envl_free(&e);
			s->spawn_envp = NULL;
		}
	}
	s->spawn_env = NULL;
	s->spawn_exec = NULL;
	if (r < 0)
		return -1;
	s->state = s->is_shell ? SH_STARTING : SH_RUNNING;
	s->spawned_us = mono_us();
	s->ready = 0;
	s->line_clean = 0;
	log_debug("session %s: pid %d on %s", s->name, (int)s->pty.pid, s->pty.slave);
	for (size_t i = 0; i < nlisteners; i++)
		if (listeners[i]->started)
			listeners[i]->started(s);
	return 0;
}

static struct session *open_kind(const char *name, const char *command, const char *cwd,
				  const cJSON *env, int mode, int cols, int rows,
				  const struct cg_limits *lim, td_err *code, char *err, size_t errlen)
{
	*code = TD_ERR_INTERNAL;
	if ((size_t)srv.nsessions >= opts.max_sessions) {
		*code = TD_ERR_TOO_LARGE;
		snprintf(err, errlen, "termd already has %d sessions, its limit (--max-sessions); "
			 "close one first", srv.nsessions);
		return NULL;
	}
	struct session *s = xcalloc(1, sizeof *s);
	snprintf(s->name, sizeof s->name, "%s", name);
	s->command = command ? xstrdup(command) : NULL;
	s->is_shell = command == NULL;
	s->is_pipe = mode != PTY_TERMINAL;
	s->cols = cols > 0 ? cols : TD_DEFAULT_COLS;
	s->rows = rows > 0 ? rows : TD_DEFAULT_ROWS;
	s->pty.fd = s->pty.err_fd = s->pty.in_fd = s->pty.hold_fd = -1;
	s->screen = screen_new(s->rows, s->cols);
	screen_set_scrollback(s->screen, opts.scrollback);
	screen_set_output(s->screen, vt_answer, s);
	s->si = shellint_new(on_shellint, s);
	s->cwd = xstrdup(cwd ? cwd : opts.cwd);
	struct cg_limits defaults;
	err[0] = 0;
	if (!lim && session_limits_parse(NULL, &defaults, err, errlen) == 0)
		lim = &defaults;
	s->spawn_exec = exec_next;   /* its first spawn only */
	exec_next = NULL;
	int ctl = -1;
	pid_t stub = spare_take(s, lim, &ctl);
	if (!stub)
		s->cg = lim ? cgroup_new(name, lim, err, errlen) : NULL;
	else
		err[0] = 0;
	if ((!s->cg && err[0]) || spawn(s, env, mode, stub, ctl, err, errlen) < 0) {
		cgroup_free(s->cg);
		screen_free(s->screen);
		shellint_free(s->si);
		free(s->cwd);
		free(s->command);
		free(s);
		return NULL;
	}
	/* append to keep creation order */
	struct session **pp = &srv.sessions;
	while (*pp)
		pp = &(*pp)->next;
	*pp = s;
	srv.nsessions++;
	spares_later();
	return s;
}

struct session *session_open(const char *name, const char *command, const char *cwd,
			     const cJSON *env, int cols, int rows, td_err *code, char *err,
			     size_t errlen)
{
	return open_kind(name, command, cwd, env, PTY_TERMINAL, cols, rows, NULL, code, err, errlen);
}

struct session *session_open_with(const char *name, const char *command, const char *cwd,
				  const cJSON *env, int mode, int cols, int rows,
				  const struct cg_limits *lim, td_err *code, char *err,
				  size_t errlen)
{
	if (mode != PTY_TERMINAL && (!command || !*command)) {
		*code = TD_ERR_BAD_REQUEST;
		snprintf(err, errlen, "a pipe session runs a command");
		return NULL;
	}
	return open_kind(name, command, cwd, env, mode, cols, rows, lim, code, err, errlen);
}

struct session *session_open_pipe(const char *name, const char *command, const char *cwd,
				  const cJSON *env, int with_stdin, int cols, int rows,
				  td_err *code, char *err, size_t errlen)
{
	if (!command || !*command) {
		*code = TD_ERR_BAD_REQUEST;
		snprintf(err, errlen, "a pipe session runs a command");
		return NULL;
	}
	return open_kind(name, command, cwd, env, with_stdin ? PTY_PIPES_STDIN : PTY_PIPES,
			 cols, rows, NULL, code, err, errlen);
}

/* A session handed over by the termd this one replaced (handover.c): rec
 * is its entry of the record. Its screen is rebuilt from the snapshot the
 * old termd rendered. */
struct session *session_adopt(const cJSON *rec, char *err, size_t errlen)
{
	const cJSON *name = cJSON_GetObjectItem(rec, "name"), *cmd = cJSON_GetObjectItem(rec, "command");
	const cJSON *cwd = cJSON_GetObjectItem(rec, "cwd"), *snap = cJSON_GetObjectItem(rec, "screen");
#define REC_INT(k) (cJSON_IsNumber(cJSON_GetObjectItem(rec, k)) ? \
		    (int)cJSON_GetObjectItem(rec, k)->valuedouble : -1)
	int pipes = REC_INT("pipe") == 1;
	if (!cJSON_IsString(name) || REC_INT("pid") <= 0 || (REC_INT("fd") < 0 && !pipes)) {
		snprintf(err, errlen, "a session in the record lacks its name, pid or fd");
		return NULL;
	}
	struct session *s = xcalloc(1, sizeof *s);
	snprintf(s->name, sizeof s->name, "%s", name->valuestring);
	s->command = cJSON_IsString(cmd) ? xstrdup(cmd->valuestring) : NULL;
	s->is_shell = s->command == NULL;
	s->is_pipe = pipes;
	s->shell_kind = REC_INT("shell_kind") == SHELL_SH ? SHELL_SH : SHELL_BASH;
	s->cols = REC_INT("cols") > 0 ? REC_INT("cols") : TD_DEFAULT_COLS;
	s->rows = REC_INT("rows") > 0 ? REC_INT("rows") : TD_DEFAULT_ROWS;
	s->screen = screen_new(s->rows, s->cols);
	screen_set_scrollback(s->screen, opts.scrollback);
	/* the scrollback's lines first, scrolled off the screen (rows - 1 more
	 * line ends), then the screen drawn over it */
	const cJSON *sb = cJSON_GetObjectItem(rec, "scrollback");
	if (cJSON_IsString(sb) && sb->valuestring[0]) {
		buf_t b = {0};
		for (const char *p = sb->valuestring; *p; p++) {
			if (*p == '\n')
				buf_puts(&b, "\r\n");
			else if ((unsigned char)*p >= 0x20 && *p != 0x7f)
				buf_putc(&b, *p);
		}
		for (int i = 1; i < s->rows; i++)
			buf_puts(&b, "\r\n");
		screen_feed(s->screen, b.p, b.len);
		buf_free(&b);
	}
	if (cJSON_IsString(snap))
		screen_feed(s->screen, snap->valuestring, strlen(snap->valuestring));
	screen_set_output(s->screen, vt_answer, s);   /* after: no answers to the snapshot */
	s->si = shellint_new(on_shellint, s);
	const cJSON *nonce = cJSON_GetObjectItem(rec, "nonce");   /* the shell's marks carry it */
	if (cJSON_IsString(nonce))
		shellint_set_nonce(s->si, nonce->valuestring);
	s->cwd = xstrdup(cJSON_IsString(cwd) ? cwd->valuestring : opts.cwd);
	if (pty_adopt(&s->pty, pipes, REC_INT("pid"), REC_INT("fd"), REC_INT("hold_fd"),
		      REC_INT("err_fd"), REC_INT("in_fd"),
		      cJSON_IsNumber(cJSON_GetObjectItem(rec, "wait_status")) ? REC_INT("wait_status") : -1,
		      &pty_hooks, s) < 0)
		snprintf(err, errlen, "session %s: cannot watch its fds", s->name);
	const cJSON *cg = cJSON_GetObjectItem(rec, "cgroup");
	if (cJSON_IsObject(cg))   /* the same folders, limits and counters */
		s->cg = cgroup_adopt(s->name, cg);
	s->spawned_us = mono_us();
	s->prompt_us = s->spawned_us;   /* (a handed-over shell: since the upgrade) */
	for (size_t i = 0; i < nlisteners; i++)
		if (listeners[i]->started)
			listeners[i]->started(s);
	int st = REC_INT("state");
	s->state = st >= SH_STARTING && st <= SH_RUNNING ? (enum shell_state)st : SH_RUNNING;
	s->ready = REC_INT("ready") == 1;
	s->cont = REC_INT("cont") == 1;
#undef REC_INT
	struct session **pp = &srv.sessions;
	while (*pp)
		pp = &(*pp)->next;
	*pp = s;
	srv.nsessions++;
	return s;
}

int session_close_stdin(struct session *s)
{
	return pty_close_input(&s->pty);
}

int session_respawn(struct session *s, char *err, size_t errlen)
{
	shellint_free(s->si);
	s->si = shellint_new(on_shellint, s);
	buf_reset(&s->pty.inq);
	free(s->cwd);
	s->cwd = xstrdup(opts.cwd);
	return spawn(s, NULL, PTY_TERMINAL, 0, -1, err, errlen);
}

void session_write(struct session *s, const void *data, size_t len)
{
	s->line_clean = 0;   /* whatever it is, it may be left on the line */
	for (size_t i = 0; i < nlisteners; i++)
		if (listeners[i]->input)
			listeners[i]->input(s, data, len);
	pty_write(&s->pty, data, len);
	fair_typed(s);
}

void session_resize(struct session *s, int cols, int rows)
{
	if (cols < 2 || rows < 1 || cols > 1000 || rows > 1000)
		return;
	if (cols == s->cols && rows == s->rows)
		return;
	screen_resize(session_screen(s), rows, cols);   /* what came before, at the old size */
	s->cols = cols;
	s->rows = rows;
	pty_resize(&s->pty, cols, rows);
	session_resized(s);
}

pid_t session_fg_pid(struct session *s)
{
	return pty_fg_pid(&s->pty);
}

static void session_free(struct session *s)
{
	pty_release(&s->pty);
	cgroup_free(s->cg);   /* what the session left running ends with it */
	lws_sul_cancel(&s->ready_sul);
	lws_sul_cancel(&s->close_sul);
	session_gone(s);
	screen_free(s->screen);
	buf_free(&s->screen_due);
	shellint_free(s->si);
	buf_free(&s->pty.inq);
	buf_free(&s->typed);
	free(s->cwd);
	free(s->command);
	free(s);
}

void session_destroy(struct session *s)
{
	for (struct session **pp = &srv.closing; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	session_free(s);
}

/* procscan_each: 1 at a process not yet ended (a zombie has) that
 * session_stop_all's SIGHUP went to: a session's leader or one of its
 * process group */
static int hup_not_ended(const struct proc_info *pi, void *arg)
{
	struct session **lists = arg;
	if (pi->state == 'Z' || pi->state == 'X')
		return 0;
	for (int l = 0; l < 2; l++) {
		for (struct session *s = lists[l]; s; s = s->next) {
			const struct pty *p = &s->pty;
			if (p->alive && p->pid > 0 && !p->reaped && (pi->pid == p->pid || pi->pgrp == p->pid))
				return 1;
		}
	}
	return 0;
}

void session_stop_all(void)
{
	fair_shutdown();   /* before the loop goes: no timer, no more holds */
	struct session *lists[2] = {srv.sessions, srv.closing};
	for (int l = 0; l < 2; l++) {
		for (struct session *s = lists[l]; s; s = s->next) {
			lws_sul_cancel(&s->ready_sul);
			lws_sul_cancel(&s->close_sul);
			session_gone(s);
			pty_signal_end(&s->pty, 0);
		}
	}
	/* 50 ms for them to end on the SIGHUP, then SIGKILL; over as soon as
	 * every one has (without /proc, the whole 50 ms): a shell at its prompt
	 * ends within a millisecond, and each stop slept the 50 ms out */
	uint64_t until = mono_us() + 50000;
	while (procscan_each(hup_not_ended, lists) != 0 && mono_us() < until)
		usleep(1000);
	for (int l = 0; l < 2; l++) {
		for (struct session *s = lists[l]; s; s = s->next) {
			pty_signal_end(&s->pty, 1);
			/* the loop closes the pty fds as it goes away */
			pty_release(&s->pty);
			s->pty.alive = 0;
		}
	}
}

void session_free_all(void)
{
	struct session *lists[2] = {srv.sessions, srv.closing};
	srv.sessions = srv.closing = NULL;
	for (int l = 0; l < 2; l++) {
		while (lists[l]) {
			struct session *s = lists[l];
			lists[l] = s->next;
			session_free(s);
		}
	}
	srv.nsessions = 0;
	rc_written = 0;
}
