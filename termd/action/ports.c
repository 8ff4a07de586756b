/* ports.c — ports: the scan of the sessions' listening sockets
 * (core/portscan.c) run on a 250 ms timer while sessions exist, the
 * port.open/port.close events, the ports.list and port.wait actions, and
 * ports_find for the preview proxy. */
#include "action.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PORTS_TICK_US   250000   /* /proc/net/tcp{,6} read this often */
#define WAIT_RETRY_US   100000   /* port.wait tries to connect this often */

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

/* a socket gone: its port.close when its port.open was sent */
static void emit_gone(const struct port_ent *e)
{
	if (e->told)
		emit_close(e);
}

static void ports_tick(lws_sorted_usec_list_t *sul)
{
	(void)sul;
	ticking = 0;
	int added = portscan_update(emit_gone);
	size_t nents;
	struct port_ent *ents = portscan_ents(&nents);
	int opened = 0;
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
	size_t nents;
	struct port_ent *ents = portscan_ents(&nents);
	for (size_t i = 0; i < nents; i++)
		if (ents[i].ours == 1 && ents[i].port == port)
			return ents[i].addr;
	return NULL;
}

static cJSON *ports_array(void)
{
	size_t nents;
	struct port_ent *ents = portscan_ents(&nents);
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
		size_t nents;
		struct port_ent *ents = portscan_ents(&nents);
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
	/* a fresh start (no session handed over): what listens already is
	 * termd's own or another program's */
	if (!srv.inherited)
		portscan_baseline();
	ports_kick();
}

void ports_shutdown(void)
{
	lws_sul_cancel(&tick_sul);
	ticking = 0;
	while (waits)
		wait_free(waits);
	portscan_free();
}
