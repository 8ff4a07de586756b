/* fswork.h — file work off the event loop, as the user it is for: the
 * credentials a request acts with, the worker pool's jobs, and the
 * race-free primitives the jobs use (fswork.c). */
#ifndef TERMD_FSWORK_H
#define TERMD_FSWORK_H

#include <pwd.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "util.h"

#define FS_MAX_GROUPS 64

/* The file-system ids a job runs with: the kernel itself then refuses
 * what that user could not do (setfsuid/setfsgid and the supplementary
 * groups are per thread on Linux). self: termd's own ids, no switch. */
struct fs_cred {
	uid_t uid;
	gid_t gid;
	int ngroups;
	gid_t groups[FS_MAX_GROUPS];
	int self;
	char name[64];            /* the user's name (for sudo -l -U), "" for self */
};
/* termd's own ids */
void fs_cred_self(struct fs_cred *c);
/* pw's ids and groups (self when pw is termd's own user) */
void fs_cred_user(struct fs_cred *c, const struct passwd *pw);

/* A job: work() runs in a worker thread with cred's ids, then done() in
 * the loop (it frees the job). At termd's end a job that never ran or
 * whose done() never came gets done() with aborted set: free only. */
struct fsjob {
	struct fsjob *next;
	struct fs_cred cred;
	void (*work)(struct fsjob *j);
	void (*done)(struct fsjob *j);
	int aborted;
	int err;                  /* for work(): an errno to hand back */
};
/* ---- acting as root for a user who may anyway (--user-root-capable) ---- */
/* May the user act as root anyway? --user-root-capable yes; or auto and
 * the user is root, or `sudo -n -l -U NAME` run as root shows
 * `(ALL) NOPASSWD: ALL` (or `(ALL : ALL)`). Never when termd is not root.
 * The answer is kept 5 s a user; asking may run sudo (blocks: a worker's
 * thread; the loop peeks). */
int fs_user_root_capable(const char *name, uid_t uid);
/* The same without waiting, for the loop (/healthz): the last answer
 * known (no: while none is), a stale or missing one asked again in a
 * thread of its own. */
int fs_user_root_capable_peek(const char *name, uid_t uid);
/* In a job the kernel refused (EACCES/EPERM) as its user: when the user
 * may act as root, the thread takes termd's own ids (root) and 1, until
 * fs_as_user; else 0 (the user's ids still, the refusal stands). What
 * runs as root must not follow a link the user controls (the _beneath
 * primitives, O_NOFOLLOW) and gives what it makes to the user. */
int fs_as_root(const struct fs_cred *c);
/* the ids the job this thread runs acts with (NULL outside a job) */
const struct fs_cred *fs_job_cred(void);
/* back to the job's user after fs_as_root: 0, or -1 (the thread could not
 * take the user's ids: the job must do nothing more) */
int fs_as_user(const struct fs_cred *c);

/* Queue j: 0, or -1 with errno EAGAIN when --fs-queue jobs already wait
 * (the caller answers busy and frees j). */
int fswork_submit(struct fsjob *j);
/* jobs queued, running, or done and not yet handed back to the loop */
size_t fswork_pending(void);
/* stop the workers (each finishes its job), abort what is left */
void fswork_shutdown(void);

/* ---- primitives (in a job: they act with the thread's ids) ---- */
/* open path for reading without ever blocking on a FIFO or a device:
 * O_NONBLOCK, fstat, regular files only (then blocking again). -1 with
 * errno (EISDIR for a folder, EINVAL "not a regular file"). */
int fs_open_regular(const char *path, struct stat *st);
/* open path for writing in place (created with mode when missing),
 * following a link the user may follow, never blocking: a FIFO, a device
 * or a folder is refused (EINVAL/EISDIR) before anything is truncated. */
int fs_open_write(const char *path, mode_t mode, int *created);
/* remove path and, for a folder, all it holds, without following a
 * symlink anywhere below path: each folder is opened relative to its
 * parent's fd with O_NOFOLLOW and its entries removed with unlinkat (a
 * folder swapped for a link under the walk is unlinked as a link). 0, or
 * -1 with errno. */
int fs_remove_all(const char *path);
/* the same, of name in the folder dfd (name itself never followed) */
int fs_remove_at(int dfd, const char *name);
/* The folder rel beneath the folder root (made as needed, mode), reached
 * one component at a time with O_NOFOLLOW: never through a symlink, never
 * above root (".." is EXDEV). Its fd, or -1 with errno (ELOOP/ENOTDIR: a
 * link or a file in the way). A portable O_NOFOLLOW walk rather than
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS): the same on every kernel. */
int fs_dir_beneath(int root, const char *rel, mode_t mode);
/* ... each folder it makes given to uid:gid (as root for a user); mode
 * (mode_t)-1: none made (a missing one is ENOENT) */
int fs_dir_beneath_owned(int root, const char *rel, mode_t mode, uid_t uid, gid_t gid);
/* the absolute path opened for reading from / one component at a time
 * with O_NOFOLLOW (no link followed anywhere, nothing made), a regular
 * file only, never blocking (fs_open_regular's checks) */
int fs_read_beneath(const char *path, struct stat *st);
/* name in the folder dfd, opened for writing as fs_open_write does, and
 * never through a link (O_NOFOLLOW: a link there is ELOOP). */
int fs_write_beneath(int dfd, const char *name, mode_t mode);
/* ... saying whether it made the file */
int fs_write_beneath_new(int dfd, const char *name, mode_t mode, int *created);

/* ---- unzip.c ---- */
/* Unpack the zip into the folder dir (which must exist): checked first
 * (zip_check: entries at most max_entries, sizes within budget bytes),
 * then each entry written beneath dir (its folders made 0755, files
 * 0666), never through a symlink. 0, or -1 with err ("[Errno N] why:
 * 'name'"; detail: a folder that cannot be made is said as "cannot make
 * the folder of 'name'", naming a link or a file in the way). */
int fs_unzip_into(const char *dir, const void *zip, size_t len, size_t budget,
		  size_t max_entries, int detail, char *err, size_t errlen);

#endif
