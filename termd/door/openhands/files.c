/* files.c — OpenHands' `read`, `write` and `edit` (its file editor
 * commands) on termd's read/write/edit actions, answers in OpenHands' shapes
 * and texts (line ranges, media files, the unified diff). */
#include "openhands.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================== read, write */

/* binaryornot's answer, near enough: a NUL, or not UTF-8, in the first
 * 1024 bytes (a missing file is not binary) */
static int is_binary(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return 0;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return 0;
	}
	unsigned char b[1024];
	ssize_t n = read(fd, b, sizeof b);
	close(fd);
	if (n <= 0)
		return 0;
	if (memchr(b, 0, (size_t)n))
		return 1;
	/* a character cut by the 1024-byte window is not a fault */
	size_t len = (size_t)n;
	size_t back = 0;
	while (back < 3 && back < len && (b[len - 1 - back] & 0xC0) == 0x80)
		back++;
	if (back < len && b[len - 1 - back] >= 0xC0)
		len -= back + 1;
	size_t bad = 0;
	return !utf8_text((const char *)b, len, &bad);
}

/* file.readlines() in text mode (universal newlines): pieces ending in \n */
struct lines {
	char **v;
	size_t n;
};

static void split_lines(const char *s, struct lines *L)
{
	L->v = NULL;
	L->n = 0;
	size_t cap = 0;
	buf_t cur = {0};
	for (const char *p = s;; p++) {
		int end = *p == 0;
		if (!end) {
			char c = *p;
			if (c == '\r') {
				c = '\n';
				if (p[1] == '\n')
					p++;
			}
			buf_putc(&cur, c);
			if (c != '\n')
				continue;
		}
		if (cur.len) {
			if (L->n == cap) {
				cap = cap ? 2 * cap : 16;
				L->v = xrealloc(L->v, cap * sizeof *L->v);
			}
			L->v[L->n++] = buf_steal(&cur);
		}
		if (end)
			break;
	}
	buf_free(&cur);
}

static void lines_free(struct lines *L)
{
	for (size_t i = 0; i < L->n; i++)
		free(L->v[i]);
	free(L->v);
}

/* OpenHands' read_lines(all_lines, start, end), joined */
static void read_lines(struct lines *L, long long start, long long end, buf_t *out)
{
	long long n = (long long)L->n;
	start = start < 0 ? 0 : start;
	start = start > n ? n : start;
	end = end == -1 ? -1 : (end < 0 ? 0 : end);
	end = end > n ? n : end;   /* min(end, len): -1 stays -1 */
	long long b, e;
	if (end == -1) {
		b = start;
		e = n;
	} else {
		b = start < n - 2 ? start : n - 2;
		b = b < 0 ? 0 : b;
		e = end > b + 1 ? end : b + 1;
		if (e > n)
			e = n;
	}
	for (long long i = b; i < e; i++)
		buf_puts(out, L->v[i]);
}

static long long arg_ll(struct ohreq *r, const char *key, long long def)
{
	const cJSON *v = oh_arg(r, key);
	return cJSON_IsNumber(v) ? (long long)v->valuedouble : def;
}

static cJSON *read_obs(const char *path, const char *content, const char *impl)
{
	buf_t msg = {0};
	buf_printf(&msg, "I read the file %s.", path);
	cJSON *o = oh_obs_new(msg.p, "read", content);
	buf_free(&msg);
	cJSON *ex = cJSON_AddObjectToObject(o, "extras");
	cJSON_AddStringToObject(ex, "path", path);
	cJSON_AddStringToObject(ex, "impl_source", impl);
	return o;
}

static const char *media_mime(const char *path)
{
	static const struct { const char *ext, *mime; } m[] = {
		{".png", "image/png"}, {".jpg", "image/jpeg"}, {".jpeg", "image/jpeg"},
		{".bmp", "image/bmp"}, {".gif", "image/gif"}, {".pdf", "application/pdf"},
		{".mp4", "video/mp4"}, {".webm", "video/webm"}, {".ogg", "audio/ogg"},
	};
	size_t pl = strlen(path);
	for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
		size_t el = strlen(m[i].ext);
		if (pl >= el && strcasecmp(path + pl - el, m[i].ext) == 0)
			return m[i].mime;
	}
	return NULL;
}

static void read_answered(struct ohreq *r, cJSON *ans)
{
	if (oh_is_error(ans)) {
		const char *code = oh_ans_code(ans);
		if (code && strcmp(code, "not_found") == 0)
			oh_done_errorf(r, "File not found: %s. Your current working directory is %s.", r->path,
				    oh_main_cwd());
		else if (code && strcmp(code, "is_directory") == 0)
			oh_done_errorf(r, "Path is a directory: %s. You can only read files", r->path);
		else if (code && strcmp(code, "binary_file") == 0)
			oh_done_errorf(r, "File could not be decoded as utf-8: %s.", r->path);
		else
			oh_done_error(r, oh_ans_content(ans));
		return;
	}
	const char *mime = media_mime(r->path);
	buf_t out = {0};
	if (mime) {
		buf_printf(&out, "data:%s;base64,%s", mime, oh_ans_content(ans));
	} else {
		struct lines L;
		split_lines(oh_ans_content(ans), &L);
		read_lines(&L, arg_ll(r, "start", 0), arg_ll(r, "end", -1), &out);
		lines_free(&L);
	}
	oh_done(r, read_obs(r->path, out.p ? out.p : "", "default"));
	buf_free(&out);
}

static void aci_view_answered(struct ohreq *r, cJSON *ans)
{
	buf_t c = {0};
	if (oh_is_error(ans))
		buf_printf(&c, "ERROR:\n%s", oh_ans_content(ans));
	else
		buf_puts(&c, oh_ans_content(ans));
	oh_done(r, read_obs(oh_arg_str(r, "path"), c.p ? c.p : "", "oh_aci"));
	buf_free(&c);
}

/* openhands-aci's check of the path: absolute, else a hint */
static int aci_path_ok(struct ohreq *r, const char *path, buf_t *err)
{
	if (path[0] == '/')
		return 1;
	buf_printf(err, "ERROR:\nInvalid `path` parameter: %s. The path should be an absolute path, "
		   "starting with `/`.", path);
	buf_t s = {0};
	buf_printf(&s, "%s/%s", opts.cwd, path);
	if (access(s.p, F_OK) == 0)
		buf_printf(err, " Maybe you meant %s?", s.p);
	buf_free(&s);
	(void)r;
	return 0;
}

void oh_read_start(struct ohreq *r)
{
	const char *path = oh_arg_str(r, "path");
	if (!path) {
		oh_done_error(r, "FileReadAction needs a string 'path' argument");
		return;
	}
	char *abs = files_resolve(path);
	int bin = abs && is_binary(abs);
	free(abs);
	if (bin) {
		oh_done_error(r, "ERROR_BINARY_FILE");
		return;
	}
	const char *impl = oh_arg_str(r, "impl_source");
	if (impl && strcmp(impl, "oh_aci") == 0) {
		buf_t err = {0};
		if (!aci_path_ok(r, path, &err)) {
			oh_done(r, read_obs(path, err.p, "oh_aci"));
			buf_free(&err);
			return;
		}
		cJSON *a = cJSON_CreateObject();
		cJSON_AddStringToObject(a, "command", "view");
		cJSON_AddStringToObject(a, "path", path);
		const cJSON *vr = oh_arg(r, "view_range");
		if (vr)
			cJSON_AddItemToObject(a, "view_range", cJSON_Duplicate(vr, 1));
		oh_call(r, "edit", a, aci_view_answered);
		return;
	}
	r->path = oh_resolve(path);
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "path", r->path);
	if (media_mime(r->path))
		cJSON_AddStringToObject(a, "encoding", "base64");
	oh_call(r, "read", a, read_answered);
}

static void write_done(struct ohreq *r, cJSON *ans)
{
	if (oh_is_error(ans)) {
		const char *code = oh_ans_code(ans);
		if (code && strcmp(code, "is_directory") == 0)
			oh_done_errorf(r, "Path is a directory: %s. You can only write to files", r->path);
		else
			oh_done_error(r, oh_ans_content(ans));
		return;
	}
	buf_t msg = {0};
	buf_printf(&msg, "I wrote to the file %s.", r->path);
	cJSON *o = oh_obs_new(msg.p, "write", "");
	buf_free(&msg);
	cJSON *ex = cJSON_AddObjectToObject(o, "extras");
	cJSON_AddStringToObject(ex, "path", r->path);
	oh_done(r, o);
}

static void write_have_old(struct ohreq *r, cJSON *ans)
{
	const char *content = oh_arg_str(r, "content");
	if (oh_is_error(ans)) {
		const char *code = oh_ans_code(ans);
		if (code && strcmp(code, "is_directory") == 0) {
			oh_done_errorf(r, "Path is a directory: %s. You can only write to files", r->path);
			return;
		}
		if (code && strcmp(code, "binary_file") == 0) {
			oh_done_errorf(r, "File could not be decoded as utf-8: %s", r->path);
			return;
		}
		if (!code || strcmp(code, "not_found") != 0) {
			oh_done_error(r, oh_ans_content(ans));
			return;
		}
	} else {
		r->exists = 1;
	}
	/* content.split('\n'), each + '\n'; an existing file gets them
	 * spliced in by insert_lines(start, end) */
	buf_t nw = {0};
	if (r->exists) {
		struct lines L;
		split_lines(oh_ans_content(ans), &L);
		long long start = arg_ll(r, "start", 0), end = arg_ll(r, "end", -1), n = (long long)L.n;
		if (start != 0)   /* original[:start] */
			for (long long i = 0; i < (start < 0 ? n + start : start) && i < n; i++)
				buf_puts(&nw, L.v[i]);
		buf_puts(&nw, content);
		buf_putc(&nw, '\n');
		if (end != -1)    /* original[end:] */
			for (long long i = end < 0 ? (n + end < 0 ? 0 : n + end) : end; i < n; i++)
				buf_puts(&nw, L.v[i]);
		lines_free(&L);
	} else {
		buf_puts(&nw, content);
		buf_putc(&nw, '\n');
	}
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "path", r->path);
	cJSON_AddStringToObject(a, "content", nw.p);
	if (!r->exists)
		cJSON_AddStringToObject(a, "mode", "664");
	buf_free(&nw);
	oh_call(r, "write", a, write_done);
}

void oh_write_start(struct ohreq *r)
{
	const char *path = oh_arg_str(r, "path");
	if (!path || !oh_arg_str(r, "content")) {
		oh_done_error(r, "FileWriteAction needs string 'path' and 'content' arguments");
		return;
	}
	r->path = oh_resolve(path);
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "path", r->path);
	oh_call(r, "read", a, write_have_old);
}

/* ================================================================ edit */

/* get_diff(old, new, path): difflib.unified_diff(n=0) of the lines split
 * at '\n', lines rstripped, joined by '\n'. One hunk: the lines between
 * the common head and tail. */
static void unified_diff(const char *path, const char *a, const char *b, buf_t *out)
{
	struct piece { const char *p; size_t n; };
	struct piece *A = NULL, *B = NULL;
	size_t na = 0, nb = 0;
	for (int k = 0; k < 2; k++) {
		const char *s = k ? b : a;
		struct piece **V = k ? &B : &A;
		size_t *N = k ? &nb : &na, cap = 0;
		for (const char *p = s;;) {
			const char *e = strchr(p, '\n');
			size_t l = e ? (size_t)(e - p) : strlen(p);
			if (*N == cap) {
				cap = cap ? 2 * cap : 16;
				*V = xrealloc(*V, cap * sizeof **V);
			}
			(*V)[(*N)++] = (struct piece){p, l};
			if (!e)
				break;
			p = e + 1;
		}
	}
	size_t h = 0;
	while (h < na && h < nb && A[h].n == B[h].n && memcmp(A[h].p, B[h].p, A[h].n) == 0)
		h++;
	size_t t = 0;
	while (t < na - h && t < nb - h && A[na - 1 - t].n == B[nb - 1 - t].n &&
	       memcmp(A[na - 1 - t].p, B[nb - 1 - t].p, A[na - 1 - t].n) == 0)
		t++;
	size_t da = na - h - t, db = nb - h - t;
	if (da || db) {
		buf_printf(out, "--- %s\n+++ %s\n@@ -", path, path);
		for (int k = 0; k < 2; k++) {
			size_t len = k ? db : da, beg = h + 1;
			if (k)
				buf_puts(out, " +");
			if (len == 1)
				buf_printf(out, "%zu", beg);
			else
				buf_printf(out, "%zu,%zu", len ? beg : beg - 1, len);
		}
		buf_puts(out, " @@");
		for (int k = 0; k < 2; k++) {
			struct piece *V = k ? B : A;
			size_t len = k ? db : da;
			for (size_t i = h; i < h + len; i++) {
				size_t l = V[i].n;
				while (l && oh_py_space((unsigned char)V[i].p[l - 1]))
					l--;
				buf_printf(out, "\n%c%.*s", k ? '+' : '-', (int)l, V[i].p);
			}
		}
	}
	free(A);
	free(B);
}

static cJSON *edit_obs(struct ohreq *r, const char *content, const char *diff)
{
	const char *path = oh_arg_str(r, "path");
	buf_t msg = {0};
	buf_printf(&msg, "I edited the file %s.", path);
	cJSON *o = oh_obs_new(msg.p, "edit", content);
	buf_free(&msg);
	cJSON *ex = cJSON_AddObjectToObject(o, "extras");
	cJSON_AddStringToObject(ex, "path", path);
	cJSON_AddBoolToObject(ex, "prev_exist", 0);
	const char *os = oh_arg_str(r, "old_str"), *ns = oh_arg_str(r, "new_str");
	cJSON_AddItemToObject(ex, "old_content", os ? cJSON_CreateString(os) : cJSON_CreateNull());
	cJSON_AddItemToObject(ex, "new_content", ns ? cJSON_CreateString(ns) : cJSON_CreateNull());
	cJSON_AddStringToObject(ex, "impl_source", "oh_aci");
	cJSON_AddStringToObject(ex, "diff", diff);
	cJSON_AddNullToObject(ex, "_diff_cache");
	return o;
}

static void edit_have_new(struct ohreq *r, cJSON *ans)
{
	buf_t diff = {0};
	unified_diff(oh_arg_str(r, "path"), r->old ? r->old : "",
		     oh_is_error(ans) ? "" : oh_ans_content(ans), &diff);
	cJSON *o = edit_obs(r, oh_jstr(r->result, "content"), diff.p ? diff.p : "");
	buf_free(&diff);
	oh_done(r, o);
}

static void edit_answered(struct ohreq *r, cJSON *ans)
{
	const char *cmd = oh_arg_str(r, "command");
	if (oh_is_error(ans) || (cmd && strcmp(cmd, "view") == 0)) {
		buf_t c = {0};
		if (oh_is_error(ans))
			buf_printf(&c, "ERROR:\n%s", oh_ans_content(ans));
		else
			buf_puts(&c, oh_ans_content(ans));
		oh_done(r, edit_obs(r, c.p ? c.p : "", ""));
		buf_free(&c);
		return;
	}
	cJSON_Delete(r->result);
	r->result = cJSON_CreateObject();
	cJSON_AddStringToObject(r->result, "content", oh_ans_content(ans));
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "path", oh_arg_str(r, "path"));
	oh_call(r, "read", a, edit_have_new);
}

static void edit_run(struct ohreq *r)
{
	cJSON *a = cJSON_CreateObject();
	static const char *const keys[] = {"command", "path", "file_text", "old_str", "new_str",
					   "view_range"};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		const cJSON *v = oh_arg(r, keys[i]);
		if (v)
			cJSON_AddItemToObject(a, keys[i], cJSON_Duplicate(v, 1));
	}
	const cJSON *il = oh_arg(r, "insert_line");
	if (cJSON_IsString(il)) {
		char *end;
		long long v = strtoll(il->valuestring, &end, 10);
		cJSON_AddNumberToObject(a, "insert_line", (double)v);
	} else if (il) {
		cJSON_AddItemToObject(a, "insert_line", cJSON_Duplicate(il, 1));
	}
	oh_call(r, "edit", a, edit_answered);
}

static void edit_have_old(struct ohreq *r, cJSON *ans)
{
	free(r->old);
	r->old = xstrdup(oh_is_error(ans) ? "" : oh_ans_content(ans));
	edit_run(r);
}

void oh_edit_start(struct ohreq *r)
{
	const char *impl = oh_arg_str(r, "impl_source");
	const char *path = oh_arg_str(r, "path"), *cmd = oh_arg_str(r, "command");
	if (impl && strcmp(impl, "oh_aci") != 0) {
		oh_done_errorf(r, "FileEditAction with impl_source '%s' is edited by the client, not here",
			    impl);
		return;
	}
	if (!path || !cmd) {
		oh_done_error(r, "FileEditAction needs string 'path' and 'command' arguments");
		return;
	}
	const cJSON *il = oh_arg(r, "insert_line");
	if (cJSON_IsString(il)) {
		char *end;
		errno = 0;
		strtoll(il->valuestring, &end, 10);
		if (end == il->valuestring || *end || errno) {
			buf_t c = {0};
			buf_printf(&c, "ERROR:\nInvalid insert_line value: '%s'. Expected an integer.",
				   il->valuestring);
			oh_done(r, edit_obs(r, c.p, ""));
			buf_free(&c);
			return;
		}
	}
	buf_t err = {0};
	if (!aci_path_ok(r, path, &err)) {
		oh_done(r, edit_obs(r, err.p, ""));
		buf_free(&err);
		return;
	}
	if (strcmp(cmd, "view") == 0) {
		edit_run(r);
		return;
	}
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "path", path);
	oh_call(r, "read", a, edit_have_old);
}
