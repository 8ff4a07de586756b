/* termd-browser's internal header, one section per file in layer order: each file calls only the
   sections above its own (common ← cdp, pyparse ← page ← input, observe ← actions ← main). */
#ifndef TERMD_BROWSER_H
#define TERMD_BROWSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdatomic.h>
#include <sys/types.h>
#include <cJSON.h>

/* ---- common.c: growing strings ---- */
typedef struct sbuf { char *s; size_t len, cap; } sbuf_t;
void sb_add(sbuf_t *b, const char *p, size_t n);
void sb_puts(sbuf_t *b, const char *p);
void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *sb_take(sbuf_t *b);                     /* the string (never NULL); b is reset */

/* ---- common.c: requests, answers, process-wide state ---- */
enum req_kind { REQ_BROWSE, REQ_INTERACTIVE };

typedef struct request {
    struct request *next;
    cJSON *id;              /* owned copy of the request id */
    enum req_kind kind;
    char *url;              /* browse */
    char *actions;          /* browse_interactive */
    char *cwd;
    bool screenshot;
    double timeout;         /* seconds */
    double received;        /* mono_now() when read */
} request_t;

double mono_now(void);
void answer(cJSON *obj);                      /* prints one line, frees obj; thread-safe */
void answer_error(const cJSON *id, const char *code, const char *msg);
void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool stop_requested(void);
int wake_fd(void);                            /* readable when the worker should look at the queue */
request_t *queue_pop(void);                   /* NULL when empty */
void request_free(request_t *r);
const char *run_dir(void);
const char *jstr(const cJSON *o, const char *k);   /* a string member, or NULL */
char *run_dir_buf(size_t *len);              /* main.c fills it in at start-up */
int  common_init(void);                       /* the wake pipe; 0 ok, -1 errno */
void wake_worker(void);
void request_stop(void);                      /* stop_requested() turns true; the worker wakes */
void rm_tree(const char *path);
extern atomic_int browser_pgid;               /* Chromium's process group while it runs, else 0 */

/* ---- cdp.c: one Chromium over --remote-debugging-pipe ---- */
#define MAX_TABS 64

typedef struct tab {
    char target[64];
    char session[64];
    bool loading;           /* main frame between frameStartedLoading and frameStoppedLoading */
    unsigned stops;         /* main-frame frameStoppedLoading count */
    unsigned navs;          /* navigations requested/started in the main frame */
    bool crashed;
    bool gone;              /* target destroyed or detached */
} tab_t;

typedef struct browser {
    pid_t pid;              /* browser process (leader of its own process group), 0 when none */
    int wfd, rfd;           /* our ends: commands to fd 3, replies from fd 4 */
    char *rbuf; size_t rlen, rcap;
    int next_id;
    bool alive;
    bool ever_started;
    char profile[512];
    char version[128];
    tab_t tabs[MAX_TABS];
    int ntabs;
    int active;
    char *pending_new[MAX_TABS];  /* page targets opened by pages (window.open), to adopt */
    int npending;
    char notes[4096];       /* dialogs and downloads seen during this request */
    double mouse_x, mouse_y;
    char died_reason[256];
} browser_t;

extern browser_t B;

int  cdp_start(char *err, size_t errlen);          /* 0 ok */
void cdp_kill(void);                               /* ends the whole process group, reaps */
bool cdp_check_alive(void);                        /* false (and cleaned up) when Chromium has exited */
/* sends a command and waits for its reply (events are handled meanwhile). Returns the result
   object (caller frees) or NULL with err filled ("timeout", CDP error text, "browser exited"). */
cJSON *cdp_call(const char *method, cJSON *params, const char *session, double deadline,
                char *err, size_t errlen);
void cdp_send_nowait(const char *method, cJSON *params, const char *session);
/* handles events until deadline or until cond() is true (cond may be NULL) */
bool cdp_pump_until(bool (*cond)(void *), void *arg, double deadline);
int  cdp_tab_attach(const char *target, double deadline, char *err, size_t errlen);  /* index or -1 */
int  cdp_new_tab(double deadline, char *err, size_t errlen);
void cdp_adopt_pending(double deadline);
void cdp_forget_gone_tabs(void);
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- pyparse.c: Python-style call lines ---- */
typedef struct pycall {
    char *name;
    char *text;             /* the call as written */
    int line;
    cJSON *args;            /* array of positional values */
    cJSON *kwargs;          /* object of keyword values */
} pycall_t;

/* parses the whole text; returns the number of calls (>= 0) or -1 with err filled */
int pyparse(const char *src, pycall_t **calls, char *err, size_t errlen);
void pycalls_free(pycall_t *calls, int n);
void py_repr(sbuf_t *b, const char *s);      /* appends the Python repr of a str */

/* ---- page.c: the active tab, calls and scripts on it, waiting for pages ---- */
#define ERRLEN 1024
#define OBS_GRACE 10.0            /* seconds an observation may take after the action's deadline */

typedef struct {
    request_t *r;
    double deadline;
    char err[ERRLEN];             /* the action error (last_browser_action_error) */
} ctx_t;

typedef struct { tab_t *t; unsigned stops, navs; } waitarg_t;
bool cond_stopped(void *a);
bool cond_not_loading(void *a);
tab_t *active_tab(void);
void seterr(ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));  /* the first error wins */
cJSON *tcall(const char *method, cJSON *params, double deadline, char *err);       /* on the active tab */
cJSON *eval_value(const char *expr, double deadline, char *err);   /* Runtime.evaluate's value, or NULL + err */
void settle(unsigned navs_before, unsigned stops_before, double deadline);

/* ---- input.c: elements by bid, input events ---- */
char *bid_of(const cJSON *v);                 /* a bid argument (str or int) as a string, or NULL */
void do_click(ctx_t *c, const char *bid, const char *button, const cJSON *mods, int count);
void do_hover(ctx_t *c, const char *bid);
void do_press(ctx_t *c, const char *bid, const char *comb);
void do_focus(ctx_t *c, const char *bid);
void do_fill(ctx_t *c, const char *bid, const char *text);
void do_select(ctx_t *c, const char *bid, const cJSON *options);
void do_scroll(ctx_t *c, double dx, double dy);
void do_drag(ctx_t *c, const char *from, const char *to);
void do_upload(ctx_t *c, const char *bid, const cJSON *files);

/* ---- observe.c: the observation ---- */
typedef struct {
    char *url, *title, *text, *focused, *axtree, *shot;
    cJSON *pages;
} obs_t;
void obs_free(obs_t *o);
bool observe(obs_t *o, bool want_shot, double deadline, char *err);

/* ---- actions.c ---- */
void serve_request(request_t *r);
void worker_idle(void);

#endif
