/* sandbox.c — the agent-sandbox door's entry (sandbox_register): the
 * in-pod runtime API of kubernetes-sigs/agent-sandbox's python runtime on
 * an `api=agent-sandbox` listener (PROTOCOL.md section 12): its routes,
 * GET / (the probe), FastAPI's 404/422 answers, the user requests act as
 * (--user, else termd's own), and the socketless connection its calls to
 * the action layer go through. That API has no credential: main.c
 * refuses such a listener on a non-loopback address without
 * --insecure-no-token. */
#include "sandbox.h"

#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static struct {
	struct action_caller call;   /* socketless: answers come to sink */
	int registered;
} sb;

cJSON *sb_action(const char *action, cJSON *args)
{
	return action_call_now(&sb.call, action, args);
}

int sb_is_error(const cJSON *ans)
{
	const cJSON *ok = cJSON_GetObjectItemCaseSensitive(ans, "ok");
	return !ans || cJSON_IsFalse(ok) || cJSON_GetObjectItemCaseSensitive(ans, "error");
}

int sb_user(struct http_txn *t, struct sb_user *u)
{
	memset(u, 0, sizeof *u);
	errno = 0;
	struct passwd *pw = opts.envd_user ? getpwnam(opts.envd_user) : getpwuid(geteuid());
	if (!pw) {
		int e = errno;
		char m[160];
		/* a lookup that could not be made (no fd left for /etc/passwd,
		 * no memory) is not an unknown user: said as what it is, 503 (a
		 * retry may work; issue 52's soak: fds exhausted for a moment) */
		if (e == EMFILE || e == ENFILE || e == ENOMEM || e == EIO || e == EAGAIN || e == EINTR) {
			snprintf(m, sizeof m, "cannot look up the user: %s", strerror(e));
			sb_answer_msg(t, 503, m);
			return -1;
		}
		if (opts.envd_user)
			snprintf(m, sizeof m, "user '%.64s' (--user) is unknown", opts.envd_user);
		else
			snprintf(m, sizeof m, "no user with termd's uid %u", (unsigned)geteuid());
		sb_answer_msg(t, 500, m);
		return -1;
	}
	u->self = pw->pw_uid == geteuid();
	fs_cred_user(&u->cred, pw);
	snprintf(u->name, sizeof u->name, "%s", pw->pw_name);
	snprintf(u->home, sizeof u->home, "%s", pw->pw_dir ? pw->pw_dir : "/");
	return 0;
}

void sb_answer(struct http_txn *t, int status, cJSON *msg)
{
	char *s = cJSON_PrintUnformatted(msg);
	http_answer(t, status, "application/json", s, strlen(s));
	free(s);
	cJSON_Delete(msg);
}

void sb_answer_msg(struct http_txn *t, int status, const char *msg)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "message", msg);
	sb_answer(t, status, o);
}

void sb_answer_422(struct http_txn *t, const char *type, const char *field, const char *msg,
		   const cJSON *input)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *d = cJSON_AddArrayToObject(o, "detail");
	cJSON *e = cJSON_CreateObject();
	cJSON_AddStringToObject(e, "type", type);
	cJSON *loc = cJSON_AddArrayToObject(e, "loc");
	cJSON_AddItemToArray(loc, cJSON_CreateString("body"));
	cJSON_AddItemToArray(loc, cJSON_CreateString(field));
	cJSON_AddStringToObject(e, "msg", msg);
	cJSON_AddItemToObject(e, "input", input ? cJSON_Duplicate(input, 1) : cJSON_CreateNull());
	cJSON_AddItemToArray(d, e);
	sb_answer(t, 422, o);
}

/* GET /: the readiness and liveness probe */
static void sb_root(struct http_txn *t)
{
	static const char ok[] = "{\"status\":\"ok\",\"message\":\"Sandbox Runtime is active.\"}";
	http_answer(t, 200, "application/json", ok, sizeof ok - 1);
}

/* anything else: FastAPI's 404 */
static void sb_not_found(struct http_txn *t)
{
	static const char nf[] = "{\"detail\":\"Not Found\"}";
	http_answer(t, 404, "application/json", nf, sizeof nf - 1);
}

void sandbox_register(void)
{
	static const struct http_route routes[] = {
		{"GET", "/", NULL, sb_root, 0, TD_API_AGENT_SANDBOX},
		{"POST", "/execute", NULL, sb_execute, 0, TD_API_AGENT_SANDBOX},     /* exec.c */
		{"POST", "/upload", NULL, sb_upload, 0, TD_API_AGENT_SANDBOX},       /* files.c */
		{"GET", "/download/", NULL, sb_download, 1, TD_API_AGENT_SANDBOX},   /* files.c */
		{"GET", "/list/", NULL, sb_list, 1, TD_API_AGENT_SANDBOX},           /* files.c */
		{"GET", "/exists/", NULL, sb_exists, 1, TD_API_AGENT_SANDBOX},       /* files.c */
		{"*", "/", NULL, sb_not_found, 1, TD_API_AGENT_SANDBOX},
	};
	http_routes_register(routes, sizeof routes / sizeof routes[0]);
	sb.call.conn.sink = action_caller_sink;
	sb.call.prefix = "sandbox";
	sb_exec_register();
	sb.registered = 1;
}

void sandbox_shutdown(void)
{
	if (!sb.registered)
		return;
	sb_exec_shutdown();
	cJSON_Delete(sb.call.answer);
	sb.call.answer = NULL;
}
