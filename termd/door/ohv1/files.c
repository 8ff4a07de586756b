/* files.c — OpenHands V1's /api/file/upload?path= (multipart field
 * `file`, written at path with its parent folders made) and
 * /api/file/download?path= (the file's bytes, application/octet-stream),
 * absolute paths only, with V1's 400/404 answers. The file work runs in
 * the file-work pool (fs/fswork.c) as termd's own user, as the agent
 * server acts as its own; the loop only hands bytes over. */
#include "ohv1.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct fjob {
	struct fsjob job;         /* first */
	char *path;
	unsigned char *data;      /* upload: the bytes; download: read here */
	size_t len;
	int status;               /* the answer's, set by the work */
	char err[512];
	struct http_txn *t;       /* NULL once its client left */
};

static void fjob_free(struct fjob *j)
{
	free(j->path);
	free(j->data);
	free(j);
}

static void fjob_gone(struct http_txn *t)
{
	struct fjob *j = t->user;
	if (j)
		j->t = NULL;   /* the work goes on; nobody to answer */
	t->user = NULL;
}

static void up_work(struct fsjob *fj)
{
	struct fjob *j = (struct fjob *)fj;
	char *dir = xstrdup(j->path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir)
		*slash = 0;
	else if (slash)
		dir[1] = 0;
	buf_t msg = {0};
	j->status = 200;
	if (fsio_mkdirs(dir, &msg) != FSIO_OK) {
		snprintf(j->err, sizeof j->err, "Failed to upload file: %s",
			 msg.p ? msg.p : "cannot make its folder");
		j->status = 500;
	} else {
		int created;
		int fd = fs_open_write(j->path, 0666, &created);   /* (open(…, "wb"): the umask decides) */
		if (fd < 0 || write_all(fd, j->data, j->len) < 0 || close(fd) < 0) {
			snprintf(j->err, sizeof j->err, "Failed to upload file: [Errno %d] %s: '%s'",
				 errno, strerror(errno), j->path);
			j->status = 500;
		}
	}
	buf_free(&msg);
	free(dir);
	free(j->data);
	j->data = NULL;
}

static void dl_work(struct fsjob *fj)
{
	struct fjob *j = (struct fjob *)fj;
	struct stat st;
	int fd = fs_open_regular(j->path, &st);
	if (fd < 0) {
		int e = errno;
		j->status = e == ENOENT || e == ENOTDIR ? 404 : e == EISDIR || e == EINVAL ? 400 : 500;
		snprintf(j->err, sizeof j->err, "%s%s", j->status == 404 ? "File not found" :
			 j->status == 400 ? "Path is not a file" : "Failed to download file: ",
			 j->status == 500 ? strerror(e) : "");
		return;
	}
	if ((size_t)st.st_size > opts.download_max) {
		close(fd);
		j->status = 500;
		snprintf(j->err, sizeof j->err, "Failed to download file: over termd's limit "
			 "(--download-max %zu)", opts.download_max);
		return;
	}
	buf_t b = {0};
	char tmp[65536];
	ssize_t r;
	while ((r = read(fd, tmp, sizeof tmp)) > 0 && b.len <= opts.download_max)
		buf_append(&b, tmp, (size_t)r);
	close(fd);
	if (r < 0) {
		buf_free(&b);
		j->status = 500;
		snprintf(j->err, sizeof j->err, "Failed to download file: %s", strerror(errno));
		return;
	}
	j->data = (unsigned char *)b.p;
	j->len = b.len;
	j->status = 200;
}

static void done(struct fsjob *fj)
{
	struct fjob *j = (struct fjob *)fj;
	struct http_txn *t = j->t;
	if (t) {
		t->user = NULL;
		t->gone = NULL;
	}
	if (t && !fj->aborted) {
		if (fj->err) {
			v1_detail(t, 500, "termd cannot act as its user for this file");
		} else if (j->status != 200) {
			v1_detail(t, j->status, j->err);
		} else if (j->job.work == up_work) {
			http_answer(t, 200, "application/json", "{\"success\":true}", 16);
		} else {
			const char *base = strrchr(j->path, '/');
			base = base ? base + 1 : j->path;
			buf_t d = {0};
			buf_puts(&d, "attachment; filename=\"");
			for (const char *p = base; *p; p++)
				if (*p != '"' && *p != '\\' && (unsigned char)*p >= 0x20)
					buf_putc(&d, *p);
			buf_putc(&d, '"');
			t->disposition = d.p;
			http_answer(t, 200, "application/octet-stream", j->data ? (char *)j->data : "",
				    j->len);
		}
	}
	fjob_free(j);
}

/* the path query argument, absolute: it, or NULL once answered */
static const char *abs_path(struct http_txn *t, char *buf, size_t n)
{
	const char *p = v1_arg(t, "path=", buf, n);
	if (!p) {
		v1_422(t, "query", "path", "missing", "Field required", NULL, NULL, 0);
		return NULL;
	}
	if (p[0] != '/') {
		v1_detail(t, 400, "Path must be absolute");
		return NULL;
	}
	return p;
}

static void submit(struct http_txn *t, struct fjob *j)
{
	fs_cred_self(&j->job.cred);
	j->t = t;
	if (fswork_submit(&j->job) < 0) {
		fjob_free(j);
		v1_detail(t, 503, "termd has too many file requests waiting; try again");
		return;
	}
	t->user = j;
	t->gone = fjob_gone;
}

void v1_file_upload(struct http_txn *t)
{
	char pb[4096], ctype[512], err[256];
	const char *path = abs_path(t, pb, sizeof pb);
	if (!path)
		return;
	if (lws_hdr_copy(t->wsi, ctype, sizeof ctype, WSI_TOKEN_HTTP_CONTENT_TYPE) < 0)
		ctype[0] = 0;
	struct mp_part part;
	if (multipart_find(ctype, t->body.p ? t->body.p : "", t->body.len, "file", &part, err,
			   sizeof err) < 0) {
		v1_422(t, "body", "file", "missing", "Field required", NULL, NULL, 0);
		return;
	}
	struct fjob *j = xcalloc(1, sizeof *j);
	j->job.work = up_work;
	j->job.done = done;
	j->path = xstrdup(path);
	j->data = xmalloc(part.len ? part.len : 1);
	memcpy(j->data, part.data, part.len);
	j->len = part.len;
	submit(t, j);
}

void v1_file_download(struct http_txn *t)
{
	char pb[4096];
	const char *path = abs_path(t, pb, sizeof pb);
	if (!path)
		return;
	struct fjob *j = xcalloc(1, sizeof *j);
	j->job.work = dl_work;
	j->job.done = done;
	j->path = xstrdup(path);
	submit(t, j);
}
