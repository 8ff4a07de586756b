/* actions.c — the action layer: decoding an action frame (JSON object with
 * id, action, args), the registry of actions (each module registers its
 * own table: name, handler, whether a read-only connection may use it),
 * the one way an action fails (act_error, answered by actions_dispatch),
 * typed argument helpers (including the session an action names), the
 * registry of pending actions (run, keys, expect: one place for re-sent
 * ids, departed connections and ended sessions), and `ping`. */
#include "action.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------ registry */

static struct action_def *defs;
static size_t ndefs, capdefs;

void actions_register(const struct action_def *d, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct action_def *old = actions_find(d[i].name);
		if (old) {   /* a later registration replaces the earlier one */
			defs[old - defs] = d[i];
			continue;
		}
		if (ndefs == capdefs) {
			capdefs = capdefs ? 2 * capdefs : 32;
			defs = xrealloc(defs, capdefs * sizeof *defs);
		}
		defs[ndefs++] = d[i];
	}
}

void actions_unregister(const char *name)
{
	const struct action_def *d = actions_find(name);
	if (!d)
		return;
	size_t i = (size_t)(d - defs);
	memmove(&defs[i], &defs[i + 1], (ndefs - i - 1) * sizeof *defs);
	ndefs--;
}

const struct action_def *actions_find(const char *name)
{
	for (size_t i = 0; i < ndefs; i++)
		if (strcmp(defs[i].name, name) == 0)
			return &defs[i];
	return NULL;
}

void actions_shutdown(void)
{
	free(defs);
	defs = NULL;
	ndefs = capdefs = 0;
}

cJSON *actions_list_json(void)
{
	cJSON *a = cJSON_CreateArray();
	for (size_t i = 0; i < ndefs; i++)
		if (!(defs[i].flags & ACT_HIDDEN))
			cJSON_AddItemToArray(a, cJSON_CreateString(defs[i].name));
	return a;
}

static int ping_action(struct act *a)
{
	events_emit(a->conn, a->id, "pong", "", NULL);
	return 0;
}

static actions_defer_fn *defer_hook;
static actions_session_fn *opened_hook;

void actions_set_defer(actions_defer_fn *fn)
{
	defer_hook = fn;
}

void actions_on_session_opened(actions_session_fn *fn)
{
	opened_hook = fn;
}

void actions_init(void)
{
	static const struct action_def own[] = {
		{"ping", ping_action, ACT_READONLY},
	};
	actions_register(own, sizeof own / sizeof own[0]);
	static const struct session_listener l = {.gone = pending_session_gone};
	session_listen(&l);
}

/* -------------------------------------------------------------- errors */

/* The length of s cut to at most max bytes at a UTF-8 character boundary
 * ("%.100s" could cut a character in two and make the answer invalid
 * UTF-8; found by tests/fuzz/fuzz_action). */
static size_t utf8_cut(const char *s, size_t len, size_t max)
{
	if (len <= max)
		return len;
	size_t n = max;
	while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
		n--;
	return n;
}

static int act_verror(struct act *a, td_err code, cJSON *extras, const char *fmt, va_list ap)
{
	a->failed = 1;
	a->code = code;
	buf_reset(&a->msg);
	buf_vprintf(&a->msg, fmt, ap);
	a->msg.len = utf8_cut(a->msg.p, a->msg.len, ACT_MSG_MAX);
	a->msg.p[a->msg.len] = 0;
	cJSON_Delete(a->err_extras);
	a->err_extras = extras;
	return -1;
}

int act_error(struct act *a, td_err code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	act_verror(a, code, NULL, fmt, ap);
	va_end(ap);
	return -1;
}

int act_error_extras(struct act *a, td_err code, cJSON *extras, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	act_verror(a, code, extras, fmt, ap);
	va_end(ap);
	return -1;
}

/* The one place an error observation is built. */
void act_answer_error(struct act *a)
{
	cJSON *ex = a->err_extras ? a->err_extras : cJSON_CreateObject();
	a->err_extras = NULL;
	cJSON_DeleteItemFromObject(ex, "code");
	cJSON_AddStringToObject(ex, "code", td_err_name(a->code));
	events_emit(a->conn, a->id, "error", a->msg.len ? a->msg.p : td_err_name(a->code), ex);
}

/* ----------------------------------------------------------- arguments */

/* Every argument the action reads is named here once: what its answer
 * names in extras.ignored_args is the rest (PROTOCOL.md §2). */
static void arg_mark(struct act *a, const char *key)
{
	for (size_t i = 0; i < a->nread; i++)
		if (strcmp(a->read[i], key) == 0)
			return;
	if (a->nread == a->capread) {
		a->capread = a->capread ? 2 * a->capread : 8;
		a->read = xrealloc(a->read, a->capread * sizeof *a->read);
	}
	a->read[a->nread++] = key;
}

static const cJSON *arg_get(struct act *a, const char *key)
{
	arg_mark(a, key);
	const cJSON *v = a->args ? cJSON_GetObjectItemCaseSensitive(a->args, key) : NULL;
	return v && !cJSON_IsNull(v) ? v : NULL;
}

const cJSON *arg_json(struct act *a, const char *key)
{
	return arg_get(a, key);
}

void act_args_known(struct act *a, const char *const *names)
{
	for (; *names; names++)
		arg_mark(a, *names);
}

void act_args_all_read(struct act *a)
{
	a->all_read = 1;
}

cJSON *act_ignored_args(const struct act *a)
{
	if (!a->args || a->all_read)
		return NULL;
	cJSON *names = NULL;
	const cJSON *v;
	cJSON_ArrayForEach(v, a->args) {
		if (!v->string)
			continue;
		int read = 0;
		for (size_t i = 0; i < a->nread && !read; i++)
			read = strcmp(a->read[i], v->string) == 0;
		if (read)
			continue;
		if (!names)
			names = cJSON_CreateArray();
		cJSON_AddItemToArray(names, cJSON_CreateString(v->string));
	}
	return names;
}

/* ignored (taken) into extras (taken, may be NULL), unless extras names
 * some already (a plugin's own) */
static cJSON *add_ignored(cJSON *extras, cJSON *ignored)
{
	if (!ignored)
		return extras;
	if (!extras)
		extras = cJSON_CreateObject();
	if (cJSON_GetObjectItemCaseSensitive(extras, "ignored_args"))
		cJSON_Delete(ignored);
	else
		cJSON_AddItemToObject(extras, "ignored_args", ignored);
	return extras;
}

/* the action whose handler is running (a stack: a handler may dispatch) */
static struct act *dispatching;
static struct pending *pendings;

cJSON *actions_answer_extras(const struct conn *to, const cJSON *cause, cJSON *extras)
{
	struct act *a = dispatching;
	if (a && to && to == a->conn && cause == a->id)
		return add_ignored(extras, act_ignored_args(a));
	/* a pending action's answer: caused by its own copy of the id,
	 * whichever way its owner sends it (pending_emit does this itself,
	 * for an action sent without an id too) */
	if (cause)
		for (struct pending *p = pendings; p; p = p->next)
			if (p->id == cause)
				return pending_extras(p, extras);
	return extras;
}

int arg_string(struct act *a, const char *key, const char **out, int required)
{
	const cJSON *v = arg_get(a, key);
	if (!v)
		return required ? act_error(a, TD_ERR_BAD_REQUEST,
					    "missing argument 'args.%s' (an action's arguments go "
					    "in its \"args\" object)", key) : 0;
	if (!cJSON_IsString(v))
		return act_error(a, TD_ERR_BAD_REQUEST, "argument '%s' must be a string", key);
	*out = v->valuestring;
	return 0;
}

int arg_number(struct act *a, const char *key, double *out, int *present)
{
	const cJSON *v = arg_get(a, key);
	if (present)
		*present = 0;
	if (!v)
		return 0;
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
		return act_error(a, TD_ERR_BAD_REQUEST, "argument '%s' must be a number", key);
	*out = v->valuedouble;
	if (present)
		*present = 1;
	return 0;
}

int arg_int(struct act *a, const char *key, long long *out, int *present)
{
	double v = 0;
	int has = 0;
	if (arg_number(a, key, &v, &has) < 0)
		return -1;
	if (present)
		*present = has;
	if (!has)
		return 0;
	if (v != floor(v) || fabs(v) > 1e15)
		return act_error(a, TD_ERR_BAD_REQUEST, "argument '%s' must be an integer", key);
	*out = (long long)v;
	return 0;
}

int arg_encoding(struct act *a, int *base64)
{
	const char *enc = NULL;
	if (arg_string(a, "encoding", &enc, 0) < 0)
		return -1;
	if (!enc || !strcasecmp(enc, "utf-8") || !strcasecmp(enc, "utf8")) {
		*base64 = 0;
		return 0;
	}
	if (!strcasecmp(enc, "base64")) {
		*base64 = 1;
		return 0;
	}
	return act_error(a, TD_ERR_BAD_REQUEST, "argument 'encoding' must be \"utf-8\" or \"base64\"");
}

int arg_bool(struct act *a, const char *key, int *out)
{
	const cJSON *v = arg_get(a, key);
	if (!v)
		return 0;
	if (!cJSON_IsBool(v))
		return act_error(a, TD_ERR_BAD_REQUEST, "argument '%s' must be true or false", key);
	*out = cJSON_IsTrue(v);
	return 0;
}

int arg_session_name(struct act *a, const char *key, int required, const char **name)
{
	const char *given = NULL;
	if (arg_string(a, key, &given, required) < 0)
		return -1;
	if (!given)
		return 0;   /* absent, not required: *name keeps its default */
	*name = given;
	if (!td_valid_session_name(*name))
		return act_error(a, TD_ERR_BAD_REQUEST,
				 "session names are 1-64 characters of A-Z a-z 0-9 _ . -");
	return 0;
}

int arg_session(struct act *a, const char *key, int flags, struct session **out,
		int *restarted)
{
	const char *name = "main";
	if (restarted)
		*restarted = 0;
	/* a view never starts a process: no new session, no shell started
	 * again; an ended one's last screen can still be read */
	if (a->conn && a->conn->readonly)
		flags &= ~(SESS_CREATE | SESS_RESPAWN);
	if (arg_session_name(a, key, 0, &name) < 0)
		return -1;
	char err[256];
	struct session *s = session_find(name);
	if (!s) {
		if (!(flags & SESS_CREATE))
			return act_error(a, TD_ERR_NO_SUCH_SESSION, "no session named '%s'", name);
		td_err code;
		s = session_open(name, NULL, NULL, NULL, 0, 0, &code, err, sizeof err);
		if (!s)
			return act_error(a, code, "cannot start a shell: %s", err);
		if (opened_hook)
			opened_hook(s);
		if (restarted)
			*restarted = 2;   /* created: the answer says so (a typo?) */
	}
	if (!s->pty.alive && (flags & SESS_RESPAWN)) {
		if (!s->is_shell) {
			if (flags & SESS_ALLOW_DEAD)
				goto done;   /* an ended program's last screen can still be read */
			return act_error(a, TD_ERR_NO_COMMAND, "session '%s' has ended (exit code %d)",
					 s->name, s->pty.exit_code);
		}
		session_gone(s);
		if (session_respawn(s, err, sizeof err) < 0)
			return act_error(a, TD_ERR_INTERNAL, "cannot restart the shell: %s", err);
		if (restarted)
			*restarted = 1;
	}
done:
	*out = s;
	return 0;
}

/* ------------------------------------------------------ pending actions */

void pending_add(struct pending *p, const struct pending_ops *ops, struct act *a,
		 struct session *s)
{
	p->ops = ops;
	p->ignored = NULL;
	p->act = a;   /* its ignored_args are known when the handler returns */
	a->pending = p;
	p->id = a->id ? cJSON_Duplicate(a->id, 1) : NULL;
	p->conn = a->conn;
	p->s = s;
	p->start_us = mono_us();
	p->stat = a->stat;   /* counted when it answers */
	a->pended = 1;
	p->next = pendings;
	p->pprev = &pendings;
	if (pendings)
		pendings->pprev = &p->next;
	pendings = p;
	if (s)
		fair_pending_changed(s, 0);
}

uint64_t pending_newest(const struct session *s)
{
	uint64_t t = 0;
	for (const struct pending *p = pendings; p; p = p->next)
		if (p->s == s && p->start_us > t)
			t = p->start_us;
	return t;
}

void pending_del(struct pending *p)
{
	if (!p->pprev)
		return;
	if (p->stat)   /* ended without pending_emit (keys' screen): answered */
		actstats_record(p->stat - 1, -1, mono_us() - p->start_us);
	p->stat = 0;
	*p->pprev = p->next;
	if (p->next)
		p->next->pprev = p->pprev;
	p->next = NULL;
	p->pprev = NULL;
	cJSON_Delete(p->id);
	p->id = NULL;
	cJSON_Delete(p->ignored);
	p->ignored = NULL;
	cJSON_Delete(p->redo_args);
	p->redo_args = NULL;
	if (p->act) {
		p->act->pending = NULL;
		p->act = NULL;
	}
	if (p->s)
		fair_pending_changed(p->s, 1);
}

cJSON *pending_extras(struct pending *p, cJSON *extras)
{
	if (p->act)   /* answered while its handler still runs */
		return add_ignored(extras, act_ignored_args(p->act));
	return add_ignored(extras, p->ignored ? cJSON_Duplicate(p->ignored, 1) : NULL);
}

void pending_emit(struct pending *p, const char *observation, const char *content,
		  cJSON *extras)
{
	if (p->stat)
		actstats_record(p->stat - 1, actstats_outcome(observation, extras),
				mono_us() - p->start_us);
	p->stat = 0;
	events_emit(p->conn, p->id, observation, content, pending_extras(p, extras));
}

/* The handler of a has returned: the pending action it left (if any, and
 * still waiting) keeps a's ignored_args for its answer. */
static void pending_settle(struct act *a)
{
	struct pending *p = a->pending;
	if (!p)
		return;
	a->pending = NULL;
	p->act = NULL;
	if (p->pprev && !a->failed)
		p->ignored = act_ignored_args(a);
}

int pending_rebind(const cJSON *id, struct conn *c)
{
	for (struct pending *p = pendings; p; p = p->next) {
		if (p->id && cJSON_Compare(p->id, id, 1)) {
			p->conn = c;
			return 1;
		}
	}
	return 0;
}

int pending_has(const cJSON *id)
{
	for (struct pending *p = pendings; p; p = p->next)
		if (p->id && cJSON_Compare(p->id, id, 1))
			return 1;
	return 0;
}

void pending_redo(struct pending *p, const cJSON *args, uint64_t deadline_us)
{
	cJSON_Delete(p->redo_args);
	p->redo_args = args ? cJSON_Duplicate(args, 1) : cJSON_CreateObject();
	p->redo_deadline_us = deadline_us;
}

cJSON *pending_handover_save(void)
{
	cJSON *arr = cJSON_CreateArray();
	uint64_t now = mono_us();
	for (struct pending *p = pendings; p; p = p->next) {
		if (!p->redo_args || !p->id)
			continue;   /* an answer nobody can ask for again is not re-armed */
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "action", p->ops->kind);
		cJSON_AddItemToObject(o, "id", cJSON_Duplicate(p->id, 1));
		cJSON_AddItemToObject(o, "args", cJSON_Duplicate(p->redo_args, 1));
		double left = p->redo_deadline_us > now ? (double)(p->redo_deadline_us - now) / 1e6 : 0;
		cJSON_AddNumberToObject(o, "timeout_left", left);
		cJSON_AddItemToArray(arr, o);
	}
	return arr;
}

/* An action run with no connection: its answer is retained for its id, so
 * the client that re-sends the id after reconnecting gets it (or is bound
 * to it while it waits: pending_rebind). */
static void run_detached(const char *action, const cJSON *id, const cJSON *args)
{
	const struct action_def *e = actions_find(action);
	if (!e || (e->flags & ACT_FILEWORK))
		return;
	struct act a = {.conn = NULL, .id = id, .action = action, .args = args};
	a.stat = 1 + actstats_index(action);
	uint64_t t0 = mono_us();
	struct act *outer = dispatching;
	dispatching = &a;
	if (e->fn(&a) != 0 || a.failed)
		act_answer_error(&a);
	pending_settle(&a);
	dispatching = outer;
	free(a.read);
	if (a.stat && (a.failed || !a.pended))
		actstats_record(a.stat - 1, a.failed ? (int)a.code : -1, mono_us() - t0);
	buf_free(&a.msg);
	cJSON_Delete(a.err_extras);
}

void pending_handover_load(const cJSON *arr)
{
	const cJSON *o;
	cJSON_ArrayForEach(o, arr) {
		const cJSON *act = cJSON_GetObjectItem(o, "action"), *id = cJSON_GetObjectItem(o, "id");
		const cJSON *args = cJSON_GetObjectItem(o, "args");
		const cJSON *left = cJSON_GetObjectItem(o, "timeout_left");
		if (!cJSON_IsString(act) || !id || !cJSON_IsObject(args) || pending_has(id) ||
		    events_id_known(id))
			continue;
		cJSON *a = cJSON_Duplicate(args, 1);
		cJSON_DeleteItemFromObject(a, "timeout");
		cJSON_AddNumberToObject(a, "timeout", cJSON_IsNumber(left) && left->valuedouble > 0 ?
					left->valuedouble : 0);
		run_detached(act->valuestring, id, a);
		cJSON_Delete(a);
	}
}

void pending_conn_gone(struct conn *c)
{
	for (struct pending *p = pendings; p; p = p->next)
		if (p->conn == c)
			p->conn = NULL;
}

void pending_session_gone(struct session *s)
{
	struct pending *p = pendings, *next;
	while (p) {
		next = p->next;
		if (p->s == s) {
			p->ops->session_gone(p);   /* frees p (and may free others of s) */
			next = pendings;           /* so start again */
		}
		p = next;
	}
}

/* ------------------------------------------------------------ dispatch */

void actions_dispatch(struct conn *c, const char *json, size_t len)
{
	struct act a = {.conn = c};
	uint64_t t0 = mono_us();
	cJSON *root = cJSON_ParseWithLength(json, len);
	if (!root) {
		act_error(&a, TD_ERR_BAD_JSON, "frame is not valid JSON");
		goto answer;
	}
	if (!cJSON_IsObject(root)) {
		act_error(&a, TD_ERR_BAD_REQUEST, "an action must be a JSON object");
		goto answer;
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
		act_error(&a, TD_ERR_BAD_REQUEST, "'id' must be a string or an integer");
		goto answer;
	}
	a.id = id;
	const cJSON *action = cJSON_GetObjectItemCaseSensitive(root, "action");
	if (!cJSON_IsString(action)) {
		act_error(&a, TD_ERR_BAD_REQUEST, "missing or non-string 'action'");
		goto answer;
	}
	a.args = cJSON_GetObjectItemCaseSensitive(root, "args");
	if (a.args && cJSON_IsNull(a.args))
		a.args = NULL;
	if (a.args && !cJSON_IsObject(a.args)) {
		act_error(&a, TD_ERR_BAD_REQUEST, "'args' must be an object");
		goto answer;
	}
	/* idempotency: an id already answered is not run again; one still
	 * waiting gets its answer on this connection. Ids are the full token's:
	 * a viewer never replays, rebinds or takes one (its answers keep no
	 * id), and one it sends that is a full-token client's is refused to
	 * it alone, changing nothing. */
	if (id && c->readonly) {
		if (events_id_known(id) || pending_has(id)) {
			events_private_error(c, id, TD_ERR_FORBIDDEN,
					     "this id belongs to another client's action");
			goto done;
		}
	} else if (id && (events_replay(c, id) || pending_rebind(id, c))) {
		goto done;
	}
	a.action = action->valuestring;
	a.stat = 1 + actstats_index(action->valuestring);
	const struct action_def *e = actions_find(action->valuestring);
	if (!e) {
		const char *name = action->valuestring;
		act_error(&a, TD_ERR_UNKNOWN_ACTION, "unknown action '%.*s'",
			  (int)utf8_cut(name, strlen(name), 100), name);
	} else if (c->readonly && !(e->flags & ACT_READONLY)) {
		act_error(&a, TD_ERR_FORBIDDEN, "action '%s' needs the full token", e->name);
	} else if (e->flags & ACT_FILEWORK) {
		/* run in a worker (fsact.c), answered later; the worker's own
		 * reading of the arguments names what was not read */
		if (!defer_hook) {
			act_error(&a, TD_ERR_BUSY, "file actions are not running");
			goto answer;
		}
		if (defer_hook(&a, e) < 0)
			goto answer;
		goto done;
	} else {
		/* its answers (now, or a pending action's later) name the
		 * arguments it did not read */
		struct act *outer = dispatching;
		dispatching = &a;
		if (e->fn(&a) != 0 || a.failed)
			act_answer_error(&a);
		pending_settle(&a);
		dispatching = outer;
		goto done;
	}
answer:
	if (!a.stat)   /* not even an action: bad JSON, no name */
		a.stat = 1 + actstats_index(NULL);
	act_answer_error(&a);
done:
	free(a.read);
	if (a.stat && (a.failed || !a.pended))   /* else counted when it answers */
		actstats_record(a.stat - 1, a.failed ? (int)a.code : -1, mono_us() - t0);
	buf_free(&a.msg);
	cJSON_Delete(a.err_extras);
	cJSON_Delete(root);
}
