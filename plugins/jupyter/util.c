/* termd-jupyter's bottom layer: logging, allocation that dies on out-of-memory, the clock,
 * growing buffers, UTF-8 cleaning and ANSI stripping, and answers written to stdout as JSON lines. */
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

/* ---------------------------------------------------------------- small helpers */

void logmsg(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("termd-jupyter: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) { logmsg("out of memory"); exit(70); }
    return p;
}

void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) { logmsg("out of memory"); exit(70); }
    return p;
}

char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}


void buf_add(buf_t *b, const char *s, size_t n) {
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
void buf_adds(buf_t *b, const char *s) { buf_add(b, s, strlen(s)); }
void buf_printf(buf_t *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof tmp) n = sizeof tmp - 1;
    buf_add(b, tmp, (size_t)n);
}
void buf_free(buf_t *b) { free(b->p); memset(b, 0, sizeof *b); }
const char *buf_str(const buf_t *b) { return b->p ? b->p : ""; }

/* Replace invalid UTF-8 with U+FFFD so every answer is valid UTF-8 JSON. */
void utf8_clean(const char *s, size_t n, buf_t *out) {
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
void strip_ansi(buf_t *b) {
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

void rstrip(buf_t *b) {
    while (b->len && strchr(" \t\r\n", b->p[b->len - 1])) b->p[--b->len] = 0;
}

void write_all(int fd, const char *s, size_t n) {
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

void emit(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    if (!s) { logmsg("cannot print an answer (out of memory?)"); cJSON_Delete(o); return; }
    size_t n = strlen(s);
    s = xrealloc(s, n + 2);
    s[n] = '\n';
    write_all(1, s, n + 1);
    free(s);
    cJSON_Delete(o);
}

cJSON *id_copy(const cJSON *id) { return id ? cJSON_Duplicate(id, 1) : cJSON_CreateNull(); }

void answer_error(const cJSON *id, const char *code, const char *fmt, ...) {
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

