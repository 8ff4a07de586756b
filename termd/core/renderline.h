/* renderline.h — the renderer's line store (render.c's lines): one line of
 * text as columns, stored narrow (one byte per column, printable ASCII only,
 * the fast path) until something else lands on it; then 32-bit cells (code
 * point, right half of a wide character, or an index into the line's pool of
 * combining sequences). What render.c calls per byte or cell is static
 * inline here; the rest is in renderline.c. */
#ifndef TERMD_RENDERLINE_H
#define TERMD_RENDERLINE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "util.h"

/* Columns are 0..RENDER_MAX_COLS-1; text reaching the limit wraps (a forced
 * new line) so memory per line stays bounded. Cursor movement is clamped. */
#define RENDER_MAX_COLS   65536u
#define RENDER_COMB_MAX   8              /* code points per cell, base included */
#define RENDER_KEEP_BYTES (64u << 10)    /* a cleared line keeps this much */

#define CELL_CONT 0x00200000u            /* right half of a wide character */
#define CELL_COMB 0x80000000u            /* | offset of [n, cp...] in pool */

struct line {
	void *d;            /* uint8_t[] when narrow, uint32_t[] when cells */
	size_t bcap;        /* bytes allocated at d */
	size_t len;         /* columns in use */
	bool cells;
	uint32_t *pool;     /* combining sequences, cells mode only */
	size_t plen, pcap;  /* in uint32_t */
};

/* Room for at least `bytes` bytes at l->d (doubling, 64 at first). */
void line_grow(struct line *l, size_t bytes);
/* Narrow to cells, in place (a line already in cells is left alone). */
void line_to_cells(struct line *l);
void line_free(struct line *l);
void line_truncate(struct line *l, size_t pos);
/* [a, b) become blank. */
void line_blank(struct line *l, size_t a, size_t b);
/* Delete n columns at col, pulling the rest left. */
void line_delete(struct line *l, size_t col, size_t n);
/* Insert n blank columns at col, pushing the rest right (up to the limit). */
void line_insert(struct line *l, size_t col, size_t n);
/* Attach a zero-width character to the cell before col. */
void line_combine(struct line *l, size_t col, uint32_t cp);
/* Append the line's text, trimmed, as UTF-8 (out stays NUL-terminated). */
void line_append_text(const struct line *l, buf_t *out);

/* Room for ncols columns (narrow lines also keep a byte for a NUL). */
static inline void line_reserve(struct line *l, size_t ncols)
{
	size_t bytes = l->cells ? ncols * 4 : ncols + 1;

	if (bytes > l->bcap)
		line_grow(l, bytes);
}

static inline void line_clear(struct line *l)
{
	l->len = 0;
	l->cells = false;
	l->plen = 0;
	if (l->bcap > RENDER_KEEP_BYTES) {
		free(l->d);
		l->d = NULL;
		l->bcap = 0;
	}
	if (l->pcap > RENDER_KEEP_BYTES / 4) {
		free(l->pool);
		l->pool = NULL;
		l->pcap = 0;
	}
}

/* Keep wide characters whole across a boundary at pos: one that straddles
 * it is replaced by two spaces. */
static inline void line_cut(struct line *l, size_t pos)
{
	uint32_t *c = l->d;

	if (!l->cells || pos == 0 || pos >= l->len)
		return;
	if (c[pos] == CELL_CONT) {
		c[pos - 1] = ' ';
		c[pos] = ' ';
	}
}

/* Spaces into [a, b), which must be reserved. */
static inline void line_fill(struct line *l, size_t a, size_t b)
{
	if (a >= b)
		return;
	if (!l->cells) {
		memset((uint8_t *)l->d + a, ' ', b - a);
	} else {
		uint32_t *c = l->d;
		for (size_t i = a; i < b; i++)
			c[i] = ' ';
	}
}

/* Printable ASCII s[0..k) at col. */
static inline void line_put_ascii(struct line *l, size_t col, const char *s, size_t k)
{
	size_t end = col + k;

	line_reserve(l, end);
	if (col > l->len)
		line_fill(l, l->len, col);
	if (!l->cells) {
		memcpy((uint8_t *)l->d + col, s, k);
	} else {
		uint32_t *c = l->d;
		line_cut(l, col);
		line_cut(l, end);
		for (size_t i = 0; i < k; i++)
			c[col + i] = (uint8_t)s[i];
	}
	if (end > l->len)
		l->len = end;
}

/* Any character of width w (1 or 2) at col. */
static inline void line_put_cell(struct line *l, size_t col, uint32_t cp, int w)
{
	size_t end = col + (size_t)w;
	uint32_t *c;

	if (!l->cells)
		line_to_cells(l);
	line_reserve(l, end);
	c = l->d;
	if (col > l->len)
		line_fill(l, l->len, col);
	line_cut(l, col);
	line_cut(l, end);
	c[col] = cp;
	if (w == 2)
		c[col + 1] = CELL_CONT;
	if (end > l->len)
		l->len = end;
}

/* Columns left after trimming trailing spaces. */
static inline size_t line_trimmed(const struct line *l)
{
	size_t n = l->len;

	if (!l->cells) {
		const uint8_t *b = l->d;
		while (n && b[n - 1] == ' ')
			n--;
	} else {
		const uint32_t *c = l->d;
		while (n && c[n - 1] == ' ')
			n--;
	}
	return n;
}

#endif
