/* attach.c — od-attach, the viewer people use to watch a termd session and
 * take the keyboard, over ws://, wss:// (--cacert) or unix:: options
 * (getopt_long), the first attach before the terminal is taken, signals
 * through a self-pipe, the poll loop over the terminal and both
 * connections, and the way out. One /tty/<session> connection (read-only,
 * or read-write while typing; attach-tty.c) feeds our own libvterm screen,
 * drawn with ncursesw in colour (attach-draw.c); a second connection to
 * /events (subscribe + session.list; attach-events.c) keeps the status
 * line: session, size, mode, running command, last exit code, viewers. A
 * prefix key (C-] by default) gives the commands (attach-keys.c). The
 * viewer's libvterm never writes anything back to termd, and sees the
 * output only through proto/vtfilter.c's filter. */
#include "attach.h"

#include <curses.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct at_opts opt;

static int sig_pipe[2] = { -1, -1 };
static volatile sig_atomic_t got_winch, got_quit;

static const char usage_text[] =
	"usage: od-attach [--url URL] [--token T | --token-file F] [--cacert F]\n"
	"                 [--prefix KEY] [SESSION]\n"
	"       od-attach --replay FILE [--speed X] [--idle-limit S] [--dump]\n"
	"\n"
	"Watch a termd session live (default: main) and take the keyboard when you\n"
	"want to. URL defaults to $TERMD_URL, else " TD_DEFAULT_URL " (also\n"
	"wss://HOST:PORT for TLS, unix:/path.sock); the token defaults to\n"
	"$TERMD_TOKEN. wss:// checks termd's certificate against the system's CAs,\n"
	"or against the certificates in --cacert F (default $TERMD_CACERT);\n"
	"TERMD_TLS_INSECURE=1 skips the check (for testing only). It attaches\n"
	"read-only; typing needs the full token.\n"
	"\n"
	"Keys, after the prefix (C-] unless --prefix says otherwise, e.g. C-b):\n"
	"  i    take the keyboard / give it back (TYPING / WATCHING)\n"
	"  d    detach\n"
	"  n p  next / previous session\n"
	"  s    pick a session from a list\n"
	"  R    (typing) resize the session to this terminal; the old size is\n"
	"       given back when you stop typing\n"
	"  r    redraw\n"
	"  ?    help\n"
	"  the prefix twice sends the prefix key itself (typing)\n"
	"\n"
	"--replay plays a recording (termd --record, asciicast v2) in this terminal\n"
	"with its timing: space pauses, + and - change the speed, n jumps to the\n"
	"next marker (a command's start or end), q quits. --speed X starts at X\n"
	"times (default 1); --idle-limit S plays a pause longer than S seconds as S\n"
	"(default 2; 0 keeps them). --dump writes the output to stdout at once and\n"
	"markers and resizes as lines on stderr (\"m TIME LABEL\", \"r TIME COLSxROWS\").\n"
	"\n"
	"Exit status: 0 detached; 1 termd went away; 2 usage or the attach\n"
	"failed; 3 the session ended.\n";

/* ---- the way out ---- */

static void shutdown_all(void)
{
	tty_give_size_back();
	td_close(tty.c);
	tty.c = NULL;
	td_close(evs.c);
	evs.c = NULL;
	draw_end();
}

void finish(int code, const char *fmt, ...)
{
	shutdown_all();
	if (fmt) {
		va_list ap;
		fputs("od-attach: ", stderr);
		va_start(ap, fmt);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
		fputc('\n', stderr);
	}
	vts_free();
	sess_free_all();
	exit(code);
}

static void usage_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_die(const char *fmt, ...)
{
	va_list ap;
	fputs("od-attach: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n(od-attach --help for usage)\n", stderr);
	exit(EXIT_USAGE);
}

/* ---- signals ---- */

static void on_signal(int sig)
{
	int saved = errno;
	if (sig == SIGWINCH)
		got_winch = 1;
	else
		got_quit = sig;
	if (sig_pipe[1] >= 0) {
		char c = 0;
		ssize_t r = write(sig_pipe[1], &c, 1);
		(void)r;
	}
	errno = saved;
}

void attach_catch_signals(void (*handler)(int), int quit_too)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGWINCH, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (quit_too)
		sigaction(SIGQUIT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

static void setup_signals(void)
{
	if (pipe(sig_pipe) < 0) {
		perror("od-attach: pipe");
		exit(EXIT_USAGE);
	}
	for (int i = 0; i < 2; i++) {
		int fl = fcntl(sig_pipe[i], F_GETFL);
		fcntl(sig_pipe[i], F_SETFL, fl | O_NONBLOCK);
		fcntl(sig_pipe[i], F_SETFD, FD_CLOEXEC);
	}
	attach_catch_signals(on_signal, 1);
}

/* ---- the loop ---- */

/* How long poll may sleep: the next redraw, reconnect, message expiry, or
 * the running command's clock; 0 if a connection holds a whole message. */
static int poll_wait(void)
{
	int64_t t = now_ms();
	int64_t wait = 1000;   /* the running command's clock */
	if (view.dirty)
		wait = view.last_draw + REDRAW_MS - t;
	if (tty.lost && tty.retry_at - t < wait)
		wait = tty.retry_at - t;
	if (!evs.c && evs.retry_at - t < wait)
		wait = evs.retry_at - t;
	if (view.msg[0] && view.msg_until > t && view.msg_until - t < wait)
		wait = view.msg_until - t;
	if ((tty.c && td_pending(tty.c) == 2) || (evs.c && td_pending(evs.c) == 2))
		wait = 0;
	return wait < 0 ? 0 : (int)wait;
}

static int run(void)
{
	int quit = 0;
	while (!quit) {
		if (got_quit)
			finish(128 + got_quit, "stopped by signal %d", (int)got_quit);
		if (got_winch) {
			got_winch = 0;
			draw_resize();
			tty_follow_viewer();   /* after R, keep following the viewer */
		}
		int64_t t = now_ms();
		if (tty.lost && t >= tty.retry_at)
			tty_try_reconnect();
		if (!evs.c && t >= evs.retry_at)
			ev_connect();

		struct pollfd pf[4];
		int n = 0, i_in, i_sig, i_tty = -1, i_ev = -1;
		pf[i_in = n++] = (struct pollfd){ .fd = STDIN_FILENO, .events = POLLIN };
		pf[i_sig = n++] = (struct pollfd){ .fd = sig_pipe[0], .events = POLLIN };
		if (tty.c)
			pf[i_tty = n++] = (struct pollfd){ .fd = td_fd(tty.c), .events = POLLIN };
		if (evs.c)
			pf[i_ev = n++] = (struct pollfd){ .fd = td_fd(evs.c), .events = POLLIN };

		int r = poll(pf, (nfds_t)n, poll_wait());
		if (r < 0 && errno != EINTR)
			finish(EXIT_LOST, "poll: %s", strerror(errno));
		if (r > 0 && (pf[i_sig].revents & POLLIN)) {
			char buf[64];
			while (read(sig_pipe[0], buf, sizeof buf) > 0)
				;
		}
		if (r > 0 && (pf[i_in].revents & (POLLIN | POLLHUP | POLLERR))) {
			unsigned char buf[4096];
			ssize_t k = read(STDIN_FILENO, buf, sizeof buf);
			if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN))
				finish(EXIT_LOST, "the terminal went away");
			if (k > 0)
				keys_input(buf, (size_t)k, &quit);
		}
		if (tty.c && (td_pending(tty.c) == 2 ||
			      (r > 0 && i_tty >= 0 && pf[i_tty].revents)))
			tty_drain();
		if (evs.c && (td_pending(evs.c) == 2 || (r > 0 && i_ev >= 0 && pf[i_ev].revents)))
			ev_drain();

		t = now_ms();
		if (view.msg[0] && view.msg_until <= t) {
			view.msg[0] = 0;
			view.dirty = 1;
		}
		sinfo_t *s = sess_get(tty.session, 0);
		if (s && s->cmd && t - view.last_draw >= 1000)
			view.dirty = 1;
		if (view.dirty && t - view.last_draw >= REDRAW_MS)
			draw();
	}
	return EXIT_DETACHED;
}

/* ---- main ---- */

/* Once od-attach exits, a hang-up must not stop it half-way: its terminal
 * going away sends SIGHUP to the whole foreground group, and under ASan
 * LeakSanitizer's at-exit tracer (a process cloned then, with our
 * dispositions) died of it and left od-attach waiting for it forever,
 * spinning. Ignored from the first at-exit handler on (atexit runs ours
 * before the sanitizer's, registered before main). */
static void hup_ignored_at_exit(void)
{
	signal(SIGHUP, SIG_IGN);
}

int main(int argc, char **argv)
{
	atexit(hup_ignored_at_exit);
	const char *token = NULL, *token_file = NULL, *prefix = "C-]", *session = "main";
	const char *cacert = NULL;
	opt.url = td_default_url();
	opt.token = td_default_token();
	const char *replay = NULL;
	double speed = 1, idle_limit = 2;
	int dump = 0, speed_given = 0, idle_given = 0;
	enum { O_URL = 256, O_TOKEN, O_TOKEN_FILE, O_PREFIX, O_CACERT, O_REPLAY, O_SPEED,
	       O_IDLE, O_DUMP };
	static const struct option lo[] = {
		{ "url", required_argument, NULL, O_URL },
		{ "token", required_argument, NULL, O_TOKEN },
		{ "token-file", required_argument, NULL, O_TOKEN_FILE },
		{ "prefix", required_argument, NULL, O_PREFIX },
		{ "cacert", required_argument, NULL, O_CACERT },
		{ "replay", required_argument, NULL, O_REPLAY },
		{ "speed", required_argument, NULL, O_SPEED },
		{ "idle-limit", required_argument, NULL, O_IDLE },
		{ "dump", no_argument, NULL, O_DUMP },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	opterr = 0;   /* our own messages, below */
	int c;
	while ((c = getopt_long(argc, argv, ":hV", lo, NULL)) != -1) {
		switch (c) {
		case O_URL:
			opt.url = optarg;
			break;
		case O_TOKEN:
			token = optarg;
			break;
		case O_TOKEN_FILE:
			token_file = optarg;
			break;
		case O_PREFIX:
			prefix = optarg;
			break;
		case O_CACERT:
			cacert = optarg;
			break;
		case O_REPLAY:
			replay = optarg;
			break;
		case O_SPEED:
		case O_IDLE: {
			char *end;
			double v = strtod(optarg, &end);
			int ok = end != optarg && !*end && v >= 0 && v <= 1e6 &&
				 (c == O_IDLE || (v >= 1.0 / 16 && v <= 64));
			if (!ok)
				usage_die(c == O_SPEED ? "--speed wants a number from 0.0625 to 64"
						       : "--idle-limit wants seconds (0 keeps every pause)");
			*(c == O_SPEED ? &speed : &idle_limit) = v;
			*(c == O_SPEED ? &speed_given : &idle_given) = 1;
			break;
		}
		case O_DUMP:
			dump = 1;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		case 'V':
			printf("od-attach %s (contract %s, protocol %d)\n", TERMD_VERSION, TD_CONTRACT_VERSION,
			       PROTOCOL_VERSION);
			return 0;
		case ':':
			usage_die("%s needs a value", argv[optind - 1]);
		default:
			if (optopt)
				usage_die("unknown option -%c", optopt);
			usage_die("unknown option %s", argv[optind - 1]);
		}
	}
	if (replay) {
		if (optind < argc)
			usage_die("unexpected argument %s", argv[optind]);
		return replay_main(replay, speed, idle_limit, dump);
	}
	if (dump)
		usage_die("--dump goes with --replay FILE");
	if (speed_given || idle_given)
		usage_die("%s goes with --replay FILE", speed_given ? "--speed" : "--idle-limit");
	if (optind < argc)
		session = argv[optind++];
	if (optind < argc)
		usage_die("unexpected argument %s", argv[optind]);
	if (!td_valid_session_name(session))
		usage_die("not a session name: '%s'", session);
	copy_name(tty.session, session);
	int pc = keys_parse_prefix(prefix, opt.prefix_name, sizeof opt.prefix_name);
	if (pc < 0)
		usage_die("--prefix: not a key: '%s' (e.g. C-b, C-], ^A)", prefix);
	opt.prefix = (unsigned char)pc;
	char *file_token = NULL;
	char err[512];
	if (token) {
		opt.token = token;
	} else if (token_file) {
		file_token = td_read_token_file(token_file, err, sizeof err);
		if (!file_token)
			usage_die("%s", err);
		opt.token = file_token;
	}
	if (cacert)
		td_tls_set_cafile(cacert);
	td_url u;
	if (td_url_parse(opt.url, &u, err, sizeof err) < 0)
		usage_die("bad URL: %s", err);
	if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
		fputs("od-attach: needs a terminal (stdin and stdout)\n", stderr);
		return EXIT_USAGE;
	}
	setlocale(LC_ALL, "");

	/* attach before taking over the terminal, so errors are plain text */
	tty.c = tty_open(tty.session, 0, err, sizeof err);
	if (!tty.c) {
		if (is_http(err, 404))
			fprintf(stderr, "od-attach: no session '%s' on %s\n", tty.session, opt.url);
		else
			fprintf(stderr, "od-attach: cannot attach to %s at %s: %s\n", tty.session,
				opt.url, err);
		free(file_token);
		return EXIT_USAGE;
	}
	vts_init();
	setup_signals();
	ev_connect();
	draw_start();
	int rc = run();
	shutdown_all();
	vts_free();
	sess_free_all();
	free(file_token);
	return rc;
}
