/* render.c — owns the output renderer: the UTF-8 decoder state, what
 * escape sequences do to the text (a consumer of proto/vtparse.c, the
 * tokenizer, which gives it text runs, C0 controls inside sequences, ESC
 * and CSI sequences and strings), and the window of live lines (a ring of the last
 * window_rows lines plus the cursor) that turns pty output into the text a
 * person would see. The lines themselves (narrow bytes or 32-bit cells) are
 * renderline.c's. */
#include "render.h"
#include "renderline.h"
#include "vtparse.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#define RENDER_SLOTS0 8                  /* window slots made at first */

struct render {
	int rows;               /* window size */
	render_line_cb cb;
	void *user;
	/* The slots grow with the window's lines (RENDER_SLOTS0, doubling, up
	 * to rows): a `run` whose output is a line or two does not hold 200
	 * slots (11 kB with tmp) */
	int cap;                /* slots allocated at ring (and tmp) */
	struct line *ring;      /* cap slots; window is [top, top+count) */
	struct line *tmp;       /* cap slots, scratch for L/M; made on first use */
	int top, count;         /* count >= 1 always */
	int row;                /* cursor row within the window, < count */
	size_t col;             /* cursor column, <= RENDER_MAX_COLS */
	uint64_t top_abs;       /* lines that ever left the top of the window */
	bool saved;
	uint64_t saved_abs;     /* ESC 7: absolute row, column */
	size_t saved_col;

	struct vtparse vp;      /* the tokenizer (CSI params: 16 kept, values
				 * up to 65535) */

	uint32_t u8cp;          /* partial UTF-8 character */
	int u8need;             /* continuation bytes still expected */
	uint8_t u8lo, u8hi;     /* allowed range of the next one */

	buf_t scratch;          /* encoded cells line for the callback */
	uint32_t wc_cp[256];    /* wcwidth() cache, direct-mapped */
	int8_t wc_w[256];
};

/* ---- the window ---- */

static inline struct line *render_line(const render_t *r, int i)
{
	int k = r->top + i;

	if (k >= r->cap)
		k -= r->cap;
	return &r->ring[k];
}

/* At least `need` slots (need <= rows): the ring is copied out in window
 * order (top at 0), every slot kept with its line's buffers. */
static void render_grow(render_t *r, int need)
{
	int cap = r->cap;
	struct line *ring;

	if (need <= cap)
		return;
	while (cap < need)
		cap = cap > r->rows / 2 ? r->rows : cap * 2;
	ring = xcalloc((size_t)cap, sizeof *ring);
	for (int i = 0; i < r->cap; i++)
		ring[i] = *render_line(r, i);
	free(r->ring);
	free(r->tmp);
	r->ring = ring;
	r->tmp = NULL;
	r->cap = cap;
	r->top = 0;
}

/* The scratch slots for L/M, as many as the ring. */
static struct line *render_tmp(render_t *r)
{
	if (!r->tmp)
		r->tmp = xcalloc((size_t)r->cap, sizeof *r->tmp);
	return r->tmp;
}

/* Hand a line to the callback, NUL-terminated. The caller clears the line
 * afterwards (a narrow line gets its NUL written in place). */
static inline void render_emit(render_t *r, struct line *l)
{
	if (!r->cb)
		return;
	if (!l->cells) {
		size_t n = line_trimmed(l);
		if (!l->d) {
			r->cb(r->user, "", 0);
			return;
		}
		((char *)l->d)[n] = 0;          /* bcap > len for narrow lines */
		r->cb(r->user, l->d, n);
		return;
	}
	buf_reset(&r->scratch);
	line_append_text(l, &r->scratch);
	r->cb(r->user, r->scratch.p, r->scratch.len);
}

/* The window's top line is final: emit it and drop it. */
static inline void render_pop_top(render_t *r)
{
	struct line *l = render_line(r, 0);

	render_emit(r, l);
	line_clear(l);
	r->top = r->top + 1 == r->cap ? 0 : r->top + 1;
	r->top_abs++;
	r->count--;
}

/* A new empty line at the bottom of the window. */
static inline void render_push_line(render_t *r)
{
	if (r->count == r->rows) {
		render_pop_top(r);
		if (r->row > 0)
			r->row--;
	} else if (r->count == r->cap) {
		render_grow(r, r->count + 1);
	}
	line_clear(render_line(r, r->count));
	r->count++;
}

static inline void render_lf(render_t *r)
{
	if (r->row + 1 < r->count) {
		r->row++;
		return;
	}
	render_push_line(r);
	r->row = r->count - 1;
}

static void render_set_row(render_t *r, uint32_t n)
{
	int target = n > (uint32_t)r->rows ? r->rows - 1 : (n ? (int)n - 1 : 0);

	while (r->count <= target)
		render_push_line(r);
	r->row = target;
}

static void render_set_col(render_t *r, uint32_t n)
{
	size_t c = n ? n - 1 : 0;

	r->col = c < RENDER_MAX_COLS - 1 ? c : RENDER_MAX_COLS - 1;
}

static void render_right(render_t *r, size_t n)
{
	if (r->col >= RENDER_MAX_COLS - 1)
		return;
	r->col = n < RENDER_MAX_COLS - 1 - r->col ? r->col + n : RENDER_MAX_COLS - 1;
}

static void render_tab(render_t *r, size_t n)
{
	while (n-- > 0 && r->col < RENDER_MAX_COLS - 1) {
		size_t t = (r->col / 8 + 1) * 8;
		r->col = t < RENDER_MAX_COLS - 1 ? t : RENDER_MAX_COLS - 1;
	}
}

static void render_clear_window(render_t *r)
{
	for (int i = 0; i < r->count; i++)
		line_clear(render_line(r, i));
}

/* Make the window start at ring[0] so L/M can work on a plain array. */
static void render_linearize(render_t *r)
{
	struct line *tmp;

	if (!r->top)
		return;
	tmp = render_tmp(r);
	for (int i = 0; i < r->cap; i++)
		tmp[i] = *render_line(r, i);
	memcpy(r->ring, tmp, (size_t)r->cap * sizeof *r->ring);
	r->top = 0;
}

/* Rotate ring[a, b) right by k (k < b - a). */
static void render_rotate(render_t *r, int a, int b, int k)
{
	int len = b - a;
	struct line *tmp = render_tmp(r);

	memcpy(tmp, r->ring + a, (size_t)len * sizeof *r->ring);
	for (int i = 0; i < len; i++)
		r->ring[a + (i + k) % len] = tmp[i];
}

/* CSI L: n blank lines at the cursor row; lines pushed past the window's
 * capacity are dropped. */
static void render_insert_lines(render_t *r, uint32_t n)
{
	int k, newc;

	k = n > (uint32_t)(r->rows - r->row) ? r->rows - r->row : (int)n;
	newc = r->count + k < r->rows ? r->count + k : r->rows;
	render_grow(r, newc);
	render_linearize(r);
	if (k < newc - r->row)
		render_rotate(r, r->row, newc, k);
	for (int i = r->row; i < r->row + k; i++)
		line_clear(&r->ring[i]);
	r->count = newc;
	r->col = 0;
}

/* CSI M: delete n lines at the cursor row, the lines below move up. */
static void render_delete_lines(render_t *r, uint32_t n)
{
	int k, span;

	render_linearize(r);
	span = r->count - r->row;
	k = n > (uint32_t)span ? span : (int)n;
	if (k < span)
		render_rotate(r, r->row, r->count, span - k);
	for (int i = r->count - k; i < r->count; i++)
		line_clear(&r->ring[i]);
	r->count -= k;
	if (r->count <= r->row)
		r->count = r->row + 1;          /* that line was cleared above */
	r->col = 0;
}

/* Text that reaches the column limit continues on a new line. */
static void render_wrap(render_t *r)
{
	r->col = 0;
	render_lf(r);
}

static void render_text(render_t *r, const char *s, size_t k)
{
	while (k) {
		size_t m;

		if (r->col >= RENDER_MAX_COLS)
			render_wrap(r);
		m = RENDER_MAX_COLS - r->col;
		if (m > k)
			m = k;
		line_put_ascii(render_line(r, r->row), r->col, s, m);
		r->col += m;
		s += m;
		k -= m;
	}
}

/* A decoded non-ASCII character (or U+FFFD). */
static void render_char(render_t *r, uint32_t cp)
{
	int w;

	if (cp >= 0x80 && cp < 0xA0)
		return;                         /* C1 code points: controls */
	if (r->wc_cp[cp & 0xFF] == cp) {
		w = r->wc_w[cp & 0xFF];
	} else {
		w = wcwidth((wchar_t)cp);
		r->wc_cp[cp & 0xFF] = cp;
		r->wc_w[cp & 0xFF] = (int8_t)w;
	}
	if (w == 0) {
		line_combine(render_line(r, r->row), r->col, cp);
		return;
	}
	if (w < 0)
		w = 1;                          /* unknown to libc: still show it */
	if (w > 2)
		w = 2;
	if (r->col + (size_t)w > RENDER_MAX_COLS)
		render_wrap(r);
	line_put_cell(render_line(r, r->row), r->col, cp, w);
	r->col += (size_t)w;
}

static void render_save(render_t *r)
{
	r->saved = true;
	r->saved_abs = r->top_abs + (uint64_t)r->row;
	r->saved_col = r->col;
}

static void render_restore(render_t *r)
{
	if (!r->saved) {
		r->row = 0;
		r->col = 0;
		return;
	}
	if (r->saved_abs < r->top_abs)
		r->row = 0;
	else if (r->saved_abs - r->top_abs >= (uint64_t)r->count)
		r->row = r->count - 1;
	else
		r->row = (int)(r->saved_abs - r->top_abs);
	r->col = r->saved_col;
}

/* Back to one empty line, cursor home, fresh parser. */
static void render_reset(render_t *r)
{
	render_clear_window(r);
	r->count = 1;
	r->row = 0;
	r->col = 0;
	r->saved = false;
	r->u8need = 0;
}

/* ---- the parser ---- */

static void render_csi_dispatch(render_t *r, const struct vtp_seq *q)
{
	uint8_t f = q->final;
	uint32_t p0 = q->param[0], p1 = q->param[1];   /* 0 when not given */
	uint32_t n = p0 ? p0 : 1;
	struct line *l = render_line(r, r->row);

	switch (f) {
	case 'A':                               /* CUU */
	case 'F':                               /* CPL */
		r->row = n > (uint32_t)r->row ? 0 : r->row - (int)n;
		if (f == 'F')
			r->col = 0;
		break;
	case 'B':                               /* CUD */
	case 'E':                               /* CNL */
	case 'e':                               /* VPR */
		r->row = n >= (uint32_t)(r->count - 1 - r->row) ? r->count - 1 : r->row + (int)n;
		if (f == 'E')
			r->col = 0;
		break;
	case 'C':                               /* CUF */
	case 'a':                               /* HPR */
		render_right(r, n);
		break;
	case 'D':                               /* CUB */
		r->col = n > r->col ? 0 : r->col - n;
		break;
	case 'G':                               /* CHA */
	case '`':                               /* HPA */
		render_set_col(r, p0);
		break;
	case 'H':                               /* CUP */
	case 'f':                               /* HVP */
		render_set_row(r, p0);
		render_set_col(r, p1);
		break;
	case 'd':                               /* VPA */
		render_set_row(r, p0);
		break;
	case 'I':                               /* CHT */
		render_tab(r, n);
		break;
	case 'Z':                               /* CBT */
		while (n-- > 0 && r->col > 0)
			r->col = (r->col - 1) / 8 * 8;
		break;
	case 'K':                               /* EL */
		if (p0 == 0)
			line_truncate(l, r->col);
		else if (p0 == 1)
			line_blank(l, 0, r->col + 1);
		else if (p0 == 2)
			line_truncate(l, 0);
		break;
	case 'J':                               /* ED */
		if (p0 == 0) {
			line_truncate(l, r->col);
			for (int i = r->row + 1; i < r->count; i++)
				line_clear(render_line(r, i));
		} else if (p0 == 1) {
			for (int i = 0; i < r->row; i++)
				line_clear(render_line(r, i));
			line_blank(l, 0, r->col + 1);
		} else if (p0 == 2 || p0 == 3) {
			render_clear_window(r);
		}
		break;
	case 'X':                               /* ECH */
		line_blank(l, r->col, r->col + n);
		break;
	case 'P':                               /* DCH */
		line_delete(l, r->col, n);
		break;
	case '@':                               /* ICH */
		line_insert(l, r->col, n);
		break;
	case 'L':                               /* IL */
		render_insert_lines(r, n);
		break;
	case 'M':                               /* DL */
		render_delete_lines(r, n);
		break;
	case 's':                               /* SCOSC */
		render_save(r);
		break;
	case 'u':                               /* SCORC */
		render_restore(r);
		break;
	default:                                /* SGR and the rest */
		break;
	}
}

static void render_control(render_t *r, uint8_t b)
{
	switch (b) {
	case '\r':
		r->col = 0;
		break;
	case '\n':
	case '\v':
	case '\f':
		render_lf(r);
		break;
	case '\b':
		if (r->col > 0)
			r->col--;
		break;
	case '\t':
		render_tab(r, 1);
		break;
	default:                                /* BEL, CAN, SUB and the rest */
		break;
	}
}

static void render_ground(render_t *r, uint8_t b)
{
	if (r->u8need) {
		if (b >= r->u8lo && b <= r->u8hi) {
			r->u8cp = r->u8cp << 6 | (b & 0x3F);
			r->u8lo = 0x80;
			r->u8hi = 0xBF;
			if (--r->u8need == 0)
				render_char(r, r->u8cp);
			return;
		}
		r->u8need = 0;                  /* truncated: one U+FFFD, then b */
		render_char(r, 0xFFFD);
	}
	if (b < 0x20) {
		render_control(r, b);
		return;
	}
	if (b < 0x7F) {
		render_text(r, (const char *)&b, 1);
		return;
	}
	if (b == 0x7F)
		return;
	r->u8lo = 0x80;
	r->u8hi = 0xBF;
	if (b >= 0xC2 && b <= 0xDF) {
		r->u8cp = b & 0x1F;
		r->u8need = 1;
	} else if (b >= 0xE0 && b <= 0xEF) {
		r->u8cp = b & 0x0F;
		r->u8need = 2;
		if (b == 0xE0)
			r->u8lo = 0xA0;         /* no overlongs */
		else if (b == 0xED)
			r->u8hi = 0x9F;         /* no surrogates */
	} else if (b >= 0xF0 && b <= 0xF4) {
		r->u8cp = b & 0x07;
		r->u8need = 3;
		if (b == 0xF0)
			r->u8lo = 0x90;
		else if (b == 0xF4)
			r->u8hi = 0x8F;         /* <= U+10FFFF */
	} else {
		render_char(r, 0xFFFD);
	}
}

/* ESC and a final byte (no intermediates). */
static void render_esc(render_t *r, uint8_t b)
{
	switch (b) {
	case '7':
		render_save(r);
		break;
	case '8':
		render_restore(r);
		break;
	case 'M':                               /* RI */
		if (r->row > 0)
			r->row--;
		break;
	case 'D':                               /* IND */
		render_lf(r);
		break;
	case 'E':                               /* NEL */
		r->col = 0;
		render_lf(r);
		break;
	case 'c':                               /* RIS */
		render_reset(r);
		break;
	default:                                /* other finals: ignored */
		break;
	}
}

/* A run of ground bytes: text, UTF-8, and C0 controls other than ESC. */
static void render_run(render_t *r, const uint8_t *s, const uint8_t *end)
{
	while (s < end) {
		if (!r->u8need) {
			const uint8_t *t = s;

			/* fast path: a run of printable ASCII, CR, LF */
			while (t < end && (uint8_t)(*t - 0x20) < 0x5F)
				t++;
			if (t > s) {
				render_text(r, (const char *)s, (size_t)(t - s));
				s = t;
				continue;
			}
			if (*s == '\r') {
				r->col = 0;
				s++;
				continue;
			}
			if (*s == '\n') {
				render_lf(r);
				s++;
				continue;
			}
		}
		render_ground(r, *s++);
	}
}

static void render_event(void *user, const struct vtp_event *ev)
{
	render_t *r = user;
	const struct vtp_seq *q = ev->seq;

	if (ev->type == VTP_TEXT) {
		render_run(r, (const uint8_t *)ev->data, (const uint8_t *)ev->data + ev->len);
		return;
	}
	if (ev->type == VTP_PENDING)
		return;
	if (r->u8need) {                        /* truncated by the sequence */
		r->u8need = 0;
		render_char(r, 0xFFFD);
	}
	switch (ev->type) {
	case VTP_CTRL:                          /* C0 inside a sequence */
		render_control(r, ev->ch);
		break;
	case VTP_ESC:
		if (!q->ninter)
			render_esc(r, q->final);
		break;
	case VTP_CSI:
		/* private markers and intermediates: modes and such, ignored */
		if (!q->priv && !q->ninter && !(q->flags & VTP_LATE_PRIVATE))
			render_csi_dispatch(r, q);
		break;
	default:                                /* cancelled sequences, strings */
		break;
	}
}

/* ---- interface ---- */

render_t *render_new(int window_rows, render_line_cb cb, void *user)
{
	render_t *r = xcalloc(1, sizeof *r);

	if (window_rows < 1)
		window_rows = 1;
	r->rows = window_rows;
	r->cb = cb;
	r->user = user;
	r->cap = window_rows < RENDER_SLOTS0 ? window_rows : RENDER_SLOTS0;
	r->ring = xcalloc((size_t)r->cap, sizeof *r->ring);
	r->count = 1;
	vtparse_init(&r->vp, VTP_C0_IN_TEXT);
	return r;
}

void render_free(render_t *r)
{
	if (!r)
		return;
	for (int i = 0; i < r->cap; i++)
		line_free(&r->ring[i]);
	free(r->ring);
	free(r->tmp);
	buf_free(&r->scratch);
	free(r);
}

void render_feed(render_t *r, const char *data, size_t n)
{
	vtparse_feed(&r->vp, data, n, render_event, r);
	/* a character cut short by a sequence still open shows now */
	if (r->u8need && !vtparse_in_ground(&r->vp)) {
		r->u8need = 0;
		render_char(r, 0xFFFD);
	}
}

void render_live(const render_t *r, buf_t *out)
{
	size_t start = out->len, keep = start;

	for (int i = 0; i < r->count; i++) {
		const struct line *l = render_line(r, i);

		if (i > 0)
			buf_putc(out, '\n');
		line_append_text(l, out);
		if (line_trimmed(l))
			keep = out->len;
	}
	if (!out->p)
		buf_reserve(out, 0);
	out->len = keep;
	out->p[keep] = 0;
}

void render_commit_above_cursor(render_t *r)
{
	while (r->row > 0) {
		render_pop_top(r);
		r->row--;
	}
}

void render_finish(render_t *r)
{
	int last = -1;

	if (r->u8need) {
		r->u8need = 0;
		render_char(r, 0xFFFD);
	}
	for (int i = 0; i < r->count; i++)
		if (line_trimmed(render_line(r, i)))
			last = i;
	for (int i = 0; i <= last; i++)
		render_emit(r, render_line(r, i));
	render_reset(r);
	vtparse_reset(&r->vp);
}
