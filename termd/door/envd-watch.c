/* envd-watch.c — envd's filesystem.Filesystem/WatchDir: a server stream
 * of a folder's changes from inotify (one inotify descriptor per stream,
 * in termd's loop), recursive on request (folders created later are
 * watched too), names relative to the watched folder, fsnotify's event
 * kinds (CREATE, WRITE, REMOVE, RENAME, CHMOD), the entry when asked for;
 * and the polled watchers (CreateWatcher, GetWatcherEvents, RemoveWatcher:
 * the same watch, its events kept until fetched). Not a termd action yet:
 * the event stream does not see it. */
#include "envd.h"

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
#define WATCH_MAX_DIRS 8192
#define WATCHER_MAX_EVENTS 10000  /* a polled watcher's events not fetched yet */
#define WATCHERS_MAX 64

struct wdir {
	int wd;
	char *rel;                /* "" for the watched folder itself */
};

struct watch {
	struct watch *next;
	struct envd_stream *st;
	int fd;
	struct lws *wsi;
	char *root;
	int recursive, include_entry;
	struct wdir *dirs;
	size_t ndirs;
	char id[48];              /* a polled watcher's id ("" for a stream) */
	cJSON *pending;           /* ... its events until fetched */
	int lost;                 /* ... some were dropped (too many) */
};

static struct watch *watches;

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
	cJSON_Delete(w->pending);
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

/* watch root/rel, and below it when recursive */
static void add_dir(struct watch *w, const char *rel)
{
	if (w->ndirs >= WATCH_MAX_DIRS)
		return;
	char *full = join(w->root, rel);
	int wd = inotify_add_watch(w->fd, full, WATCH_MASK);
	if (wd < 0) {
		free(full);
		return;
	}
	int known = 0;
	for (size_t i = 0; i < w->ndirs; i++)
		if (w->dirs[i].wd == wd) {
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
	if (w->recursive) {
		DIR *d = opendir(full);
		struct dirent *e;
		while (d && (e = readdir(d))) {
			if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
				continue;
			char *sub = join(rel, e->d_name);
			char *subfull = join(w->root, sub);
			struct stat sb;
			if (lstat(subfull, &sb) == 0 && S_ISDIR(sb.st_mode))
				add_dir(w, sub);
			free(subfull);
			free(sub);
		}
		if (d)
			closedir(d);
	}
	free(full);
}

static const char *dir_of(struct watch *w, int wd)
{
	for (size_t i = 0; i < w->ndirs; i++)
		if (w->dirs[i].wd == wd)
			return w->dirs[i].rel;
	return NULL;
}

static void send_event(struct watch *w, const char *rel, const char *type)
{
	cJSON *m = cJSON_CreateObject();
	cJSON *f = w->st ? cJSON_AddObjectToObject(m, "filesystem") : m;
	cJSON_AddStringToObject(f, "name", rel);
	cJSON_AddStringToObject(f, "type", type);
	if (w->include_entry) {
		char *full = join(w->root, rel);
		cJSON *e = envd_entry_info(full);
		if (e)
			cJSON_AddItemToObject(f, "entry", e);
		free(full);
	}
	if (w->st) {
		envd_stream_send(w->st, m);
	} else if (cJSON_GetArraySize(w->pending) < WATCHER_MAX_EVENTS) {
		cJSON_AddItemToArray(w->pending, m);
	} else {
		w->lost = 1;
		cJSON_Delete(m);
	}
}

/* returns -1 once the stream ended (w freed) */
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
			if (ev->mask & IN_Q_OVERFLOW)
				continue;
			if (!dir)
				continue;
			if ((ev->mask & IN_DELETE_SELF) && !dir[0] && w->st) {
				/* the watched folder itself went: the stream ends */
				struct envd_stream *st = w->st;
				st->gone = NULL;
				watch_free(w);
				envd_stream_finish(st, EC_NOT_FOUND, "the watched directory was removed");
				return -1;
			}
			if (!ev->len)
				continue;
			char *rel = join(dir, ev->name);
			const char *type = NULL;
			if (ev->mask & (IN_CREATE | IN_MOVED_TO))
				type = "EVENT_TYPE_CREATE";
			else if (ev->mask & IN_MODIFY)
				type = "EVENT_TYPE_WRITE";
			else if (ev->mask & IN_DELETE)
				type = "EVENT_TYPE_REMOVE";
			else if (ev->mask & IN_MOVED_FROM)
				type = "EVENT_TYPE_RENAME";
			else if (ev->mask & IN_ATTRIB)
				type = "EVENT_TYPE_CHMOD";
			if (type)
				send_event(w, rel, type);
			if ((ev->mask & (IN_CREATE | IN_MOVED_TO)) && (ev->mask & IN_ISDIR) && w->recursive)
				add_dir(w, rel);
			free(rel);
		}
	}
}

static int watch_event(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
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

static void stream_gone(struct envd_stream *st)
{
	struct watch *w = st->owner;
	if (w)
		watch_free(w);
	st->owner = NULL;
}

/* the watch a request asks for, in the loop; NULL once it answered */
static struct watch *watch_open(struct envd_call *c)
{
	const char *p = envd_str(c->req, "path", NULL);
	if (!p) {
		envd_fail(c, EC_INVALID_ARGUMENT, "path is required");
		return NULL;
	}
	char *root = envd_path(p);
	struct stat sb;
	if (stat(root, &sb) != 0) {
		int e = errno;
		envd_fail(c, e == ENOENT ? EC_NOT_FOUND : EC_INTERNAL, "cannot watch %s: %s", root,
			  strerror(e));
		free(root);
		return NULL;
	}
	if (!S_ISDIR(sb.st_mode)) {
		envd_fail(c, EC_INVALID_ARGUMENT, "%s is not a directory", root);
		free(root);
		return NULL;
	}
	struct watch *w = xcalloc(1, sizeof *w);
	w->root = root;
	w->recursive = cJSON_IsTrue(envd_field(c->req, "recursive", NULL));
	w->include_entry = cJSON_IsTrue(envd_field(c->req, "includeEntry", "include_entry"));
	w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (w->fd < 0) {
		int e = errno;
		watch_free(w);
		envd_fail(c, EC_RESOURCE_EXHAUSTED, "inotify: %s", strerror(e));
		return NULL;
	}
	add_dir(w, "");
	if (!w->ndirs) {
		int e = errno;
		watch_free(w);
		envd_fail(c, EC_INTERNAL, "cannot watch %s: %s", p, strerror(e));
		return NULL;
	}
	w->wsi = server_adopt_fd(w->fd, watch_event, w);
	if (!w->wsi) {
		watch_free(w);
		envd_fail(c, EC_INTERNAL, "cannot watch the inotify descriptor");
		return NULL;
	}
	w->next = watches;
	watches = w;
	return w;
}

int envd_watch_call(struct envd_call *c)
{
	struct watch *w = watch_open(c);
	if (!w)
		return 0;
	struct envd_stream *st = envd_stream_open(c);
	st->flat_keepalive = 1;
	st->owner = w;
	st->gone = stream_gone;
	w->st = st;
	cJSON *m = cJSON_CreateObject();
	cJSON_AddObjectToObject(m, "start");
	envd_stream_send(st, m);
	return 0;
}

static struct watch *watcher_find(struct envd_call *c)
{
	const char *id = envd_str(c->req, "watcherId", "watcher_id");
	for (struct watch *w = watches; id && w; w = w->next)
		if (w->id[0] && strcmp(w->id, id) == 0)
			return w;
	envd_fail(c, EC_NOT_FOUND, "watcher '%.48s' not found", id ? id : "");
	return NULL;
}

int envd_watcher_call(struct envd_call *c, const char *method)
{
	static unsigned long long n;
	if (strcmp(method, "CreateWatcher") == 0) {
		int count = 0;
		for (struct watch *x = watches; x; x = x->next)
			count += x->id[0] != 0;
		if (count >= WATCHERS_MAX)
			return envd_fail(c, EC_RESOURCE_EXHAUSTED, "%d watchers already", WATCHERS_MAX);
		struct watch *w = watch_open(c);
		if (!w)
			return 0;
		snprintf(w->id, sizeof w->id, "w%llu-%llx", ++n, (unsigned long long)mono_us());
		w->pending = cJSON_CreateArray();
		cJSON *m = cJSON_CreateObject();
		cJSON_AddStringToObject(m, "watcherId", w->id);
		envd_reply(c, m);
		return 0;
	}
	struct watch *w = watcher_find(c);
	if (!w)
		return 0;
	if (strcmp(method, "GetWatcherEvents") == 0) {
		read_events(w);   /* what inotify has now */
		cJSON *m = cJSON_CreateObject();
		cJSON_AddItemToObject(m, "events", w->pending);
		w->pending = cJSON_CreateArray();
		envd_reply(c, m);
	} else {   /* RemoveWatcher */
		watch_free(w);
		envd_reply(c, cJSON_CreateObject());
	}
	return 0;
}

void envd_watch_shutdown(void)
{
	while (watches) {
		struct watch *w = watches;
		if (w->st) {
			w->st->gone = NULL;
			w->st->owner = NULL;
		}
		watch_free(w);
	}
}
