// SPDX-License-Identifier: MIT
/*
 * kvd stops under an engine that still maps the blocks it holds: the
 * engine keeps reading what it wrote (not zeros) until it unmaps, and its
 * next call says kvd is gone (-ECONNRESET).
 */
#include <string.h>

#include "harness.h"

#define NBLK	8

static unsigned char pattern(kv_block_t id, size_t i)
{
	return (unsigned char)(id * 31 + i * 7 + 1);
}

static void test_kvd_exit_bytes_kept(void)
{
	struct kv_pool_info info;
	struct kv_client *c;
	kv_block_t ids[NBLK];
	unsigned char *p[NBLK];
	struct t_kvd k;

	t_kvd_start(&k, "64M", NULL);
	T_EQ(t_connect(&k, "exiting", NULL, &c), 0);
	T_EQ(kv_pool_info(c, &info), 0);
	T_EQ(kv_alloc(c, NBLK, ids), NBLK);
	for (int b = 0; b < NBLK; b++) {
		p[b] = kv_block_ptr(c, ids[b]);
		T_ASSERT(p[b]);
		for (size_t i = 0; i < info.block_bytes; i++)
			p[b][i] = pattern(ids[b], i);
	}
	t_kvd_stop(&k);		/* SIGTERM, exit 0: kvd is gone */
	for (int b = 0; b < NBLK; b++)
		for (size_t i = 0; i < info.block_bytes; i++)
			if (p[b][i] != pattern(ids[b], i))
				T_FAIL("block %u byte %zu reads %u after kvd exited, wrote %u",
				       ids[b], i, p[b][i], pattern(ids[b], i));
	T_EQ(kv_nop(c), -ECONNRESET);
	T_ASSERT(!kv_block_ptr(c, ids[0]));
	T_EQ(kv_disconnect(c), 0);
	t_cleanup_dir(&k);
}

int main(void)
{
	test_kvd_exit_bytes_kept();
	return 0;
}
