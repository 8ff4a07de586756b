/* watch.c — envd's filesystem.Filesystem/WatchDir and the polled
 * watchers (CreateWatcher, GetWatcherEvents, RemoveWatcher) on termd's
 * `watch` action (watch.c: inotify, recursive, on the event stream): the
 * door starts and stops the watch through the action layer and follows it
 * through a sink, sending fsnotify's event kinds (CREATE, WRITE, REMOVE,
 * RENAME, CHMOD) with names relative to the watched folder and the entry
 * when asked for; a polled watcher keeps its events until fetched, up to
 * --watcher-max bytes (the oldest dropped, and counted in the next
 * answer), and is removed, its watch with it, once nobody asked for its
 * events for --watcher-expiry seconds. */
#include "envd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* one event a polled watcher keeps, as its JSON */
struct pev {
	struct pev *next;
	size_t len;
	char json[];
};

struct ewatch {
	struct ewatch *next;
	char wid[32];             /* termd's watch */
	struct envd_stream *st;   /* WatchDir's stream (NULL: a polled watcher) */
	char *root;
	int include_entry;
	char id[48];              /* a polled watcher's id */
	struct pev *head, **tail; /* ... its events until fetched, oldest first */
	size_t bytes;             /* ... their JSON's bytes (at most --watcher-max) */
	unsigned long long dropped; /* ... the oldest dropped since the last fetch */
	lws_sorted_usec_list_t expire; /* ... removed when not polled for --watcher-expiry */
	lws_sorted_usec_list_t cut;    /* WatchDir's client stopped reading: ended */
};

static struct ewatch *ewatches;

static void pending_clear(struct ewatch *w)
{
	while (w->head) {
		struct pev *e = w->head;
		w->head = e->next;
		free(e);
	}
	w->tail = &w->head;
	w->bytes = 0;
}

static void ewatch_free(struct ewatch *w)
{
	for (struct ewatch **pp = &ewatches; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	lws_sul_cancel(&w->expire);
	lws_sul_cancel(&w->cut);
	free(w->root);
	pending_clear(w);
	free(w);
}

/* a polled watcher's event kept, the oldest dropped past --watcher-max */
static void kept_add(struct ewatch *w, cJSON *m)
{
	char *s = cJSON_PrintUnformatted(m);
	cJSON_Delete(m);
	size_t n = strlen(s);
	struct pev *e = xmalloc(sizeof *e + n + 1);
	e->next = NULL;
	e->len = n;
	memcpy(e->json, s, n + 1);
	free(s);
	*w->tail = e;
	w->tail = &e->next;
	w->bytes += n;
	while (w->bytes > opts.watcher_max && w->head) {
		struct pev *old = w->head;
		w->head = old->next;
		if (!w->head)
			w->tail = &w->head;
		w->bytes -= old->len;
		w->dropped++;
		free(old);
	}
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

static void cut_timer(lws_sorted_usec_list_t *sul)
{
	struct ewatch *w = lws_container_of(sul, struct ewatch, cut);
	struct envd_stream *st = w->st;
	if (st) {
		st->gone = NULL;
		st->owner = NULL;
		w->st = NULL;
		envd_stream_finish(st, EC_RESOURCE_EXHAUSTED,
				   "the client does not read its stream (--stream-max)");
	}
	ewatch_stop(w);
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
	if (w->st) {
		/* a client that does not read is cut at --stream-max: the
		 * stream ends and the watch stops, from the loop (not in the
		 * middle of the watch's own events) */
		if (envd_stream_send(w->st, m) == HTTP_STREAM_CUT)
			server_timer(&w->cut, cut_timer, 1);
	} else {
		kept_add(w, m);
	}
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
	envd_fail(c, EC_NOT_FOUND, "watcher '%.48s' not found (removed, or not polled for "
		  "%zu s: --watcher-expiry)", id ? id : "", opts.watcher_expiry);
	return NULL;
}

/* nobody asked for its events for --watcher-expiry seconds: the client
 * went away (it never polls or removes it); the watch and events go */
static void expire_timer(lws_sorted_usec_list_t *sul)
{
	struct ewatch *w = lws_container_of(sul, struct ewatch, expire);
	log_info("envd: watcher %s of %s not polled for %zu s: removed (--watcher-expiry)", w->id,
		 w->root, opts.watcher_expiry);
	if (w->wid[0])
		ewatch_stop(w);
	else
		ewatch_free(w);
}

static void expire_later(struct ewatch *w)
{
	server_timer(&w->expire, expire_timer, (uint64_t)opts.watcher_expiry * 1000000u);
}

int envd_watcher_call(struct envd_call *c, const char *method)
{
	static unsigned long long n;
	if (strcmp(method, "CreateWatcher") == 0) {
		struct ewatch *w = ewatch_open(c);
		if (!w)
			return 0;
		snprintf(w->id, sizeof w->id, "w%llu-%llx", ++n, (unsigned long long)mono_us());
		w->tail = &w->head;
		expire_later(w);
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
		cJSON *arr = cJSON_AddArrayToObject(m, "events");
		for (struct pev *e = w->head; e; e = e->next)
			cJSON_AddItemToArray(arr, cJSON_CreateRaw(e->json));
		pending_clear(w);
		if (w->dropped) {
			/* termd's addition (Connect clients ignore fields they
			 * do not know): how many of the oldest went, and why */
			cJSON_AddNumberToObject(m, "dropped", (double)w->dropped);
			buf_t note = {0};
			buf_printf(&note, "%llu older events were dropped: more than --watcher-max "
				   "(%zu bytes) waited to be fetched", w->dropped, opts.watcher_max);
			cJSON_AddStringToObject(m, "note", note.p);
			buf_free(&note);
			w->dropped = 0;
		}
		expire_later(w);
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
