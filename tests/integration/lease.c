// SPDX-License-Identifier: MIT
/*
 * Liveness of clients that stop calling kvd (SIGSTOP, a hung engine):
 * one that took a lease (kv_connect_params.lease_ms) is ended once it
 * makes no call for that long and its blocks come back; one without a
 * lease is kept however long it sleeps; a leased client asleep in a wait,
 * or with an SQE waiting in kvd for blocks, is alive, and so is one that
 * kept calling while kvd itself was stopped for longer than the lease.
 * kvctl disconnect ends a client by id and frees its blocks; an unknown
 * id exits 1.
 */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define LEASE_MS	1000
#define NBLK_LEASED	40
#define NBLK_PLAIN	8

/* Engines this test forked: killed when it exits, pass or fail, so
 * that no stopped one outlives it. */
static pid_t engines[4];
static unsigned nr_engines;
static pid_t kvd_stopped;	/* kvd, while a test has it stopped */

static void kill_engines(void)
{
	if (kvd_stopped > 0)
		kill(kvd_stopped, SIGCONT);	/* so that it can stop */
	for (unsigned i = 0; i < nr_engines; i++)
		if (engines[i] > 0)	/* 0: reaped already */
			kill(engines[i], SIGKILL);
}

static long long status_int(struct t_kvd *k, const char *key)
{
	char *js = t_kvctl(k, "status");
	long long v = t_json_int(js, key);

	free(js);
	return v < 0 ? 0 : v;	/* -1: the namespace went too */
}

static int connect_lease(struct t_kvd *k, int lease_ms, struct kv_client **c)
{
	struct kv_connect_params p;

	t_params(k, "lease", &p);
	p.lease_ms = lease_ms;
	return kv_connect(&p, c);
}

/*
 * A child engine: connect (with @lease_ms), take @nr blocks, report its
 * client id on @out, then wait for a byte on @in (the test stops it
 * meanwhile) and exit 0 if kvd ended it by then (-ECONNRESET), 3 if
 * it is still connected; 2 when the set-up failed.
 */
static pid_t engine(struct t_kvd *k, int lease_ms, unsigned nr, int *in,
		    uint32_t *id)
{
	int up[2], down[2];
	pid_t pid;

	T_ASSERT(!pipe(up) && !pipe(down));
	pid = fork();
	T_ASSERT(pid >= 0 && nr_engines < 4);
	if (pid == 0) {
		struct kv_pool_info info;
		struct kv_client *c;
		kv_block_t ids[64];
		char b;

		close(up[0]);
		close(down[1]);
		if (connect_lease(k, lease_ms, &c) ||
		    kv_alloc(c, nr, ids) != (int)nr || kv_pool_info(c, &info))
			_exit(2);
		(void)!write(up[1], &info.client_id, sizeof(info.client_id));
		if (read(down[0], &b, 1) != 1)
			_exit(2);
		_exit(kv_heartbeat(c) == -ECONNRESET &&
		      kv_alloc(c, 1, ids) == -ECONNRESET ? 0 : 3);
	}
	engines[nr_engines++] = pid;
	close(up[1]);
	close(down[0]);
	T_EQ(read(up[0], id, sizeof(*id)), sizeof(*id));
	close(up[0]);
	*in = down[1];
	return pid;
}

/* Let the stopped engine @pid go on; it must find itself ended (or not). */
static void engine_finish(pid_t pid, int in, int want)
{
	int status;

	T_EQ(kill(pid, SIGCONT), 0);
	T_EQ(write(in, "g", 1), 1);
	close(in);
	T_EQ(waitpid(pid, &status, 0), pid);
	for (unsigned i = 0; i < nr_engines; i++)
		if (engines[i] == pid)
			engines[i] = 0;
	T_ASSERT(WIFEXITED(status));
	T_EQ(WEXITSTATUS(status), want);
}

/* Up to @ms for kvd to hold @want blocks; returns what it holds. */
static long long wait_blocks(struct t_kvd *k, long long want, int ms)
{
	long long v;

	for (int i = 0; i < ms / 20; i++) {
		v = status_int(k, "blocks_used");
		if (v == want)
			return v;
		usleep(20000);
	}
	return status_int(k, "blocks_used");
}

/*
 * Two engines stopped at once: the leased one is ended after its lease
 * (its blocks freed), the one without a lease is not, even at four
 * times that.
 */
static void test_lease_stopped_client_freed(struct t_kvd *k)
{
	int in_l, in_p;
	uint32_t id_l, id_p;
	pid_t leased, plain;

	plain = engine(k, 0, NBLK_PLAIN, &in_p, &id_p);
	leased = engine(k, LEASE_MS, NBLK_LEASED, &in_l, &id_l);
	T_EQ(kill(leased, SIGSTOP), 0);
	T_EQ(kill(plain, SIGSTOP), 0);
	T_EQ(status_int(k, "blocks_used"), NBLK_LEASED + NBLK_PLAIN);
	T_EQ(wait_blocks(k, NBLK_PLAIN, 4 * LEASE_MS), NBLK_PLAIN);
	T_EQ(status_int(k, "nr_clients"), 1);
	/* the one without a lease stays, stopped for 4 leases */
	usleep(3 * LEASE_MS * 1000);
	T_EQ(status_int(k, "blocks_used"), NBLK_PLAIN);
	T_EQ(status_int(k, "nr_clients"), 1);
	engine_finish(leased, in_l, 0);
	engine_finish(plain, in_p, 3);
	free(t_status_idle(k));
	T_EQ(status_int(k, "blocks_used"), 0);
}

/*
 * A leased client that is alive but makes no request: asleep in
 * kv_wait_cqe_timeout for three leases (waits beat by themselves), then
 * with an ALLOC waiting in kvd for blocks while it sleeps outside the
 * library (kvd knows it waits): never ended.
 */
static void test_lease_alive_in_waits(struct t_kvd *k)
{
	struct kv_client *c, *hog;
	struct kv_cqe *cqe;
	struct kv_sqe *sqe;
	kv_block_t ids[256];
	int n;

	T_EQ(connect_lease(k, LEASE_MS, &c), 0);
	T_EQ(kv_alloc(c, 4, ids), 4);
	T_EQ(kv_wait_cqe_timeout(c, &cqe, 3LL * LEASE_MS * 1000000), -ETIME);
	T_EQ(kv_nop(c), 0);

	/* take every block, so that its ALLOC waits in kvd */
	T_EQ(t_connect(k, "lease", NULL, &hog), 0);
	while ((n = kv_alloc(hog, 256, ids)) > 0)
		;
	while (kv_alloc(hog, 1, ids) == 1)
		;
	sqe = kv_get_sqe(c);
	T_ASSERT(sqe);
	kv_prep_alloc(sqe, 0, 1);
	T_EQ(kv_sqe_set_wait(sqe, 3 * LEASE_MS), 0);
	T_EQ(kv_submit(c), 1);
	usleep(2500 * 1000);	/* no call at all, the SQE waits in kvd */
	T_EQ(kv_wait_cqe(c, &cqe), 0);
	T_EQ(cqe->res, -ETIMEDOUT);
	kv_cqe_seen(c, cqe);
	T_EQ(kv_heartbeat(c), 0);
	T_EQ(kv_disconnect(hog), 0);
	T_EQ(kv_disconnect(c), 0);
	free(t_status_idle(k));
}

/*
 * Round @round: stop kvd for 2.5 leases while the leased client @c beats
 * every 100 ms (even rounds) or also submits a NOP (odd rounds); kvd
 * sees those calls only once it runs again, its late tick perhaps first
 * in the same batch of completions. Then the client must still be there.
 */
static void stall_round(struct t_kvd *k, struct kv_client *c, int round)
{
	struct kv_cqe *cqe;
	int hb = 0, subs = 0;

	kvd_stopped = k->pid;
	T_EQ(kill(k->pid, SIGSTOP), 0);
	for (int i = 0; i < 25; i++) {
		usleep(100 * 1000);
		hb += kv_heartbeat(c) == 0;
		if (round & 1) {
			struct kv_sqe *sqe = kv_get_sqe(c);

			if (sqe) {
				kv_prep_nop(sqe);
				subs += kv_submit(c) == 1;
			}
		}
	}
	T_EQ(kill(k->pid, SIGCONT), 0);
	kvd_stopped = 0;
	T_EQ(hb, 25);
	usleep(3 * 250 * 1000);	/* three ticks */
	while (subs--) {
		T_EQ(kv_wait_cqe(c, &cqe), 0);
		T_EQ(cqe->res, 0);
		kv_cqe_seen(c, cqe);
	}
	if (kv_nop(c)) {
		char cmd[256];

		snprintf(cmd, sizeof(cmd), "tail -n 4 '%s' >&2", k->log);
		(void)!system(cmd);
		T_FAIL("round %d: the leased client was ended although it called while kvd was stopped",
		       round);
	}
}

/*
 * kvd stopped (SIGSTOP) for longer than a client's lease: the client,
 * which kept its promise, is not ended. Several rounds, because the
 * order of the tick and the doorbell in one batch is up to the kernel.
 */
static void test_lease_kvd_stopped(struct t_kvd *k)
{
	struct kv_client *c;

	T_EQ(connect_lease(k, LEASE_MS, &c), 0);
	for (int round = 0; round < 4; round++)
		stall_round(k, c, round);
	T_EQ(kv_disconnect(c), 0);
	free(t_status_idle(k));
}

/* kvctl disconnect ID: a stopped engine without a lease, ended at once. */
static void test_kvctl_disconnect_frees_blocks(struct t_kvd *k)
{
	char args[64], *js;
	uint32_t id;
	pid_t eng;
	int in;

	eng = engine(k, 0, NBLK_LEASED, &in, &id);
	T_EQ(kill(eng, SIGSTOP), 0);
	T_EQ(status_int(k, "blocks_used"), NBLK_LEASED);
	snprintf(args, sizeof(args), "disconnect %u", id);
	js = t_kvctl(k, args);
	T_EQ(t_json_int(js, "disconnected"), id);
	T_EQ(t_json_int(js, "blocks_released"), NBLK_LEASED);
	free(js);
	T_EQ(status_int(k, "blocks_used"), 0);
	T_EQ(status_int(k, "nr_clients"), 0);
	engine_finish(eng, in, 0);
}

/* kvctl disconnect of an id no client has: exit 1, and says so. */
static void test_kvctl_disconnect_unknown_id(struct t_kvd *k)
{
	char cmd[512], out[4096] = "";
	size_t n = 0, r;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "'%s' --admin-socket '%s' disconnect 4000000 2>&1",
		 t_bin("kvctl"), k->admin);
	f = popen(cmd, "r");
	T_ASSERT(f);
	while ((r = fread(out + n, 1, sizeof(out) - 1 - n, f)) > 0)
		n += r;
	out[n] = 0;
	if (!strstr(out, "no client 4000000"))
		T_FAIL("kvctl said: %s", out);
	T_EQ(WEXITSTATUS(pclose(f)), 1);
}

static const struct {
	const char	*name;
	void		(*fn)(struct t_kvd *k);
} tests[] = {
	{ "unknown_id", test_kvctl_disconnect_unknown_id },
	{ "disconnect", test_kvctl_disconnect_frees_blocks },
	{ "stopped", test_lease_stopped_client_freed },
	{ "alive", test_lease_alive_in_waits },
	{ "kvd_stopped", test_lease_kvd_stopped },
};

/* No argument: every test; else the one named (unknown_id, ...). */
int main(int argc, char **argv)
{
	struct t_kvd k;

	T_EQ(atexit(kill_engines), 0);
	t_kvd_start(&k, "64M", NULL);
	for (unsigned i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
		if (argc < 2 || !strcmp(argv[1], tests[i].name))
			tests[i].fn(&k);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
	return 0;
}
