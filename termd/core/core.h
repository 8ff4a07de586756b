/* core.h — the terminal core: sessions (a pty, a screen, shell integration),
 * command life, rendering, the output store, fairness, keys, input-wait and
 * the /proc walk.
 * It knows nothing of actions, connections or front doors: what it has to
 * tell them goes through the session listeners and hooks registered from above. */
#ifndef TERMD_CORE_H
#define TERMD_CORE_H

#include "loop.h"
#include "render.h"
#include "output.h"
#include "pty.h"
#include "cgroup.h"
#include "vtfilter.h"

/* What the shell-integration scanner (shellint.c) finds in a session's
 * output: text, termd's marks (C start, D done, P continuation), readline
 * ready (bracketed paste on), a window title. */
enum si_event { SI_TEXT, SI_MARK_START, SI_MARK_DONE, SI_MARK_CONT, SI_READY, SI_TITLE };

/* ---- commands (cmd.c) ---- */
/* One command line in flight in a session (typed by the agent or a viewer). */
struct cmd {
	char *text;
	char sname[TD_SESSION_NAME_MAX + 1]; /* its session, for messages */
	int by_viewer;
	int typed;                /* an agent's text, typed into the shell */
	int awaiting_shell;       /* typed, and the shell has not shown it read it
				   * yet (no C, D or P mark since): still typing */
	int started;              /* shell said it began (C mark) */
	int finished;
	int exit_code;
	uint64_t start_us, end_us;
	int rec_start, rec_end;   /* record.c wrote its start / end marker */
	render_t *render;         /* NULL once finished */
	struct output out;        /* its rendered text (output.c) */
	buf_t pre;                /* typed, not started: the shell's output (the
				   * echo, then a message if it rejects the text) */
	char *cleared;            /* a run's: what was left on the prompt line and
				   * cleared before it was typed (extras.cleared) */
};


/* ---- sessions (session.c) ---- */
enum shell_state { SH_STARTING, SH_IDLE, SH_RUNNING, SH_DEAD };
/* bash (readline, PS0, PROMPT_COMMAND) or a POSIX sh (termd.sh via $ENV) */
enum shell_kind { SHELL_BASH, SHELL_SH };

/* How the next session opened runs its program instead of `sh -c
 * command` (session_exec_next): argv exec'd as it is (execvp, no shell),
 * as uid/gid with the groups given when as_user (termd is root) — the ids
 * switched in the child, no setpriv. The command string stays what the
 * session shows (session.list, its events). */
struct session_exec {
	char *const *argv;
	int as_user;
	uid_t uid;
	gid_t gid;
	int ngroups;
	const gid_t *groups;
};

struct session {
	struct session *next;
	char name[TD_SESSION_NAME_MAX + 1];
	char *command;            /* session program (NULL = interactive shell) */
	int is_shell;             /* has termd's shell integration */
	int is_pipe;              /* a pipe session: no terminal, stdout and stderr apart */
	enum shell_kind shell_kind;
	struct pty pty;           /* its process: fd, pid, alive, exit code (pty.c) */
	const cJSON *spawn_env;   /* session.open's env, while spawning only */
	const struct session_exec *spawn_exec; /* how it runs, while spawning only */
	char **spawn_envp;        /* its environment made before a clone3 (the child
				   * may not malloc), while spawning only */
	int rows, cols;
	struct screen *screen;    /* read it through session_screen() */
	buf_t screen_due;         /* a pipe session's output not fed to its screen yet
				   * (\n as \r\n): fed when the screen is read */
	size_t screen_due_lines;  /* the \n in it */
	struct shellint *si;
	enum shell_state state;
	uint64_t spawned_us;      /* when its process started (a shell still starting says how long) */
	uint64_t prompt_us;       /* its last prompt mark (a shell up but not reading yet) */
	int ready;                /* line editor is reading (prompt shown) */
	int cont;                 /* the shell reads the rest of a command (PS2) */
	int line_clean;           /* nothing was written to its pty since a run typed
				   * a command line (ending in its Enter): the line
				   * editor's next line is empty (run.c, shellint.c) */
	char *cwd;
	struct cmd *cmd;          /* current or last undelivered command */
	struct waiter *waiters;   /* run and keys actions waiting on it, in order */
	struct expect *expect;    /* the expect action waiting on it */
	struct viewer *viewers;   /* /tty connections */
	buf_t typed;              /* keys/viewer bytes since the last prompt */
	int typed_by_agent;       /* ... some of them by `keys` */
	uint64_t last_output_us;
	lws_sorted_usec_list_t ready_sul;
	unsigned ready_poll_us;   /* the next look for a shell reading its terminal, in */
	lws_sorted_usec_list_t close_sul;
	int closing;              /* session.close: freed once its process ends */
	int close_killed;         /* ... and the KILL after the grace time was sent */
	int nviewers;
	struct {                  /* fair.c's */
		int bulk;         /* its last read used the whole budget */
		int typed;        /* typed into, nothing printed since */
		uint64_t typed_us, newest_pending, held_since;
		int out_held;     /* its output's consumer is behind (fair_out_hold) */
	} fair;
	struct recording *rec;    /* --record: its recording (record.c), or NULL */
	struct cgroup *cg;        /* its cgroup (cgroup.c), or NULL without cgroups */
};


/* ---- fairness between sessions (fair.c) ---- */
/* Decide again which bulk sessions are held (also on its own timer). */
void fair_update(void);
/* s's pty was read: full = the read used the whole budget */
void fair_read(struct session *s, int full);
/* s was typed into (a viewer, keys, run) */
void fair_typed(struct session *s);
/* an action began or ended waiting on s (s may be NULL) */
void fair_pending_changed(struct session *s, int ended);
/* Hold s's output (1: its pty or pipes are not read at all, so the kernel
 * blocks its writer; fairness's one-read releases do not apply) while
 * whoever takes it is behind (an e2b process stream whose client reads
 * slower), or let fairness decide again (0). */
void fair_out_hold(struct session *s, int hold);
void fair_shutdown(void);
/* the action layer's "when did the newest action waiting on s begin" (µs, 0: none) */
void fair_set_probe(uint64_t (*probe)(const struct session *s));


/* ---- sessions (session.c) ---- */
/* What a session tells the modules that follow it, in the order they
 * listened (main.c): cmd before run. Every hook may be NULL. */
struct session_listener {
	void (*started)(struct session *s); /* its process was spawned (open, respawn) */
	void (*input)(struct session *s, const char *data, size_t n);  /* written to the pty */
	void (*output)(struct session *s, const char *data, size_t n); /* the pty's bytes
						 * (a pipe session's both streams, \n as \r\n) */
	/* a pipe session's bytes as the program wrote them: stream 1 stdout, 2 stderr */
	void (*stream)(struct session *s, int stream, const char *data, size_t n);
	void (*text)(struct session *s, const char *data, size_t n);   /* output, marks removed */
	void (*title)(struct session *s, const char *t, size_t n);
	void (*resize)(struct session *s);
	void (*mark)(struct session *s, enum si_event ev, const char *data, size_t n, int code);
	void (*exit)(struct session *s);   /* its process ended (before session.exit) */
	void (*gone)(struct session *s);   /* restarted or freed: drop what refers to it */
};
void session_listen(const struct session_listener *l);
/* Fan a shell-integration mark out to the listeners (the scanner's, or a
 * synthetic SI_READY from cmd.c's fallback timer). */
void session_mark(struct session *s, enum si_event ev, const char *data, size_t n, int code);
/* The session is restarted or freed: every listener's gone. */
void session_gone(struct session *s);
struct session *session_find(const char *name);
/* Start a session; command NULL = interactive shell. NULL + code and msg
 * on error (too_large at --max-sessions, else internal). */
struct session *session_open(const char *name, const char *command, const char *cwd,
			     const cJSON *env, int cols, int rows, td_err *code, char *err,
			     size_t errlen);
/* A pipe session: command (required) runs with pipes, stdin a pipe only
 * with_stdin (else /dev/null); its output is fed to the screen too. */
struct session *session_open_pipe(const char *name, const char *command, const char *cwd,
				  const cJSON *env, int with_stdin, int cols, int rows,
				  td_err *code, char *err, size_t errlen);
/* Either kind (mode: PTY_TERMINAL, PTY_PIPES[_STDIN]) with limits for its
 * cgroup (NULL: the defaults). */
struct session *session_open_with(const char *name, const char *command, const char *cwd,
				  const cJSON *env, int mode, int cols, int rows,
				  const struct cg_limits *lim, td_err *code, char *err,
				  size_t errlen);
/* A pipe session's stdin: end of file once what is written is in. -1 when
 * it has none open. */
int session_close_stdin(struct session *s);
int session_respawn(struct session *s, char *err, size_t errlen);
/* The next session_open*'s first spawn runs x (NULL: as usual). x and
 * what it points to must live until that open returns; the caller sets
 * NULL again after it (an open that failed early never took it). */
void session_exec_next(const struct session_exec *x);
/* s's screen, brought up to date first: a pipe session's screen is fed
 * only when read (its output kept meanwhile, the lines a screen and its
 * scrollback can show). Everything that reads or drives a screen takes
 * it from here. */
struct screen *session_screen(struct session *s);
/* a session handed over across execve (handover.c); rec: its record entry */
struct session *session_adopt(const cJSON *rec, char *err, size_t errlen);
void session_write(struct session *s, const void *data, size_t len);
/* the shell sessions run: --shell, else bash, else sh */
const char *session_shell_path(void);
void session_resize(struct session *s, int cols, int rows);
pid_t session_fg_pid(struct session *s);
void session_stop_all(void);
/* Free a session that is off the lists (closing, process gone). */
void session_destroy(struct session *s);
void session_free_all(void);
/* the spare shell process and cgroup made ahead of need (cgroup v1) ended
 * and no more made: before termd ends or hands over */
void session_spare_stop(void);
cJSON *session_names_json(void);


/* ---- shell integration (shellint.c) ---- */
/* commands longer than this (bytes or lines) are sourced from a file */
#define SHELLINT_PASTE_MAX   4096
#define SHELLINT_PASTE_LINES 24
/* the key share/shell/termd.bash binds to readline's kill-whole-line */
#define SHELLINT_KILL_LINE   "\x1b[6973~"
typedef void (*si_cb)(void *user, enum si_event ev, const char *data, size_t len, int code);
struct shellint *shellint_new(si_cb cb, void *user);
void shellint_free(struct shellint *si);
const char *shellint_nonce(struct shellint *si);
/* Replace the random nonce (the fuzz target gives two scanners one nonce). */
void shellint_set_nonce(struct shellint *si, const char *nonce);
void shellint_feed(struct shellint *si, const char *data, size_t n);
/* Write the rc files (termd.bash, termd.sh) into dir. 0 or -1. */
int shellint_write_rc(const char *dir);
/* The bytes to type so the shell runs `text` as one unit, on a line
 * cleared first. */
void shellint_type_command(struct session *s, const char *text, buf_t *out);


/* ---- screen (screen.c) ---- */
struct screen *screen_new(int rows, int cols);
void screen_free(struct screen *sc);
void screen_feed(struct screen *sc, const char *data, size_t n);
void screen_resize(struct screen *sc, int rows, int cols);
void screen_text(struct screen *sc, buf_t *out);
/* Scrollback: keep up to `lines` lines scrolled off the primary screen
 * (0 = none, the default); the last max_lines of them, one per line. */
void screen_set_scrollback(struct screen *sc, size_t lines);
size_t screen_scrollback_lines(struct screen *sc);
void screen_scrollback_text(struct screen *sc, size_t max_lines, buf_t *out);
int screen_alt(struct screen *sc);
void screen_cursor(struct screen *sc, int *row, int *col, int *visible);
/* 1 if the cursor sits after text on its row, as a prompt leaves it */
int screen_cursor_after_text(struct screen *sc);
const char *screen_title(struct screen *sc);
void screen_set_title(struct screen *sc, const char *t, size_t n);
/* Bytes reproducing the visible screen on a blank terminal (tty 'S'). */
void screen_snapshot(struct screen *sc, buf_t *out);
/* Type a key through libvterm's keyboard layer (honours cursor-key mode). */
void screen_key(struct screen *sc, int vterm_key, int mod);
void screen_unichar(struct screen *sc, uint32_t c, int mod);
/* Terminal answers (DSR, DA) go back to the program through this. */
void screen_set_output(struct screen *sc, void (*cb)(const char *, size_t, void *), void *user);


/* ---- command life (cmd.c) ---- */
/* an event no action caused (command.start/end, an output file error); takes extras */
typedef void cmd_event_fn(const char *observation, const char *content, cJSON *extras);
void cmd_init(cmd_event_fn *emit);      /* its session listener: before run.c's */
struct cmd *cmd_new(struct session *s, const char *text, int by_viewer);
void cmd_free(struct cmd *cmd);
/* a running command taken over across an upgrade in place (handover.c) */
struct cmd *cmd_adopt(struct session *s, const char *text, const char *output, uint64_t ran_us,
		      int started);
/* make cmd the session's command (the previous one is freed) */
void cmd_set(struct session *s, struct cmd *cmd);
/* what the command printed since the last answer (output_collect) */
void cmd_collect(struct cmd *cmd, size_t max_output, buf_t *out, int *truncated);
/* A person (viewer) or `keys` (by_agent) typed these bytes at the prompt:
 * they name the command the shell starts next. */
void cmd_note_typed(struct session *s, const char *data, size_t n, int by_agent);
/* The line typed at the prompt since it was shown (keys, viewers), as
 * typed_command reads it; NULL when none. Allocated. */
char *cmd_typed_line(struct session *s);
/* A session.open program began: it is the session's command. */
void cmd_program_started(struct session *s);


/* ---- keys (keys.c) ---- */
/* Type one key name or literal text into the session; 1 if it was a
 * key name. */
int keys_type(struct session *s, const char *item);
/* For run is_input: a control-key name (C-c, C-d, C-z, C-\, C-<letter>)? */
int keys_is_control_name(const char *s, char *byte);


/* ---- waiting for input detection (inputwait.c) ---- */
/* How the session's foreground processes wait on its tty (higher wins): */
enum inputwait {
	IW_NO,      /* not waiting on it (running, sleeping, on something else) */
	IW_HIDDEN,  /* one termd may not inspect sleeps, the tty in password mode */
	IW_RELAY,   /* polling it among other descriptors (apt, ssh, script) */
	IW_READ,    /* blocked reading it, or polling it alone */
};
/* reader: the waiting process (0 with IW_NO) */
enum inputwait inputwait_blocked_on_tty(struct session *s, pid_t *reader);
/* What a waiting program waits for (the contract's extras.waiting.kind) */
enum iw_kind { IWK_LINE, IWK_PASSWORD, IWK_KEY, IWK_PAGER, IWK_EDITOR };
struct inputwait_what {
	enum iw_kind kind;
	int shell;                /* an interactive shell (su's, a nested bash) at its
				   * prompt: kind line, whatever mode its readline set */
	pid_t pid;
	char command[1024];       /* its arguments joined by spaces */
};
void inputwait_describe(struct session *s, pid_t reader, struct inputwait_what *w);
const char *inputwait_kind_name(enum iw_kind k);

/* ---- /proc (procscan.c) ---- */
/* A process as /proc/PID/stat has it. */
struct proc_info {
	pid_t pid, ppid, pgrp, sid;
	char state;               /* R, S, D, Z, T... */
	unsigned long tty_nr;     /* controlling terminal, the kernel's encoding (0: none) */
};
/* pid's stat: 0, or -1 (no such process, or it cannot be read) */
int procscan_stat(pid_t pid, struct proc_info *pi);
/* fn for every process in /proc (those gone by the time their stat is
 * read are passed over) until it returns non-zero: that value; 0 after
 * the last; -1 when /proc cannot be read. */
typedef int procscan_fn(const struct proc_info *pi, void *arg);
int procscan_each(procscan_fn *fn, void *arg);
/* every process, sorted by pid: the count and *out (malloc'd, may be
 * NULL), or -1 when /proc cannot be read */
int procscan_all(struct proc_info **out);
/* pid in procscan_all's v of n, or NULL */
const struct proc_info *procscan_find(const struct proc_info *v, int n, pid_t pid);
/* what pid's descriptor fd links to (/proc/PID/fd/FD: a path, "socket:[INODE]",
 * "pipe:[INODE]"...) into target, NUL-terminated, cut at size - 1: its length, or -1 */
ssize_t procscan_fd_link(pid_t pid, long fd, char *target, size_t size);
/* fn for each of pid's descriptors with its link's first 255 bytes until
 * it returns non-zero: that value, or 0 (also when pid is gone) */
typedef int procscan_fd_fn(pid_t pid, long fd, const char *target, void *arg);
int procscan_fds(pid_t pid, procscan_fd_fn *fn, void *arg);

/* ---- listening sockets (portscan.c) ---- */
/* one listening socket termd saw */
struct port_ent {
	unsigned long inode;
	int port;
	char addr[INET6_ADDRSTRLEN];
	int ours;                /* a process of a session holds it */
	int seen;                /* in this tick's reading */
	int told;                /* its port.open was sent */
	char session[TD_SESSION_NAME_MAX + 1];
	pid_t pid;
	char *command;
};
/* One reading: every LISTEN socket marked seen, the new ones matched to a
 * session's process (ours 1) or not (0); each socket no longer there handed
 * to gone, then dropped. How many were new. */
int portscan_update(void (*gone)(const struct port_ent *e));
/* Before any session has a process: every socket listening now is no
 * session's (ours 0), noted without walking /proc (which the first reading
 * would do for each socket of the machine's other programs). */
void portscan_baseline(void);
/* the table as the last reading left it */
struct port_ent *portscan_ents(size_t *n);
void portscan_free(void);
/* the table as the hand-over record's part "ports" (handover.c), and
 * taken back from it before the new image's first reading */
cJSON *portscan_handover_save(void);
void portscan_handover_load(const cJSON *j);

#endif
