/* portscan.c — which TCP sockets the processes of termd's sessions listen
 * on: the kernel's LISTEN sockets (through sock_diag, else
 * /proc/net/tcp{,6}), each new socket's inode matched to a process of a
 * session's tree (procscan.c's walk), the table of them kept from one
 * reading to the next and across an upgrade in place (its part of the
 * hand-over record). No events and no timer: action/ports.c reads it. */
#include "core.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PORTS_MAX       4096     /* listening sockets followed at once */
#define CMD_MAX         256      /* bytes of a command line kept */

static struct port_ent *ents;
static size_t nents;

/* ------------------------------------------------------------ reading */

/* "0100007F:1F90" (v4) or 32 hex digits + ":PORT" (v6): the address as
 * text and the port; -1 when the line is not one */
static int parse_local(const char *s, int v6, char *addr, int *port)
{
	const char *colon = strchr(s, ':');
	if (!colon)
		return -1;
	size_t hexlen = (size_t)(colon - s);
	if (hexlen != (v6 ? 32u : 8u))
		return -1;
	char *end;
	long p = strtol(colon + 1, &end, 16);
	if (end == colon + 1 || p <= 0 || p > 65535)
		return -1;
	*port = (int)p;
	if (!v6) {
		char h[9];
		memcpy(h, s, 8);
		h[8] = 0;
		struct in_addr a;
		a.s_addr = (uint32_t)strtoul(h, NULL, 16);   /* the kernel prints the raw word */
		inet_ntop(AF_INET, &a, addr, INET6_ADDRSTRLEN);
		return 0;
	}
	struct in6_addr a;
	for (int i = 0; i < 4; i++) {
		char h[9];
		memcpy(h, s + 8 * i, 8);
		h[8] = 0;
		uint32_t w = (uint32_t)strtoul(h, NULL, 16);
		memcpy(a.s6_addr + 4 * i, &w, 4);
	}
	inet_ntop(AF_INET6, &a, addr, INET6_ADDRSTRLEN);
	return 0;
}

static struct port_ent *ent_by_inode(unsigned long inode)
{
	for (size_t i = 0; i < nents; i++)
		if (ents[i].inode == inode)
			return &ents[i];
	return NULL;
}

/* one LISTEN socket seen this tick: known (seen again), or added with
 * ours = -1 (not matched yet); 1 when it is new */
static int note_socket(unsigned long inode, int port, const char *addr)
{
	if (inode == 0 || port <= 0)
		return 0;
	struct port_ent *e = ent_by_inode(inode);
	if (e) {
		e->seen = 1;
		return 0;
	}
	if (nents >= PORTS_MAX)
		return 0;
	struct port_ent n = {0};
	n.inode = inode;
	n.port = port;
	snprintf(n.addr, sizeof n.addr, "%s", addr);
	n.ours = -1;
	n.seen = 1;
	ents = xrealloc(ents, (nents + 1) * sizeof *ents);
	ents[nents++] = n;
	return 1;
}

/* The kernel's LISTEN sockets of one family through NETLINK_SOCK_DIAG
 * (it sends the listening ones only: cheap however many connections the
 * machine has): how many are new, or -1 when sock_diag is not there. */
static int diag_read(int family)
{
	int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (fd < 0)
		return -1;
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 r;
	} req;
	memset(&req, 0, sizeof req);
	req.nlh.nlmsg_len = sizeof req;
	req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	req.r.sdiag_family = (uint8_t)family;
	req.r.sdiag_protocol = IPPROTO_TCP;
	req.r.idiag_states = 1u << 10;   /* TCP_LISTEN */
	struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
	if (sendto(fd, &req, sizeof req, 0, (struct sockaddr *)&sa, sizeof sa) < 0) {
		close(fd);
		return -1;
	}
	static char buf[32768] __attribute__((aligned(8)));
	int added = 0;
	for (;;) {
		ssize_t n = recv(fd, buf, sizeof buf, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			close(fd);
			return -1;
		}
		for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n);
		     h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_type == NLMSG_DONE) {
				close(fd);
				return added;
			}
			if (h->nlmsg_type == NLMSG_ERROR) {
				close(fd);
				return -1;
			}
			struct inet_diag_msg *m = NLMSG_DATA(h);
			if (m->idiag_state != 10)
				continue;
			char addr[INET6_ADDRSTRLEN];
			inet_ntop(family, m->id.idiag_src, addr, sizeof addr);
			added += note_socket(m->idiag_inode, ntohs(m->id.idiag_sport), addr);
		}
	}
}

/* LISTEN sockets of one /proc table (where sock_diag is not there): how
 * many are new */
static int read_table(const char *path, int v6)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	char line[512];
	int added = 0;
	if (!fgets(line, sizeof line, f)) {   /* the header */
		fclose(f);
		return 0;
	}
	while (fgets(line, sizeof line, f)) {
		char local[64], rem[64], addr[INET6_ADDRSTRLEN];
		unsigned st;
		unsigned long inode;
		int port;
		/* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
		if (sscanf(line, " %*s %63s %63s %x %*s %*s %*s %*s %*s %lu", local, rem, &st,
			   &inode) != 4)
			continue;
		if (st != 0x0A || inode == 0 || parse_local(local, v6, addr, &port) < 0)
			continue;
		added += note_socket(inode, port, addr);
	}
	fclose(f);
	return added;
}

/* every LISTEN socket, IPv4 and IPv6: how many are new */
static int read_listening(void)
{
	static int no_diag;
	if (!no_diag) {
		int a = diag_read(AF_INET), b = a < 0 ? -1 : diag_read(AF_INET6);
		if (a >= 0 && b >= 0)
			return a + b;
		no_diag = 1;   /* (what it marked seen is seen again below) */
	}
	return read_table("/proc/net/tcp", 0) + read_table("/proc/net/tcp6", 1);
}

/* ---------------------------------------------------- process matching */

/* the session whose process tree pid is in: an ancestor is a session's
 * leader, or (reparented to init) its session id is a leader's */
static struct session *owner_of(const struct proc_info *tab, int n, const struct proc_info *p)
{
	const struct proc_info *cur = p;
	for (int depth = 0; cur && depth < 128; depth++) {
		for (struct session *s = srv.sessions; s; s = s->next)
			if (s->pty.alive && s->pty.pid > 0 && s->pty.pid == cur->pid)
				return s;
		if (cur->ppid <= 1)
			break;
		cur = procscan_find(tab, n, cur->ppid);
	}
	for (struct session *s = srv.sessions; s; s = s->next)
		if (s->pty.alive && s->pty.pid > 0 && s->pty.pid == p->sid)
			return s;
	return NULL;
}

static char *read_cmdline(pid_t pid)
{
	char path[64], b[CMD_MAX];
	snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return xstrdup("");
	ssize_t n = read(fd, b, sizeof b - 1);
	close(fd);
	if (n < 0)
		n = 0;
	while (n > 0 && b[n - 1] == 0)
		n--;
	for (ssize_t i = 0; i < n; i++)
		if (b[i] == 0)
			b[i] = ' ';
	/* valid UTF-8 (a name cut inside a character, or not text at all,
	 * would make port.open a frame no client can read) and no control
	 * character */
	buf_t t = {0};
	buf_put_text(&t, b, (size_t)n);
	return t.p ? t.p : xstrdup("");
}

/* scan_fd's: the session and how many sockets are still to match */
struct fdscan {
	struct session *s;
	int left, found;
};

/* one descriptor of a session's process: a socket not matched yet is its */
static int scan_fd(pid_t pid, long fd, const char *target, void *arg)
{
	struct fdscan *f = arg;
	unsigned long inode;
	(void)fd;
	if (sscanf(target, "socket:[%lu]", &inode) != 1)
		return 0;
	struct port_ent *e = ent_by_inode(inode);
	if (!e || e->ours != -1)
		return 0;
	e->ours = 1;
	snprintf(e->session, sizeof e->session, "%s", f->s->name);
	e->pid = pid;
	e->command = read_cmdline(pid);
	f->found++;
	return f->found >= f->left;
}

/* one descriptor of termd itself: a socket not matched yet is termd's own
 * (its listeners, kept across an upgrade in place), never a session's,
 * whoever else holds a copy (the first shell between its fork and its
 * exec, or a program that took one) */
static int scan_own_fd(pid_t pid, long fd, const char *target, void *arg)
{
	int *unmatched = arg;
	unsigned long inode;
	(void)pid;
	(void)fd;
	if (sscanf(target, "socket:[%lu]", &inode) != 1)
		return 0;
	struct port_ent *e = ent_by_inode(inode);
	if (!e || e->ours != -1)
		return 0;
	e->ours = 0;
	return --*unmatched <= 0;
}

/* match every new socket to a process of a session, or mark it foreign */
static void match_new(int unmatched)
{
	procscan_fds(getpid(), scan_own_fd, &unmatched);
	if (unmatched <= 0)
		return;
	struct proc_info *tab;
	int n = procscan_all(&tab);
	if (n < 0)
		return;
	for (int i = 0; i < n && unmatched > 0; i++) {
		struct session *s = owner_of(tab, n, &tab[i]);
		if (!s)
			continue;
		struct fdscan f = {.s = s, .left = unmatched};
		procscan_fds(tab[i].pid, scan_fd, &f);
		unmatched -= f.found;
	}
	free(tab);
	for (size_t i = 0; i < nents; i++)
		if (ents[i].ours == -1)
			ents[i].ours = 0;   /* someone else's (termd's own listener, ...) */
}

/* ------------------------------------------------------------- the table */

int portscan_update(void (*gone)(const struct port_ent *e))
{
	for (size_t i = 0; i < nents; i++)
		ents[i].seen = 0;
	read_listening();
	int added = 0;   /* not matched to a process yet */
	for (size_t i = 0; i < nents; i++)
		added += ents[i].seen && ents[i].ours == -1;
	if (added)
		match_new(added);
	size_t w = 0;
	for (size_t i = 0; i < nents; i++) {
		struct port_ent *e = &ents[i];
		if (!e->seen) {
			gone(e);
			free(e->command);
			continue;
		}
		ents[w++] = *e;
	}
	nents = w;
	return added;
}

void portscan_baseline(void)
{
	read_listening();
	for (size_t i = 0; i < nents; i++)
		if (ents[i].ours == -1)
			ents[i].ours = 0;
}

struct port_ent *portscan_ents(size_t *n)
{
	*n = nents;
	return ents;
}

/* ------------------------------------------------- upgrade in place */

/* The table goes across an upgrade in place (handover.c) as the part
 * "ports": {"version": 1, "sockets": [...]}, each socket with its inode,
 * whose it is and whether its port.open was sent. The new image's first
 * reading then sees what closed meanwhile (its port.close comes) and what
 * it already told (no second port.open). A part of a version this termd
 * does not know is not read: the table is built again by scanning. */
#define PORTS_PART_VERSION 1

cJSON *portscan_handover_save(void)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "version", PORTS_PART_VERSION);
	cJSON *arr = cJSON_AddArrayToObject(o, "sockets");
	for (size_t i = 0; i < nents; i++) {
		const struct port_ent *e = &ents[i];
		cJSON *x = cJSON_CreateObject();
		cJSON_AddNumberToObject(x, "inode", (double)e->inode);
		cJSON_AddNumberToObject(x, "port", e->port);
		cJSON_AddStringToObject(x, "address", e->addr);
		cJSON_AddNumberToObject(x, "ours", e->ours);
		cJSON_AddBoolToObject(x, "told", e->told != 0);
		cJSON_AddStringToObject(x, "session", e->session);
		cJSON_AddNumberToObject(x, "pid", e->pid);
		cJSON_AddStringToObject(x, "command", e->command ? e->command : "");
		cJSON_AddItemToArray(arr, x);
	}
	return o;
}

void portscan_handover_load(const cJSON *j)
{
	const cJSON *v = cJSON_GetObjectItem(j, "version");
	if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > PORTS_PART_VERSION)
		return;
	portscan_free();
	const cJSON *x;
	cJSON_ArrayForEach(x, cJSON_GetObjectItem(j, "sockets")) {
		const cJSON *inode = cJSON_GetObjectItem(x, "inode"), *port = cJSON_GetObjectItem(x, "port");
		const cJSON *addr = cJSON_GetObjectItem(x, "address"), *ours = cJSON_GetObjectItem(x, "ours");
		const cJSON *sess = cJSON_GetObjectItem(x, "session"), *pid = cJSON_GetObjectItem(x, "pid");
		const cJSON *cmd = cJSON_GetObjectItem(x, "command");
		if (!cJSON_IsNumber(inode) || inode->valuedouble < 1 || !cJSON_IsNumber(port) ||
		    port->valuedouble < 1 || port->valuedouble > 65535 || !cJSON_IsString(addr) ||
		    nents >= PORTS_MAX || ent_by_inode((unsigned long)inode->valuedouble))
			continue;
		struct port_ent n = {0};
		n.inode = (unsigned long)inode->valuedouble;
		n.port = (int)port->valuedouble;
		snprintf(n.addr, sizeof n.addr, "%s", addr->valuestring);
		n.ours = cJSON_IsNumber(ours) && ours->valuedouble == 1 ? 1 : 0;
		n.told = n.ours && cJSON_IsTrue(cJSON_GetObjectItem(x, "told"));
		snprintf(n.session, sizeof n.session, "%s", cJSON_IsString(sess) ? sess->valuestring : "");
		n.pid = cJSON_IsNumber(pid) ? (pid_t)pid->valuedouble : 0;
		n.command = xstrdup(cJSON_IsString(cmd) ? cmd->valuestring : "");
		ents = xrealloc(ents, (nents + 1) * sizeof *ents);
		ents[nents++] = n;
	}
}

void portscan_free(void)
{
	for (size_t i = 0; i < nents; i++)
		free(ents[i].command);
	free(ents);
	ents = NULL;
	nents = 0;
}
