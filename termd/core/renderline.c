/* renderline.c — owns the renderer's line store beyond the per-byte fast
 * path (renderline.h): growing and freeing a line, widening it to cells,
 * truncating, blanking, deleting and inserting columns, combining
 * characters and their pool, and a line's text as UTF-8. */
#include "renderline.h"

static size_t line_esize(const struct line *l)
{
	return l->cells ? 4 : 1;
}

void line_grow(struct line *l, size_t bytes)
{
	size_t cap;

	if (bytes <= l->bcap)
		return;
	cap = l->bcap ? l->bcap : 64;
	while (cap < bytes)
		cap *= 2;
	l->d = xrealloc(l->d, cap);
	l->bcap = cap;
}

void line_free(struct line *l)
{
	free(l->d);
	free(l->pool);
	memset(l, 0, sizeof *l);
}

void line_to_cells(struct line *l)
{
	uint8_t *b;
	uint32_t *c;
	size_t i;

	if (l->cells)
		return;
	line_grow(l, (l->len ? l->len : 16) * 4);
	b = l->d;
	c = l->d;
	/* widen in place, back to front: cell i never overlaps byte j < i */
	for (i = l->len; i-- > 0;)
		c[i] = b[i];
	l->cells = true;
	l->plen = 0;
}

void line_truncate(struct line *l, size_t pos)
{
	if (pos >= l->len)
		return;
	line_cut(l, pos);
	l->len = pos;
	if (!pos) {
		l->cells = false;
		l->plen = 0;
	}
}

/* [a, b) become blank. */
void line_blank(struct line *l, size_t a, size_t b)
{
	if (a >= l->len)
		return;
	if (b >= l->len) {
		line_truncate(l, a);
		return;
	}
	line_cut(l, a);
	line_cut(l, b);
	line_fill(l, a, b);
}

/* Delete n columns at col, pulling the rest left. */
void line_delete(struct line *l, size_t col, size_t n)
{
	size_t es = line_esize(l);
	uint8_t *d = l->d;

	if (col >= l->len)
		return;
	if (n >= l->len - col) {
		line_truncate(l, col);
		return;
	}
	line_cut(l, col);
	line_cut(l, col + n);
	memmove(d + col * es, d + (col + n) * es, (l->len - col - n) * es);
	l->len -= n;
}

/* Insert n blank columns at col, pushing the rest right (up to the limit). */
void line_insert(struct line *l, size_t col, size_t n)
{
	size_t es, kept, newlen;
	uint8_t *d;

	if (col >= l->len)
		return;
	if (n >= RENDER_MAX_COLS - col) {
		line_truncate(l, col);
		return;
	}
	newlen = l->len + n;
	if (newlen > RENDER_MAX_COLS)
		newlen = RENDER_MAX_COLS;
	kept = newlen - col - n;
	line_cut(l, col);
	line_cut(l, col + kept);
	line_reserve(l, newlen);
	es = line_esize(l);
	d = l->d;
	memmove(d + (col + n) * es, d + col * es, kept * es);
	line_fill(l, col, col + n);
	l->len = newlen;
}

static void line_pool_compact(struct line *l)
{
	uint32_t *np = xmalloc(l->pcap * sizeof *np), *c = l->d;
	size_t o = 0;

	for (size_t i = 0; i < l->len; i++) {
		uint32_t v = c[i];
		const uint32_t *e;

		if (!(v & CELL_COMB))
			continue;
		e = l->pool + (v & ~CELL_COMB);
		memcpy(np + o, e, (e[0] + 1) * sizeof *np);
		c[i] = CELL_COMB | (uint32_t)o;
		o += e[0] + 1;
	}
	free(l->pool);
	l->pool = np;
	l->plen = o;
}

/* Offset of need free uint32_t in the pool. Garbage (overwritten cells'
 * sequences) is dropped by compaction; the pool is kept large relative to
 * the line so compaction stays amortised O(1). */
static size_t line_pool_alloc(struct line *l, size_t need)
{
	size_t off, want;

	if (l->plen + need > l->pcap) {
		if (l->plen)
			line_pool_compact(l);
		want = 2 * (l->plen + need);
		if (want < 64)
			want = 64;
		if (want < l->len / 4)
			want = l->len / 4;
		if (l->pcap < want) {
			l->pool = xrealloc(l->pool, want * sizeof *l->pool);
			l->pcap = want;
		}
	}
	off = l->plen;
	l->plen += need;
	return off;
}

/* Attach a zero-width character to the cell before col. */
void line_combine(struct line *l, size_t col, uint32_t cp)
{
	uint32_t tmp[RENDER_COMB_MAX + 1], *c, v;
	size_t pos, n, off;

	if (col == 0 || col > l->len)
		return;
	pos = col - 1;
	line_to_cells(l);
	c = l->d;
	if (c[pos] == CELL_CONT && pos > 0)
		pos--;
	v = c[pos];
	if (v == CELL_CONT)
		return;
	if (v & CELL_COMB) {
		uint32_t *e = l->pool + (v & ~CELL_COMB);
		n = e[0];
		if (n >= RENDER_COMB_MAX)
			return;
		if ((v & ~CELL_COMB) + 1 + n == l->plen && l->plen < l->pcap) {
			l->pool[l->plen++] = cp;
			e[0]++;
			return;
		}
		memcpy(tmp + 1, e + 1, n * sizeof *tmp);
	} else {
		tmp[1] = v;
		n = 1;
	}
	tmp[1 + n++] = cp;
	tmp[0] = (uint32_t)n;
	off = line_pool_alloc(l, n + 1);
	memcpy(l->pool + off, tmp, (n + 1) * sizeof *tmp);
	c[pos] = CELL_COMB | (uint32_t)off;
}

/* Append the line's text, trimmed, as UTF-8 (out stays NUL-terminated). */
void line_append_text(const struct line *l, buf_t *out)
{
	size_t n = line_trimmed(l);
	const uint32_t *c = l->d;

	if (!l->cells) {
		buf_append(out, l->d, n);
		return;
	}
	buf_reserve(out, n * 4);
	for (size_t i = 0; i < n; i++) {
		uint32_t v = c[i];

		if (v == CELL_CONT)
			continue;
		if (v & CELL_COMB) {
			const uint32_t *e = l->pool + (v & ~CELL_COMB);
			buf_reserve(out, (e[0] + n - i) * 4);
			for (uint32_t k = 1; k <= e[0]; k++)
				out->len += utf8_encode(e[k], out->p + out->len);
		} else {
			out->len += utf8_encode(v, out->p + out->len);
		}
	}
	out->p[out->len] = 0;
}
