/* fuzz_vtparse.c — owns the libFuzzer target for the tokenizer
 * (proto/vtparse.c). Input: byte 0 bits 0-2 = k, bits 3-4 = options
 * (VTP_C0_IN_TEXT, VTP_BEL_ENDS_ALL); then k bytes of piece sizes (1-256,
 * used in turn); then the stream. Fed in one piece and in those pieces, the
 * events must be the same (adjacent text runs and string pieces merged,
 * PENDING left out); in both, the raw bytes of the events must add up to
 * the input exactly, and no event may break the bounds or the grammar:
 * parameters, intermediates and body within VTP_MAX_*, text never empty and
 * without ESC (nor C0 unless VTP_C0_IN_TEXT), string pieces only inside a
 * string, every string started before it ends, controls below 0x20. */
#include "fake.h"
#include "vtparse.h"

#include <string.h>

struct rec {
	buf_t ev;               /* the events, serialized */
	buf_t raw;              /* their raw bytes */
	int last;               /* last event type serialized, -1 none */
	size_t last_len;        /* its length field's offset, for merging */
	unsigned opts;
	int in_str;
	const char *feed;       /* the current piece */
	size_t feed_n;
};

static void put_u32(buf_t *b, uint32_t v)
{
	buf_append(b, (const char *)&v, sizeof v);
}

static void in_feed(const struct rec *r, const char *p, size_t n, const char *what)
{
	FUZZ_CHECK(n == 0 || (p >= r->feed && p + n <= r->feed + r->feed_n),
		   "%s points outside the piece fed", what);
}

static void rec_cb(void *user, const struct vtp_event *ev)
{
	struct rec *r = user;
	const struct vtp_seq *q = ev->seq;

	in_feed(r, ev->raw, ev->rawlen, "raw");
	buf_append(&r->raw, ev->raw, ev->rawlen);
	switch (ev->type) {
	case VTP_PENDING:
		FUZZ_CHECK(ev->rawlen > 0, "empty PENDING");
		return;
	case VTP_TEXT:
	case VTP_STR_DATA:
		FUZZ_CHECK(ev->len > 0, "empty text or string piece");
		in_feed(r, ev->data, ev->len, "data");
		FUZZ_CHECK(ev->len <= ev->rawlen, "data longer than its raw bytes");
		FUZZ_CHECK((ev->type == VTP_STR_DATA) == r->in_str, "text inside a string or data outside");
		for (size_t i = 0; i < ev->len; i++) {
			unsigned char c = (unsigned char)ev->data[i];
			if (ev->type == VTP_TEXT)
				FUZZ_CHECK(c != 0x1b && (c >= 0x20 || (r->opts & VTP_C0_IN_TEXT)),
					   "byte 0x%02x in a text run", c);
			else
				FUZZ_CHECK(c != 0x1b && c != 0x18 && c != 0x1a, "byte 0x%02x in a string", c);
		}
		if (r->last == (int)ev->type) {
			buf_append(&r->ev, ev->data, ev->len);
			uint32_t len;
			memcpy(&len, r->ev.p + r->last_len, sizeof len);
			len += (uint32_t)ev->len;
			memcpy(r->ev.p + r->last_len, &len, sizeof len);
			return;
		}
		buf_putc(&r->ev, (char)ev->type);
		r->last_len = r->ev.len;
		put_u32(&r->ev, (uint32_t)ev->len);
		buf_append(&r->ev, ev->data, ev->len);
		break;
	case VTP_CTRL:
	case VTP_CANCEL:
		FUZZ_CHECK(!r->in_str, "control or cancel inside a string");
		if (ev->type == VTP_CTRL)
			FUZZ_CHECK(ev->ch < 0x20 && ev->ch != 0x1b, "control 0x%02x", ev->ch);
		else
			FUZZ_CHECK(ev->ch == 0x1b || ev->ch == 0x18 || ev->ch == 0x1a || ev->ch >= 0x80,
				   "cancelled by 0x%02x", ev->ch);
		buf_putc(&r->ev, (char)ev->type);
		buf_putc(&r->ev, (char)ev->ch);
		break;
	case VTP_ESC:
	case VTP_CSI:
		FUZZ_CHECK(!r->in_str && q, "sequence inside a string");
		FUZZ_CHECK(q->final >= 0x30 && q->final <= 0x7e && q->final == ev->ch, "final 0x%02x", q->final);
		FUZZ_CHECK(q->ninter <= VTP_MAX_INTER, "%d intermediates", q->ninter);
		FUZZ_CHECK(q->bodylen <= VTP_BODY_MAX, "body of %zu", q->bodylen);
		FUZZ_CHECK(q->nparam >= 0 && q->nparam <= VTP_MAX_PARAMS + 1, "%d params", q->nparam);
		FUZZ_CHECK(!(q->flags & VTP_TOO_MANY) == (q->nparam <= VTP_MAX_PARAMS), "TOO_MANY flag");
		for (int i = 0; i < VTP_MAX_PARAMS; i++)
			FUZZ_CHECK(q->param[i] <= VTP_PARAM_MAX || ev->type == VTP_ESC, "param %u", q->param[i]);
		buf_putc(&r->ev, (char)ev->type);
		buf_putc(&r->ev, (char)q->final);
		buf_putc(&r->ev, (char)q->flags);
		buf_putc(&r->ev, (char)q->ninter);
		buf_append(&r->ev, (const char *)q->inter, q->ninter);
		if (ev->type == VTP_CSI) {
			buf_putc(&r->ev, (char)q->priv);
			put_u32(&r->ev, (uint32_t)q->nparam);
			buf_append(&r->ev, (const char *)q->param, sizeof q->param);
			put_u32(&r->ev, (uint32_t)q->bodylen);
			buf_append(&r->ev, q->body, q->bodylen);
		}
		break;
	case VTP_STR_START:
		FUZZ_CHECK(!r->in_str, "a string starts inside a string");
		FUZZ_CHECK(strchr("]PX^_", ev->ch) && ev->ch, "string kind 0x%02x", ev->ch);
		r->in_str = 1;
		buf_putc(&r->ev, (char)ev->type);
		buf_putc(&r->ev, (char)ev->ch);
		break;
	case VTP_STR_END:
		FUZZ_CHECK(r->in_str, "a string ends that never started");
		FUZZ_CHECK(ev->end == 0x07 || ev->end == '\\' || ev->end == 0x18 || ev->end == 0x1a ||
			   ev->end == 0x1b, "string ended by 0x%02x", ev->end);
		FUZZ_CHECK(ev->end != 0x07 || ev->ch == ']' || (r->opts & VTP_BEL_ENDS_ALL),
			   "BEL ended a string of kind %c", ev->ch);
		r->in_str = 0;
		buf_putc(&r->ev, (char)ev->type);
		buf_putc(&r->ev, (char)ev->ch);
		buf_putc(&r->ev, (char)ev->end);
		break;
	}
	r->last = (int)ev->type;
}

static void feed(struct vtparse *p, struct rec *r, const char *s, size_t n)
{
	r->feed = s;
	r->feed_n = n;
	vtparse_feed(p, s, n, rec_cb, r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t k = data[0] & 7;
	unsigned opts = (data[0] >> 3) & 3;
	if (size < 1 + k)
		return 0;
	const uint8_t *sizes = data + 1;
	const char *in = (const char *)data + 1 + k;
	size_t n = size - 1 - k;

	struct vtparse a, b;
	struct rec whole = {.last = -1, .opts = opts}, split = {.last = -1, .opts = opts};
	vtparse_init(&a, opts);
	vtparse_init(&b, opts);
	feed(&a, &whole, in, n);
	for (size_t off = 0, j = 0; off < n; j++) {
		size_t piece = k ? (size_t)sizes[j % k] + 1 : 1;
		if (piece > n - off)
			piece = n - off;
		feed(&b, &split, in + off, piece);
		off += piece;
	}
	FUZZ_CHECK(whole.raw.len == n && (n == 0 || memcmp(whole.raw.p, in, n) == 0),
		   "raw bytes whole (%zu) are not the input (%zu)", whole.raw.len, n);
	FUZZ_CHECK(split.raw.len == n && (n == 0 || memcmp(split.raw.p, in, n) == 0),
		   "raw bytes in pieces (%zu) are not the input (%zu)", split.raw.len, n);
	FUZZ_CHECK(whole.ev.len == split.ev.len &&
		   (whole.ev.len == 0 || memcmp(whole.ev.p, split.ev.p, whole.ev.len) == 0),
		   "events differ: %zu bytes whole, %zu in pieces", whole.ev.len, split.ev.len);
	FUZZ_CHECK(vtparse_in_ground(&a) == vtparse_in_ground(&b), "ends in different states");
	buf_free(&whole.ev);
	buf_free(&whole.raw);
	buf_free(&split.ev);
	buf_free(&split.raw);
	return 0;
}
