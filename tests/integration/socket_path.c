// SPDX-License-Identifier: MIT
/*
 * kvd's socket paths are the user's to choose, and what is there is not
 * kvd's to take: a regular file, a directory or a symbolic link at the
 * client or admin socket path (or at a lock file's) makes kvd refuse,
 * naming the path, and leaves it intact; at exit kvd removes only the
 * socket it bound, not a file put in its place. A stale socket of a
 * dead kvd is still replaced.
 */
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define NOTE	"the user's notes: kvd must not touch them\n"

static char dir[64];

static void t_write(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	T_ASSERT(fd >= 0);
	T_EQ(write(fd, text, strlen(text)), (long long)strlen(text));
	close(fd);
}

static void t_read(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY);
	ssize_t n;

	T_ASSERT(fd >= 0);
	n = read(fd, buf, len - 1);
	T_ASSERT(n >= 0);
	buf[n] = 0;
	close(fd);
}

/* Run kvd on @sock and @admin to its end (at most 10 s); its stderr in @err. */
static int t_kvd_run(const char *sock, const char *admin, char *err,
		     size_t len)
{
	char log[128];
	int status, fd;
	pid_t pid;

	snprintf(log, sizeof(log), "%s/kvd.err", dir);
	pid = fork();
	T_ASSERT(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd >= 0)
			dup2(fd, 2);
		execl(t_bin("kvd"), "kvd", "--backend", "host", "--pool-size",
		      "16M", "--socket", sock, "--admin-socket", admin,
		      (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 1000; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid) {
			t_read(log, err, len);
			unlink(log);
			return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
		}
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	T_FAIL("kvd started on %s or %s, which it must refuse", sock, admin);
}

/* kvd refuses @bad (the socket or the admin path), naming it. */
static void t_refused(const char *sock, const char *admin, const char *bad)
{
	char err[4096];
	int rc = t_kvd_run(sock, admin, err, sizeof(err));

	if (rc == 0 || !strstr(err, bad) || !strstr(err, "not a socket"))
		T_FAIL("kvd exit %d on %s, stderr:\n%s", rc, bad, err);
}

static void t_intact(const char *path)
{
	char buf[256], lock[192];
	struct stat st;

	T_ASSERT(!lstat(path, &st) && S_ISREG(st.st_mode));
	t_read(path, buf, sizeof(buf));
	T_ASSERT(!strcmp(buf, NOTE));
	/* refused before any lock file was made beside it */
	snprintf(lock, sizeof(lock), "%s.lock", path);
	T_ASSERT(lstat(lock, &st) && errno == ENOENT);
}

static void test_socket_path_refuses_files(void)
{
	char file[128], sub[128], sock[128], admin[128];
	struct stat st;

	snprintf(file, sizeof(file), "%s/notes.txt", dir);
	snprintf(sub, sizeof(sub), "%s/subdir", dir);
	snprintf(sock, sizeof(sock), "%s/kvd.sock", dir);
	snprintf(admin, sizeof(admin), "%s/kvd-admin.sock", dir);
	t_write(file, NOTE);
	T_EQ(mkdir(sub, 0755), 0);

	t_refused(file, admin, file);
	t_intact(file);
	t_refused(sock, file, file);
	t_intact(file);
	t_refused(sub, admin, sub);
	t_refused(sock, sub, sub);
	T_ASSERT(!lstat(sub, &st) && S_ISDIR(st.st_mode));
	/* nothing of kvd's was left either */
	T_ASSERT(lstat(sock, &st) && lstat(admin, &st));
}

/* A symbolic link as a lock file: refused, its target never made. */
static void test_socket_path_refuses_lock_link(void)
{
	char sock[128], admin[128], lock[160], target[128], err[4096];
	struct stat st;
	int rc;

	snprintf(sock, sizeof(sock), "%s/l.sock", dir);
	snprintf(admin, sizeof(admin), "%s/l-admin.sock", dir);
	snprintf(lock, sizeof(lock), "%s.lock", sock);
	snprintf(target, sizeof(target), "%s/elsewhere", dir);
	T_EQ(symlink(target, lock), 0);
	rc = t_kvd_run(sock, admin, err, sizeof(err));
	if (rc == 0 || !strstr(err, lock))
		T_FAIL("kvd exit %d with %s a symlink, stderr:\n%s", rc, lock,
		       err);
	T_ASSERT(lstat(target, &st) && errno == ENOENT);
	unlink(lock);
}

/* A file put where kvd's socket was survives kvd's exit. */
static void test_socket_path_exit_keeps_replacement(void)
{
	struct t_kvd k;
	char tmp[160], buf[256];
	struct stat st;
	int status;

	t_kvd_start(&k, "16M", NULL);
	snprintf(tmp, sizeof(tmp), "%s/new", k.dir);
	t_write(tmp, NOTE);
	T_EQ(rename(tmp, k.sock), 0);
	kill(k.pid, SIGTERM);
	T_EQ(waitpid(k.pid, &status, 0), k.pid);
	k.pid = 0;
	T_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	T_ASSERT(!lstat(k.sock, &st) && S_ISREG(st.st_mode));
	t_read(k.sock, buf, sizeof(buf));
	T_ASSERT(!strcmp(buf, NOTE));
	T_ASSERT(lstat(k.admin, &st) && errno == ENOENT);
	t_cleanup_dir(&k);
}

/* A socket a dead kvd left is replaced, as before. */
static void test_socket_path_replaces_stale(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct t_kvd k;
	int fd;

	t_kvd_start(&k, "16M", NULL);
	kill(k.pid, SIGKILL);
	waitpid(k.pid, NULL, 0);
	k.pid = 0;
	/* as if kvd had died before removing it */
	unlink(k.sock);
	T_ASSERT(strlen(k.sock) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, k.sock, strlen(k.sock) + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	T_EQ(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	t_kvd_restart(&k, "16M", NULL);
	t_kvd_stop(&k);
}

/*
 * A live kvd's socket whose lock file is gone (a tmp cleaner): a second
 * kvd must not take the path from under it (it used to unlink the
 * socket, and the first kvd's clients got ENOENT).
 */
static void test_socket_path_keeps_live_socket(void)
{
	char admin2[160], lock[160], err[4096];
	struct t_kvd k;
	struct stat st;
	int rc;

	t_kvd_start(&k, "16M", NULL);
	snprintf(lock, sizeof(lock), "%s.lock", k.sock);
	T_EQ(unlink(lock), 0);
	snprintf(admin2, sizeof(admin2), "%s/admin2.sock", k.dir);
	rc = t_kvd_run(k.sock, admin2, err, sizeof(err));
	if (rc == 0 || !strstr(err, k.sock) || !strstr(err, "listening"))
		T_FAIL("second kvd exit %d on a live socket, stderr:\n%s", rc,
		       err);
	T_ASSERT(!lstat(k.sock, &st) && S_ISSOCK(st.st_mode));
	t_kvd_stop(&k);
}

/* One file spelled two ways is one path: not a second kvd's lock. */
static void test_socket_path_same_file_two_spellings(void)
{
	char sock[128], admin[160], err[4096];
	int rc;

	snprintf(sock, sizeof(sock), "%s/x.sock", dir);
	snprintf(admin, sizeof(admin), "%s/./x.sock", dir);
	rc = t_kvd_run(sock, admin, err, sizeof(err));
	if (rc == 0 || !strstr(err, "must differ"))
		T_FAIL("kvd exit %d on %s and %s, stderr:\n%s", rc, sock,
		       admin, err);
	snprintf(admin, sizeof(admin), "%s//x.sock", dir);
	rc = t_kvd_run(sock, admin, err, sizeof(err));
	if (rc == 0 || !strstr(err, "must differ"))
		T_FAIL("kvd exit %d on %s and %s, stderr:\n%s", rc, sock,
		       admin, err);
}

static void t_rm_dir(void)
{
	char cmd[128];

	if (!dir[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	(void)!system(cmd);
	dir[0] = 0;
}

int main(void)
{
	snprintf(dir, sizeof(dir), "/tmp/kvd-test.XXXXXX");
	if (!mkdtemp(dir))
		T_FAIL("mkdtemp");
	atexit(t_rm_dir);
	test_socket_path_refuses_files();
	test_socket_path_refuses_lock_link();
	test_socket_path_same_file_two_spellings();
	t_rm_dir();
	test_socket_path_exit_keeps_replacement();
	test_socket_path_replaces_stale();
	test_socket_path_keeps_live_socket();
	return 0;
}
