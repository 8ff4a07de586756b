/* test_files.c — unit tests for the leaf code of termd/files.c: SHA-256
 * against the FIPS 180-2 / NIST vectors (empty, "abc", the two-block
 * message, a million 'a's, lengths around the padding boundary), base64
 * against RFC 4648 §10 plus round trips and malformed input, and the UTF-8
 * text check (what `read` calls binary). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "termd.h"

/* files.c's helpers (not in termd.h: only the actions are public) */
void files_sha256_hex(const void *data, size_t n, char hex[65]);
void files_b64_encode(const void *data, size_t n, buf_t *out);
int files_b64_decode(const char *s, size_t n, buf_t *out);
int files_utf8_text(const char *s, size_t n, size_t *bad);

static void check_sha(const void *data, size_t n, const char *want)
{
	char hex[65];
	files_sha256_hex(data, n, hex);
	assert_string_equal(hex, want);
}

static void test_sha256_vectors(void **state)
{
	(void)state;
	check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	check_sha(two, strlen(two), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	size_t n = 1000000;
	char *a = malloc(n);
	assert_non_null(a);
	memset(a, 'a', n);
	check_sha(a, n, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	free(a);
}

/* Messages of 'x's whose padding lands on each side of the 56-byte
 * boundary and of block ends (values from Python's hashlib). */
static void test_sha256_padding_boundaries(void **state)
{
	(void)state;
	static const struct {
		size_t n;
		const char *hex;
	} v[] = {
		{55, "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072"},
		{56, "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e"},
		{57, "ae14a2563ccf969d99aca69ce6bb74981f734bbf9f655f73b8f06db68cab5217"},
		{63, "75220b47218278e656f2013bb8f0c455a25eaf01e86c64924e9d48d89776d6f2"},
		{64, "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c"},
		{65, "9537c5fdf120482f7d58d25e9ed583f52c02b4e304ea814db1633ad565aed7e9"},
		{119, "000b48d4edf0fa7bee3c6236ecd2785baa5db4eeb8bb54341b029e0d9fa5fb0c"},
		{120, "13f05a0b594787f5ecd315edc96141bd3243203d1b7d4f0836f37308b276ba98"},
		{128, "24da1b81d0b16df6428eee73c69fcb2a93c76bc6df706f0c6670fe6bfe800464"},
	};
	char buf[130];
	memset(buf, 'x', sizeof buf);
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
		check_sha(buf, v[i].n, v[i].hex);
}

static void expect_b64(const char *in, const char *want)
{
	buf_t out = {0};
	files_b64_encode(in, strlen(in), &out);
	assert_string_equal(out.p ? out.p : "", want);
	buf_t back = {0};
	assert_int_equal(files_b64_decode(want, strlen(want), &back), 0);
	assert_int_equal(back.len, strlen(in));
	assert_memory_equal(back.p ? back.p : "", in, strlen(in));
	buf_free(&out);
	buf_free(&back);
}

static void test_base64_rfc4648(void **state)
{
	(void)state;
	expect_b64("", "");
	expect_b64("f", "Zg==");
	expect_b64("fo", "Zm8=");
	expect_b64("foo", "Zm9v");
	expect_b64("foob", "Zm9vYg==");
	expect_b64("fooba", "Zm9vYmE=");
	expect_b64("foobar", "Zm9vYmFy");
}

static void test_base64_round_trip_all_bytes(void **state)
{
	(void)state;
	unsigned char data[300];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (unsigned char)(i * 37 + 11);
	for (size_t n = 0; n <= sizeof data; n++) {
		buf_t enc = {0}, dec = {0};
		files_b64_encode(data, n, &enc);
		assert_int_equal(enc.len, (n + 2) / 3 * 4);
		assert_int_equal(files_b64_decode(enc.p ? enc.p : "", enc.len, &dec), 0);
		assert_int_equal(dec.len, n);
		if (n)
			assert_memory_equal(dec.p, data, n);
		buf_free(&enc);
		buf_free(&dec);
	}
}

static int decodes(const char *s, const char *want)
{
	buf_t out = {0};
	int rc = files_b64_decode(s, strlen(s), &out);
	if (rc == 0 && want) {
		assert_int_equal(out.len, strlen(want));
		assert_memory_equal(out.p, want, out.len);
	}
	buf_free(&out);
	return rc;
}

static void test_base64_lenient_and_strict(void **state)
{
	(void)state;
	/* whitespace (MIME line breaks) and missing padding are fine */
	assert_int_equal(decodes("Zm9v\nYmFy\r\n", "foobar"), 0);
	assert_int_equal(decodes("Zg", "f"), 0);
	assert_int_equal(decodes("Zm8", "fo"), 0);
	assert_int_equal(decodes(" Zm 9v ", "foo"), 0);
	/* not base64 */
	assert_int_equal(decodes("Z", NULL), -1);
	assert_int_equal(decodes("Zg=", NULL), -1);
	assert_int_equal(decodes("Zm9v=", NULL), -1);
	assert_int_equal(decodes("Zg===", NULL), -1);
	assert_int_equal(decodes("Zg==Zg==", NULL), -1);
	assert_int_equal(decodes("Zm!v", NULL), -1);
	assert_int_equal(decodes("Zm9v-_", NULL), -1);
}

static void test_utf8_text(void **state)
{
	(void)state;
	size_t bad = 99;
	const char *ok = "plain ascii\r\n\tcaf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x8e\x89\n";
	assert_true(files_utf8_text(ok, strlen(ok), &bad));
	assert_true(files_utf8_text("", 0, &bad));
	struct {
		const char *s;
		size_t n, at;
	} no[] = {
		{"ab\0cd", 5, 2},                 /* NUL */
		{"caf\xe9!", 5, 3},               /* latin-1 */
		{"x\xc3", 2, 1},                  /* cut short */
		{"\xc0\xaf", 2, 0},               /* overlong '/' */
		{"\xe0\x80\xaf", 3, 0},           /* overlong, 3 bytes */
		{"ok\xed\xa0\x80", 5, 2},         /* surrogate */
		{"\xf4\x90\x80\x80", 4, 0},       /* past U+10FFFF */
		{"\xff", 1, 0},
		{"\xe6\x97", 2, 0},               /* truncated 3-byte */
		{"\xe6\x97x", 3, 0},              /* bad continuation */
	};
	for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
		bad = 99;
		assert_false(files_utf8_text(no[i].s, no[i].n, &bad));
		assert_int_equal(bad, no[i].at);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sha256_vectors),
		cmocka_unit_test(test_sha256_padding_boundaries),
		cmocka_unit_test(test_base64_rfc4648),
		cmocka_unit_test(test_base64_round_trip_all_bytes),
		cmocka_unit_test(test_base64_lenient_and_strict),
		cmocka_unit_test(test_utf8_text),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
