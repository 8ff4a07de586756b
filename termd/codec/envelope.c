/* envelope.c — owns reading one Connect request envelope (flags byte,
 * 4-byte big-endian length, the message) from a request body: no I/O, no
 * state, so the fuzzer can drive it (tests/fuzz/fuzz_wire.c). */
#include "codec.h"

#include <stdio.h>

int connect_unwrap(const char *body, size_t len, size_t max, const char **msg, size_t *n,
		   char *why, size_t whylen)
{
	const unsigned char *u = (const unsigned char *)body;
	if (len < 5) {
		snprintf(why, whylen, "the request is not an envelope (%zu bytes)", len);
		return CONNECT_BAD;
	}
	size_t m = (size_t)u[1] << 24 | (size_t)u[2] << 16 | (size_t)u[3] << 8 | u[4];
	if (u[0] & 1) {
		snprintf(why, whylen, "compressed envelopes are not supported");
		return CONNECT_COMPRESSED;
	}
	if (u[0] != 0) {
		snprintf(why, whylen, "request envelope flags 0x%02x", u[0]);
		return CONNECT_BAD;
	}
	if (m > max) {
		snprintf(why, whylen, "message of %zu bytes is over --max-frame", m);
		return CONNECT_TOO_LARGE;
	}
	if (m != len - 5) {
		snprintf(why, whylen, "envelope says %zu bytes, %zu came", m, len - 5);
		return CONNECT_BAD;
	}
	*msg = body + 5;
	*n = m;
	return 0;
}
