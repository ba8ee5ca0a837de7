/* SPDX-License-Identifier: MIT */
/*
 * Tenants: who may connect (kvd.conf [tenant] sections, or one tenant per
 * uid), the keys mixed into their cache keys, and their page accounts.
 */
#ifndef KVD_TENANT_H
#define KVD_TENANT_H

#include "config.h"
#include "ns.h"

#define KVD_MAX_TENANTS	256
#define KVD_SECRET_BYTES	32	/* kvd's random secret, per-uid keys */

struct kvd_tenant {
	bool		live;
	bool		configured;	/* from kvd.conf; else one per uid */
	bool		in_conf;	/* still in the file (admits clients) */
	uint32_t	id;		/* index in d->tenants */
	uint32_t	uid;		/* the uid of a per-uid tenant */
	char		name[KVD_CONF_NAME_MAX];
	struct kvd_tenant_key key;	/* mixed into its cache keys */
	struct kvd_acct	acct;		/* pages of all its namespaces */
	uint32_t	nr_clients;
	uint64_t	hello_ns;	/* a per-uid tenant's last HELLO */
};

struct kvd;

/* tenant.c */
void kvd_key_derive(struct kvd_tenant_key *k, const void *secret,
		    size_t len);
void kvd_tenants_apply(struct kvd *d);
void kvd_tenants_exit(struct kvd *d);
int kvd_tenant_of(struct kvd *d, uint32_t uid, uint32_t gid,
		  const uint32_t *groups, uint32_t nr_groups, const char **why);

#endif /* KVD_TENANT_H */
