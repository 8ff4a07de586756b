/* loop.h — the loop layer, termd's bottom: options, the lws context and its
 * loop (timers, adopted fds), child reaping, and the WebSocket message queue
 * (wsconn.h). Every layer above includes it through its own header. */
#ifndef TERMD_LOOP_H
#define TERMD_LOOP_H

#include <stdint.h>
#include <sys/types.h>
#include <time.h>
#include <libwebsockets.h>
#include <cJSON.h>

#include "proto.h"
#include "util.h"
#include "wsconn.h"

/* --user-root-capable: may a user file work acts as act as root anyway */
enum { URC_AUTO = 0, URC_YES, URC_NO };

struct session;
struct conn;
struct screen;
struct cmd;
struct expect;
struct viewer;
struct recording;
struct waiter;
struct shellint;
struct plugin;

/* ---- the APIs a listener serves (--listen ADDR:PORT,api=NAME) ---- */
/* A listener's and an HTTP route's bits: a route answers on a listener
 * whose bits it shares. Without a suffix a listener serves TD_API_DEFAULT. */
enum td_api {
	TD_API_TERMD = 1,          /* /events, /tty, the web page, /proxy/, /metrics */
	TD_API_OPENHANDS = 2,      /* OpenHands V0 and V1 */
	TD_API_E2B = 4,            /* e2b's envd */
	TD_API_SWEREX = 8,
	TD_API_AGENT_SANDBOX = 16,
};
#define TD_API_DEFAULT (TD_API_TERMD | TD_API_OPENHANDS | TD_API_E2B)

/* ---- options (main.c) ---- */
struct termd_opts {
	char *listen_host;      /* NULL when unix */
	int listen_port;
	char *listen_unix;      /* path, or NULL */
#define TD_MAX_EXTRA_LISTEN 7
	char *extra_host[TD_MAX_EXTRA_LISTEN]; /* --listen given again: TCP only */
	int extra_port[TD_MAX_EXTRA_LISTEN];
	int nextra;
	/* the APIs each listener serves (--listen ADDR,api=NAME): enum td_api
	 * bits, 0 for a listener without the suffix (TD_API_DEFAULT) */
	unsigned listen_api;
	unsigned extra_api[TD_MAX_EXTRA_LISTEN];
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
	size_t upload_max;        /* --upload-max: bytes one upload may write, unzipped */
	size_t upload_entries;    /* --upload-entries: entries in one uploaded zip */
	size_t list_max;          /* --list-max: entries one listing answers */
	size_t upload_parts;      /* --upload-parts: files one multipart POST /files writes */
	size_t download_max;      /* --download-max: bytes of files in one /download_files */
	size_t head_time;         /* --head-timeout: seconds the front waits for a request head (an HTTP/2 header block too) */
	size_t body_idle;         /* --body-idle-timeout: seconds a request body may pause */
	size_t stall_timeout;     /* --stall-timeout: seconds the front holds bytes nobody takes */
	size_t body_time;         /* --body-timeout: seconds a request body may take */
	size_t stdin_max;         /* --stdin-max: bytes waiting for a session's input */
	size_t stream_max;        /* --stream-max: bytes one HTTP stream holds before it is cut */
	size_t stream_stall;      /* --stream-stall: seconds a held process stream's client may
				   * read nothing before it is cut */
	size_t max_streams;       /* --max-streams: HTTP streams open at once, in all */
	size_t max_streams_client; /* --max-streams-per-client: ... from one client address */
	size_t watcher_max;       /* --watcher-max: bytes of events a polled watcher keeps */
	size_t watcher_expiry;    /* --watcher-expiry: seconds a polled watcher lasts unpolled */
	size_t max_watch_dirs;    /* --max-watch-dirs: folders all watches follow (0: half
				   * the kernel's fs.inotify.max_user_watches) */
	char *plugins;            /* --plugins a,b,… or all (NULL: none) */
	char *plugin_dir;         /* --plugin-dir (NULL: next to the binary) */
	char *state_dir;          /* --state-dir: setup markers (once per image) */
	int insecure_no_token;    /* --insecure-no-token: serve a non-loopback address without one */
	char *record_dir;         /* --record DIR: an asciicast v2 file per session (record.c) */
	int record_input;         /* --record-input: "i" events too */
	int listen_none;          /* --listen none: no listener at all */
	int front;                /* --front on (1, default) | off (0): net/front/front.c owns the TCP listeners */
	/* dial-out links (door/link/link.c) */
	char **connect;           /* --connect URL, each given */
	size_t nconnect;
	char *connect_token;      /* --connect-token-file: sent as a bearer credential */
	char *sandbox_id;         /* --sandbox-id (default: the host name) */
	char *sandbox_base;       /* --sandbox-base: agent-sandbox's base folder (default /app) */
	double sandbox_exec_timeout; /* --sandbox-exec-timeout S: its commands' limit (default 300) */
	char *cacert;             /* --cacert (else env TERMD_CACERT, else the system's CAs) */
	double backoff_min, backoff_max; /* --connect-backoff MIN:MAX seconds */
	unsigned connect_ping;    /* --connect-ping S: a ping after S idle seconds, dead after 2 S */
	const char *envd_user;    /* --user: e2b's default user (NULL: termd's own) */
	int user_root_capable;    /* --user-root-capable: URC_AUTO, URC_YES or URC_NO */
	char *preview_token;      /* --preview-token-file: opens previews only (door/preview/proxy.c) */
	char *preview_host_suffix; /* --preview-host-suffix: Host <port>-<any><suffix> is a preview */
	/* a cgroup per session (core/cgroup.c) */
	int cgroups;              /* --cgroups: enum cg_mode (auto, off, v1, v2) */
	long long session_memory_max;  /* --session-memory-max: bytes, 0 none */
	long long session_pids_max;    /* --session-pids-max, 0 none */
	double session_cpu_max;        /* --session-cpu-max: cores, 0 none */
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
	/* an upgrade in place (handover.c): the listening socket and the
	 * runtime folder the termd before this one had, taken as they are */
	int inherited;
	int inherit_fd;           /* -1: none (--listen none) */
	char *inherit_rundir;
	void (*on_usr2)(void);    /* SIGUSR2 (set from above) */
	/* --front on: lws listens on this unix socket (mode 0600, in rundir)
	 * and the front (net/front/front.c) owns the TCP listeners; NULL: no front */
	char *front_sock;
};

extern struct server srv;


/* ---- server (server.c) ---- */
/* the lws context, the listener and the loop, serving the two channels
 * (the transport's entries, given from above) */
int server_init(const struct lws_protocols *events_channel, const struct lws_protocols *tty_channel);
void server_run(void);
/* the loop's longest turn (its thread's CPU time, ns) since the last call,
 * which starts a new window, and how many turns it has made */
void server_turns_take(uint64_t *max_ns, uint64_t *n);
/* Does the front serve the TCP listeners (--front on, a TCP --listen)? */
int server_front_wanted(void);
/* Did wsi come through the front's internal socket (its X-Termd-Peer,
 * X-Termd-Tls and X-Termd-Metadata headers are the front's)? */
int server_via_front(struct lws *wsi);
/* The APIs of the listener wsi came in on when it did not come through
 * the front (per lws vhost): enum td_api bits, never 0. */
unsigned server_listener_api(struct lws *wsi);
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


/* ---- child processes (child.c) ---- */
typedef void (*child_cb)(void *arg, pid_t pid, int status);
/* cb gets pid's wait status once it is reaped (then the watch is gone) */
void child_watch(pid_t pid, child_cb cb, void *arg);
void child_unwatch(pid_t pid);
/* SIGCHLD: reap every child, hand each status to its watcher */
void child_reap_all(void);
void child_forget_all(void);

#endif
