// SPDX-License-Identifier: MIT
/*
 * A client that kvd ended while a timed-out synchronous request was
 * still parked in kvd: the late completion never comes, so the next
 * synchronous calls must say -ECONNRESET, not -EBUSY for ever; while
 * kvd is still there they say -EBUSY. A wait for that completion sees
 * the end at once. kv_heartbeat's -ECONNRESET, too,
 * takes the block addresses away (kv_block_ptr(3)).
 */
#include <string.h>

#include "harness.h"

#define NBLK	512	/* 16M pool, 32 KiB blocks */

static int connect_timeout(struct t_kvd *k, uint32_t ms, struct kv_client **c)
{
	struct kv_connect_params p;

	t_params(k, "m", &p);
	p.call_timeout_ms = ms;
	return kv_connect(&p, c);
}

/* Take every block left from @hog: ids in @ids. */
static int fill(struct kv_client *hog, kv_block_t *ids, int max)
{
	int n = 0;

	while (n < max && kv_alloc(hog, 1, &ids[n]) == 1)
		n++;
	T_EQ(kv_alloc(hog, 1, &ids[n]), -ENOSPC);
	return n;
}

/* End client @c by id with kvctl disconnect. */
static void kvctl_disconnect(struct t_kvd *k, struct kv_client *c)
{
	struct kv_pool_info info;
	char args[64], *js;

	T_EQ(kv_pool_info(c, &info), 0);
	snprintf(args, sizeof(args), "disconnect %u", info.client_id);
	js = t_kvctl(k, args);
	T_EQ(t_json_int(js, "disconnected"), info.client_id);
	free(js);
}

/* Park a waiting ALLOC in kvd past the call timeout (-ETIMEDOUT). */
static void park_timed_out(struct kv_client *c)
{
	kv_block_t two[2];

	T_EQ(kv_alloc_wait(c, 2, two, 20000), -ETIMEDOUT);
	T_EQ(kv_nop(c), -EBUSY);	/* kvd is there: still in flight */
}

/*
 * The defect's set-up: client *@c (1 s call timeout) has a waiting ALLOC
 * parked past its timeout while *@hog holds every block (their ids in
 * @held, their number returned); then kvd ends *@c by kvctl disconnect.
 */
static int ended_while_parked(struct t_kvd *k, struct kv_client **c,
			      struct kv_client **hog, kv_block_t *held)
{
	int n;

	T_EQ(connect_timeout(k, 1000, c), 0);
	T_EQ(t_connect(k, "m", NULL, hog), 0);
	n = fill(*hog, held, NBLK);
	park_timed_out(*c);
	kvctl_disconnect(k, *c);
	return n;
}

/* Undo ended_while_parked(): every block free, kvd idle. */
static void release_hog(struct t_kvd *k, struct kv_client *c,
			struct kv_client *hog, kv_block_t *held, int n)
{
	T_EQ(kv_disconnect(c), 0);
	T_EQ(kv_release(hog, held, (unsigned)n), n);
	T_EQ(kv_disconnect(hog), 0);
	free(t_status_idle(k));
}

static void test_sync_after_disconnect(struct t_kvd *k)
{
	static kv_block_t held[NBLK + 1];
	struct kv_client *hog, *c;
	struct kv_stats st;
	kv_block_t id;
	int n;

	n = ended_while_parked(k, &c, &hog, held);
	T_EQ(kv_nop(c), -ECONNRESET);
	T_EQ(kv_nop(c), -ECONNRESET);
	T_EQ(kv_alloc(c, 1, &id), -ECONNRESET);
	T_EQ(kv_release(c, held, 1), -ECONNRESET);
	T_EQ(kv_stats(c, &st), -ECONNRESET);
	T_EQ(kv_heartbeat(c), -ECONNRESET);
	release_hog(k, c, hog, held, n);
}

/* Reaping the parked request's completion after the same end: the wait
 * sees the hang-up at once, not at its timeout. */
static void test_wait_after_disconnect(struct t_kvd *k)
{
	static kv_block_t held[NBLK + 1];
	struct kv_client *hog, *c;
	struct kv_cqe *cqe;
	int n;

	n = ended_while_parked(k, &c, &hog, held);
	T_EQ(kv_wait_cqe_timeout(c, &cqe, 30000000000LL), -ECONNRESET);
	T_EQ(kv_nop(c), -ECONNRESET);
	release_hog(k, c, hog, held, n);
}

/* kv_heartbeat's -ECONNRESET is a call's: block addresses go. */
static void test_heartbeat_reset_drops_blocks(struct t_kvd *k)
{
	struct kv_client *c;
	kv_block_t id;

	T_EQ(t_connect(k, "m", NULL, &c), 0);
	T_EQ(kv_alloc(c, 1, &id), 1);
	T_ASSERT(kv_block_ptr(c, id) != NULL);
	kvctl_disconnect(k, c);
	T_EQ(kv_heartbeat(c), -ECONNRESET);
	T_ASSERT(kv_block_ptr(c, id) == NULL);
	T_EQ(kv_nop(c), -ECONNRESET);
	T_EQ(kv_disconnect(c), 0);
	free(t_status_idle(k));
}

static const struct {
	const char	*name;
	void		(*fn)(struct t_kvd *k);
} tests[] = {
	{ "sync", test_sync_after_disconnect },
	{ "wait", test_wait_after_disconnect },
	{ "heartbeat", test_heartbeat_reset_drops_blocks },
};

/* No argument: every test; else the one named (sync, wait, heartbeat). */
int main(int argc, char **argv)
{
	struct t_kvd k;

	t_kvd_start(&k, "16M", NULL);
	for (unsigned i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
		if (argc < 2 || !strcmp(argv[1], tests[i].name))
			tests[i].fn(&k);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
	return 0;
}
