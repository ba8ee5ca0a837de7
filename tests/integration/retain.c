// SPDX-License-Identifier: MIT
/*
 * Retention with a real kvd (KV_OP_RETAIN, kv_seq_retain, kvctl pin):
 * a 256-block pool takes prompts of 20 blocks, so writing fourteen
 * pushes the oldest out. A prompt of priority 100 outlives the default ones written
 * after it, and with kv_retention.end only its head does; a pinned
 * prompt stays however many come after, until its pin ends at its TTL,
 * then goes like any other; pins whose slabs pass half the pool are
 * refused -EDQUOT with nothing pinned, and another model still gets the
 * other half; a pin outlives the client that set it;
 * kvctl pin and unpin by the hash of a prefix's last block; bad
 * requests are refused with nothing changed. kvctl check throughout.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tier_util.h"

#define POOL_BLOCKS	256	/* 8 MiB of 32 KiB blocks */
#define FLOOD		14	/* prompts: 280 blocks */

/* Blocks of prompt @p still in the pool (a pool-only lookup). */
static int pool_hits(struct kv_client *c, uint32_t p)
{
	struct kv_hash *h = kv_data_ptr(c, 0, FULL * sizeof(*h));
	kv_block_t *ids = kv_data_ptr(c, 4096, FULL * sizeof(*ids));
	uint32_t t[NTOK];
	int n;

	tokens(t, p);
	T_EQ(kv_hash_blocks(0, NULL, 0, t, NTOK, BT, NULL, h), FULL);
	n = kv_lookup(c, h, FULL, ids);
	T_ASSERT(n >= 0);
	for (int i = 0; i < n; i++)
		T_ASSERT(same(c, ids[i], p, (uint32_t)i));
	if (n)
		T_EQ(kv_release(c, ids, (unsigned)n), n);
	return n;
}

/* Default prompts from @base: more than the pool in new blocks. */
static void flood(struct kv_client *c, uint32_t base)
{
	for (uint32_t p = base; p < base + FLOOD; p++)
		write_prompt(c, p);
}

static long long pinned(void)
{
	char *j = t_kvctl(&k, "status");
	long long n = t_json_int(j, "pinned_blocks");

	free(j);
	return n;
}

static void test_priority(struct kv_client *c)
{
	struct kv_retention hi = { .priority = KV_PRIO_MAX };
	struct kv_retention head = { .priority = KV_PRIO_MAX,
				     .end = 8 * BT + 3 };

	write_retained(c, 1, &hi);
	flood(c, 100);
	T_EQ(pool_hits(c, 1), FULL);	/* the oldest, yet kept */
	T_EQ(pool_hits(c, 100), 0);	/* default ones went instead */
	T_EQ(read_prompt(c, 1).pool, FULL);
	check_books();

	/* only the blocks wholly below end get it: the prefix's head */
	write_retained(c, 2, &head);
	flood(c, 200);
	flood(c, 300);
	T_EQ(pool_hits(c, 2), 8);
	check_books();
}

static void test_pin_ttl(struct kv_client *c)
{
	struct kv_retention pin = { .pin_ms = 1200 };

	write_retained(c, 3, &pin);
	T_EQ(pinned(), FULL);
	flood(c, 400);
	flood(c, 500);
	T_EQ(pool_hits(c, 3), FULL);
	check_books();
	usleep(1800 * 1000);		/* its TTL and a tick */
	T_EQ(pinned(), 0);
	flood(c, 600);
	flood(c, 700);
	T_ASSERT(pool_hits(c, 3) < FULL);	/* evictable again */
	check_books();
}

/* Prompt @p's blocks, held: its block table after a pool-only lookup. */
static int hold_prompt(struct kv_client *c, uint32_t p, kv_block_t *ids)
{
	struct kv_hash *h = kv_data_ptr(c, 0, FULL * sizeof(*h));
	uint32_t t[NTOK];

	tokens(t, p);
	T_EQ(kv_hash_blocks(0, NULL, 0, t, NTOK, BT, NULL, h), FULL);
	return kv_lookup(c, h, FULL, ids);
}

/* Unpin prompts [@from, @to) by RETAIN, those of them in the pool. */
static void unpin_prompts(struct kv_client *c, uint32_t from, uint32_t to)
{
	kv_block_t ids[FULL];

	for (uint32_t p = from; p < to; p++) {
		int n = hold_prompt(c, p, ids);

		if (n > 0) {
			T_EQ(kv_retain(c, ids, (unsigned)n, 0, 0,
				       KV_RETAIN_UNPIN), n);
			T_EQ(kv_release(c, ids, (unsigned)n), n);
		}
	}
}

/*
 * Pins keep whole slabs from reclaim, so their limit counts the slabs'
 * pages: half the namespace's, and half the pool's for all. Prompts are
 * pinned until one is refused -EDQUOT, with nothing of it pinned; then
 * another model still gets half the pool.
 */
static void test_limit(struct kv_client *c)
{
	kv_block_t ids[FULL], *many = calloc(POOL_BLOCKS / 2, sizeof(*many));
	struct kv_client *o;
	long long before;
	uint32_t p, n = 0;
	int ret = 0;

	T_ASSERT(many);
	for (p = 10; p < 10 + 2 * FLOOD && ret != -EDQUOT; p++) {
		write_prompt(c, p);
		T_EQ(hold_prompt(c, p, ids), FULL);
		before = pinned();
		ret = kv_retain(c, ids, FULL, 0, 60000, 0);
		T_ASSERT(ret == FULL || ret == -EDQUOT);
		n += ret == FULL;
		if (ret == -EDQUOT) {
			T_ASSERT(strstr(kv_last_error(c), "pin limit"));
			T_EQ(pinned(), before);	/* nothing of it pinned */
		}
		T_EQ(kv_release(c, ids, FULL), FULL);
	}
	T_EQ(ret, -EDQUOT);
	T_ASSERT(n >= 1);
	check_books();

	/* a block at a time, as an engine grows its sequences */
	T_EQ(t_connect(&k, "other", NULL, &o), 0);
	for (int i = 0; i < POOL_BLOCKS / 2; i++)
		T_EQ(kv_alloc(o, 1, &many[i]), 1);
	T_EQ(kv_release(o, many, POOL_BLOCKS / 2), POOL_BLOCKS / 2);
	kv_disconnect(o);
	free(many);

	unpin_prompts(c, 10, p);
	T_EQ(pinned(), 0);
	check_books();
}

/* Out of range, uncommitted, not held: -EINVAL, nothing changed. */
static void test_errors(struct kv_client *c)
{
	kv_block_t ids[FULL], fresh;

	write_prompt(c, 13);
	T_EQ(hold_prompt(c, 13, ids), FULL);
	T_EQ(kv_retain(c, ids, FULL, KV_PRIO_MAX + 1, 0, 0), -EINVAL);
	T_EQ(kv_retain(c, ids, FULL, 0, KV_PIN_MAX_MS + 1, 0), -EINVAL);
	T_EQ(kv_retain(c, ids, FULL, 0, 5, KV_RETAIN_UNPIN), -EINVAL);
	T_EQ(kv_retain(c, ids, FULL, 0, 0, 0x80), -EINVAL);
	T_EQ(kv_alloc(c, 1, &fresh), 1);
	T_EQ(kv_retain(c, &fresh, 1, 50, 0, 0), -EINVAL);
	T_EQ(kv_release(c, &fresh, 1), 1);
	T_EQ(kv_retain(c, &fresh, 1, 50, 0, 0), -EINVAL);
	T_EQ(kv_retain(c, ids, FULL, 0, 60000, 0), FULL);
	T_EQ(kv_release(c, ids, FULL), FULL);
	T_EQ(kv_retain(c, ids, 1, 50, 0, 0), -EINVAL);
	T_EQ(pinned(), FULL);
	unpin_prompts(c, 13, 14);
	T_EQ(pinned(), 0);
	check_books();
}

/* A pin is the namespace's: it outlives the client that set it. */
static void test_client_gone(void)
{
	struct kv_client *c;

	T_EQ(t_connect(&k, "retain", NULL, &c), 0);
	write_retained(c, 20, &(struct kv_retention){ .pin_ms = 60000 });
	kv_disconnect(c);
	usleep(300 * 1000);
	T_EQ(pinned(), FULL);
	check_books();
}

static void hex(const struct kv_hash *h, char *out)
{
	for (size_t i = 0; i < sizeof(h->b); i++)
		sprintf(out + 2 * i, "%02x", h->b[i]);
}

static int kvctl_rc(const char *args)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "'%s' --admin-socket '%s' %s >/dev/null 2>&1",
		 t_bin("kvctl"), k.admin, args);
	return WEXITSTATUS(system(cmd));
}

static void test_kvctl(struct kv_client *c)
{
	struct kv_hash h[FULL];
	uint32_t t[NTOK];
	char x[33], args[128], *j;

	/* make room: drop the pins of the tests before */
	for (uint32_t p = 10; p <= 20; p++) {
		tokens(t, p);
		T_EQ(kv_hash_blocks(0, NULL, 0, t, NTOK, BT, NULL, h), FULL);
		hex(&h[FULL - 1], x);
		snprintf(args, sizeof(args), "unpin %s", x);
		kvctl_rc(args);
	}
	T_EQ(pinned(), 0);

	write_retained(c, 30, NULL);
	tokens(t, 30);
	T_EQ(kv_hash_blocks(0, NULL, 0, t, NTOK, BT, NULL, h), FULL);
	hex(&h[FULL - 1], x);
	snprintf(args, sizeof(args), "pin --ttl 60 %s", x);
	j = t_kvctl(&k, args);
	T_EQ(t_json_int(j, "prefix_blocks"), FULL);
	T_EQ(t_json_int(j, "changed"), FULL);
	T_EQ(t_json_int(j, "ttl_s"), 60);
	free(j);
	flood(c, 800);
	flood(c, 900);
	T_EQ(pool_hits(c, 30), FULL);
	check_books();

	/* the head of the prefix alone: its 5 blocks, already pinned */
	hex(&h[4], x);
	snprintf(args, sizeof(args), "pin %s", x);
	j = t_kvctl(&k, args);
	T_EQ(t_json_int(j, "prefix_blocks"), 5);
	T_EQ(t_json_int(j, "changed"), 0);
	free(j);

	hex(&h[FULL - 1], x);
	snprintf(args, sizeof(args), "unpin %s", x);
	j = t_kvctl(&k, args);
	T_EQ(t_json_int(j, "changed"), FULL);
	T_EQ(t_json_int(j, "pinned_blocks"), 0);
	free(j);

	/* unpin all: every pin of the namespace, no hash needed */
	snprintf(args, sizeof(args), "pin --ttl 600 %s", x);
	free(t_kvctl(&k, args));
	T_EQ(pinned(), FULL);
	j = t_kvctl(&k, "unpin all");
	T_EQ(t_json_int(j, "changed"), FULL);
	free(j);
	T_EQ(pinned(), 0);

	/* refusals: a malformed hash (2), an unknown one (1), bad TTLs */
	T_EQ(kvctl_rc("pin 1234"), 2);
	T_EQ(kvctl_rc("pin zz0123456789abcdef0123456789abcd"), 2);
	T_EQ(kvctl_rc("pin 00000000000000000000000000000001"), 1);
	T_EQ(kvctl_rc("pin --ns 99999 00000000000000000000000000000001"), 1);
	snprintf(args, sizeof(args), "pin --ttl 0 %s", x);
	T_EQ(kvctl_rc(args), 2);
	snprintf(args, sizeof(args), "pin --ttl 604801 %s", x);
	T_EQ(kvctl_rc(args), 2);
	T_EQ(kvctl_rc("pin"), 2);
	T_EQ(pinned(), 0);
	check_books();
}

int main(void)
{
	struct kv_client *c;

	t_kvd_start(&k, "8M", NULL);
	T_EQ(t_connect(&k, "retain", NULL, &c), 0);
	test_priority(c);
	test_pin_ttl(c);
	test_limit(c);
	test_errors(c);
	test_client_gone();
	test_kvctl(c);
	kv_disconnect(c);
	t_kvd_stop(&k);
	t_cleanup_dir(&k);
	return 0;
}
