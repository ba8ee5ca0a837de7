// SPDX-License-Identifier: MIT
/*
 * The epoll event loop, for hosts without io_uring (loop.c chooses it).
 * It keeps io_uring's model, so the handlers are the same: an op is armed
 * by watching its fd for input (EPOLLONESHOT, as an io_uring op completes
 * once); when the fd is ready, the read, recvmsg or accept is done here,
 * without blocking, and its result goes to the handler the io_uring CQE
 * would have gone to. The tick is a timerfd; signals are the signalfd.
 *
 * Events of one epoll_wait batch can be stale: an earlier one may have
 * killed the client (or reused its slot). The generation and ep_armed
 * tell them apart, as the generation does for CQEs.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "admin.h"
#include "client.h"
#include "daemon.h"
#include "loop.h"

#define KVD_EP_EVENTS	64
#define KVD_EP_ACCEPTS	32	/* per wake-up; a listener stays ready */
#define EV_BIT(type)	(1U << (type))

static int ep_add(struct kvd *d, int fd, uint32_t events, uint64_t ud)
{
	struct epoll_event ev = { .events = events, .data.u64 = ud };

	return epoll_ctl(d->ep_fd, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

static int ep_mod(struct kvd *d, int fd, uint32_t events, uint64_t ud)
{
	struct epoll_event ev = { .events = events, .data.u64 = ud };

	return epoll_ctl(d->ep_fd, EPOLL_CTL_MOD, fd, &ev) ? -errno : 0;
}

/* Arm a client's op of @type on @fd: watch it, or watch it again. */
static int ep_arm_client(struct kvd *d, struct kvd_client *c, int type,
			 int fd)
{
	uint64_t ud = kvd_ev_pack(type, c->slot, c->gen);
	uint32_t events = EPOLLIN | EPOLLONESHOT;
	int err;

	if (c->ep_watched & EV_BIT(type)) {
		err = ep_mod(d, fd, events, ud);
	} else {
		err = ep_add(d, fd, events, ud);
		if (!err)
			c->ep_watched |= EV_BIT(type);
	}
	if (!err)
		c->ep_armed |= EV_BIT(type);
	return err;
}

static int ep_arm_ctrl(struct kvd *d, struct kvd_client *c)
{
	return ep_arm_client(d, c, KVD_EV_CTRL, c->sock);
}

static int ep_arm_doorbell(struct kvd *d, struct kvd_client *c)
{
	return ep_arm_client(d, c, KVD_EV_DOORBELL, c->sq_evfd);
}

/* An admin fd is new each time; closing it drops the watch (no one
 * else holds it). */
static int ep_arm_admin(struct kvd *d, uint32_t slot)
{
	struct kvd_admin_conn *a = &d->adm[slot];

	return ep_add(d, a->fd, EPOLLIN | EPOLLONESHOT,
		      kvd_ev_pack(KVD_EV_ADMIN_RECV, slot, a->gen));
}

static int ep_arm_accept(struct kvd *d, int type)
{
	int fd = type == KVD_EV_ACCEPT ? d->listen_fd : d->admin_fd;

	return ep_add(d, fd, EPOLLIN, kvd_ev_pack(type, 0, 0));
}

static void ep_unwatch(struct kvd *d, struct kvd_client *c, int type, int fd)
{
	if (c->ep_watched & EV_BIT(type))
		epoll_ctl(d->ep_fd, EPOLL_CTL_DEL, fd, NULL);
	c->ep_watched &= ~EV_BIT(type);
	if (c->ep_armed & EV_BIT(type)) {
		c->ep_armed &= ~EV_BIT(type);
		c->inflight--;
	}
}

/*
 * The ops end now, not later: nothing completes. The doorbell must leave
 * the set explicitly: the client holds it too, so our close would not.
 */
static void ep_cancel(struct kvd *d, struct kvd_client *c)
{
	ep_unwatch(d, c, KVD_EV_DOORBELL, c->sq_evfd);
	ep_unwatch(d, c, KVD_EV_CTRL, c->sock);
}

/* -errno, or the byte count, as an io_uring CQE would have it. */
static int ep_res(ssize_t n)
{
	return n < 0 ? -errno : (int)n;
}

static void ep_client(struct kvd *d, int type, uint32_t slot, uint32_t gen)
{
	struct kvd_client *c;
	int fd, res;

	if (slot >= d->nr_slots)
		return;
	c = &d->clients[slot];
	if (c->gen != gen || !(c->ep_armed & EV_BIT(type)))
		return;		/* stale: killed earlier in this batch */
	fd = type == KVD_EV_CTRL ? c->sock : c->sq_evfd;
	if (type == KVD_EV_CTRL)
		res = ep_res(recvmsg(fd, &c->msg, MSG_DONTWAIT));
	else
		res = ep_res(read(fd, &c->evbuf, sizeof(c->evbuf)));
	if (res == -EAGAIN || res == -EINTR) {
		/* Not ready after all: still armed, watch again. */
		res = ep_arm_client(d, c, type, fd);
		if (!res)
			return;
	}
	c->ep_armed &= ~EV_BIT(type);
	if (type == KVD_EV_CTRL)
		kvd_client_ctrl_done(d, c, res);
	else
		kvd_client_doorbell_done(d, c, res);
	kvd_client_put_op(d, c);
}

static void ep_admin(struct kvd *d, uint32_t slot, uint32_t gen)
{
	struct kvd_admin_conn *a;
	int res;

	if (slot >= KVD_MAX_ADMIN)
		return;
	a = &d->adm[slot];
	if (a->fd < 0 || a->gen != gen)
		return;
	res = ep_res(recv(a->fd, &a->req, sizeof(a->req) + sizeof(a->pad),
			  MSG_DONTWAIT));
	if (res == -EAGAIN || res == -EINTR) {
		res = ep_mod(d, a->fd, EPOLLIN | EPOLLONESHOT,
			     kvd_ev_pack(KVD_EV_ADMIN_RECV, slot, gen));
		if (!res)
			return;
	}
	kvd_admin_recv_done(d, slot, res);
}

/* Accept what is queued, as multishot accept would. */
static void ep_accept(struct kvd *d, int type)
{
	int which = type == KVD_EV_ACCEPT ? 0 : 1;
	int lfd = which ? d->admin_fd : d->listen_fd;

	for (int i = 0; i < KVD_EP_ACCEPTS && !d->stop; i++) {
		int res = ep_res(accept4(lfd, NULL, NULL, SOCK_CLOEXEC));

		if (res == -EAGAIN)
			return;
		if (kvd_loop_accepted(d, type, res))
			continue;
		/* Out of fds: the listener stays ready, so unwatch it. */
		epoll_ctl(d->ep_fd, EPOLL_CTL_DEL, lfd, NULL);
		d->accept_paused[which] = true;
		return;
	}
}

static void ep_signal(struct kvd *d)
{
	kvd_loop_signal(d, ep_res(read(d->signal_fd, d->sigbuf,
					sizeof(struct signalfd_siginfo))));
}

static void ep_tick(struct kvd *d)
{
	uint64_t expired;

	if (read(d->tick_fd, &expired, sizeof(expired)) == sizeof(expired))
		kvd_loop_tick(d);
}

static void ep_dispatch(struct kvd *d, const struct epoll_event *ev)
{
	uint64_t ud = ev->data.u64;
	int type = (int)(ud >> 56);
	uint32_t slot = (ud >> 32) & 0xffffff, gen = (uint32_t)ud;

	switch (type) {
	case KVD_EV_ACCEPT:
	case KVD_EV_ADMIN_ACCEPT:
		return ep_accept(d, type);
	case KVD_EV_SIGNAL:
		return ep_signal(d);
	case KVD_EV_TICK:
		return ep_tick(d);
	case KVD_EV_ADMIN_RECV:
		return ep_admin(d, slot, gen);
	case KVD_EV_CTRL:
	case KVD_EV_DOORBELL:
		return ep_client(d, type, slot, gen);
	default:
		break;
	}
}

static int ep_wait(struct kvd *d, bool busy)
{
	struct epoll_event ev[KVD_EP_EVENTS];
	int n = epoll_wait(d->ep_fd, ev, KVD_EP_EVENTS, busy ? 0 : -1);

	if (n < 0) {
		int err = -errno;

		if (err == -EINTR)
			return 0;
		kvd_err("epoll_wait: %s", strerror(-err));
		return err;
	}
	for (int i = 0; i < n; i++)
		ep_dispatch(d, &ev[i]);
	return 0;
}

static void ep_exit(struct kvd *d)
{
	if (d->tick_fd >= 0)
		close(d->tick_fd);
	if (d->ep_fd >= 0)
		close(d->ep_fd);
	d->tick_fd = d->ep_fd = -1;
}

/* accept4() runs until EAGAIN: the listeners must not block. */
static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK))
		return -errno;
	return 0;
}

static int ep_init(struct kvd *d)
{
	struct itimerspec its = {
		.it_interval.tv_nsec = KVD_TICK_MS * 1000000L,
		.it_value.tv_nsec = KVD_TICK_MS * 1000000L,
	};
	int err;

	d->ep_fd = epoll_create1(EPOLL_CLOEXEC);
	if (d->ep_fd < 0)
		return -errno;
	d->tick_fd = timerfd_create(CLOCK_MONOTONIC,
				    TFD_NONBLOCK | TFD_CLOEXEC);
	if (d->tick_fd < 0 || timerfd_settime(d->tick_fd, 0, &its, NULL)) {
		err = -errno;
		goto fail;
	}
	err = set_nonblock(d->listen_fd);
	if (!err)
		err = set_nonblock(d->admin_fd);
	if (!err)
		err = ep_arm_accept(d, KVD_EV_ACCEPT);
	if (!err)
		err = ep_arm_accept(d, KVD_EV_ADMIN_ACCEPT);
	if (!err)
		err = ep_add(d, d->signal_fd, EPOLLIN,
			     kvd_ev_pack(KVD_EV_SIGNAL, 0, 0));
	if (!err)
		err = ep_add(d, d->tick_fd, EPOLLIN,
			     kvd_ev_pack(KVD_EV_TICK, 0, 0));
	if (err)
		goto fail;
	return 0;
fail:
	ep_exit(d);
	return err;
}

const struct kvd_loop_ops kvd_epoll_ops = {
	.name		= "epoll",
	.init		= ep_init,
	.exit		= ep_exit,
	.wait		= ep_wait,
	.arm_accept	= ep_arm_accept,
	.arm_ctrl	= ep_arm_ctrl,
	.arm_doorbell	= ep_arm_doorbell,
	.arm_admin	= ep_arm_admin,
	.cancel		= ep_cancel,
};
