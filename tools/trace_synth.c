// SPDX-License-Identifier: MIT
/*
 * kvbench's synthetic workload (shared system prompts, multi-turn chats,
 * unique suffixes), and the token ids and sub-block hashes of any trace's
 * requests as an engine would see them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "trace_int.h"

/* ---- synthetic ---- */

enum { SYN_SYS = 1, SYN_USER, SYN_OUT, SYN_TURNS, SYN_PICK, SYN_GAP,
       SYN_THINK };

static uint32_t syn_range(uint64_t v, uint32_t lo, uint32_t hi)
{
	return lo + (uint32_t)(v % (hi - lo + 1));
}

static uint32_t syn_sys_len(uint64_t seed, unsigned s)
{
	return syn_range(kvb_mix3(seed, SYN_SYS, s, 0), KVB_SYN_SYS_MIN,
			 KVB_SYN_SYS_MAX);
}

static uint32_t syn_msg_len(uint64_t seed, int tag, uint64_t chat,
			    unsigned turn)
{
	return syn_range(kvb_mix3(seed, tag, chat, turn), KVB_SYN_MSG_MIN,
			 KVB_SYN_MSG_MAX);
}

static int cmp_treq(const void *a, const void *b)
{
	const struct kvb_treq *x = a, *y = b;

	if (x->t_us != y->t_us)
		return x->t_us < y->t_us ? -1 : 1;
	if (x->first != y->first)
		return x->first < y->first ? -1 : 1;
	return x->turn < y->turn ? -1 : x->turn > y->turn;
}

/* One chat starting at @start: its turns as requests. */
static int syn_chat(struct trace_build *b, uint64_t seed, uint64_t chat,
		    uint64_t start)
{
	unsigned turns = syn_range(kvb_mix3(seed, SYN_TURNS, chat, 0), 1,
				   KVB_SYN_TURNS_MAX);
	unsigned sys = (unsigned)(kvb_mix3(seed, SYN_PICK, chat, 0) %
				  KVB_SYN_SYSTEMS);
	uint32_t len = syn_sys_len(seed, sys);
	uint64_t t = start;

	for (unsigned k = 0; k < turns; k++) {
		struct kvb_treq *r = kvb_trace_add_req(b);

		if (!r)
			return -ENOMEM;
		if (k)
			t += KVB_SYN_THINK_MIN_US +
			     kvb_mix3(seed, SYN_THINK, chat, k) %
			     (KVB_SYN_THINK_MAX_US - KVB_SYN_THINK_MIN_US + 1);
		len += syn_msg_len(seed, SYN_USER, chat, k);
		r->t_us = t;
		r->in_len = len;
		r->out_len = syn_msg_len(seed, SYN_OUT, chat, k);
		r->first = chat;
		r->turn = (uint16_t)k;
		r->sys = (uint16_t)sys;
		len += r->out_len;
	}
	return 0;
}

int kvb_trace_synthetic(struct kvb_trace *tr, size_t nr, uint64_t seed)
{
	struct trace_build b = { .tr = tr };
	uint64_t chat = 0, start = 0, cut = UINT64_MAX;

	memset(tr, 0, sizeof(*tr));
	tr->fmt = KVB_FMT_SYNTHETIC;
	tr->kind = KVB_TRACE_TOKENS;
	tr->seed = seed;
	if (!nr)
		return -EINVAL;
	/*
	 * Chats start in order; once nr requests exist, every chat that
	 * starts before the nr-th arrival so far can still add an earlier
	 * request, so add those too, then keep the nr earliest.
	 */
	for (;;) {
		if (tr->nr >= nr) {
			if (cut == UINT64_MAX) {
				qsort(tr->reqs, tr->nr, sizeof(*tr->reqs),
				      cmp_treq);
				cut = tr->reqs[nr - 1].t_us;
			}
			if (start > cut)
				break;
		}
		if (syn_chat(&b, seed, chat, start)) {
			kvb_trace_free(tr);
			return -ENOMEM;
		}
		chat++;
		start += kvb_mix3(seed, SYN_GAP, chat, 0) %
			 (2 * KVB_SYN_CONV_GAP_US + 1);
	}
	qsort(tr->reqs, tr->nr, sizeof(*tr->reqs), cmp_treq);
	tr->nr = nr;
	kvb_trace_totals(tr);
	return 0;
}

/* ---- tokens and ids ---- */

static uint32_t salt32(uint64_t salt)
{
	return (uint32_t)(salt ^ (salt >> 32));
}

/* Token @i of a synthetic segment (system prompt, message, output). */
static void syn_segment(uint64_t key, uint32_t len, uint32_t from,
			uint32_t s32, uint32_t *out)
{
	for (uint32_t i = 0; i < len; i++)
		out[i] = (uint32_t)(kvb_mix64(key + from + i) >> 33) ^ s32;
}

static void syn_prompt(const struct kvb_trace *tr, const struct kvb_treq *r,
		       uint32_t s32, uint32_t *out)
{
	uint64_t seed = tr->seed, chat = r->first;
	uint32_t n, pos;

	pos = syn_sys_len(seed, r->sys);
	syn_segment(kvb_mix3(seed, SYN_SYS, r->sys, 1), pos, 0, s32, out);
	for (unsigned k = 0; k <= r->turn; k++) {
		n = syn_msg_len(seed, SYN_USER, chat, k);
		syn_segment(kvb_mix3(seed, SYN_USER, chat, k + 0x10000), n, 0, s32,
			    out + pos);
		pos += n;
		if (k == r->turn)
			break;
		n = syn_msg_len(seed, SYN_OUT, chat, k);
		syn_segment(kvb_mix3(seed, SYN_OUT, chat, k + 0x10000), n, 0, s32,
			    out + pos);
		pos += n;
	}
}

void kvb_trace_prompt(const struct kvb_trace *tr, size_t i, uint64_t salt,
		      uint32_t *out)
{
	const struct kvb_treq *r = &tr->reqs[i];
	uint32_t s32 = salt32(salt);

	if (tr->fmt == KVB_FMT_SYNTHETIC) {
		syn_prompt(tr, r, s32, out);
		return;
	}
	for (uint32_t k = 0; k < r->in_len; k++)
		out[k] = tr->tokens[r->first + k] ^ s32;
}

void kvb_trace_fill(const struct kvb_trace *tr, size_t i, uint64_t salt,
		    uint32_t from, uint32_t to, uint32_t *out)
{
	const struct kvb_treq *r = &tr->reqs[i];
	uint64_t key = kvb_mix64(salt ^ 0x6b7662756e71ULL);

	if (tr->fmt == KVB_FMT_SYNTHETIC && from >= r->in_len) {
		syn_segment(kvb_mix3(tr->seed, SYN_OUT, r->first,
				 r->turn + 0x10000u),
			    to - from, from - r->in_len, salt32(salt), out);
		return;
	}
	for (uint32_t p = from; p < to; p++)
		out[p - from] = (uint32_t)kvb_mix64(key ^ ((uint64_t)i << 32 | p));
}

size_t kvb_trace_subblocks(const struct kvb_trace *tr, size_t i,
			   unsigned block_tokens, uint64_t *out)
{
	const struct kvb_treq *r = &tr->reqs[i];
	size_t n = 0;

	if (!r->nids) {
		/* No prefix information: blocks unique to the request. */
		n = r->in_len / block_tokens;
		for (size_t j = 0; j < n; j++)
			out[j] = KVB_UNIQUE_ID | (uint64_t)i << 24 | j;
		return n;
	}
	for (uint32_t k = 0; k < r->nids; k++) {
		uint64_t h = tr->ids[r->first + k];
		uint32_t per = tr->trace_block / block_tokens;
		uint32_t cov = r->in_len - k * tr->trace_block;

		if (cov < tr->trace_block)
			per = cov / block_tokens;
		for (uint32_t j = 0; j < per; j++)
			out[n++] = h * (tr->trace_block / block_tokens) + j;
	}
	return n;
}

void kvb_subblock_hash(uint64_t id, uint64_t salt, struct kv_hash *h)
{
	unsigned char in[16] = "KVBTRACE";
	XXH128_canonical_t c;

	for (int k = 0; k < 8; k++)
		in[8 + k] = (unsigned char)(id >> (8 * k));
	XXH128_canonicalFromHash(&c, XXH3_128bits_withSeed(in, sizeof(in),
							   salt));
	memcpy(h->b, c.digest, sizeof(h->b));
}
