/* handover.c — upgrade in place (PROTOCOL.md §11): the action
 * termd.upgrade and SIGUSR2 write the hand-over record (versioned JSON in
 * a memfd: the listening socket, every session's fds, pid, kind, size,
 * cwd and rendered screen, the event seq and retained ring; and the
 * modules' parts: plugin programs, recordings, queued stdin, expect and
 * port.wait re-armed, watches, the ports table — see modules_*), have the new
 * binary check it (--check-handover), and execve it with the same pid;
 * at start, a termd given a record (env TERMD_HANDOVER=fd) takes it all
 * back. */
#include "handover.h"
#include "front/front.h"
#include "door.h"
#include "fswork.h"
#include "envopts.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#define HANDOVER_VERSION 1
#define HANDOVER_ENV "TERMD_HANDOVER"

extern char **environ;
static char **saved_argv;
static cJSON *pending;        /* the record being taken over, until adopted */
static int upgraded;
static time_t started;
/* runs in flight taken over (see run_wrap) */
#define MAX_INFLIGHT 256
static struct inflight {
	char session[TD_SESSION_NAME_MAX + 1];
	char *text;
	struct cmd *cmd;          /* to compare only: still the session's command? */
} inflight[MAX_INFLIGHT];
static int ninflight;

void handover_set_argv(char **argv)
{
	saved_argv = argv;
	started = time(NULL);
}

int handover_upgraded(void)
{
	return upgraded;
}

time_t handover_started(void)
{
	return started;
}

/* ---------------------------------------------------------- the record */

static char *read_all(int fd, size_t *len)
{
	buf_t b = {0};
	char tmp[65536];
	ssize_t n;
	while ((n = pread(fd, tmp, sizeof tmp, (off_t)b.len)) > 0)
		buf_append(&b, tmp, (size_t)n);
	*len = b.len;
	if (!b.p)
		return xstrdup("");
	return buf_steal(&b);
}

/* the record parsed and its version checked; NULL with why in err */
static cJSON *parse_record(int fd, char *err, size_t errlen)
{
	size_t len;
	char *text = read_all(fd, &len);
	cJSON *j = cJSON_ParseWithLength(text, len);
	free(text);
	if (!j) {
		snprintf(err, errlen, "the hand-over record is not JSON");
		return NULL;
	}
	const cJSON *v = cJSON_GetObjectItem(j, "version");
	if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > HANDOVER_VERSION) {
		snprintf(err, errlen, "hand-over record version %g: this termd reads 1 to %d",
			 cJSON_IsNumber(v) ? v->valuedouble : -1, HANDOVER_VERSION);
		cJSON_Delete(j);
		return NULL;
	}
	const cJSON *s;
	cJSON_ArrayForEach(s, cJSON_GetObjectItem(j, "sessions")) {
		const cJSON *pid = cJSON_GetObjectItem(s, "pid"), *fd2 = cJSON_GetObjectItem(s, "fd");
		if (!cJSON_IsString(cJSON_GetObjectItem(s, "name")) || !cJSON_IsNumber(pid) ||
		    !cJSON_IsNumber(fd2)) {
			snprintf(err, errlen, "a session in the hand-over record lacks its name, pid or fd");
			cJSON_Delete(j);
			return NULL;
		}
	}
	return j;
}

int handover_check(const char *file)
{
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "termd: cannot open %s: %s\n", file, strerror(errno));
		return 1;
	}
	char err[256];
	cJSON *j = parse_record(fd, err, sizeof err);
	close(fd);
	if (!j) {
		fprintf(stderr, "termd: %s\n", err);
		return 1;
	}
	cJSON_Delete(j);
	return 0;
}

/* Is fd a listening socket at termd's listen address? */
static int is_our_listener(int fd)
{
	int acc = 0;
	socklen_t l = sizeof acc;
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l) < 0 || !acc)
		return 0;
	struct sockaddr_storage ss;
	l = sizeof ss;
	if (getsockname(fd, (struct sockaddr *)&ss, &l) < 0)
		return 0;
	if (opts.listen_unix)
		return ss.ss_family == AF_UNIX &&
		       !strcmp(((struct sockaddr_un *)&ss)->sun_path, opts.listen_unix);
	int port = ss.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&ss)->sin_port) :
		   ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) : -1;
	return port == opts.listen_port;
}

/* The front (net/front/front.c) owns the TCP listeners and their TLS: its
 * listening fds go in the record (front_handover_save), not listen_fd. */
static int front_tls(void)
{
	return front_wanted() && !opts.listen_unix;
}

static int find_listener(void)
{
	if (srv.inherited)
		return srv.inherit_fd;
	if (opts.listen_none)
		return -1;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int found = -1;
	struct dirent *e;
	while ((e = readdir(d)) && found < 0) {
		int fd = atoi(e->d_name);
		if (fd > 2 && fd != dirfd(d) && is_our_listener(fd))
			found = fd;
	}
	closedir(d);
	return found;
}

static void keep_fd(int fd, int keep)
{
	if (fd >= 0)
		fcntl(fd, F_SETFD, keep ? 0 : FD_CLOEXEC);
}

static cJSON *session_record(struct session *s, int final)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "name", s->name);
	if (s->command)
		cJSON_AddStringToObject(o, "command", s->command);
	else
		cJSON_AddNullToObject(o, "command");
	cJSON_AddNumberToObject(o, "pipe", s->is_pipe);
	cJSON_AddNumberToObject(o, "shell_kind", s->shell_kind);
	cJSON_AddNumberToObject(o, "pid", s->pty.pid);
	cJSON_AddNumberToObject(o, "fd", s->pty.fd);
	cJSON_AddNumberToObject(o, "hold_fd", s->pty.hold_fd);
	cJSON_AddNumberToObject(o, "err_fd", s->pty.err_fd);
	cJSON_AddNumberToObject(o, "in_fd", s->pty.in_fd);
	if (s->pty.reaped)   /* its output not drained yet: it ends in the new termd */
		cJSON_AddNumberToObject(o, "wait_status", pty_wait_status(&s->pty));
	cJSON_AddNumberToObject(o, "rows", s->rows);
	cJSON_AddNumberToObject(o, "cols", s->cols);
	cJSON_AddStringToObject(o, "cwd", s->cwd ? s->cwd : "");
	cJSON_AddNumberToObject(o, "state", s->state);
	cJSON_AddNumberToObject(o, "ready", s->ready);
	cJSON_AddNumberToObject(o, "cont", s->cont);
	cJSON_AddStringToObject(o, "nonce", shellint_nonce(s->si));
	cJSON *cg = s->cg ? cgroup_record(s->cg) : NULL;   /* its cgroup goes on too */
	if (cg)
		cJSON_AddItemToObject(o, "cgroup", cg);
	struct cmd *c = s->cmd;
	if (s->state == SH_RUNNING && c && c->typed && c->started && !c->finished && c->text) {
		/* a run's command still running: it goes on, its answer still comes */
		cJSON *rc = cJSON_AddObjectToObject(o, "cmd");
		cJSON_AddStringToObject(rc, "text", c->text);
		buf_t out = {0};
		int trunc = 0;
		if (final)   /* a collect takes the output: once, for the record that goes */
			cmd_collect(c, 16u << 20, &out, &trunc);
		buf_putc(&out, 0);
		cJSON_AddStringToObject(rc, "output", out.p);
		buf_free(&out);
		cJSON_AddNumberToObject(rc, "ran_us", (double)(mono_us() - c->start_us));
	} else if (s->state == SH_IDLE && s->cont && c && c->typed && !c->started && !c->finished &&
		   c->text) {
		/* a run's command the shell reads the rest of (PS2): still the
		 * session's command, is_input lines go on typing into it */
		cJSON *rc = cJSON_AddObjectToObject(o, "cmd");
		cJSON_AddStringToObject(rc, "text", c->text);
		cJSON_AddBoolToObject(rc, "cont", 1);
	}
	buf_t b = {0};
	screen_scrollback_text(session_screen(s), screen_scrollback_lines(session_screen(s)), &b);
	buf_putc(&b, 0);
	cJSON_AddStringToObject(o, "scrollback", b.p);
	buf_reset(&b);
	screen_snapshot(session_screen(s), &b);
	buf_putc(&b, 0);
	cJSON_AddStringToObject(o, "screen", b.p);
	buf_free(&b);
	return o;
}

/* ------------------------------------- what the modules keep besides */

/* The parts the modules own (plugin programs, recordings, watches, ...):
 * busy (why not now), close-on-exec, their part of the record, and taking
 * it back once the modules have started (handover_adopt_late). */
static const char *modules_busy(void)
{
	return plugin_handover_busy();
}

static void modules_keep(int keep)
{
	plugin_handover_keep(keep);
	record_handover_keep(keep);
	watch_handover_keep(keep);
}

static int kept(struct session *s);

/* the last record is made: what cannot go across is answered now */
static void modules_final(void)
{
	plugin_handover_fail_inflight();
	run_handover_answer_keys();
	session_spare_stop();   /* not a session: it does not go across */
	/* a session that does not go across (being closed, its program ended):
	 * what it still runs is killed now (a close's KILL would have come),
	 * and the folders of its cgroup the kernel still holds are the next
	 * termd's to remove (cgroup_handover_save) */
	struct session *lists[2] = {srv.sessions, srv.closing};
	for (int i = 0; i < 2; i++)
		for (struct session *s = lists[i]; s; s = s->next)
			if (!kept(s) && s->cg) {
				cgroup_free(s->cg);
				s->cg = NULL;
			}
}

/* Bytes queued for a session's input and not yet written (a pipe that is
 * full, a pty that does not read), and an end of input asked for: they
 * are written by the new termd in the same order. */
static cJSON *stdin_save(void)
{
	static const char hex[] = "0123456789abcdef";
	cJSON *j = cJSON_CreateObject();
	for (struct session *s = srv.sessions; s; s = s->next) {
		struct pty *p = &s->pty;
		size_t n = p->inq.len > p->inq_off ? p->inq.len - p->inq_off : 0;
		if (!kept(s) || (!n && !p->in_eof))
			continue;
		char *h = xmalloc(2 * n + 1);
		for (size_t i = 0; i < n; i++) {
			unsigned char c = (unsigned char)p->inq.p[p->inq_off + i];
			h[2 * i] = hex[c >> 4];
			h[2 * i + 1] = hex[c & 15];
		}
		h[2 * n] = 0;
		cJSON *o = cJSON_AddObjectToObject(j, s->name);
		cJSON_AddStringToObject(o, "hex", h);
		cJSON_AddBoolToObject(o, "eof", p->in_eof != 0);
		free(h);
	}
	return j;
}

static int unhex(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static void stdin_load(const cJSON *j)
{
	const cJSON *o;
	cJSON_ArrayForEach(o, j) {
		struct session *s = session_find(o->string);
		const cJSON *h = cJSON_GetObjectItem(o, "hex");
		if (!s || !cJSON_IsString(h))
			continue;
		size_t n = strlen(h->valuestring) / 2;
		char *b = xmalloc(n + 1);
		size_t k = 0;
		for (size_t i = 0; i < n; i++) {
			int hi = unhex(h->valuestring[2 * i]), lo = unhex(h->valuestring[2 * i + 1]);
			if (hi < 0 || lo < 0)
				break;
			b[k++] = (char)(hi << 4 | lo);
		}
		pty_write(&s->pty, b, k);
		free(b);
		if (cJSON_IsTrue(cJSON_GetObjectItem(o, "eof")))
			pty_close_input(&s->pty);
	}
}

static void modules_save(cJSON *j)
{
	cJSON_AddItemToObject(j, "plugins", plugin_handover_save());
	cJSON_AddItemToObject(j, "recordings", record_handover_save());
	cJSON_AddItemToObject(j, "openhands_v1", ohv1_handover_save());
	cJSON_AddItemToObject(j, "swerex", swerex_handover_save());
	cJSON_AddItemToObject(j, "envd", envd_handover_save());
	cJSON_AddItemToObject(j, "stdin", stdin_save());
	cJSON_AddItemToObject(j, "pipe_tails", sessionctl_handover_save());
	cJSON_AddItemToObject(j, "pendings", pending_handover_save());
	cJSON_AddItemToObject(j, "watches", watch_handover_save());
	cJSON_AddItemToObject(j, "ports", portscan_handover_save());
}

/* before the sessions are adopted: what their listeners take back */
static void modules_early(const cJSON *rec)
{
	record_handover_load(cJSON_GetObjectItem(rec, "recordings"));
	ohv1_handover_load(cJSON_GetObjectItem(rec, "openhands_v1"));
	swerex_handover_load(cJSON_GetObjectItem(rec, "swerex"));
	envd_handover_load(cJSON_GetObjectItem(rec, "envd"));
}

/* after: what no session took is let go */
static void modules_sessions_done(const cJSON *rec)
{
	record_handover_done();
	ohv1_handover_done();
	swerex_handover_done();
	envd_handover_done();
	stdin_load(cJSON_GetObjectItem(rec, "stdin"));
	sessionctl_handover_load(cJSON_GetObjectItem(rec, "pipe_tails"));
	/* before the first port scan: what closed meanwhile gets its
	 * port.close, what was told gets no second port.open */
	portscan_handover_load(cJSON_GetObjectItem(rec, "ports"));
}

static cJSON *late;   /* the modules' parts of the record, until taken */

static void modules_take(cJSON *rec)
{
	late = cJSON_CreateObject();
	static const char *const parts[] = {"plugins", "pendings", "watches"};
	for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
		cJSON *p = cJSON_DetachItemFromObject(rec, parts[i]);
		if (p)
			cJSON_AddItemToObject(late, parts[i], p);
	}
}

void handover_adopt_late(void)
{
	if (!late)
		return;
	plugin_handover_load(cJSON_GetObjectItem(late, "plugins"));
	watch_handover_load(cJSON_GetObjectItem(late, "watches"));
	pending_handover_load(cJSON_GetObjectItem(late, "pendings"));
	cJSON_Delete(late);
	late = NULL;
}

/* the sessions that go across (alive, not closing): with their fds still
 * open; a pipe session whose stdout, or both outputs, ended already, or
 * whose process was reaped, too (its output and exit are still to come:
 * an OpenHands V1 command ended with exit_code -1, its output cut, when
 * its session was left behind, issue 52) */
static int kept(struct session *s)
{
	return s->pty.alive && !s->closing && (s->pty.fd >= 0 || s->pty.pipes);
}

static void keep_all(int keep, int lfd)
{
	keep_fd(lfd, keep);
	modules_keep(keep);
	front_handover_keep(keep);
	for (struct session *s = srv.sessions; s; s = s->next) {
		if (!kept(s))
			continue;
		keep_fd(s->pty.fd, keep);
		keep_fd(s->pty.hold_fd, keep);
		keep_fd(s->pty.err_fd, keep);
		keep_fd(s->pty.in_fd, keep);
	}
}

static int write_record(int lfd, int final, char *err, size_t errlen)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddNumberToObject(j, "version", HANDOVER_VERSION);
	cJSON_AddNumberToObject(j, "listen_fd", lfd);
	cJSON_AddStringToObject(j, "rundir", srv.rundir);
	cJSON_AddNumberToObject(j, "upgraded", upgraded + 1);
	if (opts.token)
		cJSON_AddStringToObject(j, "token", opts.token);   /* env TERMD_TOKEN is gone */
	cJSON *ss = cJSON_AddArrayToObject(j, "sessions");
	for (struct session *s = srv.sessions; s; s = s->next)
		if (kept(s))
			cJSON_AddItemToArray(ss, session_record(s, final));
	modules_save(j);
	cJSON_AddItemToObject(j, "events", events_handover_save());
	cJSON_AddItemToObject(j, "cgroups", cgroup_handover_save());
	front_handover_save(j);
	char *text = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	int fd = memfd_create("termd-handover", 0);
	if (fd < 0) {
		snprintf(err, errlen, "cannot make the hand-over record: %s", strerror(errno));
		free(text);
		return -1;
	}
	size_t len = strlen(text), off = 0;
	while (off < len) {
		ssize_t w = write(fd, text + off, len - off);
		if (w <= 0) {
			snprintf(err, errlen, "cannot write the hand-over record: %s", strerror(errno));
			free(text);
			close(fd);
			return -1;
		}
		off += (size_t)w;
	}
	free(text);
	return fd;
}

/* BINARY --check-handover /proc/self/fd/N, waited for up to 10 s */
static int check_binary(const char *bin, int rfd, char *err, size_t errlen)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", rfd);
	/* posix_spawn (a vfork): no copy of termd's page tables to pay for */
	posix_spawnattr_t at;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_init(&at);
	posix_spawn_file_actions_init(&fa);
	sigset_t none;
	sigemptyset(&none);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	char *argv[] = {(char *)bin, "--check-handover", path, NULL};
	pid_t pid;
	int e = posix_spawn(&pid, bin, &fa, &at, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	if (e) {
		snprintf(err, errlen, "cannot run %s --check-handover: %s; still serving", bin,
			 strerror(e));
		return -1;
	}
	uint64_t deadline = mono_us() + 10000000;
	int st = 0;
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			break;
		if (r < 0 && errno != EINTR) {
			snprintf(err, errlen, "cannot wait for the check of %s", bin);
			return -1;
		}
		if (mono_us() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			snprintf(err, errlen, "%s --check-handover took over 10 s", bin);
			return -1;
		}
		usleep(2000);
	}
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	if (WIFEXITED(st))
		snprintf(err, errlen, "%s --check-handover exited %d: it cannot take this "
			 "termd's state; still serving", bin, WEXITSTATUS(st));
	else
		snprintf(err, errlen, "%s --check-handover was killed by signal %d; still serving",
			 bin, WTERMSIG(st));
	return -1;
}

/* A connection termd dialed (a link, a link's /tty viewer): on the links'
 * vhost */
static int is_dialed(struct lws *wsi)
{
	struct lws_vhost *vh = lws_get_vhost(wsi);
	const char *name = vh ? lws_get_vhost_name(vh) : NULL;
	return name && !strcmp(name, "termd-link");
}

/* a client's frames are masked (RFC 6455 5.3): the same close 1012 */
static void send_1012_masked(int fd)
{
	unsigned char m[4];
	lws_get_random(srv.ctx, m, sizeof m);
	unsigned char frame[] = {0x88, 0x82, m[0], m[1], m[2], m[3], 0x03 ^ m[0], 0xf4 ^ m[1]};
	if (write(fd, frame, sizeof frame) < 0)
		return;
}

/* Every /events and /tty connection gets a close frame 1012 (service restart),
 * written straight to its socket: no loop turn is left. A connection in
 * the middle of a frame (partly written) just sees its socket close. */
static void send_1012(struct wsconn *ws)
{
	if (!ws->wsi || lws_partial_buffered(ws->wsi) || lws_is_ssl(ws->wsi))
		return;   /* (in a TLS stream, bytes of ours would be garbage) */
	int fd = (int)lws_get_socket_fd(ws->wsi);
	if (fd < 0)
		return;
	if (is_dialed(ws->wsi)) {   /* termd is the client: a masked frame */
		send_1012_masked(fd);
		return;
	}
	static const unsigned char frame[] = {0x88, 0x02, 0x03, 0xf4};
	if (write(fd, frame, sizeof frame) < 0)
		return;
}

static void close_1012(void)
{
	for (struct conn *c = srv.conns; c; c = c->next)
		if (!c->sink)
			send_1012(&c->ws);
	tty_each_viewer(send_1012);
}

int handover_upgrade(const char *binary, const cJSON *cause, char *err, size_t errlen)
{
	static char self[4096];
	if (!binary || !*binary) {
		ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
		if (n <= 0) {
			snprintf(err, errlen, "cannot tell termd's own path");
			return -1;
		}
		self[n] = 0;
		/* a binary replaced on disk shows as "path (deleted)" */
		char *del = strstr(self, " (deleted)");
		if (del && !del[10])
			*del = 0;
		binary = self;
	}
	if (opts.tls_cert && !front_tls()) {
		snprintf(err, errlen, "an upgrade in place is not supported with --tls-cert on a unix "
			 "socket (or with --front off) yet");
		return -1;
	}
	if (fswork_pending()) {   /* a worker's answer would be lost with the exec */
		snprintf(err, errlen, "file work is in flight (%zu jobs); try again in a moment; "
			 "still serving", fswork_pending());
		return -1;
	}
	const char *busy = modules_busy();
	if (busy) {
		snprintf(err, errlen, "%s; still serving", busy);
		return -1;
	}
	if (!saved_argv) {
		snprintf(err, errlen, "termd's command line is unknown");
		return -1;
	}
	int lfd = front_tls() ? -1 : find_listener();
	if (!opts.listen_none && lfd < 0 && !front_tls()) {
		snprintf(err, errlen, "cannot find termd's listening socket");
		return -1;
	}
	/* the new binary checks a record made now ... */
	int rfd = write_record(lfd, 0, err, errlen);
	if (rfd < 0)
		return -1;
	int checked = check_binary(binary, rfd, err, errlen);
	close(rfd);
	if (checked < 0)
		return -1;
	/* ... then the answer is retained for the id and the record made
	 * again with it, so a client that reconnects and re-sends the id gets
	 * ok: true (should the exec fail, the ok: false after it replaces it) */
	if (cause) {
		cJSON *ex = cJSON_CreateObject();
		cJSON_AddBoolToObject(ex, "ok", 1);
		cJSON_AddStringToObject(ex, "binary", binary);
		events_emit(NULL, cause, "termd.upgrade", "upgraded", ex);
	}
	modules_final();
	rfd = write_record(lfd, 1, err, errlen);
	if (rfd < 0)
		return -1;
	log_info("upgrading in place to %s", binary);
	char env[64];
	snprintf(env, sizeof env, "%d", rfd);
	setenv(HANDOVER_ENV, env, 1);
	keep_all(1, lfd);
	close_1012();
	front_handover_flush();   /* the close frames through the front too */
	char **envp = envopts_exec_env(environ);   /* TERMD_<OPTION>s: same options */
	execve(binary, saved_argv, envp);
	int e = errno;
	free(envp);
	keep_all(0, lfd);
	front_handover_resume();
	unsetenv(HANDOVER_ENV);
	close(rfd);
	snprintf(err, errlen, "cannot run %s: %s; still serving", binary, strerror(e));
	return -1;
}

/* ------------------------------------------------------------- start */

int handover_begin(char *err, size_t errlen)
{
	const char *v = getenv(HANDOVER_ENV);
	if (!v)
		return 0;
	int fd = atoi(v);
	unsetenv(HANDOVER_ENV);
	pending = parse_record(fd, err, errlen);
	close(fd);
	if (!pending)
		return -1;
	const cJSON *l = cJSON_GetObjectItem(pending, "listen_fd");
	const cJSON *r = cJSON_GetObjectItem(pending, "rundir");
	const cJSON *t = cJSON_GetObjectItem(pending, "token");
	const cJSON *u = cJSON_GetObjectItem(pending, "upgraded");
	srv.inherited = 1;
	srv.inherit_fd = cJSON_IsNumber(l) ? (int)l->valuedouble : -1;
	srv.inherit_rundir = cJSON_IsString(r) ? xstrdup(r->valuestring) : NULL;
	if (!opts.token && cJSON_IsString(t))
		opts.token = xstrdup(t->valuestring);
	upgraded = cJSON_IsNumber(u) ? (int)u->valuedouble : 1;
	front_handover_load(pending);
	return 1;
}

int handover_adopt(char *err, size_t errlen)
{
	if (!pending)
		return 0;
	events_handover_load(cJSON_GetObjectItem(pending, "events"));
	modules_take(pending);
	modules_early(pending);
	cgroup_handover_load(cJSON_GetObjectItem(pending, "cgroups"));
	const cJSON *s;
	int rc = 0;
	cJSON_ArrayForEach(s, cJSON_GetObjectItem(pending, "sessions")) {
		char e[256] = "";
		struct session *ns = session_adopt(s, e, sizeof e);
		if (!ns || e[0]) {
			log_warn("%s", e[0] ? e : "a session could not be taken over");
			snprintf(err, errlen, "%s", e);
		}
		const cJSON *ws = cJSON_GetObjectItem(s, "wait_status");
		if (ns && cJSON_IsNumber(ws))   /* ended in the old image, its output still to read */
			log_info("session %s: its process ended before the upgrade (wait status %d); "
				 "what it wrote is read here, then its end", ns->name,
				 (int)ws->valuedouble);
		const cJSON *c = cJSON_GetObjectItem(s, "cmd");
		const cJSON *text = cJSON_GetObjectItem(c, "text"), *out = cJSON_GetObjectItem(c, "output");
		const cJSON *ran = cJSON_GetObjectItem(c, "ran_us");
		if (ns && cJSON_IsString(text) && ninflight < MAX_INFLIGHT) {
			struct inflight *f = &inflight[ninflight++];
			snprintf(f->session, sizeof f->session, "%s", ns->name);
			f->text = xstrdup(text->valuestring);
			f->cmd = cmd_adopt(ns, text->valuestring,
					   cJSON_IsString(out) ? out->valuestring : "",
					   cJSON_IsNumber(ran) ? (uint64_t)ran->valuedouble : 0,
					   !cJSON_IsTrue(cJSON_GetObjectItem(c, "cont")));
		}
	}
	modules_sessions_done(pending);
	cJSON_Delete(pending);
	pending = NULL;
#ifdef __GLIBC__
	/* the record's tree, about twice the retained events and the rest
	 * taken over, is freed now, mostly below the heap's top where glibc
	 * keeps it: those pages back to the kernel (measured after an upgrade
	 * holding 2500 runs' events: RSS 27.5 MiB with 10.6 MiB in use, 16.5
	 * MiB once trimmed; each upgrade of a soak kept such a gap, growing
	 * with what went across) */
	malloc_trim(0);
#endif
	log_info("upgraded in place (%d so far): %d sessions taken over", upgraded, srv.nsessions);
	return rc;
}

/* ------------------------------------------------------- runs in flight */

/* A `run` whose command was still running when termd upgraded: its client
 * reconnects and re-sends the same action (same id, same command). That
 * re-sent run becomes a poll of the command taken over, so its answer (the
 * output, the exit code) comes once, and the command does not run again.
 * The pending actions' ids are not in the record: the command's session
 * and text name it. */
static action_fn run_fn;

static void inflight_drop(int i)
{
	free(inflight[i].text);
	inflight[i] = inflight[--ninflight];
}

static int run_wrap(struct act *a)
{
	const cJSON *cmd = cJSON_GetObjectItem(a->args, "command");
	const cJSON *sess = cJSON_GetObjectItem(a->args, "session");
	const char *sname = cJSON_IsString(sess) ? sess->valuestring : "main";
	if (!ninflight || !cJSON_IsString(cmd) || !cmd->valuestring[0] ||
	    cJSON_IsTrue(cJSON_GetObjectItem(a->args, "is_input")))
		return run_fn(a);
	for (int i = 0; i < ninflight; i++) {
		struct session *s = session_find(inflight[i].session);
		if (!s || s->cmd != inflight[i].cmd) {
			inflight_drop(i--);
			continue;
		}
		if (strcmp(inflight[i].session, sname) || strcmp(inflight[i].text, cmd->valuestring))
			continue;
		inflight_drop(i);
		cJSON *poll = cJSON_Duplicate(a->args, 1);
		cJSON_ReplaceItemInObject(poll, "command", cJSON_CreateString(""));
		const cJSON *args = a->args;
		a->args = poll;
		int r = run_fn(a);
		a->args = args;
		cJSON_Delete(poll);
		return r;
	}
	return run_fn(a);
}

/* ------------------------------------------------------------ action */

static int upgrade_action(struct act *a)
{
	const char *bin = NULL;
	if (arg_string(a, "binary", &bin, 0) < 0)
		return -1;
	char err[512];
	if (handover_upgrade(bin, a->id, err, sizeof err) < 0) {
		cJSON *ex = cJSON_CreateObject();
		cJSON_AddBoolToObject(ex, "ok", 0);
		cJSON_AddStringToObject(ex, "message", err);
		events_emit(a->conn, a->id, "termd.upgrade", err, ex);
	}
	return 0;
}

static void on_usr2(void)
{
	char err[512];
	if (handover_upgrade(NULL, NULL, err, sizeof err) < 0)
		log_warn("SIGUSR2: %s", err);
}

/* /healthz: "started" (when this process image began, UTC) and "upgraded" */
static void health(buf_t *b)
{
	struct tm tm;
	char when[32];
	gmtime_r(&started, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	buf_printf(b, ",\"started\":\"%s\",\"upgraded\":%d", when, upgraded);
}

void handover_register(void)
{
	http_health_extend(health);
	static const struct action_def defs[] = {
		{"termd.upgrade", upgrade_action, 0},
	};
	actions_register(defs, sizeof defs / sizeof defs[0]);
	srv.on_usr2 = on_usr2;
	const struct action_def *run = actions_find("run");
	if (run && run->fn != run_wrap) {
		run_fn = run->fn;
		struct action_def wrap = {"run", run_wrap, run->flags};
		actions_register(&wrap, 1);
	}
}
