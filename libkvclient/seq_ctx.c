// SPDX-License-Identifier: MIT
/*
 * The context policy of a kv_seq: which policy it takes at open, which
 * of its tokens and blocks it keeps, and what it tells the kernels (the
 * kept range in table space, the position of each slot). Geometry only:
 * no request to kvd is made here (seq.c makes them).
 *
 * Conventions, as the papers and engines use them: a sliding window of W
 * keeps the newest W tokens, the one being decoded included (Mistral,
 * arXiv:2310.06825, section 2); attention sinks keep the first S tokens
 * beside it (StreamingLLM, arXiv:2309.17453, section 3.2: S = 4, the BOS
 * token among them), and give the cached tokens contiguous positions
 * (KV_POS_CACHE, its "positions within the cache").
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "seq.h"

int kv_ctx_info(const struct kv_client *c, uint32_t *max_context,
		uint32_t *refused, struct kv_ctx_policy *def)
{
	if (!c)
		return -EINVAL;
	if (max_context)
		*max_context = c->max_context;
	if (refused)
		*refused = c->ctx_refused;
	if (def)
		*def = c->ctx_default;
	return 0;
}

/* Tokens a dropping policy keeps (its sinks + window), else 0. */
static uint64_t kept_tokens(const struct kv_ctx_policy *p)
{
	if (p->kind != KV_CTX_WINDOW && p->kind != KV_CTX_SINKS)
		return 0;
	return (uint64_t)p->sinks + p->window + !!(p->flags & KV_CTX_BOS_EXTRA);
}

/* Does @c's namespace take policy @p? The reason in *@why if not. */
static int ns_check(const struct kv_client *c, const struct kv_ctx_policy *p,
		    const char **why)
{
	int ret;

	if (c->opaque && (p->kind == KV_CTX_WINDOW || p->kind == KV_CTX_SINKS ||
			  (p->flags & KV_CTX_DROP_OLDEST))) {
		*why = "an opaque namespace cannot be masked (window, sinks and truncate drop need kvd's layout)";
		return -EINVAL;
	}
	ret = kv_ctx_policy_check(p, c->max_context, why);
	if (ret)
		return ret;
	if (c->ctx_refused & (1U << p->kind)) {
		*why = "the namespace's model does not support it (kvd.conf context_policies)";
		return -EINVAL;
	}
	return 0;
}

/* As ns_check, the reason naming the policy, its figures, its source. */
static int ns_takes(struct kv_client *c, const struct kv_ctx_policy *p,
		    const char **why)
{
	const char *r = NULL;
	char pol[64] = "?";
	int ret = ns_check(c, p, &r);
	uint64_t keep = kept_tokens(p);

	if (!ret)
		return 0;
	kv_ctx_policy_format(p, pol, sizeof(pol));
	if (c->max_context && keep > c->max_context)
		snprintf(c->ctx_why, sizeof(c->ctx_why),
			 "%s%s keeps %llu tokens, above max_context %u",
			 p == &c->ctx_default ? "the namespace's default policy " : "",
			 pol, (unsigned long long)keep, c->max_context);
	else
		snprintf(c->ctx_why, sizeof(c->ctx_why), "%s%s: %s",
			 p == &c->ctx_default ? "the namespace's default policy " : "",
			 pol, r ? r : "refused");
	*why = c->ctx_why;
	return ret;
}

static void set_commit_end(struct kv_seq *s, uint64_t end)
{
	uint64_t lim = end / s->c->block_tokens;

	s->commit_end = end;
	s->hash_limit = lim < UINT32_MAX ? (uint32_t)lim : UINT32_MAX;
}

int __kv_seq_set_policy(struct kv_seq *s, const struct kv_ctx_policy *p,
			const char **why)
{
	struct kv_client *c = s->c;
	uint32_t bt = c->block_tokens;
	int ret;

	if (!p)
		p = &c->ctx_default;
	ret = ns_takes(c, p, why);
	if (ret)
		return ret;
	s->policy = *p;
	s->max_context = c->max_context;
	s->commit_end = UINT64_MAX;
	s->hash_limit = UINT32_MAX;
	switch (p->kind) {
	case KV_CTX_NONE:
		return 0;
	case KV_CTX_TRUNCATE:
		if (!(p->flags & KV_CTX_DROP_OLDEST))
			return 0;
		s->window = c->max_context;
		break;
	default:
		s->head = p->sinks + !!(p->flags & KV_CTX_BOS_EXTRA);
		s->window = p->window;
		break;
	}
	s->drops = true;
	s->head_blocks = (uint32_t)((s->head + bt - 1) / bt);
	/* What is filled before the first drop was computed over the whole
	 * prefix: it is the KV a sequence without a policy has. */
	set_commit_end(s, s->head + s->window);
	return 0;
}

/* Nothing from token @end on is committed. */
void __kv_seq_cut_at(struct kv_seq *s, uint64_t end)
{
	if (end < s->commit_end)
		set_commit_end(s, end);
}

/*
 * Tokens [@old_len, @new_len) come in and length @new_len drops some of
 * them at once: they never had a slot, so no block holding one may be
 * committed (its bytes there were never written).
 */
void __kv_seq_cut(struct kv_seq *s, uint64_t old_len, uint64_t new_len)
{
	uint64_t from;

	if (!__kv_seq_dropping(s, new_len))
		return;
	from = old_len > s->head ? old_len : s->head;
	if (from < new_len - s->window)
		__kv_seq_cut_at(s, from);
}

/* Are tokens dropped at length @len? */
bool __kv_seq_dropping(const struct kv_seq *s, uint64_t len)
{
	return s->drops && len > s->head + s->window;
}

/* The original blocks dropped between head and window at length @len. */
uint64_t __kv_seq_gap(const struct kv_seq *s, uint64_t len)
{
	uint64_t first;

	if (!__kv_seq_dropping(s, len))
		return 0;
	first = (len - s->window) / s->c->block_tokens;
	return first > s->head_blocks ? first - s->head_blocks : 0;
}

/* Is original block @ob kept, given @gap? */
bool __kv_seq_kept(const struct kv_seq *s, uint64_t gap, uint64_t ob)
{
	return ob < s->head_blocks || ob >= s->head_blocks + gap;
}

/* The original block of table entry @ti. */
uint64_t __kv_seq_ob(const struct kv_seq *s, uint32_t ti)
{
	return ti < s->head_blocks ? ti : ti + s->gap;
}

/* Kept blocks of length @new_len past those of @old_len (0: none yet). */
uint32_t __kv_seq_fresh(const struct kv_seq *s, uint64_t old_len,
			uint64_t new_len, uint64_t gap)
{
	uint64_t bt = s->c->block_tokens, hb = s->head_blocks;
	uint64_t from = (old_len + bt - 1) / bt;	/* first new block */
	uint64_t to = (new_len + bt - 1) / bt;		/* past the last */
	uint64_t n = 0, lo;

	if (from < hb)
		n += (to < hb ? to : hb) - from;
	lo = from > hb + gap ? from : hb + gap;
	if (to > lo)
		n += to - lo;
	return (uint32_t)n;
}

int kv_seq_range(const struct kv_seq *s, struct kv_seq_range *r)
{
	uint64_t shift;
	bool drop;

	if (!s || !r)
		return -EINVAL;
	drop = __kv_seq_dropping(s, s->len);
	shift = s->gap * s->c->block_tokens;
	memset(r, 0, sizeof(*r));
	r->policy = s->policy;
	r->nr_blocks = s->nr_blocks;
	r->context_len = (uint32_t)(s->len - shift);
	r->len = s->len;
	r->kept = drop ? s->head + s->window : s->len;
	r->dropped = s->len - r->kept;
	r->commit_end = s->len < s->commit_end ? s->len : s->commit_end;
	if (drop) {
		r->sink_len = (uint32_t)s->head;
		r->window_start = (uint32_t)(s->len - s->window - shift);
	}
	return 0;
}

/* Position of original position @p in convention @conv, or -1. */
static int64_t position(const struct kv_seq *s, int conv, uint64_t p)
{
	uint64_t win;

	if (p >= s->len)
		return -1;
	if (!__kv_seq_dropping(s, s->len))
		return (int64_t)p;
	win = s->len - s->window;
	if (p >= s->head && p < win)
		return -1;
	if (conv == KV_POS_ORIGINAL || p < s->head)
		return (int64_t)p;
	return (int64_t)(s->head + (p - win));
}

int kv_seq_positions(const struct kv_seq *s, int conv, int64_t *pos,
		     size_t n)
{
	uint32_t bt;
	uint64_t slots;

	if (!s || (n && !pos) ||
	    (conv != KV_POS_ORIGINAL && conv != KV_POS_CACHE))
		return -EINVAL;
	bt = s->c->block_tokens;
	slots = (uint64_t)s->nr_blocks * bt;
	if (slots > INT_MAX)
		return -EINVAL;
	for (uint64_t i = 0; i < n && i < slots; i++) {
		uint64_t ob = __kv_seq_ob(s, (uint32_t)(i / bt));

		pos[i] = position(s, conv, ob * bt + i % bt);
	}
	return (int)slots;
}
