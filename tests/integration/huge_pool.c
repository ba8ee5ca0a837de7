// SPDX-License-Identifier: MIT
/*
 * A pool far larger than RAM (the memfd is sparse): namespace books must
 * be sized without overflow and without touching memory up front, and a
 * geometry with more block ids than kvd keeps books for is refused.
 * kvd starts it only when told to (--overcommit).
 */
#include <string.h>

#include "harness.h"

int main(void)
{
	struct kv_geometry tiny = {
		.layers = 1, .kv_heads = 1, .head_dim = 64,
		.block_tokens = 1, .dtype = KV_DTYPE_FP16,	/* 256 B */
	};
	struct kv_connect_params p = { 0 };
	struct kv_client *c;
	struct kv_pool_info info;
	kv_block_t ids[64];
	char err[160] = "";
	struct t_kvd k;

	/* beyond RAM + swap: refused unless meant (first_use.c) */
	t_kvd_start(&k, "1T", "--overcommit", NULL);
	p.socket_path = k.sock;
	p.model_id = "tiny";
	p.geom = tiny;
	p.errbuf = err;
	p.errbuf_len = sizeof(err);
	T_EQ(kv_connect(&p, &c), -E2BIG);	/* 2^32 ids: no books for that */
	T_ASSERT(strstr(err, "larger blocks"));

	T_EQ(t_connect(&k, "big", NULL, &c), 0);	/* 32 KiB: 2^25 ids */
	T_EQ(kv_pool_info(c, &info), 0);
	T_EQ(info.max_blocks, 1U << 25);
	T_EQ(kv_alloc(c, 64, ids), 64);
	for (int i = 0; i < 64; i++)
		memset(kv_block_ptr(c, ids[i]), i, info.block_bytes);
	T_EQ(kv_release(c, ids, 64), 64);
	T_EQ(kv_disconnect(c), 0);
	t_kvd_stop(&k);
	return 0;
}
