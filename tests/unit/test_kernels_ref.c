// SPDX-License-Identifier: MIT
/*
 * The kernels' C references (kernels/ *.c) apart from attention accuracy
 * (test_kernels_attn.c) and element conversions (test_kernels_convert.c):
 * copy_blocks, the block layout, calibration files, reshape_and_cache
 * round trips, argument checks that write nothing, and 64-bit addressing
 * of a pool above 4 GiB.
 */
#include <errno.h>
#include <float.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "test_kernels_util.h"

#define BB	4096u
#define NBLK	64u

static void test_copy_blocks_copies_pairs(void **state)
{
	uint8_t *pool = malloc(NBLK * BB), *orig = malloc(NBLK * BB);
	struct kv_block_copy pairs[] = { { 1, 40 }, { 63, 0 }, { 5, 6 } };

	(void)state;
	for (size_t i = 0; i < NBLK * BB; i++)
		orig[i] = (uint8_t)(i / BB * 7 + i % 251);
	memcpy(pool, orig, NBLK * BB);
	assert_int_equal(kv_ref_copy_blocks(pool, BB, pairs, 3), 0);
	for (uint32_t b = 0; b < NBLK; b++) {
		uint32_t from = b;

		for (size_t p = 0; p < 3; p++)
			if (pairs[p].dst == b)
				from = pairs[p].src;
		assert_memory_equal(pool + (size_t)b * BB,
				    orig + (size_t)from * BB, BB);
	}
	free(pool);
	free(orig);
}

static void test_copy_blocks_rejects_bad_input(void **state)
{
	uint8_t pool[2 * 32];
	struct kv_block_copy self = { 1, 1 }, ok = { 0, 1 };

	(void)state;
	assert_int_equal(kv_ref_copy_blocks(pool, 32, &self, 1), -EINVAL);
	assert_int_equal(kv_ref_copy_blocks(pool, 24, &ok, 1), -EINVAL);
	assert_int_equal(kv_ref_copy_blocks(NULL, 32, &ok, 1), -EINVAL);
	assert_int_equal(kv_ref_copy_blocks(pool, 32, NULL, 1), -EINVAL);
	assert_int_equal(kv_ref_copy_blocks(pool, 32, &ok, 0), 0);
}

/* ---- layout ------------------------------------------------------------ */

static void test_layout_offsets(void **state)
{
	static const uint32_t kinds[][2] = {
		{ KV_DTYPE_FP16, KV_QUANT_NONE }, { KV_DTYPE_BF16, KV_QUANT_NONE },
		{ KV_DTYPE_FP32, KV_QUANT_NONE },
		{ KV_DTYPE_FP8_E4M3, KV_QUANT_TOKEN },
		{ KV_DTYPE_FP8_E4M3, KV_QUANT_CHANNEL },
		{ KV_DTYPE_INT8, KV_QUANT_TOKEN },
		{ KV_DTYPE_INT8, KV_QUANT_CHANNEL },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		struct kv_geometry g = {
			.layers = 3, .kv_heads = 5, .head_dim = 24,
			.block_tokens = 7, .dtype = kinds[i][0],
			.quant = kinds[i][1],
		};
		uint32_t eb = kv_dtype_bytes(g.dtype);
		uint64_t vals = 5ull * 7 * 24 * eb, sc;
		struct kv_layout l;

		assert_int_equal(kv_layout_init(&l, &g), 0);
		assert_int_equal(l.elem_bytes, eb);
		assert_int_equal(l.v_off, vals);
		assert_int_equal(l.layer_bytes, kv_geometry_layer_bytes(&g));
		assert_int_equal(l.block_bytes, kv_geometry_block_bytes(&g));
		if (g.quant == KV_QUANT_NONE) {
			assert_int_equal(l.layer_bytes, 2 * vals);
			assert_int_equal(l.block_bytes, 3 * 2 * vals);
			continue;
		}
		sc = 5ull * 4 * (g.quant == KV_QUANT_TOKEN ? 7 : 24);
		assert_int_equal(l.k_scale_off, 2 * vals);
		assert_int_equal(l.v_scale_off, 2 * vals + sc);
		assert_int_equal(l.layer_bytes, (2 * vals + 2 * sc + 15) & ~15ull);
		assert_int_equal(l.block_bytes % 256, 0);
	}
}

static void test_layout_rejects(void **state)
{
	const struct kv_geometry ok = {
		.layers = 2, .kv_heads = 2, .head_dim = 64, .block_tokens = 16,
		.dtype = KV_DTYPE_FP16,
	};
	struct kv_layout l, before;
	struct kv_geometry g;

	(void)state;
	memset(&l, 0x5a, sizeof(l));
	before = l;
#define BAD(field, value) do {						\
		g = ok;							\
		g.field = value;					\
		assert_int_equal(kv_layout_init(&l, &g), -EINVAL);	\
		assert_memory_equal(&l, &before, sizeof(l));		\
	} while (0)
	BAD(layers, 0);
	BAD(kv_heads, 0);
	BAD(head_dim, 0);
	BAD(block_tokens, 0);
	BAD(head_dim, 60);		/* not a multiple of 8 */
	BAD(head_dim, 1032);
	BAD(block_tokens, 1025);
	BAD(dtype, KV_DTYPE__MAX);
	BAD(quant, KV_QUANT_TOKEN);	/* fp16 has no scales */
	BAD(quant, KV_QUANT__MAX);
	g = ok;
	g.dtype = KV_DTYPE_FP8_E4M3;	/* without a scheme */
	assert_int_equal(kv_layout_init(&l, &g), -EINVAL);
	g.dtype = KV_DTYPE_INT8;
	assert_int_equal(kv_layout_init(&l, &g), -EINVAL);
	g.quant = KV_QUANT_CHANNEL;
	assert_int_equal(kv_layout_init(&l, &g), 0);
	assert_int_equal(kv_layout_init(NULL, &g), -EINVAL);
	assert_int_equal(kv_layout_init(&l, NULL), -EINVAL);
#undef BAD
}

static void test_workspace_bytes(void **state)
{
	struct kv_layout l;

	(void)state;
	assert_int_equal(t_layout(&l, 1, 2, 64, 16, KV_DTYPE_FP16, 0), 0);
	/* 3 seqs x 4 heads x 2 partitions: 24 floats (256), 24 (256),
	 * 24 x 64 floats (6144) */
	assert_int_equal(kv_decode_workspace_bytes(&l, 3, 4, 1000, 512), 6656);
	assert_int_equal(kv_decode_workspace_bytes(&l, 3, 4, 1000, 0), 6656);
	assert_int_equal(kv_decode_workspace_bytes(&l, 3, 4, 1024, 512), 6656);
	assert_int_equal(kv_decode_workspace_bytes(&l, 3, 4, 1025, 512),
			 256 + 256 + 9216);
	assert_int_equal(kv_decode_workspace_bytes(&l, 1, 1, 1, 16),
			 256 + 256 + 256);
	assert_int_equal(kv_decode_workspace_bytes(&l, 3, 4, 0, 512), 0);
	assert_int_equal(kv_decode_workspace_bytes(&l, 3, 4, 1000, 24), 0);
	assert_int_equal(kv_decode_workspace_bytes(&l, 3, 4, 1000, 8208), 0);
	assert_int_equal(kv_decode_workspace_bytes(NULL, 3, 4, 1000, 512), 0);
	/* default partition: the largest multiple of block_tokens <= 512 */
	assert_int_equal(t_layout(&l, 1, 1, 8, 48, KV_DTYPE_FP16, 0), 0);
	assert_int_equal(kv_decode_workspace_bytes(&l, 1, 1, 960, 0),
			 256 + 256 + 256);	/* 2 x 480 */
	assert_int_equal(kv_decode_workspace_bytes(&l, 1, 1, 961, 0),
			 256 + 256 + 256);	/* 3 partitions, 96 bytes */
}

/* ---- calibration files ------------------------------------------------- */

static char t_dir[64];

static const char *t_file(const char *name, const char *text)
{
	static char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", t_dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

static int scales_setup(void **state)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(t_dir, sizeof(t_dir), "%s/kvscales.XXXXXX", tmp ? tmp : "/tmp");
	*state = mkdtemp(t_dir);
	return *state ? 0 : -1;
}

static int scales_teardown(void **state)
{
	char cmd[96];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t_dir);
	return system(cmd) ? -1 : 0;
}

#define GOOD_SCALES							\
	"# layer 0\n"							\
	"k 0 0 0.5\n"							\
	"v 0 0 1 2 3 4 5 6 7 8   # per channel\n"			\
	"\n"								\
	"k 0 1 0.25\r\n"						\
	"v 0 1 1e-3\n"							\
	"  v 1 1\t3.5\n"						\
	"k 1 0 2\n"							\
	"v 1 0 2\n"

static void test_scales_load(void **state)
{
	const char *path = t_file("good", GOOD_SCALES "k 1 1 3\n");
	struct kv_scales s = { 0 };
	struct kv_layout l;
	char err[256] = "x";

	(void)state;
	assert_int_equal(t_layout(&l, 2, 2, 8, 16, KV_DTYPE_FP8_E4M3,
				  KV_QUANT_CHANNEL), 0);
	assert_int_equal(kv_scales_load(path, &l, &s, err, sizeof(err)), 0);
	assert_string_equal(err, "");
	assert_int_equal(s.layers, 2);
	assert_int_equal(s.kv_heads, 2);
	assert_int_equal(s.head_dim, 8);
	/* s[((layer * 2 + kv) * kv_heads + head) * head_dim + channel] */
	for (int d = 0; d < 8; d++) {
		assert_true(s.s[(0 * 2 + 0) * 16 + 0 * 8 + d] == 0.5f);
		assert_true(s.s[(0 * 2 + 1) * 16 + 0 * 8 + d] == (float)(d + 1));
		assert_true(s.s[(0 * 2 + 0) * 16 + 1 * 8 + d] == 0.25f);
		assert_true(s.s[(0 * 2 + 1) * 16 + 1 * 8 + d] == 1e-3f);
		assert_true(s.s[(1 * 2 + 0) * 16 + 0 * 8 + d] == 2.0f);
		assert_true(s.s[(1 * 2 + 1) * 16 + 0 * 8 + d] == 2.0f);
		assert_true(s.s[(1 * 2 + 0) * 16 + 1 * 8 + d] == 3.0f);
		assert_true(s.s[(1 * 2 + 1) * 16 + 1 * 8 + d] == 3.5f);
	}
	kv_scales_free(&s);
	assert_null(s.s);
	kv_scales_free(&s);
	kv_scales_free(NULL);
}

static void test_scales_load_errors(void **state)
{
	static const struct {
		const char	*text;
		const char	*why;	/* "LINE: start of the reason" */
	} bad[] = {
		{ "k 1 1\n" GOOD_SCALES, "1: missing scale" },
		{ "k 1 1 0\n" GOOD_SCALES, "1: scale '0' is not finite" },
		{ GOOD_SCALES "k 1 1 -2\n", "10: scale '-2' is not finite" },
		{ GOOD_SCALES "k 1 1 nan\n", "10: scale 'nan' is not finite" },
		{ GOOD_SCALES "k 1 1 inf\n", "10: scale 'inf' is not finite" },
		{ GOOD_SCALES "k 1 1 1e39\n", "10: scale '1e39' is not finite" },
		{ GOOD_SCALES "k 1 1 0.5x\n", "10: scale '0.5x' is not a number" },
		{ GOOD_SCALES "k 1 1 1 2 3\n", "10: 3 scales: 1 or 8" },
		{ GOOD_SCALES "k 1 1 1 2 3 4 5 6 7 8 9\n", "10: more than 8 scales" },
		{ GOOD_SCALES "k 2 1 1\n", "10: layer 2 out of range" },
		{ GOOD_SCALES "k 1 2 1\n", "10: head 2 out of range" },
		{ GOOD_SCALES "k -1 1 1\n", "10: layer '-1' is not a number" },
		{ GOOD_SCALES "k 1\n", "10: missing head" },
		{ GOOD_SCALES "q 1 1 1\n", "10: 'q': a line starts with k or v" },
		{ GOOD_SCALES "k 1 1 3\nk 0 1 1\n", "11: duplicate k 0 1 (first on line 5)" },
		{ GOOD_SCALES, "9: end of file: no line for k 1 1" },
		{ "", "0: end of file: no line for k 0 0" },
	};
	struct kv_scales s = { .layers = 77, .s = (float *)&s };
	struct kv_layout l;
	char err[256], want[256];

	(void)state;
	assert_int_equal(t_layout(&l, 2, 2, 8, 16, KV_DTYPE_INT8,
				  KV_QUANT_CHANNEL), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *path = t_file("bad", bad[i].text);

		snprintf(want, sizeof(want), "%s:%s", path, bad[i].why);
		assert_int_equal(kv_scales_load(path, &l, &s, err, sizeof(err)),
				 -EINVAL);
		printf("  %s\n", err);
		if (strncmp(err, want, strlen(want))) {
			printf("expected '%s...'\n", want);
			fail();
		}
		/* nothing written on error */
		assert_int_equal(s.layers, 77);
		assert_ptr_equal(s.s, &s);
	}
	assert_int_equal(kv_scales_load("/nonexistent/kv.scales", &l, &s, err,
					sizeof(err)), -ENOENT);
	assert_string_equal(err, "/nonexistent/kv.scales: No such file or directory");
	/* a short error buffer is cut, not overrun; none at all is fine */
	assert_int_equal(kv_scales_load(t_file("bad", ""), &l, &s, err, 8),
			 -EINVAL);
	assert_int_equal(strlen(err), 7);
	assert_int_equal(kv_scales_load(t_file("bad", ""), &l, &s, NULL, 0),
			 -EINVAL);
	assert_int_equal(kv_scales_load(NULL, &l, &s, err, sizeof(err)), -EINVAL);
	assert_int_equal(kv_scales_load(t_file("bad", ""), NULL, &s, err,
					sizeof(err)), -EINVAL);
}

/* ---- reshape_and_cache ------------------------------------------------- */

#define RC_LAYERS	2
#define RC_HEADS	2
#define RC_HD		16
#define RC_BT		4
#define RC_BLOCKS	6
#define RC_TOKENS	7

/* Slots: blocks 3 and 1, not in order, a gap, one skipped token. */
static const int64_t rc_slots[RC_TOKENS] = { 13, 14, 4, -1, 15, 7, 12 };

/* Marks the bytes one token may write: its rows, its scales. */
static void rc_mark(const struct kv_layout *l, uint8_t *mask, int64_t slot)
{
	uint64_t id = (uint64_t)slot / RC_BT;
	uint32_t off = (uint32_t)(slot % RC_BT);
	uint8_t *blk = mask + id * l->block_bytes;
	uint64_t row = (uint64_t)RC_HD * l->elem_bytes;

	for (int v = 0; v < 2; v++) {
		for (uint32_t h = 0; h < RC_HEADS; h++) {
			uint64_t o = 1 * l->layer_bytes + (v ? l->v_off : 0) +
				     ((uint64_t)h * RC_BT + off) * row;

			memset(blk + o, 1, row);
			if (l->quant == KV_QUANT_TOKEN)
				memset(blk + t_scale_off(l, 1, v) +
				       ((uint64_t)h * RC_BT + off) * 4, 1, 4);
		}
		if (l->quant == KV_QUANT_CHANNEL)
			memset(blk + t_scale_off(l, 1, v), 1,
			       (uint64_t)RC_HEADS * RC_HD * 4);
	}
}

/* |x^ - x| bound of one element at scale @s (kernels.h, the man page). */
static double rc_bound(uint32_t dtype, double x, double s)
{
	double b = dtype == KV_DTYPE_INT8 ? s / 2 :
		   fmax(ldexp(fabs(x), -4), ldexp(s, -10));

	return b * (1 + 1e-6) + 1e-6 * fabs(x);
}

static void rc_check_token(const struct kv_layout *l, const uint8_t *pool,
			   const float *k, const float *v, const void *ksrc,
			   const void *vsrc, uint32_t src, uint32_t t,
			   const float *scales, double *worst, int *saturated)
{
	float qmax = l->dtype == KV_DTYPE_INT8 ? 127.0f : 448.0f;
	uint64_t id = (uint64_t)rc_slots[t] / RC_BT;
	uint32_t off = (uint32_t)(rc_slots[t] % RC_BT);
	float row[RC_HD];

	for (int kv = 0; kv < 2; kv++) {
		const float *x = kv ? v : k;
		const uint8_t *xs = kv ? vsrc : ksrc;

		for (uint32_t h = 0; h < RC_HEADS; h++) {
			const float *xr = x + ((uint64_t)t * RC_HEADS + h) * RC_HD;
			float amax = 0.0f, s;

			t_read_row(l, pool, id, 1, kv, h, off, row);
			if (l->quant == KV_QUANT_NONE) {
				/* the source bits, unchanged */
				assert_memory_equal(pool + id * l->block_bytes +
					l->layer_bytes + (kv ? l->v_off : 0) +
					((uint64_t)h * RC_BT + off) * RC_HD * l->elem_bytes,
					xs + ((uint64_t)t * RC_HEADS + h) * RC_HD *
					t_src_bytes(src), RC_HD * l->elem_bytes);
				continue;
			}
			for (uint32_t d = 0; d < RC_HD; d++)
				amax = fmaxf(amax, fabsf(xr[d]));
			for (uint32_t d = 0; d < RC_HD; d++) {
				const uint8_t *blk = pool + id * l->block_bytes;
				double e;

				s = t_scale(l, blk, 1, kv, h, off, d);
				if (l->quant == KV_QUANT_CHANNEL)
					assert_true(s == scales[(kv * RC_HEADS + h) *
								RC_HD + d]);
				else if (amax == 0.0f)
					assert_true(s == 1.0f);
				else
					assert_true(s == amax / qmax);
				e = fabs(row[d] - xr[d]);
				if (fabsf(xr[d]) / s > qmax) {
					/* saturated: +-qmax * s */
					assert_true(row[d] == copysignf(qmax * s, xr[d]));
					(*saturated)++;
					continue;
				}
				assert_true(e <= rc_bound(l->dtype, xr[d], s));
				*worst = fmax(*worst, e / rc_bound(l->dtype, xr[d], s));
			}
		}
	}
}

static void rc_round_trip(uint32_t dtype, uint32_t quant, uint32_t src,
			  struct t_rng *rng, double *worst, int *saturated)
{
	struct kv_layout l;
	uint8_t *pool, *orig, *mask;
	float k[RC_TOKENS * RC_HEADS * RC_HD], v[RC_TOKENS * RC_HEADS * RC_HD];
	uint8_t ksrc[sizeof(k)], vsrc[sizeof(v)];
	float scales[2 * RC_HEADS * RC_HD];
	struct kv_cache_args a = {
		.k = ksrc, .v = vsrc, .src_dtype = src, .num_tokens = RC_TOKENS,
		.slot_mapping = rc_slots,
		.scales = quant == KV_QUANT_CHANNEL ? scales : NULL,
	};
	uint64_t bytes;

	assert_int_equal(t_layout(&l, RC_LAYERS, RC_HEADS, RC_HD, RC_BT, dtype,
				  quant), 0);
	bytes = RC_BLOCKS * l.block_bytes;
	pool = malloc(bytes);
	orig = malloc(bytes);
	mask = calloc(1, bytes);
	for (uint64_t i = 0; i < bytes; i++)
		orig[i] = (uint8_t)t_next(rng);
	memcpy(pool, orig, bytes);
	for (uint32_t i = 0; i < RC_TOKENS * RC_HEADS * RC_HD; i++) {
		/* token 2's K of head 1 is all zero: scale 1 */
		int zero = i / RC_HD == 2 * RC_HEADS + 1;

		k[i] = t_store(ksrc, src, i, zero ? 0.0f : 3 * t_gauss(rng));
		v[i] = t_store(vsrc, src, i, (float)ldexp(t_gauss(rng),
						(int)t_below(rng, 12) - 6));
	}
	/* static scales: calibrated on the data, some channels too small */
	for (uint32_t kv = 0; kv < 2; kv++)
		for (uint32_t c = 0; c < RC_HEADS * RC_HD; c++) {
			const float *x = kv ? v : k;
			float amax = 0.0f;

			for (uint32_t t = 0; t < RC_TOKENS; t++)
				amax = fmaxf(amax, fabsf(x[t * RC_HEADS * RC_HD + c]));
			scales[kv * RC_HEADS * RC_HD + c] = amax > 0 ?
				amax / (dtype == KV_DTYPE_INT8 ? 127 : 448) *
				(c % 5 ? 1.0f : 0.5f) : 1.0f;
		}

	assert_int_equal(kv_ref_reshape_and_cache(&l, pool, 1, &a), 0);
	for (uint32_t t = 0; t < RC_TOKENS; t++) {
		if (rc_slots[t] < 0)
			continue;
		rc_mark(&l, mask, rc_slots[t]);
		rc_check_token(&l, pool, k, v, ksrc, vsrc, src, t, scales, worst,
			       saturated);
	}
	/* nothing else changed: other slots, layer 0, other blocks */
	for (uint64_t i = 0; i < bytes; i++)
		if (!mask[i] && pool[i] != orig[i]) {
			printf("byte %llu changed\n", (unsigned long long)i);
			fail();
		}
	free(pool);
	free(orig);
	free(mask);
}

static void test_reshape_and_cache_round_trip(void **state)
{
	struct t_rng rng = { 7 };
	double worst[2][3] = { { 0 } };
	int saturated = 0;

	(void)state;
	for (uint32_t d = KV_DTYPE_FP16; d <= KV_DTYPE_FP32; d++)
		rc_round_trip(d, KV_QUANT_NONE, d, &rng, &worst[0][0],
			      &saturated);
	for (uint32_t d = KV_DTYPE_FP8_E4M3; d <= KV_DTYPE_INT8; d++)
		for (uint32_t q = KV_QUANT_TOKEN; q <= KV_QUANT_CHANNEL; q++)
			for (uint32_t src = 0; src < 3; src++)
				rc_round_trip(d, q, src, &rng,
					      &worst[d - KV_DTYPE_FP8_E4M3][q],
					      &saturated);
	printf("reshape_and_cache round trip, worst |x^ - x| / bound: fp8 "
	       "token %.3f channel %.3f, int8 token %.3f channel %.3f; %d "
	       "saturated by small static scales\n",
	       worst[0][1], worst[0][2], worst[1][1], worst[1][2], saturated);
	assert_true(saturated > 0);
}

static void test_reshape_and_cache_rejects(void **state)
{
	struct kv_layout l, lt, lc, bad_l;
	uint8_t pool[RC_BLOCKS * 4096], orig[sizeof(pool)];
	float kv[RC_TOKENS * RC_HEADS * RC_HD] = { 0 };
	float scales[2 * RC_HEADS * RC_HD];
	int64_t slots[RC_TOKENS];
	struct kv_cache_args a = {
		.k = kv, .v = kv, .src_dtype = KV_DTYPE_FP32,
		.num_tokens = RC_TOKENS, .slot_mapping = slots,
	}, b;

	(void)state;
	assert_int_equal(t_layout(&l, RC_LAYERS, RC_HEADS, RC_HD, RC_BT,
				  KV_DTYPE_FP32, 0), 0);
	assert_int_equal(t_layout(&lt, RC_LAYERS, RC_HEADS, RC_HD, RC_BT,
				  KV_DTYPE_INT8, KV_QUANT_TOKEN), 0);
	assert_int_equal(t_layout(&lc, RC_LAYERS, RC_HEADS, RC_HD, RC_BT,
				  KV_DTYPE_FP8_E4M3, KV_QUANT_CHANNEL), 0);
	assert_true(l.block_bytes * RC_BLOCKS <= sizeof(pool));
	memcpy(slots, rc_slots, sizeof(slots));
	for (uint32_t i = 0; i < 2 * RC_HEADS * RC_HD; i++)
		scales[i] = 1.0f;
	memset(pool, 0x33, sizeof(pool));
	memcpy(orig, pool, sizeof(pool));
#define REJECT(lay, lr, args) do {					\
		assert_int_equal(kv_ref_reshape_and_cache(lay, pool, lr, args), \
				 -EINVAL);				\
		assert_memory_equal(pool, orig, sizeof(pool));		\
	} while (0)
	REJECT(NULL, 0, &a);
	REJECT(&l, 0, NULL);
	REJECT(&l, RC_LAYERS, &a);
	assert_int_equal(kv_ref_reshape_and_cache(&l, NULL, 0, &a), -EINVAL);
	b = a;
	b.src_dtype = KV_DTYPE_FP16;		/* unquantized: must match */
	REJECT(&l, 0, &b);
	b.src_dtype = KV_DTYPE_INT8;
	REJECT(&lt, 0, &b);
	b = a;
	b.k = NULL;
	REJECT(&l, 0, &b);
	b = a;
	b.scales = scales;			/* no static scales here */
	REJECT(&lt, 0, &b);
	REJECT(&lc, 0, &a);			/* static scales missing */
	b = a;
	b.scales = scales;
	for (int i = 0; i < 4; i++) {
		static const float bad[] = { 0.0f, -1.0f, NAN, INFINITY };

		scales[2 * RC_HEADS * RC_HD - 1] = bad[i];
		REJECT(&lc, 0, &b);
	}
	scales[2 * RC_HEADS * RC_HD - 1] = 1.0f;
	/* the last token's block id does not fit a kv_block_t: the first
	 * tokens are not written either */
	slots[RC_TOKENS - 1] = (int64_t)RC_BT << 32;
	REJECT(&l, 0, &a);
	slots[RC_TOKENS - 1] = rc_slots[RC_TOKENS - 1];
	bad_l = l;
	bad_l.v_off += 16;			/* not what kv_layout_init made */
	REJECT(&bad_l, 0, &a);
	/* and the good call */
	assert_int_equal(kv_ref_reshape_and_cache(&lc, pool, 0, &b), 0);
	b.num_tokens = 0;
	b.k = b.v = NULL;
	b.slot_mapping = NULL;
	assert_int_equal(kv_ref_reshape_and_cache(&lc, pool, 0, &b), 0);
#undef REJECT
}

/* ---- decode arguments -------------------------------------------------- */

#define DA_BLOCKS	6

static void test_decode_rejects(void **state)
{
	struct kv_layout l;
	static uint8_t pool[DA_BLOCKS * 1024];
	float q[2 * 4 * 16], out[2 * 4 * 16], before[2 * 4 * 16];
	uint32_t tables[2][3] = { { 1, 2, 0xffffffff }, { 4, 0xffffffff, 7 } };
	uint32_t lens[2] = { 5, 3 };
	struct kv_decode_args a = {
		.q = q, .out = out, .q_dtype = KV_DTYPE_FP32, .num_seqs = 2,
		.num_heads = 4, .max_blocks_per_seq = 3,
		.block_tables = &tables[0][0], .context_lens = lens,
		.scale = 0.25f,
	}, b;
	uint64_t pb;

	(void)state;
	assert_int_equal(t_layout(&l, 2, 2, 16, 4, KV_DTYPE_FP16, 0), 0);
	pb = DA_BLOCKS * l.block_bytes;
	assert_true(pb <= sizeof(pool));
	memset(pool, 0, sizeof(pool));
	for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); i++)
		q[i] = (float)i / 64;
	memset(out, 0x7f, sizeof(out));
	memcpy(before, out, sizeof(out));
#define REJECT(lay, bytes, lr, args) do {				\
		assert_int_equal(kv_ref_paged_attention_decode(lay, pool, \
					bytes, lr, args), -EINVAL);	\
		assert_memory_equal(out, before, sizeof(out));		\
	} while (0)
	REJECT(NULL, pb, 0, &a);
	REJECT(&l, pb, 0, NULL);
	REJECT(&l, pb, 2, &a);
	assert_int_equal(kv_ref_paged_attention_decode(&l, NULL, pb, 0, &a),
			 -EINVAL);
	b = a;
	b.num_heads = 3;			/* not a multiple of kv_heads */
	REJECT(&l, pb, 0, &b);
	b.num_heads = 0;
	REJECT(&l, pb, 0, &b);
	b = a;
	b.q_dtype = KV_DTYPE_FP8_E4M3;
	REJECT(&l, pb, 0, &b);
	b = a;
	b.partition_tokens = 6;			/* not a multiple of 4 */
	REJECT(&l, pb, 0, &b);
	b.partition_tokens = 8196;		/* above the largest, 8192 */
	REJECT(&l, pb, 0, &b);
	b = a;
	b.scale = NAN;
	REJECT(&l, pb, 0, &b);
	b.scale = INFINITY;
	REJECT(&l, pb, 0, &b);
	b = a;
	b.q = NULL;
	REJECT(&l, pb, 0, &b);
	b = a;
	b.context_lens = NULL;
	REJECT(&l, pb, 0, &b);
	b = a;
	b.block_tables = NULL;
	REJECT(&l, pb, 0, &b);
	/* the last sequence is bad: the first is not written either */
	lens[1] = 13;				/* > 3 blocks of 4 */
	REJECT(&l, pb, 0, &a);
	lens[1] = 3;
	tables[1][0] = DA_BLOCKS;		/* past the pool */
	REJECT(&l, pb, 0, &a);
	tables[1][0] = DA_BLOCKS - 1;		/* ends where the pool ends */
	REJECT(&l, pb - 1, 0, &a);
	assert_int_equal(kv_ref_paged_attention_decode(&l, pool, pb, 0, &a), 0);
	b = a;
	b.partition_tokens = 8192;
	assert_int_equal(kv_ref_paged_attention_decode(&l, pool, pb, 0, &b), 0);
	/* context 0: zeros, the table not read */
	lens[0] = lens[1] = 0;
	tables[0][0] = tables[1][0] = 0xffffffff;
	memset(out, 0x7f, sizeof(out));
	assert_int_equal(kv_ref_paged_attention_decode(&l, pool, pb, 0, &a), 0);
	for (size_t i = 0; i < sizeof(out) / sizeof(out[0]); i++)
		assert_true(out[i] == 0.0f);
	b = a;
	b.num_seqs = 0;
	assert_int_equal(kv_ref_paged_attention_decode(&l, pool, pb, 0, &b), 0);
#undef REJECT
}

/* ---- a pool above 4 GiB ------------------------------------------------ */

/*
 * Block ids above 2^24 whose bytes lie beyond 4 GiB, in a sparse mapping
 * (MAP_NORESERVE: only the pages touched are backed). head_dim 8 and 256
 * tokens a block make slot ids above 2^32 too; with 32-bit arithmetic
 * block HI and its slots would alias block 7.
 */
#define HI_ID		((1u << 24) + 7)
#define HI_LO_ID	7u
#define HI_CTX		(256 + 100)

static void hi_check(uint32_t dtype, uint32_t quant, uint8_t *pool,
		     uint64_t pool_bytes, struct t_rng *rng)
{
	struct kv_layout l;
	float k[HI_CTX * 8], v[HI_CTX * 8], q[2 * 8], out[2 * 8];
	float kh[HI_CTX * 8], vh[HI_CTX * 8], scales[16];
	int64_t slots[HI_CTX];
	uint32_t table[2] = { HI_ID, HI_LO_ID }, ctx = HI_CTX;
	struct kv_cache_args c = {
		.k = k, .v = v, .src_dtype = KV_DTYPE_FP32, .slot_mapping = slots,
	};
	struct kv_decode_args a = {
		.q = q, .out = out, .q_dtype = KV_DTYPE_FP32, .num_seqs = 1,
		.num_heads = 2, .max_blocks_per_seq = 2, .block_tables = table,
		.context_lens = &ctx, .scale = 0.35f,
	};
	struct kv_block_copy cp = { HI_ID, HI_ID + 1 };
	double ref[8];

	assert_int_equal(t_layout(&l, 1, 1, 8, 256, dtype, quant), 0);
	assert_true((uint64_t)HI_ID * l.block_bytes > (1ull << 32));
	assert_true((uint64_t)(HI_ID + 2) * l.block_bytes <= pool_bytes);
	for (uint32_t i = 0; i < HI_CTX * 8; i++) {
		k[i] = t_gauss(rng);
		v[i] = t_gauss(rng);
	}
	for (uint32_t i = 0; i < 16; i++)
		scales[i] = 6.0f / 127;
	if (quant == KV_QUANT_CHANNEL)
		c.scales = scales;
	for (uint32_t t = 0; t < HI_CTX; t++)
		slots[t] = (int64_t)table[t / 256] * 256 + t % 256;
	assert_true(slots[0] > (int64_t)UINT32_MAX);
	/* the low block first: then the high one must not overwrite it */
	c.k = k + 256 * 8;
	c.v = v + 256 * 8;
	c.slot_mapping = slots + 256;
	c.num_tokens = HI_CTX - 256;
	assert_int_equal(kv_ref_reshape_and_cache(&l, pool, 0, &c), 0);
	c.k = k;
	c.v = v;
	c.slot_mapping = slots;
	c.num_tokens = 256;
	assert_int_equal(kv_ref_reshape_and_cache(&l, pool, 0, &c), 0);
	for (uint32_t t = 0; t < HI_CTX; t++) {
		t_read_row(&l, pool, table[t / 256], 0, 0, 0, t % 256, kh + t * 8);
		t_read_row(&l, pool, table[t / 256], 0, 1, 0, t % 256, vh + t * 8);
		for (uint32_t d = 0; d < 8; d++) {
			double x = k[t * 8 + d], e = fabs(kh[t * 8 + d] - x);

			if (dtype == KV_DTYPE_INT8)
				assert_true(e <= 3.0 / 127 * 1.0001);
			else
				assert_true(e <= (quant ? fabs(x) / 16 + 1e-4 : 0));
		}
	}
	for (uint32_t i = 0; i < 16; i++)
		q[i] = t_gauss(rng);
	assert_int_equal(kv_ref_paged_attention_decode(&l, pool, pool_bytes, 0,
						       &a), 0);
	for (uint32_t h = 0; h < 2; h++) {
		t_attention(q + h * 8, kh, vh, HI_CTX, 8, 8, 0.35, ref);
		for (uint32_t d = 0; d < 8; d++)
			assert_true(fabs(out[h * 8 + d] - ref[d]) <= 1e-5);
	}
	/* the last byte of the highest block is still inside the pool */
	table[0] = (uint32_t)(pool_bytes / l.block_bytes) - 1;
	assert_int_equal(kv_ref_paged_attention_decode(&l, pool,
			 (uint64_t)(table[0] + 1) * l.block_bytes, 0, &a), 0);
	assert_int_equal(kv_ref_paged_attention_decode(&l, pool,
			 (uint64_t)(table[0] + 1) * l.block_bytes - 1, 0, &a),
			 -EINVAL);
	assert_int_equal(kv_ref_copy_blocks(pool, l.block_bytes, &cp, 1), 0);
	assert_memory_equal(pool + (uint64_t)HI_ID * l.block_bytes,
			    pool + (uint64_t)(HI_ID + 1) * l.block_bytes,
			    l.block_bytes);
}

static void test_offsets_above_4gib(void **state)
{
	uint64_t bytes = (uint64_t)(HI_ID + 2) * 16384;	/* 256 GiB */
	struct t_rng rng = { 4 };
	uint8_t *pool;

	(void)state;
	pool = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (pool == MAP_FAILED) {
		printf("no sparse mapping of %llu bytes: %s\n",
		       (unsigned long long)bytes, strerror(errno));
		skip();
	}
	hi_check(KV_DTYPE_FP32, KV_QUANT_NONE, pool, bytes, &rng);
	hi_check(KV_DTYPE_FP8_E4M3, KV_QUANT_TOKEN, pool, bytes, &rng);
	hi_check(KV_DTYPE_INT8, KV_QUANT_CHANNEL, pool, bytes, &rng);
	munmap(pool, bytes);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_copy_blocks_copies_pairs),
		cmocka_unit_test(test_copy_blocks_rejects_bad_input),
		cmocka_unit_test(test_layout_offsets),
		cmocka_unit_test(test_layout_rejects),
		cmocka_unit_test(test_workspace_bytes),
		cmocka_unit_test_setup_teardown(test_scales_load,
						scales_setup, scales_teardown),
		cmocka_unit_test_setup_teardown(test_scales_load_errors,
						scales_setup, scales_teardown),
		cmocka_unit_test(test_reshape_and_cache_round_trip),
		cmocka_unit_test(test_reshape_and_cache_rejects),
		cmocka_unit_test(test_decode_rejects),
		cmocka_unit_test(test_offsets_above_4gib),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
