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
/* inst_require for each of `n` fields in order: fails on the first missing. */
int inst_require_all(const AmkInstCall *call, const AmkParamField *fields, size_t n);
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
/* Elements [start, start + count) of a view as fp32 (the same values as
 * inst_load, converted a row at a time for the hot loops). */
void inst_load_row(const AmkTensorView *v, int64_t start, int64_t count, float *dst);
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

/* The row window a per-row op (RMSNORM, LAYERNORM, ROPE, EMBED,
 * KV_APPEND) covers out of its `total` rows: all of them, or with M_tile
 * given, rows [m_off, m_off + M_tile) (m_off default 0; a tile of a prefill
 * program's rows). m_off without M_tile, or a window outside [0, total),
 * fails with AMK_INST_ERR_SHAPE. */
int inst_row_window(const AmkInstCall *call, int64_t total, int64_t *begin,
                    int64_t *end);

/* Fails with AMK_INST_ERR_SHAPE unless a and b have the same numel. */
int inst_require_same_numel(const AmkInstCall *call, const AmkTensorView *a,
                            const char *a_role, const AmkTensorView *b,
                            const char *b_role);
/* Fails unless the output and every input are numeric and each input has
 * ref's numel; an input is `role` for the dtype, `a_role` for the size. */
int inst_require_numeric_like(const AmkInstCall *call, const char *role, const char *a_role,
                              const AmkTensorView *ref, const char *ref_role);

/* A weight-only quantized matrix [rows, K]: int8 (qdtype 6, signed bytes
 * [rows, K]) or int4 (qdtype 7, q+8 nibbles, column 2b in the low nibble of
 * byte b of the row, rows padded to whole bytes), with per-group scales
 * [rows, ceil(K/group)] and optional zero-points of the same shape. */
typedef struct {
  const AmkTensorView *q, *scales, *zeros;
  int qdtype;
  int64_t rows, cols, group, n_groups, row_bytes;
} InstQuantMatrix;

/* Check the views against K and group and fill *m (zeros may be NULL). */
int inst_quant_matrix(const AmkInstCall *call, const AmkTensorView *q,
                      const AmkTensorView *scales, const AmkTensorView *zeros,
                      int qdtype, int64_t cols, int64_t group,
                      InstQuantMatrix *m);
/* Dequantize row `row` into dst[cols]: (q - zero) * scale in fp32. */
void inst_quant_row(const InstQuantMatrix *m, int64_t row, float *dst);
/* The same for columns [begin, end) of the row, into dst[0, end - begin). */
void inst_quant_row_range(const InstQuantMatrix *m, int64_t row, int64_t begin, int64_t end,
                          float *dst);

/* ---- attention (attention.c), shared with the fused patterns ---------------- */

/* The params of one attention: head_dim, n_heads, n_kv_heads, the window
 * [kv_start, kv_start + kv_len), scale and flags bit 1 (partial). */
typedef struct {
  int64_t head_dim, n_heads, n_kv_heads, kv_start, kv_len;
  float scale;
  bool partial;
} InstAttention;

/* Where the keys and values are: key element d of KV head g at cache row j
 * is element j * row_stride + k_offset + g * head_dim + d of *k; values
 * likewise with v_offset in *v. (Separate caches: row_stride n_kv*head_dim,
 * offsets 0. The combined cache [max_seq, 2, n_kv*head_dim]: one view,
 * row_stride 2*n_kv*head_dim, v_offset n_kv*head_dim. The per-head cache
 * [max_seq, 2, head_dim] of KV head g: row_stride 2*head_dim, k_offset
 * -g*head_dim, v_offset head_dim - g*head_dim.) With `fresh` set, cache
 * row fresh_row is read from *fresh instead: one row of the layout (element
 * k_offset + g * head_dim + d, v_offset likewise), not from *k and *v. */
typedef struct {
  const AmkTensorView *k, *v;
  int64_t row_stride, k_offset, v_offset;
  const AmkTensorView *fresh;
  int64_t fresh_row;
} InstKvLayout;

/* Decode and check the attention params (required ones present, positive
 * head counts, n_kv_heads dividing n_heads). */
int inst_attention_params(const AmkInstCall *call, InstAttention *a);
/* The window lies in a cache of `rows` rows (ERR_INDEX otherwise). */
int inst_attention_check_window(const AmkInstCall *call, const InstAttention *a,
                                int64_t rows);
/* The output holds n_heads x head_dim (or n_heads x (head_dim + 2) partial). */
int inst_attention_check_output(const AmkInstCall *call, const InstAttention *a,
                                const AmkTensorView *out);
/* Attend query heads [h_begin, h_end) (q holds every head's n_heads *
 * head_dim elements) and write their rows of out; everything checked. */
int inst_attend_heads(const AmkInstCall *call, const InstAttention *a,
                      const AmkTensorView *q, const InstKvLayout *kv,
                      int64_t h_begin, int64_t h_end, AmkTensorView *out);

/* ---- GEMV (gemv.c) and its fused patterns (patterns.c) ---------------------- */

/* The plain GEMV_TILE (pattern 0), whatever flags says. patterns.c holds
 * amk_kernel_GEMV_TILE, which picks the pattern, so the dependency runs
 * from the patterns to the plain tile only. */
int inst_gemv_plain(const AmkInstCall *call);

/* ---- FUSED recipes (fused.c parses them; dispatch.c runs them) --------------- */

typedef enum { INST_ARG_INPUT, INST_ARG_SCRATCH } InstRecipeArgKind;

/* One step: an ordinary instruction over task inputs and scratch slots. */
typedef struct {
  AmkOp op;
  AmkInstParams params;
  uint32_t n_args;
  InstRecipeArgKind arg_kind[AMK_MAX_INPUTS];
  int32_t arg_index[AMK_MAX_INPUTS];
  int32_t out_slot; /* -1: the task's output */
  bool has_shape, has_dtype;
  uint32_t rank;
  int64_t shape[AMK_MAX_RANK];
  AmkDType dtype;
} InstRecipeStep;

typedef struct {
  uint32_t n_steps;
  InstRecipeStep steps[AMK_RECIPE_MAX_STEPS];
} InstRecipe;

/* Parse and check a recipe for a task with n_inputs inputs; on failure
 * AMK_INST_ERR_RECIPE with "fused: malformed recipe: ..." in err. */
int inst_recipe_parse(const AmkValue *recipe, uint32_t n_inputs, InstRecipe *r,
                      char *err, size_t err_len);

#endif
