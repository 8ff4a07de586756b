/* util.h — small shared helpers: allocation that dies on OOM, growable byte
 * buffers, clocks, UTF-8 helpers and logging. Everything here is leaf code
 * with no termd state. */
#ifndef TERMD_UTIL_H
#define TERMD_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include "compat.h"

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

/* A growable byte buffer; p is always NUL-terminated when non-NULL. */
typedef struct buf {
	char *p;
	size_t len, cap;
} buf_t;

void buf_reserve(buf_t *b, size_t extra);
void buf_append(buf_t *b, const void *data, size_t n);
void buf_puts(buf_t *b, const char *s);
void buf_putc(buf_t *b, char c);
void buf_printf(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_vprintf(buf_t *b, const char *fmt, va_list ap);
void buf_consume(buf_t *b, size_t n);   /* drop n bytes from the front */
/* s as a JSON string, quotes included, byte for byte as cJSON prints it
 * (\" \\ \b \f \n \r \t, other bytes under 0x20 as \u00xx, the rest as
 * they are), about ten times faster on long text: runs of plain bytes are
 * copied whole. */
void buf_put_json_string(buf_t *b, const char *s, size_t n);
void buf_reset(buf_t *b);               /* len = 0, keep memory */
void buf_free(buf_t *b);
char *buf_steal(buf_t *b);              /* returns p (never NULL), resets b */

uint64_t mono_us(void);                 /* monotonic clock, microseconds */
double wall_s(void);                    /* Unix time, seconds */
/* write(2) all n bytes, again after EINTR and short writes: 0, or -1 with
 * errno (EIO if the fd took nothing) */
int write_all(int fd, const void *data, size_t n);

/* Encode a code point (U+FFFD if invalid) into out; returns 1-4. */
size_t utf8_encode(uint32_t cp, char out[4]);
/* Number of UTF-8 characters (code points) in s[0..n). */
size_t utf8_count(const char *s, size_t n);
/* Byte offset of the start of character number `chars` in s (clamped to n). */
size_t utf8_offset(const char *s, size_t n, size_t chars);
/* 1 if s[0..n) is UTF-8 text: valid UTF-8 (no overlongs, surrogates or
 * code points past U+10FFFF) without NUL bytes. Otherwise 0, with the
 * offset of the first bad byte in *bad (if not NULL). */
int utf8_text(const char *s, size_t n, size_t *bad);
/* Append s[0..n) with every byte that is not valid UTF-8 (or is NUL)
 * replaced by U+FFFD: for echoing strings that came from outside. */
void buf_put_utf8(buf_t *b, const char *s, size_t n);
/* The same, and each control character (C0, DEL, C1 U+0080-U+009F: an
 * escape sequence or a bell to some terminal) made '?': for showing a
 * program's name or output line to a client. */
void buf_put_text(buf_t *b, const char *s, size_t n);

/* Close every descriptor from fd up (in a child before exec): one
 * close_range(2) where the kernel has it (a loop over 20000 possible
 * descriptors cost a session's start ~20 ms here), else one close each. */
void close_fds_from(int fd);

extern int log_verbose;
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
