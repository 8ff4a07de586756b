/* events.c — OpenHands V1's bash events: kept in memory oldest first (at
 * most V1_KEEP_EVENTS events and V1_KEEP_BYTES bytes of their text; past
 * either, the oldest are dropped), each also published to the
 * /sockets/bash-events subscribers; and the routes on them: search (kind,
 * command id, timestamp range, order, sort, pages of 1..100), one by id,
 * a batch by ids (GET with a JSON body), DELETE (clear); how many are kept
 * and their bytes in /metrics. */
#include "ohv1.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/time.h>

#define V1_KEEP_EVENTS 20000
#define V1_KEEP_BYTES (64u << 20)
#define V1_PAGE_MAX 100

static struct {
	struct v1_event *head, *tail;
	size_t n, bytes;
	int64_t last_ts;
	unsigned char rnd[4096];
	size_t rnd_off;
	FILE *urandom;
} ev;

/* ================================================================ ids */

void v1_new_id(char out[33])
{
	if (ev.rnd_off + 16 > sizeof ev.rnd || !ev.rnd_off) {
		if (!ev.urandom)
			ev.urandom = fopen("/dev/urandom", "rbe");
		if (!ev.urandom || fread(ev.rnd, 1, sizeof ev.rnd, ev.urandom) != sizeof ev.rnd) {
			for (size_t i = 0; i < sizeof ev.rnd; i++)   /* (never on Linux) */
				ev.rnd[i] = (unsigned char)(random() ^ (long)mono_us());
		}
		ev.rnd_off = 0;
	}
	unsigned char b[16];
	memcpy(b, ev.rnd + ev.rnd_off, 16);
	memset(ev.rnd + ev.rnd_off, 0, 16);
	ev.rnd_off += 16;
	b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);   /* version 4 */
	b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);   /* variant */
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* A UUID as V1 takes one (hex, with or without dashes, braces, urn:uuid:)
 * into 32 lowercase hex digits: 0, or -1 */
static int uuid_norm(const char *in, char out[33])
{
	if (strncasecmp(in, "urn:uuid:", 9) == 0)
		in += 9;
	size_t n = strlen(in), k = 0;
	if (n >= 2 && in[0] == '{' && in[n - 1] == '}') {
		in++;
		n -= 2;
	}
	for (size_t i = 0; i < n; i++) {
		if (in[i] == '-' && n == 36)
			continue;
		if (!isxdigit((unsigned char)in[i]) || k >= 32)
			return -1;
		out[k++] = (char)tolower((unsigned char)in[i]);
	}
	out[k] = 0;
	return k == 32 ? 0 : -1;
}

/* ========================================================== timestamps */

int64_t v1_now_us(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	int64_t now = (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
	if (now <= ev.last_ts)
		now = ev.last_ts + 1;   /* strictly after: one order for all */
	ev.last_ts = now;
	return now;
}

void v1_timestamp(int64_t ts_us, char *out, size_t n)
{
	time_t s = (time_t)(ts_us / 1000000);
	struct tm tm;
	gmtime_r(&s, &tm);
	char d[32];
	strftime(d, sizeof d, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out, n, "%s.%06dZ", d, (int)(ts_us % 1000000));
}

/* an ISO-8601 date-time as pydantic takes one (a naive one is UTC): 0 and
 * *us, or -1 */
static int parse_ts(const char *s, int64_t *us)
{
	struct tm tm;
	memset(&tm, 0, sizeof tm);
	int n = 0;
	if (sscanf(s, "%4d-%2d-%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &n) != 3 || n != 10)
		return -1;
	const char *p = s + 10;
	int64_t frac = 0;
	if (*p == 'T' || *p == 't' || *p == ' ') {
		int m = 0;
		if (sscanf(p + 1, "%2d:%2d%n", &tm.tm_hour, &tm.tm_min, &m) != 2 || m != 5)
			return -1;
		p += 1 + m;
		if (*p == ':') {
			if (!isdigit((unsigned char)p[1]) || !isdigit((unsigned char)p[2]))
				return -1;
			tm.tm_sec = (p[1] - '0') * 10 + (p[2] - '0');
			p += 3;
			if (*p == '.' || *p == ',') {
				p++;
				int digits = 0;
				while (isdigit((unsigned char)*p)) {
					if (digits < 6) {
						frac = frac * 10 + (*p - '0');
						digits++;
					}
					p++;
				}
				if (!digits)
					return -1;
				while (digits++ < 6)
					frac *= 10;
			}
		}
	}
	int64_t off = 0;
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		int hh = 0, mm = 0, m = 0;
		if (sscanf(p + 1, "%2d:%2d%n", &hh, &mm, &m) != 2 &&
		    sscanf(p + 1, "%2d%2d%n", &hh, &mm, &m) != 2)
			return -1;
		off = (int64_t)(hh * 3600 + mm * 60) * (*p == '-' ? -1 : 1);
		p += 1 + m;
	}
	if (*p || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
	    tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	time_t t = timegm(&tm);
	*us = ((int64_t)t - off) * 1000000 + frac;
	return 0;
}

/* ============================================================== store */

static void event_free(struct v1_event *e)
{
	free(e->json);
	free(e);
}

static void event_unlink(struct v1_event *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		ev.head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		ev.tail = e->prev;
	ev.n--;
	ev.bytes -= e->len;
}

void v1_event_add(struct v1_event *e)
{
	e->prev = ev.tail;
	e->next = NULL;
	if (ev.tail)
		ev.tail->next = e;
	else
		ev.head = e;
	ev.tail = e;
	ev.n++;
	ev.bytes += e->len;
	while (ev.head != e && (ev.n > V1_KEEP_EVENTS || ev.bytes > V1_KEEP_BYTES)) {
		struct v1_event *old = ev.head;
		event_unlink(old);
		event_free(old);
	}
	v1_socket_publish(e->json, e->len);
}

struct v1_event *v1_events_first(void)
{
	return ev.head;
}

static struct v1_event *find(const char *id)
{
	for (struct v1_event *e = ev.tail; e; e = e->prev)
		if (strcmp(e->id, id) == 0)
			return e;
	return NULL;
}

struct v1_event *v1_event_find(const char *id)
{
	return find(id);
}

struct v1_event *v1_event_last_output(const char *command_id)
{
	for (struct v1_event *e = ev.tail; e; e = e->prev)
		if (e->kind == V1_OUTPUT && strcmp(e->command_id, command_id) == 0)
			return e;
	return NULL;
}

/* ============================================================= search */

struct filter {
	int kind;                 /* -1 any */
	char command_id[33];      /* "" any */
	int64_t ts_gte, ts_lt;
	int has_gte, has_lt;
	long long order_gt;
	int has_order;
	int desc;
	long limit;
	char page_id[256];
};

static int matches(const struct filter *f, const struct v1_event *e)
{
	if (f->kind >= 0 && (int)e->kind != f->kind)
		return 0;
	/* (as V1's file names: only a BashOutput carries a command id) */
	if (f->command_id[0] && (e->kind != V1_OUTPUT || strcmp(f->command_id, e->command_id) != 0))
		return 0;
	if (f->has_gte && e->ts_us < f->ts_gte)
		return 0;
	if (f->has_lt && e->ts_us >= f->ts_lt)
		return 0;
	/* (a BashCommand has no order: V1 lets it through) */
	if (f->has_order && e->kind == V1_OUTPUT && e->order <= f->order_gt)
		return 0;
	return 1;
}

static int parse_int(const char *s, long long *v)
{
	char *end;
	errno = 0;
	long long x = strtoll(s, &end, 10);
	while (*end == ' ')
		end++;
	if (end == s || *end || errno)
		return -1;
	*v = x;
	return 0;
}

/* the query into f: 0, or -1 once a 422 is answered */
static int parse_filter(struct http_txn *t, struct filter *f)
{
	char v[256];
	memset(f, 0, sizeof *f);
	f->kind = -1;
	f->limit = V1_PAGE_MAX;
	if (v1_arg(t, "kind__eq=", v, sizeof v)) {
		if (!strcmp(v, "BashCommand"))
			f->kind = V1_COMMAND;
		else if (!strcmp(v, "BashOutput"))
			f->kind = V1_OUTPUT;
		else {
			v1_422(t, "query", "kind__eq", "literal_error",
			       "Input should be 'BashCommand' or 'BashOutput'", v, NULL, 0);
			return -1;
		}
	}
	if (v1_arg(t, "command_id__eq=", v, sizeof v) && uuid_norm(v, f->command_id) < 0) {
		v1_422(t, "query", "command_id__eq", "uuid_parsing",
		       "Input should be a valid UUID, invalid character: expected an optional "
		       "prefix of `urn:uuid:` followed by [0-9a-fA-F-], found an invalid character",
		       v, NULL, 0);
		return -1;
	}
	static const char *const tsn[2] = {"timestamp__gte=", "timestamp__lt="};
	for (int i = 0; i < 2; i++) {
		if (!v1_arg(t, tsn[i], v, sizeof v))
			continue;
		int64_t *dst = i ? &f->ts_lt : &f->ts_gte;
		if (parse_ts(v, dst) < 0) {
			char name[32];
			snprintf(name, sizeof name, "%.*s", (int)strlen(tsn[i]) - 1, tsn[i]);
			v1_422(t, "query", name, "datetime_from_date_parsing",
			       "Input should be a valid datetime or date, invalid character in year",
			       v, NULL, 0);
			return -1;
		}
		if (i)
			f->has_lt = 1;
		else
			f->has_gte = 1;
	}
	long long x;
	if (v1_arg(t, "order__gt=", v, sizeof v)) {
		if (parse_int(v, &x) < 0) {
			v1_422(t, "query", "order__gt", "int_parsing",
			       "Input should be a valid integer, unable to parse string as an integer",
			       v, NULL, 0);
			return -1;
		}
		f->order_gt = x;
		f->has_order = 1;
	}
	if (v1_arg(t, "sort_order=", v, sizeof v)) {
		if (!strcmp(v, "TIMESTAMP_DESC"))
			f->desc = 1;
		else if (strcmp(v, "TIMESTAMP") != 0) {
			v1_422(t, "query", "sort_order", "enum",
			       "Input should be 'TIMESTAMP' or 'TIMESTAMP_DESC'", v, NULL, 0);
			return -1;
		}
	}
	if (v1_arg(t, "page_id=", v, sizeof v))
		snprintf(f->page_id, sizeof f->page_id, "%s", v);
	if (v1_arg(t, "limit=", v, sizeof v)) {
		if (parse_int(v, &x) < 0) {
			v1_422(t, "query", "limit", "int_parsing",
			       "Input should be a valid integer, unable to parse string as an integer",
			       v, NULL, 0);
			return -1;
		}
		if (x <= 0) {
			v1_422(t, "query", "limit", "greater_than", "Input should be greater than 0", v,
			       "gt", 0);
			return -1;
		}
		if (x > V1_PAGE_MAX) {
			v1_422(t, "query", "limit", "less_than_equal",
			       "Input should be less than or equal to 100", v, "le", V1_PAGE_MAX);
			return -1;
		}
		f->limit = (long)x;
	}
	return 0;
}

/* the page's items written into b as a JSON array's members */
static void search(struct http_txn *t)
{
	struct filter f;
	if (parse_filter(t, &f) < 0)
		return;
	struct v1_event *e = f.desc ? ev.tail : ev.head;
	if (f.page_id[0]) {   /* the page starts at that event (V1: at that file; none: the first) */
		struct v1_event *at = find(f.page_id);
		if (at)
			e = at;
	}
	buf_t b = {0};
	buf_puts(&b, "{\"items\":[");
	long n = 0;
	struct v1_event *next = NULL;
	for (; e; e = f.desc ? e->prev : e->next) {
		if (!matches(&f, e))
			continue;
		if (n == f.limit) {
			next = e;
			break;
		}
		if (n++)
			buf_putc(&b, ',');
		buf_append(&b, e->json, e->len);
	}
	buf_puts(&b, "],\"next_page_id\":");
	if (next)
		buf_printf(&b, "\"%s\"}", next->id);
	else
		buf_puts(&b, "null}");
	http_answer(t, 200, "application/json", b.p, b.len);
	buf_free(&b);
}

/* GET /api/bash/bash_events/[…]: search, one by id, or a batch by ids */
static void events_get(struct http_txn *t)
{
	const char *rest = t->path + strlen("/api/bash/bash_events/");
	if (!strcmp(rest, "search")) {
		search(t);
		return;
	}
	if (!rest[0]) {   /* a batch: the ids in a JSON body */
		cJSON *ids = t->body.len ? cJSON_ParseWithLength(t->body.p, t->body.len) : NULL;
		if (!cJSON_IsArray(ids)) {
			cJSON_Delete(ids);
			v1_422(t, "body", NULL, "missing", "Field required", NULL, NULL, 0);
			return;
		}
		cJSON *out = cJSON_CreateArray();
		const cJSON *id;
		cJSON_ArrayForEach(id, ids) {
			char hex[33];
			struct v1_event *e = cJSON_IsString(id) && uuid_norm(id->valuestring, hex) == 0 ?
					     find(hex) : NULL;
			cJSON_AddItemToArray(out, e ? cJSON_ParseWithLength(e->json, e->len)
						    : cJSON_CreateNull());
		}
		cJSON_Delete(ids);
		v1_json(t, 200, out);
		return;
	}
	char hex[33];
	if (uuid_norm(rest, hex) < 0) {
		v1_422(t, "path", "event_id", "uuid_parsing",
		       "Input should be a valid UUID, invalid length", rest, NULL, 0);
		return;
	}
	struct v1_event *e = find(hex);
	if (!e) {
		v1_detail(t, 404, "Not Found");
		return;
	}
	http_answer(t, 200, "application/json", e->json, e->len);
}

/* DELETE /api/bash/bash_events */
static void events_delete(struct http_txn *t)
{
	if (lws_hdr_total_length(t->wsi, WSI_TOKEN_DELETE_URI) <= 0) {
		v1_detail(t, 405, "Method Not Allowed");
		return;
	}
	size_t n = ev.n;
	v1_events_shutdown();
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "cleared_count", (double)n);
	v1_json(t, 200, o);
}

/* ============================================= upgrade in place */

cJSON *v1_events_save(void)
{
	cJSON *a = cJSON_CreateArray();
	for (struct v1_event *e = ev.head; e; e = e->next) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "id", e->id);
		cJSON_AddStringToObject(o, "cid", e->command_id);
		cJSON_AddNumberToObject(o, "kind", e->kind);
		cJSON_AddNumberToObject(o, "ts", (double)e->ts_us);
		cJSON_AddNumberToObject(o, "order", e->order);
		cJSON_AddItemToObject(o, "json", cJSON_CreateString(e->json));
		cJSON_AddItemToArray(a, o);
	}
	return a;
}

void v1_events_load(const cJSON *a)
{
	const cJSON *o;
	cJSON_ArrayForEach(o, a) {
		const cJSON *id = cJSON_GetObjectItem(o, "id"), *cid = cJSON_GetObjectItem(o, "cid");
		const cJSON *js = cJSON_GetObjectItem(o, "json");
		if (!cJSON_IsString(id) || !cJSON_IsString(cid) || !cJSON_IsString(js) ||
		    strlen(id->valuestring) != 32 || strlen(cid->valuestring) != 32)
			continue;
		struct v1_event *e = xcalloc(1, sizeof *e);
		memcpy(e->id, id->valuestring, 33);
		memcpy(e->command_id, cid->valuestring, 33);
		e->kind = (enum v1_kind)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "kind"));
		e->ts_us = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "ts"));
		e->order = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "order"));
		e->json = xstrdup(js->valuestring);
		e->len = strlen(e->json);
		if (e->ts_us > ev.last_ts)
			ev.last_ts = e->ts_us;
		v1_event_add(e);   /* (no socket is open yet) */
	}
}

/* /metrics: the store's size (what a soak tells apart from a leak) */
static void events_metrics(buf_t *b)
{
	metrics_head(b, "termd_ohv1_events_kept", "gauge",
		     "OpenHands V1 bash events kept (the newest 20000 at most).");
	buf_printf(b, "termd_ohv1_events_kept %zu\n", ev.n);
	metrics_head(b, "termd_ohv1_events_kept_bytes", "gauge",
		     "Bytes of the OpenHands V1 bash events' text kept (64 MiB at most).");
	buf_printf(b, "termd_ohv1_events_kept_bytes %zu\n", ev.bytes);
}

void v1_events_routes(void)
{
	static const struct http_route routes[] = {
		{"GET", "/api/bash/bash_events/", v1_admit, events_get, 1, TD_API_OPENHANDS},
		{"DELETE", "/api/bash/bash_events", v1_admit, events_delete, 0, TD_API_OPENHANDS},
	};
	http_routes_register(routes, sizeof routes / sizeof routes[0]);
	metrics_extend(events_metrics);
}

void v1_events_shutdown(void)
{
	while (ev.head) {
		struct v1_event *e = ev.head;
		event_unlink(e);
		event_free(e);
	}
	if (ev.urandom) {
		fclose(ev.urandom);
		ev.urandom = NULL;
	}
	ev.rnd_off = 0;
}
