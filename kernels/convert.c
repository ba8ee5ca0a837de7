// SPDX-License-Identifier: MIT
/* Element conversions, exported for tests and tools (see kv_kernels.h). */
#include "kv_kernels.h"

float kv_fp8_e4m3_to_float(uint8_t v)
{
	return __kv_fp8_e4m3_to_float(v);
}

uint8_t kv_float_to_fp8_e4m3(float x)
{
	return __kv_float_to_fp8_e4m3(x);
}

float kv_half_to_float(uint16_t h)
{
	return __kv_half_to_float(h);
}

uint16_t kv_float_to_half(float x)
{
	return __kv_float_to_half(x);
}

float kv_bf16_to_float(uint16_t h)
{
	return __kv_bf16_to_float(h);
}

uint16_t kv_float_to_bf16(float x)
{
	return __kv_float_to_bf16(x);
}
