/* proto/compat.h — the one place for C library differences (glibc vs musl): what one libc has and
 * another lacks gets a td_ replacement here, mapped onto the libc's name only where it is missing. */
#ifndef TD_COMPAT_H
#define TD_COMPAT_H

#include <string.h>

/* sigabbrev_np ("INT" for SIGINT) is glibc 2.32+; musl has none. */
const char *td_sigabbrev(int sig);
#if defined(__GLIBC__)
#if !__GLIBC_PREREQ(2, 32)
#define sigabbrev_np td_sigabbrev
#endif
#else
#define sigabbrev_np td_sigabbrev
#endif

#endif
