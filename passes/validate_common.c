/* What the validator's checks share (validate.c, validate_bounds.c):
 * reporting under the error cap, task labels and a task's params by field.
 * A file of its own so that the two check files use it and never each
 * other. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "validate_internal.h"

/* Diagnostics about the module as a whole carry no position. */
static const AmkLoc no_loc = {0, 0};

void amk_validator_report(AmkValidator *v, AmkSeverity sev, AmkLoc loc,
                          const char *fmt, ...) {
  if (v->stopped)
    return;
  if (sev == AMK_SEVERITY_ERROR && v->errors >= v->opts.max_errors) {
    v->stopped = true;
    amk_note(v->diag, no_loc,
             "too many errors (%d); validation stopped", v->opts.max_errors);
    return;
  }
  if (sev == AMK_SEVERITY_WARNING && v->warnings >= v->opts.max_errors)
    return;
  va_list ap;
  va_start(ap, fmt);
  amk_diag_v(v->diag, sev, loc, fmt, ap);
  va_end(ap);
  if (sev == AMK_SEVERITY_ERROR)
    v->errors++;
  else if (sev == AMK_SEVERITY_WARNING)
    v->warnings++;
}

const char *amk_validator_label(const AmkTask *t) {
  return t->label ? t->label : "";
}

uint32_t amk_validator_params(const AmkValidator *v, uint32_t t,
                              AmkParamTable *pt) {
  const AmkTask *task = &v->m->tasks[t];
  const uint8_t *field = &v->pfield[v->pfield_off[t]];
  uint32_t present = 0;
  memset(pt, 0, sizeof *pt);
  for (uint32_t i = 0; i < task->n_params; i++)
    if (field[i] != UINT8_MAX) {
      pt->v[field[i]] = &task->params[i].value;
      present |= 1u << field[i];
    }
  return present;
}

int amk_validator_max_inputs(const AmkValidator *v, uint32_t t) {
  const AmkTask *task = &v->m->tasks[t];
  int64_t flags = 0;
  if (task->op == AMK_OP_GEMV_TILE) { /* only its range depends on flags */
    AmkParamTable pt;
    amk_validator_params(v, t, &pt);
    if (!amk_validator_int(pt.v[AMK_PARAM_flags], &flags))
      flags = 0;
  }
  return amk_op_max_inputs(task->op, flags);
}

int64_t amk_validator_accumulating_pattern(const AmkValidator *v, uint32_t t) {
  const AmkTask *task = &v->m->tasks[t];
  if (task->op != AMK_OP_GEMV_TILE)
    return -1;
  /* The last flags param wins (a scan: this runs for every written buffer). */
  const uint8_t *field = &v->pfield[v->pfield_off[t]];
  int64_t flags = 0;
  bool have = false;
  for (uint32_t i = 0; i < task->n_params; i++)
    if (field[i] == AMK_PARAM_flags)
      have = amk_validator_int(&task->params[i].value, &flags);
  if (!have || flags < 0)
    return -1;
  int64_t pattern = flags >> AMK_PATTERN_SHIFT;
  return amk_gemv_pattern_accumulates(pattern) ? pattern : -1;
}

const AmkAccumulatorInfo *amk_validator_accumulator_info(int64_t pattern) {
  /* mlp (docs/Fusion.md): [x, Wgu, g, Wdt], n_off / N_tile count columns of
   * the intermediate I, Wdt's rows; quantized [x, qWgu, scales, g, qWd,
   * scales], I half of qWgu's rows. */
  static const AmkAccumulatorInfo mlp = {"intermediate columns", "intermediates",
                                         "down weights", "down projection", 4, 3, 6, 1, 2};
  /* attention_o: [qkv, Wot, inv_freq, kv_cache, x], n_off / N_tile count
   * columns of the attention output (n_heads * head_dim), Wot's rows. */
  static const AmkAccumulatorInfo attention_o = {"attention columns", "attention outputs",
                                                 "o weights", "o projection", 5, 1, 0, 0, 0};
  if (pattern < 0 || pattern >= AMK_PATTERN_COUNT)
    return NULL;
  /* Every pattern has a case: a new accumulating pattern does not compile
   * until it says what its columns are. */
  switch ((AmkGemvPattern)pattern) {
  case AMK_PATTERN_MLP:
    return &mlp;
  case AMK_PATTERN_ATTENTION_O:
    return &attention_o;
  case AMK_PATTERN_PLAIN:
  case AMK_PATTERN_NORM:
  case AMK_PATTERN_RESIDUAL:
  case AMK_PATTERN_SILU:
  case AMK_PATTERN_SILU_RESIDUAL:
  case AMK_PATTERN_ROPE_KV:
  case AMK_PATTERN_ATTENTION:
  case AMK_PATTERN_ATTENTION_ROPE:
  case AMK_PATTERN_COMBINE_RESIDUAL:
  case AMK_PATTERN_COUNT:
    break;
  }
  return NULL;
}

void amk_validator_format_list(size_t n, int32_t (*value_at)(const void *ctx, size_t i),
                               const void *ctx, char *buf, size_t size) {
  size_t len = 0;
  buf[len++] = '[';
  for (size_t i = 0; i < n; i++) {
    char item[24];
    int k = snprintf(item, sizeof item, "%s%" PRId32, i ? ", " : "", value_at(ctx, i));
    if (len + (size_t)k + 6 >= size) {
      memcpy(buf + len, ", ...", 5);
      len += 5;
      break;
    }
    memcpy(buf + len, item, (size_t)k);
    len += (size_t)k;
  }
  buf[len++] = ']';
  buf[len] = '\0';
}

typedef struct {
  const AmkModule *m;
  const uint32_t *tasks;
} TaskIds;

static int32_t task_id_at(const void *ctx, size_t i) {
  const TaskIds *t = ctx;
  return t->m->tasks[t->tasks[i]].id;
}

void amk_validator_format_task_ids(const AmkModule *m, const uint32_t *tasks,
                                   size_t n, char *buf, size_t size) {
  TaskIds ids = {m, tasks};
  amk_validator_format_list(n, task_id_at, &ids, buf, size);
}

/* An int param in [min, max], or false. */
static bool int_param_in(const AmkParamTable *pt, AmkParamField f, int64_t min, int64_t max,
                         int64_t *out) {
  return pt->v[f] && amk_validator_int(pt->v[f], out) && *out >= min && *out <= max;
}

bool amk_validator_attention_rect(const AmkValidator *v, uint32_t t, int64_t rows, int64_t width,
                                  int64_t *row_lo, int64_t *row_hi, int64_t *col_lo,
                                  int64_t *col_hi) {
  AmkParamTable pt;
  amk_validator_params(v, t, &pt);
  bool heads = pt.v[AMK_PARAM_n_off] || pt.v[AMK_PARAM_N_tile];
  bool row_range = pt.v[AMK_PARAM_m_off] || pt.v[AMK_PARAM_M_tile];
  int64_t flags = 0, head_dim, n_heads, off, n;
  if (!heads && !row_range)
    return false;
  if ((pt.v[AMK_PARAM_flags] && (!amk_validator_int(pt.v[AMK_PARAM_flags], &flags) ||
                                 (flags & 2))) ||
      !int_param_in(&pt, AMK_PARAM_head_dim, 1, INT32_MAX, &head_dim) ||
      !int_param_in(&pt, AMK_PARAM_n_heads, 1, INT32_MAX, &n_heads) ||
      n_heads * head_dim != width)
    return false;
  *row_lo = 0;
  *row_hi = rows;
  *col_lo = 0;
  *col_hi = width;
  if (heads) {
    if (!int_param_in(&pt, AMK_PARAM_n_off, 0, n_heads - 1, &off) ||
        !int_param_in(&pt, AMK_PARAM_N_tile, 1, n_heads - off, &n))
      return false;
    *col_lo = off * head_dim;
    *col_hi = (off + n) * head_dim;
  }
  if (row_range) {
    if (!int_param_in(&pt, AMK_PARAM_m_off, 0, rows - 1, &off) ||
        !int_param_in(&pt, AMK_PARAM_M_tile, 1, rows - off, &n))
      return false;
    *row_lo = off;
    *row_hi = off + n;
  }
  return true;
}
bool amk_op_takes_row_window(AmkOp op) {
  switch (op) {
  case AMK_OP_RMSNORM:
  case AMK_OP_LAYERNORM:
  case AMK_OP_ROPE:
  case AMK_OP_EMBED:
  case AMK_OP_KV_APPEND:
    return true;
  case AMK_OP_NOP:
  case AMK_OP_COPY:
  case AMK_OP_GEMV_TILE:
  case AMK_OP_GEMM_TILE: /* its M_tile rows are a tile's, checked with its columns */
  case AMK_OP_ATTENTION_TILE:
  case AMK_OP_SILU_MUL:
  case AMK_OP_GELU:
  case AMK_OP_ADD:
  case AMK_OP_MUL:
  case AMK_OP_DEQUANT:
  case AMK_OP_SOFTMAX:
  case AMK_OP_ALLREDUCE_SHARD:
  case AMK_OP_SAMPLE_ARGMAX:
  case AMK_OP_ATTENTION_COMBINE:
  case AMK_OP_FUSED:
  case AMK_OP_COUNT:
    return false;
  }
  return false;
}

/* Buffer `id`'s element count, first and last dims; false unless it exists
 * with rank 1..4 and positive INT dims whose product fits. */
static bool buffer_dims(const AmkValidator *v, int32_t id, int64_t *numel,
                        int64_t *first, int64_t *last) {
  uint32_t b = amk_id_index_get(&v->bufs, id);
  if (b == AMK_NO_INDEX)
    return false;
  const AmkBuffer *buf = &v->m->buffers[b];
  if (buf->rank == 0 || buf->rank > AMK_MAX_RANK)
    return false;
  int64_t n = 1, d = 0;
  for (uint32_t i = 0; i < buf->rank; i++) {
    if (!amk_validator_int(&buf->shape[i], &d) || d < 1 || n > INT64_MAX / d)
      return false;
    if (i == 0)
      *first = d;
    n *= d;
  }
  *numel = n;
  *last = d;
  return true;
}

/* An int32 param of at least `min`. */
static bool int_param(const AmkParamTable *pt, AmkParamField f, int64_t min, int64_t *out) {
  return amk_validator_int(pt->v[f], out) && *out >= min && *out <= INT32_MAX;
}

AmkRowWindow amk_validator_row_window(const AmkValidator *v, uint32_t t) {
  const AmkTask *task = &v->m->tasks[t];
  AmkRowWindow w = {.kind = AMK_ROW_WINDOW_NONE, .kv_pos = -1};
  if (!amk_op_takes_row_window(task->op))
    return w;
  AmkParamTable pt;
  amk_validator_params(v, t, &pt);
  w.has_m_off = pt.v[AMK_PARAM_m_off] != NULL;
  w.has_m_tile = pt.v[AMK_PARAM_M_tile] != NULL;
  if (!w.has_m_off && !w.has_m_tile)
    return w;
  w.kind = AMK_ROW_WINDOW_UNKNOWN;
  if (task->n_inputs < 2 || task->n_outputs != 1)
    return w;
  int64_t in_n, in_first, in_last, out_n, out_first, out_width, n, first, last, x;
  if (!buffer_dims(v, task->inputs[0], &in_n, &in_first, &in_last) ||
      !buffer_dims(v, task->outputs[0], &out_n, &out_first, &out_width))
    return w;
  int64_t row_len = 0, base = 0;
  if (task->op == AMK_OP_RMSNORM || task->op == AMK_OP_LAYERNORM) { /* rows of `hidden` */
    if (!int_param(&pt, AMK_PARAM_hidden, 1, &x) || in_n % x || out_n != in_n)
      return w;
    w.rows = in_n / x;
    row_len = x;
  } else if (task->op == AMK_OP_ROPE) { /* position rows */
    if (!buffer_dims(v, task->inputs[1], &n, &first, &last) || in_n % n || out_n != in_n)
      return w;
    w.rows = n;
    row_len = in_n / n;
  } else if (task->op == AMK_OP_EMBED) { /* one row per id */
    if (out_n % in_n)
      return w;
    w.rows = in_n;
    row_len = out_n / in_n;
  } else { /* KV_APPEND: new rows, to cache rows pos + r */
    row_len = out_n / out_first;
    if (in_n % row_len || !int_param(&pt, AMK_PARAM_pos, 0, &w.kv_pos) ||
        w.kv_pos + in_n / row_len > out_first)
      return w;
    w.rows = in_n / row_len;
    base = w.kv_pos * row_len;
  }
  w.m_off = 0;
  if ((w.has_m_off && !int_param(&pt, AMK_PARAM_m_off, 0, &w.m_off)) || !w.has_m_tile ||
      !int_param(&pt, AMK_PARAM_M_tile, 1, &w.m_tile) || w.m_off + w.m_tile > w.rows)
    return w;
  w.kind = AMK_ROW_WINDOW_OK;
  w.lo = base + w.m_off * row_len;
  w.hi = base + (w.m_off + w.m_tile) * row_len;
  w.out_width = out_width;
  return w;
}
