/* rtt.c — owns the C side of `make bench`: times `run` round trips over one
 * persistent /events connection with the client library (proto/client.h)
 * and prints the figures as one JSON line for tests/bench/bench.py.
 * Optionally in a named session, and within a fixed wall-clock window of
 * SECONDS from connecting (then N is only a cap and "n" says how many ran). */
#include "client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v[0..n). */
static double pct(const double *v, int n, double p)
{
	int k = (int)(p / 100.0 * n + 0.999999) - 1;
	if (k < 0)
		k = 0;
	if (k >= n)
		k = n - 1;
	return v[k];
}

/* One `run` of cmd; its duration in microseconds, or -1 on any failure. */
static double one_run(td_client *c, const char *cmd, const char *session)
{
	cJSON *args;
	cJSON *act = td_action_new("run", &args);
	cJSON_AddStringToObject(args, "command", cmd);
	if (session && *session)
		cJSON_AddStringToObject(args, "session", session);
	char err[256];
	double t0 = now_us();
	cJSON *obs = td_call(c, act, 60000, err, sizeof err);
	double dt = now_us() - t0;
	cJSON_Delete(act);
	if (!obs) {
		fprintf(stderr, "bench-rtt: %s\n", err);
		return -1;
	}
	const cJSON *kind = cJSON_GetObjectItemCaseSensitive(obs, "observation");
	const cJSON *ex = cJSON_GetObjectItemCaseSensitive(obs, "extras");
	const cJSON *code = cJSON_GetObjectItemCaseSensitive(ex, "exit_code");
	int ok = cJSON_IsString(kind) && !strcmp(kind->valuestring, "run") &&
		 cJSON_IsNumber(code) && code->valueint == 0;
	if (!ok) {
		char *s = cJSON_PrintUnformatted(obs);
		fprintf(stderr, "bench-rtt: unexpected observation: %.400s\n", s ? s : "?");
		free(s);
	}
	cJSON_Delete(obs);
	return ok ? dt : -1;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: bench-rtt URL N WARMUP [COMMAND [SESSION [SECONDS]]]\n"
				"  times N runs of COMMAND (default `true`) in SESSION (default: termd's\n"
				"  default) after WARMUP untimed ones, stopping early once SECONDS (> 0)\n"
				"  have passed since it connected (warm-up included; at least one timed run);\n"
				"  prints {\"n\":..,\"p50_us\":..,\"p99_us\":..,...} on one line\n"
				"  (with every sample as \"samples_us\" when BENCH_RTT_SAMPLES is set)\n");
		return 2;
	}
	const char *url = argv[1];
	int n = atoi(argv[2]), warm = atoi(argv[3]);
	const char *cmd = argc > 4 ? argv[4] : "true";
	const char *session = argc > 5 ? argv[5] : NULL;
	double secs = argc > 6 ? atof(argv[6]) : 0;
	if (n < 1 || warm < 0 || secs < 0) {
		fprintf(stderr, "bench-rtt: bad N or WARMUP\n");
		return 2;
	}
	char err[256];
	td_client *c = td_connect(url, "/events", "termd.events.v1", td_default_token(), err, sizeof err);
	if (!c) {
		fprintf(stderr, "bench-rtt: %s: %s\n", url, err);
		return 1;
	}
	td_set_id_prefix(c, "bench");
	double t_end = secs > 0 ? now_us() + secs * 1e6 : 0;
	for (int i = 0; i < warm && !(t_end > 0 && now_us() >= t_end); i++) {
		if (one_run(c, cmd, session) < 0) {
			td_close(c);
			return 1;
		}
	}
	double *v = malloc(sizeof *v * (size_t)n);
	if (!v) {
		td_close(c);
		return 1;
	}
	double sum = 0;
	int done = 0;
	while (done < n) {
		v[done] = one_run(c, cmd, session);
		if (v[done] < 0) {
			free(v);
			td_close(c);
			return 1;
		}
		sum += v[done++];
		if (t_end > 0 && now_us() >= t_end)
			break;
	}
	n = done;
	td_close(c);
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	printf("{\"n\":%d,\"min_us\":%.1f,\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,"
	       "\"max_us\":%.1f,\"mean_us\":%.1f",
	       n, v[0], pct(v, n, 50), pct(v, n, 90), pct(v, n, 99), v[n - 1], sum / n);
	if (getenv("BENCH_RTT_SAMPLES")) {  /* every sample too, sorted, for pooling */
		fputs(",\"samples_us\":[", stdout);
		for (int i = 0; i < n; i++)
			printf("%s%.1f", i ? "," : "", v[i]);
		putchar(']');
	}
	puts("}");
	free(v);
	return 0;
}
