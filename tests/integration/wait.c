// SPDX-License-Identifier: MIT
/*
 * KV_SQE_WAIT: an ALLOC on an exhausted pool waits for a block to be
 * freed instead of failing, times out with -ETIMEDOUT, does not hold up
 * other clients, and a client killed while waiting loses nothing. One
 * held back by a quota is served when a reload raises the quota.
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

	/* the waiter is gone, its block free again: b takes it */
	T_EQ(kv_alloc(b, 1, ids + n), 1);
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
	return 0;
}
