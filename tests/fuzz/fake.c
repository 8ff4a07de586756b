/* fake.c — owns the fuzz targets' stand-ins for the parts of termd that
 * need a network, a pty or a file system: conn_send and lws_write record
 * what would go out, http.c's upgrade check reads fake_uri and fake_mode,
 * the few libwebsockets calls tty.c and wsconn.c make, one pty-less
 * session "main" with a real screen, and the action handlers of run.c, sessionctl.c, files.c, edit.c and expect.c, which
 * here only read their arguments with the real typed helpers and answer
 * "fake". */
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

int lws_write(struct lws *wsi, unsigned char *buf, size_t len, enum lws_write_protocol protocol)
{
	(void)wsi;
	(void)protocol;
	record(NULL, buf, len);
	return (int)len;
}

/* ---- session.c: one session without a pty ---- */

struct session *fake_session_new(int rows, int cols)
{
	struct session *s = xcalloc(1, sizeof *s);
	strcpy(s->name, "main");
	s->rows = rows;
	s->cols = cols;
	s->screen = screen_new(rows, cols);
	s->alive = 1;
	s->master_fd = -1;
	return s;
}

void fake_session_free(struct session *s)
{
	if (!s)
		return;
	screen_free(s->screen);
	free(s);
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
	tty_on_resize(s);
}

/* ---- run.c ---- */

void run_note_typed(struct session *s, const char *data, size_t n)
{
	(void)s;
	(void)data;
	(void)n;
}

int run_rebind(const cJSON *id, struct conn *c)
{
	(void)id;
	(void)c;
	return 0;
}

/* ---- the action handlers: arguments read as the real ones do ---- */

static void answer(struct conn *c, const cJSON *id, const char *name)
{
	events_emit(c, id, "fake", name, NULL);
}

void run_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	const char *session = "main", *command = NULL;
	int is_input = 0, has;
	double v;
	if (arg_string(c, id, args, "session", &session, 0) < 0 ||
	    arg_string(c, id, args, "command", &command, 1) < 0 ||
	    arg_bool(c, id, args, "is_input", &is_input) < 0 ||
	    arg_number(c, id, args, "timeout", &v, &has) < 0 ||
	    arg_number(c, id, args, "idle_timeout", &v, &has) < 0 ||
	    arg_number(c, id, args, "max_output", &v, &has) < 0)
		return;
	answer(c, id, "run");
}

void keys_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	const char *session = "main";
	int has;
	double v;
	if (arg_string(c, id, args, "session", &session, 0) < 0 ||
	    arg_number(c, id, args, "settle_ms", &v, &has) < 0 ||
	    arg_number(c, id, args, "timeout", &v, &has) < 0)
		return;
	answer(c, id, "keys");
}

void screen_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	const char *session = "main";
	if (arg_string(c, id, args, "session", &session, 0) < 0)
		return;
	answer(c, id, "screen");
}

void expect_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	const char *session = "main", *pattern = NULL;
	int has;
	double v;
	if (arg_string(c, id, args, "session", &session, 0) < 0 ||
	    arg_string(c, id, args, "pattern", &pattern, 1) < 0 ||
	    arg_number(c, id, args, "timeout", &v, &has) < 0)
		return;
	answer(c, id, "expect");
}

void session_open_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	const char *name = NULL, *command = NULL, *cwd = NULL;
	int has;
	double v;
	if (arg_string(c, id, args, "name", &name, 1) < 0 ||
	    arg_string(c, id, args, "command", &command, 0) < 0 ||
	    arg_string(c, id, args, "cwd", &cwd, 0) < 0 ||
	    arg_number(c, id, args, "cols", &v, &has) < 0 ||
	    arg_number(c, id, args, "rows", &v, &has) < 0)
		return;
	answer(c, id, "session.open");
}

void session_list_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	(void)args;
	answer(c, id, "session.list");
}

void session_signal_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	const char *session = "main", *sig = NULL;
	if (arg_string(c, id, args, "session", &session, 0) < 0 ||
	    arg_string(c, id, args, "signal", &sig, 1) < 0)
		return;
	answer(c, id, "session.signal");
}

void session_close_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	const char *name = NULL;
	if (arg_string(c, id, args, "session", &name, 1) < 0)
		return;
	answer(c, id, "session.close");
}

void files_read_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	const char *path = NULL, *enc = NULL;
	int has;
	double v;
	if (arg_string(c, id, args, "path", &path, 1) < 0 ||
	    arg_string(c, id, args, "encoding", &enc, 0) < 0 ||
	    arg_number(c, id, args, "offset", &v, &has) < 0 ||
	    arg_number(c, id, args, "limit", &v, &has) < 0)
		return;
	answer(c, id, "read");
}

void files_write_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	const char *path = NULL, *content = NULL, *mode = NULL, *sha = NULL;
	if (arg_string(c, id, args, "path", &path, 1) < 0 ||
	    arg_string(c, id, args, "content", &content, 1) < 0 ||
	    arg_string(c, id, args, "mode", &mode, 0) < 0 ||
	    arg_string(c, id, args, "expected_sha256", &sha, 0) < 0)
		return;
	answer(c, id, "write");
}

void edit_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	const char *command = NULL, *path = NULL;
	if (arg_string(c, id, args, "command", &command, 1) < 0 ||
	    arg_string(c, id, args, "path", &path, 1) < 0)
		return;
	answer(c, id, "edit");
}
