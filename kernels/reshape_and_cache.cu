// SPDX-License-Identifier: MIT
/*
 * reshape_and_cache on the GPU: each new token's K and V rows of one layer
 * go to their slot, quantized when the layout says so (kv_kernels.h).
 *
 * Grid (num_tokens), 128 threads: one CUDA block per token, its four warps
 * taking the 2 * kv_heads (K|V, head) rows in turn. A lane handles eight
 * elements at a time: 16-byte loads of the source (when k and v are
 * 16-byte aligned), 16-byte stores of an unquantized row, 8-byte stores of
 * a quantized one. KV_QUANT_TOKEN reads a row twice (its amax, then the
 * values; the second read hits L1): scale = amax / qmax, as the C
 * reference computes it, int8 by the reference's own __kv_quant, e4m3 by
 * the hardware conversion (nearest even, saturated). KV_QUANT_CHANNEL
 * copies the layer's static scales into the block's scale area beside
 * the values. Unlike the C reference, the launcher cannot read
 * slot_mapping and scales (device memory): a slot whose block id is not a
 * u32 is skipped, and the scales are used as they are.
 * ptxas (sm_90): 48 registers; its only "spill" (12 bytes) is the slow
 * path subroutine of the IEEE division, which the reference needs.
 */
#include <errno.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "kv_kernels.h"

#define RC_WARPS	4
#define RC_THREADS	(RC_WARPS * 32)

struct rc {
	uint8_t		*pool;
	const void	*src[2];	/* k, v */
	const int64_t	*slots;
	const float	*scales;	/* KV_QUANT_CHANNEL: [2][kv_heads][hd] */
	uint64_t	block_bytes;
	uint64_t	layer_off;	/* layer * layer_bytes */
	uint64_t	v_off;
	uint64_t	sc_off[2];	/* K and V scales in a layer */
	uint32_t	kv_heads;
	uint32_t	hd;
	uint32_t	bt;
	uint32_t	eb;
	uint32_t	src_dtype;
	uint32_t	dtype;
	uint32_t	quant;
	int		vec;		/* k and v are 16-byte aligned */
};

/* Source elements [i, i + 8) as floats (i a multiple of 8). */
__device__ static __forceinline__ void rc_load8(const struct rc &a,
						const void *x, uint64_t i,
						float f[8])
{
	if (a.vec && a.src_dtype == KV_DTYPE_FP32) {
		const float4 *p = (const float4 *)x + i / 4;
		float4 lo = p[0], hi = p[1];

		f[0] = lo.x, f[1] = lo.y, f[2] = lo.z, f[3] = lo.w;
		f[4] = hi.x, f[5] = hi.y, f[6] = hi.z, f[7] = hi.w;
		return;
	}
	if (a.vec && a.src_dtype == KV_DTYPE_FP16) {
		uint4 w = *((const uint4 *)x + i / 8);
		uint32_t u[4] = { w.x, w.y, w.z, w.w };

#pragma unroll
		for (int e = 0; e < 4; e++) {
			f[2 * e] = __half2float(__ushort_as_half(u[e] & 0xffff));
			f[2 * e + 1] = __half2float(__ushort_as_half(u[e] >> 16));
		}
		return;
	}
	if (a.vec && a.src_dtype == KV_DTYPE_BF16) {
		uint4 w = *((const uint4 *)x + i / 8);
		uint32_t u[4] = { w.x, w.y, w.z, w.w };

#pragma unroll
		for (int e = 0; e < 4; e++) {
			f[2 * e] = __uint_as_float(u[e] << 16);
			f[2 * e + 1] = __uint_as_float(u[e] & 0xffff0000u);
		}
		return;
	}
#pragma unroll
	for (int e = 0; e < 8; e++)
		f[e] = __kv_load(x, a.src_dtype, i + e);
}

/* Eight stored elements x / s, packed little-endian. */
__device__ static __forceinline__ uint2 rc_quant8(const struct rc &a,
						  const float f[8],
						  const float s[8])
{
	uint32_t w[2] = { 0, 0 };

#pragma unroll
	for (int e = 0; e < 8; e++) {
		uint32_t q;

		if (a.dtype == KV_DTYPE_INT8)
			q = __kv_quant(f[e], s[e], KV_DTYPE_INT8);
		else
			q = __nv_cvt_float_to_fp8(f[e] / s[e], __NV_SATFINITE,
						  __NV_E4M3);
		w[e / 4] |= q << (8 * (e % 4));
	}
	return make_uint2(w[0], w[1]);
}

/* One row of an unquantized cache: the bits as they are. */
__device__ static __forceinline__ void rc_copy(const struct rc &a,
					       const void *x, uint64_t row,
					       uint8_t *dst, int lane)
{
	uint32_t bytes = a.hd * a.eb;
	const uint8_t *s = (const uint8_t *)x + row * a.eb;

	if (a.vec) {
		for (uint32_t o = lane * 16; o < bytes; o += 32 * 16)
			*(uint4 *)(dst + o) = *(const uint4 *)(s + o);
		return;
	}
	if (a.eb == 4) {
		for (uint32_t d = lane; d < a.hd; d += 32)
			((uint32_t *)dst)[d] = ((const uint32_t *)s)[d];
		return;
	}
	for (uint32_t d = lane; d < a.hd; d += 32)
		((uint16_t *)dst)[d] = ((const uint16_t *)s)[d];
}

/* KV_QUANT_TOKEN: the row's own scale, then its values. */
__device__ static __forceinline__ void rc_token(const struct rc &a,
						const void *x, uint64_t row,
						uint8_t *dst, float *sc,
						int lane)
{
	float f[8], s[8], amax = 0.0f, scale;

	for (uint32_t c = lane; c < a.hd / 8; c += 32) {
		rc_load8(a, x, row + c * 8, f);
#pragma unroll
		for (int e = 0; e < 8; e++)
			amax = fmaxf(amax, fabsf(f[e]));	/* NaN skipped */
	}
#pragma unroll
	for (int o = 16; o; o >>= 1)
		amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, o));
	scale = kv_quant_token_scale(amax, a.dtype);
	if (!lane)
		*sc = scale;
#pragma unroll
	for (int e = 0; e < 8; e++)
		s[e] = scale;
	for (uint32_t c = lane; c < a.hd / 8; c += 32) {
		rc_load8(a, x, row + c * 8, f);
		*(uint2 *)(dst + c * 8) = rc_quant8(a, f, s);
	}
}

/* KV_QUANT_CHANNEL: the static scales go with the block. */
__device__ static __forceinline__ void rc_channel(const struct rc &a,
						  const void *x, uint64_t row,
						  uint8_t *dst, float *sc,
						  const float *cs, int lane)
{
	float f[8], s[8];

	for (uint32_t c = lane; c < a.hd / 8; c += 32) {
#pragma unroll
		for (int e = 0; e < 8; e++)
			s[e] = cs[c * 8 + e];
		/* 16-byte aligned: scale areas and their rows are */
		*(float4 *)(sc + c * 8) = make_float4(s[0], s[1], s[2], s[3]);
		*(float4 *)(sc + c * 8 + 4) = make_float4(s[4], s[5], s[6], s[7]);
		rc_load8(a, x, row + c * 8, f);
		*(uint2 *)(dst + c * 8) = rc_quant8(a, f, s);
	}
}

__global__ void __launch_bounds__(RC_THREADS)
reshape_and_cache_kernel(const struct rc a)
{
	const uint32_t t = blockIdx.x;
	const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int64_t slot = a.slots[t];
	uint64_t b;
	uint32_t off;
	uint8_t *blk;

	if (slot < 0)
		return;
	b = (uint64_t)slot / a.bt;
	if (b > UINT32_MAX)
		return;
	off = (uint32_t)((uint64_t)slot - b * a.bt);
	blk = a.pool + b * a.block_bytes + a.layer_off;
	for (uint32_t r = warp; r < 2 * a.kv_heads; r += RC_WARPS) {
		int v = r >= a.kv_heads;
		uint32_t h = r - v * a.kv_heads;
		uint64_t row = ((uint64_t)t * a.kv_heads + h) * a.hd;
		uint64_t vec = (uint64_t)h * a.bt + off;
		uint8_t *dst = blk + (v ? a.v_off : 0) + vec * a.hd * a.eb;
		/* no run-time index into the parameters: it would copy them */
		float *sc = (float *)(blk + (v ? a.sc_off[1] : a.sc_off[0]));
		const void *x = v ? a.src[1] : a.src[0];

		if (a.quant == KV_QUANT_NONE)
			rc_copy(a, x, row, dst, lane);
		else if (a.quant == KV_QUANT_TOKEN)
			rc_token(a, x, row, dst, sc + vec, lane);
		else
			rc_channel(a, x, row, dst,
				   sc + (uint64_t)h * a.hd,
				   a.scales + ((uint64_t)v * a.kv_heads + h) *
					      a.hd, lane);
	}
}

extern "C" int kv_cuda_reshape_and_cache(const struct kv_layout *l,
					 void *pool, uint32_t layer,
					 const struct kv_cache_args *a,
					 void *stream)
{
	struct rc r;
	int ret = kv_check_cache_args(l, pool, layer, a);

	if (ret)
		return ret;
	if ((uintptr_t)pool % 16 || a->num_tokens > INT32_MAX)
		return -EINVAL;
	if (!a->num_tokens)
		return 0;
	r.pool = (uint8_t *)pool;
	r.src[0] = a->k;
	r.src[1] = a->v;
	r.slots = a->slot_mapping;
	r.scales = a->scales;
	r.block_bytes = l->block_bytes;
	r.layer_off = (uint64_t)layer * l->layer_bytes;
	r.v_off = l->v_off;
	r.sc_off[0] = l->k_scale_off;
	r.sc_off[1] = l->v_scale_off;
	r.kv_heads = l->kv_heads;
	r.hd = l->head_dim;
	r.bt = l->block_tokens;
	r.eb = l->elem_bytes;
	r.src_dtype = a->src_dtype;
	r.dtype = l->dtype;
	r.quant = l->quant;
	r.vec = !((uintptr_t)a->k % 16) && !((uintptr_t)a->v % 16);
	reshape_and_cache_kernel<<<a->num_tokens, RC_THREADS, 0,
				   (cudaStream_t)stream>>>(r);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}
