// SPDX-License-Identifier: MIT
/*
 * decode_bench: achieved memory bandwidth of kv_cuda_paged_attention_decode
 * as a percentage of the device's peak, for batches of 1 to 256 sequences
 * and contexts of 512 to 32768 tokens, fp16 KV and e4m3 KV with per-token
 * scales. One table; about a minute on an H200. Exits 77 without a CUDA
 * device, 1 if a launch fails.
 *
 * Model: 32 query heads on 8 kv heads (GQA 4, as Llama-3-8B), head_dim
 * 128, 16-token blocks, fp16 q and out, default partitions; one layer of
 * a pool whose blocks are handed out in shuffled order.
 *
 * Bytes: the K and V values (and scales) of every context token, plus q
 * and out; block tables and the workspace are not counted. Time: CUDA
 * events around one launch (decode + reduce), the L2 flushed before each,
 * median of the runs. Peak: 2 (double data rate) x memory clock x bus
 * width, from cudaDeviceGetAttribute (cudaDeviceProp lost those fields in
 * CUDA 13), or --peak-gbs.
 *
 *   decode_bench [--peak-gbs GBS] [--runs N] [--quick]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>

#include "kv_kernels.h"
#define GPU_PROG "decode_bench"
#include "gpu_util.h"

#define KV_HEADS	8
#define GQA		4
#define HEAD_DIM	128
#define BLOCK_TOKENS	16
#define FILL_TOKENS	65536		/* source rows per reshape_and_cache */
#define FLUSH_BYTES	(512ull << 20)	/* > L2 */



static void *xmalloc(size_t n)
{
	void *p = malloc(n);

	if (!p) {
		perror("decode_bench: malloc");
		exit(1);
	}
	return p;
}

static void *dmalloc(size_t n)
{
	void *p;

	CK(cudaMalloc(&p, n));
	return p;
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return (x > y) - (x < y);
}

/* Peak bandwidth in GB/s; @how says where it came from. 0 if unknown. */
static double peak_gbs(int dev, double forced, char *how, size_t len)
{
	int clk = 0, bus = 0;

	if (forced > 0) {
		snprintf(how, len, "--peak-gbs");
		return forced;
	}
	if (cudaDeviceGetAttribute(&clk, cudaDevAttrMemoryClockRate, dev) ||
	    cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, dev) ||
	    clk <= 0 || bus <= 0) {
		snprintf(how, len, "unknown: pass --peak-gbs");
		return 0;
	}
	snprintf(how, len, "device attributes: 2 x %d MHz x %d-bit bus",
		 clk / 1000, bus);
	return 2.0 * clk * 1e3 * bus / 8 / 1e9;
}

/* Every slot of @nblk blocks written with random K and V, fp16 source. */
static void fill_pool(const struct kv_layout *l, void *pool, uint32_t nblk)
{
	uint64_t rows = (uint64_t)FILL_TOKENS * l->kv_heads * l->head_dim;
	uint64_t slots = (uint64_t)nblk * l->block_tokens;
	uint16_t *h = xmalloc(rows * 2);
	int64_t *map = xmalloc(FILL_TOKENS * sizeof(int64_t));
	void *dk = dmalloc(rows * 2), *dv = dmalloc(rows * 2);
	void *dmap = dmalloc(FILL_TOKENS * sizeof(int64_t));
	struct kv_cache_args a = { 0 };

	for (uint64_t i = 0; i < rows; i++)
		h[i] = kv_float_to_half(((float)(rnd() % 2001) - 1000.0f) / 500.0f);
	CK(cudaMemcpy(dk, h, rows * 2, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(dv, h, rows * 2, cudaMemcpyHostToDevice));
	a.k = dk;
	a.v = dv;
	a.src_dtype = KV_DTYPE_FP16;
	a.slot_mapping = dmap;
	for (uint64_t s0 = 0; s0 < slots; s0 += FILL_TOKENS) {
		uint32_t n = slots - s0 < FILL_TOKENS ? (uint32_t)(slots - s0) :
						       FILL_TOKENS;

		for (uint32_t t = 0; t < n; t++)
			map[t] = (int64_t)(s0 + t);
		CK(cudaMemcpy(dmap, map, n * sizeof(int64_t),
			      cudaMemcpyHostToDevice));
		a.num_tokens = n;
		if (kv_cuda_reshape_and_cache(l, pool, 0, &a, NULL)) {
			fprintf(stderr, "decode_bench: reshape_and_cache failed\n");
			exit(1);
		}
	}
	CK(cudaDeviceSynchronize());
	CK(cudaFree(dk));
	CK(cudaFree(dv));
	CK(cudaFree(dmap));
	free(h);
	free(map);
}

struct bench {
	struct kv_layout	l;
	void			*pool;
	uint64_t		pool_bytes;
	uint32_t		nblk;
	uint32_t		*ids;	/* a shuffled order of the blocks */
	void			*flush;
	cudaEvent_t		e0, e1;
	int			runs;
	double			peak;
};

/* Median microseconds of one decode of @batch sequences of @ctx tokens. */
static int run_one(struct bench *b, uint32_t batch, uint32_t ctx,
		   double *us, double *bytes)
{
	const struct kv_layout *l = &b->l;
	uint32_t heads = KV_HEADS * GQA, mb = (ctx + l->block_tokens - 1) /
					     l->block_tokens;
	uint64_t nq = (uint64_t)batch * heads * HEAD_DIM;
	uint32_t *tables = xmalloc((uint64_t)batch * mb * sizeof(uint32_t));
	uint32_t *lens = xmalloc(batch * sizeof(uint32_t));
	float *t = xmalloc(b->runs * sizeof(float));
	struct kv_decode_args a = { 0 };
	uint64_t per_tok;
	int ret = 0;

	for (uint64_t i = 0; i < (uint64_t)batch * mb; i++)
		tables[i] = b->ids[i % b->nblk];
	for (uint32_t s = 0; s < batch; s++)
		lens[s] = ctx;
	a.q = dmalloc(nq * 2);
	a.out = dmalloc(nq * 2);
	CK(cudaMemset((void *)a.q, 0x3c, nq * 2));	/* q = 1.06 */
	a.q_dtype = KV_DTYPE_FP16;
	a.num_seqs = batch;
	a.num_heads = heads;
	a.max_blocks_per_seq = mb;
	a.block_tables = dmalloc((uint64_t)batch * mb * sizeof(uint32_t));
	a.context_lens = dmalloc(batch * sizeof(uint32_t));
	CK(cudaMemcpy((void *)a.block_tables, tables,
		      (uint64_t)batch * mb * sizeof(uint32_t),
		      cudaMemcpyHostToDevice));
	CK(cudaMemcpy((void *)a.context_lens, lens, batch * sizeof(uint32_t),
		      cudaMemcpyHostToDevice));
	a.scale = 0.08838834764f;	/* 1 / sqrt(128) */
	a.workspace_bytes = kv_decode_workspace_bytes(l, batch, heads, ctx, 0);
	a.workspace = dmalloc(a.workspace_bytes ? a.workspace_bytes : 1);

	for (int r = -2; r < b->runs && !ret; r++) {
		float ms;

		CK(cudaMemsetAsync(b->flush, r & 0xff, FLUSH_BYTES, NULL));
		CK(cudaEventRecord(b->e0, NULL));
		ret = kv_cuda_paged_attention_decode(l, b->pool, b->pool_bytes,
						     0, &a, NULL);
		CK(cudaEventRecord(b->e1, NULL));
		CK(cudaEventSynchronize(b->e1));
		CK(cudaEventElapsedTime(&ms, b->e0, b->e1));
		if (r >= 0)
			t[r] = ms;
	}
	CK(cudaGetLastError());
	qsort(t, b->runs, sizeof(float), cmp_float);
	*us = t[b->runs / 2] * 1e3;
	per_tok = (uint64_t)2 * l->kv_heads * l->head_dim * l->elem_bytes;
	if (l->quant == KV_QUANT_TOKEN)
		per_tok += (uint64_t)2 * l->kv_heads * sizeof(float);
	*bytes = (double)batch * ctx * per_tok + 2.0 * nq * 2;
	CK(cudaFree((void *)a.q));
	CK(cudaFree(a.out));
	CK(cudaFree((void *)a.block_tables));
	CK(cudaFree((void *)a.context_lens));
	CK(cudaFree(a.workspace));
	free(tables);
	free(lens);
	free(t);
	return ret;
}

static int bench_dtype(struct bench *b, uint32_t dtype, uint32_t quant,
		       const uint32_t *batches, int nb, const uint32_t *ctxs,
		       int nc, double *best)
{
	struct kv_geometry g = {
		.layers = 1, .kv_heads = KV_HEADS, .head_dim = HEAD_DIM,
		.block_tokens = BLOCK_TOKENS, .dtype = dtype, .quant = quant,
	};
	const char *name = quant ? "e4m3/token" : "fp16";
	uint64_t max_tok = 0;
	int ret = 0;

	for (int i = 0; i < nb; i++)
		for (int j = 0; j < nc; j++)
			if ((uint64_t)batches[i] * ctxs[j] > max_tok)
				max_tok = (uint64_t)batches[i] * ctxs[j];
	if (kv_layout_init(&b->l, &g))
		return 1;
	b->nblk = (uint32_t)(max_tok / BLOCK_TOKENS);
	b->pool_bytes = (uint64_t)b->nblk * b->l.block_bytes;
	b->pool = dmalloc(b->pool_bytes);
	b->ids = xmalloc(b->nblk * sizeof(uint32_t));
	for (uint32_t i = 0; i < b->nblk; i++)
		b->ids[i] = i;
	for (uint32_t i = b->nblk; i > 1; i--) {
		uint32_t j = rnd() % i, t = b->ids[i - 1];

		b->ids[i - 1] = b->ids[j];
		b->ids[j] = t;
	}
	fill_pool(&b->l, b->pool, b->nblk);
	*best = 0;

	for (int i = 0; i < nb && !ret; i++)
		for (int j = 0; j < nc && !ret; j++) {
			double us, bytes, gbs;

			if ((uint64_t)batches[i] * ctxs[j] > max_tok)
				continue;
			ret = run_one(b, batches[i], ctxs[j], &us, &bytes);
			if (ret) {
				fprintf(stderr, "decode_bench: decode returned %d\n",
					ret);
				break;
			}
			gbs = bytes / us / 1e3;
			printf("%-11s %6u %8u %10.1f %10.1f %9.0f", name,
			       batches[i], ctxs[j], bytes / 1e6, us, gbs);
			if (b->peak > 0)
				printf(" %7.1f%%", 100.0 * gbs / b->peak);
			printf("\n");
			if (batches[i] >= 64 && gbs > *best)
				*best = gbs;
		}
	CK(cudaFree(b->pool));
	free(b->ids);
	return ret;
}

int main(int argc, char **argv)
{
	static const uint32_t batches[] = { 1, 8, 32, 64, 128, 256 };
	static const uint32_t ctxs[] = { 512, 2048, 8192, 32768 };
	static const uint32_t qbatches[] = { 1, 64 };
	static const uint32_t qctxs[] = { 512, 4096 };
	struct bench b = { .runs = 11 };
	struct cudaDeviceProp prop;
	double forced = 0, best16, best8;
	int ndev = 0, quick = 0, dev = 0, ret;
	char how[96];

	rng = 0x2545f4914f6cdd1dull;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--peak-gbs") && i + 1 < argc) {
			forced = atof(argv[++i]);
		} else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
			b.runs = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--quick")) {
			quick = 1;
		} else {
			fprintf(stderr, "usage: decode_bench [--peak-gbs GBS] "
					"[--runs N] [--quick]\n");
			return 2;
		}
	}
	if (b.runs < 1)
		b.runs = 1;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || !ndev) {
		printf("decode_bench: no CUDA device, skipped\n");
		return 77;
	}
	CK(cudaGetDevice(&dev));
	CK(cudaGetDeviceProperties(&prop, dev));
	b.peak = peak_gbs(dev, forced, how, sizeof(how));
	CK(cudaEventCreate(&b.e0));
	CK(cudaEventCreate(&b.e1));
	b.flush = dmalloc(FLUSH_BYTES);

	printf("decode_bench: %s, %d SMs; peak %.0f GB/s (%s)\n", prop.name,
	       prop.multiProcessorCount, b.peak, how);
	printf("%d query heads on %d kv heads, head_dim %d, %d-token blocks, "
	       "fp16 q/out, median of %d runs, L2 flushed\n",
	       KV_HEADS * GQA, KV_HEADS, HEAD_DIM, BLOCK_TOKENS, b.runs);
	printf("%-11s %6s %8s %10s %10s %9s %8s\n", "kv", "batch", "context",
	       "MB", "us", "GB/s", "of peak");
	ret = bench_dtype(&b, KV_DTYPE_FP16, KV_QUANT_NONE,
			  quick ? qbatches : batches, quick ? 2 : 6,
			  quick ? qctxs : ctxs, quick ? 2 : 4, &best16);
	if (!ret)
		ret = bench_dtype(&b, KV_DTYPE_FP8_E4M3, KV_QUANT_TOKEN,
				  quick ? qbatches : batches, quick ? 2 : 6,
				  quick ? qctxs : ctxs, quick ? 2 : 4, &best8);
	if (!ret && b.peak > 0)
		printf("best at batch >= 64: fp16 %.1f%%, e4m3/token %.1f%% of peak\n",
		       100.0 * best16 / b.peak, 100.0 * best8 / b.peak);
	CK(cudaFree(b.flush));
	return ret ? 1 : 0;
}
