/* front-h2.c — the front's HTTP/2 (nghttp2): each stream becomes one
 * HTTP/1.1 request on a connection of its own to lws (its head rewritten as
 * HTTP/1.1's by fr_rewrite; the body with its Content-Length, else chunked),
 * and lws's answer is parsed (status, headers minus the hop-by-hop ones,
 * body by Content-Length, chunked or close) and sent back as HEADERS and DATA
 * as it comes, under HTTP/2's flow control: a stream's upstream is read only
 * while its buffer has room, the client's DATA is acknowledged (WINDOW_UPDATE)
 * only once lws took it. RST_STREAM closes the stream's upstream. No
 * extended CONNECT: WebSockets stay on HTTP/1.1. Answers read by
 * proto/h1wire.c; its part of front.c's pump: fr_h2. */
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

#define H2_STREAM_WINDOW (256 << 10)
#define H2_CONN_WINDOW (1 << 20)
#define H2_MAX_STREAMS 100
#define H2_RESP_HEAD_MAX (64u << 10)

enum { R_HEAD, R_CL, R_CHUNK, R_CLOSE, R_DONE };

struct h2stream {
	struct fwatch up;       /* the connection to lws for this stream */
	struct h2stream *next;
	struct fconn *c;
	int32_t id;
	/* the request's headers as they come: names and values in store */
	struct fq store;
	size_t off[FR_MAX_HDRS][2], len[FR_MAX_HDRS][2];
	int nh, too_big;
	size_t hsize;
	int req_end, chunked_req, headers_done;
	struct fq upout;        /* the HTTP/1.1 request for lws */
	size_t unconsumed;      /* DATA bytes in upout, acknowledged once written */
	/* the answer */
	int rst, is_head, submitted, deferred, up_eof;
	unsigned long long rem;
	struct h1_chunk ck;
	struct fq rin, body;
};

struct h2state {
	nghttp2_session *ng;
	struct h2stream *streams;
	int nstreams;
};

static struct h2stream *stream_of(struct fconn *c, int32_t id)
{
	return nghttp2_session_get_stream_user_data(c->h2->ng, id);
}

static ssize_t body_read(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t length,
			 uint32_t *flags, nghttp2_data_source *src, void *user)
{
	(void)ng;
	(void)id;
	(void)user;
	struct h2stream *s = src->ptr;
	size_t n = s->body.len < length ? s->body.len : length;
	if (n) {
		memcpy(buf, s->body.p + s->body.off, n);
		fq_drop(&s->body, n);
	}
	if (!s->body.len && s->rst == R_DONE) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		return (ssize_t)n;
	}
	if (!n) {
		s->deferred = 1;
		return NGHTTP2_ERR_DEFERRED;
	}
	return (ssize_t)n;
}

static void submit(struct h2stream *s, const nghttp2_nv *nv, size_t n)
{
	nghttp2_data_provider prd = {.source.ptr = s, .read_callback = body_read};
	/* no body (HEAD, 204, 304, Content-Length 0): END_STREAM on the
	 * HEADERS, not an empty DATA frame after them */
	int none = s->rst == R_DONE && !s->body.len;
	nghttp2_submit_response(s->c->h2->ng, s->id, nv, n, none ? NULL : &prd);
	s->submitted = 1;
}

#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE}

/* the front answers the stream itself */
static void local_answer(struct h2stream *s, const char *status, const char *why)
{
	fq_drop(&s->body, s->body.len);
	fq_printf(&s->body, "%s\n", why);
	__atomic_add_fetch(&fr_n_refused, 1, __ATOMIC_RELAXED);
	s->rst = R_DONE;
	fr_unwatch(&s->up);
	char len[24];
	snprintf(len, sizeof len, "%zu", s->body.len);
	nghttp2_nv nv[] = {NV(":status", status), NV("content-type", "text/plain"),
			   NV("content-length", len)};
	submit(s, nv, 3);
}

static int hdr_is(const char *n, size_t l, const char *want)
{
	return l == strlen(want) && strncasecmp(n, want, l) == 0;
}

/* the stream's head as HTTP/1.1 for lws, and its connection */
static void start_request(struct h2stream *s)
{
	struct fconn *c = s->c;
	s->headers_done = 1;
	if (s->too_big) {
		local_answer(s, "431", "the request's head is too large");
		return;
	}
	struct h1_hdr h[FR_MAX_HDRS];
	int nh = 0;
	const char *method = NULL, *path = NULL, *auth = NULL;
	size_t ml = 0, pl = 0, al = 0;
	long long clen = -1;
	struct fq cookie = {0};
	for (int i = 0; i < s->nh; i++) {
		const char *n = s->store.p + s->off[i][0], *v = s->store.p + s->off[i][1];
		size_t nl = s->len[i][0], vl = s->len[i][1];
		if (hdr_is(n, nl, ":method")) {
			method = v, ml = vl;
		} else if (hdr_is(n, nl, ":path")) {
			path = v, pl = vl;
		} else if (hdr_is(n, nl, ":authority")) {
			auth = v, al = vl;
		} else if (n[0] == ':') {
			continue;
		} else if (hdr_is(n, nl, "host")) {
			if (!auth)
				auth = v, al = vl;
		} else if (hdr_is(n, nl, "cookie")) {
			if (cookie.len)
				fq_put(&cookie, "; ", 2);
			fq_put(&cookie, v, vl);
		} else {
			if (hdr_is(n, nl, "content-length")) {
				clen = 0;
				for (size_t k = 0; k < vl && k < 18; k++)
					clen = clen * 10 + (isdigit((unsigned char)v[k]) ? v[k] - '0' : 0);
			}
			h[nh].name = n;
			h[nh].nlen = nl;
			h[nh].val = v;
			h[nh].vlen = vl;
			nh++;
		}
	}
	if (!method || !path || (ml == 7 && !memcmp(method, "CONNECT", 7))) {
		fq_free(&cookie);
		local_answer(s, "400", "a request without :method and :path, or a CONNECT");
		return;
	}
	s->is_head = ml == 4 && !memcmp(method, "HEAD", 4);
	struct fq *o = &s->upout;
	fq_reqline(o, method, ml, path, pl, "HTTP/1.1", 8);
	if (auth)
		fq_field(o, "Host", 4, auth, al);
	if (cookie.len)
		fq_field(o, "Cookie", 6, cookie.p + cookie.off, cookie.len);
	fq_free(&cookie);
	fr_rewrite(o, h, nh, c, 1);
	if (clen >= 0) {
		fq_printf(o, "Content-Length: %lld\r\n", clen);
	} else if (!s->req_end) {
		fq_put(o, "Transfer-Encoding: chunked\r\n", 28);
		s->chunked_req = 1;
	} else if (!(ml == 3 && !memcmp(method, "GET", 3)) && !s->is_head) {
		fq_put(o, "Content-Length: 0\r\n", 19);
	}
	fq_put(o, "\r\n", 2);
	fq_free(&s->store);
	s->up.fd = fr_upstream();
	s->up.reg = 0;
	if (s->up.fd < 0)
		local_answer(s, "502", "termd's server cannot be reached");
}

static void end_request(struct h2stream *s)
{
	if (s->req_end)
		return;
	s->req_end = 1;
	if (s->chunked_req && s->up.fd >= 0)
		fq_put(&s->upout, "0\r\n\r\n", 5);
}

/* ------------------------------------------------------ nghttp2's calls */

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f, void *user)
{
	struct fconn *c = user;
	if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	struct h2stream *s = xcalloc(1, sizeof *s);
	s->c = c;
	s->id = f->hd.stream_id;
	s->up.fd = -1;
	s->up.kind = FK_UP;
	s->up.owner = c;
	s->next = c->h2->streams;
	c->h2->streams = s;
	c->h2->nstreams++;
	nghttp2_session_set_stream_user_data(ng, s->id, s);
	__atomic_add_fetch(&fr_n_streams, 1, __ATOMIC_RELAXED);
	return 0;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *f, const uint8_t *name, size_t nl,
		     const uint8_t *val, size_t vl, uint8_t flags, void *user)
{
	(void)ng;
	(void)flags;
	struct h2stream *s = stream_of(user, f->hd.stream_id);
	if (!s || s->headers_done)
		return 0;   /* trailers: not passed on */
	s->hsize += nl + vl + 4;
	if (s->hsize > FR_HEAD_MAX || s->nh == FR_MAX_HDRS) {
		s->too_big = 1;
		return 0;
	}
	s->off[s->nh][0] = s->store.off + s->store.len;
	s->len[s->nh][0] = nl;
	fq_put(&s->store, name, nl);
	s->off[s->nh][1] = s->store.off + s->store.len;
	s->len[s->nh][1] = vl;
	fq_put(&s->store, val, vl);
	s->nh++;
	return 0;
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *user)
{
	(void)ng;
	struct h2stream *s = stream_of(user, f->hd.stream_id);
	if (!s)
		return 0;
	if (f->hd.type == NGHTTP2_HEADERS) {
		if (f->hd.flags & NGHTTP2_FLAG_END_STREAM)
			s->req_end = 1;
		if (!s->headers_done)
			start_request(s);
		else if (f->hd.flags & NGHTTP2_FLAG_END_STREAM) {
			s->req_end = 0;
			end_request(s);
		}
	} else if (f->hd.type == NGHTTP2_DATA && (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
		end_request(s);
	}
	return 0;
}

static int on_data(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *d, size_t n,
		   void *user)
{
	(void)flags;
	struct h2stream *s = stream_of(user, id);
	if (!s || s->up.fd < 0 || s->rst == R_DONE) {
		nghttp2_session_consume(ng, id, n);   /* nobody takes it */
		return 0;
	}
	if (s->chunked_req) {
		if (!n)
			return 0;
		fq_printf(&s->upout, "%zx\r\n", n);
		fq_put(&s->upout, d, n);
		fq_put(&s->upout, "\r\n", 2);
	} else {
		fq_put(&s->upout, d, n);
	}
	s->unconsumed += n;
	return 0;
}

/* its upstream closed, its buffers and itself freed with the turn */
static void stream_free(struct h2stream *s)
{
	fr_unwatch(&s->up);
	fq_free(&s->store);
	fq_free(&s->upout);
	fq_free(&s->rin);
	fq_free(&s->body);
	fr_defer(s);
}

static int on_stream_close(nghttp2_session *ng, int32_t id, uint32_t err, void *user)
{
	(void)err;
	struct fconn *c = user;
	struct h2stream *s = stream_of(c, id);
	if (!s)
		return 0;
	nghttp2_session_set_stream_user_data(ng, id, NULL);
	for (struct h2stream **pp = &c->h2->streams; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	c->h2->nstreams--;
	stream_free(s);
	return 0;
}

/* ----------------------------------------------------------- answers */

static void fail_stream(struct h2stream *s)
{
	if (!s->submitted) {
		local_answer(s, "502", "termd's server answered nothing readable");
		return;
	}
	fr_unwatch(&s->up);
	nghttp2_submit_rst_stream(s->c->h2->ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
	s->rst = R_DONE;
}

/* lws's answer head: 0 not yet whole, 1 taken, -1 broken */
static int take_answer_head(struct h2stream *s)
{
	char *p = s->rin.p + s->rin.off;
	size_t hl = h1_head_len(p, s->rin.len);
	if (!hl)
		return s->rin.len > H2_RESP_HEAD_MAX ? -1 : 0;
	struct h1_head a;
	if (h1_parse_answer(p, hl, &a) < 0)
		return -1;
	int code = a.status;
	if (code < 200) {   /* an interim answer: not passed on */
		fq_drop(&s->rin, hl);
		return 1;
	}
	char status[4] = {p[9], p[10], p[11], 0};
	nghttp2_nv nv[FR_MAX_HDRS + 1];
	size_t n = 0;
	nv[n++] = (nghttp2_nv)NV(":status", status);
	for (int i = 0; i < a.nh; i++) {
		const struct h1_hdr *h = &a.h[i];
		if (h1_hop_by_hop(h->name, h->nlen))
			continue;
		char *name = p + (h->name - p);   /* HTTP/2's names are lowercase */
		for (size_t k = 0; k < h->nlen; k++)
			name[k] = (char)tolower((unsigned char)name[k]);
		nv[n++] = (nghttp2_nv){(uint8_t *)name, (uint8_t *)(p + (h->val - p)), h->nlen, h->vlen,
				       NGHTTP2_NV_FLAG_NONE};
	}
	long long clen = a.clen;
	int chunked = a.chunked;
	if (s->is_head || code == 204 || code == 304) {
		s->rst = R_DONE;
	} else if (chunked) {
		s->rst = R_CHUNK;
		memset(&s->ck, 0, sizeof s->ck);
	} else if (clen >= 0) {
		s->rst = clen ? R_CL : R_DONE;
		s->rem = (unsigned long long)clen;
	} else {
		s->rst = R_CLOSE;
	}
	submit(s, nv, n);   /* nghttp2 copies the names and values */
	fq_drop(&s->rin, hl);
	return 1;
}

static void body_sink(void *arg, const char *p, size_t n)
{
	fq_put(arg, p, n);
}

/* lws's bytes for this stream: the head, then the body into s->body */
static void take_answer(struct h2stream *s)
{
	while (s->rst != R_DONE && (s->rin.len || (s->up_eof && s->rst != R_HEAD))) {
		if (s->rst == R_HEAD) {
			int r = take_answer_head(s);
			if (r < 0) {
				fail_stream(s);
				return;
			}
			if (!r)
				break;
			continue;
		}
		if (s->body.len >= FR_BUF_CAP)
			break;
		char *p = s->rin.p + s->rin.off;
		size_t n = s->rin.len, room = FR_BUF_CAP - s->body.len;
		if (n > room)
			n = room;
		if (s->rst == R_CL) {
			if (fq_take(&s->body, &s->rin, n, &s->rem))
				s->rst = R_DONE;
		} else if (s->rst == R_CHUNK) {
			int done;
			long k = h1_chunk_scan(&s->ck, p, n, &done, body_sink, &s->body);
			if (k < 0) {
				fail_stream(s);
				return;
			}
			fq_drop(&s->rin, (size_t)k);
			if (done)
				s->rst = R_DONE;
		} else {
			fq_put(&s->body, p, n);
			fq_drop(&s->rin, n);
			if (s->up_eof && !s->rin.len)
				s->rst = R_DONE;
		}
		if (s->up_eof && !s->rin.len && s->rst != R_DONE && s->rst != R_CLOSE)
			break;
	}
	if (s->up_eof && s->rst != R_DONE && !s->rin.len) {
		if (s->rst == R_CLOSE)
			s->rst = R_DONE;
		else
			fail_stream(s);
	}
	if (s->rst == R_DONE)
		fr_unwatch(&s->up);   /* this stream's connection to lws is done */
	if (s->deferred && (s->body.len || s->rst == R_DONE)) {
		s->deferred = 0;
		nghttp2_session_resume_data(s->c->h2->ng, s->id);
	}
}

/* a stream's bytes both ways with lws; nonzero if some moved */
static int stream_pump(struct h2stream *s)
{
	int prog = 0;
	if (s->up.fd < 0)
		return 0;
	if (s->upout.len) {
		prog = fr_upsend(s->up.fd, &s->upout);
		if (!s->upout.len && s->unconsumed) {
			nghttp2_session_consume(s->c->h2->ng, s->id, s->unconsumed);
			s->unconsumed = 0;
		}
	}
	while (!s->up_eof && s->rst != R_DONE && s->rin.len < FR_BUF_CAP && s->body.len < FR_BUF_CAP) {
		char *p = fq_room(&s->rin, 65536);
		ssize_t r = read(s->up.fd, p, 65536);
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			break;
		prog = 1;
		if (r <= 0)
			s->up_eof = 1;
		else
			s->rin.len += (size_t)r;
		take_answer(s);
		if (s->up.fd < 0)
			break;
	}
	if (s->rin.len && s->up.fd >= 0)
		take_answer(s);
	if (s->up.fd >= 0) {
		uint32_t ev = 0;
		if (!s->up_eof && s->rst != R_DONE && s->rin.len < FR_BUF_CAP && s->body.len < FR_BUF_CAP)
			ev |= EPOLLIN;
		if (s->upout.len)
			ev |= EPOLLOUT;
		fr_watch(&s->up, ev);
	}
	return prog;
}

/* ------------------------------------------------------- connection */

int fr_h2_init(struct fconn *c, const char *pre, size_t n)
{
	nghttp2_session_callbacks *cb;
	if (nghttp2_session_callbacks_new(&cb))
		return -1;
	nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
	nghttp2_option *opt;
	nghttp2_option_new(&opt);
	nghttp2_option_set_no_auto_window_update(opt, 1);
	struct h2state *h = xcalloc(1, sizeof *h);
	int r = nghttp2_session_server_new2(&h->ng, cb, c, opt);
	nghttp2_option_del(opt);
	nghttp2_session_callbacks_del(cb);
	if (r) {
		free(h);
		return -1;
	}
	c->h2 = h;
	nghttp2_settings_entry iv[] = {
		{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, H2_MAX_STREAMS},
		{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2_STREAM_WINDOW},
	};
	nghttp2_submit_settings(h->ng, NGHTTP2_FLAG_NONE, iv, 2);
	nghttp2_session_set_local_window_size(h->ng, NGHTTP2_FLAG_NONE, 0, H2_CONN_WINDOW);
	if (n && nghttp2_session_mem_recv(h->ng, (const uint8_t *)pre, n) < 0)
		return -1;
	return 0;
}

void fr_h2_free(struct fconn *c)
{
	struct h2state *h = c->h2;
	if (!h)
		return;
	nghttp2_session_del(h->ng);   /* no callback: the streams are freed here */
	for (struct h2stream *s = h->streams, *n; s; s = n) {
		n = s->next;
		stream_free(s);
	}
	c->h2 = NULL;
	fr_defer(h);
}

int fr_h2_idle(struct fconn *c)
{
	return c->h2 && !c->h2->nstreams;
}

static int h2_can_read(struct fconn *c)
{
	return !c->eof && c->cout.len < FR_BUF_CAP;
}

/* the client's bytes, at once to nghttp2 */
static int h2_took(struct fconn *c)
{
	ssize_t r = nghttp2_session_mem_recv(c->h2->ng, (uint8_t *)c->cin.p + c->cin.off, c->cin.len);
	fq_drop(&c->cin, c->cin.len);
	return r < 0 ? -1 : 0;
}

/* the streams' bytes with lws, and nghttp2's frames to cout */
static int h2_work(struct fconn *c)
{
	struct h2state *h = c->h2;
	int prog = 0;
	for (struct h2stream *s = h->streams; s; s = s->next)
		prog |= stream_pump(s);
	while (c->cout.len < FR_BUF_CAP) {
		const uint8_t *d;
		ssize_t n = nghttp2_session_mem_send(h->ng, &d);
		if (n < 0)
			return -1;
		if (!n)
			break;
		fq_put(&c->cout, d, (size_t)n);
		prog = 1;
	}
	return prog;
}

static int h2_over(struct fconn *c)
{
	return c->eof || (!nghttp2_session_want_read(c->h2->ng) && !nghttp2_session_want_write(c->h2->ng));
}

const struct fr_proto fr_h2 = {
	.can_read = h2_can_read,
	.took = h2_took,
	.work = h2_work,
	.over = h2_over,
};
