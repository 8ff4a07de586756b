/* keep.c — plugin programs across an upgrade in place (handover.c):
 * each running program's pid and stdin/stdout pipes (close-on-exec off),
 * the bytes not yet written to it or not yet read as a whole line, and the
 * request counter go in the hand-over record; the new termd watches the
 * same pipes again, so a Jupyter kernel keeps its variables. Requests in
 * flight cannot be carried (their clients' connections close): each is
 * answered with an error saying so before the exec. */
#include "plugin.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int running(const struct plugin *pl)
{
	return pl->pid > 0 && pl->in_fd >= 0 && pl->in_wsi && pl->out_wsi;
}

const char *plugin_handover_busy(void)
{
	for (struct plugin *pl = plugins; pl; pl = pl->next)
		if (pl->setup_pid > 0)
			return "a plugin's setup is running; try again once plugin.status says ready";
	return NULL;
}

void plugin_handover_fail_inflight(void)
{
	for (struct plugin *pl = plugins; pl; pl = pl->next) {
		while (pl->reqs || pl->waiting) {
			struct preq *q = pl->reqs ? pl->reqs : pl->waiting;
			buf_t m = {0};
			buf_printf(&m, "termd was upgraded in place while the %s plugin ran '%s': its "
				   "answer cannot come to this request; the program and its state are "
				   "kept, send the action again (with a new id)", pl->name, q->action);
			preq_fail(q, TD_ERR_INTERNAL, m.p);
			buf_free(&m);
		}
	}
}

static void add_bytes(cJSON *o, const char *k, const buf_t *b)
{
	char *t = xmalloc(b->len + 1);
	if (b->len)
		memcpy(t, b->p, b->len);
	t[b->len] = 0;
	cJSON_AddStringToObject(o, k, t);
	free(t);
}

cJSON *plugin_handover_save(void)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddNumberToObject(j, "next_rid", (double)next_rid);
	cJSON *arr = cJSON_AddArrayToObject(j, "programs");
	for (struct plugin *pl = plugins; pl; pl = pl->next) {
		if (!running(pl))
			continue;
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "name", pl->name);
		cJSON_AddNumberToObject(o, "pid", pl->pid);
		cJSON_AddNumberToObject(o, "in_fd", pl->in_fd);
		cJSON_AddNumberToObject(o, "out_fd", lws_get_socket_fd(pl->out_wsi));
		add_bytes(o, "outq", &pl->outq);
		add_bytes(o, "rx", &pl->rx);
		cJSON_AddItemToArray(arr, o);
	}
	return j;
}

void plugin_handover_keep(int keep)
{
	for (struct plugin *pl = plugins; pl; pl = pl->next) {
		if (!running(pl))
			continue;
		fcntl(pl->in_fd, F_SETFD, keep ? 0 : FD_CLOEXEC);
		fcntl(lws_get_socket_fd(pl->out_wsi), F_SETFD, keep ? 0 : FD_CLOEXEC);
	}
}

static int num(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItem(o, k);
	return cJSON_IsNumber(v) ? (int)v->valuedouble : -1;
}

static const char *str(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItem(o, k);
	return cJSON_IsString(v) ? v->valuestring : "";
}

void plugin_handover_load(const cJSON *rec)
{
	const cJSON *n = cJSON_GetObjectItem(rec, "next_rid");
	if (cJSON_IsNumber(n) && (uint64_t)n->valuedouble > next_rid)
		next_rid = (uint64_t)n->valuedouble;   /* a late answer to an old id matches nothing */
	const cJSON *o;
	cJSON_ArrayForEach(o, cJSON_GetObjectItem(rec, "programs")) {
		int pid = num(o, "pid"), in = num(o, "in_fd"), out = num(o, "out_fd");
		if (pid <= 0 || in < 0 || out < 0)
			continue;
		struct plugin *pl = plugin_named(str(o, "name"));
		if (!pl || !pl->enabled || pl->pid > 0) {
			/* not served by this termd: it ends (still our child: reaped) */
			log_warn("plugin %s: not enabled after the upgrade; its program %d ends",
				 str(o, "name"), pid);
			kill(-pid, SIGKILL);
			close(in);
			close(out);
			continue;
		}
		buf_puts(&pl->outq, str(o, "outq"));
		buf_puts(&pl->rx, str(o, "rx"));
		program_adopt(pl, pid, in, out);
	}
}
