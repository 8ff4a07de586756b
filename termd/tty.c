/* tty.c — the live terminal channel `/tty/<session>` (subprotocol
 * termd.tty.v1): viewers attach read-only or read-write, get a size frame
 * and a snapshot of the screen, then the pty's bytes in order. Each viewer
 * has its own bounded queue: one that falls behind has its backlog dropped
 * and gets a fresh snapshot, so it never slows the pty or anyone else.
 * Input and resizes from rw viewers; attach/detach/input/resize events. */
#include "termd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VIEWER_QUEUE_MAX (2u * 1024u * 1024u)

struct vframe {
	struct vframe *next;
	size_t len;
	unsigned char *data;       /* LWS_PRE headroom, type byte, payload */
};

static void vq_clear(struct viewer *v)
{
	while (v->head) {
		struct vframe *f = v->head;
		v->head = f->next;
		free(f->data);
		free(f);
	}
	v->tail = NULL;
	v->queued = 0;
}

static void vq_push(struct viewer *v, char type, const void *data, size_t n)
{
	struct vframe *f = xmalloc(sizeof *f);
	f->next = NULL;
	f->len = n + 1;
	f->data = xmalloc(LWS_PRE + n + 1);
	f->data[LWS_PRE] = (unsigned char)type;
	if (n)
		memcpy(f->data + LWS_PRE + 1, data, n);
	if (v->tail)
		v->tail->next = f;
	else
		v->head = f;
	v->tail = f;
	v->queued += n + 1;
	lws_callback_on_writable(v->wsi);
}

static void send_size(struct viewer *v)
{
	char j[64];
	int n = snprintf(j, sizeof j, "{\"cols\":%d,\"rows\":%d}", v->s->cols, v->s->rows);
	vq_push(v, TD_TTY_SIZE, j, (size_t)n);
}

static void send_snapshot(struct viewer *v)
{
	buf_t b = {0};
	screen_snapshot(v->s->screen, &b);
	vq_push(v, TD_TTY_SNAPSHOT, b.p ? b.p : "", b.len);
	buf_free(&b);
	const char *t = screen_title(v->s->screen);
	if (*t)
		vq_push(v, TD_TTY_TITLE, t, strlen(t));
}

static void viewer_event(const char *what, struct viewer *v)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "session", v->name);
	cJSON_AddStringToObject(ex, "mode", v->rw ? "rw" : "ro");
	events_emit(NULL, NULL, what, "", ex);
}

static void viewer_unlink(struct viewer *v)
{
	if (!v->s)
		return;
	for (struct viewer **pp = &v->s->viewers; *pp; pp = &(*pp)->next) {
		if (*pp == v) {
			*pp = v->next;
			break;
		}
	}
	v->s->nviewers--;
	v->s = NULL;
}

void tty_on_output(struct session *s, const char *data, size_t n)
{
	for (struct viewer *v = s->viewers; v; v = v->next) {
		if (v->resync)
			continue;   /* a snapshot will replace what it missed */
		if (v->queued + n > VIEWER_QUEUE_MAX) {
			vq_clear(v);
			v->resync = 1;
			lws_callback_on_writable(v->wsi);
			continue;
		}
		vq_push(v, TD_TTY_OUTPUT, data, n);
	}
}

void tty_on_title(struct session *s, const char *t, size_t n)
{
	for (struct viewer *v = s->viewers; v; v = v->next)
		if (!v->resync)
			vq_push(v, TD_TTY_TITLE, t, n);
}

void tty_on_resize(struct session *s)
{
	for (struct viewer *v = s->viewers; v; v = v->next)
		if (!v->resync)
			send_size(v);
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "session", s->name);
	cJSON_AddNumberToObject(ex, "cols", s->cols);
	cJSON_AddNumberToObject(ex, "rows", s->rows);
	events_emit(NULL, NULL, "session.resize", "", ex);
}

void tty_on_exit(struct session *s)
{
	char j[48];
	int n = snprintf(j, sizeof j, "{\"exit_code\":%d}", s->exit_code);
	for (struct viewer *v = s->viewers; v; v = v->next) {
		if (v->resync) {
			v->resync = 0;
			send_snapshot(v);
		}
		vq_push(v, TD_TTY_EXIT, j, (size_t)n);
		v->closing = 1;
	}
}

void tty_session_gone(struct session *s)
{
	while (s->viewers) {
		struct viewer *v = s->viewers;
		viewer_unlink(v);
		v->closing = 1;
		lws_callback_on_writable(v->wsi);
	}
}

static void on_message(struct viewer *v, const unsigned char *m, size_t n)
{
	if (!n)
		return;
	struct session *s = v->s;
	switch (m[0]) {
	case TD_TTY_INPUT:
		if (!v->rw) {
			static const char msg[] = "read-only connection: input dropped";
			vq_push(v, TD_TTY_ERROR, msg, sizeof msg - 1);
			return;
		}
		if (!s || !s->alive || n < 2)
			return;
		session_write(s, m + 1, n - 1);
		cmd_note_typed(s, (const char *)m + 1, n - 1, 0);
		{
			cJSON *ex = cJSON_CreateObject();
			cJSON_AddStringToObject(ex, "session", s->name);
			char *t = xstrndup((const char *)m + 1, n - 1);
			cJSON_AddStringToObject(ex, "text", t);
			free(t);
			events_emit(NULL, NULL, "user.input", "", ex);
		}
		break;
	case TD_TTY_RESIZE: {
		if (!v->rw) {
			static const char msg[] = "read-only connection: resize dropped";
			vq_push(v, TD_TTY_ERROR, msg, sizeof msg - 1);
			return;
		}
		if (!s)
			return;
		cJSON *j = cJSON_ParseWithLength((const char *)m + 1, n - 1);
		const cJSON *c = j ? cJSON_GetObjectItemCaseSensitive(j, "cols") : NULL;
		const cJSON *r = j ? cJSON_GetObjectItemCaseSensitive(j, "rows") : NULL;
		if (cJSON_IsNumber(c) && cJSON_IsNumber(r) && c->valuedouble >= 2 &&
		    c->valuedouble <= 1000 && r->valuedouble >= 1 && r->valuedouble <= 1000) {
			session_resize(s, (int)c->valuedouble, (int)r->valuedouble);
		} else {
			static const char msg[] = "resize wants {\"cols\":2-1000,\"rows\":1-1000}";
			vq_push(v, TD_TTY_ERROR, msg, sizeof msg - 1);
		}
		cJSON_Delete(j);
		break;
	}
	default: {
		static const char msg[] = "unknown frame type";
		vq_push(v, TD_TTY_ERROR, msg, sizeof msg - 1);
		break;
	}
	}
}

/* "/tty/<name>" → name, or NULL */
static int tty_name(const char *path, char *name, size_t n)
{
	size_t pl = strlen(TD_PATH_TTY);
	if (strncmp(path, TD_PATH_TTY, pl) != 0)
		return -1;
	size_t nl = strlen(path + pl);
	if (nl >= n)
		return -1;
	memcpy(name, path + pl, nl + 1);
	return td_valid_session_name(name) ? 0 : -1;
}

int tty_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
		 void *in, size_t len)
{
	struct viewer *v = user;
	switch (reason) {
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: {
		char path[256], mode[16] = "ro";
		if (lws_hdr_copy(wsi, path, sizeof path, WSI_TOKEN_GET_URI) < 0)
			return 1;
		char *q = strchr(path, '?');
		if (q)
			*q = 0;
		memset(v, 0, sizeof *v);
		if (tty_name(path, v->name, sizeof v->name) < 0 || !session_find(v->name))
			return 1;
		int level = server_auth_level(wsi);
		if (level == 0)
			return 1;
		const char *m = lws_get_urlarg_by_name(wsi, "mode=", mode, sizeof mode);
		if (m && strcmp(m, "rw") == 0) {
			if (level < 2)
				return 1;   /* the view token cannot type */
			v->rw = 1;
		} else if (m && strcmp(m, "ro") != 0) {
			return 1;
		}
		return 0;
	}
	case LWS_CALLBACK_ESTABLISHED: {
		v->wsi = wsi;
		struct session *s = session_find(v->name);
		if (!s) {
			v->closing = 1;
			lws_callback_on_writable(wsi);
			break;
		}
		if ((size_t)s->nviewers >= opts.max_viewers) {
			/* admitted together with others past the limit */
			static const char msg[] = "too many viewers on this session (--max-viewers)";
			vq_push(v, TD_TTY_ERROR, msg, sizeof msg - 1);
			v->closing = 1;
			break;
		}
		v->s = s;
		v->next = s->viewers;
		s->viewers = v;
		s->nviewers++;
		v->attached = 1;
		send_size(v);
		send_snapshot(v);
		viewer_event("viewer.attach", v);
		if (!s->alive) {
			char j[48];
			int n = snprintf(j, sizeof j, "{\"exit_code\":%d}", s->exit_code);
			vq_push(v, TD_TTY_EXIT, j, (size_t)n);
			v->closing = 1;
		}
		break;
	}
	case LWS_CALLBACK_RECEIVE:
		if (v->rx.len + len > 1024 * 1024) {
			buf_free(&v->rx);   /* over a sane frame size: dropped */
			break;
		}
		buf_append(&v->rx, in, len);
		if (lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi)) {
			buf_t m = v->rx;
			memset(&v->rx, 0, sizeof v->rx);
			on_message(v, (const unsigned char *)(m.p ? m.p : ""), m.len);
			buf_free(&m);
		}
		break;
	case LWS_CALLBACK_SERVER_WRITEABLE: {
		if (v->resync && v->s) {
			v->resync = 0;
			send_snapshot(v);   /* queues and asks for writable again */
		}
		struct vframe *f = v->head;
		if (!f)
			return v->closing ? -1 : 0;
		int w = lws_write(wsi, f->data + LWS_PRE, f->len, LWS_WRITE_BINARY);
		v->head = f->next;
		if (!v->head)
			v->tail = NULL;
		v->queued -= f->len;
		free(f->data);
		free(f);
		if (w < 0)
			return -1;
		if (v->head || v->closing)
			lws_callback_on_writable(wsi);
		break;
	}
	case LWS_CALLBACK_CLOSED:
		if (v->attached) {
			if (!srv.stopping)
				viewer_event("viewer.detach", v);
			viewer_unlink(v);
		}
		vq_clear(v);
		buf_free(&v->rx);
		break;
	default:
		break;
	}
	return 0;
}
