/* shellint.c — termd's shell integration: the bash rc file (from
 * share/shell/termd.bash, embedded), the scanner that finds the shell's
 * command marks (private OSC 6973 with the session's nonce), window titles
 * (OSC 0/2) and readline's "ready" signal (bracketed paste on, CSI ?2004h)
 * in a session's output, and how a command is typed so that the shell takes
 * all of it as one unit (bracketed paste when short, else a file the shell
 * sources). Marks: C start (PS0), D done (PROMPT_COMMAND), P continuation
 * (PS2: the shell reads the rest of an unfinished command). */
#include "termd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

static const char rc_bash[] =
#include "termd.bash.inc"
	;
static const char rc_sh[] =
#include "termd.sh.inc"
	;

#define OSC_HOLD_MAX 8192   /* an OSC longer than this is passed on unread */
#define MARK_PREFIX "6973;"

enum si_state { S_TEXT, S_ESC, S_OSC, S_OSC_ESC, S_CSI };

struct shellint {
	si_cb cb;
	void *user;
	char nonce[33];
	enum si_state st;
	buf_t hold;          /* OSC being held back (starts with ESC ]) */
	int osc_pass;        /* OSC too long: passing through until its end */
	char csi[16];
	size_t csi_len;
};

struct shellint *shellint_new(si_cb cb, void *user)
{
	struct shellint *si = xcalloc(1, sizeof *si);
	si->cb = cb;
	si->user = user;
	unsigned char rnd[16];
	if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
		uint64_t t = mono_us() ^ ((uint64_t)getpid() << 32);
		memcpy(rnd, &t, sizeof t);
		memcpy(rnd + 8, &t, sizeof t);
	}
	for (size_t i = 0; i < sizeof rnd; i++)
		snprintf(si->nonce + 2 * i, 3, "%02x", rnd[i]);
	return si;
}

void shellint_free(struct shellint *si)
{
	if (!si)
		return;
	buf_free(&si->hold);
	free(si);
}

const char *shellint_nonce(struct shellint *si)
{
	return si->nonce;
}

void shellint_set_nonce(struct shellint *si, const char *nonce)
{
	snprintf(si->nonce, sizeof si->nonce, "%s", nonce);
}

/* A complete OSC body (between "ESC ]" and its terminator). Returns 1 if it
 * was one of ours (and so must not be passed on). */
static int handle_osc(struct shellint *si, const char *body, size_t n)
{
	size_t pl = strlen(MARK_PREFIX), nl = strlen(si->nonce);
	if (n > pl + nl + 1 && memcmp(body, MARK_PREFIX, pl) == 0 &&
	    memcmp(body + pl, si->nonce, nl) == 0 && body[pl + nl] == ';') {
		const char *k = body + pl + nl + 1;
		size_t kn = n - (size_t)(k - body);
		if (kn >= 1 && k[0] == 'C') {
			si->cb(si->user, SI_MARK_START, NULL, 0, 0);
		} else if (kn >= 1 && k[0] == 'P') {
			si->cb(si->user, SI_MARK_CONT, NULL, 0, 0);
		} else if (kn >= 2 && k[0] == 'D' && k[1] == ';') {
			/* D;<exit>;<cwd>: exit is -?[0-9]+ followed by ';' or the
			 * end; anything else is a malformed mark, swallowed without
			 * an event (a number read up to the first non-digit made
			 * garbage parse differently depending on what followed it;
			 * found by tests/fuzz/fuzz_shellint) */
			const char *p = k + 2, *end = k + kn;
			int neg = p < end && *p == '-';
			p += neg;
			const char *digits = p;
			long code = 0;
			while (p < end && *p >= '0' && *p <= '9') {
				if (code < 1000000000L)
					code = code * 10 + (*p - '0');
				p++;
			}
			if (p == digits || (p < end && *p != ';'))
				return 1;
			if (p < end)
				p++;
			si->cb(si->user, SI_MARK_DONE, p, (size_t)(end - p), (int)(neg ? -code : code));
		}
		return 1;
	}
	if (n >= 2 && (body[0] == '0' || body[0] == '2') && body[1] == ';')
		si->cb(si->user, SI_TITLE, body + 2, n - 2, 0);
	return 0;
}

static void emit_text(struct shellint *si, const char *p, size_t n)
{
	if (n)
		si->cb(si->user, SI_TEXT, p, n, 0);
}

/* The OSC in si->hold ended (terminator of tlen bytes included at its end). */
static void osc_end(struct shellint *si, size_t tlen)
{
	if (si->osc_pass) {
		si->osc_pass = 0;
		return;
	}
	const char *body = si->hold.p + 2;
	size_t n = si->hold.len - 2 - tlen;
	if (!handle_osc(si, body, n))
		emit_text(si, si->hold.p, si->hold.len);
	buf_reset(&si->hold);
}

static void hold_byte(struct shellint *si, char c)
{
	if (si->osc_pass) {
		emit_text(si, &c, 1);
		return;
	}
	buf_putc(&si->hold, c);
	if (si->hold.len > OSC_HOLD_MAX) {
		emit_text(si, si->hold.p, si->hold.len);
		buf_reset(&si->hold);
		si->osc_pass = 1;
	}
}

void shellint_feed(struct shellint *si, const char *data, size_t n)
{
	size_t i = 0;
	while (i < n) {
		if (si->st == S_TEXT) {
			const char *esc = memchr(data + i, 0x1b, n - i);
			size_t run = esc ? (size_t)(esc - (data + i)) : n - i;
			emit_text(si, data + i, run);
			i += run;
			if (!esc)
				break;
			i++;
			si->st = S_ESC;
			continue;
		}
		char c = data[i];
		switch (si->st) {
		case S_ESC:
			if (c == ']') {
				buf_reset(&si->hold);
				buf_append(&si->hold, "\x1b]", 2);
				si->osc_pass = 0;
				si->st = S_OSC;
				i++;
			} else if (c == '[') {
				emit_text(si, "\x1b[", 2);
				si->csi_len = 0;
				si->st = S_CSI;
				i++;
			} else {
				emit_text(si, "\x1b", 1);
				si->st = S_TEXT;   /* reprocess c as text */
			}
			break;
		case S_OSC:
			if (c != 0x07 && c != 0x1b) {
				/* the body up to its terminator, as one run */
				size_t j = i;
				while (j < n && data[j] != 0x07 && data[j] != 0x1b)
					j++;
				if (si->osc_pass) {
					emit_text(si, data + i, j - i);
				} else {
					buf_append(&si->hold, data + i, j - i);
					if (si->hold.len > OSC_HOLD_MAX) {
						emit_text(si, si->hold.p, si->hold.len);
						buf_reset(&si->hold);
						si->osc_pass = 1;
					}
				}
				i = j;
				break;
			}
			if (c == 0x07) {
				hold_byte(si, c);
				osc_end(si, 1);
				si->st = S_TEXT;
			} else {
				/* the ESC is held or passed on once the next byte says
				 * whether it ends the OSC (passing it on here made an
				 * over-long OSC cut short by ESC x come out with the ESC
				 * twice; found by tests/fuzz/fuzz_shellint) */
				si->st = S_OSC_ESC;
			}
			i++;
			break;
		case S_OSC_ESC:
			if (c == '\\') {
				hold_byte(si, 0x1b);
				hold_byte(si, c);
				osc_end(si, 2);
				si->st = S_TEXT;
				i++;
			} else {
				/* ESC not followed by '\': the OSC was cut short. Pass
				 * what we held on and restart at this ESC. */
				if (!si->osc_pass)
					emit_text(si, si->hold.p, si->hold.len);
				buf_reset(&si->hold);
				si->osc_pass = 0;
				si->st = S_ESC;
			}
			break;
		case S_CSI: {
			if (c == 0x1b) {
				/* ESC cuts an unfinished CSI short, as in terminals */
				si->st = S_ESC;
				i++;
				break;
			}
			/* parameters and intermediates up to the final byte, as one run */
			size_t j = i;
			while (j < n && data[j] != 0x1b &&
			       !((unsigned char)data[j] >= 0x40 && (unsigned char)data[j] <= 0x7e)) {
				if (si->csi_len < sizeof si->csi)
					si->csi[si->csi_len++] = data[j];
				j++;
			}
			int final = j < n && data[j] != 0x1b;
			emit_text(si, data + i, j - i + (size_t)final);
			if (final) {
				if (data[j] == 'h' && si->csi_len == 5 && memcmp(si->csi, "?2004", 5) == 0)
					si->cb(si->user, SI_READY, NULL, 0, 0);
				si->st = S_TEXT;
				j++;
			}
			i = j;
			break;
		}
		case S_TEXT:
			break;
		}
	}
}

static int write_file(const char *path, const char *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		log_warn("cannot write %s: %s", path, strerror(errno));
		return -1;
	}
	size_t off = 0;
	while (off < len) {
		ssize_t w = write(fd, data + off, len - off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			log_warn("cannot write %s: %s", path, strerror(errno));
			close(fd);
			return -1;
		}
		off += (size_t)w;
	}
	close(fd);
	return 0;
}

int shellint_write_rc(const char *dir)
{
	buf_t p = {0};
	buf_printf(&p, "%s/termd.bash", dir);
	int r = write_file(p.p, rc_bash, sizeof rc_bash - 1);
	buf_reset(&p);
	buf_printf(&p, "%s/termd.sh", dir);
	if (r == 0)
		r = write_file(p.p, rc_sh, sizeof rc_sh - 1);
	buf_free(&p);
	return r;
}

/* `path` quoted for the shell: '...' with each ' written '\'' */
static void shell_quote(buf_t *out, const char *path)
{
	buf_putc(out, '\'');
	for (const char *p = path; *p; p++) {
		if (*p == '\'')
			buf_puts(out, "'\\''");
		else
			buf_putc(out, *p);
	}
	buf_putc(out, '\'');
}

/* Writes text to the session's command file; its path into path. */
static int write_cmd_file(struct session *s, const char *text, size_t len, buf_t *path)
{
	buf_printf(path, "%s/cmd-%s.sh", srv.rundir, s->name);
	return write_file(path->p, text, len);
}

/* Whether bash gets the text as a bracketed paste: short texts only.
 * Readline redisplays a pasted buffer as a whole, and a buffer taller than
 * the screen costs it far more than linearly (14 KB of heredoc took 0.9 s
 * in a 160x48 session; 20 KB never finished): a longer text is written to a
 * file and sourced, which keeps the one-unit semantics at any size. */
static int paste_fits(const char *text, size_t len)
{
	if (len > SHELLINT_PASTE_MAX)
		return 0;
	size_t lines = 1;
	for (const char *p = text; (p = memchr(p, '\n', len - (size_t)(p - text))); p++)
		if (++lines > SHELLINT_PASTE_LINES)
			return 0;
	return 1;
}

/* The text a shell should take as one unit, typed so that the line editor
 * reads all of it before running any: bracketed paste for bash (readline
 * inserts pasted newlines into the line instead of accepting it), then
 * Enter. ESC bytes would end the paste early, so they are left out. A long
 * text is sourced from a file instead (`. FILE`, typed with a leading space
 * so that HISTCONTROL=ignorespace keeps it out of the history): the shell
 * reads it in the same shell, so its state persists as when typed. */
void shellint_type_command(struct session *s, const char *text, buf_t *out)
{
	size_t len = strlen(text);
	if (s->shell_kind != SHELL_BASH) {
		/* POSIX sh has no line editor to paste into: the text goes to a
		 * file that the shell sources (see share/shell/termd.sh) */
		buf_t path = {0};
		if (write_cmd_file(s, text, len, &path) == 0) {
			buf_puts(out, "__termd_run ");
			shell_quote(out, path.p);
			buf_putc(out, '\n');
		}
		buf_free(&path);
		return;
	}
	if (!paste_fits(text, len)) {
		buf_t path = {0};
		if (write_cmd_file(s, text, len, &path) == 0) {
			buf_puts(out, " . ");
			shell_quote(out, path.p);
			buf_putc(out, '\r');
			buf_free(&path);
			return;
		}
		buf_free(&path);   /* no file: paste it after all */
	}
	buf_puts(out, "\x1b[200~");
	for (const char *p = text; *p; p++) {
		if (*p == 0x1b)
			continue;
		if (*p == '\r' && p[1] == '\n')
			continue;
		buf_putc(out, *p);
	}
	/* a trailing newline would make readline's buffer end in an empty line */
	while (out->len > 6 && out->p[out->len - 1] == '\n')
		out->len--;
	buf_puts(out, "\x1b[201~\r");
}
