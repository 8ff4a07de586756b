/* envd.c — e2b's envd API's plumbing (PROTOCOL.md §10,
 * reference/e2b-envd.md): the Connect protocol with the JSON codec over
 * HTTP/1.1 (unary answers as application/json; server streams as
 * application/connect+json in 5-byte envelopes ending with the
 * end-of-stream message; Connect error codes and their HTTP statuses),
 * the request's user, keepalives, holds and deadlines on open streams,
 * and the socketless connection through which the services (process.c,
 * fs.c, listdir.c, watch.c) dispatch termd actions. It calls none of
 * them: routes.c is the door's entry. */
#include "envd.h"
#include "fsio.h"

#include <errno.h>
#include <pwd.h>
#include <stdarg.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct {
	const char *name;
	int status;
} codes[] = {
	[EC_CANCELED] = {"canceled", 499},
	[EC_UNKNOWN] = {"unknown", 500},
	[EC_INVALID_ARGUMENT] = {"invalid_argument", 400},
	[EC_DEADLINE_EXCEEDED] = {"deadline_exceeded", 504},
	[EC_NOT_FOUND] = {"not_found", 404},
	[EC_ALREADY_EXISTS] = {"already_exists", 409},
	[EC_PERMISSION_DENIED] = {"permission_denied", 403},
	[EC_RESOURCE_EXHAUSTED] = {"resource_exhausted", 429},
	[EC_FAILED_PRECONDITION] = {"failed_precondition", 400},
	[EC_ABORTED] = {"aborted", 409},
	[EC_OUT_OF_RANGE] = {"out_of_range", 400},
	[EC_UNIMPLEMENTED] = {"unimplemented", 501},
	[EC_INTERNAL] = {"internal", 500},
	[EC_UNAVAILABLE] = {"unavailable", 503},
	[EC_DATA_LOSS] = {"data_loss", 500},
	[EC_UNAUTHENTICATED] = {"unauthenticated", 401},
};

const char *envd_code_name(enum envd_code c)
{
	return codes[c].name;
}

int envd_code_status(enum envd_code c)
{
	return codes[c].status;
}

/* =============================================================== users */

struct envd_user envd_cur;

#define AUTH_HDR_MAX 511       /* an Authorization: Basic header longer is refused */

/* ?username= of a REST request: 0 none, 1 in out, -1 too long for it
 * (lws's own lookup says "none" for an argument that does not fit) */
static int rest_username(struct http_txn *t, char *out, size_t n)
{
	int total = lws_hdr_total_length(t->wsi, WSI_TOKEN_HTTP_URI_ARGS);
	if (total <= 0)
		return 0;
	char *frag = xmalloc((size_t)total + 1);
	int r = 0;
	for (int i = 0; lws_hdr_copy_fragment(t->wsi, frag, total + 1, WSI_TOKEN_HTTP_URI_ARGS, i) >= 0;
	     i++) {
		if (strncmp(frag, "username=", 9) != 0)
			continue;
		if (strlen(frag + 9) >= n) {
			r = -1;
			break;
		}
		snprintf(out, n, "%s", frag + 9);
		r = 1;
		break;
	}
	free(frag);
	return r;
}

int envd_user_begin(struct http_txn *t, int rest, char *why, size_t n)
{
	char name[256] = "";
	int hl;
	if (rest) {
		if (rest_username(t, name, sizeof name) < 0) {
			snprintf(why, n, "username is over %zu bytes", sizeof name - 1);
			return EC_INVALID_ARGUMENT;
		}
	} else if ((hl = lws_hdr_total_length(t->wsi, WSI_TOKEN_HTTP_AUTHORIZATION)) > 0) {
		/* a user named that termd cannot read is refused, never taken
		 * for no user at all (the default user: root) */
		char *hdr = xmalloc((size_t)hl + 1);
		int r = 0;
		if (lws_hdr_copy(t->wsi, hdr, hl + 1, WSI_TOKEN_HTTP_AUTHORIZATION) < 0)
			hdr[0] = 0;
		if (strncasecmp(hdr, "Basic ", 6) == 0) {
			buf_t b = {0};
			const char *v = hdr + 6;
			while (*v == ' ')
				v++;
			size_t vl = strlen(v);
			while (vl && v[vl - 1] == ' ')
				vl--;
			if (hl > AUTH_HDR_MAX) {
				snprintf(why, n, "the Authorization header is over %d bytes", AUTH_HDR_MAX);
				r = EC_UNAUTHENTICATED;
			} else if (fsio_b64_decode(v, vl, &b) < 0 || memchr(b.p, 0, b.len) ||
				   !memchr(b.p, ':', b.len)) {
				snprintf(why, n, "the Authorization: Basic credential is not base64 of "
					 "\"user:password\"");
				r = EC_UNAUTHENTICATED;
			} else {
				buf_putc(&b, 0);
				*strchr(b.p, ':') = 0;
				if (strlen(b.p) >= sizeof name) {
					snprintf(why, n, "the user name in Authorization: Basic is over "
						 "%zu bytes", sizeof name - 1);
					r = EC_UNAUTHENTICATED;
				} else {
					snprintf(name, sizeof name, "%s", b.p);
				}
			}
			buf_free(&b);
		}
		free(hdr);
		if (r)
			return r;
	}
	struct passwd *pw;
	errno = 0;
	if (name[0])
		pw = getpwnam(name);
	else if (opts.envd_user)
		pw = getpwnam(opts.envd_user);
	else
		pw = getpwuid(geteuid());
	if (!pw) {
		int e = errno;
		/* a lookup that could not be made (no fd left for /etc/passwd,
		 * no memory) is not "no such user": said as what it is, and
		 * worth a retry (issue 52's soak: fds exhausted for a moment) */
		if (e == EMFILE || e == ENFILE || e == ENOMEM || e == EIO || e == EAGAIN || e == EINTR) {
			snprintf(why, n, "cannot look up the user: %s", strerror(e));
			return e == EIO || e == EINTR ? EC_UNAVAILABLE : EC_RESOURCE_EXHAUSTED;
		}
		if (name[0] || opts.envd_user)
			snprintf(why, n, "no user named '%.64s'", name[0] ? name : opts.envd_user);
		else
			snprintf(why, n, "no user with termd's uid %u", (unsigned)geteuid());
		return EC_INVALID_ARGUMENT;
	}
	memset(&envd_cur, 0, sizeof envd_cur);
	snprintf(envd_cur.name, sizeof envd_cur.name, "%s", pw->pw_name);
	envd_cur.uid = pw->pw_uid;
	envd_cur.gid = pw->pw_gid;
	envd_cur.self = pw->pw_uid == geteuid();
	fs_cred_user(&envd_cur.cred, pw);
	const char *home = getenv("HOME");
	snprintf(envd_cur.home, sizeof envd_cur.home, "%s",
		 envd_cur.self && home && home[0] == '/' ? home : pw->pw_dir);
	if (!envd_cur.self && geteuid() != 0) {
		snprintf(why, n, "termd does not run as root and cannot act as '%.64s'", pw->pw_name);
		return EC_PERMISSION_DENIED;
	}
	return 0;
}

/* ============================================================ messages */

const cJSON *envd_field(const cJSON *o, const char *camel, const char *snake)
{
	if (!cJSON_IsObject(o))
		return NULL;
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, camel);
	if (!v && snake)
		v = cJSON_GetObjectItemCaseSensitive(o, snake);
	return v && !cJSON_IsNull(v) ? v : NULL;
}

const char *envd_str(const cJSON *o, const char *camel, const char *snake)
{
	const cJSON *v = envd_field(o, camel, snake);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

int envd_num(const cJSON *o, const char *camel, const char *snake, double *out)
{
	const cJSON *v = envd_field(o, camel, snake);
	if (cJSON_IsNumber(v)) {
		*out = v->valuedouble;
		return 0;
	}
	if (cJSON_IsString(v) && v->valuestring[0]) {   /* int64 as text */
		char *end;
		double d = strtod(v->valuestring, &end);
		if (*end)
			return -1;
		*out = d;
		return 0;
	}
	return -1;
}

int envd_bytes(const cJSON *o, const char *key, buf_t *out)
{
	const cJSON *v = envd_field(o, key, NULL);
	if (!v)
		return 0;
	if (!cJSON_IsString(v))
		return -1;
	return fsio_b64_decode(v->valuestring, strlen(v->valuestring), out);
}

void envd_add_bytes(cJSON *o, const char *key, const void *p, size_t n)
{
	buf_t b = {0};
	fsio_b64_encode(p, n, &b);
	buf_putc(&b, 0);
	cJSON_AddStringToObject(o, key, b.p);
	buf_free(&b);
}

/* ============================================== termd actions, at once */

static struct {
	struct action_caller call;   /* socketless: answers come to sink */
	int registered;
} ed;

/* an action whose answer comes later (file work, in a worker): the call
 * it is for, kept until then */
struct envd_later {
	struct envd_later *next;
	char id[48];
	struct envd_call c;       /* t NULL once its client left; req owned */
	envd_then_fn *then;
};
static struct envd_later *laters;

static void later_free(struct envd_later *l)
{
	cJSON_Delete(l->c.req);
	free(l);
}

static void envd_sink(struct conn *c, const char *data, size_t len)
{
	(void)c;
	cJSON *ans = cJSON_ParseWithLength(data, len);
	if (action_caller_take(&ed.call, ans))
		return;
	const char *cause = ans ? envd_str(ans, "cause", NULL) : NULL;
	for (struct envd_later **pp = &laters; cause && *pp; pp = &(*pp)->next) {
		struct envd_later *l = *pp;
		if (strcmp(l->id, cause) != 0)
			continue;
		*pp = l->next;
		if (l->c.t) {
			l->c.t->gone = NULL;
			l->c.t->user = NULL;
			l->then(&l->c, ans);
		}
		later_free(l);
		break;
	}
	cJSON_Delete(ans);
}

static void later_gone(struct http_txn *t)
{
	for (struct envd_later *l = laters; l; l = l->next)
		if (l->c.t == t)
			l->c.t = NULL;
	t->user = NULL;
}

void envd_action_then(struct envd_call *c, const char *action, cJSON *args, envd_then_fn *then)
{
	struct envd_later *l = xcalloc(1, sizeof *l);
	action_caller_id(&ed.call, l->id, sizeof l->id);
	l->c = *c;
	l->c.req = cJSON_Duplicate(c->req, 1);
	l->then = then;
	l->next = laters;
	laters = l;
	c->t->gone = later_gone;
	fsact_as(&envd_cur.cred);   /* file work acts as the request's user */
	action_call(&ed.call.conn, l->id, action, args);
	fsact_as(NULL);
}

cJSON *envd_action(const char *action, cJSON *args)
{
	return action_call_now(&ed.call, action, args);
}

/* ============================================================== answers */

/* JSON text is UTF-8 (RFC 8259 §8.1): a string's bytes that are not (a
 * file named with byte 0xff, a path, a command's argument) each become
 * U+FFFD, as Go's encoding/json writes them. Real envd's protojson
 * refuses such a message (the whole call fails internal: "marshal
 * message: ... contains invalid UTF-8"); a listing with one odd name is
 * more use to a client. */
char *envd_json_print(const cJSON *o)
{
	char *s = cJSON_PrintUnformatted(o);
	size_t n = s ? strlen(s) : 0;
	if (!n || utf8_text(s, n, NULL))
		return s;
	buf_t u = {0};
	buf_put_utf8(&u, s, n);
	free(s);
	return buf_steal(&u);
}

void envd_answer_json(struct http_txn *t, int status, cJSON *msg)
{
	char *s = envd_json_print(msg);
	http_answer(t, status, "application/json", s, strlen(s));
	free(s);
	cJSON_Delete(msg);
}

void envd_reply(struct envd_call *c, cJSON *msg)
{
	envd_answer_json(c->t, 200, msg);
}

cJSON *envd_error_json(enum envd_code code, const char *msg)
{
	cJSON *e = cJSON_CreateObject();
	cJSON_AddStringToObject(e, "code", envd_code_name(code));
	cJSON_AddStringToObject(e, "message", msg);
	return e;
}

int envd_fail(struct envd_call *c, enum envd_code code, const char *fmt, ...)
{
	buf_t b = {0};
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(&b, fmt, ap);
	va_end(ap);
	buf_putc(&b, 0);
	if (c->stream) {
		struct envd_stream *st = envd_stream_open(c);
		envd_stream_finish(st, code, b.p);
	} else {
		envd_answer_json(c->t, envd_code_status(code), envd_error_json(code, b.p));
	}
	buf_free(&b);
	return -1;
}

/* ============================================================== streams */

/* ---- a stream that holds its producer (envd_stream_hold) */

#define HOLD_TICK_US 20000        /* a held stream is looked at this often */

static void finish_now(struct envd_stream *st, enum envd_code code, const char *msg);

static size_t http_unsent(const struct http_txn *t)
{
	return t->out.len - t->off;
}

/* what the HTTP stream counts against --stream-max for the next write
 * (http_stream_write: sent bytes not moved out yet too, none once all went) */
static size_t http_holds(const struct http_txn *t)
{
	return t->off == t->out.len ? 0 : t->out.len;
}

static size_t env_len(const char *e)
{
	const unsigned char *u = (const unsigned char *)e + 1;
	return 5 + ((size_t)u[0] << 24 | (size_t)u[1] << 16 | (size_t)u[2] << 8 | u[3]);
}

/* the client took some since the last look, or has everything */
static void hold_progress(struct envd_stream *st, uint64_t now)
{
	size_t unsent = st->t ? http_unsent(st->t) : 0;
	size_t sent = st->written - unsent;
	if (sent != st->sent_seen || (!unsent && !st->over.len)) {
		st->sent_seen = sent;
		st->progress_us = now;
	}
}

static void hold_tick(lws_sorted_usec_list_t *sul);

/* held: something waits, or (once held) the stream still holds more than
 * half of --stream-max; the tick runs while held or finishing */
static void hold_update(struct envd_stream *st)
{
	int was = st->held;
	size_t unsent = st->t ? http_unsent(st->t) : 0;
	if (st->over.len)
		st->held = 1;
	else if (unsent <= opts.stream_max / 2)
		st->held = 0;
	if ((st->held || st->finishing) && !st->ticking) {
		st->ticking = 1;
		server_timer(&st->hold_sul, hold_tick, HOLD_TICK_US);
	}
	if (was != st->held) {
		log_debug("envd: a process stream %s", st->held ? "is behind: its process held"
							       : "caught up: its process read again");
		if (st->held_changed)
			st->held_changed(st);
	}
}

/* whole waiting envelopes into the HTTP stream, as many as it takes below
 * --stream-max (one at least when it holds nothing); -1 when it was cut */
static int hold_flush(struct envd_stream *st)
{
	size_t k = 0, holds = http_holds(st->t);
	while (k + 5 <= st->over.len) {
		size_t len = env_len(st->over.p + k);
		if (holds + k + len > opts.stream_max && holds + k > 0)
			break;
		k += len;
	}
	if (!k)
		return 0;
	if (http_stream_write(st->t, st->over.p, k) == HTTP_STREAM_CUT)
		return -1;
	st->written += k;
	buf_consume(&st->over, k);
	if (!st->over.len)
		buf_free(&st->over);
	return 0;
}

/* cut: the client read nothing for --stream-stall (or one envelope was
 * over --stream-max): what waits is dropped, the owner lets go */
static void hold_cut(struct envd_stream *st, const char *why)
{
	buf_free(&st->over);
	st->finishing = 0;
	st->ended = 0;
	if (st->held_changed && st->held) {
		st->held = 0;
		st->held_changed(st);
	}
	if (st->gone)
		st->gone(st);
	finish_now(st, EC_RESOURCE_EXHAUSTED, why);
}

/* look again: move what waits, notice a stalled client, end a finished one */
static void hold_look(struct envd_stream *st)
{
	if (!st->t)
		return;
	uint64_t now = mono_us();
	if (hold_flush(st) < 0) {
		hold_cut(st, "a message is larger than --stream-max");
		return;
	}
	hold_progress(st, now);
	if ((st->held || st->finishing) && http_unsent(st->t) &&
	    now - st->progress_us >= (uint64_t)opts.stream_stall * 1000000u) {
		char why[128];
		snprintf(why, sizeof why, "the client read nothing of its stream for %zu s "
			 "(--stream-stall)", opts.stream_stall);
		log_info("envd: %s: cut", why);
		hold_cut(st, why);
		return;
	}
	if (st->finishing && !st->over.len) {
		st->finishing = 0;
		st->ended = 0;
		finish_now(st, (enum envd_code)st->fin_code, NULL);
		return;
	}
	hold_update(st);
}

static void hold_tick(lws_sorted_usec_list_t *sul)
{
	struct envd_stream *st = lws_container_of(sul, struct envd_stream, hold_sul);
	st->ticking = 0;
	hold_look(st);
}

static void hold_drained(struct http_txn *t)
{
	struct envd_stream *st = t->user;
	if (st)
		hold_look(st);
}

void envd_stream_hold(struct envd_stream *st, void (*held_changed)(struct envd_stream *st))
{
	st->holds = 1;
	st->held_changed = held_changed;
	st->progress_us = mono_us();
	if (st->t)
		st->t->drained = hold_drained;
}

/* a held stream's write: into the HTTP stream below --stream-max, else it
 * waits (and the producer is held) */
static size_t hold_put(struct envd_stream *st, const void *p, size_t n)
{
	size_t r;
	if (!st->over.len && (http_holds(st->t) + n <= opts.stream_max || !http_holds(st->t))) {
		r = http_stream_write(st->t, p, n);
		if (r == HTTP_STREAM_CUT)
			return r;
		st->written += n;
	} else {
		buf_append(&st->over, p, n);
		r = http_unsent(st->t) + st->over.len;
	}
	hold_progress(st, mono_us());
	hold_update(st);
	return r;
}

/* one envelope, whole (a stream cut at --stream-max holds whole ones; the
 * end-of-stream one goes even to a cut stream) */
static void envelope(struct envd_stream *st, int flags, cJSON *msg, size_t *pending)
{
	char *s = envd_json_print(msg);
	cJSON_Delete(msg);
	size_t n = strlen(s);
	unsigned char h[5] = {(unsigned char)flags, (unsigned char)(n >> 24), (unsigned char)(n >> 16),
			      (unsigned char)(n >> 8), (unsigned char)n};
	size_t p = 0;
	if (st->t) {
		buf_t b = {0};
		buf_append(&b, h, 5);
		buf_append(&b, s, n);
		if (flags & 2)
			http_stream_last(st->t, b.p, b.len);
		else if (st->holds)
			p = hold_put(st, b.p, b.len);
		else
			p = http_stream_write(st->t, b.p, b.len);
		buf_free(&b);
	}
	free(s);
	if (pending)
		*pending = p;
}

static void keepalive_timer(lws_sorted_usec_list_t *sul)
{
	struct envd_stream *st = lws_container_of(sul, struct envd_stream, ka);
	if (st->ended || !st->t)
		return;
	cJSON *m = cJSON_CreateObject();
	cJSON_AddObjectToObject(st->flat_keepalive ? m : cJSON_AddObjectToObject(m, "event"),
				"keepalive");
	envelope(st, 0, m, NULL);
	server_timer(&st->ka, keepalive_timer, (uint64_t)st->keepalive_s * 1000000u);
}

static void stream_gone(struct http_txn *t)
{
	struct envd_stream *st = t->user;
	if (!st)
		return;
	st->t = NULL;
	if (st->gone)
		st->gone(st);
	envd_stream_free(st);
}

static void deadline_timer(lws_sorted_usec_list_t *sul)
{
	struct envd_stream *st = lws_container_of(sul, struct envd_stream, deadline);
	if (st->ended)
		return;
	if (st->gone)
		st->gone(st);
	envd_stream_finish(st, EC_DEADLINE_EXCEEDED, "the call's Connect-Timeout-Ms passed");
}

struct envd_stream *envd_stream_open(struct envd_call *c)
{
	struct envd_stream *st = xcalloc(1, sizeof *st);
	st->t = c->t;
	st->keepalive_s = c->keepalive_s;
	c->t->user = st;
	c->t->gone = stream_gone;
	http_stream_start(c->t, 200, "application/connect+json");
	if (st->keepalive_s)
		server_timer(&st->ka, keepalive_timer, (uint64_t)st->keepalive_s * 1000000u);
	if (c->timeout_ms)
		server_timer(&st->deadline, deadline_timer, c->timeout_ms * 1000u);
	return st;
}

size_t envd_stream_send(struct envd_stream *st, cJSON *msg)
{
	size_t pending = 0;
	if (st->ended) {
		cJSON_Delete(msg);
		return 0;
	}
	envelope(st, 0, msg, &pending);
	return pending;
}

size_t envd_stream_send_json(struct envd_stream *st, buf_t *b)
{
	if (st->ended || !st->t)
		return 0;
	size_t n = b->len - 5;
	unsigned char *h = (unsigned char *)b->p;
	h[0] = 0;
	h[1] = (unsigned char)(n >> 24);
	h[2] = (unsigned char)(n >> 16);
	h[3] = (unsigned char)(n >> 8);
	h[4] = (unsigned char)n;
	if (st->holds)
		return hold_put(st, b->p, b->len);
	return http_stream_write(st->t, b->p, b->len);
}

void envd_stream_finish(struct envd_stream *st, enum envd_code code, const char *msg)
{
	if (st->ended)
		return;
	if (st->holds && st->t && st->over.len && !code) {
		/* a normal end comes after what waits (hold_look ends it) */
		st->ended = 1;
		st->finishing = 1;
		st->fin_code = code;
		lws_sul_cancel(&st->ka);
		lws_sul_cancel(&st->deadline);
		hold_update(st);
		return;
	}
	buf_free(&st->over);
	finish_now(st, code, msg);
}

static void finish_now(struct envd_stream *st, enum envd_code code, const char *msg)
{
	cJSON *m = cJSON_CreateObject();
	if (msg)
		cJSON_AddItemToObject(m, "error", envd_error_json(code, msg));
	envelope(st, 2, m, NULL);
	st->ended = 1;
	lws_sul_cancel(&st->ka);
	if (st->t) {
		st->t->gone = NULL;
		st->t->drained = NULL;
		st->t->user = NULL;
		http_stream_end(st->t);
		st->t = NULL;
	}
	envd_stream_free(st);
}

void envd_stream_free(struct envd_stream *st)
{
	lws_sul_cancel(&st->ka);
	lws_sul_cancel(&st->deadline);
	lws_sul_cancel(&st->hold_sul);
	buf_free(&st->over);
	free(st);
}

/* the socketless connection made ready (envd_register) */
void envd_calls_start(void)
{
	ed.call.conn.sink = envd_sink;
	ed.call.prefix = "envd";
	ed.registered = 1;
}

/* what is still waiting for an action's answer, dropped (envd_shutdown) */
void envd_calls_end(void)
{
	if (!ed.registered)
		return;
	cJSON_Delete(ed.call.answer);
	ed.call.answer = NULL;
	while (laters) {   /* their file work was dropped (fswork_shutdown) */
		struct envd_later *l = laters;
		laters = l->next;
		if (l->c.t)
			l->c.t->gone = NULL;
		later_free(l);
	}
}
