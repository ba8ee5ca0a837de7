// SPDX-License-Identifier: MIT
/*
 * The front of the event loop's seam: every op the daemon arms (the
 * listening sockets' accepts, the signalfd, the tick, each client's
 * control socket and doorbell, each admin connection) goes to the backend
 * through here, with its user_data packed (loop_ev.h), and a killed
 * client's ops are cancelled here. It calls nothing above it: client.c
 * and admin.c arm through it, and the completions come back to loop.c's
 * dispatcher through the backend.
 */
#include <sys/signalfd.h>

#include "admin.h"
#include "client.h"
#include "daemon.h"
#include "loop.h"
#include "loop_ev.h"

static int arm(struct kvd *d, enum kvd_loop_io io, int fd, void *buf,
	       size_t len, uint64_t user_data)
{
	struct kvd_loop_op op = {
		.io = io, .fd = fd, .buf = buf, .len = len,
		.user_data = user_data,
	};

	return d->loop->arm(d, &op);
}

int kvd_loop_arm_accept(struct kvd *d, int type)
{
	int fd = type == KVD_EV_ACCEPT ? d->listen_fd : d->admin_fd;

	return arm(d, KVD_IO_ACCEPT, fd, NULL, 0, kvd_ev_pack(type, 0, 0));
}

int kvd_loop_arm_signal(struct kvd *d)
{
	return arm(d, KVD_IO_READ, d->signal_fd, d->sigbuf,
		   sizeof(struct signalfd_siginfo), kvd_ev_pack(KVD_EV_SIGNAL, 0, 0));
}

/* The disk tier's completion eventfd (kvd/tier_disk.c). */
int kvd_loop_arm_tier(struct kvd *d, int fd, uint64_t *buf)
{
	return arm(d, KVD_IO_READ, fd, buf, sizeof(*buf),
		   kvd_ev_pack(KVD_EV_TIER, 0, 0));
}

int kvd_loop_arm_tick(struct kvd *d)
{
	return arm(d, KVD_IO_TICK, -1, NULL, 0, kvd_ev_pack(KVD_EV_TICK, 0, 0));
}

/* @c's control socket: its HELLO, later only its close (into c->msg). */
int kvd_loop_arm_ctrl(struct kvd *d, struct kvd_client *c)
{
	int err = arm(d, KVD_IO_RECVMSG, c->sock, &c->msg, 0,
		      kvd_ev_pack(KVD_EV_CTRL, c->slot, c->gen));

	if (!err)
		c->inflight++;
	return err;
}

/* @c's doorbell: it rang (SQEs while parked). */
int kvd_loop_arm_doorbell(struct kvd *d, struct kvd_client *c)
{
	int err = arm(d, KVD_IO_READ, c->sq_evfd, &c->evbuf, sizeof(c->evbuf),
		      kvd_ev_pack(KVD_EV_DOORBELL, c->slot, c->gen));

	if (!err)
		c->inflight++;
	return err;
}

/* Admin connection @slot's one request. */
int kvd_loop_arm_admin(struct kvd *d, uint32_t slot)
{
	struct kvd_admin_conn *a = &d->adm[slot];

	return arm(d, KVD_IO_RECV, a->fd, &a->req,
		   sizeof(a->pin) + sizeof(a->pad),
		   kvd_ev_pack(KVD_EV_ADMIN_RECV, slot, a->gen));
}

/* End op @user_data on @fd: 1 when it will not be put by the dispatcher. */
static int cancel(struct kvd *d, int fd, uint64_t user_data)
{
	/* The op being dispatched has ended; the dispatcher puts it. */
	if (user_data == d->loop_cur)
		return 0;
	return d->loop->cancel(d, fd, user_data);
}

/*
 * @c is killed: end its ops before its fds close. Those that end now are
 * no longer in flight; the others complete (-ECANCELED) into the
 * dispatcher, which puts them.
 */
void kvd_loop_cancel(struct kvd *d, struct kvd_client *c)
{
	if (c->state == KVD_CLIENT_LIVE)
		c->inflight -= cancel(d, c->sq_evfd,
				kvd_ev_pack(KVD_EV_DOORBELL, c->slot, c->gen));
	c->inflight -= cancel(d, c->sock,
			      kvd_ev_pack(KVD_EV_CTRL, c->slot, c->gen));
}
