/* ohv1.h — what the OpenHands V1 door's files share (PROTOCOL.md §12,
 * reference/openhands-v1.md): the answers in V1's shapes, the key check,
 * actions through the action layer, the bash events and commands
 * (bash.c, events.c), the /sockets/bash-events subscribers (socket.c),
 * the file routes (files.c) and the git routes (git.c). */
#ifndef TERMD_OHV1_H
#define TERMD_OHV1_H

#include "door.h"
#include "fsio.h"
#include "fswork.h"

#include <stdint.h>

/* ---- answer.c: answers, key, actions ---- */
/* o as the answer (o freed) */
void v1_json(struct http_txn *t, int status, cJSON *o);
/* {"detail": detail} */
void v1_detail(struct http_txn *t, int status, const char *detail);
/* 422 {"detail":[{type, loc:["query"|"body", name], msg, input[, ctx]}]} as
 * FastAPI gives a failed validation (ctx_key/ctx_val: one ctx member, or NULL) */
void v1_422(struct http_txn *t, const char *where, const char *name, const char *type,
	    const char *msg, const char *input, const char *ctx_key, double ctx_val);
/* Is key termd's full token (none set: no key is)? */
int v1_key_ok(const char *key);
/* route admit: X-Session-API-Key, else 401 {"detail":"Unauthorized"} */
int v1_admit(struct http_txn *t);
/* an action through the action layer, answered at once (NULL: none) */
cJSON *v1_action(const char *action, cJSON *args);
/* idle_time's start: any V1 work now; when the last was (mono_us) */
void v1_touch(void);
uint64_t v1_last_work(void);
void v1_answer_init(void);
/* a query argument, or NULL ("name=") */
const char *v1_arg(struct http_txn *t, const char *name, char *out, size_t n);

/* ---- events.c: the kept events, search and the routes on them ---- */
enum v1_kind { V1_COMMAND, V1_OUTPUT };
struct v1_event {
	struct v1_event *prev, *next;   /* oldest first (= timestamp order) */
	char id[33];
	char command_id[33];      /* its command's (a BashCommand's own id) */
	enum v1_kind kind;
	int64_t ts_us;            /* UTC microseconds, strictly increasing */
	int order;                /* BashOutput: 0, 1, ... per command */
	char *json;               /* the event as V1 dumps it */
	size_t len;
};
/* a fresh uuid4 hex */
void v1_new_id(char out[33]);
/* V1's timestamp text of ts_us ("2026-11-28T04:30:00.123456Z") */
void v1_timestamp(int64_t ts_us, char *out, size_t n);
/* the next timestamp (now, strictly after the last one given) */
int64_t v1_now_us(void);
/* keep ev (its json set; freed when dropped), publish it to the sockets */
void v1_event_add(struct v1_event *ev);
/* every kept event, oldest first; one by id; a command's last BashOutput */
struct v1_event *v1_events_first(void);
struct v1_event *v1_event_find(const char *id);
struct v1_event *v1_event_last_output(const char *command_id);
void v1_events_routes(void);   /* GET /api/bash/bash_events/…, DELETE */
/* upgrade in place: the kept events as they are */
cJSON *v1_events_save(void);
void v1_events_load(const cJSON *a);
void v1_events_shutdown(void);

/* ---- bash.c: commands ---- */
/* Start command (an ExecuteBashRequest's fields): its BashCommand's id
 * into id, 0; or -1 with a 422's field and message. */
int v1_bash_start(const cJSON *req, char id[33], const char **field, const char **msg);
void v1_bash_routes(void);
/* upgrade in place: the running commands (save; load before the sessions
 * are adopted, loaded after) */
cJSON *v1_bash_save(void);
void v1_bash_load(const cJSON *a);
void v1_bash_loaded(void);
void v1_bash_shutdown(void);

/* ---- socket.c: /sockets/bash-events ---- */
void v1_socket_publish(const char *json, size_t len);
void v1_socket_register(void);
void v1_socket_shutdown(void);

/* ---- files.c, git.c ---- */
void v1_file_upload(struct http_txn *t);
void v1_file_download(struct http_txn *t);
void v1_git_changes(struct http_txn *t);
void v1_git_diff(struct http_txn *t);

#endif
