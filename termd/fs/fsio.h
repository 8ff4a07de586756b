/* fsio.h — the file actions' file-system layer, with no JSON and no
 * connection: path resolution, loading and hashing files, atomic writes,
 * mkdir -p, what a write would replace, the UTF-8 text check, line
 * offsets, SHA-256 and base64 (OpenSSL). Every call that can fail returns
 * an fsio_status and writes a one-line message (paths made valid UTF-8)
 * into the caller's buffer. */
#ifndef TERMD_FSIO_H
#define TERMD_FSIO_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "proto.h"
#include "util.h"

/* Largest file any file action reads into memory or writes. */
#define FSIO_MAX_BYTES    (64u * 1024u * 1024u)
/* Mode of a file a write creates when none is given. */
#define FSIO_DEFAULT_MODE 0644

enum fsio_status {
	FSIO_OK = 0,
	FSIO_NOT_FOUND,      /* not_found: no such file, or a part of the path missing */
	FSIO_IS_DIRECTORY,   /* is_directory */
	FSIO_TOO_LARGE,      /* too_large: over a size limit, or EFBIG */
	FSIO_NOT_TEXT,       /* binary_file: not UTF-8 text */
	FSIO_IO,             /* io_error: everything else */
};

/* The protocol's error code for a status other than FSIO_OK. */
td_err fsio_td_err(enum fsio_status st);

/* The absolute, lexically normalized form of path: a relative path is
 * taken against base (absolute); ".", ".." and repeated slashes are
 * resolved like `cd` does. NULL for an empty path. Free the result. */
char *fsio_resolve(const char *base, const char *path);
/* 1 if path names a folder by its form ("dir/"), "/" excepted. */
int fsio_names_folder(const char *path);

/* Message "<what> <path>: <strerror(err)>"; the status from err:
 * ENOENT/ENOTDIR not found, EISDIR is a directory, EFBIG too large. */
enum fsio_status fsio_errno(buf_t *msg, int err, const char *what, const char *path);
/* Message "<path> is too large: <what> is over the limit of N MiB". */
enum fsio_status fsio_too_large(buf_t *msg, const char *path, const char *what, size_t limit);

/* Read a whole regular file of at most max bytes into out (NUL-terminated;
 * st filled). Never blocks on a FIFO or a device: those are refused. */
enum fsio_status fsio_load(const char *path, size_t max, buf_t *out, struct stat *st, buf_t *msg);
/* SHA-256 (64 lowercase hex digits) of a regular file, read in pieces. */
enum fsio_status fsio_hash_file(const char *path, char hex[65], buf_t *msg);
/* FSIO_OK if data[0..n) is UTF-8 text (utf8_text), else FSIO_NOT_TEXT with
 * "<path> is not UTF-8 text (... at byte N)<hint>". */
enum fsio_status fsio_check_text(const char *path, const char *data, size_t n, const char *hint,
				 buf_t *msg);

/* mkdir -p of dir (absolute); a file in the way is an I/O error. */
enum fsio_status fsio_mkdirs(const char *dir, buf_t *msg);
/* What is at *target now, for writing to it. FSIO_OK with *exists 0 when
 * nothing is there (or a dangling symlink), *exists 1 for a regular file
 * (st filled; a symlink's *target is replaced by the file it points to,
 * malloc'd). A folder, a device or a path through a file is an error. */
enum fsio_status fsio_write_target(char **target, struct stat *st, int *exists, buf_t *msg);
/* Replace the file at path (absolute, normalized) by data[0..n)
 * atomically: a temp file "<name>.termd-XXXXXX" in the same folder, fsync,
 * mode, the owner of `old` (when given and we may), rename over path,
 * fsync of the folder. parents: create missing folders first. */
enum fsio_status fsio_atomic_write(const char *path, const char *data, size_t n, mode_t mode,
				   const struct stat *old, int parents, buf_t *msg);

/* Lines of t[0..n): line endings counted, plus a last line without one. */
size_t fsio_count_lines(const char *t, size_t n);
/* Byte offset where line `line` (1-based) starts; n if past the end. */
size_t fsio_line_offset(const char *t, size_t n, size_t line);

/* SHA-256 of data[0..n) as 64 lowercase hex digits and a NUL. */
void fsio_sha256_hex(const void *data, size_t n, char hex[65]);
/* Append the standard base64 of data[0..n), padded, to out. */
void fsio_b64_encode(const void *data, size_t n, buf_t *out);
/* Append the bytes of standard base64 s[0..n) to out. Lenient where
 * people and tools are: whitespace anywhere is skipped and the padding may
 * be left out. Strict otherwise: another alphabet, misplaced or wrong
 * padding, or a lone last character is refused. 0 ok, -1 not base64 (out
 * then holds part of the bytes). */
int fsio_b64_decode(const char *s, size_t n, buf_t *out);

#endif
