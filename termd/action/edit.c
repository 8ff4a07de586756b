/* edit.c — the `edit` action (PROTOCOL.md §4 Files), str_replace_editor's
 * commands as a table: view (numbered lines or a folder listing), create,
 * str_replace, insert and undo_edit, their `cat -n` snippets, and the
 * bounded per-path undo history (file-scope state, kept here only). The
 * file system work is fsio.c's; paths and errors as files.c does them. */
#include "action.h"
#include "fsio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EDIT_UNDO_PER_FILE    10
#define EDIT_UNDO_MAX_BYTES   (64u * 1024u * 1024u)
#define EDIT_UNDO_MAX_ENTRIES 1000
#define EDIT_SNIPPET_CONTEXT  4
#define EDIT_LIST_MAX         10000   /* entries in a folder view */
#define EDIT_SHOW_MAX         200     /* characters of old_str quoted in errors */
#define EDIT_LINES_LISTED     20      /* line numbers listed for repeated old_str */

/* One edit request: what every command gets. */
struct edit_req {
	struct act *a;
	const char *path_arg;     /* as given */
	const char *path;         /* resolved (files_resolve) */
};

/* ============================================================ undo history */

/* One step back for a path: its content before an edit (or that it did
 * not exist), and the hash of what the edit left, so an undo never throws
 * away changes made since by something else. */
struct hist_entry {
	struct hist_entry *older;
	uint64_t serial;          /* global age, for dropping the oldest */
	int existed;
	mode_t mode;
	char *data;
	size_t len;
	char after[65];
};

struct hist_file {
	struct hist_file *next;
	char *path;
	struct hist_entry *top;
	int depth;
};

static struct hist_file *hist_files;
static size_t hist_bytes, hist_entries;
static uint64_t hist_serial;

static struct hist_file *hist_find(const char *path, int create)
{
	for (struct hist_file *h = hist_files; h; h = h->next)
		if (strcmp(h->path, path) == 0)
			return h;
	if (!create)
		return NULL;
	struct hist_file *h = xcalloc(1, sizeof *h);
	h->path = xstrdup(path);
	h->next = hist_files;
	hist_files = h;
	return h;
}

static void hist_entry_free(struct hist_entry *x)
{
	hist_bytes -= x->len;
	hist_entries--;
	free(x->data);
	free(x);
}

static void hist_file_drop(struct hist_file *h)
{
	struct hist_file **pp = &hist_files;
	while (*pp != h)
		pp = &(*pp)->next;
	*pp = h->next;
	while (h->top) {
		struct hist_entry *x = h->top;
		h->top = x->older;
		hist_entry_free(x);
	}
	free(h->path);
	free(h);
}

/* Remove the oldest entry of h (the bottom of its stack). */
static void hist_drop_bottom(struct hist_file *h)
{
	struct hist_entry **pp = &h->top;
	while ((*pp)->older)
		pp = &(*pp)->older;
	hist_entry_free(*pp);
	*pp = NULL;
	if (--h->depth == 0)
		hist_file_drop(h);
}

/* Remove the oldest entry of all. */
static void hist_drop_oldest(void)
{
	struct hist_file *best = NULL;
	uint64_t best_serial = UINT64_MAX;
	for (struct hist_file *h = hist_files; h; h = h->next) {
		struct hist_entry *x = h->top;
		while (x->older)
			x = x->older;
		if (x->serial < best_serial) {
			best_serial = x->serial;
			best = h;
		}
	}
	if (best)
		hist_drop_bottom(best);
}

/* Record the state of path before an edit that left content with hash
 * `after`. Returns 0, or -1 when the old content is too large to keep (the
 * path's history is then cleared: it could no longer be undone in order). */
static int hist_push(const char *path, int existed, mode_t mode, const char *data, size_t len,
		     const char *after)
{
	if (len > EDIT_UNDO_MAX_BYTES) {
		struct hist_file *h = hist_find(path, 0);
		if (h)
			hist_file_drop(h);
		return -1;
	}
	struct hist_file *h = hist_find(path, 1);
	struct hist_entry *x = xcalloc(1, sizeof *x);
	x->serial = ++hist_serial;
	x->existed = existed;
	x->mode = mode;
	x->data = len ? xmalloc(len) : NULL;
	if (len)
		memcpy(x->data, data, len);
	x->len = len;
	memcpy(x->after, after, 65);
	x->older = h->top;
	h->top = x;
	h->depth++;
	hist_bytes += len;
	hist_entries++;
	if (h->depth > EDIT_UNDO_PER_FILE)
		hist_drop_bottom(h);   /* h keeps at least the new entry */
	while (hist_bytes > EDIT_UNDO_MAX_BYTES || hist_entries > EDIT_UNDO_MAX_ENTRIES)
		hist_drop_oldest();
	return 0;
}

/* Take the newest entry of h off its stack; h goes when it was the last.
 * Returns how many are left. */
static int hist_pop(struct hist_file *h)
{
	struct hist_entry *x = h->top;
	h->top = x->older;
	hist_entry_free(x);
	int left = --h->depth;
	if (!left)
		hist_file_drop(h);
	return left;
}

/* ================================================================ answers */

static void emit_edit(const struct edit_req *r, const char *command, const char *content,
		      cJSON *ex)
{
	if (!ex)
		ex = cJSON_CreateObject();
	buf_t shown = {0};
	files_put_path(&shown, r->path);
	cJSON_AddStringToObject(ex, "command", command);
	cJSON_AddStringToObject(ex, "path", shown.p);
	buf_free(&shown);
	events_emit(r->a->conn, r->a->id, "edit", content, ex);
}

/* At most EDIT_SHOW_MAX characters of s, cut at a character boundary. */
static void put_quoted(buf_t *b, const char *s, size_t n)
{
	size_t chars = utf8_count(s, n);
	if (chars <= EDIT_SHOW_MAX) {
		buf_put_utf8(b, s, n);
		return;
	}
	buf_put_utf8(b, s, utf8_offset(s, n, EDIT_SHOW_MAX));
	buf_printf(b, "[... %zu more characters]", chars - EDIT_SHOW_MAX);
}

/* Append lines from..to (1-based, inclusive) of t `cat -n` style: the
 * number right-aligned in 6 columns, a TAB, the line without its line
 * ending; lines joined with "\n". */
static void put_numbered(buf_t *b, const char *t, size_t n, size_t from, size_t to)
{
	size_t off = fsio_line_offset(t, n, from);
	for (size_t ln = from; ln <= to && off < n; ln++) {
		const char *nl = memchr(t + off, '\n', n - off);
		size_t end = nl ? (size_t)(nl - t) : n;
		size_t len = end - off;
		if (len && t[off + len - 1] == '\r')
			len--;
		if (ln > from)
			buf_putc(b, '\n');
		buf_printf(b, "%6zu\t", ln);
		buf_append(b, t + off, len);
		off = end + 1;
	}
}

static void put_snippet(buf_t *b, const char *path, const char *t, size_t n, size_t first,
			size_t last)
{
	size_t total = fsio_count_lines(t, n);
	size_t from = first > EDIT_SNIPPET_CONTEXT ? first - EDIT_SNIPPET_CONTEXT : 1;
	size_t to = last + EDIT_SNIPPET_CONTEXT;
	if (to > total)
		to = total;
	buf_puts(b, "The file ");
	files_put_path(b, path);
	buf_puts(b, " has been edited. Here's the result of running `cat -n` on a snippet of ");
	files_put_path(b, path);
	buf_puts(b, ":\n");
	put_numbered(b, t, n, from, to);
	buf_puts(b, "\nReview the changes and make sure they are as expected. Edit the file again if necessary.");
}

/* ============================================================ shared steps */

/* Load the file an edit changes: a regular UTF-8 text file. */
static enum fsio_status edit_load(const char *path, buf_t *data, struct stat *st, buf_t *msg)
{
	enum fsio_status fs = fsio_load(path, FSIO_MAX_BYTES, data, st, msg);
	if (fs != FSIO_OK)
		return fs;
	return fsio_check_text(path, data->p, data->len, "; edit works on text files only", msg);
}

/* Write the edited text keeping the file's mode (through a symlink to
 * the file it points to), and record the old text under `path` for
 * undo_edit. */
static enum fsio_status edit_commit(const char *path, const buf_t *old, int existed,
				    const struct stat *st, const char *text, size_t len,
				    int parents, char after[65], buf_t *msg)
{
	mode_t mode = existed ? (st->st_mode & 07777) : FSIO_DEFAULT_MODE;
	char *real = existed ? realpath(path, NULL) : NULL;
	enum fsio_status fs = fsio_atomic_write(real ? real : path, text, len, mode,
						existed ? st : NULL, parents, msg);
	free(real);
	if (fs != FSIO_OK)
		return fs;
	fsio_sha256_hex(text, len, after);
	if (hist_push(path, existed, mode, old->p, old->len, after) < 0)
		log_warn("edit: previous content of %s too large to keep for undo_edit", path);
	return FSIO_OK;
}

/* =================================================================== view */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Folder listing for view: entries two levels deep, hidden ones left out,
 * each folder followed by its own entries, names sorted, folders with a
 * trailing '/'. */
static void list_dir(buf_t *b, const char *dir, int depth, size_t *count)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			names = xrealloc(names, cap * sizeof *names);
		}
		names[n++] = xstrdup(de->d_name);
	}
	if (n > 1)
		qsort(names, n, sizeof *names, cmp_str);
	int dfd = dirfd(d);
	for (size_t i = 0; i < n; i++) {
		if (*count >= EDIT_LIST_MAX) {
			if (*count == EDIT_LIST_MAX)
				buf_printf(b, "[... the listing stops at %d entries ...]\n", EDIT_LIST_MAX);
			(*count)++;
			break;
		}
		struct stat st;
		int is_dir = 0, is_link = 0;
		if (fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) == 0) {
			is_link = S_ISLNK(st.st_mode);
			is_dir = S_ISDIR(st.st_mode);
			if (is_link && fstatat(dfd, names[i], &st, 0) == 0)
				is_dir = S_ISDIR(st.st_mode);
		}
		buf_t full = {0};
		buf_puts(&full, dir);
		if (strcmp(dir, "/") != 0)
			buf_putc(&full, '/');
		buf_puts(&full, names[i]);
		buf_put_utf8(b, full.p, full.len);
		buf_puts(b, is_dir ? "/\n" : "\n");
		(*count)++;
		if (is_dir && !is_link && depth < 2)
			list_dir(b, full.p, depth + 1, count);
		buf_free(&full);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	closedir(d);
}

/* view_range: absent or null (0), or [start, end] of integers (1); -1 with
 * the error answered. */
static int view_range(const struct edit_req *r, long long *from, long long *to)
{
	const cJSON *vr = arg_json(r->a, "view_range");
	if (!vr)
		return 0;
	if (!cJSON_IsArray(vr) || cJSON_GetArraySize(vr) != 2 ||
	    !cJSON_IsNumber(cJSON_GetArrayItem(vr, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(vr, 1))) {
		files_error(r->a, TD_ERR_BAD_REQUEST,
			    "'view_range' must be [start, end] (end -1 = to the end)", NULL);
		return -1;
	}
	double a = cJSON_GetArrayItem(vr, 0)->valuedouble, b = cJSON_GetArrayItem(vr, 1)->valuedouble;
	if (a != floor(a) || b != floor(b) || fabs(a) > 1e15 || fabs(b) > 1e15) {
		files_error(r->a, TD_ERR_BAD_REQUEST, "'view_range' must hold two integers", NULL);
		return -1;
	}
	*from = (long long)a;
	*to = (long long)b;
	return 1;
}

static void view_folder(const struct edit_req *r)
{
	buf_t out = {0};
	DIR *d = opendir(r->path);
	if (!d) {
		enum fsio_status fs = fsio_errno(&out, errno, "cannot list", r->path);
		files_error(r->a, fsio_td_err(fs), out.p, NULL);
		buf_free(&out);
		return;
	}
	closedir(d);
	size_t count = 0;
	list_dir(&out, r->path, 1, &count);
	if (out.len && out.p[out.len - 1] == '\n')
		out.p[--out.len] = 0;
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddBoolToObject(ex, "is_directory", 1);
	cJSON_AddNumberToObject(ex, "entries", (double)(count > EDIT_LIST_MAX ? EDIT_LIST_MAX : count));
	emit_edit(r, "view", out.p ? out.p : "", ex);
	buf_free(&out);
}

static void edit_view(const struct edit_req *r)
{
	long long from = 1, to = -1;
	int has_range = view_range(r, &from, &to);
	if (has_range < 0)
		return;
	buf_t data = {0}, out = {0}, msg = {0};
	struct stat st;
	enum fsio_status fs;
	if (stat(r->path, &st) != 0) {
		fs = fsio_errno(&msg, errno, "cannot view", r->path);
		goto fail;
	}
	if (S_ISDIR(st.st_mode)) {
		if (has_range)
			files_error(r->a, TD_ERR_BAD_REQUEST,
				    "'view_range' is for files, not directories", NULL);
		else
			view_folder(r);
		return;
	}
	fs = fsio_load(r->path, FSIO_MAX_BYTES, &data, &st, &msg);
	if (fs == FSIO_OK)
		fs = fsio_check_text(r->path, data.p, data.len,
				     "; read it with `read` and encoding \"base64\"", &msg);
	if (fs != FSIO_OK)
		goto fail;
	size_t total = fsio_count_lines(data.p, data.len);
	if (has_range &&
	    (from < 1 || (size_t)from > total || (to != -1 && (to < from || (size_t)to > total)))) {
		buf_printf(&msg, "invalid view_range [%lld, %lld]: ", from, to);
		files_put_path(&msg, r->path);
		buf_printf(&msg, " has %zu lines; start must be in [1, %zu] and end -1 or in [start, %zu]",
			   total, total, total);
		files_error(r->a, TD_ERR_BAD_REQUEST, msg.p, NULL);
		goto done;
	}
	size_t last = to == -1 ? total : (size_t)to;
	put_numbered(&out, data.p, data.len, (size_t)from, last);
	if (out.len > FILES_MAX_REPLY) {
		fs = fsio_too_large(&msg, r->path, "the numbered view", FILES_MAX_REPLY);
		goto fail;
	}
	char hex[65];
	fsio_sha256_hex(data.p, data.len, hex);
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddNumberToObject(ex, "total_lines", (double)total);
	cJSON_AddNumberToObject(ex, "start", total ? (double)from : 0);
	cJSON_AddNumberToObject(ex, "end", (double)last);
	cJSON_AddStringToObject(ex, "sha256", hex);
	buf_free(&data);
	emit_edit(r, "view", out.p ? out.p : "", ex);
	goto done;
fail:
	files_error(r->a, fsio_td_err(fs), msg.p, NULL);
done:
	buf_free(&msg);
	buf_free(&data);
	buf_free(&out);
}

/* ================================================================= create */

static void edit_create(const struct edit_req *r)
{
	const char *text = NULL;
	if (arg_string(r->a, "file_text", &text, 1) < 0)
		return;
	buf_t old = {0}, msg = {0};
	struct stat st;
	int exists;
	enum fsio_status fs;
	if (fsio_names_folder(r->path_arg)) {
		files_put_path(&msg, r->path);
		buf_puts(&msg, "/ names a folder; create needs a file path");
		files_error(r->a, TD_ERR_IS_DIRECTORY, msg.p, NULL);
		goto done;
	}
	char *target = xstrdup(r->path);
	fs = fsio_write_target(&target, &st, &exists, &msg);
	free(target);
	if (fs != FSIO_OK)
		goto fail;
	if (exists && (fs = fsio_load(r->path, FSIO_MAX_BYTES, &old, &st, &msg)) != FSIO_OK)
		goto fail;
	char after[65];
	size_t len = strlen(text);
	if (len > FSIO_MAX_BYTES) {
		fs = fsio_too_large(&msg, r->path, "file_text", FSIO_MAX_BYTES);
		goto fail;
	}
	if ((fs = edit_commit(r->path, &old, exists, &st, text, len, 1, after, &msg)) != FSIO_OK)
		goto fail;
	buf_puts(&msg, exists ? "File overwritten successfully at: " : "File created successfully at: ");
	files_put_path(&msg, r->path);
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "sha256", after);
	cJSON_AddBoolToObject(ex, "created", !exists);
	emit_edit(r, "create", msg.p, ex);
	goto done;
fail:
	files_error(r->a, fsio_td_err(fs), msg.p, NULL);
done:
	buf_free(&msg);
	buf_free(&old);
}

/* The end of str_replace and insert: the edited text written (the old
 * one kept for undo_edit) and answered with a snippet of lines
 * first..last. FSIO_OK once answered; otherwise msg says why. */
static enum fsio_status edit_write_and_answer(const struct edit_req *r, const char *command,
					      const buf_t *old, const struct stat *st,
					      const buf_t *text, size_t first, size_t last,
					      buf_t *msg)
{
	if (text->len > FSIO_MAX_BYTES)
		return fsio_too_large(msg, r->path, "the edited file", FSIO_MAX_BYTES);
	char after[65];
	enum fsio_status fs = edit_commit(r->path, old, 1, st, text->p, text->len, 0, after, msg);
	if (fs != FSIO_OK)
		return fs;
	buf_reset(msg);
	put_snippet(msg, r->path, text->p, text->len, first, last);
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "sha256", after);
	cJSON_AddNumberToObject(ex, "line", (double)first);
	emit_edit(r, command, msg->p, ex);
	return FSIO_OK;
}

/* ============================================================ str_replace */

/* Occurrences of needle in hay, overlapping ones included; the first
 * `max` offsets go to offs. */
static size_t find_all(const char *hay, size_t n, const char *needle, size_t m, size_t *offs,
		       size_t max)
{
	size_t count = 0, off = 0;
	while (off + m <= n) {
		const char *p = memmem(hay + off, n - off, needle, m);
		if (!p)
			break;
		size_t at = (size_t)(p - hay);
		if (count < max)
			offs[count] = at;
		count++;
		off = at + 1;
	}
	return count;
}

/* s with every "\n" not preceded by "\r" turned into "\r\n". */
static char *to_crlf(const char *s, size_t n, size_t *outlen)
{
	buf_t b = {0};
	buf_reserve(&b, n + 16);
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\n' && (i == 0 || s[i - 1] != '\r'))
			buf_putc(&b, '\r');
		buf_putc(&b, s[i]);
	}
	*outlen = b.len;
	return buf_steal(&b);
}

/* Does the file use CRLF line endings (its first line ends with one)? */
static int uses_crlf(const char *t, size_t n)
{
	const char *nl = memchr(t, '\n', n);
	return nl && nl > t && nl[-1] == '\r';
}

static size_t line_of(const char *t, size_t off)
{
	size_t line = 1;
	for (const char *p = t; (p = memchr(p, '\n', (size_t)(t + off - p))); p++)
		line++;
	return line;
}

static size_t count_nl(const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += s[i] == '\n';
	return k;
}

/* old_str found `count` times (not once): answer mismatch with the lines
 * of the first EDIT_LINES_LISTED occurrences. */
static void replace_mismatch(const struct edit_req *r, const char *old_arg, const char *data,
			     const size_t *offs, size_t count)
{
	buf_t msg = {0};
	cJSON *ex = cJSON_CreateObject();
	if (count == 0) {
		buf_puts(&msg, "No replacement was performed, old_str `");
		put_quoted(&msg, old_arg, strlen(old_arg));
		buf_puts(&msg, "` did not appear verbatim in ");
		files_put_path(&msg, r->path);
		buf_putc(&msg, '.');
	} else {
		cJSON *ls = cJSON_CreateArray();
		buf_printf(&msg, "No replacement was performed: old_str occurs %zu times in ", count);
		files_put_path(&msg, r->path);
		buf_puts(&msg, ", in lines ");
		size_t listed = count < EDIT_LINES_LISTED ? count : EDIT_LINES_LISTED;
		for (size_t i = 0; i < listed; i++) {
			size_t ln = line_of(data, offs[i]);
			buf_printf(&msg, "%s%zu", i ? ", " : "", ln);
			cJSON_AddItemToArray(ls, cJSON_CreateNumber((double)ln));
		}
		if (count > listed)
			buf_puts(&msg, ", ...");
		buf_puts(&msg, ". It must occur exactly once: include more surrounding text to make it unique. old_str: `");
		put_quoted(&msg, old_arg, strlen(old_arg));
		buf_putc(&msg, '`');
		cJSON_AddItemToObject(ex, "lines", ls);
	}
	cJSON_AddNumberToObject(ex, "occurrences", (double)count);
	files_error(r->a, TD_ERR_MISMATCH, msg.p, ex);
	buf_free(&msg);
}

static void edit_str_replace(const struct edit_req *r)
{
	const char *old_arg = NULL, *new_arg = "";
	if (arg_string(r->a, "old_str", &old_arg, 1) < 0 ||
	    arg_string(r->a, "new_str", &new_arg, 0) < 0)
		return;
	if (!new_arg)
		new_arg = "";
	if (!old_arg[0]) {
		files_error(r->a, TD_ERR_BAD_REQUEST, "'old_str' must not be empty", NULL);
		return;
	}
	buf_t data = {0}, text = {0}, msg = {0};
	char *conv_old = NULL, *conv_new = NULL;
	struct stat st;
	enum fsio_status fs;
	if ((fs = edit_load(r->path, &data, &st, &msg)) != FSIO_OK)
		goto fail;
	const char *old_s = old_arg, *new_s = new_arg;
	size_t old_n = strlen(old_arg), new_n = strlen(new_arg);
	size_t offs[EDIT_LINES_LISTED];
	size_t count = find_all(data.p, data.len, old_s, old_n, offs, EDIT_LINES_LISTED);
	if (count == 0 && uses_crlf(data.p, data.len) && memchr(old_s, '\n', old_n) &&
	    !memchr(old_s, '\r', old_n)) {
		/* the text came with "\n" line endings for a CRLF file: match it
		 * with the file's own, and keep them in the replacement */
		conv_old = to_crlf(old_s, old_n, &old_n);
		conv_new = to_crlf(new_s, new_n, &new_n);
		old_s = conv_old;
		new_s = conv_new;
		count = find_all(data.p, data.len, old_s, old_n, offs, EDIT_LINES_LISTED);
	}
	if (count != 1) {
		replace_mismatch(r, old_arg, data.p, offs, count);
		goto done;
	}
	size_t at = offs[0];
	buf_reserve(&text, data.len - old_n + new_n);
	buf_append(&text, data.p, at);
	buf_append(&text, new_s, new_n);
	buf_append(&text, data.p + at + old_n, data.len - at - old_n);
	size_t first = line_of(text.p, at);
	if ((fs = edit_write_and_answer(r, "str_replace", &data, &st, &text, first,
					first + count_nl(new_s, new_n), &msg)) == FSIO_OK)
		goto done;
fail:
	files_error(r->a, fsio_td_err(fs), msg.p, NULL);
done:
	buf_free(&msg);
	buf_free(&data);
	buf_free(&text);
	free(conv_old);
	free(conv_new);
}

/* ================================================================= insert */

/* The text insert puts at line `line` of data (total lines): new_str with
 * the file's line endings, ending with one unless it goes after a last
 * line that has none. *at: the byte offset it goes to. */
static void insert_text(const buf_t *data, size_t line, size_t total, const char *new_arg,
			buf_t *ins, size_t *at)
{
	int crlf = uses_crlf(data->p, data->len);
	const char *eol = crlf ? "\r\n" : "\n";
	size_t new_n = strlen(new_arg);
	if (crlf) {
		size_t n;
		char *conv = to_crlf(new_arg, new_n, &n);
		buf_append(ins, conv, n);
		free(conv);
	} else {
		buf_append(ins, new_arg, new_n);
	}
	int no_final_nl = data->len && data->p[data->len - 1] != '\n';
	if (line == total && no_final_nl) {
		/* after a last line without a line ending: it gets one, the
		 * inserted text ends the file without one, as before */
		*at = data->len;
		buf_t t = {0};
		buf_puts(&t, eol);
		size_t n = ins->len;
		if (n && ins->p[n - 1] == '\n')
			n -= (n > 1 && ins->p[n - 2] == '\r') ? 2 : 1;
		buf_append(&t, ins->p, n);
		buf_free(ins);
		*ins = t;
	} else {
		*at = fsio_line_offset(data->p, data->len, line + 1);
		if (!ins->len || ins->p[ins->len - 1] != '\n')
			buf_puts(ins, eol);
	}
}

static void edit_insert(const struct edit_req *r)
{
	long long line = 0;
	int has_line = 0;
	const char *new_arg = NULL;
	if (arg_int(r->a, "insert_line", &line, &has_line) < 0 ||
	    arg_string(r->a, "new_str", &new_arg, 1) < 0)
		return;
	if (!has_line) {
		files_error(r->a, TD_ERR_BAD_REQUEST, "missing argument 'insert_line'", NULL);
		return;
	}
	buf_t data = {0}, text = {0}, ins = {0}, msg = {0};
	struct stat st;
	enum fsio_status fs;
	if ((fs = edit_load(r->path, &data, &st, &msg)) != FSIO_OK)
		goto fail;
	size_t total = fsio_count_lines(data.p, data.len);
	if (line < 0 || (size_t)line > total) {
		buf_printf(&msg, "invalid insert_line %lld: ", line);
		files_put_path(&msg, r->path);
		buf_printf(&msg, " has %zu lines; insert_line must be in [0, %zu]", total, total);
		files_error(r->a, TD_ERR_BAD_REQUEST, msg.p, NULL);
		goto done;
	}
	size_t at;
	insert_text(&data, (size_t)line, total, new_arg, &ins, &at);
	buf_append(&text, data.p, at);
	buf_append(&text, ins.p, ins.len);
	buf_append(&text, data.p + at, data.len - at);
	size_t first = (size_t)line + 1;
	size_t added = fsio_count_lines(new_arg, strlen(new_arg));
	if ((fs = edit_write_and_answer(r, "insert", &data, &st, &text, first,
					first + (added ? added - 1 : 0), &msg)) == FSIO_OK)
		goto done;
fail:
	files_error(r->a, fsio_td_err(fs), msg.p, NULL);
done:
	buf_free(&msg);
	buf_free(&data);
	buf_free(&text);
	buf_free(&ins);
}

/* ============================================================== undo_edit */

/* Put the content of x back at path (its symlink's target if one), or
 * remove the file when it did not exist before. */
static enum fsio_status undo_restore(const char *path, const struct hist_entry *x, buf_t *msg)
{
	char *real = realpath(path, NULL);
	const char *target = real ? real : path;
	struct stat st;
	enum fsio_status fs = FSIO_OK;
	if (stat(target, &st) != 0)
		fs = fsio_errno(msg, errno, "cannot stat", target);
	else if (x->existed)
		fs = fsio_atomic_write(target, x->data ? x->data : "", x->len, st.st_mode & 07777, &st,
				       0, msg);
	else if (unlink(target) != 0)
		fs = fsio_errno(msg, errno, "cannot remove", target);
	free(real);
	return fs;
}

static void edit_undo(const struct edit_req *r)
{
	buf_t msg = {0};
	struct hist_file *h = hist_find(r->path, 0);
	if (!h) {
		/* nothing to undo: an expectation that did not hold (§4) */
		buf_puts(&msg, "No edit history for ");
		files_put_path(&msg, r->path);
		files_error(r->a, TD_ERR_MISMATCH, msg.p, NULL);
		buf_free(&msg);
		return;
	}
	struct hist_entry *x = h->top;
	struct stat st;
	int exists = lstat(r->path, &st) == 0;
	char cur[65] = "";
	enum fsio_status fs = FSIO_OK;
	if (exists && (fs = fsio_hash_file(r->path, cur, &msg)) != FSIO_OK)
		goto fail;
	if (!exists || strcmp(cur, x->after) != 0) {
		files_put_path(&msg, r->path);
		buf_puts(&msg, exists ? " has been changed since the last edit"
				      : " has been removed since the last edit");
		buf_puts(&msg, " (not by `edit`); undoing would lose that change, so nothing was undone");
		files_error(r->a, TD_ERR_MISMATCH, msg.p, NULL);
		goto done;
	}
	if ((fs = undo_restore(r->path, x, &msg)) != FSIO_OK)
		goto fail;
	int existed = x->existed;
	int left = hist_pop(h);
	buf_puts(&msg, "Last edit to ");
	files_put_path(&msg, r->path);
	buf_puts(&msg, " undone successfully.");
	if (!existed)
		buf_puts(&msg, " The file did not exist before that edit and has been removed.");
	if (left)
		buf_printf(&msg, " %d earlier edit%s can still be undone.", left, left == 1 ? "" : "s");
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddNumberToObject(ex, "undo_left", left);
	cJSON_AddBoolToObject(ex, "removed", !existed);
	emit_edit(r, "undo_edit", msg.p, ex);
	goto done;
fail:
	files_error(r->a, fsio_td_err(fs), msg.p, NULL);
done:
	buf_free(&msg);
}

/* ================================================================= action */

static const struct edit_command {
	const char *name;
	void (*fn)(const struct edit_req *r);
} edit_commands[] = {
	{"view", edit_view},
	{"create", edit_create},
	{"str_replace", edit_str_replace},
	{"insert", edit_insert},
	{"undo_edit", edit_undo},
};

#define EDIT_NCOMMANDS (sizeof edit_commands / sizeof edit_commands[0])

static int edit_action(struct act *a)
{
	const char *command = NULL, *path_arg = NULL;
	if (arg_string(a, "command", &command, 1) < 0 ||
	    arg_string(a, "path", &path_arg, 1) < 0)
		return -1;
	const struct edit_command *cmd = NULL;
	for (size_t i = 0; i < EDIT_NCOMMANDS; i++)
		if (strcmp(command, edit_commands[i].name) == 0)
			cmd = &edit_commands[i];
	if (!cmd) {
		buf_t msg = {0};
		buf_puts(&msg, "'command' must be one of ");
		for (size_t i = 0; i < EDIT_NCOMMANDS; i++)
			buf_printf(&msg, "%s%s", i ? ", " : "", edit_commands[i].name);
		files_error(a, TD_ERR_BAD_REQUEST, msg.p, NULL);
		buf_free(&msg);
		return -1;
	}
	char *path = files_resolve(path_arg);
	if (!path) {
		files_error(a, TD_ERR_BAD_REQUEST, "argument 'path' is empty", NULL);
		return -1;
	}
	struct edit_req r = {.a = a, .path_arg = path_arg, .path = path};
	cmd->fn(&r);
	free(path);
	return a->failed ? -1 : 0;
}

void edit_register(void)
{
	static const struct action_def defs[] = {
		{"edit", edit_action, ACT_FILEWORK | ACT_SERIAL},
	};
	actions_register(defs, sizeof defs / sizeof defs[0]);
}
