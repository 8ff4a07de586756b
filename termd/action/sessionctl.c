/* sessionctl.c — the session management actions: `session.open`,
 * `session.list`, `session.signal` and `session.close` (ending a session's
 * whole process tree: HUP, then KILL after 2 s, then freeing it once its
 * process is reaped). */
#include "action.h"

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
	cJSON_AddNumberToObject(o, "pid", s->pty.pid);
	cJSON_AddBoolToObject(o, "alive", s->pty.alive);
	if (s->pty.alive)
		cJSON_AddNullToObject(o, "exit_code");
	else
		cJSON_AddNumberToObject(o, "exit_code", s->pty.exit_code);
	const char *running = NULL;
	if (s->pty.alive) {
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

static int session_open_action(struct act *a)
{
	const char *name = NULL, *command = NULL, *cwd = NULL;
	double cols = 0, rows = 0;
	int has;
	if (arg_session_name(a, "name", 1, &name) < 0 ||
	    arg_string(a, "command", &command, 0) < 0 ||
	    arg_string(a, "cwd", &cwd, 0) < 0 ||
	    arg_number(a, "cols", &cols, &has) < 0 ||
	    arg_number(a, "rows", &rows, &has) < 0)
		return -1;
	const cJSON *env = a->args ? cJSON_GetObjectItemCaseSensitive(a->args, "env") : NULL;
	if (env && !cJSON_IsNull(env)) {
		const cJSON *e;
		if (!cJSON_IsObject(env)) {
			act_error(a, TD_ERR_BAD_REQUEST, "'env' must be an object of strings");
			return -1;
		}
		cJSON_ArrayForEach(e, env) {
			if (!cJSON_IsString(e) || !e->string || !*e->string || strchr(e->string, '=')) {
				act_error(a, TD_ERR_BAD_REQUEST, "'env' must be an object of strings");
				return -1;
			}
		}
	} else {
		env = NULL;
	}
	if ((cols && (cols < 2 || cols > 1000)) || (rows && (rows < 1 || rows > 1000))) {
		act_error(a, TD_ERR_BAD_REQUEST, "cols must be 2-1000 and rows 1-1000");
		return -1;
	}
	if (session_find(name)) {
		act_error(a, TD_ERR_SESSION_EXISTS, "a session named '%s' exists", name);
		return -1;
	}
	if (command && !*command)
		command = NULL;
	char err[256];
	td_err code;
	struct session *s = session_open(name, command, cwd, env, (int)cols, (int)rows, &code,
					 err, sizeof err);
	if (!s)
		return act_error(a, code, "cannot open session '%s': %s", name, err);
	if (command)
		cmd_program_started(s);
	sessionctl_announce(a->conn, a->id, s);
	return 0;
}

void sessionctl_announce(struct conn *c, const cJSON *id, struct session *s)
{
	events_emit(c, id, "session.open", "", session_json(s));
}

static int session_list_action(struct act *a)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON *arr = cJSON_AddArrayToObject(ex, "sessions");
	for (struct session *s = srv.sessions; s; s = s->next)
		cJSON_AddItemToArray(arr, session_json(s));
	events_emit(a->conn, a->id, "session.list", "", ex);
	return 0;
}

static int session_signal_action(struct act *a)
{
	const char *signame = NULL;
	struct session *s;
	if (arg_string(a, "signal", &signame, 1) < 0 ||
	    arg_session(a, "session", 0, &s, NULL) < 0)
		return -1;
	int sig = signal_by_name(signame);
	if (!sig) {
		act_error(a, TD_ERR_BAD_REQUEST,
			     "unknown signal '%.32s' (INT TERM KILL HUP QUIT STOP CONT USR1 USR2)", signame);
		return -1;
	}
	if (!s->pty.alive) {
		act_error(a, TD_ERR_NO_COMMAND, "session '%s' has ended (exit code %d)",
			     s->name, s->pty.exit_code);
		return -1;
	}
	pid_t pg = session_fg_pid(s);
	if (kill(-pg, sig) != 0 && kill(pg, sig) != 0) {
		act_error(a, TD_ERR_IO_ERROR, "cannot signal process group %d", (int)pg);
		return -1;
	}
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "session", s->name);
	cJSON_AddStringToObject(ex, "signal", signame);
	cJSON_AddNumberToObject(ex, "pid", pg);
	events_emit(a->conn, a->id, "session.signal", "", ex);
	return 0;
}

/* Every process whose session id is the session leader's: the shell, its
 * jobs in their own process groups, and their children. */
static void signal_tree(struct session *s, int sig)
{
	if (s->pty.pid <= 0)
		return;
	if (s->pty.alive)   /* once reaped, its pid may belong to someone else */
		kill(-s->pty.pid, sig);
	DIR *d = opendir("/proc");
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		char st;
		pid_t pg, sid;
		if (*end || pid <= 0 || proc_stat((pid_t)pid, &st, &pg, &sid) < 0 || sid != s->pty.pid)
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
	if (!s->pty.alive)
		session_destroy(s);
}

static int session_close_action(struct act *a)
{
	const char *name = NULL;
	if (arg_session_name(a, "name", 0, &name) < 0)
		return -1;
	if (!name && arg_session_name(a, "session", 1, &name) < 0)
		return -1;
	if (strcmp(name, "main") == 0) {
		act_error(a, TD_ERR_BAD_REQUEST,
			     "main cannot be closed (use session.signal, or run exit to restart it)");
		return -1;
	}
	struct session *s = session_find(name);
	if (!s) {
		act_error(a, TD_ERR_NO_SUCH_SESSION, "no session named '%.64s'", name);
		return -1;
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
	int was_alive = s->pty.alive;
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "name", s->name);
	cJSON_AddBoolToObject(ex, "was_alive", was_alive);
	events_emit(a->conn, a->id, "session.close", "", ex);
	if (was_alive) {
		signal_tree(s, SIGHUP);
		server_timer(&s->close_sul, close_kill_timer, CLOSE_KILL_DELAY_US);
	} else {
		s->close_killed = 1;
		session_destroy(s);
	}
	return 0;
}

/* The session's process ended: the session.exit event (after the
 * listeners registered before: answers, viewers' exit frames). */
static void sessionctl_on_exit(struct session *s)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddStringToObject(ex, "name", s->name);
	cJSON_AddNumberToObject(ex, "exit_code", s->pty.exit_code);
	int sig = s->pty.exit_signal;
	const char *signame = sig ? sigabbrev_np(sig) : NULL;
	if (signame)
		cJSON_AddStringToObject(ex, "signal", signame);   /* "KILL", as session.signal names it */
	else if (sig)
		cJSON_AddNumberToObject(ex, "signal", sig);
	else
		cJSON_AddNullToObject(ex, "signal");
	events_emit(NULL, NULL, "session.exit", "", ex);
}

void sessionctl_register(void)
{
	static const struct session_listener l = {.exit = sessionctl_on_exit};
	session_listen(&l);
	static const struct action_def defs[] = {
		{"session.open", session_open_action, 0},
		{"session.list", session_list_action, ACT_READONLY},
		{"session.signal", session_signal_action, 0},
		{"session.close", session_close_action, 0},
	};
	actions_register(defs, sizeof defs / sizeof defs[0]);
}
