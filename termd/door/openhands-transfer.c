/* openhands-transfer.c — OpenHands' file transfer routes: /list_files,
 * /upload_file (a file, or a zip unpacked into a folder) and
 * /download_files (a folder as a zip). */
#include "openhands.h"

#include <dirent.h>
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
		struct unzip_ctx u = {dest};
		if (zip_check(part.data, part.len, opts.upload_max, opts.upload_entries, err,
			      sizeof err) < 0 ||
		    zip_read(part.data, part.len, unzip_entry, &u, err, sizeof err) < 0) {
			oh_answer_detail(t, 500, err);
			return;
		}
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
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "filename", fname);
	cJSON_AddStringToObject(o, "destination", dest);
	cJSON_AddBoolToObject(o, "recursive", recursive);
	char *s = cJSON_PrintUnformatted(o);
	oh_answer_json(t, 200, s);
	free(s);
	cJSON_Delete(o);
}

struct zwalk {
	struct zipw zw;
	size_t total;
	int too_large;
};

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* os.walk(root) without following links to folders; arcnames relative */
static void zip_walk(struct zwalk *w, const char *dir, const char *rel)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 32;
			names = xrealloc(names, cap * sizeof *names);
		}
		names[n++] = xstrdup(e->d_name);
	}
	closedir(d);
	if (n)   /* names is NULL for an empty folder */
		qsort(names, n, sizeof *names, str_cmp);
	for (size_t i = 0; i < n; i++) {
		buf_t full = {0}, arc = {0};
		buf_printf(&full, "%s/%s", dir, names[i]);
		buf_printf(&arc, "%s%s%s", rel, rel[0] ? "/" : "", names[i]);
		struct stat lst, st;
		if (lstat(full.p, &lst) == 0 && !w->too_large) {
			if (S_ISDIR(lst.st_mode)) {
				zip_walk(w, full.p, arc.p);
			} else if (!(S_ISLNK(lst.st_mode) && stat(full.p, &st) == 0 && S_ISDIR(st.st_mode))) {
				buf_t data = {0}, msg = {0};
				struct stat fst;
				/* over the limit by its size: refused before it is read */
				if (stat(full.p, &fst) == 0 &&
				    w->total + (size_t)fst.st_size > opts.download_max)
					w->too_large = 1;
				else if (fsio_load(full.p, opts.download_max, &data, &fst, &msg) == FSIO_OK) {
					w->total += data.len;
					if (w->total > opts.download_max)
						w->too_large = 1;
					else
						zipw_add(&w->zw, arc.p, data.p ? data.p : "", data.len,
							 fst.st_mtime);
				}
				buf_free(&data);
				buf_free(&msg);
			}
		}
		buf_free(&full);
		buf_free(&arc);
		free(names[i]);
	}
	free(names);
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
	struct zwalk w;
	memset(&w, 0, sizeof w);
	if (S_ISDIR(st.st_mode))
		zip_walk(&w, path, "");
	if (w.too_large) {
		buf_free(&w.zw.out);
		buf_free(&w.zw.cd);
		char m[160];
		snprintf(m, sizeof m, "the folder holds over %zu bytes, the download limit (--download-max)",
			 opts.download_max);
		oh_answer_detail(t, 500, m);
		return;
	}
	buf_t zip;
	zipw_finish(&w.zw, &zip);
	/* basename of the path as given (os.path.basename: "" after a /) */
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	buf_t disp = {0};
	buf_puts(&disp, "attachment; filename=\"");
	buf_puts(&disp, base);
	buf_puts(&disp, ".zip\"");
	http_answer(t, 200, "application/zip", zip.p, zip.len);
	t->disposition = buf_steal(&disp);
	buf_free(&zip);
}
