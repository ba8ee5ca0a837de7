// SPDX-License-Identifier: MIT
/*
 * Per-uid tenant slots are reused (kvd without kvd.conf: one tenant per
 * uid, 256 slots). 300 distinct uids connect and go one after another,
 * and every one is admitted; a uid whose cached blocks keep its namespace
 * keeps its slot, and hits its prompt again. Once its namespace is gone,
 * its slot may go to another uid, who gets no hit on its prompt and none
 * of its prefix-cache counters. Needs root (to run processes as other
 * uids); skips otherwise.
 */
#include <grp.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define UID_A		2000	/* commits a prompt */
#define UID_B		4000	/* takes A's slot */
#define UID_CHURN	3000	/* first of the uids that come and go */
#define NR_CHURN	300
#define TOKENS		64
#define HIT		48	/* all but the last 16-token block */

static struct t_kvd k;

static void tokens(uint32_t *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		t[i] = 11 + (uint32_t)i * 7;
}

/* Run fn as @uid (and gid) in a child; returns its exit status. */
static int as_uid(uid_t uid, int (*fn)(void))
{
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		if (setgroups(0, NULL) || setgid(uid) || setuid(uid))
			_exit(100);
		_exit(fn());
	}
	T_EQ(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 200;
}

/* Connect, one NOP, go. */
static int churn(void)
{
	struct kv_client *c;
	int ret = t_connect(&k, "model-a", NULL, &c);

	if (ret) {
		fprintf(stderr, "uid %u: connect: %s\n", (unsigned)getuid(),
			strerror(-ret));
		return 1;
	}
	if (kv_nop(c))
		return 2;
	return kv_disconnect(c) ? 3 : 0;
}

/* Look the prompt up; commit it; the stats' lookups are @lookups. */
static int prompt(size_t hits, uint64_t lookups)
{
	struct kv_client *c;
	struct kv_seq *s;
	struct kv_stats st;
	uint32_t t[TOKENS];

	tokens(t, TOKENS);
	if (t_connect(&k, "model-a", NULL, &c))
		return 1;
	if (kv_seq_open(c, t, TOKENS, NULL, &s))
		return 2;
	if (kv_seq_hit_tokens(s) != hits) {
		fprintf(stderr, "uid %u: %zu tokens hit, expected %zu\n",
			(unsigned)getuid(), kv_seq_hit_tokens(s), hits);
		return 3;
	}
	if (kv_seq_commit(s) || kv_seq_close(s))
		return 4;
	if (kv_stats(c, &st))
		return 5;
	if (st.lookups != lookups) {
		fprintf(stderr, "uid %u: %llu lookups counted, expected %llu\n",
			(unsigned)getuid(), (unsigned long long)st.lookups,
			(unsigned long long)lookups);
		return 6;
	}
	return kv_disconnect(c) ? 7 : 0;
}

static int a_first(void)	{ return prompt(0, 1); }
static int a_again(void)	{ return prompt(HIT, 2); }
static int b_fresh(void)	{ return prompt(0, 1); }

static bool tenant_listed(uid_t uid)
{
	char *js = t_kvctl(&k, "tenants"), pat[32];
	bool found;

	snprintf(pat, sizeof(pat), "\"uid:%u\"", (unsigned)uid);
	found = strstr(js, pat) != NULL;
	free(js);
	return found;
}

static void start(const char *max_ns)
{
	t_kvd_start(&k, "64M", "--max-namespaces", max_ns, NULL);
	chmod(k.dir, 0755);
}

/* Churn uids [first, first + n): each is admitted. */
static void churn_uids(uid_t first, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		int ret = as_uid(first + i, churn);

		if (ret)
			T_FAIL("uid %u (the %u-th to come): exit %d",
			       (unsigned)(first + i), i + 1, ret);
	}
}

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "SKIP: needs root to connect as other uids\n");
		return 77;
	}

	/* A's cached prompt keeps its namespace, so its slot, through 300
	 * other uids; those reuse each other's. */
	start("8");
	T_EQ(as_uid(UID_A, a_first), 0);
	churn_uids(UID_CHURN, NR_CHURN);
	T_ASSERT(tenant_listed(UID_A));
	T_EQ(as_uid(UID_A, a_again), 0);
	t_kvd_stop(&k);

	/* One namespace slot: the first other uid takes A's (its cached
	 * blocks dropped), A's tenant is then idle and the oldest, and B,
	 * coming when all 256 slots are taken, gets it: no hit, no count
	 * of A's lookups. */
	start("1");
	T_EQ(as_uid(UID_A, a_first), 0);
	churn_uids(UID_CHURN, 255);
	T_ASSERT(tenant_listed(UID_A));
	T_EQ(as_uid(UID_B, b_fresh), 0);
	T_ASSERT(!tenant_listed(UID_A));
	T_ASSERT(tenant_listed(UID_B));
	t_kvd_stop(&k);
	printf("PASS tenant_slots\n");
	return 0;
}
