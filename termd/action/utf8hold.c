/* utf8hold.c — a UTF-8 character split between two reads: its first bytes
 * held back (struct utf8hold), the bytes around it passed on as they are
 * (a pipe session's output) or as valid UTF-8 (OpenHands V1's), and the
 * held bytes saved and loaded for an upgrade in place. */
#include "utf8hold.h"
#include "fsio.h"

#include <string.h>

/* where a character begun in d[0..n) would end past n: that start, or n
 * (by its first byte alone: 0xC0 and up begin one) */
static size_t complete_upto(const unsigned char *d, size_t n)
{
	for (size_t back = 1; back <= 3 && back <= n; back++) {
		unsigned char c = d[n - back];
		if ((c & 0xC0) == 0x80)
			continue;   /* a continuation byte: look further back */
		size_t want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
		return want > back ? n - back : n;
	}
	return n;
}

void utf8hold_raw(struct utf8hold *h, const char *data, size_t n, buf_t *out)
{
	size_t start = out->len;
	buf_append(out, h->b, h->n);
	buf_append(out, data, n);
	h->n = 0;
	const char *p = out->p + start;
	size_t len = out->len - start;
	size_t cut = complete_upto((const unsigned char *)p, len);
	if (cut < len && utf8_text(p, cut, NULL)) {
		h->n = len - cut;
		memcpy(h->b, p + cut, h->n);
		out->len = start + cut;
		out->p[out->len] = 0;
	}
}

/* the length of the UTF-8 sequence at p (of n bytes left): 1..4, 0 when it
 * is cut short by the end, -1 when invalid */
static int seq_len(const unsigned char *p, size_t n)
{
	int len;
	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4;
	else
		return -1;
	for (int i = 1; i < len; i++) {
		if ((size_t)i >= n)
			return 0;
		if ((p[i] & 0xc0) != 0x80)
			return -1;
	}
	if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] > 0x9f) ||
	    (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] > 0x8f))
		return -1;
	return len;
}

/* p[0..n) onto out as valid UTF-8; returns the bytes taken: all, or up to
 * a sequence cut short at the end unless last (at most 3 left) */
static size_t take(const unsigned char *p, size_t n, buf_t *out, int last)
{
	size_t i = 0;
	while (i < n) {
		int l = seq_len(p + i, n - i);
		if (l == 0 && !last)
			break;
		if (l <= 0) {
			buf_puts(out, "\xef\xbf\xbd");
			i++;
			continue;
		}
		buf_append(out, p + i, (size_t)l);
		i += (size_t)l;
	}
	return i;
}

void utf8hold_text(struct utf8hold *h, const char *data, size_t n, buf_t *out, int last)
{
	buf_t in = {0};
	const unsigned char *p = (const unsigned char *)data;
	if (h->n) {   /* the held bytes go first */
		buf_append(&in, h->b, h->n);
		buf_append(&in, data, n);
		p = (const unsigned char *)in.p;
		n = in.len;
	}
	size_t i = take(p, n, out, last);
	h->n = n - i;
	if (h->n)
		memcpy(h->b, p + i, h->n);
	buf_free(&in);
}

void utf8hold_save(const struct utf8hold *h, cJSON *o, const char *key)
{
	buf_t e = {0};
	fsio_b64_encode(h->b, h->n, &e);
	buf_putc(&e, 0);
	cJSON_AddStringToObject(o, key, e.p);
	buf_free(&e);
}

void utf8hold_load(struct utf8hold *h, const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItem(o, key);
	buf_t b = {0};
	h->n = 0;
	if (cJSON_IsString(v) && fsio_b64_decode(v->valuestring, strlen(v->valuestring), &b) == 0 &&
	    b.len <= sizeof h->b) {
		memcpy(h->b, b.p, b.len);
		h->n = b.len;
	}
	buf_free(&b);
}
