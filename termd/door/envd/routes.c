/* routes.c — the envd door's entry (PROTOCOL.md §10): its routes on
 * termd's listener (the Connect POSTs /process.Process/<method> and
 * /filesystem.Filesystem/<method>, checked as Connect wants them: method,
 * Content-Type, Connect-Protocol-Version, keepalive, Connect-Timeout-Ms,
 * then handed to process.c or fs.c; GET /health, /envs; /files onto
 * fs.c), X-Access-Token against termd's full token, /healthz's
 * user_root_capable, and the door's register and shutdown. */
#include "envd.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

extern char **environ;

#define PROCESS_PREFIX "/process.Process/"
#define FS_PREFIX "/filesystem.Filesystem/"

static int registered;

/* ================================================================ calls */

/* Is this request allowed: termd's full token in X-Access-Token. With no
 * full token, only a request http.c found full (no token at all, or
 * --insecure-no-token): never one next to a view token alone. 0, or it
 * answered 401. */
static int admit_token(struct http_txn *t)
{
	if (!opts.token) {
		if (t->auth == AUTH_FULL)
			return 0;
		envd_answer_json(t, 401, envd_error_json(EC_UNAUTHENTICATED, "termd has no full token: a view token cannot act"));
		return 1;
	}
	char key[640];
	if (http_header(t, "x-access-token:", key, sizeof key) > 0 && http_token_ok(key))
		return 0;
	envd_answer_json(t, 401, envd_error_json(EC_UNAUTHENTICATED, "X-Access-Token is missing or wrong"));
	return 1;
}

static int ctype_is(const char *ct, const char *want)
{
	size_t n = strlen(want);
	return strncasecmp(ct, want, n) == 0 && (ct[n] == 0 || ct[n] == ';' || ct[n] == ' ');
}

/* The methods termd serves: 1 a server stream, 0 unary, -1 none such */
static int method_kind(const char *service, const char *method)
{
	static const struct {
		const char *service, *method;
		int stream;
	} methods[] = {
		{"process", "Start", 1}, {"process", "Connect", 1}, {"process", "List", 0},
		{"process", "SendInput", 0}, {"process", "SendSignal", 0}, {"process", "Update", 0},
		{"process", "CloseStdin", 0},
		{"filesystem", "Stat", 0}, {"filesystem", "MakeDir", 0}, {"filesystem", "Move", 0},
		{"filesystem", "ListDir", 0}, {"filesystem", "Remove", 0},
		{"filesystem", "WatchDir", 1}, {"filesystem", "CreateWatcher", 0},
		{"filesystem", "GetWatcherEvents", 0}, {"filesystem", "RemoveWatcher", 0},
	};
	for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
		if (strcmp(methods[i].service, service) == 0 && strcmp(methods[i].method, method) == 0)
			return methods[i].stream;
	return -1;
}

static void rpc(struct http_txn *t)
{
	int is_process = strncmp(t->path, PROCESS_PREFIX, strlen(PROCESS_PREFIX)) == 0;
	const char *method = t->path + strlen(is_process ? PROCESS_PREFIX : FS_PREFIX);
	const char *service = is_process ? "process" : "filesystem";
	struct envd_call c = {.t = t};
	char ct[128] = "", hv[64];
	lws_hdr_copy(t->wsi, ct, sizeof ct, WSI_TOKEN_HTTP_CONTENT_TYPE);
	int want_stream = method_kind(service, method);
	if (want_stream < 0) {
		/* (StreamInput, WatchDir and the polled watchers among them) */
		envd_answer_json(t, 404, envd_error_json(EC_UNIMPLEMENTED, "no such method here"));
		return;
	}
	if (ctype_is(ct, "application/connect+json")) {
		if (!want_stream) {   /* a unary method asked for as a stream */
			envd_answer_json(t, 415, envd_error_json(EC_UNKNOWN, "this method is unary: "
						      "Content-Type application/json"));
			return;
		}
		c.stream = 1;
	} else if (ctype_is(ct, "application/json")) {
		if (want_stream) {
			envd_answer_json(t, 415, envd_error_json(EC_UNKNOWN, "this method streams: "
						      "Content-Type application/connect+json"));
			return;
		}
	} else {
		/* the proto codec, or nothing Connect knows: 415 says which it takes */
		http_set_header(t, "Accept-Post", "application/json, application/connect+json");
		envd_answer_json(t, 415, envd_error_json(EC_UNKNOWN, "termd speaks Connect with the JSON codec "
					      "only (application/json, application/connect+json)"));
		return;
	}
	if (http_header(t, "connect-protocol-version:", hv, sizeof hv) > 0 && strcmp(hv, "1") != 0) {
		envd_fail(&c, EC_INVALID_ARGUMENT, "Connect-Protocol-Version must be 1");
		return;
	}
	if (http_header(t, "keepalive-ping-interval:", hv, sizeof hv) > 0) {
		long v = strtol(hv, NULL, 10);
		c.keepalive_s = v > 0 && v <= 3600 ? (unsigned)v : 0;
	}
	if (http_header(t, "connect-timeout-ms:", hv, sizeof hv) > 0) {
		char *end;
		unsigned long long v = strtoull(hv, &end, 10);
		if (*end || !hv[0] || strlen(hv) > 10) {
			envd_fail(&c, EC_INVALID_ARGUMENT, "Connect-Timeout-Ms is 1 to 10 digits");
			return;
		}
		c.timeout_ms = v ? v : 1;
	}
	char why[256];
	if (c.stream && http_stream_admit(t, why, sizeof why) < 0) {
		/* (the error's own stream ends at once: let through) */
		t->stream_admitted = 1;
		envd_fail(&c, EC_RESOURCE_EXHAUSTED, "%s", why);
		return;
	}
	int uc = envd_user_begin(t, 0, why, sizeof why);
	if (uc) {
		envd_fail(&c, (enum envd_code)uc, "%s", why);
		return;
	}
	const char *body = t->body.p ? t->body.p : "";
	size_t len = t->body.len;
	if (c.stream) {
		/* one envelope: flags, 4-byte big-endian length, the message */
		char ewhy[128];
		const char *m;
		size_t n;
		int ec = connect_unwrap(body, len, opts.max_frame, &m, &n, ewhy, sizeof ewhy);
		if (ec) {
			envd_fail(&c, ec == CONNECT_COMPRESSED ? EC_INTERNAL :
				  ec == CONNECT_TOO_LARGE ? EC_RESOURCE_EXHAUSTED : EC_INVALID_ARGUMENT,
				  "%s", ewhy);
			return;
		}
		body = m;
		len = n;
	}
	c.req = cJSON_ParseWithLength(len ? body : "{}", len ? len : 2);
	if (!cJSON_IsObject(c.req)) {
		cJSON_Delete(c.req);
		envd_fail(&c, EC_INVALID_ARGUMENT, "the request message is not a JSON object");
		return;
	}
	if (is_process)
		envd_process_call(&c, method);
	else
		envd_fs_call(&c, method);
	cJSON_Delete(c.req);
}

static void health(struct http_txn *t)
{
	http_answer(t, 204, "text/plain", "", 0);
}

static void envs(struct http_txn *t)
{
	cJSON *o = cJSON_CreateObject();
	for (char **e = environ; e && *e; e++) {
		const char *eq = strchr(*e, '=');
		if (!eq || eq == *e || strncmp(*e, "TERMD_TOKEN=", 12) == 0)
			continue;
		char *k = xstrndup(*e, (size_t)(eq - *e));
		if (!cJSON_GetObjectItemCaseSensitive(o, k))
			cJSON_AddStringToObject(o, k, eq + 1);
		free(k);
	}
	envd_answer_json(t, 200, o);
}

static void files(struct http_txn *t)
{
	char why[256];
	int uc = envd_user_begin(t, 1, why, sizeof why);
	if (uc) {
		char *s = NULL;
		cJSON *o = cJSON_CreateObject();
		int status = uc == EC_PERMISSION_DENIED ? 403 : 400;
		cJSON_AddStringToObject(o, "message", why);
		cJSON_AddNumberToObject(o, "code", status);
		s = envd_json_print(o);
		http_answer(t, status, "application/json", s, strlen(s));
		free(s);
		cJSON_Delete(o);
		return;
	}
	if (t->post)
		envd_files_post(t);
	else
		envd_files_get(t);
}

/* /healthz: "user_root_capable", for the user requests without one act as
 * (--user, else termd's own) */
static void envd_health(buf_t *b)
{
	struct passwd *pw = opts.envd_user ? getpwnam(opts.envd_user) : getpwuid(geteuid());
	int yes = pw && fs_user_root_capable_peek(pw->pw_name, pw->pw_uid);
	buf_printf(b, ",\"user_root_capable\":%s", yes ? "true" : "false");
}

void envd_register(void)
{
	static const struct http_route routes[] = {
		{"POST", PROCESS_PREFIX, admit_token, rpc, 1, TD_API_E2B},
		{"POST", FS_PREFIX, admit_token, rpc, 1, TD_API_E2B},
		{"GET", "/health", NULL, health, 0, TD_API_E2B},
		{"GET", "/envs", admit_token, envs, 0, TD_API_E2B},
		{"*", "/files", admit_token, files, 0, TD_API_E2B},
	};
	http_routes_register(routes, sizeof routes / sizeof routes[0]);
	http_health_extend(envd_health);
	envd_calls_start();
	envd_process_register();
	registered = 1;
}

void envd_shutdown(void)
{
	if (!registered)
		return;
	envd_process_shutdown();
	envd_watch_shutdown();
	envd_calls_end();
}
