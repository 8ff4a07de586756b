/* server.c — the listener and event loop: the libwebsockets context (TCP or
 * unix socket, TLS) and vhost with the channels' protocols (conn.c, tty.c),
 * fd adoption with a callback and an argument (ptys, the signalfd), the
 * signalfd for SIGCHLD and SIGTERM, timers, and the runtime directory. With
 * --listen none the context has no listener (dial-out links only). Every
 * fd belongs to this one loop. It knows no session: their owners pass their
 * own callbacks. It also times the loop's turns (the longest since the
 * last look: GET /metrics). */
#include "loop.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>


struct server srv;
struct termd_opts opts;
static int sig_fd = -1;

/* An adopted fd's per-connection data (lws allocates it): whom to tell.
 * Its argument is the wsi's opaque user data, which the owner may clear
 * (lws_set_opaque_user_data(wsi, NULL)) to let go of it. */
struct fdwatch {
	server_fd_cb cb;
};

static int on_signal(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
{
	(void)wsi;
	(void)arg;
	if (reason != LWS_CALLBACK_RAW_RX_FILE)
		return 0;
	struct signalfd_siginfo si;
	while (read(sig_fd, &si, sizeof si) == (ssize_t)sizeof si) {
		if (si.ssi_signo == SIGCHLD) {
			child_reap_all();
		} else if (si.ssi_signo == SIGUSR2) {
			if (srv.on_usr2)
				srv.on_usr2();
		} else {
			log_info("signal %u: shutting down", si.ssi_signo);
			srv.stopping = 1;
		}
	}
	return 0;
}

/* ---------------------------------------------------- accept backoff */

/* When accept fails for want of an fd (EMFILE, ENFILE) or of memory, the
 * connection stays queued and the listener readable: lws 4.1 logs
 * "accept: errno N" and tries again at once, a busy loop (issue 52's soak:
 * millions of lines, 100% CPU, /healthz 14-30 s while fds were out). Here
 * every listener of the loop (lws's and the one handed over) rests
 * ACC_REST_US with POLLIN off, then is tried again; a queued client just
 * waits. An episode is logged twice: as it begins, and a quiet
 * ACC_QUIET_US after the last failure, with its count.
 *
 * The loop keeps one fd in reserve (/dev/null) for its listeners: on the
 * first EMFILE or ENFILE it is closed and the accept tried again at once,
 * then taken again on a later turn once an fd is free. Without it the
 * front's requests deadlocked while fds were short (issue 52's soak,
 * fd_exhaust): the front took the last two fds for a client and its
 * connection to lws, lws had none left to accept that connection with,
 * and the front held both until the limit went up (clients timed out
 * after 30 s; the front's listener failed 906 accepts over 38.7 s). */
#define ACC_MAX 8
#define ACC_REST_US 100000
#define ACC_QUIET_US 1000000
/* lws's own (exported by libwebsockets 4.1, not declared in its headers):
 * the wsi of one of its fds; asked only for fds lws had at start */
struct lws *wsi_from_fd(const struct lws_context *context, int fd);
static struct {
	int fd[ACC_MAX];          /* the listening fds (looked up again each time) */
	int n;
	int pending;              /* an accept failed in this turn of the loop */
	int resting;              /* the listeners' POLLIN is off */
	unsigned long fails;      /* this episode's failed accepts */
	int err;
	uint64_t since, last;     /* when it began (0: none), its last failure */
	lws_sorted_usec_list_t sul;
	int reserve;              /* the fd kept for an accept (-1: spent) */
	int spent;                /* spent in this turn: the accept's, next turn */
	uint64_t spent_us;        /* when it was last spent */
} acc = { .reserve = -1 };

/* the reserve taken again once an fd is free (each turn while spent, not
 * the turn it was spent in: its fd is the next accept's) */
static void acc_reserve(void)
{
	if (acc.spent)
		acc.spent = 0;
	else if (acc.reserve < 0)
		acc.reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* An accept failed with err: 1 when it is a shortage the listeners rest
 * for (logged here once an episode), 0 for another error */
static int accept_failed(int err)
{
	if (err != EMFILE && err != ENFILE && err != ENOBUFS && err != ENOMEM)
		return 0;
	acc.fails++;
	acc.err = err;
	acc.last = mono_us();
	if (!acc.since) {
		acc.since = acc.last;
		log_warn("cannot accept a connection: %s: the listeners rest %d ms at a time until it passes",
			 strerror(err), ACC_REST_US / 1000);
	}
	if ((err == EMFILE || err == ENFILE) && acc.reserve >= 0 &&
	    acc.last - acc.spent_us >= ACC_REST_US) {
		/* the reserve freed: the listener, still readable, takes the
		 * connection on the loop's next turn (once a rest at the most:
		 * a connection closed at once would free its fd for the reserve
		 * again, and the next accept fail again, a loop) */
		close(acc.reserve);
		acc.reserve = -1;
		acc.spent = 1;
		acc.spent_us = acc.last;
		return 1;
	}
	acc.pending = 1;
	return 1;
}

static void acc_listen(int on)
{
	for (int i = 0; i < acc.n; i++) {
		int v = 0;
		socklen_t l = sizeof v;
		struct lws *w = wsi_from_fd(srv.ctx, acc.fd[i]);
		if (w && getsockopt(acc.fd[i], SOL_SOCKET, SO_ACCEPTCONN, &v, &l) == 0 && v)
			lws_rx_flow_control(w, on);
	}
}

static void acc_tick(lws_sorted_usec_list_t *sul)
{
	(void)sul;
	if (acc.resting) {
		acc.resting = 0;
		acc_listen(1);
		server_timer(&acc.sul, acc_tick, ACC_QUIET_US);
		return;
	}
	log_info("accepting again: %lu accepts failed (%s) over %.1f s", acc.fails, strerror(acc.err),
		 (double)(acc.last - acc.since) / 1e6);
	acc.fails = 0;
	acc.since = 0;
}

/* after a turn of the loop in which an accept failed: the listeners rest */
static void acc_rest(void)
{
	acc.pending = 0;
	if (acc.resting)
		return;
	acc.resting = 1;
	acc_listen(0);
	server_timer(&acc.sul, acc_tick, ACC_REST_US);
}

/* the loop's listening fds (lws's and the one handed over), once started */
static void acc_find_listeners(void)
{
	/* lws's fd table: as many as ulimit -n when it started, else 2560 */
	long lim = sysconf(_SC_OPEN_MAX);
	if (lim < 0 || lim > 10000000)
		lim = 2560;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)) && acc.n < ACC_MAX) {
		int fd = atoi(e->d_name), v = 0;
		socklen_t l = sizeof v;
		if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dirfd(d) || fd >= lim)
			continue;
		if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l) == 0 && v &&
		    wsi_from_fd(srv.ctx, fd))
			acc.fd[acc.n++] = fd;
	}
	closedir(d);
}

/* The listening socket kept across an upgrade in place: lws did not open
 * it, so its connections are accepted here and handed to lws as the
 * vhost's own (HTTP, then WebSocket upgrades). */
static int on_listen(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
{
	(void)wsi;
	(void)arg;
	if (reason != LWS_CALLBACK_RAW_RX_FILE)
		return 0;
	for (int i = 0; i < 64; i++) {
		int fd = accept4(srv.inherit_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && !accept_failed(errno))
				log_warn("cannot accept on the listener handed over: %s", strerror(errno));
			break;
		}
		if (!opts.listen_unix) {
			int one = 1;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		}
		if (!lws_adopt_socket_vhost(srv.vhost, fd))
			log_warn("cannot serve a connection on the listener handed over");
	}
	return 0;
}

static int cb_raw(struct lws *wsi, enum lws_callback_reasons reason, void *user,
		  void *in, size_t len)
{
	(void)in;
	(void)len;
	struct fdwatch *fw = user;
	if (!fw || !fw->cb)
		return 0;   /* being adopted: the callback is not set yet */
	return fw->cb(wsi, reason, lws_get_opaque_user_data(wsi));
}

/* The channels' entries are given to server_init by its caller (the
 * transport's, from above): /events first, as the vhost's plain HTTP
 * requests and upgrade checks go to protocols[0]. */
static struct lws_protocols protocols[] = {
	{NULL, NULL, 0, 0, 0, NULL, 0},   /* conn_protocol */
	{NULL, NULL, 0, 0, 0, NULL, 0},   /* tty_protocol */
	{"termd-raw", cb_raw, sizeof(struct fdwatch), 0, 0, NULL, 0},
	{NULL, NULL, 0, 0, 0, NULL, 0},
};

struct lws *server_adopt_fd(int fd, server_fd_cb cb, void *arg)
{
	lws_adopt_desc_t d;
	memset(&d, 0, sizeof d);
	d.vh = srv.vhost;
	d.type = LWS_ADOPT_RAW_FILE_DESC;
	d.fd.filefd = fd;
	d.vh_prot_name = "termd-raw";
	d.opaque = arg;
	struct lws *w = lws_adopt_descriptor_vhost_via_info(&d);
	if (!w)
		return NULL;
	struct fdwatch *fw = lws_wsi_user(w);
	fw->cb = cb;
	return w;
}

void server_timer(lws_sorted_usec_list_t *sul, sul_cb_t cb, uint64_t delay_us)
{
	if (!delay_us) {
		lws_sul_cancel(sul);
		return;
	}
	lws_sul_schedule(srv.ctx, 0, sul, cb, (lws_usec_t)delay_us);
}

static void lws_log(int level, const char *line)
{
	/* lws's listener could not accept (its line is "accept: errno N") */
	const char *a = strstr(line, "accept: errno ");
	if (a && accept_failed(atoi(a + 14)))
		return;
	if (level & LLL_ERR)
		fprintf(stderr, "termd: lws: %s", line);
	else if (log_verbose)
		fprintf(stderr, "termd: lws: %s", line);
}

/* Can host:port (numeric) be bound? Logs why not. */
static int probe_bind(const char *host, int port)
{
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof ss);
	socklen_t len;
	int fam;
	struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
		fam = a4->sin_family = AF_INET;
		a4->sin_port = htons((uint16_t)port);
		len = sizeof *a4;
	} else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
		fam = a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)port);
		len = sizeof *a6;
	} else {
		log_error("--listen %s: not an address", host);
		return -1;
	}
	int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		log_error("--listen %s:%d: cannot listen: %s", host, port, strerror(errno));
		return -1;
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	int r = bind(fd, (struct sockaddr *)&ss, len);
	int e = errno;
	close(fd);
	if (r < 0) {
		log_error("--listen %s:%d: cannot listen: %s%s", host, port, strerror(e),
			  e == EADDRINUSE ? " (another program holds the port: choose another "
					    "with --listen HOST:PORT)" : "");
		return -1;
	}
	return 0;
}

/* the runtime folder (the front's socket): the one handed over, else a
 * new one under $TMPDIR (or /tmp): 0, or -1 and why in the log */
static int make_rundir(void)
{
	if (srv.inherited) {
		srv.rundir = srv.inherit_rundir;
		srv.inherit_rundir = NULL;
	}
	char tmpl[] = "/tmp/termd-XXXXXX";
	const char *base = getenv("TMPDIR");
	buf_t dir = {0};
	buf_printf(&dir, "%s/termd-XXXXXX", base && *base ? base : "/tmp");
	if (srv.rundir) {
		buf_free(&dir);
	} else if (!mkdtemp(dir.p)) {
		buf_free(&dir);
		if (!mkdtemp(tmpl)) {
			log_warn("cannot create a runtime directory: %s", strerror(errno));
			return -1;
		}
		srv.rundir = xstrdup(tmpl);
	} else {
		srv.rundir = buf_steal(&dir);
	}
	return 0;
}

/* Where lws listens (info): nowhere (links only, or the listener handed
 * over), the front's unix socket, a unix --listen, or --listen HOST:PORT
 * (probed first, to fail clearly); TLS where lws does it. *old_umask: the
 * umask to put back once a unix socket is made. 0, or -1 and why. */
static int choose_listener(struct lws_context_creation_info *info, int front, mode_t *old_umask)
{
	if (front) {
		buf_t fs = {0};
		buf_printf(&fs, "%s/front.sock", srv.rundir);
		srv.front_sock = buf_steal(&fs);
		if (strlen(srv.front_sock) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
			log_error("the runtime folder's path %s is too long for a unix socket "
				  "(set TMPDIR shorter, or --front off)", srv.rundir);
			return -1;
		}
		unlink(srv.front_sock);   /* the one of the termd before an upgrade */
	}
	if (opts.listen_none || (srv.inherited && !(front && !opts.listen_unix))) {
		/* dial-out links only, or the listener kept across an upgrade
		 * (adopted below) */
		info->port = CONTEXT_PORT_NO_LISTEN;
	} else if (front && !opts.listen_unix) {
		/* the TCP listeners are the front's (net/front/front.c): lws serves
		 * what it forwards, on a socket only termd's user can open */
		info->options |= LWS_SERVER_OPTION_UNIX_SOCK;
		info->iface = srv.front_sock;
		info->port = 0;
		*old_umask = umask(077);
	} else if (opts.listen_unix) {
		info->options |= LWS_SERVER_OPTION_UNIX_SOCK;
		info->iface = opts.listen_unix;
		info->port = 0;
		/* a stale socket from an earlier run is replaced; anything else at
		 * that path is left alone */
		struct stat st;
		if (lstat(opts.listen_unix, &st) == 0) {
			if (!S_ISSOCK(st.st_mode)) {
				log_warn("%s exists and is not a socket: not replacing it", opts.listen_unix);
				return -1;
			}
			unlink(opts.listen_unix);
		}
		*old_umask = umask(077);
	} else {
		info->iface = opts.listen_host;
		info->port = opts.listen_port;
		/* lws opens an IPv6 (dual-stack) socket by default and cannot bind
		 * one to an IPv4 address: it then listened on every interface,
		 * 127.0.0.1 included. An IPv4 address gets an IPv4 socket. */
		if (!strchr(opts.listen_host, ':'))
			info->options |= LWS_SERVER_OPTION_DISABLE_IPV6;
		/* and when lws cannot bind an address it says so in its log and
		 * serves nothing: try the address first, to fail clearly */
		if (probe_bind(opts.listen_host, opts.listen_port) < 0)
			return -1;
	}
	if (opts.nconnect)   /* a wss:// link's client side */
		info->options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
	/* with the front, TLS is the front's (lws keeps it for a unix --listen) */
	if (opts.tls_cert && !opts.listen_none && (!front || opts.listen_unix)) {
		info->options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
		info->ssl_cert_filepath = opts.tls_cert;
		info->ssl_private_key_filepath = opts.tls_key;
		/* lws 4.1's HTTP/2 drops every header it has no token for
		 * (X-Access-Token...): where lws does TLS itself, ALPN offers
		 * HTTP/1.1 only (HTTP/2 is the front's) */
		info->alpn = "http/1.1";
	}
	return 0;
}

/* The vhosts beyond the default one: the front's socket beside a unix
 * --listen, and a vhost per extra --listen address (without the front):
 * 0, or -1 and why. */
static int more_vhosts(const struct lws_context_creation_info *info, int front)
{
	if (front && opts.listen_unix) {
		/* a unix --listen is lws's own; the front's socket is one more vhost */
		struct lws_context_creation_info vi = *info;
		vi.vhost_name = "front";
		vi.options &= ~(uint64_t)(LWS_SERVER_OPTION_DISABLE_IPV6 | LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT);
		vi.options |= LWS_SERVER_OPTION_UNIX_SOCK;
		vi.iface = srv.front_sock;
		vi.port = 0;
		vi.ssl_cert_filepath = vi.ssl_private_key_filepath = NULL;
		mode_t um = umask(077);
		struct lws_vhost *fv = lws_create_vhost(srv.ctx, &vi);
		umask(um);
		if (!fv) {
			log_error("cannot listen on %s", srv.front_sock);
			return -1;
		}
	}
	/* --listen given again: a vhost per address, the same channels (with
	 * the front, they are the front's) */
	for (int i = 0; i < opts.nextra && !front; i++) {
		struct lws_context_creation_info vi = *info;
		/* (lws keeps the name's pointer: server_listener_api reads it) */
		static char names[TD_MAX_EXTRA_LISTEN][24];
		snprintf(names[i], sizeof names[i], "listen-%d", i + 1);
		vi.vhost_name = names[i];
		vi.options &= ~(uint64_t)(LWS_SERVER_OPTION_UNIX_SOCK | LWS_SERVER_OPTION_DISABLE_IPV6 |
					   LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT);
		vi.iface = opts.extra_host[i];
		vi.port = opts.extra_port[i];
		if (!strchr(vi.iface, ':'))
			vi.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
		if (probe_bind(vi.iface, vi.port) < 0)
			return -1;
		if (!lws_create_vhost(srv.ctx, &vi)) {
			log_error("--listen %s:%d: cannot listen", vi.iface, vi.port);
			return -1;
		}
		log_info("also listening on %s:%d", vi.iface, vi.port);
	}
	return 0;
}

/* the sockets' modes, the listener handed over watched, and the signals
 * (SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR2) through a signalfd in the
 * loop: 0, or -1 and why */
static int watch_listener_and_signals(int front)
{
	if (front)
		chmod(srv.front_sock, 0600);
	if (srv.inherited && srv.inherit_fd >= 0) {
		fcntl(srv.inherit_fd, F_SETFD, FD_CLOEXEC);
		fcntl(srv.inherit_fd, F_SETFL, fcntl(srv.inherit_fd, F_GETFL) | O_NONBLOCK);
		if (!server_adopt_fd(srv.inherit_fd, on_listen, NULL)) {
			log_warn("cannot watch the listening socket handed over");
			return -1;
		}
		srv.unix_bound = opts.listen_unix != NULL;
	} else if (opts.listen_unix) {
		chmod(opts.listen_unix, 0600);
		srv.unix_bound = 1;   /* ours to remove at exit */
	}

	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGUSR2);
	sigprocmask(SIG_BLOCK, &set, NULL);
	sig_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sig_fd < 0 || !server_adopt_fd(sig_fd, on_signal, NULL)) {
		log_warn("cannot watch signals");
		return -1;
	}
	return 0;
}

int server_init(const struct lws_protocols *events_channel, const struct lws_protocols *tty_channel)
{
	srv.start_mono = mono_us();
	if (make_rundir() < 0)
		return -1;

	lws_set_log_level(LLL_ERR | LLL_WARN | (log_verbose ? LLL_NOTICE : 0), lws_log);
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof info);
	protocols[0] = *events_channel;
	protocols[1] = *tty_channel;
	info.protocols = protocols;
	info.gid = (gid_t)-1;
	info.uid = (uid_t)-1;
	/* a request's headers in all (held only while they are read): room
	 * for the most upload metadata envd takes (4096 bytes of keys and
	 * values, percent-encoded by the front: up to three times that) */
	info.max_http_header_data = 16384;
	info.pt_serv_buf_size = 65536;
	info.options = LWS_SERVER_OPTION_VALIDATE_UTF8 * 0;
	mode_t old_umask = 0;
	int front = server_front_wanted();
	if (choose_listener(&info, front, &old_umask) < 0)
		return -1;
	srv.ctx = lws_create_context(&info);
	if (info.options & LWS_SERVER_OPTION_UNIX_SOCK)
		umask(old_umask);
	if (!srv.ctx) {
		log_warn("cannot %s %s%s", opts.listen_none ? "start the loop" : "listen on",
			 opts.listen_none ? "" : opts.listen_unix ? opts.listen_unix :
			 front ? srv.front_sock : opts.listen_host,
			 opts.tls_cert ? " (or the TLS certificate and key were not accepted)" : "");
		return -1;
	}
	srv.vhost = lws_get_vhost_by_name(srv.ctx, "default");
	if (!srv.vhost) {
		log_warn("no default vhost");
		return -1;
	}
	if (more_vhosts(&info, front) < 0)
		return -1;
	if (watch_listener_and_signals(front) < 0)
		return -1;
	acc_find_listeners();
	acc_reserve();
	return 0;
}

/* ---------------------------------------------------- the loop's turns */

/* How long the loop's turns take (issue 50): a turn is one pass of
 * lws_service (its ripe timers, the poll, every fd it found ready) and the
 * accept backoff after it, measured in this thread's CPU time from the end
 * of one turn to the end of the next. lws waits in its poll inside
 * lws_service, so a monotonic clock around it would count the wait; the
 * thread's CPU clock counts what the turn did and not the time the
 * scheduler gave to others (a loaded machine). One clock read a turn. */
static struct {
	uint64_t max_ns;          /* the longest since server_turns_take */
	uint64_t n;               /* turns since start */
} turns;

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void server_turns_take(uint64_t *max_ns, uint64_t *n)
{
	*max_ns = turns.max_ns;
	*n = turns.n;
	turns.max_ns = 0;
}

/* TERMD_TEST_TURN_BURN_MS=N (the tests' hook): the loop's first turn
 * spends N ms of CPU, a known slow turn */
static void test_burn(void)
{
	const char *e = getenv("TERMD_TEST_TURN_BURN_MS");
	long ms = e ? strtol(e, NULL, 10) : 0;
	if (ms <= 0)
		return;
	uint64_t until = thread_cpu_ns() + (uint64_t)ms * 1000000u;
	while (thread_cpu_ns() < until)
		;
}

void server_run(void)
{
	uint64_t t0 = thread_cpu_ns();
	test_burn();
	while (!srv.stopping) {
		if (lws_service(srv.ctx, 0) < 0)
			break;
		if (acc.pending)
			acc_rest();
		acc_reserve();
		uint64_t t1 = thread_cpu_ns();
		if (t1 - t0 > turns.max_ns)
			turns.max_ns = t1 - t0;
		turns.n++;
		t0 = t1;
	}
}

/* empties the folder open on dfd, depth folders deep at most: files and
 * symlinks unlinked (a symlink is never followed), folders emptied then
 * removed; closes dfd */
static void rm_tree_at(int dfd, int depth)
{
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (unlinkat(dfd, e->d_name, 0) == 0 || (errno != EISDIR && errno != EPERM))
			continue;
		int sub = depth > 0 ? openat(dfd, e->d_name,
					     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
		if (sub >= 0)
			rm_tree_at(sub, depth - 1);
		unlinkat(dfd, e->d_name, AT_REMOVEDIR);
	}
	closedir(d);
}

/* the runtime folder and all it holds: termd's own flat files (rc files,
 * sockets, outputs) and each plugin's plugin-<name>/ folder, with what its
 * program left in it */
static void rm_rf(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0)
		rm_tree_at(fd, 16);
	rmdir(dir);
}

int server_front_wanted(void)
{
	return opts.front && !opts.listen_none && (!opts.listen_unix || opts.nextra);
}

unsigned server_listener_api(struct lws *wsi)
{
	struct lws *nw = wsi ? lws_get_network_wsi(wsi) : NULL;
	struct lws_vhost *vh = wsi ? lws_get_vhost(nw ? nw : wsi) : NULL;
	const char *name = vh ? lws_get_vhost_name(vh) : NULL;
	unsigned a = 0;
	if (name && strncmp(name, "listen-", 7) == 0) {
		int i = atoi(name + 7) - 1;   /* more_vhosts' names */
		if (i >= 0 && i < opts.nextra)
			a = opts.extra_api[i];
	} else if (vh && vh == srv.vhost) {
		a = opts.listen_api;
	}
	return a ? a : TD_API_DEFAULT;
}

int server_via_front(struct lws *wsi)
{
	if (!srv.front_sock || !wsi)
		return 0;
	struct lws *nw = lws_get_network_wsi(wsi);
	int fd = (int)lws_get_socket_fd(nw ? nw : wsi);
	struct sockaddr_un su;
	socklen_t l = sizeof su;
	memset(&su, 0, sizeof su);
	if (fd < 0 || getsockname(fd, (struct sockaddr *)&su, &l) < 0 || su.sun_family != AF_UNIX)
		return 0;
	return strncmp(su.sun_path, srv.front_sock, sizeof su.sun_path) == 0;
}

void server_close_loop(void)
{
	/* closes every connection and adopted fd (ptys, pipes) */
	if (srv.ctx)
		lws_context_destroy(srv.ctx);
	srv.ctx = NULL;
	if (acc.reserve >= 0)
		close(acc.reserve);
	acc.reserve = -1;
}

void server_shutdown(void)
{
	server_close_loop();
	if (srv.unix_bound)
		unlink(opts.listen_unix);
	free(srv.front_sock);
	srv.front_sock = NULL;
	if (srv.rundir) {
		rm_rf(srv.rundir);
		free(srv.rundir);
		srv.rundir = NULL;
	}
}
