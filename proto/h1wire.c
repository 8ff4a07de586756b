/* h1wire.c — HTTP/1.1 on the wire, one reading for all of termd: request
 * heads (the front), answer heads (the front's HTTP/1.1 and HTTP/2 sides,
 * the preview proxy), chunked framing (the front both ways, net/http.c's
 * request bodies, the proxy's answers), the hop-by-hop header names and the
 * constant-time token compare (net/http.c, the proxy). Where the parsers it
 * replaced differed, the strictest one's rule is kept: every line ends in
 * CRLF, no obsolete line folding, field names are tokens, no NUL or CR in a
 * value, Content-Length is digits and said once (or the same again), never
 * Content-Length with Transfer-Encoding, chunked the last coding. */
#include "h1wire.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------- heads */

static int is_tchar(unsigned char ch)
{
	return isalnum(ch) || (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

int h1_name_is(const struct h1_hdr *h, const char *n)
{
	return h->nlen == strlen(n) && strncasecmp(h->name, n, h->nlen) == 0;
}

int h1_has_token(const char *v, size_t n, const char *tok)
{
	size_t tl = strlen(tok);
	for (size_t i = 0; i + tl <= n; i++)
		if (strncasecmp(v + i, tok, tl) == 0 && (i == 0 || !isalnum((unsigned char)v[i - 1])) &&
		    (i + tl == n || !isalnum((unsigned char)v[i + tl])))
			return 1;
	return 0;
}

size_t h1_head_len(const char *p, size_t n)
{
	const char *e = memmem(p, n, "\r\n\r\n", 4);
	return e ? (size_t)(e - p) + 4 : 0;
}

/* the last coding of a Transfer-Encoding value is chunked */
static int last_chunked(const char *v, size_t n)
{
	if (n < 7 || strncasecmp(v + n - 7, "chunked", 7) != 0)
		return 0;
	return n == 7 || v[n - 8] == ',' || v[n - 8] == ' ' || v[n - 8] == '\t';
}

/* the field lines from l to the empty one: 0, 400 or 431 */
static int fields(const char *l, const char *end, struct h1_head *r)
{
	int conn_upgrade = 0, upgrade = 0, te = 0;
	for (;;) {
		const char *e = l < end ? memchr(l, '\n', (size_t)(end - l)) : NULL;
		if (!e || e == l || e[-1] != '\r')
			return 400;
		if (e - 1 == l)   /* the empty line */
			break;
		if (*l == ' ' || *l == '\t')
			return 400;   /* obsolete line folding */
		const char *colon = memchr(l, ':', (size_t)(e - l));
		if (!colon || colon == l)
			return 400;
		for (const char *q = l; q < colon; q++)
			if (!is_tchar((unsigned char)*q))
				return 400;
		const char *v = colon + 1, *ve = e - 1;
		while (v < ve && (*v == ' ' || *v == '\t'))
			v++;
		while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
			ve--;
		for (const char *q = v; q < ve; q++)
			if (*q == 0 || *q == '\r')
				return 400;
		if (r->nh == H1_MAX_HDRS)
			return 431;
		struct h1_hdr *h = &r->h[r->nh++];
		h->name = l;
		h->nlen = (size_t)(colon - l);
		h->val = v;
		h->vlen = (size_t)(ve - v);
		if (h1_name_is(h, "content-length")) {
			long long n = 0;
			if (!h->vlen || h->vlen > 18)
				return 400;
			for (size_t i = 0; i < h->vlen; i++) {
				if (!isdigit((unsigned char)v[i]))
					return 400;
				n = n * 10 + (v[i] - '0');
			}
			if (r->clen >= 0 && r->clen != n)
				return 400;
			r->clen = n;
		} else if (h1_name_is(h, "transfer-encoding")) {
			if (!last_chunked(v, h->vlen))
				return 400;   /* no other coding is read */
			te = 1;
		} else if (h1_name_is(h, "connection")) {
			conn_upgrade |= h1_has_token(v, h->vlen, "upgrade");
		} else if (h1_name_is(h, "upgrade")) {
			upgrade = 1;
		} else if (h1_name_is(h, "expect")) {
			r->expect_continue = h1_has_token(v, h->vlen, "100-continue");
		}
		l = e + 1;
	}
	if (te && r->clen >= 0)
		return 400;   /* both: a smuggling attempt */
	r->chunked = te;
	r->upgrade = upgrade && conn_upgrade;
	return 0;
}

static void head_init(struct h1_head *r)
{
	memset(r, 0, sizeof *r);
	r->clen = -1;
}

int h1_parse_request(const char *p, size_t len, struct h1_head *r)
{
	head_init(r);
	const char *eol = memchr(p, '\n', len);
	if (!eol || eol == p || eol[-1] != '\r')
		return 400;
	/* METHOD SP target SP HTTP/1.x */
	const char *sp1 = memchr(p, ' ', (size_t)(eol - p));
	if (!sp1 || sp1 == p)
		return 400;
	const char *sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
	if (!sp2 || sp2 == sp1 + 1)
		return 400;
	for (const char *q = p; q < sp1; q++)
		if (!is_tchar((unsigned char)*q))
			return 400;
	for (const char *q = sp1 + 1; q < sp2; q++)
		if ((unsigned char)*q <= ' ' || *q == 0x7f)
			return 400;
	r->method = p;
	r->mlen = (size_t)(sp1 - p);
	r->target = sp1 + 1;
	r->tlen = (size_t)(sp2 - sp1 - 1);
	r->version = sp2 + 1;
	r->vlen = (size_t)(eol - 1 - r->version);
	if (r->vlen != 8 || (memcmp(r->version, "HTTP/1.1", 8) && memcmp(r->version, "HTTP/1.0", 8)))
		return 400;
	return fields(eol + 1, p + len, r);
}

int h1_parse_answer(const char *p, size_t len, struct h1_head *a)
{
	head_init(a);
	const char *eol = memchr(p, '\n', len);
	/* HTTP/1.x SP 3DIGIT [SP reason] CRLF */
	if (!eol || eol - p < 13 || eol[-1] != '\r' || memcmp(p, "HTTP/1.", 7) ||
	    !isdigit((unsigned char)p[7]) || p[8] != ' ')
		return -1;
	for (int i = 9; i < 12; i++)
		if (!isdigit((unsigned char)p[i]))
			return -1;
	if (p[12] != ' ' && p + 12 != eol - 1)
		return -1;
	for (const char *q = p + 12; q < eol - 1; q++)
		if (*q == 0 || *q == '\r')
			return -1;
	a->status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
	if (a->status < 100)
		return -1;
	a->version = p;
	a->vlen = 8;
	return fields(eol + 1, p + len, a) ? -1 : 0;
}

/* -------------------------------------------------------- hop by hop */

int h1_hop_by_hop(const char *name, size_t len)
{
	static const char *const names[] = {"connection", "keep-alive", "proxy-connection",
					    "transfer-encoding", "upgrade", "te", "trailer",
					    "proxy-authenticate", NULL};
	for (int i = 0; names[i]; i++)
		if (len == strlen(names[i]) && strncasecmp(name, names[i], len) == 0)
			return 1;
	return 0;
}

/* ------------------------------------------------------------ tokens */

int h1_token_eq(const char *got, const char *want)
{
	size_t gl = strlen(got), wl = strlen(want);
	unsigned char diff = (unsigned char)(gl != wl);
	for (size_t i = 0; i < wl; i++)
		diff |= (unsigned char)(want[i] ^ (i < gl ? got[i] : 0));
	return diff == 0;
}

/* ---------------------------------------------------- chunked bodies */

enum { CK_SIZE, CK_EXT, CK_SIZE_LF, CK_DATA, CK_DATA_CR, CK_DATA_LF, CK_TRAILER, CK_TRAILER_LF };

#define CK_LINE_MAX 1024      /* a size line with its extensions */
#define CK_TRAILER_MAX 8192   /* one trailer line */

static int hexval(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	ch = tolower(ch);
	return ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

long h1_chunk_scan(struct h1_chunk *k, const char *p, size_t n, int *done, h1_sink *sink,
		   void *arg)
{
	size_t i = 0;
	*done = 0;
	while (i < n) {
		int ch = (unsigned char)p[i];
		if (k->st == CK_DATA) {
			size_t take = n - i < k->rem ? n - i : (size_t)k->rem;
			if (sink)
				sink(arg, p + i, take);
			i += take;
			k->rem -= take;
			if (!k->rem)
				k->st = CK_DATA_CR;
			continue;
		}
		i++;
		switch (k->st) {
		case CK_SIZE:   /* 1*HEXDIG, then extensions or the CR */
			if (++k->linelen > CK_LINE_MAX)
				return -1;
			if (hexval(ch) >= 0) {
				if (k->rem >> 56)
					return -1;   /* it would overflow */
				k->rem = k->rem * 16 + (unsigned)hexval(ch);
				k->digits = 1;
			} else if (!k->digits) {
				return -1;
			} else if (ch == ';' || ch == ' ' || ch == '\t') {
				k->st = CK_EXT;
			} else if (ch == '\r') {
				k->st = CK_SIZE_LF;
			} else {
				return -1;
			}
			break;
		case CK_EXT:   /* skipped to the CR */
			if (++k->linelen > CK_LINE_MAX || ch == '\n')
				return -1;
			if (ch == '\r')
				k->st = CK_SIZE_LF;
			break;
		case CK_SIZE_LF:
			if (ch != '\n' || (k->max && k->rem > k->max))
				return -1;
			k->st = k->rem ? CK_DATA : CK_TRAILER;
			k->linelen = 0;
			k->digits = 0;
			break;
		case CK_DATA_CR:
			if (ch != '\r')
				return -1;
			k->st = CK_DATA_LF;
			break;
		case CK_DATA_LF:
			if (ch != '\n')
				return -1;
			k->st = CK_SIZE;
			break;
		case CK_TRAILER:   /* trailer lines, to an empty one */
			if (ch == '\n' || ++k->linelen > CK_TRAILER_MAX)
				return -1;
			if (ch == '\r')
				k->st = CK_TRAILER_LF;
			break;
		default:   /* CK_TRAILER_LF */
			if (ch != '\n')
				return -1;
			if (k->linelen == 1) {   /* (its CR) */
				unsigned long long max = k->max;
				memset(k, 0, sizeof *k);
				k->max = max;
				*done = 1;
				return (long)i;
			}
			k->linelen = 0;
			k->st = CK_TRAILER;
		}
	}
	return (long)i;
}
