// SPDX-License-Identifier: MIT
/*
 * The event loop: one io_uring (liburing) waits on the listening sockets
 * (multishot accept), every client's control socket (recvmsg) and doorbell
 * eventfd (read), the signalfd and a periodic timeout. Between waits, every
 * live ring is drained in turns of at most sq_budget units of work, so no client can
 * starve another; before sleeping, each ring gets KV_SQ_NEED_WAKEUP and is
 * looked at once more (kvd/ring.c has the ordering contract).
 *
 * Where io_uring cannot be had (no kernel support, kernel.io_uring_disabled,
 * a seccomp profile), kvd_epoll_ops (loop_epoll.c) does the same with epoll;
 * the handlers here and in client.c and admin.c serve both.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <kv/barrier.h>

#include "admin.h"
#include "client.h"
#include "daemon.h"
#include "extent.h"
#include "loop.h"
#include "ring.h"

#define KVD_URING_ENTRIES	1024

static struct io_uring_sqe *uring_sqe(struct kvd *d)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);

	while (!sqe) {
		/* SQ full: hand what is queued to the kernel, then retry. */
		io_uring_submit(&d->ring);
		sqe = io_uring_get_sqe(&d->ring);
	}
	return sqe;
}

static int uring_arm_accept(struct kvd *d, int type)
{
	struct io_uring_sqe *sqe = uring_sqe(d);
	int fd = type == KVD_EV_ACCEPT ? d->listen_fd : d->admin_fd;

	io_uring_prep_multishot_accept(sqe, fd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(sqe, kvd_ev_pack(type, 0, 0));
	return 0;
}

static int uring_arm_ctrl(struct kvd *d, struct kvd_client *c)
{
	struct io_uring_sqe *sqe = uring_sqe(d);

	io_uring_prep_recvmsg(sqe, c->sock, &c->msg, 0);
	io_uring_sqe_set_data64(sqe, kvd_ev_pack(KVD_EV_CTRL, c->slot, c->gen));
	return 0;
}

static int uring_arm_doorbell(struct kvd *d, struct kvd_client *c)
{
	struct io_uring_sqe *sqe = uring_sqe(d);

	io_uring_prep_read(sqe, c->sq_evfd, &c->evbuf, sizeof(c->evbuf), 0);
	io_uring_sqe_set_data64(sqe, kvd_ev_pack(KVD_EV_DOORBELL, c->slot,
						 c->gen));
	return 0;
}

static int uring_arm_admin(struct kvd *d, uint32_t slot)
{
	struct io_uring_sqe *sqe = uring_sqe(d);
	struct kvd_admin_conn *a = &d->adm[slot];

	io_uring_prep_recv(sqe, a->fd, &a->req, sizeof(a->req) + sizeof(a->pad),
			   0);
	io_uring_sqe_set_data64(sqe, kvd_ev_pack(KVD_EV_ADMIN_RECV, slot,
						 a->gen));
	return 0;
}

static void cancel_op(struct kvd *d, struct kvd_client *c, int type)
{
	struct io_uring_sqe *sqe = uring_sqe(d);

	io_uring_prep_cancel64(sqe, kvd_ev_pack(type, c->slot, c->gen), 0);
	io_uring_sqe_set_data64(sqe, kvd_ev_pack(KVD_EV_IGNORE, 0, 0));
}

/* The cancelled ops still complete (-ECANCELED), into the handlers. */
static void uring_cancel(struct kvd *d, struct kvd_client *c)
{
	if (c->state == KVD_CLIENT_LIVE)
		cancel_op(d, c, KVD_EV_DOORBELL);
	cancel_op(d, c, KVD_EV_CTRL);
	/*
	 * io_uring looks fds up when it issues an SQE: ops on this socket
	 * still queued must be issued before its number can be reused by
	 * the next accept, or they would act on another client's socket.
	 */
	io_uring_submit(&d->ring);
}

static void arm_signal(struct kvd *d)
{
	struct io_uring_sqe *sqe = uring_sqe(d);

	io_uring_prep_read(sqe, d->signal_fd, d->sigbuf,
			   sizeof(struct signalfd_siginfo), 0);
	io_uring_sqe_set_data64(sqe, kvd_ev_pack(KVD_EV_SIGNAL, 0, 0));
}

static void arm_tick(struct kvd *d)
{
	struct io_uring_sqe *sqe = uring_sqe(d);

	d->tick.tv_sec = 0;
	d->tick.tv_nsec = KVD_TICK_MS * 1000000LL;
	io_uring_prep_timeout(sqe, &d->tick, 0, 0);
	io_uring_sqe_set_data64(sqe, kvd_ev_pack(KVD_EV_TICK, 0, 0));
}

/*
 * -EOPNOTSUPP: the kernel has io_uring but not the SETUP flags of 5.19,
 * so neither multishot accept (5.19), which the loop is built on.
 */
static int uring_init(struct kvd *d)
{
	struct io_uring_params p = { 0 };
	int ret;

	p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN;
	ret = io_uring_queue_init_params(KVD_URING_ENTRIES, &d->ring, &p);
	if (ret == -EINVAL) {
		memset(&p, 0, sizeof(p));
		ret = io_uring_queue_init_params(KVD_URING_ENTRIES, &d->ring,
						 &p);
		if (!ret) {
			io_uring_queue_exit(&d->ring);
			return -EOPNOTSUPP;
		}
	}
	if (ret)
		return ret;
	uring_arm_accept(d, KVD_EV_ACCEPT);
	uring_arm_accept(d, KVD_EV_ADMIN_ACCEPT);
	arm_signal(d);
	arm_tick(d);
	/* io_uring_enter too may be blocked (seccomp): try it now. */
	ret = io_uring_submit(&d->ring);
	if (ret < 0) {
		io_uring_queue_exit(&d->ring);
		return ret;
	}
	return 0;
}

static void uring_exit(struct kvd *d)
{
	io_uring_queue_exit(&d->ring);
}

/* An integer sysctl, or -1. */
static int read_sysctl(const char *path)
{
	char buf[32];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	return atoi(buf);
}

/* Why io_uring failed with @err, for the operator. */
static void uring_why(int err, char *buf, size_t len)
{
	int off = read_sysctl("/proc/sys/kernel/io_uring_disabled");

	if (err == -EOPNOTSUPP)
		snprintf(buf, len, "kernel older than 5.19: no multishot accept");
	else if (err == -EPERM && off > 0)
		snprintf(buf, len, "io_uring: %s (sysctl kernel.io_uring_disabled = %d)",
			 strerror(-err), off);
	else if (err == -EPERM)
		snprintf(buf, len, "io_uring: %s (blocked by a seccomp profile or an LSM?)",
			 strerror(-err));
	else if (err == -ENOSYS)
		snprintf(buf, len, "io_uring: %s (kernel without io_uring, or blocked by a seccomp profile)",
			 strerror(-err));
	else
		snprintf(buf, len, "io_uring: %s", strerror(-err));
}

/* io_uring unless told otherwise or unavailable; then epoll. */
int kvd_loop_init(struct kvd *d)
{
	char why[160];
	int ret;

	d->ep_fd = d->tick_fd = -1;
	if (d->cfg.event_loop != KVD_LOOP_EPOLL) {
		ret = uring_init(d);
		if (!ret) {
			d->loop = &kvd_uring_ops;
			kvd_dbg("event loop: %s", d->loop->name);
			return 0;
		}
		uring_why(ret, why, sizeof(why));
		if (d->cfg.event_loop == KVD_LOOP_IO_URING) {
			kvd_err("--event-loop io_uring: %s", why);
			return ret;
		}
		kvd_warn("%s: falling back to an epoll event loop", why);
	} else {
		kvd_info("event loop: epoll");
	}
	d->loop = &kvd_epoll_ops;
	ret = d->loop->init(d);
	if (ret)
		kvd_err("%s event loop set-up failed: %s", d->loop->name,
			strerror(-ret));
	return ret;
}

void kvd_loop_exit(struct kvd *d)
{
	d->loop->exit(d);
}

/* A signal was read (@res bytes, or -errno) into d->sigbuf. */
void kvd_loop_signal(struct kvd *d, int res)
{
	const struct signalfd_siginfo *si = (const void *)d->sigbuf;

	if (res != (int)sizeof(*si))
		return;
	if (si->ssi_signo == SIGTERM || si->ssi_signo == SIGINT) {
		kvd_info("signal %u: stopping", si->ssi_signo);
		d->stop = true;
	} else if (si->ssi_signo == SIGHUP) {
		char msg[256];

		kvd_reload(d, msg, sizeof(msg));
	}
}

/*
 * An accept of @type finished with @res, a new fd or -errno. False when
 * out of fds (or memory): retrying at once would spin, so the caller
 * stops accepting and the tick retries.
 */
bool kvd_loop_accepted(struct kvd *d, int type, int res)
{
	if (res >= 0) {
		if (type == KVD_EV_ACCEPT)
			kvd_client_accept(d, res);
		else
			kvd_admin_accept(d, res);
		return true;
	}
	if (res != -EINTR && res != -ECANCELED &&
	    kvd_ratelimit(&d->rl_accept))
		kvd_warn("accept: %s", strerror(-res));
	return res != -EMFILE && res != -ENFILE && res != -ENOBUFS &&
	       res != -ENOMEM;
}

static void on_accept(struct kvd *d, struct io_uring_cqe *cqe, int type)
{
	bool more = kvd_loop_accepted(d, type, cqe->res);

	if ((cqe->flags & IORING_CQE_F_MORE) || d->stop)
		return;
	if (more)
		uring_arm_accept(d, type);
	else
		d->accept_paused[type == KVD_EV_ACCEPT ? 0 : 1] = true;
}

static void resume_accept(struct kvd *d)
{
	if (d->accept_paused[0] && !d->loop->arm_accept(d, KVD_EV_ACCEPT))
		d->accept_paused[0] = false;
	if (d->accept_paused[1] &&
	    !d->loop->arm_accept(d, KVD_EV_ADMIN_ACCEPT))
		d->accept_paused[1] = false;
}

/* Every KVD_TICK_MS. */
void kvd_loop_tick(struct kvd *d)
{
	kvd_clients_tick(d);
	kvd_admin_tick(d);
	kvd_extents_tick(d);
	resume_accept(d);
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
		kvd_loop_signal(d, cqe->res);
		if (!d->stop)
			arm_signal(d);
		return;
	case KVD_EV_TICK:
		kvd_loop_tick(d);
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
	for (uint32_t j = d->nr_clients; j--;) {
		struct kvd_client *c;

		if (j >= d->nr_clients)
			continue;	/* shrank under us */
		c = &d->clients[d->live[j]];
		if (c->doomed)
			kvd_client_kill(d, c, c->doomed);
	}
}

/* Serve every live ring until all are empty or stalled; true if any
 * served something. */
static bool drain_rings(struct kvd *d)
{
	bool again = true, any = false;

	while (again && !d->stop) {
		again = false;
		/* backwards: a client killed here is swapped with the
		 * last one, which was served already */
		for (uint32_t j = d->nr_active; j--;) {
			struct kvd_client *c;
			int n;

			if (j >= d->nr_active)
				continue;	/* shrank under us */
			c = &d->clients[d->live[j]];
			/* Awake now: clients need not ring (see ring.c).
			 * Only kvd sets the bit: test first, so that a busy
			 * ring's flags line is not written on every pass. */
			if (KV_READ_ONCE(*c->sq_kflags) & KV_SQ_NEED_WAKEUP)
				kv_atomic_andnot(c->sq_kflags,
						 KV_SQ_NEED_WAKEUP);
			n = kvd_ring_process(d, c, d->cfg.sq_budget);
			if (n < 0) {
				kvd_client_kill(d, c, "corrupt ring indices");
			} else if (n > 0) {
				c->served = true;
				again = any = true;	/* maybe more: look again */
			}
			reap_doomed(d);
		}
	}
	return any;
}

/*
 * Has @c an SQE kvd has not taken? (acquire: see D1) Not when parked on
 * a wait, or stalled on a CQ the client has not reaped: those are not
 * work yet, and spinning on them would burn a core.
 */
static bool ring_has_work(struct kvd_client *c)
{
	if (c->waiting || c->cqe_deferred ||
	    (c->cq_stalled && !kvd_ring_cq_reaped(c)))
		return false;
	return kv_smp_load_acquire(c->sq_ktail) != c->sq_head;
}

/* Has any polled ring work? */
static bool rings_pending(struct kvd *d)
{
	for (uint32_t j = 0; j < d->nr_active; j++) {
		struct kvd_client *c = &d->clients[d->live[j]];

		/* The next SQE's line with the tail's: the client writes
		 * both, so their misses overlap instead of queueing. */
		__builtin_prefetch(&c->sqes[c->sq_head & (c->sq_entries - 1)]);
		if (ring_has_work(c))
			return true;
	}
	return false;
}

/*
 * Flag @c for a doorbell (D5) and stop polling it: true, and it stays
 * polled, when SQEs came meanwhile. Rings waiting on a free or an extent
 * stay polled: kvd retries those itself.
 */
static bool try_park(struct kvd *d, struct kvd_client *c)
{
	if (kvd_ring_prepare_sleep(c))
		return true;
	if (!c->waiting && !c->cqe_deferred)
		kvd_client_park(d, c);
	return false;
}

/* A ring with no SQE for this long is parked (never less than poll_us). */
#define PARK_NS		1000000ULL

/*
 * At each clock read while polling: stamp the rings served since the
 * last one; park those idle for PARK_NS, so that a pass walks only rings
 * in use however many engines are connected (a parked one rings the
 * doorbell, as when kvd sleeps); and take back a parked ring that has
 * SQEs (it rang, but doorbells are reaped only between polls). True when
 * a ring has work.
 */
static bool park_idle(struct kvd *d, uint64_t now)
{
	uint64_t park = d->cfg.poll_us * 1000ULL;
	bool work = false;

	if (park < PARK_NS)
		park = PARK_NS;
	for (uint32_t j = d->nr_active; j--;) {
		struct kvd_client *c = &d->clients[d->live[j]];

		if (c->served) {
			c->served = false;
			c->last_work_ns = now;
		} else if (now - c->last_work_ns >= park && !c->waiting &&
			   !c->cqe_deferred && try_park(d, c)) {
			work = true;
		}
	}
	/* upwards: one taken back swaps with a ring already looked at */
	for (uint32_t j = d->nr_active; j < d->nr_clients; j++) {
		struct kvd_client *c = &d->clients[d->live[j]];

		if (ring_has_work(c)) {
			kvd_client_activate(d, c);
			work = true;
		}
	}
	return work;
}

#define POLL_PAUSE_NS	10000ULL	/* polls pause this long, then yield */

/*
 * After serving, poll the rings for cfg.poll_us before sleeping, as
 * io_uring's SQPOLL thread idles before it sleeps: while clients keep
 * submitting, NEED_WAKEUP stays clear and nobody makes a system call.
 * Backs off from pause to sched_yield() after POLL_PAUSE_NS so that on a
 * small machine the engines kvd waits for still get the CPU; not sooner,
 * as an engine that reaps and submits within it (a batch step) should
 * cost kvd no system call. True when work arrived.
 * @served: this pass served something, so the window starts again; the
 * clock is first read 16 polls in, as a request answered within them (a
 * busy ring) should not pay for a clock read.
 */
static bool poll_rings(struct kvd *d, bool served, bool slept)
{
	uint64_t now;
	bool yield = false;

	if (!d->cfg.poll_us)
		return false;
	d->served |= served;	/* until the clock is read */
	for (unsigned i = 1;; i++) {
		if (rings_pending(d))
			return true;
		/*
		 * Woken from sleep by a client, which may wait for the
		 * answer on this very CPU: yield at every poll at first.
		 * Else one yield every 16 polls: the CPU goes to whoever
		 * wants it, without a system call per poll when nobody does.
		 */
		if (slept || (yield && !(i & 15)))
			sched_yield();
		else
			kv_cpu_relax();
		if (i & 15)
			continue;
		now = kvd_now_ns();
		if (d->served) {
			d->served = false;
			d->last_work_ns = now;
		}
		if (park_idle(d, now))
			return true;
		if (now >= d->last_work_ns + d->cfg.poll_us * 1000ULL)
			return false;
		yield = now >= d->last_work_ns + POLL_PAUSE_NS;
		slept = slept && !yield;
	}
}

/*
 * Before sleeping: every polled ring is parked (try_park; a doorbell
 * takes it back). True when some ring got work meanwhile. Parked rings
 * have the flag already.
 */
static bool prepare_sleep(struct kvd *d)
{
	bool busy = false;

	for (uint32_t j = d->nr_active; j--;)
		busy |= try_park(d, &d->clients[d->live[j]]);
	return busy;
}

static int uring_wait(struct kvd *d, bool busy)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;
	int ret;

	if (busy)
		ret = io_uring_submit(&d->ring);
	else
		ret = io_uring_submit_and_wait(&d->ring, 1);
	if (ret < 0 && ret != -EINTR && ret != -EBUSY && ret != -ETIME) {
		kvd_err("io_uring: %s", strerror(-ret));
		return ret;
	}
	io_uring_for_each_cqe(&d->ring, head, cqe) {
		dispatch(d, cqe);
		n++;
	}
	io_uring_cq_advance(&d->ring, n);
	return 0;
}

const struct kvd_loop_ops kvd_uring_ops = {
	.name		= "io_uring",
	.init		= uring_init,
	.exit		= uring_exit,
	.wait		= uring_wait,
	.arm_accept	= uring_arm_accept,
	.arm_ctrl	= uring_arm_ctrl,
	.arm_doorbell	= uring_arm_doorbell,
	.arm_admin	= uring_arm_admin,
	.cancel		= uring_cancel,
};

int kvd_loop_run(struct kvd *d)
{
	bool busy = false;
	int ret;

	while (!d->stop) {
		ret = d->loop->wait(d, busy);
		if (ret)
			return ret;
		busy = poll_rings(d, drain_rings(d), !busy) ||
		       prepare_sleep(d);
	}
	return 0;
}
