/* git.c — OpenHands V1's /api/git/changes?path= and /api/git/diff?path=,
 * computed as the agent server computes them: against the merge base
 * with origin's default branch when there is an origin, else HEAD (an
 * empty tree before the first commit); `git diff --name-status` plus the
 * untracked files (ADDED); a diff is {original: the file at that ref ("" for
 * an untracked file), modified: the file now}; outside a repository []
 * and both null. git runs as a child of a file-work thread (fs/fswork.c),
 * never on the loop. */
#include "ohv1.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#define GIT_OUT_MAX (64u << 20)
#define EMPTY_TREE "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

extern char **environ;

struct gjob {
	struct fsjob job;         /* first */
	char *path;
	char *ref, *commit;       /* diff's ?ref= / ?commit= */
	int diff;
	cJSON *answer;            /* set by the work */
	int status;
	char err[512];
	struct http_txn *t;
};

/* git ARGS... in dir, its stdout into out (when not NULL): its exit status,
 * or -1 when it could not run. The loop reaps every child (loop/child.c
 * waits for any), so git's status comes from the sh around it, printed
 * after git's output. */
static int git(const char *dir, buf_t *out, const char *const *args)
{
	const char *argv[28] = {"/bin/sh", "-c", "\"$@\"; printf '\\n%d' $?", "sh",
				"git", "--no-pager", "-C", dir};
	int k = 8;
	for (int i = 0; args[i] && k < 27; i++)
		argv[k++] = args[i];
	argv[k] = NULL;
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	pid_t pid;
	int e = posix_spawn(&pid, "/bin/sh", &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (e) {
		close(p[0]);
		return -1;
	}
	buf_t all = {0};
	char tmp[65536];
	ssize_t r;
	while ((r = read(p[0], tmp, sizeof tmp)) > 0 || (r < 0 && errno == EINTR))
		if (r > 0 && all.len < GIT_OUT_MAX)
			buf_append(&all, tmp, (size_t)r);
	close(p[0]);
	waitpid(pid, NULL, 0);   /* (or the loop's reaper did) */
	int rc = -1;
	char *nl = all.len ? memrchr(all.p, '\n', all.len) : NULL;
	if (nl) {
		size_t at = (size_t)(nl - all.p);
		buf_putc(&all, 0);
		rc = atoi(all.p + at + 1);
		all.len = at;
		if (out)
			buf_append(out, all.p, all.len);
	}
	buf_free(&all);
	if (out && !out->p)
		buf_append(out, "", 0);
	return rc;
}

static void chomp(buf_t *b)
{
	while (b->len && (b->p[b->len - 1] == '\n' || b->p[b->len - 1] == '\r'))
		b->p[--b->len] = 0;
}

/* the repository's top folder holding dir, or -1 */
static int toplevel(const char *dir, buf_t *top)
{
	const char *a[] = {"rev-parse", "--show-toplevel", NULL};
	if (git(dir, top, a) != 0 || !top->len)
		return -1;
	chomp(top);
	return 0;
}

/* the ref changes are against (V1's get_valid_ref): the merge base with
 * origin's default branch, else HEAD, else the empty tree */
static void base_ref(const char *top, buf_t *ref)
{
	buf_t b = {0};
	const char *a1[] = {"rev-parse", "--abbrev-ref", "origin/HEAD", NULL};
	if (git(top, &b, a1) == 0 && b.len) {
		chomp(&b);
		buf_t mb = {0};
		const char *a2[] = {"merge-base", "HEAD", b.p, NULL};
		if (git(top, &mb, a2) == 0 && mb.len) {
			chomp(&mb);
			buf_free(&b);
			*ref = mb;
			return;
		}
		buf_free(&mb);
	}
	buf_free(&b);
	const char *a3[] = {"rev-parse", "--verify", "-q", "HEAD", NULL};
	buf_t h = {0};
	if (git(top, &h, a3) == 0 && h.len) {
		chomp(&h);
		*ref = h;
		return;
	}
	buf_free(&h);
	buf_puts(ref, EMPTY_TREE);
}

static const char *status_name(char c)
{
	switch (c) {
	case 'A': case 'C': return "ADDED";
	case 'D': return "DELETED";
	case 'R': return "MOVED";
	default: return "UPDATED";   /* M, T, U */
	}
}

static void add_change(cJSON *arr, const char *status, const char *path)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "status", status);
	cJSON_AddStringToObject(o, "path", path);
	cJSON_AddItemToArray(arr, o);
}

static void changes_work(struct gjob *j)
{
	j->answer = cJSON_CreateArray();
	j->status = 200;
	buf_t top = {0}, ref = {0}, d = {0}, u = {0};
	if (toplevel(j->path, &top) < 0)
		goto out;   /* not a repository: [] */
	base_ref(top.p, &ref);
	if (j->ref) {
		buf_reset(&ref);
		buf_puts(&ref, j->ref);
	}
	const char *ad[] = {"diff", "--name-status", "-z", ref.p, "--", NULL};
	if (git(top.p, &d, ad) != 0) {
		j->status = 400;
		snprintf(j->err, sizeof j->err, "git diff against %s failed", ref.p);
		goto out;
	}
	/* -z: STATUS\0PATH\0, or R/Cnnn\0OLD\0NEW\0 */
	for (size_t i = 0; i < d.len;) {
		const char *st = d.p + i;
		i += strlen(st) + 1;
		if (i >= d.len)
			break;
		const char *p1 = d.p + i;
		i += strlen(p1) + 1;
		if (st[0] == 'R' || st[0] == 'C') {
			if (i >= d.len)
				break;
			const char *p2 = d.p + i;
			i += strlen(p2) + 1;
			add_change(j->answer, status_name(st[0]), p2);
		} else {
			add_change(j->answer, status_name(st[0]), p1);
		}
	}
	const char *au[] = {"ls-files", "--others", "--exclude-standard", "-z", NULL};
	if (git(top.p, &u, au) == 0)
		for (size_t i = 0; i < u.len;) {
			const char *p = u.p + i;
			i += strlen(p) + 1;
			if (*p)
				add_change(j->answer, "ADDED", p);
		}
out:
	buf_free(&top);
	buf_free(&ref);
	buf_free(&d);
	buf_free(&u);
}

static void diff_work(struct gjob *j)
{
	j->status = 200;
	j->answer = cJSON_CreateObject();
	char *dir = xstrdup(j->path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir)
		*slash = 0;
	buf_t top = {0}, ref = {0}, orig = {0}, mod = {0}, spec = {0}, tracked = {0};
	if (toplevel(dir, &top) < 0) {
		cJSON_AddNullToObject(j->answer, "modified");
		cJSON_AddNullToObject(j->answer, "original");
		goto out;
	}
	size_t tl = strlen(top.p);
	const char *rel = strncmp(j->path, top.p, tl) == 0 && j->path[tl] == '/' ?
			  j->path + tl + 1 : j->path;
	if (j->commit) {   /* that commit's change to the file */
		buf_printf(&spec, "%s:%s", j->commit, rel);
		const char *am[] = {"show", spec.p, NULL};
		git(top.p, &mod, am);
		buf_reset(&spec);
		buf_printf(&spec, "%s^:%s", j->commit, rel);
		const char *ao[] = {"show", spec.p, NULL};
		git(top.p, &orig, ao);
	} else {
		if (j->ref)
			buf_puts(&ref, j->ref);
		else
			base_ref(top.p, &ref);
		/* an untracked file's original is "" */
		const char *at[] = {"ls-files", "--error-unmatch", "--", rel, NULL};
		int is_tracked = git(top.p, &tracked, at) == 0;
		if (is_tracked) {
			buf_printf(&spec, "%s:%s", ref.p, rel);
			const char *ao[] = {"show", spec.p, NULL};
			git(top.p, &orig, ao);
		}
		struct stat st;
		int fd = fs_open_regular(j->path, &st);
		if (fd >= 0) {
			char tmp[65536];
			ssize_t r;
			while ((r = read(fd, tmp, sizeof tmp)) > 0 && mod.len < GIT_OUT_MAX)
				buf_append(&mod, tmp, (size_t)r);
			close(fd);
		}
	}
	buf_append(&mod, "", 0);
	buf_append(&orig, "", 0);
	cJSON_AddStringToObject(j->answer, "modified", mod.p);
	cJSON_AddStringToObject(j->answer, "original", orig.p);
out:
	free(dir);
	buf_free(&top);
	buf_free(&ref);
	buf_free(&orig);
	buf_free(&mod);
	buf_free(&spec);
	buf_free(&tracked);
}

static void work(struct fsjob *fj)
{
	struct gjob *j = (struct gjob *)fj;
	if (j->diff)
		diff_work(j);
	else
		changes_work(j);
}

static void done(struct fsjob *fj)
{
	struct gjob *j = (struct gjob *)fj;
	struct http_txn *t = j->t;
	if (t) {
		t->user = NULL;
		t->gone = NULL;
	}
	if (t && !fj->aborted) {
		if (j->status != 200) {
			v1_detail(t, j->status, j->err);
		} else {
			v1_json(t, 200, j->answer);
			j->answer = NULL;
		}
	}
	cJSON_Delete(j->answer);
	free(j->path);
	free(j->ref);
	free(j->commit);
	free(j);
}

static void gone(struct http_txn *t)
{
	struct gjob *j = t->user;
	if (j)
		j->t = NULL;
	t->user = NULL;
}

static void start(struct http_txn *t, int diff)
{
	char pb[4096], rb[512], cb[512];
	const char *path = v1_arg(t, "path=", pb, sizeof pb);
	if (!path) {
		v1_422(t, "query", "path", "missing", "Field required", NULL, NULL, 0);
		return;
	}
	const char *ref = v1_arg(t, "ref=", rb, sizeof rb);
	const char *commit = diff ? v1_arg(t, "commit=", cb, sizeof cb) : NULL;
	if (ref && commit) {
		v1_detail(t, 400, "Cannot specify both ref and commit");
		return;
	}
	if ((ref && ref[0] == '-') || (commit && commit[0] == '-')) {
		v1_detail(t, 400, "Invalid ref");
		return;
	}
	struct gjob *j = xcalloc(1, sizeof *j);
	if (path[0] == '/') {
		j->path = xstrdup(path);
	} else {   /* relative to termd's start folder */
		buf_t b = {0};
		char cwd[4096];
		buf_printf(&b, "%s/%s", opts.cwd ? opts.cwd : getcwd(cwd, sizeof cwd) ? cwd : "/",
			   path);
		j->path = b.p;
	}
	j->ref = ref && ref[0] ? xstrdup(ref) : NULL;
	j->commit = commit && commit[0] ? xstrdup(commit) : NULL;
	j->diff = diff;
	j->job.work = work;
	j->job.done = done;
	j->t = t;
	fs_cred_self(&j->job.cred);
	if (fswork_submit(&j->job) < 0) {
		free(j->path);
		free(j->ref);
		free(j->commit);
		free(j);
		v1_detail(t, 503, "termd has too many file requests waiting; try again");
		return;
	}
	t->user = j;
	t->gone = gone;
}

void v1_git_changes(struct http_txn *t)
{
	start(t, 0);
}

void v1_git_diff(struct http_txn *t)
{
	start(t, 1);
}
