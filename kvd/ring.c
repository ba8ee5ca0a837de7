// SPDX-License-Identifier: MIT
/*
 * The daemon's side of each client's request ring.
 *
 * Ordering contract (the library's side is in libkvclient/queue.c):
 *
 * SQ: the client writes SQEs, then stores sq_tail with release (C1).
 *     kvd loads sq_tail with acquire (D1, pairs with C1), copies each SQE
 *     out of shared memory once, and stores sq_head with release (D2)
 *     after the copy; the client loads sq_head with acquire (C2, pairs
 *     with D2) before it reuses a slot.
 * CQ: kvd writes CQEs, then stores cq_tail with release (D3); the client
 *     loads it with acquire (C3, pairs with D3), reads the CQEs and stores
 *     cq_head with release (C4); kvd loads cq_head with acquire (D4, pairs
 *     with C4) before it overwrites a CQE.
 * Wake-ups (Dekker): a side about to sleep sets its NEED_WAKEUP flag, then
 *     a full barrier, then looks at the ring once more; the other side
 *     publishes its index, a full barrier, then reads the flag and writes
 *     the eventfd only if it is set. Of the two stores at least one is seen
 *     by the other side's load, so no wake-up is lost:
 *       kvd sleeping:   D5 set KV_SQ_NEED_WAKEUP; mb; load sq_tail
 *       client submit:  C1 store sq_tail;  mb; load sq_flags  (C5)
 *       client waiting: C6 set KV_CQ_NEED_WAKEUP; mb; load cq_tail
 *       kvd completing: D3 store cq_tail;  mb; load cq_flags  (D6)
 *     KV_SQ_CQ_FULL works the same way for a CQ with no room: kvd sets it,
 *     mb, re-reads cq_head (D7); the client stores cq_head, mb, reads it
 *     (C7) and rings the doorbell.
 *
 * Out of order: an SQE with KV_SQE_WAIT that must wait for blocks is
 * parked (copied to c->waits, its SQ slot given back, a CQ slot kept for
 * it) and the SQEs behind it are served meanwhile, so a RELEASE queued
 * after a waiting ALLOC frees its blocks at once. Only KV_SQE_LINK orders
 * SQEs: one linked to a parked SQE is parked behind it.
 *
 * Everything read from the ring is untrusted: indices are checked against
 * the ring size, SQEs are copied before they are looked at, and a client
 * whose indices make no sense is disconnected, never trusted.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <kv/barrier.h>

#include "client.h"
#include "daemon.h"
#include "extent.h"
#include "opdef.h"
#include "ring.h"

#define KVD_RING_HDR_BYTES	512	/* six indices, one cache line each */

/* What the next SQE taken is linked to (c->link). */
enum {
	KVD_LINK_NONE,		/* nothing: the one before had no KV_SQE_LINK
				 * or completed with res >= 0 */
	KVD_LINK_PARKED,	/* the last of c->waits */
	KVD_LINK_FAILED,	/* one that failed: -ECANCELED */
};

int kvd_ring_setup(struct kvd_client *c, uint32_t sq_entries,
		   uint32_t data_bytes)
{
	struct kv_ring_offsets *o = &c->off;
	uint32_t cq_entries = 2 * sq_entries;
	size_t bytes;
	int ret;

	memset(o, 0, sizeof(*o));
	o->sq_head = 0;
	o->sq_tail = 64;
	o->sq_flags = 128;
	o->cq_head = 192;
	o->cq_tail = 256;
	o->cq_flags = 320;
	o->sq_entries = sq_entries;
	o->cq_entries = cq_entries;
	o->sqes = KVD_RING_HDR_BYTES;
	o->cqes = o->sqes + sq_entries * sizeof(struct kv_sqe);
	o->data = (o->cqes + cq_entries * sizeof(struct kv_cqe) + 4095) &
		  ~4095U;
	o->data_bytes = data_bytes;
	bytes = (size_t)o->data + data_bytes;
	o->ring_bytes = (uint32_t)bytes;

	/* Every SQE may wait: one entry per SQ slot bounds them. */
	c->waits = calloc(sq_entries, sizeof(*c->waits));
	if (!c->waits)
		return -ENOMEM;
	c->ring_fd = memfd_create("kvd-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (c->ring_fd < 0) {
		ret = -errno;
		goto err_free;
	}
	if (ftruncate(c->ring_fd, (off_t)bytes))
		goto err_close;
	/* A client must not shrink the ring under kvd (SIGBUS). */
	if (fcntl(c->ring_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW |
		  F_SEAL_SEAL))
		goto err_close;
	c->ring = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		       c->ring_fd, 0);
	if (c->ring == MAP_FAILED) {
		c->ring = NULL;
		goto err_close;
	}
	c->ring_bytes = bytes;
	c->sq_khead = (uint32_t *)((char *)c->ring + o->sq_head);
	c->sq_ktail = (uint32_t *)((char *)c->ring + o->sq_tail);
	c->sq_kflags = (uint32_t *)((char *)c->ring + o->sq_flags);
	c->cq_khead = (uint32_t *)((char *)c->ring + o->cq_head);
	c->cq_ktail = (uint32_t *)((char *)c->ring + o->cq_tail);
	c->cq_kflags = (uint32_t *)((char *)c->ring + o->cq_flags);
	c->sqes = (struct kv_sqe *)((char *)c->ring + o->sqes);
	c->cqes = (struct kv_cqe *)((char *)c->ring + o->cqes);
	c->data = (uint8_t *)c->ring + o->data;
	c->data_bytes = data_bytes;
	c->sq_entries = sq_entries;
	c->cq_entries = cq_entries;
	c->sq_head = 0;
	c->cq_tail = 0;
	c->cq_head_seen = 0;
	c->cq_stalled = false;
	c->nr_waits = 0;
	c->link = KVD_LINK_NONE;
	c->cqe_deferred = false;
	c->ext_behind = false;
	c->ext_epoch = 0;
	return 0;

err_close:
	ret = -errno;
	close(c->ring_fd);
	c->ring_fd = -1;
err_free:
	free(c->waits);
	c->waits = NULL;
	return ret;
}

void kvd_ring_teardown(struct kvd_client *c)
{
	if (c->ring)
		munmap(c->ring, c->ring_bytes);
	c->ring = NULL;
	if (c->ring_fd >= 0)
		close(c->ring_fd);
	c->ring_fd = -1;
	/* Parked SQEs hold nothing: a request that waits got no blocks. */
	free(c->waits);
	c->waits = NULL;
	c->nr_waits = 0;
}

/* CQ slots kept for SQEs taken but not yet completed. */
static uint32_t cq_kept(const struct kvd_client *c)
{
	return c->nr_waits + c->cqe_deferred;
}

/*
 * Has the client reaped room for a CQE? Reads its head (D4: pairs with
 * its release of cq_head, C4) and keeps it for cq_has_room.
 */
bool kvd_ring_cq_reaped(struct kvd_client *c)
{
	c->cq_head_seen = kv_smp_load_acquire(c->cq_khead);
	return c->cq_tail + cq_kept(c) - c->cq_head_seen < c->cq_entries;
}

bool kvd_ring_parked(const struct kvd_client *c)
{
	return c->nr_waits || c->cqe_deferred;
}

bool kvd_ring_blocked(const struct kvd_client *c)
{
	return c->cqe_deferred || c->nr_waits >= c->sq_entries;
}

/*
 * Room for one more CQE, besides those kept for parked SQEs? Sets
 * KV_SQ_CQ_FULL when there is none.
 */
static bool cq_has_room(struct kvd_client *c)
{
	/* A stale head only undercounts the room: the client's line is
	 * read when the CQ looks full, not on every completion. */
	if (c->cq_tail + cq_kept(c) - c->cq_head_seen < c->cq_entries ||
	    kvd_ring_cq_reaped(c))
		return true;
	kv_atomic_or(c->sq_kflags, KV_SQ_CQ_FULL);
	kv_smp_mb();	/* D7: pairs with C7 */
	if (kvd_ring_cq_reaped(c)) {
		kv_atomic_andnot(c->sq_kflags, KV_SQ_CQ_FULL);
		return true;
	}
	return false;
}

static void post_cqe(struct kvd_client *c, uint64_t user_data, int res,
		     uint32_t flags)
{
	struct kv_cqe *cqe = &c->cqes[c->cq_tail & (c->cq_entries - 1)];

	cqe->user_data = user_data;
	cqe->res = res;
	cqe->flags = res >= 0 ? flags : 0;
	c->cq_tail++;
}

/*
 * A KV_SQE_WAIT request the pool or a quota could not serve yet waits;
 * not one over the client's own limit (max_client_blocks), which only
 * the client itself can lift.
 */
static bool must_wait(const struct kvd_client *c, const struct kv_sqe *sqe,
		      int res)
{
	if (res == -EINPROGRESS)
		return true;	/* a tier's read for it is in flight */
	if (!(sqe->flags & KV_SQE_WAIT))
		return false;
	if (res == -EDQUOT && !kvd_holder_room(&c->holder, sqe->nr))
		return false;
	return res == -ENOSPC || res == -EDQUOT;
}

/* How long a parked @sqe may wait: its own timeout, or a tier's I/O's
 * (not KV_SQE_WAIT: a lookup waiting for a read), never for ever. */
static uint64_t wait_ns(const struct kv_sqe *sqe)
{
	return sqe->flags & KV_SQE_WAIT ? sqe->args[3] * 1000000ULL :
	       KVD_TIER_IO_WAIT_NS;
}

/*
 * A parked @sqe's time is up. One that waited on a tier's read (a
 * stuck disk) is served now with what the pool and the host tier have,
 * not failed; one of KV_SQE_WAIT gets -ETIMEDOUT.
 */
static int past_deadline(struct kvd *d, struct kvd_client *c,
			 const struct kv_sqe *sqe)
{
	int res;

	if (sqe->flags & KV_SQE_WAIT)
		return -ETIMEDOUT;
	c->no_fetch = true;
	res = kvd_op_issue(d, c, sqe);
	c->no_fetch = false;
	return res == -EINPROGRESS ? -ETIMEDOUT : res;
}

/* Park @sqe at the end of c->waits (room checked by the caller). */
static void park(struct kvd *d, struct kvd_client *c,
		 const struct kv_sqe *sqe, int state)
{
	struct kvd_wait *w = &c->waits[c->nr_waits];

	if (!c->nr_waits)
		c->wait_frees = d->pool.frees;
	w->sqe = *sqe;
	w->state = state;
	w->deadline_ns = kvd_now_ns() + wait_ns(sqe);
	c->nr_waits++;
	/* only its successor in the SQ can be linked to it */
	c->link = (sqe->flags & KV_SQE_LINK) ? KVD_LINK_PARKED : KVD_LINK_NONE;
}

/*
 * The completion of @sqe with @res, unless the client lacks extents it
 * may name: then it is held back (serving stops). False when held back.
 */
static bool complete(struct kvd *d, struct kvd_client *c,
		     const struct kv_sqe *sqe, int res)
{
	if (!kvd_extents_current(d, c)) {
		c->cqe_deferred = true;
		c->def_user_data = sqe->user_data;
		c->def_res = res;
		c->def_flags = c->cqe_flags;
		return false;
	}
	post_cqe(c, sqe->user_data, res, c->cqe_flags);
	c->cqe_flags = 0;
	return true;
}

/*
 * Parked entry @i completed with @res: drop it, and tell the SQE linked
 * to it (the next entry, or the next SQE taken) how it went.
 */
static void unpark(struct kvd_client *c, uint32_t i, int res)
{
	bool linked = c->waits[i].sqe.flags & KV_SQE_LINK;

	c->nr_waits--;
	memmove(&c->waits[i], &c->waits[i + 1],
		(c->nr_waits - i) * sizeof(*c->waits));
	if (!linked)
		return;
	if (i < c->nr_waits)
		c->waits[i].state = res >= 0 ? KVD_WAIT_READY : KVD_WAIT_CANCEL;
	else
		c->link = res >= 0 ? KVD_LINK_NONE : KVD_LINK_FAILED;
}

/*
 * One parked entry's turn: false while it still waits, else true with
 * its result in *res. A waiting request is tried again once blocks were
 * freed or cached since the last try (@freed; a try that fails may
 * evict), and answered -ETIMEDOUT at its deadline (seen by the 250 ms
 * tick at the latest; @now is the clock read once per pass).
 */
static bool wait_turn(struct kvd *d, struct kvd_client *c,
		      struct kvd_wait *w, bool freed, uint64_t now, int *res)
{
	switch (w->state) {
	case KVD_WAIT_LINKED:
		return false;
	case KVD_WAIT_CANCEL:
		*res = -ECANCELED;
		return true;
	case KVD_WAIT_READY:
		/* its first try: its wait starts now */
		*res = kvd_op_issue(d, c, &w->sqe);
		if (!must_wait(c, &w->sqe, *res))
			return true;
		w->state = KVD_WAIT_PARKED;
		w->deadline_ns = now + wait_ns(&w->sqe);
		return false;
	}
	if (now >= w->deadline_ns) {
		*res = past_deadline(d, c, &w->sqe);
		return true;
	}
	if (!freed)
		return false;
	*res = kvd_op_issue(d, c, &w->sqe);
	return !must_wait(c, &w->sqe, *res);
}

/*
 * Give every parked entry its turn, oldest first, counting the CQEs
 * posted in *posted. False when a completion was held back (serving
 * stops).
 */
static bool retry_waiting(struct kvd *d, struct kvd_client *c,
			  uint32_t *posted)
{
	bool freed = d->pool.frees != c->wait_frees;
	uint64_t now = kvd_now_ns();
	int res;

	c->wait_frees = d->pool.frees;
	for (uint32_t i = 0; i < c->nr_waits;) {
		struct kvd_wait *w = &c->waits[i];
		struct kv_sqe sqe = w->sqe;

		if (!wait_turn(d, c, w, freed, now, &res)) {
			i++;
			continue;
		}
		/* entry i is now the next one: its turn comes in this pass */
		unpark(c, i, res);
		if (!complete(d, c, &sqe, res))
			return false;
		(*posted)++;
	}
	return true;
}

/*
 * kvd_op_issue, counted per opcode (KV_ADMIN_OPS): an increment per SQE,
 * and a clock read either side of 1 in 2^KVD_OP_SAMPLE_SHIFT of them.
 */
static int issue_counted(struct kvd *d, struct kvd_client *c,
			 const struct kv_sqe *sqe)
{
	struct kvd_op_stat *s;
	uint64_t t0;
	int res;

	if (sqe->opcode >= KV_OP__MAX)
		return kvd_op_issue(d, c, sqe);
	s = &d->op_stats[sqe->opcode];
	if (s->requests++ & ((1U << KVD_OP_SAMPLE_SHIFT) - 1)) {
		res = kvd_op_issue(d, c, sqe);
	} else {
		t0 = kvd_now_ns();
		res = kvd_op_issue(d, c, sqe);
		kvd_op_stat_time(s, kvd_now_ns() - t0);
	}
	if (res < 0 && res != -EINPROGRESS)
		s->errors++;
	return res;
}

/*
 * A new SQE taken off the SQ. Returns true when it completed now with
 * *res, false when it was parked (waiting, or linked to a parked one).
 */
static bool take(struct kvd *d, struct kvd_client *c,
		 const struct kv_sqe *sqe, int *res)
{
	bool linked = sqe->flags & KV_SQE_LINK;

	switch (c->link) {
	case KVD_LINK_PARKED:
		park(d, c, sqe, KVD_WAIT_LINKED);
		return false;
	case KVD_LINK_FAILED:
		*res = -ECANCELED;
		c->link = linked ? KVD_LINK_FAILED : KVD_LINK_NONE;
		return true;
	}
	*res = issue_counted(d, c, sqe);
	if (must_wait(c, sqe, *res)) {
		park(d, c, sqe, KVD_WAIT_PARKED);
		return false;
	}
	c->link = linked && *res < 0 ? KVD_LINK_FAILED : KVD_LINK_NONE;
	return true;
}

/*
 * kvd_ring_process - serve SQEs of @c until @budget units of work are
 * spent (an SQE of n ids costs 1 + n / 1024). Returns the number served,
 * or -EPROTO when the client's indices are corrupt (the caller
 * disconnects it). Stops early, leaving SQEs queued, when the CQ is full:
 * no completion is ever dropped. A completion is posted only once the
 * client has been sent every extent it may name (extent.c); until then
 * it is held back (one at most: serving stops there). A KV_SQE_WAIT
 * request short of blocks is parked, and the SQEs behind it served; its
 * CQE comes when blocks come or its deadline passes, out of SQE order.
 * SQEs stay queued while sq_entries are parked.
 */
int kvd_ring_process(struct kvd *d, struct kvd_client *c, uint32_t budget)
{
	uint32_t head = c->sq_head, tail, done = 0, posted = 0, work = 0;

	/* D1: pairs with the client's release of sq_tail (C1). */
	tail = kv_smp_load_acquire(c->sq_ktail);
	if (tail - head > c->sq_entries)
		return -EPROTO;
	if (c->cq_stalled) {
		/* Served again: no doorbell needed after reaping. */
		kv_atomic_andnot(c->sq_kflags, KV_SQ_CQ_FULL);
		c->cq_stalled = false;
	}
	if (c->cqe_deferred) {
		if (!kvd_extents_current(d, c))
			return 0;
		/* its CQ slot was free when the SQE was taken: still is */
		post_cqe(c, c->def_user_data, c->def_res, c->def_flags);
		c->cqe_deferred = false;
		posted++;
	}
	if (c->nr_waits && !retry_waiting(d, c, &posted))
		goto out;
	/* Budget in work, not SQEs: an SQE of n ids costs 1 + n / 1024. */
	while (head != tail && work < budget &&
	       c->nr_waits < c->sq_entries) {
		struct kv_sqe sqe;
		int res;

		if (!cq_has_room(c)) {
			c->cq_stalled = true;
			break;
		}
		memcpy(&sqe, &c->sqes[head & (c->sq_entries - 1)], sizeof(sqe));
		head++;
		done++;
		work += 1 + sqe.nr / 1024;
		if (!take(d, c, &sqe, &res))
			continue;	/* parked: its CQ slot is kept */
		if (!complete(d, c, &sqe, res))
			break;
		posted++;
	}
out:
	if (done) {
		c->sq_head = head;
		c->ops += done;
		d->ops += done;
	}
	/*
	 * SQ slots first, then CQEs: a client that has seen the CQE of an
	 * SQE finds its slot free (as io_uring), so it may reap, then
	 * queue, without looking twice.
	 */
	if (done) {
		/* D2: SQ slots reusable; pairs with the client's acquire (C2). */
		kv_smp_store_release(c->sq_khead, head);
	}
	if (posted) {
		/* D3: publish CQEs; pairs with the client's acquire (C3). */
		kv_smp_store_release(c->cq_ktail, c->cq_tail);
	}
	if (posted)
		kvd_ring_wake(c);
	/* SQEs served; a held-back CQE posted alone counts as progress */
	return (int)(done ? done : posted);
}

/* D6: wake a client that sleeps on its CQ. */
void kvd_ring_wake(struct kvd_client *c)
{
	uint64_t one = 1;

	kv_smp_mb();	/* pairs with C6 */
	if (KV_READ_ONCE(*c->cq_kflags) & KV_CQ_NEED_WAKEUP) {
		if (write(c->cq_evfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			kvd_dbg("client %u: cq eventfd: %m", c->id);
	}
}

/*
 * kvd_ring_prepare_sleep - set KV_SQ_NEED_WAKEUP (D5) and look once more.
 * Returns true when SQEs arrived meanwhile (the caller must not sleep);
 * a ring stalled on a full CQ counts as idle until the client reaps.
 */
bool kvd_ring_prepare_sleep(struct kvd_client *c)
{
	uint32_t tail;

	kv_atomic_or(c->sq_kflags, KV_SQ_NEED_WAKEUP);
	kv_smp_mb();	/* pairs with C5 */
	tail = kv_smp_load_acquire(c->sq_ktail);
	if (tail == c->sq_head)
		return false;
	/* Held back for extents, or sq_entries SQEs parked: frees, the
	 * client and the tick wake kvd, not SQEs queued behind. */
	if (kvd_ring_blocked(c))
		return false;
	if (c->cq_stalled && !cq_has_room(c))
		return false;
	kv_atomic_andnot(c->sq_kflags, KV_SQ_NEED_WAKEUP);
	return true;
}
