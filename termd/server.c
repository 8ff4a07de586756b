/* server.c — the listener and event loop: the libwebsockets context (TCP or
 * unix socket), HTTP `GET /healthz`, token checks before any upgrade, the
 * `/events` WebSocket (fragment reassembly, size limit, per-connection
 * outgoing queue written only when writable), the signalfd for SIGCHLD and
 * SIGTERM, and timers. Every fd (listener, sockets, ptys, signals) belongs
 * to this one loop. */
#include "termd.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <dirent.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>


struct server srv;
struct termd_opts opts;
static int sig_fd = -1;
static char sig_tag;   /* opaque marker of the signalfd wsi */

enum auth_level { AUTH_NONE, AUTH_VIEW, AUTH_FULL };

/* constant-time comparison of a presented token with the expected one */
static int token_eq(const char *got, const char *want)
{
	size_t gl = strlen(got), wl = strlen(want);
	unsigned char diff = (unsigned char)(gl != wl);
	for (size_t i = 0; i < wl; i++)
		diff |= (unsigned char)(want[i] ^ (i < gl ? got[i] : 0));
	return diff == 0;
}

static enum auth_level auth_check(struct lws *wsi);

int server_auth_level(struct lws *wsi)
{
	return (int)auth_check(wsi);
}

static enum auth_level auth_check(struct lws *wsi)
{
	if (!opts.token && !opts.view_token)
		return AUTH_FULL;
	char got[640] = "";
	char hdr[600];
	if (lws_hdr_copy(wsi, hdr, sizeof hdr, WSI_TOKEN_HTTP_AUTHORIZATION) > 0 &&
	    strncasecmp(hdr, "Bearer ", 7) == 0) {
		snprintf(got, sizeof got, "%s", hdr + 7);
	} else {
		const char *v = lws_get_urlarg_by_name(wsi, "token=", hdr, sizeof hdr);
		if (v)
			snprintf(got, sizeof got, "%s", v);
	}
	if (!got[0])
		return AUTH_NONE;
	if (opts.token && token_eq(got, opts.token))
		return AUTH_FULL;
	if (opts.view_token && token_eq(got, opts.view_token))
		return AUTH_VIEW;
	return AUTH_NONE;
}

static void uri_path(struct lws *wsi, char *out, size_t n)
{
	out[0] = 0;
	if (lws_hdr_copy(wsi, out, (int)n, WSI_TOKEN_GET_URI) < 0)
		out[0] = 0;
	char *q = strchr(out, '?');
	if (q)
		*q = 0;
}

static void conn_free_queue(struct conn *c);

void conn_send(struct conn *c, const char *data, size_t len)
{
	if (c->closing)
		return;
	/* one message is always taken, however large: the limit is on a
	 * backlog, and an answer bigger than it must still reach a client
	 * that reads */
	if (c->out_bytes && c->out_bytes + len > opts.max_pending) {
		/* it is not reading: drop it now (it can reconnect and subscribe
		 * from the last seq it saw); waiting for the queue to drain would
		 * pin the memory for as long as it stalls */
		log_warn("client not reading: %zu bytes pending, disconnecting it", c->out_bytes);
		c->closing = 1;
		conn_free_queue(c);
		lws_set_timeout(c->wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
		return;
	}
	struct outmsg *m = xmalloc(sizeof *m);
	m->next = NULL;
	m->len = len;
	m->data = xmalloc(LWS_PRE + len);
	memcpy(m->data + LWS_PRE, data, len);
	if (c->out_tail)
		c->out_tail->next = m;
	else
		c->out_head = m;
	c->out_tail = m;
	c->out_bytes += len;
	lws_callback_on_writable(c->wsi);
}

static void conn_free_queue(struct conn *c)
{
	while (c->out_head) {
		struct outmsg *m = c->out_head;
		c->out_head = m->next;
		free(m->data);
		free(m);
	}
	c->out_tail = NULL;
	c->out_bytes = 0;
	buf_free(&c->rx);
}

static int http_reply(struct lws *wsi, int status, const char *ctype, const char *body)
{
	unsigned char buf[LWS_PRE + 1024];
	unsigned char *start = buf + LWS_PRE, *p = start, *end = buf + sizeof buf - 1;
	size_t blen = strlen(body);
	if (lws_add_http_common_headers(wsi, (unsigned int)status, ctype, (lws_filepos_t)blen, &p, end))
		return -1;
	if (lws_finalize_write_http_header(wsi, start, &p, end))
		return -1;
	/* small bodies: written at once, then the transaction ends */
	unsigned char *b = xmalloc(LWS_PRE + blen + 1);
	memcpy(b + LWS_PRE, body, blen);
	int w = lws_write(wsi, b + LWS_PRE, blen, LWS_WRITE_HTTP_FINAL);
	free(b);
	if (w < (int)blen)
		return -1;
	if (lws_http_transaction_completed(wsi))
		return -1;
	return 0;
}

static int on_http(struct lws *wsi, const char *uri)
{
	if (strcmp(uri, TD_PATH_HEALTH) == 0) {
		char body[256];
		snprintf(body, sizeof body,
			 "{\"ok\":true,\"version\":\"%s\",\"sessions\":%d,\"uptime_s\":%.3f}",
			 TERMD_VERSION, srv.nsessions,
			 (double)(mono_us() - srv.start_mono) / 1e6);
		return http_reply(wsi, 200, "application/json", body);
	}
	if (auth_check(wsi) == AUTH_NONE)
		return http_reply(wsi, 401, "text/plain", "unauthorized\n");
	return http_reply(wsi, 404, "text/plain", "not found\n");
}

static void on_rx(struct conn *c, struct lws *wsi, const char *in, size_t len)
{
	if (lws_is_first_fragment(wsi) && c->rx.len == 0 && !c->rx_discard)
		c->rx_total = 0;
	c->rx_total += len;
	if (!c->rx_discard) {
		if (c->rx_total > opts.max_frame) {
			c->rx_discard = 1;
			buf_free(&c->rx);
		} else {
			buf_append(&c->rx, in, len);
		}
	}
	if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi) > 0)
		return;
	if (c->rx_discard) {
		events_error(c, NULL, TD_ERR_TOO_LARGE, "frame of %zu bytes is over the limit of %zu bytes",
			     c->rx_total, opts.max_frame);
		c->rx_discard = 0;
		c->rx_total = 0;
		return;
	}
	buf_t msg = c->rx;
	memset(&c->rx, 0, sizeof c->rx);
	c->rx_total = 0;
	actions_dispatch(c, msg.p ? msg.p : "", msg.len);
	buf_free(&msg);
}

static int cb_main(struct lws *wsi, enum lws_callback_reasons reason, void *user,
		   void *in, size_t len)
{
	struct conn *c = user;
	char path[512];
	switch (reason) {
	case LWS_CALLBACK_HTTP:
		return on_http(wsi, in ? (const char *)in : "");
	case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: {
		/* answer with a status before any upgrade: 401, 404, 403 */
		enum auth_level a = auth_check(wsi);
		if (a == AUTH_NONE) {
			http_reply(wsi, 401, "text/plain", "unauthorized\n");
			return -1;
		}
		uri_path(wsi, path, sizeof path);
		size_t tl = strlen(TD_PATH_TTY);
		if (strncmp(path, TD_PATH_TTY, tl) == 0) {
			struct session *s = td_valid_session_name(path + tl) ? session_find(path + tl) : NULL;
			if (!s) {
				http_reply(wsi, 404, "text/plain", "no such session\n");
				return -1;
			}
			if ((size_t)s->nviewers >= opts.max_viewers) {
				http_reply(wsi, 503, "text/plain",
					   "this session has as many viewers as termd allows (--max-viewers)\n");
				return -1;
			}
			char mode[16];
			const char *m = lws_get_urlarg_by_name(wsi, "mode=", mode, sizeof mode);
			if (m && strcmp(m, "rw") == 0 && a != AUTH_FULL) {
				http_reply(wsi, 403, "text/plain", "mode=rw needs the full token\n");
				return -1;
			}
		} else if (strcmp(path, TD_PATH_EVENTS) != 0 && strcmp(path, TD_PATH_EVENTS "/") != 0) {
			http_reply(wsi, 404, "text/plain", "not found\n");
			return -1;
		}
		return 0;
	}
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: {
		uri_path(wsi, path, sizeof path);
		if (strcmp(path, TD_PATH_EVENTS) != 0 && strcmp(path, TD_PATH_EVENTS "/") != 0)
			return 1;
		enum auth_level a = auth_check(wsi);
		if (a == AUTH_NONE)
			return 1;
		memset(c, 0, sizeof *c);
		c->readonly = a == AUTH_VIEW;
		return 0;
	}
	case LWS_CALLBACK_ESTABLISHED:
		c->wsi = wsi;
		c->next = srv.conns;
		srv.conns = c;
		events_hello(c);
		break;
	case LWS_CALLBACK_RECEIVE:
		if (!c->closing)
			on_rx(c, wsi, in, len);
		break;
	case LWS_CALLBACK_SERVER_WRITEABLE: {
		struct outmsg *m = c->out_head;
		if (!m)
			return c->closing ? -1 : 0;
		int w = lws_write(wsi, m->data + LWS_PRE, m->len, LWS_WRITE_TEXT);
		c->out_head = m->next;
		if (!c->out_head)
			c->out_tail = NULL;
		c->out_bytes -= m->len;
		free(m->data);
		free(m);
		if (w < 0)
			return -1;
		if (c->out_head || c->closing)
			lws_callback_on_writable(wsi);
		break;
	}
	case LWS_CALLBACK_CLOSED:
		for (struct conn **pp = &srv.conns; *pp; pp = &(*pp)->next) {
			if (*pp == c) {
				*pp = c->next;
				break;
			}
		}
		c->closing = 1;
		pending_conn_gone(c);
		conn_free_queue(c);
		break;
	default:
		break;
	}
	return 0;
}

static int cb_raw(struct lws *wsi, enum lws_callback_reasons reason, void *user,
		  void *in, size_t len)
{
	if (lws_get_opaque_user_data(wsi) == &sig_tag) {
		if (reason == LWS_CALLBACK_RAW_RX_FILE) {
			struct signalfd_siginfo si;
			while (read(sig_fd, &si, sizeof si) == (ssize_t)sizeof si) {
				if (si.ssi_signo == SIGCHLD) {
					child_reap_all();
				} else {
					log_info("signal %u: shutting down", si.ssi_signo);
					srv.stopping = 1;
				}
			}
		}
		return 0;
	}
	return session_raw_callback(wsi, reason, user, in, len);
}

static const struct lws_protocols protocols[] = {
	{TD_SUBPROTO_EVENTS, cb_main, sizeof(struct conn), 65536, 0, NULL, 0},
	{TD_SUBPROTO_TTY, tty_callback, sizeof(struct viewer), 65536, 0, NULL, 0},
	{"termd-raw", cb_raw, 0, 0, 0, NULL, 0},
	{NULL, NULL, 0, 0, 0, NULL, 0},
};

int server_adopt_fd(int fd, void *user)
{
	lws_adopt_desc_t d;
	memset(&d, 0, sizeof d);
	d.vh = srv.vhost;
	d.type = LWS_ADOPT_RAW_FILE_DESC;
	d.fd.filefd = fd;
	d.vh_prot_name = "termd-raw";
	d.opaque = user;
	struct lws *w = lws_adopt_descriptor_vhost_via_info(&d);
	if (!w)
		return -1;
	if (user != &sig_tag)
		((struct session *)user)->wsi = w;
	return 0;
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
		log_warn("cannot listen on %s: not an address", host);
		return -1;
	}
	int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		log_warn("cannot listen on %s:%d: %s", host, port, strerror(errno));
		return -1;
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	int r = bind(fd, (struct sockaddr *)&ss, len);
	int e = errno;
	close(fd);
	if (r < 0) {
		log_warn("cannot listen on %s:%d: %s", host, port, strerror(e));
		return -1;
	}
	return 0;
}

int server_init(void)
{
	srv.start_mono = mono_us();
	char tmpl[] = "/tmp/termd-XXXXXX";
	const char *base = getenv("TMPDIR");
	buf_t dir = {0};
	buf_printf(&dir, "%s/termd-XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(dir.p)) {
		buf_free(&dir);
		if (!mkdtemp(tmpl)) {
			log_warn("cannot create a runtime directory: %s", strerror(errno));
			return -1;
		}
		srv.rundir = xstrdup(tmpl);
	} else {
		srv.rundir = buf_steal(&dir);
	}

	lws_set_log_level(LLL_ERR | LLL_WARN | (log_verbose ? LLL_NOTICE : 0), lws_log);
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof info);
	info.protocols = protocols;
	info.gid = (gid_t)-1;
	info.uid = (uid_t)-1;
	info.max_http_header_data = 4096;
	info.pt_serv_buf_size = 65536;
	info.options = LWS_SERVER_OPTION_VALIDATE_UTF8 * 0;
	mode_t old_umask = 0;
	if (opts.listen_unix) {
		info.options |= LWS_SERVER_OPTION_UNIX_SOCK;
		info.iface = opts.listen_unix;
		info.port = 0;
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
		old_umask = umask(077);
	} else {
		info.iface = opts.listen_host;
		info.port = opts.listen_port;
		/* lws opens an IPv6 (dual-stack) socket by default and cannot bind
		 * one to an IPv4 address: it then listened on every interface,
		 * 127.0.0.1 included. An IPv4 address gets an IPv4 socket. */
		if (!strchr(opts.listen_host, ':'))
			info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
		/* and when lws cannot bind an address it says so in its log and
		 * serves nothing: try the address first, to fail clearly */
		if (probe_bind(opts.listen_host, opts.listen_port) < 0)
			return -1;
	}
	if (opts.tls_cert) {
		info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
		info.ssl_cert_filepath = opts.tls_cert;
		info.ssl_private_key_filepath = opts.tls_key;
	}
	srv.ctx = lws_create_context(&info);
	if (opts.listen_unix)
		umask(old_umask);
	if (!srv.ctx) {
		log_warn("cannot listen on %s%s", opts.listen_unix ? opts.listen_unix : opts.listen_host,
			 opts.tls_cert ? " (or the TLS certificate and key were not accepted)" : "");
		return -1;
	}
	srv.vhost = lws_get_vhost_by_name(srv.ctx, "default");
	if (!srv.vhost) {
		log_warn("no default vhost");
		return -1;
	}
	if (opts.listen_unix) {
		chmod(opts.listen_unix, 0600);
		srv.unix_bound = 1;   /* ours to remove at exit */
	}

	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, NULL);
	sig_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sig_fd < 0 || server_adopt_fd(sig_fd, &sig_tag) < 0) {
		log_warn("cannot watch signals");
		return -1;
	}
	return 0;
}

void server_run(void)
{
	while (!srv.stopping) {
		if (lws_service(srv.ctx, 0) < 0)
			break;
	}
}

static void rm_rf(const char *dir)
{
	/* the runtime directory holds only flat files */
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	buf_t p = {0};
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		buf_reset(&p);
		buf_printf(&p, "%s/%s", dir, e->d_name);
		unlink(p.p);
	}
	closedir(d);
	buf_free(&p);
	rmdir(dir);
}

void server_shutdown(void)
{
	/* timers and waiters go while the loop still exists; then the loop
	 * closes every connection and pty; then the sessions are freed */
	session_stop_all();
	if (srv.ctx)
		lws_context_destroy(srv.ctx);
	srv.ctx = NULL;
	session_free_all();
	if (srv.unix_bound)
		unlink(opts.listen_unix);
	if (srv.rundir) {
		rm_rf(srv.rundir);
		free(srv.rundir);
		srv.rundir = NULL;
	}
}
