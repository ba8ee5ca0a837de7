// SPDX-License-Identifier: MIT
/*
 * kvbench --perf-stat: what kvd itself does per op, counted by the kernel
 * rather than by kvd: `perf stat` attached to kvd's pid counts its system
 * calls (the raw_syscalls:sys_enter tracepoint), page faults (a page
 * first touched, i.e. memory kvd allocates) and context switches, for
 * exactly the measured run. perf starts with its counters off (-D -1)
 * and turns them on and off on command (--control fd:CTL,ACK), so
 * attaching and reporting are outside the window. These are software
 * events and tracepoints: they work where hardware counters do not (a
 * VM). Needs perf(1) and the right to trace kvd (root, or
 * perf_event_paranoid <= 1 for one's own processes).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvd.h"
#include "perf.h"

#define BP_EVENTS	"raw_syscalls:sys_enter,page-faults,context-switches"
#define BP_ACK_MS	5000

static const char *const bp_event[BENCH_PERF_NR] = {
	"raw_syscalls:sys_enter", "page-faults", "context-switches",
};

/* Send @cmd on the control pipe, wait for perf's "ack". 0 or -errno. */
static int bp_command(struct bench_perf *p, const char *cmd)
{
	struct pollfd pf = { .fd = p->ack, .events = POLLIN };
	char buf[16];
	ssize_t n;

	if (write(p->ctl, cmd, strlen(cmd)) != (ssize_t)strlen(cmd))
		return -EPIPE;
	n = poll(&pf, 1, BP_ACK_MS);
	if (n <= 0)
		return n ? -errno : -ETIMEDOUT;
	n = read(p->ack, buf, sizeof(buf) - 1);
	if (n <= 0)
		return -EPIPE;	/* perf exited: cannot trace kvd */
	buf[n] = '\0';
	return strncmp(buf, "ack", 3) ? -EPROTO : 0;
}

static void bp_exec(struct bench_perf *p, int ctl, int ack, pid_t target,
		    pid_t parent)
{
	char ctl_arg[48], pid_arg[16];
	int null = open("/dev/null", O_RDWR);

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	/* perf's own chatter would land in the report: to /dev/null */
	if (null >= 0) {
		dup2(null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
	}
	snprintf(ctl_arg, sizeof(ctl_arg), "fd:%d,%d", ctl, ack);
	snprintf(pid_arg, sizeof(pid_arg), "%d", (int)target);
	execlp("perf", "perf", "stat", "-x", ",", "-o", p->path, "-D", "-1",
	       "--control", ctl_arg, "-e", BP_EVENTS, "-p", pid_arg,
	       (char *)NULL);
	_exit(127);
}

/*
 * bench_perf_start - attach perf stat to @target (kvd) and turn its
 * counters on. 0, or -errno (no perf, not allowed to trace): then
 * nothing runs and *@why says what.
 */
int bench_perf_start(struct bench_perf *p, pid_t target, const char **why)
{
	int ctl[2] = { -1, -1 }, ack[2] = { -1, -1 }, ret;
	pid_t parent = getpid();

	memset(p, 0, sizeof(*p));
	p->pid = -1;
	p->ctl = p->ack = -1;
	*why = "cannot make a temp file";
	if (bench_mkdtemp(p->dir, sizeof(p->dir), "kvbench-perf"))
		return -EIO;
	snprintf(p->path, sizeof(p->path), "%s/stat.csv", p->dir);
	*why = "pipe";
	/* perf's ends must survive exec: no O_CLOEXEC on them */
	if (pipe(ctl) || pipe(ack))
		goto err;
	fcntl(ctl[1], F_SETFD, FD_CLOEXEC);
	fcntl(ack[0], F_SETFD, FD_CLOEXEC);
	fflush(NULL);
	p->pid = fork();
	if (p->pid < 0)
		goto err;
	if (!p->pid) {
		close(ctl[1]);
		close(ack[0]);
		bp_exec(p, ctl[0], ack[1], target, parent);
	}
	close(ctl[0]);
	close(ack[1]);
	p->ctl = ctl[1];
	p->ack = ack[0];
	ret = bp_command(p, "enable\n");
	if (!ret)
		return 0;
	*why = "perf is not installed, or may not trace kvd (perf_event_paranoid)";
	bench_perf_stop(p, NULL);
	return ret;
err:
	ret = -errno;
	for (int i = 0; i < 2; i++) {
		if (ctl[i] >= 0)
			close(ctl[i]);
		if (ack[i] >= 0)
			close(ack[i]);
	}
	rmdir(p->dir);
	return ret;
}

/* One "value,unit,event,..." line of perf's CSV into @c. */
static void bp_parse_line(const char *line, struct bench_perf_counts *c)
{
	const char *ev = strchr(line, ',');
	char *end;
	uint64_t v;

	if (!ev || !(ev = strchr(ev + 1, ',')))
		return;
	ev++;
	v = strtoull(line, &end, 10);
	if (end == line || *end != ',')
		return;		/* "<not counted>", "<not supported>" */
	for (int k = 0; k < BENCH_PERF_NR; k++)
		if (!strncmp(ev, bp_event[k], strlen(bp_event[k])) &&
		    ev[strlen(bp_event[k])] == ',') {
			c->v[k] = v;
			c->have[k] = true;
		}
}

/*
 * bench_perf_stop - turn the counters off, stop perf and read what it
 * counted into @c (NULL: just stop). 0, or -errno when nothing was read.
 */
int bench_perf_stop(struct bench_perf *p, struct bench_perf_counts *c)
{
	char line[256];
	FILE *f;
	int ret = -ENODATA;

	if (p->pid > 0) {
		if (c)
			bp_command(p, "disable\n");
		kill(p->pid, SIGINT);	/* perf writes its report on SIGINT */
		while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	if (p->ctl >= 0)
		close(p->ctl);
	if (p->ack >= 0)
		close(p->ack);
	p->pid = -1;
	p->ctl = p->ack = -1;
	if (c) {
		memset(c, 0, sizeof(*c));
		f = fopen(p->path, "r");
		while (f && fgets(line, sizeof(line), f))
			bp_parse_line(line, c);
		if (f)
			fclose(f);
		for (int k = 0; k < BENCH_PERF_NR; k++)
			if (c->have[k])
				ret = 0;
	}
	unlink(p->path);
	rmdir(p->dir);
	return c ? ret : 0;
}
