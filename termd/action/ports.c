/* ports.c — ports: which TCP sockets the processes of termd's sessions
 * listen on (the kernel's LISTEN sockets asked every 250 ms while sessions
 * exist, through sock_diag, else /proc/net/tcp{,6}; each new socket's inode
 * matched to a process of a session's tree), the
 * port.open/port.close events, the ports.list and port.wait actions, and
 * ports_find for the preview proxy. */
#include "action.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PORTS_TICK_US   250000   /* /proc/net/tcp{,6} read this often */
#define PORTS_MAX       4096     /* listening sockets followed at once */
#define WAIT_RETRY_US   100000   /* port.wait tries to connect this often */
#define CMD_MAX         256      /* bytes of a command line kept */

/* one listening socket termd saw */
struct port_ent {
	unsigned long inode;
	int port;
	char addr[INET6_ADDRSTRLEN];
	int ours;                /* a process of a session holds it */
	int seen;                /* in this tick's reading */
	int told;                /* its port.open was sent */
	char session[TD_SESSION_NAME_MAX + 1];
	pid_t pid;
	char *command;
};

static struct port_ent *ents;
static size_t nents;
static lws_sorted_usec_list_t tick_sul;
static int ticking;

struct pwait {
	struct pending p;        /* first: the registry's handle */
	struct pwait *next;
	int port;
	uint64_t deadline_us;
	double timeout;
	lws_sorted_usec_list_t sul;
};
static struct pwait *waits;

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
	b[n] = 0;
	return xstrdup(b);
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

/* ------------------------------------------------------------- events */

static cJSON *ent_json(const struct port_ent *e)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "port", e->port);
	cJSON_AddStringToObject(o, "address", e->addr);
	cJSON_AddStringToObject(o, "session", e->session);
	cJSON_AddNumberToObject(o, "pid", e->pid);
	cJSON_AddStringToObject(o, "command", e->command ? e->command : "");
	return o;
}

static void emit_open(const struct port_ent *e)
{
	char msg[128];
	snprintf(msg, sizeof msg, "port %d open on %s", e->port, e->addr);
	events_broadcast("port.open", msg, ent_json(e));
}

static void emit_close(const struct port_ent *e)
{
	char msg[128];
	snprintf(msg, sizeof msg, "port %d closed on %s", e->port, e->addr);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "port", e->port);
	cJSON_AddStringToObject(o, "address", e->addr);
	cJSON_AddStringToObject(o, "session", e->session);
	events_broadcast("port.close", msg, o);
}

static void wait_try_all(void);

static void ports_tick(lws_sorted_usec_list_t *sul)
{
	(void)sul;
	ticking = 0;
	for (size_t i = 0; i < nents; i++)
		ents[i].seen = 0;
	read_listening();
	int added = 0;   /* not matched to a process yet */
	for (size_t i = 0; i < nents; i++)
		added += ents[i].seen && ents[i].ours == -1;
	if (added)
		match_new(added);
	size_t w = 0;
	int opened = 0;
	for (size_t i = 0; i < nents; i++) {
		struct port_ent *e = &ents[i];
		if (!e->seen) {
			if (e->told)
				emit_close(e);
			free(e->command);
			continue;
		}
		ents[w++] = *e;
	}
	nents = w;
	/* the new ones' port.open, in the tables' order */
	if (added)
		for (size_t i = 0; i < nents; i++)
			if (ents[i].ours == 1 && !ents[i].told) {
				ents[i].told = 1;
				emit_open(&ents[i]);
				opened = 1;
			}
	if (opened)
		wait_try_all();
	if (srv.sessions && !srv.stopping) {
		ticking = 1;
		server_timer(&tick_sul, ports_tick, PORTS_TICK_US);
	}
}

static void ports_kick(void)
{
	if (ticking || srv.stopping)
		return;
	ticking = 1;
	server_timer(&tick_sul, ports_tick, 1000);
}

static void ports_on_started(struct session *s)
{
	(void)s;
	ports_kick();
}

/* ------------------------------------------------------------ actions */

const char *ports_find(int port)
{
	for (size_t i = 0; i < nents; i++)
		if (ents[i].ours == 1 && ents[i].port == port)
			return ents[i].addr;
	return NULL;
}

static cJSON *ports_array(void)
{
	cJSON *arr = cJSON_CreateArray();
	for (size_t i = 0; i < nents; i++)
		if (ents[i].ours == 1)
			cJSON_AddItemToArray(arr, ent_json(&ents[i]));
	return arr;
}

static int ports_list_action(struct act *a)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON *arr = ports_array();
	int n = cJSON_GetArraySize(arr);
	cJSON_AddItemToObject(ex, "ports", arr);
	char msg[64];
	snprintf(msg, sizeof msg, "%d listening", n);
	events_emit(a->conn, a->id, "ports.list", msg, ex);
	return 0;
}

/* a connection to port on 127.0.0.1, else ::1, succeeds now */
static int port_accepts(int port)
{
	for (int v6 = 0; v6 < 2; v6++) {
		int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		int rc;
		if (v6) {
			struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port),
						  .sin6_addr = IN6ADDR_LOOPBACK_INIT};
			rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
		} else {
			struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
			sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
			rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
		}
		if (rc < 0 && errno == EINPROGRESS) {
			/* loopback answers at once, or within a moment under load */
			struct pollfd pf = {.fd = fd, .events = POLLOUT};
			int err = 0;
			socklen_t el = sizeof err;
			if (poll(&pf, 1, 20) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 &&
			    err == 0)
				rc = 0;
		}
		close(fd);
		if (rc == 0)
			return 1;
	}
	return 0;
}

static void wait_free(struct pwait *w)
{
	lws_sul_cancel(&w->sul);
	pending_del(&w->p);
	for (struct pwait **pp = &waits; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	free(w);
}

static void wait_gone(struct pending *p)
{
	wait_free((struct pwait *)p);
}

static const struct pending_ops wait_ops = {"port.wait", wait_gone};

static void wait_answer(struct pwait *w, int ready)
{
	cJSON *ex = cJSON_CreateObject();
	cJSON_AddNumberToObject(ex, "port", w->port);
	cJSON_AddBoolToObject(ex, "ready", ready);
	buf_t msg = {0};
	if (ready) {
		buf_printf(&msg, "port %d accepts connections", w->port);
		const char *addr = ports_find(w->port);
		for (size_t i = 0; addr && i < nents; i++)
			if (ents[i].ours == 1 && ents[i].port == w->port) {
				cJSON_AddStringToObject(ex, "session", ents[i].session);
				cJSON_AddNumberToObject(ex, "pid", ents[i].pid);
				cJSON_AddStringToObject(ex, "command", ents[i].command);
				break;
			}
	} else {
		cJSON_AddBoolToObject(ex, "timed_out", 1);
		cJSON *arr = ports_array();
		if (port_accepts(w->port))
			buf_printf(&msg, "port %d accepts connections but is not a session's "
				   "(not in ports.list) after %g s", w->port, w->timeout);
		else
			buf_printf(&msg, "nothing accepted connections on port %d within %g s",
				   w->port, w->timeout);
		int n = cJSON_GetArraySize(arr);
		for (int i = 0; i < n; i++) {
			cJSON *o = cJSON_GetArrayItem(arr, i);
			buf_printf(&msg, "%s %d (%s, pid %d, %s)", i ? "," : "; listening instead:",
				   cJSON_GetObjectItem(o, "port")->valueint,
				   cJSON_GetObjectItem(o, "session")->valuestring,
				   cJSON_GetObjectItem(o, "pid")->valueint,
				   cJSON_GetObjectItem(o, "command")->valuestring);
		}
		cJSON_AddItemToObject(ex, "listening", arr);
	}
	pending_emit(&w->p, "port.wait", msg.p ? msg.p : "", ex);
	buf_free(&msg);
	wait_free(w);
}

/* a wait's port is ready: a session's (in ports.list, so the proxy admits
 * it now) and accepting connections */
static int port_ready(int port)
{
	return ports_find(port) && port_accepts(port);
}

static void wait_timer(lws_sorted_usec_list_t *sul)
{
	struct pwait *w = lws_container_of(sul, struct pwait, sul);
	if (port_ready(w->port)) {
		wait_answer(w, 1);
		return;
	}
	uint64_t now = mono_us();
	if (now >= w->deadline_us) {
		wait_answer(w, 0);
		return;
	}
	uint64_t d = w->deadline_us - now;
	server_timer(&w->sul, wait_timer, d < WAIT_RETRY_US ? d : WAIT_RETRY_US);
}

/* a port opened: try the waits now rather than at their next retry */
static void wait_try_all(void)
{
	for (struct pwait *w = waits, *next; w; w = next) {
		next = w->next;
		if (port_ready(w->port))
			wait_answer(w, 1);
	}
}

static int port_wait_action(struct act *a)
{
	long long port = 0;
	double timeout = 30;
	int has;
	if (arg_int(a, "port", &port, &has) < 0)
		return -1;
	if (!has || port < 1 || port > 65535)
		return act_error(a, TD_ERR_BAD_REQUEST, "port must be 1-65535");
	if (arg_number(a, "timeout", &timeout, &has) < 0)
		return -1;
	if (timeout < 0 || timeout > 86400)
		return act_error(a, TD_ERR_BAD_REQUEST, "timeout must be 0-86400 seconds");
	struct pwait *w = xcalloc(1, sizeof *w);
	w->port = (int)port;
	w->timeout = timeout;
	w->deadline_us = mono_us() + (uint64_t)(timeout * 1e6);
	pending_add(&w->p, &wait_ops, a, NULL);
	pending_redo(&w->p, a->args, w->deadline_us);   /* re-armed after an upgrade in place */
	w->next = waits;
	waits = w;
	if (port_ready(w->port)) {
		wait_answer(w, 1);
		return 0;
	}
	if (timeout == 0) {
		wait_answer(w, 0);
		return 0;
	}
	server_timer(&w->sul, wait_timer, WAIT_RETRY_US);
	return 0;
}

void ports_register(void)
{
	static const struct session_listener l = {.started = ports_on_started};
	session_listen(&l);
	static const struct action_def defs[] = {
		{"ports.list", ports_list_action, ACT_READONLY},
		{"port.wait", port_wait_action, 0},
	};
	actions_register(defs, sizeof defs / sizeof defs[0]);
	ports_kick();
}

void ports_shutdown(void)
{
	lws_sul_cancel(&tick_sul);
	ticking = 0;
	while (waits)
		wait_free(waits);
	for (size_t i = 0; i < nents; i++)
		free(ents[i].command);
	free(ents);
	ents = NULL;
	nents = 0;
}
