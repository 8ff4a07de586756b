/* git.c — OpenHands V1's /api/git/changes?path= and /api/git/diff?path=,
 * computed as the agent server (the SDK's git/ module) computes them: the
 * display base (origin/<branch>, the merge base with origin's default
 * branch, ..., HEAD, the empty tree before the first commit) or ?ref=;
 * `git diff --name-status` (a rename: DELETED + ADDED) plus the untracked
 * files (ADDED), repositories one folder down merged in, sorted by path; a
 * diff is {original: the file at that ref, stripped ("" when it is not
 * there), modified: the file now, its lines joined by \n}; outside a
 * repository [] and both null. git runs as a child of a file-work thread
 * (fs/fswork.c), never on the loop. */
#include "ohv1.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/stat.h>
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

/* git's one-line answer (a ref, a sha) stripped into out: 0, or -1 when
 * git failed or said nothing */
static int git_line(const char *dir, buf_t *out, const char *const *args)
{
	buf_reset(out);
	if (git(dir, out, args) != 0)
		return -1;
	chomp(out);
	size_t k = 0;
	while (k < out->len && (out->p[k] == ' ' || out->p[k] == '\n'))
		k++;
	buf_consume(out, k);
	return out->len ? 0 : -1;
}

static int rev(const char *dir, const char *ref, buf_t *out)
{
	const char *a[] = {"rev-parse", "--verify", "-q", ref, NULL};
	return git_line(dir, out, a);
}

static int merge_base(const char *dir, const char *x, const char *y, buf_t *out)
{
	const char *a[] = {"merge-base", x, y, NULL};
	return git_line(dir, out, a);
}

/* The ref changes are shown against, as the SDK's get_valid_ref(purpose=
 * "display") picks it: an explicit one (HEAD unborn: the empty tree; any
 * other that does not resolve: -1); no commits: the empty tree; else
 * origin/<branch> (unless it is HEAD with a clean tree), the merge base
 * with origin's default branch, that branch, the merge base with a local
 * main/master that HEAD descends from, HEAD. */
static int base_ref(const char *dir, const char *want, buf_t *ref)
{
	buf_t head = {0}, br = {0}, t = {0}, u = {0};
	int rc = 0;
	buf_reset(ref);
	if (want) {
		buf_printf(&t, "%s^{commit}", want);
		if (rev(dir, t.p, ref) < 0) {
			buf_reset(ref);
			if (strcmp(want, "HEAD") == 0)
				buf_puts(ref, EMPTY_TREE);
			else
				rc = -1;
		}
		goto out;
	}
	const char *cnt[] = {"rev-list", "--count", "--all", NULL};
	if (git_line(dir, &t, cnt) < 0 || strcmp(t.p, "0") == 0) {
		buf_puts(ref, EMPTY_TREE);
		goto out;
	}
	int has_head = rev(dir, "HEAD", &head) == 0;
	const char *ab[] = {"rev-parse", "--abbrev-ref", "HEAD", NULL};
	int has_br = git_line(dir, &br, ab) == 0 && strcmp(br.p, "HEAD") != 0;
	if (has_br) {
		buf_reset(&t);
		buf_printf(&t, "origin/%s", br.p);
		if (rev(dir, t.p, &u) == 0) {
			buf_t st = {0};
			const char *as[] = {"status", "--porcelain", "--untracked-files=no", NULL};
			int clean = git(dir, &st, as) == 0 && st.len == 0;
			buf_free(&st);
			if (!(has_head && !strcmp(u.p, head.p) && clean)) {
				buf_puts(ref, u.p);
				goto out;
			}
		}
	}
	const char *oh[] = {"rev-parse", "--abbrev-ref", "origin/HEAD", NULL};
	if (git_line(dir, &t, oh) == 0 && strncmp(t.p, "origin/", 7) == 0 && t.p[7]) {
		if (merge_base(dir, "HEAD", t.p, &u) == 0 || rev(dir, t.p, &u) == 0) {
			buf_puts(ref, u.p);
			goto out;
		}
	} else {
		static const char *const locals[] = {"main", "master"};
		for (int i = 0; i < 2; i++) {
			buf_t sha = {0};
			if (rev(dir, locals[i], &sha) < 0) {
				buf_free(&sha);
				continue;
			}
			int hit = !(has_br && !strcmp(br.p, locals[i])) &&
				  merge_base(dir, "HEAD", locals[i], &u) == 0 && !strcmp(u.p, sha.p);
			buf_free(&sha);
			if (hit) {
				buf_puts(ref, u.p);
				goto out;
			}
			break;
		}
	}
	buf_puts(ref, has_head ? head.p : EMPTY_TREE);
out:
	buf_free(&head);
	buf_free(&br);
	buf_free(&t);
	buf_free(&u);
	return rc;
}

static void add_change(cJSON *arr, const char *status, const char *prefix, const char *path)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "status", status);
	buf_t b = {0};
	buf_printf(&b, "%s%s%s", prefix, prefix[0] ? "/" : "", path);
	cJSON_AddStringToObject(o, "path", b.p);
	buf_free(&b);
	cJSON_AddItemToArray(arr, o);
}

/* one repository's changes (the SDK's get_changes_in_repo), paths after
 * prefix: 0, -1 not a repository, -2 git failed (why in j->err) */
static int repo_changes(struct gjob *j, const char *dir, const char *prefix, cJSON *arr)
{
	buf_t ref = {0}, d = {0}, u = {0}, t = {0};
	const char *gd[] = {"rev-parse", "--git-dir", NULL};
	int rc = 0;
	if (git_line(dir, &t, gd) < 0) {
		rc = -1;
		goto out;
	}
	if (base_ref(dir, j->ref, &ref) < 0) {
		snprintf(j->err, sizeof j->err, "git rev-parse --verify %s^{commit} failed", j->ref);
		rc = -2;
		goto out;
	}
	const char *ad[] = {"diff", "--name-status", "-z", ref.p, "--", NULL};
	if (git(dir, &d, ad) != 0) {
		snprintf(j->err, sizeof j->err, "git diff --name-status %s failed", ref.p);
		rc = -2;
		goto out;
	}
	/* -z: STATUS\0PATH\0, or R/Cnnn\0OLD\0NEW\0; a rename is the old
	 * path DELETED and the new ADDED, a copy the new ADDED (the SDK's) */
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
			if (st[0] == 'R')
				add_change(arr, "DELETED", prefix, p1);
			add_change(arr, "ADDED", prefix, p2);
		} else {
			add_change(arr, st[0] == 'A' ? "ADDED" : st[0] == 'D' ? "DELETED" : "UPDATED",
				   prefix, p1);
		}
	}
	const char *au[] = {"ls-files", "--others", "--exclude-standard", "-z", NULL};
	if (git(dir, &u, au) == 0)
		for (size_t i = 0; i < u.len;) {
			const char *p = u.p + i;
			i += strlen(p) + 1;
			if (*p)
				add_change(arr, "ADDED", prefix, p);
		}
out:
	buf_free(&ref);
	buf_free(&d);
	buf_free(&u);
	buf_free(&t);
	return rc;
}

static int by_path(const void *a, const void *b)
{
	const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
	return strcmp(cJSON_GetObjectItem(x, "path")->valuestring,
		      cJSON_GetObjectItem(y, "path")->valuestring);
}

/* the SDK's get_git_changes: path's repository's changes, those inside a
 * repository one folder down (./NAME/.git) replaced by that one's, sorted
 * by path; not a repository: [] */
static void changes_work(struct gjob *j)
{
	j->status = 200;
	cJSON *all = cJSON_CreateArray();
	int r = repo_changes(j, j->path, "", all);
	if (r == -2) {
		j->status = 500;
		cJSON_Delete(all);
		j->answer = NULL;
		return;
	}
	/* nested repositories one level down */
	DIR *dp = r == 0 ? opendir(j->path) : NULL;
	struct dirent *de;
	while (dp && (de = readdir(dp))) {
		if (de->d_name[0] == '.' && (!de->d_name[1] || !strcmp(de->d_name, "..")))
			continue;
		buf_t sub = {0}, g = {0};
		buf_printf(&sub, "%s/%s", j->path, de->d_name);
		buf_printf(&g, "%s/.git", sub.p);
		struct stat st;
		if (stat(g.p, &st) == 0) {
			/* drop the outer repository's entries under it */
			size_t nl = strlen(de->d_name);
			for (int i = cJSON_GetArraySize(all) - 1; i >= 0; i--) {
				const char *p = cJSON_GetObjectItem(cJSON_GetArrayItem(all, i),
								    "path")->valuestring;
				if (strncmp(p, de->d_name, nl) == 0)
					cJSON_DeleteItemFromArray(all, i);
			}
			repo_changes(j, sub.p, de->d_name, all);
		}
		buf_free(&sub);
		buf_free(&g);
	}
	if (dp)
		closedir(dp);
	int n = cJSON_GetArraySize(all);
	cJSON **v = xcalloc((size_t)n + 1, sizeof *v);
	for (int i = 0; i < n; i++)
		v[i] = cJSON_DetachItemFromArray(all, 0);
	qsort(v, (size_t)n, sizeof *v, by_path);
	for (int i = 0; i < n; i++)
		cJSON_AddItemToArray(all, v[i]);
	free(v);
	j->answer = all;
}

/* "\n".join(text.splitlines()) as Python has it (\n, \r\n, \r and the
 * other line breaks ASCII has: \v \f \x1c-\x1e) */
static void py_lines(const buf_t *in, buf_t *out)
{
	for (size_t i = 0; i < in->len; i++) {
		char ch = in->p[i];
		int br = ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f' ||
			 (ch >= 0x1c && ch <= 0x1e);
		if (!br) {
			buf_putc(out, ch);
			continue;
		}
		if (ch == '\r' && i + 1 < in->len && in->p[i + 1] == '\n')
			i++;
		if (i + 1 < in->len)
			buf_putc(out, '\n');
	}
	buf_append(out, "", 0);
}

/* git show REV:REL stripped (run_git_command's .strip()), "" when git fails */
static void show(const char *top, const char *rev_, const char *rel, buf_t *out)
{
	buf_t spec = {0}, raw = {0};
	buf_printf(&spec, "%s:%s", rev_, rel);
	const char *a[] = {"show", spec.p, NULL};
	if (git(top, &raw, a) == 0) {
		size_t s0 = 0, e = raw.len;
		while (s0 < e && strchr(" \t\n\r\v\f", raw.p[s0]))
			s0++;
		while (e > s0 && strchr(" \t\n\r\v\f", raw.p[e - 1]))
			e--;
		buf_append(out, raw.p + s0, e - s0);
	}
	buf_append(out, "", 0);
	buf_free(&spec);
	buf_free(&raw);
}

/* the SDK's get_git_diff (or, with ?commit=, its commit file diff) */
static void diff_work(struct gjob *j)
{
	j->status = 200;
	struct stat st;
	if (stat(j->path, &st) != 0) {
		snprintf(j->err, sizeof j->err, "File does not exist: %s", j->path);
		j->status = 500;
		return;
	}
	if (st.st_size > (1 << 20)) {
		snprintf(j->err, sizeof j->err, "File too large for git diff: %lld bytes "
			 "(max: 1048576 bytes)", (long long)st.st_size);
		j->status = 500;
		return;
	}
	/* the closest folder up with a .git */
	char *top = xstrdup(j->path);
	for (;;) {
		char *slash = strrchr(top, '/');
		if (!slash) {
			top[0] = 0;
			break;
		}
		*slash = 0;
		buf_t g = {0};
		buf_printf(&g, "%s/.git", top[0] ? top : "");
		int found = stat(g.p, &st) == 0;
		buf_free(&g);
		if (found || !top[0])
			break;
	}
	j->answer = cJSON_CreateObject();
	buf_t ref = {0}, orig = {0}, mod = {0}, raw = {0}, t = {0};
	const char *gd[] = {"rev-parse", "--git-dir", NULL};
	if (!top[0] || git_line(top, &t, gd) < 0) {
		cJSON_AddNullToObject(j->answer, "modified");
		cJSON_AddNullToObject(j->answer, "original");
		goto out;
	}
	size_t tl = strlen(top);
	const char *rel = j->path + tl + 1;
	if (j->commit) {   /* the commit against its first parent */
		buf_printf(&t, "%s^", j->commit);
		buf_t par = {0};
		if (rev(top, t.p, &par) < 0) {
			buf_reset(&par);
			buf_puts(&par, EMPTY_TREE);
		}
		show(top, par.p, rel, &orig);
		show(top, j->commit, rel, &mod);
		buf_free(&par);
	} else {
		if (base_ref(top, j->ref, &ref) < 0) {
			snprintf(j->err, sizeof j->err, "git rev-parse --verify %s^{commit} failed",
				 j->ref);
			j->status = 500;
			goto out;
		}
		show(top, ref.p, rel, &orig);
		int fd = fs_open_regular(j->path, &st);
		if (fd >= 0) {
			char tmp[65536];
			ssize_t r;
			while ((r = read(fd, tmp, sizeof tmp)) > 0 && raw.len < GIT_OUT_MAX)
				buf_append(&raw, tmp, (size_t)r);
			close(fd);
		}
		py_lines(&raw, &mod);
	}
	cJSON_AddStringToObject(j->answer, "modified", mod.p ? mod.p : "");
	cJSON_AddStringToObject(j->answer, "original", orig.p ? orig.p : "");
out:
	free(top);
	buf_free(&ref);
	buf_free(&orig);
	buf_free(&mod);
	buf_free(&raw);
	buf_free(&t);
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
		if (j->status == 500) {   /* an exception the router does not catch */
			char id[33];
			v1_new_id(id);
			cJSON *o = cJSON_CreateObject();
			cJSON_AddStringToObject(o, "detail", "Internal Server Error");
			cJSON_AddStringToObject(o, "exception", j->err);
			cJSON_AddStringToObject(o, "error_id", id);
			v1_json(t, 500, o);
		} else if (j->status != 200) {
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
		v1_detail(t, 400, "'ref' and 'commit' are mutually exclusive");
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
