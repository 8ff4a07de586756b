/* door.h — the front doors: OpenHands' API, the web page, recordings (and the
 * zip and multipart readers they use), and the dial-out links. Each translates its wire onto
 * actions_dispatch or the session listeners; see termd/README. */
#ifndef TERMD_DOOR_H
#define TERMD_DOOR_H

#include "net.h"

#include <time.h>
#include <zlib.h>

/* ---- recordings (record.c) ---- */
/* --record DIR: 0, or -1 and why (missing, not a folder, not writable). */
int record_check_dir(const char *dir, char *err, size_t errlen);
/* its session listener and the /record/ routes (after cmd_init) */
void record_register(void);
/* upgrade in place: each recording's fd, file, time base and bytes, so
 * it goes on in the same file (save: an object by session name; load
 * before the sessions are adopted, done after) */
cJSON *record_handover_save(void);
void record_handover_keep(int keep);
void record_handover_load(const cJSON *recs);
void record_handover_done(void);


/* ---- zip archives (zip.c) ---- */
/* Each entry of a zip held in memory: 0 to go on, -1 (err set) to stop. */
typedef int (*zip_entry_fn)(void *arg, const char *name, const unsigned char *data, size_t len,
			    int is_dir, char *err, size_t errlen);
int zip_read(const void *zip, size_t len, zip_entry_fn fn, void *arg, char *err, size_t errlen);
/* Before zip_read: entries at most max_entries, declared sizes adding up to
 * at most budget, no two entries sharing bytes. 0, or -1 and err. */
int zip_check(const void *zip, size_t len, size_t budget, size_t max_entries, char *err,
	      size_t errlen);
struct zipw {
	buf_t out, cd;            /* entries so far, their central directory */
	unsigned n;
};
void zipw_add(struct zipw *zw, const char *name, const void *data, size_t len, time_t mtime);
/* The archive into *out (taken over by the caller); zw is empty again. */
void zipw_finish(struct zipw *zw, buf_t *out);
/* A zip written as it goes (entries deflated in pieces, crc and sizes in
 * data descriptors, the central directory at the end): each call appends
 * to out what is ready. Sizes and offsets under 4 GiB (no zip64). */
struct zips {
	z_stream z;
	int deflating;
	char *name;
	unsigned dtime, ddate, n;
	unsigned long crc;
	uint64_t usize, csize, off, written;
	buf_t cd;
};
void zips_begin(struct zips *zs, buf_t *out, const char *name, time_t mtime);
int zips_data(struct zips *zs, buf_t *out, const void *data, size_t n, int last);
/* what the entry's deflate holds back, out now (a slice must send something) */
int zips_flush(struct zips *zs, buf_t *out);
void zips_end(struct zips *zs, buf_t *out);
void zips_finish(struct zips *zs, buf_t *out);
void zips_free(struct zips *zs);


/* ---- a Connect request envelope (envelope.c) ---- */
enum { CONNECT_BAD = 1, CONNECT_COMPRESSED, CONNECT_TOO_LARGE };
/* The message of the one envelope body[0..len) must be (at most max
 * bytes): 0 with *msg, *n; or CONNECT_* and why. */
int connect_unwrap(const char *body, size_t len, size_t max, const char **msg, size_t *n,
		   char *why, size_t whylen);

/* ---- multipart/form-data (multipart.c) ---- */
struct mp_part {
	const char *data;         /* points into the body */
	size_t len;
	int has_filename;
	char filename[1024];
};
/* The part named `field`: 0, or -1 and why. */
int multipart_find(const char *ctype, const char *body, size_t len, const char *field,
		   struct mp_part *part, char *err, size_t errlen);


/* ---- the web page (web.c): /, /s/<session>, /r/<file>, /assets/…, /auth ---- */
void web_register(void);
void web_shutdown(void);

/* ---- the preview proxy (proxy.c, proxy-ws.c) ---- */
/* /proxy/<port>/ and the Host route (--preview-host-suffix) */
void proxy_register(void);
/* what proxy.c and proxy-ws.c share: a preview's Host port (0: none); the
 * client's headers the program gets, as "Name: value\r\n" lines (X-Forwarded-*,
 * those a request or, upgrade set, a WebSocket upgrade carries on, the
 * Cookie without termd's) */
int proxy_host_port(struct lws *wsi);
void proxy_client_hdrs(struct lws *wsi, buf_t *b, int port, int by_host, int upgrade);
/* The preview uri names: the Host route's port (*by_host set, *rest the
 * whole uri), else /proxy/<port>'s (*rest what follows, "/" when nothing
 * does); 0 when it names none, -1 for a /proxy/ path without a port. */
int proxy_target(struct lws *wsi, const char *uri, int *by_host, const char **rest);
/* May the request reach the preview at port: access (the full or preview
 * token, or the cookie) and a session's program listening there (its
 * address into *addr when addr is not NULL): 0, or the HTTP status (401,
 * 404) with *why, the answer's text. */
int proxy_admit_check(struct lws *wsi, enum auth_level level, int port, const char **addr,
		      const char **why);
/* a socket connecting to port as bound at addr (ports_find's): loopback
 * for a wildcard, else that address of the sandbox's own; -1 on failure */
int proxy_connect(int port, const char *addr);
/* a WebSocket upgrade to a preview (http_upgrade_hook_fn) */
int proxy_ws_upgrade(struct lws *wsi, enum auth_level level, const char **why);


/* ---- dial-out links (link.c): --connect URL ---- */
/* Is url a ws:// or wss:// URL a link can dial? 0, or -1 and why. */
int link_check_url(const char *url, char *err, size_t errlen);
/* Dial every --connect URL (after the server and the actions are up):
 * 0, or -1 and why. Also puts the links on /healthz. */
int link_start(char *err, size_t errlen);
/* Before the loop goes: no more reconnects. */
void link_stop(void);
void link_shutdown(void);
/* link.proxy (link-proxy.c) and what it uses of link.c: the dial (from a
 * link's backend c, to its origin only: 0, or -1 with a code and err),
 * the link's handshake headers, its protocol's callback */
int link_dial_back(struct conn *c, const char *url, const char *proto, void *arg, td_err *code,
		   char *err, size_t errlen);
int link_append_headers(struct lws *wsi, unsigned char **p, size_t room);
int link_proxy_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
			size_t len);
void link_proxy_register(void);


/* ---- OpenHands' action execution server API (openhands.c) ---- */
void openhands_register(void);
void openhands_shutdown(void);


/* ---- e2b's envd API: Connect-RPC process/filesystem, /files (envd*.c) ---- */
void envd_register(void);
void envd_shutdown(void);

#endif
