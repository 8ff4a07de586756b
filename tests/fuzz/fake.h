/* fake.h — what the fuzz targets see of tests/fuzz/fake.c: the messages
 * the fake server was asked to send, the fake pty session, and small checks
 * (UTF-8, JSON observations) shared by the targets. */
#ifndef TERMD_FUZZ_FAKE_H
#define TERMD_FUZZ_FAKE_H

#include <stdio.h>
#include <stdlib.h>
#include "door.h"

/* Everything conn_send and lws_write were given, in order. */
struct sent {
	struct conn *conn;        /* conn_send; NULL for a lws_write */
	char *data;               /* NUL-terminated copy */
	size_t len;
};
extern struct sent *fake_sent;
extern size_t fake_nsent;
void fake_sent_clear(void);
/* the built-in actions with fake handlers (arguments read as the real ones) */
void fake_register_actions(void);

/* The one session that exists ("main") while fake_session is set. */
extern struct session *fake_session;
struct session *fake_session_new(int rows, int cols);
void fake_session_free(struct session *s);
extern buf_t fake_written;    /* bytes session_write got */
extern int fake_resizes;      /* session_resize calls with a valid size */

/* Set by lws_callback_on_writable (the test clears it). */
extern int fake_writable;
/* What lws_is_final_fragment answers for the next RECEIVE. */
extern int fake_final;
/* The request URI and mode= argument the fake upgrade check sees. */
extern const char *fake_uri, *fake_mode;

/* Abort with a message (the fuzzer reports it as a crash with the input). */
#define FUZZ_CHECK(cond, ...) do { if (!(cond)) { \
	fprintf(stderr, "fuzz check failed: %s (%s:%d): ", #cond, __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); abort(); } } while (0)

/* 1 if s[0..n) is well-formed UTF-8 (RFC 3629: no overlongs, surrogates or
 * code points above U+10FFFF). */
int fuzz_utf8_valid(const char *s, size_t n);

#endif
