// SPDX-License-Identifier: MIT
/*
 * SIGTERM to kvd under a batched load: every client ends with
 * -ECONNRESET from a call, and until that call every id kvd gave it has
 * an address (kv_block_ptr) whose bytes stay what the client wrote; never
 * an unusable id or a changed block. Several rounds, a few seconds.
 */
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define ROUNDS		80
#define PROCS		4
#define BATCH		8
#define NB		2	/* blocks per ALLOC */
#define LIVE		(BATCH * NB)

static uint64_t word(kv_block_t id, uint64_t gen, size_t i)
{
	return (gen * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)id << 32) ^ i;
}

/* Write or check a block; a mismatch exits the child with 3. */
static void pattern(struct kv_client *c, size_t bytes, kv_block_t id,
		    uint64_t gen, bool check)
{
	uint64_t *p = kv_block_ptr(c, id);

	if (!p) {
		fprintf(stderr, "block %u from a completed ALLOC has no address\n",
			id);
		_exit(2);
	}
	for (size_t i = 0; i < bytes / 8; i++) {
		if (!check) {
			p[i] = word(id, gen, i);
		} else if (p[i] != word(id, gen, i)) {
			fprintf(stderr, "block %u word %zu: %#llx, wrote %#llx\n",
				id, i, (unsigned long long)p[i],
				(unsigned long long)word(id, gen, i));
			_exit(3);
		}
	}
}

/* -ECONNRESET ends the child well (0); any other error is 4. */
static void ended(int ret, const char *what)
{
	if (ret == -ECONNRESET)
		_exit(0);
	fprintf(stderr, "%s: %s, not ECONNRESET\n", what, strerror(-ret));
	_exit(4);
}

/* Batches of BATCH ALLOCs, pattern, check, BATCH RELEASEs, until kvd goes. */
static void engine(struct t_kvd *k, int ready)
{
	struct kv_pool_info info;
	struct kv_client *c;
	kv_block_t ids[LIVE];
	uint64_t gen = 0;
	int ret;

	prctl(PR_SET_PDEATHSIG, SIGKILL);	/* not past the test */
	if (t_connect(k, "stopping", NULL, &c) || kv_pool_info(c, &info))
		_exit(5);
	if (write(ready, "", 1) != 1)
		_exit(5);
	for (;;) {
		gen++;
		for (unsigned i = 0; i < BATCH; i++) {
			struct kv_sqe *sqe = kv_get_sqe(c);

			kv_prep_alloc(sqe, i * NB * sizeof(kv_block_t), NB);
			kv_sqe_set_data64(sqe, i);
		}
		ret = kv_submit(c);
		if (ret < 0)
			ended(ret, "kv_submit");
		for (unsigned n = 0; n < BATCH; n++) {
			struct kv_cqe *cqe;
			uint64_t i;

			ret = kv_wait_cqe(c, &cqe);
			if (ret)
				ended(ret, "kv_wait_cqe");
			i = cqe->user_data;
			if (cqe->res != NB || i >= BATCH) {
				fprintf(stderr, "ALLOC res %d\n", cqe->res);
				_exit(6);
			}
			memcpy(&ids[i * NB], kv_data_ptr(c, i * NB * sizeof(kv_block_t),
							 NB * sizeof(kv_block_t)),
			       NB * sizeof(kv_block_t));
			kv_cqe_seen(c, cqe);
		}
		for (unsigned b = 0; b < LIVE; b++)
			pattern(c, info.block_bytes, ids[b], gen, false);
		for (unsigned b = 0; b < LIVE; b++)
			pattern(c, info.block_bytes, ids[b], gen, true);
		ret = kv_release(c, ids, LIVE);
		if (ret != LIVE)
			ended(ret < 0 ? ret : -EPROTO, "kv_release");
	}
}

static void one_round(int round)
{
	struct t_kvd k;
	pid_t pid[PROCS];
	int status, ready[2];
	char b;

	T_EQ(pipe(ready), 0);
	t_kvd_start(&k, "64M", NULL);
	for (int i = 0; i < PROCS; i++) {
		pid[i] = fork();
		T_ASSERT(pid[i] >= 0);
		if (!pid[i])
			engine(&k, ready[1]);
	}
	for (int i = 0; i < PROCS; i++)	/* every engine connected */
		T_EQ(read(ready[0], &b, 1), 1);
	close(ready[0]);
	close(ready[1]);
	usleep((round % 8) * 4000);	/* under load */
	kill(k.pid, SIGTERM);
	T_EQ(waitpid(k.pid, &status, 0), k.pid);
	k.pid = 0;
	for (int i = 0; i < PROCS; i++) {
		T_EQ(waitpid(pid[i], &status, 0), pid[i]);
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			T_FAIL("round %d: engine %d ended with status %#x, not a clean ECONNRESET",
			       round, i, status);
	}
	t_cleanup_dir(&k);
}

int main(void)
{
	for (int r = 0; r < ROUNDS; r++)
		one_round(r);
	printf("kvd_stop_load: ok\n");
	return 0;
}
