/* front-h1.c — the front's HTTP/1.1: a request head parsed (limit
 * FR_HEAD_MAX, else 431) and rewritten for lws (X-Metadata-<key> folded into
 * one X-Termd-Metadata, the client's X-Termd-* dropped, X-Termd-Peer and
 * X-Termd-Tls and X-Termd-Api (its listener's APIs) added: fr_rewrite, which HTTP/2 uses too), bodies followed by
 * Content-Length or chunked framing so that the next pipelined head is found,
 * answers passed back byte for byte, and after a WebSocket upgrade answered
 * 101 the two sides joined. Every buffer bounded: reads stop while full. */
#include "front.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/socket.h>

enum { H_HEAD, H_CL, H_CHUNK, H_UPWAIT, H_TUNNEL };
enum { RS_HEAD, RS_CL, RS_CHUNK, RS_CLOSE };

struct h1state {
	struct fwatch up;       /* the connection to lws */
	int st;
	unsigned long long rem;
	struct fr_chunk ck;
	struct fq upout;        /* bytes for lws */
	int up_eof, shut;
	/* lws's answer to the request in flight, followed to its end: lws 4.1
	 * answers only the first of pipelined requests, so the next one goes
	 * to it once this answer is whole */
	int inflight, req_head, untracked;
	int rs;
	unsigned long long rs_rem;
	struct fr_chunk rs_ck;
	struct fq rs_h;         /* the answer's head as it comes */
};

/* ------------------------------------------------------------- heads */

static int is_tchar(unsigned char ch)
{
	return isalnum(ch) || strchr("!#$%&'*+-.^_`|~", ch);
}

static int name_is(const struct fr_hdr *h, const char *n)
{
	return h->nlen == strlen(n) && strncasecmp(h->name, n, h->nlen) == 0;
}

static int has_token(const char *v, size_t n, const char *tok)
{
	size_t tl = strlen(tok);
	for (size_t i = 0; i + tl <= n; i++)
		if (strncasecmp(v + i, tok, tl) == 0 && (i == 0 || !isalnum((unsigned char)v[i - 1])) &&
		    (i + tl == n || !isalnum((unsigned char)v[i + tl])))
			return 1;
	return 0;
}

int fr_parse_head(char *p, size_t len, struct fr_req *r)
{
	memset(r, 0, sizeof *r);
	r->clen = -1;
	char *end = p + len;
	char *eol = memchr(p, '\n', len);
	if (!eol || eol == p || eol[-1] != '\r')
		return 400;
	/* METHOD SP target SP HTTP/1.x */
	char *sp1 = memchr(p, ' ', (size_t)(eol - p));
	if (!sp1 || sp1 == p)
		return 400;
	char *sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
	if (!sp2 || sp2 == sp1 + 1)
		return 400;
	for (char *q = p; q < sp1; q++)
		if (!is_tchar((unsigned char)*q))
			return 400;
	for (char *q = sp1 + 1; q < sp2; q++)
		if ((unsigned char)*q <= ' ' || *q == 0x7f)
			return 400;
	r->method = p;
	r->mlen = (size_t)(sp1 - p);
	r->target = sp1 + 1;
	r->tlen = (size_t)(sp2 - sp1 - 1);
	r->version = sp2 + 1;
	r->vlen = (size_t)(eol - 1 - r->version);
	if (r->vlen != 8 || (memcmp(r->version, "HTTP/1.1", 8) && memcmp(r->version, "HTTP/1.0", 8)))
		return 400;
	int conn_upgrade = 0, upgrade = 0;
	for (char *l = eol + 1; l < end;) {
		char *e = memchr(l, '\n', (size_t)(end - l));
		if (!e || e == l || e[-1] != '\r')
			return 400;
		if (e - 1 == l)   /* the empty line */
			break;
		if (*l == ' ' || *l == '\t')
			return 400;   /* obsolete line folding */
		char *colon = memchr(l, ':', (size_t)(e - l));
		if (!colon || colon == l)
			return 400;
		for (char *q = l; q < colon; q++)
			if (!is_tchar((unsigned char)*q))
				return 400;
		char *v = colon + 1, *ve = e - 1;
		while (v < ve && (*v == ' ' || *v == '\t'))
			v++;
		while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
			ve--;
		for (char *q = v; q < ve; q++)
			if (*q == 0 || *q == '\r')
				return 400;
		if (r->nh == FR_MAX_HDRS)
			return 431;
		struct fr_hdr *h = &r->h[r->nh++];
		h->name = l;
		h->nlen = (size_t)(colon - l);
		h->val = v;
		h->vlen = (size_t)(ve - v);
		if (name_is(h, "content-length")) {
			long long n = 0;
			if (!h->vlen || h->vlen > 18)
				return 400;
			for (size_t i = 0; i < h->vlen; i++) {
				if (!isdigit((unsigned char)v[i]))
					return 400;
				n = n * 10 + (v[i] - '0');
			}
			if (r->clen >= 0 && r->clen != n)
				return 400;
			r->clen = n;
		} else if (name_is(h, "transfer-encoding")) {
			if (h->vlen < 7 || strncasecmp(ve - 7, "chunked", 7) != 0)
				return 400;   /* no other coding is read */
			r->chunked = 1;
		} else if (name_is(h, "connection")) {
			conn_upgrade |= has_token(v, h->vlen, "upgrade");
		} else if (name_is(h, "upgrade")) {
			upgrade = 1;
		} else if (name_is(h, "expect")) {
			r->expect_continue = has_token(v, h->vlen, "100-continue");
		}
		l = e + 1;
	}
	if (r->chunked && r->clen >= 0)
		return 400;   /* both: a smuggling attempt */
	r->upgrade = upgrade && conn_upgrade;
	return 0;
}

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
static int h2_dropped(const struct fr_hdr *h)
{
	static const char *const names[] = {"connection", "keep-alive", "proxy-connection",
					    "transfer-encoding", "upgrade", "te", "host", "expect",
					    "content-length", NULL};
	for (int i = 0; names[i]; i++)
		if (name_is(h, names[i]))
			return 1;
	return 0;
}

void fr_rewrite(struct fq *out, const struct fr_hdr *h, int nh, const struct fconn *c, int from_h2)
{
	struct fq meta = {0};
	for (int i = 0; i < nh; i++) {
		if (name_is(&h[i], "x-termd-metadata") || name_is(&h[i], "x-termd-peer") ||
		    name_is(&h[i], "x-termd-tls") || name_is(&h[i], "x-termd-api"))
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
		fq_put(out, h[i].name, h[i].nlen);
		fq_put(out, ": ", 2);
		fq_put(out, h[i].val, h[i].vlen);
		fq_put(out, "\r\n", 2);
	}
	if (meta.len) {
		fq_put(out, "X-Termd-Metadata: ", 18);
		fq_put(out, meta.p + meta.off, meta.len);
		fq_put(out, "\r\n", 2);
	}
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

/* ------------------------------------------------------ chunked bodies */

static int hexval(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	ch = tolower(ch);
	return ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

long fr_chunk_scan(struct fr_chunk *k, const char *p, size_t n, int *done, struct fq *data)
{
	size_t i = 0;
	*done = 0;
	while (i < n) {
		int ch = (unsigned char)p[i];
		switch (k->st) {
		case 0:   /* size [; extensions] CRLF */
			if (++k->linelen > 1024)
				return -1;
			if (ch == '\n') {
				if (!k->sawdigit)
					return -1;
				k->st = k->rem ? 1 : 3;
				k->linelen = 0;
				k->sawdigit = k->inext = k->lastcr = 0;
			} else if (!k->inext && hexval(ch) >= 0) {
				if (k->rem >> 56)
					return -1;
				k->rem = k->rem * 16 + (unsigned)hexval(ch);
				k->sawdigit = 1;
			} else if (ch == ';' || ch == ' ' || ch == '\t') {
				k->inext = 1;
			} else if (ch != '\r' && !k->inext) {
				return -1;
			}
			i++;
			break;
		case 1: {   /* data */
			size_t take = n - i < k->rem ? n - i : (size_t)k->rem;
			if (data)
				fq_put(data, p + i, take);
			i += take;
			k->rem -= take;
			if (!k->rem) {
				k->st = 2;
				k->linelen = 0;
			}
			break;
		}
		case 2:   /* CRLF after the data */
			if (ch == '\r' && !k->linelen) {
				k->linelen = 1;
			} else if (ch == '\n') {
				k->st = 0;
				k->linelen = 0;
			} else {
				return -1;
			}
			i++;
			break;
		default:   /* trailer lines, to an empty one */
			i++;
			if (ch == '\n') {
				if (k->linelen == 0 || (k->linelen == 1 && k->lastcr)) {
					memset(k, 0, sizeof *k);
					*done = 1;
					return (long)i;
				}
				k->linelen = 0;
				k->lastcr = 0;
			} else {
				k->lastcr = ch == '\r';
				if (++k->linelen > 8192)
					return -1;
			}
		}
	}
	return (long)i;
}

/* --------------------------------------------------- the connection */

int fr_h1_init(struct fconn *c)
{
	struct h1state *h = xcalloc(1, sizeof *h);
	h->up.fd = -1;
	h->up.kind = FK_UP;
	h->up.owner = c;
	c->h1 = h;
	return 0;
}

void fr_h1_free(struct fconn *c)
{
	struct h1state *h = c->h1;
	if (!h)
		return;
	fr_unwatch(&h->up);
	fq_free(&h->upout);
	fq_free(&h->rs_h);
	c->h1 = NULL;
	/* an event of this turn may still name h->up: freed with the turn */
	h->up.fd = -1;
	fr_defer(h);
}

int fr_h1_forwarding(struct fconn *c)
{
	return c->h1 && c->h1->up.fd >= 0;
}

/* a head: checked, rewritten into upout, the body's framing noted */
static int take_head(struct fconn *c, char *p, size_t hl)
{
	struct h1state *h = c->h1;
	struct fr_req r;
	int st = fr_parse_head(p, hl, &r);
	if (st) {
		fr_answer(c, st, st == 431 ? "the request's head is too large" : "a malformed request");
		return 0;
	}
	if (h->up.fd < 0) {
		h->up.fd = fr_upstream();
		if (h->up.fd < 0) {
			fr_answer(c, 502, "termd's server cannot be reached");
			return 0;
		}
		h->up.reg = 0;
	}
	fq_put(&h->upout, r.method, r.mlen);
	fq_put(&h->upout, " ", 1);
	fq_put(&h->upout, r.target, r.tlen);
	fq_put(&h->upout, " ", 1);
	fq_put(&h->upout, r.version, r.vlen);
	fq_put(&h->upout, "\r\n", 2);
	fr_rewrite(&h->upout, r.h, r.nh, c, 0);
	fq_put(&h->upout, "\r\n", 2);
	/* lws never answers Expect: 100-continue (curl then waits a second
	 * before its body): the front says go on, the answer before being
	 * whole in cout already (lws still sees the header: it ignores it) */
	if (r.expect_continue && !h->untracked && (r.clen > 0 || r.chunked))
		fq_put(&c->cout, "HTTP/1.1 100 Continue\r\n\r\n", 25);
	h->inflight = 1;
	h->req_head = r.mlen == 4 && memcmp(r.method, "HEAD", 4) == 0;
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
		case H_CL: {
			size_t take = n < h->rem ? n : (size_t)h->rem;
			fq_put(&h->upout, p, take);
			fq_drop(&c->cin, take);
			h->rem -= take;
			if (!h->rem)
				h->st = H_HEAD;
			prog = 1;
			break;
		}
		case H_CHUNK: {
			int done;
			long k = fr_chunk_scan(&h->ck, p, n, &done, NULL);
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
	if (hl < 12 || memcmp(p, "HTTP/1.", 7) != 0)
		return -1;
	int code = atoi(p + 9);
	if (code == 101 && h->st == H_UPWAIT) {
		h->st = H_TUNNEL;   /* from here on, the two sides joined */
		h->inflight = 0;
		return 0;
	}
	if (code >= 100 && code < 200)
		return 0;   /* an interim answer: the real one follows */
	if (h->st == H_UPWAIT)
		h->st = H_HEAD;   /* the upgrade refused: requests go on */
	long long clen = -1;
	int chunked = 0;
	for (const char *l = memchr(p, '\n', hl); l && l + 1 < p + hl; l = memchr(l + 1, '\n', (size_t)(p + hl - l - 1))) {
		const char *n = l + 1;
		size_t left = (size_t)(p + hl - n);
		if (left > 15 && !strncasecmp(n, "content-length:", 15))
			clen = strtoll(n + 15, NULL, 10);
		else if (left > 18 && !strncasecmp(n, "transfer-encoding:", 18))
			chunked = 1;
	}
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
			char *e = memmem(b, h->rs_h.len, "\r\n\r\n", 4);
			if (!e) {
				if (h->rs_h.len > (64u << 10))
					h->untracked = 1;   /* not an answer lws makes: forward as they come */
				return;
			}
			size_t hl = (size_t)(e - b) + 4, used = hl - had;
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
			long k = fr_chunk_scan(&h->rs_ck, p, n, &done, NULL);
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

int fr_h1_pump(struct fconn *c)
{
	struct h1state *h = c->h1;
	int prog = 1;
	for (int round = 0; round < 64 && prog; round++) {
		prog = 0;
		while (can_read_client(c)) {
			char *p = fq_room(&c->cin, 16384);
			ssize_t r = fr_cread(c, p, 16384);
			if (r == -2)
				return -1;
			if (r < 0)
				break;
			prog = 1;
			c->last_us = fr_now();
			if (r == 0) {
				c->eof = 1;
				break;
			}
			c->cin.len += (size_t)r;
		}
		prog |= h1_process(c);
		if (h->up.fd >= 0 && h->upout.len) {
			ssize_t r = send(h->up.fd, h->upout.p + h->upout.off, h->upout.len, MSG_NOSIGNAL);
			if (r > 0) {
				fq_drop(&h->upout, (size_t)r);
				prog = 1;
			} else if (r < 0 && errno != EAGAIN && errno != EINTR) {
				/* lws closed: what it answered is still read below */
				fq_drop(&h->upout, h->upout.len);
			}
		}
		if (c->eof && !h->upout.len && !h->shut && h->up.fd >= 0) {
			shutdown(h->up.fd, SHUT_WR);
			h->shut = 1;
		}
		while (h->up.fd >= 0 && !h->up_eof && c->cout.len < FR_BUF_CAP) {
			char *p = fq_room(&c->cout, 65536);
			ssize_t r = read(h->up.fd, p, 65536);
			if (r < 0 && (errno == EAGAIN || errno == EINTR))
				break;
			prog = 1;
			if (r <= 0) {
				h->up_eof = 1;
				break;
			}
			track(h, p, (size_t)r);
			c->cout.len += (size_t)r;
		}
		size_t before = c->cout.len;
		if (fr_cflush(c) < 0)
			return -1;
		if (c->cout.len < before)
			prog = 1;   /* room again: more may be made to go */
	}
	/* still moving after 64 turns: again on the loop's next turn, after
	 * the other connections' events */
	c->again = prog;
	if (!c->cout.len && (h->up_eof || c->close_after || (c->eof && h->up.fd < 0)))
		return -1;
	uint32_t ev = 0;
	if (can_read_client(c) || c->wr_wants_in)
		ev |= EPOLLIN;
	if (c->cout.len || c->rd_wants_out)
		ev |= EPOLLOUT;
	fr_watch(&c->w, ev);
	if (h->up.fd >= 0) {
		ev = 0;
		if (!h->up_eof && c->cout.len < FR_BUF_CAP)
			ev |= EPOLLIN;
		if (h->upout.len)
			ev |= EPOLLOUT;
		fr_watch(&h->up, ev);
	}
	return 0;
}
