// SPDX-License-Identifier: MIT
/*
 * The offline figures a replay is checked against: what an infinite cache
 * would hit (the bound), the lock-step schedule of requests over engine
 * processes, and the peak footprint of four allocators over it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "trace_int.h"

/* ---- offline analysis ---- */

/*
 * A u64 -> u32 map with open addressing (linear probing), for block
 * keys: sub-block ids, or the first 8 bytes of a block hash.
 */
struct kmap {
	uint64_t	*keys;
	uint32_t	*vals;
	size_t		mask, nr;
	bool		has_zero;
	uint32_t	zero;
};

static int kmap_init(struct kmap *m, size_t expect)
{
	size_t cap = 1024;

	memset(m, 0, sizeof(*m));
	while (cap < 2 * expect)
		cap *= 2;
	m->keys = calloc(cap, sizeof(*m->keys));
	m->vals = calloc(cap, sizeof(*m->vals));
	m->mask = cap - 1;
	return m->keys && m->vals ? 0 : -ENOMEM;
}

static void kmap_free(struct kmap *m)
{
	free(m->keys);
	free(m->vals);
}

static int kmap_grow(struct kmap *m)
{
	struct kmap n;

	if (kmap_init(&n, m->mask + 1))
		return -ENOMEM;
	for (size_t i = 0; i <= m->mask; i++) {
		size_t j;

		if (!m->keys[i])
			continue;
		for (j = kvb_mix64(m->keys[i]) & n.mask; n.keys[j];
		     j = (j + 1) & n.mask)
			;
		n.keys[j] = m->keys[i];
		n.vals[j] = m->vals[i];
	}
	n.nr = m->nr;
	n.has_zero = m->has_zero;
	n.zero = m->zero;
	kmap_free(m);
	*m = n;
	return 0;
}

/* The value of @key, inserted as 0 (and *@added set) when absent. */
static uint32_t *kmap_get(struct kmap *m, uint64_t key, bool *added)
{
	size_t j;

	*added = false;
	if (!key) {
		*added = !m->has_zero;
		m->has_zero = true;
		return &m->zero;
	}
	if (2 * (m->nr + 1) > m->mask + 1 && kmap_grow(m))
		return NULL;
	for (j = kvb_mix64(key) & m->mask; m->keys[j]; j = (j + 1) & m->mask)
		if (m->keys[j] == key)
			return &m->vals[j];
	m->keys[j] = key;
	m->vals[j] = 0;
	m->nr++;
	*added = true;
	return &m->vals[j];
}

static size_t kmap_size(const struct kmap *m)
{
	return m->nr + m->has_zero;
}

/* Scratch for one request's keys. */
struct keybuf {
	uint32_t	*tok;
	struct kv_hash	*hash;
	uint64_t	*keys;
};

static int keybuf_init(struct keybuf *k, const struct kvb_trace *tr,
		       unsigned block_tokens)
{
	size_t blocks = tr->max_total / block_tokens + 1;

	k->tok = malloc((tr->max_total + 1) * sizeof(*k->tok));
	k->hash = malloc(blocks * sizeof(*k->hash));
	k->keys = malloc(blocks * sizeof(*k->keys));
	return k->tok && k->hash && k->keys ? 0 : -ENOMEM;
}

static void keybuf_free(struct keybuf *k)
{
	free(k->tok);
	free(k->hash);
	free(k->keys);
}

/*
 * Keys of request @i's full blocks that can be shared: IDS traces, its
 * prompt's sub-block ids (the rest of its blocks are unique); TOKENS
 * traces, the hashes of every full block of prompt + output, at salt 0.
 * *@nprompt: how many of them are prompt blocks. Returns their number.
 */
static int request_keys(const struct kvb_trace *tr, size_t i,
			unsigned block_tokens, struct keybuf *k,
			size_t *nprompt)
{
	const struct kvb_treq *r = &tr->reqs[i];
	int n;

	if (tr->kind == KVB_TRACE_IDS) {
		*nprompt = kvb_trace_subblocks(tr, i, block_tokens, k->keys);
		return (int)*nprompt;
	}
	kvb_trace_prompt(tr, i, 0, k->tok);
	kvb_trace_fill(tr, i, 0, r->in_len, r->in_len + r->out_len,
		       k->tok + r->in_len);
	n = kv_hash_blocks(KV_HASH_XXH3_128, NULL, 0, k->tok,
			   r->in_len + r->out_len, block_tokens, NULL,
			   k->hash);
	if (n < 0)
		return n;
	for (int j = 0; j < n; j++)
		memcpy(&k->keys[j], k->hash[j].b, sizeof(uint64_t));
	*nprompt = r->in_len / block_tokens;
	return n;
}

/* ---- the token-granular bound: a radix tree of the requests ---- */

/*
 * A path-compressed trie of the token sequences seen so far. Each node
 * but the root is the end of an edge whose label is the run arena[off,
 * off + len); a node's children are found by (node, first token of the
 * edge) in one kmap. A request's walk matches as far as the tree goes
 * (its longest common prefix with every earlier request at once), then
 * adds only the rest: one leaf, and one split node where it left an
 * edge midway. So the tree holds each distinct token once, at most two
 * nodes per request, and never a node per token.
 */
struct radix_node {
	uint64_t	off;		/* label: arena[off, off + len) */
	uint32_t	len;
};

struct radix {
	struct radix_node *node;
	size_t		nr_nodes, nodes_cap;
	uint32_t	*arena;
	size_t		nr_tokens, arena_cap;
	struct kmap	child;		/* node << 32 | token -> child */
};

static int radix_init(struct radix *r, size_t expect)
{
	memset(r, 0, sizeof(*r));
	if (kvb_grow((void **)&r->node, &r->nodes_cap, 2 * expect + 1,
		     sizeof(*r->node)) ||
	    kmap_init(&r->child, 2 * expect + 1))
		return -ENOMEM;
	r->node[0] = (struct radix_node){ 0 };	/* the root */
	r->nr_nodes = 1;
	return 0;
}

static void radix_free(struct radix *r)
{
	free(r->node);
	free(r->arena);
	kmap_free(&r->child);
}

static uint64_t radix_key(size_t node, uint32_t token)
{
	return (uint64_t)node << 32 | token;
}

/* A new node labelled @t[0, @n) (copied into the arena), or -ENOMEM. */
static int64_t radix_leaf(struct radix *r, const uint32_t *t, size_t n)
{
	if (kvb_grow((void **)&r->node, &r->nodes_cap, r->nr_nodes + 1,
		     sizeof(*r->node)) ||
	    kvb_grow((void **)&r->arena, &r->arena_cap, r->nr_tokens + n,
		     sizeof(*r->arena)))
		return -ENOMEM;
	memcpy(r->arena + r->nr_tokens, t, n * sizeof(*t));
	r->node[r->nr_nodes] = (struct radix_node){ r->nr_tokens,
						    (uint32_t)n };
	r->nr_tokens += n;
	return (int64_t)r->nr_nodes++;
}

/* How many of @t[0, @n) the label of node @c matches. */
static size_t radix_match(const struct radix *r, size_t c,
			  const uint32_t *t, size_t n)
{
	const uint32_t *l = r->arena + r->node[c].off;
	size_t k = 0, len = r->node[c].len;

	while (k < len && k < n && l[k] == t[k])
		k++;
	return k;
}

/* Child @c (in *@slot) matched @k < its length: split it there. */
static int64_t radix_split(struct radix *r, uint32_t *slot, size_t c,
			   size_t k)
{
	struct radix_node *n;
	uint32_t *v;
	bool added;

	if (kvb_grow((void **)&r->node, &r->nodes_cap, r->nr_nodes + 1,
		     sizeof(*r->node)))
		return -ENOMEM;
	/* *slot first: it is a kmap slot, which the next kmap_get moves */
	*slot = (uint32_t)r->nr_nodes;
	n = &r->node[r->nr_nodes];
	*n = (struct radix_node){ r->node[c].off, (uint32_t)k };
	r->node[c].off += k;
	r->node[c].len -= (uint32_t)k;
	v = kmap_get(&r->child, radix_key(r->nr_nodes,
					  r->arena[r->node[c].off]), &added);
	if (!v)
		return -ENOMEM;
	*v = (uint32_t)c;
	return (int64_t)r->nr_nodes++;
}

/* A new leaf labelled @t[0, @n), the child that kmap slot *@slot names. */
static int radix_hang(struct radix *r, uint32_t *slot, const uint32_t *t,
		      size_t n)
{
	int64_t leaf = radix_leaf(r, t, n);

	if (leaf < 0)
		return (int)leaf;
	*slot = (uint32_t)leaf;
	return 0;
}

/*
 * radix_insert - add @t[0, @n) to the tree; *@lcp gets its longest
 * common prefix with what the tree held. 0, -ENOMEM, or -E2BIG past
 * 2^32 - 1 nodes.
 */
static int radix_insert(struct radix *r, const uint32_t *t, size_t n,
			size_t *lcp)
{
	size_t cur = 0, i = 0, c, k;
	uint32_t *slot, *v;
	int64_t m;
	bool added;

	if (r->nr_nodes + 2 > UINT32_MAX)
		return -E2BIG;
	for (;;) {
		*lcp = i;
		if (i == n)
			return 0;
		slot = kmap_get(&r->child, radix_key(cur, t[i]), &added);
		if (!slot)
			return -ENOMEM;
		if (added)
			return radix_hang(r, slot, t + i, n - i);
		c = *slot;
		k = radix_match(r, c, t + i, n - i);
		if (k == r->node[c].len) {
			cur = c;
			i += k;
			continue;
		}
		*lcp = i + k;
		if (i + k == n)
			return 0;	/* ends inside an edge: nothing new */
		m = radix_split(r, slot, c, k);
		if (m < 0)
			return (int)m;
		v = kmap_get(&r->child, radix_key((size_t)m, t[i + k]),
			     &added);
		if (!v)
			return -ENOMEM;
		return radix_hang(r, v, t + i + k, n - i - k);
	}
}

/* Request @i's tokens @tok (prompt + output) into the tree; its hits. */
static int token_bound_add(struct radix *r, const struct kvb_trace *tr,
			   size_t i, const uint32_t *tok, struct kvb_bound *b)
{
	const struct kvb_treq *q = &tr->reqs[i];
	size_t lcp;
	int ret;

	ret = radix_insert(r, tok, (size_t)q->in_len + q->out_len, &lcp);
	if (ret)
		return ret;
	/* prompt tokens only, and counted as the block bound counts them
	 * (a whole prompt seen before is a whole hit), so that the two
	 * differ by granularity alone */
	if (lcp > q->in_len)
		lcp = q->in_len;
	b->token_hits += lcp;
	return 0;
}

int kvb_trace_bound(const struct kvb_trace *tr, unsigned block_tokens,
		    struct kvb_bound *b)
{
	struct keybuf k = { 0 };
	struct kmap m = { 0 };
	struct radix rx = { 0 };
	int ret = -ENOMEM;

	memset(b, 0, sizeof(*b));
	b->have_tokens = tr->kind == KVB_TRACE_TOKENS;
	if (keybuf_init(&k, tr, block_tokens) ||
	    kmap_init(&m, tr->sum_in / block_tokens / 2 + 1024) ||
	    (b->have_tokens && radix_init(&rx, tr->nr)))
		goto out;
	for (size_t i = 0; i < tr->nr; i++) {
		const struct kvb_treq *r = &tr->reqs[i];
		size_t np;
		int n = request_keys(tr, i, block_tokens, &k, &np);
		bool added;
		int err = 0;

		if (n >= 0 && b->have_tokens)
			err = token_bound_add(&rx, tr, i, k.tok, b);
		if (n < 0 || err) {
			ret = n < 0 ? n : err;
			goto out;
		}
		b->prompt_tokens += r->in_len;
		b->refs += np;
		for (size_t j = 0; j < np; j++) {
			if (!kmap_get(&m, k.keys[j], &added))
				goto out;
			b->hits += !added;
		}
		for (size_t j = np; j < (size_t)n; j++)
			if (!kmap_get(&m, k.keys[j], &added))
				goto out;
		if (tr->kind == KVB_TRACE_IDS)
			b->footprint += (r->in_len + r->out_len) /
					block_tokens - np;
	}
	b->unique = b->refs - b->hits;
	b->footprint += kmap_size(&m);
	b->radix_tokens = rx.nr_tokens;
	b->radix_nodes = rx.nr_nodes;
	ret = 0;
out:
	keybuf_free(&k);
	kmap_free(&m);
	radix_free(&rx);
	return ret;
}

/* ---- allocator footprints ---- */

struct sim_live {
	uint64_t	*keys;
	size_t		nkeys;
	uint64_t	len;
};

struct sim {
	unsigned	bt;
	struct kvb_alloc_sim *out;
	struct kmap	refs;		/* live holders per key */
	uint64_t	distinct;	/* keys with holders */
	uint64_t	private_blocks;
	uint64_t	st, ch, pg;	/* current slots */
	uint64_t	live;
};

static uint64_t round_up(uint64_t v, uint64_t unit)
{
	return (v + unit - 1) / unit * unit;
}

static int sim_hold(struct sim *s, struct sim_live *l, int sign)
{
	uint64_t chunked = round_up(l->len, s->out->chunk);
	uint64_t paged = round_up(l->len, s->bt);
	uint64_t priv = paged / s->bt - l->nkeys;
	bool added;

	for (size_t j = 0; j < l->nkeys; j++) {
		uint32_t *v = kmap_get(&s->refs, l->keys[j], &added);

		if (!v)
			return -ENOMEM;
		if (sign > 0 && (*v)++ == 0)
			s->distinct++;
		else if (sign < 0 && --(*v) == 0)
			s->distinct--;
	}
	if (sign > 0) {
		s->st += s->out->max_model_len;
		s->ch += chunked;
		s->pg += paged;
		s->private_blocks += priv;
		s->live++;
	} else {
		s->st -= s->out->max_model_len;
		s->ch -= chunked;
		s->pg -= paged;
		s->private_blocks -= priv;
		s->live--;
	}
	return 0;
}

static void sim_peak(struct sim *s)
{
	struct kvb_alloc_sim *o = s->out;
	uint64_t shared = (s->distinct + s->private_blocks) * s->bt;

	if (s->st > o->static_slots) {
		o->static_slots = s->st;
		o->peak_live = s->live;
	}
	if (s->ch > o->chunked_slots)
		o->chunked_slots = s->ch;
	if (s->pg > o->paged_slots)
		o->paged_slots = s->pg;
	if (shared > o->shared_slots)
		o->shared_slots = shared;
}

int kvb_sched_lockstep(size_t nr, unsigned procs, unsigned live,
		       struct kvb_event **out, size_t *nev)
{
	struct kvb_event *ev;
	size_t *cnt, n = 0;

	ev = malloc((2 * nr + 1) * sizeof(*ev));
	cnt = calloc(procs, sizeof(*cnt));
	if (!ev || !cnt) {
		free(ev);
		free(cnt);
		return -ENOMEM;
	}
	for (size_t i = 0; i < nr; i++) {
		size_t p = i % procs;

		if (cnt[p] == live) {
			/* Its oldest is the request admitted live turns ago. */
			ev[n++] = (struct kvb_event){ .t = 2 * i,
				.req = (uint32_t)(i - (size_t)live * procs),
				.sign = -1 };
			cnt[p]--;
		}
		ev[n++] = (struct kvb_event){ .t = 2 * i + 1,
					      .req = (uint32_t)i, .sign = 1 };
		cnt[p]++;
	}
	free(cnt);
	*out = ev;
	*nev = n;
	return 0;
}

int kvb_trace_alloc_sim(const struct kvb_trace *tr, unsigned block_tokens,
			const struct kvb_event *ev, size_t nev,
			struct kvb_alloc_sim *out)
{
	struct sim s = { .bt = block_tokens, .out = out };
	struct sim_live *held;
	struct keybuf k = { 0 };
	int ret = -ENOMEM;

	out->static_slots = out->chunked_slots = out->paged_slots = 0;
	out->shared_slots = out->peak_live = 0;
	held = calloc(tr->nr, sizeof(*held));
	if (!held || keybuf_init(&k, tr, block_tokens) ||
	    kmap_init(&s.refs, 64 * (tr->max_total / block_tokens + 1)))
		goto out;
	for (size_t e = 0; e < nev; e++) {
		size_t i = ev[e].req, np;
		struct sim_live *l;
		int n;

		if (i >= tr->nr) {
			ret = -EINVAL;
			goto out;
		}
		l = &held[i];
		if (ev[e].sign < 0) {
			if (!l->keys)
				continue;	/* never admitted */
			if (sim_hold(&s, l, -1))
				goto out;
			free(l->keys);
			l->keys = NULL;
			continue;
		}
		if (l->keys)
			continue;	/* admitted twice: once counts */
		n = request_keys(tr, i, block_tokens, &k, &np);
		if (n < 0) {
			ret = n;
			goto out;
		}
		l->keys = malloc(((size_t)n + 1) * sizeof(*l->keys));
		if (!l->keys)
			goto out;
		memcpy(l->keys, k.keys, (size_t)n * sizeof(*l->keys));
		l->nkeys = (size_t)n;
		l->len = tr->reqs[i].in_len + tr->reqs[i].out_len;
		if (sim_hold(&s, l, 1))
			goto out;
		sim_peak(&s);
	}
	ret = 0;
out:
	for (size_t i = 0; held && i < tr->nr; i++)
		free(held[i].keys);
	free(held);
	keybuf_free(&k);
	kmap_free(&s.refs);
	return ret;
}
