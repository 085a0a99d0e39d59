/* The `shard` pass: import's op-level program becomes rank R of an N-way
 * tensor-parallel group (Megatron-style; docs/TensorParallel.md).
 *
 * q/k/v (and their biases) are split by KV head groups, gate/up by
 * columns of the intermediate width: each rank computes its heads and its
 * columns. o_proj and down_proj are row-parallel: each rank multiplies its
 * slice of K into a full-width fp32 partial sum, and a cross-rank
 * ALLREDUCE_SHARD (param group = N) writes the residual stream after it:
 * the residual add goes, rank 0's part carrying the residual instead (one
 * task and one hop fewer a residual). lm_head is split by vocabulary rows into
 * an fp32 partial that the same collective places at its rank's offset
 * (n_off) of the full logits: a sum of disjoint parts, i.e. an exact
 * gather. Norms and the embedding are replicated.
 *
 * The pass works on the labels and shapes import writes (docs/Import.md);
 * anything else (a tiled, fused or quantized program) is refused. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/builder.h"
#include "amk/pass.h"
#include "amk/tp.h"

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

typedef struct {
  AmkModule *m;
  AmkDiagEngine *diag;
  int64_t n, rank;
  int64_t hd;
  int64_t q_lo, q_hi;       /* this rank's query heads */
  int64_t kv_lo, kv_hi;     /* its KV heads */
  int64_t inter_lo, inter_hi; /* its intermediate columns */
  int64_t vocab_lo, vocab_hi; /* its vocabulary rows of lm_head */
  int64_t n_heads, n_kv_heads;
} Shard;

/* [lo, hi) of `total` for rank r of n: balanced, the first ranks taking
 * one more where n does not divide it. */
static void split_range(int64_t total, int64_t n, int64_t r, int64_t *lo, int64_t *hi) {
  *lo = r * total / n;
  *hi = (r + 1) * total / n;
}

static bool meta_int(const AmkModule *m, const char *key, int64_t *out) {
  const AmkValue *v = amk_object_get(&m->meta, key);
  return v && amk_value_as_int(v, out) && *out > 0;
}

static int64_t dim_of(const AmkBuffer *b, uint32_t d) {
  int64_t v = -1;
  if (d < b->rank)
    amk_value_as_int(&b->shape[d], &v);
  return v;
}

static void set_dim(AmkBuffer *b, uint32_t d, int64_t v) { b->shape[d] = amk_value_int(v); }

static void set_last_dim(AmkModule *m, int32_t buffer, int64_t v) {
  AmkBuffer *b = &m->buffers[buffer];
  set_dim(b, b->rank - 1, v);
}

/* The source of a weight buffer restricted to rows [lo, hi) (of what it
 * already takes) or columns [lo, hi): `KEY[B:E]`, `KEY[:, B:E]` or
 * `KEY[B:E, C:D]`, each with its ^T kept (include/amk/tp.h). NULL after
 * reporting. */
static const char *slice_source(Shard *s, int32_t buffer, bool columns, int64_t lo, int64_t hi) {
  AmkBuffer *b = &s->m->buffers[buffer];
  AmkSourcePart sp;
  if (!b->source || strchr(b->source, '+') ||
      !amk_source_part_parse(b->source, strlen(b->source), &sp)) {
    amk_error(s->diag, no_loc(), "shard: weight buffer '%s' has a source ('%s') that cannot be "
              "sliced (one state-dict key, optionally with a row range, is needed)",
              b->name, b->source ? b->source : "none");
    return NULL;
  }
  /* The ranges index the tensor before its transpose: a transposed
   * buffer's rows are the tensor's columns. */
  bool tensor_columns = columns != sp.transpose;
  int64_t *begin = tensor_columns ? &sp.col_begin : &sp.row_begin;
  int64_t *end = tensor_columns ? &sp.col_end : &sp.row_end;
  int64_t base = *begin >= 0 ? *begin : 0;
  *begin = base + lo;
  *end = base + hi;
  char text[640];
  const char *transpose = sp.transpose ? "^T" : "";
  if (sp.row_begin >= 0 && sp.col_begin >= 0)
    snprintf(text, sizeof text, "%s[%" PRId64 ":%" PRId64 ", %" PRId64 ":%" PRId64 "]%s", sp.key,
             sp.row_begin, sp.row_end, sp.col_begin, sp.col_end, transpose);
  else if (sp.col_begin >= 0)
    snprintf(text, sizeof text, "%s[:, %" PRId64 ":%" PRId64 "]%s", sp.key, sp.col_begin,
             sp.col_end, transpose);
  else
    snprintf(text, sizeof text, "%s[%" PRId64 ":%" PRId64 "]%s", sp.key, sp.row_begin,
             sp.row_end, transpose);
  return amk_arena_strdup(&s->m->arena, text);
}

/* Weight rows [lo, hi) (a column-parallel projection's output features, or
 * a bias). */
static bool take_rows(Shard *s, int32_t buffer, int64_t lo, int64_t hi) {
  const char *src = slice_source(s, buffer, false, lo, hi);
  if (!src)
    return false;
  AmkBuffer *b = &s->m->buffers[buffer];
  b->source = src;
  set_dim(b, 0, hi - lo);
  return true;
}

/* Weight columns [lo, hi) (a row-parallel projection's slice of K). */
static bool take_columns(Shard *s, int32_t buffer, int64_t lo, int64_t hi) {
  AmkBuffer *b = &s->m->buffers[buffer];
  if (b->rank != 2) {
    amk_error(s->diag, no_loc(), "shard: weight buffer '%s' is not a matrix", b->name);
    return false;
  }
  const char *src = slice_source(s, buffer, true, lo, hi);
  if (!src)
    return false;
  b->source = src;
  set_dim(b, 1, hi - lo);
  return true;
}

static void scale_estimates(AmkTask *t, int64_t part, int64_t whole) {
  t->est_bytes = t->est_bytes * part / whole;
  t->est_flops = t->est_flops * part / whole;
}

/* A column-parallel GEMV: output features [lo, hi) of the projection. */
static bool column_parallel(Shard *s, AmkTask *t, int64_t lo, int64_t hi, int64_t whole) {
  if (!take_rows(s, t->inputs[1], lo, hi) || (t->n_inputs > 2 && !take_rows(s, t->inputs[2], lo, hi)))
    return false;
  amk_task_set_param(s->m, t, "N_tile", amk_value_int(hi - lo));
  set_last_dim(s->m, t->outputs[0], hi - lo);
  scale_estimates(t, hi - lo, whole);
  return true;
}

/* A pending collective: after task `after` (its new list position is
 * found when the list is rebuilt). */
typedef struct {
  uint32_t after;
  AmkTask task;
} Pending;

/* A row-parallel GEMV (o_proj, down_proj: K columns [lo, hi)) or the
 * vocabulary-split lm_head (`gather`: rows [lo, hi)): the task now writes an
 * fp32 partial and signals a new counter; a collective reads the partial
 * and writes the task's old output with its old counter, so every reader
 * is unchanged. */
static bool reduce_after(Shard *s, uint32_t ti, bool gather, int64_t lo, int64_t hi,
                         int64_t whole, Pending *pending) {
  AmkModule *m = s->m;
  AmkTask *t = &m->tasks[ti];
  int32_t out = t->outputs[0];
  int64_t width = dim_of(&m->buffers[out], m->buffers[out].rank - 1);
  if (gather) {
    if (!take_rows(s, t->inputs[1], lo, hi))
      return false;
    amk_task_set_param(m, t, "N_tile", amk_value_int(hi - lo));
  } else {
    if (!take_columns(s, t->inputs[1], lo, hi))
      return false;
    amk_task_set_param(m, t, "K", amk_value_int(hi - lo));
  }
  scale_estimates(t, hi - lo, whole);
  int64_t dims[2] = {1, gather ? hi - lo : width};
  const char *name = amk_arena_printf(&m->arena, "%s.partial", m->buffers[out].name);
  int32_t partial = amk_module_add_hbm_buffer(m, name, AMK_KIND_ACTIVATION, AMK_DTYPE_F32, 2,
                                              dims, NULL);
  AmkCounter *c = amk_module_add_counter(m);
  c->name = name;
  c->note = amk_arena_printf(&m->arena, "%s partial sum", m->tasks[ti].label);
  int32_t partial_counter = c->id;
  t = &m->tasks[ti];
  int32_t old_counter = t->out_counter;
  t->outputs[0] = partial;
  t->out_counter = partial_counter;

  AmkTask *r = &pending->task;
  memset(r, 0, sizeof *r);
  pending->after = ti;
  r->op = AMK_OP_ALLREDUCE_SHARD;
  r->label = amk_arena_printf(&m->arena, "%s.%s", t->label, gather ? "gather" : "allreduce");
  r->n_inputs = 1;
  r->inputs = amk_arena_memdup(&m->arena, &partial, sizeof partial);
  r->n_outputs = 1;
  r->outputs = amk_arena_memdup(&m->arena, &out, sizeof out);
  r->out_counter = old_counter;
  r->n_waits = 1;
  r->waits = amk_arena_alloc(&m->arena, sizeof *r->waits);
  r->waits[0] = (AmkWait){partial_counter, amk_value_int(1)};
  r->est_bytes = (dims[1] * 4) * s->n + width * amk_dtype_nbytes(m->buffers[out].dtype, 1);
  r->est_flops = width * s->n;
  amk_task_set_param(m, r, AMK_TP_PARAM, amk_value_int(s->n));
  if (gather)
    amk_task_set_param(m, r, "n_off", amk_value_int(lo));
  return true;
}

/* The residual add that alone reads a plain all-reduce's output (o or d:
 * `attn_residual`, `mlp_residual`), as list position, or UINT32_MAX. */
static uint32_t residual_reader(const AmkTask *tasks, uint32_t n, const AmkTask *r) {
  if (amk_task_param(r, "n_off"))
    return UINT32_MAX; /* a gather: the logits have no residual */
  int32_t out = r->outputs[0];
  uint32_t found = UINT32_MAX;
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t k = 0; k < tasks[i].n_inputs; k++)
      if (tasks[i].inputs[k] == out) {
        if (found != UINT32_MAX || tasks[i].op != AMK_OP_ADD || tasks[i].n_inputs != 2 ||
            tasks[i].n_outputs != 1)
          return UINT32_MAX;
        found = i;
      }
  return found;
}

/* The residual add h' = h + allreduce(partials) goes into the collective:
 * it writes h' under the add's counter, and rank 0's part becomes
 * partial + h (an add into a new fp32 buffer; fuse folds it into the GEMV
 * tiles), the others' stay their partials. The sum is then h plus every
 * rank's partial in fp32, rounded to h's dtype once: one task and one hop
 * fewer a residual on every rank (docs/TensorParallel.md). */
static void fold_residual(Shard *s, const AmkTask *add, AmkTask *r) {
  AmkModule *m = s->m;
  int32_t partial = r->inputs[0], old_out = r->outputs[0];
  int32_t partial_counter = r->waits[0].counter, old_counter = r->out_counter;
  r->outputs = amk_arena_memdup(&m->arena, &add->outputs[0], sizeof add->outputs[0]);
  r->out_counter = add->out_counter;
  r->label = amk_arena_printf(&m->arena, "%s+residual", r->label);
  if (s->rank != 0)
    return;
  int32_t h = add->inputs[0] == old_out ? add->inputs[1] : add->inputs[0];
  const AmkBuffer *pb = amk_module_buffer(m, partial);
  int64_t dims[2] = {1, dim_of(pb, pb->rank - 1)};
  const char *name = amk_arena_printf(&m->arena, "%s+residual", pb->name);
  int32_t sum = amk_module_add_hbm_buffer(m, name, AMK_KIND_ACTIVATION, AMK_DTYPE_F32, 2, dims,
                                          NULL);
  AmkCounter *c = amk_module_add_counter(m);
  c->name = name;
  c->note = amk_arena_printf(&m->arena, "%s: rank 0's part with the residual", add->label);
  /* The add now reads the partial (waiting on its counter where it waited
   * on the old output's) and writes the new part. */
  AmkTask *a = amk_module_add_task(m); /* in the list before the collective */
  *a = *add;
  a->id = (int32_t)(m->n_tasks - 1);
  int32_t in[2] = {partial, h};
  a->inputs = amk_arena_memdup(&m->arena, in, sizeof in);
  a->outputs = amk_arena_memdup(&m->arena, &sum, sizeof sum);
  a->out_counter = c->id;
  a->waits = amk_arena_memdup(&m->arena, add->waits,
                              (add->n_waits ? add->n_waits : 1) * sizeof *add->waits);
  for (uint32_t w = 0; w < a->n_waits; w++)
    if (a->waits[w].counter == old_counter)
      a->waits[w] = (AmkWait){partial_counter, amk_value_int(1)};
  a->label = amk_arena_printf(&m->arena, "%s.part", add->label);
  r->inputs = amk_arena_memdup(&m->arena, &sum, sizeof sum);
  r->waits = amk_arena_alloc(&m->arena, sizeof *r->waits);
  r->n_waits = 1;
  r->waits[0] = (AmkWait){c->id, amk_value_int(1)};
}

/* Layer tasks are labelled `L<i>.<what>`: the <what>, or the whole label. */
static const char *label_role(const char *label) {
  if (label[0] != 'L' || label[1] < '0' || label[1] > '9')
    return label;
  const char *p = label + 1;
  while (*p >= '0' && *p <= '9')
    p++;
  return *p == '.' ? p + 1 : label;
}

static bool is_role(const char *role, const char *const *names) {
  for (; *names; names++)
    if (strcmp(role, *names) == 0)
      return true;
  return false;
}

static bool refuse_task(Shard *s, const AmkTask *t, const char *why) {
  amk_error(s->diag, t->loc, "shard: task %" PRId32 " ('%s') %s; shard runs on the op-level "
            "program import writes (amk-opt DIR -import -shard --tp=N --tp-rank=R), before "
            "quantize, tile and fuse", t->id, t->label, why);
  return false;
}

static bool shard_task(Shard *s, uint32_t ti, Pending *pending, uint32_t *n_pending) {
  AmkModule *m = s->m;
  AmkTask *t = &m->tasks[ti];
  const char *role = label_role(t->label);
  static const char *const replicated[] = {
      "embed", "embed_scale", "input_norm", "attn_residual", "post_norm", "mlp_residual",
      "final_norm", "k_append", "v_append", NULL};
  static const char *const head_wise[] = {"q_norm", "k_norm", "rope_q", "rope_k", NULL};
  static const char *const inter_wise[] = {"swiglu", "gelu", "geglu", NULL};
  int64_t hd = s->hd;
  if (t->op == AMK_OP_GEMV_TILE || t->op == AMK_OP_GEMM_TILE) {
    int64_t flags = 0, n_off = 0, n_tile = 0;
    amk_task_param_int(t, "flags", &flags);
    amk_task_param_int(t, "n_off", &n_off);
    amk_task_param_int(t, "N_tile", &n_tile);
    int64_t width = dim_of(&m->buffers[t->outputs[0]], m->buffers[t->outputs[0]].rank - 1);
    if (t->op != AMK_OP_GEMV_TILE || flags != 0 || n_off != 0 || n_tile != width ||
        amk_task_param(t, "qdtype"))
      return refuse_task(s, t, "is a tiled, fused or quantized projection");
  }
  if (is_role(role, replicated))
    return true;
  if (is_role(role, head_wise) || is_role(role, inter_wise)) {
    /* Its output has the width of its input (already this rank's). */
    const AmkBuffer *in = &m->buffers[t->inputs[0]];
    int64_t w = dim_of(in, in->rank - 1), old = dim_of(&m->buffers[t->outputs[0]], 1);
    set_last_dim(m, t->outputs[0], w);
    scale_estimates(t, w, old > 0 ? old : 1);
    return true;
  }
  int64_t q_width = s->n_heads * hd, kv_width = s->n_kv_heads * hd;
  if (strcmp(role, "q_proj") == 0)
    return column_parallel(s, t, s->q_lo * hd, s->q_hi * hd, q_width);
  if (strcmp(role, "k_proj") == 0 || strcmp(role, "v_proj") == 0)
    return column_parallel(s, t, s->kv_lo * hd, s->kv_hi * hd, kv_width);
  if (strcmp(role, "gate_proj") == 0 || strcmp(role, "up_proj") == 0)
    return column_parallel(s, t, s->inter_lo, s->inter_hi,
                           dim_of(&m->buffers[t->outputs[0]], 1));
  if (strcmp(role, "attention") == 0) {
    if (t->op != AMK_OP_ATTENTION_TILE)
      return refuse_task(s, t, "is not an ATTENTION_TILE");
    amk_task_set_param(m, t, "n_heads", amk_value_int(s->q_hi - s->q_lo));
    amk_task_set_param(m, t, "n_kv_heads", amk_value_int(s->kv_hi - s->kv_lo));
    set_last_dim(m, t->outputs[0], (s->q_hi - s->q_lo) * hd);
    scale_estimates(t, s->q_hi - s->q_lo, s->n_heads);
    /* The caches hold this rank's KV heads. */
    for (uint32_t i = 1; i < 3 && i < t->n_inputs; i++) {
      AmkBuffer *cache = &m->buffers[t->inputs[i]];
      if (cache->kind != AMK_KIND_KV_CACHE || cache->rank != 3 ||
          dim_of(cache, 1) != s->n_kv_heads)
        return refuse_task(s, t, "reads a cache that is not [max_seq, n_kv_heads, head_dim]");
      set_dim(cache, 1, s->kv_hi - s->kv_lo);
    }
    return true;
  }
  if (strcmp(role, "o_proj") == 0)
    return reduce_after(s, ti, false, s->q_lo * hd, s->q_hi * hd, q_width,
                        &pending[(*n_pending)++]);
  if (strcmp(role, "down_proj") == 0) {
    int64_t inter = dim_of(&m->buffers[t->inputs[1]], 1);
    return reduce_after(s, ti, false, s->inter_lo, s->inter_hi, inter,
                        &pending[(*n_pending)++]);
  }
  if (strcmp(role, "lm_head") == 0)
    return reduce_after(s, ti, true, s->vocab_lo, s->vocab_hi,
                        s->vocab_hi - s->vocab_lo > 0 ? dim_of(&m->buffers[t->outputs[0]], 1) : 1,
                        &pending[(*n_pending)++]);
  return refuse_task(s, t, "is not one import writes");
}

/* meta.weight_bytes: each source's bytes once (a tied head's slice is not
 * the embedding's whole table, so it counts apart). */
static int64_t weight_bytes(const AmkModule *m) {
  int64_t total = 0;
  for (uint32_t b = 0; b < m->n_buffers; b++) {
    const AmkBuffer *buf = &m->buffers[b];
    if (buf->kind != AMK_KIND_WEIGHT)
      continue;
    bool seen = false;
    for (uint32_t e = 0; e < b && !seen; e++)
      seen = m->buffers[e].kind == AMK_KIND_WEIGHT && buf->source && m->buffers[e].source &&
             strcmp(m->buffers[e].source, buf->source) == 0;
    int64_t n = 0;
    if (!seen && amk_buffer_nbytes(buf, &n))
      total += n;
  }
  return total;
}

static void meta_set(AmkModule *m, const char *key, AmkValue v) {
  for (uint32_t i = 0; i < m->meta.count; i++)
    if (strcmp(m->meta.as.members[i].key, key) == 0) {
      m->meta.as.members[i].value = v;
      return;
    }
  AmkMember *members = amk_arena_alloc(&m->arena, (m->meta.count + 1) * sizeof *members);
  if (m->meta.count)
    memcpy(members, m->meta.as.members, m->meta.count * sizeof *members);
  members[m->meta.count] = (AmkMember){key, v};
  m->meta.kind = AMK_VALUE_OBJECT;
  m->meta.as.members = members;
  m->meta.count++;
}

bool amk_pass_shard(AmkModule *m, AmkPassContext *ctx) {
  AmkDiagEngine *diag = ctx->diag;
  Shard s = {.m = m, .diag = diag, .n = 0, .rank = 0};
  if (!amk_pass_option_int(ctx, "tp", &s.n)) {
    amk_error(diag, no_loc(), "shard: give the group size, --tp=N (and the rank, --tp-rank=R)");
    return false;
  }
  amk_pass_option_int(ctx, "tp-rank", &s.rank);
  if (s.rank >= s.n) {
    amk_error(diag, no_loc(), "shard: --tp-rank=%" PRId64 " is not a rank of --tp=%" PRId64
              " (ranks are 0..%" PRId64 ")", s.rank, s.n, s.n - 1);
    return false;
  }
  int64_t size = 0, rank = 0;
  if (amk_module_tp(m, &size, &rank) || size == -1) {
    amk_error(diag, no_loc(), "shard: the module is already a tensor-parallel rank program "
              "(meta tp_size and tp_rank)");
    return false;
  }
  int64_t inter = 0, vocab = 0;
  if (!meta_int(m, "n_heads", &s.n_heads) || !meta_int(m, "n_kv_heads", &s.n_kv_heads) ||
      !meta_int(m, "head_dim", &s.hd) || !meta_int(m, "intermediate", &inter) ||
      !meta_int(m, "vocab", &vocab)) {
    amk_error(diag, no_loc(), "shard: the module's meta lacks n_heads, n_kv_heads, head_dim, "
              "intermediate or vocab; shard runs on the program import writes "
              "(amk-opt DIR -import -shard --tp=N --tp-rank=R)");
    return false;
  }
  if (s.n_kv_heads % s.n != 0 || s.n_heads % s.n_kv_heads != 0) {
    amk_error(diag, no_loc(), "shard: --tp=%" PRId64 " does not divide the model's %" PRId64
              " KV heads (%" PRId64 " query heads): each rank takes whole KV head groups, so "
              "n_kv_heads %% tp must be 0", s.n, s.n_kv_heads, s.n_heads);
    return false;
  }
  if (inter < s.n || vocab < s.n) {
    amk_error(diag, no_loc(), "shard: --tp=%" PRId64 " is more ranks than the intermediate "
              "width (%" PRId64 ") or the vocabulary (%" PRId64 ") has columns", s.n, inter,
              vocab);
    return false;
  }
  split_range(s.n_kv_heads, s.n, s.rank, &s.kv_lo, &s.kv_hi);
  int64_t group = s.n_heads / s.n_kv_heads;
  s.q_lo = s.kv_lo * group;
  s.q_hi = s.kv_hi * group;
  split_range(inter, s.n, s.rank, &s.inter_lo, &s.inter_hi);
  split_range(vocab, s.n, s.rank, &s.vocab_lo, &s.vocab_hi);

  if (s.n > 1) {
    uint32_t n_tasks = m->n_tasks;
    Pending *pending = amk_xcalloc(n_tasks ? n_tasks : 1, sizeof *pending);
    uint32_t n_pending = 0;
    bool ok = true;
    for (uint32_t ti = 0; ok && ti < n_tasks; ti++)
      ok = shard_task(&s, ti, pending, &n_pending);
    if (!ok) {
      free(pending);
      return false;
    }
    /* The list again, each collective right after the task it reduces,
     * and each residual add that reads an all-reduce taken into it. */
    AmkTask *old = amk_xmalloc((n_tasks ? n_tasks : 1) * sizeof *old);
    memcpy(old, m->tasks, n_tasks * sizeof *old);
    bool *gone = amk_xcalloc(n_tasks ? n_tasks : 1, sizeof *gone);
    m->n_tasks = 0;
    uint32_t next = 0;
    for (uint32_t ti = 0; ti < n_tasks; ti++) {
      if (gone[ti])
        continue;
      AmkTask *t = amk_module_add_task(m);
      *t = old[ti];
      t->id = (int32_t)(m->n_tasks - 1);
      if (next < n_pending && pending[next].after == ti) {
        AmkTask r = pending[next++].task;
        uint32_t add = residual_reader(old, n_tasks, &r);
        if (add != UINT32_MAX) {
          gone[add] = true;
          fold_residual(&s, &old[add], &r);
        }
        t = amk_module_add_task(m);
        *t = r;
        t->id = (int32_t)(m->n_tasks - 1);
      }
    }
    free(gone);
    free(old);
    free(pending);
    amk_stat_int(ctx->stats, "shard", "collectives", n_pending);
  }
  meta_set(m, "tp_size", amk_value_int(s.n));
  meta_set(m, "tp_rank", amk_value_int(s.rank));
  meta_set(m, "weight_bytes", amk_value_int(weight_bytes(m)));
  amk_stat_int(ctx->stats, "shard", "ranks", s.n);
  amk_stat_int(ctx->stats, "shard", "rank", s.rank);
  amk_stat_int(ctx->stats, "shard", "weight bytes", weight_bytes(m));
  return true;
}
