/* exec.c — agent-sandbox's POST /execute: the command split as Python's
 * shlex.split and run WITHOUT a shell (the program exec'd by the session
 * itself, as the request's user), cwd --sandbox-base, each command a
 * pipe session of its own (sandbox-N: on the event stream, in
 * session.list, watchable) that runs alongside the others; stdout and
 * stderr apart, decoded as Python's text mode does (universal newlines);
 * after --sandbox-exec-timeout seconds its process group is killed and
 * the answer is the runtime's "timed out" failure. Every failure is a 200
 * with exit_code 1 and "Failed to execute command: ..." as upstream. */
#include "sandbox.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* one /execute from its start to its answer (and its session's close) */
struct sbrun {
	struct sbrun *next;
	struct http_txn *t;       /* NULL once the client left */
	char name[TD_SESSION_NAME_MAX + 1];
	struct session *s;        /* NULL once the session is gone */
	cJSON *argv;              /* the words, for the timeout's message */
	buf_t out, err;
	int timed_out, ended;
	lws_sorted_usec_list_t timeout_sul, close_sul;
};

static struct {
	struct sbrun *runs;
	unsigned long long nseq;
	int opening;              /* run_start's session.open is under way */
} sx;

/* ================================================================ shlex */

static int sh_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* shlex.shlex(s, posix=True), whitespace_split=True, commenters='' */
cJSON *sb_shlex_split(const char *s, const char **why)
{
	cJSON *words = cJSON_CreateArray();
	buf_t tok = {0};
	int in_word = 0;          /* a token has begun (quotes make even an empty one) */
	const char *p = s;
	while (*p) {
		char c = *p;
		if (sh_space(c)) {
			if (in_word) {
				buf_putc(&tok, 0);
				cJSON_AddItemToArray(words, cJSON_CreateString(tok.p));
				buf_reset(&tok);
				in_word = 0;
			}
			p++;
		} else if (c == '\\') {
			if (!p[1]) {
				*why = "No escaped character";
				goto fail;
			}
			buf_putc(&tok, p[1]);
			in_word = 1;
			p += 2;
		} else if (c == '\'' || c == '"') {
			char q = c;
			in_word = 1;
			p++;
			for (;;) {
				if (!*p) {
					*why = "No closing quotation";
					goto fail;
				}
				if (*p == q) {
					p++;
					break;
				}
				if (q == '"' && *p == '\\') {
					if (!p[1]) {   /* shlex: in the escape state at the end */
						*why = "No escaped character";
						goto fail;
					}
					if (p[1] != '"' && p[1] != '\\')
						buf_putc(&tok, '\\');
					buf_putc(&tok, p[1]);
					p += 2;
					continue;
				}
				buf_putc(&tok, *p++);
			}
		} else {
			buf_putc(&tok, c);
			in_word = 1;
			p++;
		}
	}
	if (in_word) {
		buf_putc(&tok, 0);
		cJSON_AddItemToArray(words, cJSON_CreateString(tok.p));
	}
	buf_free(&tok);
	return words;
fail:
	buf_free(&tok);
	cJSON_Delete(words);
	return NULL;
}

/* ========================================================= Python's words */

/* repr(str) for a str of printable text */
static void py_repr_str(buf_t *b, const char *s)
{
	char q = strchr(s, '\'') && !strchr(s, '"') ? '"' : '\'';
	buf_putc(b, q);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == q || *p == '\\')
			buf_printf(b, "\\%c", *p);
		else if (*p == '\n')
			buf_puts(b, "\\n");
		else if (*p == '\r')
			buf_puts(b, "\\r");
		else if (*p == '\t')
			buf_puts(b, "\\t");
		else if (*p < 0x20 || *p == 0x7f)
			buf_printf(b, "\\x%02x", *p);
		else
			buf_putc(b, (char)*p);
	}
	buf_putc(b, q);
}

/* repr(float(x)) */
static void py_float(double x, char *out, size_t n)
{
	if (x == floor(x) && fabs(x) < 1e16) {
		snprintf(out, n, "%.1f", x);
		return;
	}
	for (int p = 1; p <= 17; p++) {
		snprintf(out, n, "%.*g", p, x);
		if (strtod(out, NULL) == x)
			break;
	}
}

/* "[Errno N] strerror: 'name'", as an OSError reads */
static void py_oserror(buf_t *b, int err, const char *name)
{
	buf_printf(b, "[Errno %d] %s: ", err, strerror(err));
	py_repr_str(b, name);
}

/* text=True: bytes → str as Python's universal newlines read them
 * (\r\n and \r become \n); 0, or -1 (not UTF-8) with the decode error */
static int py_text(buf_t *b, buf_t *why)
{
	const unsigned char *p = (const unsigned char *)b->p;
	size_t n = b->len;
	for (size_t i = 0; i < n;) {
		unsigned char c = p[i];
		size_t k = c < 0x80 ? 1 : (c >> 5) == 6 && c >= 0xc2 ? 2 : (c >> 4) == 14 ? 3 :
			   (c >> 3) == 30 && c <= 0xf4 ? 4 : 0;
		if (!k) {
			buf_printf(why, "'utf-8' codec can't decode byte 0x%02x in position %zu: invalid "
				   "start byte", c, i);
			return -1;
		}
		for (size_t j = 1; j < k; j++)
			if (i + j >= n || (p[i + j] & 0xc0) != 0x80) {
				if (i + j >= n)
					buf_printf(why, "'utf-8' codec can't decode byte 0x%02x in position "
						   "%zu: unexpected end of data", c, i);
				else
					buf_printf(why, "'utf-8' codec can't decode byte 0x%02x in position "
						   "%zu: invalid continuation byte", c, i);
				return -1;
			}
		i += k;
	}
	size_t w = 0;
	for (size_t i = 0; i < n; i++) {
		if (b->p[i] == '\r') {
			b->p[w++] = '\n';
			if (i + 1 < n && b->p[i + 1] == '\n')
				i++;
		} else {
			b->p[w++] = b->p[i];
		}
	}
	b->len = w;
	return 0;
}

/* ============================================================ answers */

static void answer(struct http_txn *t, const char *out, const char *err, int code)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "stdout", out);
	cJSON_AddStringToObject(o, "stderr", err);
	cJSON_AddNumberToObject(o, "exit_code", code);
	sb_answer(t, 200, o);
}

static void answer_failed(struct http_txn *t, const char *why)
{
	buf_t b = {0};
	buf_printf(&b, "Failed to execute command: %s", why);
	buf_putc(&b, 0);
	answer(t, "", b.p, 1);
	buf_free(&b);
}

/* ======================================================= the program */

/* Where exec would find argv0 (cwd the base): 0 and the path in *out, or
 * the errno Python's child would report (the first that is not ENOENT or
 * ENOTDIR on the PATH walk). */
static int find_program(const char *argv0, const char *cwd, buf_t *out)
{
	struct stat st;
	if (strchr(argv0, '/')) {
		buf_reset(out);
		if (argv0[0] != '/')
			buf_printf(out, "%s/", cwd);
		buf_puts(out, argv0);
		buf_putc(out, 0);
		if (stat(out->p, &st) != 0)
			return errno;
		return S_ISREG(st.st_mode) && access(out->p, X_OK) == 0 ? 0 : EACCES;
	}
	const char *path = getenv("PATH");
	if (!path)
		path = "/bin:/usr/bin";
	int saved = 0, last = ENOENT;
	for (const char *p = path;;) {
		const char *e = strchr(p, ':');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		buf_reset(out);
		if (l && p[0] != '/')
			buf_printf(out, "%s/", cwd);
		buf_printf(out, "%.*s/%s", (int)l, p, argv0);
		buf_putc(out, 0);
		int err = 0;
		if (stat(out->p, &st) != 0)
			err = errno;
		else if (!S_ISREG(st.st_mode) || access(out->p, X_OK) != 0)
			err = EACCES;
		else
			return 0;
		if (err != ENOENT && err != ENOTDIR && !saved)
			saved = err;
		last = err;
		if (!e)
			break;
		p = e + 1;
	}
	return saved ? saved : last;
}

static void quote_word(buf_t *b, const char *s)
{
	if (*s && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
			 "@%+=:,./-_") == strlen(s)) {
		buf_puts(b, s);
		return;
	}
	buf_putc(b, '\'');
	for (; *s; s++)
		if (*s == '\'')
			buf_puts(b, "'\\''");
		else
			buf_putc(b, *s);
	buf_putc(b, '\'');
}

/* ============================================================== runs */

static struct sbrun *by_session(struct session *s)
{
	for (struct sbrun *r = sx.runs; r; r = r->next)
		if (r->s == s)
			return r;
	return NULL;
}

static void run_free(struct sbrun *r)
{
	for (struct sbrun **pp = &sx.runs; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			break;
		}
	if (r->t) {
		r->t->user = NULL;
		r->t->gone = NULL;
	}
	lws_sul_cancel(&r->timeout_sul);
	lws_sul_cancel(&r->close_sul);
	cJSON_Delete(r->argv);
	buf_free(&r->out);
	buf_free(&r->err);
	free(r);
}

static void run_gone(struct http_txn *t)
{
	struct sbrun *r = t->user;
	if (r)
		r->t = NULL;
	t->user = NULL;
}

/* the timeout: the process group killed (the answer comes with its end) */
static void timeout_fire(lws_sorted_usec_list_t *sul)
{
	struct sbrun *r = lws_container_of(sul, struct sbrun, timeout_sul);
	if (r->ended || !r->s)
		return;
	r->timed_out = 1;
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "session", r->name);
	cJSON_AddStringToObject(a, "signal", "KILL");
	cJSON_Delete(sb_action("session.signal", a));
}

/* after the answer: the session closed (not from inside its own exit) */
static void close_fire(lws_sorted_usec_list_t *sul)
{
	struct sbrun *r = lws_container_of(sul, struct sbrun, close_sul);
	if (r->s) {
		cJSON *a = cJSON_CreateObject();
		cJSON_AddStringToObject(a, "name", r->name);
		cJSON_Delete(sb_action("session.close", a));
	}
	run_free(r);
}

static void run_answer(struct sbrun *r)
{
	struct http_txn *t = r->t;
	if (!t)
		return;
	t->user = NULL;
	t->gone = NULL;
	r->t = NULL;
	buf_t why = {0};
	if (r->timed_out) {
		/* subprocess.TimeoutExpired: Command '[...]' timed out after T seconds */
		buf_puts(&why, "Command '[");
		const cJSON *w;
		int first = 1;
		cJSON_ArrayForEach(w, r->argv) {
			if (!first)
				buf_puts(&why, ", ");
			first = 0;
			py_repr_str(&why, w->valuestring);
		}
		char tv[64];
		py_float(opts.sandbox_exec_timeout, tv, sizeof tv);
		buf_printf(&why, "]' timed out after %s seconds", tv);
		buf_putc(&why, 0);
		answer_failed(t, why.p);
	} else if (py_text(&r->out, &why) < 0 || py_text(&r->err, &why) < 0) {
		buf_putc(&why, 0);
		answer_failed(t, why.p);
	} else {
		buf_putc(&r->out, 0);
		buf_putc(&r->err, 0);
		int code = r->s->pty.exit_signal ? -r->s->pty.exit_signal : r->s->pty.exit_code;
		answer(t, r->out.p, r->err.p, code);
	}
	buf_free(&why);
}

static void on_stream(struct session *s, int stream, const char *data, size_t n)
{
	struct sbrun *r = by_session(s);
	if (r)
		buf_append(stream == 2 ? &r->err : &r->out, data, n);
}

static void on_exit_(struct session *s)
{
	struct sbrun *r = by_session(s);
	if (!r || r->ended)
		return;
	r->ended = 1;
	lws_sul_cancel(&r->timeout_sul);
	run_answer(r);
	server_timer(&r->close_sul, close_fire, 1);
}

static void on_gone(struct session *s)
{
	struct sbrun *r = by_session(s);
	if (!r)
		return;
	if (!r->ended && r->t)
		answer_failed(r->t, "the session was closed");
	r->ended = 1;
	r->s = NULL;
	lws_sul_cancel(&r->timeout_sul);
	server_timer(&r->close_sul, close_fire, 1);
}

/* the pipe session running argv as u: 0, or -1 and why */
static int run_start(struct sbrun *r, const struct sb_user *u, buf_t *why)
{
	size_t argc = (size_t)cJSON_GetArraySize(r->argv);
	char **argv = xcalloc(argc + 1, sizeof *argv);
	buf_t line = {0};
	size_t i = 0;
	const cJSON *w;
	cJSON_ArrayForEach(w, r->argv) {
		argv[i++] = w->valuestring;
		if (i > 1)
			buf_putc(&line, ' ');
		quote_word(&line, w->valuestring);
	}
	buf_putc(&line, 0);
	do   /* one adopted across an upgrade in place may hold a number */
		snprintf(r->name, sizeof r->name, "sandbox-%llu", ++sx.nseq);
	while (session_find(r->name));
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "name", r->name);
	cJSON_AddStringToObject(a, "command", line.p);
	cJSON_AddStringToObject(a, "kind", "pipe");
	cJSON_AddBoolToObject(a, "stdin", 0);
	cJSON_AddStringToObject(a, "cwd", opts.sandbox_base);
	cJSON *env = cJSON_AddObjectToObject(a, "env");
	if (!u->self) {
		cJSON_AddStringToObject(env, "HOME", u->home);
		cJSON_AddStringToObject(env, "USER", u->name);
		cJSON_AddStringToObject(env, "LOGNAME", u->name);
	}
	buf_free(&line);
	struct session_exec x = {
		.argv = argv, .as_user = !u->self, .uid = u->cred.uid, .gid = u->cred.gid,
		.ngroups = u->cred.ngroups, .groups = u->cred.groups,
	};
	session_exec_next(&x);
	sx.opening = 1;
	cJSON *ans = sb_action("session.open", a);
	sx.opening = 0;
	session_exec_next(NULL);
	free(argv);
	r->s = ans && !sb_is_error(ans) ? session_find(r->name) : NULL;
	if (!r->s) {
		const cJSON *e = cJSON_GetObjectItemCaseSensitive(ans, "error");
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
		buf_puts(why, cJSON_IsString(m) ? m->valuestring : "termd could not start it");
		buf_putc(why, 0);
		cJSON_Delete(ans);
		return -1;
	}
	cJSON_Delete(ans);
	return 0;
}

void sb_execute(struct http_txn *t)
{
	cJSON *body = cJSON_ParseWithLength(t->body.p ? t->body.p : "", t->body.len);
	const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(body, "command");
	if (!body) {
		sb_answer_422(t, "json_invalid", "0", "JSON decode error", NULL);
		return;
	}
	if (!cmd || !cJSON_IsString(cmd)) {
		if (cmd)
			sb_answer_422(t, "string_type", "command", "Input should be a valid string", cmd);
		else
			sb_answer_422(t, "missing", "command", "Field required", body);
		cJSON_Delete(body);
		return;
	}
	struct sb_user u;
	if (sb_user(t, &u) < 0) {
		cJSON_Delete(body);
		return;
	}
	const char *why = NULL;
	cJSON *words = sb_shlex_split(cmd->valuestring, &why);
	cJSON_Delete(body);
	if (!words) {
		answer_failed(t, why);
		return;
	}
	if (!cJSON_GetArraySize(words)) {
		cJSON_Delete(words);
		answer_failed(t, "list index out of range");   /* Popen([]) */
		return;
	}
	buf_t b = {0};
	const char *argv0 = cJSON_GetArrayItem(words, 0)->valuestring;
	struct stat st;
	int err = stat(opts.sandbox_base, &st) != 0 ? errno : !S_ISDIR(st.st_mode) ? ENOTDIR : 0;
	if (err) {   /* chdir fails first: the cwd is the name */
		py_oserror(&b, err, opts.sandbox_base);
	} else if ((err = find_program(argv0, opts.sandbox_base, &b)) != 0) {
		buf_reset(&b);
		py_oserror(&b, err, argv0);
	}
	if (err) {
		buf_putc(&b, 0);
		answer_failed(t, b.p);
		buf_free(&b);
		cJSON_Delete(words);
		return;
	}
	buf_free(&b);
	struct sbrun *r = xcalloc(1, sizeof *r);
	r->argv = words;
	r->t = t;
	if (run_start(r, &u, &b) < 0) {
		r->t = NULL;
		answer_failed(t, b.p);
		buf_free(&b);
		run_free(r);
		return;
	}
	r->next = sx.runs;
	sx.runs = r;
	t->user = r;
	t->gone = run_gone;
	server_timer(&r->timeout_sul, timeout_fire,
		     (uint64_t)(opts.sandbox_exec_timeout * 1e6));
}

/* A sandbox-N session that started without run_start: one taken over by
 * an upgrade in place (its request was cut by it). It is a run whose
 * client left: killed at the timeout (counted again from now), closed
 * once it ended (was: left running, and left in session.list for ever). */
static void on_started(struct session *s)
{
	const char *n = s->name + strlen("sandbox-");
	if (sx.opening || !s->is_pipe || strncmp(s->name, "sandbox-", strlen("sandbox-")) != 0 ||
	    !*n || strspn(n, "0123456789") != strlen(n) || by_session(s))
		return;
	struct sbrun *r = xcalloc(1, sizeof *r);
	snprintf(r->name, sizeof r->name, "%s", s->name);
	r->s = s;
	r->argv = cJSON_CreateArray();
	r->next = sx.runs;
	sx.runs = r;
	server_timer(&r->timeout_sul, timeout_fire, (uint64_t)(opts.sandbox_exec_timeout * 1e6));
}

void sb_exec_register(void)
{
	static const struct session_listener l = {
		.started = on_started, .stream = on_stream, .exit = on_exit_, .gone = on_gone,
	};
	session_listen(&l);
}

void sb_exec_shutdown(void)
{
	while (sx.runs)
		run_free(sx.runs);
}
