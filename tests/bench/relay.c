/* relay.c — owns bench_ports.py's ideal-relay baseline: a minimal loopback
 * TCP relay (poll(), one process) that accepts on 127.0.0.1 (its port printed
 * on stdout), connects each client to 127.0.0.1:APP_PORT, copies the
 * client's bytes upstream and splices the app's answer back through a 1 MiB
 * pipe, filling while the pipe has room and draining as the client takes;
 * a pair ends when either side closes. usage: bench-relay APP_PORT */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#define PIPE_SZ (1 << 20)
#define MAXP 64

struct pair {
	int c, a, pp[2];
	size_t pend, ulen, uoff;   /* bytes in the pipe; client bytes not yet sent up */
	int a_eof, used;
	int full;                  /* the pipe took no more: the app not polled until some went */
	char ub[65536];
};
static struct pair ps[MAXP];

static void pair_close(struct pair *p)
{
	close(p->c);
	close(p->a);
	close(p->pp[0]);
	close(p->pp[1]);
	p->used = 0;
}

/* everything that can move now; -1 the pair is over */
static int pair_move(struct pair *p)
{
	for (;;) {
		int prog = 0;
		if (!p->ulen) {
			ssize_t n = read(p->c, p->ub, sizeof p->ub);
			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
				return -1;
			if (n > 0) {
				p->ulen = (size_t)n;
				p->uoff = 0;
			}
		}
		if (p->ulen) {
			ssize_t n = send(p->a, p->ub + p->uoff, p->ulen, MSG_NOSIGNAL);
			if (n < 0 && errno != EAGAIN && errno != EINTR)
				return -1;
			if (n > 0) {
				p->uoff += (size_t)n;
				p->ulen -= (size_t)n;
				prog = 1;
			}
		}
		if (!p->a_eof && p->pend < PIPE_SZ) {
			ssize_t n = splice(p->a, NULL, p->pp[1], NULL, PIPE_SZ - p->pend,
					   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
				p->a_eof = 1;
			if (n < 0 && errno == EAGAIN && p->pend)
				p->full = 1;   /* (slots, not bytes: it may be full short of PIPE_SZ) */
			if (n > 0) {
				p->pend += (size_t)n;
				prog = 1;
			}
		}
		if (p->pend) {
			ssize_t n = splice(p->pp[0], NULL, p->c, NULL, p->pend,
					   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
				return -1;
			if (n > 0) {
				p->full = 0;
				p->pend -= (size_t)n;
				prog = 1;
			}
		}
		if (p->a_eof && !p->pend)
			return -1;
		if (!prog)
			return 0;
	}
}

static void on_accept(int ls, int app_port)
{
	int c = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (c < 0)
		return;
	struct pair *p = NULL;
	for (int i = 0; i < MAXP && !p; i++)
		if (!ps[i].used)
			p = &ps[i];
	int a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)app_port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int one = 1;
	if (!p || a < 0 || connect(a, (struct sockaddr *)&sa, sizeof sa) < 0) {
		close(c);
		if (a >= 0)
			close(a);
		return;
	}
	fcntl(a, F_SETFL, O_NONBLOCK);
	setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	memset(p, 0, sizeof *p);
	if (pipe2(p->pp, O_NONBLOCK | O_CLOEXEC) < 0) {
		close(c);
		close(a);
		return;
	}
	fcntl(p->pp[1], F_SETPIPE_SZ, PIPE_SZ);
	p->c = c;
	p->a = a;
	p->used = 1;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s APP_PORT\n", argv[0]);
		return 2;
	}
	int app_port = atoi(argv[1]);
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof sa;
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 64) < 0 ||
	    getsockname(ls, (struct sockaddr *)&sa, &l) < 0) {
		perror("relay");
		return 1;
	}
	printf("%d\n", ntohs(sa.sin_port));
	fflush(stdout);
	for (;;) {
		struct pollfd pf[1 + 2 * MAXP];
		int who[1 + 2 * MAXP], n = 0;
		pf[n].fd = ls;
		pf[n].events = POLLIN;
		who[n++] = -1;
		for (int i = 0; i < MAXP; i++) {
			struct pair *p = &ps[i];
			if (!p->used)
				continue;
			pf[n].fd = p->c;
			pf[n].events = (short)((p->ulen ? 0 : POLLIN) | (p->pend ? POLLOUT : 0));
			who[n++] = i;
			pf[n].fd = p->a;
			pf[n].events = (short)((p->ulen ? POLLOUT : 0) |
					       (!p->a_eof && !p->full && p->pend < PIPE_SZ ? POLLIN : 0));
			who[n++] = i;
		}
		if (poll(pf, (nfds_t)n, -1) < 0 && errno != EINTR)
			return 1;
		for (int k = 1; k < n; k++)
			if (pf[k].revents && ps[who[k]].used && pair_move(&ps[who[k]]) < 0)
				pair_close(&ps[who[k]]);
		if (pf[0].revents)
			on_accept(ls, app_port);
	}
}
