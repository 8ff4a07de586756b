/* action.h — the action layer, the one API every front door goes through:
 * clients (struct conn), the action table and actions_dispatch, the pending
 * registry, the event stream, and the actions (run, keys, screen, expect, files,
 * edit, sessions, plugins). */
#ifndef TERMD_ACTION_H
#define TERMD_ACTION_H

#include "core.h"

/* ---- the /events channel (conn.c) ---- */
/* An /events WebSocket connection. */
struct conn {
	struct conn *next;
	struct wsconn ws;         /* its queue and reassembly */
	int readonly;
	int subscribed;
	int closing;
	/* a connection without a socket (openhands.c): conn_send hands each
	 * message to sink instead of queueing it */
	void (*sink)(struct conn *c, const char *data, size_t len);
	/* a WebSocket a door serves on this protocol (net.h's ws_door), or
	 * NULL for /events: what its upgrade check said, and the door's state */
	const struct ws_door *door;
	int door_arg;
	void *door_state;
	int close_code;           /* a door's close: its code (0: none) */
};


/* ---- pending actions (actions.c) ---- */
/* Pending actions: every action still waiting to answer (run, keys,
 * expect, plugin actions), embedded in its owner's struct. One registry
 * for re-sent ids (the answer goes to the new connection), connections
 * going away (answers are still retained), and sessions ending (the owner
 * frees it: ops->session_gone). */
struct pending;
struct pending_ops {
	const char *kind;
	void (*session_gone)(struct pending *p);   /* must pending_del and free p */
};
struct pending {
	struct pending *next, **pprev;
	const struct pending_ops *ops;
	cJSON *id;                /* owned copy */
	struct conn *conn;        /* weak: NULL once the client left */
	struct session *s;        /* or NULL */
	uint64_t start_us;        /* when the action began (fair.c) */
	/* extras.ignored_args of its answers: set when its action's handler
	 * returned (NULL: none); while the handler runs, act is that action
	 * (the list is not known yet) */
	cJSON *ignored;
	struct act *act;
	int stat;                 /* actstats.c: 1 + its action's index, 0 once counted */
	/* pending_redo: re-armed after an upgrade in place (its action is
	 * ops->kind, run again with these args and the time left) */
	cJSON *redo_args;
	uint64_t redo_deadline_us;
};

/* ---- events (events.c) ---- */
/* how a frame reaches a connection: the transport's, registered from above */
typedef void events_send_fn(struct conn *c, const char *json, size_t len);
void events_init(events_send_fn *send);
void events_shutdown(void);
/* Build and deliver an observation. `cause` may be NULL (→ null). Takes
 * ownership of extras (may be NULL). Delivered to `to` (if not NULL) and to
 * every subscriber. */
void events_emit(struct conn *to, const cJSON *cause, const char *observation,
		 const char *content, cJSON *extras);
/* events_emit to subscribers (and the log and ring) of an observation
 * whose extras a worker printed already (extras_json: a JSON object, and
 * UTF-8 text: the worker made it so, e.g. with utf8_text and buf_put_utf8,
 * so that the loop does not go over megabytes of it again) */
void events_emit_printed(const cJSON *cause, const char *observation, const char *content,
			 const char *extras_json);
void events_error(struct conn *to, const cJSON *cause, td_err code,
		  const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void events_hello(struct conn *c);
/* An event no action caused whose bulk is for the live stream only:
 * subscribers get it whole; the retained ring and the event log keep the
 * same seq with `kept` as its extras and an empty content (a note saying
 * what was not kept). Takes both extras. */
void events_emit_live(const char *observation, const char *content, cJSON *extras,
		      cJSON *kept);
/* someone is subscribed to the event stream (a live-only event's bulk is
 * built only then) */
int events_subscribers(void);
/* In a worker thread running an action (fsact.c): events_emit hands the
 * answer to this instead of sending it (it takes extras); the loop sends
 * it later. Thread-local: the loop's own emits are never captured. */
typedef void events_capture_fn(void *arg, const char *observation, const char *content,
			       cJSON *extras);
extern __thread events_capture_fn *events_capture;
extern __thread void *events_capture_arg;
/* events_emit to subscribers only (no cause): a cmd_event_fn */
void events_broadcast(const char *observation, const char *content, cJSON *extras);
void events_register(void);
/* the hand-over record's part: last seq and the retained ring (handover.c) */
cJSON *events_handover_save(void);
void events_handover_load(const cJSON *j);
/* events kept for subscribe (their bytes, and the newest seq): /metrics */
size_t events_retained(size_t *bytes, uint64_t *seq);
/* An action id already answered and still retained: send that answer
 * again with extras.replayed and return 1. */
int events_replay(struct conn *c, const cJSON *id);
/* An id a full-token client's action was answered under, still retained */
int events_id_known(const cJSON *id);
/* An error for `to` alone: not in the stream (no seq of its own, like
 * hello), not retained, so that no one else sees it or replays it */
void events_private_error(struct conn *to, const cJSON *cause, td_err code, const char *msg);


/* ---- actions (actions.c) ---- */
/* The action being handled. A handler answers (events_emit to a->conn with
 * a->id), or leaves a pending action that will, and returns 0; or it fails
 * with act_error() (the argument helpers do so themselves) and returns -1,
 * and actions_dispatch answers that error: the one way an action fails. */
struct act {
	struct conn *conn;
	const char *action;       /* its name */
	const cJSON *id;          /* NULL when the action had none */
	const cJSON *args;        /* NULL when empty */
	/* the argument names some part of the action read (the arg_*
	 * helpers, arg_json, act_args_all_read): the rest are its answer's
	 * extras.ignored_args. Names are the callers' (string literals). */
	const char **read;
	size_t nread, capread;
	int all_read;
	struct pending *pending;  /* the pending action it left, while dispatching */
	int failed;               /* act_error was called */
	td_err code;
	buf_t msg;
	cJSON *err_extras;        /* more extras for the error, or NULL */
	int stat;                 /* actstats.c: 1 + the action's index (0: none) */
	int pended;               /* it left a pending action: counted when that answers */
};
#define ACT_MSG_MAX 4096      /* bytes of an error message, cut at a character */
typedef int (*action_fn)(struct act *a);
enum {
	ACT_READONLY = 1,     /* a view-token connection may use it */
	ACT_HIDDEN = 2,       /* not in hello's list (a plugin's, until it is ready) */
	/* file work: the handler runs in a worker thread as the request's
	 * user (fsact.c), its answer sent from the loop when it is done */
	ACT_FILEWORK = 4,
	ACT_SERIAL = 8,       /* ... one such handler at a time (write, edit) */
};
struct action_def {
	const char *name;
	action_fn fn;
	int flags;
};
/* Modules register their actions at start-up (a plugin's or an HTTP
 * route's go through the same table); a name registered again replaces
 * the earlier entry. */
void actions_register(const struct action_def *defs, size_t n);
void actions_unregister(const char *name);
const struct action_def *actions_find(const char *name);
void actions_init(void);
void actions_shutdown(void);
/* Hooks the files that own them register, so that actions.c calls no
 * action file by name (the layer's calls stay out of one circle): what
 * runs an ACT_FILEWORK action in a worker (fsact.c's fsact_defer, from
 * fsact_register), and who announces a session arg_session opened
 * (sessionctl.c, from sessionctl_register). */
typedef int actions_defer_fn(struct act *a, const struct action_def *def);
void actions_set_defer(actions_defer_fn *fn);
typedef void actions_session_fn(struct session *s);
void actions_on_session_opened(actions_session_fn *fn);
void actions_dispatch(struct conn *c, const char *json, size_t len);
cJSON *actions_list_json(void);
/* Record why the action fails (answered by actions_dispatch); returns -1.
 * The extras (owned) are added to the error's, beside `code`. */
int act_error(struct act *a, td_err code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int act_error_extras(struct act *a, td_err code, cJSON *extras, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The error observation for a failed action (actions_dispatch's). */
void act_answer_error(struct act *a);
/* argument helpers: 0 ok (absent optional ones leave *out alone), -1
 * wrong type (act_error called) */
int arg_string(struct act *a, const char *key, const char **out, int required);
int arg_number(struct act *a, const char *key, double *out, int *present);
int arg_int(struct act *a, const char *key, long long *out, int *present);
int arg_bool(struct act *a, const char *key, int *out);
int arg_encoding(struct act *a, int *base64);
/* The argument as it came (NULL when absent or null), marked read: for
 * arguments of a shape the helpers do not take (arrays, objects, a number
 * or a boolean). A handler never looks into a->args itself: a name it read
 * there would be named as ignored in its answer. */
const cJSON *arg_json(struct act *a, const char *key);
/* Every argument counts as read (a plugin's action: forwarded whole). */
void act_args_all_read(struct act *a);
/* The names an action reads, declared before any check can fail it: an
 * action that fails early names only arguments it does not know in
 * extras.ignored_args, not the ones it never came to read. */
void act_args_known(struct act *a, const char *const *names);
#define ARGS_KNOWN(a, ...) act_args_known((a), (const char *const[]){ __VA_ARGS__, NULL })
/* The argument names of a->args nothing read, as a JSON array; NULL when
 * there are none. */
cJSON *act_ignored_args(const struct act *a);
/* events_emit's hook: extras of an observation to `to` caused by `cause`
 * gain ignored_args when it is the answer of the action being handled
 * (the same connection and id). Takes and returns extras (may be NULL). */
cJSON *actions_answer_extras(const struct conn *to, const cJSON *cause, cJSON *extras);
/* a session name argument, validated ([A-Za-z0-9_.-]{1,64}: bad_request) */
int arg_session_name(struct act *a, const char *key, int required, const char **name);
/* The session an action names by `key` (default "main"): no_such_session
 * unless SESS_CREATE (opens a shell); a dead shell is started again with
 * SESS_RESPAWN (*restarted = 1; 2 when SESS_CREATE made it), an ended program is no_command unless
 * SESS_ALLOW_DEAD. */
enum { SESS_CREATE = 1, SESS_RESPAWN = 2, SESS_ALLOW_DEAD = 4 };
int arg_session(struct act *a, const char *key, int flags, struct session **out,
		int *restarted);

void pending_add(struct pending *p, const struct pending_ops *ops, struct act *a,
		 struct session *s);
void pending_del(struct pending *p);
/* when the newest action waiting on s began (0: none) */
uint64_t pending_newest(const struct session *s);
void pending_emit(struct pending *p, const char *observation, const char *content,
		  cJSON *extras);
/* extras (taken, may be NULL) with the pending action's ignored_args, for
 * an answer it sends with events_emit itself; returns them */
cJSON *pending_extras(struct pending *p, cJSON *extras);
int pending_rebind(const cJSON *id, struct conn *c);
/* an action with this id is still waiting for its answer */
int pending_has(const cJSON *id);
/* p can be re-armed after an upgrade in place: its action (ops->kind) run
 * again with args and "timeout" set to what is left until deadline_us */
void pending_redo(struct pending *p, const cJSON *args, uint64_t deadline_us);
cJSON *pending_handover_save(void);          /* those in flight, for the record */
void pending_handover_load(const cJSON *arr);   /* run again, answers kept by id */
/* keys in flight answered before an upgrade in place (run.c) */
void run_handover_answer_keys(void);
void pending_conn_gone(struct conn *c);
void pending_session_gone(struct session *s);


/* ---- a door's calls onto actions_dispatch (call.c) ---- */
/* Dispatch the frame {"id": id, "action": action, "args": args} on c as a
 * client would send it; args is taken over (NULL: the frame has none). c
 * is a door's socketless connection (c->sink set): each answer reaches the
 * sink, during this call (an action answered at once) or later (a pending
 * action, file work in a worker), with "cause" the id. */
void action_call(struct conn *c, const char *id, const char *action, cJSON *args);
/* An id no one can guess ahead, for a call whose id the event stream shows
 * to every subscriber: "<prefix>-<n>-" and 24 hex digits of getrandom
 * (none when it fails: the counter n still makes it new), cut to size. */
void action_call_random_id(char *out, size_t size, const char *prefix, unsigned long long n);
/* A door's synchronous caller: a socketless connection whose answer the
 * call itself returns. Set conn.sink (action_caller_sink, or the door's
 * own sink that offers each answer to action_caller_take first) and
 * prefix; the rest starts zeroed. */
struct action_caller {
	struct conn conn;         /* first: the sink finds its caller */
	const char *prefix;       /* of the ids, e.g. "envd" */
	unsigned long long nid;   /* ids made so far */
	char id[64];              /* the call waiting for its answer ("" between calls) */
	cJSON *answer;            /* its answer, once the sink took it */
};
/* The next id: "<prefix>-<n>-<clock in hex>", n counting this caller's
 * ids (the call's own, and those a door makes for calls of its own on
 * the same connection); new each time, never re-sent. */
void action_caller_id(struct action_caller *k, char *out, size_t size);
/* Call action with args (taken over; NULL: none) under a new id and
 * return the answer it gave during the call: the caller's own, to
 * cJSON_Delete. NULL when none came then: an action that answers later
 * (a pending one, file work in a worker). Such a late answer is never
 * taken: it reaches the sink with an id no call waits for any more
 * (action_caller_take says 0; action_caller_sink drops it). */
cJSON *action_call_now(struct action_caller *k, const char *action, cJSON *args);
/* For a sink: ans (parsed, may be NULL) is the answer the call waits for
 * → k keeps it (taken over) and 1; else 0, and ans stays the sink's. */
int action_caller_take(struct action_caller *k, cJSON *ans);
/* A sink that takes the answer the call waits for and drops every other
 * message (late answers, anything the connection is sent). */
void action_caller_sink(struct conn *c, const char *data, size_t len);

/* ---- counts of actions for /metrics (actstats.c) ---- */
/* an action name's index (registered names; others count as "unknown") */
int actstats_index(const char *name);
/* one answer: outcome -1 for ok, else its error code; how long it took */
void actstats_record(int index, int outcome, uint64_t us);
/* the error code an error observation's extras name, or -1 */
int actstats_outcome(const char *observation, const cJSON *extras);
/* termd_actions_total and termd_action_duration_seconds, in Prometheus' text format */
void actstats_write(buf_t *b);
void actstats_shutdown(void);


/* ---- session management actions (sessionctl.c) ---- */
void sessionctl_register(void);
/* The session.open event (to subscribers, and as the answer to c/id). */
void sessionctl_announce(struct conn *c, const cJSON *id, struct session *s);
/* the hand-over record's part (handover.c): each pipe session's held-back
 * beginning of a character per stream and its bytes kept so far; loaded
 * once the sessions are adopted */
cJSON *sessionctl_handover_save(void);
void sessionctl_handover_load(const cJSON *arr);


/* ---- plugins (plugin.c) ---- */
struct plugin;
/* Find plugins, register their actions, start the setups (in the
 * background): -1 + err for a --plugins name that is not there. */
int plugin_init(char *err, size_t errlen);
void plugin_stop_all(void);   /* their processes end with termd */
void plugin_free(struct plugin *pl);
void plugin_shutdown(void);
/* upgrade in place (plugin/keep.c): the programs' pids and pipes kept */
const char *plugin_handover_busy(void);        /* why not now, or NULL */
void plugin_handover_fail_inflight(void);      /* requests in flight answered */
cJSON *plugin_handover_save(void);
void plugin_handover_keep(int keep);            /* close-on-exec off (1) or on */
void plugin_handover_load(const cJSON *rec);    /* after plugin_init */


/* ---- run, keys, screen actions (run.c) ---- */
void run_register(void);


/* ---- files (files.c) ---- */
/* Largest `content` a read/view answer may carry once JSON-escaped (base64
 * or text): the server drops a client with more than 64 MiB pending. */
#define FILES_MAX_REPLY (56u * 1024u * 1024u)
void files_register(void);
/* path made absolute against main's cwd (else --cwd) and normalized; NULL
 * if empty. Free the result. */
char *files_resolve(const char *path);
/* in a worker running a file action: main's cwd when it was asked */
extern __thread const char *files_base;

/* ---- file actions off the loop (fsact.c) ---- */
struct fs_cred;
/* run def's handler for a in a worker (ACT_FILEWORK): 0, the answer
 * comes later; -1 (act_error called: busy) */
int fsact_defer(struct act *a, const struct action_def *def);
/* fsact_defer as actions.c's ACT_FILEWORK hook (before the first dispatch) */
void fsact_register(void);
/* In a file worker already acting as the user (a door's own job): run
 * def's handler with args here, main's cwd as base, its answer kept as
 * data, never serialized: {observation, content, extras}, or NULL */
cJSON *fsact_run_here(const struct action_def *def, const char *base, const cJSON *args);
/* the user the next dispatched file action acts as (NULL: termd's own);
 * a front door sets it around actions_dispatch */
void fsact_as(const struct fs_cred *c);
/* act_error with a message that is not a format (paths, quoted text);
 * extras taken over, may be NULL. Returns -1. */
int files_error(struct act *a, td_err code, const char *msg, cJSON *extras);
/* Append path with invalid UTF-8 replaced, for messages and extras. */
void files_put_path(buf_t *b, const char *path);

/* ---- watch, watch.stop, watch.list (watch.c) ---- */
void watch_register(void);
void watch_shutdown(void);
/* upgrade in place: the watches (not a front door's) with their ids and
 * inotify descriptors, so nothing that changes meanwhile is missed */
cJSON *watch_handover_save(void);
void watch_handover_keep(int keep);
void watch_handover_load(const cJSON *rec);
/* what a watch saw, for a front door that started it: type "create",
 * "write", "remove", "rename" or "chmod" with the name relative to the
 * watched folder; type NULL when the watch ended (its folder was removed:
 * the watch is gone). A sink must not stop its watch from inside. */
typedef void watch_sink_fn(void *user, const char *id, const char *type, const char *name,
			   int is_dir);
/* follow watch id through fn (one sink per watch): 0, or -1 if no such watch */
int watch_sink(const char *id, watch_sink_fn *fn, void *user);
/* read what the watch's inotify has now (events and sink before it returns) */
void watch_poll(const char *id);

/* ---- file.stat/list/mkdir/move/remove (fsops.c) ---- */
void fsops_register(void);
/* path described as the file actions describe an entry (lstat: a symlink
 * is itself, with symlink_target and, when it leads somewhere, target
 * {type, mode, metadata}), or NULL with errno set */
cJSON *fsops_entry(const char *path);
/* the user.e2b.<key> extended attributes as {key: value} (UTF-8 ones), of
 * path (follow: through symlinks) or, path NULL, of fd; NULL: none */
cJSON *fsops_metadata(const char *path, int follow, int fd);
/* "ENOENT" for ENOENT, ...; "EIO" for one it does not name */
const char *fsops_errno_name(int e);
/* mkdir -p, each folder it made added to created (when not NULL): 0, or
 * -1 and errno */
int fsops_mkdirs(const char *path, mode_t mode, cJSON *created);


/* ---- edit (edit.c) ---- */
void edit_register(void);


/* ---- expect (expect.c) ---- */
void expect_register(void);

/* ---- ports.list, port.wait, port.open/close (ports.c) ---- */
void ports_register(void);
void ports_shutdown(void);
/* the address a session's program listens on port with, NULL if none */
const char *ports_find(int port);

#endif
