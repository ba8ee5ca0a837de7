// SPDX-License-Identifier: MIT
/*
 * Block layout of a geometry, and the host-side argument checks that the
 * C references and the CUDA launchers share.
 */
#include <errno.h>

#include "kv_kernels.h"

static int layout_scheme_ok(uint32_t dtype, uint32_t quant)
{
	switch (dtype) {
	case KV_DTYPE_FP16:
	case KV_DTYPE_BF16:
	case KV_DTYPE_FP32:
		return quant == KV_QUANT_NONE;
	case KV_DTYPE_FP8_E4M3:
	case KV_DTYPE_INT8:
		/* never a default scale: the values would mean nothing */
		return quant == KV_QUANT_TOKEN || quant == KV_QUANT_CHANNEL;
	}
	return 0;
}

static int dim_ok(uint32_t n)
{
	return n >= 1 && n <= KV_LAYOUT_DIM_MAX;
}

int kv_layout_init(struct kv_layout *l, const struct kv_geometry *g)
{
	struct kv_layout n = { 0 };
	uint64_t vals, scales;

	if (!l || !g)
		return -EINVAL;
	if (!dim_ok(g->layers) || !dim_ok(g->kv_heads) ||
	    !dim_ok(g->head_dim) || !dim_ok(g->block_tokens))
		return -EINVAL;
	/* 16-byte vector loads of a head's row in every dtype */
	if (g->head_dim % 8 || !layout_scheme_ok(g->dtype, g->quant))
		return -EINVAL;

	n.layers = g->layers;
	n.kv_heads = g->kv_heads;
	n.head_dim = g->head_dim;
	n.block_tokens = g->block_tokens;
	n.dtype = g->dtype;
	n.quant = g->quant;
	n.elem_bytes = kv_dtype_bytes(g->dtype);
	n.layer_bytes = kv_geometry_layer_bytes(g);
	n.block_bytes = kv_geometry_block_bytes(g);

	vals = (uint64_t)g->kv_heads * g->block_tokens * g->head_dim *
	       n.elem_bytes;
	n.v_off = vals;
	if (g->quant != KV_QUANT_NONE) {
		scales = (uint64_t)g->kv_heads * 4 *
			 (g->quant == KV_QUANT_TOKEN ? g->block_tokens :
						       g->head_dim);
		n.k_scale_off = 2 * vals;
		n.v_scale_off = 2 * vals + scales;
	}
	*l = n;
	return 0;
}

int kv_check_layout(const struct kv_layout *l)
{
	struct kv_geometry g = { 0 };
	struct kv_layout n;

	if (!l)
		return -EINVAL;
	g.layers = l->layers;
	g.kv_heads = l->kv_heads;
	g.head_dim = l->head_dim;
	g.block_tokens = l->block_tokens;
	g.dtype = l->dtype;
	g.quant = l->quant;
	if (kv_layout_init(&n, &g))
		return -EINVAL;
	/* a layout filled by hand must agree with its own geometry */
	if (memcmp(&n, l, sizeof(n)))
		return -EINVAL;
	return 0;
}

static int src_dtype_ok(const struct kv_layout *l, uint32_t src)
{
	if (src != KV_DTYPE_FP16 && src != KV_DTYPE_BF16 &&
	    src != KV_DTYPE_FP32)
		return 0;
	return l->quant != KV_QUANT_NONE || src == l->dtype;
}

int kv_check_cache_args(const struct kv_layout *l, const void *pool,
			uint32_t layer, const struct kv_cache_args *a)
{
	if (kv_check_layout(l) || !pool || !a || layer >= l->layers)
		return -EINVAL;
	if (!src_dtype_ok(l, a->src_dtype))
		return -EINVAL;
	if (a->num_tokens && (!a->k || !a->v || !a->slot_mapping))
		return -EINVAL;
	/* static scales only where the layout keeps them */
	if ((l->quant == KV_QUANT_CHANNEL) != (a->scales != NULL))
		return -EINVAL;
	return 0;
}

int kv_check_decode_args(const struct kv_layout *l, const void *pool,
			 uint32_t layer, const struct kv_decode_args *a,
			 uint32_t *partition)
{
	uint32_t p;

	if (kv_check_layout(l) || !pool || !a || layer >= l->layers)
		return -EINVAL;
	if (a->q_dtype != KV_DTYPE_FP16 && a->q_dtype != KV_DTYPE_BF16 &&
	    a->q_dtype != KV_DTYPE_FP32)
		return -EINVAL;
	if (!a->num_heads || a->num_heads % l->kv_heads)
		return -EINVAL;
	if (!a->q || !a->out || !a->block_tables || !a->context_lens)
		return -EINVAL;
	if (!(a->scale == a->scale) || a->scale > FLT_MAX ||
	    a->scale < -FLT_MAX)
		return -EINVAL;
	p = kv_decode_partition(l, a->partition_tokens);
	if (!p)
		return -EINVAL;
	if (partition)
		*partition = p;
	return 0;
}

size_t kv_decode_workspace_bytes(const struct kv_layout *l,
				 uint32_t num_seqs, uint32_t num_heads,
				 uint32_t max_context,
				 uint32_t partition_tokens)
{
	struct kv_decode_ws w;
	uint32_t p;

	if (kv_check_layout(l))
		return 0;
	p = kv_decode_partition(l, partition_tokens);
	if (!p)
		return 0;
	kv_decode_ws_layout(&w, l, num_seqs, num_heads, max_context, p);
	return w.bytes;
}
