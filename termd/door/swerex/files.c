/* files.c — SWE-ReX's /read_file (Path.read_text with encoding and
 * errors), /write_file (parents made, the text written) on termd's `read`
 * and `write` actions, and /upload (multipart `file`, `target_path`,
 * `unzip`): the file written at target_path, or a zip unpacked beneath it
 * with the existing bounds (--upload-max, --upload-entries) and without
 * ever going through a link, as file work (fswork.c). */
#include "swerex.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void not_found(struct swreq *r, const char *errno_text, const char *path, const char *cls)
{
	buf_t m = {0};
	buf_printf(&m, "%s: ", errno_text);
	sw_repr(&m, path, strlen(path));
	sw_raise(r, cls, m.p, NULL);
	buf_free(&m);
}

/* a termd file error as the Python exception Path would raise */
static void file_error(struct swreq *r, const cJSON *ans, const char *path)
{
	const char *code = sw_ans_code(ans);
	if (!strcmp(code, "not_found"))
		not_found(r, "[Errno 2] No such file or directory", path, "builtins.FileNotFoundError");
	else if (!strcmp(code, "is_directory"))
		not_found(r, "[Errno 21] Is a directory", path, "builtins.IsADirectoryError");
	else if (!strcmp(code, "permission_denied") || strstr(sw_ans_content(ans), "ermission"))
		not_found(r, "[Errno 13] Permission denied", path, "builtins.PermissionError");
	else
		sw_raise(r, "builtins.OSError", sw_ans_content(ans), NULL);
}

/* ========================================================= read_file */

static int utf8_valid_len(const unsigned char *s, size_t n)
{
	if (s[0] < 0x80)
		return 1;
	int need = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 && s[0] < 0xf0 ? 3 :
		   s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : 0;
	if (!need || (size_t)need > n)
		return 0;
	for (int i = 1; i < need; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if (need == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0)))
		return 0;
	if (need == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90)))
		return 0;
	return need;
}

static void read_answered(struct swreq *r, cJSON *ans)
{
	const char *path = sw_jstr(r->body, "path", "");
	if (sw_is_error(ans)) {
		file_error(r, ans, path);
		return;
	}
	buf_t raw = {0}, txt = {0};
	const char *b64 = sw_ans_content(ans);
	if (fsio_b64_decode(b64, strlen(b64), &raw) < 0) {
		sw_raise(r, "builtins.OSError", "termd could not decode the file", NULL);
		return;
	}
	const char *enc = sw_jstr(r->body, "encoding", NULL);
	const char *errors = sw_jstr(r->body, "errors", "strict");
	int latin1 = enc && (!strcasecmp(enc, "latin-1") || !strcasecmp(enc, "latin1") ||
			     !strcasecmp(enc, "iso-8859-1"));
	const unsigned char *p = (const unsigned char *)(raw.p ? raw.p : "");
	for (size_t i = 0; i < raw.len;) {
		int l = latin1 ? 0 : utf8_valid_len(p + i, raw.len - i);
		if (l) {
			buf_append(&txt, p + i, (size_t)l);
			i += (size_t)l;
			continue;
		}
		if (latin1 || p[i] < 0x80) {
			if (p[i] < 0x80)
				buf_putc(&txt, (char)p[i]);
			else {
				buf_putc(&txt, (char)(0xc0 | (p[i] >> 6)));
				buf_putc(&txt, (char)(0x80 | (p[i] & 0x3f)));
			}
		} else if (!strcmp(errors, "replace")) {
			buf_puts(&txt, "\xef\xbf\xbd");
		} else if (!strcmp(errors, "backslashreplace")) {
			buf_printf(&txt, "\\x%02x", p[i]);
		} else if (strcmp(errors, "ignore") != 0) {
			buf_t m = {0};
			buf_printf(&m, "'utf-8' codec can't decode byte 0x%02x in position %zu: "
				   "invalid start byte", p[i], i);
			sw_raise(r, "builtins.UnicodeDecodeError", m.p, NULL);
			buf_free(&m);
			buf_free(&raw);
			buf_free(&txt);
			return;
		}
		i++;
	}
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "content", txt.p ? txt.p : "");
	sw_answer_obj(r, o);
	buf_free(&raw);
	buf_free(&txt);
}

void sw_read_file(struct http_txn *t)
{
	struct swreq *r = sw_req_new(t);
	r->body = cJSON_ParseWithLength(t->body.p ? t->body.p : "", t->body.len);
	const char *path = sw_jstr(r->body, "path", NULL);
	if (!path) {
		sw_answer_422(r, "path", "Field required");
		return;
	}
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "path", path);
	cJSON_AddStringToObject(a, "encoding", "base64");
	sw_call(r, "read", a, read_answered);
}

/* ======================================================== write_file */

static void write_answered(struct swreq *r, cJSON *ans)
{
	if (sw_is_error(ans)) {
		file_error(r, ans, sw_jstr(r->body, "path", ""));
		return;
	}
	sw_answer_json(r, 200, "{}");
}

void sw_write_file(struct http_txn *t)
{
	struct swreq *r = sw_req_new(t);
	r->body = cJSON_ParseWithLength(t->body.p ? t->body.p : "", t->body.len);
	const char *path = sw_jstr(r->body, "path", NULL);
	const char *content = sw_jstr(r->body, "content", NULL);
	if (!path || !content) {
		sw_answer_422(r, !path ? "path" : "content", "Field required");
		return;
	}
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "path", path);
	cJSON_AddStringToObject(a, "content", content);
	sw_call(r, "write", a, write_answered);
}

/* ============================================================ upload */

struct up_job {
	struct fsjob job;         /* first */
	unsigned char *data;
	size_t len;
	char *target;
	int unzip, failed;
	char err[512];
	struct swreq *r;          /* NULL once the request ended */
};

static int write_whole(const char *path, const void *data, size_t len, char *err, size_t n)
{
	int created;   /* a FIFO or a device at the path is refused, never waited on */
	int fd = fs_open_write(path, 0666, &created);
	if (fd < 0 || write_all(fd, data, len) < 0 || close(fd) < 0) {
		snprintf(err, n, "[Errno %d] %s: '%s'", errno, strerror(errno), path);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return 0;
}

static void up_work(struct fsjob *fj)
{
	struct up_job *j = (struct up_job *)fj;
	buf_t msg = {0};
	char *parent = xstrdup(j->target);
	char *sl = strrchr(parent, '/');
	if (sl)
		*(sl == parent ? sl + 1 : sl) = 0;
	/* target_path.parent.mkdir(parents=True) */
	if (sl && fsio_mkdirs(parent, &msg) != FSIO_OK) {
		snprintf(j->err, sizeof j->err, "%s", msg.p ? msg.p : "cannot make the folder");
		j->failed = 1;
	} else if (j->unzip) {
		buf_reset(&msg);
		if (fsio_mkdirs(j->target, &msg) != FSIO_OK) {
			snprintf(j->err, sizeof j->err, "%s", msg.p ? msg.p : "cannot make the folder");
			j->failed = 1;
		} else if (fs_unzip_into(j->target, j->data, j->len, opts.upload_max,
					 opts.upload_entries, 0, j->err, sizeof j->err) < 0) {
			j->failed = 1;
		}
	} else if (write_whole(j->target, j->data, j->len, j->err, sizeof j->err) < 0) {
		j->failed = 1;
	}
	free(parent);
	buf_free(&msg);
	free(j->data);
	j->data = NULL;
}

static void up_done(struct fsjob *fj)
{
	struct up_job *j = (struct up_job *)fj;
	struct swreq *r = j->r;
	if (r) {
		r->upload = NULL;
		if (fj->aborted || fj->err)
			sw_raise(r, "builtins.PermissionError", "termd cannot act as its user for this upload",
				 NULL);
		else if (j->failed)
			sw_raise(r, strstr(j->err, "zip") ? "zipfile.BadZipFile" : "builtins.OSError",
				 j->err, NULL);
		else
			sw_answer_json(r, 200, "{}");
	}
	free(j->data);
	free(j->target);
	free(j);
}

static int form_bool(const char *v, size_t n)
{
	return (n == 4 && !strncasecmp(v, "true", 4)) || (n == 1 && (v[0] == '1' || v[0] == 't')) ||
	       (n == 2 && !strncasecmp(v, "on", 2)) || (n == 3 && !strncasecmp(v, "yes", 3));
}

void sw_upload(struct http_txn *t)
{
	struct swreq *r = sw_req_new(t);
	char ctype[512];
	if (lws_hdr_copy(t->wsi, ctype, sizeof ctype, WSI_TOKEN_HTTP_CONTENT_TYPE) < 0)
		ctype[0] = 0;
	struct mp_part file, target, unzip;
	char err[512];
	const char *body = t->body.p ? t->body.p : "";
	if (multipart_find(ctype, body, t->body.len, "file", &file, err, sizeof err) < 0) {
		sw_answer_422(r, "file", "Field required");
		return;
	}
	if (multipart_find(ctype, body, t->body.len, "target_path", &target, err, sizeof err) < 0) {
		sw_answer_422(r, "target_path", "Field required");
		return;
	}
	int uz = multipart_find(ctype, body, t->body.len, "unzip", &unzip, err, sizeof err) == 0 &&
		 form_bool(unzip.data, unzip.len);
	if (!uz && file.len > opts.upload_max) {
		sw_raise(r, "builtins.OSError", "the file is over termd's --upload-max", NULL);
		return;
	}
	struct up_job *j = xcalloc(1, sizeof *j);
	fs_cred_self(&j->job.cred);
	j->job.work = up_work;
	j->job.done = up_done;
	j->data = xmalloc(file.len ? file.len : 1);
	memcpy(j->data, file.data, file.len);
	j->len = file.len;
	j->target = xstrndup(target.data, target.len);
	j->unzip = uz;
	j->r = r;
	if (!j->target[0]) {
		free(j->data);
		free(j->target);
		free(j);
		sw_raise(r, "builtins.FileNotFoundError", "[Errno 2] No such file or directory: ''",
			 NULL);
		return;
	}
	if (fswork_submit(&j->job) < 0) {
		free(j->data);
		free(j->target);
		free(j);
		sw_raise(r, "builtins.OSError", "termd has too many file requests waiting; try again",
			 NULL);
		return;
	}
	r->upload = j;
}

void sw_upload_req_done(struct swreq *r)
{
	struct up_job *j = r->upload;
	if (j)
		j->r = NULL;   /* the work goes on; nobody to answer */
	r->upload = NULL;
}
