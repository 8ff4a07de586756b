/* net/front/hand.c — the hand-off queue: an answer's body the preview proxy
 * hands over (front_take_body, from the loop's thread: the app's socket and
 * the bytes left) queued under a mutex for the front's thread, an eventfd
 * saying so; each given to the front's connection whose connection to lws
 * carries its id in its abstract name (fr_up_name), else its socket closed. */
#include "front.h"
#include "net.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>

/* answers' bodies the preview proxy hands over (front_take_body, from the
 * loop's thread): queued under handmu, handfd (an eventfd) says so */
struct handmsg {
	uint64_t id;
	int fd;
	unsigned long long rem;
};
static pthread_mutex_t handmu = PTHREAD_MUTEX_INITIALIZER;
static struct handmsg *handq;
static size_t nhandq, caphandq;
static int handfd = -1;
static struct fwatch handw;

/* the abstract name a connection of the front's to lws is bound to: one
 * whose answer's body may be handed over (front_take_body) */
int fr_up_name(struct sockaddr_un *su, uint64_t id)
{
	memset(su, 0, sizeof *su);
	su->sun_family = AF_UNIX;
	int n = snprintf(su->sun_path + 1, sizeof su->sun_path - 1, "termd-front-%d-%llu",
			 (int)getpid(), (unsigned long long)id);
	return (int)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int front_take_body(int lws_fd, int fd, unsigned long long rem)
{
	struct sockaddr_un su, me;
	socklen_t l = sizeof su;
	if (!fr_running() || handfd < 0 || getpeername(lws_fd, (struct sockaddr *)&su, &l) < 0 ||
	    su.sun_family != AF_UNIX || l <= offsetof(struct sockaddr_un, sun_path) + 1 ||
	    su.sun_path[0])
		return -1;
	/* the id in the peer's name, when that is the front's own kind */
	char *end;
	size_t plen = (size_t)fr_up_name(&me, 0) - offsetof(struct sockaddr_un, sun_path) - 2;
	size_t nl = l - offsetof(struct sockaddr_un, sun_path);
	if (nl <= plen + 1 || memcmp(su.sun_path, me.sun_path, plen + 1) != 0)
		return -1;
	char num[24];
	if (nl - 1 - plen >= sizeof num)
		return -1;
	memcpy(num, su.sun_path + 1 + plen, nl - 1 - plen);
	num[nl - 1 - plen] = 0;
	unsigned long long id = strtoull(num, &end, 10);
	if (!id || *end)
		return -1;
	pthread_mutex_lock(&handmu);
	if (nhandq == caphandq) {
		caphandq = caphandq ? caphandq * 2 : 16;
		handq = xrealloc(handq, caphandq * sizeof *handq);
	}
	handq[nhandq++] = (struct handmsg){id, fd, rem};
	pthread_mutex_unlock(&handmu);
	uint64_t one = 1;
	if (write(handfd, &one, sizeof one) < 0) {
		/* (the counter full: a wakeup is due anyway) */
	}
	return 0;
}

/* the bodies handed over: each given (to its connection, else its socket closed) */
static void take_handed(void (*give)(uint64_t id, int fd, unsigned long long rem))
{
	uint64_t v;
	if (read(handfd, &v, sizeof v) < 0)
		v = 0;
	pthread_mutex_lock(&handmu);
	struct handmsg *q = handq;
	size_t n = nhandq;
	handq = NULL;
	nhandq = caphandq = 0;
	pthread_mutex_unlock(&handmu);
	for (size_t i = 0; i < n; i++)
		give(q[i].id, q[i].fd, q[i].rem);
	free(q);
}

int fr_take_hand(struct fconn *c)
{
	uint64_t id = fr_h1_upid(c);
	struct handmsg m = {0, -1, 0};
	if (!id)
		return 0;
	pthread_mutex_lock(&handmu);
	for (size_t i = 0; i < nhandq; i++)
		if (handq[i].id == id) {
			m = handq[i];
			memmove(handq + i, handq + i + 1, (nhandq - i - 1) * sizeof *handq);
			nhandq--;
			break;
		}
	pthread_mutex_unlock(&handmu);
	if (m.fd < 0)
		return 0;
	fr_h1_hand(c, m.fd, m.rem);
	return 1;
}

int fr_hand_event(struct fwatch *w, void (*give)(uint64_t id, int fd, unsigned long long rem))
{
	if (w != &handw)
		return 0;
	take_handed(give);
	return 1;
}

void fr_hand_open(void)
{
	handfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (handfd >= 0) {
		handw.fd = handfd;
		handw.kind = -1;
		fr_watch(&handw, EPOLLIN);
	}
}

void fr_hand_drop(void)
{
	pthread_mutex_lock(&handmu);
	for (size_t i = 0; i < nhandq; i++)
		close(handq[i].fd);
	free(handq);
	handq = NULL;
	nhandq = caphandq = 0;
	pthread_mutex_unlock(&handmu);
}

void fr_hand_close(void)
{
	if (handfd >= 0)
		close(handfd);
	handfd = -1;
	handw.fd = -1;
	handw.reg = 0;
}
