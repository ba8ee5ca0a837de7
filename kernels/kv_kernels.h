/* SPDX-License-Identifier: MIT */
/*
 * What the kernels' C references (kernels/ *.c) and their CUDA versions
 * (kernels/ *.cu) share beyond the public API of <kv/kernels.h>: element
 * conversions, quantization of one element, block addressing, the split-K
 * partition size and the decode workspace layout. Everything inline here
 * is plain C that nvcc also compiles for the device (KV_HD), so both sides
 * round the same way. The kv_check_* functions (kernels/layout.c) are the
 * host-side argument checks of both; they read no tensor memory.
 */
#ifndef KV_KERNELS_H
#define KV_KERNELS_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <kv/kernels.h>

#ifdef __CUDACC__
#define KV_HD	__host__ __device__
#else
#define KV_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define KV_FP8_E4M3_MAX		448.0f	/* largest finite e4m3 value */
#define KV_INT8_MAX		127.0f	/* int8 codes are -127..127 */
#define KV_LAYOUT_DIM_MAX	1024	/* layers, kv_heads, head_dim, block_tokens */

/* Split-K: 0 asks for the default, about 512 tokens per partition. */
#define KV_DECODE_PARTITION_DEFAULT	512
#define KV_DECODE_PARTITION_MAX		8192	/* logits of one partition: 32 KiB */
#define KV_DECODE_WS_ALIGN		256	/* each workspace array */

static inline KV_HD uint32_t __kv_f2u(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline KV_HD float __kv_u2f(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/*
 * @m >> @shift rounded to nearest, ties to even. The callers keep
 * 1 <= shift <= 31.
 */
static inline KV_HD uint32_t __kv_rne_shift(uint32_t m, uint32_t shift)
{
	uint32_t q = m >> shift, rem = m & ((1u << shift) - 1);
	uint32_t half = 1u << (shift - 1);

	if (rem > half || (rem == half && (q & 1)))
		q++;
	return q;
}

/*
 * fp8 e4m3 (OCP "E4M3FN"): 1 sign, 4 exponent (bias 7), 3 mantissa bits;
 * no infinities, S.1111.111 is NaN, the largest finite value is 448.
 */
static inline KV_HD float __kv_fp8_e4m3_to_float(uint8_t v)
{
	uint32_t sign = (uint32_t)(v & 0x80) << 24;
	uint32_t e = (v >> 3) & 0xf, m = v & 7;
	float f;

	if ((v & 0x7f) == 0x7f)
		return __kv_u2f(0x7fc00000);
	if (e)
		return __kv_u2f(sign | (e + 120) << 23 | m << 20);
	f = (float)m * (1.0f / 512);	/* subnormal: m * 2^-9, exact */
	return sign ? -f : f;
}

/* Nearest, ties to even; saturated to +-448 (inf too); NaN gives 0x7f. */
static inline KV_HD uint8_t __kv_float_to_fp8_e4m3(float x)
{
	uint32_t u = __kv_f2u(x), sign = (u >> 24) & 0x80, e;

	u &= 0x7fffffff;
	if (u > 0x7f800000)
		return 0x7f;
	if (u >= 0x43e00000)			/* 448 */
		return (uint8_t)(sign | 0x7e);
	if (u >= 0x3c800000) {			/* 2^-6: normal in e4m3 */
		u -= 120u << 23;		/* rebias 127 -> 7 */
		return (uint8_t)(sign | __kv_rne_shift(u, 20));
	}
	/* e4m3 subnormal: round(|x| * 2^9); up to 8 = the smallest normal */
	e = u >> 23;
	if (e < 116)				/* |x| < 2^-11: rounds to 0 */
		return (uint8_t)sign;
	return (uint8_t)(sign | __kv_rne_shift((u & 0x7fffff) | 0x800000,
					       141 - e));
}

static inline KV_HD float __kv_half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
	float f;

	if (e == 0x1f)				/* inf, NaN (payload kept) */
		return __kv_u2f(sign | 0x7f800000 | m << 13);
	if (e)
		return __kv_u2f(sign | (e + 112) << 23 | m << 13);
	f = (float)m * (1.0f / 16777216);	/* subnormal: m * 2^-24 */
	return sign ? -f : f;
}

/* Nearest, ties to even; overflow gives inf, NaN stays a quiet NaN. */
static inline KV_HD uint16_t __kv_float_to_half(float x)
{
	uint32_t u = __kv_f2u(x), sign = (u >> 16) & 0x8000, e;

	u &= 0x7fffffff;
	if (u > 0x7f800000)
		return (uint16_t)(sign | 0x7e00 | ((u >> 13) & 0x3ff));
	if (u >= 0x477ff000)			/* 65520: rounds to inf */
		return (uint16_t)(sign | 0x7c00);
	if (u >= 0x38800000) {			/* 2^-14: normal half */
		u -= 112u << 23;		/* rebias 127 -> 15 */
		return (uint16_t)(sign | __kv_rne_shift(u, 13));
	}
	/* half subnormal: round(|x| * 2^24), up to 0x400 = smallest normal */
	e = u >> 23;
	if (e < 102)				/* |x| < 2^-25: rounds to 0 */
		return (uint16_t)sign;
	return (uint16_t)(sign | __kv_rne_shift((u & 0x7fffff) | 0x800000,
						126 - e));
}

static inline KV_HD float __kv_bf16_to_float(uint16_t h)
{
	return __kv_u2f((uint32_t)h << 16);
}

/* Nearest, ties to even (subnormals and overflow to inf included). */
static inline KV_HD uint16_t __kv_float_to_bf16(float x)
{
	uint32_t u = __kv_f2u(x);

	if ((u & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((u >> 16) | 0x40);	/* quiet NaN */
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* Element @i of an fp16/bf16/fp32 tensor, as float. */
static inline KV_HD float __kv_load(const void *p, uint32_t dtype, uint64_t i)
{
	switch (dtype) {
	case KV_DTYPE_FP16:
		return __kv_half_to_float(((const uint16_t *)p)[i]);
	case KV_DTYPE_BF16:
		return __kv_bf16_to_float(((const uint16_t *)p)[i]);
	default:
		return ((const float *)p)[i];
	}
}

static inline KV_HD void __kv_store(void *p, uint32_t dtype, uint64_t i,
				    float x)
{
	switch (dtype) {
	case KV_DTYPE_FP16:
		((uint16_t *)p)[i] = __kv_float_to_half(x);
		break;
	case KV_DTYPE_BF16:
		((uint16_t *)p)[i] = __kv_float_to_bf16(x);
		break;
	default:
		((float *)p)[i] = x;
		break;
	}
}

/* qmax of a quantized dtype: scale = amax / qmax. */
static inline KV_HD float kv_quant_qmax(uint32_t dtype)
{
	return dtype == KV_DTYPE_INT8 ? KV_INT8_MAX : KV_FP8_E4M3_MAX;
}

/*
 * KV_QUANT_TOKEN: the scale of a vector whose largest |x| is @amax. 1 when
 * amax / qmax is 0 (an all-zero vector, or one so small it underflows),
 * infinite or NaN, so that the division in __kv_quant never fails.
 */
static inline KV_HD float kv_quant_token_scale(float amax, uint32_t dtype)
{
	float s = amax / kv_quant_qmax(dtype);

	return s > 0.0f && s <= FLT_MAX ? s : 1.0f;
}

/*
 * One stored element: q = x / s (an IEEE division, not x * (1 / s)), then
 * e4m3 to nearest even, saturated; int8 roundf (ties away from zero),
 * clamped to +-127, NaN to 0.
 */
static inline KV_HD uint8_t __kv_quant(float x, float s, uint32_t dtype)
{
	float y = x / s;

	if (dtype != KV_DTYPE_INT8)
		return __kv_float_to_fp8_e4m3(y);
	y = roundf(y);
	if (!(y == y))
		return 0;
	if (y > KV_INT8_MAX)
		y = KV_INT8_MAX;
	if (y < -KV_INT8_MAX)
		y = -KV_INT8_MAX;
	return (uint8_t)(int8_t)y;
}

/* The value a stored element stands for: q * s. */
static inline KV_HD float __kv_dequant(uint8_t q, float s, uint32_t dtype)
{
	if (dtype == KV_DTYPE_INT8)
		return (float)(int8_t)q * s;
	return __kv_fp8_e4m3_to_float(q) * s;
}

/*
 * Byte offset, inside a block, of the values of (@layer, K (@v 0) or V
 * (@v 1), @head, @slot): head_dim elements of elem_bytes each.
 */
static inline KV_HD uint64_t kv_layout_vec_off(const struct kv_layout *l,
					       uint32_t layer, int v,
					       uint32_t head, uint32_t slot)
{
	return layer * l->layer_bytes + (v ? l->v_off : 0) +
	       ((uint64_t)head * l->block_tokens + slot) * l->head_dim *
	       l->elem_bytes;
}

/*
 * Byte offset, inside a block, of the fp32 scales of K or V of @layer:
 * [kv_heads][block_tokens] (KV_QUANT_TOKEN) or [kv_heads][head_dim]
 * (KV_QUANT_CHANNEL).
 */
static inline KV_HD uint64_t kv_layout_scale_off(const struct kv_layout *l,
						 uint32_t layer, int v)
{
	return layer * l->layer_bytes + (v ? l->v_scale_off : l->k_scale_off);
}

/*
 * The partition size a decode call uses for @partition_tokens: 0 gives the
 * largest multiple of block_tokens <= 512 (block_tokens itself when that
 * is larger). 0 when @partition_tokens is not a multiple of block_tokens
 * or above KV_DECODE_PARTITION_MAX.
 */
static inline KV_HD uint32_t kv_decode_partition(const struct kv_layout *l,
						 uint32_t partition_tokens)
{
	uint32_t bt = l->block_tokens;

	if (!partition_tokens) {
		if (bt >= KV_DECODE_PARTITION_DEFAULT)
			return bt;
		return KV_DECODE_PARTITION_DEFAULT / bt * bt;
	}
	if (partition_tokens % bt || partition_tokens > KV_DECODE_PARTITION_MAX)
		return 0;
	return partition_tokens;
}

/*
 * The longest context one decode call can carry: what its block tables
 * hold. A launcher sizes the workspace by this, not by the context_lens
 * (device memory it cannot read).
 */
static inline KV_HD uint32_t kv_decode_max_context(const struct kv_layout *l,
						   uint32_t max_blocks_per_seq)
{
	uint64_t t = (uint64_t)max_blocks_per_seq * l->block_tokens;

	return t > UINT32_MAX ? UINT32_MAX : (uint32_t)t;
}

/*
 * The decode workspace (kv_decode_workspace_bytes), from a 256-byte
 * aligned base; P = ceil(max_context / partition):
 *
 *   float max_logits[num_seqs][num_heads][P]   at 0
 *   float exp_sums  [num_seqs][num_heads][P]   at exp_sums
 *   float tmp_out   [num_seqs][num_heads][P][head_dim]   at tmp_out
 *
 * each array starting on a 256-byte boundary. Partition p of (s, h) covers
 * tokens [p * partition, min(ctx, (p + 1) * partition)) and holds their
 * largest logit m_p = max(scale * q . k_t), exp_sum s_p = sum exp(l_t -
 * m_p) and tmp_out o_p = sum exp(l_t - m_p) v_t / s_p (normalized by its
 * own sum, as vLLM's v2 kernel). The reduction: M = max m_p, w_p = s_p *
 * exp(m_p - M), out = (sum w_p o_p) / (sum w_p). Partitions past a
 * sequence's context are not written and not read. A partition whose
 * tokens a context policy all masks (kv_decode_args.sink_lens,
 * window_starts) is empty: m_p -inf, s_p 0, o_p 0, so w_p is 0; when all
 * are, out is 0.
 */
struct kv_decode_ws {
	uint32_t	partitions;	/* P */
	uint32_t	partition;	/* tokens per partition */
	uint64_t	exp_sums;	/* byte offsets from the base */
	uint64_t	tmp_out;
	uint64_t	bytes;		/* the whole workspace */
};

static inline KV_HD uint64_t __kv_ws_align(uint64_t b)
{
	return (b + KV_DECODE_WS_ALIGN - 1) & ~(uint64_t)(KV_DECODE_WS_ALIGN - 1);
}

/* @partition as kv_decode_partition returns it (non-zero). */
static inline KV_HD void kv_decode_ws_layout(struct kv_decode_ws *w,
					     const struct kv_layout *l,
					     uint32_t num_seqs,
					     uint32_t num_heads,
					     uint32_t max_context,
					     uint32_t partition)
{
	uint64_t rows;

	w->partition = partition;
	w->partitions = (uint32_t)(((uint64_t)max_context + partition - 1) /
				   partition);
	rows = (uint64_t)num_seqs * num_heads * w->partitions;
	w->exp_sums = __kv_ws_align(rows * sizeof(float));
	w->tmp_out = w->exp_sums + __kv_ws_align(rows * sizeof(float));
	w->bytes = w->tmp_out + __kv_ws_align(rows * l->head_dim *
					      sizeof(float));
}

/*
 * Host-side checks (kernels/layout.c), shared by kv_ref_* and the CUDA
 * launchers; 0 or -EINVAL. kv_check_layout: @l is what kv_layout_init
 * makes. kv_check_cache_args: all but the contents of slot_mapping and
 * scales. kv_check_decode_args: all but the contents of block_tables and
 * context_lens; *@partition gets the partition size used.
 */
int kv_check_layout(const struct kv_layout *l);
int kv_check_cache_args(const struct kv_layout *l, const void *pool,
			uint32_t layer, const struct kv_cache_args *a);
int kv_check_decode_args(const struct kv_layout *l, const void *pool,
			 uint32_t layer, const struct kv_decode_args *a,
			 uint32_t *partition);

#ifdef __cplusplus
}
#endif

#endif /* KV_KERNELS_H */
