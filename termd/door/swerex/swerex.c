/* swerex.c — the SWE-ReX door's entry (swerex_register): its routes (one
 * table, each route tagged with the API it belongs to), the X-API-Key
 * check, the X-Request-ID slot (the last answer, given again without
 * running), SWE-ReX's answers and its 511 exceptions, Python's repr and
 * decoding for the texts it sends, and the termd actions a request calls
 * (a socketless connection; answers come back by the action's id). */
#include "swerex.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

static struct {
	struct conn conn;
	struct swreq *reqs;       /* every request alive */
	unsigned long long nid;
	int in_dispatch;
	/* the X-Request-ID slot */
	char last_id[256];
	int last_status;
	buf_t last_body;
	int registered;
} sw;

/* ============================================================ answers */

static void slot_store(struct http_txn *t, int status, const char *json)
{
	char id[256];
	if (!t || http_header(t, "x-request-id:", id, sizeof id) <= 0)
		return;
	snprintf(sw.last_id, sizeof sw.last_id, "%s", id);
	sw.last_status = status;
	buf_reset(&sw.last_body);
	buf_puts(&sw.last_body, json);
}

static void req_unlink(struct swreq *r)
{
	for (struct swreq **p = &sw.reqs; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			break;
		}
}

void sw_req_free(struct swreq *r)
{
	if (!r)
		return;
	req_unlink(r);
	lws_sul_cancel(&r->timer);
	if (r->t) {
		r->t->user = NULL;
		r->t->gone = NULL;
	}
	cJSON_Delete(r->body);
	cJSON_Delete(r->early);
	cJSON_Delete(r->waiting);
	free(r->cmd);
	free(r->error_msg);
	free(r);
}

static void req_gone(struct http_txn *t)
{
	struct swreq *r = t->user;
	if (r)
		r->t = NULL;   /* its work goes on; nobody to answer */
	t->user = NULL;
}

struct swreq *sw_req_new(struct http_txn *t)
{
	struct swreq *r = xcalloc(1, sizeof *r);
	r->t = t;
	r->timeout = -1;
	t->user = r;
	t->gone = req_gone;
	r->next = sw.reqs;
	sw.reqs = r;
	return r;
}

/* the request's end: answered (if its client is there) and freed */
void sw_answer_json(struct swreq *r, int status, const char *json)
{
	if (r->t) {
		if (status == 200 || status == 422)   /* exceptions are not kept */
			slot_store(r->t, status, json);
		r->t->gone = NULL;
		r->t->user = NULL;
		http_answer(r->t, status, "application/json", json, strlen(json));
		r->t = NULL;
	}
	sw_session_req_done(r);
	sw_proc_req_done(r);
	sw_upload_req_done(r);
	sw_req_free(r);
}

void sw_answer_obj(struct swreq *r, cJSON *o)
{
	char *s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	sw_answer_json(r, 200, s);
	free(s);
}

void sw_raise(struct swreq *r, const char *class_path, const char *msg, cJSON *extra)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *e = cJSON_AddObjectToObject(o, "swerexception");
	cJSON_AddStringToObject(e, "message", msg);
	cJSON_AddStringToObject(e, "class_path", class_path);
	buf_t tb = {0};
	const char *dot = strrchr(class_path, '.');
	buf_printf(&tb, "Traceback (most recent call last):\n  File \"termd/door/swerex\", in %s\n"
		   "%s: %s\n", r->t ? r->t->path : "request",
		   strncmp(class_path, "builtins.", 9) == 0 && dot ? dot + 1 : class_path, msg);
	cJSON_AddStringToObject(e, "traceback", tb.p);
	buf_free(&tb);
	cJSON_AddItemToObject(e, "extra_info", extra ? extra : cJSON_CreateObject());
	char *s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	sw_answer_json(r, 511, s);
	free(s);
}

void sw_raisef(struct swreq *r, const char *class_path, const char *fmt, ...)
{
	buf_t b = {0};
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(&b, fmt, ap);
	va_end(ap);
	sw_raise(r, class_path, b.p ? b.p : "", NULL);
	buf_free(&b);
}

/* FastAPI's RequestValidationError answer, one error */
void sw_answer_422(struct swreq *r, const char *loc, const char *msg)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *d = cJSON_AddArrayToObject(o, "detail");
	cJSON *e = cJSON_CreateObject();
	cJSON_AddStringToObject(e, "type", strcmp(msg, "Field required") == 0 ? "missing" :
					   "value_error");
	cJSON *l = cJSON_AddArrayToObject(e, "loc");
	cJSON_AddItemToArray(l, cJSON_CreateString("body"));
	if (loc)
		cJSON_AddItemToArray(l, cJSON_CreateString(loc));
	cJSON_AddStringToObject(e, "msg", msg);
	cJSON_AddItemToArray(d, e);
	char *s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	sw_answer_json(r, 422, s);
	free(s);
}

static void detail(struct http_txn *t, int status, const char *d)
{
	buf_t b = {0};
	buf_puts(&b, "{\"detail\":");
	buf_put_json_string(&b, d, strlen(d));
	buf_putc(&b, '}');
	http_answer(t, status, "application/json", b.p, b.len);
	buf_free(&b);
}

/* ============================================== X-API-Key, X-Request-ID */

/* Before the body: the key (as SWE-ReX's authenticate middleware), then
 * the slot (an id answered last is answered again, nothing run). */
int sw_admit(struct http_txn *t)
{
	if (opts.token) {
		char key[640];
		int n = http_header(t, "x-api-key:", key, sizeof key);
		if (n <= 0) {
			http_set_header(t, "WWW-Authenticate", "APIKey");
			detail(t, 401, "Not authenticated");
			return 1;
		}
		if (!http_token_ok(key)) {
			detail(t, 401, "Invalid API Key");
			return 1;
		}
	} else if (t->auth != AUTH_FULL) {
		detail(t, 401, "Invalid API Key");
		return 1;
	}
	char id[256];
	if (sw.last_id[0] && http_header(t, "x-request-id:", id, sizeof id) > 0 &&
	    strcmp(id, sw.last_id) == 0) {
		http_answer(t, sw.last_status, "application/json", sw.last_body.p ? sw.last_body.p : "",
			    sw.last_body.len);
		return 1;
	}
	return 0;
}

/* ============================================== termd actions, a step each */

static void deliver(struct swreq *r, cJSON *ans)
{
	sw_cont c = r->cont;
	r->cont = NULL;
	r->id[0] = 0;
	if (c)
		c(r, ans);
	cJSON_Delete(ans);
}

static void sink(struct conn *c, const char *data, size_t len)
{
	(void)c;
	cJSON *ans = cJSON_ParseWithLength(data, len);
	const char *cause = ans ? sw_jstr(ans, "cause", NULL) : NULL;
	struct swreq *r = NULL;
	if (cause && *cause)
		for (r = sw.reqs; r; r = r->next)
			if (r->cont && strcmp(r->id, cause) == 0)
				break;
	if (!r) {
		cJSON_Delete(ans);
		return;
	}
	if (sw.in_dispatch) {
		cJSON_Delete(r->early);
		r->early = ans;
		return;
	}
	deliver(r, ans);
}

/* answers that came while an action was being dispatched, delivered once
 * the dispatch is over (a delivery may end requests: start again) */
static void flush_early(void)
{
	if (sw.in_dispatch)
		return;
	for (int again = 1; again;) {
		again = 0;
		for (struct swreq *r = sw.reqs; r; r = r->next)
			if (r->early) {
				cJSON *a = r->early;
				r->early = NULL;
				deliver(r, a);
				again = 1;
				break;
			}
	}
}

void sw_call(struct swreq *r, const char *action, cJSON *args, sw_cont cont)
{
	action_call_random_id(r->id, sizeof r->id, "swerex", ++sw.nid);
	r->cont = cont;
	sw.in_dispatch++;
	action_call(&sw.conn, r->id, action, args);
	sw.in_dispatch--;
	flush_early();
}

void sw_call_detached(const char *action, cJSON *args)
{
	/* random too: the counter starts again after an upgrade in place, and
	 * termd remembers the old termd's answered ids (a re-send) */
	char id[64];
	uint32_t rnd = 0;
	if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
		rnd = 0;
	snprintf(id, sizeof id, "swerex-bg-%llu-%08x", ++sw.nid, (unsigned)rnd);
	sw.in_dispatch++;
	action_call(&sw.conn, id, action, args);
	sw.in_dispatch--;
	flush_early();
}

int sw_is_error(const cJSON *ans)
{
	const char *o = sw_jstr(ans, "observation", NULL);
	return !o || strcmp(o, "error") == 0;
}

const cJSON *sw_extras(const cJSON *ans)
{
	return cJSON_GetObjectItemCaseSensitive(ans, "extras");
}

const char *sw_ans_code(const cJSON *ans)
{
	return sw_jstr(sw_extras(ans), "code", "");
}

const char *sw_ans_content(const cJSON *ans)
{
	return sw_jstr(ans, "content", "");
}

const char *sw_jstr(const cJSON *o, const char *key, const char *def)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
	return cJSON_IsString(v) ? v->valuestring : def;
}

double sw_jnum(const cJSON *o, const char *key, double def)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
	return cJSON_IsNumber(v) ? v->valuedouble : def;
}

int sw_jbool(const cJSON *o, const char *key, int def)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
	if (cJSON_IsBool(v))
		return cJSON_IsTrue(v);
	if (cJSON_IsString(v))   /* pydantic takes "true"/"false" too */
		return !strcasecmp(v->valuestring, "true") || !strcmp(v->valuestring, "1");
	return def;
}

static void timer_fire(lws_sorted_usec_list_t *sul)
{
	(void)sul;
}

void sw_timer(struct swreq *r, void (*fn)(lws_sorted_usec_list_t *), double seconds)
{
	lws_sul_cancel(&r->timer);
	uint64_t us = seconds <= 0 ? 1 : (uint64_t)(seconds * 1e6);
	server_timer(&r->timer, fn ? fn : timer_fire, us ? us : 1);
}

/* ================================================== Python's texts */

void sw_repr(buf_t *b, const char *s, size_t n)
{
	int sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
	char q = sq && !dq ? '"' : '\'';
	buf_putc(b, q);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == (unsigned char)q || c == '\\')
			buf_printf(b, "\\%c", c);
		else if (c == '\n')
			buf_puts(b, "\\n");
		else if (c == '\r')
			buf_puts(b, "\\r");
		else if (c == '\t')
			buf_puts(b, "\\t");
		else if (c < 0x20 || c == 0x7f)
			buf_printf(b, "\\x%02x", c);
		else
			buf_putc(b, (char)c);
	}
	buf_putc(b, q);
}

void sw_float(buf_t *b, double x)
{
	char out[64];
	if (x == (double)(long long)x && x < 1e16 && x > -1e16) {
		snprintf(out, sizeof out, "%.1f", x);
	} else {
		for (int p = 1; p <= 17; p++) {
			snprintf(out, sizeof out, "%.*g", p, x);
			if (strtod(out, NULL) == x)
				break;
		}
	}
	buf_puts(b, out);
}

/* length of a valid UTF-8 sequence at s, or 0 */
static size_t u8_len(const unsigned char *s, size_t n)
{
	if (s[0] < 0x80)
		return 1;
	size_t need = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
	if (!need || need > n || s[0] >= 0xf5)
		return 0;
	for (size_t i = 1; i < need; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if (need == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0)))
		return 0;
	if (need == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90)))
		return 0;
	return need;
}

void sw_backslashreplace(buf_t *out, const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		size_t l = u8_len(p + i, n - i);
		if (l) {
			buf_append(out, p + i, l);
			i += l;
		} else {
			buf_printf(out, "\\x%02x", p[i]);
			i++;
		}
	}
}

/* re.sub(r"\x1B[@-_][0-?]*[ -/]*[@-~]", "", s).replace("\r\n", "\n") */
void sw_strip_control(buf_t *out, const char *s, size_t n)
{
	buf_t t = {0};
	for (size_t i = 0; i < n; i++) {
		if (s[i] == 0x1b && i + 1 < n && s[i + 1] >= '@' && s[i + 1] <= '_') {
			size_t j = i + 2;
			while (j < n && s[j] >= '0' && s[j] <= '?')
				j++;
			while (j < n && s[j] >= ' ' && s[j] <= '/')
				j++;
			if (j < n && s[j] >= '@' && s[j] <= '~') {
				i = j;
				continue;
			}
		}
		buf_putc(&t, s[i]);
	}
	for (size_t i = 0; i < t.len; i++) {
		if (t.p[i] == '\r' && i + 1 < t.len && t.p[i + 1] == '\n')
			continue;
		buf_putc(out, t.p[i]);
	}
	buf_free(&t);
}

/* ============================================================ routes */

void sw_root(struct http_txn *t)
{
	struct swreq *r = sw_req_new(t);
	sw_answer_json(r, 200, "{\"message\":\"hello world\"}");
}

void sw_is_alive(struct http_txn *t)
{
	struct swreq *r = sw_req_new(t);
	sw_answer_json(r, 200, "{\"is_alive\":true,\"message\":\"\"}");
}

void sw_close(struct http_txn *t)
{
	struct swreq *r = sw_req_new(t);
	sw_sessions_close_all();
	sw_answer_json(r, 200, "{}");
}

void swerex_register(void)
{
	/* on a listener serving api=swerex (swerex-remote's), at its root */
	static const struct http_route routes[] = {
		{"GET", "/", sw_admit, sw_root, 0, TD_API_SWEREX},
		{"GET", "/is_alive", sw_admit, sw_is_alive, 0, TD_API_SWEREX},
		{"POST", "/create_session", sw_admit, sw_create_session, 0, TD_API_SWEREX}, /* session.c */
		{"POST", "/run_in_session", sw_admit, sw_run_in_session, 0, TD_API_SWEREX}, /* session.c */
		{"POST", "/close_session", sw_admit, sw_close_session, 0, TD_API_SWEREX},   /* session.c */
		{"POST", "/execute", sw_admit, sw_execute, 0, TD_API_SWEREX},               /* exec.c */
		{"POST", "/read_file", sw_admit, sw_read_file, 0, TD_API_SWEREX},           /* files.c */
		{"POST", "/write_file", sw_admit, sw_write_file, 0, TD_API_SWEREX},         /* files.c */
		{"POST", "/upload", sw_admit, sw_upload, 0, TD_API_SWEREX},                 /* files.c */
		{"POST", "/close", sw_admit, sw_close, 0, TD_API_SWEREX},
	};
	http_routes_register(routes, sizeof routes / sizeof routes[0]);
	sw.conn.sink = sink;
	sw_sessions_init();
	sw_exec_init();
	sw.registered = 1;
}

void swerex_shutdown(void)
{
	if (!sw.registered)
		return;
	while (sw.reqs)
		sw_answer_json(sw.reqs, 503, "{\"detail\":\"termd is stopping\"}");
	sw_sessions_shutdown();
	sw_exec_shutdown();
	buf_free(&sw.last_body);
}
