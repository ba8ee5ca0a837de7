/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the kernel tests: a seeded generator, tensors in any source
 * dtype, a reader of cached K/V that recomputes the block layout from the
 * formulas of <kv/kernels.h> (not from the kernels' helpers), and the dense
 * attention oracle in double precision.
 */
#ifndef KV_TEST_KERNELS_UTIL_H
#define KV_TEST_KERNELS_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <kv/kernels.h>

struct t_rng {
	uint64_t	s;
};

/* splitmix64 */
static inline uint64_t t_next(struct t_rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* [0, n) */
static inline uint32_t t_below(struct t_rng *r, uint32_t n)
{
	return (uint32_t)(t_next(r) % n);
}

/* [0, 1) */
static inline double t_unif(struct t_rng *r)
{
	return (double)(t_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* standard normal (Box-Muller) */
static inline float t_gauss(struct t_rng *r)
{
	double u = t_unif(r) + 1e-300, v = t_unif(r);

	return (float)(sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v));
}

static inline void t_shuffle(struct t_rng *r, uint32_t *a, uint32_t n)
{
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = t_below(r, i), x = a[i - 1];

		a[i - 1] = a[j];
		a[j] = x;
	}
}

static inline uint32_t t_src_bytes(uint32_t dtype)
{
	return dtype == KV_DTYPE_FP32 ? 4 : 2;
}

/* Element @i of a tensor of FP16, BF16 or FP32. */
static inline float t_load(const void *p, uint32_t dtype, uint64_t i)
{
	if (dtype == KV_DTYPE_FP16)
		return kv_half_to_float(((const uint16_t *)p)[i]);
	if (dtype == KV_DTYPE_BF16)
		return kv_bf16_to_float(((const uint16_t *)p)[i]);
	return ((const float *)p)[i];
}

/* Store @x, rounded to @dtype; returns the value stored. */
static inline float t_store(void *p, uint32_t dtype, uint64_t i, float x)
{
	if (dtype == KV_DTYPE_FP16)
		((uint16_t *)p)[i] = kv_float_to_half(x);
	else if (dtype == KV_DTYPE_BF16)
		((uint16_t *)p)[i] = kv_float_to_bf16(x);
	else
		((float *)p)[i] = x;
	return t_load(p, dtype, i);
}

static inline int t_layout(struct kv_layout *l, uint32_t layers,
			   uint32_t kv_heads, uint32_t head_dim,
			   uint32_t block_tokens, uint32_t dtype,
			   uint32_t quant)
{
	struct kv_geometry g = {
		.layers = layers, .kv_heads = kv_heads, .head_dim = head_dim,
		.block_tokens = block_tokens, .dtype = dtype, .quant = quant,
	};

	return kv_layout_init(l, &g);
}

/* Bytes of one layer's K (or V) values: [kv_heads][block_tokens][head_dim]. */
static inline uint64_t t_vals_bytes(const struct kv_layout *l)
{
	return (uint64_t)l->kv_heads * l->block_tokens * l->head_dim *
	       (l->dtype == KV_DTYPE_FP32 ? 4 :
		l->dtype <= KV_DTYPE_BF16 ? 2 : 1);
}

/* Offset of layer @layer's K (@v 0) or V scales inside a block. */
static inline uint64_t t_scale_off(const struct kv_layout *l, uint32_t layer,
				   int v)
{
	uint64_t per = (uint64_t)l->kv_heads * 4 *
		       (l->quant == KV_QUANT_TOKEN ? l->block_tokens :
						     l->head_dim);

	return layer * l->layer_bytes + 2 * t_vals_bytes(l) + (v ? per : 0);
}

/* The scale of element (@head, @slot, @d) of K or V of @layer. */
static inline float t_scale(const struct kv_layout *l, const uint8_t *blk,
			    uint32_t layer, int v, uint32_t head,
			    uint32_t slot, uint32_t d)
{
	uint64_t i = l->quant == KV_QUANT_TOKEN ?
		     (uint64_t)head * l->block_tokens + slot :
		     (uint64_t)head * l->head_dim + d;
	float s;

	memcpy(&s, blk + t_scale_off(l, layer, v) + i * 4, 4);
	return s;
}

/* Row (@layer, K|V, @head, @slot) of block @id, dequantized. */
static inline void t_read_row(const struct kv_layout *l, const void *pool,
			      uint64_t id, uint32_t layer, int v,
			      uint32_t head, uint32_t slot, float *out)
{
	const uint8_t *blk = (const uint8_t *)pool + id * l->block_bytes;
	uint64_t eb = t_vals_bytes(l) / ((uint64_t)l->kv_heads *
					 l->block_tokens * l->head_dim);
	const uint8_t *x = blk + layer * l->layer_bytes +
			   (v ? t_vals_bytes(l) : 0) +
			   ((uint64_t)head * l->block_tokens + slot) *
			   l->head_dim * eb;

	for (uint32_t d = 0; d < l->head_dim; d++) {
		switch (l->dtype) {
		case KV_DTYPE_FP8_E4M3:
			out[d] = kv_fp8_e4m3_to_float(x[d]) *
				 t_scale(l, blk, layer, v, head, slot, d);
			break;
		case KV_DTYPE_INT8:
			out[d] = (float)(int8_t)x[d] *
				 t_scale(l, blk, layer, v, head, slot, d);
			break;
		default:
			out[d] = t_load(x, l->dtype, d);
			break;
		}
	}
}

/*
 * The dense oracle, in double: out = softmax(scale * q K^T) V over the
 * @ctx rows of @k and @v ([ctx][hd], row stride @stride floats), tokens in
 * order. @ctx 0 gives 0.
 */
static inline void t_attention(const float *q, const float *k,
			       const float *v, uint32_t ctx, uint32_t hd,
			       uint64_t stride, double scale, double *out)
{
	double m = -INFINITY, sum = 0.0, *w = malloc((ctx + 1) * sizeof(*w));

	for (uint32_t d = 0; d < hd; d++)
		out[d] = 0.0;
	for (uint32_t t = 0; t < ctx; t++) {
		double dot = 0.0;

		for (uint32_t d = 0; d < hd; d++)
			dot += (double)q[d] * k[t * stride + d];
		w[t] = scale * dot;
		m = fmax(m, w[t]);
	}
	for (uint32_t t = 0; t < ctx; t++) {
		w[t] = exp(w[t] - m);
		sum += w[t];
	}
	for (uint32_t t = 0; t < ctx; t++)
		for (uint32_t d = 0; d < hd; d++)
			out[d] += w[t] / sum * v[t * stride + d];
	free(w);
}

#endif /* KV_TEST_KERNELS_UTIL_H */
