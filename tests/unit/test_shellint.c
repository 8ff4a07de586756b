/* test_shellint.c — unit tests for termd/shellint.c: the scanner of a
 * session's output (command marks with the right nonce, look-alike marks,
 * other OSCs, titles, the readline "ready" CSI, BEL and ST terminators,
 * feeds split at every byte, over-long OSCs, escapes cut between feeds) and
 * how a command is typed (bracketed paste for bash, a sourced file for sh). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <termios.h>
#include <unistd.h>

#include "core.h"

/* ---- a recording callback ---- */

/* One recorded event. Adjacent SI_TEXT events are merged, so that results
 * do not depend on how the scanner chunks its text. */
struct ev {
	enum si_event ev;
	char *data;
	size_t len;
	int code;
};

struct rec {
	struct ev *ev;
	size_t n, cap;
	buf_t text;               /* all SI_TEXT data concatenated */
};

static void rec_cb(void *user, enum si_event ev, const char *data, size_t len, int code)
{
	struct rec *r = user;
	if (ev == SI_TEXT) {
		assert_non_null(data);
		assert_true(len > 0);
		buf_append(&r->text, data, len);
		if (r->n && r->ev[r->n - 1].ev == SI_TEXT) {
			struct ev *e = &r->ev[r->n - 1];
			e->data = xrealloc(e->data, e->len + len + 1);
			memcpy(e->data + e->len, data, len);
			e->len += len;
			e->data[e->len] = 0;
			return;
		}
	}
	if (r->n == r->cap) {
		r->cap = r->cap ? 2 * r->cap : 16;
		r->ev = xrealloc(r->ev, r->cap * sizeof *r->ev);
	}
	struct ev *e = &r->ev[r->n++];
	e->ev = ev;
	e->len = data ? len : 0;
	e->data = xmalloc(e->len + 1);
	if (e->len)
		memcpy(e->data, data, e->len);
	e->data[e->len] = 0;
	e->code = code;
}

static void rec_free(struct rec *r)
{
	for (size_t i = 0; i < r->n; i++)
		free(r->ev[i].data);
	free(r->ev);
	buf_free(&r->text);
	memset(r, 0, sizeof *r);
}

/* Number of events of one kind. */
static size_t rec_count(const struct rec *r, enum si_event ev)
{
	size_t n = 0;
	for (size_t i = 0; i < r->n; i++)
		n += r->ev[i].ev == ev;
	return n;
}

static void assert_same_events(const struct rec *a, const struct rec *b)
{
	assert_int_equal(a->n, b->n);
	for (size_t i = 0; i < a->n; i++) {
		assert_int_equal(a->ev[i].ev, b->ev[i].ev);
		assert_int_equal(a->ev[i].len, b->ev[i].len);
		assert_memory_equal(a->ev[i].data, b->ev[i].data, a->ev[i].len);
		assert_int_equal(a->ev[i].code, b->ev[i].code);
	}
}

/* A scanner plus its recorder. */
struct fx {
	struct shellint *si;
	struct rec r;
	char nonce[64];
};

static int fx_setup(void **state)
{
	struct fx *f = xcalloc(1, sizeof *f);
	f->si = shellint_new(rec_cb, &f->r);
	snprintf(f->nonce, sizeof f->nonce, "%s", shellint_nonce(f->si));
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;
	shellint_free(f->si);
	rec_free(&f->r);
	free(f);
	return 0;
}

static void feed(struct fx *f, const char *s)
{
	shellint_feed(f->si, s, strlen(s));
}

/* "ESC ] 6973 ; nonce ; rest BEL" into b. */
static void mark(buf_t *b, const char *nonce, const char *rest)
{
	buf_printf(b, "\x1b]6973;%s;%s\x07", nonce, rest);
}

/* ---- tests ---- */

static void test_nonce(void **state)
{
	struct fx *f = *state;
	assert_int_equal(strlen(f->nonce), 32);
	for (const char *p = f->nonce; *p; p++)
		assert_non_null(strchr("0123456789abcdef", *p));
	struct shellint *other = shellint_new(rec_cb, &f->r);
	assert_string_not_equal(shellint_nonce(other), f->nonce);
	shellint_free(other);
}

static void test_plain_text(void **state)
{
	struct fx *f = *state;
	const char *in = "hello\r\nworld\t\x07\b 日本語 \x1b(B\x1b=\x1b[1;31mred\x1b[0m\r\n";
	feed(f, in);
	assert_int_equal(f->r.text.len, strlen(in));
	assert_memory_equal(f->r.text.p, in, strlen(in));
	for (size_t i = 0; i < f->r.n; i++)
		assert_int_equal(f->r.ev[i].ev, SI_TEXT);
}

static void test_plain_binary(void **state)
{
	struct fx *f = *state;
	/* every byte value except ESC, in several feeds */
	char in[255 * 4];
	size_t n = 0;
	for (int k = 0; k < 4; k++)
		for (int c = 0; c < 256; c++)
			if (c != 0x1b)
				in[n++] = (char)c;
	shellint_feed(f->si, in, 100);
	shellint_feed(f->si, in + 100, n - 100);
	assert_int_equal(f->r.text.len, n);
	assert_memory_equal(f->r.text.p, in, n);
	assert_int_equal(f->r.n, 1);
}

static void test_mark_start(void **state)
{
	struct fx *f = *state;
	buf_t in = {0};
	buf_puts(&in, "before");
	mark(&in, f->nonce, "C");
	buf_puts(&in, "after");
	shellint_feed(f->si, in.p, in.len);
	assert_int_equal(f->r.n, 3);
	assert_int_equal(f->r.ev[0].ev, SI_TEXT);
	assert_string_equal(f->r.ev[0].data, "before");
	assert_int_equal(f->r.ev[1].ev, SI_MARK_START);
	assert_int_equal(f->r.ev[2].ev, SI_TEXT);
	assert_string_equal(f->r.ev[2].data, "after");
	assert_null(memmem(f->r.text.p, f->r.text.len, "6973", 4));
	buf_free(&in);
}

static void test_mark_done(void **state)
{
	struct fx *f = *state;
	buf_t in = {0};
	mark(&in, f->nonce, "D;0;/home/user");
	shellint_feed(f->si, in.p, in.len);
	assert_int_equal(f->r.n, 1);
	assert_int_equal(f->r.ev[0].ev, SI_MARK_DONE);
	assert_int_equal(f->r.ev[0].code, 0);
	assert_string_equal(f->r.ev[0].data, "/home/user");
	assert_int_equal(f->r.text.len, 0);
	buf_free(&in);
}

static void test_mark_done_cwd_odd(void **state)
{
	struct fx *f = *state;
	buf_t in = {0};
	mark(&in, f->nonce, "D;1;/tmp/a dir;with;semis");
	mark(&in, f->nonce, "D;2;/tmp/ünï cödé");
	mark(&in, f->nonce, "D;3;");
	shellint_feed(f->si, in.p, in.len);
	assert_int_equal(f->r.n, 3);
	assert_int_equal(f->r.ev[0].ev, SI_MARK_DONE);
	assert_int_equal(f->r.ev[0].code, 1);
	assert_string_equal(f->r.ev[0].data, "/tmp/a dir;with;semis");
	assert_int_equal(f->r.ev[1].code, 2);
	assert_string_equal(f->r.ev[1].data, "/tmp/ünï cödé");
	assert_int_equal(f->r.ev[2].ev, SI_MARK_DONE);
	assert_int_equal(f->r.ev[2].code, 3);
	assert_int_equal(f->r.ev[2].len, 0);
	buf_free(&in);
}

static void test_mark_done_codes(void **state)
{
	struct fx *f = *state;
	static const struct {
		const char *s;
		int code;
	} cases[] = {
		{"0", 0}, {"1", 1}, {"127", 127}, {"130", 130}, {"255", 255},
		{"-1", -1}, {"-255", -255}, {"99999", 99999},
	};
	buf_t in = {0};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		buf_reset(&in);
		buf_printf(&in, "D;%s;/x", cases[i].s);
		buf_t m = {0};
		mark(&m, f->nonce, in.p);
		shellint_feed(f->si, m.p, m.len);
		buf_free(&m);
	}
	assert_int_equal(f->r.n, sizeof cases / sizeof cases[0]);
	for (size_t i = 0; i < f->r.n; i++) {
		assert_int_equal(f->r.ev[i].ev, SI_MARK_DONE);
		assert_int_equal(f->r.ev[i].code, cases[i].code);
		assert_string_equal(f->r.ev[i].data, "/x");
	}
	/* absurdly long numbers: no overflow (UBSan), still a done mark with
	 * its cwd */
	rec_free(&f->r);
	buf_t m = {0};
	mark(&m, f->nonce, "D;99999999999999999999999999;/y");
	mark(&m, f->nonce, "D;-99999999999999999999999999;/z");
	shellint_feed(f->si, m.p, m.len);
	assert_int_equal(f->r.n, 2);
	assert_int_equal(f->r.ev[0].ev, SI_MARK_DONE);
	assert_true(f->r.ev[0].code > 0);
	assert_string_equal(f->r.ev[0].data, "/y");
	assert_true(f->r.ev[1].code < 0);
	assert_string_equal(f->r.ev[1].data, "/z");
	buf_free(&m);
	buf_free(&in);
}

/* A done mark whose exit code is not -?[0-9]+ followed by ';' or the end
 * is malformed: swallowed (it is ours), no event, nothing passed on. */
static void test_mark_done_malformed_code(void **state)
{
	struct fx *f = *state;
	buf_t m = {0};
	mark(&m, f->nonce, "D;12x;/a");
	mark(&m, f->nonce, "D;;/b");
	mark(&m, f->nonce, "D;-;/c");
	mark(&m, f->nonce, "D;-2231abcdef;/d");
	mark(&m, f->nonce, "D;7");
	shellint_feed(f->si, m.p, m.len);
	assert_int_equal(f->r.n, 1);
	assert_int_equal(f->r.ev[0].ev, SI_MARK_DONE);
	assert_int_equal(f->r.ev[0].code, 7);
	assert_int_equal(f->r.ev[0].len, 0);
	assert_int_equal(f->r.text.len, 0);
	buf_free(&m);
}

/* PS2's continuation mark, between readline's own sequences. */
static void test_mark_cont(void **state)
{
	struct fx *f = *state;
	buf_t in = {0};
	buf_puts(&in, "cat << EOF\r\n\x1b[?2004l\r\x1b[?2004h");
	mark(&in, f->nonce, "P");
	buf_puts(&in, "> ");
	shellint_feed(f->si, in.p, in.len);
	assert_int_equal(rec_count(&f->r, SI_MARK_CONT), 1);
	assert_int_equal(rec_count(&f->r, SI_READY), 1);
	assert_null(strstr(f->r.text.p, "6973"));
	assert_non_null(strstr(f->r.text.p, "> "));
	buf_free(&in);
}

static void test_wrong_nonce(void **state)
{
	struct fx *f = *state;
	buf_t in = {0};
	char wrong[64];
	snprintf(wrong, sizeof wrong, "%s", f->nonce);
	wrong[0] = wrong[0] == '0' ? '1' : '0';
	mark(&in, wrong, "C");
	mark(&in, wrong, "D;0;/tmp");
	mark(&in, "", "D;0;/tmp");
	mark(&in, "nonce", "C");
	buf_printf(&in, "\x1b]6973;%.31s;C\x07", f->nonce);    /* a prefix */
	buf_printf(&in, "\x1b]6973;%sX;C\x07", f->nonce);      /* longer */
	buf_printf(&in, "\x1b]6973;%s\x07", f->nonce);         /* nothing after */
	buf_printf(&in, "\x1b]6974;%s;C\x07", f->nonce);       /* other number */
	buf_printf(&in, "\x1b]6973%s;C\x07", f->nonce);        /* no ';' */
	buf_printf(&in, "6973;%s;C\x07", f->nonce);            /* no ESC ] */
	shellint_feed(f->si, in.p, in.len);
	assert_int_equal(rec_count(&f->r, SI_MARK_START), 0);
	assert_int_equal(rec_count(&f->r, SI_MARK_DONE), 0);
	assert_int_equal(f->r.text.len, in.len);
	assert_memory_equal(f->r.text.p, in.p, in.len);
	buf_free(&in);
}

static void test_other_osc_pass(void **state)
{
	struct fx *f = *state;
	const char *in =
		"\x1b]133;A\x07" "$ " "\x1b]133;B\x07"
		"\x1b]7;file://host/tmp\x07"
		"\x1b]133;D;0\x1b\\"
		"\x1b]7;file://host/home\x1b\\"
		"\x1b]8;;http://x\x07link\x1b]8;;\x07"
		"\x1b]52;c;aGVsbG8=\x07"
		"\x1b]\x07"                      /* empty */
		"\x1b]1;icon\x07";               /* icon name: not a title */
	feed(f, in);
	assert_int_equal(f->r.n, 1);
	assert_int_equal(f->r.ev[0].ev, SI_TEXT);
	assert_string_equal(f->r.text.p, in);
}

static void test_st_terminator(void **state)
{
	struct fx *f = *state;
	buf_t in = {0};
	buf_printf(&in, "a\x1b]6973;%s;C\x1b\\b", f->nonce);
	buf_printf(&in, "\x1b]6973;%s;D;7;/s t\x1b\\c", f->nonce);
	shellint_feed(f->si, in.p, in.len);
	assert_int_equal(f->r.n, 5);
	assert_string_equal(f->r.ev[0].data, "a");
	assert_int_equal(f->r.ev[1].ev, SI_MARK_START);
	assert_string_equal(f->r.ev[2].data, "b");
	assert_int_equal(f->r.ev[3].ev, SI_MARK_DONE);
	assert_int_equal(f->r.ev[3].code, 7);
	assert_string_equal(f->r.ev[3].data, "/s t");
	assert_string_equal(f->r.ev[4].data, "c");
	buf_free(&in);
}

static void test_titles(void **state)
{
	struct fx *f = *state;
	const char *in = "x\x1b]0;my title\x07y\x1b]2;other; title\x1b\\z\x1b]2;\x07";
	feed(f, in);
	/* the text is all passed on, the titles reported as well */
	assert_string_equal(f->r.text.p, in);
	assert_int_equal(rec_count(&f->r, SI_TITLE), 3);
	size_t k = 0;
	const char *want[] = {"my title", "other; title", ""};
	for (size_t i = 0; i < f->r.n; i++) {
		if (f->r.ev[i].ev != SI_TITLE)
			continue;
		assert_string_equal(f->r.ev[i].data, want[k]);
		k++;
	}
	/* the title event comes before the OSC's own text, after the x */
	assert_int_equal(f->r.ev[0].ev, SI_TEXT);
	assert_string_equal(f->r.ev[0].data, "x");
	assert_int_equal(f->r.ev[1].ev, SI_TITLE);
}

static void test_ready(void **state)
{
	struct fx *f = *state;
	const char *in = "\x1b[?2004l" "out\r\n" "\x1b[?2004h" "$ " "\x1b[?1h\x1b[?2004;1h\x1b[2004h";
	feed(f, in);
	assert_string_equal(f->r.text.p, in);
	assert_int_equal(rec_count(&f->r, SI_READY), 1);
	/* reported once the final 'h' is seen: the text before includes it */
	size_t pos = 0;
	for (size_t i = 0; i < f->r.n; i++) {
		if (f->r.ev[i].ev == SI_READY)
			break;
		pos += f->r.ev[i].len;
	}
	assert_int_equal(pos, strlen("\x1b[?2004l" "out\r\n" "\x1b[?2004h"));
}

/* A stream with every kind of thing in it. */
static void build_mixed(buf_t *in, const char *nonce)
{
	buf_puts(in, "$ ls\r\n");
	mark(in, nonce, "C");
	buf_puts(in, "\x1b[01;34mdir\x1b[0m  file\r\n");
	buf_puts(in, "\x1b]0;user@host: ~\x07");
	mark(in, nonce, "D;130;/home/a b;c");
	buf_puts(in, "\x1b]133;A\x1b\\");
	buf_printf(in, "\x1b]6973;%s;D;2;/st\x1b\\", nonce);
	buf_puts(in, "\x1b[?2004h$ ");
}

static void test_split_everywhere(void **state)
{
	struct fx *f = *state;
	buf_t in = {0};
	build_mixed(&in, f->nonce);

	/* the reference: the whole stream at once, with f's nonce */
	shellint_feed(f->si, in.p, in.len);
	assert_int_equal(rec_count(&f->r, SI_MARK_START), 1);
	assert_int_equal(rec_count(&f->r, SI_MARK_DONE), 2);
	assert_int_equal(rec_count(&f->r, SI_TITLE), 1);
	assert_int_equal(rec_count(&f->r, SI_READY), 1);

	/* every split point, through a fresh scanner with the same nonce (a
	 * scanner's nonce is random, so rebuild the stream for each) */
	for (size_t cut = 0; cut <= in.len; cut++) {
		struct rec r = {0};
		struct shellint *si = shellint_new(rec_cb, &r);
		buf_t in2 = {0};
		build_mixed(&in2, shellint_nonce(si));
		assert_int_equal(in2.len, in.len);
		shellint_feed(si, in2.p, cut);
		shellint_feed(si, in2.p + cut, in2.len - cut);
		assert_same_events(&f->r, &r);
		shellint_free(si);
		rec_free(&r);
		buf_free(&in2);
	}

	/* and one byte at a time */
	struct rec r = {0};
	struct shellint *si = shellint_new(rec_cb, &r);
	buf_t in2 = {0};
	build_mixed(&in2, shellint_nonce(si));
	for (size_t i = 0; i < in2.len; i++)
		shellint_feed(si, in2.p + i, 1);
	assert_same_events(&f->r, &r);
	shellint_free(si);
	rec_free(&r);
	buf_free(&in2);
	buf_free(&in);
}

static void test_split_mark_two_feeds(void **state)
{
	struct fx *f = *state;
	buf_t m = {0};
	mark(&m, f->nonce, "D;42;/x;y");
	for (size_t cut = 0; cut <= m.len; cut++) {
		rec_free(&f->r);
		shellint_feed(f->si, m.p, cut);
		shellint_feed(f->si, m.p + cut, m.len - cut);
		assert_int_equal(f->r.n, 1);
		assert_int_equal(f->r.ev[0].ev, SI_MARK_DONE);
		assert_int_equal(f->r.ev[0].code, 42);
		assert_string_equal(f->r.ev[0].data, "/x;y");
	}
	buf_free(&m);
}

static void test_long_osc(void **state)
{
	struct fx *f = *state;
	size_t body = 20000;
	buf_t in = {0};
	buf_puts(&in, "\x1b]0;");
	for (size_t i = 0; i < body; i++)
		buf_putc(&in, (char)('a' + i % 26));
	size_t before_end = in.len;
	buf_puts(&in, "\x07tail");
	mark(&in, f->nonce, "D;0;/after");

	/* the held part is let go before the OSC ends, not at its end */
	shellint_feed(f->si, in.p, before_end);
	assert_true(f->r.text.len > 0);
	assert_true(f->r.text.len >= before_end - 8192 - 16);
	shellint_feed(f->si, in.p + before_end, in.len - before_end);

	/* everything passed on, then the next mark is still seen */
	size_t textlen = before_end + strlen("\x07tail");
	assert_int_equal(f->r.text.len, textlen);
	assert_memory_equal(f->r.text.p, in.p, textlen);
	assert_int_equal(rec_count(&f->r, SI_MARK_DONE), 1);
	assert_int_equal(f->r.ev[f->r.n - 1].ev, SI_MARK_DONE);
	assert_string_equal(f->r.ev[f->r.n - 1].data, "/after");
	buf_free(&in);
}

static void test_long_osc_st_and_never_ended(void **state)
{
	struct fx *f = *state;
	buf_t in = {0};
	/* over-long, ended by ST, fed in small pieces */
	buf_puts(&in, "\x1b]6973;");
	for (int i = 0; i < 20000; i++)
		buf_putc(&in, 'z');
	buf_puts(&in, "\x1b\\ok");
	for (size_t off = 0; off < in.len; off += 777) {
		size_t n = in.len - off < 777 ? in.len - off : 777;
		shellint_feed(f->si, in.p + off, n);
	}
	assert_int_equal(f->r.text.len, in.len);
	assert_memory_equal(f->r.text.p, in.p, in.len);

	/* one that never ends: 1 MB of it, bounded holding, no crash */
	rec_free(&f->r);
	char chunk[4096];
	memset(chunk, 'q', sizeof chunk);
	feed(f, "\x1b]2;");
	for (int i = 0; i < 256; i++)
		shellint_feed(f->si, chunk, sizeof chunk);
	assert_true(f->r.text.len >= 256 * sizeof chunk + 4 - 8192 - 1);
	buf_free(&in);
}

static void test_esc_at_chunk_end(void **state)
{
	struct fx *f = *state;
	feed(f, "abc\x1b");
	feed(f, "[?2004h");
	feed(f, "x\x1b");
	feed(f, "]0;t\x07");
	feed(f, "y\x1b");
	feed(f, "z");
	feed(f, "\x1b");
	feed(f, "\x1b");
	feed(f, "[1m");
	assert_string_equal(f->r.text.p, "abc\x1b[?2004hx\x1b]0;t\x07y\x1bz\x1b\x1b[1m");
	assert_int_equal(rec_count(&f->r, SI_READY), 1);
	assert_int_equal(rec_count(&f->r, SI_TITLE), 1);

	/* a mark right after a lone ESC at a chunk's end */
	rec_free(&f->r);
	buf_t m = {0};
	mark(&m, f->nonce, "C");
	feed(f, "\x1b");
	shellint_feed(f->si, m.p, m.len);
	assert_int_equal(rec_count(&f->r, SI_MARK_START), 1);
	assert_string_equal(f->r.text.p, "\x1b");
	buf_free(&m);
}

/* Output that ends in the middle of an OSC (e.g. `printf '\e]0;x'`), then
 * the shell's mark: the cut OSC is passed on, the mark still seen. */
static void test_cut_osc_then_mark(void **state)
{
	struct fx *f = *state;
	buf_t in = {0};
	buf_puts(&in, "out\x1b]0;unterminated");
	mark(&in, f->nonce, "D;1;/w");
	shellint_feed(f->si, in.p, in.len);
	assert_int_equal(rec_count(&f->r, SI_MARK_DONE), 1);
	assert_string_equal(f->r.text.p, "out\x1b]0;unterminated");
	assert_int_equal(f->r.ev[f->r.n - 1].ev, SI_MARK_DONE);
	assert_int_equal(f->r.ev[f->r.n - 1].code, 1);
	buf_free(&in);
}

/* Output that ends in the middle of a CSI (e.g. `head -c` of coloured
 * output ending in "ESC [3"), then the shell's done mark. A terminal
 * (ECMA-48, libvterm, xterm) abandons the CSI at the ESC and starts a new
 * sequence, so the mark must still be seen and not leak out as text. */
static void test_cut_csi_then_mark(void **state)
{
	struct fx *f = *state;
	static const char *cuts[] = {"\x1b[", "\x1b[3", "\x1b[01;3", "\x1b[?"};
	for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
		rec_free(&f->r);
		buf_t in = {0};
		buf_printf(&in, "out%s", cuts[k]);
		mark(&in, f->nonce, "D;0;/w");
		shellint_feed(f->si, in.p, in.len);
		assert_int_equal(rec_count(&f->r, SI_MARK_DONE), 1);
		assert_null(memmem(f->r.text.p, f->r.text.len, "6973", 4));
		buf_free(&in);
	}
}

static void test_fuzz_passthrough(void **state)
{
	struct fx *f = *state;
	/* random bytes rich in ESC ] [ ; BEL \ digits: no marks can appear
	 * (the nonce is never produced), so the text is the input exactly */
	static const char alpha[] = "\x1b\x1b\x1b]][[;;\x07\\\\0267?h3D;C a\n";
	unsigned seed = 12345;
	buf_t in = {0};
	for (int i = 0; i < 200000; i++) {
		seed = seed * 1103515245u + 12345u;
		unsigned r = seed >> 16;
		if (r % 50 == 0)
			buf_puts(&in, "\x1b]6973;");
		else
			buf_putc(&in, alpha[r % (sizeof alpha - 1)]);
	}
	for (size_t off = 0; off < in.len;) {
		seed = seed * 1103515245u + 12345u;
		size_t n = (seed >> 16) % 300;
		if (n > in.len - off)
			n = in.len - off;
		shellint_feed(f->si, in.p + off, n);
		off += n;
	}
	/* close whatever is open so nothing stays held */
	feed(f, "\x07");
	buf_putc(&in, '\x07');
	assert_int_equal(rec_count(&f->r, SI_MARK_START) + rec_count(&f->r, SI_MARK_DONE), 0);
	assert_int_equal(f->r.text.len, in.len);
	assert_memory_equal(f->r.text.p, in.p, in.len);
	buf_free(&in);
}

/* ---- typing a command ---- */

static void test_type_bash(void **state)
{
	(void)state;
	struct session s;
	memset(&s, 0, sizeof s);
	s.pty.fd = -1;   /* no terminal: nothing to clear first */
	s.shell_kind = SHELL_BASH;
	snprintf(s.name, sizeof s.name, "main");
	static const struct {
		const char *in, *want;
	} cases[] = {
		{"ls -l", "\x1b[200~ls -l\x1b[201~\r"},
		{"echo a\necho b", "\x1b[200~echo a\necho b\x1b[201~\r"},
		{"echo a\r\necho b\r\n", "\x1b[200~echo a\necho b\x1b[201~\r"},
		{"printf '\x1b[201~'; x\x1b", "\x1b[200~printf '[201~'; x\x1b[201~\r"},
		{"ls\n\n\n", "\x1b[200~ls\x1b[201~\r"},
		{"\n", "\x1b[200~\x1b[201~\r"},
		{"", "\x1b[200~\x1b[201~\r"},
		{"a\tb 日本", "\x1b[200~a\tb 日本\x1b[201~\r"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		buf_t out = {0};
		shellint_type_command(&s, cases[i].in, &out);
		assert_non_null(out.p);
		assert_string_equal(out.p, cases[i].want);
		assert_int_equal(out.len, strlen(cases[i].want));
		buf_free(&out);
	}
}

/* bash: a text over SHELLINT_PASTE_MAX bytes or SHELLINT_PASTE_LINES
 * lines goes to a file, typed as " . 'FILE'" (quoted, Enter); shorter
 * ones are pasted. */
static void test_type_bash_long(void **state)
{
	(void)state;
	char dir[] = "/tmp/test_shellint'q.XXXXXX";
	assert_non_null(mkdtemp(dir));
	char *saved = srv.rundir;
	srv.rundir = dir;
	struct session s;
	memset(&s, 0, sizeof s);
	s.pty.fd = -1;   /* no terminal: nothing to clear first */
	s.shell_kind = SHELL_BASH;
	snprintf(s.name, sizeof s.name, "main");

	buf_t text = {0}, out = {0};
	for (int i = 0; i < SHELLINT_PASTE_LINES - 1; i++)
		buf_puts(&text, "echo x\n");
	shellint_type_command(&s, text.p, &out);
	assert_memory_equal(out.p, "\x1b[200~", 6);

	buf_puts(&text, "echo y\necho z");      /* one line too many */
	buf_reset(&out);
	shellint_type_command(&s, text.p, &out);
	char want[512], path[300];
	snprintf(path, sizeof path, "%s/cmd-main.sh", dir);
	/* the ' in the folder name is written '\'' */
	char *q = strchr(dir, '\'');
	snprintf(want, sizeof want, " eval \"$(< '%.*s'\\''%s/cmd-main.sh')\"; (exit $?)\r", (int)(q - dir), dir, q + 1);
	assert_string_equal(out.p, want);
	FILE *fp = fopen(path, "r");
	assert_non_null(fp);
	char got[1024];
	size_t n = fread(got, 1, sizeof got, fp);
	fclose(fp);
	assert_int_equal(n, text.len);
	assert_memory_equal(got, text.p, n);

	buf_reset(&text);
	for (int i = 0; i <= SHELLINT_PASTE_MAX; i++)   /* one long line */
		buf_putc(&text, 'a');
	buf_reset(&out);
	shellint_type_command(&s, text.p, &out);
	assert_string_equal(out.p, want);

	unlink(path);
	rmdir(dir);
	srv.rundir = saved;
	buf_free(&text);
	buf_free(&out);
}

/* A command starts from an empty line: readline (the terminal raw) gets the
 * key termd.bash binds to kill-whole-line first, then the paste; a terminal
 * in cooked mode (no line editor reads yet, or sh) its kill character, and
 * bash's text then goes through a file (a paste would be echoed, markers
 * and all). */
static void test_type_clears_the_line(void **state)
{
	(void)state;
	char dir[] = "/tmp/test_shellint.XXXXXX";
	assert_non_null(mkdtemp(dir));
	char *saved = srv.rundir;
	srv.rundir = dir;
	int m = posix_openpt(O_RDWR | O_NOCTTY);
	assert_true(m >= 0);
	assert_int_equal(grantpt(m), 0);
	assert_int_equal(unlockpt(m), 0);
	int sl = open(ptsname(m), O_RDWR | O_NOCTTY);
	assert_true(sl >= 0);
	struct termios tio;
	assert_int_equal(tcgetattr(sl, &tio), 0);
	tio.c_lflag |= ICANON;
	tio.c_cc[VKILL] = 0x15;
	assert_int_equal(tcsetattr(sl, TCSANOW, &tio), 0);

	struct session s;
	memset(&s, 0, sizeof s);
	s.pty.fd = m;
	s.shell_kind = SHELL_BASH;
	snprintf(s.name, sizeof s.name, "main");
	buf_t out = {0};
	shellint_type_command(&s, "ls -l", &out);   /* cooked: kill char, a file */
	char want[512];
	snprintf(want, sizeof want, "\x15 eval \"$(< '%s/cmd-main.sh')\"; (exit $?)\r", dir);
	assert_string_equal(out.p, want);

	tio.c_lflag &= ~(tcflag_t)ICANON;            /* readline reads: raw */
	assert_int_equal(tcsetattr(sl, TCSANOW, &tio), 0);
	buf_reset(&out);
	shellint_type_command(&s, "ls -l", &out);
	assert_string_equal(out.p, SHELLINT_KILL_LINE "\x1b[200~ls -l\x1b[201~\r");

	s.shell_kind = SHELL_SH;                     /* sh: its kill character */
	buf_reset(&out);
	shellint_type_command(&s, "pwd", &out);
	snprintf(want, sizeof want, "\x15__termd_run '%s/cmd-main.sh'\n", dir);
	assert_string_equal(out.p, want);

	char path[300];
	snprintf(path, sizeof path, "%s/cmd-main.sh", dir);
	unlink(path);
	rmdir(dir);
	srv.rundir = saved;
	buf_free(&out);
	close(sl);
	close(m);
}

static void test_type_sh(void **state)
{
	(void)state;
	char dir[] = "/tmp/test_shellint.XXXXXX";
	assert_non_null(mkdtemp(dir));
	char *saved = srv.rundir;
	srv.rundir = dir;

	struct session s;
	memset(&s, 0, sizeof s);
	s.pty.fd = -1;
	s.shell_kind = SHELL_SH;
	snprintf(s.name, sizeof s.name, "work-1");
	const char *text = "echo 'a b'\nfor i in 1 2; do echo $i; done\n\x1b[1m";
	buf_t out = {0};
	shellint_type_command(&s, text, &out);

	char path[256], want[300];
	snprintf(path, sizeof path, "%s/cmd-work-1.sh", dir);
	snprintf(want, sizeof want, "__termd_run '%s'\n", path);
	assert_non_null(out.p);
	assert_string_equal(out.p, want);

	FILE *fp = fopen(path, "r");
	assert_non_null(fp);
	char got[256];
	size_t n = fread(got, 1, sizeof got, fp);
	fclose(fp);
	assert_int_equal(n, strlen(text));
	assert_memory_equal(got, text, n);

	/* a second command replaces the file */
	buf_reset(&out);
	shellint_type_command(&s, "pwd", &out);
	assert_string_equal(out.p, want);
	fp = fopen(path, "r");
	assert_non_null(fp);
	n = fread(got, 1, sizeof got, fp);
	fclose(fp);
	assert_int_equal(n, 3);
	assert_memory_equal(got, "pwd", 3);

	/* rc files */
	assert_int_equal(shellint_write_rc(dir), 0);
	char rc[300];
	snprintf(rc, sizeof rc, "%s/termd.bash", dir);
	assert_int_equal(access(rc, R_OK), 0);
	unlink(rc);
	snprintf(rc, sizeof rc, "%s/termd.sh", dir);
	assert_int_equal(access(rc, R_OK), 0);
	unlink(rc);

	unlink(path);
	rmdir(dir);
	srv.rundir = saved;
	buf_free(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, fx_setup, fx_teardown)
		T(test_nonce),
		T(test_plain_text),
		T(test_plain_binary),
		T(test_mark_start),
		T(test_mark_done),
		T(test_mark_done_cwd_odd),
		T(test_mark_done_codes),
		T(test_mark_done_malformed_code),
		T(test_mark_cont),
		T(test_wrong_nonce),
		T(test_other_osc_pass),
		T(test_st_terminator),
		T(test_titles),
		T(test_ready),
		T(test_split_everywhere),
		T(test_split_mark_two_feeds),
		T(test_long_osc),
		T(test_long_osc_st_and_never_ended),
		T(test_esc_at_chunk_end),
		T(test_cut_osc_then_mark),
		T(test_cut_csi_then_mark),
		T(test_fuzz_passthrough),
		cmocka_unit_test(test_type_bash),
		cmocka_unit_test(test_type_sh),
		cmocka_unit_test(test_type_clears_the_line),
		cmocka_unit_test(test_type_bash_long),
#undef T
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
