// SPDX-License-Identifier: MIT
/*
 * A private kvd for a benchmark: started from the kvd binary beside
 * kvbench (or --kvd), on the host backend, with sockets in a temp dir
 * and no configuration file, so that its pool (and the host tier behind
 * it, when one is asked for) holds exactly what the benchmark asks for
 * and nothing else runs on it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <kv/abi.h>

#include "../admin.h"
#include "kvd.h"

#define BENCH_KVD_START_MS	10000
#define BENCH_KVD_STOP_MS	5000

struct kv_geometry bench_small_geom(void)
{
	return (struct kv_geometry){
		.layers = 1, .kv_heads = 1, .head_dim = 128,
		.block_tokens = 16, .dtype = KV_DTYPE_FP16,
	};
}

/* kvd beside this executable, else in ../sbin (make install), else PATH. */
static void kvd_path(char *buf, size_t len, const char *given)
{
	char self[PATH_MAX - 16];	/* room for "/../sbin/kvd" */
	ssize_t n;
	char *slash;

	if (given) {
		snprintf(buf, len, "%s", given);
		return;
	}
	snprintf(buf, len, "kvd");
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return;
	self[n] = 0;
	slash = strrchr(self, '/');
	if (!slash)
		return;
	*slash = 0;
	snprintf(buf, len, "%s/kvd", self);
	if (!access(buf, X_OK))
		return;
	snprintf(buf, len, "%s/../sbin/kvd", self);
	if (!access(buf, X_OK))
		return;
	snprintf(buf, len, "kvd");
}

static void kvd_exec(const struct bench_kvd *k, const char *bin,
		     const char *pool_size, const struct bench_tiers *t,
		     pid_t parent)
{
	const char *argv[20] = {
		bin, "--backend", "host", "--pool-size", pool_size,
		"--socket", k->sock, "--admin-socket", k->admin,
		"--config", "/dev/null", "--quiet",
	};
	int n = 12, fd;

	if (t && t->host_size) {
		argv[n++] = "--host-tier-size";
		argv[n++] = t->host_size;
	}
	if (t && t->disk_size) {
		argv[n++] = "--disk-tier-size";
		argv[n++] = t->disk_size;
		argv[n++] = "--disk-tier-path";
		argv[n++] = k->disk_path;
	}
	argv[n] = NULL;
	/* Nothing kvbench starts outlives it. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	fd = open(k->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd >= 0)
		dup2(fd, 2);
	execvp(bin, (char **)argv);
	fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
	_exit(127);
}

/* It answers STATUS with its own pid: a stale socket proves nothing. */
static bool kvd_answers(const struct bench_kvd *k, void *reply)
{
	const struct kv_admin_status *st = reply;

	if (kv_admin_call(k->admin, KV_ADMIN_STATUS, 0, 0, reply) <
	    (ssize_t)sizeof(*st))
		return false;
	return st->magic == KV_MAGIC && st->pid == (uint32_t)k->pid;
}

static void kvd_log_tail(const struct bench_kvd *k)
{
	char line[512];
	FILE *f = fopen(k->log, "r");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		fprintf(stderr, "  kvd: %s", line);
	fclose(f);
}

static void rmdir_on_signal(const char *dir);

/* The temp dir holds only kvd's files: sockets, their locks, the log. */
static void kvd_rmdir(struct bench_kvd *k)
{
	DIR *d;
	struct dirent *e;

	if (!k->dir[0])
		return;
	rmdir_on_signal(NULL);
	d = opendir(k->dir);
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlinkat(dirfd(d), e->d_name, 0);
	if (d)
		closedir(d);
	rmdir(k->dir);
	k->dir[0] = 0;
}

static int kvd_wait_up(struct bench_kvd *k, const char *bin)
{
	void *reply = malloc(KV_ADMIN_REPLY_MAX);
	int status, ret = -1;

	if (!reply) {
		fprintf(stderr, "kvbench: out of memory\n");
		return -1;
	}
	for (int ms = 0; ms < BENCH_KVD_START_MS; ms += 5) {
		if (kvd_answers(k, reply)) {
			ret = 0;
			break;
		}
		if (waitpid(k->pid, &status, WNOHANG) == k->pid) {
			k->pid = 0;
			fprintf(stderr, "kvbench: private kvd %s exited at start (status %d):\n",
				bin, WIFEXITED(status) ? WEXITSTATUS(status) :
				128 + WTERMSIG(status));
			kvd_log_tail(k);
			break;
		}
		usleep(5000);
	}
	if (ret && k->pid)
		fprintf(stderr, "kvbench: private kvd %s did not answer in %d s\n",
			bin, BENCH_KVD_START_MS / 1000);
	free(reply);
	return ret;
}

int bench_mkdtemp(char *dir, size_t len, const char *name)
{
	const char *tmp = getenv("TMPDIR");

	/* Socket paths must fit sun_path: a long $TMPDIR falls back. */
	if (!tmp || !*tmp || strlen(tmp) > 40)
		tmp = "/tmp";
	snprintf(dir, len, "%s/%s.XXXXXX", tmp, name);
	if (mkdtemp(dir))
		return 0;
	fprintf(stderr, "kvbench: mkdtemp %s: %s\n", dir, strerror(errno));
	dir[0] = 0;
	return -1;
}

/*
 * The disk tier's file: @t->disk_path, or "disk-tier" in the temp dir.
 * Ours (removed) when it is not there yet; one that is there is left
 * to kvd, which takes a kvd tier file and refuses any other.
 */
static int disk_setup(struct bench_kvd *k, const struct bench_tiers *t)
{
	struct stat st;
	char *slash;
	int n;

	if (!t || !t->disk_size)
		return 0;
	if (t->disk_path)
		n = snprintf(k->disk_path, sizeof(k->disk_path), "%s",
			     t->disk_path);
	else
		n = snprintf(k->disk_path, sizeof(k->disk_path),
			     "%s/disk-tier", k->dir);
	if (n < 0 || (size_t)n >= sizeof(k->disk_path)) {
		fprintf(stderr, "kvbench: --disk-tier-path: too long a path\n");
		return -1;
	}
	if (lstat(k->disk_path, &st)) {
		if (errno != ENOENT) {
			fprintf(stderr, "kvbench: --disk-tier-path %s: %s\n",
				k->disk_path, strerror(errno));
			return -1;
		}
		k->disk_ours = true;
	}
	snprintf(k->disk_dir, sizeof(k->disk_dir), "%s", k->disk_path);
	slash = strrchr(k->disk_dir, '/');
	if (!slash)
		snprintf(k->disk_dir, sizeof(k->disk_dir), ".");
	else if (slash == k->disk_dir)
		slash[1] = 0;
	else
		*slash = 0;
	return 0;
}

/* Ours, once kvd has it open: only kvd's descriptor keeps it. */
static void disk_release(struct bench_kvd *k)
{
	if (k->disk_ours && k->disk_path[0] && !unlink(k->disk_path))
		k->disk_ours = false;
}

int bench_kvd_start(struct bench_kvd *k, const char *bin,
		    const char *pool_size, const struct bench_tiers *t)
{
	char path[PATH_MAX];
	pid_t parent = getpid();

	memset(k, 0, sizeof(*k));
	k->owner = parent;
	if (bench_mkdtemp(k->dir, sizeof(k->dir), "kvbench"))
		return -1;
	snprintf(k->sock, sizeof(k->sock), "%s/kvd.sock", k->dir);
	snprintf(k->admin, sizeof(k->admin), "%s/kvd-admin.sock", k->dir);
	snprintf(k->log, sizeof(k->log), "%s/kvd.log", k->dir);
	rmdir_on_signal(k->dir);
	if (disk_setup(k, t))
		goto err_rmdir;
	kvd_path(path, sizeof(path), bin);
	fflush(NULL);
	k->pid = fork();
	if (k->pid < 0) {
		fprintf(stderr, "kvbench: fork: %s\n", strerror(errno));
		goto err_rmdir;
	}
	if (!k->pid)
		kvd_exec(k, path, pool_size, t, parent);
	if (kvd_wait_up(k, path))
		goto err_stop;
	/* kvd answers only once its tiers are set up: the file is open */
	disk_release(k);
	return 0;

err_stop:
	bench_kvd_stop(k);
	return -1;
err_rmdir:
	kvd_rmdir(k);
	return -1;
}

void bench_kvd_stop(struct bench_kvd *k)
{
	int status;

	if (k->owner != getpid())
		return;
	if (k->pid > 0) {
		kill(k->pid, SIGTERM);
		for (int ms = 0; ms < BENCH_KVD_STOP_MS; ms += 5) {
			if (waitpid(k->pid, &status, WNOHANG) == k->pid)
				goto reaped;
			usleep(5000);
		}
		kill(k->pid, SIGKILL);
		waitpid(k->pid, &status, 0);
reaped:
		k->pid = 0;
	}
	/* one kvd made but never got to open (it failed at start) */
	disk_release(k);
	k->disk_path[0] = 0;
	kvd_rmdir(k);
}

/* ---- what a signal that ends kvbench first leaves removed ---- */

/* What a private kvd's temp dir may hold (kvd's files, fio's). */
static const char *const dir_files[] = {
	"kvd.sock", "kvd.sock.lock", "kvd-admin.sock", "kvd-admin.sock.lock",
	"kvd.log", "disk-tier", "fio.json", "fio.log",
};
#define NR_DIR_FILES	(sizeof(dir_files) / sizeof(dir_files[0]))

static char sig_path[KVB_PATH_MAX];
static char sig_dir[64];
static char sig_dir_file[NR_DIR_FILES][96];
static volatile sig_atomic_t sig_path_armed, sig_dir_armed;
static pid_t sig_owner;

static void unlink_and_die(int sig)
{
	/* unlink, rmdir, getpid and raise are async-signal-safe; the
	 * engine processes inherit the handler but own none of these */
	if (getpid() == sig_owner) {
		if (sig_path_armed)
			unlink(sig_path);
		for (size_t i = 0; sig_dir_armed && i < NR_DIR_FILES; i++)
			unlink(sig_dir_file[i]);
		if (sig_dir_armed)
			rmdir(sig_dir);
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

static void sig_arm(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };

	sig_owner = getpid();
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], unlink_and_die);
}

void bench_unlink_on_signal(const char *path)
{
	sig_path_armed = 0;
	if (!path)
		return;
	snprintf(sig_path, sizeof(sig_path), "%s", path);
	sig_arm();
	sig_path_armed = 1;
}

/* The temp dir of the private kvd started last (NULL: none now). */
static void rmdir_on_signal(const char *dir)
{
	sig_dir_armed = 0;
	if (!dir)
		return;
	snprintf(sig_dir, sizeof(sig_dir), "%s", dir);
	for (size_t i = 0; i < NR_DIR_FILES; i++)
		snprintf(sig_dir_file[i], sizeof(sig_dir_file[i]), "%s/%s",
			 dir, dir_files[i]);
	sig_arm();
	sig_dir_armed = 1;
}

int bench_admin_beside(const char *sock, char *buf, size_t len)
{
	const char *slash = strrchr(sock, '/');
	int dir = slash ? (int)(slash - sock + 1) : 0;
	int n = snprintf(buf, len, "%.*skvd-admin.sock", dir, sock);

	return n < 0 || (size_t)n >= len ? -1 : 0;
}

int bench_kvd_evict(const char *admin_path)
{
	void *reply = malloc(KV_ADMIN_REPLY_MAX);
	const struct kv_admin_status *st = reply;
	ssize_t n;

	if (!reply)
		return -ENOMEM;
	n = kv_admin_call(admin_path, KV_ADMIN_EVICT, ~0U, 0, reply);
	if (n >= (ssize_t)sizeof(*st) && st->status < 0)
		n = st->status;
	free(reply);
	if (n < 0) {
		fprintf(stderr, "kvbench: evict through %s: %s (see --admin-socket)\n",
			admin_path, strerror((int)-n));
		return -1;
	}
	return 0;
}

int bench_connect(const char *sock, const char *model,
		  const struct kv_geometry *geom, struct kv_client **c)
{
	char err[256] = "";
	struct kv_connect_params p = {
		.socket_path = sock,
		.model_id = model,
		.geom = *geom,
		.errbuf = err,
		.errbuf_len = sizeof(err),
	};
	int ret = kv_connect(&p, c);

	if (ret) {
		fprintf(stderr, "kvbench: connect to %s: %s%s%s\n",
			sock ? sock : "kvd", strerror(-ret), err[0] ? ": " : "",
			err);
		return -1;
	}
	return 0;
}

int bench_open(const struct kvb_opts *o, const char *pool_size,
	       const char *model, struct bench_kvd *k, struct kv_client **c)
{
	struct kv_geometry g = bench_small_geom();
	const char *sock = o->socket;

	if (!sock) {
		if (bench_kvd_start(k, o->kvd_bin, pool_size, NULL))
			return -1;
		sock = k->sock;
	}
	if (!bench_connect(sock, model, &g, c))
		return 0;
	if (!o->socket)
		bench_kvd_stop(k);
	return -1;
}

void bench_close(const struct kvb_opts *o, struct bench_kvd *k,
		 struct kv_client *c)
{
	kv_disconnect(c);
	if (!o->socket)
		bench_kvd_stop(k);
}

int kvb_connect(const struct kvb_opts *o, unsigned model,
		struct kv_client **c, const char *who)
{
	struct kv_connect_params p = {
		.socket_path = o->socket,
		.model_id = o->mdl[model].id,
		.geom = o->mdl[model].geom,
		.sq_entries = o->sq_entries,
		.data_bytes = o->data_bytes,
		.max_context = o->max_context,
	};
	char err[256] = "";
	int ret;

	p.errbuf = err;
	p.errbuf_len = sizeof(err);
	ret = kv_connect(&p, c);
	if (ret)
		fprintf(stderr, "kvbench: %s: %s%s%s\n", who, err,
			err[0] ? ": " : "", strerror(-ret));
	return ret;
}
