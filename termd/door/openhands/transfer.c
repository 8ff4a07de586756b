/* transfer.c — OpenHands' file transfer routes: /list_files,
 * /upload_file (a file, or a zip unpacked into a folder) and
 * /download_files (a folder as a zip). */
#include "openhands.h"
#include "fswork.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct name_ent {
	char *name;
	int dir;
};

static int name_cmp(const void *a, const void *b)
{
	const struct name_ent *x = a, *y = b;
	if (x->dir != y->dir)
		return y->dir - x->dir;
	int c = strcasecmp(x->name, y->name);
	return c ? c : strcmp(x->name, y->name);
}

/* /list_files' folder read in a file-work thread; the answer's JSON */
struct ls_job {
	struct fsjob job;         /* first */
	char *dir;
	char *answer;
	struct http_txn *t;       /* NULL once its client left */
};

static void ls_work(struct fsjob *fj)
{
	struct ls_job *j = (struct ls_job *)fj;
	cJSON *arr = cJSON_CreateArray();
	DIR *d = opendir(j->dir);
	if (d) {
		struct name_ent *v = NULL;
		size_t n = 0, cap = 0;
		struct dirent *e;
		while ((e = readdir(d))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			struct stat st;
			if (fstatat(dirfd(d), e->d_name, &st, 0) < 0)
				continue;   /* os.path.exists: a dangling link is left out */
			if (n == cap) {
				cap = cap ? 2 * cap : 64;
				v = xrealloc(v, cap * sizeof *v);
			}
			v[n].dir = S_ISDIR(st.st_mode);
			buf_t nm = {0};
			buf_puts(&nm, e->d_name);
			if (v[n].dir)
				buf_putc(&nm, '/');
			v[n++].name = buf_steal(&nm);
		}
		closedir(d);
		if (n)   /* v is NULL for an empty folder: qsort wants a pointer */
			qsort(v, n, sizeof *v, name_cmp);
		for (size_t i = 0; i < n; i++) {
			cJSON_AddItemToArray(arr, cJSON_CreateString(v[i].name));
			free(v[i].name);
		}
		free(v);
	}
	j->answer = cJSON_PrintUnformatted(arr);
	cJSON_Delete(arr);
}

static void ls_done(struct fsjob *fj)
{
	struct ls_job *j = (struct ls_job *)fj;
	if (j->t) {
		j->t->user = NULL;
		j->t->gone = NULL;
		if (!fj->aborted)
			oh_answer_json(j->t, 200, j->answer ? j->answer : "[]");
	}
	free(j->answer);
	free(j->dir);
	free(j);
}

static void ls_gone(struct http_txn *t)
{
	struct ls_job *j = t->user;
	if (j)
		j->t = NULL;
	t->user = NULL;
}

void oh_list_files(struct http_txn *t)
{
	cJSON *body = cJSON_ParseWithLength(t->body.p ? t->body.p : "", t->body.len);
	const char *p = body ? oh_jstr(body, "path") : NULL;
	buf_t full = {0};
	if (!p)
		buf_puts(&full, opts.cwd);
	else if (p[0] == '/')
		buf_puts(&full, p);
	else
		buf_printf(&full, "%s/%s", opts.cwd, p);
	cJSON_Delete(body);
	struct ls_job *j = xcalloc(1, sizeof *j);
	fs_cred_self(&j->job.cred);
	j->job.work = ls_work;
	j->job.done = ls_done;
	j->dir = buf_steal(&full);
	j->t = t;
	if (fswork_submit(&j->job) < 0) {
		free(j->dir);
		free(j);
		oh_answer_detail(t, 503, "termd has too many file requests waiting; try again");
		return;
	}
	t->user = j;
	t->gone = ls_gone;
}

static int py_bool(const char *v)
{
	return v && (!strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "yes") ||
		     !strcasecmp(v, "on") || !strcasecmp(v, "t") || !strcasecmp(v, "y"));
}

static int write_whole(const char *path, const void *data, size_t len, buf_t *err)
{
	int created;   /* a FIFO or a device at the path is refused, never waited on */
	int fd = fs_open_write(path, 0666, &created);
	if (fd < 0) {
		buf_printf(err, "[Errno %d] %s: '%s'", errno, strerror(errno), path);
		return -1;
	}
	if (write_all(fd, data, len) < 0) {
		buf_printf(err, "[Errno %d] %s: '%s'", errno, strerror(errno), path);
		close(fd);
		return -1;
	}
	if (close(fd) < 0) {
		buf_printf(err, "[Errno %d] %s: '%s'", errno, strerror(errno), path);
		return -1;
	}
	return 0;
}

/* The upload's answer, as OpenHands' server gives it. */
static void answer_uploaded(struct http_txn *t, const char *fname, const char *dest, int recursive)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "filename", fname);
	cJSON_AddStringToObject(o, "destination", dest);
	cJSON_AddBoolToObject(o, "recursive", recursive);
	char *s = cJSON_PrintUnformatted(o);
	oh_answer_json(t, 200, s);
	free(s);
	cJSON_Delete(o);
}

/* An upload is written in a file-work thread (fswork.c): the folder made,
 * then the file written, or a zip checked and unpacked (inflating up to
 * --upload-max bytes), so neither a slow disk, a FIFO at the path nor a
 * big archive ever holds the loop. The job owns a copy of the part. */
struct up_job {
	struct fsjob job;         /* first */
	unsigned char *data;
	size_t len;
	char *dest, *fname;
	int recursive, is_zip, failed;
	char err[512];
	struct http_txn *t;       /* NULL once its client left (the loop's only) */
};

static void up_free(struct up_job *j)
{
	free(j->data);
	free(j->dest);
	free(j->fname);
	free(j);
}

static void up_work(struct fsjob *fj)
{
	struct up_job *j = (struct up_job *)fj;
	buf_t msg = {0};
	if (fsio_mkdirs(j->dest, &msg) != FSIO_OK) {
		snprintf(j->err, sizeof j->err, "%s", msg.p ? msg.p : "cannot create the destination");
		j->failed = 1;
	} else if (j->is_zip) {
		if (fs_unzip_into(j->dest, j->data, j->len, opts.upload_max, opts.upload_entries, 1,
				  j->err, sizeof j->err) < 0)
			j->failed = 1;
	} else {
		buf_t path = {0};
		buf_printf(&path, "%s/%s", j->dest, j->fname);
		if (write_whole(path.p, j->data, j->len, &msg) < 0) {
			snprintf(j->err, sizeof j->err, "%s", msg.p);
			j->failed = 1;
		}
		buf_free(&path);
	}
	buf_free(&msg);
	free(j->data);   /* not held until the loop runs */
	j->data = NULL;
}

static void up_done(struct fsjob *fj)
{
	struct up_job *j = (struct up_job *)fj;
	struct http_txn *t = j->t;
	if (t) {
		t->user = NULL;
		t->gone = NULL;
	}
	if (t && !fj->aborted) {
		if (fj->err)
			oh_answer_detail(t, 500, "termd cannot act as its user for this upload");
		else if (j->failed)
			oh_answer_detail(t, 500, j->err);
		else
			answer_uploaded(t, j->fname, j->dest, j->recursive);
	}
	up_free(j);
}

static void up_gone(struct http_txn *t)
{
	struct up_job *j = t->user;
	if (j)
		j->t = NULL;   /* the work goes on; nobody to answer */
	t->user = NULL;
}

/* 0: the job runs and answers later; -1: it could not start (why in err) */
static int upload_start(struct http_txn *t, const struct mp_part *part, const char *dest,
			const char *fname, int recursive, int is_zip, char *err, size_t errlen)
{
	struct up_job *j = xcalloc(1, sizeof *j);
	fs_cred_self(&j->job.cred);   /* OpenHands acts as termd's own user */
	j->job.work = up_work;
	j->job.done = up_done;
	j->data = xmalloc(part->len ? part->len : 1);
	memcpy(j->data, part->data, part->len);
	j->len = part->len;
	j->dest = xstrdup(dest);
	j->fname = xstrdup(fname);
	j->recursive = recursive;
	j->is_zip = is_zip;
	j->t = t;
	if (fswork_submit(&j->job) < 0) {
		up_free(j);
		snprintf(err, errlen, "termd has too many file requests waiting; try again");
		return -1;
	}
	t->user = j;
	t->gone = up_gone;
	return 0;
}

void oh_upload_file(struct http_txn *t)
{
	char destb[4096], rec[4096], ctype[512];	/* lws stops at the first query part too long for the buffer */
	const char *dest = http_arg(t, "destination=", destb, sizeof destb);
	if (!dest)
		dest = "/";
	int recursive = py_bool(http_arg(t, "recursive=", rec, sizeof rec));
	if (lws_hdr_copy(t->wsi, ctype, sizeof ctype, WSI_TOKEN_HTTP_CONTENT_TYPE) < 0)
		ctype[0] = 0;
	struct mp_part part;
	char err[512];
	if (multipart_find(ctype, t->body.p ? t->body.p : "", t->body.len, "file", &part, err,
			   sizeof err) < 0 || !part.has_filename) {
		oh_answer_422(t, "[{'type': 'missing', 'loc': ('body', 'file'), 'msg': 'Field required'}]");
		return;
	}
	if (dest[0] != '/') {
		oh_answer_detail(t, 500, "400: Destination must be an absolute path");
		return;
	}
	/* the file's own name, never a path */
	const char *fname = strrchr(part.filename, '/');
	fname = fname ? fname + 1 : part.filename;
	size_t fl = strlen(fname);
	int is_zip = fl >= 4 && strcmp(fname + fl - 4, ".zip") == 0;
	if (recursive && !is_zip) {
		oh_answer_detail(t, 500, "400: Recursive uploads must be zip files");
		return;
	}
	if (!fname[0] || !strcmp(fname, ".") || !strcmp(fname, "..")) {
		oh_answer_detail(t, 500, "400: the upload has no file name");
		return;
	}
	if (upload_start(t, &part, dest, fname, recursive, is_zip, err, sizeof err) < 0)
		oh_answer_detail(t, 500, err);
	/* else answered when the work is done */
}

/* A folder download, streamed: the files are listed (and their sizes
 * checked against --download-max) first, then each is read and deflated a
 * slice at a time as the socket drains, so a big folder neither holds the
 * loop nor sits in memory. */
struct dl_file {
	char *path, *arc;
	time_t mtime;
};

struct dl {
	struct fsjob job;         /* first: the walk is file work (fswork.c) */
	char *root;               /* what was asked */
	int missing;              /* ... is not there */
	struct dl_file *f;
	size_t n, cap, i;
	uint64_t total;           /* bytes of the files, by their sizes */
	int too_large;
	int fd;                   /* the file being read, or -1 */
	uint64_t read;            /* bytes read from all files */
	struct zips zs;
	struct http_txn *t;
};

#define DL_SLICE_IN  (1u << 20)   /* bytes read per turn of the loop */
#define DL_SLICE_OUT (256u << 10) /* bytes handed to the socket per turn */

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* os.walk(root) without following links to folders; arcnames relative */
static void dl_walk(struct dl *d, const char *dir, const char *rel)
{
	DIR *dp = opendir(dir);
	if (!dp)
		return;
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(dp))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 32;
			names = xrealloc(names, cap * sizeof *names);
		}
		names[n++] = xstrdup(e->d_name);
	}
	closedir(dp);
	if (n)   /* names is NULL for an empty folder */
		qsort(names, n, sizeof *names, str_cmp);
	for (size_t i = 0; i < n; i++) {
		buf_t full = {0}, arc = {0};
		buf_printf(&full, "%s/%s", dir, names[i]);
		buf_printf(&arc, "%s%s%s", rel, rel[0] ? "/" : "", names[i]);
		struct stat lst, st;
		if (lstat(full.p, &lst) == 0 && !d->too_large) {
			if (S_ISDIR(lst.st_mode)) {
				dl_walk(d, full.p, arc.p);
			} else if (stat(full.p, &st) == 0 && S_ISREG(st.st_mode)) {
				d->total += (uint64_t)st.st_size;
				if (d->total > opts.download_max) {
					d->too_large = 1;
				} else {
					if (d->n == d->cap) {
						d->cap = d->cap ? 2 * d->cap : 64;
						d->f = xrealloc(d->f, d->cap * sizeof *d->f);
					}
					d->f[d->n].path = buf_steal(&full);
					d->f[d->n].arc = buf_steal(&arc);
					d->f[d->n].mtime = st.st_mtime;
					d->n++;
				}
			}
		}
		buf_free(&full);
		buf_free(&arc);
		free(names[i]);
	}
	free(names);
}

static void dl_free(struct dl *d)
{
	free(d->root);
	if (d->fd >= 0)
		close(d->fd);
	zips_free(&d->zs);
	for (size_t i = 0; i < d->n; i++) {
		free(d->f[i].path);
		free(d->f[i].arc);
	}
	free(d->f);
	free(d);
}

static void dl_gone(struct http_txn *t)
{
	if (t->user)
		dl_free(t->user);
	t->user = NULL;
}

/* One slice: read and deflate until a slice's worth is in or out. */
static void dl_pump(struct http_txn *t)
{
	struct dl *d = t->user;
	if (!d)
		return;
	buf_t out = {0};
	size_t in = 0;
	int done = 0;
	static char chunk[65536];
	while (out.len < DL_SLICE_OUT && in < DL_SLICE_IN) {
		if (d->fd < 0) {
			if (d->i == d->n) {
				zips_finish(&d->zs, &out);
				done = 1;
				break;
			}
			d->fd = open(d->f[d->i].path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
			if (d->fd < 0) {   /* gone or unreadable since it was listed: left out */
				d->i++;
				continue;
			}
			zips_begin(&d->zs, &out, d->f[d->i].arc, d->f[d->i].mtime);
		}
		ssize_t n = read(d->fd, chunk, sizeof chunk);
		if (n < 0)
			n = 0;   /* an error ends the file where it is */
		/* a file that grew since it was listed: no more than the limit */
		if (d->read + (uint64_t)n > opts.download_max)
			n = (ssize_t)(opts.download_max - d->read);
		d->read += (uint64_t)n;
		in += (size_t)n;
		int last = n == 0;
		zips_data(&d->zs, &out, chunk, (size_t)n, last);
		if (last) {
			close(d->fd);
			d->fd = -1;
			zips_end(&d->zs, &out);
			d->i++;
		}
	}
	/* something must go out, or no drained call comes back for more
	 * (a slice of zeros may deflate to nothing yet) */
	if (!out.len && !done && d->fd >= 0)
		zips_flush(&d->zs, &out);
	if (out.len)
		http_stream_write(t, out.p, out.len);
	buf_free(&out);
	if (done) {
		t->user = NULL;
		t->gone = NULL;
		t->drained = NULL;
		dl_free(d);
		http_stream_end(t);
	}
}

/* the folder listed and its sizes added up, in a file-work thread */
static void dl_walk_work(struct fsjob *j)
{
	struct dl *d = (struct dl *)j;
	struct stat st;
	if (stat(d->root, &st) != 0)
		d->missing = 1;
	else if (S_ISDIR(st.st_mode))
		dl_walk(d, d->root, "");
}

/* while it walks: the walk goes on, nobody to answer */
static void dl_walk_gone(struct http_txn *t)
{
	struct dl *d = t->user;
	if (d)
		d->t = NULL;
	t->user = NULL;
}

static void dl_walked(struct fsjob *j)
{
	struct dl *d = (struct dl *)j;
	struct http_txn *t = d->t;
	if (!t || j->aborted) {
		if (t)
			t->user = NULL, t->gone = NULL;
		dl_free(d);
		return;
	}
	t->user = NULL;
	t->gone = NULL;
	if (d->missing || j->err) {
		dl_free(d);
		oh_answer_detail(t, 500, "404: File not found");
		return;
	}
	if (d->too_large) {
		dl_free(d);
		char m[160];
		snprintf(m, sizeof m, "the folder holds over %zu bytes, the download limit (--download-max)",
			 opts.download_max);
		oh_answer_detail(t, 500, m);
		return;
	}
	/* basename of the path as given (os.path.basename: "" after a /) */
	const char *base = strrchr(d->root, '/');
	base = base ? base + 1 : d->root;
	buf_t disp = {0};
	buf_puts(&disp, "attachment; filename=\"");
	buf_puts(&disp, base);
	buf_puts(&disp, ".zip\"");
	t->disposition = buf_steal(&disp);
	t->user = d;
	t->gone = dl_gone;
	t->drained = dl_pump;
	if (http_stream_start(t, 200, "application/zip") < 0)
		return;   /* too many streams: 429, and dl_gone frees d */
	dl_pump(t);
}

void oh_download_files(struct http_txn *t)
{
	char pathb[4096];
	const char *path = http_arg(t, "path=", pathb, sizeof pathb);
	if (!path) {
		oh_answer_422(t, "[{'type': 'missing', 'loc': ('query', 'path'), 'msg': 'Field required'}]");
		return;
	}
	if (path[0] != '/') {
		oh_answer_detail(t, 500, "400: Path must be an absolute path");
		return;
	}
	struct dl *d = xcalloc(1, sizeof *d);
	fs_cred_self(&d->job.cred);
	d->job.work = dl_walk_work;
	d->job.done = dl_walked;
	d->root = xstrdup(path);
	d->fd = -1;
	d->t = t;
	if (fswork_submit(&d->job) < 0) {
		dl_free(d);
		oh_answer_detail(t, 503, "termd has too many file requests waiting; try again");
		return;
	}
	t->user = d;
	t->gone = dl_walk_gone;
}
