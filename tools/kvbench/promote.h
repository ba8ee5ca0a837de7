/* SPDX-License-Identifier: MIT */
/*
 * --disk-tier-size: the promotion pass after a replay (promote.c) and
 * fio's sequential read beside it (fio.c).
 */
#ifndef KVB_PROMOTE_H
#define KVB_PROMOTE_H

#include "kvbench.h"

/*
 * kvb_tiers_read - the host and disk records of KV_ADMIN_TIERS from
 * @admin_path into @host and @disk (either NULL: not wanted); each
 * found sets its bool. 0, or -errno after saying why.
 */
int kvb_tiers_read(const char *admin_path, struct kv_admin_tier *host,
		   bool *have_host, struct kv_admin_tier *disk,
		   bool *have_disk);

/*
 * kvb_promotion_pass - after the replay, on the same private kvd: every
 * prompt of the stream looked up again (LOOKUP, released at once) from
 * --procs processes at once, none waiting for another; the disk tier's
 * promotions over the pass, and how long the LOOKUPs that read from it
 * took together (the union of their intervals), into a->promo. 0, or
 * -1 after saying why (the replay's report still stands).
 */
int kvb_promotion_pass(const struct kvb_opts *o, struct agg *a);

/*
 * kvb_fio_seqread - fio's sequential O_DIRECT read through io_uring, on
 * a new file in @p->fio_dir (removed after, and on SIGINT, SIGTERM,
 * SIGHUP), at kvd's read size and at 1 MiB, kvd's in-flight depth, at
 * least 256 MiB or the bytes the pass promoted; its JSON and log in
 * @tmpdir. Sets p->fio and what it measured; never fails the run.
 */
void kvb_fio_seqread(struct kvb_promo *p, const char *tmpdir);

#endif /* KVB_PROMOTE_H */
