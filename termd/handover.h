/* handover.h — upgrade in place (handover.c): the record, the check, the
 * execve, and taking it all back at start. */
#ifndef TERMD_HANDOVER_H
#define TERMD_HANDOVER_H

#include <time.h>
#include "door.h"

/* main's argv, kept for the execve; also notes when this image began */
void handover_set_argv(char **argv);
/* --check-handover FILE: 0 when this binary can take the record */
int handover_check(const char *file);
/* at start, before server_init: a record in env TERMD_HANDOVER is read
 * (1), none (0), or it cannot be taken (-1, err) */
int handover_begin(char *err, size_t errlen);
/* after the modules registered: the sessions and events taken back */
int handover_adopt(char *err, size_t errlen);
/* after the plugins and links started: their parts taken back */
void handover_adopt_late(void);
/* check BINARY (NULL: termd's own path) and execve it; returns only on
 * failure (-1, err), the old termd still serving */
int handover_upgrade(const char *binary, const cJSON *cause, char *err, size_t errlen);
void handover_register(void);
int handover_upgraded(void);
time_t handover_started(void);

#endif
