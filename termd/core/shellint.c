/* shellint.c — termd's shell integration: the bash rc file (from
 * share/shell/termd.bash, embedded), the scanner that finds the shell's
 * command marks (private OSC 6973 with the session's nonce), window titles
 * (OSC 0/2) and readline's "ready" signal (bracketed paste on, CSI ?2004h)
 * in a session's output, and how a command is typed so that the shell takes
 * all of it as one unit (bracketed paste when short, else a file the shell
 * sources). Marks: C start (PS0), D done (PROMPT_COMMAND), P continuation
 * (PS2: the shell reads the rest of an unfinished command). The scanner is
 * a consumer of proto/vtparse.c: it passes every byte on in order (the raw
 * bytes of the tokenizer's events) except its marks. */
#include "core.h"
#include "vtparse.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <termios.h>
#include <unistd.h>

static const char rc_bash[] =
#include "termd.bash.inc"
	;
static const char rc_sh[] =
#include "termd.sh.inc"
	;

#define OSC_HOLD_MAX 8192   /* an OSC longer than this is passed on unread */
#define MARK_PREFIX "6973;"

/* What is done with the string being read. */
enum si_mode {
	M_NONE,     /* no string */
	M_OSC,      /* an OSC held back in hold (starting with ESC ]) */
	M_PASS,     /* passed through unread: other strings, an OSC over the
		     * hold limit or not right after its ESC */
};

struct shellint {
	si_cb cb;
	void *user;
	char nonce[33];
	struct vtparse vp;
	enum si_mode mode;
	buf_t hold;          /* the OSC being held back */
	int esc_pend;        /* an ESC (the last byte of a feed) not yet passed on:
			      * it may begin an OSC or be the ESC of an ST */
	const char *out;     /* text of this feed not yet handed on (contiguous) */
	size_t outn;
};

struct shellint *shellint_new(si_cb cb, void *user)
{
	struct shellint *si = xcalloc(1, sizeof *si);
	si->cb = cb;
	si->user = user;
	vtparse_init(&si->vp, VTP_C0_IN_TEXT);
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

/* ---- passing text on: input bytes are handed on as few, long runs ---- */

static void flush(struct shellint *si)
{
	if (si->outn)
		si->cb(si->user, SI_TEXT, si->out, si->outn, 0);
	si->outn = 0;
}

/* Bytes of the current feed, passed on in order. */
static void pass(struct shellint *si, const char *p, size_t n)
{
	if (!n)
		return;
	if (si->outn && si->out + si->outn == p) {
		si->outn += n;
		return;
	}
	flush(si);
	si->out = p;
	si->outn = n;
}

/* Bytes from elsewhere (the hold, a held ESC). */
static void emit_text(struct shellint *si, const char *p, size_t n)
{
	flush(si);
	if (n)
		si->cb(si->user, SI_TEXT, p, n, 0);
}

static void esc_out(struct shellint *si)
{
	if (si->esc_pend) {
		si->esc_pend = 0;
		emit_text(si, "\x1b", 1);
	}
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

/* The held OSC is let go unread. */
static void hold_out(struct shellint *si)
{
	emit_text(si, si->hold.p, si->hold.len);
	buf_reset(&si->hold);
}

/* A terminator byte of the held OSC (the limit counts it too). */
static void hold_byte(struct shellint *si, char c)
{
	if (si->mode == M_PASS) {
		emit_text(si, &c, 1);
		return;
	}
	buf_putc(&si->hold, c);
	if (si->hold.len > OSC_HOLD_MAX) {
		hold_out(si);
		si->mode = M_PASS;
	}
}

/* The held OSC ended (terminator of tlen bytes included at its end). */
static void osc_end(struct shellint *si, size_t tlen)
{
	enum si_mode m = si->mode;
	si->mode = M_NONE;
	if (m == M_PASS)
		return;
	flush(si);
	if (!handle_osc(si, si->hold.p + 2, si->hold.len - 2 - tlen))
		emit_text(si, si->hold.p, si->hold.len);
	buf_reset(&si->hold);
}

/* A string begins. Only an OSC whose ESC ] came together is held (and so
 * can be a mark or a title); one with a control between them, as in any
 * other string, is passed through. */
static void str_start(struct shellint *si, const struct vtp_event *ev)
{
	const char *raw = ev->raw;
	size_t rn = ev->rawlen;
	if (ev->ch == ']' && rn >= 2 && raw[rn - 2] == 0x1b) {
		esc_out(si);
		pass(si, raw, rn - 2);
	} else if (ev->ch == ']' && rn == 1 && si->esc_pend) {
		si->esc_pend = 0;
	} else {
		esc_out(si);
		pass(si, raw, rn);
		si->mode = M_PASS;
		return;
	}
	buf_reset(&si->hold);
	buf_append(&si->hold, "\x1b]", 2);
	si->mode = M_OSC;
}

static void str_end(struct shellint *si, const struct vtp_event *ev)
{
	switch (ev->end) {
	case 0x07:
		if (si->mode == M_OSC) {
			hold_byte(si, 0x07);
			osc_end(si, 1);
		} else {
			pass(si, ev->raw, ev->rawlen);
		}
		break;
	case '\\':
		if (si->mode == M_OSC) {
			si->esc_pend = 0;
			hold_byte(si, 0x1b);
			hold_byte(si, '\\');
			osc_end(si, 2);
		} else {
			esc_out(si);
			pass(si, ev->raw, ev->rawlen);
		}
		break;
	default:
		/* cut short (ESC x: the ESC goes with what follows) or cancelled
		 * (CAN, SUB): what was held goes out unread */
		if (si->mode == M_OSC)
			hold_out(si);
		pass(si, ev->raw, ev->rawlen);
		break;
	}
	si->mode = M_NONE;
}

static void si_vt(void *user, const struct vtp_event *ev)
{
	struct shellint *si = user;
	switch (ev->type) {
	case VTP_PENDING:
		/* the feed ends inside a sequence; a last ESC is held back */
		if (ev->rawlen && ev->raw[ev->rawlen - 1] == 0x1b) {
			esc_out(si);
			pass(si, ev->raw, ev->rawlen - 1);
			si->esc_pend = 1;
		} else {
			esc_out(si);
			pass(si, ev->raw, ev->rawlen);
		}
		return;
	case VTP_STR_START:
		str_start(si, ev);
		return;
	case VTP_STR_DATA:
		if (si->mode != M_OSC) {
			pass(si, ev->raw, ev->rawlen);
			return;
		}
		/* the body, held; past the limit the OSC is let go unread (the
		 * held part before it ends, so holding stays bounded) */
		buf_append(&si->hold, ev->data, ev->len);
		if (si->hold.len > OSC_HOLD_MAX) {
			hold_out(si);
			si->mode = M_PASS;
		}
		return;
	case VTP_STR_END:
		str_end(si, ev);
		return;
	default:
		/* text, controls, ESC and CSI sequences: passed on */
		esc_out(si);
		pass(si, ev->raw, ev->rawlen);
		if (ev->type == VTP_CSI && ev->ch == 'h' && ev->seq->bodylen == 5 &&
		    memcmp(ev->seq->body, "?2004", 5) == 0) {
			flush(si);
			si->cb(si->user, SI_READY, NULL, 0, 0);
		}
		return;
	}
}

/* Every byte is passed on as SI_TEXT, in order, except the marks; an OSC
 * is held back (up to OSC_HOLD_MAX) until it is known to be one, and an
 * ESC at the end of a feed until the next byte. */
void shellint_feed(struct shellint *si, const char *data, size_t n)
{
	vtparse_feed(&si->vp, data, n, si_vt, si);
	flush(si);
}

static int write_file(const char *path, const char *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		log_warn("cannot write %s: %s", path, strerror(errno));
		return -1;
	}
	if (write_all(fd, data, len) < 0) {
		log_warn("cannot write %s: %s", path, strerror(errno));
		close(fd);
		return -1;
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
 * file and run from it, which keeps the one-unit semantics at any size. */
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
 * text is written to a file and evaluated instead (` eval "$(< FILE)"`,
 * typed with a leading space so that HISTCONTROL=ignorespace keeps it out of
 * the history): the same shell runs it, so its state persists as when typed,
 * and eval (unlike `.`) names no file and no line in the shell's messages,
 * as for a pasted text. */
void shellint_type_command(struct session *s, const char *text, buf_t *out)
{
	size_t len = strlen(text);
	/* A run starts from an empty line, whatever a person or `keys` left on
	 * it. Readline has the terminal in raw mode: the key termd.bash binds
	 * to kill-whole-line (in the emacs and both vi keymaps), unless nothing
	 * was written to the pty since a run's command line, which readline
	 * read to its Enter (each line starts empty, in vi insert mode; 7
	 * bytes fewer for it to read one by one). A terminal in
	 * cooked mode (sh, or a bash without its line editor) edits the line
	 * itself: its kill character. In cooked mode a bracketed paste would
	 * be echoed as it is, markers and all: the text goes through a file. */
	struct termios tio;
	int cooked = 0;
	if (tcgetattr(s->pty.fd, &tio) == 0) {
		cooked = (tio.c_lflag & ICANON) != 0;
		if (s->shell_kind == SHELL_BASH && !cooked) {
			if (!s->line_clean)
				buf_puts(out, SHELLINT_KILL_LINE);
		} else if (tio.c_cc[VKILL] != _POSIX_VDISABLE) {
			buf_putc(out, (char)tio.c_cc[VKILL]);
		}
	}
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
	if (cooked || !paste_fits(text, len)) {
		buf_t path = {0};
		if (write_cmd_file(s, text, len, &path) == 0) {
			/* eval, not `.`: the shell's messages then read as
			 * for a pasted text ("bash: x: command not found",
			 * not "bash: /tmp/.../cmd-main.sh: line 3: ...").
			 * `; (exit $?)`: with eval alone as the line, bash 5.2
			 * goes on with the text after C-c kills a command in
			 * it; with a command after it, C-c ends the text as
			 * it ends a pasted one. $? is kept. */
			buf_puts(out, " eval \"$(< ");
			shell_quote(out, path.p);
			buf_puts(out, ")\"; (exit $?)\r");
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
