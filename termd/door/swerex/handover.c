/* handover.c — the SWE-ReX door across an upgrade in place: its sessions'
 * names and state saved into the hand-over record, loaded back by the new
 * termd, and each following its termd session again once those are
 * adopted (termd/handover.c calls these three). */
#include "swerex.h"

#include <stdio.h>
#include <string.h>

/* The sessions as SWE-ReX names them (the closed ones' names kept too):
 * their termd sessions go across, the new termd follows them again. The
 * raw text and a timed-out command's output to come are not kept. Then
 * /execute's processes' timeouts (exec.c). */
cJSON *swerex_handover_save(void)
{
	cJSON *a = cJSON_CreateArray();
	for (struct swsess *ss = sw_sess_list; ss; ss = ss->next) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "name", ss->name);
		cJSON_AddStringToObject(o, "session", ss->sname);
		cJSON_AddBoolToObject(o, "closed", ss->closed);
		cJSON_AddBoolToObject(o, "ready", ss->ready);
		cJSON_AddBoolToObject(o, "prompted", ss->prompted);
		cJSON_AddBoolToObject(o, "running", ss->running);
		cJSON_AddItemToArray(a, o);
	}
	sw_proc_handover_save(a);
	return a;
}

void swerex_handover_load(const cJSON *a)
{
	const cJSON *o;
	cJSON_ArrayForEach(o, a) {
		if (cJSON_GetObjectItem(o, "exec")) {
			sw_proc_handover_load(o);
			continue;
		}
		const char *name = sw_jstr(o, "name", NULL), *sname = sw_jstr(o, "session", NULL);
		if (!name || !sname || strlen(sname) > TD_SESSION_NAME_MAX || sw_sess_find(name))
			continue;
		struct swsess *ss = xcalloc(1, sizeof *ss);
		ss->name = xstrdup(name);
		snprintf(ss->sname, sizeof ss->sname, "%s", sname);
		ss->closed = sw_jbool(o, "closed", 0);
		ss->ready = sw_jbool(o, "ready", 0);
		ss->prompted = sw_jbool(o, "prompted", 0);
		ss->running = sw_jbool(o, "running", 0);
		ss->next = sw_sess_list;
		sw_sess_list = ss;
	}
}

/* after the sessions are adopted: each follows its termd session again
 * (one that did not come across is as one whose shell ended) */
void swerex_handover_done(void)
{
	for (struct swsess *ss = sw_sess_list; ss; ss = ss->next)
		if (!ss->closed && !ss->s)
			ss->s = session_find(ss->sname);
	sw_proc_handover_done();
}
