/* vtparse.h — the one escape-sequence tokenizer (vtparse.c): program output
 * in, events out (text runs, C0 controls, ESC and CSI sequences, strings).
 * Its consumers are vtfilter.c (what libvterm may see), termd's shellint.c
 * (marks, titles, the ready CSI) and render.c (text as a person sees it).
 *
 * Events, in input order:
 *   VTP_TEXT       a run of ground bytes (data/len): printable ASCII, DEL and
 *                  every byte >= 0x80 (the stream is UTF-8; nothing is
 *                  decoded here), and with VTP_C0_IN_TEXT the C0 controls
 *                  other than ESC as well. A run never spans an ESC.
 *   VTP_CTRL       a C0 control (ch): in ground (without VTP_C0_IN_TEXT), or
 *                  met inside an ESC or CSI sequence, which it does not end
 *                  (terminals execute it there).
 *   VTP_CANCEL     an ESC or CSI sequence broken off (ch = the byte that broke
 *                  it): CAN or SUB (consumed), ESC (which starts a new
 *                  sequence) or a byte >= 0x80 (read again as text).
 *   VTP_ESC        ESC [intermediates] final: seq (final, inter, ninter, flags).
 *   VTP_CSI        ESC [ ... final: seq (priv, param/nparam, inter, the body
 *                  bytes as sent, flags).
 *   VTP_STR_START  ESC ] (OSC), ESC P (DCS), ESC X (SOS), ESC ^ (PM), ESC _
 *                  (APC): ch = ']' 'P' 'X' '^' or '_'.
 *   VTP_STR_DATA   a piece of the string's body (data/len, pointing into the
 *                  input: the tokenizer holds no string bytes).
 *   VTP_STR_END    the string ended; ch = its kind, end = how: 0x07 (BEL),
 *                  '\\' (ST, ESC \), 0x18/0x1a (CAN/SUB, consumed) or 0x1b
 *                  (an ESC not followed by '\': it starts a new sequence).
 *   VTP_PENDING    end of a feed in the middle of a sequence: only raw.
 * Every event carries raw/rawlen, the input bytes of this feed it accounts
 * for; the raws of all events concatenated are the input, byte for byte
 * (VTP_PENDING hands over what a sequence consumed so far). A consumer that
 * passes output on (shellint) forwards raws; the others ignore them.
 *
 * Incremental: any split of the input gives the same events, except that
 * TEXT and STR_DATA may come in more pieces and PENDING events appear.
 * Bounded: the parser is a fixed-size struct and allocates nothing. */
#ifndef TERMD_VTPARSE_H
#define TERMD_VTPARSE_H

#include <stddef.h>
#include <stdint.h>

#define VTP_MAX_PARAMS 16        /* parameters kept; more set VTP_TOO_MANY */
#define VTP_MAX_DIGITS 6         /* digits per parameter; more set VTP_TOO_LONG */
#define VTP_PARAM_MAX  65535u    /* a parameter's value saturates here */
#define VTP_MAX_INTER  3         /* intermediates kept; more set VTP_INTER_OVER */
#define VTP_BODY_MAX   64        /* CSI body bytes kept; more set VTP_BODY_OVER */

/* options (vtparse_init) */
#define VTP_C0_IN_TEXT   0x1u    /* ground C0 controls stay in TEXT runs */
#define VTP_BEL_ENDS_ALL 0x2u    /* BEL ends every string, not only OSC */

/* seq->flags: the sequence is over a bound or malformed */
#define VTP_TOO_MANY      0x01   /* more than VTP_MAX_PARAMS parameters */
#define VTP_TOO_LONG      0x02   /* a parameter of more than VTP_MAX_DIGITS digits */
#define VTP_BODY_OVER     0x04   /* body longer than VTP_BODY_MAX (body holds its start) */
#define VTP_INTER_OVER    0x08   /* more than VTP_MAX_INTER intermediates */
#define VTP_PARAM_AFTER_INTER 0x10  /* a parameter byte after an intermediate */
#define VTP_LATE_PRIVATE  0x20   /* < = > ? after the first byte of the body */

enum vtp_type {
	VTP_TEXT,
	VTP_CTRL,
	VTP_CANCEL,
	VTP_ESC,
	VTP_CSI,
	VTP_STR_START,
	VTP_STR_DATA,
	VTP_STR_END,
	VTP_PENDING,
};

/* An ESC or CSI sequence. */
struct vtp_seq {
	unsigned char final;
	unsigned char priv;                 /* CSI: < = > or ? as first byte, else 0 */
	unsigned char ninter;               /* intermediates kept in inter[] */
	unsigned char flags;                /* VTP_TOO_MANY ... */
	unsigned char inter[VTP_MAX_INTER];
	int nparam;                         /* parameters given, VTP_MAX_PARAMS + 1 if more */
	uint32_t param[VTP_MAX_PARAMS];     /* 0 when empty or not given */
	size_t bodylen;                     /* CSI: parameter and intermediate bytes, */
	char body[VTP_BODY_MAX];            /* as sent (C0 and DEL left out) */
	int ndig;                           /* parsing: digits of the current parameter */
};

/* Only the fields named for an event's type are set; the others are left
 * over from earlier events. */
struct vtp_event {
	enum vtp_type type;
	unsigned char ch;
	unsigned char end;                  /* VTP_STR_END */
	const char *data;                   /* VTP_TEXT, VTP_STR_DATA */
	size_t len;
	const struct vtp_seq *seq;          /* VTP_ESC, VTP_CSI */
	const char *raw;                    /* the input bytes accounted for */
	size_t rawlen;
};

/* A callback may call vtparse_reset on the parser it was called from. */
typedef void (*vtp_cb)(void *user, const struct vtp_event *ev);

struct vtparse {
	unsigned opts;
	unsigned char state;
	unsigned char str;                  /* kind of the string being read */
	struct vtp_seq seq;
};

void vtparse_init(struct vtparse *p, unsigned opts);
/* Back to ground, dropping any sequence in progress (options kept). */
void vtparse_reset(struct vtparse *p);
/* 1 if no sequence or string is in progress. */
int vtparse_in_ground(const struct vtparse *p);
void vtparse_feed(struct vtparse *p, const char *data, size_t n, vtp_cb cb, void *user);

#endif
