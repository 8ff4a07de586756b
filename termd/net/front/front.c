/* net/front/front.c — the front, termd's second event loop: termd's TCP listeners (the first --listen and the
 * extra ones) served by a thread of its own with its own epoll loop. It
 * accepts, terminates TLS (OpenSSL, ALPN h2 and http/1.1), tells HTTP/1.1
 * (front/h1.c) from HTTP/2 (front/h2.c, also h2c prior knowledge), keeps the
 * timeouts, and forwards each request to lws on the internal unix socket
 * (srv.front_sock). One pump moves a connection's bytes, the protocol's
 * part given as a struct fr_proto. It touches no termd state: only bytes and fds, every one
 * non-blocking and close-on-exec. The listening fds go across an upgrade in
 * place (front_handover_*). Bodies the preview proxy hands over come in on
 * front/hand.c's queue; byte queues are front/fq.c's. */
#include "front.h"
#include "loop.h"
#include "net.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <openssl/err.h>

#define FR_MAX_LISTEN (1 + TD_MAX_EXTRA_LISTEN)
#define FR_MAX_CONNS 1024
#define FR_MAX_PER_ADDR (FR_MAX_CONNS / 4)  /* one client address's share */
#define FR_HANDSHAKE_US (10 * 1000000ull)   /* TLS handshake */
#define FR_STALL_US (opts.stall_timeout * 1000000ull) /* bytes for the client, none taken */
#define FR_H2_IDLE_US (120 * 1000000ull)    /* an HTTP/2 connection without a stream */

static struct fwatch lis[FR_MAX_LISTEN];
static int nlis;
/* no fd (or memory) to accept with: the listeners rest FR_REST_US at a
 * time (else they stay readable and the loop spins); an episode is logged
 * as it begins and, FR_QUIET_US after its last failure, with its count */
#define FR_REST_US 100000ull
#define FR_QUIET_US 1000000ull
static int paused;
static uint64_t paused_us, rest_since_us;
static unsigned long rest_fails;
static int rest_err;
/* one fd kept in reserve (/dev/null) for an accept: on EMFILE or ENFILE
 * it is closed and the accept tried again at once, so a client queued
 * while fds are out is taken and answered (502 if lws cannot be reached
 * either) instead of waiting, unanswered, for as long as the shortage
 * lasts (the soak's fd_exhaust: 30 s timeouts while termd's loop took
 * every fd freed); taken again on a later turn once an fd is free */
static int reserve = -1, reserve_spent;

static void take_reserve(void)
{
	if (reserve_spent)
		reserve_spent = 0;
	else if (reserve < 0)
		reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
}
static int ep = -1, stopfd = -1;
static struct fwatch stopw;
static uint64_t next_up_id;   /* the front's thread's: names its plain connections to lws */
static pthread_t thr;
static int running;
static SSL_CTX *tls;
static struct fconn *conns;
static int nconns;
/* counted in the front's thread, read by /metrics in the loop's */
static unsigned long n_h1, n_h2, n_tls_failed;
unsigned long fr_n_streams, fr_n_refused;
static void **deferred;
static size_t ndeferred, capdeferred;

uint64_t fr_now(void)
{
	return mono_us();
}

/* ------------------------------------------------------------- epoll */

int fr_watch(struct fwatch *w, uint32_t ev)
{
	if (w->fd < 0)
		return -1;
	if (w->reg && w->ev == ev)
		return 0;
	struct epoll_event e = {.events = ev, .data.ptr = w};
	if (epoll_ctl(ep, w->reg ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, w->fd, &e) < 0)
		return -1;
	w->reg = 1;
	w->ev = ev;
	return 0;
}

void fr_unwatch(struct fwatch *w)
{
	if (w->fd < 0)
		return;
	epoll_ctl(ep, EPOLL_CTL_DEL, w->fd, NULL);
	close(w->fd);
	w->fd = -1;
	w->ev = 0;
	w->reg = 0;
}

void fr_park(struct fwatch *w)
{
	if (w->fd < 0 || !w->reg)
		return;
	epoll_ctl(ep, EPOLL_CTL_DEL, w->fd, NULL);
	w->reg = 0;
	w->ev = 0;
}

/* freed once this turn's events are handled (an event may still name it) */
void fr_defer(void *p)
{
	if (ndeferred == capdeferred) {
		capdeferred = capdeferred ? capdeferred * 2 : 64;
		deferred = xrealloc(deferred, capdeferred * sizeof *deferred);
	}
	deferred[ndeferred++] = p;
}

void fr_kick_h2(void)
{
	for (struct fconn *c = conns; c; c = c->next)
		if (c->h2)
			c->again = 1;
}

int fr_upstream_named(uint64_t *id)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (id) {
		struct sockaddr_un me;
		*id = ++next_up_id;
		if (bind(fd, (struct sockaddr *)&me, (socklen_t)fr_up_name(&me, *id)) < 0)
			*id = 0;   /* (its body then goes through lws) */
	}
	struct sockaddr_un su;
	memset(&su, 0, sizeof su);
	su.sun_family = AF_UNIX;
	snprintf(su.sun_path, sizeof su.sun_path, "%s", srv.front_sock);
	if (connect(fd, (struct sockaddr *)&su, sizeof su) < 0 && errno != EINPROGRESS) {
		log_info("front: cannot reach lws at %s: %s", srv.front_sock, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

int fr_upstream(void)
{
	return fr_upstream_named(NULL);
}

int fr_running(void)
{
	return running;
}

/* ------------------------------------------------- the client's bytes */

int fr_upsend(int fd, struct fq *q)
{
	ssize_t r = send(fd, q->p + q->off, q->len, MSG_NOSIGNAL);
	if (r > 0) {
		fq_drop(q, (size_t)r);
		return 1;
	}
	if (r < 0 && errno != EAGAIN && errno != EINTR)
		fq_drop(q, q->len);   /* lws closed: what it answered is still read */
	return 0;
}

ssize_t fr_cread(struct fconn *c, void *p, size_t n)
{
	if (!c->ssl) {
		ssize_t r = read(c->w.fd, p, n);
		if (r >= 0)
			return r;
		return errno == EAGAIN || errno == EINTR ? -1 : -2;
	}
	ERR_clear_error();
	int r = SSL_read(c->ssl, p, (int)(n > INT32_MAX ? INT32_MAX : n));
	c->rd_wants_out = 0;
	if (r > 0)
		return r;
	switch (SSL_get_error(c->ssl, r)) {
	case SSL_ERROR_WANT_READ:
		return -1;
	case SSL_ERROR_WANT_WRITE:
		c->rd_wants_out = 1;
		return -1;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	default:
		return -2;
	}
}

int fr_cflush(struct fconn *c)
{
	c->wr_wants_in = 0;
	if (!c->cout.len && !c->pend)
		c->out_us = fr_now();
	while (c->cout.len) {
		ssize_t r;
		if (c->ssl) {
			ERR_clear_error();
			size_t n = c->cout.len > (1u << 20) ? (1u << 20) : c->cout.len;
			int k = SSL_write(c->ssl, c->cout.p + c->cout.off, (int)n);
			if (k <= 0) {
				int e = SSL_get_error(c->ssl, k);
				if (e == SSL_ERROR_WANT_WRITE)
					return 0;
				if (e == SSL_ERROR_WANT_READ) {
					c->wr_wants_in = 1;
					return 0;
				}
				return -1;
			}
			r = k;
		} else {
			r = send(c->w.fd, c->cout.p + c->cout.off, c->cout.len, MSG_NOSIGNAL);
			if (r < 0)
				return errno == EAGAIN || errno == EINTR ? 0 : -1;
		}
		fq_drop(&c->cout, (size_t)r);
		c->last_us = c->out_us = fr_now();
	}
	return 0;
}

/* ---------------------------------------------------------- the pump */

/* A connection's bytes, turn by turn while any moved (64 at the most):
 * the client's read, the protocol's part, cout flushed; then its epoll
 * interest. -1: close it. */
static int fr_pump(struct fconn *c, const struct fr_proto *pr)
{
	int prog = 1;
	for (int round = 0; round < 64 && prog; round++) {
		prog = 0;
		while (pr->can_read(c)) {
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
			if (pr->took && pr->took(c) < 0)
				return -1;
		}
		int r = pr->work(c);
		if (r < 0)
			return -1;
		prog |= r;
		size_t before = c->cout.len;
		if (fr_cflush(c) < 0)
			return -1;
		if (c->cout.len < before)
			prog = 1;   /* room again: more may be made to go */
	}
	/* still moving after 64 turns: again on the loop's next turn, after
	 * the other connections' events */
	c->again = prog;
	if (!c->cout.len && !c->pend && pr->over(c))
		return -1;
	uint32_t ev = 0;
	if (pr->can_read(c) || c->wr_wants_in)
		ev |= EPOLLIN;
	if (c->cout.len || c->pend || c->rd_wants_out)
		ev |= EPOLLOUT;
	fr_watch(&c->w, ev);
	if (pr->watch)
		pr->watch(c);
	return 0;
}

/* --------------------------------------------------------- a client */

static void conn_close(struct fconn *c)
{
	if (c->dead)
		return;
	c->dead = 1;
	if (c->h1)
		fr_h1_free(c);
	if (c->h2)
		fr_h2_free(c);
	if (c->ssl) {
		SSL_free(c->ssl);
		c->ssl = NULL;
	}
	fr_unwatch(&c->w);
	fq_free(&c->cin);
	fq_free(&c->cout);
	for (struct fconn **pp = &conns; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	nconns--;
	fr_defer(c);
}

static const unsigned char h2_preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/* the client's bytes and ours, both ways, as far as they go */
static void conn_pump(struct fconn *c)
{
	if (c->dead)
		return;
	if (c->handshaking) {
		ERR_clear_error();
		int r = SSL_accept(c->ssl);
		if (r <= 0) {
			int e = SSL_get_error(c->ssl, r);
			if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
				fr_watch(&c->w, e == SSL_ERROR_WANT_READ ? EPOLLIN : EPOLLOUT);
				return;
			}
			log_info("front: TLS handshake with %s failed", c->peer);
			__atomic_add_fetch(&n_tls_failed, 1, __ATOMIC_RELAXED);
			conn_close(c);
			return;
		}
		c->handshaking = 0;
		c->last_us = fr_now();
		const unsigned char *proto = NULL;
		unsigned plen = 0;
		SSL_get0_alpn_selected(c->ssl, &proto, &plen);
		if (plen == 2 && memcmp(proto, "h2", 2) == 0) {
			if (fr_h2_init(c, NULL, 0) < 0) {
				conn_close(c);
				return;
			}
		} else if (fr_h1_init(c) < 0) {
			conn_close(c);
			return;
		}
	}
	if (!c->h1 && !c->h2) {
		/* plain: HTTP/1.1, or HTTP/2 with prior knowledge (its preface) */
		char *p = fq_room(&c->cin, 64);
		ssize_t r = fr_cread(c, p, 64 - c->cin.len);
		if (r == 0 || r == -2) {
			conn_close(c);
			return;
		}
		if (r > 0)
			c->cin.len += (size_t)r;
		size_t n = c->cin.len < sizeof h2_preface - 1 ? c->cin.len : sizeof h2_preface - 1;
		if (n && (unsigned char)c->cin.p[c->cin.off] == 0x16) {
			/* a TLS handshake record on a plain listener: say so in plain
			 * HTTP at once (the client's TLS then tells of a non-TLS answer,
			 * which termctl, od-attach and the Python client explain) */
			if (fr_h1_init(c) < 0) {
				conn_close(c);
				return;
			}
			fq_drop(&c->cin, c->cin.len);
			fr_answer(c, 400, "this listener is plain HTTP, not TLS: use http:// or ws://,"
				  " or start termd with --tls-cert and --tls-key");
		} else if (memcmp(c->cin.p + c->cin.off, h2_preface, n) != 0) {
			if (fr_h1_init(c) < 0) {
				conn_close(c);
				return;
			}
		} else if (n == sizeof h2_preface - 1) {
			if (fr_h2_init(c, c->cin.p + c->cin.off, c->cin.len) < 0) {
				conn_close(c);
				return;
			}
			fq_drop(&c->cin, c->cin.len);
		} else {
			fr_watch(&c->w, EPOLLIN);
			return;
		}
	}
	if (!c->counted) {
		c->counted = 1;
		__atomic_add_fetch(c->h2 ? &n_h2 : &n_h1, 1, __ATOMIC_RELAXED);
	}
	int r = fr_pump(c, c->h2 ? &fr_h2 : &fr_h1);
	if (r < 0)
		conn_close(c);
}

/* the APIs of the listener lis[k]: the first --listen's unless it is a
 * unix socket (lws's own), then the extra ones in order */
static unsigned listener_api(int k)
{
	unsigned a;
	if (!opts.listen_unix)
		a = k == 0 ? opts.listen_api : k - 1 < opts.nextra ? opts.extra_api[k - 1] : 0;
	else
		a = k < opts.nextra ? opts.extra_api[k] : 0;
	return a ? a : TD_API_DEFAULT;
}

static void conn_new(int fd, int listener)
{
	if (nconns >= FR_MAX_CONNS) {
		close(fd);
		return;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	struct fconn *c = xcalloc(1, sizeof *c);
	c->w.kind = FK_CLIENT;
	c->w.fd = fd;
	c->w.owner = c;
	c->last_us = c->out_us = fr_now();
	c->api = listener_api(listener);
	struct sockaddr_storage ss;
	socklen_t l = sizeof ss;
	if (getpeername(fd, (struct sockaddr *)&ss, &l) == 0) {
		if (ss.ss_family == AF_INET) {
			inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, c->peer, sizeof c->peer);
		} else if (ss.ss_family == AF_INET6) {
			struct in6_addr *a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
			if (IN6_IS_ADDR_V4MAPPED(a))
				inet_ntop(AF_INET, &a->s6_addr[12], c->peer, sizeof c->peer);
			else
				inet_ntop(AF_INET6, a, c->peer, sizeof c->peer);
		}
	}
	int same = 0;
	for (struct fconn *o = conns; o; o = o->next)
		same += strcmp(o->peer, c->peer) == 0;
	if (same >= FR_MAX_PER_ADDR) {   /* one address does not take the whole cap */
		__atomic_add_fetch(&fr_n_refused, 1, __ATOMIC_RELAXED);
		close(fd);
		free(c);
		return;
	}
	if (tls) {
		c->ssl = SSL_new(tls);
		if (!c->ssl) {
			close(fd);
			free(c);
			return;
		}
		SSL_set_fd(c->ssl, fd);
		SSL_set_mode(c->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
		c->handshaking = 1;
	}
	c->next = conns;
	conns = c;
	nconns++;
	fr_watch(&c->w, EPOLLIN);
}

static void on_accept(struct fwatch *w)
{
	for (int i = 0; i < 64; i++) {
		int fd = accept4(w->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if ((errno == EMFILE || errno == ENFILE) && reserve >= 0) {
				close(reserve);
				reserve = -1;
				reserve_spent = 1;
				continue;
			}
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				rest_fails++;
				rest_err = errno;
				paused_us = fr_now();
				if (!rest_since_us) {
					rest_since_us = paused_us;
					log_warn("front: cannot accept a connection: %s: the listeners rest %llu ms "
						 "at a time until it passes", strerror(errno), FR_REST_US / 1000);
				}
				if (!paused)
					for (int k = 0; k < nlis; k++)
						fr_watch(&lis[k], 0);
				paused = 1;
			}
			break;
		}
		conn_new(fd, (int)(w - lis));
	}
}

static void check_timeouts(void)
{
	uint64_t now = fr_now();
	/* --head-timeout: a request head begun and not ended, or none begun */
	uint64_t head_us = (uint64_t)(opts.head_time ? opts.head_time : 30) * 1000000ull;
	for (struct fconn *c = conns, *n; c; c = n) {
		n = c->next;
		if (c->handshaking && now - c->last_us > FR_HANDSHAKE_US)
			conn_close(c);
		else if (c->head_us && now - c->head_us > head_us)
			conn_close(c);
		else if (!c->h2 && !fr_h1_forwarding(c) && now - c->last_us > head_us)
			conn_close(c);   /* no request yet: lws's idle timeout is not there to help */
		else if (c->h2 && fr_h2_idle(c) && now - c->last_us > FR_H2_IDLE_US)
			conn_close(c);
		else if ((c->cout.len || c->pend) && now - c->out_us > FR_STALL_US)
			conn_close(c);   /* the client takes nothing of what it asked for */
		else if (c->h2) {
			int r = fr_h2_check(c, now, head_us, FR_STALL_US);
			if (r < 0)
				conn_close(c);
			else if (r > 0)
				c->again = 1;
		}
	}
}

/* the listeners rested long enough: tried again; a quiet while after the
 * last failure, the episode's end is logged */
static void check_rest(void)
{
	uint64_t now = fr_now();
	if (paused && now - paused_us >= FR_REST_US) {
		paused = 0;
		for (int i = 0; i < nlis; i++)
			fr_watch(&lis[i], EPOLLIN);
	}
	if (rest_since_us && !paused && now - paused_us >= FR_QUIET_US) {
		log_info("front: accepting again: %lu accepts failed (%s) over %.1f s", rest_fails,
			 strerror(rest_err), (double)(paused_us - rest_since_us) / 1e6);
		rest_since_us = 0;
		rest_fails = 0;
	}
}

/* a body handed over (front/hand.c): to its connection, else its socket closed */
static void give_hand(uint64_t id, int fd, unsigned long long rem)
{
	struct fconn *c = conns;
	while (c && !(c->h1 && !c->dead && fr_h1_upid(c) == id))
		c = c->next;
	if (!c) {
		close(fd);   /* its client left */
		return;
	}
	fr_h1_hand(c, fd, rem);
	conn_pump(c);
}

static void *front_main(void *arg)
{
	(void)arg;
	struct epoll_event evs[64];
	uint64_t last_tick = fr_now();
	for (;;) {
		int busy = 0;
		for (struct fconn *c = conns; c && !busy; c = c->next)
			busy = c->again;
		int n = epoll_wait(ep, evs, 64, busy ? 0 : paused ? (int)(FR_REST_US / 1000) : 1000);
		int stop = 0;
		for (int i = 0; i < n; i++) {
			struct fwatch *w = evs[i].data.ptr;
			if (w == &stopw) {
				stop = 1;
				continue;
			}
			if (fr_hand_event(w, give_hand))
				continue;
			if (w->fd < 0)
				continue;
			if (w->kind == FK_LISTEN)
				on_accept(w);
			else
				conn_pump(w->owner);
		}
		if (stop)
			break;
		/* the ones whose pump stopped while still moving: a turn each */
		for (struct fconn *c = conns, *nx; busy && c; c = nx) {
			nx = c->next;
			if (c->again && !c->dead) {
				c->again = 0;
				conn_pump(c);
			}
		}
		if (paused || rest_since_us)
			check_rest();
		uint64_t now = fr_now();
		if (now - last_tick >= 1000000) {
			last_tick = now;
			check_timeouts();
		}
		for (size_t k = 0; k < ndeferred; k++)
			free(deferred[k]);
		ndeferred = 0;
		take_reserve();
	}
	return NULL;
}

/* ------------------------------------------------------- start, stop */

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
		       const unsigned char *in, unsigned inlen, void *arg)
{
	(void)ssl;
	(void)arg;
	int h1 = -1;
	for (unsigned i = 0; i < inlen;) {
		unsigned l = in[i];
		if (i + 1 + l > inlen)
			break;
		if (l == 2 && memcmp(in + i + 1, "h2", 2) == 0) {
			*out = in + i + 1;
			*outlen = 2;
			return SSL_TLSEXT_ERR_OK;
		}
		if (l == 8 && memcmp(in + i + 1, "http/1.1", 8) == 0)
			h1 = (int)i;
		i += 1 + l;
	}
	if (h1 >= 0) {
		*out = in + h1 + 1;
		*outlen = 8;
		return SSL_TLSEXT_ERR_OK;
	}
	return SSL_TLSEXT_ERR_NOACK;
}

static int tls_init(char *err, size_t errlen)
{
	tls = SSL_CTX_new(TLS_server_method());
	if (!tls) {
		snprintf(err, errlen, "cannot make a TLS context");
		return -1;
	}
	SSL_CTX_set_min_proto_version(tls, TLS1_2_VERSION);
	SSL_CTX_set_options(tls, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
	if (SSL_CTX_use_certificate_chain_file(tls, opts.tls_cert) != 1 ||
	    SSL_CTX_use_PrivateKey_file(tls, opts.tls_key, SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(tls) != 1) {
		snprintf(err, errlen, "the TLS certificate %s and key %s were not accepted",
			 opts.tls_cert, opts.tls_key);
		SSL_CTX_free(tls);
		tls = NULL;
		return -1;
	}
	SSL_CTX_set_alpn_select_cb(tls, alpn_select, NULL);
	return 0;
}

static int bind_one(const char *host, int port, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof ss);
	socklen_t len;
	struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons((uint16_t)port);
		len = sizeof *a4;
	} else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)port);
		len = sizeof *a6;
	} else {
		snprintf(err, errlen, "--listen %s: not an address", host);
		return -1;
	}
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		snprintf(err, errlen, "--listen %s:%d: cannot listen: %s", host, port, strerror(errno));
		return -1;
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, SOMAXCONN) < 0) {
		int e = errno;
		snprintf(err, errlen, "--listen %s:%d: cannot listen: %s%s", host, port, strerror(e),
			 e == EADDRINUSE ? " (another program holds the port: choose another "
					   "with --listen HOST:PORT)" : "");
		close(fd);
		return -1;
	}
	return fd;
}

static void front_metrics(buf_t *b)
{
	metrics_head(b, "termd_front_connections_total", "counter",
		     "client connections the front served, by protocol (h2: HTTP/2)");
	buf_printf(b, "termd_front_connections_total{protocol=\"http/1.1\"} %lu\n",
		   __atomic_load_n(&n_h1, __ATOMIC_RELAXED));
	buf_printf(b, "termd_front_connections_total{protocol=\"h2\"} %lu\n",
		   __atomic_load_n(&n_h2, __ATOMIC_RELAXED));
	metrics_head(b, "termd_front_h2_streams_total", "counter",
		     "HTTP/2 streams the front carried as HTTP/1.1 requests");
	buf_printf(b, "termd_front_h2_streams_total %lu\n",
		   __atomic_load_n(&fr_n_streams, __ATOMIC_RELAXED));
	metrics_head(b, "termd_front_refused_total", "counter",
		     "requests the front answered itself (400, 431, 502) and failed TLS handshakes");
	buf_printf(b, "termd_front_refused_total{why=\"request\"} %lu\n",
		   __atomic_load_n(&fr_n_refused, __ATOMIC_RELAXED));
	buf_printf(b, "termd_front_refused_total{why=\"tls\"} %lu\n",
		   __atomic_load_n(&n_tls_failed, __ATOMIC_RELAXED));
}

int front_wanted(void)
{
	return server_front_wanted();
}

int front_prepare(char *err, size_t errlen)
{
	if (!front_wanted())
		return 0;
	if (opts.tls_cert && tls_init(err, errlen) < 0)
		return -1;
	if (!nlis) {   /* not taken over: bound here */
		for (int i = -1; i < opts.nextra; i++) {
			if (i < 0 && opts.listen_unix)
				continue;
			const char *h = i < 0 ? opts.listen_host : opts.extra_host[i];
			int p = i < 0 ? opts.listen_port : opts.extra_port[i];
			int fd = bind_one(h, p, err, errlen);
			if (fd < 0) {
				for (int k = 0; k < nlis; k++)
					close(lis[k].fd);
				nlis = 0;
				return -1;
			}
			lis[nlis].kind = FK_LISTEN;
			lis[nlis].fd = fd;
			lis[nlis].ev = 0;
			nlis++;
			if (i >= 0)
				log_info("also listening on %s:%d", h, p);
		}
	}
	return 0;
}

int front_start(char *err, size_t errlen)
{
	if (!front_wanted() || !srv.front_sock)
		return 0;
	ep = epoll_create1(EPOLL_CLOEXEC);
	stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ep < 0 || stopfd < 0) {
		snprintf(err, errlen, "front: %s", strerror(errno));
		return -1;
	}
	stopw.fd = stopfd;
	stopw.kind = -1;
	fr_watch(&stopw, EPOLLIN);
	fr_hand_open();
	for (int i = 0; i < nlis; i++) {
		fcntl(lis[i].fd, F_SETFD, FD_CLOEXEC);
		fcntl(lis[i].fd, F_SETFL, fcntl(lis[i].fd, F_GETFL) | O_NONBLOCK);
		lis[i].reg = 0;
		fr_watch(&lis[i], EPOLLIN);
	}
	static int metrics_added;
	if (!metrics_added++)
		metrics_extend(front_metrics);
	take_reserve();
	if (pthread_create(&thr, NULL, front_main, NULL) != 0) {
		snprintf(err, errlen, "front: cannot start its thread");
		return -1;
	}
	running = 1;
	return 0;
}

void front_stop(void)
{
	if (running) {
		uint64_t one = 1;
		if (write(stopfd, &one, sizeof one) < 0)
			log_warn("front: cannot stop its thread");
		pthread_join(thr, NULL);
		running = 0;
	}
	fr_hand_drop();
	while (conns)
		conn_close(conns);
	for (size_t k = 0; k < ndeferred; k++)
		free(deferred[k]);
	free(deferred);
	deferred = NULL;
	ndeferred = capdeferred = 0;
	for (int i = 0; i < nlis; i++)
		if (lis[i].fd >= 0)
			close(lis[i].fd);
	nlis = 0;
	if (stopfd >= 0)
		close(stopfd);
	fr_hand_close();
	if (ep >= 0)
		close(ep);
	stopfd = ep = -1;
	if (reserve >= 0)
		close(reserve);
	reserve = -1;
	if (tls)
		SSL_CTX_free(tls);
	tls = NULL;
}

/* ----------------------------------------------- upgrade in place */

static void free_deferred(void)
{
	for (size_t k = 0; k < ndeferred; k++)
		free(deferred[k]);
	ndeferred = 0;
}

void front_handover_flush(void)
{
	if (!running)
		return;
	uint64_t v = 1;
	if (write(stopfd, &v, sizeof v) < 0)
		return;
	pthread_join(thr, NULL);
	running = 0;
	if (read(stopfd, &v, sizeof v) < 0)
		v = 0;   /* (the stop said: not readable any more) */
	/* the front's loop, here in the exec's thread, until every client's
	 * bytes went (lws wrote its close frames before this) */
	uint64_t end = fr_now() + 1000000;
	for (;;) {
		for (struct fconn *c = conns, *n; c; c = n) {
			n = c->next;
			conn_pump(c);
		}
		free_deferred();
		int left = 0;
		for (struct fconn *c = conns; c; c = c->next)
			left |= c->cout.len > 0;
		if (!left || fr_now() >= end)
			break;
		struct epoll_event evs[64];
		epoll_wait(ep, evs, 64, 10);
	}
}

void front_handover_resume(void)
{
	if (running || ep < 0)
		return;
	if (pthread_create(&thr, NULL, front_main, NULL) == 0)
		running = 1;
	else
		log_warn("front: cannot start its thread again: TCP clients are not served");
}

void front_handover_save(cJSON *record)
{
	if (!nlis)
		return;
	cJSON *a = cJSON_AddArrayToObject(record, "front_fds");
	for (int i = 0; i < nlis; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber(lis[i].fd));
}

void front_handover_keep(int keep)
{
	for (int i = 0; i < nlis; i++)
		fcntl(lis[i].fd, F_SETFD, keep ? 0 : FD_CLOEXEC);
}

/* the listening sockets of the termd before, as it had them: its front's,
 * or (a termd from before the front) its one TCP listener */
void front_handover_load(const cJSON *record)
{
	if (!front_wanted())
		return;
	const cJSON *a = cJSON_GetObjectItem(record, "front_fds"), *f;
	cJSON_ArrayForEach(f, a) {
		if (cJSON_IsNumber(f) && nlis < FR_MAX_LISTEN) {
			lis[nlis].kind = FK_LISTEN;
			lis[nlis].fd = (int)f->valuedouble;
			nlis++;
		}
	}
	if (!a && !opts.listen_unix && srv.inherit_fd >= 0) {
		lis[0].kind = FK_LISTEN;
		lis[0].fd = srv.inherit_fd;
		nlis = 1;
		srv.inherit_fd = -1;
		/* the extra ones were not handed over: bound again here */
		char err[256];
		for (int i = 0; i < opts.nextra; i++) {
			int fd = bind_one(opts.extra_host[i], opts.extra_port[i], err, sizeof err);
			if (fd < 0) {
				log_warn("%s", err);
				continue;
			}
			lis[nlis].kind = FK_LISTEN;
			lis[nlis].fd = fd;
			nlis++;
		}
	}
}
