/* proxy-ws.c — WebSocket upgrades through the preview proxy (dev servers'
 * hot reload): a checked upgrade request to /proxy/<port>/… (or a preview
 * Host) is taken from lws before its handshake, resent to the program on
 * loopback, and from then on the two sockets are joined byte for byte (the
 * program's 101 and its frames go to the client as they are), each way
 * spliced through a pipe of TUN_HELD_MAX bytes (never read into termd;
 * reads stop while it holds what the other side has not taken). Plain HTTP
 * listeners only: under TLS the bytes are lws's, and the upgrade is
 * refused. */
#include "door.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TUN_HELD_MAX (1u << 20)   /* bytes waiting one way before that way's reads stop */

/* one side of a tunnel: its socket, and what waits to be written to it */
struct side {
	struct lws *wsi;
	int fd;
	buf_t out;               /* the upgrade request (written before the pipe) */
	size_t off;
	int pp[2];               /* the pipe of the bytes for it */
	size_t inpipe;           /* ... in it now */
	int held;                /* its reads stopped: the other side is behind */
	int eof;                 /* it sent its end */
	lws_sorted_usec_list_t rearm;   /* asks for writable again, after lws's turn */
};

struct tunnel {
	struct side s[2];        /* 0 the client, 1 the program */
	int connected;           /* the program's connect finished */
};

struct tun_ref {
	struct tunnel *t;
	int i;
};

static void tun_close(struct tunnel *t)
{
	for (int i = 0; i < 2; i++) {
		struct side *sd = &t->s[i];
		server_timer(&sd->rearm, NULL, 0);
		if (sd->wsi) {
			struct tun_ref *r = lws_get_opaque_user_data(sd->wsi);
			free(r);
			lws_set_opaque_user_data(sd->wsi, NULL);
			lws_set_timeout(sd->wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
			sd->wsi = NULL;
		} else if (sd->fd >= 0) {
			close(sd->fd);
		}
		if (sd->pp[0] >= 0) {
			close(sd->pp[0]);
			close(sd->pp[1]);
		}
		buf_free(&sd->out);
	}
	free(t);
}

/* lws takes POLLOUT off a raw file's wsi after its WRITEABLE callback: a
 * lws_callback_on_writable made in that callback is lost. Asked again
 * from a timer, after lws's turn. */
static void side_rearm(lws_sorted_usec_list_t *sul)
{
	struct side *sd = lws_container_of(sul, struct side, rearm);
	if (sd->wsi)
		lws_callback_on_writable(sd->wsi);
}

/* write what waits for side i (in_wr: from its WRITEABLE callback); -1 on
 * an error */
static int side_flush(struct tunnel *t, int i, int in_wr)
{
	struct side *sd = &t->s[i], *other = &t->s[!i];
	while (sd->off < sd->out.len) {
		ssize_t n = send(sd->fd, sd->out.p + sd->off, sd->out.len - sd->off, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				break;
			return -1;
		}
		sd->off += (size_t)n;
	}
	while (sd->off == sd->out.len && sd->inpipe) {
		ssize_t n = splice(sd->pp[0], NULL, sd->fd, NULL, sd->inpipe,
				   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				break;
			return -1;
		}
		if (!n)
			return -1;
		sd->inpipe -= (size_t)n;
	}
	if (sd->off == sd->out.len && !sd->inpipe) {
		buf_reset(&sd->out);
		sd->off = 0;
		if (other->eof)
			shutdown(sd->fd, SHUT_WR);
		if (other->held && other->wsi) {
			other->held = 0;
			lws_rx_flow_control(other->wsi, 1);
		}
		return 0;
	}
	if (in_wr)
		server_timer(&sd->rearm, side_rearm, 1);
	else
		lws_callback_on_writable(sd->wsi);
	/* the pipe is not empty: the other side's reads wait for it */
	if (sd->inpipe && !other->held && other->wsi) {
		other->held = 1;
		lws_rx_flow_control(other->wsi, 0);
	}
	return 0;
}

/* side i is readable: what it sent goes to the other side; -1 when the
 * tunnel is over */
static int side_read(struct tunnel *t, int i)
{
	struct side *sd = &t->s[i], *to = &t->s[!i];
	if (to->inpipe)
		return 0;   /* (held: its reads stop once lws's turn is over) */
	ssize_t n = splice(sd->fd, NULL, to->pp[1], NULL, TUN_HELD_MAX,
			   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0) {
		if (n < 0 || sd->eof)
			return -1;
		sd->eof = 1;
		lws_rx_flow_control(sd->wsi, 0);
		if (to->eof || !to->wsi)
			return -1;
		if (to->off == to->out.len && !to->inpipe)
			shutdown(to->fd, SHUT_WR);
		return 0;
	}
	to->inpipe += (size_t)n;
	return side_flush(t, !i, 0);
}

static int tun_event(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
{
	struct tun_ref *r = arg;
	if (!r)
		return reason == LWS_CALLBACK_RAW_RX_FILE ? -1 : 0;
	struct tunnel *t = r->t;
	int i = r->i, bad = 0;
	switch (reason) {
	case LWS_CALLBACK_RAW_RX_FILE:
		bad = side_read(t, i) < 0;
		if (!bad && t->s[0].eof && t->s[1].eof)
			bad = 1;
		break;
	case LWS_CALLBACK_RAW_WRITEABLE_FILE:
		if (i == 1 && !t->connected) {
			int err = 0;
			socklen_t el = sizeof err;
			if (getsockopt(t->s[1].fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err) {
				bad = 1;
				break;
			}
			t->connected = 1;
		}
		bad = side_flush(t, i, 1) < 0;
		break;
	case LWS_CALLBACK_RAW_CLOSE_FILE:
		if (t->s[i].wsi == wsi) {
			free(r);
			lws_set_opaque_user_data(wsi, NULL);
			t->s[i].wsi = NULL;
			t->s[i].fd = -1;
			tun_close(t);
		}
		return 0;
	default:
		return 0;
	}
	if (bad)
		tun_close(t);
	return 0;
}

/* the upgrade request again, for the program */
static void build_upgrade(struct lws *wsi, buf_t *b, const char *path, int port, int by_host)
{
	buf_printf(b, "GET %s HTTP/1.1\r\nHost: localhost:%d\r\nUpgrade: websocket\r\n"
		      "Connection: Upgrade\r\n", path, port);
	proxy_client_hdrs(wsi, b, port, by_host, 1);   /* (no TLS here: Proto http) */
	buf_append(b, "\r\n", 2);
}

static int adopt_side(struct tunnel *t, int i)
{
	struct tun_ref *r = xcalloc(1, sizeof *r);
	r->t = t;
	r->i = i;
	t->s[i].wsi = server_adopt_fd(t->s[i].fd, tun_event, r);
	if (!t->s[i].wsi) {
		free(r);
		return -1;
	}
	return 0;
}

int proxy_ws_upgrade(struct lws *wsi, enum auth_level level, const char **why)
{
	char uri[4096];
	int by_host = 0;
	if (lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI) <= 0)
		return 0;
	const char *rest = uri, *addr = NULL;
	int port = proxy_target(wsi, uri, &by_host, &rest);
	if (!port)
		return 0;
	if (port < 0) {
		*why = "not found\n";
		return 404;
	}
	int status = proxy_admit_check(wsi, level, port, &addr, why);
	if (status)
		return status;
	if (lws_is_ssl(wsi)) {   /* lws's own TLS (the front's is ended before lws) */
		*why = "WebSocket previews need a listener without TLS\n";
		return 501;
	}
	/* the path with the query, as the client sent it (lws decoded it:
	 * spaces and the like encoded again), termd's token left out */
	buf_t path = {0};
	for (const char *c = rest; *c; c++) {
		if ((unsigned char)*c <= ' ' || *c == '%' || *c == '#' || (unsigned char)*c >= 0x7f)
			buf_printf(&path, "%%%02X", (unsigned char)*c);
		else
			buf_putc(&path, *c);
	}
	int first = 1;
	for (int i = 0;; i++) {
		char frag[1024];
		if (lws_hdr_copy_fragment(wsi, frag, sizeof frag, WSI_TOKEN_HTTP_URI_ARGS, i) < 0)
			break;
		if (strncmp(frag, "token=", 6) == 0 || strpbrk(frag, " \r\n#"))
			continue;
		buf_printf(&path, "%c%s", first ? '?' : '&', frag);
		first = 0;
	}
	int up = proxy_connect(port, addr);
	if (up < 0) {
		buf_free(&path);
		*why = "the preview's port refused the connection\n";
		return 502;
	}
	/* the client's socket, taken from lws: lws keeps its fd number, now
	 * a socket of nothing, and closes that */
	int lfd = lws_get_socket_fd(wsi);
	int cfd = fcntl(lfd, F_DUPFD_CLOEXEC, 3);
	int dummy = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (cfd < 0 || dummy < 0 || dup2(dummy, lfd) < 0) {
		if (cfd >= 0)
			close(cfd);
		if (dummy >= 0)
			close(dummy);
		close(up);
		buf_free(&path);
		*why = "termd could not take the connection\n";
		return 503;
	}
	close(dummy);
	fcntl(lfd, F_SETFD, FD_CLOEXEC);
	fcntl(cfd, F_SETFL, fcntl(cfd, F_GETFL) | O_NONBLOCK);
	struct tunnel *t = xcalloc(1, sizeof *t);
	t->s[0].fd = cfd;
	t->s[1].fd = up;
	build_upgrade(wsi, &t->s[1].out, path.p, port, by_host);
	buf_free(&path);
	int piped = 1;
	for (int i = 0; i < 2; i++) {
		t->s[i].pp[0] = t->s[i].pp[1] = -1;
		if (pipe2(t->s[i].pp, O_NONBLOCK | O_CLOEXEC) < 0)
			piped = 0;
		else
			fcntl(t->s[i].pp[1], F_SETPIPE_SZ, TUN_HELD_MAX);   /* (else 64 KiB) */
	}
	if (!piped || adopt_side(t, 0) < 0 || adopt_side(t, 1) < 0) {
		tun_close(t);
		return -1;
	}
	lws_callback_on_writable(t->s[1].wsi);
	return -1;
}
