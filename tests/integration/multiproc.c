// SPDX-License-Identifier: MIT
/*
 * Several engine processes share one pool: each allocates blocks, writes
 * its own pattern into every byte, and verifies it after all the others
 * wrote theirs. Overlapping blocks would show as a mismatch.
 */
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define NPROC	4
#define NBLK	100

static uint64_t pat(kv_block_t id, int who, size_t i)
{
	return ((uint64_t)id << 40) ^ ((uint64_t)who << 32) ^ i;
}

static int child(struct t_kvd *k, int who, int go_fd, int ready_fd)
{
	struct kv_client *c;
	kv_block_t ids[NBLK];
	struct kv_pool_info info;
	char b;

	if (t_connect(k, "shared-model", NULL, &c))
		return 10;
	kv_pool_info(c, &info);
	if (kv_alloc(c, NBLK, ids) != NBLK)
		return 11;
	for (int i = 0; i < NBLK; i++) {
		uint64_t *p = kv_block_ptr(c, ids[i]);

		for (size_t w = 0; w < info.block_bytes / 8; w++)
			p[w] = pat(ids[i], who, w);
	}
	(void)!write(ready_fd, "r", 1);
	if (read(go_fd, &b, 1) != 1)
		return 12;
	for (int i = 0; i < NBLK; i++) {
		uint64_t *p = kv_block_ptr(c, ids[i]);

		for (size_t w = 0; w < info.block_bytes / 8; w++)
			if (p[w] != pat(ids[i], who, w))
				return 13;
	}
	if (kv_release(c, ids, NBLK) != NBLK)
		return 14;
	kv_disconnect(c);
	return 0;
}

int main(void)
{
	int go[2], ready[2], status;
	pid_t pids[NPROC];
	struct t_kvd k;
	char *js, b;

	t_kvd_start(&k, "64M", NULL);
	T_ASSERT(!pipe(go) && !pipe(ready));
	for (int i = 0; i < NPROC; i++) {
		pids[i] = fork();
		if (pids[i] == 0)
			_exit(child(&k, i, go[0], ready[1]));
	}
	for (int i = 0; i < NPROC; i++)
		T_EQ(read(ready[0], &b, 1), 1);
	js = t_kvctl(&k, "status");
	T_EQ(t_json_int(js, "blocks_used"), NPROC * NBLK);
	T_EQ(t_json_int(js, "nr_clients"), NPROC);
	free(js);
	js = t_kvctl(&k, "clients");
	T_EQ(t_json_int(js, "blocks"), NBLK);
	free(js);
	for (int i = 0; i < NPROC; i++)
		T_EQ(write(go[1], "g", 1), 1);
	for (int i = 0; i < NPROC; i++) {
		T_EQ(waitpid(pids[i], &status, 0), pids[i]);
		T_ASSERT(WIFEXITED(status));
		T_EQ(WEXITSTATUS(status), 0);
	}
	js = t_status_idle(&k);
	T_EQ(t_json_int(js, "nr_namespaces"), 0);	/* idle: freed */
	T_EQ(t_json_int(js, "pages_used"), 0);
	free(js);
	t_kvd_stop(&k);
	return 0;
}
