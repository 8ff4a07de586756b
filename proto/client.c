/* client.c — termd's blocking WebSocket client: URL parsing, TCP/unix
 * connect, TLS for wss:// (OpenSSL: certificate and host verification, one
 * pair of read/write functions for plain and TLS sockets), the RFC 6455
 * client handshake (SHA-1 and base64 from OpenSSL), masked framing with its own read
 * buffer, fragment reassembly, ping/pong and close handling, and td_call for
 * the events channel. */
#include "client.h"
#include "proto.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define TD_CONNECT_TIMEOUT_MS   10000
#define TD_HANDSHAKE_TIMEOUT_MS 10000
#define TD_CLOSE_WAIT_MS        250
#define TD_MAX_HEADERS          16384
#define TD_MAX_MESSAGE          ((uint64_t)1 << 30)  /* 1 GiB: refuse anything larger */
#define TD_READ_CHUNK           65536
#define TD_WS_GUID              "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

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

	char id_prefix[32];
	char id_rand[9];
	unsigned long id_counter;
	cJSON *hello;
};

/* ---- small helpers ---- */

static void *td_xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p) {
		fputs("termd client: out of memory\n", stderr);
		abort();
	}
	return p;
}

static void td_seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void td_seterr(char *err, size_t errlen, const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* strerror with a lower-case first letter: "connection refused". */
static void td_errno_str(int e, char *out, size_t n)
{
	snprintf(out, n, "%s", strerror(e));
	if (out[0] && isupper((unsigned char)out[0]) && !(out[1] && isupper((unsigned char)out[1])))
		out[0] = (char)tolower((unsigned char)out[0]);
}

static int64_t td_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds left until deadline (deadline < 0: forever → -1). */
static int td_left(int64_t deadline)
{
	if (deadline < 0)
		return -1;
	int64_t d = deadline - td_now_ms();
	if (d < 0)
		return 0;
	return d > 0x7fffffff ? 0x7fffffff : (int)d;
}

static int64_t td_deadline(int timeout_ms)
{
	return timeout_ms < 0 ? -1 : td_now_ms() + timeout_ms;
}

static void td_random(void *buf, size_t n)
{
	uint8_t *p = buf;
	while (n) {
		ssize_t r = getrandom(p, n, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		p += r;
		n -= (size_t)r;
	}
	if (n) {   /* no getrandom: good enough for nonces and mask keys */
		static unsigned long s;
		s ^= (unsigned long)td_now_ms() ^ ((unsigned long)getpid() << 16);
		for (size_t i = 0; i < n; i++) {
			s = s * 6364136223846793005UL + 1442695040888963407UL;
			p[i] = (uint8_t)(s >> 33);
		}
	}
}

/* ---- SHA-1 and base64 (OpenSSL) ---- */

void td_sha1(const void *data, size_t len, uint8_t out[20])
{
	SHA1(data, len, out);
}

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
	uint8_t dig[20];
	td_sha1(buf, (size_t)n, dig);
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

/* ---- URLs and defaults ---- */

int td_url_parse(const char *url, td_url *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	if (!url || !*url) {
		td_seterr(err, errlen, "empty URL");
		return -1;
	}
	const char *p = url;
	if (!strncmp(p, "unix:", 5) || p[0] == '/') {
		if (p[0] != '/')
			p += 5;
		if (!strncmp(p, "//", 2) && p[2] == '/')
			p += 2;   /* unix:///path */
		if (!*p) {
			td_seterr(err, errlen, "%s: missing socket path", url);
			return -1;
		}
		if (strlen(p) >= sizeof out->sock) {
			td_seterr(err, errlen, "%s: socket path too long", url);
			return -1;
		}
		out->is_unix = 1;
		strcpy(out->sock, p);
		return 0;
	}
	if (!strncasecmp(p, "wss://", 6)) {
		p += 6;
		out->tls = 1;
	} else if (!strncasecmp(p, "https://", 8)) {
		p += 8;
		out->tls = 1;
	} else if (!strncasecmp(p, "ws://", 5))
		p += 5;
	else if (!strncasecmp(p, "http://", 7))
		p += 7;
	else if (strstr(p, "://")) {
		td_seterr(err, errlen,
			  "%s: unsupported scheme (use ws://HOST:PORT, wss://HOST:PORT or unix:/PATH)", url);
		return -1;
	}

	size_t alen = strcspn(p, "/?#");
	const char *rest = p + alen;
	if (memchr(p, '@', alen)) {
		td_seterr(err, errlen, "%s: user info in URL is not supported", url);
		return -1;
	}
	const char *host = p, *hend, *port = NULL;
	if (*p == '[') {
		host = p + 1;
		hend = memchr(host, ']', alen - 1);
		if (!hend) {
			td_seterr(err, errlen, "%s: unterminated '[' in host", url);
			return -1;
		}
		if (hend + 1 < p + alen) {
			if (hend[1] != ':') {
				td_seterr(err, errlen, "%s: bad host", url);
				return -1;
			}
			port = hend + 2;
		}
	} else {
		hend = memchr(p, ':', alen);
		if (hend)
			port = hend + 1;
		else
			hend = p + alen;
	}
	size_t hlen = (size_t)(hend - host);
	if (hlen == 0) {
		td_seterr(err, errlen, "%s: missing host", url);
		return -1;
	}
	if (hlen >= sizeof out->host) {
		td_seterr(err, errlen, "%s: host name too long", url);
		return -1;
	}
	memcpy(out->host, host, hlen);
	out->host[hlen] = '\0';
	out->port = out->tls ? 443 : TD_DEFAULT_PORT;
	if (port) {
		size_t plen = (size_t)(p + alen - port);
		long v = 0;
		if (plen == 0 || plen > 5) {
			td_seterr(err, errlen, "%s: bad port", url);
			return -1;
		}
		for (size_t i = 0; i < plen; i++) {
			if (!isdigit((unsigned char)port[i])) {
				td_seterr(err, errlen, "%s: bad port", url);
				return -1;
			}
			v = v * 10 + (port[i] - '0');
		}
		if (v < 1 || v > 65535) {
			td_seterr(err, errlen, "%s: port out of range", url);
			return -1;
		}
		out->port = (int)v;
	}
	if (*rest == '?' || *rest == '#') {
		td_seterr(err, errlen, "%s: a base URL takes no query or fragment", url);
		return -1;
	}
	size_t rlen = strcspn(rest, "?#");
	if (rest[rlen]) {
		td_seterr(err, errlen, "%s: a base URL takes no query or fragment", url);
		return -1;
	}
	while (rlen && rest[rlen - 1] == '/')
		rlen--;
	if (rlen >= sizeof out->prefix) {
		td_seterr(err, errlen, "%s: path too long", url);
		return -1;
	}
	memcpy(out->prefix, rest, rlen);
	out->prefix[rlen] = '\0';
	return 0;
}

const char *td_default_url(void)
{
	const char *u = getenv("TERMD_URL");
	return u && *u ? u : TD_DEFAULT_URL;
}

const char *td_default_token(void)
{
	const char *t = getenv("TERMD_TOKEN");
	return t && *t ? t : NULL;
}

char *td_read_token_file(const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		char e[128];
		td_errno_str(errno, e, sizeof e);
		td_seterr(err, errlen, "%s: %s", path, e);
		return NULL;
	}
	char line[4096];
	char *s = fgets(line, sizeof line, f);
	fclose(f);
	if (s) {
		while (*s && isspace((unsigned char)*s))
			s++;
		size_t n = strlen(s);
		while (n && isspace((unsigned char)s[n - 1]))
			s[--n] = '\0';
	}
	if (!s || !*s) {
		td_seterr(err, errlen, "%s: empty token file", path);
		return NULL;
	}
	return strdup(s);
}

/* ---- socket I/O ---- */

/* ---- TLS pieces ---- */

static char td_cafile_opt[4096];   /* td_tls_set_cafile */

void td_tls_set_cafile(const char *path)
{
	snprintf(td_cafile_opt, sizeof td_cafile_opt, "%s", path ? path : "");
}

/* OpenSSL reaches the socket through this BIO rather than its own socket BIO
 * so that it writes with send(MSG_NOSIGNAL) as the plain path does: a server
 * that went away gives EPIPE, never SIGPIPE. The BIO's data is the client. */
static int td_bio_write(BIO *b, const char *buf, int n)
{
	td_client *c = BIO_get_data(b);
	BIO_clear_retry_flags(b);
	ssize_t w = send(c->fd, buf, (size_t)n, MSG_NOSIGNAL);
	if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		BIO_set_retry_write(b);
	return (int)w;
}

static int td_bio_read(BIO *b, char *buf, int n)
{
	td_client *c = BIO_get_data(b);
	BIO_clear_retry_flags(b);
	ssize_t r = recv(c->fd, buf, (size_t)n, 0);
	if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		BIO_set_retry_read(b);
	if (r == 0)
		c->tls_eof = 1;
	return (int)r;
}

static long td_bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	(void)num;
	(void)ptr;
	td_client *c = BIO_get_data(b);
	switch (cmd) {
	case BIO_CTRL_FLUSH:
		return 1;
	case BIO_CTRL_EOF:
		return c && c->tls_eof;
	default:
		return 0;
	}
}

static int td_bio_create(BIO *b)
{
	BIO_set_init(b, 1);
	return 1;
}

static BIO_METHOD *td_bio_method(void)
{
	static BIO_METHOD *m;
	if (!m) {
		m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "termd client socket");
		if (!m)
			return NULL;
		BIO_meth_set_write(m, td_bio_write);
		BIO_meth_set_read(m, td_bio_read);
		BIO_meth_set_ctrl(m, td_bio_ctrl);
		BIO_meth_set_create(m, td_bio_create);
	}
	return m;
}

enum { TD_TLS_ERR, TD_TLS_EOF, TD_TLS_SYS };

/* Why an SSL_* call failed (SSL_get_error gave e; errno was saved_errno),
 * as text in out: TD_TLS_EOF when the server closed the connection,
 * TD_TLS_SYS for a socket error, TD_TLS_ERR for a TLS error. Marks the
 * connection broken so that no close_notify is sent on it afterwards. */
static int td_tls_why(td_client *c, int e, int saved_errno, char *out, size_t n)
{
	unsigned long code = ERR_peek_last_error();
	int kind = TD_TLS_ERR;
	if (e == SSL_ERROR_ZERO_RETURN) {   /* close_notify: a clean end */
		snprintf(out, n, "connection closed by server");
		return TD_TLS_EOF;
	}
	c->tls_broken = 1;
	if (e == SSL_ERROR_SYSCALL && !code) {
		if (saved_errno && !c->tls_eof) {
			td_errno_str(saved_errno, out, n);
			kind = TD_TLS_SYS;
		} else {
			snprintf(out, n, "connection closed by server");
			kind = TD_TLS_EOF;
		}
#ifdef SSL_R_UNEXPECTED_EOF_WHILE_READING
	} else if (ERR_GET_LIB(code) == ERR_LIB_SSL &&
		   ERR_GET_REASON(code) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
		snprintf(out, n, "connection closed by server");
		kind = TD_TLS_EOF;
#endif
	} else {
		const char *r = code ? ERR_reason_error_string(code) : NULL;
		snprintf(out, n, "%s", r ? r : "unknown TLS error");
	}
	ERR_clear_error();
	return kind;
}

/* Waits up to ms (< 0: forever) for fd to be ready for `events`: poll's
 * answer (EINTR retried with the time left). */
static int td_wait_fd(int fd, short events, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = events };
	int64_t deadline = td_deadline(ms);
	int r;
	do
		r = poll(&pfd, 1, ms < 0 ? -1 : td_left(deadline));
	while (r < 0 && errno == EINTR);
	return r;
}

/* Sets TLS up on c->fd and runs its handshake: certificate verification
 * (see td_tls_set_cafile in client.h), SNI for host names, the host name or
 * IP address checked against the certificate. 0 ok, -1 with err set. */
static int td_tls_start(td_client *c, const td_url *u, char *err, size_t errlen)
{
	const char *ins = getenv("TERMD_TLS_INSECURE");
	int insecure = ins && *ins && strcmp(ins, "0") != 0;
	const char *cafile = td_cafile_opt[0] ? td_cafile_opt : getenv("TERMD_CACERT");
	if (cafile && !*cafile)
		cafile = NULL;

	ERR_clear_error();
	c->tls_ctx = SSL_CTX_new(TLS_client_method());
	if (!c->tls_ctx) {
		td_seterr(err, errlen, "TLS: cannot create a context");
		return -1;
	}
	SSL_CTX_set_min_proto_version(c->tls_ctx, TLS1_2_VERSION);
	SSL_CTX_set_mode(c->tls_ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
				     SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	if (insecure) {
		SSL_CTX_set_verify(c->tls_ctx, SSL_VERIFY_NONE, NULL);
	} else {
		if (cafile) {
			if (SSL_CTX_load_verify_locations(c->tls_ctx, cafile, NULL) != 1) {
				char why[160];
				if (access(cafile, R_OK) < 0)
					td_errno_str(errno, why, sizeof why);
				else
					snprintf(why, sizeof why, "no PEM certificate in it");
				td_seterr(err, errlen, "TLS: cannot load CA file %s: %s", cafile, why);
				ERR_clear_error();
				return -1;
			}
		} else if (SSL_CTX_set_default_verify_paths(c->tls_ctx) != 1) {
			td_seterr(err, errlen, "TLS: cannot load the system's CA certificates");
			ERR_clear_error();
			return -1;
		}
		SSL_CTX_set_verify(c->tls_ctx, SSL_VERIFY_PEER, NULL);
	}

	BIO_METHOD *m = td_bio_method();
	BIO *b = m ? BIO_new(m) : NULL;
	c->ssl = SSL_new(c->tls_ctx);
	if (!b || !c->ssl) {
		BIO_free(b);
		td_seterr(err, errlen, "TLS: out of memory");
		return -1;
	}
	BIO_set_data(b, c);
	SSL_set_bio(c->ssl, b, b);
	uint8_t addr[16];
	int is_ip = inet_pton(AF_INET, u->host, addr) == 1 || inet_pton(AF_INET6, u->host, addr) == 1;
	if (!is_ip && SSL_set_tlsext_host_name(c->ssl, u->host) != 1) {
		td_seterr(err, errlen, "TLS: bad server name %s", u->host);
		return -1;
	}
	if (!insecure) {
		X509_VERIFY_PARAM *vp = SSL_get0_param(c->ssl);
		X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
		if ((is_ip ? X509_VERIFY_PARAM_set1_ip_asc(vp, u->host)
			   : X509_VERIFY_PARAM_set1_host(vp, u->host, 0)) != 1) {
			td_seterr(err, errlen, "TLS: cannot check the certificate against %s", u->host);
			return -1;
		}
	}

	/* Non-blocking from here on: SSL_read must never sit in recv for the
	 * rest of a record, or for data after a record that carried none. */
	fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
	int64_t deadline = td_deadline(TD_HANDSHAKE_TIMEOUT_MS);
	for (;;) {
		ERR_clear_error();
		errno = 0;
		int k = SSL_connect(c->ssl);
		if (k == 1)
			return 0;
		int saved = errno;
		int e = SSL_get_error(c->ssl, k);
		if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
			int r = td_wait_fd(c->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT,
					   td_left(deadline));
			if (r == 0) {
				td_seterr(err, errlen, "TLS: no handshake answer within %d s",
					  TD_HANDSHAKE_TIMEOUT_MS / 1000);
				return -1;
			}
			if (r < 0) {
				char e2[128];
				td_errno_str(errno, e2, sizeof e2);
				td_seterr(err, errlen, "poll failed: %s", e2);
				return -1;
			}
			continue;
		}
		long v = SSL_get_verify_result(c->ssl);
		char why[200];
		td_tls_why(c, e, saved, why, sizeof why);
		if (v != X509_V_OK)
			td_seterr(err, errlen, "TLS: certificate verify failed: %s",
				  X509_verify_cert_error_string(v));
		else
			td_seterr(err, errlen, "TLS handshake failed: %s", why);
		return -1;
	}
}

/* ---- socket I/O: td_write_all and td_read_some are the only two places
 * that write to or read from the connection ---- */

/* Writes all of buf; -1 with c->err set on failure. */
static int td_write_all(td_client *c, const void *buf, size_t n)
{
	const uint8_t *p = buf;
	while (n) {
		if (c->ssl) {
			ERR_clear_error();
			errno = 0;
			int k = SSL_write(c->ssl, p, n > INT_MAX ? INT_MAX : (int)n);
			if (k > 0) {
				p += k;
				n -= (size_t)k;
				continue;
			}
			int saved = errno;
			int e = SSL_get_error(c->ssl, k);
			if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
				/* retried with the same bytes, as OpenSSL wants */
				td_wait_fd(c->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, 1000);
				continue;
			}
			char why[200];
			td_tls_why(c, e, saved, why, sizeof why);
			snprintf(c->err, sizeof c->err, "send failed: %s", why);
			c->closed = 1;
			return -1;
		}
		ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				struct pollfd pfd = { .fd = c->fd, .events = POLLOUT };
				poll(&pfd, 1, 1000);
				continue;
			}
			char e[128];
			td_errno_str(errno, e, sizeof e);
			snprintf(c->err, sizeof c->err, "send failed: %s", e);
			c->closed = 1;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Waits up to `ms` (< 0: forever) for bytes and reads what is there, at
 * most n, into buf: > 0 bytes read, 0 nothing came, -1 EOF/error (c->err
 * set). Over TLS, bytes OpenSSL already holds decrypted are taken without
 * waiting (the socket does not show them), and a socket that was readable
 * without a whole record behind it keeps waiting while time is left. */
static ssize_t td_read_some(td_client *c, uint8_t *buf, size_t n, int ms)
{
	int64_t deadline = td_deadline(ms);
	short events = POLLIN;
	int skip_poll = c->ssl && SSL_pending(c->ssl) > 0;
	for (;;) {
		int r = 1;
		if (!skip_poll) {
			struct pollfd pfd = { .fd = c->fd, .events = events };
			for (;;) {
				r = poll(&pfd, 1, ms < 0 ? -1 : td_left(deadline));
				if (r >= 0 || errno != EINTR)
					break;
			}
		}
		skip_poll = 0;
		if (r < 0) {
			char e[128];
			td_errno_str(errno, e, sizeof e);
			snprintf(c->err, sizeof c->err, "poll failed: %s", e);
			return -1;
		}
		if (r == 0)
			return 0;

		if (c->ssl) {
			ERR_clear_error();
			errno = 0;
			int k = SSL_read(c->ssl, buf, n > INT_MAX ? INT_MAX : (int)n);
			if (k > 0)
				return k;
			int saved = errno;
			int e = SSL_get_error(c->ssl, k);
			if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
				if (ms >= 0 && td_left(deadline) == 0)
					return 0;
				events = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
				continue;
			}
			char why[200];
			if (td_tls_why(c, e, saved, why, sizeof why) == TD_TLS_EOF)
				snprintf(c->err, sizeof c->err, "%s", why);
			else
				snprintf(c->err, sizeof c->err, "receive failed: %s", why);
			return -1;
		}

		ssize_t k;
		do
			k = recv(c->fd, buf, n, 0);
		while (k < 0 && errno == EINTR);
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (k < 0) {
			char e[128];
			td_errno_str(errno, e, sizeof e);
			snprintf(c->err, sizeof c->err, "receive failed: %s", e);
			return -1;
		}
		if (k == 0) {
			snprintf(c->err, sizeof c->err, "connection closed by server");
			return -1;
		}
		return k;
	}
}

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
		c->rb = td_xrealloc(c->rb, cap);
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
	uint8_t *buf = h + chunk <= sizeof stackbuf ? stackbuf : td_xrealloc(NULL, h + chunk);
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

static int td_connect_fd(int fd, const struct sockaddr *sa, socklen_t salen, int timeout_ms)
{
	int fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	int r = connect(fd, sa, salen);
	if (r < 0 && errno == EINPROGRESS) {
		struct pollfd pfd = { .fd = fd, .events = POLLOUT };
		int64_t deadline = td_deadline(timeout_ms);
		do
			r = poll(&pfd, 1, td_left(deadline));
		while (r < 0 && errno == EINTR);
		if (r == 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		if (r < 0)
			return -1;
		int soerr = 0;
		socklen_t sl = sizeof soerr;
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
		if (soerr) {
			errno = soerr;
			return -1;
		}
		r = 0;
	}
	if (r < 0)
		return -1;
	fcntl(fd, F_SETFL, fl);
	return 0;
}

static int td_open_socket(const td_url *u, char *err, size_t errlen)
{
	char e[128];
	if (u->is_unix) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		strcpy(sa.sun_path, u->sock);
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || td_connect_fd(fd, (struct sockaddr *)&sa, sizeof sa,
					    TD_CONNECT_TIMEOUT_MS) < 0) {
			td_errno_str(errno, e, sizeof e);
			td_seterr(err, errlen, "%s", e);
			if (fd >= 0)
				close(fd);
			return -1;
		}
		return fd;
	}

	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res = NULL;
	char port[16];
	snprintf(port, sizeof port, "%d", u->port);
	int g = getaddrinfo(u->host, port, &hints, &res);
	if (g) {
		td_seterr(err, errlen, "cannot resolve %s: %s", u->host,
			  g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
		return -1;
	}
	int fd = -1, last = ECONNREFUSED;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			last = errno;
			continue;
		}
		if (td_connect_fd(fd, ai->ai_addr, ai->ai_addrlen, TD_CONNECT_TIMEOUT_MS) == 0)
			break;
		last = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		td_errno_str(last, e, sizeof e);
		td_seterr(err, errlen, "%s", e);
		return -1;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fd;
}

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
		if (reason[0])
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
	int fd = td_open_socket(&u, err, errlen);
	if (fd < 0)
		return NULL;

	td_client *c = td_xrealloc(NULL, sizeof *c);
	memset(c, 0, sizeof *c);
	c->fd = fd;
	strcpy(c->id_prefix, "td");
	uint8_t rnd[16];
	td_random(rnd, 4);
	snprintf(c->id_rand, sizeof c->id_rand, "%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3]);
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
	char *req = td_xrealloc(NULL, reqcap);
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
		c->msg = td_xrealloc(c->msg, cap);
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
	if (c->ssl && SSL_pending(c->ssl) > 0)
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
		/* TLS: one close_notify, not waited for (the socket is non-blocking) */
		if (c->ssl && !c->tls_broken && SSL_is_init_finished(c->ssl)) {
			ERR_clear_error();
			SSL_shutdown(c->ssl);
		}
		close(c->fd);
	}
	SSL_free(c->ssl);   /* frees the BIO too */
	SSL_CTX_free(c->tls_ctx);
	ERR_clear_error();
	free(c->rb);
	free(c->msg);
	cJSON_Delete(c->hello);
	free(c);
}

/* ---- events channel ---- */

cJSON *td_action_new(const char *name, cJSON **args)
{
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "action", name);
	cJSON *ar = cJSON_AddObjectToObject(a, "args");
	if (args)
		*args = ar;
	return a;
}

void td_set_id_prefix(td_client *c, const char *prefix)
{
	snprintf(c->id_prefix, sizeof c->id_prefix, "%s", prefix && *prefix ? prefix : "td");
}

const cJSON *td_hello(const td_client *c)
{
	return c->hello;
}

static void td_note_hello(td_client *c, const cJSON *obs)
{
	const cJSON *o = cJSON_GetObjectItemCaseSensitive(obs, "observation");
	if (cJSON_IsString(o) && !strcmp(o->valuestring, "hello")) {
		cJSON_Delete(c->hello);
		c->hello = cJSON_Duplicate(obs, 1);
	}
}

int td_recv_json(td_client *c, cJSON **out, int timeout_ms, char *err, size_t errlen)
{
	*out = NULL;
	int64_t deadline = td_deadline(timeout_ms);
	for (;;) {
		char *data;
		size_t len;
		int bin;
		int r = td_recv(c, &data, &len, &bin, td_left(deadline));
		if (r < 0) {
			td_seterr(err, errlen, "%s", c->err);
			return -1;
		}
		if (r == 0) {
			td_seterr(err, errlen, "timed out");
			return 0;
		}
		if (bin) {
			free(data);
			continue;
		}
		cJSON *j = cJSON_ParseWithLength(data, len);
		free(data);
		if (!j) {
			td_seterr(err, errlen, "server sent a message that is not JSON");
			return -1;
		}
		td_note_hello(c, j);
		*out = j;
		return 1;
	}
}

cJSON *td_call(td_client *c, cJSON *action, int timeout_ms, char *err, size_t errlen)
{
	if (!cJSON_IsObject(action)) {
		td_seterr(err, errlen, "action must be a JSON object");
		return NULL;
	}
	cJSON *id = cJSON_GetObjectItemCaseSensitive(action, "id");
	if (!id) {
		char buf[96];
		snprintf(buf, sizeof buf, "%s-%ld-%s-%lu", c->id_prefix, (long)getpid(), c->id_rand,
			 ++c->id_counter);
		id = cJSON_AddStringToObject(action, "id", buf);
	} else if (!cJSON_IsString(id) && !cJSON_IsNumber(id)) {
		td_seterr(err, errlen, "action id must be a string or an integer");
		return NULL;
	}
	char *txt = cJSON_PrintUnformatted(action);
	if (!txt) {
		td_seterr(err, errlen, "cannot encode action");
		return NULL;
	}
	int r = td_send(c, 0, txt, strlen(txt));
	free(txt);
	if (r < 0) {
		td_seterr(err, errlen, "%s", c->err);
		return NULL;
	}
	int64_t deadline = td_deadline(timeout_ms);
	for (;;) {
		cJSON *obs;
		r = td_recv_json(c, &obs, td_left(deadline), err, errlen);
		if (r == 0) {
			td_seterr(err, errlen, "no answer within %.3g s", timeout_ms / 1000.0);
			return NULL;
		}
		if (r < 0) {
			if (!c->closed)
				continue;   /* a message that is not JSON: not ours, skip it */
			return NULL;
		}
		const cJSON *cause = cJSON_GetObjectItemCaseSensitive(obs, "cause");
		if (cause && cJSON_Compare(cause, id, 1))
			return obs;
		cJSON_Delete(obs);
	}
}
