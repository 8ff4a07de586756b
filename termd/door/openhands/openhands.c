/* openhands.c — OpenHands' action execution server API on termd's listener
 * (PROTOCOL.md §8): its own routes' handlers (/alive, /server_info,
 * /execute_action, /vscode/connection_token; register.c's table names them
 * with the file transfer ones of transfer.c), the X-Session-API-Key
 * check, the request queue (one action at a time, in arrival order), and
 * the socketless connection through which each step is dispatched onto
 * termd's action layer like /events (conn.sink brings the answers back
 * here, and subscribers see them like any other). The mappings of
 * OpenHands' actions are run.c, files.c and plugins.c, reached through the
 * table register.c gives oh_init: this file calls none of them by name. */
#include "openhands.h"


#include <math.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

static void oh_start(struct ohreq *r);
/* the action types and their files' entry points (register.c's, given to oh_init) */
static const struct oh_action *oh_actions;
static size_t oh_nactions;

struct ohstate oh;

const char TIMEOUT_TEMPLATE[] =
	"You may wait longer to see additional output by sending empty command '', "
	"send other commands to interact with the current process, "
	"send keys (\"C-c\", \"C-z\", \"C-d\") to interrupt/kill the previous command before "
	"sending your new command, or use the timeout parameter in execute_bash for future commands.";

const char CONTINUE_PREFIX[] = "[Below is the output of the previous command.]\n";

const char NO_JUPYTER[] = "JupyterRequirement not found. Unable to run IPython action.";

const char NO_BROWSER[] = "Browser functionality is not supported or disabled.";

/* ============================================================ helpers */

const cJSON *oh_arg(struct ohreq *r, const char *key)
{
	const cJSON *v = r->args ? cJSON_GetObjectItemCaseSensitive(r->args, key) : NULL;
	return v && !cJSON_IsNull(v) ? v : NULL;
}

const char *oh_arg_str(struct ohreq *r, const char *key)
{
	const cJSON *v = oh_arg(r, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

int oh_arg_true(struct ohreq *r, const char *key, int def)
{
	const cJSON *v = oh_arg(r, key);
	if (!v)
		return def;
	if (cJSON_IsBool(v))
		return cJSON_IsTrue(v);
	if (cJSON_IsNumber(v))
		return v->valuedouble != 0;
	return def;
}

const char *oh_jstr(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

double oh_jnum(const cJSON *o, const char *key, double def)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsNumber(v) ? v->valuedouble : def;
}

int oh_jtrue(const cJSON *o, const char *key)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

/* Python's str.isspace for the ASCII range */
int oh_py_space(unsigned char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

char *oh_py_strip(const char *s)
{
	size_t n = strlen(s);
	while (n && oh_py_space((unsigned char)s[n - 1]))
		n--;
	size_t i = 0;
	while (i < n && oh_py_space((unsigned char)s[i]))
		i++;
	char *o = xmalloc(n - i + 1);
	memcpy(o, s + i, n - i);
	o[n - i] = 0;
	return o;
}

const char *oh_main_cwd(void)
{
	struct session *s = session_find("main");
	return s && s->cwd && s->cwd[0] ? s->cwd : opts.cwd;
}

/* Path(working_dir) / path, as OpenHands' _resolve_path */
char *oh_resolve(const char *path)
{
	if (path[0] == '/')
		return xstrdup(path);
	buf_t b = {0};
	const char *cwd = oh_main_cwd();
	buf_puts(&b, cwd);
	if (!b.len || b.p[b.len - 1] != '/')
		buf_putc(&b, '/');
	buf_puts(&b, path);
	return buf_steal(&b);
}

/* ========================================================= the answer */

cJSON *oh_obs_new(const char *message, const char *observation, const char *content)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "message", message);
	cJSON_AddStringToObject(o, "observation", observation);
	cJSON_AddStringToObject(o, "content", content);
	return o;
}

static void req_free(struct ohreq *r)
{
	cJSON_Delete(r->body);
	cJSON_Delete(r->result);
	free(r->cmd);
	free(r->path);
	free(r->old);
	free(r);
}

static void kick_next(lws_sorted_usec_list_t *sul)
{
	(void)sul;
	if (oh.head)
		oh_start(oh.head);
}

/* The answer of the request at the head; the next one starts. */
void oh_done(struct ohreq *r, cJSON *obs)
{
	if (r->t) {
		char *s = cJSON_PrintUnformatted(obs);
		r->t->gone = NULL;
		http_answer(r->t, 200, "application/json", s, strlen(s));
		free(s);
	}
	cJSON_Delete(obs);
	oh.head = r->next;
	if (!oh.head)
		oh.tail = NULL;
	req_free(r);
	if (oh.head)   /* from the loop, not from inside this answer */
		server_timer(&oh.kick, kick_next, 1);
}

void oh_done_error(struct ohreq *r, const char *msg)
{
	cJSON *o = oh_obs_new(msg, "error", msg);
	cJSON *ex = cJSON_AddObjectToObject(o, "extras");
	cJSON_AddStringToObject(ex, "error_id", "");
	oh_done(r, o);
}

/* ============================================ termd actions, one a step */

static void deliver(struct ohreq *r, cJSON *ans)
{
	oh_cont c = r->cont;
	r->cont = NULL;
	if (c)
		c(r, ans);
	cJSON_Delete(ans);
}

static void oh_sink(struct conn *c, const char *data, size_t len)
{
	(void)c;
	cJSON *ans = cJSON_ParseWithLength(data, len);
	struct ohreq *r = oh.head;
	const char *cause = ans ? oh_jstr(ans, "cause") : NULL;
	if (!ans || !r || !r->cont || !cause || strcmp(cause, r->id) != 0) {
		cJSON_Delete(ans);
		return;
	}
	if (oh.in_dispatch) {
		cJSON_Delete(oh.early);
		oh.early = ans;
		return;
	}
	deliver(r, ans);
}

/* Dispatch termd action `action` with args (taken over); its answer goes
 * to cont. */
void oh_call(struct ohreq *r, const char *action, cJSON *args, oh_cont cont)
{
	/* unguessable: the stream shows every id to every subscriber, and a
	 * guessed next id must not be one anybody could take first */
	action_call_random_id(r->id, sizeof r->id, "openhands", ++oh.nid);
	r->cont = cont;
	oh.in_dispatch++;
	action_call(&oh.conn, r->id, action, args);
	oh.in_dispatch--;
	if (!oh.in_dispatch && oh.early) {
		cJSON *a = oh.early;
		oh.early = NULL;
		deliver(r, a);
	}
}

const char *oh_ans_code(const cJSON *ans)
{
	const cJSON *ex = cJSON_GetObjectItemCaseSensitive(ans, "extras");
	return oh_jstr(ex, "code");
}

int oh_is_error(const cJSON *ans)
{
	const char *o = oh_jstr(ans, "observation");
	return !o || strcmp(o, "error") == 0;
}

const char *oh_ans_content(const cJSON *ans)
{
	const char *c = oh_jstr(ans, "content");
	return c ? c : "";
}

void oh_done_errorf(struct ohreq *r, const char *fmt, ...)
{
	buf_t b = {0};
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(&b, fmt, ap);
	va_end(ap);
	oh_done_error(r, b.p);
	buf_free(&b);
}

/* ====================================================== execute_action */

static void oh_start(struct ohreq *r)
{
	oh.last_exec_us = mono_us();
	if (r->args && !cJSON_IsObject(r->args)) {
		oh_done_error(r, "'args' of an action must be an object");
		return;
	}
	for (size_t i = 0; i < oh_nactions; i++) {
		if (strcmp(oh_actions[i].type, r->type) == 0) {
			oh_actions[i].fn(r);
			return;
		}
	}
	oh_done_errorf(r, "Invalid action type: '%s' is not an action this runtime executes "
		    "(it runs run, read, write, edit, run_ipython, browse, browse_interactive).",
		    r->type);
}

static void req_gone(struct http_txn *t)
{
	for (struct ohreq **pp = &oh.head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next) {
		struct ohreq *r = *pp;
		if (r->t != t)
			continue;
		r->t = NULL;
		if (r != oh.head) {   /* not started: forget it */
			*pp = r->next;
			if (oh.tail == r)
				oh.tail = prev;
			req_free(r);
		}
		return;
	}
}

void oh_answer_json(struct http_txn *t, int status, const char *json)
{
	http_answer(t, status, "application/json", json, strlen(json));
}

void oh_answer_detail(struct http_txn *t, int status, const char *detail)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "detail", detail);
	char *s = cJSON_PrintUnformatted(o);
	oh_answer_json(t, status, s);
	free(s);
	cJSON_Delete(o);
}

void oh_answer_422(struct http_txn *t, const char *errors)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "detail", "Invalid request parameters");
	cJSON_AddStringToObject(o, "errors", errors);
	char *s = cJSON_PrintUnformatted(o);
	oh_answer_json(t, 422, s);
	free(s);
	cJSON_Delete(o);
}

void oh_execute_action(struct http_txn *t)
{
	cJSON *body = cJSON_ParseWithLength(t->body.p ? t->body.p : "", t->body.len);
	if (!body || !cJSON_IsObject(body)) {
		oh_answer_422(t, "[{'type': 'json_invalid', 'loc': ('body', 0), 'msg': 'JSON decode error'}]");
		cJSON_Delete(body);
		return;
	}
	const cJSON *action = cJSON_GetObjectItemCaseSensitive(body, "action");
	if (!action) {
		oh_answer_422(t, "[{'type': 'missing', 'loc': ('body', 'action'), 'msg': 'Field required'}]");
		cJSON_Delete(body);
		return;
	}
	if (!cJSON_IsObject(action)) {
		oh_answer_422(t, "[{'type': 'dict_type', 'loc': ('body', 'action'), "
			   "'msg': 'Input should be a valid dictionary'}]");
		cJSON_Delete(body);
		return;
	}
	struct ohreq *r = xcalloc(1, sizeof *r);
	r->t = t;
	r->body = body;
	const char *type = oh_jstr(action, "action");
	r->type = type ? type : "";
	r->args = cJSON_GetObjectItemCaseSensitive(action, "args");
	if (r->args && cJSON_IsNull(r->args))
		r->args = NULL;
	const cJSON *to = cJSON_GetObjectItemCaseSensitive(action, "timeout");
	if (cJSON_IsNumber(to) && isfinite(to->valuedouble) && to->valuedouble > 0) {
		r->timeout = to->valuedouble;
		r->has_timeout = 1;
	}
	t->user = r;
	t->gone = req_gone;
	if (!type) {
		r->type = "";
		/* queued like any other so answers keep their order */
	}
	if (oh.tail)
		oh.tail->next = r;
	else
		oh.head = r;
	oh.tail = r;
	if (oh.head == r)
		oh_start(r);
}

/* ============================================================ the rest */

int oh_admit_key(struct http_txn *t)
{
	if (!opts.token) {
		/* no key to check: only a request http.c found full acts (no
		 * token at all, or --insecure-no-token); a view token's, or one
		 * with none next to a view token, never does */
		if (t->auth == AUTH_FULL)
			return 0;
		oh_answer_detail(t, 403, "Invalid API Key");
		return 1;
	}
	char key[640];
	if (http_header(t, "x-session-api-key:", key, sizeof key) > 0 && http_token_ok(key))
		return 0;
	/* termd's own ways of giving the token work too */
	char hdr[640];
	if (lws_hdr_copy(t->wsi, hdr, sizeof hdr, WSI_TOKEN_HTTP_AUTHORIZATION) > 0 &&
	    strncasecmp(hdr, "Bearer ", 7) == 0 && http_token_ok(hdr + 7))
		return 0;
	oh_answer_detail(t, 403, "Invalid API Key");
	return 1;
}

void oh_alive(struct http_txn *t)
{
	oh_answer_json(t, 200, "{\"status\":\"ok\"}");
}

void oh_vscode_token(struct http_txn *t)
{
	oh_answer_json(t, 200, "{\"token\":null}");
}

static unsigned long long proc_field_ull(const char *file, const char *key)
{
	FILE *f = fopen(file, "r");
	if (!f)
		return 0;
	char line[256];
	unsigned long long v = 0;
	size_t kl = strlen(key);
	while (fgets(line, sizeof line, f))
		if (strncmp(line, key, kl) == 0) {
			v = strtoull(line + kl, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

cJSON *oh_server_info_json(void)
{
	uint64_t now = mono_us();
	unsigned long long utime = 0, stime = 0, vsize = 0;
	long long rss_pages = 0;
	FILE *f = fopen("/proc/self/stat", "r");
	if (f) {
		char buf[1024];
		size_t n = fread(buf, 1, sizeof buf - 1, f);
		buf[n] = 0;
		fclose(f);
		char *p = strrchr(buf, ')');
		if (p)   /* fields 14, 15 (utime, stime), 23 (vsize), 24 (rss) */
			sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d "
			       "%*d %*d %*d %*u %llu %lld", &utime, &stime, &vsize, &rss_pages);
	}
	long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
	unsigned long long ticks = utime + stime;
	double cpu = 0;
	if (oh.cpu_last_us && now > oh.cpu_last_us && tck > 0)
		cpu = (double)(ticks - oh.cpu_last_ticks) / (double)tck /
		      ((double)(now - oh.cpu_last_us) / 1e6) * 100.0;
	oh.cpu_last_us = now;
	oh.cpu_last_ticks = ticks;
	double rss = (double)rss_pages * (double)page;
	double total = (double)proc_field_ull("/proc/meminfo", "MemTotal:") * 1024.0;
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "uptime", (double)(now - oh.start_us) / 1e6);
	cJSON_AddNumberToObject(o, "idle_time", (double)(now - oh.last_exec_us) / 1e6);
	cJSON *res = cJSON_AddObjectToObject(o, "resources");
	cJSON_AddNumberToObject(res, "cpu_percent", cpu);
	cJSON *mem = cJSON_AddObjectToObject(res, "memory");
	cJSON_AddNumberToObject(mem, "rss", rss);
	cJSON_AddNumberToObject(mem, "vms", (double)vsize);
	cJSON_AddNumberToObject(mem, "percent", total > 0 ? rss / total * 100.0 : 0);
	cJSON *disk = cJSON_AddObjectToObject(res, "disk");
	struct statvfs vf;
	double dt = 0, dfree = 0, dused = 0;
	if (statvfs("/", &vf) == 0) {
		dt = (double)vf.f_blocks * (double)vf.f_frsize;
		dfree = (double)vf.f_bavail * (double)vf.f_frsize;
		dused = dt - (double)vf.f_bfree * (double)vf.f_frsize;
	}
	cJSON_AddNumberToObject(disk, "total", dt);
	cJSON_AddNumberToObject(disk, "used", dused);
	cJSON_AddNumberToObject(disk, "free", dfree);
	cJSON_AddNumberToObject(disk, "percent",
				dused + dfree > 0 ? round(dused / (dused + dfree) * 1000.0) / 10.0 : 0);
	cJSON *io = cJSON_AddObjectToObject(res, "io");
	cJSON_AddNumberToObject(io, "read_bytes", (double)proc_field_ull("/proc/self/io", "read_bytes: "));
	cJSON_AddNumberToObject(io, "write_bytes",
				(double)proc_field_ull("/proc/self/io", "write_bytes: "));
	return o;
}

void oh_server_info(struct http_txn *t)
{
	cJSON *o = oh_server_info_json();
	char *s = cJSON_PrintUnformatted(o);
	oh_answer_json(t, 200, s);
	free(s);
	cJSON_Delete(o);
}

void oh_init(const struct oh_action *acts, size_t n)
{
	oh_actions = acts;
	oh_nactions = n;
	oh.conn.sink = oh_sink;
	oh.start_us = oh.last_exec_us = mono_us();
	const char *nc = getenv("NO_CHANGE_TIMEOUT_SECONDS");
	oh.no_change_s = nc && atoi(nc) > 0 ? atoi(nc) : 10;
	struct passwd *pw = getpwuid(geteuid());
	snprintf(oh.username, sizeof oh.username, "%s", pw ? pw->pw_name : "");
	if (gethostname(oh.hostname, sizeof oh.hostname) < 0)
		oh.hostname[0] = 0;
	oh.hostname[sizeof oh.hostname - 1] = 0;
	char *dot = strchr(oh.hostname, '.');   /* bash's \h */
	if (dot)
		*dot = 0;
	oh.registered = 1;
}

void openhands_shutdown(void)
{
	lws_sul_cancel(&oh.kick);
	while (oh.head) {
		struct ohreq *r = oh.head;
		oh.head = r->next;
		req_free(r);
	}
	oh.tail = NULL;
	cJSON_Delete(oh.early);
	oh.early = NULL;
}
