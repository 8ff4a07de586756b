/* screen.c — a session's visible screen: libvterm's VTermState parses the
 * output and keeps terminal state (cursor, modes, pen, scroll region), and
 * this file keeps the cells. libvterm's own VTermScreen memmoves the whole
 * grid on every scroll (12 s for 15 MB of `seq` output at 160x48); here
 * rows are pointers, so a full-width scroll is a rotation of row pointers
 * (0.3 s for the same output). Also: primary/alternate buffers, title,
 * cursor, and text extraction for `screen` and full-screen `run`. Rows
 * also remember how much of them was written, so clearing one is O(1).
 * Scrollback: rows scrolled off the top of the primary screen are kept as
 * text lines in a bounded ring (--scrollback). Runs of plain ASCII lines
 * scrolling at the bottom skip libvterm's parse (fast_lines). */
#include "core.h"

#include <string.h>
#include <vterm.h>

#define CELL_CONT 0xFFFFFFFFu   /* right half of a wide character */
#define CELL_MAXCH 3

struct cell {
	uint32_t ch[CELL_MAXCH];  /* ch[0] == 0: blank */
	VTermColor fg, bg;
	uint16_t attrs;           /* bit flags below */
	uint8_t width;
};

enum {
	A_BOLD = 1, A_ITALIC = 2, A_BLINK = 4, A_REVERSE = 8, A_STRIKE = 16,
	A_UNDER_SHIFT = 5,        /* 2 bits of underline style */
};

/* A row stores cells [0, len); every cell past len equals `fill`, so
 * blanking a row (each line feed at the bottom) is O(1), not a rewrite of
 * every cell. */
struct row {
	int len, cap;             /* cells stored / allocated */
	struct cell fill;
	struct cell *c;           /* grown as the row is written: blank rows cost no cells */
};

struct grid {
	struct row **row;         /* row pointers, rotated on scroll; the rows
				   * themselves follow them in the same block */
};

struct screen {
	VTerm *vt;
	VTermState *state;
	int rows, cols;
	/* primary, alternate; the alternate's rows exist only while it is
	 * shown (it is blank whenever it is entered): an idle shell does not
	 * hold a second grid */
	struct grid buf[2];
	int alt;
	struct cell pen;          /* current pen (ch unused) */
	VTermPos cursor;
	int cursor_visible;
	char *title;
	/* scrollback ring: sb_len lines, oldest at sb_head; a slot's buffer
	 * is reused when the ring wraps (no malloc per line scrolled off).
	 * The slots (sb_cap) grow with the lines up to sb_max: an idle
	 * session does not hold --scrollback's worth of them (48 kB at 2000) */
	buf_t *sb;
	size_t sb_cap, sb_max, sb_len, sb_head;
	void (*out_cb)(const char *, size_t, void *);
	void *out_user;
	struct vtfilter vf;       /* what libvterm may see (proto/vtfilter.c) */
	buf_t vtbuf;              /* filtered bytes of one feed */
	/* plain-line fast path (fast_lines): off for good once the output
	 * touched character sets (its ASCII may not map to itself); watch
	 * and the w_ fields check one line libvterm handles itself */
	int fp_off, fp_esc;       /* see fp_scan */
	/* libvterm known plain (as after a watched line): the cursor is at
	 * the start of the last row after the next CR LF; fp_mid: a line
	 * was begun (the cursor is not at its start) */
	int fp_ok, fp_mid;
	int watch, w_bad, w_glyphs, w_scrolls;
	const char *w_text;
	int w_len;                /* its characters (w_text's CR LF not counted) */
};

static struct grid *cur(struct screen *sc)
{
	return &sc->buf[sc->alt];
}

static void blank_cell(struct screen *sc, struct cell *c)
{
	memset(c, 0, sizeof *c);
	c->fg = sc->pen.fg;
	c->bg = sc->pen.bg;
	c->width = 1;
}

static int cell_same(const struct cell *a, const struct cell *b)
{
	return a->ch[0] == b->ch[0] && a->attrs == b->attrs && a->width == b->width &&
	       memcmp(&a->fg, &b->fg, sizeof a->fg) == 0 && memcmp(&a->bg, &b->bg, sizeof a->bg) == 0;
}


/* Make cells [len, upto) real copies of fill. */
static void row_materialize(struct row *r, int upto)
{
	if (upto > r->cap) {
		int cap = r->cap ? r->cap : 16;
		while (cap < upto)
			cap *= 2;
		r->c = xrealloc(r->c, (size_t)cap * sizeof(struct cell));
		r->cap = cap;
	}
	for (int i = r->len; i < upto; i++)
		r->c[i] = r->fill;
	if (upto > r->len)
		r->len = upto;
}

static const struct cell *row_get(const struct row *r, int col)
{
	return col < r->len ? &r->c[col] : &r->fill;
}

static void row_blank(struct screen *sc, struct row *r)
{
	r->len = 0;
	blank_cell(sc, &r->fill);
}

/* Blank cells [c0, c1) of a row with the current pen. */
static void row_erase(struct screen *sc, struct row *r, int c0, int c1)
{
	struct cell b;
	blank_cell(sc, &b);
	if (c1 >= sc->cols) {
		if (c0 >= r->len) {
			if (cell_same(&r->fill, &b))
				return;
			row_materialize(r, c0);
		}
		r->len = c0;
		r->fill = b;
		return;
	}
	row_materialize(r, c1);
	for (int i = c0; i < c1; i++)
		r->c[i] = b;
}

/* One block: the row pointers, then the rows (blank, current pen): a
 * malloc per row cost 48 x 8 bytes of malloc's headers a screen */
static void grid_alloc(struct screen *sc, struct grid *g, int rows)
{
	g->row = xcalloc((size_t)rows, sizeof *g->row + sizeof **g->row);
	struct row *slab = (struct row *)(g->row + rows);
	for (int r = 0; r < rows; r++) {
		blank_cell(sc, &slab[r].fill);
		g->row[r] = &slab[r];
	}
}

static void grid_free(struct grid *g, int rows)
{
	if (!g->row)
		return;
	for (int r = 0; r < rows; r++)
		free(g->row[r]->c);
	free(g->row);
	g->row = NULL;
}

static void put_utf8(buf_t *b, uint32_t cp)
{
	char s[4];
	buf_append(b, s, utf8_encode(cp, s));
}

/* A row's characters, trailing blanks trimmed. Written straight into
 * out's memory, reserved for a byte a cell and grown at a character that
 * takes more: every line scrolled off the screen comes here, and a call
 * per byte was a tenth of termd's CPU for `seq` through a pty session. */
static void row_text(const struct screen *sc, const struct row *row, buf_t *out)
{
	int ncols = row->fill.ch[0] == 0 ? row->len : sc->cols;
	if (!ncols) {
		if (out->p)
			out->p[out->len] = 0;
		return;
	}
	size_t start = out->len;
	buf_reserve(out, (size_t)ncols);
	char *o = out->p + out->len;
	for (int c = 0; c < ncols; c++) {
		const struct cell *cell = row_get(row, c);
		uint32_t ch = cell->ch[0];
		if (!ch) {
			*o++ = ' ';
			continue;
		}
		if (ch < 0x80 && !cell->ch[1]) {
			*o++ = (char)ch;
			continue;
		}
		if (ch == CELL_CONT)
			continue;
		/* room for this cell's characters and a byte for each one left */
		out->len = (size_t)(o - out->p);
		buf_reserve(out, CELL_MAXCH * 4 + (size_t)(ncols - c));
		o = out->p + out->len;
		for (int i = 0; i < CELL_MAXCH && cell->ch[i]; i++)
			o += utf8_encode(cell->ch[i], o);
	}
	while (o > out->p + start && o[-1] == ' ')
		o--;
	out->len = (size_t)(o - out->p);
	out->p[out->len] = 0;
}

/* The scrollback slot for the next line, emptied (NULL: none kept). */
static buf_t *sb_next(struct screen *sc)
{
	if (!sc->sb_max)
		return NULL;
	if (sc->sb_len == sc->sb_cap && sc->sb_cap < sc->sb_max) {
		/* not wrapped yet (sb_head is 0): more slots */
		size_t n = sc->sb_cap ? sc->sb_cap * 2 : 64;
		if (n > sc->sb_max)
			n = sc->sb_max;
		sc->sb = xrealloc(sc->sb, n * sizeof *sc->sb);
		memset(sc->sb + sc->sb_cap, 0, (n - sc->sb_cap) * sizeof *sc->sb);
		sc->sb_cap = n;
	}
	buf_t *slot;
	if (sc->sb_len == sc->sb_cap) {
		slot = &sc->sb[sc->sb_head];
		sc->sb_head = (sc->sb_head + 1) % sc->sb_cap;
	} else {
		slot = &sc->sb[(sc->sb_head + sc->sb_len) % sc->sb_cap];
		sc->sb_len++;
	}
	buf_reset(slot);
	return slot;
}

/* a long line once must not pin its buffer for good */
static void sb_trim(buf_t *slot)
{
	if (slot->cap > 4096 && slot->len < 1024) {
		buf_t t = {0};
		if (slot->len)
			buf_append(&t, slot->p, slot->len);
		buf_free(slot);
		*slot = t;
	}
}

/* A row leaves the top of the primary screen: into the scrollback ring. */
static void sb_push(struct screen *sc, const struct row *row)
{
	buf_t *slot = sb_next(sc);
	if (!slot)
		return;
	row_text(sc, row, slot);
	sb_trim(slot);
}

/* The same for a row that held only these printable ASCII characters
 * from its start (what row_text would make of it: trailing blanks cut). */
static void sb_push_ascii(struct screen *sc, const char *p, size_t len)
{
	buf_t *slot = sb_next(sc);
	if (!slot)
		return;
	while (len && p[len - 1] == ' ')
		len--;
	buf_reserve(slot, len);
	if (len)
		memcpy(slot->p, p, len);
	slot->len = len;
	slot->p[len] = 0;
	sb_trim(slot);
}

static void sb_clear(struct screen *sc)
{
	for (size_t i = 0; i < sc->sb_cap; i++)
		buf_free(&sc->sb[i]);
	sc->sb_len = sc->sb_head = 0;
}

void screen_set_scrollback(struct screen *sc, size_t lines)
{
	sb_clear(sc);
	free(sc->sb);
	sc->sb = NULL;
	sc->sb_cap = 0;
	sc->sb_max = lines;   /* slots made as lines come */
}

size_t screen_scrollback_lines(struct screen *sc)
{
	return sc->sb_len;
}

void screen_scrollback_text(struct screen *sc, size_t max_lines, buf_t *out)
{
	size_t n = max_lines < sc->sb_len ? max_lines : sc->sb_len;
	for (size_t i = sc->sb_len - n; i < sc->sb_len; i++) {
		const buf_t *l = &sc->sb[(sc->sb_head + i) % sc->sb_cap];
		if (l->len)
			buf_append(out, l->p, l->len);
		buf_putc(out, '\n');
	}
}

/* TERMD_TEST_NO_FASTPATH set: every byte through libvterm (the
 * differential test's reference) */
static int fast_path_disabled;

static int cb_putglyph(VTermGlyphInfo *info, VTermPos pos, void *user)
{
	struct screen *sc = user;
	if (sc->watch) {
		/* plain: one ASCII character a cell, left to right on the last row */
		if (sc->w_glyphs >= sc->w_len || info->width != 1 || info->chars[1] || info->dwl || info->dhl ||
		    pos.row != sc->rows - 1 || pos.col != sc->w_glyphs || sc->w_scrolls ||
		    info->chars[0] != (unsigned char)sc->w_text[sc->w_glyphs])
			sc->w_bad = 1;
		sc->w_glyphs++;
	}
	if (pos.row < 0 || pos.row >= sc->rows || pos.col < 0 || pos.col >= sc->cols)
		return 1;
	struct row *row = cur(sc)->row[pos.row];
	int w = info->width > 1 ? info->width : 1;
	int end = pos.col + w < sc->cols ? pos.col + w : sc->cols;
	/* only the cells written are made real: a cell past len is the fill,
	 * never the right half of a wide char */
	if (end > row->len) {
		if (end <= row->cap) {
			for (int i = row->len; i < end; i++)
				row->c[i] = row->fill;
			row->len = end;
		} else {
			row_materialize(row, end);
		}
	}
	/* over the right half of a wide char: blank its left half; over the
	 * left half of one: blank its right half (as xterm and tmux do) */
	if (row->c[pos.col].ch[0] == CELL_CONT && pos.col > 0 &&
	    row->c[pos.col - 1].width == 2 && row->c[pos.col - 1].ch[0] != CELL_CONT)
		blank_cell(sc, &row->c[pos.col - 1]);
	if (end < row->len && row->c[end].ch[0] == CELL_CONT)
		blank_cell(sc, &row->c[end]);
	struct cell *c = &row->c[pos.col];
	c->ch[0] = info->chars[0];
	c->ch[1] = c->ch[0] ? info->chars[1] : 0;
	c->ch[2] = c->ch[1] ? info->chars[2] : 0;
	c->fg = sc->pen.fg;
	c->bg = sc->pen.bg;
	c->attrs = sc->pen.attrs;
	c->width = (uint8_t)w;
	for (int i = 1; i < w && pos.col + i < sc->cols; i++) {
		struct cell *n = c + i;
		*n = *c;
		n->ch[0] = CELL_CONT;
		n->ch[1] = n->ch[2] = 0;
	}
	return 1;
}

static int cb_movecursor(VTermPos pos, VTermPos oldpos, int visible, void *user)
{
	(void)oldpos;
	(void)visible;
	struct screen *sc = user;
	sc->cursor = pos;
	return 1;
}

static int cb_erase(VTermRect rect, int selective, void *user)
{
	(void)selective;
	struct screen *sc = user;
	sc->w_bad |= sc->watch;
	struct grid *g = cur(sc);
	for (int r = rect.start_row; r < rect.end_row && r < sc->rows; r++) {
		if (r < 0)
			continue;
		int c0 = rect.start_col < 0 ? 0 : rect.start_col;
		int c1 = rect.end_col > sc->cols ? sc->cols : rect.end_col;
		if (c1 > c0)
			row_erase(sc, g->row[r], c0, c1);
	}
	return 1;
}

static int cb_moverect(VTermRect dest, VTermRect src, void *user)
{
	struct screen *sc = user;
	sc->w_bad |= sc->watch;
	struct grid *g = cur(sc);
	int nrows = src.end_row - src.start_row;
	int ncols = src.end_col - src.start_col;
	if (ncols <= 0 || nrows <= 0)
		return 1;
	int down = dest.start_row > src.start_row;
	for (int i = 0; i < nrows; i++) {
		int k = down ? nrows - 1 - i : i;
		int sr = src.start_row + k, dr = dest.start_row + k;
		if (sr < 0 || sr >= sc->rows || dr < 0 || dr >= sc->rows)
			continue;
		if (src.start_col < 0 || dest.start_col < 0 || src.start_col + ncols > sc->cols ||
		    dest.start_col + ncols > sc->cols)
			continue;
		row_materialize(g->row[sr], src.start_col + ncols);
		row_materialize(g->row[dr], dest.start_col + ncols);
		memmove(g->row[dr]->c + dest.start_col, g->row[sr]->c + src.start_col,
			(size_t)ncols * sizeof(struct cell));
	}
	return 1;
}

/* Full-width vertical scrolls rotate row pointers; anything else falls back
 * to libvterm's moverect + erase. */
static int cb_scrollrect(VTermRect rect, int downward, int rightward, void *user)
{
	struct screen *sc = user;
	if (sc->watch) {
		if (downward != 1 || rightward || rect.start_row || rect.end_row != sc->rows ||
		    rect.start_col || rect.end_col != sc->cols)
			sc->w_bad = 1;
		sc->w_scrolls++;
	}
	if (rightward != 0 || rect.start_col != 0 || rect.end_col != sc->cols)
		return 0;
	if (rect.start_row < 0 || rect.end_row > sc->rows)
		return 0;
	int h = rect.end_row - rect.start_row;
	int n = downward < 0 ? -downward : downward;
	struct grid *g = cur(sc);
	struct row **rows = g->row + rect.start_row;
	/* as xterm: what leaves the top of the primary screen is history */
	int to_history = downward > 0 && rect.start_row == 0 && !sc->alt;
	if (n >= h) {
		for (int r = 0; r < h; r++) {
			if (to_history)
				sb_push(sc, rows[r]);
			row_blank(sc, rows[r]);
		}
		return 1;
	}
	struct row *tmp[n];
	if (downward > 0) {
		/* content moves up: the top n rows leave, reused at the bottom */
		for (int r = 0; to_history && r < n; r++)
			sb_push(sc, rows[r]);
		memcpy(tmp, rows, (size_t)n * sizeof *rows);
		memmove(rows, rows + n, (size_t)(h - n) * sizeof *rows);
		memcpy(rows + h - n, tmp, (size_t)n * sizeof *rows);
		for (int r = h - n; r < h; r++)
			row_blank(sc, rows[r]);
	} else if (downward < 0) {
		memcpy(tmp, rows + h - n, (size_t)n * sizeof *rows);
		memmove(rows + n, rows, (size_t)(h - n) * sizeof *rows);
		memcpy(rows, tmp, (size_t)n * sizeof *rows);
		for (int r = 0; r < n; r++)
			row_blank(sc, rows[r]);
	}
	return 1;
}

static int cb_initpen(void *user)
{
	struct screen *sc = user;
	sc->w_bad |= sc->watch;
	sc->pen.attrs = 0;
	vterm_state_get_default_colors(sc->state, &sc->pen.fg, &sc->pen.bg);
	return 1;
}

static void set_attr_bit(struct screen *sc, uint16_t bit, int on)
{
	if (on)
		sc->pen.attrs |= bit;
	else
		sc->pen.attrs &= (uint16_t)~bit;
}

static int cb_setpenattr(VTermAttr attr, VTermValue *val, void *user)
{
	struct screen *sc = user;
	sc->w_bad |= sc->watch;
	switch (attr) {
	case VTERM_ATTR_BOLD: set_attr_bit(sc, A_BOLD, val->boolean); break;
	case VTERM_ATTR_ITALIC: set_attr_bit(sc, A_ITALIC, val->boolean); break;
	case VTERM_ATTR_BLINK: set_attr_bit(sc, A_BLINK, val->boolean); break;
	case VTERM_ATTR_REVERSE: set_attr_bit(sc, A_REVERSE, val->boolean); break;
	case VTERM_ATTR_STRIKE: set_attr_bit(sc, A_STRIKE, val->boolean); break;
	case VTERM_ATTR_UNDERLINE:
		sc->pen.attrs &= (uint16_t)~(3u << A_UNDER_SHIFT);
		sc->pen.attrs |= (uint16_t)((val->number & 3) << A_UNDER_SHIFT);
		break;
	case VTERM_ATTR_FOREGROUND: sc->pen.fg = val->color; break;
	case VTERM_ATTR_BACKGROUND: sc->pen.bg = val->color; break;
	default: break;
	}
	return 1;
}

static int cb_settermprop(VTermProp prop, VTermValue *val, void *user)
{
	struct screen *sc = user;
	sc->w_bad |= sc->watch;
	switch (prop) {
	case VTERM_PROP_ALTSCREEN: {
		int alt = val->boolean ? 1 : 0;
		if (alt && !sc->alt)
			grid_alloc(sc, &sc->buf[1], sc->rows);   /* blank, current pen */
		else if (!alt)
			grid_free(&sc->buf[1], sc->rows);
		sc->alt = alt;
		return 1;
	}
	case VTERM_PROP_CURSORVISIBLE:
		sc->cursor_visible = val->boolean;
		return 1;
	case VTERM_PROP_TITLE:
		/* titles come from shellint's own OSC scan (libvterm 0.1.4 loses
		 * the first part of an OSC split across reads) */
		return 1;
	default:
		return 1;
	}
}

static int cb_resize(int rows, int cols, VTermPos *delta, void *user)
{
	struct screen *sc = user;
	sc->w_bad |= sc->watch;
	/* keep the cursor's row visible when shrinking: drop rows at the top */
	int shift = 0;
	if (rows < sc->rows && sc->cursor.row >= rows)
		shift = sc->cursor.row - rows + 1;
	for (int r = 0; !sc->alt && r < shift; r++)
		sb_push(sc, sc->buf[0].row[r]);
	for (int b = 0; b < 2; b++) {
		struct grid ng;
		if (!sc->buf[b].row)
			continue;   /* the alternate, not shown */
		grid_alloc(sc, &ng, rows);
		for (int r = 0; r < rows; r++) {
			int orow = r + (b == sc->alt ? shift : 0);   /* only the shown buffer follows the cursor */
			if (orow >= sc->rows)
				break;
			struct row *o = sc->buf[b].row[orow], *nr = ng.row[r];
			int n = o->len < cols ? o->len : cols;
			nr->fill = o->fill;
			row_materialize(nr, n);
			if (n)
				memcpy(nr->c, o->c, (size_t)n * sizeof(struct cell));
			/* a wide char cut in half at the right edge */
			if (n > 0 && n == cols && nr->c[n - 1].width == 2 && nr->c[n - 1].ch[0] != CELL_CONT)
				blank_cell(sc, &nr->c[n - 1]);
		}
		grid_free(&sc->buf[b], sc->rows);
		sc->buf[b] = ng;
	}
	if (delta)
		delta->row -= shift;
	sc->rows = rows;
	sc->cols = cols;
	return 1;
}

/* Could libvterm map ASCII to something else (a character set other than
 * ASCII designated: ESC ( ) * + with a final other than B, a 96-character
 * or multibyte set ESC - . / $; a shift SO LS2 LS3 or single shift SS2
 * SS3)? Then the fast path is off until a reset (RIS). ESC ( B alone,
 * in many a prompt (terminfo's sgr0), changes nothing. fp_esc carries an
 * ESC or ESC and its intermediate across feeds. */
static void fp_scan(struct screen *sc, const char *d, size_t n)
{
	if (!sc->fp_esc && !memchr(d, 0x1b, n) && !memchr(d, 0xc2, n) && !memchr(d, 0x0e, n))
		return;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)d[i];
		int pend = sc->fp_esc;
		sc->fp_esc = 0;
		if (c == 0x0e || (i && (unsigned char)d[i - 1] == 0xc2 && (c == 0x8e || c == 0x8f)) ||
		    (c == 0xc2 && i + 1 == n))
			sc->fp_off = 1;   /* (0xC2 last: rare, not worth carrying) */
		else if (c == 0x1b)
			sc->fp_esc = 1;
		else if (pend == 1 && c == 'c')
			sc->fp_off = 0;   /* RIS: ASCII again */
		else if (pend == 1 && c && strchr("()*+", c))
			sc->fp_esc = c;
		else if (pend == 1 && c && strchr("-./$NOno", c))
			sc->fp_off = 1;
		else if (pend > 1 && c != 'B')
			sc->fp_off = 1;
	}
}

/* Cells [0, len) of a blank row: the characters with the pen, as
 * cb_putglyph makes them. */
static void row_put_ascii(struct screen *sc, struct row *row, const char *p, size_t len)
{
	row_materialize(row, (int)len);
	for (size_t i = 0; i < len; i++) {
		struct cell *c = &row->c[i];
		c->ch[0] = (unsigned char)p[i];
		c->ch[1] = c->ch[2] = 0;
		c->fg = sc->pen.fg;
		c->bg = sc->pen.bg;
		c->attrs = sc->pen.attrs;
		c->width = 1;
	}
}

#define FP_BATCH 256
struct fp_batch {
	int n;
	const char *p[FP_BATCH];
	int len[FP_BATCH];
};

/* The batch's plain lines (each at most cols) written one by one at the
 * start of the blank last row, each followed by a full-screen scroll:
 * what libvterm's callbacks do for them, in one rotation of the rows.
 * Of rows[0..R-2], the batch's lines, then a blank row, the first n go
 * to history (on the primary screen), the last R stay on screen. */
static void fast_put(struct screen *sc, struct fp_batch *b)
{
	int R = sc->rows, K = b->n;
	struct grid *g = cur(sc);
	if (!K)
		return;
	b->n = 0;
	if (g->row[R - 1]->len != 0) {
		/* (not blank: never after a scroll; libvterm's way, to be sure) */
		VTermRect all = {.start_row = 0, .end_row = R, .start_col = 0, .end_col = sc->cols};
		uint32_t ch[2] = {0, 0};
		VTermGlyphInfo info = {.chars = ch, .width = 1};
		for (int i = 0; i < K; i++) {
			VTermPos pos = {.row = R - 1};
			for (pos.col = 0; pos.col < b->len[i]; pos.col++) {
				ch[0] = (unsigned char)b->p[i][pos.col];
				cb_putglyph(&info, pos, sc);
			}
			cb_scrollrect(all, 1, 0, sc);
		}
		return;
	}
	int to_history = !sc->alt;
	int m = K < R - 1 ? K : R - 1;   /* rows that leave the screen */
	for (int r = 0; to_history && r < m; r++)
		sb_push(sc, g->row[r]);
	for (int i = 0; to_history && i <= K - R; i++)
		sb_push_ascii(sc, b->p[i], (size_t)b->len[i]);
	struct row *pool[FP_BATCH + 1], *nrow[R];
	int np = 0;
	for (int r = 0; r < m; r++)
		pool[np++] = g->row[r];
	pool[np++] = g->row[R - 1];
	for (int i = 0; i < R; i++) {
		int j = K + i;   /* in rows[0..R-2], lines, blank */
		if (j < R - 1) {
			nrow[i] = g->row[j];
			continue;
		}
		struct row *r = nrow[i] = pool[--np];
		row_blank(sc, r);
		if (j < R - 1 + K)
			row_put_ascii(sc, r, b->p[j - (R - 1)], (size_t)b->len[j - (R - 1)]);
	}
	memcpy(g->row, nrow, sizeof nrow);
}

static size_t printable_run(const char *p, const char *end)
{
	const unsigned char *q = (const unsigned char *)p, *e = (const unsigned char *)end;
	while (q < e && (unsigned char)(*q - 0x20) < 0x5f)   /* 0x20..0x7e */
		q++;
	return (size_t)(q - (const unsigned char *)p);
}

/* Watch libvterm take the plain line at p: is its state plain? */
static int watched_line(struct screen *sc, const char *p, size_t len)
{
	sc->watch = 1;
	sc->w_bad = sc->w_glyphs = sc->w_scrolls = 0;
	sc->w_text = p;
	sc->w_len = (int)len - 2;
	vterm_input_write(sc->vt, p, len);
	sc->watch = 0;
	VTermPos cp;
	vterm_state_get_cursorpos(sc->state, &cp);
	return !sc->w_bad && sc->w_glyphs == (int)len - 2 && sc->w_scrolls == 1 &&
	       cp.row == sc->rows - 1 && cp.col == 0;
}

/* Length of the line at p if it is printable ASCII ended by CR LF, else 0;
 * *chars: its characters. */
static size_t text_line(const char *p, const char *end, size_t *chars)
{
	size_t k = printable_run(p, end);
	const char *q = p + k;
	*chars = k;
	return end - q >= 2 && q[0] == '\r' && q[1] == '\n' ? k + 2 : 0;
}

/* Up to the first line end at p for libvterm, then lines of printable
 * text one by one until the cursor is at the start of the last row with
 * no double-width row on screen, then one (at most cols) watched: fp_ok
 * if it was plain. Returns where to go on. */
static const char *fast_start(struct screen *sc, const char *p, const char *end)
{
	const char *nl = memchr(p, '\n', (size_t)(end - p));
	if (!nl)
		nl = end - 1;
	vterm_input_write(sc->vt, p, (size_t)(nl + 1 - p));
	p = nl + 1;
	size_t len, k;
	for (; (len = text_line(p, end, &k)); p += len) {
		VTermPos cp;
		vterm_state_get_cursorpos(sc->state, &cp);
		int ok = cp.row == sc->rows - 1 && cp.col == 0 && (int)k <= sc->cols;
		for (int r = 0; ok && r < sc->rows; r++) {
			const VTermLineInfo *li = vterm_state_get_lineinfo(sc->state, r);
			ok = !li->doublewidth && !li->doubleheight;
		}
		if (ok) {
			sc->fp_ok = watched_line(sc, p, len);
			return p + len;
		}
		vterm_input_write(sc->vt, p, len);
	}
	return p;
}

/* Plain text (no ESC, no C1) for libvterm. A plain line (printable ASCII,
 * at most cols, CR LF) written at the start of the last row of a
 * full-screen scroll region does to libvterm's state only what the first
 * such line did: cursor back where it was. So once libvterm took one
 * while its callbacks were watched (one ASCII glyph a cell on the last
 * row, one full-screen scroll, nothing else: no insert mode, margins,
 * double-width line, pending UTF-8; see fast_start), plain lines are put
 * in the grid here with what those callbacks do, as long as only lines
 * of printable text follow (fp_ok, across feeds too). libvterm still
 * takes the lines wider than the screen, the end of a line begun in an
 * earlier feed or begun at the end of this one, and each run's last line
 * (so it remembers the same last character, for REP). `seq 1 2000000`
 * through `run` (15 MB): termd's CPU 0.50 -> 0.22 s, libvterm's share
 * of it 38% -> 1%. */
static void fast_lines(struct screen *sc, const char *data, size_t n)
{
	const char *p = data, *end = data + n;
	struct fp_batch b;
	b.n = 0;
	if (sc->fp_off || fast_path_disabled) {
		sc->fp_ok = 0;
		vterm_input_write(sc->vt, data, n);
		return;
	}
	size_t nlen = 0, nk = 0;   /* the next line, when looked at already */
	int looked = 0;
	while (p < end) {
		if (!sc->fp_ok) {
			p = fast_start(sc, p, end);
			sc->fp_mid = 0;
			looked = 0;
			continue;
		}
		size_t k, len;
		if (looked) {
			len = nlen;
			k = nk;
			looked = 0;
		} else {
			len = text_line(p, end, &k);
		}
		if (!len) {
			if (p + k == end) {
				sc->fp_mid |= k > 0;   /* a line begun: plain still */
				break;
			}
			sc->fp_ok = 0;   /* other bytes: libvterm's, then watch again */
			fast_put(sc, &b);
			continue;
		}
		if (!sc->fp_mid && (int)k <= sc->cols) {
			nlen = text_line(p + len, end, &nk);
			looked = 1;
		}
		if (looked && nlen) {
			b.p[b.n] = p;
			b.len[b.n++] = (int)k;
			if (b.n == FP_BATCH)
				fast_put(sc, &b);
		} else {
			fast_put(sc, &b);
			vterm_input_write(sc->vt, p, len);
		}
		sc->fp_mid = 0;
		p += len;
	}
	fast_put(sc, &b);
	if (p < end)
		vterm_input_write(sc->vt, p, (size_t)(end - p));
}

/* Every byte for libvterm goes through proto/vtfilter.c's filter first. */
static void vt_write(struct screen *sc, const char *data, size_t n)
{
	fp_scan(sc, data, n);
	if (vtfilter_clean(&sc->vf, data, n)) {
		fast_lines(sc, data, n);   /* plain text: no copy */
		return;
	}
	sc->fp_ok = 0;
	buf_reset(&sc->vtbuf);
	vtfilter_feed(&sc->vf, data, n, &sc->vtbuf);
	if (sc->vtbuf.len)
		vterm_input_write(sc->vt, sc->vtbuf.p, sc->vtbuf.len);
	if (sc->vtbuf.cap > 256 * 1024)
		buf_free(&sc->vtbuf);   /* a rare big feed does not pin its copy */
}

static const VTermStateCallbacks state_cbs = {
	.putglyph = cb_putglyph,
	.movecursor = cb_movecursor,
	.scrollrect = cb_scrollrect,
	.moverect = cb_moverect,
	.erase = cb_erase,
	.initpen = cb_initpen,
	.setpenattr = cb_setpenattr,
	.settermprop = cb_settermprop,
	.resize = cb_resize,
};

static void vt_output(const char *s, size_t len, void *user)
{
	struct screen *sc = user;
	if (sc->out_cb)
		sc->out_cb(s, len, sc->out_user);
}

struct screen *screen_new(int rows, int cols)
{
	struct screen *sc = xcalloc(1, sizeof *sc);
	fast_path_disabled = getenv("TERMD_TEST_NO_FASTPATH") != NULL;
	sc->rows = rows;
	sc->cols = cols;
	sc->cursor_visible = 1;
	sc->vt = vterm_new(rows, cols);
	vterm_set_utf8(sc->vt, 1);
	sc->state = vterm_obtain_state(sc->vt);
	vterm_state_get_default_colors(sc->state, &sc->pen.fg, &sc->pen.bg);
	grid_alloc(sc, &sc->buf[0], rows);
	vterm_state_set_callbacks(sc->state, &state_cbs, sc);
	vterm_output_set_callback(sc->vt, vt_output, sc);
	vterm_state_reset(sc->state, 1);
	/* libvterm 0.1.4 loops forever on REP (CSI b) before any character
	 * was printed: print one and erase it */
	vt_write(sc, " \r\x1b[K", 5);
	return sc;
}

void screen_free(struct screen *sc)
{
	if (!sc)
		return;
	vterm_free(sc->vt);
	grid_free(&sc->buf[0], sc->rows);
	grid_free(&sc->buf[1], sc->rows);
	sb_clear(sc);
	free(sc->sb);
	buf_free(&sc->vtbuf);
	free(sc->title);
	free(sc);
}

void screen_set_output(struct screen *sc, void (*cb)(const char *, size_t, void *), void *user)
{
	sc->out_cb = cb;
	sc->out_user = user;
}

/* in slices: libvterm's text handling keeps a chunk's characters on the
 * stack (a feed of megabytes at once, a pipe session's kept output,
 * overflowed it) */
#define FEED_SLICE ((size_t)64 << 10)

void screen_feed(struct screen *sc, const char *data, size_t n)
{
	do {
		size_t k = n > FEED_SLICE ? FEED_SLICE : n;
		vt_write(sc, data, k);
		data += k;
		n -= k;
	} while (n);
}

void screen_resize(struct screen *sc, int rows, int cols)
{
	if (rows == sc->rows && cols == sc->cols)
		return;
	/* as xterm: no scroll region across a resize (libvterm 0.1.4 clamps
	 * only its bottom, and a top below the new last row corrupts memory) */
	static const char reset[] = "\x1b" "7\x1b[r\x1b" "8";
	vt_write(sc, reset, sizeof reset - 1);
	vterm_set_size(sc->vt, rows, cols);
	sc->fp_ok = 0;
}

void screen_text(struct screen *sc, buf_t *out)
{
	struct grid *g = cur(sc);
	buf_reserve(out, (size_t)sc->rows);   /* out->p exists even if all is blank */
	for (int r = 0; r < sc->rows; r++) {
		row_text(sc, g->row[r], out);
		if (r + 1 < sc->rows)
			buf_putc(out, '\n');
	}
}

int screen_alt(struct screen *sc)
{
	return sc->alt;
}

void screen_cursor(struct screen *sc, int *row, int *col, int *visible)
{
	/* libvterm moves its cursor without a callback at times (origin mode,
	 * alt screen restore): ask it, and clamp to the screen */
	VTermPos p;
	vterm_state_get_cursorpos(sc->state, &p);
	*row = p.row < 0 ? 0 : p.row >= sc->rows ? sc->rows - 1 : p.row;
	*col = p.col < 0 ? 0 : p.col >= sc->cols ? sc->cols - 1 : p.col;
	*visible = sc->cursor_visible;
}

int screen_cursor_after_text(struct screen *sc)
{
	int row, col, vis;
	screen_cursor(sc, &row, &col, &vis);
	const struct row *r = cur(sc)->row[row];
	for (int c = 0; c < col; c++) {
		uint32_t ch = row_get(r, c)->ch[0];
		if (ch != 0 && ch != ' ')
			return 1;
	}
	return 0;
}

const char *screen_title(struct screen *sc)
{
	return sc->title ? sc->title : "";
}

void screen_set_title(struct screen *sc, const char *t, size_t n)
{
	free(sc->title);
	sc->title = xstrndup(t, n);
}

void screen_key(struct screen *sc, int vterm_key, int mod)
{
	vterm_keyboard_key(sc->vt, (VTermKey)vterm_key, (VTermModifier)mod);
}

void screen_unichar(struct screen *sc, uint32_t c, int mod)
{
	vterm_keyboard_unichar(sc->vt, c, (VTermModifier)mod);
}

/* SGR parameters for one colour (fg: base 30, bg: base 40). */
static void sgr_color(buf_t *b, const VTermColor *c, int bg)
{
	if (bg ? VTERM_COLOR_IS_DEFAULT_BG(c) : VTERM_COLOR_IS_DEFAULT_FG(c)) {
		buf_puts(b, bg ? ";49" : ";39");
	} else if (VTERM_COLOR_IS_INDEXED(c)) {
		int i = c->indexed.idx;
		if (i < 8)
			buf_printf(b, ";%d", (bg ? 40 : 30) + i);
		else if (i < 16)
			buf_printf(b, ";%d", (bg ? 100 : 90) + i - 8);
		else
			buf_printf(b, ";%d;5;%d", bg ? 48 : 38, i);
	} else {
		buf_printf(b, ";%d;2;%d;%d;%d", bg ? 48 : 38, c->rgb.red, c->rgb.green, c->rgb.blue);
	}
}

static void sgr_for(buf_t *b, const struct cell *c)
{
	buf_puts(b, "\x1b[0");
	if (c->attrs & A_BOLD)
		buf_puts(b, ";1");
	if (c->attrs & A_ITALIC)
		buf_puts(b, ";3");
	int ul = (c->attrs >> A_UNDER_SHIFT) & 3;
	if (ul == 1)
		buf_puts(b, ";4");
	else if (ul == 2)
		buf_puts(b, ";21");
	else if (ul == 3)
		buf_puts(b, ";4");
	if (c->attrs & A_BLINK)
		buf_puts(b, ";5");
	if (c->attrs & A_REVERSE)
		buf_puts(b, ";7");
	if (c->attrs & A_STRIKE)
		buf_puts(b, ";9");
	sgr_color(b, &c->fg, 0);
	sgr_color(b, &c->bg, 1);
	buf_putc(b, 'm');
}

static int pen_same(const struct cell *a, const struct cell *b)
{
	return a->attrs == b->attrs && memcmp(&a->fg, &b->fg, sizeof a->fg) == 0 &&
	       memcmp(&a->bg, &b->bg, sizeof a->bg) == 0;
}

/* Bytes that, written to a blank terminal of this size, reproduce the
 * visible screen: alternate screen on or off, every cell with its colours
 * and attributes, then the cursor's position and visibility. */
void screen_snapshot(struct screen *sc, buf_t *out)
{
	struct grid *g = cur(sc);
	buf_puts(out, sc->alt ? "\x1b[?1049h" : "\x1b[?1049l");
	buf_puts(out, "\x1b[0m\x1b[H\x1b[2J");
	struct cell pen;
	int have_pen = 0;
	for (int r = 0; r < sc->rows; r++) {
		const struct row *row = g->row[r];
		/* cells past the written part that are plain blanks need no bytes */
		int last = sc->cols;
		if (row->fill.ch[0] == 0 && VTERM_COLOR_IS_DEFAULT_BG(&row->fill.bg) &&
		    !(row->fill.attrs & A_REVERSE))
			last = row->len;
		if (last == 0)
			continue;
		buf_printf(out, "\x1b[%d;1H", r + 1);
		for (int c = 0; c < last; c++) {
			const struct cell *cell = row_get(row, c);
			if (cell->ch[0] == CELL_CONT)
				continue;
			if (!have_pen || !pen_same(&pen, cell)) {
				sgr_for(out, cell);
				pen = *cell;
				have_pen = 1;
			}
			if (cell->ch[0] == 0) {
				buf_putc(out, ' ');
				continue;
			}
			for (int i = 0; i < CELL_MAXCH && cell->ch[i]; i++)
				put_utf8(out, cell->ch[i]);
		}
	}
	/* the pen the program had set, then cursor */
	sgr_for(out, &sc->pen);
	int crow, ccol, cvis;
	screen_cursor(sc, &crow, &ccol, &cvis);
	buf_printf(out, "\x1b[%d;%dH", crow + 1, ccol + 1);
	buf_puts(out, sc->cursor_visible ? "\x1b[?25h" : "\x1b[?25l");
}
