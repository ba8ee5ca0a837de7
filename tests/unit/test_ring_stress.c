// SPDX-License-Identifier: MIT
/*
 * Ring stress: the library's side of a request ring (libkvclient/queue.c:
 * kv_get_sqe, kv_submit, kv_wait_cqe, kv_submit_and_wait, kv_peek_*,
 * kv_cq_advance) and the daemon's (kvd/ring.c: kvd_ring_process,
 * kvd_ring_prepare_sleep, kvd_ring_wake) on two threads over one ring
 * memfd, each side sleeping on its eventfd the way the real one does
 * (kvd: loop.c's drain, prepare_sleep, wait). Both files are compiled
 * for this test with ring_hooks.h forced in, so kv_ring_hook() below
 * runs around every access of a shared ring word: it spins, yields or
 * sleeps up to 50 us at random, and so does the test between its steps.
 *
 * kvd_op_issue is a fake (this file): every SQE carries a sequence
 * number and a checksum over its 64 bytes, every CQE its sequence number
 * and a result that is a function of it, so a torn, lost, duplicated or
 * reordered entry shows. A watchdog counts lost wake-ups: a side asleep
 * while what it waits for is there and nobody moves, for RS_WATCHDOG_MS;
 * it then wakes that side so the run goes on. The client also fills the
 * CQ on purpose (back-pressure: KV_SQ_CQ_FULL, the doorbell after
 * reaping, D7/C7) and streams SQEs into slots as soon as kvd frees them.
 *
 * Three phases: the threads on any CPUs; both on one CPU (preempted
 * anywhere); polling, where neither sleeps (under TSAN the eventfds
 * would order everything otherwise). Exit 0 only with no lost wake-up,
 * no torn or misordered entry and every path taken. RING_STRESS_SECONDS
 * (3) sets the length, RING_STRESS_SEED replays a run.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <kv/barrier.h>

#include "client.h"
#include "daemon.h"
#include "extent.h"
#include "opdef.h"
#include "ring.h"
#include "../../libkvclient/lib.h"

#define RS_SQ_ENTRIES	8	/* small: the rings fill often */
#define RS_DATA_BYTES	4096
#define RS_WATCHDOG_MS	250
#define RS_STUCK_MS	10000	/* nobody moves, nobody sleeps: give up */

/* TSAN follows addresses: under it both sides use one mapping. */
#if defined(__SANITIZE_THREAD__)
#define RS_ONE_MAPPING	1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RS_ONE_MAPPING	1
#endif
#endif
#ifndef RS_ONE_MAPPING
#define RS_ONE_MAPPING	0
#endif

struct rs_rng {
	uint64_t	s;
};

struct rs {
	struct kvd	d;		/* kvd: no pool, no extents */
	struct kvd_client kc;		/* the daemon's side of the ring */
	struct kv_client cc;		/* the library's side */
	int		sock[2];	/* cc.sock: never readable */
	void		*cmap;		/* the client's own mapping */
	bool		polling;	/* neither side ever sleeps */
	uint64_t	deadline_ns;

	/* daemon thread only */
	struct rs_rng	drng;
	uint64_t	next_sqe;	/* sequence number kvd expects */
	/* client thread only */
	struct rs_rng	crng;
	uint64_t	sqe_seq;	/* next to submit */
	uint64_t	cqe_seq;	/* next to reap */

	/* shared with the watchdog */
	atomic_bool	stop;
	atomic_ullong	progress;	/* every step of either side */
	atomic_int	d_asleep;	/* kvd thread in poll(): doorbell */
	atomic_int	c_asleep;	/* client thread inside a wait */
	atomic_uint	c_want;		/* CQEs it waits for */

	/* results */
	atomic_ullong	sqes, rounds, cq_full, d_sleeps, doorbells;
	atomic_ullong	lost_kvd, lost_kvd_cqfull, lost_client;
	atomic_ullong	torn_sqe, torn_cqe, misordered, corrupt;
	atomic_ullong	waits, stale_flag;
};

static uint64_t rs_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(struct rs_rng *r)
{
	r->s ^= r->s >> 12;
	r->s ^= r->s << 25;
	r->s ^= r->s >> 27;
	return r->s * 0x2545f4914f6cdd1dULL;
}

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	return x ^ (x >> 33);
}

/* FNV-1a over @len bytes. */
static uint64_t cksum(const void *p, size_t len)
{
	const uint8_t *b = p;
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < len; i++)
		h = (h ^ b[i]) * 0x100000001b3ULL;
	return h;
}

/* What kvd answers to SQE @seq: never negative, never 0 for long. */
static int32_t cqe_res(uint64_t seq)
{
	return (int32_t)(mix64(seq ^ 0x5eed) & 0x7fffffff);
}

/*
 * Between every two steps: mostly nothing or a short spin (interleavings
 * at the scale of the ring's own accesses), sometimes a yield or a sleep
 * of up to 50 us (the other side runs a whole path meanwhile).
 */
static atomic_bool calm;	/* this round at full speed: no jitter */

static void jitter(struct rs_rng *r)
{
	uint64_t x;

	if (atomic_load_explicit(&calm, memory_order_relaxed))
		return;
	x = rnd(r);

	switch (x & 63) {
	case 0 ... 31:
		return;
	case 32 ... 51:
		for (volatile unsigned i = (x >> 8) % 512; i; i--)
			;
		return;
	case 52 ... 59:
		sched_yield();
		return;
	default:
		usleep((useconds_t)((x >> 8) % 51));
	}
}

/* Inside ring.c and queue.c: before every shared access (ring_hooks.h). */
static __thread struct rs_rng *hook_rng;

void kv_ring_hook(void)
{
	uint64_t x;

	if (!hook_rng || atomic_load_explicit(&calm, memory_order_relaxed))
		return;
	x = rnd(hook_rng);
	switch (x & 255) {
	case 0 ... 127:
		return;
	case 128 ... 223:
		for (volatile unsigned i = (x >> 8) % 256; i; i--)
			;
		return;
	case 224 ... 247:
		sched_yield();
		return;
	default:
		usleep((useconds_t)((x >> 8) % 51));
	}
}

static void step(struct rs *t)
{
	atomic_fetch_add_explicit(&t->progress, 1, memory_order_relaxed);
}

/* ---- the stubs ring.c and queue.c link against ---- */

static struct rs *cur;

/* kvd's per-opcode service times (opdef.c): not what this test checks. */
void kvd_op_stat_time(struct kvd_op_stat *s, uint64_t ns)
{
	(void)s, (void)ns;
}

/* The op handler of kvd: check the SQE, answer from its sequence. */
int kvd_op_issue(struct kvd *d, struct kvd_client *c,
		 const struct kv_sqe *sqe)
{
	struct rs *t = cur;
	const uint64_t *slot, *copy = (const uint64_t *)sqe;

	if (cksum(sqe, offsetof(struct kv_sqe, resv2)) != sqe->resv2)
		atomic_fetch_add(&t->torn_sqe, 1);
	/*
	 * The slot is still kvd's (sq_head is published after the pass), so
	 * it must still hold what was copied. Read word by word: TSAN sees
	 * these, not the range access of ring.c's memcpy.
	 */
	slot = (const uint64_t *)&c->sqes[sqe->user_data & (c->sq_entries - 1)];
	for (int i = 0; i < 8; i++)
		if (slot[i] != copy[i]) {
			atomic_fetch_add(&t->torn_sqe, 1);
			break;
		}
	if (sqe->user_data != t->next_sqe)
		atomic_fetch_add(&t->misordered, 1);
	t->next_sqe = sqe->user_data + 1;
	atomic_fetch_add_explicit(&t->sqes, 1, memory_order_relaxed);
	step(t);
	jitter(&t->drng);	/* between the SQE copy and its CQE */
	return cqe_res(sqe->user_data);
}

/* No extents here (d->pool.nr_extents == 0 in extent.c says the same). */
bool kvd_extents_current(struct kvd *d, struct kvd_client *c)
{
	return true;
}

void __kv_extents_pending(struct kv_client *c)
{
}

int __kv_recv_extents(struct kv_client *c)
{
	return 0;
}

int __kv_cuda_fence(struct kv_client *c)
{
	return 0;
}

/* ---- the daemon thread: loop.c's drain, prepare_sleep, sleep ---- */

static void doorbell_sleep(struct rs *t)
{
	struct pollfd pfd = { .fd = t->kc.sq_evfd, .events = POLLIN };
	uint64_t v;

	atomic_fetch_add(&t->d_sleeps, 1);
	atomic_store(&t->d_asleep, 1);
	while (poll(&pfd, 1, -1) < 0 && errno == EINTR)
		;
	atomic_store(&t->d_asleep, 0);
	if (read(t->kc.sq_evfd, &v, sizeof(v)) == sizeof(v))
		atomic_fetch_add(&t->doorbells, 1);
}

static void *kvd_thread(void *arg)
{
	struct rs *t = arg;
	struct kvd_client *c = &t->kc;
	bool stalled = false;
	uint64_t budget;
	int n;

	hook_rng = &t->drng;
	while (!atomic_load(&t->stop)) {
		/* Awake now: clients need not ring (loop.c drain_rings). */
		kv_atomic_andnot(c->sq_kflags, KV_SQ_NEED_WAKEUP);
		do {
			jitter(&t->drng);
			budget = 1 + rnd(&t->drng) % (2 * RS_SQ_ENTRIES);
			n = kvd_ring_process(&t->d, c, (uint32_t)budget);
			if (c->cq_stalled && !stalled)
				atomic_fetch_add(&t->cq_full, 1);
			stalled = c->cq_stalled;
		} while (n > 0 && !atomic_load(&t->stop));
		if (n < 0) {
			atomic_fetch_add(&t->corrupt, 1);
			break;
		}
		jitter(&t->drng);
		if (t->polling || kvd_ring_prepare_sleep(c))
			continue;
		jitter(&t->drng);	/* flag set, not yet asleep */
		doorbell_sleep(t);
		step(t);
	}
	return NULL;
}

/* ---- the client thread ---- */

static void fill(struct rs *t, struct kv_sqe *sqe)
{
	uint64_t seq = t->sqe_seq++;

	kv_prep_nop(sqe);
	sqe->nr = (uint32_t)mix64(seq);
	sqe->off = (uint32_t)(mix64(seq) >> 32);
	sqe->resv0 = (uint16_t)seq;
	sqe->resv1 = (uint32_t)~seq;
	for (int i = 0; i < 4; i++)
		sqe->args[i] = mix64(seq + (uint64_t)i + 1);
	kv_sqe_set_data64(sqe, seq);
	sqe->resv2 = cksum(sqe, offsetof(struct kv_sqe, resv2));
}

static void check_cqe(struct rs *t, const struct kv_cqe *cqe)
{
	uint64_t seq = t->cqe_seq++;

	if (cqe->user_data != seq)
		atomic_fetch_add(&t->misordered, 1);
	if (cqe->res != cqe_res(cqe->user_data) || cqe->flags)
		atomic_fetch_add(&t->torn_cqe, 1);
	step(t);
}

/* Before and after a wait that may sleep, for the watchdog. */
static void wait_begin(struct rs *t, unsigned want)
{
	atomic_store(&t->c_want, want);
	atomic_store(&t->c_asleep, 1);
}

/* A wait is over: KV_CQ_NEED_WAKEUP must be down again (C6). */
static void wait_end(struct rs *t)
{
	atomic_store(&t->c_asleep, 0);
	atomic_fetch_add_explicit(&t->waits, 1, memory_order_relaxed);
	if (KV_READ_ONCE(*t->cc.cq_kflags) & KV_CQ_NEED_WAKEUP)
		atomic_fetch_add(&t->stale_flag, 1);
}

/* Queue up to @n SQEs; returns how many fitted. */
static unsigned queue(struct rs *t, unsigned n)
{
	unsigned i;

	for (i = 0; i < n; i++) {
		struct kv_sqe *sqe = kv_get_sqe(&t->cc);

		if (!sqe)
			break;
		jitter(&t->crng);
		fill(t, sqe);
	}
	return i;
}

static int submit(struct rs *t)
{
	int ret;

	jitter(&t->crng);
	ret = kv_submit(&t->cc);
	step(t);
	jitter(&t->crng);
	return ret;
}

/* Polling: spin until @want CQEs are there, never asleep. */
static void poll_cqes(struct rs *t, unsigned want)
{
	while (kv_cq_ready(&t->cc) < want)
		sched_yield();
}

/* Reap one CQE, sleeping for it (or spinning) when none is there. */
static int reap_wait(struct rs *t)
{
	struct kv_cqe *cqe;
	int ret;

	if (t->polling) {
		poll_cqes(t, 1);
		ret = kv_peek_cqe(&t->cc, &cqe);
	} else {
		wait_begin(t, 1);
		ret = kv_wait_cqe(&t->cc, &cqe);
		wait_end(t);
	}
	if (ret)
		return ret;
	jitter(&t->crng);
	check_cqe(t, cqe);
	kv_cqe_seen(&t->cc, cqe);
	return 0;
}

/* Reap what is there, handing CQEs back one by one or at once. */
static unsigned reap_ready(struct rs *t)
{
	struct kv_cqe *cqes[4 * RS_SQ_ENTRIES];
	unsigned n, i, seen = 0;

	n = kv_peek_batch_cqe(&t->cc, cqes, 4 * RS_SQ_ENTRIES);
	for (i = 0; i < n; i++) {
		check_cqe(t, cqes[i]);
		if (rnd(&t->crng) & 1) {
			jitter(&t->crng);
			kv_cqe_seen(&t->cc, cqes[i]);
			seen++;
		}
	}
	kv_cq_advance(&t->cc, n - seen);
	return n;
}

static int drain(struct rs *t)
{
	int ret;

	while (t->cc.inflight) {
		ret = reap_wait(t);
		if (ret)
			return ret;
	}
	return 0;
}

/* One request, one wait: the sleepiest pattern. */
static int round_single(struct rs *t)
{
	if (queue(t, 1) != 1 || submit(t) != 1)
		return -EIO;
	return reap_wait(t);
}

/* A batch, reaped by waits and peeks. */
static int round_batch(struct rs *t)
{
	unsigned n = queue(t, 1 + rnd(&t->crng) % RS_SQ_ENTRIES);
	int ret = submit(t);

	if (ret != (int)n)
		return -EIO;
	while (t->cc.inflight) {
		if (rnd(&t->crng) & 1)
			reap_ready(t);
		else if ((ret = reap_wait(t)))
			return ret;
	}
	return 0;
}

/* kv_submit_and_wait for the whole batch. */
static int round_submit_wait(struct rs *t)
{
	unsigned n = queue(t, 1 + rnd(&t->crng) % RS_SQ_ENTRIES);
	int ret;

	jitter(&t->crng);
	if (t->polling) {
		ret = submit(t);
		poll_cqes(t, n);
	} else {
		wait_begin(t, n);
		ret = kv_submit_and_wait(&t->cc, n);
		wait_end(t);
	}
	if (ret != (int)n)
		return -EIO;
	step(t);
	return drain(t);
}

/*
 * A stream of single submits, each SQ slot taken again as soon as kvd
 * gives it back (D2/C2), CQEs reaped only when the SQ is full.
 */
static int round_stream(struct rs *t)
{
	unsigned n = 1 + rnd(&t->crng) % (8 * RS_SQ_ENTRIES);

	for (unsigned i = 0; i < n; i++) {
		while (!queue(t, 1))
			if (!reap_ready(t))
				sched_yield();
		if (submit(t) != 1)
			return -EIO;
	}
	return drain(t);
}

/*
 * CQ-full back-pressure: fill the CQ (2 * sq_entries) and the SQ behind
 * it without reaping, so that kvd stalls (KV_SQ_CQ_FULL) and sleeps; then
 * reap slowly, one by one: the reaps must ring kvd (C7) to go on.
 */
static int round_cq_full(struct rs *t)
{
	struct kv_client *c = &t->cc;
	unsigned cap = c->cq_entries + c->sq_entries, want;
	int ret;

	while (c->inflight < cap) {
		queue(t, cap - c->inflight);
		if (submit(t) < 0)
			return -EIO;
		want = c->inflight < c->cq_entries ? c->inflight :
		       c->cq_entries;
		if (c->inflight >= cap || kv_sq_space_left(c))
			continue;
		/* SQ full: wait until kvd moved it into the CQ */
		if (t->polling) {
			poll_cqes(t, want);
			continue;
		}
		wait_begin(t, want);
		ret = kv_submit_and_wait(c, want);
		wait_end(t);
		if (ret < 0)
			return ret;
	}
	usleep((useconds_t)(rnd(&t->crng) % 200));	/* let kvd stall */
	return drain(t);
}

static void *client_thread(void *arg)
{
	struct rs *t = arg;
	int ret = 0;

	hook_rng = &t->crng;
	while (!ret && rs_now_ns() < t->deadline_ns) {
		atomic_store_explicit(&calm, !(rnd(&t->crng) & 3),
				      memory_order_relaxed);
		switch (rnd(&t->crng) % 10) {
		case 0 ... 2:
			ret = round_single(t);
			break;
		case 3 ... 4:
			ret = round_batch(t);
			break;
		case 5 ... 6:
			ret = round_submit_wait(t);
			break;
		case 7 ... 8:
			ret = round_stream(t);
			break;
		default:
			ret = round_cq_full(t);
			break;
		}
		atomic_fetch_add(&t->rounds, 1);
	}
	if (ret) {
		fprintf(stderr, "client: %s\n", strerror(-ret));
		atomic_fetch_add(&t->corrupt, 1);
	}
	atomic_store(&t->stop, true);
	(void)!write(t->kc.sq_evfd, &(uint64_t){ 1 }, 8);
	return NULL;
}

/* ---- the watchdog ---- */

static bool kvd_has_work(struct rs *t)
{
	struct kvd_client *c = &t->kc;
	uint32_t tail = kv_smp_load_acquire(c->sq_ktail);
	uint32_t head = kv_smp_load_acquire(c->sq_khead);
	uint32_t cq = kv_smp_load_acquire(c->cq_ktail) -
		      kv_smp_load_acquire(c->cq_khead);

	return tail != head && cq < c->cq_entries;
}

static bool client_has_work(struct rs *t)
{
	struct kvd_client *c = &t->kc;
	uint32_t cq = kv_smp_load_acquire(c->cq_ktail) -
		      kv_smp_load_acquire(c->cq_khead);

	return cq >= atomic_load(&t->c_want);
}

/*
 * Nobody moved for RS_WATCHDOG_MS: whoever sleeps on work lost a wake-up.
 * Both sides are judged before either is woken (the kvd woken first could
 * post the client's CQEs before the client is looked at).
 */
static int watchdog_bite(struct rs *t)
{
	bool kvd_lost = atomic_load(&t->d_asleep) && kvd_has_work(t);
	bool client_lost = atomic_load(&t->c_asleep) && client_has_work(t);
	uint32_t sqf = KV_READ_ONCE(*t->kc.sq_kflags);
	uint64_t one = 1;

	if (kvd_lost) {
		bool cqfull = sqf & KV_SQ_CQ_FULL;

		atomic_fetch_add(cqfull ? &t->lost_kvd_cqfull : &t->lost_kvd,
				 1);
		fprintf(stderr, "lost wake-up: kvd asleep on queued SQEs%s (sq flags %#x)\n",
			cqfull ? " after a full CQ" : "", sqf);
	}
	if (client_lost) {
		atomic_fetch_add(&t->lost_client, 1);
		fprintf(stderr, "lost wake-up: client asleep on %u ready CQEs (waits for %u, cq flags %#x)\n",
			kv_smp_load_acquire(t->kc.cq_ktail) -
			kv_smp_load_acquire(t->kc.cq_khead),
			atomic_load(&t->c_want), KV_READ_ONCE(*t->kc.cq_kflags));
	}
	if (kvd_lost)
		(void)!write(t->kc.sq_evfd, &one, sizeof(one));
	if (client_lost)
		(void)!write(t->kc.cq_evfd, &one, sizeof(one));
	return kvd_lost + client_lost;
}

static int watchdog(struct rs *t, pthread_t *th)
{
	uint64_t seen = ~0ULL, since = rs_now_ns();

	while (!atomic_load(&t->stop)) {
		uint64_t p = atomic_load(&t->progress), now;

		usleep(2000);
		now = rs_now_ns();
		if (p != seen) {
			seen = p;
			since = now;
			continue;
		}
		if (now - since < RS_WATCHDOG_MS * 1000000ULL)
			continue;
		if (watchdog_bite(t)) {
			since = now;
			continue;
		}
		if (now - since > RS_STUCK_MS * 1000000ULL) {
			fprintf(stderr, "stuck: no progress, nobody asleep\n");
			return -1;
		}
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	return 0;
}

/* ---- set-up ---- */

static int rs_init(struct rs *t, uint64_t seed)
{
	struct kvd_client *k = &t->kc;
	struct kv_client *c = &t->cc;
	const struct kv_ring_offsets *o = &k->off;
	uint8_t *m;

	memset(t, 0, sizeof(*t));
	t->drng.s = seed | 1;
	t->crng.s = mix64(seed) | 1;
	t->d.cfg.sq_budget = 2 * RS_SQ_ENTRIES;
	k->ring_fd = -1;
	k->id = 1;
	k->state = KVD_CLIENT_LIVE;
	if (kvd_ring_setup(k, RS_SQ_ENTRIES, RS_DATA_BYTES))
		return -1;
	k->sq_evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	k->cq_evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (k->sq_evfd < 0 || k->cq_evfd < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, t->sock))
		return -1;
	m = k->ring;
	if (!RS_ONE_MAPPING) {
		/* a mapping of its own, as a real client has */
		m = mmap(NULL, k->ring_bytes, PROT_READ | PROT_WRITE,
			 MAP_SHARED, k->ring_fd, 0);
		if (m == MAP_FAILED)
			return -1;
		t->cmap = m;
	}
	c->sock = t->sock[0];
	c->ring_fd = k->ring_fd;
	c->sq_evfd = k->sq_evfd;
	c->cq_evfd = k->cq_evfd;
	c->device = -1;
	c->ring = m;
	c->ring_bytes = k->ring_bytes;
	c->sq_khead = (uint32_t *)(m + o->sq_head);
	c->sq_ktail = (uint32_t *)(m + o->sq_tail);
	c->sq_kflags = (uint32_t *)(m + o->sq_flags);
	c->cq_khead = (uint32_t *)(m + o->cq_head);
	c->cq_ktail = (uint32_t *)(m + o->cq_tail);
	c->cq_kflags = (uint32_t *)(m + o->cq_flags);
	c->sqes = (struct kv_sqe *)(m + o->sqes);
	c->cqes = (struct kv_cqe *)(m + o->cqes);
	c->data = m + o->data;
	c->data_bytes = o->data_bytes;
	c->sq_entries = o->sq_entries;
	c->cq_entries = o->cq_entries;
	return 0;
}

static void rs_exit(struct rs *t)
{
	if (t->cmap)
		munmap(t->cmap, t->kc.ring_bytes);
	close(t->kc.sq_evfd);
	close(t->kc.cq_evfd);
	close(t->sock[0]);
	close(t->sock[1]);
	kvd_ring_teardown(&t->kc);
}

enum rs_mode {
	RS_ANY_CPU,	/* both sides sleep and wake each other */
	RS_ONE_CPU,	/* the same, preempted anywhere on one CPU */
	RS_POLLING,	/* neither sleeps: only the ring's atomics order */
};

static const char *const rs_mode_name[] = { "any CPU", "one CPU", "polling" };

static int first_cpu(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set))
		return 0;
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &set))
			return i;
	return 0;
}

static int run_phase(struct rs *t, double seconds, enum rs_mode mode,
		     uint64_t seed)
{
	pthread_attr_t attr;
	pthread_t th[2];
	cpu_set_t set;

	if (rs_init(t, seed)) {
		perror("ring set-up");
		return -1;
	}
	cur = t;
	t->polling = mode == RS_POLLING;
	t->deadline_ns = rs_now_ns() + (uint64_t)(seconds * 1e9);
	pthread_attr_init(&attr);
	if (mode == RS_ONE_CPU) {
		CPU_ZERO(&set);
		CPU_SET(first_cpu(), &set);
		pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
	}
	if (pthread_create(&th[0], &attr, kvd_thread, t) ||
	    pthread_create(&th[1], &attr, client_thread, t)) {
		perror("pthread_create");
		return -1;
	}
	pthread_attr_destroy(&attr);
	if (watchdog(t, th))
		_exit(1);	/* threads stuck: nothing to join */
	if (t->cc.inflight || t->sqe_seq != t->cqe_seq)
		atomic_fetch_add(&t->corrupt, 1);
	rs_exit(t);
	return 0;
}

static int report(enum rs_mode mode, struct rs *t)
{
	const char *name = rs_mode_name[mode];
	unsigned long long lost = t->lost_kvd + t->lost_kvd_cqfull +
				  t->lost_client;
	unsigned long long torn = t->torn_sqe + t->torn_cqe;

	printf("%-9s %llu SQEs in %llu rounds; %llu kvd sleeps, %llu doorbells, %llu CQ-full stalls\n",
	       name, (unsigned long long)t->sqes,
	       (unsigned long long)t->rounds,
	       (unsigned long long)t->d_sleeps,
	       (unsigned long long)t->doorbells,
	       (unsigned long long)t->cq_full);
	printf("%-9s lost wake-ups %llu (kvd %llu, kvd after CQ full %llu, client %llu); torn entries %llu (SQE %llu, CQE %llu); misordered %llu\n",
	       "", lost, (unsigned long long)t->lost_kvd,
	       (unsigned long long)t->lost_kvd_cqfull,
	       (unsigned long long)t->lost_client, torn,
	       (unsigned long long)t->torn_sqe,
	       (unsigned long long)t->torn_cqe,
	       (unsigned long long)t->misordered);
	/* not a lost wake-up: kvd writes the eventfd for nothing meanwhile */
	if (mode != RS_POLLING)
		printf("%-9s waits %llu; KV_CQ_NEED_WAKEUP still set after %llu of them\n",
		       "", (unsigned long long)t->waits,
		       (unsigned long long)t->stale_flag);
	if (lost || torn || t->misordered || t->corrupt)
		return 1;
	/* every path taken, or the run proved nothing */
	if (!t->sqes || !t->cq_full ||
	    (mode != RS_POLLING && (!t->d_sleeps || !t->doorbells))) {
		printf("%-9s FAIL: a path was never taken\n", "");
		return 1;
	}
	return 0;
}

int main(void)
{
	const char *env = getenv("RING_STRESS_SECONDS");
	double secs = env ? atof(env) : 3.0;
	const char *senv = getenv("RING_STRESS_SEED");
	uint64_t seed = senv ? strtoull(senv, NULL, 0) : rs_now_ns();
	static struct rs t;
	int bad = 0;

	if (secs <= 0)
		secs = 3.0;
	prctl(PR_SET_TIMERSLACK, 1UL);	/* sleeps of a few us, not 50 */
	printf("ring stress: %.1f s, seed %#llx, sq %u cq %u, %s\n", secs,
	       (unsigned long long)seed, RS_SQ_ENTRIES, 2 * RS_SQ_ENTRIES,
	       RS_ONE_MAPPING ? "one mapping" : "two mappings");
	for (int m = RS_ANY_CPU; m <= RS_POLLING; m++) {
		/* half the time for the first phase, a quarter each after */
		if (run_phase(&t, secs / (m ? 4 : 2), m, seed + (uint64_t)m))
			return 1;
		bad |= report(m, &t);
	}
	printf("%s\n", bad ? "FAIL" : "PASS");
	return bad;
}
