/* fuzz_render.c — owns the libFuzzer target for the output renderer
 * (render_*) and the screen (screen.c). Input: byte 0 bits 0-2 = k, bits
 * 3-7 = window rows - 1; then k bytes of piece sizes (1-256, used in turn);
 * then program output. The renderer fed it in one piece and in those
 * pieces must hand over the same lines and the same live text (render.h:
 * sequences and UTF-8 may be split across calls), all valid UTF-8 without
 * control characters. The same bytes go in pieces to a screen, whose text
 * must be valid UTF-8, whose snapshot must reproduce that text on a fresh
 * screen, and which is then resized and read again. */
#include "fake.h"

#include <locale.h>
#include <string.h>
#include <wchar.h>

static void check_text(const char *s, size_t n, const char *what)
{
	FUZZ_CHECK(fuzz_utf8_valid(s, n), "%s is not valid UTF-8", what);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		FUZZ_CHECK(c >= 0x20 && c != 0x7f, "%s has control byte 0x%02x at %zu", what, c, i);
		/* C1 controls U+0080-U+009F are C2 80-C2 9F */
		FUZZ_CHECK(!(c == 0xC2 && i + 1 < n && (unsigned char)s[i + 1] < 0xA0),
			   "%s has a C1 control at %zu", what, i);
	}
}

static void line_cb(void *user, const char *line, size_t len)
{
	buf_t *log = user;
	FUZZ_CHECK(line[len] == 0, "line not NUL-terminated");
	FUZZ_CHECK(len == 0 || line[len - 1] != ' ', "line not trimmed");
	check_text(line, len, "a finished line");
	buf_append(log, line, len);
	buf_putc(log, '\n');
}

/* Feed in pieces of the sizes chosen by the input. */
#define FEED_PIECES(feed, obj, p, n, sizes, k) do { \
	for (size_t off_ = 0, j_ = 0; off_ < (n); j_++) { \
		size_t piece_ = (k) ? (size_t)(sizes)[j_ % (k)] + 1 : 1; \
		if (piece_ > (n) - off_) \
			piece_ = (n) - off_; \
		feed((obj), (p) + off_, piece_); \
		off_ += piece_; \
	} } while (0)

static void same(const buf_t *a, const buf_t *b, const char *what)
{
	FUZZ_CHECK(a->len == b->len && (a->len == 0 || memcmp(a->p, b->p, a->len) == 0),
		   "%s: %zu bytes whole, %zu in pieces", what, a->len, b->len);
}

/* Lines of live text, each checked (the text is lines joined by '\n'). */
static void check_live(const buf_t *b)
{
	const char *p = b->p, *end = b->p + b->len;
	FUZZ_CHECK(b->p && b->p[b->len] == 0, "live text not NUL-terminated");
	while (p <= end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		check_text(p, n, "live text");
		if (!nl)
			break;
		p = nl + 1;
	}
}

/* 1 if the screen text has only characters of width 1 (and line ends).
 * libvterm 0.1.4 keeps a combining character that has no base, or a C1
 * control sent as UTF-8, as a cell of its own, but treats it differently
 * when a snapshot writes it on a fresh screen (and may take its neighbour
 * with it); and a wide character that libvterm put in the last column is
 * cut in half there. So a snapshot is only held to reproduce screens of
 * characters of width 1. */
static int all_printable(const buf_t *t)
{
	mbstate_t st;
	memset(&st, 0, sizeof st);
	for (size_t i = 0; i < t->len;) {
		wchar_t wc;
		size_t n = mbrtowc(&wc, t->p + i, t->len - i, &st);
		FUZZ_CHECK(n != (size_t)-1 && n != (size_t)-2, "screen text does not decode");
		if (n == 0)
			return 0;
		if (wc != '\n' && wcwidth(wc) != 1)
			return 0;
		i += n;
	}
	return 1;
}

static void fuzz_screen(const uint8_t *sizes, size_t k, const char *out, size_t n, int rows)
{
	int cols = 10 + rows * 3;
	struct screen *sc = screen_new(rows, cols);
	buf_t text = {0}, snap = {0}, again = {0};
	FEED_PIECES(screen_feed, sc, out, n, sizes, k);
	screen_text(sc, &text);
	FUZZ_CHECK(fuzz_utf8_valid(text.p, text.len), "screen text is not valid UTF-8");
	screen_snapshot(sc, &snap);
	FUZZ_CHECK(fuzz_utf8_valid(snap.p, snap.len), "snapshot is not valid UTF-8");
	int r, c, vis;
	screen_cursor(sc, &r, &c, &vis);
	FUZZ_CHECK(r >= 0 && r < rows && c >= 0 && c < cols, "cursor %d,%d off the screen", r, c);

	/* the snapshot on a blank screen shows the same text */
	struct screen *copy = screen_new(rows, cols);
	screen_feed(copy, snap.p, snap.len);
	screen_text(copy, &again);
	FUZZ_CHECK(!all_printable(&text) ||
		   (again.len == text.len && memcmp(again.p, text.p, text.len) == 0),
		   "snapshot does not reproduce the screen:\n--- screen\n%s\n--- from snapshot\n%s",
		   text.p, again.p);
	screen_free(copy);

	screen_resize(sc, rows / 2 + 1, cols + 7 - rows);
	buf_reset(&text);
	screen_text(sc, &text);
	screen_feed(sc, out, n);
	buf_reset(&text);
	screen_text(sc, &text);
	FUZZ_CHECK(fuzz_utf8_valid(text.p, text.len), "screen text after resize is not valid UTF-8");
	screen_free(sc);
	buf_free(&text);
	buf_free(&snap);
	buf_free(&again);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (!setlocale(LC_CTYPE, "C.UTF-8")) {   /* as termd's main */
		fprintf(stderr, "fuzz_render: C.UTF-8 locale unavailable\n");
		abort();
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t k = data[0] & 7;
	int rows = (data[0] >> 3) + 1;
	if (size < 1 + k)
		return 0;
	const uint8_t *sizes = data + 1;
	const char *out = (const char *)data + 1 + k;
	size_t n = size - 1 - k;

	buf_t log_a = {0}, log_b = {0}, live_a = {0}, live_b = {0};
	render_t *a = render_new(rows, line_cb, &log_a), *b = render_new(rows, line_cb, &log_b);
	render_feed(a, out, n);
	FEED_PIECES(render_feed, b, out, n, sizes, k);
	same(&log_a, &log_b, "finished lines");
	render_live(a, &live_a);
	render_live(b, &live_b);
	check_live(&live_a);
	same(&live_a, &live_b, "live text");
	render_commit_above_cursor(a);
	render_commit_above_cursor(b);
	same(&log_a, &log_b, "lines committed above the cursor");
	render_finish(a);
	render_finish(b);
	same(&log_a, &log_b, "lines at the end");
	/* after finish the renderer starts again empty */
	buf_reset(&live_a);
	render_live(a, &live_a);
	FUZZ_CHECK(live_a.len == 0, "live text after finish");
	render_feed(a, out, n);
	render_free(a);
	render_free(b);
	buf_free(&log_a);
	buf_free(&log_b);
	buf_free(&live_a);
	buf_free(&live_b);

	fuzz_screen(sizes, k, out, n, rows);
	return 0;
}
