// SPDX-License-Identifier: MIT
/* C references of the kernels (kernels/ *_ref.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kv_kernels.h"

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
	assert_int_equal(kv_ref_copy_blocks(pool, 32, &ok, 0), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_copy_blocks_copies_pairs),
		cmocka_unit_test(test_copy_blocks_rejects_bad_input),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
