/* vtfilter.h — the filter in front of libvterm 0.1.4 (vtfilter.c), used by
 * termd's screens and by od-attach's. */
#ifndef TERMD_VTFILTER_H
#define TERMD_VTFILTER_H

#include <stddef.h>

#include "util.h"

struct vtfilter {
	int state, bad, nsep, ndig, ninter;
	size_t seqlen;
	unsigned char seq[64];    /* the escape sequence being read */
};

void vtfilter_reset(struct vtfilter *f);
/* Append to out the part of data that libvterm may be given. */
void vtfilter_feed(struct vtfilter *f, const char *data, size_t n, buf_t *out);

#endif
