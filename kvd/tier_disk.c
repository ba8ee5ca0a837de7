// SPDX-License-Identifier: MIT
/*
 * The disk tier, below the host tier: a file or a block device opened
 * O_DIRECT, in runs of 4 KiB units, written and read through an
 * io_uring of its own with one registered staging buffer and the file
 * registered (fixed), so the loop that serves the rings never waits on
 * it: it only sees the ring's eventfd turn readable (kvd_tier_io_done).
 *
 * A run holds a header (struct disk_hdr: magic, layout version, the
 * namespace signature, the index key, the bytes and their XXH3-64) and
 * the block's bytes. The host tier's coldest entries are copied into
 * staging and written (kvd_disk_spill); until the write lands the entry
 * is WRITING: indexed, so a lookup knows to wait for it, never served.
 * A lookup that needs a block only this tier has reads it back into the
 * host tier (kvd_tier_fetch), checking header and checksum; the request
 * waits parked meanwhile, and one read serves every request that needs
 * the block. The blocks of one lookup that lie side by side on disk (a
 * prompt written back in one burst) are read with one I/O. A failed write or read drops the block, with its reason in
 * the log; a full disk drops the coldest entries; nothing is ever
 * served that was not read back whole and checked.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "client.h"
#include "daemon.h"
#include "loop.h"
#include "ns.h"
#include "tenant.h"
#include "tier.h"
#include "tier_file.h"

#define RING_ENTRIES	256
#define STAGE_MAX	(64U << 20)	/* staging: at most 64 MiB */
#define UD_READ		(1ULL << 32)
#define UD_NOP		(1ULL << 33)

/* Next fit of @n free units from *@cursor: the first, or KVD_NIL. */
static uint32_t run_alloc(unsigned long *m, uint32_t total, uint32_t *cursor,
			  uint32_t n)
{
	uint32_t i = *cursor, len = 0, seen = 0;

	if (n > total)
		return KVD_NIL;
	while (seen < total + n) {
		if (i + n > total) {	/* runs do not wrap */
			seen += total - i;
			i = 0;
			len = 0;
			continue;
		}
		if (bit(m, i + len)) {
			seen += len + 1;
			i += len + 1;
			len = 0;
			continue;
		}
		if (++len == n) {
			set_run(m, i, n, true);
			*cursor = i + n < total ? i + n : 0;
			return i;
		}
	}
	return KVD_NIL;
}

/* ---- the entries ---- */

/* Drop disk entry @s (not in flight): its run freed. */
static void drop(struct kvd_tier *t, uint32_t s)
{
	struct kvd_disk *k = t->disk;

	set_run(k->used, t->e[s].unit, t->e[s].units, false);
	__kvd_tier_forget(t, s);
}

/* Room for a run of @n units: the coldest servable entries go. */
static uint32_t disk_room(struct kvd_tier *t, uint32_t n)
{
	struct kvd_disk *k = t->disk;
	uint32_t u;

	while ((u = run_alloc(k->used, k->nr_units, &k->cursor, n)) == KVD_NIL) {
		if (t->lru_head == KVD_NIL)
			return KVD_NIL;
		drop(t, t->lru_head);
		t->drops++;
	}
	return u;
}

static struct io_uring_sqe *get_sqe(struct kvd_disk *k)
{
	struct io_uring *r = k->ring;
	struct io_uring_sqe *sqe = io_uring_get_sqe(r);

	if (!sqe && io_uring_submit(r) >= 0)
		sqe = io_uring_get_sqe(r);
	return sqe;
}

static void reap_some(struct kvd *d, bool nested);

/*
 * A staging run of @n units. When none is free, what has completed
 * meanwhile is reaped first (no wait: the ring is only peeked).
 */
static uint32_t stage_alloc(struct kvd *d, uint32_t n)
{
	struct kvd_disk *k = d->disk_tier.disk;
	uint32_t su = run_alloc(k->stage_used, k->stage_units,
				&k->stage_cursor, n);

	struct io_uring_cqe *cqe;

	if (su != KVD_NIL || !k->inflight)
		return su;
	io_uring_submit(k->ring);
	reap_some(d, true);
	su = run_alloc(k->stage_used, k->stage_units, &k->stage_cursor, n);
	/* at a stop (flush) waiting is fine: nothing is dropped for room */
	while (su == KVD_NIL && k->flushing && k->inflight &&
	       !io_uring_wait_cqe(k->ring, &cqe)) {
		reap_some(d, true);
		su = run_alloc(k->stage_used, k->stage_units,
			       &k->stage_cursor, n);
	}
	return su;
}

static bool kvd_disk_spill(struct kvd *d, const struct kvd_tier_entry *h)
{
	struct kvd_tier *t = &d->disk_tier;
	struct kvd_disk *k = t->disk;
	struct io_uring_sqe *sqe;
	struct disk_hdr *hdr;
	uint32_t n, su, u, s;

	if (!h) {	/* the end of a burst: its writes go in one submit */
		io_uring_submit(k->ring);
		return true;
	}
	n = units_for(h->bytes);

	s = __kvd_tier_find(t, h->sig, &h->key);
	if (s != KVD_NIL) {
		if (t->e[s].state != KVD_TE_READY)
			return true;	/* the same bytes on their way */
		drop(t, s);
		t->replaced++;
	}
	su = stage_alloc(d, n);
	if (su == KVD_NIL)
		goto busy;
	u = disk_room(t, n);
	sqe = u == KVD_NIL ? NULL : get_sqe(k);
	s = sqe ? __kvd_tier_slot(t) : KVD_NIL;
	if (s == KVD_NIL) {
		if (sqe)	/* taken: it must carry something */
			io_uring_prep_nop(sqe), io_uring_sqe_set_data64(sqe, UD_NOP);
		if (u != KVD_NIL)
			set_run(k->used, u, n, false);
		set_run(k->stage_used, su, n, false);
		goto busy;
	}
	hdr = (struct disk_hdr *)(k->stage + (uint64_t)su * UNIT);
	*hdr = (struct disk_hdr){ .magic = DISK_MAGIC, .version = DISK_VERSION,
		.hdr_bytes = sizeof(*hdr), .sig = h->sig, .key = h->key,
		.bytes = h->bytes, .sum = h->sum, .seq = ++k->seq };
	memcpy(hdr + 1, h->data, h->bytes);
	t->e[s] = (struct kvd_tier_entry){ .key = h->key, .sig = h->sig,
		.sum = h->sum, .bytes = h->bytes, .unit = u, .units = n,
		.sunit = su, .state = KVD_TE_WRITING, .io_ns = kvd_now_ns() };
	__kvd_tier_index(t, s);
	io_uring_prep_write_fixed(sqe, 0, hdr, n * UNIT, (uint64_t)u * UNIT, 0);
	/* IOSQE_ASYNC: to io_uring's workers at once, so that a file system
	 * that would block at issue (FUSE) never stalls the loop */
	sqe->flags |= IOSQE_FIXED_FILE | IOSQE_ASYNC;
	io_uring_sqe_set_data64(sqe, s);
	k->inflight++;
	t->demotions++;
	return true;
busy:
	k->busy++;
	return false;
}

/* Most units one read takes: 1 MiB, as a device's largest request. */
#define READ_RUN_UNITS	256

/*
 * Start reading disk entries @s[0..@n), READY and on one contiguous run
 * of units in that order, with one I/O into one staging run (the first
 * entry's user_data; rd_next links the rest): false when out of room.
 */
static bool start_read_run(struct kvd *d, struct kvd_tier *t,
			   const uint32_t *s, uint32_t n)
{
	struct kvd_disk *k = t->disk;
	struct io_uring_sqe *sqe;
	uint32_t su, units = 0;
	uint64_t now = kvd_now_ns();

	for (uint32_t i = 0; i < n; i++)
		units += t->e[s[i]].units;
	su = stage_alloc(d, units);
	if (su == KVD_NIL)
		return false;
	sqe = get_sqe(k);
	if (!sqe) {
		set_run(k->stage_used, su, units, false);
		return false;
	}
	for (uint32_t i = 0, u = su; i < n; i++) {
		struct kvd_tier_entry *e = &t->e[s[i]];

		__kvd_tier_lru_del(t, s[i]);	/* off the LRU while read */
		e->state = KVD_TE_READING;
		e->sunit = u;
		e->io_ns = now;
		e->rd_next = i + 1 < n ? s[i + 1] : KVD_NIL;
		u += e->units;
	}
	io_uring_prep_read_fixed(sqe, 0, k->stage + (uint64_t)su * UNIT,
				 units * UNIT, (uint64_t)t->e[s[0]].unit * UNIT, 0);
	sqe->flags |= IOSQE_FIXED_FILE | IOSQE_ASYNC;
	io_uring_sqe_set_data64(sqe, UD_READ | s[0]);
	k->inflight++;
	return true;
}

/* Slots by their first unit on disk (qsort_r, @arg the tier). */
static int by_unit(const void *a, const void *b, void *arg)
{
	const struct kvd_tier *t = arg;
	uint32_t x = t->e[*(const uint32_t *)a].unit;
	uint32_t y = t->e[*(const uint32_t *)b].unit;

	return x < y ? -1 : x > y;
}

/*
 * Read @nr READY entries @s, sorted by unit: those that lie side by side
 * on disk in one I/O each run (a prompt's blocks, written back together,
 * mostly do), so that a lookup of many blocks reads as the disk reads
 * best. Returns how many entries are being read.
 */
static uint32_t start_reads(struct kvd *d, struct kvd_tier *t, uint32_t *s,
			    uint32_t nr)
{
	uint32_t started = 0, n = 0;

	qsort_r(s, nr, sizeof(*s), by_unit, t);
	/* a request may name a hash twice: its entry is read once */
	for (uint32_t i = 0; i < nr; i++)
		if (!n || s[i] != s[n - 1])
			s[n++] = s[i];
	nr = n;
	for (uint32_t i = 0, j; i < nr; i = j) {
		uint32_t units = t->e[s[i]].units;

		for (j = i + 1; j < nr; j++) {
			const struct kvd_tier_entry *p = &t->e[s[j - 1]];

			if (p->unit + p->units != t->e[s[j]].unit ||
			    units + t->e[s[j]].units > READ_RUN_UNITS)
				break;
			units += t->e[s[j]].units;
		}
		if (start_read_run(d, t, s + i, j - i)) {
			started += j - i;
			continue;
		}
		/* no staging run that long: what fits, one entry a read */
		for (uint32_t m = i; j - i > 1 && m < j &&
		     start_read_run(d, t, s + m, 1); m++)
			started++;
	}
	return started;
}

int kvd_tier_fetch(struct kvd *d, struct kvd_client *c,
		   const struct kv_hash *hashes, uint32_t nr)
{
	struct kvd_tier *t = &d->disk_tier, *h = &d->host_tier;
	uint64_t sig, budget = h->cap_bytes / 2;
	uint32_t i, waits = 0, nr_read = 0, *rd = NULL;

	if (!t->disk || !t->e || !nr || !t->nr_indexed)
		return 0;
	/* the hot path, a pool hit: its last block in the pool, all of it
	 * is (eviction goes leaf first), and one probe says so */
	if (kvd_ns_peek(c->ns, hashes + nr - 1, 1))
		return 0;
	sig = kvd_tier_sig(c->ns);
	i = kvd_ns_peek(c->ns, hashes, nr);
	for (; i < nr; i++) {
		struct kv_hash key = kvd_ns_key(c->ns, &hashes[i]);
		uint32_t s = __kvd_tier_find(h, sig, &key);

		if (s != KVD_NIL && h->e[s].state == KVD_TE_READY) {
			/* the host tier has it; what one request brings
			 * there stays within half of it (else the reads
			 * would push out what they brought) */
			if (h->e[s].bytes > budget)
				break;
			budget -= h->e[s].bytes;
			continue;
		}
		s = __kvd_tier_find(t, sig, &key);
		if (s == KVD_NIL)
			break;			/* no tier has it */
		if (t->e[s].state == KVD_TE_READY) {
			if (t->e[s].bytes > budget)
				break;		/* that far, this time */
			if (!rd && !(rd = malloc((size_t)(nr - i) *
						 sizeof(*rd))))
				break;
			budget -= t->e[s].bytes;
			rd[nr_read++] = s;
			continue;
		}
		waits++;			/* being read, or written */
	}
	if (nr_read) {
		uint32_t n = start_reads(d, t, rd, nr_read);

		t->lookups += n;
		waits += n;
	}
	free(rd);
	if (!waits)
		return 0;
	io_uring_submit(t->disk->ring);
	return -EINPROGRESS;
}

static void io_failed(struct kvd_tier *t, uint32_t s, bool write, int res)
{
	static struct kvd_ratelimit rl;

	t->disk->errors++;
	if (!kvd_ratelimit(&rl))
		return;
	kvd_warn("disk tier: %s of a %llu-byte block failed (%s): dropped",
		 write ? "write" : "read", (unsigned long long)t->e[s].bytes,
		 res < 0 ? strerror(-res) : "short transfer");
}

static void write_done(struct kvd_tier *t, uint32_t s, int res)
{
	struct kvd_disk *k = t->disk;
	struct kvd_tier_entry *e = &t->e[s];

	set_run(k->stage_used, e->sunit, e->units, false);
	if (res != (int)(e->units * UNIT)) {
		io_failed(t, s, true, res);
		set_run(k->used, e->unit, e->units, false);
		__kvd_tier_forget(t, s);
		return;
	}
	k->writes++;
	__kvd_tier_lru_add(t, s);
}

/* The header and bytes read back are the block's, whole: checked. */
static bool read_ok(const struct kvd_tier_entry *e, const struct disk_hdr *hdr)
{
	return hdr->magic == DISK_MAGIC && hdr->version == DISK_VERSION &&
	       hdr->hdr_bytes == sizeof(*hdr) && hdr->sig == e->sig &&
	       !memcmp(&hdr->key, &e->key, sizeof(e->key)) &&
	       hdr->bytes == e->bytes && hdr->sum == e->sum &&
	       XXH3_64bits(hdr + 1, e->bytes) == e->sum;
}

static void read_done(struct kvd *d, struct kvd_tier *t, uint32_t s, int res)
{
	struct kvd_disk *k = t->disk;
	/* a copy: the host tier's put below may spill to this tier, whose
	 * entries then move (its slot array grows) */
	const struct kvd_tier_entry e = t->e[s];
	const struct disk_hdr *hdr;

	hdr = (const void *)(k->stage + (uint64_t)e.sunit * UNIT);
	if (res != (int)(e.units * UNIT)) {
		io_failed(t, s, false, res);
	} else if (!read_ok(&e, hdr)) {
		t->corrupt++;
		kvd_warn("disk tier: a block read back does not match its header or checksum: dropped");
	} else {
		k->reads++;
		/* into the host tier, exclusive: the disk's copy goes (its
		 * staging run stays taken until then: no spill reuses it) */
		if (__kvd_tier_host_put(d, &e.key, e.sig, hdr + 1, 0, e.bytes,
					true))
			t->promotions++;
	}
	set_run(k->stage_used, e.sunit, e.units, false);
	set_run(k->used, e.unit, e.units, false);
	__kvd_tier_forget(t, s);
}

/*
 * The read of entries @s, rd_next, ... (start_read_run) is done with
 * @res bytes: each entry gets its share, whole or short.
 */
static void read_run_done(struct kvd *d, struct kvd_tier *t, uint32_t s,
			  int res)
{
	int64_t off = 0;

	while (s != KVD_NIL) {
		uint32_t next = t->e[s].rd_next;	/* s may go below */
		int64_t want = (int64_t)t->e[s].units * UNIT;
		int r = res < 0 ? res : res >= off + want ? (int)want :
			res > off ? (int)(res - off) : 0;

		read_done(d, t, s, r);
		off += want;
		s = next;
	}
}

/*
 * Every completion ready on the ring. From inside a spill or a fetch
 * (@nested: staging was full) a finished read is only noted: landing it
 * puts a block into the host tier, which may spill again and move the
 * entries the caller is working on; those land at the next reap.
 */
static void reap_some(struct kvd *d, bool nested)
{
	struct kvd_tier *t = &d->disk_tier;
	struct kvd_disk *k = t->disk;
	struct io_uring_cqe *cqe;
	bool landed = false;

	while (!nested && k->nr_late) {
		struct kvd_late l = k->late[--k->nr_late];

		read_run_done(d, t, l.slot, l.res);
		landed = true;
	}
	while (io_uring_peek_cqe(k->ring, &cqe) == 0) {
		uint64_t ud = io_uring_cqe_get_data64(cqe);
		uint32_t s = (uint32_t)ud;
		int res = cqe->res;

		io_uring_cqe_seen(k->ring, cqe);
		if (ud & UD_NOP)
			continue;
		k->inflight--;
		if (s >= t->cap_slots)
			continue;
		kvd_lat_add(ud & UD_READ ? &k->read_lat : &k->write_lat,
			    kvd_now_ns() - t->e[s].io_ns);
		if (!(ud & UD_READ))
			write_done(t, s, res);
		else if (nested)	/* at most one per staging unit */
			k->late[k->nr_late++] = (struct kvd_late){ s, res };
		else
			read_run_done(d, t, s, res);
		landed = true;
	}
	/* parked lookups try again: what they wait for may be in now */
	if (landed)
		d->pool.frees++;
}

static void reap(struct kvd *d)
{
	reap_some(d, false);
}

void kvd_tier_io_done(struct kvd *d, int res)
{
	struct kvd_disk *k = d->disk_tier.disk;

	if (!k)
		return;
	reap(d);
	if (!d->stop && kvd_loop_arm_tier(d, k->evfd, &k->evbuf))
		kvd_err("disk tier: cannot watch its completions any more");
}

/*
 * kvd stops with persistence on: what the pool and the host tier cache
 * is written to disk, and waited for (no client is served any more).
 */
static void flush(struct kvd *d)
{
	struct kvd_tier *h = &d->host_tier;
	struct kvd_disk *k = d->disk_tier.disk;
	struct io_uring_cqe *cqe;

	k->flushing = true;
	for (uint32_t i = 0; d->ns && i < d->cfg.max_namespaces; i++)
		if (d->ns[i].live)
			kvd_ns_evict_all(&d->ns[i]);	/* into the host tier */
	while (h->lru_head != KVD_NIL) {
		uint32_t s = h->lru_head;

		if (!kvd_disk_spill(d, &h->e[s]) && k->inflight) {
			/* no staging room: wait for a write, try again */
			io_uring_submit(k->ring);
			if (io_uring_wait_cqe(k->ring, &cqe))
				break;
			reap(d);
			continue;
		}
		__kvd_tier_host_drop(d, s);
	}
	io_uring_submit(k->ring);
	while (k->inflight && !io_uring_wait_cqe(k->ring, &cqe))
		reap(d);
	fdatasync(k->fd);
}

/* ---- set-up ---- */

static int ring_init(struct kvd_disk *k, const char **why)
{
	struct iovec iov = { k->stage, (size_t)k->stage_units * UNIT };
	struct io_uring *r = calloc(1, sizeof(*r));
	int ret;

	if (!r)
		return -ENOMEM;
	k->ring = r;
	ret = io_uring_queue_init(RING_ENTRIES, r, 0);
	if (ret) {
		free(r);
		k->ring = NULL;
		*why = "disk tier: no io_uring for it";
		return ret;
	}
	ret = io_uring_register_buffers(r, &iov, 1);
	if (!ret)
		ret = io_uring_register_files(r, &k->fd, 1);
	k->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!ret && k->evfd < 0)
		ret = -errno;
	if (!ret)
		ret = io_uring_register_eventfd(r, k->evfd);
	if (ret)
		*why = "disk tier: cannot register its buffer, file or eventfd";
	return ret;
}

static int kvd_disk_init(struct kvd *d, const char **why)
{
	struct kvd_tier *t = &d->disk_tier;
	uint64_t bytes = d->cfg.disk_tier_bytes, stage;
	struct kvd_disk *k;
	int ret;

	if (!d->cfg.host_tier_bytes) {
		*why = "disk_tier_size needs a host tier above it (host_tier_size)";
		return -EINVAL;
	}
	if (!d->cfg.disk_tier_path[0]) {
		*why = "disk_tier_size needs disk_tier_path";
		return -EINVAL;
	}
	k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	k->fd = k->evfd = -1;
	t->disk = k;
	ret = __kvd_disk_open(d, k, &bytes, why);
	if (ret)
		return ret;
	k->nr_units = (uint32_t)(bytes / UNIT < UINT32_MAX ? bytes / UNIT :
				 UINT32_MAX);
	stage = bytes / 8 < STAGE_MAX ? bytes / 8 : STAGE_MAX;
	if (stage < 64 * UNIT)
		stage = 64 * UNIT;
	k->stage_units = (uint32_t)(stage / UNIT);
	k->used = calloc(k->nr_units / BPL + 1, sizeof(unsigned long));
	k->stage_used = calloc(k->stage_units / BPL + 1, sizeof(unsigned long));
	k->stage = aligned_alloc(UNIT, (size_t)k->stage_units * UNIT);
	k->late = calloc(k->stage_units, sizeof(*k->late));
	if (!k->used || !k->stage_used || !k->stage || !k->late) {
		*why = "no memory for the disk tier's books";
		return -ENOMEM;
	}
	ret = __kvd_disk_sb_open(d, t);
	if (ret) {
		*why = "disk_tier_path: cannot write its superblock";
		return ret;
	}
	ret = ring_init(k, why);
	if (ret)
		return ret;
	t->cap_bytes = (uint64_t)k->nr_units * UNIT;
	return 0;
}

void kvd_tiers_stop(struct kvd *d)
{
	struct kvd_disk *k = d->disk_tier.disk;

	if (k && k->ring && d->cfg.disk_tier_persist)
		flush(d);
}

int kvd_tiers_start(struct kvd *d)
{
	struct kvd_disk *k = d->disk_tier.disk;

	return k ? kvd_loop_arm_tier(d, k->evfd, &k->evbuf) : 0;
}

static void kvd_disk_exit(struct kvd *d)
{
	struct kvd_disk *k = d->disk_tier.disk;
	struct io_uring_cqe *cqe;

	if (!k)
		return;
	if (k->ring) {
		/* what is in flight lands before its buffer goes */
		while (k->inflight && !io_uring_wait_cqe(k->ring, &cqe)) {
			if (!(io_uring_cqe_get_data64(cqe) & UD_NOP))
				k->inflight--;
			io_uring_cqe_seen(k->ring, cqe);
		}
		io_uring_queue_exit(k->ring);
		free(k->ring);
	}
	if (k->evfd >= 0)
		close(k->evfd);
	if (k->fd >= 0)
		close(k->fd);
	free(k->stage);
	free(k->used);
	free(k->stage_used);
	free(k->late);
	free(k);
	d->disk_tier.disk = NULL;
}

static int kvd_disk_check(const struct kvd *d, const char **why)
{
	const struct kvd_tier *t = &d->disk_tier;
	const struct kvd_disk *k = t->disk;
	uint64_t bytes = 0;
	uint32_t n = 0;

	if (!k)
		return 0;
	for (uint32_t s = t->lru_head; s != KVD_NIL; s = t->e[s].lru_next) {
		const struct kvd_tier_entry *e = &t->e[s];

		if (e->state != KVD_TE_READY || ++n > t->nr_entries ||
		    __kvd_tier_find(t, e->sig, &e->key) != s ||
		    e->unit + e->units > k->nr_units ||
		    !bit(k->used, e->unit) || !bit(k->used, e->unit + e->units - 1)) {
			*why = "disk tier: an LRU entry not indexed, not ready or off its run";
			return -EUCLEAN;
		}
		bytes += e->bytes;
	}
	if (n != t->nr_entries || bytes != t->used_bytes) {
		*why = "disk tier: entries or bytes do not add up";
		return -EUCLEAN;
	}
	return 0;
}

/* ---- the tiers together: kvd starts, stops and checks them here ---- */

int kvd_tiers_init(struct kvd *d, const char **why)
{
	int ret;

	memset(&d->host_tier, 0, sizeof(d->host_tier));
	memset(&d->disk_tier, 0, sizeof(d->disk_tier));
	if (!d->cfg.host_tier_bytes && !d->cfg.disk_tier_bytes)
		return 0;
	ret = kvd_host_tier_init(d, why);
	if (!ret && d->cfg.disk_tier_bytes) {
		ret = __kvd_tier_books_init(&d->disk_tier, d->pool.bytes);
		if (ret)
			*why = "no memory for the tiers' index";
		else
			ret = kvd_disk_init(d, why);
		if (!ret)
			d->host_tier.spill = kvd_disk_spill;
	}
	if (ret)
		kvd_tiers_exit(d);
	return ret;
}

void kvd_tiers_exit(struct kvd *d)
{
	kvd_disk_exit(d);
	__kvd_tier_books_exit(&d->disk_tier);
	kvd_host_tier_exit(d);
}

int kvd_tier_check(const struct kvd *d, const char **why)
{
	int ret = kvd_host_tier_check(d, why);

	return ret ? ret : kvd_disk_check(d, why);
}
