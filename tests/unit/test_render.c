/* test_render.c — unit tests for the output renderer (termd/render.c): text,
 * controls, escape sequences, UTF-8, the window and its callback, split
 * feeds, and a seeded fuzz run checking for valid UTF-8 output. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <locale.h>
#include <cmocka.h>

#include "render.h"
#include "util.h"

/* Lines handed to the callback, each followed by '\n'. */
struct sink {
	buf_t lines;
	size_t n;
	bool check;             /* validate every line (fuzz) */
	bool bad;
};

static bool utf8_valid(const char *s, size_t n)
{
	const uint8_t *p = (const uint8_t *)s;
	size_t i = 0;

	while (i < n) {
		uint8_t b = p[i];
		int need;
		uint8_t lo = 0x80, hi = 0xBF;

		if (b < 0x80) {
			i++;
			continue;
		}
		if (b >= 0xC2 && b <= 0xDF) {
			need = 1;
		} else if (b >= 0xE0 && b <= 0xEF) {
			need = 2;
			if (b == 0xE0)
				lo = 0xA0;
			if (b == 0xED)
				hi = 0x9F;
		} else if (b >= 0xF0 && b <= 0xF4) {
			need = 3;
			if (b == 0xF0)
				lo = 0x90;
			if (b == 0xF4)
				hi = 0x8F;
		} else {
			return false;
		}
		i++;
		for (int k = 0; k < need; k++, i++) {
			if (i >= n || p[i] < lo || p[i] > hi)
				return false;
			lo = 0x80;
			hi = 0xBF;
		}
	}
	return true;
}

static void sink_cb(void *user, const char *line, size_t len)
{
	struct sink *s = user;

	if (s->check) {
		if (!utf8_valid(line, len) || memchr(line, '\n', len) ||
		    (len && line[len - 1] == ' ') || line[len] != 0)
			s->bad = true;
		s->n++;
		return;
	}
	buf_append(&s->lines, line, len);
	buf_putc(&s->lines, '\n');
	s->n++;
}

static const char *sink_str(struct sink *s)
{
	return s->lines.p ? s->lines.p : "";
}

static void feed(render_t *r, const char *s)
{
	render_feed(r, s, strlen(s));
}

/* Live text of a fresh renderer (window 200) fed s; caller frees. */
static char *live_of_n(const char *s, size_t n)
{
	struct sink k = { 0 };
	render_t *r = render_new(200, sink_cb, &k);
	buf_t out = { 0 };

	render_feed(r, s, n);
	render_live(r, &out);
	assert_int_equal(k.n, 0);
	render_free(r);
	buf_free(&k.lines);
	return buf_steal(&out);
}

static char *live_of(const char *s)
{
	return live_of_n(s, strlen(s));
}

#define assert_live(input, want) do { \
	char *got_ = live_of(input); \
	assert_string_equal(got_, want); \
	free(got_); \
} while (0)

static void test_plain_lines(void **state)
{
	struct sink k = { 0 };
	render_t *r = render_new(200, sink_cb, &k);
	buf_t out = { 0 };

	(void)state;
	feed(r, "hello\r\nworld\r\n");
	render_live(r, &out);
	assert_string_equal(out.p, "hello\nworld");
	assert_int_equal(k.n, 0);
	render_finish(r);
	assert_string_equal(sink_str(&k), "hello\nworld\n");
	buf_reset(&out);
	render_live(r, &out);
	assert_string_equal(out.p, "");
	render_free(r);
	buf_free(&out);
	buf_free(&k.lines);

	assert_live("a\r\nb\r\n", "a\nb");
	assert_live("a\r\n\r\nb", "a\n\nb");
	assert_live("", "");
	assert_live("\r\n\r\n", "");
	assert_live("trailing   \r\n", "trailing");
}

static void test_cr_overwrite(void **state)
{
	(void)state;
	assert_live("a\rb\n", "b");
	assert_live("hello\rj", "jello");
	assert_live("abc\n", "abc");
	assert_live("ab\ncd", "ab\n  cd");       /* bare LF keeps the column */
}

static void test_progress_bar(void **state)
{
	buf_t in = { 0 };
	char *got;

	(void)state;
	buf_puts(&in, "downloading\r\n");
	for (int i = 1; i <= 100; i++)
		buf_printf(&in, "\r%3d%%", i);
	buf_puts(&in, "\r\n");
	got = live_of(in.p);
	assert_string_equal(got, "downloading\n100%");
	free(got);
	buf_free(&in);
}

static void test_backspace(void **state)
{
	(void)state;
	assert_live("abc\bX", "abX");
	assert_live("ab\b\b\b\bX", "Xb");
	assert_live("a\b_", "_");
	assert_live("x\b\b\b\by", "y");
}

static void test_tab(void **state)
{
	(void)state;
	assert_live("a\tb", "a       b");
	assert_live("12345678\tx", "12345678        x");
	assert_live("ab\t\r\n", "ab");
	assert_live("abcdefghij\r\tX", "abcdefghXj");  /* tab moves, no erase */
	assert_live("\t\tz", "                z");
	assert_live("\x1b[2Iz", "                z");
	assert_live("abcdefghijk\x1b[Zz", "abcdefghzjk");
}

static void test_sgr_stripped(void **state)
{
	(void)state;
	assert_live("\x1b[1;31mred\x1b[0m plain", "red plain");
	assert_live("\x1b[38;2;10;20;30mrgb\x1b[m", "rgb");
	assert_live("\x1b[38:5:196mx\x1b[39m", "x");
	assert_live("\x1b[?25l\x1b[?1049hhi\x1b[?1049l\x1b[?25h", "hi");
	assert_live("\x1b[>0c\x1b[!p\x1b[2 qok", "ok");
	assert_live("\x1b(B\x1b)0\x1b#8\x1b=\x1b>ok", "ok");
	assert_live("a\x1b", "a");
	assert_live("a\x1b[", "a");
	assert_live("a\x1b[1", "a");
}

static void test_osc_swallowed(void **state)
{
	static const char *in = "\x1b]0;my title\x07hello\x1b]2;other\x1b\\ world"
				"\x1b]8;;http://x.y/\x1b\\link\x1b]8;;\x1b\\!";
	const char *want = "hello worldlink!";
	size_t n = strlen(in);

	(void)state;
	assert_live(in, want);
	for (size_t cut = 0; cut <= n; cut++) {
		struct sink k = { 0 };
		render_t *r = render_new(200, sink_cb, &k);
		buf_t out = { 0 };

		render_feed(r, in, cut);
		render_feed(r, in + cut, n - cut);
		render_live(r, &out);
		assert_string_equal(out.p, want);
		render_free(r);
		buf_free(&out);
	}
	/* DCS, SOS, PM, APC */
	assert_live("a\x1bPq#0;2;0;0;0#1!14~\x1b\\b", "ab");
	assert_live("a\x1bXsos\x1b\\b\x1b^pm\x1b\\c\x1b_apc\x07still\x1b\\d", "abcd");
	/* C1 bytes are not controls: U+009B is ignored, raw 0x9B is invalid */
	assert_live("a\xc2\x9b" "31mb", "a31mb");
	assert_live("a\x9b" "31mb", "a\xef\xbf\xbd" "31mb");
}

static void test_osc_huge(void **state)
{
	size_t n = 300 * 1024;
	char *in = xmalloc(n + 64);
	size_t o = 0;
	char *got;

	(void)state;
	o += (size_t)sprintf(in, "before\x1b]0;");
	memset(in + o, 'x', n);
	o += n;
	o += (size_t)sprintf(in + o, "\x07" "after");
	got = live_of_n(in, o);
	assert_string_equal(got, "beforeafter");
	free(got);
	free(in);
}

static void test_long_line(void **state)
{
	char *in = xmalloc(5000 + 3), *got;

	(void)state;
	memset(in, 'q', 5000);
	memcpy(in + 5000, "\r\n", 3);
	got = live_of(in);
	assert_int_equal(strlen(got), 5000);
	assert_null(strchr(got, '\n'));
	assert_memory_equal(got, in, 5000);
	free(got);
	free(in);
}

static void test_utf8(void **state)
{
	(void)state;
	assert_live("日本語\r\n", "日本語");
	assert_live("e\xcc\x81t\xc3\xa9", "e\xcc\x81t\xc3\xa9");
	assert_live("a\xf0\x9f\x98\x80" "b", "a\xf0\x9f\x98\x80" "b");
	/* wide characters take two columns */
	assert_live("日本語\rX", "X 本語");
	assert_live("日本語\r\x1b[3CX", "日 X語");
	assert_live("ab日\b\bZ", "abZ");
	assert_live("日\bZ", " Z");
	assert_live("日本\x1b[1G\x1b[2X", "  本");
	assert_live("ab\x1b[5Cx", "ab     x");
	/* combining marks stay on their cell, even several */
	assert_live("e\xcc\x81\xcc\xa3x\b\by", "yx");
	assert_live("ae\xcc\x81\bo", "ao");
	assert_live("ae\xcc\x81z", "ae\xcc\x81z");
	assert_live("日\xcc\x81z", "日\xcc\x81z");
	assert_live("\xcc\x81z", "z");               /* nothing to attach to */
	/* zero-width joiner sequences stay together */
	assert_live("\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x92\xbb!",
		    "\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x92\xbb!");
}

/* Combining sequences overwritten again and again: the per-line pool is
 * compacted and the survivors stay attached to the right cells. */
static void test_combining_churn(void **state)
{
	buf_t in = { 0 }, want = { 0 };
	char *got;

	(void)state;
	for (int i = 0; i < 20000; i++)
		buf_puts(&in, "\re\xcc\x81\xcc\x82");
	got = live_of(in.p);
	assert_string_equal(got, "e\xcc\x81\xcc\x82");
	free(got);

	/* the same widths every pass (cells line up), different sequences */
	static const char *seqs[2][3] = {
		{ "a\xcc\x81", "\xe6\x97\xa5\xcc\x82\xcc\x83", "c" },
		{ "b\xcc\x82\xcc\x84", "\xe6\x9c\xac\xcc\x81", "d\xcc\xa3" },
	};
	buf_reset(&in);
	for (int pass = 0; pass < 61; pass++) {
		buf_putc(&in, '\r');
		for (int i = 0; i < 500; i++)
			buf_puts(&in, seqs[(pass + i / 3) % 2][i % 3]);
	}
	for (int i = 0; i < 500; i++)
		buf_puts(&want, seqs[(60 + i / 3) % 2][i % 3]);
	got = live_of(in.p);
	assert_string_equal(got, want.p);
	free(got);
	/* marks beyond the per-cell limit are dropped */
	buf_reset(&in);
	buf_putc(&in, 'o');
	for (int i = 0; i < 100; i++)
		buf_puts(&in, "\xcc\x88");
	got = live_of(in.p);
	assert_int_equal(strlen(got), 1 + 7 * 2);
	free(got);
	buf_free(&in);
	buf_free(&want);
}

static void test_utf8_split(void **state)
{
	static const char *in = "x日\xf0\x9f\x98\x80" "e\xcc\x81\xff" "y";
	size_t n = strlen(in);
	char *want = live_of(in);

	(void)state;
	assert_string_equal(want, "x日\xf0\x9f\x98\x80" "e\xcc\x81\xef\xbf\xbd" "y");
	for (size_t cut = 0; cut <= n; cut++) {
		render_t *r = render_new(200, NULL, NULL);
		buf_t out = { 0 };

		render_feed(r, in, cut);
		render_feed(r, in + cut, n - cut);
		render_live(r, &out);
		assert_string_equal(out.p, want);
		render_free(r);
		buf_free(&out);
	}
	free(want);
}

static void test_utf8_invalid(void **state)
{
	(void)state;
	assert_live("a\xff" "b", "a\xef\xbf\xbd" "b");
	assert_live("\xe6\x97x", "\xef\xbf\xbdx");               /* truncated */
	assert_live("\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd");     /* overlong */
	assert_live("\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
	assert_live("\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
	assert_live("\x80\xbf", "\xef\xbf\xbd\xef\xbf\xbd");
	assert_live("\xe6\x97\x1b[1mx", "\xef\xbf\xbdx");
	assert_live("\xe6\x97\r\n", "\xef\xbf\xbd");

	/* an incomplete character at the very end still shows at finish */
	struct sink k = { 0 };
	render_t *r = render_new(200, sink_cb, &k);
	feed(r, "ok\xe6\x97");
	render_finish(r);
	assert_string_equal(sink_str(&k), "ok\xef\xbf\xbd\n");
	render_free(r);
	buf_free(&k.lines);
}

static void test_erase(void **state)
{
	(void)state;
	assert_live("hello world\r\x1b[6C\x1b[K", "hello");
	assert_live("hello world\r\x1b[6C\x1b[0K", "hello");
	assert_live("hello world\r\x1b[4C\x1b[1K", "      world");
	assert_live("hello world\x1b[2Kx", "           x");
	assert_live("hello\rab\x1b[K", "ab");
	assert_live("hello world\r\x1b[2C\x1b[3X", "he    world");
	assert_live("hello world\r\x1b[2C\x1b[3P", "he world");
	assert_live("hello world\r\x1b[2C\x1b[3@", "he   llo world");
	assert_live("hello\r\x1b[99999P", "");
	assert_live("hello\r\x1b[2@", "  hello");
	assert_live("hello\x1b[99999X", "hello");
	assert_live("a\r\nb\r\nc\x1b[1;1H\x1b[J", "");
	assert_live("a\r\nbcd\r\ne\x1b[2;2H\x1b[J", "a\nb");
	assert_live("a\r\nbcd\r\ne\x1b[2;2H\x1b[1J", "\n  d\ne");
	assert_live("a\r\nb\r\nc\x1b[2Jx", "\n\n x");
	assert_live("a\r\nb\r\nc\x1b[H\x1b[2Jx\r\ny", "x\ny");
	assert_live("a\r\nb\r\nc\x1b[3J", "");
	assert_live("a\r\nb\r\nc\x1b" "cx", "x");
}

static void test_cursor_up(void **state)
{
	(void)state;
	/* docker-style multi-line progress */
	assert_live("a: waiting\r\nb: waiting\r\n"
		    "\x1b[2A\r\x1b[2Ka: done\r\n\x1b[2Kb: 50%\r\n"
		    "\x1b[2A\r\x1b[2Ka: done\r\n\x1b[2Kb: done\r\n",
		    "a: done\nb: done");
	assert_live("one\r\ntwo\r\nthree\x1b[1A\rTWO", "one\nTWO\nthree");
	assert_live("x\x1b[5Ay", "xy");                 /* stays in the window */
	assert_live("a\r\nb\x1b[9Bc", "a\nbc");         /* B does not add lines */
	assert_live("a\r\nb\r\nc\x1b[2F!\x1b[E?", "!\n?\nc");
	assert_live("a\r\nb\r\nc\x1bM\rM\x1bM\rN", "N\nM\nc");
	assert_live("a\r\nb\r\nc\x1bMM", "a\nbM\nc");     /* column kept */
	assert_live("a\x1bMb", "ab");                   /* RI at the top stays */
	assert_live("a\x1b" "Db\x1b" "Ec", "a\n b\nc");
	assert_live("ab\x1b" "7\r\nxyz\x1b" "8!", "ab!\nxyz");
	assert_live("ab\x1b[s\r\nxyz\x1b[u!", "ab!\nxyz");
	assert_live("abc\x1b[2Gx\x1b[5`y", "axc y");
}

static void test_cursor_position(void **state)
{
	(void)state;
	assert_live("a\r\nb\r\nc\x1b[2;3HX", "a\nb X\nc");
	assert_live("a\r\nb\r\nc\x1b[HX", "X\nb\nc");
	assert_live("a\r\nb\r\nc\x1b[;2fX", "aX\nb\nc");
	assert_live("\x1b[4;2Hx", "\n\n\n x");         /* H creates lines */
	assert_live("top\x1b[3dy", "top\n\n   y");
	assert_live("\x1b[999999;999999H", "");
	assert_live("ab\x1b[99999999Dc", "cb");
}

static void test_insert_delete_lines(void **state)
{
	(void)state;
	assert_live("a\r\nb\r\nc\x1b[2H\x1b[Lx", "a\nx\nb\nc");
	assert_live("a\r\nb\r\nc\x1b[2H\x1b[2My", "a\ny");
	assert_live("a\r\nb\r\nc\x1b[1H\x1b[9M", "");
	assert_live("a\r\nb\r\nc\x1b[3H\x1b[9Lz", "a\nb\nz\n\n\n\n\n\n\n\n\nc");

	/* a full window: inserted lines push the bottom ones out */
	struct sink k = { 0 };
	render_t *r = render_new(3, sink_cb, &k);
	buf_t out = { 0 };
	feed(r, "1\r\n2\r\n3\x1b[2H\x1b[1Lx");
	render_live(r, &out);
	assert_string_equal(out.p, "1\nx\n2");
	feed(r, "\x1b[3H\r\n4");
	buf_reset(&out);
	render_live(r, &out);
	assert_string_equal(out.p, "x\n2\n4");
	assert_string_equal(sink_str(&k), "1\n");
	render_free(r);
	buf_free(&out);
	buf_free(&k.lines);

	/* the same once the window has wrapped around its ring */
	struct sink k2 = { 0 };
	r = render_new(3, sink_cb, &k2);
	feed(r, "1\r\n2\r\n3\r\n4\r\n5\x1b[2H\x1b[Lx");
	render_live(r, &out);
	assert_string_equal(out.p, "3\nx\n4");
	feed(r, "\x1b[1H\x1b[My\r\nz\r\nw");
	buf_reset(&out);
	render_live(r, &out);
	assert_string_equal(out.p, "y\nz\nw");
	render_finish(r);
	assert_string_equal(sink_str(&k2), "1\n2\ny\nz\nw\n");
	render_free(r);
	buf_free(&out);
	buf_free(&k2.lines);
}

static void test_window_overflow(void **state)
{
	struct sink k = { 0 };
	render_t *r = render_new(3, sink_cb, &k);
	buf_t out = { 0 };

	(void)state;
	for (int i = 1; i <= 10; i++) {
		char tmp[16];
		snprintf(tmp, sizeof tmp, "%d\r\n", i);
		feed(r, tmp);
	}
	assert_string_equal(sink_str(&k), "1\n2\n3\n4\n5\n6\n7\n8\n");
	render_live(r, &out);
	assert_string_equal(out.p, "9\n10");
	/* H is relative to the window's top */
	feed(r, "\x1b[1;1HX");
	buf_reset(&out);
	render_live(r, &out);
	assert_string_equal(out.p, "X\n10");
	render_finish(r);
	assert_string_equal(sink_str(&k), "1\n2\n3\n4\n5\n6\n7\n8\nX\n10\n");
	render_free(r);
	buf_free(&out);
	buf_free(&k.lines);

	/* window of one line: every new line finalises the previous one */
	struct sink k1 = { 0 };
	r = render_new(1, sink_cb, &k1);
	feed(r, "a\r\n\r\nb  \r\nc");
	assert_string_equal(sink_str(&k1), "a\n\nb\n");
	render_finish(r);
	assert_string_equal(sink_str(&k1), "a\n\nb\nc\n");
	render_free(r);
	buf_free(&k1.lines);

	/* cursor-up can't reach lines that already left the window */
	struct sink k2 = { 0 };
	r = render_new(2, sink_cb, &k2);
	feed(r, "a\r\nb\r\nc\x1b[9AX");
	buf_reset(&out);
	render_live(r, &out);
	assert_string_equal(out.p, "bX\nc");
	assert_string_equal(sink_str(&k2), "a\n");
	render_free(r);
	buf_free(&out);
	buf_free(&k2.lines);
}

/* The window's slots grow as its lines come (8, doubling, up to 200): the
 * first growth from a ring that has wrapped (the top moved by a commit),
 * an insert that needs many slots at once, delete, then the window full. */
static void test_window_slots_grow(void **state)
{
	struct sink k = { 0 };
	render_t *r = render_new(200, sink_cb, &k);
	buf_t out = { 0 }, want = { 0 };
	char tmp[32];

	(void)state;
	feed(r, "a\r\nb\r\nc\r\nd\r\ne");
	render_commit_above_cursor(r);
	assert_string_equal(sink_str(&k), "a\nb\nc\nd\n");
	for (int i = 1; i <= 150; i++) {
		snprintf(tmp, sizeof tmp, "\r\n%d", i);
		feed(r, tmp);
	}
	render_live(r, &out);
	buf_printf(&want, "e");
	for (int i = 1; i <= 150; i++)
		buf_printf(&want, "\n%d", i);
	assert_string_equal(out.p, want.p);
	feed(r, "\x1b[2H\x1b[3LX\x1b[1M\x1b[153H");
	for (int i = 151; i <= 250; i++) {
		snprintf(tmp, sizeof tmp, "\r\n%d", i);
		feed(r, tmp);
	}
	buf_reset(&want);
	buf_printf(&want, "a\nb\nc\nd\ne\n\n\n");
	for (int i = 1; i <= 50; i++)
		buf_printf(&want, "%d\n", i);
	assert_string_equal(sink_str(&k), want.p);
	buf_reset(&out);
	render_live(r, &out);
	buf_reset(&want);
	for (int i = 51; i <= 250; i++)
		buf_printf(&want, "%s%d", i > 51 ? "\n" : "", i);
	assert_string_equal(out.p, want.p);
	render_finish(r);
	assert_int_equal(k.n, 4 + 53 + 200);
	render_free(r);

	/* an insert on a window of two lines, eight slots: 22 lines at once */
	r = render_new(200, NULL, NULL);
	feed(r, "a\r\nb\x1b[1H\x1b[20Lx");
	buf_reset(&out);
	render_live(r, &out);
	buf_reset(&want);
	buf_printf(&want, "x");
	for (int i = 1; i < 20; i++)
		buf_putc(&want, '\n');
	buf_printf(&want, "\na\nb");
	assert_string_equal(out.p, want.p);
	render_free(r);
	buf_free(&out);
	buf_free(&want);
	buf_free(&k.lines);
}

static void test_commit_above_cursor(void **state)
{
	struct sink k = { 0 };
	render_t *r = render_new(200, sink_cb, &k);
	buf_t out = { 0 };

	(void)state;
	feed(r, "a\r\nb\r\nc");
	render_commit_above_cursor(r);
	assert_string_equal(sink_str(&k), "a\nb\n");
	render_live(r, &out);
	assert_string_equal(out.p, "c");
	feed(r, "\x1b[1;1HX\x1b[5A\r\nnext");
	buf_reset(&out);
	render_live(r, &out);
	assert_string_equal(out.p, "X\nnext");
	feed(r, "\x1b[A");
	render_commit_above_cursor(r);                  /* cursor on top: no-op */
	assert_int_equal(k.n, 2);
	render_finish(r);
	assert_string_equal(sink_str(&k), "a\nb\nX\nnext\n");
	render_free(r);
	buf_free(&out);
	buf_free(&k.lines);
}

static void test_finish(void **state)
{
	struct sink k = { 0 };
	render_t *r = render_new(200, sink_cb, &k);
	buf_t out = { 0 };

	(void)state;
	feed(r, "a\r\n\r\n   \r\n\r\n");
	render_finish(r);
	assert_string_equal(sink_str(&k), "a\n");
	feed(r, "\r\nb\r\n");
	render_finish(r);
	assert_string_equal(sink_str(&k), "a\n\nb\n");
	/* everything reset: parser and cursor */
	feed(r, "x\x1b]0;unterminated");
	render_finish(r);
	feed(r, "\x1b[A\x1b[3Cy");
	render_live(r, &out);
	assert_string_equal(out.p, "   y");
	render_finish(r);
	assert_string_equal(sink_str(&k), "a\n\nb\nx\n   y\n");
	render_finish(r);
	assert_int_equal(k.n, 5);
	render_free(r);
	buf_free(&out);
	buf_free(&k.lines);
}

static void test_clamps(void **state)
{
	char *got;

	(void)state;
	got = live_of("hello\r\x1b[99999@");            /* 65535 blanks */
	assert_int_equal(strlen(got), 65536);
	assert_int_equal(got[65535], 'h');
	free(got);
	got = live_of("\x1b[99999999Cx");
	assert_int_equal(strlen(got), 65536);
	assert_int_equal(got[65535], 'x');
	free(got);
	got = live_of("\x1b[99999999;99999999;1;2;3;4;5;6;7;8;9;10;11;12;13;14;15;16;17;18;19;20Hz");
	assert_int_equal(strlen(got), 199 + 65535);    /* col 65535 */
	free(got);
	/* text never wraps before the column limit, then it does */
	size_t n = 70000;
	char *in = xmalloc(n);
	memset(in, 'w', n);
	got = live_of_n(in, n);
	assert_int_equal(strlen(got), n + 1);
	assert_int_equal(got[65536], '\n');
	free(got);
	free(in);
}

/* A mix of everything, fed at once and byte by byte. */
static const char mixed[] =
	"$ make\r\n\x1b[1;32mok\x1b[0m  \tdone\r\n"
	"\x1b]0;title\x07[1/3] 10%\r[1/3] 55%\r[1/3] 100%\r\n"
	"日本語 e\xcc\x81 \xf0\x9f\x98\x80 \xff\xfe bad\r\n"
	"a: waiting\r\nb: waiting\r\n\x1b[2A\x1b[2Ka: ok\x1b[1B\r\x1b[2Kb: ok\r\n"
	"abc\b\bX\x1b[K\x1bP+q\x1b\\\x1b(B\x1b[?25h\r\n"
	"\x1b[3Gxyz\x1b[2D\x1b[2@\x1b[1P\x1b" "7\r\n\r\nlast\x1b" "8!\r\n";

static void test_bytewise(void **state)
{
	size_t n = sizeof mixed - 1;
	struct sink ka = { 0 }, kb = { 0 };
	render_t *a = render_new(4, sink_cb, &ka), *b = render_new(4, sink_cb, &kb);
	buf_t oa = { 0 }, ob = { 0 };

	(void)state;
	render_feed(a, mixed, n);
	for (size_t i = 0; i < n; i++)
		render_feed(b, mixed + i, 1);
	render_live(a, &oa);
	render_live(b, &ob);
	assert_string_equal(oa.p, ob.p);
	assert_string_equal(sink_str(&ka), sink_str(&kb));
	render_finish(a);
	render_finish(b);
	assert_string_equal(sink_str(&ka), sink_str(&kb));
	assert_string_equal(sink_str(&ka),
		"$ make\n"
		"ok      done\n"
		"[1/3] 100%\n"
		"日本語 e\xcc\x81 \xf0\x9f\x98\x80 \xef\xbf\xbd\xef\xbf\xbd bad\n"
		"a: ok\n"
		"b: ok\n"
		"aX\n"
		"  x!yz\n"
		"\n"
		"last\n");
	render_free(a);
	render_free(b);
	buf_free(&oa);
	buf_free(&ob);
	buf_free(&ka.lines);
	buf_free(&kb.lines);
}

static uint64_t rng_state;

static uint32_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state >> 16);
}

/* Random bytes, biased towards escape sequences, controls and UTF-8. */
static void fuzz_fill(char *p, size_t n, int bias)
{
	static const char *frags[] = {
		"\x1b[", "\x1b]", "\x1bP", "\x1b\\", "\x07", "\r\n", "\r", "\b",
		"\t", ";", "99999", "1", "2", "?", "\xcc\x81", "日", "\xf0\x9f\x98",
		"\x1b" "7", "\x1b" "8", "\x1bM", "\x1b" "c", "\x1b(", " ",
	};
	static const char finals[] = "ABCDEFGHJKLMPXdf@`mhlsuIZae";
	size_t i = 0;

	while (i < n) {
		uint32_t x = rng();
		const char *f = NULL;
		char c[2] = { 0, 0 };

		if (!bias || x % 4 == 0) {
			c[0] = (char)(rng() & 0xFF);
			f = c;
		} else if (x % 4 == 1) {
			f = frags[rng() % (sizeof frags / sizeof *frags)];
		} else if (x % 4 == 2) {
			c[0] = finals[rng() % (sizeof finals - 1)];
			f = c;
		} else {
			c[0] = (char)('a' + rng() % 26);
			f = c;
		}
		size_t k = f == c ? 1 : strlen(f);
		if (k > n - i)
			k = n - i;
		memcpy(p + i, f, k);
		i += k;
	}
}

static void test_fuzz(void **state)
{
	size_t n = 4u << 20;
	char *in = xmalloc(n);

	(void)state;
	rng_state = 0x9E3779B97F4A7C15ull;
	for (int bias = 0; bias < 2; bias++) {
		for (int rows = 1; rows <= 200; rows += 199) {
			struct sink k = { .check = true };
			render_t *r = render_new(rows, sink_cb, &k);
			buf_t out = { 0 };
			size_t i = 0;

			fuzz_fill(in, n, bias);
			while (i < n) {
				size_t m = 1 + rng() % 4096;
				if (m > n - i)
					m = n - i;
				render_feed(r, in + i, m);
				i += m;
				if (rng() % 64 == 0) {
					buf_reset(&out);
					render_live(r, &out);
					assert_true(utf8_valid(out.p, out.len));
				}
				if (rng() % 256 == 0)
					render_commit_above_cursor(r);
			}
			buf_reset(&out);
			render_live(r, &out);
			assert_true(utf8_valid(out.p, out.len));
			render_finish(r);
			assert_false(k.bad);
			assert_true(k.n > 0);
			render_free(r);
			buf_free(&out);
		}
	}
	free(in);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plain_lines),
		cmocka_unit_test(test_cr_overwrite),
		cmocka_unit_test(test_progress_bar),
		cmocka_unit_test(test_backspace),
		cmocka_unit_test(test_tab),
		cmocka_unit_test(test_sgr_stripped),
		cmocka_unit_test(test_osc_swallowed),
		cmocka_unit_test(test_osc_huge),
		cmocka_unit_test(test_long_line),
		cmocka_unit_test(test_utf8),
		cmocka_unit_test(test_combining_churn),
		cmocka_unit_test(test_utf8_split),
		cmocka_unit_test(test_utf8_invalid),
		cmocka_unit_test(test_erase),
		cmocka_unit_test(test_cursor_up),
		cmocka_unit_test(test_cursor_position),
		cmocka_unit_test(test_insert_delete_lines),
		cmocka_unit_test(test_window_overflow),
		cmocka_unit_test(test_window_slots_grow),
		cmocka_unit_test(test_commit_above_cursor),
		cmocka_unit_test(test_finish),
		cmocka_unit_test(test_clamps),
		cmocka_unit_test(test_bytewise),
		cmocka_unit_test(test_fuzz),
	};

	if (!setlocale(LC_CTYPE, "C.UTF-8")) {
		fprintf(stderr, "test_render: C.UTF-8 locale unavailable\n");
		return 1;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
