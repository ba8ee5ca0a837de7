/* SPDX-License-Identifier: MIT */
/* What the prefix-cache tests share (test_prefix.c, test_reclaim.c). */
#ifndef KV_TEST_PREFIX_UTIL_H
#define KV_TEST_PREFIX_UTIL_H

#include <stdint.h>
#include <string.h>

#include <kv/abi.h>

/* The block hash numbered @v: distinct per @v, never the all-zero root. */
static inline struct kv_hash H(uint32_t v)
{
	struct kv_hash h = { { 0 } };

	memcpy(h.b, &v, sizeof(v));
	h.b[15] = 0x5a;
	return h;
}

#endif
