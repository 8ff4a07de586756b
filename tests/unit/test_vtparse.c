/* test_vtparse.c — unit tests for proto/vtparse.c, the escape-sequence
 * tokenizer: hand-written inputs (CSI with parameters, private markers and
 * intermediates; OSC ended by BEL and by ST; an ESC cutting a string or a
 * sequence short; CAN/SUB; C0 inside a CSI; bounds; UTF-8 text) against
 * the events written out as a compact string, each fed whole and one byte
 * at a time (the same events, text merged), with the raw bytes of all
 * events adding up to the input. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "vtparse.h"

/* The events as text: t(...) text, c(hh) control, x(hh) cancel,
 * e(inter final!flags), C(priv params;inter final!flags), s] string start,
 * d(...) data, /]hh string end. Adjacent text and data are merged;
 * PENDING is left out. */
struct rec {
	buf_t out;
	buf_t raw;
	int last;               /* type of the last event written, -1 none */
};

static void put_bytes(buf_t *b, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c >= 0x20 && c < 0x7f && c != '(' && c != ')')
			buf_putc(b, (char)c);
		else
			buf_printf(b, "\\%02x", c);
	}
}

static void rec_cb(void *user, const struct vtp_event *ev)
{
	struct rec *r = user;
	const struct vtp_seq *q = ev->seq;
	buf_append(&r->raw, ev->raw, ev->rawlen);
	if (ev->type == VTP_PENDING)
		return;
	if ((ev->type == VTP_TEXT || ev->type == VTP_STR_DATA) && r->last == (int)ev->type) {
		r->out.len--;           /* reopen the ")" */
		put_bytes(&r->out, ev->data, ev->len);
		buf_putc(&r->out, ')');
		return;
	}
	r->last = (int)ev->type;
	switch (ev->type) {
	case VTP_TEXT:
	case VTP_STR_DATA:
		assert_true(ev->len > 0);
		buf_putc(&r->out, ev->type == VTP_TEXT ? 't' : 'd');
		buf_putc(&r->out, '(');
		put_bytes(&r->out, ev->data, ev->len);
		buf_putc(&r->out, ')');
		break;
	case VTP_CTRL:
		buf_printf(&r->out, "c(%02x)", ev->ch);
		break;
	case VTP_CANCEL:
		buf_printf(&r->out, "x(%02x)", ev->ch);
		break;
	case VTP_ESC:
		buf_puts(&r->out, "e(");
		put_bytes(&r->out, (const char *)q->inter, q->ninter);
		buf_putc(&r->out, (char)q->final);
		if (q->flags)
			buf_printf(&r->out, "!%x", q->flags);
		buf_putc(&r->out, ')');
		break;
	case VTP_CSI:
		assert_true(q->bodylen <= VTP_BODY_MAX);
		assert_true(q->nparam <= VTP_MAX_PARAMS + 1);
		buf_puts(&r->out, "C(");
		if (q->priv)
			buf_putc(&r->out, (char)q->priv);
		for (int i = 0; i < q->nparam && i < VTP_MAX_PARAMS; i++)
			buf_printf(&r->out, "%s%u", i ? "," : "", q->param[i]);
		buf_putc(&r->out, ';');
		put_bytes(&r->out, (const char *)q->inter, q->ninter);
		buf_putc(&r->out, (char)q->final);
		if (q->flags)
			buf_printf(&r->out, "!%x", q->flags);
		buf_putc(&r->out, ')');
		break;
	case VTP_STR_START:
		buf_printf(&r->out, "s%c", ev->ch);
		break;
	case VTP_STR_END:
		buf_printf(&r->out, "/%c%02x", ev->ch, ev->end);
		break;
	case VTP_PENDING:
		break;
	}
}

/* The events for in (n bytes) under opts, fed whole and byte by byte. */
static char *events(const char *in, size_t n, unsigned opts)
{
	struct vtparse p;
	struct rec whole = {.last = -1}, bytes = {.last = -1};
	vtparse_init(&p, opts);
	vtparse_feed(&p, in, n, rec_cb, &whole);
	vtparse_init(&p, opts);
	for (size_t i = 0; i < n; i++)
		vtparse_feed(&p, in + i, 1, rec_cb, &bytes);
	buf_reserve(&whole.out, 1);
	buf_reserve(&bytes.out, 1);
	whole.out.p[whole.out.len] = 0;
	bytes.out.p[bytes.out.len] = 0;
	assert_string_equal(whole.out.p, bytes.out.p);
	assert_int_equal(whole.raw.len, n);
	assert_int_equal(bytes.raw.len, n);
	if (n) {
		assert_memory_equal(whole.raw.p, in, n);
		assert_memory_equal(bytes.raw.p, in, n);
	}
	buf_free(&bytes.out);
	buf_free(&bytes.raw);
	buf_free(&whole.raw);
	return buf_steal(&whole.out);
}

#define CHECK_OPTS(opts, in, want) do { \
	char *got_ = events(in, sizeof(in) - 1, opts); \
	assert_string_equal(got_, want); \
	free(got_); \
} while (0)
#define CHECK(in, want) CHECK_OPTS(0, in, want)

static void body_cb(void *user, const struct vtp_event *ev)
{
	if (ev->type == VTP_CSI)
		buf_append(user, ev->seq->body, ev->seq->bodylen);
}

static void test_text_and_controls(void **state)
{
	(void)state;
	CHECK("ab\r\ncd", "t(ab)c(0d)c(0a)t(cd)");
	/* with VTP_C0_IN_TEXT, controls are part of the run */
	CHECK_OPTS(VTP_C0_IN_TEXT, "ab\r\ncd\x18" "e", "t(ab\\0d\\0acd\\18e)");
	/* CAN and SUB in ground are controls like the others */
	CHECK("a\x18" "b\x1a", "t(a)c(18)t(b)c(1a)");
	CHECK("", "");
}

static void test_utf8_text(void **state)
{
	(void)state;
	/* bytes >= 0x80 are text, 0x80-0x9f included (UTF-8, not C1) */
	CHECK("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80 \xc2\x9b" "1m\x7f",
	      "t(caf\\c3\\a9 \\e6\\97\\a5 \\f0\\9f\\98\\80 \\c2\\9b1m\\7f)");
}

static void test_esc(void **state)
{
	(void)state;
	CHECK("\x1b" "7x\x1b(B\x1b#8\x1b" "c", "e(7)t(x)e(\\28B)e(#8)e(c)");
	/* ESC <intermediate> [ is an ESC sequence, not a CSI */
	CHECK("\x1b*[?1m", "e(*[)t(?1m)");
	/* more than three intermediates: flagged */
	CHECK("\x1b((((B", "e(\\28\\28\\28B!8)");
	/* ESC \ outside a string is an ESC sequence of its own */
	CHECK("\x1b\\", "e(\\)");
}

static void test_csi(void **state)
{
	(void)state;
	CHECK("\x1b[1;31mred\x1b[m", "C(1,31;m)t(red)C(;m)");
	CHECK("\x1b[?2004h\x1b[>c\x1b[ q\x1b[2 q", "C(?2004;h)C(>;c)C(; q)C(2; q)");
	CHECK("\x1b[?1049;25h", "C(?1049,25;h)");
	/* empty parameters are 0; ':' separates like ';' */
	CHECK("\x1b[;5H\x1b[38:2:1:2:3m", "C(0,5;H)C(38,2,1,2,3;m)");
	/* a parameter after an intermediate, a late private marker */
	CHECK("\x1b[ 1q\x1b[1?2h", "C(1; q!10)C(12;h!20)");
	/* the body bytes as sent, C0 and DEL left out */
	struct vtparse p;
	buf_t body = {0};
	vtparse_init(&p, 0);
	static const char in[] = "\x1b[?01;\x7f" "2\r\"p";
	vtparse_feed(&p, in, sizeof in - 1, body_cb, &body);
	buf_reserve(&body, 1);
	assert_string_equal(body.p, "?01;2\"");
	buf_free(&body);
}

static void test_csi_bounds(void **state)
{
	(void)state;
	/* 16 parameters fit; 17 are flagged, the first 16 kept */
	CHECK("\x1b[1;2;3;4;5;6;7;8;9;10;11;12;13;14;15;16m",
	      "C(1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16;m)");
	CHECK("\x1b[1;2;3;4;5;6;7;8;9;10;11;12;13;14;15;16;17m",
	      "C(1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16;m!1)");
	/* 6 digits fit; 7 are flagged; values saturate */
	CHECK("\x1b[999999C\x1b[1234567C", "C(65535;C)C(65535;C!2)");
	/* a body over VTP_BODY_MAX bytes */
	CHECK("\x1b[" "1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1;1m",
	      "C(1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1;m!5)");
	CHECK("\x1b[?" "000000000000000000000000000000000000000000000000000000000000000000000h",
	      "C(?0;h!6)");
	/* four intermediates */
	CHECK("\x1b[1    q", "C(1;   q!8)");
}

static void test_c0_can_sub_in_csi(void **state)
{
	(void)state;
	/* a C0 control inside is executed there, the CSI goes on */
	CHECK("\x1b[1\n;2H", "c(0a)C(1,2;H)");
	CHECK("\x1b\r(B", "c(0d)e(\\28B)");
	/* CAN and SUB cancel it, ESC restarts it, a byte >= 0x80 breaks it */
	CHECK("\x1b[12\x18x\x1b[3\x1ay", "x(18)t(x)x(1a)t(y)");
	CHECK("\x1b[12\x1b[3mx", "x(1b)C(3;m)t(x)");
	CHECK("\x1b[1\xc3\xa9m", "x(c3)t(\\c3\\a9m)");
	CHECK("\x1b(\x18\x1b\x1a", "x(18)x(1a)");
	/* DEL is ignored */
	CHECK("\x1b[1\x7fm", "C(1;m)");
}

static void test_osc(void **state)
{
	(void)state;
	/* BEL and ST */
	CHECK("a\x1b]0;title\x07" "b\x1b]2;t\x1b\\c", "t(a)s]d(0;title)/]07t(b)s]d(2;t)/]5ct(c)");
	/* empty */
	CHECK("\x1b]\x07", "s]/]07");
	/* C0 and UTF-8 in the body are body */
	CHECK("\x1b]0;a\nb\xc3\xa9\x07", "s]d(0;a\\0ab\\c3\\a9)/]07");
}

static void test_strings_cut(void **state)
{
	(void)state;
	/* an ESC not followed by \ cuts the string and starts a sequence */
	CHECK("\x1b]0;t\x1b[1mx", "s]d(0;t)/]1bC(1;m)t(x)");
	CHECK("\x1b]0;t\x1b\x1b]1\x07", "s]d(0;t)/]1bx(1b)s]d(1)/]07");
	CHECK("\x1b]0;t\x1b\n", "s]d(0;t)/]1bc(0a)");
	/* CAN and SUB cancel it */
	CHECK("\x1b]0;t\x18" "x\x1bPq\x1a" "y", "s]d(0;t)/]18t(x)sPd(q)/P1at(y)");
}

static void test_other_strings(void **state)
{
	(void)state;
	/* BEL ends only an OSC, unless VTP_BEL_ENDS_ALL */
	CHECK("\x1bPq#0\x07!\x1b\\x", "sPd(q#0\\07!)/P5ct(x)");
	CHECK_OPTS(VTP_BEL_ENDS_ALL, "\x1bPq#0\x07!\x1b\\x", "sPd(q#0)/P07t(!)e(\\)t(x)");
	CHECK("\x1bXs\x1b\\\x1b^p\x1b\\\x1b_a\x1b\\", "sXd(s)/X5cs^d(p)/^5cs_d(a)/_5c");
}

/* A string of 100 KB: handed over in pieces, nothing held. */
static void test_over_long_osc(void **state)
{
	(void)state;
	size_t n = 100000;
	char *in = malloc(n + 8);
	memcpy(in, "\x1b]2;", 4);
	memset(in + 4, 'x', n);
	memcpy(in + 4 + n, "\x07z", 2);
	struct vtparse p;
	vtparse_init(&p, 0);
	assert_true(sizeof p < 256);
	for (size_t off = 0; off < n + 6; off += 4096) {
		size_t k = n + 6 - off < 4096 ? n + 6 - off : 4096;
		char *got = events(in + off, k, 0);
		free(got);
	}
	char *got = events(in, n + 6, 0);
	assert_int_equal(strlen(got), strlen("s]d(2;)/]07t(z)") + n);
	assert_string_equal(got + strlen(got) - 9, ")/]07t(z)");
	free(got);
	free(in);
}

/* Random bytes: whole and byte by byte agree (inside events()). */
static void test_random(void **state)
{
	(void)state;
	srand(7);
	char in[400];
	for (int round = 0; round < 3000; round++) {
		size_t n = (size_t)(rand() % (int)sizeof in);
		for (size_t i = 0; i < n; i++) {
			int r = rand() % 14;
			in[i] = r == 0 ? 0x1b : r == 1 ? '[' : r == 2 ? ';' : r == 3 ? ']' : r == 4 ? '\\' :
				r == 5 ? 0x07 : r == 6 ? 0x18 : r == 7 ? '1' : (char)(rand() % 256);
		}
		char *a = events(in, n, (unsigned)round & 3);
		free(a);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_text_and_controls),
		cmocka_unit_test(test_utf8_text),
		cmocka_unit_test(test_esc),
		cmocka_unit_test(test_csi),
		cmocka_unit_test(test_csi_bounds),
		cmocka_unit_test(test_c0_can_sub_in_csi),
		cmocka_unit_test(test_osc),
		cmocka_unit_test(test_strings_cut),
		cmocka_unit_test(test_other_strings),
		cmocka_unit_test(test_over_long_osc),
		cmocka_unit_test(test_random),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
