/* door.h — the front doors' entry points for main.c and handover.c, and what
 * the doors of more than one file share across folders: recordings
 * (record.c), the web page (web.c), the preview proxy (preview/), the
 * dial-out links (link/), OpenHands' API (openhands/: V0, ohv1/: V1), e2b's envd API
 * (envd/) and agent-sandbox's runtime API (sandbox/). A door with a folder keeps its files' shared header there
 * (envd/envd.h, openhands/openhands.h); the formats the doors read and
 * write are codec/'s (codec.h, included here). Each door translates its
 * wire onto actions_dispatch or the session listeners; see termd/README. */
#ifndef TERMD_DOOR_H
#define TERMD_DOOR_H

#include "net.h"
#include "codec.h"

#include <time.h>

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


/* ---- the web page (web.c): /, /s/<session>, /r/<file>, /assets/…, /auth ---- */
void web_register(void);
void web_shutdown(void);

/* ---- the preview proxy (preview/proxy.c, preview/proxy-ws.c) ---- */
/* /proxy/<port>/ and the Host route (--preview-host-suffix) */
void proxy_register(void);
/* what preview/proxy.c and proxy-ws.c share: a preview's Host port (0: none); the
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


/* ---- dial-out links (link/link.c): --connect URL ---- */
/* Is url a ws:// or wss:// URL a link can dial? 0, or -1 and why. */
int link_check_url(const char *url, char *err, size_t errlen);
/* Dial every --connect URL (after the server and the actions are up):
 * 0, or -1 and why. Also puts the links on /healthz. */
int link_start(char *err, size_t errlen);
/* Before the loop goes: no more reconnects. */
void link_stop(void);
void link_shutdown(void);
/* link.proxy (link/proxy.c) and what it uses of link.c: the dial (from a
 * link's backend c, to its origin only: 0, or -1 with a code and err),
 * the link's handshake headers, its protocol's callback */
int link_dial_back(struct conn *c, const char *url, const char *proto, void *arg, td_err *code,
		   char *err, size_t errlen);
int link_append_headers(struct lws *wsi, unsigned char **p, size_t room);
int link_proxy_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
			size_t len);
void link_proxy_register(void);


/* ---- OpenHands' action execution server API (openhands/) ---- */
void openhands_register(void);
void openhands_shutdown(void);
/* ... V1, the agent-server's workspace API (ohv1/): its routes before
 * V0's, its / and /health after the web page's and envd's (late);
 * shutdown while the loop exists */
void ohv1_register(void);
/* V0's /server_info object (openhands/openhands.c), V1's adds its fields */
cJSON *oh_server_info_json(void);
void ohv1_register_late(void);
void ohv1_shutdown(void);
/* upgrade in place: V1's kept events and running commands (load before
 * the sessions are adopted, done after) */
cJSON *ohv1_handover_save(void);
void ohv1_handover_load(const cJSON *o);
void ohv1_handover_done(void);


/* ---- SWE-ReX's remote runtime API (swerex/): swerex-remote ---- */
void swerex_register(void);
void swerex_shutdown(void);
/* upgrade in place: its sessions' table (load before the sessions are
 * adopted, done after) */
cJSON *swerex_handover_save(void);
void swerex_handover_load(const cJSON *a);
void swerex_handover_done(void);

/* ---- agent-sandbox's in-pod runtime API (sandbox/) ---- */
void sandbox_register(void);
void sandbox_shutdown(void);


/* ---- e2b's envd API: Connect-RPC process/filesystem, /files (envd/) ---- */
void envd_register(void);
void envd_shutdown(void);
/* upgrade in place: its processes' table (load before the sessions are
 * adopted, done after) */
cJSON *envd_handover_save(void);
void envd_handover_load(const cJSON *o);
void envd_handover_done(void);

#endif
