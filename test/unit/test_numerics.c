/* fp32 <-> bf16 / fp16 conversions: hand-picked bit patterns (ties, overflow,
 * subnormals, NaN) and exhaustive round trips of every 16-bit value. */
#include <stdint.h>
#include <string.h>

#include "amk/numerics.h"
#include "unit.h"

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint32_t to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

int main(void) {
  UnitCounts c = {0, 0};
  /* bf16: keep the top 16 bits, rounding the low 16 to nearest even. */
  CHECK(&c, amk_f32_to_bf16(1.0f) == 0x3f80);
  CHECK(&c, amk_f32_to_bf16(from_bits(0x3f808000)) == 0x3f80); /* tie, even */
  CHECK(&c, amk_f32_to_bf16(from_bits(0x3f818000)) == 0x3f82); /* tie, odd */
  CHECK(&c, amk_f32_to_bf16(from_bits(0x3f808001)) == 0x3f81); /* above */
  CHECK(&c, amk_f32_to_bf16(from_bits(0x3f807fff)) == 0x3f80); /* below */
  CHECK(&c, amk_f32_to_bf16(from_bits(0x7f7fffff)) == 0x7f80); /* max -> inf */
  CHECK(&c, amk_f32_to_bf16(-0.0f) == 0x8000);
  uint16_t nan16 = amk_f32_to_bf16(from_bits(0x7f800001)); /* payload in low bits */
  CHECK(&c, (nan16 & 0x7f80) == 0x7f80 && (nan16 & 0x7f) != 0);
  CHECK(&c, to_bits(amk_bf16_to_f32(0xc0a0)) == 0xc0a00000); /* -5 */
  CHECK(&c, amk_round_bf16(from_bits(0x3f818000)) == from_bits(0x3f820000));

  /* f16 */
  CHECK(&c, amk_f32_to_f16(1.0f) == 0x3c00);
  CHECK(&c, amk_f32_to_f16(-2.0f) == 0xc000);
  CHECK(&c, amk_f32_to_f16(0.1f) == 0x2e66);
  CHECK(&c, amk_f32_to_f16(65504.0f) == 0x7bff);
  CHECK(&c, amk_f32_to_f16(65519.0f) == 0x7bff);
  CHECK(&c, amk_f32_to_f16(65520.0f) == 0x7c00); /* half an ulp up: inf */
  CHECK(&c, amk_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00);    /* tie, even */
  CHECK(&c, amk_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02);    /* tie, odd */
  CHECK(&c, amk_f32_to_f16(from_bits(0x38800000)) == 0x0400); /* 2^-14 */
  CHECK(&c, amk_f32_to_f16(from_bits(0x33800000)) == 0x0001); /* 2^-24 */
  CHECK(&c, amk_f32_to_f16(from_bits(0x33000000)) == 0x0000); /* 2^-25 tie */
  CHECK(&c, amk_f32_to_f16(from_bits(0x33400000)) == 0x0001); /* 1.5*2^-25 */
  CHECK(&c, amk_f32_to_f16(from_bits(0xb3c00000)) == 0x8002); /* -1.5*2^-24 tie -> even 2 */
  CHECK(&c, amk_f32_to_f16(from_bits(0x387fe000)) == 0x0400); /* rounds up into normal */
  CHECK(&c, amk_f32_to_f16(from_bits(0xff800000)) == 0xfc00);
  uint16_t nanh = amk_f32_to_f16(from_bits(0x7fc00000));
  CHECK(&c, (nanh & 0x7c00) == 0x7c00 && (nanh & 0x3ff) != 0);
  CHECK(&c, amk_f16_to_f32(0x0001) == from_bits(0x33800000));
  CHECK(&c, amk_f16_to_f32(0x03ff) == 1023.0f / 16777216.0f);
  CHECK(&c, amk_f16_to_f32(0x7bff) == 65504.0f);
  CHECK(&c, to_bits(amk_f16_to_f32(0x8000)) == 0x80000000);

  /* Every non-NaN 16-bit value survives widening and narrowing. */
  int bf16_bad = 0, f16_bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    if ((h & 0x7f80) != 0x7f80 || (h & 0x7f) == 0)
      bf16_bad += amk_f32_to_bf16(amk_bf16_to_f32((uint16_t)h)) != h;
    if ((h & 0x7c00) != 0x7c00 || (h & 0x3ff) == 0)
      f16_bad += amk_f32_to_f16(amk_f16_to_f32((uint16_t)h)) != h;
  }
  CHECK(&c, bf16_bad == 0);
  CHECK(&c, f16_bad == 0);

  float src[3] = {1.0f, -2.0f, 0.5f};
  uint16_t half[3];
  float back[3];
  amk_f32_to_f16_n(half, src, 3);
  amk_f16_to_f32_n(back, half, 3);
  CHECK(&c, memcmp(src, back, sizeof src) == 0);
  amk_f32_to_bf16_n(half, src, 3);
  amk_bf16_to_f32_n(back, half, 3);
  CHECK(&c, memcmp(src, back, sizeof src) == 0);
  return unit_finish("test_numerics", &c);
}
