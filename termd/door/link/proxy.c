/* proxy.c — link.proxy {port, url}: a preview over a dial-out link.
 * The backend asks on its link; termd dials url (the link's own origin
 * only) offering termd.proxy.v1, connects to the port where the session's
 * program listens, answers `link.proxy` once both are up, and from then on
 * carries that one TCP connection as binary WebSocket frames, each way
 * through a bounded buffer; either end closing closes the other. */
#include "door.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define LP_HELD_MAX (1u << 20)   /* bytes waiting one way before that way's reads stop */
#define LP_READ     65536

struct lproxy {
	struct lws *ws;            /* the socket termd dialed, or NULL */
	struct lws *tcp;           /* the program's, or NULL */
	int tcp_fd;
	int port;
	char *url;
	cJSON *id;                 /* the action's id (owned), or NULL */
	struct conn *conn;         /* the link it came on */
	buf_t to_tcp;              /* frames' bytes for the program */
	size_t to_tcp_off;
	buf_t to_ws;               /* the program's bytes for the backend */
	int tcp_held, ws_held, tcp_eof, failed, up;
};

static struct lproxy *dialing;   /* the one being dialed right now (errors inside the call) */

static void lp_free(struct lproxy *lp)
{
	if (lp->tcp) {
		lws_set_opaque_user_data(lp->tcp, NULL);
		lws_set_timeout(lp->tcp, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
	} else if (lp->tcp_fd >= 0) {
		close(lp->tcp_fd);
	}
	if (lp->ws) {
		lws_set_opaque_user_data(lp->ws, NULL);
		lws_set_timeout(lp->ws, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
	}
	buf_free(&lp->to_tcp);
	buf_free(&lp->to_ws);
	cJSON_Delete(lp->id);
	free(lp->url);
	free(lp);
}

static void lp_error(struct lproxy *lp, td_err code, const char *msg)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "code", td_err_name(code));
	cJSON_AddNumberToObject(ex, "port", lp->port);
	events_emit(lp->conn, lp->id, "error", msg, ex);
}

static int tcp_flush(struct lproxy *lp)
{
	while (lp->to_tcp_off < lp->to_tcp.len) {
		ssize_t n = send(lp->tcp_fd, lp->to_tcp.p + lp->to_tcp_off,
				 lp->to_tcp.len - lp->to_tcp_off, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				break;
			return -1;
		}
		lp->to_tcp_off += (size_t)n;
	}
	if (lp->to_tcp_off == lp->to_tcp.len) {
		buf_reset(&lp->to_tcp);
		lp->to_tcp_off = 0;
	} else if (lp->tcp) {
		lws_callback_on_writable(lp->tcp);
	}
	if (lp->ws_held && lp->ws && lp->to_tcp.len - lp->to_tcp_off < LP_HELD_MAX / 2) {
		lp->ws_held = 0;
		lws_rx_flow_control(lp->ws, 1);
	}
	return 0;
}

static int tcp_event(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
{
	struct lproxy *lp = arg;
	if (!lp)
		return reason == LWS_CALLBACK_RAW_RX_FILE ? -1 : 0;
	switch (reason) {
	case LWS_CALLBACK_RAW_RX_FILE: {
		static char b[LP_READ];
		ssize_t n = recv(lp->tcp_fd, b, sizeof b, 0);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			break;
		if (n <= 0) {   /* the program is done: the rest goes, then the link closes */
			lp->tcp_eof = 1;
			lws_rx_flow_control(wsi, 0);
		} else {
			buf_append(&lp->to_ws, b, (size_t)n);
			if (lp->to_ws.len > LP_HELD_MAX && !lp->tcp_held) {
				lp->tcp_held = 1;
				lws_rx_flow_control(wsi, 0);
			}
		}
		if (lp->ws)
			lws_callback_on_writable(lp->ws);
		break;
	}
	case LWS_CALLBACK_RAW_WRITEABLE_FILE:
		if (tcp_flush(lp) < 0) {
			lp->tcp_eof = 1;
			if (lp->ws)
				lws_callback_on_writable(lp->ws);
		}
		break;
	case LWS_CALLBACK_RAW_CLOSE_FILE:
		if (lp->tcp == wsi) {
			lp->tcp = NULL;
			lp->tcp_fd = -1;
			lp->tcp_eof = 1;
			if (lp->ws)
				lws_callback_on_writable(lp->ws);
			else
				lp_free(lp);
		}
		break;
	default:
		break;
	}
	return 0;
}

static int ws_established(struct lproxy *lp)
{
	const char *addr = ports_find(lp->port);
	int fd = addr ? proxy_connect(lp->port, addr) : -1;
	if (fd < 0) {
		lp_error(lp, TD_ERR_NOT_FOUND, "no program of termd's accepts connections on that port");
		return -1;
	}
	lp->tcp_fd = fd;
	lp->tcp = server_adopt_fd(fd, tcp_event, lp);
	if (!lp->tcp) {
		lp_error(lp, TD_ERR_INTERNAL, "termd could not follow the connection");
		return -1;
	}
	lp->up = 1;
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddNumberToObject(ex, "port", lp->port);
	cJSON_AddStringToObject(ex, "url", lp->url);
	events_emit(lp->conn, lp->id, "link.proxy", "", ex);
	return 0;
}

int link_proxy_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
			void *in, size_t len)
{
	(void)user;
	struct lproxy *lp = wsi ? lws_get_opaque_user_data(wsi) : NULL;
	if (!lp)
		return 0;
	switch (reason) {
	case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER:
		return link_append_headers(wsi, (unsigned char **)in, len) < 0 ? -1 : 0;
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
		lws_set_opaque_user_data(wsi, NULL);
		lp->ws = NULL;
		buf_t m = {0};
		buf_printf(&m, "cannot dial %s: %s", lp->url, in ? (const char *)in : "connection failed");
		lp_error(lp, TD_ERR_IO_ERROR, m.p);
		buf_free(&m);
		if (lp == dialing)
			lp->failed = 1;   /* freed by the action, after the call */
		else
			lp_free(lp);
		return 0;
	}
	case LWS_CALLBACK_CLIENT_ESTABLISHED:
		lp->ws = wsi;
		if (ws_established(lp) < 0) {
			lws_set_opaque_user_data(wsi, NULL);
			lp->ws = NULL;
			lp_free(lp);
			return -1;
		}
		break;
	case LWS_CALLBACK_CLIENT_RECEIVE:
		buf_append(&lp->to_tcp, in, len);
		if (lp->to_tcp.len - lp->to_tcp_off > LP_HELD_MAX && !lp->ws_held) {
			lp->ws_held = 1;
			lws_rx_flow_control(wsi, 0);
		}
		if (lp->tcp)
			lws_callback_on_writable(lp->tcp);
		break;
	case LWS_CALLBACK_CLIENT_WRITEABLE: {
		size_t n = lp->to_ws.len < LP_READ ? lp->to_ws.len : LP_READ;
		if (n) {
			unsigned char *b = xmalloc(LWS_PRE + n);
			memcpy(b + LWS_PRE, lp->to_ws.p, n);
			int w = lws_write(wsi, b + LWS_PRE, n, LWS_WRITE_BINARY);
			free(b);
			if (w < (int)n)
				return -1;
			buf_consume(&lp->to_ws, n);
		}
		if (lp->to_ws.len) {
			lws_callback_on_writable(wsi);
		} else if (lp->tcp_eof) {
			lws_close_reason(wsi, LWS_CLOSE_STATUS_NORMAL, NULL, 0);
			return -1;
		}
		if (lp->tcp_held && lp->tcp && lp->to_ws.len < LP_HELD_MAX / 2) {
			lp->tcp_held = 0;
			lws_rx_flow_control(lp->tcp, 1);
		}
		break;
	}
	case LWS_CALLBACK_CLIENT_CLOSED:
		lws_set_opaque_user_data(wsi, NULL);
		lp->ws = NULL;
		if (!lp->up)
			lp_error(lp, TD_ERR_IO_ERROR, "the backend closed the connection");
		lp_free(lp);
		break;
	default:
		break;
	}
	return 0;
}

/* link.proxy {port, url}: only a link's backend may ask, only its origin */
static int link_proxy_action(struct act *a)
{
	long long port = 0;
	int has;
	const char *url = NULL;
	if (arg_int(a, "port", &port, &has) < 0 || arg_string(a, "url", &url, 1) < 0)
		return -1;
	if (!has || port < 1 || port > 65535)
		return act_error(a, TD_ERR_BAD_REQUEST, "port must be 1-65535");
	if (!ports_find((int)port))
		return act_error(a, TD_ERR_NOT_FOUND, "no program of termd's listens on port %lld", port);
	struct lproxy *lp = xcalloc(1, sizeof *lp);
	lp->tcp_fd = -1;
	lp->port = (int)port;
	lp->url = xstrdup(url);
	lp->id = a->id ? cJSON_Duplicate(a->id, 1) : NULL;
	lp->conn = a->conn;
	char err[600];
	dialing = lp;
	td_err code = TD_ERR_INTERNAL;
	int rc = link_dial_back(a->conn, url, TD_SUBPROTO_PROXY, lp, &code, err, sizeof err);
	dialing = NULL;
	if (rc < 0) {
		lp_free(lp);
		return act_error(a, code, "%s", err);
	}
	if (lp->failed)   /* told already (an error for the id) */
		lp_free(lp);
	return 0;
}

void link_proxy_register(void)
{
	static const struct action_def defs[] = {
		{"link.proxy", link_proxy_action, 0},
	};
	actions_register(defs, sizeof defs / sizeof defs[0]);
}
