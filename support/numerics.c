/* fp32 <-> bf16 / fp16 conversions, bit-exact round-to-nearest-even. */
#include "amk/numerics.h"

#include <string.h>

static uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t amk_f32_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign, force quiet bit */
    return (uint16_t)((u >> 16) | 0x0040u);
  /* Adding 0x7fff plus the lowest kept bit rounds half to even; a carry out
   * of the mantissa correctly bumps the exponent (up to infinity). */
  uint32_t lsb = (u >> 16) & 1u;
  return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}

float amk_bf16_to_f32(uint16_t h) { return bits_float((uint32_t)h << 16); }

uint16_t amk_f32_to_f16(float f) {
  uint32_t u = float_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t abs_bits = u & 0x7fffffffu;

  if (abs_bits >= 0x7f800000u) { /* inf or NaN */
    if (abs_bits == 0x7f800000u)
      return (uint16_t)(sign | 0x7c00u);
    return (uint16_t)(sign | 0x7e00u | ((abs_bits >> 13) & 0x3ffu));
  }
  /* 65520 = max half (65504) + half an ulp (16): it and above round to inf. */
  if (abs_bits >= 0x477ff000u)
    return (uint16_t)(sign | 0x7c00u);

  int32_t exp32 = (int32_t)(abs_bits >> 23); /* biased by 127 */
  uint32_t mant = abs_bits & 0x7fffffu;
  if (exp32 >= 113) { /* normal half: unbiased exponent >= -14 */
    uint32_t half_exp = (uint32_t)(exp32 - 112); /* rebias to 15 */
    uint32_t value = (half_exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu; /* the 13 dropped bits */
    if (rest > 0x1000u || (rest == 0x1000u && (value & 1u)))
      value++; /* may carry into the exponent, which is still correct */
    return (uint16_t)(sign | value);
  }
  /* Subnormal half (or zero): value = m * 2^-24 with m < 1024. */
  if (exp32 < 102) /* below 2^-25: rounds to zero (2^-25 exactly ties to 0) */
    return sign;
  uint32_t full = mant | 0x800000u; /* implicit bit */
  uint32_t shift = (uint32_t)(126 - exp32); /* 14 .. 24 */
  uint32_t value = full >> shift;
  uint32_t rest = full & ((1u << shift) - 1u);
  uint32_t halfway = 1u << (shift - 1u);
  if (rest > halfway || (rest == halfway && (value & 1u)))
    value++; /* 0x3ff + 1 becomes the smallest normal, as it should */
  return (uint16_t)(sign | value);
}

float amk_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp16 = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp16 == 0x1fu) /* inf / NaN */
    return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp16 != 0)
    return bits_float(sign | ((exp16 + 112u) << 23) | (mant << 13));
  if (mant == 0)
    return bits_float(sign);
  /* Subnormal: normalise the mantissa. */
  uint32_t exp32 = 113;
  while (!(mant & 0x400u)) {
    mant <<= 1;
    exp32--;
  }
  return bits_float(sign | (exp32 << 23) | ((mant & 0x3ffu) << 13));
}

float amk_round_bf16(float f) { return amk_bf16_to_f32(amk_f32_to_bf16(f)); }
float amk_round_f16(float f) { return amk_f16_to_f32(amk_f32_to_f16(f)); }

/* The array forms of the scalar conversions above. */
#define ARRAY_CONVERSION(name, dst_type, src_type, convert)                    \
  void name(dst_type *dst, const src_type *src, size_t n) {                    \
    for (size_t i = 0; i < n; i++)                                             \
      dst[i] = convert(src[i]);                                                \
  }
ARRAY_CONVERSION(amk_f32_to_bf16_n, uint16_t, float, amk_f32_to_bf16)
ARRAY_CONVERSION(amk_bf16_to_f32_n, float, uint16_t, amk_bf16_to_f32)
ARRAY_CONVERSION(amk_f32_to_f16_n, uint16_t, float, amk_f32_to_f16)
ARRAY_CONVERSION(amk_f16_to_f32_n, float, uint16_t, amk_f16_to_f32)
#undef ARRAY_CONVERSION
