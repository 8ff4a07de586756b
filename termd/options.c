/* options.c — termd's command line: the long options' table (the numeric
 * limits among them), --help's text, each option taken into opts (TERMD_<OPTION>
 * variables first, envopts.c), swerex-remote's argv made termd's, and the
 * settling after parsing: defaults filled in, listen hosts resolved, the
 * safety rule for non-loopback listeners, the combinations that cannot
 * work refused, folders and files checked. */
#include "door.h"
#include "client.h"
#include "envopts.h"
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Numeric limits: option name, where it goes, bounds, what it counts. */
static const struct limit_opt {
	const char *name;
	size_t *dst;
	size_t def, min, max;
	const char *help;
} limits[] = {
	{"max-frame", &opts.max_frame, TD_DEFAULT_MAX_FRAME, 1024, (size_t)1 << 31,
	 "largest accepted /events frame, bytes"},
	{"retain", &opts.retain, TD_DEFAULT_RETAIN, 1, 10000000,
	 "events kept for subscribe"},
	{"max-sessions", &opts.max_sessions, TD_DEFAULT_MAX_SESSIONS, 1, 100000,
	 "sessions open at once, main included"},
	{"max-viewers", &opts.max_viewers, TD_DEFAULT_MAX_VIEWERS, 1, 100000,
	 "/tty viewers per session"},
	{"viewer-rate", &opts.viewer_rate, TD_DEFAULT_VIEWER_RATE, 1000, (size_t)1 << 40,
	 "bytes/s a session's viewers are sent together; past it, 20 screens/s"},
	{"max-pending", &opts.max_pending, TD_DEFAULT_MAX_PENDING, 65536, (size_t)1 << 34,
	 "unsent bytes before an /events client that does not read is dropped"},
	{"scrollback", &opts.scrollback, TD_DEFAULT_SCROLLBACK, 0, 1000000,
	 "lines kept above each session's screen"},
	{"output-mem", &opts.output_mem, TD_DEFAULT_OUTPUT_MEM, 4096, (size_t)1 << 31,
	 "bytes of a command's output kept in memory; beyond, its output file only"},
	{"upload-max", &opts.upload_max, (size_t)256 << 20, 1024, (size_t)1 << 40,
	 "bytes one upload may write, a zip's entries together (declared and inflated)"},
	{"upload-entries", &opts.upload_entries, 10000, 1, 1000000,
	 "entries in one uploaded zip"},
	{"list-max", &opts.list_max, 20000, 1, 1000000,
	 "entries one listing may answer (file.list's max_entries at most; e2b's ListDir)"},
	{"upload-parts", &opts.upload_parts, 1000, 1, 1000000,
	 "files one multipart POST /files may write"},
	{"download-max", &opts.download_max, (size_t)1 << 30, 1024, (size_t)3 << 30,
	 "bytes of files one /download_files folder may hold (streamed; no zip64: 3 GiB at most)"},
	{"head-timeout", &opts.head_time, 30, 1, 86400,
	 "seconds a connection to the front may go without sending a whole request head "
	 "(idle or part sent; an HTTP/2 header block too) before it is closed"},
	{"body-idle-timeout", &opts.body_idle, 30, 1, 86400,
	 "seconds a request body may pause before termd answers 408 and closes"},
	{"stall-timeout", &opts.stall_timeout, 120, 1, 86400,
	 "seconds the front holds bytes for a client (an HTTP/2 stream) that takes none"},
	{"body-timeout", &opts.body_time, 600, 1, 86400,
	 "seconds a whole request body may take before termd answers 408 and closes"},
	{"stdin-max", &opts.stdin_max, (size_t)8 << 20, 1024, (size_t)1 << 34,
	 "bytes waiting for a session's input (session.stdin, envd SendInput); more is refused"},
	{"stream-max", &opts.stream_max, (size_t)8 << 20, 65536, (size_t)1 << 34,
	 "bytes one HTTP stream (envd Start/Connect/WatchDir) holds for a client before it is cut;\n"
	 "                             a process's own stream (Start/Connect) holds the process instead"},
	{"stream-stall", &opts.stream_stall, 60, 1, 86400,
	 "seconds a process stream's client may read nothing while the process is held (then cut)"},
	{"max-streams", &opts.max_streams, 128, 1, 100000,
	 "HTTP streams open at once, in all"},
	{"max-streams-per-client", &opts.max_streams_client, 32, 1, 100000,
	 "HTTP streams open at once from one client address"},
	{"watcher-max", &opts.watcher_max, (size_t)1 << 20, 1024, (size_t)1 << 32,
	 "bytes of events a polled envd watcher keeps until fetched (the oldest go first)"},
	{"watcher-expiry", &opts.watcher_expiry, 600, 1, 86400 * 7,
	 "seconds an envd watcher lasts without GetWatcherEvents (then it is removed)"},
	{"max-watch-dirs", &opts.max_watch_dirs, 0, 0, 100000000,
	 "folders all watches follow together (0: half the kernel's max_user_watches)"},
};
#define NLIMITS (sizeof limits / sizeof limits[0])

static void usage(FILE *f)
{
	fprintf(f,
		"usage: termd [options]\n"
		"  --listen HOST:PORT | unix:PATH | none   where to listen (default %s:%d); again:\n"
		"                          more HOST:PORT addresses (e.g. e2b's envd port 49983);\n"
		"                          ADDR,api=NAME: that listener serves API NAME only (termd,\n"
		"                          openhands, e2b, swerex, agent-sandbox; default the first 3)\n"
		"  --token-file F          full-access token (also env TERMD_TOKEN)\n"
		"  --view-token-file F     read-only token\n"
		"  --insecure-no-token     serve a non-loopback address without a token (loudly)\n"
		"  --tls-cert F --tls-key F   serve wss:// and https:// (HTTP/2 too) with this PEM pair\n"
		"  --front on|off          TCP listeners served by termd's front: TLS with HTTP/2,\n"
		"                          h2c, X-Metadata-* headers (default on; off: lws alone)\n"
		"  --shell PATH            shell for sessions (default bash, else sh)\n"
		"  --cwd DIR               start directory of sessions (default: current)\n"
		"  --event-log FILE        append every event as a JSON line\n"
		"  --plugins a,b|all       plugins to load (default none)\n"
		"  --plugin-dir DIR        where plugins are (default: plugins/ next to termd)\n"
		"  --state-dir DIR         what lasts across runs: plugin setup markers\n"
		"                          (default /var/lib/termd as root, else ~/.local/state/termd)\n"
		"  --record DIR            write each session as an asciicast v2 file in DIR (must exist)\n"
		"  --record-input          ... with what was typed into it too (passwords included)\n"
		"  --connect URL           dial a backend (ws:// or wss://) and serve /events over it\n"
		"                          (repeatable; see PROTOCOL.md section 10)\n"
		"  --connect-token-file F  credential the links send (Authorization: Bearer)\n"
		"  --sandbox-id ID         the links' X-Termd-Sandbox header (default: the host name)\n"
		"  --sandbox-base DIR      agent-sandbox's API: the folder its files and commands are\n"
		"                          confined to (default /app; env SANDBOX_BASE_DIR)\n"
		"  --sandbox-exec-timeout S  agent-sandbox's API: a command's process group is killed\n"
		"                          after S seconds (default 300; env SANDBOX_EXEC_TIMEOUT_SECONDS)\n"
		"  --cacert F              CA file the links verify the backend with (else env\n"
		"                          TERMD_CACERT, else the system's CAs)\n"
		"  --connect-backoff MIN:MAX  seconds between attempts (default 1:30)\n"
		"  --connect-ping S        ping an idle link after S s, drop it after 2 S (default 20)\n"
		"  --user NAME             e2b's envd API: the user requests without one act as\n"
		"                          (its home, its uid when termd is root; default: termd's)\n"
		"                          (also agent-sandbox's commands and file work)\n"
		"  --user-root-capable auto|yes|no  file work the kernel refuses to the user is done\n"
		"                          as root (no link the user controls followed, what it makes\n"
		"                          the user's) where the user may act as root anyway: yes; auto\n"
		"                          (default): the user is root or has sudo (ALL) NOPASSWD: ALL\n"
		"  --preview-token-file F  a token that opens /proxy/<port>/ previews and nothing else\n"
		"  --preview-host-suffix S  Host <port>-<anything>S is a preview of <port>\n"
		"  --cgroups auto|v2|v1|off  a cgroup per session (default auto: v2 with memory and\n"
		"                          pids, else v1; off or no rights: none, /proc for trees)\n"
		"  --session-memory-max SIZE  each session's memory limit (bytes, or 512M, 2G)\n"
		"  --session-pids-max N    each session's limit on processes and threads\n"
		"  --session-cpu-max CORES each session's CPU limit, a fraction of one core (0.5)\n"
		"                          (session.open's limits override these three)\n"
		"  -v, --verbose           log more\n"
		"  -h, --help              this text\n"
		"  -V, --version           termd's version and the contract's\n"
		"every option can be set in the environment as TERMD_<OPTION> (TERMD_LISTEN,\n"
		"TERMD_TOKEN_FILE, TERMD_MAX_SESSIONS, TERMD_RECORD_INPUT=1...); the command\n"
		"line wins\n"
		"limits:\n",
		TD_DEFAULT_HOST, TD_DEFAULT_PORT);
	for (size_t i = 0; i < NLIMITS; i++)
		fprintf(f, "  --%-22s N  %s (default %zu)\n", limits[i].name, limits[i].help,
			limits[i].def);
}

static int parse_limit(const struct limit_opt *l, const char *v)
{
	char *end;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-' || n < l->min || n > l->max) {
		fprintf(stderr, "termd: --%s wants a number from %zu to %zu\n", l->name, l->min, l->max);
		return -1;
	}
	*l->dst = (size_t)n;
	return 0;
}

/* The token file rule is proto/url.c's, shared with the clients. */
static char *read_token_file(const char *path)
{
	char err[512];
	char *t = td_read_token_file(path, err, sizeof err);
	if (!t)
		fprintf(stderr, "termd: %s\n", err);
	return t;
}

static int parse_listen_addr(const char *v)
{
	if (strcmp(v, "none") == 0) {
		if (opts.listen_host || opts.listen_unix) {
			fprintf(stderr, "termd: --listen none and a listen address do not go together\n");
			return -1;
		}
		opts.listen_none = 1;
		return 0;
	}
	if (opts.listen_none) {
		fprintf(stderr, "termd: --listen none and a listen address do not go together\n");
		return -1;
	}
	if (opts.listen_host || opts.listen_unix) {
		/* a second --listen: one more TCP address (envd's port 49983) */
		if (strncmp(v, "unix:", 5) == 0) {
			fprintf(stderr, "termd: --listen unix: must be the first --listen (one unix socket)\n");
			return -1;
		}
		if (opts.nextra >= TD_MAX_EXTRA_LISTEN) {
			fprintf(stderr, "termd: at most %d more --listen\n", TD_MAX_EXTRA_LISTEN);
			return -1;
		}
		char *h0 = opts.listen_host, *u0 = opts.listen_unix;
		int p0 = opts.listen_port;
		opts.listen_host = NULL;
		opts.listen_unix = NULL;
		int r = parse_listen_addr(v);
		opts.extra_host[opts.nextra] = opts.listen_host;
		opts.extra_port[opts.nextra] = opts.listen_port;
		if (r == 0)
			opts.nextra++;
		else
			free(opts.listen_host);
		opts.listen_host = h0;
		opts.listen_unix = u0;
		opts.listen_port = p0;
		return r;
	}
	if (strncmp(v, "unix:", 5) == 0) {
		if (!v[5]) {
			fprintf(stderr, "termd: --listen unix: needs a path\n");
			return -1;
		}
		opts.listen_unix = xstrdup(v + 5);
		return 0;
	}
	const char *colon = strrchr(v, ':');
	if (!colon) {
		fprintf(stderr, "termd: --listen wants HOST:PORT or unix:PATH\n");
		return -1;
	}
	char *end;
	long port = strtol(colon + 1, &end, 10);
	if (*end || port < 1 || port > 65535) {
		fprintf(stderr, "termd: bad port in --listen %s\n", v);
		return -1;
	}
	size_t hl = (size_t)(colon - v);
	if (hl >= 2 && v[0] == '[' && v[hl - 1] == ']')
		opts.listen_host = xstrndup(v + 1, hl - 2);
	else
		opts.listen_host = hl ? xstrndup(v, hl) : xstrdup(TD_DEFAULT_HOST);
	opts.listen_port = (int)port;
	return 0;
}

/* --listen ADDR[,api=NAME]: the address, then the API its listener serves
 * alone (PROTOCOL.md section 12), recorded for the listener just added. */
static int parse_listen(const char *v)
{
	static const struct { const char *name; unsigned bit; } apis[] = {
		{"termd", TD_API_TERMD}, {"openhands", TD_API_OPENHANDS}, {"e2b", TD_API_E2B},
		{"swerex", TD_API_SWEREX}, {"agent-sandbox", TD_API_AGENT_SANDBOX},
	};
	const char *suf = strstr(v, ",api=");
	if (!suf)
		return parse_listen_addr(v);
	unsigned api = 0;
	for (size_t i = 0; i < sizeof apis / sizeof apis[0]; i++)
		if (strcmp(suf + 5, apis[i].name) == 0)
			api = apis[i].bit;
	if (!api) {
		fprintf(stderr, "termd: --listen %s: unknown API '%s' (termd, openhands, e2b, "
			"swerex or agent-sandbox)\n", v, suf + 5);
		return -1;
	}
	char *addr = xstrndup(v, (size_t)(suf - v));
	int first = !opts.listen_host && !opts.listen_unix, n0 = opts.nextra;
	int r = parse_listen_addr(addr);
	free(addr);
	if (r < 0)
		return r;
	if (opts.listen_none) {
		fprintf(stderr, "termd: --listen none serves no API\n");
		return -1;
	}
	if (first)
		opts.listen_api = api;
	else if (opts.nextra > n0)
		opts.extra_api[opts.nextra - 1] = api;
	return 0;
}

/* The listen host as a numeric address (a name such as localhost is
 * resolved here: libwebsockets takes only addresses and interface names),
 * and whether it is loopback. -1 with a message if it does not resolve. */
static int resolve_host(char **host, int *loopback)
{
	struct addrinfo hints = {0}, *ai = NULL;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	int r = getaddrinfo(*host, NULL, &hints, &ai);
	if (r != 0 || !ai) {
		fprintf(stderr, "termd: cannot resolve --listen host %s: %s\n", *host,
			gai_strerror(r));
		return -1;
	}
	char num[INET6_ADDRSTRLEN];
	r = getnameinfo(ai->ai_addr, ai->ai_addrlen, num, sizeof num, NULL, 0, NI_NUMERICHOST);
	if (ai->ai_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ai->ai_addr;
		*loopback = (ntohl(a->sin_addr.s_addr) >> 24) == 127;
	} else {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ai->ai_addr;
		*loopback = IN6_IS_ADDR_LOOPBACK(&a->sin6_addr) ||
			    (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr) && a->sin6_addr.s6_addr[12] == 127);
	}
	freeaddrinfo(ai);
	if (r != 0) {
		fprintf(stderr, "termd: cannot use --listen host %s\n", *host);
		return -1;
	}
	free(*host);
	*host = xstrdup(num);
	return 0;
}

/* every TCP --listen resolved; *loopback: all of them are loopback;
 * *open_api: one that is not serves agent-sandbox's API (no credential) */
static int resolve_listen_host(int *loopback, int *open_api)
{
	int lb = 1;
	*loopback = 1;
	*open_api = 0;
	if (opts.listen_host && resolve_host(&opts.listen_host, &lb) < 0)
		return -1;
	*loopback = lb;
	if (!lb && (opts.listen_api & TD_API_AGENT_SANDBOX))
		*open_api = 1;
	for (int i = 0; i < opts.nextra; i++) {
		if (resolve_host(&opts.extra_host[i], &lb) < 0)
			return -1;
		if (!lb)
			*loopback = 0;
		if (!lb && opts.extra_host[i] && (opts.extra_api[i] & TD_API_AGENT_SANDBOX))
			*open_api = 1;
	}
	return 0;
}

/* agent-sandbox's runtime API: --sandbox-base and --sandbox-exec-timeout,
 * else upstream's SANDBOX_BASE_DIR and SANDBOX_EXEC_TIMEOUT_SECONDS (an
 * unusable timeout there is 300, with a warning, as upstream) */
static void settle_sandbox(void)
{
	const char *b = getenv("SANDBOX_BASE_DIR");
	if (!opts.sandbox_base)
		opts.sandbox_base = xstrdup(b && *b ? b : "/app");
	const char *t = getenv("SANDBOX_EXEC_TIMEOUT_SECONDS");
	if (!opts.sandbox_exec_timeout && t) {
		char *end;
		double v = strtod(t, &end);
		if (end != t && !*end && v > 0 && v <= 1e9)
			opts.sandbox_exec_timeout = v;
		else
			fprintf(stderr, "termd: ignoring SANDBOX_EXEC_TIMEOUT_SECONDS=%s; using 300 "
					"seconds\n", t);
	}
	if (!opts.sandbox_exec_timeout)
		opts.sandbox_exec_timeout = 300;
}

/* --connect-backoff MIN:MAX, seconds (fractions allowed), 0 < MIN <= MAX */
static int parse_backoff(const char *v)
{
	char *end, *end2;
	double lo = strtod(v, &end);
	if (*end != ':' || end == v)
		goto bad;
	double hi = strtod(end + 1, &end2);
	if (*end2 || end2 == end + 1 || !(lo >= 0.01) || !(hi >= lo) || hi > 86400)
		goto bad;
	opts.backoff_min = lo;
	opts.backoff_max = hi;
	return 0;
bad:
	fprintf(stderr, "termd: --connect-backoff wants MIN:MAX seconds, 0.01 <= MIN <= MAX <= 86400\n");
	return -1;
}

/* the sandbox id goes into a header: printable ASCII, no spaces, at most 253 */
static int check_sandbox_id(const char *v)
{
	size_t n = strlen(v);
	if (!n || n > 253)
		goto bad;
	for (const char *c = v; *c; c++)
		if (*c <= ' ' || *c >= 0x7f)
			goto bad;
	return 0;
bad:
	fprintf(stderr, "termd: --sandbox-id wants 1 to 253 printable ASCII characters, no spaces\n");
	return -1;
}

/* --cgroups auto|v2|v1|off */
static int parse_cgroups(const char *v)
{
	static const struct { const char *name; int mode; } modes[] = {
		{"auto", CG_AUTO}, {"off", CG_OFF}, {"v1", CG_V1}, {"v2", CG_V2},
	};
	for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
		if (strcmp(v, modes[i].name) == 0) {
			opts.cgroups = modes[i].mode;
			return 0;
		}
	fprintf(stderr, "termd: --cgroups is auto, v2, v1 or off\n");
	return -1;
}

/* --session-memory-max SIZE, --session-pids-max N, --session-cpu-max CORES:
 * read as session.open's limits are */
static int parse_session_limit(const char *what, const char *v)
{
	char *end;
	double d = strtod(v, &end);
	/* checked here as if cgroups could enforce it; cgroup_init says when
	 * they cannot */
	long long mem = cg_parse_size(v);
	int ok = strcmp(what, "memory") == 0 ? mem >= (1LL << 20)
		 : strcmp(what, "pids") == 0 ? !*end && end != v && d >= 1 && d <= 4194304 && d == (long long)d
		 : !*end && end != v && d >= 0.01 && d <= 4096;
	if (!ok) {
		fprintf(stderr, "termd: --session-%s-max wants %s\n", what,
			strcmp(what, "memory") == 0 ? "bytes, at least 1M (an integer, or 512M, 2G)"
			: strcmp(what, "pids") == 0 ? "an integer from 1 to 4194304"
			: "a fraction of one core from 0.01 to 4096 (0.5: half a core)");
		return -1;
	}
	if (strcmp(what, "memory") == 0)
		opts.session_memory_max = mem;
	else if (strcmp(what, "pids") == 0)
		opts.session_pids_max = (long long)d;
	else
		opts.session_cpu_max = d;
	return 0;
}

/* a string option given again replaces the earlier one */
static void set_str(char **dst, const char *v)
{
	free(*dst);
	*dst = xstrdup(v);
}

/* getopt_long's values of the long options (O_LIMIT + i: limits[i]) */
enum { O_LISTEN = 256, O_TOKEN, O_VIEW, O_SHELL, O_CWD, O_LOG, O_TLS_CERT, O_TLS_KEY, O_FRONT,
       O_PLUGINS, O_PLUGIN_DIR, O_STATE_DIR, O_INSECURE, O_RECORD, O_RECORD_INPUT,
       O_CONNECT, O_CONNECT_TOKEN, O_SANDBOX_ID, O_CACERT, O_BACKOFF, O_PING, O_USER, O_URC,
       O_PREVIEW_TOKEN, O_PREVIEW_SUFFIX, O_SANDBOX_BASE, O_SANDBOX_TIMEOUT,
       O_CGROUPS, O_NO_CGROUPS, O_SESS_MEM, O_SESS_PIDS, O_SESS_CPU, O_HELP, O_VERSION, O_LIMIT /* + index into limits[] */ };

#define NFIXED_OPTIONS 35   /* options_table's fixed[] (checked there) */

/* every long option, the limits' after the fixed ones, into lo (which has
 * room for them and the end mark); each limit at its default */
static void options_table(struct option lo[])
{
	static const struct option fixed[] = {
		{"listen", required_argument, NULL, O_LISTEN},
		{"token-file", required_argument, NULL, O_TOKEN},
		{"view-token-file", required_argument, NULL, O_VIEW},
		{"shell", required_argument, NULL, O_SHELL},
		{"cwd", required_argument, NULL, O_CWD},
		{"event-log", required_argument, NULL, O_LOG},
		{"tls-cert", required_argument, NULL, O_TLS_CERT},
		{"tls-key", required_argument, NULL, O_TLS_KEY},
		{"front", required_argument, NULL, O_FRONT},
		{"plugins", required_argument, NULL, O_PLUGINS},
		{"plugin-dir", required_argument, NULL, O_PLUGIN_DIR},
		{"state-dir", required_argument, NULL, O_STATE_DIR},
		{"insecure-no-token", no_argument, NULL, O_INSECURE},
		{"user", required_argument, NULL, O_USER},
		{"user-root-capable", required_argument, NULL, O_URC},
		{"record", required_argument, NULL, O_RECORD},
		{"record-input", no_argument, NULL, O_RECORD_INPUT},
		{"connect", required_argument, NULL, O_CONNECT},
		{"connect-token-file", required_argument, NULL, O_CONNECT_TOKEN},
		{"sandbox-id", required_argument, NULL, O_SANDBOX_ID},
		{"cacert", required_argument, NULL, O_CACERT},
		{"sandbox-base", required_argument, NULL, O_SANDBOX_BASE},
		{"sandbox-exec-timeout", required_argument, NULL, O_SANDBOX_TIMEOUT},
		{"connect-backoff", required_argument, NULL, O_BACKOFF},
		{"connect-ping", required_argument, NULL, O_PING},
		{"preview-token-file", required_argument, NULL, O_PREVIEW_TOKEN},
		{"preview-host-suffix", required_argument, NULL, O_PREVIEW_SUFFIX},
		{"cgroups", required_argument, NULL, O_CGROUPS},
		{"no-cgroups", no_argument, NULL, O_NO_CGROUPS},
		{"session-memory-max", required_argument, NULL, O_SESS_MEM},
		{"session-pids-max", required_argument, NULL, O_SESS_PIDS},
		{"session-cpu-max", required_argument, NULL, O_SESS_CPU},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, O_HELP},
		{"version", no_argument, NULL, O_VERSION},
	};
	_Static_assert(sizeof fixed / sizeof fixed[0] == NFIXED_OPTIONS, "NFIXED_OPTIONS");
	const size_t nfixed = NFIXED_OPTIONS;
	memcpy(lo, fixed, sizeof fixed);
	for (size_t i = 0; i < NLIMITS; i++) {
		lo[nfixed + i] = (struct option){limits[i].name, required_argument, NULL, O_LIMIT + (int)i};
		*limits[i].dst = limits[i].def;
	}
	lo[nfixed + NLIMITS] = (struct option){NULL, 0, NULL, 0};
}

/* one option getopt_long returned (c, with optarg): -1 to go on, else the
 * exit status termd ends with now (0 after --help or --version, 2 on an
 * error said on stderr) */
static int take_option(int c, char **argv)
{
	switch (c) {
	case O_LISTEN:
		if (parse_listen(optarg) < 0)
			return 2;
		break;
	case O_TOKEN:
		if (!(opts.token = read_token_file(optarg)))
			return 2;
		break;
	case O_VIEW:
		if (!(opts.view_token = read_token_file(optarg)))
			return 2;
		break;
	case O_PREVIEW_TOKEN:
		free(opts.preview_token);
		if (!(opts.preview_token = read_token_file(optarg)))
			return 2;
		break;
	case O_PREVIEW_SUFFIX:
		set_str(&opts.preview_host_suffix, optarg);
		break;
	case O_SHELL:
		set_str(&opts.shell, optarg);
		break;
	case O_CWD:
		set_str(&opts.cwd, optarg);
		break;
	case O_LOG:
		set_str(&opts.event_log, optarg);
		break;
	case O_TLS_CERT:
		set_str(&opts.tls_cert, optarg);
		break;
	case O_TLS_KEY:
		set_str(&opts.tls_key, optarg);
		break;
	case O_FRONT:
		if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
			fprintf(stderr, "termd: --front wants on or off\n");
			return 2;
		}
		opts.front = !strcmp(optarg, "on");
		break;
	case O_PLUGINS:
		set_str(&opts.plugins, optarg);
		break;
	case O_PLUGIN_DIR:
		set_str(&opts.plugin_dir, optarg);
		break;
	case O_STATE_DIR:
		set_str(&opts.state_dir, optarg);
		break;
	case O_USER:
		if (!getpwnam(optarg)) {
			fprintf(stderr, "termd: --user %s: no such user\n", optarg);
			return 2;
		}
		opts.envd_user = optarg;
		break;
	case O_URC:
		if (!strcmp(optarg, "auto"))
			opts.user_root_capable = URC_AUTO;
		else if (!strcmp(optarg, "yes"))
			opts.user_root_capable = URC_YES;
		else if (!strcmp(optarg, "no"))
			opts.user_root_capable = URC_NO;
		else {
			fprintf(stderr, "termd: --user-root-capable %s: auto, yes or no\n", optarg);
			return 2;
		}
		break;
	case O_INSECURE:
		opts.insecure_no_token = 1;
		break;
	case O_RECORD:
		set_str(&opts.record_dir, optarg);
		break;
	case O_RECORD_INPUT:
		opts.record_input = 1;
		break;
	case O_CONNECT: {
		char uerr[512];
		if (link_check_url(optarg, uerr, sizeof uerr) < 0) {
			fprintf(stderr, "termd: %s\n", uerr);
			return 2;
		}
		opts.connect = xrealloc(opts.connect, (opts.nconnect + 1) * sizeof *opts.connect);
		opts.connect[opts.nconnect++] = xstrdup(optarg);
		break;
	}
	case O_CONNECT_TOKEN:
		free(opts.connect_token);
		if (!(opts.connect_token = read_token_file(optarg)))
			return 2;
		break;
	case O_SANDBOX_ID:
		if (check_sandbox_id(optarg) < 0)
			return 2;
		set_str(&opts.sandbox_id, optarg);
		break;
	case O_CACERT:
		set_str(&opts.cacert, optarg);
		break;
	case O_SANDBOX_BASE:
		if (!*optarg) {
			fprintf(stderr, "termd: --sandbox-base wants a folder\n");
			return 2;
		}
		set_str(&opts.sandbox_base, optarg);
		break;
	case O_SANDBOX_TIMEOUT: {
		char *end;
		double v = strtod(optarg, &end);
		if (end == optarg || *end || !(v > 0) || v > 1e9) {
			fprintf(stderr, "termd: --sandbox-exec-timeout wants seconds above 0\n");
			return 2;
		}
		opts.sandbox_exec_timeout = v;
		break;
	}
	case O_BACKOFF:
		if (parse_backoff(optarg) < 0)
			return 2;
		break;
	case O_PING: {
		char *end;
		long n = strtol(optarg, &end, 10);
		if (*end || end == optarg || n < 1 || n > 3600) {
			fprintf(stderr, "termd: --connect-ping wants seconds from 1 to 3600\n");
			return 2;
		}
		opts.connect_ping = (unsigned)n;
		break;
	}
	case O_CGROUPS:
	case O_NO_CGROUPS:
		if (parse_cgroups(c == O_NO_CGROUPS ? "off" : optarg) < 0)
			return 2;
		break;
	case O_SESS_MEM:
	case O_SESS_PIDS:
	case O_SESS_CPU:
		if (parse_session_limit(c == O_SESS_MEM ? "memory" : c == O_SESS_PIDS ? "pids" : "cpu",
					optarg) < 0)
			return 2;
		break;
	case 'v':
		opts.verbose = log_verbose = 1;
		break;
	case 'h':
	case O_HELP:
		usage(stdout);
		return 0;
	case 'V':
	case O_VERSION:
		printf("termd %s (contract %s, protocol %d)\n", TERMD_VERSION, TD_CONTRACT_VERSION,
		       PROTOCOL_VERSION);
		return 0;
	default:
		if (c >= O_LIMIT && c < O_LIMIT + (int)NLIMITS) {
			if (parse_limit(&limits[c - O_LIMIT], optarg) < 0)
				return 2;
			break;
		}
		if (c == ':')
			fprintf(stderr, "termd: %s needs a value", argv[optind - 1]);
		else if (optopt)
			fprintf(stderr, "termd: unknown option -%c", optopt);
		else
			fprintf(stderr, "termd: unknown option %s", argv[optind - 1]);
		fputs(" (termd --help lists the options)\n", stderr);
		return 2;
	}
	return -1;
}

/* TERMD_<OPTION> variables, then the command line, into opts: -1 to go
 * on, else the exit status */
int options_parse(int argc, char **argv)
{
	struct option lo[NFIXED_OPTIONS + NLIMITS + 1];
	options_table(lo);
	opts.front = 1;
	if (envopts_apply(&argc, &argv, lo) < 0)   /* TERMD_<OPTION> first */
		return 2;
	int c;
	opterr = 0;   /* one line naming the option, below, not the whole usage */
	while ((c = getopt_long(argc, argv, ":vhV", lo, NULL)) != -1) {
		int rc = take_option(c, argv);
		if (rc >= 0)
			return rc;
	}
	if (optind < argc) {
		fprintf(stderr, "termd: unexpected argument '%s' (termd --help lists the options)\n",
			argv[optind]);
		return 2;
	}
	return -1;
}

/* The listeners, the links and the credentials, settled after parsing:
 * defaults filled in, the combinations refused that cannot work (said on
 * stderr): 0, or the exit status. */
static int settle_listen(void)
{
	if (opts.listen_none) {
		free(opts.listen_host);
		free(opts.listen_unix);
		opts.listen_host = opts.listen_unix = NULL;
		if (!opts.nconnect) {
			fprintf(stderr, "termd: --listen none needs --connect URL: nobody could reach termd\n");
			return 2;
		}
		if (opts.tls_cert)
			fprintf(stderr, "termd: --tls-cert is not used with --listen none\n");
	} else if (!opts.listen_host && !opts.listen_unix) {
		opts.listen_host = xstrdup(TD_DEFAULT_HOST);
		opts.listen_port = TD_DEFAULT_PORT;
	}
	if (opts.nconnect) {
		if (!opts.backoff_min) {
			opts.backoff_min = 1;
			opts.backoff_max = 30;
		}
		if (!opts.connect_ping)
			opts.connect_ping = 20;
		if (!opts.sandbox_id) {
			char hn[256] = "";
			if (gethostname(hn, sizeof hn - 1) != 0 || !hn[0] || check_sandbox_id(hn) < 0)
				snprintf(hn, sizeof hn, "unknown");
			opts.sandbox_id = xstrdup(hn);
		}
		if (!opts.cacert) {
			const char *ca = getenv("TERMD_CACERT");
			if (ca && *ca)
				opts.cacert = xstrdup(ca);
		}
		if (opts.cacert && access(opts.cacert, R_OK) != 0) {
			fprintf(stderr, "termd: cannot read --cacert %s: %s\n", opts.cacert, strerror(errno));
			return 2;
		}
	}
	if (!opts.token) {
		const char *t = getenv("TERMD_TOKEN");
		if (t && *t)
			opts.token = xstrdup(t);
	}
	unsetenv("TERMD_TOKEN");
	int loopback = 1, open_api = 0;
	if (resolve_listen_host(&loopback, &open_api) < 0)
		return 2;
	if (open_api && !opts.insecure_no_token) {
		fprintf(stderr, "termd: refusing to serve api=agent-sandbox on a non-loopback address "
				"without --insecure-no-token: that API has no credential (a token does not "
				"guard it), anyone who reaches the address runs commands. On Kubernetes the "
				"template's NetworkPolicy is the boundary.\n");
		return 2;
	}
	settle_sandbox();
	if (opts.token || loopback)
		opts.insecure_no_token = 0;   /* not in effect: nothing to warn about */
	if (opts.insecure_no_token) {
		fprintf(stderr, "termd: WARNING: --insecure-no-token: serving %s WITHOUT A TOKEN. Anyone "
				"who can reach this address gets a shell. Meant for a container whose port "
				"only its owner reaches (OpenHands' Docker runtime sends no key).\n",
			opts.listen_host);
	} else if (!loopback && !opts.token) {
		fprintf(stderr, "termd: refusing to listen on %s without a token: anyone who can reach it "
				"would get a shell. Use --token-file F (or env TERMD_TOKEN), or listen on "
				"127.0.0.1 or a unix socket.\n", opts.listen_host);
		return 2;
	}
	if (!opts.tls_cert != !opts.tls_key) {
		fprintf(stderr, "termd: --tls-cert and --tls-key go together\n");
		return 2;
	}
	for (const char *f = opts.tls_cert; f; f = f == opts.tls_cert ? opts.tls_key : NULL) {
		if (access(f, R_OK) != 0) {
			fprintf(stderr, "termd: cannot read %s: %s\n", f, strerror(errno));
			return 2;
		}
	}
	return 0;
}

/* The folders and files the options name, checked and made absolute:
 * 0, or the exit status. */
static int settle_paths(void)
{
	if (!opts.cwd) {
		char buf[4096];
		opts.cwd = xstrdup(getcwd(buf, sizeof buf) ? buf : "/");
	}
	struct stat st;
	if (stat(opts.cwd, &st) != 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "termd: --cwd %s is not a directory\n", opts.cwd);
		return 2;
	}
	if (!opts.state_dir) {
		const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
		buf_t b = {0};
		if (getuid() == 0)
			buf_puts(&b, "/var/lib/termd");
		else if (xdg && *xdg)
			buf_printf(&b, "%s/termd", xdg);
		else
			buf_printf(&b, "%s/.local/state/termd", home && *home ? home : "/tmp");
		opts.state_dir = buf_steal(&b);
	}
	if (opts.record_input && !opts.record_dir) {
		fprintf(stderr, "termd: --record-input needs --record DIR\n");
		return 2;
	}
	if (opts.record_dir) {
		char rerr[4400];
		if (record_check_dir(opts.record_dir, rerr, sizeof rerr) < 0) {
			fprintf(stderr, "termd: %s\n", rerr);
			return 2;
		}
		char *abs = realpath(opts.record_dir, NULL);   /* the same folder whatever the cwd */
		if (abs) {
			free(opts.record_dir);
			opts.record_dir = abs;
		}
	}
	if (opts.shell && access(opts.shell, X_OK) != 0) {
		fprintf(stderr, "termd: --shell %s is not executable\n", opts.shell);
		return 2;
	}
	return 0;
}

/* Started as swerex-remote (SWE-ReX's server, whose deployments run
 * `swerex-remote --auth-token T`): its options, --auth-token T, --host H
 * (0.0.0.0) and --port P (8000), become termd's first listener
 * `--listen H:P,api=swerex` with T the full token; termd's own options
 * pass through (another --listen serves termd's API there, for watchers).
 * argv is replaced (a new array, kept for the process's life). */
char **options_swerex_argv(int *argc, char **argv)
{
	const char *base = strrchr(argv[0], '/');
	base = base ? base + 1 : argv[0];
	if (strcmp(base, "swerex-remote") != 0)
		return argv;
	const char *host = "0.0.0.0", *port = "8000", *token = NULL;
	int has_swerex = 0;
	char **out = xcalloc((size_t)*argc + 4, sizeof *out);
	int n = 0;
	out[n++] = argv[0];
	n += 2;   /* the listener goes first */
	for (int i = 1; i < *argc; i++) {
		const char *a = argv[i];
		const char **dst = !strncmp(a, "--auth-token", 12) ? &token :
				   !strncmp(a, "--host", 6) ? &host : !strncmp(a, "--port", 6) ? &port : NULL;
		size_t kl = dst == &token ? 12 : 6;
		if (dst && (a[kl] == '=' || (a[kl] == 0 && i + 1 < *argc))) {
			*dst = a[kl] == '=' ? a + kl + 1 : argv[++i];
			continue;
		}
		/* an upgrade in place runs the argv made here again */
		if (strstr(a, ",api=swerex") && i > 1 && !strcmp(argv[i - 1], "--listen"))
			has_swerex = 1;
		out[n++] = argv[i];
	}
	if (has_swerex) {
		memmove(out + 1, out + 3, (size_t)(n - 3) * sizeof *out);
		n -= 2;
	} else {
		buf_t l = {0};
		buf_printf(&l, strchr(host, ':') ? "[%s]:%s,api=swerex" : "%s:%s,api=swerex", host,
			   port);
		out[1] = "--listen";
		out[2] = buf_steal(&l);
	}
	out[n] = NULL;
	if (token && *token)
		setenv("TERMD_TOKEN", token, 1);
	*argc = n;
	return out;
}

/* the listeners, the links, the credentials, then the paths, settled
 * after parsing: 0, or the exit status */
int options_settle(void)
{
	int rc = settle_listen();
	return rc ? rc : settle_paths();
}
