/* Checks the reference lacks: page bindings that name missing buffers or
 * pages, shapes that are not positive integers, and the semantic bounds that
 * tie each op's params to the shapes of its buffers (as the reference's
 * lowering builds them: q is [1, n_heads*head_dim], caches are
 * [max_seq, n_kv_heads, head_dim], a GEMV tile writes columns
 * [n_off, n_off+N_tile) of an output whose width is N, ...), and coverage:
 * every element read, and every IO_OUTPUT element, is written by some writer
 * (check 10). A program the reference lowers is never rejected here;
 * docs/Validator.md lists them.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/compare.h"
#include "amk/tables.h"
#include "amk/tp.h"
#include "validate_internal.h"

/* Diagnostics about the module as a whole carry no position. */
static const AmkLoc no_loc = {0, 0};

typedef struct AmkValidatorShape {
  bool ok; /* exists, rank 1..4, every dim a positive INT, numel fits */
  int32_t id;
  const char *name;
  uint32_t rank;
  int64_t dim[AMK_MAX_RANK];
  int64_t numel;
} Shape;

static Shape compute_shape(const AmkValidator *v, uint32_t b) {
  Shape s;
  memset(&s, 0, sizeof s);
  const AmkBuffer *buf = &v->m->buffers[b];
  s.id = buf->id;
  s.name = buf->name ? buf->name : "";
  if (buf->rank == 0 || buf->rank > AMK_MAX_RANK)
    return s;
  s.rank = buf->rank;
  s.numel = 1;
  for (uint32_t i = 0; i < buf->rank; i++) {
    int64_t d;
    if (!amk_validator_int(&buf->shape[i], &d) || d < 1 ||
        s.numel > INT64_MAX / d)
      return s;
    s.dim[i] = d;
    s.numel *= d;
  }
  s.ok = true;
  return s;
}

/* The shape of buffer `id` (computed once per buffer per run); a missing
 * buffer has a shape that is not ok (the bounds checks then say nothing). */
static const Shape no_shape = {.ok = false};
static const Shape *shape_of(const AmkValidator *v, int32_t id) {
  uint32_t b = amk_id_index_get(&v->bufs, id);
  return b == AMK_NO_INDEX ? &no_shape : &v->shapes[b];
}

static int64_t last_dim(const Shape *s) { return s->dim[s->rank - 1]; }

/* The dtype of an existing buffer (s from shape_of, s->ok). */
static AmkDType dtype_of(const AmkValidator *v, const Shape *s) {
  return v->m->buffers[amk_id_index_get(&v->bufs, s->id)].dtype;
}

static bool is_float_dtype(AmkDType d) {
  return d == AMK_DTYPE_F32 || d == AMK_DTYPE_F16 || d == AMK_DTYPE_BF16;
}

/* meta.pos: the step's (first) position, when the module gives one. */
static bool meta_position(const AmkValidator *v, int64_t *pos) {
  const AmkModule *m = v->m;
  const AmkValue *meta_pos =
      m->meta.kind == AMK_VALUE_OBJECT ? amk_object_get(&m->meta, "pos") : NULL;
  return meta_pos && amk_validator_int(meta_pos, pos) && *pos >= 0;
}

static void bound_error(AmkValidator *v, const AmkTask *t, const char *fmt,
                        ...) AMK_PRINTF(3, 4);
static void bound_error(AmkValidator *v, const AmkTask *t, const char *fmt,
                        ...) {
  char detail[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                       "task %" PRId32 " (%s) %s: %s", t->id,
                       amk_validator_label(t), amk_op_info(t->op)->json_name,
                       detail);
}

/* An int param that must be >= `min`; false (after reporting) otherwise or
 * when absent/mistyped (those were reported by the structural checks). */
static bool param_at_least(AmkValidator *v, const AmkTask *t,
                           const AmkParamTable *pt, AmkParamField f,
                           int64_t min, int64_t *out) {
  /* Values outside int32 were reported as such; keeping to int32 here also
   * keeps every sum and product below int64 overflow. */
  if (!pt->v[f] || !amk_validator_int(pt->v[f], out) || *out > INT32_MAX ||
      *out < INT32_MIN)
    return false;
  if (*out < min) {
    bound_error(v, t, "%s=%" PRId64 " must be >= %" PRId64, amk_param_name(f),
                *out, min);
    return false;
  }
  return true;
}

static void require_width(AmkValidator *v, const AmkTask *t, const char *what,
                          const char *key, int64_t value, const Shape *s) {
  if (s->ok && last_dim(s) != value)
    bound_error(v, t,
                "%s=%" PRId64 " does not match the width %" PRId64
                " of %s buffer #%" PRId32 " ('%s')",
                key, value, last_dim(s), what, s->id, s->name);
}

static void require_numel(AmkValidator *v, const AmkTask *t, const char *what,
                          int64_t expected, const char *why, const Shape *s) {
  if (s->ok && s->numel != expected)
    bound_error(v, t,
                "%s buffer #%" PRId32 " ('%s') has %" PRId64
                " elements, expected %" PRId64 " (%s)",
                what, s->id, s->name, s->numel, expected, why);
}

/* An elementwise op's column window (tile splits a prefill program's over
 * the SMs): with N_tile, columns [n_off, n_off + N_tile) of each row of
 * the output must exist (n_off absent: 0). */
static void check_column_window(AmkValidator *v, const AmkTask *t, const AmkParamTable *pt,
                                const Shape *out) {
  int64_t n_tile, n_off = 0;
  if (!pt->v[AMK_PARAM_N_tile])
    return;
  if (!param_at_least(v, t, pt, AMK_PARAM_N_tile, 1, &n_tile) ||
      (pt->v[AMK_PARAM_n_off] && !param_at_least(v, t, pt, AMK_PARAM_n_off, 0, &n_off)))
    return;
  if (out->ok && n_off + n_tile > last_dim(out))
    bound_error(v, t,
                "column window n_off+N_tile=%" PRId64 " exceeds the width %" PRId64
                " of output buffer #%" PRId32 " ('%s')",
                n_off + n_tile, last_dim(out), out->id, out->name);
}

/* "[2, 160]" */
static void format_shape(const Shape *s, char *buf, size_t size) {
  size_t len = (size_t)snprintf(buf, size, "[");
  for (uint32_t i = 0; i < s->rank && len < size; i++)
    len += (size_t)snprintf(buf + len, size - len, "%s%" PRId64, i ? ", " : "",
                            s->dim[i]);
  if (len < size)
    snprintf(buf + len, size - len, "]");
}

/* ---- fused GEMV patterns (flags bits 16-31; docs/Fusion.md) --------------- */

/* Inputs of each pattern, [min, max]; plain tiles take 2 or 3 (a bias, or a
 * quantized tile's scales: the op's arity), combine_residual its 1..6
 * partials besides W and r. A quantized tile reads one more: its scales at
 * input 2, before the pattern's operand (quantized_operand). */
static const struct {
  uint32_t min, max;
} pattern_inputs[] = {
    [AMK_PATTERN_PLAIN] = {0, 0},
    [AMK_PATTERN_NORM] = {3, 3},
    [AMK_PATTERN_RESIDUAL] = {3, 3},
    [AMK_PATTERN_SILU] = {2, 2},
    [AMK_PATTERN_SILU_RESIDUAL] = {3, 3},
    [AMK_PATTERN_ROPE_KV] = {3, 3},
    [AMK_PATTERN_ATTENTION] = {3, 3},
    [AMK_PATTERN_ATTENTION_ROPE] = {3, 3},
    [AMK_PATTERN_COMBINE_RESIDUAL] = {3, AMK_MAX_INPUTS},
    [AMK_PATTERN_MLP] = {4, 4},
    [AMK_PATTERN_ATTENTION_O] = {5, 5},
};
_Static_assert(sizeof pattern_inputs / sizeof pattern_inputs[0] ==
                   AMK_PATTERN_COUNT,
               "pattern_inputs: give a new GEMV pattern its input count");

/* The inputs of a pattern with weight-only quantized weights (the scales
 * at input 2, the pattern's operand after them); NULL for the patterns with
 * no quantized form. */
static const char *quantized_inputs(int64_t pattern) {
  switch ((AmkGemvPattern)pattern) {
  case AMK_PATTERN_PLAIN: return "x, qW, scales";
  case AMK_PATTERN_NORM: return "x, qW, scales, g";
  case AMK_PATTERN_RESIDUAL: return "x, qW, scales, r";
  case AMK_PATTERN_SILU: return "gu, qW, scales";
  case AMK_PATTERN_SILU_RESIDUAL: return "gu, qW, scales, r";
  case AMK_PATTERN_COMBINE_RESIDUAL: return "p0, qW, scales, r, p1..";
  case AMK_PATTERN_MLP: return "x, qWgu, scales, g, qWd, scales";
  case AMK_PATTERN_ROPE_KV:
  case AMK_PATTERN_ATTENTION:
  case AMK_PATTERN_ATTENTION_ROPE:
  case AMK_PATTERN_ATTENTION_O: /* Wot is fp (codegen and the VM read no scales) */
  case AMK_PATTERN_COUNT:
    break;
  }
  return NULL;
}

/* A param the pattern needs: reported when absent, false when absent,
 * mistyped or below `min` (those two reported by param_at_least / the
 * structural checks). */
static bool pattern_param(AmkValidator *v, const AmkTask *t,
                          const AmkParamTable *pt, const char *pattern,
                          AmkParamField f, int64_t min, int64_t *out) {
  if (!pt->v[f]) {
    bound_error(v, t, "pattern %s needs param '%s'", pattern, amk_param_name(f));
    return false;
  }
  return param_at_least(v, t, pt, f, min, out);
}

/* A buffer whose shape must be exactly `want` (rank `rank`). */
static void require_shape(AmkValidator *v, const AmkTask *t, const char *pattern,
                          const char *what, const Shape *s, uint32_t rank,
                          const int64_t *want, const char *expected) {
  if (!s->ok)
    return;
  bool same = s->rank == rank;
  for (uint32_t i = 0; same && i < rank; i++)
    same = want[i] < 0 || s->dim[i] == want[i];
  if (same)
    return;
  char have[96];
  format_shape(s, have, sizeof have);
  bound_error(v, t,
              "pattern %s: %s buffer #%" PRId32 " ('%s') has shape %s, expected "
              "%s",
              pattern, what, s->id, s->name, have, expected);
}

/* The fused qkv vector [1, (n_heads + 2 * n_kv_heads) * head_dim] (input 0)
 * and the rotary inverse frequencies [head_dim / 2] (input `freq_slot`: 1
 * for rope_kv and attention_rope, 2 for attention_o, after Wot). */
static void check_rope_inputs(AmkValidator *v, const AmkTask *t,
                              const char *pattern, int64_t head_dim,
                              int64_t n_heads, int64_t n_kv, uint32_t freq_slot) {
  const Shape *qkv = shape_of(v, t->inputs[0]);
  const Shape *inv_freq = shape_of(v, t->inputs[freq_slot]);
  if (head_dim % 2)
    bound_error(v, t, "pattern %s: head_dim=%" PRId64 " must be even", pattern,
                head_dim);
  int64_t width = (n_heads + 2 * n_kv) * head_dim;
  if (qkv->ok && last_dim(qkv) != width)
    bound_error(v, t,
                "pattern %s: qkv buffer #%" PRId32 " ('%s') has width %" PRId64
                ", expected (n_heads+2*n_kv_heads)*head_dim=%" PRId64,
                pattern, qkv->id, qkv->name, last_dim(qkv), width);
  if (inv_freq->ok && inv_freq->numel != head_dim / 2)
    bound_error(v, t,
                "pattern %s: inv_freq buffer #%" PRId32 " ('%s') has %" PRId64
                " elements, expected head_dim/2=%" PRId64,
                pattern, inv_freq->id, inv_freq->name, inv_freq->numel,
                head_dim / 2);
}

/* The fused KV cache [max_seq, 2, W]: the combined cache of every KV head
 * (W = n_kv_heads * head_dim) or, with several KV heads, the per-head cache
 * of one (W = head_dim). Whether it is per-head (shape checked or not). */
static bool require_kv_cache(AmkValidator *v, const AmkTask *t,
                             const char *pattern, const Shape *cache,
                             int64_t head_dim, int64_t n_kv) {
  bool per_head = n_kv > 1 && cache->ok && cache->rank == 3 &&
                  cache->dim[2] == head_dim;
  int64_t want[3] = {-1, 2, per_head ? head_dim : n_kv * head_dim};
  char expected[128];
  snprintf(expected, sizeof expected,
           "[max_seq, 2, n_kv_heads*head_dim=%" PRId64
           "] or per head [max_seq, 2, head_dim=%" PRId64 "]",
           n_kv * head_dim, head_dim);
  require_shape(v, t, pattern, "KV cache", cache, 3, want, expected);
  return per_head;
}

static void require_window(AmkValidator *v, const AmkTask *t,
                           const char *pattern, const Shape *cache,
                           int64_t kv_start, int64_t kv_len) {
  if (cache->ok && kv_start + kv_len > cache->dim[0])
    bound_error(v, t,
                "pattern %s: kv_start+kv_len=%" PRId64 " exceeds the %" PRId64
                " rows of KV cache buffer #%" PRId32 " ('%s')",
                pattern, kv_start + kv_len, cache->dim[0], cache->id,
                cache->name);
}

/* Flags bit 2 (AMK_FLAG_KV_FROM_QKV, attention_rope; always on attention_o):
 * the tile takes row pos from qkv and reads its cache only below it, so a
 * non-empty window must end at or before row meta.pos + 1 (what lets it
 * skip the wait on rope_kv: amk_validator_read_misses_writer). */
static void require_window_below_pos(AmkValidator *v, const AmkTask *t, const char *pattern,
                                     int64_t kv_start, int64_t kv_len) {
  int64_t pos;
  if (kv_len > 0 && meta_position(v, &pos) && kv_start + kv_len > pos + 1)
    bound_error(v, t,
                "pattern %s with flags bit 2 (row pos from qkv): window [%" PRId64
                ", %" PRId64 ") reaches past the step's row meta.pos=%" PRId64,
                pattern, kv_start, kv_start + kv_len, pos);
}

/* The residual (input `slot`: 2, or 3 after a quantized tile's scales) of
 * the residual patterns has the output's size. */
static void require_residual(AmkValidator *v, const AmkTask *t, const Shape *out,
                             uint32_t slot) {
  if (out->ok)
    require_numel(v, t, "residual", out->numel, "the output's size",
                  shape_of(v, t->inputs[slot]));
}

/* combine_residual: head_dim and n_heads present and >= 1 with
 * K = n_heads*head_dim (the combined vector the GEMV reduces); every partial
 * (input 0 and inputs 3.., or 4.. after a quantized tile's scales)
 * [n_heads, head_dim + 2] as ATTENTION_COMBINE reads it; fp W (input 1)
 * rows of K (check_quantized_tile checks qW and its scales). */
static void check_combine_inputs(AmkValidator *v, const AmkTask *t,
                                 const AmkParamTable *pt, const char *pattern,
                                 bool quantized, bool have_k, int64_t k) {
  int64_t head_dim, n_heads;
  bool ok = pattern_param(v, t, pt, pattern, AMK_PARAM_head_dim, 1, &head_dim);
  ok = pattern_param(v, t, pt, pattern, AMK_PARAM_n_heads, 1, &n_heads) && ok;
  if (!ok)
    return;
  if (have_k && k != n_heads * head_dim)
    bound_error(v, t, "pattern %s: K=%" PRId64 " is not n_heads*head_dim=%" PRId64,
                pattern, k, n_heads * head_dim);
  uint32_t more = AMK_COMBINE_MORE_PARTIALS(quantized);
  for (uint32_t i = 0; i < t->n_inputs; i++) {
    if (i > 0 && i < more)
      continue; /* W, r; or qW, scales, r */
    char what[32];
    snprintf(what, sizeof what, "partial %u", i ? i - (more - 1) : 0);
    require_numel(v, t, what, n_heads * (head_dim + 2), "n_heads*(head_dim+2)",
                  shape_of(v, t->inputs[i]));
  }
  if (have_k && !quantized)
    require_width(v, t, "weight", "K", k, shape_of(v, t->inputs[1]));
}

/* An accumulating tile's output (mlp, attention_o; docs/Fusion.md) is a
 * partial sum until every tile has added to it: none of the tile's inputs. */
static void require_accumulator_not_read(AmkValidator *v, const AmkTask *t, const char *pattern,
                                         const Shape *out) {
  for (uint32_t i = 0; i < t->n_inputs; i++)
    if (t->inputs[i] == t->outputs[0])
      bound_error(v, t, "pattern %s: input %u is buffer #%" PRId32 " ('%s'), the accumulator "
                  "it adds to", pattern, i, out->id, out->name);
}

/* ... and an f32 buffer that every step starts at zero: not a KV cache,
 * whose rows are kept. */
static void require_accumulator_kind(AmkValidator *v, const AmkTask *t, const char *pattern,
                                     const Shape *out) {
  if (!out->ok)
    return;
  const AmkBuffer *acc = &v->m->buffers[amk_id_index_get(&v->bufs, out->id)];
  if (acc->dtype != AMK_DTYPE_F32)
    bound_error(v, t, "pattern %s: output buffer #%" PRId32 " ('%s') is %s; %s tiles add "
                "into an f32 accumulator", pattern, out->id, out->name,
                amk_dtype_text_name(acc->dtype), pattern);
  if (acc->kind == AMK_KIND_KV_CACHE)
    bound_error(v, t, "pattern %s: output buffer #%" PRId32 " ('%s') is a KV cache; an "
                "accumulator starts every step at zero", pattern, out->id, out->name);
}

static int64_t quant_pair_rows(AmkValidator *v, const AmkTask *t, int64_t qdtype, int64_t k,
                               int64_t group, const Shape *w, const Shape *scales);
static int64_t quant_weight_rows_quiet(AmkValidator *v, int64_t qdtype, int64_t k,
                                       const Shape *w);

/* mlp (docs/Fusion.md): inputs [x, Wgu, g, Wdt] with x one row of K, the
 * stacked gate|up weight [2I, K], the norm weight of K and the transposed
 * down weight [I, K]; or, weight-only quantized, [x, qWgu, scales, g, qWd,
 * scales] with the down weight as it is, qWd [K, I] of the same qdtype and
 * group (check_quantized_tile checks qWgu and its scales). n_off / N_tile
 * count columns of the intermediate I (Wdt's rows, qWd's columns), and
 * every tile adds into all K elements of its f32 accumulator, so the
 * output is K elements wide whatever the tile (check_tile leaves the
 * generic column bounds to this). The accumulator rules across tiles are
 * the WAW, page and coverage checks'. */
static void check_mlp(AmkValidator *v, const AmkTask *t, const AmkParamTable *pt,
                      const char *pattern, int64_t flags, bool quantized, bool have_k, int64_t k,
                      bool have_range, int64_t n_off, int64_t n_tile) {
  const Shape *x = shape_of(v, t->inputs[0]), *wgu = shape_of(v, t->inputs[1]);
  const Shape *g = shape_of(v, t->inputs[quantized ? 3 : 2]);
  const Shape *wd = shape_of(v, t->inputs[quantized ? 4 : 3]);
  const Shape *out = shape_of(v, t->outputs[0]);
  char expected[96];
  if (flags & ((INT64_C(1) << AMK_PATTERN_SHIFT) - 1) & ~(int64_t)AMK_FLAG_MLP_NO_RESIDUAL)
    bound_error(v, t, "pattern %s: flags=%" PRId64 " sets low bits other than bit 0 (no "
                "residual); the pattern has no other variant (flags = 9 << 16, | 1)",
                pattern, flags);
  if (!pt->v[AMK_PARAM_eps])
    bound_error(v, t, "pattern %s needs param 'eps'", pattern);
  require_accumulator_not_read(v, t, pattern, out);
  int64_t inter = -1;
  if (quantized) {
    /* I is half of qWgu's rows; qWd [K, I] with scales [K, ceil(I/group)]. */
    int64_t qdtype = 0, group = k;
    if (have_k && pt->v[AMK_PARAM_qdtype] && amk_validator_int(pt->v[AMK_PARAM_qdtype], &qdtype) &&
        (qdtype == AMK_QDTYPE_INT8 || qdtype == AMK_QDTYPE_INT4) &&
        (!pt->v[AMK_PARAM_group] || amk_validator_int(pt->v[AMK_PARAM_group], &group)) &&
        group >= 1 && wgu->ok) {
      int64_t gu_rows = quant_weight_rows_quiet(v, qdtype, k, wgu);
      if (gu_rows > 0 && gu_rows % 2 == 0) {
        inter = gu_rows / 2;
        int64_t rows = quant_pair_rows(v, t, qdtype, inter, group, wd,
                                       shape_of(v, t->inputs[5]));
        if (rows >= 0 && rows != k)
          bound_error(v, t,
                      "pattern %s: quantized down weight buffer #%" PRId32 " ('%s') has %" PRId64
                      " rows, expected [K=%" PRId64 ", I=%" PRId64
                      "] (I: half the gate|up weight's rows)",
                      pattern, wd->id, wd->name, rows, k, inter);
      } else if (gu_rows > 0) {
        bound_error(v, t,
                    "pattern %s: gate|up weight buffer #%" PRId32 " ('%s') has %" PRId64
                    " rows, expected an even count [2*I, K]",
                    pattern, wgu->id, wgu->name, gu_rows);
      }
    }
    if (have_k) {
      require_numel(v, t, "input", k, "K: one row of the hidden state", x);
      require_numel(v, t, "norm weight", k, "K", g);
      require_numel(v, t, "output", k, "K: the f32 accumulator every tile adds to", out);
    }
  } else {
    /* I is the transposed down weight's rows (Wdt [I, K]). */
    inter = wd->ok && wd->rank == 2 ? wd->dim[0] : -1;
    if (have_k) {
      require_numel(v, t, "input", k, "K: one row of the hidden state", x);
      require_numel(v, t, "norm weight", k, "K", g);
      int64_t want_wd[2] = {-1, k};
      snprintf(expected, sizeof expected, "[I, K=%" PRId64 "] (the down weight transposed)", k);
      require_shape(v, t, pattern, "down weight", wd, 2, want_wd, expected);
      if (inter > 0) {
        int64_t want_gu[2] = {2 * inter, k};
        snprintf(expected, sizeof expected,
                 "[2*I=%" PRId64 ", K=%" PRId64 "] (I=%" PRId64 ": the down weight's rows)",
                 2 * inter, k, inter);
        require_shape(v, t, pattern, "gate|up weight", wgu, 2, want_gu, expected);
      }
      require_numel(v, t, "output", k, "K: the f32 accumulator every tile adds to", out);
    }
  }
  require_accumulator_kind(v, t, pattern, out);
  if (have_range && inter > 0 && n_off + n_tile > inter)
    bound_error(v, t,
                "pattern %s: intermediate columns n_off+N_tile=%" PRId64 " exceed I=%" PRId64
                ", the %s of down weight buffer #%" PRId32 " ('%s')",
                pattern, n_off + n_tile, inter, quantized ? "columns" : "rows", wd->id,
                wd->name);
}

/* attention_o (docs/Fusion.md): inputs [qkv, Wot, inv_freq, kv_cache, x].
 * A tile is a bit-2 attention_rope tile of its one query head
 * h = n_off / head_dim (qkv, inv_freq and the cache as attention_rope's
 * inputs 0, 1 and 2, the same params, the window below meta.pos), then
 * out[:] += Wot[n_off + c, :] * o[c] over its columns c into the f32
 * accumulator of hidden elements (+ x at n_off 0). n_off / N_tile count
 * columns of the attention output (n_heads * head_dim), inside head h;
 * Wot is [n_heads * head_dim, hidden], hidden the residual x's elements.
 * check_tile leaves the generic column bounds to this (the output has
 * hidden columns, whatever the tile); the accumulator rules across tiles
 * are the WAW, page and coverage checks'. */
static void check_attention_o(AmkValidator *v, const AmkTask *t, const AmkParamTable *pt,
                              const char *pattern, int64_t flags, bool have_range,
                              int64_t n_off, int64_t n_tile) {
  const Shape *wot = shape_of(v, t->inputs[1]);
  const Shape *cache = shape_of(v, t->inputs[3]);
  const Shape *x = shape_of(v, t->inputs[4]), *out = shape_of(v, t->outputs[0]);
  int64_t low = flags & ((INT64_C(1) << AMK_PATTERN_SHIFT) - 1);
  /* Without bit 2 the tile would read row pos from the cache, which nothing
   * orders it after (rope_kv runs beside it); no engine implements that. */
  if (!(flags & AMK_FLAG_KV_FROM_QKV))
    bound_error(v, t, "pattern %s needs flags bit 2 (row pos from qkv; flags = 10 << 16 | 4): "
                "its tile reads the KV cache only below pos", pattern);
  if (flags & 2)
    bound_error(v, t, "pattern %s: flags bit 1 (a split-KV partial) is not allowed: a tile "
                "attends over its whole window and adds the finished head's o projection",
                pattern);
  else if (low & ~(int64_t)AMK_FLAG_KV_FROM_QKV)
    bound_error(v, t, "pattern %s: flags=%" PRId64 " sets low bits other than bit 2 (row pos "
                "from qkv); the pattern has no other variant (flags = 10 << 16 | 4)",
                pattern, flags);
  require_accumulator_not_read(v, t, pattern, out);
  /* Both engines take the softmax scale from the param (attention_rope's
   * kernels too; there it is not checked here). */
  if (!pt->v[AMK_PARAM_scale])
    bound_error(v, t, "pattern %s needs param 'scale'", pattern);
  static const struct {
    uint32_t slot;
    const char *what;
  } float_inputs[] = {{0, "qkv"}, {1, "Wot"}, {2, "inv_freq"}, {4, "residual"}};
  for (size_t i = 0; i < sizeof float_inputs / sizeof float_inputs[0]; i++) {
    const Shape *s = shape_of(v, t->inputs[float_inputs[i].slot]);
    if (s->ok && !is_float_dtype(dtype_of(v, s)))
      bound_error(v, t, "pattern %s: %s buffer #%" PRId32 " ('%s') is %s; it reads f32, f16 "
                  "or bf16 there (input %u)", pattern, float_inputs[i].what, s->id, s->name,
                  amk_dtype_text_name(dtype_of(v, s)), float_inputs[i].slot);
  }
  /* The attention_rope part: as check_pattern's per-head checks, for the
   * one query head h (a per-head cache always holds its KV head's group). */
  int64_t head_dim, n_heads, n_kv, kv_start, kv_len;
  bool ok = pattern_param(v, t, pt, pattern, AMK_PARAM_head_dim, 1, &head_dim);
  ok = pattern_param(v, t, pt, pattern, AMK_PARAM_n_heads, 1, &n_heads) && ok;
  ok = pattern_param(v, t, pt, pattern, AMK_PARAM_n_kv_heads, 1, &n_kv) && ok;
  bool window = pattern_param(v, t, pt, pattern, AMK_PARAM_kv_start, 0, &kv_start);
  window = pattern_param(v, t, pt, pattern, AMK_PARAM_kv_len, 0, &kv_len) && window;
  if (!ok)
    return;
  if (n_heads % n_kv != 0) {
    bound_error(v, t, "n_heads=%" PRId64 " is not divisible by n_kv_heads=%" PRId64, n_heads,
                n_kv);
    return;
  }
  check_rope_inputs(v, t, pattern, head_dim, n_heads, n_kv, 2);
  require_kv_cache(v, t, pattern, cache, head_dim, n_kv);
  if (window) {
    require_window(v, t, pattern, cache, kv_start, kv_len);
    if (flags & AMK_FLAG_KV_FROM_QKV)
      require_window_below_pos(v, t, pattern, kv_start, kv_len);
  }
  /* Columns of the attention output, inside one head and Wot's rows. */
  int64_t cols = n_heads * head_dim; /* both int32: no overflow */
  if (have_range) {
    int64_t h = n_off / head_dim;
    if (n_off + n_tile > cols)
      bound_error(v, t,
                  "pattern %s: attention columns n_off+N_tile=%" PRId64
                  " exceed n_heads*head_dim=%" PRId64,
                  pattern, n_off + n_tile, cols);
    else if (n_off % head_dim + n_tile > head_dim)
      bound_error(v, t,
                  "pattern %s: attention columns [%" PRId64 ", %" PRId64 ") cross the end of "
                  "query head %" PRId64 " (columns [%" PRId64 ", %" PRId64 "), head_dim=%" PRId64
                  "); a tile's columns lie inside one head",
                  pattern, n_off, n_off + n_tile, h, h * head_dim, (h + 1) * head_dim, head_dim);
    else if (wot->ok && wot->rank >= 1 && n_off + n_tile > wot->dim[0])
      bound_error(v, t,
                  "pattern %s: attention columns n_off+N_tile=%" PRId64 " exceed the %" PRId64
                  " rows of Wot buffer #%" PRId32 " ('%s')",
                  pattern, n_off + n_tile, wot->dim[0], wot->id, wot->name);
  }
  /* Wot [n_heads * head_dim, hidden]; the accumulator of hidden elements. */
  if (x->ok) {
    int64_t hidden = x->numel, want[2] = {cols, hidden};
    char expected[128];
    snprintf(expected, sizeof expected,
             "[n_heads*head_dim=%" PRId64 ", hidden=%" PRId64 "] (the o weight transposed; "
             "hidden: the residual's elements)", cols, hidden);
    require_shape(v, t, pattern, "Wot", wot, 2, want, expected);
    require_numel(v, t, "output", hidden,
                  "hidden, the residual's size: the f32 accumulator every tile adds to", out);
  }
  require_accumulator_kind(v, t, pattern, out);
}

static void check_pattern(AmkValidator *v, const AmkTask *t,
                          const AmkParamTable *pt, int64_t flags, bool quantized,
                          bool have_k, int64_t k, bool have_range, int64_t n_off,
                          int64_t n_tile) {
  int64_t pattern = flags >> AMK_PATTERN_SHIFT;
  if (flags < 0 || pattern >= AMK_PATTERN_COUNT) {
    bound_error(v, t,
                "flags=%" PRId64 " names unknown GEMV pattern %" PRId64
                " (flags bits 16-31; known: 0..%d)",
                flags, pattern, AMK_PATTERN_COUNT - 1);
    return;
  }
  if (pattern == AMK_PATTERN_PLAIN)
    return;
  const char *name = amk_gemv_pattern_name(pattern);
  /* check_tile reported a quantized tile of another pattern. */
  /* A quantized mlp also has the down weight's scales after its qWd. */
  uint32_t extra = quantized ? (pattern == AMK_PATTERN_MLP ? 2 : 1) : 0;
  uint32_t slot = 2 + (quantized ? 1 : 0); /* the operand */
  uint32_t min = pattern_inputs[pattern].min + extra, max = pattern_inputs[pattern].max + extra;
  if (max > AMK_MAX_INPUTS)
    max = AMK_MAX_INPUTS; /* combine_residual's partials fill what is left */
  if (t->n_inputs < min || t->n_inputs > max) {
    char expected[32];
    if (min == max)
      snprintf(expected, sizeof expected, "%u", min);
    else
      snprintf(expected, sizeof expected, "%u to %u", min, max);
    if (quantized)
      bound_error(v, t, "pattern %s with quantized weights reads %u inputs, expected %s (%s)",
                  name, t->n_inputs, expected, quantized_inputs(pattern));
    else
      bound_error(v, t, "pattern %s reads %u inputs, expected %s (%s)", name,
                  t->n_inputs, expected, amk_gemv_pattern_inputs(pattern));
    return;
  }
  const Shape *x = shape_of(v, t->inputs[0]);
  const Shape *out = shape_of(v, t->outputs[0]);
  switch ((AmkGemvPattern)pattern) {
  case AMK_PATTERN_NORM:
    if (have_k)
      require_numel(v, t, "norm weight", k, "K", shape_of(v, t->inputs[slot]));
    return;
  case AMK_PATTERN_SILU:
  case AMK_PATTERN_SILU_RESIDUAL:
    if (have_k) {
      int64_t want[2] = {2, k};
      char expected[64];
      snprintf(expected, sizeof expected, "[2, K=%" PRId64 "]", k);
      require_shape(v, t, name, "gate|up", x, 2, want, expected);
    }
    if (pattern == AMK_PATTERN_SILU_RESIDUAL)
      require_residual(v, t, out, slot);
    return;
  case AMK_PATTERN_RESIDUAL:
    require_residual(v, t, out, slot);
    return;
  case AMK_PATTERN_COMBINE_RESIDUAL:
    check_combine_inputs(v, t, pt, name, quantized, have_k, k);
    require_residual(v, t, out, slot);
    return;
  case AMK_PATTERN_MLP:
    check_mlp(v, t, pt, name, flags, quantized, have_k, k, have_range, n_off, n_tile);
    return;
  case AMK_PATTERN_ATTENTION_O:
    check_attention_o(v, t, pt, name, flags, have_range, n_off, n_tile);
    return;
  case AMK_PATTERN_ROPE_KV:
  case AMK_PATTERN_ATTENTION:
  case AMK_PATTERN_ATTENTION_ROPE:
    break; /* the per-head patterns, below */
  case AMK_PATTERN_PLAIN: /* returned above */
  case AMK_PATTERN_COUNT:
    return;
  }
  /* The per-head patterns: n_off / N_tile count heads. */
  int64_t head_dim, n_heads, n_kv;
  bool ok = pattern_param(v, t, pt, name, AMK_PARAM_head_dim, 1, &head_dim);
  ok = pattern_param(v, t, pt, name, AMK_PARAM_n_heads, 1, &n_heads) && ok;
  ok = pattern_param(v, t, pt, name, AMK_PARAM_n_kv_heads, 1, &n_kv) && ok;
  if (!ok)
    return;
  if (n_heads % n_kv != 0) {
    bound_error(v, t,
                "n_heads=%" PRId64 " is not divisible by n_kv_heads=%" PRId64,
                n_heads, n_kv);
    return;
  }
  if (pattern == AMK_PATTERN_ROPE_KV) {
    int64_t pos;
    check_rope_inputs(v, t, name, head_dim, n_heads, n_kv, 1);
    bool per_head = require_kv_cache(v, t, name, out, head_dim, n_kv);
    if (pattern_param(v, t, pt, name, AMK_PARAM_pos, 0, &pos) && out->ok &&
        pos >= out->dim[0])
      bound_error(v, t,
                  "pattern %s: pos=%" PRId64 " is outside the %" PRId64
                  " rows of KV cache buffer #%" PRId32 " ('%s')",
                  name, pos, out->dim[0], out->id, out->name);
    if (have_range && n_off + n_tile > n_kv)
      bound_error(v, t,
                  "pattern %s: KV heads n_off+N_tile=%" PRId64
                  " exceed n_kv_heads=%" PRId64,
                  name, n_off + n_tile, n_kv);
    else if (have_range && per_head && n_tile > 1)
      bound_error(v, t,
                  "pattern %s: N_tile=%" PRId64 " KV heads, but per-head KV cache "
                  "buffer #%" PRId32 " ('%s') holds one",
                  name, n_tile, out->id, out->name);
    return;
  }
  /* attention, attention_rope: query heads [n_off, n_off + N_tile). */
  int64_t kv_start, kv_len, group = n_heads / n_kv;
  ok = pattern_param(v, t, pt, name, AMK_PARAM_kv_start, 0, &kv_start);
  /* kv_len 0: an empty split-KV share (writes l = 0). */
  ok = pattern_param(v, t, pt, name, AMK_PARAM_kv_len, 0, &kv_len) && ok;
  if (have_range && n_off + n_tile > n_heads)
    bound_error(v, t,
                "pattern %s: query heads n_off+N_tile=%" PRId64
                " exceed n_heads=%" PRId64,
                name, n_off + n_tile, n_heads);
  else if (have_range && n_off / group != (n_off + n_tile - 1) / group &&
           (n_off % group || n_tile % group))
    bound_error(v, t,
                "pattern %s: query heads [%" PRId64 ", %" PRId64
                ") straddle GQA groups of %" PRId64
                " heads (a tile covers part of one group or whole groups)",
                name, n_off, n_off + n_tile, group);
  if (pattern == AMK_PATTERN_ATTENTION) {
    require_width(v, t, "query", "n_heads*head_dim", n_heads * head_dim, x);
    for (int i = 1; i <= 2; i++) {
      const Shape *c = shape_of(v, t->inputs[i]);
      int64_t want[3] = {-1, n_kv, head_dim};
      char expected[96];
      snprintf(expected, sizeof expected,
               "[max_seq, n_kv_heads=%" PRId64 ", head_dim=%" PRId64 "]", n_kv,
               head_dim);
      require_shape(v, t, name, i == 1 ? "key cache" : "value cache", c, 3,
                    want, expected);
      if (ok)
        require_window(v, t, name, c, kv_start, kv_len);
    }
  } else {
    const Shape *cache = shape_of(v, t->inputs[2]);
    check_rope_inputs(v, t, name, head_dim, n_heads, n_kv, 1);
    if (require_kv_cache(v, t, name, cache, head_dim, n_kv) && have_range &&
        n_off / group != (n_off + n_tile - 1) / group)
      bound_error(v, t,
                  "pattern %s: query heads [%" PRId64 ", %" PRId64
                  ") span several KV heads, but per-head KV cache buffer #%" PRId32
                  " ('%s') holds one",
                  name, n_off, n_off + n_tile, cache->id, cache->name);
    if (ok)
      require_window(v, t, name, cache, kv_start, kv_len);
    if (ok && (flags & AMK_FLAG_KV_FROM_QKV))
      require_window_below_pos(v, t, name, kv_start, kv_len);
  }
  if (pattern == AMK_PATTERN_ATTENTION && (flags & AMK_FLAG_KV_FROM_QKV))
    bound_error(v, t, "pattern %s: flags bit 2 (row pos from qkv) is attention_rope's", name);
  if (flags & 2)
    require_numel(v, t, "output", n_heads * (head_dim + 2),
                  "n_heads*(head_dim+2), a partial write", out);
  else
    require_numel(v, t, "output", n_heads * head_dim, "n_heads*head_dim", out);
}

/* ---- weight-only quantized GEMV tiles (qdtype 6 / 7) ---------------------- */

/* The quantized weight [N, K] as the kernels read it: int8 as i8 [N, K];
 * int4 as i4 [N, K] (even K: rows start on a byte) or as the packed bytes
 * u8 / i8 [N, ceil(K/2)]. Its row count N, or -1 after reporting. */
/* Whether w holds rows of k columns of qdtype, and how many (-1: not). */
static int64_t quant_weight_rows_quiet(AmkValidator *v, int64_t qdtype, int64_t k,
                                       const Shape *w) {
  AmkDType d = dtype_of(v, w);
  int64_t width = last_dim(w);
  bool fits = qdtype == AMK_QDTYPE_INT8
                  ? d == AMK_DTYPE_I8 && width == k
                  : (d == AMK_DTYPE_I4 && width == k && k % 2 == 0) ||
                        ((d == AMK_DTYPE_U8 || d == AMK_DTYPE_I8) && width == (k + 1) / 2);
  return fits && width > 0 ? w->numel / width : -1;
}

static int64_t quant_weight_rows(AmkValidator *v, const AmkTask *t, int64_t qdtype,
                                 int64_t k, const Shape *w) {
  AmkDType d = dtype_of(v, w);
  int64_t width = last_dim(w);
  bool fits;
  if (qdtype == AMK_QDTYPE_INT8)
    fits = d == AMK_DTYPE_I8 && width == k;
  else
    fits = (d == AMK_DTYPE_I4 && width == k && k % 2 == 0) ||
           ((d == AMK_DTYPE_U8 || d == AMK_DTYPE_I8) && width == (k + 1) / 2);
  if (fits)
    return w->numel / width;
  char have[96];
  format_shape(w, have, sizeof have);
  if (qdtype == AMK_QDTYPE_INT8)
    bound_error(v, t,
                "qdtype=6 (int8) reads weight buffer #%" PRId32 " ('%s') as i8 [N, K=%" PRId64
                "], but it is %s %s",
                w->id, w->name, k, amk_dtype_text_name(d), have);
  else
    bound_error(v, t,
                "qdtype=7 (int4) reads weight buffer #%" PRId32 " ('%s') as i4 [N, K=%" PRId64
                "] (K even) or packed u8 [N, ceil(K/2)=%" PRId64 "], but it is %s %s",
                w->id, w->name, k, (k + 1) / 2, amk_dtype_text_name(d), have);
  return -1;
}

/* A quantized matrix w of rows of k columns and its scales: w's rows, or
 * -1 after reporting (or where a shape is unknown). */
static int64_t quant_pair_rows(AmkValidator *v, const AmkTask *t, int64_t qdtype, int64_t k,
                               int64_t group, const Shape *w, const Shape *scales) {
  if (!w->ok)
    return -1;
  int64_t rows = quant_weight_rows(v, t, qdtype, k, w);
  if (rows < 0 || !scales->ok)
    return -1;
  AmkDType sd = dtype_of(v, scales);
  if (!is_float_dtype(sd)) {
    bound_error(v, t, "scales buffer #%" PRId32 " ('%s') is %s; scales are f16 (or f32, bf16)",
                scales->id, scales->name, amk_dtype_text_name(sd));
    return -1;
  }
  int64_t groups = (k + group - 1) / group; /* both int32: no overflow */
  if (last_dim(scales) != groups || scales->numel != rows * groups) {
    char have[96];
    format_shape(scales, have, sizeof have);
    bound_error(v, t,
                "scales buffer #%" PRId32 " ('%s') has shape %s, expected [N=%" PRId64
                ", ceil(K/group)=%" PRId64 "] (K=%" PRId64 ", group=%" PRId64 ")",
                scales->id, scales->name, have, rows, groups, k, group);
    return -1;
  }
  return rows;
}

/* A GEMV/GEMM tile with weight-only quantized weights: inputs [x, qW,
 * scales] (a fused pattern's operand after them: check_pattern), params
 * qdtype (6 int8, 7 int4) and group (default K); the scales are a float
 * [N, ceil(K/group)]. */
static void check_quantized_tile(AmkValidator *v, const AmkTask *t, const AmkParamTable *pt,
                                 int64_t qdtype, bool fused, bool have_k, int64_t k) {
  if (qdtype != AMK_QDTYPE_INT8 && qdtype != AMK_QDTYPE_INT4) {
    bound_error(v, t, "qdtype=%" PRId64 " names no weight-only format (6: int8, 7: int4)",
                qdtype);
    return;
  }
  if (fused ? t->n_inputs < 3 : t->n_inputs != 3) {
    bound_error(v, t, "a quantized tile reads [x, qW, scales%s], not %u inputs",
                fused ? ", ..." : "", t->n_inputs);
    return;
  }
  int64_t group = k;
  if (pt->v[AMK_PARAM_group] && !param_at_least(v, t, pt, AMK_PARAM_group, 1, &group))
    return;
  if (!have_k)
    return;
  quant_pair_rows(v, t, qdtype, k, group, shape_of(v, t->inputs[1]),
                  shape_of(v, t->inputs[2]));
}

/* Whether a pattern's input 1 is a weight matrix whose rows are the tile's
 * columns [n_off, n_off + N_tile). The per-head patterns count heads and
 * read a cache (attention) or inv_freq (rope_kv, attention_rope) there: a
 * cache's rows are positions, which an attention tile's query heads may
 * well exceed (9 heads over an 8-row cache). */
static bool input1_is_weight(int64_t pattern) {
  switch ((AmkGemvPattern)pattern) {
  case AMK_PATTERN_PLAIN:
  case AMK_PATTERN_NORM:
  case AMK_PATTERN_RESIDUAL:
  case AMK_PATTERN_SILU:
  case AMK_PATTERN_SILU_RESIDUAL:
  case AMK_PATTERN_COMBINE_RESIDUAL:
  case AMK_PATTERN_MLP:
  case AMK_PATTERN_ATTENTION_O: /* Wot: its rows are attention columns (check_attention_o) */
    return true;
  case AMK_PATTERN_ROPE_KV:
  case AMK_PATTERN_ATTENTION:
  case AMK_PATTERN_ATTENTION_ROPE:
    return false;
  case AMK_PATTERN_COUNT:
    break;
  }
  return true; /* an unknown pattern: check_pattern reports it */
}

static void check_tile(AmkValidator *v, const AmkTask *t,
                       const AmkParamTable *pt) {
  int64_t k, n_tile, n_off, qdtype = 0, flags = 0;
  bool have_k = param_at_least(v, t, pt, AMK_PARAM_K, 1, &k);
  bool have_tile = param_at_least(v, t, pt, AMK_PARAM_N_tile, 1, &n_tile);
  bool have_off = param_at_least(v, t, pt, AMK_PARAM_n_off, 0, &n_off);
  bool quantized = pt->v[AMK_PARAM_qdtype] &&
                   amk_validator_int(pt->v[AMK_PARAM_qdtype], &qdtype);
  bool have_flags = t->op == AMK_OP_GEMV_TILE && pt->v[AMK_PARAM_flags] &&
                    amk_validator_int(pt->v[AMK_PARAM_flags], &flags) &&
                    flags >= INT32_MIN && flags <= INT32_MAX;
  bool fused = have_flags && flags >> AMK_PATTERN_SHIFT != AMK_PATTERN_PLAIN;
  if (quantized && fused && !quantized_inputs(flags >> AMK_PATTERN_SHIFT)) {
    const char *pattern = amk_gemv_pattern_name(flags >> AMK_PATTERN_SHIFT);
    bound_error(v, t, "quantized weights (qdtype=%" PRId64 ") take the plain, norm, "
                "residual, silu, silu_residual, combine_residual or mlp pattern, not %s",
                qdtype, pattern ? pattern : "an unknown one");
    return;
  }
  /* combine_residual's input 0 is a split-KV partial, not the vector of K
   * (check_pattern checks it). */
  bool x_is_partial = have_flags && flags >= 0 &&
                      flags >> AMK_PATTERN_SHIFT == AMK_PATTERN_COMBINE_RESIDUAL;
  const Shape *x = shape_of(v, t->inputs[0]);
  const Shape *w = shape_of(v, t->inputs[1]);
  const Shape *out = t->n_outputs ? shape_of(v, t->outputs[0]) : &no_shape;
  if (have_k && !x_is_partial) {
    require_width(v, t, "input", "K", k, x);
    if (!quantized && t->n_inputs == 2)
      require_width(v, t, "weight", "K", k, w);
  }
  if (quantized)
    check_quantized_tile(v, t, pt, qdtype, fused, have_k, k);
  /* An accumulating tile's n_off / N_tile count columns of what it
   * projects, not its output's (every element of which it adds to): an mlp
   * tile's the intermediate's (check_mlp bounds them by I, which also keeps
   * them within the [2I, K] gate|up weight's rows), an attention_o tile's
   * the attention output's (check_attention_o bounds them by one head and
   * Wot's rows). */
  bool accumulates = have_flags && flags >= 0 &&
                     amk_gemv_pattern_accumulates(flags >> AMK_PATTERN_SHIFT);
  if (have_tile && have_off && !accumulates) {
    int64_t end = n_off + n_tile; /* both int32: no overflow */
    if (out->ok && end > last_dim(out))
      bound_error(v, t,
                  "n_off+N_tile=%" PRId64 " exceeds the width %" PRId64
                  " of output buffer #%" PRId32 " ('%s')",
                  end, last_dim(out), out->id, out->name);
    bool weight_rows =
        !have_flags || flags < 0 || input1_is_weight(flags >> AMK_PATTERN_SHIFT);
    if (weight_rows && w->ok && w->rank >= 2 && end > w->dim[0])
      bound_error(v, t,
                  "n_off+N_tile=%" PRId64 " exceeds the %" PRId64
                  " rows of weight buffer #%" PRId32 " ('%s')",
                  end, w->dim[0], w->id, w->name);
  }
  if (t->op == AMK_OP_GEMM_TILE) {
    int64_t m_tile, m_off = 0;
    bool have_m = param_at_least(v, t, pt, AMK_PARAM_M_tile, 1, &m_tile);
    bool have_moff = !pt->v[AMK_PARAM_m_off] ||
                     param_at_least(v, t, pt, AMK_PARAM_m_off, 0, &m_off);
    int64_t rows = out->ok && out->rank >= 2 ? out->dim[out->rank - 2] : 1;
    if (have_m && have_moff && out->ok && m_off + m_tile > rows)
      bound_error(v, t,
                  "m_off+M_tile=%" PRId64 " exceeds the %" PRId64
                  " rows of output buffer #%" PRId32 " ('%s')",
                  m_off + m_tile, rows, out->id, out->name);
  }
  if (have_flags)
    check_pattern(v, t, pt, flags, quantized, have_k, k, have_tile && have_off, n_off,
                  n_tile);
}

/* An attention's optional sub-rectangle (docs/Instructions.md): query heads
 * [n_off, n_off + N_tile) in whole GQA groups of `group`, query rows
 * [m_off, m_off + M_tile) of the `rows` of q; each pair given whole. Its
 * write footprint is counted in rows x columns of q's and the output's
 * [rows, n_heads*head_dim] view, so both must have that width. */
static void check_attention_rect(AmkValidator *v, const AmkTask *t, const AmkParamTable *pt,
                                 int64_t flags, int64_t group, int64_t n_heads, int64_t rows,
                                 int64_t q_row, const Shape *q, const Shape *out) {
  bool heads = pt->v[AMK_PARAM_n_off] || pt->v[AMK_PARAM_N_tile];
  bool row_range = pt->v[AMK_PARAM_m_off] || pt->v[AMK_PARAM_M_tile];
  if (!heads && !row_range)
    return;
  if (flags & 2) {
    bound_error(v, t, "a partial write (flags bit 1) covers all heads of its one row; "
                      "n_off, N_tile, m_off and M_tile are for a whole output");
    return;
  }
  require_width(v, t, "query", "n_heads*head_dim", q_row, q);
  require_width(v, t, "output", "n_heads*head_dim", q_row, out);
  int64_t off, n;
  if (heads) {
    if (!pt->v[AMK_PARAM_n_off] || !pt->v[AMK_PARAM_N_tile])
      bound_error(v, t, "query heads need both n_off and N_tile");
    else if (param_at_least(v, t, pt, AMK_PARAM_n_off, 0, &off) &&
             param_at_least(v, t, pt, AMK_PARAM_N_tile, 1, &n)) {
      if (off + n > n_heads)
        bound_error(v, t, "query heads n_off+N_tile=%" PRId64 " exceed n_heads=%" PRId64,
                    off + n, n_heads);
      else if (off % group || n % group)
        bound_error(v, t,
                    "query heads [%" PRId64 ", %" PRId64 ") are not whole GQA groups of %" PRId64
                    " heads (n_off and N_tile multiples of n_heads/n_kv_heads)",
                    off, off + n, group);
    }
  }
  if (row_range) {
    if (!pt->v[AMK_PARAM_m_off] || !pt->v[AMK_PARAM_M_tile])
      bound_error(v, t, "query rows need both m_off and M_tile");
    else if (param_at_least(v, t, pt, AMK_PARAM_m_off, 0, &off) &&
             param_at_least(v, t, pt, AMK_PARAM_M_tile, 1, &n) && q->ok && off + n > rows)
      bound_error(v, t,
                  "query rows m_off+M_tile=%" PRId64 " exceed the %" PRId64
                  " rows of query buffer #%" PRId32 " ('%s')",
                  off + n, rows, q->id, q->name);
  }
}

static void check_attention(AmkValidator *v, const AmkTask *t,
                            const AmkParamTable *pt) {
  int64_t head_dim, kv_start, kv_len, n_heads, n_kv_heads, flags = 0;
  bool ok = param_at_least(v, t, pt, AMK_PARAM_head_dim, 1, &head_dim);
  ok = param_at_least(v, t, pt, AMK_PARAM_kv_len, 1, &kv_len) && ok;
  ok = param_at_least(v, t, pt, AMK_PARAM_kv_start, 0, &kv_start) && ok;
  ok = param_at_least(v, t, pt, AMK_PARAM_n_heads, 1, &n_heads) && ok;
  ok = param_at_least(v, t, pt, AMK_PARAM_n_kv_heads, 1, &n_kv_heads) && ok;
  if (!ok)
    return;
  if (pt->v[AMK_PARAM_flags])
    amk_validator_int(pt->v[AMK_PARAM_flags], &flags);
  if (n_heads % n_kv_heads != 0) {
    bound_error(v, t,
                "n_heads=%" PRId64 " is not divisible by n_kv_heads=%" PRId64,
                n_heads, n_kv_heads);
    return;
  }
  for (int i = 1; i <= 2; i++) {
    const Shape *c = shape_of(v, t->inputs[i]);
    if (!c->ok)
      continue;
    const char *what = i == 1 ? "key cache" : "value cache";
    require_width(v, t, what, "head_dim", head_dim, c);
    if (c->rank >= 3 && c->dim[c->rank - 2] != n_kv_heads)
      bound_error(v, t,
                  "n_kv_heads=%" PRId64 " does not match dim %" PRId64
                  " of %s buffer #%" PRId32 " ('%s')",
                  n_kv_heads, c->dim[c->rank - 2], what, c->id, c->name);
    if (kv_start + kv_len > c->dim[0])
      bound_error(v, t,
                  "kv_start+kv_len=%" PRId64 " exceeds the length %" PRId64
                  " of %s buffer #%" PRId32 " ('%s')",
                  kv_start + kv_len, c->dim[0], what, c->id, c->name);
  }
  /* q and the output: query rows of n_heads*head_dim (one for a partial);
   * with flags bit 0 row r of M reads the window up to kv_len - (M-1-r),
   * within the window bounded above. */
  const Shape *q = shape_of(v, t->inputs[0]);
  int64_t q_row = n_heads * head_dim, rows = 1;
  if (q->ok && (flags & 2))
    require_numel(v, t, "query", q_row, "n_heads*head_dim, one row for a partial", q);
  else if (q->ok && (q->numel == 0 || q->numel % q_row != 0))
    bound_error(v, t,
                "query buffer #%" PRId32 " ('%s') has %" PRId64
                " elements, expected rows of %" PRId64 " (n_heads*head_dim)",
                q->id, q->name, q->numel, q_row);
  else if (q->ok)
    rows = q->numel / q_row;
  if (t->n_outputs) {
    const Shape *out = shape_of(v, t->outputs[0]);
    if (flags & 2)
      require_numel(v, t, "output", n_heads * (head_dim + 2),
                    "n_heads*(head_dim+2), a partial write", out);
    else
      require_numel(v, t, "output", rows * q_row,
                    rows == 1 ? "n_heads*head_dim" : "the query's rows of n_heads*head_dim",
                    out);
    check_attention_rect(v, t, pt, flags, n_heads / n_kv_heads, n_heads, rows, q_row, q, out);
  }
}

/* RMSNORM and GELU read flags bit 2 as their variant (AMK_FLAG_NORM_PLUS_ONE,
 * AMK_FLAG_GELU_TANH); any other bit set would be ignored by the kernels,
 * which would then compute something the program did not ask for. */
static void check_variant_flags(AmkValidator *v, const AmkTask *t, const AmkParamTable *pt,
                                int64_t allowed) {
  int64_t flags;
  if (!pt->v[AMK_PARAM_flags] || !amk_validator_int(pt->v[AMK_PARAM_flags], &flags))
    return;
  if (flags & ~allowed)
    bound_error(v, t,
                "flags=%" PRId64 " sets bits this op does not have (%s)", flags,
                allowed ? "only bit 2, the variant (docs/LangRef.md), is defined"
                        : "none are defined");
}

/* A cross-rank ALLREDUCE_SHARD (param group, include/amk/tp.h): what one
 * rank's program can show. Its one input is this rank's part, placed at
 * n_off of the output (0 and the output's size for a plain all-reduce);
 * the group is the program's tp_size. The protocol across the ranks is
 * amk_validate_tp's. */
static void check_collective(AmkValidator *v, const AmkTask *t, const AmkParamTable *pt) {
  int64_t group = 0, size = 0, rank = 0, n_off = 0;
  if (!param_at_least(v, t, pt, AMK_PARAM_group, 1, &group))
    return;
  if (group > AMK_TP_MAX_RANKS) {
    bound_error(v, t, "group=%" PRId64 " is more than the %d ranks a tensor-parallel group may "
                "have", group, AMK_TP_MAX_RANKS);
    return;
  }
  if (group >= 2 && (!amk_module_tp(v->m, &size, &rank) || size != group))
    bound_error(v, t, "group=%" PRId64 " names a cross-rank all-reduce, but the program is "
                "%s (meta tp_size and tp_rank)", group,
                size > 0 ? "a rank of another group size" : "not a tensor-parallel rank program");
  if (group >= 2 && t->n_inputs != 1)
    bound_error(v, t, "a cross-rank all-reduce reads one input (this rank's part), not %u",
                t->n_inputs);
  if (pt->v[AMK_PARAM_n_off] && !param_at_least(v, t, pt, AMK_PARAM_n_off, 0, &n_off))
    return;
  const Shape *out = shape_of(v, t->outputs[0]);
  const Shape *in = shape_of(v, t->inputs[0]);
  if (!out->ok || !in->ok)
    return;
  if (group < 2 || !pt->v[AMK_PARAM_n_off]) {
    for (uint32_t i = 0; i < t->n_inputs; i++)
      require_numel(v, t, "input", out->numel, "the output's size", shape_of(v, t->inputs[i]));
  } else if (n_off + in->numel > out->numel) {
    bound_error(v, t, "its part, %" PRId64 " elements of input buffer #%" PRId32 " ('%s') at "
                "n_off=%" PRId64 ", runs past the %" PRId64 " elements of output buffer #%" PRId32
                " ('%s')", in->numel, in->id, in->name, n_off, out->numel, out->id, out->name);
  }
}

/* The row window (M_tile, m_off) of a per-row op: both int32, m_off >= 0,
 * M_tile >= 1, inside the op's rows; KV_APPEND's cache updated in place
 * (sibling windows of a separate output would each copy the whole input
 * cache over the others' rows). */
static void check_row_window(AmkValidator *v, uint32_t task, const AmkParamTable *pt) {
  const AmkTask *t = &v->m->tasks[task];
  AmkRowWindow w = amk_validator_row_window(v, task);
  if (w.kind == AMK_ROW_WINDOW_NONE)
    return;
  if (!w.has_m_tile) {
    bound_error(v, t, "m_off without M_tile (a row window needs M_tile)");
    return;
  }
  int64_t m_off = 0, m_tile;
  bool have_off = !w.has_m_off || param_at_least(v, t, pt, AMK_PARAM_m_off, 0, &m_off);
  bool have_tile = param_at_least(v, t, pt, AMK_PARAM_M_tile, 1, &m_tile);
  if (t->op == AMK_OP_KV_APPEND && t->inputs[1] != t->outputs[0])
    bound_error(v, t, "a row window (M_tile) needs the cache updated in place "
                      "(input 1 and the output the same buffer)");
  /* UNKNOWN with good params: shapes or params the checks above report. */
  if (w.kind == AMK_ROW_WINDOW_UNKNOWN && have_off && have_tile && w.rows > 0 &&
      m_off + m_tile > w.rows)
    bound_error(v, t, "row window m_off+M_tile=%" PRId64 " exceeds its %" PRId64 " rows",
                m_off + m_tile, w.rows);
}

static void check_task_bounds(AmkValidator *v, uint32_t task) {
  const AmkTask *t = &v->m->tasks[task];
  AmkParamTable params;
  const AmkParamTable *pt = &params;
  const AmkOpInfo *info = amk_op_info(t->op);
  /* Arity was checked by the structural pass; only judge well-formed tasks. */
  int max_inputs = amk_validator_max_inputs(v, task);
  if ((int64_t)t->n_inputs < info->min_inputs ||
      (max_inputs != -1 && (int64_t)t->n_inputs > max_inputs) ||
      (int64_t)t->n_outputs != info->n_outputs)
    return;
  amk_validator_params(v, task, &params);
  if (amk_op_takes_row_window(t->op))
    check_row_window(v, task, pt);
  int64_t x;
  switch (t->op) {
  case AMK_OP_GEMV_TILE:
  case AMK_OP_GEMM_TILE:
    check_tile(v, t, pt);
    break;
  case AMK_OP_EMBED:
    if (param_at_least(v, t, pt, AMK_PARAM_hidden, 1, &x)) {
      const Shape *out = shape_of(v, t->outputs[0]);
      const Shape *table = shape_of(v, t->inputs[1]);
      require_width(v, t, "output", "hidden", x, out);
      if (table->ok && table->numel % x != 0)
        bound_error(v, t,
                    "hidden=%" PRId64 " does not divide the %" PRId64
                    " elements of table buffer #%" PRId32 " ('%s')",
                    x, table->numel, table->id, table->name);
    }
    break;
  case AMK_OP_RMSNORM:
  case AMK_OP_LAYERNORM:
    /* Each row of `hidden` elements is normalized: the whole hidden state,
     * or (Qwen3's q/k norms) every head of a [1, heads * head_dim] vector. */
    if (param_at_least(v, t, pt, AMK_PARAM_hidden, 1, &x)) {
      const Shape *in = shape_of(v, t->inputs[0]);
      const Shape *weight = shape_of(v, t->inputs[1]);
      const Shape *out = shape_of(v, t->outputs[0]);
      if (in->ok && last_dim(in) % x != 0)
        bound_error(v, t,
                    "hidden=%" PRId64 " does not divide the width %" PRId64
                    " of input buffer #%" PRId32 " ('%s') into rows",
                    x, last_dim(in), in->id, in->name);
      require_numel(v, t, "weight", x, "hidden", weight);
      if (in->ok) {
        require_width(v, t, "output", "the input's width", last_dim(in), out);
        require_numel(v, t, "output", in->numel, "the input's size", out);
      }
    }
    check_variant_flags(v, t, pt, t->op == AMK_OP_RMSNORM ? AMK_FLAG_NORM_PLUS_ONE : 0);
    break;
  case AMK_OP_ROPE:
    /* Rows of whole heads: [n, head_dim] as the reference reshapes them, or
     * the projection's [1, n_heads*head_dim] read directly. */
    if (param_at_least(v, t, pt, AMK_PARAM_head_dim, 1, &x)) {
      if (x % 2)
        bound_error(v, t, "head_dim=%" PRId64 " must be even", x);
      const Shape *in = shape_of(v, t->inputs[0]);
      const Shape *out = shape_of(v, t->outputs[0]);
      if (in->ok && last_dim(in) % x != 0)
        bound_error(v, t,
                    "head_dim=%" PRId64 " does not divide the width %" PRId64
                    " of input buffer #%" PRId32 " ('%s')",
                    x, last_dim(in), in->id, in->name);
      if (in->ok)
        require_numel(v, t, "output", in->numel, "the input's size", out);
    }
    break;
  case AMK_OP_KV_APPEND:
    /* Whole cache rows, appended at pos..pos+rows-1 (a prefill step
     * appends one per token). */
    if (param_at_least(v, t, pt, AMK_PARAM_pos, 0, &x)) {
      const Shape *cache = shape_of(v, t->outputs[0]);
      const Shape *row = shape_of(v, t->inputs[0]);
      int64_t row_len = cache->ok && cache->dim[0] > 0 ? cache->numel / cache->dim[0] : 0;
      if (cache->ok && row->ok && row_len > 0 &&
          (row->numel == 0 || row->numel % row_len != 0)) {
        bound_error(v, t,
                    "appended buffer #%" PRId32 " ('%s') has %" PRId64
                    " elements, expected whole cache rows of %" PRId64,
                    row->id, row->name, row->numel, row_len);
      } else if (cache->ok && x >= cache->dim[0]) {
        bound_error(v, t,
                    "pos=%" PRId64 " is outside the %" PRId64
                    " rows of KV cache buffer #%" PRId32 " ('%s')",
                    x, cache->dim[0], cache->id, cache->name);
      } else if (cache->ok) {
        int64_t rows = row->ok && row_len > 0 ? row->numel / row_len : 1;
        if (x + rows > cache->dim[0])
          bound_error(v, t,
                      "pos=%" PRId64 " + %" PRId64 " appended row%s exceeds the %" PRId64
                      " rows of KV cache buffer #%" PRId32 " ('%s')",
                      x, rows, rows == 1 ? "" : "s", cache->dim[0], cache->id, cache->name);
      }
    }
    break;
  case AMK_OP_ATTENTION_TILE:
    check_attention(v, t, pt);
    break;
  case AMK_OP_ADD:
  case AMK_OP_SILU_MUL:
  case AMK_OP_MUL:
  case AMK_OP_GELU:
  case AMK_OP_SOFTMAX:
  case AMK_OP_COPY:
  case AMK_OP_ALLREDUCE_SHARD: {
    if (t->op == AMK_OP_ALLREDUCE_SHARD && amk_task_param(t, AMK_TP_PARAM)) {
      check_collective(v, t, pt);
      break;
    }
    const Shape *out = shape_of(v, t->outputs[0]);
    if (!out->ok)
      break;
    for (uint32_t i = 0; i < t->n_inputs; i++) {
      const Shape *in = shape_of(v, t->inputs[i]);
      require_numel(v, t, "input", out->numel, "the output's size", in);
    }
    if (t->op != AMK_OP_SOFTMAX && t->op != AMK_OP_COPY && t->op != AMK_OP_ALLREDUCE_SHARD)
      check_column_window(v, t, pt, out);
    if (t->op == AMK_OP_GELU)
      check_variant_flags(v, t, pt, AMK_FLAG_GELU_TANH);
    break;
  }
  case AMK_OP_NOP:
  case AMK_OP_DEQUANT:
  case AMK_OP_SAMPLE_ARGMAX:
  case AMK_OP_ATTENTION_COMBINE:
  case AMK_OP_FUSED:
  case AMK_OP_COUNT:
    /* No semantic bound (amk_validate_op_has_bounds says why). */
    break;
  }
}

bool amk_validate_op_has_bounds(AmkOp op) {
  switch (op) {
  case AMK_OP_GEMV_TILE:
  case AMK_OP_GEMM_TILE:
  case AMK_OP_EMBED:
  case AMK_OP_RMSNORM:
  case AMK_OP_LAYERNORM:
  case AMK_OP_ROPE:
  case AMK_OP_KV_APPEND:
  case AMK_OP_ATTENTION_TILE:
  case AMK_OP_ADD:
  case AMK_OP_SILU_MUL:
  case AMK_OP_MUL:
  case AMK_OP_GELU:
  case AMK_OP_SOFTMAX:
  case AMK_OP_COPY:
  case AMK_OP_ALLREDUCE_SHARD:
    return true;
  case AMK_OP_NOP: /* reads and writes nothing */
    return false;
  /* Not yet: packed quantized shapes (DEQUANT), one id per row
   * (SAMPLE_ARGMAX) and the partials' [n_heads, head_dim + 2] rows
   * (ATTENTION_COMBINE) are left to the kernels' own checks. */
  case AMK_OP_DEQUANT:
  case AMK_OP_SAMPLE_ARGMAX:
  case AMK_OP_ATTENTION_COMBINE:
    return false;
  /* Its shapes are its recipe's (the fuse pass checks recipes). */
  case AMK_OP_FUSED:
    return false;
  case AMK_OP_COUNT:
    break;
  }
  return false;
}


/* ---- coverage: every element read is written before the read ------------
 *
 * Provenance (validate.c) orders every writer of a buffer before each of its
 * readers; this proves the writers together write what is read. A buffer is
 * seen as [rows, width] (width its last dim, rows numel / width) and each
 * writer's footprint as a rectangle of it: GEMV/GEMM tiles columns
 * [n_off, n_off + N_tile) (per-head attention patterns in heads of
 * head_dim (+2 with flags bit 1) columns, GEMM rows [m_off, m_off + M_tile)),
 * KV_APPEND and rope_kv row `pos` of the cache (rope_kv: its KV heads'
 * columns of each plane of a combined cache), elementwise ops with N_tile
 * columns [n_off, n_off + N_tile) of every row, a per-row op with a row
 * window (M_tile) the elements of its rows (KV_APPEND: cache rows
 * pos + m_off ...), an accumulating tile (mlp, attention_o) the whole
 * accumulator it adds to (whose sum is complete when its tiles' columns
 * cover [0, I), I the rows of their transposed weight:
 * check_accumulator_coverage), any other op the whole buffer.
 * A read of an activation is taken to be the whole buffer (no lowering reads
 * part of one whose writers leave a gap); an IO_OUTPUT must be whole. A KV
 * cache holds earlier positions before the step, so only its rows of the
 * current step (meta.pos and every row the program appends) must be written
 * where a reader's window (kv_start, kv_len) reaches them. */

typedef struct {
  int64_t row_lo, row_hi, col_lo, col_hi;
} Footprint;

/* The first element nothing covers: row `row`, columns [col_lo, col_hi). */
typedef struct {
  bool found;
  int64_t row, col_lo, col_hi;
} CoverageGap;

static int compare_footprint_cols(const void *pa, const void *pb) {
  const Footprint *a = pa, *b = pb;
  return amk_compare_i64(a->col_lo, b->col_lo);
}

static int compare_footprint_rows(const void *pa, const void *pb) {
  const Footprint *a = pa, *b = pb;
  return amk_compare_i64(a->row_lo, b->row_lo);
}

static int compare_i64_values(const void *pa, const void *pb) {
  return amk_compare_i64(*(const int64_t *)pa, *(const int64_t *)pb);
}

static int64_t clamp_i64(int64_t x, int64_t lo, int64_t hi) {
  return x < lo ? lo : x > hi ? hi : x;
}

/* Rows per cache position (the view rows of one dim-0 row), or 0 when the
 * buffer has no position rows (rank 1). */
static int64_t rows_per_position(const Shape *s) {
  return s->rank < 2 ? 0 : (s->numel / last_dim(s)) / s->dim[0];
}

/* Task `t`'s footprint on buffer `s` (it writes it); params that are
 * missing or out of range (reported by the checks above) give the whole
 * buffer, which can only hide a gap in a program rejected anyway. */
static Footprint write_footprint(const AmkValidator *v, uint32_t t,
                                 const Shape *s) {
  const AmkTask *task = &v->m->tasks[t];
  int64_t width = last_dim(s), rows = s->numel / width;
  Footprint whole = {0, rows, 0, width}, f = whole;
  AmkParamTable pt;
  int64_t n_off, n_tile, pos, flags = 0, head_dim, n_kv;
  AmkRowWindow window = amk_validator_row_window(v, t);
  if (window.kind == AMK_ROW_WINDOW_OK && window.out_width == width) {
    /* Elements [lo, hi): within one row exactly, else the whole rows
     * inside it (never more than is written: a window cut mid-row may only
     * make a gap appear). */
    int64_t lo = window.lo, hi = window.hi;
    if (lo / width == (hi - 1) / width)
      return (Footprint){lo / width, lo / width + 1, lo % width, (hi - 1) % width + 1};
    int64_t first = (lo + width - 1) / width, end = hi / width;
    return (Footprint){first, end > first ? end : first, 0, width};
  }
  if (window.kind == AMK_ROW_WINDOW_UNKNOWN)
    return whole; /* reported by check_row_window or the shape checks */
  switch (task->op) {
  case AMK_OP_GEMV_TILE:
  case AMK_OP_GEMM_TILE:
    amk_validator_params(v, t, &pt);
    if (pt.v[AMK_PARAM_flags] && !amk_validator_int(pt.v[AMK_PARAM_flags], &flags))
      return whole;
    if (!amk_validator_int(pt.v[AMK_PARAM_n_off], &n_off) ||
        !amk_validator_int(pt.v[AMK_PARAM_N_tile], &n_tile) || n_off < 0 ||
        n_tile < 1 || n_off > INT32_MAX || n_tile > INT32_MAX || flags < 0)
      return whole;
    int64_t pattern = task->op == AMK_OP_GEMV_TILE ? flags >> AMK_PATTERN_SHIFT : 0;
    int64_t unit = 1;
    if (pattern == AMK_PATTERN_ATTENTION || pattern == AMK_PATTERN_ATTENTION_ROPE ||
        pattern == AMK_PATTERN_ROPE_KV) {
      if (!amk_validator_int(pt.v[AMK_PARAM_head_dim], &head_dim) ||
          head_dim < 1 || head_dim > INT32_MAX)
        return whole;
      unit = pattern == AMK_PATTERN_ROPE_KV ? head_dim
                                            : head_dim + ((flags & 2) ? 2 : 0);
    } else if (pattern >= AMK_PATTERN_COUNT || amk_gemv_pattern_accumulates(pattern)) {
      /* mlp, attention_o: add to every element (n_off counts the columns of
       * what they project). */
      return whole;
    }
    if (pattern == AMK_PATTERN_ROPE_KV) {
      /* Row pos of a [max_seq, 2, W] cache: both planes, the task's KV heads'
       * columns (all W of a per-head cache). */
      if (s->rank != 3 || s->dim[1] != 2 ||
          !amk_validator_int(pt.v[AMK_PARAM_pos], &pos) || pos < 0 ||
          pos >= s->dim[0] ||
          !amk_validator_int(pt.v[AMK_PARAM_n_kv_heads], &n_kv))
        return whole;
      f.row_lo = 2 * pos;
      f.row_hi = 2 * pos + 2;
      if (width == head_dim && n_kv > 1)
        return f;
    }
    f.col_lo = clamp_i64(n_off * unit, 0, width);
    f.col_hi = clamp_i64((n_off + n_tile) * unit, 0, width);
    int64_t m_off, m_tile;
    if (task->op == AMK_OP_GEMM_TILE &&
        amk_validator_int(pt.v[AMK_PARAM_m_off], &m_off) &&
        amk_validator_int(pt.v[AMK_PARAM_M_tile], &m_tile) && m_off >= 0 &&
        m_tile >= 1 && m_off <= INT32_MAX && m_tile <= INT32_MAX) {
      f.row_lo = clamp_i64(m_off, 0, rows);
      f.row_hi = clamp_i64(m_off + m_tile, 0, rows);
    }
    return f;
  case AMK_OP_ATTENTION_TILE:
    /* Its sub-rectangle, if it names one (query rows x heads' columns). */
    if (!amk_validator_attention_rect(v, t, rows, width, &f.row_lo, &f.row_hi, &f.col_lo,
                                      &f.col_hi))
      return whole;
    return f;
  case AMK_OP_KV_APPEND: {
    amk_validator_params(v, t, &pt);
    int64_t per = rows_per_position(s);
    if (per == 0 || !amk_validator_int(pt.v[AMK_PARAM_pos], &pos) || pos < 0 ||
        pos >= s->dim[0])
      return whole;
    /* Rows pos..pos+n-1 for n appended rows (whole rows: checked above). */
    uint32_t in_b = task->n_inputs ? amk_id_index_get(&v->bufs, task->inputs[0]) : AMK_NO_INDEX;
    if (in_b == AMK_NO_INDEX)
      return whole; /* a missing buffer, reported by the structural checks */
    const Shape *in = &v->shapes[in_b];
    int64_t row_len = s->numel / s->dim[0];
    int64_t n_rows = in->ok && row_len > 0 && in->numel % row_len == 0 ? in->numel / row_len : 1;
    if (n_rows < 1 || pos + n_rows > s->dim[0])
      return whole;
    f.row_lo = pos * per;
    f.row_hi = (pos + n_rows) * per;
    return f;
  }
  case AMK_OP_ADD:
  case AMK_OP_SILU_MUL:
  case AMK_OP_MUL:
  case AMK_OP_GELU:
    /* A column window (n_off, N_tile) of every row. */
    amk_validator_params(v, t, &pt);
    n_off = 0;
    if (!amk_validator_int(pt.v[AMK_PARAM_N_tile], &n_tile) || n_tile < 1 ||
        n_tile > INT32_MAX ||
        (pt.v[AMK_PARAM_n_off] && !amk_validator_int(pt.v[AMK_PARAM_n_off], &n_off)) ||
        n_off < 0 || n_off > INT32_MAX)
      return whole;
    f.col_lo = clamp_i64(n_off, 0, width);
    f.col_hi = clamp_i64(n_off + n_tile, 0, width);
    return f;
  default:
    return whole;
  }
}

/* The first element of rows [row_lo, row_hi) (all columns of `width`) that
 * none of `fp` covers. A band sweep over the footprints' row edges: one
 * band when every footprint spans the rows asked (GEMV tiles, whole
 * writers), so the usual cost is one sort of the footprints. `cols` has room
 * for n footprints, `edges` for 2n + 2 values. */
static CoverageGap find_coverage_gap(Footprint *fp, size_t n,
                                     int64_t row_lo, int64_t row_hi,
                                     int64_t width, Footprint *cols,
                                     int64_t *edges) {
  CoverageGap gap = {false, 0, 0, 0};
  size_t n_edges = 0;
  edges[n_edges++] = row_lo;
  edges[n_edges++] = row_hi;
  for (size_t i = 0; i < n; i++) {
    if (fp[i].row_lo > row_lo && fp[i].row_lo < row_hi)
      edges[n_edges++] = fp[i].row_lo;
    if (fp[i].row_hi > row_lo && fp[i].row_hi < row_hi)
      edges[n_edges++] = fp[i].row_hi;
  }
  if (n_edges > 2)
    qsort(edges, n_edges, sizeof *edges, compare_i64_values);
  /* A sweep down the rows: `cols` holds the footprints that reach the
   * band (row_lo <= lo < row_hi; every footprint edge inside the range is
   * a band edge, so those span the whole band), taken from fp in row_lo
   * order (sorted only when there are several bands), so each band costs
   * its own footprints, not all n (a prefill program's 128 row blocks of a
   * KV cache made this quadratic). */
  if (n_edges > 2)
    qsort(fp, n, sizeof *fp, compare_footprint_rows);
  size_t next = 0, k = 0;
  for (size_t e = 0; e + 1 < n_edges; e++) {
    int64_t lo = edges[e], hi = edges[e + 1];
    if (lo == hi)
      continue;
    size_t kept = 0;
    for (size_t i = 0; i < k; i++)
      if (cols[i].row_hi > lo)
        cols[kept++] = cols[i];
    k = kept;
    for (; next < n && fp[next].row_lo <= lo; next++)
      if (fp[next].row_hi > lo && fp[next].col_lo < fp[next].col_hi)
        cols[k++] = fp[next];
    qsort(cols, k, sizeof *cols, compare_footprint_cols);
    int64_t reach = 0;
    for (size_t i = 0; i < k && reach < width; i++) {
      if (cols[i].col_lo > reach) {
        gap = (CoverageGap){true, lo, reach, cols[i].col_lo};
        return gap;
      }
      reach = cols[i].col_hi > reach ? cols[i].col_hi : reach;
    }
    if (reach < width)
      return (CoverageGap){true, lo, reach, width};
  }
  return gap;
}

/* The input at which a GEMV pattern reads a fused [max_seq, 2, W] KV cache
 * as an attention (over the window kv_start, kv_len), or -1: attention_rope
 * at 2, attention_o (an attention_rope of one head, then its o projection)
 * at 3, after Wot. rope_kv writes its cache; attention (pattern 6) reads
 * two [max_seq, n_kv, head_dim] caches at 1 and 2 (kv_read_window). Every
 * pattern is listed: a new one does not compile until it says. */
static int pattern_cache_input(int64_t pattern) {
  if (pattern < 0 || pattern >= AMK_PATTERN_COUNT)
    return -1;
  switch ((AmkGemvPattern)pattern) {
  case AMK_PATTERN_ATTENTION_ROPE:
    return 2;
  case AMK_PATTERN_ATTENTION_O:
    return 3;
  case AMK_PATTERN_PLAIN:
  case AMK_PATTERN_NORM:
  case AMK_PATTERN_RESIDUAL:
  case AMK_PATTERN_SILU:
  case AMK_PATTERN_SILU_RESIDUAL:
  case AMK_PATTERN_ROPE_KV:
  case AMK_PATTERN_ATTENTION:
  case AMK_PATTERN_COMBINE_RESIDUAL:
  case AMK_PATTERN_MLP:
  case AMK_PATTERN_COUNT:
    break;
  }
  return -1;
}

/* Whether input `input` of task `t` is the fused cache of a tile with flags
 * bit AMK_FLAG_KV_FROM_QKV (attention_rope; attention_o, which requires
 * it): it reads the cache only below the step's position (row pos comes
 * from qkv). */
static bool reads_cache_below_pos(const AmkValidator *v, uint32_t t, uint32_t input) {
  const AmkTask *task = &v->m->tasks[t];
  AmkParamTable pt;
  int64_t flags;
  if (task->op != AMK_OP_GEMV_TILE)
    return false;
  amk_validator_params(v, t, &pt);
  return amk_validator_int(pt.v[AMK_PARAM_flags], &flags) && flags >= 0 &&
         (flags & AMK_FLAG_KV_FROM_QKV) &&
         pattern_cache_input(flags >> AMK_PATTERN_SHIFT) == (int)input;
}

/* Rows [lo, hi) of a KV cache that task `t` reads (in positions): the
 * window of an attention reading it as a cache (below meta.pos for an
 * attention_rope or attention_o tile that takes row pos from qkv), else
 * every row. */
static void kv_read_window(const AmkValidator *v, uint32_t t, uint32_t input,
                           const Shape *s, int64_t *lo, int64_t *hi) {
  const AmkTask *task = &v->m->tasks[t];
  *lo = 0;
  *hi = s->dim[0];
  bool window = false;
  if (task->op == AMK_OP_ATTENTION_TILE)
    window = input == 1 || input == 2;
  AmkParamTable pt;
  amk_validator_params(v, t, &pt);
  int64_t flags, start, len;
  if (task->op == AMK_OP_GEMV_TILE && amk_validator_int(pt.v[AMK_PARAM_flags], &flags)) {
    int64_t pattern = flags >> AMK_PATTERN_SHIFT;
    window = (pattern == AMK_PATTERN_ATTENTION && (input == 1 || input == 2)) ||
             (flags >= 0 && pattern_cache_input(pattern) == (int)input);
  }
  if (window && amk_validator_int(pt.v[AMK_PARAM_kv_start], &start) &&
      amk_validator_int(pt.v[AMK_PARAM_kv_len], &len) && start >= 0 && len >= 0 &&
      start <= INT32_MAX && len <= INT32_MAX) {
    *lo = clamp_i64(start, 0, s->dim[0]);
    *hi = clamp_i64(start + len, 0, s->dim[0]);
  }
  int64_t pos;
  if (reads_cache_below_pos(v, t, input) && meta_position(v, &pos)) {
    *hi = clamp_i64(pos, 0, *hi);
    *lo = clamp_i64(*lo, 0, *hi);
  }
}

bool amk_validator_read_misses_writer(const AmkValidator *v, uint32_t t, uint32_t input,
                                      uint32_t b, uint32_t w) {
  if (!reads_cache_below_pos(v, t, input) || v->m->tasks[w].op != AMK_OP_GEMV_TILE)
    return false;
  Shape s = compute_shape(v, b);
  int64_t per = s.ok ? rows_per_position(&s) : 0, lo, hi;
  if (per == 0)
    return false;
  kv_read_window(v, t, input, &s, &lo, &hi);
  Footprint f = write_footprint(v, w, &s);
  return f.row_lo >= hi * per || f.row_hi <= lo * per;
}

typedef struct {
  Footprint *fp, *cols, *clip;
  int64_t *edges;
  uint32_t *ids;
  int64_t *rows; /* KV: the step's bands of positions, [lo, hi) pairs */
  uint32_t *self_readers; /* per buffer: readers that also write it */
  uint32_t *self_off;
  uint32_t *first_reader; /* per buffer, AMK_NO_INDEX when none */
} CoverageScratch;

static void report_gap(AmkValidator *v, uint32_t b, uint32_t reader,
                       const CoverageGap *gap, const char *why,
                       uint32_t excluded) {
  const AmkModule *m = v->m;
  const AmkBuffer *buf = &m->buffers[b];
  const Shape *s = &v->shapes[b];
  int64_t width = last_dim(s);
  int64_t first = gap->row * width + gap->col_lo;
  int64_t end = gap->row * width + gap->col_hi;
  char list[256];
  uint32_t *ids = v->scratch_ix;
  size_t n = 0;
  for (uint32_t j = v->wr_off[b]; j < v->wr_off[b + 1]; j++)
    if (v->wr[j] != excluded && (n == 0 || ids[n - 1] != v->wr[j]))
      ids[n++] = v->wr[j];
  amk_validator_format_task_ids(m, ids, n, list, sizeof list);
  const char *name = buf->name ? buf->name : "";
  if (reader == AMK_NO_INDEX) {
    amk_validator_report(v, AMK_SEVERITY_ERROR, buf->loc,
                         "IO_OUTPUT buffer '%s'(#%" PRId32 ") elements [%" PRId64
                         ", %" PRId64 ") are never written (writer tasks %s), "
                         "the output is INCOMPLETE",
                         name, buf->id, first, end, list);
    return;
  }
  const AmkTask *t = &m->tasks[reader];
  amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                       "task %" PRId32 " (%s) reads %s #%" PRId32 " ('%s') but "
                       "elements [%" PRId64 ", %" PRId64 ")%s are written by no "
                       "task ordered before it (writer tasks %s), UNWRITTEN READ",
                       t->id, amk_validator_label(t),
                       buf->kind == AMK_KIND_KV_CACHE ? "KV cache" : "buffer",
                       buf->id, name, first, end, why, list);
}

/* A KV cache whose step row `row` is not written in full, though `reader`
 * reads the cache: the next step would read that row as history. */
static void report_history_gap(AmkValidator *v, uint32_t b, uint32_t reader,
                               const CoverageGap *gap, int64_t row) {
  const AmkModule *m = v->m;
  const AmkBuffer *buf = &m->buffers[b];
  int64_t width = last_dim(&v->shapes[b]);
  const AmkTask *t = &m->tasks[reader];
  amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                       "task %" PRId32 " (%s) reads KV cache #%" PRId32 " ('%s') but no task "
                       "of this step writes elements [%" PRId64 ", %" PRId64 ") (row %" PRId64
                       ", this step's): the steps after read that row as history, "
                       "UNWRITTEN READ",
                       t->id, amk_validator_label(t), buf->id, buf->name ? buf->name : "",
                       gap->row * width + gap->col_lo, gap->row * width + gap->col_hi, row);
}

/* Writers of buffer `b` other than `excluded`, as footprints in cs->fp. */
static size_t gather_footprints(AmkValidator *v, uint32_t b, uint32_t excluded,
                                CoverageScratch *cs) {
  size_t n = 0;
  for (uint32_t j = v->wr_off[b]; j < v->wr_off[b + 1]; j++)
    if (v->wr[j] != excluded)
      cs->fp[n++] = write_footprint(v, v->wr[j], &v->shapes[b]);
  return n;
}

static void check_activation_coverage(AmkValidator *v, uint32_t b,
                                      CoverageScratch *cs) {
  const Shape *s = &v->shapes[b];
  int64_t width = last_dim(s), rows = s->numel / width;
  uint32_t reader = cs->first_reader[b];
  if (reader == AMK_NO_INDEX && v->m->buffers[b].kind != AMK_KIND_IO_OUTPUT)
    return;
  size_t n = gather_footprints(v, b, AMK_NO_INDEX, cs);
  CoverageGap gap = find_coverage_gap(cs->fp, n, 0, rows, width, cs->cols, cs->edges);
  if (gap.found) {
    report_gap(v, b, reader, &gap, "", AMK_NO_INDEX);
    return;
  }
  /* A reader that writes the buffer too reads what the others wrote. */
  for (uint32_t i = cs->self_off[b]; i < cs->self_off[b + 1]; i++) {
    uint32_t t = cs->self_readers[i];
    n = gather_footprints(v, b, t, cs);
    gap = find_coverage_gap(cs->fp, n, 0, rows, width, cs->cols, cs->edges);
    if (gap.found) {
      report_gap(v, b, t, &gap, " (it reads them before writing them itself)", t);
      return;
    }
  }
}

/* An accumulator (every writer an accumulating tile of one pattern; the
 * WAW check rejected any other writer and proved the tiles' columns
 * disjoint) holds the whole projection only when those columns cover
 * [0, I), I the rows of the pattern's transposed weight (mlp: Wdt's, the
 * intermediate; attention_o: Wot's, n_heads * head_dim), which all its
 * tiles must share; a missing tile leaves a share of it out (and the one at
 * column 0 the residual x). Checked where the buffer is read or is an
 * IO_OUTPUT, as the element coverage is. */
static void check_accumulator_coverage(AmkValidator *v, uint32_t b, CoverageScratch *cs) {
  const AmkModule *m = v->m;
  const AmkBuffer *buf = &m->buffers[b];
  uint32_t reader = cs->first_reader[b], first = AMK_NO_INDEX;
  if (reader == AMK_NO_INDEX && buf->kind != AMK_KIND_IO_OUTPUT)
    return;
  int64_t pattern = amk_validator_accumulating_pattern(v, v->wr[v->wr_off[b]]);
  const AmkAccumulatorInfo *info = amk_validator_accumulator_info(pattern);
  const char *pname = amk_gemv_pattern_name(pattern);
  if (!info) {
    /* An accumulating pattern amk_validator_accumulator_info does not know:
     * its sum cannot be proved whole, so it is not taken on trust. */
    amk_validator_report(v, AMK_SEVERITY_ERROR, buf->loc,
                         "accumulator #%" PRId32 " ('%s'): the validator does not know what "
                         "the columns of pattern %s tiles count, so it cannot prove their "
                         "sum whole",
                         buf->id, buf->name ? buf->name : "", pname ? pname : "?");
    return;
  }
  int64_t inter = 0;
  size_t n = 0;
  for (uint32_t j = v->wr_off[b]; j < v->wr_off[b + 1]; j++) {
    uint32_t w = v->wr[j];
    const AmkTask *task = &m->tasks[w];
    AmkParamTable pt;
    int64_t n_off, n_tile;
    if (amk_validator_accumulating_pattern(v, w) != pattern)
      return; /* tiles of two patterns: the WAW check reported them */
    bool quant = info->quant_inputs > 0 && task->n_inputs == info->quant_inputs;
    const Shape *wd = task->n_inputs == info->n_inputs ? shape_of(v, task->inputs[info->size_input])
                      : quant ? shape_of(v, task->inputs[info->quant_size_input])
                              : &no_shape;
    amk_validator_params(v, w, &pt);
    /* Bad inputs or params: reported by the bounds checks. */
    if (!wd->ok || wd->rank != 2 || !amk_validator_int(pt.v[AMK_PARAM_n_off], &n_off) ||
        !amk_validator_int(pt.v[AMK_PARAM_N_tile], &n_tile) || n_off < 0 || n_tile < 1 ||
        n_off > INT32_MAX || n_tile > INT32_MAX ||
        (quant && wd->dim[0] % info->quant_rows_per_column != 0))
      return;
    int64_t size = quant ? wd->dim[0] / info->quant_rows_per_column : wd->dim[0];
    if (first == AMK_NO_INDEX) {
      first = w;
      inter = size;
    } else if (size != inter) {
      const AmkTask *t0 = &m->tasks[first];
      amk_validator_report(v, AMK_SEVERITY_ERROR, task->loc,
                           "%s tiles %" PRId32 " ('%s') and %" PRId32 " ('%s') add into "
                           "accumulator #%" PRId32 " ('%s') from %s of different "
                           "sizes (%s of %" PRId64 " and %" PRId64 " rows)",
                           pname, t0->id, amk_validator_label(t0), task->id,
                           amk_validator_label(task), buf->id, buf->name ? buf->name : "",
                           info->whole, info->weights, inter, size);
      return;
    }
    cs->fp[n++] = (Footprint){0, 1, clamp_i64(n_off, 0, inter),
                              clamp_i64(n_off + n_tile, 0, inter)};
  }
  CoverageGap gap = find_coverage_gap(cs->fp, n, 0, 1, inter, cs->cols, cs->edges);
  if (!gap.found)
    return;
  char list[256];
  size_t n_ids = 0;
  for (uint32_t j = v->wr_off[b]; j < v->wr_off[b + 1]; j++)
    v->scratch_ix[n_ids++] = v->wr[j];
  amk_validator_format_task_ids(m, v->scratch_ix, n_ids, list, sizeof list);
  const char *name = buf->name ? buf->name : "";
  if (reader == AMK_NO_INDEX) {
    amk_validator_report(v, AMK_SEVERITY_ERROR, buf->loc,
                         "IO_OUTPUT accumulator '%s'(#%" PRId32 "): %s [%" PRId64 ", %" PRId64
                         ") of %" PRId64 " are added by no %s tile (writer tasks %s), the "
                         "output is INCOMPLETE",
                         name, buf->id, info->columns, gap.col_lo, gap.col_hi, inter, pname,
                         list);
    return;
  }
  const AmkTask *t = &m->tasks[reader];
  amk_validator_report(v, AMK_SEVERITY_ERROR, t->loc,
                       "task %" PRId32 " (%s) reads accumulator #%" PRId32 " ('%s') but "
                       "%s [%" PRId64 ", %" PRId64 ") of %" PRId64 " are added by no %s tile "
                       "(writer tasks %s), its %s is INCOMPLETE",
                       t->id, amk_validator_label(t), buf->id, name, info->columns, gap.col_lo,
                       gap.col_hi, inter, pname, list, info->projection);
}

/* The tokens a step feeds: the IO_INPUT token_id's elements (a prefill
 * program's rows), else 1. */
static int64_t step_token_rows(const AmkValidator *v) {
  for (uint32_t b = 0; b < v->m->n_buffers; b++) {
    const AmkBuffer *buf = &v->m->buffers[b];
    if (buf->kind == AMK_KIND_IO_INPUT && buf->name && strcmp(buf->name, "token_id") == 0 &&
        v->shapes[b].ok && v->shapes[b].numel >= 1)
      return v->shapes[b].numel;
  }
  return 1;
}

/* The KV heads [*g_lo, *g_hi) an attention reads, from its query heads
 * n_off/N_tile (whole GQA groups); false when it reads them all. */
static bool kv_read_heads(const AmkValidator *v, uint32_t t, int64_t *g_lo, int64_t *g_hi,
                          int64_t *head_dim) {
  const AmkTask *task = &v->m->tasks[t];
  AmkParamTable pt;
  int64_t off, n, n_heads, n_kv;
  if (task->op != AMK_OP_ATTENTION_TILE)
    return false;
  amk_validator_params(v, t, &pt);
  if (!amk_validator_int(pt.v[AMK_PARAM_n_off], &off) ||
      !amk_validator_int(pt.v[AMK_PARAM_N_tile], &n) ||
      !amk_validator_int(pt.v[AMK_PARAM_n_heads], &n_heads) ||
      !amk_validator_int(pt.v[AMK_PARAM_n_kv_heads], &n_kv) ||
      !amk_validator_int(pt.v[AMK_PARAM_head_dim], head_dim) || n_kv < 1 ||
      n_heads < n_kv || n_heads % n_kv || n_heads > INT32_MAX || *head_dim < 1 ||
      *head_dim > INT32_MAX || off < 0 || n < 1 || off + n > n_heads)
    return false;
  int64_t group = n_heads / n_kv;
  if (off % group || n % group)
    return false; /* reported by the bounds checks */
  *g_lo = off / group;
  *g_hi = (off + n) / group;
  return true;
}

/* The first element of cache rows (positions) [lo, hi) that no footprint
 * covers, within KV heads [g_lo, g_hi) when `heads`: the columns
 * [g_lo, g_hi) * head_dim of a [max_seq, n_kv * head_dim] cache, the view
 * rows of those heads of a [max_seq, n_kv, head_dim] one. */
static CoverageGap kv_gap(const Shape *s, size_t n, int64_t lo, int64_t hi, bool heads,
                          int64_t g_lo, int64_t g_hi, int64_t head_dim, CoverageScratch *cs) {
  int64_t per = rows_per_position(s), width = last_dim(s);
  if (heads && per == 1 && g_hi * head_dim <= width) {
    int64_t c_lo = g_lo * head_dim, c_hi = g_hi * head_dim;
    for (size_t i = 0; i < n; i++) {
      Footprint f = cs->fp[i];
      f.col_lo = clamp_i64(f.col_lo, c_lo, c_hi) - c_lo;
      f.col_hi = clamp_i64(f.col_hi, c_lo, c_hi) - c_lo;
      cs->clip[i] = f;
    }
    CoverageGap gap =
        find_coverage_gap(cs->clip, n, lo, hi, c_hi - c_lo, cs->cols, cs->edges);
    gap.col_lo += c_lo;
    gap.col_hi += c_lo;
    return gap;
  }
  if (heads && width == head_dim && g_hi <= per) {
    /* Rows covered whole (every KV head) cover these heads' rows too: one
     * sweep instead of one per position where, as usually, they are. */
    if (!find_coverage_gap(cs->fp, n, lo * per, hi * per, width, cs->cols, cs->edges).found)
      return (CoverageGap){false, 0, 0, 0};
    for (int64_t p = lo; p < hi; p++) {
      CoverageGap gap = find_coverage_gap(cs->fp, n, p * per + g_lo, p * per + g_hi, width,
                                          cs->cols, cs->edges);
      if (gap.found)
        return gap;
    }
    return (CoverageGap){false, 0, 0, 0};
  }
  return find_coverage_gap(cs->fp, n, lo * per, hi * per, width, cs->cols, cs->edges);
}

/* The step's rows of a KV cache are bands of positions: meta.pos up to
 * the step's last token (pos + token rows) and every band a writer
 * appends; rows before meta.pos hold earlier steps. Every step row a
 * reader's window reaches must be written. cs->rows holds the bands as
 * [lo, hi) pairs. */
static int compare_bands(const void *pa, const void *pb) {
  const int64_t *a = pa, *b = pb;
  return a[0] != b[0] ? amk_compare_i64(a[0], b[0]) : amk_compare_i64(a[1], b[1]);
}

/* Sorts n [lo, hi) pairs and merges those that overlap or touch: a band
 * is covered exactly when every band merged into it is, and a prefill
 * program's row blocks (one band each) become one band, so the sweep is
 * not repeated per block. Returns the bands left. */
static size_t merge_bands(int64_t *rows, size_t n) {
  if (n < 2)
    return n;
  qsort(rows, n, 2 * sizeof *rows, compare_bands);
  size_t k = 0;
  for (size_t i = 1; i < n; i++) {
    if (rows[2 * i] <= rows[2 * k + 1]) {
      if (rows[2 * i + 1] > rows[2 * k + 1])
        rows[2 * k + 1] = rows[2 * i + 1];
    } else {
      k++;
      rows[2 * k] = rows[2 * i];
      rows[2 * k + 1] = rows[2 * i + 1];
    }
  }
  return k + 1;
}

static void check_kv_coverage(AmkValidator *v, uint32_t b, CoverageScratch *cs) {
  const AmkModule *m = v->m;
  const Shape *s = &v->shapes[b];
  int64_t per = rows_per_position(s), width = last_dim(s);
  if (per == 0 || cs->first_reader[b] == AMK_NO_INDEX)
    return;
  size_t n_bands = 0;
  int64_t pos;
  if (meta_position(v, &pos) && pos < s->dim[0]) {
    /* A prefill program (several token rows): every row from pos on is
     * this step's or a later one's, never an earlier step's. */
    int64_t rows = step_token_rows(v);
    int64_t end = rows > 1 ? s->dim[0] : pos + rows;
    cs->rows[2 * n_bands] = pos;
    cs->rows[2 * n_bands++ + 1] = end < s->dim[0] ? end : s->dim[0];
  }
  size_t n = gather_footprints(v, b, AMK_NO_INDEX, cs);
  for (size_t i = 0; i < n; i++) {
    if (cs->fp[i].row_lo == 0 && cs->fp[i].row_hi == s->numel / width &&
        cs->fp[i].col_lo == 0 && cs->fp[i].col_hi == width)
      return; /* a writer of the whole cache */
  }
  /* The step's own rows [pos, pos + token rows), before merging. */
  int64_t step_lo = -1, step_hi = -1;
  if (n_bands > 0) {
    int64_t rows = step_token_rows(v);
    step_lo = cs->rows[0];
    step_hi = step_lo + rows < s->dim[0] ? step_lo + rows : s->dim[0];
  }
  for (size_t i = 0; i < n; i++) {
    if (cs->fp[i].row_hi > cs->fp[i].row_lo && cs->fp[i].row_lo % per == 0 &&
        cs->fp[i].row_hi % per == 0) {
      cs->rows[2 * n_bands] = cs->fp[i].row_lo / per;
      cs->rows[2 * n_bands++ + 1] = cs->fp[i].row_hi / per;
    }
  }
  n_bands = merge_bands(cs->rows, n_bands);
  bool any_gap = false;
  for (size_t k = 0; k < n_bands && !any_gap; k++)
    any_gap = find_coverage_gap(cs->fp, n, cs->rows[2 * k] * per, cs->rows[2 * k + 1] * per,
                                width, cs->cols, cs->edges)
                  .found;
  if (!any_gap)
    return;
  /* The first reader (in list order) whose window reaches an unwritten
   * step row. */
  for (uint32_t t = cs->first_reader[b]; t < m->n_tasks; t++) {
    const AmkTask *task = &m->tasks[t];
    bool writes = false;
    for (uint32_t o = 0; o < task->n_outputs; o++)
      writes = writes || amk_id_index_get(&v->bufs, task->outputs[o]) == b;
    if (writes)
      continue; /* the appender: it reads the earlier rows */
    for (uint32_t i = 0; i < task->n_inputs; i++) {
      if (amk_id_index_get(&v->bufs, task->inputs[i]) != b)
        continue;
      int64_t lo, hi, g_lo = 0, g_hi = 0, head_dim = 0;
      kv_read_window(v, t, i, s, &lo, &hi);
      /* An attention over some query heads reads only their KV heads. */
      bool heads = (i == 1 || i == 2) && kv_read_heads(v, t, &g_lo, &g_hi, &head_dim);
      for (size_t k = 0; k < n_bands; k++) {
        int64_t band_lo = cs->rows[2 * k] > lo ? cs->rows[2 * k] : lo;
        int64_t band_hi = cs->rows[2 * k + 1] < hi ? cs->rows[2 * k + 1] : hi;
        if (band_lo >= band_hi)
          continue;
        CoverageGap gap = kv_gap(s, n, band_lo, band_hi, heads, g_lo, g_hi, head_dim, cs);
        if (!gap.found)
          continue;
        char why[96];
        snprintf(why, sizeof why, " (row %" PRId64 " of this step)", gap.row / per);
        report_gap(v, b, t, &gap, why, AMK_NO_INDEX);
        return;
      }
    }
  }
  /* No reader of this step reaches a gap, but the step's own rows must be
   * written in full (an attention taking row pos from qkv reads none of
   * them): the steps after read them as history. */
  if (step_lo >= 0) {
    CoverageGap gap =
        find_coverage_gap(cs->fp, n, step_lo * per, step_hi * per, width, cs->cols, cs->edges);
    if (gap.found)
      report_history_gap(v, b, cs->first_reader[b], &gap, gap.row / per);
  }
}

static void check_coverage(AmkValidator *v) {
  const AmkModule *m = v->m;
  uint32_t nb = m->n_buffers;
  CoverageScratch cs;
  size_t n_writes = v->wr_off[nb], n_reads = 0;
  for (uint32_t t = 0; t < m->n_tasks; t++)
    n_reads += m->tasks[t].n_inputs;
  cs.fp = amk_scratch_alloc(v->scratch, sizeof *cs.fp * (n_writes + 1));
  cs.cols = amk_scratch_alloc(v->scratch, sizeof *cs.cols * (n_writes + 1));
  cs.clip = amk_scratch_alloc(v->scratch, sizeof *cs.clip * (n_writes + 1));
  cs.edges = amk_scratch_alloc(v->scratch, sizeof *cs.edges * (2 * n_writes + 2));
  cs.rows = amk_scratch_alloc(v->scratch, sizeof *cs.rows * 2 * (n_writes + 1));
  cs.first_reader = amk_scratch_alloc(v->scratch, sizeof(uint32_t) * (nb + 1));
  cs.self_off = amk_scratch_calloc(v->scratch, (size_t)nb + 2, sizeof(uint32_t));
  cs.self_readers = amk_scratch_alloc(v->scratch, sizeof(uint32_t) * (n_reads + 1));
  for (uint32_t b = 0; b < nb; b++)
    cs.first_reader[b] = AMK_NO_INDEX;
  /* Readers that also write the buffer, grouped by buffer (counted, then
   * placed; a task listing the buffer twice counts once). */
  for (int pass = 0; pass < 2; pass++) {
    for (uint32_t t = 0; t < m->n_tasks; t++) {
      const AmkTask *task = &m->tasks[t];
      for (uint32_t i = 0; i < task->n_inputs; i++) {
        uint32_t b = amk_id_index_get(&v->bufs, task->inputs[i]);
        if (b == AMK_NO_INDEX)
          continue;
        if (cs.first_reader[b] == AMK_NO_INDEX)
          cs.first_reader[b] = t;
        bool earlier = false, writes = false;
        for (uint32_t j = 0; j < i; j++)
          earlier = earlier || task->inputs[j] == task->inputs[i];
        for (uint32_t o = 0; o < task->n_outputs; o++)
          writes = writes || task->outputs[o] == task->inputs[i];
        if (earlier || !writes)
          continue;
        if (pass == 0)
          cs.self_off[b + 1]++;
        else
          cs.self_readers[cs.self_off[b + 1]++] = t;
      }
    }
    if (pass == 0) {
      for (uint32_t b = 0; b < nb; b++)
        cs.self_off[b + 1] += cs.self_off[b];
      /* Shift so that self_off[b + 1] is the fill cursor of buffer b. */
      memmove(cs.self_off + 1, cs.self_off, sizeof(uint32_t) * nb);
    }
  }
  for (uint32_t b = 0; b < nb && !v->stopped; b++) {
    const AmkBuffer *buf = &m->buffers[b];
    if (!v->shapes[b].ok || amk_id_index_get(&v->bufs, buf->id) != b ||
        (unsigned)buf->kind >= AMK_KIND_COUNT || amk_kind_is_read_only(buf->kind))
      continue;
    /* Every writer an accumulating tile (mlp, attention_o); one pattern is
     * check_accumulator_coverage's to ask. */
    bool accumulator = v->wr_off[b] != v->wr_off[b + 1];
    for (uint32_t j = v->wr_off[b]; j < v->wr_off[b + 1] && accumulator; j++)
      accumulator = amk_validator_is_accumulating_tile(v, v->wr[j]);
    if (buf->kind == AMK_KIND_KV_CACHE) /* the step's rows even unwritten */
      check_kv_coverage(v, b, &cs);
    else if (accumulator)
      check_accumulator_coverage(v, b, &cs);
    else if (v->wr_off[b] != v->wr_off[b + 1]) /* else reported above */
      check_activation_coverage(v, b, &cs);
  }
}

void amk_validate_check_bounds(AmkValidator *v) {
  const AmkModule *m = v->m;
  char repr[96];
  if (m->pages) {
    const AmkPageAllocation *pa = m->pages;
    AmkIdIndex pages;
    amk_id_index_build_in(&pages, pa->pages, sizeof *pa->pages, pa->n_pages,
                          v->scratch);
    for (uint32_t i = 0; i < pa->n_bindings && !v->stopped; i++) {
      const AmkPageBinding *pb = &pa->bindings[i];
      if (amk_id_index_get(&v->bufs, pb->buffer) == AMK_NO_INDEX)
        amk_validator_report(v, AMK_SEVERITY_ERROR, no_loc,
                             "pages.buffer_to_page binds missing buffer %" PRId32
                             " to page %" PRId32,
                             pb->buffer, pb->page);
      if (amk_id_index_get(&pages, pb->page) == AMK_NO_INDEX)
        amk_validator_report(v, AMK_SEVERITY_ERROR, no_loc,
                             "pages.buffer_to_page binds buffer %" PRId32
                             " to missing page %" PRId32,
                             pb->buffer, pb->page);
    }
    amk_id_index_free(&pages);
  }
  v->shapes = amk_scratch_alloc(v->scratch, sizeof *v->shapes * (m->n_buffers + 1));
  for (uint32_t b = 0; b < m->n_buffers; b++)
    v->shapes[b] = compute_shape(v, b);
  for (uint32_t b = 0; b < m->n_buffers && !v->stopped; b++) {
    const AmkBuffer *buf = &m->buffers[b];
    if (v->shapes[b].ok)
      continue; /* every dim a positive INT */
    for (uint32_t i = 0; i < buf->rank; i++) {
      int64_t d;
      if (amk_validator_int(&buf->shape[i], &d) && d >= 1)
        continue;
      amk_value_repr(&buf->shape[i], repr, sizeof repr);
      amk_validator_report(v, AMK_SEVERITY_ERROR, buf->loc,
                           "buffer #%" PRId32 " ('%s') shape[%u] is %s, not a "
                           "positive int",
                           buf->id, buf->name ? buf->name : "", i, repr);
    }
  }
  /* A task writing a WEIGHT, CONST or IO_INPUT buffer: the reference exempts
   * these kinds from provenance and WAW checks, so such writes would go
   * unchecked (unordered overwrites, readers racing the write). */
  for (uint32_t t = 0; t < m->n_tasks && !v->stopped; t++) {
    const AmkTask *task = &m->tasks[t];
    for (uint32_t i = 0; i < task->n_outputs; i++) {
      uint32_t b = amk_id_index_get(&v->bufs, task->outputs[i]);
      if (b == AMK_NO_INDEX || (unsigned)m->buffers[b].kind >= AMK_KIND_COUNT ||
          !amk_kind_is_read_only(m->buffers[b].kind))
        continue;
      amk_validator_report(v, AMK_SEVERITY_ERROR, task->loc,
                           "task %" PRId32 " (%s) writes read-only %s buffer #%" PRId32
                           " ('%s')",
                           task->id, amk_validator_label(task),
                           amk_kind_json_name(m->buffers[b].kind),
                           m->buffers[b].id, m->buffers[b].name ? m->buffers[b].name : "");
    }
  }
  if (v->opts.semantic_bounds)
    for (uint32_t t = 0; t < m->n_tasks && !v->stopped; t++)
      if ((unsigned)m->tasks[t].op < AMK_OP_COUNT)
        check_task_bounds(v, t);
  if (v->g.acyclic && !v->stopped)
    check_coverage(v);
}
