/* socket.c — OpenHands V1's WebSocket /sockets/bash-events (a door
 * WebSocket, net/conn.c carries it): the key as ?session_api_key=, the
 * X-Session-API-Key header (a wrong one refuses the handshake, 403) or a
 * first frame {"type":"auth","session_api_key":…} within 10 s (else close
 * 4001); then every bash event as it is made, after the kept ones with
 * resend_mode=all. A frame that is not an auth frame starts a command (an
 * ExecuteBashRequest); a bad one is answered with a BashError (code the
 * exception class V1 names: JSONDecodeError, ValidationError). At most
 * V1_SUBS subscribers (past that: close 1013). */
#include "ohv1.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define V1_SUBS 50
#define V1_AUTH_US (10u * 1000000u)

enum { ARG_AUTHED = 1, ARG_RESEND = 2 };

struct sub {
	struct sub *next;
	struct conn *c;
	int authed, resend;
	lws_sorted_usec_list_t auth_sul;
};

static struct sub *subs;
static int nsubs;

void v1_socket_publish(const char *json, size_t len)
{
	for (struct sub *s = subs; s; s = s->next)
		if (s->authed)
			conn_door_send(s->c, json, len);
}

static void replay(struct sub *s)
{
	for (struct v1_event *e = v1_events_first(); e && !s->c->closing; e = e->next)
		conn_door_send(s->c, e->json, e->len);
}

static int check(struct lws *wsi, enum auth_level level, int *arg, const char **why)
{
	char key[640], v[32];
	const char *k = lws_get_urlarg_by_name(wsi, "session_api_key=", key, sizeof key);
	if (!k && lws_hdr_custom_length(wsi, "x-session-api-key:", 18) > 0 &&
	    lws_hdr_custom_copy(wsi, key, sizeof key, "x-session-api-key:", 18) >= 0)
		k = key;
	*arg = 0;
	if (!opts.token && level == AUTH_FULL)
		*arg |= ARG_AUTHED;   /* no key configured: as termd's own rule (a view token alone never acts) */
	if (k && opts.token) {
		if (!v1_key_ok(k)) {
			*why = "Authentication failed\n";
			return 403;
		}
		*arg |= ARG_AUTHED;
	}
	const char *m = lws_get_urlarg_by_name(wsi, "resend_mode=", v, sizeof v);
	if (m && !strcmp(m, "all"))
		*arg |= ARG_RESEND;
	return 0;
}

static void auth_timer(lws_sorted_usec_list_t *sul)
{
	struct sub *s = lws_container_of(sul, struct sub, auth_sul);
	if (!s->authed)
		conn_door_close(s->c, 4001, "Authentication failed");
}

static void open_(struct conn *c)
{
	struct sub *s = xcalloc(1, sizeof *s);
	s->c = c;
	s->authed = c->door_arg & ARG_AUTHED;
	s->resend = c->door_arg & ARG_RESEND;
	c->door_state = s;
	s->next = subs;
	subs = s;
	if (++nsubs > V1_SUBS) {
		conn_door_close(c, 1013, "Too many subscribers");
		return;
	}
	if (!s->authed)
		server_timer(&s->auth_sul, auth_timer, V1_AUTH_US);
	else if (s->resend)
		replay(s);
}

/* V1's BashError: code the exception's class name, detail its text */
static void bash_error(struct conn *c, const char *code, const char *detail)
{
	char id[33], ts[40];
	v1_new_id(id);
	v1_timestamp(v1_now_us(), ts, sizeof ts);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "kind", "BashError");
	cJSON_AddStringToObject(o, "id", id);
	cJSON_AddStringToObject(o, "timestamp", ts);
	cJSON_AddStringToObject(o, "code", code);
	cJSON_AddStringToObject(o, "detail", detail);
	char *s = cJSON_PrintUnformatted(o);
	conn_door_send(c, s, strlen(s));
	free(s);
	cJSON_Delete(o);
}

static void message(struct conn *c, const char *msg, size_t n)
{
	struct sub *s = c->door_state;
	cJSON *j = cJSON_ParseWithLength(msg, n);
	const cJSON *type = j ? cJSON_GetObjectItemCaseSensitive(j, "type") : NULL;
	int is_auth = cJSON_IsString(type) && !strcmp(type->valuestring, "auth");
	if (!s->authed) {
		const cJSON *k = is_auth ? cJSON_GetObjectItemCaseSensitive(j, "session_api_key") : NULL;
		if (cJSON_IsString(k) && v1_key_ok(k->valuestring)) {
			s->authed = 1;
			lws_sul_cancel(&s->auth_sul);
			if (s->resend)
				replay(s);
		} else {
			conn_door_close(c, 4001, "Authentication failed");
		}
		cJSON_Delete(j);
		return;
	}
	if (is_auth) {   /* redundant: ignored */
		cJSON_Delete(j);
		return;
	}
	if (!j) {
		bash_error(c, "JSONDecodeError", "Expecting value: line 1 column 1 (char 0)");
		return;
	}
	char id[33];
	const char *field, *why;
	if (v1_bash_start(j, id, &field, &why) < 0) {
		char d[320];
		snprintf(d, sizeof d, "1 validation error for ExecuteBashRequest\n%s\n  %s",
			 field ? field : "", why);
		bash_error(c, "ValidationError", d);
	}
	cJSON_Delete(j);
}

static void closed(struct conn *c)
{
	struct sub *s = c->door_state;
	if (!s)
		return;
	for (struct sub **pp = &subs; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	nsubs--;
	lws_sul_cancel(&s->auth_sul);
	free(s);
	c->door_state = NULL;
}

void v1_socket_register(void)
{
	static const struct ws_door d = {
		"/sockets/bash-events", TD_API_OPENHANDS, check, open_, message, closed,
	};
	http_ws_door(&d);
}

void v1_socket_shutdown(void)
{
	for (struct sub *s = subs; s; s = s->next)
		lws_sul_cancel(&s->auth_sul);
}
