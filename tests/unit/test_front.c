/* test_front.c — the front's HTTP/1.1 pieces (net/front-h1.c): a request
 * head parsed (or refused 400/431: smuggling, folding, bad names), the
 * head rewritten for lws (X-Metadata-* folded into one X-Termd-Metadata,
 * form-encoded, keys lowercased, order kept; the client's X-Termd-* dropped;
 * X-Termd-Peer, X-Termd-Tls and X-Termd-Api added), and chunked framing
 * followed (the parsing itself is proto/h1wire.c's, tested in full in
 * test_h1wire.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front.h"

static int parse(const char *head, struct h1_head *r)
{
	static char buf[8192];
	snprintf(buf, sizeof buf, "%s", head);
	return h1_parse_request(buf, strlen(buf), r);
}

static void test_parse_head(void **state)
{
	(void)state;
	struct h1_head r;
	assert_int_equal(parse("POST /files?path=/a HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n"
			       "X-Access-Token:  tok \r\n\r\n", &r), 0);
	assert_int_equal(r.nh, 3);
	assert_int_equal(r.clen, 12);
	assert_false(r.chunked);
	assert_int_equal(r.h[2].vlen, 3);
	assert_memory_equal(r.h[2].val, "tok", 3);
	assert_int_equal(parse("GET /events HTTP/1.1\r\nConnection: keep-alive, Upgrade\r\n"
			       "Upgrade: websocket\r\n\r\n", &r), 0);
	assert_true(r.upgrade);
	assert_int_equal(parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", &r), 0);
	assert_true(r.chunked);
	/* refused */
	assert_int_equal(parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", &r), 400);
	assert_int_equal(parse("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", &r), 400);
	assert_int_equal(parse("POST / HTTP/1.1\r\nContent-Length: -3\r\n\r\n", &r), 400);
	assert_int_equal(parse("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", &r), 400);
	assert_int_equal(parse("GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", &r), 400);
	assert_int_equal(parse("GET / HTTP/1.1\r\nBad Name: b\r\n\r\n", &r), 400);
	assert_int_equal(parse("GET / HTTP/1.1\r\nNoColon\r\n\r\n", &r), 400);
	assert_int_equal(parse("GET / HTTP/2.0\r\n\r\n", &r), 400);
	assert_int_equal(parse("GET  / HTTP/1.1\r\n\r\n", &r), 400);
	assert_int_equal(parse("GET / HTTP/1.1\nA: b\n\n", &r), 400);
	char many[8192] = "GET / HTTP/1.1\r\n";
	for (int i = 0; i <= FR_MAX_HDRS; i++)
		strcat(many, "A: b\r\n");
	strcat(many, "\r\n");
	assert_int_equal(parse(many, &r), 431);
}

static void rewrite(const char *head, int tls, char *out, size_t n)
{
	struct h1_head r;
	assert_int_equal(parse(head, &r), 0);
	struct fconn c;
	memset(&c, 0, sizeof c);
	snprintf(c.peer, sizeof c.peer, "203.0.113.7");
	c.api = 2;
	c.ssl = tls ? (SSL *)&c : NULL;   /* only its being set is read */
	struct fq q = {0};
	fr_rewrite(&q, r.h, r.nh, &c, 0);
	snprintf(out, n, "%.*s", (int)q.len, q.p + q.off);
	fq_free(&q);
}

static void test_rewrite(void **state)
{
	(void)state;
	char out[4096];
	rewrite("POST /files HTTP/1.1\r\nHost: h\r\nX-Metadata-Owner: Ann Lee\r\n"
		"X-Termd-Peer: 6.6.6.6\r\nx-metadata-KEY2: a&b=c/ü\r\nX-Termd-Metadata: evil=1\r\n"
		"X-Termd-Tls: 1\r\nX-Termd-Api: 1\r\nX-Access-Token: t\r\n\r\n", 1, out, sizeof out);
	assert_string_equal(out, "Host: h\r\nX-Access-Token: t\r\n"
			    "X-Termd-Metadata: owner=Ann+Lee&key2=a%26b%3Dc%2F%C3%BC\r\n"
			    "X-Termd-Peer: 203.0.113.7\r\nX-Termd-Tls: 1\r\nX-Termd-Api: 2\r\n");
	rewrite("GET / HTTP/1.1\r\nX-Metadata-: empty key kept as a header\r\n\r\n", 0, out, sizeof out);
	assert_string_equal(out, "X-Metadata-: empty key kept as a header\r\nX-Termd-Peer: 203.0.113.7\r\n"
			    "X-Termd-Api: 2\r\n");
}

static void into_fq(void *arg, const char *p, size_t n)
{
	fq_put(arg, p, n);
}

static long scan_all(const char *s, int *done, struct fq *data)
{
	struct h1_chunk k;
	memset(&k, 0, sizeof k);
	long total = 0;
	/* byte by byte: the state carries across reads */
	for (size_t i = 0; s[i] && !*done; i++) {
		long r = h1_chunk_scan(&k, s + i, 1, done, data ? into_fq : NULL, data);
		if (r < 0)
			return -1;
		total += r;
	}
	return total;
}

static void test_chunked(void **state)
{
	(void)state;
	const char body[] = "5;ext=1\r\nhello\r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\nGET /next";
	int done = 0;
	struct fq d = {0};
	long n = scan_all(body, &done, &d);
	assert_true(done);
	assert_int_equal(n, (long)(strstr(body, "GET") - body));
	assert_int_equal(d.len, 15);
	assert_memory_equal(d.p + d.off, "hello0123456789", 15);
	fq_free(&d);
	/* whole at once */
	struct h1_chunk k;
	memset(&k, 0, sizeof k);
	done = 0;
	assert_int_equal(h1_chunk_scan(&k, "0\r\n\r\nrest", 9, &done, NULL, NULL), 5);
	assert_true(done);
	done = 0;
	assert_int_equal(scan_all("zz\r\n", &done, NULL), -1);
	done = 0;
	assert_int_equal(scan_all("3\r\nabcX\r\n", &done, NULL), -1);
	done = 0;
	assert_int_equal(scan_all("ffffffffffffffffff\r\n", &done, NULL), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_head),
		cmocka_unit_test(test_rewrite),
		cmocka_unit_test(test_chunked),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
