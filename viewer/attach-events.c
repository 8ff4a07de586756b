/* attach-events.c — od-attach's events channel: the /events connection
 * (subscribe with a short replay from hello's seq, reconnect), and the
 * session table the status line and the picker show (from session.list,
 * command.start/end, viewer.attach/detach, session.open/resize/exit/close). */
#include "attach.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct at_events evs;

/* ---- the session table ---- */

void copy_name(char *dst, const char *src)
{
	size_t n = strnlen(src, TD_SESSION_NAME_MAX);
	memmove(dst, src, n);
	dst[n] = '\0';
}

sinfo_t *sess_get(const char *name, int create)
{
	if (!name || !td_valid_session_name(name))
		return NULL;
	for (int i = 0; i < evs.nsess; i++)
		if (!strcmp(evs.sess[i].name, name))
			return &evs.sess[i];
	if (!create || evs.nsess >= MAX_SESSIONS)
		return NULL;
	sinfo_t *s = &evs.sess[evs.nsess++];
	memset(s, 0, sizeof *s);
	copy_name(s->name, name);
	s->alive = 1;
	s->viewers = -1;
	s->last_exit = INT_MIN;
	return s;
}

static void sess_remove(const char *name)
{
	for (int i = 0; i < evs.nsess; i++) {
		if (!strcmp(evs.sess[i].name, name)) {
			free(evs.sess[i].cmd);
			memmove(&evs.sess[i], &evs.sess[i + 1],
				(size_t)(evs.nsess - i - 1) * sizeof evs.sess[0]);
			evs.nsess--;
			return;
		}
	}
}

static void sess_set_cmd(sinfo_t *s, const char *cmd, double ts, int approx)
{
	free(s->cmd);
	s->cmd = cmd ? xstrdup(cmd) : NULL;
	s->cmd_ts = ts;
	s->cmd_ts_approx = approx;
}

void sess_free_all(void)
{
	for (int i = 0; i < evs.nsess; i++)
		free(evs.sess[i].cmd);
	evs.nsess = 0;
}

/* ---- the connection ---- */

static void ev_lost(void)
{
	td_close(evs.c);
	evs.c = NULL;
	evs.retry_at = now_ms() + EV_RETRY_MS;
}

/* Sends an action; its id (made by the client library) to idout. */
static void ev_send(const char *action, cJSON *args, char *idout, size_t idlen)
{
	cJSON *a = td_action_new(action, NULL);
	if (args)
		cJSON_ReplaceItemInObjectCaseSensitive(a, "args", args);
	char err[256];
	if (td_send_action(evs.c, a, idout, idlen, err, sizeof err) < 0)
		ev_lost();
	cJSON_Delete(a);
}

void request_list(enum list_purpose p)
{
	if (!evs.c) {
		keys_list_ready(p);
		return;
	}
	evs.list_purpose = p;
	ev_send("session.list", NULL, evs.list_id, sizeof evs.list_id);
	if (!evs.c)
		keys_list_ready(p);
}

void ev_connect(void)
{
	char err[256];
	evs.c = td_connect(opt.url, TD_PATH_EVENTS, TD_SUBPROTO_EVENTS, opt.token, err, sizeof err);
	if (!evs.c) {
		evs.retry_at = now_ms() + EV_RETRY_MS;
		return;
	}
	td_set_id_prefix(evs.c, "od-attach");
	/* hello first: its seq tells where to start the short replay */
	cJSON *hello = NULL;
	if (td_recv_json(evs.c, &hello, 5000, err, sizeof err) <= 0) {
		ev_lost();
		return;
	}
	const cJSON *hx = cJSON_GetObjectItemCaseSensitive(hello, "extras");
	const cJSON *hs = cJSON_GetObjectItemCaseSensitive(hx, "seq");
	double seq = cJSON_IsNumber(hs) ? hs->valuedouble : 0;
	cJSON_Delete(hello);
	/* a short look back for the running command and the last exit code;
	 * after a reconnect, what we missed (if not too much: session.list
	 * catches up with the rest) */
	double since = seq - REPLAY_EVENTS;
	if (evs.last_seq > since && evs.last_seq <= seq)
		since = evs.last_seq;
	if (since < 0)
		since = 0;
	cJSON *args = cJSON_CreateObject();
	cJSON_AddNumberToObject(args, "since", since);
	ev_send("subscribe", args, NULL, 0);
	request_list(evs.list_purpose);
	view.dirty = 1;
}

/* ---- what comes in ---- */

static void ev_list_answer(const cJSON *x)
{
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(x, "sessions");
	if (!cJSON_IsArray(list))
		return;
	for (int i = 0; i < evs.nsess; i++)
		evs.sess[i].listed = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, list) {
		sinfo_t *s = sess_get(td_json_str(e, "name"), 1);
		if (!s)
			continue;
		s->listed = 1;
		s->alive = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "alive"));
		s->cols = td_json_int(e, "cols", s->cols);
		s->rows = td_json_int(e, "rows", s->rows);
		s->viewers = td_json_int(e, "viewers", -1);
		const char *cmd = td_json_str(e, "command");
		if (!cmd)
			sess_set_cmd(s, NULL, 0, 0);
		else if (!s->cmd)
			sess_set_cmd(s, cmd, wall_s(), 1);
		else if (strcmp(s->cmd, cmd))
			sess_set_cmd(s, cmd, s->cmd_ts, s->cmd_ts_approx);
	}
	/* keep the table in the server's order, unlisted ones gone */
	int k = 0;
	for (int i = 0; i < evs.nsess; i++) {
		if (evs.sess[i].listed)
			evs.sess[k++] = evs.sess[i];
		else
			free(evs.sess[i].cmd);
	}
	evs.nsess = k;
	/* the list's order is the server's; re-sort to it */
	int pos = 0;
	cJSON_ArrayForEach(e, list) {
		const char *n = td_json_str(e, "name");
		for (int i = pos; n && i < evs.nsess; i++) {
			if (!strcmp(evs.sess[i].name, n)) {
				sinfo_t t = evs.sess[i];
				memmove(&evs.sess[pos + 1], &evs.sess[pos], (size_t)(i - pos) * sizeof t);
				evs.sess[pos++] = t;
				break;
			}
		}
	}
	enum list_purpose p = evs.list_purpose;
	evs.list_purpose = LP_NONE;
	evs.list_id[0] = '\0';
	keys_list_ready(p);
}

static void ev_handle(const cJSON *o)
{
	const cJSON *seq = cJSON_GetObjectItemCaseSensitive(o, "seq");
	if (cJSON_IsNumber(seq) && seq->valuedouble > evs.last_seq)
		evs.last_seq = seq->valuedouble;
	const char *kind = td_json_str(o, "observation");
	const char *cause = td_json_str(o, "cause");
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "extras");
	const cJSON *tsj = cJSON_GetObjectItemCaseSensitive(o, "ts");
	double ts = cJSON_IsNumber(tsj) ? tsj->valuedouble : wall_s();
	if (!kind)
		return;
	if (cause && evs.list_id[0] && !strcmp(cause, evs.list_id)) {
		if (!strcmp(kind, "session.list"))
			ev_list_answer(x);
		else {
			evs.list_id[0] = '\0';
			evs.list_purpose = LP_NONE;
		}
		view.dirty = 1;
		return;
	}
	sinfo_t *s;
	if (!strcmp(kind, "command.start")) {
		if ((s = sess_get(td_json_str(x, "session"), 1))) {
			const char *cmd = td_json_str(x, "command");
			sess_set_cmd(s, cmd ? cmd : "?", ts, 0);
		}
	} else if (!strcmp(kind, "command.end")) {
		if ((s = sess_get(td_json_str(x, "session"), 1))) {
			sess_set_cmd(s, NULL, 0, 0);
			s->last_exit = td_json_int(x, "exit_code", INT_MIN);
		}
	} else if (!strcmp(kind, "viewer.attach") || !strcmp(kind, "viewer.detach")) {
		if ((s = sess_get(td_json_str(x, "session"), 0)) && s->viewers >= 0) {
			s->viewers += !strcmp(kind, "viewer.attach") ? 1 : -1;
			if (s->viewers < 0)
				s->viewers = 0;
		}
	} else if (!strcmp(kind, "session.resize")) {
		if ((s = sess_get(td_json_str(x, "session"), 1))) {
			s->cols = td_json_int(x, "cols", s->cols);
			s->rows = td_json_int(x, "rows", s->rows);
		}
	} else if (!strcmp(kind, "session.open")) {
		const char *n = td_json_str(x, "name");
		if (!n)
			n = td_json_str(x, "session");
		if ((s = sess_get(n, 1))) {
			s->alive = 1;
			if (s->viewers < 0)
				s->viewers = 0;
		}
	} else if (!strcmp(kind, "session.exit")) {
		if ((s = sess_get(td_json_str(x, "name"), 0))) {
			s->alive = 0;
			sess_set_cmd(s, NULL, 0, 0);
		}
	} else if (!strcmp(kind, "session.close")) {
		const char *n = td_json_str(x, "name");
		if (n && strcmp(n, tty.session))
			sess_remove(n);
	} else {
		return;
	}
	view.dirty = 1;
}

void ev_drain(void)
{
	while (evs.c) {
		char *data;
		size_t len;
		int bin;
		int r = td_recv(evs.c, &data, &len, &bin, 0);
		if (r < 0) {
			ev_lost();
			evs.list_id[0] = '\0';
			view.dirty = 1;
			return;
		}
		if (r == 0)
			return;
		if (!bin) {
			cJSON *o = cJSON_ParseWithLength(data, len);
			if (o)
				ev_handle(o);
			cJSON_Delete(o);
		}
		free(data);
	}
}
