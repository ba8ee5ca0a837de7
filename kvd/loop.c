// SPDX-License-Identifier: MIT
/*
 * The event loop, neutral of its backend: it chooses one (io_uring, else
 * epoll: loop_uring.c, loop_epoll.c, behind struct kvd_loop_ops), arms
 * through it (loop_io.c) the listening sockets' accepts, every client's
 * control socket (recvmsg) and doorbell eventfd (read), the admin
 * connections, the signalfd and a periodic tick, and takes every
 * completion in one dispatcher (kvd_loop_complete, reached by the backends
 * through d->loop_done), which unpacks user_data as loop_io.c packed it
 * (loop_ev.h). Between waits, every live ring is drained in turns of at
 * most sq_budget units of work, so no client can starve another; before
 * sleeping, each ring gets KV_SQ_NEED_WAKEUP and is looked at once more
 * (kvd/ring.c has the ordering contract).
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
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
#include "events.h"
#include "notify.h"
#include "tier.h"
#include "loop_ev.h"
#include "ring.h"

static bool kvd_loop_complete(struct kvd *d, uint64_t user_data, int res,
			      bool more);

/*
 * Each kind of rate-limited message (daemon.h) and what it is about;
 * @label: name them (start); else report what each suppressed, once its
 * second has passed or, with @now, at once (exit).
 */
static void ratelimits(struct kvd *d, bool label, bool now)
{
	static const struct {
		size_t		off;
		const char	*what;
	} rl[] = {
		{ offsetof(struct kvd, rl_full),
		  "clients or admin peers refused for lack of room" },
		{ offsetof(struct kvd, rl_kill),
		  "clients or peers refused or disconnected" },
		{ offsetof(struct kvd, rl_accept), "failed accepts" },
		{ offsetof(struct kvd, rl_ext), "extents that could not be backed" },
		{ offsetof(struct kvd, rl_quota), "requests refused by a quota" },
	};

	for (size_t i = 0; i < sizeof(rl) / sizeof(rl[0]); i++) {
		struct kvd_ratelimit *r = (void *)((char *)d + rl[i].off);

		if (label)
			r->what = rl[i].what;
		else
			kvd_ratelimit_flush(r, now);
	}
}

/* Set up @ops and arm the daemon's own ops through it. */
static int loop_start(struct kvd *d, const struct kvd_loop_ops *ops)
{
	int ret;

	d->loop = ops;
	d->loop_done = kvd_loop_complete;
	ret = ops->init(d);
	if (ret)
		goto out;
	ret = kvd_loop_arm_accept(d, KVD_EV_ACCEPT);
	if (!ret)
		ret = kvd_loop_arm_accept(d, KVD_EV_ADMIN_ACCEPT);
	if (!ret)
		ret = kvd_loop_arm_signal(d);
	if (!ret)
		ret = kvd_loop_arm_tick(d);
	if (!ret) {
		d->tick_ns = kvd_now_ns();	/* the first tick's lateness */
		ratelimits(d, true, false);
		return 0;
	}
	ops->exit(d);
out:
	d->loop = NULL;
	return ret;
}

/* io_uring unless told otherwise or unavailable; then epoll. */
int kvd_loop_init(struct kvd *d)
{
	char why[160];
	int ret;

	if (d->cfg.event_loop != KVD_LOOP_EPOLL) {
		ret = loop_start(d, &kvd_uring_ops);
		if (!ret) {
			kvd_dbg("event loop: %s", d->loop->name);
			return 0;
		}
		kvd_uring_ops.explain(ret, why, sizeof(why));
		if (d->cfg.event_loop == KVD_LOOP_IO_URING) {
			kvd_err("--event-loop io_uring: %s", why);
			return ret;
		}
		kvd_warn("%s: falling back to an epoll event loop", why);
	} else {
		kvd_info("event loop: epoll");
	}
	ret = loop_start(d, &kvd_epoll_ops);
	if (ret) {
		kvd_epoll_ops.explain(ret, why, sizeof(why));
		kvd_err("%s event loop set-up failed: %s", kvd_epoll_ops.name,
			why);
	}
	return ret;
}

void kvd_loop_exit(struct kvd *d)
{
	if (!d->loop)
		return;
	d->loop->exit(d);
	ratelimits(d, false, true);	/* the last word on each kind */
}

/* A signal was read (@res bytes, or -errno) into d->sigbuf. */
static void on_signal(struct kvd *d, int res)
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
 * out of fds (or memory): retrying at once would spin, so accepting
 * stops and the tick retries.
 */
static bool accepted(struct kvd *d, int type, int res)
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

/* @more: the accept goes on. False: it must end (the tick re-arms it). */
static bool on_accept(struct kvd *d, int type, int res, bool more)
{
	if (!accepted(d, type, res)) {
		d->accept_paused[type == KVD_EV_ACCEPT ? 0 : 1] = true;
		return false;
	}
	if (!more && !d->stop && kvd_loop_arm_accept(d, type))
		d->accept_paused[type == KVD_EV_ACCEPT ? 0 : 1] = true;
	return true;
}

static void resume_accept(struct kvd *d)
{
	if (d->accept_paused[0] && !kvd_loop_arm_accept(d, KVD_EV_ACCEPT))
		d->accept_paused[0] = false;
	if (d->accept_paused[1] && !kvd_loop_arm_accept(d, KVD_EV_ADMIN_ACCEPT))
		d->accept_paused[1] = false;
}

/*
 * A tick later than two periods: kvd itself did not run (SIGSTOP, swap,
 * a starved CPU), so it could see no call. Time-outs of clients and
 * admin peers must not count that time: the calls made meanwhile wait,
 * maybe behind this very tick in the same batch of completions.
 */
static void tick_measure(struct kvd *d)
{
	uint64_t now = kvd_now_ns(), period = KVD_TICK_MS * 1000000ULL;

	d->tick_stall_ns = 0;
	if (now - d->tick_ns > 2 * period)
		d->tick_stall_ns = now - d->tick_ns - period;
	d->tick_ns = now;
}

/* Every KVD_TICK_MS. */
static void on_tick(struct kvd *d)
{
	tick_measure(d);
	if (d->tick_stall_ns)
		kvd_info("kvd did not run for %llu ms: time-outs skip that time",
			 (unsigned long long)(d->tick_stall_ns / 1000000));
	kvd_clients_tick(d);
	kvd_admin_tick(d);
	kvd_extents_tick(d);
	resume_accept(d);
	ratelimits(d, false, false);
	kvd_notify_tick(d);
	kvd_events_flush(d);
}

static void on_client(struct kvd *d, int type, uint32_t slot, uint32_t gen,
		      int res)
{
	struct kvd_client *c;

	if (slot >= d->nr_slots)
		return;
	c = &d->clients[slot];
	/* Stale: an op that ended at a synchronous cancel (loop_uring.c)
	 * still posts its CQE, after its slot was freed or even reused. */
	if (c->gen != gen || !c->inflight)
		return;
	if (type == KVD_EV_CTRL)
		kvd_client_ctrl_done(d, c, res);
	else
		kvd_client_doorbell_done(d, c, res);
	kvd_client_put_op(d, c);
}

/*
 * kvd_loop_complete - the dispatcher: the op armed with @user_data
 * finished with @res (bytes, an accepted fd, or -errno); @more: it stays
 * armed (an accept that goes on). Both backends call it with every
 * completion. False when the op must end now: an accept out of fds.
 */
static bool kvd_loop_complete(struct kvd *d, uint64_t user_data, int res,
			      bool more)
{
	int type = kvd_ev_type(user_data);
	uint32_t slot = kvd_ev_slot(user_data), gen = kvd_ev_gen(user_data);

	switch (type) {
	case KVD_EV_CTRL:
	case KVD_EV_DOORBELL:
		/* ended: a kill now must not cancel it (loop_io.c) */
		d->loop_cur = user_data;
		on_client(d, type, slot, gen, res);
		d->loop_cur = KVD_LOOP_UD_NONE;
		break;
	case KVD_EV_ACCEPT:
	case KVD_EV_ADMIN_ACCEPT:
		return on_accept(d, type, res, more);
	case KVD_EV_SIGNAL:
		on_signal(d, res);
		if (!d->stop && kvd_loop_arm_signal(d))
			kvd_err("cannot watch the signalfd any more");
		break;
	case KVD_EV_TICK:
		on_tick(d);
		if (kvd_loop_arm_tick(d))
			kvd_err("cannot arm the tick any more");
		break;
	case KVD_EV_ADMIN_RECV:
		if (slot < KVD_MAX_ADMIN && d->adm[slot].gen == gen)
			kvd_admin_recv_done(d, slot, res);
		break;
	case KVD_EV_TIER:
		kvd_tier_io_done(d, res);
		break;
	default:
		break;		/* KVD_LOOP_UD_NONE: a backend's own op */
	}
	return true;
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
 * Has @c an SQE kvd has not taken? (acquire: see D1) Not when it takes
 * none (a CQE held back, or its parked SQEs at their bound), or stalled
 * on a CQ the client has not reaped: those are not work yet, and
 * spinning on them would burn a core. SQEs behind parked ones are work.
 */
static bool ring_has_work(struct kvd_client *c)
{
	if (kvd_ring_blocked(c) ||
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
	if (!kvd_ring_parked(c))
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
		} else if (now - c->last_work_ns >= park &&
			   !kvd_ring_parked(c) && try_park(d, c)) {
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
