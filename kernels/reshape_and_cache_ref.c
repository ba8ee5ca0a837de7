// SPDX-License-Identifier: MIT
/*
 * C reference of reshape_and_cache: the new tokens' K and V, given as
 * [num_tokens][kv_heads][head_dim] rows, go to their slots of one layer
 * of the pool, quantized when the layout says so (kv_kernels.h).
 */
#include <errno.h>

#include "kv_kernels.h"

static int scales_ok(const float *s, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (!(s[i] > 0.0f && s[i] <= FLT_MAX))
			return 0;
	return 1;
}

/* The quantized row @x of one (K|V, head) at @dst, with its scales. */
static void put_quant(const struct kv_layout *l, const struct kv_cache_args *a,
		      const void *x, uint64_t row, uint8_t *blk,
		      uint32_t layer, int v, uint32_t head, uint32_t slot)
{
	uint8_t *dst = blk + kv_layout_vec_off(l, layer, v, head, slot);
	uint8_t *sc = blk + kv_layout_scale_off(l, layer, v);
	uint32_t hd = l->head_dim;
	float amax = 0.0f, s;

	if (l->quant == KV_QUANT_CHANNEL) {
		const float *cs = a->scales + ((uint64_t)v * l->kv_heads + head) * hd;

		memcpy(sc + (uint64_t)head * hd * sizeof(float), cs,
		       hd * sizeof(float));
		for (uint32_t d = 0; d < hd; d++)
			dst[d] = __kv_quant(__kv_load(x, a->src_dtype, row + d),
					    cs[d], l->dtype);
		return;
	}
	for (uint32_t d = 0; d < hd; d++) {
		float ax = fabsf(__kv_load(x, a->src_dtype, row + d));

		if (ax > amax)		/* skips NaN, as fmaxf does */
			amax = ax;
	}
	s = kv_quant_token_scale(amax, l->dtype);
	memcpy(sc + ((uint64_t)head * l->block_tokens + slot) * sizeof(float),
	       &s, sizeof(s));
	for (uint32_t d = 0; d < hd; d++)
		dst[d] = __kv_quant(__kv_load(x, a->src_dtype, row + d), s,
				    l->dtype);
}

static void put_token(const struct kv_layout *l, uint8_t *pool,
		      uint32_t layer, const struct kv_cache_args *a,
		      uint32_t t)
{
	uint64_t slot = (uint64_t)a->slot_mapping[t];
	uint8_t *blk = pool + slot / l->block_tokens * l->block_bytes;
	uint32_t off = (uint32_t)(slot % l->block_tokens);
	uint64_t row_bytes = (uint64_t)l->head_dim * l->elem_bytes;

	for (int v = 0; v < 2; v++) {
		const void *x = v ? a->v : a->k;

		for (uint32_t h = 0; h < l->kv_heads; h++) {
			uint64_t row = ((uint64_t)t * l->kv_heads + h) *
				       l->head_dim;

			if (l->quant != KV_QUANT_NONE) {
				put_quant(l, a, x, row, blk, layer, v, h, off);
				continue;
			}
			/* same dtype: the bits as they are, NaN payloads too */
			memcpy(blk + kv_layout_vec_off(l, layer, v, h, off),
			       (const uint8_t *)x + row * l->elem_bytes,
			       row_bytes);
		}
	}
}

int kv_ref_reshape_and_cache(const struct kv_layout *l, void *pool,
			     uint32_t layer, const struct kv_cache_args *a)
{
	int ret = kv_check_cache_args(l, pool, layer, a);

	if (ret)
		return ret;
	if (a->scales && !scales_ok(a->scales, (uint64_t)2 * l->kv_heads *
					       l->head_dim))
		return -EINVAL;
	/* every slot's block id must be a kv_block_t */
	for (uint32_t t = 0; t < a->num_tokens; t++)
		if (a->slot_mapping[t] >= 0 &&
		    (uint64_t)a->slot_mapping[t] / l->block_tokens > UINT32_MAX)
			return -EINVAL;
	for (uint32_t t = 0; t < a->num_tokens; t++)
		if (a->slot_mapping[t] >= 0)
			put_token(l, pool, layer, a, t);
	return 0;
}
