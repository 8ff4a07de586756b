/* files.c — the file actions `read`, `write` and `edit` (PROTOCOL.md §4
 * Files): resolving paths against main's cwd, loading whole files under a
 * size cap, the UTF-8 text check, atomic writes (temp file in the same
 * folder, fsync, rename) that keep mode and owner, the str_replace_editor
 * commands with a bounded per-path undo history, and our own SHA-256 and
 * base64. Everything here runs synchronously on the event loop. */
#include "termd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* Largest file any file action reads into memory or writes. */
#define FILES_MAX_BYTES        (64u * 1024u * 1024u)
/* Largest `content` a read/view answer may carry once JSON-escaped (base64
 * or text): the server drops a client with more than 64 MiB pending. */
#define FILES_MAX_REPLY        (56u * 1024u * 1024u)
#define FILES_UNDO_PER_FILE    10
#define FILES_UNDO_MAX_BYTES   (64u * 1024u * 1024u)
#define FILES_UNDO_MAX_ENTRIES 1000
#define FILES_SNIPPET_CONTEXT  4
#define FILES_LIST_MAX         10000   /* entries in a folder view */
#define FILES_SHOW_MAX         200     /* characters of old_str quoted in errors */
#define FILES_LINES_LISTED     20      /* line numbers listed for repeated old_str */
#define FILES_DEFAULT_MODE     0644

/* ================================================================ SHA-256 */

struct files_sha256_ctx {
	uint32_t h[8];
	uint64_t total;
	unsigned char blk[64];
	size_t n;
};

static const uint32_t sha_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, unsigned n)
{
	return (x >> n) | (x << (32 - n));
}

static void sha_block(uint32_t h[8], const unsigned char *p)
{
	uint32_t w[64];
	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | (uint32_t)p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
			      sha_k[i] + w[i];
		uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
		k = g;
		g = f;
		f = e;
		e = d + t1;
		d = c;
		c = b;
		b = a;
		a = t1 + t2;
	}
	h[0] += a; h[1] += b; h[2] += c; h[3] += d;
	h[4] += e; h[5] += f; h[6] += g; h[7] += k;
}

static void sha_init(struct files_sha256_ctx *x)
{
	static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
				       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
	memcpy(x->h, iv, sizeof iv);
	x->total = 0;
	x->n = 0;
}

static void sha_update(struct files_sha256_ctx *x, const void *data, size_t len)
{
	const unsigned char *p = data;
	if (!len)
		return;
	x->total += len;
	if (x->n) {
		size_t take = 64 - x->n < len ? 64 - x->n : len;
		memcpy(x->blk + x->n, p, take);
		x->n += take;
		p += take;
		len -= take;
		if (x->n < 64)
			return;
		sha_block(x->h, x->blk);
		x->n = 0;
	}
	for (; len >= 64; p += 64, len -= 64)
		sha_block(x->h, p);
	memcpy(x->blk, p, len);
	x->n = len;
}

static void sha_final_hex(struct files_sha256_ctx *x, char hex[65])
{
	uint64_t bits = x->total * 8;
	unsigned char pad = 0x80;
	sha_update(x, &pad, 1);
	pad = 0;
	while (x->n != 56)
		sha_update(x, &pad, 1);
	unsigned char len[8];
	for (int i = 0; i < 8; i++)
		len[i] = (unsigned char)(bits >> (56 - 8 * i));
	sha_update(x, len, 8);
	static const char digits[] = "0123456789abcdef";
	for (int i = 0; i < 32; i++) {
		unsigned byte = (x->h[i / 4] >> (24 - 8 * (i % 4))) & 0xff;
		hex[2 * i] = digits[byte >> 4];
		hex[2 * i + 1] = digits[byte & 15];
	}
	hex[64] = 0;
}

/* hex (64 characters + NUL) of the SHA-256 of data[0..n). */
void files_sha256_hex(const void *data, size_t n, char hex[65])
{
	struct files_sha256_ctx x;
	sha_init(&x);
	sha_update(&x, data, n);
	sha_final_hex(&x, hex);
}

/* ================================================================= base64 */

static const char b64_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void files_b64_encode(const void *data, size_t n, buf_t *out)
{
	const unsigned char *p = data;
	buf_reserve(out, (n + 2) / 3 * 4);
	char *o = out->p + out->len;
	size_t i = 0;
	for (; i + 3 <= n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
		*o++ = b64_chars[v >> 18];
		*o++ = b64_chars[(v >> 12) & 63];
		*o++ = b64_chars[(v >> 6) & 63];
		*o++ = b64_chars[v & 63];
	}
	if (i < n) {
		uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
		*o++ = b64_chars[v >> 18];
		*o++ = b64_chars[(v >> 12) & 63];
		*o++ = i + 1 < n ? b64_chars[(v >> 6) & 63] : '=';
		*o++ = '=';
	}
	out->len = (size_t)(o - out->p);
	out->p[out->len] = 0;
}

static int b64_value(unsigned char ch)
{
	if (ch >= 'A' && ch <= 'Z')
		return ch - 'A';
	if (ch >= 'a' && ch <= 'z')
		return ch - 'a' + 26;
	if (ch >= '0' && ch <= '9')
		return ch - '0' + 52;
	if (ch == '+')
		return 62;
	if (ch == '/')
		return 63;
	return -1;
}

/* Standard alphabet; whitespace is skipped, padding may be left out. 0 ok,
 * -1 not base64 (out then holds garbage). */
int files_b64_decode(const char *s, size_t n, buf_t *out)
{
	buf_reserve(out, n / 4 * 3 + 3);
	uint32_t acc = 0;
	int bits = 0;
	size_t data = 0, pad = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n')
			continue;
		if (ch == '=') {
			pad++;
			continue;
		}
		int v = b64_value(ch);
		if (v < 0 || pad)
			return -1;
		data++;
		acc = (acc << 6) | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out->p[out->len++] = (char)((acc >> bits) & 0xff);
		}
	}
	out->p[out->len] = 0;
	if (data % 4 == 1)
		return -1;
	if (pad && (pad != (4 - data % 4) % 4 || data % 4 == 0))
		return -1;
	return 0;
}

/* ================================================================== UTF-8 */

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

/* 1 if s[0..n) is UTF-8 text: valid UTF-8 without NUL bytes. Otherwise 0,
 * with the offset of the first bad byte in *bad (if not NULL). */
int files_utf8_text(const char *s, size_t n, size_t *bad)
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

/* Append s[0..n) with every byte that is not valid UTF-8 (or is NUL)
 * replaced by U+FFFD: for echoing paths and strings that came from outside
 * into JSON. */
static void put_text(buf_t *b, const char *s, size_t n)
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

/* At most FILES_SHOW_MAX characters of s, cut at a character boundary. */
static void put_quoted(buf_t *b, const char *s, size_t n)
{
	size_t chars = utf8_count(s, n);
	if (chars <= FILES_SHOW_MAX) {
		put_text(b, s, n);
		return;
	}
	put_text(b, s, utf8_offset(s, n, FILES_SHOW_MAX));
	buf_printf(b, "[... %zu more characters]", chars - FILES_SHOW_MAX);
}

/* Bytes cJSON needs for s[0..n) inside a JSON string. */
static size_t json_len(const char *s, size_t n)
{
	size_t len = n;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == '"' || ch == '\\' || ch == '\b' || ch == '\f' || ch == '\n' || ch == '\r' ||
		    ch == '\t')
			len += 1;
		else if (ch < 0x20)
			len += 5;
	}
	return len;
}

/* ================================================================= errors */

struct ferr {
	td_err code;
	buf_t msg;
	cJSON *extras;            /* {"code": …} plus details */
};

static void ferr_set(struct ferr *e, td_err code)
{
	e->code = code;
	buf_reset(&e->msg);
	if (e->extras)
		cJSON_Delete(e->extras);
	e->extras = cJSON_CreateObject();
	cJSON_AddStringToObject(e->extras, "code", td_err_name(code));
}

/* An error whose message is "<what> <path>: <strerror>" style, mapped from
 * errno: ENOENT/ENOTDIR → not_found, EISDIR → is_directory, else io_error. */
static int ferr_errno(struct ferr *e, int err, const char *what, const char *path)
{
	td_err code = TD_ERR_IO_ERROR;
	if (err == ENOENT || err == ENOTDIR)
		code = TD_ERR_NOT_FOUND;
	else if (err == EISDIR)
		code = TD_ERR_IS_DIRECTORY;
	else if (err == EFBIG)
		code = TD_ERR_TOO_LARGE;
	ferr_set(e, code);
	buf_printf(&e->msg, "%s ", what);
	put_text(&e->msg, path, strlen(path));
	buf_printf(&e->msg, ": %s", strerror(err));
	return -1;
}

/* Start an error message; the caller appends to e->msg. */
static buf_t *ferr_msg(struct ferr *e, td_err code)
{
	ferr_set(e, code);
	return &e->msg;
}

static void ferr_send(struct conn *c, const cJSON *id, struct ferr *e)
{
	cJSON *ex = e->extras ? e->extras : cJSON_CreateObject();
	e->extras = NULL;
	events_emit(c, id, "error", e->msg.p && e->msg.len ? e->msg.p : "file action failed", ex);
	buf_free(&e->msg);
}

static void ferr_free(struct ferr *e)
{
	buf_free(&e->msg);
	if (e->extras)
		cJSON_Delete(e->extras);
	e->extras = NULL;
}

static void bad_request(struct conn *c, const cJSON *id, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void bad_request(struct conn *c, const cJSON *id, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	events_error(c, id, TD_ERR_BAD_REQUEST, "%s", msg);
}

/* ============================================================ arguments */

/* An integer argument. 0 ok (present says if given), -1 error sent. */
static int arg_int(struct conn *c, const cJSON *id, const cJSON *args, const char *key,
		   long long *out, int *present)
{
	double v = 0;
	int has = 0;
	if (arg_number(c, id, args, key, &v, &has) < 0)
		return -1;
	if (present)
		*present = has;
	if (!has)
		return 0;
	if (v != floor(v) || fabs(v) > 1e15) {
		bad_request(c, id, "argument '%s' must be an integer", key);
		return -1;
	}
	*out = (long long)v;
	return 0;
}

/* encoding: 0 utf-8, 1 base64, -1 error sent. */
static int arg_encoding(struct conn *c, const cJSON *id, const cJSON *args)
{
	const char *enc = NULL;
	if (arg_string(c, id, args, "encoding", &enc, 0) < 0)
		return -1;
	if (!enc || !strcasecmp(enc, "utf-8") || !strcasecmp(enc, "utf8"))
		return 0;
	if (!strcasecmp(enc, "base64"))
		return 1;
	bad_request(c, id, "argument 'encoding' must be \"utf-8\" or \"base64\"");
	return -1;
}

/* ================================================================== paths */

static const char *base_dir(void)
{
	struct session *m = session_find("main");
	if (m && m->cwd && m->cwd[0] == '/')
		return m->cwd;
	return opts.cwd && opts.cwd[0] == '/' ? opts.cwd : "/";
}

/* The absolute, lexically normalized form of path (relative paths against
 * main's cwd; ".", ".." and repeated slashes resolved like `cd` does).
 * Returns NULL (error set) for an empty path. */
static char *resolve_path(const char *path, struct ferr *e)
{
	if (!path[0]) {
		buf_puts(ferr_msg(e, TD_ERR_BAD_REQUEST), "argument 'path' is empty");
		return NULL;
	}
	buf_t in = {0};
	if (path[0] != '/') {
		buf_puts(&in, base_dir());
		buf_putc(&in, '/');
	}
	buf_puts(&in, path);
	buf_t out = {0};
	buf_reserve(&out, in.len + 1);
	const char *p = in.p;
	while (*p) {
		while (*p == '/')
			p++;
		const char *q = p;
		while (*q && *q != '/')
			q++;
		size_t n = (size_t)(q - p);
		if (n == 0 || (n == 1 && p[0] == '.')) {
			/* nothing */
		} else if (n == 2 && p[0] == '.' && p[1] == '.') {
			while (out.len && out.p[out.len - 1] != '/')
				out.len--;
			if (out.len)
				out.len--;
			out.p[out.len] = 0;
		} else {
			buf_putc(&out, '/');
			buf_append(&out, p, n);
		}
		p = q;
	}
	if (!out.len)
		buf_putc(&out, '/');
	buf_free(&in);
	return buf_steal(&out);
}

static int ends_with_slash(const char *path)
{
	size_t n = strlen(path);
	return n > 1 && path[n - 1] == '/';
}

/* mkdir -p of dir (absolute). */
static int make_parents(const char *dir, struct ferr *e)
{
	char *p = xstrdup(dir);
	int rc = 0;
	for (char *s = p + 1;; s++) {
		if (*s == '/' || *s == 0) {
			char save = *s;
			*s = 0;
			if (mkdir(p, 0755) != 0 && errno != EEXIST) {
				rc = ferr_errno(e, errno, "cannot create folder", p);
				if (e->code == TD_ERR_NOT_FOUND)
					e->code = TD_ERR_IO_ERROR;
				break;
			}
			*s = save;
			if (!save)
				break;
		}
	}
	if (rc == 0) {
		struct stat st;
		if (stat(p, &st) != 0) {
			rc = ferr_errno(e, errno, "cannot create folder", p);
		} else if (!S_ISDIR(st.st_mode)) {
			ferr_set(e, TD_ERR_IO_ERROR);
			buf_puts(&e->msg, "cannot create folder ");
			put_text(&e->msg, p, strlen(p));
			buf_puts(&e->msg, ": a file of that name exists");
			rc = -1;
		}
	}
	if (rc < 0) {
		cJSON_DeleteItemFromObject(e->extras, "code");
		cJSON_AddStringToObject(e->extras, "code", td_err_name(e->code));
	}
	free(p);
	return rc;
}

/* ============================================================ file access */

/* Open a regular file for reading without ever blocking on a FIFO or a
 * device. -1 with the error set. */
static int open_regular(const char *path, struct stat *st, struct ferr *e)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return ferr_errno(e, errno, "cannot open", path);
	if (fstat(fd, st) != 0) {
		int err = errno;
		close(fd);
		return ferr_errno(e, err, "cannot stat", path);
	}
	if (S_ISDIR(st->st_mode)) {
		close(fd);
		buf_t *m = ferr_msg(e, TD_ERR_IS_DIRECTORY);
		put_text(m, path, strlen(path));
		buf_puts(m, " is a directory");
		return -1;
	}
	if (!S_ISREG(st->st_mode)) {
		close(fd);
		buf_t *m = ferr_msg(e, TD_ERR_IO_ERROR);
		put_text(m, path, strlen(path));
		buf_puts(m, " is not a regular file");
		return -1;
	}
	return fd;
}

static int too_large(struct ferr *e, const char *path, const char *what, size_t limit)
{
	buf_t *m = ferr_msg(e, TD_ERR_TOO_LARGE);
	put_text(m, path, strlen(path));
	buf_printf(m, " is too large: %s is over the limit of %zu MiB", what, limit >> 20);
	return -1;
}

/* Read a whole regular file (at most FILES_MAX_BYTES). 0 or -1. */
static int load_file(const char *path, buf_t *out, struct stat *st, struct ferr *e)
{
	int fd = open_regular(path, st, e);
	if (fd < 0)
		return -1;
	if ((uint64_t)st->st_size > FILES_MAX_BYTES) {
		close(fd);
		return too_large(e, path, "the file", FILES_MAX_BYTES);
	}
	buf_reserve(out, (size_t)st->st_size + 1);
	for (;;) {
		if (out->len > FILES_MAX_BYTES) {
			close(fd);
			return too_large(e, path, "the file", FILES_MAX_BYTES);
		}
		buf_reserve(out, 65536);
		ssize_t r = read(fd, out->p + out->len, out->cap - out->len - 1);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			int err = errno;
			close(fd);
			return ferr_errno(e, err, "cannot read", path);
		}
		if (r == 0)
			break;
		out->len += (size_t)r;
	}
	out->p[out->len] = 0;
	close(fd);
	return 0;
}

/* SHA-256 of a regular file, streamed. 0 or -1. */
static int hash_file(const char *path, char hex[65], struct ferr *e)
{
	struct stat st;
	int fd = open_regular(path, &st, e);
	if (fd < 0)
		return -1;
	struct files_sha256_ctx x;
	sha_init(&x);
	char *chunk = xmalloc(65536);
	int rc = 0;
	for (;;) {
		ssize_t r = read(fd, chunk, 65536);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			rc = ferr_errno(e, errno, "cannot read", path);
			break;
		}
		if (r == 0)
			break;
		sha_update(&x, chunk, (size_t)r);
	}
	free(chunk);
	close(fd);
	if (rc == 0)
		sha_final_hex(&x, hex);
	return rc;
}

static int write_all(int fd, const char *data, size_t n)
{
	while (n) {
		ssize_t w = write(fd, data, n > (1u << 30) ? (1u << 30) : n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		data += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Replace the file at path (absolute, normalized) by data atomically: a temp
 * file "<name>.termd-XXXXXX" in the same folder, fsync, mode (and owner of
 * the old file, when `old` is given and we may), rename over path, fsync
 * the folder. parents: create missing folders first. */
static int atomic_write(const char *path, const char *data, size_t n, mode_t mode,
			const struct stat *old, int parents, struct ferr *e)
{
	const char *slash = strrchr(path, '/');
	char *dir = slash == path ? xstrdup("/") : xstrndup(path, (size_t)(slash - path));
	const char *name = slash + 1;
	if (parents && make_parents(dir, e) < 0) {
		free(dir);
		return -1;
	}
	buf_t tmp = {0};
	buf_puts(&tmp, dir);
	if (strcmp(dir, "/") != 0)
		buf_putc(&tmp, '/');
	/* keep the temp name under NAME_MAX */
	size_t nl = strlen(name);
	buf_append(&tmp, name, nl > 200 ? 200 : nl);
	buf_puts(&tmp, ".termd-XXXXXX");
	int fd = mkostemp(tmp.p, O_CLOEXEC);
	if (fd < 0) {
		int err = errno;
		ferr_errno(e, err, "cannot create a temporary file in", dir);
		if (e->code == TD_ERR_NOT_FOUND) {
			cJSON_DeleteItemFromObject(e->extras, "code");
			e->code = TD_ERR_IO_ERROR;
			cJSON_AddStringToObject(e->extras, "code", td_err_name(e->code));
		}
		buf_free(&tmp);
		free(dir);
		return -1;
	}
	int rc = 0;
	const char *step = "cannot write";
	if (write_all(fd, data, n) < 0)
		rc = -1;
	if (!rc && old && (old->st_uid != geteuid() || old->st_gid != getegid()))
		if (fchown(fd, old->st_uid, old->st_gid) != 0) {
			/* not ours to give away: the file keeps our ownership */
		}
	if (!rc && fchmod(fd, mode) != 0)
		rc = -1, step = "cannot set the mode of";
	if (!rc && fsync(fd) != 0)
		rc = -1, step = "cannot sync";
	int err = errno;
	if (close(fd) != 0 && !rc)
		rc = -1, err = errno, step = "cannot write";
	if (!rc && rename(tmp.p, path) != 0)
		rc = -1, err = errno, step = "cannot replace";
	if (rc) {
		unlink(tmp.p);
		ferr_errno(e, err, step, path);
		if (e->code != TD_ERR_IS_DIRECTORY) {
			cJSON_DeleteItemFromObject(e->extras, "code");
			e->code = err == EFBIG ? TD_ERR_TOO_LARGE : TD_ERR_IO_ERROR;
			cJSON_AddStringToObject(e->extras, "code", td_err_name(e->code));
		}
	} else {
		int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			if (fsync(dfd) != 0) {
				/* the rename is done; durability of the folder is best effort */
			}
			close(dfd);
		}
	}
	buf_free(&tmp);
	free(dir);
	return rc;
}

/* What is at path now, for writing to it: 0 nothing there (*exists = 0),
 * 1 a regular file (st filled, *target may be replaced by the file a
 * symlink points to), -1 error (a folder, a device, ...). */
static int write_target(char **target, struct stat *st, int *exists, struct ferr *e)
{
	*exists = 0;
	if (lstat(*target, st) != 0) {
		if (errno == ENOENT)
			return 0;
		if (errno == ENOTDIR) {
			buf_t *m = ferr_msg(e, TD_ERR_IO_ERROR);
			buf_puts(m, "cannot write ");
			put_text(m, *target, strlen(*target));
			buf_puts(m, ": a part of the path is a file, not a folder");
			return -1;
		}
		return ferr_errno(e, errno, "cannot stat", *target);
	}
	if (S_ISLNK(st->st_mode)) {
		char *real = realpath(*target, NULL);
		if (real) {
			free(*target);
			*target = real;
			if (stat(*target, st) != 0)
				return ferr_errno(e, errno, "cannot stat", *target);
		} else if (errno == ENOENT) {
			return 0;   /* dangling link: replaced by the new file */
		} else {
			return ferr_errno(e, errno, "cannot resolve", *target);
		}
	}
	if (S_ISDIR(st->st_mode)) {
		buf_t *m = ferr_msg(e, TD_ERR_IS_DIRECTORY);
		put_text(m, *target, strlen(*target));
		buf_puts(m, " is a directory");
		return -1;
	}
	if (!S_ISREG(st->st_mode)) {
		buf_t *m = ferr_msg(e, TD_ERR_IO_ERROR);
		put_text(m, *target, strlen(*target));
		buf_puts(m, " is not a regular file; refusing to replace it");
		return -1;
	}
	*exists = 1;
	return 1;
}

/* ================================================================== lines */

static size_t count_lines(const char *t, size_t n)
{
	size_t lines = 0;
	const char *p = t, *end = t + n;
	while (p < end && (p = memchr(p, '\n', (size_t)(end - p)))) {
		lines++;
		p++;
	}
	if (n && t[n - 1] != '\n')
		lines++;
	return lines;
}

/* Byte offset where line `line` (1-based) starts; n if past the end. */
static size_t line_offset(const char *t, size_t n, size_t line)
{
	size_t off = 0;
	while (line > 1 && off < n) {
		const char *nl = memchr(t + off, '\n', n - off);
		if (!nl)
			return n;
		off = (size_t)(nl - t) + 1;
		line--;
	}
	return off;
}

/* Append lines from..to (1-based, inclusive) of t `cat -n` style: the
 * number right-aligned in 6 columns, a TAB, the line without its line
 * ending; lines joined with "\n". */
static void put_numbered(buf_t *b, const char *t, size_t n, size_t from, size_t to)
{
	size_t off = line_offset(t, n, from);
	for (size_t ln = from; ln <= to && off < n; ln++) {
		const char *nl = memchr(t + off, '\n', n - off);
		size_t end = nl ? (size_t)(nl - t) : n;
		size_t len = end - off;
		if (len && t[off + len - 1] == '\r')
			len--;
		if (ln > from)
			buf_putc(b, '\n');
		buf_printf(b, "%6zu\t", ln);
		buf_append(b, t + off, len);
		off = end + 1;
	}
}

static void put_snippet(buf_t *b, const char *path, const char *t, size_t n, size_t first,
			size_t last)
{
	size_t total = count_lines(t, n);
	size_t from = first > FILES_SNIPPET_CONTEXT ? first - FILES_SNIPPET_CONTEXT : 1;
	size_t to = last + FILES_SNIPPET_CONTEXT;
	if (to > total)
		to = total;
	buf_puts(b, "The file ");
	put_text(b, path, strlen(path));
	buf_puts(b, " has been edited. Here's the result of running `cat -n` on a snippet of ");
	put_text(b, path, strlen(path));
	buf_puts(b, ":\n");
	put_numbered(b, t, n, from, to);
	buf_puts(b, "\nReview the changes and make sure they are as expected. Edit the file again if necessary.");
}

static int check_text(const char *path, const buf_t *data, struct ferr *e, const char *hint)
{
	size_t bad = 0;
	if (files_utf8_text(data->p ? data->p : "", data->len, &bad))
		return 0;
	buf_t *m = ferr_msg(e, TD_ERR_BINARY_FILE);
	put_text(m, path, strlen(path));
	buf_printf(m, " is not UTF-8 text (%s at byte %zu)%s",
		   data->p[bad] ? "invalid UTF-8" : "a NUL byte", bad, hint);
	return -1;
}

/* =================================================================== read */

void files_read_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	const char *path_arg = NULL;
	long long start = 1, end = -1;
	int has_start = 0, has_end = 0;
	if (arg_string(c, id, args, "path", &path_arg, 1) < 0 ||
	    arg_int(c, id, args, "start", &start, &has_start) < 0 ||
	    arg_int(c, id, args, "end", &end, &has_end) < 0)
		return;
	int b64 = arg_encoding(c, id, args);
	if (b64 < 0)
		return;
	if (start < 1) {
		bad_request(c, id, "'start' must be >= 1 (lines are numbered from 1)");
		return;
	}
	if (end != -1 && end < start) {
		bad_request(c, id, "'end' must be -1 (to the end) or >= start");
		return;
	}
	struct ferr e = {0};
	buf_t data = {0}, out = {0};
	struct stat st;
	char *path = resolve_path(path_arg, &e);
	if (!path || load_file(path, &data, &st, &e) < 0)
		goto fail;
	char hex[65];
	files_sha256_hex(data.p, data.len, hex);
	size_t total = count_lines(data.p, data.len);
	const char *content;
	size_t first = 1, last = total;
	if (b64) {
		if ((data.len + 2) / 3 * 4 > FILES_MAX_REPLY) {
			too_large(&e, path, "its base64 form", FILES_MAX_REPLY);
			goto fail;
		}
		files_b64_encode(data.p, data.len, &out);
		content = out.p ? out.p : "";
	} else {
		if (check_text(path, &data, &e, "; read it with encoding \"base64\"") < 0)
			goto fail;
		if ((size_t)start > total && !(start == 1 && total == 0)) {
			buf_t *m = ferr_msg(&e, TD_ERR_BAD_REQUEST);
			buf_printf(m, "start %lld is past the end of ", start);
			put_text(m, path, strlen(path));
			buf_printf(m, " (%zu lines)", total);
			goto fail;
		}
		first = (size_t)start;
		last = end == -1 || (size_t)end > total ? total : (size_t)end;
		size_t a = line_offset(data.p, data.len, first);
		size_t b = line_offset(data.p, data.len, last + 1);
		if (json_len(data.p + a, b - a) > FILES_MAX_REPLY) {
			too_large(&e, path, "the text asked for", FILES_MAX_REPLY);
			goto fail;
		}
		buf_append(&out, data.p + a, b - a);
		content = out.p;
	}
	cJSON *ex = cJSON_CreateObject();
	buf_t shown = {0};
	put_text(&shown, path, strlen(path));
	cJSON_AddStringToObject(ex, "path", shown.p);
	buf_free(&shown);
	cJSON_AddNumberToObject(ex, "total_lines", (double)total);
	cJSON_AddStringToObject(ex, "sha256", hex);
	cJSON_AddNumberToObject(ex, "bytes", (double)data.len);
	cJSON_AddStringToObject(ex, "encoding", b64 ? "base64" : "utf-8");
	cJSON_AddNumberToObject(ex, "start", (double)first);
	cJSON_AddNumberToObject(ex, "end", (double)last);
	/* the raw file is not needed any more while the answer is built */
	buf_free(&data);
	events_emit(c, id, "read", content, ex);
	buf_free(&out);
	free(path);
	return;
fail:
	ferr_send(c, id, &e);
	ferr_free(&e);
	buf_free(&data);
	buf_free(&out);
	free(path);
}

/* ================================================================== write */

/* "0644", "755", "0o600": 0..07777. -1 if not that. */
static long parse_mode(const char *s)
{
	if (s[0] == '0' && (s[1] == 'o' || s[1] == 'O'))
		s += 2;
	size_t n = strlen(s);
	if (n == 0 || n > 5)
		return -1;
	long v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '7')
			return -1;
		v = v * 8 + (s[i] - '0');
	}
	return v > 07777 ? -1 : v;
}

static int valid_sha_hex(const char *s)
{
	if (strlen(s) != 64)
		return 0;
	for (int i = 0; i < 64; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
		      (s[i] >= 'A' && s[i] <= 'F')))
			return 0;
	return 1;
}

void files_write_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	const char *path_arg = NULL, *content = NULL, *mode_arg = NULL, *expected = NULL;
	if (arg_string(c, id, args, "path", &path_arg, 1) < 0 ||
	    arg_string(c, id, args, "content", &content, 1) < 0 ||
	    arg_string(c, id, args, "mode", &mode_arg, 0) < 0 ||
	    arg_string(c, id, args, "expected_sha256", &expected, 0) < 0)
		return;
	int b64 = arg_encoding(c, id, args);
	if (b64 < 0)
		return;
	long mode = -1;
	if (mode_arg && (mode = parse_mode(mode_arg)) < 0) {
		bad_request(c, id, "argument 'mode' must be an octal string such as \"0644\" or \"755\"");
		return;
	}
	if (expected && expected[0] && !valid_sha_hex(expected)) {
		bad_request(c, id, "argument 'expected_sha256' must be 64 hex digits (or \"\" for "
			    "\"the file must not exist\")");
		return;
	}
	struct ferr e = {0};
	buf_t bytes = {0};
	const char *data = content;
	size_t len = strlen(content);
	char *path = NULL;
	if (b64) {
		if (files_b64_decode(content, len, &bytes) < 0) {
			buf_free(&bytes);
			bad_request(c, id, "argument 'content' is not valid base64");
			return;
		}
		data = bytes.p;
		len = bytes.len;
	}
	if (len > FILES_MAX_BYTES) {
		too_large(&e, path_arg, "the content", FILES_MAX_BYTES);
		goto fail;
	}
	path = resolve_path(path_arg, &e);
	if (!path)
		goto fail;
	if (ends_with_slash(path_arg)) {
		buf_t *m = ferr_msg(&e, TD_ERR_IS_DIRECTORY);
		put_text(m, path, strlen(path));
		buf_puts(m, "/ names a folder; write needs a file path");
		goto fail;
	}
	struct stat st;
	int exists;
	if (write_target(&path, &st, &exists, &e) < 0)
		goto fail;
	if (expected) {
		char cur[65] = "";
		if (exists && hash_file(path, cur, &e) < 0)
			goto fail;
		int same = exists ? strcasecmp(cur, expected) == 0 : expected[0] == 0;
		if (!same) {
			buf_t *m = ferr_msg(&e, TD_ERR_MISMATCH);
			put_text(m, path, strlen(path));
			if (!exists)
				buf_printf(m, " does not exist, expected sha256 %s; nothing was written", expected);
			else if (!expected[0])
				buf_printf(m, " already exists (sha256 %s), expected none; nothing was written", cur);
			else
				buf_printf(m, " has sha256 %s, expected %s; nothing was written", cur, expected);
			if (exists)
				cJSON_AddStringToObject(e.extras, "sha256", cur);
			else
				cJSON_AddNullToObject(e.extras, "sha256");
			goto fail;
		}
	}
	mode_t m = mode >= 0 ? (mode_t)mode : exists ? (st.st_mode & 07777) : FILES_DEFAULT_MODE;
	if (atomic_write(path, data ? data : "", len, m, exists ? &st : NULL, 1, &e) < 0)
		goto fail;
	char hex[65], ms[8];
	files_sha256_hex(data ? data : "", len, hex);
	snprintf(ms, sizeof ms, "%04o", (unsigned)m);
	cJSON *ex = cJSON_CreateObject();
	buf_t shown = {0};
	put_text(&shown, path, strlen(path));
	cJSON_AddStringToObject(ex, "path", shown.p);
	cJSON_AddStringToObject(ex, "sha256", hex);
	cJSON_AddNumberToObject(ex, "bytes", (double)len);
	cJSON_AddStringToObject(ex, "mode", ms);
	cJSON_AddBoolToObject(ex, "created", !exists);
	buf_t msg = {0};
	buf_printf(&msg, "wrote %zu bytes to ", len);
	buf_append(&msg, shown.p, shown.len);
	buf_free(&shown);
	buf_free(&bytes);
	events_emit(c, id, "write", msg.p, ex);
	buf_free(&msg);
	free(path);
	return;
fail:
	ferr_send(c, id, &e);
	ferr_free(&e);
	buf_free(&bytes);
	free(path);
}

/* ============================================================ undo history */

/* One step back for a path: its content before an edit (or that it did
 * not exist), and the hash of what the edit left, so an undo never throws
 * away changes made since by something else. */
struct hist_entry {
	struct hist_entry *older;
	uint64_t serial;          /* global age, for dropping the oldest */
	int existed;
	mode_t mode;
	char *data;
	size_t len;
	char after[65];
};

struct hist_file {
	struct hist_file *next;
	char *path;
	struct hist_entry *top;
	int depth;
};

static struct hist_file *hist_files;
static size_t hist_bytes, hist_entries;
static uint64_t hist_serial;

static struct hist_file *hist_find(const char *path, int create)
{
	for (struct hist_file *h = hist_files; h; h = h->next)
		if (strcmp(h->path, path) == 0)
			return h;
	if (!create)
		return NULL;
	struct hist_file *h = xcalloc(1, sizeof *h);
	h->path = xstrdup(path);
	h->next = hist_files;
	hist_files = h;
	return h;
}

static void hist_entry_free(struct hist_entry *x)
{
	hist_bytes -= x->len;
	hist_entries--;
	free(x->data);
	free(x);
}

static void hist_file_drop(struct hist_file *h)
{
	struct hist_file **pp = &hist_files;
	while (*pp != h)
		pp = &(*pp)->next;
	*pp = h->next;
	while (h->top) {
		struct hist_entry *x = h->top;
		h->top = x->older;
		hist_entry_free(x);
	}
	free(h->path);
	free(h);
}

/* Remove the oldest entry of h (the bottom of its stack). */
static void hist_drop_bottom(struct hist_file *h)
{
	struct hist_entry **pp = &h->top;
	while ((*pp)->older)
		pp = &(*pp)->older;
	hist_entry_free(*pp);
	*pp = NULL;
	if (--h->depth == 0)
		hist_file_drop(h);
}

/* Remove the oldest entry of all. */
static void hist_drop_oldest(void)
{
	struct hist_file *best = NULL;
	uint64_t best_serial = UINT64_MAX;
	for (struct hist_file *h = hist_files; h; h = h->next) {
		struct hist_entry *x = h->top;
		while (x->older)
			x = x->older;
		if (x->serial < best_serial) {
			best_serial = x->serial;
			best = h;
		}
	}
	if (best)
		hist_drop_bottom(best);
}

/* Record the state of path before an edit that left content with hash
 * `after`. Returns 0, or -1 when the old content is too large to keep (the
 * path's history is then cleared: it could no longer be undone in order). */
static int hist_push(const char *path, int existed, mode_t mode, const char *data, size_t len,
		     const char *after)
{
	if (len > FILES_UNDO_MAX_BYTES) {
		struct hist_file *h = hist_find(path, 0);
		if (h)
			hist_file_drop(h);
		return -1;
	}
	struct hist_file *h = hist_find(path, 1);
	struct hist_entry *x = xcalloc(1, sizeof *x);
	x->serial = ++hist_serial;
	x->existed = existed;
	x->mode = mode;
	x->data = len ? xmalloc(len) : NULL;
	if (len)
		memcpy(x->data, data, len);
	x->len = len;
	memcpy(x->after, after, 65);
	x->older = h->top;
	h->top = x;
	h->depth++;
	hist_bytes += len;
	hist_entries++;
	if (h->depth > FILES_UNDO_PER_FILE)
		hist_drop_bottom(h);   /* h keeps at least the new entry */
	while (hist_bytes > FILES_UNDO_MAX_BYTES || hist_entries > FILES_UNDO_MAX_ENTRIES)
		hist_drop_oldest();
	return 0;
}

/* =================================================================== edit */

static void emit_edit(struct conn *c, const cJSON *id, const char *command, const char *path,
		      const char *content, cJSON *ex)
{
	if (!ex)
		ex = cJSON_CreateObject();
	buf_t shown = {0};
	put_text(&shown, path, strlen(path));
	cJSON_AddStringToObject(ex, "command", command);
	cJSON_AddStringToObject(ex, "path", shown.p);
	buf_free(&shown);
	events_emit(c, id, "edit", content, ex);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Folder listing for view: entries two levels deep, hidden ones left out,
 * each folder followed by its own entries, names sorted, folders with a
 * trailing '/'. */
static void list_dir(buf_t *b, const char *dir, int depth, size_t *count)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			names = xrealloc(names, cap * sizeof *names);
		}
		names[n++] = xstrdup(de->d_name);
	}
	if (n > 1)
		qsort(names, n, sizeof *names, cmp_str);
	int dfd = dirfd(d);
	for (size_t i = 0; i < n; i++) {
		if (*count >= FILES_LIST_MAX) {
			if (*count == FILES_LIST_MAX)
				buf_printf(b, "[... the listing stops at %d entries ...]\n", FILES_LIST_MAX);
			(*count)++;
			break;
		}
		struct stat st;
		int is_dir = 0, is_link = 0;
		if (fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) == 0) {
			is_link = S_ISLNK(st.st_mode);
			is_dir = S_ISDIR(st.st_mode);
			if (is_link && fstatat(dfd, names[i], &st, 0) == 0)
				is_dir = S_ISDIR(st.st_mode);
		}
		buf_t full = {0};
		buf_puts(&full, dir);
		if (strcmp(dir, "/") != 0)
			buf_putc(&full, '/');
		buf_puts(&full, names[i]);
		put_text(b, full.p, full.len);
		buf_puts(b, is_dir ? "/\n" : "\n");
		(*count)++;
		if (is_dir && !is_link && depth < 2)
			list_dir(b, full.p, depth + 1, count);
		buf_free(&full);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	closedir(d);
}

static void edit_view(struct conn *c, const cJSON *id, const cJSON *args, const char *path)
{
	struct ferr e = {0};
	buf_t data = {0}, out = {0};
	struct stat st;
	const cJSON *vr = cJSON_GetObjectItemCaseSensitive(args, "view_range");
	if (vr && cJSON_IsNull(vr))
		vr = NULL;
	long long from = 1, to = -1;
	if (vr) {
		if (!cJSON_IsArray(vr) || cJSON_GetArraySize(vr) != 2 ||
		    !cJSON_IsNumber(cJSON_GetArrayItem(vr, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(vr, 1))) {
			bad_request(c, id, "'view_range' must be [start, end] (end -1 = to the end)");
			return;
		}
		double a = cJSON_GetArrayItem(vr, 0)->valuedouble, b = cJSON_GetArrayItem(vr, 1)->valuedouble;
		if (a != floor(a) || b != floor(b) || fabs(a) > 1e15 || fabs(b) > 1e15) {
			bad_request(c, id, "'view_range' must hold two integers");
			return;
		}
		from = (long long)a;
		to = (long long)b;
	}
	if (stat(path, &st) != 0) {
		ferr_errno(&e, errno, "cannot view", path);
		goto fail;
	}
	if (S_ISDIR(st.st_mode)) {
		if (vr) {
			bad_request(c, id, "'view_range' is for files, not directories");
			return;
		}
		DIR *d = opendir(path);
		if (!d) {
			ferr_errno(&e, errno, "cannot list", path);
			goto fail;
		}
		closedir(d);
		size_t count = 0;
		list_dir(&out, path, 1, &count);
		if (out.len && out.p[out.len - 1] == '\n')
			out.p[--out.len] = 0;
		cJSON *ex = cJSON_CreateObject();
		cJSON_AddBoolToObject(ex, "is_directory", 1);
		cJSON_AddNumberToObject(ex, "entries", (double)(count > FILES_LIST_MAX ? FILES_LIST_MAX : count));
		emit_edit(c, id, "view", path, out.p ? out.p : "", ex);
		buf_free(&out);
		return;
	}
	if (load_file(path, &data, &st, &e) < 0 ||
	    check_text(path, &data, &e, "; read it with `read` and encoding \"base64\"") < 0)
		goto fail;
	size_t total = count_lines(data.p, data.len);
	if (vr) {
		if (from < 1 || (size_t)from > total || (to != -1 && (to < from || (size_t)to > total))) {
			buf_t *m = ferr_msg(&e, TD_ERR_BAD_REQUEST);
			buf_printf(m, "invalid view_range [%lld, %lld]: ", from, to);
			put_text(m, path, strlen(path));
			buf_printf(m, " has %zu lines; start must be in [1, %zu] and end -1 or in [start, %zu]",
				   total, total, total);
			goto fail;
		}
	}
	size_t last = to == -1 ? total : (size_t)to;
	put_numbered(&out, data.p, data.len, (size_t)from, last);
	if (out.len > FILES_MAX_REPLY) {
		too_large(&e, path, "the numbered view", FILES_MAX_REPLY);
		goto fail;
	}
	char hex[65];
	files_sha256_hex(data.p, data.len, hex);
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddNumberToObject(ex, "total_lines", (double)total);
	cJSON_AddNumberToObject(ex, "start", total ? (double)from : 0);
	cJSON_AddNumberToObject(ex, "end", (double)last);
	cJSON_AddStringToObject(ex, "sha256", hex);
	buf_free(&data);
	emit_edit(c, id, "view", path, out.p ? out.p : "", ex);
	buf_free(&out);
	return;
fail:
	ferr_send(c, id, &e);
	ferr_free(&e);
	buf_free(&data);
	buf_free(&out);
}

/* Load the file an edit changes: a regular UTF-8 text file. */
static int edit_load(const char *path, buf_t *data, struct stat *st, struct ferr *e)
{
	if (load_file(path, data, st, e) < 0)
		return -1;
	return check_text(path, data, e, "; edit works on text files only");
}

/* Write the edited text keeping the file's mode (through a symlink to
 * the file it points to), and record the old text under `path` for
 * undo_edit. */
static int edit_commit(const char *path, const buf_t *old, int existed, const struct stat *st,
		       const char *text, size_t len, int parents, char after[65], struct ferr *e)
{
	mode_t mode = existed ? (st->st_mode & 07777) : FILES_DEFAULT_MODE;
	char *real = existed ? realpath(path, NULL) : NULL;
	int rc = atomic_write(real ? real : path, text, len, mode, existed ? st : NULL, parents, e);
	free(real);
	if (rc < 0)
		return -1;
	files_sha256_hex(text, len, after);
	if (hist_push(path, existed, mode, old->p, old->len, after) < 0)
		log_warn("edit: previous content of %s too large to keep for undo_edit", path);
	return 0;
}

static void edit_create(struct conn *c, const cJSON *id, const cJSON *args, char *path,
			const char *path_arg)
{
	const char *text = NULL;
	if (arg_string(c, id, args, "file_text", &text, 1) < 0)
		return;
	struct ferr e = {0};
	buf_t old = {0};
	struct stat st;
	int exists;
	if (ends_with_slash(path_arg)) {
		buf_t *m = ferr_msg(&e, TD_ERR_IS_DIRECTORY);
		put_text(m, path, strlen(path));
		buf_puts(m, "/ names a folder; create needs a file path");
		goto fail;
	}
	char *target = xstrdup(path);
	int rc = write_target(&target, &st, &exists, &e);
	free(target);
	if (rc < 0)
		goto fail;
	if (exists && load_file(path, &old, &st, &e) < 0)
		goto fail;
	char after[65];
	size_t len = strlen(text);
	if (len > FILES_MAX_BYTES) {
		too_large(&e, path, "file_text", FILES_MAX_BYTES);
		goto fail;
	}
	if (edit_commit(path, &old, exists, &st, text, len, 1, after, &e) < 0)
		goto fail;
	buf_t msg = {0};
	buf_puts(&msg, exists ? "File overwritten successfully at: " : "File created successfully at: ");
	put_text(&msg, path, strlen(path));
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "sha256", after);
	cJSON_AddBoolToObject(ex, "created", !exists);
	emit_edit(c, id, "create", path, msg.p, ex);
	buf_free(&msg);
	buf_free(&old);
	return;
fail:
	ferr_send(c, id, &e);
	ferr_free(&e);
	buf_free(&old);
}

/* Occurrences of needle in hay, overlapping ones included; the first
 * `max` offsets go to offs. */
static size_t find_all(const char *hay, size_t n, const char *needle, size_t m, size_t *offs,
		       size_t max)
{
	size_t count = 0, off = 0;
	while (off + m <= n) {
		const char *p = memmem(hay + off, n - off, needle, m);
		if (!p)
			break;
		size_t at = (size_t)(p - hay);
		if (count < max)
			offs[count] = at;
		count++;
		off = at + 1;
	}
	return count;
}

/* s with every "\n" not preceded by "\r" turned into "\r\n". */
static char *to_crlf(const char *s, size_t n, size_t *outlen)
{
	buf_t b = {0};
	buf_reserve(&b, n + 16);
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\n' && (i == 0 || s[i - 1] != '\r'))
			buf_putc(&b, '\r');
		buf_putc(&b, s[i]);
	}
	*outlen = b.len;
	return buf_steal(&b);
}

/* Does the file use CRLF line endings (its first line ends with one)? */
static int uses_crlf(const char *t, size_t n)
{
	const char *nl = memchr(t, '\n', n);
	return nl && nl > t && nl[-1] == '\r';
}

static size_t line_of(const char *t, size_t off)
{
	size_t line = 1;
	for (const char *p = t; (p = memchr(p, '\n', (size_t)(t + off - p))); p++)
		line++;
	return line;
}

static size_t count_nl(const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += s[i] == '\n';
	return k;
}

static void edit_str_replace(struct conn *c, const cJSON *id, const cJSON *args, const char *path)
{
	const char *old_arg = NULL, *new_arg = "";
	if (arg_string(c, id, args, "old_str", &old_arg, 1) < 0 ||
	    arg_string(c, id, args, "new_str", &new_arg, 0) < 0)
		return;
	if (!new_arg)
		new_arg = "";
	if (!old_arg[0]) {
		bad_request(c, id, "'old_str' must not be empty");
		return;
	}
	struct ferr e = {0};
	buf_t data = {0}, text = {0};
	char *conv_old = NULL, *conv_new = NULL;
	struct stat st;
	if (edit_load(path, &data, &st, &e) < 0)
		goto fail;
	const char *old_s = old_arg, *new_s = new_arg;
	size_t old_n = strlen(old_arg), new_n = strlen(new_arg);
	size_t offs[FILES_LINES_LISTED];
	size_t count = find_all(data.p, data.len, old_s, old_n, offs, FILES_LINES_LISTED);
	if (count == 0 && uses_crlf(data.p, data.len) && memchr(old_s, '\n', old_n) &&
	    !memchr(old_s, '\r', old_n)) {
		/* the text came with "\n" line endings for a CRLF file: match it
		 * with the file's own, and keep them in the replacement */
		conv_old = to_crlf(old_s, old_n, &old_n);
		conv_new = to_crlf(new_s, new_n, &new_n);
		old_s = conv_old;
		new_s = conv_new;
		count = find_all(data.p, data.len, old_s, old_n, offs, FILES_LINES_LISTED);
	}
	if (count == 0) {
		buf_t *m = ferr_msg(&e, TD_ERR_MISMATCH);
		buf_puts(m, "No replacement was performed, old_str `");
		put_quoted(m, old_arg, strlen(old_arg));
		buf_puts(m, "` did not appear verbatim in ");
		put_text(m, path, strlen(path));
		buf_putc(m, '.');
		cJSON_AddNumberToObject(e.extras, "occurrences", 0);
		goto fail;
	}
	if (count > 1) {
		buf_t *m = ferr_msg(&e, TD_ERR_MISMATCH);
		cJSON *ls = cJSON_CreateArray();
		buf_printf(m, "No replacement was performed: old_str occurs %zu times in ", count);
		put_text(m, path, strlen(path));
		buf_puts(m, ", in lines ");
		size_t listed = count < FILES_LINES_LISTED ? count : FILES_LINES_LISTED;
		for (size_t i = 0; i < listed; i++) {
			size_t ln = line_of(data.p, offs[i]);
			buf_printf(m, "%s%zu", i ? ", " : "", ln);
			cJSON_AddItemToArray(ls, cJSON_CreateNumber((double)ln));
		}
		if (count > listed)
			buf_puts(m, ", ...");
		buf_puts(m, ". It must occur exactly once: include more surrounding text to make it unique. old_str: `");
		put_quoted(m, old_arg, strlen(old_arg));
		buf_putc(m, '`');
		cJSON_AddNumberToObject(e.extras, "occurrences", (double)count);
		cJSON_AddItemToObject(e.extras, "lines", ls);
		goto fail;
	}
	size_t at = offs[0];
	buf_reserve(&text, data.len - old_n + new_n);
	buf_append(&text, data.p, at);
	buf_append(&text, new_s, new_n);
	buf_append(&text, data.p + at + old_n, data.len - at - old_n);
	if (text.len > FILES_MAX_BYTES) {
		too_large(&e, path, "the edited file", FILES_MAX_BYTES);
		goto fail;
	}
	char after[65];
	if (edit_commit(path, &data, 1, &st, text.p ? text.p : "", text.len, 0, after, &e) < 0)
		goto fail;
	size_t first = line_of(text.p, at);
	size_t last = first + count_nl(new_s, new_n);
	buf_t out = {0};
	put_snippet(&out, path, text.p ? text.p : "", text.len, first, last);
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "sha256", after);
	cJSON_AddNumberToObject(ex, "line", (double)first);
	emit_edit(c, id, "str_replace", path, out.p, ex);
	buf_free(&out);
	buf_free(&data);
	buf_free(&text);
	free(conv_old);
	free(conv_new);
	return;
fail:
	ferr_send(c, id, &e);
	ferr_free(&e);
	buf_free(&data);
	buf_free(&text);
	free(conv_old);
	free(conv_new);
}

static void edit_insert(struct conn *c, const cJSON *id, const cJSON *args, const char *path)
{
	long long line = 0;
	int has_line = 0;
	const char *new_arg = NULL;
	if (arg_int(c, id, args, "insert_line", &line, &has_line) < 0 ||
	    arg_string(c, id, args, "new_str", &new_arg, 1) < 0)
		return;
	if (!has_line) {
		bad_request(c, id, "missing argument 'insert_line'");
		return;
	}
	struct ferr e = {0};
	buf_t data = {0}, text = {0}, ins = {0};
	struct stat st;
	if (edit_load(path, &data, &st, &e) < 0)
		goto fail;
	size_t total = count_lines(data.p, data.len);
	if (line < 0 || (size_t)line > total) {
		buf_t *m = ferr_msg(&e, TD_ERR_BAD_REQUEST);
		buf_printf(m, "invalid insert_line %lld: ", line);
		put_text(m, path, strlen(path));
		buf_printf(m, " has %zu lines; insert_line must be in [0, %zu]", total, total);
		goto fail;
	}
	int crlf = uses_crlf(data.p, data.len);
	const char *eol = crlf ? "\r\n" : "\n";
	size_t new_n = strlen(new_arg);
	if (crlf) {
		size_t n;
		char *conv = to_crlf(new_arg, new_n, &n);
		buf_append(&ins, conv, n);
		free(conv);
	} else {
		buf_append(&ins, new_arg, new_n);
	}
	int no_final_nl = data.len && data.p[data.len - 1] != '\n';
	size_t at;
	if ((size_t)line == total && no_final_nl) {
		/* after a last line without a line ending: it gets one, the
		 * inserted text ends the file without one, as before */
		at = data.len;
		buf_t t = {0};
		buf_puts(&t, eol);
		size_t n = ins.len;
		if (n && ins.p[n - 1] == '\n')
			n -= (n > 1 && ins.p[n - 2] == '\r') ? 2 : 1;
		buf_append(&t, ins.p, n);
		buf_free(&ins);
		ins = t;
	} else {
		at = line_offset(data.p, data.len, (size_t)line + 1);
		if (!ins.len || ins.p[ins.len - 1] != '\n')
			buf_puts(&ins, eol);
	}
	buf_append(&text, data.p, at);
	buf_append(&text, ins.p, ins.len);
	buf_append(&text, data.p + at, data.len - at);
	if (text.len > FILES_MAX_BYTES) {
		too_large(&e, path, "the edited file", FILES_MAX_BYTES);
		goto fail;
	}
	char after[65];
	if (edit_commit(path, &data, 1, &st, text.p, text.len, 0, after, &e) < 0)
		goto fail;
	size_t first = (size_t)line + 1;
	size_t added = count_lines(new_arg, new_n);
	size_t last = first + (added ? added - 1 : 0);
	buf_t out = {0};
	put_snippet(&out, path, text.p, text.len, first, last);
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "sha256", after);
	cJSON_AddNumberToObject(ex, "line", (double)first);
	emit_edit(c, id, "insert", path, out.p, ex);
	buf_free(&out);
	buf_free(&data);
	buf_free(&text);
	buf_free(&ins);
	return;
fail:
	ferr_send(c, id, &e);
	ferr_free(&e);
	buf_free(&data);
	buf_free(&text);
	buf_free(&ins);
}

static void edit_undo(struct conn *c, const cJSON *id, const char *path)
{
	struct ferr e = {0};
	struct hist_file *h = hist_find(path, 0);
	if (!h) {
		buf_t *m = ferr_msg(&e, TD_ERR_BAD_REQUEST);
		buf_puts(m, "No edit history for ");
		put_text(m, path, strlen(path));
		goto fail;
	}
	struct hist_entry *x = h->top;
	struct stat st;
	int exists = lstat(path, &st) == 0;
	char cur[65] = "";
	if (exists && hash_file(path, cur, &e) < 0)
		goto fail;
	if (!exists || strcmp(cur, x->after) != 0) {
		buf_t *m = ferr_msg(&e, TD_ERR_MISMATCH);
		put_text(m, path, strlen(path));
		buf_puts(m, exists ? " has been changed since the last edit" : " has been removed since the last edit");
		buf_puts(m, " (not by `edit`); undoing would lose that change, so nothing was undone");
		goto fail;
	}
	char *real = realpath(path, NULL);
	const char *target = real ? real : path;
	if (stat(target, &st) != 0) {
		ferr_errno(&e, errno, "cannot stat", target);
		free(real);
		goto fail;
	}
	if (x->existed) {
		if (atomic_write(target, x->data ? x->data : "", x->len, st.st_mode & 07777, &st, 0, &e) < 0) {
			free(real);
			goto fail;
		}
	} else if (unlink(target) != 0) {
		ferr_errno(&e, errno, "cannot remove", target);
		free(real);
		goto fail;
	}
	free(real);
	int existed = x->existed;
	h->top = x->older;
	hist_entry_free(x);
	int left = --h->depth;
	if (!left)
		hist_file_drop(h);
	buf_t msg = {0};
	buf_puts(&msg, "Last edit to ");
	put_text(&msg, path, strlen(path));
	buf_puts(&msg, " undone successfully.");
	if (!existed)
		buf_puts(&msg, " The file did not exist before that edit and has been removed.");
	if (left)
		buf_printf(&msg, " %d earlier edit%s can still be undone.", left, left == 1 ? "" : "s");
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddNumberToObject(ex, "undo_left", left);
	cJSON_AddBoolToObject(ex, "removed", !existed);
	emit_edit(c, id, "undo_edit", path, msg.p, ex);
	buf_free(&msg);
	return;
fail:
	ferr_send(c, id, &e);
	ferr_free(&e);
}

void files_edit_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	const char *command = NULL, *path_arg = NULL;
	if (arg_string(c, id, args, "command", &command, 1) < 0 ||
	    arg_string(c, id, args, "path", &path_arg, 1) < 0)
		return;
	static const char *const commands[] = {"view", "create", "str_replace", "insert", "undo_edit"};
	int k = -1;
	for (int i = 0; i < 5; i++)
		if (strcmp(command, commands[i]) == 0)
			k = i;
	if (k < 0) {
		bad_request(c, id, "'command' must be one of view, create, str_replace, insert, undo_edit");
		return;
	}
	struct ferr e = {0};
	char *path = resolve_path(path_arg, &e);
	if (!path) {
		ferr_send(c, id, &e);
		ferr_free(&e);
		return;
	}
	switch (k) {
	case 0: edit_view(c, id, args, path); break;
	case 1: edit_create(c, id, args, path, path_arg); break;
	case 2: edit_str_replace(c, id, args, path); break;
	case 3: edit_insert(c, id, args, path); break;
	default: edit_undo(c, id, path); break;
	}
	free(path);
}
