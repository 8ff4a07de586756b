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

#define DEFAULT_TIMEOUT   120.0
#define START_LIMIT       60.0   /* seconds for a kernel to answer kernel_info with iopub live */
#define INTERNAL_LIMIT    60.0   /* seconds for our own setup cells */
#define INTERRUPT_GRACE   5.0    /* seconds after SIGINT before the kernel is killed */
#define IOPUB_RETRY       0.2    /* resend kernel_info_request when iopub stays silent this long */
#define MAX_LINE          (64u << 20)
#define OUT_HEAD          (512u << 10)
#define OUT_TAIL          (512u << 10)
#define MAX_IMAGES_BYTES  (16u << 20)
#define ERR_TAIL          4096

static const char NO_OUTPUT[] = "[Code executed successfully with no output]";

/* ---------------------------------------------------------------- small helpers */

static void logmsg(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("termd-jupyter: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) { logmsg("out of memory"); exit(70); }
    return p;
}

static void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) { logmsg("out of memory"); exit(70); }
    return p;
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef struct { char *p; size_t len, cap; } buf_t;

static void buf_add(buf_t *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->len + n + 1) c *= 2;
        b->p = xrealloc(b->p, c);
        b->cap = c;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}
static void buf_adds(buf_t *b, const char *s) { buf_add(b, s, strlen(s)); }
static void buf_printf(buf_t *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof tmp) n = sizeof tmp - 1;
    buf_add(b, tmp, (size_t)n);
}
static void buf_free(buf_t *b) { free(b->p); memset(b, 0, sizeof *b); }
static const char *buf_str(const buf_t *b) { return b->p ? b->p : ""; }

/* Replace invalid UTF-8 with U+FFFD so every answer is valid UTF-8 JSON. */
static void utf8_clean(const char *s, size_t n, buf_t *out) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t len = 0;
        uint32_t cp = 0;
        if (c < 0x80) len = 1, cp = c;
        else if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
        else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
        else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07;
        bool ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++) {
            unsigned char d = (unsigned char)s[i + k];
            if ((d & 0xC0) != 0x80) ok = false;
            else cp = (cp << 6) | (d & 0x3F);
        }
        if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
                   cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)))
            ok = false;
        if (ok) { buf_add(out, s + i, len); i += len; }
        else { buf_adds(out, "\xEF\xBF\xBD"); i++; }
    }
}

/* Remove ANSI CSI sequences (colours and the like): ESC [ params final. */
static void strip_ansi(buf_t *b) {
    if (!b->p) return;
    size_t w = 0;
    for (size_t r = 0; r < b->len;) {
        if (b->p[r] == 0x1b && r + 1 < b->len && b->p[r + 1] == '[') {
            size_t k = r + 2;
            while (k < b->len && (unsigned char)b->p[k] >= 0x20 && (unsigned char)b->p[k] <= 0x3f) k++;
            while (k < b->len && (unsigned char)b->p[k] >= 0x20 && (unsigned char)b->p[k] <= 0x2f) k++;
            if (k < b->len && (unsigned char)b->p[k] >= 0x40 && (unsigned char)b->p[k] <= 0x7e) { r = k + 1; continue; }
        }
        b->p[w++] = b->p[r++];
    }
    b->len = w;
    b->p[w] = 0;
}

static void rstrip(buf_t *b) {
    while (b->len && strchr(" \t\r\n", b->p[b->len - 1])) b->p[--b->len] = 0;
}

static void write_all(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) { struct timespec ts = {0, 1000000}; nanosleep(&ts, NULL); continue; }
            return; /* EPIPE: nobody reads our answers any more */
        }
        s += w;
        n -= (size_t)w;
    }
}

/* ---------------------------------------------------------------- answers */

static void emit(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    if (!s) { logmsg("cannot print an answer (out of memory?)"); cJSON_Delete(o); return; }
    size_t n = strlen(s);
    s = xrealloc(s, n + 2);
    s[n] = '\n';
    write_all(1, s, n + 1);
    free(s);
    cJSON_Delete(o);
}

static cJSON *id_copy(const cJSON *id) { return id ? cJSON_Duplicate(id, 1) : cJSON_CreateNull(); }

static void answer_error(const cJSON *id, const char *code, const char *fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    buf_t clean = {0};
    utf8_clean(msg, strlen(msg), &clean);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "id", id_copy(id));
    cJSON_AddStringToObject(o, "observation", "error");
    cJSON_AddStringToObject(o, "content", buf_str(&clean));
    cJSON *ex = cJSON_AddObjectToObject(o, "extras");
    cJSON_AddStringToObject(ex, "code", code);
    buf_free(&clean);
    emit(o);
}

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

/* ---------------------------------------------------------------- kernel state */

enum { K_NONE, K_STARTING, K_READY };
enum { ST_SETUP, ST_SKILLS, ST_INIT, ST_CHDIR, ST_CELL };

static struct {
    void *ctx;
    char session[40];
    unsigned long msg_seq;
    char rundir[128];
    bool own_rundir;
    char *python;            /* resolved interpreter path, NULL until probed */
    char *skills_dir;        /* agentskills python folder or NULL */
    /* the current kernel */
    int state;
    pid_t pid;
    int gen;
    char key[65];
    char conn[192], base[192];
    void *shell, *control, *iopub;
    int errfd;               /* the kernel's stderr/stdout pipe */
    char errtail[ERR_TAIL + 1];
    double start_deadline, kir_sent;
    bool kir_reply, iopub_live;
    char *exe;               /* sys.executable reported by the kernel */
    char *cwd_pushed;        /* the cwd we last put the kernel in */
    bool need_setup, need_skills, need_init;
    /* what the next kernel start must say */
    char *death_note;
    char *last_cwd;          /* the kernel's cwd after the last cell */
} K = { .errfd = -1 };

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

/* ---------------------------------------------------------------- Jupyter wire */

static void iso_date(char *out, size_t n) {
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    char t[32];
    strftime(t, sizeof t, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, n, "%s.%06ldZ", t, ts.tv_nsec / 1000);
}

static void sign(const char *parts[4], char hex[65]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    size_t total = 0;
    for (int i = 0; i < 4; i++) total += strlen(parts[i]);
    char *cat = xmalloc(total + 1), *p = cat;
    for (int i = 0; i < 4; i++) { size_t l = strlen(parts[i]); memcpy(p, parts[i], l); p += l; }
    HMAC(EVP_sha256(), K.key, (int)strlen(K.key), (unsigned char *)cat, total, md, &mdlen);
    free(cat);
    for (unsigned i = 0; i < mdlen && i < 32; i++) sprintf(hex + 2 * i, "%02x", md[i]);
    hex[64] = 0;
}

/* Send one message; msg_id_out receives its id. Returns 0 or -1. */
static int send_msg(void *sock, const char *msg_type, cJSON *content, char *msg_id_out, size_t idn) {
    char msg_id[96], date[64];
    snprintf(msg_id, sizeof msg_id, "%s_%lu", K.session, ++K.msg_seq);
    if (!strcmp(msg_type, "kernel_info_request")) snprintf(msg_id, sizeof msg_id, "%s_kir_%lu", K.session, K.msg_seq);
    iso_date(date, sizeof date);
    cJSON *h = cJSON_CreateObject();
    cJSON_AddStringToObject(h, "msg_id", msg_id);
    cJSON_AddStringToObject(h, "session", K.session);
    cJSON_AddStringToObject(h, "username", "termd");
    cJSON_AddStringToObject(h, "date", date);
    cJSON_AddStringToObject(h, "msg_type", msg_type);
    cJSON_AddStringToObject(h, "version", "5.3");
    char *hs = cJSON_PrintUnformatted(h), *cs = cJSON_PrintUnformatted(content);
    cJSON_Delete(h);
    const char *parts[4] = { hs, "{}", "{}", cs };
    char sig[65];
    sign(parts, sig);
    const char *frames[6] = { "<IDS|MSG>", sig, hs, "{}", "{}", cs };
    int rc = 0;
    for (int i = 0; i < 6 && rc == 0; i++)
        if (zmq_send(sock, frames[i], strlen(frames[i]), i < 5 ? ZMQ_SNDMORE : 0) < 0) rc = -1;
    if (rc) logmsg("zmq_send %s: %s", msg_type, zmq_strerror(zmq_errno()));
    free(hs);
    free(cs);
    if (msg_id_out) snprintf(msg_id_out, idn, "%s", msg_id);
    return rc;
}

typedef struct { char msg_type[64]; char parent[96]; cJSON *content; } kmsg_t;

/* Receive one whole multipart message without waiting. 1: got one (check m->content), 0: none. */
static int recv_msg(void *sock, kmsg_t *m) {
    memset(m, 0, sizeof *m);
    zmq_msg_t f[8];
    int nf = 0, more = 1;
    int delim = -1;
    bool first = true;
    while (more) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, sock, first ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(&part);
            if (first) return 0;
            break;
        }
        first = false;
        more = zmq_msg_more(&part);
        if (delim < 0) {
            if (zmq_msg_size(&part) == 9 && !memcmp(zmq_msg_data(&part), "<IDS|MSG>", 9)) delim = 0;
            zmq_msg_close(&part);
            continue;
        }
        if (nf < 5) f[nf++] = part;   /* signature, header, parent, metadata, content */
        else zmq_msg_close(&part);     /* buffers */
    }
    int ok = 0;
    if (delim == 0 && nf == 5) {
        char *s[5];
        for (int i = 0; i < 5; i++) {
            size_t n = zmq_msg_size(&f[i]);
            s[i] = xmalloc(n + 1);
            memcpy(s[i], zmq_msg_data(&f[i]), n);
            s[i][n] = 0;
        }
        const char *parts[4] = { s[1], s[2], s[3], s[4] };
        char sig[65];
        sign(parts, sig);
        if (strlen(s[0]) != 64 || CRYPTO_memcmp(sig, s[0], 64)) {
            logmsg("dropped a kernel message with a bad signature");
        } else {
            cJSON *h = cJSON_Parse(s[1]), *p = cJSON_Parse(s[2]);
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(h, "msg_type");
            const cJSON *pid = cJSON_GetObjectItemCaseSensitive(p, "msg_id");
            if (cJSON_IsString(t)) {
                snprintf(m->msg_type, sizeof m->msg_type, "%s", t->valuestring);
                if (cJSON_IsString(pid)) snprintf(m->parent, sizeof m->parent, "%s", pid->valuestring);
                m->content = cJSON_Parse(s[4]);
                if (!m->content) m->content = cJSON_CreateObject();
                ok = 1;
            }
            cJSON_Delete(h);
            cJSON_Delete(p);
        }
        for (int i = 0; i < 5; i++) free(s[i]);
    }
    for (int i = 0; i < nf; i++) zmq_msg_close(&f[i]);
    (void)ok;
    return 1;   /* a message was taken off the socket; m->content is set only if it was valid */
}

/* ---------------------------------------------------------------- kernel process */

static bool is_exec(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

static char *which(const char *name) {
    if (strchr(name, '/')) return is_exec(name) ? xstrdup(name) : NULL;
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    char *copy = xstrdup(path), *save = NULL;
    for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        char cand[PATH_MAX];
        snprintf(cand, sizeof cand, "%s/%s", *d ? d : ".", name);
        if (is_exec(cand)) { free(copy); return xstrdup(cand); }
    }
    free(copy);
    return NULL;
}

static void child_signals_default(void) {
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    signal(SIGPIPE, SIG_DFL);
}

/* Does this interpreter have ipykernel? (a quick find_spec, not an import) */
static bool has_ipykernel(const char *py) {
    pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
        child_signals_default();
        int dn = open("/dev/null", O_RDWR);
        if (dn >= 0) { dup2(dn, 0); dup2(dn, 1); dup2(dn, 2); }
        execl(py, py, "-c",
              "import importlib.util as u,sys; sys.exit(0 if u.find_spec('ipykernel_launcher') else 3)",
              (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* Find a Python that can run ipykernel; on failure describe what was tried in why. */
static char *find_python(buf_t *why) {
    const char *env = getenv("TERMD_JUPYTER_PYTHON");
    const char *cands[] = { "python3", "/usr/bin/python3", "/usr/local/bin/python3", "python" };
    const char **list = cands;
    size_t n = sizeof cands / sizeof *cands;
    if (env && *env) { list = &env; n = 1; }
    for (size_t i = 0; i < n; i++) {
        char *p = which(list[i]);
        if (!p) { buf_printf(why, "%s%s: not found", why->len ? "; " : "", list[i]); continue; }
        if (has_ipykernel(p)) return p;
        buf_printf(why, "%s%s: no ipykernel module", why->len ? "; " : "", p);
        free(p);
    }
    return NULL;
}

static void close_sockets(void) {
    if (K.shell) zmq_close(K.shell);
    if (K.control) zmq_close(K.control);
    if (K.iopub) zmq_close(K.iopub);
    K.shell = K.control = K.iopub = NULL;
}

static void remove_kernel_files(void) {
    if (K.conn[0]) unlink(K.conn);
    for (int p = 1; p <= 5 && K.base[0]; p++) {
        char f[PATH_MAX + 8];
        snprintf(f, sizeof f, "%s-%d", K.base, p);
        unlink(f);
    }
}

static void *mksock(int type, int port) {
    void *s = zmq_socket(K.ctx, type);
    if (!s) return NULL;
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (type == ZMQ_SUB) {
        zmq_setsockopt(s, ZMQ_SUBSCRIBE, "", 0);
        zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof zero);
    }
    char ep[PATH_MAX + 32];
    snprintf(ep, sizeof ep, "ipc://%s-%d", K.base, port);
    if (zmq_connect(s, ep) < 0) { logmsg("zmq_connect %s: %s", ep, zmq_strerror(zmq_errno())); zmq_close(s); return NULL; }
    return s;
}

/* Start a kernel in cwd (if it is a folder). Returns 0, or -1 with the reason in why. */
static int kernel_start(const char *cwd, buf_t *why) {
    if (!K.python) {
        buf_t tried = {0};
        K.python = find_python(&tried);
        if (!K.python) {
            buf_printf(why, "no Python with ipykernel found (%s); install python3-ipykernel "
                       "(the jupyter plugin's setup does) or set TERMD_JUPYTER_PYTHON", buf_str(&tried));
            buf_free(&tried);
            return -1;
        }
        buf_free(&tried);
    }
    K.gen++;
    unsigned char rnd[32];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) { buf_adds(why, "getrandom failed"); return -1; }
    for (int i = 0; i < 32; i++) sprintf(K.key + 2 * i, "%02x", rnd[i]);
    snprintf(K.base, sizeof K.base, "%s/k%d", K.rundir, K.gen);
    snprintf(K.conn, sizeof K.conn, "%s/k%d.json", K.rundir, K.gen);
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "shell_port", 1);
    cJSON_AddNumberToObject(c, "iopub_port", 2);
    cJSON_AddNumberToObject(c, "stdin_port", 3);
    cJSON_AddNumberToObject(c, "control_port", 4);
    cJSON_AddNumberToObject(c, "hb_port", 5);
    cJSON_AddStringToObject(c, "ip", K.base);
    cJSON_AddStringToObject(c, "key", K.key);
    cJSON_AddStringToObject(c, "transport", "ipc");
    cJSON_AddStringToObject(c, "signature_scheme", "hmac-sha256");
    cJSON_AddStringToObject(c, "kernel_name", "python3");
    char *cs = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
    int fd = open(K.conn, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) { buf_printf(why, "cannot write %s: %s", K.conn, strerror(errno)); free(cs); return -1; }
    write_all(fd, cs, strlen(cs));
    close(fd);
    free(cs);

    /* everything the child needs is built before fork */
    char *argv[] = { K.python, "-m", "ipykernel_launcher", "-f", K.conn, NULL };
    extern char **environ;
    size_t ne = 0;
    while (environ[ne]) ne++;
    char **envp = xmalloc((ne + 4) * sizeof *envp);
    size_t k = 0;
    char ppid[64], pypath[PATH_MAX * 2];
    snprintf(ppid, sizeof ppid, "JPY_PARENT_PID=%d", (int)getpid());
    envp[k++] = ppid;
    envp[k++] = "PYDEVD_DISABLE_FILE_VALIDATION=1";
    const char *old_pp = getenv("PYTHONPATH");
    if (K.skills_dir) {
        snprintf(pypath, sizeof pypath, "PYTHONPATH=%s%s%s", K.skills_dir, old_pp && *old_pp ? ":" : "", old_pp ? old_pp : "");
        envp[k++] = pypath;
    }
    for (size_t i = 0; i < ne; i++) {
        if (!strncmp(environ[i], "JPY_PARENT_PID=", 15) || !strncmp(environ[i], "PYDEVD_DISABLE_FILE_VALIDATION=", 31)) continue;
        if (K.skills_dir && !strncmp(environ[i], "PYTHONPATH=", 11)) continue;
        envp[k++] = environ[i];
    }
    envp[k] = NULL;
    int ep[2];
    if (pipe2(ep, O_CLOEXEC) < 0) { buf_printf(why, "pipe: %s", strerror(errno)); free(envp); return -1; }
    int dn = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        buf_printf(why, "fork: %s", strerror(errno));
        close(ep[0]); close(ep[1]); if (dn >= 0) close(dn);
        free(envp);
        return -1;
    }
    if (pid == 0) {
        child_signals_default();
        setsid();
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        if (cwd) { struct stat st; if (stat(cwd, &st) == 0 && S_ISDIR(st.st_mode) && chdir(cwd) != 0) {} }
        if (dn >= 0) dup2(dn, 0);
        dup2(ep[1], 1);
        dup2(ep[1], 2);
        execve(K.python, argv, envp);
        dprintf(2, "cannot run %s: %s\n", K.python, strerror(errno));
        _exit(127);
    }
    free(envp);
    close(ep[1]);
    if (dn >= 0) close(dn);
    K.errfd = ep[0];
    fcntl(K.errfd, F_SETFL, fcntl(K.errfd, F_GETFL) | O_NONBLOCK);
    K.errtail[0] = 0;
    K.pid = pid;
    K.state = K_STARTING;
    K.start_deadline = now_s() + START_LIMIT;
    K.kir_reply = K.iopub_live = false;
    free(K.exe); K.exe = NULL;
    free(K.cwd_pushed);
    K.cwd_pushed = cwd ? xstrdup(cwd) : NULL;
    K.need_setup = true;
    K.need_skills = K.skills_dir != NULL;
    K.need_init = true;
    K.shell = mksock(ZMQ_DEALER, 1);
    K.iopub = mksock(ZMQ_SUB, 2);
    K.control = mksock(ZMQ_DEALER, 4);
    if (!K.shell || !K.iopub || !K.control) { buf_adds(why, "cannot create ZeroMQ sockets"); return -1; }
    cJSON *e = cJSON_CreateObject();
    send_msg(K.shell, "kernel_info_request", e, NULL, 0);
    cJSON_Delete(e);
    K.kir_sent = now_s();
    logmsg("kernel %d started: %s -m ipykernel_launcher -f %s", (int)pid, K.python, K.conn);
    return 0;
}

static void read_kernel_stderr(void) {
    char b[4096];
    for (;;) {
        ssize_t n = read(K.errfd, b, sizeof b);
        if (n <= 0) {
            if (n == 0 || (errno != EINTR && errno != EAGAIN)) { close(K.errfd); K.errfd = -1; }
            if (n < 0 && errno == EINTR) continue;
            return;
        }
        write_all(2, b, (size_t)n);
        size_t have = strlen(K.errtail);
        if ((size_t)n >= ERR_TAIL) { memcpy(K.errtail, b + n - ERR_TAIL, ERR_TAIL); K.errtail[ERR_TAIL] = 0; }
        else {
            if (have + (size_t)n > ERR_TAIL) { size_t drop = have + (size_t)n - ERR_TAIL; memmove(K.errtail, K.errtail + drop, have - drop + 1); have -= drop; }
            memcpy(K.errtail + have, b, (size_t)n);
            K.errtail[have + (size_t)n] = 0;
        }
    }
}

/* the last non-empty line of what the kernel wrote to stderr */
static void last_err_line(char *out, size_t n) {
    out[0] = 0;
    char tmp[ERR_TAIL + 1];
    snprintf(tmp, sizeof tmp, "%s", K.errtail);
    size_t l = strlen(tmp);
    while (l && strchr(" \t\r\n", tmp[l - 1])) tmp[--l] = 0;
    char *p = strrchr(tmp, '\n');
    const char *src = p ? p + 1 : tmp;
    size_t k = strlen(src);
    if (k >= n) k = n - 1;
    memcpy(out, src, k);
    out[k] = 0;
}

/* Kill the kernel's whole process group and reap it; describe how it ended in how (may be NULL). */
static void kernel_reap(int status, char *how, size_t hn) {
    if (how) {
        if (WIFEXITED(status)) snprintf(how, hn, "exit status %d", WEXITSTATUS(status));
        else if (WIFSIGNALED(status)) snprintf(how, hn, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
        else snprintf(how, hn, "ended");
    }
    if (K.pid > 0) kill(-K.pid, SIGKILL);   /* what it left behind in its group */
    if (K.errfd >= 0) { read_kernel_stderr(); if (K.errfd >= 0) close(K.errfd); K.errfd = -1; }
    close_sockets();
    remove_kernel_files();
    K.pid = 0;
    K.state = K_NONE;
}

static void kernel_kill(void) {
    if (K.pid <= 0) return;
    kill(-K.pid, SIGTERM);
    kill(K.pid, SIGTERM);
    int st = 0;
    double until = now_s() + 2.0;
    for (;;) {
        pid_t r = waitpid(K.pid, &st, WNOHANG);
        if (r == K.pid || (r < 0 && errno != EINTR)) break;
        if (now_s() > until) { kill(-K.pid, SIGKILL); kill(K.pid, SIGKILL); while (waitpid(K.pid, &st, 0) < 0 && errno == EINTR) {} break; }
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    kernel_reap(st, NULL, 0);
}

static char *proc_cwd(void) {
    if (K.pid <= 0) return NULL;
    char p[64], out[PATH_MAX];
    snprintf(p, sizeof p, "/proc/%d/cwd", (int)K.pid);
    ssize_t n = readlink(p, out, sizeof out - 1);
    if (n <= 0) return NULL;
    out[n] = 0;
    return xstrdup(out);
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
    for (int i = 0; i < 16; i++) sprintf(K.session + 2 * i, "%02x", rnd[i]);
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
