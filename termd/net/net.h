/* net.h — the transport: HTTP (health, tokens, upgrade checks, routes), the
 * /events channel (conn.c) and the /tty channel (tty.c), over the action layer. */
#ifndef TERMD_NET_H
#define TERMD_NET_H

#include "action.h"
#include "h1wire.h"

/* ---- the upgrade checks (http.c) ---- */
/* What a request's token admits. */
enum auth_level { AUTH_NONE, AUTH_VIEW, AUTH_FULL };
enum channel { CHANNEL_EVENTS, CHANNEL_TTY, CHANNEL_DOOR };
/* A WebSocket upgrade request that passed every check. */
struct upgrade {
	enum channel channel;
	enum auth_level auth;
	int rw;                   /* /tty: mode=rw */
	char session[TD_SESSION_NAME_MAX + 1]; /* /tty: the session */
	const struct ws_door *door;           /* CHANNEL_DOOR: whose */
	int door_arg;                         /* ... and what its check said */
};

/* ---- WebSockets a door serves (http.c checks, conn.c carries) ---- */
/* A WebSocket at path (exact) on a listener serving one of api's APIs,
 * on the /events channel's protocol (no subprotocol needed): check runs
 * on the upgrade request, before termd's token check (the door has its
 * own; level is what termd's token check found): 0 to accept (with *arg, kept in c->door_arg), else an HTTP status
 * and *why. Then open (c->ws is up), each whole text message, closed
 * (free c->door_state). Up to four. */
struct ws_door {
	const char *path;
	unsigned api;
	int (*check)(struct lws *wsi, enum auth_level level, int *arg, const char **why);
	void (*open)(struct conn *c);
	void (*message)(struct conn *c, const char *msg, size_t n);
	void (*closed)(struct conn *c);
};
void http_ws_door(const struct ws_door *d);
/* one text message to a door's socket (one not reading past
 * --max-pending is closed, 1008); close it with code and reason once
 * what is queued went */
void conn_door_send(struct conn *c, const char *data, size_t n);
void conn_door_close(struct conn *c, int code, const char *reason);


/* ---- the /events channel (conn.c) ---- */
extern const struct lws_protocols conn_protocol;
/* Queue one observation for c (dropped if c is closing). */
void conn_send(struct conn *c, const char *data, size_t len);
/* The channel on any WebSocket, accepted or dialed (door/link/link.c): c's
 * socket is up (hello sent, c joins srv.conns); a piece of an incoming
 * message; the socket is writable (-1: close it); the socket is gone
 * (actions c waited on are told, its queue freed). */
void conn_open(struct conn *c, struct lws *wsi);
void conn_receive(struct conn *c, const char *in, size_t len);
int conn_writable(struct conn *c);
void conn_closed(struct conn *c);


/* ---- the HTTP side: health, tokens, upgrade checks, routes (http.c) ---- */
/* One plain HTTP request to a registered route: its method, path, body
 * and, once the route has it, its answer (written when the socket can
 * take it, in pieces). Freed by http.c once answered or once the client
 * left (then `gone`, if set, is called first). */
struct http_route;
struct http_txn {
	struct lws *wsi;
	const struct http_route *route;
	int post;                 /* POST (else GET) */
	char path[256];
	buf_t body;               /* the whole body (at most --max-frame bytes) */
	size_t announced;         /* its Content-Length */
	uint64_t body_since;      /* mono_us when its headers were in (--body-timeout) */
	int chunked;              /* Transfer-Encoding: chunked, still coming */
	struct h1_chunk ck;       /* ... its framing as it came (h1wire.c) */
	size_t raw_len;           /* ... bytes of it so far, framing and all */
	void *user;               /* the route's */
	void (*gone)(struct http_txn *t);
	/* a streamed answer: everything written so far has gone to the
	 * socket (a producer that holds back writes more here) */
	void (*drained)(struct http_txn *t);
	int answered, status, hdr_sent, close_after;
	enum auth_level auth;     /* what the request's token admits */
	int streaming, ended;     /* an answer of unknown length (http_stream_*) */
	int stream_admitted;      /* http_stream_admit let it in (or its caller lets an
				   * error stream that ends at once through) */
	int refused;              /* http_stream_start refused it (429): gone is called
				   * once that answer is out */
	int cut;                  /* it would have held more than --stream-max */
	struct http_txn *snext;   /* on the list of open streams */
	char peer[64];            /* the client's address, for --max-streams-per-client */
	char ctype[64];
	char *disposition;        /* Content-Disposition or NULL */
	buf_t hdrs;               /* more headers: "name:\0value\0" pairs */
	buf_t out;
	size_t off;
	int out_static;           /* out.p is http_answer_static's: not ours to free */
	int sized;                /* a stream of known length (http_stream_sized) */
	unsigned long long slen;
};
struct http_route {
	const char *method;       /* "GET" or "POST" */
	const char *path;         /* exact, or a prefix when .prefix */
	/* before the body is read: 0, or it answered (a refusal) */
	int (*admit)(struct http_txn *t);
	/* the request is in: answer now or later (http_answer) */
	void (*fn)(struct http_txn *t);
	int prefix;               /* path is a prefix ("/s/" serves /s/<any>) */
	unsigned api;             /* the APIs it belongs to (enum td_api; 0: termd's) */
};
/* Routes other modules serve on the listener (consulted before 404): on
 * a listener that serves one of a route's APIs; the first registered
 * of those that match a path answers it. */
void http_routes_register(const struct http_route *r, size_t n);
/* The APIs of the listener the request came in on (enum td_api bits):
 * the front's X-Termd-Api when it came through the front, else its
 * vhost's (server_listener_api). */
unsigned http_api(struct lws *wsi);
/* The answer (body copied); written when the socket is writable. */
void http_answer(struct http_txn *t, int status, const char *ctype, const void *body,
		 size_t len);
/* ... its body not copied: one that lives as long as termd (an embedded
 * file), sent from where it is by every request */
void http_answer_static(struct http_txn *t, int status, const char *ctype, const void *body,
			size_t len);
/* ... a text/plain one */
void http_answer_text(struct http_txn *t, int status, const char *msg);
/* One more header on the answer (set before http_answer or
 * http_stream_start): name without its colon, value as is. */
void http_set_header(struct http_txn *t, const char *name, const char *value);
/* An answer of unknown length: headers now (no Content-Length, the
 * connection closes at the end), then data as it comes. write returns the
 * bytes the stream holds (not yet taken by the socket, and taken ones not
 * yet moved out), so a producer can hold back. A write that would make it
 * hold more than --stream-max cuts the stream (a client that does not
 * read): that write and every later one are dropped (HTTP_STREAM_CUT),
 * what it holds (whole writes) stays for the client to read for
 * HTTP_CUT_GRACE_S seconds at most, and last adds one end message even
 * to a cut stream. end finishes the answer once those are written; a cut
 * stream not ended is closed once drained (t->gone follows from the
 * loop). t->gone is called when the client leaves before end.
 * Streams are counted: at most --max-streams at once, and
 * --max-streams-per-client from one address. admit says whether one
 * more may start (0, or -1 and why); start refuses one that may not with
 * 429 (and returns -1; t->gone is called once that answer is out). */
#define HTTP_STREAM_CUT ((size_t)-1)
#define HTTP_CUT_GRACE_S 30
int http_stream_admit(struct http_txn *t, char *why, size_t n);
int http_stream_start(struct http_txn *t, int status, const char *ctype);
size_t http_stream_write(struct http_txn *t, const void *p, size_t n);
void http_stream_last(struct http_txn *t, const void *p, size_t n);
void http_stream_end(struct http_txn *t);
/* ... of a length known (right after a start that was not refused): it
 * goes with its Content-Length and the connection stays open after it,
 * unless it ends short (close_after set before http_stream_end) */
void http_stream_sized(struct http_txn *t, unsigned long long len);
/* A request header by lws custom name ("x-session-api-key:"): its length,
 * or -1 when absent. */
int http_header(struct http_txn *t, const char *name, char *out, size_t n);
/* A header only termd's front sets (X-Termd-Metadata: "x-termd-metadata:"):
 * its length, or -1 when absent or the request did not come through the
 * front (net/front/front.c), whatever the client sent. */
int http_front_header(struct http_txn *t, const char *name, char *out, size_t n);
/* The client's address (the front's X-Termd-Peer when it came through
 * the front, else the socket's), or NULL; and whether it came over TLS. */
const char *http_peer(struct lws *wsi, char *out, size_t n);
int http_tls(struct lws *wsi);
/* The rest of an answer's body (rem bytes, plain HTTP/1.1 with a known
 * length) from fd straight to the client, by the front (net/front/front.c)
 * when lws_fd is the server side of one of its plain connections: 0 and fd
 * is the front's (lws must write nothing more of this answer: its head and
 * the body so far went out whole), else -1 and fd is still the caller's. */
int front_take_body(int lws_fd, int fd, unsigned long long rem);
/* A query argument ("destination="), URL-decoded, or NULL. */
const char *http_arg(struct http_txn *t, const char *name, char *out, size_t n);
/* Does token equal termd's full token (constant time)? No token set: 1. */
int http_token_ok(const char *token);
/* The 401 text for a request no token admits: "unauthorized", or a hint
 * when its ?token= has a space (a raw '+' of the token, which a query
 * reads as a space: it must be percent-encoded). base is the text without
 * the hint; the answer is base or a static buffer. */
const char *http_unauthorized_why(struct lws *wsi, const char *base);
/* More members for /healthz's object (the dial-out links, from above):
 * each hook appends ",\"name\":value..." to b. Up to four hooks. */
typedef void http_health_fn(buf_t *b);
void http_health_extend(http_health_fn *fn);
/* A route chosen by the request's Host before its path (the preview
 * proxy's --preview-host-suffix): fn returns it, or NULL. One hook. */
typedef const struct http_route *http_host_route_fn(struct lws *wsi);
void http_host_route(http_host_route_fn *fn);
/* An upgrade request someone else serves (the preview proxy's WebSocket
 * tunnels), asked before the channels' checks: 0 not its own, -1 taken
 * over (the connection is the hook's now), else an HTTP status to refuse
 * with and *why. One hook. */
typedef int http_upgrade_hook_fn(struct lws *wsi, enum auth_level level, const char **why);
void http_upgrade_hook(http_upgrade_hook_fn *fn);
/* ... one more such hook, asked only on a listener serving one of api's
 * APIs (up to four; the one above is termd's) */
void http_upgrade_hook_api(http_upgrade_hook_fn *fn, unsigned api);
/* LWS_CALLBACK_HTTP: /healthz, a route, else 401 or 404. */
int http_request(struct lws *wsi, const char *uri);
/* LWS_CALLBACK_HTTP_BODY, _BODY_COMPLETION, _WRITEABLE, CLOSED_HTTP */
int http_body(struct lws *wsi, const void *in, size_t len);
int http_body_done(struct lws *wsi);
int http_writeable(struct lws *wsi);
void http_closed(struct lws *wsi);
/* LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: 0 to upgrade, or -1 once a refusal
 * (401, 404, 503, 403, 400) has been answered. */
int http_confirm_upgrade(struct lws *wsi);
/* LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION for channel ch: 0 and *u filled
 * if the request passes every check and is for ch, else -1. */
int http_upgrade(struct lws *wsi, enum channel ch, struct upgrade *u);


/* ---- GET /metrics (metrics.c) ---- */
/* More metrics from a layer above (the links): appends whole families,
 * each with metrics_head first. */
typedef void metrics_fn(buf_t *b);
void metrics_extend(metrics_fn *fn);
void metrics_head(buf_t *b, const char *name, const char *type, const char *help);
/* a label value, escaped as the text format wants (\\, \", \n) */
void metrics_label(buf_t *b, const char *v);
void metrics_register(void);
void metrics_shutdown(void);


/* ---- live terminal channel (tty.c) ---- */
extern const struct lws_protocols tty_protocol;
/* every /tty viewer's connection (an upgrade in place closes them) */
void tty_each_viewer(void (*fn)(struct wsconn *ws));
void tty_register(void);   /* its session listener */
/* A viewer on a socket termd dialed (door/link/link.c): user is its
 * per-connection data (tty_protocol's size), set up as the upgrade check
 * does for one that dialed in; then tty_protocol's callback serves it. */
void tty_viewer_prepare(void *user, const char *session, int rw);
void tty_shutdown(void);   /* before the loop goes: its frame timer */

#endif
