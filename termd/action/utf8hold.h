/* utf8hold.h — the first bytes (up to 3) of a UTF-8 character split
 * between two reads of a stream, held back until its rest comes, and
 * across an upgrade in place: a pipe session's session.output events
 * (sessionctl.c: bytes as they are) and OpenHands V1's BashOutput pieces
 * (door/ohv1/bash.c: valid UTF-8, U+FFFD for a bad byte). */
#ifndef TERMD_UTF8HOLD_H
#define TERMD_UTF8HOLD_H

#include "util.h"

#include <cJSON.h>
#include <stddef.h>

struct utf8hold {
	size_t n;
	char b[3];
};

/* h's held bytes then data[0..n) onto out as they are, but a character's
 * first bytes at the end held back in h when all before them is UTF-8 text
 * (utf8_text; bytes that are not text go whole, base64 anyway) */
void utf8hold_raw(struct utf8hold *h, const char *data, size_t n, buf_t *out);

/* h's held bytes then data[0..n) onto out as valid UTF-8, each invalid
 * byte U+FFFD (as Python's errors="replace"; a NUL stays); a sequence cut
 * short at the end is held back in h unless last */
void utf8hold_text(struct utf8hold *h, const char *data, size_t n, buf_t *out, int last);

/* h's held bytes in o as a base64 string under key; back (none unless it
 * is base64 of at most 3 bytes) */
void utf8hold_save(const struct utf8hold *h, cJSON *o, const char *key);
void utf8hold_load(struct utf8hold *h, const cJSON *o, const char *key);

#endif
