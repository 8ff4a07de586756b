/* cast.h — asciicast v2, the pure parts termd (record.c) and od-attach
 * (--replay) share: bytes → a JSON string body (UTF-8 kept whole across
 * reads, invalid bytes as U+FFFD), one event line written, and one line
 * read back (header or event), with clear errors for anything malformed. */
#ifndef TERMD_CAST_H
#define TERMD_CAST_H

#include <stddef.h>
#include "util.h"

/* An incomplete UTF-8 sequence held back from the end of one read until
 * the next (at most 3 bytes). */
struct cast_utf8 {
	unsigned char hold[4];
	size_t n;
};

/* Append p[0..n) to out as the inside of a JSON string (no quotes):
 * control bytes, '"' and '\\' escaped, invalid UTF-8 replaced by U+FFFD
 * (one per maximal invalid subpart, as Python's "replace" does). An
 * incomplete sequence at the end is kept in h for the next call, unless
 * final (then it becomes U+FFFD). */
void cast_json_bytes(buf_t *out, struct cast_utf8 *h, const char *p, size_t n, int final);

/* An event line "[t, "code", "data"]\n" is cast_event_begin, the data as a
 * JSON string body (cast_json_bytes), then cast_event_end. */
void cast_event_begin(buf_t *out, double t, const char *code);
void cast_event_end(buf_t *out);

/* What a recording's first line says. */
struct cast_header {
	int width, height;
	double timestamp;          /* 0 if absent */
	char title[256];           /* "" if absent */
};
/* Parse the header line: 0, or -1 and why in err. */
int cast_parse_header(const char *line, size_t n, struct cast_header *h, char *err, size_t errlen);

/* One event: time, code (up to 7 bytes), data decoded to bytes (owned,
 * NUL-terminated, may contain NULs). */
struct cast_event {
	double t;
	char code[8];
	char *data;
	size_t len;
};
/* Parse one event line (no newline): 0, or -1 and why (ev left empty).
 * A blank line is -1 with err "" . */
int cast_parse_event(const char *line, size_t n, struct cast_event *ev, char *err, size_t errlen);
void cast_event_free(struct cast_event *ev);

/* Largest time an event may carry (seconds), and terminal sizes. */
#define CAST_MAX_TIME  1e9
#define CAST_MAX_DIM   10000

#endif
