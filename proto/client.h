/* client.h — the blocking WebSocket client library that termctl, od-attach
 * and the tests use to talk to termd (part of libtd.a): URL parsing and the
 * token file (url.c), plain TCP, TLS (wss://, OpenSSL, certificate verified)
 * or unix sockets (net.c), the RFC 6455 client handshake and framing (ws.c),
 * and the events-channel helpers td_call and td_recv_json (call.c).
 * Everything is prefixed td_. */
#ifndef TERMD_CLIENT_H
#define TERMD_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <cJSON.h>

typedef struct td_client td_client;

/* ---- URLs and defaults ---- */

/* A parsed base URL: "ws://HOST[:PORT][/PREFIX]" (also "http://", or a bare
 * "HOST[:PORT]"; IPv6 as "[::1]:8421"), "wss://HOST[:PORT][/PREFIX]" (also
 * "https://") for TLS, or "unix:/path/to.sock" (also a bare "/path/to.sock").
 * PREFIX, if any, is put in front of every request path. */
typedef struct td_url {
	int is_unix;
	int tls;            /* wss:// or https:// */
	char host[256];     /* without brackets; "" for unix */
	int port;           /* when omitted: 443 for TLS, else TD_DEFAULT_PORT; 0 for unix */
	char sock[108];     /* unix socket path */
	char prefix[256];   /* path prefix without trailing '/', usually "" */
} td_url;

/* 0 on success, -1 with a message in err. */
int td_url_parse(const char *url, td_url *out, char *err, size_t errlen);

/* $TERMD_URL if set and non-empty, else TD_DEFAULT_URL. */
const char *td_default_url(void);
/* $TERMD_TOKEN if set and non-empty, else NULL. */
const char *td_default_token(void);
/* The token in file `path`, the same rule for termd and every client: the
 * first line, whitespace (spaces, tabs, CR) trimmed at both ends, later
 * lines ignored; malloc'd. NULL with a message in err ("token file PATH:
 * ...") if the file cannot be read, or its first line is empty, longer than
 * TD_TOKEN_MAX bytes or holds a NUL byte. termd links this (url.c) too. */
#define TD_TOKEN_MAX 4096
char *td_read_token_file(const char *path, char *err, size_t errlen);

/* ---- TLS ---- */

/* wss:// verifies termd's certificate (chain, and the URL's host name or IP
 * address; SNI is sent for names) against the system's CA certificates, or,
 * when a CA file is given, against the certificates in that file only. The
 * CA file is the last td_tls_set_cafile(path) if path was non-empty, else
 * $TERMD_CACERT if set and non-empty. $TERMD_TLS_INSECURE=1 turns
 * verification off — for testing only: anyone on the path can then read and
 * change the traffic, token included. `path` is copied. */
void td_tls_set_cafile(const char *path);

/* ---- connection ---- */

/* Opens base_url (over TLS for wss://, see above), sends the upgrade request for `path` (e.g. "/events",
 * "/tty/main?mode=ro") with the given subprotocol and, when token is
 * non-empty, "Authorization: Bearer <token>"; checks the 101 answer and its
 * Sec-WebSocket-Accept. NULL on failure with a message in err such as
 * "connection refused", "HTTP 401 Unauthorized" or "TLS: certificate verify
 * failed: self-signed certificate". Connecting, the TLS handshake and the
 * WebSocket handshake each give up after 10 seconds. */
td_client *td_connect(const char *base_url, const char *path, const char *subprotocol,
		      const char *token, char *err, size_t errlen);

/* Sends one whole message as a single masked frame (text unless binary).
 * 0 ok, -1 error (see td_error). */
int td_send(td_client *c, int binary, const void *data, size_t len);

/* Receives one whole message (fragments reassembled): 1 with *data malloc'd
 * and NUL-terminated (caller frees), *len and *binary set; 0 on timeout
 * (timeout_ms < 0 waits forever, 0 only looks at what is already buffered
 * or readable now); -1 on close or error (see td_error, td_close_code).
 * Pings are answered and close frames acknowledged transparently. */
int td_recv(td_client *c, char **data, size_t *len, int *binary, int timeout_ms);

/* The socket, for poll(). Before sleeping in poll, check td_pending: bytes
 * already read into the client's buffer (or, over TLS, decrypted and held
 * by OpenSSL) do not make the socket readable. */
int td_fd(const td_client *c);
/* 2 if td_recv(c, …, 0) can return a message (or the close) from what is
 * already buffered, 1 if only part of a message is buffered, 0 if nothing.
 * Over TLS it is also 2 while OpenSSL holds decrypted bytes the client has
 * not taken yet: call td_recv(c, …, 0) then, whatever the socket says. */
int td_pending(const td_client *c);

/* Last error text of this connection ("" if none). */
const char *td_error(const td_client *c);
/* Status code of the server's close frame (1005 if it had none), or 0 if
 * the server has not closed. */
int td_close_code(const td_client *c);
/* The subprotocol the server accepted ("" if it named none). */
const char *td_subprotocol(const td_client *c);

/* Sends a close frame (1000) if still open, and frees everything. NULL ok. */
void td_close(td_client *c);

/* ---- events channel ---- */

/* {"action": name, "args": {}}; *args (if non-NULL) gets the args object to
 * fill. Caller owns the result. */
cJSON *td_action_new(const char *name, cJSON **args);

/* Prefix of ids td_call generates (default "td"); copied, at most 31 chars. */
void td_set_id_prefix(td_client *c, const char *prefix);

/* Sends `action` (an object; an "id" of the form
 * "<prefix>-<pid>-<random>-<counter>" is added when it has none), then reads
 * observations until one has "cause" equal to that id and returns it
 * (caller frees with cJSON_Delete); other observations, hello included, are
 * skipped. NULL on timeout (timeout_ms < 0 = forever), close or error, with
 * a message in err. An "error" observation is returned, not turned into
 * NULL. `action` stays owned by the caller (the id is added to it). */
cJSON *td_call(td_client *c, cJSON *action, int timeout_ms, char *err, size_t errlen);

/* The sending half of td_call, for clients that read the answer in their own
 * loop: adds the id when `action` has none, sends it, and copies the id (a
 * string, or an integer's digits) to idout when non-NULL. 0, or -1 with err
 * set. */
int td_send_action(td_client *c, cJSON *action, char *idout, size_t idlen, char *err,
		   size_t errlen);

/* The hello observation, once a td_call or td_recv_json has seen it
 * (owned by the client), else NULL. */
const cJSON *td_hello(const td_client *c);

/* Receives the next text message and parses it as JSON: 1 with *out set
 * (caller frees), 0 on timeout, -1 on close/error or if the server sent
 * something that is not JSON (err set). Binary messages are skipped. */
int td_recv_json(td_client *c, cJSON **out, int timeout_ms, char *err, size_t errlen);

/* Member k of object o if it is a string, else NULL. */
const char *td_json_str(const cJSON *o, const char *k);
/* Member k of object o if it is a number within int's range (truncated),
 * else dflt. */
int td_json_int(const cJSON *o, const char *k, int dflt);

#endif
