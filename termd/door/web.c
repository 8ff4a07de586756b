/* web.c — the web page for people: `/` (the session list), `/s/<session>`
 * (one session live), `/r/<file>` (a recording player), the static files
 * under `/assets/` and `/auth` (what the request's token admits). The pages
 * are shells with no data, served without a token; their scripts reach the
 * data through /events, /tty and /record with the token. The files are in
 * termd's binary, gzipped at build time (tools/webembed, share/web/web.mk):
 * sent as they are with Content-Encoding: gzip, or inflated once (zlib) for
 * a client that does not take gzip. */
#include "door.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

struct web_asset {
	const char *name;         /* "list.html", "assets/xterm.js" */
	const char *ctype;
	const unsigned char *gz;
	size_t gzlen, len;        /* gzipped, inflated */
	const char *etag;
};

#include "web_assets.inc"

#define NASSETS (sizeof web_assets / sizeof web_assets[0])

/* inflated copies, made on first need */
static unsigned char *plain[NASSETS];

/* Only this origin: scripts and styles from termd, connections back to it
 * (ws:/wss: to the same host are 'self'). xterm.js sets element styles
 * and adds a <style> for its theme, hence the inline styles. */
static const char csp[] =
	"default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
	"connect-src 'self'; img-src 'self' data:; font-src 'self'; base-uri 'none'; "
	"form-action 'self'; frame-ancestors 'none'";

static const struct web_asset *asset_find(const char *name)
{
	for (size_t i = 0; i < NASSETS; i++)
		if (strcmp(web_assets[i].name, name) == 0)
			return &web_assets[i];
	return NULL;
}

static const unsigned char *asset_plain(const struct web_asset *a)
{
	size_t i = (size_t)(a - web_assets);
	if (plain[i])
		return plain[i];
	unsigned char *out = xmalloc(a->len + 1);
	z_stream z;
	memset(&z, 0, sizeof z);
	if (inflateInit2(&z, 15 + 16) != Z_OK) {
		free(out);
		return NULL;
	}
	z.next_in = (unsigned char *)a->gz;
	z.avail_in = (uInt)a->gzlen;
	z.next_out = out;
	z.avail_out = (uInt)a->len + 1;
	int rc = inflate(&z, Z_FINISH);
	size_t got = z.total_out;
	inflateEnd(&z);
	if (rc != Z_STREAM_END || got != a->len) {
		free(out);
		return NULL;
	}
	plain[i] = out;
	return out;
}

/* Does the client take gzip? (Accept-Encoding names it without q=0) */
static int takes_gzip(struct http_txn *t)
{
	char ae[256];
	if (lws_hdr_copy(t->wsi, ae, sizeof ae, WSI_TOKEN_HTTP_ACCEPT_ENCODING) <= 0)
		return 0;
	for (char *p = ae; (p = strstr(p, "gzip")) != NULL; p += 4) {
		const char *q = p + 4;
		while (*q == ' ')
			q++;
		if (*q == ';') {
			q++;
			while (*q == ' ')
				q++;
			if ((q[0] == 'q' || q[0] == 'Q') && q[1] == '=' && strtod(q + 2, NULL) <= 0.0)
				continue;   /* gzip;q=0: refused */
		}
		return 1;
	}
	return 0;
}

static void not_found(struct http_txn *t)
{
	http_answer_text(t, 404, "not found\n");
}

static void serve(struct http_txn *t, const char *name)
{
	const struct web_asset *a = asset_find(name);
	if (!a) {
		not_found(t);
		return;
	}
	http_set_header(t, "cache-control", "no-cache");
	http_set_header(t, "etag", a->etag);
	http_set_header(t, "vary", "Accept-Encoding");
	http_set_header(t, "x-content-type-options", "nosniff");
	http_set_header(t, "referrer-policy", "no-referrer");
	http_set_header(t, "content-security-policy", csp);
	char inm[128];
	if (lws_hdr_copy(t->wsi, inm, sizeof inm, WSI_TOKEN_HTTP_IF_NONE_MATCH) > 0 &&
	    strcmp(inm, a->etag) == 0) {
		http_answer(t, 304, a->ctype, "", 0);
		return;
	}
	if (takes_gzip(t)) {
		http_set_header(t, "content-encoding", "gzip");
		http_answer_static(t, 200, a->ctype, a->gz, a->gzlen);
		return;
	}
	const unsigned char *p = asset_plain(a);
	if (!p) {
		http_answer_text(t, 500, "cannot inflate the embedded file\n");
		return;
	}
	http_answer_static(t, 200, a->ctype, p, a->len);
}

static void page_list(struct http_txn *t)
{
	serve(t, "list.html");
}

static void page_session(struct http_txn *t)
{
	const char *name = t->path + 3;   /* "/s/" */
	if (!td_valid_session_name(name)) {
		not_found(t);
		return;
	}
	serve(t, "term.html");
}

/* a recording's file name: one path segment, no dot first */
static void page_replay(struct http_txn *t)
{
	const char *f = t->path + 3;      /* "/r/" */
	if (!*f || *f == '.' || strchr(f, '/')) {
		not_found(t);
		return;
	}
	serve(t, "play.html");
}

static void assets(struct http_txn *t)
{
	serve(t, t->path + 1);   /* "assets/…": only embedded names match */
}

/* What the request's token admits, so the page can say so before it tries:
 * 200 {"auth":"full"|"view"}, or 401 {"auth":"none"}. */
static void auth(struct http_txn *t)
{
	static const char *names[] = {"none", "view", "full"};
	char body[64];
	int n = snprintf(body, sizeof body, "{\"auth\":\"%s\"}", names[t->auth]);
	http_set_header(t, "cache-control", "no-store");
	http_answer(t, t->auth == AUTH_NONE ? 401 : 200, "application/json", body, (size_t)n);
}

void web_register(void)
{
	static const struct http_route routes[] = {
		{"GET", "/", NULL, page_list, 0, TD_API_TERMD},
		{"GET", "/s/", NULL, page_session, 1, TD_API_TERMD},
		{"GET", "/r/", NULL, page_replay, 1, TD_API_TERMD},
		{"GET", "/assets/", NULL, assets, 1, TD_API_TERMD},
		{"GET", "/auth", NULL, auth, 0, TD_API_TERMD},
	};
	http_routes_register(routes, sizeof routes / sizeof routes[0]);
}

void web_shutdown(void)
{
	for (size_t i = 0; i < NASSETS; i++) {
		free(plain[i]);
		plain[i] = NULL;
	}
}
