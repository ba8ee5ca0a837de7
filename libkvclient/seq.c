// SPDX-License-Identifier: MIT
/*
 * kv_seq: what an engine holds per request, as vLLM's KVCacheManager
 * does per request: the block table, the chained hashes of its full
 * blocks, and the tokens of its partial last block (to hash it once full).
 *
 * Lifecycle: open (prefix lookup + allocation, one round trip), prefill
 * writes the blocks past the hit, append as tokens are generated (a new
 * block when one fills; full blocks are committed once their KV is
 * written), fork for parallel sampling, close. Commit may deduplicate a
 * block to one already cached: the block table then names the cached
 * block, whose bytes are the same KV by construction of the hash. A call
 * that fails leaves its reason for kv_last_error(), as kv_connect's
 * errbuf does: for -EDQUOT, the quota kvd says refused it.
 */
#include <stdlib.h>
#include <string.h>

#include "lib.h"

struct kv_seq {
	struct kv_client *c;
	size_t		len;		/* tokens */
	size_t		hit_tokens;	/* KV already present at open */
	uint32_t	nr_blocks;
	uint32_t	cap;		/* of blocks[] and hashes[] */
	kv_block_t	*blocks;	/* the block table */
	struct kv_hash	*hashes;	/* of full blocks [0, nr_hashed) */
	uint32_t	nr_hashed;
	uint32_t	nr_committed;	/* blocks [0, nr_committed) published */
	uint32_t	*tail;		/* tokens of the partial last block */
	uint32_t	n_tail;
	char		*lora_id;	/* deep copies of the extra keys */
	struct kv_mm_item *mm;
	size_t		nr_mm;
	void		*salt;		/* hashed into block 0 only */
	size_t		salt_len;
};

static void seq_free(struct kv_seq *s)
{
	free(s->blocks);
	free(s->hashes);
	free(s->tail);
	free(s->lora_id);
	free(s->mm);
	free(s->salt);
	free(s);
}

static int seq_reserve(struct kv_seq *s, uint32_t nr)
{
	kv_block_t *b;
	struct kv_hash *h;
	uint32_t cap = s->cap ? s->cap : 8;

	if (nr <= s->cap)
		return 0;
	if (nr > KV_MAX_IDS)
		return -E2BIG;
	while (cap < nr)
		cap *= 2;
	b = realloc(s->blocks, cap * sizeof(*b));
	if (!b)
		return -ENOMEM;
	s->blocks = b;
	h = realloc(s->hashes, cap * sizeof(*h));
	if (!h)
		return -ENOMEM;
	s->hashes = h;
	s->cap = cap;
	return 0;
}

/* How many entries of @size bytes one request may carry. */
static uint32_t chunk(const struct kv_client *c, size_t size)
{
	size_t n = c->data_bytes / size;

	return n > KV_MAX_IDS ? KV_MAX_IDS : (uint32_t)n;
}

/* RELEASE of any number of ids, in requests the data area can hold. */
static int release_ids(struct kv_client *c, const kv_block_t *ids,
		       uint32_t nr)
{
	uint32_t step = chunk(c, sizeof(*ids));
	int ret = 0;

	for (uint32_t i = 0; i < nr; i += step) {
		int r = kv_release(c, ids + i, nr - i < step ? nr - i : step);

		if (r < 0 && !ret)
			ret = r;	/* go on: release what we can */
	}
	return ret;
}

/* REF of any number of ids; all or nothing. */
static int ref_ids(struct kv_client *c, const kv_block_t *ids, uint32_t nr)
{
	uint32_t step = chunk(c, sizeof(*ids));

	for (uint32_t i = 0; i < nr; i += step) {
		int r = kv_ref(c, ids + i, nr - i < step ? nr - i : step);

		if (r < 0) {
			release_ids(c, ids, i);
			return r;
		}
	}
	return 0;
}

static struct kv_seq *seq_new(struct kv_client *c)
{
	struct kv_seq *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->c = c;
	s->tail = calloc(c->block_tokens, sizeof(*s->tail));
	if (!s->tail) {
		free(s);
		return NULL;
	}
	return s;
}

/* Kept for the blocks hashed later, as tokens fill them. */
static int copy_extra(struct kv_seq *s, const struct kv_extra_keys *x)
{
	if (!x)
		return 0;
	if (x->cache_salt_len) {
		if (!x->cache_salt)
			return -EINVAL;
		s->salt = malloc(x->cache_salt_len);
		if (!s->salt)
			return -ENOMEM;
		memcpy(s->salt, x->cache_salt, x->cache_salt_len);
		s->salt_len = x->cache_salt_len;
	}
	if (x->lora_id && *x->lora_id) {
		s->lora_id = strdup(x->lora_id);
		if (!s->lora_id)
			return -ENOMEM;
	}
	if (x->nr_mm) {
		if (!x->mm)
			return -EINVAL;
		s->mm = malloc(x->nr_mm * sizeof(*s->mm));
		if (!s->mm)
			return -ENOMEM;
		memcpy(s->mm, x->mm, x->nr_mm * sizeof(*s->mm));
		s->nr_mm = x->nr_mm;
	}
	return 0;
}

static const struct kv_hash *last_hash(const struct kv_seq *s)
{
	return s->nr_hashed ? &s->hashes[s->nr_hashed - 1] : NULL;
}

/* Hash the full blocks of @tokens, which start at block nr_hashed. */
static int hash_more(struct kv_seq *s, const uint32_t *tokens, size_t n)
{
	struct kv_extra_keys x = {
		.lora_id = s->lora_id, .mm = s->mm, .nr_mm = s->nr_mm,
		.cache_salt = s->salt, .cache_salt_len = s->salt_len,
	};
	unsigned bt = s->c->block_tokens;
	int ret;

	ret = kv_hash_blocks(s->c->hash_algo, last_hash(s),
			     (size_t)s->nr_hashed * bt, tokens, n, bt, &x,
			     s->hashes + s->nr_hashed);
	if (ret < 0)
		return ret;
	s->nr_hashed += (uint32_t)ret;
	return 0;
}

/*
 * Lookup of the full blocks that cover at most len - 1 tokens (an engine
 * must compute the last prompt token for its logits, as vLLM does), and
 * blocks for all len tokens, in one round trip.
 */
static int seq_alloc_prompt(struct kv_seq *s)
{
	unsigned bt = s->c->block_tokens;
	uint32_t need = (uint32_t)((s->len + bt - 1) / bt);
	uint32_t n_lookup = (uint32_t)((s->len - 1) / bt);
	int h;

	if (n_lookup > s->nr_hashed)
		n_lookup = s->nr_hashed;
	h = kv_alloc_prefix(s->c, s->hashes, n_lookup, need, s->blocks);
	if (h < 0)
		return h;
	s->nr_blocks = need;
	s->nr_committed = (uint32_t)h;
	s->hit_tokens = (size_t)h * bt;
	return 0;
}

static int seq_open(struct kv_client *c, const uint32_t *tokens,
		    size_t n_tokens, const struct kv_extra_keys *extra,
		    struct kv_seq **out)
{
	struct kv_seq *s;
	unsigned bt;
	int ret;

	if (out)
		*out = NULL;
	if (!c || !tokens || !n_tokens || !out)
		return -EINVAL;
	bt = c->block_tokens;
	if (n_tokens / bt >= KV_MAX_IDS)
		return -E2BIG;
	s = seq_new(c);
	if (!s)
		return -ENOMEM;
	ret = copy_extra(s, extra);
	if (!ret)
		ret = seq_reserve(s, (uint32_t)((n_tokens + bt - 1) / bt));
	if (!ret)
		ret = hash_more(s, tokens, n_tokens);
	if (ret)
		goto err_free;
	s->len = n_tokens;
	s->n_tail = (uint32_t)(n_tokens % bt);
	memcpy(s->tail, tokens + n_tokens - s->n_tail,
	       s->n_tail * sizeof(*tokens));
	ret = seq_alloc_prompt(s);
	if (ret)
		goto err_free;
	*out = s;
	return 0;

err_free:
	seq_free(s);
	return ret;
}

static int seq_open_hashes(struct kv_client *c, const struct kv_hash *hashes,
			   size_t n_hashes, const uint32_t *tail,
			   size_t n_tail, struct kv_seq **out)
{
	struct kv_seq *s;
	unsigned bt;
	int ret;

	if (out)
		*out = NULL;
	if (!c || !out || (n_hashes && !hashes) || (n_tail && !tail) ||
	    !(n_hashes + n_tail))
		return -EINVAL;
	bt = c->block_tokens;
	if (n_tail >= bt)
		return -EINVAL;
	if (n_hashes >= KV_MAX_IDS)
		return -E2BIG;
	s = seq_new(c);
	if (!s)
		return -ENOMEM;
	ret = seq_reserve(s, (uint32_t)(n_hashes + 1));
	if (ret)
		goto err_free;
	memcpy(s->hashes, hashes, n_hashes * sizeof(*hashes));
	s->nr_hashed = (uint32_t)n_hashes;
	s->len = n_hashes * bt + n_tail;
	s->n_tail = (uint32_t)n_tail;
	memcpy(s->tail, tail, n_tail * sizeof(*tail));
	ret = seq_alloc_prompt(s);
	if (ret)
		goto err_free;
	*out = s;
	return 0;

err_free:
	seq_free(s);
	return ret;
}

/*
 * Publish every hashed block not yet committed. A block that
 * deduplicates to a cached one is replaced in the block table.
 */
static int seq_commit(struct kv_seq *s)
{
	static const struct kv_hash root;
	uint32_t n, i, first;
	struct kv_commit *e;
	int ret;

	if (!s)
		return -EINVAL;
	n = s->nr_hashed - s->nr_committed;
	if (!n)
		return 0;
	if (n > chunk(s->c, sizeof(*e)))
		n = chunk(s->c, sizeof(*e));	/* the rest in the next turn */
	e = calloc(n, sizeof(*e));
	if (!e)
		return -ENOMEM;
	first = s->nr_committed;
	for (i = 0; i < n; i++) {
		uint32_t b = first + i;

		e[i].id = s->blocks[b];
		e[i].hash = s->hashes[b];
		e[i].parent = b ? s->hashes[b - 1] : root;
	}
	ret = kv_commit(s->c, e, n);
	if (ret >= 0) {
		for (i = 0; i < n; i++)
			s->blocks[first + i] = e[i].id;
		s->nr_committed += n;
		ret = 0;
	}
	free(e);
	if (!ret && s->nr_committed < s->nr_hashed)
		return seq_commit(s);
	return ret;
}

static int seq_append(struct kv_seq *s, const uint32_t *tokens, size_t n)
{
	unsigned bt;
	uint32_t need;
	int ret;

	if (!s || (n && !tokens))
		return -EINVAL;
	bt = s->c->block_tokens;
	if (n > (size_t)KV_MAX_IDS * bt)
		return -E2BIG;
	/* Blocks filled before this call have their KV written by now. */
	ret = seq_commit(s);
	if (ret)
		return ret;
	need = (uint32_t)((s->len + n + bt - 1) / bt);
	ret = seq_reserve(s, need + 1);
	if (ret)
		return ret;
	if (need > s->nr_blocks) {
		ret = kv_alloc(s->c, need - s->nr_blocks,
			       s->blocks + s->nr_blocks);
		if (ret < 0)
			return ret;
		s->nr_blocks = need;
	}
	/* Token by token, so that an error leaves the seq consistent. */
	for (size_t i = 0; i < n; i++) {
		s->tail[s->n_tail++] = tokens[i];
		if (s->n_tail == bt) {
			ret = hash_more(s, s->tail, bt);
			if (ret) {
				s->n_tail--;	/* this token was not added */
				return ret;
			}
			s->n_tail = 0;
		}
		s->len++;
	}
	return 0;
}

static int seq_fork(struct kv_seq *s, struct kv_seq **out)
{
	struct kv_client *c;
	struct kv_seq *f;
	int ret;

	if (out)
		*out = NULL;
	if (!s || !out)
		return -EINVAL;
	c = s->c;
	/* The child shares full blocks: publish them first. */
	ret = seq_commit(s);
	if (ret)
		return ret;
	f = seq_new(c);
	if (!f)
		return -ENOMEM;
	ret = seq_reserve(f, s->cap);
	if (!ret)
		ret = copy_extra(f, &(struct kv_extra_keys){
			.lora_id = s->lora_id, .mm = s->mm, .nr_mm = s->nr_mm,
			.cache_salt = s->salt, .cache_salt_len = s->salt_len });
	if (ret)
		goto err_free;
	memcpy(f->blocks, s->blocks, s->nr_blocks * sizeof(*f->blocks));
	memcpy(f->hashes, s->hashes, s->nr_hashed * sizeof(*f->hashes));
	memcpy(f->tail, s->tail, s->n_tail * sizeof(*f->tail));
	f->len = s->len;
	f->hit_tokens = s->hit_tokens;
	f->nr_blocks = s->nr_blocks;
	f->nr_hashed = s->nr_hashed;
	f->nr_committed = s->nr_committed;
	f->n_tail = s->n_tail;
	if (!f->nr_blocks)
		goto out;
	ret = ref_ids(c, f->blocks, f->nr_blocks);
	if (ret < 0)
		goto err_free;
	if (!f->n_tail)
		goto out;
	/* Copy on write of the partial last block, now: kvd copies it (on
	 * the device for cuda) and swaps the child's ref for the copy's. */
	ret = kv_cow(c, &f->blocks[f->nr_blocks - 1], 1);
	if (ret < 0)
		goto err_unref;
out:
	*out = f;
	return 0;

err_unref:
	release_ids(c, f->blocks, f->nr_blocks);
err_free:
	seq_free(f);
	return ret;
}

static int seq_close(struct kv_seq *s)
{
	int ret = 0;

	if (!s)
		return -EINVAL;
	if (s->nr_blocks)
		ret = release_ids(s->c, s->blocks, s->nr_blocks);
	seq_free(s);
	return ret;
}

int kv_seq_open(struct kv_client *c, const uint32_t *tokens, size_t n_tokens,
		const struct kv_extra_keys *extra, struct kv_seq **out)
{
	return __kv_failed(c, "kv_seq_open",
			  seq_open(c, tokens, n_tokens, extra, out));
}

int kv_seq_open_hashes(struct kv_client *c, const struct kv_hash *hashes,
		       size_t n_hashes, const uint32_t *tail, size_t n_tail,
		       struct kv_seq **out)
{
	return __kv_failed(c, "kv_seq_open_hashes",
			  seq_open_hashes(c, hashes, n_hashes, tail, n_tail,
					  out));
}

int kv_seq_append(struct kv_seq *s, const uint32_t *tokens, size_t n)
{
	return __kv_failed(s ? s->c : NULL, "kv_seq_append",
			  seq_append(s, tokens, n));
}

int kv_seq_commit(struct kv_seq *s)
{
	return __kv_failed(s ? s->c : NULL, "kv_seq_commit", seq_commit(s));
}

int kv_seq_fork(struct kv_seq *s, struct kv_seq **out)
{
	return __kv_failed(s ? s->c : NULL, "kv_seq_fork", seq_fork(s, out));
}

int kv_seq_close(struct kv_seq *s)
{
	struct kv_client *c = s ? s->c : NULL;

	return __kv_failed(c, "kv_seq_close", seq_close(s));
}

const char *kv_last_error(const struct kv_client *c)
{
	return c ? c->last_error : "";
}

const kv_block_t *kv_seq_block_table(const struct kv_seq *s, uint32_t *nr)
{
	if (!s)
		return NULL;
	if (nr)
		*nr = s->nr_blocks;
	return s->blocks;
}

size_t kv_seq_len(const struct kv_seq *s)
{
	return s ? s->len : 0;
}

size_t kv_seq_hit_tokens(const struct kv_seq *s)
{
	return s ? s->hit_tokens : 0;
}
