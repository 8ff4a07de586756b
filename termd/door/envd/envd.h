/* envd.h — what the envd door's files share (routes.c the routes,
 * envd.c the Connect wire, process.c process.Process, fs.c and listdir.c
 * filesystem.Filesystem and /files, watch.c WatchDir): one Connect call,
 * the error codes, the stream writer. */
#ifndef TERMD_ENVD_H
#define TERMD_ENVD_H

#include "door.h"
#include "fswork.h"

/* Connect error codes (the name is the wire's; the HTTP status is envd_code_status's) */
enum envd_code {
	EC_CANCELED, EC_UNKNOWN, EC_INVALID_ARGUMENT, EC_DEADLINE_EXCEEDED, EC_NOT_FOUND,
	EC_ALREADY_EXISTS, EC_PERMISSION_DENIED, EC_RESOURCE_EXHAUSTED, EC_FAILED_PRECONDITION,
	EC_ABORTED, EC_OUT_OF_RANGE, EC_UNIMPLEMENTED, EC_INTERNAL, EC_UNAVAILABLE,
	EC_DATA_LOSS, EC_UNAUTHENTICATED,
};

/* An open server stream (Start, Connect): its transaction and keepalives. */
struct envd_stream {
	struct envd_stream *next;    /* on its process's list */
	struct http_txn *t;          /* NULL once the client left */
	struct eproc *p;
	unsigned keepalive_s;
	lws_sorted_usec_list_t ka;
	lws_sorted_usec_list_t deadline;   /* Connect-Timeout-Ms */
	int ended;
	int flat_keepalive;          /* {"keepalive":{}} (WatchDir), else {"event":{...}} */
	/* it ends without its owner (client left, deadline): the owner lets go
	 * of it (envd.c frees it) */
	void (*gone)(struct envd_stream *st);
	void *owner;
	/* a stream that holds its producer (envd_stream_hold) */
	int holds;
	int held;                    /* behind: the producer is to stop */
	int ticking, finishing;
	buf_t over;                  /* whole envelopes past --stream-max, waiting */
	size_t written;              /* bytes given to the HTTP stream */
	size_t sent_seen;            /* ... of them gone to the socket at the last look */
	uint64_t progress_us;        /* when the client last took some (or had all) */
	lws_sorted_usec_list_t hold_sul;
	int fin_code;                /* a finish waiting for over to go out */
	void (*held_changed)(struct envd_stream *st);
};

/* One Connect call: its transaction, the request message, whether the
 * answer is a stream. */
struct envd_call {
	struct http_txn *t;
	cJSON *req;                  /* the request message (owned) */
	int stream;
	unsigned keepalive_s;        /* Keepalive-Ping-Interval (0: none) */
	uint64_t timeout_ms;         /* Connect-Timeout-Ms (0: none) */
};

/* ---- users (envd.c) ---- */
/* The user a request acts as: Authorization: Basic "<user>:" (Connect) or
 * ?username= (REST), else --user, else the user termd runs as. Set for
 * the request being handled (everything is answered or started before
 * the loop runs again). */
struct envd_user {
	char name[64];
	uid_t uid;
	gid_t gid;
	char home[1024];
	int self;                 /* the user termd runs as: no switch */
	struct fs_cred cred;      /* the ids file work runs with (fswork.h) */
};
extern struct envd_user envd_cur;
/* 0, or an error code and why */
int envd_user_begin(struct http_txn *t, int rest, char *why, size_t n);

/* ---- the wire (envd.c) ---- */
const char *envd_code_name(enum envd_code c);
int envd_code_status(enum envd_code c);
/* A unary answer: the message (taken over). */
void envd_reply(struct envd_call *c, cJSON *msg);
/* o printed (unformatted) as UTF-8 JSON text: bytes that are not UTF-8
 * in its strings each U+FFFD; malloc'd. Every JSON the door sends. */
char *envd_json_print(const cJSON *o);
/* msg (taken over) as t's JSON answer with status */
void envd_answer_json(struct http_txn *t, int status, cJSON *msg);
/* {"code", "message"}: a Connect error's JSON */
cJSON *envd_error_json(enum envd_code code, const char *msg);
/* the socketless connection for the services' actions made ready; what
 * still waits for an answer dropped (the door's register and shutdown) */
void envd_calls_start(void);
void envd_calls_end(void);
/* An error: unary → its HTTP status and JSON; stream → 200 and the end
 * message carrying it. Returns -1. */
int envd_fail(struct envd_call *c, enum envd_code code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A stream for c: headers sent, keepalives running. */
struct envd_stream *envd_stream_open(struct envd_call *c);
/* A process's own stream (Start/Connect): it is never cut at --stream-max;
 * what would pass it waits in st->over and st->held says the producer is
 * to stop reading its program (held_changed is called when that changes:
 * held once something waits, let go once all went out to the HTTP stream
 * and it holds at most half of --stream-max); a client that takes nothing
 * for --stream-stall seconds while held is cut (resource_exhausted, the
 * owner's gone called first). A normal end (code 0) comes after what
 * waits. */
void envd_stream_hold(struct envd_stream *st, void (*held_changed)(struct envd_stream *st));
/* One message (taken over) in a data envelope. Returns the bytes the
 * socket has not taken yet. */
size_t envd_stream_send(struct envd_stream *st, cJSON *msg);
/* A message already written as JSON in b after 5 bytes left for the
 * envelope's head (envd_stream_send without cJSON: the same answer).
 * The head is written into b; b may go to several streams. */
size_t envd_stream_send_json(struct envd_stream *st, buf_t *b);
/* The end-of-stream message ({} or the error), then the end; st is freed
 * once its transaction is gone (envd_stream_free). */
void envd_stream_finish(struct envd_stream *st, enum envd_code code, const char *msg);
void envd_stream_free(struct envd_stream *st);
/* string field by either spelling (camelCase, snake_case), or NULL */
const char *envd_str(const cJSON *o, const char *camel, const char *snake);
const cJSON *envd_field(const cJSON *o, const char *camel, const char *snake);
/* a number field (JSON number or decimal string): 0 ok, -1 absent or bad */
int envd_num(const cJSON *o, const char *camel, const char *snake, double *out);
/* bytes field (base64): malloc'd into *out, -1 when not base64 */
int envd_bytes(const cJSON *o, const char *key, buf_t *out);
/* add bytes as base64 */
void envd_add_bytes(cJSON *o, const char *key, const void *p, size_t n);
/* dispatch one termd action on the door's socketless connection; the
 * answer (parsed, owned by the caller) or NULL when none came at once */
cJSON *envd_action(const char *action, cJSON *args);
/* dispatch a file action (answered later, from a worker) as the request's
 * user: then(c, answer) once it comes, with a copy of c (never called if
 * the client left first) */
typedef void envd_then_fn(struct envd_call *c, const cJSON *ans);
void envd_action_then(struct envd_call *c, const char *action, cJSON *args, envd_then_fn *then);

/* ---- process.Process (process.c) ---- */
void envd_process_register(void);
void envd_process_shutdown(void);
/* method by name: 0 handled, -1 unknown method */
int envd_process_call(struct envd_call *c, const char *method);

/* ---- filesystem.Filesystem and /files (fs.c) ---- */
int envd_fs_call(struct envd_call *c, const char *method);
void envd_files_get(struct http_txn *t);
void envd_files_post(struct http_txn *t);
/* EntryInfo of an absolute path (lstat), or NULL and errno */
cJSON *envd_entry_info(const char *path);
/* EntryInfo (envd's fields) from a file action's entry, or NULL */
cJSON *envd_entry_of(const cJSON *e);
/* a file action's answer is its observation name: 1; else the call is
 * answered with the error it names: 0 */
int envd_action_ok(struct envd_call *c, const cJSON *ans, const char *name);
/* the request's path field key, resolved, as args' field as; -1 once the
 * call was answered (key missing) */
int envd_path_into(struct envd_call *c, const char *key, cJSON *args, const char *as);

/* ---- ListDir (listdir.c) ---- */
int envd_list_dir(struct envd_call *c);

/* ---- an upload's metadata (meta.c) ---- */
/* X-Termd-Metadata's value (k=v&k=v, form-urlencoded; keys lowercased,
 * the last of a key wins, an empty key skipped) checked as envd checks
 * X-Metadata-*: {key: value}, or NULL with "invalid metadata: ..." in err */
cJSON *envd_meta_parse(const char *hdr, size_t len, buf_t *err);
/* the open file's user.e2b.* attributes made exactly meta (NULL or {}:
 * none left): 0, or the errno (a file system without them is 0) */
int envd_meta_write(int fd, const cJSON *meta);

/* ---- WatchDir (watch.c) ---- */
int envd_watch_call(struct envd_call *c);
/* CreateWatcher, GetWatcherEvents, RemoveWatcher */
int envd_watcher_call(struct envd_call *c, const char *method);
void envd_watch_shutdown(void);
/* path made absolute against the user's home (HOME, else --cwd); free it */
char *envd_path(const char *path);

#endif
