/* call.c — the client library's events-channel layer: action frames and
 * their ids ("<prefix>-<pid>-<random>-<counter>"), td_send_action and
 * td_call (send, then wait for the observation caused by it), td_recv_json
 * (which keeps the hello), and the two JSON accessors termctl and od-attach
 * share. */
#include "client-int.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

cJSON *td_action_new(const char *name, cJSON **args)
{
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "action", name);
	cJSON *ar = cJSON_AddObjectToObject(a, "args");
	if (args)
		*args = ar;
	return a;
}

void td_set_id_prefix(td_client *c, const char *prefix)
{
	snprintf(c->id_prefix, sizeof c->id_prefix, "%s", prefix && *prefix ? prefix : "td");
}

const cJSON *td_hello(const td_client *c)
{
	return c->hello;
}

static void td_note_hello(td_client *c, const cJSON *obs)
{
	const cJSON *o = cJSON_GetObjectItemCaseSensitive(obs, "observation");
	if (cJSON_IsString(o) && !strcmp(o->valuestring, "hello")) {
		cJSON_Delete(c->hello);
		c->hello = cJSON_Duplicate(obs, 1);
	}
}

int td_recv_json(td_client *c, cJSON **out, int timeout_ms, char *err, size_t errlen)
{
	*out = NULL;
	int64_t deadline = td_deadline(timeout_ms);
	for (;;) {
		char *data;
		size_t len;
		int bin;
		int r = td_recv(c, &data, &len, &bin, td_left(deadline));
		if (r < 0) {
			td_seterr(err, errlen, "%s", c->err);
			return -1;
		}
		if (r == 0) {
			td_seterr(err, errlen, "timed out");
			return 0;
		}
		if (bin) {
			free(data);
			continue;
		}
		cJSON *j = cJSON_ParseWithLength(data, len);
		free(data);
		if (!j) {
			td_seterr(err, errlen, "server sent a message that is not JSON");
			return -1;
		}
		td_note_hello(c, j);
		*out = j;
		return 1;
	}
}

int td_send_action(td_client *c, cJSON *action, char *idout, size_t idlen, char *err,
		   size_t errlen)
{
	if (!cJSON_IsObject(action)) {
		td_seterr(err, errlen, "action must be a JSON object");
		return -1;
	}
	cJSON *id = cJSON_GetObjectItemCaseSensitive(action, "id");
	if (!id) {
		/* random for every id: one seen (the stream carries causes to
		 * every subscriber) says nothing about the next */
		uint8_t r[8];
		td_random(r, sizeof r);
		for (size_t i = 0; i < sizeof r; i++)
			snprintf(c->id_rand + 2 * i, sizeof c->id_rand - 2 * i, "%02x", r[i]);
		char buf[96];
		snprintf(buf, sizeof buf, "%s-%ld-%s-%lu", c->id_prefix[0] ? c->id_prefix : "td",
			 (long)getpid(), c->id_rand, ++c->id_counter);
		id = cJSON_AddStringToObject(action, "id", buf);
	} else if (!cJSON_IsString(id) && !cJSON_IsNumber(id)) {
		td_seterr(err, errlen, "action id must be a string or an integer");
		return -1;
	}
	if (idout && idlen) {
		if (cJSON_IsString(id))
			snprintf(idout, idlen, "%s", id->valuestring);
		else
			snprintf(idout, idlen, "%.0f", id->valuedouble);
	}
	char *txt = cJSON_PrintUnformatted(action);
	if (!txt) {
		td_seterr(err, errlen, "cannot encode action");
		return -1;
	}
	int r = td_send(c, 0, txt, strlen(txt));
	free(txt);
	if (r < 0) {
		td_seterr(err, errlen, "%s", c->err);
		return -1;
	}
	return 0;
}

cJSON *td_call(td_client *c, cJSON *action, int timeout_ms, char *err, size_t errlen)
{
	if (td_send_action(c, action, NULL, 0, err, errlen) < 0)
		return NULL;
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(action, "id");
	int r;
	int64_t deadline = td_deadline(timeout_ms);
	for (;;) {
		cJSON *obs;
		r = td_recv_json(c, &obs, td_left(deadline), err, errlen);
		if (r == 0) {
			td_seterr(err, errlen, "no answer within %.3g s", timeout_ms / 1000.0);
			return NULL;
		}
		if (r < 0) {
			if (!c->closed)
				continue;   /* a message that is not JSON: not ours, skip it */
			return NULL;
		}
		const cJSON *cause = cJSON_GetObjectItemCaseSensitive(obs, "cause");
		if (cause && cJSON_Compare(cause, id, 1))
			return obs;
		cJSON_Delete(obs);
	}
}

const char *td_json_str(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

int td_json_int(const cJSON *o, const char *k, int dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	if (!cJSON_IsNumber(v) || v->valuedouble < INT_MIN || v->valuedouble > INT_MAX)
		return dflt;
	return (int)v->valuedouble;
}
