// SPDX-License-Identifier: MIT
/*
 * The keys of tenants (kvd/tenant.c) and of their index (kvd/prefix.c):
 * every byte of a tenant's secret, and of kvd's random secret for the
 * tenant of a uid, changes the key and so the index key of a block hash;
 * the same secret gives the same key (stable across restarts).
 */
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tenant_uid_key_whole_secret),
		cmocka_unit_test(test_tenant_conf_key_whole_secret),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
