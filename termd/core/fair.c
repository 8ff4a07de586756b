/* fair.c — fairness between sessions. A session whose program writes as
 * fast as termd reads (bulk: its last read used the whole budget) is held
 * — its pty left unread, so the kernel blocks the writer and both cores
 * are free — while another session is interactive: an action waits on it
 * (for at most FAIR_WINDOW_US after the action began), or it was typed
 * into and has not printed anything since, and for FAIR_GRACE_US after
 * that (the client's next request usually follows at once). A held
 * session gets one read (up to 4 KiB, n_tty's buffer) every
 * FAIR_HOLD_MAX_US, so it always makes progress (about 80 KiB/s while
 * held; a whole 16 KiB turn there put a millisecond into 1% of the other
 * session's round trips). Holding loses nothing: the bytes wait in the
 * kernel, and a screen, snapshot or answer taken meanwhile is exact for
 * everything termd has read. Sessions nobody interacts with, and a single
 * session on its own, are never held. */
#include "core.h"

#define FAIR_WINDOW_US   50000
#define FAIR_GRACE_US     5000
#define FAIR_HOLD_MAX_US 50000

static lws_sorted_usec_list_t fair_sul;
static int stopped;                 /* termd is going: decide nothing more */
static uint64_t grace_until;        /* the last interactive episode's grace */
static const struct session *grace_of; /* ... whose (compared, never used) */
static int last_interactive;        /* interactive sessions at the last scan */

static int interactive(const struct session *s, uint64_t now)
{
	if (s->fair.typed && now < s->fair.typed_us + FAIR_WINDOW_US)
		return 1;
	if (s->fair.newest_pending && now < s->fair.newest_pending + FAIR_WINDOW_US)
		return 1;
	return grace_of == s && now < grace_until;
}

/* the action layer's pending registry, asked through a hook it registers */
static uint64_t (*newest_pending)(const struct session *s);

void fair_set_probe(uint64_t (*probe)(const struct session *s))
{
	newest_pending = probe;
}

static void fair_timer(lws_sorted_usec_list_t *sul)
{
	(void)sul;
	fair_update();
}

static void each_session(void (*fn)(struct session *s, void *arg), void *arg)
{
	struct session *lists[2] = {srv.sessions, srv.closing};
	for (int l = 0; l < 2; l++)
		for (struct session *s = lists[l]; s; s = s->next)
			fn(s, arg);
}

struct scan {
	uint64_t now, next;          /* when something changes next (0: never) */
	int ninteractive;
	const struct session *only;  /* the interactive one, if just one */
};

static void later(struct scan *sc, uint64_t at)
{
	if (at > sc->now && (!sc->next || at < sc->next))
		sc->next = at;
}

static void scan_one(struct session *s, void *arg)
{
	struct scan *sc = arg;
	s->fair.newest_pending = newest_pending ? newest_pending(s) : 0;
	if (interactive(s, sc->now)) {
		sc->ninteractive++;
		sc->only = s;
		if (s->fair.typed)
			later(sc, s->fair.typed_us + FAIR_WINDOW_US);
		if (s->fair.newest_pending)
			later(sc, s->fair.newest_pending + FAIR_WINDOW_US);
		if (grace_of == s)
			later(sc, grace_until);
	}
}

static void decide_one(struct session *s, void *arg)
{
	struct scan *sc = arg;
	struct pty *p = &s->pty;
	if (p->fd < 0)
		return;
	if (s->fair.out_held) {   /* its consumer is behind: no read at all */
		if (!p->held)
			pty_hold(p, 1, 0);
		return;
	}
	int others = sc->ninteractive - (interactive(s, sc->now) ? 1 : 0);
	int hold = s->fair.bulk && others > 0;
	if (hold && p->held && sc->now >= s->fair.held_since + FAIR_HOLD_MAX_US) {
		/* held long enough: one read, then held again */
		pty_hold(p, 0, 1);
		return;
	}
	if (hold && !p->held) {
		s->fair.held_since = sc->now;
		pty_hold(p, 1, 0);
		log_debug("session %s: held while another session is at work", s->name);
	} else if (!hold && p->held) {
		pty_hold(p, 0, 0);
		log_debug("session %s: read again", s->name);
	}
	if (p->held)
		later(sc, s->fair.held_since + FAIR_HOLD_MAX_US);
}

void fair_update(void)
{
	if (stopped)
		return;
	struct scan sc = {.now = mono_us()};
	each_session(scan_one, &sc);
	each_session(decide_one, &sc);
	last_interactive = sc.ninteractive;
	if (sc.next)
		server_timer(&fair_sul, fair_timer, sc.next - sc.now);
	else
		lws_sul_cancel(&fair_sul);
}

void fair_read(struct session *s, int full)
{
	int changed = full != s->fair.bulk;
	s->fair.bulk = full;
	if (s->fair.typed) {
		/* it answered what was typed: its grace begins */
		s->fair.typed = 0;
		grace_of = s;
		grace_until = mono_us() + FAIR_GRACE_US;
		changed = 1;
	}
	/* With nobody interactive, a session that stays bulk changes nothing
	 * (what the others do calls fair_update, and so does the timer): a
	 * lone flood's reads do not each scan every session. Else the read
	 * may end a one-read release: it is held again. */
	if (changed || s->pty.held || (full && last_interactive))
		fair_update();
}

void fair_typed(struct session *s)
{
	s->fair.typed = 1;
	s->fair.typed_us = mono_us();
	fair_update();
}

void fair_pending_changed(struct session *s, int ended)
{
	if (ended && s) {
		grace_of = s;
		grace_until = mono_us() + FAIR_GRACE_US;
	}
	fair_update();
}

void fair_out_hold(struct session *s, int hold)
{
	hold = !!hold;
	if (s->fair.out_held == hold)
		return;
	s->fair.out_held = hold;
	log_debug("session %s: %s", s->name,
		  hold ? "held: its stream's client is behind" : "its stream's client caught up");
	fair_update();
}

void fair_shutdown(void)
{
	lws_sul_cancel(&fair_sul);
	stopped = 1;
}
