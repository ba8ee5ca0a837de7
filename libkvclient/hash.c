// SPDX-License-Identifier: MIT
/*
 * Block hashes for the prefix cache, format "KVH1" (version 1). The byte
 * layout is the stable contract and is written out in full in
 * kv_hash_blocks(3); in short, block b of a sequence hashes
 *
 *   "KVH1" | parent (16) | le32 block_tokens | le32 token ids
 *   | [1, le32 L, LoRA id] | [2, le32 40, mm item]... | [3, le32 L, salt]
 *
 * with the LoRA field in every block, one mm field per item overlapping
 * the block, and the salt field in block 0 only.
 *
 * Cost: a block's message is built in a stack scratch and hashed with one
 * one-shot call; a message larger than the scratch (block_tokens beyond
 * ~1000) is streamed instead, token ids hashed in place. libxxhash is
 * compiled in (XXH_INLINE_ALL, its header-only mode): the one-shot call
 * inlines for short messages (~13 ns for a 16-token block instead of ~18
 * through the shared library) and the streaming state can live on the
 * stack without depending on the shared library's struct layout. Nothing
 * is allocated per block; SHA-256 allocates one EVP context per call
 * (and restores errno, which libcrypto may change underneath).
 */
#include <endian.h>
#include <limits.h>
#include <string.h>
#include <openssl/evp.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "lib.h"

#define KVH_MAGIC		"KVH1"
#define KVH_MAGIC_LEN		4
#define KVH_HDR_LEN		(KVH_MAGIC_LEN + 16 + 4)
#define KVH_FIELD_LORA		1
#define KVH_FIELD_MM		2
#define KVH_FIELD_SALT		3
#define KVH_FIELD_HDR_LEN	5	/* u8 tag, le32 length */
#define KVH_MM_LEN		40	/* le32 offset, le32 length, hash[32] */
#define KVH_SCRATCH		4096

/* The arguments that stay the same for every block of one call. */
struct kvh_keys {
	unsigned		bt;		/* block_tokens */
	const char		*lora;
	uint32_t		lora_len;	/* 0: no LoRA field */
	const struct kv_mm_item	*mm;
	size_t			nr_mm;
	bool			mm_sorted;	/* by offset: a scan may stop early */
	size_t			mm_first;	/* items before it end before this block */
	const void		*salt;
	uint32_t		salt_len;	/* 0: no salt field */
};

/*
 * One message being hashed: bytes gather in buf; once a message outgrows
 * buf they are streamed (xxh or sha) and buf is only a staging area.
 */
struct kvh_ctx {
	int			algo;
	bool			streaming;
	int			err;		/* sticky, checked once per block */
	int			saved_errno;	/* SHA-256 only */
	size_t			fill;
	EVP_MD			*md;		/* SHA-256 only */
	EVP_MD_CTX		*sha;		/* SHA-256 only */
	XXH3_state_t		xxh;		/* 64-byte aligned by its type */
	uint8_t			buf[KVH_SCRATCH] __attribute__((aligned(64)));
};

static inline void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = v;
	p[1] = v >> 8;
	p[2] = v >> 16;
	p[3] = v >> 24;
}

static int kvh_ctx_init(struct kvh_ctx *h, int algo)
{
	h->algo = algo;
	h->md = NULL;
	h->sha = NULL;
	if (algo != KV_HASH_SHA256)
		return 0;
	h->saved_errno = errno;
	/* One fetch per call: EVP_sha256() would fetch on every init. */
	h->md = EVP_MD_fetch(NULL, "SHA256", NULL);
	h->sha = EVP_MD_CTX_new();
	return h->md && h->sha ? 0 : -EIO;
}

static void kvh_ctx_exit(struct kvh_ctx *h)
{
	if (h->algo != KV_HASH_SHA256)
		return;
	EVP_MD_CTX_free(h->sha);
	EVP_MD_free(h->md);
	errno = h->saved_errno;
}

static void kvh_stream_start(struct kvh_ctx *h)
{
	h->streaming = true;
	if (h->algo == KV_HASH_SHA256) {
		if (!EVP_DigestInit_ex(h->sha, h->md, NULL))
			h->err = -EIO;
		return;
	}
	XXH3_INITSTATE(&h->xxh);
	if (XXH3_128bits_reset(&h->xxh) != XXH_OK)
		h->err = -EIO;
}

static void kvh_stream(struct kvh_ctx *h, const void *p, size_t len)
{
	if (h->err || !len)
		return;
	if (h->algo == KV_HASH_SHA256) {
		if (!EVP_DigestUpdate(h->sha, p, len))
			h->err = -EIO;
	} else if (XXH3_128bits_update(&h->xxh, p, len) != XXH_OK) {
		h->err = -EIO;
	}
}

/* Append len bytes to the message. */
static void kvh_put(struct kvh_ctx *h, const void *p, size_t len)
{
	if (len <= KVH_SCRATCH - h->fill) {
		memcpy(h->buf + h->fill, p, len);
		h->fill += len;
		return;
	}
	if (!h->streaming)
		kvh_stream_start(h);
	kvh_stream(h, h->buf, h->fill);
	h->fill = 0;
	if (len < KVH_SCRATCH) {
		memcpy(h->buf, p, len);
		h->fill = len;
	} else {
		kvh_stream(h, p, len);
	}
}

static void kvh_finish_xxh3(struct kvh_ctx *h, struct kv_hash *out)
{
	XXH128_canonical_t c;
	XXH128_hash_t v;

	if (h->streaming) {
		kvh_stream(h, h->buf, h->fill);
		if (h->err)
			return;
		v = XXH3_128bits_digest(&h->xxh);
	} else {
		v = XXH3_128bits(h->buf, h->fill);
	}
	XXH128_canonicalFromHash(&c, v);
	memcpy(out->b, c.digest, sizeof(out->b));
}

static void kvh_finish_sha256(struct kvh_ctx *h, struct kv_hash *out)
{
	uint8_t md[EVP_MAX_MD_SIZE];

	if (!h->streaming)
		kvh_stream_start(h);
	kvh_stream(h, h->buf, h->fill);
	if (h->err)
		return;
	if (!EVP_DigestFinal_ex(h->sha, md, NULL)) {
		h->err = -EIO;
		return;
	}
	memcpy(out->b, md, sizeof(out->b));
}

/* Token ids as le32: in place on little-endian hosts. */
static void kvh_put_tokens(struct kvh_ctx *h, const uint32_t *tok, unsigned n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	kvh_put(h, tok, (size_t)n * sizeof(*tok));
#else
	uint32_t le[64];
	unsigned i, k;

	for (i = 0; i < n; i += k) {
		for (k = 0; k < 64 && i + k < n; k++)
			le[k] = htole32(tok[i + k]);
		kvh_put(h, le, k * sizeof(*le));
	}
#endif
}

static void kvh_put_field(struct kvh_ctx *h, uint8_t tag, const void *p,
			  uint32_t len)
{
	uint8_t hdr[KVH_FIELD_HDR_LEN];

	hdr[0] = tag;
	put_le32(hdr + 1, len);
	kvh_put(h, hdr, sizeof(hdr));
	kvh_put(h, p, len);
}

static void kvh_put_mm(struct kvh_ctx *h, const struct kv_mm_item *mm)
{
	uint8_t f[KVH_MM_LEN];

	put_le32(f, mm->offset);
	put_le32(f + 4, mm->length);
	memcpy(f + 8, mm->hash, sizeof(mm->hash));
	kvh_put_field(h, KVH_FIELD_MM, f, sizeof(f));
}

static inline uint64_t mm_end(const struct kv_mm_item *mm)
{
	return (uint64_t)mm->offset + mm->length;
}

/* One mm field per item overlapping tokens [pos, pos + bt), in order. */
static void kvh_put_mm_fields(struct kvh_ctx *h, struct kvh_keys *k,
			      uint64_t pos)
{
	uint64_t end = pos + k->bt;
	size_t i;

	while (k->mm_first < k->nr_mm && mm_end(&k->mm[k->mm_first]) <= pos)
		k->mm_first++;
	for (i = k->mm_first; i < k->nr_mm; i++) {
		if (k->mm[i].offset >= end) {
			if (k->mm_sorted)
				break;
			continue;
		}
		if (mm_end(&k->mm[i]) > pos)
			kvh_put_mm(h, &k->mm[i]);
	}
}

/* Hash absolute block b, whose parent hash is parent, into *out. */
static void kvh_block(struct kvh_ctx *h, struct kvh_keys *k,
		      const struct kv_hash *parent, uint64_t b,
		      const uint32_t *tok, struct kv_hash *out)
{
	/* The fixed header goes straight into the empty scratch. */
	memcpy(h->buf, KVH_MAGIC, KVH_MAGIC_LEN);
	memcpy(h->buf + KVH_MAGIC_LEN, parent->b, sizeof(parent->b));
	put_le32(h->buf + KVH_MAGIC_LEN + sizeof(parent->b), k->bt);
	h->fill = KVH_HDR_LEN;
	h->streaming = false;

	kvh_put_tokens(h, tok, k->bt);
	if (k->lora_len)
		kvh_put_field(h, KVH_FIELD_LORA, k->lora, k->lora_len);
	if (k->nr_mm)
		kvh_put_mm_fields(h, k, b * k->bt);
	if (b == 0 && k->salt_len)
		kvh_put_field(h, KVH_FIELD_SALT, k->salt, k->salt_len);

	if (h->algo == KV_HASH_SHA256)
		kvh_finish_sha256(h, out);
	else
		kvh_finish_xxh3(h, out);
}

/* Check the extra keys and copy them into k; extra may be NULL. */
static int kvh_keys_init(struct kvh_keys *k, unsigned bt,
			 const struct kv_extra_keys *extra)
{
	size_t i, len;

	memset(k, 0, sizeof(*k));
	k->bt = bt;
	if (!extra)
		return 0;
	if ((extra->nr_mm && !extra->mm) ||
	    (extra->cache_salt_len && !extra->cache_salt))
		return -EINVAL;
	len = extra->lora_id ? strlen(extra->lora_id) : 0;
	if (len > UINT32_MAX || extra->cache_salt_len > UINT32_MAX)
		return -EINVAL;
	k->lora = extra->lora_id;
	k->lora_len = len;
	k->salt = extra->cache_salt;
	k->salt_len = extra->cache_salt_len;
	k->mm = extra->mm;
	k->nr_mm = extra->nr_mm;
	k->mm_sorted = true;
	for (i = 0; i < k->nr_mm; i++) {
		if (!k->mm[i].length)
			return -EINVAL;
		if (i && k->mm[i].offset < k->mm[i - 1].offset)
			k->mm_sorted = false;
	}
	return 0;
}

int kv_hash_blocks(int algo, const struct kv_hash *parent, size_t start,
		   const uint32_t *tokens, size_t n_tokens,
		   unsigned block_tokens, const struct kv_extra_keys *extra,
		   struct kv_hash *out)
{
	struct kv_hash prev = { { 0 } };
	struct kvh_keys k;
	struct kvh_ctx h;
	size_t i, nr;
	int ret;

	if ((algo != KV_HASH_XXH3_128 && algo != KV_HASH_SHA256) ||
	    !block_tokens || start % block_tokens)
		return -EINVAL;
	nr = n_tokens / block_tokens;
	if (nr && (!tokens || !out))
		return -EINVAL;
	ret = kvh_keys_init(&k, block_tokens, extra);
	if (ret)
		return ret;
	if (nr > INT_MAX)
		return -EOVERFLOW;
	if (!nr)
		return 0;

	if (parent)
		prev = *parent;
	h.err = kvh_ctx_init(&h, algo);
	for (i = 0; i < nr && !h.err; i++) {
		kvh_block(&h, &k, &prev, start / block_tokens + i,
			  tokens + i * block_tokens, &out[i]);
		prev = out[i];
	}
	kvh_ctx_exit(&h);
	return h.err ? h.err : (int)nr;
}
