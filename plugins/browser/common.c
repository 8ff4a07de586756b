/* termd-browser's common ground, the bottom layer every other file may use: growing strings,
   the clock, logging, the process-wide stop flag and worker wake-up pipe, the run folder, answers
   written to stdout (one line each, thread-safe) and removing a folder tree. */
#include "browser.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static int wake_pipe[2] = {-1, -1};
static atomic_bool stopping;
static char rundir[512];
atomic_int browser_pgid;

/* ---- strings ---- */
void sb_add(sbuf_t *b, const char *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->len + n + 1) c *= 2;
        char *s = realloc(b->s, c);
        if (!s) { perror("termd-browser: out of memory"); abort(); }
        b->s = s; b->cap = c;
    }
    memcpy(b->s + b->len, p, n);
    b->len += n;
    b->s[b->len] = 0;
}
void sb_puts(sbuf_t *b, const char *p) { sb_add(b, p, strlen(p)); }
void sb_printf(sbuf_t *b, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n > 0) {
        char *t = malloc((size_t)n + 1);
        if (!t) abort();
        vsnprintf(t, (size_t)n + 1, fmt, ap2);
        sb_add(b, t, (size_t)n);
        free(t);
    }
    va_end(ap2);
}
char *sb_take(sbuf_t *b)
{
    char *s = b->s ? b->s : strdup("");
    b->s = NULL; b->len = b->cap = 0;
    return s;
}

double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void logmsg(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("termd-browser: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

bool stop_requested(void) { return atomic_load(&stopping); }
int wake_fd(void) { return wake_pipe[0]; }
const char *run_dir(void) { return rundir; }

/* a string member of a JSON object, or NULL */
const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---- answers ---- */
static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return;                       /* EPIPE: the host is gone; nothing to tell */
        }
        p += w; n -= (size_t)w;
    }
}

void answer(cJSON *obj)
{
    char *s = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!s) { logmsg("cannot print an answer (out of memory)"); return; }
    pthread_mutex_lock(&out_mu);
    write_all(1, s, strlen(s));
    write_all(1, "\n", 1);
    pthread_mutex_unlock(&out_mu);
    free(s);
}

void answer_error(const cJSON *id, const char *code, const char *msg)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "id", id ? cJSON_Duplicate(id, 1) : cJSON_CreateNull());
    cJSON_AddStringToObject(o, "observation", "error");
    cJSON_AddStringToObject(o, "content", msg);
    cJSON *ex = cJSON_AddObjectToObject(o, "extras");
    cJSON_AddStringToObject(ex, "code", code);
    answer(o);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st; (void)flag; (void)f;
    remove(p);
    return 0;
}
void rm_tree(const char *path)
{
    if (path && path[0]) nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}


int common_init(void)
{
    return pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK);
}

void wake_worker(void)
{
    char c = 1;
    if (write(wake_pipe[1], &c, 1) < 0 && errno != EAGAIN) logmsg("wake pipe: %s", strerror(errno));
}

void request_stop(void)
{
    atomic_store(&stopping, true);
    wake_worker();
}

char *run_dir_buf(size_t *len)
{
    *len = sizeof rundir;
    return rundir;
}
