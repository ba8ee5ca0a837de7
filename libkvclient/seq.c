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

#include "seq.h"

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

/* Table entry of original block @ob, which must be kept. */
static uint32_t table_index(const struct kv_seq *s, uint64_t ob)
{
	return (uint32_t)(ob < s->head_blocks ? ob : ob - s->gap);
}

/*
 * Full blocks of a prompt of @len tokens that get a hash: those it may
 * commit, and those its lookup may hit (a hit's bytes are whole, even
 * in a sink block whose other slots this sequence drops).
 */
static uint64_t prompt_hashes(const struct kv_seq *s, uint64_t len)
{
	uint64_t lim = s->hash_limit, full = len / s->c->block_tokens;

	if (__kv_seq_dropping(s, len) && s->head_blocks > lim)
		lim = s->head_blocks;
	return full < lim ? full : lim;
}

static int hash_prompt(struct kv_seq *s, const uint32_t *tokens, uint64_t n)
{
	return hash_more(s, tokens, prompt_hashes(s, n) * s->c->block_tokens);
}

/* Entries the arrays need for length @len: the table and the hashes. */
static uint64_t seq_need(const struct kv_seq *s, uint64_t len)
{
	uint64_t gap = __kv_seq_gap(s, len);
	uint64_t tbl = __kv_seq_fresh(s, 0, len, gap);
	uint64_t hashed = prompt_hashes(s, len);

	if (s->nr_hashed > hashed)
		hashed = s->nr_hashed;
	return tbl > hashed ? tbl : hashed;
}

/*
 * Lookup of the full blocks that cover at most len - 1 tokens (an engine
 * must compute the last prompt token for its logits, as vLLM does) and
 * lie before the first dropped token, and blocks for every kept token,
 * in one round trip.
 */
static int seq_alloc_prompt(struct kv_seq *s)
{
	unsigned bt = s->c->block_tokens;
	uint64_t gap = __kv_seq_gap(s, s->len);
	uint32_t need = __kv_seq_fresh(s, 0, s->len, gap);
	uint64_t n_lookup = (s->len - 1) / bt;
	int h;

	if (n_lookup > s->nr_hashed)
		n_lookup = s->nr_hashed;
	if (__kv_seq_dropping(s, s->len) && n_lookup > s->head_blocks)
		n_lookup = s->head_blocks;
	h = kv_alloc_prefix(s->c, s->hashes, (unsigned)n_lookup, need,
			    s->blocks);
	if (h < 0)
		return h;
	s->gap = gap;
	s->nr_blocks = need;
	s->nr_committed = (uint32_t)h;
	s->hit_tokens = (uint64_t)h * bt;
	s->host_hits = KV_CQE_HOST_HITS(s->c->last_cqe_flags);
	s->disk_hits = KV_CQE_DISK_HITS(s->c->last_cqe_flags);
	return 0;
}

/* The policy, then the prompt's length against it. */
static int seq_limits(struct kv_seq *s, const struct kv_ctx_policy *policy,
		      uint64_t n_tokens, const char **why)
{
	int ret = __kv_seq_set_policy(s, policy, why);

	if (ret)
		return ret;
	if (!s->drops && s->max_context && n_tokens > s->max_context) {
		*why = "the prompt is longer than max_context";
		return -E2BIG;
	}
	if (seq_need(s, n_tokens) >= KV_MAX_IDS) {
		*why = "the prompt needs more than 65535 blocks";
		return -E2BIG;
	}
	__kv_seq_cut(s, 0, n_tokens);	/* prompt tokens with no slot */
	return 0;
}

static int seq_open(struct kv_client *c, const uint32_t *tokens,
		    size_t n_tokens, const struct kv_extra_keys *extra,
		    const struct kv_ctx_policy *policy, struct kv_seq **out,
		    const char **why)
{
	struct kv_seq *s;
	unsigned bt;
	int ret;

	if (out)
		*out = NULL;
	if (!c || !tokens || !n_tokens || !out)
		return -EINVAL;
	bt = c->block_tokens;
	s = seq_new(c);
	if (!s)
		return -ENOMEM;
	ret = seq_limits(s, policy, n_tokens, why);
	if (!ret)
		ret = copy_extra(s, extra);
	if (!ret)
		ret = seq_reserve(s, (uint32_t)seq_need(s, n_tokens) + 1);
	if (!ret)
		ret = hash_prompt(s, tokens, n_tokens);
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
			   size_t n_tail, struct kv_seq **out,
			   const char **why)
{
	struct kv_seq *s;
	uint64_t len, nh;
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
	len = (uint64_t)n_hashes * bt + n_tail;
	ret = seq_limits(s, NULL, len, why);
	if (!ret)
		ret = seq_reserve(s, (uint32_t)seq_need(s, len) + 1);
	if (ret)
		goto err_free;
	nh = prompt_hashes(s, len);
	memcpy(s->hashes, hashes, nh * sizeof(*hashes));
	s->nr_hashed = (uint32_t)nh;
	s->len = len;
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
 * The next run of original blocks to commit: kept, hashed, from
 * nr_committed on. Blocks dropped before their commit are passed over
 * (their KV was never published; nothing else holds them).
 */
static uint32_t commit_run(struct kv_seq *s, uint32_t *first)
{
	uint64_t lo = s->head_blocks, hi = lo + s->gap;	/* dropped */
	uint64_t end = s->nr_hashed < s->hash_limit ? s->nr_hashed :
		       s->hash_limit;

	if (s->nr_committed >= lo && s->nr_committed < hi)
		s->nr_committed = hi < UINT32_MAX ? (uint32_t)hi : UINT32_MAX;
	if (s->nr_committed < lo && s->gap && end > lo)
		end = lo;
	*first = s->nr_committed;
	return end > *first ? (uint32_t)(end - *first) : 0;
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
	n = commit_run(s, &first);
	if (!n)
		return 0;
	if (n > chunk(s->c, sizeof(*e)))
		n = chunk(s->c, sizeof(*e));	/* the rest in the next turn */
	e = calloc(n, sizeof(*e));
	if (!e)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		uint32_t b = first + i;

		e[i].id = s->blocks[table_index(s, b)];
		e[i].hash = s->hashes[b];
		e[i].parent = b ? s->hashes[b - 1] : root;
	}
	ret = kv_commit(s->c, e, n);
	if (ret >= 0) {
		for (i = 0; i < n; i++)
			s->blocks[table_index(s, first + i)] = e[i].id;
		s->nr_committed += n;
		ret = 0;
	}
	free(e);
	if (!ret && commit_run(s, &first))
		return seq_commit(s);
	return ret;
}

/* How many of @n tokens the policy lets in: n, or fewer (truncate stop). */
static int seq_room(struct kv_seq *s, size_t n, size_t *take,
		    const char **why)
{
	uint64_t room;

	*take = n;
	if (s->drops || !s->max_context)
		return 0;
	room = s->max_context > s->len ? s->max_context - s->len : 0;
	if (n <= room)
		return 0;
	if (s->policy.kind == KV_CTX_NONE || !room) {
		*why = "the sequence would pass max_context";
		return -E2BIG;
	}
	*take = (size_t)room;
	return 0;
}

/*
 * Blocks for length @len: new kept ones at the end of the table, then
 * the ones the window left behind released. Nothing changes when the
 * allocation fails (the return); a failed release (kvd gone) still
 * leaves the table at @len, and is said in *@rel_err.
 */
static int seq_grow(struct kv_seq *s, uint64_t len, int *rel_err)
{
	uint64_t gap = __kv_seq_gap(s, len), hb = s->head_blocks;
	uint32_t fresh = __kv_seq_fresh(s, s->len, len, gap);
	uint32_t nr = s->nr_blocks, drop = 0;
	int ret;

	if (gap > s->gap && nr > hb)
		drop = (uint32_t)(nr - hb < gap - s->gap ? nr - hb :
				  gap - s->gap);
	ret = seq_reserve(s, (uint32_t)seq_need(s, len) + 1);
	if (!ret && nr + fresh > s->cap)
		ret = seq_reserve(s, nr + fresh);
	if (ret)
		return ret;
	if (fresh) {
		ret = kv_alloc(s->c, fresh, s->blocks + nr);
		if (ret < 0)
			return ret;
	}
	/* Out of the kept range: only this sequence's ref goes. A drop
	 * means the table reached past the head (nr > hb + drop - 1). */
	if (drop) {
		*rel_err = release_ids(s->c, s->blocks + hb, drop);
		memmove(s->blocks + hb, s->blocks + hb + drop,
			(nr + fresh - hb - drop) * sizeof(*s->blocks));
	}
	s->nr_blocks = nr + fresh - drop;
	s->gap = gap;
	return 0;
}

/*
 * The tokens themselves, once their blocks are there: a block that fills
 * is hashed while it may be committed. A hash that fails (libcrypto)
 * only stops the committing there: the sequence still takes every token.
 */
static int seq_take(struct kv_seq *s, const uint32_t *tokens, size_t take)
{
	unsigned bt = s->c->block_tokens;
	int err = 0;

	for (size_t i = 0; i < take; i++) {
		uint64_t ob = s->len / bt;

		s->tail[s->n_tail++] = tokens[i];
		s->len++;
		if (s->n_tail < bt)
			continue;
		s->n_tail = 0;
		if (ob != s->nr_hashed || ob >= s->hash_limit)
			continue;
		err = hash_more(s, s->tail, bt);
		if (err)
			__kv_seq_cut_at(s, ob * bt);
	}
	return err;
}

static int seq_append(struct kv_seq *s, const uint32_t *tokens, size_t n,
		      const char **why)
{
	int ret, rel_err = 0, hash_err;
	size_t take;

	if (!s || (n && !tokens))
		return -EINVAL;
	if (n > (size_t)KV_MAX_IDS * s->c->block_tokens)
		return -E2BIG;
	/* Blocks filled before this call have their KV written by now. */
	ret = seq_commit(s);
	if (!ret)
		ret = seq_room(s, n, &take, why);
	if (!ret && take)
		ret = seq_grow(s, s->len + take, &rel_err);
	if (ret)
		return ret;
	__kv_seq_cut(s, s->len, s->len + take);
	hash_err = seq_take(s, tokens, take);
	if (rel_err || hash_err) {
		*why = "the tokens were appended; the sequence stays usable";
		return rel_err ? rel_err : hash_err;
	}
	return take < n ? (int)take : 0;
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
	f->host_hits = s->host_hits;
	f->disk_hits = s->disk_hits;
	f->nr_blocks = s->nr_blocks;
	f->nr_hashed = s->nr_hashed;
	f->nr_committed = s->nr_committed;
	f->n_tail = s->n_tail;
	f->policy = s->policy;
	f->max_context = s->max_context;
	f->drops = s->drops;
	f->head = s->head;
	f->window = s->window;
	f->head_blocks = s->head_blocks;
	f->gap = s->gap;
	f->commit_end = s->commit_end;
	f->hash_limit = s->hash_limit;
	f->retain = s->retain;
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

/*
 * The table entries kv_seq_retain() covers, into @ids: committed, and
 * wholly below retain.end tokens. How many.
 */
static uint32_t retained_ids(const struct kv_seq *s, kv_block_t *ids)
{
	uint64_t bt = s->c->block_tokens, end = s->retain.end;
	uint32_t n = 0;

	for (uint32_t ti = 0; ti < s->nr_blocks; ti++) {
		uint64_t ob = __kv_seq_ob(s, ti);

		if (ob >= s->nr_committed || (end && (ob + 1) * bt > end))
			continue;
		ids[n++] = s->blocks[ti];
	}
	return n;
}

/* RETAIN of the blocks retained_ids() picks, in requests that fit. */
static int seq_retain_apply(struct kv_seq *s)
{
	const struct kv_retention *r = &s->retain;
	uint32_t step = chunk(s->c, sizeof(kv_block_t)), n;
	kv_block_t *ids;
	int ret = 0;

	if ((!r->priority && !r->pin_ms) || !s->nr_blocks)
		return 0;
	ids = malloc(s->nr_blocks * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	n = retained_ids(s, ids);
	for (uint32_t i = 0; i < n && !ret; i += step) {
		ret = kv_retain(s->c, ids + i, n - i < step ? n - i : step,
				r->priority, r->pin_ms, 0);
		ret = ret < 0 ? ret : 0;
	}
	free(ids);
	return ret;
}

static int seq_close(struct kv_seq *s)
{
	int ret, rel = 0;

	if (!s)
		return -EINVAL;
	ret = seq_retain_apply(s);	/* while the blocks are held */
	if (s->nr_blocks)
		rel = release_ids(s->c, s->blocks, s->nr_blocks);
	seq_free(s);
	return ret ? ret : rel;
}

int kv_seq_retain(struct kv_seq *s, const struct kv_retention *r)
{
	if (!s)
		return -EINVAL;
	if (!r) {
		s->retain = (struct kv_retention){ 0 };
		return 0;
	}
	if (r->priority > KV_PRIO_MAX || r->pin_ms > KV_PIN_MAX_MS ||
	    r->flags)
		return __kv_failed_why(s->c, "kv_seq_retain", -EINVAL,
				       "priority 0..100, pin_ms up to a week, flags 0");
	s->retain = *r;
	return 0;
}

int kv_seq_open(struct kv_client *c, const uint32_t *tokens, size_t n_tokens,
		const struct kv_extra_keys *extra, struct kv_seq **out)
{
	const char *why = NULL;

	int ret = seq_open(c, tokens, n_tokens, extra, NULL, out, &why);

	return __kv_failed_why(c, "kv_seq_open", ret, why);
}

int kv_seq_open_policy(struct kv_client *c, const uint32_t *tokens,
		       size_t n_tokens, const struct kv_extra_keys *extra,
		       const struct kv_ctx_policy *policy,
		       struct kv_seq **out)
{
	const char *why = NULL;

	int ret = seq_open(c, tokens, n_tokens, extra, policy, out, &why);

	return __kv_failed_why(c, "kv_seq_open_policy", ret, why);
}

int kv_seq_open_hashes(struct kv_client *c, const struct kv_hash *hashes,
		       size_t n_hashes, const uint32_t *tail, size_t n_tail,
		       struct kv_seq **out)
{
	const char *why = NULL;

	int ret = seq_open_hashes(c, hashes, n_hashes, tail, n_tail, out,
				  &why);

	return __kv_failed_why(c, "kv_seq_open_hashes", ret, why);
}

int kv_seq_append(struct kv_seq *s, const uint32_t *tokens, size_t n)
{
	const char *why = NULL;

	int ret = seq_append(s, tokens, n, &why);

	return __kv_failed_why(s ? s->c : NULL, "kv_seq_append", ret, why);
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

int kv_seq_hits(const struct kv_seq *s, struct kv_seq_hits *h)
{
	uint32_t all;

	if (!s || !h)
		return -EINVAL;
	all = (uint32_t)(s->hit_tokens / s->c->block_tokens);
	h->host = s->host_hits;
	h->disk = s->disk_hits;
	h->pool = all - h->host - h->disk;
	h->resv = 0;
	return 0;
}
