/* child.c — termd's child processes other than through a pty's session:
 * who waits for which pid. The SIGCHLD handler reaps every child (termd is
 * a subreaper, so orphans of sessions come here too) and hands each status
 * to the owner that watched its pid (a session's shell, a plugin's
 * program or setup script); the rest are reaped and forgotten. */
#include "loop.h"

#include <stdlib.h>
#include <sys/wait.h>

struct watch {
	struct watch *next;
	pid_t pid;
	child_cb cb;
	void *arg;
};

static struct watch *watches;

void child_watch(pid_t pid, child_cb cb, void *arg)
{
	struct watch *w = xcalloc(1, sizeof *w);
	w->pid = pid;
	w->cb = cb;
	w->arg = arg;
	w->next = watches;
	watches = w;
}

void child_unwatch(pid_t pid)
{
	for (struct watch **pp = &watches; *pp; pp = &(*pp)->next) {
		if ((*pp)->pid == pid) {
			struct watch *w = *pp;
			*pp = w->next;
			free(w);
			return;
		}
	}
}

void child_reap_all(void)
{
	for (;;) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG);
		if (pid <= 0)
			break;
		for (struct watch **pp = &watches; *pp; pp = &(*pp)->next) {
			if ((*pp)->pid != pid)
				continue;
			struct watch *w = *pp;
			*pp = w->next;       /* a pid is reaped once: unwatch first */
			child_cb cb = w->cb;
			void *arg = w->arg;
			free(w);
			cb(arg, pid, st);
			break;
		}
	}
}

void child_forget_all(void)
{
	while (watches) {
		struct watch *w = watches;
		watches = w->next;
		free(w);
	}
}
