/* SPDX-License-Identifier: MIT */
/*
 * kvbench's request streams: readers for the serving traces in
 * ../shared/traces (Mooncake JSONL, Azure CSV), the shared_prompts
 * binary (kvdtrc), the built-in synthetic workload, and the offline
 * analysis a replay is checked against (infinite-cache bound, allocator
 * footprints over the replay's schedule).
 *
 * A trace describes each request's prompt in one of two ways:
 *  - KVB_TRACE_IDS: by prefix-chained hash ids of trace blocks of
 *    trace_block tokens (Mooncake), or not at all (Azure: every block is
 *    unique). kvbench splits a trace block into trace_block /
 *    block_tokens kvd blocks ("sub-blocks") and maps each sub-block id to
 *    a struct kv_hash with kvb_subblock_hash().
 *  - KVB_TRACE_TOKENS: by token ids (kvdtrc, synthetic), hashed as an
 *    engine would with kv_hash_blocks(3).
 * Not thread-safe; a loaded trace is read-only and may be shared by
 * forked processes.
 */
#ifndef KV_TOOLS_TRACE_H
#define KV_TOOLS_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <kv/kv.h>

enum kvb_trace_fmt {
	KVB_FMT_MOONCAKE,
	KVB_FMT_AZURE,
	KVB_FMT_KVDTRC,
	KVB_FMT_SYNTHETIC,
};

enum kvb_trace_kind {
	KVB_TRACE_IDS,
	KVB_TRACE_TOKENS,
};

/* Sub-block ids with this bit are unique per request (Azure). */
#define KVB_UNIQUE_ID		(1ULL << 63)
#define KVB_MAX_TRACE_TOKENS	(1U << 22)	/* per request, in + out */

/* Synthetic workload constants (kvbench(8) documents them). */
#define KVB_SYN_SYSTEMS		8
#define KVB_SYN_SYS_MIN		256
#define KVB_SYN_SYS_MAX		2048
#define KVB_SYN_TURNS_MAX	8
#define KVB_SYN_MSG_MIN		16
#define KVB_SYN_MSG_MAX		512
#define KVB_SYN_CONV_GAP_US	500000ULL	/* mean gap between new chats */
#define KVB_SYN_THINK_MIN_US	2000000ULL
#define KVB_SYN_THINK_MAX_US	30000000ULL

struct kvb_treq {
	uint64_t	t_us;		/* arrival, from the first request */
	uint32_t	in_len;		/* prompt tokens */
	uint32_t	out_len;	/* output tokens */
	uint64_t	first;		/* IDS: first id in ids[]; kvdtrc: first
					 * token in tokens[]; synthetic: chat */
	uint32_t	nids;		/* IDS: trace blocks; 0: all unique */
	uint16_t	turn;		/* synthetic: 0-based turn of its chat */
	uint16_t	sys;		/* synthetic: its system prompt */
};

struct kvb_trace {
	enum kvb_trace_fmt fmt;
	enum kvb_trace_kind kind;
	const char	*path;		/* NULL for synthetic */
	unsigned	trace_block;	/* IDS with ids: tokens per hash id */
	size_t		nr;
	struct kvb_treq	*reqs;
	uint64_t	*ids;
	size_t		nr_ids;
	uint32_t	*tokens;
	size_t		nr_tokens;
	uint64_t	seed;		/* synthetic */
	/* totals over reqs[0..nr) */
	uint64_t	sum_in, sum_out, span_us;
	uint32_t	max_in, max_out, max_total;
};

/* Format names: "mooncake", "azure", "kvdtrc", "synthetic". */
const char *kvb_trace_fmt_name(enum kvb_trace_fmt fmt);

/*
 * kvb_trace_load - read @path; the format comes from its content (the
 * kvdtrc magic, a '{' line, a TIMESTAMP header) or else its extension
 * (.jsonl, .csv, .kvdtrc). Keeps the first @limit requests (0: all), in
 * file order. @trace_block: tokens per Mooncake hash id. On error prints
 * why (file, line) to stderr and returns -1.
 */
int kvb_trace_load(struct kvb_trace *tr, const char *path, size_t limit,
		   unsigned trace_block);

/*
 * kvb_trace_synthetic - the built-in workload, a pure function of @seed:
 * KVB_SYN_SYSTEMS shared system prompts, chats of 1..KVB_SYN_TURNS_MAX
 * turns whose prompts repeat the whole history (system prompt, earlier
 * user messages and outputs) and add a unique user message; @nr
 * requests in arrival order.
 */
int kvb_trace_synthetic(struct kvb_trace *tr, size_t nr, uint64_t seed);

void kvb_trace_free(struct kvb_trace *tr);

/*
 * kvb_trace_subblocks - IDS traces: the ids of request @i's full
 * @block_tokens-token prompt blocks, written to @out (room for
 * in_len / block_tokens); returns their number. Mooncake id h at
 * trace_block T gives h * (T / B) + j, j < T / B, and its last, partial
 * trace block only floor((in_len - T * (n - 1)) / B) of them.
 */
size_t kvb_trace_subblocks(const struct kvb_trace *tr, size_t i,
			   unsigned block_tokens, uint64_t *out);

/*
 * kvb_subblock_hash - the kvd block hash of sub-block @id: the canonical
 * (big-endian) XXH3-128 of the 16 bytes "KVBTRACE" followed by @id as a
 * little-endian u64, with seed @salt. Trace ids already stand for their
 * whole prefix, so no parent is mixed in.
 */
void kvb_subblock_hash(uint64_t id, uint64_t salt, struct kv_hash *h);

/*
 * Tokens of request @i. kvb_trace_prompt fills its in_len prompt tokens
 * (TOKENS traces), each XORed with a 32-bit fold of @salt, which keeps
 * equal tokens equal. kvb_trace_fill fills positions [@from, @to) of its
 * sequence that the trace has no tokens for (IDS traces: the partial
 * prompt tail and the output; TOKENS traces: the output): unique per
 * (salt, request, position), except synthetic outputs, which later
 * turns of their chat repeat (XORed like the prompts).
 */
void kvb_trace_prompt(const struct kvb_trace *tr, size_t i, uint64_t salt,
		      uint32_t *out);
void kvb_trace_fill(const struct kvb_trace *tr, size_t i, uint64_t salt,
		    uint32_t from, uint32_t to, uint32_t *out);

/*
 * What an infinite cache would hit over the whole replay (offline): at
 * the granularity of kvd's blocks, and (TOKENS traces) at that of a
 * radix tree, which splits at the exact token where two requests differ
 * (as SGLang's RadixAttention does). Their difference is what block
 * granularity costs.
 */
struct kvb_bound {
	uint64_t	refs;		/* prompt full-block references */
	uint64_t	hits;		/* ... whose block appeared earlier */
	uint64_t	unique;		/* distinct prompt full blocks */
	uint64_t	prompt_tokens;
	uint64_t	footprint;	/* distinct full blocks committed in all */
	bool		have_tokens;	/* the token bound below is known */
	uint64_t	token_hits;	/* prompt tokens the radix tree hits */
	uint64_t	radix_tokens;	/* tokens it holds: the distinct ones */
	uint64_t	radix_nodes;
};

/*
 * kvb_trace_bound - replay @tr's requests in order at @block_tokens and
 * count prompt full blocks that appeared earlier: in an earlier prompt,
 * or (TOKENS traces) among the full blocks of an earlier prompt plus
 * output, which a replay commits too. TOKENS traces also get the token
 * bound: per request, its prompt's longest common prefix in tokens with
 * an earlier request's prompt plus output, at most in_len (counted as
 * the block bound counts, so the two differ by granularity alone); IDS
 * traces have no tokens, and leave have_tokens false. 0,
 * -ENOMEM, or -E2BIG for a tree past 2^32 - 1 nodes.
 */
int kvb_trace_bound(const struct kvb_trace *tr, unsigned block_tokens,
		    struct kvb_bound *b);

/*
 * A schedule: requests become live (sign +1) and leave (sign -1) in
 * event order. kvb_sched_lockstep makes the offline one: request i goes
 * to process i % @procs, and each process holds its last @live requests
 * (admitting one when it holds @live first drops its oldest). Returns 0
 * with a malloc'd array in *@ev, or -ENOMEM.
 */
struct kvb_event {
	uint64_t	t;		/* orders events (ns, or a step) */
	uint32_t	req;
	int32_t		sign;
};

int kvb_sched_lockstep(size_t nr, unsigned procs, unsigned live,
		       struct kvb_event **ev, size_t *nev);

/*
 * Peak token slots of four allocators over schedule @ev (each live
 * request counted at its full length, prompt + output); a peak is taken
 * after every admission. Set max_model_len and chunk before the call.
 */
struct kvb_alloc_sim {
	uint32_t	max_model_len;	/* static reserves this per request */
	uint32_t	chunk;		/* chunked allocation unit, tokens */
	uint64_t	static_slots;	/* max_model_len per live request */
	uint64_t	chunked_slots;	/* ceil(len / chunk) * chunk */
	uint64_t	paged_slots;	/* ceil(len / B) * B */
	uint64_t	shared_slots;	/* paged, equal full blocks held once */
	uint64_t	peak_live;	/* live requests at the static peak */
};

int kvb_trace_alloc_sim(const struct kvb_trace *tr, unsigned block_tokens,
			const struct kvb_event *ev, size_t nev,
			struct kvb_alloc_sim *sim);

#endif /* KV_TOOLS_TRACE_H */
