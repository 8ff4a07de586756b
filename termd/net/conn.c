/* conn.c — the `/events` channel (subprotocol termd.events.v1) on top of
 * wsconn.c: hello on connect, each whole text message to actions_dispatch
 * (over --max-frame: too_large), observations queued by conn_send (a client
 * whose backlog passes --max-pending is dropped, or handed to the sink of
 * a connection without a socket), and on close the actions it was waiting
 * on are told it is gone. conn_open/_receive/_writable/_closed are the
 * channel itself, also served over a connection termd dialed (link.c).
 * Being protocols[0], its callback
 * also takes the vhost's HTTP requests and upgrade checks (http.c), and
 * carries the WebSockets doors serve (http_ws_door: /sockets/bash-events). */
#include "net.h"

#include <string.h>

void conn_send(struct conn *c, const char *data, size_t len)
{
	if (c->closing)
		return;
	if (c->sink) {
		c->sink(c, data, len);
		return;
	}
	if (wsconn_over(&c->ws, len, opts.max_pending)) {
		/* it is not reading: drop it now (it can reconnect and subscribe
		 * from the last seq it saw); waiting for the queue to drain would
		 * pin the memory for as long as it stalls */
		log_warn("client not reading: %zu bytes pending, disconnecting it", c->ws.pending);
		c->closing = 1;
		wsconn_free(&c->ws);
		lws_set_timeout(c->ws.wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
		return;
	}
	memcpy(wsconn_queue(&c->ws, len), data, len);
}

void conn_receive(struct conn *c, const char *in, size_t len)
{
	if (c->closing)
		return;
	buf_t msg;
	size_t total;
	switch (wsconn_receive(&c->ws, in, len, opts.max_frame, &msg, &total)) {
	case WSRX_PARTIAL:
		break;
	case WSRX_TOO_LARGE:
		events_error(c, NULL, TD_ERR_TOO_LARGE, "frame of %zu bytes is over the limit of %zu bytes",
			     total, opts.max_frame);
		break;
	case WSRX_MESSAGE:
		actions_dispatch(c, msg.p ? msg.p : "", msg.len);
		buf_free(&msg);
		break;
	}
}

void conn_open(struct conn *c, struct lws *wsi)
{
	wsconn_init(&c->ws, wsi, 0);
	c->closing = 0;
	c->subscribed = 0;
	c->next = srv.conns;
	srv.conns = c;
	events_hello(c);
}

int conn_writable(struct conn *c)
{
	return wsconn_writable(&c->ws, c->closing);
}

void conn_closed(struct conn *c)
{
	for (struct conn **pp = &srv.conns; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	c->closing = 1;
	pending_conn_gone(c);
	wsconn_free(&c->ws);
}

/* ------------------------------------------- a door's WebSocket */

void conn_door_send(struct conn *c, const char *data, size_t n)
{
	if (c->closing)
		return;
	if (wsconn_over(&c->ws, n, opts.max_pending)) {
		log_warn("%s: client not reading: %zu bytes pending, closing it", c->door->path,
			 c->ws.pending);
		conn_door_close(c, 1008, "not reading");
		return;
	}
	memcpy(wsconn_queue(&c->ws, n), data, n);
}

void conn_door_close(struct conn *c, int code, const char *reason)
{
	if (c->closing)
		return;
	c->closing = 1;
	c->close_code = code;
	lws_close_reason(c->ws.wsi, (enum lws_close_status)code, (unsigned char *)reason,
			 strlen(reason));
	lws_callback_on_writable(c->ws.wsi);
}

static void door_receive(struct conn *c, const char *in, size_t len)
{
	if (c->closing)
		return;
	buf_t msg;
	size_t total;
	switch (wsconn_receive(&c->ws, in, len, opts.max_frame, &msg, &total)) {
	case WSRX_PARTIAL:
		break;
	case WSRX_TOO_LARGE:
		conn_door_close(c, 1009, "message too big");
		break;
	case WSRX_MESSAGE:
		c->door->message(c, msg.p ? msg.p : "", msg.len);
		buf_free(&msg);
		break;
	}
}

static int conn_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
			 void *in, size_t len)
{
	struct conn *c = user;
	switch (reason) {
	case LWS_CALLBACK_HTTP:
		return http_request(wsi, in ? (const char *)in : "");
	case LWS_CALLBACK_HTTP_BODY:
		return http_body(wsi, in, len);
	case LWS_CALLBACK_HTTP_BODY_COMPLETION:
		return http_body_done(wsi);
	case LWS_CALLBACK_HTTP_WRITEABLE:
		return http_writeable(wsi);
	case LWS_CALLBACK_CLOSED_HTTP:
		http_closed(wsi);
		break;
	case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
		return http_confirm_upgrade(wsi);
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: {
		struct upgrade u;
		if (http_upgrade(wsi, CHANNEL_DOOR, &u) == 0) {
			memset(c, 0, sizeof *c);
			c->door = u.door;
			c->door_arg = u.door_arg;
			return 0;
		}
		if (http_upgrade(wsi, CHANNEL_EVENTS, &u) < 0)
			return 1;
		memset(c, 0, sizeof *c);
		c->readonly = u.auth == AUTH_VIEW;
		return 0;
	}
	case LWS_CALLBACK_ESTABLISHED:
		if (c->door) {
			wsconn_init(&c->ws, wsi, 0);
			c->door->open(c);
		} else {
			conn_open(c, wsi);
		}
		break;
	case LWS_CALLBACK_RECEIVE:
		if (c->door)
			door_receive(c, in, len);
		else
			conn_receive(c, in, len);
		break;
	case LWS_CALLBACK_SERVER_WRITEABLE:
		return conn_writable(c);
	case LWS_CALLBACK_CLOSED:
		if (c->door) {
			c->closing = 1;
			c->door->closed(c);
			wsconn_free(&c->ws);
		} else {
			conn_closed(c);
		}
		break;
	default:
		break;
	}
	return 0;
}

const struct lws_protocols conn_protocol = {
	TD_SUBPROTO_EVENTS, conn_callback, sizeof(struct conn), 65536, 0, NULL, 0
};
