/* proto.h — the termd wire contract in C: protocol version, endpoint and
 * subprotocol names, error codes, tty frame types and shared defaults.
 * The prose version is proto/PROTOCOL.md. */
#ifndef TERMD_PROTO_H
#define TERMD_PROTO_H

#define TERMD_VERSION        "0.1.0"
#define PROTOCOL_VERSION     1
#define TD_CONTRACT_VERSION  "1.4"   /* the contract's section 12 names */

#define TD_DEFAULT_HOST      "127.0.0.1"
#define TD_DEFAULT_PORT      8421
#define TD_DEFAULT_URL       "ws://127.0.0.1:8421"
#define TD_SUBPROTO_EVENTS   "termd.events.v1"
#define TD_SUBPROTO_TTY      "termd.tty.v1"
#define TD_SUBPROTO_PROXY    "termd.proxy.v1"   /* link.proxy: one TCP connection as binary frames */
#define TD_PATH_EVENTS       "/events"
#define TD_PATH_TTY          "/tty/"
#define TD_PATH_HEALTH       "/healthz"

#define TD_DEFAULT_COLS      160
#define TD_DEFAULT_ROWS      48
#define TD_DEFAULT_MAX_FRAME (8u * 1024u * 1024u)
#define TD_DEFAULT_RETAIN    10000
#define TD_DEFAULT_MAX_SESSIONS 64
#define TD_DEFAULT_MAX_VIEWERS  64
#define TD_DEFAULT_VIEWER_RATE  (384u * 1024u * 1024u)   /* bytes/s; see tty.c */
#define TD_DEFAULT_MAX_PENDING  (64u * 1024u * 1024u)
#define TD_DEFAULT_SCROLLBACK   2000
#define TD_DEFAULT_OUTPUT_MEM   (1u * 1024u * 1024u)
#define TD_SESSION_NAME_MAX  64

/* Error codes of PROTOCOL.md §2, in order. */
#define TD_ERR_LIST(X) \
	X(BAD_JSON, "bad_json") X(BAD_REQUEST, "bad_request") \
	X(UNKNOWN_ACTION, "unknown_action") X(NO_SUCH_SESSION, "no_such_session") \
	X(SESSION_EXISTS, "session_exists") X(BUSY, "busy") X(NO_COMMAND, "no_command") \
	X(TOO_LARGE, "too_large") X(NOT_FOUND, "not_found") X(IS_DIRECTORY, "is_directory") \
	X(BINARY_FILE, "binary_file") X(IO_ERROR, "io_error") X(MISMATCH, "mismatch") \
	X(FORBIDDEN, "forbidden") X(PLUGIN_FAILED, "plugin_failed") X(INTERNAL, "internal")

typedef enum {
#define TD_ERR_ENUM(e, s) TD_ERR_##e,
	TD_ERR_LIST(TD_ERR_ENUM)
#undef TD_ERR_ENUM
	TD_ERR__COUNT
} td_err;

const char *td_err_name(td_err e);

/* Live terminal channel frame types (first byte of each binary frame). */
enum {
	TD_TTY_SIZE = 'Z',     /* s->c {"cols":C,"rows":R} */
	TD_TTY_SNAPSHOT = 'S', /* s->c bytes reproducing the screen */
	TD_TTY_OUTPUT = 'O',   /* s->c pty bytes */
	TD_TTY_TITLE = 'T',    /* s->c UTF-8 title */
	TD_TTY_EXIT = 'X',     /* s->c {"exit_code":N} */
	TD_TTY_ERROR = 'E',    /* s->c error text */
	TD_TTY_INPUT = 'I',    /* c->s input bytes (rw only) */
	TD_TTY_RESIZE = 'R',   /* c->s {"cols":C,"rows":R} (rw only) */
};

/* 1 if name matches [A-Za-z0-9_.-]{1,64}. */
int td_valid_session_name(const char *name);

#endif
