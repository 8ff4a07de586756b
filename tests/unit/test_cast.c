/* test_cast.c — unit tests for proto/cast.c: bytes → JSON string bodies
 * (escapes, invalid UTF-8 as U+FFFD per maximal subpart, the same output
 * however the bytes are split across reads, valid text round-trips), and
 * the line parsers against malformed input (every truncation of a line,
 * wrong types, huge and odd numbers, random mutations: errors, no crash). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cast.h"
#include "util.h"

/* Encode whole, as one final read. */
static char *enc(const char *p, size_t n)
{
	buf_t b = {0};
	struct cast_utf8 u = {0};
	cast_json_bytes(&b, &u, p, n, 1);
	buf_reserve(&b, 1);
	return buf_steal(&b);
}

/* Encode in pieces cut at the given offsets. */
static char *enc_split(const char *p, size_t n, const size_t *cuts, size_t ncuts)
{
	buf_t b = {0};
	struct cast_utf8 u = {0};
	size_t at = 0;
	for (size_t i = 0; i <= ncuts; i++) {
		size_t to = i < ncuts ? cuts[i] : n;
		if (to < at)
			to = at;
		cast_json_bytes(&b, &u, p + at, to - at, i == ncuts);
		at = to;
	}
	buf_reserve(&b, 1);
	return buf_steal(&b);
}

static void test_escapes(void **state)
{
	(void)state;
	const char in[] = "a\"b\\c\n\r\t\x1b[1m\x7f\x01";
	char *e = enc(in, sizeof in - 1);
	assert_string_equal(e, "a\\\"b\\\\c\\n\\r\\t\\u001b[1m\\u007f\\u0001");
	free(e);
	e = enc("x\0y", 3);
	assert_string_equal(e, "x\\u0000y");
	free(e);
}

static void test_invalid_bytes(void **state)
{
	(void)state;
	static const struct {
		const char *in;
		const char *out;
	} cases[] = {
		{"\xff", "\xef\xbf\xbd"},
		{"a\xc3(", "a\xef\xbf\xbd("},                   /* cut 2-byte */
		{"\xe2\x82\x41", "\xef\xbf\xbd" "A"},           /* maximal subpart: one */
		{"\xe2\x82\xac", "\xe2\x82\xac"},               /* euro, valid */
		{"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},       /* overlong: each byte */
		{"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate */
		{"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* > U+10FFFF */
		{"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"},       /* emoji */
		{"\xf0\x9f\x98", "\xef\xbf\xbd"},               /* cut at the end, final */
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char *e = enc(cases[i].in, strlen(cases[i].in));
		assert_string_equal(e, cases[i].out);
		free(e);
	}
}

static void test_held_across_reads(void **state)
{
	(void)state;
	/* "é€😀" cut inside each character */
	const char in[] = "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
	buf_t b = {0};
	struct cast_utf8 u = {0};
	cast_json_bytes(&b, &u, in, 1, 0);
	assert_int_equal(b.len, 0);      /* nothing yet: half a character */
	assert_int_equal(u.n, 1);
	cast_json_bytes(&b, &u, in + 1, 3, 0);
	assert_int_equal(b.len, 2);      /* é out, two bytes of € held */
	assert_int_equal(u.n, 2);
	cast_json_bytes(&b, &u, in + 4, 2, 0);
	cast_json_bytes(&b, &u, in + 6, 3, 1);
	assert_int_equal(u.n, 0);
	assert_int_equal(b.len, sizeof in - 1);
	assert_memory_equal(b.p, in, sizeof in - 1);
	buf_free(&b);
}

static uint32_t rng = 12345;
static uint32_t rnd(void)
{
	rng = rng * 1103515245u + 12345u;
	return rng >> 8;
}

/* Decode an event line built around body back to bytes. */
static void roundtrip(const char *body, buf_t *out)
{
	buf_t line = {0};
	cast_event_begin(&line, 1.5, "o");
	buf_puts(&line, body);
	cast_event_end(&line);
	struct cast_event ev;
	char err[128];
	assert_int_equal(line.p[line.len - 1], '\n');
	int r = cast_parse_event(line.p, line.len - 1, &ev, err, sizeof err);
	if (r != 0)
		fail_msg("%s: %s", err, line.p);
	assert_string_equal(ev.code, "o");
	buf_reset(out);
	buf_append(out, ev.data, ev.len);
	cast_event_free(&ev);
	buf_free(&line);
}

static void test_random_splits(void **state)
{
	(void)state;
	static const char *atoms[] = {"a", "\r\n", "\x1b[31m", "\xc3\xa9", "\xe2\x82\xac",
				      "\xf0\x9f\x98\x80", "\xff", "\xc3", "\xe2\x82", "\"", "\\",
				      "\x00", "\xed\xa0\x80", "\x7f"};
	buf_t out = {0};
	for (int iter = 0; iter < 3000; iter++) {
		buf_t in = {0};
		int valid = 1;
		size_t na = rnd() % 20;
		for (size_t i = 0; i < na; i++) {
			size_t k = rnd() % (sizeof atoms / sizeof atoms[0]);
			size_t l = k == 11 ? 1 : strlen(atoms[k]);
			if (k == 6 || k == 7 || k == 8 || k == 12)
				valid = 0;
			buf_append(&in, atoms[k], l);
		}
		buf_reserve(&in, 1);
		char *whole = enc(in.p, in.len);
		size_t cuts[4];
		size_t nc = rnd() % 5;
		for (size_t i = 0; i < nc; i++)
			cuts[i] = in.len ? rnd() % (in.len + 1) : 0;
		for (size_t i = 1; i < nc; i++)   /* sorted */
			for (size_t j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
				size_t t = cuts[j];
				cuts[j] = cuts[j - 1];
				cuts[j - 1] = t;
			}
		char *split = enc_split(in.p, in.len, cuts, nc);
		assert_string_equal(whole, split);
		roundtrip(whole, &out);
		/* always valid UTF-8 once decoded (NULs aside) */
		for (size_t i = 0; i < out.len; i++)
			if (!out.p[i])
				out.p[i] = ' ';
		assert_true(utf8_text(out.p ? out.p : "", out.len, NULL));
		if (valid) {
			assert_int_equal(out.len, in.len);
			if (in.len) {
				/* NULs were blanked in out only */
				for (size_t i = 0; i < in.len; i++)
					assert_true(out.p[i] == (in.p[i] ? in.p[i] : ' '));
			}
		}
		free(whole);
		free(split);
		buf_free(&in);
	}
	buf_free(&out);
}

static int parse(const char *s, struct cast_event *ev)
{
	char err[128];
	return cast_parse_event(s, strlen(s), ev, err, sizeof err);
}

static void test_event_parser(void **state)
{
	(void)state;
	struct cast_event ev;
	assert_int_equal(parse("[0.25, \"o\", \"hi\\u001b\\ud83d\\ude00\"]", &ev), 0);
	assert_true(ev.t == 0.25);
	assert_string_equal(ev.code, "o");
	assert_int_equal(ev.len, 2 + 1 + 4);
	assert_memory_equal(ev.data, "hi\x1b\xf0\x9f\x98\x80", 7);
	cast_event_free(&ev);
	assert_int_equal(parse("  [1e2,\"m\",\"\"]  ", &ev), 0);
	assert_true(ev.t == 100);
	assert_int_equal(ev.len, 0);
	cast_event_free(&ev);
	assert_int_equal(parse("[1, \"o\", \"a\\u0000b\"]", &ev), 0);
	assert_int_equal(ev.len, 3);
	cast_event_free(&ev);
	/* a lone surrogate becomes U+FFFD */
	assert_int_equal(parse("[1, \"o\", \"\\ud800x\"]", &ev), 0);
	assert_memory_equal(ev.data, "\xef\xbf\xbdx", 4);
	cast_event_free(&ev);

	static const char *bad[] = {
		"", "[", "]", "{}", "[]", "[1]", "[1, \"o\"]", "[1, \"o\", \"x\"", "[1, \"o\", \"x\"] x",
		"[\"1\", \"o\", \"x\"]", "[1, o, \"x\"]", "[1, \"o\", 5]", "[1, \"o\", null]",
		"[1, \"o\", [\"x\"]]", "[-1, \"o\", \"x\"]", "[1e400, \"o\", \"x\"]", "[1e10, \"o\", \"x\"]",
		"[nan, \"o\", \"x\"]", "[inf, \"o\", \"x\"]", "[0x10, \"o\", \"x\"]", "[1, \"\", \"x\"]",
		"[1, \"toolongcode\", \"x\"]", "[1, \"o\", \"\\q\"]", "[1, \"o\", \"\\u12\"]",
		"[1, \"o\", \"raw\ttab\"]", "[1 \"o\" \"x\"]", "[1,,\"o\",\"x\"]",
		"[99999999999999999999999999999999999999999999999999999999999999999999999, \"o\", \"x\"]",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		memset(&ev, 0x5a, sizeof ev);
		if (parse(bad[i], &ev) == 0)
			fail_msg("parsed: %s", bad[i]);
		assert_null(ev.data);
	}
}

static void test_truncations_and_mutations(void **state)
{
	(void)state;
	const char line[] = "[12.345678, \"o\", \"\\u001b[1mhello \\\"w\\\" \\u00e9\\r\\n\"]";
	struct cast_event ev;
	char err[128];
	/* every proper prefix fails cleanly (with a reason) */
	for (size_t n = 1; n < sizeof line - 1; n++) {
		if (cast_parse_event(line, n, &ev, err, sizeof err) == 0)
			fail_msg("prefix of %zu bytes parsed", n);
		assert_true(err[0] != 0);
	}
	assert_int_equal(cast_parse_event(line, sizeof line - 1, &ev, err, sizeof err), 0);
	cast_event_free(&ev);
	/* random mutations: parse or not, never a crash (ASan build) */
	char m[sizeof line];
	for (int iter = 0; iter < 20000; iter++) {
		memcpy(m, line, sizeof line);
		int k = 1 + (int)(rnd() % 4);
		for (int j = 0; j < k; j++)
			m[rnd() % (sizeof line - 1)] = (char)(rnd() & 0xff);
		size_t n = rnd() % sizeof line;
		if (cast_parse_event(m, n, &ev, err, sizeof err) == 0) {
			assert_true(ev.t >= 0 && ev.t <= CAST_MAX_TIME);
			assert_non_null(ev.data);
			cast_event_free(&ev);
		}
	}
}

static void test_header(void **state)
{
	(void)state;
	struct cast_header h;
	char err[128];
	const char *ok = "{\"version\": 2, \"width\": 80, \"height\": 24, \"timestamp\": 1795356337, "
			 "\"title\": \"t\", \"env\": {\"TERM\": \"xterm\"}}";
	assert_int_equal(cast_parse_header(ok, strlen(ok), &h, err, sizeof err), 0);
	assert_int_equal(h.width, 80);
	assert_int_equal(h.height, 24);
	assert_true(h.timestamp == 1795356337);
	assert_string_equal(h.title, "t");
	static const char *bad[] = {
		"", "[]", "{", "{\"version\": 1, \"width\": 80, \"height\": 24}",
		"{\"version\": 3, \"term\": {\"cols\": 80, \"rows\": 24}}",
		"{\"version\": 2, \"height\": 24}", "{\"version\": 2, \"width\": \"80\", \"height\": 24}",
		"{\"version\": 2, \"width\": 0, \"height\": 24}",
		"{\"version\": 2, \"width\": 1e300, \"height\": 24}",
		"{\"version\": 2, \"width\": 80, \"height\": 24, \"timestamp\": \"now\"}",
		"{\"version\": \"2\", \"width\": 80, \"height\": 24}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (cast_parse_header(bad[i], strlen(bad[i]), &h, err, sizeof err) == 0)
			fail_msg("parsed: %s", bad[i]);
		assert_true(err[0] != 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_escapes),
		cmocka_unit_test(test_invalid_bytes),
		cmocka_unit_test(test_held_across_reads),
		cmocka_unit_test(test_random_splits),
		cmocka_unit_test(test_event_parser),
		cmocka_unit_test(test_truncations_and_mutations),
		cmocka_unit_test(test_header),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
