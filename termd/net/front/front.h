/* front.h — what the front's files share: termd's TCP listeners served by a
 * thread of their own (front.c: TLS with ALPN h2/http/1.1, timeouts, the
 * internal unix socket lws listens on), HTTP/1.1 requests followed and their
 * heads rewritten (front/h1.c; heads and chunks read by proto/h1wire.c) and HTTP/2 streams carried as HTTP/1.1 requests
 * (front/h2.c). The front touches no termd state: it only moves bytes. */
#ifndef TERMD_FRONT_H
#define TERMD_FRONT_H

#include <stddef.h>
#include <stdint.h>
#include <cJSON.h>
#include <openssl/ssl.h>
#include <nghttp2/nghttp2.h>

#include "util.h"
#include "h1wire.h"

/* ---- for main.c and handover.c ---- */
/* Is the front serving termd's TCP listeners (--front on, some TCP --listen)? */
int front_wanted(void);
/* The TLS certificate loaded and the listeners bound (or taken over):
 * before server_init, so that a port in use stops termd at once. */
int front_prepare(char *err, size_t errlen);
/* The thread started; lws must already listen on srv.front_sock. */
int front_start(char *err, size_t errlen);
/* Stop the thread, close every connection and listener. */
void front_stop(void);
/* upgrade in place: the listening fds into the record, kept across exec */
void front_handover_save(cJSON *record);
void front_handover_keep(int keep);
/* before the exec: the thread stopped and what lws wrote last (the close
 * frames 1012) passed on to the clients, a second at the most; _resume
 * when the exec failed */
void front_handover_flush(void);
void front_handover_resume(void);
/* the new termd takes them from the record (before front_start) */
void front_handover_load(const cJSON *record);

/* ---- shared by the front's files ---- */
#define FR_HEAD_MAX 4096          /* a request head, as lws's max_http_header_data */
#define FR_BUF_CAP (64u << 10)    /* each direction's buffer before reads stop */
#define FR_MAX_HDRS H1_MAX_HDRS

/* front/fq.c: a byte queue, data at p + off, len bytes */
struct fq {
	char *p;
	size_t off, len, cap;
};
void fq_put(struct fq *q, const void *d, size_t n);
void fq_printf(struct fq *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fq_drop(struct fq *q, size_t n);
/* room to read into (at least want bytes), compacting first */
char *fq_room(struct fq *q, size_t want);
void fq_free(struct fq *q);
/* a body of known length: up to *rem of from's first n bytes moved to to;
 * 1 once *rem is 0 */
int fq_take(struct fq *to, struct fq *from, size_t n, unsigned long long *rem);
/* HTTP/1.1's "name: value" CRLF, and a request line */
void fq_field(struct fq *q, const char *name, size_t nl, const char *val, size_t vl);
void fq_reqline(struct fq *q, const char *method, size_t ml, const char *target, size_t tl,
		const char *version, size_t vl);

/* an epoll registration: what the fd is and whose */
enum fr_kind { FK_LISTEN, FK_CLIENT, FK_UP };
struct fwatch {
	int kind;
	int fd;
	uint32_t ev;            /* the events registered */
	int reg;                /* in the epoll set */
	void *owner;
};

struct h1state;
struct h2state;

struct fconn {
	struct fwatch w;
	struct fconn *next;
	int dead;
	SSL *ssl;               /* NULL: plain */
	int handshaking;
	int rd_wants_out, wr_wants_in;   /* TLS: the last read wanted to write, ... */
	int eof;                /* the client sent its end */
	int fatal;
	int close_after;        /* close once cout is written */
	int counted;            /* in the protocol counters */
	int again;              /* its pump stopped while bytes still moved */
	char peer[64];
	unsigned api;             /* its listener's APIs (enum td_api), sent as X-Termd-Api */
	uint64_t last_us, head_us; /* last bytes either way; a head begun (0: none) */
	uint64_t out_us;        /* cout last empty or moving */
	size_t pend;            /* bytes for the client outside cout (h1.c's splice pipe) */
	struct fq cin, cout;
	struct h1state *h1;
	struct h2state *h2;
};

/* what differs between the front's protocols: front.c's pump calls these */
struct fr_proto {
	int (*can_read)(struct fconn *c);   /* the client's bytes may be read now */
	int (*took)(struct fconn *c);       /* (may be NULL) bytes just read into cin; -1: close */
	int (*work)(struct fconn *c);       /* the protocol's part of a turn: 1 progress, -1 close */
	int (*over)(struct fconn *c);       /* nothing left once cout is written */
	void (*watch)(struct fconn *c);     /* (may be NULL) its upstream fds' interest */
};

/* front.c */
extern unsigned long fr_n_streams, fr_n_refused;   /* atomic: /metrics reads them */
ssize_t fr_cread(struct fconn *c, void *p, size_t n);   /* >0, 0 end, -1 again, -2 broken */
int fr_cflush(struct fconn *c);                          /* cout to the client; -1 broken */
int fr_watch(struct fwatch *w, uint32_t ev);             /* add or change */
void fr_unwatch(struct fwatch *w);
void fr_park(struct fwatch *w);                          /* out of the epoll set, its fd kept */
int fr_upstream(void);                                   /* a connection to lws, non-blocking */
/* ... bound to an abstract name that carries *id (0 when it could not be):
 * front_take_body finds the connection by it */
int fr_upstream_named(uint64_t *id);
int fr_upsend(int fd, struct fq *q);                     /* q to lws: 1 if some went; lws gone: q dropped */
uint64_t fr_now(void);
void fr_defer(void *p);                                  /* free()d after this turn's events */
void fr_kick_h2(void);                                   /* every HTTP/2 connection pumped again */

int fr_running(void);                                    /* its thread runs (bodies may be handed over) */

/* front/hand.c: the queue of bodies the preview proxy hands over (front_take_body) */
struct sockaddr_un;
/* the abstract name a connection of the front's to lws is bound to (its
 * length): one whose answer's body may be handed over; id 0 the prefix */
int fr_up_name(struct sockaddr_un *su, uint64_t id);
void fr_hand_open(void);    /* its eventfd made and watched (front_start) */
/* w is the queue's eventfd: each body queued given to give (1) */
int fr_hand_event(struct fwatch *w, void (*give)(uint64_t id, int fd, unsigned long long rem));
/* the body handed over for c's connection to lws, if one waits in the
 * queue (front_take_body): taken now (1), for lws closes that connection
 * once it handed a body over for a client that asked for a close */
int fr_take_hand(struct fconn *c);
void fr_hand_drop(void);    /* the bodies still queued: their sockets closed */
void fr_hand_close(void);   /* its eventfd closed */

/* front/h1.c: heads (parsed by proto/h1wire.c) */
/* the headers a request goes to lws with: X-Metadata-* folded into
 * X-Termd-Metadata, the client's X-Termd-* dropped, X-Termd-Peer and
 * X-Termd-Tls added; skip_hop: drop HTTP/2's connection-specific ones */
void fr_rewrite(struct fq *out, const struct h1_hdr *h, int nh, const struct fconn *c, int from_h2);
void fr_answer(struct fconn *c, int status, const char *why);   /* a front answer, then close */
/* an HTTP/1.1 connection: its bytes as they come */
int fr_h1_init(struct fconn *c);
extern const struct fr_proto fr_h1;
void fr_h1_free(struct fconn *c);
int fr_h1_forwarding(struct fconn *c);   /* a connection to lws is open (its timeouts hold) */
uint64_t fr_h1_upid(struct fconn *c);    /* its connection to lws's id (0: none, or not named) */
/* the rest of the answer's body, rem bytes, comes from fd (front_take_body) */
void fr_h1_hand(struct fconn *c, int fd, unsigned long long rem);

/* front/h2.c */
int fr_h2_init(struct fconn *c, const char *pre, size_t n);
extern const struct fr_proto fr_h2;
void fr_h2_free(struct fconn *c);
int fr_h2_idle(struct fconn *c);   /* no stream open */
/* its timeouts: -1 a header block unfinished past head_us (close it); 1 a
 * stream holding bytes nobody took for stall_us was reset (pump it) */
int fr_h2_check(struct fconn *c, uint64_t now, uint64_t head_us, uint64_t stall_us);

#endif
