/* swerex.h — what the SWE-ReX door's files share (swerex.c: the routes,
 * X-API-Key, the X-Request-ID slot, SWE-ReX's answers and exceptions, the
 * termd actions a request calls; session.c: bash sessions as SWE-ReX runs
 * them; handover.c: those sessions across an upgrade in place; exec.c:
 * /execute and the `bash -n` check on pipe sessions; files.c: read_file,
 * write_file, upload). Nothing else includes it. */
#ifndef TERMD_SWEREX_H
#define TERMD_SWEREX_H

#include "door.h"
#include "fsio.h"
#include "fswork.h"

#define SW_PS1 "SHELLPS1PREFIX"
#define SW_PREFIX "swerex-"          /* a SWE-ReX session's termd name */
#define SW_EXEC_PREFIX "swerex-exec-"

struct swreq;
struct swsess;
typedef void (*sw_cont)(struct swreq *r, cJSON *ans);

/* One HTTP request that waits for termd actions or a process. */
struct swreq {
	struct swreq *next;
	struct http_txn *t;       /* NULL once the client left */
	cJSON *body;              /* the request's JSON */
	char id[64];              /* the termd action in flight */
	sw_cont cont;
	cJSON *early;             /* an answer that came during dispatch */
	lws_sorted_usec_list_t timer;
	/* run_in_session */
	struct swsess *ss;
	struct swreq *qnext;      /* in line behind the session's request */
	int phase;                /* session.c's */
	char *cmd;
	int check;                /* 0 raise, 1 silent, 2 ignore */
	int interactive, quit, interrupt;
	int started;              /* its output's start is known */
	int prev_phase, done_code;
	size_t done_at;           /* where the text after its done mark starts */
	int retries, n_retry;
	double timeout;           /* < 0: none */
	char *error_msg;
	cJSON *expect;            /* array of strings (regexes) */
	cJSON *waiting;           /* what the command waits for (input-wait) */
	size_t text_from;         /* where this request's output starts */
	void *proc;               /* exec.c's running process */
	void *upload;             /* files.c's upload job */
};

/* ---- swerex.c ---- */
void sw_answer_json(struct swreq *r, int status, const char *json);
void sw_answer_obj(struct swreq *r, cJSON *o);   /* 200, o taken */
/* HTTP 511 {"swerexception": ...}; extra taken (NULL: {}) */
void sw_raise(struct swreq *r, const char *class_path, const char *msg, cJSON *extra);
void sw_raisef(struct swreq *r, const char *class_path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void sw_answer_422(struct swreq *r, const char *loc, const char *msg);
void sw_req_free(struct swreq *r);
struct swreq *sw_req_new(struct http_txn *t);
/* an action nobody waits for (its answer is dropped) */
void sw_call_detached(const char *action, cJSON *args);
/* a request's end: what session.c and exec.c hold of it let go */
void sw_session_req_done(struct swreq *r);
void sw_proc_req_done(struct swreq *r);
void sw_upload_req_done(struct swreq *r);
/* dispatch termd action with args (taken); its answer goes to cont */
void sw_call(struct swreq *r, const char *action, cJSON *args, sw_cont cont);
int sw_is_error(const cJSON *ans);
const char *sw_ans_code(const cJSON *ans);
const char *sw_ans_content(const cJSON *ans);
const cJSON *sw_extras(const cJSON *ans);
const char *sw_jstr(const cJSON *o, const char *key, const char *def);
double sw_jnum(const cJSON *o, const char *key, double def);
int sw_jbool(const cJSON *o, const char *key, int def);
/* Python's repr() of a str, and of a float */
void sw_repr(buf_t *b, const char *s, size_t n);
void sw_float(buf_t *b, double x);
/* bytes as Python decodes them with errors="backslashreplace" */
void sw_backslashreplace(buf_t *out, const char *s, size_t n);
/* SWE-ReX's _strip_control_chars: ANSI escapes out, \r\n → \n */
void sw_strip_control(buf_t *out, const char *s, size_t n);
/* a timer on the request (replaces one set) */
void sw_timer(struct swreq *r, void (*fn)(lws_sorted_usec_list_t *), double seconds);

/* the routes (swerex.c, session.c, exec.c, files.c) */
int sw_admit(struct http_txn *t);
void sw_root(struct http_txn *t);
void sw_is_alive(struct http_txn *t);
void sw_close(struct http_txn *t);
void sw_create_session(struct http_txn *t);
void sw_run_in_session(struct http_txn *t);
void sw_close_session(struct http_txn *t);
void sw_execute(struct http_txn *t);
void sw_read_file(struct http_txn *t);
void sw_write_file(struct http_txn *t);
void sw_upload(struct http_txn *t);

/* ---- session.c ---- */
/* A SWE-ReX session (session.c's; handover.c saves and loads its names
 * and state). */
struct swsess {
	struct swsess *next;
	char *name;               /* SWE-ReX's */
	char sname[TD_SESSION_NAME_MAX + 1];
	struct session *s;        /* its termd session (a closed one's name may be
				   * taken again before the old one is gone) */
	int closed;               /* /close: no shell, the name kept */
	int ready;                /* the startup line ran: PS1 is SWE-ReX's */
	int prompted;             /* the shell's first prompt came */
	size_t pre_at;            /* what it printed before that prompt ends here */
	/* a command that timed out runs on: what it prints up to its end
	 * starts the next answer (SWE-ReX's pexpect keeps it too) */
	int orphan;
	size_t orphan_from, orphan_end;   /* end 0: not ended yet */
	int running;              /* start mark seen, done mark not yet */
	buf_t text;               /* the session's raw output (marks removed) */
	struct swreq *cur;        /* the request waiting on it */
	struct swreq *queue;      /* run_in_session requests in line after it
				   * (SWE-ReX's server runs one at a time) */
};
extern struct swsess *sw_sess_list;   /* every one, the closed ones too */
struct swsess *sw_sess_find(const char *name);   /* by SWE-ReX's name */
void sw_sessions_init(void);
void sw_sessions_close_all(void);   /* /close: shells gone, names kept */
void sw_sessions_shutdown(void);

/* ---- exec.c ---- */
/* A program on a pipe session: argv (copied), env NULL (inherit) or an
 * object that replaces the environment, cwd NULL or a folder, merge:
 * stderr into stdout, timeout < 0: none. done(r, out, err, code, timed_out,
 * why) once it ended (why: it could not start). */
typedef void (*sw_proc_done)(struct swreq *r, const buf_t *out, const buf_t *err, int code,
			     int timed_out, const char *why);
void sw_proc_start(struct swreq *r, char *const *argv, const cJSON *env, const char *cwd,
		   int merge, double timeout, sw_proc_done done);
void sw_exec_init(void);
void sw_exec_shutdown(void);
/* upgrade in place (handover.c): the running /execute processes' timeouts */
void sw_proc_handover_save(cJSON *a);
void sw_proc_handover_load(const cJSON *o);
void sw_proc_handover_done(void);

#endif
