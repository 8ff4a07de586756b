/* exec.c — SWE-ReX's /execute (subprocess.run: a str or a list, shell,
 * env replacing the environment, cwd, merge_output_streams, check,
 * timeout) and any program the door runs (session.c's `bash -n`), each on
 * a pipe session of its own named swerex-exec-<n> with stdin /dev/null.
 * A timeout kills the whole process tree (SWE-ReX kills only the direct
 * child), and the answer comes at once. */
#include "swerex.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct swproc {
	struct swproc *next;
	struct swreq *r;          /* NULL once its request ended */
	sw_proc_done done;
	char name[TD_SESSION_NAME_MAX + 1];
	buf_t out, err;
	int ended, timed_out;
	uint64_t deadline;        /* mono_us its timeout kills it (0: none, or done) */
	lws_sorted_usec_list_t timer, close_sul;
};

static struct swproc *procs;
static unsigned long long nproc;

static struct swproc *by_session(struct session *s)
{
	if (strncmp(s->name, SW_EXEC_PREFIX, strlen(SW_EXEC_PREFIX)) != 0)
		return NULL;
	for (struct swproc *p = procs; p; p = p->next)
		if (strcmp(p->name, s->name) == 0)
			return p;
	return NULL;
}

static void proc_free(struct swproc *p)
{
	for (struct swproc **q = &procs; *q; q = &(*q)->next)
		if (*q == p) {
			*q = p->next;
			break;
		}
	lws_sul_cancel(&p->timer);
	lws_sul_cancel(&p->close_sul);
	buf_free(&p->out);
	buf_free(&p->err);
	free(p);
}

void sw_proc_req_done(struct swreq *r)
{
	for (struct swproc *p = procs; p; p = p->next)
		if (p->r == r)
			p->r = NULL;
	r->proc = NULL;
}

/* the answer to the request, once */
static void proc_report(struct swproc *p, int code, const char *why)
{
	struct swreq *r = p->r;
	if (!r)
		return;
	p->r = NULL;
	r->proc = NULL;
	p->done(r, &p->out, &p->err, code, p->timed_out, why);
}

static void close_timer(lws_sorted_usec_list_t *sul)
{
	struct swproc *p = lws_container_of(sul, struct swproc, close_sul);
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "name", p->name);
	proc_free(p);
	sw_call_detached("session.close", a);
}

static void on_stream(struct session *s, int stream, const char *data, size_t n)
{
	struct swproc *p = by_session(s);
	if (p && !p->ended && p->r)   /* (nobody reads it once its request ended) */
		buf_append(stream == 2 ? &p->err : &p->out, data, n);
}

/* A swerex-exec-N session that started without sw_proc_start: one taken
 * over by an upgrade in place (its request was cut by it). It is a process
 * whose request ended: closed once it ended (was: left in session.list for
 * ever). Its timeout's deadline came across (sw_proc_handover_load). */
static void on_started(struct session *s)
{
	const char *n = s->name + strlen(SW_EXEC_PREFIX);
	if (!s->is_pipe || strncmp(s->name, SW_EXEC_PREFIX, strlen(SW_EXEC_PREFIX)) != 0 || !*n ||
	    strspn(n, "0123456789") != strlen(n) || by_session(s))
		return;
	struct swproc *p = xcalloc(1, sizeof *p);
	snprintf(p->name, sizeof p->name, "%s", s->name);
	p->next = procs;
	procs = p;
}

static void on_exit_(struct session *s)
{
	struct swproc *p = by_session(s);
	if (!p || p->ended)
		return;
	p->ended = 1;
	lws_sul_cancel(&p->timer);
	int code = s->pty.exit_signal ? -s->pty.exit_signal : s->pty.exit_code;
	proc_report(p, code, NULL);
	server_timer(&p->close_sul, close_timer, 1);   /* not inside its own exit */
}

static void on_gone(struct session *s)
{
	struct swproc *p = by_session(s);
	if (!p)
		return;
	if (!p->ended) {
		p->ended = 1;
		proc_report(p, -9, NULL);
	}
	proc_free(p);
}

static const struct session_listener listener = {
	.started = on_started,
	.stream = on_stream,
	.exit = on_exit_,
	.gone = on_gone,
};

static void proc_timeout(lws_sorted_usec_list_t *sul)
{
	struct swproc *p = lws_container_of(sul, struct swproc, timer);
	p->timed_out = 1;
	p->deadline = 0;
	/* every process it started, not only the direct child */
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "session", p->name);
	cJSON_AddStringToObject(a, "signal", "KILL");
	cJSON_AddBoolToObject(a, "tree", 1);
	proc_report(p, -9, NULL);
	sw_call_detached("session.signal", a);
}

static void shell_quote(buf_t *b, const char *s)
{
	buf_putc(b, '\'');
	for (; *s; s++) {
		if (*s == '\'')
			buf_puts(b, "'\\''");
		else
			buf_putc(b, *s);
	}
	buf_putc(b, '\'');
}

void sw_proc_start(struct swreq *r, char *const *argv, const cJSON *env, const char *cwd,
		   int merge, double timeout, sw_proc_done done)
{
	/* the program's argv: env -i for a replaced environment, sh for
	 * merged streams (one pipe, as stderr=STDOUT) */
	size_t n = 0;
	while (argv[n])
		n++;
	size_t nenv = env ? (size_t)cJSON_GetArraySize(env) : 0;
	char **av = xcalloc(n + nenv + 8, sizeof *av);
	char **own = xcalloc(nenv + 1, sizeof *own);
	size_t k = 0, ko = 0;
	if (env) {
		av[k++] = "/usr/bin/env";
		av[k++] = "-i";
		const cJSON *e;
		cJSON_ArrayForEach(e, env) {
			if (!cJSON_IsString(e) || !e->string || strchr(e->string, '='))
				continue;
			buf_t kv = {0};
			buf_printf(&kv, "%s=%s", e->string, e->valuestring);
			own[ko] = buf_steal(&kv);
			av[k++] = own[ko++];
		}
	}
	if (merge) {
		av[k++] = "/bin/sh";
		av[k++] = "-c";
		av[k++] = "exec \"$@\" 2>&1";
		av[k++] = "sh";
	}
	for (size_t i = 0; i < n; i++)
		av[k++] = argv[i];
	av[k] = NULL;

	struct swproc *p = xcalloc(1, sizeof *p);
	do   /* a name free now: the count starts again after an upgrade in place */
		snprintf(p->name, sizeof p->name, SW_EXEC_PREFIX "%llu", ++nproc);
	while (session_find(p->name));
	p->r = r;
	p->done = done;
	r->proc = p;
	p->next = procs;
	procs = p;

	buf_t line = {0};   /* what session.list shows */
	buf_puts(&line, "exec");
	for (size_t i = 0; av[i]; i++) {
		buf_putc(&line, ' ');
		shell_quote(&line, av[i]);
	}
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "name", p->name);
	cJSON_AddStringToObject(a, "command", line.p);
	cJSON_AddStringToObject(a, "kind", "pipe");
	cJSON_AddBoolToObject(a, "stdin", 0);
	if (cwd)
		cJSON_AddStringToObject(a, "cwd", cwd);
	cJSON_AddNumberToObject(a, "cols", 200);
	cJSON_AddNumberToObject(a, "rows", 50);
	buf_free(&line);
	struct session_exec x = {.argv = av};
	session_exec_next(&x);
	/* session.open answers at once: through a detached call, then look */
	sw_call_detached("session.open", a);
	session_exec_next(NULL);
	for (size_t i = 0; i < ko; i++)
		free(own[i]);
	free(own);
	free(av);
	struct session *s = session_find(p->name);
	if (!s) {
		proc_report(p, -1, "termd could not start the process");
		proc_free(p);
		return;
	}
	if (timeout >= 0) {
		uint64_t us = timeout > 0 ? (uint64_t)(timeout * 1e6) : 1;
		p->deadline = mono_us() + us;
		server_timer(&p->timer, proc_timeout, us);
	}
}

/* ============================================= upgrade in place */

/* Each running process's timeout (what is left of it), as entries of the
 * door's part {"exec": name, "left_us"} (an older termd skips them: no
 * "name"): its request is cut by the upgrade, its tree still gets KILL at
 * its deadline. */
void sw_proc_handover_save(cJSON *a)
{
	uint64_t now = mono_us();
	for (struct swproc *p = procs; p; p = p->next) {
		if (p->ended || !p->deadline)
			continue;
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "exec", p->name);
		cJSON_AddNumberToObject(o, "left_us", p->deadline > now ?
					(double)(p->deadline - now) : 0.0);
		cJSON_AddItemToArray(a, o);
	}
}

/* before the sessions are adopted: on_started finds these */
void sw_proc_handover_load(const cJSON *o)
{
	const char *name = sw_jstr(o, "exec", NULL);
	double left = sw_jnum(o, "left_us", -1);
	if (!name || strlen(name) > TD_SESSION_NAME_MAX || left < 0)
		return;
	struct swproc *p = xcalloc(1, sizeof *p);
	snprintf(p->name, sizeof p->name, "%s", name);
	p->deadline = mono_us() + (uint64_t)left;
	p->next = procs;
	procs = p;
	server_timer(&p->timer, proc_timeout, left > 0 ? (uint64_t)left : 1);
}

/* after: one whose session did not come across ended meanwhile */
void sw_proc_handover_done(void)
{
	for (struct swproc *p = procs, *next; p; p = next) {
		next = p->next;
		if (!session_find(p->name))
			proc_free(p);
	}
}

/* ============================================================ /execute */

static void py_list_repr(buf_t *b, const cJSON *c)
{
	if (cJSON_IsString(c)) {
		sw_repr(b, c->valuestring, strlen(c->valuestring));
		return;
	}
	buf_putc(b, '[');
	const cJSON *e;
	int first = 1;
	cJSON_ArrayForEach(e, c) {
		if (!first)
			buf_puts(b, ", ");
		first = 0;
		const char *v = cJSON_IsString(e) ? e->valuestring : "";
		sw_repr(b, v, strlen(v));
	}
	buf_putc(b, ']');
}

static void executed(struct swreq *r, const buf_t *out, const buf_t *err, int code, int timed_out,
		     const char *why)
{
	if (why) {
		sw_raise(r, "builtins.RuntimeError", why, NULL);
		return;
	}
	if (timed_out) {
		buf_t m = {0};
		buf_puts(&m, "Timeout (");
		sw_float(&m, sw_jnum(r->body, "timeout", 0));
		buf_puts(&m, "s) exceeded while running command");
		sw_raise(r, "swerex.exceptions.CommandTimeoutError", m.p, NULL);
		buf_free(&m);
		return;
	}
	buf_t so = {0}, se = {0};
	sw_backslashreplace(&so, out->p ? out->p : "", out->len);
	sw_backslashreplace(&se, err->p ? err->p : "", err->len);
	if (sw_jbool(r->body, "check", 0) && code != 0) {
		buf_t m = {0};
		const char *em = sw_jstr(r->body, "error_msg", "");
		if (*em)
			buf_printf(&m, "%s: ", em);
		buf_puts(&m, "Command ");
		py_list_repr(&m, cJSON_GetObjectItemCaseSensitive(r->body, "command"));
		buf_printf(&m, " failed with exit code %d. Stdout:\n", code);
		sw_repr(&m, so.p ? so.p : "", so.len);
		buf_puts(&m, "\nStderr:\n");
		sw_repr(&m, se.p ? se.p : "", se.len);
		sw_raise(r, "swerex.exceptions.NonZeroExitCodeError", m.p, NULL);
		buf_free(&m);
	} else {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "stdout", so.p ? so.p : "");
		cJSON_AddStringToObject(o, "stderr", se.p ? se.p : "");
		cJSON_AddNumberToObject(o, "exit_code", code);
		sw_answer_obj(r, o);
	}
	buf_free(&so);
	buf_free(&se);
}

/* a program name as subprocess looks it up: found, or 0 */
static int program_found(const char *prog, const cJSON *env)
{
	if (strchr(prog, '/'))
		return access(prog, X_OK) == 0;
	const char *path = env ? sw_jstr(env, "PATH", "/bin:/usr/bin") : getenv("PATH");
	if (!path)
		path = "/bin:/usr/bin";
	for (const char *p = path;;) {
		const char *e = strchr(p, ':');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		buf_t f = {0};
		buf_printf(&f, "%.*s/%s", (int)l, l ? p : ".", prog);
		int ok = access(f.p, X_OK) == 0;
		buf_free(&f);
		if (ok)
			return 1;
		if (!e)
			return 0;
		p = e + 1;
	}
}

static void not_found(struct swreq *r, const char *what)
{
	buf_t m = {0};
	buf_puts(&m, "[Errno 2] No such file or directory: ");
	sw_repr(&m, what, strlen(what));
	sw_raise(r, "builtins.FileNotFoundError", m.p, NULL);
	buf_free(&m);
}

void sw_execute(struct http_txn *t)
{
	struct swreq *r = sw_req_new(t);
	r->body = cJSON_ParseWithLength(t->body.p ? t->body.p : "", t->body.len);
	if (!cJSON_IsObject(r->body)) {
		sw_answer_422(r, NULL, "JSON decode error");
		return;
	}
	const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(r->body, "command");
	if (!cJSON_IsString(cmd) && !cJSON_IsArray(cmd)) {
		sw_answer_422(r, "command", "Field required");
		return;
	}
	int shell = sw_jbool(r->body, "shell", 0);
	const cJSON *env = cJSON_GetObjectItemCaseSensitive(r->body, "env");
	if (!cJSON_IsObject(env))
		env = NULL;
	const char *cwd = sw_jstr(r->body, "cwd", NULL);
	struct stat st;
	if (cwd && stat(cwd, &st) != 0) {
		not_found(r, cwd);
		return;
	}
	const cJSON *to = cJSON_GetObjectItemCaseSensitive(r->body, "timeout");
	double timeout = cJSON_IsNumber(to) ? to->valuedouble : -1;
	size_t n = cJSON_IsArray(cmd) ? (size_t)cJSON_GetArraySize(cmd) : 1;
	char **argv = xcalloc(n + 4, sizeof *argv);
	size_t k = 0;
	if (shell) {   /* Popen(shell=True): /bin/sh -c args[0] args[1:] */
		argv[k++] = "/bin/sh";
		argv[k++] = "-c";
	}
	if (cJSON_IsString(cmd)) {
		argv[k++] = cmd->valuestring;
	} else {
		const cJSON *e;
		cJSON_ArrayForEach(e, cmd)
			argv[k++] = cJSON_IsString(e) ? e->valuestring : "";
	}
	argv[k] = NULL;
	if (k == (size_t)(shell ? 2 : 0)) {
		free(argv);
		sw_raise(r, "builtins.IndexError", "list index out of range", NULL);
		return;
	}
	if (!shell && !program_found(argv[0], env)) {
		not_found(r, argv[0]);
		free(argv);
		return;
	}
	sw_proc_start(r, argv, env, cwd, sw_jbool(r->body, "merge_output_streams", 0), timeout,
		      executed);
	free(argv);
}

void sw_exec_init(void)
{
	session_listen(&listener);
}

void sw_exec_shutdown(void)
{
	while (procs)
		proc_free(procs);
}
