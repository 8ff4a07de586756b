/* termctl-manage.c — termctl's commands on termd's sessions and on termd
 * itself: session list/open/stdin/close/signal (the table of sessions
 * with their limits' use), ports, port wait, subscribe (resumed after an
 * upgrade in place with no gap) and upgrade (reconnecting for the answer). */
#include "termctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* "12M/64M": a session's use of one limit (usage KEY over limits KEY);
 * bytes in K/M/G when mem. "-" when termd reports neither. */
static void ctl_use(const cJSON *s, const char *key, int mem, char *out, size_t n)
{
	const cJSON *u = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s, "usage"),
							  key);
	const cJSON *l = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s, "limits"),
							  key);
	char ub[24] = "-", lb[24] = "";
	const cJSON *v[2] = { u, l };
	char *b[2] = { ub, lb };
	for (int i = 0; i < 2; i++) {
		if (!cJSON_IsNumber(v[i]))
			continue;
		double x = v[i]->valuedouble;
		static const char *const units[] = { "", "K", "M", "G" };
		int k = 0;
		while (mem && k < 3 && x >= 1024) {
			x /= 1024;
			k++;
		}
		snprintf(b[i], 24, x < 10 && k && x != (double)(long long)x ? "%.1f%s" : "%.0f%s", x,
			 units[k]);
	}
	if (!cJSON_IsNumber(u) && !cJSON_IsNumber(l))
		snprintf(out, n, "-");
	else
		snprintf(out, n, "%s%s%s", ub, *lb ? "/" : "", lb);
}

static int ctl_print_sessions(const cJSON *obs)
{
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(ctl_extras(obs), "sessions");
	if (!cJSON_IsArray(list))
		ctl_die("session.list: no sessions array in the answer");
	int wname = 4, wpid = 3;
	const cJSON *s;
	cJSON_ArrayForEach(s, list) {
		const char *n = td_json_str(s, "name");
		if (n && (int)strlen(n) > wname)
			wname = (int)strlen(n);
		const cJSON *pid = cJSON_GetObjectItemCaseSensitive(s, "pid");
		char b[32];
		if (cJSON_IsNumber(pid) && snprintf(b, sizeof b, "%.0f", pid->valuedouble) > wpid)
			wpid = (int)strlen(b);
	}
	printf("%-*s  %*s  %-5s  %-11s  %-7s  %-20s  %s\n", wname, "NAME", wpid, "PID", "ALIVE",
	       "MEMORY", "PIDS", "COMMAND", "CWD");
	cJSON_ArrayForEach(s, list) {
		const char *n = td_json_str(s, "name"), *cmd = td_json_str(s, "command"), *cwd = td_json_str(s, "cwd");
		const cJSON *pid = cJSON_GetObjectItemCaseSensitive(s, "pid");
		char pb[32] = "-";
		if (cJSON_IsNumber(pid))
			snprintf(pb, sizeof pb, "%.0f", pid->valuedouble);
		const char *alive = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "alive")) ? "yes" : "no";
		char mem[64], pids[64];
		ctl_use(s, "memory", 1, mem, sizeof mem);
		ctl_use(s, "pids", 0, pids, sizeof pids);
		printf("%-*s  %*s  %-5s  %-11s  %-7s  %-20s  %s\n", wname, n ? n : "?", wpid, pb, alive,
		       mem, pids, cmd && *cmd ? cmd : "-", cwd ? cwd : "-");
	}
	return 0;
}

/* args.limits, made on first use. */
static cJSON *ctl_limits(cJSON *args)
{
	cJSON *l = cJSON_GetObjectItemCaseSensitive(args, "limits");
	return l ? l : cJSON_AddObjectToObject(args, "limits");
}

/* session open NAME [options]: the session.open action. */
static cJSON *session_open_action(int argc, char **argv)
{
	const char *name = NULL, *v;
	cJSON *args, *act = td_action_new("session.open", &args);
	cJSON *env = NULL;
	for (int i = 1; i < argc; i++) {
		if (ctl_opt(argc, argv, &i, NULL, "--cmd", &v)) {
			cJSON_AddStringToObject(args, "command", v);
		} else if (ctl_opt(argc, argv, &i, NULL, "--cwd", &v)) {
			cJSON_AddStringToObject(args, "cwd", v);
		} else if (ctl_opt(argc, argv, &i, NULL, "--cols", &v)) {
			cJSON_AddNumberToObject(args, "cols", ctl_number(v, "--cols"));
		} else if (ctl_opt(argc, argv, &i, NULL, "--rows", &v)) {
			cJSON_AddNumberToObject(args, "rows", ctl_number(v, "--rows"));
		} else if (ctl_flag(argv[i], NULL, "--pipe")) {
			cJSON_AddStringToObject(args, "kind", "pipe");
		} else if (ctl_flag(argv[i], NULL, "--stdin")) {
			cJSON_AddBoolToObject(args, "stdin", 1);
		} else if (ctl_opt(argc, argv, &i, NULL, "--memory", &v)) {
			if (*v && v[strspn(v, "0123456789")])   /* 64M: termd reads the suffix */
				cJSON_AddStringToObject(ctl_limits(args), "memory", v);
			else
				cJSON_AddNumberToObject(ctl_limits(args), "memory", ctl_number(v, "--memory"));
		} else if (ctl_opt(argc, argv, &i, NULL, "--pids", &v)) {
			cJSON_AddNumberToObject(ctl_limits(args), "pids", ctl_number(v, "--pids"));
		} else if (ctl_opt(argc, argv, &i, NULL, "--cpu", &v)) {
			cJSON_AddNumberToObject(ctl_limits(args), "cpu", ctl_number(v, "--cpu"));
		} else if (ctl_opt(argc, argv, &i, NULL, "--env", &v)) {
			const char *eq = strchr(v, '=');
			if (!eq || eq == v)
				ctl_usage_die("--env wants NAME=VALUE, not '%s'", v);
			if (!env)
				env = cJSON_AddObjectToObject(args, "env");
			char *k = strndup(v, (size_t)(eq - v));
			cJSON_DeleteItemFromObjectCaseSensitive(env, k);
			cJSON_AddStringToObject(env, k, eq + 1);
			free(k);
		} else if (argv[i][0] == '-') {
			ctl_usage_die("session open: unknown option %s", argv[i]);
		} else if (!name) {
			name = argv[i];
		} else {
			ctl_usage_die("session open: unexpected argument %s", argv[i]);
		}
	}
	if (!name)
		ctl_usage_die("session open: NAME missing");
	cJSON_AddStringToObject(args, "name", name);
	return act;
}

int ctl_cmd_session(ctl_t *x, int argc, char **argv)
{
	if (argc < 1)
		ctl_usage_die("session: list, open, stdin, close or signal?");
	const char *sub = argv[0];
	cJSON *args, *act;
	if (!strcmp(sub, "list")) {
		if (argc != 1)
			ctl_usage_die("session list: unexpected argument %s", argv[1]);
		cJSON *obs = ctl_call(x, td_action_new("session.list", NULL), -1);
		if (ctl_is_error(obs, 0))
			return ctl_finish(obs, EXIT_PROTO);
		ctl_print_sessions(obs);
		return ctl_finish(obs, 0);
	} else if (!strcmp(sub, "open")) {
		act = session_open_action(argc, argv);
	} else if (!strcmp(sub, "stdin")) {
		const char *name = NULL, *text = NULL;
		int eof = 0;
		for (int i = 1; i < argc; i++) {
			if (ctl_flag(argv[i], NULL, "--eof"))
				eof = 1;
			else if (!name)
				name = argv[i];
			else if (!text)
				text = argv[i];
			else
				ctl_usage_die("session stdin: unexpected argument %s", argv[i]);
		}
		if (!name || (!text && !eof))
			ctl_usage_die("usage: termctl session stdin NAME [--eof] [TEXT|-]");
		act = td_action_new("session.stdin", &args);
		cJSON_AddStringToObject(args, "session", name);
		if (text && !strcmp(text, "-")) {
			size_t n;
			char *all = ctl_read_stdin_n(&n);
			char *b64 = malloc(4 * ((n + 2) / 3) + 1);
			if (!b64)
				ctl_die("out of memory");
			td_base64_encode(all, n, b64);
			cJSON_AddStringToObject(args, "content", b64);
			cJSON_AddStringToObject(args, "encoding", "base64");
			free(b64);
			free(all);
		} else if (text) {
			cJSON_AddStringToObject(args, "content", text);
		}
		if (eof)
			cJSON_AddBoolToObject(args, "eof", 1);
	} else if (!strcmp(sub, "close")) {
		if (argc != 2)
			ctl_usage_die("usage: termctl session close NAME");
		act = td_action_new("session.close", &args);
		cJSON_AddStringToObject(args, "name", argv[1]);
	} else if (!strcmp(sub, "signal")) {
		const char *pos[2] = { NULL, NULL };
		int tree = 0, npos = 0;
		for (int i = 1; i < argc; i++) {
			if (ctl_flag(argv[i], NULL, "--tree"))
				tree = 1;
			else if (npos < 2 && (argv[i][0] != '-' || npos == 1))
				pos[npos++] = argv[i];
			else
				ctl_usage_die("usage: termctl session signal NAME SIG [--tree]");
		}
		if (npos != 2)
			ctl_usage_die("usage: termctl session signal NAME SIG [--tree]");
		act = td_action_new("session.signal", &args);
		cJSON_AddStringToObject(args, "session", pos[0]);
		/* the name as given: termd knows the names (with or without SIG,
		 * in any case) and answers bad_request for any other */
		cJSON_AddStringToObject(args, "signal", pos[1]);
		if (tree)
			cJSON_AddBoolToObject(args, "tree", 1);
	} else {
		ctl_usage_die("session: unknown subcommand %s (list, open, stdin, close, signal)", sub);
	}
	cJSON *obs = ctl_call(x, act, -1);
	if (ctl_is_error(obs, 0))
		return ctl_finish(obs, EXIT_PROTO);
	/* a signal that reached no job (the shell at its prompt got it) */
	if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(ctl_extras(obs), "job"))) {
		const char *msg = td_json_str(obs, "content");
		const char *t = msg ? strstr(msg, "tree: true") : NULL;
		if (t)   /* termctl's name for it */
			fprintf(stderr, "termd: %.*s--tree%s\n", (int)(t - msg), msg, t + 10);
		else
			fprintf(stderr, "termd: %s\n", msg && *msg ? msg : "no foreground job to signal");
		return ctl_finish(obs, 1);
	}
	ctl_print_content(obs);
	return ctl_finish(obs, 0);
}

/* Sends subscribe (since, when >= 0) on x's connection, opening it. */
static void subscribe_send(ctl_t *x, double since)
{
	cJSON *args, *act = td_action_new("subscribe", &args);
	if (since >= 0)
		cJSON_AddNumberToObject(args, "since", since);
	td_client *c = ctl_conn(x);
	char *txt = cJSON_PrintUnformatted(act);
	cJSON_Delete(act);
	if (td_send(c, 0, txt, strlen(txt)) < 0)
		ctl_die("%s: %s", x->url, td_error(c));
	free(txt);
}

/* After close code 1012 (termd upgraded in place): connect again, within a
 * minute; 0 when it could not. */
static int subscribe_reconnect(ctl_t *x)
{
	char err[512];
	uint64_t deadline = mono_us() + 60000000;
	td_close(x->c);
	x->c = NULL;
	while (mono_us() < deadline) {
		x->c = td_connect(x->url, TD_PATH_EVENTS, TD_SUBPROTO_EVENTS, x->token, err, sizeof err);
		if (x->c) {
			td_set_id_prefix(x->c, "termctl");
			return 1;
		}
		usleep(50000);
	}
	return 0;
}

int ctl_cmd_subscribe(ctl_t *x, int argc, char **argv)
{
	const char *since = NULL;
	for (int i = 0; i < argc; i++)
		if (!ctl_opt(argc, argv, &i, NULL, "--since", &since))
			ctl_usage_die("subscribe: unexpected argument %s", argv[i]);
	double last = since ? ctl_number(since, "--since") : -1;
	subscribe_send(x, last);
	char err[512];
	for (;;) {
		cJSON *obs;
		int r = td_recv_json(x->c, &obs, -1, err, sizeof err);
		if (r <= 0) {
			/* upgraded in place: resume from the last event seen, no gap */
			if (td_close_code(x->c) == 1012 && subscribe_reconnect(x)) {
				subscribe_send(x, last);
				continue;
			}
			ctl_die("%s: %s", x->url, err);
		}
		const char *o = td_json_str(obs, "observation");
		const cJSON *seq = cJSON_GetObjectItemCaseSensitive(obs, "seq");
		if (o && !strcmp(o, "hello")) {
			/* nothing seen yet: resume after what was there at the start */
			const cJSON *hs = cJSON_GetObjectItemCaseSensitive(ctl_extras(obs), "seq");
			if (last < 0 && cJSON_IsNumber(hs))
				last = hs->valuedouble;
		} else {
			if (cJSON_IsNumber(seq) && seq->valuedouble > last)
				last = seq->valuedouble;
			char *out = cJSON_PrintUnformatted(obs);
			puts(out);
			fflush(stdout);
			free(out);
		}
		cJSON_Delete(obs);
	}
}

int ctl_cmd_ports(ctl_t *x, int argc, char **argv)
{
	if (argc)
		ctl_usage_die("ports: unexpected argument %s", argv[0]);
	cJSON *obs = ctl_call(x, td_action_new("ports.list", NULL), -1);
	if (ctl_is_error(obs, 0))
		return ctl_finish(obs, EXIT_PROTO);
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(ctl_extras(obs), "ports");
	if (!cJSON_IsArray(list))
		ctl_die("ports.list: no ports array in the answer");
	printf("%-5s  %-15s  %-12s  %7s  %s\n", "PORT", "ADDRESS", "SESSION", "PID", "COMMAND");
	const cJSON *p;
	cJSON_ArrayForEach(p, list) {
		const cJSON *port = cJSON_GetObjectItemCaseSensitive(p, "port");
		const cJSON *pid = cJSON_GetObjectItemCaseSensitive(p, "pid");
		const char *a = td_json_str(p, "address"), *s = td_json_str(p, "session");
		const char *c = td_json_str(p, "command");
		buf_t safe = {0};   /* a program's name: no control character reaches the terminal */
		buf_put_text(&safe, c && *c ? c : "-", strlen(c && *c ? c : "-"));
		printf("%-5.0f  %-15s  %-12s  %7.0f  %s\n", cJSON_IsNumber(port) ? port->valuedouble : 0,
		       a ? a : "?", s ? s : "?", cJSON_IsNumber(pid) ? pid->valuedouble : 0, safe.p);
		buf_free(&safe);
	}
	return ctl_finish(obs, 0);
}

int ctl_cmd_port(ctl_t *x, int argc, char **argv)
{
	const char *v, *port = NULL;
	double timeout = -1;
	if (argc < 1 || strcmp(argv[0], "wait"))
		ctl_usage_die("usage: termctl port wait PORT [--timeout S]");
	for (int i = 1; i < argc; i++) {
		if (ctl_opt(argc, argv, &i, NULL, "--timeout", &v))
			timeout = ctl_number(v, "--timeout");
		else if (!port)
			port = argv[i];
		else
			ctl_usage_die("port wait: unexpected argument %s", argv[i]);
	}
	if (!port)
		ctl_usage_die("port wait: PORT missing");
	cJSON *args, *act = td_action_new("port.wait", &args);
	cJSON_AddNumberToObject(args, "port", ctl_number(port, "PORT"));
	if (timeout >= 0)
		cJSON_AddNumberToObject(args, "timeout", timeout);
	cJSON *obs = ctl_call(x, act, -1);
	if (ctl_is_error(obs, 0))
		return ctl_finish(obs, EXIT_PROTO);
	ctl_print_content(obs);
	int ready = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ctl_extras(obs), "ready"));
	return ctl_finish(obs, ready ? 0 : 1);
}

/* termd.upgrade: a successful one closes the connection (1012), so
 * termctl reconnects and re-sends the same id, whose answer termd kept */
int ctl_cmd_upgrade(ctl_t *x, int argc, char **argv)
{
	cJSON *args;
	cJSON *act = td_action_new("termd.upgrade", &args);
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--binary") && i + 1 < argc)
			cJSON_AddStringToObject(args, "binary", argv[++i]);
		else
			ctl_usage_die("upgrade: unexpected argument %s", argv[i]);
	}
	char err[512];
	cJSON *obs = td_call(ctl_conn(x), act, 60000, err, sizeof err);
	uint64_t deadline = mono_us() + 60000000;
	while (!obs && x->c && td_close_code(x->c) == 1012 && mono_us() < deadline) {
		td_close(x->c);
		x->c = NULL;
		while (!x->c && mono_us() < deadline) {
			x->c = td_connect(x->url, TD_PATH_EVENTS, TD_SUBPROTO_EVENTS, x->token, err,
					  sizeof err);
			if (!x->c)
				usleep(50000);
		}
		if (x->c)
			obs = td_call(x->c, act, 60000, err, sizeof err);
	}
	cJSON_Delete(act);
	if (!obs)
		ctl_die("%s: %s", x->url, err);
	if (ctl_is_error(obs, 0))
		return ctl_finish(obs, EXIT_PROTO);
	const cJSON *ex = ctl_extras(obs);
	int ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ex, "ok"));
	const char *msg = td_json_str(ex, "message");
	if (ok)
		puts("upgraded");
	else
		fprintf(stderr, "termctl: upgrade failed: %s\n", msg ? msg : "?");
	return ctl_finish(obs, ok ? 0 : 1);
}
