// SPDX-License-Identifier: MIT
/*
 * Hostile and careless input: each bad request gets an error CQE or a
 * closed connection; the daemon and a bystander client are unaffected,
 * and nothing leaks (kvctl shows the books back at zero).
 */
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"

static struct t_kvd k;
static struct kv_client *bystander;
static kv_block_t by_ids[4];

/* One raw SQE through the async interface; returns its CQE res. */
static int raw_sqe(struct kv_client *c, const struct kv_sqe *proto)
{
	struct kv_sqe *sqe = kv_get_sqe(c);
	struct kv_cqe *cqe;
	int res;

	T_ASSERT(sqe);
	*sqe = *proto;
	T_EQ(kv_submit(c), 1);
	T_EQ(kv_wait_cqe(c, &cqe), 0);
	res = cqe->res;
	kv_cqe_seen(c, cqe);
	return res;
}

/* The bystander must still be served, its blocks intact. */
static void bystander_ok(void)
{
	struct kv_stats st;

	T_EQ(kv_nop(bystander), 0);
	T_EQ(kv_stats(bystander, &st), 0);
	T_EQ(st.client_blocks, 4);
	for (int i = 0; i < 4; i++)
		T_EQ(*(uint32_t *)kv_block_ptr(bystander, by_ids[i]), 0xb0b0 + i);
}

static void bad_sqes(struct kv_client *c)
{
	struct kv_sqe s;
	uint32_t data = kv_data_bytes(c);

	memset(&s, 0, sizeof(s));
	s.opcode = 200;
	T_EQ(raw_sqe(c, &s), -EOPNOTSUPP);
	memset(&s, 0, sizeof(s));
	s.opcode = KV_OP__MAX;
	T_EQ(raw_sqe(c, &s), -EOPNOTSUPP);

	memset(&s, 0, sizeof(s));
	kv_prep_alloc(&s, data, 4);		/* just past the data area */
	T_EQ(raw_sqe(c, &s), -EFAULT);
	kv_prep_alloc(&s, data - 8, 4);		/* straddles its end */
	T_EQ(raw_sqe(c, &s), -EFAULT);
	kv_prep_alloc(&s, 0, 0x40000000);	/* nr * 4 overflows 32 bits */
	T_EQ(raw_sqe(c, &s), -EFAULT);
	kv_prep_alloc(&s, 0xfffffffc, 4);
	T_EQ(raw_sqe(c, &s), -EFAULT);
	kv_prep_alloc(&s, 2, 4);		/* misaligned */
	T_EQ(raw_sqe(c, &s), -EINVAL);
	kv_prep_alloc(&s, 0, 0);		/* n = 0 */
	T_EQ(raw_sqe(c, &s), -EINVAL);
	kv_prep_alloc(&s, 0, 4);
	s.flags = 0x80;
	T_EQ(raw_sqe(c, &s), -EINVAL);
	s.flags = 0;
	s.resv2 = 1;
	T_EQ(raw_sqe(c, &s), -EINVAL);
	s.resv2 = 0;
	s.args[3] = 7;
	T_EQ(raw_sqe(c, &s), -EINVAL);
	/* 64-bit offsets in args[] must not wrap past the check. */
	memset(&s, 0, sizeof(s));
	kv_prep_lookup(&s, 0, 1, 0);
	s.args[0] = UINT64_MAX - 3;
	T_EQ(raw_sqe(c, &s), -EFAULT);
	kv_prep_alloc_prefix(&s, 0, 1, 1, 0);
	s.args[0] = UINT64_MAX - 15;
	T_EQ(raw_sqe(c, &s), -EFAULT);
	kv_prep_alloc_prefix(&s, 4, 1, 1, 0);	/* hashes need 8 alignment */
	T_EQ(raw_sqe(c, &s), -EINVAL);
	kv_prep_alloc_prefix(&s, 0, 2, 1, 0);	/* more hashes than blocks */
	T_EQ(raw_sqe(c, &s), -EINVAL);
	memset(&s, 0, sizeof(s));
	kv_prep_commit(&s, 4, 1);		/* entries need 8 alignment */
	T_EQ(raw_sqe(c, &s), -EINVAL);
	kv_prep_commit(&s, data - 40, 2);
	T_EQ(raw_sqe(c, &s), -EFAULT);
	memset(&s, 0, sizeof(s));
	kv_prep_stats(&s, 0);
	s.nr = 8;				/* too small for kv_stats */
	T_EQ(raw_sqe(c, &s), -EINVAL);
	memset(&s, 0, sizeof(s));
	kv_prep_nop(&s);
	s.nr = 1;
	T_EQ(raw_sqe(c, &s), -EINVAL);
}

static void bad_ids(struct kv_client *c)
{
	struct kv_pool_info info;
	kv_block_t ids[3], mine[2];

	kv_pool_info(c, &info);
	/* The bystander's blocks are not ours: -EPERM, and they survive. */
	T_EQ(kv_release(c, by_ids, 4), -EPERM);
	T_EQ(kv_ref(c, by_ids, 1), -EPERM);
	ids[0] = info.max_blocks;
	T_EQ(kv_release(c, ids, 1), -EINVAL);
	ids[0] = 0xffffffff;
	T_EQ(kv_ref(c, ids, 1), -EINVAL);
	/* Releasing one block twice when held once fails as a whole. */
	T_EQ(kv_alloc(c, 2, mine), 2);
	ids[0] = mine[0];
	ids[1] = mine[1];
	ids[2] = mine[0];
	T_EQ(kv_release(c, ids, 3), -EPERM);
	T_EQ(kv_release(c, mine, 2), 2);
	T_EQ(kv_release(c, mine, 1), -EPERM);	/* already released */
}

static void exhaust(struct kv_client *c)
{
	struct kv_pool_info info;
	static kv_block_t ids[8192];
	kv_block_t one;
	int got = 0, ret;

	kv_pool_info(c, &info);
	T_EQ(kv_alloc(c, info.max_blocks + 1, ids), -E2BIG);
	while ((ret = kv_alloc(c, 100, ids + got)) == 100)
		got += 100;
	T_EQ(ret, -ENOSPC);			/* all or nothing */
	while ((ret = kv_alloc(c, 1, ids + got)) == 1)
		got++;
	T_EQ(ret, -ENOSPC);
	T_EQ(got + 4, info.max_blocks);		/* bystander has 4 */
	T_EQ(kv_alloc(bystander, 1, &one), -ENOSPC);
	T_EQ(kv_release(c, ids, got), got);
	T_EQ(kv_alloc(bystander, 1, &one), 1);
	T_EQ(kv_release(bystander, &one, 1), 1);
}

/* Fill the SQ many times over without reaping; nothing is lost. */
static void flood(struct kv_client *c)
{
	unsigned submitted = 0, reaped = 0;
	struct kv_cqe *cqe;

	for (int round = 0; round < 8; round++) {
		struct kv_sqe *sqe;

		while ((sqe = kv_get_sqe(c))) {
			kv_prep_nop(sqe);
			kv_sqe_set_data64(sqe, submitted++);
		}
		/* 0 when kvd has not freed SQ slots since: it is stalled */
		T_ASSERT(kv_submit(c) >= 0);
		bystander_ok();		/* served while the flood waits */
		/* reap a few only: the CQ stays nearly full */
		for (int i = 0; i < 64 && kv_peek_cqe(c, &cqe) == 0; i++) {
			T_EQ(cqe->user_data, reaped);
			T_EQ(cqe->res, 0);
			reaped++;
			kv_cqe_seen(c, cqe);
		}
	}
	while (reaped < submitted) {
		T_EQ(kv_wait_cqe(c, &cqe), 0);
		T_EQ(cqe->user_data, reaped);
		reaped++;
		kv_cqe_seen(c, cqe);
	}
	T_EQ(kv_peek_cqe(c, &cqe), -EAGAIN);
}

/* Send raw bytes as HELLO; returns WELCOME status, or 1 if closed. */
static int raw_hello(const void *buf, size_t len, char *errmsg)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kv_welcome w;
	ssize_t n;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);

	strcpy(sa.sun_path, k.sock);
	T_EQ(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	T_EQ(send(fd, buf, len, 0), (ssize_t)len);
	memset(&w, 0, sizeof(w));
	n = recv(fd, &w, sizeof(w), 0);
	close(fd);
	if (n <= 0)
		return 1;
	/* the WELCOME of the HELLO's ABI minor (3.2's is shorter) */
	T_ASSERT(n == sizeof(w) || n == KV_WELCOME_SIZE_3_2);
	if (errmsg)
		strcpy(errmsg, w.errmsg);
	return w.status;
}

/* A HELLO that carries a file descriptor: refused, the fd not kept. */
static void hello_with_fd(const struct kv_hello *h)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { .iov_base = (void *)h, .iov_len = sizeof(*h) };
	struct msghdr msg = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cbuf, .msg_controllen = sizeof(cbuf),
	};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0), pass = 0;
	struct kv_welcome w;

	strcpy(sa.sun_path, k.sock);
	T_EQ(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &pass, sizeof(int));	/* our stdin */
	T_EQ(sendmsg(fd, &msg, 0), (ssize_t)sizeof(*h));
	T_EQ(recv(fd, &w, sizeof(w), 0), 0);		/* closed, no WELCOME */
	close(fd);
}

static void bad_hellos(void)
{
	struct kv_hello h;
	char junk[300], msg[KV_ERRMSG_MAX];

	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (char)(i * 37 + 11);
	T_EQ(raw_hello(junk, sizeof(junk), NULL), -EPROTO);	/* oversized */
	T_EQ(raw_hello(junk, 5, NULL), -EPROTO);
	T_EQ(raw_hello(junk, sizeof(h), NULL), -EPROTO);	/* bad magic */

	memset(&h, 0, sizeof(h));
	h.magic = KV_MAGIC;
	h.abi_major = KV_ABI_MAJOR + 1;
	h.type = KV_MSG_HELLO;
	h.size = sizeof(h);
	h.sq_entries = 64;
	h.data_bytes = 65536;
	strcpy(h.model_id, "m");
	h.geom = t_geom();
	T_EQ(raw_hello(&h, sizeof(h), msg), -EPROTO);
	T_ASSERT(strstr(msg, "ABI version mismatch"));
	h.abi_major = KV_ABI_MAJOR;
	h.sq_entries = 100;					/* not pow2 */
	T_EQ(raw_hello(&h, sizeof(h), NULL), -EINVAL);
	h.sq_entries = 64;
	h.model_id[0] = 0;
	T_EQ(raw_hello(&h, sizeof(h), NULL), -EINVAL);
	memset(h.model_id, 'x', sizeof(h.model_id));		/* no NUL */
	T_EQ(raw_hello(&h, sizeof(h), NULL), -EINVAL);
	strcpy(h.model_id, "m");
	h.geom.dtype = 99;
	T_EQ(raw_hello(&h, sizeof(h), msg), -EINVAL);
	T_ASSERT(strstr(msg, "dtype"));
	h.geom = t_geom();
	memset(h.model_rev, 'r', sizeof(h.model_rev));		/* no NUL */
	T_EQ(raw_hello(&h, sizeof(h), NULL), -EINVAL);
	memset(h.model_rev, 0, sizeof(h.model_rev));
	h.flags = 1;
	T_EQ(raw_hello(&h, sizeof(h), NULL), -EINVAL);
	h.flags = 0;
	h.geom.tp_size = 2;
	h.geom.tp_rank = 2;					/* rank >= size */
	T_EQ(raw_hello(&h, sizeof(h), msg), -EINVAL);
	T_ASSERT(strstr(msg, "tp_rank"));
	h.geom.tp_rank = 0;
	h.geom.tp_size = 0;
	h.geom.layers = 100000;
	T_EQ(raw_hello(&h, sizeof(h), NULL), -EINVAL);
	h.geom = t_geom();
	strcpy(h.model_id, "bad\x1b[2Jname");			/* escapes */
	T_EQ(raw_hello(&h, sizeof(h), msg), -EINVAL);
	T_ASSERT(strstr(msg, "printable"));
	strcpy(h.model_id, "m");
	T_EQ(raw_hello(&h, sizeof(h), NULL), 0);		/* sane one */
	hello_with_fd(&h);
}

/* One SQE may name at most KV_MAX_IDS ids, however big the data area. */
static void too_many_ids(void)
{
	struct kv_connect_params p = { 0 };
	struct kv_client *c;
	struct kv_sqe s;
	static kv_block_t ids[KV_MAX_IDS + 1];

	p.socket_path = k.sock;
	p.model_id = "model-a";
	p.geom = t_geom();
	p.data_bytes = 1 << 20;
	T_EQ(kv_connect(&p, &c), 0);
	memset(&s, 0, sizeof(s));
	kv_prep_alloc(&s, 0, KV_MAX_IDS + 1);
	T_EQ(raw_sqe(c, &s), -E2BIG);
	kv_prep_release(&s, 0, KV_MAX_IDS + 1);
	T_EQ(raw_sqe(c, &s), -E2BIG);
	T_EQ(kv_alloc(c, KV_MAX_IDS + 1, ids), -E2BIG);
	T_EQ(kv_disconnect(c), 0);
}

/* Idle namespaces are freed: more models over time than slots. */
static void many_models(void)
{
	struct kv_client *c;
	kv_block_t id;
	char name[32];

	for (int i = 0; i < 80; i++) {	/* kvd has 64 namespace slots */
		snprintf(name, sizeof(name), "model-%d", i);
		T_EQ(t_connect(&k, name, NULL, &c), 0);
		T_EQ(kv_alloc(c, 1, &id), 1);
		T_EQ(kv_disconnect(c), 0);
		/* kvd frees it once it saw the close; wait for that */
		for (int j = 0; j < 200; j++) {
			char *js = t_kvctl(&k, "status");
			long long n = t_json_int(js, "nr_namespaces");

			free(js);
			if (n == 1)	/* only the bystander's */
				break;
			usleep(5000);
		}
	}
}

static void library_checks(void)
{
	struct kv_connect_params p = { 0 };
	struct kv_client *c;
	char err[160] = "";

	T_EQ(kv_connect(NULL, &c), -EINVAL);
	p.socket_path = k.sock;
	T_EQ(kv_connect(&p, &c), -EINVAL);		/* no model */
	p.model_id = "m";
	p.geom = t_geom();
	p.sq_entries = 3;
	T_EQ(kv_connect(&p, &c), -EINVAL);
	p.sq_entries = 0;
	p.geom.layers = 1;	/* 12-byte blocks: not a multiple of 256 */
	p.geom.kv_heads = 1;
	p.geom.block_tokens = 1;
	p.geom.head_dim = 3;
	p.errbuf = err;
	p.errbuf_len = sizeof(err);
	T_EQ(kv_connect(&p, &c), -EINVAL);
	T_ASSERT(strstr(err, "multiple of 256"));
	p.geom = t_geom();
	p.socket_path = "/nonexistent/kvd.sock";
	T_EQ(kv_connect(&p, &c), -ENOENT);
	T_ASSERT(c == NULL);
}

/*
 * A client cannot resize the sealed pool extents under everybody else.
 * The library closes extent fds once mapped; reach one through
 * /proc/self/map_files (root only), else skip this check.
 */
static void pool_sealed(struct kv_client *c)
{
	char line[512], path[160];
	FILE *f = fopen("/proc/self/maps", "r");
	int fd = -1;

	T_ASSERT(f);
	while (fd < 0 && fgets(line, sizeof(line), f)) {
		char range[64];

		if (!strstr(line, "memfd:kvd-pool") ||
		    sscanf(line, "%63s", range) != 1)
			continue;
		snprintf(path, sizeof(path), "/proc/self/map_files/%s", range);
		fd = open(path, O_RDWR);
		if (fd < 0 && errno == EPERM)
			break;
	}
	fclose(f);
	if (fd < 0) {
		fprintf(stderr, "no access to map_files: seal check skipped\n");
		return;
	}
	T_ASSERT(ftruncate(fd, 0) != 0);
	T_EQ(errno, EPERM);
	close(fd);
	(void)c;
}

int main(void)
{
	struct kv_client *c;
	char *js;

	t_kvd_start(&k, "32M", NULL);
	T_EQ(t_connect(&k, "model-a", NULL, &bystander), 0);
	T_EQ(kv_alloc(bystander, 4, by_ids), 4);
	for (int i = 0; i < 4; i++)
		*(uint32_t *)kv_block_ptr(bystander, by_ids[i]) = 0xb0b0 + i;

	T_EQ(t_connect(&k, "model-a", NULL, &c), 0);
	bad_sqes(c);
	bystander_ok();
	bad_ids(c);
	bystander_ok();
	exhaust(c);
	bystander_ok();
	flood(c);
	bystander_ok();
	bad_hellos();
	bystander_ok();
	library_checks();
	too_many_ids();
	many_models();
	bystander_ok();
	pool_sealed(c);
	bystander_ok();
	T_EQ(kv_disconnect(c), 0);

	T_EQ(kv_release(bystander, by_ids, 4), 4);
	T_EQ(kv_disconnect(bystander), 0);
	js = t_status_idle(&k);
	T_EQ(t_json_int(js, "nr_namespaces"), 0);	/* idle: freed */
	T_EQ(t_json_int(js, "pages_used"), 0);
	free(js);
	t_kvd_stop(&k);
	return 0;
}
