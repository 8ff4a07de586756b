/* tty.c — the live terminal channel `/tty/<session>` (subprotocol
 * termd.tty.v1): viewers attach read-only or read-write, get a size frame
 * and a snapshot of the screen, then the pty's bytes in order. The pty's
 * bytes are kept once per session, in a feed all its viewers read from at
 * their own pace (each write up to one 64 KiB chunk, straight from the
 * feed); one that falls more than a bound behind has its backlog dropped
 * and gets a fresh snapshot, so it never slows the pty or anyone else, and
 * the feed never holds more than about that bound, however many viewers.
 * Past --viewer-rate (a flood times the number of viewers) they all get
 * the screen 20 times a second instead of every byte, until it calms.
 * Input and resizes from rw viewers; attach/detach/input/resize events.
 * The connection plumbing is wsconn.c's, the upgrade checks http.c's; the
 * channel's lws_protocols entry is exported, struct viewer is private. */
#include "net.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VIEWER_QUEUE_MAX (2u * 1024u * 1024u)
/* the feed's chunk: also the largest 'O' frame, one write each (lws sends
 * up to the protocol's rx_buffer_size, 64 KiB, per write without copying) */
#define FEED_CHUNK 65536u
/* largest client frame (input, resize): anything sane is far below */
#define TTY_FRAME_MAX (1024u * 1024u)
/* The fan-out budget (--viewer-rate, per frame period): what a session's
 * viewers are sent together. Output past it (a flood, times the number of
 * viewers) is more than any of them can show: they get the screen every
 * frame period instead of every byte, as tmux's clients get a redraw when
 * they fall behind. Copying into sockets runs at ~4 GB/s here, so the
 * default (384 MiB/s) costs termd a tenth of a core at most, and up to 8
 * viewers of a full-speed flood still get every byte (termd reads a pty
 * at ~40-50 MB/s). Half the budget in a period ends the flood. */
#define FRAME_US 50000u
#define FANOUT_BUDGET ((uint64_t)opts.viewer_rate / (1000000u / FRAME_US))

/* A piece of a session's output. A frame is written straight from it:
 * before its bytes there is room for the type byte and lws's header; a
 * frame starting mid-chunk borrows the bytes before it and gives them back
 * (feed_write). */
struct chunk {
	struct chunk *next;
	uint64_t start;           /* stream offset of its first byte */
	size_t len;
	unsigned char mem[];      /* LWS_PRE + 1 bytes of headroom, then FEED_CHUNK */
};
#define CHUNK_DATA(c) ((c)->mem + LWS_PRE + 1)

/* One session's output since its first viewer attached, from the oldest
 * byte a viewer still needs; shared by the session's viewers (and kept by
 * them, not the session, so they can finish sending after it is gone). */
struct feed {
	struct chunk *head, *tail;
	uint64_t end;             /* stream offset after the newest byte */
	int refs;                 /* viewers holding it */
	uint64_t fanout;          /* bytes times viewers in this frame period */
	int flooding;             /* over the budget: frames, not bytes */
};

static lws_sorted_usec_list_t frame_sul;   /* ticks while a feed floods */
static int frame_armed, tty_stopped;

/* One /tty connection; lws allocates it (tty_protocol's per-session size). */
struct viewer {
	struct wsconn ws;         /* other frames (tagged with the feed's end when
				   * queued: output before them goes first), reassembly */
	struct feed *feed;        /* its session's output, while attached or sending */
	uint64_t pos;             /* the next feed byte it gets */
	struct viewer *next;      /* in the session's list */
	struct session *s;
	char name[TD_SESSION_NAME_MAX + 1];
	int rw;
	int cols, rows;           /* the size in its last 'Z' */
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
	/* after the output queued so far, before any that comes later */
	wsconn_tag_last(&v->ws, v->feed ? v->feed->end : 0);
}

/* ---- the feed ---- */

/* 1 if it started a chunk (then older ones may be freed: feed_trim) */
static int feed_append(struct feed *f, const char *data, size_t n)
{
	int started = 0;
	while (n) {
		struct chunk *c = f->tail;
		if (!c || c->len == FEED_CHUNK) {
			c = xmalloc(sizeof *c + LWS_PRE + 1 + FEED_CHUNK);
			c->next = NULL;
			c->start = f->end;
			c->len = 0;
			if (f->tail)
				f->tail->next = c;
			else
				f->head = c;
			f->tail = c;
			started = 1;
		}
		size_t k = FEED_CHUNK - c->len < n ? FEED_CHUNK - c->len : n;
		memcpy(CHUNK_DATA(c) + c->len, data, k);
		c->len += k;
		f->end += k;
		data += k;
		n -= k;
	}
	return started;
}

/* Free the chunks every viewer of s has sent (one waiting for a snapshot
 * needs none: it starts again at the end); the newest stays, to fill.
 * Called when a chunk is started and when a viewer leaves: the feed holds
 * at most one chunk more than its slowest viewer needs. */
static void feed_trim(struct session *s)
{
	struct feed *f = s->viewers ? s->viewers->feed : NULL;
	if (!f)
		return;
	uint64_t low = f->end;
	for (struct viewer *v = s->viewers; v; v = v->next)
		if (!v->resync && v->pos < low)
			low = v->pos;
	while (f->head != f->tail && f->head->start + f->head->len <= low) {
		struct chunk *c = f->head;
		f->head = c->next;
		free(c);
	}
}

static void feed_release(struct viewer *v)
{
	struct feed *f = v->feed;
	v->feed = NULL;
	if (!f || --f->refs > 0)
		return;
	while (f->head) {
		struct chunk *c = f->head;
		f->head = c->next;
		free(c);
	}
	free(f);
}

/* Write one 'O' frame of v's feed bytes from v->pos, up to lim and the end
 * of their chunk, in place: the type byte and lws's header go over the
 * bytes before them (the chunk's headroom, or earlier output other viewers
 * may still need), which are put back once lws_write has returned. */
static int feed_write(struct viewer *v, uint64_t lim)
{
	struct chunk *c = v->feed->head;
	while (c && v->pos >= c->start + c->len)
		c = c->next;
	if (!c || v->pos < c->start)
		return -1;   /* cannot happen: feed_trim keeps what v needs */
	size_t off = (size_t)(v->pos - c->start);
	size_t n = c->len - off;
	if (lim - v->pos < n)
		n = (size_t)(lim - v->pos);
	if (n > wsconn_frag(&v->ws) - 1)
		n = wsconn_frag(&v->ws) - 1;   /* taken whole by the socket (wsconn.h) */
	unsigned char *p = CHUNK_DATA(c) + off - 1;   /* the type byte */
	unsigned char saved[LWS_PRE + 1];
	memcpy(saved, p - LWS_PRE, sizeof saved);
	p[0] = TD_TTY_OUTPUT;
	int r = wsconn_write_now(&v->ws, p, n + 1);
	memcpy(p - LWS_PRE, saved, sizeof saved);
	v->pos += n;
	return r;
}

/* On a writable callback: feed bytes due before the oldest queued frame,
 * else that frame; asks for the next callback while anything is left. */
static int viewer_writable(struct viewer *v)
{
	struct feed *f = v->feed;
	if (lws_send_pipe_choked(v->ws.wsi)) {
		lws_callback_on_writable(v->ws.wsi);   /* a write now might not go whole */
		return 0;
	}
	if (f && !v->resync && !wsconn_mid_message(&v->ws)) {
		uint64_t lim = f->end, tag;
		if (wsconn_head_tag(&v->ws, &tag) && tag < lim)
			lim = tag;
		if (v->pos < lim) {
			if (feed_write(v, lim) < 0)
				return -1;
			uint64_t t;
			if (v->pos < f->end || wsconn_head_tag(&v->ws, &t) || v->closing)
				lws_callback_on_writable(v->ws.wsi);
			return 0;
		}
	}
	if (wsconn_writable(&v->ws, v->closing) < 0)
		return -1;
	if (f && !v->resync && v->pos < f->end)
		lws_callback_on_writable(v->ws.wsi);   /* output queued after that frame */
	return 0;
}

static void send_size(struct viewer *v)
{
	char j[64];
	int n = snprintf(j, sizeof j, "{\"cols\":%d,\"rows\":%d}", v->s->cols, v->s->rows);
	v->cols = v->s->cols;
	v->rows = v->s->rows;
	vq_push(v, TD_TTY_SIZE, j, (size_t)n);
}

/* The screen as it is after every byte of the feed so far: the viewer's
 * output starts again at the feed's end. */
static void push_snapshot(struct viewer *v, const buf_t *b)
{
	if (v->feed)
		v->pos = v->feed->end;
	vq_push(v, TD_TTY_SNAPSHOT, b->p ? b->p : "", b->len);
	const char *t = screen_title(session_screen(v->s));
	if (*t)
		vq_push(v, TD_TTY_TITLE, t, strlen(t));
}

static void send_snapshot(struct viewer *v)
{
	buf_t b = {0};
	screen_snapshot(session_screen(v->s), &b);
	push_snapshot(v, &b);
	buf_free(&b);
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

static void frame_tick(lws_sorted_usec_list_t *sul);

static void frame_arm(void)
{
	if (frame_armed || tty_stopped)
		return;
	frame_armed = 1;
	server_timer(&frame_sul, frame_tick, FRAME_US);
}

/* Past the budget: what the viewers have not been sent yet is dropped, and
 * nothing more goes into the feed until the flood is over; the next frame
 * tick sends each the screen. */
static void flood_start(struct session *s, struct feed *f)
{
	f->flooding = 1;
	for (struct viewer *v = s->viewers; v; v = v->next)
		if (!v->resync)
			v->pos = f->end;   /* whole frames only: lws keeps a partly sent one */
	feed_trim(s);
	frame_arm();
}

/* A frame period for one flooding session: each viewer that has sent what
 * it was given gets the screen (rendered once for all of them); a busier
 * one gets it when it is writable. Below half the budget, the flood is over
 * and output flows again from this snapshot on. */
static void frame_session(struct session *s, int *more)
{
	struct feed *f = s->viewers ? s->viewers->feed : NULL;
	if (!f)
		return;
	if (!f->flooding) {
		f->fanout = 0;   /* a new period */
		return;
	}
	if (f->fanout <= FANOUT_BUDGET / 2)
		f->flooding = 0;
	f->fanout = 0;
	buf_t b = {0};
	for (struct viewer *v = s->viewers; v; v = v->next) {
		if (v->resync)
			continue;   /* it gets one when writable */
		if (v->ws.pending || v->pos < f->end) {
			v->resync = 1;
			continue;
		}
		if (!b.p)
			screen_snapshot(session_screen(s), &b);
		push_snapshot(v, &b);   /* queued: it asks for writable */
	}
	buf_free(&b);
	if (f->flooding)
		*more = 1;
}

static void frame_tick(lws_sorted_usec_list_t *sul)
{
	(void)sul;
	frame_armed = 0;
	int more = 0;
	struct session *lists[2] = {srv.sessions, srv.closing};
	for (int l = 0; l < 2; l++)
		for (struct session *s = lists[l]; s; s = s->next)
			frame_session(s, &more);
	if (more)
		frame_arm();
}

static void tty_on_output(struct session *s, const char *data, size_t n)
{
	struct feed *f = s->viewers ? s->viewers->feed : NULL;
	if (!f || !n)
		return;
	f->fanout += (uint64_t)n * (uint64_t)s->nviewers;
	if (!f->flooding && f->fanout > FANOUT_BUDGET)
		flood_start(s, f);
	if (f->flooding)
		return;   /* the next frame tick sends the screen */
	frame_arm();   /* the period the budget is counted over */
	int started = feed_append(f, data, n);
	for (struct viewer *v = s->viewers; v; v = v->next) {
		if (v->resync)
			continue;   /* a snapshot will replace what it missed */
		/* its backlog: feed bytes and other frames not yet sent */
		uint64_t behind = f->end - v->pos + v->ws.pending;
		if (behind == n) {
			lws_callback_on_writable(v->ws.wsi);   /* it was idle */
		} else if (behind > VIEWER_QUEUE_MAX) {
			/* (one piece is always taken, however large, when
			 * nothing was waiting) */
			wsconn_drop_queue(&v->ws);
			v->resync = 1;
			lws_callback_on_writable(v->ws.wsi);
		}
		/* else it waits for writable callbacks already */
	}
	if (started)
		feed_trim(s);
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
	struct feed *f = s->viewers ? s->viewers->feed : NULL;
	int flooded = f && f->flooding;
	if (f)
		f->flooding = 0;
	for (struct viewer *v = s->viewers; v; v = v->next) {
		if (v->resync || flooded) {
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
		v->feed = s->viewers ? s->viewers->feed : xcalloc(1, sizeof *v->feed);
		v->feed->refs++;
		v->pos = v->feed->end;
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
			if (v->cols != v->s->cols || v->rows != v->s->rows)
				send_size(v);   /* its 'Z' was in the dropped queue */
			send_snapshot(v);   /* queues and asks for writable again */
		}
		return viewer_writable(v);
	case LWS_CALLBACK_CLOSED:
		if (v->attached) {
			if (!srv.stopping)
				viewer_event("viewer.detach", v);
			struct session *s = v->s;
			viewer_unlink(v);
			if (s)
				feed_trim(s);   /* what only v still needed */
		}
		feed_release(v);
		wsconn_free(&v->ws);
		break;
	default:
		break;
	}
	return 0;
}

void tty_viewer_prepare(void *user, const char *session, int rw)
{
	struct viewer *v = user;
	memset(v, 0, sizeof *v);
	snprintf(v->name, sizeof v->name, "%s", session);
	v->rw = rw;
}

const struct lws_protocols tty_protocol = {
	TD_SUBPROTO_TTY, tty_callback, sizeof(struct viewer), 65536, 0, NULL, 0
};

/* every viewer's connection, for an upgrade in place (handover.c) */
void tty_each_viewer(void (*fn)(struct wsconn *ws))
{
	for (struct session *s = srv.sessions; s; s = s->next)
		for (struct viewer *v = s->viewers; v; v = v->next)
			fn(&v->ws);
}

void tty_shutdown(void)
{
	lws_sul_cancel(&frame_sul);
	frame_armed = 0;
	tty_stopped = 1;
}

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
