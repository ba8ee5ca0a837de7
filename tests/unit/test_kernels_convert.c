// SPDX-License-Identifier: MIT
/*
 * The kernels' element conversions (kernels/convert.c): fp8 e4m3, fp16
 * and bf16 to and from float, every code and round-to-nearest-even with
 * saturation, against an oracle that searches the table of every
 * representable value.
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

/* ---- element conversions ---------------------------------------------- */

static float f_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static uint32_t bits_f(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

/* e4m3 code @c by its definition: NaN for S.1111.111. */
static double fp8_value(uint32_t c)
{
	uint32_t e = (c >> 3) & 15, m = c & 7;
	double v;

	if ((c & 0x7f) == 0x7f)
		return NAN;
	v = e ? ldexp(8 + m, (int)e - 10) : ldexp(m, -9);
	return c & 0x80 ? -v : v;
}

static double half_value(uint32_t c)
{
	uint32_t e = (c >> 10) & 31, m = c & 0x3ff;
	double v;

	if (e == 31)
		return m ? NAN : c & 0x8000 ? -INFINITY : INFINITY;
	v = e ? ldexp(1024 + m, (int)e - 25) : ldexp(m, -24);
	return c & 0x8000 ? -v : v;
}

static double bf16_value(uint32_t c)
{
	uint32_t e = (c >> 7) & 255, m = c & 0x7f;
	double v;

	if (e == 255)
		return m ? NAN : c & 0x8000 ? -INFINITY : INFINITY;
	v = e ? ldexp(128 + m, (int)e - 134) : ldexp(m, -133);
	return c & 0x8000 ? -v : v;
}

/*
 * A format's positive values by code, 0..n-1 increasing; the last one may
 * stand for infinity at the value the next exponent would have, so that
 * IEEE overflow (round to nearest even, max being odd) falls out.
 */
struct fmt {
	const char	*name;
	double		*vals;
	uint32_t	n;
	uint32_t	sign;		/* sign bit of a code */
};

/* The code nearest @x >= 0, ties to the even code. */
static uint32_t fmt_nearest(const struct fmt *f, double x)
{
	uint32_t lo = 0, hi = f->n - 1;
	double dl, dh;

	if (x >= f->vals[f->n - 1])
		return f->n - 1;
	while (hi - lo > 1) {		/* vals[lo] <= x < vals[hi] */
		uint32_t mid = lo + (hi - lo) / 2;

		if (f->vals[mid] <= x)
			lo = mid;
		else
			hi = mid;
	}
	dl = x - f->vals[lo];
	dh = f->vals[hi] - x;
	if (dl != dh)
		return dl < dh ? lo : hi;
	return lo & 1 ? hi : lo;
}

static void fmt_init(struct fmt *f, double (*value)(uint32_t), uint32_t n,
		     double top)
{
	f->vals = malloc(n * sizeof(double));
	for (uint32_t c = 0; c < n; c++)
		f->vals[c] = value(c);
	if (top > 0)
		f->vals[n - 1] = top;	/* infinity's code */
}

/* Checks @conv(x) against the oracle for x and -x. */
static void fmt_check(const struct fmt *f, uint32_t (*conv)(float), float x)
{
	uint32_t want, got;

	if (isnan(x))
		return;
	want = fmt_nearest(f, fabs((double)x));
	if (x < 0 || (x == 0 && signbit(x)))
		want |= f->sign;
	got = conv(x);
	if (got != want) {
		printf("%s: %a (%.9g) gave 0x%x, nearest even is 0x%x\n",
		       f->name, x, x, got, want);
		fail();
	}
}

static uint32_t conv_fp8(float x)
{
	return kv_float_to_fp8_e4m3(x);
}

static uint32_t conv_half(float x)
{
	return kv_float_to_half(x);
}

static uint32_t conv_bf16(float x)
{
	return kv_float_to_bf16(x);
}

/*
 * Every midpoint between neighbouring codes (the ties), the floats just
 * beside it, and random floats: by bit pattern (all exponents) and
 * uniform over the format's range.
 */
static void fmt_sweep(const struct fmt *f, uint32_t (*conv)(float),
		      uint64_t seed)
{
	struct t_rng rng = { seed };
	double top = fmin(f->vals[f->n - 1] * 1.1, FLT_MAX);

	for (uint32_t c = 0; c + 1 < f->n; c++) {
		float mid = (float)((f->vals[c] + f->vals[c + 1]) / 2);

		assert_true((double)mid == (f->vals[c] + f->vals[c + 1]) / 2);
		fmt_check(f, conv, mid);
		fmt_check(f, conv, -mid);
		fmt_check(f, conv, nextafterf(mid, 0));
		fmt_check(f, conv, nextafterf(mid, INFINITY));
		fmt_check(f, conv, (float)f->vals[c]);
	}
	for (int i = 0; i < 200000; i++) {
		fmt_check(f, conv, f_bits((uint32_t)t_next(&rng)));
		fmt_check(f, conv, (float)((t_unif(&rng) * 2 - 1) * top));
		fmt_check(f, conv, (float)ldexp(t_unif(&rng) * 2 - 1,
						(int)t_below(&rng, 40) - 30));
	}
}

static void test_fp8_every_code(void **state)
{
	(void)state;
	for (uint32_t c = 0; c < 256; c++) {
		double want = fp8_value(c);
		float got = kv_fp8_e4m3_to_float((uint8_t)c);

		if (isnan(want)) {
			assert_true(isnan(got));
			assert_int_equal(kv_float_to_fp8_e4m3(got), 0x7f);
			continue;
		}
		assert_true((double)got == want);
		assert_int_equal(!!signbit(got), c >> 7);
		/* every finite code round-trips, -0 (0x80) included */
		assert_int_equal(kv_float_to_fp8_e4m3(got), c);
	}
	assert_true(kv_fp8_e4m3_to_float(0x7e) == 448.0f);
	assert_true(kv_fp8_e4m3_to_float(0x01) == 0x1p-9f);
	assert_true(kv_fp8_e4m3_to_float(0x08) == 0x1p-6f);
}

static void test_fp8_nearest_even_saturating(void **state)
{
	/* saturating: beyond 448 is 448 */
	struct fmt f = { .name = "e4m3", .n = 0x7f, .sign = 0x80 };

	(void)state;
	fmt_init(&f, fp8_value, f.n, 0);
	fmt_sweep(&f, conv_fp8, 1);
	free(f.vals);

	/* ties go to the even code */
	assert_int_equal(kv_float_to_fp8_e4m3(1.0625f), 0x38);	/* 1 | 1.125 */
	assert_int_equal(kv_float_to_fp8_e4m3(1.1875f), 0x3a);	/* 1.125 | 1.25 */
	assert_int_equal(kv_float_to_fp8_e4m3(0x1p-10f), 0x00);	/* 0 | 2^-9 */
	assert_int_equal(kv_float_to_fp8_e4m3(0x3p-10f), 0x02);
	assert_int_equal(kv_float_to_fp8_e4m3(0xfp-10f), 0x08);	/* subnormal | normal */
	assert_int_equal(kv_float_to_fp8_e4m3(400.0f), 0x7c);	/* 384 | 416 */
	assert_int_equal(kv_float_to_fp8_e4m3(432.0f), 0x7e);	/* 416 | 448 */
	/* saturation, never NaN for a number */
	assert_int_equal(kv_float_to_fp8_e4m3(448.0f), 0x7e);
	assert_int_equal(kv_float_to_fp8_e4m3(464.0f), 0x7e);
	assert_int_equal(kv_float_to_fp8_e4m3(480.0f), 0x7e);
	assert_int_equal(kv_float_to_fp8_e4m3(1e30f), 0x7e);
	assert_int_equal(kv_float_to_fp8_e4m3(INFINITY), 0x7e);
	assert_int_equal(kv_float_to_fp8_e4m3(-INFINITY), 0xfe);
	assert_int_equal(kv_float_to_fp8_e4m3(-500.0f), 0xfe);
	assert_int_equal(kv_float_to_fp8_e4m3(NAN), 0x7f);
	assert_int_equal(kv_float_to_fp8_e4m3(-NAN), 0x7f);
	assert_int_equal(kv_float_to_fp8_e4m3(-0.0f), 0x80);
	assert_int_equal(kv_float_to_fp8_e4m3(FLT_TRUE_MIN), 0x00);
}

static void test_half_every_code(void **state)
{
	(void)state;
	for (uint32_t c = 0; c < 65536; c++) {
		double want = half_value(c);
		float got = kv_half_to_float((uint16_t)c);
		uint16_t back = kv_float_to_half(got);

		if (isnan(want)) {
			/* NaN stays NaN, payload kept, quieted */
			assert_true(isnan(got));
			assert_int_equal(back, c | 0x200);
			continue;
		}
		assert_true((double)got == want);
		assert_int_equal(!!signbit(got), c >> 15);
		assert_int_equal(back, c);
	}
}

static void test_half_nearest_even(void **state)
{
	struct fmt f = { .name = "half", .n = 0x7c01, .sign = 0x8000 };

	(void)state;
	fmt_init(&f, half_value, f.n, 65536.0);
	fmt_sweep(&f, conv_half, 2);
	free(f.vals);

	assert_int_equal(kv_float_to_half(65504.0f), 0x7bff);
	assert_int_equal(kv_float_to_half(65519.996f), 0x7bff);
	assert_int_equal(kv_float_to_half(65520.0f), 0x7c00);	/* tie: inf */
	assert_int_equal(kv_float_to_half(-1e6f), 0xfc00);
	assert_int_equal(kv_float_to_half(INFINITY), 0x7c00);
	assert_int_equal(kv_float_to_half(0x1p-24f), 0x0001);
	assert_int_equal(kv_float_to_half(0x1p-25f), 0x0000);	/* tie: 0 */
	assert_int_equal(kv_float_to_half(0x3p-25f), 0x0002);	/* tie: even */
	assert_int_equal(kv_float_to_half(0x1.002p0f), 0x3c00);	/* 1 + 2^-11 */
	assert_int_equal(kv_float_to_half(0x1.006p0f), 0x3c02);
	assert_int_equal(kv_float_to_half(0x1.ffcp-15f), 0x0400); /* to normal */
	assert_int_equal(kv_float_to_half(-0.0f), 0x8000);
	assert_int_equal(kv_float_to_half(NAN) & 0x7e00, 0x7e00);
}

static void test_bf16_every_code_and_nearest_even(void **state)
{
	struct fmt f = { .name = "bf16", .n = 0x7f81, .sign = 0x8000 };

	(void)state;
	for (uint32_t c = 0; c < 65536; c++) {
		double want = bf16_value(c);
		float got = kv_bf16_to_float((uint16_t)c);

		if (isnan(want)) {
			assert_true(isnan(got));
			assert_int_equal(kv_float_to_bf16(got), c | 0x40);
			continue;
		}
		assert_true((double)got == want);
		assert_int_equal(kv_float_to_bf16(got), c);
	}
	fmt_init(&f, bf16_value, f.n, 0x1p128);
	fmt_sweep(&f, conv_bf16, 3);
	free(f.vals);

	assert_int_equal(kv_float_to_bf16(0x1.01p0f), 0x3f80);	/* tie: even */
	assert_int_equal(kv_float_to_bf16(0x1.03p0f), 0x3f82);
	assert_int_equal(kv_float_to_bf16(FLT_MAX), 0x7f80);
	assert_int_equal(kv_float_to_bf16(f_bits(0x7f7f7fff)), 0x7f7f);
	assert_int_equal(kv_float_to_bf16(f_bits(0x00018000)), 0x0002);	/* subnormal tie */
	assert_int_equal(kv_float_to_bf16(-0.0f), 0x8000);
	assert_int_equal(kv_float_to_bf16(f_bits(0xff800001)), 0xffc0);
	assert_int_equal(bits_f(kv_bf16_to_float(0x0001)), 0x00010000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fp8_every_code),
		cmocka_unit_test(test_fp8_nearest_even_saturating),
		cmocka_unit_test(test_half_every_code),
		cmocka_unit_test(test_half_nearest_even),
		cmocka_unit_test(test_bf16_every_code_and_nearest_even),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
