/* attach-keys.c — od-attach's keyboard: the prefix key and its commands
 * (i d n p s R r ?), the help and session-picker overlays' keys, and, while
 * typing, the bytes for the session (cursor keys in the program's own
 * encoding, from our screen's keyboard layer) sent as 'I' frames. */
#include "attach.h"

#include <curses.h>

#include <stdio.h>
#include <string.h>
#include <strings.h>

struct at_keys keys;

int keys_parse_prefix(const char *s, char *name, size_t namelen)
{
	int c = -1;
	if ((!strncmp(s, "C-", 2) || !strncmp(s, "c-", 2)) && s[2]) {
		const char *k = s + 2;
		if (!strcasecmp(k, "Space") || !strcmp(k, "@") || !strcmp(k, "2"))
			c = 0;
		else if (!k[1] && ((k[0] >= 'a' && k[0] <= 'z') || (k[0] >= 'A' && k[0] <= 'Z')))
			c = (k[0] & 0x1f);
		else if (!k[1] && strchr("[\\]^_", k[0]))
			c = k[0] & 0x1f;
		else if (!strcmp(k, "6"))
			c = 0x1e;
		else if (!strcmp(k, "/") || !strcmp(k, "-"))
			c = 0x1f;
	} else if (s[0] == '^' && s[1] && !s[2]) {
		if (s[1] == '?')
			c = 0x7f;
		else if ((s[1] >= '@' && s[1] <= '_') || (s[1] >= 'a' && s[1] <= 'z'))
			c = s[1] & 0x1f;
	} else if (s[0] && !s[1] && (unsigned char)s[0] < 0x80) {
		c = (unsigned char)s[0];
	}
	if (c < 0)
		return -1;
	if (c == 0)
		snprintf(name, namelen, "C-Space");
	else if (c < 0x20)
		snprintf(name, namelen, "C-%c", (c | 0x40) >= 'A' && (c | 0x40) <= 'Z' ? (c | 0x60) : (c | 0x40));
	else if (c == 0x7f)
		snprintf(name, namelen, "^?");
	else
		snprintf(name, namelen, "%c", c);
	return c;
}

/* ---- reading key sequences ---- */

/* An arrow/Home/End key sequence at b[0..n): its VTermKey and length. */
static int parse_cursor_key(const unsigned char *b, size_t n, VTermKey *key)
{
	if (n < 3 || b[0] != 0x1b || (b[1] != '[' && b[1] != 'O'))
		return 0;
	switch (b[2]) {
	case 'A': *key = VTERM_KEY_UP; break;
	case 'B': *key = VTERM_KEY_DOWN; break;
	case 'C': *key = VTERM_KEY_RIGHT; break;
	case 'D': *key = VTERM_KEY_LEFT; break;
	case 'H': *key = VTERM_KEY_HOME; break;
	case 'F': *key = VTERM_KEY_END; break;
	default: return 0;
	}
	return 3;
}

/* The length of the CSI or SS3 key sequence (ESC [ ... final, ESC O x) at
 * b[0..n), up to n if it is cut off; 0 if b does not start with one. Keys
 * that mean nothing where they are typed are swallowed whole with it. */
static size_t esc_seq_len(const unsigned char *b, size_t n)
{
	if (n < 2 || b[0] != 0x1b || (b[1] != '[' && b[1] != 'O'))
		return 0;
	size_t i = 2;
	while (i < n && !(b[i] >= 0x40 && b[i] <= 0x7e))
		i++;
	return i < n ? i + 1 : n;
}

/* ---- what is typed into the session ---- */

typedef struct outbuf {
	char b[8191];       /* an 'I' frame of at most 8 KiB with its type byte */
	size_t n;
} outbuf_t;

/* Sends what was typed as one 'I' frame. */
static void out_flush(outbuf_t *o)
{
	tty_send_input(o->b, o->n);
	o->n = 0;
}

static void out_add(outbuf_t *o, const void *p, size_t n)
{
	if (o->n && o->n + n > sizeof o->b)
		out_flush(o);
	memcpy(o->b + o->n, p, n);
	o->n += n;
}

/* ---- the prefix commands and the overlays ---- */

static void prefix_command(unsigned char k, outbuf_t *o, int *quit)
{
	switch (k) {
	case 'i':
		tty_toggle_typing();
		break;
	case 'd':
		*quit = 1;
		break;
	case 'n':
		request_list(LP_NEXT);
		break;
	case 'p':
		request_list(LP_PREV);
		break;
	case 's':
		request_list(LP_PICK);
		break;
	case '?':
	case 'h':
		keys.overlay = OV_HELP;
		break;
	case 'R':
		tty_resize_to_viewer();
		break;
	case 'r':
	case 0x0c:
		clearok(curscr, TRUE);
		break;
	case 0x1b:
		break;   /* changed one's mind */
	default:
		if (k == opt.prefix) {
			if (tty.typing)
				out_add(o, &k, 1);
			else
				set_msg("watching: %s i to type", opt.prefix_name);
		} else {
			set_msg("%s %s%c: no such command (%s ? for help)", opt.prefix_name,
				k < 0x20 ? "^" : "", k < 0x20 ? k | 0x40 : k >= 0x7f ? '?' : k,
				opt.prefix_name);
		}
		break;
	}
	view.dirty = 1;
}

void keys_list_ready(enum list_purpose p)
{
	if (p == LP_NEXT || p == LP_PREV) {
		int n = evs.nsess, cur = -1;
		for (int i = 0; i < n; i++)
			if (!strcmp(evs.sess[i].name, tty.session))
				cur = i;
		for (int step = 1; step <= n; step++) {
			int i = cur < 0 ? (p == LP_NEXT ? step - 1 : n - step)
				: ((cur + (p == LP_NEXT ? step : -step)) % n + n) % n;
			if (i == cur)
				break;
			if (evs.sess[i].alive) {
				tty_switch_to(evs.sess[i].name);
				return;
			}
		}
		set_msg("no other session");
	} else if (p == LP_PICK) {
		keys.npick = 0;
		for (int i = 0; i < evs.nsess; i++)
			if (evs.sess[i].alive)
				copy_name(keys.pick[keys.npick++], evs.sess[i].name);
		if (!keys.npick) {
			set_msg("no sessions");
			return;
		}
		keys.pick_sel = 0;
		for (int i = 0; i < keys.npick; i++)
			if (!strcmp(keys.pick[i], tty.session))
				keys.pick_sel = i;
		keys.overlay = OV_PICK;
		view.dirty = 1;
	}
}

/* Keys while the session picker is open. Returns bytes consumed. */
static size_t pick_key(const unsigned char *b, size_t n)
{
	VTermKey key;
	size_t used = (size_t)parse_cursor_key(b, n, &key);
	view.dirty = 1;
	if (used) {
		if (key == VTERM_KEY_UP && keys.pick_sel > 0)
			keys.pick_sel--;
		else if (key == VTERM_KEY_DOWN && keys.pick_sel < keys.npick - 1)
			keys.pick_sel++;
		return used;
	}
	unsigned char c = b[0];
	if (c == 'k' && keys.pick_sel > 0) {
		keys.pick_sel--;
	} else if (c == 'j' && keys.pick_sel < keys.npick - 1) {
		keys.pick_sel++;
	} else if (c == '\r' || c == '\n') {
		keys.overlay = OV_NONE;
		if (keys.pick_sel < keys.npick) {
			char name[TD_SESSION_NAME_MAX + 1];
			copy_name(name, keys.pick[keys.pick_sel]);
			tty_switch_to(name);
		}
	} else if (c >= '1' && c <= '9' && c - '1' < keys.npick) {
		keys.pick_sel = c - '1';
	} else if (c == 0x1b || c == 'q' || c == opt.prefix) {
		keys.overlay = OV_NONE;
		size_t k = esc_seq_len(b, n);   /* an unknown key sequence: swallowed */
		if (k)
			return k;
	}
	return 1;
}

/* ---- input ---- */

void keys_input(const unsigned char *b, size_t n, int *quit)
{
	outbuf_t o;
	o.n = 0;
	int warned = 0;
	for (size_t i = 0; i < n && !*quit;) {
		if (keys.overlay == OV_PICK) {
			i += pick_key(b + i, n - i);
			continue;
		}
		if (keys.overlay == OV_HELP) {
			/* any key closes the help, a whole key sequence too */
			keys.overlay = OV_NONE;
			view.dirty = 1;
			size_t k = esc_seq_len(b + i, n - i);
			i += k ? k : 1;
			continue;
		}
		if (keys.prefix_seen) {
			keys.prefix_seen = 0;
			out_flush(&o);
			size_t k = esc_seq_len(b + i, n - i);
			if (k) {
				/* a cursor or function key after the prefix: ignored whole */
				i += k;
				view.dirty = 1;
				continue;
			}
			prefix_command(b[i++], &o, quit);
			continue;
		}
		if (b[i] == opt.prefix) {
			keys.prefix_seen = 1;
			view.dirty = 1;
			i++;
			continue;
		}
		if (!tty.typing) {
			if (!warned++)
				set_msg("watching (read-only): %s i to type", opt.prefix_name);
			i++;
			continue;
		}
		/* typing: cursor keys in the encoding the program asked for
		 * (DECCKM, as our copy of the screen knows it); all else as is */
		VTermKey key;
		int kl = parse_cursor_key(b + i, n - i, &key);
		if (kl) {
			char enc[64];
			size_t el = vts_key(key, enc, sizeof enc);
			if (el)
				out_add(&o, enc, el);
			else
				out_add(&o, b + i, (size_t)kl);
			i += (size_t)kl;
			continue;
		}
		out_add(&o, b + i, 1);
		i++;
	}
	out_flush(&o);
}
