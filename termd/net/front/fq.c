/* net/front/fq.c — the front's byte queues (struct fq, front.h): room made
 * by compacting or growing, bytes put, printed, dropped and moved (a body of
 * known length), and HTTP/1.1's header fields and request lines written into
 * them. */
#include "front.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *fq_room(struct fq *q, size_t want)
{
	if (q->off && (q->len == 0 || q->off > q->cap / 2)) {
		memmove(q->p, q->p + q->off, q->len);
		q->off = 0;
	}
	if (q->cap - q->off - q->len < want) {
		size_t nc = q->cap ? q->cap : 4096;
		while (nc - q->off - q->len < want)
			nc *= 2;
		q->p = xrealloc(q->p, nc);
		q->cap = nc;
	}
	return q->p + q->off + q->len;
}

void fq_put(struct fq *q, const void *d, size_t n)
{
	if (!n)
		return;
	memcpy(fq_room(q, n), d, n);
	q->len += n;
}

void fq_printf(struct fq *q, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (n > 0)
		fq_put(q, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

void fq_drop(struct fq *q, size_t n)
{
	if (n >= q->len) {
		q->off = q->len = 0;
		return;
	}
	q->off += n;
	q->len -= n;
}

void fq_free(struct fq *q)
{
	free(q->p);
	memset(q, 0, sizeof *q);
}

int fq_take(struct fq *to, struct fq *from, size_t n, unsigned long long *rem)
{
	size_t take = n < *rem ? n : (size_t)*rem;
	fq_put(to, from->p + from->off, take);
	fq_drop(from, take);
	*rem -= take;
	return !*rem;
}

void fq_field(struct fq *q, const char *name, size_t nl, const char *val, size_t vl)
{
	fq_put(q, name, nl);
	fq_put(q, ": ", 2);
	fq_put(q, val, vl);
	fq_put(q, "\r\n", 2);
}

void fq_reqline(struct fq *q, const char *method, size_t ml, const char *target, size_t tl,
		const char *version, size_t vl)
{
	fq_put(q, method, ml);
	fq_put(q, " ", 1);
	fq_put(q, target, tl);
	fq_put(q, " ", 1);
	fq_put(q, version, vl);
	fq_put(q, "\r\n", 2);
}