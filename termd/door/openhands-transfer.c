/* openhands-transfer.c — OpenHands' file transfer routes: /list_files,
 * /upload_file (a file, or a zip unpacked into a folder) and
 * /download_files (a folder as a zip). */
#include "openhands.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
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
	cJSON *arr = cJSON_CreateArray();
	DIR *d = opendir(full.p);
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
	char *s = cJSON_PrintUnformatted(arr);
	oh_answer_json(t, 200, s);
	free(s);
	cJSON_Delete(arr);
	cJSON_Delete(body);
	buf_free(&full);
}

static int py_bool(const char *v)
{
	return v && (!strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "yes") ||
		     !strcasecmp(v, "on") || !strcasecmp(v, "t") || !strcasecmp(v, "y"));
}

static int write_whole(const char *path, const void *data, size_t len, buf_t *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
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

struct unzip_ctx {
	const char *dest;
};

static int unzip_entry(void *arg, const char *name, const unsigned char *data, size_t len,
		       int is_dir, char *err, size_t errlen)
{
	struct unzip_ctx *u = arg;
	buf_t path = {0}, msg = {0};
	buf_printf(&path, "%s/%s", u->dest, name);
	/* the folder it goes in (or the folder entry itself) */
	char *slash = strrchr(path.p, '/');
	int rc = 0;
	if (slash) {
		*slash = 0;
		if (fsio_mkdirs(path.p, &msg) != FSIO_OK) {
			snprintf(err, errlen, "%s", msg.p ? msg.p : "cannot create a folder");
			rc = -1;
		}
		*slash = '/';
	}
	if (!rc && !is_dir && write_whole(path.p, data, len, &msg) < 0) {
		snprintf(err, errlen, "%s", msg.p);
		rc = -1;
	}
	buf_free(&path);
	buf_free(&msg);
	return rc;
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

/* A zip is checked and unpacked in a thread of its own, so that inflating
 * (up to --upload-max bytes) never holds the loop: the thread owns a copy
 * of the archive and writes a byte to a pipe the loop watches when done. */
struct unzip_job {
	int refs;                 /* the thread's and the loop's */
	unsigned char *zip;
	size_t len;
	char *dest, *fname;
	int recursive, failed;
	char err[512];
	int wfd;
	struct http_txn *t;       /* NULL once its client left (the loop's only) */
};

static void job_unref(struct unzip_job *j)
{
	if (__atomic_sub_fetch(&j->refs, 1, __ATOMIC_ACQ_REL) == 0) {
		free(j->zip);
		free(j->dest);
		free(j->fname);
		free(j);
	}
}

static void *unzip_thread(void *p)
{
	struct unzip_job *j = p;
	struct unzip_ctx u = {j->dest};
	if (zip_check(j->zip, j->len, opts.upload_max, opts.upload_entries, j->err,
		      sizeof j->err) < 0 ||
	    zip_read(j->zip, j->len, unzip_entry, &u, j->err, sizeof j->err) < 0)
		j->failed = 1;
	char x = 1;
	if (write(j->wfd, &x, 1) < 0) {
		/* the loop is gone */
	}
	close(j->wfd);
	job_unref(j);
	return NULL;
}

static int unzip_done(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
{
	struct unzip_job *j = arg;
	if (!j)
		return 0;
	if (reason != LWS_CALLBACK_RAW_RX_FILE && reason != LWS_CALLBACK_RAW_CLOSE_FILE)
		return 0;
	lws_set_opaque_user_data(wsi, NULL);
	struct http_txn *t = j->t;
	if (t) {
		t->user = NULL;
		t->gone = NULL;
		if (j->failed)
			oh_answer_detail(t, 500, j->err);
		else
			answer_uploaded(t, j->fname, j->dest, j->recursive);
	}
	job_unref(j);
	return reason == LWS_CALLBACK_RAW_RX_FILE ? -1 : 0;   /* lws closes the pipe */
}

static void unzip_gone(struct http_txn *t)
{
	struct unzip_job *j = t->user;
	if (j)
		j->t = NULL;   /* the thread goes on; nobody to answer */
	t->user = NULL;
}

/* 0: the job runs and answers later; -1: it could not start (why in err) */
static int unzip_start(struct http_txn *t, const struct mp_part *part, const char *dest,
		       const char *fname, int recursive, char *err, size_t errlen)
{
	int fds[2];
	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0) {
		snprintf(err, errlen, "cannot unpack: %s", strerror(errno));
		return -1;
	}
	struct unzip_job *j = xcalloc(1, sizeof *j);
	j->refs = 2;
	j->zip = xmalloc(part->len ? part->len : 1);
	memcpy(j->zip, part->data, part->len);
	j->len = part->len;
	j->dest = xstrdup(dest);
	j->fname = xstrdup(fname);
	j->recursive = recursive;
	j->wfd = fds[1];
	j->t = t;
	if (!server_adopt_fd(fds[0], unzip_done, j)) {
		close(fds[0]);
		close(fds[1]);
		j->refs = 1;
		job_unref(j);
		snprintf(err, errlen, "cannot unpack: cannot watch the job");
		return -1;
	}
	t->user = j;
	t->gone = unzip_gone;
	pthread_t th;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&th, &at, unzip_thread, j) != 0) {
		/* the loop side's close (RAW_CLOSE_FILE) answers it */
		j->failed = 1;
		snprintf(j->err, sizeof j->err, "cannot unpack: no thread");
		close(j->wfd);
		job_unref(j);   /* the thread's */
	}
	pthread_attr_destroy(&at);
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
	buf_t msg = {0};
	if (fsio_mkdirs(dest, &msg) != FSIO_OK) {
		oh_answer_detail(t, 500, msg.p ? msg.p : "cannot create the destination");
		buf_free(&msg);
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
	if (is_zip) {
		buf_free(&msg);
		if (unzip_start(t, &part, dest, fname, recursive, err, sizeof err) < 0)
			oh_answer_detail(t, 500, err);
		return;   /* answered when the thread is done */
	} else {
		buf_t path = {0};
		buf_printf(&path, "%s/%s", dest, fname);
		int rc = write_whole(path.p, part.data, part.len, &msg);
		buf_free(&path);
		if (rc < 0) {
			oh_answer_detail(t, 500, msg.p);
			buf_free(&msg);
			return;
		}
	}
	buf_free(&msg);
	answer_uploaded(t, fname, dest, recursive);
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
	struct stat st;
	if (stat(path, &st) != 0) {
		oh_answer_detail(t, 500, "404: File not found");
		return;
	}
	struct dl *d = xcalloc(1, sizeof *d);
	d->fd = -1;
	d->t = t;
	if (S_ISDIR(st.st_mode))
		dl_walk(d, path, "");
	if (d->too_large) {
		dl_free(d);
		char m[160];
		snprintf(m, sizeof m, "the folder holds over %zu bytes, the download limit (--download-max)",
			 opts.download_max);
		oh_answer_detail(t, 500, m);
		return;
	}
	/* basename of the path as given (os.path.basename: "" after a /) */
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	buf_t disp = {0};
	buf_puts(&disp, "attachment; filename=\"");
	buf_puts(&disp, base);
	buf_puts(&disp, ".zip\"");
	t->disposition = buf_steal(&disp);
	t->user = d;
	t->gone = dl_gone;
	t->drained = dl_pump;
	http_stream_start(t, 200, "application/zip");
	dl_pump(t);
}
