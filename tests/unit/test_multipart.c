/* test_multipart.c — multipart.c (finding a form-data field) and zip.c
 * (writer → reader round trips, stored and deflated, hostile archives). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "door.h"

static void test_finds_file_field(void **state)
{
	(void)state;
	const char body[] =
		"--XyZ\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nvalue\r\n"
		"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a \\\"q\\\".zip\"\r\n"
		"Content-Type: application/zip\r\n\r\nPK\x03\x04\r\n--Xy not the end\r\n--XyZ--\r\n";
	struct mp_part p;
	char err[256];
	assert_int_equal(multipart_find("multipart/form-data; boundary=XyZ", body, sizeof body - 1,
					"file", &p, err, sizeof err), 0);
	assert_true(p.has_filename);
	assert_string_equal(p.filename, "a \"q\".zip");
	assert_int_equal(p.len, 22);
	assert_memory_equal(p.data, "PK\x03\x04\r\n--Xy not the end", 22);
	assert_int_equal(multipart_find("multipart/form-data; boundary=\"XyZ\"", body, sizeof body - 1,
					"other", &p, err, sizeof err), 0);
	assert_false(p.has_filename);
	assert_int_equal(p.len, 5);
}

static void test_bad_bodies(void **state)
{
	(void)state;
	struct mp_part p;
	char err[256];
	const char body[] = "--B\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nno end";
	assert_int_equal(multipart_find("application/json", body, sizeof body - 1, "file", &p, err,
					sizeof err), -1);
	assert_int_equal(multipart_find("multipart/form-data", body, sizeof body - 1, "file", &p, err,
					sizeof err), -1);
	assert_int_equal(multipart_find("multipart/form-data; boundary=B", body, sizeof body - 1,
					"file", &p, err, sizeof err), -1);
	assert_non_null(strstr(err, "closing boundary"));
	assert_int_equal(multipart_find("multipart/form-data; boundary=Q", body, sizeof body - 1,
					"file", &p, err, sizeof err), -1);
	assert_int_equal(multipart_find("multipart/form-data; boundary=B", "", 0, "file", &p, err,
					sizeof err), -1);
	const char two[] = "--B\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1\r\n--B--\r\n";
	assert_int_equal(multipart_find("multipart/form-data; boundary=B", two, sizeof two - 1,
					"file", &p, err, sizeof err), -1);
	assert_non_null(strstr(err, "no field 'file'"));
}

struct got {
	int n;
	char names[8][64];
	size_t lens[8];
	unsigned char first[8];
};

static int collect(void *arg, const char *name, const unsigned char *data, size_t len,
		   int is_dir, char *err, size_t errlen)
{
	(void)is_dir;
	(void)err;
	(void)errlen;
	struct got *g = arg;
	snprintf(g->names[g->n], sizeof g->names[0], "%s", name);
	g->lens[g->n] = len;
	g->first[g->n] = len ? data[0] : 0;
	g->n++;
	return 0;
}

static void test_zip_round_trip(void **state)
{
	(void)state;
	struct zipw zw;
	memset(&zw, 0, sizeof zw);
	char big[100000];
	memset(big, 'a', sizeof big);
	unsigned char rnd[300];
	for (size_t i = 0; i < sizeof rnd; i++)
		rnd[i] = (unsigned char)(i * 7919u >> 3);
	zipw_add(&zw, "big.txt", big, sizeof big, 1700000000);   /* deflated */
	zipw_add(&zw, "dir/rnd.bin", rnd, sizeof rnd, 0);          /* likely stored */
	zipw_add(&zw, "empty", "", 0, 1700000000);
	buf_t z;
	zipw_finish(&zw, &z);
	assert_true(z.len < sizeof big / 10);
	struct got g;
	memset(&g, 0, sizeof g);
	char err[256];
	assert_int_equal(zip_read(z.p, z.len, collect, &g, err, sizeof err), 0);
	assert_int_equal(g.n, 3);
	assert_string_equal(g.names[0], "big.txt");
	assert_int_equal(g.lens[0], sizeof big);
	assert_int_equal(g.first[0], 'a');
	assert_string_equal(g.names[1], "dir/rnd.bin");
	assert_int_equal(g.lens[1], sizeof rnd);
	assert_string_equal(g.names[2], "empty");
	assert_int_equal(g.lens[2], 0);
	/* a flipped byte in the data: CRC or inflate error, never a crash */
	for (size_t i = 0; i < z.len; i += 7) {
		char *c = xmalloc(z.len);
		memcpy(c, z.p, z.len);
		c[i] ^= 0x55;
		memset(&g, 0, sizeof g);
		(void)zip_read(c, z.len, collect, &g, err, sizeof err);
		assert_true(g.n <= 3);
		free(c);
	}
	/* truncated at every length */
	for (size_t l = 0; l < z.len; l += 13) {
		memset(&g, 0, sizeof g);
		(void)zip_read(z.p, l, collect, &g, err, sizeof err);
	}
	assert_int_equal(zip_read("PK", 2, collect, &g, err, sizeof err), -1);
	assert_string_equal(err, "not a zip file");
	buf_free(&z);
}

static void test_zip_skips_unsafe_names(void **state)
{
	(void)state;
	struct zipw zw;
	memset(&zw, 0, sizeof zw);
	zipw_add(&zw, "../up.txt", "x", 1, 0);
	zipw_add(&zw, "/abs.txt", "x", 1, 0);
	zipw_add(&zw, "a/../../b.txt", "x", 1, 0);
	zipw_add(&zw, "ok..txt", "x", 1, 0);
	buf_t z;
	zipw_finish(&zw, &z);
	struct got g;
	memset(&g, 0, sizeof g);
	char err[256];
	assert_int_equal(zip_read(z.p, z.len, collect, &g, err, sizeof err), 0);
	assert_int_equal(g.n, 1);
	assert_string_equal(g.names[0], "ok..txt");
	buf_free(&z);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_finds_file_field),
		cmocka_unit_test(test_bad_bodies),
		cmocka_unit_test(test_zip_round_trip),
		cmocka_unit_test(test_zip_skips_unsafe_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
