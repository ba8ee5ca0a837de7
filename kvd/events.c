// SPDX-License-Identifier: MIT
/*
 * KV events for KV-aware routers: each block committed (BlockStored) and
 * each block that leaves the pool (BlockRemoved), in vLLM's format and
 * transport (vllm/distributed/kv_events.py of v0.19): a ZMQ PUB socket
 * sending (topic, 8-byte big-endian sequence number, payload) where the
 * payload is a msgpack EventBatch [ts, [event, ...]] and each event an
 * array of its tag and fields:
 *
 *   ["BlockStored", [hash], parent|nil, [], block_size, nil, medium, nil]
 *   ["BlockRemoved", [hash], medium]
 *
 * as msgspec encodes the array_like, tagged, omit_defaults structs. The
 * topic is the namespace's model id; hashes are the 16 bytes the engine
 * computed (kv_hash_blocks), kept per block for its removal, since kvd's
 * index holds only keyed ones. Token ids are not known to kvd: [].
 *
 * Events of a namespace are packed as they happen and sent on the tick,
 * or when a batch grows past EV_BATCH. The socket never blocks kvd: a
 * subscriber past the high-water mark loses messages (ZMQ drops them)
 * and a send that would block is dropped and counted, with a
 * rate-limited log line. Only the loop's thread calls in here.
 */
#include <errno.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "backend.h"
#include "daemon.h"
#include "events.h"
#include "ns.h"

#define EV_HWM		100000	/* vLLM's default high-water mark */
#define EV_BATCH	4096	/* events in one message at most */

struct ev_ns {
	char		topic[KV_MODEL_ID_MAX];	/* its model id */
	struct kv_hash	*hash;		/* [max_blocks]: the engine's hashes */
	uint32_t	max_blocks;
	msgpack_sbuffer	buf;		/* packed events, not yet sent */
	msgpack_packer	pk;
	uint32_t	nr;		/* events in buf */
};

struct kvd_events {
	void		*ctx, *pub;
	uint64_t	seq;
	uint64_t	sent, dropped;
	const char	*medium;
	struct ev_ns	*ns;		/* [max_namespaces] */
	uint32_t	nr_ns;
};

static void flush_ns(struct kvd *d, uint32_t i);

static struct ev_ns *ev_ns(struct kvd_events *ev, const struct kvd_ns *ns)
{
	struct ev_ns *e = &ev->ns[ns->id];

	if (e->hash && e->max_blocks == ns->max_blocks &&
	    !strcmp(e->topic, ns->model_id))
		return e;
	if (e->nr)		/* the slot's last model's, first */
		flush_ns(ns->pool->priv, ns->id);
	snprintf(e->topic, sizeof(e->topic), "%s", ns->model_id);
	free(e->hash);
	/* calloc'd: untouched zero pages where no block was committed */
	e->hash = calloc(ns->max_blocks, sizeof(*e->hash));
	e->max_blocks = e->hash ? ns->max_blocks : 0;
	return e->hash ? e : NULL;
}

static void pack_str(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);

	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

static void pack_hash(msgpack_packer *pk, const struct kv_hash *h)
{
	msgpack_pack_bin(pk, sizeof(h->b));
	msgpack_pack_bin_body(pk, h->b, sizeof(h->b));
}

static bool is_root(const struct kv_hash *h)
{
	static const struct kv_hash root;

	return !memcmp(h, &root, sizeof(*h));
}

/* One message of namespace @i's batch: false when it could not go. */
static bool send_batch(struct kvd_events *ev, struct kvd *d, uint32_t i)
{
	struct ev_ns *e = &ev->ns[i];
	const char *topic = e->topic;
	uint8_t seq[8];
	msgpack_sbuffer out;
	msgpack_packer pk;
	struct timespec ts;
	bool ok;

	clock_gettime(CLOCK_REALTIME, &ts);
	msgpack_sbuffer_init(&out);
	msgpack_packer_init(&pk, &out, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 2);	/* data_parallel_rank: the default */
	msgpack_pack_double(&pk, ts.tv_sec + ts.tv_nsec / 1e9);
	msgpack_pack_array(&pk, e->nr);
	msgpack_sbuffer_write(&out, e->buf.data, e->buf.size);
	for (int b = 0; b < 8; b++)
		seq[b] = (uint8_t)(ev->seq >> (56 - 8 * b));
	ok = zmq_send(ev->pub, topic, strlen(topic), ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0 &&
	     zmq_send(ev->pub, seq, sizeof(seq), ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0 &&
	     zmq_send(ev->pub, out.data, out.size, ZMQ_DONTWAIT) >= 0;
	msgpack_sbuffer_destroy(&out);
	ev->seq++;
	return ok;
}

static void flush_ns(struct kvd *d, uint32_t i)
{
	struct kvd_events *ev = d->events;
	struct ev_ns *e = &ev->ns[i];
	static struct kvd_ratelimit rl;

	if (!e->nr)
		return;
	if (send_batch(ev, d, i)) {
		ev->sent += e->nr;
	} else {
		ev->dropped += e->nr;
		if (kvd_ratelimit(&rl))
			kvd_warn("kv events: %u events of %s dropped: a subscriber is slower than kvd, or the socket failed (%s)",
				 e->nr, e->topic, zmq_strerror(errno));
	}
	msgpack_sbuffer_clear(&e->buf);
	e->nr = 0;
}

void kvd_events_flush(struct kvd *d)
{
	for (uint32_t i = 0; d->events && i < d->events->nr_ns; i++)
		flush_ns(d, i);
}

/* pool->on_stored: block @id of @ns committed under the engine's @h. */
static void on_stored(struct kvd_pool *pool, struct kvd_ns *ns, uint32_t id,
		      const struct kv_hash *h, const struct kv_hash *parent)
{
	struct kvd *d = pool->priv;
	struct kvd_events *ev = d->events;
	struct ev_ns *e = ev_ns(ev, ns);

	if (!e)
		return;
	e->hash[id] = *h;
	msgpack_pack_array(&e->pk, 8);
	pack_str(&e->pk, "BlockStored");
	msgpack_pack_array(&e->pk, 1);
	pack_hash(&e->pk, h);
	if (is_root(parent))
		msgpack_pack_nil(&e->pk);
	else
		pack_hash(&e->pk, parent);
	msgpack_pack_array(&e->pk, 0);		/* token ids: not kvd's */
	msgpack_pack_uint32(&e->pk, ns->geom.block_tokens);
	msgpack_pack_nil(&e->pk);		/* lora_id */
	pack_str(&e->pk, ev->medium);
	msgpack_pack_nil(&e->pk);		/* lora_name */
	if (++e->nr >= EV_BATCH)
		flush_ns(d, ns->id);
}

/* pool->on_removed: block @id of @ns left the pool. */
static void on_removed(struct kvd_pool *pool, struct kvd_ns *ns, uint32_t id)
{
	struct kvd *d = pool->priv;
	struct ev_ns *e = ev_ns(d->events, ns);

	if (!e)
		return;
	msgpack_pack_array(&e->pk, 3);
	pack_str(&e->pk, "BlockRemoved");
	msgpack_pack_array(&e->pk, 1);
	pack_hash(&e->pk, &e->hash[id]);
	pack_str(&e->pk, d->events->medium);
	if (++e->nr >= EV_BATCH)
		flush_ns(d, ns->id);
}

int kvd_events_init(struct kvd *d, const char **why)
{
	struct kvd_events *ev;
	int hwm = EV_HWM;

	if (!d->cfg.kv_events[0])
		return 0;
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		goto nomem;
	ev->nr_ns = d->cfg.max_namespaces;
	ev->ns = calloc(ev->nr_ns, sizeof(*ev->ns));
	ev->ctx = zmq_ctx_new();
	ev->pub = ev->ctx ? zmq_socket(ev->ctx, ZMQ_PUB) : NULL;
	if (!ev->ns || !ev->pub)
		goto fail;
	ev->medium = d->be->backend == KV_BACKEND_CUDA ? "GPU" : "CPU";
	zmq_setsockopt(ev->pub, ZMQ_SNDHWM, &hwm, sizeof(hwm));
	if (zmq_bind(ev->pub, d->cfg.kv_events))
		goto fail;
	for (uint32_t i = 0; i < ev->nr_ns; i++) {
		msgpack_sbuffer_init(&ev->ns[i].buf);
		msgpack_packer_init(&ev->ns[i].pk, &ev->ns[i].buf,
				    msgpack_sbuffer_write);
	}
	d->events = ev;
	d->pool.on_stored = on_stored;
	d->pool.on_removed = on_removed;
	kvd_info("kv events on %s (msgpack batches, topic: the model id)",
		 d->cfg.kv_events);
	return 0;
fail:
	*why = zmq_strerror(zmq_errno());
	if (ev && ev->pub)
		zmq_close(ev->pub);
	if (ev && ev->ctx)
		zmq_ctx_term(ev->ctx);
	if (ev)
		free(ev->ns);
	free(ev);
	return -EINVAL;
nomem:
	*why = "no memory";
	return -ENOMEM;
}

void kvd_events_exit(struct kvd *d)
{
	struct kvd_events *ev = d->events;
	int linger = 0;

	if (!ev)
		return;
	kvd_events_flush(d);
	d->pool.on_stored = NULL;
	d->pool.on_removed = NULL;
	zmq_setsockopt(ev->pub, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_close(ev->pub);
	zmq_ctx_term(ev->ctx);
	for (uint32_t i = 0; i < ev->nr_ns; i++) {
		msgpack_sbuffer_destroy(&ev->ns[i].buf);
		free(ev->ns[i].hash);
	}
	free(ev->ns);
	free(ev);
	d->events = NULL;
}
