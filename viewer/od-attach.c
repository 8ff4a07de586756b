/* od-attach.c — the viewer people use to watch a termd session and take the
 * keyboard, over ws://, wss:// (--cacert) or unix:. One /tty/<session>
 * connection (read-only, or read-write while typing) feeds the viewer's own
 * libvterm screen, drawn with ncursesw in colour; a second connection to
 * /events (subscribe + session.list) keeps the status line: session, size,
 * mode, running command, last exit code, viewers. A prefix key (C-] by default) gives the commands. The viewer's
 * libvterm never writes anything back to termd, and sees the output only
 * through proto/vtfilter.c's filter. */
#include "client.h"
#include "proto.h"
#include "vtfilter.h"

#include <curses.h>
#include <vterm.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>

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

enum list_purpose { LP_NONE, LP_NEXT, LP_PREV, LP_PICK };
enum overlay { OV_NONE, OV_HELP, OV_PICK };

typedef struct app {
	const char *url, *token;
	unsigned char prefix;
	char prefix_name[16];
	char session[TD_SESSION_NAME_MAX + 1];

	/* the live terminal channel */
	td_client *tty;
	int typing;             /* tty is (or is to be) mode=rw */
	int lost;               /* tty lost, reconnecting */
	int64_t lost_at, retry_at;
	char lost_err[256];
	int have_size;
	int ended, ended_code;   /* an 'X' frame came */

	/* our copy of the session's screen */
	VTerm *vt;
	VTermScreen *vs;
	struct vtfilter vf;      /* what this libvterm 0.1.4 may see (vtfilter.c) */
	buf_t vfbuf;
	int srows, scols;
	int cursor_visible;
	int capture;            /* keyboard-layer output goes to keybuf */
	char keybuf[64];
	size_t keylen;

	/* what we changed: the size to give back on leaving typing mode */
	int resized, old_cols, old_rows;

	/* the events channel */
	td_client *ev;
	int64_t ev_retry_at;
	double last_seq;
	unsigned long idn;
	char idtag[24];         /* random: ids must never repeat per termd instance */
	char list_id[64];
	enum list_purpose list_purpose;
	sinfo_t sess[MAX_SESSIONS];
	int nsess;

	/* the view */
	int curses_on;
	int dirty;
	int64_t last_draw;
	int offr, offc, clipped;
	char msg[256];
	int64_t msg_until;
	int prefix_seen;
	enum overlay overlay;
	int pick_sel;
	char pick[MAX_SESSIONS][TD_SESSION_NAME_MAX + 1];
	int npick;
} app_t;

static app_t A;

/* Session output into our screen, through the same filter termd uses:
 * this libvterm has the same parser bugs as termd's. */
static void vt_feed(const char *p, size_t n)
{
	buf_reset(&A.vfbuf);
	vtfilter_feed(&A.vf, p, n, &A.vfbuf);
	if (A.vfbuf.len)
		vterm_input_write(A.vt, A.vfbuf.p, A.vfbuf.len);
}
static int sig_pipe[2] = { -1, -1 };
static volatile sig_atomic_t got_winch, got_quit;

static const char usage_text[] =
	"usage: od-attach [--url URL] [--token T | --token-file F] [--cacert F]\n"
	"                 [--prefix KEY] [SESSION]\n"
	"\n"
	"Watch a termd session live (default: main) and take the keyboard when you\n"
	"want to. URL defaults to $TERMD_URL, else " TD_DEFAULT_URL " (also\n"
	"wss://HOST:PORT for TLS, unix:/path.sock); the token defaults to\n"
	"$TERMD_TOKEN. wss:// checks termd's certificate against the system's CAs,\n"
	"or against the certificates in --cacert F (default $TERMD_CACERT);\n"
	"TERMD_TLS_INSECURE=1 skips the check (for testing only). It attaches\n"
	"read-only; typing needs the full token.\n"
	"\n"
	"Keys, after the prefix (C-] unless --prefix says otherwise, e.g. C-b):\n"
	"  i    take the keyboard / give it back (TYPING / WATCHING)\n"
	"  d    detach\n"
	"  n p  next / previous session\n"
	"  s    pick a session from a list\n"
	"  R    (typing) resize the session to this terminal; the old size is\n"
	"       given back when you stop typing\n"
	"  r    redraw\n"
	"  ?    help\n"
	"  the prefix twice sends the prefix key itself (typing)\n"
	"\n"
	"Exit status: 0 detached; 1 termd went away; 2 usage or the attach\n"
	"failed; 3 the session ended.\n";

/* ---- small helpers ---- */

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Copies a session name (at most TD_SESSION_NAME_MAX bytes). */
static void copy_name(char *dst, const char *src)
{
	size_t n = strnlen(src, TD_SESSION_NAME_MAX);
	memmove(dst, src, n);
	dst[n] = '\0';
}

static const char *jstr(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int jint(const cJSON *o, const char *k, int dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	if (!cJSON_IsNumber(v) || v->valuedouble < INT_MIN || v->valuedouble > INT_MAX)
		return dflt;
	return (int)v->valuedouble;
}

static void set_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_msg(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(A.msg, sizeof A.msg, fmt, ap);
	va_end(ap);
	A.msg_until = now_ms() + MSG_MS;
	A.dirty = 1;
}

static void send_resize(int cols, int rows)
{
	char j[64];
	int n = snprintf(j, sizeof j, "%c{\"cols\":%d,\"rows\":%d}", TD_TTY_RESIZE, cols, rows);
	if (A.tty)
		td_send(A.tty, 1, j, (size_t)n);
}

/* Gives the session its size back if we changed it (typing mode only). */
static void give_size_back(void)
{
	if (A.resized && A.tty && A.typing && !A.lost)
		send_resize(A.old_cols, A.old_rows);
	A.resized = 0;
}

static void shutdown_all(void)
{
	give_size_back();
	td_close(A.tty);
	A.tty = NULL;
	td_close(A.ev);
	A.ev = NULL;
	if (A.curses_on) {
		endwin();
		A.curses_on = 0;
	}
}

static void finish(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void finish(int code, const char *fmt, ...)
{
	shutdown_all();
	if (fmt) {
		va_list ap;
		fputs("od-attach: ", stderr);
		va_start(ap, fmt);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
		fputc('\n', stderr);
	}
	if (A.vt)
		vterm_free(A.vt);
	for (int i = 0; i < A.nsess; i++)
		free(A.sess[i].cmd);
	exit(code);
}

static void usage_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_die(const char *fmt, ...)
{
	va_list ap;
	fputs("od-attach: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n(od-attach --help for usage)\n", stderr);
	exit(EXIT_USAGE);
}

/* "C-]", "C-b", "^B", "C-Space", or one character: the byte. -1 if not. */
static int parse_prefix(const char *s, char *name, size_t namelen)
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

/* ---- sessions table (from the events channel) ---- */

static sinfo_t *sess_get(const char *name, int create)
{
	if (!name || !td_valid_session_name(name))
		return NULL;
	for (int i = 0; i < A.nsess; i++)
		if (!strcmp(A.sess[i].name, name))
			return &A.sess[i];
	if (!create || A.nsess >= MAX_SESSIONS)
		return NULL;
	sinfo_t *s = &A.sess[A.nsess++];
	memset(s, 0, sizeof *s);
	copy_name(s->name, name);
	s->alive = 1;
	s->viewers = -1;
	s->last_exit = INT_MIN;
	return s;
}

static void sess_remove(const char *name)
{
	for (int i = 0; i < A.nsess; i++) {
		if (!strcmp(A.sess[i].name, name)) {
			free(A.sess[i].cmd);
			memmove(&A.sess[i], &A.sess[i + 1], (size_t)(A.nsess - i - 1) * sizeof A.sess[0]);
			A.nsess--;
			return;
		}
	}
}

static void sess_set_cmd(sinfo_t *s, const char *cmd, double ts, int approx)
{
	free(s->cmd);
	s->cmd = cmd ? strdup(cmd) : NULL;
	s->cmd_ts = ts;
	s->cmd_ts_approx = approx;
}

/* ---- libvterm: our own copy of the screen ---- */

/* Keyboard-layer bytes land here only while we ask for them (to learn how
 * the program wants a key encoded); anything else libvterm would answer
 * (device attributes, cursor reports) is dropped: termd's own screen
 * answers the program, never the viewer. */
static void vt_output(const char *s, size_t len, void *user)
{
	(void)user;
	if (!A.capture)
		return;
	if (len > sizeof A.keybuf - A.keylen)
		len = sizeof A.keybuf - A.keylen;
	memcpy(A.keybuf + A.keylen, s, len);
	A.keylen += len;
}

static int vt_settermprop(VTermProp prop, VTermValue *val, void *user)
{
	(void)user;
	if (prop == VTERM_PROP_CURSORVISIBLE)
		A.cursor_visible = val->boolean;
	return 1;
}

static int vt_bell(void *user)
{
	(void)user;
	if (A.curses_on)
		beep();
	return 1;
}

static const VTermScreenCallbacks vt_cbs = {
	.settermprop = vt_settermprop,
	.bell = vt_bell,
};

static void vt_init(void)
{
	A.srows = TD_DEFAULT_ROWS;
	A.scols = TD_DEFAULT_COLS;
	A.vt = vterm_new(A.srows, A.scols);
	vterm_set_utf8(A.vt, 1);
	vterm_output_set_callback(A.vt, vt_output, NULL);
	A.vs = vterm_obtain_screen(A.vt);
	vterm_screen_set_callbacks(A.vs, &vt_cbs, NULL);
	vterm_screen_enable_altscreen(A.vs, 1);
	A.cursor_visible = 1;
	vterm_screen_reset(A.vs, 1);
}

/* ---- the live terminal channel ---- */

static td_client *tty_open(const char *session, int rw, char *err, size_t errlen)
{
	char path[128];
	snprintf(path, sizeof path, "%s%s?mode=%s", TD_PATH_TTY, session, rw ? "rw" : "ro");
	return td_connect(A.url, path, TD_SUBPROTO_TTY, A.token, err, errlen);
}

static int is_http(const char *err, int code)
{
	char p[16];
	snprintf(p, sizeof p, "HTTP %d", code);
	return !strncmp(err, p, strlen(p));
}

static void tty_lost(const char *why)
{
	snprintf(A.lost_err, sizeof A.lost_err, "%s", why && *why ? why : "connection closed");
	td_close(A.tty);
	A.tty = NULL;
	A.lost = 1;
	A.lost_at = now_ms();
	A.retry_at = A.lost_at;   /* at once */
	A.dirty = 1;
}

static void tty_try_reconnect(void)
{
	char err[256];
	td_client *c = tty_open(A.session, A.typing, err, sizeof err);
	if (c) {
		A.tty = c;
		A.lost = 0;
		A.have_size = 0;
		set_msg("reconnected");
		return;
	}
	if (is_http(err, 404))
		finish(EXIT_ENDED, "session %s no longer exists", A.session);
	if (is_http(err, 401) || is_http(err, 403))
		finish(EXIT_LOST, "termd at %s refused the connection: %s", A.url, err);
	snprintf(A.lost_err, sizeof A.lost_err, "%s", err);
	int64_t t = now_ms();
	if (t - A.lost_at >= GIVEUP_MS)
		finish(EXIT_LOST, "lost the connection to termd at %s (%s); gave up after %d s",
		       A.url, A.lost_err, GIVEUP_MS / 1000);
	A.retry_at = t + RETRY_MS;
	A.dirty = 1;
}

static void tty_frame(const unsigned char *p, size_t n)
{
	if (!n)
		return;
	const char *pl = (const char *)p + 1;
	size_t pn = n - 1;
	switch (p[0]) {
	case TD_TTY_SIZE: {
		cJSON *j = cJSON_ParseWithLength(pl, pn);
		int c = jint(j, "cols", 0), r = jint(j, "rows", 0);
		cJSON_Delete(j);
		if (c > 0 && r > 0 && c <= 10000 && r <= 10000) {
			if (c != A.scols || r != A.srows)
				vterm_set_size(A.vt, r, c);
			A.scols = c;
			A.srows = r;
			A.have_size = 1;
			sinfo_t *s = sess_get(A.session, 1);
			if (s) {
				s->cols = c;
				s->rows = r;
			}
		}
		A.dirty = 1;
		break;
	}
	case TD_TTY_SNAPSHOT:
		vterm_screen_reset(A.vs, 1);
		vtfilter_reset(&A.vf);
		vt_feed(pl, pn);
		A.dirty = 1;
		break;
	case TD_TTY_OUTPUT:
		vt_feed(pl, pn);
		A.dirty = 1;
		break;
	case TD_TTY_TITLE:
		break;
	case TD_TTY_EXIT: {
		cJSON *j = cJSON_ParseWithLength(pl, pn);
		A.ended_code = jint(j, "exit_code", -1);
		A.ended = 1;
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

/* Reads what the tty connection has, for at most TTY_BUDGET_MS. */
static void tty_drain(void)
{
	int64_t start = now_ms();
	while (A.tty) {
		char *data;
		size_t len;
		int bin;
		int r = td_recv(A.tty, &data, &len, &bin, 0);
		if (r < 0) {
			tty_lost(td_error(A.tty));
			return;
		}
		if (r == 0)
			return;
		if (bin)
			tty_frame((const unsigned char *)data, len);
		free(data);
		if (A.ended)
			finish(EXIT_ENDED, "session %s ended: its program exited with status %d",
			       A.session, A.ended_code);
		if (now_ms() - start >= TTY_BUDGET_MS)
			return;
	}
}

/* ---- the events channel ---- */

static void ev_send(const char *action, cJSON *args, char *idout, size_t idlen)
{
	char id[64];
	if (!A.idtag[0]) {
		unsigned long long r = 0;
		FILE *f = fopen("/dev/urandom", "rb");
		if (!f || fread(&r, sizeof r, 1, f) != 1)
			r = (unsigned long long)now_ms() * 2654435761u ^ (unsigned long long)wall_s();
		if (f)
			fclose(f);
		snprintf(A.idtag, sizeof A.idtag, "%012llx", r & 0xffffffffffffull);
	}
	snprintf(id, sizeof id, "od-attach-%ld-%s-%lu", (long)getpid(), A.idtag, ++A.idn);
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "id", id);
	cJSON_AddStringToObject(a, "action", action);
	if (args)
		cJSON_AddItemToObject(a, "args", args);
	char *t = cJSON_PrintUnformatted(a);
	cJSON_Delete(a);
	if (A.ev && t && td_send(A.ev, 0, t, strlen(t)) < 0) {
		td_close(A.ev);
		A.ev = NULL;
		A.ev_retry_at = now_ms() + EV_RETRY_MS;
	}
	free(t);
	if (idout)
		snprintf(idout, idlen, "%s", id);
}

static void do_list_purpose(enum list_purpose p);

/* Asks for session.list; `p` is done with the answer (or at once from what
 * we know if the events channel is down). */
static void request_list(enum list_purpose p)
{
	if (!A.ev) {
		do_list_purpose(p);
		return;
	}
	A.list_purpose = p;
	ev_send("session.list", NULL, A.list_id, sizeof A.list_id);
	if (!A.ev)
		do_list_purpose(p);
}

static void ev_connect(void)
{
	char err[256];
	A.ev = td_connect(A.url, TD_PATH_EVENTS, TD_SUBPROTO_EVENTS, A.token, err, sizeof err);
	if (!A.ev) {
		A.ev_retry_at = now_ms() + EV_RETRY_MS;
		return;
	}
	/* hello first: its seq tells where to start the short replay */
	cJSON *hello = NULL;
	if (td_recv_json(A.ev, &hello, 5000, err, sizeof err) <= 0) {
		td_close(A.ev);
		A.ev = NULL;
		A.ev_retry_at = now_ms() + EV_RETRY_MS;
		return;
	}
	const cJSON *hx = cJSON_GetObjectItemCaseSensitive(hello, "extras");
	const cJSON *hs = cJSON_GetObjectItemCaseSensitive(hx, "seq");
	double seq = cJSON_IsNumber(hs) ? hs->valuedouble : 0;
	cJSON_Delete(hello);
	/* a short look back for the running command and the last exit code;
	 * after a reconnect, what we missed (if not too much: session.list
	 * catches up with the rest) */
	double since = seq - REPLAY_EVENTS;
	if (A.last_seq > since && A.last_seq <= seq)
		since = A.last_seq;
	if (since < 0)
		since = 0;
	cJSON *args = cJSON_CreateObject();
	cJSON_AddNumberToObject(args, "since", since);
	ev_send("subscribe", args, NULL, 0);
	request_list(A.list_purpose);
	A.dirty = 1;
}

static void ev_list_answer(const cJSON *x)
{
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(x, "sessions");
	if (!cJSON_IsArray(list))
		return;
	for (int i = 0; i < A.nsess; i++)
		A.sess[i].listed = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, list) {
		sinfo_t *s = sess_get(jstr(e, "name"), 1);
		if (!s)
			continue;
		s->listed = 1;
		s->alive = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "alive"));
		s->cols = jint(e, "cols", s->cols);
		s->rows = jint(e, "rows", s->rows);
		s->viewers = jint(e, "viewers", -1);
		const char *cmd = jstr(e, "command");
		if (!cmd)
			sess_set_cmd(s, NULL, 0, 0);
		else if (!s->cmd)
			sess_set_cmd(s, cmd, wall_s(), 1);
		else if (strcmp(s->cmd, cmd))
			sess_set_cmd(s, cmd, s->cmd_ts, s->cmd_ts_approx);
	}
	/* keep the table in the server's order, unlisted ones gone */
	int k = 0;
	for (int i = 0; i < A.nsess; i++) {
		if (A.sess[i].listed)
			A.sess[k++] = A.sess[i];
		else
			free(A.sess[i].cmd);
	}
	A.nsess = k;
	/* the list's order is the server's; re-sort to it */
	int pos = 0;
	cJSON_ArrayForEach(e, list) {
		const char *n = jstr(e, "name");
		for (int i = pos; n && i < A.nsess; i++) {
			if (!strcmp(A.sess[i].name, n)) {
				sinfo_t t = A.sess[i];
				memmove(&A.sess[pos + 1], &A.sess[pos], (size_t)(i - pos) * sizeof t);
				A.sess[pos++] = t;
				break;
			}
		}
	}
	enum list_purpose p = A.list_purpose;
	A.list_purpose = LP_NONE;
	A.list_id[0] = '\0';
	do_list_purpose(p);
}

static void ev_handle(const cJSON *o)
{
	const cJSON *seq = cJSON_GetObjectItemCaseSensitive(o, "seq");
	if (cJSON_IsNumber(seq) && seq->valuedouble > A.last_seq)
		A.last_seq = seq->valuedouble;
	const char *kind = jstr(o, "observation");
	const char *cause = jstr(o, "cause");
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "extras");
	const cJSON *tsj = cJSON_GetObjectItemCaseSensitive(o, "ts");
	double ts = cJSON_IsNumber(tsj) ? tsj->valuedouble : wall_s();
	if (!kind)
		return;
	if (cause && A.list_id[0] && !strcmp(cause, A.list_id)) {
		if (!strcmp(kind, "session.list"))
			ev_list_answer(x);
		else {
			A.list_id[0] = '\0';
			A.list_purpose = LP_NONE;
		}
		A.dirty = 1;
		return;
	}
	sinfo_t *s;
	if (!strcmp(kind, "command.start")) {
		if ((s = sess_get(jstr(x, "session"), 1)))
			sess_set_cmd(s, jstr(x, "command") ? jstr(x, "command") : "?", ts, 0);
	} else if (!strcmp(kind, "command.end")) {
		if ((s = sess_get(jstr(x, "session"), 1))) {
			sess_set_cmd(s, NULL, 0, 0);
			s->last_exit = jint(x, "exit_code", INT_MIN);
		}
	} else if (!strcmp(kind, "viewer.attach") || !strcmp(kind, "viewer.detach")) {
		if ((s = sess_get(jstr(x, "session"), 0)) && s->viewers >= 0) {
			s->viewers += kind[7] == 'a' ? 1 : -1;
			if (s->viewers < 0)
				s->viewers = 0;
		}
	} else if (!strcmp(kind, "session.resize")) {
		if ((s = sess_get(jstr(x, "session"), 1))) {
			s->cols = jint(x, "cols", s->cols);
			s->rows = jint(x, "rows", s->rows);
		}
	} else if (!strcmp(kind, "session.open")) {
		const char *n = jstr(x, "name");
		if (!n)
			n = jstr(x, "session");
		if ((s = sess_get(n, 1))) {
			s->alive = 1;
			if (s->viewers < 0)
				s->viewers = 0;
		}
	} else if (!strcmp(kind, "session.exit")) {
		if ((s = sess_get(jstr(x, "name"), 0))) {
			s->alive = 0;
			sess_set_cmd(s, NULL, 0, 0);
		}
	} else if (!strcmp(kind, "session.close")) {
		const char *n = jstr(x, "name");
		if (n && strcmp(n, A.session))
			sess_remove(n);
	} else {
		return;
	}
	A.dirty = 1;
}

static void ev_drain(void)
{
	while (A.ev) {
		char *data;
		size_t len;
		int bin;
		int r = td_recv(A.ev, &data, &len, &bin, 0);
		if (r < 0) {
			td_close(A.ev);
			A.ev = NULL;
			A.ev_retry_at = now_ms() + EV_RETRY_MS;
			A.list_id[0] = '\0';
			A.dirty = 1;
			return;
		}
		if (r == 0)
			return;
		if (!bin) {
			cJSON *o = cJSON_ParseWithLength(data, len);
			if (o)
				ev_handle(o);
			cJSON_Delete(o);
		}
		free(data);
	}
}

/* ---- switching sessions and modes ---- */

static int switch_to(const char *name)
{
	if (!strcmp(name, A.session))
		return 0;
	char err[256];
	td_client *c = tty_open(name, 0, err, sizeof err);
	if (!c) {
		set_msg("cannot attach to %s: %s", name, err);
		return -1;
	}
	give_size_back();
	td_close(A.tty);
	A.tty = c;
	A.lost = 0;
	A.typing = 0;
	A.have_size = 0;
	copy_name(A.session, name);
	A.offr = A.offc = 0;
	vterm_screen_reset(A.vs, 1);
	set_msg("attached to %s (watching)", name);
	return 0;
}

static void do_list_purpose(enum list_purpose p)
{
	if (p == LP_NEXT || p == LP_PREV) {
		int n = A.nsess, cur = -1;
		for (int i = 0; i < n; i++)
			if (!strcmp(A.sess[i].name, A.session))
				cur = i;
		for (int step = 1; step <= n; step++) {
			int i = cur < 0 ? (p == LP_NEXT ? step - 1 : n - step)
				: ((cur + (p == LP_NEXT ? step : -step)) % n + n) % n;
			if (i == cur)
				break;
			if (A.sess[i].alive) {
				switch_to(A.sess[i].name);
				return;
			}
		}
		set_msg("no other session");
	} else if (p == LP_PICK) {
		A.npick = 0;
		for (int i = 0; i < A.nsess; i++)
			if (A.sess[i].alive)
				copy_name(A.pick[A.npick++], A.sess[i].name);
		if (!A.npick) {
			set_msg("no sessions");
			return;
		}
		A.pick_sel = 0;
		for (int i = 0; i < A.npick; i++)
			if (!strcmp(A.pick[i], A.session))
				A.pick_sel = i;
		A.overlay = OV_PICK;
		A.dirty = 1;
	}
}

static void toggle_typing(void)
{
	char err[256];
	if (A.lost) {
		set_msg("not connected");
		return;
	}
	int rw = !A.typing;
	if (!rw)
		give_size_back();
	td_client *c = tty_open(A.session, rw, err, sizeof err);
	if (!c) {
		if (rw)
			set_msg("cannot take the keyboard: %s%s", err,
				is_http(err, 403) || is_http(err, 401) ? " (needs the full token)" : "");
		else
			tty_lost(err);
		return;
	}
	td_close(A.tty);
	A.tty = c;
	A.typing = rw;
	A.have_size = 0;
	if (rw)
		set_msg("typing into %s; %s i gives the keyboard back", A.session, A.prefix_name);
	else
		set_msg("WATCHING %s: keyboard given back", A.session);
}

/* Resizes the session to the viewer's size (typing mode). */
static void resize_to_viewer(void)
{
	if (!A.typing || !A.tty) {
		set_msg("R works in typing mode (%s i first)", A.prefix_name);
		return;
	}
	int rows = LINES - 1, cols = COLS;
	if (rows < 1 || cols < 1)
		return;
	if (!A.resized) {
		A.old_cols = A.scols;
		A.old_rows = A.srows;
		A.resized = 1;
	}
	send_resize(cols, rows);
	set_msg("resized to %dx%d (back to %dx%d when you stop typing)", cols, rows, A.old_cols,
		A.old_rows);
}

/* ---- drawing ---- */

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

static void put_cell(int y, int x, const wchar_t *w, attr_t attr, int pair);

/* Blanks w columns from (y, x) in the given attributes and colours. */
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
	A.clipped = A.srows > vr || A.scols > vc;
	if (A.srows > vr) {
		if (cur.row < A.offr || cur.row >= A.offr + vr)
			A.offr = cur.row - vr / 2;
		if (A.offr > A.srows - vr)
			A.offr = A.srows - vr;
		if (A.offr < 0)
			A.offr = 0;
	} else {
		A.offr = 0;
	}
	if (A.scols > vc) {
		if (cur.col < A.offc || cur.col >= A.offc + vc)
			A.offc = cur.col - vc / 2;
		if (A.offc > A.scols - vc)
			A.offc = A.scols - vc;
		if (A.offc < 0)
			A.offc = 0;
	} else {
		A.offc = 0;
	}
	int nr = A.srows - A.offr < vr ? A.srows - A.offr : vr;
	int nc = A.scols - A.offc < vc ? A.scols - A.offc : vc;
	for (int r = 0; r < nr; r++) {
		for (int c = 0; c < nc; c++) {
			VTermScreenCell cell;
			VTermPos pos = { .row = A.offr + r, .col = A.offc + c };
			if (!vterm_screen_get_cell(A.vs, pos, &cell))
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
	sinfo_t *s = sess_get(A.session, 0);
	char b[512], d[32];

	snprintf(b, sizeof b, " %s %dx%d ", A.session, A.scols, A.srows);
	x += put_text(y, x, b, width - x, bar_attr | A_BOLD, bar);

	const char *mode = A.lost ? " RECONNECTING " : A.typing ? " TYPING " : " WATCHING ";
	int mp = A.lost ? pair_for(COLOR_BLACK, COLOR_YELLOW)
		: A.typing ? pair_for(COLOR_WHITE, COLOR_RED) : pair_for(COLOR_BLACK, COLOR_GREEN);
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
	if (A.clipped)
		tn += snprintf(tail + tn, sizeof tail - (size_t)tn, " | clipped");
	if (!A.ev)
		tn += snprintf(tail + tn, sizeof tail - (size_t)tn, " | no events");
	(void)tn;

	char right[320];
	if (A.lost)
		snprintf(right, sizeof right, " %s ", A.lost_err);
	else if (A.prefix_seen)
		snprintf(right, sizeof right, " %s - i d n p s R ? ", A.prefix_name);
	else if (A.msg[0] && now_ms() < A.msg_until)
		snprintf(right, sizeof right, " %s ", A.msg);
	else
		snprintf(right, sizeof right, " %s ? help ", A.prefix_name);

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
	put_text(y, rx, right, width - rx, bar_attr | (A.prefix_seen || A.lost ? A_BOLD : 0), bar);
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
	snprintf(l[n++], sizeof l[0], "od-attach: keys after the prefix %s", A.prefix_name);
	snprintf(l[n++], sizeof l[0], " ");
	snprintf(l[n++], sizeof l[0], "  i    take the keyboard / give it back");
	snprintf(l[n++], sizeof l[0], "  d    detach (exit)");
	snprintf(l[n++], sizeof l[0], "  n p  next / previous session");
	snprintf(l[n++], sizeof l[0], "  s    pick a session from a list");
	snprintf(l[n++], sizeof l[0], "  R    (typing) resize the session to this terminal");
	snprintf(l[n++], sizeof l[0], "       (given back when you stop typing)");
	snprintf(l[n++], sizeof l[0], "  r    redraw");
	snprintf(l[n++], sizeof l[0], "  ?    this help");
	snprintf(l[n++], sizeof l[0], "  %-4s the prefix key itself (typing)", A.prefix_name);
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
	int w = 44, h = A.npick + 4;
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
	int first = A.pick_sel >= rows ? A.pick_sel - rows + 1 : 0;
	for (int i = first; i < A.npick && i - first < rows; i++) {
		sinfo_t *s = sess_get(A.pick[i], 0);
		char line[160];
		snprintf(line, sizeof line, "%c %-16s %s%s", i == A.pick_sel ? '>' : ' ', A.pick[i],
			 s && s->cmd ? "running " : "", s && s->cmd ? s->cmd : "");
		put_text(y0 + 2 + i - first, x0 + 2, line, w - 4,
			 i == A.pick_sel ? (A_REVERSE | A_BOLD) : a, p);
	}
}

static void draw(void)
{
	A.last_draw = now_ms();
	A.dirty = 0;
	if (!A.curses_on)
		return;
	erase();
	int vr = LINES - 1, vc = COLS;
	VTermPos cur;
	vterm_state_get_cursorpos(vterm_obtain_state(A.vt), &cur);
	if (vr > 0 && vc > 0)
		draw_screen(vr, vc, cur);
	if (LINES >= 1)
		draw_status(LINES - 1, COLS);
	if (A.overlay == OV_HELP)
		draw_help();
	else if (A.overlay == OV_PICK)
		draw_pick();
	int cy = cur.row - A.offr, cx = cur.col - A.offc;
	if (A.overlay == OV_NONE && !A.lost && A.cursor_visible && cy >= 0 && cy < vr && cx >= 0 &&
	    cx < vc) {
		move(cy, cx);
		curs_set(1);
	} else {
		curs_set(0);
	}
	refresh();
}

/* ---- keyboard ---- */

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

typedef struct outbuf {
	char b[8192];
	size_t n;
} outbuf_t;

/* Sends what was typed as one 'I' frame. */
static void out_flush(outbuf_t *o)
{
	if (o->n > 1 && A.tty && A.typing && !A.lost) {
		if (td_send(A.tty, 1, o->b, o->n) < 0)
			tty_lost(td_error(A.tty));
	}
	o->n = 0;
}

static void out_add(outbuf_t *o, const void *p, size_t n)
{
	if (o->n && o->n + n > sizeof o->b)
		out_flush(o);
	if (!o->n)
		o->b[o->n++] = TD_TTY_INPUT;
	memcpy(o->b + o->n, p, n);
	o->n += n;
}

static void prefix_command(unsigned char k, outbuf_t *o, int *quit)
{
	switch (k) {
	case 'i':
		toggle_typing();
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
		A.overlay = OV_HELP;
		break;
	case 'R':
		resize_to_viewer();
		break;
	case 'r':
	case 0x0c:
		clearok(curscr, TRUE);
		break;
	case 0x1b:
		break;   /* changed one's mind */
	default:
		if (k == A.prefix) {
			if (A.typing)
				out_add(o, &k, 1);
			else
				set_msg("watching: %s i to type", A.prefix_name);
		} else {
			set_msg("%s %s%c: no such command (%s ? for help)", A.prefix_name,
				k < 0x20 ? "^" : "", k < 0x20 ? k | 0x40 : k >= 0x7f ? '?' : k,
				A.prefix_name);
		}
		break;
	}
	A.dirty = 1;
}

/* Keys while the session picker is open. Returns bytes consumed. */
static size_t pick_key(const unsigned char *b, size_t n)
{
	VTermKey key;
	size_t used = (size_t)parse_cursor_key(b, n, &key);
	A.dirty = 1;
	if (used) {
		if (key == VTERM_KEY_UP && A.pick_sel > 0)
			A.pick_sel--;
		else if (key == VTERM_KEY_DOWN && A.pick_sel < A.npick - 1)
			A.pick_sel++;
		return used;
	}
	unsigned char c = b[0];
	if (c == 'k' && A.pick_sel > 0) {
		A.pick_sel--;
	} else if (c == 'j' && A.pick_sel < A.npick - 1) {
		A.pick_sel++;
	} else if (c == '\r' || c == '\n') {
		A.overlay = OV_NONE;
		if (A.pick_sel < A.npick) {
			char name[TD_SESSION_NAME_MAX + 1];
			copy_name(name, A.pick[A.pick_sel]);
			switch_to(name);
		}
	} else if (c >= '1' && c <= '9' && c - '1' < A.npick) {
		A.pick_sel = c - '1';
	} else if (c == 0x1b || c == 'q' || c == A.prefix) {
		A.overlay = OV_NONE;
		/* an unknown escape sequence: swallow it */
		if (c == 0x1b && n > 1 && (b[1] == '[' || b[1] == 'O')) {
			size_t i = 2;
			while (i < n && !(b[i] >= 0x40 && b[i] <= 0x7e))
				i++;
			return i < n ? i + 1 : n;
		}
	}
	return 1;
}

static void on_input(const unsigned char *b, size_t n, int *quit)
{
	outbuf_t o;
	o.n = 0;
	int warned = 0;
	for (size_t i = 0; i < n && !*quit;) {
		if (A.overlay == OV_PICK) {
			i += pick_key(b + i, n - i);
			continue;
		}
		if (A.overlay == OV_HELP) {
			A.overlay = OV_NONE;
			A.dirty = 1;
			/* swallow a whole escape sequence */
			if (b[i] == 0x1b && i + 1 < n && (b[i + 1] == '[' || b[i + 1] == 'O')) {
				i += 2;
				while (i < n && !(b[i] >= 0x40 && b[i] <= 0x7e))
					i++;
			}
			i++;
			continue;
		}
		if (A.prefix_seen) {
			A.prefix_seen = 0;
			out_flush(&o);
			if (b[i] == 0x1b && i + 1 < n && (b[i + 1] == '[' || b[i + 1] == 'O')) {
				/* a cursor or function key after the prefix: ignored whole */
				i += 2;
				while (i < n && !(b[i] >= 0x40 && b[i] <= 0x7e))
					i++;
				i++;
				A.dirty = 1;
				continue;
			}
			prefix_command(b[i++], &o, quit);
			continue;
		}
		if (b[i] == A.prefix) {
			A.prefix_seen = 1;
			A.dirty = 1;
			i++;
			continue;
		}
		if (!A.typing) {
			if (!warned++)
				set_msg("watching (read-only): %s i to type", A.prefix_name);
			i++;
			continue;
		}
		/* typing: cursor keys in the encoding the program asked for
		 * (DECCKM, as our copy of the screen knows it); all else as is */
		VTermKey key;
		int kl = parse_cursor_key(b + i, n - i, &key);
		if (kl) {
			A.capture = 1;
			A.keylen = 0;
			vterm_keyboard_key(A.vt, key, VTERM_MOD_NONE);
			A.capture = 0;
			if (A.keylen)
				out_add(&o, A.keybuf, A.keylen);
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

/* ---- signals and terminal ---- */

static void on_signal(int sig)
{
	int saved = errno;
	if (sig == SIGWINCH)
		got_winch = 1;
	else
		got_quit = sig;
	if (sig_pipe[1] >= 0) {
		char c = 0;
		ssize_t r = write(sig_pipe[1], &c, 1);
		(void)r;
	}
	errno = saved;
}

static void setup_signals(void)
{
	if (pipe(sig_pipe) < 0) {
		perror("od-attach: pipe");
		exit(EXIT_USAGE);
	}
	for (int i = 0; i < 2; i++) {
		int fl = fcntl(sig_pipe[i], F_GETFL);
		fcntl(sig_pipe[i], F_SETFL, fl | O_NONBLOCK);
		fcntl(sig_pipe[i], F_SETFD, FD_CLOEXEC);
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGWINCH, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGQUIT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

static void on_winch(void)
{
	struct winsize ws;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0)
		resizeterm(ws.ws_row, ws.ws_col);
	if (A.resized && A.typing && LINES > 1)
		send_resize(COLS, LINES - 1);   /* keep following the viewer */
	A.dirty = 1;
}

static void curses_start(void)
{
	initscr();
	A.curses_on = 1;
	raw();
	noecho();
	nonl();
	intrflush(stdscr, FALSE);
	leaveok(stdscr, FALSE);
	if (has_colors()) {
		start_color();
		use_default_colors();
	}
	A.dirty = 1;
}

/* ---- main loop ---- */

static int run(void)
{
	int quit = 0;
	while (!quit) {
		if (got_quit)
			finish(128 + got_quit, "stopped by signal %d", (int)got_quit);
		if (got_winch) {
			got_winch = 0;
			on_winch();
		}
		int64_t t = now_ms();
		if (A.lost && t >= A.retry_at)
			tty_try_reconnect();
		if (!A.ev && t >= A.ev_retry_at)
			ev_connect();

		struct pollfd pf[4];
		int n = 0, i_in, i_sig, i_tty = -1, i_ev = -1;
		pf[i_in = n++] = (struct pollfd){ .fd = STDIN_FILENO, .events = POLLIN };
		pf[i_sig = n++] = (struct pollfd){ .fd = sig_pipe[0], .events = POLLIN };
		if (A.tty)
			pf[i_tty = n++] = (struct pollfd){ .fd = td_fd(A.tty), .events = POLLIN };
		if (A.ev)
			pf[i_ev = n++] = (struct pollfd){ .fd = td_fd(A.ev), .events = POLLIN };

		/* how long we may sleep */
		t = now_ms();
		int64_t wait = 1000;   /* the running command's clock */
		if (A.dirty)
			wait = A.last_draw + REDRAW_MS - t;
		if (A.lost && A.retry_at - t < wait)
			wait = A.retry_at - t;
		if (!A.ev && A.ev_retry_at - t < wait)
			wait = A.ev_retry_at - t;
		if (A.msg[0] && A.msg_until > t && A.msg_until - t < wait)
			wait = A.msg_until - t;
		if ((A.tty && td_pending(A.tty) == 2) || (A.ev && td_pending(A.ev) == 2))
			wait = 0;
		if (wait < 0)
			wait = 0;
		int r = poll(pf, (nfds_t)n, (int)wait);
		if (r < 0 && errno != EINTR)
			finish(EXIT_LOST, "poll: %s", strerror(errno));
		if (r > 0 && (pf[i_sig].revents & POLLIN)) {
			char buf[64];
			while (read(sig_pipe[0], buf, sizeof buf) > 0)
				;
		}
		if (r > 0 && (pf[i_in].revents & (POLLIN | POLLHUP | POLLERR))) {
			unsigned char buf[4096];
			ssize_t k = read(STDIN_FILENO, buf, sizeof buf);
			if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN))
				finish(EXIT_LOST, "the terminal went away");
			if (k > 0)
				on_input(buf, (size_t)k, &quit);
		}
		if (A.tty && (td_pending(A.tty) == 2 ||
			      (r > 0 && i_tty >= 0 && pf[i_tty].revents)))
			tty_drain();
		if (A.ev && (td_pending(A.ev) == 2 || (r > 0 && i_ev >= 0 && pf[i_ev].revents)))
			ev_drain();

		t = now_ms();
		if (A.msg[0] && A.msg_until <= t) {
			A.msg[0] = 0;
			A.dirty = 1;
		}
		sinfo_t *s = sess_get(A.session, 0);
		if (s && s->cmd && t - A.last_draw >= 1000)
			A.dirty = 1;
		if (A.dirty && t - A.last_draw >= REDRAW_MS)
			draw();
	}
	return EXIT_DETACHED;
}

int main(int argc, char **argv)
{
	const char *token = NULL, *token_file = NULL, *prefix = "C-]", *session = "main";
	const char *cacert = NULL;
	A.url = td_default_url();
	A.token = td_default_token();
	int i, have_session = 0;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char **dst = NULL;
		const char *opt = NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(usage_text, stdout);
			return 0;
		}
		if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
			printf("od-attach %s (protocol %d)\n", TERMD_VERSION, PROTOCOL_VERSION);
			return 0;
		}
		static const struct { const char *name; int which; } opts[] = {
			{ "--url", 0 }, { "--token", 1 }, { "--token-file", 2 }, { "--prefix", 3 },
			{ "--cacert", 4 },
		};
		for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++) {
			size_t l = strlen(opts[k].name);
			if (!strncmp(a, opts[k].name, l) && (a[l] == '\0' || a[l] == '=')) {
				opt = opts[k].name;
				dst = opts[k].which == 0 ? &A.url : opts[k].which == 1 ? &token
				    : opts[k].which == 2 ? &token_file : opts[k].which == 3 ? &prefix
				    : &cacert;
				if (a[l] == '=') {
					*dst = a + l + 1;
				} else {
					if (i + 1 >= argc)
						usage_die("%s needs a value", a);
					*dst = argv[++i];
				}
				break;
			}
		}
		if (opt)
			continue;
		if (a[0] == '-' && a[1])
			usage_die("unknown option %s", a);
		if (have_session++)
			usage_die("unexpected argument %s", a);
		session = a;
	}
	if (!td_valid_session_name(session))
		usage_die("not a session name: '%s'", session);
	copy_name(A.session, session);
	int pc = parse_prefix(prefix, A.prefix_name, sizeof A.prefix_name);
	if (pc < 0)
		usage_die("--prefix: not a key: '%s' (e.g. C-b, C-], ^A)", prefix);
	A.prefix = (unsigned char)pc;
	char *file_token = NULL;
	char err[512];
	if (token) {
		A.token = token;
	} else if (token_file) {
		file_token = td_read_token_file(token_file, err, sizeof err);
		if (!file_token)
			usage_die("%s", err);
		A.token = file_token;
	}
	if (cacert)
		td_tls_set_cafile(cacert);
	td_url u;
	if (td_url_parse(A.url, &u, err, sizeof err) < 0)
		usage_die("bad URL: %s", err);
	if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
		fputs("od-attach: needs a terminal (stdin and stdout)\n", stderr);
		return EXIT_USAGE;
	}
	setlocale(LC_ALL, "");

	/* attach before taking over the terminal, so errors are plain text */
	A.tty = tty_open(A.session, 0, err, sizeof err);
	if (!A.tty) {
		if (is_http(err, 404))
			fprintf(stderr, "od-attach: no session '%s' on %s\n", A.session, A.url);
		else
			fprintf(stderr, "od-attach: cannot attach to %s at %s: %s\n", A.session, A.url, err);
		free(file_token);
		return EXIT_USAGE;
	}
	vt_init();
	setup_signals();
	ev_connect();
	curses_start();
	int rc = run();
	shutdown_all();
	vterm_free(A.vt);
	A.vt = NULL;
	for (int k = 0; k < A.nsess; k++)
		free(A.sess[k].cmd);
	free(file_token);
	return rc;
}
