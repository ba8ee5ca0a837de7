// SPDX-License-Identifier: MIT
/*
 * The configuration's one key table and its setters: every key of kvd,
 * whether kvd.conf sets it, the command line, or both, with its long and
 * short option, its grammar (size with units, number in a range, enum,
 * boolean, path, mode, user[:group], group), its range, its default and
 * its --help text. A new key is one entry here (and a field in struct
 * kvd_config, and struct kvd_conf when the file sets it), like Redis's
 * config table, whose command-line options go through the same setters
 * as its file: `--pool-size 8G` is `pool_size = 8G`.
 *
 * Setters write to the destination their front-end gives (conf_parse.c:
 * struct kvd_conf; options.c: struct kvd_config) and report "NAME: why"
 * under the name the user wrote (a key, an --option, a variable).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "conf_key.h"
#include "loop.h"

_Static_assert(KVD_CONF_MODEL_MAX == KV_MODEL_ID_MAX,
	       "a namespace's model id is the wire's");
_Static_assert(KVD_CONF_PATH_MAX == sizeof(((struct sockaddr_un *)0)->sun_path),
	       "a socket path fits sun_path");
_Static_assert(KVD_NR_KEYS <= 64, "cfg->set is a u64");

#define MAX_LIMIT	KV_ADMIN_MAX_RECORDS	/* max_clients, max_namespaces */
#define LOOKUP_BUF_MAX	(1U << 20)	/* getpwnam_r buffer, at most */
#define SIZE_MAX_BYTES	((uint64_t)UINT32_MAX * KV_PAGE_BYTES)

int conf_err(struct conf_ctx *c, const char *fmt, ...)
{
	va_list ap;
	int n = 0;

	if (!c->errlen)
		return -EINVAL;
	if (c->path)
		n = snprintf(c->err, c->errlen, "%s:%u: ", c->path, c->line);
	if (n >= 0 && (size_t)n < c->errlen) {
		va_start(ap, fmt);
		vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

int conf_err_nomem(struct conf_ctx *c)
{
	conf_err(c, "out of memory");
	return -ENOMEM;
}

bool conf_is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* Decimal, no sign, no suffix; -1 if not that or above @max. */
int conf_parse_dec(const char *s, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (!*s)
		return -1;
	for (; *s; s++) {
		if (!conf_is_digit(*s))
			return -1;
		if (v > (max - (uint64_t)(*s - '0')) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*out = v;
	return 0;
}

/* A numeric uid or gid: -1 is the kernel's "no id", never a real one. */
int conf_parse_id(const char *s, uint32_t *id)
{
	uint64_t v;

	if (conf_parse_dec(s, UINT32_MAX - 1, &v))
		return -1;
	*id = (uint32_t)v;
	return 0;
}

const char *conf_next_token(const char *s, size_t *len)
{
	while (*s == ' ' || *s == '\t' || *s == ',')
		s++;
	*len = strcspn(s, " \t,");
	return *len ? s : NULL;
}

bool conf_all_digits(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!conf_is_digit(*s))
			return false;
	return true;
}

/*
 * The user database, without global state: getpwnam_r, getpwuid_r or
 * getgrnam_r with a buffer on the stack, grown on the heap for huge
 * group entries and freed before return. Returns 0 with *id (and, for a
 * user, *gid: the primary group, and @pw_name when not NULL) set, 1 when
 * there is no such entry, or -errno when the database cannot answer.
 */
int conf_lookup(enum conf_lookup how, const char *name, uint32_t uid,
		uint32_t *id, uint32_t *gid, char *pw_name, size_t namelen)
{
	char stack[4096], *buf = stack, *big = NULL;
	size_t len = sizeof(stack);
	struct passwd pw, *pwp = NULL;
	struct group gr, *grp = NULL;
	int e;

	for (;;) {
		if (how == BY_GROUP_NAME)
			e = getgrnam_r(name, &gr, buf, len, &grp);
		else if (how == BY_UID)
			e = getpwuid_r(uid, &pw, buf, len, &pwp);
		else
			e = getpwnam_r(name, &pw, buf, len, &pwp);
		if (e != ERANGE || len >= LOOKUP_BUF_MAX)
			break;
		len *= 2;
		free(big);
		big = malloc(len);
		if (!big)
			return -ENOMEM;
		buf = big;
	}
	if (!e && grp) {
		*id = (uint32_t)grp->gr_gid;
	} else if (!e && pwp) {
		*id = (uint32_t)pwp->pw_uid;
		*gid = (uint32_t)pwp->pw_gid;
		if (pw_name && strlen(pwp->pw_name) >= namelen)
			e = ENAMETOOLONG;
		else if (pw_name)
			strcpy(pw_name, pwp->pw_name);
	}
	free(big);
	if (!e)
		return grp || pwp ? 0 : 1;
	/* getpwnam(3): these also mean "not found" with some NSS modules. */
	if (e == ENOENT || e == ESRCH || e == EBADF || e == EPERM)
		return 1;
	return -e;
}

/* Reports a failed look-up of @name. */
int conf_err_lookup(struct conf_ctx *c, const char *what, const char *name,
		    int ret)
{
	char eb[64];

	if (ret == -ENOMEM)
		return conf_err_nomem(c);
	if (ret > 0)
		return conf_err(c, "%s: unknown %s '%s'", c->name, what, name);
	return conf_err(c, "%s: cannot look up %s '%s': %s", c->name, what,
			name, strerror_r(-ret, eb, sizeof(eb)));
}

/* ---- setters: one per kind of value ---------------------------------- */

/*
 * "64M" -> bytes: digits, then K, M, G or T (optionally with i and B),
 * from @k->min to @k->max; a multiple of 2 MiB when @k->what says so.
 */
static int set_size(struct conf_ctx *c, const struct conf_key *k,
		    const char *val, void *dst)
{
	uint64_t v = 0;
	const char *s = val;
	unsigned shift = 0;

	while (conf_is_digit(*s)) {
		if (v > (UINT64_MAX - 9) / 10)
			goto bad;
		v = v * 10 + (uint64_t)(*s++ - '0');
	}
	if (s == val)
		goto bad;
	switch (*s) {
	case 'k': case 'K': shift = 10; s++; break;
	case 'm': case 'M': shift = 20; s++; break;
	case 'g': case 'G': shift = 30; s++; break;
	case 't': case 'T': shift = 40; s++; break;
	}
	if (shift && *s == 'i')
		s++;
	if (*s == 'b' || *s == 'B')
		s++;
	if (*s || v > (UINT64_MAX >> shift))
		goto bad;
	v <<= shift;
	if (v < k->min)
		return conf_err(c, "%s: '%s' is less than one 2 MiB page (at least 2M)",
				c->name, val);
	if (v > k->max)
		return conf_err(c, "%s: '%s' is more than %u pages of 2 MiB",
				c->name, val, UINT32_MAX);
	if (k->what && v % KV_PAGE_BYTES)
		return conf_err(c, "%s: '%s' is not a multiple of 2M", c->name,
				val);
	*(uint64_t *)dst = v;
	return 0;
bad:
	return conf_err(c, "%s: '%s' is not a size (digits with K, M, G or T, e.g. 64G)",
			c->name, val);
}

int conf_set_u32(struct conf_ctx *c, const struct conf_key *k,
		 const char *val, void *dst)
{
	uint64_t v;

	if (conf_parse_dec(val, k->max, &v) || v < k->min) {
		if (k->what)
			return conf_err(c, "%s: '%s' is not a %s (a number from %llu to %llu)",
					c->name, val, k->what,
					(unsigned long long)k->min,
					(unsigned long long)k->max);
		return conf_err(c, "%s: '%s' is not a number from %llu to %llu",
				c->name, val, (unsigned long long)k->min,
				(unsigned long long)k->max);
	}
	*(uint32_t *)dst = (uint32_t)v;
	return 0;
}

static int set_bool(struct conf_ctx *c, const struct conf_key *k,
		    const char *val, void *dst)
{
	static const char *const yes[] = { "yes", "true", "on", "1" };
	static const char *const no[] = { "no", "false", "off", "0" };

	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		if (!strcasecmp(val, yes[i])) {
			*(bool *)dst = true;
			return 0;
		}
		if (!strcasecmp(val, no[i])) {
			*(bool *)dst = false;
			return 0;
		}
	}
	return conf_err(c, "%s: '%s' is not yes, no, true, false, on, off, 1 or 0",
			c->name, val);
}

/* One of @k->values: "unknown backend 'gpu' (host, cuda or auto)". */
static int set_enum(struct conf_ctx *c, const struct conf_key *k,
		    const char *val, void *dst)
{
	char list[128] = "";
	size_t n = 0, i;

	for (i = 0; k->values[i].name; i++) {
		if (!strcmp(val, k->values[i].name)) {
			*(int *)dst = k->values[i].val;
			return 0;
		}
	}
	for (size_t j = 0; j < i; j++)
		n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s",
				      !j ? "" : j + 1 < i ? ", " : " or ",
				      k->values[j].name);
	return conf_err(c, "%s: unknown %s '%s' (%s)", c->name, k->what, val,
			list);
}

/*
 * A socket path: absolute in kvd.conf (relative to what?), as given on
 * the command line (to the working directory); shorter than sun_path.
 */
static int set_path(struct conf_ctx *c, const struct conf_key *k,
		    const char *val, void *dst)
{
	size_t len = strlen(val);

	if (c->path && val[0] != '/')
		return conf_err(c, "%s: '%s' is not an absolute path", c->name,
				val);
	if (!len)
		return conf_err(c, "%s: empty path", c->name);
	if (len >= KVD_CONF_PATH_MAX)
		return conf_err(c, "%s: path too long (%zu bytes, at most %d)",
				c->name, len, KVD_CONF_PATH_MAX - 1);
	memcpy(dst, val, len + 1);
	return 0;
}

static int parse_port(const char *s, uint16_t *port)
{
	char *end;
	unsigned long v;

	if (!conf_all_digits(s) || !*s)
		return -EINVAL;
	v = strtoul(s, &end, 10);
	if (*end || !v || v > 65535)
		return -EINVAL;
	*port = htons((uint16_t)v);
	return 0;
}

int kvd_parse_listen(const char *s, struct sockaddr_storage *ss)
{
	struct sockaddr_in *in = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	char host[KVD_LISTEN_MAX];
	const char *colon = strrchr(s, ':');
	size_t len = colon ? (size_t)(colon - s) : 0;

	memset(ss, 0, sizeof(*ss));
	if (!colon || len < 2 || len >= sizeof(host))
		return -EINVAL;
	if (s[0] == '[' && s[len - 1] == ']') {
		memcpy(host, s + 1, len - 2);
		host[len - 2] = 0;
		in6->sin6_family = AF_INET6;
		if (inet_pton(AF_INET6, host, &in6->sin6_addr) != 1)
			return -EINVAL;
		return parse_port(colon + 1, &in6->sin6_port);
	}
	memcpy(host, s, len);
	host[len] = 0;
	in->sin_family = AF_INET;
	if (inet_pton(AF_INET, host, &in->sin_addr) != 1)
		return -EINVAL;
	return parse_port(colon + 1, &in->sin_port);
}

/* ADDR:PORT of a TCP listener: IPv4 or [IPv6], a port 1..65535. */
/* A ZMQ endpoint to bind: tcp://ADDR:PORT, ipc://PATH or inproc://NAME. */
static int set_endpoint(struct conf_ctx *c, const struct conf_key *k,
			const char *val, void *dst)
{
	if (strlen(val) >= KVD_ENDPOINT_MAX ||
	    (strncmp(val, "tcp://", 6) && strncmp(val, "ipc://", 6) &&
	     strncmp(val, "inproc://", 9)) || !strchr(val, '/')[2])
		return conf_err(c, "%s: '%s' is not a ZMQ endpoint to bind (tcp://*:5557, tcp://127.0.0.1:5557 or ipc:///run/kvd/kv-events, under %d bytes)",
				c->name, val, KVD_ENDPOINT_MAX);
	memcpy(dst, val, strlen(val) + 1);
	return 0;
}

static int set_listen(struct conf_ctx *c, const struct conf_key *k,
		      const char *val, void *dst)
{
	struct sockaddr_storage ss;

	if (strlen(val) >= KVD_LISTEN_MAX || kvd_parse_listen(val, &ss))
		return conf_err(c, "%s: '%s' is not ADDR:PORT (an IPv4 address or a [bracketed] IPv6 one, then a port 1..65535: 127.0.0.1:9464)",
				c->name, val);
	memcpy(dst, val, strlen(val) + 1);
	return 0;
}

/* A string kept as given (argv outlives the daemon's use of it). */
static int set_string(struct conf_ctx *c, const struct conf_key *k,
		      const char *val, void *dst)
{
	*(const char **)dst = val;
	return 0;
}

/* Octal permission bits, at most 0777; @k->min: bits that must be clear. */
static int set_mode(struct conf_ctx *c, const struct conf_key *k,
		    const char *val, void *dst)
{
	unsigned v = 0;
	const char *s;

	for (s = val; *s >= '0' && *s <= '7' && s - val < 4; s++)
		v = v * 8 + (unsigned)(*s - '0');
	if (s == val || *s || v > 0777)
		return conf_err(c, "%s: '%s' is not an octal mode from 0 to 0777 (e.g. 0660)",
				c->name, val);
	if (v & k->min)
		return conf_err(c, "%s: %04o lets other users in (mode & 0007 must be 0; give access by group instead)",
				c->name, v);
	*(unsigned *)dst = v;
	return 0;
}

/* A group name or gid into *(uint32_t *)@dst. */
static int parse_group(struct conf_ctx *c, const char *val, uint32_t *gid)
{
	int ret;

	if (conf_all_digits(val)) {
		if (conf_parse_id(val, gid))
			return conf_err(c, "%s: '%s' is not a valid gid",
					c->name, val);
		return 0;
	}
	ret = conf_lookup(BY_GROUP_NAME, val, 0, gid, NULL, NULL, 0);
	return ret ? conf_err_lookup(c, "group", val, ret) : 0;
}

static int set_group(struct conf_ctx *c, const struct conf_key *k,
		     const char *val, void *dst)
{
	return parse_group(c, val, dst);
}

/* USER: a name, or a uid (which needs an entry unless GROUP is given). */
static int parse_user(struct conf_ctx *c, const char *user, bool group,
		      struct kvd_user *u)
{
	int ret;

	if (!conf_all_digits(user)) {
		ret = conf_lookup(BY_USER_NAME, user, 0, &u->uid, &u->gid,
				  u->name, sizeof(u->name));
		return ret ? conf_err_lookup(c, "user", user, ret) : 0;
	}
	if (conf_parse_id(user, &u->uid))
		return conf_err(c, "%s: '%s' is not a valid uid", c->name, user);
	if (group)
		return 0;
	ret = conf_lookup(BY_UID, NULL, u->uid, &u->uid, &u->gid, u->name,
			  sizeof(u->name));
	if (ret > 0)
		return conf_err(c, "%s: uid %u has no entry in the user database, so its group is unknown (write %u:GID)",
				c->name, u->uid, u->uid);
	return ret ? conf_err_lookup(c, "uid", user, ret) : 0;
}

/*
 * USER | UID | USER:GROUP | UID:GID: the uid, and the group the user
 * database gives as primary unless one is named after ':'. Resolved now,
 * so that a bad name stops kvd before it creates anything.
 */
static int set_user(struct conf_ctx *c, const struct conf_key *k,
		    const char *val, void *dst)
{
	struct kvd_user u = { 0 };
	char user[KVD_CONF_LINE_MAX + 1];
	const char *colon = strchr(val, ':'), *group = NULL;
	size_t len = strlen(val);
	int ret;

	if (colon) {
		len = (size_t)(colon - val);
		group = colon + 1;
	}
	if (!len || (group && !*group) || len >= sizeof(user))
		return conf_err(c, "%s: '%s' is not USER or USER:GROUP",
				c->name, val);
	memcpy(user, val, len);
	user[len] = 0;
	ret = parse_user(c, user, group, &u);
	if (!ret && group) {
		ret = parse_group(c, group, &u.gid);
		u.group = true;
	}
	if (!ret)
		memcpy(dst, &u, sizeof(u));
	return ret;
}

/* ---- the table -------------------------------------------------------- */

static const struct conf_enum backends[] = {
	{ "host", KV_BACKEND_HOST }, { "cuda", KV_BACKEND_CUDA },
	{ "auto", KVD_BACKEND_AUTO }, { NULL, 0 },
};

static const struct conf_enum exports[] = {
	{ "vmm", KV_EXPORT_VMM }, { "legacy", KV_EXPORT_LEGACY }, { NULL, 0 },
};

static const struct conf_enum loops[] = {
	{ "io_uring", KVD_LOOP_IO_URING }, { "epoll", KVD_LOOP_EPOLL },
	{ "auto", KVD_LOOP_AUTO }, { NULL, 0 },
};

/* Equal sizes in both structs, or the build fails (a negative array). */
#define SAME_SIZE(f)	(sizeof(((struct kvd_config *)0)->f) +		\
	0 * sizeof(char[sizeof(((struct kvd_config *)0)->f) ==		\
			sizeof(((struct kvd_conf *)0)->f) ? 1 : -1]))

/* A key of kvd.conf and, with @o, an option too. */
#define BOTH(n, o, f, fn)						\
	.name = n, .opt = o, .set = fn,					\
	.off = offsetof(struct kvd_conf, f),				\
	.has = offsetof(struct kvd_conf, has_##f),			\
	.cfg_off = offsetof(struct kvd_config, f), .size = SAME_SIZE(f)

/* A command-line option only. */
#define ARGV(o, f, fn)							\
	.opt = o, .set = fn, .cfg_off = offsetof(struct kvd_config, f),	\
	.size = sizeof(((struct kvd_config *)0)->f)

const struct conf_key kvd_keys[KVD_NR_KEYS] = {
	[KVD_KEY_BACKEND] = { BOTH("backend", "backend", backend, set_enum),
		.short_opt = 'b', .arg = "B", .what = "backend",
		.values = backends, .def = KVD_BACKEND_AUTO,
		.help = "host, cuda or auto (default auto: cuda when a CUDA\n"
			"device is present, else host)" },
	[KVD_KEY_DEVICE] = { BOTH("device", "device", device, conf_set_u32),
		.short_opt = 'd', .arg = "N", .min = 0, .max = 255,
		.what = "device ordinal",
		.help = "cuda: the device ordinal (default 0)" },
	[KVD_KEY_EXPORT] = { BOTH("export", "export", export_kind, set_enum),
		.arg = "E", .what = "export", .values = exports,
		.help = "cuda: vmm (default: cuMemCreate extents as POSIX\n"
			"fds) or legacy (one cuMemAlloc, as cudaMalloc, + a\n"
			"CUDA IPC handle)" },
	[KVD_KEY_POOL_SIZE] = { BOTH("pool_size", "pool-size", pool_bytes,
				     set_size),
		.short_opt = 'p', .arg = "SIZE", .min = KV_PAGE_BYTES,
		.max = SIZE_MAX_BYTES, .def = 1LL << 30,
		.help = "pool bytes, with K, M, G or T (default 1G);\n"
			"rounded down to 2 MiB pages" },
	[KVD_KEY_HOST_TIER_SIZE] = { BOTH("host_tier_size", "host-tier-size",
					  host_tier_bytes, set_size),
		.arg = "SIZE", .min = 0, .max = SIZE_MAX_BYTES, .def = 0,
		.help = "bytes of host memory behind the pool for the blocks\n"
			"it evicts, brought back on a hit (default 0: off)" },
	[KVD_KEY_DISK_TIER_SIZE] = { BOTH("disk_tier_size", "disk-tier-size",
					  disk_tier_bytes, set_size),
		.arg = "SIZE", .min = 0, .max = SIZE_MAX_BYTES, .def = 0,
		.help = "bytes of disk behind the host tier, in\n"
			"--disk-tier-path (default 0: off)" },
	[KVD_KEY_DISK_TIER_PATH] = { BOTH("disk_tier_path", "disk-tier-path",
					  disk_tier_path, set_path),
		.arg = "PATH",
		.help = "the disk tier's file (created) or block device" },
	[KVD_KEY_DISK_TIER_PERSIST] = { BOTH("disk_tier_persist",
					     "disk-tier-persist",
					     disk_tier_persist, set_bool),
		.help = "keep the disk tier's blocks across restarts: its\n"
			"index is rebuilt from the file at start, and at stop\n"
			"the pool's and host tier's cached blocks go to it" },
	[KVD_KEY_SOCKET] = { BOTH("socket", "socket", socket, set_path),
		.short_opt = 's', .arg = "PATH",
		.help = "client socket (default $KVD_SOCKET, else\n"
			"/run/kvd/kvd.sock as root, $XDG_RUNTIME_DIR/kvd.sock)" },
	[KVD_KEY_SOCKET_MODE] = { BOTH("socket_mode", NULL, socket_mode,
				       set_mode),
		.def = 0666 },
	[KVD_KEY_ADMIN_SOCKET] = { BOTH("admin_socket", "admin-socket",
					admin_socket, set_path),
		.short_opt = 'a', .arg = "P",
		.help = "admin socket (default kvd-admin.sock beside it)" },
	[KVD_KEY_ADMIN_SOCKET_MODE] = { BOTH("admin_socket_mode", NULL,
					     admin_socket_mode, set_mode),
		.min = 0007, .def = 0660 },
	[KVD_KEY_ADMIN_GROUP] = { .name = "admin_group", .set = set_group,
		.off = offsetof(struct kvd_conf, admin_gid),
		.has = offsetof(struct kvd_conf, has_admin_group),
		.cfg_off = offsetof(struct kvd_config, admin_gid),
		.size = SAME_SIZE(admin_gid) },
	[KVD_KEY_CONFIG] = { ARGV("config", conf_path, set_string),
		.short_opt = 'c', .arg = "FILE",
		.help = "configuration (default /etc/kvd/kvd.conf if it exists);\n"
			"options given here override the file" },
	[KVD_KEY_USER] = { BOTH("user", "user", user, set_user),
		.short_opt = 'u', .arg = "USER[:GROUP]",
		.help = "drop privileges to USER after set-up (as root); its\n"
			"groups, or GROUP alone" },
	[KVD_KEY_MAX_CLIENTS] = { BOTH("max_clients", "max-clients",
				       max_clients, conf_set_u32),
		.arg = "N", .min = 1, .max = MAX_LIMIT, .def = 256,
		.help = "client slots (default 256)" },
	[KVD_KEY_MAX_NAMESPACES] = { BOTH("max_namespaces", "max-namespaces",
					  max_namespaces, conf_set_u32),
		.arg = "N", .min = 1, .max = MAX_LIMIT, .def = 64,
		.help = "namespace slots (default 64)" },
	[KVD_KEY_MAX_RING_ENTRIES] = { BOTH("max_ring_entries",
					    "max-ring-entries",
					    max_ring_entries, conf_set_u32),
		.arg = "N", .min = 1, .max = KV_MAX_SQ_ENTRIES,
		.def = KV_MAX_SQ_ENTRIES,
		.help = "SQ entries a client may ask for (default 4096)" },
	[KVD_KEY_MAX_CLIENT_BLOCKS] = { BOTH("max_client_blocks",
					     "max-client-blocks",
					     max_client_blocks, conf_set_u32),
		.arg = "N", .min = 1, .max = 1U << 30,	/* KVD_REF_MAX */
		.help = "block references one client may hold (default:\n"
			"no limit)" },
	[KVD_KEY_POLL_US] = { BOTH("poll_us", "poll-us", poll_us,
				   conf_set_u32),
		.arg = "N", .min = 0, .max = 100000, .def = 50,
		.help = "after serving, poll the rings N us before sleeping\n"
			"(default 50; 0: sleep at once)" },
	[KVD_KEY_HUGEPAGES] = { BOTH("hugepages", "hugepages", hugepages,
				     set_bool),
		.help = "back the host pool with 2 MiB huge pages" },
	[KVD_KEY_OVERCOMMIT] = { BOTH("overcommit", "overcommit", overcommit,
				      set_bool),
		.help = "start a host pool larger than RAM + swap (refused\n"
			"otherwise): clients that touch all of it are killed" },
	[KVD_KEY_METRICS_LISTEN] = { BOTH("metrics_listen", "metrics-listen",
					  metrics_listen, set_listen),
		.arg = "ADDR:PORT",
		.help = "serve GET /metrics (Prometheus text, as kvctl\n"
			"metrics) over HTTP there, in a thread of its own\n"
			"(default: off)" },
	[KVD_KEY_KV_EVENTS] = { BOTH("kv_events", "kv-events", kv_events,
				     set_endpoint),
		.arg = "ENDPOINT",
		.help = "publish KV events (blocks stored and removed, in\n"
			"vLLM's format: msgpack on a ZMQ PUB socket) there,\n"
			"e.g. tcp://*:5557 (default: off)" },
	[KVD_KEY_EXTENT_SIZE] = { ARGV("extent-size", extent_bytes, set_size),
		.arg = "SIZE", .min = KV_PAGE_BYTES, .max = SIZE_MAX_BYTES,
		.what = "2M multiple",
		.help = "pool extents, a multiple of 2M (host default pool/32,\n"
			"2M..1G; cuda default 1G); a tenant only ever maps\n"
			"its own extents; memory is given back by extents" },
	[KVD_KEY_EVENT_LOOP] = { ARGV("event-loop", event_loop, set_enum),
		.arg = "L", .env = "KVD_EVENT_LOOP", .what = "event loop",
		.values = loops, .def = KVD_LOOP_AUTO,
		.help = "io_uring, epoll or auto (default $KVD_EVENT_LOOP,\n"
			"else auto: io_uring, or epoll where it is unavailable)" },
	[KVD_KEY_VERBOSE] = { ARGV("verbose", verbose, set_bool),
		.short_opt = 'v', .help = "debug logging" },
	[KVD_KEY_QUIET] = { ARGV("quiet", quiet, set_bool),
		.short_opt = 'q', .help = "errors and warnings only" },
	[KVD_KEY_VERSION] = { .opt = "version", .short_opt = 'V' },
	[KVD_KEY_HELP] = { .opt = "help", .short_opt = 'h' },
};

const struct conf_key *conf_global_key(const char *name)
{
	for (size_t i = 0; i < KVD_NR_KEYS; i++)
		if (kvd_keys[i].name && !strcmp(kvd_keys[i].name, name))
			return &kvd_keys[i];
	return NULL;
}
