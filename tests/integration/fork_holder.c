// SPDX-License-Identifier: MIT
/*
 * A child the engine forked keeps a copy of its control socket: it must
 * not keep the engine's client, and the blocks it holds, alive. Once the
 * engine is killed, or calls kv_disconnect, kvd frees the blocks at once
 * (within its 250 ms tick) while the child still sleeps.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define NBLK	40

/* Held open by the test alone: its end (pass or fail) ends the others. */
static int life[2];

/* Wait until the test process is gone, then go. */
static void live_with_test(void)
{
	char b;

	close(life[1]);
	while (read(life[0], &b, 1) < 0)
		;
	_exit(0);
}

static long long blocks_used(struct t_kvd *k)
{
	char *js = t_kvctl(k, "status");
	long long v = t_json_int(js, "blocks_used");

	free(js);
	return v < 0 ? 0 : v;	/* -1: the namespace went too */
}

/* Up to 3 s for kvd to hold no block; fails if the holder died first. */
static void wait_freed(struct t_kvd *k, pid_t holder)
{
	for (int i = 0; i < 300 && blocks_used(k); i++)
		usleep(10000);
	T_EQ(kill(holder, 0), 0);	/* the socket's copy is still open */
	T_EQ(blocks_used(k), 0);
}

/* A child that holds the inherited socket until it is killed. */
static pid_t fork_holder(void)
{
	pid_t pid = fork();

	if (pid == 0)
		live_with_test();
	T_ASSERT(pid > 0);
	return pid;
}

static void reap(pid_t pid)
{
	int status;

	kill(pid, SIGKILL);
	T_EQ(waitpid(pid, &status, 0), pid);
}

/* The engine: connect, take blocks, fork the holder, report its pid. */
static void engine(struct t_kvd *k, int out)
{
	struct kv_client *c;
	kv_block_t ids[NBLK];
	pid_t holder;

	if (t_connect(k, "forker", NULL, &c) || kv_alloc(c, NBLK, ids) != NBLK)
		_exit(1);
	holder = fork_holder();
	(void)!write(out, &holder, sizeof(holder));
	live_with_test();
}

/* The engine is SIGKILLed: its process is gone, a child holds on. */
static void test_fork_holder_engine_killed(struct t_kvd *k)
{
	pid_t eng, holder;
	int pfd[2], status;

	T_ASSERT(!pipe(pfd));
	eng = fork();
	if (eng == 0)
		engine(k, pfd[1]);
	T_EQ(read(pfd[0], &holder, sizeof(holder)), sizeof(holder));
	close(pfd[0]);
	close(pfd[1]);
	T_EQ(blocks_used(k), NBLK);
	T_EQ(kill(eng, SIGKILL), 0);
	T_EQ(waitpid(eng, &status, 0), eng);
	wait_freed(k, holder);
	reap(holder);		/* ours: we are the subreaper */
}

/* The engine disconnects and lives on; its child still has the socket. */
static void test_fork_holder_disconnect(struct t_kvd *k)
{
	struct kv_client *c;
	kv_block_t ids[NBLK];
	pid_t holder;

	T_EQ(t_connect(k, "forker", NULL, &c), 0);
	T_EQ(kv_alloc(c, NBLK, ids), NBLK);
	holder = fork_holder();
	T_EQ(blocks_used(k), NBLK);
	T_EQ(kv_disconnect(c), 0);
	wait_freed(k, holder);
	reap(holder);
}

int main(void)
{
	struct t_kvd k;

	/* Orphaned grandchildren come to us, to be reaped. */
	T_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	T_EQ(pipe2(life, O_CLOEXEC), 0);
	t_kvd_start(&k, "64M", NULL);
	test_fork_holder_disconnect(&k);
	test_fork_holder_engine_killed(&k);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
	return 0;
}
