/* multipart.c — finding one field of a multipart/form-data body (RFC
 * 7578): the boundary from the Content-Type, each part's
 * Content-Disposition name and filename, the part's bytes. No copies: the
 * part points into the body. */
#include "codec.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *memmem_s(const char *h, size_t hn, const char *n, size_t nn)
{
	return memmem(h, hn, n, nn);
}

/* parameter `key` of a header value (key=value or key="value"), into out */
static int header_param(const char *v, size_t vn, const char *key, char *out, size_t n)
{
	size_t kl = strlen(key);
	for (size_t i = 0; i + kl < vn; i++) {
		if ((i == 0 || v[i - 1] == ';' || v[i - 1] == ' ' || v[i - 1] == '\t') &&
		    strncasecmp(v + i, key, kl) == 0 && v[i + kl] == '=') {
			size_t j = i + kl + 1, o = 0;
			if (j < vn && v[j] == '"') {
				for (j++; j < vn && v[j] != '"'; j++) {
					if (v[j] == '\\' && j + 1 < vn)
						j++;
					if (o + 1 < n)
						out[o++] = v[j];
				}
			} else {
				for (; j < vn && v[j] != ';' && v[j] != ' ' && v[j] != '\r'; j++)
					if (o + 1 < n)
						out[o++] = v[j];
			}
			out[o] = 0;
			return 0;
		}
	}
	return -1;
}

int multipart_find(const char *ctype, const char *body, size_t len, const char *field,
		   struct mp_part *part, char *err, size_t errlen)
{
	char bnd[256];
	memset(part, 0, sizeof *part);
	if (!ctype || strncasecmp(ctype, "multipart/form-data", 19) != 0 ||
	    header_param(ctype, strlen(ctype), "boundary", bnd + 4, sizeof bnd - 4) < 0 ||
	    !bnd[4]) {
		snprintf(err, errlen, "not a multipart/form-data body with a boundary");
		return -1;
	}
	memcpy(bnd, "\r\n--", 4);
	size_t bl = strlen(bnd);
	/* the first delimiter may open the body without its CRLF */
	const char *p;
	if (len >= bl - 2 && memcmp(body, bnd + 2, bl - 2) == 0) {
		p = body + bl - 2;
	} else {
		p = memmem_s(body, len, bnd, bl);
		if (!p) {
			snprintf(err, errlen, "multipart body without its boundary");
			return -1;
		}
		p += bl;
	}
	const char *end = body + len;
	for (;;) {
		if (end - p >= 2 && p[0] == '-' && p[1] == '-')
			break;   /* the closing delimiter */
		/* rest of the delimiter line */
		const char *eol = memmem_s(p, (size_t)(end - p), "\r\n", 2);
		if (!eol)
			break;
		const char *h = eol + 2;
		const char *hend = memmem_s(h, (size_t)(end - h), "\r\n\r\n", 4);
		if (!hend) {
			snprintf(err, errlen, "multipart part without the end of its headers");
			return -1;
		}
		const char *data = hend + 4;
		const char *next = memmem_s(data, (size_t)(end - data), bnd, bl);
		if (!next) {
			snprintf(err, errlen, "multipart part without a closing boundary");
			return -1;
		}
		char name[256] = "", fname[1024] = "";
		int has_fname = 0;
		for (const char *l = h; l < hend;) {
			const char *le = memmem_s(l, (size_t)(hend + 2 - l), "\r\n", 2);
			if (!le)
				le = hend;
			size_t ll = (size_t)(le - l);
			if (ll > 20 && strncasecmp(l, "content-disposition:", 20) == 0) {
				header_param(l + 20, ll - 20, "name", name, sizeof name);
				has_fname = header_param(l + 20, ll - 20, "filename", fname, sizeof fname) == 0;
			}
			l = le + 2;
		}
		if (strcmp(name, field) == 0) {
			part->data = data;
			part->len = (size_t)(next - data);
			part->has_filename = has_fname;
			snprintf(part->filename, sizeof part->filename, "%s", fname);
			return 0;
		}
		p = next + bl;
	}
	snprintf(err, errlen, "no field '%s' in the multipart body", field);
	return -1;
}
