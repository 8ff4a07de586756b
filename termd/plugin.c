/* plugin.c — the plugin host (PROTOCOL.md §7): finding plugins
 * (plugins/<name>/plugin.json), running each enabled plugin's setup once
 * per image in the background (a marker in the state folder), the
 * plugin.status events and plugin.list, registering each plugin's actions
 * in the action table (hidden from hello until the plugin is ready), and
 * talking to a plugin's program over its stdin/stdout, one JSON object a
 * line, several requests in flight: requests are pending actions, answers
 * are matched by termd's own request id, a dead program is started again
 * on the next action (restarted: true), and plugin processes end with
 * termd. A plugin that writes garbage, floods or hangs gets clear errors
 * and never stalls the loop: every fd is non-blocking in lws's loop. */
#include "termd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PLUGIN_LINE_MAX     (64u * 1024u * 1024u)  /* one answer line */
#define PLUGIN_READ_BUDGET  (1u * 1024u * 1024u)   /* bytes read per wakeup */
#define PLUGIN_TIMEOUT_S    120.0   /* an action's timeout when it gives none */
#define PLUGIN_GRACE_S      15.0    /* the program answers timeouts itself; this is termd's net */
#define SETUP_ERR_KEEP      8192    /* tail of a setup's stderr kept for its message */

enum pstate { P_OFF, P_INSTALLING, P_READY, P_FAILED };
static const char *const state_names[] = {"off", "installing", "ready", "failed"};

struct preq;

struct plugin {
	struct plugin *next;
	char *name, *version, *dir;
	char *setup, *run;        /* paths in dir, or NULL */
	cJSON *actions;           /* array of strings */
	cJSON *needs;             /* array of strings, or NULL */
	int enabled;
	enum pstate state;
	char *error;              /* "Failed to install <name> on <type>: <why>" */
	/* setup */
	pid_t setup_pid;
	struct lws *setup_wsi;    /* its stderr */
	buf_t setup_err;
	/* the program */
	pid_t pid;
	int in_fd;
	struct lws *in_wsi, *out_wsi;
	buf_t outq, rx;
	int died;                 /* it ran and ended: the next start says restarted */
	lws_sorted_usec_list_t eof_sul;  /* stdout closed: wait a moment for its exit status */
	char rundir[512];
	struct preq *reqs;        /* sent, waiting for their answer */
	struct preq *waiting;     /* waiting for the plugin to be ready */
};

/* One plugin action in flight: a pending action (first member). */
struct preq {
	struct pending p;
	struct preq *next;
	struct plugin *pl;
	uint64_t rid;             /* the id the program sees */
	char *action;
	cJSON *args;
	int restarted;
	lws_sorted_usec_list_t sul;
};

static struct plugin *plugins;
static char *plugin_dir;
static char *sandbox_type;
static const char *pkg_manager;
static uint64_t next_rid;
static int stopping;

static void plugin_setup_next(void);
static void program_dead(struct plugin *pl, const char *why);
static void program_eof(struct plugin *pl);

/* ------------------------------------------------------------- helpers */

static struct plugin *plugin_named(const char *name)
{
	for (struct plugin *pl = plugins; pl; pl = pl->next)
		if (strcmp(pl->name, name) == 0)
			return pl;
	return NULL;
}

static struct plugin *plugin_of_action(const char *action)
{
	for (struct plugin *pl = plugins; pl; pl = pl->next) {
		const cJSON *a;
		cJSON_ArrayForEach(a, pl->actions)
			if (cJSON_IsString(a) && strcmp(a->valuestring, action) == 0)
				return pl;
	}
	return NULL;
}

static void status_event(struct plugin *pl)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "name", pl->name);
	cJSON_AddStringToObject(ex, "state", state_names[pl->state]);
	if (pl->error)
		cJSON_AddStringToObject(ex, "error", pl->error);
	else
		cJSON_AddNullToObject(ex, "error");
	events_emit(NULL, NULL, "plugin.status", "", ex);
}

/* SANDBOX_TYPE: /etc/os-release's "ID VERSION_ID", else "unknown". */
static char *find_sandbox_type(void)
{
	FILE *f = fopen("/etc/os-release", "re");
	if (!f)
		f = fopen("/usr/lib/os-release", "re");
	char id[128] = "", ver[128] = "", line[512];
	while (f && fgets(line, sizeof line, f)) {
		char *v = strchr(line, '=');
		if (!v)
			continue;
		*v++ = 0;
		v[strcspn(v, "\r\n")] = 0;
		if (*v == '"' || *v == '\'') {
			size_t n = strlen(v);
			if (n >= 2 && v[n - 1] == v[0])
				v[n - 1] = 0;
			v++;
		}
		if (strcmp(line, "ID") == 0)
			snprintf(id, sizeof id, "%s", v);
		else if (strcmp(line, "VERSION_ID") == 0)
			snprintf(ver, sizeof ver, "%s", v);
	}
	if (f)
		fclose(f);
	if (!id[0])
		return xstrdup("unknown");
	buf_t b = {0};
	buf_printf(&b, "%s%s%s", id, ver[0] ? " " : "", ver);
	return buf_steal(&b);
}

static int on_path(const char *prog)
{
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	buf_t p = {0};
	int found = 0;
	for (const char *s = path; !found && *s;) {
		size_t n = strcspn(s, ":");
		buf_reset(&p);
		buf_printf(&p, "%.*s/%s", (int)n, s, prog);
		found = access(p.p, X_OK) == 0;
		s += n + (s[n] == ':');
	}
	buf_free(&p);
	return found;
}

static const char *find_pkg_manager(void)
{
	static const char *const pms[] = {"apt-get", "apk", "dnf", "yum", "microdnf"};
	for (size_t i = 0; i < sizeof pms / sizeof pms[0]; i++)
		if (on_path(pms[i]))
			return pms[i];
	return "";
}

static void set_nonblock(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* The environment every plugin process gets, set in the child. */
static void child_env(struct plugin *pl)
{
	setenv("PLUGIN", pl->name, 1);
	setenv("SANDBOX_TYPE", sandbox_type, 1);
	setenv("PKG_MANAGER", pkg_manager, 1);
	setenv("TERMD_PLUGIN_DIR", plugin_dir, 1);
	setenv("TERMD_PLUGINS", opts.plugins ? opts.plugins : "", 1);
	if (pl->rundir[0])
		setenv("TERMD_PLUGIN_RUNDIR", pl->rundir, 1);
	unsetenv("TERMD_TOKEN");
}

/* In the child: own process group, gone with termd, default signals, no
 * fd of termd's but 0-2. */
static void child_prepare(void)
{
	setsid();
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);
	long maxfd = sysconf(_SC_OPEN_MAX);
	if (maxfd < 0 || maxfd > 65536)
		maxfd = 65536;
	for (int i = 3; i < maxfd; i++)
		close(i);
}

/* ------------------------------------------------------------ manifests */

static char *json_str(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) && v->valuestring[0] ? xstrdup(v->valuestring) : NULL;
}

/* A file named in the manifest: inside the plugin's folder. */
static char *plugin_file(const char *dir, const char *name)
{
	if (!name || strstr(name, "..") || name[0] == '/')
		return NULL;
	buf_t b = {0};
	buf_printf(&b, "%s/%s", dir, name);
	return buf_steal(&b);
}

static struct plugin *load_manifest(const char *dir, const char *dname)
{
	buf_t path = {0}, data = {0};
	buf_printf(&path, "%s/plugin.json", dir);
	FILE *f = fopen(path.p, "re");
	buf_free(&path);
	if (!f)
		return NULL;
	char chunk[4096];
	size_t n;
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && data.len < (1u << 20))
		buf_append(&data, chunk, n);
	fclose(f);
	cJSON *m = data.p ? cJSON_ParseWithLength(data.p, data.len) : NULL;
	buf_free(&data);
	const cJSON *acts = m ? cJSON_GetObjectItemCaseSensitive(m, "actions") : NULL;
	char *name = m ? json_str(m, "name") : NULL;
	if (!cJSON_IsObject(m) || !name || !cJSON_IsArray(acts) || !td_valid_session_name(name)) {
		log_warn("plugin %s: plugin.json needs a name ([A-Za-z0-9_.-]) and an "
			 "actions array; left out", dname);
		free(name);
		cJSON_Delete(m);
		return NULL;
	}
	struct plugin *pl = xcalloc(1, sizeof *pl);
	pl->name = name;
	pl->version = json_str(m, "version");
	if (!pl->version)
		pl->version = xstrdup("0");
	pl->dir = xstrdup(dir);
	char *s = json_str(m, "setup"), *r = json_str(m, "run");
	pl->setup = plugin_file(dir, s);
	pl->run = plugin_file(dir, r);
	free(s);
	free(r);
	pl->actions = cJSON_CreateArray();
	const cJSON *a;
	cJSON_ArrayForEach(a, acts)
		if (cJSON_IsString(a) && a->valuestring[0])
			cJSON_AddItemToArray(pl->actions, cJSON_CreateString(a->valuestring));
	const cJSON *needs = cJSON_GetObjectItemCaseSensitive(m, "needs");
	if (cJSON_IsArray(needs))
		pl->needs = cJSON_Duplicate(needs, 1);
	pl->in_fd = -1;
	cJSON_Delete(m);
	return pl;
}

/* ------------------------------------------------------------- requests */

static void preq_free(struct preq *q)
{
	lws_sul_cancel(&q->sul);
	pending_del(&q->p);
	free(q->action);
	cJSON_Delete(q->args);
	free(q);
}

/* Out of whichever list of its plugin it is in. */
static void preq_unlink(struct preq *q)
{
	struct preq **lists[2] = {&q->pl->reqs, &q->pl->waiting};
	for (int l = 0; l < 2; l++) {
		for (struct preq **pp = lists[l]; *pp; pp = &(*pp)->next) {
			if (*pp == q) {
				*pp = q->next;
				return;
			}
		}
	}
}

static void preq_fail(struct preq *q, td_err code, const char *msg)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "code", td_err_name(code));
	if (q->restarted)
		cJSON_AddBoolToObject(ex, "restarted", 1);
	pending_emit(&q->p, "error", msg, ex);
	preq_unlink(q);
	preq_free(q);
}

static void preq_session_gone(struct pending *p)
{
	/* plugin actions name no session */
	(void)p;
}

static const struct pending_ops preq_ops = {"plugin", preq_session_gone};

static void preq_timeout(lws_sorted_usec_list_t *sul)
{
	struct preq *q = lws_container_of(sul, struct preq, sul);
	buf_t m = {0};
	if (q->pl->state == P_INSTALLING)
		buf_printf(&m, "plugin '%s' is still installing; try again once plugin.status says "
			   "ready", q->pl->name);
	else
		buf_printf(&m, "plugin '%s' did not answer '%s' in time", q->pl->name, q->action);
	preq_fail(q, q->pl->state == P_INSTALLING ? TD_ERR_BUSY : TD_ERR_INTERNAL, m.p);
	buf_free(&m);
}

/* ------------------------------------------------------------- programs */

static void program_close_fds(struct plugin *pl)
{
	struct lws *ws[2] = {pl->in_wsi, pl->out_wsi};
	for (int i = 0; i < 2; i++) {
		if (ws[i]) {
			lws_set_opaque_user_data(ws[i], NULL);
			lws_set_timeout(ws[i], PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
		}
	}
	pl->in_wsi = pl->out_wsi = NULL;
	pl->in_fd = -1;
	buf_reset(&pl->outq);
	buf_reset(&pl->rx);
}

static void flush_out(struct plugin *pl)
{
	while (pl->outq.len && pl->in_fd >= 0) {
		ssize_t w = write(pl->in_fd, pl->outq.p, pl->outq.len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			break;
		if (w <= 0) {
			program_dead(pl, "its stdin was closed");
			return;
		}
		buf_consume(&pl->outq, (size_t)w);
	}
	if (pl->outq.len && pl->in_wsi)
		lws_callback_on_writable(pl->in_wsi);
}

static const char *known_code(const char *c)
{
	for (int e = 0; e < TD_ERR__COUNT; e++)
		if (c && strcmp(c, td_err_name((td_err)e)) == 0)
			return c;
	return td_err_name(TD_ERR_INTERNAL);
}

/* One line from the program: the answer to one of its requests. */
static void answer_line(struct plugin *pl, const char *line, size_t len)
{
	while (len && (line[len - 1] == '\r' || line[len - 1] == ' '))
		len--;
	if (!len)
		return;
	cJSON *o = cJSON_ParseWithLength(line, len);
	const cJSON *id = o ? cJSON_GetObjectItemCaseSensitive(o, "id") : NULL;
	const cJSON *obs = o ? cJSON_GetObjectItemCaseSensitive(o, "observation") : NULL;
	struct preq *q = NULL;
	if (cJSON_IsNumber(id))
		for (q = pl->reqs; q && (double)q->rid != id->valuedouble; q = q->next)
			;
	if (!q || !cJSON_IsString(obs)) {
		log_warn("plugin %s: a line that answers no request of termd's, ignored: %.*s",
			 pl->name, (int)(len > 200 ? 200 : len), line);
		cJSON_Delete(o);
		return;
	}
	const cJSON *content = cJSON_GetObjectItemCaseSensitive(o, "content");
	cJSON *ex = cJSON_DetachItemFromObjectCaseSensitive(o, "extras");
	if (!cJSON_IsObject(ex)) {
		cJSON_Delete(ex);
		ex = cJSON_CreateObject();
	}
	if (strcmp(obs->valuestring, "error") == 0) {
		const cJSON *code = cJSON_GetObjectItemCaseSensitive(ex, "code");
		const char *c = known_code(cJSON_IsString(code) ? code->valuestring : NULL);
		char *keep = xstrdup(c);
		cJSON_DeleteItemFromObject(ex, "code");
		cJSON_AddStringToObject(ex, "code", keep);
		free(keep);
	}
	if (q->restarted) {
		cJSON_DeleteItemFromObject(ex, "restarted");
		cJSON_AddBoolToObject(ex, "restarted", 1);
	}
	pending_emit(&q->p, obs->valuestring,
		     cJSON_IsString(content) ? content->valuestring : "", ex);
	cJSON_Delete(o);
	preq_unlink(q);
	preq_free(q);
}

static void read_answers(struct plugin *pl)
{
	char buf[65536];
	size_t budget = PLUGIN_READ_BUDGET;
	while (budget && pl->out_wsi) {
		ssize_t n = read(lws_get_socket_fd(pl->out_wsi), buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			program_eof(pl);
			return;
		}
		budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
		buf_append(&pl->rx, buf, (size_t)n);
		size_t start = 0;
		char *nl;
		while ((nl = memchr(pl->rx.p + start, '\n', pl->rx.len - start))) {
			size_t end = (size_t)(nl - pl->rx.p);
			answer_line(pl, pl->rx.p + start, end - start);
			if (!pl->out_wsi)
				return;   /* an answer's emit cannot end it, but be safe */
			start = end + 1;
		}
		buf_consume(&pl->rx, start);
		if (pl->rx.len > PLUGIN_LINE_MAX) {
			kill(-pl->pid, SIGKILL);
			program_dead(pl, "it wrote a line over 64 MiB");
			return;
		}
	}
	if (pl->out_wsi)
		lws_callback_on_writable(pl->out_wsi);   /* more to read: come back */
}

static void eof_timer(lws_sorted_usec_list_t *sul)
{
	struct plugin *pl = lws_container_of(sul, struct plugin, eof_sul);
	program_dead(pl, "it closed its stdout");
}

/* stdout closed: the program is ending, most likely; its exit status
 * (child.c) says why, unless it keeps running without an stdout */
static void program_eof(struct plugin *pl)
{
	program_close_fds(pl);
	if (pl->pid > 0)
		server_timer(&pl->eof_sul, eof_timer, 500000);
	else
		program_dead(pl, "it closed its stdout");
}

static int out_event(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
{
	struct plugin *pl = arg;
	(void)wsi;
	if (!pl)
		return reason == LWS_CALLBACK_RAW_RX_FILE ? -1 : 0;
	switch (reason) {
	case LWS_CALLBACK_RAW_RX_FILE:
	case LWS_CALLBACK_RAW_WRITEABLE_FILE:
		read_answers(pl);
		break;
	case LWS_CALLBACK_RAW_CLOSE_FILE:
		if (pl->out_wsi == wsi) {
			pl->out_wsi = NULL;
			program_eof(pl);
		}
		break;
	default:
		break;
	}
	return 0;
}

static int in_event(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
{
	struct plugin *pl = arg;
	if (!pl)
		return 0;
	if (reason == LWS_CALLBACK_RAW_WRITEABLE_FILE)
		flush_out(pl);
	else if (reason == LWS_CALLBACK_RAW_CLOSE_FILE && pl->in_wsi == wsi)
		pl->in_wsi = NULL;
	return 0;
}

static void program_reaped(void *arg, pid_t pid, int st)
{
	struct plugin *pl = arg;
	if (pl->pid != pid)
		return;
	char why[96];
	if (WIFSIGNALED(st))
		snprintf(why, sizeof why, "it was killed by signal %d", WTERMSIG(st));
	else
		snprintf(why, sizeof why, "it exited with status %d", WEXITSTATUS(st));
	pl->pid = 0;
	program_dead(pl, why);
}

/* The program ended (or cannot be talked to): its requests fail; the next
 * action starts it again. */
static void program_dead(struct plugin *pl, const char *why)
{
	lws_sul_cancel(&pl->eof_sul);
	if (pl->pid > 0) {
		kill(-pl->pid, SIGKILL);
		/* its status still comes to program_reaped, which finds pid 0 */
		pl->pid = 0;
	}
	program_close_fds(pl);
	pl->died = 1;
	while (pl->reqs) {
		buf_t m = {0};
		buf_printf(&m, "the %s plugin's program ended while it ran this action (%s); "
			   "it is started again on the next action", pl->name, why);
		preq_fail(pl->reqs, TD_ERR_INTERNAL, m.p);
		buf_free(&m);
	}
}

static int program_start(struct plugin *pl, char *err, size_t errlen)
{
	if (!pl->run) {
		snprintf(err, errlen, "plugin '%s' has no program (plugin.json names no \"run\")",
			 pl->name);
		return -1;
	}
	if (!pl->rundir[0]) {
		snprintf(pl->rundir, sizeof pl->rundir, "%s/plugin-%s", srv.rundir, pl->name);
		mkdir(pl->rundir, 0700);
	}
	int in[2], out[2];
	if (pipe2(in, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "cannot start plugin '%s': %s", pl->name, strerror(errno));
		return -1;
	}
	if (pipe2(out, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "cannot start plugin '%s': %s", pl->name, strerror(errno));
		close(in[0]);
		close(in[1]);
		return -1;
	}
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "cannot start plugin '%s': %s", pl->name, strerror(errno));
		close(in[0]), close(in[1]), close(out[0]), close(out[1]);
		return -1;
	}
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		child_prepare();
		child_env(pl);
		const char *cwd = opts.cwd;
		struct session *m = session_find("main");
		if (m && m->cwd)
			cwd = m->cwd;
		if (chdir(cwd) != 0 && chdir(pl->dir) != 0)
			_exit(126);
		execl(pl->run, pl->run, (char *)NULL);
		fprintf(stderr, "termd: cannot run plugin program %s: %s\n", pl->run, strerror(errno));
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	set_nonblock(in[1]);
	set_nonblock(out[0]);
	pl->pid = pid;
	pl->in_fd = in[1];
	child_watch(pid, program_reaped, pl);
	pl->out_wsi = server_adopt_fd(out[0], out_event, pl);
	pl->in_wsi = server_adopt_fd(in[1], in_event, pl);
	if (!pl->out_wsi || !pl->in_wsi) {
		snprintf(err, errlen, "cannot watch plugin '%s''s pipes", pl->name);
		if (!pl->out_wsi)
			close(out[0]);
		if (!pl->in_wsi)
			close(in[1]);
		program_dead(pl, "termd could not watch its pipes");
		return -1;
	}
	log_info("plugin %s: program %s started (pid %d)", pl->name, pl->run, (int)pid);
	return 0;
}

/* Send a request to the program (started first if it is not running). */
static void preq_send(struct preq *q)
{
	struct plugin *pl = q->pl;
	if (pl->pid <= 0) {
		char err[512];
		int again = pl->died;
		if (program_start(pl, err, sizeof err) < 0) {
			preq_fail(q, TD_ERR_INTERNAL, err);
			return;
		}
		q->restarted = again;
		pl->died = 0;
	}
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "id", (double)q->rid);
	cJSON_AddStringToObject(o, "action", q->action);
	cJSON_AddItemToObject(o, "args", q->args ? cJSON_Duplicate(q->args, 1)
						 : cJSON_CreateObject());
	struct session *m = session_find("main");
	cJSON_AddStringToObject(o, "cwd", m && m->cwd ? m->cwd : opts.cwd);
	char *line = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	q->next = pl->reqs;
	pl->reqs = q;
	if (!line) {
		preq_fail(q, TD_ERR_INTERNAL, "cannot encode the request");
		return;
	}
	buf_puts(&pl->outq, line);
	buf_putc(&pl->outq, '\n');
	free(line);
	flush_out(pl);
}

/* ----------------------------------------------------------- the action */

static int plugin_action(struct act *a)
{
	struct plugin *pl = plugin_of_action(a->action);
	if (!pl)
		return act_error(a, TD_ERR_UNKNOWN_ACTION, "no plugin serves this action");
	if (!pl->enabled)
		return act_error(a, TD_ERR_BAD_REQUEST,
				 "action '%s' is served by the %s plugin, which termd was not started "
				 "with: start termd with --plugins %s (or --plugins all)",
				 a->action, pl->name, pl->name);
	if (pl->state == P_FAILED)
		return act_error(a, TD_ERR_PLUGIN_FAILED, "%s", pl->error);
	double timeout = PLUGIN_TIMEOUT_S;
	int has = 0;
	if (arg_number(a, "timeout", &timeout, &has) < 0)
		return -1;
	if (has && (timeout <= 0 || timeout > 86400))
		return act_error(a, TD_ERR_BAD_REQUEST, "timeout must be > 0 and at most 86400 seconds");
	struct preq *q = xcalloc(1, sizeof *q);
	q->pl = pl;
	q->rid = ++next_rid;
	q->action = xstrdup(a->action);
	q->args = a->args ? cJSON_Duplicate(a->args, 1) : NULL;
	pending_add(&q->p, &preq_ops, a, NULL);
	if (pl->state == P_INSTALLING) {
		/* waits for the setup, within the action's timeout */
		q->next = pl->waiting;
		pl->waiting = q;
		server_timer(&q->sul, preq_timeout, (uint64_t)(timeout * 1e6));
		return 0;
	}
	server_timer(&q->sul, preq_timeout, (uint64_t)((timeout + PLUGIN_GRACE_S) * 1e6));
	preq_send(q);
	return 0;
}

static int plugin_list_action(struct act *a)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON *arr = cJSON_AddArrayToObject(ex, "plugins");
	for (struct plugin *pl = plugins; pl; pl = pl->next) {
		if (!pl->enabled)
			continue;
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "name", pl->name);
		cJSON_AddStringToObject(o, "version", pl->version);
		cJSON_AddStringToObject(o, "state", state_names[pl->state]);
		cJSON_AddItemToObject(o, "actions", cJSON_Duplicate(pl->actions, 1));
		if (pl->error)
			cJSON_AddStringToObject(o, "error", pl->error);
		else
			cJSON_AddNullToObject(o, "error");
		cJSON_AddItemToArray(arr, o);
	}
	events_emit(a->conn, a->id, "plugin.list", "", ex);
	return 0;
}

/* (Re)register a plugin's actions: hidden from hello until it is ready. */
static void register_actions(struct plugin *pl)
{
	const cJSON *a;
	cJSON_ArrayForEach(a, pl->actions) {
		struct action_def d = {a->valuestring, plugin_action,
				       pl->state == P_READY ? 0 : ACT_HIDDEN};
		actions_register(&d, 1);
	}
}

/* --------------------------------------------------------------- setups */

static void set_state(struct plugin *pl, enum pstate st, const char *why)
{
	pl->state = st;
	if (st == P_FAILED && !pl->error) {
		buf_t m = {0};
		buf_printf(&m, "Failed to install %s on %s: %s", pl->name, sandbox_type,
			   why && *why ? why : "its setup failed");
		pl->error = buf_steal(&m);
	}
	register_actions(pl);
	status_event(pl);
	/* actions that waited for it */
	while (pl->waiting) {
		struct preq *q = pl->waiting;
		pl->waiting = q->next;
		if (st == P_FAILED) {
			q->next = NULL;
			pl->reqs = q;   /* preq_fail unlinks it from here */
			preq_fail(q, TD_ERR_PLUGIN_FAILED, pl->error);
		} else {
			lws_sul_cancel(&q->sul);
			double timeout = PLUGIN_TIMEOUT_S;
			const cJSON *t = q->args ? cJSON_GetObjectItemCaseSensitive(q->args, "timeout") : NULL;
			if (cJSON_IsNumber(t) && t->valuedouble > 0)
				timeout = t->valuedouble;
			server_timer(&q->sul, preq_timeout, (uint64_t)((timeout + PLUGIN_GRACE_S) * 1e6));
			preq_send(q);
		}
	}
}

static char *marker_path(struct plugin *pl)
{
	buf_t b = {0};
	buf_printf(&b, "%s/plugins/%s-%s.installed", opts.state_dir, pl->name, pl->version);
	return buf_steal(&b);
}

static void write_marker(struct plugin *pl)
{
	buf_t d = {0};
	buf_printf(&d, "%s/plugins", opts.state_dir);
	mkdir(opts.state_dir, 0755);
	mkdir(d.p, 0755);
	buf_free(&d);
	char *p = marker_path(pl);
	FILE *f = fopen(p, "we");
	if (f) {
		fprintf(f, "%s %s on %s\n", pl->name, pl->version, sandbox_type);
		fclose(f);
	} else {
		log_warn("plugin %s: cannot write %s: %s (setup runs again next time)", pl->name, p,
			 strerror(errno));
	}
	free(p);
}

/* The last non-empty line of what the setup wrote to stderr. */
static char *last_line(buf_t *b)
{
	size_t end = b->len;
	while (end && (b->p[end - 1] == '\n' || b->p[end - 1] == '\r' || b->p[end - 1] == ' '))
		end--;
	size_t start = end;
	while (start && b->p[start - 1] != '\n')
		start--;
	return end > start ? xstrndup(b->p + start, end - start) : NULL;
}

static void setup_read(struct plugin *pl)
{
	if (!pl->setup_wsi)
		return;
	char buf[4096];
	for (;;) {
		ssize_t n = read(lws_get_socket_fd(pl->setup_wsi), buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		buf_append(&pl->setup_err, buf, (size_t)n);
		if (pl->setup_err.len > SETUP_ERR_KEEP)
			buf_consume(&pl->setup_err, pl->setup_err.len - SETUP_ERR_KEEP / 2);
	}
}

static void setup_close(struct plugin *pl)
{
	if (pl->setup_wsi) {
		lws_set_opaque_user_data(pl->setup_wsi, NULL);
		lws_set_timeout(pl->setup_wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
		pl->setup_wsi = NULL;
	}
}

static int setup_event(struct lws *wsi, enum lws_callback_reasons reason, void *arg)
{
	struct plugin *pl = arg;
	if (!pl)
		return reason == LWS_CALLBACK_RAW_RX_FILE ? -1 : 0;
	if (reason == LWS_CALLBACK_RAW_RX_FILE) {
		setup_read(pl);
	} else if (reason == LWS_CALLBACK_RAW_CLOSE_FILE && pl->setup_wsi == wsi) {
		pl->setup_wsi = NULL;
	}
	return 0;
}

static void setup_reaped(void *arg, pid_t pid, int st)
{
	struct plugin *pl = arg;
	(void)pid;
	pl->setup_pid = 0;
	setup_read(pl);   /* what is left in the pipe */
	setup_close(pl);
	if (stopping)
		return;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		write_marker(pl);
		set_state(pl, P_READY, NULL);
	} else {
		char *why = last_line(&pl->setup_err);
		if (!why) {
			buf_t m = {0};
			if (WIFSIGNALED(st))
				buf_printf(&m, "its setup was killed by signal %d", WTERMSIG(st));
			else
				buf_printf(&m, "its setup exited with status %d", WEXITSTATUS(st));
			why = buf_steal(&m);
		}
		set_state(pl, P_FAILED, why);
		free(why);
	}
	buf_free(&pl->setup_err);
	plugin_setup_next();
}

static void setup_start(struct plugin *pl)
{
	int err[2];
	if (pipe2(err, O_CLOEXEC) < 0) {
		set_state(pl, P_FAILED, strerror(errno));
		return;
	}
	pid_t pid = fork();
	if (pid < 0) {
		close(err[0]);
		close(err[1]);
		set_state(pl, P_FAILED, strerror(errno));
		return;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);
		dup2(null, 0);
		dup2(null, 1);
		dup2(err[1], 2);
		child_prepare();
		child_env(pl);
		if (chdir(pl->dir) != 0)
			_exit(126);
		execl("/bin/sh", "sh", pl->setup, (char *)NULL);
		fprintf(stderr, "cannot run %s: %s\n", pl->setup, strerror(errno));
		_exit(127);
	}
	close(err[1]);
	set_nonblock(err[0]);
	pl->setup_pid = pid;
	child_watch(pid, setup_reaped, pl);
	pl->setup_wsi = server_adopt_fd(err[0], setup_event, pl);
	if (!pl->setup_wsi)
		close(err[0]);   /* its last line is lost; the exit status still counts */
	log_info("plugin %s: setup %s started (pid %d)", pl->name, pl->setup, (int)pid);
}

/* Whether every plugin pl needs is ready (1), failed (-1, *which), or not
 * yet (0). */
static int needs_state(struct plugin *pl, const char **which)
{
	const cJSON *n;
	int wait = 0;
	cJSON_ArrayForEach(n, pl->needs) {
		struct plugin *d = cJSON_IsString(n) ? plugin_named(n->valuestring) : NULL;
		if (!d || !d->enabled || d->state == P_FAILED) {
			*which = cJSON_IsString(n) ? n->valuestring : "?";
			return -1;
		}
		if (d->state != P_READY)
			wait = 1;
	}
	return wait ? 0 : 1;
}

/* One setup at a time (package managers take a lock), needs first. */
static void plugin_setup_next(void)
{
	if (stopping)
		return;
	for (struct plugin *pl = plugins; pl; pl = pl->next)
		if (pl->setup_pid > 0)
			return;
	int progress = 1;
	while (progress) {
		progress = 0;
		for (struct plugin *pl = plugins; pl; pl = pl->next) {
			if (!pl->enabled || pl->state != P_INSTALLING)
				continue;
			const char *which = NULL;
			int ns = needs_state(pl, &which);
			if (ns < 0) {
				buf_t m = {0};
				buf_printf(&m, "it needs the %s plugin, which is not enabled or failed "
					   "(--plugins)", which);
				set_state(pl, P_FAILED, m.p);
				buf_free(&m);
				progress = 1;
				continue;
			}
			if (ns == 0)
				continue;
			char *marker = marker_path(pl);
			int done = !pl->setup || access(marker, F_OK) == 0;
			free(marker);
			if (done) {
				set_state(pl, P_READY, NULL);
				progress = 1;
				continue;
			}
			setup_start(pl);
			if (pl->setup_pid > 0)
				return;
			progress = 1;
		}
	}
}

/* --------------------------------------------------------- start, stop */

static char *default_plugin_dir(void)
{
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = 0;
		char *slash = strrchr(exe, '/');
		if (slash)
			*slash = 0;
		static const char *const rel[] = {"plugins", "../plugins", "../share/termd/plugins"};
		for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
			buf_t b = {0};
			buf_printf(&b, "%s/%s", exe, rel[i]);
			struct stat st;
			if (stat(b.p, &st) == 0 && S_ISDIR(st.st_mode))
				return buf_steal(&b);
			buf_free(&b);
		}
	}
	return xstrdup("/usr/share/termd/plugins");
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int plugin_init(char *err, size_t errlen)
{
	static const struct action_def own[] = {
		/* the view token gets subscribe, session.list, screen and ping
		 * only (PROTOCOL.md §1) */
		{"plugin.list", plugin_list_action, 0},
	};
	actions_register(own, 1);
	plugin_dir = opts.plugin_dir ? xstrdup(opts.plugin_dir) : default_plugin_dir();
	sandbox_type = find_sandbox_type();
	pkg_manager = find_pkg_manager();
	/* every plugin found, so that an action of one not enabled can say so */
	DIR *d = opendir(plugin_dir);
	char **names = NULL;
	size_t nn = 0;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		names = xrealloc(names, (nn + 1) * sizeof *names);
		names[nn++] = xstrdup(e->d_name);
	}
	if (d)
		closedir(d);
	qsort(names, nn, sizeof *names, cmp_names);
	struct plugin **tail = &plugins;
	for (size_t i = 0; i < nn; i++) {
		buf_t dir = {0};
		buf_printf(&dir, "%s/%s", plugin_dir, names[i]);
		struct plugin *pl = load_manifest(dir.p, names[i]);
		buf_free(&dir);
		free(names[i]);
		if (!pl)
			continue;
		if (plugin_named(pl->name)) {
			log_warn("plugin %s: a second plugin of that name in %s, left out", pl->name,
				 plugin_dir);
			plugin_free(pl);
			continue;
		}
		*tail = pl;
		tail = &pl->next;
	}
	free(names);
	/* --plugins: a,b,… or all */
	const char *want = opts.plugins ? opts.plugins : "";
	int all = strcmp(want, "all") == 0;
	for (const char *s = want; !all && *s;) {
		size_t n = strcspn(s, ",");
		if (n) {
			char name[128];
			snprintf(name, sizeof name, "%.*s", (int)(n < 127 ? n : 127), s);
			struct plugin *pl = plugin_named(name);
			if (!pl) {
				snprintf(err, errlen, "--plugins: no plugin named '%s' in %s", name,
					 plugin_dir);
				return -1;
			}
			pl->enabled = 1;
		}
		s += n + (s[n] == ',');
	}
	for (struct plugin *pl = plugins; pl; pl = pl->next) {
		if (all)
			pl->enabled = 1;
		pl->state = pl->enabled ? P_INSTALLING : P_OFF;
		register_actions(pl);
		if (pl->enabled)
			status_event(pl);
	}
	plugin_setup_next();
	return 0;
}

/* Plugin processes end with termd: stdin closed (a polite EOF), then the
 * whole process group killed. */
void plugin_stop_all(void)
{
	stopping = 1;
	/* their pipes go with the loop; SIGTERM lets a program end its
	 * kernel or browser itself, SIGKILL follows */
	for (struct plugin *pl = plugins; pl; pl = pl->next)
		program_close_fds(pl);
	uint64_t deadline = mono_us() + 1500000;
	for (struct plugin *pl = plugins; pl; pl = pl->next) {
		pid_t ps[2] = {pl->pid, pl->setup_pid};
		for (int i = 0; i < 2; i++) {
			if (ps[i] <= 0)
				continue;
			kill(-ps[i], SIGTERM);
			while (mono_us() < deadline && waitpid(ps[i], NULL, WNOHANG) == 0)
				usleep(10000);
			kill(-ps[i], SIGKILL);
			waitpid(ps[i], NULL, 0);
			child_unwatch(ps[i]);
		}
		pl->pid = pl->setup_pid = 0;
		setup_close(pl);
	}
}

void plugin_free(struct plugin *pl)
{
	lws_sul_cancel(&pl->eof_sul);
	while (pl->reqs) {
		struct preq *q = pl->reqs;
		pl->reqs = q->next;
		preq_free(q);
	}
	while (pl->waiting) {
		struct preq *q = pl->waiting;
		pl->waiting = q->next;
		preq_free(q);
	}
	free(pl->name);
	free(pl->version);
	free(pl->dir);
	free(pl->setup);
	free(pl->run);
	free(pl->error);
	cJSON_Delete(pl->actions);
	cJSON_Delete(pl->needs);
	buf_free(&pl->setup_err);
	buf_free(&pl->outq);
	buf_free(&pl->rx);
	free(pl);
}

void plugin_shutdown(void)
{
	while (plugins) {
		struct plugin *pl = plugins;
		plugins = pl->next;
		plugin_free(pl);
	}
	free(plugin_dir);
	free(sandbox_type);
	plugin_dir = sandbox_type = NULL;
}
