/* termd-jupyter: the jupyter plugin's program. It reads run_ipython requests as JSON lines on stdin,
 * runs them one at a time in one IPython kernel it starts on first use (Jupyter messaging protocol 5.3
 * over ZeroMQ, ipc transport in a private 0700 folder, HMAC-SHA256 signed), and writes one JSON answer
 * a line on stdout. It restarts a kernel that died, interrupts cells that time out, and ends the kernel
 * with itself (EOF on stdin, SIGTERM, PR_SET_PDEATHSIG for SIGKILL). */
#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>
#include "jupyter.h"


/* ---------------------------------------------------------------- requests */

typedef struct job {
    struct job *next;
    cJSON *id;
    char *code, *init_code, *cwd;
    double timeout;
    buf_t notes;          /* lines put before the cell's output (restart, init failures) */
    bool restarted;
} job_t;

static job_t *q_head, *q_tail;

static void job_free(job_t *j) {
    cJSON_Delete(j->id);
    free(j->code);
    free(j->init_code);
    free(j->cwd);
    buf_free(&j->notes);
    free(j);
}

/* ---------------------------------------------------------------- the step in flight */

/* the step in flight (at most one) */
static struct {
    bool active;
    int kind;
    char msg_id[96];
    bool got_reply, got_idle;
    double deadline;
    int interrupts;          /* SIGINTs sent */
    bool timed_out;
    char status[16];
    int exec_count;
    char *ename, *evalue;
    char *exe;
    /* output of a user cell */
    buf_t head, tail;        /* tail is a ring of OUT_TAIL bytes once head is full */
    size_t tail_start, omitted;
    bool pending_clear;
    cJSON *images;
    size_t images_bytes;
    int images_dropped;
} S;

static int sigfd = -1;
static bool quitting;

/* ---------------------------------------------------------------- output collection */

static void out_reset(void) {
    buf_free(&S.head);
    buf_free(&S.tail);
    S.tail_start = S.omitted = 0;
    cJSON_Delete(S.images);
    S.images = cJSON_CreateArray();
    S.images_bytes = 0;
    S.images_dropped = 0;
    S.pending_clear = false;
}

static void out_add(const char *s, size_t n) {
    if (S.pending_clear) { out_reset(); }
    if (S.head.len < OUT_HEAD) {
        size_t k = OUT_HEAD - S.head.len;
        if (k > n) k = n;
        buf_add(&S.head, s, k);
        s += k;
        n -= k;
    }
    if (!n) return;
    /* the tail keeps the last OUT_TAIL bytes: a ring once it is full */
    if (!S.tail.p) { S.tail.p = xmalloc(OUT_TAIL + 1); S.tail.cap = OUT_TAIL + 1; }
    for (size_t i = 0; i < n; i++) {
        if (S.tail.len < OUT_TAIL) S.tail.p[S.tail.len++] = s[i];
        else { S.tail.p[S.tail_start] = s[i]; S.tail_start = (S.tail_start + 1) % OUT_TAIL; S.omitted++; }
    }
}

static void out_text(buf_t *b) {
    buf_add(b, buf_str(&S.head), S.head.len);
    if (S.omitted) buf_printf(b, "\n[... %zu bytes of output left out ...]\n", S.omitted);
    if (S.tail.len) {
        buf_add(b, S.tail.p + S.tail_start, S.tail.len - S.tail_start);
        buf_add(b, S.tail.p, S.tail_start);
    }
}

static void out_image(const char *mime, const char *b64) {
    if (S.pending_clear) out_reset();
    size_t n = strlen(b64);
    if (S.images_bytes + n > MAX_IMAGES_BYTES) { S.images_dropped++; return; }
    buf_t u = {0};
    buf_printf(&u, "data:%s;base64,", mime);
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\n", b64[i])) buf_add(&u, b64 + i, 1);
    cJSON_AddItemToArray(S.images, cJSON_CreateString(buf_str(&u)));
    S.images_bytes += u.len;
    buf_free(&u);
}

/* ---------------------------------------------------------------- steps and jobs */

static void step_clear(void) {
    free(S.ename); free(S.evalue); free(S.exe);
    S.ename = S.evalue = S.exe = NULL;
    S.active = false;
    S.got_reply = S.got_idle = S.timed_out = false;
    S.interrupts = 0;
    S.status[0] = 0;
    S.exec_count = -1;
}

static const char *python_literal(const char *s, buf_t *b) {
    /* a JSON string literal is a valid Python str literal (\uXXXX, \n, \", \\ and raw UTF-8) */
    cJSON *str = cJSON_CreateString(s);
    char *lit = cJSON_PrintUnformatted(str);
    cJSON_Delete(str);
    buf_adds(b, lit);
    free(lit);
    return buf_str(b);
}

static int step_send(int kind, const char *code, bool silent, bool want_exe, double limit) {
    step_clear();
    out_reset();
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "code", code);
    cJSON_AddBoolToObject(c, "silent", silent);
    cJSON_AddBoolToObject(c, "store_history", !silent);
    cJSON *ue = cJSON_AddObjectToObject(c, "user_expressions");
    if (want_exe) cJSON_AddStringToObject(ue, "exe", "__import__('sys').executable");
    cJSON_AddBoolToObject(c, "allow_stdin", false);
    cJSON_AddBoolToObject(c, "stop_on_error", false);
    int rc = send_msg(K.shell, "execute_request", c, S.msg_id, sizeof S.msg_id);
    cJSON_Delete(c);
    S.active = true;
    S.kind = kind;
    S.deadline = now_s() + limit;
    return rc;
}

static void fmt_seconds(double t, char *out, size_t n) {
    if (t == (double)(long long)t && t < 1e15) snprintf(out, n, "%lld", (long long)t);
    else snprintf(out, n, "%g", t);
}

/* Answer the head job with the finished (or failed) user cell, then drop it. */
static void answer_cell(const char *status, const char *tail_note) {
    job_t *j = q_head;
    buf_t out = {0}, text = {0}, content = {0};
    out_text(&out);
    strip_ansi(&out);
    rstrip(&out);
    bool timeout = !strcmp(status, "timeout");
    buf_add(&text, buf_str(&j->notes), j->notes.len);
    if (out.len) buf_add(&text, out.p, out.len);
    else if (!timeout && !tail_note) buf_adds(&text, NO_OUTPUT);
    rstrip(&text);
    if (S.images_dropped) {
        if (text.len) buf_adds(&text, "\n");
        buf_printf(&text, "[%d image(s) left out: over %u MiB of images]", S.images_dropped, MAX_IMAGES_BYTES >> 20);
    }
    if (timeout) {
        char secs[64];
        fmt_seconds(j->timeout, secs, sizeof secs);
        if (text.len) buf_adds(&text, "\n");
        buf_printf(&text, "[Execution timed out (%s seconds).]", secs);
    }
    if (tail_note) {
        if (text.len) buf_adds(&text, "\n");
        buf_adds(&text, tail_note);
    }
    buf_free(&out);
    char *kcwd = proc_cwd(), here[PATH_MAX];
    if (kcwd) { free(K.last_cwd); K.last_cwd = xstrdup(kcwd); }
    const char *cwd = kcwd ? kcwd : K.last_cwd ? K.last_cwd : K.cwd_pushed ? K.cwd_pushed : j->cwd ? j->cwd
                    : getcwd(here, sizeof here) ? here : "";
    buf_printf(&text, "\n[Jupyter current working directory: %s]", cwd);
    buf_printf(&text, "\n[Jupyter Python interpreter: %s]", K.exe ? K.exe : K.python ? K.python : "");
    free(kcwd);
    utf8_clean(text.p, text.len, &content);
    buf_t code = {0};
    utf8_clean(j->code, strlen(j->code), &code);

    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "id", id_copy(j->id));
    cJSON_AddStringToObject(o, "observation", "run_ipython");
    cJSON_AddStringToObject(o, "content", buf_str(&content));
    cJSON *ex = cJSON_AddObjectToObject(o, "extras");
    cJSON_AddStringToObject(ex, "code", buf_str(&code));
    cJSON_AddItemToObject(ex, "image_urls", S.images ? S.images : cJSON_CreateArray());
    S.images = NULL;
    cJSON_AddStringToObject(ex, "status", status);
    if (S.exec_count >= 0) cJSON_AddNumberToObject(ex, "execution_count", S.exec_count);
    else cJSON_AddNullToObject(ex, "execution_count");
    cJSON_AddBoolToObject(ex, "restarted", j->restarted);
    emit(o);
    buf_free(&text);
    buf_free(&content);
    buf_free(&code);
    out_reset();
    q_head = j->next;
    if (!q_head) q_tail = NULL;
    job_free(j);
}

static void kernel_gone(int status, const char *why_extra);

static void fail_head(const char *code, const char *msg) {
    job_t *j = q_head;
    answer_error(j->id, code, "%s", msg);
    q_head = j->next;
    if (!q_head) q_tail = NULL;
    job_free(j);
}

/* Move the head job forward: start the kernel or send its next step. Loops until something waits. */
static void pump(void) {
    while (q_head && !S.active && !quitting) {
        job_t *j = q_head;
        /* a kernel that died between cells (its SIGCHLD maybe not read yet) is noticed before a step is sent */
        int st;
        if (K.state != K_NONE && K.pid > 0 && waitpid(K.pid, &st, WNOHANG) == K.pid) {
            logmsg("kernel %d ended", (int)K.pid);
            kernel_gone(st, NULL);
            continue;
        }
        if (K.state == K_NONE) {
            if (K.death_note) {
                buf_adds(&j->notes, K.death_note);
                buf_adds(&j->notes, "\n");
                j->restarted = true;
                free(K.death_note);
                K.death_note = NULL;
            }
            buf_t why = {0};
            if (kernel_start(j->cwd, &why) < 0) {
                char msg[2048];
                snprintf(msg, sizeof msg, "cannot start the IPython kernel: %s", buf_str(&why));
                buf_free(&why);
                kernel_kill();
                fail_head("plugin_failed", msg);
                continue;
            }
            buf_free(&why);
            return;
        }
        if (K.state == K_STARTING) return;
        if (K.need_setup) {
            step_send(ST_SETUP, "try:\n    get_ipython().run_line_magic('colors', 'nocolor')\nexcept Exception:\n    pass\n",
                      true, true, INTERNAL_LIMIT);
            return;
        }
        if (K.need_skills) {
            step_send(ST_SKILLS, "from agentskills import *", true, false, INTERNAL_LIMIT);
            return;
        }
        if (K.need_init && j->init_code && *j->init_code) {
            step_send(ST_INIT, j->init_code, true, false, j->timeout);
            return;
        }
        if (j->cwd && (!K.cwd_pushed || strcmp(j->cwd, K.cwd_pushed))) {
            buf_t code = {0}, lit = {0};
            buf_adds(&code, "try:\n    __import__('os').chdir(");
            buf_adds(&code, python_literal(j->cwd, &lit));
            buf_adds(&code, ")\nexcept Exception:\n    pass\n");
            step_send(ST_CHDIR, buf_str(&code), true, false, INTERNAL_LIMIT);
            buf_free(&code);
            buf_free(&lit);
            free(K.cwd_pushed);
            K.cwd_pushed = xstrdup(j->cwd);
            return;
        }
        step_send(ST_CELL, j->code, false, false, j->timeout);
        return;
    }
}

/* A step got both its execute_reply and its idle status. */
static void step_done(void) {
    job_t *j = q_head;
    int kind = S.kind;
    bool err = !strcmp(S.status, "error") || !strcmp(S.status, "aborted");
    switch (kind) {
    case ST_SETUP:
        K.need_setup = false;
        if (S.exe) { free(K.exe); K.exe = S.exe; S.exe = NULL; }
        break;
    case ST_SKILLS:
        K.need_skills = false;
        if (err && j)
            buf_printf(&j->notes, "[agentskills could not be loaded: %s: %s]\n", S.ename ? S.ename : "error", S.evalue ? S.evalue : S.status);
        break;
    case ST_INIT:
        K.need_init = false;
        if (err && j)
            buf_printf(&j->notes, "[kernel_init_code failed: %s: %s]\n", S.ename ? S.ename : "error", S.evalue ? S.evalue : S.status);
        if (S.timed_out && j) buf_adds(&j->notes, "[kernel_init_code timed out and was interrupted]\n");
        break;
    case ST_CHDIR:
        break;
    case ST_CELL:
        if (j) {
            const char *st = S.timed_out ? "timeout" : !strcmp(S.status, "ok") ? "ok" : "error";
            const char *note = !strcmp(S.status, "aborted") ? "[The kernel aborted this cell; it did not run.]" : NULL;
            answer_cell(st, note);
        }
        break;
    }
    step_clear();
}

/* ---------------------------------------------------------------- kernel messages */

static const char *str_item(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* undo Python's repr() of a simple str: '...' or "..." with backslash escapes of quotes and backslashes */
static char *unrepr(const char *r) {
    size_t n = strlen(r);
    if (n < 2 || (r[0] != '\'' && r[0] != '"') || r[n - 1] != r[0]) return xstrdup(r);
    char *out = xmalloc(n), *w = out;
    for (size_t i = 1; i + 1 < n; i++) {
        if (r[i] == '\\' && i + 2 < n) i++;
        *w++ = r[i];
    }
    *w = 0;
    return out;
}

static void on_shell(kmsg_t *m) {
    if (!strcmp(m->msg_type, "kernel_info_reply")) {
        if (K.state == K_STARTING && strstr(m->parent, "_kir_")) K.kir_reply = true;
        return;
    }
    if (!S.active || strcmp(m->parent, S.msg_id) || strcmp(m->msg_type, "execute_reply")) return;
    S.got_reply = true;
    snprintf(S.status, sizeof S.status, "%s", str_item(m->content, "status") ? str_item(m->content, "status") : "error");
    const cJSON *ec = cJSON_GetObjectItemCaseSensitive(m->content, "execution_count");
    if (cJSON_IsNumber(ec) && S.kind == ST_CELL) S.exec_count = ec->valueint;
    const char *en = str_item(m->content, "ename"), *ev = str_item(m->content, "evalue");
    if (en) { free(S.ename); S.ename = xstrdup(en); }
    if (ev) { free(S.evalue); S.evalue = xstrdup(ev); }
    const cJSON *ue = cJSON_GetObjectItemCaseSensitive(m->content, "user_expressions");
    const cJSON *exe = cJSON_GetObjectItemCaseSensitive(ue, "exe");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(exe, "data");
    const char *tp = str_item(data, "text/plain");
    if (tp) { free(S.exe); S.exe = unrepr(tp); }
}

static void on_iopub(kmsg_t *m) {
    /* any iopub answer to our kernel_info_request proves the subscription is live */
    if (!strcmp(m->msg_type, "status") && strstr(m->parent, "_kir_")) K.iopub_live = true;
    if (!S.active || strcmp(m->parent, S.msg_id)) return;
    const cJSON *c = m->content;
    if (!strcmp(m->msg_type, "status")) {
        const char *st = str_item(c, "execution_state");
        if (st && !strcmp(st, "idle")) S.got_idle = true;
        return;
    }
    if (S.kind != ST_CELL) return;
    if (!strcmp(m->msg_type, "execute_input")) {
        const cJSON *ec = cJSON_GetObjectItemCaseSensitive(c, "execution_count");
        if (cJSON_IsNumber(ec)) S.exec_count = ec->valueint;
    } else if (!strcmp(m->msg_type, "stream")) {
        const char *t = str_item(c, "text");
        if (t) out_add(t, strlen(t));
    } else if (!strcmp(m->msg_type, "execute_result") || !strcmp(m->msg_type, "display_data")) {
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(c, "data");
        const char *png = str_item(data, "image/png"), *jpeg = str_item(data, "image/jpeg");
        const char *tp = str_item(data, "text/plain");
        if (png) out_image("image/png", png);
        else if (jpeg) out_image("image/jpeg", jpeg);
        else if (tp) {
            out_add(tp, strlen(tp));
            out_add("\n", 1);
        }
    } else if (!strcmp(m->msg_type, "error")) {
        const char *en = str_item(c, "ename");
        if (S.timed_out && en && !strcmp(en, "KeyboardInterrupt")) return;  /* our own interrupt */
        const cJSON *tb = cJSON_GetObjectItemCaseSensitive(c, "traceback");
        const cJSON *line;
        bool any = false;
        cJSON_ArrayForEach(line, tb) {
            if (!cJSON_IsString(line)) continue;
            if (any) out_add("\n", 1);
            out_add(line->valuestring, strlen(line->valuestring));
            any = true;
        }
        if (!any) {
            char t[512];
            snprintf(t, sizeof t, "%s: %s", en ? en : "Error", str_item(c, "evalue") ? str_item(c, "evalue") : "");
            out_add(t, strlen(t));
        }
        out_add("\n", 1);
    } else if (!strcmp(m->msg_type, "clear_output")) {
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(c, "wait");
        if (cJSON_IsTrue(w)) S.pending_clear = true;
        else out_reset();
    }
}

static void drain(void *sock, void (*fn)(kmsg_t *)) {
    for (int i = 0; i < 10000; i++) {   /* bounded: the loop comes back for more */
        if (!sock) return;
        kmsg_t m;
        if (!recv_msg(sock, &m)) return;
        if (m.content) fn(&m);
        cJSON_Delete(m.content);
    }
}

/* The kernel process ended (or was killed by us); fail what was in flight. */
static void kernel_gone(int status, const char *why_extra) {
    char how[128];
    bool starting = K.state == K_STARTING;
    kernel_reap(status, how, sizeof how);
    char errline[512];
    last_err_line(errline, sizeof errline);
    if (starting) {
        if (q_head) {
            char msg[1200];
            snprintf(msg, sizeof msg, "the IPython kernel (%s) ended before it was ready (%s)%s%s",
                     K.python ? K.python : "python3", how, errline[0] ? ": " : "", errline);
            fail_head("plugin_failed", msg);
        }
        step_clear();
        return;
    }
    char note[1024];
    if (why_extra) snprintf(note, sizeof note, "%s", why_extra);
    else snprintf(note, sizeof note, "[The IPython kernel died (%s) while running this cell. "
                  "A new kernel will be started for the next cell; variables are lost.]", how);
    free(K.death_note);
    char dn[512];
    snprintf(dn, sizeof dn, "[The IPython kernel had died (%s) and was restarted; variables from earlier cells are lost.]", how);
    if (why_extra) snprintf(dn, sizeof dn, "[The IPython kernel was restarted after a timeout it did not stop on; variables from earlier cells are lost.]");
    K.death_note = xstrdup(dn);
    if (S.active && q_head) {
        if (S.kind == ST_CELL) answer_cell(S.timed_out ? "timeout" : "error", note);
        else {
            char msg[1200];
            snprintf(msg, sizeof msg, "the IPython kernel died (%s) while preparing the cell%s%s", how,
                     errline[0] ? ": " : "", errline);
            answer_error(q_head->id, "internal", "%s", msg);
            job_t *j = q_head;
            q_head = j->next;
            if (!q_head) q_tail = NULL;
            job_free(j);
        }
    }
    step_clear();
}

/* ---------------------------------------------------------------- stdin */

static bool plugins_has(const char *list, const char *name) {
    if (!list) return false;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        while (*p == ',' || *p == ' ') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        const char *t = e;
        while (t > p && t[-1] == ' ') t--;
        if ((size_t)(t - p) == n && !strncmp(p, name, n)) return true;
        if (t - p == 3 && !strncmp(p, "all", 3)) return true;
        p = e;
    }
    return false;
}

static void handle_line(char *line, size_t len) {
    while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t')) len--;
    size_t s = 0;
    while (s < len && (line[s] == ' ' || line[s] == '\t')) s++;
    if (s == len) return;
    cJSON *req = cJSON_ParseWithLength(line + s, len - s);
    if (!req || !cJSON_IsObject(req)) {
        answer_error(NULL, "bad_json", req ? "a request must be a JSON object" : "the line is not valid JSON");
        cJSON_Delete(req);
        return;
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(req, "id");
    const cJSON *action = cJSON_GetObjectItemCaseSensitive(req, "action");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(req, "args");
    const cJSON *cwd = cJSON_GetObjectItemCaseSensitive(req, "cwd");
    if (id && !cJSON_IsString(id) && !cJSON_IsNumber(id)) {
        answer_error(id, "bad_request", "id must be a string or an integer");
    } else if (!cJSON_IsString(action)) {
        answer_error(id, "bad_request", "missing field: action (a string)");
    } else if (strcmp(action->valuestring, "run_ipython")) {
        answer_error(id, "unknown_action", "unknown action: %.200s (this plugin serves run_ipython)", action->valuestring);
    } else if (args && !cJSON_IsObject(args) && !cJSON_IsNull(args)) {
        answer_error(id, "bad_request", "args must be an object");
    } else if (cwd && !cJSON_IsString(cwd) && !cJSON_IsNull(cwd)) {
        answer_error(id, "bad_request", "cwd must be a string");
    } else {
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(args, "code");
        const cJSON *to = cJSON_GetObjectItemCaseSensitive(args, "timeout");
        const cJSON *ic = cJSON_GetObjectItemCaseSensitive(args, "kernel_init_code");
        if (!cJSON_IsString(code)) {
            answer_error(id, "bad_request", code ? "args.code must be a string" : "missing field: args.code");
        } else if (to && !cJSON_IsNull(to) && (!cJSON_IsNumber(to) || !(to->valuedouble > 0) || to->valuedouble > 1e9)) {
            answer_error(id, "bad_request", "args.timeout must be a number of seconds above 0");
        } else if (ic && !cJSON_IsNull(ic) && !cJSON_IsString(ic)) {
            answer_error(id, "bad_request", "args.kernel_init_code must be a string");
        } else {
            job_t *j = xmalloc(sizeof *j);
            memset(j, 0, sizeof *j);
            j->id = id_copy(id);
            j->code = xstrdup(code->valuestring);
            j->init_code = cJSON_IsString(ic) ? xstrdup(ic->valuestring) : NULL;
            j->cwd = cJSON_IsString(cwd) && *cwd->valuestring ? xstrdup(cwd->valuestring) : NULL;
            j->timeout = cJSON_IsNumber(to) ? to->valuedouble : DEFAULT_TIMEOUT;
            if (q_tail) q_tail->next = j; else q_head = j;
            q_tail = j;
        }
    }
    cJSON_Delete(req);
}

static buf_t inbuf;
static bool in_skip;   /* discarding the rest of an over-long line */

static bool read_stdin(void) {
    char b[65536];
    ssize_t n = read(0, b, sizeof b);
    if (n < 0) return errno == EINTR || errno == EAGAIN;
    if (n == 0) {
        if (inbuf.len && !in_skip) handle_line(inbuf.p, inbuf.len);
        inbuf.len = 0;
        return false;
    }
    char *p = b, *end = b + n;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t k = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (!in_skip) {
            if (inbuf.len + k > MAX_LINE) {
                answer_error(NULL, "too_large", "request line over %u MiB left out", MAX_LINE >> 20);
                in_skip = true;
                inbuf.len = 0;
            } else buf_add(&inbuf, p, k);
        }
        if (nl) {
            if (!in_skip) handle_line(inbuf.p ? inbuf.p : (char *)"", inbuf.len);
            in_skip = false;
            inbuf.len = 0;
            p = nl + 1;
        } else p = end;
    }
    return true;
}

/* ---------------------------------------------------------------- main loop */

static void on_signal(void) {
    struct signalfd_siginfo si;
    while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGCHLD) {
            int st;
            if (K.pid > 0 && waitpid(K.pid, &st, WNOHANG) == K.pid) {
                logmsg("kernel %d ended", (int)K.pid);
                kernel_gone(st, NULL);
            }
            while (waitpid(-1, &st, WNOHANG) > 0) {}
        } else {
            logmsg("signal %d: ending", (int)si.ssi_signo);
            quitting = true;
        }
    }
}

static void timers(void) {
    double t = now_s();
    if (K.state == K_STARTING) {
        if (K.kir_reply && K.iopub_live) {
            K.state = K_READY;
        } else if (t > K.start_deadline) {
            if (q_head) {
                char e[512], msg[1024];
                last_err_line(e, sizeof e);
                snprintf(msg, sizeof msg, "the IPython kernel did not become ready within %g seconds%s%s", START_LIMIT,
                         e[0] ? ": " : "", e);
                fail_head("plugin_failed", msg);
            }
            kernel_kill();
        } else if (K.kir_reply && t - K.kir_sent > IOPUB_RETRY) {
            cJSON *e = cJSON_CreateObject();
            send_msg(K.shell, "kernel_info_request", e, NULL, 0);
            cJSON_Delete(e);
            K.kir_sent = t;
        }
    }
    if (S.active && t >= S.deadline && K.pid > 0) {
        if (S.interrupts == 0) {
            S.timed_out = true;
            kill(-K.pid, SIGINT);
            S.interrupts = 1;
            S.deadline = t + INTERRUPT_GRACE / 2;
        } else if (S.interrupts == 1) {
            kill(-K.pid, SIGINT);
            S.interrupts = 2;
            S.deadline = t + INTERRUPT_GRACE / 2;
        } else {
            logmsg("kernel %d did not stop on SIGINT: killing it", (int)K.pid);
            kill(-K.pid, SIGKILL);
            kill(K.pid, SIGKILL);
            int st = 0;
            while (waitpid(K.pid, &st, 0) < 0 && errno == EINTR) {}
            kernel_gone(st, "[The kernel did not stop when interrupted and was restarted; variables are lost.]");
        }
    }
}

static double next_wait_ms(void) {
    double t = now_s(), d = 1e9;
    if (K.state == K_STARTING) {
        d = K.start_deadline - t;
        if (K.kir_reply) { double r = K.kir_sent + IOPUB_RETRY - t; if (r < d) d = r; }
        if (K.kir_reply && K.iopub_live) d = 0;
    }
    if (S.active && S.deadline - t < d) d = S.deadline - t;
    if (d < 0) d = 0;
    if (d > 3600) return -1;
    return d * 1000.0 + 1;
}

static void setup_rundir(void) {
    const char *rd = getenv("TERMD_PLUGIN_RUNDIR");
    struct stat st;
    /* ipc socket paths must fit in sun_path (108 bytes): "<dir>/k<gen>-<port>" */
    if (rd && *rd && strlen(rd) < 80 && stat(rd, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(K.rundir, sizeof K.rundir, "%s", rd);
        chmod(K.rundir, 0700);
        return;
    }
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp || strlen(tmp) > 70) tmp = "/tmp";
    snprintf(K.rundir, sizeof K.rundir, "%s/termd-jupyter.XXXXXX", tmp);
    if (!mkdtemp(K.rundir)) {
        snprintf(K.rundir, sizeof K.rundir, "/tmp/termd-jupyter.XXXXXX");
        if (!mkdtemp(K.rundir)) { logmsg("mkdtemp: %s", strerror(errno)); exit(1); }
    }
    K.own_rundir = true;
}

static void find_skills(void) {
    if (!plugins_has(getenv("TERMD_PLUGINS"), "agentskills")) return;
    char dir[PATH_MAX];
    const char *pd = getenv("TERMD_PLUGIN_DIR");
    if (pd && *pd) snprintf(dir, sizeof dir, "%s/agentskills/python", pd);
    else {
        /* <plugin dir>/jupyter/termd-jupyter → <plugin dir>/agentskills/python */
        char self[PATH_MAX - 32];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) return;
        self[n] = 0;
        for (int i = 0; i < 2; i++) { char *sl = strrchr(self, '/'); if (sl) *sl = 0; }
        snprintf(dir, sizeof dir, "%s/agentskills/python", self);
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) { logmsg("agentskills enabled but %s is missing", dir); return; }
    K.skills_dir = xstrdup(dir);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGCHLD);
    sigaddset(&ss, SIGTERM);
    sigaddset(&ss, SIGINT);
    sigaddset(&ss, SIGHUP);
    sigprocmask(SIG_BLOCK, &ss, NULL);
    sigfd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sigfd < 0) { logmsg("signalfd: %s", strerror(errno)); return 1; }
    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);

    unsigned char rnd[16];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) memset(rnd, 0, sizeof rnd);
    for (int i = 0; i < 16; i++) sprintf(W.session + 2 * i, "%02x", rnd[i]);
    K.ctx = zmq_ctx_new();
    if (!K.ctx) { logmsg("zmq_ctx_new failed"); return 1; }
    zmq_ctx_set(K.ctx, ZMQ_BLOCKY, 0);
    setup_rundir();
    find_skills();
    step_clear();
    out_reset();

    bool in_open = true;
    while (!quitting && in_open) {
        zmq_pollitem_t it[6];
        int n = 0;
        it[n++] = (zmq_pollitem_t){ NULL, 0, ZMQ_POLLIN, 0 };
        it[n++] = (zmq_pollitem_t){ NULL, sigfd, ZMQ_POLLIN, 0 };
        int ierr = -1, ish = -1, iio = -1, ict = -1;
        if (K.errfd >= 0) { ierr = n; it[n++] = (zmq_pollitem_t){ NULL, K.errfd, ZMQ_POLLIN, 0 }; }
        if (K.shell) { ish = n; it[n++] = (zmq_pollitem_t){ K.shell, 0, ZMQ_POLLIN, 0 }; }
        if (K.iopub) { iio = n; it[n++] = (zmq_pollitem_t){ K.iopub, 0, ZMQ_POLLIN, 0 }; }
        if (K.control) { ict = n; it[n++] = (zmq_pollitem_t){ K.control, 0, ZMQ_POLLIN, 0 }; }
        double w = next_wait_ms();
        int rc = zmq_poll(it, n, w < 0 ? -1 : (long)w);
        if (rc < 0 && zmq_errno() != EINTR) { logmsg("zmq_poll: %s", zmq_strerror(zmq_errno())); break; }
        if (rc > 0) {
            if (ierr >= 0 && (it[ierr].revents & (ZMQ_POLLIN | ZMQ_POLLERR))) read_kernel_stderr();
            /* iopub before shell: outputs are published before the reply is sent */
            if (iio >= 0 && (it[iio].revents & ZMQ_POLLIN)) drain(K.iopub, on_iopub);
            if (ish >= 0 && (it[ish].revents & ZMQ_POLLIN)) { drain(K.iopub, on_iopub); drain(K.shell, on_shell); }
            if (ict >= 0 && (it[ict].revents & ZMQ_POLLIN)) { kmsg_t m; while (K.control && recv_msg(K.control, &m)) cJSON_Delete(m.content); }
            if (it[1].revents & ZMQ_POLLIN) on_signal();
            if (it[0].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) in_open = read_stdin();
        }
        if (S.active && S.got_reply && S.got_idle) step_done();
        timers();
        pump();
    }
    /* answer what is left, end the kernel, remove our files */
    if (S.active) step_clear();
    while (q_head) fail_head("internal", "the jupyter plugin is shutting down");
    kernel_kill();
    if (K.own_rundir) rmdir(K.rundir);
    zmq_ctx_term(K.ctx);
    return 0;
}
