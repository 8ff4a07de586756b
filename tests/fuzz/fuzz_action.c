/* fuzz_action.c — owns the libFuzzer target for the /events action decoder:
 * arbitrary frames through the real actions_dispatch and events.c (errors,
 * idempotent replays, subscribe with a small retention ring), with the
 * handlers faked (tests/fuzz/fake.c). Input: byte 0 bit 0 = read-only
 * connection, then frames separated by NUL bytes. Every message sent back
 * must be a JSON object observation with seq, cause, content and extras;
 * an error names a known code; each frame gets exactly one answer (subscribe
 * may first replay retained events), caused by the frame's id when it has a
 * valid one and by null otherwise; a read-only connection reaches only the
 * read-only actions; and valid UTF-8 in gives valid UTF-8 out. */
#include "fake.h"

#include <math.h>
#include <string.h>

#define MAX_FRAMES 16

static int known_code(const char *s)
{
	for (int e = 0; e < TD_ERR__COUNT; e++)
		if (strcmp(s, td_err_name((td_err)e)) == 0)
			return 1;
	return 0;
}

/* The id the answer's cause must equal (parsed from the frame with the
 * decoder's own rules), or NULL for a null cause. *action gets the action
 * name when there is one. Caller deletes *root. */
static const cJSON *expected_cause(const char *frame, size_t len, cJSON **root, const char **action)
{
	*action = NULL;
	*root = cJSON_ParseWithLength(frame, len);
	if (!cJSON_IsObject(*root))
		return NULL;
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(*root, "action");
	if (cJSON_IsString(a))
		*action = a->valuestring;
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(*root, "id");
	if (cJSON_IsString(id))
		return id;
	if (cJSON_IsNumber(id) && isfinite(id->valuedouble) && id->valuedouble == floor(id->valuedouble))
		return id;
	return NULL;
}

static void check_frame(struct conn *c, const char *frame, size_t len, size_t first, int utf8_in)
{
	cJSON *root;
	const char *action;
	const cJSON *want = expected_cause(frame, len, &root, &action);
	size_t n = fake_nsent - first;

	FUZZ_CHECK(n >= 1, "no answer to a frame");
	if (!action || strcmp(action, "subscribe") != 0)
		FUZZ_CHECK(n == 1, "%zu answers to one frame", n);
	for (size_t i = first; i < fake_nsent; i++) {
		const struct sent *s = &fake_sent[i];
		FUZZ_CHECK(s->conn == c, "message to another connection");
		FUZZ_CHECK(strlen(s->data) == s->len, "NUL inside a message");
		if (utf8_in)
			FUZZ_CHECK(fuzz_utf8_valid(s->data, s->len), "invalid UTF-8 out: %s", s->data);
		cJSON *o = cJSON_ParseWithLength(s->data, s->len);
		FUZZ_CHECK(cJSON_IsObject(o), "not a JSON object: %s", s->data);
		const cJSON *obs = cJSON_GetObjectItemCaseSensitive(o, "observation");
		const cJSON *cause = cJSON_GetObjectItemCaseSensitive(o, "cause");
		const cJSON *ex = cJSON_GetObjectItemCaseSensitive(o, "extras");
		const cJSON *content = cJSON_GetObjectItemCaseSensitive(o, "content");
		FUZZ_CHECK(cJSON_IsString(obs) && *obs->valuestring, "no observation: %s", s->data);
		FUZZ_CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "seq")), "no seq: %s", s->data);
		FUZZ_CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "ts")), "no ts: %s", s->data);
		FUZZ_CHECK(cause != NULL, "no cause: %s", s->data);
		FUZZ_CHECK(cJSON_IsString(content), "no content: %s", s->data);
		FUZZ_CHECK(cJSON_IsObject(ex), "no extras: %s", s->data);
		if (strcmp(obs->valuestring, "error") == 0) {
			const cJSON *code = cJSON_GetObjectItemCaseSensitive(ex, "code");
			FUZZ_CHECK(cJSON_IsString(code) && known_code(code->valuestring),
				   "error without a known code: %s", s->data);
		}
		if (i + 1 == fake_nsent) {
			/* the answer itself */
			/* the id itself; an id that is not valid UTF-8 comes back with
			 * U+FFFD for its bad bytes (a text frame is UTF-8: events.c) */
			if (want && utf8_in)
				FUZZ_CHECK(cJSON_Compare(cause, want, 1), "cause is not the id: %s", s->data);
			else if (want)
				FUZZ_CHECK((cause->type & 0xff) == (want->type & 0xff),
					   "cause is not of the id's type: %s", s->data);
			else
				FUZZ_CHECK(cJSON_IsNull(cause), "cause should be null: %s", s->data);
			if (c->readonly && strcmp(obs->valuestring, "fake") == 0)
				FUZZ_CHECK(strcmp(content->valuestring, "screen") == 0 ||
					   strcmp(content->valuestring, "session.list") == 0,
					   "read-only connection ran %s", content->valuestring);
			if (strcmp(obs->valuestring, "fake") == 0 || strcmp(obs->valuestring, "pong") == 0 ||
			    strcmp(obs->valuestring, "subscribe") == 0)
				FUZZ_CHECK(action != NULL, "an action ran without an action name");
		}
		cJSON_Delete(o);
	}
	cJSON_Delete(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	struct conn c;
	memset(&c, 0, sizeof c);
	c.readonly = data[0] & 1;
	const char *p = (const char *)data + 1, *end = (const char *)data + size;
	int utf8_in = fuzz_utf8_valid(p, (size_t)(end - p));

	opts.retain = 4;            /* small, so replays fall out of the ring */
	events_init(conn_send);
	fake_register_actions();
	srv.conns = &c;
	for (int f = 0; f < MAX_FRAMES && p <= end; f++) {
		const char *nul = memchr(p, 0, (size_t)(end - p));
		size_t len = nul ? (size_t)(nul - p) : (size_t)(end - p);
		size_t first = fake_nsent;
		actions_dispatch(&c, p, len);
		check_frame(&c, p, len, first, utf8_in);
		if (!nul)
			break;
		p = nul + 1;
	}
	srv.conns = NULL;
	events_shutdown();
	actions_shutdown();
	fake_sent_clear();
	return 0;
}
