/* actstats.c — what /metrics tells of actions: each action's answers by
 * outcome ("ok" or the error code) and how long they took (a histogram
 * per action, from the frame's arrival to the answer: a run's is its
 * command's time). actions_dispatch counts an action answered at once;
 * one that leaves a pending action (run, keys, expect, a plugin's) is
 * counted when the pending action answers (pending_emit) or ends. Names
 * are the registered actions' (any other is "unknown", a frame with no
 * action "invalid"), so a client cannot grow the table. */
#include "action.h"

#include <string.h>

static const double bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
				0.5, 1, 2.5, 5, 10, 30, 60, 300};
#define NB (sizeof bounds / sizeof bounds[0])

struct astat {
	char *name;
	uint64_t outcome[TD_ERR__COUNT + 1];   /* [0] ok, [1 + code] */
	uint64_t bucket[NB];                   /* not cumulative here */
	uint64_t count;
	double sum;
};

static struct astat *st;
static size_t nst, capst;

int actstats_index(const char *name)
{
	if (!name)
		name = "invalid";
	else if (!actions_find(name))
		name = "unknown";
	for (size_t i = 0; i < nst; i++)
		if (strcmp(st[i].name, name) == 0)
			return (int)i;
	if (nst == capst) {
		capst = capst ? 2 * capst : 32;
		st = xrealloc(st, capst * sizeof *st);
	}
	memset(&st[nst], 0, sizeof st[nst]);
	st[nst].name = xstrdup(name);
	return (int)nst++;
}

void actstats_record(int index, int outcome, uint64_t us)
{
	if (index < 0 || (size_t)index >= nst)
		return;
	struct astat *a = &st[index];
	a->outcome[outcome < 0 || outcome >= TD_ERR__COUNT ? 0 : 1 + outcome]++;
	double s = (double)us / 1e6;
	a->count++;
	a->sum += s;
	for (size_t b = 0; b < NB; b++)
		if (s <= bounds[b]) {
			a->bucket[b]++;
			break;
		}
}

int actstats_outcome(const char *observation, const cJSON *extras)
{
	if (strcmp(observation, "error") != 0)
		return -1;
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(extras, "code");
	for (int i = 0; cJSON_IsString(c) && i < TD_ERR__COUNT; i++)
		if (strcmp(td_err_name((td_err)i), c->valuestring) == 0)
			return i;
	return TD_ERR_INTERNAL;
}

/* a label value as the text format wants it: \\, \" and \n escaped */
static buf_t l;

static const char *label(const char *v)
{
	buf_reset(&l);
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			buf_putc(&l, '\\');
		if (*v == '\n')
			buf_puts(&l, "\\n");
		else
			buf_putc(&l, *v);
	}
	buf_putc(&l, 0);
	return l.p;
}

void actstats_write(buf_t *b)
{
	buf_puts(b, "# HELP termd_actions_total Actions answered, by action and outcome "
		    "(ok, or the error code).\n# TYPE termd_actions_total counter\n");
	for (size_t i = 0; i < nst; i++)
		for (int o = 0; o <= TD_ERR__COUNT; o++)
			if (st[i].outcome[o])
				buf_printf(b, "termd_actions_total{action=\"%s\",outcome=\"%s\"} %llu\n",
					   label(st[i].name), o ? td_err_name((td_err)(o - 1)) : "ok",
					   (unsigned long long)st[i].outcome[o]);
	buf_puts(b, "# HELP termd_action_duration_seconds From an action's frame to its answer.\n"
		    "# TYPE termd_action_duration_seconds histogram\n");
	for (size_t i = 0; i < nst; i++) {
		if (!st[i].count)
			continue;
		char *name = xstrdup(label(st[i].name));
		uint64_t cum = 0;
		for (size_t k = 0; k < NB; k++) {
			cum += st[i].bucket[k];
			buf_printf(b, "termd_action_duration_seconds_bucket{action=\"%s\",le=\"%g\"} %llu\n",
				   name, bounds[k], (unsigned long long)cum);
		}
		buf_printf(b, "termd_action_duration_seconds_bucket{action=\"%s\",le=\"+Inf\"} %llu\n",
			   name, (unsigned long long)st[i].count);
		buf_printf(b, "termd_action_duration_seconds_sum{action=\"%s\"} %.6f\n", name,
			   st[i].sum);
		buf_printf(b, "termd_action_duration_seconds_count{action=\"%s\"} %llu\n", name,
			   (unsigned long long)st[i].count);
		free(name);
	}
}

void actstats_shutdown(void)
{
	for (size_t i = 0; i < nst; i++)
		free(st[i].name);
	free(st);
	buf_free(&l);
	st = NULL;
	nst = capst = 0;
}
