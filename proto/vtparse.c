/* vtparse.c — owns the one ECMA-48 / DEC escape-sequence tokenizer that
 * every pty byte goes through in termd (see vtparse.h for the events). A
 * state machine in the manner of Paul Williams' DEC-compatible parser
 * (vt100.net/emu/dec_ansi_parser), written for termd's streams:
 *
 *   - The stream is UTF-8. Bytes 0x80-0x9F are not C1 controls but parts of
 *     characters: in ground they are text like any byte >= 0x80 (render
 *     decodes them, vtfilter drops the C1 code points U+0080-U+009F written
 *     as UTF-8). Inside an ESC or CSI sequence a byte >= 0x80 breaks the
 *     sequence off (VTP_CANCEL) and is read again as text, as vtfilter and
 *     render always did. Inside a string it is body (titles are UTF-8).
 *   - Text goes out as runs found by scanning (memchr for ESC with
 *     VTP_C0_IN_TEXT, else a scan for the next byte < 0x20), never a callback
 *     per byte: this is the hot path of a `yes` flood.
 *   - C0 controls inside ESC and CSI sequences are executed there (VTP_CTRL)
 *     and the sequence goes on; CAN and SUB cancel it, ESC restarts it,
 *     DEL is ignored. Anywhere, including inside strings.
 *   - A CSI keeps at most VTP_MAX_PARAMS parameters (values saturate at
 *     VTP_PARAM_MAX) and its first VTP_BODY_MAX body bytes; going past a
 *     bound sets a flag instead of truncating silently, and the sequence is
 *     still read to its final byte. ':' separates parameters like ';'
 *     (sub-parameters are not told apart; the body keeps the bytes).
 *     Malformed orders (a parameter byte after an intermediate, a private
 *     marker after the first byte) are flagged, not dropped: Williams'
 *     CSI_IGNORE state becomes the consumer's choice.
 *   - Strings (OSC, DCS, SOS, PM, APC) end at ST (ESC \), at BEL for OSC
 *     (xterm) or for every kind with VTP_BEL_ENDS_ALL (vtfilter's rule), are
 *     cancelled by CAN or SUB, and are cut short by an ESC not followed by
 *     '\' (that ESC starts a new sequence). Every other byte is body, C0
 *     included, handed over as pieces pointing into the input: the
 *     tokenizer holds no string bytes, so a consumer that needs a whole
 *     string (shellint's marks) holds it itself, with its own bound.
 *   - DCS is a string like the others (no hook/put/unhook): no consumer
 *     interprets one.
 * Every input byte is accounted for by exactly one event's raw bytes, so a
 * consumer can pass the stream on unchanged apart from what it removes. */
#include "vtparse.h"

#include <string.h>

enum { S_GROUND, S_ESC, S_ESC_INTER, S_CSI, S_STR, S_STR_ESC };

void vtparse_init(struct vtparse *p, unsigned opts)
{
	memset(p, 0, sizeof *p);
	p->opts = opts;
}

void vtparse_reset(struct vtparse *p)
{
	p->state = S_GROUND;
}

int vtparse_in_ground(const struct vtparse *p)
{
	return p->state == S_GROUND;
}

static void seq_start(struct vtparse *p)
{
	struct vtp_seq *q = &p->seq;
	q->final = q->priv = q->ninter = q->flags = 0;
	q->nparam = 0;
	q->bodylen = 0;
	q->ndig = 0;
	p->state = S_ESC;
}

static void csi_start(struct vtparse *p)
{
	memset(p->seq.param, 0, sizeof p->seq.param);
	p->state = S_CSI;
}

static void add_inter(struct vtparse *p, unsigned char b)
{
	struct vtp_seq *q = &p->seq;
	if (q->ninter < VTP_MAX_INTER)
		q->inter[q->ninter++] = b;
	else
		q->flags |= VTP_INTER_OVER;
}

static void add_body(struct vtp_seq *q, unsigned char b)
{
	if (q->bodylen < VTP_BODY_MAX)
		q->body[q->bodylen++] = (char)b;
	else
		q->flags |= VTP_BODY_OVER;
}

/* A CSI body byte 0x30-0x3f. */
static void csi_param(struct vtp_seq *q, unsigned char b)
{
	add_body(q, b);
	if (q->ninter)
		q->flags |= VTP_PARAM_AFTER_INTER;
	if (b >= 0x3c) {                        /* < = > ? */
		if (q->bodylen == 1)
			q->priv = b;
		else
			q->flags |= VTP_LATE_PRIVATE;
		return;
	}
	if (!q->nparam)
		q->nparam = 1;
	if (b == ';' || b == ':') {
		q->ndig = 0;
		if (q->nparam == VTP_MAX_PARAMS)
			q->flags |= VTP_TOO_MANY;
		if (q->nparam <= VTP_MAX_PARAMS)
			q->nparam++;            /* stops at VTP_MAX_PARAMS + 1 */
		return;
	}
	/* a digit */
	if (q->ndig == VTP_MAX_DIGITS)
		q->flags |= VTP_TOO_LONG;
	if (q->ndig <= VTP_MAX_DIGITS)
		q->ndig++;
	if (q->nparam <= VTP_MAX_PARAMS) {
		uint32_t *v = &q->param[q->nparam - 1];
		uint32_t x = *v * 10 + (uint32_t)(b - '0');
		*v = x > VTP_PARAM_MAX ? VTP_PARAM_MAX : x;
	}
}

static int is_str_intro(unsigned char b)
{
	return b == ']' || b == 'P' || b == 'X' || b == '^' || b == '_';
}

void vtparse_feed(struct vtparse *p, const char *data, size_t n, vtp_cb cb, void *user)
{
	const unsigned char *s = (const unsigned char *)data, *end = s + n;
	const unsigned char *mark = s;          /* first byte no event has had */
	struct vtp_event ev;

	memset(&ev, 0, sizeof ev);

/* hand ev to the callback with the raw bytes [mark, upto) */
#define EMIT(upto) do { \
	ev.raw = (const char *)mark; \
	ev.rawlen = (size_t)((upto) - mark); \
	mark = (upto); \
	cb(user, &ev); \
} while (0)
/* only the fields of the type are set; the rest keep what they had */
#define EV(t) do { ev.type = (t); } while (0)

	while (s < end) {
		unsigned char b;

		switch (p->state) {
		case S_GROUND: {
			const unsigned char *t;
			if (p->opts & VTP_C0_IN_TEXT) {
				t = memchr(s, 0x1b, (size_t)(end - s));
				if (!t)
					t = end;
			} else {
				t = s;
				while (t < end && *t >= 0x20)
					t++;
			}
			if (t > s) {
				EV(VTP_TEXT);
				ev.data = (const char *)s;
				ev.len = (size_t)(t - s);
				EMIT(t);
				s = t;
				if (s == end)
					continue;
			}
			b = *s++;
			if (b == 0x1b) {
				seq_start(p);
			} else {
				EV(VTP_CTRL);
				ev.ch = b;
				EMIT(s);
			}
			continue;
		}
		case S_STR: {
			const unsigned char *t = s;
			int bel = p->str == ']' || (p->opts & VTP_BEL_ENDS_ALL);
			/* bytes above ESC never end a string */
			while (t < end && (*t > 0x1b || !(*t == 0x1b || *t == 0x18 || *t == 0x1a ||
							  (*t == 0x07 && bel))))
				t++;
			if (t > s) {
				EV(VTP_STR_DATA);
				ev.ch = p->str;
				ev.data = (const char *)s;
				ev.len = (size_t)(t - s);
				EMIT(t);
				s = t;
				if (s == end)
					continue;
			}
			b = *s++;
			if (b == 0x1b) {
				p->state = S_STR_ESC;   /* its raw goes with what follows */
				continue;
			}
			p->state = S_GROUND;
			EV(VTP_STR_END);
			ev.ch = p->str;
			ev.end = b;
			EMIT(s);
			continue;
		}
		case S_STR_ESC:
			b = *s;
			EV(VTP_STR_END);
			ev.ch = p->str;
			if (b == '\\') {
				s++;
				p->state = S_GROUND;
				ev.end = '\\';
				EMIT(s);
			} else {
				/* cut short: the ESC begins a sequence, b is read in it */
				seq_start(p);
				ev.end = 0x1b;
				EMIT(mark);
			}
			continue;
		default:
			break;
		}

		/* S_ESC, S_ESC_INTER, S_CSI */
		if (p->state == S_CSI) {
			/* the body of a CSI, the common case, in one go */
			while (s < end && *s >= 0x20 && *s < 0x40) {
				b = *s++;
				if (b < 0x30) {
					add_body(&p->seq, b);
					add_inter(p, b);
				} else {
					csi_param(&p->seq, b);
				}
			}
			if (s == end)
				continue;
		}
		b = *s;
		if (b == 0x1b || b == 0x18 || b == 0x1a || b >= 0x80) {
			EV(VTP_CANCEL);
			ev.ch = b;
			if (b == 0x1b) {
				seq_start(p);
				EMIT(s);
				s++;
			} else if (b >= 0x80) {
				p->state = S_GROUND;    /* b is text */
				EMIT(s);
			} else {
				p->state = S_GROUND;
				s++;
				EMIT(s);
			}
			continue;
		}
		s++;
		if (b < 0x20) {
			EV(VTP_CTRL);
			ev.ch = b;
			EMIT(s);
			continue;
		}
		if (b == 0x7f)
			continue;                       /* DEL: ignored in a sequence */
		if (p->state == S_CSI) {
			if (b < 0x30) {
				add_body(&p->seq, b);
				add_inter(p, b);
			} else if (b < 0x40) {
				csi_param(&p->seq, b);
			} else {
				p->state = S_GROUND;
				p->seq.final = b;
				EV(VTP_CSI);
				ev.ch = b;
				ev.seq = &p->seq;
				EMIT(s);
			}
			continue;
		}
		if (b < 0x30) {
			add_inter(p, b);
			p->state = S_ESC_INTER;
			continue;
		}
		if (p->state == S_ESC && b == '[') {
			csi_start(p);
			continue;
		}
		if (p->state == S_ESC && is_str_intro(b)) {
			p->state = S_STR;
			p->str = b;
			EV(VTP_STR_START);
			ev.ch = b;
			EMIT(s);
			continue;
		}
		p->state = S_GROUND;
		p->seq.final = b;
		EV(VTP_ESC);
		ev.ch = b;
		ev.seq = &p->seq;
		EMIT(s);
	}
	if (mark < end) {
		EV(VTP_PENDING);
		EMIT(end);
	}
#undef EMIT
#undef EV
}
