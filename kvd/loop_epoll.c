// SPDX-License-Identifier: MIT
/*
 * The epoll event-loop backend, for hosts without io_uring (loop.c chooses
 * it). It keeps io_uring's model, so the dispatcher is the same: an op is
 * armed by watching its fd for input (EPOLLONESHOT, as an io_uring op
 * completes once; an accept stays watched, as a multishot accept goes on);
 * when the fd is ready, the read, recv, recvmsg or accept is done here,
 * without blocking, and its result goes to the dispatcher (d->loop_done)
 * as a CQE's would. The tick is a timerfd.
 *
 * Each fd has at most one op, so the ops are kept by fd (struct ep_slot,
 * grown as fds come), in this file's own state (struct ep, d->loop_priv).
 * Events of one epoll_wait batch can be stale: an earlier one may have
 * cancelled the op; its slot is then no longer armed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "daemon.h"
#include "loop.h"

#define KVD_EP_EVENTS	64
#define KVD_EP_ACCEPTS	32	/* per wake-up; a listener stays ready */

/* The op on one fd. */
struct ep_slot {
	struct kvd_loop_op op;
	bool		armed;		/* an op waits for this fd */
	bool		watched;	/* in the set (maybe stale: closed) */
};

struct ep {
	int		fd;
	int		tick_fd;
	uint64_t	expired;	/* the tick's read */
	struct ep_slot	*slots;		/* [nr_slots], by fd */
	int		nr_slots;
};

static struct ep *ep_of(struct kvd *d)
{
	return d->loop_priv;
}

/* The slot of @fd, grown into if need be; NULL: out of memory. */
static struct ep_slot *ep_slot(struct ep *ep, int fd)
{
	struct ep_slot *s;
	int n;

	if (fd < ep->nr_slots)
		return &ep->slots[fd];
	n = ep->nr_slots ? ep->nr_slots : 64;
	while (n <= fd)
		n *= 2;
	s = realloc(ep->slots, n * sizeof(*s));
	if (!s)
		return NULL;
	memset(s + ep->nr_slots, 0, (n - ep->nr_slots) * sizeof(*s));
	ep->slots = s;
	ep->nr_slots = n;
	return &s[fd];
}

/*
 * Watch @fd, or watch it again. The watched bit is a hint: an fd closed
 * left the set with it (no one else held it), and a new one of the same
 * number is not in it yet.
 */
static int ep_watch(struct ep *ep, struct ep_slot *s, int fd, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.fd = fd };
	int op = s->watched ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;

	if (!epoll_ctl(ep->fd, op, fd, &ev))
		goto watched;
	if (errno != (s->watched ? ENOENT : EEXIST))
		return -errno;
	op = s->watched ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
	if (epoll_ctl(ep->fd, op, fd, &ev))
		return -errno;
watched:
	s->watched = true;
	return 0;
}

static void ep_unwatch(struct ep *ep, struct ep_slot *s, int fd)
{
	if (s->watched)
		epoll_ctl(ep->fd, EPOLL_CTL_DEL, fd, NULL);
	s->watched = s->armed = false;
}

/* accept4() runs until EAGAIN: the listeners must not block. */
static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK))
		return -errno;
	return 0;
}

static int ep_arm(struct kvd *d, const struct kvd_loop_op *op)
{
	struct ep *ep = ep_of(d);
	struct kvd_loop_op o = *op;
	uint32_t events = EPOLLIN | EPOLLONESHOT;
	struct ep_slot *s;
	int err;

	if (o.io == KVD_IO_TICK) {
		o.fd = ep->tick_fd;
		o.buf = &ep->expired;
		o.len = sizeof(ep->expired);
	} else if (o.io == KVD_IO_ACCEPT) {
		err = set_nonblock(o.fd);
		if (err)
			return err;
		events = EPOLLIN;
	}
	s = ep_slot(ep, o.fd);
	if (!s)
		return -ENOMEM;
	err = ep_watch(ep, s, o.fd, events);
	if (err)
		return err;
	s->op = o;
	s->armed = true;
	return 0;
}

/*
 * The op ends now: nothing completes. The fd leaves the set explicitly:
 * someone else may hold it too (a doorbell), so our close would not.
 */
static int ep_cancel(struct kvd *d, int fd, uint64_t user_data)
{
	struct ep *ep = ep_of(d);
	struct ep_slot *s;
	bool ended;

	if (fd < 0 || fd >= ep->nr_slots)
		return 0;
	s = &ep->slots[fd];
	ended = s->armed && s->op.user_data == user_data;
	ep_unwatch(ep, s, fd);
	return ended;
}

/* -errno, or the byte count, as an io_uring CQE would have it. */
static int ep_res(ssize_t n)
{
	return n < 0 ? -errno : (int)n;
}

/* Accept what is queued, as multishot accept would. */
static void ep_accept(struct kvd *d, int fd, uint64_t user_data)
{
	for (int i = 0; i < KVD_EP_ACCEPTS && !d->stop; i++) {
		int res = ep_res(accept4(fd, NULL, NULL, SOCK_CLOEXEC));

		if (res == -EAGAIN)
			return;
		if (d->loop_done(d, user_data, res, true))
			continue;
		/* Out of fds: the listener stays ready, so unwatch it. */
		ep_unwatch(ep_of(d), &ep_of(d)->slots[fd], fd);
		return;
	}
}

/* The I/O of a one-shot op. */
static int ep_io(const struct kvd_loop_op *op)
{
	switch (op->io) {
	case KVD_IO_RECV:
		return ep_res(recv(op->fd, op->buf, op->len, MSG_DONTWAIT));
	case KVD_IO_RECVMSG:
		return ep_res(recvmsg(op->fd, op->buf, MSG_DONTWAIT));
	default:
		return ep_res(read(op->fd, op->buf, op->len));
	}
}

/* @fd is ready: do its op's I/O and complete it. */
static void ep_ready(struct kvd *d, int fd)
{
	struct ep *ep = ep_of(d);
	struct kvd_loop_op op;
	struct ep_slot *s;
	int res;

	if (fd < 0 || fd >= ep->nr_slots || !ep->slots[fd].armed)
		return;		/* stale: cancelled earlier in this batch */
	s = &ep->slots[fd];
	op = s->op;
	if (op.io == KVD_IO_ACCEPT)
		return ep_accept(d, fd, op.user_data);
	res = ep_io(&op);
	if (res == -EAGAIN || res == -EINTR) {
		/* Not ready after all: still armed, watch again. */
		res = ep_watch(ep, s, fd, EPOLLIN | EPOLLONESHOT);
		if (!res)
			return;
	}
	/* Disarmed first: the dispatcher may arm this fd again. */
	s->armed = false;
	d->loop_done(d, op.user_data, res, false);
}

static int ep_wait(struct kvd *d, bool busy)
{
	struct epoll_event ev[KVD_EP_EVENTS];
	int n = epoll_wait(ep_of(d)->fd, ev, KVD_EP_EVENTS, busy ? 0 : -1);

	if (n < 0) {
		int err = -errno;

		if (err == -EINTR)
			return 0;
		kvd_err("epoll_wait: %s", strerror(-err));
		return err;
	}
	for (int i = 0; i < n; i++)
		ep_ready(d, ev[i].data.fd);
	return 0;
}

static void ep_exit(struct kvd *d)
{
	struct ep *ep = ep_of(d);

	if (!ep)
		return;
	if (ep->tick_fd >= 0)
		close(ep->tick_fd);
	if (ep->fd >= 0)
		close(ep->fd);
	free(ep->slots);
	free(ep);
	d->loop_priv = NULL;
}

static int ep_init(struct kvd *d)
{
	struct itimerspec its = {
		.it_interval.tv_nsec = KVD_TICK_MS * 1000000L,
		.it_value.tv_nsec = KVD_TICK_MS * 1000000L,
	};
	struct ep *ep = calloc(1, sizeof(*ep));
	int err;

	if (!ep)
		return -ENOMEM;
	ep->tick_fd = -1;
	d->loop_priv = ep;
	ep->fd = epoll_create1(EPOLL_CLOEXEC);
	if (ep->fd < 0)
		goto fail;
	ep->tick_fd = timerfd_create(CLOCK_MONOTONIC,
				     TFD_NONBLOCK | TFD_CLOEXEC);
	if (ep->tick_fd < 0 || timerfd_settime(ep->tick_fd, 0, &its, NULL))
		goto fail;
	return 0;
fail:
	err = -errno;
	ep_exit(d);
	return err;
}

static void ep_explain(int err, char *buf, size_t len)
{
	snprintf(buf, len, "%s", strerror(-err));
}

const struct kvd_loop_ops kvd_epoll_ops = {
	.name		= "epoll",
	.init		= ep_init,
	.exit		= ep_exit,
	.explain	= ep_explain,
	.wait		= ep_wait,
	.arm		= ep_arm,
	.cancel		= ep_cancel,
};
