/* sessionctl.c — the session management actions: `session.open`,
 * `session.list`, `session.signal` and `session.close` (ending a session's
 * whole process tree: HUP, then KILL after 2 s, then freeing it once its
 * process is reaped). */
#include "termd.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CLOSE_KILL_DELAY_US 2000000u

static const struct {
	const char *name;
	int sig;
} signals[] = {
	{"INT", SIGINT}, {"TERM", SIGTERM}, {"KILL", SIGKILL}, {"HUP", SIGHUP},
	{"QUIT", SIGQUIT}, {"STOP", SIGSTOP}, {"CONT", SIGCONT}, {"USR1", SIGUSR1},
	{"USR2", SIGUSR2},
};

static int signal_by_name(const char *n)
{
	if (strncasecmp(n, "SIG", 3) == 0)
		n += 3;
	for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
		if (strcasecmp(signals[i].name, n) == 0)
			return signals[i].sig;
	return 0;
}

static cJSON *session_json(struct session *s)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "name", s->name);
	cJSON_AddNumberToObject(o, "pid", s->pid);
	cJSON_AddBoolToObject(o, "alive", s->alive);
	if (s->alive)
		cJSON_AddNullToObject(o, "exit_code");
	else
		cJSON_AddNumberToObject(o, "exit_code", s->exit_code);
	const char *running = NULL;
	if (s->alive) {
		if (!s->is_shell)
			running = s->command;
		else if (s->state == SH_RUNNING && s->cmd && !s->cmd->finished)
			running = s->cmd->text ? s->cmd->text : "";
	}
	if (running)
		cJSON_AddStringToObject(o, "command", running);
	else
		cJSON_AddNullToObject(o, "command");
	cJSON_AddStringToObject(o, "cwd", s->cwd ? s->cwd : "");
	cJSON_AddNumberToObject(o, "cols", s->cols);
	cJSON_AddNumberToObject(o, "rows", s->rows);
	cJSON_AddNumberToObject(o, "viewers", s->nviewers);
	cJSON_AddBoolToObject(o, "shell", s->is_shell);
	return o;
}

void session_open_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	const char *name = NULL, *command = NULL, *cwd = NULL;
	double cols = 0, rows = 0;
	int has;
	if (arg_string(c, id, args, "name", &name, 1) < 0 ||
	    arg_string(c, id, args, "command", &command, 0) < 0 ||
	    arg_string(c, id, args, "cwd", &cwd, 0) < 0 ||
	    arg_number(c, id, args, "cols", &cols, &has) < 0 ||
	    arg_number(c, id, args, "rows", &rows, &has) < 0)
		return;
	const cJSON *env = args ? cJSON_GetObjectItemCaseSensitive(args, "env") : NULL;
	if (env && !cJSON_IsNull(env)) {
		const cJSON *e;
		if (!cJSON_IsObject(env)) {
			events_error(c, id, TD_ERR_BAD_REQUEST, "'env' must be an object of strings");
			return;
		}
		cJSON_ArrayForEach(e, env) {
			if (!cJSON_IsString(e) || !e->string || !*e->string || strchr(e->string, '=')) {
				events_error(c, id, TD_ERR_BAD_REQUEST, "'env' must be an object of strings");
				return;
			}
		}
	} else {
		env = NULL;
	}
	if (!td_valid_session_name(name)) {
		events_error(c, id, TD_ERR_BAD_REQUEST,
			     "session names are 1-64 characters of A-Z a-z 0-9 _ . -");
		return;
	}
	if ((cols && (cols < 2 || cols > 1000)) || (rows && (rows < 1 || rows > 1000))) {
		events_error(c, id, TD_ERR_BAD_REQUEST, "cols must be 2-1000 and rows 1-1000");
		return;
	}
	if (session_find(name)) {
		events_error(c, id, TD_ERR_SESSION_EXISTS, "a session named '%s' exists", name);
		return;
	}
	if (command && !*command)
		command = NULL;
	char err[256];
	struct session *s = session_open(name, command, cwd, env, (int)cols, (int)rows, err, sizeof err);
	if (!s) {
		events_error(c, id, (size_t)srv.nsessions >= opts.max_sessions ? TD_ERR_TOO_LARGE
			     : TD_ERR_INTERNAL, "cannot open session '%s': %s", name, err);
		return;
	}
	if (command)
		run_program_started(s);
	events_emit(c, id, "session.open", "", session_json(s));
}

void session_list_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	(void)args;
	cJSON *ex = cJSON_CreateObject();
	cJSON *arr = cJSON_AddArrayToObject(ex, "sessions");
	for (struct session *s = srv.sessions; s; s = s->next)
		cJSON_AddItemToArray(arr, session_json(s));
	events_emit(c, id, "session.list", "", ex);
}

void session_signal_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	const char *name = "main", *signame = NULL;
	if (arg_string(c, id, args, "session", &name, 0) < 0 ||
	    arg_string(c, id, args, "signal", &signame, 1) < 0)
		return;
	int sig = signal_by_name(signame);
	if (!sig) {
		events_error(c, id, TD_ERR_BAD_REQUEST,
			     "unknown signal '%.32s' (INT TERM KILL HUP QUIT STOP CONT USR1 USR2)", signame);
		return;
	}
	struct session *s = session_find(name);
	if (!s) {
		events_error(c, id, TD_ERR_NO_SUCH_SESSION, "no session named '%.64s'", name);
		return;
	}
	if (!s->alive) {
		events_error(c, id, TD_ERR_NO_COMMAND, "session '%s' has ended (exit code %d)",
			     s->name, s->exit_code);
		return;
	}
	pid_t pg = session_fg_pid(s);
	if (kill(-pg, sig) != 0 && kill(pg, sig) != 0) {
		events_error(c, id, TD_ERR_IO_ERROR, "cannot signal process group %d", (int)pg);
		return;
	}
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "session", s->name);
	cJSON_AddStringToObject(ex, "signal", signame);
	cJSON_AddNumberToObject(ex, "pid", pg);
	events_emit(c, id, "session.signal", "", ex);
}

/* Every process whose session id is the session leader's: the shell, its
 * jobs in their own process groups, and their children. */
static void signal_tree(struct session *s, int sig)
{
	if (s->pid <= 0)
		return;
	if (s->alive)   /* once reaped, its pid may belong to someone else */
		kill(-s->pid, sig);
	DIR *d = opendir("/proc");
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		char st;
		pid_t pg, sid;
		if (*end || pid <= 0 || proc_stat((pid_t)pid, &st, &pg, &sid) < 0 || sid != s->pid)
			continue;
		kill((pid_t)pid, sig);
		if (sig == SIGHUP)
			kill((pid_t)pid, SIGCONT);
	}
	closedir(d);
}

static void close_kill_timer(lws_sorted_usec_list_t *sul)
{
	struct session *s = lws_container_of(sul, struct session, close_sul);
	/* the leader may be gone already; its session id still names the rest */
	signal_tree(s, SIGKILL);
	s->close_killed = 1;
	if (!s->alive)
		session_destroy(s);
}

void session_close_action(struct conn *c, const cJSON *id, const cJSON *args)
{
	const char *name = NULL;
	if (arg_string(c, id, args, "name", &name, 0) < 0)
		return;
	if (!name && arg_string(c, id, args, "session", &name, 1) < 0)
		return;
	if (strcmp(name, "main") == 0) {
		events_error(c, id, TD_ERR_BAD_REQUEST,
			     "main cannot be closed (use session.signal, or run exit to restart it)");
		return;
	}
	struct session *s = session_find(name);
	if (!s) {
		events_error(c, id, TD_ERR_NO_SUCH_SESSION, "no session named '%.64s'", name);
		return;
	}
	/* out of the list at once: the name is free again */
	for (struct session **pp = &srv.sessions; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	srv.nsessions--;
	s->next = srv.closing;
	srv.closing = s;
	s->closing = 1;
	int was_alive = s->alive;
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "name", s->name);
	cJSON_AddBoolToObject(ex, "was_alive", was_alive);
	events_emit(c, id, "session.close", "", ex);
	if (was_alive) {
		signal_tree(s, SIGHUP);
		server_timer(&s->close_sul, close_kill_timer, CLOSE_KILL_DELAY_US);
	} else {
		s->close_killed = 1;
		session_destroy(s);
	}
}
