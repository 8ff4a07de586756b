/* run.c — OpenHands' `run` on termd's run: the command as OpenHands
 * sends it (blocking, is_input, static, hidden), its answer in OpenHands'
 * shape (metadata, prefix and suffix, the no-change timeout text), output
 * cleaned and truncated as OpenHands does; C-c with nothing in the
 * foreground kills what earlier commands left running (session.signal tree). */
#include "openhands.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void run_answered(struct ohreq *r, cJSON *ans);

static void run_finish(struct ohreq *r, cJSON *obs);

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
	while (n && oh_py_space((unsigned char)*p)) {
		p++;
		n--;
	}
	const char *c = command;
	while (*c && oh_py_space((unsigned char)*c))
		c++;
	size_t cl = strlen(c);
	if (cl && n >= cl && memcmp(p, c, cl) == 0) {
		p += cl;
		n -= cl;
		while (n && oh_py_space((unsigned char)*p)) {
			p++;
			n--;
		}
	}
	while (n && oh_py_space((unsigned char)p[n - 1]))
		n--;
	buf_reset(out);
	buf_append(out, p, n);
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
	int code = (int)oh_jnum(meta, "exit_code", -1);
	buf_t msg = {0}, c = {0};
	buf_printf(&msg, "Command `%s` executed with exit code %d.", command, code);
	buf_puts(&c, content);
	if (!hidden)
		oh_truncate(&c);
	cJSON *o = oh_obs_new(msg.p, "run", c.p ? c.p : "");
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
	int running = oh_jtrue(ex, "running");
	buf_t content = {0};
	clean_output(oh_ans_content(ans), r->cmd, &content);
	int *seen = r->is_static ? NULL : &oh.running_seen;
	cJSON *obs;
	if (!running && !not_executed) {
		int code = (int)oh_jnum(ex, "exit_code", -1);
		cJSON *m = metadata_new(code);
		char py[4096];
		which_python(py, sizeof py);
		cJSON_ReplaceItemInObject(m, "username", cJSON_CreateString(oh.username));
		cJSON_ReplaceItemInObject(m, "hostname", cJSON_CreateString(oh.hostname));
		const char *cwd = oh_jstr(ex, "cwd");
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
		const char *to = oh_jstr(ex, "timed_out");
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

/* C-c ended what ran in the background (session.signal tree) */
static void run_tree_killed(struct ohreq *r, cJSON *ans)
{
	if (oh_is_error(ans)) {
		run_nothing(r);
		return;
	}
	const cJSON *ex = cJSON_GetObjectItemCaseSensitive(ans, "extras");
	int n = (int)oh_jnum(ex, "processes", 0);
	char msg[256];
	snprintf(msg, sizeof msg, "[Nothing was running in the foreground. %d background process%s "
		 "that earlier commands started %s killed. CTRL+C was sent.]", n, n == 1 ? "" : "es",
		 n == 1 ? "was" : "were");
	run_finish(r, run_obs("", msg, metadata_new(-1), "", "", 0));
}

static void run_polled(struct ohreq *r, cJSON *ans)
{
	if (oh_is_error(ans)) {   /* another client is waiting on it: nothing to show */
		cJSON *fake = cJSON_CreateObject();
		cJSON_AddStringToObject(fake, "content", "");
		run_map(r, fake, "yes");
		cJSON_Delete(fake);
		return;
	}
	const cJSON *ex = cJSON_GetObjectItemCaseSensitive(ans, "extras");
	if (!oh_jtrue(ex, "running")) {
		/* it ended meanwhile: the new command runs after all */
		oh_call(r, "run", run_args(r, r->cmd, 0, 0), run_answered);
		return;
	}
	run_map(r, ans, "yes");
}

static void run_answered(struct ohreq *r, cJSON *ans)
{
	if (!oh_is_error(ans)) {
		run_map(r, ans, NULL);
		return;
	}
	const char *code = oh_ans_code(ans);
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
		/* C-c with nothing in the foreground, but what earlier commands
		 * started runs on behind it (a server, a fork bomb): OpenHands'
		 * only way to stop it, so it is killed, the whole tree */
		const cJSON *ex = cJSON_GetObjectItemCaseSensitive(ans, "extras");
		if (r->special && strcmp(r->cmd, "C-c") == 0 && oh_jnum(ex, "left_running", 0) > 0) {
			cJSON *a = cJSON_CreateObject();
			cJSON_AddStringToObject(a, "session", r->is_static ? r->sname : "main");
			cJSON_AddStringToObject(a, "signal", "KILL");
			cJSON_AddBoolToObject(a, "tree", 1);
			oh_call(r, "session.signal", a, run_tree_killed);
			return;
		}
		run_nothing(r);
		return;
	}
	oh_done_error(r, oh_ans_content(ans));
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
	if (oh_is_error(ans)) {
		oh_done_error(r, oh_ans_content(ans));
		return;
	}
	oh_call(r, "run", run_args(r, r->cmd, 0, 0), run_answered);
}

void oh_run_start(struct ohreq *r)
{
	const char *command = oh_arg_str(r, "command");
	if (!command) {
		oh_done_error(r, "CmdRunAction needs a string 'command' argument");
		return;
	}
	r->cmd = oh_py_strip(command);
	r->is_input = oh_arg_true(r, "is_input", 0);
	r->blocking = oh_arg_true(r, "blocking", 0);
	r->hidden = oh_arg_true(r, "hidden", 0);
	r->is_static = oh_arg_true(r, "is_static", 0);
	r->special = strlen(r->cmd) == 3 && r->cmd[0] == 'C' && r->cmd[1] == '-';
	if (r->is_static) {
		snprintf(r->sname, sizeof r->sname, "openhands-static-%u", ++oh.nstatic);
		const char *cwd = oh_arg_str(r, "cwd");
		struct stat st;
		if (cwd && *cwd && (stat(cwd, &st) != 0 || !S_ISDIR(st.st_mode))) {
			oh_done_errorf(r, "Cannot run a static command in %s: not a directory", cwd);
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
