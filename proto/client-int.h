/* client-int.h — the client library's inside, shared by url.c, net.c, ws.c
 * and call.c (and the unit test): struct td_client, the error-text and
 * clock helpers, the socket layer, and the pure RFC 6455 pieces (frame
 * headers, masking, the accept key). Not for the library's users: they
 * have client.h. */
#ifndef TERMD_CLIENT_INT_H
#define TERMD_CLIENT_INT_H

#include "client.h"
#include "util.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <openssl/ssl.h>

#define TD_CONNECT_TIMEOUT_MS   10000
#define TD_HANDSHAKE_TIMEOUT_MS 10000
#define TD_READ_CHUNK           65536

struct td_client {
	int fd;
	SSL_CTX *tls_ctx;    /* wss:// only; NULL on plain and unix sockets */
	SSL *ssl;            /* wss:// only: every read and write goes through it */
	int tls_eof;         /* the socket gave EOF (for the BIO's BIO_CTRL_EOF) */
	int tls_broken;      /* a fatal TLS error: send no close_notify */
	int closed;          /* no more frames will come: close received or socket dead */
	int sent_close;
	int close_code;
	char err[256];
	char subproto[128];

	uint8_t *rb;         /* read buffer: unparsed bytes are rb[rb_off..rb_len) */
	size_t rb_off, rb_len, rb_cap;

	uint8_t *msg;        /* data message being reassembled */
	size_t msg_len, msg_cap;
	int msg_op;          /* TD_WS_TEXT/BINARY while in a fragmented message, else 0 */

	char id_prefix[32];  /* call.c: "" until td_set_id_prefix, meaning "td" */
	char id_rand[17];    /* call.c: 8 random bytes, new for each generated id */
	unsigned long id_counter;
	cJSON *hello;
};

/* ---- url.c: error text ---- */

/* snprintf into err (nothing if err is NULL or errlen 0). */
void td_seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* strerror with a lower-case first letter: "connection refused". */
void td_errno_str(int e, char *out, size_t n);

/* ---- net.c: clocks, randomness, the socket and TLS ---- */

/* A deadline timeout_ms from now (< 0: none, -1), and the milliseconds
 * left until it (-1 for none, 0 once passed). */
int64_t td_deadline(int timeout_ms);
int td_left(int64_t deadline);
/* n random bytes (getrandom; a fallback good enough for mask keys and ids). */
void td_random(void *buf, size_t n);

/* Connects to the URL's socket (TCP or unix; each attempt gives up after
 * TD_CONNECT_TIMEOUT_MS): the fd, or -1 with err set. */
int td_net_open(const td_url *u, char *err, size_t errlen);
/* Sets TLS up on c->fd and runs its handshake (client.h: td_tls_set_cafile).
 * 0 ok, -1 with err set. */
int td_tls_start(td_client *c, const td_url *u, char *err, size_t errlen);
/* The only two places that write to or read from the connection (plain or
 * TLS). td_write_all: 0, or -1 with c->err set. td_read_some waits up to ms
 * (< 0: forever): > 0 bytes read, 0 nothing came, -1 EOF/error (c->err). */
int td_write_all(td_client *c, const void *buf, size_t n);
ssize_t td_read_some(td_client *c, uint8_t *buf, size_t n, int ms);
/* Over TLS: decrypted bytes OpenSSL holds that the socket does not show. */
int td_tls_pending(const td_client *c);
/* Ends TLS (one close_notify unless broken) and frees it. */
void td_tls_end(td_client *c);

/* ---- ws.c: RFC 6455 ---- */

enum {
	TD_WS_CONT = 0x0, TD_WS_TEXT = 0x1, TD_WS_BINARY = 0x2,
	TD_WS_CLOSE = 0x8, TD_WS_PING = 0x9, TD_WS_PONG = 0xA,
};

typedef struct td_ws_frame {
	int fin, opcode, masked;
	uint8_t mask[4];
	uint64_t len;       /* payload length */
	size_t hdr_len;     /* bytes of header, mask key included */
} td_ws_frame;

/* Standard base64 with padding; out needs 4*((n+2)/3)+1 bytes. Returns the
 * length written (excluding the NUL). */
size_t td_base64_encode(const void *in, size_t n, char *out);
/* Sec-WebSocket-Accept for a Sec-WebSocket-Key: base64(sha1(key + GUID)). */
void td_ws_accept(const char *key, char out[29]);
/* Writes a frame header to hdr (at most 14 bytes), masked with `mask` when
 * non-NULL; returns its length. */
size_t td_ws_header(uint8_t hdr[14], int fin, int opcode, uint64_t len, const uint8_t *mask);
/* Parses the frame header at buf[0..n): 1 if complete (f filled), 0 if more
 * bytes are needed, -1 if it breaks RFC 6455 (reserved bits set, unknown
 * opcode, fragmented or oversized control frame, 64-bit length with the top
 * bit set). */
int td_ws_parse_header(const uint8_t *buf, size_t n, td_ws_frame *f);
/* XORs data[0..n) with mask, as if data started at payload offset `off`. */
void td_ws_mask(uint8_t *data, size_t n, const uint8_t mask[4], uint64_t off);

#endif
