/* Exact conversions between fp32 and the 16-bit float formats.
 *
 * Narrowing rounds to nearest, ties to even (what torch's .to(bfloat16) and
 * .to(float16) do); widening is exact. NaN stays NaN (quiet, sign kept), an
 * overflow becomes infinity, fp16 keeps subnormals. Shared by the weight
 * loader and the CPU instruction kernels so both round identically.
 */
#ifndef AMK_NUMERICS_H
#define AMK_NUMERICS_H

#include <stddef.h>
#include <stdint.h>

uint16_t amk_f32_to_bf16(float f);
float amk_bf16_to_f32(uint16_t h);
uint16_t amk_f32_to_f16(float f);
float amk_f16_to_f32(uint16_t h);

/* Round an fp32 value through the format and back (the value an fp32
 * computation stores into a bf16 / f16 buffer). */
float amk_round_bf16(float f);
float amk_round_f16(float f);

/* Array forms; `dst` and `src` must not overlap. */
void amk_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n);
void amk_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);
void amk_f32_to_f16_n(uint16_t *dst, const float *src, size_t n);
void amk_f16_to_f32_n(float *dst, const uint16_t *src, size_t n);

#endif
