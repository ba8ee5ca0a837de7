// SPDX-License-Identifier: MIT
/*
 * Read-only views of a namespace, on top of the subsystem: the committed
 * blocks as a forest for kvctl's tree dump, and the invariant checker
 * that tests, the fuzzers and kvd's invariant mode run over the books of
 * ns.c, prefix.c, hold.c and slab.c. Nothing here changes a namespace
 * (kvd_prefix_tree only allocates scratch lists of its own).
 */
#include <errno.h>
#include <stdlib.h>

#include "ns_internal.h"

/*
 * kvd_prefix_tree - the committed blocks of @ns as a forest, depth first,
 * roots first, at most @max nodes down to @depth (0 = roots only). For
 * kvctl: O(blocks in slabs), with temporary child lists. A node carries
 * no key bytes (its hash is zero). Returns the number of nodes written,
 * or -ENOMEM.
 */
int kvd_prefix_tree(struct kvd_ns *ns, struct kv_admin_tree_node *out,
		    uint32_t max, uint32_t depth)
{
	uint32_t *first = NULL, *next = NULL, *sub = NULL, *stack = NULL;
	uint32_t *roots = NULL, nroots = 0, n = 0, sp;
	int ret = -ENOMEM;

	first = malloc((size_t)ns->max_blocks * sizeof(*first));
	next = malloc((size_t)ns->max_blocks * sizeof(*next));
	sub = malloc((size_t)ns->max_blocks * sizeof(*sub));
	stack = malloc(((size_t)ns->committed_blocks + 1) * 4 * sizeof(*stack));
	roots = malloc(((size_t)ns->committed_blocks + 1) * sizeof(*roots));
	if (!first || !next || !sub || !stack || !roots)
		goto out;
	/* Child lists, from every committed block in a live slab. */
	for (uint32_t s = 0; s < ns->slab_slots_used; s++) {
		const struct kvd_slab *sl = &ns->slabs[s];

		for (uint32_t i = 0; sl->live && i < sl->nr_carved; i++) {
			uint32_t id = sl->first_block + i;

			first[id] = KVD_NIL;
			sub[id] = 1;
		}
	}
	for (uint32_t s = 0; s < ns->slab_slots_used; s++) {
		const struct kvd_slab *sl = &ns->slabs[s];

		for (uint32_t i = 0; sl->live && i < sl->nr_carved; i++) {
			uint32_t id = sl->first_block + i, p;

			if (!ns->blocks[id].committed)
				continue;
			p = ns->blocks[id].parent;
			if (p == KVD_NIL) {
				roots[nroots++] = id;
				continue;
			}
			next[id] = first[p];
			first[p] = id;
		}
	}
	/* Subtree sizes: post-order over an explicit stack. */
	for (uint32_t r = 0; r < nroots; r++) {
		sp = 0;
		stack[sp++] = roots[r];
		stack[sp++] = 0;
		while (sp) {
			uint32_t done = stack[--sp], id = stack[--sp];

			if (done) {
				if (ns->blocks[id].parent != KVD_NIL)
					sub[ns->blocks[id].parent] += sub[id];
				continue;
			}
			stack[sp++] = id;
			stack[sp++] = 1;
			for (uint32_t ch = first[id]; ch != KVD_NIL; ch = next[ch]) {
				stack[sp++] = ch;
				stack[sp++] = 0;
			}
		}
	}
	/* Emit: pre-order, depth-limited; stack holds (id, depth). */
	for (uint32_t r = 0; r < nroots && n < max; r++) {
		sp = 0;
		stack[sp++] = roots[r];
		stack[sp++] = 0;
		while (sp && n < max) {
			uint32_t dep = stack[--sp], id = stack[--sp];
			const struct kvd_block *b = &ns->blocks[id];

			out[n++] = (struct kv_admin_tree_node){
				.id = id, .parent = b->parent, .depth = dep,
				.ref = b->ref, .children = b->nr_children,
				.subtree = sub[id],
				/* .hash stays zero: b->key mixes the
				 * tenant key, and kvd keeps no copy of
				 * the client's hash */
			};
			if (dep >= depth)
				continue;
			for (uint32_t ch = first[id]; ch != KVD_NIL; ch = next[ch]) {
				stack[sp++] = ch;
				stack[sp++] = dep + 1;
			}
		}
	}
	ret = (int)n;
out:
	free(first);
	free(next);
	free(sub);
	free(stack);
	free(roots);
	return ret;
}

/*
 * kvd_ns_check - verify the books of @ns (tests, and kvd's invariant
 * mode): every block is exactly one of free / held / cached; ref counts
 * equal the holds recorded; counters, LRU (its order of last use too),
 * index and child counts agree, and each slab's held blocks, children in
 * other slabs and newest use (what reclaim picks victims by).
 * Returns 0, or -EUCLEAN with *why naming the first broken rule.
 * O(blocks in slabs + holds).
 */
int kvd_ns_check(struct kvd_ns *ns, const char **why)
{
	uint32_t used = 0, cached = 0, committed = 0, on_lru = 0, n = 0;
	uint32_t owned = 0;
	uint32_t *refs = calloc(ns->max_blocks, sizeof(*refs));
	uint32_t *kids = calloc(ns->max_blocks, sizeof(*kids));
	uint32_t *out = calloc(ns->max_slabs, sizeof(*out));
	int ret = -EUCLEAN;

#define FAIL(msg) do { *why = (msg); goto out; } while (0)
	if (!refs || !kids || !out) {
		*why = "out of memory";
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < ns->holds.used; i++) {
		const struct kvd_hold *h = &ns->holds.nodes[i];

		if (h->count && kvd_hold_live(ns, i))
			refs[h->block] += h->count;
	}

	for (uint32_t s = 0; s < ns->slab_slots_used; s++) {
		const struct kvd_slab *sl = &ns->slabs[s];
		uint32_t nfree = sl->nr_blocks - sl->nr_carved, held = 0;

		for (uint32_t i = 0; sl->live && i < sl->nr_carved; i++) {
			uint32_t id = sl->first_block + i;
			const struct kvd_block *b = &ns->blocks[id];

			if (b->owner && (b->state != KVD_BLOCK_HELD ||
					 !b->own_refs))
				FAIL("a block has an owner but no ref of it");
			if (b->owner)
				refs[id] += b->own_refs;
			owned += !!b->owner;
			if (b->ref != refs[id])
				FAIL("a block's ref differs from its holds");
			if ((b->state == KVD_BLOCK_HELD) != (b->ref > 0))
				FAIL("held state and ref disagree");
			if (b->state == KVD_BLOCK_CACHED && !b->committed)
				FAIL("a cached block is not committed");
			if (b->state == KVD_BLOCK_FREE && b->committed)
				FAIL("a free block is committed");
			if (b->on_lru != (b->state == KVD_BLOCK_CACHED &&
					  !b->nr_children))
				FAIL("LRU membership is not 'cached leaf'");
			if (b->committed && kvd_prefix_find(ns, &b->key) != id)
				FAIL("a committed block is not in the index");
			if (b->committed && b->parent != KVD_NIL) {
				kids[b->parent]++;
				if (ns->blocks[b->parent].slab != s)
					out[ns->blocks[b->parent].slab]++;
			}
			if (b->state == KVD_BLOCK_CACHED && b->tick > sl->tick)
				FAIL("a slab's tick is older than its block's");
			held += b->state == KVD_BLOCK_HELD;
			used += b->state == KVD_BLOCK_HELD;
			cached += b->state == KVD_BLOCK_CACHED;
			committed += b->committed;
			on_lru += b->on_lru;
			nfree += b->state == KVD_BLOCK_FREE;
		}
		if (sl->live && nfree != sl->nr_free)
			FAIL("a slab's free count is wrong");
		if (sl->live && held != sl->nr_held)
			FAIL("a slab's held count is wrong");
	}
	for (uint32_t s = 0; s < ns->slab_slots_used; s++)
		if (ns->slabs[s].live && ns->slabs[s].nr_out != out[s])
			FAIL("a slab's count of children elsewhere is wrong");
	for (uint32_t s = 0; s < ns->slab_slots_used; s++) {
		const struct kvd_slab *sl = &ns->slabs[s];

		for (uint32_t i = 0; sl->live && i < sl->nr_carved; i++) {
			uint32_t id = sl->first_block + i;

			if (ns->blocks[id].committed &&
			    ns->blocks[id].nr_children != kids[id])
				FAIL("a child count is wrong");
		}
	}
	/* The LRU: a list sorted by tick, and a heap by tick beside it. */
	for (uint32_t id = ns->lru_head, prev = KVD_NIL;
	     id != KVD_NIL && n <= on_lru;
	     prev = id, id = ns->blocks[id].lru_next) {
		const struct kvd_block *b = &ns->blocks[id];

		if (!b->on_lru || b->lru_prev != prev)
			FAIL("the LRU list's links are broken");
		if (prev != KVD_NIL && ns->blocks[prev].tick >= b->tick)
			FAIL("the LRU list is not in the order of last use");
		n++;
	}
	for (uint32_t i = 0; i < ns->lru_heap_len; i++) {
		uint32_t id = ns->lru_heap[i];

		if (id >= ns->max_blocks || !ns->blocks[id].on_lru ||
		    ns->blocks[id].lru_prev != i)
			FAIL("the LRU heap's places are broken");
		if (i && ns->blocks[ns->lru_heap[(i - 1) / 2]].tick >
			 ns->blocks[id].tick)
			FAIL("the LRU heap is not in the order of last use");
		n++;
	}
	if (used != ns->blocks_used || cached != ns->cached_blocks ||
	    committed != ns->committed_blocks)
		FAIL("block counters are wrong");
	if (owned != ns->holds.owned)
		FAIL("the count of owned blocks is wrong");
	if (on_lru != ns->lru_len || n != on_lru)
		FAIL("the LRU list and its length disagree");
	if (kvd_pins_check(&ns->pins, why))
		goto out;
	for (uint32_t i = 0; i < ns->pins.nr; i++) {
		const uint32_t *c = kvd_hold_counter(ns, KVD_PIN_SLOT,
						     ns->pins.heap[i].block);

		if (!c || *c != 1)
			FAIL("a pinned block is not held once by its pin");
	}
	if (ns->pin_holder.nr_refs != ns->pins.nr)
		FAIL("the pin holder's refs are not its pins");
	n = 0;
	used = 0;
	for (uint32_t s = 0; s < ns->slab_slots_used; s++) {
		n += ns->slabs[s].live ? ns->slabs[s].nr_pinned : 0;
		used += ns->slabs[s].live && ns->slabs[s].nr_pinned ?
			ns->slab_pages : 0;
	}
	if (n != ns->pins.nr || used != ns->pinned_pages)
		FAIL("the slabs' pinned counts are not the pins");
	ret = 0;
#undef FAIL
out:
	free(refs);
	free(kids);
	free(out);
	return ret;
}
