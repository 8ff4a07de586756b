/* options.h — termd's command line (options.c), for main.c. */
#ifndef TERMD_OPTIONS_H
#define TERMD_OPTIONS_H

/* Started as swerex-remote: SWE-ReX's options (--auth-token, --host,
 * --port) made termd's first listener; argv as it was otherwise. */
char **options_swerex_argv(int *argc, char **argv);
/* TERMD_<OPTION> variables, then the command line, into opts: -1 to go
 * on, else the exit status (0 after --help or --version) */
int options_parse(int argc, char **argv);
/* after parsing: defaults filled in, the listen hosts resolved, what
 * cannot work refused (said on stderr), paths checked: 0, or the exit
 * status */
int options_settle(void);

#endif
