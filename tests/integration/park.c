// SPDX-License-Identifier: MIT
/*
 * Idle rings are parked (kvd stops polling them, KV_SQ_NEED_WAKEUP set)
 * and taken back by their doorbell: clients that submit with random gaps
 * around the 1 ms parking threshold, while others keep kvd busy, never
 * lose a wake-up (every wait has a deadline), get their CQEs in order,
 * and find their SQ free again once every CQE is seen.
 */
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define CLIENTS		4
#define SECONDS		2
#define WAIT_NS		(3 * 1000000000LL)	/* a lost wake-up */

static unsigned rng;

static unsigned next(void)
{
	rng = rng * 1103515245U + 12345U;
	return rng >> 8;
}

/* Idle for 0, ~50 us, ~1 ms or ~2 ms: either side of parking. */
static void gap(void)
{
	static const unsigned us[] = { 0, 50, 900, 2000 };

	usleep(us[next() % 4] + next() % 200);
}

/* One batch of 1..8 NOPs on a ring of 8, each CQE waited for. */
static void batch(struct kv_client *c)
{
	unsigned n = 1 + next() % 8;
	struct kv_cqe *cqe;

	for (unsigned i = 0; i < n; i++) {
		struct kv_sqe *sqe = kv_get_sqe(c);

		T_ASSERT(sqe);		/* the last batch's slots are free */
		kv_prep_nop(sqe);
		kv_sqe_set_data64(sqe, i);
	}
	T_EQ(kv_submit(c), (int)n);
	for (unsigned i = 0; i < n; i++) {
		T_EQ(kv_wait_cqe_timeout(c, &cqe, WAIT_NS), 0);
		T_EQ(cqe->res, 0);
		T_EQ(cqe->user_data, i);
		kv_cqe_seen(c, cqe);
	}
}

static int client(struct t_kvd *k, unsigned idx)
{
	struct kv_connect_params p = { 0 };
	time_t end = time(NULL) + SECONDS;
	struct kv_client *c;

	rng = 2654435761U * (idx + 1);
	p.socket_path = k->sock;
	p.model_id = "m";
	p.geom = t_geom();
	p.sq_entries = 8;
	p.spin_us = idx % 2 ? 5 : 0;	/* short and default windows */
	T_EQ(kv_connect(&p, &c), 0);
	while (time(NULL) < end) {
		batch(c);
		if (idx)		/* client 0 keeps kvd busy */
			gap();
	}
	T_EQ(kv_disconnect(c), 0);
	return 0;
}

int main(void)
{
	pid_t pid[CLIENTS];
	struct t_kvd k;
	int st;

	t_kvd_start(&k, "16M", NULL);
	for (unsigned i = 0; i < CLIENTS; i++) {
		pid[i] = fork();
		T_ASSERT(pid[i] >= 0);
		if (!pid[i])
			_exit(client(&k, i));
	}
	for (unsigned i = 0; i < CLIENTS; i++) {
		T_EQ(waitpid(pid[i], &st, 0), pid[i]);
		T_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
	return 0;
}
