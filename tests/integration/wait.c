// SPDX-License-Identifier: MIT
/*
 * KV_SQE_WAIT: an ALLOC on an exhausted pool waits for a block to be
 * freed instead of failing, times out with -ETIMEDOUT, does not hold up
 * other clients, and a client killed while waiting loses nothing. One
 * held back by a quota is served when a reload raises the quota. Nor
 * does it hold up its own ring: a RELEASE queued behind it completes at
 * once (its CQE first), also with two clients each waiting on the
 * other's RELEASE; KV_SQE_LINK keeps the order where asked.
 */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static long long ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* Fill the pool from @c; returns how many blocks it got (ids in @ids). */
static int fill(struct kv_client *c, kv_block_t *ids, int max)
{
	int n = 0;

	while (n < max && kv_alloc(c, 1, &ids[n]) == 1)
		n++;
	T_EQ(kv_alloc(c, 1, &ids[n]), -ENOSPC);
	return n;
}

/* In a child: wait for one block up to @ms; exit 0 when it came. */
static pid_t waiter(struct t_kvd *k, uint32_t ms, int expect)
{
	pid_t pid = fork();

	T_ASSERT(pid >= 0);
	if (pid == 0) {
		struct kv_client *c;
		kv_block_t id;
		int ret;

		if (t_connect(k, "m", NULL, &c))
			_exit(2);
		ret = kv_alloc_wait(c, 1, &id, ms);
		if (ret != expect) {
			fprintf(stderr, "kv_alloc_wait = %d, expected %d\n", ret,
				expect);
			_exit(1);
		}
		kv_disconnect(c);
		_exit(0);
	}
	return pid;
}

static void reap_ok(pid_t pid)
{
	int st;

	T_EQ(waitpid(pid, &st, 0), pid);
	T_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* The next CQE within 3 s (a wait parked in vain lasts 10 s): its res. */
static int next_cqe(struct kv_client *c, uint64_t *user_data)
{
	struct kv_cqe *cqe;
	int res;

	T_EQ(kv_wait_cqe_timeout(c, &cqe, 3000000000LL), 0);
	*user_data = cqe->user_data;
	res = cqe->res;
	kv_cqe_seen(c, cqe);
	return res;
}

/* Queue [ALLOC of @need waiting 10 s, RELEASE of @ids[0..rel)] on @c. */
static void alloc_then_release(struct kv_client *c, unsigned need,
			       const kv_block_t *ids, unsigned rel,
			       uint64_t ud)
{
	struct kv_sqe *sqe = kv_get_sqe(c);

	kv_prep_alloc(sqe, 0, need);
	T_EQ(kv_sqe_set_wait(sqe, 10000), 0);
	kv_sqe_set_data64(sqe, ud);
	memcpy(kv_data_ptr(c, 1024, rel * 4), ids, rel * 4);
	sqe = kv_get_sqe(c);
	kv_prep_release(sqe, 1024, rel);
	kv_sqe_set_data64(sqe, ud + 1);
	T_EQ(kv_submit(c), 2);
}

/*
 * One client, one submit: [ALLOC waiting for more blocks than are free,
 * RELEASE of blocks it holds that make the ALLOC satisfiable]. The
 * RELEASE completes at once, then the ALLOC; nothing waits 10 s.
 */
static void own_release(void)
{
	static kv_block_t ids[4096];
	struct kv_client *a;
	struct t_kvd k;
	long long t0;
	uint64_t ud;

	t_kvd_start(&k, "16M", NULL);
	T_EQ(t_connect(&k, "m", NULL, &a), 0);
	T_ASSERT(fill(a, ids, 4096) >= 4);
	t0 = ms_now();
	alloc_then_release(a, 4, ids, 4, 1);
	T_EQ(next_cqe(a, &ud), 4);
	T_EQ(ud, 2);				/* the RELEASE first */
	T_EQ(next_cqe(a, &ud), 4);
	T_EQ(ud, 1);
	T_ASSERT(ms_now() - t0 < 2000);
	T_EQ(kv_disconnect(a), 0);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
}

/*
 * Two engines, each [ALLOC waiting, RELEASE of its own]: only both
 * RELEASEs together make both ALLOCs satisfiable (6 + 2 of 4 + 4). When
 * a waiting ALLOC held its ring, this wedged the pool for the timeout.
 */
static void two_engines(void)
{
	static kv_block_t ids[4096];
	struct kv_client *a, *b;
	int n, m = 0, got = 0;
	struct t_kvd k;
	long long t0;
	uint64_t ud;

	t_kvd_start(&k, "16M", NULL);
	T_EQ(t_connect(&k, "m", NULL, &a), 0);
	T_EQ(t_connect(&k, "m", NULL, &b), 0);
	n = fill(a, ids, 4096);
	T_ASSERT(n >= 16);
	T_EQ(kv_release(a, ids + n - 8, 8), 8);	/* b holds 8 of them */
	while (m < 8 && kv_alloc(b, 1, ids + 2048 + m) == 1)
		m++;
	T_EQ(m, 8);
	T_EQ(kv_alloc(b, 1, ids + 2048 + m), -ENOSPC);
	t0 = ms_now();
	alloc_then_release(a, 6, ids, 4, 10);
	alloc_then_release(b, 2, ids + 2048, 4, 20);
	for (int i = 0; i < 4; i++) {
		struct kv_client *c = i % 2 ? b : a;
		int res = next_cqe(c, &ud);

		T_EQ(res, ud == 10 ? 6 : ud == 20 ? 2 : 4);
		got |= 1 << (ud % 10 + 2 * (ud / 20));
	}
	T_EQ(got, 15);
	T_ASSERT(ms_now() - t0 < 2000);
	T_EQ(kv_disconnect(a), 0);
	T_EQ(kv_disconnect(b), 0);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
}

/*
 * KV_SQE_LINK: the NOP linked to a waiting ALLOC comes after it, and is
 * cancelled when the wait times out; the one after the chain does not
 * wait.
 */
static void linked(void)
{
	static kv_block_t ids[4096];
	struct kv_client *a, *b;
	struct kv_sqe *sqe;
	struct t_kvd k;
	uint64_t ud;

	t_kvd_start(&k, "16M", NULL);
	T_EQ(t_connect(&k, "m", NULL, &a), 0);
	T_EQ(t_connect(&k, "m", NULL, &b), 0);
	fill(a, ids, 4096);
	for (int round = 0; round < 2; round++) {
		sqe = kv_get_sqe(b);
		kv_prep_alloc(sqe, 0, 1);
		T_EQ(kv_sqe_set_wait(sqe, round ? 5000 : 300), 0);
		kv_sqe_set_link(sqe);
		kv_sqe_set_data64(sqe, 1);
		kv_sqe_set_data64(sqe = kv_get_sqe(b), 2);
		kv_prep_nop(sqe);
		kv_sqe_set_data64(sqe = kv_get_sqe(b), 3);
		kv_prep_nop(sqe);
		T_EQ(kv_submit(b), 3);
		T_EQ(next_cqe(b, &ud), 0);
		T_EQ(ud, 3);
		if (round)
			T_EQ(kv_release(a, ids, 1), 1);
		T_EQ(next_cqe(b, &ud), round ? 1 : -ETIMEDOUT);
		T_EQ(ud, 1);
		T_EQ(next_cqe(b, &ud), round ? 0 : -ECANCELED);
		T_EQ(ud, 2);
	}
	T_EQ(kv_disconnect(a), 0);
	T_EQ(kv_disconnect(b), 0);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
}

/*
 * A tenant at its max_pages: a waiting ALLOC (-EDQUOT now) is served as
 * soon as a reload raises the quota, long before its 10 s timeout.
 */
static void quota_reload(void)
{
	static kv_block_t ids[256];
	char conf[] = "/tmp/kvd-wait-conf.XXXXXX";
	const char *text = "[tenant t]\nuids = %u\nsecret = wait-secret-0123456789\nmax_pages = %u\n";
	struct kv_client *a;
	struct t_kvd k;
	long long t0;
	pid_t pid;
	FILE *f;
	int fd;

	fd = mkstemp(conf);
	T_ASSERT(fd >= 0);
	f = fdopen(fd, "w");
	T_ASSERT(f && fprintf(f, text, (unsigned)geteuid(), 1) > 0 && !fclose(f));
	t_kvd_start(&k, "16M", "--config", conf, NULL);
	T_EQ(t_connect(&k, "m", NULL, &a), 0);
	while (kv_alloc(a, 1, &ids[0]) == 1)
		;				/* one page: its blocks */
	T_EQ(kv_alloc(a, 1, &ids[0]), -EDQUOT);
	t0 = ms_now();
	pid = waiter(&k, 10000, 1);
	usleep(300000);				/* parked */
	f = fopen(conf, "w");
	T_ASSERT(f && fprintf(f, text, (unsigned)geteuid(), 4) > 0 && !fclose(f));
	free(t_kvctl(&k, "reload"));
	reap_ok(pid);
	T_ASSERT(ms_now() - t0 < 5000);
	T_EQ(kv_disconnect(a), 0);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
	unlink(conf);
}

int main(void)
{
	static kv_block_t ids[4096];
	struct kv_client *a, *b;
	struct kv_sqe *sqe;
	struct kv_cqe *cqe;
	struct kv_stats bst;
	struct t_kvd k;
	long long t0;
	pid_t pid;
	int n, st;

	t_kvd_start(&k, "16M", NULL);
	T_EQ(t_connect(&k, "m", NULL, &a), 0);
	T_EQ(t_connect(&k, "m", NULL, &b), 0);
	n = fill(a, ids, 4096);

	/* a block freed while the waiter waits: it gets it */
	pid = waiter(&k, 5000, 1);
	usleep(300000);
	T_EQ(kv_nop(b), 0);		/* others are served meanwhile */
	T_EQ(kv_release(a, &ids[--n], 1), 1);
	reap_ok(pid);

	/* the waiter is gone (once kvd has seen its disconnect: that is
	 * not synchronous), its block free again: b takes it */
	for (int i = 0; i < 300 && kv_alloc(b, 1, ids + n) != 1; i++)
		usleep(10000);
	T_EQ(kv_stats(b, &bst), 0);
	T_EQ(bst.client_refs, 1);
	/* nobody frees: -ETIMEDOUT after the timeout (tick granularity) */
	t0 = ms_now();
	T_EQ(kv_alloc_wait(b, 1, ids + n + 1, 300), -ETIMEDOUT);
	T_ASSERT(ms_now() - t0 >= 250);

	/* a waiter killed while it waits: nothing is lost, kvd goes on */
	pid = waiter(&k, 60000, 1);
	usleep(200000);
	T_EQ(kill(pid, SIGKILL), 0);
	T_EQ(waitpid(pid, &st, 0), pid);
	T_EQ(kv_release(b, ids + n, 1), 1);
	usleep(100000);
	T_EQ(kv_alloc(b, 1, ids + n), 1);	/* the block is there */
	T_EQ(kv_release(b, ids + n, 1), 1);

	/* bad input: clear errors, nothing changes */
	T_EQ(kv_alloc_wait(b, 1, ids + n, 0), -EINVAL);
	T_EQ(kv_alloc_wait(b, 1, ids + n, KV_WAIT_MAX_MS + 1), -EINVAL);
	sqe = kv_get_sqe(b);
	kv_prep_release(sqe, 0, 1);
	T_EQ(kv_sqe_set_wait(sqe, 10), -EINVAL);
	sqe->flags = KV_SQE_WAIT;	/* forced: kvd refuses it too */
	sqe->args[3] = 10;
	T_EQ(kv_submit(b), 1);
	T_EQ(kv_wait_cqe(b, &cqe), 0);
	T_EQ(cqe->res, -EINVAL);
	kv_cqe_seen(b, cqe);
	sqe = kv_get_sqe(b);
	kv_prep_alloc(sqe, 0, 1);
	sqe->flags = KV_SQE_WAIT;
	sqe->args[3] = 0;		/* no timeout */
	T_EQ(kv_submit(b), 1);
	T_EQ(kv_wait_cqe(b, &cqe), 0);
	T_EQ(cqe->res, -EINVAL);
	kv_cqe_seen(b, cqe);

	/* asynchronous: the wait completes when a's blocks go */
	sqe = kv_get_sqe(b);
	kv_prep_alloc(sqe, 0, 4);
	T_EQ(kv_sqe_set_wait(sqe, 5000), 0);
	T_EQ(kv_submit(b), 1);
	usleep(100000);
	T_EQ(kv_peek_cqe(b, &cqe), -EAGAIN);
	T_EQ(kv_disconnect(a), 0);		/* every block of a goes */
	T_EQ(kv_wait_cqe(b, &cqe), 0);
	T_EQ(cqe->res, 4);
	kv_cqe_seen(b, cqe);
	T_EQ(kv_disconnect(b), 0);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
	quota_reload();
	own_release();
	two_engines();
	linked();
	return 0;
}
