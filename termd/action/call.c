/* call.c — owns a door's calls onto actions_dispatch through a socketless
 * connection (the door's own, its sink taking the answers): the action
 * frame under a fresh id, the ids (counter and clock, or random where the
 * stream shows them), and the synchronous call that returns the answer
 * the action gave while it was dispatched (action_call_now). */
#include "action.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

void action_call(struct conn *c, const char *id, const char *action, cJSON *args)
{
	cJSON *f = cJSON_CreateObject();
	cJSON_AddStringToObject(f, "id", id);
	cJSON_AddStringToObject(f, "action", action);
	cJSON_AddItemToObject(f, "args", args);
	char *s = cJSON_PrintUnformatted(f);
	cJSON_Delete(f);
	actions_dispatch(c, s, strlen(s));
	free(s);
}

void action_call_random_id(char *out, size_t size, const char *prefix, unsigned long long n)
{
	uint8_t rnd[12];
	if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
		memset(rnd, 0, sizeof rnd);   /* then the counter still makes it new */
	int k = snprintf(out, size, "%s-%llu-", prefix, n);
	for (size_t i = 0; i < sizeof rnd && k + 2 < (int)size; i++, k += 2)
		snprintf(out + k, size - (size_t)k, "%02x", rnd[i]);
}

void action_caller_id(struct action_caller *k, char *out, size_t size)
{
	/* random enough that nobody can take the answer: a counter and the
	 * clock (the id is also never re-sent) */
	snprintf(out, size, "%s-%llu-%llx", k->prefix, ++k->nid, (unsigned long long)mono_us());
}

cJSON *action_call_now(struct action_caller *k, const char *action, cJSON *args)
{
	action_caller_id(k, k->id, sizeof k->id);
	k->answer = NULL;
	action_call(&k->conn, k->id, action, args);
	cJSON *a = k->answer;
	k->answer = NULL;
	k->id[0] = 0;
	return a;
}

int action_caller_take(struct action_caller *k, cJSON *ans)
{
	const cJSON *cause = cJSON_GetObjectItemCaseSensitive(ans, "cause");
	if (!cJSON_IsString(cause) || k->answer || !k->id[0] || strcmp(cause->valuestring, k->id) != 0)
		return 0;
	k->answer = ans;
	return 1;
}

void action_caller_sink(struct conn *c, const char *data, size_t len)
{
	struct action_caller *k = (struct action_caller *)c;
	cJSON *ans = cJSON_ParseWithLength(data, len);
	if (!action_caller_take(k, ans))
		cJSON_Delete(ans);
}
