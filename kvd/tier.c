// SPDX-License-Identifier: MIT
/*
 * The host-memory tier (tier.h): an index of (namespace signature, key)
 * over entries in host RAM, on an LRU by demotion order, within a byte
 * budget. Entries are exclusive of the pool: a promotion takes the
 * entry out, an eviction puts the block in (a block that comes back
 * under a key already here replaces the older copy).
 *
 * The entries' memory and the copies to and from the pool are the
 * backend's (backend.h tier_*): on the host backend malloc and memcpy
 * through kvd's map of the pool; on cuda pinned host memory and copies
 * on kvd's stream, waited for.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "backend.h"
#include "client.h"
#include "daemon.h"
#include "ns.h"
#include "tier.h"


static void *tier_mem(struct kvd *d, uint64_t bytes)
{
	return d->be->tier_alloc ? d->be->tier_alloc(d, bytes) : malloc(bytes);
}

static void tier_mem_free(struct kvd *d, void *p, uint64_t bytes)
{
	if (d->be->tier_free)
		d->be->tier_free(d, p, bytes);
	else
		free(p);
}

/* @bytes between pool offset @off and @host: out of the pool or in. */
static int pool_copy(struct kvd *d, void *host, uint64_t off, uint64_t bytes,
		     bool out)
{
	uint8_t *pool = (uint8_t *)d->pool_map + off;

	if (d->be->tier_copy)
		return d->be->tier_copy(d, host, off, bytes, out);
	memcpy(out ? host : pool, out ? pool : host, bytes);
	return 0;
}

/* Out of the index and the LRU; its bytes stay with the caller. */
static void *unlink_entry(struct kvd_tier *t, uint32_t s)
{
	void *data = t->e[s].data;

	__kvd_tier_forget(t, s);
	return data;
}

static void drop_entry(struct kvd *d, uint32_t s)
{
	struct kvd_tier *t = &d->host_tier;
	uint64_t bytes = t->e[s].bytes;

	tier_mem_free(d, unlink_entry(t, s), bytes);
}

void __kvd_tier_host_drop(struct kvd *d, uint32_t s)
{
	drop_entry(d, s);
}

/* Link a filled slot in as the newest entry. */
static void link_entry(struct kvd_tier *t, uint32_t s)
{
	__kvd_tier_index(t, s);
	__kvd_tier_lru_add(t, s);
}

/*
 * Room for @bytes more in the host tier: its coldest go to the disk tier
 * (written back in the background), or are dropped without one.
 */
static void host_room(struct kvd *d, uint64_t bytes)
{
	struct kvd_tier *t = &d->host_tier;

	bool spilled = false;

	while (t->used_bytes + bytes > t->cap_bytes && t->lru_head != KVD_NIL) {
		uint32_t s = t->lru_head;

		if (!t->spill || !t->spill(d, &t->e[s]))
			t->drops++;
		else
			spilled = true;
		drop_entry(d, s);
	}
	if (spilled)
		t->spill(d, NULL);	/* the burst's writes submitted at once */
}

/*
 * @bytes at @src (host memory), or NULL: at pool offset @off, into the
 * host tier under (@sig, @key), replacing what is there under it: false
 * (nothing kept) when it cannot take them.
 */
bool __kvd_tier_host_put(struct kvd *d, const struct kv_hash *key,
			 uint64_t sig, const void *src, uint64_t off,
			 uint64_t bytes, bool from_disk)
{
	struct kvd_tier *t = &d->host_tier;
	uint32_t s;
	void *data;

	if (!t->cap_bytes || bytes > t->cap_bytes)
		return false;
	s = __kvd_tier_find(t, sig, key);
	if (s != KVD_NIL) {
		drop_entry(d, s);
		t->replaced++;
	}
	host_room(d, bytes);
	data = tier_mem(d, bytes);
	if (!data)
		goto drop;
	if (src)
		memcpy(data, src, bytes);
	else if (pool_copy(d, data, off, bytes, true))
		goto drop_data;
	s = __kvd_tier_slot(t);
	if (s == KVD_NIL)
		goto drop_data;
	t->e[s] = (struct kvd_tier_entry){
		.key = *key, .sig = sig, .bytes = bytes, .data = data,
		.sum = XXH3_64bits(data, bytes), .from_disk = from_disk,
		.state = KVD_TE_READY,
	};
	link_entry(t, s);
	return true;

drop_data:
	tier_mem_free(d, data, bytes);
drop:
	t->drops++;
	return false;
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

	if (!__kvd_tier_host_put(d, key, kvd_tier_sig(ns), NULL,
				 (uint64_t)id * ns->block_bytes,
				 ns->block_bytes, false))
		return;
	t->demotions++;
	if (t->fault_corrupt && t->demotions % t->fault_corrupt == 0)	/* tests */
		((uint8_t *)t->e[t->lru_tail].data)[ns->block_bytes / 2] ^= 0x5a;
}

/*
 * The host tier of d->cfg.host_tier_bytes (may be 0: then only its books,
 * for a disk tier's reads to land in; kvd_disk_init refuses that), and
 * the pool's evictions routed to it.
 */
int kvd_host_tier_init(struct kvd *d, const char **why)
{
	struct kvd_tier *t = &d->host_tier;
	const char *fault;

	if (__kvd_tier_books_init(t, d->pool.bytes)) {
		*why = "no memory for the tiers' index";
		return -ENOMEM;
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

void kvd_host_tier_exit(struct kvd *d)
{
	struct kvd_tier *t = &d->host_tier;

	d->pool.on_evict = NULL;
	for (uint32_t s = 0; t->e && s < t->cap_slots; s++)
		if (t->e[s].data)
			tier_mem_free(d, t->e[s].data, t->e[s].bytes);
	__kvd_tier_books_exit(t);
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
		uint32_t s = __kvd_tier_find(t, sig, &key);

		if (s != KVD_NIL && t->e[s].state != KVD_TE_READY)
			break;

		if (s == KVD_NIL)
			break;
		got[n] = t->e[s];
		got[n++].data = unlink_entry(t, s);
	}
	return n;
}

/*
 * Put taken entries back, as the newest, when they could not go in: room
 * is made as for any block taken in (the pool's evictions meanwhile may
 * have filled the tier).
 */
static void put_back(struct kvd *d, struct kvd_tier_entry *got, uint32_t n)
{
	struct kvd_tier *t = &d->host_tier;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t s;

		host_room(d, got[i].bytes);
		s = __kvd_tier_slot(t);
		if (s == KVD_NIL) {
			tier_mem_free(d, got[i].data, got[i].bytes);
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
		uint64_t off = (uint64_t)ids[i] * ns->block_bytes;
		bool ok = got[i].bytes == ns->block_bytes &&
			  XXH3_64bits(got[i].data, got[i].bytes) == got[i].sum;

		if (!ok) {
			t->corrupt++;
			kvd_warn("host tier: a block of namespace %u failed its checksum: dropped",
				 ns->handle);
		}
		if (ok && pool_copy(d, got[i].data, off, got[i].bytes, false))
			ok = false;	/* logged by the backend */
		tier_mem_free(d, got[i].data, got[i].bytes);
		if (!ok) {
			put_back(d, got + i + 1, n - i - 1);
			return i;
		}
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

void kvd_tier_take(struct kvd *d, struct kvd_client *c,
		   const struct kv_hash *hashes, uint32_t from, uint32_t nr,
		   struct kvd_tier_run *run)
{
	struct kvd_tier *t = &d->host_tier;

	run->got = NULL;
	run->from = from;
	run->n = 0;
	if (!t->nr_entries || from >= nr)
		return;
	run->got = malloc((size_t)(nr - from) * sizeof(*run->got));
	if (!run->got)
		return;
	t->lookups++;
	run->n = take_run(t, c->ns, hashes, from, nr, run->got);
	if (!run->n) {
		free(run->got);
		run->got = NULL;
	}
}

void kvd_tier_untake(struct kvd *d, struct kvd_tier_run *run)
{
	put_back(d, run->got, run->n);
	free(run->got);
	run->got = NULL;
	run->n = 0;
}

uint32_t kvd_tier_land(struct kvd *d, struct kvd_client *c,
		       const struct kv_hash *hashes, struct kvd_tier_run *run,
		       uint32_t *ids, bool fresh, uint32_t *from_disk)
{
	struct kvd_tier *t = &d->host_tier;
	uint32_t n = run->n, from = run->from, ok, pub;

	*from_disk = 0;
	if (!n) {
		free(run->got);
		return 0;
	}
	if (!fresh && kvd_ns_alloc(c->ns, &c->holder, ids + from, n) < 0) {
		kvd_tier_untake(d, run);	/* no room: the pool's hits */
		return 0;
	}
	ok = copy_in(d, c->ns, run->got, n, ids + from);
	for (uint32_t i = 0; i < ok; i++)
		*from_disk += run->got[i].from_disk;
	free(run->got);
	run->got = NULL;
	pub = publish(c, hashes, from, ok, ids);
	/* for a lookup, blocks copied in vain go back at once */
	if (!fresh && pub < n)
		kvd_ns_release(c->ns, &c->holder, ids + from + pub, n - pub);
	if (*from_disk > pub)
		*from_disk = pub;	/* a publish cut short: roughly */
	t->promotions += pub;
	return pub;
}

uint32_t kvd_tier_promote(struct kvd *d, struct kvd_client *c,
			  const struct kv_hash *hashes, uint32_t from,
			  uint32_t nr, uint32_t *ids, bool fresh,
			  uint32_t *from_disk)
{
	struct kvd_tier_run run;

	kvd_tier_take(d, c, hashes, from, nr, &run);
	return kvd_tier_land(d, c, hashes, &run, ids, fresh, from_disk);
}

int kvd_host_tier_check(const struct kvd *d, const char **why)
{
	const struct kvd_tier *t = &d->host_tier;
	uint64_t bytes = 0, last = 0;
	uint32_t n = 0;

	for (uint32_t s = t->lru_head; s != KVD_NIL; s = t->e[s].lru_next) {
		const struct kvd_tier_entry *e = &t->e[s];

		if (!e->data || e->state != KVD_TE_READY || e->tick <= last ||
		    __kvd_tier_find(t, e->sig, &e->key) != s) {
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

