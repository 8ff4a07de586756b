/* listdir.c — envd's ListDir: file.list run in a worker as the request's
 * user, the answer's EntryInfos (envd_entry_of) and its JSON printed
 * there too, the loop only sending the bytes and putting the listing on
 * the event stream; the job's buffers freed in a worker (the ljob). */
#include "envd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ListDir: file.list's handler and the answer's EntryInfos and JSON all
 * in a worker, as the user; the loop only sends the bytes (20,000 entries
 * cost the loop ~140 ms of printing, parsing and printing again when the
 * answer came back through the event stream) */
struct ljob {
	struct fsjob job;         /* first: the pool hands it back */
	struct envd_call c;       /* c.t NULL once its client left */
	const struct action_def *def;
	char *base;
	cJSON *args;
	cJSON *ans;               /* the action's answer when it is not the listing */
	char *body;               /* the listing, as JSON */
	char *event;              /* file.list's extras for the event stream, as JSON */
	char *content;
	uint64_t t0;
};

static void list_work(struct fsjob *j)
{
	struct ljob *l = (struct ljob *)j;
	l->ans = fsact_run_here(l->def, l->base, l->args);
	const char *o = envd_str(l->ans, "observation", NULL);
	const cJSON *ex = envd_field(l->ans, "extras", NULL);
	if (!o || strcmp(o, "file.list") != 0 || cJSON_IsTrue(envd_field(ex, "truncated", NULL)))
		return;
	cJSON *m = cJSON_CreateObject();
	cJSON *arr = cJSON_AddArrayToObject(m, "entries");
	const cJSON *e;
	cJSON_ArrayForEach(e, envd_field(ex, "entries", NULL))
		cJSON_AddItemToArray(arr, envd_entry_of(e));
	l->body = envd_json_print(m);   /* a name's byte 0xff: U+FFFD */
	cJSON_Delete(m);
	l->event = cJSON_PrintUnformatted(ex);
	/* UTF-8 text for the event stream (events_emit_printed): a name with
	 * byte 0xff gets U+FFFD here, not in the loop (~2 ms a 4 MB listing) */
	size_t n = l->event ? strlen(l->event) : 0;
	if (n && !utf8_text(l->event, n, NULL)) {
		buf_t u = {0};
		buf_put_utf8(&u, l->event, n);
		free(l->event);
		l->event = buf_steal(&u);
	}
	l->content = xstrdup(envd_str(l->ans, "content", ""));
	cJSON_Delete(l->ans);
	l->ans = NULL;
}

static void ljob_gone(struct http_txn *t)
{
	struct ljob *l = t->user;
	if (l)
		l->c.t = NULL;   /* the job frees itself when done */
	t->user = NULL;
}

/* what the job holds, freed */
static void ljob_free_parts(struct ljob *l)
{
	cJSON_Delete(l->args);
	cJSON_Delete(l->ans);
	free(l->body);
	free(l->event);
	free(l->content);
	free(l->base);
	l->args = l->ans = NULL;
	l->body = l->event = l->content = l->base = NULL;
}

static void ljob_release_work(struct fsjob *j)
{
	ljob_free_parts((struct ljob *)j);
}

static void ljob_released(struct fsjob *j)
{
	ljob_free_parts((struct ljob *)j);   /* nothing left, unless never run */
	free(j);
}

/* The job's buffers are freed in a worker, not in the loop: the worker
 * made them in its malloc arena, with the listing's cJSON trees (some
 * 300,000 small blocks for 20,000 entries), and the first large block
 * freed in that arena makes glibc consolidate all those small ones: ~10
 * ms of the loop's turn when list_done freed them (issue 50; ~45% of the
 * loop's CPU for a listing). At termd's end (aborted), or with the queue
 * full, here. */
static void ljob_release(struct ljob *l)
{
	l->job.work = ljob_release_work;
	l->job.done = ljob_released;
	fs_cred_self(&l->job.cred);   /* nothing to do as the user */
	if (l->job.aborted || fswork_submit(&l->job) < 0)
		ljob_released(&l->job);
}

static void list_done(struct fsjob *j)
{
	struct ljob *l = (struct ljob *)j;
	struct envd_call *c = &l->c;
	int failed = 1;
	/* on the event stream as the file action it is (subscribers, the
	 * log); not when termd is shutting down (the job dropped) */
	static unsigned long long nlist;
	char id[48];
	snprintf(id, sizeof id, "envd-list-%llu", ++nlist);
	cJSON *cause = cJSON_CreateString(id);
	if (j->aborted)
		;
	else if (l->event)
		events_emit_printed(cause, "file.list", l->content, l->event);
	else if (l->ans)
		events_emit(NULL, cause, envd_str(l->ans, "observation", "error"),
			    envd_str(l->ans, "content", ""),
			    cJSON_Duplicate(envd_field(l->ans, "extras", NULL), 1));
	cJSON_Delete(cause);
	if (c->t) {
		c->t->gone = NULL;
		c->t->user = NULL;
	}
	if (!c->t || j->aborted) {
		/* nobody to answer */
	} else if (l->body) {
		http_answer(c->t, 200, "application/json", l->body, strlen(l->body));
		failed = 0;
	} else if (!l->ans) {
		envd_fail(c, EC_PERMISSION_DENIED, "termd cannot act as uid %u to list: %s",
			  (unsigned)j->cred.uid, strerror(j->err ? j->err : EPERM));
	} else if (envd_action_ok(c, l->ans, "file.list")) {   /* past --list-max */
		envd_fail(c, EC_RESOURCE_EXHAUSTED,
			  "the folder holds more than --list-max (%zu) entries at this depth: "
			  "list a smaller depth or a subfolder", opts.list_max);
	}
	if (!j->aborted)
		actstats_record(actstats_index("file.list"), failed ? TD_ERR_IO_ERROR : -1,
				mono_us() - l->t0);
	ljob_release(l);
}

int envd_list_dir(struct envd_call *c)
{
	double depth = 1;
	if (envd_field(c->req, "depth", NULL) && envd_num(c->req, "depth", NULL, &depth) < 0)
		return envd_fail(c, EC_INVALID_ARGUMENT, "depth must be a number");
	const struct action_def *def = actions_find("file.list");
	if (!def)
		return envd_fail(c, EC_INTERNAL, "file.list is not registered");
	cJSON *args = cJSON_CreateObject();
	if (envd_path_into(c, "path", args, "path") < 0) {
		cJSON_Delete(args);
		return 0;
	}
	cJSON_AddNumberToObject(args, "depth", depth < 1 ? 1 : depth > 64 ? 64 : (int)depth);
	cJSON_AddNumberToObject(args, "max_entries", (double)opts.list_max);
	struct ljob *l = xcalloc(1, sizeof *l);
	l->job.cred = envd_cur.cred;
	l->job.work = list_work;
	l->job.done = list_done;
	l->c = *c;
	l->c.req = NULL;
	l->def = def;
	l->base = files_resolve(".");   /* the worker must not read sessions */
	l->args = args;
	l->t0 = mono_us();
	if (fswork_submit(&l->job) < 0) {
		cJSON_Delete(args);
		free(l->base);
		free(l);
		return envd_fail(c, EC_UNAVAILABLE, "termd has too many file requests waiting; "
					       "try again");
	}
	c->t->user = l;
	c->t->gone = ljob_gone;
	return 0;
}

