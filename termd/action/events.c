/* events.c — the event stream: every observation gets the next `seq` of the
 * instance and a timestamp, is serialized once, sent to the connection whose
 * action caused it and to every subscriber, kept in a bounded retention
 * ring (for `subscribe {since}`), and optionally appended to --event-log.
 * Also the `hello` and error observations, and `subscribe`. */
#include "action.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

struct retained {
	uint64_t seq;
	char *json;
	size_t len;
	char *key;          /* cause id as a key, or NULL */
};

/* id key -> seq of the retained answer, for idempotent replays */
struct idnode {
	struct idnode *next;
	char *key;
	uint64_t seq;
};
#define ID_BUCKETS 16384
static struct idnode *idmap[ID_BUCKETS];

static unsigned id_hash(const char *k)
{
	unsigned h = 2166136261u;
	for (; *k; k++)
		h = (h ^ (unsigned char)*k) * 16777619u;
	return h % ID_BUCKETS;
}

static void id_put(const char *key, uint64_t seq)
{
	unsigned h = id_hash(key);
	for (struct idnode *n = idmap[h]; n; n = n->next) {
		if (strcmp(n->key, key) == 0) {
			n->seq = seq;
			return;
		}
	}
	struct idnode *n = xmalloc(sizeof *n);
	n->key = xstrdup(key);
	n->seq = seq;
	n->next = idmap[h];
	idmap[h] = n;
}

static void id_del(const char *key, uint64_t seq)
{
	for (struct idnode **pp = &idmap[id_hash(key)]; *pp; pp = &(*pp)->next) {
		if (strcmp((*pp)->key, key) == 0) {
			struct idnode *n = *pp;
			if (n->seq != seq)
				return;
			*pp = n->next;
			free(n->key);
			free(n);
			return;
		}
	}
}

static int id_get(const char *key, uint64_t *seq)
{
	for (struct idnode *n = idmap[id_hash(key)]; n; n = n->next) {
		if (strcmp(n->key, key) == 0) {
			*seq = n->seq;
			return 1;
		}
	}
	return 0;
}

/* "s:<string>" or "n:<integer>"; NULL for no id. Caller frees. */
static char *id_key(const cJSON *id)
{
	if (!id)
		return NULL;
	buf_t b = {0};
	if (cJSON_IsString(id))
		buf_printf(&b, "s:%s", id->valuestring);
	else if (cJSON_IsNumber(id))
		buf_printf(&b, "n:%.0f", id->valuedouble);
	else
		return NULL;
	/* a copy of the exact size: buf_t keeps at least 256 bytes, and the
	 * key lives as long as its retained answer (measured: +236 B each) */
	char *key = xstrdup(b.p);
	buf_free(&b);
	return key;
}

/* Retention is bounded by count (--retain) and by bytes, so a few huge
 * observations (a 20 MB base64 read) cannot pin gigabytes. */
#define RETAIN_BYTES_MAX (128u * 1024u * 1024u)
/* one event larger than this is kept as a note (kept: false, bytes) */
#define RETAIN_ONE_MAX (4u * 1024u * 1024u)

static events_send_fn *send_fn;   /* conn_send, from events_init's caller */
static uint64_t last_seq;
static size_t ring_bytes;
static struct retained *ring;
static size_t ring_cap, ring_len, ring_head; /* head = index of oldest */
/* --event-log: one write(2) per line on an O_APPEND fd (no stdio buffer
 * that could hold half a line after a failed flush) */
static int event_log = -1;
static int log_failing;   /* the last line could not be written (said once) */

void events_init(events_send_fn *send)
{
	send_fn = send;
	ring_cap = opts.retain > 0 ? (size_t)opts.retain : 1;
	ring = xcalloc(ring_cap, sizeof *ring);
	if (opts.event_log) {
		event_log = open(opts.event_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		if (event_log < 0)
			log_warn("cannot open event log %s: %s", opts.event_log, strerror(errno));
	}
}

size_t events_retained(size_t *bytes, uint64_t *seq)
{
	*bytes = ring_bytes;
	*seq = last_seq;
	return ring_len;
}

void events_shutdown(void)
{
	for (size_t i = 0; i < ring_len; i++) {
		free(ring[(ring_head + i) % ring_cap].json);
		free(ring[(ring_head + i) % ring_cap].key);
	}
	for (int b = 0; b < ID_BUCKETS; b++) {
		while (idmap[b]) {
			struct idnode *n = idmap[b];
			idmap[b] = n->next;
			free(n->key);
			free(n);
		}
	}
	free(ring);
	ring = NULL;
	ring_len = ring_head = 0;
	ring_bytes = 0;
	if (event_log >= 0)
		close(event_log);
	event_log = -1;
	log_failing = 0;
}

static void drop_oldest(void)
{
	struct retained *old = &ring[ring_head];
	if (old->key)
		id_del(old->key, old->seq);
	free(old->key);
	old->key = NULL;
	free(old->json);
	old->json = NULL;
	ring_bytes -= old->len;
	ring_head = (ring_head + 1) % ring_cap;
	ring_len--;
}

/* Append one event line to the event log. A line that does not fit (disk
 * full, file size limit) is cut off again so the log stays whole JSON
 * lines. Returns errno when a run of failures begins (to be reported as
 * an event), else 0: a full disk is said once, not once per event, and
 * again only after the log has been written to in between. */
static int log_write(const char *json, size_t len)
{
	if (event_log < 0)
		return 0;
	off_t start = lseek(event_log, 0, SEEK_END);
	size_t total = len + 1, off = 0;
	int err = 0;
	while (off < total) {
		/* the JSON, then its newline */
		struct iovec iov[2];
		int n = 0;
		if (off < len)
			iov[n++] = (struct iovec){(void *)(json + off), len - off};
		iov[n++] = (struct iovec){"\n", 1};
		ssize_t w = writev(event_log, iov, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			err = w < 0 ? errno : ENOSPC;
			break;
		}
		off += (size_t)w;
	}
	if (!err) {
		if (log_failing)
			log_info("event log %s is written again", opts.event_log);
		log_failing = 0;
		return 0;
	}
	if (off && start >= 0 && ftruncate(event_log, start) != 0)
		log_warn("event log %s: cannot cut off a partial line: %s", opts.event_log,
			 strerror(errno));
	if (log_failing)
		return 0;
	log_failing = 1;
	log_warn("cannot write the event log %s: %s (events go unlogged until it can be written)",
		 opts.event_log, strerror(err));
	return err;
}

static void retain(uint64_t seq, char *json, size_t len, char *key)
{
	if (ring_len == ring_cap)
		drop_oldest();
	while (ring_len && ring_bytes + len > RETAIN_BYTES_MAX)
		drop_oldest();
	struct retained *r = &ring[(ring_head + ring_len) % ring_cap];
	r->seq = seq;
	r->json = json;
	r->len = len;
	r->key = key;
	if (key)
		id_put(key, seq);
	ring_bytes += len;
	ring_len++;
}

/* The one builder of an observation's JSON (PROTOCOL.md §2); takes
 * ownership of extras (may be NULL). Free the result. */
/* Long strings (a 1 MiB command in command.start, a file's content) are
 * written by buf_put_json_string, and extras' long strings put in as raw
 * JSON: cJSON's printer spends about 5 ns a byte on them and grows its
 * buffer by doubling, ten times the cost. The bytes are the same either
 * way: seq, ts, cause, observation, content, extras, as cJSON prints them. */
#define FAST_STRING_MIN 4096

/* long strings under v become raw JSON; returns their total length */
static size_t fast_strings(cJSON *v)
{
	size_t total = 0;
	for (; v; v = v->next) {
		if (cJSON_IsString(v) && !(v->type & cJSON_IsReference) && v->valuestring) {
			size_t n = strlen(v->valuestring);
			if (n < FAST_STRING_MIN)
				continue;
			buf_t b = {0};
			buf_put_json_string(&b, v->valuestring, n);
			free(v->valuestring);
			total += b.len;
			v->valuestring = buf_steal(&b);
			v->type = (v->type & ~0xFF) | cJSON_Raw;
		} else if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
			total += fast_strings(v->child);
		}
	}
	return total;
}

/* the envelope around extras already printed as JSON (ex, exlen); ex_text:
 * the caller made them UTF-8 text already (utf8_text), off the loop */
static char *envelope_printed(uint64_t seq, const cJSON *cause, const char *observation,
			      const char *content, const char *ex, size_t exlen, int ex_text)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "seq", (double)seq);
	cJSON_AddNumberToObject(o, "ts", (double)(int64_t)(wall_s() * 1000.0) / 1000.0);
	if (cause)
		cJSON_AddItemToObject(o, "cause", cJSON_Duplicate(cause, 1));
	else
		cJSON_AddNullToObject(o, "cause");
	cJSON_AddStringToObject(o, "observation", observation);
	char *head = cJSON_PrintUnformatted(o);   /* {"seq":…,"observation":"…"} */
	cJSON_Delete(o);
	if (!head)
		return NULL;
	size_t clen = content ? strlen(content) : 0, hlen = strlen(head);
	buf_t b = {0};
	buf_reserve(&b, hlen + clen + clen / 16 + exlen + 32);
	buf_append(&b, head, hlen - 1);           /* without its '}' */
	buf_puts(&b, ",\"content\":");
	buf_put_json_string(&b, content ? content : "", clen);
	buf_puts(&b, ",\"extras\":");
	size_t checked = ex_text ? b.len : 0;   /* where the text to check ends */
	buf_append(&b, ex, exlen);
	buf_putc(&b, '}');
	free(head);
	/* a WebSocket text frame is UTF-8 or the client must fail the
	 * connection (RFC 6455 8.1): a name from outside (a file a program
	 * made, named with byte 0xff) has U+FFFD where it is not */
	if (!utf8_text(b.p, checked ? checked : b.len, NULL)) {
		buf_t u = {0};
		buf_put_utf8(&u, b.p, b.len);
		buf_free(&b);
		b = u;
	}
	/* exact size: the ring keeps it (buf_t rounds up to a power of two) */
	size_t n = b.len;
	return xrealloc(buf_steal(&b), n + 1);
}

static char *envelope(uint64_t seq, const cJSON *cause, const char *observation,
		      const char *content, cJSON *extras)
{
	if (!extras)
		extras = cJSON_CreateObject();
	size_t long_len = fast_strings(extras->child);
	char *ex = cJSON_PrintBuffered(extras, (int)(long_len < (1u << 30) ? long_len + 1024 : 1024), 0);
	cJSON_Delete(extras);
	if (!ex)
		return NULL;
	char *json = envelope_printed(seq, cause, observation, content, ex, strlen(ex), 0);
	free(ex);
	return json;
}

static void log_failed(int err);

int events_subscribers(void)
{
	for (struct conn *c = srv.conns; c; c = c->next)
		if (c->subscribed && !c->closing)
			return 1;
	return 0;
}

void events_emit_live(const char *observation, const char *content, cJSON *extras,
		      cJSON *kept)
{
	uint64_t seq = ++last_seq;
	/* the whole event only for someone to send it to */
	char *json = events_subscribers() ? envelope(seq, NULL, observation, content, extras) : NULL;
	if (!json)
		cJSON_Delete(extras);
	char *stub = envelope(seq, NULL, observation, "", kept);
	if (!stub) {
		log_warn("cannot serialize an observation");
		free(json);
		return;
	}
	size_t len = json ? strlen(json) : 0;
	for (struct conn *c = srv.conns; json && c; c = c->next)
		if (c->subscribed && !c->closing)
			send_fn(c, json, len);
	free(json);
	len = strlen(stub);
	int log_err = log_write(stub, len);
	retain(seq, stub, len, NULL);
	if (log_err)
		log_failed(log_err);
}

void events_broadcast(const char *observation, const char *content, cJSON *extras)
{
	events_emit(NULL, NULL, observation, content, extras);
}

/* an event built as json (taken; NULL: it could not be) to `to` unless
 * a viewer's (sent already), every subscriber, the event log and the ring */
static void deliver(struct conn *to, int viewer, uint64_t seq, const cJSON *cause,
		    const char *observation, char *json)
{
	if (!json) {
		log_warn("cannot serialize an observation");
		return;
	}
	size_t len = strlen(json);
	if (to && !to->closing && !viewer)
		send_fn(to, json, len);
	for (struct conn *c = srv.conns; c; c = c->next)
		if (c != to && c->subscribed && !c->closing)
			send_fn(c, json, len);
	int log_err = log_write(json, len);
	/* (a viewer's answers keep no id: it cannot claim one before the
	 * full-token client uses it) */
	if (len > RETAIN_ONE_MAX) {
		/* a huge answer (a listing, a file) is not kept whole for replay:
		 * the ring keeps a note of it under the same seq and id */
		free(json);
		cJSON *kept = cJSON_CreateObject();
		cJSON_AddBoolToObject(kept, "kept", 0);
		cJSON_AddNumberToObject(kept, "bytes", (double)len);
		json = envelope(seq, cause, observation, "", kept);
		len = json ? strlen(json) : 0;
	}
	if (json)
		retain(seq, json, len, id_key(cause));
	if (log_err)
		log_failed(log_err);   /* after retain: the ring stays in seq order */
}

__thread events_capture_fn *events_capture;
__thread void *events_capture_arg;

void events_emit(struct conn *to, const cJSON *cause, const char *observation,
		 const char *content, cJSON *extras)
{
	if (events_capture) {   /* an action running in a worker (fsact.c) */
		events_capture(events_capture_arg, observation, content, extras);
		return;
	}
	uint64_t seq = ++last_seq;
	/* an action's answer names the arguments it did not read */
	extras = actions_answer_extras(to, cause, extras);
	/* a viewer's answer: its id is the viewer's to see only. Everyone else
	 * (and the ring) gets it with no cause, so an id a viewer chose never
	 * shows up as an answer in another client's stream. */
	int viewer = to && to->readonly && cause;
	if (viewer) {
		char *mine = envelope(seq, cause, observation, content,
				      extras ? cJSON_Duplicate(extras, 1) : NULL);
		if (mine) {
			if (!to->closing)
				send_fn(to, mine, strlen(mine));
			free(mine);
		}
		cause = NULL;
	}
	deliver(to, viewer, seq, cause, observation,
		envelope(seq, cause, observation, content, extras));
}

void events_emit_printed(const cJSON *cause, const char *observation, const char *content,
			 const char *extras_json)
{
	uint64_t seq = ++last_seq;
	deliver(NULL, 0, seq, cause, observation,
		envelope_printed(seq, cause, observation, content, extras_json,
				 strlen(extras_json), 1));
}

/* the event log could not be written: subscribers are told */
static void log_failed(int log_err)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "code", td_err_name(TD_ERR_IO_ERROR));
	cJSON_AddStringToObject(ex, "path", opts.event_log);
	char msg[1024];
	snprintf(msg, sizeof msg, "cannot write the event log %s: %s; events are not "
		 "logged until it can be written again", opts.event_log, strerror(log_err));
	events_emit(NULL, NULL, "error", msg, ex);
}

static struct retained *find_retained(uint64_t seq)
{
	if (!ring_len || seq < ring[ring_head].seq)
		return NULL;
	uint64_t i = seq - ring[ring_head].seq;
	if (i >= ring_len)
		return NULL;
	struct retained *r = &ring[(ring_head + i) % ring_cap];
	return r->seq == seq ? r : NULL;
}

int events_replay(struct conn *c, const cJSON *id)
{
	char *key = id_key(id);
	uint64_t seq;
	int found = key && id_get(key, &seq);
	free(key);
	if (!found)
		return 0;
	struct retained *r = find_retained(seq);
	if (!r)
		return 0;
	cJSON *o = cJSON_ParseWithLength(r->json, r->len);
	if (!o)
		return 0;
	cJSON *ex = cJSON_GetObjectItemCaseSensitive(o, "extras");
	if (!cJSON_IsObject(ex)) {
		cJSON_DeleteItemFromObject(o, "extras");
		ex = cJSON_AddObjectToObject(o, "extras");
	}
	cJSON_DeleteItemFromObject(ex, "replayed");
	cJSON_AddBoolToObject(ex, "replayed", 1);
	char *json = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (json) {
		send_fn(c, json, strlen(json));
		free(json);
	}
	return 1;
}

int events_id_known(const cJSON *id)
{
	char *key = id_key(id);
	uint64_t seq;
	int found = key && id_get(key, &seq) && find_retained(seq);
	free(key);
	return found;
}

void events_private_error(struct conn *to, const cJSON *cause, td_err code, const char *msg)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "code", td_err_name(code));
	char *json = envelope(last_seq, cause, "error", msg, ex);   /* takes ex */
	if (json) {
		if (!to->closing)
			send_fn(to, json, strlen(json));
		free(json);
	}
}

/* An error no action handler reported (a frame over the size limit): the
 * same shape as actions_dispatch's answers. */
void events_error(struct conn *to, const cJSON *cause, td_err code, const char *fmt, ...)
{
	buf_t msg = {0};
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(&msg, fmt, ap);
	va_end(ap);
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "code", td_err_name(code));
	events_emit(to, cause, "error", msg.p ? msg.p : "", ex);
	buf_free(&msg);
}

/* hello is per connection: it is not part of the stream, has no seq of its
 * own, and is not retained. */
void events_hello(struct conn *c)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "version", TERMD_VERSION);
	cJSON_AddNumberToObject(ex, "protocol", PROTOCOL_VERSION);
	cJSON_AddNumberToObject(ex, "seq", (double)last_seq);
	cJSON_AddItemToObject(ex, "sessions", session_names_json());
	cJSON_AddItemToObject(ex, "actions", actions_list_json());
	cJSON_AddBoolToObject(ex, "readonly", c->readonly);
	char *json = envelope(last_seq, NULL, "hello", "termd " TERMD_VERSION, ex);
	if (json) {
		send_fn(c, json, strlen(json));
		free(json);
	}
}

static int events_subscribe(struct act *a)
{
	double since = -1;
	int has_since = 0;
	if (arg_number(a, "since", &since, &has_since) < 0)
		return -1;
	uint64_t from = has_since && since >= 0 ? (uint64_t)since : last_seq;
	/* the replay first (in order, with a gap notice when some are gone),
	 * then the answer, then live events */
	if (ring_len && from < last_seq) {
		uint64_t oldest = ring[ring_head].seq;
		if (from + 1 < oldest) {
			/* not an event of its own: it carries the seq of the last
			 * event it stands for */
			cJSON *gx = cJSON_CreateObject();
			cJSON_AddNumberToObject(gx, "from", (double)(from + 1));
			cJSON_AddNumberToObject(gx, "to", (double)(oldest - 1));
			char *gap = envelope(oldest - 1, NULL, "gap", "", gx);
			if (gap) {
				send_fn(a->conn, gap, strlen(gap));
				free(gap);
			}
		}
		for (size_t i = 0; i < ring_len; i++) {
			struct retained *r = &ring[(ring_head + i) % ring_cap];
			if (r->seq > from)
				send_fn(a->conn, r->json, r->len);
		}
	}
	a->conn->subscribed = 1;
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddNumberToObject(ex, "since", (double)from);
	events_emit(a->conn, a->id, "subscribe", "", ex);
	return 0;
}

void events_register(void)
{
	static const struct action_def defs[] = {
		{"subscribe", events_subscribe, ACT_READONLY},
	};
	actions_register(defs, sizeof defs / sizeof defs[0]);
}

/* The hand-over record's part (handover.c): the last seq and the retained
 * ring with each answer's id key, so `subscribe since` and replays of
 * retained answers go on across an upgrade in place. */
cJSON *events_handover_save(void)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddNumberToObject(j, "seq", (double)last_seq);
	cJSON *r = cJSON_AddArrayToObject(j, "ring");
	for (size_t i = 0; i < ring_len; i++) {
		struct retained *e = &ring[(ring_head + i) % ring_cap];
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "seq", (double)e->seq);
		cJSON_AddItemToObject(o, "json", cJSON_CreateString(e->json));
		if (e->key)
			cJSON_AddStringToObject(o, "key", e->key);
		cJSON_AddItemToArray(r, o);
	}
	return j;
}

void events_handover_load(const cJSON *j)
{
	const cJSON *seq = cJSON_GetObjectItem(j, "seq"), *e;
	if (cJSON_IsNumber(seq))
		last_seq = (uint64_t)seq->valuedouble;
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "ring")) {
		const cJSON *s = cJSON_GetObjectItem(e, "seq"), *js = cJSON_GetObjectItem(e, "json");
		const cJSON *k = cJSON_GetObjectItem(e, "key");
		if (!cJSON_IsNumber(s) || !cJSON_IsString(js))
			continue;
		retain((uint64_t)s->valuedouble, xstrdup(js->valuestring), strlen(js->valuestring),
		       cJSON_IsString(k) ? xstrdup(k->valuestring) : NULL);
	}
}
