// SPDX-License-Identifier: MIT
/*
 * kvd: options, the pool's backend, sockets, single-instance lock,
 * signals, then the event loop until SIGTERM/SIGINT.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <grp.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <linux/memfd.h>
#include <sys/signalfd.h>
#include <sys/sysinfo.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "admin.h"
#include "backend.h"
#include "client.h"
#include "daemon.h"
#include "extent.h"
#include "loop.h"
#include "tenant.h"

#ifndef KV_VERSION
#define KV_VERSION "0.0"
#endif

static void usage(FILE *f)
{
	fprintf(f,
"usage: kvd [options]\n"
"  -b, --backend B        host, cuda or auto (default auto: cuda when a CUDA\n"
"                         device is present, else host)\n"
"  -d, --device N         cuda: the device ordinal (default 0)\n"
"      --export E         cuda: vmm (default: cuMemCreate extents as POSIX\n"
"                         fds) or legacy (one cuMemAlloc, as cudaMalloc, + a\n"
"                         CUDA IPC handle)\n"
"  -p, --pool-size SIZE   pool bytes, with K, M, G or T (default 1G);\n"
"                         rounded down to 2 MiB pages\n"
"  -s, --socket PATH      client socket (default $KVD_SOCKET, else\n"
"                         /run/kvd/kvd.sock as root, $XDG_RUNTIME_DIR/kvd.sock)\n"
"  -a, --admin-socket P   admin socket (default kvd-admin.sock beside it)\n"
"  -c, --config FILE      configuration (default /etc/kvd/kvd.conf if it exists);\n"
"                         options given here override the file\n"
"  -u, --user USER        drop privileges to USER after set-up (as root)\n"
"      --max-clients N    client slots (default 256)\n"
"      --max-namespaces N namespace slots (default 64)\n"
"      --max-ring-entries N  SQ entries a client may ask for (default 4096)\n"
"      --max-client-blocks N block references one client may hold (default:\n"
"                         no limit)\n"
"      --poll-us N        after serving, poll the rings N us before sleeping\n"
"                         (default 50; 0: sleep at once)\n"
"      --hugepages        back the host pool with 2 MiB huge pages\n"
"      --extent-size SIZE pool extents, a multiple of 2M (host default pool/32,\n"
"                         2M..1G; cuda default 1G); a tenant only ever maps\n"
"                         its own extents; memory is given back by extents\n"
"      --event-loop L     io_uring, epoll or auto (default $KVD_EVENT_LOOP,\n"
"                         else auto: io_uring, or epoll where it is unavailable)\n"
"  -v, --verbose          debug logging\n"
"  -q, --quiet            errors and warnings only\n"
"  -V, --version\n"
"  -h, --help\n");
}

/* "64M" -> bytes. Returns -1 on a malformed or overflowing size. */
static int64_t parse_size(const char *s)
{
	char *end;
	unsigned long long v;
	int shift = 0;

	errno = 0;
	if (*s == '-')
		return -1;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	}
	if (*end == 'i' && shift)
		end++;
	if ((*end == 'b' || *end == 'B') && end[1] == 0)
		end++;
	if (*end || v > (unsigned long long)(INT64_MAX >> shift))
		return -1;
	return (int64_t)(v << shift);
}

static int parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v < min || v > max)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static char *default_path(const char *env, const char *name)
{
	const char *e = getenv(env), *xdg;
	char *p;

	if (e && *e)
		return strdup(e);
	if (geteuid() == 0) {
		mkdir("/run/kvd", 0755);
		return asprintf(&p, "/run/kvd/%s", name) < 0 ? NULL : p;
	}
	xdg = getenv("XDG_RUNTIME_DIR");
	if (!xdg || !*xdg)
		return NULL;
	return asprintf(&p, "%s/%s", xdg, name) < 0 ? NULL : p;
}

static char *admin_beside(const char *sock)
{
	const char *slash = strrchr(sock, '/');
	int dir = slash ? (int)(slash - sock + 1) : 0;
	char *p;

	return asprintf(&p, "%.*skvd-admin.sock", dir, sock) < 0 ? NULL : p;
}

/* "io_uring", "epoll" or "auto": KVD_LOOP_*, or -1. */
static int parse_loop(const char *s)
{
	if (!strcmp(s, "io_uring"))
		return KVD_LOOP_IO_URING;
	if (!strcmp(s, "epoll"))
		return KVD_LOOP_EPOLL;
	if (!strcmp(s, "auto"))
		return KVD_LOOP_AUTO;
	return -1;
}

static int parse_args(struct kvd_config *cfg, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "backend", required_argument, NULL, 'b' },
		{ "device", required_argument, NULL, 'd' },
		{ "export", required_argument, NULL, 'X' },
		{ "pool-size", required_argument, NULL, 'p' },
		{ "socket", required_argument, NULL, 's' },
		{ "admin-socket", required_argument, NULL, 'a' },
		{ "config", required_argument, NULL, 'c' },
		{ "user", required_argument, NULL, 'u' },
		{ "max-clients", required_argument, NULL, 'C' },
		{ "max-namespaces", required_argument, NULL, 'N' },
		{ "max-ring-entries", required_argument, NULL, 'R' },
		{ "max-client-blocks", required_argument, NULL, 'B' },
		{ "poll-us", required_argument, NULL, 'P' },
		{ "hugepages", no_argument, NULL, 'H' },
		{ "extent-size", required_argument, NULL, 'E' },
		{ "event-loop", required_argument, NULL, 'L' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	const char *loop = getenv("KVD_EVENT_LOOP"), *loop_from = NULL;
	uint32_t dev;
	int64_t sz;
	int o;

	while ((o = getopt_long(argc, argv, "b:d:p:s:a:c:u:vqVh", opts, NULL)) != -1) {
		switch (o) {
		case 'b':
			if (!strcmp(optarg, "host")) {
				cfg->backend = KV_BACKEND_HOST;
			} else if (!strcmp(optarg, "cuda")) {
				cfg->backend = KV_BACKEND_CUDA;
			} else if (!strcmp(optarg, "auto")) {
				cfg->backend = KVD_BACKEND_AUTO;
			} else {
				fprintf(stderr, "kvd: --backend: unknown backend '%s' (host, cuda or auto)\n", optarg);
				return -1;
			}
			break;
		case 'd':
			if (parse_u32(optarg, 0, 255, &dev)) {
				fprintf(stderr, "kvd: --device: '%s' is not a device ordinal (0..255)\n", optarg);
				return -1;
			}
			cfg->device = (int)dev;
			cfg->device_set = true;
			break;
		case 'X':
			if (!strcmp(optarg, "vmm")) {
				cfg->export_kind = KV_EXPORT_VMM;
			} else if (!strcmp(optarg, "legacy")) {
				cfg->export_kind = KV_EXPORT_LEGACY;
			} else {
				fprintf(stderr, "kvd: --export: unknown export '%s' (vmm or legacy)\n", optarg);
				return -1;
			}
			break;
		case 'p':
			sz = parse_size(optarg);
			if (sz < (int64_t)KV_PAGE_BYTES) {
				fprintf(stderr, "kvd: --pool-size: '%s' is not a size of at least 2M (digits with K, M, G or T)\n", optarg);
				return -1;
			}
			cfg->pool_bytes = (uint64_t)sz;
			break;
		case 's':
			cfg->socket_path = optarg;
			break;
		case 'a':
			cfg->admin_path = optarg;
			break;
		case 'c':
			cfg->conf_path = optarg;
			break;
		case 'u':
			cfg->user = optarg;
			break;
		case 'C':
			if (parse_u32(optarg, 1, KV_ADMIN_MAX_RECORDS, &cfg->max_clients)) {
				fprintf(stderr, "kvd: --max-clients: '%s' is not a number in 1..1024\n", optarg);
				return -1;
			}
			break;
		case 'N':
			if (parse_u32(optarg, 1, KV_ADMIN_MAX_RECORDS, &cfg->max_namespaces)) {
				fprintf(stderr, "kvd: --max-namespaces: '%s' is not a number in 1..1024\n", optarg);
				return -1;
			}
			break;
		case 'R':
			if (parse_u32(optarg, 1, KV_MAX_SQ_ENTRIES, &cfg->max_ring_entries)) {
				fprintf(stderr, "kvd: --max-ring-entries: '%s' is not a number in 1..4096\n", optarg);
				return -1;
			}
			break;
		case 'B':
			if (parse_u32(optarg, 1, 1U << 30, &cfg->max_client_blocks)) {
				fprintf(stderr, "kvd: --max-client-blocks: '%s' is not a number in 1..1073741824\n", optarg);
				return -1;
			}
			break;
		case 'P':
			if (parse_u32(optarg, 0, 100000, &cfg->poll_us)) {
				fprintf(stderr, "kvd: --poll-us: '%s' is not a number in 0..100000\n", optarg);
				return -1;
			}
			cfg->poll_set = true;
			break;
		case 'H':
			cfg->hugepages = true;
			break;
		case 'E':
			sz = parse_size(optarg);
			if (sz < (int64_t)KV_PAGE_BYTES || sz % KV_PAGE_BYTES) {
				fprintf(stderr, "kvd: --extent-size: '%s' is not a multiple of 2M\n", optarg);
				return -1;
			}
			if ((uint64_t)sz / KV_PAGE_BYTES > UINT32_MAX) {
				fprintf(stderr, "kvd: --extent-size: '%s' is larger than any pool (8191T at most)\n", optarg);
				return -1;
			}
			cfg->extent_bytes = (uint64_t)sz;
			break;
		case 'L':
			loop = optarg;
			loop_from = "--event-loop";
			break;
		case 'v':
			kvd_log_level = KVD_LOG_DEBUG;
			break;
		case 'q':
			kvd_log_level = KVD_LOG_WARN;
			break;
		case 'V':
			printf("kvd %s (ABI %u.%u)\n", KV_VERSION, KV_ABI_MAJOR,
			       KV_ABI_MINOR);
			exit(0);
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvd: unexpected argument '%s'\n", argv[optind]);
		return -1;
	}
	/* The option wins over the environment; an empty variable is unset. */
	if (!loop_from && loop && !*loop)
		loop = NULL;
	cfg->event_loop = loop ? parse_loop(loop) : KVD_LOOP_AUTO;
	if (cfg->event_loop < 0) {
		fprintf(stderr, "kvd: %s: unknown event loop '%s' (io_uring, epoll or auto)\n",
			loop_from ? loop_from : "KVD_EVENT_LOOP", loop);
		return -1;
	}
	return 0;
}

/* The default extent: host pool/32 within 2M..1G; cuda 1G (DESIGN.md). */
static uint64_t default_extent(const struct kvd *d)
{
	uint64_t ext, bytes = d->pool.bytes;

	if (d->be->backend == KV_BACKEND_CUDA)
		return bytes < (1ULL << 30) ? bytes : 1ULL << 30;
	ext = bytes / 32 / KV_PAGE_BYTES * KV_PAGE_BYTES;
	return ext < KV_PAGE_BYTES ? KV_PAGE_BYTES :
	       ext > (1ULL << 30) ? 1ULL << 30 : ext;
}

/* --backend auto: cuda when the driver sees a device, else host. */
static int pick_backend(struct kvd *d)
{
	char why[256] = "";
	int ret;

	if (d->cfg.backend == KVD_BACKEND_AUTO) {
		d->cfg.backend = kvd_cuda_probe(why, sizeof(why)) ?
				 KV_BACKEND_CUDA : KV_BACKEND_HOST;
		if (d->cfg.backend == KV_BACKEND_HOST)
			kvd_info("backend auto: host (%s)", why);
	}
	if (d->cfg.backend == KV_BACKEND_HOST) {
		if (d->cfg.device_set || d->cfg.export_kind)
			kvd_warn("--device and --export are for the cuda backend: ignored");
		d->be = &kvd_host_backend;
		return 0;
	}
	if (d->cfg.hugepages)
		kvd_warn("--hugepages is for the host backend: ignored");
	if (!d->cfg.export_kind)
		d->cfg.export_kind = KV_EXPORT_VMM;
	ret = kvd_cuda_open(d, &d->be, why, sizeof(why));
	if (ret)
		kvd_err("--backend cuda: %s", why);
	return ret;
}

/* The pool from its backend (kvd/host.c, kvd/cuda.c) and its extents. */
static int pool_create(struct kvd *d)
{
	struct sysinfo si;
	uint64_t ext;
	int ret;

	if (pick_backend(d))
		return -1;
	ext = d->cfg.extent_bytes ? d->cfg.extent_bytes : default_extent(d);
	if (ext > d->pool.bytes)
		ext = d->pool.bytes;	/* one extent: the whole pool */
	d->cfg.extent_bytes = ext;
	if (d->be->export_kind == KV_EXPORT_LEGACY && d->conf.nr_tenants > 1)
		kvd_warn("--export legacy maps the whole pool into every client: tenants are not isolated by extents");
	ret = kvd_extents_create(d, ext);
	if (ret) {
		kvd_err("cannot create the %s pool: %s%s", d->be->name,
			strerror(-ret), d->cfg.hugepages ?
			" (are enough huge pages reserved in /proc/sys/vm/nr_hugepages?)" : "");
		return -1;
	}
	if (d->be->backend == KV_BACKEND_HOST && sysinfo(&si) == 0 &&
	    d->pool.bytes > (uint64_t)si.totalram * si.mem_unit)
		kvd_warn("the pool (%llu MiB) is larger than this host's RAM: clients that touch all of it will be killed",
			 (unsigned long long)(d->pool.bytes >> 20));
	return 0;
}

/* Refuse to run twice on one path: flock() a lock file beside it. */
static int lock_path(const char *path)
{
	char *lock;
	int fd;

	if (asprintf(&lock, "%s.lock", path) < 0)
		return -1;
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		kvd_err("cannot open %s: %m", lock);
		free(lock);
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB)) {
		if (errno == EWOULDBLOCK)
			kvd_err("another kvd is already running on %s (%s is locked)",
				path, lock);
		else
			kvd_err("flock %s: %m", lock);
		close(fd);
		fd = -1;
	}
	free(lock);
	return fd;
}

static int listen_on(const char *path, mode_t mode)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		kvd_err("socket path too long (max %zu bytes): %s",
			sizeof(sa.sun_path) - 1, path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		kvd_err("socket: %m");
		return -1;
	}
	/* We hold the lock: a socket file left here is stale. */
	unlink(path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    chmod(path, mode) || listen(fd, 128)) {
		kvd_err("cannot listen on %s: %m", path);
		close(fd);
		return -1;
	}
	return fd;
}

/* Each client costs four fds (socket, ring, two eventfds): lift the
 * soft limit to the hard one and warn when it is still short. */
static void raise_nofile(uint32_t max_clients)
{
	struct rlimit rl;
	rlim_t need = (rlim_t)max_clients * 4 + 64;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur < need)
		kvd_warn("RLIMIT_NOFILE %llu is below the %llu fds that %u clients need",
			 (unsigned long long)rl.rlim_cur,
			 (unsigned long long)need, max_clients);
}

static int signals_setup(void)
{
	sigset_t set;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &set, NULL))
		return -1;
	return signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
}

static int books_init(struct kvd *d)
{
	uint32_t nr_pages = (uint32_t)(d->cfg.pool_bytes / KV_PAGE_BYTES);

	if (kvd_pool_init(&d->pool, nr_pages))
		return -1;
	d->nr_slots = d->cfg.max_clients + KVD_MAX_PENDING;
	d->clients = calloc(d->nr_slots, sizeof(*d->clients));
	d->live = calloc(d->nr_slots, sizeof(*d->live));
	d->ns = calloc(d->cfg.max_namespaces, sizeof(*d->ns));
	d->scratch = malloc(KV_MAX_DATA_BYTES);
	if (!d->clients || !d->live || !d->ns || !d->scratch)
		return -1;
	for (uint32_t i = 0; i < d->nr_slots; i++) {
		d->clients[i].slot = i;
		d->clients[i].sock = -1;
		d->clients[i].ring_fd = -1;
		d->clients[i].sq_evfd = d->clients[i].cq_evfd = -1;
	}
	for (int i = 0; i < KVD_MAX_ADMIN; i++)
		d->adm[i].fd = -1;
	d->pool.ns = d->ns;
	d->pool.nr_ns = d->cfg.max_namespaces;
	return 0;
}

static void shutdown_all(struct kvd *d)
{
	for (uint32_t i = 0; d->clients && i < d->nr_slots; i++)
		kvd_client_kill(d, &d->clients[i], NULL);
	for (int i = 0; i < KVD_MAX_ADMIN; i++)
		if (d->adm[i].fd >= 0)
			close(d->adm[i].fd);
	kvd_loop_exit(d);
	for (uint32_t i = 0; d->clients && i < d->nr_slots; i++) {
		d->clients[i].inflight = 1;
		kvd_client_put_op(d, &d->clients[i]);
	}
	for (uint32_t i = 0; d->ns && i < d->cfg.max_namespaces; i++)
		if (d->ns[i].live)
			kvd_ns_exit(&d->ns[i]);
}

/*
 * kvd.conf, then the command line on top of it, then defaults. A missing
 * default file is fine (no tenants: one per uid); a missing --config
 * file, or any error in a file, is not.
 */
static int load_conf(struct kvd *d)
{
	const char *path = d->cfg.conf_path ? d->cfg.conf_path : KVD_CONF_PATH;
	struct stat st;
	char err[256];
	int ret = kvd_conf_load(path, &d->conf, err, sizeof(err));

	if (ret == -ENOENT && !d->cfg.conf_path)
		return 0;
	if (ret) {
		fprintf(stderr, "kvd: %s\n", err[0] ? err : strerror(-ret));
		return -1;
	}
	if (!stat(path, &st) && (st.st_mode & 0004) && d->conf.nr_tenants)
		fprintf(stderr, "kvd: warning: %s holds tenant secrets and is readable by others (chmod 0640)\n",
			path);
	d->conf_path = strdup(path);
	return d->conf_path ? 0 : -1;
}

static void merge_conf(struct kvd *d)
{
	struct kvd_config *cfg = &d->cfg;
	const struct kvd_conf *f = &d->conf;

	if (!cfg->pool_bytes)
		cfg->pool_bytes = f->has_pool_bytes ? f->pool_bytes : 1ULL << 30;
	if (!cfg->backend)
		cfg->backend = f->has_backend && f->backend ? f->backend :
			       KVD_BACKEND_AUTO;
	if (!cfg->device_set && f->has_device)
		cfg->device = (int)f->device;
	if (!cfg->export_kind && f->has_export_kind)
		cfg->export_kind = f->export_kind;
	if (!cfg->socket_path && f->has_socket)
		cfg->socket_path = f->socket;
	if (!cfg->admin_path && f->has_admin_socket)
		cfg->admin_path = f->admin_socket;
	if (!cfg->max_clients)
		cfg->max_clients = f->has_max_clients ? f->max_clients : 256;
	if (!cfg->max_namespaces)
		cfg->max_namespaces = f->has_max_namespaces ?
				      f->max_namespaces : 64;
	if (!cfg->max_ring_entries)
		cfg->max_ring_entries = f->has_max_ring_entries ?
					f->max_ring_entries : KV_MAX_SQ_ENTRIES;
	if (!cfg->max_client_blocks && f->has_max_client_blocks)
		cfg->max_client_blocks = f->max_client_blocks;
	if (!cfg->poll_set)
		cfg->poll_us = f->has_poll_us ? f->poll_us : 50;
	cfg->hugepages |= f->has_hugepages && f->hugepages;
}

/* --user NAME|UID, else kvd.conf's user: whom to become after set-up. */
static int resolve_user(struct kvd *d, uid_t *uid, gid_t *gid)
{
	struct passwd pw, *res = NULL;
	char buf[4096], *end;
	unsigned long v;

	if (!d->cfg.user) {
		*uid = d->conf.user_uid;
		*gid = d->conf.user_gid;
		return d->conf.has_user ? 1 : 0;
	}
	v = strtoul(d->cfg.user, &end, 10);
	if (*d->cfg.user && !*end)
		getpwuid_r((uid_t)v, &pw, buf, sizeof(buf), &res);
	else
		getpwnam_r(d->cfg.user, &pw, buf, sizeof(buf), &res);
	if (!res) {
		kvd_err("--user: no such user '%s'", d->cfg.user);
		return -1;
	}
	*uid = pw.pw_uid;
	*gid = pw.pw_gid;
	return 1;
}

/*
 * As root: become the configured user, keeping nothing else. Sockets,
 * pool and io_uring already exist; nothing after needs privilege.
 */
static int drop_privileges(struct kvd *d)
{
	uid_t uid;
	gid_t gid;
	int ret = resolve_user(d, &uid, &gid);

	if (ret <= 0)
		return ret;
	if (geteuid() != 0) {
		kvd_warn("not root: staying uid %u", (unsigned)geteuid());
		return 0;
	}
	if (setgroups(0, NULL) || setresgid(gid, gid, gid) ||
	    setresuid(uid, uid, uid)) {
		kvd_err("cannot drop privileges to uid %u: %m", (unsigned)uid);
		return -1;
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		kvd_warn("PR_SET_NO_NEW_PRIVS: %m");
	if (setuid(0) == 0) {
		kvd_err("privileges could be regained after dropping them");
		return -1;
	}
	kvd_info("running as uid %u gid %u", (unsigned)uid, (unsigned)gid);
	return 0;
}

/* Socket modes and the admin socket's group, from kvd.conf. */
static int socket_access(struct kvd *d, const char *sock, const char *admin)
{
	mode_t smode = d->conf.has_socket_mode ? d->conf.socket_mode : 0666;
	mode_t amode = d->conf.has_admin_socket_mode ?
		       d->conf.admin_socket_mode : 0660;

	if (chmod(sock, smode) || chmod(admin, amode)) {
		kvd_err("chmod sockets: %m");
		return -1;
	}
	if (d->conf.has_admin_group &&
	    chown(admin, (uid_t)-1, d->conf.admin_gid)) {
		kvd_err("chown %s to gid %u: %m", admin, d->conf.admin_gid);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static struct kvd kvd;
	struct kvd *d = &kvd;
	char *sock_path = NULL, *admin_path = NULL;
	const char *env;
	int ret = 1;

	d->cfg.sq_budget = 64;
	d->cfg.hello_timeout_ms = 5000;
	d->listen_fd = d->admin_fd = d->signal_fd = -1;
	d->lock_fds[0] = d->lock_fds[1] = -1;
	if (parse_args(&d->cfg, argc, argv))
		return 2;
	if (load_conf(d))
		return 2;
	merge_conf(d);
	if (d->conf_path)
		kvd_info("configuration %s: %u tenants", d->conf_path,
			 d->conf.nr_tenants);

	sock_path = d->cfg.socket_path ? strdup(d->cfg.socket_path) :
		    default_path("KVD_SOCKET", "kvd.sock");
	if (!sock_path) {
		kvd_err("no socket path: pass --socket or set XDG_RUNTIME_DIR");
		return 2;
	}
	env = getenv("KVD_ADMIN_SOCKET");
	admin_path = d->cfg.admin_path ? strdup(d->cfg.admin_path) :
		     env && *env && !d->cfg.socket_path ? strdup(env) :
		     admin_beside(sock_path);
	if (!admin_path || !strcmp(admin_path, sock_path)) {
		kvd_err("the admin socket must differ from the client socket");
		goto out;
	}
	if (d->cfg.pool_bytes % KV_PAGE_BYTES)
		kvd_info("pool size rounded down to a multiple of 2 MiB");
	d->cfg.pool_bytes -= d->cfg.pool_bytes % KV_PAGE_BYTES;
	if (d->cfg.pool_bytes / KV_PAGE_BYTES > UINT32_MAX) {
		kvd_err("pool too large");
		goto out;
	}

	d->lock_fds[0] = lock_path(sock_path);
	if (d->lock_fds[0] < 0)
		goto out;
	d->lock_fds[1] = lock_path(admin_path);
	if (d->lock_fds[1] < 0)
		goto out;
	raise_nofile(d->cfg.max_clients + KVD_MAX_PENDING);
	if (getrandom(&d->secret, sizeof(d->secret), 0) != sizeof(d->secret)) {
		kvd_err("getrandom: %m");
		goto out;
	}
	if (books_init(d)) {
		kvd_err("out of memory sizing the books");
		goto out;
	}
	kvd_tenants_apply(d);
	/* Signals blocked before the CUDA driver starts its threads, which
	 * inherit the mask: SIGTERM must reach the signalfd, not kill us. */
	d->signal_fd = signals_setup();
	if (d->signal_fd < 0) {
		kvd_err("signalfd: %m");
		goto out;
	}
	if (pool_create(d))
		goto out;
	d->listen_fd = listen_on(sock_path, 0666);
	if (d->listen_fd < 0)
		goto out;
	d->socket_bound = true;
	d->admin_fd = listen_on(admin_path, 0660);
	if (d->admin_fd < 0)
		goto out;
	d->admin_bound = true;
	if (socket_access(d, sock_path, admin_path))
		goto out;
	if (kvd_loop_init(d))
		goto out;	/* it logged why */
	if (drop_privileges(d))
		goto out;
	d->start_ns = kvd_now_ns();
	kvd_info("kvd %s: %s pool of %llu MiB (%u pages, extents of %llu MiB), socket %s, admin %s",
		 KV_VERSION, d->be->name,
		 (unsigned long long)(d->cfg.pool_bytes >> 20),
		 d->pool.nr_pages,
		 (unsigned long long)(d->cfg.extent_bytes >> 20), sock_path,
		 admin_path);
	ret = kvd_loop_run(d) ? 1 : 0;
	shutdown_all(d);
	kvd_info("stopped");
out:
	if (d->socket_bound)
		unlink(sock_path);
	if (d->admin_bound)
		unlink(admin_path);
	kvd_extents_destroy(d);
	kvd_cuda_close(d);
	free(sock_path);
	free(admin_path);
	kvd_conf_free(&d->conf);
	free(d->conf_path);
	return ret;
}
