// SPDX-License-Identifier: MIT
/*
 * The host tier behind the pool, with a real kvd: prompts that do not
 * fit the pool are evicted into the tier and come back on a hit, every
 * byte as it was written; kv_seq_hits says where each hit came from; a
 * lookup with KV_SQE_POOL_ONLY brings nothing back, one without it
 * does, and its CQE's flags count them; another model of the same
 * geometry never gets them; a tier too small drops its coldest and
 * serves nothing wrong; a block corrupted in the tier is dropped, not
 * served; kvctl check holds throughout.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROMPTS		10

#include "tier_util.h"

/* LOOKUP of prompt @p's hashes, with or without KV_SQE_POOL_ONLY. */
static int lookup(struct kv_client *c, uint32_t p, int pool_only,
		  uint32_t *host)
{
	uint32_t t[NTOK];
	struct kv_hash *h = kv_data_ptr(c, 0, FULL * sizeof(*h));
	kv_block_t *ids = kv_data_ptr(c, 4096, FULL * sizeof(*ids));
	struct kv_sqe *sqe;
	struct kv_cqe *cqe;
	int res;

	tokens(t, p);
	T_EQ(kv_hash_blocks(0, NULL, 0, t, NTOK, BT, NULL, h), FULL);
	sqe = kv_get_sqe(c);
	T_ASSERT(sqe);
	kv_prep_lookup(sqe, 0, FULL, 4096);
	if (pool_only)
		sqe->flags |= KV_SQE_POOL_ONLY;
	T_EQ(kv_submit_and_wait(c, 1), 1);
	T_EQ(kv_wait_cqe(c, &cqe), 0);
	res = cqe->res;
	*host = KV_CQE_HOST_HITS(cqe->flags);
	T_EQ(KV_CQE_DISK_HITS(cqe->flags), 0);
	kv_cqe_seen(c, cqe);
	for (int i = 0; i < res; i++)
		T_ASSERT(same(c, ids[i], p, (uint32_t)i));
	if (res > 0)
		T_EQ(kv_release(c, ids, (unsigned)res), res);
	return res;
}

static void test_round_trip(void)
{
	struct kv_client *c, *o;
	uint32_t host_total = 0, host;
	int n;

	T_EQ(t_connect(&k, "tiered", NULL, &c), 0);
	for (uint32_t p = 0; p < PROMPTS; p++)
		write_prompt(c, p);
	check_books();
	/* 200 blocks in a 128-block pool: the first prompts left it */
	for (uint32_t p = 0; p < PROMPTS; p++) {
		struct kv_seq_hits h = read_prompt(c, p);

		T_EQ(h.pool + h.host, FULL);
		host_total += h.host;
	}
	T_ASSERT(host_total > 0);
	check_books();

	/* pool only: fewer hits; then the tier brings the rest back */
	for (uint32_t p = 0; p < PROMPTS; p++)
		write_prompt(c, p + 100);	/* push prompt 0 out again */
	n = lookup(c, 0, 1, &host);
	T_EQ(host, 0);
	T_ASSERT(n < FULL);
	T_EQ(lookup(c, 0, 0, &host), FULL);
	T_EQ(host, FULL - n);
	check_books();

	/* another model, same geometry and tokens: nothing of "tiered"
	 * (its pool blocks evicted first, into the tier, so that the other
	 * model has pages: kvctl evict demotes too) */
	free(t_kvctl(&k, "evict"));
	T_EQ(t_connect(&k, "other-model", NULL, &o), 0);
	for (uint32_t p = 0; p < PROMPTS; p++) {
		uint32_t t[NTOK];
		struct kv_seq *s;

		tokens(t, p);
		T_EQ(kv_seq_open(o, t, NTOK, NULL, &s), 0);
		T_EQ(kv_seq_hit_tokens(s), 0);
		T_EQ(kv_seq_close(s), 0);
	}
	kv_disconnect(o);
	/* and "tiered" still has all of it, from the tier */
	T_EQ(read_prompt(c, 0).host + read_prompt(c, 1).host > 0, 1);
	kv_disconnect(c);
	check_books();
}

/* A tier of 40 blocks: its coldest go, nothing wrong comes back. */
static void test_small_tier(void)
{
	struct kv_client *c;
	uint32_t missed = 0, host_total = 0;

	t_kvd_start(&k, "4M", "--host-tier-size", "1280K", NULL);
	T_EQ(t_connect(&k, "tiered", NULL, &c), 0);
	for (uint32_t p = 0; p < PROMPTS; p++)
		write_prompt(c, p);
	/* newest first: the pool's, then the tier's 40, then misses */
	for (uint32_t p = PROMPTS; p--; ) {
		struct kv_seq_hits h = read_prompt(c, p);	/* bytes checked */

		T_ASSERT(h.host <= 40);
		host_total += h.host;
		missed += FULL - h.pool - h.host;
	}
	T_ASSERT(host_total > 0);
	T_ASSERT(missed > 0);		/* 200 blocks, 128 + 40 kept */
	check_books();
	kv_disconnect(c);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
}

/*
 * Blocks corrupted in the tier (KVD_FAULT_TIER_CORRUPT: one in 7 taken
 * in has a byte flipped after its checksum): each is dropped when it
 * would come back, never served; kvctl tiers counts them.
 */
static void test_corrupt(const char *every, const char *tier)
{
	struct kv_client *c;
	char *js;

	setenv("KVD_FAULT_TIER_CORRUPT", every, 1);
	t_kvd_start(&k, "4M", "--host-tier-size", tier, NULL);
	unsetenv("KVD_FAULT_TIER_CORRUPT");
	T_EQ(t_connect(&k, "tiered", NULL, &c), 0);
	for (uint32_t p = 0; p < PROMPTS; p++)
		write_prompt(c, p);
	for (uint32_t p = PROMPTS; p--; ) {
		uint32_t host;

		lookup(c, p, 0, &host);	/* its allocation evicts into it */
		check_books();
	}
	for (uint32_t p = 0; p < PROMPTS; p++)
		read_prompt(c, p);	/* every byte served checked */
	js = t_kvctl(&k, "tiers");
	T_ASSERT(t_json_int(js, "corrupt") > 0);
	T_ASSERT(t_json_int(js, "used_bytes") <= t_json_int(js, "cap_bytes"));
	free(js);
	check_books();
	kv_disconnect(c);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
}

/*
 * Four processes share a prompt set in a pool far too small for it: each
 * writes, reads and checks its own prompts and the common ones, so
 * promotions race evictions and other promotions of the same blocks.
 */
static void test_concurrent(void)
{
	pid_t pid[4];
	int st;

	t_kvd_start(&k, "4M", "--host-tier-size", "32M", NULL);
	for (int w = 0; w < 4; w++) {
		pid[w] = fork();
		T_ASSERT(pid[w] >= 0);
		if (pid[w] == 0) {
			struct kv_client *c;

			if (t_connect(&k, "tiered", NULL, &c))
				_exit(2);
			for (uint32_t r = 0; r < 3; r++)
				for (uint32_t p = 0; p < PROMPTS; p++) {
					uint32_t q = p % 2 ? p : 1000 + w * 100 + p;

					write_prompt(c, q);
					read_prompt(c, (q + 3) % PROMPTS);
				}
			kv_disconnect(c);
			_exit(0);
		}
	}
	for (int w = 0; w < 4; w++) {
		T_EQ(waitpid(pid[w], &st, 0), pid[w]);
		T_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	check_books();
	{
		char *js = t_kvctl(&k, "tiers");

		T_ASSERT(t_json_int(js, "promotions") > 0);
		T_ASSERT(t_json_int(js, "demotions") > 0);
		free(js);
	}
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
}

int main(void)
{
	t_kvd_start(&k, "4M", "--host-tier-size", "16M", NULL);
	test_round_trip();
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
	test_small_tier();
	test_corrupt("7", "16M");
	test_corrupt("1", "1M");	/* a full tier takes back what failed */
	test_concurrent();
	printf("tier_host: ok\n");
	return 0;
}
