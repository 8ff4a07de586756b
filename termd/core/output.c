/* output.c — a command's rendered output: the store (memory, spilled to a
 * file past the memory cap, a bounded tail after the file fails) and what
 * an answer shows of it (what is new since the last one, head + tail with
 * a `[... N lines truncated ...]` line when over max_output). No session,
 * no JSON: unit-tested on its own (tests/unit/test_output.c). */
#include "output.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STORE_WRITE_CHUNK (64u * 1024u)

static unsigned out_counter;

void output_init(struct output *o, const char *dir, const char *name, size_t mem_cap)
{
	memset(o, 0, sizeof *o);
	o->file_fd = -1;
	o->dir = xstrdup(dir ? dir : "/tmp");
	snprintf(o->name, sizeof o->name, "%s", name);
	o->mem_cap = mem_cap;
}

void output_free(struct output *o)
{
	buf_free(&o->mem);
	if (o->file_fd >= 0)
		close(o->file_fd);
	free(o->file_path);
	free(o->err);
	free(o->shown_live);
	free(o->dir);
	memset(o, 0, sizeof *o);
	o->file_fd = -1;
}

/* ---------------------------------------------------------------- store */

/* The output file could not be created or written (disk full, file size
 * limit): said once — log, an io_error event for subscribers, and
 * extras.output_error on the command's run answers, through on_error —
 * and the command goes on with its text in memory: the file's part, then
 * a bounded tail. */
static void store_failed(struct output *o, const char *path, int err)
{
	if (o->err)
		return;
	buf_t m = {0};
	if (o->file_fd < 0)
		buf_printf(&m, "cannot create the output file %s: %s", path, strerror(err));
	else
		buf_printf(&m, "cannot write the output file %s: %s (it holds the first %zu bytes "
			   "of the output)", path, strerror(err), o->file_bytes);
	buf_printf(&m, "; of the rest termd keeps only the last %zu KiB or more",
		   o->mem_cap / 2 / 1024);
	o->err = buf_steal(&m);
	if (o->on_error)
		o->on_error(o->user, o->err, path);
}

static int store_spill(struct output *o)
{
	if (o->file_fd >= 0)
		return 0;
	if (o->err)
		return -1;
	buf_t p = {0};
	buf_printf(&p, "%s/output-%s-%u.txt", o->dir, o->name, ++out_counter);
	int fd = open(p.p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		store_failed(o, p.p, errno);
		buf_free(&p);
		return -1;
	}
	o->file_fd = fd;
	o->file_path = buf_steal(&p);
	return 0;
}

/* In file mode `mem` holds the bytes not written yet. */
static void store_flush(struct output *o)
{
	if (o->file_fd < 0 || o->err || !o->mem.len)
		return;
	size_t off = 0;
	int err = 0;
	while (off < o->mem.len) {
		ssize_t w = write(o->file_fd, o->mem.p + off, o->mem.len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			err = w < 0 ? errno : ENOSPC;
			break;
		}
		off += (size_t)w;
	}
	buf_consume(&o->mem, off);
	o->file_bytes += off;
	o->mem_base = o->file_bytes;
	if (err)
		store_failed(o, o->file_path, err);
}

/* After a failure: keep the last half of the memory cap (from a line
 * start) once mem is over the cap. */
static void store_trim(struct output *o)
{
	if (o->mem.len <= o->mem_cap)
		return;
	size_t cut = o->mem.len - o->mem_cap / 2;
	const char *nl = memchr(o->mem.p + cut, '\n', o->mem.len - cut);
	size_t n = nl ? (size_t)(nl - o->mem.p) + 1 : cut;
	buf_consume(&o->mem, n);
	o->mem_base += n;
}

void output_line(void *user, const char *line, size_t len)
{
	struct output *o = user;
	buf_append(&o->mem, line, len);
	buf_putc(&o->mem, '\n');
	o->total_bytes += len + 1;
	o->total_lines++;
	if (o->err) {
		store_trim(o);
	} else if (o->file_fd >= 0) {
		if (o->mem.len >= STORE_WRITE_CHUNK)
			store_flush(o);
	} else if (o->mem.len > o->mem_cap) {
		if (store_spill(o) == 0)
			store_flush(o);
	}
}

/* Bytes [off, off + n) of the text, as far as they are kept; a line in
 * their place says where text was lost to a failed output file. */
static void store_read(struct output *o, size_t off, size_t n, buf_t *out)
{
	if (off >= o->total_bytes)
		return;
	if (off + n > o->total_bytes)
		n = o->total_bytes - off;
	size_t end = off + n;
	if (off < o->file_bytes && o->file_fd >= 0) {
		size_t fe = end < o->file_bytes ? end : o->file_bytes;
		buf_reserve(out, fe - off);
		while (off < fe) {
			ssize_t r = pread(o->file_fd, out->p + out->len, fe - off, (off_t)off);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				break;
			out->len += (size_t)r;
			off += (size_t)r;
		}
		out->p[out->len] = 0;
		off = fe;
	}
	if (off >= end)
		return;
	if (off < o->mem_base) {
		if (out->len && out->p[out->len - 1] != '\n')
			buf_putc(out, '\n');
		buf_printf(out, "[... %zu bytes of output not kept: the output file could not be "
			   "written ...]\n", o->mem_base - o->file_bytes);
		off = o->mem_base;
	}
	if (off < end)
		buf_append(out, o->mem.p + (off - o->mem_base), end - off);
}

/* ------------------------------------------------------- new output text */

/* Append to out the first `chars` characters' worth of whole lines of src
 * (a partial first line if none fits). Returns the number of lines. */
static size_t take_head(const char *src, size_t n, size_t chars, buf_t *out)
{
	size_t pos = 0, used = 0, lines = 0;
	while (pos < n) {
		const char *nl = memchr(src + pos, '\n', n - pos);
		size_t end = nl ? (size_t)(nl - src) : n;
		size_t c = utf8_count(src + pos, end - pos);
		if (used + c + (lines ? 1 : 0) > chars)
			break;
		if (lines)
			buf_putc(out, '\n');
		buf_append(out, src + pos, end - pos);
		used += c + (lines ? 1 : 0);
		lines++;
		pos = end + 1;
	}
	if (!lines && n) {
		const char *nl = memchr(src, '\n', n);
		size_t end = nl ? (size_t)(nl - src) : n;
		buf_append(out, src, utf8_offset(src, end, chars));
		lines = 1;
	}
	return lines;
}

/* Like take_head from the end of src; `start_partial`: src[0] may be in the
 * middle of a line, which is then never taken. */
static size_t take_tail(const char *src, size_t n, size_t chars, int start_partial, buf_t *out)
{
	size_t end = n, used = 0, lines = 0, first = n;
	while (end > 0) {
		size_t b = end;
		while (b > 0 && src[b - 1] != '\n')
			b--;
		if (b == 0 && start_partial)
			break;
		size_t c = utf8_count(src + b, end - b);
		if (used + c + (lines ? 1 : 0) > chars)
			break;
		used += c + (lines ? 1 : 0);
		lines++;
		first = b;
		if (b == 0)
			break;
		end = b - 1;
	}
	if (!lines && n) {
		size_t b = n;
		while (b > 0 && src[b - 1] != '\n')
			b--;
		size_t c = utf8_count(src + b, n - b);
		size_t skip = c > chars ? c - chars : 0;
		size_t off = b + utf8_offset(src + b, n - b, skip);
		buf_append(out, src + off, n - off);
		return 1;
	}
	if (lines)
		buf_append(out, src + first, n - first);
	return lines;
}

static size_t count_lines(const char *p, size_t n)
{
	if (!n)
		return 0;
	size_t k = 1;
	for (const char *q = p; (q = memchr(q, '\n', n - (size_t)(q - p))); q++)
		k++;
	return k;
}

void output_collect(struct output *o, buf_t *live, size_t max_output, buf_t *out, int *truncated)
{
	*truncated = 0;
	/* head + marker line + tail stay within max_output characters */
	size_t budget = max_output > 200 ? max_output - 48 : max_output;
	buf_reserve(live, 0);

	size_t D = o->delivered, T = o->total_bytes;
	size_t seg = T - D;

	/* small enough to look at whole */
	size_t limit = 4 * max_output + 4096;
	if (seg + live->len <= limit) {
		buf_t all = {0};
		store_read(o, D, seg, &all);
		if (live->len)
			buf_append(&all, live->p, live->len);
		else if (all.len && all.p[all.len - 1] == '\n')
			all.len--;
		size_t skip = 0;
		if (o->shown_live && *o->shown_live) {
			size_t sl = strlen(o->shown_live);
			if (all.len >= sl && memcmp(all.p, o->shown_live, sl) == 0)
				skip = sl;
		}
		/* the partial line shown last time (a prompt) was trimmed of its
		 * trailing spaces: drop the space that separated it from what
		 * followed on the same line */
		if (skip)
			while (skip < all.len && all.p[skip] == ' ')
				skip++;
		const char *p = all.p ? all.p + skip : "";
		size_t n = all.len - skip;
		if (utf8_count(p, n) <= max_output) {
			buf_append(out, p, n);
		} else {
			*truncated = 1;
			size_t total = count_lines(p, n);
			size_t h = take_head(p, n, budget / 2, out);
			buf_t tail = {0};
			size_t t = take_tail(p, n, budget - budget / 2, 0, &tail);
			size_t omitted = total > h + t ? total - h - t : 0;
			buf_printf(out, "\n[... %zu lines truncated ...]\n", omitted);
			buf_append(out, tail.p ? tail.p : "", tail.len);
			buf_free(&tail);
		}
		buf_free(&all);
	} else {
		*truncated = 1;
		size_t total = o->total_lines - o->delivered_lines + (live->len ? 1 : 0);
		size_t window = 4 * (budget / 2) + 4096;
		buf_t head = {0}, tailsrc = {0}, tail = {0};
		store_read(o, D, window < seg ? window : seg, &head);
		size_t h = take_head(head.p, head.len, budget / 2, out);
		size_t from = seg > window ? T - window : D;
		store_read(o, from, T - from, &tailsrc);
		if (live->len)
			buf_append(&tailsrc, live->p, live->len);
		else if (tailsrc.len && tailsrc.p[tailsrc.len - 1] == '\n')
			tailsrc.len--;
		size_t t = take_tail(tailsrc.p, tailsrc.len, budget - budget / 2, from > D, &tail);
		size_t omitted = total > h + t ? total - h - t : 0;
		buf_printf(out, "\n[... %zu lines truncated ...]\n", omitted);
		buf_append(out, tail.p ? tail.p : "", tail.len);
		buf_free(&head);
		buf_free(&tailsrc);
		buf_free(&tail);
	}
	if (*truncated && o->file_fd < 0 && store_spill(o) == 0)
		store_flush(o);
	if (*truncated)
		store_flush(o);
	o->delivered = T;
	o->delivered_lines = o->total_lines;
	free(o->shown_live);
	o->shown_live = live->len ? buf_steal(live) : NULL;
	buf_free(live);
}
