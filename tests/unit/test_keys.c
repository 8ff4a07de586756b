/* test_keys.c — unit tests for termd/keys.c: control-key names for run's
 * is_input (keys_is_control_name), and the bytes keys_type writes to a
 * session for named keys (through libvterm's keyboard layer, honouring
 * cursor-key mode), modifiers, function keys and literal text. The session
 * is built by hand around a pipe standing in for the pty master. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"

/* ---- keys_is_control_name ---- */

static void test_control_names(void **state)
{
	(void)state;
	char b = 0x55;
	assert_true(keys_is_control_name("C-c", &b));
	assert_int_equal(b, 0x03);
	assert_true(keys_is_control_name("C-d", &b));
	assert_int_equal(b, 0x04);
	assert_true(keys_is_control_name("C-z", &b));
	assert_int_equal(b, 0x1a);
	assert_true(keys_is_control_name("C-\\", &b));
	assert_int_equal(b, 0x1c);
	for (char c = 'a'; c <= 'z'; c++) {
		char name[4] = {'C', '-', c, 0};
		b = 0x55;
		assert_true(keys_is_control_name(name, &b));
		assert_int_equal(b, c - 'a' + 1);
	}
	/* upper case letters are the same control byte (as in tmux) */
	assert_true(keys_is_control_name("C-C", &b));
	assert_int_equal(b, 0x03);
	assert_true(keys_is_control_name("C-[", &b));
	assert_int_equal(b, 0x1b);
	assert_true(keys_is_control_name("C-]", &b));
	assert_int_equal(b, 0x1d);
	assert_true(keys_is_control_name("C-?", &b));
	assert_int_equal(b, 0x7f);
}

static void test_not_control_names(void **state)
{
	(void)state;
	static const char *const no[] = {
		"", "C", "C-", "C-cc", "hello", "c-c", "c", "M-c", "C-M-c",
		"^C", "C_c", "C-1", "C-é", " C-c", "C-c ", "Enter", "C-Enter",
	};
	for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
		char b = 0x55;
		if (keys_is_control_name(no[i], &b))
			fail_msg("\"%s\" taken for a control key name", no[i]);
		assert_int_equal(b, 0x55);   /* untouched */
	}
}

/* ---- keys_type ---- */

struct fx {
	struct session s;
	int rfd;                   /* what was typed comes out here */
};

/* Terminal answers and keyboard output go to the session, as session.c
 * does for real sessions. */
static void to_session(const char *data, size_t n, void *user)
{
	session_write(user, data, n);
}

static int fx_setup(void **state)
{
	struct fx *f = xcalloc(1, sizeof *f);
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	f->rfd = p[0];
	struct session *s = &f->s;
	snprintf(s->name, sizeof s->name, "keys");
	s->pty.fd = p[1];
	s->pty.alive = 1;
	s->pty.wsi = NULL;             /* no lws: session_write must not poke it */
	s->rows = 24;
	s->cols = 80;
	s->screen = screen_new(s->rows, s->cols);
	screen_set_output(s->screen, to_session, s);
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;
	screen_free(f->s.screen);
	buf_free(&f->s.pty.inq);
	close(f->s.pty.fd);
	close(f->rfd);
	free(f);
	return 0;
}

/* All bytes typed since the last call, NUL-terminated, in a static buffer. */
static const char *typed(struct fx *f, size_t *len)
{
	static char out[4096];
	size_t n = 0;
	for (;;) {
		ssize_t r = read(f->rfd, out + n, sizeof out - 1 - n);
		if (r > 0) {
			n += (size_t)r;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		break;
	}
	out[n] = 0;
	if (len)
		*len = n;
	assert_int_equal(f->s.pty.inq.len, 0);   /* nothing left queued */
	return out;
}

/* keys_type(item) writes exactly `want` (wn bytes) and says whether item
 * was a key name (is_key) or literal text. */
static void check_key(struct fx *f, const char *item, const char *want, size_t wn, int is_key)
{
	int k = keys_type(&f->s, item);
	size_t n;
	const char *got = typed(f, &n);
	if (n != wn || memcmp(got, want, n) != 0) {
		char g[200] = "", w[200] = "";
		for (size_t i = 0; i < n && i < 60; i++)
			snprintf(g + strlen(g), sizeof g - strlen(g), "%02x ", (unsigned char)got[i]);
		for (size_t i = 0; i < wn && i < 60; i++)
			snprintf(w + strlen(w), sizeof w - strlen(w), "%02x ", (unsigned char)want[i]);
		fail_msg("keys_type(\"%s\"): got [%s] want [%s]", item, g, w);
	}
	if (k != is_key)
		fail_msg("keys_type(\"%s\") returned %d, wanted %d", item, k, is_key);
}

/* a key name, and literal text */
#define CHECK(f, item, lit) check_key((f), (item), (lit), sizeof(lit) - 1, 1)
#define TEXT(f, item, lit) check_key((f), (item), (lit), sizeof(lit) - 1, 0)

static void test_basic_keys(void **state)
{
	struct fx *f = *state;
	CHECK(f, "Enter", "\r");
	CHECK(f, "Escape", "\x1b");
	CHECK(f, "Tab", "\t");
	CHECK(f, "BTab", "\x1b[Z");
	CHECK(f, "BSpace", "\x7f");
	CHECK(f, "Space", " ");
	CHECK(f, "Up", "\x1b[A");
	CHECK(f, "Down", "\x1b[B");
	CHECK(f, "Right", "\x1b[C");
	CHECK(f, "Left", "\x1b[D");
	CHECK(f, "Home", "\x1b[H");
	CHECK(f, "End", "\x1b[F");
	CHECK(f, "PageUp", "\x1b[5~");
	CHECK(f, "PPage", "\x1b[5~");
	CHECK(f, "PageDown", "\x1b[6~");
	CHECK(f, "NPage", "\x1b[6~");
	CHECK(f, "Insert", "\x1b[2~");
	CHECK(f, "IC", "\x1b[2~");
	CHECK(f, "Delete", "\x1b[3~");
	CHECK(f, "DC", "\x1b[3~");
	/* names are matched case-insensitively, like tmux */
	CHECK(f, "enter", "\r");
	CHECK(f, "ESCAPE", "\x1b");
}

static void test_function_keys(void **state)
{
	struct fx *f = *state;
	CHECK(f, "F1", "\x1bOP");
	CHECK(f, "F2", "\x1bOQ");
	CHECK(f, "F3", "\x1bOR");
	CHECK(f, "F4", "\x1bOS");
	CHECK(f, "F5", "\x1b[15~");
	CHECK(f, "F10", "\x1b[21~");
	CHECK(f, "F12", "\x1b[24~");
	/* not function keys: typed as text */
	TEXT(f, "F0", "F0");
	TEXT(f, "F13", "F13");
	TEXT(f, "F1x", "F1x");
	TEXT(f, "F", "F");
}

static void test_cursor_key_mode(void **state)
{
	struct fx *f = *state;
	CHECK(f, "Up", "\x1b[A");
	/* DECCKM on (what vim and less send) */
	screen_feed(f->s.screen, "\x1b[?1h", 5);
	CHECK(f, "Up", "\x1bOA");
	CHECK(f, "Down", "\x1bOB");
	CHECK(f, "Right", "\x1bOC");
	CHECK(f, "Left", "\x1bOD");
	/* a modifier always gives the CSI form */
	CHECK(f, "C-Up", "\x1b[1;5A");
	screen_feed(f->s.screen, "\x1b[?1l", 5);
	CHECK(f, "Up", "\x1b[A");
}

static void test_ctrl_meta_shift(void **state)
{
	struct fx *f = *state;
	CHECK(f, "C-x", "\x18");
	CHECK(f, "C-c", "\x03");
	CHECK(f, "C-X", "\x18");
	CHECK(f, "C-a", "\x01");
	CHECK(f, "C-z", "\x1a");
	CHECK(f, "C-\\", "\x1c");
	CHECK(f, "C-[", "\x1b");
	CHECK(f, "C-?", "\x7f");
	CHECK(f, "M-x", "\x1bx");
	CHECK(f, "M-X", "\x1bX");
	CHECK(f, "C-M-x", "\x1b\x18");
	CHECK(f, "M-C-x", "\x1b\x18");
	CHECK(f, "S-a", "A");
	CHECK(f, "M-Space", "\x1b ");
	CHECK(f, "M-Enter", "\x1b\r");
	CHECK(f, "C-Left", "\x1b[1;5D");
	CHECK(f, "C-Right", "\x1b[1;5C");
	CHECK(f, "S-Up", "\x1b[1;2A");
	CHECK(f, "M-Up", "\x1b[1;3A");
	CHECK(f, "C-S-Up", "\x1b[1;6A");
	CHECK(f, "C-F5", "\x1b[15;5~");
	CHECK(f, "S-Tab", "\x1b[Z");
	/* a modifier key with no key after it is text */
	TEXT(f, "C-", "C-");
	TEXT(f, "M-", "M-");
	/* a modifier on something that is not a key: all of it is text */
	TEXT(f, "C-hello", "C-hello");
}

static void test_literal_text(void **state)
{
	struct fx *f = *state;
	TEXT(f, "hello", "hello");
	TEXT(f, "echo hi; ls -l\n", "echo hi; ls -l\n");
	TEXT(f, "日本語", "日本語");
	TEXT(f, "c-c", "c-c");
	TEXT(f, "x", "x");
	TEXT(f, "C", "C");
	/* an empty item types nothing */
	TEXT(f, "", "");
	/* a long literal goes through whole */
	char big[3000];
	memset(big, 'k', sizeof big - 1);
	big[sizeof big - 1] = 0;
	assert_int_equal(keys_type(&f->s, big), 0);
	size_t n;
	const char *got = typed(f, &n);
	assert_int_equal(n, sizeof big - 1);
	assert_memory_equal(got, big, n);
}

/* A session that is not alive takes no input and does not crash. */
static void test_dead_session(void **state)
{
	struct fx *f = *state;
	f->s.pty.alive = 0;
	keys_type(&f->s, "hello");
	keys_type(&f->s, "Up");
	keys_type(&f->s, "C-c");
	f->s.pty.alive = 1;
	TEXT(f, "", "");
}

/* C-Space is NUL in tmux and in every terminal (ctrl_byte(' ') already
 * says so). */
static void test_ctrl_space(void **state)
{
	struct fx *f = *state;
	check_key(f, "C-Space", "\0", 1, 1);
	check_key(f, "C-M-Space", "\x1b\0", 2, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_control_names),
		cmocka_unit_test(test_not_control_names),
#define T(f) cmocka_unit_test_setup_teardown(f, fx_setup, fx_teardown)
		T(test_basic_keys),
		T(test_function_keys),
		T(test_cursor_key_mode),
		T(test_ctrl_meta_shift),
		T(test_literal_text),
		T(test_dead_session),
		T(test_ctrl_space),
#undef T
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
