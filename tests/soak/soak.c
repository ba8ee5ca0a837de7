// SPDX-License-Identifier: MIT
/*
 * Soak: a real kvd (host backend, sockets in a temporary directory, as
 * the integration tests start it) and 8 client processes doing random
 * prefix-cache work for a bounded time: ALLOC, LOOKUP, ALLOC_PREFIX,
 * COMMIT, RELEASE, fork (REF + COW, and kv_seq_fork) and COW of committed
 * blocks. Prompts come from a few shared families, so clients hit each
 * other's blocks and the cache evicts. Every full block's bytes are a
 * function of its hash, written before it is committed and checked on
 * every prefix hit, deduplication and copy; a private block's bytes are a
 * function of a tag of its holder, checked before it is released.
 *
 * Meanwhile the parent SIGKILLs a random client every 20..300 ms and
 * starts it again, and runs `kvctl check` now and then. At the end it
 * kills half the clients and stops the rest, waits until kvd has seen
 * them all go, then asserts: `kvctl check` OK, no block in use in any
 * namespace (leaked blocks), no page left once the cache is evicted, no
 * content mismatch, no unexpected error, kvd exits cleanly.
 *
 * This file is the parent; the clients are tests/soak/client.c.
 * soak_main() parses [-t SECONDS] [-s SEED] and calls soak_run(): the
 * program soak (tests/soak/main.c, SOAK_SECONDS, default 60) and the
 * integration test soak_short (7 s) both link this file.
 */
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "soak.h"

#define POOL		"16M"		/* 2048 blocks of 8 KiB */
#define KILL_MIN_MS	20
#define KILL_MAX_MS	300
#define CHECK_MS	2000		/* kvctl check during the run */

static const char *const op_name[NR_OPS] = {
	"alloc", "lookup", "alloc_prefix", "commit", "release", "ref",
	"cow", "kv_seq",
};

static struct t_kvd k;
static struct shared *sh;

struct run {
	pid_t		pid[NCLIENTS];
	uint64_t	seed;
	uint64_t	rng;
	unsigned	kills, restarts, checks;
};

static pid_t spawn(struct run *r, int slot)
{
	uint64_t seed = rnd(&r->rng);
	pid_t pid = fork();

	if (pid < 0)
		T_FAIL("fork: %s", strerror(errno));
	if (!pid)
		soak_client(&k, sh, slot, seed);
	r->pid[slot] = pid;
	return pid;
}

/* A client that died on its own is a failure: say why. */
static void reaped(struct run *r, int slot, int status, bool killed)
{
	if (killed && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
		return;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && !killed &&
	    __atomic_load_n(&sh->stop, __ATOMIC_RELAXED))
		return;
	T_FAIL("client %d (pid %d) ended with status %#x: %s", slot,
	       (int)r->pid[slot], status,
	       sh->s[slot].why[0] ? sh->s[slot].why : "no reason given");
}

static void check_children(struct run *r)
{
	for (int i = 0; i < NCLIENTS; i++) {
		int status;

		if (waitpid(r->pid[i], &status, WNOHANG) == r->pid[i])
			reaped(r, i, status, false);
	}
}

static void kill_one(struct run *r)
{
	int slot = (int)(rnd(&r->rng) % NCLIENTS), status;

	if (kill(r->pid[slot], SIGKILL))
		T_FAIL("kill: %s", strerror(errno));
	if (waitpid(r->pid[slot], &status, 0) != r->pid[slot])
		T_FAIL("waitpid: %s", strerror(errno));
	reaped(r, slot, status, true);
	r->kills++;
	spawn(r, slot);
	r->restarts++;
}

/* kvctl check: t_kvctl fails the test when a namespace's books are bad. */
static void check_books(struct run *r)
{
	free(t_kvctl(&k, "check"));
	r->checks++;
}

static void run_soak(struct run *r, unsigned seconds)
{
	uint64_t end = now_ms() + seconds * 1000ULL, next_check;

	for (int i = 0; i < NCLIENTS; i++)
		spawn(r, i);
	next_check = now_ms() + CHECK_MS;
	while (now_ms() < end) {
		uint64_t ms = KILL_MIN_MS + rnd(&r->rng) %
			      (KILL_MAX_MS - KILL_MIN_MS);

		usleep((useconds_t)(ms * 1000));
		check_children(r);
		if (now_ms() >= end)
			break;
		kill_one(r);
		if (now_ms() >= next_check) {
			check_books(r);
			next_check = now_ms() + CHECK_MS;
		}
	}
}

/* Half killed, half asked to stop and release what they hold. */
static void stop_all(struct run *r)
{
	bool killed[NCLIENTS];
	int status;

	for (int i = 0; i < NCLIENTS; i++) {
		killed[i] = rnd(&r->rng) & 1;
		if (killed[i]) {
			kill(r->pid[i], SIGKILL);
			r->kills++;
		}
	}
	__atomic_store_n(&sh->stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < NCLIENTS; i++) {
		if (waitpid(r->pid[i], &status, 0) != r->pid[i])
			T_FAIL("waitpid: %s", strerror(errno));
		reaped(r, i, status, killed[i]);
	}
}

/* Sum of every "key": in a JSON text. */
static long long json_sum(const char *js, const char *key)
{
	char pat[64];
	long long sum = 0;
	const char *p = js;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	while ((p = strstr(p, pat))) {
		p += strlen(pat);
		sum += strtoll(p, NULL, 10);
	}
	return sum;
}

static int report(struct run *r, unsigned seconds)
{
	struct slot_stats tot = { 0 };
	long long leaked, pages, cached, evictions;
	uint64_t ops = 0;
	char *js;

	for (int i = 0; i < NCLIENTS; i++) {
		for (int o = 0; o < NR_OPS; o++)
			tot.ops[o] += sh->s[i].ops[o];
		tot.hits += sh->s[i].hits;
		tot.dedups += sh->s[i].dedups;
		tot.copies += sh->s[i].copies;
		tot.enospc += sh->s[i].enospc;
		tot.mismatches += sh->s[i].mismatches;
		tot.errors += sh->s[i].errors;
	}
	js = t_status_idle(&k);
	if (t_json_int(js, "nr_clients") != 0)
		T_FAIL("kvd still lists clients: %s", js);
	check_books(r);
	leaked = json_sum(js, "blocks_used");
	cached = json_sum(js, "cached_blocks");
	free(js);
	js = t_kvctl(&k, "prefix");
	evictions = json_sum(js, "evictions");
	free(js);
	/* with the cache evicted, every page must be back */
	free(t_kvctl(&k, "evict"));
	js = t_kvctl(&k, "status");
	pages = t_json_int(js, "pages_used");
	free(js);

	printf("soak: %u s, %d clients, seed %#llx\n", seconds, NCLIENTS,
	       (unsigned long long)r->seed);
	printf("  kills survived     %u\n", r->kills);
	printf("  clients restarted  %u\n", r->restarts);
	printf("  kvctl check        %u passed\n", r->checks);
	printf("  ops by type       ");
	for (int o = 0; o < NR_OPS; o++) {
		printf(" %s %llu", op_name[o], (unsigned long long)tot.ops[o]);
		ops += tot.ops[o];
	}
	printf("\n  ops done           %llu\n", (unsigned long long)ops);
	printf("  hits verified      %llu blocks\n",
	       (unsigned long long)tot.hits);
	printf("  dedups verified    %llu, copies verified %llu, ENOSPC %llu\n",
	       (unsigned long long)tot.dedups,
	       (unsigned long long)tot.copies,
	       (unsigned long long)tot.enospc);
	printf("  content mismatches %llu\n",
	       (unsigned long long)tot.mismatches);
	printf("  evictions          %lld, cached at the end %lld blocks\n",
	       evictions, cached);
	printf("  blocks leaked      %lld\n", leaked < 0 ? 0 : leaked);
	printf("  pages after evict  %lld\n", pages);
	for (int i = 0; i < NCLIENTS && tot.mismatches; i++)
		if (sh->s[i].mismatches)
			printf("  client %d: %s\n", i, sh->s[i].why);
	if (tot.mismatches || tot.errors || leaked > 0 || pages != 0)
		return 1;
	if (!tot.hits || !r->kills || !tot.ops[OP_SEQ])
		T_FAIL("the soak proved nothing: no hits, kills or kv_seq ops");
	return 0;
}

int soak_run(unsigned seconds, uint64_t seed)
{
	struct run r = { .seed = seed, .rng = mix64(seed) | 1 };
	int bad;

	setvbuf(stdout, NULL, _IOLBF, 0);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		T_FAIL("mmap: %s", strerror(errno));
	t_kvd_start(&k, POOL, NULL);
	run_soak(&r, seconds);
	stop_all(&r);
	bad = report(&r, seconds);
	t_kvd_stop(&k);
	printf("%s\n", bad ? "FAIL" : "PASS");
	return bad;
}

int soak_main(int argc, char **argv, const char *env, unsigned default_s)
{
	unsigned seconds = env ? (unsigned)atoi(env) : default_s;
	uint64_t seed = (uint64_t)time(NULL) ^ (uint64_t)getpid();
	int opt;

	while ((opt = getopt(argc, argv, "t:s:")) != -1) {
		switch (opt) {
		case 't':
			seconds = (unsigned)atoi(optarg);
			break;
		case 's':
			seed = strtoull(optarg, NULL, 0);
			break;
		default:
			fprintf(stderr, "usage: %s [-t SECONDS] [-s SEED]\n",
				argv[0]);
			return 2;
		}
	}
	if (!seconds)
		seconds = default_s;
	return soak_run(seconds, seed);
}
