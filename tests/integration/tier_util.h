/* SPDX-License-Identifier: MIT */
/*
 * What the tier tests (tier_host.c, tier_disk.c) share: prompts of FULL
 * full blocks plus one token, a byte pattern per (prompt, block, byte)
 * written into every block a prompt computes and checked in every block
 * that comes back as a hit, and kvctl check. Each test includes it once
 * and defines PROMPTS; the kvd under test is k.
 */
#ifndef KV_TEST_TIER_UTIL_H
#define KV_TEST_TIER_UTIL_H

#include <string.h>

#include "harness.h"

#define BT		16
#define BLK		(32 << 10)	/* t_geom() */
#define FULL		20		/* full blocks per prompt */
#define NTOK		(FULL * BT + 1)

static struct t_kvd k;

static void tokens(uint32_t *t, uint32_t p)
{
	for (uint32_t i = 0; i < NTOK; i++)
		t[i] = p * 100003u + i * 7919u + 1;
}

static uint8_t pattern(uint32_t p, uint32_t b, uint32_t i)
{
	return (uint8_t)(p * 131 + b * 17 + i * 7 + (i >> 9));
}

static void fill(struct kv_client *c, kv_block_t id, uint32_t p, uint32_t b)
{
	uint8_t *x = kv_block_ptr(c, id);

	for (uint32_t i = 0; i < BLK; i++)
		x[i] = pattern(p, b, i);
}

static int same(struct kv_client *c, kv_block_t id, uint32_t p, uint32_t b)
{
	const uint8_t *x = kv_block_ptr(c, id);

	for (uint32_t i = 0; i < BLK; i++)
		if (x[i] != pattern(p, b, i))
			return 0;
	return 1;
}

static void check_books(void)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "'%s' --admin-socket '%s' check >/dev/null",
		 t_bin("kvctl"), k.admin);
	T_EQ(system(cmd), 0);
}

/* Write and commit prompt @p with retention @r (NULL: none), then
 * close: its blocks cached. */
static void write_retained(struct kv_client *c, uint32_t p,
			   const struct kv_retention *r)
{
	uint32_t t[NTOK], nr;
	const kv_block_t *tbl;
	struct kv_seq *s;

	tokens(t, p);
	T_EQ(kv_seq_open(c, t, NTOK, NULL, &s), 0);
	tbl = kv_seq_block_table(s, &nr);
	for (uint32_t b = (uint32_t)(kv_seq_hit_tokens(s) / BT); b < nr; b++)
		fill(c, tbl[b], p, b);
	T_EQ(kv_seq_commit(s), 0);
	if (r)
		T_EQ(kv_seq_retain(s, r), 0);
	T_EQ(kv_seq_close(s), 0);
}

static void write_prompt(struct kv_client *c, uint32_t p)
{
	write_retained(c, p, NULL);
}

/* Open prompt @p again: every full block a hit, its bytes intact. */
static struct kv_seq_hits read_prompt(struct kv_client *c, uint32_t p)
{
	uint32_t t[NTOK], nr;
	const kv_block_t *tbl;
	struct kv_seq_hits h;
	struct kv_seq *s;

	tokens(t, p);
	T_EQ(kv_seq_open(c, t, NTOK, NULL, &s), 0);
	T_EQ(kv_seq_hits(s, &h), 0);
	tbl = kv_seq_block_table(s, &nr);
	for (uint32_t b = 0; b < kv_seq_hit_tokens(s) / BT; b++)
		if (!same(c, tbl[b], p, b))
			T_FAIL("prompt %u block %u: bytes differ (pool %u, host %u, disk %u)",
			       p, b, h.pool, h.host, h.disk);
	T_EQ(h.pool + h.host + h.disk, kv_seq_hit_tokens(s) / BT);
	T_EQ(kv_seq_close(s), 0);
	return h;
}

#endif /* KV_TEST_TIER_UTIL_H */
