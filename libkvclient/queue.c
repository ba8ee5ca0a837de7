// SPDX-License-Identifier: MIT
/*
 * The client's side of the request ring: SQEs out, CQEs in, the eventfd
 * wake-ups in both directions, and a lease's heartbeats (a doorbell that
 * a sleeping wait, or kv_heartbeat, rings so kvd knows we are alive).
 * kvd/ring.c states the ordering contract; the labels C1..C7 here are
 * the client's half of it.
 */
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib.h"

static inline uint32_t cq_ready(const struct kv_client *c)
{
	/* C3: pairs with kvd's release of cq_tail (D3). */
	return kv_smp_load_acquire(c->cq_ktail) - KV_READ_ONCE(*c->cq_khead);
}

unsigned kv_cq_ready(const struct kv_client *c)
{
	return cq_ready(c);
}

unsigned kv_sq_space_left(const struct kv_client *c)
{
	/* C2: pairs with kvd's release of sq_head (D2). */
	return c->sq_entries - (c->sq_tail - kv_smp_load_acquire(c->sq_khead));
}

struct kv_sqe *kv_get_sqe(struct kv_client *c)
{
	struct kv_sqe *sqe;

	/* A stale head only undercounts the room: read kvd's line (C2)
	 * when the SQ looks full, not on every request. */
	if (c->sq_tail - c->sq_head_seen >= c->sq_entries) {
		c->sq_head_seen = kv_smp_load_acquire(c->sq_khead);
		if (c->sq_tail - c->sq_head_seen >= c->sq_entries)
			return NULL;
	}
	sqe = &c->sqes[c->sq_tail & (c->sq_entries - 1)];
	c->sq_tail++;
	memset(sqe, 0, sizeof(*sqe));
	return sqe;
}

static int ring_doorbell(struct kv_client *c)
{
	uint64_t one = 1;

	c->syscalls++;
	c->woke_kvd = true;
	if (write(c->sq_evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		return -errno;
	return 0;
}

/* Does an SQE about to go out let others read, or kvd reuse, a block? */
static bool needs_fence(const struct kv_client *c)
{
	for (uint32_t i = c->sq_submitted; i != c->sq_tail; i++) {
		uint8_t op = c->sqes[i & (c->sq_entries - 1)].opcode;

		if (op == KV_OP_COMMIT || op == KV_OP_RELEASE ||
		    op == KV_OP_COW)
			return true;
	}
	return false;
}

/* kvd is gone, and the caller is told so now: -ECONNRESET. */
int __kv_reset(struct kv_client *c)
{
	c->reset_told = true;
	return -ECONNRESET;
}

/*
 * Is kvd gone? A non-blocking read of the control socket, where kvd
 * writes only EXTENT messages: a hang-up (kvd ended us, or went) reads
 * end-of-file and marks the client dead. For calls that would otherwise
 * wait on, or refuse for, a completion that may never come.
 */
bool __kv_kvd_gone(struct kv_client *c)
{
	if (!c->dead)
		__kv_recv_extents(c);
	return c->dead;
}

int kv_submit(struct kv_client *c)
{
	uint32_t n = c->sq_tail - c->sq_submitted;
	int ret;

	if (c->dead)
		return __kv_reset(c);
	__kv_extents_pending(c);
	if (!n)
		return 0;
	/* The device writes before the requests that publish or free the
	 * blocks (cuda.c); the SQEs stay queued if that fails. */
	if (c->cuda && needs_fence(c)) {
		ret = __kv_cuda_fence(c);
		if (ret)
			return ret;
	}
	/* C1: publish the SQEs; pairs with kvd's acquire of sq_tail (D1). */
	kv_smp_store_release(c->sq_ktail, c->sq_tail);
	c->sq_submitted = c->sq_tail;
	c->inflight += n;
	kv_smp_mb();	/* C5: pairs with D5 */
	if (KV_READ_ONCE(*c->sq_kflags) & KV_SQ_NEED_WAKEUP) {
		ret = ring_doorbell(c);
		if (ret)
			return ret;
	}
	return (int)n;
}

int kv_peek_cqe(struct kv_client *c, struct kv_cqe **cqe)
{
	uint32_t head = KV_READ_ONCE(*c->cq_khead);

	if (kv_smp_load_acquire(c->cq_ktail) == head) {
		*cqe = NULL;
		/* kvd holds a completion back until we have read the
		 * extents it names: a poller must read them too. */
		__kv_extents_pending(c);
		return c->dead ? __kv_reset(c) : -EAGAIN;
	}
	*cqe = &c->cqes[head & (c->cq_entries - 1)];
	return 0;
}

unsigned kv_peek_batch_cqe(struct kv_client *c, struct kv_cqe **cqes,
			   unsigned count)
{
	uint32_t head = KV_READ_ONCE(*c->cq_khead);
	uint32_t ready = kv_smp_load_acquire(c->cq_ktail) - head;	/* C3 */

	if (!ready)
		__kv_extents_pending(c);	/* as kv_peek_cqe */
	if (count > ready)
		count = ready;
	for (unsigned i = 0; i < count; i++)
		cqes[i] = &c->cqes[(head + i) & (c->cq_entries - 1)];
	return count;
}

void kv_cq_advance(struct kv_client *c, unsigned nr)
{
	if (!nr)
		return;
	/* C4: the CQEs are read; pairs with kvd's acquire (D4). */
	kv_smp_store_release(c->cq_khead, KV_READ_ONCE(*c->cq_khead) + nr);
	c->inflight -= nr;
	kv_smp_mb();	/* C7: pairs with D7 */
	if (KV_READ_ONCE(*c->sq_kflags) & KV_SQ_CQ_FULL)
		ring_doorbell(c);
}

void kv_cqe_seen(struct kv_client *c, struct kv_cqe *cqe)
{
	if (cqe)
		kv_cq_advance(c, 1);
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/*
 * Poll the CQ for up to the spin window before sleeping, as io_uring's
 * SQPOLL idles before it sleeps: a reply that comes within the window
 * costs no system call and no wake-up of a halted vCPU. Backs off from
 * pause to sched_yield() after SPIN_PAUSE_NS so that on a small machine
 * kvd and other engines still get the CPU. Also reads extents kvd holds
 * a completion back for.
 *
 * Adaptive, as adaptive mutexes spin: a window that did not catch the
 * reply halves (a busy machine, several engines per core: spinning only
 * takes the CPU from them), one that did is restored; once below 1 us,
 * spinning stops and is tried again every 64 waits. Not after this call
 * woke kvd: then the whole window is spun (yielding) and its outcome
 * says how long kvd took to wake, not how busy the machine is; else a
 * client whose spinning stopped would, with kvd, sleep on every request.
 */
static bool spin_once(struct kv_client *c, unsigned want, int64_t deadline,
		      uint64_t window_ns);

static bool spin_for_cqe(struct kv_client *c, unsigned want,
			 int64_t deadline)
{
	bool caught;

	if (!c->spin_ns)
		return false;
	if (c->woke_kvd)
		return spin_once(c, want, deadline, c->spin_ns);
	if (!c->spin_cur_ns) {
		if (++c->spin_skips < 64)
			return false;
		c->spin_skips = 0;
		c->spin_cur_ns = c->spin_ns;
	}
	caught = spin_once(c, want, deadline, c->spin_cur_ns);
	if (caught)
		c->spin_cur_ns = c->spin_ns;
	else if ((c->spin_cur_ns /= 2) < 1000)
		c->spin_cur_ns = 0;
	return caught;
}

/*
 * Pause this long before yielding: a reply kvd has started on (a NOP is
 * well under 1 us, a 512-block ALLOC about 20 us) costs no system call,
 * and a peer that is not running still gets the CPU soon.
 */
#define SPIN_PAUSE_NS	20000

static bool spin_once(struct kv_client *c, unsigned want, int64_t deadline,
		      uint64_t window_ns)
{
	int64_t t0 = 0, now, end = 0;
	/*
	 * We just woke kvd: the scheduler often queues it on this very CPU
	 * (wake-affine), where pausing would keep it from running for the
	 * whole pause phase. Yield at every poll instead.
	 */
	bool woke = c->woke_kvd, yield = false;

	c->woke_kvd = false;
	for (unsigned i = 0;; i++) {
		/* Fetch the next CQE's line with the tail's: kvd writes
		 * both, and one miss then costs what two in a row would. */
		__builtin_prefetch(&c->cqes[KV_READ_ONCE(*c->cq_khead) &
					    (c->cq_entries - 1)]);
		if (cq_ready(c) >= want)
			return true;
		/* once every 32 polls: the CPU goes to whoever wants it,
		 * without a system call per poll when nobody does; every
		 * poll while kvd wakes (it may wait for this CPU) */
		if (woke || (yield && !(i & 31))) {
			c->syscalls++;
			sched_yield();
		} else {
			kv_cpu_relax();
		}
		if (!i || (i & 31))
			continue;
		__kv_extents_pending(c);
		/* The window starts at the first clock read, 32 polls in:
		 * a reply within them (a busy kvd) costs no clock read. */
		now = now_ns();
		if (!end) {
			t0 = now;
			end = now + (int64_t)window_ns;
			if (deadline >= 0 && deadline < end)
				end = deadline;
		}
		if (c->dead || now >= end)
			return cq_ready(c) >= want;
		yield = yield || now - t0 >= SPIN_PAUSE_NS;
	}
}

/*
 * A lease's beat (kv_connect_params.lease_ms): ring the doorbell, which
 * kvd counts as a call; no SQE, so no CQE to reap.
 */
static int beat(struct kv_client *c, int64_t now)
{
	c->last_beat_ns = now;
	return ring_doorbell(c);
}

int kv_heartbeat(struct kv_client *c)
{
	if (!c)
		return -EINVAL;
	/* kvd ended us (the lease ran out while we were stopped, kvctl
	 * disconnect): told as any call tells it, so addresses go too */
	if (__kv_kvd_gone(c))
		return __kv_reset(c);
	return beat(c, now_ns());
}

/*
 * How long a wait may sleep (ms, -1: for ever) before its deadline or,
 * with a lease, its next beat, which it makes when due: a client asleep
 * in a wait is alive. -ETIME once the deadline has passed.
 */
static int sleep_ms(struct kv_client *c, int64_t deadline)
{
	int64_t now = 0, left = -1;

	if (deadline >= 0) {
		now = now_ns();
		left = deadline - now;
		if (left <= 0)
			return -ETIME;
	}
	if (c->beat_ns) {
		now = now ? now : now_ns();
		if (now - c->last_beat_ns >= c->beat_ns)
			beat(c, now);
		if (left < 0 || c->last_beat_ns + c->beat_ns - now < left)
			left = c->last_beat_ns + c->beat_ns - now;
	}
	return left < 0 ? -1 : (int)((left + 999999) / 1000000);
}

/*
 * Wait until @want CQEs are ready, kvd goes away (-ECONNRESET) or
 * timeout_ns passes (-ETIME; < 0 waits for ever): spin first, then
 * sleep. C6: set KV_CQ_NEED_WAKEUP, full barrier, look again, and only
 * then block; every way out clears the flag, so kvd does not write the
 * eventfd for a client that is not asleep.
 */
static int __kv_wait_nr(struct kv_client *c, unsigned want,
			int64_t timeout_ns)
{
	int64_t deadline = timeout_ns < 0 ? -1 : now_ns() + timeout_ns;
	struct pollfd pfd[2];
	bool flagged = false;
	uint64_t v;
	int ms, ret = 0;

	if (spin_for_cqe(c, want, deadline))
		return 0;
	for (;;) {
		if (cq_ready(c) >= want)
			break;
		if (c->dead) {
			ret = __kv_reset(c);
			break;
		}
		kv_atomic_or(c->cq_kflags, KV_CQ_NEED_WAKEUP);
		flagged = true;
		kv_smp_mb();	/* C6: pairs with D6 */
		if (cq_ready(c) >= want)
			break;
		ms = sleep_ms(c, deadline);
		if (ms == -ETIME) {
			ret = -ETIME;
			break;
		}
		pfd[0] = (struct pollfd){ .fd = c->cq_evfd, .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = c->sock, .events = POLLIN };
		c->syscalls++;
		if (poll(pfd, 2, ms) < 0 && errno != EINTR) {
			ret = -errno;
			break;
		}
		/* kvd writes only EXTENT messages after WELCOME; a hang-up
		 * shows as a read of 0 bytes. */
		if (pfd[1].revents && __kv_recv_extents(c) < 0) {
			c->dead = true;
			ret = cq_ready(c) ? 0 : __kv_reset(c);
			break;
		}
		if (pfd[0].revents & POLLIN) {
			c->syscalls++;
			(void)!read(c->cq_evfd, &v, sizeof(v));
		}
	}
	/* Cleared only if set: kvd reads this line on every completion. */
	if (flagged)
		kv_atomic_andnot(c->cq_kflags, KV_CQ_NEED_WAKEUP);
	return ret;
}

int __kv_wait(struct kv_client *c, int64_t timeout_ns)
{
	return __kv_wait_nr(c, 1, timeout_ns);
}

int kv_wait_cqe_timeout(struct kv_client *c, struct kv_cqe **cqe,
			int64_t timeout_ns)
{
	int ret = kv_peek_cqe(c, cqe);

	if (ret != -EAGAIN)
		return ret;
	ret = __kv_wait(c, timeout_ns);
	if (ret)
		return ret;
	return kv_peek_cqe(c, cqe);
}

int kv_wait_cqe(struct kv_client *c, struct kv_cqe **cqe)
{
	return kv_wait_cqe_timeout(c, cqe, -1);
}

int kv_submit_and_wait(struct kv_client *c, unsigned wait_nr)
{
	int submitted = kv_submit(c), ret;

	if (submitted < 0)
		return submitted;
	/* would wait for ever: never that many in flight, or in the CQ */
	if (wait_nr > c->inflight || wait_nr > c->cq_entries)
		return -EINVAL;
	if (cq_ready(c) < wait_nr) {
		ret = __kv_wait_nr(c, wait_nr, -1);
		if (ret)
			return ret;
	}
	return submitted;
}

void kv_prep_nop(struct kv_sqe *sqe)
{
	sqe->opcode = KV_OP_NOP;
}

void kv_prep_alloc(struct kv_sqe *sqe, uint32_t ids_off, unsigned nr)
{
	sqe->opcode = KV_OP_ALLOC;
	sqe->nr = nr;
	sqe->off = ids_off;
}

void kv_prep_release(struct kv_sqe *sqe, uint32_t ids_off, unsigned nr)
{
	sqe->opcode = KV_OP_RELEASE;
	sqe->nr = nr;
	sqe->off = ids_off;
}

void kv_prep_ref(struct kv_sqe *sqe, uint32_t ids_off, unsigned nr)
{
	sqe->opcode = KV_OP_REF;
	sqe->nr = nr;
	sqe->off = ids_off;
}

int kv_sqe_set_wait(struct kv_sqe *sqe, uint32_t timeout_ms)
{
	if (!sqe || !timeout_ms || timeout_ms > KV_WAIT_MAX_MS)
		return -EINVAL;
	if (sqe->opcode != KV_OP_ALLOC && sqe->opcode != KV_OP_ALLOC_PREFIX &&
	    sqe->opcode != KV_OP_COW)
		return -EINVAL;
	sqe->flags |= KV_SQE_WAIT;
	sqe->args[3] = timeout_ms;
	return 0;
}

void kv_sqe_set_link(struct kv_sqe *sqe)
{
	sqe->flags |= KV_SQE_LINK;
}

void kv_prep_cow(struct kv_sqe *sqe, uint32_t ids_off, unsigned nr)
{
	sqe->opcode = KV_OP_COW;
	sqe->nr = nr;
	sqe->off = ids_off;
}

void kv_prep_stats(struct kv_sqe *sqe, uint32_t stats_off)
{
	sqe->opcode = KV_OP_STATS;
	sqe->nr = sizeof(struct kv_stats);
	sqe->off = stats_off;
}

void kv_prep_lookup(struct kv_sqe *sqe, uint32_t hashes_off, unsigned nr,
		    uint32_t ids_off)
{
	sqe->opcode = KV_OP_LOOKUP;
	sqe->nr = nr;
	sqe->off = hashes_off;
	sqe->args[0] = ids_off;
}

void kv_prep_alloc_prefix(struct kv_sqe *sqe, uint32_t hashes_off,
			  unsigned n_hashes, unsigned nr_blocks,
			  uint32_t ids_off)
{
	sqe->opcode = KV_OP_ALLOC_PREFIX;
	sqe->nr = nr_blocks;
	sqe->off = ids_off;
	sqe->args[0] = hashes_off;
	sqe->args[1] = n_hashes;
}

void kv_prep_commit(struct kv_sqe *sqe, uint32_t entries_off, unsigned nr)
{
	sqe->opcode = KV_OP_COMMIT;
	sqe->nr = nr;
	sqe->off = entries_off;
}

void kv_prep_commit_release(struct kv_sqe *sqe, uint32_t entries_off,
			    unsigned nr)
{
	kv_prep_commit(sqe, entries_off, nr);
	sqe->args[0] = KV_COMMIT_AND_RELEASE;
}

void kv_prep_retain(struct kv_sqe *sqe, uint32_t ids_off, unsigned nr,
		    unsigned priority, uint64_t pin_ms, unsigned flags)
{
	sqe->opcode = KV_OP_RETAIN;
	sqe->nr = nr;
	sqe->off = ids_off;
	sqe->args[0] = priority;
	sqe->args[1] = pin_ms;
	sqe->args[2] = flags;
}

void kv_sqe_set_data64(struct kv_sqe *sqe, uint64_t data)
{
	sqe->user_data = data;
}
