// SPDX-License-Identifier: MIT
/*
 * C reference of paged_attention_decode: one query token per sequence,
 * the context's K and V read through its block table, split-K over
 * partitions of partition_tokens and then reduced, exactly the algorithm
 * of the CUDA kernel (kv_kernels.h, struct kv_decode_ws), in fp32.
 *
 * A context policy masks the table-space tokens [sink, wstart) of a
 * sequence (struct kv_decode_args): they get no logit and their rows are
 * never loaded, so a table entry wholly inside that hole is never read.
 * A partition with no attended token is empty (m -inf, sum 0, o 0) and
 * adds exactly 0 to the reduction; a sequence with none gets 0.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "kv_kernels.h"

struct decode {
	const struct kv_layout		*l;
	const struct kv_decode_args	*a;
	const uint8_t			*pool;
	uint32_t			layer;
	uint32_t			partition;
	uint32_t			group;	/* query heads per kv head */
	float				*q;	/* [head_dim] */
	float				*row;	/* [head_dim]: a K or V row */
	float				*logits; /* [partition] */
	float				*m, *s;	/* [P] */
	float				*o;	/* [P][head_dim] */
	uint32_t			h0, h1;	/* the sequence's masked
						 * tokens [h0, h1) */
};

/*
 * The masked tokens [*h0, *h1) of sequence @s: [sink, wstart), or none
 * (0, 0) when the window starts at or before the sinks' end.
 */
static void seq_hole(const struct kv_decode_args *a, uint32_t s,
		     uint32_t *h0, uint32_t *h1)
{
	uint32_t sink = a->sink_lens ? a->sink_lens[s] : 0;
	uint32_t wstart = a->window_starts ? a->window_starts[s] : 0;

	*h0 = *h1 = 0;
	if (wstart > sink) {
		*h0 = sink;
		*h1 = wstart;
	}
}

/* Does [t0, t1), t0 < t1, hold a token outside the hole [h0, h1)? */
static bool range_attended(uint32_t t0, uint32_t t1, uint32_t h0,
			   uint32_t h1)
{
	return t0 < h0 || t1 > h1;
}

static bool masked(const struct decode *dc, uint32_t t)
{
	return t >= dc->h0 && t < dc->h1;
}

/* K (@v 0) or V row of @head at token @t of sequence @seq, as floats. */
static void load_row(const struct decode *dc, uint32_t seq, int v,
		     uint32_t head, uint32_t t, float *row)
{
	const struct kv_layout *l = dc->l;
	uint32_t bt = l->block_tokens, slot = t % bt;
	uint32_t id = dc->a->block_tables[(uint64_t)seq *
					  dc->a->max_blocks_per_seq + t / bt];
	const uint8_t *blk = dc->pool + (uint64_t)id * l->block_bytes;
	const uint8_t *x = blk + kv_layout_vec_off(l, dc->layer, v, head, slot);
	const float *sc = (const float *)(blk + kv_layout_scale_off(l,
							dc->layer, v));

	switch (l->quant) {
	case KV_QUANT_NONE:
		for (uint32_t d = 0; d < l->head_dim; d++)
			row[d] = __kv_load(x, l->dtype, d);
		break;
	case KV_QUANT_TOKEN:
		for (uint32_t d = 0; d < l->head_dim; d++)
			row[d] = __kv_dequant(x[d], sc[head * bt + slot],
					      l->dtype);
		break;
	default:
		sc += (uint64_t)head * l->head_dim;
		for (uint32_t d = 0; d < l->head_dim; d++)
			row[d] = __kv_dequant(x[d], sc[d], l->dtype);
		break;
	}
}

/*
 * Partition @p of (@seq, @head): m_p, s_p and o_p (normalized by s_p).
 * False, and -inf, 0 and 0, when it attends to no token.
 */
static bool decode_partition(struct decode *dc, uint32_t seq, uint32_t head,
			     uint32_t p, uint32_t ctx)
{
	uint32_t hd = dc->l->head_dim, kvh = head / dc->group;
	uint32_t t0 = p * dc->partition;
	uint32_t t1 = ctx - t0 < dc->partition ? ctx : t0 + dc->partition;
	float m = -INFINITY, sum = 0.0f, *o = dc->o + (uint64_t)p * hd;

	memset(o, 0, hd * sizeof(*o));
	dc->m[p] = m;
	dc->s[p] = sum;
	if (!range_attended(t0, t1, dc->h0, dc->h1))
		return false;
	for (uint32_t t = t0; t < t1; t++) {
		float dot = 0.0f;

		if (masked(dc, t))
			continue;
		load_row(dc, seq, 0, kvh, t, dc->row);
		for (uint32_t d = 0; d < hd; d++)
			dot += dc->q[d] * dc->row[d];
		dc->logits[t - t0] = dc->a->scale * dot;
		m = fmaxf(m, dc->logits[t - t0]);
	}
	for (uint32_t t = t0; t < t1; t++) {
		float e;

		if (masked(dc, t))
			continue;
		e = expf(dc->logits[t - t0] - m);
		sum += e;
		load_row(dc, seq, 1, kvh, t, dc->row);
		for (uint32_t d = 0; d < hd; d++)
			o[d] += e * dc->row[d];
	}
	for (uint32_t d = 0; d < hd; d++)
		o[d] /= sum;
	dc->m[p] = m;
	dc->s[p] = sum;
	return true;
}

static void decode_head(struct decode *dc, uint32_t seq, uint32_t head)
{
	const struct kv_decode_args *a = dc->a;
	uint32_t hd = dc->l->head_dim, ctx = a->context_lens[seq];
	uint64_t base = ((uint64_t)seq * a->num_heads + head) * hd;
	uint32_t np = (uint32_t)(((uint64_t)ctx + dc->partition - 1) /
				 dc->partition);
	float big = -INFINITY, total = 0.0f;
	uint32_t live = 0;

	seq_hole(a, seq, &dc->h0, &dc->h1);
	for (uint32_t d = 0; d < hd; d++)
		dc->q[d] = __kv_load(a->q, a->q_dtype, base + d);
	for (uint32_t p = 0; p < np; p++) {
		live += decode_partition(dc, seq, head, p, ctx);
		big = fmaxf(big, dc->m[p]);
	}
	/*
	 * reduction: rescale each partition's sum to the global maximum. An
	 * empty one adds exactly 0 (s_p 0 times exp(-inf) 0, o_p 0), so the
	 * others' sums are what they are without it.
	 */
	for (uint32_t p = 0; live && p < np; p++) {
		dc->s[p] *= expf(dc->m[p] - big);
		total += dc->s[p];
	}
	for (uint32_t d = 0; d < hd; d++) {
		float acc = 0.0f;

		for (uint32_t p = 0; live && p < np; p++)
			acc += dc->s[p] * dc->o[(uint64_t)p * hd + d];
		__kv_store(a->out, a->q_dtype, base + d,
			   live ? acc / total : 0.0f);
	}
}

/*
 * Contexts within their tables, sinks and windows within their contexts,
 * the ids of the entries that hold an attended token within the pool (a
 * wholly masked entry may hold anything: it is never read); the longest.
 */
static int check_tables(const struct kv_layout *l, uint64_t pool_bytes,
			const struct kv_decode_args *a, uint32_t *max_ctx)
{
	uint64_t nr_blocks = pool_bytes / l->block_bytes;
	uint64_t cap = (uint64_t)a->max_blocks_per_seq * l->block_tokens;

	*max_ctx = 0;
	for (uint32_t s = 0; s < a->num_seqs; s++) {
		const uint32_t *tbl = a->block_tables +
				      (uint64_t)s * a->max_blocks_per_seq;
		uint32_t ctx = a->context_lens[s];
		uint64_t nb = ((uint64_t)ctx + l->block_tokens - 1) /
			      l->block_tokens;
		uint32_t h0, h1;

		if (ctx > cap)
			return -EINVAL;
		if ((a->sink_lens && a->sink_lens[s] > ctx) ||
		    (a->window_starts && a->window_starts[s] > ctx))
			return -EINVAL;
		seq_hole(a, s, &h0, &h1);
		/* id * block_bytes + block_bytes <= pool_bytes */
		for (uint64_t i = 0; i < nb; i++) {
			uint32_t t0 = (uint32_t)i * l->block_tokens;
			uint32_t t1 = ctx - t0 < l->block_tokens ? ctx :
				      t0 + l->block_tokens;

			if (range_attended(t0, t1, h0, h1) &&
			    tbl[i] >= nr_blocks)
				return -EINVAL;
		}
		if (ctx > *max_ctx)
			*max_ctx = ctx;
	}
	return 0;
}

int kv_ref_paged_attention_decode(const struct kv_layout *l,
				  const void *pool, uint64_t pool_bytes,
				  uint32_t layer,
				  const struct kv_decode_args *a)
{
	struct decode dc = { .l = l, .a = a, .pool = pool, .layer = layer };
	uint32_t max_ctx, np, hd;
	float *buf;
	int ret;

	ret = kv_check_decode_args(l, pool, layer, a, &dc.partition);
	if (ret)
		return ret;
	ret = check_tables(l, pool_bytes, a, &max_ctx);
	if (ret)
		return ret;
	hd = l->head_dim;
	np = (uint32_t)(((uint64_t)max_ctx + dc.partition - 1) / dc.partition);
	buf = malloc(((uint64_t)2 * hd + dc.partition +
		      (uint64_t)np * (hd + 2)) * sizeof(float));
	if (!buf)
		return -ENOMEM;
	dc.group = a->num_heads / l->kv_heads;
	dc.q = buf;
	dc.row = dc.q + hd;
	dc.logits = dc.row + hd;
	dc.m = dc.logits + dc.partition;
	dc.s = dc.m + np;
	dc.o = dc.s + np;
	for (uint32_t s = 0; s < a->num_seqs; s++)
		for (uint32_t h = 0; h < a->num_heads; h++)
			decode_head(&dc, s, h);
	free(buf);
	return 0;
}
