/* test_client.c — unit tests of the client library (proto/url.c, net.c,
 * ws.c, call.c; the frame pieces through client-int.h): URL parsing, the
 * token file, base64, the Sec-WebSocket-Accept key, frame headers and
 * masking, and a whole connection against a small server forked on a
 * private unix socket (handshake, fragments with pings between them,
 * td_call, close). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client-int.h"
#include "proto.h"

/* ---- URLs ---- */

static void test_url_ok(void **state)
{
	(void)state;
	td_url u;
	char err[256];
	assert_int_equal(td_url_parse("ws://127.0.0.1:9000", &u, err, sizeof err), 0);
	assert_false(u.is_unix);
	assert_string_equal(u.host, "127.0.0.1");
	assert_int_equal(u.port, 9000);
	assert_string_equal(u.prefix, "");

	assert_int_equal(td_url_parse("ws://localhost", &u, err, sizeof err), 0);
	assert_string_equal(u.host, "localhost");
	assert_int_equal(u.port, TD_DEFAULT_PORT);

	assert_int_equal(td_url_parse("ws://example.org:80/termd/", &u, err, sizeof err), 0);
	assert_string_equal(u.host, "example.org");
	assert_int_equal(u.port, 80);
	assert_string_equal(u.prefix, "/termd");

	assert_int_equal(td_url_parse("ws://h:1/", &u, err, sizeof err), 0);
	assert_string_equal(u.prefix, "");

	assert_int_equal(td_url_parse("ws://[::1]:8421", &u, err, sizeof err), 0);
	assert_string_equal(u.host, "::1");
	assert_int_equal(u.port, 8421);

	assert_int_equal(td_url_parse("[::1]", &u, err, sizeof err), 0);
	assert_string_equal(u.host, "::1");
	assert_int_equal(u.port, TD_DEFAULT_PORT);

	assert_int_equal(td_url_parse("http://h:2", &u, err, sizeof err), 0);
	assert_int_equal(u.port, 2);

	assert_int_equal(td_url_parse("localhost:8500", &u, err, sizeof err), 0);
	assert_string_equal(u.host, "localhost");
	assert_int_equal(u.port, 8500);

	assert_int_equal(td_url_parse("unix:/tmp/x/termd.sock", &u, err, sizeof err), 0);
	assert_true(u.is_unix);
	assert_string_equal(u.sock, "/tmp/x/termd.sock");

	assert_int_equal(td_url_parse("unix:///run/t.sock", &u, err, sizeof err), 0);
	assert_string_equal(u.sock, "/run/t.sock");

	assert_int_equal(td_url_parse("/run/t.sock", &u, err, sizeof err), 0);
	assert_true(u.is_unix);
	assert_string_equal(u.sock, "/run/t.sock");
}

static void test_url_bad(void **state)
{
	(void)state;
	static const char *bad[] = {
		"", "ws://", "ws://:80", "ws://h:", "ws://h:0", "ws://h:65536", "ws://h:12a",
		"ws://h:123456", "wss://", "wss://h:0", "wss://h:1?x", "https://", "ftp://h", "ws://u@h:1", "ws://[::1",
		"ws://[::1]x", "ws://h:1/?token=x", "ws://h:1?x", "unix:",
	};
	td_url u;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char err[256] = "";
		if (td_url_parse(bad[i], &u, err, sizeof err) != -1)
			fail_msg("accepted bad URL '%s'", bad[i]);
		assert_true(err[0] != '\0');
	}
	char err[256];
	char longsock[200];
	memset(longsock, 'a', sizeof longsock);
	memcpy(longsock, "unix:/", 6);
	longsock[sizeof longsock - 1] = '\0';
	assert_int_equal(td_url_parse(longsock, &u, err, sizeof err), -1);
	assert_non_null(strstr(err, "too long"));
}

static void test_url_wss(void **state)
{
	(void)state;
	td_url u;
	char err[256];
	assert_int_equal(td_url_parse("wss://termd.example.org", &u, err, sizeof err), 0);
	assert_true(u.tls);
	assert_false(u.is_unix);
	assert_string_equal(u.host, "termd.example.org");
	assert_int_equal(u.port, 443);
	assert_string_equal(u.prefix, "");

	assert_int_equal(td_url_parse("wss://127.0.0.1:8443/termd/", &u, err, sizeof err), 0);
	assert_true(u.tls);
	assert_string_equal(u.host, "127.0.0.1");
	assert_int_equal(u.port, 8443);
	assert_string_equal(u.prefix, "/termd");

	assert_int_equal(td_url_parse("WSS://[::1]", &u, err, sizeof err), 0);
	assert_true(u.tls);
	assert_string_equal(u.host, "::1");
	assert_int_equal(u.port, 443);

	assert_int_equal(td_url_parse("https://h:9/a/b", &u, err, sizeof err), 0);
	assert_true(u.tls);
	assert_int_equal(u.port, 9);
	assert_string_equal(u.prefix, "/a/b");

	/* the others are not TLS */
	assert_int_equal(td_url_parse("ws://h:1", &u, err, sizeof err), 0);
	assert_false(u.tls);
	assert_int_equal(td_url_parse("h", &u, err, sizeof err), 0);
	assert_false(u.tls);
	assert_int_equal(u.port, TD_DEFAULT_PORT);
	assert_int_equal(td_url_parse("unix:/x.sock", &u, err, sizeof err), 0);
	assert_false(u.tls);
}

static void test_defaults(void **state)
{
	(void)state;
	unsetenv("TERMD_URL");
	unsetenv("TERMD_TOKEN");
	assert_string_equal(td_default_url(), TD_DEFAULT_URL);
	assert_null(td_default_token());
	setenv("TERMD_URL", "", 1);
	setenv("TERMD_TOKEN", "", 1);
	assert_string_equal(td_default_url(), TD_DEFAULT_URL);
	assert_null(td_default_token());
	setenv("TERMD_URL", "unix:/x.sock", 1);
	setenv("TERMD_TOKEN", "abc", 1);
	assert_string_equal(td_default_url(), "unix:/x.sock");
	assert_string_equal(td_default_token(), "abc");
	unsetenv("TERMD_URL");
	unsetenv("TERMD_TOKEN");

	char path[] = "/tmp/td-token-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "  s3cret \nsecond line\n", 22), 22);
	close(fd);
	char err[256];
	char *t = td_read_token_file(path, err, sizeof err);
	assert_non_null(t);
	assert_string_equal(t, "s3cret");
	free(t);
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_int_equal(write(fd, "\n", 1), 1);
	close(fd);
	assert_null(td_read_token_file(path, err, sizeof err));
	assert_non_null(strstr(err, "empty"));
	unlink(path);
	assert_null(td_read_token_file(path, err, sizeof err));
	assert_non_null(strstr(err, "no such file"));
}

/* Writes n bytes to a new temporary file; its path goes to path[32]. */
static void token_file(char path[32], const void *data, size_t n)
{
	snprintf(path, 32, "/tmp/td-token-XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, n), (ssize_t)n);
	close(fd);
}

/* What td_read_token_file makes of the bytes (NULL: an error, in err). */
static char *token_of(const void *data, size_t n, char *err, size_t errlen)
{
	char path[32];
	token_file(path, data, n);
	char *t = td_read_token_file(path, err, errlen);
	unlink(path);
	return t;
}

static void test_token_file_rule(void **state)
{
	(void)state;
	static const struct { const char *in; const char *tok; } ok[] = {
		{ "abc", "abc" },
		{ "abc\n", "abc" },
		{ "abc\r\n", "abc" },
		{ " \t abc \t\r\n", "abc" },
		{ "abc\nsecond line\n", "abc" },
		{ "a b c\n", "a b c" },     /* inside, spaces stay */
		{ "abc\n\n\n", "abc" },
	};
	char err[256];
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		char *t = token_of(ok[i].in, strlen(ok[i].in), err, sizeof err);
		if (!t)
			fail_msg("'%s': %s", ok[i].in, err);
		assert_string_equal(t, ok[i].tok);
		free(t);
	}
	static const char *empty[] = { "", "\n", "  \t\r\n", "\nsecond line\n" };
	for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++) {
		err[0] = '\0';
		assert_null(token_of(empty[i], strlen(empty[i]), err, sizeof err));
		assert_non_null(strstr(err, "empty"));
	}
	/* a NUL byte in the first line is an error, not a shorter token */
	assert_null(token_of("ab\0cd\n", 6, err, sizeof err));
	assert_non_null(strstr(err, "NUL"));
	char *t = token_of("abc\n\0\n", 6, err, sizeof err);   /* on a later line: ignored */
	assert_non_null(t);
	assert_string_equal(t, "abc");
	free(t);
	/* TD_TOKEN_MAX bytes are a token, one more is an error */
	char *big = malloc(TD_TOKEN_MAX + 2);
	memset(big, 'x', TD_TOKEN_MAX + 1);
	big[TD_TOKEN_MAX + 1] = '\n';
	assert_null(token_of(big, TD_TOKEN_MAX + 2, err, sizeof err));
	assert_non_null(strstr(err, "longer"));
	t = token_of(big + 1, TD_TOKEN_MAX + 1, err, sizeof err);
	assert_non_null(t);
	assert_int_equal(strlen(t), TD_TOKEN_MAX);
	free(t);
	free(big);
	/* a directory */
	assert_null(td_read_token_file("/tmp", err, sizeof err));
	assert_non_null(strstr(err, "/tmp"));
}

/* ---- base64, accept key ---- */

static void test_base64(void **state)
{
	(void)state;
	static const char *in[] = { "", "f", "fo", "foo", "foob", "fooba", "foobar" };
	static const char *out[] = { "", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy" };
	char buf[32];
	for (size_t i = 0; i < 7; i++) {
		assert_int_equal(td_base64_encode(in[i], strlen(in[i]), buf), strlen(out[i]));
		assert_string_equal(buf, out[i]);
	}
	uint8_t bin[3] = { 0xfb, 0xff, 0xfe };
	td_base64_encode(bin, 3, buf);
	assert_string_equal(buf, "+//+");
}

static void test_accept_key(void **state)
{
	(void)state;
	char acc[29];
	td_ws_accept("dGhlIHNhbXBsZSBub25jZQ==", acc);
	/* RFC 6455 §1.3 */
	assert_string_equal(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

/* ---- frames ---- */

static void test_frame_examples(void **state)
{
	(void)state;
	/* RFC 6455 §5.7. */
	uint8_t h[14];
	td_ws_frame f;
	static const uint8_t mask[4] = { 0x37, 0xfa, 0x21, 0x3d };

	assert_int_equal(td_ws_header(h, 1, TD_WS_TEXT, 5, NULL), 2);
	assert_memory_equal(h, "\x81\x05", 2);

	assert_int_equal(td_ws_header(h, 1, TD_WS_TEXT, 5, mask), 6);
	assert_memory_equal(h, "\x81\x85\x37\xfa\x21\x3d", 6);
	uint8_t hello[5] = { 'H', 'e', 'l', 'l', 'o' };
	td_ws_mask(hello, 5, mask, 0);
	assert_memory_equal(hello, "\x7f\x9f\x4d\x51\x58", 5);

	static const uint8_t masked[] = { 0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58 };
	assert_int_equal(td_ws_parse_header(masked, sizeof masked, &f), 1);
	assert_true(f.fin);
	assert_true(f.masked);
	assert_int_equal(f.opcode, TD_WS_TEXT);
	assert_int_equal(f.len, 5);
	assert_int_equal(f.hdr_len, 6);
	assert_memory_equal(f.mask, mask, 4);

	/* Fragmented "Hel" + "lo". */
	static const uint8_t frag1[] = { 0x01, 0x03, 'H', 'e', 'l' };
	static const uint8_t frag2[] = { 0x80, 0x02, 'l', 'o' };
	assert_int_equal(td_ws_parse_header(frag1, sizeof frag1, &f), 1);
	assert_false(f.fin);
	assert_int_equal(f.opcode, TD_WS_TEXT);
	assert_int_equal(td_ws_parse_header(frag2, sizeof frag2, &f), 1);
	assert_true(f.fin);
	assert_int_equal(f.opcode, TD_WS_CONT);
	assert_int_equal(f.len, 2);

	/* Unmasked ping "Hello". */
	assert_int_equal(td_ws_header(h, 1, TD_WS_PING, 5, NULL), 2);
	assert_memory_equal(h, "\x89\x05", 2);

	/* 256 bytes binary: 16-bit length; 64 KiB: 64-bit length. */
	assert_int_equal(td_ws_header(h, 1, TD_WS_BINARY, 256, NULL), 4);
	assert_memory_equal(h, "\x82\x7e\x01\x00", 4);
	assert_int_equal(td_ws_header(h, 1, TD_WS_BINARY, 65536, NULL), 10);
	assert_memory_equal(h, "\x82\x7f\x00\x00\x00\x00\x00\x01\x00\x00", 10);
}

static void test_frame_roundtrip(void **state)
{
	(void)state;
	static const uint64_t lens[] = { 0, 1, 125, 126, 127, 65535, 65536, 1u << 20,
					 (uint64_t)1 << 33 };
	static const uint8_t mask[4] = { 1, 2, 3, 4 };
	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		for (int m = 0; m < 2; m++) {
			uint8_t h[14];
			td_ws_frame f;
			size_t n = td_ws_header(h, 0, TD_WS_BINARY, lens[i], m ? mask : NULL);
			/* Every shorter prefix asks for more bytes. */
			for (size_t k = 0; k < n; k++)
				assert_int_equal(td_ws_parse_header(h, k, &f), 0);
			assert_int_equal(td_ws_parse_header(h, n, &f), 1);
			assert_int_equal(f.hdr_len, n);
			assert_int_equal(f.len, lens[i]);
			assert_int_equal(f.masked, m);
			assert_false(f.fin);
			assert_int_equal(f.opcode, TD_WS_BINARY);
		}
	}
}

static void test_frame_bad(void **state)
{
	(void)state;
	td_ws_frame f;
	static const uint8_t rsv[] = { 0xc1, 0x00 };         /* RSV1 */
	static const uint8_t op3[] = { 0x83, 0x00 };         /* reserved opcode */
	static const uint8_t opb[] = { 0x8b, 0x00 };         /* reserved control opcode */
	static const uint8_t fragping[] = { 0x09, 0x00 };    /* ping without FIN */
	static const uint8_t bigping[] = { 0x89, 0x7e, 0x00, 0x7e };
	static const uint8_t top[] = { 0x82, 0x7f, 0x80, 0, 0, 0, 0, 0, 0, 1 };
	assert_int_equal(td_ws_parse_header(rsv, 2, &f), -1);
	assert_int_equal(td_ws_parse_header(op3, 2, &f), -1);
	assert_int_equal(td_ws_parse_header(opb, 2, &f), -1);
	assert_int_equal(td_ws_parse_header(fragping, 2, &f), -1);
	assert_int_equal(td_ws_parse_header(bigping, 4, &f), -1);
	assert_int_equal(td_ws_parse_header(top, 10, &f), -1);
}

static void test_mask_offset(void **state)
{
	(void)state;
	static const uint8_t mask[4] = { 0xde, 0xad, 0xbe, 0xef };
	uint8_t a[37], b[37];
	for (size_t i = 0; i < sizeof a; i++)
		a[i] = b[i] = (uint8_t)(i * 13);
	td_ws_mask(a, sizeof a, mask, 0);
	/* Masking in pieces gives the same bytes. */
	td_ws_mask(b, 5, mask, 0);
	td_ws_mask(b + 5, 14, mask, 5);
	td_ws_mask(b + 19, 18, mask, 19);
	assert_memory_equal(a, b, sizeof a);
	td_ws_mask(a, sizeof a, mask, 0);
	for (size_t i = 0; i < sizeof a; i++)
		assert_int_equal(a[i], (uint8_t)(i * 13));
}

/* ---- a whole connection against a forked server ---- */

static char sockdir[40], sockpath[64], sockurl[80];

/* Server side helpers: the child exits 10+N at check N that fails. */
#define SRV_CHECK(cond, n) do { if (!(cond)) _exit(10 + (n)); } while (0)

static void srv_write(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w <= 0)
			_exit(3);
		c += w;
		n -= (size_t)w;
	}
}

static void srv_read(int fd, void *p, size_t n)
{
	char *c = p;
	while (n) {
		ssize_t r = read(fd, c, n);
		if (r <= 0)
			_exit(4);
		c += r;
		n -= (size_t)r;
	}
}

static void srv_frame(int fd, int fin, int op, const void *p, size_t n)
{
	uint8_t h[14];
	size_t hl = td_ws_header(h, fin, op, n, NULL);
	srv_write(fd, h, hl);
	srv_write(fd, p, n);
}

/* Reads one client frame (which must be masked); returns the malloc'd payload. */
static char *srv_read_frame(int fd, td_ws_frame *f)
{
	uint8_t h[14];
	size_t have = 2;
	srv_read(fd, h, 2);
	int r;
	while ((r = td_ws_parse_header(h, have, f)) == 0)
		srv_read(fd, h + have++, 1);
	SRV_CHECK(r == 1, 0);
	SRV_CHECK(f->masked, 1);
	char *p = malloc(f->len + 1);
	srv_read(fd, p, f->len);
	td_ws_mask((uint8_t *)p, f->len, f->mask, 0);
	p[f->len] = '\0';
	return p;
}

/* Reads the upgrade request; returns the accept value for its key. */
static void srv_handshake(int fd, char *req, size_t cap, char accept[29])
{
	size_t n = 0;
	while (n < cap - 1) {
		srv_read(fd, req + n, 1);
		n++;
		req[n] = '\0';
		if (n >= 4 && !memcmp(req + n - 4, "\r\n\r\n", 4))
			break;
	}
	char *k = strstr(req, "Sec-WebSocket-Key: ");
	SRV_CHECK(k, 2);
	k += strlen("Sec-WebSocket-Key: ");
	char key[64];
	size_t kl = strcspn(k, "\r");
	SRV_CHECK(kl < sizeof key, 2);
	memcpy(key, k, kl);
	key[kl] = '\0';
	td_ws_accept(key, accept);
}

static int srv_listen(void)
{
	int ls = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sockpath);
	unlink(sockpath);
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 4) < 0)
		return -1;
	return ls;
}

typedef void (*srv_fn)(int fd);

static pid_t srv_start(srv_fn fn)
{
	int ls = srv_listen();
	assert_true(ls >= 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(10);
		int fd = accept(ls, NULL, NULL);
		if (fd < 0)
			_exit(5);
		fn(fd);
		_exit(0);
	}
	close(ls);
	return pid;
}

static int srv_wait(pid_t pid)
{
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static const char *const ok_head =
	"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
	"Sec-WebSocket-Protocol: termd.events.v1\r\nSec-WebSocket-Accept: ";

/* The main conversation; see test_session. */
static void srv_session(int fd)
{
	char req[4096], accept[29];
	srv_handshake(fd, req, sizeof req, accept);
	SRV_CHECK(!strncmp(req, "GET /events HTTP/1.1\r\n", 22), 3);
	SRV_CHECK(strstr(req, "\r\nAuthorization: Bearer tok123\r\n"), 4);
	SRV_CHECK(strstr(req, "\r\nSec-WebSocket-Protocol: termd.events.v1\r\n"), 5);
	SRV_CHECK(strstr(req, "\r\nSec-WebSocket-Version: 13\r\n"), 6);

	/* 101 and hello in one write. */
	char out[1024];
	static const char hello[] = "{\"seq\":1,\"cause\":null,\"observation\":\"hello\",\"extras\":{}}";
	int n = snprintf(out, sizeof out, "%s%s\r\n\r\n", ok_head, accept);
	uint8_t h[14];
	size_t hl = td_ws_header(h, 1, TD_WS_TEXT, strlen(hello), NULL);
	memcpy(out + n, h, hl);
	memcpy(out + n + hl, hello, strlen(hello));
	srv_write(fd, out, n + hl + strlen(hello));

	/* The action. */
	td_ws_frame f;
	char *act = srv_read_frame(fd, &f);
	SRV_CHECK(f.opcode == TD_WS_TEXT && f.fin, 7);
	cJSON *a = cJSON_Parse(act);
	SRV_CHECK(a, 8);
	const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(a, "id"));
	SRV_CHECK(id && !strncmp(id, "unit-", 5), 9);
	SRV_CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(a, "action")), "ping"), 9);

	/* An unrelated event, a ping, then the answer in three fragments with a
	 * ping between them, the second fragment's header split across writes. */
	static const char ev[] = "{\"seq\":2,\"cause\":null,\"observation\":\"session.open\"}";
	srv_frame(fd, 1, TD_WS_TEXT, ev, strlen(ev));
	srv_frame(fd, 1, TD_WS_PING, "p1", 2);
	char ans[256];
	int al = snprintf(ans, sizeof ans,
			  "{\"seq\":3,\"cause\":\"%s\",\"observation\":\"pong\",\"content\":\"\"}", id);
	int k = al / 3;
	srv_frame(fd, 0, TD_WS_TEXT, ans, (size_t)k);
	srv_frame(fd, 1, TD_WS_PING, "p2", 2);
	hl = td_ws_header(h, 0, TD_WS_CONT, (size_t)k, NULL);
	srv_write(fd, h, 1);
	usleep(50000);
	srv_write(fd, h + 1, hl - 1);
	srv_write(fd, ans + k, (size_t)k);
	srv_frame(fd, 1, TD_WS_CONT, ans + 2 * k, (size_t)(al - 2 * k));

	/* The client answers both pings, in order. */
	char *p = srv_read_frame(fd, &f);
	SRV_CHECK(f.opcode == TD_WS_PONG && !strcmp(p, "p1"), 20);
	free(p);
	p = srv_read_frame(fd, &f);
	SRV_CHECK(f.opcode == TD_WS_PONG && !strcmp(p, "p2"), 21);
	free(p);

	/* A 70000-byte binary message (64-bit length) and an empty text one. */
	uint8_t *big = malloc(70000);
	for (int i = 0; i < 70000; i++)
		big[i] = (uint8_t)(i * 7);
	srv_frame(fd, 1, TD_WS_BINARY, big, 70000);
	free(big);
	srv_frame(fd, 1, TD_WS_TEXT, "", 0);

	/* A message from the client: binary, 200000 bytes. */
	p = srv_read_frame(fd, &f);
	SRV_CHECK(f.opcode == TD_WS_BINARY && f.fin && f.len == 200000, 22);
	for (int i = 0; i < 200000; i++)
		SRV_CHECK((uint8_t)p[i] == (uint8_t)(i * 3), 23);
	free(p);

	/* Close; the client must echo the code. */
	srv_frame(fd, 1, TD_WS_CLOSE, "\x03\xe8" "done", 6);
	p = srv_read_frame(fd, &f);
	SRV_CHECK(f.opcode == TD_WS_CLOSE && f.len == 2 && !memcmp(p, "\x03\xe8", 2), 24);
	free(p);
	free(act);
	cJSON_Delete(a);
}

static void test_session(void **state)
{
	(void)state;
	pid_t pid = srv_start(srv_session);
	char err[256];
	td_client *c = td_connect(sockurl, "/events", TD_SUBPROTO_EVENTS, "tok123", err, sizeof err);
	if (!c)
		fail_msg("td_connect: %s", err);
	assert_string_equal(td_subprotocol(c), TD_SUBPROTO_EVENTS);
	assert_int_equal(td_pending(c), 2);   /* the hello came with the 101 */
	td_set_id_prefix(c, "unit");

	cJSON *act = td_action_new("ping", NULL);
	cJSON *obs = td_call(c, act, 5000, err, sizeof err);
	cJSON_Delete(act);
	if (!obs)
		fail_msg("td_call: %s", err);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(obs, "observation")), "pong");
	assert_non_null(td_hello(c));
	cJSON_Delete(obs);

	char *data;
	size_t len;
	int bin;
	assert_int_equal(td_recv(c, &data, &len, &bin, 5000), 1);
	assert_true(bin);
	assert_int_equal(len, 70000);
	for (size_t i = 0; i < len; i++)
		assert_int_equal((uint8_t)data[i], (uint8_t)(i * 7));
	assert_int_equal(data[len], '\0');
	free(data);

	assert_int_equal(td_recv(c, &data, &len, &bin, 5000), 1);
	assert_false(bin);
	assert_int_equal(len, 0);
	assert_string_equal(data, "");
	free(data);

	uint8_t *big = malloc(200000);
	for (int i = 0; i < 200000; i++)
		big[i] = (uint8_t)(i * 3);
	assert_int_equal(td_send(c, 1, big, 200000), 0);
	free(big);

	assert_int_equal(td_recv(c, &data, &len, &bin, 5000), -1);
	assert_null(data);
	assert_int_equal(td_close_code(c), 1000);
	assert_non_null(strstr(td_error(c), "done"));
	assert_int_equal(td_pending(c), 2);
	assert_int_equal(td_send(c, 0, "x", 1), -1);
	td_close(c);
	assert_int_equal(srv_wait(pid), 0);
}

/* Sends nothing after the handshake; reads the client's one action and
 * close frame, and answers the close. */
static void srv_quiet(int fd)
{
	char req[4096], accept[29], out[512];
	srv_handshake(fd, req, sizeof req, accept);
	int n = snprintf(out, sizeof out, "%s%s\r\n\r\n", ok_head, accept);
	srv_write(fd, out, (size_t)n);
	td_ws_frame f;
	char *p;
	int texts = 0;
	while ((p = srv_read_frame(fd, &f)) && f.opcode != TD_WS_CLOSE) {
		texts += f.opcode == TD_WS_TEXT;
		free(p);
	}
	SRV_CHECK(texts == 1, 0);
	SRV_CHECK(f.len == 2 && !memcmp(p, "\x03\xe8", 2), 1);
	free(p);
	srv_frame(fd, 1, TD_WS_CLOSE, "\x03\xe8", 2);
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void test_timeout(void **state)
{
	(void)state;
	pid_t pid = srv_start(srv_quiet);
	char err[256];
	td_client *c = td_connect(sockurl, "/events", TD_SUBPROTO_EVENTS, NULL, err, sizeof err);
	if (!c)
		fail_msg("td_connect: %s", err);
	assert_int_equal(td_pending(c), 0);
	char *data;
	size_t len;
	int bin;
	assert_int_equal(td_recv(c, &data, &len, &bin, 0), 0);
	int64_t t0 = now_ms();
	assert_int_equal(td_recv(c, &data, &len, &bin, 150), 0);
	int64_t dt = now_ms() - t0;
	assert_true(dt >= 140 && dt < 2000);

	cJSON *act = td_action_new("ping", NULL);
	assert_null(td_call(c, act, 100, err, sizeof err));
	if (!strstr(err, "no answer"))
		fail_msg("td_call error: %s", err);
	/* td_call added an id to the caller's action. */
	assert_non_null(cJSON_GetObjectItem(act, "id"));
	cJSON_Delete(act);
	td_close(c);
	assert_int_equal(srv_wait(pid), 0);
}

static void srv_answer(int fd, const char *head)
{
	char req[4096], accept[29];
	srv_handshake(fd, req, sizeof req, accept);
	srv_write(fd, head, strlen(head));
	usleep(100000);
}

static void srv_401(int fd)
{
	srv_answer(fd, "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n");
}

static void srv_bad_accept(int fd)
{
	srv_answer(fd, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
		       "Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaMoqEobStNqGq4Qwk=\r\n\r\n");
}

static void srv_wrong_proto(int fd)
{
	char req[4096], accept[29], out[512];
	srv_handshake(fd, req, sizeof req, accept);
	int n = snprintf(out, sizeof out,
			 "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
			 "Sec-WebSocket-Protocol: other\r\nSec-WebSocket-Accept: %s\r\n\r\n", accept);
	srv_write(fd, out, (size_t)n);
	usleep(100000);
}

static void srv_hangup(int fd)
{
	char req[4096], accept[29];
	srv_handshake(fd, req, sizeof req, accept);
}

static void check_refused(srv_fn fn, const char *want)
{
	pid_t pid = srv_start(fn);
	char err[256];
	td_client *c = td_connect(sockurl, "/tty/main?mode=ro", TD_SUBPROTO_EVENTS, NULL, err, sizeof err);
	assert_null(c);
	if (!strstr(err, want))
		fail_msg("error '%s' does not contain '%s'", err, want);
	assert_int_equal(srv_wait(pid), 0);
}

static void test_refused(void **state)
{
	(void)state;
	check_refused(srv_401, "HTTP 401 Unauthorized: wrong or missing token (--token-file / TERMD_TOKEN)");
	check_refused(srv_bad_accept, "Sec-WebSocket-Accept");
	check_refused(srv_wrong_proto, "subprotocol");
	check_refused(srv_hangup, "closed");

	char err[256];
	unlink(sockpath);
	assert_null(td_connect(sockurl, "/events", NULL, NULL, err, sizeof err));
	assert_non_null(strstr(err, "no such file"));
	assert_null(td_connect("ws://127.0.0.1:1", "/events", NULL, NULL, err, sizeof err));
	assert_string_equal(err, "connection refused");
	assert_null(td_connect("wss://127.0.0.1:1", "/events", NULL, NULL, err, sizeof err));
	assert_string_equal(err, "connection refused");
}

static int setup(void **state)
{
	(void)state;
	signal(SIGPIPE, SIG_IGN);
	snprintf(sockdir, sizeof sockdir, "/tmp/td-unit-XXXXXX");
	if (!mkdtemp(sockdir))
		return -1;
	snprintf(sockpath, sizeof sockpath, "%s/s.sock", sockdir);
	snprintf(sockurl, sizeof sockurl, "unix:%s", sockpath);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(sockpath);
	rmdir(sockdir);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_url_ok),
		cmocka_unit_test(test_url_bad),
		cmocka_unit_test(test_url_wss),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_token_file_rule),
		cmocka_unit_test(test_base64),
		cmocka_unit_test(test_accept_key),
		cmocka_unit_test(test_frame_examples),
		cmocka_unit_test(test_frame_roundtrip),
		cmocka_unit_test(test_frame_bad),
		cmocka_unit_test(test_mask_offset),
		cmocka_unit_test(test_session),
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_refused),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
