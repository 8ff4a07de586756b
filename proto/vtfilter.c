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
 * The state survives across feeds, so a sequence split between two reads
 * is handled as if it came whole. */
#include "vtfilter.h"

#include <string.h>

enum { VF_GROUND, VF_C2, VF_ESC, VF_CSI, VF_STR, VF_STR_ESC };

#define VF_MAX_INTER   3
#define VF_MAX_SEPS    15      /* 16 parameters */
#define VF_MAX_DIGITS  6

static void seq_start(struct vtfilter *f)
{
	f->state = VF_ESC;
	f->seq[0] = 0x1b;
	f->seqlen = 1;
	f->bad = 0;
	f->nsep = f->ndig = f->ninter = 0;
}

static void seq_add(struct vtfilter *f, unsigned char b)
{
	if (f->seqlen >= sizeof f->seq)
		f->bad = 1;
	else
		f->seq[f->seqlen++] = b;
}

/* The sequence is complete: pass it on unless it was malformed. */
static void seq_end(struct vtfilter *f, buf_t *out)
{
	if (!f->bad)
		buf_append(out, (const char *)f->seq, f->seqlen);
	f->state = VF_GROUND;
	f->seqlen = 0;
}

/* Bytes handled alike inside an ESC sequence and a CSI: 1 handled, 0 not
 * (a parameter or final byte), -1 the sequence is broken off and b is to be
 * read again as text. */
static int seq_common(struct vtfilter *f, unsigned char b, buf_t *out)
{
	if (b == 0x1b) {
		seq_start(f);                 /* ESC restarts */
	} else if (b == 0x18 || b == 0x1a) {
		f->state = VF_GROUND;         /* CAN, SUB: cancelled */
		f->seqlen = 0;
	} else if (b < 0x20) {
		buf_putc(out, (char)b);       /* executed in the middle */
	} else if (b < 0x30) {
		if (++f->ninter > VF_MAX_INTER)
			f->bad = 1;
		seq_add(f, b);
	} else if (b == 0x7f) {
		/* DEL is ignored inside a sequence */
	} else if (b >= 0x80) {
		f->state = VF_GROUND;         /* not ASCII: broken off */
		f->seqlen = 0;
		return -1;
	} else {
		return 0;
	}
	return 1;
}

/* ESC [intermediates] and a byte 0x30-0x7e. */
static void esc_final(struct vtfilter *f, unsigned char b, buf_t *out)
{
	if (f->seqlen == 1 && b == '[') {
		seq_add(f, b);
		f->state = VF_CSI;
	} else if (f->seqlen == 1 && strchr("]PX^_", b)) {
		f->state = VF_STR;
		f->seqlen = 0;
	} else {
		/* libvterm 0.1.4 reads ESC <intermediates> [ (or ] P X ^ _) as
		 * the start of a CSI or a string, with its bugs: never passed on */
		if (f->seqlen > 1 && strchr("[]PX^_", b))
			f->bad = 1;
		seq_add(f, b);
		seq_end(f, out);
	}
}

/* A CSI parameter (0x30-0x3f) or final byte (0x40-0x7e). */
static void csi_byte(struct vtfilter *f, unsigned char b, buf_t *out)
{
	if (b >= 0x40) {
		seq_add(f, b);
		seq_end(f, out);
		return;
	}
	if (f->ninter)
		f->bad = 1;    /* a parameter after an intermediate */
	if (b == ';' || b == ':') {
		f->ndig = 0;
		if (++f->nsep > VF_MAX_SEPS)
			f->bad = 1;
	} else if (b >= '0' && b <= '9') {
		if (++f->ndig > VF_MAX_DIGITS)
			f->bad = 1;
	}
	seq_add(f, b);
}

void vtfilter_reset(struct vtfilter *f)
{
	memset(f, 0, sizeof *f);
}

void vtfilter_feed(struct vtfilter *f, const char *data, size_t n, buf_t *out)
{
	const unsigned char *p = (const unsigned char *)data;
	buf_reserve(out, n);
	size_t i = 0;
	while (i < n) {
		unsigned char b = p[i];
		switch (f->state) {
		case VF_GROUND: {
			/* text: copy the run up to the next ESC or 0xC2 at once */
			size_t j = i;
			while (j < n && p[j] != 0x1b && p[j] != 0xc2)
				j++;
			if (j > i)
				buf_append(out, data + i, j - i);
			if (j == n)
				return;
			i = j;
			if (p[i] == 0x1b)
				seq_start(f);
			else
				f->state = VF_C2;
			i++;
			continue;
		}
		case VF_C2:
			f->state = VF_GROUND;
			if (b >= 0x80 && b <= 0x9f) {
				i++;           /* a C1 control as UTF-8: dropped */
				continue;
			}
			buf_putc(out, (char)0xc2);
			continue;          /* b again, as text */
		case VF_ESC:
		case VF_CSI: {
			int r = seq_common(f, b, out);
			if (r < 0)
				continue;      /* the sequence broke off: b is text */
			if (r == 0) {
				if (f->state == VF_ESC)
					esc_final(f, b, out);
				else
					csi_byte(f, b, out);
			}
			i++;
			continue;
		}
		case VF_STR:
			/* dropped up to BEL, ST (ESC \) or CAN/SUB */
			while (i < n && p[i] != 0x07 && p[i] != 0x1b && p[i] != 0x18 && p[i] != 0x1a)
				i++;
			if (i == n)
				return;
			f->state = p[i] == 0x1b ? VF_STR_ESC : VF_GROUND;
			i++;
			continue;
		case VF_STR_ESC:
			if (b == '\\') {
				f->state = VF_GROUND;
				i++;
			} else {
				/* an ESC that is not ST ends the string and begins
				 * a sequence of its own */
				seq_start(f);
			}
			continue;
		}
	}
}
