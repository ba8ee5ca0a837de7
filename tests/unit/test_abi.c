// SPDX-License-Identifier: MIT
/*
 * The wire and ring ABI (include/kv/abi.h): the layout proofs again at run
 * time, so a compiler that ignored _Static_assert still fails here, and
 * the inline helpers that size a block.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <kv/abi.h>

static struct kv_geometry geom(uint32_t layers, uint32_t kv_heads,
			       uint32_t head_dim, uint32_t block_tokens,
			       uint32_t dtype)
{
	struct kv_geometry g = {
		.layers = layers, .kv_heads = kv_heads, .head_dim = head_dim,
		.block_tokens = block_tokens, .dtype = dtype,
	};

	return g;
}

static void test_abi_struct_sizes(void **state)
{
	(void)state;
	assert_int_equal(sizeof(struct kv_sqe), 64);
	assert_int_equal(sizeof(struct kv_cqe), 16);
	assert_int_equal(sizeof(struct kv_hello), 160);
	assert_int_equal(sizeof(struct kv_geometry), 32);
	assert_int_equal(sizeof(struct kv_ring_offsets), 64);
	assert_int_equal(sizeof(struct kv_stats) % 8, 0);
	assert_int_equal(sizeof(struct kv_admin_ns) % 8, 0);
	assert_int_equal(sizeof(struct kv_admin_client) % 8, 0);
}

static void test_abi_sqe_offsets(void **state)
{
	(void)state;
	assert_int_equal(offsetof(struct kv_sqe, opcode), 0);
	assert_int_equal(offsetof(struct kv_sqe, flags), 1);
	assert_int_equal(offsetof(struct kv_sqe, resv0), 2);
	assert_int_equal(offsetof(struct kv_sqe, nr), 4);
	assert_int_equal(offsetof(struct kv_sqe, off), 8);
	assert_int_equal(offsetof(struct kv_sqe, resv1), 12);
	assert_int_equal(offsetof(struct kv_sqe, user_data), 16);
	assert_int_equal(offsetof(struct kv_sqe, args), 24);
	assert_int_equal(offsetof(struct kv_sqe, resv2), 56);
}

static void test_abi_cqe_offsets(void **state)
{
	(void)state;
	assert_int_equal(offsetof(struct kv_cqe, user_data), 0);
	assert_int_equal(offsetof(struct kv_cqe, res), 8);
	assert_int_equal(offsetof(struct kv_cqe, flags), 12);
}

static void test_abi_hello_welcome_offsets(void **state)
{
	(void)state;
	assert_int_equal(offsetof(struct kv_hello, magic), 0);
	assert_int_equal(offsetof(struct kv_hello, sq_entries), 16);
	assert_int_equal(offsetof(struct kv_hello, model_id), 32);
	assert_int_equal(offsetof(struct kv_hello, geom), 96);
	assert_int_equal(offsetof(struct kv_hello, model_rev), 128);
	assert_int_equal(offsetof(struct kv_welcome, pool_bytes), 32);
	assert_int_equal(offsetof(struct kv_welcome, ring) % 8, 0);
	assert_int_equal(offsetof(struct kv_welcome, ring), 72);
	/* ABI 3.3 took 3.2's resv and appended the default policy */
	assert_int_equal(offsetof(struct kv_welcome, boot_id), 368);
	assert_int_equal(offsetof(struct kv_welcome, max_context), 376);
	assert_int_equal(offsetof(struct kv_welcome, ctx_refused), 380);
	assert_int_equal(KV_WELCOME_SIZE_3_2, 384);
	assert_int_equal(sizeof(struct kv_welcome), 400);
	assert_int_equal(offsetof(struct kv_ctx_policy, window), 12);
}

static void test_abi_constants(void **state)
{
	(void)state;
	assert_int_equal(KV_PAGE_BYTES, 2 << 20);
	assert_int_equal(1UL << KV_PAGE_SHIFT, KV_PAGE_BYTES);
	assert_int_equal(KV_MAGIC, 0x3144564b);
	assert_memory_equal("KVD1", &(uint32_t){ KV_MAGIC }, 4);
	/* Opcode numbers are ABI. */
	assert_int_equal(KV_OP_NOP, 0);
	assert_int_equal(KV_OP_ALLOC, 1);
	assert_int_equal(KV_OP_RELEASE, 2);
	assert_int_equal(KV_OP_REF, 3);
	assert_int_equal(KV_OP_STATS, 4);
}

static void test_abi_dtype_bytes(void **state)
{
	(void)state;
	assert_int_equal(kv_dtype_bytes(KV_DTYPE_FP16), 2);
	assert_int_equal(kv_dtype_bytes(KV_DTYPE_BF16), 2);
	assert_int_equal(kv_dtype_bytes(KV_DTYPE_FP32), 4);
	assert_int_equal(kv_dtype_bytes(KV_DTYPE_FP8_E4M3), 1);
	assert_int_equal(kv_dtype_bytes(KV_DTYPE_INT8), 1);
	assert_int_equal(kv_dtype_bytes(KV_DTYPE__MAX), 0);
	assert_int_equal(kv_dtype_bytes(0xffffffffU), 0);
}

static void test_abi_block_bytes_known(void **state)
{
	struct kv_geometry g;

	(void)state;
	/* Llama-3-8B like: 32 layers, 8 kv heads, 128 dim, 16 tokens, fp16. */
	g = geom(32, 8, 128, 16, KV_DTYPE_FP16);
	assert_int_equal(kv_geometry_block_bytes(&g), 2 << 20);
	/* 80 layers (70B class): 5 MiB. */
	g = geom(80, 8, 128, 16, KV_DTYPE_FP16);
	assert_int_equal(kv_geometry_block_bytes(&g), 5 << 20);
	g = geom(80, 8, 128, 16, KV_DTYPE_BF16);
	assert_int_equal(kv_geometry_block_bytes(&g), 5 << 20);
	g = geom(32, 8, 128, 16, KV_DTYPE_FP8_E4M3);
	assert_int_equal(kv_geometry_block_bytes(&g), 1 << 20);
	g = geom(32, 8, 128, 16, KV_DTYPE_FP32);
	assert_int_equal(kv_geometry_block_bytes(&g), 4 << 20);
	g = geom(13, 5, 80, 16, KV_DTYPE_FP16);
	assert_int_equal(kv_geometry_block_bytes(&g), 332800);
	g = geom(4, 2, 64, 16, KV_DTYPE_INT8);
	assert_int_equal(kv_geometry_block_bytes(&g), 16384);
	/* per-token scales: 2 * 8 * 16 * 4 = 1 KiB more a layer */
	g = geom(32, 8, 128, 16, KV_DTYPE_FP8_E4M3);
	g.quant = KV_QUANT_TOKEN;
	assert_int_equal(kv_geometry_layer_bytes(&g), 32768 + 1024);
	assert_int_equal(kv_geometry_block_bytes(&g), 32 * (32768 + 1024));
	/* per-channel: 2 * 8 * 128 * 4 = 8 KiB a layer */
	g.quant = KV_QUANT_CHANNEL;
	assert_int_equal(kv_geometry_block_bytes(&g), 32 * (32768 + 8192));
	/* padding: 3 layers of 2*1*1*64 + 2*1*1*4 = 136 -> 144; 432 -> 512 */
	g = geom(3, 1, 64, 1, KV_DTYPE_INT8);
	g.quant = KV_QUANT_TOKEN;
	assert_int_equal(kv_geometry_layer_bytes(&g), 144);
	assert_int_equal(kv_geometry_block_bytes(&g), 512);
	g.quant = KV_QUANT__MAX;
	assert_int_equal(kv_geometry_block_bytes(&g), 0);
}

static void test_abi_block_bytes_64bit(void **state)
{
	struct kv_geometry g = geom(1024, 1024, 1024, 1024, KV_DTYPE_FP32);

	(void)state;
	/* 2^10 * 2 * 2^10 * 2^10 * 2^10 * 4 = 2^43: no 32-bit overflow. */
	assert_true(kv_geometry_block_bytes(&g) == 1ULL << 43);
}

static void test_abi_block_bytes_zero(void **state)
{
	struct kv_geometry g;

	(void)state;
	g = geom(32, 8, 128, 16, KV_DTYPE__MAX);
	assert_int_equal(kv_geometry_block_bytes(&g), 0);
	g = geom(32, 8, 128, 16, 77);
	assert_int_equal(kv_geometry_block_bytes(&g), 0);
	g = geom(0, 8, 128, 16, KV_DTYPE_FP16);
	assert_int_equal(kv_geometry_block_bytes(&g), 0);
	g = geom(32, 0, 128, 16, KV_DTYPE_FP16);
	assert_int_equal(kv_geometry_block_bytes(&g), 0);
	g = geom(32, 8, 0, 16, KV_DTYPE_FP16);
	assert_int_equal(kv_geometry_block_bytes(&g), 0);
	g = geom(32, 8, 128, 0, KV_DTYPE_FP16);
	assert_int_equal(kv_geometry_block_bytes(&g), 0);
}

/* Opaque blocks: layers runs of run_bytes (head_dim), nothing else. */
static void test_abi_block_bytes_opaque(void **state)
{
	struct kv_geometry g = geom(3, 1, 32768, 16, KV_DTYPE_OPAQUE);

	(void)state;
	assert_int_equal(kv_dtype_bytes(KV_DTYPE_OPAQUE), 1);
	assert_int_equal(g.run_bytes, 32768);
	assert_true(kv_geometry_block_bytes(&g) == 3 * 32768);
	/* block_tokens is part of the key, not of the size */
	g.block_tokens = 256;
	assert_true(kv_geometry_block_bytes(&g) == 3 * 32768);
	g.run_bytes = KV_OPAQUE_RUN_MAX;
	g.layers = 1024;
	assert_true(kv_geometry_block_bytes(&g) == 1ULL << 40);
	g.quant = KV_QUANT_TOKEN;		/* no scales on opaque bytes */
	assert_int_equal(kv_geometry_block_bytes(&g), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_abi_block_bytes_opaque),
		cmocka_unit_test(test_abi_struct_sizes),
		cmocka_unit_test(test_abi_sqe_offsets),
		cmocka_unit_test(test_abi_cqe_offsets),
		cmocka_unit_test(test_abi_hello_welcome_offsets),
		cmocka_unit_test(test_abi_constants),
		cmocka_unit_test(test_abi_dtype_bytes),
		cmocka_unit_test(test_abi_block_bytes_known),
		cmocka_unit_test(test_abi_block_bytes_64bit),
		cmocka_unit_test(test_abi_block_bytes_zero),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
