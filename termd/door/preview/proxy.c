/* proxy.c — the preview proxy on termd's listener: `ANY /proxy/<port>/<rest>`
 * (and, with --preview-host-suffix, a Host `<port>-<anything><suffix>`)
 * forwarded as HTTP/1.1 to that port where the program bound it (loopback
 * for a wildcard address), only for ports a session's program listens on (ports.c);
 * access by the full token, the preview token or the cookie `?token=` sets;
 * the answer (its head and chunked framing read by proto/h1wire.c, interim
 * 1xx answers passed over) streamed back with a bounded buffer (upstream
 * reads held while the client is behind); a plain body (Content-Length or
 * close-delimited, on a connection without TLS in lws) spliced from
 * upstream's socket to the client's through a pipe of PX_PIPE bytes once
 * the head is out, never read into termd; a sized one's rest, for a plain
 * HTTP/1.1 client of the front, handed to the front (front_take_body),
 * which splices it to the client itself. */
#include "door.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#define PX_HELD_MAX   (1u << 20)   /* bytes waiting for the client before upstream reads stop */
#define PX_READ       65536        /* one read from upstream */
#define PX_HEAD_MAX   65536        /* upstream's status line and headers */
#define PX_URI_MAX    8192
#define PX_PIPE       (1 << 20)    /* the splice pipe's size asked for (PX_HELD_MAX) */

static char cookie_secret[33];     /* the termd_preview cookie's value, random per run */

struct px {
	struct http_txn *t;        /* NULL once the client left */
	struct lws *up;            /* the upstream socket, NULL once closed */
	int port;
	int by_host;               /* routed by Host: paths unchanged */
	buf_t out;                 /* the request to upstream */
	size_t out_off;
	int connected;
	buf_t head;                /* upstream's head, until complete */
	int streaming;             /* head sent to the client */
	int chunked;               /* upstream's body is chunked */
	struct h1_chunk ck;        /* ... its framing so far */
	int held;
	lws_sorted_usec_list_t rearm;   /* asks for upstream writable again */
	int head_req;              /* the client asked HEAD: no body follows */
	int sized;                 /* upstream's body has a Content-Length ... */
	unsigned long long rem;    /* ... and this much of it is still to come */
	int pp[2];                 /* the splice pipe, -1 until the body is spliced */
	size_t inpipe;             /* bytes in it, not yet at the client */
	int up_eof;                /* upstream ended while the pipe still held some */
};

/* ------------------------------------------------------------ helpers */

/* a token (full or preview) that opens previews */
static int preview_token_ok(const char *tok)
{
	if (!tok || !tok[0])
		return 0;
	return http_token_ok(tok) || (opts.preview_token && h1_token_eq(tok, opts.preview_token));
}

/* the cookie termd_preview carries our secret */
static int cookie_ok(struct lws *wsi)
{
	char c[4096];
	if (lws_hdr_copy(wsi, c, sizeof c, WSI_TOKEN_HTTP_COOKIE) <= 0)
		return 0;
	for (char *p = c; p && *p;) {
		while (*p == ' ' || *p == ';')
			p++;
		char *end = strchr(p, ';');
		if (end)
			*end = 0;
		if (strncmp(p, "termd_preview=", 14) == 0 && h1_token_eq(p + 14, cookie_secret))
			return 1;
		p = end ? end + 1 : NULL;
	}
	return 0;
}

static const char *method_of(struct lws *wsi, enum lws_token_indexes *tok)
{
	static const struct { enum lws_token_indexes t; const char *m; } ms[] = {
		{WSI_TOKEN_GET_URI, "GET"},       {WSI_TOKEN_POST_URI, "POST"},
		{WSI_TOKEN_PUT_URI, "PUT"},       {WSI_TOKEN_PATCH_URI, "PATCH"},
		{WSI_TOKEN_DELETE_URI, "DELETE"}, {WSI_TOKEN_OPTIONS_URI, "OPTIONS"},
		{WSI_TOKEN_HEAD_URI, "HEAD"},
	};
	for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
		if (lws_hdr_total_length(wsi, ms[i].t) > 0) {
			*tok = ms[i].t;
			return ms[i].m;
		}
	return NULL;
}

/* percent-encode what lws decoded, keeping the separators that matter */
static void put_encoded(buf_t *b, const char *s, const char *keep)
{
	static const char hex[] = "0123456789ABCDEF";
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		    strchr("-._~", *p) || strchr(keep, *p)) {
			buf_putc(b, (char)*p);
		} else {
			buf_putc(b, '%');
			buf_putc(b, hex[*p >> 4]);
			buf_putc(b, hex[*p & 15]);
		}
	}
}

/* Host `<port>-<anything><suffix>` (port of the Host itself ignored):
 * the port, or 0 */
int proxy_host_port(struct lws *wsi)
{
	const char *suf = opts.preview_host_suffix;
	char h[256];
	if (!suf || !suf[0] || lws_hdr_copy(wsi, h, sizeof h, WSI_TOKEN_HOST) <= 0)
		return 0;
	char *colon = strrchr(h, ':');
	if (colon && !strchr(suf, ':') && h[0] != '[')
		*colon = 0;
	size_t hl = strlen(h), sl = strlen(suf);
	if (hl <= sl || strcasecmp(h + hl - sl, suf) != 0)
		return 0;
	char *end;
	long port = strtol(h, &end, 10);
	if (end == h || *end != '-' || h[0] == '-' || h[0] == '+' || port < 1 || port > 65535 ||
	    end - h > 5)
		return 0;
	return (int)port;
}

/* ------------------------------------------------------------ upstream */

static void px_free(struct px *x)
{
	server_timer(&x->rearm, NULL, 0);
	if (x->up) {
		lws_set_opaque_user_data(x->up, NULL);
		lws_set_timeout(x->up, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
		x->up = NULL;
	}
	if (x->t) {
		x->t->user = NULL;
		x->t->gone = NULL;
		x->t->drained = NULL;
	}
	if (x->pp[0] >= 0) {
		close(x->pp[0]);
		close(x->pp[1]);
	}
	buf_free(&x->out);
	buf_free(&x->head);
	free(x);
}

static void client_gone(struct http_txn *t)
{
	struct px *x = t->user;
	if (!x)
		return;
	x->t = NULL;
	px_free(x);
}

/* upstream is done (closed, or its body complete): finish the answer */
static void px_finish(struct px *x, const char *why)
{
	if (x->t) {
		if (x->sized && x->rem)
			x->t->close_after = 1;   /* ended short: the client must not wait */
		if (x->streaming)
			http_stream_end(x->t);
		else
			http_answer_text(x->t, 502, why ? why : "the preview's server closed the connection\n");
	}
	px_free(x);
}

/* ----------------------------------------------------------- the splice */

/* a sized body's rest handed to the front (a plain HTTP/1.1 client of
 * its): it splices upstream's socket to the client's itself, one hop
 * instead of two (through lws's socket), and lws's answer ends here, its
 * connection kept; 1 when handed (x freed) */
static int hand_off(struct px *x)
{
	struct http_txn *t = x->t;
	if (!x->sized || !x->rem || x->pp[0] >= 0 || !x->up || http_tls(t->wsi) ||
	    !server_via_front(t->wsi))
		return 0;
	int fd = fcntl(lws_get_socket_fd(x->up), F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	if (front_take_body(lws_get_socket_fd(t->wsi), fd, x->rem) < 0) {
		close(fd);
		return 0;
	}
	/* (lws's wsi of it closes its own fd only: no shutdown of a raw file) */
	lws_rx_flow_control(x->up, 0);
	x->rem = 0;
	px_finish(x, NULL);
	return 1;
}

/* the body may go socket to socket from here: a plain body whose head (and
 * what came with it) went out, nothing of lws's own left to write, no TLS
 * in lws; handed to the front (-1: x freed), else its pipe made (1) */
static int splice_ready(struct px *x)
{
	struct http_txn *t = x->t;
	if (x->pp[0] >= 0)
		return 1;
	if (!t || !x->streaming || x->chunked || !t->hdr_sent || t->cut || t->ended ||
	    t->off < t->out.len || lws_partial_buffered(t->wsi) || lws_is_ssl(t->wsi))
		return 0;
	if (hand_off(x))
		return -1;
	if (pipe2(x->pp, O_NONBLOCK | O_CLOEXEC) < 0) {
		x->pp[0] = x->pp[1] = -1;
		return 0;
	}
	fcntl(x->pp[1], F_SETPIPE_SZ, PX_PIPE);   /* (else the default 64 KiB) */
	/* the front's unix socket takes a pipeful at once (TCP's own sizes
	 * left to the kernel's tuning) */
	int fd = lws_get_socket_fd(t->wsi), dom = 0, sz = PX_PIPE;
	socklen_t dl = sizeof dom;
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &dl) == 0 && dom == AF_UNIX)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
	return 1;
}

static void hold_upstream(struct px *x, int hold)
{
	if (x->up && x->held != hold) {
		x->held = hold;
		lws_rx_flow_control(x->up, !hold);
	}
}

/* the pipe to the client, then upstream into the (empty) pipe, while both
 * go: when the client takes no more, upstream is held and the client's
 * writable asked for (client_drained goes on); -1 when x is gone */
static int splice_pump(struct px *x)
{
	int cfd = lws_get_socket_fd(x->t->wsi);
	for (int i = 0; i < 64; i++) {
		if (x->inpipe) {
			ssize_t n = splice(x->pp[0], NULL, cfd, NULL, x->inpipe,
					   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
				hold_upstream(x, 1);
				lws_callback_on_writable(x->t->wsi);
				return 0;
			}
			if (n <= 0) {   /* the client's socket broke: lws closes it */
				x->t->close_after = 1;
				px_finish(x, NULL);
				return -1;
			}
			x->inpipe -= (size_t)n;
			continue;
		}
		if (x->up_eof || !x->up || (x->sized && !x->rem)) {
			px_finish(x, NULL);
			return -1;
		}
		size_t want = PX_PIPE;
		if (x->sized && x->rem < want)
			want = (size_t)x->rem;
		ssize_t n = splice(lws_get_socket_fd(x->up), NULL, x->pp[1], NULL, want,
				   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			hold_upstream(x, 0);   /* (the pipe is empty: upstream has none) */
			return 0;
		}
		if (n <= 0) {
			px_finish(x, NULL);
			return -1;
		}
		x->inpipe += (size_t)n;
		if (x->sized)
			x->rem -= (unsigned long long)n;
	}
	/* still moving: on lws's next turn (upstream readable, or this) */
	lws_callback_on_writable(x->t->wsi);
	return 0;
}

/* lws wrote all it holds: the body spliced (or handed to the front) from
 * here when it can be, else upstream read again */
static void client_drained(struct http_txn *t)
{
	struct px *x = t->user;
	if (!x)
		return;
	int r = splice_ready(x);
	if (r < 0)
		return;   /* handed to the front */
	if (r)
		splice_pump(x);
	else
		hold_upstream(x, 0);
}

/* a body that may be spliced once lws wrote the head and what came with
 * it: upstream is held from its first piece on (client_drained lets go),
 * not read through lws's buffer while the head waits to go */
static int splice_wait(struct px *x)
{
	if (!x->t || !x->streaming || x->chunked || x->pp[0] >= 0 || lws_is_ssl(x->t->wsi))
		return 0;
	hold_upstream(x, 1);
	return 1;
}

static void client_sink(void *arg, const char *p, size_t n)
{
	struct px *x = arg;
	http_stream_write(x->t, p, n);
}

/* a piece of upstream's body to the client; -1 when the body is complete
 * (or its chunked framing broken) */
static int body_out(struct px *x, const char *p, size_t n)
{
	if (!x->t)
		return 0;
	size_t pend;
	if (x->sized) {
		/* the answer ends with its Content-Length: what follows is no
		 * answer to this request (dropped with the upstream connection) */
		size_t take = n < x->rem ? n : (size_t)x->rem;
		x->rem -= take;
		pend = http_stream_write(x->t, p, take);
		if (!x->rem)
			return -1;
	} else if (x->chunked) {
		int done;
		if (h1_chunk_scan(&x->ck, p, n, &done, client_sink, x) < 0 || done)
			return -1;
		pend = http_stream_write(x->t, "", 0);
	} else {
		pend = http_stream_write(x->t, p, n);
	}
	if (pend > PX_HELD_MAX && x->up && !x->held) {
		x->held = 1;
		lws_rx_flow_control(x->up, 0);
	}
	return 0;
}

/* upstream's head is in x->head up to hlen: start the client's answer (1;
 * 2 when the answer has no body), or an interim answer passed over (0); -1
 * when it is no HTTP answer */
static int head_done(struct px *x, size_t hlen)
{
	char *h = x->head.p;
	struct h1_head a;
	if (h1_parse_answer(h, hlen, &a) < 0)
		return -1;
	if (a.status < 200)
		return 0;   /* the real answer follows */
	x->chunked = a.chunked;
	char ctype[64] = "application/octet-stream";
	for (int i = 0; i < a.nh; i++) {
		const struct h1_hdr *f = &a.h[i];
		char *name = h + (f->name - h), *v = h + (f->val - h);
		name[f->nlen] = 0;   /* (its colon) */
		v[f->vlen] = 0;      /* (its CR, or white space) */
		for (char *c = name; *c; c++)
			if (*c >= 'A' && *c <= 'Z')
				*c = (char)(*c - 'A' + 'a');
		if (strcmp(name, "content-type") == 0)
			snprintf(ctype, sizeof ctype, "%s", v);
		/* the connection's own, and the framing and type the answer gets anew */
		if (h1_hop_by_hop(name, f->nlen) || strcmp(name, "content-length") == 0 ||
		    strcmp(name, "content-type") == 0)
			continue;
		if (strcmp(name, "location") == 0 && v[0] == '/' && v[1] != '/' && !x->by_host) {
			char loc[PX_URI_MAX];
			snprintf(loc, sizeof loc, "/proxy/%d%s", x->port, v);
			http_set_header(x->t, name, loc);
		} else {
			http_set_header(x->t, name, v);
		}
	}
	int sized = !x->chunked && a.clen >= 0;
	int bodiless = x->head_req || a.status == 204 || a.status == 304 || (sized && !a.clen);
	if (http_stream_start(x->t, a.status, ctype) == 0 && sized && !bodiless)
		http_stream_sized(x->t, (unsigned long long)a.clen);
	x->t->drained = client_drained;
	x->streaming = 1;
	x->sized = sized && !bodiless;
	x->rem = x->sized ? (unsigned long long)a.clen : 0;
	return bodiless ? 2 : 1;
}

/* One read from upstream: 1 when there may be more to read now, 0 when
 * not (a short read, held), -1 when x is gone (freed). */
static int up_read(struct px *x)
{
	static char b[PX_READ];
	ssize_t n = recv(lws_get_socket_fd(x->up), b, sizeof b, 0);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0) {
		px_finish(x, n < 0 ? "the preview's server failed\n" : NULL);
		return -1;
	}
	if (!x->t) {
		px_free(x);
		return -1;
	}
	int more = n == (ssize_t)sizeof b;
	if (x->streaming) {
		if (body_out(x, b, (size_t)n) < 0) {
			px_finish(x, NULL);
			return -1;
		}
		if (splice_wait(x))
			return 0;
		return more && !x->held;
	}
	buf_append(&x->head, b, (size_t)n);
	size_t hlen;
	int r;
	do {
		hlen = h1_head_len(x->head.p, x->head.len);
		if (!hlen) {
			if (x->head.len > PX_HEAD_MAX) {
				px_finish(x, "the preview's server sent a head too large\n");
				return -1;
			}
			return more;
		}
		r = head_done(x, hlen);
		if (r < 0) {
			px_finish(x, "the preview's server answered no HTTP\n");
			return -1;
		}
		if (!r)
			buf_consume(&x->head, hlen);
	} while (!r);
	if (r == 2) {   /* the whole answer: what follows is not for the client */
		px_finish(x, NULL);
		return -1;
	}
	int piece = x->head.len > hlen;
	if (piece && body_out(x, x->head.p + hlen, x->head.len - hlen) < 0) {
		px_finish(x, NULL);
		return -1;
	}
	buf_free(&x->head);
	if (piece && splice_wait(x))
		return 0;
	return more && !x->held;
}

/* a few reads per wakeup (fewer trips round the loop) while the client keeps up */
static void up_readable(struct px *x)
{
	int r = x->t ? splice_ready(x) : 0;
	if (r < 0)
		return;   /* handed to the front */
	if (r) {
		splice_pump(x);
		return;
	}
	for (int i = 0; i < 4; i++)
		if (up_read(x) <= 0)
			return;
}

/* lws takes POLLOUT off a raw file's wsi after its WRITEABLE callback
 * (up_write's caller): writable is asked for again from a timer, after
 * lws's turn, or the rest of the request would wait for good */
static void px_rearm(lws_sorted_usec_list_t *sul)
{
	struct px *x = lws_container_of(sul, struct px, rearm);
	if (x->up)
		lws_callback_on_writable(x->up);
}

static void up_write(struct px *x)
{
	int fd = lws_get_socket_fd(x->up);
	if (!x->connected) {
		int err = 0;
		socklen_t el = sizeof err;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err) {
			px_finish(x, "the preview's port refused the connection\n");
			return;
		}
		x->connected = 1;
	}
	while (x->out_off < x->out.len) {
		ssize_t n = send(fd, x->out.p + x->out_off, x->out.len - x->out_off, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				break;
			px_finish(x, "the preview's server closed the connection\n");
			return;
		}
		x->out_off += (size_t)n;
	}
	if (x->out_off < x->out.len) {
		server_timer(&x->rearm, px_rearm, 1);
	} else {
		buf_free(&x->out);
		x->out_off = 0;
	}
}

static int up_event(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
{
	struct px *x = arg;
	(void)wsi;
	switch (reason) {
	case LWS_CALLBACK_RAW_RX_FILE:
		if (!x)
			return -1;
		up_readable(x);
		break;
	case LWS_CALLBACK_RAW_WRITEABLE_FILE:
		if (x)
			up_write(x);
		break;
	case LWS_CALLBACK_RAW_CLOSE_FILE:
		if (x && x->up == wsi) {
			x->up = NULL;
			if (x->t && x->inpipe) {
				x->up_eof = 1;   /* the pipe first (client_drained) */
				lws_callback_on_writable(x->t->wsi);
			} else {
				px_finish(x, NULL);
			}
		}
		break;
	default:
		break;
	}
	return 0;
}

/* A socket connecting to port where the program listens: loopback for a
 * wildcard or loopback address (127.0.0.1, ::1), else the very address it
 * bound (one of the sandbox's own, never another host); -1 if none. */
int proxy_connect(int port, const char *addr)
{
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof ss);
	socklen_t len;
	int v6 = strchr(addr, ':') != NULL;
	if (v6) {
		struct sockaddr_in6 *sa = (struct sockaddr_in6 *)&ss;
		sa->sin6_family = AF_INET6;
		sa->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, addr, &sa->sin6_addr) != 1 ||
		    IN6_IS_ADDR_UNSPECIFIED(&sa->sin6_addr) || IN6_IS_ADDR_LINKLOCAL(&sa->sin6_addr))
			sa->sin6_addr = in6addr_loopback;
		len = sizeof *sa;
	} else {
		struct sockaddr_in *sa = (struct sockaddr_in *)&ss;
		sa->sin_family = AF_INET;
		sa->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, addr, &sa->sin_addr) != 1 || sa->sin_addr.s_addr == INADDR_ANY)
			sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		len = sizeof *sa;
	}
	int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&ss, len) < 0 && errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	return fd;
}

/* --------------------------------------------------------------- route */

int proxy_target(struct lws *wsi, const char *uri, int *by_host, const char **rest)
{
	int port = proxy_host_port(wsi);
	if (port) {
		*by_host = 1;
		*rest = uri;
		return port;
	}
	if (strncmp(uri, "/proxy/", 7) != 0)
		return 0;
	char *end;
	long p = strtol(uri + 7, &end, 10);
	if (end == uri + 7 || (*end && *end != '/') || p < 1 || p > 65535 || uri[7] == '0')
		return -1;
	*rest = *end ? end : "/";
	return (int)p;
}

/* the port and the path (+ query) to ask upstream for; 0 when not ours */
static int target(struct http_txn *t, int *by_host, buf_t *path)
{
	enum lws_token_indexes tok;
	if (!method_of(t->wsi, &tok))
		return 0;
	char *uri = xmalloc(PX_URI_MAX);
	int port = 0;
	if (lws_hdr_copy(t->wsi, uri, PX_URI_MAX, tok) < 0)
		goto out;
	const char *rest;
	if ((port = proxy_target(t->wsi, uri, by_host, &rest)) <= 0) {
		port = 0;
		goto out;
	}
	put_encoded(path, rest, "/:@!$&'()*+,;=");
	char q[PX_URI_MAX];
	int qn = lws_hdr_copy(t->wsi, q, sizeof q, WSI_TOKEN_HTTP_URI_ARGS);
	if (qn > 0) {
		/* lws keeps the arguments apart, decoded: join them again */
		buf_putc(path, '?');
		int first = 1;
		for (int i = 0;; i++) {
			char frag[PX_URI_MAX];
			int fl = lws_hdr_copy_fragment(t->wsi, frag, sizeof frag,
						       WSI_TOKEN_HTTP_URI_ARGS, i);
			if (fl < 0)
				break;
			if (strncmp(frag, "token=", 6) == 0)
				continue;   /* termd's, never the app's */
			if (!first)
				buf_putc(path, '&');
			first = 0;
			put_encoded(path, frag, "/:@!$'()*+,;=?");
		}
		if (path->p[path->len - 1] == '?')
			path->p[--path->len] = 0;
	}
out:
	free(uri);
	return port;
}

static void copy_hdr(struct lws *wsi, buf_t *b, enum lws_token_indexes tok, const char *name)
{
	int l = lws_hdr_total_length(wsi, tok);
	if (l <= 0 || l > 8000)
		return;
	char *v = xmalloc((size_t)l + 1);
	if (lws_hdr_copy(wsi, v, l + 1, tok) > 0 && !strpbrk(v, "\r\n"))
		buf_printf(b, "%s: %s\r\n", name, v);
	free(v);
}

/* Cookie without termd's own */
static void copy_cookie(struct lws *wsi, buf_t *b)
{
	char c[8192];
	if (lws_hdr_copy(wsi, c, sizeof c, WSI_TOKEN_HTTP_COOKIE) <= 0 || strpbrk(c, "\r\n"))
		return;
	buf_t keep = {0};
	for (char *p = c; p && *p;) {
		while (*p == ' ' || *p == ';')
			p++;
		char *end = strchr(p, ';');
		if (end)
			*end = 0;
		if (*p && strncmp(p, "termd_preview=", 14) != 0)
			buf_printf(&keep, "%s%s", keep.len ? "; " : "", p);
		p = end ? end + 1 : NULL;
	}
	if (keep.len)
		buf_printf(b, "Cookie: %s\r\n", keep.p);
	buf_free(&keep);
}

/* X-Forwarded-For, -Host, -Proto and, on a /proxy/<port> path, -Prefix */
static void forwarded(struct lws *wsi, buf_t *b, int port, int by_host)
{
	char peer[64] = "";
	http_peer(wsi, peer, sizeof peer);
	if (peer[0])
		buf_printf(b, "X-Forwarded-For: %s\r\n", peer);
	char host[256];
	if (lws_hdr_copy(wsi, host, sizeof host, WSI_TOKEN_HOST) > 0 && !strpbrk(host, "\r\n"))
		buf_printf(b, "X-Forwarded-Host: %s\r\n", host);
	buf_printf(b, "X-Forwarded-Proto: %s\r\n", http_tls(wsi) ? "https" : "http");
	if (!by_host)
		buf_printf(b, "X-Forwarded-Prefix: /proxy/%d\r\n", port);
}

/* the client's headers a request (PX_HTTP) or an upgrade (PX_WS) takes on */
enum { PX_HTTP = 1, PX_WS = 2 };
static const struct {
	enum lws_token_indexes tok;
	const char *name;
	int in;
} px_hdrs[] = {
	{WSI_TOKEN_KEY, "Sec-WebSocket-Key", PX_WS},
	{WSI_TOKEN_VERSION, "Sec-WebSocket-Version", PX_WS},
	{WSI_TOKEN_PROTOCOL, "Sec-WebSocket-Protocol", PX_WS},
	{WSI_TOKEN_EXTENSIONS, "Sec-WebSocket-Extensions", PX_WS},
	{WSI_TOKEN_HTTP_ACCEPT, "Accept", PX_HTTP},
	{WSI_TOKEN_HTTP_ACCEPT_ENCODING, "Accept-Encoding", PX_HTTP},
	{WSI_TOKEN_HTTP_ACCEPT_LANGUAGE, "Accept-Language", PX_HTTP},
	{WSI_TOKEN_HTTP_CONTENT_TYPE, "Content-Type", PX_HTTP},
	{WSI_TOKEN_HTTP_USER_AGENT, "User-Agent", PX_HTTP | PX_WS},
	{WSI_TOKEN_HTTP_IF_NONE_MATCH, "If-None-Match", PX_HTTP},
	{WSI_TOKEN_HTTP_IF_MODIFIED_SINCE, "If-Modified-Since", PX_HTTP},
	{WSI_TOKEN_HTTP_RANGE, "Range", PX_HTTP},
	{WSI_TOKEN_HTTP_REFERER, "Referer", PX_HTTP},
	{WSI_TOKEN_HTTP_CACHE_CONTROL, "Cache-Control", PX_HTTP},
	{WSI_TOKEN_ORIGIN, "Origin", PX_HTTP | PX_WS},
};

void proxy_client_hdrs(struct lws *wsi, buf_t *b, int port, int by_host, int upgrade)
{
	forwarded(wsi, b, port, by_host);
	for (size_t i = 0; i < sizeof px_hdrs / sizeof px_hdrs[0]; i++)
		if (px_hdrs[i].in & (upgrade ? PX_WS : PX_HTTP))
			copy_hdr(wsi, b, px_hdrs[i].tok, px_hdrs[i].name);
	copy_cookie(wsi, b);
}

static void build_request(struct px *x, struct http_txn *t, const char *method, const char *path)
{
	struct lws *wsi = t->wsi;
	buf_t *b = &x->out;
	buf_printf(b, "%s %s HTTP/1.1\r\nHost: localhost:%d\r\nConnection: close\r\n", method, path,
		   x->port);
	proxy_client_hdrs(wsi, b, x->port, x->by_host, 0);
	/* Authorization only when it is not termd's own credential */
	char auth[600];
	if (lws_hdr_copy(wsi, auth, sizeof auth, WSI_TOKEN_HTTP_AUTHORIZATION) > 0 &&
	    !(strncasecmp(auth, "Bearer ", 7) == 0 && preview_token_ok(auth + 7)) &&
	    !strpbrk(auth, "\r\n"))
		buf_printf(b, "Authorization: %s\r\n", auth);
	if (t->body.len || t->post)
		buf_printf(b, "Content-Length: %zu\r\n", t->body.len);
	buf_append(b, "\r\n", 2);
	if (t->body.len)
		buf_append(b, t->body.p, t->body.len);
}

static int proxy_auth_ok(struct lws *wsi, enum auth_level level)
{
	if (level == AUTH_FULL || cookie_ok(wsi))
		return 1;
	char auth[600], tok[600];
	if (lws_hdr_copy(wsi, auth, sizeof auth, WSI_TOKEN_HTTP_AUTHORIZATION) > 0 &&
	    strncasecmp(auth, "Bearer ", 7) == 0 && preview_token_ok(auth + 7))
		return 1;
	const char *qt = lws_get_urlarg_by_name(wsi, "token=", tok, sizeof tok);
	return qt && preview_token_ok(qt);
}

int proxy_admit_check(struct lws *wsi, enum auth_level level, int port, const char **addr,
		      const char **why)
{
	if (!proxy_auth_ok(wsi, level)) {
		*why = http_unauthorized_why(wsi, "a preview needs the full token or the preview "
					     "token\n");
		return 401;
	}
	const char *a = ports_find(port);
	if (!a) {
		*why = "no program of termd's listens on that port\n";
		return 404;
	}
	if (addr)
		*addr = a;
	return 0;
}

/* before the body: access, the port, the ?token= cookie */
static int proxy_admit(struct http_txn *t)
{
	int by_host = 0;
	buf_t path = {0};
	int port = target(t, &by_host, &path);
	if (!port) {
		buf_free(&path);
		http_answer_text(t, 404, "not found\n");
		return 1;
	}
	char tok[600];
	const char *qt = lws_get_urlarg_by_name(t->wsi, "token=", tok, sizeof tok);
	const char *why;
	int status = proxy_admit_check(t->wsi, t->auth, port, NULL, &why);
	if (status) {
		buf_free(&path);
		http_answer_text(t, status, why);
		return 1;
	}
	if (qt && (opts.token || opts.preview_token)) {
		/* the token once: a cookie for the rest, the URL without it */
		char cookie[160], loc[PX_URI_MAX + 32];
		if (by_host)
			snprintf(cookie, sizeof cookie,
				 "termd_preview=%s; Path=/; HttpOnly; SameSite=Lax", cookie_secret);
		else
			snprintf(cookie, sizeof cookie,
				 "termd_preview=%s; Path=/proxy/%d/; HttpOnly; SameSite=Lax",
				 cookie_secret, port);
		if (by_host)
			snprintf(loc, sizeof loc, "%s", path.p);
		else
			snprintf(loc, sizeof loc, "/proxy/%d%s", port, path.p);
		http_set_header(t, "set-cookie", cookie);
		http_set_header(t, "location", loc);
		http_set_header(t, "cache-control", "no-store");
		buf_free(&path);
		http_answer_text(t, 302, "preview opened\n");
		return 1;
	}
	buf_free(&path);
	/* a body to forward: gathered first (at most --max-frame bytes) */
	enum lws_token_indexes tk;
	const char *m = method_of(t->wsi, &tk);
	if (t->announced && m && strcmp(m, "GET") && strcmp(m, "HEAD") && strcmp(m, "OPTIONS"))
		t->post = 1;
	return 0;
}

static void proxy_fn(struct http_txn *t)
{
	int by_host = 0;
	buf_t path = {0};
	enum lws_token_indexes tok;
	const char *method = method_of(t->wsi, &tok);
	int port = target(t, &by_host, &path);
	const char *addr = port ? ports_find(port) : NULL;
	if (!method || !addr) {
		buf_free(&path);
		http_answer_text(t, 404, "no program of termd's listens on that port\n");
		return;
	}
	int fd = proxy_connect(port, addr);
	if (fd < 0) {
		buf_free(&path);
		http_answer_text(t, 502, "the preview's port refused the connection\n");
		return;
	}
	struct px *x = xcalloc(1, sizeof *x);
	x->pp[0] = x->pp[1] = -1;
	x->t = t;
	x->port = port;
	x->by_host = by_host;
	x->head_req = strcmp(method, "HEAD") == 0;
	build_request(x, t, method, path.p);
	buf_free(&path);
	x->up = server_adopt_fd(fd, up_event, x);
	if (!x->up) {
		close(fd);
		x->t = NULL;
		px_free(x);
		http_answer_text(t, 502, "termd could not follow the connection\n");
		return;
	}
	t->user = x;
	t->gone = client_gone;
	lws_callback_on_writable(x->up);
}

/* the Host route: a request whose Host names a preview */
static const struct http_route host_route = {"ANY", "/", proxy_admit, proxy_fn, 1, TD_API_TERMD};

static const struct http_route *proxy_host_route(struct lws *wsi)
{
	return proxy_host_port(wsi) ? &host_route : NULL;
}

void proxy_register(void)
{
	unsigned char r[16];
	lws_get_random(srv.ctx, r, sizeof r);
	for (int i = 0; i < 16; i++)
		snprintf(cookie_secret + 2 * i, 3, "%02x", r[i]);
	static const struct http_route routes[] = {
		{"ANY", "/proxy/", proxy_admit, proxy_fn, 1, TD_API_TERMD},
	};
	http_routes_register(routes, 1);
	http_host_route(proxy_host_route);
	http_upgrade_hook(proxy_ws_upgrade);
}
