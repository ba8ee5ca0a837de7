/* SPDX-License-Identifier: MIT */
/*
 * kvd kernels: what an engine runs over kvd blocks. Every kernel has a C
 * reference (kv_ref_*, in libkvclient: the tests' oracle and a CPU
 * fallback) and a CUDA version (kv_cuda_*, in libkvkernels.a, built with
 * nvcc for sm_90 and PTX) with the same arguments and results.
 *
 * Block layout (DESIGN.md, "inside a block"): block id b of a namespace
 * starts at pool + (uint64_t)b * block_bytes. Inside it, layer l starts at
 * l * layer_bytes and holds
 *
 *   K values   [kv_heads][block_tokens][head_dim]   dtype elements
 *   V values   [kv_heads][block_tokens][head_dim]
 *   K scales   fp32, quantized dtypes only:
 *                KV_QUANT_TOKEN    [kv_heads][block_tokens]
 *                KV_QUANT_CHANNEL  [kv_heads][head_dim]
 *   V scales   the same
 *   padding to 16 bytes (quantized only)
 *
 * (kv_geometry_layer_bytes / kv_geometry_block_bytes in <kv/abi.h>). A
 * token's "slot" is block_id * block_tokens + offset, as vLLM's slot
 * mapping. All offsets are computed in 64 bits: pools over 4 GiB and more
 * than 2^24 blocks address correctly.
 *
 * Quantization (fp8 e4m3 and int8, kv_geometry.quant):
 *   KV_QUANT_TOKEN    dynamic: on write, each (K|V, kv_head, token) vector
 *                     gets scale = amax / qmax (qmax 448 for e4m3, 127 for
 *                     int8; an all-zero vector gets scale 1), stored
 *                     beside the block's values.
 *   KV_QUANT_CHANNEL  static: one scale per (layer, K|V, kv_head, channel)
 *                     from a calibration file (kv_scales_load); written
 *                     into each block's scale area on write, so a block
 *                     carries its own scales.
 * Stored value q = round(x / scale) (an IEEE division; int8: to nearest,
 * ties away from zero, clamped to +-127, NaN to 0; e4m3: to nearest even,
 * saturated to +-448, NaN to 0x7f); read back as q * scale. A per-token
 * scale that would be 0, infinite or NaN is 1. Attention dequantizes on
 * the fly, accumulating in fp32. kernels/kv_kernels.h holds the shared
 * inline code both implementations round with.
 *
 * Conventions: errors are -errno (-EINVAL for bad shapes, dtypes or
 * arguments, -EIO a CUDA launch failure); nothing is read or written on
 * error. The kv_ref_* functions are thread-safe for disjoint outputs. The
 * kv_cuda_* functions take device pointers, are asynchronous on @stream
 * (a cudaStream_t; NULL the legacy default stream), and allocate nothing.
 */
#ifndef KV_KERNELS_PUBLIC_H
#define KV_KERNELS_PUBLIC_H

#include <stddef.h>
#include <stdint.h>
#include <kv/abi.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A namespace's block layout, from its geometry: the byte offsets the
 * kernels use. Filled by kv_layout_init; read-only afterwards.
 */
struct kv_layout {
	uint32_t	layers;
	uint32_t	kv_heads;
	uint32_t	head_dim;
	uint32_t	block_tokens;
	uint32_t	dtype;		/* enum kv_dtype: FP16, BF16, FP32,
					 * FP8_E4M3 or INT8 */
	uint32_t	quant;		/* enum kv_quant */
	uint32_t	elem_bytes;	/* bytes of one stored element */
	uint32_t	resv;
	uint64_t	layer_bytes;	/* kv_geometry_layer_bytes */
	uint64_t	block_bytes;	/* kv_geometry_block_bytes */
	uint64_t	v_off;		/* in a layer: the V values */
	uint64_t	k_scale_off;	/* in a layer: K scales (quantized) */
	uint64_t	v_scale_off;	/* in a layer: V scales (quantized) */
};

/*
 * kv_layout_init - the layout of blocks of geometry @g. -EINVAL for a
 * count of 0 or above 1024 (kvd's limits), head_dim not a multiple of 8
 * (16-byte vector loads), an unknown dtype or scheme, fp8/int8 without a
 * scheme (scales are never defaulted) or a scheme with another dtype.
 * The kernels reject a layout that differs from what this makes.
 */
int kv_layout_init(struct kv_layout *l, const struct kv_geometry *g);

/*
 * Static scales (KV_QUANT_CHANNEL): s[((layer * 2 + kv) * kv_heads + head)
 * * head_dim + channel], kv 0 for K and 1 for V; every one finite and > 0.
 */
struct kv_scales {
	uint32_t	layers;
	uint32_t	kv_heads;
	uint32_t	head_dim;
	float		*s;		/* [layers][2][kv_heads][head_dim] */
};

/*
 * kv_scales_load - read a calibration file for layout @l into @out.
 * Text, one line per (K|V, layer, kv_head), '#' comments and blank lines
 * ignored:
 *     k LAYER HEAD SCALE            one scale for every channel
 *     v LAYER HEAD S0 S1 ... Sd-1   one scale per channel (head_dim)
 * Every (k|v, layer, head) of the layout must appear exactly once.
 * Returns 0, or -EINVAL with "PATH:LINE: why" in @err (a missing, zero,
 * negative, NaN or infinite scale, a wrong count, an index out of range,
 * a duplicate or missing line), -ENOENT / -EACCES opening it, -ENOMEM.
 * Free with kv_scales_free. Thread-safe.
 */
int kv_scales_load(const char *path, const struct kv_layout *l,
		   struct kv_scales *out, char *err, size_t errlen);
void kv_scales_free(struct kv_scales *s);

/* Arguments of reshape_and_cache: the new tokens of one layer. */
struct kv_cache_args {
	const void	*k;		/* [num_tokens][kv_heads][head_dim] */
	const void	*v;		/* the same */
	uint32_t	src_dtype;	/* of k and v: FP16, BF16 or FP32 */
	uint32_t	num_tokens;
	const int64_t	*slot_mapping;	/* [num_tokens]: block_id * block_tokens
					 * + offset; < 0 skips the token */
	const float	*scales;	/* KV_QUANT_CHANNEL: this layer's
					 * [2][kv_heads][head_dim]; else NULL
					 * (-EINVAL otherwise) */
};

/*
 * reshape_and_cache: write each new token's K and V into its slot of
 * layer @layer of the pool at @pool (quantizing when the layout says so,
 * and writing the scales). An unquantized cache must have src_dtype equal
 * to its dtype. -EINVAL for a NULL pointer, a layer out of range, a bad
 * src_dtype, missing or non-finite/non-positive static scales, a slot
 * whose block id does not fit 32 bits (the pool's size is not known
 * here: slots are trusted to lie inside it).
 */
int kv_ref_reshape_and_cache(const struct kv_layout *l, void *pool,
			     uint32_t layer, const struct kv_cache_args *a);
int kv_cuda_reshape_and_cache(const struct kv_layout *l, void *pool,
			      uint32_t layer, const struct kv_cache_args *a,
			      void *stream);

/* Arguments of paged_attention_decode: one query token per sequence. */
struct kv_decode_args {
	const void	*q;		/* [num_seqs][num_heads][head_dim] */
	void		*out;		/* [num_seqs][num_heads][head_dim] */
	uint32_t	q_dtype;	/* of q and out: FP16, BF16 or FP32 */
	uint32_t	num_seqs;
	uint32_t	num_heads;	/* a multiple of kv_heads (GQA) */
	uint32_t	max_blocks_per_seq;	/* row length of block_tables */
	const uint32_t	*block_tables;	/* [num_seqs][max_blocks_per_seq] ids */
	const uint32_t	*context_lens;	/* [num_seqs], tokens; 0: out is 0 */
	float		scale;		/* softmax scale, e.g. 1/sqrt(head_dim) */
	uint32_t	partition_tokens;	/* split-K partition, a multiple
					 * of block_tokens, <= 8192; 0: the
					 * largest multiple <= 512 (or
					 * block_tokens if larger) */
	void		*workspace;	/* CUDA: kv_decode_workspace_bytes;
					 * the reference ignores it */
	size_t		workspace_bytes;
	/*
	 * The kept range of a context policy (kv_seq_range(3)), in table
	 * space (token t: block_tables[s][t / block_tokens], slot t %
	 * block_tokens): sequence s attends to t < context_lens[s] with
	 * t < sink_lens[s] or t >= window_starts[s]. A table entry whose
	 * slots all lie in [sink_lens[s], window_starts[s]) is never read,
	 * neither its id nor its bytes (its block may belong to another
	 * sequence by now). NULL: 0 for every sequence (all attended).
	 * Each must be <= context_lens[s] (reference: -EINVAL; CUDA: NaN
	 * output rows). A sequence that attends to nothing gets 0.
	 */
	const uint32_t	*sink_lens;	/* [num_seqs] or NULL */
	const uint32_t	*window_starts;	/* [num_seqs] or NULL */
};

/*
 * kv_decode_workspace_bytes - device scratch kv_cuda_paged_attention_decode
 * needs for these shapes (the partial maxima, sums and outputs of the
 * partitions of the longest context @max_context; layout: struct
 * kv_decode_ws in kernels/kv_kernels.h). The launcher cannot read the
 * context_lens (device memory): max_context = max_blocks_per_seq *
 * block_tokens, what the block tables hold, is always enough. 0 for
 * invalid arguments, and when nothing is needed.
 */
size_t kv_decode_workspace_bytes(const struct kv_layout *l,
				 uint32_t num_seqs, uint32_t num_heads,
				 uint32_t max_context,
				 uint32_t partition_tokens);

/*
 * paged_attention_decode: out[s][h] = softmax(scale * q[s][h] . K^T) V over
 * the context_lens[s] tokens of sequence s, whose blocks are
 * block_tables[s][0..]; query head h reads kv head h / (num_heads /
 * kv_heads). Contexts are split into partitions of partition_tokens whose
 * partial results are reduced (FlashDecoding; vLLM's v2 kernel), so a few
 * long sequences still fill the GPU. fp32 accumulation. -EINVAL for bad
 * shapes, a non-finite scale, a context longer than max_blocks_per_seq
 * blocks, a sink or window start past its context, a block id (of an
 * entry with an attended token) whose bytes would lie past @pool_bytes,
 * a workspace too small (CUDA); -ENOMEM (reference: its partition
 * scratch). The CUDA launcher cannot read block tables, context lengths,
 * sinks or windows (device memory): a sequence with a bad block id, too
 * long a context or a bad sink or window gets NaN output rows instead,
 * and never reads outside @pool_bytes.
 */
int kv_ref_paged_attention_decode(const struct kv_layout *l,
				  const void *pool, uint64_t pool_bytes,
				  uint32_t layer,
				  const struct kv_decode_args *a);
int kv_cuda_paged_attention_decode(const struct kv_layout *l,
				   const void *pool, uint64_t pool_bytes,
				   uint32_t layer,
				   const struct kv_decode_args *a,
				   void *stream);

/* One copy-on-write step: the bytes of block src are copied to dst. */
struct kv_block_copy {
	uint32_t	src;
	uint32_t	dst;
};

/*
 * copy_blocks: for each of the @n pairs copy @block_bytes from block src
 * to block dst of @pool (CUDA: @pairs in device memory). -EINVAL when a
 * pair copies a block onto itself or block_bytes is not a multiple of 16.
 */
int kv_ref_copy_blocks(void *pool, uint64_t block_bytes,
		       const struct kv_block_copy *pairs, uint32_t n);
int kv_cuda_copy_blocks(void *pool, uint64_t block_bytes,
			const struct kv_block_copy *pairs, uint32_t n,
			void *stream);

/* Element conversions the kernels share, exposed for tests and tools. */
float kv_fp8_e4m3_to_float(uint8_t v);
uint8_t kv_float_to_fp8_e4m3(float x);	/* nearest even, saturating */
float kv_half_to_float(uint16_t h);
uint16_t kv_float_to_half(float x);	/* nearest even */
float kv_bf16_to_float(uint16_t h);
uint16_t kv_float_to_bf16(float x);	/* nearest even */

#ifdef __cplusplus
}
#endif

#endif /* KV_KERNELS_PUBLIC_H */
