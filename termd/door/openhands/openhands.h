/* openhands.h — what the OpenHands door's files share (register.c: the
 * door's entry, its routes and action types; openhands.c: the route
 * handlers, the request queue and its socketless connection; run.c,
 * files.c, plugins.c: OpenHands' actions mapped onto termd's;
 * transfer.c: file transfer routes). Nothing else includes it. */
#ifndef TERMD_OPENHANDS_H
#define TERMD_OPENHANDS_H

#include "door.h"
#include "fsio.h"

#define OH_MAX_OUTPUT     64000    /* termd's head and tail each keep > 15,000 characters */
#define OH_HIDDEN_OUTPUT  (16 * 1024 * 1024)
#define OH_TRUNC_LIMIT    30000    /* OpenHands' MAX_CMD_OUTPUT_SIZE */
#define OH_POLL_S         0.05     /* "is NOT executed": collect what the running command printed */

struct ohreq;
typedef void (*oh_cont)(struct ohreq *r, cJSON *ans);
/* One POST /execute_action, from arrival to its answer. */
struct ohreq {
	struct ohreq *next;
	struct http_txn *t;       /* NULL once the client left */
	cJSON *body;
	const char *type;         /* action.action */
	const cJSON *args;        /* action.args, or NULL */
	double timeout;
	int has_timeout;
	char id[64];              /* the termd action in flight */
	oh_cont cont;             /* what its answer goes to */
	/* run */
	char *cmd;                /* command, stripped */
	int is_input, blocking, hidden, is_static, special, polled;
	char sname[TD_SESSION_NAME_MAX + 1];
	cJSON *result;            /* a static run's answer, kept while its session closes */
	/* read, write, edit */
	char *path;               /* resolved */
	char *old;                /* content before */
	int exists;
};
struct ohstate {
	struct conn conn;         /* answers come back through its sink */
	struct ohreq *head, *tail;
	unsigned long long nid;
	unsigned nstatic;
	int in_dispatch;
	cJSON *early;             /* an answer given during dispatch */
	int running_seen;         /* main's command was last answered unfinished */
	int no_change_s;          /* NO_CHANGE_TIMEOUT_SECONDS */
	char username[256], hostname[256];
	uint64_t start_us, last_exec_us;
	uint64_t cpu_last_us, cpu_last_ticks;
	lws_sorted_usec_list_t kick;
	int registered;
};
extern struct ohstate oh;

/* ---- openhands.c ---- */
extern const char TIMEOUT_TEMPLATE[];
extern const char CONTINUE_PREFIX[];
extern const char NO_JUPYTER[];
extern const char NO_BROWSER[];
const cJSON *oh_arg(struct ohreq *r, const char *key);
const char *oh_arg_str(struct ohreq *r, const char *key);
int oh_arg_true(struct ohreq *r, const char *key, int def);
const char *oh_jstr(const cJSON *o, const char *key);
double oh_jnum(const cJSON *o, const char *key, double def);
int oh_jtrue(const cJSON *o, const char *key);
int oh_py_space(unsigned char c);
char *oh_py_strip(const char *s);
const char *oh_main_cwd(void);
char *oh_resolve(const char *path);
cJSON *oh_obs_new(const char *message, const char *observation, const char *content);
void oh_done(struct ohreq *r, cJSON *obs);
void oh_done_error(struct ohreq *r, const char *msg);
void oh_call(struct ohreq *r, const char *action, cJSON *args, oh_cont cont);
const char *oh_ans_code(const cJSON *ans);
int oh_is_error(const cJSON *ans);
const char *oh_ans_content(const cJSON *ans);
void oh_done_errorf(struct ohreq *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void oh_answer_json(struct http_txn *t, int status, const char *json);
void oh_answer_detail(struct http_txn *t, int status, const char *detail);
void oh_answer_422(struct http_txn *t, const char *errors);

/* ---- openhands.c: the routes and the start ---- */
/* an OpenHands action type and the function that starts it */
struct oh_action {
	const char *type;
	void (*fn)(struct ohreq *r);
};
/* the door's state set up; acts: the action types /execute_action runs */
void oh_init(const struct oh_action *acts, size_t n);
int oh_admit_key(struct http_txn *t);
void oh_alive(struct http_txn *t);
void oh_server_info(struct http_txn *t);

void oh_execute_action(struct http_txn *t);
void oh_vscode_token(struct http_txn *t);

/* ---- run.c ---- */
void oh_run_start(struct ohreq *r);

/* ---- files.c ---- */
void oh_read_start(struct ohreq *r);
void oh_write_start(struct ohreq *r);
void oh_edit_start(struct ohreq *r);

/* ---- plugins.c ---- */
void oh_ipython_start(struct ohreq *r);
void oh_browse_start(struct ohreq *r);

/* ---- transfer.c ---- */
void oh_list_files(struct http_txn *t);
void oh_upload_file(struct http_txn *t);
void oh_download_files(struct http_txn *t);

#endif
