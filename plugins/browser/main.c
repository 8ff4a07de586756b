/* termd-browser main, the top layer: stdin request lines → the queue, one worker thread serving
   them (actions.c), EOF/SIGTERM shutdown, the run folder. */
#include "browser.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_LINE (16u << 20)
#define DEFAULT_TIMEOUT 60.0
#define MAX_TIMEOUT 3600.0

static pthread_mutex_t q_mu = PTHREAD_MUTEX_INITIALIZER;
static request_t *q_head, *q_tail;
static int sig_pipe[2] = {-1, -1};
static bool own_rundir;

/* ---- queue ---- */
void request_free(request_t *r)
{
    if (!r) return;
    cJSON_Delete(r->id);
    free(r->url); free(r->actions); free(r->cwd);
    free(r);
}

static void queue_push(request_t *r)
{
    pthread_mutex_lock(&q_mu);
    r->next = NULL;
    if (q_tail) q_tail->next = r; else q_head = r;
    q_tail = r;
    pthread_mutex_unlock(&q_mu);
    wake_worker();
}

request_t *queue_pop(void)
{
    pthread_mutex_lock(&q_mu);
    request_t *r = q_head;
    if (r) { q_head = r->next; if (!q_head) q_tail = NULL; }
    pthread_mutex_unlock(&q_mu);
    return r;
}

/* ---- one input line ---- */
static void handle_line(char *line, size_t len)
{
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t')) len--;
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t')) i++;
    if (i == len) return;                                  /* blank line: nothing asked */
    cJSON *req = cJSON_ParseWithLength(line + i, len - i);
    if (!req || !cJSON_IsObject(req)) {
        answer_error(NULL, "bad_json", "the request is not a JSON object");
        cJSON_Delete(req);
        return;
    }
    cJSON *id = cJSON_GetObjectItemCaseSensitive(req, "id");
    if (!id || !(cJSON_IsString(id) || cJSON_IsNumber(id))) {
        answer_error(NULL, "bad_request", "the request needs an id (string or integer)");
        cJSON_Delete(req);
        return;
    }
    cJSON *action = cJSON_GetObjectItemCaseSensitive(req, "action");
    cJSON *args = cJSON_GetObjectItemCaseSensitive(req, "args");
    cJSON *cwd = cJSON_GetObjectItemCaseSensitive(req, "cwd");
    char msg[512];
    if (!cJSON_IsString(action)) {
        answer_error(id, "bad_request", "the request needs an action (string)");
        goto out;
    }
    enum req_kind kind;
    if (!strcmp(action->valuestring, "browse")) kind = REQ_BROWSE;
    else if (!strcmp(action->valuestring, "browse_interactive")) kind = REQ_INTERACTIVE;
    else {
        snprintf(msg, sizeof msg, "unknown action '%.200s' (the browser plugin serves browse and browse_interactive)",
                 action->valuestring);
        answer_error(id, "unknown_action", msg);
        goto out;
    }
    if (args && !cJSON_IsNull(args) && !cJSON_IsObject(args)) {
        answer_error(id, "bad_request", "args must be an object");
        goto out;
    }
    if (cwd && !cJSON_IsNull(cwd) && !cJSON_IsString(cwd)) {
        answer_error(id, "bad_request", "cwd must be a string");
        goto out;
    }
    cJSON *url = cJSON_GetObjectItemCaseSensitive(args, "url");
    cJSON *acts = cJSON_GetObjectItemCaseSensitive(args, "browser_actions");
    cJSON *to = cJSON_GetObjectItemCaseSensitive(args, "timeout");
    cJSON *shot = cJSON_GetObjectItemCaseSensitive(args, "screenshot");
    if (kind == REQ_BROWSE && (!cJSON_IsString(url) || !url->valuestring[0])) {
        answer_error(id, "bad_request", "browse needs args.url (a non-empty string)");
        goto out;
    }
    if (kind == REQ_INTERACTIVE && !cJSON_IsString(acts)) {
        answer_error(id, "bad_request", "browse_interactive needs args.browser_actions (a string)");
        goto out;
    }
    double timeout = DEFAULT_TIMEOUT;
    if (to && !cJSON_IsNull(to)) {
        if (!cJSON_IsNumber(to) || !(to->valuedouble > 0)) {
            answer_error(id, "bad_request", "args.timeout must be a positive number of seconds");
            goto out;
        }
        timeout = to->valuedouble > MAX_TIMEOUT ? MAX_TIMEOUT : to->valuedouble;
    }
    if (shot && !cJSON_IsNull(shot) && !cJSON_IsBool(shot)) {
        answer_error(id, "bad_request", "args.screenshot must be a boolean");
        goto out;
    }
    request_t *r = calloc(1, sizeof *r);
    if (!r) abort();
    r->id = cJSON_Duplicate(id, 1);
    r->kind = kind;
    r->url = kind == REQ_BROWSE ? strdup(url->valuestring) : NULL;
    r->actions = kind == REQ_INTERACTIVE ? strdup(acts->valuestring) : NULL;
    if (cJSON_IsString(cwd) && cwd->valuestring[0] == '/') r->cwd = strdup(cwd->valuestring);
    else {
        char buf[4096];
        r->cwd = strdup(getcwd(buf, sizeof buf) ? buf : "/");
    }
    r->screenshot = cJSON_IsTrue(shot);
    r->timeout = timeout;
    r->received = mono_now();
    queue_push(r);
out:
    cJSON_Delete(req);
}

/* ---- signals, worker, run folder ---- */
static void on_signal(int sig)
{
    int saved = errno;
    char c = (char)sig;
    if (write(sig_pipe[1], &c, 1) < 0) { /* nothing to do */ }
    errno = saved;
}

static void *worker_main(void *arg)
{
    (void)arg;
    while (!stop_requested()) {
        request_t *r = queue_pop();
        if (r) { serve_request(r); request_free(r); continue; }
        worker_idle();
    }
    cdp_kill();
    request_t *r;
    while ((r = queue_pop())) {
        answer_error(r->id, "internal", "the browser plugin is shutting down");
        request_free(r);
    }
    return NULL;
}

static void setup_rundir(void)
{
    size_t cap;
    char *rundir = run_dir_buf(&cap);
    const char *rd = getenv("TERMD_PLUGIN_RUNDIR");
    struct stat st;
    if (rd && rd[0] == '/' && stat(rd, &st) == 0 && S_ISDIR(st.st_mode) && strlen(rd) < cap - 64) {
        snprintf(rundir, cap, "%s", rd);
        return;
    }
    const char *tmp = getenv("TMPDIR");
    if (!tmp || tmp[0] != '/' || strlen(tmp) > 300) tmp = "/tmp";
    snprintf(rundir, cap, "%s/termd-browser.XXXXXX", tmp);
    if (!mkdtemp(rundir)) {
        logmsg("mkdtemp %s: %s", rundir, strerror(errno));
        snprintf(rundir, cap, "/tmp");
        return;
    }
    own_rundir = true;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (common_init() < 0 || pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
        perror("termd-browser: pipe");
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    setup_rundir();

    /* the worker (and Chromium, which inherits the mask across fork and resets it before exec)
       must not take the signals: block them there, main polls the self-pipe */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM); sigaddset(&set, SIGINT); sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    pthread_t worker;
    if (pthread_create(&worker, NULL, worker_main, NULL) != 0) {
        logmsg("cannot start the worker thread");
        return 1;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    char *buf = malloc(65536);
    size_t len = 0, cap = 65536;
    bool discarding = false;
    if (!buf) abort();
    for (;;) {
        struct pollfd pf[2] = {{0, POLLIN, 0}, {sig_pipe[0], POLLIN, 0}};
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (pf[1].revents) break;                         /* SIGTERM/SIGINT/SIGHUP */
        if (!pf[0].revents) continue;
        if (len == cap) {
            size_t nc = cap * 2;
            char *nb = realloc(buf, nc);
            if (!nb) abort();
            buf = nb; cap = nc;
        }
        ssize_t n = read(0, buf + len, cap - len);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            break;
        }
        if (n == 0) {                                     /* EOF: a last line without newline counts */
            if (len > 0 && !discarding) handle_line(buf, len);
            break;
        }
        size_t start = 0, scan = len;
        len += (size_t)n;
        for (size_t i = scan; i < len; i++) {
            if (buf[i] != '\n') continue;
            if (discarding) discarding = false;
            else handle_line(buf + start, i - start);
            start = i + 1;
        }
        memmove(buf, buf + start, len - start);
        len -= start;
        if (len > MAX_LINE) {
            if (!discarding) answer_error(NULL, "too_large", "request line over 16 MiB; ignored");
            discarding = true;
            len = 0;
        }
    }
    free(buf);
    request_stop();
    int pg = atomic_load(&browser_pgid);
    if (pg > 0) kill(-pg, SIGKILL);                       /* the worker may be waiting on it */
    pthread_join(worker, NULL);
    if (own_rundir) rm_tree(run_dir());
    return 0;
}
