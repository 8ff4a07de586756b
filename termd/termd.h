/* termd.h — the daemon's internal header: options, the structs shared
 * between modules (server, connections, sessions, commands, waiters), and
 * prototypes grouped per file. Structs first, then functions. */
#ifndef TERMD_H
#define TERMD_H

#include <stdint.h>
#include <sys/types.h>
#include <libwebsockets.h>
#include <cJSON.h>

#include "proto.h"
#include "util.h"
#include "render.h"
#include "vtfilter.h"

struct session;
struct conn;
struct screen;
struct cmd;
struct expect;
struct viewer;

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
	size_t max_pending;       /* unsent bytes before an /events client is dropped */
	size_t scrollback;        /* lines kept above each session's screen */
	size_t output_mem;        /* a command's output kept in memory, then file only */
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

/* An /events WebSocket connection. */
struct conn {
	struct conn *next;
	struct lws *wsi;
	int readonly;
	int subscribed;
	buf_t rx;                 /* message being reassembled */
	int rx_discard;           /* current message is over the limit */
	size_t rx_total;
	/* outgoing queue of whole messages */
	struct outmsg *out_head, *out_tail;
	size_t out_bytes;
	int closing;
};

struct outmsg {
	struct outmsg *next;
	size_t len;
	unsigned char *data;      /* LWS_PRE bytes of headroom, then payload */
};

/* ---- commands and waiters (run.c) ---- */
enum waiter_kind { WAIT_RUN, WAIT_KEYS };

/* An action that is waiting for something in a session. */
struct waiter {
	enum waiter_kind kind;
	struct session *s;
	struct conn *conn;        /* may become NULL if the client leaves */
	cJSON *id;                /* the action's id (owned) */
	uint64_t start_us;
	uint64_t hard_us;         /* absolute deadline or 0 */
	uint64_t idle_us;         /* idle period or 0 */
	uint64_t settle_us;       /* keys: quiet period */
	size_t max_output;
	int restarted;
	int typed;                /* run: the text has been typed */
	uint64_t input_seen_us;   /* run: first time it looked blocked on input */
	char *pending_text;       /* run: text to type when the shell is ready */
	cJSON *pending_keys;      /* keys: typed when the shell is ready */
	lws_sorted_usec_list_t sul;
};

/* One command line in flight in a session (typed by the agent or a viewer). */
struct cmd {
	char *text;
	char sname[TD_SESSION_NAME_MAX + 1]; /* its session, for naming the output file */
	int by_viewer;
	int started;              /* shell said it began (C mark) */
	int finished;
	int exit_code;
	uint64_t start_us, end_us;
	render_t *render;
	/* rendered output store: memory, spilled to a file when large. Bytes
	 * [0, file_bytes) of the text are in the file, [mem_base, total_bytes)
	 * in mem; mem_base > file_bytes only once the file failed (store_err),
	 * and what lies between is lost */
	buf_t mem;
	char *file_path;
	int file_fd;
	size_t file_bytes;
	size_t mem_base;
	char *store_err;          /* why the output file failed, or NULL */
	size_t total_bytes;       /* bytes of rendered text produced */
	size_t total_lines;
	size_t delivered;         /* bytes already returned to the agent */
	size_t delivered_lines;
	char *shown_live;         /* live text returned last time */
};

/* ---- sessions (session.c) ---- */
enum shell_state { SH_STARTING, SH_IDLE, SH_RUNNING, SH_DEAD };

struct session {
	struct session *next;
	char name[TD_SESSION_NAME_MAX + 1];
	char *command;            /* session program (NULL = interactive shell) */
	int is_shell;             /* has termd's shell integration */
	int shell_kind;           /* 0 bash, 1 posix sh */
	int master_fd;
	char slave_name[64];
	pid_t pid;
	struct lws *wsi;          /* adopted pty master */
	int rows, cols;
	struct screen *screen;
	struct shellint *si;
	enum shell_state state;
	int ready;                /* line editor is reading (prompt shown) */
	char *cwd;
	int exit_code, exit_signal;
	int alive;
	struct cmd *cmd;          /* current or last undelivered command */
	struct waiter *waiter;    /* the run waiting on this session */
	struct waiter *kwaiter;   /* the keys action waiting on it */
	struct expect *expect;    /* the expect action waiting on it */
	struct viewer *viewers;   /* /tty connections */
	buf_t inq;                /* bytes waiting to be written to the pty */
	buf_t typed;              /* keys/viewer bytes since the last prompt */
	uint64_t last_output_us;
	lws_sorted_usec_list_t ready_sul;
	lws_sorted_usec_list_t exit_sul;
	lws_sorted_usec_list_t close_sul;
	int closing;              /* session.close: freed once its process ends */
	int close_killed;         /* ... and the KILL after the grace time was sent */
	int nviewers;
	int reaped;
	int pty_closed;
};

/* ---- events (events.c) ---- */
void events_init(void);
void events_shutdown(void);
uint64_t events_last_seq(void);
/* Build and deliver an observation. `cause` may be NULL (→ null). Takes
 * ownership of extras (may be NULL). Delivered to `to` (if not NULL) and to
 * every subscriber. */
void events_emit(struct conn *to, const cJSON *cause, const char *observation,
		 const char *content, cJSON *extras);
void events_error(struct conn *to, const cJSON *cause, td_err code,
		  const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void events_hello(struct conn *c);
void events_subscribe(struct conn *c, const cJSON *id, const cJSON *args);
/* An action id already answered and still retained: send that answer
 * again with extras.replayed and return 1. */
int events_replay(struct conn *c, const cJSON *id);

/* ---- server (server.c) ---- */
int server_init(void);
void server_run(void);
void server_shutdown(void);
void conn_send(struct conn *c, const char *data, size_t len);
/* 0 no access, 1 view token, 2 full access */
int server_auth_level(struct lws *wsi);
int server_adopt_fd(int fd, void *user);
/* Schedule a timer callback; call with us=0 to cancel. */
void server_timer(lws_sorted_usec_list_t *sul, sul_cb_t cb, uint64_t delay_us);

/* ---- actions (actions.c) ---- */
void actions_dispatch(struct conn *c, const char *json, size_t len);
cJSON *actions_list_json(void);
/* argument helpers: 0 ok, -1 wrong type (error already sent) */
int arg_string(struct conn *c, const cJSON *id, const cJSON *args, const char *key,
	       const char **out, int required);
int arg_number(struct conn *c, const cJSON *id, const cJSON *args, const char *key,
	       double *out, int *present);
int arg_bool(struct conn *c, const cJSON *id, const cJSON *args, const char *key, int *out);

/* ---- sessions (session.c) ---- */
struct session *session_find(const char *name);
/* Start a session; command NULL = interactive shell. NULL + msg on error. */
struct session *session_open(const char *name, const char *command, const char *cwd,
			     const cJSON *env, int cols, int rows, char *err, size_t errlen);
int session_respawn(struct session *s, char *err, size_t errlen);
void session_write(struct session *s, const void *data, size_t len);
void session_resize(struct session *s, int cols, int rows);
pid_t session_fg_pid(struct session *s);
void session_on_sigchld(void);
void session_stop_all(void);
/* Free a session that is off the lists (closing, process gone). */
void session_destroy(struct session *s);
void session_free_all(void);
int session_raw_callback(struct lws *wsi, enum lws_callback_reasons reason,
			 void *user, void *in, size_t len);
cJSON *session_names_json(void);

/* ---- session management actions (sessionctl.c) ---- */
void session_open_action(struct conn *c, const cJSON *id, const cJSON *args);
void session_list_action(struct conn *c, const cJSON *id, const cJSON *args);
void session_signal_action(struct conn *c, const cJSON *id, const cJSON *args);
void session_close_action(struct conn *c, const cJSON *id, const cJSON *args);

/* ---- shell integration (shellint.c) ---- */
enum si_event { SI_TEXT, SI_MARK_START, SI_MARK_DONE, SI_READY, SI_TITLE };
typedef void (*si_cb)(void *user, enum si_event ev, const char *data, size_t len, int code);
struct shellint *shellint_new(si_cb cb, void *user);
void shellint_free(struct shellint *si);
const char *shellint_nonce(struct shellint *si);
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
const char *screen_title(struct screen *sc);
void screen_set_title(struct screen *sc, const char *t, size_t n);
/* Bytes reproducing the visible screen on a blank terminal (tty 'S'). */
void screen_snapshot(struct screen *sc, buf_t *out);
/* Type a key through libvterm's keyboard layer (honours cursor-key mode). */
void screen_key(struct screen *sc, int vterm_key, int mod);
void screen_unichar(struct screen *sc, uint32_t c, int mod);
/* Terminal answers (DSR, DA) go back to the program through this. */
void screen_set_output(struct screen *sc, void (*cb)(const char *, size_t, void *), void *user);

/* ---- run, keys, screen actions and command life (run.c) ---- */
void run_action(struct conn *c, const cJSON *id, const cJSON *args);
void keys_action(struct conn *c, const cJSON *id, const cJSON *args);
void screen_action(struct conn *c, const cJSON *id, const cJSON *args);
void run_on_output(struct session *s, const char *data, size_t n);
void run_on_mark_start(struct session *s);
void run_on_mark_done(struct session *s, int exit_code, const char *cwd);
void run_on_ready(struct session *s);
void run_on_session_exit(struct session *s);
/* A session.open program began: it is the session's command. */
void run_program_started(struct session *s);
void run_on_conn_gone(struct conn *c);
/* A person (viewer) or keys typed these bytes at the session's prompt. */
void run_note_typed(struct session *s, const char *data, size_t n);
/* An action with this id is still waiting: its answer goes to c now. */
int run_rebind(const cJSON *id, struct conn *c);
void run_session_gone(struct session *s);
void cmd_free(struct cmd *cmd);

/* ---- files (files.c) ---- */
void files_read_action(struct conn *c, const cJSON *id, const cJSON *args);
void files_write_action(struct conn *c, const cJSON *id, const cJSON *args);
void files_edit_action(struct conn *c, const cJSON *id, const cJSON *args);

/* ---- expect (expect.c) ---- */
void expect_action(struct conn *c, const cJSON *id, const cJSON *args);
void expect_on_output(struct session *s, const char *data, size_t n);
void expect_on_session_exit(struct session *s);
void expect_on_conn_gone(struct session *s, struct conn *c);
void expect_session_gone(struct session *s);

/* ---- live terminal channel (tty.c) ---- */
struct vframe;
struct viewer {
	struct viewer *next;      /* in the session's list */
	struct lws *wsi;
	struct session *s;
	char name[TD_SESSION_NAME_MAX + 1];
	int rw;
	int attached;
	int resync;               /* backlog dropped: snapshot next */
	struct vframe *head, *tail;
	size_t queued;
	buf_t rx;
	int closing;
};
int tty_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
		 void *in, size_t len);
void tty_on_output(struct session *s, const char *data, size_t n);
void tty_on_title(struct session *s, const char *t, size_t n);
void tty_on_resize(struct session *s);
void tty_on_exit(struct session *s);
void tty_session_gone(struct session *s);

/* ---- keys (keys.c) ---- */
/* Type one key name or literal text into the session; 1 if it was a
 * key name. */
int keys_type(struct session *s, const char *item);
/* For run is_input: a control-key name (C-c, C-d, C-z, C-\, C-<letter>)? */
int keys_is_control_name(const char *s, char *byte);

/* ---- waiting for input detection (inputwait.c) ---- */
/* 1 if the session's foreground processes are blocked reading its tty. */
int inputwait_blocked_on_tty(struct session *s);
/* State, process group and session id of a process (/proc/PID/stat). */
int proc_stat(pid_t pid, char *state, pid_t *pgrp, pid_t *sid);

#endif
