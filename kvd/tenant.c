// SPDX-License-Identifier: MIT
/*
 * Tenants: who may connect, whose blocks may hit whose, and whose pages
 * count against which quota.
 *
 * With tenants in kvd.conf, a peer's tenant comes from its credentials
 * (SO_PEERCRED uid and gid, SO_PEERGROUPS), never from what it claims,
 * and a peer in no tenant is refused. The tenant's secret comes from the
 * file, so its cache keys are stable across restarts. Without tenants,
 * every uid is a tenant of its own, keyed by kvd's 32-byte secret drawn
 * at start and the uid; its slot is reused for another uid once it is
 * idle (no client, no page, no live namespace: tenant_idle), and nothing
 * keyed by the slot's index passes on (tenant_forget). Either way the
 * whole secret goes into the key (kvd_key_derive), which lives in the
 * tenant and its namespaces only and is zeroed when dropped.
 */
#include <errno.h>
#include <string.h>
#include <stdio.h>
#define XXH_STATIC_LINKING_ONLY	/* XXH3_generateSecret */
#include <xxhash.h>

#include "daemon.h"
#include "tenant.h"

/*
 * The tenant idle longest (by its last HELLO): no client, no page, no
 * live namespace. A live namespace keeps its tenant, whatever it holds:
 * cached blocks hit only under that tenant's key and index. Per-uid
 * tenants, and those a reload removed from kvd.conf; never one still in
 * the file.
 */
static struct kvd_tenant *tenant_idle(struct kvd *d)
{
	bool busy[KVD_MAX_TENANTS] = { false };
	struct kvd_tenant *old = NULL;

	for (uint32_t i = 0; d->ns && i < d->cfg.max_namespaces; i++)
		if (d->ns[i].live && d->ns[i].tenant < KVD_MAX_TENANTS)
			busy[d->ns[i].tenant] = true;
	for (uint32_t i = 0; i < KVD_MAX_TENANTS; i++) {
		struct kvd_tenant *t = &d->tenants[i];

		if (!t->live || (t->configured && t->in_conf) || busy[i] ||
		    t->nr_clients || t->acct.pages)
			continue;
		if (!old || t->hello_ns < old->hello_ns)
			old = t;
	}
	return old;
}

/*
 * Forget idle tenant @t before its slot goes to another: nothing keyed
 * by its index may pass to the next. Its kept prefix-cache counters go;
 * free extents still holding its bytes are marked no tenant's, so that
 * the next to claim one gets fresh memory (kvd_extent_claim) and no
 * client is sent it as its own (ext_news).
 */
static void tenant_forget(struct kvd *d, struct kvd_tenant *t)
{
	struct kvd_pool *pool = &d->pool;

	kvd_info("tenant %u (%s): idle, slot reused", t->id, t->name);
	kvd_ns_kept_drop(pool, t->id);
	for (uint32_t e = 0; pool->ext_last && e < pool->nr_extents; e++)
		if (pool->ext_last[e] == (int32_t)t->id)
			pool->ext_last[e] = KVD_EXT_GONE;
	explicit_bzero(t, sizeof(*t));
}

/* A slot for a new tenant: a free one, else the longest idle one's. */
static struct kvd_tenant *tenant_slot(struct kvd *d)
{
	struct kvd_tenant *t = NULL;

	for (uint32_t i = 0; i < KVD_MAX_TENANTS && !t; i++)
		if (!d->tenants[i].live)
			t = &d->tenants[i];
	if (!t) {
		t = tenant_idle(d);
		if (t)
			tenant_forget(d, t);
	}
	if (t) {
		memset(t, 0, sizeof(*t));
		t->live = true;
		t->id = (uint32_t)(t - d->tenants);
	}
	return t;
}

static struct kvd_tenant *tenant_named(struct kvd *d, const char *name)
{
	for (uint32_t i = 0; i < KVD_MAX_TENANTS; i++)
		if (d->tenants[i].live && d->tenants[i].configured &&
		    !strcmp(d->tenants[i].name, name))
			return &d->tenants[i];
	return NULL;
}

/*
 * kvd_key_derive - the index key @k of a tenant from the @len bytes of
 * its @secret: XXH3_generateSecret (libxxhash >= 0.8.1), which spreads
 * every byte of @secret over all KVD_TENANT_KEY_BYTES of the key, the
 * key of XXH3_128bits_withSecret (kvd/prefix.c). It fails only for a key
 * shorter than XXH3_SECRET_SIZE_MIN, which prefix.c rules out at build.
 */
void kvd_key_derive(struct kvd_tenant_key *k, const void *secret,
		    size_t len)
{
	(void)XXH3_generateSecret(k->b, sizeof(k->b), secret, len);
}

/* The key of the per-uid tenant of @uid: kvd's whole secret and @uid. */
static void uid_key(struct kvd *d, struct kvd_tenant *t, uint32_t uid)
{
	uint8_t in[KVD_SECRET_BYTES + sizeof(uid)];

	memcpy(in, d->secret, KVD_SECRET_BYTES);
	memcpy(in + KVD_SECRET_BYTES, &uid, sizeof(uid));
	kvd_key_derive(&t->key, in, sizeof(in));
	explicit_bzero(in, sizeof(in));
}

static void tenant_set(struct kvd_tenant *t, const struct kvd_tenant_conf *tc)
{
	t->configured = true;
	snprintf(t->name, sizeof(t->name), "%s", tc->name);
	kvd_key_derive(&t->key, tc->secret, tc->secret_len);
	t->acct.min_pages = tc->min_pages;
	t->acct.max_pages = tc->max_pages;
}

/*
 * Apply the tenants of d->conf: update those kept (quota now, secret for
 * namespaces created from now on), add new ones; tenants that left the
 * file keep their clients but admit no new one, and give their slot up
 * once idle (tenant_idle).
 */
void kvd_tenants_apply(struct kvd *d)
{
	for (uint32_t i = 0; i < KVD_MAX_TENANTS; i++)
		if (d->tenants[i].configured)
			d->tenants[i].in_conf = false;
	for (uint32_t i = 0; i < d->conf.nr_tenants; i++) {
		const struct kvd_tenant_conf *tc = &d->conf.tenants[i];
		struct kvd_tenant *t = tenant_named(d, tc->name);

		if (!t) {
			t = tenant_slot(d);
			if (!t) {
				kvd_warn("tenant %s: no tenant slot left", tc->name);
				continue;
			}
		}
		tenant_set(t, tc);
		t->in_conf = true;
	}
	for (uint32_t i = 0; i < d->cfg.max_namespaces; i++) {
		struct kvd_ns *ns = &d->ns[i];
		const struct kvd_quota_conf *q;

		if (!ns->live)
			continue;
		q = kvd_conf_quota(&d->conf, d->tenants[ns->tenant].name,
				   ns->model_id);
		ns->acct.min_pages = q ? q->min_pages : 0;
		ns->acct.max_pages = q ? q->max_pages : 0;
	}
	/* Quotas may have grown: parked KV_SQE_WAIT allocations retry, as
	 * they do after a free (ring.c retry_waiting). */
	d->pool.frees++;
}

/*
 * kvd_tenant_of - the tenant of a peer with @uid, @gid and @groups.
 * Returns its index, or -EACCES with *why set when tenants are configured
 * and none lists the peer, or -ENOSPC when every tenant slot is taken by
 * a tenant of kvd.conf or one still in use (tenant_idle).
 */
int kvd_tenant_of(struct kvd *d, uint32_t uid, uint32_t gid,
		  const uint32_t *groups, uint32_t nr_groups, const char **why)
{
	const struct kvd_tenant_conf *tc;
	struct kvd_tenant *t;

	if (d->conf.nr_tenants) {
		tc = kvd_conf_tenant_of(&d->conf, uid, gid, groups, nr_groups);
		t = tc ? tenant_named(d, tc->name) : NULL;
		if (!t || !t->in_conf) {
			*why = "this uid/gid is in no tenant of kvd.conf";
			return -EACCES;
		}
		return (int)t->id;
	}
	for (uint32_t i = 0; i < KVD_MAX_TENANTS; i++) {
		t = &d->tenants[i];
		if (t->live && !t->configured && t->uid == uid) {
			t->hello_ns = kvd_now_ns();
			return (int)i;
		}
	}
	t = tenant_slot(d);
	if (!t) {
		*why = "no tenant slot left";
		return -ENOSPC;
	}
	t->hello_ns = kvd_now_ns();
	t->uid = uid;
	snprintf(t->name, sizeof(t->name), "uid:%u", uid);
	uid_key(d, t, uid);
	return (int)t->id;
}

/* At exit: no key outlives kvd in its memory. */
void kvd_tenants_exit(struct kvd *d)
{
	explicit_bzero(d->tenants, sizeof(d->tenants));
	explicit_bzero(d->secret, sizeof(d->secret));
}

/*
 * kvd_reload - read kvd.conf again and apply tenants and quotas, without
 * dropping clients. On error nothing changes; @msg says why.
 */
int kvd_reload(struct kvd *d, char *msg, size_t len)
{
	struct kvd_conf fresh;
	int ret;

	if (!d->conf_path) {
		snprintf(msg, len, "kvd started without a configuration file");
		return -ENOENT;
	}
	ret = kvd_conf_load(d->conf_path, &fresh, msg, len);
	if (ret) {
		if (!msg[0])
			snprintf(msg, len, "%s: %s", d->conf_path, strerror(-ret));
		kvd_err("reload: %s", msg);
		return ret;
	}
	kvd_conf_free(&d->conf);
	d->conf = fresh;
	kvd_tenants_apply(d);
	snprintf(msg, len, "%s: %u tenants, %u namespace quotas", d->conf_path,
		 d->conf.nr_tenants, d->conf.nr_quotas);
	kvd_info("reloaded %s", msg);
	return 0;
}
