// SPDX-License-Identifier: MIT
/*
 * kvctl events: follow kvd's KV events (kvd --kv-events) as JSON lines,
 * one per event: its topic (the model), the batch's sequence number and
 * time, its type and its fields named as vLLM names them (BlockStored,
 * BlockRemoved, AllBlocksCleared of vllm/distributed/kv_events.py),
 * hashes in hex. A ZMQ SUB socket; msgpack decoded by msgpack-c.
 */
#include <errno.h>
#include <msgpack.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "kvevents.h"

/* The fields after the tag, in vLLM's order (array_like structs). */
static const char *const stored_f[] = { "block_hashes", "parent_block_hash",
	"token_ids", "block_size", "lora_id", "medium", "lora_name",
	"extra_keys" };
static const char *const removed_f[] = { "block_hashes", "medium" };

static volatile sig_atomic_t stop;

static void on_int(int sig)
{
	(void)sig;
	stop = 1;
}

static void put_str(const char *s, size_t n)
{
	putchar('"');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

/* Any msgpack value as JSON; bytes (hashes) as a hex string. */
static void put_obj(const msgpack_object *o)
{
	switch (o->type) {
	case MSGPACK_OBJECT_NIL:
		fputs("null", stdout);
		break;
	case MSGPACK_OBJECT_BOOLEAN:
		fputs(o->via.boolean ? "true" : "false", stdout);
		break;
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		printf("%llu", (unsigned long long)o->via.u64);
		break;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		printf("%lld", (long long)o->via.i64);
		break;
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64:
		printf("%.6f", o->via.f64);
		break;
	case MSGPACK_OBJECT_STR:
		put_str(o->via.str.ptr, o->via.str.size);
		break;
	case MSGPACK_OBJECT_BIN:
		putchar('"');
		for (uint32_t i = 0; i < o->via.bin.size; i++)
			printf("%02x", (unsigned char)o->via.bin.ptr[i]);
		putchar('"');
		break;
	case MSGPACK_OBJECT_ARRAY:
		putchar('[');
		for (uint32_t i = 0; i < o->via.array.size; i++) {
			if (i)
				putchar(',');
			put_obj(&o->via.array.ptr[i]);
		}
		putchar(']');
		break;
	default:
		fputs("null", stdout);	/* maps, ext: not in these events */
	}
}

static bool is_str(const msgpack_object *o, const char *s)
{
	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
	       !memcmp(o->via.str.ptr, s, o->via.str.size);
}

/* One event [tag, fields...] of a batch, as a JSON line. */
static void put_event(const char *topic, uint64_t seq, double ts,
		      const msgpack_object *ev)
{
	const msgpack_object *a = ev->via.array.ptr;
	const char *const *f = NULL;
	uint32_t nf = 0;

	if (ev->type != MSGPACK_OBJECT_ARRAY || !ev->via.array.size ||
	    a[0].type != MSGPACK_OBJECT_STR)
		return;
	if (is_str(&a[0], "BlockStored")) {
		f = stored_f;
		nf = sizeof(stored_f) / sizeof(*stored_f);
	} else if (is_str(&a[0], "BlockRemoved")) {
		f = removed_f;
		nf = sizeof(removed_f) / sizeof(*removed_f);
	}
	printf("{\"topic\":");
	put_str(topic, strlen(topic));
	printf(",\"seq\":%llu,\"ts\":%.6f,\"type\":", (unsigned long long)seq, ts);
	put_obj(&a[0]);
	for (uint32_t i = 1; i < ev->via.array.size && i - 1 < nf; i++) {
		printf(",\"%s\":", f[i - 1]);
		put_obj(&a[i]);
	}
	puts("}");
}

/* One message's three frames: topic, seq, payload. 0, or -1 to stop. */
static int recv_batch(void *sub, uint32_t *left)
{
	char topic[256] = "";
	uint8_t seqb[8] = { 0 };
	zmq_msg_t m;
	msgpack_unpacked u;
	uint64_t seq = 0;
	int n;

	n = zmq_recv(sub, topic, sizeof(topic) - 1, 0);
	if (n < 0)
		return -1;
	topic[n < (int)sizeof(topic) ? n : (int)sizeof(topic) - 1] = 0;
	if (zmq_recv(sub, seqb, sizeof(seqb), 0) < 0 || zmq_msg_init(&m) ||
	    zmq_msg_recv(&m, sub, 0) < 0)
		return -1;
	for (int b = 0; b < 8; b++)
		seq = seq << 8 | seqb[b];
	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, zmq_msg_data(&m), zmq_msg_size(&m), NULL) ==
	    MSGPACK_UNPACK_SUCCESS && u.data.type == MSGPACK_OBJECT_ARRAY &&
	    u.data.via.array.size >= 2 &&
	    u.data.via.array.ptr[1].type == MSGPACK_OBJECT_ARRAY) {
		const msgpack_object *evs = &u.data.via.array.ptr[1];
		double ts = u.data.via.array.ptr[0].via.f64;

		for (uint32_t i = 0; i < evs->via.array.size && *left; i++) {
			put_event(topic, seq, ts, &evs->via.array.ptr[i]);
			if (*left != UINT32_MAX)
				(*left)--;
		}
		fflush(stdout);
	}
	msgpack_unpacked_destroy(&u);
	zmq_msg_close(&m);
	return 0;
}

int kvctl_events(const char *endpoint, uint32_t count)
{
	uint32_t left = count ? count : UINT32_MAX;
	void *ctx = zmq_ctx_new(), *sub = ctx ? zmq_socket(ctx, ZMQ_SUB) : NULL;
	int ret = 1, tmo = 200;

	if (!sub || zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0) ||
	    zmq_setsockopt(sub, ZMQ_RCVTIMEO, &tmo, sizeof(tmo)) ||
	    zmq_connect(sub, endpoint)) {
		fprintf(stderr, "kvctl: events: cannot subscribe to %s: %s (kvd --kv-events names the endpoint, e.g. tcp://127.0.0.1:5557)\n",
			endpoint, zmq_strerror(zmq_errno()));
		goto out;
	}
	signal(SIGINT, on_int);
	signal(SIGTERM, on_int);
	while (!stop && left) {
		if (recv_batch(sub, &left) && zmq_errno() != EAGAIN &&
		    zmq_errno() != EINTR)
			break;
	}
	ret = stop || !left ? 0 : 1;
out:
	if (sub)
		zmq_close(sub);
	if (ctx)
		zmq_ctx_term(ctx);
	return ret;
}
