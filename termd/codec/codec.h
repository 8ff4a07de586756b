/* codec.h — the formats the doors read and write, with no connection and
 * no state of termd's: zip archives (zip.c), a Connect request envelope
 * (envelope.c), a multipart/form-data field (multipart.c). */
#ifndef TERMD_CODEC_H
#define TERMD_CODEC_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <zlib.h>

#include "util.h"

/* ---- zip archives (zip.c) ---- */
/* Each entry of a zip held in memory: 0 to go on, -1 (err set) to stop. */
typedef int (*zip_entry_fn)(void *arg, const char *name, const unsigned char *data, size_t len,
			    int is_dir, char *err, size_t errlen);
int zip_read(const void *zip, size_t len, zip_entry_fn fn, void *arg, char *err, size_t errlen);
/* Before zip_read: entries at most max_entries, declared sizes adding up to
 * at most budget, no two entries sharing bytes. 0, or -1 and err. */
int zip_check(const void *zip, size_t len, size_t budget, size_t max_entries, char *err,
	      size_t errlen);
struct zipw {
	buf_t out, cd;            /* entries so far, their central directory */
	unsigned n;
};
void zipw_add(struct zipw *zw, const char *name, const void *data, size_t len, time_t mtime);
/* The archive into *out (taken over by the caller); zw is empty again. */
void zipw_finish(struct zipw *zw, buf_t *out);
/* A zip written as it goes (entries deflated in pieces, crc and sizes in
 * data descriptors, the central directory at the end): each call appends
 * to out what is ready. Sizes and offsets under 4 GiB (no zip64). */
struct zips {
	z_stream z;
	int deflating;
	char *name;
	unsigned dtime, ddate, n;
	unsigned long crc;
	uint64_t usize, csize, off, written;
	buf_t cd;
};
void zips_begin(struct zips *zs, buf_t *out, const char *name, time_t mtime);
int zips_data(struct zips *zs, buf_t *out, const void *data, size_t n, int last);
/* what the entry's deflate holds back, out now (a slice must send something) */
int zips_flush(struct zips *zs, buf_t *out);
void zips_end(struct zips *zs, buf_t *out);
void zips_finish(struct zips *zs, buf_t *out);
void zips_free(struct zips *zs);


/* ---- a Connect request envelope (envelope.c) ---- */
enum { CONNECT_BAD = 1, CONNECT_COMPRESSED, CONNECT_TOO_LARGE };
/* The message of the one envelope body[0..len) must be (at most max
 * bytes): 0 with *msg, *n; or CONNECT_* and why. */
int connect_unwrap(const char *body, size_t len, size_t max, const char **msg, size_t *n,
		   char *why, size_t whylen);

/* ---- multipart/form-data (multipart.c) ---- */
struct mp_part {
	const char *data;         /* points into the body */
	size_t len;
	int has_filename;
	char filename[1024];
};
/* The part named `field`: 0, or -1 and why. */
int multipart_find(const char *ctype, const char *body, size_t len, const char *field,
		   struct mp_part *part, char *err, size_t errlen);

#endif
