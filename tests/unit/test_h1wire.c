/* test_h1wire.c — proto/h1wire.c, HTTP/1.1 on the wire: request and answer
 * heads (taken, and refused: folding, NUL, bad names, CL+TE, two different
 * Content-Lengths, codings other than chunked), chunked framing byte by byte
 * and whole (extensions, trailers, and refused: overflowing sizes, signs and
 * 0x, bare LF, data without its CRLF, a chunk over max), the hop-by-hop
 * names, the token compare. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h1wire.h"

static int req(const char *head, struct h1_head *r)
{
	return h1_parse_request(head, strlen(head), r);
}

static int ans(const char *head, struct h1_head *a)
{
	return h1_parse_answer(head, strlen(head), a);
}

static void test_request(void **state)
{
	(void)state;
	struct h1_head r;
	assert_int_equal(req("POST /files?path=/a HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n"
			     "X-Access-Token:  tok \r\n\r\n", &r), 0);
	assert_int_equal(r.nh, 3);
	assert_int_equal(r.clen, 12);
	assert_false(r.chunked);
	assert_int_equal(r.mlen, 4);
	assert_int_equal(r.tlen, 14);
	assert_memory_equal(r.h[2].val, "tok", 3);
	assert_int_equal(r.h[2].vlen, 3);
	assert_int_equal(req("GET /e HTTP/1.1\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n"
			     "Expect: 100-continue\r\n\r\n", &r), 0);
	assert_true(r.upgrade);
	assert_true(r.expect_continue);
	assert_int_equal(req("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", &r), 0);
	assert_true(r.chunked);
	assert_int_equal(req("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", &r), 0);
	assert_int_equal(r.clen, 3);
	/* refused */
	const char *bad[] = {
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: -3\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 3 4\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 1234567890123456789\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n",
		"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
		"GET / HTTP/1.1\r\nA: b\r\n\tfolded\r\n\r\n",
		"GET / HTTP/1.1\r\nBad Name: b\r\n\r\n",
		"GET / HTTP/1.1\r\nBad\"Name: b\r\n\r\n",
		"GET / HTTP/1.1\r\n: b\r\n\r\n",
		"GET / HTTP/1.1\r\nNoColon\r\n\r\n",
		"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n",
		"GET / HTTP/2.0\r\n\r\n",
		"GET  / HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\nA: b\n\n",
		"GET / HTTP/1.1\r\nA: b\n\r\n",
		"G(T / HTTP/1.1\r\n\r\n",
		"GET /\x7f HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nA: b\r\n",   /* no empty line */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(req(bad[i], &r), 400);
	/* a NUL in a value, the length given */
	const char nul[] = "GET / HTTP/1.1\r\nA: b\0c\r\n\r\n";
	assert_int_equal(h1_parse_request(nul, sizeof nul - 1, &r), 400);
	char many[8192] = "GET / HTTP/1.1\r\n";
	for (int i = 0; i <= H1_MAX_HDRS; i++)
		strcat(many, "A: b\r\n");
	strcat(many, "\r\n");
	assert_int_equal(req(many, &r), 431);
}

static void test_answer(void **state)
{
	(void)state;
	struct h1_head a;
	assert_int_equal(ans("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5\r\n\r\n", &a), 0);
	assert_int_equal(a.status, 200);
	assert_int_equal(a.clen, 5);
	assert_int_equal(a.nh, 2);
	assert_int_equal(ans("HTTP/1.0 404\r\n\r\n", &a), 0);
	assert_int_equal(a.status, 404);
	assert_int_equal(a.clen, -1);
	assert_int_equal(ans("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", &a), 0);
	assert_true(a.chunked);
	assert_int_equal(ans("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
			     "Connection: Upgrade\r\n\r\n", &a), 0);
	assert_int_equal(a.status, 101);
	const char *bad[] = {
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: five\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"HTTP/1.1 200 OK\r\nA: b\r\n folded\r\n\r\n",
		"HTTP/1.1 200 OK\r\nNoColon\r\n\r\n",
		"HTTP/1.1 200 OK\nA: b\n\n",
		"HTTP/2 200 OK\r\n\r\n",
		"HTTP/1.1 20 OK\r\n\r\n",
		"HTTP/1.1 2000 OK\r\n\r\n",
		"HTTP/1.1 099 OK\r\n\r\n",
		"HTTP/1.1  200 OK\r\n\r\n",
		"ICY 200 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\n",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(ans(bad[i], &a), -1);
	const char nul[] = "HTTP/1.1 200 OK\r\nA: b\0c\r\n\r\n";
	assert_int_equal(h1_parse_answer(nul, sizeof nul - 1, &a), -1);
	assert_int_equal(h1_head_len("HTTP/1.1 200 OK\r\n\r\nbody", 23), 19);
	assert_int_equal(h1_head_len("HTTP/1.1 200 OK\r\n\r", 18), 0);
}

static void into(void *arg, const char *p, size_t n)
{
	char *s = arg;
	strncat(s, p, n);
}

/* byte by byte (the state carries across reads), the bytes used or -1 */
static long scan_bytes(const char *s, unsigned long long max, int *done, char *data)
{
	struct h1_chunk k;
	memset(&k, 0, sizeof k);
	k.max = max;
	long total = 0;
	*done = 0;
	for (size_t i = 0; s[i] && !*done; i++) {
		long r = h1_chunk_scan(&k, s + i, 1, done, into, data);
		if (r < 0)
			return -1;
		total += r;
	}
	return total;
}

static long scan_whole(const char *s, unsigned long long max, int *done, char *data)
{
	struct h1_chunk k;
	memset(&k, 0, sizeof k);
	k.max = max;
	return h1_chunk_scan(&k, s, strlen(s), done, into, data);
}

static void test_chunked(void **state)
{
	(void)state;
	const char body[] = "5;ext=1\r\nhello\r\nA \r\n0123456789\r\n00\r\nTrailer: x\r\n\r\nGET /next";
	for (int whole = 0; whole < 2; whole++) {
		int done = 0;
		char d[64] = "";
		long n = whole ? scan_whole(body, 0, &done, d) : scan_bytes(body, 0, &done, d);
		assert_true(done);
		assert_int_equal(n, (long)(strstr(body, "GET") - body));
		assert_string_equal(d, "hello0123456789");   /* the trailers not in it */
	}
	/* not yet whole */
	int done;
	char d[64] = "";
	assert_int_equal(scan_whole("3\r\nab", 0, &done, d), 5);
	assert_false(done);
	/* the state is zeroed at the end, max kept: the next body follows */
	struct h1_chunk k;
	memset(&k, 0, sizeof k);
	k.max = 100;
	assert_int_equal(h1_chunk_scan(&k, "0\r\n\r\n", 5, &done, NULL, NULL), 5);
	assert_true(done);
	assert_int_equal(k.max, 100);
	assert_int_equal(h1_chunk_scan(&k, "1\r\nx\r\n0\r\n\r\n", 11, &done, NULL, NULL), 11);
	assert_true(done);
	/* refused, byte by byte and whole */
	const char *bad[] = {
		"zz\r\n",                         /* no size */
		"\r\n",
		";x\r\n",
		"0x5\r\nhello\r\n0\r\n\r\n",      /* strtoull's 0x */
		"+5\r\nhello\r\n0\r\n\r\n",
		"-1\r\n",
		" 5\r\nhello\r\n0\r\n\r\n",
		"ffffffffffffffffff\r\n",        /* overflows */
		"10000000000000000\r\n",
		"5\nhello\r\n0\r\n\r\n",           /* bare LF */
		"5;a\nhello\r\n0\r\n\r\n",
		"5\r\nhello\n0\r\n\r\n",
		"5\r\nhelloX\r\n0\r\n\r\n",       /* data longer than said */
		"5\r\nhello\r\r\n0\r\n\r\n",
		"5\r\x01\nhello\r\n",
		"0\r\nTrailer: x\n\r\n",          /* trailer with a bare LF */
		"0\r\n\n",
		"65\r\n",                         /* over max (100) */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		d[0] = 0;
		assert_int_equal(scan_bytes(bad[i], 100, &done, d), -1);
		d[0] = 0;
		assert_int_equal(scan_whole(bad[i], 100, &done, d), -1);
	}
	/* a size line over 1024 bytes (extensions), a trailer over 8192 */
	static char big[10000];
	memset(big, 0, sizeof big);
	strcpy(big, "1;");
	memset(big + 2, 'e', 1100);
	assert_int_equal(scan_whole(big, 0, &done, d), -1);
	strcpy(big, "0\r\nT: ");
	memset(big + 6, 'v', 8200);
	assert_int_equal(scan_whole(big, 0, &done, d), -1);
	/* just at max, and 15 hex digits with no max */
	d[0] = 0;
	assert_true(scan_whole("64\r\n", 100, &done, d) > 0);
	assert_true(scan_whole("fffffffffffffff\r\n", 0, &done, d) > 0);
}

static void test_hop_token(void **state)
{
	(void)state;
	const char *hop[] = {"Connection", "keep-alive", "Proxy-Connection", "Transfer-Encoding",
			     "UPGRADE", "te", "Trailer", "Proxy-Authenticate"};
	for (size_t i = 0; i < sizeof hop / sizeof hop[0]; i++)
		assert_true(h1_hop_by_hop(hop[i], strlen(hop[i])));
	assert_false(h1_hop_by_hop("content-type", 12));
	assert_false(h1_hop_by_hop("tex", 3));
	assert_false(h1_hop_by_hop("connection", 4));
	assert_true(h1_token_eq("secret", "secret"));
	assert_false(h1_token_eq("secret2", "secret"));
	assert_false(h1_token_eq("secre", "secret"));
	assert_false(h1_token_eq("", "secret"));
	assert_false(h1_token_eq("secreT", "secret"));
	assert_true(h1_has_token("keep-alive, Upgrade", 19, "upgrade"));
	assert_false(h1_has_token("upgrades", 8, "upgrade"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_request),
		cmocka_unit_test(test_answer),
		cmocka_unit_test(test_chunked),
		cmocka_unit_test(test_hop_token),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
