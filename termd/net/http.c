/* http.c — the HTTP side of the listener, done once for both channels:
 * `GET /healthz` (with what a door above adds: http_health_extend), the token check (bearer header or ?token=, compared in
 * constant time) and the upgrade filter (path, session, --max-viewers,
 * mode=ro/rw against the token). Refusals are answered with a status
 * before any upgrade: 401, 404, 503, 403, 400. Also the table of plain
 * HTTP routes other modules register (openhands.c): a request's body
 * gathered up to --max-frame (a chunked one's framing read by
 * proto/h1wire.c, which also compares the tokens), answers given at once
 * or later and written in pieces as the socket takes them. */
#include "net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>

/* a stream's sent bytes are moved out of its buffer once there are this
 * many and as many as the unsent ones (so moving costs at most what was
 * sent); its buffer is given back down to this */
#define HTTP_STREAM_SLACK (256u << 10)

int http_token_ok(const char *token)
{
	return opts.token && token && h1_token_eq(token, opts.token);   /* no token: nothing to match */
}

const char *http_unauthorized_why(struct lws *wsi, const char *base)
{
	static char why[512];
	char tok[600];
	const char *q = lws_get_urlarg_by_name(wsi, "token=", tok, sizeof tok);
	if (!q || !strchr(q, ' '))
		return base;
	size_t n = strlen(base);
	snprintf(why, sizeof why, "%.*s: the ?token= value has a space where the token has a '+'"
		 " (a query reads + as a space): percent-encode the token in the address (+ is "
		 "%%2B, / is %%2F, = is %%3D; python3 -c 'import urllib.parse,sys; "
		 "print(urllib.parse.quote(sys.argv[1], safe=\"\"))' TOKEN), or send it as "
		 "Authorization: Bearer\n", (int)(n && base[n - 1] == '\n' ? n - 1 : n), base);
	return why;
}

/* Is the Host header a name no DNS answer can make: an IP address,
 * localhost or a name under .localhost (port and brackets allowed)? */
static int host_is_local(const char *host)
{
	char h[256];
	snprintf(h, sizeof h, "%s", host);
	if (h[0] == '[') {
		char *e = strchr(h, ']');
		if (!e)
			return 0;
		*e = 0;
		struct in6_addr b6;
		return inet_pton(AF_INET6, h + 1, &b6) == 1;
	}
	struct in6_addr a6;
	char *colon = strrchr(h, ':');
	if (colon && colon != strchr(h, ':')) {   /* "::1:8421", no brackets */
		if (inet_pton(AF_INET6, h, &a6) == 1)
			return 1;
		*colon = 0;
		return inet_pton(AF_INET6, h, &a6) == 1;
	}
	if (colon)
		*colon = 0;
	struct in_addr a4;
	size_t n = strlen(h);
	return inet_pton(AF_INET, h, &a4) == 1 || strcasecmp(h, "localhost") == 0 ||
	       (n > 10 && strcasecmp(h + n - 10, ".localhost") == 0);
}

/* With no token, whoever reaches the listener gets a shell, and a web page
 * on any other site can reach a loopback listener from the browser of the
 * person who runs termd: a WebSocket is not bound by the same-origin rule
 * (cross-site WebSocket hijacking), and a DNS name rebound to 127.0.0.1
 * makes a foreign page same-origin with termd. So a request whose Origin
 * is not termd's own (its Host), or whose Host is a DNS name, is foreign.
 * Programs send no Origin; termd's own page sends its own. A unix socket
 * cannot be reached from a browser; --insecure-no-token asked for none of
 * this (names in Host are how containers reach each other). */
static int foreign_request(struct lws *wsi)
{
	char host[256] = "", origin[512];
	if (opts.token)
		return 0;   /* the full token decides */
	/* a view token alone decides nothing: it adds a viewer, and the rule
	 * applies to every request as with no token at all */
	/* one too long to copy is no Host or Origin a browser sends for
	 * termd's own page (a 253-byte DNS name and a port is) */
	if (lws_hdr_total_length(wsi, WSI_TOKEN_HOST) >= (int)sizeof host ||
	    lws_hdr_total_length(wsi, WSI_TOKEN_ORIGIN) >= (int)sizeof origin)
		return 1;
	lws_hdr_copy(wsi, host, sizeof host, WSI_TOKEN_HOST);
	if (lws_hdr_copy(wsi, origin, sizeof origin, WSI_TOKEN_ORIGIN) > 0) {
		const char *o = strstr(origin, "://");
		if (!o || strcasecmp(o + 3, host) != 0)
			return 1;
	}
	/* (with more --listen, a TCP one may have brought the request) */
	if ((opts.listen_unix && !opts.nextra) || opts.insecure_no_token || !host[0])
		return 0;
	return !host_is_local(host);
}

static const char foreign_why[] =
	"a request from another site (its Origin or Host is not this termd's), "
	"and termd has no token\n";

/* What the request's token admits (foreign requests are refused before).
 * With no token at all, every local request is full (the foreign rule
 * keeps other sites out). With a view token and no full token, a request
 * without the view token is nobody, unless --insecure-no-token asked for
 * an open listener: a view token never turns a request into a shell. */
static enum auth_level http_auth(struct lws *wsi)
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
	if (opts.token && h1_token_eq(got, opts.token))
		return AUTH_FULL;
	if (opts.view_token && got[0] && h1_token_eq(got, opts.view_token))
		return AUTH_VIEW;
	if (!opts.token && opts.insecure_no_token && !got[0])
		return AUTH_FULL;
	return AUTH_NONE;
}

/* the request's path, without its query */
static void uri_path(struct lws *wsi, char *out, size_t n)
{
	out[0] = 0;
	if (lws_hdr_copy(wsi, out, (int)n, WSI_TOKEN_GET_URI) < 0)
		out[0] = 0;
	char *q = strchr(out, '?');
	if (q)
		*q = 0;
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
	if (blen)
		memcpy(b + LWS_PRE, body, blen);
	int w = lws_write(wsi, b + LWS_PRE, blen, LWS_WRITE_HTTP_FINAL);
	free(b);
	if (w < (int)blen)
		return -1;
	if (lws_http_transaction_completed(wsi))
		return -1;
	return 0;
}

/* ------------------------------------------------------------- health */

#define HEALTH_HOOKS 4
static http_health_fn *health_more[HEALTH_HOOKS];

void http_health_extend(http_health_fn *fn)
{
	for (int i = 0; i < HEALTH_HOOKS; i++)
		if (!health_more[i] || health_more[i] == fn) {
			health_more[i] = fn;
			return;
		}
}

/* ------------------------------------------------------------- routes */

static struct http_route *routes;
static size_t nroutes;

void http_routes_register(const struct http_route *r, size_t n)
{
	routes = xrealloc(routes, (nroutes + n) * sizeof *routes);
	memcpy(routes + nroutes, r, n * sizeof *r);
	for (size_t i = 0; i < n; i++)
		if (!routes[nroutes + i].api)
			routes[nroutes + i].api = TD_API_TERMD;
	nroutes += n;
}

/* the streams open now (counted for --max-streams and per client) */
static struct http_txn *streams;

static void stream_unlist(struct http_txn *t)
{
	for (struct http_txn **pp = &streams; *pp; pp = &(*pp)->snext)
		if (*pp == t) {
			*pp = t->snext;
			break;
		}
	t->snext = NULL;
}

static void txn_free(struct http_txn *t)
{
	stream_unlist(t);
	buf_free(&t->body);
	buf_free(&t->hdrs);
	if (t->out_static)
		memset(&t->out, 0, sizeof t->out);
	buf_free(&t->out);
	free(t->disposition);
	free(t);
}

/* The transaction is over on this connection (answered, or the client
 * left): the next request on a kept-alive connection starts afresh. */
static void txn_detach(struct http_txn *t)
{
	if (t->wsi)
		lws_set_opaque_user_data(t->wsi, NULL);
	txn_free(t);
}

void http_answer(struct http_txn *t, int status, const char *ctype, const void *body,
		 size_t len)
{
	if (t->answered)
		return;
	t->answered = 1;
	t->status = status;
	snprintf(t->ctype, sizeof t->ctype, "%s", ctype);
	buf_reset(&t->out);
	buf_append(&t->out, body, len);
	t->off = 0;
	lws_set_timeout(t->wsi, NO_PENDING_TIMEOUT, 0);
	lws_callback_on_writable(t->wsi);
}

void http_answer_static(struct http_txn *t, int status, const char *ctype, const void *body,
			size_t len)
{
	if (t->answered)
		return;
	http_answer(t, status, ctype, "", 0);
	buf_free(&t->out);
	t->out.p = (char *)(uintptr_t)body;
	t->out.len = len;
	t->out_static = 1;
}

void http_answer_text(struct http_txn *t, int status, const char *msg)
{
	http_answer(t, status, "text/plain", msg, strlen(msg));
}

void http_set_header(struct http_txn *t, const char *name, const char *value)
{
	buf_append(&t->hdrs, name, strlen(name));
	buf_append(&t->hdrs, ":", 2);
	buf_append(&t->hdrs, value, strlen(value) + 1);
}

/* A header only the front sets ("x-termd-peer:"): read on a connection
 * that came through the front's socket, never from anyone else. */
static int front_header(struct lws *wsi, const char *name, char *out, size_t n)
{
	out[0] = 0;
	if (!server_via_front(wsi))
		return -1;
	int l = lws_hdr_custom_length(wsi, name, (int)strlen(name));
	if (l < 0 || (size_t)l >= n)
		return -1;
	if (lws_hdr_custom_copy(wsi, out, (int)n, name, (int)strlen(name)) < 0)
		return -1;
	return l;
}

int http_front_header(struct http_txn *t, const char *name, char *out, size_t n)
{
	return front_header(t->wsi, name, out, n);
}

const char *http_peer(struct lws *wsi, char *out, size_t n)
{
	if (server_via_front(wsi))
		return front_header(wsi, "x-termd-peer:", out, n) > 0 ? out : NULL;
	if (!lws_get_peer_simple(wsi, out, n)) {
		out[0] = 0;
		return NULL;
	}
	return out;
}

unsigned http_api(struct lws *wsi)
{
	if (!server_via_front(wsi))
		return server_listener_api(wsi);
	char v[16];
	unsigned a = front_header(wsi, "x-termd-api:", v, sizeof v) > 0 ?
		     (unsigned)strtoul(v, NULL, 10) : 0;
	return a ? a : TD_API_DEFAULT;
}

int http_tls(struct lws *wsi)
{
	char v[8];
	if (server_via_front(wsi))
		return front_header(wsi, "x-termd-tls:", v, sizeof v) > 0 && !strcmp(v, "1");
	return lws_is_ssl(wsi);
}

int http_stream_admit(struct http_txn *t, char *why, size_t n)
{
	if (!t->peer[0])
		http_peer(t->wsi, t->peer, sizeof t->peer);
	size_t all = 0, mine = 0;
	for (struct http_txn *x = streams; x; x = x->snext) {
		all++;
		if (strcmp(x->peer, t->peer) == 0)
			mine++;
	}
	if (all >= opts.max_streams) {
		snprintf(why, n, "termd has %zu streams open, its limit (--max-streams)", all);
		return -1;
	}
	if (mine >= opts.max_streams_client) {
		snprintf(why, n, "this client (%s) has %zu streams open, its limit "
			 "(--max-streams-per-client)", t->peer[0] ? t->peer : "local", mine);
		return -1;
	}
	t->stream_admitted = 1;
	return 0;
}

int http_stream_start(struct http_txn *t, int status, const char *ctype)
{
	if (t->answered)
		return -1;
	char why[200];
	if (!t->stream_admitted && http_stream_admit(t, why, sizeof why) < 0) {
		log_info("http: %s refused: %s", t->path, why);
		t->refused = 1;
		t->close_after = 1;
		buf_t b = {0};
		buf_printf(&b, "%s\n", why);
		http_answer(t, 429, "text/plain", b.p, b.len);
		buf_free(&b);
		return -1;
	}
	t->streaming = 1;
	t->close_after = 1;   /* the end of the body is the end of the connection */
	t->snext = streams;
	streams = t;
	http_answer(t, status, ctype, "", 0);
	return 0;
}

/* the stream's buffer gives memory back once most of it went out */
static void out_shrink(buf_t *b)
{
	size_t want = b->len < HTTP_STREAM_SLACK ? HTTP_STREAM_SLACK : 2 * b->len;
	if (b->cap > 2 * want) {
		b->p = xrealloc(b->p, want + 1);
		b->cap = want + 1;
	}
}

size_t http_stream_write(struct http_txn *t, const void *p, size_t n)
{
	if (t->cut)
		return HTTP_STREAM_CUT;
	if (!t->streaming || t->ended)
		return 0;
	if (t->off && t->off == t->out.len) {
		buf_reset(&t->out);
		t->off = 0;
		out_shrink(&t->out);
	}
	/* what the stream holds counts, sent bytes not moved out yet too */
	if (t->out.len + n > opts.stream_max) {
		log_info("http: %s: the client leaves %zu bytes unread, past --stream-max: cut",
			 t->path, t->out.len - t->off + n);
		t->cut = 1;
		/* what it holds may still be read, for a while */
		lws_set_timeout(t->wsi, PENDING_TIMEOUT_USER_OK, HTTP_CUT_GRACE_S);
		if (t->hdr_sent)
			lws_callback_on_writable(t->wsi);
		return HTTP_STREAM_CUT;
	}
	buf_append(&t->out, p, n);
	if (n && t->hdr_sent)
		lws_callback_on_writable(t->wsi);
	return t->out.len - t->off;
}

void http_stream_last(struct http_txn *t, const void *p, size_t n)
{
	if (!t->streaming || t->ended)
		return;
	if (!t->cut) {
		http_stream_write(t, p, n);
		if (!t->cut)
			return;
	}
	buf_append(&t->out, p, n);   /* (one end message past the bound) */
	if (t->hdr_sent)
		lws_callback_on_writable(t->wsi);
}

void http_stream_sized(struct http_txn *t, unsigned long long len)
{
	if (!t->streaming || t->hdr_sent)
		return;
	t->sized = 1;
	t->slen = len;
	t->close_after = 0;
}

void http_stream_end(struct http_txn *t)
{
	if (!t->streaming || t->ended)
		return;
	t->ended = 1;
	lws_callback_on_writable(t->wsi);
}

int http_header(struct http_txn *t, const char *name, char *out, size_t n)
{
	out[0] = 0;
	int l = lws_hdr_custom_length(t->wsi, name, (int)strlen(name));
	if (l < 0)
		return -1;
	if (lws_hdr_custom_copy(t->wsi, out, (int)n, name, (int)strlen(name)) < 0)
		return -1;
	return (int)strlen(out);
}

const char *http_arg(struct http_txn *t, const char *name, char *out, size_t n)
{
	return lws_get_urlarg_by_name(t->wsi, name, out, (int)n);
}

static http_host_route_fn *host_route;

void http_host_route(http_host_route_fn *fn)
{
	host_route = fn;
}

static const struct http_route *route_find(const char *path, unsigned api)
{
	for (size_t i = 0; i < nroutes; i++)
		if (!(routes[i].api & api))
			continue;
		else if (routes[i].prefix ? strncmp(routes[i].path, path, strlen(routes[i].path)) == 0
				     : strcmp(routes[i].path, path) == 0)
			return &routes[i];
	return NULL;
}

static const char method_not_allowed[] = "{\"detail\":\"Method Not Allowed\"}";
static const char too_large[] = "{\"detail\":\"Request body over the limit (--max-frame)\"}";

static int route_request(struct lws *wsi, const struct http_route *r, const char *uri)
{
	struct http_txn *t = xcalloc(1, sizeof *t);
	t->wsi = wsi;
	t->route = r;
	t->auth = http_auth(wsi);
	snprintf(t->path, sizeof t->path, "%s", uri);
	t->post = lws_hdr_total_length(wsi, WSI_TOKEN_POST_URI) > 0;
	char cl[32];
	if (lws_hdr_copy(wsi, cl, sizeof cl, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0)
		t->announced = (size_t)strtoull(cl, NULL, 10);
	lws_set_opaque_user_data(wsi, t);
	/* a body left unread would be taken for the next request: a refusal
	 * before it closes the connection */
	t->close_after = t->announced > 0;
	/* a body may pause --body-idle-timeout seconds at a time, and take
	 * --body-timeout seconds in all (a client trickling a byte a second
	 * is not held forever) */
	t->body_since = mono_us();
	lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_CONTENT, (int)opts.body_idle);
	int is_get = lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) > 0;
	if ((strcmp(r->method, "POST") == 0 && !t->post) ||
	    (strcmp(r->method, "GET") == 0 && !is_get)) {
		http_answer(t, 405, "application/json", method_not_allowed, sizeof method_not_allowed - 1);
		return 0;
	}
	if (r->admit && r->admit(t))
		return 0;
	if (t->announced > opts.max_frame) {
		http_answer(t, 413, "application/json", too_large, sizeof too_large - 1);
		return 0;
	}
	t->close_after = 0;
	char te[32] = "";
	if (lws_hdr_copy(wsi, te, sizeof te, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0 &&
	    strcasecmp(te, "chunked") == 0 && t->post) {
		/* a chunked body (fetch's FormData): lws 4.1 hands it over as
		 * it came, framing and all, as the first 100 MiB of a body of
		 * unknown length, and never says it is complete; after the
		 * answer it would discard the rest of those 100 MiB (the next
		 * request on the connection): the connection closes instead */
		t->chunked = 1;
		t->close_after = 1;
		return 0;
	}
	if (t->announced > 0)
		return 0;   /* the body comes next (http_body; a GET's too: V1's batch) */
	r->fn(t);
	return 0;
}

static void body_sink(void *arg, const char *p, size_t n)
{
	buf_append(arg, p, n);
}

static const char slow_body[] =
	"{\"detail\":\"The request body took longer than termd allows (--body-timeout)\"}";

int http_body(struct lws *wsi, const void *in, size_t len)
{
	struct http_txn *t = lws_get_opaque_user_data(wsi);
	if (!t || t->answered)
		return 0;
	if (mono_us() - t->body_since > (uint64_t)opts.body_time * 1000000u) {
		t->close_after = 1;
		http_answer(t, 408, "application/json", slow_body, sizeof slow_body - 1);
		return 0;
	}
	lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_CONTENT, (int)opts.body_idle);
	if (t->chunked) {
		/* its framing followed as it comes, the data into t->body */
		if (t->raw_len + len > opts.max_frame + 4096) {
			t->close_after = 1;
			http_answer(t, 413, "application/json", too_large, sizeof too_large - 1);
			return 0;
		}
		t->raw_len += len;
		int done;
		t->ck.max = opts.max_frame;
		if (h1_chunk_scan(&t->ck, in, len, &done, body_sink, &t->body) < 0) {
			t->close_after = 1;
			http_answer_text(t, 400, "bad chunked encoding\n");
		} else if (t->body.len > opts.max_frame) {
			t->close_after = 1;
			http_answer(t, 413, "application/json", too_large, sizeof too_large - 1);
		} else if (done) {
			t->chunked = 0;
			return http_body_done(wsi);
		}
		return 0;
	}
	if (t->body.len + len > opts.max_frame) {
		t->close_after = 1;
		http_answer(t, 413, "application/json", too_large, sizeof too_large - 1);
		return 0;
	}
	buf_append(&t->body, in, len);
	return 0;
}

int http_body_done(struct lws *wsi)
{
	struct http_txn *t = lws_get_opaque_user_data(wsi);
	if (!t || t->answered || t->chunked)
		return 0;   /* (a chunked body is complete when its last chunk came) */
	if (!t->body.p)
		buf_append(&t->body, "", 0);
	/* the route may take as long as its action does */
	lws_set_timeout(wsi, NO_PENDING_TIMEOUT, 0);
	t->route->fn(t);
	return 0;
}

#define HTTP_CHUNK 65536
#define HTTP_WRITES_A_TURN 16   /* HTTP_CHUNK pieces at the most in one writable turn */

static int write_headers(struct lws *wsi, struct http_txn *t, unsigned char *buf, size_t size)
{
	unsigned char *start = buf + LWS_PRE, *p = start, *end = buf + size - 1;
	if (lws_add_http_common_headers(wsi, (unsigned int)t->status, t->ctype,
					t->sized ? (lws_filepos_t)t->slen
					: t->streaming ? LWS_ILLEGAL_HTTP_CONTENT_LEN
						     : (lws_filepos_t)t->out.len, &p, end))
		return -1;
	if (t->disposition &&
	    lws_add_http_header_by_name(wsi, (const unsigned char *)"content-disposition:",
					(const unsigned char *)t->disposition,
					(int)strlen(t->disposition), &p, end))
		return -1;
	for (size_t i = 0; i < t->hdrs.len;) {
		const char *name = t->hdrs.p + i;
		const char *val = name + strlen(name) + 1;
		i = (size_t)(val - t->hdrs.p) + strlen(val) + 1;
		if (lws_add_http_header_by_name(wsi, (const unsigned char *)name,
						(const unsigned char *)val, (int)strlen(val), &p, end))
			return -1;
	}
	/* (an answer of unknown length: lws says close itself) */
	if (t->close_after && !t->streaming &&
	    lws_add_http_header_by_token(wsi, WSI_TOKEN_CONNECTION,
					 (const unsigned char *)"close", 5, &p, end))
		return -1;
	return lws_finalize_write_http_header(wsi, start, &p, end);
}

int http_writeable(struct lws *wsi)
{
	struct http_txn *t = lws_get_opaque_user_data(wsi);
	if (!t || !t->answered)
		return 0;
	static unsigned char buf[LWS_PRE + HTTP_CHUNK];
	if (!t->hdr_sent) {
		if (write_headers(wsi, t, buf, sizeof buf))
			return -1;
		t->hdr_sent = 1;
		/* an empty answer (a 304, an empty file) ends here: nothing
		 * else would make the socket writable again */
		if (t->out.len > t->off || t->ended || !t->streaming)
			lws_callback_on_writable(wsi);
		return 0;
	}
	/* piece after piece while the socket takes them whole (one a turn
	 * left a stream at a fraction of what the socket carries), each no
	 * larger than the socket takes whole, and only while it has room: lws
	 * must never keep a truncated write (wsconn.h: libwebsockets 4.1
	 * spins for good when such a connection's client goes) */
	size_t most = wsconn_sock_frag(wsi) - 32;   /* (a chunk's size line and CRLFs) */
	if (most > HTTP_CHUNK)
		most = HTTP_CHUNK;
	for (int k = 0; k < HTTP_WRITES_A_TURN && t->off < t->out.len; k++) {
		if (lws_send_pipe_choked(wsi))
			break;
		size_t n = t->out.len - t->off;
		if (n > most)
			n = most;
		int last = !t->streaming && t->off + n == t->out.len;
		memcpy(buf + LWS_PRE, t->out.p + t->off, n);
		if (lws_write(wsi, buf + LWS_PRE, n, last ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < (int)n)
			return -1;
		t->off += n;
		/* a stream read a little slower than it is written never drains
		 * whole: what went out is moved out of the buffer as it goes */
		if (t->streaming && t->off >= HTTP_STREAM_SLACK && t->off >= t->out.len - t->off) {
			buf_consume(&t->out, t->off);
			t->off = 0;
			out_shrink(&t->out);
		}
	}
	if (t->off < t->out.len) {
		lws_callback_on_writable(wsi);
		return 0;
	}
	if (t->streaming) {
		if (!t->ended && t->cut)
			return -1;      /* nothing more comes: closed, t->gone follows */
		if (!t->ended) {
			/* drained: the producer may write more now, else it
			 * does when it has some (http_stream_write) */
			if (t->drained)
				t->drained(t);
			return 0;
		}
		int keep = t->sized && !t->close_after;
		txn_detach(t);
		if (!keep)
			return -1;      /* the end of the body */
		return lws_http_transaction_completed(wsi) ? -1 : 0;
	}
	int close = t->close_after;
	if (t->refused && t->gone)
		t->gone(t);   /* a stream refused: its producer lets go now */
	txn_detach(t);
	if (close)
		return -1;
	return lws_http_transaction_completed(wsi) ? -1 : 0;
}

void http_closed(struct lws *wsi)
{
	struct http_txn *t = lws_get_opaque_user_data(wsi);
	if (!t)
		return;
	if ((!t->answered || t->refused || (t->streaming && !t->ended)) && t->gone)
		t->gone(t);
	txn_detach(t);
}

int http_request(struct lws *wsi, const char *uri)
{
	if (strcmp(uri, TD_PATH_HEALTH) == 0) {
		buf_t body = {0};
		const char *cg = cgroup_version();
		buf_printf(&body,
			   "{\"ok\":true,\"version\":\"%s\",\"sessions\":%d,\"uptime_s\":%.3f%s"
			   ",\"cgroups\":%s%s%s",
			   TERMD_VERSION, srv.nsessions,
			   (double)(mono_us() - srv.start_mono) / 1e6,
			   opts.insecure_no_token ? ",\"insecure_no_token\":true" : "",
			   cg ? "\"" : "", cg ? cg : "null", cg ? "\"" : "");
		for (int i = 0; i < HEALTH_HOOKS && health_more[i]; i++)
			health_more[i](&body);
		buf_putc(&body, '}');
		int r = http_reply(wsi, 200, "application/json", body.p);
		buf_free(&body);
		return r;
	}
	if (foreign_request(wsi))
		return http_reply(wsi, 403, "text/plain", foreign_why);
	unsigned api = http_api(wsi);
	const struct http_route *r = host_route && (api & TD_API_TERMD) ? host_route(wsi) : NULL;
	if (!r)
		r = route_find(uri, api);
	if (r)
		return route_request(wsi, r, uri);
	if (api == TD_API_OPENHANDS)   /* FastAPI's answer, on a listener of its own */
		return http_reply(wsi, 404, "application/json", "{\"detail\":\"Not Found\"}");
	if (http_auth(wsi) == AUTH_NONE)
		return http_reply(wsi, 401, "text/plain", http_unauthorized_why(wsi, "unauthorized\n"));
	return http_reply(wsi, 404, "text/plain", "not found\n");
}

#define WS_DOORS 4
static const struct ws_door *ws_doors[WS_DOORS];

void http_ws_door(const struct ws_door *d)
{
	for (int i = 0; i < WS_DOORS; i++)
		if (!ws_doors[i] || ws_doors[i] == d) {
			ws_doors[i] = d;
			return;
		}
}

/* Every check an upgrade request must pass, in the order its refusals are
 * answered. 0 and *u filled, or an HTTP status and why. */
static int upgrade_check(struct lws *wsi, struct upgrade *u, const char **why)
{
	char path[512];
	memset(u, 0, sizeof *u);
	if (foreign_request(wsi)) {
		*why = foreign_why;
		return 403;
	}
	uri_path(wsi, path, sizeof path);
	unsigned api = http_api(wsi);
	for (int i = 0; i < WS_DOORS && ws_doors[i]; i++)
		if ((ws_doors[i]->api & api) && strcmp(path, ws_doors[i]->path) == 0) {
			u->channel = CHANNEL_DOOR;
			u->door = ws_doors[i];
			return ws_doors[i]->check(wsi, http_auth(wsi), &u->door_arg, why);
		}
	u->auth = http_auth(wsi);
	if (u->auth == AUTH_NONE) {
		*why = http_unauthorized_why(wsi, "unauthorized\n");
		return 401;
	}
	if (!(api & TD_API_TERMD)) {
		*why = "not found\n";   /* the channels are termd's API */
		return 404;
	}
	if (strcmp(path, TD_PATH_EVENTS) == 0 || strcmp(path, TD_PATH_EVENTS "/") == 0) {
		u->channel = CHANNEL_EVENTS;
		return 0;
	}
	size_t tl = strlen(TD_PATH_TTY);
	if (strncmp(path, TD_PATH_TTY, tl) != 0) {
		*why = "not found\n";
		return 404;
	}
	const char *name = path + tl;
	size_t nl = strlen(name);
	struct session *s = nl < sizeof u->session && td_valid_session_name(name) ?
			    session_find(name) : NULL;
	if (!s) {
		*why = "no such session\n";
		return 404;
	}
	if ((size_t)s->nviewers >= opts.max_viewers) {
		*why = "this session has as many viewers as termd allows (--max-viewers)\n";
		return 503;
	}
	char mode[16];
	const char *m = lws_get_urlarg_by_name(wsi, "mode=", mode, sizeof mode);
	if (m && strcmp(m, "rw") == 0) {
		if (u->auth != AUTH_FULL) {
			*why = "mode=rw needs the full token\n";
			return 403;
		}
		u->rw = 1;
	} else if (m && strcmp(m, "ro") != 0) {
		*why = "mode is ro or rw\n";
		return 400;
	}
	u->channel = CHANNEL_TTY;
	memcpy(u->session, name, nl + 1);
	return 0;
}

#define UPGRADE_HOOKS 4
static struct { http_upgrade_hook_fn *fn; unsigned api; } upgrade_hooks[UPGRADE_HOOKS];

void http_upgrade_hook_api(http_upgrade_hook_fn *fn, unsigned api)
{
	for (int i = 0; i < UPGRADE_HOOKS; i++)
		if (!upgrade_hooks[i].fn || upgrade_hooks[i].fn == fn) {
			upgrade_hooks[i].fn = fn;
			upgrade_hooks[i].api = api;
			return;
		}
}

void http_upgrade_hook(http_upgrade_hook_fn *fn)
{
	http_upgrade_hook_api(fn, TD_API_TERMD);
}

int http_confirm_upgrade(struct lws *wsi)
{
	struct upgrade u;
	const char *why = "";
	unsigned api = http_api(wsi);
	for (int i = 0; i < UPGRADE_HOOKS && upgrade_hooks[i].fn; i++) {
		if (!(upgrade_hooks[i].api & api) || foreign_request(wsi))
			continue;
		int st = upgrade_hooks[i].fn(wsi, http_auth(wsi), &why);
		if (st < 0)
			return -1;
		if (st > 0) {
			http_reply(wsi, st, "text/plain", why);
			return -1;
		}
	}
	int status = upgrade_check(wsi, &u, &why);
	if (status) {
		http_reply(wsi, status, "text/plain", why);
		return -1;
	}
	return 0;
}

int http_upgrade(struct lws *wsi, enum channel ch, struct upgrade *u)
{
	const char *why;
	if (upgrade_check(wsi, u, &why) || u->channel != ch)
		return -1;
	return 0;
}
