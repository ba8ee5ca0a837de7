// SPDX-License-Identifier: MIT
/*
 * kvd's command line through the key table (kvd/options.c, kvd/config.c):
 * sizes and ranges with the messages kvd.conf gives, an unknown option,
 * USER[:GROUP], and precedence: an option given wins over kvd.conf, which
 * wins over the environment and the defaults. User look-ups use root
 * (uid 0, gid 0), which exists everywhere.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "config.h"
#include "kvd.h"
#include "loop.h"

#define GIB	(1ULL << 30)

struct argv_run {
	struct kvd_config	cfg;
	char			err[256];
};

/* kvd_config_argv() on "kvd" and the NULL-terminated options. */
static int run(struct argv_run *r, ...)
{
	char *argv[32] = { "kvd" };
	int argc = 1;
	va_list ap;

	memset(r, 0, sizeof(*r));
	va_start(ap, r);
	while (argc < 31 && (argv[argc] = va_arg(ap, char *)))
		argc++;
	va_end(ap);
	return kvd_config_argv(&r->cfg, argc, argv, r->err, sizeof(r->err));
}

static void expect_err(struct argv_run *r, int ret, const char *msg)
{
	if (ret != -EINVAL || !strstr(r->err, msg)) {
		print_error("ret %d, err \"%s\"; want -EINVAL, \"%s\"\n", ret,
			    r->err, msg);
		fail();
	}
}

static void test_options_values(void **state)
{
	struct argv_run r;

	assert_int_equal(run(&r, "--pool-size", "8G", "-b", "cuda", "-d", "3",
			     "--export", "legacy", "--max-clients", "1024",
			     "--poll-us", "0", "--hugepages", "--extent-size",
			     "4MiB", "--event-loop", "epoll", "-s", "rel.sock",
			     "-c", "/x.conf", "-v", NULL), 0);
	assert_string_equal(r.err, "");
	assert_int_equal(r.cfg.pool_bytes, 8 * GIB);
	assert_int_equal(r.cfg.backend, KV_BACKEND_CUDA);
	assert_int_equal(r.cfg.device, 3);
	assert_int_equal(r.cfg.export_kind, KV_EXPORT_LEGACY);
	assert_int_equal(r.cfg.max_clients, 1024);
	assert_int_equal(r.cfg.poll_us, 0);
	assert_true(r.cfg.hugepages);
	assert_int_equal(r.cfg.extent_bytes, 4ULL << 20);
	assert_int_equal(r.cfg.event_loop, KVD_LOOP_EPOLL);
	assert_string_equal(r.cfg.socket, "rel.sock");	/* relative: fine here */
	assert_string_equal(r.cfg.conf_path, "/x.conf");
	assert_true(r.cfg.verbose);
	assert_true(r.cfg.argv_set & 1ULL << KVD_KEY_POOL_SIZE);
	assert_true(r.cfg.argv_set & 1ULL << KVD_KEY_POLL_US);
	assert_false(r.cfg.argv_set & 1ULL << KVD_KEY_MAX_NAMESPACES);
	/* -p is --pool-size; the later of two options wins. */
	assert_int_equal(run(&r, "-p", "2M", "--pool-size=3g", "-b", "host",
			     "--backend", "auto", NULL), 0);
	assert_int_equal(r.cfg.pool_bytes, 3 * GIB);
	assert_int_equal(r.cfg.backend, KVD_BACKEND_AUTO);
}

/* Each message names the option and says what is wrong, as kvd.conf's. */
static void test_options_errors(void **state)
{
	static const struct {
		const char	*opt, *val, *msg;
	} bad[] = {
		{ "--pool-size", "1M", "--pool-size: '1M' is less than one 2 MiB page (at least 2M)" },
		{ "--pool-size", "lots", "--pool-size: 'lots' is not a size" },
		{ "-p", "-1G", "--pool-size: '-1G' is not a size" },
		{ "--pool-size", "9000000T", "--pool-size: '9000000T' is more than 4294967295 pages" },
		{ "--extent-size", "3M", "--extent-size: '3M' is not a multiple of 2M" },
		{ "--max-clients", "0", "--max-clients: '0' is not a number from 1 to 1024" },
		{ "--max-ring-entries", "4097", "--max-ring-entries: '4097' is not a number from 1 to 4096" },
		{ "--poll-us", "100001", "--poll-us: '100001' is not a number from 0 to 100000" },
		{ "--device", "-1", "--device: '-1' is not a device ordinal" },
		{ "--backend", "tpu", "--backend: unknown backend 'tpu' (host, cuda or auto)" },
		{ "--export", "ipc", "--export: unknown export 'ipc' (vmm or legacy)" },
		{ "--event-loop", "poll", "--event-loop: unknown event loop 'poll' (io_uring, epoll or auto)" },
		{ "--user", "kvd-no-such-user", "--user: unknown user 'kvd-no-such-user'" },
		{ "--user", "root:kvd-no-such-group", "--user: unknown group 'kvd-no-such-group'" },
		{ "--user", "root:", "--user: 'root:' is not USER or USER:GROUP" },
		{ "--user", "3999999999", "--user: uid 3999999999 has no entry in the user database" },
		{ "--frob", NULL, "unknown option '--frob'" },
		{ "--socket_mode", "0600", "unknown option '--socket_mode'" },
		{ "-x", NULL, "unknown option '-x'" },
		{ "--frob=2", NULL, "unknown option '--frob'" },
		{ "--hugepages=yes", NULL, "--hugepages takes no value" },
		{ "--version=1", NULL, "--version takes no value" },
		{ "--max", "1", "'--max' is ambiguous: --max-clients, --max-namespaces, --max-ring-entries, --max-client-blocks" },
		{ "extra", NULL, "unexpected argument 'extra'" },
	};
	struct argv_run r;

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		expect_err(&r, run(&r, bad[i].opt, bad[i].val, NULL),
			   bad[i].msg);
	expect_err(&r, run(&r, "--max-clients", NULL), "--max-clients: no value");
	expect_err(&r, run(&r, "-p", NULL), "--pool-size: no value");
}

static void test_options_user(void **state)
{
	struct argv_run r;

	assert_int_equal(run(&r, "--user", "root", NULL), 0);
	assert_int_equal(r.cfg.user.uid, 0);
	assert_int_equal(r.cfg.user.gid, 0);
	assert_false(r.cfg.user.group);
	assert_string_equal(r.cfg.user.name, "root");
	assert_int_equal(run(&r, "-u", "0:root", NULL), 0);
	assert_int_equal(r.cfg.user.uid, 0);
	assert_true(r.cfg.user.group);
	assert_int_equal(r.cfg.user.gid, 0);
	/* Numbers are ids, with or without an entry, once GROUP is given. */
	assert_int_equal(run(&r, "--user", "4242:4343", NULL), 0);
	assert_int_equal(r.cfg.user.uid, 4242);
	assert_int_equal(r.cfg.user.gid, 4343);
	assert_true(r.cfg.user.group);
	assert_string_equal(r.cfg.user.name, "");
	assert_int_equal(run(&r, "--user", "root:4343", NULL), 0);
	assert_int_equal(r.cfg.user.gid, 4343);
}

/* The command line over kvd.conf over the environment over defaults. */
static void test_options_precedence(void **state)
{
	char path[] = "/tmp/kvd-test-opts-XXXXXX", err[256];
	struct kvd_conf file;
	struct argv_run r;
	FILE *f;
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	assert_non_null(f);
	fputs("pool_size = 4G\nmax_clients = 8\nsocket_mode = 0600\n"
	      "user = root\nsocket = /run/file.sock\n", f);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(kvd_conf_load(path, &file, err, sizeof(err)), 0);
	unlink(path);

	setenv("KVD_EVENT_LOOP", "epoll", 1);
	assert_int_equal(run(&r, "--pool-size", "2G", "--user", "0:0", NULL), 0);
	assert_int_equal(kvd_config_merge(&r.cfg, &file, r.err, sizeof(r.err)), 0);
	assert_int_equal(r.cfg.pool_bytes, 2 * GIB);		/* argv */
	assert_true(r.cfg.user.group);				/* argv */
	assert_int_equal(r.cfg.max_clients, 8);			/* file */
	assert_int_equal(r.cfg.socket_mode, 0600);		/* file */
	assert_string_equal(r.cfg.socket, "/run/file.sock");	/* file */
	assert_int_equal(r.cfg.event_loop, KVD_LOOP_EPOLL);	/* env */
	assert_int_equal(r.cfg.max_namespaces, 64);		/* default */
	assert_int_equal(r.cfg.admin_socket_mode, 0660);
	assert_int_equal(r.cfg.backend, KVD_BACKEND_AUTO);
	assert_int_equal(r.cfg.poll_us, 50);
	assert_string_equal(r.cfg.admin_socket, "");
	assert_true(kvd_config_has(&r.cfg, KVD_KEY_MAX_CLIENTS));
	assert_true(kvd_config_has(&r.cfg, KVD_KEY_EVENT_LOOP));
	assert_false(kvd_config_has(&r.cfg, KVD_KEY_MAX_NAMESPACES));
	assert_false(kvd_config_has(&r.cfg, KVD_KEY_ADMIN_GROUP));
	/* The option beats the variable; a bad variable is named. */
	assert_int_equal(run(&r, "--event-loop", "io_uring", NULL), 0);
	assert_int_equal(kvd_config_merge(&r.cfg, NULL, r.err, sizeof(r.err)), 0);
	assert_int_equal(r.cfg.event_loop, KVD_LOOP_IO_URING);
	assert_int_equal(r.cfg.pool_bytes, GIB);
	setenv("KVD_EVENT_LOOP", "", 1);		/* empty: unset */
	assert_int_equal(run(&r, NULL), 0);
	assert_int_equal(kvd_config_merge(&r.cfg, NULL, r.err, sizeof(r.err)), 0);
	assert_int_equal(r.cfg.event_loop, KVD_LOOP_AUTO);
	setenv("KVD_EVENT_LOOP", "uring", 1);
	assert_int_equal(run(&r, NULL), 0);
	expect_err(&r, kvd_config_merge(&r.cfg, NULL, r.err, sizeof(r.err)),
		   "KVD_EVENT_LOOP: unknown event loop 'uring'");
	unsetenv("KVD_EVENT_LOOP");
	kvd_conf_free(&file);
}

/* --help lists every option from the table, and no kvd.conf-only key. */
static void test_options_help(void **state)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	kvd_config_usage(f);
	fclose(f);
	assert_non_null(strstr(buf, "usage: kvd [options]\n"));
	assert_non_null(strstr(buf, "  -p, --pool-size SIZE   pool bytes"));
	assert_non_null(strstr(buf, "      --hugepages        back the host"));
	assert_non_null(strstr(buf, "--user USER[:GROUP]"));
	assert_non_null(strstr(buf, "  -h, --help\n"));
	assert_null(strstr(buf, "socket_mode"));
	assert_null(strstr(buf, "admin_group"));
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_options_values),
		cmocka_unit_test(test_options_errors),
		cmocka_unit_test(test_options_user),
		cmocka_unit_test(test_options_precedence),
		cmocka_unit_test(test_options_help),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
