// SPDX-License-Identifier: MIT
/*
 * kill -9 of a client holding blocks: kvd releases them all, its slabs go
 * back to the page pool (kvctl status --json shows it), and a client that
 * shared nothing with it goes on working, before and after.
 */
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define NBLK	300

static void hold_and_wait(struct t_kvd *k, int ready_fd)
{
	struct kv_client *c;
	kv_block_t ids[NBLK];
	kv_block_t twice[2];

	if (t_connect(k, "victim", NULL, &c) || kv_alloc(c, NBLK, ids) != NBLK)
		_exit(1);
	twice[0] = ids[0];
	twice[1] = ids[1];
	if (kv_ref(c, twice, 2) != 2)	/* two blocks held twice */
		_exit(1);
	(void)!write(ready_fd, "r", 1);
	for (;;)
		pause();
}

static long long used_blocks(struct t_kvd *k, long long *pages)
{
	char *js = t_kvctl(k, "status");
	long long v = t_json_int(js, "blocks_used");

	*pages = t_json_int(js, "pages_used");
	free(js);
	return v;
}

int main(void)
{
	struct kv_client *other;
	kv_block_t mine[10], big[NBLK];
	long long pages;
	int ready[2], status;
	struct t_kvd k;
	pid_t pid;
	char b;

	t_kvd_start(&k, "64M", NULL);
	T_EQ(t_connect(&k, "victim", NULL, &other), 0);
	T_EQ(kv_alloc(other, 10, mine), 10);
	T_ASSERT(!pipe(ready));
	pid = fork();
	if (pid == 0)
		hold_and_wait(&k, ready[1]);
	T_EQ(read(ready[0], &b, 1), 1);
	T_EQ(used_blocks(&k, &pages), NBLK + 10);

	T_EQ(kill(pid, SIGKILL), 0);
	T_EQ(waitpid(pid, &status, 0), pid);
	/* kvd sees the socket close asynchronously: poll for up to 5 s. */
	for (int i = 0; i < 500 && used_blocks(&k, &pages) != 10; i++)
		usleep(10000);
	T_EQ(used_blocks(&k, &pages), 10);
	T_EQ(pages, 1);		/* only the survivor's slab is left */

	/* The survivor is unaffected and the freed memory is reusable. */
	T_EQ(kv_release(other, mine, 10), 10);
	T_EQ(kv_alloc(other, NBLK, big), NBLK);
	T_EQ(kv_disconnect(other), 0);
	/* The last client gone, its namespace holds nothing: it is freed. */
	for (int i = 0; i < 500 && used_blocks(&k, &pages) != -1; i++)
		usleep(10000);
	T_EQ(used_blocks(&k, &pages), -1);
	T_EQ(pages, 0);
	t_kvd_stop(&k);
	return 0;
}
