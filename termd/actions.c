/* actions.c — decoding an action frame (JSON object with id, action, args),
 * the table of actions with their handlers and whether a read-only
 * connection may use them, typed argument helpers that answer bad_request,
 * and the tiny actions (`ping`). */
#include "termd.h"

#include <math.h>
#include <string.h>
#include <strings.h>

typedef void (*action_fn)(struct conn *c, const cJSON *id, const cJSON *args);

struct action_entry {
	const char *name;
	action_fn fn;
	int readonly_ok;
};

static void ping_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	(void)args;
	events_emit(c, id, "pong", "", NULL);
}

static const struct action_entry action_table[] = {
	{"run", run_action, 0},
	{"keys", keys_action, 0},
	{"screen", screen_action, 1},
	{"expect", expect_action, 0},
	{"session.open", session_open_action, 0},
	{"session.list", session_list_action, 1},
	{"session.signal", session_signal_action, 0},
	{"session.close", session_close_action, 0},
	{"subscribe", events_subscribe, 1},
	{"ping", ping_action, 1},
	{"read", files_read_action, 0},
	{"write", files_write_action, 0},
	{"edit", edit_action, 0},
};

cJSON *actions_list_json(void)
{
	cJSON *a = cJSON_CreateArray();
	for (size_t i = 0; i < sizeof action_table / sizeof action_table[0]; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(action_table[i].name));
	return a;
}

int arg_string(struct conn *c, const cJSON *id, const cJSON *args, const char *key,
	       const char **out, int required)
{
	const cJSON *v = args ? cJSON_GetObjectItemCaseSensitive(args, key) : NULL;
	if (!v || cJSON_IsNull(v)) {
		if (required) {
			events_error(c, id, TD_ERR_BAD_REQUEST, "missing argument '%s'", key);
			return -1;
		}
		return 0;
	}
	if (!cJSON_IsString(v)) {
		events_error(c, id, TD_ERR_BAD_REQUEST, "argument '%s' must be a string", key);
		return -1;
	}
	*out = v->valuestring;
	return 0;
}

int arg_number(struct conn *c, const cJSON *id, const cJSON *args, const char *key,
	       double *out, int *present)
{
	const cJSON *v = args ? cJSON_GetObjectItemCaseSensitive(args, key) : NULL;
	if (present)
		*present = 0;
	if (!v || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
		events_error(c, id, TD_ERR_BAD_REQUEST, "argument '%s' must be a number", key);
		return -1;
	}
	*out = v->valuedouble;
	if (present)
		*present = 1;
	return 0;
}

int arg_int(struct conn *c, const cJSON *id, const cJSON *args, const char *key,
	    long long *out, int *present)
{
	double v = 0;
	int has = 0;
	if (arg_number(c, id, args, key, &v, &has) < 0)
		return -1;
	if (present)
		*present = has;
	if (!has)
		return 0;
	if (v != floor(v) || fabs(v) > 1e15) {
		events_error(c, id, TD_ERR_BAD_REQUEST, "argument '%s' must be an integer", key);
		return -1;
	}
	*out = (long long)v;
	return 0;
}

int arg_encoding(struct conn *c, const cJSON *id, const cJSON *args, int *base64)
{
	const char *enc = NULL;
	if (arg_string(c, id, args, "encoding", &enc, 0) < 0)
		return -1;
	if (!enc || !strcasecmp(enc, "utf-8") || !strcasecmp(enc, "utf8")) {
		*base64 = 0;
		return 0;
	}
	if (!strcasecmp(enc, "base64")) {
		*base64 = 1;
		return 0;
	}
	events_error(c, id, TD_ERR_BAD_REQUEST, "argument 'encoding' must be \"utf-8\" or \"base64\"");
	return -1;
}

int arg_bool(struct conn *c, const cJSON *id, const cJSON *args, const char *key, int *out)
{
	const cJSON *v = args ? cJSON_GetObjectItemCaseSensitive(args, key) : NULL;
	if (!v || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsBool(v)) {
		events_error(c, id, TD_ERR_BAD_REQUEST, "argument '%s' must be true or false", key);
		return -1;
	}
	*out = cJSON_IsTrue(v);
	return 0;
}

void actions_dispatch(struct conn *c, const char *json, size_t len)
{
	cJSON *root = cJSON_ParseWithLength(json, len);
	if (!root) {
		events_error(c, NULL, TD_ERR_BAD_JSON, "frame is not valid JSON");
		return;
	}
	if (!cJSON_IsObject(root)) {
		events_error(c, NULL, TD_ERR_BAD_REQUEST, "an action must be a JSON object");
		cJSON_Delete(root);
		return;
	}
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
	if (id && cJSON_IsNull(id))
		id = NULL;
	/* a number too large for a double (1e999) is not an integer id: its
	 * answer could not carry it (cJSON prints it as null; found by
	 * tests/fuzz/fuzz_action) */
	if (id && !cJSON_IsString(id) &&
	    !(cJSON_IsNumber(id) && isfinite(id->valuedouble) &&
	      id->valuedouble == floor(id->valuedouble))) {
		events_error(c, NULL, TD_ERR_BAD_REQUEST, "'id' must be a string or an integer");
		cJSON_Delete(root);
		return;
	}
	const cJSON *action = cJSON_GetObjectItemCaseSensitive(root, "action");
	if (!cJSON_IsString(action)) {
		events_error(c, id, TD_ERR_BAD_REQUEST, "missing or non-string 'action'");
		cJSON_Delete(root);
		return;
	}
	const cJSON *args = cJSON_GetObjectItemCaseSensitive(root, "args");
	if (args && cJSON_IsNull(args))
		args = NULL;
	if (args && !cJSON_IsObject(args)) {
		events_error(c, id, TD_ERR_BAD_REQUEST, "'args' must be an object");
		cJSON_Delete(root);
		return;
	}
	/* idempotency: an id already answered is not run again */
	if (id && (events_replay(c, id) || run_rebind(id, c))) {
		cJSON_Delete(root);
		return;
	}
	const struct action_entry *e = NULL;
	for (size_t i = 0; i < sizeof action_table / sizeof action_table[0]; i++)
		if (strcmp(action_table[i].name, action->valuestring) == 0)
			e = &action_table[i];
	if (!e) {
		/* at most 100 bytes of the name, cut at a character boundary:
		 * "%.100s" could cut a UTF-8 character in two and make the
		 * answer invalid UTF-8 (found by tests/fuzz/fuzz_action) */
		const char *name = action->valuestring;
		int n = (int)strnlen(name, 101);
		if (n > 100) {
			n = 100;
			while (n > 0 && ((unsigned char)name[n] & 0xC0) == 0x80)
				n--;
		}
		events_error(c, id, TD_ERR_UNKNOWN_ACTION, "unknown action '%.*s'", n, name);
	} else if (c->readonly && !e->readonly_ok) {
		events_error(c, id, TD_ERR_FORBIDDEN, "action '%s' needs the full token", e->name);
	} else {
		e->fn(c, id, args);
	}
	cJSON_Delete(root);
}
