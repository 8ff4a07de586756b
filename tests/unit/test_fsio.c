/* test_fsio.c — unit tests for termd/fsio.c, the file actions' file-system
 * layer, on temp dirs: path resolution, loading (size cap, folders, FIFOs),
 * hashing files, mkdir -p, write targets (symlinks, folders, paths through
 * a file), atomic writes (mode, no temp file left behind), line offsets;
 * SHA-256 against the FIPS 180-2 / NIST vectors (empty, "abc", the
 * two-block message, a million 'a's, lengths around the padding boundary),
 * base64 against RFC 4648 §10 plus round trips and malformed input; and
 * util.c's UTF-8 text check (what `read` calls binary). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsio.h"

static void check_sha(const void *data, size_t n, const char *want)
{
	char hex[65];
	fsio_sha256_hex(data, n, hex);
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
	fsio_b64_encode(in, strlen(in), &out);
	assert_string_equal(out.p ? out.p : "", want);
	buf_t back = {0};
	assert_int_equal(fsio_b64_decode(want, strlen(want), &back), 0);
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
		fsio_b64_encode(data, n, &enc);
		assert_int_equal(enc.len, (n + 2) / 3 * 4);
		assert_int_equal(fsio_b64_decode(enc.p ? enc.p : "", enc.len, &dec), 0);
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
	int rc = fsio_b64_decode(s, strlen(s), &out);
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
	assert_true(utf8_text(ok, strlen(ok), &bad));
	assert_true(utf8_text("", 0, &bad));
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
		assert_false(utf8_text(no[i].s, no[i].n, &bad));
		assert_int_equal(bad, no[i].at);
	}
}

/* Round trips long enough to cross the encoder's and the decoder's
 * internal pieces, with MIME line breaks in the decoder's input. */
static void test_base64_long_and_wrapped(void **state)
{
	(void)state;
	size_t n = 200000;
	unsigned char *data = malloc(n);
	assert_non_null(data);
	for (size_t i = 0; i < n; i++)
		data[i] = (unsigned char)(i * 131 + (i >> 8));
	buf_t enc = {0}, wrapped = {0}, dec = {0};
	fsio_b64_encode(data, n, &enc);
	assert_int_equal(enc.len, (n + 2) / 3 * 4);
	assert_int_equal(strlen(enc.p), enc.len);
	for (size_t i = 0; i < enc.len; i += 76) {
		buf_append(&wrapped, enc.p + i, enc.len - i < 76 ? enc.len - i : 76);
		buf_puts(&wrapped, "\r\n");
	}
	assert_int_equal(fsio_b64_decode(wrapped.p, wrapped.len, &dec), 0);
	assert_int_equal(dec.len, n);
	assert_memory_equal(dec.p, data, n);
	/* appends to what out holds */
	buf_reset(&dec);
	buf_puts(&dec, "head:");
	assert_int_equal(fsio_b64_decode("Zm9v", 4, &dec), 0);
	assert_string_equal(dec.p, "head:foo");
	buf_free(&enc);
	buf_free(&wrapped);
	buf_free(&dec);
	free(data);
}

static void test_utf8_sanitize(void **state)
{
	(void)state;
	buf_t b = {0};
	buf_put_utf8(&b, "a\xff" "b\0c\xc3\xa9", 7);
	assert_string_equal(b.p, "a\xef\xbf\xbd" "b\xef\xbf\xbd" "c\xc3\xa9");
	buf_free(&b);
}

static void test_text_sanitize(void **state)
{
	(void)state;
	buf_t b = {0};
	/* ESC, BEL, DEL, a C1 CSI (U+009B), a bad byte, a cut character, é kept */
	buf_put_text(&b, "\x1b[2J\x07x\x7f\xc2\x9b\xff\xc3\xa9\xc3", 13);
	assert_string_equal(b.p, "?[2J?x??\xef\xbf\xbd\xc3\xa9\xef\xbf\xbd");
	buf_free(&b);
}

/* ---- the file system, in a temp dir per test ---- */

struct tmp {
	char dir[64];
};

static int tmp_setup(void **state)
{
	struct tmp *t = calloc(1, sizeof *t);
	const char *base = getenv("TMPDIR");
	snprintf(t->dir, sizeof t->dir, "%s/fsio-XXXXXX", base && strlen(base) < 40 ? base : "/tmp");
	if (!mkdtemp(t->dir))
		return -1;
	*state = t;
	return 0;
}

static int tmp_teardown(void **state)
{
	struct tmp *t = *state;
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->dir);
	int rc = system(cmd);
	free(t);
	return rc == 0 ? 0 : -1;
}

/* dir/name, in a static buffer per call site slot */
static const char *at(const struct tmp *t, const char *name)
{
	static char bufs[4][256];
	static int k;
	char *b = bufs[k++ % 4];
	snprintf(b, sizeof bufs[0], "%s/%s", t->dir, name);
	return b;
}

static void put_file(const char *path, const char *data, mode_t mode)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, strlen(data), f), strlen(data));
	assert_int_equal(fclose(f), 0);
	assert_int_equal(chmod(path, mode), 0);
}

static int contains(const buf_t *b, const char *s)
{
	return b->p && strstr(b->p, s) != NULL;
}

static void test_resolve(void **state)
{
	(void)state;
	static const struct {
		const char *base, *path, *want;
	} v[] = {
		{"/home/u", "a/b.txt", "/home/u/a/b.txt"},
		{"/home/u", "/etc/x", "/etc/x"},
		{"/home/u", "../v/./f", "/home/v/f"},
		{"/home/u", "../../../..", "/"},
		{"/home/u", "a//b/", "/home/u/a/b"},
		{"/", ".", "/"},
		{"/home/u", "/a/../b/..//c/.", "/c"},
	};
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		char *r = fsio_resolve(v[i].base, v[i].path);
		assert_string_equal(r, v[i].want);
		free(r);
	}
	assert_null(fsio_resolve("/home/u", ""));
	assert_true(fsio_names_folder("a/"));
	assert_true(fsio_names_folder("/tmp/"));
	assert_false(fsio_names_folder("/"));
	assert_false(fsio_names_folder("a"));
}

static void test_status_codes(void **state)
{
	(void)state;
	assert_int_equal(fsio_td_err(FSIO_NOT_FOUND), TD_ERR_NOT_FOUND);
	assert_int_equal(fsio_td_err(FSIO_IS_DIRECTORY), TD_ERR_IS_DIRECTORY);
	assert_int_equal(fsio_td_err(FSIO_TOO_LARGE), TD_ERR_TOO_LARGE);
	assert_int_equal(fsio_td_err(FSIO_NOT_TEXT), TD_ERR_BINARY_FILE);
	assert_int_equal(fsio_td_err(FSIO_IO), TD_ERR_IO_ERROR);
	buf_t m = {0};
	assert_int_equal(fsio_errno(&m, ENOENT, "cannot open", "/x"), FSIO_NOT_FOUND);
	assert_string_equal(m.p, "cannot open /x: No such file or directory");
	assert_int_equal(fsio_errno(&m, ENOTDIR, "w", "/x"), FSIO_NOT_FOUND);
	assert_int_equal(fsio_errno(&m, EISDIR, "w", "/x"), FSIO_IS_DIRECTORY);
	assert_int_equal(fsio_errno(&m, EFBIG, "w", "/x"), FSIO_TOO_LARGE);
	assert_int_equal(fsio_errno(&m, EACCES, "w", "/x\xff"), FSIO_IO);
	assert_string_equal(m.p, "w /x\xef\xbf\xbd: Permission denied");   /* replaced, not appended */
	assert_int_equal(fsio_too_large(&m, "/f", "the file", 3u << 20), FSIO_TOO_LARGE);
	assert_string_equal(m.p, "/f is too large: the file is over the limit of 3 MiB");
	buf_free(&m);
}

static void test_load(void **state)
{
	struct tmp *t = *state;
	buf_t out = {0}, msg = {0};
	struct stat st;
	put_file(at(t, "f.txt"), "hello\nworld\n", 0644);
	assert_int_equal(fsio_load(at(t, "f.txt"), 100, &out, &st, &msg), FSIO_OK);
	assert_string_equal(out.p, "hello\nworld\n");
	assert_int_equal(out.len, 12);
	assert_int_equal(st.st_size, 12);
	/* the cap */
	buf_reset(&out);
	assert_int_equal(fsio_load(at(t, "f.txt"), 11, &out, &st, &msg), FSIO_TOO_LARGE);
	assert_true(contains(&msg, "is too large"));
	assert_int_equal(fsio_load(at(t, "f.txt"), 12, &out, &st, &msg), FSIO_OK);
	/* not there, a folder, a path through a file, a FIFO (never blocks) */
	assert_int_equal(fsio_load(at(t, "none"), 100, &out, &st, &msg), FSIO_NOT_FOUND);
	assert_true(contains(&msg, "cannot open"));
	assert_int_equal(fsio_load(t->dir, 100, &out, &st, &msg), FSIO_IS_DIRECTORY);
	assert_true(contains(&msg, " is a directory"));
	assert_int_equal(fsio_load(at(t, "f.txt/x"), 100, &out, &st, &msg), FSIO_NOT_FOUND);
	assert_int_equal(mkfifo(at(t, "fifo"), 0600), 0);
	assert_int_equal(fsio_load(at(t, "fifo"), 100, &out, &st, &msg), FSIO_IO);
	assert_true(contains(&msg, " is not a regular file"));
	/* empty file */
	put_file(at(t, "empty"), "", 0644);
	buf_free(&out);
	assert_int_equal(fsio_load(at(t, "empty"), 100, &out, &st, &msg), FSIO_OK);
	assert_int_equal(out.len, 0);
	buf_free(&out);
	buf_free(&msg);
}

static void test_hash_file_and_text(void **state)
{
	struct tmp *t = *state;
	buf_t msg = {0};
	char hex[65], want[65];
	put_file(at(t, "abc"), "abc", 0600);
	assert_int_equal(fsio_hash_file(at(t, "abc"), hex, &msg), FSIO_OK);
	assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	/* more than one read piece */
	size_t n = 300000;
	char *big = malloc(n + 1);
	assert_non_null(big);
	for (size_t i = 0; i < n; i++)
		big[i] = (char)('a' + i % 26);
	big[n] = 0;
	put_file(at(t, "big"), big, 0600);
	fsio_sha256_hex(big, n, want);
	assert_int_equal(fsio_hash_file(at(t, "big"), hex, &msg), FSIO_OK);
	assert_string_equal(hex, want);
	free(big);
	assert_int_equal(fsio_hash_file(at(t, "gone"), hex, &msg), FSIO_NOT_FOUND);
	assert_int_equal(fsio_hash_file(t->dir, hex, &msg), FSIO_IS_DIRECTORY);
	/* the text check and its message */
	assert_int_equal(fsio_check_text("/p", "ok\n", 3, "!", &msg), FSIO_OK);
	assert_int_equal(fsio_check_text("/p", "ab\0c", 4, "; hint", &msg), FSIO_NOT_TEXT);
	assert_string_equal(msg.p, "/p is not UTF-8 text (a NUL byte at byte 2); hint");
	assert_int_equal(fsio_check_text("/p", "a\xe9", 2, "", &msg), FSIO_NOT_TEXT);
	assert_string_equal(msg.p, "/p is not UTF-8 text (invalid UTF-8 at byte 1)");
	assert_int_equal(fsio_check_text("/p", NULL, 0, "", &msg), FSIO_OK);
	buf_free(&msg);
}

static void test_mkdirs(void **state)
{
	struct tmp *t = *state;
	buf_t msg = {0};
	struct stat st;
	assert_int_equal(fsio_mkdirs(at(t, "a/b/c"), &msg), FSIO_OK);
	assert_int_equal(stat(at(t, "a/b/c"), &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(fsio_mkdirs(at(t, "a/b"), &msg), FSIO_OK);     /* already there */
	put_file(at(t, "a/file"), "x", 0644);
	assert_int_equal(fsio_mkdirs(at(t, "a/file"), &msg), FSIO_IO);
	assert_true(contains(&msg, ": a file of that name exists"));
	/* through a file: ENOTDIR is an I/O error here, not "not found" */
	assert_int_equal(fsio_mkdirs(at(t, "a/file/sub"), &msg), FSIO_IO);
	assert_true(contains(&msg, "cannot create folder"));
	buf_free(&msg);
}

static void test_write_target(void **state)
{
	struct tmp *t = *state;
	buf_t msg = {0};
	struct stat st;
	int exists = -1;
	char *p = strdup(at(t, "new"));
	assert_int_equal(fsio_write_target(&p, &st, &exists, &msg), FSIO_OK);
	assert_int_equal(exists, 0);
	free(p);
	put_file(at(t, "file"), "x", 0640);
	p = strdup(at(t, "file"));
	assert_int_equal(fsio_write_target(&p, &st, &exists, &msg), FSIO_OK);
	assert_int_equal(exists, 1);
	assert_int_equal(st.st_mode & 07777, 0640);
	free(p);
	/* a symlink: the target becomes the file it points to */
	assert_int_equal(symlink("file", at(t, "link")), 0);
	p = strdup(at(t, "link"));
	assert_int_equal(fsio_write_target(&p, &st, &exists, &msg), FSIO_OK);
	assert_int_equal(exists, 1);
	char *real = realpath(at(t, "file"), NULL);
	assert_string_equal(p, real);
	free(real);
	free(p);
	/* a dangling symlink is replaced like nothing */
	assert_int_equal(symlink("nowhere", at(t, "dangling")), 0);
	p = strdup(at(t, "dangling"));
	assert_int_equal(fsio_write_target(&p, &st, &exists, &msg), FSIO_OK);
	assert_int_equal(exists, 0);
	free(p);
	/* errors */
	p = strdup(t->dir);
	assert_int_equal(fsio_write_target(&p, &st, &exists, &msg), FSIO_IS_DIRECTORY);
	free(p);
	p = strdup(at(t, "file/x"));
	assert_int_equal(fsio_write_target(&p, &st, &exists, &msg), FSIO_IO);
	assert_true(contains(&msg, ": a part of the path is a file, not a folder"));
	free(p);
	assert_int_equal(mkfifo(at(t, "fifo"), 0600), 0);
	p = strdup(at(t, "fifo"));
	assert_int_equal(fsio_write_target(&p, &st, &exists, &msg), FSIO_IO);
	assert_true(contains(&msg, "is not a regular file; refusing to replace it"));
	free(p);
	buf_free(&msg);
}

/* Names in dir, sorted, joined by ' '. */
static void list_names(const char *dir, buf_t *out)
{
	struct dirent **ents;
	int n = scandir(dir, &ents, NULL, alphasort);
	assert_true(n >= 0);
	buf_reset(out);
	for (int i = 0; i < n; i++) {
		if (ents[i]->d_name[0] != '.')
			buf_printf(out, "%s%s", out->len ? " " : "", ents[i]->d_name);
		free(ents[i]);
	}
	free(ents);
	if (!out->p)
		buf_puts(out, "");
}

static void test_atomic_write(void **state)
{
	struct tmp *t = *state;
	buf_t msg = {0}, got = {0}, names = {0};
	struct stat st;
	/* a new file with exactly the mode asked for, whatever the umask */
	assert_int_equal(fsio_atomic_write(at(t, "w.txt"), "one\n", 4, 0751, NULL, 0, &msg), FSIO_OK);
	assert_int_equal(fsio_load(at(t, "w.txt"), 100, &got, &st, &msg), FSIO_OK);
	assert_string_equal(got.p, "one\n");
	assert_int_equal(st.st_mode & 07777, 0751);
	/* replaced: new content, new inode, no temp file left */
	ino_t before = st.st_ino;
	assert_int_equal(fsio_atomic_write(at(t, "w.txt"), "two", 3, 0600, &st, 0, &msg), FSIO_OK);
	buf_reset(&got);
	assert_int_equal(fsio_load(at(t, "w.txt"), 100, &got, &st, &msg), FSIO_OK);
	assert_string_equal(got.p, "two");
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_true(st.st_ino != before);
	list_names(t->dir, &names);
	assert_string_equal(names.p, "w.txt");
	/* an empty file */
	assert_int_equal(fsio_atomic_write(at(t, "e"), "", 0, 0644, NULL, 0, &msg), FSIO_OK);
	assert_int_equal(stat(at(t, "e"), &st), 0);
	assert_int_equal(st.st_size, 0);
	/* missing folders: created with parents, an I/O error without */
	assert_int_equal(fsio_atomic_write(at(t, "x/y/z.txt"), "z", 1, 0644, NULL, 0, &msg), FSIO_IO);
	assert_true(contains(&msg, "cannot create a temporary file in"));
	assert_int_equal(fsio_atomic_write(at(t, "x/y/z.txt"), "z", 1, 0644, NULL, 1, &msg), FSIO_OK);
	assert_int_equal(stat(at(t, "x/y/z.txt"), &st), 0);
	/* a folder in the way of the rename: is_directory, temp file removed */
	assert_int_equal(mkdir(at(t, "d"), 0755), 0);
	assert_int_equal(mkdir(at(t, "d/sub"), 0755), 0);
	assert_int_equal(fsio_atomic_write(at(t, "d/sub"), "q", 1, 0644, NULL, 0, &msg),
			 FSIO_IS_DIRECTORY);
	assert_true(contains(&msg, "cannot replace"));
	list_names(at(t, "d"), &names);
	assert_string_equal(names.p, "sub");
	/* a file in the way of the folders */
	assert_int_equal(fsio_atomic_write(at(t, "e/f"), "q", 1, 0644, NULL, 1, &msg), FSIO_IO);
	buf_free(&msg);
	buf_free(&got);
	buf_free(&names);
}

static void test_lines(void **state)
{
	(void)state;
	assert_int_equal(fsio_count_lines("", 0), 0);
	assert_int_equal(fsio_count_lines("a", 1), 1);
	assert_int_equal(fsio_count_lines("a\n", 2), 1);
	assert_int_equal(fsio_count_lines("a\nb", 3), 2);
	assert_int_equal(fsio_count_lines("\n\n", 2), 2);
	assert_int_equal(fsio_count_lines("a\r\nb\r\n", 6), 2);
	const char *t = "ab\ncd\n\nef";
	size_t n = strlen(t);
	assert_int_equal(fsio_line_offset(t, n, 1), 0);
	assert_int_equal(fsio_line_offset(t, n, 2), 3);
	assert_int_equal(fsio_line_offset(t, n, 3), 6);
	assert_int_equal(fsio_line_offset(t, n, 4), 7);
	assert_int_equal(fsio_line_offset(t, n, 5), n);
	assert_int_equal(fsio_line_offset(t, n, 99), n);
	assert_int_equal(fsio_line_offset("a\n", 2, 2), 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sha256_vectors),
		cmocka_unit_test(test_sha256_padding_boundaries),
		cmocka_unit_test(test_base64_rfc4648),
		cmocka_unit_test(test_base64_round_trip_all_bytes),
		cmocka_unit_test(test_base64_lenient_and_strict),
		cmocka_unit_test(test_base64_long_and_wrapped),
		cmocka_unit_test(test_utf8_text),
		cmocka_unit_test(test_utf8_sanitize),
		cmocka_unit_test(test_text_sanitize),
		cmocka_unit_test(test_resolve),
		cmocka_unit_test(test_status_codes),
		cmocka_unit_test_setup_teardown(test_load, tmp_setup, tmp_teardown),
		cmocka_unit_test_setup_teardown(test_hash_file_and_text, tmp_setup, tmp_teardown),
		cmocka_unit_test_setup_teardown(test_mkdirs, tmp_setup, tmp_teardown),
		cmocka_unit_test_setup_teardown(test_write_target, tmp_setup, tmp_teardown),
		cmocka_unit_test_setup_teardown(test_atomic_write, tmp_setup, tmp_teardown),
		cmocka_unit_test(test_lines),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
