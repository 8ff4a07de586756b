/* h1wire.h — HTTP/1.1 on the wire, read one way for every part of termd that
 * reads it (the front, net/http.c, the preview proxy): request and answer
 * heads, chunked framing, the hop-by-hop header names, a constant-time token
 * compare. Pure: no I/O, no allocation, no termd state. */
#ifndef TERMD_H1WIRE_H
#define TERMD_H1WIRE_H

#include <stddef.h>

#define H1_MAX_HDRS 100

struct h1_hdr {
	const char *name, *val;   /* into the parsed bytes; val without its OWS */
	size_t nlen, vlen;
};

/* a parsed head: a request's (method, target, version) or an answer's
 * (version, status) */
struct h1_head {
	const char *method, *target, *version;
	size_t mlen, tlen, vlen;
	int status;
	struct h1_hdr h[H1_MAX_HDRS];
	int nh;
	long long clen;           /* -1: none */
	int chunked;              /* Transfer-Encoding: ..., chunked */
	int upgrade;              /* Connection: upgrade and Upgrade: (requests) */
	int expect_continue;      /* Expect: 100-continue (requests) */
};

/* The length of the head at p (its empty line included), 0 while it is not
 * whole in n bytes. */
size_t h1_head_len(const char *p, size_t n);
/* A request head of len bytes (through its empty line): 0, or the status
 * to answer (400 malformed or a smuggling attempt, 431 too many fields). */
int h1_parse_request(const char *p, size_t len, struct h1_head *r);
/* An answer head of len bytes: 0, or -1 when it is no HTTP/1.x answer or
 * one of the cases a request is refused for. */
int h1_parse_answer(const char *p, size_t len, struct h1_head *a);

/* the header's name is n (ASCII case ignored) */
int h1_name_is(const struct h1_hdr *h, const char *n);
/* the comma/space separated value v (n bytes) holds the token tok */
int h1_has_token(const char *v, size_t n, const char *tok);
/* a connection's own header, never forwarded: Connection, Keep-Alive,
 * Proxy-Connection, Transfer-Encoding, Upgrade, TE, Trailer,
 * Proxy-Authenticate */
int h1_hop_by_hop(const char *name, size_t len);
/* got equals want, in a time that depends on want's length only */
int h1_token_eq(const char *got, const char *want);

/* A chunked body followed byte by byte: size lines (hex digits, then
 * optional extensions after ';', SP or HTAB), each chunk's data and its
 * CRLF, the last chunk, trailer lines to the empty one. Every line ends in
 * CRLF. Zero it to start; max (0: none) refuses a larger chunk. */
struct h1_chunk {
	int st, digits;
	unsigned long long rem, max;
	size_t linelen;
};
typedef void h1_sink(void *arg, const char *p, size_t n);
/* How many of n bytes belong to the body (the rest follows it); *done at
 * its end (k zeroed again, max kept); sink (may be NULL) gets the data
 * bytes only; -1: malformed. */
long h1_chunk_scan(struct h1_chunk *k, const char *p, size_t n, int *done, h1_sink *sink,
		   void *arg);

#endif
