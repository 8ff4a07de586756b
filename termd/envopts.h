/* envopts.h — termd's options from TERMD_* environment variables (envopts.c). */
#ifndef TERMD_ENVOPTS_H
#define TERMD_ENVOPTS_H

#include <getopt.h>

/* Puts the options the environment sets (TERMD_<NAME>) in front of argv's;
 * -1 (said on stderr) on a flag's bad value. */
int envopts_apply(int *argc, char ***argv, const struct option *lo);
extern char **envopts_argv;   /* the argv it made */
extern char **envopts_taken;  /* the TERMD_<OPTION>=value strings it took */
/* env with the taken TERMD_<OPTION> strings put back in front (a new
 * array of the same strings, for an execve: termd's options, not its
 * sessions') */
char **envopts_exec_env(char **env);

#endif
