/* setup.c — plugin setups (PROTOCOL.md §7): the image's
 * SANDBOX_TYPE and package manager, each enabled plugin's setup script run
 * once per image in the background (a marker in the state folder), its
 * stderr's last line as the failure's reason, plugins that need another
 * waiting for it, and the plugin.status states. */
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

char *find_sandbox_type(void)
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

const char *find_pkg_manager(void)
{
	static const char *const pms[] = {"apt-get", "apk", "dnf", "yum", "microdnf"};
	for (size_t i = 0; i < sizeof pms / sizeof pms[0]; i++)
		if (on_path(pms[i]))
			return pms[i];
	return "";
}

/* --------------------------------------------------------------- setups */

void set_state(struct plugin *pl, enum pstate st, const char *why)
{
	pl->state = st;
	if (st == P_FAILED && !pl->error) {
		buf_t m = {0};
		buf_printf(&m, "Failed to install %s on %s: %s", pl->name, sandbox_type,
			   why && *why ? why : "its setup failed");
		pl->error = buf_steal(&m);
	}
	plugin_register_actions(pl);
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

void setup_close(struct plugin *pl)
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
void plugin_setup_next(void)
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

