/* fsio.c — owns the file actions' file-system layer (fsio.h): resolving
 * paths, loading and hashing regular files under a size cap, the UTF-8
 * text check, atomic writes (temp file in the same folder, fsync, rename)
 * that keep mode and owner, mkdir -p, what a write would replace, line
 * offsets, and SHA-256/base64 through OpenSSL's EVP with a thin lenient
 * wrapper for decoding. No JSON, no connection, no termd state: each call
 * answers a status and a message. */
#include "fsio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#define FSIO_CHUNK 65536

td_err fsio_td_err(enum fsio_status st)
{
	switch (st) {
	case FSIO_NOT_FOUND: return TD_ERR_NOT_FOUND;
	case FSIO_IS_DIRECTORY: return TD_ERR_IS_DIRECTORY;
	case FSIO_TOO_LARGE: return TD_ERR_TOO_LARGE;
	case FSIO_NOT_TEXT: return TD_ERR_BINARY_FILE;
	case FSIO_OK:           /* not an error: a caller's mistake */
	case FSIO_IO: break;
	}
	return TD_ERR_IO_ERROR;
}

static void put_path(buf_t *msg, const char *path)
{
	buf_put_utf8(msg, path, strlen(path));
}

/* ================================================================== paths */

char *fsio_resolve(const char *base, const char *path)
{
	if (!path[0])
		return NULL;
	buf_t in = {0};
	if (path[0] != '/') {
		buf_puts(&in, base);
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

int fsio_names_folder(const char *path)
{
	size_t n = strlen(path);
	return n > 1 && path[n - 1] == '/';
}

/* ================================================================= errors */

enum fsio_status fsio_errno(buf_t *msg, int err, const char *what, const char *path)
{
	enum fsio_status st = FSIO_IO;
	if (err == ENOENT || err == ENOTDIR)
		st = FSIO_NOT_FOUND;
	else if (err == EISDIR)
		st = FSIO_IS_DIRECTORY;
	else if (err == EFBIG)
		st = FSIO_TOO_LARGE;
	buf_reset(msg);
	buf_printf(msg, "%s ", what);
	put_path(msg, path);
	buf_printf(msg, ": %s", strerror(err));
	return st;
}

enum fsio_status fsio_too_large(buf_t *msg, const char *path, const char *what, size_t limit)
{
	buf_reset(msg);
	put_path(msg, path);
	buf_printf(msg, " is too large: %s is over the limit of %zu MiB", what, limit >> 20);
	return FSIO_TOO_LARGE;
}

/* "<path><text>" with the given status. */
static enum fsio_status path_error(buf_t *msg, enum fsio_status st, const char *pre,
				   const char *path, const char *text)
{
	buf_reset(msg);
	buf_puts(msg, pre);
	put_path(msg, path);
	buf_puts(msg, text);
	return st;
}

/* ================================================================ reading */

/* Open a regular file for reading without ever blocking on a FIFO or a
 * device. -1 with *st_out and msg set. */
static int open_regular(const char *path, struct stat *st, enum fsio_status *st_out, buf_t *msg)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		*st_out = fsio_errno(msg, errno, "cannot open", path);
		return -1;
	}
	if (fstat(fd, st) != 0) {
		int err = errno;
		close(fd);
		*st_out = fsio_errno(msg, err, "cannot stat", path);
		return -1;
	}
	if (S_ISDIR(st->st_mode) || !S_ISREG(st->st_mode)) {
		close(fd);
		*st_out = S_ISDIR(st->st_mode)
			? path_error(msg, FSIO_IS_DIRECTORY, "", path, " is a directory")
			: path_error(msg, FSIO_IO, "", path, " is not a regular file");
		return -1;
	}
	return fd;
}

enum fsio_status fsio_load(const char *path, size_t max, buf_t *out, struct stat *st, buf_t *msg)
{
	enum fsio_status rc;
	int fd = open_regular(path, st, &rc, msg);
	if (fd < 0)
		return rc;
	if ((uint64_t)st->st_size > max) {
		close(fd);
		return fsio_too_large(msg, path, "the file", max);
	}
	buf_reserve(out, (size_t)st->st_size + 1);
	for (;;) {
		/* the size may have grown since fstat */
		if (out->len > max) {
			close(fd);
			return fsio_too_large(msg, path, "the file", max);
		}
		buf_reserve(out, FSIO_CHUNK);
		ssize_t r = read(fd, out->p + out->len, out->cap - out->len - 1);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			int err = errno;
			close(fd);
			return fsio_errno(msg, err, "cannot read", path);
		}
		if (r == 0)
			break;
		out->len += (size_t)r;
	}
	out->p[out->len] = 0;
	close(fd);
	return FSIO_OK;
}

/* OpenSSL failing on a digest means no memory or no provider: like
 * xmalloc, that is not something to answer a client about. */
static void crypto_failed(const char *what)
{
	fprintf(stderr, "termd: OpenSSL: %s failed\n", what);
	abort();
}

static void hex_of(const unsigned char md[32], char hex[65])
{
	static const char digits[] = "0123456789abcdef";
	for (int i = 0; i < 32; i++) {
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 15];
	}
	hex[64] = 0;
}

void fsio_sha256_hex(const void *data, size_t n, char hex[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	if (!EVP_Digest(n ? data : "", n, md, &len, EVP_sha256(), NULL) || len != 32)
		crypto_failed("SHA-256");
	hex_of(md, hex);
}

enum fsio_status fsio_hash_file(const char *path, char hex[65], buf_t *msg)
{
	struct stat st;
	enum fsio_status rc = FSIO_OK;
	int fd = open_regular(path, &st, &rc, msg);
	if (fd < 0)
		return rc;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL))
		crypto_failed("SHA-256");
	char *chunk = xmalloc(FSIO_CHUNK);
	for (;;) {
		ssize_t r = read(fd, chunk, FSIO_CHUNK);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			rc = fsio_errno(msg, errno, "cannot read", path);
			break;
		}
		if (r == 0)
			break;
		if (!EVP_DigestUpdate(ctx, chunk, (size_t)r))
			crypto_failed("SHA-256");
	}
	free(chunk);
	close(fd);
	if (rc == FSIO_OK) {
		unsigned char md[EVP_MAX_MD_SIZE];
		unsigned int len = 0;
		if (!EVP_DigestFinal_ex(ctx, md, &len) || len != 32)
			crypto_failed("SHA-256");
		hex_of(md, hex);
	}
	EVP_MD_CTX_free(ctx);
	return rc;
}

enum fsio_status fsio_check_text(const char *path, const char *data, size_t n, const char *hint,
				 buf_t *msg)
{
	size_t bad = 0;
	if (utf8_text(data ? data : "", n, &bad))
		return FSIO_OK;
	buf_reset(msg);
	put_path(msg, path);
	buf_printf(msg, " is not UTF-8 text (%s at byte %zu)%s",
		   data[bad] ? "invalid UTF-8" : "a NUL byte", bad, hint);
	return FSIO_NOT_TEXT;
}

/* ================================================================ writing */

enum fsio_status fsio_mkdirs(const char *dir, buf_t *msg)
{
	char *p = xstrdup(dir);
	enum fsio_status rc = FSIO_OK;
	for (char *s = p + 1;; s++) {
		if (*s == '/' || *s == 0) {
			char save = *s;
			*s = 0;
			if (mkdir(p, 0755) != 0 && errno != EEXIST) {
				rc = fsio_errno(msg, errno, "cannot create folder", p);
				if (rc == FSIO_NOT_FOUND)
					rc = FSIO_IO;
				break;
			}
			*s = save;
			if (!save)
				break;
		}
	}
	if (rc == FSIO_OK) {
		struct stat st;
		if (stat(p, &st) != 0)
			rc = fsio_errno(msg, errno, "cannot create folder", p);
		else if (!S_ISDIR(st.st_mode))
			rc = path_error(msg, FSIO_IO, "cannot create folder ", p,
					": a file of that name exists");
	}
	free(p);
	return rc;
}

enum fsio_status fsio_write_target(char **target, struct stat *st, int *exists, buf_t *msg)
{
	*exists = 0;
	if (lstat(*target, st) != 0) {
		if (errno == ENOENT)
			return FSIO_OK;
		if (errno == ENOTDIR)
			return path_error(msg, FSIO_IO, "cannot write ", *target,
					  ": a part of the path is a file, not a folder");
		return fsio_errno(msg, errno, "cannot stat", *target);
	}
	if (S_ISLNK(st->st_mode)) {
		char *real = realpath(*target, NULL);
		if (real) {
			free(*target);
			*target = real;
			if (stat(*target, st) != 0)
				return fsio_errno(msg, errno, "cannot stat", *target);
		} else if (errno == ENOENT) {
			return FSIO_OK;   /* dangling link: replaced by the new file */
		} else {
			return fsio_errno(msg, errno, "cannot resolve", *target);
		}
	}
	if (S_ISDIR(st->st_mode))
		return path_error(msg, FSIO_IS_DIRECTORY, "", *target, " is a directory");
	if (!S_ISREG(st->st_mode))
		return path_error(msg, FSIO_IO, "", *target,
				  " is not a regular file; refusing to replace it");
	*exists = 1;
	return FSIO_OK;
}

/* Fill the temp file fd with data, owner and mode, and rename it over
 * path. 0, or -1 with errno and *step set. */
static int fill_and_rename(int fd, const char *tmp, const char *path, const char *data, size_t n,
			   mode_t mode, const struct stat *old, const char **step)
{
	int rc = 0;
	*step = "cannot write";
	if (write_all(fd, data, n) < 0)
		rc = -1;
	if (!rc && old && (old->st_uid != geteuid() || old->st_gid != getegid()))
		if (fchown(fd, old->st_uid, old->st_gid) != 0) {
			/* not ours to give away: the file keeps our ownership */
		}
	if (!rc && fchmod(fd, mode) != 0)
		rc = -1, *step = "cannot set the mode of";
	if (!rc && fsync(fd) != 0)
		rc = -1, *step = "cannot sync";
	int err = errno;
	if (close(fd) != 0 && !rc)
		rc = -1, err = errno, *step = "cannot write";
	if (!rc && rename(tmp, path) != 0)
		rc = -1, err = errno, *step = "cannot replace";
	errno = err;
	return rc;
}

enum fsio_status fsio_atomic_write(const char *path, const char *data, size_t n, mode_t mode,
				   const struct stat *old, int parents, buf_t *msg)
{
	const char *slash = strrchr(path, '/');
	char *dir = slash == path ? xstrdup("/") : xstrndup(path, (size_t)(slash - path));
	const char *name = slash + 1;
	enum fsio_status rc = FSIO_OK;
	if (parents && (rc = fsio_mkdirs(dir, msg)) != FSIO_OK) {
		free(dir);
		return rc;
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
		rc = fsio_errno(msg, errno, "cannot create a temporary file in", dir);
		if (rc == FSIO_NOT_FOUND)
			rc = FSIO_IO;
	} else {
		const char *step;
		if (fill_and_rename(fd, tmp.p, path, data, n, mode, old, &step) < 0) {
			int err = errno;
			unlink(tmp.p);
			rc = fsio_errno(msg, err, step, path);
			if (rc != FSIO_IS_DIRECTORY)
				rc = err == EFBIG ? FSIO_TOO_LARGE : FSIO_IO;
		} else {
			int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (dfd >= 0) {
				if (fsync(dfd) != 0) {
					/* the rename is done; durability of the folder is best effort */
				}
				close(dfd);
			}
		}
	}
	buf_free(&tmp);
	free(dir);
	return rc;
}

/* ================================================================== lines */

size_t fsio_count_lines(const char *t, size_t n)
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

size_t fsio_line_offset(const char *t, size_t n, size_t line)
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

/* ================================================================= base64 */

void fsio_b64_encode(const void *data, size_t n, buf_t *out)
{
	/* in pieces of a multiple of 3 bytes: EVP_EncodeBlock takes an int
	 * and pads only at the very end */
	enum { PIECE = 3 * 16384 };
	const unsigned char *p = data;
	buf_reserve(out, (n + 2) / 3 * 4 + 1);
	do {
		size_t k = n > PIECE ? PIECE : n;
		int w = EVP_EncodeBlock((unsigned char *)out->p + out->len, p, (int)k);
		out->len += (size_t)w;
		p += k;
		n -= k;
	} while (n);
	out->p[out->len] = 0;
}

static int b64_alphabet(unsigned char ch)
{
	return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
	       ch == '+' || ch == '/';
}

/* Decode the k (a multiple of 4) alphabet characters in q to out. */
static int b64_flush(const char *q, size_t k, buf_t *out)
{
	if (!k)
		return 0;
	buf_reserve(out, k / 4 * 3 + 1);
	int w = EVP_DecodeBlock((unsigned char *)out->p + out->len, (const unsigned char *)q, (int)k);
	if (w < 0)
		return -1;
	out->len += (size_t)w;
	out->p[out->len] = 0;
	return 0;
}

/* The leniency and the checks are done here, character by character; the
 * alphabet characters go to EVP_DecodeBlock in groups of four (it knows no
 * whitespace inside, and takes '=' for a zero digit without checking
 * where it stands). */
int fsio_b64_decode(const char *s, size_t n, buf_t *out)
{
	char q[4096];
	size_t k = 0, data = 0, pad = 0;
	buf_reserve(out, n / 4 * 3 + 3);
	out->p[out->len] = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n')
			continue;
		if (ch == '=') {
			pad++;
			continue;
		}
		if (!b64_alphabet(ch) || pad)
			return -1;
		data++;
		q[k++] = (char)ch;
		if (k == sizeof q) {
			if (b64_flush(q, k, out) < 0)
				return -1;
			k = 0;
		}
	}
	if (data % 4 == 1)
		return -1;
	if (pad && (pad != (4 - data % 4) % 4 || data % 4 == 0))
		return -1;
	/* a last group of 2 or 3 characters: complete it with zero digits and
	 * keep the 1 or 2 bytes it holds */
	size_t tail = k % 4, drop = tail ? 4 - tail : 0;
	for (size_t i = 0; i < drop; i++)
		q[k++] = 'A';
	if (b64_flush(q, k, out) < 0)
		return -1;
	out->len -= drop;
	out->p[out->len] = 0;
	return 0;
}
