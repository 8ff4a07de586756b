/* attach.h — od-attach's state, one struct per concern, each owned by one
 * file, and what each attach*.c file offers the others:
 *   attach.c         options, signals, the poll loop, exit   (opt)
 *   attach-tty.c     /tty connection, frames, reconnect, our libvterm copy
 *                    of the screen                            (tty, vts)
 *   attach-events.c  /events connection, the session table   (evs)
 *   attach-draw.c    ncurses: cells, colours, status line, overlays (view)
 *   attach-keys.c    prefix commands, the picker, typed input (keys) */
#ifndef OD_ATTACH_H
#define OD_ATTACH_H

#include "client.h"
#include "proto.h"
#include "util.h"
#include "vtfilter.h"

#include <stddef.h>
#include <stdint.h>
#include <vterm.h>

/* Exit statuses. */
#define EXIT_DETACHED 0   /* prefix d */
#define EXIT_LOST     1   /* termd went away and did not come back */
#define EXIT_USAGE    2   /* usage, or the first attach failed */
#define EXIT_ENDED    3   /* the session's program exited / the session is gone */

#define REDRAW_MS        15     /* at most one redraw per this many ms */
#define TTY_BUDGET_MS    20     /* feed output at most this long between redraws */
#define GIVEUP_MS        5000   /* transient disconnect: retry this long */
#define RETRY_MS         250    /* between reconnect attempts */
#define EV_RETRY_MS      1000   /* events channel reconnect interval */
#define MSG_MS           3000   /* how long a status message stays */
#define REPLAY_EVENTS    200    /* subscribe since last seq minus this, for history */
#define MAX_SESSIONS     512

static inline int64_t now_ms(void)
{
	return (int64_t)(mono_us() / 1000u);
}

/* ---- attach.c ---- */

struct at_opts {
	const char *url, *token;
	unsigned char prefix;      /* the prefix key's byte */
	char prefix_name[16];      /* and its name, e.g. "C-]" */
};
extern struct at_opts opt;

/* Leaves the terminal as it was, closes both connections, prints
 * "od-attach: <message>" if fmt is non-NULL, and exits with code. */
void finish(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

/* ---- attach.c ---- */
/* handler for WINCH, TERM, HUP, INT (and QUIT when quit_too); SIGPIPE
 * ignored */
void attach_catch_signals(void (*handler)(int), int quit_too);

/* ---- attach-replay.c ---- */

/* --replay FILE: play it (or --dump it); the exit status. */
int replay_main(const char *path, double speed, double idle_limit, int dump_only);

/* ---- attach-tty.c ---- */

struct at_tty {
	char session[TD_SESSION_NAME_MAX + 1];
	td_client *c;
	int typing;                /* c is (or is to be) mode=rw */
	int lost;                  /* c lost, reconnecting */
	int64_t lost_at, retry_at;
	char lost_err[256];
	int have_size;
	int ended, ended_code;     /* an 'X' frame came */
	int resized, old_cols, old_rows;   /* the size to give back on leaving typing mode */
};
extern struct at_tty tty;

/* Our copy of the session's screen: fed from /tty frames, drawn by
 * attach-draw.c; its keyboard layer encodes cursor keys for attach-keys.c. */
struct at_screen {
	VTerm *vt;
	VTermScreen *vs;
	struct vtfilter vf;        /* what this libvterm 0.1.4 may see (vtfilter.c) */
	buf_t vfbuf;
	int rows, cols;
	int cursor_visible;
	int capture;               /* keyboard-layer output goes to keybuf */
	char keybuf[64];
	size_t keylen;
};
extern struct at_screen vts;

void vts_init(void);
void vts_free(void);
/* The bytes key is in the program's current modes (DECCKM...), into out;
 * 0 if libvterm gave none. */
size_t vts_key(VTermKey key, char *out, size_t cap);

/* Opens /tty/<session> read-only or read-write; NULL with err set. */
td_client *tty_open(const char *session, int rw, char *err, size_t errlen);
/* Does a td_connect error say HTTP status code? */
int is_http(const char *err, int code);
void tty_lost(const char *why);
void tty_try_reconnect(void);
/* Reads what the connection has, for at most TTY_BUDGET_MS. */
void tty_drain(void);
/* Sends typed bytes (an 'I' frame's payload) when typing. */
void tty_send_input(const void *p, size_t n);
void tty_give_size_back(void);
/* Keeps the session at the viewer's size after R (on SIGWINCH). */
void tty_follow_viewer(void);
int tty_switch_to(const char *name);
void tty_toggle_typing(void);
void tty_resize_to_viewer(void);

/* ---- attach-events.c ---- */

typedef struct sinfo {
	char name[TD_SESSION_NAME_MAX + 1];
	int alive;
	int cols, rows;
	int viewers;        /* -1: unknown */
	char *cmd;          /* the command running now, or NULL */
	double cmd_ts;      /* its start (Unix seconds) */
	int cmd_ts_approx;  /* start unknown: cmd_ts is when we learned of it */
	int last_exit;      /* INT_MIN: unknown */
	int listed;
} sinfo_t;

/* What to do with the next session.list answer. */
enum list_purpose { LP_NONE, LP_NEXT, LP_PREV, LP_PICK };

struct at_events {
	td_client *c;
	int64_t retry_at;
	double last_seq;
	char list_id[64];
	enum list_purpose list_purpose;
	sinfo_t sess[MAX_SESSIONS];
	int nsess;
};
extern struct at_events evs;

/* Copies a session name (at most TD_SESSION_NAME_MAX bytes). */
void copy_name(char *dst, const char *src);
sinfo_t *sess_get(const char *name, int create);
void sess_free_all(void);
void ev_connect(void);
void ev_drain(void);
/* Asks for session.list; `p` is done with the answer (or at once from what
 * we know if the events channel is down). */
void request_list(enum list_purpose p);

/* ---- attach-draw.c ---- */

struct at_view {
	int curses_on;
	int dirty;
	int64_t last_draw;
	int offr, offc, clipped;   /* the part of the session shown */
	char msg[256];
	int64_t msg_until;
};
extern struct at_view view;

void draw_start(void);
void draw_end(void);
/* Takes the terminal's new size (SIGWINCH). */
void draw_resize(void);
void draw(void);
void draw_bell(void);
void set_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- attach-keys.c ---- */

enum overlay { OV_NONE, OV_HELP, OV_PICK };

struct at_keys {
	int prefix_seen;
	enum overlay overlay;
	int pick_sel;
	char pick[MAX_SESSIONS][TD_SESSION_NAME_MAX + 1];
	int npick;
};
extern struct at_keys keys;

/* "C-]", "C-b", "^B", "C-Space", or one character: the byte (its name in
 * name). -1 if not a key. */
int keys_parse_prefix(const char *s, char *name, size_t namelen);
/* Bytes from the terminal; *quit set on detach. */
void keys_input(const unsigned char *b, size_t n, int *quit);
/* The session.list answer for LP_NEXT, LP_PREV or LP_PICK is in. */
void keys_list_ready(enum list_purpose p);

#endif
