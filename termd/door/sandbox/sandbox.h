/* sandbox.h — what the agent-sandbox door's files share (sandbox.c: its
 * routes, GET /, the user it acts as, the answers; exec.c: POST /execute
 * on pipe sessions; files.c: the confinement to --sandbox-base and the
 * file routes). Nothing else includes it. */
#ifndef TERMD_SANDBOX_H
#define TERMD_SANDBOX_H

#include "door.h"
#include "fswork.h"

/* ---- sandbox.c ---- */
/* who the request acts as: --user when given (termd root), else termd */
struct sb_user {
	int self;                 /* termd's own user: no switch */
	struct fs_cred cred;
	char name[64], home[1024];
};
/* 0, or -1 when --user names nobody (then answered 500) */
int sb_user(struct http_txn *t, struct sb_user *u);
/* a JSON answer (taken over) */
void sb_answer(struct http_txn *t, int status, cJSON *msg);
/* {"message": msg} */
void sb_answer_msg(struct http_txn *t, int status, const char *msg);
/* FastAPI's 422 for a missing or mistyped body field */
void sb_answer_422(struct http_txn *t, const char *type, const char *field, const char *msg,
		   const cJSON *input);
/* a call onto actions_dispatch, answered at once (NULL: none) */
cJSON *sb_action(const char *action, cJSON *args);
int sb_is_error(const cJSON *ans);

/* ---- exec.c ---- */
/* shlex.split(s) (POSIX mode, no comments): the words, or NULL and why
 * ("No closing quotation", "No escaped character") */
cJSON *sb_shlex_split(const char *s, const char **why);
void sb_execute(struct http_txn *t);
void sb_exec_register(void);
void sb_exec_shutdown(void);

/* ---- files.c ---- */
/* Python's os.path.realpath (not strict) of base/rel with rel's leading
 * slashes dropped, and whether it stays in realpath(base) (commonpath):
 * 0, or -1 (outside). Runs with the calling thread's ids. */
int sb_safe_path(const char *base, const char *rel, buf_t *out);
void sb_upload(struct http_txn *t);
void sb_download(struct http_txn *t);
void sb_list(struct http_txn *t);
void sb_exists(struct http_txn *t);

#endif
