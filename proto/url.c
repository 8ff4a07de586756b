/* url.c — the client library's first layer: base URLs (ws://, wss://,
 * unix:) and their defaults ($TERMD_URL, $TERMD_TOKEN), the one token-file
 * reader that termd and its clients share, and the error-text helpers the
 * rest of the library uses. No sockets: termd links this file for the
 * token reader alone. */
#include "client-int.h"
#include "proto.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void td_seterr(char *err, size_t errlen, const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

void td_errno_str(int e, char *out, size_t n)
{
	snprintf(out, n, "%s", strerror(e));
	if (out[0] && isupper((unsigned char)out[0]) && !(out[1] && isupper((unsigned char)out[1])))
		out[0] = (char)tolower((unsigned char)out[0]);
}

/* ---- URLs and defaults ---- */

int td_url_parse(const char *url, td_url *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	if (!url || !*url) {
		td_seterr(err, errlen, "empty URL");
		return -1;
	}
	const char *p = url;
	if (!strncmp(p, "unix:", 5) || p[0] == '/') {
		if (p[0] != '/')
			p += 5;
		if (!strncmp(p, "//", 2) && p[2] == '/')
			p += 2;   /* unix:///path */
		if (!*p) {
			td_seterr(err, errlen, "%s: missing socket path", url);
			return -1;
		}
		if (strlen(p) >= sizeof out->sock) {
			td_seterr(err, errlen, "%s: socket path too long", url);
			return -1;
		}
		out->is_unix = 1;
		strcpy(out->sock, p);
		return 0;
	}
	if (!strncasecmp(p, "wss://", 6)) {
		p += 6;
		out->tls = 1;
	} else if (!strncasecmp(p, "https://", 8)) {
		p += 8;
		out->tls = 1;
	} else if (!strncasecmp(p, "ws://", 5))
		p += 5;
	else if (!strncasecmp(p, "http://", 7))
		p += 7;
	else if (strstr(p, "://")) {
		td_seterr(err, errlen,
			  "%s: unsupported scheme (use ws://HOST:PORT, wss://HOST:PORT or unix:/PATH)", url);
		return -1;
	}

	size_t alen = strcspn(p, "/?#");
	const char *rest = p + alen;
	if (memchr(p, '@', alen)) {
		td_seterr(err, errlen, "%s: user info in URL is not supported", url);
		return -1;
	}
	const char *host = p, *hend, *port = NULL;
	if (*p == '[') {
		host = p + 1;
		hend = memchr(host, ']', alen - 1);
		if (!hend) {
			td_seterr(err, errlen, "%s: unterminated '[' in host", url);
			return -1;
		}
		if (hend + 1 < p + alen) {
			if (hend[1] != ':') {
				td_seterr(err, errlen, "%s: bad host", url);
				return -1;
			}
			port = hend + 2;
		}
	} else {
		hend = memchr(p, ':', alen);
		if (hend)
			port = hend + 1;
		else
			hend = p + alen;
	}
	size_t hlen = (size_t)(hend - host);
	if (hlen == 0) {
		td_seterr(err, errlen, "%s: missing host", url);
		return -1;
	}
	if (hlen >= sizeof out->host) {
		td_seterr(err, errlen, "%s: host name too long", url);
		return -1;
	}
	memcpy(out->host, host, hlen);
	out->host[hlen] = '\0';
	out->port = out->tls ? 443 : TD_DEFAULT_PORT;
	if (port) {
		size_t plen = (size_t)(p + alen - port);
		long v = 0;
		if (plen == 0 || plen > 5) {
			td_seterr(err, errlen, "%s: bad port", url);
			return -1;
		}
		for (size_t i = 0; i < plen; i++) {
			if (!isdigit((unsigned char)port[i])) {
				td_seterr(err, errlen, "%s: bad port", url);
				return -1;
			}
			v = v * 10 + (port[i] - '0');
		}
		if (v < 1 || v > 65535) {
			td_seterr(err, errlen, "%s: port out of range", url);
			return -1;
		}
		out->port = (int)v;
	}
	if (*rest == '?' || *rest == '#') {
		td_seterr(err, errlen, "%s: a base URL takes no query or fragment", url);
		return -1;
	}
	size_t rlen = strcspn(rest, "?#");
	if (rest[rlen]) {
		td_seterr(err, errlen, "%s: a base URL takes no query or fragment", url);
		return -1;
	}
	while (rlen && rest[rlen - 1] == '/')
		rlen--;
	if (rlen >= sizeof out->prefix) {
		td_seterr(err, errlen, "%s: path too long", url);
		return -1;
	}
	memcpy(out->prefix, rest, rlen);
	out->prefix[rlen] = '\0';
	return 0;
}

const char *td_default_url(void)
{
	const char *u = getenv("TERMD_URL");
	return u && *u ? u : TD_DEFAULT_URL;
}

const char *td_default_token(void)
{
	const char *t = getenv("TERMD_TOKEN");
	return t && *t ? t : NULL;
}

/* The token file rule, the same for termd (--token-file, --view-token-file)
 * and its clients (--token-file): the token is the file's first line with
 * the whitespace at both ends (spaces, tabs, CR) removed. Later lines are
 * ignored. An empty first line, a first line longer than TD_TOKEN_MAX bytes
 * or one holding a NUL byte is an error, never a different token. */
char *td_read_token_file(const char *path, char *err, size_t errlen)
{
	char e[128];
	FILE *f = fopen(path, "re");
	if (!f) {
		td_errno_str(errno, e, sizeof e);
		td_seterr(err, errlen, "token file %s: %s", path, e);
		return NULL;
	}
	char *line = NULL;
	size_t cap = 0;
	errno = 0;
	ssize_t n = getline(&line, &cap, f);
	int saved = errno;
	int bad = n < 0 && ferror(f);
	fclose(f);
	char *tok = NULL;
	if (bad) {
		td_errno_str(saved ? saved : EIO, e, sizeof e);
		td_seterr(err, errlen, "token file %s: %s", path, e);
	} else if (n > 0 && memchr(line, '\0', (size_t)n)) {
		td_seterr(err, errlen, "token file %s: the first line holds a NUL byte", path);
	} else {
		size_t len = n > 0 ? (size_t)n : 0;
		const char *s = line ? line : "";
		while (len && isspace((unsigned char)s[len - 1]))
			len--;
		while (len && isspace((unsigned char)*s)) {
			s++;
			len--;
		}
		if (!len)
			td_seterr(err, errlen, "token file %s: empty (the token is its first line)", path);
		else if (len > TD_TOKEN_MAX)
			td_seterr(err, errlen, "token file %s: the token is longer than %d bytes", path,
				  TD_TOKEN_MAX);
		else
			tok = xstrndup(s, len);
	}
	free(line);
	return tok;
}
