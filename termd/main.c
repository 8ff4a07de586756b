/* main.c — termd's entry point: command-line options, tokens, the safety
 * rule for non-loopback listeners, process-wide setup (locale, SIGPIPE and
 * SIGXFSZ ignored, subreaper), then the server, the `main` session and the
 * event loop. */
#include "termd.h"

#include <errno.h>
#include <getopt.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>



static void usage(FILE *f)
{
	fprintf(f,
		"usage: termd [options]\n"
		"  --listen HOST:PORT | unix:PATH   where to listen (default %s:%d)\n"
		"  --token-file F          full-access token (also env TERMD_TOKEN)\n"
		"  --view-token-file F     read-only token\n"
		"  --shell PATH            shell for sessions (default bash, else sh)\n"
		"  --cwd DIR               start directory of sessions (default: current)\n"
		"  --max-frame BYTES       largest accepted frame (default %u)\n"
		"  --retain N              events kept for subscribe (default %d)\n"
		"  --event-log FILE        append every event as a JSON line\n"
		"  -v, --verbose           log more\n"
		"  --help, --version\n",
		TD_DEFAULT_HOST, TD_DEFAULT_PORT, TD_DEFAULT_MAX_FRAME, TD_DEFAULT_RETAIN);
}

static char *read_token_file(const char *path)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		fprintf(stderr, "termd: cannot read token file %s: %s\n", path, strerror(errno));
		return NULL;
	}
	char buf[512];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
		buf[--n] = 0;
	if (!n) {
		fprintf(stderr, "termd: token file %s is empty\n", path);
		return NULL;
	}
	return xstrdup(buf);
}

static int parse_listen(const char *v)
{
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
	if (*end || port < 0 || port > 65535) {
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

static int is_loopback(const char *h)
{
	return strncmp(h, "127.", 4) == 0 || strcmp(h, "localhost") == 0 || strcmp(h, "::1") == 0;
}

int main(int argc, char **argv)
{
	enum { O_LISTEN = 256, O_TOKEN, O_VIEW, O_SHELL, O_CWD, O_MAXFRAME, O_RETAIN, O_LOG,
	       O_HELP, O_VERSION };
	static const struct option lo[] = {
		{"listen", required_argument, NULL, O_LISTEN},
		{"token-file", required_argument, NULL, O_TOKEN},
		{"view-token-file", required_argument, NULL, O_VIEW},
		{"shell", required_argument, NULL, O_SHELL},
		{"cwd", required_argument, NULL, O_CWD},
		{"max-frame", required_argument, NULL, O_MAXFRAME},
		{"retain", required_argument, NULL, O_RETAIN},
		{"event-log", required_argument, NULL, O_LOG},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, O_HELP},
		{"version", no_argument, NULL, O_VERSION},
		{NULL, 0, NULL, 0},
	};
	opts.max_frame = TD_DEFAULT_MAX_FRAME;
	opts.retain = TD_DEFAULT_RETAIN;
	int c;
	while ((c = getopt_long(argc, argv, "v", lo, NULL)) != -1) {
		char *end;
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
		case O_SHELL:
			opts.shell = xstrdup(optarg);
			break;
		case O_CWD:
			opts.cwd = xstrdup(optarg);
			break;
		case O_MAXFRAME: {
			unsigned long long v = strtoull(optarg, &end, 10);
			if (*end || v < 1024) {
				fprintf(stderr, "termd: --max-frame wants a number of bytes >= 1024\n");
				return 2;
			}
			opts.max_frame = (size_t)v;
			break;
		}
		case O_RETAIN: {
			long v = strtol(optarg, &end, 10);
			if (*end || v < 1 || v > 10000000) {
				fprintf(stderr, "termd: --retain wants a number from 1 to 10000000\n");
				return 2;
			}
			opts.retain = (int)v;
			break;
		}
		case O_LOG:
			opts.event_log = xstrdup(optarg);
			break;
		case 'v':
			opts.verbose = log_verbose = 1;
			break;
		case O_HELP:
			usage(stdout);
			return 0;
		case O_VERSION:
			printf("termd %s (protocol %d)\n", TERMD_VERSION, PROTOCOL_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "termd: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (!opts.listen_host && !opts.listen_unix) {
		opts.listen_host = xstrdup(TD_DEFAULT_HOST);
		opts.listen_port = TD_DEFAULT_PORT;
	}
	if (!opts.token) {
		const char *t = getenv("TERMD_TOKEN");
		if (t && *t)
			opts.token = xstrdup(t);
	}
	unsetenv("TERMD_TOKEN");
	if (opts.listen_host && !is_loopback(opts.listen_host) && !opts.token) {
		fprintf(stderr, "termd: refusing to listen on %s without a token: anyone who can reach it "
				"would get a shell. Use --token-file F (or env TERMD_TOKEN), or listen on "
				"127.0.0.1 or a unix socket.\n", opts.listen_host);
		return 2;
	}
	if (!opts.cwd) {
		char buf[4096];
		opts.cwd = xstrdup(getcwd(buf, sizeof buf) ? buf : "/");
	}
	struct stat st;
	if (stat(opts.cwd, &st) != 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "termd: --cwd %s is not a directory\n", opts.cwd);
		return 2;
	}
	if (opts.shell && access(opts.shell, X_OK) != 0) {
		fprintf(stderr, "termd: --shell %s is not executable\n", opts.shell);
		return 2;
	}

	setlocale(LC_CTYPE, "C.UTF-8");
	/* a peer gone mid-write is EPIPE, a write past RLIMIT_FSIZE is EFBIG:
	 * errors for the code that wrote, never the end of termd (sessions get
	 * the default dispositions back in child_exec) */
	signal(SIGPIPE, SIG_IGN);
	signal(SIGXFSZ, SIG_IGN);
	/* orphaned descendants of sessions are reparented to termd and reaped
	 * here, so no zombie is left behind */
	prctl(PR_SET_CHILD_SUBREAPER, 1);

	if (server_init() < 0) {
		server_shutdown();
		return 1;
	}
	events_init();
	char err[256];
	if (!session_open("main", NULL, NULL, NULL, 0, 0, err, sizeof err)) {
		fprintf(stderr, "termd: cannot start the main shell: %s\n", err);
		server_shutdown();
		events_shutdown();
		return 1;
	}
	if (opts.listen_unix)
		log_info("listening on unix:%s", opts.listen_unix);
	else
		log_info("listening on %s:%d", opts.listen_host, opts.listen_port);
	server_run();
	server_shutdown();
	events_shutdown();
	free(opts.listen_host);
	free(opts.listen_unix);
	free(opts.token);
	free(opts.view_token);
	free(opts.shell);
	free(opts.cwd);
	free(opts.event_log);
	return 0;
}
