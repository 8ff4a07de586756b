/* share/bundle/multicall.c — the bundle's one binary: main() picks termd, termctl or od-attach by the
 * name it was started as (bin/termctl and bin/od-attach are symlinks to bin/termd), and for the two
 * clients finds CA certificates and terminfo where the image keeps them, else in the bundle's share/.
 * termd-healthz [HOST:PORT] is the images' readiness probe: GET /healthz, exit 0 on a 200
 * (and each dial-out link's state printed).
 * Compiled only for the bundle (share/bundle/bundle.mk); the three mains are renamed there. */
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/time.h>

int termd_main(int argc, char **argv);
int termctl_main(int argc, char **argv);
int odattach_main(int argc, char **argv);

/* the bundle's top folder (bin/..), from /proc/self/exe, else from argv[0] */
static int bundle_root(const char *argv0, char *out, size_t len)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = 0;
	} else if (strchr(argv0, '/') && realpath(argv0, exe)) {
		/* realpath resolved the symlink to bin/termd */
	} else {
		return -1;
	}
	char *slash = strrchr(exe, '/');
	if (!slash)
		return -1;
	*slash = 0;                      /* .../bin */
	slash = strrchr(exe, '/');
	if (!slash)
		return -1;
	if (slash == exe)
		slash[1] = 0;            /* the binary in /bin: the root is / */
	else
		*slash = 0;
	if (strlen(exe) >= len)
		return -1;
	strcpy(out, exe);
	return 0;
}

/* CA certificates: the image's bundle file where it has one (the usual places of Debian/Ubuntu/
 * Alpine, RHEL/Fedora, SUSE), else the bundle's own. SSL_CERT_FILE/SSL_CERT_DIR set by the user win. */
static void find_cacerts(const char *root)
{
	static const char *const files[] = {
		"/etc/ssl/certs/ca-certificates.crt",
		"/etc/pki/tls/certs/ca-bundle.crt",
		"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
		"/etc/ssl/ca-bundle.pem",
		"/etc/ssl/cert.pem",
	};
	if (getenv("SSL_CERT_FILE") || getenv("SSL_CERT_DIR"))
		return;
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
		if (access(files[i], R_OK) == 0) {
			setenv("SSL_CERT_FILE", files[i], 1);
			return;
		}
	char own[PATH_MAX];
	if (root && snprintf(own, sizeof own, "%s/share/ssl/ca-certificates.crt", root) < (int)sizeof own
	    && access(own, R_OK) == 0)
		setenv("SSL_CERT_FILE", own, 1);
}

/* terminfo: the image's directories first, then the bundle's share/terminfo (ncurses also has the
 * common terminals compiled in). A TERMINFO set by the user is searched before all of these. */
static void find_terminfo(const char *root)
{
	static const char sys[] = "/etc/terminfo:/lib/terminfo:/usr/share/terminfo:/usr/lib/terminfo";
	const char *cur = getenv("TERMINFO_DIRS");
	char v[3 * PATH_MAX];
	int n;
	if (!root)
		return;
	if (cur && *cur)
		n = snprintf(v, sizeof v, "%s:%s/share/terminfo", cur, root);
	else
		n = snprintf(v, sizeof v, "%s:%s/share/terminfo", sys, root);
	if (n > 0 && (size_t)n < sizeof v)
		setenv("TERMINFO_DIRS", v, 1);
}

/* A JSON string's body at p (just after its opening quote) into out, escapes kept as they
 * are (termd writes the URLs and errors; this is for a person to read); the end of it. */
static const char *healthz_str(const char *p, char *out, size_t n)
{
	size_t k = 0;
	while (*p && *p != '"') {
		if (*p == '\\' && p[1]) {
			if (k + 1 < n)
				out[k++] = *p;
			p++;
		}
		if (k + 1 < n)
			out[k++] = *p;
		p++;
	}
	out[k] = 0;
	return p;
}

/* One line per dial-out link in /healthz's body (PROTOCOL.md section 10):
 * "link URL connected" or "link URL down: LAST_ERROR". */
static void healthz_links(const char *body)
{
	const char *p = strstr(body, "\"links\":[");
	while (p && (p = strstr(p, "{\"url\":\""))) {
		char url[512], err[512] = "";
		p = healthz_str(p + 8, url, sizeof url);
		const char *c = strstr(p, "\"connected\":");
		int up = c && strncmp(c + 12, "true", 4) == 0;
		const char *e = strstr(p, "\"last_error\":");
		const char *next = strstr(p, "{\"url\":\"");
		if (e && (!next || e < next) && e[13] == '"')
			healthz_str(e + 14, err, sizeof err);
		if (up)
			printf("link %s connected\n", url);
		else
			printf("link %s down%s%s\n", url, err[0] ? ": " : "", err);
	}
}

/* termd-healthz [HOST:PORT]: exit 0 if termd answers GET /healthz with 200 within 3 s, else 1
 * (a probe for images with no curl or wget); prints "ok", then each dial-out link's state */
static int healthz_main(int argc, char **argv)
{
	const char *addr = argc > 1 ? argv[1] : "127.0.0.1:8421";
	char host[256], req[512], ans[16384];
	const char *colon = strrchr(addr, ':');
	if (argc > 2 || !colon || colon == addr || (size_t)(colon - addr) >= sizeof host || !colon[1]) {
		fprintf(stderr, "usage: termd-healthz [HOST:PORT]   (default 127.0.0.1:8421)\n");
		return 2;
	}
	memcpy(host, addr, colon - addr);
	host[colon - addr] = 0;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	int rc = getaddrinfo(host, colon + 1, &hints, &ai);
	if (rc != 0) {
		fprintf(stderr, "termd-healthz: %s: %s\n", addr, gai_strerror(rc));
		return 1;
	}
	struct timeval tv = {.tv_sec = 3};
	size_t got = 0;
	/* every address the name has (localhost: ::1 and 127.0.0.1), until one answers */
	for (struct addrinfo *a = ai; a && !got; a = a->ai_next) {
		int fd = socket(a->ai_family, SOCK_STREAM, 0);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
		int n = snprintf(req, sizeof req, "GET /healthz HTTP/1.0\r\nHost: %s\r\n\r\n", addr);
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 && write(fd, req, n) == n) {
			ssize_t r;
			while (got < sizeof ans - 1 && (r = read(fd, ans + got, sizeof ans - 1 - got)) > 0)
				got += r;
		}
		close(fd);
	}
	freeaddrinfo(ai);
	ans[got] = 0;
	if (strncmp(ans, "HTTP/1.", 7) == 0 && strncmp(ans + 8, " 200", 4) == 0) {
		puts("ok");
		const char *body = strstr(ans, "\r\n\r\n");
		if (body)
			healthz_links(body + 4);
		return 0;
	}
	fprintf(stderr, "termd-healthz: no 200 from http://%s/healthz\n", addr);
	return 1;
}

int main(int argc, char **argv)
{
	const char *argv0 = argc > 0 && argv[0] ? argv[0] : "termd";
	const char *name = strrchr(argv0, '/');
	name = name ? name + 1 : argv0;
	char rootbuf[PATH_MAX];
	const char *root = bundle_root(argv0, rootbuf, sizeof rootbuf) == 0 ? rootbuf : NULL;

	if (strcmp(name, "termctl") == 0) {
		find_cacerts(root);
		return termctl_main(argc, argv);
	}
	if (strcmp(name, "od-attach") == 0) {
		find_cacerts(root);
		find_terminfo(root);
		return odattach_main(argc, argv);
	}
	if (strcmp(name, "termd-healthz") == 0)
		return healthz_main(argc, argv);
	return termd_main(argc, argv);
}
