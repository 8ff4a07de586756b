/* termd-browser's Chromium: spawn with --remote-debugging-pipe (fds 3/4) in its own process group,
   NUL-framed CDP messages, replies matched by id, events (dialogs, loading, tabs, downloads), kill. */
#include "browser.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

browser_t B;
void rm_tree(const char *path);

void note(const char *fmt, ...)
{
    size_t n = strlen(B.notes);
    if (n + 2 >= sizeof B.notes) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(B.notes + n, sizeof B.notes - n, fmt, ap);
    va_end(ap);
    n = strlen(B.notes);
    if (n + 1 < sizeof B.notes) { B.notes[n] = '\n'; B.notes[n + 1] = 0; }
}

static const char *find_chromium(void)
{
    static char path[1024];
    const char *env = getenv("TERMD_BROWSER_CHROMIUM");
    if (env && env[0] && access(env, X_OK) == 0) return env;
    static const char *fixed[] = {
        "/usr/lib/chromium/chromium",                   /* Debian/Ubuntu (skip the sh wrapper) */
        "/usr/lib/chromium-browser/chromium-browser",
        "/usr/lib64/chromium-browser/chromium-browser", /* Fedora */
        NULL };
    for (int i = 0; fixed[i]; i++)
        if (access(fixed[i], X_OK) == 0) return fixed[i];
    static const char *names[] = { "chromium", "chromium-browser", "google-chrome", "google-chrome-stable", NULL };
    const char *p = getenv("PATH");
    if (!p || !*p) p = "/usr/local/bin:/usr/bin:/bin";
    for (int i = 0; names[i]; i++) {
        const char *s = p;
        while (*s) {
            const char *e = strchr(s, ':');
            size_t n = e ? (size_t)(e - s) : strlen(s);
            if (n > 0 && n < 900) {
                snprintf(path, sizeof path, "%.*s/%s", (int)n, s, names[i]);
                if (access(path, X_OK) == 0) return path;
            }
            s += n;
            if (*s == ':') s++;
        }
    }
    return NULL;
}

static void last_log_line(char *out, size_t outlen)
{
    out[0] = 0;
    char p[600];
    snprintf(p, sizeof p, "%s/chromium.log", run_dir());
    FILE *f = fopen(p, "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        /* dbus noise is always there and never the reason */
        if (n && !strstr(line, "dbus") && !strstr(line, "D-Bus") && outlen) {
            /* a copy, not snprintf: gcc -O1 warns that it may truncate */
            size_t k = n < outlen - 1 ? n : outlen - 1;
            memcpy(out, line, k);
            out[k] = 0;
        }
    }
    fclose(f);
}

static bool reaped;
static int reaped_status;

/* has the browser process exited? (its helpers may keep the pipe open after it died) */
static bool browser_exited(void)
{
    if (B.pid <= 0) return reaped;
    if (!reaped && waitpid(B.pid, &reaped_status, WNOHANG) == B.pid) reaped = true;
    return reaped;
}

static void mark_dead(const char *why)
{
    if (!B.alive && B.pid == 0) return;
    B.alive = false;
    if (B.pid > 0) {
        int st = reaped_status;
        pid_t w = reaped ? B.pid : 0;
        for (int i = 0; i < 20 && !reaped && (w = waitpid(B.pid, &st, WNOHANG)) == 0; i++) usleep(10000);
        if (w == B.pid) {
            B.pid = -B.pid;                      /* reaped: cdp_kill must not wait for it */
            if (WIFSIGNALED(st)) snprintf(B.died_reason, sizeof B.died_reason, "Chromium was killed by signal %d", WTERMSIG(st));
            else snprintf(B.died_reason, sizeof B.died_reason, "Chromium exited with status %d", WEXITSTATUS(st));
        } else {
            snprintf(B.died_reason, sizeof B.died_reason, "Chromium stopped answering (%s)", why);
        }
    }
    cdp_kill();
}

/* processes outside the group (Chromium's crashpad handlers setsid) that name our profile folder */
static void kill_by_path(const char *path)
{
    DIR *d = opendir("/proc");
    if (!d) return;
    struct dirent *e;
    size_t pl = strlen(path);
    while ((e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        char p[300], buf[8192];
        snprintf(p, sizeof p, "/proc/%s/cmdline", e->d_name);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0) continue;
        for (ssize_t i = 0; i < n; i++) if (!buf[i]) buf[i] = ' ';
        buf[n] = 0;
        if (memmem(buf, (size_t)n, path, pl)) kill((pid_t)atoi(e->d_name), SIGKILL);
    }
    closedir(d);
}

void cdp_kill(void)
{
    if (B.pid < 0) {                             /* already reaped; its group may live on */
        kill(B.pid, SIGKILL);
        B.pid = 0;
    }
    if (B.pid > 0) {
        kill(-B.pid, SIGKILL);
        kill(B.pid, SIGKILL);
        while (waitpid(B.pid, NULL, 0) < 0 && errno == EINTR) {}
        B.pid = 0;
    }
    atomic_store(&browser_pgid, 0);
    if (B.wfd > 0) close(B.wfd);
    if (B.rfd > 0) close(B.rfd);
    B.wfd = B.rfd = -1;
    B.alive = false;
    B.rlen = 0;
    B.ntabs = 0;
    B.active = 0;
    for (int i = 0; i < B.npending; i++) free(B.pending_new[i]);
    B.npending = 0;
    if (B.profile[0]) {
        kill_by_path(B.profile);
        rm_tree(B.profile);
        B.profile[0] = 0;
    }
}

/* ---- framing ---- */
static int send_msg(int id, const char *method, cJSON *params, const char *session)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "id", id);
    cJSON_AddStringToObject(m, "method", method);
    cJSON_AddItemToObject(m, "params", params ? params : cJSON_CreateObject());
    if (session && session[0]) cJSON_AddStringToObject(m, "sessionId", session);
    char *s = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    if (!s) return -1;
    size_t n = strlen(s) + 1;                     /* the NUL is the frame end */
    const char *p = s;
    int rc = 0;
    while (n > 0) {
        ssize_t w = write(B.wfd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) { struct pollfd pf = {B.wfd, POLLOUT, 0}; poll(&pf, 1, 100); continue; }
            rc = -1;
            break;
        }
        p += w; n -= (size_t)w;
    }
    free(s);
    return rc;
}

static tab_t *tab_by_session(const char *s)
{
    if (!s) return NULL;
    for (int i = 0; i < B.ntabs; i++)
        if (!strcmp(B.tabs[i].session, s)) return &B.tabs[i];
    return NULL;
}

static tab_t *tab_by_target(const char *t)
{
    if (!t) return NULL;
    for (int i = 0; i < B.ntabs; i++)
        if (!strcmp(B.tabs[i].target, t)) return &B.tabs[i];
    return NULL;
}

static void handle_event(cJSON *msg)
{
    const char *method = jstr(msg, "method");
    const char *session = jstr(msg, "sessionId");
    cJSON *params = cJSON_GetObjectItemCaseSensitive(msg, "params");
    if (!method) return;
    tab_t *t = tab_by_session(session);
    const char *frame = jstr(params, "frameId");
    bool main_frame = t && frame && !strcmp(frame, t->target);

    if (!strcmp(method, "Page.javascriptDialogOpening")) {
        const char *type = jstr(params, "type");
        const char *text = jstr(params, "message");
        const char *def = jstr(params, "defaultPrompt");
        cJSON *p = cJSON_CreateObject();
        cJSON_AddBoolToObject(p, "accept", 1);
        if (type && !strcmp(type, "prompt")) cJSON_AddStringToObject(p, "promptText", def ? def : "");
        cdp_send_nowait("Page.handleJavaScriptDialog", p, session);
        note("[The page opened a %s dialog, accepted: %.300s]", type ? type : "", text ? text : "");
    } else if (!strcmp(method, "Page.frameStartedLoading")) {
        if (main_frame) t->loading = true;
    } else if (!strcmp(method, "Page.frameStoppedLoading")) {
        if (main_frame) { t->loading = false; t->stops++; }
    } else if (!strcmp(method, "Page.frameRequestedNavigation") || !strcmp(method, "Page.frameStartedNavigating")
               || !strcmp(method, "Page.frameScheduledNavigation")) {
        if (main_frame) t->navs++;
    } else if (!strcmp(method, "Target.targetCreated")) {
        cJSON *ti = cJSON_GetObjectItemCaseSensitive(params, "targetInfo");
        const char *type = jstr(ti, "type"), *id = jstr(ti, "targetId"), *opener = jstr(ti, "openerId");
        if (type && id && opener && opener[0] && !strcmp(type, "page") && !tab_by_target(id)
            && tab_by_target(opener) && B.npending < MAX_TABS)
            B.pending_new[B.npending++] = strdup(id);
    } else if (!strcmp(method, "Target.targetDestroyed")) {
        tab_t *d = tab_by_target(jstr(params, "targetId"));
        if (d) d->gone = true;
    } else if (!strcmp(method, "Target.detachedFromTarget")) {
        tab_t *d = tab_by_session(jstr(params, "sessionId"));
        if (d) d->gone = true;
    } else if (!strcmp(method, "Target.targetCrashed")) {
        tab_t *d = tab_by_target(jstr(params, "targetId"));
        if (d) d->crashed = true;
    } else if (!strcmp(method, "Inspector.targetCrashed")) {
        if (t) t->crashed = true;
    } else if (!strcmp(method, "Browser.downloadWillBegin")) {
        note("[Download started: %.300s]", jstr(params, "suggestedFilename") ? jstr(params, "suggestedFilename") : "");
    } else if (!strcmp(method, "Browser.downloadProgress")) {
        const char *st = jstr(params, "state");
        if (st && !strcmp(st, "completed")) {
            const char *fp = jstr(params, "filePath");
            note("[Download finished: %.400s]", fp ? fp : "");
        }
    }
}

/* reads what is there (waiting at most ms); handles events; a reply with id `want` is returned */
static cJSON *read_some(int ms, int want, bool *eof)
{
    struct pollfd pf = {B.rfd, POLLIN, 0};
    int pr = poll(&pf, 1, ms);
    if (pr < 0 && errno != EINTR) { *eof = true; return NULL; }
    if (pr == 0 && browser_exited()) { *eof = true; return NULL; }
    if (pr > 0) {
        if (B.rcap - B.rlen < 65536) {
            size_t nc = B.rcap ? B.rcap * 2 : 262144;
            char *nb = realloc(B.rbuf, nc);
            if (!nb) abort();
            B.rbuf = nb; B.rcap = nc;
        }
        ssize_t n = read(B.rfd, B.rbuf + B.rlen, B.rcap - B.rlen);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) { *eof = true; return NULL; }
        if (n > 0) B.rlen += (size_t)n;
    }
    cJSON *found = NULL;
    size_t start = 0;
    for (;;) {
        if (start >= B.rlen) break;   /* nothing buffered (rbuf may be NULL) */
        char *z = memchr(B.rbuf + start, 0, B.rlen - start);
        if (!z) break;
        size_t mlen = (size_t)(z - (B.rbuf + start));
        cJSON *m = cJSON_ParseWithLength(B.rbuf + start, mlen);
        start += mlen + 1;
        if (!m) continue;
        cJSON *idv = cJSON_GetObjectItemCaseSensitive(m, "id");
        if (cJSON_IsNumber(idv)) {
            if (!found && want > 0 && idv->valueint == want) { found = m; break; }
            cJSON_Delete(m);                           /* a reply nobody waits for any more */
        } else {
            handle_event(m);
            cJSON_Delete(m);
        }
    }
    if (start) {
        memmove(B.rbuf, B.rbuf + start, B.rlen - start);
        B.rlen -= start;
    }
    return found;
}

void cdp_send_nowait(const char *method, cJSON *params, const char *session)
{
    if (!B.alive) { cJSON_Delete(params); return; }
    if (send_msg(++B.next_id, method, params, session) < 0) mark_dead("write failed");
}

cJSON *cdp_call(const char *method, cJSON *params, const char *session, double deadline, char *err, size_t errlen)
{
    err[0] = 0;
    if (!B.alive) {
        cJSON_Delete(params);
        snprintf(err, errlen, "the browser is not running");
        return NULL;
    }
    if (browser_exited()) {
        cJSON_Delete(params);
        mark_dead("exited");
        snprintf(err, errlen, "%s", B.died_reason[0] ? B.died_reason : "the browser exited");
        return NULL;
    }
    int id = ++B.next_id;
    if (send_msg(id, method, params, session) < 0) {
        mark_dead("write failed");
        snprintf(err, errlen, "%s", B.died_reason[0] ? B.died_reason : "the browser exited");
        return NULL;
    }
    for (;;) {
        double left = deadline - mono_now();
        if (stop_requested()) { snprintf(err, errlen, "shutting down"); return NULL; }
        if (left <= 0) { snprintf(err, errlen, "timeout"); return NULL; }
        bool eof = false;
        int ms = left > 0.1 ? 100 : (int)(left * 1000) + 1;
        cJSON *m = read_some(ms, id, &eof);
        if (m) {
            cJSON *e = cJSON_GetObjectItemCaseSensitive(m, "error");
            if (e) {
                const char *msg = jstr(e, "message");
                const char *data = jstr(e, "data");
                snprintf(err, errlen, "%s%s%s", msg ? msg : "CDP error", data ? ": " : "", data ? data : "");
                cJSON_Delete(m);
                return NULL;
            }
            cJSON *r = cJSON_DetachItemFromObjectCaseSensitive(m, "result");
            cJSON_Delete(m);
            return r ? r : cJSON_CreateObject();
        }
        if (eof) {
            mark_dead("pipe closed");
            snprintf(err, errlen, "%s", B.died_reason[0] ? B.died_reason : "the browser exited");
            return NULL;
        }
    }
}

bool cdp_pump_until(bool (*cond)(void *), void *arg, double deadline)
{
    for (;;) {
        if (cond && cond(arg)) return true;
        if (!B.alive || stop_requested()) return false;
        double left = deadline - mono_now();
        if (left <= 0) return cond ? cond(arg) : true;
        bool eof = false;
        int ms = left > 0.05 ? 50 : (int)(left * 1000) + 1;
        read_some(ms, 0, &eof);
        if (eof) { mark_dead("pipe closed"); return false; }
    }
}

/* ---- tabs ---- */
int cdp_tab_attach(const char *target, double deadline, char *err, size_t errlen)
{
    if (B.ntabs >= MAX_TABS) { snprintf(err, errlen, "too many tabs (%d)", MAX_TABS); return -1; }
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "targetId", target);
    cJSON_AddBoolToObject(p, "flatten", 1);
    cJSON *r = cdp_call("Target.attachToTarget", p, NULL, deadline, err, errlen);
    const char *s = jstr(r, "sessionId");
    if (!s) { cJSON_Delete(r); if (!err[0]) snprintf(err, errlen, "no session for the tab"); return -1; }
    tab_t *t = &B.tabs[B.ntabs];
    memset(t, 0, sizeof *t);
    snprintf(t->target, sizeof t->target, "%s", target);
    snprintf(t->session, sizeof t->session, "%s", s);
    cJSON_Delete(r);
    int idx = B.ntabs++;
    r = cdp_call("Page.enable", NULL, t->session, deadline, err, errlen);
    if (!r) return -1;
    cJSON_Delete(r);
    p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "width", 1280);
    cJSON_AddNumberToObject(p, "height", 720);
    cJSON_AddNumberToObject(p, "deviceScaleFactor", 1);
    cJSON_AddBoolToObject(p, "mobile", 0);
    r = cdp_call("Emulation.setDeviceMetricsOverride", p, t->session, deadline, err, errlen);
    cJSON_Delete(r);
    err[0] = 0;
    return idx;
}

int cdp_new_tab(double deadline, char *err, size_t errlen)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "url", "about:blank");
    cJSON *r = cdp_call("Target.createTarget", p, NULL, deadline, err, errlen);
    const char *id = jstr(r, "targetId");
    if (!id) { cJSON_Delete(r); if (!err[0]) snprintf(err, errlen, "Target.createTarget gave no target"); return -1; }
    char tid[64];
    snprintf(tid, sizeof tid, "%s", id);
    cJSON_Delete(r);
    int idx = cdp_tab_attach(tid, deadline, err, errlen);
    if (idx >= 0) B.active = idx;
    return idx;
}

void cdp_adopt_pending(double deadline)
{
    char err[256];
    while (B.npending > 0 && B.alive) {
        char *id = B.pending_new[0];
        memmove(B.pending_new, B.pending_new + 1, sizeof(char *) * (size_t)(B.npending - 1));
        B.npending--;
        if (!tab_by_target(id)) {
            int idx = cdp_tab_attach(id, deadline, err, sizeof err);
            if (idx >= 0) B.active = idx;       /* a page the page opened becomes the active one */
        }
        free(id);
    }
}

void cdp_forget_gone_tabs(void)
{
    int j = 0, active = B.active;
    bool active_gone = false;
    for (int i = 0; i < B.ntabs; i++) {
        if (B.tabs[i].gone) {
            if (i == B.active) active_gone = true;
            else if (i < B.active) active--;
            continue;
        }
        if (j != i) B.tabs[j] = B.tabs[i];
        j++;
    }
    B.ntabs = j;
    if (active_gone || active >= B.ntabs) active = B.ntabs - 1;
    B.active = active < 0 ? 0 : active;
}

/* ---- start ---- */
int cdp_start(char *err, size_t errlen)
{
    err[0] = 0;
    B.died_reason[0] = 0;
    const char *bin = find_chromium();
    if (!bin) { snprintf(err, errlen, "Chromium is not installed (no chromium or chromium-browser binary found)"); return -1; }
    snprintf(B.profile, sizeof B.profile, "%s/chromium-profile.XXXXXX", run_dir());
    if (!mkdtemp(B.profile)) {
        snprintf(err, errlen, "cannot create a profile folder in %s: %s", run_dir(), strerror(errno));
        B.profile[0] = 0;
        return -1;
    }
    char udd[600], logp[600];
    snprintf(udd, sizeof udd, "--user-data-dir=%s", B.profile);
    snprintf(logp, sizeof logp, "%s/chromium.log", run_dir());
    char *argv[] = {
        (char *)bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", udd,
        "--no-first-run", "--no-default-browser-check", "--disable-dev-shm-usage", "--window-size=1280,720",
        "--disable-extensions", "--disable-background-networking", "--disable-sync", "--disable-default-apps",
        "--disable-component-update", "--disable-breakpad", "--mute-audio", "--password-store=basic",
        "--use-mock-keychain", "--disable-features=Translate,MediaRouter,OptimizationHints,BackForwardCache",
        "about:blank", NULL };
    /* HOME and XDG folders inside the profile: Chromium's crash database, NSS db and caches land
       there (and go with it), not in the user's home */
    char home[600], xdgc[620], xdgk[620];
    snprintf(home, sizeof home, "HOME=%s/home", B.profile);
    snprintf(xdgc, sizeof xdgc, "XDG_CONFIG_HOME=%s/home/.config", B.profile);
    snprintf(xdgk, sizeof xdgk, "XDG_CACHE_HOME=%s/home/.cache", B.profile);
    mkdir(home + 5, 0700);
    extern char **environ;
    size_t ne = 0;
    while (environ[ne]) ne++;
    char **envp = calloc(ne + 4, sizeof *envp);
    size_t k = 0;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "HOME=", 5) && strncmp(environ[i], "XDG_CONFIG_HOME=", 16) && strncmp(environ[i], "XDG_CACHE_HOME=", 15))
            envp[k++] = environ[i];
    envp[k++] = home; envp[k++] = xdgc; envp[k++] = xdgk; envp[k] = NULL;
    int to[2], from[2];
    if (pipe2(to, O_CLOEXEC) < 0) { free(envp); snprintf(err, errlen, "pipe: %s", strerror(errno)); return -1; }
    if (pipe2(from, O_CLOEXEC) < 0) {
        close(to[0]); close(to[1]);
        free(envp);
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int logfd = open(logp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        free(envp);
        close(to[0]); close(to[1]); close(from[0]); close(from[1]);
        if (devnull >= 0) close(devnull);
        if (logfd >= 0) close(logfd);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        int a = fcntl(to[0], F_DUPFD_CLOEXEC, 10);
        int b = fcntl(from[1], F_DUPFD_CLOEXEC, 10);
        if (a < 0 || b < 0 || dup2(a, 3) < 0 || dup2(b, 4) < 0) _exit(126);
        if (devnull >= 0) dup2(devnull, 0);
        if (logfd >= 0) { dup2(logfd, 1); dup2(logfd, 2); }
        execve(bin, argv, envp);
        _exit(127);
    }
    free(envp);
    setpgid(pid, pid);
    close(to[0]); close(from[1]);
    if (devnull >= 0) close(devnull);
    if (logfd >= 0) close(logfd);
    B.pid = pid;
    reaped = false;
    atomic_store(&browser_pgid, pid);
    B.wfd = to[1];
    B.rfd = from[0];
    fcntl(B.rfd, F_SETFL, fcntl(B.rfd, F_GETFL) | O_NONBLOCK);
    B.rlen = 0;
    B.alive = true;
    B.ntabs = 0;
    B.active = 0;
    B.mouse_x = 640; B.mouse_y = 360;

    double deadline = mono_now() + 60;
    char e2[300];
    cJSON *r = cdp_call("Browser.getVersion", NULL, NULL, deadline, e2, sizeof e2);
    if (!r) {
        char last[300];
        last_log_line(last, sizeof last);
        snprintf(err, errlen, "Chromium (%s) did not start: %s%s%s", bin, e2, last[0] ? "; " : "", last);
        cdp_kill();
        return -1;
    }
    snprintf(B.version, sizeof B.version, "%s", jstr(r, "product") ? jstr(r, "product") : "");
    cJSON_Delete(r);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddBoolToObject(p, "discover", 1);
    cJSON_Delete(cdp_call("Target.setDiscoverTargets", p, NULL, deadline, e2, sizeof e2));
    /* the page Chromium opened itself becomes tab 0 */
    r = cdp_call("Target.getTargets", NULL, NULL, deadline, e2, sizeof e2);
    cJSON *infos = cJSON_GetObjectItemCaseSensitive(r, "targetInfos"), *ti;
    char first[64] = "";
    cJSON_ArrayForEach(ti, infos) {
        const char *type = jstr(ti, "type"), *id = jstr(ti, "targetId");
        if (type && id && !strcmp(type, "page")) { snprintf(first, sizeof first, "%s", id); break; }
    }
    cJSON_Delete(r);
    int idx = first[0] ? cdp_tab_attach(first, deadline, e2, sizeof e2) : cdp_new_tab(deadline, e2, sizeof e2);
    if (idx < 0) {
        snprintf(err, errlen, "Chromium started but its first tab failed: %s", e2);
        cdp_kill();
        return -1;
    }
    B.active = idx;
    B.ever_started = true;
    logmsg("started %s (pid %d)", B.version, (int)pid);
    return 0;
}

bool cdp_check_alive(void)
{
    if (B.alive && browser_exited()) mark_dead("exited");
    return B.alive;
}
