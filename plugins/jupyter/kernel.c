/* termd-jupyter's kernel process: finding a python with ipykernel, starting the kernel in its
 * own process group with a connection file in the private run folder, its ZeroMQ sockets, its
 * stderr tail, reaping and killing it, its working directory; and the kernel state K. */
#include "jupyter.h"

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

struct kstate K = { .errfd = -1 };

/* ---------------------------------------------------------------- kernel process */

static bool is_exec(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

char *which(const char *name) {
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

void child_signals_default(void) {
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
char *find_python(buf_t *why) {
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

void close_sockets(void) {
    if (K.shell) zmq_close(K.shell);
    if (K.control) zmq_close(K.control);
    if (K.iopub) zmq_close(K.iopub);
    K.shell = K.control = K.iopub = NULL;
}

void remove_kernel_files(void) {
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
int kernel_start(const char *cwd, buf_t *why) {
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
    for (int i = 0; i < 32; i++) sprintf(W.key + 2 * i, "%02x", rnd[i]);
    snprintf(K.base, sizeof K.base, "%s/k%d", K.rundir, K.gen);
    snprintf(K.conn, sizeof K.conn, "%s/k%d.json", K.rundir, K.gen);
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "shell_port", 1);
    cJSON_AddNumberToObject(c, "iopub_port", 2);
    cJSON_AddNumberToObject(c, "stdin_port", 3);
    cJSON_AddNumberToObject(c, "control_port", 4);
    cJSON_AddNumberToObject(c, "hb_port", 5);
    cJSON_AddStringToObject(c, "ip", K.base);
    cJSON_AddStringToObject(c, "key", W.key);
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

void read_kernel_stderr(void) {
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
void last_err_line(char *out, size_t n) {
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
void kernel_reap(int status, char *how, size_t hn) {
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

void kernel_kill(void) {
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

char *proc_cwd(void) {
    if (K.pid <= 0) return NULL;
    char p[64], out[PATH_MAX];
    snprintf(p, sizeof p, "/proc/%d/cwd", (int)K.pid);
    ssize_t n = readlink(p, out, sizeof out - 1);
    if (n <= 0) return NULL;
    out[n] = 0;
    return xstrdup(out);
}

