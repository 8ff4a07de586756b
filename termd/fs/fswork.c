/* fswork.c — owns file work off the event loop, as the user it is for: a
 * small pool of worker threads that run jobs with the request's user's
 * file-system ids (setfsuid, setfsgid and the supplementary groups, all
 * per thread on Linux), a bounded queue, the hand-back of finished jobs to
 * the loop through one pipe the loop watches, and the primitives the jobs
 * use: opening without blocking on FIFOs, writing in place without
 * truncating a non-file, and a recursive remove that never follows a
 * symlink (unlinkat on folder fds, as Go's os.RemoveAll). */
#include "fswork.h"

#include "loop.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define FSWORK_THREADS 4
/* jobs waiting at most (each holds a request's arguments, a few KiB) */
#define FSWORK_QUEUE_MAX 1024
/* folders deep a recursive remove goes (one fd each) */
#define REMOVE_DEPTH_MAX 256

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct fsjob *q, **qtail;     /* waiting */
	struct fsjob *done;           /* finished, for the loop (any order) */
	size_t queued, running, ndone;   /* ndone: finished, not yet handed back */
	int started, stop;
	int rfd, wfd;                 /* the loop reads rfd */
	pthread_t th[FSWORK_THREADS];
	int nth;
	uid_t uid;
	gid_t gid;
	int ngroups;
	gid_t groups[FS_MAX_GROUPS];
} fw = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .rfd = -1, .wfd = -1};

/* ------------------------------------------------------------ credentials */

void fs_cred_self(struct fs_cred *c)
{
	memset(c, 0, sizeof *c);
	c->uid = geteuid();
	c->gid = getegid();
	c->self = 1;
}

void fs_cred_user(struct fs_cred *c, const struct passwd *pw)
{
	if (pw->pw_uid == geteuid()) {
		fs_cred_self(c);
		return;
	}
	memset(c, 0, sizeof *c);
	c->uid = pw->pw_uid;
	c->gid = pw->pw_gid;
	snprintf(c->name, sizeof c->name, "%s", pw->pw_name);
	int n = FS_MAX_GROUPS;
	if (getgrouplist(pw->pw_name, pw->pw_gid, c->groups, &n) < 0)
		n = FS_MAX_GROUPS;   /* more than we keep: the first ones */
	c->ngroups = n < 0 ? 0 : n > FS_MAX_GROUPS ? FS_MAX_GROUPS : n;
	if (c->ngroups == 0) {
		c->groups[0] = pw->pw_gid;
		c->ngroups = 1;
	}
}

/* The raw system calls: glibc's setgroups() would change every thread. */
static int set_groups(int n, const gid_t *g)
{
	return (int)syscall(SYS_setgroups, (size_t)n, g);
}

/* this thread takes c's ids: 0, or -1 (the job must not run) */
static int cred_apply(const struct fs_cred *c)
{
	if (c->self)
		return 0;
	if (set_groups(c->ngroups, c->groups) != 0)
		return -1;
	setfsgid(c->gid);
	setfsuid(c->uid);
	/* setfsuid/setfsgid say nothing on failure: ask what is in force */
	if ((uid_t)setfsuid((uid_t)-1) != c->uid || (gid_t)setfsgid((gid_t)-1) != c->gid)
		return -1;
	return 0;
}

static void cred_restore(const struct fs_cred *c)
{
	if (c->self)
		return;
	setfsuid(fw.uid);
	setfsgid(fw.gid);
	if (set_groups(fw.ngroups, fw.groups) != 0) {
		/* cannot happen as root; as another user cred_apply failed first */
	}
}

/* ------------------------------------------------- acting as root */

#define URC_KEEP_S 5        /* a user's answer is kept this long */
#define URC_USERS 16

static pthread_mutex_t urc_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	char name[64];
	int yes;
	time_t at;
} urc[URC_USERS];

/* one line of `sudo -l`: "(ALL) NOPASSWD: ALL" or "(ALL : ALL) NOPASSWD: ALL" */
static int sudo_line_all(const char *l)
{
	while (*l == ' ' || *l == '\t')
		l++;
	size_t n = strlen(l);
	while (n && (l[n - 1] == ' ' || l[n - 1] == '\t' || l[n - 1] == '\n' || l[n - 1] == '\r'))
		n--;
	static const char *const forms[] = {"(ALL) NOPASSWD: ALL", "(ALL : ALL) NOPASSWD: ALL"};
	for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++)
		if (n == strlen(forms[i]) && !strncmp(l, forms[i], n))
			return 1;
	return 0;
}

/* `sudo -n -l -U name` as root (this thread's ids): does it show (ALL)
 * NOPASSWD: ALL? (termd's loop may reap the child first: its output is
 * the answer, read to its end) */
static int sudo_all(const char *name)
{
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) < 0)
		return 0;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	char *argv[] = {"sudo", "-n", "-l", "-U", (char *)name, NULL};
	char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
	pid_t pid;
	int r = posix_spawnp(&pid, "sudo", &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	close(fds[1]);
	if (r != 0) {
		close(fds[0]);
		return 0;
	}
	buf_t out = {0};
	char b[4096];
	ssize_t n;
	while (out.len < (1u << 20) && ((n = read(fds[0], b, sizeof b)) > 0 || (n < 0 && errno == EINTR)))
		if (n > 0)
			buf_append(&out, b, (size_t)n);
	close(fds[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	int yes = 0;
	buf_putc(&out, 0);
	for (char *l = out.p, *nl; l && *l; l = nl ? nl + 1 : NULL) {
		nl = strchr(l, '\n');
		if (nl)
			*nl = 0;
		if (sudo_line_all(l))
			yes = 1;
	}
	buf_free(&out);
	return yes;
}

int fs_user_root_capable(const char *name, uid_t uid)
{
	if (geteuid() != 0 || opts.user_root_capable == URC_NO)
		return 0;
	if (opts.user_root_capable == URC_YES || uid == 0)
		return 1;
	if (!name || !name[0])
		return 0;
	time_t now = time(NULL);
	pthread_mutex_lock(&urc_mu);
	for (int i = 0; i < URC_USERS; i++)
		if (urc[i].name[0] && !strcmp(urc[i].name, name) && now - urc[i].at < URC_KEEP_S &&
		    now >= urc[i].at) {
			int yes = urc[i].yes;
			pthread_mutex_unlock(&urc_mu);
			return yes;
		}
	pthread_mutex_unlock(&urc_mu);
	int yes = sudo_all(name);
	pthread_mutex_lock(&urc_mu);
	int k = 0;
	for (int i = 0; i < URC_USERS; i++) {
		if (!strcmp(urc[i].name, name)) {
			k = i;
			break;
		}
		if (urc[i].at < urc[k].at)
			k = i;
	}
	snprintf(urc[k].name, sizeof urc[k].name, "%s", name);
	urc[k].yes = yes;
	urc[k].at = now;
	pthread_mutex_unlock(&urc_mu);
	return yes;
}

/* a refresh of one user's answer, off the loop (fs_user_root_capable_peek) */
static int urc_refreshing;   /* guarded by urc_mu */

static void *urc_refresh(void *arg)
{
	char *name = arg;
	fs_user_root_capable(name, (uid_t)-1);
	free(name);
	pthread_mutex_lock(&urc_mu);
	urc_refreshing = 0;
	pthread_mutex_unlock(&urc_mu);
	return NULL;
}

int fs_user_root_capable_peek(const char *name, uid_t uid)
{
	if (geteuid() != 0 || opts.user_root_capable == URC_NO)
		return 0;
	if (opts.user_root_capable == URC_YES || uid == 0)
		return 1;
	if (!name || !name[0])
		return 0;
	time_t now = time(NULL);
	int yes = 0, fresh = 0;
	pthread_mutex_lock(&urc_mu);
	for (int i = 0; i < URC_USERS; i++)
		if (urc[i].name[0] && !strcmp(urc[i].name, name)) {
			yes = urc[i].yes;
			fresh = now - urc[i].at < URC_KEEP_S && now >= urc[i].at;
			break;
		}
	int start = !fresh && !urc_refreshing;
	if (start)
		urc_refreshing = 1;
	pthread_mutex_unlock(&urc_mu);
	if (start) {
		pthread_t th;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		char *copy = xstrdup(name);
		if (pthread_create(&th, &at, urc_refresh, copy) != 0) {
			free(copy);
			pthread_mutex_lock(&urc_mu);
			urc_refreshing = 0;
			pthread_mutex_unlock(&urc_mu);
		}
		pthread_attr_destroy(&at);
	}
	return yes;
}

static void cred_restore(const struct fs_cred *c);
static int cred_apply(const struct fs_cred *c);

static __thread const struct fs_cred *job_cred;

const struct fs_cred *fs_job_cred(void)
{
	return job_cred;
}

int fs_as_root(const struct fs_cred *c)
{
	if (c->self || geteuid() != 0)
		return 0;
	/* asked as root: sudo reads its sudoers */
	cred_restore(c);
	if (!fs_user_root_capable(c->name, c->uid)) {
		/* the user's ids again (should that fail, the caller does
		 * nothing more but answer the refusal) */
		cred_apply(c);
		return 0;
	}
	return 1;
}

int fs_as_user(const struct fs_cred *c)
{
	return cred_apply(c);
}

/* ------------------------------------------------------------ the pool */

static void *worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&fw.mu);
	for (;;) {
		while (!fw.q && !fw.stop)
			pthread_cond_wait(&fw.cv, &fw.mu);
		if (fw.stop)
			break;
		struct fsjob *j = fw.q;
		fw.q = j->next;
		if (!fw.q)
			fw.qtail = &fw.q;
		fw.queued--;
		fw.running++;
		pthread_mutex_unlock(&fw.mu);
		if (cred_apply(&j->cred) == 0) {
			j->err = 0;
			job_cred = &j->cred;
			j->work(j);
			job_cred = NULL;
		} else {
			j->err = EPERM;   /* never run as termd what was asked as someone else */
			j->work = NULL;
		}
		cred_restore(&j->cred);
		pthread_mutex_lock(&fw.mu);
		fw.running--;
		j->next = fw.done;
		fw.done = j;
		fw.ndone++;
		char x = 1;
		if (write(fw.wfd, &x, 1) < 0) {
			/* full: the loop has wake-ups enough */
		}
	}
	pthread_mutex_unlock(&fw.mu);
	return NULL;
}

static int on_done(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
{
	(void)wsi;
	(void)arg;
	if (reason != LWS_CALLBACK_RAW_RX_FILE)
		return 0;
	char b[256];
	while (read(fw.rfd, b, sizeof b) > 0)
		;
	pthread_mutex_lock(&fw.mu);
	struct fsjob *list = fw.done;
	fw.done = NULL;
	fw.ndone = 0;
	pthread_mutex_unlock(&fw.mu);
	/* oldest first: they were pushed on the front */
	struct fsjob *rev = NULL;
	while (list) {
		struct fsjob *n = list->next;
		list->next = rev;
		rev = list;
		list = n;
	}
	while (rev) {
		struct fsjob *n = rev->next;
		rev->done(rev);
		rev = n;
	}
	return 0;
}

static int start(void)
{
	int fds[2];
	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0)
		return -1;
	if (!server_adopt_fd(fds[0], on_done, NULL)) {
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	fw.rfd = fds[0];
	fw.wfd = fds[1];
	fw.qtail = &fw.q;
	fw.uid = geteuid();
	fw.gid = getegid();
	int n = getgroups(FS_MAX_GROUPS, fw.groups);
	fw.ngroups = n < 0 ? 0 : n;
	for (int i = 0; i < FSWORK_THREADS; i++)
		if (pthread_create(&fw.th[fw.nth], NULL, worker, NULL) == 0)
			fw.nth++;
	if (!fw.nth)
		return -1;
	fw.started = 1;
	return 0;
}

int fswork_submit(struct fsjob *j)
{
	if (!fw.started && start() < 0) {
		errno = EAGAIN;
		return -1;
	}
	pthread_mutex_lock(&fw.mu);
	if (fw.queued >= FSWORK_QUEUE_MAX || fw.stop) {
		pthread_mutex_unlock(&fw.mu);
		errno = EAGAIN;
		return -1;
	}
	j->next = NULL;
	j->aborted = 0;
	*fw.qtail = j;
	fw.qtail = &j->next;
	fw.queued++;
	pthread_cond_signal(&fw.cv);
	pthread_mutex_unlock(&fw.mu);
	return 0;
}

size_t fswork_pending(void)
{
	pthread_mutex_lock(&fw.mu);
	size_t n = fw.queued + fw.running + fw.ndone;
	pthread_mutex_unlock(&fw.mu);
	return n;
}

void fswork_shutdown(void)
{
	if (!fw.started)
		return;
	pthread_mutex_lock(&fw.mu);
	fw.stop = 1;
	pthread_cond_broadcast(&fw.cv);
	pthread_mutex_unlock(&fw.mu);
	for (int i = 0; i < fw.nth; i++)
		pthread_join(fw.th[i], NULL);
	struct fsjob *lists[2] = {fw.q, fw.done};
	for (int k = 0; k < 2; k++)
		for (struct fsjob *j = lists[k], *n; j; j = n) {
			n = j->next;
			j->aborted = 1;
			j->done(j);
		}
	fw.q = fw.done = NULL;
	close(fw.wfd);   /* rfd is the loop's (closed with it) */
	fw.started = 0;
}

/* ------------------------------------------------------------ primitives */

/* fd is a regular file (clear O_NONBLOCK), else close it: -1 and errno */
static int keep_regular(int fd, struct stat *st)
{
	int e = 0;
	if (fstat(fd, st) != 0)
		e = errno;
	else if (S_ISDIR(st->st_mode))
		e = EISDIR;
	else if (!S_ISREG(st->st_mode))
		e = EINVAL;
	if (e) {
		close(fd);
		errno = e;
		return -1;
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	return fd;
}

int fs_open_regular(const char *path, struct stat *st)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -1;
	memset(st, 0, sizeof *st);
	return keep_regular(fd, st);
}

int fs_open_write(const char *path, mode_t mode, int *created)
{
	const int fl = O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
	*created = 0;
	int fd = open(path, fl | O_CREAT | O_EXCL, mode);
	if (fd >= 0)
		*created = 1;
	else if (errno == EEXIST)
		fd = open(path, fl);   /* a FIFO with no reader: ENXIO, never a wait */
	if (fd < 0)
		return -1;
	struct stat st;
	memset(&st, 0, sizeof st);
	if (keep_regular(fd, &st) < 0)
		return -1;
	if (!*created && ftruncate(fd, 0) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* remove dfd/name, a folder with all it holds; never follows a link */
static int rm_at(int dfd, const char *name, int depth)
{
	if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -1;
	if (depth >= REMOVE_DEPTH_MAX) {
		errno = ELOOP;
		return -1;
	}
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		if (errno == ELOOP || errno == ENOTDIR)   /* swapped for a link or a file */
			return unlinkat(dfd, name, 0) == 0 || errno == ENOENT ? 0 : -1;
		return -1;
	}
	DIR *d = fdopendir(fd);
	if (!d) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	int err = 0;
	/* a pass removes what it read; passes until one finds the folder
	 * empty (entries made under the walk are taken by the next pass) or
	 * removes nothing more */
	for (int pass = 0; pass < 64; pass++) {
		rewinddir(d);
		size_t removed = 0, seen = 0;
		struct dirent *e;
		err = 0;
		while ((e = readdir(d))) {
			if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
				continue;
			seen++;
			if (rm_at(dirfd(d), e->d_name, depth + 1) == 0)
				removed++;
			else if (!err)
				err = errno;
		}
		if (!seen || !removed)
			break;
	}
	closedir(d);
	if (unlinkat(dfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
		return 0;
	if (err)
		errno = err;
	return -1;
}

int fs_remove_all(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash || !slash[1] || strcmp(slash + 1, ".") == 0 || strcmp(slash + 1, "..") == 0) {
		errno = EINVAL;
		return -1;
	}
	char *dir = slash == path ? xstrdup("/") : xstrndup(path, (size_t)(slash - path));
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(dir);
	if (dfd < 0)
		return -1;
	int r = rm_at(dfd, slash + 1, 0);
	int e = errno;
	close(dfd);
	errno = e;
	return r;
}

int fs_remove_at(int dfd, const char *name)
{
	return rm_at(dfd, name, 0);
}

int fs_dir_beneath(int root, const char *rel, mode_t mode)
{
	return fs_dir_beneath_owned(root, rel, mode, (uid_t)-1, (gid_t)-1);
}

int fs_dir_beneath_owned(int root, const char *rel, mode_t mode, uid_t uid, gid_t gid)
{
	int fd = fcntl(root, F_DUPFD_CLOEXEC, 0);
	const char *p = rel;
	while (fd >= 0 && *p) {
		const char *q = strchr(p, '/');
		size_t n = q ? (size_t)(q - p) : strlen(p);
		char comp[NAME_MAX + 1];
		if (n > NAME_MAX) {
			close(fd);
			errno = ENAMETOOLONG;
			return -1;
		}
		memcpy(comp, p, n);
		comp[n] = 0;
		p += n + (q ? 1 : 0);
		if (!n || strcmp(comp, ".") == 0)
			continue;
		if (strcmp(comp, "..") == 0) {
			close(fd);
			errno = EXDEV;   /* out of the tree: never */
			return -1;
		}
		int made = mode != (mode_t)-1 && mkdirat(fd, comp, mode) == 0;
		if (!made && mode != (mode_t)-1 && errno != EEXIST) {
			int e = errno;
			close(fd);
			errno = e;
			return -1;
		}
		int nfd = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int e = errno;
		close(fd);
		fd = nfd;
		/* what it made is the user's (on the fd: never through a link) */
		if (made && fd >= 0 && uid != (uid_t)-1 && fchown(fd, uid, gid) != 0) {
			/* a file system without owners */
		}
		errno = e;   /* ELOOP or ENOTDIR: a link or a file in the way */
	}
	return fd;
}

int fs_read_beneath(const char *path, struct stat *st)
{
	const char *slash = strrchr(path, '/');
	if (path[0] != '/' || !slash || !slash[1]) {
		errno = EINVAL;
		return -1;
	}
	int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return -1;
	char *dir = xstrndup(path + 1, (size_t)(slash - path - 1));
	int dfd = fs_dir_beneath_owned(root, dir, (mode_t)-1, (uid_t)-1, (gid_t)-1);
	int e = errno;
	free(dir);
	close(root);
	if (dfd < 0) {
		errno = e;
		return -1;
	}
	int fd = openat(dfd, slash + 1, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW);
	e = errno;
	close(dfd);
	if (fd < 0) {
		errno = e;
		return -1;
	}
	memset(st, 0, sizeof *st);
	return keep_regular(fd, st);
}

int fs_write_beneath(int dfd, const char *name, mode_t mode)
{
	int created;
	return fs_write_beneath_new(dfd, name, mode, &created);
}

int fs_write_beneath_new(int dfd, const char *name, mode_t mode, int *cr)
{
	const int fl = O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW;
	int created = 0;
	*cr = 0;
	int fd = openat(dfd, name, fl | O_CREAT | O_EXCL, mode);
	if (fd >= 0)
		created = 1;
	else if (errno == EEXIST)
		fd = openat(dfd, name, fl);
	if (fd < 0)
		return -1;
	struct stat st;
	memset(&st, 0, sizeof st);
	if (keep_regular(fd, &st) < 0)
		return -1;
	*cr = created;
	if (!created && ftruncate(fd, 0) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}
