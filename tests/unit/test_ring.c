// SPDX-License-Identifier: MIT
/*
 * The daemon's side of a request ring (kvd/ring.c, kvd/opdef.c) against a
 * client written by hand here: SQEs written into the shared ring, sq_tail
 * published with a release store, CQEs reaped and cq_head given back, as
 * libkvclient/queue.c does.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <cmocka.h>

#include <kv/barrier.h>

#include "client.h"
#include "daemon.h"
#include "ring.h"

#define SQ_ENTRIES	8
#define CQ_ENTRIES	(2 * SQ_ENTRIES)
#define DATA_BYTES	4096
#define POOL_PAGES	16
#define BUDGET		64

/* 16 layers, 8 kv heads, 128 dim, 8 tokens, fp16: 512 KiB, 64 blocks. */
static const struct kv_geometry geom = {
	.layers = 16, .kv_heads = 8, .head_dim = 128, .block_tokens = 8,
	.dtype = KV_DTYPE_FP16,
};

struct ctx {
	struct kvd	d;
	struct kvd_ns	ns;
	struct kvd_client c;
	uint32_t	sq_tail;	/* the client's own copies */
	uint32_t	cq_head;
	uint32_t	freed;		/* of fill_ns's blocks, from the end */
};

/* A tenant key for the tests: any bytes do. */
static const struct kvd_tenant_key t_key = { { 1 } };

static int ctx_setup(void **state)
{
	struct ctx *t = calloc(1, sizeof(*t));

	if (!t)
		return -1;
	*state = t;
	t->c.ring_fd = -1;
	t->c.cq_evfd = -1;
	if (kvd_pool_init(&t->d.pool, POOL_PAGES))
		return -1;
	if (kvd_ns_init(&t->ns, &t->d.pool, 0, "model", "", &geom, 0, &t_key))
		return -1;
	t->d.ns = &t->ns;
	t->d.nr_ns = 1;
	t->d.cfg.max_namespaces = 1;
	t->d.nr_clients = 1;
	/* one tenant, index 0, whose pages the namespace is charged to */
	t->ns.tacct = &t->d.tenants[0].acct;
	t->d.tenants[0].live = true;
	t->d.tenants[0].nr_clients = 1;
	t->d.cfg.sq_budget = BUDGET;
	t->d.scratch = malloc(KV_MAX_DATA_BYTES);
	if (!t->d.scratch)
		return -1;
	if (kvd_ring_setup(&t->c, SQ_ENTRIES, DATA_BYTES))
		return -1;
	t->c.id = 1;
	t->c.tenant = 0;
	t->c.state = KVD_CLIENT_LIVE;
	t->c.ns = &t->ns;
	kvd_holder_init(&t->c.holder, 0);
	t->c.cq_evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	return t->c.cq_evfd < 0 ? -1 : 0;
}

static int ctx_teardown(void **state)
{
	struct ctx *t = *state;

	if (t->ns.live)
		kvd_ns_release_all(&t->ns, &t->c.holder);
	kvd_ring_teardown(&t->c);
	if (t->c.cq_evfd >= 0)
		close(t->c.cq_evfd);
	kvd_ns_exit(&t->ns);
	kvd_pool_exit(&t->d.pool);
	free(t->d.scratch);
	free(t);
	return 0;
}

/* ---- the client ---- */

static struct kv_sqe *prep(struct ctx *t, uint8_t op, uint32_t nr,
			   uint32_t off, uint64_t user_data)
{
	struct kv_sqe *sqe = &t->c.sqes[t->sq_tail++ & (SQ_ENTRIES - 1)];

	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = op;
	sqe->nr = nr;
	sqe->off = off;
	sqe->user_data = user_data;
	return sqe;
}

/* C1: publish the SQEs. */
static void submit(struct ctx *t)
{
	kv_smp_store_release(t->c.sq_ktail, t->sq_tail);
}

static int process(struct ctx *t, uint32_t budget)
{
	return kvd_ring_process(&t->d, &t->c, budget);
}

/* C3/C4: take one CQE if there is one, give its slot back. */
static bool reap(struct ctx *t, struct kv_cqe *out)
{
	if (kv_smp_load_acquire(t->c.cq_ktail) == t->cq_head)
		return false;
	*out = t->c.cqes[t->cq_head & (CQ_ENTRIES - 1)];
	kv_smp_store_release(t->c.cq_khead, ++t->cq_head);
	return true;
}

static uint32_t sq_head(struct ctx *t)
{
	return kv_smp_load_acquire(t->c.sq_khead);
}

static uint32_t sq_flags(struct ctx *t)
{
	return KV_READ_ONCE(*t->c.sq_kflags);
}

/* Submit one prepared SQE, serve it, reap its CQE: the CQE's res. */
static int serve(struct ctx *t, uint64_t user_data)
{
	struct kv_cqe cqe;

	submit(t);
	assert_int_equal(process(t, BUDGET), 1);
	assert_int_equal(sq_head(t), t->sq_tail);
	assert_true(reap(t, &cqe));
	assert_false(reap(t, &cqe) && "one CQE per SQE");
	assert_true(cqe.user_data == user_data);
	assert_int_equal(cqe.flags, 0);
	return cqe.res;
}

static int run_op(struct ctx *t, uint8_t op, uint32_t nr, uint32_t off)
{
	uint64_t ud = 0x1234567800000000ULL | t->sq_tail;

	prep(t, op, nr, off, ud);
	return serve(t, ud);
}

static uint32_t *ids_at(struct ctx *t, uint32_t off)
{
	return (uint32_t *)(t->c.data + off);
}

/* ---- tests ---- */

static void test_ring_setup_layout(void **state)
{
	struct ctx *t = *state;
	const struct kv_ring_offsets *o = &t->c.off;

	assert_int_equal(o->sq_entries, SQ_ENTRIES);
	assert_int_equal(o->cq_entries, CQ_ENTRIES);
	assert_int_equal(o->data_bytes, DATA_BYTES);
	assert_int_equal(o->data % 4096, 0);
	assert_true(o->sqes >= o->cq_flags + 4);
	assert_true(o->cqes >= o->sqes + SQ_ENTRIES * sizeof(struct kv_sqe));
	assert_true(o->data >= o->cqes + CQ_ENTRIES * sizeof(struct kv_cqe));
	assert_int_equal(o->ring_bytes, o->data + DATA_BYTES);
	/* Each index on its own cache line. */
	assert_true(o->sq_head / 64 != o->sq_tail / 64);
	assert_true(o->cq_head / 64 != o->cq_tail / 64);
	assert_int_equal(*t->c.sq_khead, 0);
	assert_int_equal(*t->c.cq_ktail, 0);
	assert_int_equal(sq_flags(t), 0);
	/* A client cannot shrink the ring under kvd. */
	assert_int_equal(ftruncate(t->c.ring_fd, 4096), -1);
	assert_int_equal(errno, EPERM);
}

static void test_ring_nop(void **state)
{
	struct ctx *t = *state;

	prep(t, KV_OP_NOP, 0, 0, 0xfeedfacecafebeefULL);
	assert_int_equal(serve(t, 0xfeedfacecafebeefULL), 0);
	assert_int_equal(kv_smp_load_acquire(t->c.cq_ktail), 1);
	assert_int_equal(sq_head(t), 1);
	assert_true(t->c.ops == 1 && t->d.ops == 1);
	/* NOP takes no array. */
	assert_int_equal(run_op(t, KV_OP_NOP, 1, 0), -EINVAL);
	assert_int_equal(run_op(t, KV_OP_NOP, 0, 4), -EINVAL);
	assert_int_equal(run_op(t, KV_OP_NOP, 0, 0), 0);
}

static void test_ring_alloc_writes_ids(void **state)
{
	struct ctx *t = *state;
	uint32_t *ids = ids_at(t, 64);

	memset(t->c.data, 0xaa, DATA_BYTES);
	assert_int_equal(run_op(t, KV_OP_ALLOC, 4, 64), 4);
	for (uint32_t i = 0; i < 4; i++) {
		assert_in_range(ids[i], 0, t->ns.max_blocks - 1);
		for (uint32_t j = 0; j < i; j++)
			assert_int_not_equal(ids[i], ids[j]);
		assert_int_equal(kvd_ns_hold_count(&t->ns, 0, ids[i]), 1);
	}
	/* Nothing written outside [off, off + 4 * nr). */
	for (uint32_t b = 0; b < DATA_BYTES; b++)
		if (b < 64 || b >= 80)
			assert_int_equal(t->c.data[b], 0xaa);
	assert_int_equal(t->ns.blocks_used, 4);
	assert_int_equal(t->c.holder.nr_blocks, 4);
	/* The last four bytes of the data area are in range. */
	assert_int_equal(run_op(t, KV_OP_ALLOC, 1, DATA_BYTES - 4), 1);
	assert_int_equal(t->ns.blocks_used, 5);
	/* More than the namespace has: nothing taken. */
	assert_int_equal(run_op(t, KV_OP_ALLOC, 60, 0), -ENOSPC);
	assert_int_equal(run_op(t, KV_OP_ALLOC, 65, 0), -E2BIG);
	assert_int_equal(t->ns.blocks_used, 5);
}

static void test_ring_unknown_opcode(void **state)
{
	struct ctx *t = *state;

	assert_int_equal(run_op(t, KV_OP__MAX, 0, 0), -EOPNOTSUPP);
	assert_int_equal(run_op(t, 0x7f, 1, 0), -EOPNOTSUPP);
	assert_int_equal(run_op(t, 0xff, 0, 0), -EOPNOTSUPP);
	/* The ring goes on. */
	assert_int_equal(run_op(t, KV_OP_NOP, 0, 0), 0);
}

/* Make field @f (0..7) of @sqe, one that must be zero, nonzero. */
static void set_field(struct kv_sqe *sqe, int f)
{
	switch (f) {
	case 0:
		sqe->flags = 1;
		break;
	case 1:
		sqe->resv0 = 1;
		break;
	case 2:
		sqe->resv1 = 1;
		break;
	case 3:
		sqe->resv2 = 1ULL << 63;
		break;
	default:
		sqe->args[f - 4] = 1;
		break;
	}
}

static void test_ring_nonzero_fields(void **state)
{
	static const uint8_t ops[] = { KV_OP_NOP, KV_OP_ALLOC, KV_OP_STATS };
	struct ctx *t = *state;

	for (uint32_t k = 0; k < ARRAY_SIZE(ops); k++) {
		uint32_t nr = 0;

		if (ops[k] == KV_OP_ALLOC)
			nr = 1;
		else if (ops[k] == KV_OP_STATS)
			nr = sizeof(struct kv_stats);

		for (int f = 0; f < 8; f++) {
			uint64_t ud = 1000 + f;
			struct kv_sqe *sqe = prep(t, ops[k], nr, 0, ud);

			set_field(sqe, f);
			assert_int_equal(serve(t, ud), -EINVAL);
		}
	}
	assert_int_equal(t->ns.blocks_used, 0);
	assert_int_equal(t->d.pool.pages_used, 0);
}

static void test_ring_misaligned_off(void **state)
{
	struct ctx *t = *state;

	assert_int_equal(run_op(t, KV_OP_ALLOC, 1, 2), -EINVAL);
	assert_int_equal(run_op(t, KV_OP_RELEASE, 1, 1), -EINVAL);
	assert_int_equal(run_op(t, KV_OP_REF, 1, 3), -EINVAL);
	assert_int_equal(run_op(t, KV_OP_STATS, sizeof(struct kv_stats), 6),
			 -EINVAL);
	assert_int_equal(t->ns.blocks_used, 0);
}

static void test_ring_outside_data_area(void **state)
{
	static const uint8_t ops[] = { KV_OP_ALLOC, KV_OP_RELEASE, KV_OP_REF };
	struct ctx *t = *state;

	for (uint32_t k = 0; k < ARRAY_SIZE(ops); k++) {
		uint8_t op = ops[k];

		assert_int_equal(run_op(t, op, 1, DATA_BYTES), -EFAULT);
		assert_int_equal(run_op(t, op, 2, DATA_BYTES - 4), -EFAULT);
		assert_int_equal(run_op(t, op, DATA_BYTES / 4 + 1, 0), -EFAULT);
		/* nr * 4 is 4 in 32 bits; off + 4 wraps to 0 in 32 bits. */
		assert_int_equal(run_op(t, op, 0x40000001U, 0), -EFAULT);
		assert_int_equal(run_op(t, op, UINT32_MAX, 0), -EFAULT);
		assert_int_equal(run_op(t, op, 1, 0xfffffffcU), -EFAULT);
		assert_int_equal(run_op(t, op, 0x40000000U, 0xfffffffcU),
				 -EFAULT);
	}
	assert_int_equal(run_op(t, KV_OP_STATS, sizeof(struct kv_stats),
				DATA_BYTES - 8), -EFAULT);
	assert_int_equal(run_op(t, KV_OP_STATS, UINT32_MAX, 4), -EFAULT);
	assert_int_equal(run_op(t, KV_OP_STATS, 8, 0xfffffff8U), -EFAULT);
	assert_int_equal(t->ns.blocks_used, 0);
	assert_int_equal(t->c.holder.nr_refs, 0);
}

static void test_ring_nr_zero(void **state)
{
	struct ctx *t = *state;

	assert_int_equal(run_op(t, KV_OP_ALLOC, 0, 0), -EINVAL);
	assert_int_equal(run_op(t, KV_OP_RELEASE, 0, 0), -EINVAL);
	assert_int_equal(run_op(t, KV_OP_REF, 0, 0), -EINVAL);
	assert_int_equal(t->ns.blocks_used, 0);
}

static void test_ring_release_and_ref(void **state)
{
	struct ctx *t = *state;
	uint32_t *ids = ids_at(t, 0), *other = ids_at(t, 128);

	/* Nothing held yet. */
	other[0] = 0;
	assert_int_equal(run_op(t, KV_OP_RELEASE, 1, 128), -EPERM);
	assert_int_equal(run_op(t, KV_OP_REF, 1, 128), -EPERM);
	other[0] = t->ns.max_blocks;
	assert_int_equal(run_op(t, KV_OP_RELEASE, 1, 128), -EINVAL);

	assert_int_equal(run_op(t, KV_OP_ALLOC, 3, 0), 3);
	assert_int_equal(run_op(t, KV_OP_REF, 2, 0), 2);
	assert_int_equal(kvd_ns_hold_count(&t->ns, 0, ids[0]), 2);
	assert_int_equal(t->c.holder.nr_refs, 5);
	/* One bad id spoils the whole SQE. */
	ids[3] = t->ns.max_blocks - 1;
	assert_int_equal(run_op(t, KV_OP_RELEASE, 4, 0), -EPERM);
	assert_int_equal(t->c.holder.nr_refs, 5);
	assert_int_equal(run_op(t, KV_OP_RELEASE, 3, 0), 3);
	assert_int_equal(run_op(t, KV_OP_RELEASE, 2, 0), 2);
	assert_int_equal(t->ns.blocks_used, 0);
	assert_int_equal(t->d.pool.pages_used, 0);
	/* Released: not held any more. */
	assert_int_equal(run_op(t, KV_OP_RELEASE, 1, 0), -EPERM);
	assert_int_equal(run_op(t, KV_OP_REF, 1, 0), -EPERM);
}

static void test_ring_stats(void **state)
{
	struct ctx *t = *state;
	struct kv_stats st;
	uint32_t sz = sizeof(st);

	assert_int_equal(run_op(t, KV_OP_ALLOC, 5, 0), 5);
	assert_int_equal(run_op(t, KV_OP_REF, 1, 0), 1);
	memset(t->c.data, 0xee, DATA_BYTES);
	assert_int_equal(run_op(t, KV_OP_STATS, sz - 1, 256), -EINVAL);
	assert_int_equal(run_op(t, KV_OP_STATS, 0, 256), -EINVAL);
	assert_int_equal(t->c.data[256], 0xee);
	assert_int_equal(run_op(t, KV_OP_STATS, sz, 256), sz);
	memcpy(&st, t->c.data + 256, sz);
	assert_true(st.pool_bytes == POOL_PAGES * KV_PAGE_BYTES);
	assert_int_equal(st.nr_pages, POOL_PAGES);
	assert_int_equal(st.pages_used, 2);
	assert_int_equal(st.pages_free, POOL_PAGES - 2);
	assert_int_equal(st.peak_pages_used, 2);
	assert_int_equal(st.nr_clients, 1);
	assert_int_equal(st.nr_namespaces, 1);
	assert_true(st.block_bytes == 512 * 1024);
	assert_int_equal(st.ns_slabs, 2);
	assert_int_equal(st.ns_blocks, 8);
	assert_int_equal(st.ns_blocks_used, 5);
	assert_int_equal(st.ns_max_blocks, 64);
	assert_int_equal(st.client_blocks, 5);
	assert_int_equal(st.client_refs, 6);
	assert_true(st.ops == 5);	/* 4 before, this one */
	assert_true(st.lookups == 0 && st.hit_blocks == 0 && st.evictions == 0);
	assert_int_equal(st.cached_blocks, 0);
	assert_true(st.lookup_blocks == 0 && st.quota_why == 0 &&
		    st.quota_limit == 0);
	/* A larger area is fine: sizeof(st) bytes written, no more. */
	assert_int_equal(run_op(t, KV_OP_STATS, 1024, 1024), sz);
	assert_int_equal(t->c.data[1024 + sz], 0xee);
}

/* The budget bounds the SQEs one call serves; the rest wait, in order. */
static void test_ring_budget(void **state)
{
	struct ctx *t = *state;
	struct kv_cqe cqe;
	uint64_t next = 0;

	for (int i = 0; i < 5; i++)
		prep(t, KV_OP_NOP, 0, 0, 100 + i);
	submit(t);
	assert_int_equal(process(t, 2), 2);
	assert_int_equal(sq_head(t), 2);
	assert_int_equal(kv_smp_load_acquire(t->c.cq_ktail), 2);
	assert_int_equal(process(t, 2), 2);
	assert_int_equal(sq_head(t), 4);
	assert_int_equal(process(t, 2), 1);
	assert_int_equal(sq_head(t), 5);
	assert_int_equal(process(t, 2), 0);
	assert_int_equal(process(t, 0), 0);
	while (reap(t, &cqe)) {
		assert_true(cqe.user_data == 100 + next);
		assert_int_equal(cqe.res, 0);
		next++;
	}
	assert_true(next == 5);
	/* Budget 0 serves nothing. */
	prep(t, KV_OP_NOP, 0, 0, 7);
	submit(t);
	assert_int_equal(process(t, 0), 0);
	assert_int_equal(sq_head(t), 5);
	assert_int_equal(process(t, 1), 1);
}

static void submit_nops(struct ctx *t, uint32_t n, uint64_t *ud)
{
	for (uint32_t i = 0; i < n; i++)
		prep(t, KV_OP_NOP, 0, 0, (*ud)++);
	submit(t);
}

static void reap_expect(struct ctx *t, uint32_t n, uint64_t *ud)
{
	struct kv_cqe cqe;

	for (uint32_t i = 0; i < n; i++) {
		assert_true(reap(t, &cqe));
		assert_true(cqe.user_data == (*ud)++);
		assert_int_equal(cqe.res, 0);
	}
}

/* A client that never reaps: kvd stops, loses nothing, says so. */
static void test_ring_cq_full(void **state)
{
	struct ctx *t = *state;
	uint64_t sub = 0, got = 0;
	struct kv_cqe cqe;

	submit_nops(t, SQ_ENTRIES, &sub);
	assert_int_equal(process(t, BUDGET), SQ_ENTRIES);
	submit_nops(t, SQ_ENTRIES, &sub);
	assert_int_equal(process(t, BUDGET), SQ_ENTRIES);
	assert_int_equal(sq_flags(t) & KV_SQ_CQ_FULL, 0);
	/* The CQ holds 16: the next 8 wait in the SQ. */
	submit_nops(t, SQ_ENTRIES, &sub);
	assert_int_equal(process(t, BUDGET), 0);
	assert_true(sq_flags(t) & KV_SQ_CQ_FULL);
	assert_true(t->c.cq_stalled);
	assert_int_equal(sq_head(t), 2 * SQ_ENTRIES);
	assert_int_equal(kv_smp_load_acquire(t->c.cq_ktail), CQ_ENTRIES);
	assert_int_equal(process(t, BUDGET), 0);

	/* Reap 3: exactly 3 more are served, then it stalls again. */
	reap_expect(t, 3, &got);
	assert_int_equal(process(t, BUDGET), 3);
	assert_int_equal(sq_head(t), 2 * SQ_ENTRIES + 3);
	assert_true(sq_flags(t) & KV_SQ_CQ_FULL);
	assert_true(t->c.cq_stalled);

	/* Reap everything: the rest is served, the flag goes. */
	reap_expect(t, CQ_ENTRIES, &got);
	assert_false(reap(t, &cqe));
	assert_int_equal(process(t, BUDGET), SQ_ENTRIES - 3);
	assert_int_equal(sq_head(t), 3 * SQ_ENTRIES);
	assert_int_equal(sq_flags(t) & KV_SQ_CQ_FULL, 0);
	assert_false(t->c.cq_stalled);
	reap_expect(t, SQ_ENTRIES - 3, &got);
	assert_false(reap(t, &cqe));
	assert_true(got == sub);
}

static void test_ring_corrupt_indices(void **state)
{
	struct ctx *t = *state;

	/* More SQEs than the ring has. */
	kv_smp_store_release(t->c.sq_ktail, SQ_ENTRIES + 1);
	assert_int_equal(process(t, BUDGET), -EPROTO);
	/* Behind the head. */
	kv_smp_store_release(t->c.sq_ktail, UINT32_MAX);
	assert_int_equal(process(t, BUDGET), -EPROTO);
	assert_int_equal(sq_head(t), 0);
	assert_int_equal(kv_smp_load_acquire(t->c.cq_ktail), 0);
	assert_true(t->c.ops == 0);
	/* A full SQ is fine. */
	submit_nops(t, SQ_ENTRIES, &(uint64_t){ 0 });
	assert_int_equal(process(t, BUDGET), SQ_ENTRIES);
}

/* Indices are free-running u32s: they wrap. */
static void test_ring_index_wrap(void **state)
{
	struct ctx *t = *state;
	uint32_t start = UINT32_MAX - 2;
	uint64_t sub = 500, got = 500;

	t->c.sq_head = t->c.cq_tail = start;
	*t->c.sq_khead = *t->c.sq_ktail = start;
	*t->c.cq_khead = *t->c.cq_ktail = start;
	t->sq_tail = t->cq_head = start;
	for (int round = 0; round < 3; round++) {
		submit_nops(t, SQ_ENTRIES, &sub);
		assert_int_equal(process(t, BUDGET), SQ_ENTRIES);
		reap_expect(t, SQ_ENTRIES, &got);
	}
	assert_int_equal(sq_head(t), start + 3 * SQ_ENTRIES);
	assert_int_equal(sq_head(t), 21);
}

static void test_ring_prepare_sleep(void **state)
{
	struct ctx *t = *state;
	uint64_t sub = 0, got = 0;

	/* Idle: sleep, and ask to be woken. */
	assert_false(kvd_ring_prepare_sleep(&t->c));
	assert_true(sq_flags(t) & KV_SQ_NEED_WAKEUP);
	/* An SQE is pending: do not sleep. */
	submit_nops(t, 1, &sub);
	assert_true(kvd_ring_prepare_sleep(&t->c));
	assert_int_equal(sq_flags(t) & KV_SQ_NEED_WAKEUP, 0);
	assert_int_equal(process(t, BUDGET), 1);
	assert_false(kvd_ring_prepare_sleep(&t->c));
	assert_true(sq_flags(t) & KV_SQ_NEED_WAKEUP);
	kv_atomic_andnot(t->c.sq_kflags, KV_SQ_NEED_WAKEUP);

	/* Stalled on a full CQ: idle until the client reaps. */
	submit_nops(t, SQ_ENTRIES, &sub);
	assert_int_equal(process(t, BUDGET), SQ_ENTRIES);
	submit_nops(t, SQ_ENTRIES, &sub);
	assert_int_equal(process(t, BUDGET), SQ_ENTRIES - 1);
	assert_true(t->c.cq_stalled);
	assert_false(kvd_ring_prepare_sleep(&t->c));
	assert_true(sq_flags(t) & KV_SQ_NEED_WAKEUP);
	reap_expect(t, 1, &got);
	assert_true(kvd_ring_prepare_sleep(&t->c));
	assert_int_equal(process(t, BUDGET), 1);
	reap_expect(t, CQ_ENTRIES, &got);
	assert_true(got == sub);
}

static uint64_t evfd_read(struct ctx *t)
{
	uint64_t v = 0;

	if (read(t->c.cq_evfd, &v, sizeof(v)) != sizeof(v)) {
		assert_int_equal(errno, EAGAIN);
		return 0;
	}
	return v;
}

/* The client sleeps on its CQ only with KV_CQ_NEED_WAKEUP set. */
static void test_ring_cq_wakeup(void **state)
{
	struct ctx *t = *state;

	assert_int_equal(run_op(t, KV_OP_NOP, 0, 0), 0);
	assert_true(evfd_read(t) == 0);

	kv_atomic_or(t->c.cq_kflags, KV_CQ_NEED_WAKEUP);
	assert_int_equal(run_op(t, KV_OP_NOP, 0, 0), 0);
	assert_true(evfd_read(t) == 1);
	assert_true(evfd_read(t) == 0);
	/* No completion, no wake-up. */
	assert_int_equal(process(t, BUDGET), 0);
	assert_true(evfd_read(t) == 0);
	/* Once per call, not per CQE. */
	submit_nops(t, 4, &(uint64_t){ 0 });
	assert_int_equal(process(t, BUDGET), 4);
	assert_true(evfd_read(t) == 1);
	reap_expect(t, 4, &(uint64_t){ 0 });

	kv_atomic_andnot(t->c.cq_kflags, KV_CQ_NEED_WAKEUP);
	assert_int_equal(run_op(t, KV_OP_NOP, 0, 0), 0);
	assert_true(evfd_read(t) == 0);
}

/* ---- KV_SQE_WAIT: parked out of the way; KV_SQE_LINK ---- */

/* Take every block of the namespace (ids at data offset 0). */
static void fill_ns(struct ctx *t)
{
	assert_int_equal(run_op(t, KV_OP_ALLOC, t->ns.max_blocks, 0),
			 (int)t->ns.max_blocks);
}

static struct kv_sqe *prep_wait(struct ctx *t, uint32_t nr, uint32_t off,
				uint64_t user_data, uint32_t ms)
{
	struct kv_sqe *sqe = prep(t, KV_OP_ALLOC, nr, off, user_data);

	sqe->flags = KV_SQE_WAIT;
	sqe->args[3] = ms;
	return sqe;
}

/* Free @nr more of the blocks fill_ns took, as another client would. */
static void free_behind(struct ctx *t, uint32_t nr)
{
	uint64_t frees = t->d.pool.frees;

	t->freed += nr;
	assert_int_equal(kvd_ns_release(&t->ns, &t->c.holder,
					ids_at(t, 4 * (t->ns.max_blocks -
						       t->freed)),
					nr), (int)nr);
	assert_true(t->d.pool.frees != frees);
}

static void reap_one(struct ctx *t, uint64_t user_data, int res)
{
	struct kv_cqe cqe;

	assert_true(reap(t, &cqe));
	assert_true(cqe.user_data == user_data);
	assert_int_equal(cqe.res, res);
}

/*
 * A waiting ALLOC does not hold up the ring: the RELEASE queued behind
 * it, which makes it satisfiable, completes at once, then the ALLOC.
 */
static void test_ring_wait_out_of_order(void **state)
{
	struct ctx *t = *state;
	struct kv_cqe cqe;

	fill_ns(t);
	prep_wait(t, 2, 1024, 100, 10000);
	prep(t, KV_OP_RELEASE, 2, 0, 101);
	submit(t);
	assert_int_equal(process(t, BUDGET), 2);
	assert_int_equal(sq_head(t), t->sq_tail);
	reap_one(t, 101, 2);
	assert_false(reap(t, &cqe));
	assert_true(kvd_ring_parked(&t->c) && !kvd_ring_blocked(&t->c));
	/* the RELEASE freed blocks: the next turn serves the ALLOC */
	assert_int_equal(process(t, BUDGET), 1);
	reap_one(t, 100, 2);
	assert_false(kvd_ring_parked(&t->c));
	assert_int_equal(t->c.holder.nr_blocks, t->ns.max_blocks);
	/* nothing freed since: a parked one is not tried again */
	prep_wait(t, 1, 1024, 102, 10000);
	submit(t);
	assert_int_equal(process(t, BUDGET), 1);
	assert_int_equal(process(t, BUDGET), 0);
	assert_false(reap(t, &cqe));
	free_behind(t, 1);
	assert_int_equal(process(t, BUDGET), 1);
	reap_one(t, 102, 1);
}

/* A parked SQE keeps its CQ slot: SQEs behind it cannot take it. */
static void test_ring_wait_keeps_cq_slot(void **state)
{
	struct ctx *t = *state;
	uint64_t sub = 0, got = 0;
	struct kv_cqe cqe;

	fill_ns(t);
	prep_wait(t, 1, 1024, 200, 10000);
	submit(t);
	assert_int_equal(process(t, BUDGET), 1);
	submit_nops(t, SQ_ENTRIES, &sub);
	assert_int_equal(process(t, BUDGET), SQ_ENTRIES);
	submit_nops(t, SQ_ENTRIES, &sub);
	/* 16 slots, one kept: 7 of these 8 fit */
	assert_int_equal(process(t, BUDGET), SQ_ENTRIES - 1);
	assert_true(t->c.cq_stalled && (sq_flags(t) & KV_SQ_CQ_FULL));
	assert_int_equal(kv_smp_load_acquire(t->c.cq_ktail) - t->cq_head,
			 CQ_ENTRIES - 1);
	/* blocks come: the waiting ALLOC completes into its slot */
	free_behind(t, 1);
	assert_int_equal(process(t, BUDGET), 1);
	assert_int_equal(kv_smp_load_acquire(t->c.cq_ktail) - t->cq_head,
			 CQ_ENTRIES);
	reap_expect(t, CQ_ENTRIES - 1, &got);
	reap_one(t, 200, 1);
	assert_int_equal(process(t, BUDGET), 1);
	reap_expect(t, 1, &got);
	assert_false(reap(t, &cqe));
	assert_true(got == sub);
}

/*
 * At most sq_entries SQEs park; then the ring takes nothing more (and is
 * not work to poll) until one completes. Deadlines end them.
 */
static void test_ring_wait_bound(void **state)
{
	struct ctx *t = *state;
	uint64_t sub = 0, got = 0;

	fill_ns(t);
	for (uint32_t i = 0; i < SQ_ENTRIES; i++)
		prep_wait(t, 1, 1024, 300 + i, 1 + i % 2 * 10000);
	submit(t);
	assert_int_equal(process(t, BUDGET), SQ_ENTRIES);
	assert_true(kvd_ring_blocked(&t->c));
	submit_nops(t, 1, &sub);
	assert_int_equal(process(t, BUDGET), 0);
	assert_int_equal(sq_head(t), t->sq_tail - 1);
	assert_false(kvd_ring_prepare_sleep(&t->c));
	/* the 1 ms ones time out, oldest first; the NOP is served */
	usleep(5000);
	assert_int_equal(process(t, BUDGET), 1);
	for (uint32_t i = 0; i < SQ_ENTRIES; i += 2)
		reap_one(t, 300 + i, -ETIMEDOUT);
	reap_expect(t, 1, &got);
	assert_false(kvd_ring_blocked(&t->c));
	assert_int_equal(t->c.nr_waits, SQ_ENTRIES / 2);
	free_behind(t, SQ_ENTRIES / 2);
	assert_int_equal(process(t, BUDGET), SQ_ENTRIES / 2);
	for (uint32_t i = 1; i < SQ_ENTRIES; i += 2)
		reap_one(t, 300 + i, 1);
	assert_false(kvd_ring_parked(&t->c));
}

/*
 * KV_SQE_LINK: the next SQE waits for a parked one and runs once it
 * succeeded; a failed link cancels the rest of its chain, and nothing
 * after the chain.
 */
static void test_ring_link(void **state)
{
	struct ctx *t = *state;
	struct kv_cqe cqe;

	/* a failure cancels the chain, not what follows it */
	prep(t, KV_OP_RELEASE, 1, 2048, 400)->flags = KV_SQE_LINK;
	ids_at(t, 2048)[0] = 0;		/* not held */
	prep(t, KV_OP_NOP, 0, 0, 401)->flags = KV_SQE_LINK;
	prep(t, KV_OP_NOP, 0, 0, 402);
	prep(t, KV_OP_NOP, 0, 0, 403);
	submit(t);
	assert_int_equal(process(t, BUDGET), 4);
	reap_one(t, 400, -EPERM);
	reap_one(t, 401, -ECANCELED);
	reap_one(t, 402, -ECANCELED);
	reap_one(t, 403, 0);

	/* linked to a waiting ALLOC: runs after it, in order */
	fill_ns(t);
	prep_wait(t, 1, 1024, 410, 10000)->flags |= KV_SQE_LINK;
	prep(t, KV_OP_NOP, 0, 0, 411)->flags = KV_SQE_LINK;
	submit(t);
	assert_int_equal(process(t, BUDGET), 2);
	assert_false(reap(t, &cqe));
	/* the chain goes on in a later submit; an SQE after it does not wait */
	prep(t, KV_OP_NOP, 0, 0, 412);
	prep(t, KV_OP_NOP, 0, 0, 413);
	submit(t);
	assert_int_equal(process(t, BUDGET), 2);
	reap_one(t, 413, 0);
	assert_false(reap(t, &cqe));
	free_behind(t, 1);
	assert_int_equal(process(t, BUDGET), 3);
	reap_one(t, 410, 1);
	reap_one(t, 411, 0);
	reap_one(t, 412, 0);
	assert_false(kvd_ring_parked(&t->c));

	/* a wait that times out cancels what is linked to it */
	prep_wait(t, 1, 1024, 420, 1)->flags |= KV_SQE_LINK;
	prep_wait(t, 1, 1028, 421, 10000);
	submit(t);
	assert_int_equal(process(t, BUDGET), 2);
	usleep(5000);
	assert_int_equal(process(t, BUDGET), 2);
	reap_one(t, 420, -ETIMEDOUT);
	reap_one(t, 421, -ECANCELED);
	/* linked behind a parked one that then parks itself: it waits on */
	prep_wait(t, 1, 1024, 430, 10000)->flags |= KV_SQE_LINK;
	prep_wait(t, 1, 1028, 431, 10000);
	submit(t);
	assert_int_equal(process(t, BUDGET), 2);
	free_behind(t, 1);
	assert_int_equal(process(t, BUDGET), 1);
	reap_one(t, 430, 1);
	assert_false(reap(t, &cqe));
	assert_int_equal(t->c.nr_waits, 1);
	free_behind(t, 1);
	assert_int_equal(process(t, BUDGET), 1);
	reap_one(t, 431, 1);
	assert_false(kvd_ring_parked(&t->c));
}

#define T(f)	cmocka_unit_test_setup_teardown(f, ctx_setup, ctx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_ring_setup_layout),
		T(test_ring_nop),
		T(test_ring_alloc_writes_ids),
		T(test_ring_unknown_opcode),
		T(test_ring_nonzero_fields),
		T(test_ring_misaligned_off),
		T(test_ring_outside_data_area),
		T(test_ring_nr_zero),
		T(test_ring_release_and_ref),
		T(test_ring_stats),
		T(test_ring_budget),
		T(test_ring_cq_full),
		T(test_ring_corrupt_indices),
		T(test_ring_index_wrap),
		T(test_ring_prepare_sleep),
		T(test_ring_cq_wakeup),
		T(test_ring_wait_out_of_order),
		T(test_ring_wait_keeps_cq_slot),
		T(test_ring_wait_bound),
		T(test_ring_link),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
