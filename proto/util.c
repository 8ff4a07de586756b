/* util.c — allocation wrappers, byte buffers, clocks, UTF-8 encoding,
 * counting and validation, and logging shared by every termd module. */
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <unistd.h>
#include <sys/syscall.h>

int log_verbose;

static void oom(void)
{
	fputs("termd: out of memory\n", stderr);
	abort();
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		oom();
	return p;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		oom();
	return p;
}

void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		oom();
	return p;
}

char *xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
	char *p = xmalloc(n + 1);
	memcpy(p, s, n);
	p[n] = 0;
	return p;
}

void buf_reserve(buf_t *b, size_t extra)
{
	if (b->len + extra + 1 <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + extra + 1)
		cap *= 2;
	b->p = xrealloc(b->p, cap);
	b->cap = cap;
}

void buf_append(buf_t *b, const void *data, size_t n)
{
	buf_reserve(b, n);
	if (n)
		memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = 0;
}

void buf_puts(buf_t *b, const char *s)
{
	buf_append(b, s, strlen(s));
}

void buf_putc(buf_t *b, char c)
{
	buf_append(b, &c, 1);
}

void buf_vprintf(buf_t *b, const char *fmt, va_list ap)
{
	char tmp[256];
	va_list ap2;
	va_copy(ap2, ap);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap2);
	va_end(ap2);
	if (n < 0)
		return;
	if ((size_t)n < sizeof tmp) {
		buf_append(b, tmp, (size_t)n);
	} else {
		buf_reserve(b, (size_t)n);
		vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
		b->len += (size_t)n;
	}
}

void buf_printf(buf_t *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(b, fmt, ap);
	va_end(ap);
}

void buf_consume(buf_t *b, size_t n)
{
	if (n >= b->len) {
		buf_reset(b);
		return;
	}
	memmove(b->p, b->p + n, b->len - n);
	b->len -= n;
	b->p[b->len] = 0;
}

void buf_reset(buf_t *b)
{
	b->len = 0;
	if (b->p)
		b->p[0] = 0;
}

void buf_free(buf_t *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

char *buf_steal(buf_t *b)
{
	if (!b->p)
		return xstrdup("");
	char *p = b->p;
	b->p = NULL;
	b->len = b->cap = 0;
	return p;
}

uint64_t mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

double wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

size_t utf8_encode(uint32_t cp, char out[4])
{
	if (cp >= 0x110000 || (cp >= 0xD800 && cp < 0xE000))
		cp = 0xFFFD;
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | cp >> 12);
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | cp >> 18);
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

size_t utf8_count(const char *s, size_t n)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++)
		if (((unsigned char)s[i] & 0xC0) != 0x80)
			c++;
	return c;
}

size_t utf8_offset(const char *s, size_t n, size_t chars)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++) {
		if (((unsigned char)s[i] & 0xC0) != 0x80) {
			if (c == chars)
				return i;
			c++;
		}
	}
	return n;
}

/* Length of the valid UTF-8 sequence at s (n bytes available), 0 if the
 * bytes there are not one (overlongs, surrogates, > U+10FFFF refused). */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	if (c < 0x80)
		return 1;
	size_t len;
	unsigned min, cp;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2, min = 0x80, cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3, min = 0x800, cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4, min = 0x10000, cp = c & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

int utf8_text(const char *s, size_t n, size_t *bad)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;
	while (i < n) {
		if (p[i] >= 0x20 && p[i] < 0x80) {
			i++;
			continue;
		}
		size_t l = p[i] ? utf8_seq(p + i, n - i) : 0;
		if (!l) {
			if (bad)
				*bad = i;
			return 0;
		}
		i += l;
	}
	return 1;
}

void buf_put_utf8(buf_t *b, const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;
	while (i < n) {
		size_t l = p[i] ? utf8_seq(p + i, n - i) : 0;
		if (l) {
			buf_append(b, p + i, l);
			i += l;
		} else {
			buf_puts(b, "\xef\xbf\xbd");
			i++;
		}
	}
}

void buf_put_text(buf_t *b, const char *s, size_t n)
{
	buf_t t = {0};
	buf_put_utf8(&t, s, n);
	buf_reserve(b, t.len);
	for (size_t i = 0; i < t.len; i++) {
		unsigned char c = (unsigned char)t.p[i];
		if (c == 0xc2 && i + 1 < t.len && (unsigned char)t.p[i + 1] <= 0x9f) {
			i++;   /* C1: 0xc2 0x80-0x9f (valid UTF-8: the next byte is 0x80 or more) */
			c = '?';
		} else if (c < 0x20 || c == 0x7f) {
			c = '?';
		}
		buf_putc(b, (char)c);
	}
	buf_free(&t);
}

void buf_put_json_string(buf_t *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)s, *end = p + n;
	buf_reserve(b, n + n / 16 + 2);
	buf_putc(b, '"');
	while (p < end) {
		const unsigned char *q = p;
		while (q < end && *q >= 0x20 && *q != '"' && *q != '\\')
			q++;
		buf_append(b, p, (size_t)(q - p));
		if (q == end)
			break;
		char e[6] = {'\\', 0, 0, 0, 0, 0};
		size_t el = 2;
		switch (*q) {
		case '"': e[1] = '"'; break;
		case '\\': e[1] = '\\'; break;
		case '\b': e[1] = 'b'; break;
		case '\f': e[1] = 'f'; break;
		case '\n': e[1] = 'n'; break;
		case '\r': e[1] = 'r'; break;
		case '\t': e[1] = 't'; break;
		default:
			e[1] = 'u'; e[2] = '0'; e[3] = '0';
			e[4] = hex[*q >> 4]; e[5] = hex[*q & 15];
			el = 6;
		}
		buf_append(b, e, el);
		p = q + 1;
	}
	buf_putc(b, '"');
}

static void vlog(const char *tag, const char *fmt, va_list ap)
{
	char msg[1024];
	vsnprintf(msg, sizeof msg, fmt, ap);
	fprintf(stderr, "termd: %s%s\n", tag, msg);
}

void log_info(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog("", fmt, ap);
	va_end(ap);
}

void log_debug(const char *fmt, ...)
{
	if (!log_verbose)
		return;
	va_list ap;
	va_start(ap, fmt);
	vlog("debug: ", fmt, ap);
	va_end(ap);
}

void log_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog("warning: ", fmt, ap);
	va_end(ap);
}

void log_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog("error: ", fmt, ap);
	va_end(ap);
}

int write_all(int fd, const void *data, size_t n)
{
	const char *p = data;
	while (n) {
		ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			if (w == 0)
				errno = EIO;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

void close_fds_from(int fd)
{
#ifdef SYS_close_range
	if (syscall(SYS_close_range, (unsigned)fd, ~0u, 0u) == 0)
		return;
#endif
	long maxfd = sysconf(_SC_OPEN_MAX);
	if (maxfd < 0 || maxfd > 65536)
		maxfd = 65536;
	for (int i = fd; i < maxfd; i++)
		close(i);
}
