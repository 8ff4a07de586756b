/* metrics.c — `GET /metrics`: termd in Prometheus' text exposition format
 * 0.0.4, behind the full or the view token (a request with neither is 401,
 * as /events is; with no token at all, local requests only, as every
 * route). What it says: termd_info, uptime, sessions, /events connections,
 * /tty viewers, the event ring, WebSocket bytes in and out, the loop's
 * longest turn since the last scrape (server.c) and its turns, actions by
 * action and outcome with their duration histograms (actstats.c), each
 * session's cgroup (memory, peak, limit, pids, cpu seconds, OOM kills,
 * forks refused) where there are cgroups, and what the layers above add
 * (metrics_extend: the dial-out links' states), and with glibc the bytes
 * malloc has handed out (mallinfo2: what a soak tells apart from RSS the
 * allocator holds). Metric names start with termd_. */
#include "net.h"

#include <stdio.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#define METRICS_TYPE "text/plain; version=0.0.4; charset=utf-8"
/* what the layers above add (the front, the links, OpenHands V1): as
 * many as register (a fixed four were full at three, and a fifth would
 * have been dropped without a word) */
static metrics_fn **more;
static size_t nmore, capmore;

void metrics_extend(metrics_fn *fn)
{
	if (nmore == capmore) {
		capmore = capmore ? capmore * 2 : 4;
		more = xrealloc(more, capmore * sizeof *more);
	}
	more[nmore++] = fn;
}

void metrics_label(buf_t *b, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			buf_putc(b, '\\');
		if (*v == '\n')
			buf_puts(b, "\\n");
		else
			buf_putc(b, *v);
	}
}

void metrics_head(buf_t *b, const char *name, const char *type, const char *help)
{
	buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(buf_t *b, const char *name, const char *help, double v)
{
	metrics_head(b, name, "gauge", help);
	buf_printf(b, "%s %.15g\n", name, v);
}

static void counter(buf_t *b, const char *name, const char *help, double v)
{
	metrics_head(b, name, "counter", help);
	buf_printf(b, "%s %.15g\n", name, v);
}

/* one per-session family: each session's value, those that have one */
enum { S_MEM, S_PEAK, S_LIMIT, S_PIDS, S_CPU, S_OOM, S_REFUSED, S_N };
static const struct {
	const char *name, *type, *help;
} sfam[S_N] = {
	{"termd_session_memory_bytes", "gauge", "Memory the session's cgroup uses now."},
	{"termd_session_memory_peak_bytes", "gauge", "The most memory the session's cgroup has used."},
	{"termd_session_memory_limit_bytes", "gauge", "The session's memory limit."},
	{"termd_session_pids", "gauge", "Processes and threads in the session's cgroup."},
	{"termd_session_cpu_seconds_total", "counter", "CPU time the session's cgroup has used."},
	{"termd_session_oom_kills_total", "counter", "Processes of the session killed for memory."},
	{"termd_session_forks_refused_total", "counter", "Forks refused at the session's pids limit."},
};

static void sessions(buf_t *b)
{
	int n = 0, viewers = 0;
	for (struct session *s = srv.sessions; s; s = s->next) {
		n++;
		viewers += s->nviewers;
	}
	gauge(b, "termd_sessions", "Sessions open, main included.", n);
	gauge(b, "termd_viewers", "/tty viewers attached to sessions.", viewers);
	metrics_head(b, "termd_session_alive", "gauge", "1 while the session's process runs.");
	for (struct session *s = srv.sessions; s; s = s->next)
		buf_printf(b, "termd_session_alive{session=\"%s\"} %d\n", s->name, s->pty.alive);
	if (!cgroup_version())
		return;
	for (int f = 0; f < S_N; f++) {
		metrics_head(b, sfam[f].name, sfam[f].type, sfam[f].help);
		for (struct session *s = srv.sessions; s; s = s->next) {
			struct cg_usage u;
			if (!s->cg || cgroup_usage(s->cg, &u) < 0)
				continue;
			const struct cg_limits *l = cgroup_limits(s->cg);
			double v = f == S_MEM ? (double)u.memory : f == S_PEAK ? (double)u.memory_peak
				   : f == S_LIMIT ? (l->memory ? (double)l->memory : -1)
				   : f == S_PIDS ? (double)u.pids : f == S_CPU ? u.cpu_s
				   : f == S_OOM ? (double)u.oom_kills : (double)u.pids_refused;
			if (v >= 0)   /* session names are [A-Za-z0-9_.-]: no escaping */
				buf_printf(b, "%s{session=\"%s\"} %.15g\n", sfam[f].name, s->name, v);
		}
	}
}

static void metrics_write(buf_t *b)
{
	const char *cg = cgroup_version();
	metrics_head(b, "termd_info", "gauge", "termd's version, and the cgroups sessions get.");
	buf_printf(b, "termd_info{version=\"%s\",protocol=\"%d\",cgroups=\"%s\"} 1\n", TERMD_VERSION,
		   PROTOCOL_VERSION, cg ? cg : "none");
	gauge(b, "termd_uptime_seconds", "Seconds since termd started.",
	      (double)(mono_us() - srv.start_mono) / 1e6);
	sessions(b);
	int conns = 0;
	for (struct conn *c = srv.conns; c; c = c->next)
		conns++;
	gauge(b, "termd_connections", "/events connections (dialed links included).", conns);
	size_t bytes;
	uint64_t seq;
	size_t kept = events_retained(&bytes, &seq);
	gauge(b, "termd_events_retained", "Events kept for subscribe (--retain).", (double)kept);
	gauge(b, "termd_events_retained_bytes", "Bytes of the events kept for subscribe.",
	      (double)bytes);
	counter(b, "termd_events_total", "Events sent (the newest seq).", (double)seq);
	counter(b, "termd_received_bytes_total", "WebSocket message bytes received (/events, /tty).",
		(double)wsconn_bytes_in);
	counter(b, "termd_sent_bytes_total", "WebSocket message bytes sent (/events, /tty).",
		(double)wsconn_bytes_out);
	uint64_t turn_ns, nturns;
	server_turns_take(&turn_ns, &nturns);
	gauge(b, "termd_loop_turn_max_seconds",
	      "The loop's longest turn (its thread's CPU time) since the last scrape.",
	      (double)turn_ns / 1e9);
	counter(b, "termd_loop_turns_total", "Turns of the loop (passes of its poll).",
		(double)nturns);
#ifdef __GLIBC__
	/* 0 when malloc is not glibc's (a sanitizer's, a preloaded one):
	 * left out then, as without glibc */
	struct mallinfo2 mi = mallinfo2();
	if (mi.uordblks + mi.hblkhd)
		gauge(b, "termd_heap_in_use_bytes",
		      "Bytes malloc has handed out and not had back (glibc's mallinfo2: uordblks + hblkhd).",
		      (double)(mi.uordblks + mi.hblkhd));
#endif
	actstats_write(b);
	for (size_t i = 0; i < nmore; i++)
		more[i](b);
}

static int metrics_admit(struct http_txn *t)
{
	if (t->auth != AUTH_NONE)
		return 0;
	http_answer_text(t, 401, http_unauthorized_why(t->wsi, "unauthorized\n"));
	return 1;
}

static void metrics_get(struct http_txn *t)
{
	buf_t b = {0};
	metrics_write(&b);
	http_answer(t, 200, METRICS_TYPE, b.p, b.len);
	buf_free(&b);
}

void metrics_register(void)
{
	static const struct http_route r[] = {
		{"GET", "/metrics", metrics_admit, metrics_get, 0, TD_API_TERMD},
	};
	http_routes_register(r, sizeof r / sizeof r[0]);
}

void metrics_shutdown(void)
{
	free(more);
	more = NULL;
	nmore = capmore = 0;
	actstats_shutdown();
}
