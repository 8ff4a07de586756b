/* fuzz_wire.c — owns the libFuzzer target for the request formats the
 * front doors parse from a body: multipart/form-data (multipart.c, as
 * POST /files walks its parts), the Connect request envelope
 * (envelope.c) and an upload's X-Termd-Metadata (meta.c). Input:
 * byte 0 even → multipart: up to the first '\n' the Content-Type, the
 * rest the body; 3 modulo 4 → the rest is X-Termd-Metadata's value; else
 * (odd) → an envelope body, with bytes 1-2 as the size limit. Every part
 * found lies inside the body and after the last, its filename is
 * NUL-terminated, the walk ends; an envelope taken is the body's own bytes
 * and within the limit; metadata taken is what envd would store (keys
 * lowercase, 1-246 bytes, keys and values printable ASCII, 4096 bytes in
 * all), else the reason says "invalid metadata". */
#include "fake.h"
#include "door.h"
#include "envd.h"

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

static int printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			return 0;
	return 1;
}

static void parse_metadata(const char *in, size_t n)
{
	buf_t err = {0};
	cJSON *m = envd_meta_parse(in, n, &err);
	if (!m) {
		FUZZ_CHECK(err.p && strncmp(err.p, "invalid metadata: ", 18) == 0, "no reason");
		buf_free(&err);
		return;
	}
	FUZZ_CHECK(err.len == 0, "a reason for metadata taken");
	size_t total = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, m) {
		size_t kl = strlen(it->string);
		FUZZ_CHECK(kl >= 1 && kl <= 246 && printable(it->string), "bad key taken");
		FUZZ_CHECK(cJSON_IsString(it) && printable(it->valuestring), "bad value taken");
		for (const char *k = it->string; *k; k++)
			FUZZ_CHECK(*k < 'A' || *k > 'Z', "key not lowercased");
		total += 9 + kl + strlen(it->valuestring);
	}
	FUZZ_CHECK(total <= 4096, "over envd's total taken");
	cJSON_Delete(m);
	buf_free(&err);
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
	if ((data[0] & 3) == 3) {
		parse_metadata(in, n);
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
