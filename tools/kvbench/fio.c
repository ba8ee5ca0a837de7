// SPDX-License-Identifier: MIT
/*
 * --disk-tier-size: fio's sequential read bandwidth on the file system
 * of the disk tier's file, in the same run as the promotion pass, to
 * set the pass's bandwidth against what the disk itself delivers:
 *
 *   fio --filename=DIR/kvbench-fio.XXXXXX --rw=read --direct=1
 *       --ioengine=io_uring --iodepth=D --size=S --output-format=json
 *       --name=kvd-read --bs=B --name=1m --bs=1M --stonewall
 *
 * B is what kvd reads per block (its header and bytes in whole 4 KiB
 * units), D the reads kvd's staging buffer holds at once (at most its
 * ring's 256 entries), S the bytes the pass promoted, at least 256 MiB.
 * The file is made (mkstemp, so nothing there is overwritten) and
 * removed here, and on SIGINT, SIGTERM or SIGHUP; fio's JSON and log go
 * to kvbench's temp dir. Without fio, or when it fails, the report says
 * so and the run goes on.
 */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvd.h"
#include "promote.h"

#define FIO_MIN_SIZE	(256ULL << 20)
#define FIO_MARGIN	(256ULL << 20)	/* left free on the file system */

/* fio in $PATH, into @buf; false when there is none. */
static bool fio_find(char *buf, size_t len)
{
	const char *path = getenv("PATH");
	const char *p = path && *path ? path : "/usr/bin:/bin";

	while (*p) {
		size_t n = strcspn(p, ":");

		if (n && snprintf(buf, len, "%.*s/fio", (int)n, p) < (int)len &&
		    !access(buf, X_OK))
			return true;
		p += n + (p[n] == ':');
	}
	return false;
}

static void fio_exec(const char *bin, char **argv, const char *log,
		     pid_t parent)
{
	int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	if (fd >= 0) {
		dup2(fd, 1);
		dup2(fd, 2);
	}
	execv(bin, argv);
	fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
	_exit(127);
}

/* fio's exit status, or -1 when it could not run. */
static int fio_run(const char *bin, char **argv, const char *log)
{
	pid_t parent = getpid(), pid;
	int st;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -1;
	if (!pid)
		fio_exec(bin, argv, log, parent);
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* jobs[@i].read.bw_bytes of fio's JSON; 0 when it is not there. */
static double job_bw(struct json_object *root, size_t i)
{
	struct json_object *jobs, *job, *rd, *bw;

	if (!json_object_object_get_ex(root, "jobs", &jobs) ||
	    !json_object_is_type(jobs, json_type_array) ||
	    json_object_array_length(jobs) <= i)
		return 0;
	job = json_object_array_get_idx(jobs, i);
	if (!json_object_object_get_ex(job, "read", &rd) ||
	    !json_object_object_get_ex(rd, "bw_bytes", &bw))
		return 0;
	return json_object_get_double(bw);
}

/* The last line of fio's log, for the report's why. */
static void log_tail(const char *log, char *why, size_t len)
{
	char line[256], last[sizeof(line)] = "";
	FILE *f = fopen(log, "r");

	while (f && fgets(line, sizeof(line), f))
		if (line[strspn(line, " \t\r\n")])
			snprintf(last, sizeof(last), "%s", line);
	if (f)
		fclose(f);
	last[strcspn(last, "\r\n")] = 0;
	/* the line cut to what the report has room for */
	snprintf(why, len, "%.*s", (int)(len ? len - 1 : 0),
		 last[0] ? last : "no output");
}

/* The bytes to read: the pass's, at least FIO_MIN_SIZE, whole MiB. */
static int fio_size(struct kvb_promo *p)
{
	uint64_t want = p->promotions * p->block_bytes, room;
	struct statvfs sv;

	if (want < FIO_MIN_SIZE)
		want = FIO_MIN_SIZE;
	want = (want + (1ULL << 20) - 1) & ~((1ULL << 20) - 1);
	if (statvfs(p->fio_dir, &sv)) {
		snprintf(p->fio_why, sizeof(p->fio_why), "statvfs: %s",
			 strerror(errno));
		return -1;
	}
	room = (uint64_t)sv.f_bavail * sv.f_frsize;
	if (room < want + FIO_MARGIN) {
		snprintf(p->fio_why, sizeof(p->fio_why),
			 "its file system has %llu MiB free, fio needs %llu MiB and 256 MiB to spare",
			 (unsigned long long)(room >> 20),
			 (unsigned long long)(want >> 20));
		return -1;
	}
	p->fio_size = want;
	return 0;
}

void kvb_fio_seqread(struct kvb_promo *p, const char *tmpdir)
{
	char bin[4096], file[KVB_PATH_MAX + 32], out[128], log[128];
	char a_file[KVB_PATH_MAX + 48], a_depth[32], a_size[40], a_out[160];
	char a_bs[40];
	char *argv[] = {
		bin, a_file, "--rw=read", "--direct=1", "--ioengine=io_uring",
		a_depth, a_size, "--output-format=json", a_out,
		"--name=kvd-read", a_bs, "--name=1m", "--bs=1M", "--stonewall",
		NULL,
	};
	struct json_object *root;
	int fd, rc;

	p->fio = KVB_FIO_FAILED;
	p->fio_bs = p->read_bytes;
	if (!fio_find(bin, sizeof(bin))) {
		p->fio = KVB_FIO_ABSENT;
		snprintf(p->fio_why, sizeof(p->fio_why),
			 "fio is not installed (Debian: apt-get install fio)");
		return;
	}
	if (fio_size(p))
		return;
	snprintf(file, sizeof(file), "%s/kvbench-fio.XXXXXX", p->fio_dir);
	fd = mkstemp(file);
	if (fd < 0) {
		snprintf(p->fio_why, sizeof(p->fio_why), "a file there: %s",
			 strerror(errno));
		return;
	}
	close(fd);
	bench_unlink_on_signal(file);
	snprintf(out, sizeof(out), "%s/fio.json", tmpdir);
	snprintf(log, sizeof(log), "%s/fio.log", tmpdir);
	snprintf(a_file, sizeof(a_file), "--filename=%s", file);
	snprintf(a_depth, sizeof(a_depth), "--iodepth=%u", p->depth);
	snprintf(a_size, sizeof(a_size), "--size=%llu",
		 (unsigned long long)p->fio_size);
	snprintf(a_out, sizeof(a_out), "--output=%s", out);
	snprintf(a_bs, sizeof(a_bs), "--bs=%llu",
		 (unsigned long long)p->fio_bs);
	rc = fio_run(bin, argv, log);
	unlink(file);
	bench_unlink_on_signal(NULL);
	root = rc ? NULL : json_object_from_file(out);
	if (root) {
		p->fio_bw = job_bw(root, 0);
		p->fio_bw_1m = job_bw(root, 1);
		json_object_put(root);
	}
	if (!rc && p->fio_bw > 0 && p->fio_bw_1m > 0) {
		p->fio = KVB_FIO_OK;
		return;
	}
	if (rc) {
		log_tail(log, p->fio_why, sizeof(p->fio_why) - 24);
		snprintf(p->fio_why + strlen(p->fio_why), 24, " (exit %d)", rc);
	} else {
		snprintf(p->fio_why, sizeof(p->fio_why),
			 "no read bandwidth in fio's JSON");
	}
	fprintf(stderr, "kvbench: fio on %s: %s\n", p->fio_dir, p->fio_why);
}
