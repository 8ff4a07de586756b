/* link.c — dial-out links (--connect URL): termd opens a WebSocket to a
 * backend (offering termd.events.v1, with `Authorization: Bearer` from
 * --connect-token-file and `X-Termd-Sandbox` from --sandbox-id) and serves
 * the /events channel over it through net/conn.c's own functions, exactly
 * as for a client that dialed in with the full token: hello first, every
 * action, the event stream. It stays connected: exponential backoff with
 * jitter between --connect-backoff's bounds, TCP keepalive, a WebSocket
 * ping after --connect-ping idle seconds and a hang-up after twice that,
 * and a dial whose handshake is not done in twice that given up.
 * Each link's state is on /healthz. Its own vhost (no listener) holds the
 * client TLS context: the system's CAs or --cacert. */
#include "door.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <strings.h>
#include <unistd.h>

enum link_state { LINK_WAITING, LINK_CONNECTING, LINK_UP };

/* where a ws:// or wss:// URL points */
struct target {
	char *url;                 /* as given */
	char *host;                /* address to connect to */
	char *host_hdr;            /* Host header (with a port that is not the default) */
	char *path;
	int port, tls;
};

struct link {
	struct conn conn;          /* the /events channel on this link's socket */
	struct target t;
	struct lws *wsi;           /* the socket, or NULL */
	enum link_state state;
	unsigned failures;         /* attempts in a row that did not connect */
	uint64_t attempts;         /* every dial */
	uint64_t connections;      /* every established link */
	double since;              /* wall time it was established (when up) */
	char last_error[256];
	char cert_error[128];      /* why the backend's certificate was refused, this attempt */
	struct lws *dialing;       /* this attempt's connection, until it is up or fails */
	lws_sorted_usec_list_t retry;
	lws_sorted_usec_list_t deadline;   /* this attempt's handshake must be done by then */
};

static struct link *links;
static size_t nlinks;
static struct lws_vhost *link_vhost;
static int link_stopping;
static lws_retry_bo_t link_policy;

/* ---------------------------------------------------------------- URLs */

/* ws[s]://host[:port][/path]: 0, or -1 with why */
static int link_parse(struct target *l, const char *url, char *err, size_t errlen)
{
	const char *p;
	if (!strncasecmp(url, "ws://", 5)) {
		l->tls = 0;
		p = url + 5;
	} else if (!strncasecmp(url, "wss://", 6)) {
		l->tls = 1;
		p = url + 6;
	} else {
		snprintf(err, errlen, "--connect %s: wants a ws:// or wss:// URL", url);
		return -1;
	}
	const char *slash = strchr(p, '/');
	size_t hostport = slash ? (size_t)(slash - p) : strlen(p);
	const char *hend, *portp = NULL;
	const char *hstart = p;
	if (*p == '[') {
		const char *rb = memchr(p, ']', hostport);
		if (!rb) {
			snprintf(err, errlen, "--connect %s: unclosed [ in the host", url);
			return -1;
		}
		hstart = p + 1;
		hend = rb;
		if (rb + 1 < p + hostport) {
			if (rb[1] != ':') {
				snprintf(err, errlen, "--connect %s: bad host", url);
				return -1;
			}
			portp = rb + 2;
		}
	} else {
		const char *colon = memchr(p, ':', hostport);
		hend = colon ? colon : p + hostport;
		if (colon)
			portp = colon + 1;
	}
	if (hend == hstart) {
		snprintf(err, errlen, "--connect %s: no host", url);
		return -1;
	}
	l->port = l->tls ? 443 : 80;
	if (portp) {
		char *end;
		long port = strtol(portp, &end, 10);
		if (end != p + hostport || port < 1 || port > 65535) {
			snprintf(err, errlen, "--connect %s: bad port", url);
			return -1;
		}
		l->port = (int)port;
	}
	for (const char *c = p; c < p + hostport; c++) {
		if ((unsigned char)*c <= ' ' || *c == '@' || *c == 0x7f) {
			snprintf(err, errlen, "--connect %s: bad host", url);
			return -1;
		}
	}
	for (const char *c = slash ? slash : ""; *c; c++) {
		if ((unsigned char)*c <= ' ' || *c == 0x7f || *c == '#') {
			snprintf(err, errlen, "--connect %s: bad path", url);
			return -1;
		}
	}
	l->url = xstrdup(url);
	l->host = xstrndup(hstart, (size_t)(hend - hstart));
	l->host_hdr = portp ? xstrndup(p, hostport) : xstrndup(p, (size_t)(hend - p) + (*p == '[' ? 1 : 0));
	l->path = xstrdup(slash ? slash : "/");
	return 0;
}

static void target_free(struct target *t)
{
	free(t->url);
	free(t->host);
	free(t->host_hdr);
	free(t->path);
	memset(t, 0, sizeof *t);
}

int link_check_url(const char *url, char *err, size_t errlen)
{
	struct target t;
	memset(&t, 0, sizeof t);
	if (link_parse(&t, url, err, errlen) < 0)
		return -1;
	target_free(&t);
	return 0;
}

/* Start a client connection to t (at address, numeric, else t->host)
 * offering subprotocol proto (the vhost's protocol of that name serves it);
 * arg is the wsi's opaque user data. The Host header (and so the name the
 * certificate must carry) stays t's. */
static struct lws *link_connect(const struct target *t, const char *address, const char *proto,
				void *arg, void *userdata, struct lws **pwsi)
{
	struct lws_client_connect_info i;
	memset(&i, 0, sizeof i);
	i.context = srv.ctx;
	i.vhost = link_vhost;
	i.address = address ? address : t->host;
	i.port = t->port;
	i.path = t->path;
	i.host = t->host_hdr;
	i.ssl_connection = t->tls ? LCCSCF_USE_SSL : 0;
	i.protocol = proto;
	i.local_protocol_name = proto;
	i.ietf_version_or_minus_one = -1;
	i.userdata = userdata;
	i.opaque_user_data = arg;
	i.pwsi = pwsi;
	i.retry_and_idle_policy = &link_policy;
	return lws_client_connect_via_info(&i);
}

/* ------------------------------------------------------- name lookups */

/* lws resolves a name with a blocking getaddrinfo in the loop (no async
 * DNS in this build): a slow resolver would stall every session. So a
 * link's host name is looked up in a thread of its own, and the answer
 * comes back through a pipe watched by the loop. */
struct lookup {
	int refs;                  /* the thread's and the loop's (atomic) */
	char *host;
	char addr[INET6_ADDRSTRLEN];
	char err[160];
	int rfd, wfd;
	void (*done)(void *arg, const char *addr, const char *err);
	void *arg;                 /* NULL once the loop side let go */
};

static void lookup_unref(struct lookup *q)
{
	if (__atomic_sub_fetch(&q->refs, 1, __ATOMIC_ACQ_REL) == 0) {
		free(q->host);
		free(q);
	}
}

static void *lookup_thread(void *p)
{
	struct lookup *q = p;
	struct addrinfo hints, *ai = NULL;
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	int r = getaddrinfo(q->host, NULL, &hints, &ai);
	if (r != 0 || !ai)
		snprintf(q->err, sizeof q->err, "cannot resolve %s: %s", q->host, gai_strerror(r));
	else if (getnameinfo(ai->ai_addr, ai->ai_addrlen, q->addr, sizeof q->addr, NULL, 0,
			     NI_NUMERICHOST) != 0)
		snprintf(q->err, sizeof q->err, "cannot use the address of %s", q->host);
	if (ai)
		freeaddrinfo(ai);
	char x = 1;
	if (write(q->wfd, &x, 1) < 0) {
		/* the loop is gone */
	}
	close(q->wfd);
	lookup_unref(q);
	return NULL;
}

static int lookup_ready(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
{
	(void)wsi;
	struct lookup *q = arg;
	if (!q)
		return 0;
	if (reason == LWS_CALLBACK_RAW_RX_FILE || reason == LWS_CALLBACK_RAW_CLOSE_FILE) {
		lws_set_opaque_user_data(wsi, NULL);
		if (q->done && !link_stopping)
			q->done(q->arg, q->err[0] ? NULL : q->addr, q->err);
		lookup_unref(q);
		return reason == LWS_CALLBACK_RAW_RX_FILE ? -1 : 0;   /* lws closes rfd */
	}
	return 0;
}

/* done(arg, address, NULL) or done(arg, NULL, why), later, in the loop;
 * a numeric host at once. -1 if no lookup could start (why in err). */
static int lookup_start(const char *host, void (*done)(void *, const char *, const char *),
			void *arg, char *err, size_t errlen)
{
	struct in6_addr a6;
	struct in_addr a4;
	if (inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1) {
		done(arg, host, NULL);
		return 0;
	}
	int fds[2];
	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0) {
		snprintf(err, errlen, "cannot resolve %s: %s", host, strerror(errno));
		return -1;
	}
	struct lookup *q = xcalloc(1, sizeof *q);
	q->refs = 2;
	q->host = xstrdup(host);
	q->rfd = fds[0];
	q->wfd = fds[1];
	q->done = done;
	q->arg = arg;
	if (!server_adopt_fd(q->rfd, lookup_ready, q)) {
		close(fds[0]);
		close(fds[1]);
		free(q->host);
		free(q);
		snprintf(err, errlen, "cannot resolve %s: cannot watch the lookup", host);
		return -1;
	}
	pthread_t th;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 256 * 1024);
	if (pthread_create(&th, &at, lookup_thread, q) != 0) {
		/* the loop side's close (RAW_CLOSE_FILE) reports it */
		snprintf(q->err, sizeof q->err, "cannot resolve %s: no thread", host);
		close(q->wfd);
		lookup_unref(q);   /* the thread's */
	}
	pthread_attr_destroy(&at);
	return 0;
}

/* -------------------------------------------------------------- dialing */

static void link_dial(struct link *l);

static void link_retry_cb(lws_sorted_usec_list_t *sul)
{
	struct link *l = lws_container_of(sul, struct link, retry);
	if (!link_stopping)
		link_dial(l);
}

/* The next attempt after `failures` in a row: min·2^failures capped at
 * max, then jittered to between half and all of it (never under min), so
 * many sandboxes cut off together do not come back in step. */
static uint64_t link_backoff_us(struct link *l)
{
	double d = opts.backoff_min;
	for (unsigned i = 0; i < l->failures && d < opts.backoff_max; i++)
		d *= 2;
	if (d > opts.backoff_max)
		d = opts.backoff_max;
	uint32_t r = 0;
	lws_get_random(srv.ctx, &r, sizeof r);
	d = d * (0.5 + 0.5 * ((double)r / 4294967295.0));
	if (d < opts.backoff_min)
		d = opts.backoff_min;
	uint64_t us = (uint64_t)(d * 1e6);
	return us ? us : 1;
}

static void link_schedule(struct link *l)
{
	l->wsi = NULL;
	l->dialing = NULL;
	l->state = LINK_WAITING;
	server_timer(&l->deadline, NULL, 0);
	if (link_stopping)
		return;
	uint64_t us = link_backoff_us(l);
	l->failures++;
	log_debug("link %s: next attempt in %.2f s", l->t.url, (double)us / 1e6);
	server_timer(&l->retry, link_retry_cb, us);
}

static void link_fail(struct link *l, const char *why)
{
	snprintf(l->last_error, sizeof l->last_error, "%s", why && *why ? why : "connection failed");
	if (!link_stopping)   /* termd closing its own links says nothing */
		log_warn("link %s: %s", l->t.url, l->last_error);
}

/* Why the backend would not take the link, in words rather than lws's
 * ("HS: ws upgrade unauthorized", "HS: ws upgrade response not 101"): the
 * upgrade's HTTP status when there was one, with the option to look at. */
static void link_refusal(struct lws *wsi, const char *lws_says, char *why, size_t n)
{
	unsigned int st = lws_http_client_http_response(wsi);
	if (st == 401 || st == 403 || strstr(lws_says, "unauthorized"))
		snprintf(why, n, "the backend refused this termd's credential%s%.0u: check "
			 "--connect-token-file (the token the backend expects for this sandbox)",
			 st ? " with HTTP " : "", st);
	else if (st && st != 101)
		snprintf(why, n, "the backend answered HTTP %u, not a WebSocket upgrade: check "
			 "the --connect URL (its path)", st);
	else
		snprintf(why, n, "%s", lws_says);
}

static void link_resolved(void *arg, const char *addr, const char *err)
{
	struct link *l = arg;
	if (!addr) {
		link_fail(l, err);
		link_schedule(l);
		return;
	}
	struct lws *wsi = link_connect(&l->t, addr, TD_SUBPROTO_EVENTS, l, l, &l->wsi);
	if (wsi && l->state == LINK_CONNECTING)
		l->dialing = wsi;
	if (!wsi && l->state == LINK_CONNECTING) {
		/* failed at once, and no callback said so */
		link_fail(l, "cannot start a connection");
		link_schedule(l);
	}
}

/* A dial whose WebSocket handshake is not done within twice --connect-ping
 * (a backend that took the connection and never answered the upgrade, a
 * connection lost without a word): lws puts no deadline on it, and the
 * link would wait for good. It is given up (its callbacks are no longer
 * the link's) and the next attempt scheduled. While the name is still
 * being looked up, the lookup's answer is waited for. */
static void link_deadline_cb(lws_sorted_usec_list_t *sul)
{
	struct link *l = lws_container_of(sul, struct link, deadline);
	if (link_stopping || l->state != LINK_CONNECTING)
		return;
	if (!l->dialing) {
		server_timer(&l->deadline, link_deadline_cb, (uint64_t)opts.connect_ping * 1000000);
		return;
	}
	struct lws *wsi = l->dialing;
	lws_set_opaque_user_data(wsi, NULL);
	lws_set_timeout(wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
	char why[96];
	snprintf(why, sizeof why, "no WebSocket handshake from the backend within %u s",
		 2 * opts.connect_ping);
	link_fail(l, why);
	link_schedule(l);
}

static void link_dial(struct link *l)
{
	char err[200];
	l->attempts++;
	l->cert_error[0] = 0;
	l->state = LINK_CONNECTING;
	l->dialing = NULL;
	server_timer(&l->deadline, link_deadline_cb, (uint64_t)opts.connect_ping * 2000000);
	if (lookup_start(l->t.host, link_resolved, l, err, sizeof err) < 0) {
		link_fail(l, err);
		link_schedule(l);
	}
}

/* ------------------------------------------------------------ callbacks */

/* Authorization and X-Termd-Sandbox into the handshake: 0, or -1 if they
 * do not fit */
static int link_headers(struct lws *wsi, unsigned char **p, size_t room)
{
	unsigned char *end = *p + room;
	if (opts.connect_token) {
		buf_t v = {0};
		buf_printf(&v, "Bearer %s", opts.connect_token);
		int r = lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION,
						     (const unsigned char *)v.p, (int)v.len, p, end);
		buf_free(&v);
		if (r)
			return -1;
	}
	if (lws_add_http_header_by_name(wsi, (const unsigned char *)"X-Termd-Sandbox:",
					(const unsigned char *)opts.sandbox_id,
					(int)strlen(opts.sandbox_id), p, end))
		return -1;
	return 0;
}

static int link_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
			 void *in, size_t len)
{
	(void)user;
	if (reason == LWS_CALLBACK_OPENSSL_LOAD_EXTRA_CLIENT_VERIFY_CERTS) {
		/* the vhost's client context: with no --cacert, the system's CAs
		 * (SSL_CERT_FILE / SSL_CERT_DIR honoured), as termctl does */
		if (!opts.cacert && SSL_CTX_set_default_verify_paths((SSL_CTX *)user) != 1)
			log_warn("links: cannot load the system's CA certificates");
		return 0;
	}
	struct link *l = wsi ? lws_get_opaque_user_data(wsi) : NULL;
	if (!l)
		return 0;
	switch (reason) {
	case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER:
		if (l->state == LINK_CONNECTING)
			l->dialing = wsi;   /* (lws may call before the dial returns) */
		return link_headers(wsi, (unsigned char **)in, len) < 0 ? -1 : 0;
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
		if (l->state != LINK_CONNECTING)
			break;
		/* lws says only "connect SSL err 1": OpenSSL's verdict says why */
		SSL *ssl = l->t.tls ? lws_get_ssl(wsi) : NULL;
		long v = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
		if (v != X509_V_OK)
			snprintf(l->cert_error, sizeof l->cert_error, "%s", X509_verify_cert_error_string(v));
		char why[256];
		if (l->cert_error[0])
			snprintf(why, sizeof why, "certificate refused: %s", l->cert_error);
		else
			link_refusal(wsi, in ? (const char *)in : "", why, sizeof why);
		link_fail(l, why);
		link_schedule(l);
		break;
	}
	case LWS_CALLBACK_CLIENT_ESTABLISHED:
		server_timer(&l->deadline, NULL, 0);
		l->dialing = NULL;
		l->wsi = wsi;
		l->state = LINK_UP;
		l->failures = 0;
		l->connections++;
		l->since = wall_s();
		log_info("link %s: connected", l->t.url);
		memset(&l->conn, 0, sizeof l->conn);
		conn_open(&l->conn, wsi);   /* hello first */
		break;
	case LWS_CALLBACK_CLIENT_RECEIVE:
		conn_receive(&l->conn, in, len);
		break;
	case LWS_CALLBACK_CLIENT_WRITEABLE:
		return conn_writable(&l->conn);
	case LWS_CALLBACK_WSI_DESTROY:
		/* this attempt's connection gone with no error said and never up:
		 * a failed attempt (and no deadline left on a freed wsi) */
		if (l->state == LINK_CONNECTING && wsi == l->dialing) {
			link_fail(l, "the connection closed before its handshake");
			link_schedule(l);
		}
		break;
	case LWS_CALLBACK_CLIENT_CLOSED:
		if (l->state != LINK_UP)
			break;
		conn_closed(&l->conn);
		link_fail(l, "the connection was closed");
		link_schedule(l);
		break;
	default:
		break;
	}
	return 0;
}

/* --------------------------------------------------------------- link.tty */

/* A live terminal termd dials for the backend: one attempt, no reconnect. */
struct ltty {
	struct target t;
	char session[TD_SESSION_NAME_MAX + 1];
	int rw, up;
	cJSON *id;                 /* the link.tty action's id (owned), or NULL */
	struct conn *conn;         /* the link it was asked on (links[] lives on) */
};

static void ltty_free(struct ltty *lt)
{
	target_free(&lt->t);
	cJSON_Delete(lt->id);
	free(lt);
}

static int ltty_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
			 void *in, size_t len)
{
	struct ltty *lt = wsi ? lws_get_opaque_user_data(wsi) : NULL;
	if (!lt)
		return 0;
	enum lws_callback_reasons as;
	switch (reason) {
	case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER:
		return link_headers(wsi, (unsigned char **)in, len) < 0 ? -1 : 0;
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
		lws_set_opaque_user_data(wsi, NULL);
		cJSON *ex = cJSON_CreateObject();
		cJSON_AddStringToObject(ex, "code", td_err_name(TD_ERR_IO_ERROR));
		cJSON_AddStringToObject(ex, "url", lt->t.url);
		buf_t m = {0};
		buf_printf(&m, "cannot dial %s: %s", lt->t.url, in ? (const char *)in : "connection failed");
		events_emit(lt->conn, lt->id, "error", m.p, ex);
		buf_free(&m);
		ltty_free(lt);
		return 0;
	}
	case LWS_CALLBACK_CLIENT_ESTABLISHED: {
		if (!user)
			return -1;
		/* /tty's own code from here on, as for a viewer that dialed in */
		tty_viewer_prepare(user, lt->session, lt->rw);
		lt->up = 1;
		cJSON *ex = cJSON_CreateObject();
		cJSON_AddStringToObject(ex, "session", lt->session);
		cJSON_AddStringToObject(ex, "url", lt->t.url);
		cJSON_AddStringToObject(ex, "mode", lt->rw ? "rw" : "ro");
		events_emit(lt->conn, lt->id, "link.tty", "", ex);
		as = LWS_CALLBACK_ESTABLISHED;
		break;
	}
	case LWS_CALLBACK_CLIENT_RECEIVE:
		as = LWS_CALLBACK_RECEIVE;
		break;
	case LWS_CALLBACK_CLIENT_WRITEABLE:
		as = LWS_CALLBACK_SERVER_WRITEABLE;
		break;
	case LWS_CALLBACK_CLIENT_CLOSED: {
		lws_set_opaque_user_data(wsi, NULL);
		int up = lt->up;
		ltty_free(lt);
		if (!up)
			return 0;
		as = LWS_CALLBACK_CLOSED;
		break;
	}
	default:
		return 0;
	}
	return tty_protocol.callback(wsi, as, user, in, len);
}

static struct lws_protocols link_protocols[] = {
	{TD_SUBPROTO_EVENTS, link_callback, 0, 65536, 0, NULL, 0},
	{TD_SUBPROTO_TTY, ltty_callback, 0, 65536, 0, NULL, 0},   /* size: tty_protocol's */
	{TD_SUBPROTO_PROXY, link_proxy_callback, 0, 65536, 0, NULL, 0},   /* proxy.c */
	{NULL, NULL, 0, 0, 0, NULL, 0},
};

/* link.tty {session, url, mode}: only a link's backend may ask (a client
 * that dialed in could otherwise make termd dial anywhere) */
static int link_tty_action(struct act *a)
{
	struct link *on = NULL;
	for (size_t i = 0; i < nlinks; i++)
		if (a->conn == &links[i].conn)
			on = &links[i];
	if (!on)
		return act_error(a, TD_ERR_FORBIDDEN, "link.tty is for a dial-out link's backend only");
	const char *url = NULL, *mode = NULL;
	struct session *s;
	if (arg_string(a, "url", &url, 1) < 0 || arg_string(a, "mode", &mode, 0) < 0 ||
	    arg_session(a, "session", 0, &s, NULL) < 0)
		return -1;
	if (mode && strcmp(mode, "ro") && strcmp(mode, "rw"))
		return act_error(a, TD_ERR_BAD_REQUEST, "mode must be \"ro\" or \"rw\"");
	struct ltty *lt = xcalloc(1, sizeof *lt);
	char err[600];
	if (link_parse(&lt->t, url, err, sizeof err) < 0) {
		ltty_free(lt);
		return act_error(a, TD_ERR_BAD_REQUEST, "%s", err + strlen("--connect "));
	}
	/* the link's credential goes only where the link goes: its own
	 * scheme, host and port (a wss:// link never dials ws://, nor another
	 * host); the path may differ */
	if (lt->t.tls != on->t.tls || strcasecmp(lt->t.host, on->t.host) != 0 ||
	    lt->t.port != on->t.port) {
		cJSON *ex = cJSON_CreateObject();
		cJSON_AddStringToObject(ex, "url", url);
		ltty_free(lt);
		return act_error_extras(a, TD_ERR_FORBIDDEN, ex,
					"link.tty dials only this link's own scheme, host and port "
					"(%s://%s:%d): nothing was dialed", on->t.tls ? "wss" : "ws",
					on->t.host, on->t.port);
	}
	snprintf(lt->session, sizeof lt->session, "%s", s->name);
	lt->rw = mode && !strcmp(mode, "rw");
	lt->id = a->id ? cJSON_Duplicate(a->id, 1) : NULL;
	lt->conn = a->conn;
	/* answered from the callbacks: link.tty once connected, else an error */
	link_connect(&lt->t, NULL, TD_SUBPROTO_TTY, lt, NULL, NULL);
	return 0;
}

/* link.proxy's dial (proxy.c): from a link's backend only, to its
 * own origin only (scheme, host and port), offering proto */
int link_append_headers(struct lws *wsi, unsigned char **p, size_t room)
{
	return link_headers(wsi, p, room);
}

int link_dial_back(struct conn *c, const char *url, const char *proto, void *arg, td_err *code,
		   char *err, size_t errlen)
{
	struct link *on = NULL;
	for (size_t i = 0; i < nlinks; i++)
		if (c == &links[i].conn)
			on = &links[i];
	if (!on) {
		snprintf(err, errlen, "only a dial-out link's backend may ask that");
		*code = TD_ERR_FORBIDDEN;
		return -1;
	}
	struct target t;
	memset(&t, 0, sizeof t);
	char why[600];
	if (link_parse(&t, url, why, sizeof why) < 0) {
		snprintf(err, errlen, "%s", why + strlen("--connect "));
		*code = TD_ERR_BAD_REQUEST;
		return -1;
	}
	if (t.tls != on->t.tls || t.port != on->t.port || strcasecmp(t.host, on->t.host) != 0) {
		target_free(&t);
		snprintf(err, errlen, "url must be on the link's own origin (scheme, host and port)");
		*code = TD_ERR_FORBIDDEN;
		return -1;
	}
	link_connect(&t, NULL, proto, arg, NULL, NULL);   /* lws keeps copies of t's strings */
	target_free(&t);
	return 0;
}

/* -------------------------------------------------------------- health */

static void link_health(buf_t *b)
{
	buf_puts(b, ",\"links\":[");
	for (size_t i = 0; i < nlinks; i++) {
		struct link *l = &links[i];
		buf_puts(b, i ? ",{\"url\":" : "{\"url\":");
		buf_put_json_string(b, l->t.url, strlen(l->t.url));
		buf_printf(b, ",\"connected\":%s,\"since\":", l->state == LINK_UP ? "true" : "false");
		if (l->state == LINK_UP)
			buf_printf(b, "%.3f", l->since);
		else
			buf_puts(b, "null");
		buf_printf(b, ",\"reconnects\":%llu,\"attempts\":%llu,\"last_error\":",
			   (unsigned long long)(l->connections ? l->connections - 1 : 0),
			   (unsigned long long)l->attempts);
		if (l->last_error[0])
			buf_put_json_string(b, l->last_error, strlen(l->last_error));
		else
			buf_puts(b, "null");
		buf_putc(b, '}');
	}
	buf_putc(b, ']');
}

/* each link's state on /metrics */
static void link_metrics(buf_t *b)
{
	metrics_head(b, "termd_link_up", "gauge", "1 while the dial-out link is connected.");
	for (size_t i = 0; i < nlinks; i++) {
		buf_puts(b, "termd_link_up{url=\"");
		metrics_label(b, links[i].t.url);
		buf_printf(b, "\"} %d\n", links[i].state == LINK_UP);
	}
	metrics_head(b, "termd_link_attempts_total", "counter", "Connections the link has tried.");
	for (size_t i = 0; i < nlinks; i++) {
		buf_puts(b, "termd_link_attempts_total{url=\"");
		metrics_label(b, links[i].t.url);
		buf_printf(b, "\"} %llu\n", (unsigned long long)links[i].attempts);
	}
}

/* ---------------------------------------------------------------- start */

int link_start(char *err, size_t errlen)
{
	if (!opts.nconnect)
		return 0;
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof info);
	info.port = CONTEXT_PORT_NO_LISTEN;
	info.vhost_name = "termd-link";
	link_protocols[1].per_session_data_size = tty_protocol.per_session_data_size;
	info.protocols = link_protocols;
	info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
	info.client_ssl_ca_filepath = opts.cacert;
	/* TCP keepalive: a peer gone without a word is found by the kernel too */
	info.ka_time = 30;
	info.ka_probes = 3;
	info.ka_interval = 10;
	link_vhost = lws_create_vhost(srv.ctx, &info);
	if (!link_vhost) {
		snprintf(err, errlen, "cannot set up the links%s%s", opts.cacert ? " (is --cacert a PEM file?) " : "",
			 opts.cacert ? opts.cacert : "");
		return -1;
	}
	static const struct action_def defs[] = {
		{"link.tty", link_tty_action, 0},
	};
	actions_register(defs, sizeof defs / sizeof defs[0]);
	link_proxy_register();
	link_policy.secs_since_valid_ping = (uint16_t)opts.connect_ping;
	link_policy.secs_since_valid_hangup = (uint16_t)(2 * opts.connect_ping);
	links = xcalloc(opts.nconnect, sizeof *links);
	for (size_t i = 0; i < opts.nconnect; i++) {
		if (link_parse(&links[i].t, opts.connect[i], err, errlen) < 0)
			return -1;
		nlinks++;
	}
	http_health_extend(link_health);
	metrics_extend(link_metrics);
	for (size_t i = 0; i < nlinks; i++)
		link_dial(&links[i]);
	return 0;
}

void link_stop(void)
{
	link_stopping = 1;
	for (size_t i = 0; i < nlinks; i++) {
		server_timer(&links[i].retry, NULL, 0);
		server_timer(&links[i].deadline, NULL, 0);
	}
}

void link_shutdown(void)
{
	for (size_t i = 0; i < nlinks; i++)
		target_free(&links[i].t);
	free(links);
	links = NULL;
	nlinks = 0;
}
