/* vtfilter.c — what libvterm 0.1.4 is allowed to see. Program output goes
 * through this filter before vterm_input_write, because that version's
 * parser corrupts memory on some inputs any program can print (all found by
 * tests/fuzz/fuzz_render):
 *   - a CSI with more than 16 arguments writes past its argument array;
 *   - its string buffer (OSC, DCS, APC, PM, SOS) overflows on some
 *     sequences of ESC inside strings.
 * Rather than chase each bug, the filter passes only well-formed and bounded
 * sequences and drops the rest, as a terminal ignores a malformed sequence:
 *   - text and C0 controls pass through;
 *   - ESC sequences (with at most 3 intermediates) pass through, except
 *     ESC <intermediates> followed by [ ] P X ^ _, which libvterm would
 *     read as a CSI or string (ESC * [ ;;;...m crashed it too);
 *   - a CSI passes when it has at most 16 parameters of at most 6 digits and
 *     fits in 64 bytes, otherwise the whole CSI is dropped; a C0 control
 *     inside a CSI is passed on at once, as terminals execute it there;
 *   - strings (OSC, DCS, APC, PM, SOS) are dropped up to their BEL or ST.
 *     termd takes titles and its own marks from shellint's scanner, and
 *     libvterm's string callbacks are not used;
 *   - C1 controls written as UTF-8 (U+0080 to U+009F) are dropped.
 *     libvterm would act on some of them, and they are never text.
 * The sequences come from proto/vtparse.c (options: C0 controls stay in
 * text runs, BEL ends every kind of string); a sequence is re-emitted from
 * its parsed parts when it is within the bounds above. The state survives
 * across feeds, so a sequence split between two reads is handled as if it
 * came whole. */
#include "vtfilter.h"

#include <string.h>

#define VF_MAX_SEQ 64          /* bytes of one CSI, ESC [ and final included */

/* Text: passed on, except C1 controls written as UTF-8 (C2 80 to C2 9F). A
 * C2 at the end of a run is held until the next byte is known. */
static void vf_text(struct vtfilter *f, const char *p, size_t n)
{
	const char *end = p + n;
	if (f->c2) {
		f->c2 = 0;
		if ((unsigned char)*p >= 0x80 && (unsigned char)*p <= 0x9f)
			p++;
		else
			buf_putc(f->out, (char)0xc2);
	}
	while (p < end) {
		const char *c = memchr(p, 0xc2, (size_t)(end - p));
		if (!c) {
			buf_append(f->out, p, (size_t)(end - p));
			return;
		}
		buf_append(f->out, p, (size_t)(c - p));
		if (c + 1 == end) {
			f->c2 = 1;
			return;
		}
		unsigned char b = (unsigned char)c[1];
		if (b >= 0x80 && b <= 0x9f) {
			p = c + 2;             /* a C1 control: dropped */
		} else {
			buf_putc(f->out, (char)0xc2);
			p = c + 1;
		}
	}
}

static void vf_event(void *user, const struct vtp_event *ev)
{
	struct vtfilter *f = user;
	const struct vtp_seq *q = ev->seq;
	if (ev->type == VTP_TEXT) {
		vf_text(f, ev->data, ev->len);
		return;
	}
	if (f->c2) {
		f->c2 = 0;
		buf_putc(f->out, (char)0xc2);
	}
	switch (ev->type) {
	case VTP_CTRL:
		buf_putc(f->out, (char)ev->ch);   /* executed inside a sequence */
		break;
	case VTP_ESC:
		/* libvterm 0.1.4 reads ESC <intermediates> [ (or ] P X ^ _) as
		 * the start of a CSI or a string, with its bugs: never passed on */
		if ((q->flags & VTP_INTER_OVER) || (q->ninter && strchr("[]PX^_", q->final)))
			break;
		buf_putc(f->out, 0x1b);
		buf_append(f->out, (const char *)q->inter, q->ninter);
		buf_putc(f->out, (char)q->final);
		break;
	case VTP_CSI:
		if ((q->flags & (VTP_TOO_MANY | VTP_TOO_LONG | VTP_BODY_OVER | VTP_INTER_OVER |
				 VTP_PARAM_AFTER_INTER)) || 3 + q->bodylen > VF_MAX_SEQ)
			break;
		buf_append(f->out, "\x1b[", 2);
		buf_append(f->out, q->body, q->bodylen);
		buf_putc(f->out, (char)q->final);
		break;
	default:
		/* CAN/SUB/ESC/non-ASCII breaking a sequence off, strings, and
		 * sequences still open: nothing */
		break;
	}
}

int vtfilter_clean(const struct vtfilter *f, const char *data, size_t n)
{
	return !f->c2 && vtparse_in_ground(&f->vp) && !memchr(data, 0x1b, n) &&
	       !memchr(data, 0xc2, n);
}

void vtfilter_reset(struct vtfilter *f)
{
	memset(f, 0, sizeof *f);
	vtparse_init(&f->vp, VTP_C0_IN_TEXT | VTP_BEL_ENDS_ALL);
}

void vtfilter_feed(struct vtfilter *f, const char *data, size_t n, buf_t *out)
{
	buf_reserve(out, n);
	f->out = out;
	vtparse_feed(&f->vp, data, n, vf_event, f);
	f->out = NULL;
}
