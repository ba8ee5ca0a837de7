// SPDX-License-Identifier: MIT
/*
 * The disk tier under the host tier, with a real kvd and a real file
 * (O_DIRECT, io_uring): prompts far larger than pool + host tier spill
 * to disk and come back on a hit, every byte as written, kv_seq_hits
 * counting the disk's; lookups wait (parked) while reads land, and
 * other requests are served meanwhile; the file overwritten under kvd
 * (tampered) makes the blocks there dropped, never served; kvctl check
 * holds, kvctl tiers shows both tiers.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROMPTS		12

static char disk[160];

#include "tier_util.h"

/* Blocks the host tier dropped (no room on its way to disk): none is
 * lost otherwise. The first row of kvctl tiers is the host's. */
static long long host_drops(void)
{
	char *js = t_kvctl(&k, "tiers");
	long long n = t_json_int(js, "drops");

	free(js);
	return n;
}

static void start(const char *host)
{
	snprintf(disk, sizeof(disk), "/tmp/kvd-disk-tier.%d", (int)getpid());
	unlink(disk);
	t_kvd_start(&k, "4M", "--host-tier-size", host, "--disk-tier-size",
		    "32M", "--disk-tier-path", disk, NULL);
}

static void stop(void)
{
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
	unlink(disk);
}

static void test_round_trip(void)
{
	struct kv_client *c;
	uint32_t from_disk = 0, all = 0;
	char *js;

	start("2M");		/* 64 blocks: most go on to disk */
	T_EQ(t_connect(&k, "disked", NULL, &c), 0);
	for (uint32_t p = 0; p < PROMPTS; p++)
		write_prompt(c, p);
	for (uint32_t p = 0; p < PROMPTS; p++) {
		struct kv_seq_hits h = read_prompt(c, p);

		from_disk += h.disk;
		all += h.pool + h.host + h.disk;
	}
	T_ASSERT(from_disk > 0);
	/* nothing lost but what had no staging room (counted) */
	T_ASSERT(all + host_drops() >= PROMPTS * FULL);
	check_books();
	js = t_kvctl(&k, "tiers");
	T_ASSERT(strstr(js, "\"tier\": \"disk\""));
	free(js);
	kv_disconnect(c);
	stop();
}

/* Every run on disk overwritten while kvd runs: dropped, not served. */
static void test_tampered(void)
{
	struct kv_client *c;
	char junk[4096];
	int fd;

	start("640K");
	T_EQ(t_connect(&k, "disked", NULL, &c), 0);
	for (uint32_t p = 0; p < PROMPTS; p++)
		write_prompt(c, p);
	kv_nop(c);
	usleep(200000);		/* the writes land */
	memset(junk, 0x77, sizeof(junk));
	fd = open(disk, O_WRONLY);
	T_ASSERT(fd >= 0);
	for (off_t o = 0; o < 32 << 20; o += 64 << 10)
		T_EQ(pwrite(fd, junk, sizeof(junk), o + 4096), sizeof(junk));
	fsync(fd);
	close(fd);
	for (uint32_t p = 0; p < PROMPTS; p++)
		read_prompt(c, p);	/* what is served is checked */
	{
		char *js = t_kvctl(&k, "tiers");
		const char *dk = strstr(js, "\"tier\": \"disk\"");

		T_ASSERT(dk && t_json_int(dk, "corrupt") > 0);
		free(js);
	}
	check_books();
	kv_disconnect(c);
	stop();
}

/* Four processes spill and fetch at once; others served while parked. */
static void test_concurrent(void)
{
	pid_t pid[4];
	int st;

	start("1M");
	for (int w = 0; w < 4; w++) {
		pid[w] = fork();
		T_ASSERT(pid[w] >= 0);
		if (pid[w] == 0) {
			struct kv_client *c;

			if (t_connect(&k, "disked", NULL, &c))
				_exit(2);
			for (uint32_t r = 0; r < 2; r++)
				for (uint32_t p = 0; p < PROMPTS; p++) {
					write_prompt(c, p % 3 ? p : 100 + 10 * w + p);
					read_prompt(c, (p * 5 + w) % PROMPTS);
				}
			kv_disconnect(c);
			_exit(0);
		}
	}
	for (int w = 0; w < 4; w++) {
		T_EQ(waitpid(pid[w], &st, 0), pid[w]);
		T_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	check_books();
	stop();
}

static char conf[128];

/* kvd with a tenant for us (secrets that last across runs) and persist;
 * each start in a new directory, the file and kvd.conf outside it. */
static void start_persist(void)
{
	t_kvd_start(&k, "4M", "--host-tier-size", "2M", "--disk-tier-size",
		    "32M", "--disk-tier-path", disk, "--disk-tier-persist",
		    "--config", conf, NULL);
}

static uint32_t disk_hits_all(void)
{
	struct kv_client *c;
	uint32_t n = 0;

	T_EQ(t_connect(&k, "disked", NULL, &c), 0);
	for (uint32_t p = 0; p < PROMPTS; p++)
		n += read_prompt(c, p).disk;	/* every byte checked */
	kv_disconnect(c);
	return n;
}

static void kvd_stop_only(void)
{
	t_kvd_stop(&k);		/* and its directory: the file stays */
}

static int log_has(const char *what)
{
	char cmd[400];

	snprintf(cmd, sizeof(cmd), "grep -q '%s' '%s'", what, k.log);
	return system(cmd) == 0;
}

/*
 * Persistence: a clean stop writes what is cached to disk; a restart
 * rebuilds the index from the file and serves it; the file of a stopped
 * kvd tampered with (bytes of a run, then the superblock's version)
 * gives checked drops, never a wrong byte.
 */
static void test_restart(void)
{
	struct kv_client *c;
	long long dropped;
	FILE *f;
	int fd;

	snprintf(conf, sizeof(conf), "/tmp/kvd-tier-conf.%d", (int)getpid());
	f = fopen(conf, "w");
	T_ASSERT(f);
	fprintf(f, "[tenant me]\nuids = %u\nsecret = tier-disk-secret-0123456789\n",
		(unsigned)getuid());
	T_ASSERT(!fclose(f));
	snprintf(disk, sizeof(disk), "/tmp/kvd-disk-tier.%d", (int)getpid());
	unlink(disk);
	start_persist();
	T_EQ(t_connect(&k, "disked", NULL, &c), 0);
	for (uint32_t p = 0; p < PROMPTS; p++)
		write_prompt(c, p);
	kv_disconnect(c);
	dropped = host_drops();
	kvd_stop_only();	/* the rest written to disk, waited for */

	start_persist();
	T_ASSERT(log_has("blocks kept from the last run"));
	/* all of it from disk, but what had no staging room before */
	T_ASSERT(disk_hits_all() + dropped >= PROMPTS * FULL);
	check_books();
	kvd_stop_only();

	/* bytes of runs overwritten while kvd was stopped */
	fd = open(disk, O_WRONLY);
	T_ASSERT(fd >= 0);
	for (off_t o = 4096; o < 4 << 20; o += 64 << 10)
		T_EQ(pwrite(fd, "garbage!", 8, o + 2048), 8);
	close(fd);
	start_persist();
	disk_hits_all();		/* what is served is checked */
	check_books();
	kvd_stop_only();

	/* another layout version: nothing kept, said why */
	fd = open(disk, O_WRONLY);
	T_ASSERT(fd >= 0);
	T_EQ(pwrite(fd, "\x63", 1, 8), 1);	/* disk_sb.version */
	close(fd);
	start_persist();
	T_ASSERT(log_has("not kept: it was written by another layout version"));
	T_EQ(disk_hits_all(), 0);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
	unlink(disk);
	unlink(conf);
}

/* The files outside kvd's directory go, however the test ends. */
static void remove_files(void)
{
	if (disk[0])
		unlink(disk);
	if (conf[0])
		unlink(conf);
}

/*
 * A lookup that names blocks on disk twice, and in every order: each is
 * read once, kvd stays up, whatever comes back is the right bytes.
 */
static void test_duplicates(void)
{
	struct kv_hash *h, *dup;
	struct kv_client *c;
	kv_block_t *ids;
	uint32_t t[NTOK];
	int n;

	start("1M");
	T_EQ(t_connect(&k, "disked", NULL, &c), 0);
	for (uint32_t p = 0; p < PROMPTS; p++)
		write_prompt(c, p);
	h = kv_data_ptr(c, 0, FULL * sizeof(*h));
	dup = kv_data_ptr(c, 2048, 2 * FULL * sizeof(*dup));
	ids = kv_data_ptr(c, 8192, 2 * FULL * sizeof(*ids));
	tokens(t, 0);			/* the coldest: on disk */
	T_EQ(kv_hash_blocks(0, NULL, 0, t, NTOK, BT, NULL, h), FULL);
	for (uint32_t i = 0; i < FULL; i++) {
		dup[2 * i] = h[FULL - 1 - i];	/* backwards, twice each */
		dup[2 * i + 1] = h[FULL - 1 - i];
	}
	n = kv_lookup(c, dup, 2 * FULL, ids);
	T_ASSERT(n >= 0);
	if (n)
		T_EQ(kv_release(c, ids, (unsigned)n), n);
	dup[0] = h[0];
	dup[1] = h[0];
	n = kv_lookup(c, dup, 2, ids);
	T_ASSERT(n >= 0 && n <= 2);
	for (int i = 0; i < n; i++)
		T_ASSERT(same(c, ids[i], 0, 0));
	if (n)
		T_EQ(kv_release(c, ids, (unsigned)n), n);
	read_prompt(c, 0);		/* every byte of what comes back */
	check_books();
	kv_disconnect(c);
	stop();
}

int main(void)
{
	atexit(remove_files);
	test_restart();
	test_round_trip();
	test_duplicates();
	test_tampered();
	test_concurrent();
	printf("tier_disk: ok\n");
	return 0;
}
