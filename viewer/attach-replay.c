/* attach-replay.c — od-attach --replay FILE: an asciicast v2 recording
 * (termd's --record, or asciinema's) played through the real terminal
 * with its timing: the "o" data as the pty sent it, inside a scroll
 * region of the recording's height, a status line below it, keys for
 * pause, speed and the next marker; idle gaps capped. --dump writes the
 * output to stdout at once (markers and resizes as lines on stderr). A
 * malformed file is an error with its line number, never a crash. */
#include "attach.h"
#include "cast.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

struct rp_event {
	double t;                 /* play time: gaps capped */
	char code;                /* 'o', 'r', 'm' (others are not kept) */
	char *data;
	size_t len;
};

static struct {
	struct cast_header h;
	struct rp_event *ev;
	size_t n, cap;
} rec;

static void rec_free(void)
{
	for (size_t i = 0; i < rec.n; i++)
		free(rec.ev[i].data);
	free(rec.ev);
	memset(&rec, 0, sizeof rec);
}

/* Read the whole recording: 0, or -1 with a message on stderr. */
static int load(const char *path, double idle_limit)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
	if (!f) {
		fprintf(stderr, "od-attach: cannot open %s: %s\n", path, strerror(errno));
		return -1;
	}
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	size_t lineno = 0;
	int rc = 0;
	double last_raw = 0, last_play = 0;
	char err[160];
	while ((len = getline(&line, &cap, f)) >= 0) {
		lineno++;
		int complete = len > 0 && line[len - 1] == '\n';
		size_t n = (size_t)len - (complete ? 1 : 0);
		if (lineno == 1) {
			if (cast_parse_header(line, n, &rec.h, err, sizeof err) < 0) {
				fprintf(stderr, "od-attach: %s: line 1: %s\n", path, err);
				rc = -1;
				break;
			}
			continue;
		}
		struct cast_event ev;
		if (cast_parse_event(line, n, &ev, err, sizeof err) < 0) {
			if (!err[0])
				continue;   /* a blank line */
			if (!complete) {
				/* the last line, cut off (the recorder was killed
				 * while writing it): played without it */
				fprintf(stderr, "od-attach: %s: line %zu is incomplete (ignored)\n", path,
					lineno);
				break;
			}
			fprintf(stderr, "od-attach: %s: line %zu: %s\n", path, lineno, err);
			rc = -1;
			break;
		}
		double gap = ev.t - last_raw;
		if (gap < 0)
			gap = 0;   /* times go back: taken as no gap */
		else
			last_raw = ev.t;
		if (idle_limit > 0 && gap > idle_limit)
			gap = idle_limit;
		last_play += gap;
		char code = ev.code[1] ? 0 : ev.code[0];
		if (code != 'o' && code != 'r' && code != 'm') {
			cast_event_free(&ev);
			continue;   /* input, or codes of later versions */
		}
		if (rec.n == rec.cap) {
			rec.cap = rec.cap ? rec.cap * 2 : 1024;
			rec.ev = xrealloc(rec.ev, rec.cap * sizeof *rec.ev);
		}
		rec.ev[rec.n++] = (struct rp_event){last_play, code, ev.data, ev.len};
	}
	if (rc == 0 && ferror(f)) {
		fprintf(stderr, "od-attach: cannot read %s: %s\n", path, strerror(errno));
		rc = -1;
	}
	if (rc == 0 && lineno == 0) {
		fprintf(stderr, "od-attach: %s is empty (not an asciicast file)\n", path);
		rc = -1;
	}
	free(line);
	if (f != stdin)
		fclose(f);
	if (rc < 0)
		rec_free();
	return rc;
}

/* A label on one line: newlines and other controls as spaces. */
static void put_label(FILE *f, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fputc((unsigned char)s[i] < 0x20 ? ' ' : s[i], f);
}

static int dump(void)
{
	for (size_t i = 0; i < rec.n; i++) {
		struct rp_event *e = &rec.ev[i];
		if (e->code == 'o') {
			fflush(stderr);
			write_all(STDOUT_FILENO, e->data, e->len);
		} else {
			fprintf(stderr, "%c %.6f ", e->code, e->t);
			put_label(stderr, e->data, e->len);
			fputc('\n', stderr);
			fflush(stderr);
		}
	}
	return 0;
}

/* ------------------------------------------------------------- playing */

/* Where the output stream is (so the status line is drawn between escape
 * sequences, never inside one), and whether it reset our scroll region. */
enum esc_state { ES_GROUND, ES_ESC, ES_CSI, ES_STR, ES_STR_ESC };

static struct {
	struct termios saved;
	int raw;
	int rows, cols;
	double pos;               /* play time now */
	uint64_t anchor_us;       /* when pos was last computed, while playing */
	double speed;
	int paused;
	size_t next;              /* the next event to play */
	int height, width;        /* the recording's size now */
	char msg[200];            /* marker label or note */
	enum esc_state es;
	char csi[24];
	size_t csin;
	int region_lost;          /* the recording reset the scroll region */
	int status_dirty;
} pl;

static volatile sig_atomic_t got_winch, got_stop;

static void on_sig(int sig)
{
	if (sig == SIGWINCH)
		got_winch = 1;
	else
		got_stop = sig;
}

static void term_size(void)
{
	struct winsize ws;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 1 && ws.ws_col > 0) {
		pl.rows = ws.ws_row;
		pl.cols = ws.ws_col;
	} else {
		pl.rows = 24;
		pl.cols = 80;
	}
}

static void scan(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		switch (pl.es) {
		case ES_GROUND:
			if (c == 0x1b)
				pl.es = ES_ESC;
			break;
		case ES_ESC:
			if (c == '[') {
				pl.es = ES_CSI;
				pl.csin = 0;
			} else if (c == ']' || c == 'P' || c == '_' || c == '^' || c == 'X') {
				pl.es = ES_STR;
			} else if (c >= 0x20 && c <= 0x2f) {
				/* an intermediate: stay for the final byte */
			} else {
				if (c == 'c')
					pl.region_lost = 1;   /* RIS */
				pl.es = ES_GROUND;
			}
			break;
		case ES_CSI:
			if (c >= 0x40 && c <= 0x7e) {
				pl.csi[pl.csin < sizeof pl.csi ? pl.csin : sizeof pl.csi - 1] = 0;
				if (c == 'r' && (pl.csin == 0 || strspn(pl.csi, "0;") == strlen(pl.csi)))
					pl.region_lost = 1;
				pl.es = ES_GROUND;
			} else if (c == 0x1b) {
				pl.es = ES_ESC;
			} else if (pl.csin < sizeof pl.csi - 1) {
				pl.csi[pl.csin++] = (char)c;
			}
			break;
		case ES_STR:
			if (c == 0x07)
				pl.es = ES_GROUND;
			else if (c == 0x1b)
				pl.es = ES_STR_ESC;
			break;
		case ES_STR_ESC:
			pl.es = c == '\\' ? ES_GROUND : ES_STR;
			break;
		}
	}
}

static int region_rows(void)
{
	int h = pl.height < pl.rows - 1 ? pl.height : pl.rows - 1;
	return h < 1 ? 1 : h;
}

/* The scroll region: the recording's height (at most the terminal's minus
 * the status line), cursor kept where it was. */
static void set_region(void)
{
	char b[48];
	int n = snprintf(b, sizeof b, "\0337\033[1;%dr\0338", region_rows());
	write_all(STDOUT_FILENO, b, (size_t)n);
	pl.region_lost = 0;
}

static uint64_t now_us(void)
{
	return mono_us();
}

static double duration(void)
{
	return rec.n ? rec.ev[rec.n - 1].t : 0;
}

static void draw_status(void)
{
	if (pl.es != ES_GROUND) {
		pl.status_dirty = 1;   /* inside a sequence: after it */
		return;
	}
	if (pl.region_lost)
		set_region();
	char text[512];
	int n = snprintf(text, sizeof text, " %s %gx  %.1f/%.1fs  %s%s space pause  +/- speed  n next marker  q quit",
			 pl.paused ? "PAUSED" : "PLAY", pl.speed, pl.pos, duration(), pl.msg,
			 pl.msg[0] ? "  |" : "");
	if (n < 0)
		n = 0;
	if (n > (int)sizeof text - 1)
		n = (int)sizeof text - 1;
	buf_t b = {0};
	buf_printf(&b, "\0337\033[%d;1H\033[0;7m", pl.rows);
	/* cut to the terminal's width, in characters */
	size_t cut = utf8_offset(text, (size_t)n, (size_t)pl.cols);
	buf_append(&b, text, cut);
	size_t shown = utf8_count(text, cut);
	for (size_t i = shown; i < (size_t)pl.cols; i++)
		buf_putc(&b, ' ');
	buf_puts(&b, "\033[0m\0338");
	write_all(STDOUT_FILENO, b.p, b.len);
	buf_free(&b);
	pl.status_dirty = 0;
}

static void note_size(void)
{
	if (pl.width > pl.cols || pl.height > pl.rows - 1)
		snprintf(pl.msg, sizeof pl.msg, "recording is %dx%d, terminal %dx%d (enlarge it)",
			 pl.width, pl.height, pl.cols, pl.rows);
}

static void apply(struct rp_event *e)
{
	switch (e->code) {
	case 'o':
		write_all(STDOUT_FILENO, e->data, e->len);
		scan(e->data, e->len);
		pl.status_dirty = 1;
		break;
	case 'r': {
		int w, h;
		if (sscanf(e->data, "%dx%d", &w, &h) == 2 && w > 0 && h > 0 && w <= CAST_MAX_DIM &&
		    h <= CAST_MAX_DIM) {
			pl.width = w;
			pl.height = h;
			pl.msg[0] = 0;
			note_size();
			pl.region_lost = 1;
			pl.status_dirty = 1;
		}
		break;
	}
	case 'm': {
		buf_t b = {0};
		buf_puts(&b, "marker: ");
		for (size_t i = 0; i < e->len && b.len < sizeof pl.msg - 1; i++)
			buf_putc(&b, (unsigned char)e->data[i] < 0x20 ? ' ' : e->data[i]);
		size_t cut = b.len < sizeof pl.msg - 1 ? b.len : sizeof pl.msg - 1;
		cut = utf8_offset(b.p, cut, utf8_count(b.p, cut));   /* whole characters */
		memcpy(pl.msg, b.p, cut);
		pl.msg[cut] = 0;
		buf_free(&b);
		pl.status_dirty = 1;
		break;
	}
	}
}

/* The play time now (advancing while playing). */
static void advance_clock(void)
{
	uint64_t t = now_us();
	if (!pl.paused)
		pl.pos += (double)(t - pl.anchor_us) / 1e6 * pl.speed;
	pl.anchor_us = t;
}

static void restore_term(void)
{
	if (!pl.raw)
		return;
	char b[160];
	int n = snprintf(b, sizeof b,
			 "\033[?1049l\033[r\033[%d;1H\033[0m\033[2K\033[?25h\033[?2004l\033[?1l\033>"
			 "\033[?1000l\033[?1002l\033[?1003l\033[?1006l\r\n", pl.rows);
	write_all(STDOUT_FILENO, b, (size_t)n);
	tcsetattr(STDIN_FILENO, TCSAFLUSH, &pl.saved);
	pl.raw = 0;
}

static void next_marker(void)
{
	size_t i = pl.next;
	while (i < rec.n && rec.ev[i].code != 'm')
		i++;
	if (i == rec.n) {
		snprintf(pl.msg, sizeof pl.msg, "no marker after this point");
		pl.status_dirty = 1;
		return;
	}
	while (pl.next <= i)
		apply(&rec.ev[pl.next++]);
	pl.pos = rec.ev[i].t;
	pl.anchor_us = now_us();
}

static int key(unsigned char c)
{
	switch (c) {
	case ' ':
		advance_clock();
		pl.paused = !pl.paused;
		break;
	case '+':
	case '=':
		advance_clock();
		if (pl.speed < 64)
			pl.speed *= 2;
		break;
	case '-':
	case '_':
		advance_clock();
		if (pl.speed > 1.0 / 16)
			pl.speed /= 2;
		break;
	case 'n':
		advance_clock();
		next_marker();
		break;
	case 'q':
	case 3:   /* C-c */
		return 1;
	default:
		return 0;
	}
	pl.status_dirty = 1;
	return 0;
}

static int play(void)
{
	if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
		fputs("od-attach: --replay needs a terminal (or --dump)\n", stderr);
		return EXIT_USAGE;
	}
	if (tcgetattr(STDIN_FILENO, &pl.saved) < 0) {
		fprintf(stderr, "od-attach: tcgetattr: %s\n", strerror(errno));
		return EXIT_USAGE;
	}
	attach_catch_signals(on_sig, 0);
	struct termios raw = pl.saved;
	cfmakeraw(&raw);
	tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw);
	pl.raw = 1;
	term_size();
	pl.width = rec.h.width;
	pl.height = rec.h.height;
	note_size();
	/* a clean screen, the region, the status line */
	write_all(STDOUT_FILENO, "\033[0m\033[H\033[2J", 10);
	set_region();
	pl.anchor_us = now_us();
	draw_status();
	int quit = 0;
	while (!quit && !got_stop) {
		if (got_winch) {
			got_winch = 0;
			term_size();
			pl.msg[0] = 0;
			note_size();
			pl.region_lost = 1;
			pl.status_dirty = 1;
		}
		advance_clock();
		uint64_t batch_start = now_us();
		while (pl.next < rec.n && rec.ev[pl.next].t <= pl.pos) {
			apply(&rec.ev[pl.next++]);
			if (now_us() - batch_start > 50000)
				break;   /* a flood: keys and the status line stay live */
		}
		if (pl.status_dirty)
			draw_status();
		if (pl.next >= rec.n)
			break;
		int wait = 500;
		if (!pl.paused) {
			double dt = (rec.ev[pl.next].t - pl.pos) / pl.speed * 1000.0;
			if (dt < wait)
				wait = dt < 0 ? 0 : (int)ceil(dt);
		}
		struct pollfd pf = {.fd = STDIN_FILENO, .events = POLLIN};
		int r = poll(&pf, 1, wait);
		if (r < 0 && errno != EINTR)
			break;
		if (r > 0 && (pf.revents & (POLLIN | POLLHUP | POLLERR))) {
			unsigned char buf[64];
			ssize_t k = read(STDIN_FILENO, buf, sizeof buf);
			if (k <= 0 && !(k < 0 && errno == EINTR))
				break;   /* the terminal went away */
			for (ssize_t i = 0; i < k && !quit; i++)
				quit = key(buf[i]);
		}
	}
	restore_term();
	return got_stop ? 128 + got_stop : 0;
}

int replay_main(const char *path, double speed, double idle_limit, int dump_only)
{
	if (load(path, idle_limit) < 0)
		return EXIT_USAGE;
	pl.speed = speed;
	int rc = dump_only ? dump() : play();
	rec_free();
	return rc;
}
