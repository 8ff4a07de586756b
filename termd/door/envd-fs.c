/* envd-fs.c — envd's filesystem.Filesystem (Stat, MakeDir, Move, ListDir
 * with depth, Remove) translated onto termd's file actions (file.stat,
 * file.mkdir, file.move, file.list, file.remove: so they are on the event
 * stream) with EntryInfo as envd fills it (metadata from user.e2b.*
 * extended attributes), and the REST routes GET /files (a file's bytes,
 * gzip when accepted) and POST /files (multipart/form-data or
 * application/octet-stream, gzip or not; X-Metadata-<key> headers kept as
 * user.e2b.<key>) with envd's JSON errors. Paths are made absolute
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

/* a file action through the action layer (so it is on the event stream);
 * NULL once the call is answered with its error */
static cJSON *fs_action(struct envd_call *c, const char *name, cJSON *args)
{
	cJSON *ans = envd_action(name, args);
	const char *o = envd_str(ans, "observation", NULL);
	if (o && strcmp(o, name) == 0)
		return ans;
	envd_fail(c, ans ? action_code(ans) : EC_INTERNAL, "%s",
		  envd_str(ans, "content", "no answer"));
	cJSON_Delete(ans);
	return NULL;
}

/* user.e2b.<key> extended attributes, as envd keeps X-Metadata-<key> */
static void add_metadata(cJSON *o, const char *path)
{
	char names[4096];
	ssize_t n = llistxattr(path, names, sizeof names);
	cJSON *m = NULL;
	for (ssize_t i = 0; i < n; i += (ssize_t)strlen(names + i) + 1) {
		const char *k = names + i;
		if (strncmp(k, "user.e2b.", 9) != 0)
			continue;
		char v[4096];
		ssize_t vn = lgetxattr(path, k, v, sizeof v - 1);
		if (vn < 0)
			continue;
		v[vn] = 0;
		if (!m)
			m = cJSON_AddObjectToObject(o, "metadata");
		cJSON_AddStringToObject(m, k + 9, v);
	}
}

/* EntryInfo from a file action's entry */
static cJSON *entry_info(const cJSON *e)
{
	if (!e)
		return NULL;
	cJSON *o = cJSON_CreateObject();
	const char *type = envd_str(e, "type", "file");
	cJSON_AddStringToObject(o, "name", envd_str(e, "name", ""));
	cJSON_AddStringToObject(o, "type", strcmp(type, "directory") == 0 ? "FILE_TYPE_DIRECTORY" :
				strcmp(type, "symlink") == 0 ? "FILE_TYPE_SYMLINK" : "FILE_TYPE_FILE");
	const char *path = envd_str(e, "path", "");
	cJSON_AddStringToObject(o, "path", path);
	double size = 0, mode = 0;
	envd_num(e, "size", NULL, &size);
	envd_num(e, "mode", NULL, &mode);
	char num[32];
	snprintf(num, sizeof num, "%.0f", size);   /* int64 as a string */
	cJSON_AddStringToObject(o, "size", num);
	cJSON_AddNumberToObject(o, "mode", mode);
	cJSON_AddStringToObject(o, "permissions", envd_str(e, "permissions", ""));
	cJSON_AddStringToObject(o, "owner", envd_str(e, "owner", ""));
	cJSON_AddStringToObject(o, "group", envd_str(e, "group", ""));
	cJSON_AddStringToObject(o, "modifiedTime", envd_str(e, "modified", ""));
	const char *target = envd_str(e, "symlink_target", NULL);
	if (target)
		cJSON_AddStringToObject(o, "symlinkTarget", target);
	add_metadata(o, path);
	return o;
}

cJSON *envd_entry_info(const char *path)
{
	cJSON *e = fsops_entry(path);
	cJSON *o = entry_info(e);
	cJSON_Delete(e);
	return o;
}

/* folders a file action made belong to the request's user (termd is root) */
static void own_created(const cJSON *ans)
{
	if (envd_cur.self)
		return;
	const cJSON *d;
	cJSON_ArrayForEach(d, envd_field(envd_field(ans, "extras", NULL), "created", NULL)) {
		if (cJSON_IsString(d) && lchown(d->valuestring, envd_cur.uid, envd_cur.gid) != 0)
			log_debug("envd: cannot chown %s", d->valuestring);
	}
}

/* the request's path field, resolved, as a file action's argument; -1
 * once it answered */
static int path_into(struct envd_call *c, const char *key, cJSON *args, const char *as)
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
static void reply_entry(struct envd_call *c, cJSON *ans)
{
	cJSON *m = cJSON_CreateObject();
	cJSON_AddItemToObject(m, "entry", entry_info(envd_field(envd_field(ans, "extras", NULL),
								 "entry", NULL)));
	envd_reply(c, m);
	cJSON_Delete(ans);
}

static int fs_stat(struct envd_call *c)
{
	cJSON *args = cJSON_CreateObject();
	if (path_into(c, "path", args, "path") < 0) {
		cJSON_Delete(args);
		return 0;
	}
	cJSON *ans = fs_action(c, "file.stat", args);
	if (ans)
		reply_entry(c, ans);
	return 0;
}

static int fs_make_dir(struct envd_call *c)
{
	cJSON *args = cJSON_CreateObject();
	if (path_into(c, "path", args, "path") < 0) {
		cJSON_Delete(args);
		return 0;
	}
	cJSON *ans = fs_action(c, "file.mkdir", args);
	if (ans) {
		own_created(ans);
		reply_entry(c, ans);
	}
	return 0;
}

static int fs_move(struct envd_call *c)
{
	cJSON *args = cJSON_CreateObject();
	if (path_into(c, "source", args, "source") < 0 ||
	    path_into(c, "destination", args, "destination") < 0) {
		cJSON_Delete(args);
		return 0;
	}
	cJSON *ans = fs_action(c, "file.move", args);
	if (ans) {
		own_created(ans);
		reply_entry(c, ans);
	}
	return 0;
}

static int fs_list_dir(struct envd_call *c)
{
	double depth = 1;
	if (envd_field(c->req, "depth", NULL) && envd_num(c->req, "depth", NULL, &depth) < 0)
		return envd_fail(c, EC_INVALID_ARGUMENT, "depth must be a number");
	cJSON *args = cJSON_CreateObject();
	if (path_into(c, "path", args, "path") < 0) {
		cJSON_Delete(args);
		return 0;
	}
	cJSON_AddNumberToObject(args, "depth", depth < 1 ? 1 : depth > 64 ? 64 : (int)depth);
	cJSON_AddNumberToObject(args, "max_entries", 1000000);
	cJSON *ans = fs_action(c, "file.list", args);
	if (!ans)
		return 0;
	cJSON *m = cJSON_CreateObject();
	cJSON *arr = cJSON_AddArrayToObject(m, "entries");
	const cJSON *e;
	cJSON_ArrayForEach(e, envd_field(envd_field(ans, "extras", NULL), "entries", NULL))
		cJSON_AddItemToArray(arr, entry_info(e));
	envd_reply(c, m);
	cJSON_Delete(ans);
	return 0;
}

static int fs_remove(struct envd_call *c)
{
	cJSON *args = cJSON_CreateObject();
	if (path_into(c, "path", args, "path") < 0) {
		cJSON_Delete(args);
		return 0;
	}
	cJSON_AddBoolToObject(args, "recursive", 1);
	cJSON *ans = envd_action("file.remove", args);
	const char *o = envd_str(ans, "observation", NULL);
	const char *code = envd_str(envd_field(ans, "extras", NULL), "code", NULL);
	if ((o && strcmp(o, "file.remove") == 0) || (code && strcmp(code, "not_found") == 0))
		envd_reply(c, cJSON_CreateObject());   /* already gone: as os.RemoveAll */
	else
		envd_fail(c, ans ? action_code(ans) : EC_INTERNAL, "%s",
			  envd_str(ans, "content", "no answer"));
	cJSON_Delete(ans);
	return 0;
}

int envd_fs_call(struct envd_call *c, const char *method)
{
	static const struct {
		const char *name;
		int (*fn)(struct envd_call *);
	} methods[] = {
		{"Stat", fs_stat}, {"MakeDir", fs_make_dir}, {"Move", fs_move},
		{"ListDir", fs_list_dir}, {"Remove", fs_remove},
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
	char *s = cJSON_PrintUnformatted(o);
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

void envd_files_get(struct http_txn *t)
{
	char arg[4096];
	const char *p = http_arg(t, "path=", arg, sizeof arg);
	char *path = envd_path(p ? p : "");
	struct stat sb;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rest_error(t, errno_status(errno), "path '%s' does not exist or cannot be read: %s", path,
			   strerror(errno));
	} else if (fstat(fd, &sb) != 0 || S_ISDIR(sb.st_mode)) {
		rest_error(t, 400, "path '%s' is a directory", path);
	} else if ((size_t)sb.st_size > FILES_MAX_REPLY) {
		rest_error(t, 400, "file '%s' is larger than termd sends in one answer", path);
	} else {
		buf_t b = {0};
		char chunk[65536];
		ssize_t n;
		while ((n = read(fd, chunk, sizeof chunk)) > 0 && b.len < FILES_MAX_REPLY)
			buf_append(&b, chunk, (size_t)n);
		if (n < 0) {
			rest_error(t, 500, "cannot read '%s': %s", path, strerror(errno));
		} else {
			const char *slash = strrchr(path, '/');
			char disp[1100];
			snprintf(disp, sizeof disp, "inline; filename=\"%.1000s\"", slash ? slash + 1 : path);
			t->disposition = xstrdup(disp);
			buf_t z = {0};
			if (b.len >= 64 && accepts_gzip(t) &&
			    gz(0, b.p, b.len, (size_t)-1 / 2, &z) == 0) {
				http_set_header(t, "content-encoding", "gzip");
				http_answer(t, 200, "application/octet-stream", z.p, z.len);
			} else {
				http_answer(t, 200, "application/octet-stream", b.p ? b.p : "", b.len);
			}
			buf_free(&z);
		}
		buf_free(&b);
	}
	if (fd >= 0)
		close(fd);
	free(path);
}

/* write one upload; the answer's entry, or NULL after answering an error */
static cJSON *write_upload(struct http_txn *t, const char *path, const char *data, size_t len)
{
	char *slash = strrchr(path, '/');
	if (slash && slash != path) {
		char *d = xstrndup(path, (size_t)(slash - path));
		cJSON *made = cJSON_CreateObject();
		cJSON *created = cJSON_AddArrayToObject(cJSON_AddObjectToObject(made, "extras"), "created");
		int r = fsops_mkdirs(d, 0755, created);
		int e = errno;
		own_created(made);
		cJSON_Delete(made);
		free(d);
		errno = e;
		if (r != 0) {
			rest_error(t, errno_status(errno), "cannot make the folder of '%s': %s", path,
				   strerror(errno));
			return NULL;
		}
	}
	struct stat sb;
	if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		rest_error(t, 400, "path '%s' is a directory", path);
		return NULL;
	}
	/* in place (a watcher sees a write, as envd's) */
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rest_error(t, errno_status(errno), "cannot open '%s': %s", path, strerror(errno));
		return NULL;
	}
	if (!envd_cur.self && fchown(fd, envd_cur.uid, envd_cur.gid) != 0)
		log_debug("envd: cannot chown %s", path);
	size_t off = 0;
	while (off < len) {
		ssize_t w = write(fd, data + off, len - off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			int e = errno;
			close(fd);
			rest_error(t, errno_status(e), "cannot write '%s': %s", path, strerror(e));
			return NULL;
		}
		off += (size_t)w;
	}
	if (close(fd) != 0) {
		rest_error(t, errno_status(errno), "cannot write '%s': %s", path, strerror(errno));
		return NULL;
	}
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "path", path);
	cJSON_AddStringToObject(o, "name", slash ? slash + 1 : path);
	cJSON_AddStringToObject(o, "type", "file");
	return o;
}

static void files_post(struct http_txn *t, buf_t *unzp)
{
	char arg[4096], ct[512] = "", ce[64] = "";
	const char *p = http_arg(t, "path=", arg, sizeof arg);
	lws_hdr_copy(t->wsi, ct, sizeof ct, WSI_TOKEN_HTTP_CONTENT_TYPE);
	lws_hdr_copy(t->wsi, ce, sizeof ce, WSI_TOKEN_HTTP_CONTENT_ENCODING);
	const char *body = t->body.p ? t->body.p : "";
	size_t blen = t->body.len;
	if (strcasecmp(ce, "gzip") == 0) {
		if (gz(1, body, blen, opts.max_frame, unzp) != 0) {
			rest_error(t, 400, "the gzip body is not gzip, or over --max-frame once inflated");
			return;
		}
		buf_putc(unzp, 0);
		unzp->len--;
		body = unzp->p;
		blen = unzp->len;
	} else if (ce[0] && strcasecmp(ce, "identity") != 0) {
		rest_error(t, 400, "Content-Encoding %s is not supported by termd (gzip is)", ce);
		return;
	}
	cJSON *arr = cJSON_CreateArray();
	if (strncasecmp(ct, "multipart/form-data", 19) == 0) {
		/* each part named file: the query's path, else the part's filename */
		size_t off = 0;
		int n = 0;
		for (;;) {
			struct mp_part part;
			char err[256];
			if (multipart_find(ct, body + off, blen - off, "file", &part, err,
					   sizeof err) != 0) {
				if (n == 0) {
					rest_error(t, 400, "%s", err);
					cJSON_Delete(arr);
					return;
				}
				break;
			}
			const char *target = p ? p : part.has_filename ? part.filename : NULL;
			if (!target || !*target) {
				rest_error(t, 400, "no path for the upload (path= or the part's filename)");
				cJSON_Delete(arr);
				return;
			}
			char *path = envd_path(target);
			cJSON *e = write_upload(t, path, part.data, part.len);
			free(path);
			if (!e) {
				cJSON_Delete(arr);
				return;
			}
			cJSON_AddItemToArray(arr, e);
			n++;
			off = (size_t)(part.data + part.len - body);
			if (p)
				break;   /* one target path: one file */
		}
	} else if (ct[0] == 0 || strncasecmp(ct, "application/octet-stream", 24) == 0) {
		if (!p || !*p) {
			rest_error(t, 400, "path= is required for application/octet-stream");
			cJSON_Delete(arr);
			return;
		}
		char *path = envd_path(p);
		cJSON *e = write_upload(t, path, body, blen);
		free(path);
		if (!e) {
			cJSON_Delete(arr);
			return;
		}
		cJSON_AddItemToArray(arr, e);
	} else {
		rest_error(t, 400, "Content-Type must be multipart/form-data or application/octet-stream");
		cJSON_Delete(arr);
		return;
	}
	char *s = cJSON_PrintUnformatted(arr);
	http_answer(t, 200, "application/json", s, strlen(s));
	free(s);
	cJSON_Delete(arr);
}

void envd_files_post(struct http_txn *t)
{
	buf_t unz = {0};   /* a gzip body inflated */
	files_post(t, &unz);
	buf_free(&unz);
}
