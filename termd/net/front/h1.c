/* net/front/h1.c — the front's HTTP/1.1: a request head parsed (limit
 * FR_HEAD_MAX, else 431; proto/h1wire.c reads heads and chunks) and
 * rewritten for lws (X-Metadata-<key> folded into
 * one X-Termd-Metadata, the client's X-Termd-* dropped, X-Termd-Peer and
 * X-Termd-Tls and X-Termd-Api (its listener's APIs) added: fr_rewrite, which HTTP/2 uses too), bodies followed by
 * Content-Length or chunked framing so that the next pipelined head is found,
 * answers passed back byte for byte (a plain client's answer body, its
 * length known or ending with the connection, spliced from lws's socket to
 * the client's through a pipe, never read into the front), and after a
 * WebSocket upgrade answered 101 the two sides joined (lws's side spliced
 * too); the rest of a body the preview proxy handed over (fr_h1_hand) spliced
 * from the app's socket itself once lws's part went, the next request then
 * on a new connection to lws. Every buffer bounded: reads stop while full.
 * Its part of front.c's pump: fr_h1. */
#include "front.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/socket.h>

enum { H_HEAD, H_CL, H_CHUNK, H_UPWAIT, H_TUNNEL };
enum { RS_HEAD, RS_CL, RS_CHUNK, RS_CLOSE };

struct h1state {
	struct fwatch up;       /* the connection to lws */
	int st;
	unsigned long long rem;
	struct h1_chunk ck;
	struct fq upout;        /* bytes for lws */
	int up_eof, shut;
	/* lws's answer to the request in flight, followed to its end: lws 4.1
	 * answers only the first of pipelined requests, so the next one goes
	 * to it once this answer is whole */
	int inflight, req_head, untracked;
	int rs;
	unsigned long long rs_rem;
	struct h1_chunk rs_ck;
	struct fq rs_h;         /* the answer's head as it comes */
	int pp[2];              /* the splice pipe (-1: none yet; FR_PIPE bytes) */
	uint64_t upid;          /* up's name (fr_upstream_named; 0: none) */
	/* the rest of the answer's body handed over (fr_h1_hand): hand_rem
	 * bytes from hand.fd, once lws's part of it went (handing) */
	struct fwatch hand;
	unsigned long long hand_rem;
	int handing;
	int req_close;          /* the request in flight wants the connection closed after */
};

#define FR_PIPE (1u << 20)      /* the splice pipe's size asked for */

/* ------------------------------------------------------------- heads */

/* application/x-www-form-urlencoded, as Go's url.Values.Encode */
static void form_encode(struct fq *o, const char *s, size_t n, int lower)
{
	static const char hex[] = "0123456789ABCDEF";
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (lower)
			ch = (unsigned char)tolower(ch);
		if (isalnum(ch) || ch == '-' || ch == '.' || ch == '_' || ch == '~') {
			fq_put(o, &ch, 1);
		} else if (ch == ' ') {
			fq_put(o, "+", 1);
		} else {
			char e[3] = {'%', hex[ch >> 4], hex[ch & 15]};
			fq_put(o, e, 3);
		}
	}
}

/* connection-specific headers HTTP/2 forbids, and what the front sets */
static int h2_dropped(const struct h1_hdr *h)
{
	return h1_hop_by_hop(h->name, h->nlen) || h1_name_is(h, "host") || h1_name_is(h, "expect") ||
	       h1_name_is(h, "content-length");
}

void fr_rewrite(struct fq *out, const struct h1_hdr *h, int nh, const struct fconn *c, int from_h2)
{
	struct fq meta = {0};
	for (int i = 0; i < nh; i++) {
		if (h1_name_is(&h[i], "x-termd-metadata") || h1_name_is(&h[i], "x-termd-peer") ||
		    h1_name_is(&h[i], "x-termd-tls") || h1_name_is(&h[i], "x-termd-api"))
			continue;   /* only the front says these */
		if (h[i].nlen > 11 && strncasecmp(h[i].name, "x-metadata-", 11) == 0) {
			if (meta.len)
				fq_put(&meta, "&", 1);
			form_encode(&meta, h[i].name + 11, h[i].nlen - 11, 1);
			fq_put(&meta, "=", 1);
			form_encode(&meta, h[i].val, h[i].vlen, 0);
			continue;
		}
		if (from_h2 && h2_dropped(&h[i]))
			continue;
		fq_field(out, h[i].name, h[i].nlen, h[i].val, h[i].vlen);
	}
	if (meta.len)
		fq_field(out, "X-Termd-Metadata", 16, meta.p + meta.off, meta.len);
	fq_free(&meta);
	if (c->peer[0])
		fq_printf(out, "X-Termd-Peer: %s\r\n", c->peer);
	if (c->ssl)
		fq_put(out, "X-Termd-Tls: 1\r\n", 16);
	fq_printf(out, "X-Termd-Api: %u\r\n", c->api);
}

static const char *reason(int status)
{
	switch (status) {
	case 400: return "Bad Request";
	case 431: return "Request Header Fields Too Large";
	case 502: return "Bad Gateway";
	default: return "Error";
	}
}

void fr_answer(struct fconn *c, int status, const char *why)
{
	fq_printf(&c->cout, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
		  "Connection: close\r\n\r\n%s\n", status, reason(status), strlen(why) + 1, why);
	__atomic_add_fetch(&fr_n_refused, 1, __ATOMIC_RELAXED);
	c->close_after = 1;
}

/* --------------------------------------------------- the connection */

int fr_h1_init(struct fconn *c)
{
	struct h1state *h = xcalloc(1, sizeof *h);
	h->up.fd = -1;
	h->up.kind = FK_UP;
	h->up.owner = c;
	h->pp[0] = h->pp[1] = -1;
	h->hand.fd = -1;
	h->hand.kind = FK_UP;
	h->hand.owner = c;
	c->h1 = h;
	return 0;
}

void fr_h1_free(struct fconn *c)
{
	struct h1state *h = c->h1;
	if (!h)
		return;
	fr_unwatch(&h->up);
	fr_unwatch(&h->hand);
	if (h->pp[0] >= 0) {
		close(h->pp[0]);
		close(h->pp[1]);
	}
	fq_free(&h->upout);
	fq_free(&h->rs_h);
	c->h1 = NULL;
	/* an event of this turn may still name h->up: freed with the turn */
	h->up.fd = -1;
	h->hand.fd = -1;
	fr_defer(h);
}

int fr_h1_forwarding(struct fconn *c)
{
	return c->h1 && (c->h1->up.fd >= 0 || c->h1->hand.fd >= 0);
}

uint64_t fr_h1_upid(struct fconn *c)
{
	return c->h1 && c->h1->up.fd >= 0 ? c->h1->upid : 0;
}

void fr_h1_hand(struct fconn *c, int fd, unsigned long long rem)
{
	struct h1state *h = c->h1;
	if (h->hand.fd >= 0 || c->ssl || !rem) {
		close(fd);   /* (never: not a body the front can take) */
		c->close_after = 1;
		return;
	}
	h->hand.fd = fd;
	h->hand.reg = 0;
	h->hand.ev = 0;
	h->hand_rem = rem;
	h->handing = 0;
}

/* a head: checked, rewritten into upout, the body's framing noted */
static int take_head(struct fconn *c, char *p, size_t hl)
{
	struct h1state *h = c->h1;
	struct h1_head r;
	int st = h1_parse_request(p, hl, &r);
	if (st) {
		fr_answer(c, st, st == 431 ? "the request's head is too large" : "a malformed request");
		return 0;
	}
	if (h->up.fd < 0) {
		h->upid = 0;
		h->up.fd = c->ssl ? fr_upstream() : fr_upstream_named(&h->upid);
		if (h->up.fd < 0) {
			fr_answer(c, 502, "termd's server cannot be reached");
			return 0;
		}
		h->up.reg = 0;
	}
	fq_reqline(&h->upout, r.method, r.mlen, r.target, r.tlen, r.version, r.vlen);
	fr_rewrite(&h->upout, r.h, r.nh, c, 0);
	fq_put(&h->upout, "\r\n", 2);
	/* lws never answers Expect: 100-continue (curl then waits a second
	 * before its body): the front says go on, the answer before being
	 * whole in cout already (lws still sees the header: it ignores it) */
	if (r.expect_continue && !h->untracked && (r.clen > 0 || r.chunked))
		fq_put(&c->cout, "HTTP/1.1 100 Continue\r\n\r\n", 25);
	h->inflight = 1;
	h->req_head = r.mlen == 4 && memcmp(r.method, "HEAD", 4) == 0;
	/* Connection: close, or HTTP/1.0 without keep-alive (as lws reads it):
	 * a handed body's end is then the connection's */
	int close = r.vlen == 8 && memcmp(r.version, "HTTP/1.0", 8) == 0;
	for (int i = 0; i < r.nh; i++)
		if (h1_name_is(&r.h[i], "connection")) {
			if (h1_has_token(r.h[i].val, r.h[i].vlen, "close"))
				close = 1;
			else if (h1_has_token(r.h[i].val, r.h[i].vlen, "keep-alive"))
				close = 0;
		}
	h->req_close = close;
	h->rs = RS_HEAD;
	if (r.upgrade) {
		h->st = H_UPWAIT;
	} else if (r.chunked) {
		h->st = H_CHUNK;
		memset(&h->ck, 0, sizeof h->ck);
	} else if (r.clen > 0) {
		h->st = H_CL;
		h->rem = (unsigned long long)r.clen;
	}
	return 1;
}

/* the client's bytes so far, as far as lws's buffer takes them */
static int h1_process(struct fconn *c)
{
	struct h1state *h = c->h1;
	int prog = 0;
	while (c->cin.len && h->upout.len < FR_BUF_CAP && !c->close_after) {
		char *p = c->cin.p + c->cin.off;
		size_t n = c->cin.len;
		switch (h->st) {
		case H_HEAD: {
			if (h->inflight && !h->untracked)
				return prog;   /* the answer before first */
			if (!c->head_us)
				c->head_us = fr_now();
			char *e = memmem(p, n, "\r\n\r\n", 4);
			size_t hl = e ? (size_t)(e - p) + 4 : 0;
			if ((!e && n > FR_HEAD_MAX) || hl > FR_HEAD_MAX) {
				fr_answer(c, 431, "the request's head is too large");
				return 1;
			}
			if (!e)
				return prog;
			if (!take_head(c, p, hl))
				return 1;
			fq_drop(&c->cin, hl);
			c->head_us = 0;
			prog = 1;
			break;
		}
		case H_CL:
			if (fq_take(&h->upout, &c->cin, n, &h->rem))
				h->st = H_HEAD;
			prog = 1;
			break;
		case H_CHUNK: {
			int done;
			long k = h1_chunk_scan(&h->ck, p, n, &done, NULL, NULL);
			if (k < 0) {
				fr_answer(c, 400, "a malformed chunked body");
				return 1;
			}
			fq_put(&h->upout, p, (size_t)k);
			fq_drop(&c->cin, (size_t)k);
			if (done)
				h->st = H_HEAD;
			prog = 1;
			break;
		}
		case H_UPWAIT:
			return prog;
		default:   /* H_TUNNEL */
			fq_put(&h->upout, p, n);
			fq_drop(&c->cin, n);
			prog = 1;
		}
	}
	return prog;
}

/* an answer's head: what follows it and how it ends; 0: whole, -1 not ours */
static int answer_head(struct h1state *h, const char *p, size_t hl)
{
	struct h1_head a;
	if (h1_parse_answer(p, hl, &a) < 0)
		return -1;
	int code = a.status;
	if (code == 101 && h->st == H_UPWAIT) {
		h->st = H_TUNNEL;   /* from here on, the two sides joined */
		h->inflight = 0;
		return 0;
	}
	if (code >= 100 && code < 200)
		return 0;   /* an interim answer: the real one follows */
	if (h->st == H_UPWAIT)
		h->st = H_HEAD;   /* the upgrade refused: requests go on */
	long long clen = a.clen;
	int chunked = a.chunked;
	if (h->req_head) {
		/* termd's routes answer HEAD with a body (lws does not drop it):
		 * where this answer ends is not known, so requests are no longer
		 * held back on this connection (as lws alone would have it) */
		h->untracked = 1;
	} else if (code == 204 || code == 304 || clen == 0) {
		h->inflight = 0;
	} else if (chunked) {
		h->rs = RS_CHUNK;
		memset(&h->rs_ck, 0, sizeof h->rs_ck);
	} else if (clen > 0) {
		h->rs = RS_CL;
		h->rs_rem = (unsigned long long)clen;
	} else {
		h->rs = RS_CLOSE;   /* ends with the connection */
	}
	return 0;
}

/* lws's bytes as they pass to the client: where the answer ends */
static void track(struct h1state *h, const char *p, size_t n)
{
	while (n && h->inflight && !h->untracked && h->st != H_TUNNEL) {
		if (h->rs == RS_HEAD) {
			size_t had = h->rs_h.len;
			fq_put(&h->rs_h, p, n);
			char *b = h->rs_h.p + h->rs_h.off;
			size_t hl = h1_head_len(b, h->rs_h.len);
			if (!hl) {
				if (h->rs_h.len > (64u << 10))
					h->untracked = 1;   /* not an answer lws makes: forward as they come */
				return;
			}
			size_t used = hl - had;
			if (answer_head(h, b, hl) < 0)
				h->untracked = 1;
			fq_drop(&h->rs_h, h->rs_h.len);
			p += used;
			n -= used;
		} else if (h->rs == RS_CL) {
			size_t take = n < h->rs_rem ? n : (size_t)h->rs_rem;
			h->rs_rem -= take;
			p += take;
			n -= take;
			if (!h->rs_rem) {
				h->rs = RS_HEAD;
				h->inflight = 0;
			}
		} else if (h->rs == RS_CHUNK) {
			int done;
			long k = h1_chunk_scan(&h->rs_ck, p, n, &done, NULL, NULL);
			if (k < 0) {
				h->untracked = 1;
				return;
			}
			p += k;
			n -= (size_t)k;
			if (done) {
				h->rs = RS_HEAD;
				h->inflight = 0;
			}
		} else {
			return;   /* RS_CLOSE */
		}
	}
}

static int can_read_client(struct fconn *c)
{
	struct h1state *h = c->h1;
	return !c->eof && !c->close_after && c->cin.len < FR_BUF_CAP && h->st != H_UPWAIT &&
	       h->upout.len < FR_BUF_CAP;
}

static int pipe_made(struct h1state *h)
{
	if (h->pp[0] < 0) {
		if (pipe2(h->pp, O_NONBLOCK | O_CLOEXEC) < 0) {
			h->pp[0] = h->pp[1] = -1;
			return 0;
		}
		fcntl(h->pp[1], F_SETPIPE_SZ, FR_PIPE);   /* (else 64 KiB) */
	}
	return 1;
}

/* a body is handed over and lws's part of it all read: nothing more of
 * lws's is read until it went (lws may close the idle connection) */
static int at_hand(const struct h1state *h)
{
	return h->hand.fd >= 0 && h->inflight && h->rs == RS_CL && h->rs_rem <= h->hand_rem;
}

/* the bytes lws sends now go to the client untouched: an answer's body of
 * known length or one ending with the connection, or a joined WebSocket's
 * bytes, nothing in cout before
 * them, no TLS; the pipe made (or bytes still in it) */
static int splice_ok(struct fconn *c)
{
	struct h1state *h = c->h1;
	if (c->pend)
		return 1;
	if (c->ssl || c->cout.len || h->up.fd < 0 || h->up_eof)
		return 0;
	if (h->st != H_TUNNEL &&
	    (h->untracked || !h->inflight || (h->rs != RS_CL && h->rs != RS_CLOSE)))
		return 0;
	return pipe_made(h);
}

/* lws ended its connection mid-answer: lws hands a body over before it
 * closes (Connection: close, HTTP/1.0), and the hand-over may still be in
 * the queue: taken now, the end of lws's part then no end of the answer */
static int hand_at_end(struct fconn *c)
{
	struct h1state *h = c->h1;
	return h->hand.fd < 0 && h->inflight && !h->untracked && h->st != H_TUNNEL &&
	       h->rs == RS_CL && h->rs_rem > 0 && fr_take_hand(c);
}

/* the pipe's bytes (c->pend) to the client: 1 some went, 0 it takes no
 * more now, -1 its socket broke */
static int pipe_out(struct fconn *c)
{
	ssize_t n = splice(c->h1->pp[0], NULL, c->w.fd, NULL, c->pend,
			   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0)
		return -1;
	c->pend -= (size_t)n;
	c->last_us = c->out_us = fr_now();
	return 1;
}

/* the pipe to the client, then lws's bytes into the (empty) pipe, up to
 * the answer's end; 1 progress, -1 the client's socket broke */
static int splice_answer(struct fconn *c)
{
	struct h1state *h = c->h1;
	int prog = 0;
	for (int i = 0; i < 16; i++) {
		if (c->pend) {
			int r = pipe_out(c);
			if (r <= 0)
				return r < 0 ? -1 : prog;
			prog = 1;
			continue;
		}
		if (!splice_ok(c) || at_hand(h))
			return prog;
		size_t want = FR_PIPE;
		if (h->st != H_TUNNEL && h->rs == RS_CL && h->rs_rem < want)
			want = (size_t)h->rs_rem;
		if (h->hand.fd >= 0 && h->st != H_TUNNEL && h->rs == RS_CL)
			want = (size_t)(h->rs_rem - h->hand_rem);   /* (lws's part) */
		ssize_t n = splice(h->up.fd, NULL, h->pp[1], NULL, want,
				   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return prog;
		prog = 1;
		if (n <= 0) {
			if (!(n == 0 && hand_at_end(c)))
				h->up_eof = 1;
			return prog;
		}
		c->pend += (size_t)n;
		if (h->st != H_TUNNEL && h->rs == RS_CL) {
			h->rs_rem -= (unsigned long long)n;
			if (!h->rs_rem) {
				h->rs = RS_HEAD;
				h->inflight = 0;
			}
		}
	}
	return prog;
}

/* a handed body's end: 1 whole, 0 cut short (the client's connection then ends) */
static void hand_end(struct fconn *c, int whole)
{
	struct h1state *h = c->h1;
	fr_unwatch(&h->hand);
	h->handing = 0;
	h->hand_rem = 0;
	if (!whole || h->req_close) {
		c->close_after = 1;   /* (after what the pipe holds) */
		return;
	}
	h->rs = RS_HEAD;
	h->inflight = 0;
}

/* the handed body once lws's part went: 0 not yet, 1 from here on */
static int hand_start(struct fconn *c)
{
	struct h1state *h = c->h1;
	if (h->handing)
		return 1;
	if (h->inflight && !h->untracked && h->st != H_TUNNEL && h->rs == RS_HEAD)
		return 0;   /* its head still to come */
	if (!h->inflight || h->untracked || h->st == H_TUNNEL || h->rs != RS_CL ||
	    h->rs_rem < h->hand_rem) {
		hand_end(c, 0);   /* (never: the answer is not the one handed) */
		return 0;
	}
	if (h->rs_rem > h->hand_rem)
		return 0;
	h->handing = 1;
	/* lws is done with this connection: the next request gets a new one
	 * (lws would close this one, idle, while a long body goes) */
	if (h->st == H_HEAD && !h->upout.len) {
		fr_unwatch(&h->up);
		h->up_eof = h->shut = 0;
		h->upid = 0;
	}
	return 1;
}

/* the handed body: the pipe to the client (after cout), then the app's
 * socket into the pipe; 1 progress, -1 the client's socket broke */
static int hand_body(struct fconn *c)
{
	struct h1state *h = c->h1;
	int prog = 0;
	for (int i = 0; i < 16 && h->handing; i++) {
		if (c->pend) {
			int r = pipe_out(c);
			if (r <= 0)
				return r < 0 ? -1 : prog;
			prog = 1;
			continue;
		}
		if (c->cout.len || !pipe_made(h))
			return prog;
		size_t want = h->hand_rem < FR_PIPE ? (size_t)h->hand_rem : FR_PIPE;
		ssize_t n = splice(h->hand.fd, NULL, h->pp[1], NULL, want,
				   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return prog;
		prog = 1;
		if (n <= 0) {
			hand_end(c, 0);   /* the app ended it short */
			return prog;
		}
		c->pend += (size_t)n;
		h->hand_rem -= (unsigned long long)n;
		if (!h->hand_rem)
			hand_end(c, 1);   /* (the pipe still drains first) */
	}
	return prog;
}

/* lws's side of a turn: the client's bytes to it, its bytes to cout */
static int h1_work(struct fconn *c)
{
	struct h1state *h = c->h1;
	int prog = h1_process(c);
	if (h->up.fd >= 0 && h->upout.len)
		prog |= fr_upsend(h->up.fd, &h->upout);
	if (c->eof && !h->upout.len && !h->shut && h->up.fd >= 0) {
		shutdown(h->up.fd, SHUT_WR);
		h->shut = 1;
	}
	if (h->hand.fd >= 0 && hand_start(c)) {
		int r = hand_body(c);
		if (r < 0 || h->handing || c->pend)
			return r < 0 ? -1 : prog | r;
	}
	if (splice_ok(c)) {
		int r = splice_answer(c);
		if (r < 0)
			return -1;
		prog |= r;
		if (c->pend || splice_ok(c))
			return prog;
	}
	while (h->up.fd >= 0 && !h->up_eof && c->cout.len < FR_BUF_CAP && !at_hand(h)) {
		char *p = fq_room(&c->cout, 65536);
		ssize_t r = read(h->up.fd, p, 65536);
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			break;
		prog = 1;
		if (r <= 0) {
			if (!(r == 0 && hand_at_end(c)))
				h->up_eof = 1;
			break;
		}
		track(h, p, (size_t)r);
		c->cout.len += (size_t)r;
	}
	return prog;
}

static int h1_over(struct fconn *c)
{
	struct h1state *h = c->h1;
	return h->up_eof || c->close_after || (c->eof && h->up.fd < 0 && h->hand.fd < 0);
}

static void h1_watch(struct fconn *c)
{
	struct h1state *h = c->h1;
	if (h->hand.fd >= 0) {
		/* (parked, not only quiet: a socket hung up is always reported) */
		if (h->handing && !c->pend && !c->cout.len)
			fr_watch(&h->hand, EPOLLIN);
		else
			fr_park(&h->hand);
	}
	if (h->up.fd < 0)
		return;
	uint32_t ev = 0;
	if (!h->up_eof && c->cout.len < FR_BUF_CAP && !c->pend && !at_hand(h) && !h->handing)
		ev |= EPOLLIN;
	if (h->upout.len)
		ev |= EPOLLOUT;
	if (ev || !h->handing)
		fr_watch(&h->up, ev);
	else
		fr_park(&h->up);
}

const struct fr_proto fr_h1 = {
	.can_read = can_read_client,
	.work = h1_work,
	.over = h1_over,
	.watch = h1_watch,
};
