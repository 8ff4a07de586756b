/* termd.h — the daemon's internal header: options, the structs shared
 * between modules (server, connections, sessions, commands, waiters), and
 * prototypes grouped per file. Structs first, then functions. */
#ifndef TERMD_H
#define TERMD_H

#include <stdint.h>
#include <sys/types.h>
#include <time.h>
#include <libwebsockets.h>
#include <cJSON.h>

#include "proto.h"
#include "util.h"
#include "render.h"
#include "output.h"
#include "pty.h"
#include "vtfilter.h"
#include "wsconn.h"

struct session;
struct conn;

/* What the shell-integration scanner (shellint.c) finds in a session's
 * output: text, termd's marks (C start, D done, P continuation), readline
 * ready (bracketed paste on), a window title. */
enum si_event { SI_TEXT, SI_MARK_START, SI_MARK_DONE, SI_MARK_CONT, SI_READY, SI_TITLE };
struct screen;
struct cmd;
struct expect;
struct viewer;
struct recording;

/* ---- options (main.c) ---- */
struct termd_opts {
	char *listen_host;      /* NULL when unix */
	int listen_port;
	char *listen_unix;      /* path, or NULL */
	char *token;            /* full access token or NULL */
	char *view_token;       /* read-only token or NULL */
	char *shell;            /* shell for sessions */
	char *cwd;              /* start directory */
	char *event_log;
	char *tls_cert, *tls_key; /* both or neither: serve wss:// and https:// */
	int verbose;
	/* limits (--max-frame, --retain, ...; defaults in proto.h) */
	size_t max_frame;         /* largest accepted /events frame */
	size_t retain;            /* events kept for subscribe */
	size_t max_sessions;      /* sessions open at once, main included */
	size_t max_viewers;       /* /tty viewers per session */
	size_t viewer_rate;       /* bytes/s to a session's viewers together (tty.c) */
	size_t max_pending;       /* unsent bytes before an /events client is dropped */
	size_t scrollback;        /* lines kept above each session's screen */
	size_t output_mem;        /* a command's output kept in memory, then file only */
	char *plugins;            /* --plugins a,b,… or all (NULL: none) */
	char *plugin_dir;         /* --plugin-dir (NULL: next to the binary) */
	char *state_dir;          /* --state-dir: setup markers (once per image) */
	int insecure_no_token;    /* --insecure-no-token: serve a non-loopback address without one */
	char *record_dir;         /* --record DIR: an asciicast v2 file per session (record.c) */
	int record_input;         /* --record-input: "i" events too */
};

extern struct termd_opts opts;

/* ---- the server (server.c) ---- */
struct server {
	struct lws_context *ctx;
	struct lws_vhost *vhost;
	char *rundir;             /* private runtime directory */
	uint64_t start_mono;
	int stopping;
	int unix_bound;           /* the --listen unix: socket is ours */
	struct conn *conns;       /* all /events connections */
	struct session *sessions; /* linked list */
	struct session *closing;  /* closed by session.close, ending */
	int nsessions;
};

extern struct server srv;

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
};

/* ---- the upgrade checks (http.c) ---- */
/* What a request's token admits. */
enum auth_level { AUTH_NONE, AUTH_VIEW, AUTH_FULL };
enum channel { CHANNEL_EVENTS, CHANNEL_TTY };
/* A WebSocket upgrade request that passed every check. */
struct upgrade {
	enum channel channel;
	enum auth_level auth;
	int rw;                   /* /tty: mode=rw */
	char session[TD_SESSION_NAME_MAX + 1]; /* /tty: the session */
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
};
/* ---- commands and waiters (run.c) ---- */
enum waiter_kind { WAIT_RUN, WAIT_KEYS };

/* An action that is waiting for something in a session. A session's
 * waiters are a list in arrival order: one `run` of a command (or a poll,
 * `run ""`) at a time, and any number of `run is_input` and `keys`, which
 * never wait behind an answer (PROTOCOL.md §4 run item 11). What they type
 * is typed in that order. */
struct waiter {
	struct pending p;         /* first: the registry's handle (id, conn) */
	struct waiter *next;      /* in the session's list */
	enum waiter_kind kind;
	struct session *s;
	int is_input;             /* run: is_input (else a command or a poll) */
	uint64_t start_us;
	uint64_t hard_us;         /* absolute deadline or 0 */
	uint64_t idle_us;         /* idle period or 0 */
	uint64_t settle_us;       /* keys: quiet period */
	size_t max_output;
	int restarted;
	int typed;                /* run: its text has been typed (or had none) */
	uint64_t input_seen_us;   /* run: first time it looked blocked on input */
	struct cmd *pending_cmd;  /* run: the command to type when the shell is ready */
	buf_t pending_input;      /* run is_input: bytes to type after earlier waiters' */
	cJSON *pending_keys;      /* keys: typed when the shell is ready */
	lws_sorted_usec_list_t sul;
};

/* One command line in flight in a session (typed by the agent or a viewer). */
struct cmd {
	char *text;
	char sname[TD_SESSION_NAME_MAX + 1]; /* its session, for messages */
	int by_viewer;
	int typed;                /* an agent's text, typed into the shell */
	int awaiting_shell;       /* typed, and the shell has not shown it read it
				   * yet (no C, D or P mark since): still typing */
	int started;              /* shell said it began (C mark) */
	int finished;
	int exit_code;
	uint64_t start_us, end_us;
	int rec_start, rec_end;   /* record.c wrote its start / end marker */
	render_t *render;         /* NULL once finished */
	struct output out;        /* its rendered text (output.c) */
};

/* ---- sessions (session.c) ---- */
enum shell_state { SH_STARTING, SH_IDLE, SH_RUNNING, SH_DEAD };
/* bash (readline, PS0, PROMPT_COMMAND) or a POSIX sh (termd.sh via $ENV) */
enum shell_kind { SHELL_BASH, SHELL_SH };

struct session {
	struct session *next;
	char name[TD_SESSION_NAME_MAX + 1];
	char *command;            /* session program (NULL = interactive shell) */
	int is_shell;             /* has termd's shell integration */
	enum shell_kind shell_kind;
	struct pty pty;           /* its process: fd, pid, alive, exit code (pty.c) */
	const cJSON *spawn_env;   /* session.open's env, while spawning only */
	int rows, cols;
	struct screen *screen;
	struct shellint *si;
	enum shell_state state;
	int ready;                /* line editor is reading (prompt shown) */
	int cont;                 /* the shell reads the rest of a command (PS2) */
	char *cwd;
	struct cmd *cmd;          /* current or last undelivered command */
	struct waiter *waiters;   /* run and keys actions waiting on it, in order */
	struct expect *expect;    /* the expect action waiting on it */
	struct viewer *viewers;   /* /tty connections */
	buf_t typed;              /* keys/viewer bytes since the last prompt */
	int typed_by_agent;       /* ... some of them by `keys` */
	uint64_t last_output_us;
	lws_sorted_usec_list_t ready_sul;
	lws_sorted_usec_list_t close_sul;
	int closing;              /* session.close: freed once its process ends */
	int close_killed;         /* ... and the KILL after the grace time was sent */
	int nviewers;
	struct {                  /* fair.c's */
		int bulk;         /* its last read used the whole budget */
		int typed;        /* typed into, nothing printed since */
		uint64_t typed_us, newest_pending, held_since;
	} fair;
	struct recording *rec;    /* --record: its recording (record.c), or NULL */
};

/* ---- fairness between sessions (fair.c) ---- */
/* Decide again which bulk sessions are held (also on its own timer). */
void fair_update(void);
/* s's pty was read: full = the read used the whole budget */
void fair_read(struct session *s, int full);
/* s was typed into (a viewer, keys, run) */
void fair_typed(struct session *s);
/* an action began or ended waiting on s (s may be NULL) */
void fair_pending_changed(struct session *s, int ended);
void fair_shutdown(void);
/* the action layer's "when did the newest action waiting on s begin" (µs, 0: none) */
void fair_set_probe(uint64_t (*probe)(const struct session *s));

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
void events_error(struct conn *to, const cJSON *cause, td_err code,
		  const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void events_hello(struct conn *c);
/* events_emit to subscribers only (no cause): a cmd_event_fn */
void events_broadcast(const char *observation, const char *content, cJSON *extras);
void events_register(void);
/* An action id already answered and still retained: send that answer
 * again with extras.replayed and return 1. */
int events_replay(struct conn *c, const cJSON *id);

/* ---- server (server.c) ---- */
/* the lws context, the listener and the loop, serving the two channels
 * (the transport's entries, given from above) */
int server_init(const struct lws_protocols *events_channel, const struct lws_protocols *tty_channel);
void server_run(void);
/* the loop goes: every connection and adopted fd is closed */
void server_close_loop(void);
/* then the listener's socket and the runtime folder */
void server_shutdown(void);
/* An adopted fd's events: arg is the one given to server_adopt_fd, or NULL
 * once the owner cleared the wsi's opaque user data. Nonzero closes it. */
typedef int (*server_fd_cb)(struct lws *wsi, enum lws_callback_reasons reason, void *arg);
/* Watch fd (a pty master, the signalfd) in the loop; NULL on failure. */
struct lws *server_adopt_fd(int fd, server_fd_cb cb, void *arg);
/* Schedule a timer callback; call with us=0 to cancel. */
void server_timer(lws_sorted_usec_list_t *sul, sul_cb_t cb, uint64_t delay_us);

/* ---- the /events channel (conn.c) ---- */
extern const struct lws_protocols conn_protocol;
/* Queue one observation for c (dropped if c is closing). */
void conn_send(struct conn *c, const char *data, size_t len);

/* ---- the HTTP side: health, tokens, upgrade checks, routes (http.c) ---- */
/* One plain HTTP request to a registered route: its method, path, body
 * and, once the route has it, its answer (written when the socket can
 * take it, in pieces). Freed by http.c once answered or once the client
 * left (then `gone`, if set, is called first). */
struct http_route;
struct http_txn {
	struct lws *wsi;
	const struct http_route *route;
	int post;                 /* POST (else GET) */
	char path[256];
	buf_t body;               /* the whole body (at most --max-frame bytes) */
	size_t announced;         /* its Content-Length */
	void *user;               /* the route's */
	void (*gone)(struct http_txn *t);
	/* a streamed answer: everything written so far has gone to the
	 * socket (a producer that holds back writes more here) */
	void (*drained)(struct http_txn *t);
	int answered, status, hdr_sent, close_after;
	enum auth_level auth;     /* what the request's token admits */
	int streaming, ended;     /* an answer of unknown length (http_stream_*) */
	char ctype[64];
	char *disposition;        /* Content-Disposition or NULL */
	buf_t hdrs;               /* more headers: "name:\0value\0" pairs */
	buf_t out;
	size_t off;
};
struct http_route {
	const char *method;       /* "GET" or "POST" */
	const char *path;         /* exact, or a prefix when .prefix */
	/* before the body is read: 0, or it answered (a refusal) */
	int (*admit)(struct http_txn *t);
	/* the request is in: answer now or later (http_answer) */
	void (*fn)(struct http_txn *t);
	int prefix;               /* path is a prefix ("/s/" serves /s/<any>) */
};
/* Routes other modules serve on the listener (consulted before 404). */
void http_routes_register(const struct http_route *r, size_t n);
/* The answer (body copied); written when the socket is writable. */
void http_answer(struct http_txn *t, int status, const char *ctype, const void *body,
		 size_t len);
/* ... a text/plain one */
void http_answer_text(struct http_txn *t, int status, const char *msg);
/* One more header on the answer (set before http_answer or
 * http_stream_start): name without its colon, value as is. */
void http_set_header(struct http_txn *t, const char *name, const char *value);
/* An answer of unknown length: headers now (no Content-Length, the
 * connection closes at the end), then data as it comes. write returns the
 * bytes not yet taken by the socket, so a producer can hold back; end
 * finishes the answer once those are written. t->gone is called when the
 * client leaves before end. */
void http_stream_start(struct http_txn *t, int status, const char *ctype);
size_t http_stream_write(struct http_txn *t, const void *p, size_t n);
void http_stream_end(struct http_txn *t);
/* A request header by lws custom name ("x-session-api-key:"): its length,
 * or -1 when absent. */
int http_header(struct http_txn *t, const char *name, char *out, size_t n);
/* A query argument ("destination="), URL-decoded, or NULL. */
const char *http_arg(struct http_txn *t, const char *name, char *out, size_t n);
/* Does token equal termd's full token (constant time)? No token set: 1. */
int http_token_ok(const char *token);
/* LWS_CALLBACK_HTTP: /healthz, a route, else 401 or 404. */
int http_request(struct lws *wsi, const char *uri);
/* LWS_CALLBACK_HTTP_BODY, _BODY_COMPLETION, _WRITEABLE, CLOSED_HTTP */
int http_body(struct lws *wsi, const void *in, size_t len);
int http_body_done(struct lws *wsi);
int http_writeable(struct lws *wsi);
void http_closed(struct lws *wsi);
/* LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: 0 to upgrade, or -1 once a refusal
 * (401, 404, 503, 403, 400) has been answered. */
int http_confirm_upgrade(struct lws *wsi);
/* LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION for channel ch: 0 and *u filled
 * if the request passes every check and is for ch, else -1. */
int http_upgrade(struct lws *wsi, enum channel ch, struct upgrade *u);

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
	int failed;               /* act_error was called */
	td_err code;
	buf_t msg;
	cJSON *err_extras;        /* more extras for the error, or NULL */
};
#define ACT_MSG_MAX 4096      /* bytes of an error message, cut at a character */
typedef int (*action_fn)(struct act *a);
enum {
	ACT_READONLY = 1,     /* a view-token connection may use it */
	ACT_HIDDEN = 2,       /* not in hello's list (a plugin's, until it is ready) */
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
void actions_dispatch(struct conn *c, const char *json, size_t len);
cJSON *actions_list_json(void);
/* Record why the action fails (answered by actions_dispatch); returns -1.
 * The extras (owned) are added to the error's, beside `code`. */
int act_error(struct act *a, td_err code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int act_error_extras(struct act *a, td_err code, cJSON *extras, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* argument helpers: 0 ok (absent optional ones leave *out alone), -1
 * wrong type (act_error called) */
int arg_string(struct act *a, const char *key, const char **out, int required);
int arg_number(struct act *a, const char *key, double *out, int *present);
int arg_int(struct act *a, const char *key, long long *out, int *present);
int arg_bool(struct act *a, const char *key, int *out);
int arg_encoding(struct act *a, int *base64);
/* a session name argument, validated ([A-Za-z0-9_.-]{1,64}: bad_request) */
int arg_session_name(struct act *a, const char *key, int required, const char **name);
/* The session an action names by `key` (default "main"): no_such_session
 * unless SESS_CREATE (opens a shell); a dead shell is started again with
 * SESS_RESPAWN (*restarted = 1), an ended program is no_command unless
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
int pending_rebind(const cJSON *id, struct conn *c);
void pending_conn_gone(struct conn *c);
void pending_session_gone(struct session *s);

/* ---- sessions (session.c) ---- */
/* What a session tells the modules that follow it, in the order they
 * listened (main.c): cmd before run. Every hook may be NULL. */
struct session_listener {
	void (*started)(struct session *s); /* its process was spawned (open, respawn) */
	void (*input)(struct session *s, const char *data, size_t n);  /* written to the pty */
	void (*output)(struct session *s, const char *data, size_t n); /* the pty's bytes */
	void (*text)(struct session *s, const char *data, size_t n);   /* output, marks removed */
	void (*title)(struct session *s, const char *t, size_t n);
	void (*resize)(struct session *s);
	void (*mark)(struct session *s, enum si_event ev, const char *data, size_t n, int code);
	void (*exit)(struct session *s);   /* its process ended (before session.exit) */
	void (*gone)(struct session *s);   /* restarted or freed: drop what refers to it */
};
void session_listen(const struct session_listener *l);
/* Fan a shell-integration mark out to the listeners (the scanner's, or a
 * synthetic SI_READY from cmd.c's fallback timer). */
void session_mark(struct session *s, enum si_event ev, const char *data, size_t n, int code);
/* The session is restarted or freed: every listener's gone. */
void session_gone(struct session *s);
struct session *session_find(const char *name);
/* Start a session; command NULL = interactive shell. NULL + code and msg
 * on error (too_large at --max-sessions, else internal). */
struct session *session_open(const char *name, const char *command, const char *cwd,
			     const cJSON *env, int cols, int rows, td_err *code, char *err,
			     size_t errlen);
int session_respawn(struct session *s, char *err, size_t errlen);
void session_write(struct session *s, const void *data, size_t len);
/* the shell sessions run: --shell, else bash, else sh */
const char *session_shell_path(void);
void session_resize(struct session *s, int cols, int rows);
pid_t session_fg_pid(struct session *s);
void session_stop_all(void);
/* Free a session that is off the lists (closing, process gone). */
void session_destroy(struct session *s);
void session_free_all(void);
cJSON *session_names_json(void);

/* ---- session management actions (sessionctl.c) ---- */
void sessionctl_register(void);
/* The session.open event (to subscribers, and as the answer to c/id). */
void sessionctl_announce(struct conn *c, const cJSON *id, struct session *s);

/* ---- recordings (record.c) ---- */
/* --record DIR: 0, or -1 and why (missing, not a folder, not writable). */
int record_check_dir(const char *dir, char *err, size_t errlen);
/* its session listener and the /record/ routes (after cmd_init) */
void record_register(void);

/* ---- plugins (plugin.c) ---- */
struct plugin;
/* Find plugins, register their actions, start the setups (in the
 * background): -1 + err for a --plugins name that is not there. */
int plugin_init(char *err, size_t errlen);
void plugin_stop_all(void);   /* their processes end with termd */
void plugin_free(struct plugin *pl);
void plugin_shutdown(void);

/* ---- child processes (child.c) ---- */
typedef void (*child_cb)(void *arg, pid_t pid, int status);
/* cb gets pid's wait status once it is reaped (then the watch is gone) */
void child_watch(pid_t pid, child_cb cb, void *arg);
void child_unwatch(pid_t pid);
/* SIGCHLD: reap every child, hand each status to its watcher */
void child_reap_all(void);
void child_forget_all(void);

/* ---- shell integration (shellint.c) ---- */
/* commands longer than this (bytes or lines) are sourced from a file */
#define SHELLINT_PASTE_MAX   4096
#define SHELLINT_PASTE_LINES 24
typedef void (*si_cb)(void *user, enum si_event ev, const char *data, size_t len, int code);
struct shellint *shellint_new(si_cb cb, void *user);
void shellint_free(struct shellint *si);
const char *shellint_nonce(struct shellint *si);
/* Replace the random nonce (the fuzz target gives two scanners one nonce). */
void shellint_set_nonce(struct shellint *si, const char *nonce);
void shellint_feed(struct shellint *si, const char *data, size_t n);
/* Write the rc files (termd.bash, termd.sh) into dir. 0 or -1. */
int shellint_write_rc(const char *dir);
/* The bytes to type so the shell runs `text` as one unit. */
void shellint_type_command(struct session *s, const char *text, buf_t *out);

/* ---- screen (screen.c) ---- */
struct screen *screen_new(int rows, int cols);
void screen_free(struct screen *sc);
void screen_feed(struct screen *sc, const char *data, size_t n);
void screen_resize(struct screen *sc, int rows, int cols);
void screen_text(struct screen *sc, buf_t *out);
/* Scrollback: keep up to `lines` lines scrolled off the primary screen
 * (0 = none, the default); the last max_lines of them, one per line. */
void screen_set_scrollback(struct screen *sc, size_t lines);
size_t screen_scrollback_lines(struct screen *sc);
void screen_scrollback_text(struct screen *sc, size_t max_lines, buf_t *out);
int screen_alt(struct screen *sc);
void screen_cursor(struct screen *sc, int *row, int *col, int *visible);
/* 1 if the cursor sits after text on its row, as a prompt leaves it */
int screen_cursor_after_text(struct screen *sc);
const char *screen_title(struct screen *sc);
void screen_set_title(struct screen *sc, const char *t, size_t n);
/* Bytes reproducing the visible screen on a blank terminal (tty 'S'). */
void screen_snapshot(struct screen *sc, buf_t *out);
/* Type a key through libvterm's keyboard layer (honours cursor-key mode). */
void screen_key(struct screen *sc, int vterm_key, int mod);
void screen_unichar(struct screen *sc, uint32_t c, int mod);
/* Terminal answers (DSR, DA) go back to the program through this. */
void screen_set_output(struct screen *sc, void (*cb)(const char *, size_t, void *), void *user);

/* ---- command life (cmd.c) ---- */
/* an event no action caused (command.start/end, an output file error); takes extras */
typedef void cmd_event_fn(const char *observation, const char *content, cJSON *extras);
void cmd_init(cmd_event_fn *emit);      /* its session listener: before run.c's */
struct cmd *cmd_new(struct session *s, const char *text, int by_viewer);
void cmd_free(struct cmd *cmd);
/* make cmd the session's command (the previous one is freed) */
void cmd_set(struct session *s, struct cmd *cmd);
/* what the command printed since the last answer (output_collect) */
void cmd_collect(struct cmd *cmd, size_t max_output, buf_t *out, int *truncated);
/* A person (viewer) or `keys` (by_agent) typed these bytes at the prompt:
 * they name the command the shell starts next. */
void cmd_note_typed(struct session *s, const char *data, size_t n, int by_agent);
/* A session.open program began: it is the session's command. */
void cmd_program_started(struct session *s);

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
/* act_error with a message that is not a format (paths, quoted text);
 * extras taken over, may be NULL. Returns -1. */
int files_error(struct act *a, td_err code, const char *msg, cJSON *extras);
/* Append path with invalid UTF-8 replaced, for messages and extras. */
void files_put_path(buf_t *b, const char *path);

/* ---- zip archives (zip.c) ---- */
/* Each entry of a zip held in memory: 0 to go on, -1 (err set) to stop. */
typedef int (*zip_entry_fn)(void *arg, const char *name, const unsigned char *data, size_t len,
			    int is_dir, char *err, size_t errlen);
int zip_read(const void *zip, size_t len, zip_entry_fn fn, void *arg, char *err, size_t errlen);
struct zipw {
	buf_t out, cd;            /* entries so far, their central directory */
	unsigned n;
};
void zipw_add(struct zipw *zw, const char *name, const void *data, size_t len, time_t mtime);
/* The archive into *out (taken over by the caller); zw is empty again. */
void zipw_finish(struct zipw *zw, buf_t *out);

/* ---- multipart/form-data (multipart.c) ---- */
struct mp_part {
	const char *data;         /* points into the body */
	size_t len;
	int has_filename;
	char filename[1024];
};
/* The part named `field`: 0, or -1 and why. */
int multipart_find(const char *ctype, const char *body, size_t len, const char *field,
		   struct mp_part *part, char *err, size_t errlen);

/* ---- the web page (web.c): /, /s/<session>, /r/<file>, /assets/…, /auth ---- */
void web_register(void);
void web_shutdown(void);

/* ---- OpenHands' action execution server API (openhands.c) ---- */
void openhands_register(void);
void openhands_shutdown(void);

/* ---- edit (edit.c) ---- */
void edit_register(void);

/* ---- expect (expect.c) ---- */
void expect_register(void);

/* ---- live terminal channel (tty.c) ---- */
extern const struct lws_protocols tty_protocol;
void tty_register(void);   /* its session listener */
void tty_shutdown(void);   /* before the loop goes: its frame timer */

/* ---- keys (keys.c) ---- */
/* Type one key name or literal text into the session; 1 if it was a
 * key name. */
int keys_type(struct session *s, const char *item);
/* For run is_input: a control-key name (C-c, C-d, C-z, C-\, C-<letter>)? */
int keys_is_control_name(const char *s, char *byte);

/* ---- waiting for input detection (inputwait.c) ---- */
/* How the session's foreground processes wait on its tty: */
enum inputwait {
	IW_NO,      /* not waiting on it (running, sleeping, on something else) */
	IW_READ,    /* blocked reading it, or polling it alone */
	IW_RELAY,   /* polling it among other descriptors (apt, ssh, script) */
};
enum inputwait inputwait_blocked_on_tty(struct session *s);
/* State, process group and session id of a process (/proc/PID/stat). */
int proc_stat(pid_t pid, char *state, pid_t *pgrp, pid_t *sid);

#endif
