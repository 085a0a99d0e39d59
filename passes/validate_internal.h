/* Shared state of one validation run (validate.c, validate_bounds.c; the
 * helpers both use live in validate_common.c). */
#ifndef AMK_VALIDATE_INTERNAL_H
#define AMK_VALIDATE_INTERNAL_H

#include "amk/validate.h"
#include "validate_graph.h"

/* A task's params by field (the last occurrence of a key wins, as in
 * amk_task_param); built without a string compare per lookup. */
typedef struct {
  const AmkValue *v[AMK_PARAM_COUNT];
} AmkParamTable;

/* The field named `key`, or -1 (same answer as amk_param_from_name). */
int amk_validator_param_field(const char *key);

struct AmkValidatorShape; /* validate_bounds.c: one buffer's checked shape */

typedef struct {
  const AmkModule *m;
  AmkScratch *scratch; /* every array below lives here */
  AmkDiagEngine *diag;
  AmkValidateOptions opts;
  int64_t errors, warnings;
  bool stopped; /* the error cap was reached: the verdict is settled */
  AmkIdIndex bufs, ctrs, tasks;
  AmkTaskGraph g;
  /* Per buffer index: writer tasks and using tasks, in list order. */
  uint32_t *wr_off, *wr, *use_off, *use;
  uint32_t *write_order; /* buffers by first write (the reference's order) */
  uint32_t n_write_order;
  uint32_t *writer_slot; /* the counter slot all writers share, or none */
  uint32_t *scratch_ix;  /* as many entries as there are writes */
  struct AmkValidatorShape *shapes; /* per buffer, built by the bounds checks */
  uint32_t *pfield_off; /* per task: where its params' fields start in pfield */
  uint8_t *pfield;      /* the AmkParamField of each param, UINT8_MAX unknown */
} AmkValidator;

/* Task `t`'s params by field; returns the mask of fields present. */
uint32_t amk_validator_params(const AmkValidator *v, uint32_t t,
                              AmkParamTable *pt);

/* amk_op_max_inputs for task `t`, with its flags param when that is an INT
 * (a mistyped one is reported by the param checks). */
int amk_validator_max_inputs(const AmkValidator *v, uint32_t t);
/* The pattern of task t when it is an accumulating tile (docs/Fusion.md: a
 * GEMV_TILE whose pattern amk_gemv_pattern_accumulates, mlp or
 * attention_o), which adds its share of a split-K projection into its
 * output (an accumulator) instead of storing to it; else -1. */
int64_t amk_validator_accumulating_pattern(const AmkValidator *v, uint32_t t);
static inline bool amk_validator_is_accumulating_tile(const AmkValidator *v, uint32_t t) {
  return amk_validator_accumulating_pattern(v, t) >= 0;
}
/* What an accumulating pattern's n_off / N_tile count and what its tiles'
 * sum is, for the accumulator rules (checks 4a, 7, 10) and their messages.
 * Every tile of one accumulator must share its pattern. */
typedef struct {
  const char *columns;    /* "intermediate columns": what n_off / N_tile count */
  const char *whole;      /* "intermediates": what those columns are columns of */
  const char *weights;    /* "down weights": the input whose rows are those columns */
  const char *projection; /* "down projection": the sum the tiles make */
  uint32_t n_inputs;      /* the pattern's inputs */
  uint32_t size_input;    /* the input whose rows (dim 0) are all the columns */
  /* Its weight-only quantized form (0: none): its inputs, and the input
   * whose rows over quant_rows_per_column are all the columns. */
  uint32_t quant_inputs, quant_size_input, quant_rows_per_column;
} AmkAccumulatorInfo;
/* NULL for a pattern that does not accumulate. */
const AmkAccumulatorInfo *amk_validator_accumulator_info(int64_t pattern);

/* amk_value_as_int, inlined (the checks call it for every param and dim). */
static inline bool amk_validator_int(const AmkValue *v, int64_t *out) {
  if (!v || v->kind != AMK_VALUE_INT)
    return false;
  *out = v->as.i;
  return true;
}

void amk_validator_report(AmkValidator *v, AmkSeverity sev, AmkLoc loc,
                          const char *fmt, ...) AMK_PRINTF(4, 5);
const char *amk_validator_label(const AmkTask *t);
/* "[a, b, c]" of n values (value_at(ctx, i)), cut with ", ..." to fit
 * size bytes. */
void amk_validator_format_list(size_t n, int32_t (*value_at)(const void *ctx, size_t i),
                               const void *ctx, char *buf, size_t size);
/* "[13, 14]": the ids of tasks (indices), cut with ", ..." to fit `size`
 * (at least 16). */
void amk_validator_format_task_ids(const AmkModule *m, const uint32_t *tasks,
                                   size_t n, char *buf, size_t size);
/* A multi-row ATTENTION_TILE's write footprint in its output's [rows,
 * n_heads*head_dim] view: rows [row_lo, row_hi) x columns [col_lo, col_hi)
 * from its optional n_off/N_tile (query heads) and m_off/M_tile (query
 * rows). False when it carries none of them, or they are missing or out
 * of range (the bounds checks report those): the whole output then. */
bool amk_validator_attention_rect(const AmkValidator *v, uint32_t t, int64_t rows, int64_t width,
                                  int64_t *row_lo, int64_t *row_hi, int64_t *col_lo,
                                  int64_t *col_hi);
/* A per-row op's row window (RMSNORM, LAYERNORM, ROPE, EMBED, KV_APPEND
 * with M_tile: op rows [m_off, m_off + M_tile)), in elements of its output. */
typedef enum {
  AMK_ROW_WINDOW_NONE,   /* not such an op, or no M_tile and no m_off */
  AMK_ROW_WINDOW_OK,     /* a window inside the op's rows */
  AMK_ROW_WINDOW_UNKNOWN /* params or shapes the bounds checks report */
} AmkRowWindowKind;
typedef struct {
  AmkRowWindowKind kind;
  bool has_m_off, has_m_tile;
  int64_t rows;       /* the op's rows (norm rows of hidden, positions, ids, new rows) */
  int64_t m_off, m_tile;
  int64_t kv_pos;     /* KV_APPEND: the pos param (cache rows pos + m_off ...); else -1 */
  int64_t lo, hi;     /* OK: the output elements written, [lo, hi) */
  int64_t out_width;  /* OK: the output's last dim */
} AmkRowWindow;
/* Whether `op` takes a row window; every op is listed. */
bool amk_op_takes_row_window(AmkOp op);
/* Task `t`'s row window, from its params and its buffers' shapes. */
AmkRowWindow amk_validator_row_window(const AmkValidator *v, uint32_t t);

/* Whether reader `t` (input `input`, buffer index b) needs no ordering
 * after writer `w` of b: an attention_rope or attention_o tile with flags
 * bit AMK_FLAG_KV_FROM_QKV reads its cache (input 2, attention_o's input
 * 3) only below meta.pos, and w (a GEMV tile: rope_kv) writes only other
 * rows. Needs no shapes built. */
bool amk_validator_read_misses_writer(const AmkValidator *v, uint32_t t, uint32_t input,
                                      uint32_t b, uint32_t w);

/* Checks beyond the reference: page bindings, shapes, semantic bounds. */
void amk_validate_check_bounds(AmkValidator *v);
/* Whether the semantic bounds check anything for `op` (its params against
 * its buffers' shapes); every op is listed, so a new op fails to compile in
 * validate_bounds.c until it is decided. */
bool amk_validate_op_has_bounds(AmkOp op);

#endif
