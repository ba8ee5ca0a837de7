// SPDX-License-Identifier: MIT
/*
 * The disk tier's file as it lies on disk: unit 0 the superblock (the
 * layout, the tenants' fingerprint), then runs of a header and a
 * block's bytes. At start a kept file is scanned and its blocks adopted
 * (newest copy first) when its superblock is ours; a foreign file is
 * refused, a block device opened O_EXCL. Calls the tiers' books only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "daemon.h"
#include "tenant.h"
#include "tier_file.h"

/* ---- the superblock and the scan of a kept file ---- */

#define SB_MAGIC	0x42534b5344564b00ULL	/* "KVDSKSB" */

/* Unit 0: which layout, whose secrets, how many units. */
struct disk_sb {
	uint64_t	magic;
	uint32_t	version;
	uint32_t	nr_units;
	uint64_t	fingerprint;	/* of the tenants' keys */
	uint8_t		pad[40];
};
_Static_assert(sizeof(struct disk_sb) == 64, "disk_sb");

/*
 * The tenants' keys the blocks were written under: kvd.conf's tenants,
 * by name. Without any, each start draws new secrets: nothing written
 * under the last ones can ever be hit again.
 */
static uint64_t fingerprint(const struct kvd *d)
{
	XXH64_hash_t h = XXH3_64bits(d->secret, sizeof(d->secret));
	bool any = false;

	for (uint32_t i = 0; i < KVD_MAX_TENANTS; i++) {
		const struct kvd_tenant *t = &d->tenants[i];

		if (!t->live || !t->configured)
			continue;
		if (!any)
			h = 0;
		any = true;
		h = XXH3_64bits_withSeed(&t->key, sizeof(t->key),
					 h ^ XXH3_64bits(t->name, strlen(t->name)));
	}
	return h;
}

/* A run header found by the scan. */
struct found {
	struct disk_hdr	hdr;
	uint32_t	unit;
};

static bool hdr_ok(const struct kvd_disk *k, const struct disk_hdr *hdr,
		   uint32_t u)
{
	return hdr->magic == DISK_MAGIC && hdr->version == DISK_VERSION &&
	       hdr->hdr_bytes == sizeof(*hdr) && hdr->bytes &&
	       hdr->bytes <= (uint64_t)k->nr_units * UNIT &&
	       u + units_for(hdr->bytes) <= k->nr_units;
}

static int by_seq_down(const void *a, const void *b)
{
	const struct found *x = a, *y = b;

	return x->hdr.seq < y->hdr.seq ? 1 : x->hdr.seq > y->hdr.seq ? -1 : 0;
}

/* Slots by the seq their adopt() left in tick (qsort_r, @arg the tier). */
static int by_tick(const void *a, const void *b, void *arg)
{
	const struct kvd_tier *t = arg;
	uint64_t x = t->e[*(const uint32_t *)a].tick;
	uint64_t y = t->e[*(const uint32_t *)b].tick;

	return x < y ? -1 : x > y;
}

/* Are units [u, u + n) all free? */
static bool run_free(const struct kvd_disk *k, uint32_t u, uint32_t n)
{
	for (uint32_t i = u; i < u + n; i++)
		if (bit(k->used, i))
			return false;
	return true;
}

/* Register @f's run: false when a newer copy or a newer run has it. */
static bool adopt(struct kvd_tier *t, const struct found *f)
{
	struct kvd_disk *k = t->disk;
	uint32_t n = units_for(f->hdr.bytes), s;

	if (!run_free(k, f->unit, n) ||
	    __kvd_tier_find(t, f->hdr.sig, &f->hdr.key) != KVD_NIL)
		return false;
	s = __kvd_tier_slot(t);
	if (s == KVD_NIL)
		return false;
	t->e[s] = (struct kvd_tier_entry){ .key = f->hdr.key,
		.sig = f->hdr.sig, .sum = f->hdr.sum, .bytes = f->hdr.bytes,
		.unit = f->unit, .units = n, .state = KVD_TE_READY,
		.tick = f->hdr.seq };
	__kvd_tier_index(t, s);
	set_run(k->used, f->unit, n, true);
	if (f->hdr.seq > k->seq)
		k->seq = f->hdr.seq;
	return true;
}

/*
 * Every header the file holds (freed runs keep theirs, and a newer run
 * may cover part of an older one), read in chunks of the staging buffer
 * before anything else uses it. NULL without memory.
 */
static struct found *find_all(struct kvd_disk *k, uint32_t *nr)
{
	uint32_t chunk = k->stage_units, cap = 1024;
	struct found *f = malloc(cap * sizeof(*f));

	*nr = 0;
	for (uint32_t base = 1; f && base < k->nr_units; base += chunk) {
		uint32_t n = k->nr_units - base < chunk ? k->nr_units - base :
			     chunk;
		ssize_t r = pread(k->fd, k->stage, (size_t)n * UNIT,
				  (off_t)base * UNIT);

		if (r < (ssize_t)UNIT)
			break;
		for (uint32_t u = 0; u < (uint32_t)(r / UNIT); u++) {
			const struct disk_hdr *h = (const void *)(k->stage +
							(uint64_t)u * UNIT);
			struct found *g;

			if (!hdr_ok(k, h, base + u))
				continue;
			if (*nr == cap) {
				g = realloc(f, 2 * cap * sizeof(*f));
				if (!g)
					break;
				f = g;
				cap *= 2;
			}
			f[(*nr)++] = (struct found){ *h, base + u };
		}
	}
	return f;
}

/*
 * Rebuild the index: the newest copy of each block whose run no newer
 * run overlaps, on the LRU in write order (the oldest the coldest). A
 * run's bytes are checked when it is read back, as any other. Returns
 * the blocks kept.
 */
static uint32_t scan(struct kvd_tier *t)
{
	struct kvd_disk *k = t->disk;
	uint32_t nr, kept = 0, *slots;
	struct found *f = find_all(k, &nr);

	if (!f)
		return 0;
	qsort(f, nr, sizeof(*f), by_seq_down);
	for (uint32_t i = 0; i < nr; i++)
		kept += adopt(t, &f[i]);
	free(f);
	/* onto the LRU oldest first: by their write order */
	slots = malloc((size_t)kept * sizeof(*slots));
	nr = 0;
	for (uint32_t s = 0; slots && s < t->cap_slots; s++)
		if (t->e[s].state == KVD_TE_READY)
			slots[nr++] = s;
	if (slots)
		qsort_r(slots, nr, sizeof(*slots), by_tick, t);
	for (uint32_t i = 0; i < nr; i++)
		__kvd_tier_lru_add(t, slots[i]);
	free(slots);
	return kept;
}

/* The superblock: a kept file's blocks adopted when it is ours. */
int __kvd_disk_sb_open(struct kvd *d, struct kvd_tier *t)
{
	struct kvd_disk *k = t->disk;
	struct disk_sb *sb = (struct disk_sb *)k->stage;
	uint64_t fp = fingerprint(d);
	const char *why = NULL;

	memset(k->stage, 0, UNIT);
	if (d->cfg.disk_tier_persist &&
	    pread(k->fd, k->stage, UNIT, 0) == UNIT && sb->magic == SB_MAGIC) {
		if (sb->version != DISK_VERSION)
			why = "it was written by another layout version";
		else if (sb->nr_units != k->nr_units)
			why = "its size changed";
		else if (sb->fingerprint != fp)
			why = "it was written under other tenants' secrets (without [tenant] sections in kvd.conf each start draws new ones)";
		if (why)
			kvd_warn("disk tier %s: its blocks are not kept: %s",
				 d->cfg.disk_tier_path, why);
		else
			kvd_info("disk tier %s: %u blocks kept from the last run",
				 d->cfg.disk_tier_path, scan(t));
	}
	set_run(k->used, 0, 1, true);
	memset(k->stage, 0, UNIT);
	*sb = (struct disk_sb){ .magic = SB_MAGIC, .version = DISK_VERSION,
		.nr_units = k->nr_units, .fingerprint = fp };
	if (pwrite(k->fd, k->stage, UNIT, 0) != UNIT)
		return -errno;
	return fdatasync(k->fd) ? -errno : 0;
}

/* ---- opening it ---- */

/* Does the file at @fd start with a kvd tier's superblock? */
static bool is_tier_file(int fd)
{
	uint64_t magic = 0;
	void *buf = aligned_alloc(UNIT, UNIT);
	bool ok = false;

	if (buf && pread(fd, buf, UNIT, 0) >= (ssize_t)sizeof(magic)) {
		memcpy(&magic, buf, sizeof(magic));
		ok = magic == SB_MAGIC;
	}
	free(buf);
	return ok;
}

/* The file, sized; O_DIRECT where the file system takes it. */
int __kvd_disk_open(struct kvd *d, struct kvd_disk *k, uint64_t *bytes,
		    const char **why)
{
	const char *path = d->cfg.disk_tier_path;
	struct stat st;
	int fd;

	fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	k->direct = fd >= 0;
	if (fd < 0 && errno == EINVAL) {
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd >= 0)
			kvd_warn("disk tier %s: its file system does not take O_DIRECT: through the page cache",
				 path);
	}
	if (fd < 0) {
		snprintf(k->why, sizeof(k->why), "disk_tier_path %s: cannot open it: %s",
			 path, strerror(errno));
		*why = k->why;
		return -errno;
	}
	if (fstat(fd, &st))
		goto err;
	if (S_ISREG(st.st_mode) && st.st_size && !is_tier_file(fd)) {
		close(fd);
		snprintf(k->why, sizeof(k->why), "disk_tier_path %s: an existing file that is not a kvd tier file (kvd will not overwrite it)",
			 path);
		*why = k->why;
		return -EEXIST;
	}
	if (S_ISBLK(st.st_mode)) {
		/* O_EXCL on a block device: refused while it is mounted */
		int x = open(path, O_RDWR | O_EXCL | O_CLOEXEC |
			     (k->direct ? O_DIRECT : 0));

		if (x < 0) {
			close(fd);
			snprintf(k->why, sizeof(k->why), "disk_tier_path %s: the device is in use (mounted?): %s",
				 path, strerror(errno));
			*why = k->why;
			return -EBUSY;
		}
		close(fd);
		fd = x;
		off_t end = lseek(fd, 0, SEEK_END);

		if (end < 0)
			goto err;
		if ((uint64_t)end < *bytes)
			*bytes = (uint64_t)end;
	} else if (!S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(k->why, sizeof(k->why), "disk_tier_path %s: neither a regular file nor a block device",
			 path);
		*why = k->why;
		return -EINVAL;
	} else if (ftruncate(fd, (off_t)*bytes)) {
		goto err;
	}
	k->fd = fd;
	return 0;
err:
	snprintf(k->why, sizeof(k->why), "disk_tier_path %s: cannot size it: %s",
		 path, strerror(errno));
	*why = k->why;
	close(fd);
	return -errno;
}
