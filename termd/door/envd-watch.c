/* envd-watch.c — envd's filesystem.Filesystem/WatchDir and the polled
 * watchers (CreateWatcher, GetWatcherEvents, RemoveWatcher) on termd's
 * `watch` action (watch.c: inotify, recursive, on the event stream): the
 * door starts and stops the watch through the action layer and follows it
 * through a sink, sending fsnotify's event kinds (CREATE, WRITE, REMOVE,
 * RENAME, CHMOD) with names relative to the watched folder and the entry
 * when asked for; a polled watcher keeps its events until fetched. */
#include "envd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WATCHER_MAX_EVENTS 10000  /* a polled watcher's events not fetched yet */

struct ewatch {
	struct ewatch *next;
	char wid[32];             /* termd's watch */
	struct envd_stream *st;   /* WatchDir's stream (NULL: a polled watcher) */
	char *root;
	int include_entry;
	char id[48];              /* a polled watcher's id */
	cJSON *pending;           /* ... its events until fetched */
};

static struct ewatch *ewatches;

static void ewatch_free(struct ewatch *w)
{
	for (struct ewatch **pp = &ewatches; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	free(w->root);
	cJSON_Delete(w->pending);
	free(w);
}

/* termd's watch stopped (the client left, RemoveWatcher) and w freed */
static void ewatch_stop(struct ewatch *w)
{
	watch_sink(w->wid, NULL, NULL);
	cJSON *args = cJSON_CreateObject();
	cJSON_AddStringToObject(args, "watch", w->wid);
	cJSON_Delete(envd_action("watch.stop", args));
	ewatch_free(w);
}

static const char *fsnotify_kind(const char *type)
{
	static const struct {
		const char *termd, *envd;
	} kinds[] = {
		{"create", "EVENT_TYPE_CREATE"}, {"write", "EVENT_TYPE_WRITE"},
		{"remove", "EVENT_TYPE_REMOVE"}, {"rename", "EVENT_TYPE_RENAME"},
		{"chmod", "EVENT_TYPE_CHMOD"},
	};
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
		if (strcmp(kinds[i].termd, type) == 0)
			return kinds[i].envd;
	return NULL;
}

/* the watch's sink: an event to the stream or the watcher's list; the
 * watch's end ends the stream (a watcher just stops seeing events) */
static void on_watch(void *user, const char *id, const char *type, const char *name, int is_dir)
{
	struct ewatch *w = user;
	(void)id;
	(void)is_dir;
	if (!type) {
		if (w->st) {
			struct envd_stream *st = w->st;
			st->gone = NULL;
			st->owner = NULL;
			ewatch_free(w);
			envd_stream_finish(st, EC_NOT_FOUND, "the watched directory was removed");
		} else {
			w->wid[0] = 0;   /* gone: GetWatcherEvents hands over what is left */
		}
		return;
	}
	const char *kind = fsnotify_kind(type);
	if (!kind)
		return;
	cJSON *m = cJSON_CreateObject();
	cJSON *f = w->st ? cJSON_AddObjectToObject(m, "filesystem") : m;
	cJSON_AddStringToObject(f, "name", name);
	cJSON_AddStringToObject(f, "type", kind);
	if (w->include_entry) {
		buf_t full = {0};
		buf_printf(&full, "%s%s%s", w->root, strcmp(w->root, "/") ? "/" : "", name);
		cJSON *e = envd_entry_info(full.p);
		if (e)
			cJSON_AddItemToObject(f, "entry", e);
		buf_free(&full);
	}
	if (w->st)
		envd_stream_send(w->st, m);
	else if (cJSON_GetArraySize(w->pending) < WATCHER_MAX_EVENTS)
		cJSON_AddItemToArray(w->pending, m);
	else
		cJSON_Delete(m);
}

static void stream_gone(struct envd_stream *st)
{
	struct ewatch *w = st->owner;
	st->owner = NULL;
	if (w)
		ewatch_stop(w);
}

/* termd's watch for the request, followed by a new ewatch; NULL once it
 * answered */
static struct ewatch *ewatch_open(struct envd_call *c)
{
	const char *p = envd_str(c->req, "path", NULL);
	if (!p) {
		envd_fail(c, EC_INVALID_ARGUMENT, "path is required");
		return NULL;
	}
	char *root = envd_path(p);
	cJSON *args = cJSON_CreateObject();
	cJSON_AddStringToObject(args, "path", root);
	cJSON_AddBoolToObject(args, "recursive", cJSON_IsTrue(envd_field(c->req, "recursive", NULL)));
	cJSON *ans = envd_action("watch", args);
	const char *o = envd_str(ans, "observation", NULL);
	const char *wid = envd_str(envd_field(ans, "extras", NULL), "watch", NULL);
	if (!o || strcmp(o, "watch") != 0 || !wid) {
		const char *code = envd_str(envd_field(ans, "extras", NULL), "code", "");
		enum envd_code ec = strcmp(code, "not_found") == 0 ? EC_NOT_FOUND :
				    strcmp(code, "bad_request") == 0 ? EC_INVALID_ARGUMENT :
				    strcmp(code, "too_large") == 0 ? EC_RESOURCE_EXHAUSTED : EC_INTERNAL;
		envd_fail(c, ec, "%s", envd_str(ans, "content", "cannot watch"));
		cJSON_Delete(ans);
		free(root);
		return NULL;
	}
	struct ewatch *w = xcalloc(1, sizeof *w);
	snprintf(w->wid, sizeof w->wid, "%s", wid);
	cJSON_Delete(ans);
	w->root = root;
	w->include_entry = cJSON_IsTrue(envd_field(c->req, "includeEntry", "include_entry"));
	watch_sink(w->wid, on_watch, w);
	w->next = ewatches;
	ewatches = w;
	return w;
}

int envd_watch_call(struct envd_call *c)
{
	struct ewatch *w = ewatch_open(c);
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

static struct ewatch *watcher_find(struct envd_call *c)
{
	const char *id = envd_str(c->req, "watcherId", "watcher_id");
	for (struct ewatch *w = ewatches; id && w; w = w->next)
		if (w->id[0] && strcmp(w->id, id) == 0)
			return w;
	envd_fail(c, EC_NOT_FOUND, "watcher '%.48s' not found", id ? id : "");
	return NULL;
}

int envd_watcher_call(struct envd_call *c, const char *method)
{
	static unsigned long long n;
	if (strcmp(method, "CreateWatcher") == 0) {
		struct ewatch *w = ewatch_open(c);
		if (!w)
			return 0;
		snprintf(w->id, sizeof w->id, "w%llu-%llx", ++n, (unsigned long long)mono_us());
		w->pending = cJSON_CreateArray();
		cJSON *m = cJSON_CreateObject();
		cJSON_AddStringToObject(m, "watcherId", w->id);
		envd_reply(c, m);
		return 0;
	}
	struct ewatch *w = watcher_find(c);
	if (!w)
		return 0;
	if (strcmp(method, "GetWatcherEvents") == 0) {
		if (w->wid[0])
			watch_poll(w->wid);   /* what inotify has now */
		cJSON *m = cJSON_CreateObject();
		cJSON_AddItemToObject(m, "events", w->pending);
		w->pending = cJSON_CreateArray();
		envd_reply(c, m);
	} else if (w->wid[0]) {   /* RemoveWatcher */
		ewatch_stop(w);
		envd_reply(c, cJSON_CreateObject());
	} else {                  /* its folder went: only the record is left */
		ewatch_free(w);
		envd_reply(c, cJSON_CreateObject());
	}
	return 0;
}

void envd_watch_shutdown(void)
{
	while (ewatches) {
		struct ewatch *w = ewatches;
		if (w->st) {
			w->st->gone = NULL;
			w->st->owner = NULL;
		}
		watch_sink(w->wid, NULL, NULL);
		ewatch_free(w);
	}
}
