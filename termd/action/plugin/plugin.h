/* plugin.h — what the plugin host's three files share (plugin.c: the
 * registry, manifests, actions, start and stop; prog.c: a plugin's
 * program and the requests in flight to it; setup.c: setups once per
 * image): the structs and the functions one calls in another. Nothing
 * outside the plugin host includes it. */
#ifndef TERMD_PLUGIN_H
#define TERMD_PLUGIN_H

#include "action.h"

#define PLUGIN_LINE_MAX     (64u * 1024u * 1024u)  /* one answer line */
#define PLUGIN_READ_BUDGET  (1u * 1024u * 1024u)   /* bytes read per wakeup */
#define PLUGIN_TIMEOUT_S    120.0   /* an action's timeout when it gives none */
#define PLUGIN_GRACE_S      15.0    /* the program answers timeouts itself; this is termd's net */
#define SETUP_ERR_KEEP      8192    /* tail of a setup's stderr kept for its message */

enum pstate { P_OFF, P_INSTALLING, P_READY, P_FAILED };

struct preq;

struct plugin {
	struct plugin *next;
	char *name, *version, *dir;
	char *setup, *run;        /* paths in dir, or NULL */
	cJSON *actions;           /* array of strings */
	cJSON *needs;             /* array of strings, or NULL */
	int enabled;
	enum pstate state;
	char *error;              /* "Failed to install <name> on <type>: <why>" */
	/* setup */
	pid_t setup_pid;
	struct lws *setup_wsi;    /* its stderr */
	buf_t setup_err;
	/* the program */
	pid_t pid;
	int in_fd;
	struct lws *in_wsi, *out_wsi;
	buf_t outq, rx;
	int died;                 /* it ran and ended: the next start says restarted */
	lws_sorted_usec_list_t eof_sul;  /* stdout closed: wait a moment for its exit status */
	lws_sorted_usec_list_t in_sul;   /* asks for stdin writable again (flush_out) */
	char rundir[512];
	struct preq *reqs;        /* sent, waiting for their answer */
	struct preq *waiting;     /* waiting for the plugin to be ready */
};

/* One plugin action in flight: a pending action (first member). */
struct preq {
	struct pending p;
	struct preq *next;
	struct plugin *pl;
	uint64_t rid;             /* the id the program sees */
	char *action;
	cJSON *args;
	int restarted;
	lws_sorted_usec_list_t sul;
};

/* ---- plugin.c ---- */
extern struct plugin *plugins;
extern char *sandbox_type;
extern const char *pkg_manager;
extern uint64_t next_rid;
extern int stopping;
extern const char *const state_names[];
struct plugin *plugin_named(const char *name);
void status_event(struct plugin *pl);
void set_nonblock(int fd);
void child_env(struct plugin *pl);
void child_prepare(void);
void plugin_register_actions(struct plugin *pl);   /* once ready: its actions in the table */

/* ---- prog.c ---- */
extern const struct pending_ops preq_ops;
void program_dead(struct plugin *pl, const char *why);
void program_eof(struct plugin *pl);
void preq_free(struct preq *q);
void preq_unlink(struct preq *q);
void preq_fail(struct preq *q, td_err code, const char *msg);
void preq_send(struct preq *q);
void preq_session_gone(struct pending *p);
void preq_timeout(lws_sorted_usec_list_t *sul);
int program_start(struct plugin *pl, char *err, size_t errlen);
void program_close_fds(struct plugin *pl);
int program_adopt(struct plugin *pl, pid_t pid, int in_fd, int out_fd);

/* ---- setup.c ---- */
void set_state(struct plugin *pl, enum pstate st, const char *why);
void plugin_setup_next(void);
char *find_sandbox_type(void);
const char *find_pkg_manager(void);
void setup_close(struct plugin *pl);

#endif
