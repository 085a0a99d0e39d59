/* fuse: merge dependent steps into GEMV tiles (docs/Fusion.md).
 *
 * Which fusions run: --fusion=all|none|GROUP,GROUP... (GROUP is ops joined by
 * '+', e.g. rmsnorm+gemv), else config.fusion_grouping (a list of groups; an
 * empty list means all of them). The groups:
 *
 *   rmsnorm+gemv     a norm folds into every GEMV tile reading it (norm)
 *   gemv+add         a residual add folds into the tiles of the GEMV feeding
 *                    it (residual, silu_residual)
 *   gate+up          gate and up become one stacked projection -> gu [2, I]
 *   silu_mul+gemv    SiLU(gate)*up folds into the tiles reading it (silu);
 *                    needs gate+up
 *   qkv              q, k and v become one projection -> qkv
 *   rope+kv_append   RoPE of k and both appends: one task per KV head
 *                    (rope_kv) into its own per-head cache (one counter
 *                    each; a combined cache for untiled attention); needs qkv
 *   rope+attention   RoPE of q folds into the per-KV-head attention tiles
 *                    (attention_rope), which take the step's own k and v
 *                    from qkv and wait on qkv, not on rope_kv (unless
 *                    AMK_FUSE_KV_FROM_QKV=0); needs qkv and rope+kv_append
 *   combine+gemv     a split-KV ATTENTION_COMBINE of at most 6 partials
 *                    (5 before quantized tiles) folds into every residual
 *                    tile reading its output (combine_residual: each
 *                    o_proj tile recombines the partials itself); needs
 *                    gemv+add
 *   split_down       the down projection splits along the intermediate into
 *                    the gate|up tiles, which add their share of it (and,
 *                    one of them, the residual) into an f32 accumulator
 *                    (mlp); needs the MLP fusions, gemv+add and rmsnorm+gemv
 *   split_o          (by default where split_down applies) the o
 *                    projection splits along the attention's columns into
 *                    per-query-head attention
 *                    tiles, which add their share of it (and, one of them,
 *                    the residual) into an f32 accumulator (attention_o);
 *                    needs the attention block fusions (row pos from qkv),
 *                    gemv+add, unpartitioned attention (tile then picks one
 *                    KV partition by itself) and an fp o projection; also
 *                    before an MLP split_down leaves (its gate|up norm and
 *                    down residual read the accumulator) whose gate|up
 *                    tiles are wide (by default as split_down's rule)
 *
 * The groups, their spellings and the AMK_FUSE_* switches are in
 * fusion_groups.c (tile asks it whether split_o will run).
 *
 * Every rewrite is checked against the dataflow before it is made (the
 * intermediate buffer has exactly the expected writers and readers, its
 * counter no other waiters, the wait lists stay within the ABI's cap), so
 * anything fuse does not recognise is left as it was. Weight-only quantized
 * tiles fuse as fp ones do, except into mlp tiles: their scales stay
 * input 2 and the pattern's operand (norm weight, residual) moves to input 3
 * (combine_residual: p0, qW, scales, r, p1..), and stacked weights get
 * stacked scales (docs/Quantization.md). Thresholds follow the
 * all-join rule; tiles that share a buffer share one counter with disjoint
 * [n_off, n_off + N_tile), as the reference's write-after-write check needs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/rope.h"
#include "fusion_groups.h"
#include "schedule_rewrite.h"

static const AmkLoc no_loc = {0, 0};

/* ---- the dataflow index ------------------------------------------------------- */

typedef struct {
  uint32_t *off, *list;
} Csr;

typedef struct {
  AmkIdIndex bufs, cnts;
  Csr writers, readers;    /* per buffer position: live tasks */
  Csr producers, waiters;  /* per counter position: live tasks */
} Index;

static void csr_free(Csr *c) {
  free(c->off);
  free(c->list);
}

/* Builds a CSR of (key, task) pairs produced by `emit` in two sweeps. */
typedef uint32_t (*EmitFn)(const AmkModule *m, const Index *ix, uint32_t t,
                           uint32_t *keys);

static Csr build_csr(const AmkModule *m, const Index *ix, const AmkRwEdit *e,
                     uint32_t n_keys, EmitFn emit) {
  Csr c;
  c.off = amk_xcalloc((size_t)n_keys + 2, sizeof *c.off);
  uint32_t keys[AMK_MAX_INPUTS + AMK_MAX_OUTPUTS + AMK_MAX_WAITS + 8];
  for (uint32_t t = 0; t < m->n_tasks; t++) {
    if (amk_rw_task_dead(e, t))
      continue;
    uint32_t n = emit(m, ix, t, keys);
    for (uint32_t i = 0; i < n; i++)
      c.off[keys[i] + 1]++;
  }
  for (uint32_t k = 0; k < n_keys; k++)
    c.off[k + 1] += c.off[k];
  c.list = amk_xmalloc(((size_t)c.off[n_keys] + 1) * sizeof *c.list);
  uint32_t *fill = amk_xmalloc(((size_t)n_keys + 1) * sizeof *fill);
  memcpy(fill, c.off, ((size_t)n_keys + 1) * sizeof *fill);
  for (uint32_t t = 0; t < m->n_tasks; t++) {
    if (amk_rw_task_dead(e, t))
      continue;
    uint32_t n = emit(m, ix, t, keys);
    for (uint32_t i = 0; i < n; i++)
      c.list[fill[keys[i]]++] = t;
  }
  free(fill);
  return c;
}

/* Distinct keys of a task, capped by the ABI arrays (larger tasks only
 * contribute their first entries; fuse never rewrites them). */
static uint32_t add_key(uint32_t *keys, uint32_t n, uint32_t key) {
  if (key == AMK_NO_INDEX)
    return n;
  for (uint32_t i = 0; i < n; i++)
    if (keys[i] == key)
      return n;
  keys[n] = key;
  return n + 1;
}

/* The distinct buffer positions among the first `cap` of `n` buffer ids. */
static uint32_t buffer_keys(const Index *ix, const int32_t *ids, uint32_t n,
                            uint32_t cap, uint32_t *keys) {
  uint32_t count = 0;
  for (uint32_t i = 0; i < n && i < cap; i++)
    count = add_key(keys, count, amk_id_index_get(&ix->bufs, ids[i]));
  return count;
}

static uint32_t emit_writes(const AmkModule *m, const Index *ix, uint32_t t, uint32_t *keys) {
  const AmkTask *task = &m->tasks[t];
  return buffer_keys(ix, task->outputs, task->n_outputs, AMK_MAX_OUTPUTS, keys);
}

static uint32_t emit_reads(const AmkModule *m, const Index *ix, uint32_t t, uint32_t *keys) {
  const AmkTask *task = &m->tasks[t];
  return buffer_keys(ix, task->inputs, task->n_inputs, AMK_MAX_INPUTS, keys);
}

static uint32_t emit_signal(const AmkModule *m, const Index *ix, uint32_t t, uint32_t *keys) {
  return add_key(keys, 0, amk_id_index_get(&ix->cnts, m->tasks[t].out_counter));
}

static uint32_t emit_waits(const AmkModule *m, const Index *ix, uint32_t t, uint32_t *keys) {
  const AmkTask *task = &m->tasks[t];
  uint32_t n = 0;
  for (uint32_t i = 0; i < task->n_waits && i < AMK_MAX_WAITS; i++)
    n = add_key(keys, n, amk_id_index_get(&ix->cnts, task->waits[i].counter));
  return n;
}

static void index_build(Index *ix, const AmkModule *m, const AmkRwEdit *e) {
  amk_id_index_build(&ix->bufs, m->buffers, sizeof *m->buffers, m->n_buffers);
  amk_id_index_build(&ix->cnts, m->counters, sizeof *m->counters, m->n_counters);
  ix->writers = build_csr(m, ix, e, m->n_buffers, emit_writes);
  ix->readers = build_csr(m, ix, e, m->n_buffers, emit_reads);
  ix->producers = build_csr(m, ix, e, m->n_counters, emit_signal);
  ix->waiters = build_csr(m, ix, e, m->n_counters, emit_waits);
}

static void index_free(Index *ix) {
  amk_id_index_free(&ix->bufs);
  amk_id_index_free(&ix->cnts);
  csr_free(&ix->writers);
  csr_free(&ix->readers);
  csr_free(&ix->producers);
  csr_free(&ix->waiters);
}

typedef struct {
  const uint32_t *at;
  uint32_t n;
} Span;

static Span span(const Csr *c, uint32_t key) {
  if (key == AMK_NO_INDEX)
    return (Span){NULL, 0};
  return (Span){c->list + c->off[key], c->off[key + 1] - c->off[key]};
}

static bool span_is_one(Span s, uint32_t task) { return s.n == 1 && s.at[0] == task; }

/* Every task of `inner` is in `outer` (both ascending task positions). */
static bool span_within(Span inner, Span outer) {
  uint32_t j = 0;
  for (uint32_t i = 0; i < inner.n; i++) {
    while (j < outer.n && outer.at[j] < inner.at[i])
      j++;
    if (j == outer.n || outer.at[j] != inner.at[i])
      return false;
  }
  return true;
}

static bool span_equal(Span a, Span b) { return a.n == b.n && span_within(a, b); }

/* ---- rewriting helpers ------------------------------------------------------------ */

typedef struct {
  AmkModule *m;
  AmkPassContext *ctx;
  AmkRwEdit edit;
  Index ix;
  int64_t done[AMK_FUSION_COUNT];
  bool kv_from_qkv; /* attention_rope tiles take row pos from qkv (AMK_FUSE_KV_FROM_QKV) */
  int64_t split_down_min_cols; /* the fewest intermediate columns a gate|up tile may have */
  int64_t split_o_slices;      /* AMK_FUSE_SPLIT_O_SLICES (0: by the SMs) */
  int64_t split_o_min_cols;    /* the same, for split_o over an MLP split_down leaves */
  bool split_down_quant;       /* split_down takes quantized MLPs (AMK_FUSE_SPLIT_DOWN_QUANT) */
} Fuser;

static uint32_t bufpos(const Fuser *f, int32_t id) { return amk_id_index_get(&f->ix.bufs, id); }
static uint32_t cntpos(const Fuser *f, int32_t id) { return amk_id_index_get(&f->ix.cnts, id); }

/* Whether task `pos` (`producer`) is the one writer of an activation, *y,
 * and the one producer of its counter, and the intermediate's readers,
 * *readers, are exactly that counter's waiters: what folding the producer
 * into its readers needs. */
static bool sole_intermediate(const Fuser *f, const AmkTask *producer, uint32_t pos,
                              uint32_t *y, Span *readers) {
  const AmkModule *m = f->m;
  *y = bufpos(f, producer->outputs[0]);
  uint32_t c = cntpos(f, producer->out_counter);
  if (*y == AMK_NO_INDEX || c == AMK_NO_INDEX || m->buffers[*y].kind != AMK_KIND_ACTIVATION ||
      !span_is_one(span(&f->ix.writers, *y), pos) ||
      !span_is_one(span(&f->ix.producers, c), pos))
    return false;
  *readers = span(&f->ix.readers, *y);
  return readers->n > 0 && span_equal(span(&f->ix.waiters, c), *readers);
}

static int64_t dim(const AmkBuffer *b, uint32_t i) {
  int64_t d = 0;
  if (!b || i >= b->rank || !amk_value_as_int(&b->shape[i], &d))
    return -1;
  return d;
}

static int64_t width_of(const Fuser *f, int32_t buffer) {
  uint32_t p = bufpos(f, buffer);
  if (p == AMK_NO_INDEX)
    return -1;
  const AmkBuffer *b = &f->m->buffers[p];
  return b->rank ? dim(b, b->rank - 1) : -1;
}

static void set_pattern(AmkModule *m, AmkTask *t, int64_t pattern) {
  amk_task_set_param(m, t, "flags",
                     amk_value_int(pattern << AMK_PATTERN_SHIFT | amk_rw_low_flags(t)));
}

/* Inputs a tile reads before its pattern's operand (norm weight, residual,
 * bias): x and W, and a quantized tile's scales. So the operand's slot. */
static uint32_t base_inputs(const AmkTask *t) { return amk_rw_quantized(t) ? 3 : 2; }

static bool same_param(const AmkTask *a, const AmkTask *b, const char *key) {
  const AmkValue *x = amk_task_param(a, key), *y = amk_task_param(b, key);
  return x && y ? amk_value_equal(x, y) : x == y;
}

/* Both tiles read fp weights, or both read one quantized format (qdtype and
 * group): what a stacked weight and its scales need. */
static bool same_quant(const AmkTask *a, const AmkTask *b) {
  return amk_rw_quantized(a) == amk_rw_quantized(b) && same_param(a, b, "qdtype") &&
         same_param(a, b, "group");
}

/* A quantized tile fuse can rewrite: qdtype 6 or 7 and the scales input. */
static bool quant_form_ok(const AmkTask *t) {
  int64_t qdtype = 0;
  return !amk_rw_quantized(t) ||
         (amk_task_param_int(t, "qdtype", &qdtype) &&
          (qdtype == AMK_QDTYPE_INT8 || qdtype == AMK_QDTYPE_INT4) && t->n_inputs >= 3);
}

typedef struct {
  AmkWait w[AMK_MAX_WAITS];
  uint32_t n;
} WaitSet;

/* t's waits without those on counters in `drop`, plus `add` (a counter
 * already waited on keeps its wait). False when over the ABI cap. */
static bool merged_waits(const AmkTask *t, const int32_t *drop, uint32_t n_drop,
                         const AmkWait *add, uint32_t n_add, WaitSet *out) {
  out->n = 0;
  for (uint32_t pass = 0; pass < 2; pass++) {
    const AmkWait *src = pass ? add : t->waits;
    uint32_t n = pass ? n_add : t->n_waits;
    for (uint32_t i = 0; i < n; i++) {
      bool skip = false;
      for (uint32_t d = 0; d < n_drop && !skip; d++)
        skip = src[i].counter == drop[d];
      for (uint32_t k = 0; k < out->n && !skip; k++)
        skip = out->w[k].counter == src[i].counter;
      if (skip)
        continue;
      if (out->n == AMK_MAX_WAITS)
        return false;
      out->w[out->n++] = src[i];
    }
  }
  return true;
}

static void set_waits(AmkModule *m, AmkTask *t, const WaitSet *s) {
  t->n_waits = s->n;
  t->waits = amk_arena_memdup(&m->arena, s->w, (s->n ? s->n : 1) * sizeof *s->w);
}

static void set_inputs(AmkModule *m, AmkTask *t, const int32_t *in, uint32_t n) {
  t->n_inputs = n;
  t->inputs = amk_arena_memdup(&m->arena, in, n * sizeof *in);
}

static int32_t add_buffer(Fuser *f, const char *base, AmkBufferKind kind, AmkDType dtype,
                          uint32_t rank, const int64_t *dims, const char *source) {
  const char *name = amk_rw_unique_buffer_name(f->m, base);
  AmkBuffer *b = amk_module_add_buffer(f->m);
  b->name = name;
  b->kind = kind;
  b->dtype = dtype;
  b->rank = rank;
  b->shape = amk_arena_alloc(&f->m->arena, rank * sizeof *b->shape);
  for (uint32_t i = 0; i < rank; i++)
    b->shape[i] = amk_value_int(dims[i]);
  b->space = AMK_SPACE_HBM;
  b->source = source ? amk_arena_strdup(&f->m->arena, source) : NULL;
  return b->id;
}

static int32_t add_counter(Fuser *f, const char *base, const char *note) {
  const char *name = amk_rw_unique_counter_name(f->m, base);
  AmkCounter *c = amk_module_add_counter(f->m);
  c->name = name;
  c->note = amk_arena_strdup(&f->m->arena, note);
  return c->id;
}

/* `name` with `from` replaced by `to`, else with `suffix` appended. */
static void rename_part(const char *name, const char *from, const char *to,
                        const char *suffix, char *out, size_t size) {
  const char *hit = name ? strstr(name, from) : NULL;
  if (hit)
    snprintf(out, size, "%.*s%s%s", (int)(hit - name), name, to, hit + strlen(from));
  else
    snprintf(out, size, "%s%s", name ? name : "", suffix);
}

/* The label's prefix through its last '.', e.g. "L3." of "L3.k_append". */
static void label_prefix(const char *label, char *out, size_t size) {
  const char *dot = label ? strrchr(label, '.') : NULL;
  snprintf(out, size, "%.*s", dot ? (int)(dot - label + 1) : 0, dot ? label : "");
}

/* Tiles writing one buffer: all GEMV_TILE with an allowed pattern and one
 * weight format, one signalled counter whose producers are exactly them. */
typedef struct {
  Span tiles;
  uint32_t counter; /* position */
  int64_t pattern;
} TileSet;

static bool tile_set(const Fuser *f, uint32_t buffer, uint64_t allowed_patterns,
                     TileSet *out) {
  Span w = span(&f->ix.writers, buffer);
  if (w.n == 0)
    return false;
  const AmkTask *first = &f->m->tasks[w.at[0]];
  out->tiles = w;
  out->counter = cntpos(f, first->out_counter);
  out->pattern = amk_rw_pattern(first);
  if (out->counter == AMK_NO_INDEX || !span_equal(span(&f->ix.producers, out->counter), w))
    return false;
  for (uint32_t i = 0; i < w.n; i++) {
    const AmkTask *t = &f->m->tasks[w.at[i]];
    int64_t p = amk_rw_pattern(t);
    if (t->op != AMK_OP_GEMV_TILE || t->n_outputs != 1 || p != out->pattern ||
        !((allowed_patterns >> p) & 1) || t->n_inputs < 2 || !quant_form_ok(t) ||
        !same_quant(t, first) || t->out_counter != first->out_counter)
      return false;
  }
  return true;
}

#define PATTERN_BIT(name) (1ull << AMK_PATTERN_##name)

/* The tiles of several projections agree on what they reduce: the same
 * input vector, pattern, norm weight and eps, K and weight format. */
static bool same_reduction(const Fuser *f, const TileSet *sets, size_t n) {
  const AmkTask *ref = &f->m->tasks[sets[0].tiles.at[0]];
  int64_t k_ref;
  if (!amk_task_param_int(ref, "K", &k_ref))
    return false;
  for (size_t s = 0; s < n; s++)
    for (uint32_t i = 0; i < sets[s].tiles.n; i++) {
      const AmkTask *t = &f->m->tasks[sets[s].tiles.at[i]];
      int64_t k;
      uint32_t slot = base_inputs(t);
      if (t->n_inputs != ref->n_inputs || t->inputs[0] != ref->inputs[0] ||
          amk_rw_pattern(t) != amk_rw_pattern(ref) || !same_quant(t, ref) ||
          !amk_task_param_int(t, "K", &k) || k != k_ref)
        return false;
      if (t->n_inputs == slot + 1 && amk_rw_pattern(t) == AMK_PATTERN_PLAIN) {
        /* A bias (Qwen2's q/k/v): each projection's own, concatenated with
         * the weights (tile_bias checks it). */
        continue;
      }
      if (t->n_inputs == slot + 1) {
        const AmkValue *a = amk_task_param(t, "eps"), *b = amk_task_param(ref, "eps");
        if (t->inputs[slot] != ref->inputs[slot] || !a || !b || !amk_value_equal(a, b))
          return false;
      }
    }
  return true;
}

/* Every tile of a set reads the same weight (input 1); its position. */
static uint32_t tile_weight(const Fuser *f, const TileSet *s) {
  int32_t w = f->m->tasks[s->tiles.at[0]].inputs[1];
  for (uint32_t i = 1; i < s->tiles.n; i++)
    if (f->m->tasks[s->tiles.at[i]].inputs[1] != w)
      return AMK_NO_INDEX;
  uint32_t p = bufpos(f, w);
  return p != AMK_NO_INDEX && f->m->buffers[p].kind == AMK_KIND_WEIGHT &&
                 f->m->buffers[p].rank == 2 && f->m->buffers[p].source
             ? p
             : AMK_NO_INDEX;
}

/* The bias (input 2) every plain tile of a set reads, a rank-1 WEIGHT with
 * a source read by those tiles alone; its position. NO_INDEX when the tiles
 * have no bias; *ok false when they have one that cannot be concatenated. */
static uint32_t tile_bias(const Fuser *f, const TileSet *s, bool *ok) {
  const AmkTask *first = &f->m->tasks[s->tiles.at[0]];
  *ok = true;
  if (s->pattern != AMK_PATTERN_PLAIN || first->n_inputs != base_inputs(first) + 1)
    return AMK_NO_INDEX;
  /* A quantized tile has no bias form (its input 3 would be one). */
  *ok = !amk_rw_quantized(first);
  for (uint32_t i = 1; i < s->tiles.n; i++)
    if (f->m->tasks[s->tiles.at[i]].n_inputs != 3 ||
        f->m->tasks[s->tiles.at[i]].inputs[2] != first->inputs[2])
      *ok = false;
  uint32_t p = bufpos(f, first->inputs[2]);
  if (!*ok || p == AMK_NO_INDEX || f->m->buffers[p].kind != AMK_KIND_WEIGHT ||
      f->m->buffers[p].rank != 1 || !f->m->buffers[p].source ||
      !span_equal(span(&f->ix.readers, p), s->tiles)) {
    *ok = false;
    return AMK_NO_INDEX;
  }
  return p;
}

/* The scales (input 2) every tile of a quantized set reads: a rank-2
 * WEIGHT with a source, one row per weight row (`rows`), read by those
 * tiles alone; its position. NO_INDEX when the set is not quantized or
 * its scales cannot be stacked. */
static uint32_t tile_scales(const Fuser *f, const TileSet *s, int64_t rows) {
  const AmkTask *first = &f->m->tasks[s->tiles.at[0]];
  if (!amk_rw_quantized(first))
    return AMK_NO_INDEX;
  for (uint32_t i = 1; i < s->tiles.n; i++)
    if (f->m->tasks[s->tiles.at[i]].inputs[2] != first->inputs[2])
      return AMK_NO_INDEX;
  uint32_t p = bufpos(f, first->inputs[2]);
  if (p == AMK_NO_INDEX)
    return AMK_NO_INDEX;
  const AmkBuffer *b = &f->m->buffers[p];
  return b->kind == AMK_KIND_WEIGHT && b->rank == 2 && b->source && dim(b, 0) == rows &&
                 dim(b, 1) > 0 && span_equal(span(&f->ix.readers, p), s->tiles)
             ? p
             : AMK_NO_INDEX;
}

/* Scales of `n` parts that stack: same dtype and groups per row. */
static bool scales_stack(const Fuser *f, const uint32_t *scales, int n) {
  for (int i = 0; i < n; i++) {
    if (scales[i] == AMK_NO_INDEX)
      return false;
    const AmkBuffer *a = &f->m->buffers[scales[i]], *b = &f->m->buffers[scales[0]];
    if (a->dtype != b->dtype || dim(a, 1) != dim(b, 1))
      return false;
    for (int j = 0; j < i; j++)
      if (scales[j] == scales[i])
        return false;
  }
  return true;
}

/* The stacked scales of a stacked quantized weight `weight` (a new buffer
 * id): the parts' scales joined along rows, source "a.scales+b.scales" as
 * the loader reads it (and as quantize names a stacked weight's scales). */
static int32_t add_stacked_scales(Fuser *f, const uint32_t *scales, int n, int32_t weight) {
  AmkModule *m = f->m;
  char name[300], src[2048];
  size_t at = 0;
  int64_t rows = 0;
  src[0] = '\0';
  for (int i = 0; i < n; i++) {
    at += (size_t)snprintf(src + at, at < sizeof src ? sizeof src - at : 0, "%s%s",
                           i ? "+" : "", m->buffers[scales[i]].source);
    rows += dim(&m->buffers[scales[i]], 0);
  }
  /* fuse made ids positions; the index does not know new buffers. */
  snprintf(name, sizeof name, "%s.scales", m->buffers[weight].name);
  int64_t dims[2] = {rows, dim(&m->buffers[scales[0]], 1)};
  return add_buffer(f, name, AMK_KIND_WEIGHT, m->buffers[scales[0]].dtype, 2, dims, src);
}

/* ---- rmsnorm + gemv ---------------------------------------------------------------- */

/* The task at `pos` when it is live and a two-input, one-output `op`; else
 * NULL. The fusions start from such a task. */
static const AmkTask *live_binary(Fuser *f, uint32_t pos, AmkOp op) {
  const AmkTask *t = &f->m->tasks[pos];
  if (amk_rw_task_dead(&f->edit, pos) || t->op != op || t->n_inputs != 2 || t->n_outputs != 1)
    return NULL;
  return t;
}

static void fuse_norms(Fuser *f) {
  AmkModule *m = f->m;
  uint32_t n = m->n_tasks;
  for (uint32_t pos = 0; pos < n; pos++) {
    const AmkTask *norm = live_binary(f, pos, AMK_OP_RMSNORM);
    const AmkValue *eps = norm ? amk_task_param(norm, "eps") : NULL;
    int64_t hidden, flags = 0;
    /* The norm pattern computes rmsnorm(x) * g over the whole input: a
     * (1 + w) norm (flags) or one over rows narrower than the input (Qwen3's
     * per-head q/k norms) stays a task. */
    if (!eps || !amk_task_param_int(norm, "hidden", &hidden) ||
        (amk_task_param_int(norm, "flags", &flags) && flags != 0) ||
        width_of(f, norm->inputs[0]) != hidden)
      continue;
    uint32_t y;
    Span readers;
    if (!sole_intermediate(f, norm, pos, &y, &readers))
      continue;
    bool ok = true;
    WaitSet *sets = amk_xmalloc(readers.n * sizeof *sets);
    int32_t drop = norm->out_counter;
    for (uint32_t i = 0; i < readers.n && ok; i++) {
      const AmkTask *t = &m->tasks[readers.at[i]];
      ok = t->op == AMK_OP_GEMV_TILE && amk_rw_pattern(t) == AMK_PATTERN_PLAIN &&
           t->n_inputs == base_inputs(t) && quant_form_ok(t) && t->n_outputs == 1 &&
           t->inputs[0] == norm->outputs[0] &&
           merged_waits(t, &drop, 1, norm->waits, norm->n_waits, &sets[i]);
      for (uint32_t k = 1; k < t->n_inputs && ok; k++)
        ok = t->inputs[k] != norm->outputs[0];
    }
    if (ok) {
      int64_t elem = amk_dtype_nbytes(m->buffers[y].dtype, 1);
      AmkValue eps_value = *eps;
      for (uint32_t i = 0; i < readers.n; i++) {
        AmkTask *t = &m->tasks[readers.at[i]];
        /* [x, W, g], or [x, qW, scales, g]: the norm weight after the scales. */
        int32_t in[4] = {norm->inputs[0], t->inputs[1], t->n_inputs > 2 ? t->inputs[2] : 0, 0};
        uint32_t slot = base_inputs(t);
        in[slot] = norm->inputs[1];
        set_inputs(m, t, in, slot + 1);
        set_waits(m, t, &sets[i]);
        set_pattern(m, t, AMK_PATTERN_NORM);
        amk_task_set_param(m, t, "eps", eps_value);
        t->est_bytes += 2 * hidden * elem; /* each tile reads x and g */
        t->est_flops += 4 * hidden;
      }
      amk_rw_kill_task(&f->edit, pos);
      amk_rw_kill_buffer(&f->edit, y);
      amk_rw_kill_counter(&f->edit, cntpos(f, norm->out_counter));
      f->done[AMK_FUSION_NORM]++;
    }
    free(sets);
  }
}

/* ---- gemv + add -------------------------------------------------------------------- */

static bool fuse_one_residual(Fuser *f, uint32_t pos, int which) {
  AmkModule *m = f->m;
  const AmkTask *add = &m->tasks[pos];
  int32_t y_id = add->inputs[which], r_id = add->inputs[1 - which];
  uint32_t y = bufpos(f, y_id), z = bufpos(f, add->outputs[0]);
  uint32_t cz = cntpos(f, add->out_counter);
  TileSet ts;
  if (y == AMK_NO_INDEX || z == AMK_NO_INDEX || cz == AMK_NO_INDEX || y_id == r_id ||
      !tile_set(f, y, PATTERN_BIT(PLAIN) | PATTERN_BIT(SILU), &ts) ||
      !span_is_one(span(&f->ix.readers, y), pos) ||
      !span_is_one(span(&f->ix.waiters, ts.counter), pos) ||
      !span_is_one(span(&f->ix.writers, z), pos) ||
      !span_is_one(span(&f->ix.producers, cz), pos) ||
      width_of(f, y_id) != width_of(f, add->outputs[0]) || width_of(f, y_id) <= 0)
    return false;
  WaitSet *sets = amk_xmalloc(ts.tiles.n * sizeof *sets);
  int32_t drop = m->counters[ts.counter].id;
  bool ok = true;
  for (uint32_t i = 0; i < ts.tiles.n && ok; i++) {
    const AmkTask *t = &m->tasks[ts.tiles.at[i]];
    ok = t->n_inputs == base_inputs(t) &&
         merged_waits(t, &drop, 1, add->waits, add->n_waits, &sets[i]);
    for (uint32_t k = 0; k < t->n_inputs && ok; k++)
      ok = t->inputs[k] != y_id;
  }
  if (ok) {
    int64_t elem = amk_dtype_nbytes(m->buffers[z].dtype, 1);
    int32_t out = add->outputs[0], counter = add->out_counter;
    int64_t pattern = ts.pattern == AMK_PATTERN_SILU ? AMK_PATTERN_SILU_RESIDUAL
                                                          : AMK_PATTERN_RESIDUAL;
    for (uint32_t i = 0; i < ts.tiles.n; i++) {
      AmkTask *t = &m->tasks[ts.tiles.at[i]];
      /* [x, W, r], or [x, qW, scales, r]: the residual after the scales. */
      int32_t in[4] = {t->inputs[0], t->inputs[1], t->n_inputs > 2 ? t->inputs[2] : 0, 0};
      uint32_t slot = base_inputs(t);
      in[slot] = r_id;
      int64_t n_tile = 0;
      amk_task_param_int(t, "N_tile", &n_tile);
      set_inputs(m, t, in, slot + 1);
      set_waits(m, t, &sets[i]);
      set_pattern(m, t, pattern);
      t->outputs = amk_arena_memdup(&m->arena, &out, sizeof out);
      t->out_counter = counter;
      t->est_bytes += n_tile * elem; /* the residual slice */
      t->est_flops += n_tile;
    }
    amk_rw_kill_task(&f->edit, pos);
    amk_rw_kill_buffer(&f->edit, y);
    amk_rw_kill_counter(&f->edit, ts.counter);
    f->done[AMK_FUSION_RESIDUAL]++;
  }
  free(sets);
  return ok;
}

static void fuse_residuals(Fuser *f) {
  for (uint32_t pos = 0; pos < f->m->n_tasks; pos++) {
    const AmkTask *t = live_binary(f, pos, AMK_OP_ADD);
    if (!t)
      continue;
    /* A residual add reads (stream, projection): try the second first. */
    if (!fuse_one_residual(f, pos, 1))
      fuse_one_residual(f, pos, 0);
  }
}

/* ---- gate + up, silu_mul + gemv ----------------------------------------------------- */

/* The tiles cover [0, width) exactly once. */
static bool tiles_cover(const AmkModule *m, Span tiles, int64_t width) {
  uint8_t *seen = amk_xcalloc((size_t)width, 1);
  bool ok = true;
  int64_t total = 0;
  for (uint32_t i = 0; i < tiles.n && ok; i++) {
    int64_t off, n;
    const AmkTask *t = &m->tasks[tiles.at[i]];
    ok = amk_task_param_int(t, "n_off", &off) && amk_task_param_int(t, "N_tile", &n) &&
         off >= 0 && n > 0 && off + n <= width;
    for (int64_t c = off; ok && c < off + n; c++)
      ok = !seen[c]++;
    total += ok ? n : 0;
  }
  free(seen);
  return ok && total == width;
}

static void fuse_mlp(Fuser *f) {
  AmkModule *m = f->m;
  uint32_t n = m->n_tasks;
  for (uint32_t pos = 0; pos < n; pos++) {
    const AmkTask *s = live_binary(f, pos, AMK_OP_SILU_MUL);
    if (!s)
      continue;
    uint32_t gate = bufpos(f, s->inputs[0]), up = bufpos(f, s->inputs[1]);
    uint32_t act = bufpos(f, s->outputs[0]), c_act = cntpos(f, s->out_counter);
    TileSet sets[2];
    if (gate == AMK_NO_INDEX || up == AMK_NO_INDEX || act == AMK_NO_INDEX ||
        c_act == AMK_NO_INDEX || gate == up ||
        !tile_set(f, gate, PATTERN_BIT(PLAIN) | PATTERN_BIT(NORM), &sets[0]) ||
        !tile_set(f, up, PATTERN_BIT(PLAIN) | PATTERN_BIT(NORM), &sets[1]) ||
        !same_reduction(f, sets, 2) || !span_is_one(span(&f->ix.readers, gate), pos) ||
        !span_is_one(span(&f->ix.readers, up), pos) ||
        !span_is_one(span(&f->ix.waiters, sets[0].counter), pos) ||
        !span_is_one(span(&f->ix.waiters, sets[1].counter), pos) ||
        !span_is_one(span(&f->ix.writers, act), pos) ||
        !span_is_one(span(&f->ix.producers, c_act), pos))
      continue;
    uint32_t wg = tile_weight(f, &sets[0]), wu = tile_weight(f, &sets[1]);
    int64_t inter = width_of(f, s->inputs[0]);
    if (wg == AMK_NO_INDEX || wu == AMK_NO_INDEX || wg == wu || inter <= 0 ||
        width_of(f, s->inputs[1]) != inter || width_of(f, s->outputs[0]) != inter ||
        dim(&m->buffers[wg], 0) != inter || dim(&m->buffers[wu], 0) != inter ||
        dim(&m->buffers[wg], 1) != dim(&m->buffers[wu], 1) ||
        m->buffers[wg].dtype != m->buffers[wu].dtype ||
        !span_equal(span(&f->ix.readers, wg), sets[0].tiles) ||
        !span_equal(span(&f->ix.readers, wu), sets[1].tiles) ||
        !tiles_cover(m, sets[0].tiles, inter))
      continue;
    /* Quantized gate and up (one format: same_reduction) stack their scales too. */
    bool quantized = amk_rw_quantized(&m->tasks[sets[0].tiles.at[0]]);
    uint32_t scales[2] = {AMK_NO_INDEX, AMK_NO_INDEX};
    if (quantized) {
      scales[0] = tile_scales(f, &sets[0], inter);
      scales[1] = tile_scales(f, &sets[1], inter);
      if (!scales_stack(f, scales, 2))
        continue;
    }
    /* The consumers: GEMV tiles reducing over act. */
    Span down = span(&f->ix.readers, act);
    if (down.n == 0 || !span_equal(span(&f->ix.waiters, c_act), down))
      continue;
    bool ok = true;
    for (uint32_t i = 0; i < down.n && ok; i++) {
      const AmkTask *t = &m->tasks[down.at[i]];
      int64_t p = amk_rw_pattern(t);
      ok = t->op == AMK_OP_GEMV_TILE && t->n_outputs == 1 && t->inputs[0] == s->outputs[0] &&
           quant_form_ok(t) && (p == AMK_PATTERN_PLAIN || p == AMK_PATTERN_RESIDUAL) &&
           t->n_inputs == base_inputs(t) + (p == AMK_PATTERN_RESIDUAL);
      for (uint32_t k = 1; k < t->n_inputs && ok; k++)
        ok = t->inputs[k] != s->outputs[0];
    }
    if (!ok)
      continue;

    char name[256], src[1024];
    rename_part(m->buffers[wg].name, "gate_proj", "gate_up_proj", ".gate_up", name, sizeof name);
    snprintf(src, sizeof src, "%s+%s", m->buffers[wg].source, m->buffers[wu].source);
    int64_t w_dims[2] = {2 * inter, dim(&m->buffers[wg], 1)};
    AmkDType w_dtype = m->buffers[wg].dtype, a_dtype = m->buffers[gate].dtype;
    int32_t w_gu = add_buffer(f, name, AMK_KIND_WEIGHT, w_dtype, 2, w_dims, src);
    int32_t s_gu = quantized ? add_stacked_scales(f, scales, 2, w_gu) : -1;
    rename_part(m->buffers[gate].name, "gate", "gu", ".gu", name, sizeof name);
    int64_t gu_dims[2] = {2, inter};
    int32_t gu = add_buffer(f, name, AMK_KIND_ACTIVATION, a_dtype, 2, gu_dims, NULL);
    char note[320];
    snprintf(note, sizeof note, "%s (%u stacked gate|up tiles)",
             m->buffers[gu].name, sets[0].tiles.n);
    int32_t c_gu = add_counter(f, m->buffers[gu].name, note);
    for (uint32_t i = 0; i < sets[0].tiles.n; i++) {
      AmkTask *t = &m->tasks[sets[0].tiles.at[i]];
      int32_t in[AMK_MAX_INPUTS];
      memcpy(in, t->inputs, t->n_inputs * sizeof *in);
      in[1] = w_gu;
      if (quantized)
        in[2] = s_gu;
      set_inputs(m, t, in, t->n_inputs);
      t->outputs = amk_arena_memdup(&m->arena, &gu, sizeof gu);
      t->out_counter = c_gu;
      t->est_bytes *= 2;
      t->est_flops *= 2;
      rename_part(t->label, "gate_proj", "gate_up_proj", "", name, sizeof name);
      t->label = amk_arena_strdup(&m->arena, name);
    }
    int32_t drop = s->out_counter;
    AmkWait wait_gu = {c_gu, amk_value_int(AMK_RW_FULL_JOIN)};
    for (uint32_t i = 0; i < down.n; i++) {
      AmkTask *t = &m->tasks[down.at[i]];
      WaitSet ws;
      /* Dropping one wait and adding one never exceeds the cap. */
      merged_waits(t, &drop, 1, &wait_gu, 1, &ws);
      set_waits(m, t, &ws);
      int32_t in[AMK_MAX_INPUTS];
      memcpy(in, t->inputs, t->n_inputs * sizeof *in);
      in[0] = gu;
      set_inputs(m, t, in, t->n_inputs);
      set_pattern(m, t, amk_rw_pattern(t) == AMK_PATTERN_RESIDUAL
                            ? AMK_PATTERN_SILU_RESIDUAL
                            : AMK_PATTERN_SILU);
      t->est_bytes += width_of(f, gu) * amk_dtype_nbytes(a_dtype, 1);
      t->est_flops += 4 * inter;
    }
    for (uint32_t i = 0; i < sets[1].tiles.n; i++)
      amk_rw_kill_task(&f->edit, sets[1].tiles.at[i]);
    amk_rw_kill_task(&f->edit, pos);
    amk_rw_kill_buffer(&f->edit, gate);
    amk_rw_kill_buffer(&f->edit, up);
    amk_rw_kill_buffer(&f->edit, act);
    amk_rw_kill_buffer(&f->edit, wg);
    amk_rw_kill_buffer(&f->edit, wu);
    for (int i = 0; i < 2 && quantized; i++)
      amk_rw_kill_buffer(&f->edit, scales[i]);
    amk_rw_kill_counter(&f->edit, sets[0].counter);
    amk_rw_kill_counter(&f->edit, sets[1].counter);
    amk_rw_kill_counter(&f->edit, c_act);
    f->done[AMK_FUSION_GATE_UP]++;
    f->done[AMK_FUSION_SILU]++;
  }
}

/* ---- split_down: gate|up tiles take the down projection in ---------------------------- */

/* The stacked gate|up tiles writing gu ([2, I], norm tiles over x with fp
 * weights) and the silu_residual down tiles reading it (all of gu's readers
 * and its counter's waiters, with residual x and one weight Wd [hidden, I]
 * of a one-tensor source, read by nothing else), which write y, one row of
 * hidden elements read by anything: each gate|up tile becomes an mlp tile
 * that adds Wd[:, its columns] . act (and the tile at column 0 also x) into
 * y, now an f32 accumulator, under y's counter. Plain silu down tiles (no
 * residual) into an f32 y, a tensor-parallel rank's partial, become mlp
 * tiles that add no x. The tiles read Wd as its
 * transpose Wdt [I, hidden] (source "KEY^T"), so that a tile's columns are
 * contiguous rows. The down tiles, Wd, gu and its counter go.
 * With AMK_FUSE_SPLIT_DOWN_QUANT=1 weight-only quantized MLPs too (both
 * projections of one qdtype and group): the mlp tiles read [x, qWgu,
 * scales, g, qWd, scales], the down weight and its scales as they are (a
 * tile reads its columns of every row; a transposed quantized copy would
 * need the loader to transpose packed nibbles and their scales), which
 * stay. */
static bool fuse_one_split_down(Fuser *f, uint32_t gu) {
  AmkModule *m = f->m;
  TileSet up, down;
  const AmkBuffer *gub = &m->buffers[gu];
  if (gub->kind != AMK_KIND_ACTIVATION || gub->rank != 2 || dim(gub, 0) != 2 ||
      !tile_set(f, gu, PATTERN_BIT(NORM), &up))
    return false;
  const AmkTask *u0 = &m->tasks[up.tiles.at[0]];
  bool quant = amk_rw_quantized(u0);
  if (quant && (!f->split_down_quant || !quant_form_ok(u0)))
    return false;
  int64_t inter = dim(gub, 1);
  Span readers = span(&f->ix.readers, gu);
  if (inter <= 0 || readers.n == 0 || !span_equal(span(&f->ix.waiters, up.counter), readers) ||
      !tiles_cover(m, up.tiles, inter) || inter < f->split_down_min_cols * (int64_t)up.tiles.n)
    return false;
  const AmkTask *d0 = &m->tasks[readers.at[0]];
  uint32_t y = d0->n_outputs == 1 ? bufpos(f, d0->outputs[0]) : AMK_NO_INDEX;
  if (y == AMK_NO_INDEX || !tile_set(f, y, PATTERN_BIT(SILU_RESIDUAL) | PATTERN_BIT(SILU), &down) ||
      !span_equal(down.tiles, readers) || amk_rw_quantized(d0) != quant ||
      (quant && (!same_quant(u0, d0) || !quant_form_ok(d0))) ||
      m->buffers[y].kind != AMK_KIND_ACTIVATION)
    return false;
  /* Down tiles without the residual (silu): a tensor-parallel rank's share
   * other than rank 0's, an f32 partial the all-reduce sums; the mlp tiles
   * then add no x (AMK_FLAG_MLP_NO_RESIDUAL). Only into f32, so that the
   * output keeps the dtype its readers had. */
  bool residual = down.pattern == AMK_PATTERN_SILU_RESIDUAL;
  if (!residual && m->buffers[y].dtype != AMK_DTYPE_F32)
    return false;
  int32_t x = u0->inputs[0];
  int64_t hidden = width_of(f, x);
  uint32_t wd = tile_weight(f, &down), wgu = tile_weight(f, &up);
  /* Quantized rows may be packed (int4 as bytes): the VM and the validator
   * check their widths; here the row counts. */
  if (hidden <= 0 || wd == AMK_NO_INDEX || wgu == AMK_NO_INDEX ||
      dim(&m->buffers[wd], 0) != hidden || (!quant && dim(&m->buffers[wd], 1) != inter) ||
      dim(&m->buffers[wgu], 0) != 2 * inter || (!quant && dim(&m->buffers[wgu], 1) != hidden) ||
      width_of(f, m->buffers[y].id) != hidden || m->buffers[y].rank > 2 ||
      (m->buffers[y].rank == 2 && dim(&m->buffers[y], 0) != 1))
    return false;
  uint32_t base = quant ? 3 : 2; /* the operand's slot */
  int32_t sgu = quant ? u0->inputs[2] : -1, sd = quant ? d0->inputs[2] : -1;
  for (uint32_t i = 0; i < up.tiles.n; i++) {
    const AmkTask *t = &m->tasks[up.tiles.at[i]];
    if (t->n_inputs != base + 1 || t->inputs[0] != x || t->inputs[1] != m->buffers[wgu].id ||
        (quant && (t->inputs[2] != sgu || !same_quant(t, u0))))
      return false;
  }
  for (uint32_t i = 0; i < down.tiles.n; i++) {
    const AmkTask *t = &m->tasks[down.tiles.at[i]];
    if (t->n_inputs != base + (residual ? 1u : 0u) || t->inputs[0] != gub->id ||
        (residual && t->inputs[base] != x) ||
        (quant && (t->inputs[2] != sd || !same_quant(t, d0))))
      return false;
  }
  /* fp: Wd goes with the down tiles, replaced by its transpose: one tensor
   * (a '+'-joined source would transpose each part), not transposed
   * already. Quantized: Wd and its scales stay, read by the mlp tiles
   * alone. */
  const AmkBuffer *wdb = &m->buffers[wd];
  if (!span_equal(span(&f->ix.readers, wd), down.tiles) ||
      (!quant && (strchr(wdb->source, '+') || strstr(wdb->source, "^T"))))
    return false;
  if (quant) {
    uint32_t sdp = bufpos(f, sd);
    if (sdp == AMK_NO_INDEX || !span_equal(span(&f->ix.readers, sdp), down.tiles))
      return false;
  }
  /* An mlp tile waits where its gate|up tile did and where the down tiles
   * did, less gu's counter (the residual's counter is x's: already there). */
  WaitSet *sets = amk_xmalloc(up.tiles.n * sizeof *sets);
  int32_t drop = m->counters[up.counter].id;
  bool ok = true;
  for (uint32_t i = 0; i < up.tiles.n && ok; i++)
    ok = merged_waits(&m->tasks[up.tiles.at[i]], &drop, 1, d0->waits, d0->n_waits, &sets[i]);
  if (ok) {
    int32_t out = m->buffers[y].id, counter = d0->out_counter;
    char name[256], src[1024];
    int32_t wdt = m->buffers[wd].id;
    /* Bytes a tile streams of the down weight: its columns of each row (a
     * quantized int4 byte holds two), with their scales. */
    int64_t down_row_bytes = amk_dtype_nbytes(wdb->dtype, 1), down_scales_bytes = 0;
    if (quant) {
      int64_t qdtype = 0;
      amk_task_param_int(u0, "qdtype", &qdtype);
      down_row_bytes = qdtype == AMK_QDTYPE_INT4 ? 1 : 2; /* per two columns */
      down_scales_bytes = 2 * hidden * 2;                  /* about two groups a tile */
    } else {
      rename_part(wdb->name, "down_proj.w", "down_proj.wt", ".t", name, sizeof name);
      snprintf(src, sizeof src, "%s^T", wdb->source);
      int64_t wdt_dims[2] = {inter, hidden};
      wdt = add_buffer(f, name, AMK_KIND_WEIGHT, wdb->dtype, 2, wdt_dims, src);
    }
    wdb = NULL; /* add_buffer may move the buffer table */
    for (uint32_t i = 0; i < up.tiles.n; i++) {
      AmkTask *t = &m->tasks[up.tiles.at[i]];
      int32_t in[6] = {x, t->inputs[1], t->inputs[2], wdt, 0, 0};
      if (quant) {
        int32_t qin[6] = {x, t->inputs[1], sgu, t->inputs[3], wdt, sd};
        memcpy(in, qin, sizeof in);
      }
      int64_t n_tile = 0;
      amk_task_param_int(t, "N_tile", &n_tile);
      set_inputs(m, t, in, quant ? 6 : 4);
      set_waits(m, t, &sets[i]);
      set_pattern(m, t, AMK_PATTERN_MLP);
      if (!residual)
        amk_task_set_param(m, t, "flags",
                           amk_value_int(AMK_PATTERN_MLP << AMK_PATTERN_SHIFT |
                                         amk_rw_low_flags(t) | AMK_FLAG_MLP_NO_RESIDUAL));
      t->outputs = amk_arena_memdup(&m->arena, &out, sizeof out);
      t->out_counter = counter;
      t->est_bytes += quant ? hidden * n_tile * down_row_bytes / 2 + down_scales_bytes + hidden * 4
                            : hidden * n_tile * down_row_bytes + hidden * 4;
      t->est_flops += 2 * hidden * n_tile;
      rename_part(t->label, "gate_up_proj", "mlp", "", name, sizeof name);
      t->label = amk_arena_strdup(&m->arena, name);
    }
    m->buffers[y].dtype = AMK_DTYPE_F32;
    for (uint32_t i = 0; i < down.tiles.n; i++)
      amk_rw_kill_task(&f->edit, down.tiles.at[i]);
    amk_rw_kill_buffer(&f->edit, gu);
    if (!quant)
      amk_rw_kill_buffer(&f->edit, wd);
    amk_rw_kill_counter(&f->edit, up.counter);
    f->done[AMK_FUSION_SPLIT_DOWN]++;
  }
  free(sets);
  return ok;
}

static void fuse_split_down(Fuser *f) {
  for (uint32_t b = 0; b < f->m->n_buffers; b++)
    fuse_one_split_down(f, b);
}

/* ---- qkv, rope + kv_append, rope + attention ---------------------------------------- */

static bool same_params(const AmkTask *a, const AmkTask *b) {
  if (a->n_params != b->n_params)
    return false;
  for (uint32_t i = 0; i < a->n_params; i++) {
    const AmkValue *v = amk_task_param(b, a->params[i].key);
    if (!v || !amk_value_equal(v, &a->params[i].value))
      return false;
  }
  return true;
}

/* The CONST inverse-frequency table of a rope spec, made once per spec. Its
 * source names the spec; the runtime computes the values (docs/Fusion.md). */
static int32_t inv_freq_buffer(Fuser *f, const AmkRopeSpec *spec) {
  char source[512];
  char theta[32], factor[32], low[32], high[32], original[32];
  amk_format_float_repr(spec->theta, theta);
  int at = snprintf(source, sizeof source, "amk.rope_inv_freq:head_dim=%d,theta=%s",
                    spec->head_dim, theta);
  if (spec->kind == AMK_ROPE_LLAMA3) {
    amk_format_float_repr(spec->factor, factor);
    amk_format_float_repr(spec->low_freq_factor, low);
    amk_format_float_repr(spec->high_freq_factor, high);
    amk_format_float_repr(spec->original_max_pos, original);
    snprintf(source + at, sizeof source - (size_t)at,
             ",rope_type=llama3,factor=%s,low_freq_factor=%s,high_freq_factor=%s,"
             "original_max_position_embeddings=%s",
             factor, low, high, original);
  }
  for (uint32_t i = 0; i < f->m->n_buffers; i++) {
    const AmkBuffer *b = &f->m->buffers[i];
    if (b->kind == AMK_KIND_CONST && b->source && strcmp(b->source, source) == 0 &&
        !amk_rw_buffer_dead(&f->edit, i))
      return b->id;
  }
  int64_t half = spec->head_dim / 2;
  return add_buffer(f, "rope.inv_freq", AMK_KIND_CONST, AMK_DTYPE_F32, 1, &half, source);
}

typedef struct {
  uint32_t rope_q, rope_k, append_k, append_v;   /* task positions */
  uint32_t q_raw, k_raw, v_raw, q, k_rot, kc, vc; /* buffer positions */
  TileSet proj[3];                                /* q, k, v */
  uint32_t weight[3];
  uint32_t bias[3]; /* NO_INDEX, or all three (Qwen2) */
  uint32_t scales[3]; /* quantized weights' scales, else NO_INDEX */
  Span attention;
  int64_t head_dim, n_heads, n_kv, max_seq;
} AttentionBlock;

static bool is_attention_task(const AmkTask *t) {
  return (t->op == AMK_OP_GEMV_TILE && amk_rw_pattern(t) == AMK_PATTERN_ATTENTION &&
          t->n_inputs == 3) ||
         (t->op == AMK_OP_ATTENTION_TILE && t->n_inputs == 3);
}

/* The single live writer of buffer `b` if it has op `op`, else NO_INDEX. */
static uint32_t sole_writer(const Fuser *f, uint32_t b, AmkOp op) {
  Span w = span(&f->ix.writers, b);
  return w.n == 1 && f->m->tasks[w.at[0]].op == op ? w.at[0] : AMK_NO_INDEX;
}

/* The counter a task signals is waited on only by tasks of `allowed`. */
static bool waited_only_by(const Fuser *f, uint32_t task, Span allowed) {
  uint32_t c = cntpos(f, f->m->tasks[task].out_counter);
  return c != AMK_NO_INDEX && span_is_one(span(&f->ix.producers, c), task) &&
         span_within(span(&f->ix.waiters, c), allowed);
}

static bool match_attention_block(const Fuser *f, const AmkTask *a, AttentionBlock *blk) {
  const AmkModule *m = f->m;
  blk->q = bufpos(f, a->inputs[0]);
  blk->kc = bufpos(f, a->inputs[1]);
  blk->vc = bufpos(f, a->inputs[2]);
  if (blk->q == AMK_NO_INDEX || blk->kc == AMK_NO_INDEX || blk->vc == AMK_NO_INDEX ||
      blk->kc == blk->vc)
    return false;
  blk->rope_q = sole_writer(f, blk->q, AMK_OP_ROPE);
  blk->append_k = sole_writer(f, blk->kc, AMK_OP_KV_APPEND);
  blk->append_v = sole_writer(f, blk->vc, AMK_OP_KV_APPEND);
  if (blk->rope_q == AMK_NO_INDEX || blk->append_k == AMK_NO_INDEX ||
      blk->append_v == AMK_NO_INDEX)
    return false;
  const AmkTask *rq = &m->tasks[blk->rope_q], *ak = &m->tasks[blk->append_k],
                *av = &m->tasks[blk->append_v];
  if (rq->n_inputs != 2 || ak->n_inputs != 2 || av->n_inputs != 2 ||
      ak->inputs[1] != a->inputs[1] || av->inputs[1] != a->inputs[2])
    return false;
  blk->k_rot = bufpos(f, ak->inputs[0]);
  blk->rope_k = blk->k_rot == AMK_NO_INDEX ? AMK_NO_INDEX
                                           : sole_writer(f, blk->k_rot, AMK_OP_ROPE);
  if (blk->rope_k == AMK_NO_INDEX)
    return false;
  const AmkTask *rk = &m->tasks[blk->rope_k];
  if (rk->n_inputs != 2 || rk->inputs[1] != rq->inputs[1] || !same_params(rq, rk))
    return false;
  blk->q_raw = bufpos(f, rq->inputs[0]);
  blk->k_raw = bufpos(f, rk->inputs[0]);
  blk->v_raw = bufpos(f, av->inputs[0]);
  uint32_t raw[3] = {blk->q_raw, blk->k_raw, blk->v_raw};
  uint32_t consumer[3] = {blk->rope_q, blk->rope_k, blk->append_v};
  for (int i = 0; i < 3; i++) {
    if (raw[i] == AMK_NO_INDEX ||
        !tile_set(f, raw[i], PATTERN_BIT(PLAIN) | PATTERN_BIT(NORM), &blk->proj[i]) ||
        !span_is_one(span(&f->ix.readers, raw[i]), consumer[i]) ||
        !span_is_one(span(&f->ix.waiters, blk->proj[i].counter), consumer[i]))
      return false;
    blk->weight[i] = tile_weight(f, &blk->proj[i]);
    if (blk->weight[i] == AMK_NO_INDEX ||
        !span_equal(span(&f->ix.readers, blk->weight[i]), blk->proj[i].tiles))
      return false;
    bool bias_ok;
    blk->bias[i] = tile_bias(f, &blk->proj[i], &bias_ok);
    if (!bias_ok || (i > 0 && (blk->bias[i] == AMK_NO_INDEX) != (blk->bias[0] == AMK_NO_INDEX)))
      return false;
  }
  if (blk->q_raw == blk->k_raw || blk->k_raw == blk->v_raw || blk->q_raw == blk->v_raw ||
      blk->weight[0] == blk->weight[1] || blk->weight[1] == blk->weight[2] ||
      blk->weight[0] == blk->weight[2] || !same_reduction(f, blk->proj, 3))
    return false;
  /* One dtype to stack; quantized parts (one format: same_reduction) stack
   * their scales too. */
  for (int i = 0; i < 3; i++) {
    const AmkBuffer *w = &m->buffers[blk->weight[i]];
    if (w->dtype != m->buffers[blk->weight[0]].dtype ||
        dim(w, 1) != dim(&m->buffers[blk->weight[0]], 1))
      return false;
    blk->scales[i] = tile_scales(f, &blk->proj[i], dim(w, 0));
  }
  if (amk_rw_quantized(&m->tasks[blk->proj[0].tiles.at[0]]) &&
      !scales_stack(f, blk->scales, 3))
    return false;
  /* Every reader of the rotated q is an attention task over the same caches. */
  blk->attention = span(&f->ix.readers, blk->q);
  for (uint32_t i = 0; i < blk->attention.n; i++) {
    const AmkTask *t = &m->tasks[blk->attention.at[i]];
    if (!is_attention_task(t) || t->inputs[0] != a->inputs[0] ||
        t->inputs[1] != a->inputs[1] || t->inputs[2] != a->inputs[2])
      return false;
  }
  Span k_readers = span(&f->ix.readers, blk->kc), v_readers = span(&f->ix.readers, blk->vc);
  if (k_readers.n != blk->attention.n + 1 || v_readers.n != blk->attention.n + 1 ||
      !span_within(blk->attention, k_readers) || !span_within(blk->attention, v_readers) ||
      !span_is_one(span(&f->ix.readers, blk->k_rot), blk->append_k) ||
      !waited_only_by(f, blk->rope_q, blk->attention) ||
      !waited_only_by(f, blk->append_k, blk->attention) ||
      !waited_only_by(f, blk->append_v, blk->attention) ||
      !span_is_one(span(&f->ix.waiters, cntpos(f, rk->out_counter)), blk->append_k) ||
      !span_is_one(span(&f->ix.producers, cntpos(f, rk->out_counter)), blk->rope_k))
    return false;
  if (!amk_task_param_int(a, "head_dim", &blk->head_dim) ||
      !amk_task_param_int(a, "n_heads", &blk->n_heads) ||
      !amk_task_param_int(a, "n_kv_heads", &blk->n_kv) || blk->head_dim <= 0 ||
      blk->head_dim % 2 || blk->n_kv <= 0 || blk->n_heads % blk->n_kv)
    return false;
  const AmkBuffer *kc = &m->buffers[blk->kc], *vc = &m->buffers[blk->vc];
  blk->max_seq = dim(kc, 0);
  return kc->rank == 3 && vc->rank == 3 && blk->max_seq > 0 && dim(vc, 0) == blk->max_seq &&
         dim(kc, 1) == blk->n_kv && dim(vc, 1) == blk->n_kv && dim(kc, 2) == blk->head_dim &&
         dim(vc, 2) == blk->head_dim && kc->dtype == vc->dtype &&
         width_of(f, rq->inputs[0]) == blk->n_heads * blk->head_dim &&
         width_of(f, rk->inputs[0]) == blk->n_kv * blk->head_dim &&
         width_of(f, av->inputs[0]) == blk->n_kv * blk->head_dim;
}

static void rewrite_attention_block(Fuser *f, AttentionBlock *blk) {
  AmkModule *m = f->m;
  /* Copies: adding tasks below moves the task array. */
  const AmkTask rq_copy = m->tasks[blk->rope_q], ak_copy = m->tasks[blk->append_k];
  const AmkTask *rq = &rq_copy, *ak = &ak_copy;
  AmkRopeSpec spec;
  const char *why = NULL;
  if (!amk_rope_spec_from_task(rq, &spec, &why))
    return;
  int64_t hd = blk->head_dim, nq = blk->n_heads * hd, nkv = blk->n_kv * hd;
  int64_t width = nq + 2 * nkv;
  const AmkBuffer *wq = &m->buffers[blk->weight[0]];
  char name[256], src[1536], note[320], prefix[128];
  snprintf(src, sizeof src, "%s+%s+%s", wq->source, m->buffers[blk->weight[1]].source,
           m->buffers[blk->weight[2]].source);
  rename_part(wq->name, "q_proj", "qkv_proj", ".qkv", name, sizeof name);
  int64_t w_dims[2] = {width, dim(wq, 1)};
  int32_t w_qkv = add_buffer(f, name, AMK_KIND_WEIGHT, wq->dtype, 2, w_dims, src);
  int32_t b_qkv = -1;
  if (blk->bias[0] != AMK_NO_INDEX) {
    const AmkBuffer *bq = &m->buffers[blk->bias[0]];
    snprintf(src, sizeof src, "%s+%s+%s", bq->source, m->buffers[blk->bias[1]].source,
             m->buffers[blk->bias[2]].source);
    rename_part(bq->name, "q_proj", "qkv_proj", ".qkv_bias", name, sizeof name);
    b_qkv = add_buffer(f, name, AMK_KIND_WEIGHT, bq->dtype, 1, &width, src);
  }
  bool quantized = blk->scales[0] != AMK_NO_INDEX;
  int32_t s_qkv = quantized ? add_stacked_scales(f, blk->scales, 3, w_qkv) : -1;
  const AmkBuffer *q_raw = &m->buffers[blk->q_raw];
  snprintf(name, sizeof name, "%skv", q_raw->name ? q_raw->name : "q");
  int64_t qkv_dims[2] = {1, width};
  int32_t qkv = add_buffer(f, name, AMK_KIND_ACTIVATION, m->buffers[blk->q_raw].dtype, 2,
                           qkv_dims, NULL);
  snprintf(note, sizeof note, "%s (%u tiles)", m->buffers[qkv].name,
           blk->proj[0].tiles.n + blk->proj[1].tiles.n + blk->proj[2].tiles.n);
  int32_t c_qkv = add_counter(f, m->buffers[qkv].name, note);
  int32_t inv_freq = inv_freq_buffer(f, &spec);
  /* Per-head caches [max_seq, 2, head_dim], one writer and one counter each,
   * when every attention tile stays inside one KV head's group; else (an
   * untiled attention over every head) one combined cache
   * [max_seq, 2, n_kv * head_dim] whose writers share a counter. */
  int64_t group = blk->n_heads / blk->n_kv;
  bool per_head = blk->n_kv > 1;
  for (uint32_t i = 0; i < blk->attention.n && per_head; i++) {
    const AmkTask *t = &m->tasks[blk->attention.at[i]];
    int64_t off = 0, n = 0;
    per_head = t->op == AMK_OP_GEMV_TILE && amk_task_param_int(t, "n_off", &off) &&
               amk_task_param_int(t, "N_tile", &n) && off >= 0 && n > 0 &&
               off / group == (off + n - 1) / group;
  }
  int64_t n_caches = per_head ? blk->n_kv : 1;
  int32_t *caches = amk_xcalloc((size_t)n_caches, sizeof *caches);
  int32_t *c_kv = amk_xcalloc((size_t)n_caches, sizeof *c_kv);
  label_prefix(m->buffers[blk->kc].name, prefix, sizeof prefix);
  for (int64_t c = 0; c < n_caches; c++) {
    if (per_head)
      snprintf(name, sizeof name, "%skv_cache.h%lld", prefix, (long long)c);
    else
      snprintf(name, sizeof name, "%skv_cache", prefix);
    int64_t cache_dims[3] = {blk->max_seq, 2, per_head ? hd : nkv};
    caches[c] = add_buffer(f, name, AMK_KIND_KV_CACHE, m->buffers[blk->kc].dtype, 3,
                           cache_dims, NULL);
    snprintf(note, sizeof note, "%s (%lld rope_kv task%s)", m->buffers[caches[c]].name,
             (long long)(per_head ? 1 : blk->n_kv), per_head || blk->n_kv == 1 ? "" : "s");
    c_kv[c] = add_counter(f, m->buffers[caches[c]].name, note);
  }

  /* q, k and v tiles now write column ranges of one qkv vector. */
  int64_t shift[3] = {0, nq, nq + nkv};
  for (int p = 0; p < 3; p++)
    for (uint32_t i = 0; i < blk->proj[p].tiles.n; i++) {
      AmkTask *t = &m->tasks[blk->proj[p].tiles.at[i]];
      int64_t off = 0;
      amk_task_param_int(t, "n_off", &off);
      amk_task_set_param(m, t, "n_off", amk_value_int(off + shift[p]));
      /* [x, W(, b or g)] or [x, qW, scales(, g)]. */
      int32_t in[AMK_MAX_INPUTS];
      memcpy(in, t->inputs, t->n_inputs * sizeof *in);
      in[1] = w_qkv;
      if (quantized)
        in[2] = s_qkv;
      else if (b_qkv >= 0)
        in[2] = b_qkv;
      set_inputs(m, t, in, t->n_inputs);
      t->outputs = amk_arena_memdup(&m->arena, &qkv, sizeof qkv);
      t->out_counter = c_qkv;
    }

  /* One rope_kv task per KV head, in place of the k append. */
  int64_t pos = 0;
  amk_task_param_int(ak, "pos", &pos);
  int32_t pos_buffer = rq->inputs[1];
  label_prefix(ak->label, prefix, sizeof prefix);
  int64_t elem = amk_dtype_nbytes(m->buffers[blk->kc].dtype, 1);
  for (int64_t h = 0; h < blk->n_kv; h++) {
    AmkTask *t = amk_rw_add_task(m, &f->edit, blk->append_k);
    t->op = AMK_OP_GEMV_TILE;
    int32_t in[3] = {qkv, inv_freq, pos_buffer};
    set_inputs(m, t, in, 3);
    t->n_outputs = 1;
    t->outputs = amk_arena_memdup(&m->arena, &caches[per_head ? h : 0], sizeof *caches);
    t->out_counter = c_kv[per_head ? h : 0];
    WaitSet ws = {.n = 1};
    ws.w[0] = (AmkWait){c_qkv, amk_value_int(AMK_RW_FULL_JOIN)};
    set_waits(m, t, &ws);
    amk_task_set_param(m, t, "K", amk_value_int(width));
    amk_task_set_param(m, t, "N_tile", amk_value_int(1));
    amk_task_set_param(m, t, "n_off", amk_value_int(h));
    amk_task_set_param(m, t, "flags",
                       amk_value_int((int64_t)AMK_PATTERN_ROPE_KV << AMK_PATTERN_SHIFT));
    amk_task_set_param(m, t, "head_dim", amk_value_int(hd));
    amk_task_set_param(m, t, "n_heads", amk_value_int(blk->n_heads));
    amk_task_set_param(m, t, "n_kv_heads", amk_value_int(blk->n_kv));
    amk_task_set_param(m, t, "pos", amk_value_int(pos));
    t->est_bytes = 4 * hd * elem + hd * 2;
    t->est_flops = 6 * hd;
    snprintf(name, sizeof name, "%srope_kv[kv%lld]", prefix, (long long)h);
    t->label = amk_arena_strdup(&m->arena, name);
  }

  /* Attention tiles read q from qkv (rotating it) and their KV head's cache
   * (or the combined one). By default (kv_from_qkv) they also take the
   * step's own key and value from qkv (flags bit AMK_FLAG_KV_FROM_QKV) and
   * read the cache only below pos, so they wait on the qkv tiles and the
   * rope_kv tasks run beside them, off the chain: nothing this step reads
   * the row they write. Else they wait only for their cache's writer(s),
   * the qkv tiles being ancestors through them. The block is one token
   * row (q is n_heads x head_dim), a decode step. */
  int32_t drop[3] = {rq->out_counter, ak->out_counter, m->tasks[blk->append_v].out_counter};
  for (uint32_t i = 0; i < blk->attention.n; i++) {
    AmkTask *t = &m->tasks[blk->attention.at[i]];
    if (t->op == AMK_OP_ATTENTION_TILE) { /* untiled: one tile of every head */
      t->op = AMK_OP_GEMV_TILE;
      amk_task_set_param(m, t, "N_tile", amk_value_int(blk->n_heads));
      amk_task_set_param(m, t, "n_off", amk_value_int(0));
    }
    int64_t off = 0;
    amk_task_param_int(t, "n_off", &off);
    int64_t c = per_head ? off / group : 0;
    amk_task_set_param(m, t, "K", amk_value_int(width));
    set_pattern(m, t, AMK_PATTERN_ATTENTION_ROPE);
    if (f->kv_from_qkv) {
      int64_t flags = 0;
      amk_task_param_int(t, "flags", &flags);
      amk_task_set_param(m, t, "flags", amk_value_int(flags | AMK_FLAG_KV_FROM_QKV));
    }
    int32_t in[3] = {qkv, inv_freq, caches[c]};
    set_inputs(m, t, in, 3);
    AmkWait wait_kv = {f->kv_from_qkv ? c_qkv : c_kv[c], amk_value_int(AMK_RW_FULL_JOIN)};
    WaitSet ws;
    merged_waits(t, drop, 3, &wait_kv, 1, &ws);
    set_waits(m, t, &ws);
  }
  free(caches);
  free(c_kv);
  uint32_t dead_tasks[4] = {blk->rope_q, blk->rope_k, blk->append_k, blk->append_v};
  for (int i = 0; i < 4; i++) {
    amk_rw_kill_counter(&f->edit, cntpos(f, m->tasks[dead_tasks[i]].out_counter));
    amk_rw_kill_task(&f->edit, dead_tasks[i]);
  }
  uint32_t dead_buffers[10] = {blk->q_raw, blk->k_raw, blk->v_raw, blk->q, blk->k_rot,
                               blk->kc, blk->vc, blk->weight[0], blk->weight[1],
                               blk->weight[2]};
  for (int i = 0; i < 10; i++)
    amk_rw_kill_buffer(&f->edit, dead_buffers[i]);
  for (int i = 0; i < 3 && b_qkv >= 0; i++)
    amk_rw_kill_buffer(&f->edit, blk->bias[i]);
  for (int i = 0; i < 3 && quantized; i++)
    amk_rw_kill_buffer(&f->edit, blk->scales[i]);
  for (int p = 0; p < 3; p++)
    amk_rw_kill_counter(&f->edit, blk->proj[p].counter);
  f->done[AMK_FUSION_QKV]++;
  f->done[AMK_FUSION_ROPE_KV]++;
  f->done[AMK_FUSION_ATTENTION_ROPE]++;
}

static void fuse_attention(Fuser *f) {
  AmkModule *m = f->m;
  uint32_t n = m->n_tasks;
  uint8_t *seen_q = amk_xcalloc(m->n_buffers ? m->n_buffers : 1, 1);
  uint32_t n_seen = m->n_buffers;
  for (uint32_t pos = 0; pos < n; pos++) {
    if (amk_rw_task_dead(&f->edit, pos) || !is_attention_task(&m->tasks[pos]))
      continue;
    uint32_t q = bufpos(f, m->tasks[pos].inputs[0]);
    if (q == AMK_NO_INDEX || q >= n_seen || seen_q[q])
      continue;
    seen_q[q] = 1;
    AttentionBlock blk;
    AmkTask a = m->tasks[pos];
    if (match_attention_block(f, &a, &blk))
      rewrite_attention_block(f, &blk);
  }
  free(seen_q);
}

/* ---- combine + gemv ------------------------------------------------------------------ */

/* Partials a combine_residual tile can take: its inputs hold W and r too. */
enum { MAX_FOLDED_PARTIALS = AMK_MAX_INPUTS - 2 };

/* The combine's partials: 1..MAX_FOLDED_PARTIALS distinct activations of
 * [n_heads, head_dim + 2] elements each, none of them `out`. */
static bool foldable_partials(const Fuser *f, const AmkTask *comb, int64_t per_partial) {
  if (comb->n_inputs < 1 || comb->n_inputs > MAX_FOLDED_PARTIALS)
    return false;
  for (uint32_t i = 0; i < comb->n_inputs; i++) {
    uint32_t b = bufpos(f, comb->inputs[i]);
    int64_t numel;
    if (b == AMK_NO_INDEX || comb->inputs[i] == comb->outputs[0] ||
        f->m->buffers[b].kind != AMK_KIND_ACTIVATION ||
        !amk_buffer_numel(&f->m->buffers[b], &numel) || numel != per_partial)
      return false;
    for (uint32_t j = 0; j < i; j++)
      if (comb->inputs[j] == comb->inputs[i])
        return false;
  }
  return true;
}

/* A reader of the combine's output y that can take the combine in: a
 * residual tile, fp [y, W, r] or weight-only quantized [y, qW, scales, r],
 * with room for every partial in its inputs, reducing y (K = its n_heads *
 * head_dim elements) into an output of y's dtype (the combine then rounds
 * to the dtype y had), reading no partial or y as W, scales or r. */
static bool folds_combine(const Fuser *f, const AmkTask *t, const AmkTask *comb,
                          int64_t width) {
  int64_t k;
  uint32_t out = t->n_outputs == 1 ? bufpos(f, t->outputs[0]) : AMK_NO_INDEX;
  uint32_t y = bufpos(f, comb->outputs[0]);
  uint32_t more = AMK_COMBINE_MORE_PARTIALS(amk_rw_quantized(t)); /* x, W(, scales), r */
  if (t->op != AMK_OP_GEMV_TILE || amk_rw_pattern(t) != AMK_PATTERN_RESIDUAL ||
      t->n_inputs != more || comb->n_inputs + more - 1 > AMK_MAX_INPUTS ||
      out == AMK_NO_INDEX || t->inputs[0] != comb->outputs[0] ||
      !amk_task_param_int(t, "K", &k) || k != width ||
      f->m->buffers[out].dtype != f->m->buffers[y].dtype)
    return false;
  for (uint32_t j = 1; j < more; j++) {
    if (t->inputs[j] == comb->outputs[0])
      return false;
    for (uint32_t i = 0; i < comb->n_inputs; i++)
      if (t->inputs[j] == comb->inputs[i])
        return false;
  }
  return true;
}

static void fuse_combines(Fuser *f) {
  AmkModule *m = f->m;
  uint32_t n = m->n_tasks;
  for (uint32_t pos = 0; pos < n; pos++) {
    const AmkTask *comb = &m->tasks[pos];
    int64_t head_dim, n_heads, numel;
    if (amk_rw_task_dead(&f->edit, pos) || comb->op != AMK_OP_ATTENTION_COMBINE ||
        comb->n_outputs != 1 || !amk_task_param_int(comb, "head_dim", &head_dim) ||
        !amk_task_param_int(comb, "n_heads", &n_heads) || head_dim <= 0 || n_heads <= 0 ||
        head_dim > INT32_MAX / n_heads || !foldable_partials(f, comb, n_heads * (head_dim + 2)))
      continue;
    uint32_t y;
    Span readers;
    if (!sole_intermediate(f, comb, pos, &y, &readers) ||
        !amk_buffer_numel(&m->buffers[y], &numel) || numel != n_heads * head_dim)
      continue;
    bool ok = true;
    WaitSet *sets = amk_xmalloc(readers.n * sizeof *sets);
    int32_t drop = comb->out_counter;
    for (uint32_t i = 0; i < readers.n && ok; i++) {
      const AmkTask *t = &m->tasks[readers.at[i]];
      ok = folds_combine(f, t, comb, numel) &&
           merged_waits(t, &drop, 1, comb->waits, comb->n_waits, &sets[i]);
    }
    if (ok) {
      /* Inputs [p0, W, r, p1, .., p{P-1}] (or [p0, qW, scales, r, p1, ..]):
       * p0 in the GEMV's x slot, the rest after the residual's. */
      int32_t in[AMK_MAX_INPUTS];
      in[0] = comb->inputs[0];
      int64_t partial_bytes = 0;
      for (uint32_t p = 0; p < comb->n_inputs; p++)
        partial_bytes += amk_dtype_nbytes(m->buffers[bufpos(f, comb->inputs[p])].dtype,
                                          n_heads * (head_dim + 2));
      for (uint32_t i = 0; i < readers.n; i++) {
        AmkTask *t = &m->tasks[readers.at[i]];
        uint32_t more = AMK_COMBINE_MORE_PARTIALS(amk_rw_quantized(t));
        uint32_t n_in = comb->n_inputs + more - 1;
        for (uint32_t j = 1; j < more; j++)
          in[j] = t->inputs[j];
        for (uint32_t p = 1; p < comb->n_inputs; p++)
          in[p + more - 1] = comb->inputs[p];
        set_inputs(m, t, in, n_in);
        set_waits(m, t, &sets[i]);
        set_pattern(m, t, AMK_PATTERN_COMBINE_RESIDUAL);
        amk_task_set_param(m, t, "head_dim", amk_value_int(head_dim));
        amk_task_set_param(m, t, "n_heads", amk_value_int(n_heads));
        /* Each tile reads every partial and recombines every head. */
        t->est_bytes += partial_bytes;
        t->est_flops += 4 * (int64_t)comb->n_inputs * numel;
      }
      amk_rw_kill_task(&f->edit, pos);
      amk_rw_kill_buffer(&f->edit, y);
      amk_rw_kill_counter(&f->edit, cntpos(f, comb->out_counter));
      f->done[AMK_FUSION_COMBINE]++;
    }
    free(sets);
  }
}

/* ---- split_o: attention tiles take the o projection in ------------------------------ */

/* The SMs split_o sizes its tiles for: the target's, else an H100's or
 * H200's 132. */
enum { SPLIT_O_DEFAULT_SMS = 132 };

/* Column slices per query head: the largest divisor S of head_dim with
 * n_heads * S <= the SMs (about one attention_o tile per SM), at least 1. */
static int64_t split_o_slices(const AmkModule *m, int64_t n_heads, int64_t head_dim,
                              int64_t cap) {
  int64_t sms = m->target && m->target->num_sms > 0 && m->target->num_sms <= 1000000
                    ? m->target->num_sms
                    : SPLIT_O_DEFAULT_SMS;
  int64_t most = sms / n_heads < head_dim ? sms / n_heads : head_dim;
  if (cap > 0 && most > cap)
    most = cap;
  for (int64_t s = most; s > 1; s--)
    if (head_dim % s == 0)
      return s;
  return 1;
}

/* Adds `add` to `s`, less waits on `drop` (a counter already waited on
 * keeps its wait). False when over the ABI cap. */
static bool add_waits(WaitSet *s, const AmkWait *add, uint32_t n, int32_t drop) {
  for (uint32_t i = 0; i < n; i++) {
    bool skip = add[i].counter == drop;
    for (uint32_t k = 0; k < s->n && !skip; k++)
      skip = s->w[k].counter == add[i].counter;
    if (skip)
      continue;
    if (s->n == AMK_MAX_WAITS)
      return false;
    s->w[s->n++] = add[i];
  }
  return true;
}

static bool any_dead(const Fuser *f, Span tasks) {
  for (uint32_t i = 0; i < tasks.n; i++)
    if (amk_rw_task_dead(&f->edit, tasks.at[i]))
      return true;
  return false;
}

/* The attention_rope tiles writing `attn` (one row of n_heads * head_dim
 * elements of qkv's dtype; unpartitioned, row pos from qkv: low flags
 * exactly AMK_FLAG_KV_FROM_QKV; each reading its KV head's own cache;
 * together covering every query head once)
 * and the residual tiles reading it (fp [attn, Wo, x]; all of attn's
 * readers and its counter's waiters), which write y, one row of hidden
 * elements read only by mlp tiles (split_down's; all of y's readers and its
 * counter's waiters), with Wo [hidden, n_heads * head_dim] of a one-tensor
 * source read by those tiles alone: both become attention_o tiles, S per
 * query head h (split_o_slices), the one at columns
 * [h * head_dim + s * N_tile, + N_tile) of the attention output computing
 * the attention of h and adding Wo[:, its columns] . o (and the tile at
 * column 0 also x) into y, now an f32 accumulator, under y's counter. The
 * tiles read Wo as its transpose Wot [n_heads * head_dim, hidden] (source
 * "KEY^T"), so that a tile's columns are contiguous rows. The attention
 * and residual tiles, attn, Wo and attn's counter go. */
static bool fuse_one_split_o(Fuser *f, uint32_t attn) {
  AmkModule *m = f->m;
  const AmkBuffer *ab = &m->buffers[attn];
  TileSet at, o;
  if (ab->kind != AMK_KIND_ACTIVATION || ab->rank < 1 || ab->rank > 2 ||
      (ab->rank == 2 && dim(ab, 0) != 1) ||
      !tile_set(f, attn, PATTERN_BIT(ATTENTION_ROPE), &at) || any_dead(f, at.tiles))
    return false;
  const AmkTask *a0 = &m->tasks[at.tiles.at[0]];
  int64_t head_dim, n_heads, n_kv, k;
  if (!amk_task_param_int(a0, "head_dim", &head_dim) ||
      !amk_task_param_int(a0, "n_heads", &n_heads) ||
      !amk_task_param_int(a0, "n_kv_heads", &n_kv) || !amk_task_param_int(a0, "K", &k) ||
      head_dim <= 0 || n_heads <= 0 || n_kv <= 0 || n_heads % n_kv ||
      head_dim > INT32_MAX / n_heads || a0->n_inputs != 3)
    return false;
  int64_t width = n_heads * head_dim;
  int32_t qkv = a0->inputs[0], inv_freq = a0->inputs[1];
  uint32_t qkvp = bufpos(f, qkv);
  if (width_of(f, ab->id) != width || qkvp == AMK_NO_INDEX || width_of(f, qkv) != k ||
      m->buffers[qkvp].dtype != ab->dtype)
    return false;
  /* Each tile reads its KV head's own cache [max_seq, 2, head_dim] (not the
   * combined cache of an untiled attention, which spans every KV head). */
  for (uint32_t i = 0; i < at.tiles.n; i++) {
    const AmkTask *t = &m->tasks[at.tiles.at[i]];
    uint32_t cache = t->n_inputs == 3 ? bufpos(f, t->inputs[2]) : AMK_NO_INDEX;
    if (cache == AMK_NO_INDEX || t->inputs[0] != qkv || t->inputs[1] != inv_freq ||
        t->inputs[2] == ab->id || amk_rw_low_flags(t) != AMK_FLAG_KV_FROM_QKV ||
        !same_param(t, a0, "head_dim") || !same_param(t, a0, "n_heads") ||
        !same_param(t, a0, "n_kv_heads") || !same_param(t, a0, "K") ||
        m->buffers[cache].kind != AMK_KIND_KV_CACHE || m->buffers[cache].rank != 3 ||
        dim(&m->buffers[cache], 1) != 2 || dim(&m->buffers[cache], 2) != head_dim)
      return false;
  }
  if (!tiles_cover(m, at.tiles, n_heads))
    return false;

  /* The o projection: residual tiles, all of attn's readers and waiters. */
  Span readers = span(&f->ix.readers, attn);
  if (readers.n == 0 || !span_equal(span(&f->ix.waiters, at.counter), readers) ||
      any_dead(f, readers))
    return false;
  const AmkTask *r0 = &m->tasks[readers.at[0]];
  uint32_t y = r0->n_outputs == 1 ? bufpos(f, r0->outputs[0]) : AMK_NO_INDEX;
  if (y == AMK_NO_INDEX || y == attn || !tile_set(f, y, PATTERN_BIT(RESIDUAL), &o) ||
      !span_equal(o.tiles, readers) || amk_rw_quantized(r0) ||
      m->buffers[y].kind != AMK_KIND_ACTIVATION || r0->n_inputs != 3)
    return false;
  int32_t x = r0->inputs[2], y_id = m->buffers[y].id;
  int64_t hidden = width_of(f, y_id);
  uint32_t wo = tile_weight(f, &o);
  if (hidden <= 0 || m->buffers[y].rank > 2 ||
      (m->buffers[y].rank == 2 && dim(&m->buffers[y], 0) != 1) || wo == AMK_NO_INDEX ||
      dim(&m->buffers[wo], 0) != hidden || dim(&m->buffers[wo], 1) != width ||
      x == ab->id || x == y_id || x == qkv || width_of(f, x) != hidden ||
      !tiles_cover(m, o.tiles, hidden))
    return false;
  for (uint32_t i = 0; i < o.tiles.n; i++) {
    const AmkTask *t = &m->tasks[o.tiles.at[i]];
    int64_t kt;
    if (t->n_inputs != 3 || t->inputs[0] != ab->id || t->inputs[2] != x ||
        !amk_task_param_int(t, "K", &kt) || kt != width)
      return false;
  }
  /* Wo goes with the residual tiles, replaced by its transpose: one tensor
   * (a '+'-joined source would transpose each part), not transposed already. */
  const AmkBuffer *wob = &m->buffers[wo];
  if (!span_equal(span(&f->ix.readers, wo), o.tiles) || strchr(wob->source, '+') ||
      strstr(wob->source, "^T"))
    return false;
  /* y: read only by tiles that wait on its counter and take it as an f32
   * input, each reading it once: split_down's mlp tiles (as their x), or
   * an MLP split_down left, its norm-fused gate|up tiles (their x: on
   * average at least split_o_min_cols columns each) and its down tiles
   * (their residual operand). */
  Span y_readers = span(&f->ix.readers, y);
  if (y_readers.n == 0 || !span_equal(span(&f->ix.waiters, o.counter), y_readers) ||
      any_dead(f, y_readers))
    return false;
  int64_t norm_tiles = 0, norm_cols = 0;
  for (uint32_t i = 0; i < y_readers.n; i++) {
    const AmkTask *t = &m->tasks[y_readers.at[i]];
    if (t->op != AMK_OP_GEMV_TILE)
      return false;
    int64_t pattern = amk_rw_pattern(t), cols;
    uint32_t y_at = pattern == AMK_PATTERN_MLP || pattern == AMK_PATTERN_NORM ? 0
                    : pattern == AMK_PATTERN_RESIDUAL || pattern == AMK_PATTERN_SILU_RESIDUAL
                        ? base_inputs(t)
                        : UINT32_MAX;
    if (y_at >= t->n_inputs || t->inputs[y_at] != y_id)
      return false;
    for (uint32_t j = 0; j < t->n_inputs; j++)
      if (j != y_at && t->inputs[j] == y_id)
        return false;
    if (pattern == AMK_PATTERN_NORM) {
      if (!amk_task_param_int(t, "N_tile", &cols) || cols <= 0)
        return false;
      norm_tiles++;
      norm_cols += cols;
    }
  }
  if (norm_tiles > 0 && norm_cols < f->split_o_min_cols * norm_tiles)
    return false;

  /* An attention_o tile waits where its head's attention tile did and where
   * the residual tiles did, less attn's counter; within the cap. */
  int32_t drop = m->counters[at.counter].id;
  WaitSet o_waits = {.n = 0};
  for (uint32_t i = 0; i < o.tiles.n; i++) {
    const AmkTask *t = &m->tasks[o.tiles.at[i]];
    if (!add_waits(&o_waits, t->waits, t->n_waits, drop))
      return false;
  }
  /* Copies: adding tasks below moves the task array. */
  AmkTask *heads = amk_xmalloc(at.tiles.n * sizeof *heads);
  WaitSet *sets = amk_xmalloc(at.tiles.n * sizeof *sets);
  bool ok = true;
  for (uint32_t i = 0; i < at.tiles.n && ok; i++) {
    heads[i] = m->tasks[at.tiles.at[i]];
    ok = merged_waits(&heads[i], &drop, 1, o_waits.w, o_waits.n, &sets[i]);
  }
  if (ok) {
    int32_t counter = r0->out_counter;
    int64_t w_elem = amk_dtype_nbytes(wob->dtype, 1);
    int64_t x_elem = amk_dtype_nbytes(m->buffers[bufpos(f, x)].dtype, 1);
    char name[256], src[1024], prefix[128];
    rename_part(wob->name, "o_proj.w", "o_proj.wt", ".t", name, sizeof name);
    snprintf(src, sizeof src, "%s^T", wob->source);
    int64_t wot_dims[2] = {width, hidden};
    int32_t wot = add_buffer(f, name, AMK_KIND_WEIGHT, wob->dtype, 2, wot_dims, src);
    wob = NULL; /* add_buffer may move the buffer table */
    ab = NULL;
    int64_t slices = split_o_slices(m, n_heads, head_dim, f->split_o_slices),
            n_tile = head_dim / slices;
    uint32_t anchor = at.tiles.at[0];
    for (int64_t h = 0; h < n_heads; h++) {
      /* The attention tile of query head h (tiles_cover: exactly one). */
      uint32_t i = 0;
      int64_t off = 0, n = 0;
      for (; i < at.tiles.n; i++) {
        amk_task_param_int(&heads[i], "n_off", &off);
        amk_task_param_int(&heads[i], "N_tile", &n);
        if (off <= h && h < off + n)
          break;
      }
      const AmkTask *a = &heads[i];
      label_prefix(a->label, prefix, sizeof prefix);
      for (int64_t s = 0; s < slices; s++) {
        AmkTask *t = amk_rw_add_task(m, &f->edit, anchor);
        int64_t col = h * head_dim + s * n_tile;
        t->op = AMK_OP_GEMV_TILE;
        int32_t in[5] = {qkv, wot, inv_freq, a->inputs[2], x};
        set_inputs(m, t, in, 5);
        t->n_outputs = 1;
        t->outputs = amk_arena_memdup(&m->arena, &y_id, sizeof y_id);
        t->out_counter = counter;
        set_waits(m, t, &sets[i]);
        amk_rw_copy_params(m, t, a);
        amk_task_set_param(m, t, "K", amk_value_int(k));
        amk_task_set_param(m, t, "N_tile", amk_value_int(n_tile));
        amk_task_set_param(m, t, "n_off", amk_value_int(col));
        amk_task_set_param(m, t, "flags",
                           amk_value_int((int64_t)AMK_PATTERN_ATTENTION_O
                                             << AMK_PATTERN_SHIFT |
                                         AMK_FLAG_KV_FROM_QKV));
        /* Every slice attends over head h's whole window (its share of the
         * attention tile's estimate), then streams N_tile rows of Wot and
         * adds hidden f32 elements (the tile at column 0 also reads x). */
        t->est_bytes = a->est_bytes / n + n_tile * hidden * w_elem + hidden * 4 +
                       (col == 0 ? hidden * x_elem : 0);
        t->est_flops = a->est_flops / n + 2 * n_tile * hidden;
        snprintf(name, sizeof name, "%sattention_o[h%lld.s%lld]", prefix, (long long)h,
                 (long long)s);
        t->label = amk_arena_strdup(&m->arena, name);
        t->loc = a->loc;
      }
    }
    m->buffers[y].dtype = AMK_DTYPE_F32;
    for (uint32_t i = 0; i < at.tiles.n; i++)
      amk_rw_kill_task(&f->edit, at.tiles.at[i]);
    for (uint32_t i = 0; i < o.tiles.n; i++)
      amk_rw_kill_task(&f->edit, o.tiles.at[i]);
    amk_rw_kill_buffer(&f->edit, attn);
    amk_rw_kill_buffer(&f->edit, wo);
    amk_rw_kill_counter(&f->edit, at.counter);
    f->done[AMK_FUSION_SPLIT_O]++;
  }
  free(heads);
  free(sets);
  return ok;
}

static void fuse_split_o(Fuser *f) {
  uint32_t n = f->m->n_buffers; /* not the Wot buffers it adds */
  for (uint32_t b = 0; b < n; b++)
    fuse_one_split_o(f, b);
}

/* ---- the pass ------------------------------------------------------------------------ */

bool amk_pass_fuse(AmkModule *m, AmkPassContext *ctx) {
  AmkFusionPlan plan;
  if (!amk_fusion_plan_read(m, ctx, ctx->diag, &plan))
    return false;
  const bool *on = plan.on;
  int64_t split_down_min_cols = amk_fusion_split_down_min_cols(&plan);
  /* The block rewrites need their parts together (docs/Fusion.md). */
  bool attention = amk_fusion_attention(&plan);
  bool mlp = amk_fusion_mlp(&plan);
  if ((on[AMK_FUSION_QKV] || on[AMK_FUSION_ROPE_KV] || on[AMK_FUSION_ATTENTION_ROPE]) &&
      !attention)
    amk_warning(ctx->diag, no_loc,
                "fuse: qkv, rope+kv_append and rope+attention are one rewrite; "
                "without all three the attention block is left unfused");
  if ((on[AMK_FUSION_GATE_UP] || on[AMK_FUSION_SILU]) && !mlp)
    amk_warning(ctx->diag, no_loc,
                "fuse: gate+up and silu_mul+gemv are one rewrite; without both the "
                "MLP is left unfused");
  bool split_down = amk_fusion_split_down(&plan);
  if (on[AMK_FUSION_SPLIT_DOWN] && !split_down)
    amk_warning(ctx->diag, no_loc,
                "fuse: split_down rewrites the fused MLP; without gate+up, silu_mul+gemv, "
                "gemv+add and rmsnorm+gemv it does nothing");
  bool split_o = amk_fusion_split_o(&plan);
  if (on[AMK_FUSION_SPLIT_O] && !split_o)
    amk_warning(ctx->diag, no_loc,
                "fuse: split_o folds the o projection into the fused attention tiles; "
                "without qkv, rope+kv_append, rope+attention, gemv+add, rmsnorm+gemv, "
                "gate+up and silu_mul+gemv, or with AMK_FUSE_KV_FROM_QKV=0, it does "
                "nothing");
  if (on[AMK_FUSION_COMBINE] && !on[AMK_FUSION_RESIDUAL])
    amk_warning(ctx->diag, no_loc,
                "fuse: combine+gemv folds the combine into residual tiles; without "
                "gemv+add it stays a task");
  bool kv_from_qkv = plan.kv_from_qkv;

  int64_t path_before = 0, layer_before = 0;
  if (ctx->stats)
    amk_rw_hops(m, &path_before, &layer_before);
  uint32_t tasks_before = m->n_tasks, counters_before = m->n_counters;

  Fuser f = {.m = m, .ctx = ctx, .kv_from_qkv = kv_from_qkv, .split_o_slices = plan.split_o_slices,
             .split_down_min_cols = split_down_min_cols,
             .split_o_min_cols = amk_fusion_split_o_min_cols(&plan),
             .split_down_quant = plan.split_down_quant};
  if (m->n_buffers || m->n_counters) { /* ids must be positions for new records */
    amk_rw_edit_init(&f.edit, m);
    bool identity = true;
    for (uint32_t i = 0; i < m->n_buffers && identity; i++)
      identity = m->buffers[i].id == (int32_t)i;
    for (uint32_t i = 0; i < m->n_counters && identity; i++)
      identity = m->counters[i].id == (int32_t)i;
    if (!identity)
      amk_rw_compact(m, &f.edit, ctx, "fuse");
    amk_rw_edit_free(&f.edit);
  }
  AmkIdIndex counters;
  amk_id_index_build(&counters, m->counters, sizeof *m->counters, m->n_counters);
  uint32_t n_old_counters = m->n_counters;
  uint32_t *old_counts = amk_rw_producer_counts(m, &counters);
  amk_id_index_free(&counters);
  amk_rw_edit_init(&f.edit, m);

  typedef void (*Phase)(Fuser *);
  const struct {
    bool enabled;
    Phase run;
  } phases[] = {{on[AMK_FUSION_NORM], fuse_norms},
                {attention, fuse_attention},
                {mlp, fuse_mlp},
                {on[AMK_FUSION_RESIDUAL], fuse_residuals},
                {on[AMK_FUSION_COMBINE] && on[AMK_FUSION_RESIDUAL], fuse_combines},
                {split_down, fuse_split_down},
                {split_o, fuse_split_o}};
  for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++) {
    if (!phases[i].enabled)
      continue;
    index_build(&f.ix, m, &f.edit);
    phases[i].run(&f);
    index_free(&f.ix);
  }
  amk_rw_fix_thresholds(m, &f.edit, old_counts, n_old_counters);
  amk_rw_compact(m, &f.edit, ctx, "fuse");
  amk_rw_edit_free(&f.edit);
  free(old_counts);

  if (ctx->stats) {
    int64_t path_after = 0, layer_after = 0;
    amk_rw_hops(m, &path_after, &layer_after);
    amk_stat_int(ctx->stats, "fuse", "tasks before", tasks_before);
    amk_stat_int(ctx->stats, "fuse", "tasks after", m->n_tasks);
    amk_stat_int(ctx->stats, "fuse", "counters before", counters_before);
    amk_stat_int(ctx->stats, "fuse", "counters after", m->n_counters);
    amk_stat_int(ctx->stats, "fuse", "norms folded into GEMV tiles", f.done[AMK_FUSION_NORM]);
    amk_stat_int(ctx->stats, "fuse", "residual adds folded", f.done[AMK_FUSION_RESIDUAL]);
    amk_stat_int(ctx->stats, "fuse", "MLPs fused (gate|up, silu)", f.done[AMK_FUSION_SILU]);
    amk_stat_int(ctx->stats, "fuse", "attention blocks fused (qkv, rope_kv, rope)",
                 f.done[AMK_FUSION_QKV]);
    amk_stat_int(ctx->stats, "fuse", "split-KV combines folded into GEMV tiles",
                 f.done[AMK_FUSION_COMBINE]);
    amk_stat_int(ctx->stats, "fuse", "down projections split into the gate|up tiles",
                 f.done[AMK_FUSION_SPLIT_DOWN]);
    amk_stat_int(ctx->stats, "fuse", "o projections split into the attention tiles",
                 f.done[AMK_FUSION_SPLIT_O]);
    amk_stat_int(ctx->stats, "fuse", "critical path (tasks) before", path_before);
    amk_stat_int(ctx->stats, "fuse", "critical path (tasks) after", path_after);
    amk_stat_int(ctx->stats, "fuse", "dependent hops per layer before", layer_before);
    amk_stat_int(ctx->stats, "fuse", "dependent hops per layer after", layer_after);
  }
  return true;
}
