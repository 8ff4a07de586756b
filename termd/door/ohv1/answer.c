/* answer.c — what every file of the OpenHands V1 door uses: answers in
 * V1's shapes ({"detail": …}, FastAPI's 422), the key check
 * (X-Session-API-Key equal to the full token, else 401
 * {"detail":"Unauthorized"}), query arguments, actions through the action
 * layer (a socketless connection), and the time of the last V1 work. */
#include "ohv1.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
	struct action_caller call;   /* socketless: answers come to sink */
	uint64_t last_us;
} v1;

/* ============================================================== answers */

void v1_json(struct http_txn *t, int status, cJSON *o)
{
	char *s = cJSON_PrintUnformatted(o);
	http_answer(t, status, "application/json", s, strlen(s));
	free(s);
	cJSON_Delete(o);
}

void v1_detail(struct http_txn *t, int status, const char *detail)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "detail", detail);
	v1_json(t, status, o);
}

void v1_422(struct http_txn *t, const char *where, const char *name, const char *type,
	    const char *msg, const char *input, const char *ctx_key, double ctx_val)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *d = cJSON_AddArrayToObject(o, "detail");
	cJSON *e = cJSON_CreateObject();
	cJSON_AddItemToArray(d, e);
	cJSON_AddStringToObject(e, "type", type);
	cJSON *loc = cJSON_AddArrayToObject(e, "loc");
	cJSON_AddItemToArray(loc, cJSON_CreateString(where));
	if (name)
		cJSON_AddItemToArray(loc, cJSON_CreateString(name));
	cJSON_AddStringToObject(e, "msg", msg);
	if (input)
		cJSON_AddStringToObject(e, "input", input);
	else
		cJSON_AddNullToObject(e, "input");
	if (ctx_key) {
		cJSON *ctx = cJSON_AddObjectToObject(e, "ctx");
		cJSON_AddNumberToObject(ctx, ctx_key, ctx_val);
	}
	v1_json(t, 422, o);
}

const char *v1_arg(struct http_txn *t, const char *name, char *out, size_t n)
{
	const char *v = http_arg(t, name, out, n);
	if (!v)
		return NULL;
	memmove(out, v, strlen(v) + 1);   /* the value at out's start */
	return out;
}

/* ================================================================= key */

int v1_key_ok(const char *key)
{
	/* (no full token: no key matches; who may act then is termd's rule,
	 * http.c's auth level: v1_admit, socket.c's check) */
	return opts.token && key && key[0] && http_token_ok(key);
}

int v1_admit(struct http_txn *t)
{
	char key[640];
	if (!opts.token && t->auth == AUTH_FULL)
		return 0;
	if (opts.token && http_header(t, "x-session-api-key:", key, sizeof key) > 0 &&
	    v1_key_ok(key))
		return 0;
	t->close_after = 1;   /* its body is not read */
	v1_detail(t, 401, "Unauthorized");
	return 1;
}

/* ============================================================= actions */

cJSON *v1_action(const char *action, cJSON *args)
{
	return action_call_now(&v1.call, action, args);
}

void v1_touch(void)
{
	v1.last_us = mono_us();
}

uint64_t v1_last_work(void)
{
	return v1.last_us;
}

void v1_answer_init(void)
{
	v1.call.conn.sink = action_caller_sink;
	v1.call.prefix = "ohv1";
	v1.last_us = mono_us();
}

