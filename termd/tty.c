/* tty.c — the live terminal channel `/tty/<session>` (subprotocol
 * termd.tty.v1): viewers attach read-only or read-write, get a size frame
 * and a snapshot of the screen, then the pty's bytes in order. Each viewer
 * has its own bounded queue: one that falls behind has its backlog dropped
 * and gets a fresh snapshot, so it never slows the pty or anyone else.
 * Input and resizes from rw viewers; attach/detach/input/resize events.
 * The connection plumbing is wsconn.c's, the upgrade checks http.c's; the
 * channel's lws_protocols entry is exported, struct viewer is private. */
#include "termd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VIEWER_QUEUE_MAX (2u * 1024u * 1024u)
/* 'O' pieces queued back to back go out as one frame of up to this many
 * bytes: one write (and one frame to parse) per 64 KiB instead of one per
 * pty read, which is what a viewer costs the loop most of */
#define TTY_OUTPUT_COALESCE 65536u
/* largest client frame (input, resize): anything sane is far below */
#define TTY_FRAME_MAX (1024u * 1024u)

/* One /tty connection; lws allocates it (tty_protocol's per-session size). */
struct viewer {
	struct wsconn ws;         /* its queue and reassembly */
	struct viewer *next;      /* in the session's list */
	struct session *s;
	char name[TD_SESSION_NAME_MAX + 1];
	int rw;
	int attached;
	int resync;               /* backlog dropped: snapshot next */
	int closing;              /* close once the queue is sent */
};

/* queue one frame: its type byte, then the payload */
static void vq_push(struct viewer *v, char type, const void *data, size_t n)
{
	unsigned char *p = wsconn_queue(&v->ws, n + 1);
	p[0] = (unsigned char)type;
	if (n)
		memcpy(p + 1, data, n);
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

static void tty_on_output(struct session *s, const char *data, size_t n)
{
	for (struct viewer *v = s->viewers; v; v = v->next) {
		if (v->resync)
			continue;   /* a snapshot will replace what it missed */
		if (wsconn_over(&v->ws, n + 1, VIEWER_QUEUE_MAX)) {
			wsconn_drop_queue(&v->ws);
			v->resync = 1;
			lws_callback_on_writable(v->ws.wsi);
			continue;
		}
		/* the pty's bytes in order: appended to an 'O' frame not yet
		 * sent, or a frame of their own */
		size_t last_len;
		const unsigned char *last = wsconn_last(&v->ws, &last_len);
		unsigned char *p = last && last[0] == TD_TTY_OUTPUT
					   ? wsconn_extend(&v->ws, n, TTY_OUTPUT_COALESCE)
					   : NULL;
		if (p)
			memcpy(p, data, n);
		else
			vq_push(v, TD_TTY_OUTPUT, data, n);
	}
}

static void tty_on_title(struct session *s, const char *t, size_t n)
{
	for (struct viewer *v = s->viewers; v; v = v->next)
		if (!v->resync)
			vq_push(v, TD_TTY_TITLE, t, n);
}

static void tty_on_resize(struct session *s)
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

static void tty_on_exit(struct session *s)
{
	char j[48];
	int n = snprintf(j, sizeof j, "{\"exit_code\":%d}", s->pty.exit_code);
	for (struct viewer *v = s->viewers; v; v = v->next) {
		if (v->resync) {
			v->resync = 0;
			send_snapshot(v);
		}
		vq_push(v, TD_TTY_EXIT, j, (size_t)n);
		v->closing = 1;
	}
}

static void tty_session_gone(struct session *s)
{
	while (s->viewers) {
		struct viewer *v = s->viewers;
		viewer_unlink(v);
		v->closing = 1;
		lws_callback_on_writable(v->ws.wsi);
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
		if (!s || !s->pty.alive || n < 2)
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

static int tty_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
			void *in, size_t len)
{
	struct viewer *v = user;
	switch (reason) {
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: {
		struct upgrade u;
		memset(v, 0, sizeof *v);
		if (http_upgrade(wsi, CHANNEL_TTY, &u) < 0)
			return 1;
		memcpy(v->name, u.session, sizeof v->name);
		v->rw = u.rw;
		return 0;
	}
	case LWS_CALLBACK_ESTABLISHED: {
		wsconn_init(&v->ws, wsi, 1);
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
		if (!s->pty.alive) {
			char j[48];
			int n = snprintf(j, sizeof j, "{\"exit_code\":%d}", s->pty.exit_code);
			vq_push(v, TD_TTY_EXIT, j, (size_t)n);
			v->closing = 1;
		}
		break;
	}
	case LWS_CALLBACK_RECEIVE: {
		buf_t m;
		size_t total;
		switch (wsconn_receive(&v->ws, in, len, TTY_FRAME_MAX, &m, &total)) {
		case WSRX_PARTIAL:
			break;
		case WSRX_TOO_LARGE: {
			/* as /events answers too_large: said, and otherwise ignored */
			char msg[96];
			int n = snprintf(msg, sizeof msg, "frame of %zu bytes is over the limit of %u bytes",
					 total, TTY_FRAME_MAX);
			vq_push(v, TD_TTY_ERROR, msg, (size_t)n);
			break;
		}
		case WSRX_MESSAGE:
			on_message(v, (const unsigned char *)(m.p ? m.p : ""), m.len);
			buf_free(&m);
			break;
		}
		break;
	}
	case LWS_CALLBACK_SERVER_WRITEABLE:
		if (v->resync && v->s) {
			v->resync = 0;
			send_snapshot(v);   /* queues and asks for writable again */
		}
		return wsconn_writable(&v->ws, v->closing);
	case LWS_CALLBACK_CLOSED:
		if (v->attached) {
			if (!srv.stopping)
				viewer_event("viewer.detach", v);
			viewer_unlink(v);
		}
		wsconn_free(&v->ws);
		break;
	default:
		break;
	}
	return 0;
}

const struct lws_protocols tty_protocol = {
	TD_SUBPROTO_TTY, tty_callback, sizeof(struct viewer), 65536, 0, NULL, 0
};

void tty_register(void)
{
	static const struct session_listener l = {
		.output = tty_on_output,
		.title = tty_on_title,
		.resize = tty_on_resize,
		.exit = tty_on_exit,
		.gone = tty_session_gone,
	};
	session_listen(&l);
}
