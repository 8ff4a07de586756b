/* http.c — the HTTP side of the listener, done once for both channels:
 * `GET /healthz`, the token check (bearer header or ?token=, compared in
 * constant time) and the upgrade filter (path, session, --max-viewers,
 * mode=ro/rw against the token). Refusals are answered with a status
 * before any upgrade: 401, 404, 503, 403, 400. */
#include "termd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* constant-time comparison of a presented token with the expected one */
static int token_eq(const char *got, const char *want)
{
	size_t gl = strlen(got), wl = strlen(want);
	unsigned char diff = (unsigned char)(gl != wl);
	for (size_t i = 0; i < wl; i++)
		diff |= (unsigned char)(want[i] ^ (i < gl ? got[i] : 0));
	return diff == 0;
}

static enum auth_level http_auth(struct lws *wsi)
{
	if (!opts.token && !opts.view_token)
		return AUTH_FULL;
	char got[640] = "";
	char hdr[600];
	if (lws_hdr_copy(wsi, hdr, sizeof hdr, WSI_TOKEN_HTTP_AUTHORIZATION) > 0 &&
	    strncasecmp(hdr, "Bearer ", 7) == 0) {
		snprintf(got, sizeof got, "%s", hdr + 7);
	} else {
		const char *v = lws_get_urlarg_by_name(wsi, "token=", hdr, sizeof hdr);
		if (v)
			snprintf(got, sizeof got, "%s", v);
	}
	if (!got[0])
		return AUTH_NONE;
	if (opts.token && token_eq(got, opts.token))
		return AUTH_FULL;
	if (opts.view_token && token_eq(got, opts.view_token))
		return AUTH_VIEW;
	return AUTH_NONE;
}

/* the request's path, without its query */
static void uri_path(struct lws *wsi, char *out, size_t n)
{
	out[0] = 0;
	if (lws_hdr_copy(wsi, out, (int)n, WSI_TOKEN_GET_URI) < 0)
		out[0] = 0;
	char *q = strchr(out, '?');
	if (q)
		*q = 0;
}

static int http_reply(struct lws *wsi, int status, const char *ctype, const char *body)
{
	unsigned char buf[LWS_PRE + 1024];
	unsigned char *start = buf + LWS_PRE, *p = start, *end = buf + sizeof buf - 1;
	size_t blen = strlen(body);
	if (lws_add_http_common_headers(wsi, (unsigned int)status, ctype, (lws_filepos_t)blen, &p, end))
		return -1;
	if (lws_finalize_write_http_header(wsi, start, &p, end))
		return -1;
	/* small bodies: written at once, then the transaction ends */
	unsigned char *b = xmalloc(LWS_PRE + blen + 1);
	memcpy(b + LWS_PRE, body, blen);
	int w = lws_write(wsi, b + LWS_PRE, blen, LWS_WRITE_HTTP_FINAL);
	free(b);
	if (w < (int)blen)
		return -1;
	if (lws_http_transaction_completed(wsi))
		return -1;
	return 0;
}

int http_request(struct lws *wsi, const char *uri)
{
	if (strcmp(uri, TD_PATH_HEALTH) == 0) {
		char body[256];
		snprintf(body, sizeof body,
			 "{\"ok\":true,\"version\":\"%s\",\"sessions\":%d,\"uptime_s\":%.3f}",
			 TERMD_VERSION, srv.nsessions,
			 (double)(mono_us() - srv.start_mono) / 1e6);
		return http_reply(wsi, 200, "application/json", body);
	}
	if (http_auth(wsi) == AUTH_NONE)
		return http_reply(wsi, 401, "text/plain", "unauthorized\n");
	return http_reply(wsi, 404, "text/plain", "not found\n");
}

/* Every check an upgrade request must pass, in the order its refusals are
 * answered. 0 and *u filled, or an HTTP status and why. */
static int upgrade_check(struct lws *wsi, struct upgrade *u, const char **why)
{
	char path[512];
	memset(u, 0, sizeof *u);
	u->auth = http_auth(wsi);
	if (u->auth == AUTH_NONE) {
		*why = "unauthorized\n";
		return 401;
	}
	uri_path(wsi, path, sizeof path);
	if (strcmp(path, TD_PATH_EVENTS) == 0 || strcmp(path, TD_PATH_EVENTS "/") == 0) {
		u->channel = CHANNEL_EVENTS;
		return 0;
	}
	size_t tl = strlen(TD_PATH_TTY);
	if (strncmp(path, TD_PATH_TTY, tl) != 0) {
		*why = "not found\n";
		return 404;
	}
	const char *name = path + tl;
	size_t nl = strlen(name);
	struct session *s = nl < sizeof u->session && td_valid_session_name(name) ?
			    session_find(name) : NULL;
	if (!s) {
		*why = "no such session\n";
		return 404;
	}
	if ((size_t)s->nviewers >= opts.max_viewers) {
		*why = "this session has as many viewers as termd allows (--max-viewers)\n";
		return 503;
	}
	char mode[16];
	const char *m = lws_get_urlarg_by_name(wsi, "mode=", mode, sizeof mode);
	if (m && strcmp(m, "rw") == 0) {
		if (u->auth != AUTH_FULL) {
			*why = "mode=rw needs the full token\n";
			return 403;
		}
		u->rw = 1;
	} else if (m && strcmp(m, "ro") != 0) {
		*why = "mode is ro or rw\n";
		return 400;
	}
	u->channel = CHANNEL_TTY;
	memcpy(u->session, name, nl + 1);
	return 0;
}

int http_confirm_upgrade(struct lws *wsi)
{
	struct upgrade u;
	const char *why = "";
	int status = upgrade_check(wsi, &u, &why);
	if (status) {
		http_reply(wsi, status, "text/plain", why);
		return -1;
	}
	return 0;
}

int http_upgrade(struct lws *wsi, enum channel ch, struct upgrade *u)
{
	const char *why;
	if (upgrade_check(wsi, u, &why) || u->channel != ch)
		return -1;
	return 0;
}
