/* envd-fs.c — envd's filesystem.Filesystem (Stat, MakeDir, Move, ListDir
 * with depth, Remove) with EntryInfo as envd fills it, and the REST
 * routes GET /files (a file's bytes, gzip when accepted) and POST /files
 * (multipart/form-data or application/octet-stream, gzip or not) with
 * envd's JSON errors. Paths are made
 * absolute against the request's user's home; what it creates belongs to
 * that user when termd is root (reads and moves are termd's own). These call the
 * file system directly: termd's action layer has no stat/list/move/remove
 * actions yet, so they are not on the event stream. */
#include "envd.h"
#include "fsio.h"


#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

char *envd_path(const char *path)
{
	if (!path)
		return NULL;
	buf_t b = {0};
	if (path[0] != '/') {
		const char *home = envd_cur.home;
		if (home[0] != '/')
			home = opts.cwd;
		buf_puts(&b, home);
		if (path[0]) {
			if (!b.len || b.p[b.len - 1] != '/')
				buf_putc(&b, '/');
		}
	}
	buf_puts(&b, path);
	/* normalized: no empty, "." or ".." components */
	char *raw = buf_steal(&b);
	buf_t o = {0};
	const char *p = raw;
	while (*p) {
		while (*p == '/')
			p++;
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (n == 0)
			break;
		if (n == 1 && p[0] == '.') {
		} else if (n == 2 && p[0] == '.' && p[1] == '.') {
			while (o.len && o.p[o.len - 1] != '/')
				o.len--;
			if (o.len)
				o.len--;
		} else {
			buf_putc(&o, '/');
			buf_append(&o, p, n);
		}
		p += n;
	}
	if (!o.len)
		buf_putc(&o, '/');
	free(raw);
	return buf_steal(&o);
}

static enum envd_code errno_code(int e)
{
	switch (e) {
	case ENOENT:
	case ENOTDIR:
		return EC_NOT_FOUND;
	case EACCES:
	case EPERM:
	case EROFS:
		return EC_PERMISSION_DENIED;
	case EEXIST:
		return EC_ALREADY_EXISTS;
	case EINVAL:
	case ENAMETOOLONG:
		return EC_INVALID_ARGUMENT;
	case ENOSPC:
		return EC_RESOURCE_EXHAUSTED;
	default:
		return EC_INTERNAL;
	}
}

/* Go's FileMode.String() */
static void mode_string(mode_t m, char out[12])
{
	char t = '-';
	if (S_ISDIR(m))
		t = 'd';
	else if (S_ISLNK(m))
		t = 'L';
	else if (S_ISFIFO(m))
		t = 'p';
	else if (S_ISSOCK(m))
		t = 'S';
	else if (S_ISCHR(m))
		t = 'c';
	else if (S_ISBLK(m))
		t = 'D';
	const char *rwx = "rwxrwxrwx";
	size_t i = 0;
	out[i++] = t;
	for (int b = 0; b < 9; b++)
		out[i++] = (m & (0400u >> b)) ? rwx[b] : '-';
	out[i] = 0;
}

static void add_time(cJSON *o, const char *key, const struct timespec *ts)
{
	struct tm tm;
	char buf[64], frac[32] = "";
	gmtime_r(&ts->tv_sec, &tm);
	strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
	long ns = ts->tv_nsec;
	if (ns) {
		if (ns % 1000000 == 0)
			snprintf(frac, sizeof frac, ".%03ld", ns / 1000000);
		else if (ns % 1000 == 0)
			snprintf(frac, sizeof frac, ".%06ld", ns / 1000);
		else
			snprintf(frac, sizeof frac, ".%09ld", ns);
	}
	char all[96];
	snprintf(all, sizeof all, "%s%sZ", buf, frac);
	cJSON_AddStringToObject(o, key, all);
}

/* EntryInfo of path (lstat: a symlink is itself, with its target), or
 * NULL with errno set */
cJSON *envd_entry_info(const char *path)
{
	struct stat sb;
	if (lstat(path, &sb) != 0)
		return NULL;
	cJSON *o = cJSON_CreateObject();
	const char *slash = strrchr(path, '/');
	cJSON_AddStringToObject(o, "name", slash && slash[1] ? slash + 1 : path);
	const char *type = S_ISDIR(sb.st_mode) ? "FILE_TYPE_DIRECTORY" :
			   S_ISLNK(sb.st_mode) ? "FILE_TYPE_SYMLINK" : "FILE_TYPE_FILE";
	cJSON_AddStringToObject(o, "type", type);
	cJSON_AddStringToObject(o, "path", path);
	char num[32];
	snprintf(num, sizeof num, "%lld", (long long)sb.st_size);
	cJSON_AddStringToObject(o, "size", num);
	cJSON_AddNumberToObject(o, "mode", sb.st_mode & 07777);
	char perm[12];
	mode_string(sb.st_mode, perm);
	cJSON_AddStringToObject(o, "permissions", perm);
	struct passwd *pw = getpwuid(sb.st_uid);
	struct group *gr = getgrgid(sb.st_gid);
	char id[24];
	snprintf(id, sizeof id, "%u", (unsigned)sb.st_uid);
	cJSON_AddStringToObject(o, "owner", pw ? pw->pw_name : id);
	snprintf(id, sizeof id, "%u", (unsigned)sb.st_gid);
	cJSON_AddStringToObject(o, "group", gr ? gr->gr_name : id);
	add_time(o, "modifiedTime", &sb.st_mtim);
	if (S_ISLNK(sb.st_mode)) {
		char *real = realpath(path, NULL);
		if (real) {
			cJSON_AddStringToObject(o, "symlinkTarget", real);
			free(real);
		} else {
			char t[PATH_MAX];
			ssize_t n = readlink(path, t, sizeof t - 1);
			if (n >= 0) {
				t[n] = 0;
				char *abs = t[0] == '/' ? xstrdup(t) : NULL;
				if (!abs) {   /* relative to the link's folder */
					buf_t b = {0};
					buf_append(&b, path, (size_t)(slash ? slash - path : 0));
					buf_putc(&b, '/');
					buf_puts(&b, t);
					char *raw = buf_steal(&b);
					abs = envd_path(raw);
					free(raw);
				}
				cJSON_AddStringToObject(o, "symlinkTarget", abs);
				free(abs);
			}
		}
	}
	return o;
}

static int fail_errno(struct envd_call *c, int e, const char *what, const char *path)
{
	return envd_fail(c, errno_code(e), "%s %s: %s", what, path, strerror(e));
}

/* the request's path field, resolved; NULL once it answered */
static char *req_path(struct envd_call *c, const char *key)
{
	const char *p = envd_str(c->req, key, NULL);
	if (!p) {
		envd_fail(c, EC_INVALID_ARGUMENT, "%s is required", key);
		return NULL;
	}
	return envd_path(p);
}

static cJSON *entry_msg(cJSON *entry)
{
	cJSON *m = cJSON_CreateObject();
	cJSON_AddItemToObject(m, "entry", entry);
	return m;
}

static int fs_stat(struct envd_call *c)
{
	char *path = req_path(c, "path");
	if (!path)
		return 0;
	cJSON *e = envd_entry_info(path);
	if (e)
		envd_reply(c, entry_msg(e));
	else
		fail_errno(c, errno, "cannot stat", path);
	free(path);
	return 0;
}

/* mkdir -p: 0, or -1 and errno */
static int mkdirs(const char *path, mode_t mode)
{
	char *d = xstrdup(path);
	int r = 0;
	for (char *p = d + 1; ; p++) {
		if (*p == '/' || !*p) {
			char ch = *p;
			*p = 0;
			if (mkdir(d, mode) == 0) {
				if (!envd_cur.self && lchown(d, envd_cur.uid, envd_cur.gid) != 0)
					log_debug("envd: cannot chown %s", d);
			} else if (errno != EEXIST) {
				r = -1;
				break;
			}
			*p = ch;
			if (!ch)
				break;
		}
	}
	free(d);
	return r;
}

static int fs_make_dir(struct envd_call *c)
{
	char *path = req_path(c, "path");
	if (!path)
		return 0;
	struct stat sb;
	if (lstat(path, &sb) == 0) {
		envd_fail(c, EC_ALREADY_EXISTS, "%s already exists", path);
	} else if (mkdirs(path, 0755) != 0) {
		fail_errno(c, errno, "cannot make directory", path);
	} else {
		cJSON *e = envd_entry_info(path);
		if (e)
			envd_reply(c, entry_msg(e));
		else
			fail_errno(c, errno, "cannot stat", path);
	}
	free(path);
	return 0;
}

static int fs_move(struct envd_call *c)
{
	char *src = req_path(c, "source");
	if (!src)
		return 0;
	char *dst = req_path(c, "destination");
	if (!dst) {
		free(src);
		return 0;
	}
	struct stat sb;
	char *slash = strrchr(dst, '/');
	if (lstat(src, &sb) != 0) {
		fail_errno(c, errno, "cannot move", src);
	} else {
		if (slash && slash != dst) {
			*slash = 0;
			mkdirs(dst, 0755);
			*slash = '/';
		}
		if (rename(src, dst) != 0) {
			fail_errno(c, errno, "cannot move to", dst);
		} else {
			cJSON *e = envd_entry_info(dst);
			if (e)
				envd_reply(c, entry_msg(e));
			else
				fail_errno(c, errno, "cannot stat", dst);
		}
	}
	free(src);
	free(dst);
	return 0;
}

static int name_cmp(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int skip_dots(const struct dirent *d)
{
	return strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0;
}

/* entries of dir in walk order (lexical, a folder's entries after it),
 * down to depth levels */
static void list_dir(const char *dir, int depth, cJSON *arr, int *count)
{
	struct dirent **names;
	int n = scandir(dir, &names, skip_dots, name_cmp);
	if (n < 0)
		return;
	for (int i = 0; i < n; i++) {
		buf_t b = {0};
		buf_puts(&b, dir);
		if (b.len && b.p[b.len - 1] != '/')
			buf_putc(&b, '/');
		buf_puts(&b, names[i]->d_name);
		buf_putc(&b, 0);
		cJSON *e = *count < 1000000 ? envd_entry_info(b.p) : NULL;
		if (e) {
			cJSON_AddItemToArray(arr, e);
			(*count)++;
			struct stat sb;
			if (depth > 1 && lstat(b.p, &sb) == 0 && S_ISDIR(sb.st_mode))
				list_dir(b.p, depth - 1, arr, count);
		}
		buf_free(&b);
		free(names[i]);
	}
	free(names);
}

static int fs_list_dir(struct envd_call *c)
{
	char *path = req_path(c, "path");
	if (!path)
		return 0;
	double depth = 1;
	if (envd_field(c->req, "depth", NULL) && envd_num(c->req, "depth", NULL, &depth) < 0) {
		free(path);
		return envd_fail(c, EC_INVALID_ARGUMENT, "depth must be a number");
	}
	if (depth < 1)
		depth = 1;
	if (depth > 64)
		depth = 64;
	struct stat sb;
	/* a symlink to a folder lists the folder */
	if (stat(path, &sb) != 0) {
		fail_errno(c, errno, "cannot list", path);
	} else if (!S_ISDIR(sb.st_mode)) {
		envd_fail(c, EC_INVALID_ARGUMENT, "%s is not a directory", path);
	} else {
		cJSON *m = cJSON_CreateObject();
		cJSON *arr = cJSON_AddArrayToObject(m, "entries");
		int count = 0;
		list_dir(path, (int)depth, arr, &count);
		envd_reply(c, m);
	}
	free(path);
	return 0;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
	(void)sb;
	(void)f;
	int r = flag == FTW_DP ? rmdir(p) : unlink(p);
	return r != 0 && errno != ENOENT ? -1 : 0;
}

static int fs_remove(struct envd_call *c)
{
	char *path = req_path(c, "path");
	if (!path)
		return 0;
	struct stat sb;
	if (strcmp(path, "/") == 0) {
		envd_fail(c, EC_INVALID_ARGUMENT, "termd does not remove /");
	} else if (lstat(path, &sb) != 0 && errno == ENOENT) {
		envd_reply(c, cJSON_CreateObject());   /* already gone: as os.RemoveAll */
	} else if (nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS) != 0) {
		fail_errno(c, errno, "cannot remove", path);
	} else {
		envd_reply(c, cJSON_CreateObject());
	}
	free(path);
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
		int r = mkdirs(d, 0755);
		free(d);
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
