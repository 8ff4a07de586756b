/* proto/compat.c — replacements for what one C library lacks (see compat.h): the signal
 * abbreviation table behind sigabbrev_np for musl. Compiled everywhere so the unit tests can
 * compare it with glibc's. */
#include <signal.h>
#include <stddef.h>
#include "compat.h"

/* glibc's names: no "SIG" prefix, SIGIOT is ABRT, SIGIO is POLL; real-time signals have none. */
static const char *const sig_abbrev[] = {
	[SIGHUP] = "HUP",       [SIGINT] = "INT",     [SIGQUIT] = "QUIT",     [SIGILL] = "ILL",
	[SIGTRAP] = "TRAP",     [SIGABRT] = "ABRT",   [SIGBUS] = "BUS",       [SIGFPE] = "FPE",
	[SIGKILL] = "KILL",     [SIGUSR1] = "USR1",   [SIGSEGV] = "SEGV",     [SIGUSR2] = "USR2",
	[SIGPIPE] = "PIPE",     [SIGALRM] = "ALRM",   [SIGTERM] = "TERM",
#ifdef SIGSTKFLT
	[SIGSTKFLT] = "STKFLT",
#endif
	[SIGCHLD] = "CHLD",     [SIGCONT] = "CONT",   [SIGSTOP] = "STOP",     [SIGTSTP] = "TSTP",
	[SIGTTIN] = "TTIN",     [SIGTTOU] = "TTOU",   [SIGURG] = "URG",       [SIGXCPU] = "XCPU",
	[SIGXFSZ] = "XFSZ",     [SIGVTALRM] = "VTALRM", [SIGPROF] = "PROF",   [SIGWINCH] = "WINCH",
	[SIGIO] = "POLL",
#ifdef SIGPWR
	[SIGPWR] = "PWR",
#endif
	[SIGSYS] = "SYS",
};

const char *td_sigabbrev(int sig)
{
	if (sig <= 0 || (size_t)sig >= sizeof sig_abbrev / sizeof sig_abbrev[0])
		return NULL;
	return sig_abbrev[sig];
}
