/* termctl.h — what termctl's files share: the exit statuses, the client's
 * state, the helpers termctl.c defines (errors, arguments, the call and its
 * observation) and the commands termctl-manage.c defines. */
#ifndef TD_TERMCTL_H
#define TD_TERMCTL_H

#include "client.h"
#include "client-int.h"
#include "proto.h"

/* Exit statuses besides a command's own. */
#define EXIT_PROTO   2     /* usage, connection, protocol or error observation */
#define EXIT_RUNNING 124   /* `run` came back with the command still running */

typedef struct ctl {
	const char *url;
	const char *token;
	int wait_ms;        /* --wait: how long to wait for an answer; -1 = forever */
	td_client *c;
} ctl_t;

/* ---- termctl.c ---- */
/* "termctl: " and the message on stderr, exit 2 */
void ctl_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* ... with a pointer to --help */
void ctl_usage_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* s as a number >= 0, else a usage error naming what */
double ctl_number(const char *s, const char *what);
/* Matches argv[*i] against -s / --long / --long=VALUE; takes the value. */
int ctl_opt(int argc, char **argv, int *i, const char *shrt, const char *lng, const char **val);
int ctl_flag(const char *a, const char *shrt, const char *lng);
/* all of stdin (NUL-terminated too), its length in *out_len */
char *ctl_read_stdin_n(size_t *out_len);
/* the connection, opened on first use */
td_client *ctl_conn(ctl_t *x);
/* Sends action (taken), returns its observation (never NULL: dies instead). */
cJSON *ctl_call(ctl_t *x, cJSON *action, int default_wait_ms);
const cJSON *ctl_extras(const cJSON *obs);
/* If obs is an error observation: message on stderr (unless quiet), 1. */
int ctl_is_error(const cJSON *obs, int quiet);
/* content, with a final newline if it is non-empty and has none */
void ctl_print_content(const cJSON *obs);
/* obs freed, rc returned */
int ctl_finish(cJSON *obs, int rc);

/* ---- termctl-manage.c: the commands of the same names ---- */
int ctl_cmd_session(ctl_t *x, int argc, char **argv);
int ctl_cmd_subscribe(ctl_t *x, int argc, char **argv);
int ctl_cmd_ports(ctl_t *x, int argc, char **argv);
int ctl_cmd_port(ctl_t *x, int argc, char **argv);
int ctl_cmd_upgrade(ctl_t *x, int argc, char **argv);

#endif
