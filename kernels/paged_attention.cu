// SPDX-License-Identifier: MIT
/*
 * paged_attention_decode on the GPU: one query token per sequence against
 * its paged K and V, split-K over partitions (FlashDecoding; vLLM's v2).
 *
 * Grid (num_seqs, kv_heads * groups, partitions), 128 threads. A CUDA
 * block owns one partition of one kv head of one sequence and up to 8 of
 * the G query heads that share that kv head (groups = ceil(G / 8)), so
 * K and V are read once for the whole group. Its 4 warps take 16-token
 * tiles in turn, each with an online softmax of its own, and are merged
 * through shared memory at the end. A sequence of one partition writes
 * @out at once; longer ones leave (max, sum, normalized out) per
 * partition in the workspace (kv_kernels.h, struct kv_decode_ws) and
 * pa_reduce_kernel merges them.
 *
 * Inside a warp both products run on tensor cores, mma.m16n8k8 with tf32
 * operands and fp32 accumulators, the 8 query heads as N:
 *
 *   S^T[16 tokens][8 heads] = K[16 tokens][hd] . Q^T[hd][8 heads]
 *   O^T[hd][8 heads]       += V^T[hd][16 tokens] . P^T[16 tokens][8 heads]
 *
 * Why: with CUDA cores every KV element costs G fp32 FMAs, and fp8 KV at
 * 4.8 TB/s with G = 8 would need more FMAs per SM cycle than Hopper has.
 * fp16, bf16, e4m3 (moved bit-wise into fp16, 2^-8 scale folded into q
 * and the output) and int8 (through a float magic number) convert to
 * fp32 exactly and are exact in tf32, and so is an fp16 or bf16 q (the
 * softmax scale multiplies the logits afterwards); an fp32 q, or one
 * times per-channel K scales, is split into two tf32 halves, hi in
 * registers and lo in shared memory, for a second mma. Only the
 * probabilities are rounded to tf32 (2^-11). A dot product is a sum, so
 * each thread may load any 16 bytes of a row as long as q is permuted
 * alike: thread (r = lane / 4, c = lane % 4) loads bytes [64j + 16c, +16)
 * of the K rows of tokens r and r + 8, and VW = 16 (8 for hd 64 at 1
 * byte) bytes at 8 * VW * j + VW * r of the V rows of tokens c, c + 4,
 * c + 8 and c + 12: whole 32-byte sectors per instruction, every sector
 * read once.
 * Probabilities go from the S layout to the P^T operand layout through
 * 512 bytes of shared memory per warp.
 *
 * Token addresses are staged per chunk of 256 tokens (block id from the
 * table, times block_bytes, plus the row), so block_tokens may be any
 * size and partitions need not start on a block. Per-token scales
 * multiply the logits (K) and the probabilities (V); per-channel scales
 * multiply q (K) and the output (V). fp32 KV and head_dim other than 64,
 * 128 and 256 take pa_generic_kernel: CUDA cores, one warp per token for
 * the logits, one thread per channel for P.V.
 *
 * A context policy (sink_lens, window_starts) masks the table-space
 * tokens [sink, wstart) of a sequence. A CUDA block walks the attended
 * runs of its tokens, [t0, sink) and [wstart, t1), and stages only
 * theirs, so no masked token gets a logit and a table entry wholly inside
 * the hole is never read, neither its id nor its bytes (a tile's tail
 * repeats an attended token; channel scales come from an attended
 * block). A CUDA block left with no attended token writes an empty
 * partition (m -inf, sum 0, o 0), which the reduce weighs 0, or zero rows
 * when it is the sequence's only one.
 *
 * The launcher cannot read the block tables, context lengths, sinks or
 * windows (device memory): a context longer than its table, a sink or
 * window start past its context, or a block id past pool_bytes, makes
 * that sequence's output rows NaN instead of -EINVAL, and nothing outside
 * the pool is read. A workspace sized for fewer partitions than the
 * table's longest context needs is used as it is: a CUDA block then
 * covers a run of whole partitions.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "kv_kernels.h"

/*
 * ptxas, nvcc 13.0 -O3 sm_90 (`make kernels-usage`), no spills anywhere:
 *
 *   mma path      fp16/bf16              e4m3/int8              CUDA blocks/SM
 *   hd 64         96 regs, 15.3 KiB      94 regs, 15.3 KiB      5 (20 warps)
 *   hd 128        154-164 regs, 25.3 KiB 128 regs, 25.3 KiB     3 / 4
 *   hd 256        238 regs, 45.3 KiB     210-213 regs, 45.3 KiB 2
 *   generic       72-84 regs, 3.3 KiB + 64 B per head_dim of shared memory
 *   reduce        32 regs
 *
 * A warp has its tile's K and V (8 KiB at fp16, hd 128) in flight while
 * it waits, so 12 warps keep ~96 KiB per SM in flight: about 3x what
 * Little's law asks for HBM3e at ~1 us loaded latency.
 */

#define PA_WARPS	4
#define PA_THREADS	(PA_WARPS * 32)
#define PA_HEADS	8	/* query heads per CUDA block: the mma N */
#define PA_TILE		16	/* tokens per warp step: the mma M */
#define PA_CHUNK	256	/* tokens whose addresses are staged at once */
#define PA_GCHUNK	64	/* generic path: tokens per softmax step */
#define PA_MAX_Y	65535u	/* gridDim.y and gridDim.z */
#define PA_SMEM_DEFAULT	(48u << 10)
#define PA_LOG2E	1.44269504088896341f
#define PA_LN2		0.69314718055994531f

struct pa {
	const uint8_t	*pool;
	const void	*q;
	void		*out;
	const uint32_t	*tables;
	const uint32_t	*lens;
	const uint32_t	*sinks;		/* NULL: 0 */
	const uint32_t	*wins;		/* window starts; NULL: 0 */
	float		*ws_max;	/* [seqs][heads][nparts], natural log */
	float		*ws_sum;
	float		*ws_out;	/* [seqs][heads][nparts][hd] */
	uint64_t	block_bytes;
	uint64_t	layer_off;	/* layer * layer_bytes */
	uint64_t	v_off;
	uint64_t	ks_off;		/* in a layer: K scales */
	uint64_t	vs_off;		/* V scales */
	uint64_t	nr_blocks;	/* ids below this lie inside pool_bytes */
	float		qscale;		/* softmax scale * log2(e) */
	int		qsplit;		/* mma path: q is not exact in tf32 */
	uint32_t	max_blocks;
	uint32_t	bt;
	uint32_t	hd;
	uint32_t	eb;
	uint32_t	group;		/* G: query heads per kv head */
	uint32_t	groups;		/* CUDA blocks per kv head */
	uint32_t	num_heads;
	uint32_t	part;		/* tokens per partition */
	uint32_t	nparts;		/* partitions per (seq, head) in the ws */
	uint32_t	quant;
	uint32_t	qtype;
};

/* Where a CUDA block works: which heads, which tokens. */
struct pa_job {
	uint32_t	seq;
	uint32_t	kvh;
	uint32_t	h0;		/* first query head */
	uint32_t	nh;		/* query heads, 1..8 */
	uint32_t	np;		/* partitions of the sequence */
	uint32_t	t0, t1;		/* tokens [t0, t1) */
	uint32_t	a0, a1;		/* of them attended: [a0, a1) */
	uint32_t	b0, b1;		/* and [b0, b1) */
};

__device__ static __forceinline__ float pa_ldq(const struct pa &p,
					       uint64_t i)
{
	if (p.qtype == KV_DTYPE_FP16)
		return __half2float(((const __half *)p.q)[i]);
	if (p.qtype == KV_DTYPE_BF16)
		return __bfloat162float(((const __nv_bfloat16 *)p.q)[i]);
	return ((const float *)p.q)[i];
}

__device__ static __forceinline__ void pa_store(const struct pa &p,
						uint64_t i, float x)
{
	if (p.qtype == KV_DTYPE_FP16)
		((__half *)p.out)[i] = __float2half_rn(x);
	else if (p.qtype == KV_DTYPE_BF16)
		((__nv_bfloat16 *)p.out)[i] = __float2bfloat16_rn(x);
	else
		((float *)p.out)[i] = x;
}

/*
 * Partitions of a context (0: empty, or longer than its table) and the
 * tokens one CUDA block covers: the partition size, or a run of whole
 * partitions when the workspace holds fewer than the context needs.
 */
__device__ static __forceinline__ uint32_t pa_parts(const struct pa &p,
						    uint32_t ctx,
						    uint64_t *span)
{
	uint64_t n = ((uint64_t)ctx + p.part - 1) / p.part;

	if (!ctx || ctx > (uint64_t)p.max_blocks * p.bt)
		return 0;
	*span = p.part;
	if (n > p.nparts)
		*span = (uint64_t)p.part * ((n + p.nparts - 1) / p.nparts);
	return (uint32_t)(((uint64_t)ctx + *span - 1) / *span);
}

/*
 * The masked tokens [*lo, *hi) of @seq, of context @ctx: [sink, wstart),
 * or none (0, 0) when the window starts at or before the sinks' end.
 * False when a sink or window start lies past the context.
 */
__device__ static __forceinline__ bool pa_hole(const struct pa &p,
					       uint32_t seq, uint32_t ctx,
					       uint32_t *lo, uint32_t *hi)
{
	uint32_t sink = p.sinks ? p.sinks[seq] : 0;
	uint32_t wstart = p.wins ? p.wins[seq] : 0;

	*lo = *hi = 0;
	if (sink > ctx || wstart > ctx)
		return false;
	if (wstart > sink) {
		*lo = sink;
		*hi = wstart;
	}
	return true;
}

/* Out rows of heads [h0, h0 + nh) of @seq set to @x (0 or NaN). */
__device__ static void pa_fill(const struct pa &p, const struct pa_job &j,
			       float x)
{
	uint64_t o = ((uint64_t)j.seq * p.num_heads + j.h0) * p.hd;

	for (uint32_t i = threadIdx.x; i < j.nh * p.hd; i += blockDim.x)
		pa_store(p, o + i, x);
}

/*
 * A job with no attended token: an empty partition (m -inf, sum 0, o 0)
 * for the reduce, or zero rows when it is the sequence's only one.
 */
__device__ static void pa_empty(const struct pa &p, const struct pa_job &j)
{
	if (j.np == 1) {
		pa_fill(p, j, 0.0f);
		return;
	}
	for (uint32_t i = threadIdx.x; i < j.nh * p.hd; i += blockDim.x) {
		uint32_t g = i / p.hd, d = i - g * p.hd;
		uint64_t w = ((uint64_t)j.seq * p.num_heads + j.h0 + g) *
			     p.nparts + blockIdx.z;

		p.ws_out[w * p.hd + d] = 0.0f;
		if (!d) {
			p.ws_max[w] = -INFINITY;
			p.ws_sum[w] = 0.0f;
		}
	}
}

/*
 * The job of this CUDA block; false when it has none to compute. An
 * empty context gets zero rows, one its table cannot hold or with a bad
 * sink or window NaN rows, from partition 0; a job wholly masked is
 * written as empty here.
 */
__device__ static bool pa_job(const struct pa &p, struct pa_job *j)
{
	uint32_t ctx, y = blockIdx.y, g = y % p.groups, lo, hi;
	uint64_t span;
	bool ok;

	j->seq = blockIdx.x;
	j->kvh = y / p.groups;
	j->h0 = j->kvh * p.group + g * PA_HEADS;
	j->nh = min((uint32_t)PA_HEADS, p.group - g * PA_HEADS);
	ctx = p.lens[j->seq];
	ok = pa_hole(p, j->seq, ctx, &lo, &hi);
	j->np = ok ? pa_parts(p, ctx, &span) : 0;
	if (!j->np) {
		if (!blockIdx.z)
			pa_fill(p, *j, ok && !ctx ? 0.0f : NAN);
		return false;
	}
	if (blockIdx.z >= j->np)
		return false;
	j->t0 = (uint32_t)(blockIdx.z * span);
	j->t1 = (uint32_t)min((uint64_t)ctx, j->t0 + span);
	/* [t0, t1) less the hole: before it, and after it */
	j->a0 = j->t0;
	j->a1 = min(j->t1, max(j->t0, lo));
	j->b0 = min(j->t1, max(j->t0, hi));
	j->b1 = j->t1;
	if (j->a0 == j->a1 && j->b0 == j->b1) {
		pa_empty(p, *j);
		return false;
	}
	return true;
}

/*
 * Stage tokens [c0, c0 + n) of the job, entries [0, fill): the byte
 * offset of the token's block and layer, and its row (kv_head * bt +
 * slot). Entries past n repeat the last token (a tile's tail: its
 * logits are masked, its loads stay inside the pool). A block id past
 * the pool reads block 0 instead and marks the result bad.
 */
__device__ static __forceinline__ void pa_stage(const struct pa &p,
						const struct pa_job &j,
						uint32_t c0, uint32_t n,
						uint32_t fill, uint64_t *base,
						uint32_t *row, int *bad)
{
	const uint32_t *tbl = p.tables + (uint64_t)j.seq * p.max_blocks;

	for (uint32_t i = threadIdx.x; i < fill; i += blockDim.x) {
		uint32_t t = c0 + min(i, n - 1), b = t / p.bt;
		uint32_t id = tbl[b];

		if (id >= p.nr_blocks) {
			*bad = 1;
			id = 0;
		}
		base[i] = id * p.block_bytes + p.layer_off;
		row[i] = j.kvh * p.bt + (t - b * p.bt);
	}
}

/*
 * K and V channel scales (KV_QUANT_CHANNEL), from the block of the job's
 * first attended token (every block of a layer carries the same ones).
 */
__device__ static const float *pa_chan(const struct pa &p,
				       const struct pa_job &j, int v)
{
	uint32_t id, t = j.a0 < j.a1 ? j.a0 : j.b0;

	if (p.quant != KV_QUANT_CHANNEL)
		return NULL;
	id = p.tables[(uint64_t)j.seq * p.max_blocks + t / p.bt];
	if (id >= p.nr_blocks)
		id = 0;
	return (const float *)(p.pool + id * p.block_bytes + p.layer_off +
			       (v ? p.vs_off : p.ks_off)) + j.kvh * p.hd;
}

/*
 * The job's result from @nw partial softmaxes (m in log2 units, l, and
 * unnormalized o[w][g][d]): @out rows, or partition rows of the workspace
 * when the sequence has several.
 */
__device__ static void pa_finish(const struct pa &p, const struct pa_job &j,
				 int nw, const float *sm, const float *sl,
				 const float *so, const float *cvs, float vmul,
				 int bad)
{
	for (uint32_t i = threadIdx.x; i < j.nh * p.hd; i += blockDim.x) {
		uint32_t g = i / p.hd, d = i - g * p.hd;
		uint64_t row = (uint64_t)j.seq * p.num_heads + j.h0 + g, w;
		float mx = -INFINITY, l = 0.0f, o = 0.0f;

		for (int k = 0; k < nw; k++)
			mx = fmaxf(mx, sm[k * PA_HEADS + g]);
		for (int k = 0; k < nw; k++) {
			float e = exp2f(sm[k * PA_HEADS + g] - mx);

			l += sl[k * PA_HEADS + g] * e;
			o += so[(k * PA_HEADS + g) * p.hd + d] * e;
		}
		o = __fdividef(o, l) * vmul;	/* 1 <= l < 2^32: no call */
		if (cvs)
			o *= cvs[d];
		if (bad)
			o = mx = l = NAN;
		if (j.np == 1) {
			pa_store(p, row * p.hd + d, o);
			continue;
		}
		w = row * p.nparts + blockIdx.z;
		p.ws_out[w * p.hd + d] = o;
		if (!d) {
			p.ws_max[w] = mx * PA_LN2;
			p.ws_sum[w] = l;
		}
	}
}

/* ---- the tensor-core path ---- */

template <int KV> struct pa_kv;
template <> struct pa_kv<KV_DTYPE_FP16> { enum { EB = 2 }; };
template <> struct pa_kv<KV_DTYPE_BF16> { enum { EB = 2 }; };
template <> struct pa_kv<KV_DTYPE_FP8_E4M3> { enum { EB = 1 }; };
template <> struct pa_kv<KV_DTYPE_INT8> { enum { EB = 1 }; };

__device__ static __forceinline__ uint32_t pa_tf32(float x)
{
	uint32_t r;

	asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
	return r;
}

/* d += a . b: m16n8k8, tf32 operands, fp32 accumulators. */
__device__ static __forceinline__ void pa_mma(float d[4], float a0, float a1,
					      float a2, float a3, uint32_t b0,
					      uint32_t b1)
{
	asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
	    "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
	    "{%0, %1, %2, %3};"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	    : "r"(__float_as_uint(a0)), "r"(__float_as_uint(a1)),
	      "r"(__float_as_uint(a2)), "r"(__float_as_uint(a3)),
	      "r"(b0), "r"(b1));
}

__device__ static __forceinline__ float2 pa_h2f(uint32_t w)
{
	return __half22float2(__halves2half2(__ushort_as_half(w & 0xffff),
					     __ushort_as_half(w >> 16)));
}

/*
 * Four bytes of KV values as floats, exactly: fp16 and bf16 give 2,
 * e4m3 and int8 give 4. e4m3 comes out times 2^-8: its sign, exponent
 * and mantissa moved into an fp16's (subnormals included), the exponent
 * bias 15 instead of 7. int8 q as the float 2^23 + 128 + q, less 2^23 +
 * 128.
 */
template <int KV>
__device__ static __forceinline__ void pa_unpack(uint32_t w, float *f)
{
	if constexpr (KV == KV_DTYPE_FP16) {
		float2 x = pa_h2f(w);

		f[0] = x.x, f[1] = x.y;
	} else if constexpr (KV == KV_DTYPE_BF16) {
		f[0] = __uint_as_float(w << 16);
		f[1] = __uint_as_float(w & 0xffff0000u);
	} else if constexpr (KV == KV_DTYPE_FP8_E4M3) {
		uint32_t lo = __byte_perm(w, 0, 0x1404);	/* b1 0 b0 0 */
		uint32_t hi = __byte_perm(w, 0, 0x3424);	/* b3 0 b2 0 */
		float2 x, y;

		lo = (lo & 0x80008000u) | ((lo >> 1) & 0x3f803f80u);
		hi = (hi & 0x80008000u) | ((hi >> 1) & 0x3f803f80u);
		x = pa_h2f(lo);
		y = pa_h2f(hi);
		f[0] = x.x, f[1] = x.y, f[2] = y.x, f[3] = y.y;
	} else {
		uint32_t x = w ^ 0x80808080u;

#pragma unroll
		for (int e = 0; e < 4; e++)
			f[e] = __uint_as_float(__byte_perm(x, 0x4b000000u,
							   0x7540 | e)) -
			       8388736.0f;
	}
}

template <int N>
__device__ static __forceinline__ void pa_ld(const uint8_t *p,
					     uint32_t (&w)[N])
{
	if constexpr (N == 4) {
		uint4 x = __ldg((const uint4 *)p);

		w[0] = x.x, w[1] = x.y, w[2] = x.z, w[3] = x.w;
	} else {
		uint2 x = __ldg((const uint2 *)p);

		w[0] = x.x, w[1] = x.y;
	}
}

/* Shapes of the mma path for head_dim HD and KV dtype KV. */
template <int HD, int KV> struct pa_shape {
	enum {
		EB = pa_kv<KV>::EB,
		RB = HD * EB,			/* bytes of a row */
		KL = RB / 64,			/* K: 16-byte loads per token */
		KE = 16 / EB,			/* elements in 16 bytes */
		NQ = HD / 4,			/* K elements per token = q */
		VW = RB / 8 < 16 ? RB / 8 : 16,	/* V: bytes per load */
		VL = RB / 8 / VW,		/* V: loads per token */
		VE = VW / EB,			/* elements per V load */
		NV = HD / 8,			/* V elements per token */
		NM = HD / 16,			/* m-tiles of O^T */
		/* V loads with K's while registers allow */
		EARLY_V = HD <= 128,
	};
};

/* Channel d of this thread's K element n (lane % 4 == c). */
template <int HD, int KV>
__device__ static __forceinline__ int pa_kd(int c, int n)
{
	typedef pa_shape<HD, KV> S;

	return n / S::KE * 4 * S::KE + c * S::KE + n % S::KE;
}

/* Channel d of this thread's V element n (lane / 4 == r). */
template <int HD, int KV>
__device__ static __forceinline__ int pa_vd(int r, int n)
{
	typedef pa_shape<HD, KV> S;

	return n / S::VE * 8 * S::VE + r * S::VE + n % S::VE;
}

/* V rows of tile tokens c, c + 4, c + 8, c + 12. */
template <int HD, int KV>
__device__ static __forceinline__ void
pa_load_v(const struct pa &p, const uint64_t *base, const uint32_t *row,
	  uint32_t tb, int r, int c,
	  uint32_t (&vr)[4][pa_shape<HD, KV>::VL][pa_shape<HD, KV>::VW / 4])
{
	typedef pa_shape<HD, KV> S;

#pragma unroll
	for (int u = 0; u < 4; u++) {
		uint32_t i = tb + c + 4 * u;
		const uint8_t *v = p.pool + base[i] + p.v_off +
				   (uint64_t)row[i] * S::RB + r * S::VW;

#pragma unroll
		for (int k = 0; k < S::VL; k++)
			pa_ld(v + k * 8 * S::VW, vr[u][k]);
	}
}

/*
 * K rows of tile tokens r and r + 8 (bytes 64 * k + 16 * c of each), with
 * their per-token K and V scales when the layout has them.
 */
template <int HD, int KV>
__device__ static __forceinline__ void
pa_load_k(const struct pa &p, const uint64_t *base, const uint32_t *row,
	  uint32_t tb, int r, int c,
	  uint32_t (&kr)[2][pa_shape<HD, KV>::KL][4], float ks[2], float vs[2])
{
	typedef pa_shape<HD, KV> S;

#pragma unroll
	for (int h = 0; h < 2; h++) {
		uint32_t i = tb + r + 8 * h;
		const uint8_t *b = p.pool + base[i];
		const uint8_t *k = b + (uint64_t)row[i] * S::RB + c * 16;

#pragma unroll
		for (int k2 = 0; k2 < S::KL; k2++)
			pa_ld(k + k2 * 64, kr[h][k2]);
		ks[h] = vs[h] = 1.0f;
		if (p.quant == KV_QUANT_TOKEN) {
			ks[h] = __ldg((const float *)(b + p.ks_off) + row[i]);
			vs[h] = __ldg((const float *)(b + p.vs_off) + row[i]);
		}
	}
}

/*
 * S^T = K . Q^T for the tile: s[0], s[1] are tokens r's logits of heads
 * 2c, 2c + 1, s[2], s[3] token r + 8's. Two accumulators keep two mma
 * chains in flight; q's low half (s_qlo) when q is not exact in tf32.
 */
template <int HD, int KV>
__device__ static __forceinline__ void
pa_qk(const struct pa &p, const uint32_t (&kr)[2][pa_shape<HD, KV>::KL][4],
      const uint32_t *qf, const uint32_t (*qlo)[32], int lane, float s[4])
{
	typedef pa_shape<HD, KV> S;
	float t[4] = { 0, 0, 0, 0 };

	s[0] = s[1] = s[2] = s[3] = 0.0f;
#pragma unroll
	for (int k2 = 0; k2 < S::KL; k2++) {
		float fa[S::KE], fb[S::KE];

#pragma unroll
		for (int w = 0; w < 4; w++) {
			pa_unpack<KV>(kr[0][k2][w], fa + w * S::KE / 4);
			pa_unpack<KV>(kr[1][k2][w], fb + w * S::KE / 4);
		}
#pragma unroll
		for (int e = 0; e < S::KE; e += 2) {
			int n = k2 * S::KE + e;
			float *acc = e % 4 ? t : s;

			pa_mma(acc, fa[e], fb[e], fa[e + 1], fb[e + 1], qf[n],
			       qf[n + 1]);
			if (p.qsplit)
				pa_mma(acc, fa[e], fb[e], fa[e + 1], fb[e + 1],
				       qlo[n][lane], qlo[n + 1][lane]);
		}
	}
	s[0] += t[0], s[1] += t[1], s[2] += t[2], s[3] += t[3];
}

/* O^T += V^T . P^T for the tile, 8 tokens per step; P^T from @pw. */
template <int HD, int KV>
__device__ static __forceinline__ void
pa_pv(const uint32_t (&vr)[4][pa_shape<HD, KV>::VL][pa_shape<HD, KV>::VW / 4],
      const float *pw, int r, int c, float (&o)[pa_shape<HD, KV>::NM][4])
{
	typedef pa_shape<HD, KV> S;

#pragma unroll
	for (int k2 = 0; k2 < 2; k2++) {
		uint32_t b0 = pa_tf32(pw[(8 * k2 + c) * PA_HEADS + r]);
		uint32_t b1 = pa_tf32(pw[(8 * k2 + c + 4) * PA_HEADS + r]);
		float va[S::NV], vb[S::NV];

#pragma unroll
		for (int k = 0; k < S::VL; k++)
#pragma unroll
			for (int w = 0; w < S::VW / 4; w++) {
				int at = k * S::VE + w * 4 / S::EB;

				pa_unpack<KV>(vr[2 * k2][k][w], va + at);
				pa_unpack<KV>(vr[2 * k2 + 1][k][w], vb + at);
			}
#pragma unroll
		for (int i = 0; i < S::NM; i++)
			pa_mma(o[i], va[2 * i], va[2 * i + 1], vb[2 * i],
			       vb[2 * i + 1], b0, b1);
	}
}

/* CUDA blocks per SM to fit registers for: bytes in flight hide latency */
template <int HD, int KV> struct pa_occ {
	enum { N = HD == 64 ? 5 : HD == 256 ? 2 : pa_kv<KV>::EB == 1 ? 4 : 3 };
};

template <int HD, int KV>
__global__ void __launch_bounds__(PA_THREADS, (pa_occ<HD, KV>::N))
pa_mma_kernel(const struct pa p)
{
	typedef pa_shape<HD, KV> S;
	__shared__ uint64_t s_base[PA_CHUNK];
	__shared__ uint32_t s_row[PA_CHUNK];
	__shared__ float s_p[PA_WARPS][PA_TILE * PA_HEADS];
	__shared__ float s_o[PA_WARPS][PA_HEADS][HD];
	__shared__ float s_m[PA_WARPS][PA_HEADS], s_l[PA_WARPS][PA_HEADS];
	__shared__ uint32_t s_qlo[S::NQ][32];
	__shared__ int s_bad;
	const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	const int r = lane / 4, c = lane % 4;
	const float vmul = KV == KV_DTYPE_FP8_E4M3 ? 256.0f : 1.0f;
	const float qs = p.qscale * vmul;
	float o[S::NM][4], m0 = -INFINITY, m1 = -INFINITY, l0 = 0, l1 = 0;
	float *pw = s_p[warp];
	uint32_t qf[S::NQ];
	const float *cks;
	struct pa_job j;

	if (!pa_job(p, &j))
		return;
	if (!threadIdx.x)
		s_bad = 0;

	/* q of head r, in this thread's K order; the rest of it in s_qlo */
	cks = pa_chan(p, j, 0);
#pragma unroll
	for (int n = 0; n < S::NQ; n++) {
		int d = pa_kd<HD, KV>(c, n);
		float x = 0.0f;

		if (r < (int)j.nh) {
			x = pa_ldq(p, ((uint64_t)j.seq * p.num_heads + j.h0 +
				       r) * HD + d);
			if (cks)
				x *= cks[d];
		}
		qf[n] = pa_tf32(x);
		if (!warp)
			s_qlo[n][lane] = pa_tf32(x - __uint_as_float(qf[n]));
	}
#pragma unroll
	for (int i = 0; i < S::NM; i++)
		o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;

	for (int k = 0; k < 2; k++)
	for (uint32_t c0 = k ? j.b0 : j.a0, e = k ? j.b1 : j.a1; c0 < e;
	     c0 += PA_CHUNK) {
		uint32_t n = min((uint32_t)PA_CHUNK, e - c0);

		__syncthreads();	/* the last chunk's tiles are done */
		pa_stage(p, j, c0, n, (n + PA_TILE - 1) & ~(PA_TILE - 1),
			 s_base, s_row, &s_bad);
		__syncthreads();
		for (uint32_t tb = warp * PA_TILE; tb < n;
		     tb += PA_WARPS * PA_TILE) {
			uint32_t kr[2][S::KL][4], vr[4][S::VL][S::VW / 4];
			float s[4], ks[2], vs[2], x0, x1, a0, a1, pr[4];

			pa_load_k<HD, KV>(p, s_base, s_row, tb, r, c, kr, ks, vs);
			if constexpr (S::EARLY_V)
				pa_load_v<HD, KV>(p, s_base, s_row, tb, r, c, vr);
			pa_qk<HD, KV>(p, kr, qf, s_qlo, lane, s);

			/* online softmax of heads 2c, 2c + 1 over the tile */
			ks[0] *= qs, ks[1] *= qs;
			s[0] *= ks[0], s[1] *= ks[0];
			s[2] *= ks[1], s[3] *= ks[1];
			if (tb + r >= n)
				s[0] = s[1] = -INFINITY;
			if (tb + r + 8 >= n)
				s[2] = s[3] = -INFINITY;
			x0 = fmaxf(s[0], s[2]);
			x1 = fmaxf(s[1], s[3]);
#pragma unroll
			for (int off = 4; off < 32; off <<= 1) {
				x0 = fmaxf(x0, __shfl_xor_sync(~0u, x0, off));
				x1 = fmaxf(x1, __shfl_xor_sync(~0u, x1, off));
			}
			x0 = fmaxf(m0, x0);	/* finite: a tile has a token */
			x1 = fmaxf(m1, x1);
			a0 = exp2f(m0 - x0);
			a1 = exp2f(m1 - x1);
			m0 = x0, m1 = x1;
			pr[0] = exp2f(s[0] - m0);
			pr[1] = exp2f(s[1] - m1);
			pr[2] = exp2f(s[2] - m0);
			pr[3] = exp2f(s[3] - m1);
			l0 = l0 * a0 + pr[0] + pr[2];
			l1 = l1 * a1 + pr[1] + pr[3];
			/* once the maxima settle they rarely move */
			if (__any_sync(~0u, a0 != 1.0f || a1 != 1.0f))
#pragma unroll
				for (int i = 0; i < S::NM; i++) {
					o[i][0] *= a0, o[i][1] *= a1;
					o[i][2] *= a0, o[i][3] *= a1;
				}

			/* P^T[token][head], V's per-token scale folded in */
			pw[r * PA_HEADS + 2 * c] = pr[0] * vs[0];
			pw[r * PA_HEADS + 2 * c + 1] = pr[1] * vs[0];
			pw[(r + 8) * PA_HEADS + 2 * c] = pr[2] * vs[1];
			pw[(r + 8) * PA_HEADS + 2 * c + 1] = pr[3] * vs[1];
			__syncwarp();
			if constexpr (!S::EARLY_V)
				pa_load_v<HD, KV>(p, s_base, s_row, tb, r, c, vr);
			pa_pv<HD, KV>(vr, pw, r, c, o);
			__syncwarp();	/* pw is read before the next tile */
		}
	}

	/* merge the warps */
#pragma unroll
	for (int off = 4; off < 32; off <<= 1) {
		l0 += __shfl_xor_sync(~0u, l0, off);
		l1 += __shfl_xor_sync(~0u, l1, off);
	}
	if (!r) {
		s_m[warp][2 * c] = m0, s_m[warp][2 * c + 1] = m1;
		s_l[warp][2 * c] = l0, s_l[warp][2 * c + 1] = l1;
	}
#pragma unroll
	for (int i = 0; i < S::NM; i++) {
		int da = pa_vd<HD, KV>(r, 2 * i), db = pa_vd<HD, KV>(r, 2 * i + 1);

		s_o[warp][2 * c][da] = o[i][0];
		s_o[warp][2 * c + 1][da] = o[i][1];
		s_o[warp][2 * c][db] = o[i][2];
		s_o[warp][2 * c + 1][db] = o[i][3];
	}
	__syncthreads();
	pa_finish(p, j, PA_WARPS, &s_m[0][0], &s_l[0][0], &s_o[0][0][0],
		  pa_chan(p, j, 1), vmul, s_bad);
}

/* ---- the generic path: CUDA cores, any head_dim, fp32 KV ---- */

template <int KV>
__device__ static __forceinline__ float pa_ldkv(const uint8_t *row,
						uint32_t d)
{
	if constexpr (KV == KV_DTYPE_FP16)
		return __half2float(((const __half *)row)[d]);
	else if constexpr (KV == KV_DTYPE_BF16)
		return __bfloat162float(((const __nv_bfloat16 *)row)[d]);
	else if constexpr (KV == KV_DTYPE_FP32)
		return ((const float *)row)[d];
	else if constexpr (KV == KV_DTYPE_INT8)
		return (float)(int8_t)row[d];
	else
		return __half2float(__half(__nv_cvt_fp8_to_halfraw(row[d],
								   __NV_E4M3)));
}

/* Dynamic shared memory of pa_generic_kernel for head_dim @hd. */
static size_t pa_generic_smem(uint32_t hd)
{
	return (2 * PA_HEADS * hd + PA_HEADS * PA_GCHUNK + 2 * PA_GCHUNK) *
	       sizeof(float) + PA_GCHUNK * (sizeof(uint64_t) + sizeof(uint32_t));
}

template <int KV>
__global__ void __launch_bounds__(PA_THREADS)
pa_generic_kernel(const struct pa p)
{
	extern __shared__ uint64_t s_dyn[];
	__shared__ float s_m[PA_HEADS], s_l[PA_HEADS], s_a[PA_HEADS];
	__shared__ int s_bad;
	const uint32_t hd = p.hd, rb = hd * p.eb;
	uint64_t *s_base = s_dyn;
	uint32_t *s_row = (uint32_t *)(s_base + PA_GCHUNK);
	float *s_q = (float *)(s_row + PA_GCHUNK);	/* [8][hd] */
	float *s_acc = s_q + PA_HEADS * hd;		/* [8][hd] */
	float *s_pr = s_acc + PA_HEADS * hd;		/* [8][GCHUNK] */
	float *s_ks = s_pr + PA_HEADS * PA_GCHUNK, *s_vs = s_ks + PA_GCHUNK;
	const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	const bool tok = p.quant == KV_QUANT_TOKEN;
	const float *cks;
	struct pa_job j;

	if (!pa_job(p, &j))
		return;
	cks = pa_chan(p, j, 0);
	for (uint32_t i = threadIdx.x; i < PA_HEADS * hd; i += blockDim.x) {
		uint32_t g = i / hd, d = i - g * hd;
		float x = 0.0f;

		if (g < j.nh) {
			x = pa_ldq(p, ((uint64_t)j.seq * p.num_heads + j.h0 +
				       g) * hd + d) * p.qscale;
			if (cks)
				x *= cks[d];
		}
		s_q[i] = x;
		s_acc[i] = 0.0f;
	}
	if (threadIdx.x < PA_HEADS) {
		s_m[threadIdx.x] = -INFINITY;
		s_l[threadIdx.x] = 0.0f;
	}
	if (!threadIdx.x)
		s_bad = 0;

	for (int k = 0; k < 2; k++)
	for (uint32_t c0 = k ? j.b0 : j.a0, e = k ? j.b1 : j.a1; c0 < e;
	     c0 += PA_GCHUNK) {
		uint32_t n = min((uint32_t)PA_GCHUNK, e - c0);

		__syncthreads();
		pa_stage(p, j, c0, n, n, s_base, s_row, &s_bad);
		for (uint32_t i = threadIdx.x; tok && i < n; i += blockDim.x) {
			const uint8_t *b = p.pool + s_base[i];

			s_ks[i] = ((const float *)(b + p.ks_off))[s_row[i]];
			s_vs[i] = ((const float *)(b + p.vs_off))[s_row[i]];
		}
		__syncthreads();

		/* logits: a warp per token */
		for (uint32_t i = warp; i < n; i += PA_WARPS) {
			const uint8_t *k = p.pool + s_base[i] +
					   (uint64_t)s_row[i] * rb;
			float acc[PA_HEADS];

#pragma unroll
			for (int g = 0; g < PA_HEADS; g++)
				acc[g] = 0.0f;
			for (uint32_t d = lane; d < hd; d += 32) {
				float x = pa_ldkv<KV>(k, d);

#pragma unroll
				for (int g = 0; g < PA_HEADS; g++)
					acc[g] += s_q[g * hd + d] * x;
			}
#pragma unroll
			for (int g = 0; g < PA_HEADS; g++)
#pragma unroll
				for (int off = 16; off; off >>= 1)
					acc[g] += __shfl_xor_sync(~0u, acc[g], off);
			if (!lane)
#pragma unroll
				for (int g = 0; g < PA_HEADS; g++)
					s_pr[g * PA_GCHUNK + i] =
						acc[g] * (tok ? s_ks[i] : 1.0f);
		}
		__syncthreads();

		/* softmax: a warp per head */
		for (int g = warp; g < PA_HEADS; g += PA_WARPS) {
			float *pg = s_pr + g * PA_GCHUNK, m = s_m[g];
			float mx = -INFINITY, sum = 0.0f;

			for (uint32_t i = lane; i < n; i += 32)
				mx = fmaxf(mx, pg[i]);
#pragma unroll
			for (int off = 16; off; off >>= 1)
				mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, off));
			mx = fmaxf(mx, m);
			for (uint32_t i = lane; i < n; i += 32) {
				float e = exp2f(pg[i] - mx);

				sum += e;
				pg[i] = e * (tok ? s_vs[i] : 1.0f);
			}
#pragma unroll
			for (int off = 16; off; off >>= 1)
				sum += __shfl_xor_sync(~0u, sum, off);
			if (!lane) {
				s_a[g] = exp2f(m - mx);
				s_l[g] = s_l[g] * s_a[g] + sum;
				s_m[g] = mx;
			}
		}
		__syncthreads();

		/* P.V: a thread per channel */
		for (uint32_t d = threadIdx.x; d < hd; d += blockDim.x) {
			float a[PA_HEADS];

#pragma unroll
			for (int g = 0; g < PA_HEADS; g++)
				a[g] = s_acc[g * hd + d] * s_a[g];
#pragma unroll 4
			for (uint32_t i = 0; i < n; i++) {
				float x = pa_ldkv<KV>(p.pool + s_base[i] + p.v_off +
						      (uint64_t)s_row[i] * rb, d);

#pragma unroll
				for (int g = 0; g < PA_HEADS; g++)
					a[g] += s_pr[g * PA_GCHUNK + i] * x;
			}
#pragma unroll
			for (int g = 0; g < PA_HEADS; g++)
				s_acc[g * hd + d] = a[g];
		}
	}
	__syncthreads();
	pa_finish(p, j, 1, s_m, s_l, s_acc, pa_chan(p, j, 1), 1.0f, s_bad);
}

/*
 * Grid (num_seqs, num_heads): the partitions of one (seq, head) merged,
 * as kv_kernels.h writes it down. An empty partition (m -inf, sum 0)
 * weighs exactly 0; all of them empty: the sequence attends to nothing.
 */
__global__ void __launch_bounds__(PA_THREADS)
pa_reduce_kernel(const struct pa p)
{
	uint64_t row = (uint64_t)blockIdx.x * p.num_heads + blockIdx.y, span;
	uint64_t w0 = row * p.nparts;
	uint32_t ctx = p.lens[blockIdx.x], np = 0, lo, hi;
	float mx = -INFINITY, sum = 0.0f;
	bool live = false;

	if (pa_hole(p, blockIdx.x, ctx, &lo, &hi))
		np = pa_parts(p, ctx, &span);
	if (np < 2)
		return;
	for (uint32_t i = 0; i < np; i++) {
		mx = fmaxf(mx, p.ws_max[w0 + i]);
		live |= p.ws_sum[w0 + i] != 0.0f;	/* NaN (bad) too */
	}
	if (!live) {		/* every partition empty: nothing attended */
		for (uint32_t d = threadIdx.x; d < p.hd; d += blockDim.x)
			pa_store(p, row * p.hd + d, 0.0f);
		return;
	}
	for (uint32_t i = 0; i < np; i++)
		sum += p.ws_sum[w0 + i] *
		       exp2f((p.ws_max[w0 + i] - mx) * PA_LOG2E);
	for (uint32_t d = threadIdx.x; d < p.hd; d += blockDim.x) {
		float acc = 0.0f;

		for (uint32_t i = 0; i < np; i++)
			acc += p.ws_out[(w0 + i) * p.hd + d] * p.ws_sum[w0 + i] *
			       exp2f((p.ws_max[w0 + i] - mx) * PA_LOG2E);
		pa_store(p, row * p.hd + d, __fdividef(acc, sum));
	}
}

/* ---- the launcher ---- */

/*
 * Partitions per (seq, head) the workspace holds, at most @want: the
 * largest P whose kv_decode_ws_layout fits in a->workspace_bytes; 0 if
 * none.
 */
static uint32_t pa_ws_parts(const struct kv_layout *l,
			    const struct kv_decode_args *a, uint32_t part,
			    uint32_t want)
{
	uint32_t lo = 0, hi = want;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo + 1) / 2;
		struct kv_decode_ws w;

		kv_decode_ws_layout(&w, l, a->num_seqs, a->num_heads,
				    mid * part, part);
		if (w.bytes <= a->workspace_bytes)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* The workspace arrays for @nparts partitions. */
static void pa_ws(struct pa *p, const struct kv_layout *l,
		  const struct kv_decode_args *a)
{
	struct kv_decode_ws w;
	uint8_t *ws = (uint8_t *)a->workspace;

	kv_decode_ws_layout(&w, l, a->num_seqs, a->num_heads,
			    p->nparts * p->part, p->part);
	p->ws_max = (float *)ws;
	p->ws_sum = (float *)(ws + w.exp_sums);
	p->ws_out = (float *)(ws + w.tmp_out);
}

template <int HD>
static void pa_launch_mma(const struct pa &p, uint32_t dtype, dim3 grid,
			  cudaStream_t s)
{
	switch (dtype) {
	case KV_DTYPE_FP16:
		pa_mma_kernel<HD, KV_DTYPE_FP16><<<grid, PA_THREADS, 0, s>>>(p);
		break;
	case KV_DTYPE_BF16:
		pa_mma_kernel<HD, KV_DTYPE_BF16><<<grid, PA_THREADS, 0, s>>>(p);
		break;
	case KV_DTYPE_FP8_E4M3:
		pa_mma_kernel<HD, KV_DTYPE_FP8_E4M3><<<grid, PA_THREADS, 0, s>>>(p);
		break;
	default:
		pa_mma_kernel<HD, KV_DTYPE_INT8><<<grid, PA_THREADS, 0, s>>>(p);
		break;
	}
}

template <int KV>
static int pa_launch_generic(const struct pa &p, dim3 grid, cudaStream_t s)
{
	size_t smem = pa_generic_smem(p.hd);

	if (smem > PA_SMEM_DEFAULT &&
	    cudaFuncSetAttribute(pa_generic_kernel<KV>,
				 cudaFuncAttributeMaxDynamicSharedMemorySize,
				 (int)smem) != cudaSuccess)
		return -EIO;
	pa_generic_kernel<KV><<<grid, PA_THREADS, smem, s>>>(p);
	return 0;
}

static int pa_launch(const struct pa &p, const struct kv_layout *l,
		     dim3 grid, cudaStream_t s)
{
	bool mma = l->dtype != KV_DTYPE_FP32;

	if (mma && l->head_dim == 64)
		pa_launch_mma<64>(p, l->dtype, grid, s);
	else if (mma && l->head_dim == 128)
		pa_launch_mma<128>(p, l->dtype, grid, s);
	else if (mma && l->head_dim == 256)
		pa_launch_mma<256>(p, l->dtype, grid, s);
	else if (l->dtype == KV_DTYPE_FP16)
		return pa_launch_generic<KV_DTYPE_FP16>(p, grid, s);
	else if (l->dtype == KV_DTYPE_BF16)
		return pa_launch_generic<KV_DTYPE_BF16>(p, grid, s);
	else if (l->dtype == KV_DTYPE_FP32)
		return pa_launch_generic<KV_DTYPE_FP32>(p, grid, s);
	else if (l->dtype == KV_DTYPE_FP8_E4M3)
		return pa_launch_generic<KV_DTYPE_FP8_E4M3>(p, grid, s);
	else
		return pa_launch_generic<KV_DTYPE_INT8>(p, grid, s);
	return 0;
}

extern "C" int kv_cuda_paged_attention_decode(const struct kv_layout *l,
					      const void *pool,
					      uint64_t pool_bytes,
					      uint32_t layer,
					      const struct kv_decode_args *a,
					      void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	struct pa p = {};
	uint64_t need;
	uint32_t part;
	int ret = kv_check_decode_args(l, pool, layer, a, &part);

	if (ret)
		return ret;
	if (!a->num_seqs)
		return 0;
	if ((uintptr_t)pool % 16 || pool_bytes < l->block_bytes ||
	    a->num_seqs > INT32_MAX || a->num_heads > PA_MAX_Y)
		return -EINVAL;
	p.group = a->num_heads / l->kv_heads;
	p.groups = (p.group + PA_HEADS - 1) / PA_HEADS;
	if ((uint64_t)l->kv_heads * p.groups > PA_MAX_Y)
		return -EINVAL;

	/* partitions of the longest context the tables can carry */
	p.part = part;
	need = ((uint64_t)kv_decode_max_context(l, a->max_blocks_per_seq) +
		part - 1) / part;
	p.nparts = 1;
	if (need > 1) {
		p.nparts = pa_ws_parts(l, a, part,
				       (uint32_t)min(need, (uint64_t)PA_MAX_Y));
		if (!p.nparts || !a->workspace ||
		    (uintptr_t)a->workspace % sizeof(float))
			return -EINVAL;
		pa_ws(&p, l, a);
	}

	p.pool = (const uint8_t *)pool;
	p.q = a->q;
	p.out = a->out;
	p.tables = a->block_tables;
	p.lens = a->context_lens;
	p.sinks = a->sink_lens;
	p.wins = a->window_starts;
	p.block_bytes = l->block_bytes;
	p.layer_off = (uint64_t)layer * l->layer_bytes;
	p.v_off = l->v_off;
	p.ks_off = l->k_scale_off;
	p.vs_off = l->v_scale_off;
	p.nr_blocks = pool_bytes / l->block_bytes;
	p.qscale = a->scale * PA_LOG2E;
	p.qsplit = a->q_dtype == KV_DTYPE_FP32 || l->quant == KV_QUANT_CHANNEL;
	p.max_blocks = a->max_blocks_per_seq;
	p.bt = l->block_tokens;
	p.hd = l->head_dim;
	p.eb = l->elem_bytes;
	p.num_heads = a->num_heads;
	p.quant = l->quant;
	p.qtype = a->q_dtype;

	ret = pa_launch(p, l, dim3(a->num_seqs, l->kv_heads * p.groups,
				   p.nparts), s);
	if (ret)
		return ret;
	if (p.nparts > 1)
		pa_reduce_kernel<<<dim3(a->num_seqs, a->num_heads), PA_THREADS,
				   0, s>>>(p);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}
