// SPDX-License-Identifier: MIT
/*
 * kernels_check: every CUDA kernel (kv_cuda_*) against its C reference
 * (kv_ref_*) on the same random inputs. Prints PASS/FAIL per case group
 * and exits 0 when all pass, 1 otherwise, 77 without a CUDA device.
 *
 *   copy_blocks          exact, pool byte for byte
 *   reshape_and_cache    unquantized: exact; quantized: scales exact, a
 *                        stored value may differ by one quantization step
 *   paged_attention      |gpu - ref| <= tol * (1 + |ref|) per element, tol
 *                        by the output dtype (DEC_TOL_*): the GPU rounds q
 *                        and the probabilities to tf32 (2^-11) and sums in
 *                        another order; the output rounding may differ by
 *                        one unit of fp16 or bf16
 *
 * Decode runs over every KV dtype and quantization scheme, head_dim 64 and
 * 128 (256, 80, 96, 1024 too), GQA 1, 2, 3, 4, 8, 12, 16, 32, contexts of 0 to
 * 8192 tokens with partial last blocks, shuffled block tables, several
 * block and partition sizes, a workspace too small for the longest
 * context, and the device-side errors (NaN rows). With context policies
 * (sink_lens, window_starts) too: the entries of a table wholly masked
 * hold 0xffffffff or a stale id whose block is all-ones bytes (NaN), and
 * so are the masked slots of partly attended blocks, so that a masked
 * row or id read at all shows as NaN in the GPU's output.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "kv_kernels.h"
#define GPU_PROG "kernels_check"
#include "gpu_util.h"

#define DEC_TOL_FP32	2e-3
#define DEC_TOL_FP16	3e-3
#define DEC_TOL_BF16	1.6e-2

static int failures;


/* Uniform in [-a, a). */
static float frand(float a)
{
	return ((float)rnd() / 4294967296.0f * 2.0f - 1.0f) * a;
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		perror("kernels_check: malloc");
		exit(1);
	}
	return p;
}

static void *dmalloc(size_t n)
{
	void *p;

	CK(cudaMalloc(&p, n ? n : 1));
	return p;
}

static void *to_dev(const void *h, size_t n)
{
	void *d = dmalloc(n);

	CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
	return d;
}

static void fill_bytes(void *p, size_t n)
{
	uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)rnd();
}

static void report(int ok, const char *group, const char *detail)
{
	printf("%s  %s: %s\n", ok ? "PASS" : "FAIL", group, detail);
	if (!ok)
		failures++;
}

static void shuffle(uint32_t *a, uint32_t n)
{
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = rnd() % i, t = a[i - 1];

		a[i - 1] = a[j];
		a[j] = t;
	}
}

static const char *dtype_name(uint32_t dtype, uint32_t quant)
{
	static const char *names[] = { "fp16", "bf16", "fp32", "e4m3", "int8" };
	static char buf[4][32];		/* a few per printf */
	static unsigned next;
	char *b = buf[next++ % 4];

	if (!quant)
		return names[dtype];
	snprintf(b, sizeof(buf[0]), "%s/%s", names[dtype],
		 quant == KV_QUANT_TOKEN ? "token" : "channel");
	return b;
}

/* A tensor of @n random values of @dtype (fp16, bf16 or fp32) in [-a, a). */
static void *rand_tensor(uint32_t dtype, uint64_t n, float a)
{
	void *p = xmalloc(n * kv_dtype_bytes(dtype));

	for (uint64_t i = 0; i < n; i++) {
		float x = frand(a);

		if (dtype == KV_DTYPE_FP16)
			((uint16_t *)p)[i] = kv_float_to_half(x);
		else if (dtype == KV_DTYPE_BF16)
			((uint16_t *)p)[i] = kv_float_to_bf16(x);
		else
			((float *)p)[i] = x;
	}
	return p;
}

static int layout(struct kv_layout *l, uint32_t layers, uint32_t kv_heads,
		  uint32_t hd, uint32_t bt, uint32_t dtype, uint32_t quant)
{
	struct kv_geometry g = {
		.layers = layers, .kv_heads = kv_heads, .head_dim = hd,
		.block_tokens = bt, .dtype = dtype, .quant = quant,
	};

	return kv_layout_init(l, &g);
}

/* Static scales of one layer: [2][kv_heads][hd], in [lo, hi). */
static float *rand_scales(const struct kv_layout *l, float lo, float hi)
{
	uint64_t n = (uint64_t)2 * l->kv_heads * l->head_dim;
	float *s = xmalloc(n * sizeof(float));

	for (uint64_t i = 0; i < n; i++)
		s[i] = lo + (hi - lo) * (frand(0.5f) + 0.5f);
	return s;
}

/* ---- copy_blocks ---- */

static void check_copy_blocks(uint64_t bb, uint32_t nblk)
{
	uint32_t npairs = nblk / 2;
	uint64_t bytes = bb * nblk;
	struct kv_block_copy *pairs = xmalloc(npairs * sizeof(*pairs));
	uint8_t *host = xmalloc(bytes), *ref = xmalloc(bytes);
	uint32_t *ids = xmalloc(nblk * sizeof(uint32_t));
	void *dpool, *dpairs;
	char msg[160];
	int ret, ok;

	for (uint32_t i = 0; i < nblk; i++)
		ids[i] = i;
	shuffle(ids, nblk);
	for (uint32_t i = 0; i < npairs; i++) {
		pairs[i].src = ids[2 * i];
		pairs[i].dst = ids[2 * i + 1];
	}
	fill_bytes(host, bytes);
	memcpy(ref, host, bytes);
	ok = kv_ref_copy_blocks(ref, bb, pairs, npairs) == 0;
	dpool = to_dev(host, bytes);
	dpairs = to_dev(pairs, npairs * sizeof(*pairs));
	ret = kv_cuda_copy_blocks(dpool, bb, dpairs, npairs, NULL);
	CK(cudaMemcpy(host, dpool, bytes, cudaMemcpyDeviceToHost));
	ok = ok && !ret && !memcmp(host, ref, bytes);
	snprintf(msg, sizeof(msg), "%u shuffled pairs of %llu-byte blocks (ret %d)",
		 npairs, (unsigned long long)bb, ret);
	report(ok, "copy_blocks", msg);
	CK(cudaFree(dpool));
	CK(cudaFree(dpairs));
	free(pairs);
	free(host);
	free(ref);
	free(ids);
}

static void check_copy_blocks_args(void)
{
	struct kv_block_copy self = { 3, 3 };
	uint8_t *host = xmalloc(4 * 256), *back = xmalloc(4 * 256);
	void *dpool, *dpairs;
	int ok = 1;

	fill_bytes(host, 4 * 256);
	dpool = to_dev(host, 4 * 256);
	dpairs = to_dev(&self, sizeof(self));
	ok &= kv_cuda_copy_blocks(dpool, 256, dpairs, 0, NULL) == 0;
	ok &= kv_cuda_copy_blocks(dpool, 100, dpairs, 1, NULL) == -EINVAL;
	ok &= kv_cuda_copy_blocks(NULL, 256, dpairs, 1, NULL) == -EINVAL;
	ok &= kv_cuda_copy_blocks(dpool, 256, NULL, 1, NULL) == -EINVAL;
	ok &= kv_ref_copy_blocks(host, 256, &self, 1) == -EINVAL;
	/* the device cannot refuse a self-copy: it skips it */
	ok &= kv_cuda_copy_blocks(dpool, 256, dpairs, 1, NULL) == 0;
	CK(cudaMemcpy(back, dpool, 4 * 256, cudaMemcpyDeviceToHost));
	ok &= !memcmp(back, host, 4 * 256);
	report(ok, "copy_blocks", "n = 0, bad sizes, NULL pointers, a self-pair skipped");
	CK(cudaFree(dpool));
	CK(cudaFree(dpairs));
	free(host);
	free(back);
}

/* ---- reshape_and_cache ---- */

/* Stored values a and b at most one quantization step apart. */
static int one_step(uint8_t a, uint8_t b, uint32_t dtype)
{
	if (dtype == KV_DTYPE_INT8)
		return abs((int8_t)a - (int8_t)b) <= 1;
	if (!(a & 0x7f) && !(b & 0x7f))
		return 1;			/* +0 and -0 */
	return (a & 0x80) == (b & 0x80) && abs((a & 0x7f) - (b & 0x7f)) <= 1;
}

/*
 * Bytes of @gpu and @ref that differ: *exact counts those that may not
 * (outside the quantized values of @layer), *step those one step apart,
 * and the return value the rest.
 */
static uint64_t cmp_cache(const struct kv_layout *l, uint32_t layer,
			  const uint8_t *gpu, const uint8_t *ref,
			  uint64_t nblk, uint64_t *step)
{
	uint64_t vals = 2 * l->v_off, bad = 0;

	*step = 0;
	for (uint64_t i = 0; i < nblk * l->block_bytes; i++) {
		uint64_t in = i % l->block_bytes;

		if (gpu[i] == ref[i])
			continue;
		if (l->quant != KV_QUANT_NONE && in / l->layer_bytes == layer &&
		    in % l->layer_bytes < vals &&
		    one_step(gpu[i], ref[i], l->dtype)) {
			(*step)++;
			continue;
		}
		bad++;
	}
	return bad;
}

struct rc_case {
	uint32_t	dtype, quant, src, hd, kv_heads, bt;
	int		misalign;	/* k and v not 16-byte aligned */
};

static void check_reshape(const struct rc_case *c)
{
	const uint32_t layers = 2, layer = 1, nblk = 24;
	struct kv_layout l;
	struct kv_cache_args a = { 0 }, d;
	uint32_t slots, ntok, *perm;
	uint64_t bytes, step, bad, n;
	uint8_t *host, *ref, *kv[2];
	int64_t *map;
	float *scales = NULL;
	void *dpool, *dk, *dv, *dmap, *dsc = NULL;
	char msg[200];
	int ret, rret;

	if (layout(&l, layers, c->kv_heads, c->hd, c->bt, c->dtype, c->quant)) {
		report(0, "reshape_and_cache", "kv_layout_init refused a case");
		return;
	}
	slots = nblk * c->bt;
	ntok = slots * 3 / 4 + 1;
	perm = xmalloc(slots * sizeof(uint32_t));
	for (uint32_t i = 0; i < slots; i++)
		perm[i] = i;
	shuffle(perm, slots);
	map = xmalloc(ntok * sizeof(int64_t));
	for (uint32_t t = 0; t < ntok; t++)
		map[t] = rnd() % 8 ? (int64_t)perm[t] : -1;	/* some skipped */
	n = (uint64_t)ntok * c->kv_heads * c->hd;
	for (int v = 0; v < 2; v++) {
		kv[v] = rand_tensor(c->src, n, v ? 3.0f : 1.0f);
		/* a zero row: scale 1 */
		memset(kv[v], 0, (uint64_t)c->hd * kv_dtype_bytes(c->src));
	}
	if (c->quant == KV_QUANT_CHANNEL)
		scales = rand_scales(&l, 0.002f, 0.02f);
	bytes = nblk * l.block_bytes;
	host = xmalloc(bytes);
	ref = xmalloc(bytes);
	fill_bytes(host, bytes);
	memcpy(ref, host, bytes);

	a.k = kv[0];
	a.v = kv[1];
	a.src_dtype = c->src;
	a.num_tokens = ntok;
	a.slot_mapping = map;
	a.scales = scales;
	rret = kv_ref_reshape_and_cache(&l, ref, layer, &a);

	dpool = to_dev(host, bytes);
	/* misaligned: the tensors start 2 (fp32: 4) bytes into a buffer */
	n *= kv_dtype_bytes(c->src);
	dk = dmalloc(n + 16);
	dv = dmalloc(n + 16);
	d = a;
	d.k = (uint8_t *)dk + (c->misalign ? kv_dtype_bytes(c->src) : 0);
	d.v = (uint8_t *)dv + (c->misalign ? kv_dtype_bytes(c->src) : 0);
	CK(cudaMemcpy((void *)d.k, kv[0], n, cudaMemcpyHostToDevice));
	CK(cudaMemcpy((void *)d.v, kv[1], n, cudaMemcpyHostToDevice));
	dmap = to_dev(map, ntok * sizeof(int64_t));
	d.slot_mapping = dmap;
	if (scales) {
		dsc = to_dev(scales, (uint64_t)2 * l.kv_heads * l.head_dim *
				     sizeof(float));
		d.scales = dsc;
	}
	ret = kv_cuda_reshape_and_cache(&l, dpool, layer, &d, NULL);
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(host, dpool, bytes, cudaMemcpyDeviceToHost));
	bad = cmp_cache(&l, layer, host, ref, nblk, &step);
	snprintf(msg, sizeof(msg),
		 "%s from %s, hd %u, %u kv heads, %u-token blocks%s: %u tokens, "
		 "%llu bytes differ, %llu by one step (ret %d/%d)",
		 dtype_name(c->dtype, c->quant), dtype_name(c->src, 0), c->hd,
		 c->kv_heads, c->bt, c->misalign ? ", misaligned k/v" : "",
		 ntok, (unsigned long long)bad, (unsigned long long)step,
		 ret, rret);
	report(!ret && !rret && !bad, "reshape_and_cache", msg);

	CK(cudaFree(dpool));
	CK(cudaFree(dk));
	CK(cudaFree(dv));
	CK(cudaFree(dmap));
	if (dsc)
		CK(cudaFree(dsc));
	free(perm);
	free(map);
	free(kv[0]);
	free(kv[1]);
	free(scales);
	free(host);
	free(ref);
}

static void check_reshape_args(void)
{
	struct kv_layout l, q;
	struct kv_cache_args a = { 0 };
	int64_t slot = 0;
	float sc = 1.0f;
	void *dpool = dmalloc(1 << 20);
	int ok = 1;

	layout(&l, 2, 2, 64, 16, KV_DTYPE_FP16, KV_QUANT_NONE);
	layout(&q, 2, 2, 64, 16, KV_DTYPE_INT8, KV_QUANT_CHANNEL);
	a.k = a.v = dpool;
	a.src_dtype = KV_DTYPE_FP16;
	a.num_tokens = 1;
	a.slot_mapping = &slot;
	ok &= kv_cuda_reshape_and_cache(&l, dpool, 2, &a, NULL) == -EINVAL;
	ok &= kv_cuda_reshape_and_cache(&l, NULL, 0, &a, NULL) == -EINVAL;
	ok &= kv_cuda_reshape_and_cache(&q, dpool, 0, &a, NULL) == -EINVAL;
	a.src_dtype = KV_DTYPE_BF16;	/* an unquantized cache converts nothing */
	ok &= kv_cuda_reshape_and_cache(&l, dpool, 0, &a, NULL) == -EINVAL;
	a.src_dtype = KV_DTYPE_FP8_E4M3;
	a.scales = &sc;
	ok &= kv_cuda_reshape_and_cache(&q, dpool, 0, &a, NULL) == -EINVAL;
	a.num_tokens = 0;
	a.src_dtype = KV_DTYPE_FP16;
	a.scales = NULL;
	ok &= kv_cuda_reshape_and_cache(&l, dpool, 0, &a, NULL) == 0;
	report(ok, "reshape_and_cache", "bad layer, pool, scales, src dtype; 0 tokens");
	CK(cudaFree(dpool));
}

/* ---- paged_attention_decode ---- */

enum { WS_FULL, WS_SHORT };
enum { BAD_NONE, BAD_BLOCK, BAD_CTX, BAD_SINK, BAD_WINDOW };
/* Context policies: what wholly masked table entries hold. */
enum { POL_NONE, POL_GARBAGE, POL_STALE };

struct dec_case {
	const char	*name;
	uint32_t	dtype, quant, hd, kv_heads, group, bt, qtype, part;
	uint32_t	nseqs;
	const uint32_t	*ctx;		/* NULL: random up to max_ctx */
	uint32_t	max_ctx;
	int		ws;
	int		bad;
	int		policy;		/* POL_*: random sinks and windows */
};

static double dec_tol(uint32_t qtype)
{
	if (qtype == KV_DTYPE_FP16)
		return DEC_TOL_FP16;
	if (qtype == KV_DTYPE_BF16)
		return DEC_TOL_BF16;
	return DEC_TOL_FP32;
}

/*
 * A pool of @nblk blocks whose every slot of every layer holds random K and
 * V written by the C reference (finite, quantized as the layout says).
 */
static uint8_t *make_pool(const struct kv_layout *l, uint32_t nblk)
{
	uint32_t src = l->quant ? KV_DTYPE_FP32 : l->dtype;
	uint32_t ntok = nblk * l->block_tokens;
	uint64_t n = (uint64_t)ntok * l->kv_heads * l->head_dim;
	uint8_t *pool = xmalloc(nblk * l->block_bytes);
	int64_t *map = xmalloc(ntok * sizeof(int64_t));
	struct kv_cache_args a = { 0 };
	void *k, *v;

	memset(pool, 0, nblk * l->block_bytes);
	for (uint32_t t = 0; t < ntok; t++)
		map[t] = t;
	for (uint32_t layer = 0; layer < l->layers; layer++) {
		float *sc = NULL;

		/* tokens of very different sizes: per-token scales vary */
		k = rand_tensor(src, n, 1.0f + (float)(rnd() % 4));
		v = rand_tensor(src, n, 2.0f);
		if (l->quant == KV_QUANT_CHANNEL)
			sc = rand_scales(l, 0.004f, 0.02f);
		a.k = k;
		a.v = v;
		a.src_dtype = src;
		a.num_tokens = ntok;
		a.slot_mapping = map;
		a.scales = sc;
		if (kv_ref_reshape_and_cache(l, pool, layer, &a)) {
			fprintf(stderr, "kernels_check: reference write failed\n");
			exit(1);
		}
		free(k);
		free(v);
		free(sc);
	}
	free(map);
	return pool;
}

/* Table-space token @t under (@sink, @ws): masked? */
static int pol_masked(uint32_t sink, uint32_t ws, uint32_t t)
{
	return ws > sink && t >= sink && t < ws;
}

/*
 * A sink length and window start for a context of @ctx tokens, with the
 * edges likely: a window under a block, one that starts a token before
 * or after a block edge, sinks and window in one block, a hole over many
 * partitions, nothing attended, sinks only, wstart <= sink.
 */
static void pick_policy(uint32_t ctx, uint32_t bt, uint32_t *sink,
			uint32_t *ws)
{
	uint32_t k = ctx / bt ? rnd() % (ctx / bt) : 0;

	*sink = 0;
	*ws = 0;
	switch (rnd() % 9) {
	case 0:
		break;
	case 1:
		*ws = ctx - rnd() % (bt < ctx ? bt : ctx + 1);
		break;
	case 2:
		*sink = rnd() % (bt + 5);
		*ws = ctx - rnd() % (ctx + 1) / 4;
		break;
	case 3:
		*sink = k * bt + 1;
		*ws = k * bt + bt - 1;
		break;
	case 4:
		*sink = 4;
		*ws = (k + 1) * bt + rnd() % 3 - 1;	/* an edge, +-1 */
		break;
	case 5:
		*ws = ctx;
		break;
	case 6:
		*sink = rnd() % (2 * bt + 1);
		*ws = ctx;
		break;
	case 7:
		*sink = ctx / 2 + 1;
		*ws = ctx / 3;
		break;
	default:
		*sink = 1 + rnd() % 8;
		*ws = ctx - ctx / 8;
		break;
	}
	if (*sink > ctx)
		*sink = ctx;
	if (*ws > ctx)
		*ws = ctx;
}

/* All-ones bytes over slot @slot's K and V rows (and token scales). */
static void poison_slot(const struct kv_layout *l, uint8_t *blk,
			uint32_t layer, uint32_t slot)
{
	for (int v = 0; v < 2; v++)
		for (uint32_t h = 0; h < l->kv_heads; h++) {
			memset(blk + kv_layout_vec_off(l, layer, v, h, slot),
			       0xff, (size_t)l->head_dim * l->elem_bytes);
			if (l->quant == KV_QUANT_TOKEN)
				memset(blk + kv_layout_scale_off(l, layer, v) +
				       ((uint64_t)h * l->block_tokens + slot) * 4,
				       0xff, 4);
		}
}

/*
 * One sequence's table row and blocks under (@sink, @ws): an entry
 * wholly masked gets 0xffffffff or the id @stale, the masked slots of
 * the others all-ones bytes.
 */
static void apply_policy(const struct kv_layout *l, uint8_t *pool,
			 uint32_t layer, uint32_t *tbl, uint32_t ctx,
			 uint32_t sink, uint32_t ws, int policy,
			 uint32_t stale)
{
	uint32_t bt = l->block_tokens;

	for (uint32_t i = 0; i * bt < ctx; i++) {
		uint32_t t1 = ctx - i * bt < bt ? ctx : (i + 1) * bt, n = 0;

		for (uint32_t t = i * bt; t < t1; t++)
			n += !pol_masked(sink, ws, t);
		if (!n) {
			tbl[i] = policy == POL_GARBAGE ? 0xffffffffu : stale;
			continue;
		}
		for (uint32_t t = i * bt; t < t1; t++)
			if (pol_masked(sink, ws, t))
				poison_slot(l, pool + (uint64_t)tbl[i] *
					    l->block_bytes, layer, t % bt);
	}
}

static void check_decode(const struct dec_case *c)
{
	const uint32_t layer = 1;
	struct kv_layout l;
	struct kv_decode_args a = { 0 }, d;
	uint32_t heads = c->kv_heads * c->group, nblk = 0, maxb = 0, next = 0;
	uint32_t *ctx = xmalloc(c->nseqs * sizeof(uint32_t)), *ids, *tables;
	uint32_t *sinks = NULL, *wins = NULL, masked = 0, none = 0;
	uint32_t maxc = 0, part, fails = 0, nans = 0, qb = kv_dtype_bytes(c->qtype);
	uint64_t nout = (uint64_t)c->nseqs * heads * c->hd;
	double tol = dec_tol(c->qtype), worst = 0;
	void *q, *dpool, *dq, *dout, *dtab, *dctx, *dws = NULL;
	void *dsinks = NULL, *dwins = NULL;
	uint8_t *pool, *out_ref, *out;
	uint64_t pool_bytes;
	char msg[320], pol[80];
	int ret, rret;

	if (layout(&l, 2, c->kv_heads, c->hd, c->bt, c->dtype, c->quant)) {
		report(0, c->name, "kv_layout_init refused the case");
		return;
	}
	for (uint32_t s = 0; s < c->nseqs; s++) {
		ctx[s] = c->ctx ? c->ctx[s] : rnd() % (c->max_ctx + 1);
		nblk += (ctx[s] + c->bt - 1) / c->bt;
		if ((ctx[s] + c->bt - 1) / c->bt > maxb)
			maxb = (ctx[s] + c->bt - 1) / c->bt;
		if (ctx[s] > maxc)
			maxc = ctx[s];
	}
	maxb += 2;		/* table rows longer than any context */
	nblk += 3;		/* blocks no sequence uses */
	ids = xmalloc(nblk * sizeof(uint32_t));
	for (uint32_t i = 0; i < nblk; i++)
		ids[i] = i;
	shuffle(ids, nblk);
	tables = xmalloc((uint64_t)c->nseqs * maxb * sizeof(uint32_t));
	for (uint32_t s = 0; s < c->nseqs; s++)
		for (uint32_t b = 0; b < maxb; b++)
			tables[(uint64_t)s * maxb + b] =
				b < (ctx[s] + c->bt - 1) / c->bt ? ids[next++] :
				0xffffffffu;	/* never read */
	pool = make_pool(&l, nblk);
	pool_bytes = nblk * l.block_bytes;
	if (c->policy != POL_NONE) {
		/* ids[nblk - 1]: no sequence's, the stale entries' NaN block */
		memset(pool + (uint64_t)ids[nblk - 1] * l.block_bytes, 0xff,
		       l.block_bytes);
		sinks = xmalloc(c->nseqs * sizeof(uint32_t));
		wins = xmalloc(c->nseqs * sizeof(uint32_t));
		for (uint32_t s = 0; s < c->nseqs; s++) {
			uint32_t kept = ctx[s];

			pick_policy(ctx[s], c->bt, &sinks[s], &wins[s]);
			apply_policy(&l, pool, layer, tables + (uint64_t)s * maxb,
				     ctx[s], sinks[s], wins[s], c->policy,
				     ids[nblk - 1]);
			if (wins[s] > sinks[s])
				kept -= wins[s] - sinks[s];
			masked += kept < ctx[s];
			none += ctx[s] && !kept;
		}
	}
	q = rand_tensor(c->qtype, nout, 2.0f);
	out_ref = xmalloc(nout * qb);
	out = xmalloc(nout * qb);

	a.q = q;
	a.out = out_ref;
	a.q_dtype = c->qtype;
	a.num_seqs = c->nseqs;
	a.num_heads = heads;
	a.max_blocks_per_seq = maxb;
	a.block_tables = tables;
	a.context_lens = ctx;
	a.scale = 1.0f / sqrtf((float)c->hd);
	a.partition_tokens = c->part;
	a.sink_lens = sinks;
	a.window_starts = wins;
	rret = kv_ref_paged_attention_decode(&l, pool, pool_bytes, layer, &a);

	/* device-side errors: the reference refuses, the GPU writes NaN rows */
	if (c->bad == BAD_BLOCK)
		tables[0] = nblk + 5;
	if (c->bad == BAD_CTX)
		ctx[0] = maxb * c->bt + 1;
	if (c->bad == BAD_SINK)
		sinks[0] = ctx[0] + 1;
	if (c->bad == BAD_WINDOW)
		wins[0] = ctx[0] + 1;

	dpool = to_dev(pool, pool_bytes);
	dq = to_dev(q, nout * qb);
	dout = dmalloc(nout * qb);
	CK(cudaMemset(dout, 0xff, nout * qb));	/* NaN: all must be written */
	dtab = to_dev(tables, (uint64_t)c->nseqs * maxb * sizeof(uint32_t));
	dctx = to_dev(ctx, c->nseqs * sizeof(uint32_t));
	d = a;
	d.q = dq;
	d.out = dout;
	d.block_tables = dtab;
	d.context_lens = dctx;
	if (sinks) {
		d.sink_lens = dsinks = to_dev(sinks, c->nseqs * sizeof(uint32_t));
		d.window_starts = dwins = to_dev(wins, c->nseqs * sizeof(uint32_t));
	}
	kv_check_decode_args(&l, dpool, layer, &d, &part);
	d.workspace_bytes = kv_decode_workspace_bytes(&l, c->nseqs, heads,
			c->ws == WS_SHORT ? maxc / 3 + 1 :
			kv_decode_max_context(&l, maxb), c->part);
	if (d.workspace_bytes)
		d.workspace = dws = dmalloc(d.workspace_bytes);
	ret = kv_cuda_paged_attention_decode(&l, dpool, pool_bytes, layer, &d,
					     NULL);
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(out, dout, nout * qb, cudaMemcpyDeviceToHost));

	for (uint64_t i = 0; i < nout; i++) {
		float g = __kv_load(out, c->qtype, i);
		float r = __kv_load(out_ref, c->qtype, i);
		double e = fabs((double)g - r) / (1.0 + fabs(r));
		int bad_row = c->bad != BAD_NONE && i < (uint64_t)heads * c->hd;

		if (bad_row) {
			nans += isnan(g) != 0;
			continue;
		}
		if (!(e <= tol)) {
			if (fails++ < 3)
				printf("  %s: out[%llu] (seq %llu) gpu %g ref %g\n",
					c->name, (unsigned long long)i,
					(unsigned long long)(i / ((uint64_t)heads * c->hd)),
					g, r);
		}
		if (e > worst || e != e)
			worst = e;
	}
	if (c->bad != BAD_NONE && nans != heads * c->hd)
		fails++;
	snprintf(pol, sizeof(pol), ", %u masked (%u none kept), dropped "
		 "entries %s", masked, none,
		 c->policy == POL_GARBAGE ? "0xffffffff" : "stale");
	snprintf(msg, sizeof(msg),
		 "%s hd %u, G %u x %u kv heads, q %s, %u-token blocks, partition %u%s, "
		 "%u seqs up to %u tokens%s: max err %.2g (tol %.2g)%s (ret %d/%d)",
		 dtype_name(c->dtype, c->quant), c->hd, c->group, c->kv_heads,
		 dtype_name(c->qtype, 0), c->bt, part,
		 c->ws == WS_SHORT ? ", short workspace" : "", c->nseqs, maxc,
		 c->policy != POL_NONE ? pol : "", worst, tol,
		 c->bad == BAD_BLOCK ? ", bad block id: NaN row" :
		 c->bad == BAD_CTX ? ", context past its table: NaN row" :
		 c->bad == BAD_SINK ? ", sink past its context: NaN row" :
		 c->bad == BAD_WINDOW ? ", window past its context: NaN row" : "",
		 ret, rret);
	report(!ret && !rret && !fails, c->name, msg);

	CK(cudaFree(dpool));
	CK(cudaFree(dq));
	CK(cudaFree(dout));
	CK(cudaFree(dtab));
	CK(cudaFree(dctx));
	if (dws)
		CK(cudaFree(dws));
	if (dsinks) {
		CK(cudaFree(dsinks));
		CK(cudaFree(dwins));
	}
	free(sinks);
	free(wins);
	free(ctx);
	free(ids);
	free(tables);
	free(pool);
	free(q);
	free(out_ref);
	free(out);
}

static void check_decode_args(void)
{
	struct kv_layout l;
	struct kv_decode_args a = { 0 };
	uint32_t len = 16, tbl = 0, qbuf[256] = { 0 };
	void *dpool = dmalloc(1 << 20), *dws = dmalloc(4096), *dtab, *dlen;
	int ok = 1;

	layout(&l, 1, 2, 64, 16, KV_DTYPE_FP16, KV_QUANT_NONE);
	dtab = to_dev(&tbl, sizeof(tbl));
	dlen = to_dev(&len, sizeof(len));
	a.q = a.out = dws;
	a.q_dtype = KV_DTYPE_FP16;
	a.num_seqs = 1;
	a.num_heads = 4;
	a.max_blocks_per_seq = 1;
	a.block_tables = dtab;
	a.context_lens = dlen;
	a.scale = 0.125f;
	ok &= kv_cuda_paged_attention_decode(&l, dpool, 1 << 20, 0, &a, NULL) == 0;
	CK(cudaDeviceSynchronize());
	a.num_heads = 3;
	ok &= kv_cuda_paged_attention_decode(&l, dpool, 1 << 20, 0, &a, NULL) == -EINVAL;
	a.num_heads = 4;
	a.q_dtype = KV_DTYPE_INT8;
	ok &= kv_cuda_paged_attention_decode(&l, dpool, 1 << 20, 0, &a, NULL) == -EINVAL;
	a.q_dtype = KV_DTYPE_FP16;
	ok &= kv_cuda_paged_attention_decode(&l, dpool, 1 << 20, 1, &a, NULL) == -EINVAL;
	a.partition_tokens = 24;
	ok &= kv_cuda_paged_attention_decode(&l, dpool, 1 << 20, 0, &a, NULL) == -EINVAL;
	a.partition_tokens = 0;
	a.scale = NAN;
	ok &= kv_cuda_paged_attention_decode(&l, dpool, 1 << 20, 0, &a, NULL) == -EINVAL;
	a.scale = 0.125f;
	ok &= kv_cuda_paged_attention_decode(&l, dpool, 100, 0, &a, NULL) == -EINVAL;
	/* tables of 64 blocks: 2 partitions, and no workspace */
	a.max_blocks_per_seq = 64;
	ok &= kv_cuda_paged_attention_decode(&l, dpool, 1 << 20, 0, &a, NULL) == -EINVAL;
	a.workspace = dws;
	a.workspace_bytes = 4;
	ok &= kv_cuda_paged_attention_decode(&l, dpool, 1 << 20, 0, &a, NULL) == -EINVAL;
	a.q = NULL;
	ok &= kv_cuda_paged_attention_decode(&l, dpool, 1 << 20, 0, &a, NULL) == -EINVAL;
	a.q = qbuf;
	a.num_seqs = 0;
	ok &= kv_cuda_paged_attention_decode(&l, dpool, 1 << 20, 0, &a, NULL) == 0;
	report(ok, "paged_attention_decode",
	       "GQA not dividing, q dtype, layer, partition, scale, pool, workspace, NULL q");
	CK(cudaFree(dpool));
	CK(cudaFree(dws));
	CK(cudaFree(dtab));
	CK(cudaFree(dlen));
}

static const struct {
	uint32_t dtype, quant;
} kinds[] = {
	{ KV_DTYPE_FP16, KV_QUANT_NONE },
	{ KV_DTYPE_BF16, KV_QUANT_NONE },
	{ KV_DTYPE_FP32, KV_QUANT_NONE },
	{ KV_DTYPE_FP8_E4M3, KV_QUANT_TOKEN },
	{ KV_DTYPE_FP8_E4M3, KV_QUANT_CHANNEL },
	{ KV_DTYPE_INT8, KV_QUANT_TOKEN },
	{ KV_DTYPE_INT8, KV_QUANT_CHANNEL },
};

#define NKINDS	(sizeof(kinds) / sizeof(kinds[0]))

static void run_reshape(void)
{
	static const uint32_t srcs[] = { KV_DTYPE_FP16, KV_DTYPE_BF16, KV_DTYPE_FP32 };
	unsigned i = 0;

	for (unsigned k = 0; k < NKINDS; k++)
		for (uint32_t hd = 64; hd <= 128; hd *= 2)
			for (uint32_t kvh = 1; kvh <= 4; kvh *= 4) {
				struct rc_case c = {
					.dtype = kinds[k].dtype,
					.quant = kinds[k].quant,
					.src = kinds[k].quant ? srcs[i % 3] :
							       kinds[k].dtype,
					.hd = hd, .kv_heads = kvh,
					.bt = i % 3 ? 16 : 7,
					.misalign = i % 4 == 3,
				};

				check_reshape(&c);
				i++;
			}
	for (unsigned k = 0; k < NKINDS; k++) {
		/* head_dim 72 and 1024: odd vector counts, several per lane */
		struct rc_case c = {
			.dtype = kinds[k].dtype, .quant = kinds[k].quant,
			.src = kinds[k].quant ? KV_DTYPE_BF16 : kinds[k].dtype,
			.hd = k % 2 ? 72 : 1024, .kv_heads = 3, .bt = 16,
		};

		check_reshape(&c);
	}
	check_reshape_args();
}

/*
 * Context policies: every kind, head_dim 64 and 128 (mma) and 96 (the
 * generic path), GQA 1, 4, 8 and 12, 16-token and odd blocks, partitions
 * of one block (many wholly masked) to the default, a short workspace,
 * and sinks or windows past their contexts (NaN rows).
 */
static void run_decode_policies(void)
{
	static const uint32_t qtypes[] = { KV_DTYPE_FP16, KV_DTYPE_BF16, KV_DTYPE_FP32 };
	static const uint32_t gqa[] = { 1, 4, 8, 12 }, parts[] = { 16, 64, 0 };
	static const uint32_t some[] = { 0, 1, 16, 17, 31, 512, 513, 2000 };
	unsigned i = 0;

	for (unsigned k = 0; k < NKINDS; k++)
		for (int pol = POL_GARBAGE; pol <= POL_STALE; pol++) {
			struct dec_case c = {
				.name = "paged_attention_decode (policy)",
				.dtype = kinds[k].dtype,
				.quant = kinds[k].quant,
				.hd = i % 2 ? 128 : 64, .group = gqa[i % 4],
				.kv_heads = gqa[i % 4] == 1 ? 4 : 2,
				.bt = 16, .qtype = qtypes[i % 3],
				.part = parts[i % 3], .nseqs = 12,
				.max_ctx = 3000, .policy = pol,
			};

			check_decode(&c);
			i++;
		}
	{
		struct dec_case c[] = {
			{ .name = "paged_attention_decode (policy)",
			  .dtype = KV_DTYPE_BF16, .hd = 96, .group = 4,
			  .kv_heads = 2, .bt = 16, .qtype = KV_DTYPE_BF16,
			  .part = 32, .nseqs = 8, .max_ctx = 2500,
			  .policy = POL_STALE },
			{ .name = "paged_attention_decode (policy)",
			  .dtype = KV_DTYPE_FP8_E4M3, .quant = KV_QUANT_CHANNEL,
			  .hd = 128, .group = 8, .kv_heads = 1, .bt = 5,
			  .qtype = KV_DTYPE_FP16, .part = 5, .nseqs = 8,
			  .max_ctx = 1200, .policy = POL_GARBAGE },
			{ .name = "paged_attention_decode (policy)",
			  .dtype = KV_DTYPE_INT8, .quant = KV_QUANT_TOKEN,
			  .hd = 64, .group = 4, .kv_heads = 2, .bt = 48,
			  .qtype = KV_DTYPE_FP32, .nseqs = 8, .max_ctx = 4000,
			  .policy = POL_STALE },
			{ .name = "paged_attention_decode (policy)",
			  .dtype = KV_DTYPE_FP16, .hd = 128, .group = 4,
			  .kv_heads = 2, .bt = 16, .qtype = KV_DTYPE_FP16,
			  .nseqs = 8, .ctx = some, .policy = POL_GARBAGE },
			{ .name = "paged_attention_decode (policy)",
			  .dtype = KV_DTYPE_FP8_E4M3, .quant = KV_QUANT_TOKEN,
			  .hd = 128, .group = 4, .kv_heads = 2, .bt = 16,
			  .qtype = KV_DTYPE_BF16, .part = 16, .nseqs = 6,
			  .max_ctx = 8192, .ws = WS_SHORT, .policy = POL_STALE },
			{ .name = "paged_attention_decode (policy, device errors)",
			  .dtype = KV_DTYPE_FP16, .hd = 128, .group = 4,
			  .kv_heads = 2, .bt = 16, .qtype = KV_DTYPE_FP16,
			  .part = 64, .nseqs = 4, .max_ctx = 2000,
			  .policy = POL_GARBAGE, .bad = BAD_SINK },
			{ .name = "paged_attention_decode (policy, device errors)",
			  .dtype = KV_DTYPE_INT8, .quant = KV_QUANT_CHANNEL,
			  .hd = 64, .group = 8, .kv_heads = 1, .bt = 16,
			  .qtype = KV_DTYPE_BF16, .nseqs = 4, .max_ctx = 300,
			  .policy = POL_STALE, .bad = BAD_WINDOW },
		};

		for (unsigned k = 0; k < sizeof(c) / sizeof(c[0]); k++)
			check_decode(&c[k]);
	}
}

static void run_decode(void)
{
	static const uint32_t mixed[] = {
		1, 15, 16, 17, 100, 511, 512, 513, 1000, 2049, 8192,
	};
	static const uint32_t some[] = { 0, 1, 31, 700, 0, 4095, 33 };
	static const uint32_t qtypes[] = { KV_DTYPE_FP16, KV_DTYPE_BF16, KV_DTYPE_FP32 };
	static const uint32_t gqa[] = { 1, 4, 8 };
	unsigned i = 0;

	/* every kind x head_dim 64, 128 x GQA 1, 4, 8 */
	for (unsigned k = 0; k < NKINDS; k++)
		for (uint32_t hd = 64; hd <= 128; hd *= 2)
			for (unsigned g = 0; g < 3; g++) {
				struct dec_case c = {
					.name = "paged_attention_decode",
					.dtype = kinds[k].dtype,
					.quant = kinds[k].quant,
					.hd = hd, .group = gqa[g],
					.kv_heads = gqa[g] == 1 ? 4 : 2,
					.bt = 16, .qtype = qtypes[i % 3],
					.nseqs = i % 2 ? 11 : 9,
					.ctx = i % 2 ? mixed : NULL,
					.max_ctx = 3000,
				};

				check_decode(&c);
				i++;
			}

	/* head_dim 256 (mma) and 80, 96 (generic), fp32 q */
	for (unsigned k = 0; k < NKINDS; k++) {
		struct dec_case c = {
			.name = "paged_attention_decode (head_dim)",
			.dtype = kinds[k].dtype, .quant = kinds[k].quant,
			.hd = k % 3 == 0 ? 256 : k % 3 == 1 ? 96 : 80,
			.group = 4, .kv_heads = 2, .bt = 16,
			.qtype = qtypes[k % 3], .nseqs = 5, .max_ctx = 2500,
		};

		if (c.hd == 80 && kinds[k].dtype == KV_DTYPE_FP8_E4M3)
			c.hd = 96;
		check_decode(&c);
	}
	{
		/* 68 KiB of shared memory: past the 48 KiB default */
		struct dec_case c = {
			.name = "paged_attention_decode (head_dim)",
			.dtype = KV_DTYPE_FP16, .hd = 1024, .group = 3,
			.kv_heads = 2, .bt = 16, .qtype = KV_DTYPE_FP16,
			.nseqs = 3, .max_ctx = 1500,
		};

		check_decode(&c);
	}

	/* block and partition sizes: 1, 8, 32, 48 tokens; 16..8192 partitions */
	{
		static const uint32_t bts[][2] = {
			{ 8, 64 }, { 32, 0 }, { 48, 0 }, { 1, 16 }, { 16, 8192 },
			{ 16, 16 }, { 64, 128 },
		};

		for (unsigned b = 0; b < sizeof(bts) / sizeof(bts[0]); b++) {
			struct dec_case c = {
				.name = "paged_attention_decode (blocks)",
				.dtype = b % 2 ? KV_DTYPE_BF16 : KV_DTYPE_FP8_E4M3,
				.quant = b % 2 ? KV_QUANT_NONE : KV_QUANT_TOKEN,
				.hd = 128, .group = 4, .kv_heads = 2,
				.bt = bts[b][0], .part = bts[b][1],
				.qtype = KV_DTYPE_BF16, .nseqs = 6,
				.max_ctx = bts[b][0] == 1 ? 900 : 5000,
			};

			check_decode(&c);
		}
	}

	/* GQA 2, 3, 12 (a partial second head group), 16; MQA */
	{
		static const uint32_t g2[][2] = { { 2, 4 }, { 3, 2 }, { 12, 2 },
						  { 16, 1 }, { 32, 1 } };

		for (unsigned g = 0; g < sizeof(g2) / sizeof(g2[0]); g++) {
			struct dec_case c = {
				.name = "paged_attention_decode (GQA)",
				.dtype = g % 2 ? KV_DTYPE_INT8 : KV_DTYPE_FP16,
				.quant = g % 2 ? KV_QUANT_CHANNEL : KV_QUANT_NONE,
				.hd = 64 << (g % 2), .group = g2[g][0],
				.kv_heads = g2[g][1], .bt = 16,
				.qtype = KV_DTYPE_FP16, .nseqs = 5, .max_ctx = 3000,
			};

			check_decode(&c);
		}
	}

	/* empty contexts, a workspace for a third of the longest, big batch */
	{
		struct dec_case c[] = {
			{ .name = "paged_attention_decode (edges)",
			  .dtype = KV_DTYPE_FP16, .hd = 128, .group = 8,
			  .kv_heads = 1, .bt = 16, .qtype = KV_DTYPE_FP16,
			  .nseqs = 7, .ctx = some },
			{ .name = "paged_attention_decode (edges)",
			  .dtype = KV_DTYPE_FP8_E4M3, .quant = KV_QUANT_TOKEN,
			  .hd = 128, .group = 4, .kv_heads = 2, .bt = 16,
			  .qtype = KV_DTYPE_BF16, .nseqs = 6, .max_ctx = 8192,
			  .ws = WS_SHORT },
			{ .name = "paged_attention_decode (edges)",
			  .dtype = KV_DTYPE_BF16, .hd = 96, .group = 4,
			  .kv_heads = 2, .bt = 16, .qtype = KV_DTYPE_FP32,
			  .part = 64, .nseqs = 4, .max_ctx = 3000,
			  .ws = WS_SHORT },
			{ .name = "paged_attention_decode (edges)",
			  .dtype = KV_DTYPE_FP16, .hd = 128, .group = 4,
			  .kv_heads = 8, .bt = 16, .qtype = KV_DTYPE_FP16,
			  .nseqs = 96, .max_ctx = 300 },
			{ .name = "paged_attention_decode (device errors)",
			  .dtype = KV_DTYPE_FP16, .hd = 128, .group = 4,
			  .kv_heads = 2, .bt = 16, .qtype = KV_DTYPE_FP16,
			  .nseqs = 4, .ctx = mixed + 4, .bad = BAD_BLOCK },
			{ .name = "paged_attention_decode (device errors)",
			  .dtype = KV_DTYPE_INT8, .quant = KV_QUANT_TOKEN,
			  .hd = 64, .group = 8, .kv_heads = 1, .bt = 16,
			  .qtype = KV_DTYPE_BF16, .nseqs = 4, .ctx = mixed + 5,
			  .bad = BAD_CTX },
		};

		for (unsigned k = 0; k < sizeof(c) / sizeof(c[0]); k++)
			check_decode(&c[k]);
	}
	run_decode_policies();
	check_decode_args();
}

int main(void)
{
	int ndev = 0;

	rng = 0x9e3779b97f4a7c15ull;
	setvbuf(stdout, NULL, _IOLBF, 0);	/* in order with stderr */
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || !ndev) {
		printf("kernels_check: no CUDA device, skipped\n");
		return 77;
	}
	check_copy_blocks(256, 64);
	check_copy_blocks(32 << 10, 256);
	check_copy_blocks((1 << 20) + 48, 10);	/* slices with a tail */
	check_copy_blocks_args();
	run_reshape();
	run_decode();
	printf("kernels_check: %d failed\n", failures);
	return failures ? 1 : 0;
}
