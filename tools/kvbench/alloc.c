// SPDX-License-Identifier: MIT
/*
 * The alloc/release load (kvbench's default mode), one engine process:
 * for every request it allocates ceil(tokens / block_tokens) blocks,
 * fills every byte of them with a pattern derived from (block id,
 * generation), keeps --live requests at once and verifies the oldest
 * just before it releases it. A generation is unique per (process,
 * request), so a block that kvd hands to two holders, or that anyone
 * else writes, fails the check. Only the ALLOC and RELEASE round trips
 * are timed; the pattern work is not. With --batch N, N ALLOC SQEs per
 * submit, then N RELEASE SQEs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

/* ---- pattern ---- */

static uint64_t pattern_base(kv_block_t id, uint64_t gen)
{
	return splitmix64(gen ^ splitmix64(id));
}

static int pattern_fill(struct worker *w, const struct req *q)
{
	for (uint32_t b = 0; b < q->nblocks; b++) {
		uint64_t *p = kv_block_ptr(w->c, q->ids[b]);
		uint64_t v = pattern_base(q->ids[b], q->gen);

		if (!p) {
			fprintf(stderr, "kvbench: proc %u: kvd gave block id %u, outside the pool\n",
				w->idx, q->ids[b]);
			return -1;
		}
		for (size_t i = 0; i < w->words; i++, v += KVB_PATTERN_STEP)
			p[i] = v;
	}
	return 0;
}

static void mismatch(struct worker *w, const struct req *q, kv_block_t id,
		     size_t first, uint64_t want, uint64_t got, size_t bad)
{
	if (w->msgs++ >= KVB_MAX_MSGS)
		return;
	fprintf(stderr, "kvbench: proc %u: pattern mismatch in block %u (request %llu, generation %#llx): word %zu expected %#018llx, found %#018llx; %zu of %zu words differ\n",
		w->idx, id, (unsigned long long)q->seq,
		(unsigned long long)q->gen, first, (unsigned long long)want,
		(unsigned long long)got, bad, w->words);
	if (w->msgs == KVB_MAX_MSGS)
		fprintf(stderr, "kvbench: proc %u: further mismatches counted, not shown\n",
			w->idx);
}

static void verify_block(struct worker *w, const struct req *q, kv_block_t id)
{
	const uint64_t *p = kv_block_ptr(w->c, id);
	uint64_t base = pattern_base(id, q->gen), v = base, want = 0, got = 0;
	size_t bad = 0, first = 0;

	for (size_t i = 0; i < w->words; i++, v += KVB_PATTERN_STEP) {
		if (p[i] == v)
			continue;
		if (!bad++) {
			first = i;
			want = v;
			got = p[i];
		}
	}
	w->r.bytes_checked += w->words * sizeof(uint64_t);
	if (!bad)
		return;
	w->r.bad_blocks++;
	w->r.bad_words += bad;
	mismatch(w, q, id, first, want, got, bad);
}

static void verify_req(struct worker *w, const struct req *q)
{
	for (uint32_t b = 0; b < q->nblocks; b++)
		verify_block(w, q, q->ids[b]);
}

/* ---- requests ---- */

static struct req *live_at(struct worker *w, uint32_t i)
{
	return &w->live[(w->head + i) % w->o->live_max];
}

static int req_new(struct worker *w, struct req *q)
{
	const struct kvb_opts *o = w->o;
	uint32_t span = o->max_tokens - o->min_tokens + 1;
	uint32_t tokens = o->min_tokens + (uint32_t)(rng_next(&w->rng) % span);

	q->nblocks = (tokens + o->geom.block_tokens - 1) / o->geom.block_tokens;
	q->seq = w->next_seq++;
	q->gen = w->gen_base ^ ((uint64_t)(w->idx + 1) << 40 | q->seq);
	if (q->nblocks > q->cap) {
		kv_block_t *ids = realloc(q->ids, q->nblocks * sizeof(*ids));

		if (!ids) {
			fprintf(stderr, "kvbench: proc %u: out of memory\n",
				w->idx);
			return -ENOMEM;
		}
		q->ids = ids;
		q->cap = q->nblocks;
	}
	return 0;
}

static void swap_req(struct req *a, struct req *b)
{
	struct req t = *a;

	*a = *b;
	*b = t;
}

/* An allocated, written request joins the live ring (it has room). */
static void live_push(struct worker *w, struct req *q)
{
	swap_req(live_at(w, w->nlive), q);
	w->nlive++;
	w->live_blocks += live_at(w, w->nlive - 1)->nblocks;
	if (w->live_blocks > w->r.max_live_blocks)
		w->r.max_live_blocks = w->live_blocks;
}

static int op_failed(struct worker *w, const char *op, const struct req *q,
		     int res)
{
	fprintf(stderr, "kvbench: proc %u: %s of %u blocks (request %llu): %s\n",
		w->idx, op, q->nblocks, (unsigned long long)q->seq,
		res < 0 ? strerror(-res) : "short count");
	return -1;
}

/* ---- ALLOC and RELEASE round trips ---- */

static int alloc_sync(struct worker *w, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct req *q = &w->pend[i];
		uint64_t t0 = now_ns();

		w->res[i] = kv_alloc(w->c, q->nblocks, q->ids);
		kvb_record(w, KVB_OP_ALLOC, now_ns() - t0, 1);
	}
	return 0;
}

static int release_sync(struct worker *w, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct req *q = live_at(w, i);
		uint64_t t0 = now_ns();

		w->res[i] = kv_release(w->c, q->ids, q->nblocks);
		kvb_record(w, KVB_OP_RELEASE, now_ns() - t0, 1);
	}
	return 0;
}

/* Reap @n CQEs; results by user_data (the request's index). */
static int reap(struct worker *w, unsigned n)
{
	struct kv_cqe *cqe;
	int ret;

	for (unsigned i = 0; i < n; i++)
		w->res[i] = -EINPROGRESS;
	for (unsigned i = 0; i < n; i++) {
		ret = kv_wait_cqe(w->c, &cqe);
		if (ret) {
			fprintf(stderr, "kvbench: proc %u: waiting for a CQE: %s\n",
				w->idx, strerror(-ret));
			return ret;
		}
		if (cqe->user_data < n)
			w->res[cqe->user_data] = cqe->res;
		kv_cqe_seen(w->c, cqe);
	}
	return 0;
}

/* Prepare one SQE per request; ids at consecutive data offsets. */
static int prep_batch(struct worker *w, struct req *(*get)(struct worker *,
							   unsigned),
		      unsigned n, bool alloc)
{
	uint32_t off = 0;

	for (unsigned i = 0; i < n; i++) {
		struct req *q = get(w, i);
		uint32_t len = q->nblocks * sizeof(kv_block_t);
		struct kv_sqe *sqe = kv_get_sqe(w->c);
		void *d = kv_data_ptr(w->c, off, len);

		if (!sqe || !d) {
			fprintf(stderr, "kvbench: proc %u: no %s for a batch of %u\n",
				w->idx, sqe ? "data area room" : "SQE", n);
			return -ENOSPC;
		}
		if (alloc) {
			kv_prep_alloc(sqe, off, q->nblocks);
		} else {
			memcpy(d, q->ids, len);
			kv_prep_release(sqe, off, q->nblocks);
		}
		kv_sqe_set_data64(sqe, i);
		off += len;
	}
	return 0;
}

/* One submit, reap all; every op's latency is the batch's round trip. */
static int submit_batch(struct worker *w, unsigned n, bool alloc)
{
	uint64_t t0 = now_ns();
	int ret = kv_submit(w->c);

	if (ret != (int)n) {
		fprintf(stderr, "kvbench: proc %u: kv_submit: %s\n", w->idx,
			ret < 0 ? strerror(-ret) : "short submit");
		return -1;
	}
	ret = reap(w, n);
	if (ret)
		return ret;
	t0 = now_ns() - t0;
	w->r.serve_ns += t0;
	kvb_record(w, alloc ? KVB_OP_ALLOC : KVB_OP_RELEASE, t0, n);
	return 0;
}

static struct req *pend_at(struct worker *w, unsigned i)
{
	return &w->pend[i];
}

static int alloc_batch(struct worker *w, unsigned n)
{
	uint32_t off = 0;
	int ret;

	ret = prep_batch(w, pend_at, n, true);
	if (!ret)
		ret = submit_batch(w, n, true);
	if (ret)
		return ret;
	/* The ids stay in the data area until the next submit. */
	for (unsigned i = 0; i < n; i++) {
		struct req *q = &w->pend[i];
		uint32_t len = q->nblocks * sizeof(kv_block_t);

		if (w->res[i] > 0)
			memcpy(q->ids, kv_data_ptr(w->c, off, len),
			       (size_t)w->res[i] * sizeof(kv_block_t));
		off += len;
	}
	return 0;
}

static int release_batch(struct worker *w, unsigned n)
{
	int ret = prep_batch(w, live_at, n, false);

	return ret ? ret : submit_batch(w, n, false);
}

/* Verify and release the @n oldest live requests. */
static int release_oldest(struct worker *w, unsigned n, bool forced)
{
	int ret;

	for (unsigned i = 0; i < n; i++)
		verify_req(w, live_at(w, i));
	if (w->o->batch > 1)
		ret = release_batch(w, n);
	else
		ret = release_sync(w, n);
	if (ret)
		return ret;
	for (unsigned i = 0; i < n; i++) {
		struct req *q = live_at(w, i);

		if (w->res[i] != (int)q->nblocks)
			return op_failed(w, "RELEASE", q, w->res[i]);
		w->live_blocks -= q->nblocks;
	}
	w->head = (w->head + n) % w->o->live_max;
	w->nlive -= n;
	if (forced)
		w->r.forced += n;
	return 0;
}

/*
 * Move what succeeded to the live ring (writing its pattern) and keep
 * what got -ENOSPC in front of pend. Returns how many still wait.
 */
static int sort_results(struct worker *w, unsigned n)
{
	unsigned left = 0;

	for (unsigned i = 0; i < n; i++) {
		struct req *q = &w->pend[i];

		if (w->res[i] == -ENOSPC) {
			w->r.enospc++;
			swap_req(&w->pend[left++], q);
			continue;
		}
		if (w->res[i] != (int)q->nblocks)
			return op_failed(w, "ALLOC", q, w->res[i]);
		w->r.blocks += q->nblocks;
		w->r.requests++;
		if (pattern_fill(w, q))
			return -1;
		live_push(w, q);
	}
	return (int)left;
}

/* Allocate the @n requests in pend; on -ENOSPC free our oldest, retry. */
static int alloc_group(struct worker *w, unsigned n)
{
	uint64_t stuck_since = 0;
	unsigned tries = 0;
	int ret;

	while (n) {
		if (w->o->batch > 1)
			ret = alloc_batch(w, n);
		else
			ret = alloc_sync(w, n);
		if (!ret)
			ret = sort_results(w, n);
		if (ret <= 0)
			return ret;
		n = (unsigned)ret;
		if (w->nlive)
			ret = release_oldest(w, n < w->nlive ? n : w->nlive,
					     true);
		else
			ret = kvb_wait_for_room(w, &stuck_since, &tries);
		if (ret)
			return ret;
	}
	return 0;
}

int kvb_alloc_run(struct worker *w)
{
	const struct kvb_opts *o = w->o;
	unsigned done = 0, k;
	int ret;

	while (done < o->requests) {
		k = o->requests - done < o->batch ? o->requests - done :
						    o->batch;
		/* Room in the live window: release the oldest first. */
		if (w->nlive + k > o->live_max) {
			ret = release_oldest(w, w->nlive + k - o->live_max,
					     false);
			if (ret)
				return ret;
		}
		for (unsigned i = 0; i < k; i++)
			if (req_new(w, &w->pend[i]))
				return -1;
		ret = alloc_group(w, k);
		if (ret)
			return ret;
		done += k;
	}
	while (w->nlive) {
		k = w->nlive < o->batch ? w->nlive : o->batch;
		ret = release_oldest(w, k, false);
		if (ret)
			return ret;
	}
	return 0;
}

int kvb_alloc_init(struct worker *w)
{
	const struct kvb_opts *o = w->o;

	w->live = calloc(o->live_max, sizeof(*w->live));
	w->pend = calloc(o->batch, sizeof(*w->pend));
	w->res = calloc(o->batch, sizeof(*w->res));
	if (!w->live || !w->pend || !w->res ||
	    kvb_samples_init(&w->s[KVB_OP_ALLOC], o->requests) ||
	    kvb_samples_init(&w->s[KVB_OP_RELEASE], o->requests))
		return -ENOMEM;
	return 0;
}
