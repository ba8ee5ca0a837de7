// SPDX-License-Identifier: MIT
/*
 * The keys of tenants (kvd/tenant.c) and of their index (kvd/prefix.c):
 * every byte of a tenant's secret, and of kvd's random secret for the
 * tenant of a uid, changes the key and so the index key of a block hash;
 * the same secret gives the same key (stable across restarts).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "daemon.h"
#include "ns_internal.h"

static struct kvd *kvd_new(uint8_t fill)
{
	struct kvd *d = calloc(1, sizeof(*d));

	assert_non_null(d);
	memset(d->secret, fill, sizeof(d->secret));
	return d;
}

static struct kv_hash some_hash(void)
{
	struct kv_hash h;

	for (unsigned i = 0; i < sizeof(h.b); i++)
		h.b[i] = (uint8_t)(0x40 + i);
	return h;
}

static int uid_tenant(struct kvd *d, uint32_t uid)
{
	const char *why = NULL;
	int id = kvd_tenant_of(d, uid, uid, NULL, 0, &why);

	assert_true(id >= 0);
	return id;
}

/*
 * A per-uid tenant's key takes all of kvd's secret: 32 random bytes, not
 * a 64-bit value; two kvds whose secrets differ in the last byte only
 * give the same uid different keys, and different uids differ.
 */
static void test_tenant_uid_key_whole_secret(void **state)
{
	struct kvd *d1 = kvd_new(0x5a), *d2 = kvd_new(0x5a);
	struct kv_hash h = some_hash(), k1, k2, k3;
	int a, b, c;

	(void)state;
	assert_true(sizeof(d1->secret) >= 32);
	d2->secret[sizeof(d2->secret) - 1] ^= 1;
	a = uid_tenant(d1, 1000);
	b = uid_tenant(d2, 1000);
	assert_memory_not_equal(&d1->tenants[a].key, &d2->tenants[b].key,
				sizeof(d1->tenants[a].key));
	k1 = kvd_key_hash(&d1->tenants[a].key, &h);
	k2 = kvd_key_hash(&d2->tenants[b].key, &h);
	assert_memory_not_equal(&k1, &k2, sizeof(k1));
	c = uid_tenant(d1, 1001);
	k3 = kvd_key_hash(&d1->tenants[c].key, &h);
	assert_memory_not_equal(&k1, &k3, sizeof(k1));
	/* the same uid finds its tenant again, with the same key */
	assert_int_equal(uid_tenant(d1, 1000), a);
	kvd_tenants_exit(d1);
	kvd_tenants_exit(d2);
	free(d1);
	free(d2);
}

static void conf_tenant(struct kvd_tenant_conf *tc, const char *name,
			uint8_t fill, uint32_t len)
{
	memset(tc, 0, sizeof(*tc));
	snprintf(tc->name, sizeof(tc->name), "%s", name);
	memset(tc->secret, fill, len);
	tc->secret_len = len;
}

/*
 * kvd.conf tenants: secrets that differ only past byte 16 (here in the
 * last of 64) give different index keys for the same block hash; equal
 * secrets give equal keys, as after a restart.
 */
static void test_tenant_conf_key_whole_secret(void **state)
{
	struct kvd *d = kvd_new(0), *again = kvd_new(0);
	struct kvd_tenant_conf tc[3];
	struct kv_hash h = some_hash(), ka, kb, kc;

	(void)state;
	conf_tenant(&tc[0], "a", 0x33, KVD_CONF_SECRET_MAX);
	conf_tenant(&tc[1], "b", 0x33, KVD_CONF_SECRET_MAX);
	tc[1].secret[KVD_CONF_SECRET_MAX - 1] ^= 0x80;
	conf_tenant(&tc[2], "c", 0x33, KVD_CONF_SECRET_MIN);
	d->conf.tenants = tc;
	d->conf.nr_tenants = 3;
	kvd_tenants_apply(d);
	ka = kvd_key_hash(&d->tenants[0].key, &h);
	kb = kvd_key_hash(&d->tenants[1].key, &h);
	kc = kvd_key_hash(&d->tenants[2].key, &h);
	assert_memory_not_equal(&ka, &kb, sizeof(ka));
	assert_memory_not_equal(&ka, &kc, sizeof(ka));
	/* a key is neither the client's hash nor an unkeyed hash of it */
	assert_memory_not_equal(&ka, &h, sizeof(ka));

	again->conf.tenants = tc;
	again->conf.nr_tenants = 1;
	kvd_tenants_apply(again);
	kb = kvd_key_hash(&again->tenants[0].key, &h);
	assert_memory_equal(&ka, &kb, sizeof(ka));

	/* kvd_tenants_exit leaves no key bytes behind */
	kvd_tenants_exit(d);
	for (unsigned i = 0; i < sizeof(d->tenants[0].key.b); i++)
		assert_int_equal(d->tenants[0].key.b[i], 0);
	for (unsigned i = 0; i < sizeof(d->secret); i++)
		assert_int_equal(d->secret[i], 0);
	free(d);
	free(again);
}

/*
 * Per-uid tenant slots are reused: with all 256 taken, a new uid gets
 * the one idle longest, never one with a client, a page or a live
 * namespace, nor a kvd.conf tenant's. Nothing keyed by the slot's index
 * passes on: the new uid's key, no kept counters of the old uid, and its
 * free extents marked no tenant's (fresh memory at the next claim).
 */
static void test_tenant_uid_slot_reuse(void **state)
{
	struct kvd *d = kvd_new(0x11), *ref = kvd_new(0x11);
	int32_t ext_last[2], ext_owner[2] = { KVD_EXT_FREE, KVD_EXT_FREE };
	const char *why = NULL;
	int busy, client, paged, conf, idle, next, r;

	(void)state;
	d->ns = calloc(2, sizeof(*d->ns));
	assert_non_null(d->ns);
	d->cfg.max_namespaces = 2;
	d->pool.ns = d->ns;
	d->pool.nr_ns = 2;
	d->pool.nr_extents = 2;
	d->pool.ext_last = ext_last;
	d->pool.ext_owner = ext_owner;
	for (uint32_t i = 0; i < KVD_MAX_TENANTS; i++)
		assert_int_equal(uid_tenant(d, 1000 + i), i);
	for (uint32_t i = 0; i < KVD_MAX_TENANTS; i++)
		d->tenants[i].hello_ns = i + 1;	/* 1000 the oldest */
	busy = 0;
	client = 1;
	paged = 2;
	conf = 3;
	idle = 4;
	next = 5;
	d->ns[0].live = true;
	d->ns[0].tenant = busy;
	d->tenants[client].nr_clients = 1;
	d->tenants[paged].acct.pages = 1;
	d->tenants[conf].configured = true;
	d->tenants[conf].in_conf = true;
	d->ns[1].kept.used = true;
	d->ns[1].kept.tenant = idle;
	d->ns[0].kept.used = true;
	d->ns[0].kept.tenant = busy;
	ext_last[0] = idle;
	ext_last[1] = busy;

	assert_int_equal(uid_tenant(d, 2000), idle);
	assert_string_equal(d->tenants[idle].name, "uid:2000");
	assert_int_equal(d->tenants[idle].uid, 2000);
	assert_memory_equal(&d->tenants[idle].key,
			    &ref->tenants[uid_tenant(ref, 2000)].key,
			    sizeof(d->tenants[idle].key));
	assert_false(d->ns[1].kept.used);
	assert_true(d->ns[0].kept.used);
	assert_int_equal(ext_last[0], KVD_EXT_GONE);
	assert_int_equal(ext_last[1], busy);
	/* the old uid comes back: a slot of its own again, its own key */
	assert_int_equal(uid_tenant(d, 1000 + idle), next);
	assert_memory_equal(&d->tenants[next].key,
			    &ref->tenants[uid_tenant(ref, 1000 + idle)].key,
			    sizeof(d->tenants[next].key));

	/* nothing idle: refused */
	for (uint32_t i = 0; i < KVD_MAX_TENANTS; i++)
		d->tenants[i].nr_clients++;
	d->tenants[client].nr_clients = 1;
	d->tenants[paged].nr_clients = 0;
	d->tenants[busy].nr_clients = 0;
	d->tenants[conf].nr_clients = 0;
	r = kvd_tenant_of(d, 5000, 5000, NULL, 0, &why);
	assert_int_equal(r, -ENOSPC);
	assert_string_equal(why, "no tenant slot left");
	free(d->ns);
	kvd_tenants_exit(d);
	kvd_tenants_exit(ref);
	free(d);
	free(ref);
}

/*
 * Tenants a reload removed from kvd.conf give their slots up once idle:
 * 300 reloads, each naming one new tenant, all get a slot; a removed
 * tenant that still has a client keeps its slot.
 */
static void test_tenant_conf_removed_slot_reuse(void **state)
{
	struct kvd *d = kvd_new(0);
	struct kvd_tenant_conf tc;
	char name[16];
	bool found;

	(void)state;
	d->conf.tenants = &tc;
	d->conf.nr_tenants = 1;
	conf_tenant(&tc, "kept", 0x44, KVD_CONF_SECRET_MIN);
	kvd_tenants_apply(d);
	assert_true(d->tenants[0].live);
	d->tenants[0].nr_clients = 1;
	for (unsigned n = 0; n < 300; n++) {
		snprintf(name, sizeof(name), "t%u", n);
		conf_tenant(&tc, name, 0x44, KVD_CONF_SECRET_MIN);
		kvd_tenants_apply(d);
		found = false;
		for (uint32_t i = 0; i < KVD_MAX_TENANTS; i++)
			found |= d->tenants[i].live && d->tenants[i].in_conf &&
				 !strcmp(d->tenants[i].name, name);
		assert_true(found);
	}
	assert_string_equal(d->tenants[0].name, "kept");
	assert_false(d->tenants[0].in_conf);
	kvd_tenants_exit(d);
	free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tenant_uid_key_whole_secret),
		cmocka_unit_test(test_tenant_conf_key_whole_secret),
		cmocka_unit_test(test_tenant_uid_slot_reuse),
		cmocka_unit_test(test_tenant_conf_removed_slot_reuse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
