// SPDX-License-Identifier: MIT
/*
 * Retention: how long committed blocks stay in the pool once nobody
 * holds them (KV_OP_RETAIN, kvctl pin), as TensorRT-LLM's
 * KvCacheRetentionConfig and Mooncake's pinned objects offer.
 *
 * A priority is part of a block's tick (ns_internal.h), so eviction
 * takes lower priorities first. A pin is a ref held by the namespace's
 * pin holder (slot KVD_PIN_SLOT) until it expires: a pinned block is
 * held, so nothing evicts it, reclaim passes its slab over, and the
 * pages under it stay charged to its namespace and tenant; kvd_ns_check
 * counts the pin refs as any holder's. The pin books (pin.c) say when
 * each pin ends; the tick ends them.
 *
 * Each request is all or nothing: it is checked whole, room is made for
 * it (pin heap, hold nodes), then it is applied, and nothing applied can
 * fail. Calls ns.c (refs) and pin.c (books) only.
 */
#include <errno.h>
#include <stdlib.h>

#include "ns_internal.h"

/*
 * The most pages of slabs with a pinned block @ns may have: half the
 * pages it may have at all (the pool, within its namespace's and its
 * tenant's max_pages). Slabs, not blocks, since reclaim frees whole
 * slabs and one pin keeps its slab: so its own requests, and other
 * namespaces' (the pool's pinned slabs are bounded at half the pool
 * too), always find room beside its pins.
 */
uint32_t kvd_ns_pin_limit(const struct kvd_ns *ns)
{
	uint32_t pages = ns->pool->nr_pages;

	if (ns->acct.max_pages && ns->acct.max_pages < pages)
		pages = ns->acct.max_pages;
	if (ns->tacct && ns->tacct->max_pages && ns->tacct->max_pages < pages)
		pages = ns->tacct->max_pages;
	return pages / 2;
}

/* @id's slab gains (@d 1) or loses (@d -1) a pinned block: its pages
 * count as pinned while it has any. */
static void slab_pinned(struct kvd_ns *ns, uint32_t id, int d)
{
	struct kvd_slab *sl = &ns->slabs[ns->blocks[id].slab];

	if (d > 0 ? sl->nr_pinned++ == 0 : --sl->nr_pinned == 0) {
		ns->pinned_pages += (uint32_t)d * ns->slab_pages;
		ns->pool->pinned_pages += (uint32_t)d * ns->slab_pages;
	}
}

/*
 * Pins @ids[0..@nr) would add: the blocks not pinned yet, each counted
 * once (the blocks' scratch marks, cleared again), and in *@pages the
 * pages of the slabs they would be the first pin of.
 */
static uint32_t new_pins(struct kvd_ns *ns, const uint32_t *ids, uint32_t nr,
			 uint32_t *pages)
{
	uint32_t n = 0, before = ns->pinned_pages;

	for (uint32_t i = 0; i < nr; i++) {
		struct kvd_block *b = &ns->blocks[ids[i]];

		if (!b->mark && !kvd_pins_has(&ns->pins, ids[i])) {
			n++;
			slab_pinned(ns, ids[i], 1);	/* undone below */
		}
		b->mark = true;
	}
	*pages = ns->pinned_pages - before;
	for (uint32_t i = 0; i < nr; i++) {
		struct kvd_block *b = &ns->blocks[ids[i]];

		if (b->mark && !kvd_pins_has(&ns->pins, ids[i]))
			slab_pinned(ns, ids[i], -1);
		b->mark = false;
	}
	return n;
}

/* Room for @n new pins in @pages more pinned slab pages: the limits,
 * the hold table, the pin heap. */
static int pin_room(struct kvd_ns *ns, uint32_t n, uint32_t pages)
{
	if ((uint64_t)ns->pinned_pages + pages > kvd_ns_pin_limit(ns) ||
	    (uint64_t)ns->pool->pinned_pages + pages > ns->pool->nr_pages / 2)
		return -EDQUOT;
	if ((uint64_t)ns->holds.nr + n > ns->holds.cap)
		return -ENOMEM;
	return kvd_pins_reserve(&ns->pins, n);
}

static void unpin(struct kvd_ns *ns, uint32_t id)
{
	if (!kvd_pins_del(&ns->pins, id))
		return;
	slab_pinned(ns, id, -1);
	kvd_ns_hold_put(ns, &ns->pin_holder, id);
}

/*
 * Pin @id until @expires_ns (or longer, if so pinned). Room was made and
 * @id is held or cached, committed, below KVD_REF_MAX: cannot fail.
 */
static bool pin(struct kvd_ns *ns, uint32_t id, uint64_t expires_ns)
{
	if (kvd_pins_set(&ns->pins, id, expires_ns) <= 0)
		return false;
	if (kvd_ns_hold_get(ns, &ns->pin_holder, id)) {
		kvd_pins_del(&ns->pins, id);	/* KVD_REF_MAX: checked */
		return false;
	}
	slab_pinned(ns, id, 1);
	return true;
}

static int retain_check(const struct kvd_ns *ns, const struct kvd_holder *hr,
			const uint32_t *ids, uint32_t nr, uint32_t prio,
			uint64_t pin_ms, uint32_t flags)
{
	if (prio > KV_PRIO_MAX || pin_ms > KV_PIN_MAX_MS ||
	    (flags & ~KV_RETAIN_UNPIN) || ((flags & KV_RETAIN_UNPIN) && pin_ms))
		return -EINVAL;
	for (uint32_t i = 0; i < nr; i++) {
		const struct kvd_block *b;

		if (ids[i] >= ns->max_blocks)
			return -EINVAL;
		b = &ns->blocks[ids[i]];
		if (b->state != KVD_BLOCK_HELD || !b->committed ||
		    !kvd_hold_counter(ns, hr->slot, ids[i]))
			return -EINVAL;
		if (pin_ms && b->ref >= KVD_REF_MAX)
			return -EOVERFLOW;
	}
	return 0;
}

/*
 * kvd_ns_retain - RETAIN @ids[0..@nr), which @hr holds, committed: drop
 * their pins (KV_RETAIN_UNPIN), set their priority (@prio 1..100; 0
 * leaves it), pin them for @pin_ms (0: no pin) from @now_ns. Returns @nr;
 * -EINVAL (an id not held or not committed, a value out of range),
 * -EOVERFLOW, -EDQUOT (past the namespace's pin limit), -ENOMEM; then
 * nothing changed.
 */
int kvd_ns_retain(struct kvd_ns *ns, struct kvd_holder *hr,
		  const uint32_t *ids, uint32_t nr, uint32_t prio,
		  uint64_t pin_ms, uint32_t flags, uint64_t now_ns)
{
	int ret = retain_check(ns, hr, ids, nr, prio, pin_ms, flags);

	if (ret)
		return ret;
	if (pin_ms) {
		uint32_t pages, n = new_pins(ns, ids, nr, &pages);

		ret = pin_room(ns, n, pages);
		if (ret)
			return ret;
	}
	for (uint32_t i = 0; i < nr; i++) {
		if (flags & KV_RETAIN_UNPIN)
			unpin(ns, ids[i]);
		if (prio)
			kvd_block_set_prio(&ns->blocks[ids[i]], prio);
		if (pin_ms)
			pin(ns, ids[i], now_ns + pin_ms * 1000000ULL);
	}
	return (int)nr;
}

/*
 * The committed block of key @key and its ancestors, leaf first, into
 * *@out (malloc'd): how many, or -ENXIO (not in the pool), -ENOMEM.
 */
static int prefix_chain(struct kvd_ns *ns, const struct kv_hash *key,
			uint32_t **out)
{
	uint32_t id = kvd_prefix_find(ns, key), n = 0, *ids;

	if (id == KVD_NIL)
		return -ENXIO;
	for (uint32_t p = id; p != KVD_NIL && n < ns->max_blocks;
	     p = ns->blocks[p].parent)
		n++;
	ids = malloc((size_t)n * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	n = 0;
	for (uint32_t p = id; p != KVD_NIL && n < ns->max_blocks;
	     p = ns->blocks[p].parent)
		ids[n++] = p;
	*out = ids;
	return (int)n;
}

/*
 * kvd_ns_pin_prefix - the admin's PIN (@ttl_ms > 0) or UNPIN (@ttl_ms 0)
 * of the prefix whose last block has index key @key: that block and its
 * committed ancestors. *@changed: blocks newly pinned, or unpinned.
 * Returns the prefix's length in blocks; -ENXIO (no such block),
 * -EINVAL (ttl past KV_PIN_MAX_MS), -EDQUOT, -ENOMEM: nothing changed.
 */
int kvd_ns_pin_prefix(struct kvd_ns *ns, const struct kv_hash *key,
		      uint64_t ttl_ms, uint64_t now_ns, uint32_t *changed)
{
	uint32_t *ids = NULL, n;
	int ret;

	*changed = 0;
	if (ttl_ms > KV_PIN_MAX_MS)
		return -EINVAL;
	ret = prefix_chain(ns, key, &ids);
	if (ret < 0)
		return ret;
	n = (uint32_t)ret;
	if (ttl_ms) {
		uint32_t pages;

		*changed = new_pins(ns, ids, n, &pages);
		ret = pin_room(ns, *changed, pages);
		for (uint32_t i = 0; !ret && i < n; i++)
			if (ns->blocks[ids[i]].ref >= KVD_REF_MAX)
				ret = -EOVERFLOW;
		if (ret)
			goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (ttl_ms) {
			pin(ns, ids[i], now_ns + ttl_ms * 1000000ULL);
			continue;
		}
		*changed += kvd_pins_has(&ns->pins, ids[i]);
		unpin(ns, ids[i]);
	}
	ret = (int)n;
out:
	free(ids);
	return ret;
}

/* When the pin of the block of index key @key ends; 0: none. */
uint64_t kvd_ns_pin_expires(const struct kvd_ns *ns, const struct kv_hash *key)
{
	uint32_t id = kvd_prefix_find(ns, key);

	return id == KVD_NIL ? 0 : kvd_pins_expires(&ns->pins, id);
}

/* The pins of @ns ended by @now_ns go: their blocks cached, evictable. */
uint32_t kvd_ns_pins_expire(struct kvd_ns *ns, uint64_t now_ns)
{
	uint32_t id, n = 0;

	while ((id = kvd_pins_expired(&ns->pins, now_ns)) != KVD_NIL) {
		slab_pinned(ns, id, -1);
		kvd_ns_hold_put(ns, &ns->pin_holder, id);
		n++;
	}
	return n;
}
