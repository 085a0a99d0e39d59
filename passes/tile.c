/* tile: split op-level work so every SM has some (docs/Fusion.md).
 *
 * GEMV tasks (plain or fused patterns that reduce over K) are split into
 * column tiles of N_tile rows: --gemv-n-tile=N, else
 * config.tiling.gemv.N_tile, else chosen per projection for the target:
 * about one tile per SM, a multiple of 16 rows, never fewer than 16. GEMVs
 * that read the same input after the same waits (q, k and v) run at once,
 * so they share the SMs: their tiles are sized together, about one per SM
 * over all of them, a multiple of 8 rows (on an H100 the 1B shape's q, k
 * and v made 192 tiles of 16 rows, two rounds on 132 SMs; sized together,
 * 130 tiles of 24). Gate and up, whose outputs meet in one silu_mul, count
 * once: fuse stacks them, a tile of each on one SM.
 * Tiles keep the task's inputs, output, waits and out_counter, so a consumer
 * that waited for the whole projection now waits for every tile (the
 * all-join rule: thresholds that equalled the old producer count become the
 * new one).
 *
 * ATTENTION_TILE tasks become one GEMV_TILE (pattern attention) per KV head,
 * the GQA query heads of that KV head together; n_off and N_tile count query
 * heads. With kv_partitions = P >= 2 (--kv-partitions or
 * config.tiling.attention.kv_partitions) each partition's tiles write an
 * unnormalised partial [1, n_heads * (head_dim + 2)] (flags bit 1) and an
 * ATTENTION_COMBINE merges the partitions into the original output. Left
 * to itself, tile picks P for long caches only, at most 6, or 5 when a
 * quantized GEMV reads the attention's output (fuse then folds the combine
 * into the tiles that read its output), and 1 when fuse's split_o will run
 * (it takes only unpartitioned attention into the o projection).
 *
 * A prefill chunk's multi-row ATTENTION_TILE stays one op, cut into tasks
 * of one KV head x a block of query rows (n_off/N_tile, m_off/M_tile;
 * split_prefill_attention, attention_block_rows).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/builder.h"
#include "fusion_groups.h"
#include "schedule_rewrite.h"

static const AmkLoc no_loc = {0, 0};

enum {
  MIN_TILE_ROWS = 16,
  TILE_ROW_MULTIPLE = 16,
  GROUP_ROW_MULTIPLE = 8,
  MAX_KV_PARTITIONS = 8,
  /* The automatic choice stops at 6 so that fuse can fold the combine into
   * the o_proj tiles (combine_residual): a tile's 8 inputs hold W, r and at
   * most 6 partials. An explicit --kv-partitions may go up to 8; the
   * combine then stays a task. */
  AUTO_KV_PARTITIONS = AMK_MAX_INPUTS - 2,
  LONG_CACHE_ROWS = 1024,
  /* A prefill GEMM's tiles: rows and columns of the tensor cores' sub-tile
   * (amk_gemm_mma's AMK_MMA_BM x BN), so no tile computes padding. */
  GEMM_ROW_BLOCK = 128,
  GEMM_COL_BLOCK = 128,
  /* An elementwise op over several rows is split into column windows of a
   * multiple of this many columns (16 bytes of bf16). */
  ELTWISE_COL_MULTIPLE = 8
};
enum { ATTENTION_PARTIAL_FLAG = 2 };

typedef struct {
  int64_t n_tile;        /* 0: chosen per projection for the target */
  int64_t num_sms;
  int64_t kv_partitions; /* 1: no split-KV */
  bool balanced;         /* balanced_pieces below (AMK_TILE_BALANCED=0: off) */
  bool split_o;          /* fuse's split_o will run: no automatic split-KV */
  int64_t mlp_cols;      /* gate and up tiles' columns (AMK_TILE_MLP_COLS); 0: as others */
} TilePlan;

typedef struct {
  int64_t gemv_split, gemv_tiles, attention_split, attention_tiles, eltwise_split, eltwise_tiles;
  int64_t row_split, row_tiles; /* per-row ops of a prefill program */
} TileCounts;

/* `config.tiling.<group>.<key>`, or NULL. */
static const AmkValue *tiling_value(const AmkModule *m, const char *group,
                                    const char *key) {
  if (!m->config || m->config->tiling.kind != AMK_VALUE_OBJECT)
    return NULL;
  const AmkValue *g = amk_object_get(&m->config->tiling, group);
  return g && g->kind == AMK_VALUE_OBJECT ? amk_object_get(g, key) : NULL;
}

/* An integer setting: the command line wins over the config. */
static bool read_setting(const AmkModule *m, AmkPassContext *ctx,
                         const char *option, const char *group, const char *key,
                         int64_t min, int64_t max, int64_t *out) {
  if (amk_pass_option_int(ctx, option, out))
    return true; /* range-checked by the option table, as [min, max] here */
  const AmkValue *v = tiling_value(m, group, key);
  if (!v)
    return true;
  int64_t x;
  if (!amk_value_as_int(v, &x) || x < min || x > max) {
    char repr[64];
    amk_value_repr(v, repr, sizeof repr);
    amk_error(ctx->diag, no_loc,
              "tile: config.tiling.%s.%s must be an integer in [%lld, %lld], "
              "not %s",
              group, key, (long long)min, (long long)max, repr);
    return false;
  }
  *out = x;
  return true;
}

/* About one tile per SM for n rows, rounded up to a multiple of `multiple`
 * rows. */
static int64_t auto_tile_rows(int64_t n, int64_t num_sms, int64_t multiple) {
  int64_t rows = (n + num_sms - 1) / num_sms;
  rows = (rows + multiple - 1) / multiple * multiple;
  return rows < MIN_TILE_ROWS ? MIN_TILE_ROWS : rows;
}

/* With plan->balanced (the default), a projection of n rows whose uniform
 * tiles of `rows` (auto_tile_rows) leave SMs without a tile is cut instead
 * into one tile per SM of floor or ceil(n / num_sms) rows, when that makes
 * the largest tile smaller and every tile at least MIN_TILE_ROWS (the 1B's
 * MLP: 132 tiles of 62 or 63 intermediate columns, not 128 of 64: the
 * phase lasts as long as its largest tile). Returned as -num_sms, the
 * piece count, for split_gemv; else `rows`. Measured on an H100 (bf16,
 * docs/Performance.md, twentieth session): SmolLM2 -1.3% (its lm_head),
 * the 8B -0.2% and its int8 step -1.6%, the 1B -0.1 to -0.2%. */
static int64_t balanced_pieces(const TilePlan *plan, int64_t n, int64_t rows) {
  if (!plan->balanced || plan->num_sms <= 0 || rows <= 0)
    return rows;
  int64_t pieces = (n + rows - 1) / rows, largest = (n + plan->num_sms - 1) / plan->num_sms;
  if (pieces >= plan->num_sms || n / plan->num_sms < MIN_TILE_ROWS || largest >= rows)
    return rows;
  return -plan->num_sms;
}

/* A copy of `src` (fresh arrays, so later in-place edits stay local),
 * placed after list position `anchor`. */
static AmkTask *clone_task(AmkModule *m, AmkRwEdit *e, const AmkTask *src,
                           uint32_t anchor) {
  AmkTask *t = amk_rw_add_task(m, e, anchor);
  int32_t id = t->id;
  *t = *src;
  t->id = id;
  t->has_sm = false;
  t->sm = 0;
  t->inputs = amk_arena_memdup(&m->arena, src->inputs,
                               (src->n_inputs ? src->n_inputs : 1) * sizeof *src->inputs);
  t->outputs = amk_arena_memdup(&m->arena, src->outputs,
                                (src->n_outputs ? src->n_outputs : 1) * sizeof *src->outputs);
  t->waits = amk_arena_memdup(&m->arena, src->waits,
                              (src->n_waits ? src->n_waits : 1) * sizeof *src->waits);
  amk_rw_copy_params(m, t, src);
  return t;
}

static const char *indexed_label(AmkModule *m, const char *base, const char *fmt,
                                 int64_t a, int64_t b) {
  char suffix[64], label[320];
  snprintf(suffix, sizeof suffix, fmt, (long long)a, (long long)b);
  snprintf(label, sizeof label, "%s%s", base && *base ? base : "task", suffix);
  return amk_arena_strdup(&m->arena, label);
}

/* Share `total` out over [start, end) of `width` so the parts sum to it. */
static int64_t share(int64_t total, int64_t start, int64_t end, int64_t width) {
  double per = (double)total / (double)width;
  return (int64_t)(per * (double)end) - (int64_t)(per * (double)start);
}

/* Patterns whose tiles reduce over K into columns [n_off, n_off + N_tile):
 * any column range is a tile of the same kind. */
static bool is_reducing_pattern(int64_t pattern) {
  return (pattern >= AMK_PATTERN_PLAIN && pattern <= AMK_PATTERN_SILU_RESIDUAL) ||
         pattern == AMK_PATTERN_COMBINE_RESIDUAL;
}

/* GEMV tiles, and a prefill program's GEMM tiles (split over N like a
 * GEMV, every row in each tile). */
static bool is_splittable_gemv(const AmkTask *t) {
  return (t->op == AMK_OP_GEMV_TILE || t->op == AMK_OP_GEMM_TILE) && t->n_outputs == 1 &&
         t->n_inputs >= 1 && is_reducing_pattern(amk_rw_pattern(t));
}

/* A GEMV and its list position, sorted by what decides when it can run. */
typedef struct {
  const AmkTask *task;
  uint32_t pos;
} PhaseEntry;

/* Orders GEMVs by their input, then their waits; 0: they run at once. */
static int phase_order(const AmkTask *a, const AmkTask *b) {
  if (a->inputs[0] != b->inputs[0])
    return a->inputs[0] < b->inputs[0] ? -1 : 1;
  if (a->n_waits != b->n_waits)
    return a->n_waits < b->n_waits ? -1 : 1;
  for (uint32_t w = 0; w < a->n_waits; w++) {
    if (a->waits[w].counter != b->waits[w].counter)
      return a->waits[w].counter < b->waits[w].counter ? -1 : 1;
    int64_t ta = 0, tb = 0;
    amk_value_as_int(&a->waits[w].threshold, &ta);
    amk_value_as_int(&b->waits[w].threshold, &tb);
    if (ta != tb)
      return ta < tb ? -1 : 1;
  }
  return 0;
}

static int compare_phase_entries(const void *pa, const void *pb) {
  const PhaseEntry *a = pa, *b = pb;
  int c = phase_order(a->task, b->task);
  return c ? c : (a->pos < b->pos ? -1 : a->pos > b->pos);
}

static int compare_ids(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return x < y ? -1 : x > y;
}

/* A prefill program's GEMM over more than GEMM_ROW_BLOCK rows: its number
 * of row blocks (tile splits it over rows too); 0 for anything else. */
static int64_t gemm_row_blocks(const AmkTask *t) {
  int64_t m_tile;
  if (t->op != AMK_OP_GEMM_TILE || !amk_task_param_int(t, "M_tile", &m_tile) ||
      m_tile <= GEMM_ROW_BLOCK || m_tile > INT32_MAX)
    return 0;
  return (m_tile + GEMM_ROW_BLOCK - 1) / GEMM_ROW_BLOCK;
}

/* Columns of a multi-row GEMM's tiles: the tensor cores' sub-tile width
 * (GEMM_COL_BLOCK), or half of it when the phase (its GEMMs' `total`
 * columns in `m_blocks` row blocks) would not give every SM a tile:
 * codegen then narrows the sub-tile, so twice the tiles take about the
 * same time each (docs/Fusion.md). */
static int64_t gemm_tile_cols(int64_t m_blocks, int64_t total, int64_t num_sms) {
  int64_t wide = m_blocks * ((total + GEMM_COL_BLOCK - 1) / GEMM_COL_BLOCK);
  return wide >= num_sms ? GEMM_COL_BLOCK : GEMM_COL_BLOCK / 2;
}

/* The rows of each GEMV's tiles, by list position (0: not a GEMV to split;
 * -p: p tiles of balanced sizes, balanced_pieces). */
static int64_t *plan_tile_rows(const AmkModule *m, const TilePlan *plan) {
  /* The second inputs of silu_mul tasks (up): their GEMV is stacked with
   * the first's (gate). */
  int32_t *stacked = amk_xcalloc(m->n_tasks ? m->n_tasks : 1, sizeof *stacked);
  int32_t *gates = amk_xcalloc(m->n_tasks ? m->n_tasks : 1, sizeof *gates);
  size_t n_stacked = 0;
  for (uint32_t pos = 0; pos < m->n_tasks; pos++)
    if (m->tasks[pos].op == AMK_OP_SILU_MUL && m->tasks[pos].n_inputs == 2) {
      gates[n_stacked] = m->tasks[pos].inputs[0];
      stacked[n_stacked++] = m->tasks[pos].inputs[1];
    }
  qsort(stacked, n_stacked, sizeof *stacked, compare_ids);
  qsort(gates, n_stacked, sizeof *gates, compare_ids);
  int64_t *rows = amk_xcalloc(m->n_tasks ? m->n_tasks : 1, sizeof *rows);
  PhaseEntry *order = amk_xcalloc(m->n_tasks ? m->n_tasks : 1, sizeof *order);
  uint32_t n = 0;
  for (uint32_t pos = 0; pos < m->n_tasks; pos++) {
    int64_t n_tile;
    if (is_splittable_gemv(&m->tasks[pos]) &&
        amk_task_param_int(&m->tasks[pos], "N_tile", &n_tile) && n_tile > 0)
      order[n++] = (PhaseEntry){&m->tasks[pos], pos};
  }
  qsort(order, n, sizeof *order, compare_phase_entries);
  for (uint32_t i = 0; i < n;) {
    uint32_t j = i + 1;
    while (j < n && phase_order(order[i].task, order[j].task) == 0)
      j++;
    int64_t total = 0, n_tile = 0, sharing = 0;
    for (uint32_t k = i; k < j; k++)
      if (amk_task_param_int(order[k].task, "N_tile", &n_tile) &&
          !bsearch(&order[k].task->outputs[0], stacked, n_stacked, sizeof *stacked,
                   compare_ids)) {
        total += n_tile;
        sharing++;
      }
    for (uint32_t k = i; k < j; k++) {
      amk_task_param_int(order[k].task, "N_tile", &n_tile);
      int64_t m_blocks = gemm_row_blocks(order[k].task);
      rows[order[k].pos] =
          plan->n_tile ? plan->n_tile
          : m_blocks > 0 ? gemm_tile_cols(m_blocks, total, plan->num_sms)
          : sharing > 1  ? auto_tile_rows(total, plan->num_sms, GROUP_ROW_MULTIPLE)
                         : balanced_pieces(plan, n_tile,
                                           auto_tile_rows(n_tile, plan->num_sms,
                                                          TILE_ROW_MULTIPLE));
      int32_t out = order[k].task->outputs[0];
      if (plan->mlp_cols > 0 && !plan->n_tile && m_blocks == 0 &&
          (bsearch(&out, stacked, n_stacked, sizeof *stacked, compare_ids) ||
           bsearch(&out, gates, n_stacked, sizeof *gates, compare_ids)))
        rows[order[k].pos] = plan->mlp_cols;
    }
    i = j;
  }
  free(order);
  free(gates);
  free(stacked);
  return rows;
}


/* Whether every MLP once tiled with these rows has its up projection (the
 * second input of its silu_mul) cut into tiles of at least min_cols
 * columns on average, and at least one MLP: with quantized false, also
 * unquantized (fuse_split_down's rule, amk_fusion_split_down_min_cols: the
 * mlp pattern has no quantized form); with true, of any dtype (split_o's
 * over an MLP split_down leaves, amk_fusion_split_o_min_cols). */
static bool mlps_tiled_wide(const AmkModule *m, const int64_t *tile_rows, int64_t min_cols,
                            bool quantized) {
  int mlps = 0;
  for (uint32_t s = 0; s < m->n_tasks; s++) {
    const AmkTask *silu = &m->tasks[s];
    if (silu->op != AMK_OP_SILU_MUL || silu->n_inputs != 2)
      continue;
    bool taken = false;
    for (uint32_t pos = 0; pos < m->n_tasks && !taken; pos++) {
      const AmkTask *up = &m->tasks[pos];
      int64_t n;
      int64_t rows = tile_rows[pos];
      if (!is_splittable_gemv(up) || up->n_outputs != 1 || up->outputs[0] != silu->inputs[1] ||
          (!quantized && amk_rw_quantized(up)) || !amk_task_param_int(up, "N_tile", &n) ||
          n <= 0 || rows == 0)
        continue;
      /* rows < 0: that many balanced pieces (balanced_pieces). */
      int64_t tiles = rows < 0 ? -rows : (n + rows - 1) / rows;
      taken = n >= min_cols * tiles;
    }
    if (!taken)
      return false;
    mlps++;
  }
  return mlps > 0;
}

/* Splits GEMV task at list position `pos` (copied to `src`). */
static bool split_gemv(AmkModule *m, AmkRwEdit *e, AmkPassContext *ctx,
                       uint32_t pos, const AmkTask *src, int64_t rows,
                       TileCounts *counts) {
  int64_t n_tile, n_off;
  if (!amk_task_param_int(src, "N_tile", &n_tile) ||
      !amk_task_param_int(src, "n_off", &n_off))
    return true; /* malformed; the verifier and validator say so */
  if (n_tile <= 0) {
    amk_error(ctx->diag, src->loc,
              "tile: task %d ('%s') has N_tile=%lld; a GEMV tile needs N_tile >= 1",
              src->id, src->label ? src->label : "", (long long)n_tile);
    return false;
  }
  int64_t m_blocks = gemm_row_blocks(src), m_tile = 0, m_off = 0;
  if (m_blocks > 0) {
    amk_task_param_int(src, "M_tile", &m_tile);
    amk_task_param_int(src, "m_off", &m_off);
  }
  int64_t balanced = rows < 0 && m_blocks == 0 && -rows < n_tile ? -rows : 0;
  if (!balanced && (rows <= 0 || (rows >= n_tile && m_blocks == 0)))
    return true;
  int64_t n_pieces = balanced ? balanced : (n_tile + rows - 1) / rows;
  int64_t m_pieces = m_blocks > 0 ? m_blocks : 1;
  /* Columns vary fastest, so that the tiles of one row block, which read
   * the same input rows, run side by side. */
  for (int64_t r = 0; r < m_pieces; r++) {
    int64_t m_start = r * GEMM_ROW_BLOCK;
    int64_t m_end = m_blocks > 0 && m_start + GEMM_ROW_BLOCK < m_tile ? m_start + GEMM_ROW_BLOCK
                                                                      : m_tile;
    for (int64_t i = 0; i < n_pieces; i++) {
      int64_t start = balanced ? i * n_tile / n_pieces : i * rows;
      int64_t end = balanced                 ? (i + 1) * n_tile / n_pieces
                    : start + rows < n_tile ? start + rows
                                            : n_tile;
      AmkTask *t = clone_task(m, e, src, pos);
      amk_task_set_param(m, t, "N_tile", amk_value_int(end - start));
      amk_task_set_param(m, t, "n_off", amk_value_int(n_off + start));
      int64_t piece = r * n_tile + start, piece_end = r * n_tile + end;
      if (m_blocks > 0) {
        amk_task_set_param(m, t, "M_tile", amk_value_int(m_end - m_start));
        amk_task_set_param(m, t, "m_off", amk_value_int(m_off + m_start));
        t->label = indexed_label(m, src->label, "[m%lld.t%lld]", r, i);
      } else {
        t->label = indexed_label(m, src->label, "[t%lld]", i, 0);
      }
      t->est_bytes = share(src->est_bytes, piece, piece_end, m_pieces * n_tile);
      t->est_flops = share(src->est_flops, piece, piece_end, m_pieces * n_tile);
    }
  }
  amk_rw_kill_task(e, pos);
  counts->gemv_split++;
  counts->gemv_tiles += n_pieces * m_pieces;
  return true;
}

static int64_t last_dim(const AmkModule *m, int32_t buffer) {
  const AmkBuffer *b = amk_module_buffer(m, buffer);
  int64_t d = 0;
  if (!b || b->rank == 0 || !amk_value_as_int(&b->shape[b->rank - 1], &d))
    return 0;
  return d;
}

/* An elementwise op over several rows (a prefill program's residual adds
 * and silu_mul) that tile splits into column windows (n_off, N_tile: the
 * op's semantics take them): *cols, about one window per SM, a multiple of
 * ELTWISE_COL_MULTIPLE columns. One row has nothing to share out: a decode
 * program's elementwise ops are fused or tiny. */
static bool eltwise_split_cols(const AmkModule *m, const AmkTask *src, const TilePlan *plan,
                               int64_t *cols) {
  bool columnwise = src->op == AMK_OP_ADD || src->op == AMK_OP_SILU_MUL ||
                    src->op == AMK_OP_MUL || src->op == AMK_OP_GELU;
  if (!columnwise || src->n_outputs != 1 || plan->num_sms <= 0 || amk_task_param(src, "N_tile"))
    return false;
  const AmkBuffer *out = amk_module_buffer(m, src->outputs[0]);
  int64_t width = last_dim(m, src->outputs[0]), numel = 1, d;
  if (!out || width <= 0)
    return false;
  for (uint32_t i = 0; i < out->rank; i++) {
    if (!amk_value_as_int(&out->shape[i], &d) || d <= 0 || d > INT32_MAX)
      return false;
    numel *= d;
  }
  if (numel / width <= 1)
    return false;
  *cols = auto_tile_rows(width, plan->num_sms, ELTWISE_COL_MULTIPLE);
  return *cols < width;
}

static void split_eltwise(AmkModule *m, AmkRwEdit *e, uint32_t pos, const AmkTask *src,
                          int64_t cols, TileCounts *counts) {
  int64_t width = last_dim(m, src->outputs[0]);
  int64_t n_pieces = (width + cols - 1) / cols;
  for (int64_t i = 0; i < n_pieces; i++) {
    int64_t start = i * cols, end = start + cols < width ? start + cols : width;
    AmkTask *t = clone_task(m, e, src, pos);
    amk_task_set_param(m, t, "N_tile", amk_value_int(end - start));
    amk_task_set_param(m, t, "n_off", amk_value_int(start));
    t->est_bytes = share(src->est_bytes, start, end, width);
    t->est_flops = share(src->est_flops, start, end, width);
    t->label = indexed_label(m, src->label, "[c%lld]", i, 0);
  }
  amk_rw_kill_task(e, pos);
  counts->eltwise_split++;
  counts->eltwise_tiles += n_pieces;
}

/* An attention over several query rows (a prefill chunk: q [M, n_heads *
 * head_dim] with M > 1). The per-head GEMV patterns take one row, so such
 * a task stays an ATTENTION_TILE; split_prefill_attention cuts it into
 * sub-rectangles of its own (n_off/N_tile heads, m_off/M_tile rows). */
static bool is_multi_row_attention(const AmkModule *m, const AmkTask *src) {
  const AmkBuffer *q = src->n_inputs ? amk_module_buffer(m, src->inputs[0]) : NULL;
  int64_t n_heads, head_dim, numel = 1, d;
  if (!q || !amk_task_param_int(src, "n_heads", &n_heads) ||
      !amk_task_param_int(src, "head_dim", &head_dim) || n_heads <= 0 || head_dim <= 0)
    return false;
  for (uint32_t i = 0; i < q->rank; i++) {
    if (!amk_value_as_int(&q->shape[i], &d) || d <= 0 || d > INT32_MAX)
      return false;
    numel *= d;
  }
  return numel > n_heads * head_dim;
}

/* The query rows of one task of a split prefill attention over M rows
 * with GQA groups of `group` heads and n_kv KV heads: 128 query vectors
 * (rows x group), which the GPU's tensor-core template (docs/Backend.md)
 * gives its 8 warps 16 each, rounded to a multiple of 16 rows; halved
 * (not below 16) while the n_kv x blocks tasks would leave more than a
 * quarter of the SMs idle. */
static int64_t attention_block_rows(int64_t m_rows, int64_t group, int64_t n_kv,
                                    int64_t num_sms) {
  int64_t rows = (128 / group + 15) / 16 * 16;
  if (rows < 16)
    rows = 16;
  while (rows > 16 && num_sms > 0 && n_kv * ((m_rows + rows - 1) / rows) * 4 < num_sms * 3)
    rows = (rows / 2 + 15) / 16 * 16;
  return rows < m_rows ? rows : m_rows;
}

/* Rows of query `m_rows` as a multi-row attention task's q has them, or 0. */
static int64_t attention_query_rows(const AmkModule *m, const AmkTask *src, int64_t n_heads,
                                    int64_t head_dim) {
  const AmkBuffer *q = src->n_inputs ? amk_module_buffer(m, src->inputs[0]) : NULL;
  int64_t numel = 1, d;
  for (uint32_t i = 0; q && i < q->rank; i++) {
    if (!amk_value_as_int(&q->shape[i], &d) || d <= 0 || d > INT32_MAX)
      return 0;
    numel *= d;
  }
  return q && numel % (n_heads * head_dim) == 0 ? numel / (n_heads * head_dim) : 0;
}

/* The shape split_prefill_attention cuts, or false (left whole). */
static bool prefill_attention_shape(const AmkModule *m, const AmkTask *src, int64_t *n_kv,
                                    int64_t *group, int64_t *m_rows) {
  int64_t head_dim, n_heads, flags = 0;
  if (src->n_inputs != 3 || src->n_outputs != 1 ||
      !amk_task_param_int(src, "head_dim", &head_dim) ||
      !amk_task_param_int(src, "n_heads", &n_heads) ||
      !amk_task_param_int(src, "n_kv_heads", n_kv) || head_dim <= 0 || n_heads <= 0 ||
      *n_kv <= 0 || n_heads % *n_kv || amk_task_param(src, "n_off") ||
      amk_task_param(src, "N_tile") || amk_task_param(src, "m_off") ||
      amk_task_param(src, "M_tile"))
    return false; /* malformed, or already a part */
  amk_task_param_int(src, "flags", &flags);
  if (flags < 0 || (flags & ~1))
    return false; /* only a whole causal (or plain) output */
  *group = n_heads / *n_kv;
  *m_rows = attention_query_rows(m, src, n_heads, head_dim);
  return *m_rows > 1;
}

/* A prefill chunk's attention (M query rows) becomes one ATTENTION_TILE per
 * KV head (its GQA group of query heads: n_off, N_tile) and block of query
 * rows (m_off, M_tile; attention_block_rows). The blocks are contiguous, so
 * with the causal mask later blocks see more keys: each task's est_flops
 * is its share of the causal work (at meta.pos), which sm-assign's load
 * balancing packs onto the SMs longest first. */
static bool split_prefill_attention(AmkModule *m, AmkRwEdit *e, uint32_t pos,
                                    const AmkTask *src, const TilePlan *plan,
                                    TileCounts *counts) {
  int64_t n_kv, group, m_rows, flags = 0, kv_len = 0;
  if (!prefill_attention_shape(m, src, &n_kv, &group, &m_rows))
    return true;
  amk_task_param_int(src, "flags", &flags);
  amk_task_param_int(src, "kv_len", &kv_len);
  int64_t rows = attention_block_rows(m_rows, group, n_kv, plan->num_sms);
  int64_t blocks = (m_rows + rows - 1) / rows;
  /* Keys row r sees: kv_len - (M - 1 - r) when causal (at least 1). */
  double total = 0;
  for (int64_t r = 0; r < m_rows; r++) {
    int64_t keys = (flags & 1) ? kv_len - (m_rows - 1 - r) : kv_len;
    total += (double)(keys > 1 ? keys : 1);
  }
  for (int64_t b = 0; b < blocks; b++) {
    int64_t lo = b * rows, hi = lo + rows < m_rows ? lo + rows : m_rows;
    double work = 0;
    for (int64_t r = lo; r < hi; r++) {
      int64_t keys = (flags & 1) ? kv_len - (m_rows - 1 - r) : kv_len;
      work += (double)(keys > 1 ? keys : 1);
    }
    double share_of = total > 0 ? work / total : 1.0 / (double)blocks;
    for (int64_t g = 0; g < n_kv; g++) {
      AmkTask *t = clone_task(m, e, src, pos);
      amk_task_set_param(m, t, "n_off", amk_value_int(g * group));
      amk_task_set_param(m, t, "N_tile", amk_value_int(group));
      amk_task_set_param(m, t, "m_off", amk_value_int(lo));
      amk_task_set_param(m, t, "M_tile", amk_value_int(hi - lo));
      t->est_bytes = (int64_t)((double)src->est_bytes * share_of / (double)n_kv);
      t->est_flops = (int64_t)((double)src->est_flops * share_of / (double)n_kv);
      t->label = indexed_label(m, src->label, "[kv%lld.r%lld]", g, lo);
    }
  }
  amk_rw_kill_task(e, pos);
  counts->attention_split++;
  counts->attention_tiles += blocks * n_kv;
  return true;
}

/* The params of one per-KV-head attention tile. */
static void attention_tile_params(AmkModule *m, AmkTask *t, const AmkTask *src,
                                  int64_t k, int64_t first_head, int64_t heads,
                                  int64_t low_flags, int64_t kv_start,
                                  int64_t kv_len) {
  static const char *const kept[] = {"head_dim", "n_heads", "n_kv_heads", "scale"};
  t->n_params = 0;
  t->params = NULL;
  amk_task_set_param(m, t, "K", amk_value_int(k));
  amk_task_set_param(m, t, "N_tile", amk_value_int(heads));
  amk_task_set_param(m, t, "n_off", amk_value_int(first_head));
  amk_task_set_param(m, t, "flags",
                     amk_value_int((int64_t)AMK_PATTERN_ATTENTION
                                       << AMK_PATTERN_SHIFT |
                                   low_flags));
  for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
    const AmkValue *v = amk_task_param(src, kept[i]);
    if (v)
      amk_task_set_param(m, t, kept[i], *v);
  }
  amk_task_set_param(m, t, "kv_start", amk_value_int(kv_start));
  amk_task_set_param(m, t, "kv_len", amk_value_int(kv_len));
}

/* How many partitions of the KV window an attention task with `n_kv` KV
 * heads is split into: --kv-partitions, else chosen for the target. */
/* Whether a weight-only quantized GEMV reads `buffer`: a quantized o_proj,
 * whose combine_residual tiles (fuse) hold qW, scales and r besides the
 * partials, so one partial fewer fits their inputs. */
static bool read_by_quantized_gemv(const AmkModule *m, int32_t buffer) {
  for (uint32_t pos = 0; pos < m->n_tasks; pos++) {
    const AmkTask *t = &m->tasks[pos];
    if (t->op == AMK_OP_GEMV_TILE && t->n_inputs >= 1 && t->inputs[0] == buffer &&
        amk_task_param(t, "qdtype"))
      return true;
  }
  return false;
}

static int64_t kv_partitions(const AmkModule *m, const AmkTask *src,
                             const TilePlan *plan, int64_t n_kv) {
  if (plan->kv_partitions)
    return plan->kv_partitions;
  /* With a long cache, attention at a late position is the step's longest
   * task, so split the window over enough partitions that the KV heads x
   * partitions cover about half the SMs (the other half keep streaming
   * weights), at most AUTO_KV_PARTITIONS; short caches stay whole. */
  const AmkBuffer *cache = src->n_inputs > 1 ? amk_module_buffer(m, src->inputs[1]) : NULL;
  int64_t rows = 0;
  if (cache && cache->rank >= 1)
    amk_value_as_int(&cache->shape[0], &rows);
  if (rows < LONG_CACHE_ROWS || plan->num_sms <= 0)
    return 1;
  bool quantized_o = src->n_outputs == 1 && read_by_quantized_gemv(m, src->outputs[0]);
  /* fuse's split_o folds the o projection into per-head attention tiles
   * that each attend over the whole window, and only for unpartitioned
   * attention: with it planned, one partition, except where it cannot
   * apply anyway (a quantized o_proj reads the attention's output: split_o
   * has no quantized form). An explicit --kv-partitions or config value is
   * taken as it is above, and split_o then leaves those layers alone. */
  if (plan->split_o && !quantized_o)
    return 1;
  int64_t most = quantized_o ? AMK_MAX_INPUTS - 3 : AUTO_KV_PARTITIONS;
  int64_t parts = plan->num_sms / (2 * n_kv);
  return parts < 1 ? 1 : parts > most ? most : parts;
}

static bool split_attention(AmkModule *m, AmkRwEdit *e, AmkPassContext *ctx,
                            uint32_t pos, const AmkTask *src,
                            const TilePlan *plan, TileCounts *counts) {
  int64_t head_dim, n_heads, n_kv, kv_start, kv_len, flags = 0;
  if (src->n_inputs != 3 || src->n_outputs != 1 ||
      !amk_task_param_int(src, "head_dim", &head_dim) ||
      !amk_task_param_int(src, "n_heads", &n_heads) ||
      !amk_task_param_int(src, "n_kv_heads", &n_kv) ||
      !amk_task_param_int(src, "kv_start", &kv_start) ||
      !amk_task_param_int(src, "kv_len", &kv_len))
    return true; /* not the shape tile knows; left whole */
  amk_task_param_int(src, "flags", &flags);
  if (head_dim <= 0 || n_heads <= 0 || n_kv <= 0 || n_heads % n_kv ||
      (flags & ATTENTION_PARTIAL_FLAG) || flags < 0 || flags >> AMK_PATTERN_SHIFT) {
    amk_warning(ctx->diag, src->loc,
                "tile: task %d ('%s') is left whole: heads %lld / KV heads %lld "
                "with flags %lld cannot be split per KV head",
                src->id, src->label ? src->label : "", (long long)n_heads,
                (long long)n_kv, (long long)flags);
    return true;
  }
  int64_t group = n_heads / n_kv;
  int64_t k = last_dim(m, src->inputs[0]);
  if (k <= 0)
    k = n_heads * head_dim;
  int64_t parts = kv_partitions(m, src, plan, n_kv);
  if (parts <= 1) {
    for (int64_t g = 0; g < n_kv; g++) {
      AmkTask *t = clone_task(m, e, src, pos);
      t->op = AMK_OP_GEMV_TILE;
      attention_tile_params(m, t, src, k, g * group, group, flags, kv_start, kv_len);
      t->est_bytes = share(src->est_bytes, g, g + 1, n_kv);
      t->est_flops = share(src->est_flops, g, g + 1, n_kv);
      t->label = indexed_label(m, src->label, "[kv%lld]", g, 0);
    }
    amk_rw_kill_task(e, pos);
    counts->attention_split++;
    counts->attention_tiles += n_kv;
    return true;
  }

  /* Split-KV: partition p covers rows [p*chunk, (p+1)*chunk) of the window
   * at meta.pos; an empty share (a short window) writes l = 0, which the
   * combine weighs 0. */
  const AmkBuffer *out = amk_module_buffer(m, src->outputs[0]);
  const char *out_name = out && out->name ? out->name : "attn";
  int64_t elem = out ? amk_dtype_nbytes(out->dtype, 1) : 4;
  out = NULL; /* adding buffers below moves the buffer array */
  char name[256];
  snprintf(name, sizeof name, "%s.partials", out_name);
  AmkCounter *c = amk_module_add_counter(m);
  c->name = amk_rw_unique_counter_name(m, name);
  c->note = indexed_label(m, src->label, " (%lld partitions x %lld KV heads)",
                          parts, n_kv);
  int32_t partial_counter = c->id;
  int32_t partial[MAX_KV_PARTITIONS];
  for (int64_t p = 0; p < parts; p++) {
    snprintf(name, sizeof name, "%s.part%lld", out_name, (long long)p);
    const char *unique = amk_rw_unique_buffer_name(m, name);
    AmkBuffer *b = amk_module_add_buffer(m);
    b->name = unique;
    b->kind = AMK_KIND_ACTIVATION;
    b->dtype = AMK_DTYPE_F32; /* m and l need fp32 whatever the program dtype */
    b->rank = 2;
    b->shape = amk_arena_alloc(&m->arena, 2 * sizeof *b->shape);
    b->shape[0] = amk_value_int(1);
    b->shape[1] = amk_value_int(n_heads * (head_dim + 2));
    b->space = AMK_SPACE_HBM;
    partial[p] = b->id;
  }
  int64_t chunk = (kv_len + parts - 1) / parts;
  for (int64_t p = 0; p < parts; p++) {
    int64_t first = p * chunk;
    int64_t len = kv_len - first < chunk ? kv_len - first : chunk;
    if (len < 0)
      len = 0;
    for (int64_t g = 0; g < n_kv; g++) {
      AmkTask *t = clone_task(m, e, src, pos);
      t->op = AMK_OP_GEMV_TILE;
      t->outputs[0] = partial[p];
      t->out_counter = partial_counter;
      attention_tile_params(m, t, src, k, g * group, group,
                            flags | ATTENTION_PARTIAL_FLAG, kv_start + first, len);
      int64_t piece = p * n_kv + g;
      t->est_bytes = share(src->est_bytes, piece, piece + 1, parts * n_kv);
      t->est_flops = share(src->est_flops, piece, piece + 1, parts * n_kv);
      t->label = indexed_label(m, src->label, "[p%lld.kv%lld]", p, g);
    }
  }
  AmkTask *combine = amk_rw_add_task(m, e, pos);
  combine->op = AMK_OP_ATTENTION_COMBINE;
  combine->n_inputs = (uint32_t)parts;
  combine->inputs = amk_arena_memdup(&m->arena, partial, (size_t)parts * sizeof *partial);
  combine->n_outputs = 1;
  combine->outputs = amk_arena_memdup(&m->arena, src->outputs, sizeof *src->outputs);
  combine->out_counter = src->out_counter;
  combine->n_waits = 1;
  combine->waits = amk_arena_alloc(&m->arena, sizeof *combine->waits);
  combine->waits[0] = (AmkWait){partial_counter, amk_value_int(AMK_RW_FULL_JOIN)};
  amk_task_set_param(m, combine, "head_dim", amk_value_int(head_dim));
  amk_task_set_param(m, combine, "n_heads", amk_value_int(n_heads));
  combine->est_bytes = parts * n_heads * (head_dim + 2) * 4 + n_heads * head_dim * elem;
  combine->est_flops = 4 * parts * n_heads * head_dim;
  combine->label = indexed_label(m, src->label, ".combine", 0, 0);
  combine->loc = src->loc;
  amk_rw_kill_task(e, pos);
  counts->attention_split++;
  counts->attention_tiles += parts * n_kv;
  return true;
}

/* ---- row blocks of a prefill program's per-row ops ----------------------
 *
 * RMSNORM, LAYERNORM, ROPE, EMBED and KV_APPEND over the M token rows of a
 * prefill step are one task each; split them into row blocks of about M /
 * num_sms token rows (at least MIN_ROW_BLOCK), each a copy of the task with
 * the row window M_tile/m_off (counted in the op's rows: a token row holds
 * several of a per-head norm's rows). Decode programs (one token row) are
 * left as they are. */
enum { MIN_ROW_BLOCK = 4 };

static int64_t buffer_numel(const AmkModule *m, int32_t id, int64_t *first, int64_t *last) {
  const AmkBuffer *b = amk_module_buffer(m, id);
  int64_t numel = 1, d = 0;
  if (!b || b->rank == 0)
    return 0;
  for (uint32_t i = 0; i < b->rank; i++) {
    if (!amk_value_as_int(&b->shape[i], &d) || d <= 0 || d > INT32_MAX ||
        numel > INT32_MAX)
      return 0;
    if (i == 0)
      *first = d;
    numel *= d;
  }
  *last = d;
  return numel;
}

/* The token rows of a per-row task (its output's rows; KV_APPEND: the new
 * rows') and its op rows per token row; false when it is not a task to
 * split: another op, a window already, one token row, shapes whose op rows
 * are not whole per token row, a KV_APPEND not in place. */
static bool row_task_shape(const AmkModule *m, const AmkTask *t, int64_t *token_rows,
                           int64_t *per_token) {
  if ((t->op != AMK_OP_RMSNORM && t->op != AMK_OP_LAYERNORM && t->op != AMK_OP_ROPE &&
       t->op != AMK_OP_EMBED && t->op != AMK_OP_KV_APPEND) ||
      t->n_inputs < 2 || t->n_outputs != 1 || amk_task_param(t, "M_tile") ||
      amk_task_param(t, "m_off"))
    return false;
  int64_t in_first, in_last, out_first, out_last, x_first, x_last, hidden;
  int64_t in_n = buffer_numel(m, t->inputs[0], &in_first, &in_last);
  int64_t out_n = buffer_numel(m, t->outputs[0], &out_first, &out_last);
  if (!in_n || !out_n)
    return false;
  int64_t tokens = out_n / out_last, op_rows;
  if (t->op == AMK_OP_RMSNORM || t->op == AMK_OP_LAYERNORM) {
    if (!amk_task_param_int(t, "hidden", &hidden) || hidden <= 0 || in_n % hidden)
      return false;
    op_rows = in_n / hidden;
  } else if (t->op == AMK_OP_ROPE) {
    op_rows = buffer_numel(m, t->inputs[1], &x_first, &x_last);
  } else if (t->op == AMK_OP_EMBED) {
    op_rows = in_n;
  } else { /* KV_APPEND: rows of the cache's row length */
    int64_t row_len = out_n / out_first;
    if (t->inputs[1] != t->outputs[0] || in_n % row_len)
      return false;
    op_rows = in_n / row_len;
    tokens = in_n / in_last;
  }
  if (tokens <= 1 || op_rows < tokens || op_rows % tokens)
    return false;
  *token_rows = tokens;
  *per_token = op_rows / tokens;
  return true;
}

/* Token rows per block: about one block per SM (0: leave whole). */
static int64_t row_block(int64_t token_rows, const TilePlan *plan) {
  if (plan->num_sms <= 0)
    return 0;
  int64_t rows = (token_rows + plan->num_sms - 1) / plan->num_sms;
  return rows < MIN_ROW_BLOCK ? MIN_ROW_BLOCK : rows;
}

/* The tasks a per-row task becomes (1: left whole). */
static int64_t row_tasks_after_split(const AmkModule *m, const AmkTask *src,
                                     const TilePlan *plan) {
  int64_t tokens, per_token;
  if (!row_task_shape(m, src, &tokens, &per_token))
    return 1;
  int64_t block = row_block(tokens, plan);
  return block <= 0 || block >= tokens ? 1 : (tokens + block - 1) / block;
}

/* Splits the per-row task at list position `pos` (copied to `src`) into
 * row blocks; leaves any other task as it is. */
static bool split_rows(AmkModule *m, AmkRwEdit *e, uint32_t pos, const AmkTask *src,
                       const TilePlan *plan, TileCounts *counts) {
  int64_t tokens, per_token;
  if (!row_task_shape(m, src, &tokens, &per_token))
    return true;
  int64_t block = row_block(tokens, plan);
  if (block <= 0 || block >= tokens)
    return true;
  int64_t n_blocks = (tokens + block - 1) / block;
  for (int64_t i = 0; i < n_blocks; i++) {
    int64_t start = i * block, end = start + block < tokens ? start + block : tokens;
    AmkTask *t = clone_task(m, e, src, pos);
    amk_task_set_param(m, t, "M_tile", amk_value_int((end - start) * per_token));
    amk_task_set_param(m, t, "m_off", amk_value_int(start * per_token));
    t->est_bytes = share(src->est_bytes, start, end, tokens);
    t->est_flops = share(src->est_flops, start, end, tokens);
    t->label = indexed_label(m, src->label, "[r%lld]", i, 0);
  }
  amk_rw_kill_task(e, pos);
  counts->row_split++;
  counts->row_tiles += n_blocks;
  return true;
}

/* The tasks task `src` becomes (1: left as it is), as split_gemv and
 * split_attention would make them; at most that many where they would
 * leave a malformed task whole. */
static int64_t tasks_after_split(const AmkModule *m, const AmkTask *src,
                                 const TilePlan *plan, int64_t rows) {
  int64_t n_tile, n_off, n_heads, n_kv;
  if (is_splittable_gemv(src)) {
    if (!amk_task_param_int(src, "N_tile", &n_tile) ||
        !amk_task_param_int(src, "n_off", &n_off) || n_tile <= 0 || rows == 0)
      return 1;
    int64_t m_blocks = gemm_row_blocks(src);
    if (rows < 0)
      return m_blocks == 0 && -rows < n_tile ? -rows : 1;
    if (rows >= n_tile && m_blocks == 0)
      return 1;
    return (n_tile + rows - 1) / rows * (m_blocks > 0 ? m_blocks : 1);
  }
  int64_t cols;
  if (eltwise_split_cols(m, src, plan, &cols))
    return (last_dim(m, src->outputs[0]) + cols - 1) / cols;
  if (src->op == AMK_OP_ATTENTION_TILE && src->n_inputs == 3 &&
      !is_multi_row_attention(m, src) && amk_task_param_int(src, "n_heads", &n_heads) &&
      amk_task_param_int(src, "n_kv_heads", &n_kv) && n_heads > 0 && n_kv > 0 &&
      n_heads % n_kv == 0) {
    int64_t parts = kv_partitions(m, src, plan, n_kv);
    return parts <= 1 ? n_kv : parts * n_kv + 1; /* + the combine */
  }
  int64_t group, m_rows;
  if (src->op == AMK_OP_ATTENTION_TILE && is_multi_row_attention(m, src) &&
      prefill_attention_shape(m, src, &n_kv, &group, &m_rows)) {
    int64_t block = attention_block_rows(m_rows, group, n_kv, plan->num_sms);
    return n_kv * ((m_rows + block - 1) / block);
  }
  return row_tasks_after_split(m, src, plan);
}

/* Refuses a split that would make more than AMK_MAX_PROGRAM_TASKS tasks,
 * before any is made: a huge projection with a small --gemv-n-tile would
 * otherwise take the pass to gigabytes and "out of memory". */
static bool split_fits(const AmkModule *m, AmkPassContext *ctx, const TilePlan *plan,
                       const int64_t *rows) {
  int64_t total = 0;
  for (uint32_t pos = 0; pos < m->n_tasks && total <= AMK_MAX_PROGRAM_TASKS; pos++)
    total += tasks_after_split(m, &m->tasks[pos], plan, rows[pos]);
  if (total <= AMK_MAX_PROGRAM_TASKS)
    return true;
  amk_error(ctx->diag, no_loc,
            "tile: splitting the program's %u tasks would make more than %d "
            "(the most a program may have)%s",
            m->n_tasks, AMK_MAX_PROGRAM_TASKS,
            plan->n_tile ? "; give a larger --gemv-n-tile (or "
                           "config.tiling.gemv.N_tile)" : "");
  return false;
}

bool amk_pass_tile(AmkModule *m, AmkPassContext *ctx) {
  TilePlan plan = {.n_tile = 0, .num_sms = 0, .kv_partitions = 0};
  if (!read_setting(m, ctx, "gemv-n-tile", "gemv", "N_tile", 1, INT32_MAX,
                    &plan.n_tile) ||
      !read_setting(m, ctx, "kv-partitions", "attention", "kv_partitions", 1,
                    MAX_KV_PARTITIONS, &plan.kv_partitions))
    return false;
  if (m->target && m->target->num_sms > 0 && m->target->num_sms <= 1000000)
    plan.num_sms = m->target->num_sms;
  /* AMK_TILE_BALANCED=0|1: balanced_pieces off or on (the default), for
   * A/B runs of the same program. */
  plan.balanced = true;
  const char *balanced_env = getenv("AMK_TILE_BALANCED");
  if (balanced_env && *balanced_env) {
    if (strcmp(balanced_env, "0") != 0 && strcmp(balanced_env, "1") != 0) {
      amk_error(ctx->diag, no_loc, "tile: AMK_TILE_BALANCED must be 0 or 1, not '%s'",
                balanced_env);
      return false;
    }
    plan.balanced = balanced_env[0] == '1';
  }
  /* AMK_TILE_MLP_COLS=N: the gate and up projections in tiles of N
   * columns (a measurement knob: split_down's mlp tiles each add all of
   * the hidden size into one accumulator, and fewer, wider tiles mean
   * fewer adds on each element; on SmolLM2 they were slower by about
   * 0.16 us a column, docs/Performance.md, twenty-sixth session). */
  const char *mlp_cols_env = getenv("AMK_TILE_MLP_COLS");
  if (mlp_cols_env && *mlp_cols_env) {
    char *end;
    long long cols = strtoll(mlp_cols_env, &end, 10);
    if (*end || cols < MIN_TILE_ROWS || cols > INT32_MAX) {
      amk_error(ctx->diag, no_loc,
                "tile: AMK_TILE_MLP_COLS must be an integer in [%d, %d], not '%s'",
                MIN_TILE_ROWS, INT32_MAX, mlp_cols_env);
      return false;
    }
    plan.mlp_cols = cols;
  }
  /* Whether fuse's split_o will run (its groups and switches, read quietly:
   * fuse reports a bad one when it runs): then also every MLP as tiled
   * here (below) is one split_down takes, or wide enough for split_o's
   * column rule over an MLP split_down leaves (a quantized one). */
  int64_t split_down_min_cols = 1, split_o_min_cols = 1;
  plan.split_o = amk_fusion_split_o_planned(m, ctx, &split_down_min_cols, &split_o_min_cols);
  if (!plan.n_tile) {
    if (!m->target || m->target->num_sms <= 0 || m->target->num_sms > 1000000) {
      amk_error(ctx->diag, no_loc,
                "tile: no target with a valid num_sms to size tiles for; give "
                "--gemv-n-tile=N or config.tiling.gemv.N_tile");
      return false;
    }
    plan.num_sms = m->target->num_sms;
  }

  int64_t *tile_rows = plan_tile_rows(m, &plan);
  if (!split_fits(m, ctx, &plan, tile_rows)) {
    free(tile_rows);
    return false;
  }
  if (plan.split_o)
    plan.split_o =
        (split_down_min_cols > 0 && mlps_tiled_wide(m, tile_rows, split_down_min_cols, false)) ||
        mlps_tiled_wide(m, tile_rows, split_o_min_cols, true);

  int64_t path_before = 0, layer_before = 0;
  if (ctx->stats)
    amk_rw_hops(m, &path_before, &layer_before);
  uint32_t tasks_before = m->n_tasks;

  /* New buffers and counters take list positions as ids: make the old ones
   * agree first. */
  AmkRwEdit e;
  if (!amk_module_ids_are_positions(m)) {
    amk_rw_edit_init(&e, m);
    amk_rw_compact(m, &e, ctx, "tile");
    amk_rw_edit_free(&e);
  }
  AmkIdIndex counters;
  amk_id_index_build(&counters, m->counters, sizeof *m->counters, m->n_counters);
  uint32_t n_old_counters = m->n_counters;
  uint32_t *old_counts = amk_rw_producer_counts(m, &counters);
  amk_id_index_free(&counters);

  amk_rw_edit_init(&e, m);
  TileCounts counts = {0};
  bool ok = true;
  uint32_t n = m->n_tasks;
  int64_t cols;
  for (uint32_t pos = 0; pos < n && ok; pos++) {
    AmkTask src = m->tasks[pos]; /* by value: adding tasks moves the array */
    if (is_splittable_gemv(&src))
      ok = split_gemv(m, &e, ctx, pos, &src, tile_rows[pos], &counts);
    else if (src.op == AMK_OP_ATTENTION_TILE && !is_multi_row_attention(m, &src))
      ok = split_attention(m, &e, ctx, pos, &src, &plan, &counts);
    else if (src.op == AMK_OP_ATTENTION_TILE)
      ok = split_prefill_attention(m, &e, pos, &src, &plan, &counts);
    else if (eltwise_split_cols(m, &src, &plan, &cols))
      split_eltwise(m, &e, pos, &src, cols, &counts);
    else
      ok = split_rows(m, &e, pos, &src, &plan, &counts);
  }
  if (ok) {
    amk_rw_fix_thresholds(m, &e, old_counts, n_old_counters);
    amk_rw_compact(m, &e, ctx, "tile");
  }
  free(old_counts);
  free(tile_rows);
  amk_rw_edit_free(&e);
  if (!ok)
    return false;

  if (ctx->stats) {
    int64_t path_after = 0, layer_after = 0;
    amk_rw_hops(m, &path_after, &layer_after);
    if (plan.n_tile)
      amk_stat_int(ctx->stats, "tile", "GEMV N_tile", plan.n_tile);
    else
      amk_stat_str(ctx->stats, "tile", "GEMV N_tile", "auto (about one tile per SM)");
    if (plan.kv_partitions)
      amk_stat_int(ctx->stats, "tile", "KV partitions", plan.kv_partitions);
    else if (plan.split_o)
      amk_stat_str(ctx->stats, "tile", "KV partitions",
                   "auto (1: fuse's split_o takes unpartitioned attention; 5 before "
                   "quantized GEMVs on caches of 1024 rows or more)");
    else
      amk_stat_str(ctx->stats, "tile", "KV partitions",
                   "auto (split when the KV cache has 1024 rows or more, at most 6; 5 "
                   "before quantized GEMVs)");
    amk_stat_int(ctx->stats, "tile", "tasks before", tasks_before);
    amk_stat_int(ctx->stats, "tile", "tasks after", m->n_tasks);
    amk_stat_int(ctx->stats, "tile", "GEMV tasks split", counts.gemv_split);
    amk_stat_int(ctx->stats, "tile", "GEMV tiles made", counts.gemv_tiles);
    amk_stat_int(ctx->stats, "tile", "attention tasks split", counts.attention_split);
    amk_stat_int(ctx->stats, "tile", "attention tiles made", counts.attention_tiles);
    amk_stat_int(ctx->stats, "tile", "elementwise tasks split", counts.eltwise_split);
    amk_stat_int(ctx->stats, "tile", "elementwise tiles made", counts.eltwise_tiles);
    amk_stat_int(ctx->stats, "tile", "per-row tasks split", counts.row_split);
    amk_stat_int(ctx->stats, "tile", "row blocks made", counts.row_tiles);
    amk_stat_int(ctx->stats, "tile", "critical path (tasks) before", path_before);
    amk_stat_int(ctx->stats, "tile", "critical path (tasks) after", path_after);
    amk_stat_int(ctx->stats, "tile", "dependent hops per layer before", layer_before);
    amk_stat_int(ctx->stats, "tile", "dependent hops per layer after", layer_after);
  }
  return true;
}
