/* SPDX-License-Identifier: MIT */
/*
 * kvd's configuration: one table of keys (kvd/config.c), fed from two
 * front-ends. kvd.conf (kvd/conf_parse.c, format in kvd.conf(5)) fills a
 * struct kvd_conf; the command line (kvd/options.c) fills a struct
 * kvd_config, the values the daemon runs with, and kvd_config_merge()
 * completes it from the file, the environment and the table's defaults.
 * `--pool-size 8G` and `pool_size = 8G` go through the same setter, with
 * the same grammar, range and message.
 *
 * kvd_conf_load() reads the whole file into a struct kvd_conf, or fails
 * with one "PATH:LINE: why" message and leaves nothing allocated. It has
 * no global state and touches nothing but the struct it fills, so a
 * reload parses into a second struct and swaps it in only on success.
 * The parser never applies defaults: each global value comes with a
 * has_<name> flag.
 */
#ifndef KVD_CONFIG_H
#define KVD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <kv/abi.h>

#define KVD_CONF_PATH		"/etc/kvd/kvd.conf"
#define KVD_CONF_LINE_MAX	1024	/* bytes, newline excluded */
#define KVD_CONF_NAME_MAX	32	/* tenant name, NUL included */
#define KVD_CONF_MODEL_MAX	64	/* model id, NUL included (KV_MODEL_ID_MAX) */
#define KVD_CONF_PATH_MAX	108	/* socket path, NUL included (sun_path) */
#define KVD_LISTEN_MAX		64	/* ADDR:PORT or [ADDR]:PORT, NUL included */
#define KVD_ENDPOINT_MAX	128	/* a ZMQ endpoint, NUL included */
#define KVD_CONF_SECRET_MIN	16	/* bytes */
#define KVD_CONF_SECRET_MAX	64	/* bytes */
#define KVD_CONF_TENANTS_MAX	256	/* [tenant] sections (KVD_MAX_TENANTS) */
#define KVD_CONF_USER_MAX	256	/* user name, NUL included (LOGIN_NAME_MAX) */
#define KVD_CONF_CONTEXT_MAX	0x7fffffffU	/* max_context, tokens (2^31 - 1) */

#define KVD_BACKEND_AUTO	(-1)	/* backend: cuda if a device, else host */

/* user = USER[:GROUP], --user USER[:GROUP], resolved when parsed. */
struct kvd_user {
	uint32_t	uid;
	uint32_t	gid;		/* GROUP, else the user's primary group */
	bool		group;		/* GROUP given: that group alone; else
					 * the user's groups (initgroups) */
	char		name[KVD_CONF_USER_MAX];	/* "" for UID:GID */
};

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

/*
 * A [namespace TENANT/MODEL] section: one model's quota in a tenant, and
 * the context settings kvd sends its clients in WELCOME (kv_seq applies
 * them). Zeroed, as for a namespace without a section: no limit, every
 * policy supported, none by default.
 */
struct kvd_quota_conf {
	char		tenant[KVD_CONF_NAME_MAX];
	char		model_id[KVD_CONF_MODEL_MAX];
	uint32_t	min_pages;	/* 0: none */
	uint32_t	max_pages;	/* 0: unlimited */
	uint32_t	max_context;	/* tokens a sequence holds, 0: any */
	uint32_t	ctx_refused;	/* 1 << kind of each kv_ctx_kind not
					 * in context_policies; never
					 * KV_CTX_NONE's */
	struct kv_ctx_policy ctx_default;	/* context_policy, checked
						 * against max_context */
	unsigned	line;		/* of the section header */
};

/*
 * The whole file. Each global value has a has_<name> flag saying whether
 * the file set it; an unset value is zero.
 */
struct kvd_conf {
	uint64_t	pool_bytes;	/* >= 2 MiB, not rounded */
	bool		has_pool_bytes;
	uint64_t	host_tier_bytes;	/* 0: no host tier */
	bool		has_host_tier_bytes;
	uint64_t	disk_tier_bytes;	/* 0: no disk tier */
	bool		has_disk_tier_bytes;
	char		disk_tier_path[KVD_CONF_PATH_MAX];
	bool		has_disk_tier_path;
	bool		disk_tier_persist;
	bool		has_disk_tier_persist;
	int		backend;	/* KV_BACKEND_HOST, _CUDA, KVD_BACKEND_AUTO */
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
	struct kvd_user	user;		/* drop privileges to it */
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
	bool		overcommit;	/* a host pool beyond RAM + swap */
	bool		has_overcommit;
	char		metrics_listen[KVD_LISTEN_MAX];	/* ADDR:PORT */
	bool		has_metrics_listen;
	char		kv_events[KVD_ENDPOINT_MAX];	/* a ZMQ endpoint */
	bool		has_kv_events;

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

/*
 * The keys of the table, in its order (which --help follows). Each value
 * key has a field in struct kvd_config; those of kvd.conf one in struct
 * kvd_conf too, of the same name and size.
 */
enum kvd_key {
	KVD_KEY_BACKEND,
	KVD_KEY_DEVICE,
	KVD_KEY_EXPORT,
	KVD_KEY_POOL_SIZE,
	KVD_KEY_HOST_TIER_SIZE,
	KVD_KEY_DISK_TIER_SIZE,
	KVD_KEY_DISK_TIER_PATH,
	KVD_KEY_DISK_TIER_PERSIST,
	KVD_KEY_SOCKET,
	KVD_KEY_SOCKET_MODE,		/* kvd.conf only */
	KVD_KEY_ADMIN_SOCKET,
	KVD_KEY_ADMIN_SOCKET_MODE,	/* kvd.conf only */
	KVD_KEY_ADMIN_GROUP,		/* kvd.conf only */
	KVD_KEY_CONFIG,			/* command line only */
	KVD_KEY_USER,
	KVD_KEY_MAX_CLIENTS,
	KVD_KEY_MAX_NAMESPACES,
	KVD_KEY_MAX_RING_ENTRIES,
	KVD_KEY_MAX_CLIENT_BLOCKS,
	KVD_KEY_POLL_US,
	KVD_KEY_HUGEPAGES,
	KVD_KEY_OVERCOMMIT,
	KVD_KEY_METRICS_LISTEN,
	KVD_KEY_KV_EVENTS,
	KVD_KEY_EXTENT_SIZE,		/* command line only */
	KVD_KEY_EVENT_LOOP,		/* command line or $KVD_EVENT_LOOP */
	KVD_KEY_VERBOSE,		/* command line only, and below */
	KVD_KEY_QUIET,
	KVD_KEY_VERSION,
	KVD_KEY_HELP,
	KVD_NR_KEYS
};

/* What the daemon runs with: the command line, over kvd.conf, over defaults. */
struct kvd_config {
	uint64_t	argv_set;	/* bit 1 << KVD_KEY_*: given on the command line */
	uint64_t	set;		/* given on the command line, in kvd.conf
					 * or in the environment */
	int		backend;	/* KV_BACKEND_*, KVD_BACKEND_AUTO */
	int		device;		/* cuda device ordinal, 0..255 */
	int		export_kind;	/* cuda: KV_EXPORT_VMM or _LEGACY, 0: vmm */
	uint64_t	pool_bytes;	/* >= 2 MiB, not rounded */
	uint64_t	host_tier_bytes;	/* 0: no host tier */
	uint64_t	disk_tier_bytes;	/* 0: no disk tier */
	char		disk_tier_path[KVD_CONF_PATH_MAX];	/* the file */
	bool		disk_tier_persist;	/* its blocks kept across runs */
	char		socket[KVD_CONF_PATH_MAX];	/* "": the default */
	unsigned	socket_mode;
	char		admin_socket[KVD_CONF_PATH_MAX];	/* "": beside it */
	unsigned	admin_socket_mode;
	uint32_t	admin_gid;	/* with KVD_KEY_ADMIN_GROUP set */
	const char	*conf_path;	/* --config; NULL: KVD_CONF_PATH if it exists */
	struct kvd_user	user;		/* with KVD_KEY_USER set */
	uint32_t	max_clients;
	uint32_t	max_namespaces;
	uint32_t	max_ring_entries;	/* SQ entries a HELLO may ask */
	uint32_t	max_client_blocks;	/* refs per client, 0: no limit */
	uint32_t	poll_us;	/* poll busy rings this long before sleeping */
	bool		hugepages;
	bool		overcommit;	/* start a host pool beyond RAM + swap */
	char		metrics_listen[KVD_LISTEN_MAX];	/* "": no HTTP */
	char		kv_events[KVD_ENDPOINT_MAX];	/* "": no KV events */
	uint64_t	extent_bytes;	/* 0: pool / 32, within 2 MiB..1 GiB */
	int		event_loop;	/* KVD_LOOP_* */
	bool		verbose, quiet;
	/* not keys: set by the daemon */
	uint32_t	sq_budget;	/* work per client per pass (ring.c) */
	uint32_t	hello_timeout_ms;
};

static inline bool kvd_config_has(const struct kvd_config *cfg,
				  enum kvd_key key)
{
	return cfg->set >> key & 1;
}

/**
 * kvd_config_argv - the command line through the key table
 * @cfg:	zeroed by the caller; gets each option given, and its bit in
 *		argv_set (the later of two equal options wins)
 * @err:	on failure, one line without "kvd: " or a newline, naming the
 *		option and the problem ("--pool-size: '1M' is less than ...")
 *
 * Return: 0; 1 when --help or --version was answered on stdout (exit 0);
 * -EINVAL for an unknown option, a missing or bad value or an extra
 * argument. Uses getopt_long (reset first): not thread-safe.
 */
int kvd_config_argv(struct kvd_config *cfg, int argc, char **argv,
		    char *err, size_t errlen);

/**
 * kvd_config_merge - complete @cfg: each key not given on the command
 * line takes @file's value (@file may be NULL), else its environment
 * variable's, else its default. Sets the bits of cfg->set.
 *
 * Return: 0, or -EINVAL with @err set for a bad environment value.
 */
int kvd_config_merge(struct kvd_config *cfg, const struct kvd_conf *file,
		     char *err, size_t errlen);

/* kvd --help, from the table. */
void kvd_config_usage(FILE *f);

struct sockaddr_storage;

/*
 * kvd_parse_listen - ADDR:PORT (IPv4) or [ADDR]:PORT (IPv6), numeric,
 * port 1..65535, into @ss. Return: 0, or -EINVAL.
 */
int kvd_parse_listen(const char *s, struct sockaddr_storage *ss);

#endif /* KVD_CONFIG_H */
