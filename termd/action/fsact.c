/* fsact.c — owns running the file actions (those registered ACT_FILEWORK:
 * read, write, edit, file.*) off the event loop: actions_dispatch hands
 * the frame here; a worker thread (fswork.c) runs the handler as the
 * request's user, with main's cwd as it was when asked, its answer
 * captured instead of sent; the loop then sends that answer to whoever
 * now waits for the id (a pending action: a client that left and came
 * back with the same id gets it, one that left for good has it retained). */
#include "action.h"
#include "fswork.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cap {
	struct cap *next;
	char *observation, *content;
	cJSON *extras;
};

struct fsact {
	struct fsjob job;         /* first: the pool hands it back */
	struct pending p;
	cJSON *frame;             /* the worker's copy: id, args */
	char *name;
	action_fn fn;
	int flags;
	char *base;               /* main's cwd when asked */
	cJSON *ignored;           /* the argument names the handler did not read */
	struct cap *caps, **tail;
};

/* the user the next dispatched file action acts as (a front door sets it
 * around actions_dispatch); NULL: termd's own */
static const struct fs_cred *next_user;
/* write and edit: one at a time (the edit history, read-modify-write) */
static pthread_mutex_t serial_mu = PTHREAD_MUTEX_INITIALIZER;

void fsact_as(const struct fs_cred *c)
{
	next_user = c;
}

static void capture(void *arg, const char *observation, const char *content, cJSON *extras)
{
	struct fsact *f = arg;
	struct cap *c = xcalloc(1, sizeof *c);
	c->observation = xstrdup(observation);
	c->content = xstrdup(content ? content : "");
	c->extras = extras;
	*f->tail = c;
	f->tail = &c->next;
}

static void run_captured(struct fsact *f)
{
	struct act a = {.conn = NULL, .action = f->name};
	a.id = cJSON_GetObjectItemCaseSensitive(f->frame, "id");
	a.args = cJSON_GetObjectItemCaseSensitive(f->frame, "args");
	files_base = f->base;
	events_capture = capture;
	events_capture_arg = f;
	if (f->flags & ACT_SERIAL)
		pthread_mutex_lock(&serial_mu);
	if (f->fn(&a) != 0 || a.failed)
		act_answer_error(&a);
	if (f->flags & ACT_SERIAL)
		pthread_mutex_unlock(&serial_mu);
	f->ignored = act_ignored_args(&a);   /* its answer names them (the loop adds them) */
	free(a.read);
	events_capture = NULL;
	events_capture_arg = NULL;
	files_base = NULL;
	buf_free(&a.msg);
	cJSON_Delete(a.err_extras);
}

static void work(struct fsjob *j)
{
	run_captured((struct fsact *)j);
}

cJSON *fsact_run_here(const struct action_def *def, const char *base, const cJSON *args)
{
	struct fsact f = {0};
	f.frame = cJSON_CreateObject();
	if (args)
		cJSON_AddItemToObject(f.frame, "args", cJSON_Duplicate(args, 1));
	f.name = (char *)def->name;
	f.fn = def->fn;
	f.flags = def->flags;
	f.base = (char *)base;
	f.tail = &f.caps;
	run_captured(&f);
	cJSON_Delete(f.frame);
	cJSON_Delete(f.ignored);
	cJSON *ans = NULL;
	for (struct cap *c = f.caps, *n; c; c = n) {
		n = c->next;
		if (!ans) {   /* a file action answers once */
			ans = cJSON_CreateObject();
			cJSON_AddStringToObject(ans, "observation", c->observation);
			cJSON_AddStringToObject(ans, "content", c->content);
			cJSON_AddItemToObject(ans, "extras", c->extras ? c->extras : cJSON_CreateObject());
		} else {
			cJSON_Delete(c->extras);
		}
		free(c->observation);
		free(c->content);
		free(c);
	}
	return ans;
}

static void done(struct fsjob *j)
{
	struct fsact *f = (struct fsact *)j;
	if (!j->aborted && !f->caps) {   /* the worker could not take the user's ids */
		char m[160];
		snprintf(m, sizeof m, "termd cannot act as uid %u for this file action: %s",
			 (unsigned)j->cred.uid, strerror(j->err ? j->err : EPERM));
		cJSON *ex = cJSON_CreateObject();
		cJSON_AddStringToObject(ex, "code", td_err_name(TD_ERR_IO_ERROR));
		pending_emit(&f->p, "error", m, ex);
	}
	/* the answer names what the worker's handler did not read
	 * (events_emit adds the pending action's list) */
	cJSON_Delete(f->p.ignored);
	f->p.ignored = f->ignored;
	f->ignored = NULL;
	for (struct cap *c = f->caps, *n; c; c = n) {
		n = c->next;
		if (!j->aborted)   /* as the pending action's answer: counted, its ignored_args */
			pending_emit(&f->p, c->observation, c->content, c->extras);
		else
			cJSON_Delete(c->extras);
		free(c->observation);
		free(c->content);
		free(c);
	}
	pending_del(&f->p);   /* frees its id */
	cJSON_Delete(f->frame);
	free(f->name);
	free(f->base);
	free(f);
}

static void never_gone(struct pending *p)
{
	(void)p;   /* not tied to a session */
}

static const struct pending_ops fsact_ops = {"file", never_gone};

int fsact_defer(struct act *a, const struct action_def *def)
{
	struct fsact *f = xcalloc(1, sizeof *f);
	if (next_user)
		f->job.cred = *next_user;
	else
		fs_cred_self(&f->job.cred);
	f->job.work = work;
	f->job.done = done;
	f->frame = cJSON_CreateObject();
	if (a->id)
		cJSON_AddItemToObject(f->frame, "id", cJSON_Duplicate(a->id, 1));
	if (a->args)
		cJSON_AddItemToObject(f->frame, "args", cJSON_Duplicate(a->args, 1));
	f->name = xstrdup(def->name);
	f->fn = def->fn;
	f->flags = def->flags;
	f->base = files_resolve("."); /* main's cwd now: the worker must not read sessions */
	f->tail = &f->caps;
	if (fswork_submit(&f->job) < 0) {
		cJSON_Delete(f->frame);
		free(f->name);
		free(f->base);
		free(f);
		return act_error(a, TD_ERR_BUSY, "termd has too many file actions waiting; try again");
	}
	pending_add(&f->p, &fsact_ops, a, NULL);
	/* not this act's pending action to settle: the worker reads the
	 * arguments (and a's frame is gone once dispatch returns) */
	f->p.act = NULL;
	a->pending = NULL;
	return 0;
}

void fsact_register(void)
{
	actions_set_defer(fsact_defer);
}
