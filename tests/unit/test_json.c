/* test_json.c — unit tests for proto/util.c's buf_put_json_string: the same
 * bytes as cJSON's printer for every byte value, escapes at the ends of
 * runs, invalid UTF-8, and seeded random strings long and short. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* cJSON's print of s (NUL-terminated: cJSON strings end at the first NUL) */
static char *cjson_string(const char *s)
{
	cJSON *v = cJSON_CreateString(s);
	char *out = cJSON_PrintUnformatted(v);
	cJSON_Delete(v);
	return out;
}

static void same_as_cjson(const char *s)
{
	buf_t b = {0};
	buf_put_json_string(&b, s, strlen(s));
	char *want = cjson_string(s);
	assert_non_null(want);
	assert_string_equal(b.p, want);
	free(want);
	buf_free(&b);
}

static void test_every_byte(void **state)
{
	(void)state;
	char s[4];
	for (int c = 1; c < 256; c++) {
		s[0] = 'a';
		s[1] = (char)c;
		s[2] = 'z';
		s[3] = 0;
		same_as_cjson(s);
		s[0] = (char)c;   /* at the start and alone */
		s[1] = 0;
		same_as_cjson(s);
	}
}

static void test_known_strings(void **state)
{
	(void)state;
	same_as_cjson("");
	same_as_cjson("plain text");
	same_as_cjson("\"quoted\" \\ back\\slash\n\r\t\b\f\x01\x1f\x7f end");
	same_as_cjson("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 bad \xff\xfe \xc3");
	buf_t b = {0};
	buf_put_json_string(&b, "a\nb", 3);
	assert_string_equal(b.p, "\"a\\nb\"");
	buf_free(&b);
	/* a NUL inside the given length is escaped, not an end */
	buf_put_json_string(&b, "a\0b", 3);
	assert_string_equal(b.p, "\"a\\u0000b\"");
	buf_free(&b);
}

static void test_random_strings(void **state)
{
	(void)state;
	srand(20261124);
	for (int i = 0; i < 300; i++) {
		size_t n = (size_t)(i < 250 ? rand() % 64 : rand() % 200000);
		char *s = malloc(n + 1);
		assert_non_null(s);
		for (size_t k = 0; k < n; k++) {
			int r = rand() % 10;
			/* mostly plain text, with every kind of escape mixed in */
			s[k] = (char)(r < 7 ? 'a' + rand() % 26 : r == 7 ? '\n' : 1 + rand() % 255);
		}
		s[n] = 0;
		same_as_cjson(s);
		free(s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_byte),
		cmocka_unit_test(test_known_strings),
		cmocka_unit_test(test_random_strings),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
