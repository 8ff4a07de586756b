/* record.c — --record DIR: every session's terminal as an asciicast v2
 * file DIR/<session>-<start>.cast (a session listener: "o" output without
 * termd's marks, "r" resizes, "m" markers at each command's start and end,
 * "i" what was written to the pty with --record-input), one write(2) per
 * line as it happens; write errors stop that session's recording. Also the
 * /record/ routes: a session's recording so far (?follow=1 streams new
 * lines until the session ends, read back from the file so a slow reader
 * costs no memory; one too far behind is ended), a file by name, and the
 * list of DIR. */
#include "door.h"
#include "cast.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define REC_FILE_MAX      160          /* a file name: session (64) + time + suffix */
#define FOLLOW_CHUNK      65536        /* read from the file per socket drain */
#define FOLLOW_MAX_LAG    (8u << 20)   /* a follower further behind is ended */
#define MARK_LABEL_MAX    1024         /* bytes of a command text in a marker */
#define CAST_CTYPE        "application/x-asciicast"

struct follower;

struct recording {
	struct session *s;
	int fd;                   /* -1 once stopped (ended or a write failed) */
	char file[REC_FILE_MAX];  /* its name in DIR */
	uint64_t start_us;
	uint64_t bytes;           /* written so far */
	struct cast_utf8 out_u8, in_u8;
	buf_t line;
	struct follower *followers;
};

/* One /record answer: bytes read back from the file and streamed. */
struct follower {
	struct follower *next;
	struct recording *rec;    /* the live recording, or NULL */
	struct http_txn *t;
	int fd;
	uint64_t pos;             /* bytes handed to the answer */
	uint64_t limit;           /* the end, when not following a live one */
	int waiting;              /* caught up: pumped again when a line is written */
};

/* ------------------------------------------------------------ the file */

int record_check_dir(const char *dir, char *err, size_t errlen)
{
	struct stat st;
	if (stat(dir, &st) != 0) {
		snprintf(err, errlen, "--record %s: %s (create it first, e.g. mkdir -m 700 %s)", dir,
			 strerror(errno), dir);
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "--record %s: not a directory", dir);
		return -1;
	}
	/* access() says yes to root on a read-only file system: try it */
	char probe[4200];
	snprintf(probe, sizeof probe, "%s/.termd-probe-XXXXXX", dir);
	int fd = mkstemp(probe);
	if (fd < 0) {
		snprintf(err, errlen, "--record %s: cannot create files there: %s", dir, strerror(errno));
		return -1;
	}
	close(fd);
	unlink(probe);
	if (st.st_mode & 077)
		log_warn("--record %s is open to other users (mode %03o): recordings hold everything "
			 "sessions printed; chmod 700 it", dir, (unsigned)(st.st_mode & 0777));
	return 0;
}

static void follower_pump(struct follower *f);

static void wake_followers(struct recording *r)
{
	for (struct follower *f = r->followers, *next; f; f = next) {
		next = f->next;
		if (f->waiting)
			follower_pump(f);
	}
}

/* The recording stops: no more lines (its session ended, went away, or a
 * write failed). Followers end once they have read what was written. */
static void rec_stop(struct recording *r)
{
	if (r->fd < 0)
		return;
	close(r->fd);
	r->fd = -1;
	wake_followers(r);
}

/* Write the line in r->line with one write(2). */
static void rec_write(struct recording *r)
{
	if (r->fd < 0)
		return;
	if (write_all(r->fd, r->line.p, r->line.len) < 0) {
		log_warn("session %s: recording %s/%s stopped: %s", r->s ? r->s->name : "?",
			 opts.record_dir, r->file, strerror(errno));
		/* no half line left behind */
		if (ftruncate(r->fd, (off_t)r->bytes) != 0)
			log_debug("recording %s: ftruncate: %s", r->file, strerror(errno));
		rec_stop(r);
		return;
	}
	r->bytes += r->line.len;
	wake_followers(r);
}

/* seconds since the recording began (a monotonic clock: never backwards) */
static double rec_time(struct recording *r)
{
	return (double)(mono_us() - r->start_us) / 1e6;
}

/* Start an event line in r->line: [t, "code", " */
static void line_begin(struct recording *r, const char *code)
{
	buf_reset(&r->line);
	cast_event_begin(&r->line, rec_time(r), code);
}

static void line_end_write(struct recording *r)
{
	cast_event_end(&r->line);
	rec_write(r);
}

/* An event whose data is text termd made (markers, sizes). */
static void rec_event(struct recording *r, const char *code, const char *text)
{
	if (r->fd < 0)
		return;
	struct cast_utf8 u = {0};
	line_begin(r, code);
	cast_json_bytes(&r->line, &u, text, strlen(text), 1);
	line_end_write(r);
}

static void rec_bytes(struct recording *r, const char *code, struct cast_utf8 *u,
		      const char *data, size_t n, int final)
{
	if (r->fd < 0)
		return;
	line_begin(r, code);
	size_t start = r->line.len;
	cast_json_bytes(&r->line, u, data, n, final);
	if (r->line.len == start)
		return;   /* nothing, or only part of a character (held back) */
	line_end_write(r);
}

static void rec_free(struct recording *r)
{
	rec_stop(r);
	/* followers read on from their own descriptors up to what was written */
	for (struct follower *f = r->followers; f; f = f->next) {
		f->rec = NULL;
		f->limit = r->bytes;
	}
	for (struct follower *f = r->followers, *next; f; f = next) {
		next = f->next;
		f->next = NULL;
		if (f->waiting)
			follower_pump(f);
	}
	r->followers = NULL;
	buf_free(&r->line);
	free(r);
}

/* ------------------------------------------------------ session hooks */

static int rec_take_over(struct session *s);

static void rec_on_started(struct session *s)
{
	if (!opts.record_dir)
		return;
	if (s->rec) {   /* respawned without a gone (not expected): a new file */
		rec_free(s->rec);
		s->rec = NULL;
	}
	if (rec_take_over(s))
		return;   /* a recording the termd before an upgrade began */
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	char stamp[32];
	strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
	int dfd = open(opts.record_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		log_warn("session %s: not recorded: %s: %s", s->name, opts.record_dir, strerror(errno));
		return;
	}
	struct recording *r = xcalloc(1, sizeof *r);
	r->fd = -1;
	for (int i = 1; i < 1000 && r->fd < 0; i++) {
		if (i == 1)
			snprintf(r->file, sizeof r->file, "%s-%s.cast", s->name, stamp);
		else
			snprintf(r->file, sizeof r->file, "%s-%s-%d.cast", s->name, stamp, i);
		r->fd = openat(dfd, r->file, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
		if (r->fd < 0 && errno != EEXIST)
			break;
	}
	int e = errno;
	close(dfd);
	if (r->fd < 0) {
		log_warn("session %s: not recorded: cannot create %s/%s: %s", s->name, opts.record_dir,
			 r->file, strerror(e));
		free(r);
		return;
	}
	r->s = s;
	r->start_us = mono_us();
	s->rec = r;
	cJSON *h = cJSON_CreateObject();
	cJSON_AddNumberToObject(h, "version", 2);
	cJSON_AddNumberToObject(h, "width", s->cols);
	cJSON_AddNumberToObject(h, "height", s->rows);
	cJSON_AddNumberToObject(h, "timestamp", (double)now);
	buf_t title = {0};
	buf_printf(&title, "termd session %s", s->name);
	cJSON_AddStringToObject(h, "title", title.p);
	buf_free(&title);
	if (s->command) {
		buf_t c = {0};
		buf_put_utf8(&c, s->command, strlen(s->command));
		buf_reserve(&c, 1);
		cJSON_AddStringToObject(h, "command", c.p);
		buf_free(&c);
	}
	cJSON *env = cJSON_AddObjectToObject(h, "env");
	cJSON_AddStringToObject(env, "SHELL", session_shell_path());
	cJSON_AddStringToObject(env, "TERM", "xterm-256color");
	char *js = cJSON_PrintUnformatted(h);
	cJSON_Delete(h);
	buf_reset(&r->line);
	buf_puts(&r->line, js);
	buf_putc(&r->line, '\n');
	free(js);
	rec_write(r);
}

/* Markers from the command record cmd.c keeps (its listener runs first):
 * a start once a command started, its end once it finished. */
static void sync_marks(struct session *s)
{
	struct recording *r = s->rec;
	struct cmd *c = s->cmd;
	if (!r || !c)
		return;
	if (c->started && !c->rec_start) {
		c->rec_start = 1;
		const char *text = c->text && c->text[0] ? c->text : "(command)";
		size_t n = strlen(text);
		if (n <= MARK_LABEL_MAX) {
			rec_event(r, "m", text);
		} else {   /* a long script: its beginning (whole characters) */
			buf_t b = {0};
			buf_append(&b, text, utf8_offset(text, MARK_LABEL_MAX,
							 utf8_count(text, MARK_LABEL_MAX) - 1));
			buf_puts(&b, "\xe2\x80\xa6");   /* … */
			rec_event(r, "m", b.p);
			buf_free(&b);
		}
	}
	if (c->finished && c->rec_start && !c->rec_end) {
		c->rec_end = 1;
		char label[96];
		snprintf(label, sizeof label, "exit %d, %.3f s", c->exit_code,
			 (double)(c->end_us - c->start_us) / 1e6);
		rec_event(r, "m", label);
	}
}

static void rec_on_text(struct session *s, const char *data, size_t n)
{
	struct recording *r = s->rec;
	if (!r || r->fd < 0)
		return;
	if (s->cmd && s->cmd->started && !s->cmd->rec_start)
		sync_marks(s);   /* a session.open program's start */
	rec_bytes(r, "o", &r->out_u8, data, n, 0);
}

static void rec_on_input(struct session *s, const char *data, size_t n)
{
	struct recording *r = s->rec;
	if (r && opts.record_input && s->pty.alive)
		rec_bytes(r, "i", &r->in_u8, data, n, 0);
}

static void rec_on_resize(struct session *s)
{
	struct recording *r = s->rec;
	if (!r)
		return;
	char sz[32];
	snprintf(sz, sizeof sz, "%dx%d", s->cols, s->rows);
	rec_event(r, "r", sz);
}

static void rec_on_mark(struct session *s, enum si_event ev, const char *data, size_t n, int code)
{
	(void)data;
	(void)n;
	(void)code;
	if (ev == SI_MARK_START || ev == SI_MARK_DONE)
		sync_marks(s);
}

static void rec_on_exit(struct session *s)
{
	struct recording *r = s->rec;
	if (!r)
		return;
	/* a character cut by the end, then the last command's end marker */
	rec_bytes(r, "o", &r->out_u8, "", 0, 1);
	sync_marks(s);
	rec_stop(r);
}

static void rec_on_gone(struct session *s)
{
	if (!s->rec)
		return;
	rec_free(s->rec);
	s->rec = NULL;
}

/* ------------------------------------------------- upgrade in place */

/* The recordings go on in the same files across an upgrade in place
 * (handover.c): the fd (O_APPEND, close-on-exec off for the exec), the
 * file's name, the time base (CLOCK_MONOTONIC is the machine's, the same
 * after the exec: timestamps continue) and a character cut in half. */
static cJSON *taken;   /* the record's recordings, until their sessions are adopted */

cJSON *record_handover_save(void)
{
	cJSON *j = cJSON_CreateObject();
	for (struct session *s = srv.sessions; s; s = s->next) {
		struct recording *r = s->rec;
		if (!r || r->fd < 0)
			continue;
		cJSON *o = cJSON_AddObjectToObject(j, s->name);
		cJSON_AddNumberToObject(o, "fd", r->fd);
		cJSON_AddStringToObject(o, "file", r->file);
		cJSON_AddNumberToObject(o, "start_us", (double)r->start_us);
		cJSON_AddNumberToObject(o, "bytes", (double)r->bytes);
		cJSON *h = cJSON_AddArrayToObject(o, "out_hold");
		for (size_t i = 0; i < r->out_u8.n && i < sizeof r->out_u8.hold; i++)
			cJSON_AddItemToArray(h, cJSON_CreateNumber(r->out_u8.hold[i]));
	}
	return j;
}

void record_handover_keep(int keep)
{
	for (struct session *s = srv.sessions; s; s = s->next)
		if (s->rec && s->rec->fd >= 0)
			fcntl(s->rec->fd, F_SETFD, keep ? 0 : FD_CLOEXEC);
}

void record_handover_load(const cJSON *recs)
{
	cJSON_Delete(taken);
	taken = cJSON_IsObject(recs) ? cJSON_Duplicate(recs, 1) : NULL;
}

static int rec_take_over(struct session *s)
{
	cJSON *o = taken ? cJSON_DetachItemFromObjectCaseSensitive(taken, s->name) : NULL;
	if (!o)
		return 0;
	const cJSON *fd = cJSON_GetObjectItem(o, "fd"), *file = cJSON_GetObjectItem(o, "file");
	const cJSON *st = cJSON_GetObjectItem(o, "start_us"), *by = cJSON_GetObjectItem(o, "bytes");
	int ok = cJSON_IsNumber(fd) && fd->valueint >= 0 && cJSON_IsString(file) &&
		 strlen(file->valuestring) < REC_FILE_MAX && cJSON_IsNumber(st);
	if (!ok) {
		if (cJSON_IsNumber(fd) && fd->valueint > 2)
			close(fd->valueint);
		cJSON_Delete(o);
		return 0;
	}
	struct recording *r = xcalloc(1, sizeof *r);
	r->fd = fd->valueint;
	fcntl(r->fd, F_SETFD, FD_CLOEXEC);
	snprintf(r->file, sizeof r->file, "%s", file->valuestring);
	r->start_us = (uint64_t)st->valuedouble;
	r->bytes = cJSON_IsNumber(by) ? (uint64_t)by->valuedouble : 0;
	const cJSON *b;
	cJSON_ArrayForEach(b, cJSON_GetObjectItem(o, "out_hold"))
		if (cJSON_IsNumber(b) && r->out_u8.n < sizeof r->out_u8.hold)
			r->out_u8.hold[r->out_u8.n++] = (unsigned char)b->valueint;
	r->s = s;
	s->rec = r;
	cJSON_Delete(o);
	return 1;
}

/* the sessions are adopted: a recording whose session was not is closed */
void record_handover_done(void)
{
	const cJSON *o;
	cJSON_ArrayForEach(o, taken) {
		const cJSON *fd = cJSON_GetObjectItem(o, "fd");
		if (cJSON_IsNumber(fd) && fd->valueint > 2)
			close(fd->valueint);
	}
	cJSON_Delete(taken);
	taken = NULL;
}

/* ------------------------------------------------------------- routes */

static void follower_free(struct follower *f)
{
	if (f->rec) {
		for (struct follower **pp = &f->rec->followers; *pp; pp = &(*pp)->next)
			if (*pp == f) {
				*pp = f->next;
				break;
			}
	}
	if (f->fd >= 0)
		close(f->fd);
	free(f);
}

/* The answer ends here (the client may still be reading the rest). */
static void follower_end(struct follower *f)
{
	struct http_txn *t = f->t;
	t->gone = NULL;
	t->drained = NULL;
	t->user = NULL;
	http_stream_end(t);
	follower_free(f);
}

static void follower_gone(struct http_txn *t)
{
	struct follower *f = t->user;
	if (f)
		follower_free(f);
}

static void follower_drained(struct http_txn *t)
{
	struct follower *f = t->user;
	if (f)
		follower_pump(f);
}

static void follower_pump(struct follower *f)
{
	f->waiting = 0;
	struct recording *r = f->rec;
	uint64_t end = r ? r->bytes : f->limit;
	if (r && r->fd >= 0 && end - f->pos > FOLLOW_MAX_LAG) {
		log_info("recording %s: a follower %llu bytes behind was ended", r->file,
			 (unsigned long long)(end - f->pos));
		follower_end(f);
		return;
	}
	if (f->pos >= end) {
		if (r && r->fd >= 0) {
			f->waiting = 1;   /* live: more when a line is written */
			return;
		}
		follower_end(f);
		return;
	}
	static char buf[FOLLOW_CHUNK];
	size_t want = end - f->pos > sizeof buf ? sizeof buf : (size_t)(end - f->pos);
	ssize_t n = pread(f->fd, buf, want, (off_t)f->pos);
	if (n <= 0) {   /* the file was cut or removed under us */
		follower_end(f);
		return;
	}
	f->pos += (uint64_t)n;
	http_stream_write(f->t, buf, (size_t)n);   /* more once it has gone out */
}

/* A recording file's name as served: <...>.cast, no '/', not hidden. */
static int valid_file_name(const char *name)
{
	size_t n = strlen(name);
	return n > 5 && n < REC_FILE_MAX && name[0] != '.' && !strchr(name, '/') &&
	       strcmp(name + n - 5, ".cast") == 0;
}

static struct recording *live_by_file(const char *file)
{
	for (struct session *s = srv.sessions; s; s = s->next)
		if (s->rec && strcmp(s->rec->file, file) == 0)
			return s->rec;
	for (struct session *s = srv.closing; s; s = s->next)
		if (s->rec && strcmp(s->rec->file, file) == 0)
			return s->rec;
	return NULL;
}

static void serve_file(struct http_txn *t, const char *file, struct recording *r, int follow)
{
	char why[200];
	if (http_stream_admit(t, why, sizeof why) < 0) {   /* --max-streams[-per-client] */
		buf_t b = {0};
		buf_printf(&b, "%s\n", why);
		http_answer(t, 429, "text/plain", b.p, b.len);
		buf_free(&b);
		return;
	}
	int dfd = open(opts.record_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int fd = dfd < 0 ? -1 : openat(dfd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (dfd >= 0)
		close(dfd);
	struct stat st;
	/* a hard link is refused as a symlink is: a name in the folder that
	 * is also another file (one termd did not write) is not a recording */
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink > 1) {
		if (fd >= 0)
			close(fd);
		http_answer_text(t, 404, "no such recording\n");
		return;
	}
	struct follower *f = xcalloc(1, sizeof *f);
	f->fd = fd;
	f->t = t;
	f->limit = r ? r->bytes : (uint64_t)st.st_size;
	if (r && follow) {
		f->rec = r;
		f->next = r->followers;
		r->followers = f;
	}
	t->user = f;
	t->gone = follower_gone;
	t->drained = follower_drained;
	http_set_header(t, "cache-control", "no-store");
	http_stream_start(t, 200, CAST_CTYPE);
	follower_pump(f);
}

struct listed {
	char *file;
	char session[TD_SESSION_NAME_MAX + 1];
	double start;
	long long bytes;
	int live;
};

static int listed_cmp(const void *a, const void *b)
{
	const struct listed *x = a, *y = b;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return strcmp(x->file, y->file);
}

/* The session a file name was made for: <session>-YYYYmmddTHHMMSSZ[-N].cast */
static int session_of_file(const char *file, char *out, size_t outlen)
{
	size_t n = strlen(file) - 5;   /* without .cast */
	size_t e = n;
	while (e > 0 && file[e - 1] >= '0' && file[e - 1] <= '9')
		e--;
	if (e < n && e > 0 && file[e - 1] == '-') {   /* a -N suffix? */
		size_t e2 = e - 1;
		if (e2 >= 17 && file[e2 - 1] == 'Z')
			n = e2;
	}
	if (n < 18 || file[n - 1] != 'Z' || file[n - 8] != 'T' || file[n - 17] != '-')
		return -1;
	for (size_t i = n - 16; i < n - 1; i++)
		if (i != n - 8 && !(file[i] >= '0' && file[i] <= '9'))
			return -1;
	size_t sl = n - 17;
	if (sl < 1 || sl >= outlen)
		return -1;
	memcpy(out, file, sl);
	out[sl] = 0;
	return td_valid_session_name(out) ? 0 : -1;
}

static void serve_list(struct http_txn *t)
{
	DIR *d = opendir(opts.record_dir);
	if (!d) {
		http_answer_text(t, 500, "cannot read the recordings folder\n");
		return;
	}
	struct listed *v = NULL;
	size_t nv = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!valid_file_name(de->d_name))
			continue;
		int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
		struct stat st;
		if (fd < 0)
			continue;
		if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink > 1) {
			close(fd);
			continue;
		}
		struct listed l = {0};
		l.file = xstrdup(de->d_name);
		l.bytes = (long long)st.st_size;
		l.start = -1;
		char head[4096];
		ssize_t hn = pread(fd, head, sizeof head, 0);
		close(fd);
		char *nl = hn > 0 ? memchr(head, '\n', (size_t)hn) : NULL;
		struct cast_header h;
		char err[128];
		if (nl && cast_parse_header(head, (size_t)(nl - head), &h, err, sizeof err) == 0 &&
		    h.timestamp > 0)
			l.start = h.timestamp;
		if (session_of_file(l.file, l.session, sizeof l.session) < 0)
			l.session[0] = 0;
		const struct recording *lr = live_by_file(l.file);
		l.live = lr && lr->fd >= 0;
		if (nv == cap) {
			cap = cap ? cap * 2 : 16;
			v = xrealloc(v, cap * sizeof *v);
		}
		v[nv++] = l;
	}
	closedir(d);
	if (nv)
		qsort(v, nv, sizeof *v, listed_cmp);
	cJSON *a = cJSON_CreateArray();
	for (size_t i = 0; i < nv; i++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "file", v[i].file);
		if (v[i].session[0])
			cJSON_AddStringToObject(o, "session", v[i].session);
		else
			cJSON_AddNullToObject(o, "session");
		cJSON_AddNumberToObject(o, "bytes", (double)v[i].bytes);
		if (v[i].start >= 0)
			cJSON_AddNumberToObject(o, "start", v[i].start);
		else
			cJSON_AddNullToObject(o, "start");
		cJSON_AddBoolToObject(o, "live", v[i].live);
		cJSON_AddItemToArray(a, o);
		free(v[i].file);
	}
	free(v);
	char *js = cJSON_PrintUnformatted(a);
	cJSON_Delete(a);
	http_set_header(t, "cache-control", "no-store");
	http_answer(t, 200, "application/json", js, strlen(js));
	free(js);
}

static int record_admit(struct http_txn *t)
{
	if (t->auth == AUTH_NONE) {
		http_answer_text(t, 401, http_unauthorized_why(t->wsi, "unauthorized\n"));
		return 1;
	}
	if (!opts.record_dir) {
		http_answer_text(t, 404, "termd is not recording (no --record DIR)\n");
		return 1;
	}
	return 0;
}

static void record_route(struct http_txn *t)
{
	const char *name = t->path + strlen("/record/");
	char fv[64];
	const char *fa = http_arg(t, "follow=", fv, sizeof fv);
	int follow = fa && (strcmp(fa, "1") == 0 || strcmp(fa, "true") == 0);
	if (!*name) {
		serve_list(t);
		return;
	}
	size_t nl = strlen(name);
	if (nl > 5 && strcmp(name + nl - 5, ".cast") == 0) {
		if (!valid_file_name(name)) {
			http_answer_text(t, 400, "not a recording file name\n");
			return;
		}
		serve_file(t, name, live_by_file(name), follow);
		return;
	}
	struct session *s = td_valid_session_name(name) ? session_find(name) : NULL;
	if (!s) {
		http_answer_text(t, 404, "no such session\n");
		return;
	}
	if (!s->rec) {
		http_answer_text(t, 404, "this session has no recording\n");
		return;
	}
	serve_file(t, s->rec->file, s->rec, follow);
}

void record_register(void)
{
	static const struct session_listener l = {
		.started = rec_on_started,
		.input = rec_on_input,
		.text = rec_on_text,
		.resize = rec_on_resize,
		.mark = rec_on_mark,
		.exit = rec_on_exit,
		.gone = rec_on_gone,
	};
	session_listen(&l);
	static const struct http_route routes[] = {
		{"GET", "/record/", record_admit, record_route, 1, TD_API_TERMD},
	};
	http_routes_register(routes, sizeof routes / sizeof routes[0]);
}
