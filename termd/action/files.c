/* files.c — the file actions `read` and `write` (PROTOCOL.md §4 Files):
 * their JSON arguments, the checks on them, and their observations; the
 * file system work is fsio.c's. Also what `edit` (edit.c) shares with
 * them: paths taken against main's cwd and the one way a file action
 * reports an error. Everything runs synchronously on the event loop. */
#include "action.h"
#include "fsio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ======================================================= shared with edit */

__thread const char *files_base;

char *files_resolve(const char *path)
{
	if (files_base)   /* a worker: sessions are the loop's */
		return fsio_resolve(files_base, path);
	struct session *m = session_find("main");
	const char *base;
	if (m && m->cwd && m->cwd[0] == '/')
		base = m->cwd;
	else
		base = opts.cwd && opts.cwd[0] == '/' ? opts.cwd : "/";
	return fsio_resolve(base, path);
}

int files_error(struct act *a, td_err code, const char *msg, cJSON *extras)
{
	return act_error_extras(a, code, extras, "%s", msg && msg[0] ? msg : "file action failed");
}

void files_put_path(buf_t *b, const char *path)
{
	buf_put_utf8(b, path, strlen(path));
}

/* ================================================================== read */

/* Bytes cJSON needs for s[0..n) inside a JSON string. */
static size_t json_len(const char *s, size_t n)
{
	size_t len = n;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == '"' || ch == '\\' || ch == '\b' || ch == '\f' || ch == '\n' || ch == '\r' ||
		    ch == '\t')
			len += 1;
		else if (ch < 0x20)
			len += 5;
	}
	return len;
}

/* content for `read`: the whole file as base64, or lines first..last of
 * its text (total lines in all). 0, or -1 with *code and msg set. */
static int read_content(const char *path, const buf_t *data, size_t total, int b64,
			long long start, long long end, buf_t *out, size_t *first, size_t *last,
			td_err *code, buf_t *msg)
{
	*first = 1;
	*last = total;
	if (b64) {
		if ((data->len + 2) / 3 * 4 > FILES_MAX_REPLY) {
			*code = fsio_td_err(fsio_too_large(msg, path, "its base64 form", FILES_MAX_REPLY));
			return -1;
		}
		fsio_b64_encode(data->p, data->len, out);
		return 0;
	}
	enum fsio_status fs = fsio_check_text(path, data->p, data->len,
					      "; read it with encoding \"base64\"", msg);
	if (fs != FSIO_OK) {
		*code = fsio_td_err(fs);
		return -1;
	}
	if ((size_t)start > total && !(start == 1 && total == 0)) {
		buf_printf(msg, "start %lld is past the end of ", start);
		files_put_path(msg, path);
		buf_printf(msg, " (%zu lines)", total);
		*code = TD_ERR_BAD_REQUEST;
		return -1;
	}
	*first = (size_t)start;
	*last = end == -1 || (size_t)end > total ? total : (size_t)end;
	size_t a = fsio_line_offset(data->p, data->len, *first);
	size_t b = fsio_line_offset(data->p, data->len, *last + 1);
	if (json_len(data->p + a, b - a) > FILES_MAX_REPLY) {
		*code = fsio_td_err(fsio_too_large(msg, path, "the text asked for", FILES_MAX_REPLY));
		return -1;
	}
	buf_append(out, data->p + a, b - a);
	return 0;
}

static int files_read_action(struct act *a)
{
	const char *path_arg = NULL;
	long long start = 1, end = -1;
	int b64 = 0;
	if (arg_string(a, "path", &path_arg, 1) < 0 ||
	    arg_int(a, "start", &start, NULL) < 0 ||
	    arg_int(a, "end", &end, NULL) < 0 ||
	    arg_encoding(a, &b64) < 0)
		return -1;
	if (start < 1) {
		files_error(a, TD_ERR_BAD_REQUEST,
			    "'start' must be >= 1 (lines are numbered from 1)", NULL);
		return -1;
	}
	if (end != -1 && end < start) {
		files_error(a, TD_ERR_BAD_REQUEST, "'end' must be -1 (to the end) or >= start", NULL);
		return -1;
	}
	buf_t data = {0}, out = {0}, msg = {0};
	struct stat st;
	td_err code = TD_ERR_BAD_REQUEST;
	size_t first, last;
	char *path = files_resolve(path_arg);
	if (!path) {
		buf_puts(&msg, "argument 'path' is empty");
		goto fail;
	}
	enum fsio_status fs = fsio_load(path, FSIO_MAX_BYTES, &data, &st, &msg);
	if (fs != FSIO_OK) {
		code = fsio_td_err(fs);
		goto fail;
	}
	size_t total = fsio_count_lines(data.p, data.len);
	if (read_content(path, &data, total, b64, start, end, &out, &first, &last, &code, &msg) < 0)
		goto fail;
	char hex[65];
	fsio_sha256_hex(data.p, data.len, hex);
	cJSON *ex = cJSON_CreateObject();
	buf_t shown = {0};
	files_put_path(&shown, path);
	cJSON_AddStringToObject(ex, "path", shown.p);
	buf_free(&shown);
	cJSON_AddNumberToObject(ex, "total_lines", (double)total);
	cJSON_AddStringToObject(ex, "sha256", hex);
	cJSON_AddNumberToObject(ex, "bytes", (double)data.len);
	cJSON_AddStringToObject(ex, "encoding", b64 ? "base64" : "utf-8");
	cJSON_AddNumberToObject(ex, "start", (double)first);
	cJSON_AddNumberToObject(ex, "end", (double)last);
	/* the raw file is not needed any more while the answer is built */
	buf_free(&data);
	events_emit(a->conn, a->id, "read", out.p ? out.p : "", ex);
	buf_free(&out);
	free(path);
	return 0;
fail:
	files_error(a, code, msg.p, NULL);
	buf_free(&msg);
	buf_free(&data);
	buf_free(&out);
	free(path);
	return 0;
}

/* ================================================================= write */

/* "0644", "755", "0o600": 0..07777. -1 if not that. */
static long parse_mode(const char *s)
{
	if (s[0] == '0' && (s[1] == 'o' || s[1] == 'O'))
		s += 2;
	size_t n = strlen(s);
	if (n == 0 || n > 5)
		return -1;
	long v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '7')
			return -1;
		v = v * 8 + (s[i] - '0');
	}
	return v > 07777 ? -1 : v;
}

static int valid_sha_hex(const char *s)
{
	if (strlen(s) != 64)
		return 0;
	for (int i = 0; i < 64; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
		      (s[i] >= 'A' && s[i] <= 'F')))
			return 0;
	return 1;
}

/* Does what is at path match expected_sha256 ("" = nothing there)? Answers
 * the error itself and returns -1 when not (or when it cannot tell). */
static int write_expected(struct act *a, const char *path, int exists,
			  const char *expected)
{
	buf_t msg = {0};
	char cur[65] = "";
	if (exists) {
		enum fsio_status fs = fsio_hash_file(path, cur, &msg);
		if (fs != FSIO_OK) {
			files_error(a, fsio_td_err(fs), msg.p, NULL);
			buf_free(&msg);
			return -1;
		}
	}
	if (exists ? strcasecmp(cur, expected) == 0 : expected[0] == 0)
		return 0;
	cJSON *ex = cJSON_CreateObject();
	files_put_path(&msg, path);
	if (!exists)
		buf_printf(&msg, " does not exist, expected sha256 %s; nothing was written", expected);
	else if (!expected[0])
		buf_printf(&msg, " already exists (sha256 %s), expected none; nothing was written", cur);
	else
		buf_printf(&msg, " has sha256 %s, expected %s; nothing was written", cur, expected);
	if (exists)
		cJSON_AddStringToObject(ex, "sha256", cur);
	else
		cJSON_AddNullToObject(ex, "sha256");
	files_error(a, TD_ERR_MISMATCH, msg.p, ex);
	buf_free(&msg);
	return -1;
}

static void write_done(struct act *a, const char *path, const char *hex,
		       size_t len, mode_t mode, int created)
{
	char ms[8];
	snprintf(ms, sizeof ms, "%04o", (unsigned)mode);
	cJSON *ex = cJSON_CreateObject();
	buf_t shown = {0}, msg = {0};
	files_put_path(&shown, path);
	cJSON_AddStringToObject(ex, "path", shown.p);
	cJSON_AddStringToObject(ex, "sha256", hex);
	cJSON_AddNumberToObject(ex, "bytes", (double)len);
	cJSON_AddStringToObject(ex, "mode", ms);
	cJSON_AddBoolToObject(ex, "created", created);
	buf_printf(&msg, "wrote %zu bytes to ", len);
	buf_append(&msg, shown.p, shown.len);
	buf_free(&shown);
	events_emit(a->conn, a->id, "write", msg.p, ex);
	buf_free(&msg);
}

static int files_write_action(struct act *a)
{
	const char *path_arg = NULL, *content = NULL, *mode_arg = NULL, *expected = NULL;
	int b64 = 0;
	if (arg_string(a, "path", &path_arg, 1) < 0 ||
	    arg_string(a, "content", &content, 1) < 0 ||
	    arg_string(a, "mode", &mode_arg, 0) < 0 ||
	    arg_string(a, "expected_sha256", &expected, 0) < 0 ||
	    arg_encoding(a, &b64) < 0)
		return -1;
	long mode = -1;
	if (mode_arg && (mode = parse_mode(mode_arg)) < 0) {
		files_error(a, TD_ERR_BAD_REQUEST,
			    "argument 'mode' must be an octal string such as \"0644\" or \"755\"", NULL);
		return -1;
	}
	if (expected && expected[0] && !valid_sha_hex(expected)) {
		files_error(a, TD_ERR_BAD_REQUEST,
			    "argument 'expected_sha256' must be 64 hex digits (or \"\" for "
			    "\"the file must not exist\")", NULL);
		return -1;
	}
	buf_t bytes = {0}, msg = {0};
	const char *data = content;
	size_t len = strlen(content);
	char *path = NULL;
	td_err code = TD_ERR_BAD_REQUEST;
	enum fsio_status fs;
	if (b64) {
		if (fsio_b64_decode(content, len, &bytes) < 0) {
			buf_puts(&msg, "argument 'content' is not valid base64");
			goto fail;
		}
		data = bytes.p ? bytes.p : "";
		len = bytes.len;
	}
	if (len > FSIO_MAX_BYTES) {
		code = fsio_td_err(fsio_too_large(&msg, path_arg, "the content", FSIO_MAX_BYTES));
		goto fail;
	}
	path = files_resolve(path_arg);
	if (!path) {
		buf_puts(&msg, "argument 'path' is empty");
		goto fail;
	}
	if (fsio_names_folder(path_arg)) {
		code = TD_ERR_IS_DIRECTORY;
		files_put_path(&msg, path);
		buf_puts(&msg, "/ names a folder; write needs a file path");
		goto fail;
	}
	struct stat st;
	int exists;
	if ((fs = fsio_write_target(&path, &st, &exists, &msg)) != FSIO_OK) {
		code = fsio_td_err(fs);
		goto fail;
	}
	if (expected && write_expected(a, path, exists, expected) < 0)
		goto done;
	mode_t m = mode >= 0 ? (mode_t)mode : exists ? (st.st_mode & 07777) : FSIO_DEFAULT_MODE;
	if ((fs = fsio_atomic_write(path, data, len, m, exists ? &st : NULL, 1, &msg)) != FSIO_OK) {
		code = fsio_td_err(fs);
		goto fail;
	}
	char hex[65];
	fsio_sha256_hex(data, len, hex);
	buf_free(&bytes);   /* not needed any more while the answer is built */
	write_done(a, path, hex, len, m, !exists);
	goto done;
fail:
	files_error(a, code, msg.p, NULL);
done:
	buf_free(&msg);
	buf_free(&bytes);
	free(path);
	return 0;
}

void files_register(void)
{
	static const struct action_def defs[] = {
		{"read", files_read_action, ACT_FILEWORK},
		{"write", files_write_action, ACT_FILEWORK | ACT_SERIAL},
	};
	actions_register(defs, sizeof defs / sizeof defs[0]);
}
