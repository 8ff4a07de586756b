/* fuzz_tty.c — owns the libFuzzer target for the /tty client frame decoder:
 * the real /tty callback (tty_protocol: attach, fragment reassembly in
 * wsconn.c, on_message, writable, close) with libwebsockets, http.c's
 * upgrade check and the session faked (tests/fuzz/fake.c) and a
 * real screen behind the session, so resizes reach screen.c too. Input:
 * byte 0 bit 0 = the viewer asked for mode=rw; then fragments, each one
 * header byte (bits 0-6 length, bit 7 = more fragments of this message
 * follow) and its bytes. A simple model of PROTOCOL.md §6 says what must
 * come out: the pty gets exactly the payloads of rw 'I' frames, a valid rw
 * 'R' frame resizes and anything else but an empty frame is answered by
 * one 'E' frame; every frame termd sends has a known type. */
#include "fake.h"

#include <string.h>

struct model {
	buf_t msg;            /* message being reassembled */
	buf_t written;        /* what the pty must have got */
	int answers;          /* 'E' frames + resizes expected */
};

static void model_message(struct model *m, int rw)
{
	const unsigned char *p = (const unsigned char *)m->msg.p;
	size_t n = m->msg.len;
	if (n == 0)
		return;
	if (p[0] == TD_TTY_INPUT && rw) {
		if (n >= 2)
			buf_append(&m->written, p + 1, n - 1);
		return;
	}
	m->answers++;     /* read-only refusal, a resize or its error, unknown type */
}

static int tty_cb(struct lws *wsi, enum lws_callback_reasons reason, void *v,
		  const void *in, size_t len)
{
	return tty_protocol.callback(wsi, reason, v, (void *)in, len);
}

/* Send everything queued for the viewer (while it asks for writable
 * callbacks: it does as long as anything is queued); count error frames. */
static void drain(void *v, struct lws *wsi, int *errors)
{
	size_t first = fake_nsent;
	for (int guard = 0; fake_writable && guard < 1000; guard++) {
		fake_writable = 0;
		FUZZ_CHECK(tty_cb(wsi, LWS_CALLBACK_SERVER_WRITEABLE, v, NULL, 0) == 0,
			   "writable callback failed");
	}
	FUZZ_CHECK(!fake_writable, "queue not drained");
	for (size_t i = first; i < fake_nsent; i++) {
		const struct sent *s = &fake_sent[i];
		FUZZ_CHECK(s->conn == NULL && s->len >= 1, "empty tty frame");
		switch (s->data[0]) {
		case TD_TTY_ERROR:
			FUZZ_CHECK(s->len > 1, "empty error frame");
			(*errors)++;
			break;
		case TD_TTY_SIZE: {
			cJSON *j = cJSON_ParseWithLength(s->data + 1, s->len - 1);
			FUZZ_CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "cols")) &&
				   cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "rows")),
				   "bad size frame %s", s->data + 1);
			cJSON_Delete(j);
			break;
		}
		case TD_TTY_SNAPSHOT:
		case TD_TTY_TITLE:
		case TD_TTY_OUTPUT:
		case TD_TTY_EXIT:
			break;
		default:
			FUZZ_CHECK(0, "unknown frame type %d sent", s->data[0]);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int rw = data[0] & 1;
	/* the viewer is tty.c's own struct: lws allocates it, so does this */
	void *v = xcalloc(1, tty_protocol.per_session_data_size);
	struct lws *wsi = v;   /* never dereferenced by the fakes */
	struct model m;
	int errors = 0;

	memset(&m, 0, sizeof m);
	opts.retain = 4;
	opts.max_viewers = TD_DEFAULT_MAX_VIEWERS;
	events_init(conn_send);
	tty_register();   /* its session listener (resize), kept once */
	fake_session = fake_session_new(24, 80);
	fake_resizes = 0;
	fake_uri = "/tty/main";
	fake_mode = rw ? "rw" : "ro";
	fake_writable = 0;
	FUZZ_CHECK(tty_cb(wsi, LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION, v, NULL, 0) == 0,
		   "connection refused");
	tty_cb(wsi, LWS_CALLBACK_ESTABLISHED, v, NULL, 0);
	FUZZ_CHECK(fake_session->viewers != NULL && fake_session->nviewers == 1, "not attached");
	drain(v, wsi, &errors);
	FUZZ_CHECK(fake_nsent >= 2 && fake_sent[0].data[0] == TD_TTY_SIZE &&
		   fake_sent[1].data[0] == TD_TTY_SNAPSHOT, "attach does not start with size, snapshot");
	/* the mode was taken: an 'I' without bytes is refused on ro only */
	fake_final = 1;
	tty_cb(wsi, LWS_CALLBACK_RECEIVE, v, "I", 1);
	drain(v, wsi, &errors);
	FUZZ_CHECK(errors == !rw, "mode %s not taken", rw ? "rw" : "ro");
	errors = 0;

	size_t i = 1;
	while (i < size) {
		size_t len = data[i] & 0x7f;
		int more = data[i] & 0x80;
		i++;
		if (len > size - i)
			len = size - i;
		buf_append(&m.msg, data + i, len);
		fake_final = !more;
		tty_cb(wsi, LWS_CALLBACK_RECEIVE, v, data + i, len);
		i += len;
		if (!more) {
			model_message(&m, rw);
			buf_reset(&m.msg);
		}
		drain(v, wsi, &errors);
	}
	FUZZ_CHECK(fake_written.len == m.written.len &&
		   (m.written.len == 0 || memcmp(fake_written.p, m.written.p, m.written.len) == 0),
		   "the pty got %zu bytes, %zu expected", fake_written.len, m.written.len);
	FUZZ_CHECK(errors + fake_resizes == m.answers, "%d errors + %d resizes, %d answers expected",
		   errors, fake_resizes, m.answers);
	FUZZ_CHECK(fake_session->cols >= 2 && fake_session->cols <= 1000 &&
		   fake_session->rows >= 1 && fake_session->rows <= 1000,
		   "session size %dx%d", fake_session->cols, fake_session->rows);

	/* the screen after the resizes still answers */
	static const char out[] = "hello\r\n\x1b[31mworld";
	buf_t b = {0};
	screen_feed(fake_session->screen, out, sizeof out - 1);
	screen_text(fake_session->screen, &b);
	buf_free(&b);

	tty_cb(wsi, LWS_CALLBACK_CLOSED, v, NULL, 0);
	FUZZ_CHECK(fake_session->viewers == NULL && fake_session->nviewers == 0, "viewer not unlinked");
	free(v);
	fake_session_free(fake_session);
	fake_session = NULL;
	buf_free(&m.msg);
	buf_free(&m.written);
	buf_free(&fake_written);
	fake_sent_clear();
	events_shutdown();
	return 0;
}
