/* meta.c — the metadata of an envd upload (POST /files), as envd's
 * api/upload.go and its xattr.go keep it: the X-Termd-Metadata header the
 * front folds the request's X-Metadata-<key> headers into (k=v&k=v,
 * application/x-www-form-urlencoded) parsed and checked as envd checks
 * them, then written onto each uploaded file as its user.e2b.<key>
 * extended attributes, replacing the ones it had (an upload without
 * metadata clears them). */
#include "envd.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#define META_PREFIX "user.e2b."
#define META_PREFIX_LEN 9
/* the kernel's bound on an xattr name (XATTR_NAME_MAX), prefix included */
#define META_KEY_MAX (255 - META_PREFIX_LEN)
/* envd's MaxMetadataTotalLen: names (prefix + key) and values together */
#define META_TOTAL_MAX 4096

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* s[0..n) form-decoded ('+' a space, %XX a byte) into out: 0, or -1 at a
 * '%' not followed by two hex digits */
static int form_decode(const char *s, size_t n, buf_t *out)
{
	buf_reset(out);
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '+') {
			buf_putc(out, ' ');
		} else if (s[i] == '%') {
			int a = i + 1 < n ? hexval((unsigned char)s[i + 1]) : -1;
			int b = i + 2 < n ? hexval((unsigned char)s[i + 2]) : -1;
			int h = a >= 0 && b >= 0 ? a * 16 + b : -1;
			if (h < 0)
				return -1;
			buf_putc(out, (char)h);
			i += 2;
		} else {
			buf_putc(out, s[i]);
		}
	}
	buf_putc(out, 0);
	out->len--;
	return 0;
}

/* the first byte of s[0..n) that is not printable US-ASCII, or -1 */
static long not_printable(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
			return (long)i;
	return -1;
}

cJSON *envd_meta_parse(const char *hdr, size_t len, buf_t *err)
{
	cJSON *m = cJSON_CreateObject();
	buf_t k = {0}, v = {0};
	const char *p = hdr, *end = hdr + len;
	while (p < end) {
		const char *amp = memchr(p, '&', (size_t)(end - p));
		const char *pe = amp ? amp : end;
		const char *eq = memchr(p, '=', (size_t)(pe - p));
		const char *ke = eq ? eq : pe;
		if (pe == p) {   /* an empty pair (k=v&&k=v): nothing */
			p = pe + 1;
			continue;
		}
		if (form_decode(p, (size_t)(ke - p), &k) < 0 ||
		    (eq && form_decode(eq + 1, (size_t)(pe - eq - 1), &v) < 0)) {
			buf_printf(err, "invalid metadata: X-Termd-Metadata is not "
				   "application/x-www-form-urlencoded (a %% not followed by two "
				   "hex digits in \"");
			buf_put_utf8(err, p, (size_t)(pe - p));
			buf_puts(err, "\")");
			goto bad;
		}
		if (!eq)
			buf_reset(&v), buf_putc(&v, 0), v.len = 0;
		p = amp ? amp + 1 : end;
		if (k.len == 0)
			continue;   /* "X-Metadata-" with no key: envd skips it */
		long at;
		if ((at = not_printable(k.p, k.len)) >= 0 || (at = not_printable(v.p, v.len)) >= 0) {
			int in_key = not_printable(k.p, k.len) >= 0;
			buf_printf(err, "invalid metadata: metadata %s",
				   in_key ? "key" : "value for key \"");
			if (!in_key) {
				buf_put_utf8(err, k.p, k.len);
				buf_puts(err, "\"");
			}
			buf_printf(err, " contains non-printable-ASCII byte 0x%02x at offset %ld",
				   (unsigned char)(in_key ? k.p : v.p)[at], at);
			goto bad;
		}
		if (k.len > META_KEY_MAX) {
			buf_printf(err, "invalid metadata: metadata key \"%.40s...\" exceeds %d bytes "
				   "(%zu; an extended attribute's name is at most 255 with \""
				   META_PREFIX "\")", k.p, META_KEY_MAX, k.len);
			goto bad;
		}
		for (size_t i = 0; i < k.len; i++)
			k.p[i] = (char)tolower((unsigned char)k.p[i]);
		cJSON *val = cJSON_CreateString(v.p);
		if (cJSON_GetObjectItemCaseSensitive(m, k.p))
			cJSON_ReplaceItemInObjectCaseSensitive(m, k.p, val);   /* the last wins */
		else
			cJSON_AddItemToObject(m, k.p, val);
	}
	size_t total = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, m)
		total += META_PREFIX_LEN + strlen(it->string) + strlen(it->valuestring);
	if (total > META_TOTAL_MAX) {
		buf_printf(err, "invalid metadata: total metadata size %zu exceeds %d bytes",
			   total, META_TOTAL_MAX);
		goto bad;
	}
	buf_free(&k);
	buf_free(&v);
	return m;
bad:
	buf_putc(err, 0);
	err->len--;
	buf_free(&k);
	buf_free(&v);
	cJSON_Delete(m);
	return NULL;
}

int envd_meta_write(int fd, const cJSON *meta)
{
	ssize_t n = flistxattr(fd, NULL, 0);
	if (n < 0)
		return errno == ENOTSUP ? 0 : errno;
	char *names = xmalloc((size_t)n + 256);
	n = flistxattr(fd, names, (size_t)n + 256);
	if (n < 0) {
		int e = errno;
		free(names);
		return e == ENOTSUP ? 0 : e;
	}
	/* the old keys this upload does not name go */
	for (ssize_t i = 0; i < n; i += (ssize_t)strlen(names + i) + 1) {
		const char *name = names + i;
		if (strncmp(name, META_PREFIX, META_PREFIX_LEN) != 0 ||
		    cJSON_GetObjectItemCaseSensitive(meta, name + META_PREFIX_LEN))
			continue;
		if (fremovexattr(fd, name) != 0 && errno != ENODATA) {
			int e = errno;
			free(names);
			return e == ENOTSUP ? 0 : e;
		}
	}
	free(names);
	const cJSON *it;
	char name[300];
	cJSON_ArrayForEach(it, meta) {
		snprintf(name, sizeof name, META_PREFIX "%s", it->string);
		const char *v = it->valuestring;
		if (fsetxattr(fd, name, v, strlen(v), 0) != 0)
			return errno == ENOTSUP ? 0 : errno;
	}
	return 0;
}
