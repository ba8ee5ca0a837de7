// SPDX-License-Identifier: MIT
/*
 * kvd's run sequence: the configuration (the command line and kvd.conf,
 * both through config.c's key table), the pool's backend, sockets,
 * single-instance lock, signals, privileges, then the event loop until
 * SIGTERM/SIGINT.
 */
#include <errno.h>
#include <libgen.h>
#include <fcntl.h>
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
#include "metrics_http.h"
#include "events.h"
#include "notify.h"
#include "tenant.h"

#ifndef KV_VERSION
#define KV_VERSION "0.0"
#endif


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
		if (kvd_config_has(&d->cfg, KVD_KEY_DEVICE) ||
		    d->cfg.export_kind)
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

/*
 * A host pool is a sparse memfd: any size starts, and the clients that
 * fill it are killed later. Refuse one beyond RAM + swap up front unless
 * --overcommit says it is meant (a test of the books, say).
 */
static int pool_fits(const struct kvd *d)
{
	uint64_t ram, swap;
	struct sysinfo si;

	if (d->be->backend != KV_BACKEND_HOST || d->cfg.overcommit ||
	    sysinfo(&si))
		return 0;
	ram = (uint64_t)si.totalram * si.mem_unit;
	swap = (uint64_t)si.totalswap * si.mem_unit;
	if (d->cfg.pool_bytes <= ram + swap)
		return 0;
	kvd_err("--pool-size %llu MiB is more than this host's memory (%llu MiB RAM + %llu MiB swap): refused; --overcommit (overcommit = yes in kvd.conf) starts it anyway",
		(unsigned long long)(d->cfg.pool_bytes >> 20),
		(unsigned long long)(ram >> 20),
		(unsigned long long)(swap >> 20));
	return -EINVAL;
}

/* The pool from its backend (kvd/host.c, kvd/cuda.c) and its extents. */
static int pool_create(struct kvd *d)
{
	struct sysinfo si;
	uint64_t ext;
	int ret;

	if (pick_backend(d) || pool_fits(d))
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

/*
 * What is at a socket path: nothing (0), a socket (1; with the lock held,
 * one a dead kvd left), or something kvd must never replace (-1, said).
 */
static int path_kind(const char *path)
{
	struct stat st;

	if (lstat(path, &st)) {
		if (errno == ENOENT)
			return 0;
		kvd_err("%s: %m", path);
		return -1;
	}
	if (S_ISSOCK(st.st_mode))
		return 1;
	kvd_err("%s exists and is not a socket: refusing to replace it (choose another path, or remove it)",
		path);
	return -1;
}

/*
 * Refuse to run twice on one path: flock() a lock file beside it. Never
 * through a symbolic link, and only a regular file: the path is the
 * user's to choose, what is there is not kvd's to take.
 */
static int lock_path(const char *path)
{
	struct stat st;
	char *lock;
	int fd;

	if (asprintf(&lock, "%s.lock", path) < 0)
		return -1;
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW |
		  O_NONBLOCK, 0600);
	if (fd < 0) {
		kvd_err("cannot open %s: %m", lock);
		free(lock);
		return -1;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		kvd_err("%s is not a regular file: refusing to use it as kvd's lock file",
			lock);
		goto err_close;
	}
	if (flock(fd, LOCK_EX | LOCK_NB)) {
		if (errno == EWOULDBLOCK)
			kvd_err("another kvd is already running on %s (%s is locked)",
				path, lock);
		else
			kvd_err("flock %s: %m", lock);
		goto err_close;
	}
	free(lock);
	return fd;
err_close:
	close(fd);
	free(lock);
	return -1;
}

/*
 * Does anything accept connections at @sa? Only a refused connect (or
 * the file gone) says the socket is stale; anything else counts as live.
 * A kvd killed a moment ago can still accept for a while: its io_uring
 * holds the listening socket until the kernel tears the ring down after
 * the process is gone. So a live answer is asked again for up to 1 s.
 */
static bool socket_alive(const struct sockaddr_un *sa)
{
	for (int i = 0; i < 20; i++) {
		int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC |
				SOCK_NONBLOCK, 0);
		bool alive;

		if (fd < 0)
			return true;
		alive = connect(fd, (const struct sockaddr *)sa,
				sizeof(*sa)) == 0 ||
			(errno != ECONNREFUSED && errno != ENOENT);
		close(fd);
		if (!alive)
			return false;
		usleep(50 * 1000);
	}
	return true;
}

/*
 * Do @a and @b name one file? Their directories resolved (realpath), so
 * "x.sock", "./x.sock" and "d//x.sock" are one path; as written when a
 * directory cannot be resolved (binding there fails anyway).
 */
static bool same_path(const char *a, const char *b)
{
	char *da = strdup(a), *db = strdup(b), *ra = NULL, *rb = NULL;
	char *ca = strdup(a), *cb = strdup(b);
	bool same = !strcmp(a, b);

	if (!da || !db || !ca || !cb)
		goto out;
	ra = realpath(dirname(da), NULL);
	rb = realpath(dirname(db), NULL);
	if (ra && rb)
		same = !strcmp(ra, rb) && !strcmp(basename(ca), basename(cb));
out:
	free(ra);
	free(rb);
	free(da);
	free(db);
	free(ca);
	free(cb);
	return same;
}

/*
 * Bind and listen on @path; @id gets the socket file's identity, so
 * that kvd removes at exit only the file it made (unbind_path()).
 */
static int listen_on(const char *path, mode_t mode, struct kvd_path_id *id)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, kind;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		kvd_err("socket path too long (max %zu bytes): %s",
			sizeof(sa.sun_path) - 1, path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	kind = path_kind(path);
	if (kind < 0)
		return -1;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		kvd_err("socket: %m");
		return -1;
	}
	/* We hold the lock: a socket left here is a dead kvd's, unless
	 * its lock file was removed under a live one: ask before taking. */
	if (kind == 1 && socket_alive(&sa)) {
		kvd_err("%s: a process is listening on it (a kvd whose lock file was removed?): refusing to replace it",
			path);
		goto err_close;
	}
	if (kind == 1 && unlink(path) && errno != ENOENT) {
		kvd_err("cannot remove the stale socket %s: %m", path);
		goto err_close;
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		kvd_err("cannot listen on %s: %m", path);
		goto err_close;
	}
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
		id->dev = st.st_dev;
		id->ino = st.st_ino;
		id->bound = true;
	}
	if (chmod(path, mode) || listen(fd, 128)) {
		kvd_err("cannot listen on %s: %m", path);
		goto err_close;
	}
	return fd;
err_close:
	close(fd);
	return -1;
}

/* Remove @path only if it is still the socket kvd bound there. */
static void unbind_path(const char *path, struct kvd_path_id *id)
{
	struct stat st;

	if (!id->bound)
		return;
	id->bound = false;
	if (lstat(path, &st))
		return;		/* someone removed it already */
	if (!S_ISSOCK(st.st_mode) || st.st_dev != id->dev ||
	    st.st_ino != id->ino) {
		kvd_warn("%s is no longer kvd's socket: left in place", path);
		return;
	}
	unlink(path);
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
	/* pins end with kvd: their blocks cached, so that a persistent
	 * disk tier keeps them (and the children that hang from them) */
	for (uint32_t i = 0; d->ns && i < d->cfg.max_namespaces; i++)
		if (d->ns[i].live)
			kvd_ns_pins_expire(&d->ns[i], UINT64_MAX);
	kvd_tiers_stop(d);	/* what is cached, to disk (persist) */
	for (uint32_t i = 0; d->ns && i < d->cfg.max_namespaces; i++)
		if (d->ns[i].live)
			kvd_ns_exit(&d->ns[i]);
	kvd_tenants_exit(d);
}

/*
 * kvd.conf under the command line: the options given win, the file fills
 * the rest, then defaults. A missing default file is fine (no tenants:
 * one per uid); a missing --config file, or any error in a file, is not.
 */
static int load_conf(struct kvd *d)
{
	const char *path = d->cfg.conf_path ? d->cfg.conf_path : KVD_CONF_PATH;
	struct stat st;
	char err[256];
	int ret = kvd_conf_load(path, &d->conf, err, sizeof(err));

	if (ret && (ret != -ENOENT || d->cfg.conf_path))
		goto fail;
	if (!ret) {
		if (!stat(path, &st) && (st.st_mode & 0004) &&
		    d->conf.nr_tenants)
			kvd_warn("%s holds tenant secrets and is readable by others (chmod 0640)",
				 path);
		d->conf_path = strdup(path);
		if (!d->conf_path)
			return -1;
	}
	ret = kvd_config_merge(&d->cfg, &d->conf, err, sizeof(err));
	if (!ret)
		return 0;
fail:
	fprintf(stderr, "kvd: %s\n", err[0] ? err : strerror(-ret));
	return -1;
}

/* Whom to become after set-up: USER's groups, or USER:GROUP alone. */
static int set_ids(const struct kvd_user *u)
{
	if (u->group) {
		if (setgroups(1, &u->gid))
			return -1;
	} else if (initgroups(u->name, u->gid)) {
		return -1;
	}
	if (setresgid(u->gid, u->gid, u->gid) ||
	    setresuid(u->uid, u->uid, u->uid))
		return -1;
	return 0;
}

/*
 * As root: become the configured user, keeping nothing else. Sockets,
 * pool and io_uring already exist; nothing after needs privilege.
 */
static int drop_privileges(struct kvd *d)
{
	const struct kvd_user *u = &d->cfg.user;

	if (!kvd_config_has(&d->cfg, KVD_KEY_USER))
		return 0;
	if (geteuid() != 0) {
		kvd_warn("not root: staying uid %u", (unsigned)geteuid());
		return 0;
	}
	if (set_ids(u)) {
		kvd_err("cannot drop privileges to uid %u gid %u: %m",
			(unsigned)u->uid, (unsigned)u->gid);
		return -1;
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		kvd_warn("PR_SET_NO_NEW_PRIVS: %m");
	if (setuid(0) == 0) {
		kvd_err("privileges could be regained after dropping them");
		return -1;
	}
	kvd_info("running as uid %u gid %u%s", (unsigned)u->uid,
		 (unsigned)u->gid, u->group ? "" : " and the user's groups");
	return 0;
}

/* Socket modes and the admin socket's group, from kvd.conf. */
static int socket_access(struct kvd *d, const char *sock, const char *admin)
{
	if (chmod(sock, d->cfg.socket_mode) ||
	    chmod(admin, d->cfg.admin_socket_mode)) {
		kvd_err("chmod sockets: %m");
		return -1;
	}
	if (kvd_config_has(&d->cfg, KVD_KEY_ADMIN_GROUP) &&
	    chown(admin, (uid_t)-1, d->cfg.admin_gid)) {
		kvd_err("chown %s to gid %u: %m", admin, d->cfg.admin_gid);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static struct kvd kvd;
	struct kvd *d = &kvd;
	char *sock_path = NULL, *admin_path = NULL, err[256];
	const char *env, *why = NULL;
	int ret = 1;

	d->cfg.sq_budget = 64;
	d->cfg.hello_timeout_ms = 5000;
	d->listen_fd = d->admin_fd = d->signal_fd = -1;
	d->lock_fds[0] = d->lock_fds[1] = -1;
	ret = kvd_config_argv(&d->cfg, argc, argv, err, sizeof(err));
	if (ret) {
		if (ret > 0)
			return 0;	/* --help, --version */
		fprintf(stderr, "kvd: %s\n", err);
		return 2;
	}
	if (load_conf(d))
		return 2;
	if (d->cfg.verbose)
		kvd_log_level = KVD_LOG_DEBUG;
	if (d->cfg.quiet)
		kvd_log_level = KVD_LOG_WARN;
	ret = 1;
	if (d->conf_path)
		kvd_info("configuration %s: %u tenants", d->conf_path,
			 d->conf.nr_tenants);

	sock_path = d->cfg.socket[0] ? strdup(d->cfg.socket) :
		    default_path("KVD_SOCKET", "kvd.sock");
	if (!sock_path) {
		kvd_err("no socket path: pass --socket or set XDG_RUNTIME_DIR");
		return 2;
	}
	env = getenv("KVD_ADMIN_SOCKET");
	admin_path = d->cfg.admin_socket[0] ? strdup(d->cfg.admin_socket) :
		     env && *env && !d->cfg.socket[0] ? strdup(env) :
		     admin_beside(sock_path);
	if (!admin_path || same_path(admin_path, sock_path)) {
		kvd_err("the admin socket must differ from the client socket");
		goto out;
	}
	if (d->cfg.pool_bytes % KV_PAGE_BYTES)
		kvd_info("pool size rounded down to a multiple of 2 MiB");
	d->cfg.pool_bytes -= d->cfg.pool_bytes % KV_PAGE_BYTES;

	/* Before the lock files: refuse a taken path without leaving any. */
	if (path_kind(sock_path) < 0 || path_kind(admin_path) < 0)
		goto out;
	d->lock_fds[0] = lock_path(sock_path);
	if (d->lock_fds[0] < 0)
		goto out;
	d->lock_fds[1] = lock_path(admin_path);
	if (d->lock_fds[1] < 0)
		goto out;
	raise_nofile(d->cfg.max_clients + KVD_MAX_PENDING);
	if (getrandom(&d->secret, sizeof(d->secret), 0) != sizeof(d->secret) ||
	    getrandom(d->id_key, sizeof(d->id_key), 0) != sizeof(d->id_key) ||
	    getrandom(&d->boot_id, sizeof(d->boot_id), 0) != sizeof(d->boot_id)) {
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
	if (kvd_tiers_init(d, &why)) {
		kvd_err("%s", why);
		goto out;
	}
	if (d->cfg.host_tier_bytes)
		kvd_info("host tier of %llu MiB behind the pool",
			 (unsigned long long)(d->cfg.host_tier_bytes >> 20));
	d->listen_fd = listen_on(sock_path, 0666, &d->sock_id);
	if (d->listen_fd < 0)
		goto out;
	d->admin_fd = listen_on(admin_path, 0660, &d->admin_id);
	if (d->admin_fd < 0)
		goto out;
	if (socket_access(d, sock_path, admin_path))
		goto out;
	if (kvd_loop_init(d))
		goto out;	/* it logged why */
	/* As root still: a port below 1024 may be asked for. */
	if (kvd_metrics_start(d, admin_path))
		goto out;
	if (kvd_events_init(d, &why)) {
		kvd_err("kv_events %s: %s", d->cfg.kv_events, why);
		goto out;
	}
	if (kvd_tiers_start(d)) {
		kvd_err("disk tier: cannot watch its completions");
		goto out;
	}
	if (drop_privileges(d))
		goto out;
	d->start_ns = kvd_now_ns();
	kvd_info("kvd %s: %s pool of %llu MiB (%u pages, extents of %llu MiB), socket %s, admin %s",
		 KV_VERSION, d->be->name,
		 (unsigned long long)(d->cfg.pool_bytes >> 20),
		 d->pool.nr_pages,
		 (unsigned long long)(d->cfg.extent_bytes >> 20), sock_path,
		 admin_path);
	kvd_notify_ready(d);
	ret = kvd_loop_run(d) ? 1 : 0;
	kvd_notify_stopping();
	shutdown_all(d);
	kvd_info("stopped");
out:
	kvd_metrics_stop(d);	/* first: a scrape in flight asks the admin socket */
	kvd_events_exit(d);
	unbind_path(sock_path, &d->sock_id);
	unbind_path(admin_path, &d->admin_id);
	kvd_tiers_exit(d);
	kvd_extents_destroy(d);
	kvd_cuda_close(d);
	free(sock_path);
	free(admin_path);
	kvd_conf_free(&d->conf);
	free(d->conf_path);
	return ret;
}
