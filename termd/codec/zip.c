/* zip.c — the few zip bits OpenHands' file transfer needs, on zlib: a
 * reader of stored and deflated entries through the central directory
 * (no zip64, no encryption; names with a leading / or a .. part skipped,
 * as Python's unpack_archive does) and the check that goes first (entry
 * count, declared sizes, entries sharing bytes); a writer of whole archives
 * in memory that deflates each entry or stores it when that is no smaller;
 * and a writer that streams (entries deflated in pieces, data descriptors). */
#include "codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#define ZIP_ENTRY_MAX (1024u * 1024u * 1024u)   /* one entry, uncompressed */

static unsigned rd16(const unsigned char *p) { return (unsigned)p[0] | (unsigned)p[1] << 8; }
static unsigned long rd32(const unsigned char *p)
{
	return (unsigned long)p[0] | (unsigned long)p[1] << 8 | (unsigned long)p[2] << 16 |
	       (unsigned long)p[3] << 24;
}

/* a name Python's unpack_archive would skip: absolute, or with a .. part */
static int unsafe_name(const char *n)
{
	if (n[0] == '/' || n[0] == '\\')
		return 1;
	for (const char *p = n; *p;) {
		const char *e = p + strcspn(p, "/\\");
		if (e - p == 2 && p[0] == '.' && p[1] == '.')
			return 1;
		p = *e ? e + 1 : e;
	}
	return 0;
}

static int inflate_raw(const unsigned char *in, size_t n, unsigned char *out, size_t outlen)
{
	z_stream z;
	memset(&z, 0, sizeof z);
	if (inflateInit2(&z, -MAX_WBITS) != Z_OK)
		return -1;
	z.next_in = (unsigned char *)in;
	z.avail_in = (uInt)n;
	z.next_out = out;
	z.avail_out = (uInt)outlen;
	int r = inflate(&z, Z_FINISH);
	size_t got = z.total_out;
	inflateEnd(&z);
	return r == Z_STREAM_END && got == outlen ? 0 : -1;
}

/* The end of central directory record, searched from the end (a comment
 * of up to 64 KiB may follow it). 0 and *at, or -1 and err. */
static int find_eocd(const unsigned char *z, size_t len, size_t *at, char *err, size_t errlen)
{
	if (len < 22) {
		snprintf(err, errlen, "not a zip file");
		return -1;
	}
	size_t eocd = len - 22, stop = len > 22 + 65535 ? len - 22 - 65535 : 0;
	for (;; eocd--) {
		if (rd32(z + eocd) == 0x06054b50) {
			*at = eocd;
			return 0;
		}
		if (eocd == stop) {
			snprintf(err, errlen, "not a zip file");
			return -1;
		}
	}
}

struct zspan {
	size_t from, to;   /* an entry's local header to the end of its data */
};

static int span_cmp(const void *a, const void *b)
{
	const struct zspan *x = a, *y = b;
	return x->from < y->from ? -1 : x->from > y->from;
}

/* Before anything is inflated: at most max_entries entries, their sizes
 * as declared adding up to at most budget, and no two entries sharing
 * bytes (a zip bomb points many entries at one deflated member: each is
 * small, the total is not). Sizes are checked again as entries inflate:
 * inflate_raw never writes past the declared size. 0, or -1 and err. */
int zip_check(const void *data, size_t len, size_t budget, size_t max_entries, char *err,
	      size_t errlen)
{
	const unsigned char *z = data;
	size_t eocd;
	if (find_eocd(z, len, &eocd, err, errlen) < 0)
		return -1;
	unsigned long count = rd16(z + eocd + 10);
	unsigned long cdsize = rd32(z + eocd + 12), cdoff = rd32(z + eocd + 16);
	if (count > max_entries) {
		snprintf(err, errlen, "the zip has %lu entries, over the limit of %zu (--upload-entries)",
			 count, max_entries);
		return -1;
	}
	if (cdoff > len || cdsize > len - cdoff)
		return 0;   /* zip_read says what is wrong */
	struct zspan *sp = xcalloc(count ? count : 1, sizeof *sp);
	size_t n = 0, p = cdoff;
	unsigned long long total = 0;
	int rc = 0;
	for (unsigned long i = 0; i < count && rc == 0; i++) {
		if (p + 46 > len || rd32(z + p) != 0x02014b50)
			break;   /* zip_read says what is wrong */
		unsigned long csize = rd32(z + p + 20), usize = rd32(z + p + 24);
		unsigned nlen = rd16(z + p + 28), xlen = rd16(z + p + 30), clen = rd16(z + p + 32);
		unsigned long loff = rd32(z + p + 42);
		p += 46 + (size_t)nlen + xlen + clen;
		total += usize;
		if (total > budget) {
			snprintf(err, errlen, "the zip holds over %zu bytes uncompressed, the limit "
				 "(--upload-max)", budget);
			rc = -1;
		} else if (loff + 30 <= len && rd32(z + loff) == 0x04034b50) {
			size_t doff = loff + 30 + rd16(z + loff + 26) + rd16(z + loff + 28);
			sp[n].from = loff;
			sp[n].to = doff + csize;
			n++;
		}
	}
	if (rc == 0 && n > 1) {
		qsort(sp, n, sizeof *sp, span_cmp);
		for (size_t i = 1; i < n; i++) {
			if (sp[i].from < sp[i - 1].to) {
				snprintf(err, errlen, "bad zip file: entries share their data (a zip bomb?)");
				rc = -1;
				break;
			}
		}
	}
	free(sp);
	return rc;
}

int zip_read(const void *data, size_t len, zip_entry_fn fn, void *arg, char *err, size_t errlen)
{
	const unsigned char *z = data;
	err[0] = 0;
	size_t eocd;
	if (find_eocd(z, len, &eocd, err, errlen) < 0)
		return -1;
	unsigned long count = rd16(z + eocd + 10);
	unsigned long cdsize = rd32(z + eocd + 12), cdoff = rd32(z + eocd + 16);
	if (count == 0xffff || cdoff == 0xffffffffUL) {
		snprintf(err, errlen, "zip64 archives are not supported");
		return -1;
	}
	if (cdoff > len || cdsize > len - cdoff) {
		snprintf(err, errlen, "bad zip file: central directory out of bounds");
		return -1;
	}
	size_t p = cdoff;
	for (unsigned long i = 0; i < count; i++) {
		if (p + 46 > len || rd32(z + p) != 0x02014b50) {
			snprintf(err, errlen, "bad zip file: central directory entry %lu", i);
			return -1;
		}
		unsigned flags = rd16(z + p + 8), method = rd16(z + p + 10);
		unsigned long crc = rd32(z + p + 16), csize = rd32(z + p + 20), usize = rd32(z + p + 24);
		unsigned nlen = rd16(z + p + 28), xlen = rd16(z + p + 30), clen = rd16(z + p + 32);
		unsigned long loff = rd32(z + p + 42);
		if (p + 46 + nlen > len) {
			snprintf(err, errlen, "bad zip file: entry %lu name out of bounds", i);
			return -1;
		}
		char *name = xmalloc(nlen + 1);
		memcpy(name, z + p + 46, nlen);
		name[nlen] = 0;
		p += 46 + (size_t)nlen + xlen + clen;
		int rc = 0;
		if (csize == 0xffffffffUL || usize == 0xffffffffUL || loff == 0xffffffffUL) {
			snprintf(err, errlen, "zip64 entries are not supported (%s)", name);
			rc = -1;
		} else if (flags & 1) {
			snprintf(err, errlen, "encrypted entries are not supported (%s)", name);
			rc = -1;
		} else if (method != 0 && method != 8) {
			snprintf(err, errlen, "compression method %u is not supported (%s)", method, name);
			rc = -1;
		} else if (usize > ZIP_ENTRY_MAX) {
			snprintf(err, errlen, "entry %s is too large (%lu bytes)", name, usize);
			rc = -1;
		} else if (loff + 30 > len || rd32(z + loff) != 0x04034b50) {
			snprintf(err, errlen, "bad zip file: local header of %s", name);
			rc = -1;
		}
		if (rc == 0 && nlen && !unsafe_name(name)) {
			size_t doff = loff + 30 + rd16(z + loff + 26) + rd16(z + loff + 28);
			if (doff > len || csize > len - doff) {
				snprintf(err, errlen, "bad zip file: data of %s out of bounds", name);
				rc = -1;
			} else {
				int is_dir = name[nlen - 1] == '/';
				unsigned char *out = xmalloc(usize + 1);
				if (method == 0) {
					if (csize != usize)
						rc = -1;
					else
						memcpy(out, z + doff, usize);
				} else {
					rc = inflate_raw(z + doff, csize, out, usize);
				}
				if (rc < 0)
					snprintf(err, errlen, "bad zip file: cannot decompress %s", name);
				else if (crc32(0L, out, (uInt)usize) != crc) {
					snprintf(err, errlen, "bad zip file: CRC mismatch in %s", name);
					rc = -1;
				} else {
					rc = fn(arg, name, out, usize, is_dir, err, errlen);
				}
				free(out);
			}
		}
		free(name);
		if (rc < 0)
			return -1;
	}
	return 0;
}

static void put16(buf_t *b, unsigned v)
{
	unsigned char c[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
	buf_append(b, c, 2);
}

static void put32(buf_t *b, unsigned long v)
{
	unsigned char c[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
			      (unsigned char)(v >> 24)};
	buf_append(b, c, 4);
}

static void dos_time(time_t mtime, unsigned *dtime, unsigned *ddate)
{
	struct tm tm;
	localtime_r(&mtime, &tm);
	if (tm.tm_year < 80) {
		memset(&tm, 0, sizeof tm);
		tm.tm_year = 80;
		tm.tm_mday = 1;
	}
	*dtime = (unsigned)(tm.tm_hour << 11 | tm.tm_min << 5 | tm.tm_sec / 2);
	*ddate = (unsigned)((tm.tm_year - 80) << 9 | (tm.tm_mon + 1) << 5 | tm.tm_mday);
}

void zipw_add(struct zipw *zw, const char *name, const void *data, size_t len, time_t mtime)
{
	unsigned long crc = crc32(0L, data, (uInt)len);
	/* deflate; stored when that is no smaller */
	uLong bound = compressBound((uLong)len) + 16;
	unsigned char *def = xmalloc(bound);
	z_stream z;
	memset(&z, 0, sizeof z);
	size_t dlen = (size_t)-1;
	if (deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK) {
		z.next_in = (unsigned char *)data;
		z.avail_in = (uInt)len;
		z.next_out = def;
		z.avail_out = (uInt)bound;
		if (deflate(&z, Z_FINISH) == Z_STREAM_END)
			dlen = z.total_out;
		deflateEnd(&z);
	}
	int method = dlen < len ? 8 : 0;
	const void *body = method ? (const void *)def : data;
	size_t blen = method ? dlen : len;
	unsigned dtime, ddate;
	dos_time(mtime, &dtime, &ddate);
	size_t nlen = strlen(name);
	unsigned long off = (unsigned long)zw->out.len;
	put32(&zw->out, 0x04034b50);
	put16(&zw->out, 20);
	put16(&zw->out, 0x0800);   /* names are UTF-8 */
	put16(&zw->out, (unsigned)method);
	put16(&zw->out, dtime);
	put16(&zw->out, ddate);
	put32(&zw->out, crc);
	put32(&zw->out, (unsigned long)blen);
	put32(&zw->out, (unsigned long)len);
	put16(&zw->out, (unsigned)nlen);
	put16(&zw->out, 0);
	buf_append(&zw->out, name, nlen);
	buf_append(&zw->out, body, blen);

	put32(&zw->cd, 0x02014b50);
	put16(&zw->cd, 0x0314);    /* made by: Unix, 2.0 */
	put16(&zw->cd, 20);
	put16(&zw->cd, 0x0800);
	put16(&zw->cd, (unsigned)method);
	put16(&zw->cd, dtime);
	put16(&zw->cd, ddate);
	put32(&zw->cd, crc);
	put32(&zw->cd, (unsigned long)blen);
	put32(&zw->cd, (unsigned long)len);
	put16(&zw->cd, (unsigned)nlen);
	put16(&zw->cd, 0);
	put16(&zw->cd, 0);
	put16(&zw->cd, 0);
	put16(&zw->cd, 0);
	put32(&zw->cd, 0100644UL << 16);   /* external attributes: a regular file */
	put32(&zw->cd, off);
	buf_append(&zw->cd, name, nlen);
	zw->n++;
	free(def);
}

void zipw_finish(struct zipw *zw, buf_t *out)
{
	unsigned long cdoff = (unsigned long)zw->out.len;
	buf_append(&zw->out, zw->cd.p ? zw->cd.p : "", zw->cd.len);
	put32(&zw->out, 0x06054b50);
	put16(&zw->out, 0);
	put16(&zw->out, 0);
	put16(&zw->out, zw->n);
	put16(&zw->out, zw->n);
	put32(&zw->out, (unsigned long)zw->cd.len);
	put32(&zw->out, cdoff);
	put16(&zw->out, 0);
	*out = zw->out;
	memset(&zw->out, 0, sizeof zw->out);
	buf_free(&zw->cd);
	zw->n = 0;
}

/* ------------------------------------------- a zip written as it goes */

static int zips_deflate(struct zips *zs, buf_t *out, const void *data, size_t n, int flush);

void zips_begin(struct zips *zs, buf_t *out, const char *name, time_t mtime)
{
	size_t nlen = strlen(name);
	free(zs->name);
	zs->name = xstrdup(name);
	dos_time(mtime, &zs->dtime, &zs->ddate);
	zs->off = zs->written;
	zs->crc = crc32(0L, NULL, 0);
	zs->usize = zs->csize = 0;
	memset(&zs->z, 0, sizeof zs->z);
	zs->deflating = deflateInit2(&zs->z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK;
	size_t before = out->len;
	put32(out, 0x04034b50);
	put16(out, 20);
	put16(out, 0x0808);   /* UTF-8 names; crc and sizes in a data descriptor */
	put16(out, 8);
	put16(out, zs->dtime);
	put16(out, zs->ddate);
	put32(out, 0);
	put32(out, 0);
	put32(out, 0);
	put16(out, (unsigned)nlen);
	put16(out, 0);
	buf_append(out, name, nlen);
	zs->written += out->len - before;
}

int zips_data(struct zips *zs, buf_t *out, const void *data, size_t n, int last)
{
	return zips_deflate(zs, out, data, n, last ? Z_FINISH : Z_NO_FLUSH);
}

int zips_flush(struct zips *zs, buf_t *out)
{
	return zips_deflate(zs, out, "", 0, Z_SYNC_FLUSH);
}

static int zips_deflate(struct zips *zs, buf_t *out, const void *data, size_t n, int flush)
{
	if (!zs->deflating)
		return -1;
	int last = flush == Z_FINISH;
	zs->crc = crc32(zs->crc, data, (uInt)n);
	zs->usize += n;
	zs->z.next_in = (unsigned char *)data;
	zs->z.avail_in = (uInt)n;
	int rc;
	do {
		unsigned char chunk[65536];
		zs->z.next_out = chunk;
		zs->z.avail_out = sizeof chunk;
		rc = deflate(&zs->z, flush);
		if (rc == Z_STREAM_ERROR)
			return -1;
		size_t got = sizeof chunk - zs->z.avail_out;
		buf_append(out, chunk, got);
		zs->csize += got;
		zs->written += got;
	} while (zs->z.avail_out == 0 || (last && rc != Z_STREAM_END));
	return 0;
}

void zips_end(struct zips *zs, buf_t *out)
{
	if (zs->deflating)
		deflateEnd(&zs->z);
	zs->deflating = 0;
	size_t before = out->len;
	put32(out, 0x08074b50);
	put32(out, zs->crc);
	put32(out, (unsigned long)zs->csize);
	put32(out, (unsigned long)zs->usize);
	zs->written += out->len - before;
	size_t nlen = strlen(zs->name);
	put32(&zs->cd, 0x02014b50);
	put16(&zs->cd, 0x0314);
	put16(&zs->cd, 20);
	put16(&zs->cd, 0x0808);
	put16(&zs->cd, 8);
	put16(&zs->cd, zs->dtime);
	put16(&zs->cd, zs->ddate);
	put32(&zs->cd, zs->crc);
	put32(&zs->cd, (unsigned long)zs->csize);
	put32(&zs->cd, (unsigned long)zs->usize);
	put16(&zs->cd, (unsigned)nlen);
	put16(&zs->cd, 0);
	put16(&zs->cd, 0);
	put16(&zs->cd, 0);
	put16(&zs->cd, 0);
	put32(&zs->cd, 0100644UL << 16);
	put32(&zs->cd, (unsigned long)zs->off);
	buf_append(&zs->cd, zs->name, nlen);
	zs->n++;
}

void zips_finish(struct zips *zs, buf_t *out)
{
	unsigned long cdoff = (unsigned long)zs->written;
	buf_append(out, zs->cd.p ? zs->cd.p : "", zs->cd.len);
	put32(out, 0x06054b50);
	put16(out, 0);
	put16(out, 0);
	put16(out, zs->n);
	put16(out, zs->n);
	put32(out, (unsigned long)zs->cd.len);
	put32(out, cdoff);
	put16(out, 0);
	buf_free(&zs->cd);
}

void zips_free(struct zips *zs)
{
	if (zs->deflating)
		deflateEnd(&zs->z);
	zs->deflating = 0;
	buf_free(&zs->cd);
	free(zs->name);
	zs->name = NULL;
}
