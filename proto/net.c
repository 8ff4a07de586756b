/* net.c — the client library's socket layer: TCP (every address of the
 * name in turn) and unix-socket connect with a time limit, TLS for wss://
 * (OpenSSL, certificate and host name verified, its own BIO so writes never
 * raise SIGPIPE), td_write_all and td_read_some as the only two places that
 * touch the connection, plus the deadlines and randomness the layers above
 * use. Knows nothing of WebSocket frames. */
#include "client-int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

/* ---- deadlines and randomness ---- */

static int64_t td_now_ms(void)
{
	return (int64_t)(mono_us() / 1000u);
}

int td_left(int64_t deadline)
{
	if (deadline < 0)
		return -1;
	int64_t d = deadline - td_now_ms();
	if (d < 0)
		return 0;
	return d > 0x7fffffff ? 0x7fffffff : (int)d;
}

int64_t td_deadline(int timeout_ms)
{
	return timeout_ms < 0 ? -1 : td_now_ms() + timeout_ms;
}

void td_random(void *buf, size_t n)
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

/* ---- TLS ---- */

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

/* The first bytes back were not a TLS record: a plain (ws://, http://)
 * listener answered the ClientHello, e.g. with "HTTP/1.1 400". */
static int td_tls_plain_answer(unsigned long code)
{
	if (ERR_GET_LIB(code) != ERR_LIB_SSL)
		return 0;
	int r = ERR_GET_REASON(code);
	return r == SSL_R_WRONG_VERSION_NUMBER || r == SSL_R_PACKET_LENGTH_TOO_LONG ||
	       r == SSL_R_UNKNOWN_PROTOCOL;
}

/* A certificate that failed verification, with what to do about it: one
 * nobody vouches for (self-signed, or from a CA this client was not given)
 * is trusted with --cacert; one for another name is reached by its name. */
static void td_tls_verify_err(long v, const td_url *u, char *err, size_t errlen)
{
	const char *what = X509_verify_cert_error_string(v);
	switch (v) {
	case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
	case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
	case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
	case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
	case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
		td_seterr(err, errlen, "TLS: certificate verify failed: %s: give termd's "
			  "certificate (or its CA) with --cacert FILE (env TERMD_CACERT)", what);
		break;
	case X509_V_ERR_HOSTNAME_MISMATCH:
	case X509_V_ERR_IP_ADDRESS_MISMATCH:
		td_seterr(err, errlen, "TLS: certificate verify failed: %s: the certificate "
			  "is not for %s; use a name or address it is for", what, u->host);
		break;
	default:
		td_seterr(err, errlen, "TLS: certificate verify failed: %s", what);
	}
}

/* TLS set up on c->fd and its handshake: certificate verification (see
 * td_tls_set_cafile in client.h), SNI for host names, the host name or IP
 * address checked against the certificate. */
int td_tls_start(td_client *c, const td_url *u, char *err, size_t errlen)
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
		unsigned long code = ERR_peek_last_error();
		char why[200];
		td_tls_why(c, e, saved, why, sizeof why);
		if (v != X509_V_OK)
			td_tls_verify_err(v, u, err, errlen);
		else if (td_tls_plain_answer(code))
			td_seterr(err, errlen, "TLS handshake failed: %s:%d answered without TLS "
				  "(a plain listener): use ws://%s:%d, or start termd with "
				  "--tls-cert and --tls-key", u->host, u->port, u->host, u->port);
		else
			td_seterr(err, errlen, "TLS handshake failed: %s", why);
		return -1;
	}
}

int td_tls_pending(const td_client *c)
{
	return c->ssl && SSL_pending(c->ssl) > 0;
}

void td_tls_end(td_client *c)
{
	/* one close_notify, not waited for (the socket is non-blocking) */
	if (c->ssl && !c->tls_broken && SSL_is_init_finished(c->ssl)) {
		ERR_clear_error();
		SSL_shutdown(c->ssl);
	}
	SSL_free(c->ssl);   /* frees the BIO too */
	SSL_CTX_free(c->tls_ctx);
	c->ssl = NULL;
	c->tls_ctx = NULL;
	ERR_clear_error();
}

/* ---- socket I/O: td_write_all and td_read_some are the only two places
 * that write to or read from the connection ---- */

/* Writes all of buf. */
int td_write_all(td_client *c, const void *buf, size_t n)
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
ssize_t td_read_some(td_client *c, uint8_t *buf, size_t n, int ms)
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

/* ---- connecting ---- */

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

int td_net_open(const td_url *u, char *err, size_t errlen)
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
