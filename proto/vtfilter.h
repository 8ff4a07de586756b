/* vtfilter.h — the filter in front of libvterm 0.1.4 (vtfilter.c), used by
 * termd's screens and by od-attach's. */
#ifndef TERMD_VTFILTER_H
#define TERMD_VTFILTER_H

#include <stddef.h>

#include "util.h"
#include "vtparse.h"

struct vtfilter {
	struct vtparse vp;
	int c2;                   /* a 0xC2 held: U+0080-U+009F would follow */
	buf_t *out;               /* during vtfilter_feed */
};

void vtfilter_reset(struct vtfilter *f);
/* Append to out the part of data that libvterm may be given. */
void vtfilter_feed(struct vtfilter *f, const char *data, size_t n, buf_t *out);
/* 1 when the filter would pass data on as it is and stay as it is (text,
 * no ESC, no 0xC2, nothing held): it may then go to libvterm without the
 * copy vtfilter_feed makes. */
int vtfilter_clean(const struct vtfilter *f, const char *data, size_t n);

#endif
