/* termctl.c — termd's scriptable command-line client: global options, one
 * connection to /events through proto/client.h (ws://, wss:// with
 * --cacert, or unix:), the helpers its commands share (termctl.h), and a
 * table of commands that each send one action and turn its observation
 * into output and an exit status: here those on a session's terminal (run,
 * keys, screen, expect) and ping, raw; session, subscribe, ports, port and
 * upgrade are termctl-manage.c's. */
#include "termctl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_text[] =
	"usage: termctl [--url URL] [--token T | --token-file F] [--cacert F] [--wait S]\n"
	"               COMMAND ...\n"
	"\n"
	"Talks to a termd daemon over its events channel.\n"
	"URL defaults to $TERMD_URL, else " TD_DEFAULT_URL " (also wss://HOST:PORT\n"
	"for TLS, unix:/path.sock); the token defaults to $TERMD_TOKEN. wss:// checks\n"
	"termd's certificate against the system's CAs, or against the certificates\n"
	"in --cacert F (default $TERMD_CACERT); TERMD_TLS_INSECURE=1 skips the check\n"
	"(for testing only). --wait S gives up after S seconds without an answer\n"
	"(default: ping 10 s, everything else waits).\n"
	"\n"
	"commands:\n"
	"  run [-s SESSION] [--timeout S] [--idle-timeout S] [--input] [--max-output N] COMMAND...\n"
	"      run COMMAND (words joined by spaces; '-' reads it from stdin) in the\n"
	"      session's shell and print its output; exit with its exit code, or 124\n"
	"      if it is still running (timed out or waiting for input: it says\n"
	"      what for and how to answer, e.g. \"termd: waiting for a password\").\n"
	"      With no\n"
	"      COMMAND, wait again for the running one. --input types the text into\n"
	"      the running program instead (C-c, C-d… are sent as control keys).\n"
	"      A command killed for its session's memory limit: \"termd: killed:\n"
	"      out of memory (session limit M)\" on stderr.\n"
	"  keys [-s SESSION] [--settle-ms N] [--timeout S] KEY...\n"
	"      send keys (tmux names: Enter, Escape, C-c, Up, F1… or literal text)\n"
	"      and print the screen afterwards\n"
	"  screen [-s SESSION]            print the visible screen\n"
	"  expect [-s SESSION] [--timeout S] REGEX\n"
	"      wait for REGEX in new output; print the text up to the match;\n"
	"      exit 0 if it matched, 1 if not\n"
	"  ping                           print \"pong\"\n"
	"  raw JSON|-                     send one action (an id is added if missing)\n"
	"                                 and print its observation as one JSON line\n"
	"  session list                   table of sessions: name pid alive, memory and\n"
	"                                 pids (used/limit), command cwd\n"
	"  session open NAME [--cmd C] [--cwd D] [--cols N] [--rows N] [--env K=V]...\n"
	"               [--pipe [--stdin]]  --pipe: C runs without a terminal, stdout\n"
	"                                 and stderr apart (session.output events)\n"
	"               [--memory M] [--pids N] [--cpu F]  limits of the session's\n"
	"                                 cgroup: memory in bytes or with K/M/G, the\n"
	"                                 number of processes, a fraction of one core\n"
	"  session stdin NAME [--eof] [TEXT|-]  write TEXT (or all of stdin, bytes as\n"
	"                                 they are) to the session's input; --eof then\n"
	"                                 closes a pipe session's stdin\n"
	"  session close NAME\n"
	"  session signal NAME SIG [--tree]  SIG: INT TERM KILL HUP QUIT STOP CONT USR1\n"
	"                                 USR2 (with or without SIG, any case; no numbers)\n"
	"                                 to the foreground job; exit 1 when there is\n"
	"                                 none (the shell at its prompt got it). --tree:\n"
	"                                 to every process the session started\n"
	"  subscribe [--since SEQ]        print every event as a JSON line, until closed;\n"
	"                                 after an upgrade in place it resumes by itself\n"
	"  ports                          table of the ports sessions' programs listen on:\n"
	"                                 port address session pid command\n"
	"  port wait PORT [--timeout S]   wait until PORT accepts connections (default 30 s);\n"
	"                                 exit 0 if it does, 1 at the timeout\n"
	"  upgrade [--binary PATH]        upgrade termd in place (default: its own path,\n"
	"                                 read again); reconnects for the answer; exit 1\n"
	"                                 when termd refused it (still serving)\n"
	"\n"
	"Exit status: the command's own (see above); 2 on usage, connection or\n"
	"protocol errors and on error observations (\"termctl: CODE: message\" on\n"
	"stderr; `raw` still prints the observation).\n";

/* ---- helpers ---- */

void ctl_die(const char *fmt, ...)
{
	va_list ap;
	fputs("termctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(EXIT_PROTO);
}

void ctl_usage_die(const char *fmt, ...)
{
	va_list ap;
	fputs("termctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n(termctl --help for usage)\n", stderr);
	exit(EXIT_PROTO);
}

double ctl_number(const char *s, const char *what)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (!*s || *end || errno || v < 0)
		ctl_usage_die("%s: not a number >= 0: '%s'", what, s);
	return v;
}

/* Matches argv[*i] against -s / --long / --long=VALUE; takes the value. */
int ctl_opt(int argc, char **argv, int *i, const char *shrt, const char *lng,
	    const char **val)
{
	const char *a = argv[*i];
	size_t ll = strlen(lng);
	if (!strncmp(a, lng, ll) && a[ll] == '=') {
		*val = a + ll + 1;
		return 1;
	}
	if (strcmp(a, lng) && (!shrt || strcmp(a, shrt)))
		return 0;
	if (*i + 1 >= argc)
		ctl_usage_die("%s needs a value", a);
	*val = argv[++*i];
	return 1;
}

int ctl_flag(const char *a, const char *shrt, const char *lng)
{
	return !strcmp(a, lng) || (shrt && !strcmp(a, shrt));
}

static char *ctl_read_stdin(void)
{
	return ctl_read_stdin_n(NULL);
}

/* all of stdin (NUL-terminated too), its length in *out_len */
char *ctl_read_stdin_n(size_t *out_len)
{
	size_t cap = 4096, len = 0;
	char *b = malloc(cap);
	size_t n;
	if (!b)
		ctl_die("out of memory");
	while ((n = fread(b + len, 1, cap - len - 1, stdin)) > 0) {
		len += n;
		if (cap - len < 2) {
			cap *= 2;
			b = realloc(b, cap);
			if (!b)
				ctl_die("out of memory");
		}
	}
	if (ferror(stdin))
		ctl_die("reading stdin: %s", strerror(errno));
	b[len] = '\0';
	if (out_len)
		*out_len = len;
	return b;
}

static char *ctl_join(int argc, char **argv)
{
	size_t n = 1;
	for (int i = 0; i < argc; i++)
		n += strlen(argv[i]) + 1;
	char *s = malloc(n);
	if (!s)
		ctl_die("out of memory");
	s[0] = '\0';
	for (int i = 0; i < argc; i++) {
		if (i)
			strcat(s, " ");
		strcat(s, argv[i]);
	}
	return s;
}

td_client *ctl_conn(ctl_t *x)
{
	if (x->c)
		return x->c;
	char err[512];
	x->c = td_connect(x->url, TD_PATH_EVENTS, TD_SUBPROTO_EVENTS, x->token, err, sizeof err);
	if (!x->c)
		ctl_die("cannot connect to %s: %s", x->url, err);
	td_set_id_prefix(x->c, "termctl");
	return x->c;
}

/* The answer names arguments termd did not read (PROTOCOL.md §2: a
 * misspelled name, or one this termd is too old to know): said on stderr,
 * whatever the command prints. */
static void ctl_warn_ignored(const cJSON *action, const cJSON *obs)
{
	const cJSON *ex = cJSON_GetObjectItemCaseSensitive(obs, "extras");
	const cJSON *names = cJSON_GetObjectItemCaseSensitive(ex, "ignored_args");
	if (!cJSON_IsArray(names) || !cJSON_GetArraySize(names))
		return;
	const char *act = td_json_str(action, "action");
	fprintf(stderr, "termctl: warning: termd did not read the argument%s",
		cJSON_GetArraySize(names) > 1 ? "s" : "");
	const cJSON *n;
	int first = 1;
	cJSON_ArrayForEach(n, names) {
		if (!cJSON_IsString(n))
			continue;
		fprintf(stderr, "%s'%s'", first ? " " : ", ", n->valuestring);
		first = 0;
	}
	fprintf(stderr, " of '%s' (misspelled, or not known to this termd)\n", act ? act : "?");
}

/* Sends action, returns its observation (never NULL: dies instead). */
cJSON *ctl_call(ctl_t *x, cJSON *action, int default_wait_ms)
{
	td_client *c = ctl_conn(x);
	char err[512];
	int wait = x->wait_ms >= 0 ? x->wait_ms : default_wait_ms;
	cJSON *obs = td_call(c, action, wait, err, sizeof err);
	if (!obs) {
		cJSON_Delete(action);
		ctl_die("%s: %s", x->url, err);
	}
	ctl_warn_ignored(action, obs);
	cJSON_Delete(action);
	return obs;
}

const cJSON *ctl_extras(const cJSON *obs)
{
	return cJSON_GetObjectItemCaseSensitive(obs, "extras");
}

/* If obs is an error observation: message on stderr, returns 1. */
int ctl_is_error(const cJSON *obs, int quiet)
{
	const char *o = td_json_str(obs, "observation");
	if (!o || strcmp(o, "error"))
		return 0;
	if (!quiet) {
		const char *code = td_json_str(ctl_extras(obs), "code");
		const char *msg = td_json_str(obs, "content");
		fprintf(stderr, "termctl: %s: %s\n", code ? code : "error", msg ? msg : "");
	}
	return 1;
}

/* Prints content, with a final newline if it is non-empty and has none. */
void ctl_print_content(const cJSON *obs)
{
	const char *s = td_json_str(obs, "content");
	if (!s || !*s)
		return;
	size_t n = strlen(s);
	fwrite(s, 1, n, stdout);
	if (s[n - 1] != '\n')
		putchar('\n');
}

/* Adds "session" to args when given. */
static void ctl_add_session(cJSON *args, const char *session)
{
	if (session)
		cJSON_AddStringToObject(args, "session", session);
}

int ctl_finish(cJSON *obs, int rc)
{
	cJSON_Delete(obs);
	return rc;
}

/* ---- commands ---- */

/* What a program waiting for input waits for (extras.waiting), on stderr,
 * and how to answer it: "termd: waiting for a password (pid 42: sudo
 * true)", then "termd: answer with termctl run --input TEXT …". */
static void print_waiting(const cJSON *w, const char *session)
{
	static const struct { const char *kind, *what, *how; } kinds[] = {
		{"line", "waiting for a line of input",
		 "answer with: termctl run%s%s --input TEXT (or --input C-c to interrupt it)"},
		{"password", "waiting for a password",
		 "answer with: termctl run%s%s --input PASSWORD (or --input C-c to interrupt it)"},
		{"key", "waiting for a key",
		 "answer with: termctl keys%s%s KEY (y, Enter, q, C-c...)"},
		{"pager", "waiting in a pager (q quits)",
		 "answer with: termctl keys%s%s q (or Space for the next page)"},
		{"editor", "waiting in an editor",
		 "see it with termctl screen%s%s; answer with termctl keys%s%s KEY..."},
	};
	const char *kind = td_json_str(w, "kind");
	const char *what = NULL, *how = NULL;
	for (size_t i = 0; kind && i < sizeof kinds / sizeof kinds[0]; i++)
		if (strcmp(kind, kinds[i].kind) == 0) {
			what = kinds[i].what;
			how = kinds[i].how;
		}
	if (!what) {   /* a termd before 1.3, or a kind this termctl does not know */
		fprintf(stderr, "termd: still running (waiting for input)\n");
		return;
	}
	int shell = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(w, "shell"));
	if (shell) {
		what = "waiting for a command line";
		how = "a shell at its prompt: termctl run%s%s --input 'COMMAND' (or --input exit "
		      "to leave it)";
	}
	const cJSON *pid = cJSON_GetObjectItemCaseSensitive(w, "pid");
	const char *command = td_json_str(w, "command");
	/* the program's name is the program's: no control character of it
	 * (an escape sequence) reaches the terminal, whatever termd sent */
	buf_t safe = {0};
	if (command)
		buf_put_text(&safe, command, strnlen(command, 200));
	if (cJSON_IsNumber(pid) && safe.len)
		fprintf(stderr, "termd: %s (pid %.0f: %s)\n", what, pid->valuedouble, safe.p);
	else
		fprintf(stderr, "termd: %s\n", what);
	buf_free(&safe);
	const char *s_opt = session && strcmp(session, "main") ? " -s " : "";
	const char *s_name = *s_opt ? session : "";
	fputs("termd: ", stderr);
	fprintf(stderr, how, s_opt, s_name, s_opt, s_name);
	fputc('\n', stderr);
}

/* extras.shell_starting / shell_not_reading: the command is queued, not
 * typed yet: "termd: the shell of session main is still starting (4.2 s;
 * running: sleep 3): the command is queued; termctl run waits for it". */
static void print_not_typed(const cJSON *st, int starting, const char *session)
{
	const cJSON *ms = cJSON_GetObjectItemCaseSensitive(st, "for_ms");
	const char *running = td_json_str(st, "running");
	fprintf(stderr, "termd: the shell of session %s %s (%.1f s%s%.200s): the command is "
		"queued, typed at its prompt; `termctl run%s%s` (no command) waits for it\n",
		session, starting ? "is still starting" : "is up but does not read yet",
		cJSON_IsNumber(ms) ? ms->valuedouble / 1000 : 0, running && *running ? "; running: " : "",
		running ? running : "", strcmp(session, "main") ? " -s " : "",
		strcmp(session, "main") ? session : "");
}

/* extras.killed "oom": "termd: killed: out of memory (session limit 64M)". */
static void print_oom(const cJSON *limit)
{
	if (!cJSON_IsNumber(limit) || limit->valuedouble <= 0) {
		fprintf(stderr, "termd: killed: out of memory (session limit)\n");
		return;
	}
	double v = limit->valuedouble;
	static const char units[] = "GMK";
	for (int k = 0; k < 3; k++) {
		double u = (double)(1ULL << (10 * (3 - k)));
		if (v >= u && v / u == (double)(unsigned long long)(v / u)) {
			fprintf(stderr, "termd: killed: out of memory (session limit %.0f%c)\n", v / u,
				units[k]);
			return;
		}
	}
	fprintf(stderr, "termd: killed: out of memory (session limit %.0f bytes)\n", v);
}

static int cmd_run(ctl_t *x, int argc, char **argv)
{
	const char *session = NULL, *v;
	double timeout = -1, idle = -1, maxout = -1;
	int input = 0, i;
	for (i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--")) {
			i++;
			break;
		}
		if (a[0] != '-' || !strcmp(a, "-"))
			break;
		if (ctl_opt(argc, argv, &i, "-s", "--session", &session))
			continue;
		if (ctl_opt(argc, argv, &i, NULL, "--timeout", &v))
			timeout = ctl_number(v, "--timeout");
		else if (ctl_opt(argc, argv, &i, NULL, "--idle-timeout", &v))
			idle = ctl_number(v, "--idle-timeout");
		else if (ctl_opt(argc, argv, &i, NULL, "--max-output", &v))
			maxout = ctl_number(v, "--max-output");
		else if (ctl_flag(a, "-i", "--input"))
			input = 1;
		else
			ctl_usage_die("run: unknown option %s", a);
	}
	char *command;
	if (argc - i == 1 && !strcmp(argv[i], "-")) {
		command = ctl_read_stdin();
		size_t n = strlen(command);
		while (n && (command[n - 1] == '\n' || command[n - 1] == '\r'))
			command[--n] = '\0';
	} else {
		command = ctl_join(argc - i, argv + i);
	}

	cJSON *args, *act = td_action_new("run", &args);
	cJSON_AddStringToObject(args, "command", command);
	free(command);
	ctl_add_session(args, session);
	if (input)
		cJSON_AddBoolToObject(args, "is_input", 1);
	if (timeout >= 0)
		cJSON_AddNumberToObject(args, "timeout", timeout);
	if (idle >= 0)
		cJSON_AddNumberToObject(args, "idle_timeout", idle);
	if (maxout >= 0)
		cJSON_AddNumberToObject(args, "max_output", maxout);

	cJSON *obs = ctl_call(x, act, -1);
	if (ctl_is_error(obs, 0))
		return ctl_finish(obs, EXIT_PROTO);
	ctl_print_content(obs);
	fflush(stdout);

	const cJSON *ex = ctl_extras(obs);
	const char *sess = td_json_str(ex, "session");
	if (!sess)
		sess = session ? session : "main";
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ex, "restarted")))
		fprintf(stderr, "termd: the shell of session %s was restarted\n", sess);
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ex, "created")))
		fprintf(stderr, "termd: session %s did not exist: created, with a new shell\n", sess);
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ex, "truncated"))) {
		const char *f = td_json_str(ex, "output_file");
		fprintf(stderr, "termd: output truncated%s%s\n", f ? "; full output in " : "",
			f ? f : "");
	}
	const char *killed = td_json_str(ex, "killed");
	if (killed && !strcmp(killed, "oom"))
		print_oom(cJSON_GetObjectItemCaseSensitive(ex, "limit"));
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ex, "running"))) {
		const char *to = td_json_str(ex, "timed_out");
		const cJSON *st = cJSON_GetObjectItemCaseSensitive(ex, "shell_starting");
		const cJSON *nr = cJSON_GetObjectItemCaseSensitive(ex, "shell_not_reading");
		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ex, "waiting_for_input")))
			print_waiting(cJSON_GetObjectItemCaseSensitive(ex, "waiting"), sess);
		else if (cJSON_IsObject(st) || cJSON_IsObject(nr))
			print_not_typed(st ? st : nr, st != NULL, sess);
		else if (to)
			fprintf(stderr, "termd: still running (timed_out=%s)\n", to);
		else
			fprintf(stderr, "termd: still running\n");
		if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ex, "waiting_for_input")) &&
		    !st && !nr) {
			const char *so = strcmp(sess, "main") ? " -s " : "", *sn = *so ? sess : "";
			fprintf(stderr, "termd: it goes on: termctl run%s%s waits for it again, "
				"termctl run%s%s --input C-c interrupts it\n", so, sn, so, sn);
		}
		return ctl_finish(obs, EXIT_RUNNING);
	}
	const cJSON *ec = cJSON_GetObjectItemCaseSensitive(ex, "exit_code");
	int rc = 1;
	if (cJSON_IsNumber(ec) && ec->valuedouble >= 0 && ec->valuedouble <= 255)
		rc = (int)ec->valuedouble;
	return ctl_finish(obs, rc);
}

static int cmd_keys(ctl_t *x, int argc, char **argv)
{
	const char *session = NULL, *v;
	double settle = -1, timeout = -1;
	int i;
	for (i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--")) {
			i++;
			break;
		}
		if (a[0] != '-' || !a[1])
			break;
		if (ctl_opt(argc, argv, &i, "-s", "--session", &session))
			continue;
		if (ctl_opt(argc, argv, &i, NULL, "--settle-ms", &v))
			settle = ctl_number(v, "--settle-ms");
		else if (ctl_opt(argc, argv, &i, NULL, "--timeout", &v))
			timeout = ctl_number(v, "--timeout");
		else
			break;   /* a literal key text starting with '-' */
	}
	if (i >= argc)
		ctl_usage_die("keys: no keys given");
	cJSON *args, *act = td_action_new("keys", &args);
	ctl_add_session(args, session);
	cJSON *keys = cJSON_AddArrayToObject(args, "keys");
	for (; i < argc; i++)
		cJSON_AddItemToArray(keys, cJSON_CreateString(argv[i]));
	if (settle >= 0)
		cJSON_AddNumberToObject(args, "settle_ms", settle);
	if (timeout >= 0)
		cJSON_AddNumberToObject(args, "timeout", timeout);
	cJSON *obs = ctl_call(x, act, -1);
	if (ctl_is_error(obs, 0))
		return ctl_finish(obs, EXIT_PROTO);
	ctl_print_content(obs);
	return ctl_finish(obs, 0);
}

static int cmd_screen(ctl_t *x, int argc, char **argv)
{
	const char *session = NULL;
	for (int i = 0; i < argc; i++) {
		if (!ctl_opt(argc, argv, &i, "-s", "--session", &session))
			ctl_usage_die("screen: unexpected argument %s", argv[i]);
	}
	cJSON *args, *act = td_action_new("screen", &args);
	ctl_add_session(args, session);
	cJSON *obs = ctl_call(x, act, -1);
	if (ctl_is_error(obs, 0))
		return ctl_finish(obs, EXIT_PROTO);
	ctl_print_content(obs);
	return ctl_finish(obs, 0);
}

static int cmd_expect(ctl_t *x, int argc, char **argv)
{
	const char *session = NULL, *v, *pattern = NULL;
	double timeout = -1;
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--") && i + 1 < argc && !pattern) {
			pattern = argv[++i];
		} else if (ctl_opt(argc, argv, &i, "-s", "--session", &session)) {
		} else if (ctl_opt(argc, argv, &i, NULL, "--timeout", &v)) {
			timeout = ctl_number(v, "--timeout");
		} else if (!pattern) {
			pattern = argv[i];
		} else {
			ctl_usage_die("expect: unexpected argument %s", argv[i]);
		}
	}
	if (!pattern)
		ctl_usage_die("expect: no pattern given");
	cJSON *args, *act = td_action_new("expect", &args);
	ctl_add_session(args, session);
	cJSON_AddStringToObject(args, "pattern", pattern);
	if (timeout >= 0)
		cJSON_AddNumberToObject(args, "timeout", timeout);
	cJSON *obs = ctl_call(x, act, -1);
	if (ctl_is_error(obs, 0))
		return ctl_finish(obs, EXIT_PROTO);
	ctl_print_content(obs);
	int matched = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ctl_extras(obs), "matched"));
	return ctl_finish(obs, matched ? 0 : 1);
}

static int cmd_ping(ctl_t *x, int argc, char **argv)
{
	if (argc)
		ctl_usage_die("ping: unexpected argument %s", argv[0]);
	cJSON *obs = ctl_call(x, td_action_new("ping", NULL), 10000);
	if (ctl_is_error(obs, 0))
		return ctl_finish(obs, EXIT_PROTO);
	puts("pong");
	return ctl_finish(obs, 0);
}

static int cmd_raw(ctl_t *x, int argc, char **argv)
{
	if (argc != 1)
		ctl_usage_die("raw: give one JSON action, or - to read it from stdin");
	char *text = !strcmp(argv[0], "-") ? ctl_read_stdin() : strdup(argv[0]);
	cJSON *act = cJSON_Parse(text);
	free(text);
	if (!act)
		ctl_usage_die("raw: not valid JSON");
	if (!cJSON_IsObject(act))
		ctl_usage_die("raw: the action must be a JSON object");
	cJSON *obs = ctl_call(x, act, -1);
	char *out = cJSON_PrintUnformatted(obs);
	puts(out ? out : "null");
	free(out);
	return ctl_finish(obs, ctl_is_error(obs, 1) ? EXIT_PROTO : 0);
}

static const struct ctl_cmd {
	const char *name;
	int (*fn)(ctl_t *x, int argc, char **argv);
} ctl_cmds[] = {
	{ "run", cmd_run },
	{ "keys", cmd_keys },
	{ "screen", cmd_screen },
	{ "expect", cmd_expect },
	{ "ping", cmd_ping },
	{ "raw", cmd_raw },
	{ "session", ctl_cmd_session },
	{ "subscribe", ctl_cmd_subscribe },
	{ "ports", ctl_cmd_ports },
	{ "port", ctl_cmd_port },
	{ "upgrade", ctl_cmd_upgrade },
};

int main(int argc, char **argv)
{
	ctl_t x = { .url = td_default_url(), .token = td_default_token(), .wait_ms = -1 };
	const char *token = NULL, *token_file = NULL, *v;
	int i;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (a[0] != '-')
			break;
		if (ctl_flag(a, "-h", "--help")) {
			fputs(usage_text, stdout);
			return 0;
		}
		if (ctl_flag(a, "-V", "--version")) {
			printf("termctl %s (contract %s, protocol %d)\n", TERMD_VERSION, TD_CONTRACT_VERSION,
			       PROTOCOL_VERSION);
			return 0;
		}
		if (ctl_opt(argc, argv, &i, NULL, "--url", &v))
			x.url = v;
		else if (ctl_opt(argc, argv, &i, NULL, "--token", &v))
			token = v;
		else if (ctl_opt(argc, argv, &i, NULL, "--token-file", &v))
			token_file = v;
		else if (ctl_opt(argc, argv, &i, NULL, "--cacert", &v))
			td_tls_set_cafile(v);
		else if (ctl_opt(argc, argv, &i, NULL, "--wait", &v))
			x.wait_ms = (int)(ctl_number(v, "--wait") * 1000);
		else
			ctl_usage_die("unknown option %s", a);
	}
	if (i >= argc) {
		fputs(usage_text, stderr);
		return EXIT_PROTO;
	}
	char *file_token = NULL;
	if (token) {
		x.token = token;
	} else if (token_file) {
		char err[512];
		file_token = td_read_token_file(token_file, err, sizeof err);
		if (!file_token)
			ctl_die("%s", err);
		x.token = file_token;
	}
	/* Check the URL before anything else so the message names it. */
	td_url u;
	char err[512];
	if (td_url_parse(x.url, &u, err, sizeof err) < 0)
		ctl_die("bad URL: %s", err);

	const char *name = argv[i];
	for (size_t k = 0; k < sizeof ctl_cmds / sizeof ctl_cmds[0]; k++) {
		if (!strcmp(ctl_cmds[k].name, name)) {
			int rc = ctl_cmds[k].fn(&x, argc - i - 1, argv + i + 1);
			fflush(stdout);
			td_close(x.c);
			free(file_token);
			return rc;
		}
	}
	ctl_usage_die("unknown command '%s'", name);
}
