/* ws.c — the client library's RFC 6455 layer: the upgrade request and the
 * check of its answer (Sec-WebSocket-Accept from OpenSSL's SHA-1 and
 * base64), masked framing, the read buffer, fragment reassembly, ping/pong
 * and the close handshake; td_connect, td_send, td_recv, td_pending and
 * td_close of client.h. Reads and writes only through net.c. */
#include "client-int.h"
#include "proto.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#define TD_CLOSE_WAIT_MS        250
#define TD_MAX_HEADERS          16384
#define TD_MAX_MESSAGE          ((uint64_t)1 << 30)  /* 1 GiB: refuse anything larger */
#define TD_WS_GUID              "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

/* ---- pure pieces: accept key, frame headers, masking ---- */

size_t td_base64_encode(const void *in, size_t n, char *out)
{
	if (n > INT_MAX / 4 * 3 - 3)
		abort();   /* EVP_EncodeBlock takes an int; never this large here */
	return (size_t)EVP_EncodeBlock((unsigned char *)out, in, (int)n);
}

void td_ws_accept(const char *key, char out[29])
{
	char buf[256];
	int n = snprintf(buf, sizeof buf, "%s%s", key, TD_WS_GUID);
	if (n < 0 || (size_t)n >= sizeof buf)
		n = sizeof buf - 1;
	uint8_t dig[SHA_DIGEST_LENGTH];
	SHA1((const unsigned char *)buf, (size_t)n, dig);
	td_base64_encode(dig, sizeof dig, out);
}

/* ---- frames ---- */

size_t td_ws_header(uint8_t hdr[14], int fin, int opcode, uint64_t len, const uint8_t *mask)
{
	size_t n = 0;
	hdr[n++] = (uint8_t)((fin ? 0x80 : 0) | (opcode & 0x0f));
	uint8_t m = mask ? 0x80 : 0;
	if (len < 126) {
		hdr[n++] = (uint8_t)(m | len);
	} else if (len <= 0xffff) {
		hdr[n++] = m | 126;
		hdr[n++] = (uint8_t)(len >> 8);
		hdr[n++] = (uint8_t)len;
	} else {
		hdr[n++] = m | 127;
		for (int i = 7; i >= 0; i--)
			hdr[n++] = (uint8_t)(len >> (8 * i));
	}
	if (mask) {
		memcpy(hdr + n, mask, 4);
		n += 4;
	}
	return n;
}

int td_ws_parse_header(const uint8_t *buf, size_t n, td_ws_frame *f)
{
	if (n < 2)
		return 0;
	memset(f, 0, sizeof *f);
	f->fin = !!(buf[0] & 0x80);
	f->opcode = buf[0] & 0x0f;
	if (buf[0] & 0x70)
		return -1;  /* no extensions negotiated: RSV bits must be 0 */
	switch (f->opcode) {
	case TD_WS_CONT: case TD_WS_TEXT: case TD_WS_BINARY:
	case TD_WS_CLOSE: case TD_WS_PING: case TD_WS_PONG:
		break;
	default:
		return -1;
	}
	f->masked = !!(buf[1] & 0x80);
	uint64_t len = buf[1] & 0x7f;
	size_t h = 2;
	if (len == 126) {
		if (n < 4)
			return 0;
		len = (uint64_t)buf[2] << 8 | buf[3];
		h = 4;
	} else if (len == 127) {
		if (n < 10)
			return 0;
		len = 0;
		for (int i = 0; i < 8; i++)
			len = len << 8 | buf[2 + i];
		if (len >> 63)
			return -1;
		h = 10;
	}
	if (f->opcode & 0x8) {   /* control frames: not fragmented, <= 125 bytes */
		if (!f->fin || len > 125)
			return -1;
	}
	if (f->masked) {
		if (n < h + 4)
			return 0;
		memcpy(f->mask, buf + h, 4);
		h += 4;
	}
	f->len = len;
	f->hdr_len = h;
	return 1;
}

void td_ws_mask(uint8_t *data, size_t n, const uint8_t mask[4], uint64_t off)
{
	for (size_t i = 0; i < n; i++)
		data[i] ^= mask[(off + i) & 3];
}

/* ---- the read buffer and sending frames ---- */

/* Waits up to `ms` for bytes and reads what is there into the read buffer:
 * 1 read something, 0 timeout, -1 EOF/error (c->err set). */
static int td_fill(td_client *c, int ms)
{
	if (c->rb_off && c->rb_off == c->rb_len) {
		c->rb_off = c->rb_len = 0;
	} else if (c->rb_off > c->rb_cap / 2) {
		memmove(c->rb, c->rb + c->rb_off, c->rb_len - c->rb_off);
		c->rb_len -= c->rb_off;
		c->rb_off = 0;
	}
	if (c->rb_cap - c->rb_len < TD_READ_CHUNK) {
		size_t cap = c->rb_cap * 2;
		if (cap < c->rb_len + TD_READ_CHUNK)
			cap = c->rb_len + TD_READ_CHUNK;
		c->rb = xrealloc(c->rb, cap);
		c->rb_cap = cap;
	}
	/* One byte always stays free so the handshake can NUL-terminate. */
	ssize_t n = td_read_some(c, c->rb + c->rb_len, c->rb_cap - c->rb_len - 1, ms);
	if (n <= 0)
		return (int)n;
	c->rb_len += (size_t)n;
	return 1;
}

static int td_send_frame(td_client *c, int opcode, const void *data, size_t len)
{
	uint8_t mask[4], hdr[14];
	td_random(mask, 4);
	size_t h = td_ws_header(hdr, 1, opcode, len, mask);
	/* Mask into one buffer with the header, at most 64 KiB at a time. */
	size_t chunk = len < TD_READ_CHUNK ? len : TD_READ_CHUNK;
	uint8_t stackbuf[14 + 256];
	uint8_t *buf = h + chunk <= sizeof stackbuf ? stackbuf : xrealloc(NULL, h + chunk);
	memcpy(buf, hdr, h);
	const uint8_t *p = data;
	size_t off = 0, start = h;
	int rc = 0;
	do {
		size_t n = len - off < chunk ? len - off : chunk;
		if (n)
			memcpy(buf + start, p + off, n);
		td_ws_mask(buf + start, n, mask, off);
		if (td_write_all(c, buf, start + n) < 0) {
			rc = -1;
			break;
		}
		off += n;
		start = 0;
	} while (off < len);
	if (buf != stackbuf)
		free(buf);
	return rc;
}

/* ---- connect and handshake ---- */

/* Case-insensitive: does the comma-separated header value contain token? */
static int td_has_token(const char *v, const char *tok)
{
	size_t tl = strlen(tok);
	while (*v) {
		while (*v == ' ' || *v == '\t' || *v == ',')
			v++;
		size_t n = strcspn(v, ",");
		size_t m = n;
		while (m && (v[m - 1] == ' ' || v[m - 1] == '\t'))
			m--;
		if (m == tl && !strncasecmp(v, tok, tl))
			return 1;
		v += n;
	}
	return 0;
}

/* Checks the server's handshake answer (headers NUL-terminated, without the
 * final blank line). 0 ok, -1 with err set. */
static int td_check_answer(td_client *c, char *hdrs, const char *accept, const char *subproto,
			   char *err, size_t errlen)
{
	char *save = NULL;
	char *line = strtok_r(hdrs, "\r\n", &save);
	int code = 0;
	char reason[128] = "";
	if (!line || strncmp(line, "HTTP/1.", 7) || sscanf(line + 8, " %d", &code) != 1) {
		td_seterr(err, errlen, "not an HTTP server (bad status line)");
		return -1;
	}
	const char *r = line + 8;
	while (*r == ' ')
		r++;
	while (isdigit((unsigned char)*r))
		r++;
	while (*r == ' ')
		r++;
	snprintf(reason, sizeof reason, "%s", r);
	if (code != 101) {
		if (code == 401)   /* the clients' options and variable */
			td_seterr(err, errlen, "HTTP 401%s%s: wrong or missing token "
				  "(--token-file / TERMD_TOKEN)", reason[0] ? " " : "", reason);
		else if (reason[0])
			td_seterr(err, errlen, "HTTP %d %s", code, reason);
		else
			td_seterr(err, errlen, "HTTP %d", code);
		return -1;
	}
	int upgrade = 0, connection = 0, accepted = 0;
	while ((line = strtok_r(NULL, "\r\n", &save))) {
		char *colon = strchr(line, ':');
		if (!colon)
			continue;
		*colon = '\0';
		char *v = colon + 1;
		while (*v == ' ' || *v == '\t')
			v++;
		size_t vl = strlen(v);
		while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
			v[--vl] = '\0';
		if (!strcasecmp(line, "Upgrade"))
			upgrade = td_has_token(v, "websocket");
		else if (!strcasecmp(line, "Connection"))
			connection = td_has_token(v, "upgrade");
		else if (!strcasecmp(line, "Sec-WebSocket-Accept"))
			accepted = !strcmp(v, accept);
		else if (!strcasecmp(line, "Sec-WebSocket-Protocol"))
			snprintf(c->subproto, sizeof c->subproto, "%s", v);
	}
	if (!upgrade || !connection) {
		td_seterr(err, errlen, "bad handshake answer: missing Upgrade/Connection headers");
		return -1;
	}
	if (!accepted) {
		td_seterr(err, errlen, "bad handshake answer: wrong Sec-WebSocket-Accept");
		return -1;
	}
	if (c->subproto[0] && (!subproto || strcmp(c->subproto, subproto))) {
		td_seterr(err, errlen, "server chose subprotocol %s, not %s", c->subproto,
			  subproto ? subproto : "(none)");
		return -1;
	}
	return 0;
}

td_client *td_connect(const char *base_url, const char *path, const char *subprotocol,
		      const char *token, char *err, size_t errlen)
{
	td_url u;
	td_seterr(err, errlen, "%s", "");
	if (td_url_parse(base_url, &u, err, errlen) < 0)
		return NULL;
	if (!path || !*path)
		path = "/";
	int fd = td_net_open(&u, err, errlen);
	if (fd < 0)
		return NULL;

	td_client *c = xcalloc(1, sizeof *c);
	c->fd = fd;
	uint8_t rnd[16];
	if (u.tls && td_tls_start(c, &u, err, errlen) < 0)
		goto fail;

	/* The upgrade request. */
	char key[32], accept[29];
	td_random(rnd, sizeof rnd);
	td_base64_encode(rnd, sizeof rnd, key);
	td_ws_accept(key, accept);
	char host[300];
	if (u.is_unix)
		snprintf(host, sizeof host, "localhost");
	else if (strchr(u.host, ':'))
		snprintf(host, sizeof host, "[%s]:%d", u.host, u.port);
	else
		snprintf(host, sizeof host, "%s:%d", u.host, u.port);
	size_t reqcap = strlen(path) + strlen(u.prefix) + (token ? strlen(token) : 0) +
			(subprotocol ? strlen(subprotocol) : 0) + strlen(host) + 512;
	char *req = xrealloc(NULL, reqcap);
	int n = snprintf(req, reqcap,
			 "GET %s%s%s HTTP/1.1\r\n"
			 "Host: %s\r\n"
			 "Upgrade: websocket\r\n"
			 "Connection: Upgrade\r\n"
			 "Sec-WebSocket-Key: %s\r\n"
			 "Sec-WebSocket-Version: 13\r\n"
			 "User-Agent: termd-client/" TERMD_VERSION "\r\n",
			 u.prefix, path[0] == '/' ? "" : "/", path, host, key);
	if (subprotocol && *subprotocol)
		n += snprintf(req + n, reqcap - (size_t)n, "Sec-WebSocket-Protocol: %s\r\n", subprotocol);
	if (token && *token)
		n += snprintf(req + n, reqcap - (size_t)n, "Authorization: Bearer %s\r\n", token);
	n += snprintf(req + n, reqcap - (size_t)n, "\r\n");
	int rc = td_write_all(c, req, (size_t)n);
	free(req);
	if (rc < 0) {
		td_seterr(err, errlen, "%s", c->err);
		td_close(c);
		return NULL;
	}

	/* The answer: read until the blank line; what follows stays buffered. */
	int64_t deadline = td_deadline(TD_HANDSHAKE_TIMEOUT_MS);
	char *end = NULL;
	for (;;) {
		if (c->rb_len) {
			c->rb[c->rb_len] = '\0';   /* td_fill leaves room */
			end = strstr((char *)c->rb, "\r\n\r\n");
			if (end)
				break;
			if (c->rb_len > TD_MAX_HEADERS) {
				td_seterr(err, errlen, "handshake answer too long");
				goto fail;
			}
		}
		int r = td_fill(c, td_left(deadline));
		if (r == 0) {
			td_seterr(err, errlen, "no handshake answer within %d s",
				  TD_HANDSHAKE_TIMEOUT_MS / 1000);
			goto fail;
		}
		if (r < 0) {
			td_seterr(err, errlen, "%s during handshake", c->err);
			goto fail;
		}
	}
	size_t hlen = (size_t)(end - (char *)c->rb);
	*end = '\0';
	if (td_check_answer(c, (char *)c->rb, accept, subprotocol, err, errlen) < 0)
		goto fail;
	c->rb_off = hlen + 4;
	c->err[0] = '\0';
	return c;
fail:
	c->closed = c->sent_close = 1;   /* td_close sends no close frame */
	td_close(c);
	return NULL;
}

/* ---- receiving ---- */

static void td_msg_append(td_client *c, const uint8_t *p, size_t n)
{
	if (c->msg_cap < c->msg_len + n + 1) {
		size_t cap = c->msg_cap ? c->msg_cap : 4096;
		while (cap < c->msg_len + n + 1)
			cap *= 2;
		c->msg = xrealloc(c->msg, cap);
		c->msg_cap = cap;
	}
	memcpy(c->msg + c->msg_len, p, n);
	c->msg_len += n;
}

/* Fails the connection with a protocol error. */
static int td_fail(td_client *c, uint16_t code, const char *why)
{
	snprintf(c->err, sizeof c->err, "protocol error: %s", why);
	if (!c->sent_close && !c->closed) {
		uint8_t pl[2] = { (uint8_t)(code >> 8), (uint8_t)code };
		c->sent_close = 1;
		td_send_frame(c, TD_WS_CLOSE, pl, 2);
	}
	c->closed = 1;
	return -1;
}

/* Handles one whole frame from the read buffer if there is one: 1 a message
 * is complete in c->msg (opcode in *op), 0 need more bytes (or a control
 * frame was handled: call again), -1 closed/error. *progress is set when a
 * frame was consumed. */
static int td_step(td_client *c, int *op, int *progress)
{
	*progress = 0;
	size_t avail = c->rb_len - c->rb_off;
	if (!avail)
		return 0;
	uint8_t *b = c->rb + c->rb_off;
	td_ws_frame f;
	int r = td_ws_parse_header(b, avail, &f);
	if (r < 0)
		return td_fail(c, 1002, "bad frame header");
	if (r == 0)
		return 0;
	if (f.len > TD_MAX_MESSAGE || c->msg_len + f.len > TD_MAX_MESSAGE)
		return td_fail(c, 1009, "message too big");
	if (avail - f.hdr_len < f.len)
		return 0;
	uint8_t *pl = b + f.hdr_len;
	size_t len = (size_t)f.len;
	if (f.masked)
		td_ws_mask(pl, len, f.mask, 0);
	c->rb_off += f.hdr_len + len;
	*progress = 1;

	switch (f.opcode) {
	case TD_WS_PING:
		if (!c->sent_close && td_send_frame(c, TD_WS_PONG, pl, len) < 0)
			return -1;
		return 0;
	case TD_WS_PONG:
		return 0;
	case TD_WS_CLOSE: {
		int code = len >= 2 ? (pl[0] << 8 | pl[1]) : 1005;
		c->close_code = code;
		if (!c->sent_close) {
			c->sent_close = 1;
			td_send_frame(c, TD_WS_CLOSE, pl, len >= 2 ? 2 : 0);
		}
		c->closed = 1;
		if (len > 2)
			snprintf(c->err, sizeof c->err, "connection closed by server (%d: %.*s)", code,
				 (int)(len - 2), (const char *)pl + 2);
		else
			snprintf(c->err, sizeof c->err, "connection closed by server (%d)", code);
		return -1;
	}
	case TD_WS_CONT:
		if (!c->msg_op)
			return td_fail(c, 1002, "continuation frame outside a message");
		break;
	default:   /* TEXT, BINARY */
		if (c->msg_op)
			return td_fail(c, 1002, "new message inside a fragmented one");
		c->msg_op = f.opcode;
		c->msg_len = 0;
		break;
	}
	td_msg_append(c, pl, len);
	if (!f.fin)
		return 0;
	*op = c->msg_op;
	c->msg_op = 0;
	return 1;
}

int td_recv(td_client *c, char **data, size_t *len, int *binary, int timeout_ms)
{
	*data = NULL;
	*len = 0;
	int64_t deadline = td_deadline(timeout_ms);
	for (;;) {
		int op = 0, progress;
		if (c->closed) {
			if (!c->err[0])
				snprintf(c->err, sizeof c->err, "connection closed");
			return -1;
		}
		for (;;) {
			int r = td_step(c, &op, &progress);
			if (r < 0)
				return -1;
			if (r == 1) {
				c->msg[c->msg_len] = '\0';   /* td_msg_append keeps room */
				*data = (char *)c->msg;
				*len = c->msg_len;
				if (binary)
					*binary = op == TD_WS_BINARY;
				c->msg = NULL;
				c->msg_len = c->msg_cap = 0;
				return 1;
			}
			if (!progress)
				break;
		}
		int r = td_fill(c, td_left(deadline));
		if (r < 0) {
			c->closed = 1;
			return -1;
		}
		if (r == 0 && timeout_ms >= 0 && td_left(deadline) == 0)
			return 0;
	}
}

int td_pending(const td_client *c)
{
	if (c->closed)
		return 2;
	if (td_tls_pending(c))
		return 2;   /* decrypted bytes in OpenSSL: the socket will not show them */
	size_t avail = c->rb_len - c->rb_off;
	int in_msg = c->msg_op != 0;
	if (!avail)
		return in_msg;
	const uint8_t *b = c->rb + c->rb_off;
	while (avail) {
		td_ws_frame f;
		int r = td_ws_parse_header(b, avail, &f);
		if (r < 0)
			return 2;   /* td_recv will report the error at once */
		if (r == 0 || avail - f.hdr_len < f.len)
			return 1;
		if (f.opcode == TD_WS_CLOSE)
			return 2;
		if (!(f.opcode & 0x8)) {
			if (f.fin)
				return 2;
			in_msg = 1;
		}
		b += f.hdr_len + f.len;
		avail -= f.hdr_len + f.len;
	}
	return in_msg ? 1 : 0;
}

/* ---- the rest of the API ---- */

int td_send(td_client *c, int binary, const void *data, size_t len)
{
	if (c->closed || c->sent_close) {
		if (!c->err[0])
			snprintf(c->err, sizeof c->err, "connection closed");
		return -1;
	}
	return td_send_frame(c, binary ? TD_WS_BINARY : TD_WS_TEXT, data, len);
}

int td_fd(const td_client *c)
{
	return c->fd;
}

const char *td_error(const td_client *c)
{
	return c->err;
}

int td_close_code(const td_client *c)
{
	return c->close_code;
}

const char *td_subprotocol(const td_client *c)
{
	return c->subproto;
}

void td_close(td_client *c)
{
	if (!c)
		return;
	if (c->fd >= 0) {
		if (!c->closed && !c->sent_close) {
			uint8_t pl[2] = { 1000 >> 8, 1000 & 0xff };
			c->sent_close = 1;
			if (td_send_frame(c, TD_WS_CLOSE, pl, 2) == 0) {
				/* Give the server a moment to answer; drop anything else. */
				int64_t deadline = td_deadline(TD_CLOSE_WAIT_MS);
				while (!c->closed) {
					int op, progress;
					while (td_step(c, &op, &progress) >= 0 && progress)
						c->msg_len = 0;
					if (c->closed || td_fill(c, td_left(deadline)) <= 0)
						break;
				}
			}
		}
		td_tls_end(c);
		close(c->fd);
	}
	free(c->rb);
	free(c->msg);
	cJSON_Delete(c->hello);
	free(c);
}
