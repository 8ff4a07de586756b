/* wsconn.h — one WebSocket connection's plumbing, the same for /events
 * (conn.c) and /tty (tty.c): an outgoing queue of whole messages with
 * LWS_PRE headroom, written only when the socket is writable, and the
 * reassembly of a fragmented incoming message with a size limit. What to do
 * when a queue grows too long is the channel's own policy (wsconn_over). */
#ifndef TERMD_WSCONN_H
#define TERMD_WSCONN_H

#include <stddef.h>
#include <libwebsockets.h>

#include "util.h"

struct wsframe;

struct wsconn {
	struct lws *wsi;
	int binary;                    /* messages go out as binary, else text */
	struct wsframe *head, *tail;   /* outgoing messages, oldest first */
	size_t pending;                /* payload bytes queued */
	buf_t rx;                      /* message being reassembled */
	size_t rx_total;               /* its bytes so far, kept or not */
	int rx_over;                   /* over the limit: the rest is read, dropped */
};

/* What wsconn_receive made of a fragment. */
enum wsconn_rx {
	WSRX_PARTIAL,     /* more fragments of the message to come */
	WSRX_MESSAGE,     /* a whole message, handed over in *msg */
	WSRX_TOO_LARGE,   /* a whole message over the limit, its bytes dropped;
			   * *total says how many it had */
};

void wsconn_init(struct wsconn *w, struct lws *wsi, int binary);
/* Queue one message of n bytes and return where its payload goes (n bytes,
 * LWS_PRE of headroom before them); asks for a writable callback. */
unsigned char *wsconn_queue(struct wsconn *w, size_t n);
/* Grow the newest queued message by n bytes when it stays within max bytes:
 * where the n bytes go (right after its payload), or NULL (nothing queued,
 * or too large) — then queue a new message. Nothing queued has started to
 * go out (a message is written whole, or lws keeps the rest itself), so
 * the newest one may always grow. The returned pointer is valid until the
 * next call on w. */
unsigned char *wsconn_extend(struct wsconn *w, size_t n, size_t max);
/* The newest queued message's payload and its length, or NULL. */
const unsigned char *wsconn_last(const struct wsconn *w, size_t *len);
/* 1 if n more bytes would take a non-empty backlog past cap: one message is
 * always taken, however large, so an answer bigger than the cap still
 * reaches a client that reads. */
int wsconn_over(const struct wsconn *w, size_t n, size_t cap);
/* Forget everything queued. */
void wsconn_drop_queue(struct wsconn *w);
/* On LWS_CALLBACK_SERVER_WRITEABLE: write the oldest message, and ask for
 * another callback while more are queued or `closing` is set. -1 means the
 * connection is to be closed: the write failed, or it is closing and
 * everything has been sent. */
int wsconn_writable(struct wsconn *w, int closing);
/* On LWS_CALLBACK_RECEIVE: take one fragment (or part of one) of a message
 * whose whole size may be at most `limit` bytes. */
enum wsconn_rx wsconn_receive(struct wsconn *w, const void *in, size_t len, size_t limit,
			      buf_t *msg, size_t *total);
/* Free the queue and the message being reassembled. */
void wsconn_free(struct wsconn *w);

#endif
