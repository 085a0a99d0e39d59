/* Shared plumbing of the CPU instruction kernels (instructions/ only). */
#ifndef AMK_INST_INTERNAL_H
#define AMK_INST_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "amk/diag.h"
#include "amk/instructions.h"

/* One instruction call, as amk_inst_execute received it. The views have
 * already been checked: rank within bounds, numel equal to the product of
 * the dims, data non-NULL when numel > 0. */
typedef struct {
  AmkOp op;
  const AmkInstParams *p;
  const AmkTensorView *in;
  uint32_t n_in;
  AmkTensorView *out;
  uint32_t n_out;
  const AmkInstExtra *extra; /* never NULL inside a kernel */
  char *err;
  size_t err_len;
} AmkInstCall;

typedef int (*AmkKernelFn)(const AmkInstCall *call);

/* One kernel per opcode, named after the AMK_OPS entry. */
#define X(name, code, text, mi, ma, no, req)                                   \
  int amk_kernel_##name(const AmkInstCall *call);
AMK_OPS(X)
#undef X

/* Write "<op>: <message>" into call->err and return status. */
int inst_fail(const AmkInstCall *call, int status, const char *fmt, ...)
    AMK_PRINTF(3, 4);

/* Fails with AMK_INST_ERR_PARAM unless the param was given. */
int inst_require(const AmkInstCall *call, AmkParamField field);
/* An 'i' param, or `fallback` when it was not given. */
int32_t inst_int_or(const AmkInstCall *call, AmkParamField field,
                    int32_t fallback);

/* Float-valued dtypes the kernels read and write: F32, F16, BF16, I32, I8,
 * U8, BOOL (not the fp8 formats, not packed I4). */
bool inst_dtype_is_numeric(AmkDType d);
bool inst_dtype_is_integer(AmkDType d); /* I32, I8, U8, BOOL */
/* Fails with AMK_INST_ERR_DTYPE unless the view's dtype is numeric. */
int inst_require_numeric(const AmkInstCall *call, const AmkTensorView *v,
                         const char *role);
/* Fails with AMK_INST_ERR_DTYPE unless the view holds integers. */
int inst_require_integer(const AmkInstCall *call, const AmkTensorView *v,
                         const char *role);

/* Element i widened exactly to fp32 (integers convert as C does). */
float inst_load(const AmkTensorView *v, int64_t i);
/* Element i of an integer view. */
int64_t inst_load_int(const AmkTensorView *v, int64_t i);
/* Store x into element i, rounding to nearest even for BF16/F16 and
 * truncating toward zero (saturated, NaN as 0) for integer dtypes. */
void inst_store(AmkTensorView *v, int64_t i, float x);

/* The last dim (1 for a scalar). */
int64_t inst_width(const AmkTensorView *v);
/* Bytes of the view's storage. */
int64_t inst_nbytes(const AmkTensorView *v);

/* The column window an elementwise op covers: every column, or with
 * N_tile given, columns [n_off, n_off + N_tile) of the output's last dim
 * (a tiled elementwise step of a FUSED recipe). */
typedef struct {
  int64_t rows, width, col_begin, col_end;
} InstColumns;
int inst_columns(const AmkInstCall *call, const AmkTensorView *out,
                 InstColumns *cols);

/* Fails with AMK_INST_ERR_SHAPE unless a and b have the same numel. */
int inst_require_same_numel(const AmkInstCall *call, const AmkTensorView *a,
                            const char *a_role, const AmkTensorView *b,
                            const char *b_role);

/* A weight-only quantized matrix [rows, K]: int8 (qdtype 6, signed bytes
 * [rows, K]) or int4 (qdtype 7, q+8 nibbles, column 2b in the low nibble of
 * byte b of the row, rows padded to whole bytes), with per-group scales
 * [rows, ceil(K/group)] and optional zero-points of the same shape. */
typedef struct {
  const AmkTensorView *q, *scales, *zeros;
  int qdtype;
  int64_t rows, cols, group, n_groups, row_bytes;
} InstQuantMatrix;

#define AMK_QDTYPE_INT8 6 /* AMK_DTYPE_I8 */
#define AMK_QDTYPE_INT4 7 /* AMK_DTYPE_I4 */

/* Check the views against K and group and fill *m (zeros may be NULL). */
int inst_quant_matrix(const AmkInstCall *call, const AmkTensorView *q,
                      const AmkTensorView *scales, const AmkTensorView *zeros,
                      int qdtype, int64_t cols, int64_t group,
                      InstQuantMatrix *m);
/* Dequantize row `row` into dst[cols]: (q - zero) * scale in fp32. */
void inst_quant_row(const InstQuantMatrix *m, int64_t row, float *dst);

#endif
