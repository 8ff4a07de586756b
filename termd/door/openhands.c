/* openhands.c — OpenHands' action execution server API on termd's listener
 * (PROTOCOL.md §8): its routes (/alive, /server_info, /execute_action,
 * /list_files, /upload_file, /download_files, /vscode/connection_token),
 * the X-Session-API-Key check, and the mapping of OpenHands' actions onto
 * termd's own (run, read, write, edit, run_ipython, browse) through the
 * same action layer as /events: each step is an action frame dispatched on
 * a connection without a socket whose answers come back here (conn.sink),
 * so subscribers see them like any other. One action at a time, in
 * arrival order; answers in OpenHands' exact shapes and texts. */
#include "door.h"

#include "fsio.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define OH_MAX_OUTPUT     64000    /* termd's head and tail each keep > 15,000 characters */
#define OH_HIDDEN_OUTPUT  (16 * 1024 * 1024)
#define OH_TRUNC_LIMIT    30000    /* OpenHands' MAX_CMD_OUTPUT_SIZE */
#define OH_POLL_S         0.05     /* "is NOT executed": collect what the running command printed */
#define OH_DOWNLOAD_MAX   (512u * 1024u * 1024u)

static const char TIMEOUT_TEMPLATE[] =
	"You may wait longer to see additional output by sending empty command '', "
	"send other commands to interact with the current process, "
	"send keys (\"C-c\", \"C-z\", \"C-d\") to interrupt/kill the previous command before "
	"sending your new command, or use the timeout parameter in execute_bash for future commands.";
static const char CONTINUE_PREFIX[] = "[Below is the output of the previous command.]\n";
static const char NO_JUPYTER[] = "JupyterRequirement not found. Unable to run IPython action.";
static const char NO_BROWSER[] = "Browser functionality is not supported or disabled.";

struct ohreq;
typedef void (*oh_cont)(struct ohreq *r, cJSON *ans);

/* One POST /execute_action, from arrival to its answer. */
struct ohreq {
	struct ohreq *next;
	struct http_txn *t;       /* NULL once the client left */
	cJSON *body;
	const char *type;         /* action.action */
	const cJSON *args;        /* action.args, or NULL */
	double timeout;
	int has_timeout;
	char id[48];              /* the termd action in flight */
	oh_cont cont;             /* what its answer goes to */
	/* run */
	char *cmd;                /* command, stripped */
	int is_input, blocking, hidden, is_static, special, polled;
	char sname[TD_SESSION_NAME_MAX + 1];
	cJSON *result;            /* a static run's answer, kept while its session closes */
	/* read, write, edit */
	char *path;               /* resolved */
	char *old;                /* content before */
	int exists;
};

static struct {
	struct conn conn;         /* answers come back through its sink */
	struct ohreq *head, *tail;
	unsigned long long nid;
	unsigned nstatic;
	int in_dispatch;
	cJSON *early;             /* an answer given during dispatch */
	int running_seen;         /* main's command was last answered unfinished */
	int no_change_s;          /* NO_CHANGE_TIMEOUT_SECONDS */
	char username[256], hostname[256];
	uint64_t start_us, last_exec_us;
	uint64_t cpu_last_us, cpu_last_ticks;
	lws_sorted_usec_list_t kick;
	int registered;
} oh;

/* ============================================================ helpers */

static const cJSON *arg(struct ohreq *r, const char *key)
{
	const cJSON *v = r->args ? cJSON_GetObjectItemCaseSensitive(r->args, key) : NULL;
	return v && !cJSON_IsNull(v) ? v : NULL;
}

static const char *arg_str(struct ohreq *r, const char *key)
{
	const cJSON *v = arg(r, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int arg_true(struct ohreq *r, const char *key, int def)
{
	const cJSON *v = arg(r, key);
	if (!v)
		return def;
	if (cJSON_IsBool(v))
		return cJSON_IsTrue(v);
	if (cJSON_IsNumber(v))
		return v->valuedouble != 0;
	return def;
}

static const char *jstr(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double jnum(const cJSON *o, const char *key, double def)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static int jtrue(const cJSON *o, const char *key)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

/* Python's str.isspace for the ASCII range */
static int py_space(unsigned char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

static char *py_strip(const char *s)
{
	size_t n = strlen(s);
	while (n && py_space((unsigned char)s[n - 1]))
		n--;
	size_t i = 0;
	while (i < n && py_space((unsigned char)s[i]))
		i++;
	char *o = xmalloc(n - i + 1);
	memcpy(o, s + i, n - i);
	o[n - i] = 0;
	return o;
}

/* repr(float(x)), as OpenHands prints a timeout */
static void py_float(double x, char *out, size_t n)
{
	if (x == floor(x) && fabs(x) < 1e16) {
		snprintf(out, n, "%.1f", x);
		return;
	}
	for (int p = 1; p <= 17; p++) {
		snprintf(out, n, "%.*g", p, x);
		if (strtod(out, NULL) == x)
			break;
	}
	char *e = strchr(out, 'e');
	if (e && e[1] != '-' && e[1] != '+') {   /* 1e16 → 1e+16 */
		memmove(e + 2, e + 1, strlen(e + 1) + 1);
		e[1] = '+';
	}
}

/* characters (code points) of UTF-8 text */
static size_t u8_chars(const char *s, size_t n)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++)
		c += ((unsigned char)s[i] & 0xC0) != 0x80;
	return c;
}

/* byte offset of character number k */
static size_t u8_offset(const char *s, size_t n, size_t k)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++) {
		if (((unsigned char)s[i] & 0xC0) != 0x80) {
			if (c == k)
				return i;
			c++;
		}
	}
	return n;
}

/* CmdOutputObservation's own truncation: head + marker + tail */
static void oh_truncate(buf_t *b)
{
	size_t chars = u8_chars(b->p, b->len);
	if (chars <= OH_TRUNC_LIMIT)
		return;
	size_t half = OH_TRUNC_LIMIT / 2;
	size_t h = u8_offset(b->p, b->len, half);
	size_t t = u8_offset(b->p, b->len, chars - half);
	buf_t o = {0};
	buf_append(&o, b->p, h);
	buf_puts(&o, "\n[... Observation truncated due to length ...]\n");
	buf_append(&o, b->p + t, b->len - t);
	buf_free(b);
	*b = o;
}

/* _remove_command_prefix(output, command).rstrip() */
static void clean_output(const char *content, const char *command, buf_t *out)
{
	const char *p = content;
	size_t n = strlen(p);
	while (n && py_space((unsigned char)*p)) {
		p++;
		n--;
	}
	const char *c = command;
	while (*c && py_space((unsigned char)*c))
		c++;
	size_t cl = strlen(c);
	if (cl && n >= cl && memcmp(p, c, cl) == 0) {
		p += cl;
		n -= cl;
		while (n && py_space((unsigned char)*p)) {
			p++;
			n--;
		}
	}
	while (n && py_space((unsigned char)p[n - 1]))
		n--;
	buf_reset(out);
	buf_append(out, p, n);
}

static const char *main_cwd(void)
{
	struct session *s = session_find("main");
	return s && s->cwd && s->cwd[0] ? s->cwd : opts.cwd;
}

/* Path(working_dir) / path, as OpenHands' _resolve_path */
static char *oh_resolve(const char *path)
{
	if (path[0] == '/')
		return xstrdup(path);
	buf_t b = {0};
	const char *cwd = main_cwd();
	buf_puts(&b, cwd);
	if (!b.len || b.p[b.len - 1] != '/')
		buf_putc(&b, '/');
	buf_puts(&b, path);
	return buf_steal(&b);
}

/* `which python` on termd's PATH, or "" */
static void which_python(char *out, size_t n)
{
	out[0] = 0;
	const char *path = getenv("PATH");
	if (!path)
		return;
	for (const char *p = path; *p;) {
		const char *e = strchr(p, ':');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		if (l) {
			snprintf(out, n, "%.*s/python", (int)l, p);
			if (access(out, X_OK) == 0)
				return;
		}
		if (!e)
			break;
		p = e + 1;
	}
	out[0] = 0;
}

/* ========================================================= the answer */

static cJSON *obs_new(const char *message, const char *observation, const char *content)
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

static void oh_start(struct ohreq *r);

static void kick_next(lws_sorted_usec_list_t *sul)
{
	(void)sul;
	if (oh.head)
		oh_start(oh.head);
}

/* The answer of the request at the head; the next one starts. */
static void oh_done(struct ohreq *r, cJSON *obs)
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

static void done_error(struct ohreq *r, const char *msg)
{
	cJSON *o = obs_new(msg, "error", msg);
	cJSON *ex = cJSON_AddObjectToObject(o, "extras");
	cJSON_AddStringToObject(ex, "error_id", "");
	oh_done(r, o);
}

static void done_errorf(struct ohreq *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

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
	const char *cause = ans ? jstr(ans, "cause") : NULL;
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
static void oh_call(struct ohreq *r, const char *action, cJSON *args, oh_cont cont)
{
	snprintf(r->id, sizeof r->id, "openhands-%llu", ++oh.nid);
	r->cont = cont;
	cJSON *f = cJSON_CreateObject();
	cJSON_AddStringToObject(f, "id", r->id);
	cJSON_AddStringToObject(f, "action", action);
	cJSON_AddItemToObject(f, "args", args);
	char *s = cJSON_PrintUnformatted(f);
	cJSON_Delete(f);
	oh.in_dispatch++;
	actions_dispatch(&oh.conn, s, strlen(s));
	oh.in_dispatch--;
	free(s);
	if (!oh.in_dispatch && oh.early) {
		cJSON *a = oh.early;
		oh.early = NULL;
		deliver(r, a);
	}
}

static const char *ans_code(const cJSON *ans)
{
	const cJSON *ex = cJSON_GetObjectItemCaseSensitive(ans, "extras");
	return jstr(ex, "code");
}

static int is_error(const cJSON *ans)
{
	const char *o = jstr(ans, "observation");
	return !o || strcmp(o, "error") == 0;
}

static const char *ans_content(const cJSON *ans)
{
	const char *c = jstr(ans, "content");
	return c ? c : "";
}

/* ================================================================ run */

static cJSON *metadata_new(int exit_code)
{
	cJSON *m = cJSON_CreateObject();
	cJSON_AddNumberToObject(m, "exit_code", exit_code);
	cJSON_AddNumberToObject(m, "pid", -1);
	cJSON_AddNullToObject(m, "username");
	cJSON_AddNullToObject(m, "hostname");
	cJSON_AddNullToObject(m, "working_dir");
	cJSON_AddNullToObject(m, "py_interpreter_path");
	return m;
}

static cJSON *run_obs(const char *command, const char *content, cJSON *meta, const char *prefix,
		      const char *suffix, int hidden)
{
	int code = (int)jnum(meta, "exit_code", -1);
	buf_t msg = {0}, c = {0};
	buf_printf(&msg, "Command `%s` executed with exit code %d.", command, code);
	buf_puts(&c, content);
	if (!hidden)
		oh_truncate(&c);
	cJSON *o = obs_new(msg.p, "run", c.p ? c.p : "");
	buf_free(&msg);
	buf_free(&c);
	cJSON_AddStringToObject(meta, "prefix", prefix);
	cJSON_AddStringToObject(meta, "suffix", suffix);
	cJSON *ex = cJSON_AddObjectToObject(o, "extras");
	cJSON_AddStringToObject(ex, "command", command);
	cJSON_AddItemToObject(ex, "metadata", meta);
	cJSON_AddBoolToObject(ex, "hidden", hidden);
	cJSON_AddBoolToObject(o, "success", code == 0);
	return o;
}

static void run_finish(struct ohreq *r, cJSON *obs);

static cJSON *run_args(struct ohreq *r, const char *command, int is_input, int poll)
{
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "command", command);
	cJSON_AddBoolToObject(a, "is_input", is_input);
	if (r->is_static)
		cJSON_AddStringToObject(a, "session", r->sname);
	if (poll) {
		cJSON_AddNumberToObject(a, "timeout", OH_POLL_S);
	} else {
		if (r->has_timeout)
			cJSON_AddNumberToObject(a, "timeout", r->timeout);
		cJSON_AddNumberToObject(a, "idle_timeout", r->blocking ? 0 : oh.no_change_s);
	}
	cJSON_AddNumberToObject(a, "max_output", r->hidden ? OH_HIDDEN_OUTPUT : OH_MAX_OUTPUT);
	return a;
}

/* A termd run observation in OpenHands' words. */
static void run_map(struct ohreq *r, const cJSON *ans, const char *not_executed)
{
	const cJSON *ex = cJSON_GetObjectItemCaseSensitive(ans, "extras");
	int running = jtrue(ex, "running");
	buf_t content = {0};
	clean_output(ans_content(ans), r->cmd, &content);
	int *seen = r->is_static ? NULL : &oh.running_seen;
	cJSON *obs;
	if (!running && !not_executed) {
		int code = (int)jnum(ex, "exit_code", -1);
		cJSON *m = metadata_new(code);
		char py[4096];
		which_python(py, sizeof py);
		cJSON_ReplaceItemInObject(m, "username", cJSON_CreateString(oh.username));
		cJSON_ReplaceItemInObject(m, "hostname", cJSON_CreateString(oh.hostname));
		const char *cwd = jstr(ex, "cwd");
		cJSON_ReplaceItemInObject(m, "working_dir", cJSON_CreateString(cwd ? cwd : ""));
		cJSON_ReplaceItemInObject(m, "py_interpreter_path", cJSON_CreateString(py));
		char suffix[160];
		if (r->special)
			snprintf(suffix, sizeof suffix,
				 "\n[The command completed with exit code %d. CTRL+%c was sent.]", code,
				 (char)toupper((unsigned char)r->cmd[2]));
		else
			snprintf(suffix, sizeof suffix, "\n[The command completed with exit code %d.]", code);
		obs = run_obs(r->cmd, content.p ? content.p : "", m, "", suffix, r->hidden);
		if (seen)
			*seen = 0;
	} else {
		buf_t suffix = {0};
		const char *to = jstr(ex, "timed_out");
		if (not_executed) {
			buf_printf(&suffix, "\n[Your command \"%s\" is NOT executed. The previous command is "
				   "still running - You CANNOT send new commands until the previous command "
				   "is completed. By setting `is_input` to `true`, you can interact with the "
				   "current process: %s]", r->cmd, TIMEOUT_TEMPLATE);
		} else if (to && strcmp(to, "hard") == 0) {
			char t[64];
			py_float(r->timeout, t, sizeof t);
			buf_printf(&suffix, "\n[The command timed out after %s seconds. %s]", t, TIMEOUT_TEMPLATE);
		} else {
			buf_printf(&suffix, "\n[The command has no new output after %d seconds. %s]",
				   oh.no_change_s, TIMEOUT_TEMPLATE);
		}
		const char *prefix = seen && *seen ? CONTINUE_PREFIX : "";
		obs = run_obs(r->cmd, content.p ? content.p : "", metadata_new(-1), prefix, suffix.p,
			      not_executed ? r->hidden : 0);
		buf_free(&suffix);
		if (seen)
			*seen = 1;
	}
	buf_free(&content);
	run_finish(r, obs);
}

/* the answer when termd has nothing running to poll or type into */
static void run_nothing(struct ohreq *r)
{
	const char *msg = r->is_input || r->special ?
			  "ERROR: No previous running command to interact with." :
			  "ERROR: No previous running command to retrieve logs from.";
	run_finish(r, run_obs("", msg, metadata_new(-1), "", "", 0));
}

static void run_answered(struct ohreq *r, cJSON *ans);

static void run_polled(struct ohreq *r, cJSON *ans)
{
	if (is_error(ans)) {   /* another client is waiting on it: nothing to show */
		cJSON *fake = cJSON_CreateObject();
		cJSON_AddStringToObject(fake, "content", "");
		run_map(r, fake, "yes");
		cJSON_Delete(fake);
		return;
	}
	const cJSON *ex = cJSON_GetObjectItemCaseSensitive(ans, "extras");
	if (!jtrue(ex, "running")) {
		/* it ended meanwhile: the new command runs after all */
		oh_call(r, "run", run_args(r, r->cmd, 0, 0), run_answered);
		return;
	}
	run_map(r, ans, "yes");
}

static void run_answered(struct ohreq *r, cJSON *ans)
{
	if (!is_error(ans)) {
		run_map(r, ans, NULL);
		return;
	}
	const char *code = ans_code(ans);
	if (code && strcmp(code, "busy") == 0 && !r->polled) {
		r->polled = 1;
		oh_call(r, "run", run_args(r, "", 0, 1), run_polled);
		return;
	}
	if (code && strcmp(code, "busy") == 0) {
		cJSON *fake = cJSON_CreateObject();
		cJSON_AddStringToObject(fake, "content", "");
		run_map(r, fake, "yes");
		cJSON_Delete(fake);
		return;
	}
	if (code && strcmp(code, "no_command") == 0) {
		run_nothing(r);
		return;
	}
	done_error(r, ans_content(ans));
}

static void static_closed(struct ohreq *r, cJSON *ans)
{
	(void)ans;
	cJSON *o = r->result;
	r->result = NULL;
	oh_done(r, o);
}

static void run_finish(struct ohreq *r, cJSON *obs)
{
	if (!r->is_static) {
		oh_done(r, obs);
		return;
	}
	r->result = obs;
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "name", r->sname);
	oh_call(r, "session.close", a, static_closed);
}

static void static_opened(struct ohreq *r, cJSON *ans)
{
	if (is_error(ans)) {
		done_error(r, ans_content(ans));
		return;
	}
	oh_call(r, "run", run_args(r, r->cmd, 0, 0), run_answered);
}

static void run_start(struct ohreq *r)
{
	const char *command = arg_str(r, "command");
	if (!command) {
		done_error(r, "CmdRunAction needs a string 'command' argument");
		return;
	}
	r->cmd = py_strip(command);
	r->is_input = arg_true(r, "is_input", 0);
	r->blocking = arg_true(r, "blocking", 0);
	r->hidden = arg_true(r, "hidden", 0);
	r->is_static = arg_true(r, "is_static", 0);
	r->special = strlen(r->cmd) == 3 && r->cmd[0] == 'C' && r->cmd[1] == '-';
	if (r->is_static) {
		snprintf(r->sname, sizeof r->sname, "openhands-static-%u", ++oh.nstatic);
		const char *cwd = arg_str(r, "cwd");
		struct stat st;
		if (cwd && *cwd && (stat(cwd, &st) != 0 || !S_ISDIR(st.st_mode))) {
			done_errorf(r, "Cannot run a static command in %s: not a directory", cwd);
			return;
		}
		cJSON *a = cJSON_CreateObject();
		cJSON_AddStringToObject(a, "name", r->sname);
		cJSON_AddStringToObject(a, "cwd", cwd && *cwd ? cwd : opts.cwd);
		oh_call(r, "session.open", a, static_opened);
		return;
	}
	/* a key name is sent as that key, is_input or not (as OpenHands does) */
	int input = r->is_input || r->special;
	oh_call(r, "run", run_args(r, r->cmd, input, 0), run_answered);
}

/* ======================================================== read, write */

/* binaryornot's answer, near enough: a NUL, or not UTF-8, in the first
 * 1024 bytes (a missing file is not binary) */
static int is_binary(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return 0;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return 0;
	}
	unsigned char b[1024];
	ssize_t n = read(fd, b, sizeof b);
	close(fd);
	if (n <= 0)
		return 0;
	if (memchr(b, 0, (size_t)n))
		return 1;
	/* a character cut by the 1024-byte window is not a fault */
	size_t len = (size_t)n;
	size_t back = 0;
	while (back < 3 && back < len && (b[len - 1 - back] & 0xC0) == 0x80)
		back++;
	if (back < len && b[len - 1 - back] >= 0xC0)
		len -= back + 1;
	size_t bad = 0;
	return !utf8_text((const char *)b, len, &bad);
}

/* file.readlines() in text mode (universal newlines): pieces ending in \n */
struct lines {
	char **v;
	size_t n;
};

static void split_lines(const char *s, struct lines *L)
{
	L->v = NULL;
	L->n = 0;
	size_t cap = 0;
	buf_t cur = {0};
	for (const char *p = s;; p++) {
		int end = *p == 0;
		if (!end) {
			char c = *p;
			if (c == '\r') {
				c = '\n';
				if (p[1] == '\n')
					p++;
			}
			buf_putc(&cur, c);
			if (c != '\n')
				continue;
		}
		if (cur.len) {
			if (L->n == cap) {
				cap = cap ? 2 * cap : 16;
				L->v = xrealloc(L->v, cap * sizeof *L->v);
			}
			L->v[L->n++] = buf_steal(&cur);
		}
		if (end)
			break;
	}
	buf_free(&cur);
}

static void lines_free(struct lines *L)
{
	for (size_t i = 0; i < L->n; i++)
		free(L->v[i]);
	free(L->v);
}

/* OpenHands' read_lines(all_lines, start, end), joined */
static void read_lines(struct lines *L, long long start, long long end, buf_t *out)
{
	long long n = (long long)L->n;
	start = start < 0 ? 0 : start;
	start = start > n ? n : start;
	end = end == -1 ? -1 : (end < 0 ? 0 : end);
	end = end > n ? n : end;   /* min(end, len): -1 stays -1 */
	long long b, e;
	if (end == -1) {
		b = start;
		e = n;
	} else {
		b = start < n - 2 ? start : n - 2;
		b = b < 0 ? 0 : b;
		e = end > b + 1 ? end : b + 1;
		if (e > n)
			e = n;
	}
	for (long long i = b; i < e; i++)
		buf_puts(out, L->v[i]);
}

static long long arg_ll(struct ohreq *r, const char *key, long long def)
{
	const cJSON *v = arg(r, key);
	return cJSON_IsNumber(v) ? (long long)v->valuedouble : def;
}

static cJSON *read_obs(const char *path, const char *content, const char *impl)
{
	buf_t msg = {0};
	buf_printf(&msg, "I read the file %s.", path);
	cJSON *o = obs_new(msg.p, "read", content);
	buf_free(&msg);
	cJSON *ex = cJSON_AddObjectToObject(o, "extras");
	cJSON_AddStringToObject(ex, "path", path);
	cJSON_AddStringToObject(ex, "impl_source", impl);
	return o;
}

static void done_errorf(struct ohreq *r, const char *fmt, ...)
{
	buf_t b = {0};
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(&b, fmt, ap);
	va_end(ap);
	done_error(r, b.p);
	buf_free(&b);
}

static const char *media_mime(const char *path)
{
	static const struct { const char *ext, *mime; } m[] = {
		{".png", "image/png"}, {".jpg", "image/jpeg"}, {".jpeg", "image/jpeg"},
		{".bmp", "image/bmp"}, {".gif", "image/gif"}, {".pdf", "application/pdf"},
		{".mp4", "video/mp4"}, {".webm", "video/webm"}, {".ogg", "audio/ogg"},
	};
	size_t pl = strlen(path);
	for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
		size_t el = strlen(m[i].ext);
		if (pl >= el && strcasecmp(path + pl - el, m[i].ext) == 0)
			return m[i].mime;
	}
	return NULL;
}

static void read_answered(struct ohreq *r, cJSON *ans)
{
	if (is_error(ans)) {
		const char *code = ans_code(ans);
		if (code && strcmp(code, "not_found") == 0)
			done_errorf(r, "File not found: %s. Your current working directory is %s.", r->path,
				    main_cwd());
		else if (code && strcmp(code, "is_directory") == 0)
			done_errorf(r, "Path is a directory: %s. You can only read files", r->path);
		else if (code && strcmp(code, "binary_file") == 0)
			done_errorf(r, "File could not be decoded as utf-8: %s.", r->path);
		else
			done_error(r, ans_content(ans));
		return;
	}
	const char *mime = media_mime(r->path);
	buf_t out = {0};
	if (mime) {
		buf_printf(&out, "data:%s;base64,%s", mime, ans_content(ans));
	} else {
		struct lines L;
		split_lines(ans_content(ans), &L);
		read_lines(&L, arg_ll(r, "start", 0), arg_ll(r, "end", -1), &out);
		lines_free(&L);
	}
	oh_done(r, read_obs(r->path, out.p ? out.p : "", "default"));
	buf_free(&out);
}

static void aci_view_answered(struct ohreq *r, cJSON *ans)
{
	buf_t c = {0};
	if (is_error(ans))
		buf_printf(&c, "ERROR:\n%s", ans_content(ans));
	else
		buf_puts(&c, ans_content(ans));
	oh_done(r, read_obs(arg_str(r, "path"), c.p ? c.p : "", "oh_aci"));
	buf_free(&c);
}

/* openhands-aci's check of the path: absolute, else a hint */
static int aci_path_ok(struct ohreq *r, const char *path, buf_t *err)
{
	if (path[0] == '/')
		return 1;
	buf_printf(err, "ERROR:\nInvalid `path` parameter: %s. The path should be an absolute path, "
		   "starting with `/`.", path);
	buf_t s = {0};
	buf_printf(&s, "%s/%s", opts.cwd, path);
	if (access(s.p, F_OK) == 0)
		buf_printf(err, " Maybe you meant %s?", s.p);
	buf_free(&s);
	(void)r;
	return 0;
}

static void read_start(struct ohreq *r)
{
	const char *path = arg_str(r, "path");
	if (!path) {
		done_error(r, "FileReadAction needs a string 'path' argument");
		return;
	}
	char *abs = files_resolve(path);
	int bin = abs && is_binary(abs);
	free(abs);
	if (bin) {
		done_error(r, "ERROR_BINARY_FILE");
		return;
	}
	const char *impl = arg_str(r, "impl_source");
	if (impl && strcmp(impl, "oh_aci") == 0) {
		buf_t err = {0};
		if (!aci_path_ok(r, path, &err)) {
			oh_done(r, read_obs(path, err.p, "oh_aci"));
			buf_free(&err);
			return;
		}
		cJSON *a = cJSON_CreateObject();
		cJSON_AddStringToObject(a, "command", "view");
		cJSON_AddStringToObject(a, "path", path);
		const cJSON *vr = arg(r, "view_range");
		if (vr)
			cJSON_AddItemToObject(a, "view_range", cJSON_Duplicate(vr, 1));
		oh_call(r, "edit", a, aci_view_answered);
		return;
	}
	r->path = oh_resolve(path);
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "path", r->path);
	if (media_mime(r->path))
		cJSON_AddStringToObject(a, "encoding", "base64");
	oh_call(r, "read", a, read_answered);
}

static void write_done(struct ohreq *r, cJSON *ans)
{
	if (is_error(ans)) {
		const char *code = ans_code(ans);
		if (code && strcmp(code, "is_directory") == 0)
			done_errorf(r, "Path is a directory: %s. You can only write to files", r->path);
		else
			done_error(r, ans_content(ans));
		return;
	}
	buf_t msg = {0};
	buf_printf(&msg, "I wrote to the file %s.", r->path);
	cJSON *o = obs_new(msg.p, "write", "");
	buf_free(&msg);
	cJSON *ex = cJSON_AddObjectToObject(o, "extras");
	cJSON_AddStringToObject(ex, "path", r->path);
	oh_done(r, o);
}

static void write_have_old(struct ohreq *r, cJSON *ans)
{
	const char *content = arg_str(r, "content");
	if (is_error(ans)) {
		const char *code = ans_code(ans);
		if (code && strcmp(code, "is_directory") == 0) {
			done_errorf(r, "Path is a directory: %s. You can only write to files", r->path);
			return;
		}
		if (code && strcmp(code, "binary_file") == 0) {
			done_errorf(r, "File could not be decoded as utf-8: %s", r->path);
			return;
		}
		if (!code || strcmp(code, "not_found") != 0) {
			done_error(r, ans_content(ans));
			return;
		}
	} else {
		r->exists = 1;
	}
	/* content.split('\n'), each + '\n'; an existing file gets them
	 * spliced in by insert_lines(start, end) */
	buf_t nw = {0};
	if (r->exists) {
		struct lines L;
		split_lines(ans_content(ans), &L);
		long long start = arg_ll(r, "start", 0), end = arg_ll(r, "end", -1), n = (long long)L.n;
		if (start != 0)   /* original[:start] */
			for (long long i = 0; i < (start < 0 ? n + start : start) && i < n; i++)
				buf_puts(&nw, L.v[i]);
		buf_puts(&nw, content);
		buf_putc(&nw, '\n');
		if (end != -1)    /* original[end:] */
			for (long long i = end < 0 ? (n + end < 0 ? 0 : n + end) : end; i < n; i++)
				buf_puts(&nw, L.v[i]);
		lines_free(&L);
	} else {
		buf_puts(&nw, content);
		buf_putc(&nw, '\n');
	}
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "path", r->path);
	cJSON_AddStringToObject(a, "content", nw.p);
	if (!r->exists)
		cJSON_AddStringToObject(a, "mode", "664");
	buf_free(&nw);
	oh_call(r, "write", a, write_done);
}

static void write_start(struct ohreq *r)
{
	const char *path = arg_str(r, "path");
	if (!path || !arg_str(r, "content")) {
		done_error(r, "FileWriteAction needs string 'path' and 'content' arguments");
		return;
	}
	r->path = oh_resolve(path);
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "path", r->path);
	oh_call(r, "read", a, write_have_old);
}

/* ================================================================ edit */

/* get_diff(old, new, path): difflib.unified_diff(n=0) of the lines split
 * at '\n', lines rstripped, joined by '\n'. One hunk: the lines between
 * the common head and tail. */
static void unified_diff(const char *path, const char *a, const char *b, buf_t *out)
{
	struct piece { const char *p; size_t n; };
	struct piece *A = NULL, *B = NULL;
	size_t na = 0, nb = 0;
	for (int k = 0; k < 2; k++) {
		const char *s = k ? b : a;
		struct piece **V = k ? &B : &A;
		size_t *N = k ? &nb : &na, cap = 0;
		for (const char *p = s;;) {
			const char *e = strchr(p, '\n');
			size_t l = e ? (size_t)(e - p) : strlen(p);
			if (*N == cap) {
				cap = cap ? 2 * cap : 16;
				*V = xrealloc(*V, cap * sizeof **V);
			}
			(*V)[(*N)++] = (struct piece){p, l};
			if (!e)
				break;
			p = e + 1;
		}
	}
	size_t h = 0;
	while (h < na && h < nb && A[h].n == B[h].n && memcmp(A[h].p, B[h].p, A[h].n) == 0)
		h++;
	size_t t = 0;
	while (t < na - h && t < nb - h && A[na - 1 - t].n == B[nb - 1 - t].n &&
	       memcmp(A[na - 1 - t].p, B[nb - 1 - t].p, A[na - 1 - t].n) == 0)
		t++;
	size_t da = na - h - t, db = nb - h - t;
	if (da || db) {
		buf_printf(out, "--- %s\n+++ %s\n@@ -", path, path);
		for (int k = 0; k < 2; k++) {
			size_t len = k ? db : da, beg = h + 1;
			if (k)
				buf_puts(out, " +");
			if (len == 1)
				buf_printf(out, "%zu", beg);
			else
				buf_printf(out, "%zu,%zu", len ? beg : beg - 1, len);
		}
		buf_puts(out, " @@");
		for (int k = 0; k < 2; k++) {
			struct piece *V = k ? B : A;
			size_t len = k ? db : da;
			for (size_t i = h; i < h + len; i++) {
				size_t l = V[i].n;
				while (l && py_space((unsigned char)V[i].p[l - 1]))
					l--;
				buf_printf(out, "\n%c%.*s", k ? '+' : '-', (int)l, V[i].p);
			}
		}
	}
	free(A);
	free(B);
}

static cJSON *edit_obs(struct ohreq *r, const char *content, const char *diff)
{
	const char *path = arg_str(r, "path");
	buf_t msg = {0};
	buf_printf(&msg, "I edited the file %s.", path);
	cJSON *o = obs_new(msg.p, "edit", content);
	buf_free(&msg);
	cJSON *ex = cJSON_AddObjectToObject(o, "extras");
	cJSON_AddStringToObject(ex, "path", path);
	cJSON_AddBoolToObject(ex, "prev_exist", 0);
	const char *os = arg_str(r, "old_str"), *ns = arg_str(r, "new_str");
	cJSON_AddItemToObject(ex, "old_content", os ? cJSON_CreateString(os) : cJSON_CreateNull());
	cJSON_AddItemToObject(ex, "new_content", ns ? cJSON_CreateString(ns) : cJSON_CreateNull());
	cJSON_AddStringToObject(ex, "impl_source", "oh_aci");
	cJSON_AddStringToObject(ex, "diff", diff);
	cJSON_AddNullToObject(ex, "_diff_cache");
	return o;
}

static void edit_have_new(struct ohreq *r, cJSON *ans)
{
	buf_t diff = {0};
	unified_diff(arg_str(r, "path"), r->old ? r->old : "",
		     is_error(ans) ? "" : ans_content(ans), &diff);
	cJSON *o = edit_obs(r, jstr(r->result, "content"), diff.p ? diff.p : "");
	buf_free(&diff);
	oh_done(r, o);
}

static void edit_answered(struct ohreq *r, cJSON *ans)
{
	const char *cmd = arg_str(r, "command");
	if (is_error(ans) || (cmd && strcmp(cmd, "view") == 0)) {
		buf_t c = {0};
		if (is_error(ans))
			buf_printf(&c, "ERROR:\n%s", ans_content(ans));
		else
			buf_puts(&c, ans_content(ans));
		oh_done(r, edit_obs(r, c.p ? c.p : "", ""));
		buf_free(&c);
		return;
	}
	cJSON_Delete(r->result);
	r->result = cJSON_CreateObject();
	cJSON_AddStringToObject(r->result, "content", ans_content(ans));
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "path", arg_str(r, "path"));
	oh_call(r, "read", a, edit_have_new);
}

static void edit_run(struct ohreq *r)
{
	cJSON *a = cJSON_CreateObject();
	static const char *const keys[] = {"command", "path", "file_text", "old_str", "new_str",
					   "view_range"};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		const cJSON *v = arg(r, keys[i]);
		if (v)
			cJSON_AddItemToObject(a, keys[i], cJSON_Duplicate(v, 1));
	}
	const cJSON *il = arg(r, "insert_line");
	if (cJSON_IsString(il)) {
		char *end;
		long long v = strtoll(il->valuestring, &end, 10);
		cJSON_AddNumberToObject(a, "insert_line", (double)v);
	} else if (il) {
		cJSON_AddItemToObject(a, "insert_line", cJSON_Duplicate(il, 1));
	}
	oh_call(r, "edit", a, edit_answered);
}

static void edit_have_old(struct ohreq *r, cJSON *ans)
{
	free(r->old);
	r->old = xstrdup(is_error(ans) ? "" : ans_content(ans));
	edit_run(r);
}

static void edit_start(struct ohreq *r)
{
	const char *impl = arg_str(r, "impl_source");
	const char *path = arg_str(r, "path"), *cmd = arg_str(r, "command");
	if (impl && strcmp(impl, "oh_aci") != 0) {
		done_errorf(r, "FileEditAction with impl_source '%s' is edited by the client, not here",
			    impl);
		return;
	}
	if (!path || !cmd) {
		done_error(r, "FileEditAction needs string 'path' and 'command' arguments");
		return;
	}
	const cJSON *il = arg(r, "insert_line");
	if (cJSON_IsString(il)) {
		char *end;
		errno = 0;
		strtoll(il->valuestring, &end, 10);
		if (end == il->valuestring || *end || errno) {
			buf_t c = {0};
			buf_printf(&c, "ERROR:\nInvalid insert_line value: '%s'. Expected an integer.",
				   il->valuestring);
			oh_done(r, edit_obs(r, c.p, ""));
			buf_free(&c);
			return;
		}
	}
	buf_t err = {0};
	if (!aci_path_ok(r, path, &err)) {
		oh_done(r, edit_obs(r, err.p, ""));
		buf_free(&err);
		return;
	}
	if (strcmp(cmd, "view") == 0) {
		edit_run(r);
		return;
	}
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "path", path);
	oh_call(r, "read", a, edit_have_old);
}

/* ================================================ run_ipython, browse */

static void ipython_answered(struct ohreq *r, cJSON *ans)
{
	if (is_error(ans)) {
		const char *code = ans_code(ans);
		if (code && (strcmp(code, "unknown_action") == 0 || strcmp(code, "bad_request") == 0) &&
		    strstr(ans_content(ans), "plugin"))
			done_error(r, NO_JUPYTER);
		else if (code && strcmp(code, "unknown_action") == 0)
			done_error(r, NO_JUPYTER);
		else
			done_error(r, ans_content(ans));
		return;
	}
	const char *c = ans_content(ans);
	const char *tail = NULL;
	for (const char *p = strstr(c, "\n[Jupyter current working directory: "); p;
	     p = strstr(p + 1, "\n[Jupyter current working directory: "))
		tail = p;
	size_t bl = tail ? (size_t)(tail - c) : strlen(c);
	while (bl && py_space((unsigned char)c[bl - 1]))
		bl--;
	buf_t out = {0};
	buf_append(&out, c, bl);
	if (arg_true(r, "include_extra", 1) && tail)
		buf_puts(&out, tail);
	cJSON *o = obs_new("Code executed in IPython cell.", "run_ipython", out.p ? out.p : "");
	buf_free(&out);
	cJSON *ex = cJSON_AddObjectToObject(o, "extras");
	const char *code = arg_str(r, "code");
	cJSON_AddStringToObject(ex, "code", code ? code : "");
	const cJSON *imgs = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(ans, "extras"), "image_urls");
	if (cJSON_IsArray(imgs) && cJSON_GetArraySize(imgs) > 0)
		cJSON_AddItemToObject(ex, "image_urls", cJSON_Duplicate(imgs, 1));
	else
		cJSON_AddNullToObject(ex, "image_urls");
	cJSON_AddBoolToObject(o, "success", 1);
	oh_done(r, o);
}

static void ipython_start(struct ohreq *r)
{
	const char *code = arg_str(r, "code");
	if (!actions_find("run_ipython")) {
		done_error(r, NO_JUPYTER);
		return;
	}
	if (!code) {
		done_error(r, "IPythonRunCellAction needs a string 'code' argument");
		return;
	}
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "code", code);
	if (r->has_timeout)
		cJSON_AddNumberToObject(a, "timeout", r->timeout);
	const char *init = arg_str(r, "kernel_init_code");
	if (init && *init)
		cJSON_AddStringToObject(a, "kernel_init_code", init);
	oh_call(r, "run_ipython", a, ipython_answered);
}

static void browse_answered(struct ohreq *r, cJSON *ans)
{
	if (is_error(ans)) {
		const char *code = ans_code(ans);
		if (code && (strcmp(code, "unknown_action") == 0 || strcmp(code, "bad_request") == 0))
			done_error(r, NO_BROWSER);
		else
			done_error(r, ans_content(ans));
		return;
	}
	const cJSON *ex = cJSON_GetObjectItemCaseSensitive(ans, "extras");
	int interactive = strcmp(r->type, "browse_interactive") == 0;
	const char *url = jstr(ex, "url"), *bid = jstr(ex, "focused_element_bid");
	const char *err = jstr(ex, "last_browser_action_error");
	int error = jtrue(ex, "error");
	url = url ? url : "";
	bid = bid ? bid : "";
	err = err ? err : "";
	buf_t c = {0};
	buf_printf(&c, "[Current URL: %s]\n", url);
	if (interactive) {
		buf_printf(&c, "[Focused element bid: %s]\n\n", bid);
		if (error)
			buf_printf(&c, "================ BEGIN error message ===============\n"
				   "The following error occurred when executing the last action:\n%s\n"
				   "================ END error message ===============\n", err);
		else
			buf_puts(&c, "[Action executed successfully.]\n");
		const char *ax = jstr(ex, "axtree");
		buf_printf(&c, "Accessibility tree of the COMPLETE webpage:\nNote: [bid] is the unique "
			   "alpha-numeric identifier at the beginning of lines for each element in the "
			   "AXTree. Always use bid to refer to elements in your actions.\n"
			   "============== BEGIN accessibility tree ==============\n%s\n"
			   "============== END accessibility tree ==============\n", ax ? ax : "");
	} else {
		if (error)
			buf_printf(&c, "================ BEGIN error message ===============\n"
				   "The following error occurred when trying to visit the URL:\n%s\n"
				   "================ END error message ===============\n", err);
		buf_printf(&c, "============== BEGIN webpage content ==============\n%s\n"
			   "============== END webpage content ==============\n", ans_content(ans));
	}
	cJSON *o = obs_new("Visited URL", "browse", c.p);
	buf_free(&c);
	cJSON *x = cJSON_AddObjectToObject(o, "extras");
	cJSON_AddStringToObject(x, "url", url);
	cJSON_AddStringToObject(x, "trigger_by_action", r->type);
	const char *shot = jstr(ex, "screenshot");
	cJSON_AddStringToObject(x, "screenshot", shot ? shot : "");
	cJSON_AddNullToObject(x, "screenshot_path");
	cJSON_AddStringToObject(x, "set_of_marks", "");
	cJSON_AddBoolToObject(x, "error", error);
	cJSON_AddItemToObject(x, "goal_image_urls", cJSON_CreateArray());
	const cJSON *pages = cJSON_GetObjectItemCaseSensitive(ex, "open_pages_urls");
	cJSON_AddItemToObject(x, "open_pages_urls",
			      cJSON_IsArray(pages) ? cJSON_Duplicate(pages, 1) : cJSON_CreateArray());
	cJSON_AddNumberToObject(x, "active_page_index", jnum(ex, "active_page_index", 0));
	cJSON_AddItemToObject(x, "dom_object", cJSON_CreateObject());
	cJSON_AddItemToObject(x, "axtree_object", cJSON_CreateObject());
	cJSON_AddItemToObject(x, "extra_element_properties", cJSON_CreateObject());
	const char *last = jstr(ex, "last_browser_action");
	cJSON_AddStringToObject(x, "last_browser_action", last ? last : "");
	cJSON_AddStringToObject(x, "last_browser_action_error", err);
	cJSON_AddStringToObject(x, "focused_element_bid", bid);
	cJSON_AddBoolToObject(x, "filter_visible_only", 0);
	oh_done(r, o);
}

static void browse_start(struct ohreq *r)
{
	if (!actions_find(r->type)) {
		done_error(r, NO_BROWSER);
		return;
	}
	cJSON *a = cJSON_CreateObject();
	int interactive = strcmp(r->type, "browse_interactive") == 0;
	const char *key = interactive ? "browser_actions" : "url";
	const char *v = arg_str(r, key);
	cJSON_AddStringToObject(a, key, v ? v : "");
	if (r->has_timeout)
		cJSON_AddNumberToObject(a, "timeout", r->timeout);
	oh_call(r, r->type, a, browse_answered);
}

/* ====================================================== execute_action */

static void oh_start(struct ohreq *r)
{
	oh.last_exec_us = mono_us();
	static const struct { const char *type; void (*fn)(struct ohreq *); } map[] = {
		{"run", run_start}, {"read", read_start}, {"write", write_start},
		{"edit", edit_start}, {"run_ipython", ipython_start}, {"browse", browse_start},
		{"browse_interactive", browse_start},
	};
	if (r->args && !cJSON_IsObject(r->args)) {
		done_error(r, "'args' of an action must be an object");
		return;
	}
	for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
		if (strcmp(map[i].type, r->type) == 0) {
			map[i].fn(r);
			return;
		}
	}
	done_errorf(r, "Invalid action type: '%s' is not an action this runtime executes "
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

static void answer_json(struct http_txn *t, int status, const char *json)
{
	http_answer(t, status, "application/json", json, strlen(json));
}

static void answer_detail(struct http_txn *t, int status, const char *detail)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "detail", detail);
	char *s = cJSON_PrintUnformatted(o);
	answer_json(t, status, s);
	free(s);
	cJSON_Delete(o);
}

static void answer_422(struct http_txn *t, const char *errors)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "detail", "Invalid request parameters");
	cJSON_AddStringToObject(o, "errors", errors);
	char *s = cJSON_PrintUnformatted(o);
	answer_json(t, 422, s);
	free(s);
	cJSON_Delete(o);
}

static void execute_action(struct http_txn *t)
{
	cJSON *body = cJSON_ParseWithLength(t->body.p ? t->body.p : "", t->body.len);
	if (!body || !cJSON_IsObject(body)) {
		answer_422(t, "[{'type': 'json_invalid', 'loc': ('body', 0), 'msg': 'JSON decode error'}]");
		cJSON_Delete(body);
		return;
	}
	const cJSON *action = cJSON_GetObjectItemCaseSensitive(body, "action");
	if (!action) {
		answer_422(t, "[{'type': 'missing', 'loc': ('body', 'action'), 'msg': 'Field required'}]");
		cJSON_Delete(body);
		return;
	}
	if (!cJSON_IsObject(action)) {
		answer_422(t, "[{'type': 'dict_type', 'loc': ('body', 'action'), "
			   "'msg': 'Input should be a valid dictionary'}]");
		cJSON_Delete(body);
		return;
	}
	struct ohreq *r = xcalloc(1, sizeof *r);
	r->t = t;
	r->body = body;
	const char *type = jstr(action, "action");
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

static int admit_key(struct http_txn *t)
{
	if (!opts.token)
		return 0;
	char key[640];
	if (http_header(t, "x-session-api-key:", key, sizeof key) > 0 && http_token_ok(key))
		return 0;
	/* termd's own ways of giving the token work too */
	char hdr[640];
	if (lws_hdr_copy(t->wsi, hdr, sizeof hdr, WSI_TOKEN_HTTP_AUTHORIZATION) > 0 &&
	    strncasecmp(hdr, "Bearer ", 7) == 0 && http_token_ok(hdr + 7))
		return 0;
	answer_detail(t, 403, "Invalid API Key");
	return 1;
}

static void alive(struct http_txn *t)
{
	answer_json(t, 200, "{\"status\":\"ok\"}");
}

static void vscode_token(struct http_txn *t)
{
	answer_json(t, 200, "{\"token\":null}");
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

static void server_info(struct http_txn *t)
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
	char *s = cJSON_PrintUnformatted(o);
	answer_json(t, 200, s);
	free(s);
	cJSON_Delete(o);
}

struct name_ent {
	char *name;
	int dir;
};

static int name_cmp(const void *a, const void *b)
{
	const struct name_ent *x = a, *y = b;
	if (x->dir != y->dir)
		return y->dir - x->dir;
	int c = strcasecmp(x->name, y->name);
	return c ? c : strcmp(x->name, y->name);
}

static void list_files(struct http_txn *t)
{
	cJSON *body = cJSON_ParseWithLength(t->body.p ? t->body.p : "", t->body.len);
	const char *p = body ? jstr(body, "path") : NULL;
	buf_t full = {0};
	if (!p)
		buf_puts(&full, opts.cwd);
	else if (p[0] == '/')
		buf_puts(&full, p);
	else
		buf_printf(&full, "%s/%s", opts.cwd, p);
	cJSON *arr = cJSON_CreateArray();
	DIR *d = opendir(full.p);
	if (d) {
		struct name_ent *v = NULL;
		size_t n = 0, cap = 0;
		struct dirent *e;
		while ((e = readdir(d))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			struct stat st;
			if (fstatat(dirfd(d), e->d_name, &st, 0) < 0)
				continue;   /* os.path.exists: a dangling link is left out */
			if (n == cap) {
				cap = cap ? 2 * cap : 64;
				v = xrealloc(v, cap * sizeof *v);
			}
			v[n].dir = S_ISDIR(st.st_mode);
			buf_t nm = {0};
			buf_puts(&nm, e->d_name);
			if (v[n].dir)
				buf_putc(&nm, '/');
			v[n++].name = buf_steal(&nm);
		}
		closedir(d);
		if (n)   /* v is NULL for an empty folder: qsort wants a pointer */
			qsort(v, n, sizeof *v, name_cmp);
		for (size_t i = 0; i < n; i++) {
			cJSON_AddItemToArray(arr, cJSON_CreateString(v[i].name));
			free(v[i].name);
		}
		free(v);
	}
	char *s = cJSON_PrintUnformatted(arr);
	answer_json(t, 200, s);
	free(s);
	cJSON_Delete(arr);
	cJSON_Delete(body);
	buf_free(&full);
}

static int py_bool(const char *v)
{
	return v && (!strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "yes") ||
		     !strcasecmp(v, "on") || !strcasecmp(v, "t") || !strcasecmp(v, "y"));
}

static int write_whole(const char *path, const void *data, size_t len, buf_t *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0) {
		buf_printf(err, "[Errno %d] %s: '%s'", errno, strerror(errno), path);
		return -1;
	}
	if (write_all(fd, data, len) < 0) {
		buf_printf(err, "[Errno %d] %s: '%s'", errno, strerror(errno), path);
		close(fd);
		return -1;
	}
	if (close(fd) < 0) {
		buf_printf(err, "[Errno %d] %s: '%s'", errno, strerror(errno), path);
		return -1;
	}
	return 0;
}

struct unzip_ctx {
	const char *dest;
};

static int unzip_entry(void *arg, const char *name, const unsigned char *data, size_t len,
		       int is_dir, char *err, size_t errlen)
{
	struct unzip_ctx *u = arg;
	buf_t path = {0}, msg = {0};
	buf_printf(&path, "%s/%s", u->dest, name);
	/* the folder it goes in (or the folder entry itself) */
	char *slash = strrchr(path.p, '/');
	int rc = 0;
	if (slash) {
		*slash = 0;
		if (fsio_mkdirs(path.p, &msg) != FSIO_OK) {
			snprintf(err, errlen, "%s", msg.p ? msg.p : "cannot create a folder");
			rc = -1;
		}
		*slash = '/';
	}
	if (!rc && !is_dir && write_whole(path.p, data, len, &msg) < 0) {
		snprintf(err, errlen, "%s", msg.p);
		rc = -1;
	}
	buf_free(&path);
	buf_free(&msg);
	return rc;
}

static void upload_file(struct http_txn *t)
{
	char destb[4096], rec[4096], ctype[512];	/* lws stops at the first query part too long for the buffer */
	const char *dest = http_arg(t, "destination=", destb, sizeof destb);
	if (!dest)
		dest = "/";
	int recursive = py_bool(http_arg(t, "recursive=", rec, sizeof rec));
	if (lws_hdr_copy(t->wsi, ctype, sizeof ctype, WSI_TOKEN_HTTP_CONTENT_TYPE) < 0)
		ctype[0] = 0;
	struct mp_part part;
	char err[512];
	if (multipart_find(ctype, t->body.p ? t->body.p : "", t->body.len, "file", &part, err,
			   sizeof err) < 0 || !part.has_filename) {
		answer_422(t, "[{'type': 'missing', 'loc': ('body', 'file'), 'msg': 'Field required'}]");
		return;
	}
	if (dest[0] != '/') {
		answer_detail(t, 500, "400: Destination must be an absolute path");
		return;
	}
	buf_t msg = {0};
	if (fsio_mkdirs(dest, &msg) != FSIO_OK) {
		answer_detail(t, 500, msg.p ? msg.p : "cannot create the destination");
		buf_free(&msg);
		return;
	}
	/* the file's own name, never a path */
	const char *fname = strrchr(part.filename, '/');
	fname = fname ? fname + 1 : part.filename;
	size_t fl = strlen(fname);
	int is_zip = fl >= 4 && strcmp(fname + fl - 4, ".zip") == 0;
	if (recursive && !is_zip) {
		answer_detail(t, 500, "400: Recursive uploads must be zip files");
		return;
	}
	if (!fname[0] || !strcmp(fname, ".") || !strcmp(fname, "..")) {
		answer_detail(t, 500, "400: the upload has no file name");
		return;
	}
	if (is_zip) {
		struct unzip_ctx u = {dest};
		if (zip_read(part.data, part.len, unzip_entry, &u, err, sizeof err) < 0) {
			answer_detail(t, 500, err);
			return;
		}
	} else {
		buf_t path = {0};
		buf_printf(&path, "%s/%s", dest, fname);
		int rc = write_whole(path.p, part.data, part.len, &msg);
		buf_free(&path);
		if (rc < 0) {
			answer_detail(t, 500, msg.p);
			buf_free(&msg);
			return;
		}
	}
	buf_free(&msg);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "filename", fname);
	cJSON_AddStringToObject(o, "destination", dest);
	cJSON_AddBoolToObject(o, "recursive", recursive);
	char *s = cJSON_PrintUnformatted(o);
	answer_json(t, 200, s);
	free(s);
	cJSON_Delete(o);
}

struct zwalk {
	struct zipw zw;
	size_t total;
	int too_large;
};

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* os.walk(root) without following links to folders; arcnames relative */
static void zip_walk(struct zwalk *w, const char *dir, const char *rel)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 32;
			names = xrealloc(names, cap * sizeof *names);
		}
		names[n++] = xstrdup(e->d_name);
	}
	closedir(d);
	if (n)   /* names is NULL for an empty folder */
		qsort(names, n, sizeof *names, str_cmp);
	for (size_t i = 0; i < n; i++) {
		buf_t full = {0}, arc = {0};
		buf_printf(&full, "%s/%s", dir, names[i]);
		buf_printf(&arc, "%s%s%s", rel, rel[0] ? "/" : "", names[i]);
		struct stat lst, st;
		if (lstat(full.p, &lst) == 0 && !w->too_large) {
			if (S_ISDIR(lst.st_mode)) {
				zip_walk(w, full.p, arc.p);
			} else if (!(S_ISLNK(lst.st_mode) && stat(full.p, &st) == 0 && S_ISDIR(st.st_mode))) {
				buf_t data = {0}, msg = {0};
				struct stat fst;
				if (fsio_load(full.p, OH_DOWNLOAD_MAX, &data, &fst, &msg) == FSIO_OK) {
					w->total += data.len;
					if (w->total > OH_DOWNLOAD_MAX)
						w->too_large = 1;
					else
						zipw_add(&w->zw, arc.p, data.p ? data.p : "", data.len,
							 fst.st_mtime);
				}
				buf_free(&data);
				buf_free(&msg);
			}
		}
		buf_free(&full);
		buf_free(&arc);
		free(names[i]);
	}
	free(names);
}

static void download_files(struct http_txn *t)
{
	char pathb[4096];
	const char *path = http_arg(t, "path=", pathb, sizeof pathb);
	if (!path) {
		answer_422(t, "[{'type': 'missing', 'loc': ('query', 'path'), 'msg': 'Field required'}]");
		return;
	}
	if (path[0] != '/') {
		answer_detail(t, 500, "400: Path must be an absolute path");
		return;
	}
	struct stat st;
	if (stat(path, &st) != 0) {
		answer_detail(t, 500, "404: File not found");
		return;
	}
	struct zwalk w;
	memset(&w, 0, sizeof w);
	if (S_ISDIR(st.st_mode))
		zip_walk(&w, path, "");
	if (w.too_large) {
		buf_free(&w.zw.out);
		buf_free(&w.zw.cd);
		answer_detail(t, 500, "the folder is over the download limit of 512 MiB");
		return;
	}
	buf_t zip;
	zipw_finish(&w.zw, &zip);
	/* basename of the path as given (os.path.basename: "" after a /) */
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	buf_t disp = {0};
	buf_puts(&disp, "attachment; filename=\"");
	buf_puts(&disp, base);
	buf_puts(&disp, ".zip\"");
	http_answer(t, 200, "application/zip", zip.p, zip.len);
	t->disposition = buf_steal(&disp);
	buf_free(&zip);
}

void openhands_register(void)
{
	static const struct http_route routes[] = {
		{"GET", "/alive", NULL, alive, 0},
		{"GET", "/server_info", NULL, server_info, 0},
		{"POST", "/execute_action", admit_key, execute_action, 0},
		{"POST", "/list_files", admit_key, list_files, 0},
		{"POST", "/upload_file", admit_key, upload_file, 0},
		{"GET", "/download_files", admit_key, download_files, 0},
		{"GET", "/vscode/connection_token", admit_key, vscode_token, 0},
	};
	http_routes_register(routes, sizeof routes / sizeof routes[0]);
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
