/* fuzz_wire.c — owns the libFuzzer target for the request formats the
 * front doors parse from a body: multipart/form-data (multipart.c, as
 * POST /files walks its parts) and the Connect request envelope
 * (envelope.c). Input: byte 0 even → multipart: up to the first '\n' the
 * Content-Type, the rest the body; odd → an envelope body, with bytes 1-2
 * as the size limit. Every part found lies inside the body and after the
 * last, its filename is NUL-terminated, the walk ends; an envelope taken
 * is the body's own bytes and within the limit. */
#include "fake.h"
#include "door.h"

#include <string.h>

static void walk_multipart(const char *in, size_t n)
{
	const char *nl = memchr(in, '\n', n);
	size_t cl = nl ? (size_t)(nl - in) : n;
	char ct[512];
	if (cl >= sizeof ct)
		cl = sizeof ct - 1;
	memcpy(ct, in, cl);
	ct[cl] = 0;
	const char *body = nl ? nl + 1 : in + n;
	size_t blen = (size_t)(in + n - body);
	size_t off = 0;
	for (int parts = 0; parts < 10000; parts++) {
		struct mp_part part;
		char err[256];
		if (multipart_find(ct, body + off, blen - off, "file", &part, err, sizeof err) != 0) {
			FUZZ_CHECK(memchr(err, 0, sizeof err) != NULL, "error not NUL-terminated");
			return;
		}
		FUZZ_CHECK(part.data >= body + off && part.data + part.len <= body + blen,
			   "part outside the body");
		FUZZ_CHECK(memchr(part.filename, 0, sizeof part.filename) != NULL,
			   "filename not NUL-terminated");
		size_t next = (size_t)(part.data + part.len - body);
		FUZZ_CHECK(next > off || part.len == 0, "the walk went back");
		if (next <= off)
			return;   /* an empty part where it started: as POST /files, stop */
		off = next;
	}
	FUZZ_CHECK(0, "more parts than bytes");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	const char *in = (const char *)data + 1;
	size_t n = size - 1;
	if (!(data[0] & 1)) {
		walk_multipart(in, n);
		return 0;
	}
	size_t max = n >= 2 ? ((size_t)(uint8_t)in[0] << 8 | (uint8_t)in[1]) : 0;
	const char *msg = NULL;
	size_t mlen = 0;
	char why[128];
	int r = connect_unwrap(in, n, max, &msg, &mlen, why, sizeof why);
	if (r == 0)
		FUZZ_CHECK(msg == in + 5 && mlen == n - 5 && mlen <= max, "bad envelope taken");
	else
		FUZZ_CHECK(memchr(why, 0, sizeof why) != NULL && why[0], "no reason");
	return 0;
}
