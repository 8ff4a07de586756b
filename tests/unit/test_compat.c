/* test_compat.c — unit tests for proto/compat.c: the musl replacements give what glibc gives
 * (td_sigabbrev against glibc's sigabbrev_np for every signal number). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <string.h>

#include "compat.h"

static void test_sigabbrev_known(void **state)
{
	(void)state;
	assert_string_equal(td_sigabbrev(SIGINT), "INT");
	assert_string_equal(td_sigabbrev(SIGKILL), "KILL");
	assert_string_equal(td_sigabbrev(SIGTERM), "TERM");
	assert_string_equal(td_sigabbrev(SIGSEGV), "SEGV");
	assert_null(td_sigabbrev(0));
	assert_null(td_sigabbrev(-1));
	assert_null(td_sigabbrev(1000));
}

#if defined(__GLIBC__)
#if __GLIBC_PREREQ(2, 32)
#define HAVE_GLIBC_SIGABBREV 1
#endif
#endif

static void test_sigabbrev_same_as_glibc(void **state)
{
	(void)state;
#ifdef HAVE_GLIBC_SIGABBREV
	for (int sig = -2; sig <= 70; sig++) {
		const char *g = sigabbrev_np(sig), *t = td_sigabbrev(sig);
		/* glibc names no real-time signal either */
		if (!g || !t) {
			if (g || t)
				fail_msg("signal %d: glibc %s, td %s", sig, g ? g : "NULL", t ? t : "NULL");
			continue;
		}
		assert_string_equal(t, g);
	}
#else
	skip();
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sigabbrev_known),
		cmocka_unit_test(test_sigabbrev_same_as_glibc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
