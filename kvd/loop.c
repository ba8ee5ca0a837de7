// SPDX-License-Identifier: MIT
/*
 * The event loop: one io_uring (liburing) waits on the listening sockets
 * (multishot accept), every client's control socket (recvmsg) and doorbell
 * eventfd (read), the signalfd and a periodic timeout. Between waits, every
 * live ring is drained in turns of at most sq_budget units of work, so no client can
 * starve another; before sleeping, each ring gets KV_SQ_NEED_WAKEUP and is
 * looked at once more (kvd/ring.c has the ordering contract).
 */
#include <errno.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <kv/barrier.h>

#include "daemon.h"

#define KVD_URING_ENTRIES	1024
#define KVD_TICK_MS		250

struct io_uring_sqe *kvd_loop_sqe(struct kvd *d)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);

	while (!sqe) {
		/* SQ full: hand what is queued to the kernel, then retry. */
		io_uring_submit(&d->ring);
		sqe = io_uring_get_sqe(&d->ring);
	}
	return sqe;
}

static void arm_accept(struct kvd *d, int fd, int type)
{
	struct io_uring_sqe *sqe = kvd_loop_sqe(d);

	io_uring_prep_multishot_accept(sqe, fd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(sqe, kvd_ev_pack(type, 0, 0));
}

static void arm_signal(struct kvd *d)
{
	struct io_uring_sqe *sqe = kvd_loop_sqe(d);

	io_uring_prep_read(sqe, d->signal_fd, d->sigbuf,
			   sizeof(struct signalfd_siginfo), 0);
	io_uring_sqe_set_data64(sqe, kvd_ev_pack(KVD_EV_SIGNAL, 0, 0));
}

static void arm_tick(struct kvd *d)
{
	struct io_uring_sqe *sqe = kvd_loop_sqe(d);

	d->tick.tv_sec = 0;
	d->tick.tv_nsec = KVD_TICK_MS * 1000000LL;
	io_uring_prep_timeout(sqe, &d->tick, 0, 0);
	io_uring_sqe_set_data64(sqe, kvd_ev_pack(KVD_EV_TICK, 0, 0));
}

int kvd_loop_init(struct kvd *d)
{
	struct io_uring_params p = { 0 };
	int ret;

	p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN;
	ret = io_uring_queue_init_params(KVD_URING_ENTRIES, &d->ring, &p);
	if (ret == -EINVAL) {
		/* Older kernels lack the flags: plain set-up still works. */
		memset(&p, 0, sizeof(p));
		ret = io_uring_queue_init_params(KVD_URING_ENTRIES, &d->ring,
						 &p);
	}
	if (ret)
		return ret;
	arm_accept(d, d->listen_fd, KVD_EV_ACCEPT);
	arm_accept(d, d->admin_fd, KVD_EV_ADMIN_ACCEPT);
	arm_signal(d);
	arm_tick(d);
	return 0;
}

void kvd_loop_exit(struct kvd *d)
{
	io_uring_queue_exit(&d->ring);
}

static void on_signal(struct kvd *d, int res)
{
	const struct signalfd_siginfo *si = (const void *)d->sigbuf;

	if (res == (int)sizeof(*si)) {
		if (si->ssi_signo == SIGTERM || si->ssi_signo == SIGINT) {
			kvd_info("signal %u: stopping", si->ssi_signo);
			d->stop = true;
			return;
		}
		if (si->ssi_signo == SIGHUP) {
			char msg[256];

			kvd_reload(d, msg, sizeof(msg));
		}
	}
	arm_signal(d);
}

static void on_accept(struct kvd *d, struct io_uring_cqe *cqe, int type)
{
	int which = type == KVD_EV_ACCEPT ? 0 : 1;
	int fd = which ? d->admin_fd : d->listen_fd;

	if (cqe->res >= 0) {
		if (type == KVD_EV_ACCEPT)
			kvd_client_accept(d, cqe->res);
		else
			kvd_admin_accept(d, cqe->res);
	} else if (cqe->res != -EINTR && cqe->res != -ECANCELED) {
		if (kvd_ratelimit(&d->rl_accept))
			kvd_warn("accept: %s", strerror(-cqe->res));
	}
	if ((cqe->flags & IORING_CQE_F_MORE) || d->stop)
		return;
	/* Out of fds: retrying at once would spin; the tick retries. */
	if (cqe->res == -EMFILE || cqe->res == -ENFILE ||
	    cqe->res == -ENOBUFS || cqe->res == -ENOMEM)
		d->accept_paused[which] = true;
	else
		arm_accept(d, fd, type);
}

static void resume_accept(struct kvd *d)
{
	if (d->accept_paused[0])
		arm_accept(d, d->listen_fd, KVD_EV_ACCEPT);
	if (d->accept_paused[1])
		arm_accept(d, d->admin_fd, KVD_EV_ADMIN_ACCEPT);
	d->accept_paused[0] = d->accept_paused[1] = false;
}

static void dispatch(struct kvd *d, struct io_uring_cqe *cqe)
{
	uint64_t ud = io_uring_cqe_get_data64(cqe);
	int type = (int)(ud >> 56);
	uint32_t slot = (ud >> 32) & 0xffffff, gen = (uint32_t)ud;
	struct kvd_client *c;

	switch (type) {
	case KVD_EV_ACCEPT:
	case KVD_EV_ADMIN_ACCEPT:
		return on_accept(d, cqe, type);
	case KVD_EV_SIGNAL:
		return on_signal(d, cqe->res);
	case KVD_EV_TICK:
		kvd_clients_tick(d);
		kvd_admin_tick(d);
		kvd_extents_tick(d);
		resume_accept(d);
		return arm_tick(d);
	case KVD_EV_ADMIN_RECV:
		return kvd_admin_recv_done(d, slot, cqe->res);
	case KVD_EV_CTRL:
	case KVD_EV_DOORBELL:
		if (slot >= d->nr_slots)
			break;
		c = &d->clients[slot];
		if (kvd_warn_on_once(c->gen != gen || !c->inflight))
			return;
		if (type == KVD_EV_CTRL)
			kvd_client_ctrl_done(d, c, cqe->res);
		else
			kvd_client_doorbell_done(d, c, cqe->res);
		return kvd_client_put_op(d, c);
	default:
		break;
	}
}

/* Clients that could not be given an extent: disconnect them now. */
static void reap_doomed(struct kvd *d)
{
	if (!d->doomed)
		return;
	d->doomed = false;
	for (uint32_t i = 0; i < d->nr_slots; i++)
		if (d->clients[i].state == KVD_CLIENT_LIVE &&
		    d->clients[i].doomed)
			kvd_client_kill(d, &d->clients[i], d->clients[i].doomed);
}

/* Serve every live ring until all are empty or stalled. */
static void drain_rings(struct kvd *d)
{
	bool again = true;

	while (again && !d->stop) {
		again = false;
		for (uint32_t i = 0; i < d->nr_slots; i++) {
			struct kvd_client *c = &d->clients[i];
			int n;

			if (c->state != KVD_CLIENT_LIVE)
				continue;
			/* Awake now: clients need not ring (see ring.c). */
			kv_atomic_andnot(c->sq_kflags, KV_SQ_NEED_WAKEUP);
			n = kvd_ring_process(d, c, d->cfg.sq_budget);
			if (n < 0)
				kvd_client_kill(d, c, "corrupt ring indices");
			else if (n > 0)
				again = true;	/* maybe more: look again */
			reap_doomed(d);
		}
	}
}

/* True when some ring got work while we were about to sleep. */
static bool prepare_sleep(struct kvd *d)
{
	bool busy = false;

	for (uint32_t i = 0; i < d->nr_slots; i++) {
		struct kvd_client *c = &d->clients[i];

		if (c->state == KVD_CLIENT_LIVE && kvd_ring_prepare_sleep(c))
			busy = true;
	}
	return busy;
}

int kvd_loop_run(struct kvd *d)
{
	struct io_uring_cqe *cqe;
	unsigned head, n;
	bool busy = false;
	int ret;

	while (!d->stop) {
		if (busy)
			ret = io_uring_submit(&d->ring);
		else
			ret = io_uring_submit_and_wait(&d->ring, 1);
		if (ret < 0 && ret != -EINTR && ret != -EBUSY &&
		    ret != -ETIME) {
			kvd_err("io_uring: %s", strerror(-ret));
			return ret;
		}
		n = 0;
		io_uring_for_each_cqe(&d->ring, head, cqe) {
			dispatch(d, cqe);
			n++;
		}
		io_uring_cq_advance(&d->ring, n);
		drain_rings(d);
		busy = prepare_sleep(d);
	}
	return 0;
}
