/* SPDX-License-Identifier: MIT */
/*
 * kvd.conf: the daemon's configuration file (format in kvd.conf(5)).
 *
 * kvd_conf_load() reads the whole file into a struct kvd_conf, or fails
 * with one "PATH:LINE: why" message and leaves nothing allocated. It has
 * no global state and touches nothing but the struct it fills, so a
 * reload parses into a second struct and swaps it in only on success.
 * The parser never applies defaults: each global value comes with a
 * has_<name> flag, and the caller (main.c) decides what an unset value
 * means and how command-line options override the file.
 */
#ifndef KVD_CONFIG_H
#define KVD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVD_CONF_PATH		"/etc/kvd/kvd.conf"
#define KVD_CONF_LINE_MAX	1024	/* bytes, newline excluded */
#define KVD_CONF_NAME_MAX	32	/* tenant name, NUL included */
#define KVD_CONF_MODEL_MAX	64	/* model id, NUL included (KV_MODEL_ID_MAX) */
#define KVD_CONF_PATH_MAX	108	/* socket path, NUL included (sun_path) */
#define KVD_CONF_SECRET_MIN	16	/* bytes */
#define KVD_CONF_SECRET_MAX	64	/* bytes */
#define KVD_CONF_TENANTS_MAX	256	/* [tenant] sections (KVD_MAX_TENANTS) */

/* A [tenant NAME] section. */
struct kvd_tenant_conf {
	char		name[KVD_CONF_NAME_MAX];
	uint32_t	*uids;		/* nr_uids entries, resolved */
	uint32_t	nr_uids;
	uint32_t	*gids;		/* nr_gids entries, resolved */
	uint32_t	nr_gids;
	uint8_t		secret[KVD_CONF_SECRET_MAX];	/* salt for cache keys */
	uint32_t	secret_len;	/* 16..64 */
	uint32_t	min_pages;	/* 2 MiB pages reserved; 0: none */
	uint32_t	max_pages;	/* 2 MiB pages at most; 0: unlimited */
	unsigned	line;		/* of the section header */
};

/* A [namespace TENANT/MODEL] section: one model's quota in a tenant. */
struct kvd_quota_conf {
	char		tenant[KVD_CONF_NAME_MAX];
	char		model_id[KVD_CONF_MODEL_MAX];
	uint32_t	min_pages;	/* 0: none */
	uint32_t	max_pages;	/* 0: unlimited */
	unsigned	line;		/* of the section header */
};

/*
 * The whole file. Each global value has a has_<name> flag saying whether
 * the file set it; an unset value is zero.
 */
struct kvd_conf {
	uint64_t	pool_bytes;	/* >= 2 MiB, not rounded */
	bool		has_pool_bytes;
	int		backend;	/* KV_BACKEND_HOST, KV_BACKEND_CUDA, 0: auto */
	bool		has_backend;
	uint32_t	device;		/* cuda device ordinal, 0..255 */
	bool		has_device;
	int		export_kind;	/* KV_EXPORT_VMM or KV_EXPORT_LEGACY */
	bool		has_export_kind;
	char		socket[KVD_CONF_PATH_MAX];	/* absolute path */
	bool		has_socket;
	unsigned	socket_mode;	/* 0..0777 */
	bool		has_socket_mode;
	char		admin_socket[KVD_CONF_PATH_MAX];	/* absolute path */
	bool		has_admin_socket;
	unsigned	admin_socket_mode;	/* 0..0770, nothing for others */
	bool		has_admin_socket_mode;
	uint32_t	admin_gid;
	bool		has_admin_group;
	uint32_t	user_uid;	/* drop privileges to these */
	uint32_t	user_gid;	/* the user's primary group */
	bool		has_user;
	uint32_t	max_clients;	/* 1..1024 */
	bool		has_max_clients;
	uint32_t	max_namespaces;	/* 1..1024 */
	bool		has_max_namespaces;
	uint32_t	max_ring_entries;	/* SQ entries a client may ask, 1..4096 */
	bool		has_max_ring_entries;
	uint32_t	max_client_blocks;	/* refs one client may hold */
	bool		has_max_client_blocks;
	uint32_t	poll_us;	/* poll rings before sleeping, 0..100000 */
	bool		has_poll_us;
	bool		hugepages;
	bool		has_hugepages;

	struct kvd_tenant_conf	*tenants;	/* in file order */
	uint32_t		nr_tenants;
	struct kvd_quota_conf	*quotas;	/* in file order */
	uint32_t		nr_quotas;
};

/**
 * kvd_conf_load - read and check a kvd.conf file
 * @path:	the file (KVD_CONF_PATH by default)
 * @conf:	filled on success; zeroed first, so it must not hold a
 *		loaded configuration (that would leak)
 * @err:	on failure, one NUL-terminated line without a newline:
 *		"PATH:LINE: why", or "PATH: why" when no line is to blame
 *		(may be NULL when @errlen is 0); "" on success
 * @errlen:	size of @err; the message is truncated to fit
 *
 * User and group names are resolved here (getpwnam_r, getgrnam_r), so
 * the result depends on the user database at the time of the call.
 *
 * Return: 0 on success (release with kvd_conf_free()); -ENOENT when
 * @path does not exist (kvd then runs without a file); -EINVAL when the
 * file is malformed, fails a check, or names a user or group that the
 * user database does not know or cannot look up; -ENOMEM; or the -errno
 * of opening or reading the file (-EACCES, -EISDIR, -EIO, ...). @err
 * says why in every case. On failure @conf is left zeroed and holds
 * nothing. Sets no global state; safe to call from any thread.
 */
int kvd_conf_load(const char *path, struct kvd_conf *conf, char *err,
		  size_t errlen);

/* Frees what kvd_conf_load() allocated and zeroes @conf. NULL-safe. */
void kvd_conf_free(struct kvd_conf *conf);

/*
 * The tenant a peer belongs to, from its credentials (SO_PEERCRED and,
 * where known, its supplementary groups): the tenant that lists @uid,
 * else the one that lists @gid, else the first tenant in file order
 * that lists any of @groups (@nr_groups entries; may be NULL when 0).
 * Returns NULL when none does.
 */
const struct kvd_tenant_conf *kvd_conf_tenant_of(const struct kvd_conf *conf,
						 uint32_t uid, uint32_t gid,
						 const uint32_t *groups,
						 uint32_t nr_groups);

/* The [namespace TENANT/MODEL] section of @tenant and @model_id, or NULL. */
const struct kvd_quota_conf *kvd_conf_quota(const struct kvd_conf *conf,
					    const char *tenant,
					    const char *model_id);

#endif /* KVD_CONFIG_H */
