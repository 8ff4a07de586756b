/* keys.c — key names (tmux's: Enter, Escape, Tab, BSpace, Up, F1, C-x, M-x,
 * …) turned into the bytes a terminal sends, typed into a session. Named
 * keys go through libvterm's keyboard layer so cursor keys honour the
 * program's cursor-key mode (vim, less); anything that is not a key name is
 * typed as literal text. */
#include "core.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>
#include <vterm.h>

struct keyname {
	const char *name;
	int key;      /* VTermKey, or 0 for a literal byte string */
	const char *bytes;
};

static const struct keyname keynames[] = {
	{"Enter", VTERM_KEY_ENTER, NULL},
	{"Escape", VTERM_KEY_ESCAPE, NULL},
	{"Tab", VTERM_KEY_TAB, NULL},
	{"BTab", 0, "\x1b[Z"},
	{"BSpace", VTERM_KEY_BACKSPACE, NULL},
	{"Space", 0, " "},
	{"Up", VTERM_KEY_UP, NULL},
	{"Down", VTERM_KEY_DOWN, NULL},
	{"Left", VTERM_KEY_LEFT, NULL},
	{"Right", VTERM_KEY_RIGHT, NULL},
	{"Home", VTERM_KEY_HOME, NULL},
	{"End", VTERM_KEY_END, NULL},
	{"PageUp", VTERM_KEY_PAGEUP, NULL},
	{"PPage", VTERM_KEY_PAGEUP, NULL},
	{"PageDown", VTERM_KEY_PAGEDOWN, NULL},
	{"NPage", VTERM_KEY_PAGEDOWN, NULL},
	{"Insert", VTERM_KEY_INS, NULL},
	{"IC", VTERM_KEY_INS, NULL},
	{"Delete", VTERM_KEY_DEL, NULL},
	{"DC", VTERM_KEY_DEL, NULL},
};

/* The byte Ctrl+c sends, or -1. */
static int ctrl_byte(unsigned char c)
{
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 1;
	if (c >= '@' && c <= '_')
		return c - '@';
	if (c == '?')
		return 0x7f;
	if (c == ' ' || c == '2')
		return 0;
	return -1;
}

int keys_is_control_name(const char *s, char *byte)
{
	if (strncmp(s, "C-", 2) != 0 || strlen(s) != 3)
		return 0;
	int b = ctrl_byte((unsigned char)s[2]);
	if (b < 0)
		return 0;
	*byte = (char)b;
	return 1;
}

static const struct keyname *find_key(const char *name)
{
	for (size_t i = 0; i < sizeof keynames / sizeof keynames[0]; i++)
		if (strcasecmp(keynames[i].name, name) == 0)
			return &keynames[i];
	return NULL;
}

/* Parse "C-M-S-Name": modifiers then a base. Returns 1 and fills out if
 * item is a key name. */
static int parse_key(const char *item, int *mod, const struct keyname **kn,
		     int *fkey, int *ch)
{
	*mod = 0;
	*kn = NULL;
	*fkey = 0;
	*ch = -1;
	const char *p = item;
	while (strlen(p) > 2 && p[1] == '-' && strchr("CMS", p[0])) {
		if (p[0] == 'C')
			*mod |= VTERM_MOD_CTRL;
		else if (p[0] == 'M')
			*mod |= VTERM_MOD_ALT;
		else
			*mod |= VTERM_MOD_SHIFT;
		p += 2;
	}
	if ((*kn = find_key(p)))
		return 1;
	if ((p[0] == 'F' || p[0] == 'f') && isdigit((unsigned char)p[1])) {
		int n = 0;
		const char *q = p + 1;
		while (isdigit((unsigned char)*q) && n < 100)
			n = n * 10 + (*q++ - '0');
		if (!*q && n >= 1 && n <= 12) {
			*fkey = n;
			return 1;
		}
	}
	if (*mod && p[0] && !p[1]) {
		*ch = (unsigned char)p[0];
		return 1;
	}
	return 0;
}

int keys_type(struct session *s, const char *item)
{
	int mod, fkey, ch;
	const struct keyname *kn;
	if (!parse_key(item, &mod, &kn, &fkey, &ch)) {
		session_write(s, item, strlen(item));
		return 0;
	}
	if (kn && !kn->key) {
		if (mod & VTERM_MOD_ALT)
			session_write(s, "\x1b", 1);
		int b = -1;
		if ((mod & VTERM_MOD_CTRL) && strlen(kn->bytes) == 1)
			b = ctrl_byte((unsigned char)kn->bytes[0]);
		if (b >= 0) {
			char cb = (char)b;
			session_write(s, &cb, 1);
		} else {
			session_write(s, kn->bytes, strlen(kn->bytes));
		}
	} else if (kn) {
		screen_key(session_screen(s), kn->key, mod);
	} else if (fkey) {
		screen_key(session_screen(s), VTERM_KEY_FUNCTION(fkey), mod);
	} else {
		char out[2];
		size_t n = 0;
		if (mod & VTERM_MOD_ALT)
			out[n++] = 0x1b;
		if (mod & VTERM_MOD_CTRL) {
			int b = ctrl_byte((unsigned char)tolower(ch));
			if (b < 0)
				b = ch;
			out[n++] = (char)b;
		} else {
			out[n++] = (char)((mod & VTERM_MOD_SHIFT) ? toupper(ch) : ch);
		}
		session_write(s, out, n);
	}
	return 1;
}
