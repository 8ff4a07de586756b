/* attach-draw.c — od-attach's drawing with ncursesw: our libvterm screen's
 * cells in the terminal's colours (256-colour and RGB fitted to what the
 * terminal has), the part around the cursor when the viewer is smaller,
 * the status line (session, size, mode, running command, last exit,
 * viewers, messages), the help and picker overlays; starting and ending
 * curses, the terminal's size, the bell. */
#include "attach.h"

#include <curses.h>

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <wchar.h>

struct at_view view;

void set_msg(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(view.msg, sizeof view.msg, fmt, ap);
	va_end(ap);
	view.msg_until = now_ms() + MSG_MS;
	view.dirty = 1;
}

void draw_start(void)
{
	initscr();
	view.curses_on = 1;
	raw();
	noecho();
	nonl();
	intrflush(stdscr, FALSE);
	leaveok(stdscr, FALSE);
	if (has_colors()) {
		start_color();
		use_default_colors();
	}
	view.dirty = 1;
}

void draw_end(void)
{
	if (view.curses_on) {
		endwin();
		view.curses_on = 0;
	}
}

void draw_resize(void)
{
	struct winsize ws;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0)
		resizeterm(ws.ws_row, ws.ws_col);
	view.dirty = 1;
}

void draw_bell(void)
{
	if (view.curses_on)
		beep();
}

/* ---- colours ---- */

static const unsigned char base16[16][3] = {
	{ 0, 0, 0 }, { 205, 0, 0 }, { 0, 205, 0 }, { 205, 205, 0 },
	{ 0, 0, 238 }, { 205, 0, 205 }, { 0, 205, 205 }, { 229, 229, 229 },
	{ 127, 127, 127 }, { 255, 0, 0 }, { 0, 255, 0 }, { 255, 255, 0 },
	{ 92, 92, 255 }, { 255, 0, 255 }, { 0, 255, 255 }, { 255, 255, 255 },
};
static const int cube_level[6] = { 0, 95, 135, 175, 215, 255 };

static void palette_rgb(int i, int rgb[3])
{
	if (i < 16) {
		for (int k = 0; k < 3; k++)
			rgb[k] = base16[i][k];
	} else if (i < 232) {
		i -= 16;
		rgb[0] = cube_level[i / 36];
		rgb[1] = cube_level[(i / 6) % 6];
		rgb[2] = cube_level[i % 6];
	} else {
		rgb[0] = rgb[1] = rgb[2] = 8 + 10 * (i - 232);
	}
}

static int dist2(const int a[3], const int b[3])
{
	int d = 0;
	for (int k = 0; k < 3; k++)
		d += (a[k] - b[k]) * (a[k] - b[k]);
	return d;
}

static int cube_index(int v)
{
	int best = 0;
	for (int k = 1; k < 6; k++)
		if (abs(cube_level[k] - v) < abs(cube_level[best] - v))
			best = k;
	return best;
}

/* The nearest of the 256 xterm colours (cube or grey ramp). */
static int rgb_to_256(int r, int g, int b)
{
	int want[3] = { r, g, b }, c[3];
	int ci = 16 + 36 * cube_index(r) + 6 * cube_index(g) + cube_index(b);
	palette_rgb(ci, c);
	int avg = (r + g + b) / 3;
	int gi = avg < 8 ? 0 : avg > 238 ? 23 : (avg - 8 + 5) / 10;
	if (gi > 23)
		gi = 23;
	int gc[3];
	palette_rgb(232 + gi, gc);
	return dist2(gc, want) < dist2(c, want) ? 232 + gi : ci;
}

/* An xterm colour index reduced to what the terminal has. */
static int fit_colours(int idx)
{
	if (idx < COLORS)
		return idx;
	int n = COLORS >= 16 ? 16 : COLORS >= 8 ? 8 : 0;
	if (!n)
		return -1;
	if (idx < 16)
		return idx & 7;
	int want[3], c[3], best = 0, bd = INT_MAX;
	palette_rgb(idx, want);
	for (int i = 0; i < n; i++) {
		palette_rgb(i, c);
		int d = dist2(c, want);
		if (d < bd) {
			bd = d;
			best = i;
		}
	}
	return best;
}

static int colour_of(const VTermColor *c, int bg)
{
	if (bg ? VTERM_COLOR_IS_DEFAULT_BG(c) : VTERM_COLOR_IS_DEFAULT_FG(c))
		return -1;
	int idx = VTERM_COLOR_IS_INDEXED(c) ? c->indexed.idx
					     : rgb_to_256(c->rgb.red, c->rgb.green, c->rgb.blue);
	return fit_colours(idx);
}

static int pair_for(int fg, int bg)
{
	if (!has_colors() || (fg < 0 && bg < 0))
		return 0;
	int p = alloc_pair(fg, bg);
	return p < 0 ? 0 : p;
}

/* Blanks w columns from (y, x) in the given attributes and colours. */
/* ---- cells ---- */

static void fill(int y, int x, int w, attr_t attr, int pair)
{
	cchar_t cc;
	static const wchar_t sp[] = L" ";
	setcchar(&cc, sp, attr, 0, &pair);
	mvhline_set(y, x, &cc, w);
}

static void put_cell(int y, int x, const wchar_t *w, attr_t attr, int pair)
{
	cchar_t cc;
	if (setcchar(&cc, w, attr, 0, &pair) == ERR) {
		static const wchar_t q[] = L"?";
		setcchar(&cc, q, attr, 0, &pair);
	}
	mvadd_wch(y, x, &cc);
}

static void draw_screen(int vr, int vc, VTermPos cur)
{
	/* which part of the session is shown: all of it, or the part around
	 * the cursor when the viewer is smaller */
	view.clipped = vts.rows > vr || vts.cols > vc;
	if (vts.rows > vr) {
		if (cur.row < view.offr || cur.row >= view.offr + vr)
			view.offr = cur.row - vr / 2;
		if (view.offr > vts.rows - vr)
			view.offr = vts.rows - vr;
		if (view.offr < 0)
			view.offr = 0;
	} else {
		view.offr = 0;
	}
	if (vts.cols > vc) {
		if (cur.col < view.offc || cur.col >= view.offc + vc)
			view.offc = cur.col - vc / 2;
		if (view.offc > vts.cols - vc)
			view.offc = vts.cols - vc;
		if (view.offc < 0)
			view.offc = 0;
	} else {
		view.offc = 0;
	}
	int nr = vts.rows - view.offr < vr ? vts.rows - view.offr : vr;
	int nc = vts.cols - view.offc < vc ? vts.cols - view.offc : vc;
	for (int r = 0; r < nr; r++) {
		for (int c = 0; c < nc; c++) {
			VTermScreenCell cell;
			VTermPos pos = { .row = view.offr + r, .col = view.offc + c };
			if (!vterm_screen_get_cell(vts.vs, pos, &cell))
				continue;
			wchar_t w[VTERM_MAX_CHARS_PER_CELL + 1];
			int wide = cell.width > 1;
			if (cell.chars[0] == (uint32_t)-1 || (wide && c == nc - 1)) {
				/* the right half of a wide character cut by the view's
				 * left edge, or a wide one that does not fit */
				w[0] = L' ';
				w[1] = 0;
				wide = 0;
			} else if (!cell.chars[0]) {
				w[0] = L' ';
				w[1] = 0;
			} else {
				int k = 0;
				for (; k < VTERM_MAX_CHARS_PER_CELL && cell.chars[k]; k++)
					w[k] = (wchar_t)cell.chars[k];
				w[k] = 0;
			}
			attr_t a = A_NORMAL;
			if (cell.attrs.bold)
				a |= A_BOLD;
			if (cell.attrs.underline)
				a |= A_UNDERLINE;
			if (cell.attrs.italic)
				a |= A_ITALIC;
			if (cell.attrs.blink)
				a |= A_BLINK;
			if (cell.attrs.reverse)
				a |= A_REVERSE;
			int pair = pair_for(colour_of(&cell.fg, 0), colour_of(&cell.bg, 1));
			put_cell(r, c, w, a, pair);
			if (wide)
				c++;
		}
	}
}

/* ---- the status line and overlays ---- */

static void fmt_duration(char *b, size_t n, double s)
{
	long t = s < 0 ? 0 : (long)s;
	if (t < 60)
		snprintf(b, n, "%lds", t);
	else if (t < 3600)
		snprintf(b, n, "%ldm%02lds", t / 60, t % 60);
	else
		snprintf(b, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
}

/* Writes UTF-8 text at (y, x), at most maxw columns; returns columns used. */
static int put_text(int y, int x, const char *s, int maxw, attr_t attr, int pair)
{
	wchar_t w[512];
	mbstate_t st;
	memset(&st, 0, sizeof st);
	const char *p = s;
	size_t n = mbsrtowcs(w, &p, sizeof w / sizeof w[0] - 1, &st);
	if (n == (size_t)-1) {
		/* not valid in this locale: show it byte by byte as ASCII */
		size_t i = 0;
		for (; s[i] && i < sizeof w / sizeof w[0] - 1; i++)
			w[i] = (unsigned char)s[i] < 0x80 ? (wchar_t)s[i] : L'?';
		n = i;
	}
	w[n] = 0;
	int used = 0;
	attr_set(attr, 0, &pair);
	move(y, x);
	for (size_t i = 0; i < n; i++) {
		int cw = wcwidth(w[i]);
		if (cw < 0) {
			w[i] = L'?';
			cw = 1;
		}
		if (used + cw > maxw)
			break;
		addnwstr(&w[i], 1);
		used += cw;
	}
	attr_set(A_NORMAL, 0, NULL);
	return used;
}

static void draw_status(int y, int width)
{
	int bar = pair_for(COLOR_BLACK, COLOR_WHITE);
	attr_t bar_attr = has_colors() ? A_NORMAL : A_REVERSE;
	if (!has_colors())
		bar = 0;
	/* the background of the whole line */
	fill(y, 0, width, bar_attr, bar);
	int x = 0;
	sinfo_t *s = sess_get(tty.session, 0);
	char b[512], d[32];

	snprintf(b, sizeof b, " %s %dx%d ", tty.session, vts.cols, vts.rows);
	x += put_text(y, x, b, width - x, bar_attr | A_BOLD, bar);

	const char *mode = tty.lost ? " RECONNECTING " : tty.typing ? " TYPING " : " WATCHING ";
	int mp = tty.lost ? pair_for(COLOR_BLACK, COLOR_YELLOW)
		: tty.typing ? pair_for(COLOR_WHITE, COLOR_RED) : pair_for(COLOR_BLACK, COLOR_GREEN);
	x += put_text(y, x, mode, width - x, A_BOLD | (has_colors() ? A_NORMAL : A_REVERSE), mp);

	b[0] = 0;
	if (s && s->cmd) {
		fmt_duration(d, sizeof d, wall_s() - s->cmd_ts);
		snprintf(b, sizeof b, " running: %.200s (%s%s)", s->cmd, d, s->cmd_ts_approx ? "+" : "");
	} else {
		snprintf(b, sizeof b, " idle");
	}
	char tail[256];
	int tn = 0;
	tail[0] = 0;
	if (s && s->last_exit != INT_MIN)
		tn += snprintf(tail + tn, sizeof tail - (size_t)tn, " | last exit %d", s->last_exit);
	if (s && s->viewers >= 0)
		tn += snprintf(tail + tn, sizeof tail - (size_t)tn, " | %d viewer%s", s->viewers,
			       s->viewers == 1 ? "" : "s");
	if (view.clipped)
		tn += snprintf(tail + tn, sizeof tail - (size_t)tn, " | clipped");
	if (!evs.c)
		tn += snprintf(tail + tn, sizeof tail - (size_t)tn, " | no events");
	(void)tn;

	char right[320];
	if (tty.lost)
		snprintf(right, sizeof right, " %s ", tty.lost_err);
	else if (keys.prefix_seen)
		snprintf(right, sizeof right, " %s - i d n p s R ? ", opt.prefix_name);
	else if (view.msg[0] && now_ms() < view.msg_until)
		snprintf(right, sizeof right, " %s ", view.msg);
	else
		snprintf(right, sizeof right, " %s ? help ", opt.prefix_name);

	/* the command keeps up to 32 columns before the right part gives way;
	 * past that, the right part keeps its room and the command is cut */
	int tailw = (int)strlen(tail);
	int rightw = (int)strlen(right);
	int cmdw = (int)strlen(b);
	int keep = cmdw < 32 ? cmdw : 32;
	if (width - x - tailw - rightw < keep)
		rightw = width - x - tailw - keep;
	if (rightw < 0)
		rightw = 0;
	int room = width - x - tailw - rightw;
	x += put_text(y, x, b, room, bar_attr, bar);
	x += put_text(y, x, tail, width - x, bar_attr, bar);
	int rx = width - rightw;
	if (rx < x)
		rx = x;
	put_text(y, rx, right, width - rx, bar_attr | (keys.prefix_seen || tty.lost ? A_BOLD : 0), bar);
}

static void draw_box(int h, int w, int *y0, int *x0)
{
	*y0 = (LINES - 1 - h) / 2;
	*x0 = (COLS - w) / 2;
	if (*y0 < 0)
		*y0 = 0;
	if (*x0 < 0)
		*x0 = 0;
	int p = pair_for(COLOR_WHITE, COLOR_BLUE);
	for (int r = 0; r < h && *y0 + r < LINES - 1; r++)
		fill(*y0 + r, *x0, w > COLS ? COLS : w, has_colors() ? A_NORMAL : A_REVERSE, p);
}

static void draw_help(void)
{
	char l[16][128];
	int n = 0;
	snprintf(l[n++], sizeof l[0], "od-attach: keys after the prefix %s", opt.prefix_name);
	snprintf(l[n++], sizeof l[0], " ");
	snprintf(l[n++], sizeof l[0], "  i    take the keyboard / give it back");
	snprintf(l[n++], sizeof l[0], "  d    detach (exit)");
	snprintf(l[n++], sizeof l[0], "  n p  next / previous session");
	snprintf(l[n++], sizeof l[0], "  s    pick a session from a list");
	snprintf(l[n++], sizeof l[0], "  R    (typing) resize the session to this terminal");
	snprintf(l[n++], sizeof l[0], "       (given back when you stop typing)");
	snprintf(l[n++], sizeof l[0], "  r    redraw");
	snprintf(l[n++], sizeof l[0], "  ?    this help");
	snprintf(l[n++], sizeof l[0], "  %-4s the prefix key itself (typing)", opt.prefix_name);
	snprintf(l[n++], sizeof l[0], " ");
	snprintf(l[n++], sizeof l[0], "any key closes this help");
	int w = 0;
	for (int i = 0; i < n; i++)
		if ((int)strlen(l[i]) > w)
			w = (int)strlen(l[i]);
	w += 4;
	int y0, x0;
	draw_box(n + 2, w, &y0, &x0);
	int p = pair_for(COLOR_WHITE, COLOR_BLUE);
	attr_t a = has_colors() ? A_NORMAL : A_REVERSE;
	for (int i = 0; i < n && y0 + 1 + i < LINES - 1; i++)
		put_text(y0 + 1 + i, x0 + 2, l[i], COLS - x0 - 2, a | (i == 0 ? A_BOLD : 0), p);
}

static void draw_pick(void)
{
	int w = 44, h = keys.npick + 4;
	if (h > LINES - 1)
		h = LINES - 1;
	int y0, x0;
	draw_box(h, w, &y0, &x0);
	int p = pair_for(COLOR_WHITE, COLOR_BLUE);
	attr_t a = has_colors() ? A_NORMAL : A_REVERSE;
	put_text(y0 + 1, x0 + 2, "sessions (Enter: attach, Esc: cancel)", w - 4, a | A_BOLD, p);
	int rows = h - 3;
	if (rows < 1)
		return;
	int first = keys.pick_sel >= rows ? keys.pick_sel - rows + 1 : 0;
	for (int i = first; i < keys.npick && i - first < rows; i++) {
		sinfo_t *s = sess_get(keys.pick[i], 0);
		char line[160];
		snprintf(line, sizeof line, "%c %-16s %s%s", i == keys.pick_sel ? '>' : ' ', keys.pick[i],
			 s && s->cmd ? "running " : "", s && s->cmd ? s->cmd : "");
		put_text(y0 + 2 + i - first, x0 + 2, line, w - 4,
			 i == keys.pick_sel ? (A_REVERSE | A_BOLD) : a, p);
	}
}

void draw(void)
{
	view.last_draw = now_ms();
	view.dirty = 0;
	if (!view.curses_on)
		return;
	erase();
	int vr = LINES - 1, vc = COLS;
	VTermPos cur;
	vterm_state_get_cursorpos(vterm_obtain_state(vts.vt), &cur);
	if (vr > 0 && vc > 0)
		draw_screen(vr, vc, cur);
	if (LINES >= 1)
		draw_status(LINES - 1, COLS);
	if (keys.overlay == OV_HELP)
		draw_help();
	else if (keys.overlay == OV_PICK)
		draw_pick();
	int cy = cur.row - view.offr, cx = cur.col - view.offc;
	if (keys.overlay == OV_NONE && !tty.lost && vts.cursor_visible && cy >= 0 && cy < vr && cx >= 0 &&
	    cx < vc) {
		move(cy, cx);
		curs_set(1);
	} else {
		curs_set(0);
	}
	refresh();
}
