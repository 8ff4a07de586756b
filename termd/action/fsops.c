/* fsops.c — the file-system actions beside read/write/edit (PROTOCOL.md §4
 * Files, 1.2): `file.stat`, `file.list` (down to a depth, walk order),
 * `file.mkdir`, `file.move` and `file.remove`, each entry described the
 * same way (fsops_entry: type, size, mode, permissions in Go's notation,
 * owner, group, modification time to the nanosecond, a symlink's target).
 * Errors name the errno (extras.errno) so a front door can say it in its
 * own words. Relative paths are taken against main's cwd (files_resolve). */
#include "action.h"
#include "fsio.h"
#include "fswork.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/xattr.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LIST_DEFAULT_MAX 10000
#define LIST_MAX 1000000
#define DEPTH_MAX 64

/* ------------------------------------------------------------ entries */

const char *fsops_errno_name(int e)
{
	static const struct {
		int e;
		const char *name;
	} names[] = {
		{ENOENT, "ENOENT"}, {ENOTDIR, "ENOTDIR"}, {EACCES, "EACCES"}, {EPERM, "EPERM"},
		{EROFS, "EROFS"}, {EEXIST, "EEXIST"}, {EINVAL, "EINVAL"},
		{ENAMETOOLONG, "ENAMETOOLONG"}, {ENOSPC, "ENOSPC"}, {EISDIR, "EISDIR"},
		{ENOTEMPTY, "ENOTEMPTY"}, {EXDEV, "EXDEV"}, {ELOOP, "ELOOP"}, {EBUSY, "EBUSY"},
		{EDQUOT, "EDQUOT"},
		/* termd's own shortage, not the file's (issue 52: fds exhausted) */
		{EMFILE, "EMFILE"}, {ENFILE, "ENFILE"}, {ENOMEM, "ENOMEM"},
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (names[i].e == e)
			return names[i].name;
	return "EIO";
}

/* Go's FileMode.String(), as e2b's envd shows permissions */
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

/* RFC 3339 in UTC with as many fraction digits as the time has (0, 3, 6, 9) */
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

/* set while this worker acts as root for its job's user (as_root below):
 * entries then follow no link (a symlink's target is its text, taken
 * against its folder; what it leads to is not looked at) */
static __thread int rooted;

/* a symlink's target as an absolute path: where it leads, else its text
 * taken against the link's folder (sys: the path to ask the kernel with;
 * shown: the one to answer with) */
static void add_target(cJSON *o, const char *sys, const char *shown)
{
	char *real = rooted ? NULL : realpath(sys, NULL);
	if (real) {
		cJSON_AddStringToObject(o, "symlink_target", real);
		free(real);
		return;
	}
	char t[PATH_MAX];
	ssize_t n = readlink(sys, t, sizeof t - 1);
	if (n < 0)
		return;
	t[n] = 0;
	const char *path = shown;
	const char *slash = strrchr(path, '/');
	char *dir = xstrndup(path, (size_t)(slash && slash != path ? slash - path : 1));
	char *abs = fsio_resolve(dir, t);   /* relative to the link's folder */
	if (abs)
		cJSON_AddStringToObject(o, "symlink_target", abs);
	free(abs);
	free(dir);
}

/* user.e2b.<key> extended attributes (what e2b's uploads keep as
 * X-Metadata-<key>) as {key: value}, of path (follow: through a symlink,
 * as envd's xattr.List) or, path NULL, of the open fd; NULL when there
 * are none (or the file system keeps none). A name or value that is not
 * UTF-8 text is left out, as envd does (it could not be a JSON string). */
cJSON *fsops_metadata(const char *path, int follow, int fd)
{
	ssize_t n = !path ? flistxattr(fd, NULL, 0) : follow ? listxattr(path, NULL, 0)
			 : llistxattr(path, NULL, 0);
	if (n <= 0)
		return NULL;
	size_t cap = (size_t)n + 256;   /* room for one added meanwhile */
	char *names = xmalloc(cap);
	n = !path ? flistxattr(fd, names, cap) : follow ? listxattr(path, names, cap)
		  : llistxattr(path, names, cap);
	cJSON *m = NULL;
	char *v = n > 0 ? xmalloc(65536) : NULL;
	for (ssize_t i = 0; i < n; i += (ssize_t)strlen(names + i) + 1) {
		const char *k = names + i;
		if (strncmp(k, "user.e2b.", 9) != 0 || !utf8_text(k + 9, strlen(k + 9), NULL))
			continue;
		ssize_t vn = !path ? fgetxattr(fd, k, v, 65535) : follow ? getxattr(path, k, v, 65535)
			   : lgetxattr(path, k, v, 65535);
		if (vn < 0 || !utf8_text(v, (size_t)vn, NULL))
			continue;
		v[vn] = 0;
		if (!m)
			m = cJSON_CreateObject();
		cJSON_AddStringToObject(m, k + 9, v);
	}
	free(v);
	free(names);
	return m;
}

static void add_metadata(cJSON *o, const char *key, const char *path, int follow)
{
	cJSON *m = fsops_metadata(path, follow, -1);
	if (m)
		cJSON_AddItemToObject(o, key, m);
}

static const char *type_name(mode_t m)
{
	return S_ISDIR(m) ? "directory" : S_ISLNK(m) ? "symlink" : S_ISREG(m) ? "file" : "other";
}

/* what a symlink leads to, followed to the end: target {type, mode,
 * metadata}; nothing when it leads nowhere (dangling, a loop) */
static void add_link_target(cJSON *o, const char *path)
{
	struct stat sb;
	if (stat(path, &sb) != 0)
		return;
	cJSON *t = cJSON_AddObjectToObject(o, "target");
	cJSON_AddStringToObject(t, "type", type_name(sb.st_mode));
	cJSON_AddNumberToObject(t, "mode", sb.st_mode & 07777);
	add_metadata(t, "metadata", path, 1);
}

/* path's entry, asked of the kernel as sys (the same path, or one through
 * /proc/self/fd as root) */
static cJSON *entry_of(const char *sys, const char *path)
{
	struct stat sb;
	if (lstat(sys, &sb) != 0)
		return NULL;
	cJSON *o = cJSON_CreateObject();
	const char *slash = strrchr(path, '/');
	cJSON_AddStringToObject(o, "name", slash && slash[1] ? slash + 1 : path);
	cJSON_AddStringToObject(o, "type", type_name(sb.st_mode));
	cJSON_AddStringToObject(o, "path", path);
	cJSON_AddNumberToObject(o, "size", (double)sb.st_size);
	cJSON_AddNumberToObject(o, "mode", sb.st_mode & 07777);
	char perm[12];
	mode_string(sb.st_mode, perm);
	cJSON_AddStringToObject(o, "permissions", perm);
	/* the _r forms: entries are described in worker threads */
	struct passwd pwb, *pw = NULL;
	struct group grb, *gr = NULL;
	char nss[4096], id[24];
	if (getpwuid_r(sb.st_uid, &pwb, nss, sizeof nss, &pw) != 0)
		pw = NULL;
	snprintf(id, sizeof id, "%u", (unsigned)sb.st_uid);
	cJSON_AddStringToObject(o, "owner", pw ? pw->pw_name : id);
	if (getgrgid_r(sb.st_gid, &grb, nss, sizeof nss, &gr) != 0)
		gr = NULL;
	snprintf(id, sizeof id, "%u", (unsigned)sb.st_gid);
	cJSON_AddStringToObject(o, "group", gr ? gr->gr_name : id);
	add_time(o, "modified", &sb.st_mtim);
	if (S_ISLNK(sb.st_mode)) {
		add_target(o, sys, path);
		if (!rooted)
			add_link_target(o, sys);
	}
	add_metadata(o, "metadata", sys, 0);
	return o;
}

cJSON *fsops_entry(const char *path)
{
	return entry_of(path, path);
}

/* name in the folder dfd, answered as path */
static cJSON *entry_at(int dfd, const char *name, const char *path)
{
	char sys[64 + NAME_MAX];
	snprintf(sys, sizeof sys, "/proc/self/fd/%d/%s", dfd, name);
	return entry_of(sys, path);
}

/* ------------------------------------------------ as root, beneath / */

/* The kernel refused the job's user path (e: EACCES or EPERM) and the user
 * may act as root anyway (--user-root-capable): the thread is root, and
 * its job's cred is returned; else NULL (the refusal stands). root_end
 * takes the user's ids again. */
static const struct fs_cred *root_begin(const char *path, int e)
{
	const struct fs_cred *c = fs_job_cred();
	if ((e != EACCES && e != EPERM) || path[0] != '/' || !c || fs_as_root(c) != 1)
		return NULL;
	rooted = 1;
	return c;
}

/* the user's ids again: r (errno kept), or -1 with EPERM when the thread
 * could not take them (the worker restores its own after the job) */
static int root_end(const struct fs_cred *c, int r)
{
	int e = errno;
	rooted = 0;
	if (fs_as_user(c) != 0) {
		errno = EPERM;
		return -1;
	}
	errno = e;
	return r;
}

/* path's folder (whole: path itself, *name "."), reached from / one
 * component at a time with O_NOFOLLOW (a link on the way, the user's or
 * not, is refused: ELOOP/ENOTDIR), made as needed for mk (its own) when
 * mk; its fd and *name (the last component), or -1 with errno */
static int root_dir(const char *path, int whole, const struct fs_cred *mk, const char **name)
{
	const char *slash = strrchr(path, '/');
	if (path[0] != '/' || !slash || (!whole && !slash[1])) {
		errno = EINVAL;
		return -1;
	}
	int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return -1;
	char *dir = whole ? xstrdup(path + 1) : xstrndup(path + 1, (size_t)(slash - path - 1));
	int fd = fs_dir_beneath_owned(root, dir, mk ? 0755 : (mode_t)-1, mk ? mk->uid : (uid_t)-1,
				      mk ? mk->gid : (gid_t)-1);
	int e = errno;
	free(dir);
	close(root);
	errno = e;
	*name = whole ? "." : slash + 1;
	return fd;
}

/* path's entry as root (the user refused it, e); NULL with errno (e: the
 * user's refusal, when root could not reach it without a link) */
static cJSON *stat_as_root(const char *path, int e)
{
	const struct fs_cred *c = root_begin(path, e);
	if (!c) {
		errno = e;
		return NULL;
	}
	const char *name;
	cJSON *entry = NULL;
	int dfd = root_dir(path, 0, NULL, &name);
	if (dfd >= 0) {
		entry = entry_at(dfd, name, path);
		e = entry ? 0 : errno;
		close(dfd);
	}
	errno = e;
	if (root_end(c, 0) != 0) {
		cJSON_Delete(entry);
		return NULL;
	}
	errno = e;
	return entry;
}

/* ------------------------------------------------------------ helpers */

/* an error that names the errno and the path; code as the errno says
 * unless given (not TD_ERR__COUNT) */
static int fail_as(struct act *a, td_err code, int e, const char *what, const char *path)
{
	if (code != TD_ERR__COUNT)
		;
	else if (e == ENOENT || e == ENOTDIR)
		code = TD_ERR_NOT_FOUND;
	else if (e == EISDIR)
		code = TD_ERR_IS_DIRECTORY;
	else if (e == EINVAL || e == ENAMETOOLONG || e == EEXIST || e == ENOTEMPTY)
		code = TD_ERR_BAD_REQUEST;
	else
		code = TD_ERR_IO_ERROR;
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "path", path);
	cJSON_AddStringToObject(ex, "errno", fsops_errno_name(e));
	buf_t m = {0};
	buf_printf(&m, "%s ", what);
	files_put_path(&m, path);
	buf_printf(&m, ": %s", strerror(e));
	buf_putc(&m, 0);
	files_error(a, code, m.p, ex);
	buf_free(&m);
	return -1;
}

static int fs_fail(struct act *a, int e, const char *what, const char *path)
{
	return fail_as(a, TD_ERR__COUNT, e, what, path);
}

/* the action's path argument made absolute (and normalized); NULL once it
 * answered */
static char *path_arg(struct act *a, const char *key)
{
	const char *p = NULL;
	if (arg_string(a, key, &p, 1) < 0)
		return NULL;
	if (!*p) {
		act_error(a, TD_ERR_BAD_REQUEST, "argument '%s' is empty", key);
		return NULL;
	}
	return files_resolve(p);   /* absolute and normalized */
}

int fsops_mkdirs(const char *path, mode_t mode, cJSON *created)
{
	char *d = xstrdup(path);
	int r = 0;
	for (char *p = d + 1;; p++) {
		if (*p != '/' && *p)
			continue;
		char ch = *p;
		*p = 0;
		if (mkdir(d, mode) == 0) {
			if (created)
				cJSON_AddItemToArray(created, cJSON_CreateString(d));
		} else if (errno != EEXIST) {
			r = -1;
			break;
		}
		*p = ch;
		if (!ch)
			break;
	}
	int e = errno;
	free(d);
	errno = e;
	return r;
}

static void answer_entry(struct act *a, const char *obs, const char *path, cJSON *ex)
{
	cJSON *e = fsops_entry(path);
	if (!e)
		e = stat_as_root(path, errno);
	if (!e) {
		cJSON_Delete(ex);
		fs_fail(a, errno, "cannot stat", path);
		return;
	}
	cJSON_AddItemToObject(ex, "entry", e);
	events_emit(a->conn, a->id, obs, "", ex);
}

/* ------------------------------------------------------------ actions */

static int stat_action(struct act *a)
{
	char *path = path_arg(a, "path");
	if (!path)
		return -1;
	answer_entry(a, "file.stat", path, cJSON_CreateObject());
	free(path);
	return 0;
}

/* The kernel refused the job's user the folder path (EACCES/EPERM): when
 * the user may act as root anyway (--user-root-capable), made as root from
 * / one component at a time with O_NOFOLLOW (no link followed: a link on
 * the way is refused), each folder it makes given to the user. 0, or -1
 * (errno: the user's refusal, which stands). */
static int mkdir_as_root(const char *path, int parents, int exist_ok, cJSON *created)
{
	int e = errno;
	const struct fs_cred *c = fs_job_cred();
	const char *slash = strrchr(path, '/');
	if (path[0] != '/' || !slash || !slash[1] || !c || fs_as_root(c) != 1) {
		errno = e;
		return -1;
	}
	/* what is missing now (as root), told as made once the walk made it */
	char *d = xstrdup(path);
	cJSON *missing = cJSON_CreateArray();
	for (char *p = d + 1;; p++) {
		if (*p != '/' && *p)
			continue;
		char ch = *p;
		*p = 0;
		struct stat sb;
		if (lstat(d, &sb) != 0)
			cJSON_AddItemToArray(missing, cJSON_CreateString(d));
		*p = ch;
		if (!ch)
			break;
	}
	free(d);
	int r = -1, n = cJSON_GetArraySize(missing);
	cJSON *last = n ? cJSON_GetArrayItem(missing, n - 1) : NULL;
	int there = !last || strcmp(last->valuestring, path) != 0;
	int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	/* without parents only the last one may be missing; one there
	 * already only with exist_ok (a folder: the walk says) */
	if (there && !exist_ok)
		e = EEXIST;
	else if (root >= 0 && (parents || n <= 1)) {
		int fd = fs_dir_beneath_owned(root, path + 1, 0755, c->uid, c->gid);
		if (fd >= 0) {
			close(fd);
			r = 0;
		}
	}
	if (root >= 0)
		close(root);
	if (r == 0) {
		cJSON *m;
		cJSON_ArrayForEach(m, missing)
			cJSON_AddItemToArray(created, cJSON_CreateString(m->valuestring));
	}
	cJSON_Delete(missing);
	if (fs_as_user(c) != 0) {
		errno = EPERM;
		return -1;
	}
	if (r != 0)
		errno = e;
	return r;
}

static int mkdir_action(struct act *a)
{
	int parents = 1, exist_ok = 0;
	if (arg_bool(a, "parents", &parents) < 0 || arg_bool(a, "exist_ok", &exist_ok) < 0)
		return -1;
	char *path = path_arg(a, "path");
	if (!path)
		return -1;
	struct stat sb;
	cJSON *ex = cJSON_CreateObject();
	cJSON *created = cJSON_AddArrayToObject(ex, "created");
	int r = 0;
	if (lstat(path, &sb) == 0) {
		if (!exist_ok || !S_ISDIR(sb.st_mode)) {
			errno = EEXIST;
			r = -1;
		}
	} else if (parents) {
		r = fsops_mkdirs(path, 0755, created);
	} else if ((r = mkdir(path, 0755)) == 0) {
		cJSON_AddItemToArray(created, cJSON_CreateString(path));
	}
	if (r != 0 && (errno == EACCES || errno == EPERM))
		r = mkdir_as_root(path, parents, exist_ok, created);
	if (r != 0) {
		cJSON_Delete(ex);
		fs_fail(a, errno, "cannot make the folder", path);
	} else {
		answer_entry(a, "file.mkdir", path, ex);
	}
	free(path);
	return 0;
}

/* src moved to dst as root (the user refused, e): both folders reached
 * without a link, dst's made as needed (the user's); 0, or -1 with errno
 * (e: the user's refusal, when root could not reach them so) */
static int move_as_root(const char *src, const char *dst, int e)
{
	const struct fs_cred *c = root_begin(src, e);
	if (!c) {
		errno = e;
		return -1;
	}
	const char *sn, *dn;
	int r = -1;
	int sfd = root_dir(src, 0, NULL, &sn);
	int dfd = sfd < 0 ? -1 : root_dir(dst, 0, c, &dn);
	if (dfd >= 0) {
		r = renameat(sfd, sn, dfd, dn);
		if (r != 0)
			e = errno;
		close(dfd);
	}
	if (sfd >= 0)
		close(sfd);
	errno = e;
	return root_end(c, r);
}

static int move_action(struct act *a)
{
	char *src = path_arg(a, "source");
	char *dst = src ? path_arg(a, "destination") : NULL;
	if (!dst) {
		free(src);
		return -1;
	}
	struct stat sb;
	cJSON *ex = cJSON_CreateObject();
	cJSON *created = cJSON_AddArrayToObject(ex, "created");
	if (lstat(src, &sb) != 0) {
		if (move_as_root(src, dst, errno) != 0) {
			cJSON_Delete(ex);
			fs_fail(a, errno, "cannot move", src);
			goto out;
		}
	} else {
		char *slash = strrchr(dst, '/');
		if (slash && slash != dst) {   /* its folder made first, as envd does */
			*slash = 0;
			fsops_mkdirs(dst, 0755, created);
			*slash = '/';
		}
		if (rename(src, dst) != 0 && move_as_root(src, dst, errno) != 0) {
			cJSON_Delete(ex);
			fs_fail(a, errno, "cannot move to", dst);
			goto out;
		}
	}
	cJSON_AddStringToObject(ex, "source", src);
	answer_entry(a, "file.move", dst, ex);
out:
	free(src);
	free(dst);
	return 0;
}

static int name_cmp(const struct dirent **x, const struct dirent **y)
{
	return strcmp((*x)->d_name, (*y)->d_name);
}

static int not_dots(const struct dirent *d)
{
	return strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0;
}

/* entries of dir in walk order (names sorted bytewise, a folder's entries
 * right after it; symlinks not followed), down to depth levels; 1 when
 * max was reached */
struct walk {
	cJSON *arr;
	size_t seen;              /* entries walked (the first skip are not answered) */
	size_t skip, count, max;
	int top_err;              /* the listed folder itself could not be read */
};

static int list_dir(const char *dir, const char *shown, int depth, struct walk *w)
{
	struct dirent **names;
	int n = scandir(dir, &names, not_dots, name_cmp);
	if (n < 0) {
		/* the listed folder: an error; one below: skipped, unless termd
		 * itself was short of fds or memory (the listing would be
		 * incomplete for no reason of the folder's) */
		int e = errno ? errno : EIO;
		if (!w->top_err && (!w->seen || e == EMFILE || e == ENFILE || e == ENOMEM))
			w->top_err = e;
		return 0;
	}
	int full = 0;
	for (int i = 0; i < n; i++) {
		if (!full) {
			buf_t b = {0}, sh = {0};
			buf_puts(&b, dir);
			if (b.len && b.p[b.len - 1] != '/')
				buf_putc(&b, '/');
			buf_puts(&b, names[i]->d_name);
			buf_puts(&sh, shown);
			if (sh.len && sh.p[sh.len - 1] != '/')
				buf_putc(&sh, '/');
			buf_puts(&sh, names[i]->d_name);
			struct stat sb;
			if (w->count >= w->max) {
				full = 1;
			} else if (lstat(b.p, &sb) == 0) {
				if (w->seen++ >= w->skip) {
					cJSON *e = entry_of(b.p, sh.p);
					if (e) {
						cJSON_AddItemToArray(w->arr, e);
						w->count++;
					}
				}
				/* lstat: a link to a folder is listed, never entered
				 * (as root not even one swapped in since: O_NOFOLLOW) */
				if (depth > 1 && S_ISDIR(sb.st_mode) && !rooted) {
					full = list_dir(b.p, sh.p, depth - 1, w);
				} else if (depth > 1 && S_ISDIR(sb.st_mode)) {
					int fd = open(b.p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
					char sys[32];
					snprintf(sys, sizeof sys, "/proc/self/fd/%d", fd);
					if (fd >= 0) {
						full = list_dir(sys, sh.p, depth - 1, w);
						close(fd);
					} else if (!w->top_err && (errno == EMFILE || errno == ENFILE)) {
						w->top_err = errno;
					}
				}
			}
			buf_free(&b);
			buf_free(&sh);
		}
		free(names[i]);
	}
	free(names);
	return full;
}

/* path listed as root (the user refused it, *err): the folder reached
 * without a link (itself not one either), its entries described without
 * following one; *err 0 once listed (the walk's full), else the error
 * (the user's refusal, when root could not reach it so) */
static int list_as_root(const char *path, int depth, struct walk *w, int *err)
{
	const struct fs_cred *c = root_begin(path, *err);
	if (!c)
		return 0;
	const char *name;
	int full = 0, dfd = root_dir(path, 1, NULL, &name);
	if (dfd >= 0) {
		char sys[32];
		snprintf(sys, sizeof sys, "/proc/self/fd/%d", dfd);
		w->top_err = 0;
		full = list_dir(sys, path, depth, w);
		*err = w->top_err;
		close(dfd);
	}
	if (root_end(c, 0) != 0)
		*err = EPERM;
	return full;
}

static int list_action(struct act *a)
{
	long long depth = 1, max = LIST_DEFAULT_MAX, offset = 0;
	int has;
	if (arg_int(a, "depth", &depth, &has) < 0 || arg_int(a, "max_entries", &max, &has) < 0 ||
	    arg_int(a, "offset", &offset, &has) < 0)
		return -1;
	if (depth < 1 || depth > DEPTH_MAX || max < 1 || max > LIST_MAX || offset < 0)
		return act_error(a, TD_ERR_BAD_REQUEST,
				 "depth must be 1-%d, max_entries 1-%d and offset 0 or more",
				 DEPTH_MAX, LIST_MAX);
	if ((size_t)max > opts.list_max)   /* a listing stays a few MiB (--list-max) */
		max = (long long)opts.list_max;
	char *path = path_arg(a, "path");
	if (!path)
		return -1;
	struct stat sb;
	int err = 0;
	if (stat(path, &sb) != 0)   /* a symlink to a folder lists the folder */
		err = errno;
	else if (!S_ISDIR(sb.st_mode))
		fail_as(a, TD_ERR_BAD_REQUEST, ENOTDIR, "cannot list (not a folder)", path);
	if (!err && !S_ISDIR(sb.st_mode)) {
		/* answered */
	} else {
		cJSON *ex = cJSON_CreateObject();
		cJSON_AddStringToObject(ex, "path", path);
		struct walk w = {cJSON_AddArrayToObject(ex, "entries"), 0, (size_t)offset, 0,
				 (size_t)max, 0};
		int full = err ? 0 : list_dir(path, path, (int)depth, &w);
		if (!err)
			err = w.top_err;
		if (err)
			full = list_as_root(path, (int)depth, &w, &err);
		if (err) {
			cJSON_Delete(ex);
			fs_fail(a, err, "cannot list", path);
			free(path);
			return 0;
		}
		cJSON_AddBoolToObject(ex, "truncated", full);
		if (full)   /* the next page */
			cJSON_AddNumberToObject(ex, "next_offset", (double)(w.skip + w.count));
		events_emit(a->conn, a->id, "file.list", "", ex);
	}
	free(path);
	return 0;
}

/* path removed as root (the user refused, e): its folder reached without
 * a link, the entry itself never followed (*sb: what it was); 0, or -1
 * with errno (e: the user's refusal, when root could not reach it so) */
static int remove_as_root(const char *path, int recursive, struct stat *sb, int e)
{
	const struct fs_cred *c = root_begin(path, e);
	if (!c) {
		errno = e;
		return -1;
	}
	const char *name;
	int r = -1, dfd = root_dir(path, 0, NULL, &name);
	if (dfd >= 0) {
		if (fstatat(dfd, name, sb, AT_SYMLINK_NOFOLLOW) != 0)
			r = -1;
		else if (!S_ISDIR(sb->st_mode))
			r = unlinkat(dfd, name, 0);
		else if (recursive)
			r = fs_remove_at(dfd, name);
		else
			r = unlinkat(dfd, name, AT_REMOVEDIR);
		e = r != 0 ? errno : 0;
		close(dfd);
	}
	errno = e;
	return root_end(c, r);
}

static int remove_action(struct act *a)
{
	int recursive = 0;
	if (arg_bool(a, "recursive", &recursive) < 0)
		return -1;
	char *path = path_arg(a, "path");
	if (!path)
		return -1;
	struct stat sb;
	int r;
	if (strcmp(path, "/") == 0) {
		act_error(a, TD_ERR_BAD_REQUEST, "termd does not remove /");
		goto out;
	}
	if (lstat(path, &sb) != 0) {
		r = remove_as_root(path, recursive, &sb, errno);
	} else {
		if (!S_ISDIR(sb.st_mode))
			r = unlink(path);
		else if (recursive)   /* never follows a link, even one swapped in under the walk */
			r = fs_remove_all(path);
		else
			r = rmdir(path);
		if (r != 0)
			r = remove_as_root(path, recursive, &sb, errno);
	}
	if (r != 0) {
		fs_fail(a, errno, "cannot remove", path);
		goto out;
	}
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "path", path);
	cJSON_AddStringToObject(ex, "type", S_ISDIR(sb.st_mode) ? "directory" :
				S_ISLNK(sb.st_mode) ? "symlink" : S_ISREG(sb.st_mode) ? "file" : "other");
	events_emit(a->conn, a->id, "file.remove", "", ex);
out:
	free(path);
	return 0;
}

void fsops_register(void)
{
	static const struct action_def defs[] = {
		{"file.stat", stat_action, ACT_FILEWORK},
		{"file.list", list_action, ACT_FILEWORK},
		{"file.mkdir", mkdir_action, ACT_FILEWORK},
		{"file.move", move_action, ACT_FILEWORK},
		{"file.remove", remove_action, ACT_FILEWORK},
	};
	actions_register(defs, sizeof defs / sizeof defs[0]);
}
