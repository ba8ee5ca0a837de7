// SPDX-License-Identifier: MIT
/*
 * Synchronous wrappers: one SQE, one doorbell if kvd sleeps, one CQE.
 * They use the start of the data area, so they refuse (-EBUSY) while
 * asynchronous requests are queued or in flight. With a call timeout
 * (kv_connect_params.call_timeout_ms) they give up with -ETIMEDOUT. A
 * request that fails leaves its reason for kv_last_error(), as the
 * kv_seq_* calls (which make these requests) do.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib.h"

/*
 * Where the ids a late completion of @sqe holds refs on are, in the data
 * area, and how many (0: it took none the caller learnt of).
 */
static uint32_t orphan_ids(const struct kv_sqe *sqe, int res, uint32_t *off)
{
	if (res <= 0)
		return 0;
	switch (sqe->opcode) {
	case KV_OP_ALLOC:
		*off = sqe->off;
		return (uint32_t)res;
	case KV_OP_LOOKUP:
		*off = (uint32_t)sqe->args[0];
		return (uint32_t)res;
	}
	return 0;
}

/* ALLOC_PREFIX takes all nr blocks once it succeeds, hits or not. */
static uint32_t orphan_prefix_ids(const struct kv_sqe *sqe, int res,
				  uint32_t *off)
{
	if (res < 0 || sqe->opcode != KV_OP_ALLOC_PREFIX)
		return 0;
	*off = sqe->off;
	return sqe->nr;
}

/*
 * The late completion of a timed-out ALLOC, LOOKUP or ALLOC_PREFIX took
 * refs that no caller knows of: give them back (one RELEASE now; if
 * that fails, kvd releases them when the client goes).
 */
static void release_orphan(struct kv_client *c, const struct kv_sqe *sqe,
			   int res)
{
	uint32_t off = 0, nr = orphan_ids(sqe, res, &off);
	kv_block_t *ids;

	if (!nr)
		nr = orphan_prefix_ids(sqe, res, &off);
	if (!nr || !kv_data_ptr(c, off, nr * 4))
		return;
	ids = malloc((size_t)nr * sizeof(*ids));
	if (!ids)
		return;
	memcpy(ids, kv_data_ptr(c, off, nr * 4), (size_t)nr * sizeof(*ids));
	kv_release(c, ids, nr);
	free(ids);
}

/*
 * Drop the late completions of sync calls that timed out: they are the
 * oldest ones in the CQ, since a sync call is made only with nothing
 * else in flight. The refs the last one took go back to kvd.
 */
static void reap_orphans(struct kv_client *c)
{
	struct kv_cqe *cqe;
	int res;

	while (c->sync_orphans && !kv_peek_cqe(c, &cqe)) {
		res = cqe->res;
		kv_cqe_seen(c, cqe);
		if (--c->sync_orphans == 0)
			release_orphan(c, &c->orphan, res);
	}
}

/*
 * May a sync call use the data area now? A dead client says so first:
 * the request kvd never answered still counts as in flight. So does a
 * timed-out one parked in kvd when kvd ended us: its completion never
 * comes, so -EBUSY only while kvd is still there.
 */
static int sync_ready(struct kv_client *c)
{
	if (c->dead)
		return __kv_reset(c);
	reap_orphans(c);
	if (!c->inflight && c->sq_tail == c->sq_submitted)
		return 0;
	return __kv_kvd_gone(c) ? __kv_reset(c) : -EBUSY;
}

int __kv_sync_op(struct kv_client *c, struct kv_sqe *proto)
{
	struct kv_sqe *sqe;
	struct kv_cqe *cqe;
	int ret;

	ret = sync_ready(c);
	if (ret)
		return ret;
	sqe = kv_get_sqe(c);
	if (!sqe)
		return -EBUSY;
	*sqe = *proto;
	ret = kv_submit(c);
	if (ret < 0) {
		/* Not published (a failed fence, say): take it back, so
		 * the next call is not refused with -EBUSY. */
		if (c->sq_tail != c->sq_submitted)
			c->sq_tail--;
		return ret;
	}
	ret = kv_wait_cqe_timeout(c, &cqe, c->call_timeout_ns);
	if (ret == -ETIME) {
		c->sync_orphans++;	/* still in flight: dropped later */
		c->orphan = *proto;
		return -ETIMEDOUT;
	}
	if (ret)
		return ret;
	ret = cqe->res;
	c->last_cqe_flags = cqe->flags;
	kv_cqe_seen(c, cqe);
	return ret;
}

/* Id arrays of the sync calls live at data offset 0. */
static int ids_fit(const struct kv_client *c, const void *ids, unsigned nr)
{
	if (!c || !ids || !nr)
		return -EINVAL;
	if (nr > KV_MAX_IDS || (uint64_t)nr * sizeof(kv_block_t) > c->data_bytes)
		return -E2BIG;
	return 0;
}

/*
 * kv_last_error's text for a -EDQUOT: kvd notes which limit refused the
 * client (kv_stats quota_why), as kv_connect's errbuf gives its reasons.
 */
static void quota_text(struct kv_client *c, const char *fn)
{
	char *b = c->last_error;
	size_t n = sizeof(c->last_error);
	struct kv_stats st;

	if (kv_stats(c, &st))
		st.quota_why = KV_QUOTA_NONE;
	switch (st.quota_why) {
	case KV_QUOTA_NAMESPACE:
		snprintf(b, n, "%s: namespace quota: the model's max_pages (%u pages) reached (kvd.conf; kvctl quota)",
			 fn, st.quota_limit);
		break;
	case KV_QUOTA_TENANT:
		snprintf(b, n, "%s: tenant quota: its max_pages (%u pages) reached, %u in use (kvd.conf; kvctl quota)",
			 fn, st.quota_limit, st.pages_used);
		break;
	case KV_QUOTA_CLIENT:
		snprintf(b, n, "%s: client quota: max_client_blocks (%u references) held; release some",
			 fn, st.quota_limit);
		break;
	case KV_QUOTA_PINS:
		snprintf(b, n, "%s: pin limit: pinned slabs at %u pages, half the namespace's quota, or half the pool",
			 fn, st.quota_limit);
		break;
	default:
		snprintf(b, n, "%s: %s", fn, strerror(EDQUOT));
	}
}

/*
 * @fn (a kv_seq_* call or a synchronous request) returned @ret: where it
 * failed, noted for kv_last_error().
 */
int __kv_failed_why(struct kv_client *c, const char *fn, int ret,
		    const char *why)
{
	if (ret >= 0 || !c || !why)
		return __kv_failed(c, fn, ret);
	snprintf(c->last_error, sizeof(c->last_error), "%s: %s: %s", fn,
		 strerror(-ret), why);
	return ret;
}

int __kv_failed(struct kv_client *c, const char *fn, int ret)
{
	if (ret >= 0 || !c)
		return ret;
	if (ret == -EDQUOT)
		quota_text(c, fn);
	else if (ret == -ENOSPC)
		snprintf(c->last_error, sizeof(c->last_error),
			 "%s: %s: every block of the pool is held, or cached under a held one (eviction goes leaf first)",
			 fn, strerror(ENOSPC));
	else
		snprintf(c->last_error, sizeof(c->last_error), "%s: %s", fn,
			 strerror(-ret));
	return ret;
}

int kv_nop(struct kv_client *c)
{
	struct kv_sqe sqe = { 0 };

	if (!c)
		return -EINVAL;
	kv_prep_nop(&sqe);
	return __kv_sync_op(c, &sqe);
}

static int alloc(struct kv_client *c, unsigned nr, kv_block_t *ids,
		 uint32_t timeout_ms)
{
	struct kv_sqe sqe = { 0 };
	int ret = ids_fit(c, ids, nr);

	if (ret)
		return ret;
	kv_prep_alloc(&sqe, 0, nr);
	if (timeout_ms && kv_sqe_set_wait(&sqe, timeout_ms))
		return -EINVAL;
	ret = __kv_sync_op(c, &sqe);
	if (ret > 0)
		memcpy(ids, c->data, (size_t)ret * sizeof(kv_block_t));
	return ret;
}

int kv_alloc(struct kv_client *c, unsigned nr, kv_block_t *ids)
{
	return __kv_failed(c, "kv_alloc", alloc(c, nr, ids, 0));
}

int kv_alloc_wait(struct kv_client *c, unsigned nr, kv_block_t *ids,
		  uint32_t timeout_ms)
{
	if (!timeout_ms || timeout_ms > KV_WAIT_MAX_MS)
		return -EINVAL;
	return __kv_failed(c, "kv_alloc_wait", alloc(c, nr, ids, timeout_ms));
}

static int ids_op(struct kv_client *c, const kv_block_t *ids, unsigned nr,
		  void (*prep)(struct kv_sqe *, uint32_t, unsigned))
{
	struct kv_sqe sqe = { 0 };
	int ret = ids_fit(c, ids, nr);

	if (ret)
		return ret;
	ret = sync_ready(c);
	if (ret)
		return ret;
	memmove(c->data, ids, (size_t)nr * sizeof(kv_block_t));
	prep(&sqe, 0, nr);
	return __kv_sync_op(c, &sqe);
}

int kv_release(struct kv_client *c, const kv_block_t *ids, unsigned nr)
{
	return __kv_failed(c, "kv_release", ids_op(c, ids, nr, kv_prep_release));
}

int kv_ref(struct kv_client *c, const kv_block_t *ids, unsigned nr)
{
	return __kv_failed(c, "kv_ref", ids_op(c, ids, nr, kv_prep_ref));
}

int kv_retain(struct kv_client *c, const kv_block_t *ids, unsigned nr,
	      unsigned priority, uint64_t pin_ms, unsigned flags)
{
	struct kv_sqe sqe = { 0 };
	int ret = ids_fit(c, ids, nr);

	if (!ret)
		ret = sync_ready(c);
	if (ret)
		return __kv_failed(c, "kv_retain", ret);
	memmove(c->data, ids, (size_t)nr * sizeof(kv_block_t));
	kv_prep_retain(&sqe, 0, nr, priority, pin_ms, flags);
	return __kv_failed(c, "kv_retain", __kv_sync_op(c, &sqe));
}

int kv_cow(struct kv_client *c, kv_block_t *ids, unsigned nr)
{
	int ret = ids_op(c, ids, nr, kv_prep_cow);

	if (ret >= 0)
		memcpy(ids, c->data, (size_t)nr * sizeof(kv_block_t));
	return __kv_failed(c, "kv_cow", ret);
}

int kv_stats(struct kv_client *c, struct kv_stats *st)
{
	struct kv_sqe sqe = { 0 };
	int ret;

	if (!c || !st)
		return -EINVAL;
	kv_prep_stats(&sqe, 0);
	ret = __kv_sync_op(c, &sqe);
	if (ret < 0)
		return ret;
	memcpy(st, c->data, sizeof(*st));
	return 0;
}

/*
 * Prefix-cache calls. Layout in the data area: hashes at 0 (16 bytes
 * each), ids right after them; commit entries at 0.
 */
static int fits(const struct kv_client *c, uint64_t bytes)
{
	return bytes > c->data_bytes ? -E2BIG : 0;
}

static int lookup(struct kv_client *c, const struct kv_hash *hashes,
		  unsigned nr, kv_block_t *ids)
{
	struct kv_sqe sqe = { 0 };
	uint32_t ids_off = nr * (uint32_t)sizeof(*hashes);
	int ret;

	if (!c || !hashes || !ids || !nr)
		return -EINVAL;
	if (nr > KV_MAX_IDS || fits(c, (uint64_t)nr * 20))
		return -E2BIG;
	ret = sync_ready(c);
	if (ret)
		return ret;
	memcpy(c->data, hashes, (size_t)nr * sizeof(*hashes));
	kv_prep_lookup(&sqe, 0, nr, ids_off);
	ret = __kv_sync_op(c, &sqe);
	if (ret > 0)
		memcpy(ids, c->data + ids_off, (size_t)ret * sizeof(*ids));
	return ret;
}

int kv_lookup(struct kv_client *c, const struct kv_hash *hashes, unsigned nr,
	      kv_block_t *ids)
{
	return __kv_failed(c, "kv_lookup", lookup(c, hashes, nr, ids));
}

static int alloc_prefix(struct kv_client *c, const struct kv_hash *hashes,
			unsigned n_hashes, unsigned nr_blocks, kv_block_t *ids)
{
	struct kv_sqe sqe = { 0 };
	uint32_t ids_off = n_hashes * (uint32_t)sizeof(*hashes);
	int ret;

	if (!c || !ids || !nr_blocks || n_hashes > nr_blocks ||
	    (n_hashes && !hashes))
		return -EINVAL;
	if (nr_blocks > KV_MAX_IDS ||
	    fits(c, (uint64_t)n_hashes * 16 + (uint64_t)nr_blocks * 4))
		return -E2BIG;
	ret = sync_ready(c);
	if (ret)
		return ret;
	memcpy(c->data, hashes, (size_t)n_hashes * sizeof(*hashes));
	kv_prep_alloc_prefix(&sqe, 0, n_hashes, nr_blocks, ids_off);
	ret = __kv_sync_op(c, &sqe);
	if (ret >= 0)
		memcpy(ids, c->data + ids_off, (size_t)nr_blocks * sizeof(*ids));
	return ret;
}

int kv_alloc_prefix(struct kv_client *c, const struct kv_hash *hashes,
		    unsigned n_hashes, unsigned nr_blocks, kv_block_t *ids)
{
	return __kv_failed(c, "kv_alloc_prefix",
			   alloc_prefix(c, hashes, n_hashes, nr_blocks, ids));
}

static int commit(struct kv_client *c, struct kv_commit *entries, unsigned nr)
{
	struct kv_sqe sqe = { 0 };
	size_t bytes = (size_t)nr * sizeof(*entries);
	int ret;

	if (!c || !entries || !nr)
		return -EINVAL;
	if (nr > KV_MAX_IDS || fits(c, bytes))
		return -E2BIG;
	ret = sync_ready(c);
	if (ret)
		return ret;
	memmove(c->data, entries, bytes);
	kv_prep_commit(&sqe, 0, nr);
	ret = __kv_sync_op(c, &sqe);
	if (ret >= 0)
		memcpy(entries, c->data, bytes);
	return ret;
}

int kv_commit(struct kv_client *c, struct kv_commit *entries, unsigned nr)
{
	return __kv_failed(c, "kv_commit", commit(c, entries, nr));
}
