/* watch.c — file watching (PROTOCOL.md §4 Watching files, 1.2): the
 * `watch`, `watch.stop` and `watch.list` actions, each watch a folder (and
 * with `recursive` the folders below it, those made later too) followed by
 * one inotify descriptor in termd's loop; what changes comes out as
 * `watch.event` events on the stream (create, write, remove, rename,
 * chmod; names relative to the watched folder), the folder's own removal
 * as `watch.end`. A front door follows a watch it started through a sink
 * (watch_sink): e2b's WatchDir and polled watchers. Watches last until
 * stopped, whoever is connected. All watches together follow at most a
 * budget of folders (half the kernel's fs.inotify.max_user_watches, or
 * --max-watch-dirs): the kernel's watches are per user, and termd taking
 * them all would starve every other program of its user. A tree made or
 * moved into a recursive watch is walked a slice at a time, between turns
 * of the loop. */
#include "action.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define WATCH_MASK (IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | \
		    IN_ATTRIB | IN_DELETE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)
#define WATCH_MAX_DIRS 8192   /* folders one watch follows */
#define WATCHES_MAX 64        /* inotify allows 128 instances per user by default */
#define WALK_SLICE 256        /* entries of a new tree looked at per turn of the loop */
#define READS_PER_TURN 8      /* inotify reads (16 KiB each) per turn of the loop */

struct wdir {
	int wd;
	char *rel;                /* "" for the watched folder itself */
};

/* a folder whose entries are still to be told (its own watch is on) */
struct walk {
	struct walk *next;
	char *rel;
};

struct watch {
	struct watch *next;
	char id[32];
	char *root;
	int recursive;
	int fd;
	struct lws *wsi;
	struct wdir *dirs;
	size_t ndirs;
	int truncated;            /* more folders than WATCH_MAX_DIRS */
	int limited;              /* watch.limit said for the folders not followed */
	watch_sink_fn *sink;
	void *sink_user;
	/* a new tree told a slice at a time: folders to read (a stack), the
	 * one being read */
	struct walk *todo;
	DIR *walk_dir;
	char *walk_rel;
	int walking;              /* in walk_slice now */
	lws_sorted_usec_list_t walk_sul;
};

static struct watch *watches;
static unsigned long long nwatch;
static size_t dirs_total;     /* folders all watches follow: the kernel's watches */
static size_t dirs_budget;    /* ... at most (0: not worked out yet) */
static size_t kernel_max;     /* fs.inotify.max_user_watches (0: unknown) */

/* --max-watch-dirs, else half of what the kernel allows termd's user */
static size_t budget(void)
{
	if (dirs_budget)
		return dirs_budget;
	FILE *f = fopen("/proc/sys/fs/inotify/max_user_watches", "re");
	unsigned long long n = 0;
	if (f) {
		if (fscanf(f, "%llu", &n) != 1)
			n = 0;
		fclose(f);
	}
	kernel_max = (size_t)n;
	if (opts.max_watch_dirs)
		dirs_budget = opts.max_watch_dirs;
	else
		dirs_budget = n >= 2 ? (size_t)n / 2 : 4096;   /* 8192, the old default, halved */
	return dirs_budget;
}

static struct watch *find(const char *id)
{
	for (struct watch *w = watches; id && w; w = w->next)
		if (strcmp(w->id, id) == 0)
			return w;
	return NULL;
}

static void watch_free(struct watch *w)
{
	for (struct watch **pp = &watches; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	if (w->wsi) {
		struct lws *x = w->wsi;
		w->wsi = NULL;
		lws_set_opaque_user_data(x, NULL);
		lws_set_timeout(x, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
	} else if (w->fd >= 0) {
		close(w->fd);
	}
	lws_sul_cancel(&w->walk_sul);
	while (w->todo) {
		struct walk *k = w->todo;
		w->todo = k->next;
		free(k->rel);
		free(k);
	}
	if (w->walk_dir)
		closedir(w->walk_dir);
	free(w->walk_rel);
	for (size_t i = 0; i < w->ndirs; i++)
		free(w->dirs[i].rel);
	dirs_total -= w->ndirs;
	free(w->dirs);
	free(w->root);
	free(w);
}

static char *join(const char *a, const char *b)
{
	buf_t x = {0};
	buf_puts(&x, a);
	if (*a && *b && a[strlen(a) - 1] != '/')
		buf_putc(&x, '/');
	buf_puts(&x, b);
	return buf_steal(&x);
}

static void emit_event(struct watch *w, const char *type, const char *rel, int is_dir);
static void walk_slice(struct watch *w);

/* a folder below the watch is not followed (the budget, or the watch's
 * own limit): watch.limit says so once, until one is followed again */
static void limit_note(struct watch *w, const char *rel, const char *reason)
{
	if (w->limited)
		return;
	w->limited = 1;
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "watch", w->id);
	cJSON_AddStringToObject(ex, "name", rel);
	char *full = join(w->root, rel);
	cJSON_AddStringToObject(ex, "path", full);
	free(full);
	cJSON_AddStringToObject(ex, "reason", reason);
	cJSON_AddNumberToObject(ex, "folders", (double)dirs_total);
	cJSON_AddNumberToObject(ex, "budget", (double)budget());
	events_emit(NULL, NULL, "watch.limit", "", ex);
}

/* Follow root/rel with inotify (not what is below it): 0, 1 when it was
 * followed already (the same folder under a new name), -1 with errno when
 * inotify refused, -2 past WATCH_MAX_DIRS, -3 past the budget. */
static int watch_one(struct watch *w, const char *rel)
{
	if (w->ndirs >= WATCH_MAX_DIRS) {
		w->truncated = 1;
		return -2;
	}
	if (dirs_total >= budget())
		return -3;
	char *full = join(w->root, rel);
	/* the watched folder may be a symlink to one (followed, as stat
	 * decided); below it nothing is followed */
	int wd = inotify_add_watch(w->fd, full, rel[0] ? WATCH_MASK : WATCH_MASK & ~IN_DONT_FOLLOW);
	int e = errno;
	free(full);
	if (wd < 0) {
		errno = e;
		return -1;
	}
	for (size_t i = 0; i < w->ndirs; i++)
		if (w->dirs[i].wd == wd) {   /* the same folder under a new name */
			free(w->dirs[i].rel);
			w->dirs[i].rel = xstrdup(rel);
			return 1;
		}
	w->dirs = xrealloc(w->dirs, (w->ndirs + 1) * sizeof *w->dirs);
	w->dirs[w->ndirs].wd = wd;
	w->dirs[w->ndirs].rel = xstrdup(rel);
	w->ndirs++;
	dirs_total++;
	w->limited = 0;
	return 0;
}

/* A folder inside the watch, made or moved in: followed now, its entries
 * told (and its folders followed) a slice at a time by walk_slice: the
 * first slice at once (a small tree is told whole before what inotify
 * says next), the rest a turn of the loop at a time, so a tree of 44k
 * entries moved in does not stop the loop (what happens meanwhile is
 * told as it comes, between the slices). */
static void follow_new(struct watch *w, const char *rel)
{
	int r = watch_one(w, rel);
	if (r == -2 || r == -3) {
		limit_note(w, rel, r == -2 ? "the watch follows 8192 folders, its limit"
				  : "termd follows as many folders as its budget allows "
				    "(half the kernel's fs.inotify.max_user_watches, or --max-watch-dirs)");
		return;
	}
	if (r < 0)
		return;   /* gone already, or unreadable */
	struct walk *k = xcalloc(1, sizeof *k);
	k->rel = xstrdup(rel);
	int idle = !w->todo && !w->walk_dir;
	k->next = w->todo;
	w->todo = k;
	if (idle && !w->walking)
		walk_slice(w);
}

static void walk_timer(lws_sorted_usec_list_t *sul)
{
	walk_slice(lws_container_of(sul, struct watch, walk_sul));
}

/* one slice of the walk: at most WALK_SLICE entries told, the rest on the
 * next turn */
static void walk_slice(struct watch *w)
{
	w->walking = 1;
	for (int n = 0; n < WALK_SLICE;) {
		if (!w->walk_dir) {
			struct walk *k = w->todo;
			if (!k) {
				w->walking = 0;
				return;   /* all told */
			}
			w->todo = k->next;
			free(w->walk_rel);
			w->walk_rel = k->rel;
			free(k);
			char *full = join(w->root, w->walk_rel);
			w->walk_dir = opendir(full);
			free(full);
			continue;
		}
		struct dirent *e = readdir(w->walk_dir);
		if (!e) {
			closedir(w->walk_dir);
			w->walk_dir = NULL;
			continue;
		}
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		n++;
		char *sub = join(w->walk_rel, e->d_name);
		char *subfull = join(w->root, sub);
		struct stat sb;
		if (lstat(subfull, &sb) == 0) {
			/* what is in it already was made before it was followed:
			 * each entry is told as created (a/b/c made at once is
			 * seen whole) */
			emit_event(w, "create", sub, S_ISDIR(sb.st_mode));
			if (S_ISDIR(sb.st_mode))
				follow_new(w, sub);
		}
		free(subfull);
		free(sub);
	}
	w->walking = 0;
	server_timer(&w->walk_sul, walk_timer, 1);   /* the rest next turn */
}

/* The watched folder and, when recursive, every folder below it, at once
 * (nothing is told): 0, or -1 with errno when the folder itself cannot be
 * watched, -3 past the budget. */
static int add_tree(struct watch *w, const char *rel)
{
	int r = watch_one(w, rel);
	if (r == -1 || r == -3)
		return r;
	if (r < 0 || !w->recursive)
		return 0;
	char *full = join(w->root, rel);
	DIR *d = opendir(full);
	free(full);
	struct dirent *e;
	int res = 0;
	while (d && res == 0 && (e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		int isdir = e->d_type == DT_DIR;
		char *sub = join(rel, e->d_name);
		if (e->d_type == DT_UNKNOWN) {
			char *subfull = join(w->root, sub);
			struct stat sb;
			isdir = lstat(subfull, &sb) == 0 && S_ISDIR(sb.st_mode);
			free(subfull);
		}
		if (isdir && add_tree(w, sub) == -3)
			res = -3;
		free(sub);
	}
	if (d)
		closedir(d);
	return res;
}

static const char *dir_of(struct watch *w, int wd)
{
	for (size_t i = 0; i < w->ndirs; i++)
		if (w->dirs[i].wd == wd)
			return w->dirs[i].rel;
	return NULL;
}

/* the kernel dropped wd (its folder was removed): no longer counted */
static void forget_dir(struct watch *w, int wd)
{
	for (size_t i = 0; i < w->ndirs; i++)
		if (w->dirs[i].wd == wd) {
			free(w->dirs[i].rel);
			w->dirs[i] = w->dirs[--w->ndirs];
			dirs_total--;
			return;
		}
}

static void emit_event(struct watch *w, const char *type, const char *rel, int is_dir)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "watch", w->id);
	cJSON_AddStringToObject(ex, "type", type);
	cJSON_AddStringToObject(ex, "name", rel);
	char *full = join(w->root, rel);
	cJSON_AddStringToObject(ex, "path", full);
	free(full);
	cJSON_AddBoolToObject(ex, "is_dir", is_dir);
	events_emit(NULL, NULL, "watch.event", "", ex);
	if (w->sink)
		w->sink(w->sink_user, w->id, type, rel, is_dir);
}

/* the watched folder itself is gone: watch.end, the sink told, w freed */
static void watch_ended(struct watch *w, const char *reason)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "watch", w->id);
	cJSON_AddStringToObject(ex, "path", w->root);
	cJSON_AddStringToObject(ex, "reason", reason);
	events_emit(NULL, NULL, "watch.end", "", ex);
	watch_sink_fn *sink = w->sink;
	void *user = w->sink_user;
	char id[sizeof w->id];
	snprintf(id, sizeof id, "%s", w->id);
	watch_free(w);
	if (sink)
		sink(user, id, NULL, NULL, 0);
}

/* what inotify has now (at most max_reads reads: the loop's fd call
 * comes back for the rest); 1 once the watch ended (w freed) */
static int read_events(struct watch *w, int max_reads)
{
	char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
	for (int reads = 0; reads < max_reads; reads++) {
		ssize_t n = read(w->fd, buf, sizeof buf);
		if (n <= 0)
			return 0;
		for (char *p = buf; p < buf + n;) {
			struct inotify_event *ev = (struct inotify_event *)p;
			p += sizeof *ev + ev->len;
			const char *dir = dir_of(w, ev->wd);
			if (!dir || (ev->mask & IN_Q_OVERFLOW))
				continue;
			if ((ev->mask & IN_DELETE_SELF) && !dir[0]) {
				watch_ended(w, "the watched folder was removed");
				return 1;
			}
			if (ev->mask & IN_IGNORED) {
				forget_dir(w, ev->wd);
				continue;
			}
			if (!ev->len)
				continue;
			char *rel = join(dir, ev->name);
			int is_dir = (ev->mask & IN_ISDIR) != 0;
			const char *type = NULL;
			if (ev->mask & (IN_CREATE | IN_MOVED_TO))
				type = "create";
			else if (ev->mask & IN_MODIFY)
				type = "write";
			else if (ev->mask & IN_DELETE)
				type = "remove";
			else if (ev->mask & IN_MOVED_FROM)
				type = "rename";
			else if (ev->mask & IN_ATTRIB)
				type = "chmod";
			if (type)
				emit_event(w, type, rel, is_dir);
			/* a new folder is followed, and what is in it already told */
			if ((ev->mask & (IN_CREATE | IN_MOVED_TO)) && is_dir && w->recursive)
				follow_new(w, rel);
			free(rel);
		}
	}
	return 0;
}

static int watch_fd_event(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
{
	struct watch *w = arg;
	if (reason == LWS_CALLBACK_RAW_RX_FILE) {
		if (!w)
			return -1;
		read_events(w, READS_PER_TURN);
	} else if (reason == LWS_CALLBACK_RAW_CLOSE_FILE && w && w->wsi == wsi) {
		w->wsi = NULL;
		w->fd = -1;
	}
	return 0;
}

/* ------------------------------------------------------------ for doors */

int watch_sink(const char *id, watch_sink_fn *fn, void *user)
{
	struct watch *w = find(id);
	if (!w)
		return -1;
	w->sink = fn;
	w->sink_user = user;
	return 0;
}

void watch_poll(const char *id)
{
	struct watch *w = find(id);
	if (w && w->fd >= 0)
		read_events(w, 64);
}

/* ------------------------------------------------------------ actions */

static cJSON *watch_json(const struct watch *w)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "watch", w->id);
	cJSON_AddStringToObject(o, "path", w->root);
	cJSON_AddBoolToObject(o, "recursive", w->recursive);
	return o;
}

static int watch_action(struct act *a)
{
	const char *p = NULL;
	int recursive = 0;
	if (arg_string(a, "path", &p, 1) < 0 || arg_bool(a, "recursive", &recursive) < 0)
		return -1;
	if (!*p)
		return act_error(a, TD_ERR_BAD_REQUEST, "argument 'path' is empty");
	int n = 0;
	for (struct watch *x = watches; x; x = x->next)
		n++;
	if (n >= WATCHES_MAX)
		return act_error(a, TD_ERR_TOO_LARGE,
				 "termd already has %d watches, its limit; stop one first (watch.stop)",
				 WATCHES_MAX);
	char *root = files_resolve(p);
	struct stat sb;
	if (!root || stat(root, &sb) != 0) {
		int e = root ? errno : ENOENT;
		cJSON *ex = cJSON_CreateObject();
		cJSON_AddStringToObject(ex, "path", root ? root : p);
		cJSON_AddStringToObject(ex, "errno", fsops_errno_name(e));
		act_error_extras(a, e == ENOENT || e == ENOTDIR ? TD_ERR_NOT_FOUND : TD_ERR_IO_ERROR,
				 ex, "cannot watch %s: %s", root ? root : p, strerror(e));
		free(root);
		return -1;
	}
	if (!S_ISDIR(sb.st_mode)) {
		cJSON *ex = cJSON_CreateObject();
		cJSON_AddStringToObject(ex, "path", root);
		cJSON_AddStringToObject(ex, "errno", "ENOTDIR");
		act_error_extras(a, TD_ERR_BAD_REQUEST, ex, "cannot watch %s: not a folder", root);
		free(root);
		return -1;
	}
	struct watch *w = xcalloc(1, sizeof *w);
	w->root = root;
	w->recursive = recursive;
	snprintf(w->id, sizeof w->id, "watch-%llu", ++nwatch);
	w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	int r = w->fd < 0 ? -1 : add_tree(w, "");
	if (r != 0) {
		int e = errno;
		size_t had = dirs_total - w->ndirs;
		cJSON *ex = cJSON_CreateObject();
		cJSON_AddStringToObject(ex, "path", root);
		/* (the message is made before w, and root with it, is freed) */
		if (r == -3) {
			cJSON_AddNumberToObject(ex, "folders", (double)had);
			cJSON_AddNumberToObject(ex, "budget", (double)budget());
			act_error_extras(a, TD_ERR_TOO_LARGE, ex,
					 "cannot watch %s: with its folders termd would follow more than "
					 "%zu (%zu already), its budget: half the kernel's "
					 "fs.inotify.max_user_watches (%zu), or --max-watch-dirs; stop a "
					 "watch or watch less", root, budget(), had, kernel_max);
		} else {
			cJSON_AddStringToObject(ex, "errno", e == EMFILE ? "EMFILE" : e == ENFILE ? "ENFILE" :
						e == ENOMEM ? "ENOMEM" : fsops_errno_name(e));
			act_error_extras(a, e == EMFILE || e == ENOSPC || e == ENFILE ? TD_ERR_TOO_LARGE :
					    e == ENOENT || e == ENOTDIR ? TD_ERR_NOT_FOUND : TD_ERR_IO_ERROR,
					 ex, "cannot watch %s: %s", root, strerror(e));
		}
		watch_free(w);
		return -1;
	}
	w->wsi = server_adopt_fd(w->fd, watch_fd_event, w);
	if (!w->wsi) {
		watch_free(w);
		return act_error(a, TD_ERR_INTERNAL, "cannot follow the inotify descriptor");
	}
	w->next = watches;
	watches = w;
	cJSON *ex = watch_json(w);
	if (w->truncated)
		cJSON_AddNumberToObject(ex, "folders_followed", (double)w->ndirs);
	events_emit(a->conn, a->id, "watch", "", ex);
	return 0;
}

static int watch_stop_action(struct act *a)
{
	const char *id = NULL;
	if (arg_string(a, "watch", &id, 1) < 0)
		return -1;
	struct watch *w = find(id);
	if (!w)
		return act_error(a, TD_ERR_NOT_FOUND, "no watch '%.32s' (it was stopped, or its "
				 "folder removed: see watch.end)", id);
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "watch", w->id);
	watch_free(w);
	events_emit(a->conn, a->id, "watch.stop", "", ex);
	return 0;
}

static int watch_list_action(struct act *a)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON *arr = cJSON_AddArrayToObject(ex, "watches");
	for (struct watch *w = watches; w; w = w->next)
		cJSON_AddItemToArray(arr, watch_json(w));
	cJSON_AddNumberToObject(ex, "folders", (double)dirs_total);
	cJSON_AddNumberToObject(ex, "budget", (double)budget());
	events_emit(a->conn, a->id, "watch.list", "", ex);
	return 0;
}

void watch_register(void)
{
	static const struct action_def defs[] = {
		{"watch", watch_action, 0},
		{"watch.stop", watch_stop_action, 0},
		{"watch.list", watch_list_action, 0},   /* the contract: a view token uses four actions */
	};
	actions_register(defs, sizeof defs / sizeof defs[0]);
}

/* ---------------------------------------------- upgrade in place */

/* A watch goes across an upgrade in place whole: its id, its inotify
 * descriptor (close-on-exec off: what changes during the exec is queued
 * in the kernel and told after), the folders it follows by watch
 * descriptor, and the folders of a new tree not told yet. A front door's
 * (a sink: envd's WatchDir, its polled watchers) ends: its stream or its
 * watcher's state does not go across. */
static int carried(const struct watch *w)
{
	return !w->sink && w->fd >= 0 && w->wsi;
}

cJSON *watch_handover_save(void)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddNumberToObject(j, "next", (double)nwatch);
	cJSON *arr = cJSON_AddArrayToObject(j, "watches");
	for (struct watch *w = watches; w; w = w->next) {
		if (!carried(w))
			continue;
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "id", w->id);
		cJSON_AddStringToObject(o, "root", w->root);
		cJSON_AddBoolToObject(o, "recursive", w->recursive);
		cJSON_AddNumberToObject(o, "fd", w->fd);
		cJSON_AddBoolToObject(o, "truncated", w->truncated);
		cJSON_AddBoolToObject(o, "limited", w->limited);
		cJSON *d = cJSON_AddArrayToObject(o, "dirs");
		for (size_t i = 0; i < w->ndirs; i++) {
			cJSON *e = cJSON_CreateArray();
			cJSON_AddItemToArray(e, cJSON_CreateNumber(w->dirs[i].wd));
			cJSON_AddItemToArray(e, cJSON_CreateString(w->dirs[i].rel));
			cJSON_AddItemToArray(d, e);
		}
		/* the folder being walked is walked again from its start */
		cJSON *t = cJSON_AddArrayToObject(o, "todo");
		if (w->walk_dir && w->walk_rel)
			cJSON_AddItemToArray(t, cJSON_CreateString(w->walk_rel));
		for (struct walk *k = w->todo; k; k = k->next)
			cJSON_AddItemToArray(t, cJSON_CreateString(k->rel));
		cJSON_AddItemToArray(arr, o);
	}
	return j;
}

void watch_handover_keep(int keep)
{
	for (struct watch *w = watches; w; w = w->next)
		if (carried(w))
			fcntl(w->fd, F_SETFD, keep ? 0 : FD_CLOEXEC);
}

void watch_handover_load(const cJSON *rec)
{
	const cJSON *n = cJSON_GetObjectItem(rec, "next");
	if (cJSON_IsNumber(n) && (unsigned long long)n->valuedouble > nwatch)
		nwatch = (unsigned long long)n->valuedouble;   /* new ids do not repeat old ones */
	const cJSON *o;
	cJSON_ArrayForEach(o, cJSON_GetObjectItem(rec, "watches")) {
		const cJSON *id = cJSON_GetObjectItem(o, "id"), *root = cJSON_GetObjectItem(o, "root");
		const cJSON *fd = cJSON_GetObjectItem(o, "fd");
		if (!cJSON_IsNumber(fd) || fd->valueint < 0)
			continue;
		if (!cJSON_IsString(id) || strlen(id->valuestring) >= sizeof ((struct watch *)0)->id ||
		    !cJSON_IsString(root) || find(id->valuestring)) {
			close(fd->valueint);
			continue;
		}
		struct watch *w = xcalloc(1, sizeof *w);
		snprintf(w->id, sizeof w->id, "%s", id->valuestring);
		w->root = xstrdup(root->valuestring);
		w->recursive = cJSON_IsTrue(cJSON_GetObjectItem(o, "recursive"));
		w->truncated = cJSON_IsTrue(cJSON_GetObjectItem(o, "truncated"));
		w->limited = cJSON_IsTrue(cJSON_GetObjectItem(o, "limited"));
		w->fd = fd->valueint;
		fcntl(w->fd, F_SETFD, FD_CLOEXEC);
		const cJSON *d;
		cJSON_ArrayForEach(d, cJSON_GetObjectItem(o, "dirs")) {
			const cJSON *wd = cJSON_GetArrayItem(d, 0), *rel = cJSON_GetArrayItem(d, 1);
			if (!cJSON_IsNumber(wd) || !cJSON_IsString(rel))
				continue;
			w->dirs = xrealloc(w->dirs, (w->ndirs + 1) * sizeof *w->dirs);
			w->dirs[w->ndirs].wd = wd->valueint;
			w->dirs[w->ndirs].rel = xstrdup(rel->valuestring);
			w->ndirs++;
			dirs_total++;
		}
		struct walk **tail = &w->todo;
		const cJSON *t;
		cJSON_ArrayForEach(t, cJSON_GetObjectItem(o, "todo")) {
			if (!cJSON_IsString(t))
				continue;
			struct walk *k = xcalloc(1, sizeof *k);
			k->rel = xstrdup(t->valuestring);
			*tail = k;
			tail = &k->next;
		}
		w->wsi = server_adopt_fd(w->fd, watch_fd_event, w);
		w->next = watches;
		watches = w;
		if (!w->wsi) {
			log_warn("watch %s: cannot follow its inotify descriptor after the upgrade", w->id);
			watch_ended(w, "termd could not follow it after an upgrade in place");
			continue;
		}
		if (w->todo)
			server_timer(&w->walk_sul, walk_timer, 1);
		read_events(w, READS_PER_TURN);   /* what changed during the exec */
	}
}

void watch_shutdown(void)
{
	while (watches)
		watch_free(watches);
}
