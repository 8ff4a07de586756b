/* fs.c — envd's filesystem.Filesystem (Stat, MakeDir, Move, Remove;
 * ListDir is listdir.c's) translated onto termd's file actions (file.stat,
 * file.mkdir, file.move, file.remove: so they are on the event stream)
 * with EntryInfo as envd fills it (metadata from user.e2b.*
 * extended attributes), and the REST routes GET /files (a file's bytes,
 * gzip when accepted) and POST /files (multipart/form-data or
 * application/octet-stream, gzip or not; the X-Metadata-<key> headers,
 * folded by the front into X-Termd-Metadata, kept as user.e2b.<key>:
 * meta.c) with envd's JSON errors. Paths are made absolute
 * against the request's user's home; what it creates belongs to that user
 * when termd is root. */
#include "envd.h"
#include "fsio.h"


#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <zlib.h>

char *envd_path(const char *path)
{
	if (!path)
		return NULL;
	const char *home = envd_cur.home[0] == '/' ? envd_cur.home : opts.cwd;
	return fsio_resolve(home, path[0] ? path : ".");
}

/* what a file action's error names (extras.errno, else its code), as a
 * Connect error */
static enum envd_code action_code(const cJSON *ans)
{
	const cJSON *ex = envd_field(ans, "extras", NULL);
	const char *e = envd_str(ex, "errno", NULL), *code = envd_str(ex, "code", NULL);
	static const struct {
		const char *name;
		enum envd_code code;
	} map[] = {
		{"ENOENT", EC_NOT_FOUND}, {"ENOTDIR", EC_NOT_FOUND}, {"EACCES", EC_PERMISSION_DENIED},
		{"EPERM", EC_PERMISSION_DENIED}, {"EROFS", EC_PERMISSION_DENIED},
		{"ENOSPC", EC_RESOURCE_EXHAUSTED},
		{"EDQUOT", EC_RESOURCE_EXHAUSTED},
		{"EMFILE", EC_RESOURCE_EXHAUSTED}, {"ENFILE", EC_RESOURCE_EXHAUSTED},
		{"ENOMEM", EC_RESOURCE_EXHAUSTED},
	};
	if (code && strcmp(code, "bad_request") == 0)   /* what it was asked is wrong */
		return e && strcmp(e, "EEXIST") == 0 ? EC_ALREADY_EXISTS : EC_INVALID_ARGUMENT;
	for (size_t i = 0; e && i < sizeof map / sizeof map[0]; i++)
		if (strcmp(map[i].name, e) == 0)
			return map[i].code;
	if (code && strcmp(code, "not_found") == 0)
		return EC_NOT_FOUND;
	return EC_INTERNAL;
}

/* a file action's answer is its observation: 1; else the call is
 * answered with the error it names: 0 */
int envd_action_ok(struct envd_call *c, const cJSON *ans, const char *name)
{
	const char *o = envd_str(ans, "observation", NULL);
	if (o && strcmp(o, name) == 0)
		return 1;
	envd_fail(c, ans ? action_code(ans) : EC_INTERNAL, "%s",
		  envd_str(ans, "content", "no answer"));
	return 0;
}

/* e's string key, else def (envd_str's third argument is another name) */
static const char *str_or(const cJSON *e, const char *key, const char *def)
{
	const char *v = envd_str(e, key, NULL);
	return v ? v : def;
}

static const char *file_type(const char *type)
{
	return strcmp(type, "directory") == 0 ? "FILE_TYPE_DIRECTORY" :
	       strcmp(type, "file") == 0 ? "FILE_TYPE_FILE" : "FILE_TYPE_UNSPECIFIED";
}

/* EntryInfo from a file action's entry, as envd's GetEntryInfo fills it:
 * mode is the permission bits only (Go's FileMode.Perm()); a symlink is
 * never FILE_TYPE_SYMLINK but what it leads to (its type, its permission
 * bits, its metadata) with symlinkTarget where it leads (resolved,
 * absolute); a dangling one is FILE_TYPE_UNSPECIFIED, mode 0, its own
 * path as symlinkTarget. Size, permissions, owner and time are the
 * link's own, as envd's (it describes the link's Lstat). */
cJSON *envd_entry_of(const cJSON *e)
{
	if (!e)
		return NULL;
	cJSON *o = cJSON_CreateObject();
	const char *type = str_or(e, "type", "file");
	const char *path = str_or(e, "path", "");
	const cJSON *meta = envd_field(e, "metadata", NULL);   /* read by the worker */
	const char *target = NULL;
	double size = 0, mode = 0;
	envd_num(e, "size", NULL, &size);
	envd_num(e, "mode", NULL, &mode);
	if (strcmp(type, "symlink") == 0) {
		const cJSON *to = envd_field(e, "target", NULL);
		target = to ? str_or(e, "symlink_target", path) : path;
		type = to ? str_or(to, "type", "other") : "other";
		mode = 0;
		if (to)
			envd_num(to, "mode", NULL, &mode);
		meta = envd_field(to, "metadata", NULL);
	}
	cJSON_AddStringToObject(o, "name", str_or(e, "name", ""));
	cJSON_AddStringToObject(o, "type", file_type(type));
	cJSON_AddStringToObject(o, "path", path);
	char num[32];
	snprintf(num, sizeof num, "%.0f", size);   /* int64 as a string */
	cJSON_AddStringToObject(o, "size", num);
	cJSON_AddNumberToObject(o, "mode", (double)((unsigned)mode & 0777));
	cJSON_AddStringToObject(o, "permissions", str_or(e, "permissions", ""));
	cJSON_AddStringToObject(o, "owner", str_or(e, "owner", ""));
	cJSON_AddStringToObject(o, "group", str_or(e, "group", ""));
	cJSON_AddStringToObject(o, "modifiedTime", str_or(e, "modified", ""));
	if (target)
		cJSON_AddStringToObject(o, "symlinkTarget", target);
	if (cJSON_IsObject(meta))
		cJSON_AddItemToObject(o, "metadata", cJSON_Duplicate(meta, 1));
	return o;
}

/* (WatchDir's entries: described on the loop with termd's own ids, not
 * the user's, so a link's target's metadata, which a link the user made
 * could point anywhere for, is left out) */
cJSON *envd_entry_info(const char *path)
{
	cJSON *e = fsops_entry(path);
	cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "target"),
						"metadata");
	cJSON *o = envd_entry_of(e);
	cJSON_Delete(e);
	return o;
}

/* the request's path field, resolved, as a file action's argument; -1
 * once it answered */
int envd_path_into(struct envd_call *c, const char *key, cJSON *args, const char *as)
{
	const char *p = envd_str(c->req, key, NULL);
	if (!p) {
		envd_fail(c, EC_INVALID_ARGUMENT, "%s is required", key);
		return -1;
	}
	char *path = envd_path(p);
	cJSON_AddStringToObject(args, as, path);
	free(path);
	return 0;
}

/* {entry} from an answer's extras.entry */
static void reply_entry(struct envd_call *c, const cJSON *ans)
{
	cJSON *m = cJSON_CreateObject();
	cJSON_AddItemToObject(m, "entry", envd_entry_of(envd_field(envd_field(ans, "extras", NULL),
								 "entry", NULL)));
	envd_reply(c, m);
}

/* Stat, MakeDir, Move: an entry (what the worker made is the user's own:
 * it made it with the user's ids) */
static void entry_answered(struct envd_call *c, const cJSON *ans)
{
	const char *o = envd_str(ans, "observation", NULL);
	if (o && strncmp(o, "file.", 5) == 0 && strcmp(o, "file.list") != 0)
		reply_entry(c, ans);
	else
		envd_action_ok(c, ans, "file.stat");
}

static int fs_stat(struct envd_call *c)
{
	cJSON *args = cJSON_CreateObject();
	if (envd_path_into(c, "path", args, "path") < 0) {
		cJSON_Delete(args);
		return 0;
	}
	envd_action_then(c, "file.stat", args, entry_answered);
	return 0;
}

static int fs_make_dir(struct envd_call *c)
{
	cJSON *args = cJSON_CreateObject();
	if (envd_path_into(c, "path", args, "path") < 0) {
		cJSON_Delete(args);
		return 0;
	}
	envd_action_then(c, "file.mkdir", args, entry_answered);
	return 0;
}

static int fs_move(struct envd_call *c)
{
	cJSON *args = cJSON_CreateObject();
	if (envd_path_into(c, "source", args, "source") < 0 ||
	    envd_path_into(c, "destination", args, "destination") < 0) {
		cJSON_Delete(args);
		return 0;
	}
	envd_action_then(c, "file.move", args, entry_answered);
	return 0;
}

static void remove_answered(struct envd_call *c, const cJSON *ans)
{
	const char *o = envd_str(ans, "observation", NULL);
	const char *code = envd_str(envd_field(ans, "extras", NULL), "code", NULL);
	if ((o && strcmp(o, "file.remove") == 0) || (code && strcmp(code, "not_found") == 0))
		envd_reply(c, cJSON_CreateObject());   /* already gone: as os.RemoveAll */
	else
		envd_action_ok(c, ans, "file.remove");
}

static int fs_remove(struct envd_call *c)
{
	const char *p = envd_str(c->req, "path", NULL);
	char *path = p && p[0] ? envd_path(p) : NULL;
	if (!path || strcmp(path, envd_cur.home) == 0 || strcmp(path, "/") == 0) {
		free(path);
		return envd_fail(c, EC_INVALID_ARGUMENT, "termd does not remove %s",
				 p && p[0] ? "the user's home folder or /" : "an empty path (the home folder)");
	}
	cJSON *args = cJSON_CreateObject();
	cJSON_AddStringToObject(args, "path", path);
	free(path);
	cJSON_AddBoolToObject(args, "recursive", 1);
	envd_action_then(c, "file.remove", args, remove_answered);
	return 0;
}

int envd_fs_call(struct envd_call *c, const char *method)
{
	static const struct {
		const char *name;
		int (*fn)(struct envd_call *);
	} methods[] = {
		{"Stat", fs_stat}, {"MakeDir", fs_make_dir}, {"Move", fs_move},
		{"ListDir", envd_list_dir}, {"Remove", fs_remove},
	};
	if (strcmp(method, "WatchDir") == 0)
		return envd_watch_call(c);
	if (strstr(method, "Watcher"))
		return envd_watcher_call(c, method);
	for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
		if (strcmp(methods[i].name, method) == 0) {
			methods[i].fn(c);
			return 0;
		}
	return -2;
}

/* ================================================================ /files */

/* envd's REST error: {"message", "code"} with the status */
static void rest_error(struct http_txn *t, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void rest_error(struct http_txn *t, int status, const char *fmt, ...)
{
	buf_t b = {0};
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(&b, fmt, ap);
	va_end(ap);
	buf_putc(&b, 0);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "message", b.p);
	cJSON_AddNumberToObject(o, "code", status);
	char *s = envd_json_print(o);
	http_answer(t, status, "application/json", s, strlen(s));
	free(s);
	cJSON_Delete(o);
	buf_free(&b);
}

static int errno_status(int e)
{
	switch (e) {
	case ENOENT:
	case ENOTDIR:
		return 404;
	case EACCES:
	case EPERM:
		return 401;
	case ENOSPC:
		return 507;
	default:
		return 500;
	}
}

/* gzip (or gunzip, up to max) data into out: 0, or -1 */
static int gz(int inflate_it, const void *data, size_t len, size_t max, buf_t *out)
{
	z_stream z;
	memset(&z, 0, sizeof z);
	int r = inflate_it ? inflateInit2(&z, 15 + 16)
			   : deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
	if (r != Z_OK)
		return -1;
	z.next_in = (Bytef *)(uintptr_t)data;
	z.avail_in = (uInt)len;
	unsigned char chunk[65536];
	int ok = 0;
	for (;;) {
		z.next_out = chunk;
		z.avail_out = sizeof chunk;
		r = inflate_it ? inflate(&z, Z_NO_FLUSH) : deflate(&z, Z_FINISH);
		buf_append(out, chunk, sizeof chunk - z.avail_out);
		if (r == Z_STREAM_END) {
			ok = !inflate_it || z.avail_in == 0;
			break;
		}
		if ((r != Z_OK && r != Z_BUF_ERROR) || out->len > max ||
		    (r == Z_BUF_ERROR && z.avail_in == 0 && z.avail_out != 0))
			break;
	}
	if (inflate_it)
		inflateEnd(&z);
	else
		deflateEnd(&z);
	return ok && out->len <= max ? 0 : -1;
}

static int accepts_gzip(struct http_txn *t)
{
	char ae[256] = "";
	lws_hdr_copy(t->wsi, ae, sizeof ae, WSI_TOKEN_HTTP_ACCEPT_ENCODING);
	for (char *p = ae; (p = strcasestr(p, "gzip")); p += 4) {
		const char *q = p + 4;
		while (*q == ' ')
			q++;
		/* gzip;q=0 refuses it */
		if (strncmp(q, ";q=0", 4) == 0 && (q[4] == 0 || q[4] == ',' || (q[4] == '.' &&
		    strspn(q + 5, "0") == strcspn(q + 5, ", "))))
			return 0;
		return 1;
	}
	return 0;
}

/* A /files request's file work, done in a worker as the request's user
 * (fswork.c): GET opens the file there (never blocking: a FIFO or a
 * device is refused) and the loop streams it as the socket drains; POST
 * inflates, parses and writes every part there. */
struct fjob {
	struct fsjob job;         /* first */
	struct http_txn *t;       /* NULL once its client left */
	char *path;               /* the query's path, resolved (NULL: none) */
	char *home;               /* relative part names are taken against it */
	char ct[512], ce[64];
	buf_t body;               /* POST: the request body (taken from t) */
	int gzip;                 /* GET: the client takes gzip */
	cJSON *meta;              /* POST: X-Termd-Metadata's {key: value}, or NULL */
	/* the worker's result */
	int status;               /* 0 ok, else the HTTP status of msg */
	buf_t msg;                /* the error, or POST's answer (JSON) */
	int fd;                   /* GET: the open file */
	struct stat st;
	/* GET, streaming */
	z_stream z;
	int zinit, eof;
};

static void fjob_free(struct fjob *f)
{
	if (f->fd >= 0)
		close(f->fd);
	if (f->zinit)
		deflateEnd(&f->z);
	free(f->path);
	free(f->home);
	cJSON_Delete(f->meta);
	buf_free(&f->body);
	buf_free(&f->msg);
	free(f);
}

static void fjob_gone(struct http_txn *t)
{
	struct fjob *f = t->user;
	if (f)
		f->t = NULL;   /* a job still in a worker frees itself when done */
	t->user = NULL;
}

/* the worker's error: status and "<what> '<path>': <errno text>" */
static void fj_fail(struct fjob *f, int status, const char *what, const char *path, int e)
{
	buf_reset(&f->msg);
	buf_printf(&f->msg, "%s '", what);
	buf_put_utf8(&f->msg, path, strlen(path));
	buf_printf(&f->msg, "'%s%s", e ? ": " : "", e ? strerror(e) : "");
	f->status = status;
}

static struct fjob *fjob_new(struct http_txn *t, void (*work)(struct fsjob *),
			     void (*done)(struct fsjob *))
{
	struct fjob *f = xcalloc(1, sizeof *f);
	f->job.cred = envd_cur.cred;
	f->job.work = work;
	f->job.done = done;
	f->t = t;
	f->fd = -1;
	f->home = xstrdup(envd_cur.home[0] == '/' ? envd_cur.home : opts.cwd ? opts.cwd : "/");
	char arg[4096];
	const char *p = http_arg(t, "path=", arg, sizeof arg);
	if (p && p[0])
		f->path = fsio_resolve(f->home, p);
	return f;
}

/* submit f for t: t answers once it is done */
static void fjob_submit(struct http_txn *t, struct fjob *f)
{
	if (fswork_submit(&f->job) < 0) {
		fjob_free(f);
		rest_error(t, 503, "termd has too many file requests waiting; try again");
		return;
	}
	t->user = f;
	t->gone = fjob_gone;
}

/* ---------------------------------------------------------------- GET */

static void get_work(struct fsjob *j)
{
	struct fjob *f = (struct fjob *)j;
	f->fd = fs_open_regular(f->path, &f->st);
	if (f->fd >= 0)
		return;
	int e = errno;
	/* refused to the user: as root for a user who may act as root anyway
	 * (no link followed on the way or at the end: the user's refusal
	 * stands for a path through one) */
	if ((e == EACCES || e == EPERM) && fs_as_root(&j->cred) == 1) {
		int fd = fs_read_beneath(f->path, &f->st);
		if (fs_as_user(&j->cred) != 0 && fd >= 0) {
			close(fd);
			fd = -1;
		}
		if (fd >= 0) {
			f->fd = fd;
			return;
		}
	}
	if (e == EISDIR)
		fj_fail(f, 400, "path", f->path, 0), buf_puts(&f->msg, " is a directory");
	else if (e == EINVAL)
		fj_fail(f, 400, "path", f->path, 0),
			buf_puts(&f->msg, " is not a regular file (a FIFO, a socket or a device)");
	else
		fj_fail(f, errno_status(e), "path", f->path, e);
}

/* the client left while its file streamed */
static void get_stream_gone(struct http_txn *t)
{
	struct fjob *f = t->user;
	t->user = NULL;
	t->drained = NULL;
	if (f)
		fjob_free(f);
}

/* the next slice of the file, as the socket takes it (and gzip'd) */
static void get_pump(struct http_txn *t)
{
	struct fjob *f = t->user;
	if (!f)
		return;
	unsigned char in[65536];
	buf_t out = {0};
	while (!f->eof && out.len < sizeof in) {
		ssize_t n = read(f->fd, in, sizeof in);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			f->eof = 1;   /* an error ends the file where it is */
		if (!f->zinit) {
			if (n > 0)
				buf_append(&out, in, (size_t)n);
			continue;
		}
		f->z.next_in = in;
		f->z.avail_in = n > 0 ? (uInt)n : 0;
		do {
			buf_reserve(&out, 65536);
			f->z.next_out = (Bytef *)out.p + out.len;
			f->z.avail_out = 65536;
			deflate(&f->z, f->eof ? Z_FINISH : Z_NO_FLUSH);
			out.len += 65536 - f->z.avail_out;
		} while (f->z.avail_out == 0);
	}
	/* nothing out yet (a slice that deflated to nothing): flush, so that
	 * a drained call comes back for more */
	if (!out.len && !f->eof && f->zinit) {
		buf_reserve(&out, 65536);
		f->z.next_out = (Bytef *)out.p;
		f->z.avail_out = 65536;
		deflate(&f->z, Z_SYNC_FLUSH);
		out.len = 65536 - f->z.avail_out;
	}
	if (out.len)
		http_stream_write(t, out.p, out.len);
	buf_free(&out);
	if (f->eof) {
		t->user = NULL;
		t->gone = NULL;
		t->drained = NULL;
		fjob_free(f);
		http_stream_end(t);
	}
}

static void get_done(struct fsjob *j)
{
	struct fjob *f = (struct fjob *)j;
	struct http_txn *t = f->t;
	if (j->aborted || !t) {
		if (t)
			t->gone = NULL, t->user = NULL;
		fjob_free(f);
		return;
	}
	if (j->err)
		fj_fail(f, 403, "termd cannot act as the user for", f->path, j->err);
	if (f->status) {
		t->user = NULL;
		t->gone = NULL;
		buf_putc(&f->msg, 0);
		rest_error(t, f->status, "%s", f->msg.p);
		fjob_free(f);
		return;
	}
	const char *slash = strrchr(f->path, '/');
	char disp[1100];
	snprintf(disp, sizeof disp, "inline; filename=\"%.1000s\"", slash ? slash + 1 : f->path);
	t->disposition = xstrdup(disp);
	if (f->gzip && f->st.st_size >= 64 &&
	    deflateInit2(&f->z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK) {
		f->zinit = 1;
		http_set_header(t, "content-encoding", "gzip");
	}
	t->gone = get_stream_gone;
	t->drained = get_pump;
	if (http_stream_start(t, 200, "application/octet-stream") < 0)
		return;   /* too many streams: 429, and get_stream_gone frees f */
	get_pump(t);
}

void envd_files_get(struct http_txn *t)
{
	struct fjob *f = fjob_new(t, get_work, get_done);
	if (!f->path) {
		fjob_free(f);
		rest_error(t, 400, "path= is required");
		return;
	}
	f->gzip = accepts_gzip(t);
	fjob_submit(t, f);
}

/* --------------------------------------------------------------- POST */

/* The kernel refused the user (EACCES/EPERM) the upload's folders or file:
 * when the user may act as root anyway (--user-root-capable, fs_as_root)
 * the thread is root (*rooted set) and the folders are made beneath / one
 * component at a time with no link followed (O_NOFOLLOW: a link anywhere
 * on the way, the user's or not, is refused) and given to the user, and
 * the file is opened the same way (a link there is refused too). Its fd
 * (*created: the caller gives it to the user), or -1 (the refusal
 * stands). */
static int open_as_root(struct fjob *f, const char *path, int *created, int *rooted)
{
	const struct fs_cred *c = &f->job.cred;
	const char *slash = strrchr(path, '/');
	if (path[0] != '/' || !slash || !slash[1] || fs_as_root(c) != 1)
		return -1;
	*rooted = 1;
	int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	char *dir = xstrndup(path + 1, (size_t)(slash - path - 1));
	int dfd = root < 0 ? -1 : fs_dir_beneath_owned(root, dir, 0755, c->uid, c->gid);
	free(dir);
	if (root >= 0)
		close(root);
	if (dfd < 0)
		return -1;
	int fd = fs_write_beneath_new(dfd, slash + 1, 0644, created);
	close(dfd);
	return fd;   /* (made: given to the user by the caller) */
}

static cJSON *write_upload_as(struct fjob *f, const char *path, const char *data, size_t len,
			      int *rooted);

/* write one upload (in the worker, as the user; as root where the kernel
 * refuses the user and the user may act as root anyway); the answer's
 * entry, or NULL with f's error set */
static cJSON *write_upload(struct fjob *f, const char *path, const char *data, size_t len)
{
	int rooted = 0;
	cJSON *o = write_upload_as(f, path, data, len, &rooted);
	if (rooted && fs_as_user(&f->job.cred) != 0) {
		/* the worker restores its own ids after the job; nothing
		 * more of this job runs (the next upload is refused) */
		cJSON_Delete(o);
		fj_fail(f, 500, "termd cannot act as the user again for", path, EPERM);
		return NULL;
	}
	return o;
}

static cJSON *write_upload_as(struct fjob *f, const char *path, const char *data, size_t len,
			      int *rooted)
{
	const char *slash = strrchr(path, '/');
	int created = 0, fd = -1;
	if (slash && slash != path) {
		char *d = xstrndup(path, (size_t)(slash - path));
		int r = fsops_mkdirs(d, 0755, NULL);   /* made as the user: the user's */
		int e = errno;
		free(d);
		if (r != 0 && (e == EACCES || e == EPERM))
			fd = open_as_root(f, path, &created, rooted);
		if (r != 0 && fd < 0) {
			fj_fail(f, errno_status(e), "cannot make the folder of", path, e);
			return NULL;
		}
	}
	/* in place (a watcher sees a write, as envd's); a FIFO, a device or a
	 * folder is refused before anything is truncated */
	if (fd < 0)
		fd = fs_open_write(path, 0644, &created);
	if (fd < 0 && (errno == EACCES || errno == EPERM) && !*rooted) {
		int e = errno;
		fd = open_as_root(f, path, &created, rooted);
		if (fd < 0)
			errno = e;   /* the user's refusal is the answer */
	}
	if (fd < 0) {
		int e = errno;
		if (e == EISDIR)
			fj_fail(f, 400, "path", path, 0), buf_puts(&f->msg, " is a directory");
		else if (e == EINVAL || e == ENXIO)
			fj_fail(f, 400, "path", path, 0),
				buf_puts(&f->msg, " is not a regular file; refusing to write to it");
		else
			fj_fail(f, errno_status(e), "cannot open", path, e);
		return NULL;
	}
	/* envd opens as root, then chowns the file to the user before it
	 * writes: a watcher sees CREATE, CHMOD, WRITE (e2b's SDK tests count
	 * them). termd opened it as the user already; the same chown, to the
	 * user's own ids, gives the same event and changes nothing else */
	if ((!*rooted || created) && fchown(fd, f->job.cred.uid, f->job.cred.gid) < 0) {
		/* a file system without owners (vfat): as envd, nothing to say */
	}
	if (write_all(fd, data, len) < 0) {
		int e = errno;
		close(fd);
		fj_fail(f, errno_status(e), "cannot write", path, e);
		return NULL;
	}
	/* always: an upload without metadata clears what an earlier one left
	 * (O_TRUNC keeps extended attributes); done as the user, on the fd */
	int me = envd_meta_write(fd, f->meta);
	if (me) {
		close(fd);
		fj_fail(f, me == ENOSPC || me == EDQUOT ? 507 : 500,
			"cannot write the metadata (user.e2b.* attributes) of", path, me);
		return NULL;
	}
	cJSON *meta = fsops_metadata(NULL, 0, fd);   /* what the file has now */
	if (close(fd) != 0) {
		cJSON_Delete(meta);
		fj_fail(f, errno_status(errno), "cannot write", path, errno);
		return NULL;
	}
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "path", path);
	cJSON_AddStringToObject(o, "name", slash ? slash + 1 : path);
	cJSON_AddStringToObject(o, "type", "file");
	if (meta)
		cJSON_AddItemToObject(o, "metadata", meta);
	return o;
}

static void post_fail(struct fjob *f, int status, const char *msg)
{
	buf_reset(&f->msg);
	buf_puts(&f->msg, msg);
	f->status = status;
}

static void post_work(struct fsjob *j)
{
	struct fjob *f = (struct fjob *)j;
	const char *body = f->body.p ? f->body.p : "";
	size_t blen = f->body.len;
	buf_t unz = {0};
	if (strcasecmp(f->ce, "gzip") == 0) {
		if (gz(1, body, blen, opts.max_frame, &unz) != 0) {
			post_fail(f, 400, "the gzip body is not gzip, or over --max-frame once inflated");
			buf_free(&unz);
			return;
		}
		buf_putc(&unz, 0);
		unz.len--;
		body = unz.p;
		blen = unz.len;
	} else if (f->ce[0] && strcasecmp(f->ce, "identity") != 0) {
		post_fail(f, 400, "this Content-Encoding is not supported by termd (gzip is)");
		return;
	}
	cJSON *arr = cJSON_CreateArray();
	if (strncasecmp(f->ct, "multipart/form-data", 19) == 0) {
		/* each part named file: the query's path, else the part's filename */
		size_t off = 0, n = 0;
		for (;;) {
			struct mp_part part;
			char err[256];
			if (multipart_find(f->ct, body + off, blen - off, "file", &part, err,
					   sizeof err) != 0) {
				if (n == 0)
					post_fail(f, 400, err);
				break;
			}
			if (n == opts.upload_parts) {
				buf_reset(&f->msg);
				buf_printf(&f->msg, "more than %zu files in one upload (--upload-parts)",
					   opts.upload_parts);
				f->status = 413;
				break;
			}
			const char *target = f->path ? NULL : part.has_filename ? part.filename : NULL;
			if (!f->path && (!target || !*target)) {
				post_fail(f, 400, "no path for the upload (path= or the part's filename)");
				break;
			}
			char *path = f->path ? xstrdup(f->path) : fsio_resolve(f->home, target);
			cJSON *e = write_upload(f, path, part.data, part.len);
			free(path);
			if (!e)
				break;
			cJSON_AddItemToArray(arr, e);
			n++;
			off = (size_t)(part.data + part.len - body);
			if (f->path)
				break;   /* one target path: one file */
		}
	} else if (f->ct[0] == 0 || strncasecmp(f->ct, "application/octet-stream", 24) == 0) {
		cJSON *e = NULL;
		if (!f->path)
			post_fail(f, 400, "path= is required for application/octet-stream");
		else
			e = write_upload(f, f->path, body, blen);
		if (e)
			cJSON_AddItemToArray(arr, e);
	} else {
		post_fail(f, 400, "Content-Type must be multipart/form-data or application/octet-stream");
	}
	if (!f->status) {
		char *js = envd_json_print(arr);   /* path=%FF: U+FFFD */
		buf_reset(&f->msg);
		buf_puts(&f->msg, js);
		free(js);
	}
	cJSON_Delete(arr);
	buf_free(&unz);
	buf_free(&f->body);   /* done with it: not held until the loop runs */
}

static void post_done(struct fsjob *j)
{
	struct fjob *f = (struct fjob *)j;
	struct http_txn *t = f->t;
	if (t) {
		t->user = NULL;
		t->gone = NULL;
	}
	if (!j->aborted && t) {
		buf_putc(&f->msg, 0);
		if (j->err)
			rest_error(t, 403, "termd cannot act as this user: %s", strerror(j->err));
		else if (f->status)
			rest_error(t, f->status, "%s", f->msg.p);
		else
			http_answer(t, 200, "application/json", f->msg.p, strlen(f->msg.p));
	}
	fjob_free(f);
}

void envd_files_post(struct http_txn *t)
{
	struct fjob *f = fjob_new(t, post_work, post_done);
	lws_hdr_copy(t->wsi, f->ct, sizeof f->ct, WSI_TOKEN_HTTP_CONTENT_TYPE);
	lws_hdr_copy(t->wsi, f->ce, sizeof f->ce, WSI_TOKEN_HTTP_CONTENT_ENCODING);
	/* the X-Metadata-<key> headers, folded into one by the front (lws
	 * cannot list headers it does not know); checked before any write.
	 * Only the front's: without it (--front off, a unix --listen) there is
	 * no metadata, as a client's own X-Termd-Metadata is not envd's API */
	int ml = server_via_front(t->wsi) ? lws_hdr_custom_length(t->wsi, "x-termd-metadata:", 17) : -1;
	if (ml >= 0) {
		char *mh = xmalloc((size_t)ml + 1);
		buf_t err = {0};
		mh[0] = 0;
		if (lws_hdr_custom_copy(t->wsi, mh, ml + 1, "x-termd-metadata:", 17) < 0)
			mh[0] = 0;
		f->meta = envd_meta_parse(mh, strlen(mh), &err);
		free(mh);
		if (!f->meta) {
			fjob_free(f);
			rest_error(t, 400, "%s", err.p);
			buf_free(&err);
			return;
		}
	}
	f->body = t->body;   /* the worker's now */
	memset(&t->body, 0, sizeof t->body);
	fjob_submit(t, f);
}
