/* wsconn.h — one WebSocket connection's plumbing, the same for /events
 * (conn.c) and /tty (tty.c): an outgoing queue of whole messages with
 * LWS_PRE headroom (each with a tag the channel may use to order them
 * against data it keeps elsewhere), written only when the socket is
 * writable, and the
 * reassembly of a fragmented incoming message with a size limit. What to do
 * when a queue grows too long is the channel's own policy (wsconn_over). */
#ifndef TERMD_WSCONN_H
#define TERMD_WSCONN_H

#include <stddef.h>
#include <stdint.h>
#include <libwebsockets.h>

#include "util.h"

struct wsframe;

struct wsconn {
	struct lws *wsi;
	int binary;                    /* messages go out as binary, else text */
	struct wsframe *head, *tail;   /* outgoing messages, oldest first */
	size_t pending;                /* payload bytes queued */
	size_t head_sent;              /* the head message's bytes already written */
	size_t frag;                   /* most payload bytes in one write (wsconn_frag) */
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
/* Tag the newest queued message with a number of the channel's choosing
 * (tty.c: how much of its session's output must go out before it). */
void wsconn_tag_last(struct wsconn *w, uint64_t tag);
/* 1 with the oldest queued message's tag in *tag, or 0 if nothing is queued. */
int wsconn_head_tag(const struct wsconn *w, uint64_t *tag);
/* The most payload bytes one write may carry on w's socket so that the
 * socket takes it whole when it is writable (an AF_UNIX stream takes a
 * write of up to SO_SNDBUF/2 - 64 bytes whole while its buffer is not
 * full; 64 KiB at most): messages longer than that go out as fragments,
 * one write each, only while lws_send_pipe_choked says the socket has
 * room. So lws never keeps a truncated write of its own, which
 * libwebsockets 4.1 (Debian 12's) cannot close: a peer gone while lws
 * held one made lws_service spin for good in its forced-service loop
 * (the close waits to flush, returns "closed", and the same slot is
 * serviced again: fixed upstream in 4.2, commit 3ca8625). */
size_t wsconn_frag(struct wsconn *w);
/* the same for any connection of lws's (http.c's answers) */
size_t wsconn_sock_frag(struct lws *wsi);
/* 1 while the oldest queued message is partly written: nothing else may go
 * out (wsconn_write_now) before the rest of it. */
int wsconn_mid_message(const struct wsconn *w);
/* Write one message from the caller's own buffer p[0..n) now (in a writable
 * callback, instead of the queue's head): lws writes the frame header into
 * the LWS_PRE bytes before p and keeps its own copy of whatever the socket
 * does not take, so p is the caller's again on return (n at most
 * wsconn_frag, never while wsconn_mid_message). -1: the write failed,
 * close the connection. */
int wsconn_write_now(struct wsconn *w, unsigned char *p, size_t n);
/* 1 if n more bytes would take a non-empty backlog past cap: one message is
 * always taken, however large, so an answer bigger than the cap still
 * reaches a client that reads. */
int wsconn_over(const struct wsconn *w, size_t n, size_t cap);
/* Forget everything queued (but the rest of a message partly written). */
void wsconn_drop_queue(struct wsconn *w);
/* On LWS_CALLBACK_SERVER_WRITEABLE: write the oldest message (in fragments
 * of wsconn_frag bytes while the socket has room, the rest on later
 * callbacks), and ask for another callback while more are queued or
 * `closing` is set. -1 means the
 * connection is to be closed: the write failed, or it is closing and
 * everything has been sent. */
int wsconn_writable(struct wsconn *w, int closing);
/* On LWS_CALLBACK_RECEIVE: take one fragment (or part of one) of a message
 * whose whole size may be at most `limit` bytes. */
enum wsconn_rx wsconn_receive(struct wsconn *w, const void *in, size_t len, size_t limit,
			      buf_t *msg, size_t *total);
/* Message payload bytes taken from and written to every connection (/metrics). */
extern uint64_t wsconn_bytes_in, wsconn_bytes_out;
/* Free the queue and the message being reassembled. */
void wsconn_free(struct wsconn *w);

#endif
