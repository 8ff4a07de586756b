/* attach-tty.c — od-attach's live terminal channel: the /tty/<session>
 * connection (read-only, or read-write while typing), its frames into our
 * own libvterm copy of the screen (through proto/vtfilter.c, as termd's
 * own screens), reconnecting after a transient loss, switching sessions,
 * taking the keyboard, and resizing the session to the viewer and back. */
#include "attach.h"

#include <curses.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct at_tty tty;
struct at_screen vts;

/* ---- libvterm: our own copy of the screen ---- */

/* Session output into our screen, through the same filter termd uses:
 * this libvterm has the same parser bugs as termd's. */
static void vts_feed(const char *p, size_t n)
{
	buf_reset(&vts.vfbuf);
	vtfilter_feed(&vts.vf, p, n, &vts.vfbuf);
	if (vts.vfbuf.len)
		vterm_input_write(vts.vt, vts.vfbuf.p, vts.vfbuf.len);
}

/* Keyboard-layer bytes land here only while we ask for them (to learn how
 * the program wants a key encoded); anything else libvterm would answer
 * (device attributes, cursor reports) is dropped: termd's own screen
 * answers the program, never the viewer. */
static void vts_output(const char *s, size_t len, void *user)
{
	(void)user;
	if (!vts.capture)
		return;
	if (len > sizeof vts.keybuf - vts.keylen)
		len = sizeof vts.keybuf - vts.keylen;
	memcpy(vts.keybuf + vts.keylen, s, len);
	vts.keylen += len;
}

static int vts_settermprop(VTermProp prop, VTermValue *val, void *user)
{
	(void)user;
	if (prop == VTERM_PROP_CURSORVISIBLE)
		vts.cursor_visible = val->boolean;
	return 1;
}

static int vts_bell(void *user)
{
	(void)user;
	draw_bell();
	return 1;
}

static const VTermScreenCallbacks vts_cbs = {
	.settermprop = vts_settermprop,
	.bell = vts_bell,
};

void vts_init(void)
{
	vts.rows = TD_DEFAULT_ROWS;
	vts.cols = TD_DEFAULT_COLS;
	vts.vt = vterm_new(vts.rows, vts.cols);
	vterm_set_utf8(vts.vt, 1);
	vterm_output_set_callback(vts.vt, vts_output, NULL);
	vts.vs = vterm_obtain_screen(vts.vt);
	vterm_screen_set_callbacks(vts.vs, &vts_cbs, NULL);
	vterm_screen_enable_altscreen(vts.vs, 1);
	vts.cursor_visible = 1;
	vterm_screen_reset(vts.vs, 1);
}

void vts_free(void)
{
	if (vts.vt)
		vterm_free(vts.vt);
	vts.vt = NULL;
	buf_free(&vts.vfbuf);
}

size_t vts_key(VTermKey key, char *out, size_t cap)
{
	vts.capture = 1;
	vts.keylen = 0;
	vterm_keyboard_key(vts.vt, key, VTERM_MOD_NONE);
	vts.capture = 0;
	size_t n = vts.keylen < cap ? vts.keylen : cap;
	memcpy(out, vts.keybuf, n);
	return n;
}

/* ---- the connection ---- */

td_client *tty_open(const char *session, int rw, char *err, size_t errlen)
{
	char path[128];
	snprintf(path, sizeof path, "%s%s?mode=%s", TD_PATH_TTY, session, rw ? "rw" : "ro");
	return td_connect(opt.url, path, TD_SUBPROTO_TTY, opt.token, err, errlen);
}

int is_http(const char *err, int code)
{
	char p[16];
	snprintf(p, sizeof p, "HTTP %d", code);
	return !strncmp(err, p, strlen(p));
}

void tty_lost(const char *why)
{
	snprintf(tty.lost_err, sizeof tty.lost_err, "%s", why && *why ? why : "connection closed");
	td_close(tty.c);
	tty.c = NULL;
	tty.lost = 1;
	tty.lost_at = now_ms();
	tty.retry_at = tty.lost_at;   /* at once */
	view.dirty = 1;
}

void tty_try_reconnect(void)
{
	char err[256];
	td_client *c = tty_open(tty.session, tty.typing, err, sizeof err);
	if (c) {
		tty.c = c;
		tty.lost = 0;
		tty.have_size = 0;
		set_msg("reconnected");
		return;
	}
	if (is_http(err, 404))
		finish(EXIT_ENDED, "session %s no longer exists", tty.session);
	if (is_http(err, 401) || is_http(err, 403))
		finish(EXIT_LOST, "termd at %s refused the connection: %s", opt.url, err);
	snprintf(tty.lost_err, sizeof tty.lost_err, "%s", err);
	int64_t t = now_ms();
	if (t - tty.lost_at >= GIVEUP_MS)
		finish(EXIT_LOST, "lost the connection to termd at %s (%s); gave up after %d s",
		       opt.url, tty.lost_err, GIVEUP_MS / 1000);
	tty.retry_at = t + RETRY_MS;
	view.dirty = 1;
}

/* ---- frames ---- */

static void tty_frame(const unsigned char *p, size_t n)
{
	if (!n)
		return;
	const char *pl = (const char *)p + 1;
	size_t pn = n - 1;
	switch (p[0]) {
	case TD_TTY_SIZE: {
		cJSON *j = cJSON_ParseWithLength(pl, pn);
		int c = td_json_int(j, "cols", 0), r = td_json_int(j, "rows", 0);
		cJSON_Delete(j);
		if (c > 0 && r > 0 && c <= 10000 && r <= 10000) {
			if (c != vts.cols || r != vts.rows)
				vterm_set_size(vts.vt, r, c);
			vts.cols = c;
			vts.rows = r;
			tty.have_size = 1;
			sinfo_t *s = sess_get(tty.session, 1);
			if (s) {
				s->cols = c;
				s->rows = r;
			}
		}
		view.dirty = 1;
		break;
	}
	case TD_TTY_SNAPSHOT:
		vterm_screen_reset(vts.vs, 1);
		vtfilter_reset(&vts.vf);
		vts_feed(pl, pn);
		view.dirty = 1;
		break;
	case TD_TTY_OUTPUT:
		vts_feed(pl, pn);
		view.dirty = 1;
		break;
	case TD_TTY_TITLE:
		break;
	case TD_TTY_EXIT: {
		cJSON *j = cJSON_ParseWithLength(pl, pn);
		tty.ended_code = td_json_int(j, "exit_code", -1);
		tty.ended = 1;
		cJSON_Delete(j);
		break;
	}
	case TD_TTY_ERROR:
		set_msg("termd: %.*s", (int)(pn > 200 ? 200 : pn), pl);
		break;
	default:
		break;
	}
}

void tty_drain(void)
{
	int64_t start = now_ms();
	while (tty.c) {
		char *data;
		size_t len;
		int bin;
		int r = td_recv(tty.c, &data, &len, &bin, 0);
		if (r < 0) {
			tty_lost(td_error(tty.c));
			return;
		}
		if (r == 0)
			return;
		if (bin)
			tty_frame((const unsigned char *)data, len);
		free(data);
		if (tty.ended)
			finish(EXIT_ENDED, "session %s ended: its program exited with status %d",
			       tty.session, tty.ended_code);
		if (now_ms() - start >= TTY_BUDGET_MS)
			return;
	}
}

void tty_send_input(const void *p, size_t n)
{
	if (!n || !tty.c || !tty.typing || tty.lost)
		return;
	char *f = xmalloc(n + 1);
	f[0] = TD_TTY_INPUT;
	memcpy(f + 1, p, n);
	if (td_send(tty.c, 1, f, n + 1) < 0)
		tty_lost(td_error(tty.c));
	free(f);
}

/* ---- size, sessions, modes ---- */

static void tty_send_resize(int cols, int rows)
{
	char j[64];
	int n = snprintf(j, sizeof j, "%c{\"cols\":%d,\"rows\":%d}", TD_TTY_RESIZE, cols, rows);
	if (tty.c)
		td_send(tty.c, 1, j, (size_t)n);
}

/* Gives the session its size back if we changed it (typing mode only). */
void tty_give_size_back(void)
{
	if (tty.resized && tty.c && tty.typing && !tty.lost)
		tty_send_resize(tty.old_cols, tty.old_rows);
	tty.resized = 0;
}

void tty_follow_viewer(void)
{
	if (tty.resized && tty.typing && LINES > 1)
		tty_send_resize(COLS, LINES - 1);
}

int tty_switch_to(const char *name)
{
	if (!strcmp(name, tty.session))
		return 0;
	char err[256];
	td_client *c = tty_open(name, 0, err, sizeof err);
	if (!c) {
		set_msg("cannot attach to %s: %s", name, err);
		return -1;
	}
	tty_give_size_back();
	td_close(tty.c);
	tty.c = c;
	tty.lost = 0;
	tty.typing = 0;
	tty.have_size = 0;
	copy_name(tty.session, name);
	view.offr = view.offc = 0;
	vterm_screen_reset(vts.vs, 1);
	set_msg("attached to %s (watching)", name);
	return 0;
}

void tty_toggle_typing(void)
{
	char err[256];
	if (tty.lost) {
		set_msg("not connected");
		return;
	}
	int rw = !tty.typing;
	if (!rw)
		tty_give_size_back();
	td_client *c = tty_open(tty.session, rw, err, sizeof err);
	if (!c) {
		if (rw)
			set_msg("cannot take the keyboard: %s%s", err,
				is_http(err, 403) || is_http(err, 401) ? " (needs the full token)" : "");
		else
			tty_lost(err);
		return;
	}
	td_close(tty.c);
	tty.c = c;
	tty.typing = rw;
	tty.have_size = 0;
	if (rw)
		set_msg("typing into %s; %s i gives the keyboard back", tty.session, opt.prefix_name);
	else
		set_msg("WATCHING %s: keyboard given back", tty.session);
}

/* Resizes the session to the viewer's size (typing mode). */
void tty_resize_to_viewer(void)
{
	if (!tty.typing || !tty.c) {
		set_msg("R works in typing mode (%s i first)", opt.prefix_name);
		return;
	}
	int rows = LINES - 1, cols = COLS;
	if (rows < 1 || cols < 1)
		return;
	if (!tty.resized) {
		tty.old_cols = vts.cols;
		tty.old_rows = vts.rows;
		tty.resized = 1;
	}
	tty_send_resize(cols, rows);
	set_msg("resized to %dx%d (back to %dx%d when you stop typing)", cols, rows, tty.old_cols,
		tty.old_rows);
}
