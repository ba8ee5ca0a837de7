// SPDX-License-Identifier: MIT
/*
 * kvbench --hash-bench: how fast the client hashes prompts. One buffer
 * of random token ids (64 MiB: 1 Mi blocks of 16 u32 tokens) is hashed
 *  - by kv_hash_blocks(3), chained blocks, in XXH3-128 and SHA-256 mode;
 *  - by the bare hash over the whole buffer in one call (XXH3_128bits of
 *    libxxhash, SHA-256 of libcrypto): the bound of the hash itself;
 *  - by the bare hash once per 64-byte block: the same number of calls
 *    as kv_hash_blocks, without its header, chaining and canonical form.
 * Throughput is token bytes per second (GB = 1e9 bytes), the median of
 * five passes; ratios are kv_hash_blocks over the bare hash.
 */
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include <xxhash.h>

#include "../emit.h"
#include "lat.h"
#include "modes.h"

#define HB_BLOCK_TOKENS		16U
#define HB_BLOCKS		(1U << 20)
#define HB_TOKENS		(HB_BLOCKS * HB_BLOCK_TOKENS)
#define HB_BYTES		((uint64_t)HB_TOKENS * sizeof(uint32_t))
#define HB_PASSES		5

enum hb_kind {
	HB_KV_XXH3,
	HB_XXH3_WHOLE,
	HB_XXH3_BLOCKS,
	HB_KV_SHA256,
	HB_SHA256_WHOLE,
	HB_SHA256_BLOCKS,
	HB_NR,
};

static const char *const hb_key[HB_NR] = {
	"kv_xxh3", "xxh3_whole", "xxh3_per_block", "kv_sha256",
	"sha256_whole", "sha256_per_block",
};

static const char *const hb_label[HB_NR] = {
	"kv_hash_blocks XXH3-128", "XXH3_128bits, whole buffer",
	"XXH3_128bits, per block", "kv_hash_blocks SHA-256",
	"SHA-256, whole buffer", "SHA-256, per block",
};

struct hb_ctx {
	uint32_t	*tok;
	struct kv_hash	*out;
	EVP_MD		*md;
	EVP_MD_CTX	*sha;
	uint64_t	sink;	/* keeps the bare hashes from being dropped */
};

static int hb_sha(struct hb_ctx *h, const void *p, size_t len)
{
	uint8_t md[EVP_MAX_MD_SIZE];

	if (!EVP_DigestInit_ex(h->sha, h->md, NULL) ||
	    !EVP_DigestUpdate(h->sha, p, len) ||
	    !EVP_DigestFinal_ex(h->sha, md, NULL))
		return -1;
	h->sink += md[0];
	return 0;
}

static int hb_once(struct hb_ctx *h, enum hb_kind kind)
{
	const size_t blk = HB_BLOCK_TOKENS * sizeof(uint32_t);
	const uint8_t *p = (const uint8_t *)h->tok;
	XXH128_hash_t x;
	int ret;

	switch (kind) {
	case HB_KV_XXH3:
	case HB_KV_SHA256:
		ret = kv_hash_blocks(kind == HB_KV_XXH3 ? KV_HASH_XXH3_128 :
				     KV_HASH_SHA256, NULL, 0, h->tok,
				     HB_TOKENS, HB_BLOCK_TOKENS, NULL, h->out);
		return ret == (int)HB_BLOCKS ? 0 : -1;
	case HB_XXH3_WHOLE:
		x = XXH3_128bits(p, HB_BYTES);
		h->sink += x.low64;
		return 0;
	case HB_XXH3_BLOCKS:
		for (uint32_t b = 0; b < HB_BLOCKS; b++) {
			x = XXH3_128bits(p + b * blk, blk);
			h->sink += x.low64;
		}
		return 0;
	case HB_SHA256_WHOLE:
		return hb_sha(h, p, HB_BYTES);
	case HB_SHA256_BLOCKS:
		for (uint32_t b = 0; b < HB_BLOCKS; b++)
			if (hb_sha(h, p + b * blk, blk))
				return -1;
		return 0;
	case HB_NR:
		break;
	}
	return -1;
}

/* GB/s of token bytes: the median of HB_PASSES passes. */
static int hb_measure(struct hb_ctx *h, enum hb_kind kind, double *gbps)
{
	double v[HB_PASSES];

	for (int i = 0; i < HB_PASSES; i++) {
		uint64_t t0 = bench_now_ns();

		if (hb_once(h, kind)) {
			fprintf(stderr, "kvbench: %s failed\n", hb_label[kind]);
			return -1;
		}
		v[i] = (double)HB_BYTES / (double)(bench_now_ns() - t0);
	}
	*gbps = bench_median(v, HB_PASSES);
	return 0;
}

static const struct kv_emit_col hb_cols[] = {
	{ "name", "", -28 }, { "gb_per_s", "GB/s", 8 },
	{ "ns_per_block", "ns/block", 9 }, { "ratio", "kv/bare", 8 },
};

static void hb_emit(struct kv_emit *e, const double *gbps)
{
	kv_emit_obj_begin(e, "hash", "block hashing (16-token blocks, token bytes)");
	kv_emit_u64(e, "blocks", "blocks per pass", HB_BLOCKS);
	kv_emit_u64(e, "bytes", "token bytes per pass", HB_BYTES);
	kv_emit_u64(e, "passes", "passes (median)", HB_PASSES);
	kv_emit_table_begin(e, "rows", hb_cols, 4);
	for (int k = 0; k < HB_NR; k++) {
		/* Each kv row is compared with the bare rows below it. */
		int kv = k < HB_KV_SHA256 ? HB_KV_XXH3 : HB_KV_SHA256;

		kv_emit_row_begin(e);
		kv_emit_cell_str(e, e->json ? hb_key[k] : hb_label[k]);
		kv_emit_cell_f64(e, gbps[k]);
		kv_emit_cell_f64(e, gbps[k] ? HB_BLOCK_TOKENS * 4 / gbps[k] :
				 0);
		kv_emit_cell_f64(e, k == kv || !gbps[k] ? 1 :
				 gbps[kv] / gbps[k]);
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
	kv_emit_obj_end(e);
}

static int hb_init(struct hb_ctx *h)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL;

	memset(h, 0, sizeof(*h));
	h->tok = malloc(HB_BYTES);
	h->out = malloc((size_t)HB_BLOCKS * sizeof(*h->out));
	h->md = EVP_MD_fetch(NULL, "SHA256", NULL);
	h->sha = EVP_MD_CTX_new();
	if (!h->tok || !h->out || !h->md || !h->sha) {
		fprintf(stderr, "kvbench: out of memory, or no SHA-256\n");
		return -1;
	}
	for (uint32_t i = 0; i < HB_TOKENS; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		h->tok[i] = (uint32_t)x % 152064;	/* a vocabulary's ids */
	}
	return 0;
}

static void hb_exit(struct hb_ctx *h)
{
	EVP_MD_CTX_free(h->sha);
	EVP_MD_free(h->md);
	free(h->tok);
	free(h->out);
}

int kvb_mode_hash(struct kvb_opts *o)
{
	double gbps[HB_NR] = { 0 };
	struct hb_ctx h;
	struct kv_emit e;
	FILE *json;
	int ret = 1;

	if (hb_init(&h))
		goto out;
	for (int k = 0; k < HB_NR; k++)
		if (hb_measure(&h, k, &gbps[k]))
			goto out;
	if (!o->quiet) {
		kv_emit_begin(&e, stdout, false);
		hb_emit(&e, gbps);
		kv_emit_end(&e);
	}
	ret = 0;
	if (!o->json_path)
		goto out;
	json = kvb_json_open(o->json_path);
	if (json) {
		kv_emit_begin(&e, json, true);
		hb_emit(&e, gbps);
		kv_emit_end(&e);
	}
	if (!json || kvb_json_close(o->json_path, json))
		ret = 1;
out:
	hb_exit(&h);
	return ret;
}
