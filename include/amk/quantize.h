/* Weight-only quantization of one matrix row, in the reference's format
 * (docs/Quantization.md; ../shared/docs/AMK-REFERENCE.md §4).
 *
 * A row of `cols` weights is cut into groups of `group` columns along K
 * (the last group may be shorter). Each group gets one scale,
 * absmax / qmax computed in fp32 (qmax 127 for 8 bits, 7 for 4) and kept
 * at least 1e-8, stored as fp16; each weight becomes
 * q = round-half-to-even(w / scale) clamped to [-127, 127] (8 bits) or
 * [-8, 7] (4 bits), dividing by the fp32 scale as torch does before the
 * scale is narrowed. 8 bits: one signed byte per column. 4 bits: q + 8 as a
 * nibble, column 2b in the low nibble of byte b and 2b + 1 in the high one;
 * an odd row ends with a zero high nibble.
 *
 * Pure arithmetic on caller-owned arrays: the weight loader quantizes a
 * checkpoint tensor row by row as it reads it.
 */
#ifndef AMK_QUANTIZE_H
#define AMK_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>

/* Columns per scale when none is asked for. */
#define AMK_QUANT_DEFAULT_GROUP 128

/* The largest |q| a format's scale maps the absmax to: 127 or 7 (0 for a
 * width that is neither 8 nor 4). */
int amk_quant_qmax(int bits);
/* Bytes one row of `cols` quantized weights takes: cols, or ceil(cols/2). */
int64_t amk_quant_row_bytes(int bits, int64_t cols);
/* Scales per row: ceil(cols / group). */
int64_t amk_quant_groups(int64_t cols, int64_t group);

/* Quantizes w[0 .. cols) into q (amk_quant_row_bytes bytes) and scales
 * (amk_quant_groups fp16 values). False, leaving q and scales undefined,
 * when a weight is not finite or a scale does not fit fp16 (|w| above
 * qmax * 65504): such a row has no faithful quantized form. */
bool amk_quantize_row(const float *w, int64_t cols, int bits, int64_t group, uint8_t *q,
                      uint16_t *scales);

#endif
