/* fuzz_shellint.c — owns the libFuzzer target for the shell-integration
 * scanner (shellint_feed): the same output fed in one piece to one scanner
 * and in fuzzer-chosen pieces to another must give the same events (pty
 * reads split anywhere), with adjacent text merged. Input: byte 0 low 3
 * bits = k, then k bytes of piece sizes (1-256, used in turn), then the
 * output; "NONCE" in it stands for the scanners' nonce (one for both, and
 * put back in what they report). Also: text events
 * are never empty and the text passed on is never longer than the output. */
#include "fake.h"

#include <string.h>

#define PLACEHOLDER "NONCE"

struct ev {
	enum si_event ev;
	buf_t data;
	int code;
};

struct rec {
	struct ev *ev;
	size_t n, cap;
	size_t text_bytes;
};

static void rec_cb(void *user, enum si_event ev, const char *data, size_t len, int code)
{
	struct rec *r = user;
	if (ev == SI_TEXT) {
		FUZZ_CHECK(data != NULL && len > 0, "empty text event");
		r->text_bytes += len;
		if (r->n && r->ev[r->n - 1].ev == SI_TEXT) {
			buf_append(&r->ev[r->n - 1].data, data, len);
			return;
		}
	}
	if (r->n == r->cap) {
		r->cap = r->cap ? 2 * r->cap : 16;
		r->ev = xrealloc(r->ev, r->cap * sizeof *r->ev);
	}
	struct ev *e = &r->ev[r->n++];
	memset(e, 0, sizeof *e);
	e->ev = ev;
	e->code = code;
	buf_reserve(&e->data, 0);
	if (data && len)
		buf_append(&e->data, data, len);
}

static void rec_free(struct rec *r)
{
	for (size_t i = 0; i < r->n; i++)
		buf_free(&r->ev[i].data);
	free(r->ev);
	memset(r, 0, sizeof *r);
}

/* s with every `from` (32 bytes) replaced by `to`, into out. */
static void replace(const char *s, size_t n, const char *from, const char *to, buf_t *out)
{
	size_t fl = strlen(from);
	buf_reset(out);
	buf_reserve(out, n);
	for (size_t i = 0; i < n;) {
		if (n - i >= fl && memcmp(s + i, from, fl) == 0) {
			buf_puts(out, to);
			i += fl;
		} else {
			buf_putc(out, s[i++]);
		}
	}
}

static const char *ev_name(enum si_event e)
{
	static const char *const names[] = {"TEXT", "MARK_START", "MARK_DONE", "MARK_CONT",
					       "READY", "TITLE"};
	return (unsigned)e < sizeof names / sizeof names[0] ? names[e] : "?";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t k = data[0] & 7;
	if (size < 1 + k)
		return 0;
	const uint8_t *sizes = data + 1;
	const char *out = (const char *)data + 1 + k;
	size_t n = size - 1 - k;

	struct rec whole = {0}, split = {0};
	struct shellint *a = shellint_new(rec_cb, &whole), *b = shellint_new(rec_cb, &split);
	/* one nonce for both: with two random ones, bytes of the nonce inside
	 * a mark's fields made the two runs differ by chance, not by split */
	shellint_set_nonce(b, shellint_nonce(a));
	buf_t in_a = {0}, in_b = {0}, t1 = {0}, t2 = {0};
	replace(out, n, PLACEHOLDER, shellint_nonce(a), &in_a);
	replace(out, n, PLACEHOLDER, shellint_nonce(b), &in_b);
	FUZZ_CHECK(in_a.len == in_b.len, "nonces of different lengths");

	shellint_feed(a, in_a.p, in_a.len);
	for (size_t off = 0, j = 0; off < in_b.len; j++) {
		size_t piece = k ? (size_t)sizes[j % k] + 1 : 1;
		if (piece > in_b.len - off)
			piece = in_b.len - off;
		shellint_feed(b, in_b.p + off, piece);
		off += piece;
	}

	FUZZ_CHECK(whole.text_bytes <= in_a.len, "more text (%zu) than output (%zu)",
		   whole.text_bytes, in_a.len);
	FUZZ_CHECK(whole.n == split.n, "%zu events whole, %zu split", whole.n, split.n);
	for (size_t i = 0; i < whole.n; i++) {
		const struct ev *x = &whole.ev[i], *y = &split.ev[i];
		FUZZ_CHECK(x->ev == y->ev, "event %zu: %s whole, %s split", i, ev_name(x->ev), ev_name(y->ev));
		FUZZ_CHECK(x->code == y->code, "event %zu (%s): code %d whole, %d split", i,
			   ev_name(x->ev), x->code, y->code);
		replace(x->data.p, x->data.len, shellint_nonce(a), PLACEHOLDER, &t1);
		replace(y->data.p, y->data.len, shellint_nonce(b), PLACEHOLDER, &t2);
		FUZZ_CHECK(t1.len == t2.len && memcmp(t1.p, t2.p, t1.len) == 0,
			   "event %zu (%s): %zu bytes whole, %zu split", i, ev_name(x->ev), t1.len, t2.len);
	}

	shellint_free(a);
	shellint_free(b);
	rec_free(&whole);
	rec_free(&split);
	buf_free(&in_a);
	buf_free(&in_b);
	buf_free(&t1);
	buf_free(&t2);
	return 0;
}
