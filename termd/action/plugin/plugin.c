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
#include "plugin.h"

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

const char *const state_names[] = {"off", "installing", "ready", "failed"};

struct plugin *plugins;
static char *plugin_dir;
char *sandbox_type;
const char *pkg_manager;
uint64_t next_rid;
int stopping;

/* ------------------------------------------------------------- helpers */

struct plugin *plugin_named(const char *name)
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

void status_event(struct plugin *pl)
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
void set_nonblock(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* The environment every plugin process gets, set in the child. */
void child_env(struct plugin *pl)
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
void child_prepare(void)
{
	setsid();
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	cgroup_child_join(NULL);   /* oom_score_adj 0 again: termd's -1000 is termd's */
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);
	close_fds_from(3);
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

/* ----------------------------------------------------------- the action */

static int plugin_action(struct act *a)
{
	/* its arguments go to the plugin whole: termd names none as ignored
	 * (the plugin may, in its answer's extras.ignored_args) */
	act_args_all_read(a);
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
void plugin_register_actions(struct plugin *pl)
{
	const cJSON *a;
	cJSON_ArrayForEach(a, pl->actions) {
		struct action_def d = {a->valuestring, plugin_action,
				       pl->state == P_READY ? 0 : ACT_HIDDEN};
		actions_register(&d, 1);
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
	if (nn)   /* names is NULL when there are none: qsort wants a pointer */
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
				buf_t there = {0};
				for (struct plugin *p = plugins; p; p = p->next)
					buf_printf(&there, "%s%s", there.len ? ", " : "", p->name);
				snprintf(err, errlen, "--plugins: no plugin named '%s' in %s (there %s: %s)",
					 name, plugin_dir, plugins && plugins->next ? "are" : "is",
					 there.len ? there.p : "none");
				buf_free(&there);
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
		plugin_register_actions(pl);
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
	lws_sul_cancel(&pl->in_sul);
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
