/* watch.c — file watching (PROTOCOL.md §4 Watching files, 1.2): the
 * `watch`, `watch.stop` and `watch.list` actions, each watch a folder (and
 * with `recursive` the folders below it, those made later too) followed by
 * one inotify descriptor in termd's loop; what changes comes out as
 * `watch.event` events on the stream (create, write, remove, rename,
 * chmod; names relative to the watched folder), the folder's own removal
 * as `watch.end`. A front door follows a watch it started through a sink
 * (watch_sink): e2b's WatchDir and polled watchers. Watches last until
 * stopped, whoever is connected. */
#include "action.h"

#include <dirent.h>
#include <errno.h>
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

struct wdir {
	int wd;
	char *rel;                /* "" for the watched folder itself */
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
	watch_sink_fn *sink;
	void *sink_user;
};

static struct watch *watches;
static unsigned long long nwatch;

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
	for (size_t i = 0; i < w->ndirs; i++)
		free(w->dirs[i].rel);
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

/* follow root/rel, and the folders below it when recursive: 0, or -1 with
 * errno when rel itself cannot be watched. announce: rel is new, and what
 * is in it already was made before it was followed: each entry is told as
 * created (a program that makes a/b/c at once is seen whole). */
static int add_dir(struct watch *w, const char *rel, int announce)
{
	if (w->ndirs >= WATCH_MAX_DIRS) {
		w->truncated = 1;
		return 0;
	}
	char *full = join(w->root, rel);
	/* the watched folder may be a symlink to one (followed, as stat
	 * decided); below it nothing is followed */
	int wd = inotify_add_watch(w->fd, full, rel[0] ? WATCH_MASK : WATCH_MASK & ~IN_DONT_FOLLOW);
	if (wd < 0) {
		int e = errno;
		free(full);
		errno = e;
		return -1;
	}
	int known = 0;
	for (size_t i = 0; i < w->ndirs; i++)
		if (w->dirs[i].wd == wd) {   /* the same folder under a new name */
			free(w->dirs[i].rel);
			w->dirs[i].rel = xstrdup(rel);
			known = 1;
		}
	if (!known) {
		w->dirs = xrealloc(w->dirs, (w->ndirs + 1) * sizeof *w->dirs);
		w->dirs[w->ndirs].wd = wd;
		w->dirs[w->ndirs].rel = xstrdup(rel);
		w->ndirs++;
	}
	DIR *d = w->recursive ? opendir(full) : NULL;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char *sub = join(rel, e->d_name);
		char *subfull = join(w->root, sub);
		struct stat sb;
		if (lstat(subfull, &sb) == 0) {
			if (announce)
				emit_event(w, "create", sub, S_ISDIR(sb.st_mode));
			if (S_ISDIR(sb.st_mode))
				add_dir(w, sub, announce);
		}
		free(subfull);
		free(sub);
	}
	if (d)
		closedir(d);
	free(full);
	return 0;
}

static const char *dir_of(struct watch *w, int wd)
{
	for (size_t i = 0; i < w->ndirs; i++)
		if (w->dirs[i].wd == wd)
			return w->dirs[i].rel;
	return NULL;
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

/* what inotify has now; 1 once the watch ended (w freed) */
static int read_events(struct watch *w)
{
	char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
	for (;;) {
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
				add_dir(w, rel, 1);
			free(rel);
		}
	}
}

static int watch_fd_event(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
{
	struct watch *w = arg;
	if (reason == LWS_CALLBACK_RAW_RX_FILE) {
		if (!w)
			return -1;
		read_events(w);
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
		read_events(w);
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
	if (w->fd < 0 || add_dir(w, "", 0) != 0) {
		int e = errno;
		watch_free(w);
		return act_error(a, e == EMFILE || e == ENOSPC ? TD_ERR_TOO_LARGE : TD_ERR_IO_ERROR,
				 "cannot watch %s: %s", root, strerror(e));
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

void watch_shutdown(void)
{
	while (watches)
		watch_free(watches);
}
