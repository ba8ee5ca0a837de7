/* SPDX-License-Identifier: MIT */
/*
 * kv_seq internals, shared by its lifecycle (seq.c) and its context
 * policy geometry (seq_ctx.c), which seq.c calls and which calls nothing
 * back.
 *
 * A sequence's tokens sit at original positions 0..len-1, original
 * block ob holding [ob * bt, ob * bt + bt). A policy that drops keeps
 * the head [0, head) and the window [len - window, len) once len >
 * head + window. The block table lists the kept blocks in order: table
 * entry ti is original block ti below head_blocks (ceil(head / bt)),
 * ti + gap from there on, gap being the blocks dropped between.
 */
#ifndef KV_SEQ_H
#define KV_SEQ_H

#include "lib.h"

struct kv_seq {
	struct kv_client *c;
	uint64_t	len;		/* tokens */
	uint64_t	hit_tokens;	/* KV already present at open */
	uint32_t	host_hits;	/* of the hit blocks, from the host tier */
	uint32_t	disk_hits;	/* and from the disk tier */
	uint32_t	nr_blocks;	/* the block table's length */
	uint32_t	cap;		/* of blocks[] and hashes[] */
	kv_block_t	*blocks;	/* the block table: kept blocks */
	struct kv_hash	*hashes;	/* of original blocks [0, nr_hashed) */
	uint32_t	nr_hashed;
	uint32_t	nr_committed;	/* original blocks [0, nr_committed)
					 * published, or dropped unpublished */
	uint32_t	*tail;		/* tokens of the partial last block */
	uint32_t	n_tail;
	char		*lora_id;	/* deep copies of the extra keys */
	struct kv_mm_item *mm;
	size_t		nr_mm;
	void		*salt;		/* hashed into block 0 only */
	size_t		salt_len;

	struct kv_ctx_policy policy;	/* the sequence's own */
	uint32_t	max_context;	/* tokens, 0: no limit */
	bool		drops;		/* window, sinks, truncate drop */
	uint64_t	head;		/* drops: tokens kept at the start */
	uint64_t	window;		/* drops: tokens kept at the end */
	uint32_t	head_blocks;	/* ceil(head / bt) */
	uint64_t	gap;		/* original blocks dropped between */
	uint64_t	commit_end;	/* tokens [0, commit_end) may be
					 * committed: computed before any drop,
					 * and each written (UINT64_MAX: all) */
	uint32_t	hash_limit;	/* commit_end / bt: original blocks
					 * [0, hash_limit) are hashed and
					 * committed */
	struct kv_retention retain;	/* applied at close; zero: none */
};

/* seq_ctx.c */
int __kv_seq_set_policy(struct kv_seq *s, const struct kv_ctx_policy *p,
			const char **why);
bool __kv_seq_dropping(const struct kv_seq *s, uint64_t len);
void __kv_seq_cut(struct kv_seq *s, uint64_t old_len, uint64_t new_len);
void __kv_seq_cut_at(struct kv_seq *s, uint64_t end);
uint64_t __kv_seq_gap(const struct kv_seq *s, uint64_t len);
bool __kv_seq_kept(const struct kv_seq *s, uint64_t gap, uint64_t ob);
uint64_t __kv_seq_ob(const struct kv_seq *s, uint32_t ti);
uint32_t __kv_seq_fresh(const struct kv_seq *s, uint64_t old_len,
			uint64_t new_len, uint64_t gap);

#endif /* KV_SEQ_H */
