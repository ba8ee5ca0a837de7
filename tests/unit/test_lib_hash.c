// SPDX-License-Identifier: MIT
/*
 * Block hashes, format KVH1 (libkvclient/hash.c, kv_hash_blocks(3)).
 *
 * The expected bytes in the vector tables were computed once outside this
 * project: the messages were built by a separate Python script from the
 * layout in kv_hash_blocks(3) and hashed with `xxhsum -H2` (XXH3-128,
 * canonical) and `sha256sum`. Here a naive builder (t_msg: one byte at a
 * time into a growing buffer, then one one-shot digest) is checked against
 * those vectors and then against the optimized code over random inputs.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>
#include <openssl/evp.h>
#include <xxhash.h>

#include <kv/kv.h>

#define BT	16
#define ERRNO_CANARY	4242
#define T_UNUSED	__attribute__((unused))

/* ---- naive reference ------------------------------------------------ */

struct t_buf {
	uint8_t	*p;
	size_t	len, cap;
};

static void t_byte(struct t_buf *m, uint8_t v)
{
	if (m->len == m->cap) {
		m->cap = m->cap ? 2 * m->cap : 256;
		m->p = realloc(m->p, m->cap);
		assert_non_null(m->p);
	}
	m->p[m->len++] = v;
}

static void t_le32(struct t_buf *m, uint32_t v)
{
	int i;

	for (i = 0; i < 4; i++)
		t_byte(m, v >> (8 * i));
}

static void t_bytes(struct t_buf *m, const void *p, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		t_byte(m, ((const uint8_t *)p)[i]);
}

static void t_field(struct t_buf *m, uint8_t tag, const void *p, size_t len)
{
	t_byte(m, tag);
	t_le32(m, len);
	t_bytes(m, p, len);
}

/* The message of absolute block b (tok: that block's tokens), from scratch. */
static void t_msg(struct t_buf *m, const struct kv_hash *parent, uint64_t b,
		  const uint32_t *tok, unsigned bt,
		  const struct kv_extra_keys *x)
{
	uint64_t lo = b * bt, hi = lo + bt;
	size_t i;

	m->len = 0;
	t_bytes(m, "KVH1", 4);
	t_bytes(m, parent->b, 16);
	t_le32(m, bt);
	for (i = 0; i < bt; i++)
		t_le32(m, tok[i]);
	if (!x)
		return;
	if (x->lora_id && x->lora_id[0])
		t_field(m, 1, x->lora_id, strlen(x->lora_id));
	for (i = 0; i < x->nr_mm; i++) {
		const struct kv_mm_item *it = &x->mm[i];

		if (it->offset >= hi || (uint64_t)it->offset + it->length <= lo)
			continue;
		t_byte(m, 2);
		t_le32(m, 40);
		t_le32(m, it->offset);
		t_le32(m, it->length);
		t_bytes(m, it->hash, 32);
	}
	if (b == 0 && x->cache_salt_len)
		t_field(m, 3, x->cache_salt, x->cache_salt_len);
}

static void t_digest(int algo, const struct t_buf *m, struct kv_hash *out)
{
	uint8_t md[EVP_MAX_MD_SIZE];
	XXH128_hash_t h;
	int i;

	if (algo == KV_HASH_SHA256) {
		assert_int_equal(EVP_Digest(m->p, m->len, md, NULL,
					    EVP_sha256(), NULL), 1);
		memcpy(out->b, md, 16);
		return;
	}
	h = XXH3_128bits(m->p, m->len);
	for (i = 0; i < 8; i++) {	/* canonical: big-endian high, low */
		out->b[i] = h.high64 >> (56 - 8 * i);
		out->b[8 + i] = h.low64 >> (56 - 8 * i);
	}
}

static size_t t_naive(int algo, const struct kv_hash *parent, size_t start,
		      const uint32_t *tok, size_t n, unsigned bt,
		      const struct kv_extra_keys *x, struct kv_hash *out)
{
	struct kv_hash prev = { { 0 } };
	struct t_buf m = { 0 };
	size_t i;

	if (parent)
		prev = *parent;
	for (i = 0; i < n / bt; i++) {
		t_msg(&m, &prev, start / bt + i, tok + i * bt, bt, x);
		t_digest(algo, &m, &out[i]);
		prev = out[i];
	}
	free(m.p);
	return n / bt;
}

/* kv_hash_blocks that must succeed with n / bt, errno untouched. */
static void t_hash(int algo, const struct kv_hash *parent, size_t start,
		   const uint32_t *tok, size_t n, unsigned bt,
		   const struct kv_extra_keys *x, struct kv_hash *out)
{
	errno = ERRNO_CANARY;
	assert_int_equal(kv_hash_blocks(algo, parent, start, tok, n, bt, x,
					out), n / bt);
	assert_int_equal(errno, ERRNO_CANARY);
}

static bool t_eq(const struct kv_hash *a, const struct kv_hash *b)
{
	return !memcmp(a, b, sizeof(*a));
}

/* ---- fixed vectors -------------------------------------------------- */

static const struct kv_mm_item vec_mm = {
	.offset = 10, .length = 12,
	.hash = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
		  16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29,
		  30, 31 },
};

struct vec {
	const char		*name;
	struct kv_extra_keys	x;
	struct kv_hash		xxh3[2];
	struct kv_hash		sha256[2];
};

/* Tokens 0..31, block_tokens 16, parent NULL: two blocks each. */
static const struct vec vecs[] = {
	{ "plain", { 0 },
	  { { { 0xac, 0xf2, 0x4d, 0xe5, 0x68, 0x6c, 0x19, 0xd7,
		0x81, 0x9f, 0x96, 0xa8, 0x59, 0xf4, 0xb1, 0xe2 } },
	    { { 0x2e, 0xca, 0x24, 0x1e, 0x7a, 0xac, 0x50, 0x0e,
		0x4c, 0x69, 0x53, 0x58, 0x00, 0x46, 0x1a, 0x04 } } },
	  { { { 0x95, 0x82, 0x58, 0xe2, 0xdb, 0xbe, 0x5d, 0xe8,
		0xd3, 0xc0, 0x18, 0x2b, 0x86, 0x92, 0xe3, 0x2d } },
	    { { 0x56, 0xee, 0x31, 0x9e, 0x7e, 0xd0, 0x85, 0x96,
		0xfc, 0x37, 0x1d, 0x06, 0x5d, 0x32, 0x47, 0x44 } } } },
	{ "lora adapter-a", { .lora_id = "adapter-a" },
	  { { { 0x4c, 0xb3, 0x55, 0x18, 0xdb, 0xaa, 0xc8, 0x4f,
		0xa8, 0x88, 0xe7, 0x49, 0x24, 0x88, 0x3c, 0x40 } },
	    { { 0x71, 0xde, 0x9e, 0x08, 0xa8, 0xae, 0x22, 0x28,
		0xdc, 0xb1, 0xc7, 0xbb, 0xa3, 0x1f, 0x1c, 0x32 } } },
	  { { { 0xbc, 0x46, 0x6b, 0x3d, 0x03, 0x31, 0x3b, 0xa5,
		0x59, 0x3e, 0xbf, 0x24, 0x46, 0x7f, 0x6e, 0xce } },
	    { { 0x3a, 0xc9, 0xc5, 0x30, 0xe7, 0x41, 0xdc, 0x46,
		0xc7, 0x2a, 0xe2, 0xdd, 0x5b, 0x2c, 0x28, 0x8c } } } },
	{ "salt s", { .cache_salt = "s", .cache_salt_len = 1 },
	  { { { 0xe2, 0x71, 0x74, 0x3a, 0x40, 0x80, 0x69, 0x07,
		0x56, 0xd7, 0x7f, 0x6d, 0x27, 0x69, 0xa6, 0x8f } },
	    { { 0xe3, 0xc7, 0x9e, 0x5b, 0x4f, 0xca, 0x9d, 0x7e,
		0xc2, 0xb6, 0x6c, 0x3a, 0x23, 0x9f, 0x80, 0xd7 } } },
	  { { { 0x85, 0xf2, 0xd6, 0x12, 0x71, 0x87, 0xf8, 0xe9,
		0xea, 0xa8, 0x99, 0xb1, 0x55, 0x85, 0xad, 0xf5 } },
	    { { 0xa2, 0xd3, 0x83, 0xb7, 0x64, 0x54, 0xdc, 0xb7,
		0x2d, 0x45, 0x46, 0x6a, 0x25, 0x8d, 0xb3, 0x8a } } } },
	{ "mm [10, 22)", { .mm = &vec_mm, .nr_mm = 1 },
	  { { { 0x07, 0xbc, 0x4a, 0xfd, 0xac, 0x6a, 0x5d, 0x30,
		0xf2, 0xce, 0xcb, 0xde, 0x1e, 0x66, 0x53, 0xab } },
	    { { 0x03, 0x56, 0x6e, 0x1b, 0xcb, 0xbd, 0x91, 0x66,
		0xa2, 0x6c, 0xa0, 0x7a, 0x85, 0x23, 0x24, 0xad } } },
	  { { { 0x8b, 0xff, 0xae, 0xdb, 0xa5, 0x77, 0xcf, 0x98,
		0xcf, 0xfc, 0xab, 0x2a, 0xf8, 0x29, 0x55, 0x78 } },
	    { { 0xbe, 0xec, 0x70, 0x82, 0x27, 0xf1, 0xac, 0x76,
		0xe6, 0x9f, 0x83, 0x6b, 0x8e, 0xf6, 0x8c, 0x32 } } } },
	{ "lora + mm + salt", { .lora_id = "adapter-a", .mm = &vec_mm,
				.nr_mm = 1, .cache_salt = "s",
				.cache_salt_len = 1 },
	  { { { 0xb5, 0xbe, 0x03, 0xe6, 0x75, 0x05, 0x45, 0xf6,
		0xbf, 0xd0, 0xc9, 0x63, 0xba, 0xa8, 0xb7, 0xdf } },
	    { { 0x52, 0x34, 0x13, 0x2b, 0x3b, 0xb6, 0xee, 0xf1,
		0x96, 0x11, 0x9e, 0x23, 0xc2, 0x9c, 0xbd, 0xbd } } },
	  { { { 0xd5, 0x53, 0xc3, 0x00, 0xea, 0x10, 0x2a, 0xc9,
		0x6e, 0x22, 0x13, 0x32, 0x9a, 0xee, 0x78, 0x36 } },
	    { { 0x49, 0x7a, 0x1e, 0x43, 0x36, 0xc2, 0xc5, 0xbd,
		0xc2, 0xa8, 0x32, 0x44, 0x1c, 0xfc, 0x38, 0x60 } } } },
};

/* Tokens i * 0x9e3779b1 (i < 4096), block_tokens 2048: larger than the
 * library's scratch, so its streaming path. LoRA: 100 x 'L'. */
static const struct vec big_vecs[] = {
	{ "big plain", { 0 },
	  { { { 0x8b, 0xe4, 0xb4, 0xbf, 0x2b, 0x1d, 0xe5, 0x90,
		0x07, 0x99, 0x49, 0x6b, 0x5e, 0x16, 0x0a, 0x7d } },
	    { { 0xa4, 0xf3, 0x68, 0x4d, 0xbd, 0x98, 0x64, 0x17,
		0xdd, 0xd7, 0x43, 0x03, 0x8b, 0xd8, 0xa9, 0xc9 } } },
	  { { { 0xe3, 0xb8, 0xab, 0x6e, 0x03, 0x77, 0xa0, 0xa6,
		0x17, 0xbe, 0xdb, 0x3c, 0xae, 0xb6, 0x59, 0x00 } },
	    { { 0xb3, 0xcd, 0x1a, 0x35, 0xfa, 0xe0, 0xea, 0xdb,
		0x4d, 0xaf, 0x9b, 0x29, 0x2e, 0x4a, 0x7d, 0x15 } } } },
	{ "big lora", { .lora_id = "LLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLL"
				   "LLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLL" },
	  { { { 0x6d, 0x72, 0x14, 0x0f, 0xcf, 0x25, 0x32, 0xc1,
		0xd3, 0xc7, 0x6e, 0x6d, 0x93, 0xbf, 0xd7, 0x57 } },
	    { { 0x39, 0x44, 0xcb, 0xb1, 0x69, 0x23, 0x90, 0xf0,
		0xea, 0x0c, 0x4a, 0x63, 0xff, 0x47, 0x5c, 0xb4 } } },
	  { { { 0xf1, 0x0b, 0xf9, 0x13, 0x40, 0xc2, 0xa2, 0x8d,
		0x84, 0xbb, 0x64, 0x81, 0xe8, 0x03, 0xa6, 0xe6 } },
	    { { 0xd9, 0x39, 0x37, 0x4e, 0xfb, 0x1e, 0xea, 0xce,
		0x67, 0xa4, 0xf7, 0xfa, 0x88, 0x22, 0x54, 0xa7 } } } },
};

static void t_check_vec(const struct vec *v, const uint32_t *tok,
			unsigned bt)
{
	struct kv_hash got[2];

	print_message("vector %s\n", v->name);
	t_hash(KV_HASH_XXH3_128, NULL, 0, tok, 2 * bt, bt, &v->x, got);
	assert_memory_equal(got, v->xxh3, sizeof(got));
	t_naive(KV_HASH_XXH3_128, NULL, 0, tok, 2 * bt, bt, &v->x, got);
	assert_memory_equal(got, v->xxh3, sizeof(got));
	t_hash(KV_HASH_SHA256, NULL, 0, tok, 2 * bt, bt, &v->x, got);
	assert_memory_equal(got, v->sha256, sizeof(got));
	t_naive(KV_HASH_SHA256, NULL, 0, tok, 2 * bt, bt, &v->x, got);
	assert_memory_equal(got, v->sha256, sizeof(got));
}

static void test_hash_vectors(void **state T_UNUSED)
{
	uint32_t tok[2 * BT];
	size_t i;

	for (i = 0; i < 2 * BT; i++)
		tok[i] = i;
	for (i = 0; i < sizeof(vecs) / sizeof(vecs[0]); i++)
		t_check_vec(&vecs[i], tok, BT);
}

static void test_hash_vectors_large_blocks(void **state T_UNUSED)
{
	static uint32_t tok[4096];
	size_t i;

	for (i = 0; i < 4096; i++)
		tok[i] = (uint32_t)(i * 0x9e3779b1u);
	for (i = 0; i < sizeof(big_vecs) / sizeof(big_vecs[0]); i++)
		t_check_vec(&big_vecs[i], tok, 2048);
}

/* A zero parent and a NULL parent are the same root. */
static void test_hash_null_parent_is_zero(void **state T_UNUSED)
{
	struct kv_hash zero = { { 0 } }, a[2], b[2];
	uint32_t tok[2 * BT] = { 0 };

	t_hash(KV_HASH_XXH3_128, NULL, 0, tok, 2 * BT, BT, NULL, a);
	t_hash(KV_HASH_XXH3_128, &zero, 0, tok, 2 * BT, BT, NULL, b);
	assert_memory_equal(a, b, sizeof(a));
}

/* ---- random inputs against the naive builder ------------------------ */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t t_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng >> 11;
}

static void t_rand_bytes(void *p, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		((uint8_t *)p)[i] = t_rand();
}

struct t_case {
	int			algo;
	unsigned		bt;
	size_t			start, n;
	bool			has_parent;
	struct kv_hash		parent;
	struct kv_extra_keys	x;
	char			lora[5000];
	uint8_t			salt[5000];
	struct kv_mm_item	mm[6];
	uint32_t		*tok;
};

/* Block sizes around the library's 4 KiB scratch too (1018 fills it). */
static const unsigned t_bts[] = { 1, 2, 3, 7, 16, 17, 32, 64, 256,
				  1010, 1017, 1018, 1019, 2048 };

static size_t t_rand_len(size_t max)
{
	switch (t_rand() % 4) {
	case 0:
		return 0;
	case 1:
		return 1 + t_rand() % 8;
	case 2:
		return t_rand() % 200;
	default:
		return t_rand() % max;
	}
}

/* Items around the hashed blocks, mostly sorted as callers should pass
 * them. */
static void t_rand_mm(struct t_case *c)
{
	uint64_t base = c->start >= c->bt ? c->start - c->bt : 0;
	size_t i;

	c->x.nr_mm = t_rand() % 7;
	for (i = 0; i < c->x.nr_mm; i++) {
		c->mm[i].offset = base + t_rand() % (c->n + 2 * c->bt + 1);
		c->mm[i].length = 1 + t_rand() % (2 * c->bt + 3);
		t_rand_bytes(c->mm[i].hash, 32);
		if (i && t_rand() % 4 && c->mm[i].offset < c->mm[i - 1].offset)
			c->mm[i].offset = c->mm[i - 1].offset + t_rand() % 5;
	}
	c->x.mm = c->x.nr_mm || t_rand() % 2 ? c->mm : NULL;
}

/* Where a call starts: the sequence's first blocks, or near 3 G tokens so
 * that every byte of an mm offset counts. */
static size_t t_rand_start(unsigned bt)
{
	size_t b = t_rand() % 4;

	if (t_rand() % 4 == 0)
		b += 0xc0000000u / bt - 4;
	return b * bt;
}

static void t_rand_case(struct t_case *c)
{
	size_t i, len;

	c->algo = t_rand() % 4 ? KV_HASH_XXH3_128 : KV_HASH_SHA256;
	c->bt = t_bts[t_rand() % (sizeof(t_bts) / sizeof(t_bts[0]))];
	c->start = t_rand_start(c->bt);
	c->n = t_rand() % (c->bt <= 64 ? 40 * c->bt : 3 * c->bt);
	c->has_parent = t_rand() % 2;
	t_rand_bytes(&c->parent, sizeof(c->parent));
	c->tok = realloc(c->tok, (c->n + 1) * sizeof(*c->tok));
	assert_non_null(c->tok);
	for (i = 0; i < c->n; i++)
		c->tok[i] = t_rand() % 4 ? t_rand() % 50000 : t_rand() * 7919u;
	len = t_rand_len(sizeof(c->lora));
	for (i = 0; i < len; i++)
		c->lora[i] = 'a' + t_rand() % 26;
	c->lora[len] = 0;
	c->x.lora_id = len || t_rand() % 2 ? c->lora : NULL;
	c->x.cache_salt_len = t_rand_len(sizeof(c->salt));
	t_rand_bytes(c->salt, c->x.cache_salt_len);
	c->x.cache_salt = c->x.cache_salt_len || t_rand() % 2 ? c->salt : NULL;
	t_rand_mm(c);
}

static void test_hash_matches_naive_random(void **state T_UNUSED)
{
	static struct kv_hash got[41 * 64], want[41 * 64];
	static struct t_case c;
	const struct kv_extra_keys *x;
	int iter;

	for (iter = 0; iter < 600; iter++) {
		t_rand_case(&c);
		x = t_rand() % 8 ? &c.x : NULL;
		t_hash(c.algo, c.has_parent ? &c.parent : NULL, c.start, c.tok,
		       c.n, c.bt, x, got);
		t_naive(c.algo, c.has_parent ? &c.parent : NULL, c.start,
			c.tok, c.n, c.bt, x, want);
		if (memcmp(got, want, c.n / c.bt * sizeof(got[0])))
			fail_msg("iteration %d: algo %d bt %u start %zu n %zu "
				 "lora %zu salt %zu mm %zu", iter, c.algo,
				 c.bt, c.start, c.n,
				 strlen(c.lora), c.x.cache_salt_len, c.x.nr_mm);
	}
	free(c.tok);
}

/* ---- chaining ------------------------------------------------------- */

static void test_hash_chain_split(void **state T_UNUSED)
{
	const struct kv_mm_item mm[2] = {
		{ .offset = 20, .length = 30, .hash = { 1 } },
		{ .offset = 60, .length = 1, .hash = { 2 } },
	};
	const struct kv_extra_keys x = {
		.lora_id = "adapter-a", .mm = mm, .nr_mm = 2,
		.cache_salt = "salt", .cache_salt_len = 4,
	};
	struct kv_hash all[4], part[4];
	uint32_t tok[4 * BT];
	int algo, i;

	for (i = 0; i < 4 * BT; i++)
		tok[i] = 1000 + i * 3;
	for (algo = KV_HASH_XXH3_128; algo <= KV_HASH_SHA256; algo++) {
		t_hash(algo, NULL, 0, tok, 4 * BT, BT, &x, all);
		t_hash(algo, NULL, 0, tok, 2 * BT, BT, &x, part);
		t_hash(algo, &part[1], 2 * BT, tok + 2 * BT, 2 * BT, BT, &x,
		       part + 2);
		assert_memory_equal(all, part, sizeof(all));
		memset(part, 0, sizeof(part));
		for (i = 0; i < 4; i++)
			t_hash(algo, i ? &part[i - 1] : NULL, i * BT,
			       tok + i * BT, BT, BT, &x, &part[i]);
		assert_memory_equal(all, part, sizeof(all));
	}
}

/* parent may point at out[0]: it is read before out[0] is written. */
static void test_hash_parent_aliases_out(void **state T_UNUSED)
{
	struct kv_hash p = { { 7, 7, 7 } }, want[2], got[2];
	uint32_t tok[2 * BT] = { 5 };

	t_hash(KV_HASH_XXH3_128, &p, BT, tok, 2 * BT, BT, NULL, want);
	got[0] = p;
	t_hash(KV_HASH_XXH3_128, &got[0], BT, tok, 2 * BT, BT, NULL, got);
	assert_memory_equal(got, want, sizeof(got));
}

static void test_hash_partial_block_gets_none(void **state T_UNUSED)
{
	struct kv_hash out[6], mark;
	uint32_t tok[4 * BT + 5];
	size_t i;

	for (i = 0; i < 4 * BT + 5; i++)
		tok[i] = i;
	memset(out, 0xa5, sizeof(out));
	mark = out[5];
	t_hash(KV_HASH_XXH3_128, NULL, 0, tok, 4 * BT + 5, BT, NULL, out);
	assert_memory_equal(&out[4], &mark, sizeof(mark));
	assert_memory_equal(&out[5], &mark, sizeof(mark));

	/* Less than one block: nothing read or written, NULLs fine. */
	t_hash(KV_HASH_XXH3_128, NULL, 0, tok, BT - 1, BT, NULL, out + 4);
	assert_memory_equal(&out[4], &mark, sizeof(mark));
	t_hash(KV_HASH_XXH3_128, NULL, 0, NULL, BT - 1, BT, NULL, NULL);
	t_hash(KV_HASH_SHA256, NULL, 0, NULL, 0, BT, NULL, NULL);
}

/* ---- what changes a hash -------------------------------------------- */

static void t_two(const struct kv_hash *parent, const uint32_t *tok,
		  const struct kv_extra_keys *x, struct kv_hash out[2])
{
	t_hash(KV_HASH_XXH3_128, parent, 0, tok, 2 * BT, BT, x, out);
}

static void test_hash_every_token_counts(void **state T_UNUSED)
{
	struct kv_hash base[2], h[2];
	uint32_t tok[2 * BT];
	int i;

	for (i = 0; i < 2 * BT; i++)
		tok[i] = i;
	t_two(NULL, tok, NULL, base);
	for (i = 0; i < 2 * BT; i++) {
		tok[i] ^= 1u << (i % 32);
		t_two(NULL, tok, NULL, h);
		tok[i] ^= 1u << (i % 32);
		/* Block 0 only through its own tokens; block 1 always. */
		assert_true(t_eq(&h[0], &base[0]) == (i >= BT));
		assert_false(t_eq(&h[1], &base[1]));
	}
}

static void test_hash_keys_count(void **state T_UNUSED)
{
	struct kv_mm_item mm = { .offset = 3, .length = 2, .hash = { 9 } };
	struct kv_extra_keys x = {
		.lora_id = "adapter-a", .mm = &mm, .nr_mm = 1,
		.cache_salt = "s", .cache_salt_len = 1,
	};
	struct kv_hash base[2], h[2], p = { { 0 } };
	uint32_t tok[2 * BT] = { 0 };

	t_two(NULL, tok, &x, base);
	p.b[15] = 1;
	t_two(&p, tok, &x, h);
	assert_false(t_eq(&h[0], &base[0]) || t_eq(&h[1], &base[1]));
	x.lora_id = "adapter-b";
	t_two(NULL, tok, &x, h);
	assert_false(t_eq(&h[0], &base[0]) || t_eq(&h[1], &base[1]));
	x.lora_id = "adapter-a";
	x.cache_salt = "t";
	t_two(NULL, tok, &x, h);
	assert_false(t_eq(&h[0], &base[0]) || t_eq(&h[1], &base[1]));
	x.cache_salt = "s";
	mm.hash[31] = 1;
	t_two(NULL, tok, &x, h);
	assert_false(t_eq(&h[0], &base[0]) || t_eq(&h[1], &base[1]));
	mm.hash[31] = 0;
	t_two(NULL, tok, &x, h);
	assert_memory_equal(h, base, sizeof(h));
	/* No LoRA: NULL and "" are the same. */
	x.lora_id = NULL;
	t_two(NULL, tok, &x, base);
	x.lora_id = "";
	t_two(NULL, tok, &x, h);
	assert_memory_equal(h, base, sizeof(h));
}

/* Tags and lengths: "ab" + "c" and "a" + "bc" are different keys. */
static void test_hash_fields_are_framed(void **state T_UNUSED)
{
	const struct kv_extra_keys x1 = {
		.lora_id = "ab", .cache_salt = "c", .cache_salt_len = 1,
	};
	const struct kv_extra_keys x2 = {
		.lora_id = "a", .cache_salt = "bc", .cache_salt_len = 2,
	};
	const struct kv_extra_keys x3 = {
		.cache_salt = "adapter-a", .cache_salt_len = 9,
	};
	const struct kv_extra_keys x4 = { .lora_id = "adapter-a" };
	struct kv_hash a[1], b[1];
	uint32_t tok[BT] = { 0 };
	int algo;

	for (algo = KV_HASH_XXH3_128; algo <= KV_HASH_SHA256; algo++) {
		t_hash(algo, NULL, 0, tok, BT, BT, &x1, a);
		t_hash(algo, NULL, 0, tok, BT, BT, &x2, b);
		assert_false(t_eq(a, b));
		t_hash(algo, NULL, 0, tok, BT, BT, &x3, a);
		t_hash(algo, NULL, 0, tok, BT, BT, &x4, b);
		assert_false(t_eq(a, b));
	}
}

/* The salt field is in block 0's message only; later blocks see it
 * through the parent chain. */
static void test_hash_salt_only_in_block0(void **state T_UNUSED)
{
	const struct kv_extra_keys salt = { .cache_salt = "s",
					    .cache_salt_len = 1 };
	struct kv_hash with[2], without[2], p = { { 3 } };
	struct t_buf m1 = { 0 }, m2 = { 0 };
	uint32_t tok[2 * BT] = { 0 };

	t_msg(&m1, &p, 1, tok, BT, &salt);
	t_msg(&m2, &p, 1, tok, BT, NULL);
	assert_int_equal(m1.len, m2.len);
	assert_memory_equal(m1.p, m2.p, m1.len);
	t_msg(&m1, &p, 0, tok, BT, &salt);
	t_msg(&m2, &p, 0, tok, BT, NULL);
	assert_int_equal(m1.len, m2.len + 5 + 1);
	free(m1.p);
	free(m2.p);

	t_two(NULL, tok, &salt, with);
	t_two(NULL, tok, NULL, without);
	assert_false(t_eq(&with[0], &without[0]));
	assert_false(t_eq(&with[1], &without[1]));
	/* The same block 1 from the same parent: the salt plays no part. */
	t_hash(KV_HASH_XXH3_128, &p, BT, tok, BT, BT, &salt, with);
	t_hash(KV_HASH_XXH3_128, &p, BT, tok, BT, BT, NULL, without);
	assert_memory_equal(with, without, sizeof(with[0]));
}

/* Block b with and without mm, from one parent: differ iff it overlaps. */
static bool t_mm_touches(const struct kv_mm_item *mm, uint64_t b,
			 const uint32_t *tok)
{
	const struct kv_extra_keys x = { .mm = mm, .nr_mm = 1 };
	struct kv_hash p = { { 1 } }, a, c;

	t_hash(KV_HASH_XXH3_128, &p, b * BT, tok, BT, BT, &x, &a);
	t_hash(KV_HASH_XXH3_128, &p, b * BT, tok, BT, BT, NULL, &c);
	return !t_eq(&a, &c);
}

static void test_hash_mm_exactly_overlapped_blocks(void **state T_UNUSED)
{
	static const struct { uint32_t off, len; bool in[4]; } cases[] = {
		{ 20, 4, { false, true, false, false } },
		{ 8, 8, { true, false, false, false } },	/* ends at 16 */
		{ 16, 1, { false, true, false, false } },
		{ 15, 2, { true, true, false, false } },
		{ 10, 40, { true, true, true, true } },
		{ 47, 1, { false, false, true, false } },
		{ 64, 1, { false, false, false, false } },	/* past b 3 */
	};
	struct kv_mm_item mm = { .hash = { 0xee } };
	uint32_t tok[BT] = { 0 };
	size_t i;
	int b;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		mm.offset = cases[i].off;
		mm.length = cases[i].len;
		for (b = 0; b < 4; b++)
			assert_int_equal(t_mm_touches(&mm, b, tok),
					 cases[i].in[b]);
	}
}

/* Items hash in the order given, sorted or not. */
static void test_hash_mm_order(void **state T_UNUSED)
{
	struct kv_mm_item mm[2] = {
		{ .offset = 2, .length = 3, .hash = { 1 } },
		{ .offset = 6, .length = 3, .hash = { 2 } },
	};
	struct kv_extra_keys x = { .mm = mm, .nr_mm = 2 };
	struct kv_hash a[2], b[2], want[2];
	uint32_t tok[2 * BT] = { 0 };
	struct kv_mm_item t;

	t_two(NULL, tok, &x, a);
	t = mm[0];
	mm[0] = mm[1];
	mm[1] = t;
	t_two(NULL, tok, &x, b);
	assert_false(t_eq(&a[0], &b[0]));
	t_naive(KV_HASH_XXH3_128, NULL, 0, tok, 2 * BT, BT, &x, want);
	assert_memory_equal(b, want, sizeof(b));
}

static void test_hash_sha256_differs(void **state T_UNUSED)
{
	struct kv_hash x[2], s[2];
	uint32_t tok[2 * BT] = { 0 };

	t_hash(KV_HASH_XXH3_128, NULL, 0, tok, 2 * BT, BT, NULL, x);
	t_hash(KV_HASH_SHA256, NULL, 0, tok, 2 * BT, BT, NULL, s);
	assert_false(t_eq(&x[0], &s[0]) || t_eq(&x[1], &s[1]));
}

/* ---- errors --------------------------------------------------------- */

static void t_einval(int algo, size_t start, const uint32_t *tok, size_t n,
		     unsigned bt, const struct kv_extra_keys *x,
		     struct kv_hash *out, int err)
{
	errno = ERRNO_CANARY;
	assert_int_equal(kv_hash_blocks(algo, NULL, start, tok, n, bt, x, out),
			 err);
	assert_int_equal(errno, ERRNO_CANARY);
}

static void test_hash_errors(void **state T_UNUSED)
{
	const struct kv_mm_item zero_len = { .offset = 0, .length = 0 };
	const struct kv_mm_item ok_mm = { .offset = 0, .length = 1 };
	struct kv_extra_keys x = { 0 };
	struct kv_hash out[2];
	uint32_t tok[2 * BT] = { 0 };

	t_einval(2, 0, tok, BT, BT, NULL, out, -EINVAL);
	t_einval(-1, 0, tok, BT, BT, NULL, out, -EINVAL);
	t_einval(KV_HASH_XXH3_128, 0, tok, BT, 0, NULL, out, -EINVAL);
	t_einval(KV_HASH_XXH3_128, 1, tok, BT, BT, NULL, out, -EINVAL);
	t_einval(KV_HASH_XXH3_128, BT + 1, tok, 0, BT, NULL, out, -EINVAL);
	t_einval(KV_HASH_XXH3_128, 0, NULL, BT, BT, NULL, out, -EINVAL);
	t_einval(KV_HASH_XXH3_128, 0, tok, BT, BT, NULL, NULL, -EINVAL);
	x.nr_mm = 1;
	t_einval(KV_HASH_XXH3_128, 0, tok, BT, BT, &x, out, -EINVAL);
	t_einval(KV_HASH_XXH3_128, 0, tok, 0, BT, &x, out, -EINVAL);
	x.mm = &zero_len;
	t_einval(KV_HASH_SHA256, 0, tok, BT, BT, &x, out, -EINVAL);
	x.mm = &ok_mm;
	t_einval(KV_HASH_SHA256, 0, tok, BT, BT, &x, out, 1);
	x.cache_salt_len = 1;
	t_einval(KV_HASH_XXH3_128, 0, tok, BT, BT, &x, out, -EINVAL);
	x.cache_salt = "";	/* salt_len 1: the NUL byte */
	t_einval(KV_HASH_XXH3_128, 0, tok, BT, BT, &x, out, 1);
	/* More blocks than an int counts: refused before reading tokens. */
	t_einval(KV_HASH_XXH3_128, 0, tok, ((size_t)INT_MAX + 1) * BT, BT,
		 NULL, out, -EOVERFLOW);
}

/* ---- throughput (printed, not asserted) ------------------------------ */

static volatile uint64_t t_sink;	/* keeps the plain hash computed */

static double t_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void t_min(double *best, double t)
{
	if (t < *best)
		*best = t;
}

static void test_hash_throughput(void **state T_UNUSED)
{
	const size_t n = 1 << 20, bytes = n * sizeof(uint32_t);
	struct kv_hash *out = malloc(n / BT * sizeof(*out));
	uint32_t *tok = malloc(bytes);
	double t, best[3] = { 1e9, 1e9, 1e9 };
	size_t i;
	int r;

	assert_non_null(out);
	assert_non_null(tok);
	for (i = 0; i < n; i++)
		tok[i] = t_rand() % 128000;
	for (r = 0; r < 5; r++) {
		t = t_now();
		t_hash(KV_HASH_XXH3_128, NULL, 0, tok, n, BT, NULL, out);
		t_min(&best[0], t_now() - t);
		t = t_now();
		t_sink += XXH3_128bits(tok, bytes).low64;
		t_min(&best[1], t_now() - t);
		t = t_now();
		t_hash(KV_HASH_SHA256, NULL, 0, tok, n, BT, NULL, out);
		t_min(&best[2], t_now() - t);
	}
	printf("hash throughput, 1M tokens, block_tokens %d (token bytes):\n"
	       "  kv_hash_blocks XXH3-128  %6.2f GB/s  (%.1f ns/block)\n"
	       "  one XXH3_128bits()       %6.2f GB/s\n"
	       "  kv_hash_blocks SHA-256   %6.2f GB/s  (%.1f ns/block)\n",
	       BT, bytes / best[0] / 1e9, best[0] / (n / BT) * 1e9,
	       bytes / best[1] / 1e9, bytes / best[2] / 1e9,
	       best[2] / (n / BT) * 1e9);
	free(tok);
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hash_vectors),
		cmocka_unit_test(test_hash_vectors_large_blocks),
		cmocka_unit_test(test_hash_null_parent_is_zero),
		cmocka_unit_test(test_hash_matches_naive_random),
		cmocka_unit_test(test_hash_chain_split),
		cmocka_unit_test(test_hash_parent_aliases_out),
		cmocka_unit_test(test_hash_partial_block_gets_none),
		cmocka_unit_test(test_hash_every_token_counts),
		cmocka_unit_test(test_hash_keys_count),
		cmocka_unit_test(test_hash_fields_are_framed),
		cmocka_unit_test(test_hash_salt_only_in_block0),
		cmocka_unit_test(test_hash_mm_exactly_overlapped_blocks),
		cmocka_unit_test(test_hash_mm_order),
		cmocka_unit_test(test_hash_sha256_differs),
		cmocka_unit_test(test_hash_errors),
		cmocka_unit_test(test_hash_throughput),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
