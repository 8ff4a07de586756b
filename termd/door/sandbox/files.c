/* files.c — agent-sandbox's file routes (POST /upload, GET /download/…,
 * /list/…, /exists/…) confined to --sandbox-base as the python runtime's
 * get_safe_path does: the path (URL-decoded once more, leading slashes
 * dropped) joined to realpath(base) and resolved as Python's
 * os.path.realpath (links followed, a missing tail kept as written), and
 * refused with 403 unless it stays in the base (commonpath), so `..` and
 * a link leading out are both refused. The work runs in termd/fs's
 * worker pool with the request's user's ids; the file a path resolved to
 * is opened without following a link again (a link swapped in between is
 * refused, not followed out). Answers and their words are upstream's. */
#include "sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum sb_op { OP_UPLOAD, OP_DOWNLOAD, OP_LIST, OP_EXISTS };

struct sbfile {
	struct fsjob job;
	struct http_txn *t;       /* NULL once the client left */
	enum sb_op op;
	char *rel;                /* the path as the client gave it (decoded) */
	int nul;                  /* ... held a NUL: Python's ValueError, refused */
	char *data;               /* upload: the bytes */
	size_t len;
	/* the answer */
	int status;
	const char *ctype;
	buf_t body;
};

/* ======================================================= os.path.realpath */

#define SB_MAX_LINKS 40

struct seen {
	char *link;
	char *to;                 /* NULL while being resolved (a loop) */
};

/* path's last component split off (posixpath.split on a normalised path) */
static void path_up(buf_t *path)
{
	char *s = path->p;
	char *slash = strrchr(s, '/');
	if (!slash)
		return;
	if (slash == s)
		path->len = 1;
	else
		path->len = (size_t)(slash - s);
	path->p[path->len] = 0;
}

static void path_join(buf_t *path, const char *name, size_t n)
{
	if (path->len && path->p[path->len - 1] != '/')
		buf_putc(path, '/');
	buf_append(path, name, n);
	buf_putc(path, 0);
	path->len--;
}

/* posixpath._joinrealpath(path, rest, strict=False, seen): 1 resolved, 0
 * a loop met (the rest appended unresolved) */
static int join_real(buf_t *path, const char *rest, struct seen *seen, int *nseen)
{
	if (*rest == '/') {
		buf_reset(path);
		buf_puts(path, "/");
		buf_putc(path, 0);
		path->len--;
	}
	while (*rest) {
		while (*rest == '/')
			rest++;
		const char *e = strchr(rest, '/');
		size_t n = e ? (size_t)(e - rest) : strlen(rest);
		const char *name = rest;
		rest += n;
		if (!n || (n == 1 && name[0] == '.'))
			continue;
		if (n == 2 && name[0] == '.' && name[1] == '.') {
			path_up(path);
			continue;
		}
		size_t keep = path->len;
		path_join(path, name, n);
		struct stat st;
		if (lstat(path->p, &st) != 0 || !S_ISLNK(st.st_mode))
			continue;
		int i;
		for (i = 0; i < *nseen; i++)
			if (strcmp(seen[i].link, path->p) == 0)
				break;
		if (i < *nseen) {
			if (seen[i].to) {
				buf_reset(path);
				buf_puts(path, seen[i].to);
				buf_putc(path, 0);
				path->len--;
				continue;
			}
			path_join(path, rest, strlen(rest));   /* a loop: the rest as it is */
			return 0;
		}
		if (*nseen >= SB_MAX_LINKS) {   /* ELOOP's bound: treat as a loop */
			path_join(path, rest, strlen(rest));
			return 0;
		}
		char target[4096];
		ssize_t tl = readlink(path->p, target, sizeof target - 1);
		if (tl < 0)
			continue;
		target[tl] = 0;
		i = (*nseen)++;
		seen[i].link = xstrdup(path->p);
		seen[i].to = NULL;
		path->len = keep;
		path->p[keep] = 0;
		if (!join_real(path, target, seen, nseen)) {
			path_join(path, rest, strlen(rest));
			return 0;
		}
		seen[i].to = xstrdup(path->p);
	}
	return 1;
}

static void realpath_py(const char *p, buf_t *out)
{
	struct seen seen[SB_MAX_LINKS];
	int nseen = 0;
	buf_reset(out);
	buf_puts(out, "/");
	buf_putc(out, 0);
	out->len--;
	join_real(out, p, seen, &nseen);
	for (int i = 0; i < nseen; i++) {
		free(seen[i].link);
		free(seen[i].to);
	}
}

int sb_safe_path(const char *base, const char *rel, buf_t *out)
{
	buf_t b = {0}, joined = {0};
	realpath_py(base, &b);
	while (*rel == '/')
		rel++;
	buf_printf(&joined, "%s/%s", b.p, rel);
	buf_putc(&joined, 0);
	realpath_py(joined.p, out);
	buf_free(&joined);
	size_t n = b.len;
	int in = strcmp(b.p, "/") == 0 || strcmp(out->p, b.p) == 0 ||
		 (strncmp(out->p, b.p, n) == 0 && out->p[n] == '/');
	buf_free(&b);
	return in ? 0 : -1;
}

/* ============================================================ the work */

static void set_msg(struct sbfile *j, int status, const char *fmt, const char *err_path, int err)
{
	cJSON *o = cJSON_CreateObject();
	buf_t m = {0};
	if (err_path) {
		buf_printf(&m, fmt, "");
		buf_printf(&m, "[Errno %d] %s: '%s'", err, strerror(err), err_path);
	} else {
		buf_puts(&m, fmt);
	}
	buf_putc(&m, 0);
	cJSON_AddStringToObject(o, "message", m.p);
	buf_free(&m);
	char *s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	buf_reset(&j->body);
	buf_puts(&j->body, s);
	free(s);
	j->status = status;
	j->ctype = "application/json";
}

static void do_upload(struct sbfile *j, const char *full)
{
	char *dir = xstrdup(full), *slash = strrchr(dir, '/');
	const char *name = slash + 1;
	*slash = 0;
	int dfd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int fd = dfd < 0 ? -1 : fs_write_beneath(dfd, name, 0666);
	int err = errno;
	if (fd >= 0 && (ftruncate(fd, 0) != 0 || write_all(fd, j->data, j->len) < 0))
		err = errno, close(fd), fd = -1;
	else if (fd >= 0 && close(fd) != 0)
		err = errno, fd = -1;
	else if (fd >= 0)
		fd = 0;
	if (dfd >= 0)
		close(dfd);
	free(dir);
	if (fd < 0) {
		set_msg(j, 500, "File upload failed: %s", full, err);
		return;
	}
	buf_t m = {0};
	buf_printf(&m, "File '%s' uploaded successfully.", j->rel);
	buf_putc(&m, 0);
	set_msg(j, 200, m.p, NULL, 0);
	buf_free(&m);
}

static void do_download(struct sbfile *j, const char *full)
{
	struct stat st;
	if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) {
		set_msg(j, 404, "File not found", NULL, 0);
		return;
	}
	int fd = open(full, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		if (fd >= 0)
			close(fd);
		j->status = 500;
		j->ctype = "text/plain; charset=utf-8";
		buf_puts(&j->body, "Internal Server Error");
		return;
	}
	char chunk[65536];
	ssize_t n;
	while ((n = read(fd, chunk, sizeof chunk)) > 0)
		buf_append(&j->body, chunk, (size_t)n);
	close(fd);
	j->status = 200;
	j->ctype = "application/octet-stream";
}

static void do_list(struct sbfile *j, const char *full)
{
	struct stat st;
	if (stat(full, &st) != 0 || !S_ISDIR(st.st_mode)) {
		set_msg(j, 404, "Path is not a directory", NULL, 0);
		return;
	}
	DIR *d = opendir(full);
	if (!d) {
		set_msg(j, 500, "List files failed: %s", full, errno);
		return;
	}
	cJSON *arr = cJSON_CreateArray();
	struct dirent *e;
	buf_t p = {0};
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		buf_reset(&p);
		buf_printf(&p, "%s/%s", full, e->d_name);
		buf_putc(&p, 0);
		if (stat(p.p, &st) != 0) {   /* DirEntry.stat() follows links */
			set_msg(j, 500, "List files failed: %s", p.p, errno);
			cJSON_Delete(arr);
			arr = NULL;
			break;
		}
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "name", e->d_name);
		cJSON_AddNumberToObject(o, "size", (double)st.st_size);
		cJSON_AddStringToObject(o, "type", S_ISDIR(st.st_mode) ? "directory" : "file");
		cJSON_AddNumberToObject(o, "mod_time",
					(double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9);
		cJSON_AddItemToArray(arr, o);
	}
	closedir(d);
	buf_free(&p);
	if (!arr)
		return;
	char *s = cJSON_PrintUnformatted(arr);
	cJSON_Delete(arr);
	buf_puts(&j->body, s);
	free(s);
	j->status = 200;
	j->ctype = "application/json";
}

static void do_exists(struct sbfile *j, const char *full)
{
	struct stat st;
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "path", j->rel);
	cJSON_AddBoolToObject(o, "exists", stat(full, &st) == 0);
	char *s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	buf_puts(&j->body, s);
	free(s);
	j->status = 200;
	j->ctype = "application/json";
}

static void file_work(struct fsjob *fj)
{
	struct sbfile *j = (struct sbfile *)fj;
	buf_t full = {0};
	if (j->nul || sb_safe_path(opts.sandbox_base, j->rel, &full) < 0) {
		set_msg(j, 403, "Access denied", NULL, 0);
		buf_free(&full);
		return;
	}
	switch (j->op) {
	case OP_UPLOAD: do_upload(j, full.p); break;
	case OP_DOWNLOAD: do_download(j, full.p); break;
	case OP_LIST: do_list(j, full.p); break;
	case OP_EXISTS: do_exists(j, full.p); break;
	}
	buf_free(&full);
}

/* ============================================================ the routes */

static void file_done(struct fsjob *fj)
{
	struct sbfile *j = (struct sbfile *)fj;
	struct http_txn *t = j->t;
	if (t && !fj->aborted) {
		t->user = NULL;
		t->gone = NULL;
		if (j->op == OP_DOWNLOAD && j->status == 200) {
			/* Starlette's FileResponse(filename=the path) */
			buf_t d = {0}, q = {0};
			static const char safe[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
						   "0123456789_.-~/";
			for (const unsigned char *p = (const unsigned char *)j->rel; *p; p++)
				if (strchr(safe, *p))
					buf_putc(&q, (char)*p);
				else
					buf_printf(&q, "%%%02X", *p);
			buf_putc(&q, 0);
			if (strcmp(q.p, j->rel) == 0)
				buf_printf(&d, "attachment; filename=\"%s\"", j->rel);
			else
				buf_printf(&d, "attachment; filename*=utf-8''%s", q.p);
			buf_putc(&d, 0);
			t->disposition = buf_steal(&d);
			buf_free(&q);
		}
		http_answer(t, j->status, j->ctype, j->body.p ? j->body.p : "", j->body.len);
	} else if (t) {
		t->user = NULL;
		t->gone = NULL;
	}
	buf_free(&j->body);
	free(j->rel);
	free(j->data);
	free(j);
}

static void file_gone(struct http_txn *t)
{
	struct sbfile *j = t->user;
	if (j)
		j->t = NULL;
	t->user = NULL;
}

static void file_submit(struct http_txn *t, struct sbfile *j)
{
	struct sb_user u;
	if (sb_user(t, &u) < 0) {
		free(j->rel);
		free(j->data);
		free(j);
		return;
	}
	j->job.cred = u.cred;
	if (u.self)
		fs_cred_self(&j->job.cred);
	j->job.work = file_work;
	j->job.done = file_done;
	j->t = t;
	if (fswork_submit(&j->job) < 0) {
		free(j->rel);
		free(j->data);
		free(j);
		sb_answer_msg(t, 503, "termd has too many file requests waiting; try again");
		return;
	}
	t->user = j;
	t->gone = file_gone;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
	       c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* the path after the route's prefix, unquoted once more (upstream's
 * urllib.parse.unquote on the already decoded path) */
static struct sbfile *path_job(struct http_txn *t, size_t prefix, enum sb_op op)
{
	/* the whole path (t->path keeps 255 bytes of it) */
	char uri[4096];
	int n = lws_hdr_copy(t->wsi, uri, sizeof uri, WSI_TOKEN_GET_URI);
	const char *s = n > 0 && (size_t)n >= prefix && strncmp(uri, t->path, prefix) == 0 ?
			uri + prefix : t->path + prefix;
	struct sbfile *j = xcalloc(1, sizeof *j);
	buf_t b = {0};
	for (; *s; s++) {
		int h, l;
		if (*s == '%' && (h = hexval(s[1])) >= 0 && (l = hexval(s[2])) >= 0) {
			char c = (char)(h * 16 + l);
			if (!c)
				j->nul = 1;
			buf_putc(&b, c);
			s += 2;
		} else {
			buf_putc(&b, *s);
		}
	}
	buf_putc(&b, 0);
	j->rel = buf_steal(&b);
	j->op = op;
	return j;
}

void sb_download(struct http_txn *t)
{
	file_submit(t, path_job(t, strlen("/download/"), OP_DOWNLOAD));
}

void sb_list(struct http_txn *t)
{
	file_submit(t, path_job(t, strlen("/list/"), OP_LIST));
}

void sb_exists(struct http_txn *t)
{
	file_submit(t, path_job(t, strlen("/exists/"), OP_EXISTS));
}

void sb_upload(struct http_txn *t)
{
	char ctype[512];
	if (lws_hdr_copy(t->wsi, ctype, sizeof ctype, WSI_TOKEN_HTTP_CONTENT_TYPE) < 0)
		ctype[0] = 0;
	struct mp_part part;
	char err[256];
	if (multipart_find(ctype, t->body.p ? t->body.p : "", t->body.len, "file", &part, err,
			   sizeof err) < 0 || !part.has_filename) {
		sb_answer_422(t, "missing", "file", "Field required", NULL);
		return;
	}
	struct sbfile *j = xcalloc(1, sizeof *j);
	j->op = OP_UPLOAD;
	j->rel = xstrdup(part.filename);
	j->data = xmalloc(part.len ? part.len : 1);
	memcpy(j->data, part.data, part.len);
	j->len = part.len;
	file_submit(t, j);
}
