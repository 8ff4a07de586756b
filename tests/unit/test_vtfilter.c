/* test_vtfilter.c — unit tests for proto/vtfilter.c, the filter in front
 * of libvterm: text and well-formed sequences pass unchanged; CSIs over the
 * bounds, strings (OSC, DCS, ...) and C1 controls written as UTF-8 are
 * dropped; the result does not depend on where the input is split. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vtfilter.h"

/* The filter's output for `in`, fed whole and then one byte at a time:
 * both must agree. Returns a malloc'd string. */
static char *filt(const char *in, size_t n)
{
	struct vtfilter f;
	buf_t whole = {0}, bytes = {0};
	vtfilter_reset(&f);
	vtfilter_feed(&f, in, n, &whole);
	vtfilter_reset(&f);
	for (size_t i = 0; i < n; i++)
		vtfilter_feed(&f, in + i, 1, &bytes);
	assert_int_equal(whole.len, bytes.len);
	if (whole.len)
		assert_memory_equal(whole.p, bytes.p, whole.len);
	buf_free(&bytes);
	buf_reserve(&whole, 1);
	return buf_steal(&whole);
}

#define CHECK(in, want) do { \
	char *got_ = filt(in, sizeof(in) - 1); \
	assert_string_equal(got_, want); \
	free(got_); \
} while (0)

static void test_text_passes(void **state)
{
	(void)state;
	CHECK("hello\r\nworld\t\x07\b", "hello\r\nworld\t\x07\b");
	/* UTF-8, including U+00A0 (C2 A0) and U+00FF */
	CHECK("caf\xc3\xa9 \xc2\xa0 \xe6\x97\xa5 \xf0\x9f\x98\x80", "caf\xc3\xa9 \xc2\xa0 \xe6\x97\xa5 \xf0\x9f\x98\x80");
}

static void test_sequences_pass(void **state)
{
	(void)state;
	CHECK("\x1b[1;31mred\x1b[0m", "\x1b[1;31mred\x1b[0m");
	CHECK("\x1b[?1049h\x1b[2J\x1b[H\x1b[38;2;10;20;30m", "\x1b[?1049h\x1b[2J\x1b[H\x1b[38;2;10;20;30m");
	CHECK("\x1b" "7\x1b" "8\x1b(B\x1b#8\x1b" "c", "\x1b" "7\x1b" "8\x1b(B\x1b#8\x1b" "c");
	CHECK("\x1b[6n\x1b[>c\x1b[ q", "\x1b[6n\x1b[>c\x1b[ q");
	/* 16 parameters: still fine */
	CHECK("\x1b[1;2;3;4;5;6;7;8;9;10;11;12;13;14;15;16mX",
	      "\x1b[1;2;3;4;5;6;7;8;9;10;11;12;13;14;15;16mX");
}

static void test_oversized_csi_dropped(void **state)
{
	(void)state;
	/* 17 parameters: libvterm 0.1.4 would write past its array */
	CHECK("a\x1b[1;2;3;4;5;6;7;8;9;10;11;12;13;14;15;16;17mb", "ab");
	CHECK("a\x1b[;;;;;;;;;;;;;;;;;;;;mb", "ab");
	CHECK("a\x1b[1234567Cb", "ab");
	CHECK("a\x1b[" "11111111111111111111111111111111111111111111111111111111111111111111mb", "ab");
	/* ESC <intermediate> [ is a CSI to libvterm 0.1.4 (with the bug) */
	CHECK("a\x1b*[?::::::::::::::::::::::mb", "a?::::::::::::::::::::::mb");
	CHECK("a\x1b(]b", "ab");
	/* malformed: a parameter after an intermediate */
	CHECK("a\x1b[ 1qb", "ab");
}

static void test_strings_dropped(void **state)
{
	(void)state;
	CHECK("a\x1b]0;title\x07" "b", "ab");
	CHECK("a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\b", "alinkb");
	CHECK("a\x1bP+q544e\x1b\\b", "ab");
	CHECK("a\x1b_apc\x1b\\b\x1b^pm\x07" "c\x1bXsos\x07" "d", "abcd");
	/* an ESC that is not ST ends the string and starts a sequence */
	CHECK("a\x1b]0;t\x1b[1mb", "a\x1b[1mb");
	/* CAN ends it too */
	CHECK("a\x1b]0;t\x18" "b", "ab");
}

static void test_c1_as_utf8_dropped(void **state)
{
	(void)state;
	CHECK("a\xc2\x9b" "31mb\xc2\x9d" "0;x\x07" "c\xc2\x85" "d", "a31mb0;x\x07" "cd");
}

static void test_controls_inside_sequences(void **state)
{
	(void)state;
	/* C0 inside a CSI or ESC sequence: passed on at once, as a terminal
	 * executes it there */
	CHECK("\x1b[1\n;2H", "\n\x1b[1;2H");
	CHECK("\x1b\r(B", "\r\x1b(B");
	/* ESC restarts, CAN and SUB cancel, DEL is ignored */
	CHECK("\x1b[12\x1b[3mx", "\x1b[3mx");
	CHECK("\x1b[12\x18x\x1b[3\x1ay", "xy");
	CHECK("\x1b[1\x7fm", "\x1b[1m");
	/* a byte past ASCII breaks the sequence and is text */
	CHECK("\x1b[1\xc3\xa9m", "\xc3\xa9m");
}

static void test_state_across_feeds(void **state)
{
	(void)state;
	struct vtfilter f;
	buf_t out = {0};
	vtfilter_reset(&f);
	static const char *const parts[] = {"x\x1b]0;long ti", "tle\x07y\x1b[3", "1mz\xc2", "\xa0"};
	for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
		vtfilter_feed(&f, parts[i], strlen(parts[i]), &out);
	buf_reserve(&out, 1);
	out.p[out.len] = 0;
	assert_string_equal(out.p, "xy\x1b[31mz\xc2\xa0");
	buf_free(&out);
}

/* Random bytes: output is never longer than input, and a fed-whole run
 * equals a byte-by-byte run (checked inside filt). */
static void test_random(void **state)
{
	(void)state;
	srand(42);
	char in[512];
	for (int round = 0; round < 2000; round++) {
		size_t n = (size_t)(rand() % (int)sizeof in);
		for (size_t i = 0; i < n; i++) {
			int r = rand() % 16;
			in[i] = r == 0 ? 0x1b : r == 1 ? '[' : r == 2 ? ';' : r == 3 ? ']' :
				r == 4 ? (char)0xc2 : r == 5 ? '\\' : (char)(rand() % 256);
		}
		struct vtfilter f;
		buf_t out = {0};
		vtfilter_reset(&f);
		vtfilter_feed(&f, in, n, &out);
		assert_true(out.len <= n);
		buf_free(&out);
		char *s = filt(in, n);
		free(s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_text_passes),
		cmocka_unit_test(test_sequences_pass),
		cmocka_unit_test(test_oversized_csi_dropped),
		cmocka_unit_test(test_strings_dropped),
		cmocka_unit_test(test_c1_as_utf8_dropped),
		cmocka_unit_test(test_controls_inside_sequences),
		cmocka_unit_test(test_state_across_feeds),
		cmocka_unit_test(test_random),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
