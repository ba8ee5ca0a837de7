// SPDX-License-Identifier: MIT
/* C reference of copy_blocks (kernels/copy_blocks.cu). */
#include <errno.h>

#include "kv_kernels.h"

int kv_ref_copy_blocks(void *pool, uint64_t block_bytes,
		       const struct kv_block_copy *pairs, uint32_t n)
{
	uint8_t *base = pool;

	if (block_bytes % 16 || (n && (!pool || !pairs)))
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		if (pairs[i].src == pairs[i].dst)
			return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		memcpy(base + (uint64_t)pairs[i].dst * block_bytes,
		       base + (uint64_t)pairs[i].src * block_bytes,
		       block_bytes);
	return 0;
}
