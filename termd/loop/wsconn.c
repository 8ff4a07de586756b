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

int wsconn_write_now(struct wsconn *w, unsigned char *p, size_t n)
{
	wsconn_bytes_out += n;
	return lws_write(w->wsi, p, n, w->binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT) < 0 ? -1 : 0;
}

int wsconn_over(const struct wsconn *w, size_t n, size_t cap)
{
	return w->pending && w->pending + n > cap;
}

void wsconn_drop_queue(struct wsconn *w)
{
	while (w->head) {
		struct wsframe *f = w->head;
		w->head = f->next;
		free(f->data);
		free(f);
	}
	w->tail = NULL;
	w->pending = 0;
}

int wsconn_writable(struct wsconn *w, int closing)
{
	struct wsframe *f = w->head;
	if (!f)
		return closing ? -1 : 0;
	int r = lws_write(w->wsi, f->data + LWS_PRE, f->len,
			  w->binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT);
	wsconn_bytes_out += f->len;
	w->head = f->next;
	if (!w->head)
		w->tail = NULL;
	w->pending -= f->len;
	free(f->data);
	free(f);
	if (r < 0)
		return -1;
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
	wsconn_drop_queue(w);
	buf_free(&w->rx);
	w->rx_total = 0;
	w->rx_over = 0;
}
