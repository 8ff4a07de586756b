/* viewers.c — owns `bench-viewers`, the C side of the /tty fan-out bench
 * (tests/bench/bench_tty.py): N read-only /tty/<session>?mode=ro viewers
 * over the client library (proto/client.h), all read by one single-threaded
 * poll() loop as fast as they come, with per-type frame and byte counts, an
 * optional end marker looked for in each viewer's 'O' stream (across frame
 * boundaries) and in any later 'S' snapshot, and one JSON line of figures at
 * the end. It stops when every viewer saw the marker or closed, on
 * SIGTERM/SIGINT, at stdin EOF (-e), or after -w seconds. */
#include "client.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#define MARKER_MAX 256
#define NTYPES 7   /* Z S O T X E, then anything else */
static const char TYPES[] = "ZSOTXE";

struct viewer {
	td_client *c;
	int open;
	int nsnap;                 /* 'S' frames: the first is the attach's, later ones resyncs */
	int got_marker;            /* 1: in 'O' data, 2: in an 'S' snapshot */
	double marker_at;          /* CLOCK_MONOTONIC seconds */
	int got_exit;
	uint64_t frames[NTYPES], bytes[NTYPES];
	char tail[MARKER_MAX];     /* the last marker_len-1 bytes of the 'O' stream */
	size_t tail_len;
	char why[160];             /* why it closed */
};

static const char *marker;
static size_t marker_len;

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int type_index(unsigned char t)
{
	const char *p = t ? strchr(TYPES, t) : NULL;
	return p ? (int)(p - TYPES) : NTYPES - 1;
}

static void saw_marker(struct viewer *v, int how)
{
	if (!v->got_marker) {
		v->got_marker = how;
		v->marker_at = mono();
	}
}

/* memmem for a marker that seldom occurs: memchr for its first byte (which
 * the flood's digits never hold) is several times faster than glibc's
 * memmem on the 15 MB each viewer reads, and the reader should cost little. */
static const char *find_marker(const char *p, size_t n)
{
	const char *end = p + n;
	while ((size_t)(end - p) >= marker_len) {
		const char *q = memchr(p, marker[0], (size_t)(end - p) - marker_len + 1);
		if (!q)
			return NULL;
		if (!memcmp(q, marker, marker_len))
			return q;
		p = q + 1;
	}
	return NULL;
}

/* The 'O' stream is searched as one: what the last frame ended with, then
 * this frame's bytes. */
static void scan_output(struct viewer *v, const char *p, size_t n)
{
	if (!marker_len || v->got_marker)
		return;
	if (v->tail_len) {
		/* a marker straddling the boundary: tail + the first bytes */
		char join[2 * MARKER_MAX];
		size_t k = n < marker_len - 1 ? n : marker_len - 1;
		memcpy(join, v->tail, v->tail_len);
		memcpy(join + v->tail_len, p, k);
		if (find_marker(join, v->tail_len + k)) {
			saw_marker(v, 1);
			return;
		}
	}
	if (find_marker(p, n)) {
		saw_marker(v, 1);
		return;
	}
	/* keep the last marker_len-1 bytes of tail + p */
	size_t keep = marker_len - 1;
	if (n >= keep) {
		memcpy(v->tail, p + n - keep, keep);
		v->tail_len = keep;
	} else {
		size_t drop = v->tail_len + n > keep ? v->tail_len + n - keep : 0;
		memmove(v->tail, v->tail + drop, v->tail_len - drop);
		v->tail_len -= drop;
		memcpy(v->tail + v->tail_len, p, n);
		v->tail_len += n;
	}
}

static void on_frame(struct viewer *v, const char *d, size_t len)
{
	if (!len) {
		v->frames[NTYPES - 1]++;
		return;
	}
	int t = type_index((unsigned char)d[0]);
	v->frames[t]++;
	v->bytes[t] += len - 1;
	switch (d[0]) {
	case 'O':
		scan_output(v, d + 1, len - 1);
		break;
	case 'S':
		v->nsnap++;
		v->tail_len = 0;   /* the stream starts again from this screen */
		if (marker_len && find_marker(d + 1, len - 1))
			saw_marker(v, 2);
		break;
	case 'X':
		v->got_exit = 1;
		break;
	default:
		break;
	}
}

static void viewer_closed(struct viewer *v)
{
	v->open = 0;
	snprintf(v->why, sizeof v->why, "%s", td_error(v->c));
}

/* Reads what the socket has and every whole message the client then holds;
 * never waits. */
static void drain(struct viewer *v)
{
	do {
		char *d;
		size_t len;
		int bin;
		int r = td_recv(v->c, &d, &len, &bin, 0);
		if (r < 0) {
			viewer_closed(v);
			return;
		}
		if (r == 0)
			return;
		on_frame(v, d, len);
		free(d);
	} while (td_pending(v->c) == 2);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: bench-viewers [-n N] [-s SESSION] [-k TOKEN_FILE] [-m MARKER] [-w SECONDS] [-e] URL\n"
		"  attaches N (default 50) read-only viewers to /tty/SESSION (default main) at URL\n"
		"  (ws://HOST:PORT, unix:/path; token: -k FILE, else $TERMD_TOKEN), prints\n"
		"  {\"ready\":..} once each has its first snapshot (or closed), reads them all as\n"
		"  fast as they come, and prints one JSON line of counts when every viewer saw\n"
		"  MARKER (in 'O' data or a later 'S' snapshot) or closed, on SIGTERM/SIGINT,\n"
		"  at stdin EOF (-e), or after SECONDS (-w). Exit 0, 1 if a viewer could not\n"
		"  connect or a marker was asked for and not every viewer saw it, 2 on usage.\n");
}

static void print_counts(const char *key, struct viewer *vs, int n, int bytes)
{
	printf("\"%s\":{", key);
	for (int t = 0; t < NTYPES; t++) {
		uint64_t sum = 0;
		for (int i = 0; i < n; i++)
			sum += bytes ? vs[i].bytes[t] : vs[i].frames[t];
		if (t < NTYPES - 1)
			printf("%s\"%c\":%llu", t ? "," : "", TYPES[t], (unsigned long long)sum);
		else
			printf(",\"other\":%llu", (unsigned long long)sum);
	}
	printf("}");
}

/* The JSON string s (ASCII control bytes and quotes escaped). */
static void print_jstr(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20)
			printf("\\u%04x", ch);
		else
			putchar(ch);
	}
	putchar('"');
}

int main(int argc, char **argv)
{
	int n = 50, on_stdin = 0;
	const char *session = "main", *token_file = NULL;
	double wait_s = 0;
	int o;
	while ((o = getopt(argc, argv, "n:s:k:m:w:eh")) != -1) {
		switch (o) {
		case 'n': n = atoi(optarg); break;
		case 's': session = optarg; break;
		case 'k': token_file = optarg; break;
		case 'm': marker = optarg; break;
		case 'w': wait_s = atof(optarg); break;
		case 'e': on_stdin = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc - 1 || n < 1 || n > 10000 || wait_s < 0) {
		usage(stderr);
		return 2;
	}
	const char *url = argv[optind];
	if (marker) {
		marker_len = strlen(marker);
		if (!marker_len || marker_len >= MARKER_MAX) {
			fprintf(stderr, "bench-viewers: the marker must be 1-%d bytes\n", MARKER_MAX - 1);
			return 2;
		}
	}
	char err[256];
	char *token = NULL;
	if (token_file) {
		token = td_read_token_file(token_file, err, sizeof err);
		if (!token) {
			fprintf(stderr, "bench-viewers: %s\n", err);
			return 2;
		}
	}
	const char *tok = token ? token : td_default_token();

	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	int sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0) {
		perror("bench-viewers: signalfd");
		return 1;
	}

	double t_start = mono();
	char path[512];
	snprintf(path, sizeof path, "/tty/%s?mode=ro", session);
	struct viewer *vs = calloc((size_t)n, sizeof *vs);
	struct pollfd *pfd = calloc((size_t)n + 2, sizeof *pfd);
	int *idx = calloc((size_t)n + 2, sizeof *idx);
	if (!vs || !pfd || !idx) {
		fprintf(stderr, "bench-viewers: out of memory\n");
		return 1;
	}
	for (int i = 0; i < n; i++) {
		vs[i].c = td_connect(url, path, "termd.tty.v1", tok, err, sizeof err);
		if (!vs[i].c) {
			fprintf(stderr, "bench-viewers: viewer %d: %s%s: %s\n", i, url, path, err);
			for (int j = 0; j < i; j++)
				td_close(vs[j].c);
			return 1;
		}
		int fd = td_fd(vs[i].c);
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
		vs[i].open = 1;
	}

	const char *why = NULL;
	int ready = 0;
	double deadline = wait_s > 0 ? t_start + wait_s : 0;
	for (;;) {
		int nopen = 0, nsnap = 0, nmark = 0;
		for (int i = 0; i < n; i++) {
			/* whole messages the client already holds (the handshake's
			 * read may have taken the first frames too) wake no poll */
			if (vs[i].open && td_pending(vs[i].c) == 2)
				drain(&vs[i]);
			nopen += vs[i].open;
			nsnap += vs[i].nsnap > 0 || !vs[i].open;
			nmark += vs[i].got_marker || !vs[i].open;
		}
		if (!ready && nsnap == n) {
			ready = 1;
			printf("{\"ready\":%d,\"open\":%d,\"mono\":%.6f}\n", n, nopen, mono());
			fflush(stdout);
		}
		if (!nopen) {
			why = "closed";
			break;
		}
		if (marker_len && nmark == n) {
			why = "markers";
			break;
		}
		int np = 0;
		pfd[np] = (struct pollfd){ .fd = sfd, .events = POLLIN };
		idx[np++] = -1;
		if (on_stdin) {
			pfd[np] = (struct pollfd){ .fd = 0, .events = POLLIN };
			idx[np++] = -2;
		}
		for (int i = 0; i < n; i++) {
			if (!vs[i].open)
				continue;
			pfd[np] = (struct pollfd){ .fd = td_fd(vs[i].c), .events = POLLIN };
			idx[np++] = i;
		}
		int ms = -1;
		if (deadline > 0) {
			double left = deadline - mono();
			if (left <= 0) {
				why = "timeout";
				break;
			}
			ms = (int)(left * 1000) + 1;
		}
		int r = poll(pfd, (nfds_t)np, ms);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			perror("bench-viewers: poll");
			why = "error";
			break;
		}
		for (int k = 0; k < np && r > 0; k++) {
			if (!pfd[k].revents)
				continue;
			r--;
			if (idx[k] == -1) {
				struct signalfd_siginfo si;
				if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
					why = "signal";
			} else if (idx[k] == -2) {
				char b[4096];
				ssize_t got = read(0, b, sizeof b);
				if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
					why = "stdin";
					on_stdin = 0;
				}
			} else {
				drain(&vs[idx[k]]);
			}
		}
		if (why)
			break;
	}

	/* the figures */
	int nopen = 0, nmark = 0, in_o = 0, in_s = 0, resnapped = 0, resnaps = 0, exits = 0;
	uint64_t omin = UINT64_MAX, omax = 0;
	double mfirst = 0, mlast = 0;
	for (int i = 0; i < n; i++) {
		struct viewer *v = &vs[i];
		nopen += v->open;
		exits += v->got_exit;
		if (v->got_marker) {
			nmark++;
			in_o += v->got_marker == 1;
			in_s += v->got_marker == 2;
			if (!mfirst || v->marker_at < mfirst)
				mfirst = v->marker_at;
			if (v->marker_at > mlast)
				mlast = v->marker_at;
		}
		if (v->nsnap > 1) {
			resnapped++;
			resnaps += v->nsnap - 1;
		}
		uint64_t ob = v->bytes[type_index('O')];
		if (ob < omin)
			omin = ob;
		if (ob > omax)
			omax = ob;
	}
	printf("{\"viewers\":%d,\"why\":\"%s\",\"open\":%d,\"closed\":%d,\"exits\":%d,", n, why,
	       nopen, n - nopen, exits);
	if (marker_len) {
		printf("\"marker\":");
		print_jstr(marker);
		printf(",\"got_marker\":%d,\"marker_in_O\":%d,\"marker_in_S\":%d,"
		       "\"first_marker_mono\":%.6f,\"last_marker_mono\":%.6f,",
		       nmark, in_o, in_s, mfirst, mlast);
	}
	printf("\"resnapshotted\":%d,\"resnaps\":%d,\"O_bytes_min\":%llu,\"O_bytes_max\":%llu,",
	       resnapped, resnaps, (unsigned long long)omin, (unsigned long long)omax);
	print_counts("frames", vs, n, 0);
	putchar(',');
	print_counts("bytes", vs, n, 1);
	int first_closed = -1;
	for (int i = 0; i < n && first_closed < 0; i++)
		if (!vs[i].open)
			first_closed = i;
	if (first_closed >= 0) {
		printf(",\"first_close\":");
		print_jstr(vs[first_closed].why);
	}
	printf(",\"mono\":%.6f}\n", mono());
	fflush(stdout);

	for (int i = 0; i < n; i++)
		td_close(vs[i].c);
	free(vs);
	free(pfd);
	free(idx);
	free(token);
	close(sfd);
	return marker_len && nmark < n ? 1 : 0;
}
