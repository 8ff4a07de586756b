/* cast.c — asciicast v2 lines, the pure parts: pty bytes → JSON string
 * bodies (UTF-8 sequences kept whole across reads, invalid bytes as
 * U+FFFD), event lines written, and header and event lines parsed back
 * with errors for anything malformed (the player's and the tests' side). */
#include "cast.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The UTF-8 sequence at s (n bytes there): its length when whole and
 * valid; 0 when all n bytes are a valid beginning of one that goes on;
 * -k when its first k bytes (the maximal valid beginning, at least 1) are
 * to be replaced by one U+FFFD. */
static int utf8_next(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	if (c < 0x80)
		return 1;
	int len;
	unsigned lo = 0x80, hi = 0xbf;   /* bounds of the second byte */
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		if (c == 0xe0)
			lo = 0xa0;
		else if (c == 0xed)
			hi = 0x9f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f;
	} else {
		return -1;
	}
	for (int i = 1; i < len; i++) {
		if ((size_t)i >= n)
			return 0;
		unsigned b = s[i];
		unsigned l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xbf;
		if (b < l || b > h)
			return -i;
	}
	return len;
}

static const char hexd[] = "0123456789abcdef";

/* Valid text s[0..n) (whole sequences) escaped into out. */
static void put_escaped(buf_t *out, const unsigned char *s, size_t n)
{
	size_t run = 0;   /* start of the bytes copied as they are */
	for (size_t i = 0; i < n; i++) {
		unsigned c = s[i];
		if (c >= 0x20 && c != '"' && c != '\\' && c != 0x7f)
			continue;
		buf_append(out, s + run, i - run);
		run = i + 1;
		char e[7] = {'\\', 0, 0, 0, 0, 0, 0};
		size_t el = 2;
		switch (c) {
		case '"': e[1] = '"'; break;
		case '\\': e[1] = '\\'; break;
		case '\n': e[1] = 'n'; break;
		case '\r': e[1] = 'r'; break;
		case '\t': e[1] = 't'; break;
		case '\b': e[1] = 'b'; break;
		case '\f': e[1] = 'f'; break;
		default:
			e[1] = 'u', e[2] = '0', e[3] = '0', e[4] = hexd[c >> 4], e[5] = hexd[c & 15];
			el = 6;
			break;
		}
		buf_append(out, e, el);
	}
	buf_append(out, s + run, n - run);
}

static const char fffd[] = "\xef\xbf\xbd";

void cast_json_bytes(buf_t *out, struct cast_utf8 *h, const char *p, size_t n, int final)
{
	const unsigned char *s = (const unsigned char *)p;
	/* first what was held back, completed by the first bytes of p */
	while (h->n) {
		unsigned char tmp[8];
		size_t take = n < 4 ? n : 4;
		memcpy(tmp, h->hold, h->n);
		memcpy(tmp + h->n, s, take);
		int r = utf8_next(tmp, h->n + take);
		if (r == 0 && !final)   /* still incomplete: p was too short */
			goto hold_all;
		size_t used;
		if (r > 0) {
			put_escaped(out, tmp, (size_t)r);
			used = (size_t)r;
		} else {
			buf_append(out, fffd, 3);
			used = r == 0 ? h->n + take : (size_t)-r;
		}
		if (used >= h->n) {
			s += used - h->n;
			n -= used - h->n;
			h->n = 0;
		} else {
			memmove(h->hold, h->hold + used, h->n - used);
			h->n -= used;
		}
	}
	size_t i = 0, run = 0;
	while (i < n) {
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		int r = utf8_next(s + i, n - i);
		if (r > 0) {
			i += (size_t)r;
			continue;
		}
		put_escaped(out, s + run, i - run);
		if (r == 0) {          /* an incomplete sequence ends the read */
			if (final) {
				buf_append(out, fffd, 3);
			} else {
				memcpy(h->hold, s + i, n - i);
				h->n = n - i;
			}
			return;
		}
		buf_append(out, fffd, 3);
		i += (size_t)-r;
		run = i;
	}
	put_escaped(out, s + run, n - run);
	return;
hold_all:
	memcpy(h->hold + h->n, s, n);
	h->n += n;
}

void cast_event_begin(buf_t *out, double t, const char *code)
{
	buf_printf(out, "[%.6f, \"%s\", \"", t, code);
}

void cast_event_end(buf_t *out)
{
	buf_puts(out, "\"]\n");
}

/* ------------------------------------------------------------- reading */

int cast_parse_header(const char *line, size_t n, struct cast_header *h, char *err, size_t errlen)
{
	memset(h, 0, sizeof *h);
	cJSON *j = cJSON_ParseWithLength(line, n);
	if (!j || !cJSON_IsObject(j)) {
		snprintf(err, errlen, "the first line is not a JSON object (not an asciicast file)");
		cJSON_Delete(j);
		return -1;
	}
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "version");
	const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "width");
	const cJSON *ht = cJSON_GetObjectItemCaseSensitive(j, "height");
	const cJSON *ts = cJSON_GetObjectItemCaseSensitive(j, "timestamp");
	const cJSON *ti = cJSON_GetObjectItemCaseSensitive(j, "title");
	int rc = -1;
	if (!cJSON_IsNumber(v) || v->valuedouble != 2) {
		snprintf(err, errlen, "not asciicast version 2 (\"version\" must be 2)");
	} else if (!cJSON_IsNumber(w) || !cJSON_IsNumber(ht) || !(w->valuedouble >= 1) ||
		   !(ht->valuedouble >= 1) || w->valuedouble > CAST_MAX_DIM ||
		   ht->valuedouble > CAST_MAX_DIM) {
		snprintf(err, errlen, "the header's width and height must be numbers from 1 to %d",
			 CAST_MAX_DIM);
	} else if (ts && !cJSON_IsNull(ts) && (!cJSON_IsNumber(ts) || !isfinite(ts->valuedouble))) {
		snprintf(err, errlen, "the header's timestamp is not a number");
	} else {
		h->width = (int)w->valuedouble;
		h->height = (int)ht->valuedouble;
		h->timestamp = cJSON_IsNumber(ts) ? ts->valuedouble : 0;
		if (cJSON_IsString(ti))
			snprintf(h->title, sizeof h->title, "%s", ti->valuestring);
		rc = 0;
	}
	cJSON_Delete(j);
	return rc;
}

static const char *skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
		p++;
	return p;
}

static int hex4(const char *p, const char *end, unsigned *out)
{
	if (end - p < 4)
		return -1;
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		char c = p[i];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return -1;
	}
	*out = v;
	return 0;
}

/* A JSON string at *pp (its opening quote) decoded into out; *pp after
 * its closing quote. Lone surrogates become U+FFFD. 0 or -1. */
static int parse_string(const char **pp, const char *end, buf_t *out)
{
	const char *p = *pp;
	if (p >= end || *p != '"')
		return -1;
	p++;
	while (p < end && *p != '"') {
		unsigned char c = (unsigned char)*p;
		if (c < 0x20)
			return -1;   /* raw control characters are not JSON */
		if (c != '\\') {
			const char *q = p;
			while (q < end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20)
				q++;
			buf_append(out, p, (size_t)(q - p));
			p = q;
			continue;
		}
		if (++p >= end)
			return -1;
		char e = *p++;
		switch (e) {
		case '"': buf_putc(out, '"'); break;
		case '\\': buf_putc(out, '\\'); break;
		case '/': buf_putc(out, '/'); break;
		case 'b': buf_putc(out, '\b'); break;
		case 'f': buf_putc(out, '\f'); break;
		case 'n': buf_putc(out, '\n'); break;
		case 'r': buf_putc(out, '\r'); break;
		case 't': buf_putc(out, '\t'); break;
		case 'u': {
			unsigned cp, lo;
			if (hex4(p, end, &cp) < 0)
				return -1;
			p += 4;
			if (cp >= 0xd800 && cp < 0xdc00 && end - p >= 6 && p[0] == '\\' &&
			    p[1] == 'u' && hex4(p + 2, end, &lo) == 0 && lo >= 0xdc00 && lo < 0xe000) {
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				p += 6;
			}
			char u[4];
			buf_append(out, u, utf8_encode(cp, u));
			break;
		}
		default:
			return -1;
		}
	}
	if (p >= end)
		return -1;
	*pp = p + 1;
	return 0;
}

void cast_event_free(struct cast_event *ev)
{
	free(ev->data);
	memset(ev, 0, sizeof *ev);
}

int cast_parse_event(const char *line, size_t n, struct cast_event *ev, char *err, size_t errlen)
{
	memset(ev, 0, sizeof *ev);
	const char *p = line, *end = line + n;
	buf_t code = {0}, data = {0};
	p = skip_ws(p, end);
	if (p == end) {
		err[0] = 0;
		return -1;
	}
	const char *why = "an event must be [time, \"code\", \"data\"]";
	if (*p++ != '[')
		goto bad;
	p = skip_ws(p, end);
	/* the time: a JSON number (strtod would take more: hex, inf, nan) */
	const char *num = p;
	if (p < end && *p == '-')
		p++;
	while (p < end && ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E' ||
			   *p == '+' || *p == '-'))
		p++;
	if (p == num || p - num > 64)
		goto bad;
	char nb[80];
	memcpy(nb, num, (size_t)(p - num));
	nb[p - num] = 0;
	char *ne;
	double t = strtod(nb, &ne);
	if (*ne || !isfinite(t)) {
		why = "an event's time is not a number";
		goto bad;
	}
	if (t < 0 || t > CAST_MAX_TIME) {
		why = "an event's time is out of range (0 to 1e9 seconds)";
		goto bad;
	}
	p = skip_ws(p, end);
	if (p >= end || *p++ != ',')
		goto bad;
	p = skip_ws(p, end);
	if (parse_string(&p, end, &code) < 0) {
		why = "an event's code is not a JSON string";
		goto bad;
	}
	if (code.len < 1 || code.len >= sizeof ev->code || memchr(code.p, 0, code.len)) {
		why = "an event's code is not a short name";
		goto bad;
	}
	p = skip_ws(p, end);
	if (p >= end || *p++ != ',')
		goto bad;
	p = skip_ws(p, end);
	if (parse_string(&p, end, &data) < 0) {
		why = "an event's data is not a JSON string";
		goto bad;
	}
	p = skip_ws(p, end);
	if (p >= end || *p++ != ']')
		goto bad;
	p = skip_ws(p, end);
	if (p != end)
		goto bad;
	ev->t = t;
	memcpy(ev->code, code.p, code.len + 1);
	buf_free(&code);
	buf_reserve(&data, 1);
	ev->len = data.len;
	ev->data = buf_steal(&data);
	return 0;
bad:
	snprintf(err, errlen, "%s", why);
	buf_free(&code);
	buf_free(&data);
	return -1;
}
