// SPDX-License-Identifier: MIT
/*
 * The flow of the load and replay modes: a private kvd if asked, probe
 * kvd once per model, the offline figures, run the fleet, then the
 * stats after the run, the report and the exit status.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bound.h"
#include "fleet.h"
#include "kvd.h"
#include "promote.h"
#include "report.h"
#include "run.h"
#include "series.h"

/* Connect once per model: kvd is there, takes it, and a request fits. */
static int probe_model(const struct kvb_opts *o, struct agg *a, unsigned m)
{
	struct kv_pool_info *info = &a->info[m];
	struct kv_client *c;
	int ret;

	if (kvb_connect(o, m, &c, "cannot use kvd"))
		return 1;
	kv_pool_info(c, info);
	if (info->backend == KV_BACKEND_CUDA && !m)
		fprintf(stderr, "kvbench: the pool is on GPU %d: block bytes are not written or verified (tests/gpu checks them on the device)\n",
			info->device);
	ret = kv_stats(c, &a->before[m]);
	kv_disconnect(c);
	if (ret) {
		fprintf(stderr, "kvbench: STATS: %s\n", strerror(-ret));
		return 1;
	}
	if (o->max_req_blocks > info->max_blocks) {
		if (o->mode == KVB_MODE_REPLAY)
			fprintf(stderr, "kvbench: the longest request (%u tokens) needs %u blocks; the pool holds only %u blocks of %llu bytes%s%s\n",
				o->tr->max_total, o->max_req_blocks,
				info->max_blocks,
				(unsigned long long)info->block_bytes,
				o->models > 1 ? " for model " : "",
				o->models > 1 ? o->mdl[m].id : "");
		else
			fprintf(stderr, "kvbench: --max-tokens %u needs %u-block requests; the pool holds only %u blocks of %llu bytes\n",
				o->max_tokens, o->max_req_blocks,
				info->max_blocks,
				(unsigned long long)info->block_bytes);
		return 2;
	}
	if (info->block_bytes % sizeof(uint64_t)) {
		fprintf(stderr, "kvbench: %llu-byte blocks: not a whole number of 64-bit words\n",
			(unsigned long long)info->block_bytes);
		return 1;
	}
	return 0;
}

/* Each model, and the admin socket when there are samples to take. */
static int probe(const struct kvb_opts *o, struct agg *a)
{
	struct kv_admin_status st;
	int ret;

	for (unsigned m = 0; m < o->models; m++) {
		ret = probe_model(o, a, m);
		if (ret)
			return ret;
	}
	if (!o->sample_ms && !o->perf_stat)
		return 0;
	a->reply = malloc(KV_ADMIN_REPLY_MAX);
	if (!a->reply) {
		fprintf(stderr, "kvbench: out of memory\n");
		return 1;
	}
	ret = kvb_admin_status(o, a, &st);
	if (ret < 0) {
		fprintf(stderr, "kvbench: admin socket %s: %s (the time series and --perf-stat need it; see --admin-socket)\n",
			o->admin_path, strerror(-ret));
		return 1;
	}
	return 0;
}

static int final_stats(const struct kvb_opts *o, struct agg *a)
{
	int ret = 0, err;

	for (unsigned m = 0; m < o->models; m++) {
		struct kv_client *c = a->mon[m];

		if (!c && kvb_connect(o, m, &c, "pool stats after the run")) {
			ret = -1;
			continue;
		}
		err = kv_stats(c, &a->after[m]);
		kv_disconnect(c);
		a->mon[m] = NULL;
		if (err) {
			fprintf(stderr, "kvbench: STATS: %s\n", strerror(-err));
			ret = -1;
		}
	}
	a->have_after = !ret;
	return ret;
}

/*
 * --host-tier-size, --disk-tier-size: the private kvd's tiers (records
 * "host" and "disk" of KV_ADMIN_TIERS), which started with it, so that
 * their counts are this run's.
 */
static void tier_stats(const struct kvb_opts *o, struct agg *a)
{
	if (!o->host_tier ||
	    kvb_tiers_read(o->admin_path, &a->tier, &a->have_tier,
			   &a->disk_tier, &a->have_disk_tier))
		return;
	if (!a->have_tier)
		fprintf(stderr, "kvbench: kvd reports no host tier (--host-tier-size %s)\n",
			o->host_tier);
	if (o->disk_tier && !a->have_disk_tier)
		fprintf(stderr, "kvbench: kvd reports no disk tier (--disk-tier-size %s)\n",
			o->disk_tier);
}

/*
 * --disk-tier-size: after a replay that ran, the promotion pass on the
 * same kvd, then fio beside it (unless --no-fio); neither fails the run.
 */
static void disk_bandwidth(const struct kvb_opts *o, struct agg *a,
			   const struct bench_kvd *pk, bool ok)
{
	struct kvb_promo *p = &a->promo;

	snprintf(p->fio_dir, sizeof(p->fio_dir), "%s", pk->disk_dir);
	p->fio = KVB_FIO_SKIPPED;
	snprintf(p->fio_why, sizeof(p->fio_why), "%s",
		 o->no_fio ? "--no-fio" : "no promotion pass to compare with");
	if (!o->disk_tier || !a->have_disk_tier || !ok)
		return;
	if (!o->quiet)
		fprintf(stderr, "kvbench: promotion pass: %u processes look up the stream's %zu prompts again\n",
			o->procs, o->tr->nr);
	if (kvb_promotion_pass(o, a) || o->no_fio)
		return;
	if (!o->quiet)
		fprintf(stderr, "kvbench: fio: sequential read in %s\n",
			p->fio_dir);
	kvb_fio_seqread(p, pk->dir);
}

/* --compare-tier: keep the pool-only run's figures for the next run. */
static void tier_base_save(const struct kvb_opts *o, const struct agg *a,
			   bool ok)
{
	struct kvb_tier_base *b = o->tier_base;

	if (!b || o->host_tier)
		return;
	b->have = true;
	b->ok = ok;
	b->sum = a->sum;
	b->wall_ns = a->t_end - a->t_start;
	b->evictions = 0;
	for (unsigned m = 0; a->have_after && m < o->models; m++)
		b->evictions += a->after[m].evictions - a->before[m].evictions;
}

/*
 * --json FILE, opened before the run so that a bad path fails at once,
 * but emptied only when the report is written: a run that never starts
 * leaves a file it found as it was, and removes only one it made.
 */
static FILE *json_open(const char *path, bool *created)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	FILE *f;

	*created = fd >= 0;
	if (fd < 0 && errno == EEXIST)
		fd = open(path, O_WRONLY | O_CLOEXEC);
	f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f) {
		fprintf(stderr, "kvbench: --json %s: %s\n", path,
			strerror(errno));
		if (fd >= 0)
			close(fd);
	}
	return f;
}

/* Aggregate, report, and decide the exit status; closes @json. */
static int finish(const struct kvb_opts *o, struct agg *a, struct child *ch,
		  const struct bench_kvd *pk, FILE *json, bool ok)
{
	if (kvb_aggregate(a, ch, o->procs, o->models)) {
		fprintf(stderr, "kvbench: out of memory for the samples\n");
		if (json)
			fclose(json);
		return 1;
	}
	if (final_stats(o, a))
		ok = false;
	tier_stats(o, a);
	if (o->mode == KVB_MODE_REPLAY && o->compare)
		kvb_replay_as_run(o, a, ch);
	ok = ok && !a->sum.bad_blocks;
	tier_base_save(o, a, ok);
	if (o->mode == KVB_MODE_REPLAY)
		disk_bandwidth(o, a, pk, ok);
	if (!o->quiet)
		kvb_report(stdout, false, o, a, ch, ok);
	if (json && kvb_write_json(o, json, a, ch, ok))
		ok = false;
	if (a->sum.bad_blocks)
		fprintf(stderr, "kvbench: %llu blocks did not verify\n",
			(unsigned long long)a->sum.bad_blocks);
	return ok ? 0 : 1;
}

int kvb_fleet_run(struct kvb_opts *o)
{
	struct child *ch = NULL;
	struct agg a = { 0 };
	struct bench_kvd pk = { 0 };
	struct bench_tiers tiers = {
		.host_size = o->host_tier, .disk_size = o->disk_tier,
		.disk_path = o->disk_tier_path,
	};
	bool json_created = false;
	FILE *json = NULL;
	int ret;

	if (o->private_pool) {
		ret = bench_kvd_start(&pk, o->kvd_bin, o->private_pool,
				      &tiers) ? 1 : 0;
		if (ret)
			return ret;
		o->socket = pk.sock;
		if (!o->admin_socket)
			snprintf(o->admin_path, sizeof(o->admin_path), "%s",
				 pk.admin);
	}
	ret = probe(o, &a);
	if (ret)
		goto out;
	if (o->mode == KVB_MODE_REPLAY) {
		ret = kvb_replay_analyse(o, &a);
		if (ret)
			goto out;
	}
	if (o->json_path) {
		json = json_open(o->json_path, &json_created);
		if (!json) {
			ret = 2;
			goto out;
		}
	}
	/* A process that died must not take the parent with it. */
	signal(SIGPIPE, SIG_IGN);
	ch = calloc(o->procs, sizeof(*ch));
	if (!ch) {
		fprintf(stderr, "kvbench: out of memory\n");
		ret = 1;
		goto out;
	}
	ret = kvb_run_children(o, ch, &a);
	if (ret < 0) {
		/* Nothing ran: no report, and no empty JSON file left. */
		if (json) {
			fclose(json);
			json = NULL;
			if (json_created)
				unlink(o->json_path);
		}
		ret = 1;
		goto out;
	}
	/* a pipe or /dev/stdout cannot be truncated, nor needs to be */
	if (json && ftruncate(fileno(json), 0) && errno != EINVAL)
		fprintf(stderr, "kvbench: --json %s: %s\n", o->json_path,
			strerror(errno));
	ret = finish(o, &a, ch, &pk, json, !ret);
	json = NULL;
out:
	if (json)
		fclose(json);
	for (unsigned m = 0; m < KVB_MAX_MODELS; m++)
		if (a.mon[m])
			kv_disconnect(a.mon[m]);
	free(a.reply);
	kvb_series_free(&a.ts);
	for (unsigned i = 0; ch && i < o->procs; i++) {
		for (int k = 0; k < KVB_NR_OPS; k++)
			free(ch[i].samp[k]);
		free(ch[i].spans);
	}
	free(ch);
	for (int k = 0; k < KVB_NR_OPS; k++)
		free(a.samp[k]);
	if (o->private_pool) {
		bench_kvd_stop(&pk);
		o->socket = NULL;	/* it was pk's */
	}
	return ret;
}
