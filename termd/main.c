/* main.c — termd's entry point: the options taken (options.c), then
 * process-wide setup (locale, SIGPIPE and SIGXFSZ ignored, subreaper,
 * cgroups), the hand-over, the listeners, every module registered in
 * order, the sessions (the `main` shell), plugins and links, the event
 * loop, and the end in order. */
#include "door.h"
#include "fswork.h"
#include "handover.h"
#include "options.h"
#include "front/front.h"

#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>

/* before the loop goes: the /tty channel's frame timer, then every
 * session's timers, waiters and processes */
static void stop_all(void)
{
	tty_shutdown();
	cgroup_stop();
	session_stop_all();
}

/* The end, in order, from any point after the loop was made (each part is
 * safe when its module never started): links and plugin processes;
 * sessions' timers, waiters and processes while the loop still exists;
 * the loop (every connection and pty closed); the sessions freed; the
 * listener and run folder; then what the modules and options hold. */
static void teardown(void)
{
	front_stop();   /* its thread first: it forwards to the loop's socket */
	link_stop();
	plugin_stop_all();
	session_spare_stop();
	stop_all();
	fswork_shutdown(); /* file work in flight: its workers joined, its answers dropped */
	envd_shutdown();   /* its timers and streams while the loop still exists */
	sandbox_shutdown(); /* its commands' timers */
	ohv1_shutdown();   /* the same for OpenHands V1's commands and sockets */
	watch_shutdown();  /* after envd's sinks; its inotify fds while the loop exists */
	ports_shutdown();  /* its timers and port.wait actions while the loop exists */
	server_close_loop();
	session_free_all();
	cgroup_shutdown();   /* after the sessions' cgroups: termd back, its folders gone */
	server_shutdown();
	events_shutdown();
	plugin_shutdown();
	link_shutdown();
	openhands_shutdown();
	swerex_shutdown();
	web_shutdown();
	metrics_shutdown();
	actions_shutdown();
	child_forget_all();
	free(opts.plugins);
	free(opts.plugin_dir);
	free(opts.state_dir);
	free(opts.listen_host);
	free(opts.listen_unix);
	for (int i = 0; i < opts.nextra; i++)
		free(opts.extra_host[i]);
	free(opts.token);
	free(opts.view_token);
	free(opts.preview_token);
	free(opts.preview_host_suffix);
	free(opts.shell);
	free(opts.cwd);
	free(opts.event_log);
	free(opts.tls_cert);
	free(opts.tls_key);
	free(opts.record_dir);
	for (size_t i = 0; i < opts.nconnect; i++)
		free(opts.connect[i]);
	free(opts.connect);
	free(opts.connect_token);
	free(opts.sandbox_id);
	free(opts.sandbox_base);
	free(opts.cacert);
}

/* The process set up (locale, signals, subreaper, its cgroup), the
 * hand-over taken, then the listeners: the front's sockets and lws's
 * context: 0, or the exit status (what started is stopped). */
static int start_listeners(void)
{
	setlocale(LC_CTYPE, "C.UTF-8");
	/* a peer gone mid-write is EPIPE, a write past RLIMIT_FSIZE is EFBIG:
	 * errors for the code that wrote, never the end of termd (sessions get
	 * the default dispositions back in child_exec) */
	signal(SIGPIPE, SIG_IGN);
	signal(SIGXFSZ, SIG_IGN);
	/* orphaned descendants of sessions are reparented to termd and reaped
	 * here, so no zombie is left behind */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	/* cgroups found and termd's own made before anything is started (v1:
	 * termd moves into it once the main shell is: cgroup_move_self);
	 * session.limit events */
	cgroup_init(events_broadcast);

	char herr[512];
	if (handover_begin(herr, sizeof herr) < 0) {
		fprintf(stderr, "termd: cannot take the hand-over: %s\n", herr);
		return 1;
	}
	char ferr[512];
	if (front_prepare(ferr, sizeof ferr) < 0) {
		log_error("%s", ferr);
		front_stop();
		cgroup_shutdown();
		return 1;
	}
	if (server_init(&conn_protocol, &tty_protocol) < 0) {
		front_stop();
		cgroup_shutdown();
		server_shutdown();
		return 1;
	}
	if (front_start(ferr, sizeof ferr) < 0) {
		log_error("%s", ferr);
		front_stop();
		cgroup_shutdown();
		server_shutdown();
		return 1;
	}
	return 0;
}

/* Each layer started and wired to the one below: the event stream onto
 * the connections, then every module's actions, routes and listeners, in
 * the order their hooks must run. */
static void register_modules(void)
{
	events_init(conn_send);
	/* every module registers its actions (plugins will add theirs) */
	actions_init();
	fair_set_probe(pending_newest);
	events_register();
	cmd_init(events_broadcast);           /* before run: the shell's state, then the waiters */
	record_register();    /* after cmd, before run: markers from the command record */
	run_register();
	expect_register();
	tty_register();
	sessionctl_register();   /* after tty: session.exit after the viewers' exit frames */
	fsact_register();     /* the worker that runs the file actions below */
	files_register();
	edit_register();
	fsops_register();
	watch_register();
	ports_register();
	ohv1_register();
	swerex_register();   /* on a swerex listener (swerex-remote's) */
	openhands_register();
	envd_register();
	sandbox_register();
	web_register();
	ohv1_register_late();
	proxy_register();
	handover_register();
	metrics_register();
}

/* The sessions (the main shell, or those handed over), the plugins and
 * the links: 0, or the exit status (torn down). */
static int start_work(void)
{
	char err[256];
	td_err code;
	if (srv.inherited) {
		handover_adopt(err, sizeof err);
	} else if (!session_open("main", NULL, NULL, NULL, 0, 0, &code, err, sizeof err)) {
		fprintf(stderr, "termd: cannot start the main shell: %s\n", err);
		teardown();
		return 1;
	}
	/* v1: termd into its own cgroup, in a thread, now that the main
	 * shell's cgroup is made (the move holds the lock its mkdirs need) */
	cgroup_move_self();
	if (plugin_init(err, sizeof err) < 0) {
		fprintf(stderr, "termd: %s\n", err);
		teardown();
		return 2;
	}
	if (link_start(err, sizeof err) < 0) {
		fprintf(stderr, "termd: %s\n", err);
		teardown();
		return 2;
	}
	handover_adopt_late();
	if (opts.listen_none)
		log_info("no listener: dial-out links only");
	else if (opts.listen_unix)
		log_info("listening on unix:%s", opts.listen_unix);
	else
		log_info("listening on %s:%d", opts.listen_host, opts.listen_port);
	return 0;
}


int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--check-handover"))
		return handover_check(argv[2]);
	if (argc == 2 && !strcmp(argv[1], "--stub"))
		pty_stub_main();   /* a spare session process (pty.c): never returns */
	argv = options_swerex_argv(&argc, argv);
	handover_set_argv(argv);
	int rc = options_parse(argc, argv);
	if (rc >= 0)
		return rc;
	if ((rc = options_settle()) || (rc = start_listeners()))
		return rc;
	register_modules();
	if ((rc = start_work()))
		return rc;
	server_run();   /* the loop */
	teardown();
	return 0;
}
