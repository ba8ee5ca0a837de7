/* SPDX-License-Identifier: MIT */
/*
 * Long generation under a context policy (--policy): the engine
 * processes of one policy's run, what each of their sequences did, and
 * what the parent sampled of the pool meanwhile (longgen.c), for the
 * comparison of the policies (mode_longgen.c).
 */
#ifndef KVB_LONGGEN_H
#define KVB_LONGGEN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <kv/kv.h>

#include "opts.h"

/* Why a sequence stopped appending. */
enum kvb_lg_stop {
	KVB_LG_RUNNING,		/* not yet */
	KVB_LG_DONE,		/* every --gen-tokens token appended */
	KVB_LG_E2BIG,		/* -E2BIG: at max_context (none, truncate) */
	KVB_LG_SHORT,		/* an append took fewer than it was given */
	KVB_LG_FAILED,		/* another error: the run failed */
};

/* One sequence of one engine process, as it ended. */
struct kvb_lg_seq {
	struct kv_seq_range end;	/* after its last append */
	uint64_t	first_drop_len;	/* len at its first drop; 0: none */
	uint64_t	first_drop_commit;	/* commit_end just then */
	uint32_t	peak_blocks;	/* most kept blocks (nr_blocks) */
	uint32_t	stop;		/* enum kvb_lg_stop */
	int32_t		err;		/* the -errno that stopped it */
	uint32_t	resv;
};

/* Where an engine process is (kvb_lg_proc.state). */
enum {
	KVB_LG_STARTING,
	KVB_LG_READY,		/* sequences open, waiting for the go */
	KVB_LG_UNREADY,		/* could not connect or open */
	KVB_LG_GENERATED,	/* done (or failed), its sequences still
				 * open until the parent has sampled */
};

/* One engine process, in memory it shares with the parent. */
struct kvb_lg_proc {
	_Atomic uint32_t state;
	int32_t		status;		/* 0 ran to the end */
	uint64_t	t_start, t_end;	/* of its appends */
	uint64_t	t_slide;	/* first step that dropped; 0: none */
	uint64_t	appends;	/* tokens appended */
	uint64_t	slide_ops;	/* block allocs + releases of the
					 * appends that dropped tokens */
	char		msg[192];	/* why it failed */
};

/* One policy's run: its processes and sequences, the pool sampled. */
struct kvb_lg_run {
	struct kv_ctx_policy policy;
	char		name[48];	/* kv_ctx_policy_format */
	unsigned	idx;		/* of o->policy[] */
	uint64_t	salt;		/* of its tokens: no run hits another */
	struct kvb_lg_proc *proc;	/* o->procs of them, then */
	struct kvb_lg_seq *seq;		/* o->procs * o->seqs, proc-major */
	size_t		map_bytes;
	uint32_t	max_context;	/* the namespace's, as kvd gives it */
	uint32_t	kept_bound;	/* most blocks a sequence may keep */
	uint32_t	pool_peak_used;	/* namespace blocks with ref > 0 */
	uint32_t	pool_peak_cached;	/* committed, ref 0: most more
						 * than at the start */
	uint32_t	cached0;	/* ... at the start */
	uint32_t	samples;
	uint32_t	sample_errors;
	uint32_t	failed;		/* processes */
	bool		ran;		/* started (else set-up failed) */
};

/*
 * kvb_lg_kept_bound - the most blocks one sequence of @o may keep under
 * @p with @max_context (0: none): the tokens it may hold, in blocks,
 * plus one where the window starts inside a block (and one more where
 * a BOS token is kept apart from the sinks). Tokens of @o's prompt and
 * generation only: never above their blocks.
 */
uint32_t kvb_lg_kept_bound(const struct kvb_opts *o,
			   const struct kv_ctx_policy *p,
			   uint32_t max_context);

/*
 * kvb_lg_run - run policy o->policy[@idx]: fork o->procs engine
 * processes, each opening o->seqs prompts with kv_seq_open_policy and
 * appending one generated token to each in turn, o->gen_tokens times
 * or until max_context refuses; sample the namespace's blocks through
 * a client of its own meanwhile, and once more when all are done, their
 * sequences still open. Fills *@run (kvb_lg_run_free undoes
 * it). Returns 0 when it ran (processes may have failed: run->failed),
 * 2 when kvd cannot take it (said why), 1 on another set-up failure.
 */
int kvb_lg_run(const struct kvb_opts *o, unsigned idx, uint64_t salt,
	       struct kvb_lg_run *run);
void kvb_lg_run_free(struct kvb_lg_run *run);

#endif /* KVB_LONGGEN_H */
