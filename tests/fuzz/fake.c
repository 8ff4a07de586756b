/* fake.c — owns the fuzz targets' stand-ins for the parts of termd that
 * need a network, a pty or a file system: conn_send and lws_write record
 * what would go out, http.c's upgrade check reads fake_uri and fake_mode,
 * the few libwebsockets calls tty.c and wsconn.c make, one pty-less
 * session "main" with a real screen, and the action handlers of run.c,
 * sessionctl.c, files.c, edit.c and expect.c, which here only read their
 * arguments with the real typed helpers and answer "fake". */
#include "fake.h"

#include <string.h>

struct termd_opts opts;
struct server srv;

struct sent *fake_sent;
size_t fake_nsent;
static size_t sent_cap;
struct session *fake_session;
buf_t fake_written;
int fake_resizes;
int fake_final = 1;

static void record(struct conn *c, const void *data, size_t len)
{
	if (fake_nsent == sent_cap) {
		sent_cap = sent_cap ? 2 * sent_cap : 16;
		fake_sent = xrealloc(fake_sent, sent_cap * sizeof *fake_sent);
	}
	struct sent *s = &fake_sent[fake_nsent++];
	s->conn = c;
	s->data = xmalloc(len + 1);
	if (len)
		memcpy(s->data, data, len);
	s->data[len] = 0;
	s->len = len;
}

void fake_sent_clear(void)
{
	for (size_t i = 0; i < fake_nsent; i++)
		free(fake_sent[i].data);
	free(fake_sent);
	fake_sent = NULL;
	fake_nsent = sent_cap = 0;
}

int fuzz_utf8_valid(const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;
	while (i < n) {
		unsigned char b = s[i];
		size_t k;
		unsigned char lo = 0x80, hi = 0xBF;
		if (b < 0x80) {
			i++;
			continue;
		} else if (b >= 0xC2 && b <= 0xDF) {
			k = 1;
		} else if (b >= 0xE0 && b <= 0xEF) {
			k = 2;
			if (b == 0xE0)
				lo = 0xA0;
			if (b == 0xED)
				hi = 0x9F;
		} else if (b >= 0xF0 && b <= 0xF4) {
			k = 3;
			if (b == 0xF0)
				lo = 0x90;
			if (b == 0xF4)
				hi = 0x8F;
		} else {
			return 0;
		}
		if (n - i <= k)
			return 0;
		for (size_t j = 1; j <= k; j++) {
			if (s[i + j] < lo || s[i + j] > hi)
				return 0;
			lo = 0x80;
			hi = 0xBF;
		}
		i += k + 1;
	}
	return 1;
}

/* ---- server.c ---- */

void conn_send(struct conn *c, const char *data, size_t len)
{
	if (c->closing)
		return;
	record(c, data, len);
}

/* ---- http.c: the upgrade check, from fake_uri and fake_mode ---- */

const char *fake_uri = "/tty/main";
const char *fake_mode;

int http_upgrade(struct lws *wsi, enum channel ch, struct upgrade *u)
{
	(void)wsi;
	memset(u, 0, sizeof *u);
	size_t tl = strlen(TD_PATH_TTY);
	if (ch != CHANNEL_TTY || strncmp(fake_uri, TD_PATH_TTY, tl) != 0 ||
	    strlen(fake_uri + tl) >= sizeof u->session ||
	    !td_valid_session_name(fake_uri + tl) || !session_find(fake_uri + tl))
		return -1;
	if (fake_mode && strcmp(fake_mode, "rw") == 0)
		u->rw = 1;
	else if (fake_mode && strcmp(fake_mode, "ro") != 0)
		return -1;
	u->channel = CHANNEL_TTY;
	u->auth = AUTH_FULL;
	memcpy(u->session, fake_uri + tl, strlen(fake_uri + tl) + 1);
	return 0;
}

/* ---- libwebsockets, as tty.c uses it ---- */

int fake_writable;

int lws_callback_on_writable(struct lws *wsi)
{
	(void)wsi;
	fake_writable = 1;
	return 1;
}

int lws_is_final_fragment(struct lws *wsi)
{
	(void)wsi;
	return fake_final;
}

size_t lws_remaining_packet_payload(struct lws *wsi)
{
	(void)wsi;
	return 0;
}

/* the socket always has room (wsconn.c writes while it does) */
int lws_send_pipe_choked(struct lws *wsi)
{
	(void)wsi;
	return 0;
}

/* no socket: wsconn_sock_frag takes its largest piece */
lws_sockfd_type lws_get_socket_fd(struct lws *wsi)
{
	(void)wsi;
	return -1;
}

int lws_write(struct lws *wsi, unsigned char *buf, size_t len, enum lws_write_protocol protocol)
{
	(void)wsi;
	(void)protocol;
	record(NULL, buf, len);
	return (int)len;
}

/* ---- session.c: one session without a pty ---- */

static const struct session_listener *fake_listeners[8];
static size_t fake_nlisteners;

struct session *fake_session_new(int rows, int cols)
{
	struct session *s = xcalloc(1, sizeof *s);
	strcpy(s->name, "main");
	s->rows = rows;
	s->cols = cols;
	s->screen = screen_new(rows, cols);
	s->pty.alive = 1;
	s->pty.fd = -1;
	return s;
}

void fake_session_free(struct session *s)
{
	if (!s)
		return;
	screen_free(s->screen);
	free(s);
}

struct screen *session_screen(struct session *s)
{
	return s->screen;
}

struct session *session_find(const char *name)
{
	return fake_session && strcmp(name, fake_session->name) == 0 ? fake_session : NULL;
}

cJSON *session_names_json(void)
{
	cJSON *a = cJSON_CreateArray();
	if (fake_session)
		cJSON_AddItemToArray(a, cJSON_CreateString(fake_session->name));
	return a;
}

void session_write(struct session *s, const void *data, size_t len)
{
	(void)s;
	buf_append(&fake_written, data, len);
}

/* as session.c, without the ioctl */
void session_resize(struct session *s, int cols, int rows)
{
	if (cols < 2 || rows < 1 || cols > 1000 || rows > 1000)
		return;
	fake_resizes++;
	if (cols == s->cols && rows == s->rows)
		return;
	s->cols = cols;
	s->rows = rows;
	screen_resize(s->screen, rows, cols);
	for (size_t i = 0; i < fake_nlisteners; i++)
		if (fake_listeners[i]->resize)
			fake_listeners[i]->resize(s);
}

/* ---- cmd.c ---- */

void cmd_note_typed(struct session *s, const char *data, size_t n, int by_agent)
{
	(void)s;
	(void)data;
	(void)n;
	(void)by_agent;
}

/* ---- the action handlers: arguments read as the real ones do ---- */

static int answer(struct act *a, const char *name)
{
	events_emit(a->conn, a->id, "fake", name, NULL);
	return 0;
}

static int fake_run(struct act *a)
{
	const char *command = NULL;
	int is_input = 0, has;
	double v;
	const char *s = "main";
	if (arg_session_name(a, "session", 0, &s) < 0 ||
	    arg_string(a, "command", &command, 1) < 0 ||
	    arg_bool(a, "is_input", &is_input) < 0 ||
	    arg_number(a, "timeout", &v, &has) < 0 ||
	    arg_number(a, "idle_timeout", &v, &has) < 0 ||
	    arg_number(a, "max_output", &v, &has) < 0)
		return -1;
	return answer(a, "run");
}

static int fake_keys(struct act *a)
{
	int has;
	double v;
	const char *s = "main";
	if (arg_session_name(a, "session", 0, &s) < 0 ||
	    arg_number(a, "settle_ms", &v, &has) < 0 ||
	    arg_number(a, "timeout", &v, &has) < 0)
		return -1;
	return answer(a, "keys");
}

static int fake_screen(struct act *a)
{
	const char *s = "main";
	if (arg_session_name(a, "session", 0, &s) < 0)
		return -1;
	return answer(a, "screen");
}

static int fake_expect(struct act *a)
{
	const char *pattern = NULL;
	int has;
	double v;
	const char *s = "main";
	if (arg_string(a, "pattern", &pattern, 1) < 0 ||
	    arg_number(a, "timeout", &v, &has) < 0 ||
	    arg_session_name(a, "session", 0, &s) < 0)
		return -1;
	return answer(a, "expect");
}

static int fake_session_open(struct act *a)
{
	const char *name = NULL, *command = NULL, *cwd = NULL;
	int has;
	double v;
	if (arg_session_name(a, "name", 1, &name) < 0 ||
	    arg_string(a, "command", &command, 0) < 0 ||
	    arg_string(a, "cwd", &cwd, 0) < 0 ||
	    arg_number(a, "cols", &v, &has) < 0 ||
	    arg_number(a, "rows", &v, &has) < 0)
		return -1;
	return answer(a, "session.open");
}

static int fake_session_list(struct act *a)
{
	return answer(a, "session.list");
}

static int fake_session_signal(struct act *a)
{
	const char *sig = NULL;
	const char *s = "main";
	if (arg_string(a, "signal", &sig, 1) < 0 ||
	    arg_session_name(a, "session", 0, &s) < 0)
		return -1;
	return answer(a, "session.signal");
}

static int fake_session_close(struct act *a)
{
	const char *name = NULL;
	if (arg_session_name(a, "session", 1, &name) < 0)
		return -1;
	return answer(a, "session.close");
}

static int fake_read(struct act *a)
{
	const char *path = NULL;
	long long v;
	int b64;
	if (arg_string(a, "path", &path, 1) < 0 ||
	    arg_encoding(a, &b64) < 0 ||
	    arg_int(a, "start", &v, NULL) < 0 ||
	    arg_int(a, "end", &v, NULL) < 0)
		return -1;
	return answer(a, "read");
}

static int fake_write(struct act *a)
{
	const char *path = NULL, *content = NULL, *mode = NULL, *sha = NULL;
	if (arg_string(a, "path", &path, 1) < 0 ||
	    arg_string(a, "content", &content, 1) < 0 ||
	    arg_string(a, "mode", &mode, 0) < 0 ||
	    arg_string(a, "expected_sha256", &sha, 0) < 0)
		return -1;
	return answer(a, "write");
}

static int fake_edit(struct act *a)
{
	const char *command = NULL, *path = NULL;
	if (arg_string(a, "command", &command, 1) < 0 ||
	    arg_string(a, "path", &path, 1) < 0)
		return -1;
	return answer(a, "edit");
}

/* The real modules register these names; the fakes take their place. */
void fake_register_actions(void)
{
	static const struct action_def defs[] = {
		{"run", fake_run, 0},
		{"keys", fake_keys, 0},
		{"screen", fake_screen, ACT_READONLY},
		{"expect", fake_expect, 0},
		{"session.open", fake_session_open, 0},
		{"session.list", fake_session_list, ACT_READONLY},
		{"session.signal", fake_session_signal, 0},
		{"session.close", fake_session_close, 0},
		{"read", fake_read, 0},
		{"write", fake_write, 0},
		{"edit", fake_edit, 0},
	};
	actions_init();
	events_register();
	actions_register(defs, sizeof defs / sizeof defs[0]);
}

/* ---- run.c, session.c, sessionctl.c pieces actions.c links to ---- */

void session_listen(const struct session_listener *l)
{
	for (size_t i = 0; i < fake_nlisteners; i++)
		if (fake_listeners[i] == l)
			return;   /* registered once, whatever the runs */
	if (fake_nlisteners < sizeof fake_listeners / sizeof fake_listeners[0])
		fake_listeners[fake_nlisteners++] = l;
}

void session_gone(struct session *s)
{
	(void)s;
}

/* server.c's timers: tty.c's frame tick never fires here (no output is
 * fed, so no session floods its viewers) */
void server_timer(lws_sorted_usec_list_t *sul, sul_cb_t cb, uint64_t delay_us)
{
	(void)sul, (void)cb, (void)delay_us;
}

void lws_sul_cancel(lws_sorted_usec_list_t *sul)
{
	(void)sul;
}

/* fair.c: no ptys to hold here */
void fair_pending_changed(struct session *s, int ended)
{
	(void)s, (void)ended;
}

struct session *session_open(const char *name, const char *command, const char *cwd,
			     const cJSON *env, int cols, int rows, td_err *code, char *err,
			     size_t errlen)
{
	(void)name, (void)command, (void)cwd, (void)env, (void)cols, (void)rows;
	*code = TD_ERR_INTERNAL;
	snprintf(err, errlen, "no sessions in the fuzz target");
	return NULL;
}

int session_respawn(struct session *s, char *err, size_t errlen)
{
	(void)s;
	snprintf(err, errlen, "no sessions in the fuzz target");
	return -1;
}

void sessionctl_announce(struct conn *c, const cJSON *id, struct session *s)
{
	(void)c;
	(void)id;
	(void)s;
}

/* fsact.c: no file work here (no fake action is registered ACT_FILEWORK) */
int fsact_defer(struct act *a, const struct action_def *def)
{
	(void)def;
	return act_error(a, TD_ERR_BUSY, "no file work in the fuzzer");
}
