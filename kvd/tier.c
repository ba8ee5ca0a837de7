// SPDX-License-Identifier: MIT
/*
 * The host-memory tier (tier.h): an index of (namespace signature, key)
 * over entries in host RAM, on an LRU by demotion order, within a byte
 * budget. Entries are exclusive of the pool: a promotion takes the
 * entry out, an eviction puts the block in (a block that comes back
 * under a key already here replaces the older copy).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY	/* XXH3_state_t on the stack */
#include <xxhash.h>

#include "backend.h"
#include "client.h"
#include "daemon.h"
#include "ns.h"
#include "tier.h"

#define TIER_MIN_SLOTS	1024

uint64_t kvd_tier_sig(const struct kvd_ns *ns)
{
	XXH3_state_t st;

	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, ns->model_id, sizeof(ns->model_id));
	XXH3_64bits_update(&st, ns->model_rev, sizeof(ns->model_rev));
	XXH3_64bits_update(&st, &ns->geom, sizeof(ns->geom));
	XXH3_64bits_update(&st, &ns->key, sizeof(ns->key));
	return XXH3_64bits_digest(&st);
}

static uint32_t *bucket(const struct kvd_tier *t, uint64_t sig,
			const struct kv_hash *key)
{
	uint64_t h;

	memcpy(&h, key->b, sizeof(h));
	return &t->index[(h ^ sig) & t->index_mask];
}

static uint32_t find(const struct kvd_tier *t, uint64_t sig,
		     const struct kv_hash *key)
{
	for (uint32_t i = *bucket(t, sig, key); i; i = t->e[i - 1].hnext) {
		const struct kvd_tier_entry *e = &t->e[i - 1];

		if (e->sig == sig && !memcmp(&e->key, key, sizeof(*key)))
			return i - 1;
	}
	return KVD_NIL;
}

static void index_del(struct kvd_tier *t, uint32_t s)
{
	struct kvd_tier_entry *e = &t->e[s];
	uint32_t *p = bucket(t, e->sig, &e->key);

	while (*p != s + 1)
		p = &t->e[*p - 1].hnext;
	*p = e->hnext;
	e->hnext = 0;
}

static void lru_del(struct kvd_tier *t, uint32_t s)
{
	struct kvd_tier_entry *e = &t->e[s];

	if (e->lru_prev == KVD_NIL)
		t->lru_head = e->lru_next;
	else
		t->e[e->lru_prev].lru_next = e->lru_next;
	if (e->lru_next == KVD_NIL)
		t->lru_tail = e->lru_prev;
	else
		t->e[e->lru_next].lru_prev = e->lru_prev;
}

static void lru_add_tail(struct kvd_tier *t, uint32_t s)
{
	struct kvd_tier_entry *e = &t->e[s];

	e->lru_prev = t->lru_tail;
	e->lru_next = KVD_NIL;
	if (t->lru_tail == KVD_NIL)
		t->lru_head = s;
	else
		t->e[t->lru_tail].lru_next = s;
	t->lru_tail = s;
}

/* Out of the index and the LRU; its bytes stay with the caller. */
static void *unlink_entry(struct kvd_tier *t, uint32_t s)
{
	struct kvd_tier_entry *e = &t->e[s];
	void *data = e->data;

	index_del(t, s);
	lru_del(t, s);
	t->used_bytes -= e->bytes;
	t->nr_entries--;
	e->data = NULL;
	e->hnext = t->free_slot == KVD_NIL ? 0 : t->free_slot + 1;
	t->free_slot = s;
	return data;
}

static void drop_entry(struct kvd_tier *t, uint32_t s)
{
	free(unlink_entry(t, s));
}

/* A free slot, the array grown when none is left. */
static uint32_t slot_get(struct kvd_tier *t)
{
	struct kvd_tier_entry *n;
	uint32_t s, cap;

	if (t->free_slot != KVD_NIL) {
		s = t->free_slot;
		t->free_slot = t->e[s].hnext ? t->e[s].hnext - 1 : KVD_NIL;
		return s;
	}
	cap = t->cap_slots * 2;
	n = realloc(t->e, (size_t)cap * sizeof(*n));
	if (!n)
		return KVD_NIL;
	memset(n + t->cap_slots, 0, (size_t)(cap - t->cap_slots) * sizeof(*n));
	t->e = n;
	for (s = cap - 1; s > t->cap_slots; s--) {
		t->e[s].hnext = t->free_slot == KVD_NIL ? 0 : t->free_slot + 1;
		t->free_slot = s;
	}
	s = t->cap_slots;
	t->cap_slots = cap;
	return s;
}

/* Link a filled slot in as the newest entry. */
static void link_entry(struct kvd_tier *t, uint32_t s)
{
	struct kvd_tier_entry *e = &t->e[s];
	uint32_t *b = bucket(t, e->sig, &e->key);

	e->tick = ++t->clock;
	e->hnext = *b;
	*b = s + 1;
	lru_add_tail(t, s);
	t->used_bytes += e->bytes;
	t->nr_entries++;
}

/*
 * Take in block @id of @ns, evicted from the pool with its bytes still
 * there (pool->on_evict). Best effort: a block larger than the tier,
 * or no memory, is dropped as before tiers.
 */
static void tier_demote(struct kvd_pool *pool, struct kvd_ns *ns, uint32_t id,
			const struct kv_hash *key)
{
	struct kvd *d = pool->priv;
	struct kvd_tier *t = &d->host_tier;
	uint64_t bytes = ns->block_bytes, sig;
	const uint8_t *src;
	uint32_t s;
	void *data;

	if (!t->cap_bytes || bytes > t->cap_bytes)
		return;
	sig = kvd_tier_sig(ns);
	s = find(t, sig, key);
	if (s != KVD_NIL) {
		drop_entry(t, s);
		t->replaced++;
	}
	while (t->used_bytes + bytes > t->cap_bytes && t->lru_head != KVD_NIL) {
		drop_entry(t, t->lru_head);
		t->drops++;
	}
	data = malloc(bytes);
	s = data ? slot_get(t) : KVD_NIL;
	if (s == KVD_NIL) {
		free(data);
		t->drops++;
		return;
	}
	src = (const uint8_t *)d->pool_map + (uint64_t)id * bytes;
	memcpy(data, src, bytes);
	t->e[s] = (struct kvd_tier_entry){
		.key = *key, .sig = sig, .bytes = bytes, .data = data,
		.sum = XXH3_64bits(data, bytes),
	};
	link_entry(t, s);
	t->demotions++;
	if (t->fault_corrupt && t->demotions % t->fault_corrupt == 0)
		((uint8_t *)data)[bytes / 2] ^= 0x5a;	/* the test's fault */
}

int kvd_tiers_init(struct kvd *d, const char **why)
{
	struct kvd_tier *t = &d->host_tier;
	const char *fault;
	uint64_t nb = 1;

	memset(t, 0, sizeof(*t));
	t->free_slot = t->lru_head = t->lru_tail = KVD_NIL;
	if (!d->cfg.host_tier_bytes)
		return 0;
	if (d->be->backend != KV_BACKEND_HOST) {
		*why = "host_tier_size needs the host backend (the cuda tier path is not built yet)";
		return -EOPNOTSUPP;
	}
	/* an index bucket per pool block is ample for a tier this size */
	while (nb < d->pool.bytes / KV_PAGE_BYTES * 64)
		nb <<= 1;
	t->index = calloc(nb, sizeof(*t->index));
	t->e = calloc(TIER_MIN_SLOTS, sizeof(*t->e));
	if (!t->index || !t->e) {
		kvd_tiers_exit(d);
		*why = "no memory for the host tier's index";
		return -ENOMEM;
	}
	t->index_mask = (uint32_t)(nb - 1);
	t->cap_slots = TIER_MIN_SLOTS;
	for (uint32_t s = TIER_MIN_SLOTS; s--; ) {
		t->e[s].hnext = t->free_slot == KVD_NIL ? 0 : t->free_slot + 1;
		t->free_slot = s;
	}
	t->cap_bytes = d->cfg.host_tier_bytes;
	fault = getenv("KVD_FAULT_TIER_CORRUPT");
	if (fault && *fault) {
		t->fault_corrupt = (uint32_t)strtoul(fault, NULL, 10);
		kvd_warn("KVD_FAULT_TIER_CORRUPT=%u: the host tier corrupts blocks on purpose (tests only)",
			 t->fault_corrupt);
	}
	d->pool.on_evict = tier_demote;
	return 0;
}

void kvd_tiers_exit(struct kvd *d)
{
	struct kvd_tier *t = &d->host_tier;

	for (uint32_t s = 0; t->e && s < t->cap_slots; s++)
		free(t->e[s].data);
	free(t->e);
	free(t->index);
	memset(t, 0, sizeof(*t));
	d->pool.on_evict = NULL;
}

/*
 * The entries of @hashes[from..nr), contiguous from @from, taken out of
 * the tier into @got (so that the pool's evictions while room is made
 * cannot drop them). Returns how many.
 */
static uint32_t take_run(struct kvd_tier *t, struct kvd_ns *ns,
			 const struct kv_hash *hashes, uint32_t from,
			 uint32_t nr, struct kvd_tier_entry *got)
{
	uint64_t sig = kvd_tier_sig(ns);
	uint32_t n = 0;

	for (uint32_t i = from; i < nr; i++) {
		struct kv_hash key = kvd_ns_key(ns, &hashes[i]);
		uint32_t s = find(t, sig, &key);

		if (s == KVD_NIL)
			break;
		got[n] = t->e[s];
		got[n++].data = unlink_entry(t, s);
	}
	return n;
}

/* Put taken entries back, as the newest, when they could not go in. */
static void put_back(struct kvd_tier *t, struct kvd_tier_entry *got,
		     uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t s = slot_get(t);

		if (s == KVD_NIL) {
			free(got[i].data);
			t->drops++;
			continue;
		}
		t->e[s] = got[i];
		t->e[s].hnext = 0;
		link_entry(t, s);
	}
}

/*
 * Copy the taken entries into the blocks at @ids, checking each one's
 * sum: a corrupted entry is dropped (counted, logged) and ends the run;
 * those after it go back to the tier. Returns how many were copied.
 */
static uint32_t copy_in(struct kvd *d, struct kvd_ns *ns,
			struct kvd_tier_entry *got, uint32_t n,
			const uint32_t *ids)
{
	struct kvd_tier *t = &d->host_tier;

	for (uint32_t i = 0; i < n; i++) {
		uint8_t *dst = (uint8_t *)d->pool_map +
			       (uint64_t)ids[i] * ns->block_bytes;

		if (XXH3_64bits(got[i].data, got[i].bytes) != got[i].sum) {
			free(got[i].data);
			t->corrupt++;
			kvd_info("host tier: a block of namespace %u failed its checksum: dropped",
				 ns->handle);
			put_back(t, got + i + 1, n - i - 1);
			return i;
		}
		memcpy(dst, got[i].data, got[i].bytes);
		free(got[i].data);
	}
	return n;
}

/* Publish @n promoted blocks at @ids under @hashes (@prev the parent). */
static uint32_t publish(struct kvd_client *c, const struct kv_hash *hashes,
			uint32_t from, uint32_t n, uint32_t *ids)
{
	static const struct kv_hash root;
	struct kv_commit e[64];
	uint32_t done = 0;

	while (done < n) {
		uint32_t k = n - done < 64 ? n - done : 64;

		for (uint32_t i = 0; i < k; i++) {
			uint32_t j = from + done + i;

			e[i] = (struct kv_commit){ .id = ids[j], .hash = hashes[j],
				.parent = j ? hashes[j - 1] : root };
		}
		if (kvd_ns_commit(c->ns, &c->holder, e, k) < 0)
			break;
		for (uint32_t i = 0; i < k; i++)
			ids[from + done + i] = e[i].id;	/* a dedup's */
		done += k;
	}
	return done;
}

uint32_t kvd_tier_promote(struct kvd *d, struct kvd_client *c,
			  const struct kv_hash *hashes, uint32_t from,
			  uint32_t nr, uint32_t *ids, bool fresh)
{
	struct kvd_tier *t = &d->host_tier;
	struct kvd_tier_entry *got;
	uint32_t n, ok, pub;

	if (!t->nr_entries || from >= nr)
		return 0;
	got = malloc((size_t)(nr - from) * sizeof(*got));
	if (!got)
		return 0;
	t->lookups++;
	n = take_run(t, c->ns, hashes, from, nr, got);
	if (n && !fresh && kvd_ns_alloc(c->ns, &c->holder, ids + from, n) < 0) {
		put_back(t, got, n);	/* no room: the pool's hits only */
		n = 0;
	}
	ok = copy_in(d, c->ns, got, n, ids + from);
	free(got);
	pub = publish(c, hashes, from, ok, ids);
	/* for a lookup, blocks copied in vain go back at once */
	if (!fresh && pub < n)
		kvd_ns_release(c->ns, &c->holder, ids + from + pub, n - pub);
	t->promotions += pub;
	return pub;
}

int kvd_tier_check(const struct kvd *d, const char **why)
{
	const struct kvd_tier *t = &d->host_tier;
	uint64_t bytes = 0, last = 0;
	uint32_t n = 0;

	for (uint32_t s = t->lru_head; s != KVD_NIL; s = t->e[s].lru_next) {
		const struct kvd_tier_entry *e = &t->e[s];

		if (!e->data || e->tick <= last || find(t, e->sig, &e->key) != s) {
			*why = "host tier: an LRU entry not indexed, freed or out of order";
			return -EUCLEAN;
		}
		last = e->tick;
		bytes += e->bytes;
		if (++n > t->nr_entries)
			break;
	}
	if (n != t->nr_entries || bytes != t->used_bytes ||
	    bytes > t->cap_bytes) {
		*why = "host tier: entries or bytes do not add up";
		return -EUCLEAN;
	}
	return 0;
}
