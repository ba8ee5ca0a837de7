// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: kvbench's trace readers, kvb_trace_load()
 * (tools/trace.c): Mooncake JSONL, Azure CSV and kvdtrc binary. The
 * first input byte picks the file name's extension (the reader falls
 * back on it when the content does not say), the --trace-block and the
 * request limit; the rest is the file, read through a memfd by way of a
 * symlink that carries the extension.
 *
 * A loaded trace must hold what trace.h promises: in + out tokens per
 * request within KVB_MAX_TRACE_TOKENS, ids and tokens inside their
 * arrays, a hash id per trace block; and the consumers kvbench runs on
 * it (sub-block ids, prompt tokens, the infinite-cache bound) must get
 * through it. The readers' complaints on stderr are discarded.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "trace.h"

#define MAX_CONSUMED	(1U << 18)	/* tokens consumers walk per input */

static const char *const exts[] = { "", ".jsonl", ".csv", ".kvdtrc" };
static const unsigned trace_blocks[] = { 512, 16, 1, 65536, 32, 48, 256, 7 };
static char links[4][PATH_MAX];
static char dir[PATH_MAX - 16];
static FILE *devnull;

static void cleanup(void)
{
	for (unsigned i = 0; i < 4; i++)
		unlink(links[i]);
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *target, *tmp;

	(void)argc, (void)argv;
	target = fuzz_memfd_path(0, "", 0);
	/* run.sh points TMPDIR into build-fuzz/: a crash leaves it there */
	tmp = getenv("TMPDIR");
	if (!tmp || !*tmp)
		tmp = "/tmp";
	snprintf(dir, sizeof(dir), "%s/kvd-fuzz-XXXXXX", tmp);
	devnull = fopen("/dev/null", "w");
	if (!target || !mkdtemp(dir) || !devnull)
		abort();
	for (unsigned i = 0; i < 4; i++) {
		snprintf(links[i], sizeof(links[i]), "%s/t%s", dir, exts[i]);
		if (symlink(target, links[i]))
			abort();
	}
	atexit(cleanup);
	return 0;
}

static void check_trace(const struct kvb_trace *tr, unsigned tb, size_t limit)
{
	if (!tr->nr || (limit && tr->nr > limit))
		FUZZ_BUG("%zu requests, limit %zu", tr->nr, limit);
	for (size_t i = 0; i < tr->nr; i++) {
		const struct kvb_treq *r = &tr->reqs[i];

		if ((uint64_t)r->in_len + r->out_len > KVB_MAX_TRACE_TOKENS)
			FUZZ_BUG("request %zu: %u + %u tokens, at most %u", i,
				 r->in_len, r->out_len, KVB_MAX_TRACE_TOKENS);
		if (tr->kind == KVB_TRACE_TOKENS &&
		    r->first + r->in_len > tr->nr_tokens)
			FUZZ_BUG("request %zu: tokens past the array", i);
		if (tr->kind != KVB_TRACE_IDS || !r->nids)
			continue;
		if (r->first + r->nids > tr->nr_ids)
			FUZZ_BUG("request %zu: ids past the array", i);
		if (r->nids != (r->in_len + (uint64_t)tb - 1) / tb)
			FUZZ_BUG("request %zu: %u ids for %u tokens at %u", i,
				 r->nids, r->in_len, tb);
	}
	if (tr->max_total > KVB_MAX_TRACE_TOKENS)
		FUZZ_BUG("max_total %u", tr->max_total);
}

/* What kvbench does with a trace, at @bt tokens per kvd block. */
static void consume(const struct kvb_trace *tr, unsigned bt)
{
	struct kvb_bound b;

	if (tr->sum_in + tr->sum_out > MAX_CONSUMED)
		return;
	for (size_t i = 0; i < tr->nr; i++) {
		const struct kvb_treq *r = &tr->reqs[i];
		/* exactly the room trace.h asks for: ASan sees more */
		size_t room = r->in_len / bt;
		uint64_t *ids = malloc((room + 1) * sizeof(*ids));
		uint32_t *tok = malloc(((size_t)r->in_len + 1) * sizeof(*tok));
		size_t n;

		if (!ids || !tok)
			abort();
		n = kvb_trace_subblocks(tr, i, bt, ids);
		if (n > room)
			FUZZ_BUG("request %zu: %zu sub-blocks, room for %zu", i,
				 n, room);
		if (tr->kind == KVB_TRACE_TOKENS)
			kvb_trace_prompt(tr, i, 0x5a17, tok);
		free(ids);
		free(tok);
	}
	if (kvb_trace_bound(tr, bt, &b))
		return;
	if (b.hits > b.refs || b.unique > b.refs)
		FUZZ_BUG("bound: %llu hits, %llu unique of %llu refs",
			 (unsigned long long)b.hits,
			 (unsigned long long)b.unique,
			 (unsigned long long)b.refs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	uint8_t sel = fuzz_u8(&in);
	unsigned tb = trace_blocks[sel >> 2 & 7];
	size_t limit = sel & 0x20 ? 3 : 0;
	struct kvb_trace tr;
	FILE *err = stderr;
	int ret;

	if (!fuzz_memfd_path(0, in.p, in.n))
		abort();
	stderr = devnull;
	ret = kvb_trace_load(&tr, links[sel & 3], limit, tb);
	stderr = err;
	if (getenv("KVD_FUZZ_TRACE"))
		fprintf(stderr, "kvb_trace_load: %d, %s, %zu requests\n", ret,
			kvb_trace_fmt_name(tr.fmt), tr.nr);
	if (ret) {
		if (ret != -1 || tr.nr || tr.reqs || tr.ids || tr.tokens)
			FUZZ_BUG("kvb_trace_load failed (%d) and kept requests",
				 ret);
		return 0;
	}
	check_trace(&tr, tr.kind == KVB_TRACE_IDS && tr.trace_block ?
			 tr.trace_block : tb, limit);
	/* kvbench needs trace_block to be a multiple of the block size */
	consume(&tr, tr.trace_block && tr.trace_block % 16 ? 1 : 16);
	kvb_trace_free(&tr);
	return 0;
}
