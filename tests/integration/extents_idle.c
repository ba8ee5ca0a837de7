// SPDX-License-Identifier: MIT
/*
 * Extents changing hands between two tenants thousands of times while a
 * third client of one tenant stays idle and never reads its control
 * socket: the idle client is not disconnected, catches up on its next
 * request, and can use the blocks it then gets. Needs root (uid 65534).
 */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define ROUNDS	300
#define NBLK	8

static struct t_kvd k;

/* 2 MiB blocks: one block is one page, one extent of 2 MiB. */
static int conn(struct kv_client **c)
{
	struct kv_geometry g = { .layers = 32, .kv_heads = 8, .head_dim = 128,
				 .block_tokens = 16, .dtype = KV_DTYPE_FP16 };

	return t_connect(&k, "m", &g, c);
}

static int bob(int in, int out)
{
	struct kv_client *b;
	kv_block_t ids[NBLK];
	char x;

	if (setgid(65534) || setuid(65534) || conn(&b))
		return 1;
	for (int r = 0; r < ROUNDS; r++) {
		if (read(in, &x, 1) != 1)
			return 2;
		if (kv_alloc(b, NBLK, ids) != NBLK)
			return 3;
		memset(kv_block_ptr(b, ids[0]), 0xbb, 64);
		if (kv_release(b, ids, NBLK) != NBLK)
			return 4;
		(void)!write(out, "b", 1);
	}
	kv_disconnect(b);
	return 0;
}

int main(void)
{
	struct kv_client *idle, *a;
	kv_block_t ids[NBLK];
	int ab[2], ba[2], status;
	char conf[64], x;
	pid_t pid;
	FILE *f;
	int fd;

	if (geteuid() != 0)
		return 77;
	snprintf(conf, sizeof(conf), "/tmp/kvd-conf.XXXXXX");
	fd = mkstemp(conf);
	T_ASSERT(fd >= 0 && (f = fdopen(fd, "w")));
	fputs("[tenant a]\nuids = 0\nsecret = aaaaaaaaaaaaaaaaaaaa\n"
	      "[tenant b]\nuids = 65534\nsecret = bbbbbbbbbbbbbbbbbbbb\n", f);
	T_ASSERT(!fclose(f));
	t_kvd_start(&k, "16M", "--extent-size", "2M", "--config", conf, NULL);
	chmod(k.dir, 0755);
	T_EQ(conn(&idle), 0);
	T_EQ(conn(&a), 0);
	T_ASSERT(!pipe(ab) && !pipe(ba));
	pid = fork();
	if (pid == 0)
		_exit(bob(ab[0], ba[1]));
	/* 8 extents go a -> b -> a every round: 2 * 8 * ROUNDS hand-overs,
	 * each a fresh memfd the idle client is sent but does not read. */
	for (int r = 0; r < ROUNDS; r++) {
		T_EQ(kv_alloc(a, NBLK, ids), NBLK);
		for (int i = 0; i < NBLK; i++)
			T_ASSERT(*(uint8_t *)kv_block_ptr(a, ids[i]) != 0xbb);
		T_EQ(kv_release(a, ids, NBLK), NBLK);
		T_EQ(write(ab[1], "a", 1), 1);
		T_EQ(read(ba[0], &x, 1), 1);
	}
	T_EQ(waitpid(pid, &status, 0), pid);
	T_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The idle client wakes: still connected, its extents all usable. */
	T_EQ(kv_alloc(idle, NBLK, ids), NBLK);
	for (int i = 0; i < NBLK; i++) {
		uint8_t *p = kv_block_ptr(idle, ids[i]);

		T_ASSERT(p);
		T_ASSERT(*p != 0xbb);	/* never bob's bytes */
		memset(p, 1, 4096);
	}
	T_EQ(kv_release(idle, ids, NBLK), NBLK);
	kv_disconnect(a);
	kv_disconnect(idle);
	t_kvd_stop(&k);
	unlink(conf);
	return 0;
}
