/* envopts.c — termd's options from the environment: TERMD_<OPTION> (the
 * long option's name in capitals, '-' as '_': TERMD_LISTEN,
 * TERMD_TOKEN_FILE, TERMD_MAX_SESSIONS...) for every option, so that an
 * image sets them without a long command line. They go in front of the
 * command line's options; an option the command line gives is not taken
 * from the environment at all (the command line wins). A flag (an option without a value)
 * is on for 1, yes, true or on, off for 0, no, false, off or empty. The
 * variables are then removed from the environment the sessions inherit. */
#include "envopts.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"

/* the new argv, reachable for the whole run (not static: a store to a
 * static never read is dropped by the compiler, and LeakSanitizer then
 * calls it a leak) */
char **envopts_argv;
/* the TERMD_<OPTION>=value strings taken (and removed from the
 * environment): an upgrade in place gives them to the new binary's
 * environment only (envopts_exec_env), so its options are the same */
char **envopts_taken;
static size_t ntaken;

static void remember(const char *var, const char *v)
{
	buf_t b = {0};
	buf_printf(&b, "%s=%s", var, v);
	envopts_taken = xrealloc(envopts_taken, (ntaken + 2) * sizeof *envopts_taken);
	envopts_taken[ntaken++] = buf_steal(&b);
	envopts_taken[ntaken] = NULL;
}

char **envopts_exec_env(char **env)
{
	size_t n = 0;
	while (env && env[n])
		n++;
	char **e = xcalloc(n + ntaken + 1, sizeof *e);
	size_t k = 0;
	for (size_t i = 0; i < ntaken; i++)
		e[k++] = envopts_taken[i];
	for (size_t i = 0; i < n; i++)
		e[k++] = env[i];
	e[k] = NULL;
	return e;
}

static int env_name(const char *opt, char *out, size_t outlen)
{
	int n = snprintf(out, outlen, "TERMD_");
	for (const char *p = opt; *p && (size_t)n + 1 < outlen; p++)
		out[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
	out[n] = 0;
	return strlen(opt) + 7 <= outlen ? 0 : -1;
}

/* Whether the command line gives option name (--name, --name=V; before a
 * "--"): then the environment's value is left out, not added (--listen and
 * --connect add an address each time they are given). */
static int on_command_line(int argc, char **argv, const char *name)
{
	size_t n = strlen(name);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--"))
			return 0;
		if (a[0] == '-' && a[1] == '-' && !strncmp(a + 2, name, n) &&
		    (a[2 + n] == 0 || a[2 + n] == '='))
			return 1;
	}
	return 0;
}

/* Options that are not read from the environment: TERMD_TOKEN is the
 * token itself (main.c reads it), help and version are no settings. */
static int skipped(const char *name)
{
	return !strcmp(name, "help") || !strcmp(name, "version");
}

int envopts_apply(int *argc, char ***argv, const struct option *lo)
{
	size_t n = 0, cap = (size_t)*argc + 8;
	char **nv = xcalloc(cap, sizeof *nv);
	nv[n++] = (*argv)[0];
	for (const struct option *o = lo; o->name; o++) {
		char var[96];
		if (skipped(o->name) || env_name(o->name, var, sizeof var) < 0)
			continue;
		const char *v = getenv(var);
		if (!v)
			continue;
		if (on_command_line(*argc, *argv, o->name)) {
			remember(var, v);   /* the command line still wins after an upgrade */
			unsetenv(var);
			continue;
		}
		remember(var, v);
		if (o->has_arg == no_argument) {
			if (!strcasecmp(v, "1") || !strcasecmp(v, "yes") || !strcasecmp(v, "true") ||
			    !strcasecmp(v, "on")) {
				/* on */
			} else if (!*v || !strcasecmp(v, "0") || !strcasecmp(v, "no") ||
				   !strcasecmp(v, "false") || !strcasecmp(v, "off")) {
				continue;
			} else {
				fprintf(stderr, "termd: %s=%s: a flag is 1 or 0 (yes/no, true/false)\n",
					var, v);
				for (size_t i = 1; i < n; i++)
					free(nv[i]);
				free(nv);
				return -1;
			}
		}
		if (n + 2 >= cap) {
			cap *= 2;
			nv = xrealloc(nv, cap * sizeof *nv);
		}
		buf_t a = {0};
		buf_printf(&a, "--%s", o->name);
		if (o->has_arg != no_argument)
			buf_printf(&a, "=%s", v);
		nv[n++] = buf_steal(&a);
		unsetenv(var);   /* termd's settings, not its sessions' */
	}
	if (n + (size_t)*argc >= cap) {
		cap = n + (size_t)*argc + 1;
		nv = xrealloc(nv, cap * sizeof *nv);
	}
	for (int i = 1; i < *argc; i++)
		nv[n++] = (*argv)[i];
	nv[n] = NULL;
	envopts_argv = nv;
	*argc = (int)n;
	*argv = nv;
	return 0;
}
