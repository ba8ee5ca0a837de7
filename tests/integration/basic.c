// SPDX-License-Identifier: MIT
/*
 * One client end to end: connect, alloc, write the blocks through the
 * mapped pool, ref, release, stats, async batch, disconnect.
 */
#include <string.h>

#include "harness.h"

int main(void)
{
	struct kv_client *c;
	struct kv_pool_info info;
	struct kv_stats st;
	struct t_kvd k;
	kv_block_t ids[8];
	int ret;

	t_kvd_start(&k, "64M", NULL);
	ret = t_connect(&k, "llama-test", NULL, &c);
	T_EQ(ret, 0);
	T_EQ(kv_pool_info(c, &info), 0);
	T_EQ(info.pool_bytes, 64 << 20);
	T_EQ(info.block_bytes, 32 << 10);
	T_EQ(info.max_blocks, 2048);
	T_EQ(kv_nop(c), 0);

	T_EQ(kv_alloc(c, 8, ids), 8);
	for (int i = 0; i < 8; i++) {
		uint8_t *p = kv_block_ptr(c, ids[i]);

		T_ASSERT(ids[i] < info.max_blocks);
		T_ASSERT(p == (uint8_t *)info.base + (uint64_t)ids[i] * info.block_bytes);
		memset(p, i + 1, info.block_bytes);
		for (int j = 0; j < i; j++)
			T_ASSERT(ids[i] != ids[j]);
	}
	T_EQ(kv_stats(c, &st), 0);
	T_EQ(st.client_blocks, 8);
	T_EQ(st.ns_blocks_used, 8);
	T_EQ(st.pages_used, 1);	/* one 2 MiB slab of 64 blocks */

	T_EQ(kv_ref(c, ids, 2), 2);
	T_EQ(kv_stats(c, &st), 0);
	T_EQ(st.client_refs, 10);
	T_EQ(kv_release(c, ids, 8), 8);
	T_EQ(kv_stats(c, &st), 0);
	T_EQ(st.client_blocks, 2);
	T_EQ(kv_release(c, ids, 2), 2);
	T_EQ(kv_stats(c, &st), 0);
	T_EQ(st.client_blocks, 0);
	T_EQ(st.pages_used, 0);	/* empty slab went back to the pool */

	/* Async: 16 ALLOCs of 4 in one doorbell, then release them. */
	for (int i = 0; i < 16; i++) {
		struct kv_sqe *sqe = kv_get_sqe(c);

		T_ASSERT(sqe);
		kv_prep_alloc(sqe, i * 16, 4);
		kv_sqe_set_data64(sqe, 100 + i);
	}
	T_EQ(kv_submit_and_wait(c, 16), 16);
	for (int i = 0; i < 16; i++) {
		struct kv_cqe *cqe;

		T_EQ(kv_peek_cqe(c, &cqe), 0);
		T_EQ(cqe->res, 4);
		T_EQ(cqe->user_data, 100 + i);
		kv_cqe_seen(c, cqe);
		struct kv_sqe *sqe = kv_get_sqe(c);
		kv_prep_release(sqe, i * 16, 4);
	}
	T_EQ(kv_submit_and_wait(c, 16), 16);
	{
		struct kv_cqe *cqes[32];

		T_EQ(kv_peek_batch_cqe(c, cqes, 32), 16);
		for (int i = 0; i < 16; i++)
			T_EQ(cqes[i]->res, 4);
		kv_cq_advance(c, 16);
		T_EQ(kv_peek_batch_cqe(c, cqes, 32), 0);
	}
	T_EQ(kv_stats(c, &st), 0);
	T_EQ(st.client_blocks, 0);
	/* A second client connects while the extent is free, then its
	 * tenant takes the extent again: it must get it too. */
	{
		struct kv_client *c2;

		T_EQ(t_connect(&k, "llama-test", NULL, &c2), 0);
		T_EQ(kv_alloc(c2, 2, ids), 2);
		T_ASSERT(kv_block_ptr(c2, ids[0]) && kv_block_ptr(c2, ids[1]));
		T_ASSERT(kv_block_ptr(c, ids[0]));	/* and the first one */
		memset(kv_block_ptr(c2, ids[0]), 7, info.block_bytes);
		T_EQ(*(uint8_t *)kv_block_ptr(c, ids[0]), 7);
		T_EQ(kv_release(c2, ids, 2), 2);
		T_EQ(kv_disconnect(c2), 0);
	}
	T_EQ(kv_disconnect(c), 0);
	t_kvd_stop(&k);
	return 0;
}
