/* wsconn.c — the connection layer both WebSocket channels stand on: the
 * outgoing message queue (LWS_PRE headroom, a byte count for the channel's
 * pending cap, one message written per writable callback, a tag per
 * message for the channel, or a message from the channel's own buffer
 * written at once) and the
 * reassembly of fragmented messages with a size limit (past it the bytes
 * are read and dropped, never stored). */
#include "wsconn.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define FRAG_MAX ((size_t)64 << 10)
#define FRAG_MIN ((size_t)1 << 10)
#define FRAG_HEAD 64           /* the kernel's skb overhead, and a frame header */
#define WRITES_A_TURN 16       /* fragments at the most in one writable callback */

struct wsframe {
	struct wsframe *next;
	size_t len;
	uint64_t tag;              /* the channel's (wsconn_tag_last), else 0 */
	unsigned char *data;       /* LWS_PRE bytes of headroom, then the payload */
};

void wsconn_init(struct wsconn *w, struct lws *wsi, int binary)
{
	memset(w, 0, sizeof *w);
	w->wsi = wsi;
	w->binary = binary;
}

unsigned char *wsconn_queue(struct wsconn *w, size_t n)
{
	struct wsframe *f = xmalloc(sizeof *f);
	f->next = NULL;
	f->len = n;
	f->tag = 0;
	f->data = xmalloc(LWS_PRE + n);
	if (w->tail)
		w->tail->next = f;
	else
		w->head = f;
	w->tail = f;
	w->pending += n;
	lws_callback_on_writable(w->wsi);
	return f->data + LWS_PRE;
}

void wsconn_tag_last(struct wsconn *w, uint64_t tag)
{
	if (w->tail)
		w->tail->tag = tag;
}

int wsconn_head_tag(const struct wsconn *w, uint64_t *tag)
{
	if (!w->head)
		return 0;
	*tag = w->head->tag;
	return 1;
}

uint64_t wsconn_bytes_in, wsconn_bytes_out;

size_t wsconn_sock_frag(struct lws *wsi)
{
	int sb = 0;
	socklen_t l = sizeof sb;
	int fd = lws_get_socket_fd(wsi);
	if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sb, &l) < 0 || sb <= 0)
		return FRAG_MAX;
	size_t half = (size_t)sb / 2;
	size_t f = half > FRAG_HEAD + FRAG_MIN ? half - FRAG_HEAD : FRAG_MIN;
	return f > FRAG_MAX ? FRAG_MAX : f;
}

size_t wsconn_frag(struct wsconn *w)
{
	if (!w->frag)
		w->frag = wsconn_sock_frag(w->wsi);
	return w->frag;
}

int wsconn_mid_message(const struct wsconn *w)
{
	return w->head && w->head_sent > 0;
}

int wsconn_write_now(struct wsconn *w, unsigned char *p, size_t n)
{
	wsconn_bytes_out += n;
	return lws_write(w->wsi, p, n, w->binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT) < 0 ? -1 : 0;
}

int wsconn_over(const struct wsconn *w, size_t n, size_t cap)
{
	return w->pending && w->pending + n > cap;
}

/* the queue freed; a message partly written kept when `keep` (its first
 * fragments went out: the rest must follow before any other message) */
static void drop(struct wsconn *w, int keep)
{
	struct wsframe *kept = keep && w->head_sent ? w->head : NULL;
	struct wsframe *f = kept ? kept->next : w->head;
	while (f) {
		struct wsframe *nx = f->next;
		free(f->data);
		free(f);
		f = nx;
	}
	w->head = w->tail = kept;
	if (kept) {
		kept->next = NULL;
		w->pending = kept->len;
	} else {
		w->pending = 0;
		w->head_sent = 0;
	}
}

void wsconn_drop_queue(struct wsconn *w)
{
	drop(w, 1);
}

int wsconn_writable(struct wsconn *w, int closing)
{
	if (!w->head)
		return closing ? -1 : 0;
	size_t frag = wsconn_frag(w);
	/* the oldest message, fragment after fragment while the socket takes
	 * each whole; one message a turn (the channel's own output may be due
	 * before the next: tty.c) */
	for (int k = 0; k < WRITES_A_TURN && !lws_send_pipe_choked(w->wsi); k++) {
		struct wsframe *f = w->head;
		size_t off = w->head_sent, n = f->len - off;
		int how = off ? LWS_WRITE_CONTINUATION : w->binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT;
		if (n > frag) {
			n = frag;
			how |= LWS_WRITE_NO_FIN;
		}
		if (lws_write(w->wsi, f->data + LWS_PRE + off, n, (enum lws_write_protocol)how) < 0)
			return -1;   /* the connection closes: wsconn_free drops the queue */
		wsconn_bytes_out += n;
		w->head_sent += n;
		if (w->head_sent < f->len)
			continue;
		w->head = f->next;
		if (!w->head)
			w->tail = NULL;
		w->head_sent = 0;
		w->pending -= f->len;
		free(f->data);
		free(f);
		break;
	}
	if (w->head || closing)
		lws_callback_on_writable(w->wsi);
	return 0;
}

enum wsconn_rx wsconn_receive(struct wsconn *w, const void *in, size_t len, size_t limit,
			      buf_t *msg, size_t *total)
{
	w->rx_total += len;
	wsconn_bytes_in += len;
	if (!w->rx_over) {
		if (w->rx_total > limit) {
			w->rx_over = 1;
			buf_free(&w->rx);
		} else {
			buf_append(&w->rx, in, len);
		}
	}
	/* lws hands a large frame over in pieces: the message is whole at the
	 * last piece of its final fragment */
	if (!lws_is_final_fragment(w->wsi) || lws_remaining_packet_payload(w->wsi) > 0)
		return WSRX_PARTIAL;
	*total = w->rx_total;
	w->rx_total = 0;
	if (w->rx_over) {
		w->rx_over = 0;
		return WSRX_TOO_LARGE;
	}
	*msg = w->rx;
	memset(&w->rx, 0, sizeof w->rx);
	return WSRX_MESSAGE;
}

void wsconn_free(struct wsconn *w)
{
	drop(w, 0);
	buf_free(&w->rx);
	w->rx_total = 0;
	w->rx_over = 0;
}
