/* test_output.c — output.c on its own: a command's rendered lines kept in
 * memory then a file, answers with what is new, head + tail truncation
 * with the count of lines left out, and a failed output file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "output.h"

struct fx {
	char dir[64];
	struct output o;
	int errors;
	char last_err[512];
};

static void on_err(void *user, const char *msg, const char *path)
{
	struct fx *f = user;
	(void)path;
	f->errors++;
	snprintf(f->last_err, sizeof f->last_err, "%s", msg);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	snprintf(f->dir, sizeof f->dir, "/tmp/test_output.XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	output_init(&f->o, f->dir, "main", 4096);
	f->o.on_error = on_err;
	f->o.user = f;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	if (f->o.file_path)
		unlink(f->o.file_path);
	output_free(&f->o);
	rmdir(f->dir);
	free(f);
	return 0;
}

static void lines(struct output *o, int from, int to)
{
	char b[64];
	for (int i = from; i <= to; i++) {
		int n = snprintf(b, sizeof b, "line %d", i);
		output_line(o, b, (size_t)n);
	}
}

/* content of a collect with no live text */
static char *collect(struct output *o, size_t max, int *trunc)
{
	buf_t live = {0}, out = {0};
	output_collect(o, &live, max, &out, trunc);
	buf_reserve(&out, 1);
	out.p[out.len] = 0;
	return buf_steal(&out);
}

static void test_small_then_nothing_new(void **state)
{
	struct fx *f = *state;
	int t;
	lines(&f->o, 1, 3);
	char *c = collect(&f->o, 30000, &t);
	assert_string_equal(c, "line 1\nline 2\nline 3");
	assert_int_equal(t, 0);
	assert_null(f->o.file_path);
	free(c);
	c = collect(&f->o, 30000, &t);
	assert_string_equal(c, "");
	free(c);
	lines(&f->o, 4, 4);
	c = collect(&f->o, 30000, &t);
	assert_string_equal(c, "line 4");
	free(c);
}

static void test_live_text_not_repeated(void **state)
{
	struct fx *f = *state;
	int t;
	lines(&f->o, 1, 1);
	buf_t live = {0}, out = {0};
	buf_puts(&live, "Name: ");
	output_collect(&f->o, &live, 30000, &out, &t);
	assert_int_equal(out.len, strlen("line 1\nName: "));
	assert_memory_equal(out.p, "line 1\nName: ", out.len);
	/* the prompt's line is finished later with what was typed after it */
	buf_reset(&out);
	output_line(&f->o, "Name: Ann", 9);
	output_line(&f->o, "Hello Ann", 9);
	buf_t none = {0};
	output_collect(&f->o, &none, 30000, &out, &t);
	assert_int_equal(out.len, strlen("Ann\nHello Ann"));
	assert_memory_equal(out.p, "Ann\nHello Ann", out.len);
	buf_free(&out);
}

static void test_truncated_head_and_tail(void **state)
{
	struct fx *f = *state;
	int t;
	lines(&f->o, 1, 1000);      /* ~8 KB: spilled to the file past 4096 */
	assert_non_null(f->o.file_path);
	char *c = collect(&f->o, 1000, &t);
	assert_int_equal(t, 1);
	assert_true(strlen(c) <= 1000);
	assert_true(strncmp(c, "line 1\nline 2\n", 14) == 0);
	size_t n = strlen(c);
	assert_true(n > 9 && strcmp(c + n - 9, "line 1000") == 0);
	/* the marker counts exactly the lines left out */
	const char *m = strstr(c, "\n[... ");
	assert_non_null(m);
	unsigned omitted;
	assert_int_equal(sscanf(m, "\n[... %u lines truncated ...]", &omitted), 1);
	unsigned shown = 0;
	for (const char *p = c; *p; p++)
		shown += *p == '\n';
	/* lines shown = newlines + 1, minus the marker line (two newlines) */
	assert_int_equal(omitted + (shown + 1 - 1), 1000);
	/* the whole output is in the file */
	FILE *fp = fopen(f->o.file_path, "r");
	assert_non_null(fp);
	char line[64];
	int k = 0;
	while (fgets(line, sizeof line, fp)) {
		char want[64];
		snprintf(want, sizeof want, "line %d\n", ++k);
		assert_string_equal(line, want);
	}
	fclose(fp);
	assert_int_equal(k, 1000);
	free(c);
}

static void test_max_output_counts_characters(void **state)
{
	struct fx *f = *state;
	int t;
	/* 10 characters, 20 bytes: fits max_output 10 */
	output_line(&f->o, "éééééééééé", strlen("éééééééééé"));
	char *c = collect(&f->o, 10, &t);
	assert_int_equal(t, 0);
	assert_string_equal(c, "éééééééééé");
	free(c);
}

static void test_failed_file_keeps_a_tail(void **state)
{
	struct fx *f = *state;
	int t;
	/* the spill file cannot be created: its folder is a regular file
	 * (ENOTDIR, for root too) */
	char notdir[96];
	snprintf(notdir, sizeof notdir, "%s/file", f->dir);
	FILE *fp = fopen(notdir, "w");
	assert_non_null(fp);
	fclose(fp);
	output_free(&f->o);
	output_init(&f->o, notdir, "main", 4096);
	f->o.on_error = on_err;
	f->o.user = f;
	lines(&f->o, 1, 3000);
	assert_int_equal(f->errors, 1);
	assert_non_null(strstr(f->last_err, "cannot create the output file"));
	assert_non_null(f->o.err);
	char *c = collect(&f->o, 100000, &t);
	assert_non_null(strstr(c, "of output not kept"));
	size_t n = strlen(c);
	assert_true(n > 9 && strcmp(c + n - 9, "line 3000") == 0);
	free(c);
	unlink(notdir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
		T(test_small_then_nothing_new),
		T(test_live_text_not_repeated),
		T(test_truncated_head_and_tail),
		T(test_max_output_counts_characters),
		T(test_failed_file_keeps_a_tail),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
