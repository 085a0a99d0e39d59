/* Building the lowered execution plan (include/amk/plan.h). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/numerics.h"
#include "amk/plan.h"
#include "amk/rope.h"
#include "amk/validate.h"

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

/* Per-plan storage the public struct points into. */
typedef struct {
  AmkPlan pub;
  uint32_t *task_buffers; /* every task's inputs then outputs */
  float *rope_tables;     /* every ROPE task's frequencies */
  void **synthetic;       /* per buffer */
} PlanStorage;

void amk_plan_free(AmkPlan *plan) {
  if (!plan)
    return;
  PlanStorage *s = (PlanStorage *)plan;
  if (s->synthetic)
    for (uint32_t b = 0; b < plan->n_buffers; b++)
      free(s->synthetic[b]);
  free(s->synthetic);
  free(s->task_buffers);
  free(s->rope_tables);
  free(plan->tasks);
  free(plan->buffers);
  free(plan->page_bytes);
  free(plan->wait_counter);
  free(plan->wait_threshold);
  free(plan->order);
  free(s);
}

static int32_t buffer_index(const AmkModule *m, int32_t id) {
  const AmkBuffer *b = amk_module_buffer(m, id);
  return b ? (int32_t)(b - m->buffers) : -1;
}

static int32_t counter_index(const AmkModule *m, int32_t id) {
  const AmkCounter *c = amk_module_counter(m, id);
  return c ? (int32_t)(c - m->counters) : -1;
}

/* ---- buffers and pages ------------------------------------------------------ */

static bool plan_buffers(AmkPlan *p, AmkDiagEngine *diag) {
  const AmkModule *m = p->m;
  p->buffers = amk_xcalloc(m->n_buffers ? m->n_buffers : 1, sizeof *p->buffers);
  for (uint32_t b = 0; b < m->n_buffers; b++) {
    const AmkBuffer *buf = &m->buffers[b];
    AmkPlanBuffer *pb = &p->buffers[b];
    if (!amk_buffer_numel(buf, &pb->numel) || !amk_buffer_nbytes(buf, &pb->nbytes) ||
        buf->rank > AMK_MAX_RANK) {
      amk_error(diag, buf->loc, "buffer '%s' has a shape the VM cannot allocate", buf->name);
      return false;
    }
    pb->kind = buf->kind;
    pb->dtype = buf->dtype;
    pb->rank = buf->rank;
    pb->page = -1;
    for (uint32_t d = 0; d < buf->rank; d++)
      amk_value_as_int(&buf->shape[d], &pb->shape[d]);
  }
  if (!m->pages)
    return true;
  p->n_pages = m->pages->n_pages;
  p->page_bytes = amk_xcalloc(p->n_pages ? p->n_pages : 1, sizeof *p->page_bytes);
  for (uint32_t q = 0; q < p->n_pages; q++)
    p->page_bytes[q] = m->pages->pages[q].nbytes;
  for (uint32_t k = 0; k < m->pages->n_bindings; k++) {
    const AmkPageBinding *bind = &m->pages->bindings[k];
    int32_t b = buffer_index(m, bind->buffer);
    int32_t page = -1;
    for (uint32_t q = 0; q < p->n_pages; q++)
      if (m->pages->pages[q].id == bind->page)
        page = (int32_t)q;
    if (b < 0 || page < 0 || p->buffers[b].nbytes > p->page_bytes[page]) {
      amk_error(diag, no_loc(), "the page table binds buffer %d to page %d, which cannot hold it",
                bind->buffer, bind->page);
      return false;
    }
    p->buffers[b].page = page;
  }
  return true;
}

/* ---- tasks ------------------------------------------------------------------- */

static int64_t pattern_of(const AmkInstParams *params) {
  return (int64_t)(uint32_t)(amk_inst_param_has(params, AMK_PARAM_flags) ? params->flags.i : 0) >>
         AMK_PATTERN_SHIFT;
}

static AmkPlanFollow follow_of(AmkOp op, const AmkInstParams *params) {
  int64_t pattern = pattern_of(params);
  if (op == AMK_OP_KV_APPEND || (op == AMK_OP_GEMV_TILE && pattern == AMK_PATTERN_ROPE_KV))
    return AMK_PLAN_FOLLOW_KV_ROW;
  /* attention_o's tile attends as attention_rope's (always the whole window:
   * the validator refuses its flags bit 1). */
  bool attention = op == AMK_OP_ATTENTION_TILE ||
                   (op == AMK_OP_GEMV_TILE && (pattern == AMK_PATTERN_ATTENTION ||
                                               pattern == AMK_PATTERN_ATTENTION_ROPE ||
                                               pattern == AMK_PATTERN_ATTENTION_O));
  if (attention)
    return (params->flags.i & 2) ? AMK_PLAN_FOLLOW_PARTITION : AMK_PLAN_FOLLOW_WINDOW;
  return AMK_PLAN_FOLLOW_NONE;
}

/* The GEMV patterns whose input 1 is a weight matrix the tile streams rows
 * [n_off, n_off + N_tile) of (the others read caches and frequencies
 * there): [N, K] for most, the accumulating patterns' transposed weight
 * (mlp: the stacked gate|up [2I, K]; attention_o: Wot [n_heads * head_dim,
 * hidden]). */
static bool streams_weight_rows(int64_t pattern) {
  return pattern <= AMK_PATTERN_SILU_RESIDUAL || pattern == AMK_PATTERN_COMBINE_RESIDUAL ||
         amk_gemv_pattern_accumulates(pattern);
}

/* The rows of the matrix a GEMV/GEMM tile streams: input 1, rows [n_off,
 * n_off + N_tile) of K elements (of Wot's width, hidden, for attention_o,
 * whose K is the qkv width), clipped to the buffer. */
static AmkPlanRange weight_read_of(const AmkPlan *p, const AmkPlanTask *pt) {
  AmkPlanRange none = {.buffer = -1};
  const AmkInstParams *q = &pt->params;
  int64_t pattern = pattern_of(q);
  bool streams = (pt->op == AMK_OP_GEMV_TILE && streams_weight_rows(pattern)) ||
                 pt->op == AMK_OP_GEMM_TILE;
  if (!streams || pt->n_inputs < 2 || q->K.i < 0 || q->n_off.i < 0 || q->N_tile.i < 0)
    return none;
  uint32_t w = pt->inputs[1];
  const AmkPlanBuffer *wb = &p->buffers[w];
  int64_t row = q->K.i;
  if (pt->op == AMK_OP_GEMV_TILE && pattern == AMK_PATTERN_ATTENTION_O)
    row = wb->rank > 0 ? wb->shape[wb->rank - 1] : 0;
  int64_t row_bytes = amk_dtype_nbytes(wb->dtype, row);
  int64_t offset = (int64_t)q->n_off.i * row_bytes;
  int64_t len = (int64_t)q->N_tile.i * row_bytes;
  int64_t have = p->buffers[w].nbytes;
  if (row_bytes < 0 || offset >= have)
    return none;
  if (offset + len > have)
    len = have - offset;
  return (AmkPlanRange){.buffer = (int32_t)w, .offset = offset, .nbytes = len};
}

/* The inverse frequencies of a ROPE task without a frequency input, as the
 * kernels compute them. */
static void rope_table(const AmkTask *task, const AmkInstParams *params, int half, float *out) {
  AmkRopeSpec spec;
  const char *why = NULL;
  if (amk_rope_spec_from_task(task, &spec, &why) && spec.kind == AMK_ROPE_LLAMA3 && half > 0) {
    double *freq = amk_xmalloc((size_t)half * sizeof *freq);
    amk_rope_inv_freq(&spec, freq, half);
    for (int i = 0; i < half; i++)
      out[i] = (float)freq[i];
    free(freq);
    return;
  }
  float theta = params->theta.f;
  for (int i = 0; i < half; i++)
    out[i] = 1.0f / powf(theta, (float)i / (float)half);
}

static bool plan_tasks(PlanStorage *s, AmkDiagEngine *diag) {
  AmkPlan *p = &s->pub;
  const AmkModule *m = p->m;
  uint32_t n = m->n_tasks;
  p->tasks = amk_xcalloc(n ? n : 1, sizeof *p->tasks);
  size_t n_refs = 0, n_floats = 0;
  for (uint32_t t = 0; t < n; t++) {
    n_refs += (size_t)m->tasks[t].n_inputs + m->tasks[t].n_outputs;
    p->n_waits += m->tasks[t].n_waits;
  }
  s->task_buffers = amk_xmalloc((n_refs ? n_refs : 1) * sizeof *s->task_buffers);
  p->wait_counter = amk_xmalloc((p->n_waits ? p->n_waits : 1) * sizeof *p->wait_counter);
  p->wait_threshold = amk_xmalloc((p->n_waits ? p->n_waits : 1) * sizeof *p->wait_threshold);
  size_t ref = 0;
  uint32_t wait = 0;
  int32_t max_sm = -1;
  bool all_assigned = n > 0;
  for (uint32_t t = 0; t < n; t++) {
    const AmkTask *task = &m->tasks[t];
    AmkPlanTask *pt = &p->tasks[t];
    char err[256];
    if (amk_inst_params_from_task(task, &pt->params, err, sizeof err) != 0) {
      amk_error(diag, task->loc, "task %d ('%s'): %s", task->id, task->label, err);
      return false;
    }
    pt->op = task->op;
    pt->recipe = amk_task_param(task, "recipe");
    pt->n_inputs = task->n_inputs;
    pt->n_outputs = task->n_outputs;
    uint32_t *refs = s->task_buffers + ref;
    pt->inputs = refs;
    pt->outputs = refs + task->n_inputs;
    ref += (size_t)task->n_inputs + task->n_outputs;
    for (uint32_t i = 0; i < task->n_inputs + task->n_outputs; i++) {
      bool input = i < task->n_inputs;
      int32_t id = input ? task->inputs[i] : task->outputs[i - task->n_inputs];
      int32_t b = buffer_index(m, id);
      if (b < 0) {
        amk_error(diag, task->loc, "task %d ('%s') names buffer %d, which does not exist",
                  task->id, task->label, id);
        return false;
      }
      /* Weights may be the mapped checkpoint itself: nothing writes them. */
      if (!input && amk_kind_is_read_only(m->buffers[b].kind)) {
        amk_error(diag, task->loc, "task %d ('%s') writes read-only %s buffer '%s'", task->id,
                  task->label, amk_kind_text_name(m->buffers[b].kind), m->buffers[b].name);
        return false;
      }
      refs[i] = (uint32_t)b;
    }
    int32_t counter = counter_index(m, task->out_counter);
    if (counter < 0) {
      amk_error(diag, task->loc, "task %d ('%s') signals counter %d, which does not exist",
                task->id, task->label, task->out_counter);
      return false;
    }
    pt->counter = (uint32_t)counter;
    pt->wait_begin = wait;
    for (uint32_t w = 0; w < task->n_waits; w++, wait++) {
      int64_t threshold = 0;
      amk_value_as_int(&task->waits[w].threshold, &threshold);
      int32_t c = counter_index(m, task->waits[w].counter);
      if (c < 0 || threshold < 0 || threshold > UINT32_MAX) {
        amk_error(diag, task->loc, "task %d ('%s') waits on counter %d >= %" PRId64
                  ", which cannot be checked", task->id, task->label, task->waits[w].counter,
                  threshold);
        return false;
      }
      p->wait_counter[wait] = (uint32_t)c;
      p->wait_threshold[wait] = (uint32_t)threshold;
    }
    pt->wait_end = wait;
    pt->follow = follow_of(task->op, &pt->params);
    pt->sm = task->has_sm && task->sm >= 0 ? task->sm : -1;
    if (pt->sm < 0)
      all_assigned = false;
    else if (pt->sm > max_sm)
      max_sm = pt->sm;
    if (task->op == AMK_OP_ROPE && task->n_inputs < 3) {
      int half = pt->params.head_dim.i / 2;
      pt->rope_half = half > 0 ? half : 0;
      n_floats += (size_t)(half > 0 ? half : 1);
    }
    pt->weight_read = weight_read_of(p, pt);
  }
  p->sm_count = all_assigned ? max_sm + 1 : 0;
  /* The frequency tables, packed in task order. */
  s->rope_tables = amk_xcalloc(n_floats ? n_floats : 1, sizeof *s->rope_tables);
  size_t at = 0;
  for (uint32_t t = 0; t < n; t++) {
    AmkPlanTask *pt = &p->tasks[t];
    if (pt->op != AMK_OP_ROPE || pt->n_inputs >= 3)
      continue;
    pt->rope_inv_freq = s->rope_tables + at;
    rope_table(&m->tasks[t], &pt->params, pt->rope_half, s->rope_tables + at);
    at += (size_t)(pt->rope_half > 0 ? pt->rope_half : 1);
  }
  return true;
}

/* Whether input `input` of task `c` is a split-KV partial that `c`
 * combines, and as which partition of how many: input i of an
 * ATTENTION_COMBINE is partition i of n_inputs; a combine_residual GEMV
 * reads partition 0 as input 0 and partition k - (M - 1) as input k >= M,
 * of n_inputs - (M - 1), M = AMK_COMBINE_MORE_PARTIALS (inputs 1 .. M - 1
 * are W and r, or qW, scales and r). */
static bool combines_partial(const AmkPlanTask *c, uint32_t input, int64_t *index,
                             int64_t *count) {
  if (c->op == AMK_OP_ATTENTION_COMBINE) {
    *index = input;
    *count = c->n_inputs;
    return true;
  }
  uint32_t more = AMK_COMBINE_MORE_PARTIALS(amk_inst_param_has(&c->params, AMK_PARAM_qdtype));
  if (c->op != AMK_OP_GEMV_TILE || pattern_of(&c->params) != AMK_PATTERN_COMBINE_RESIDUAL ||
      (input > 0 && input < more) || c->n_inputs < more)
    return false;
  *index = input ? input - (more - 1) : 0;
  *count = c->n_inputs - (more - 1);
  return true;
}

/* Split-KV partitions (docs/Fusion.md): partition p of P covers window rows
 * [p * c, min(W, (p + 1) * c)) with W = pos + 1 and c = ceil(W / P). P and p
 * come from a task that combines the partial (combines_partial): an
 * ATTENTION_COMBINE, or every combine_residual tile that folded it in (all
 * of them read it as the same partition). A partial nothing combines keeps
 * its compiled kv_start and spans to the next partial of the same cache
 * (the last to the cache's end). Two readers disagreeing is an error. */
static bool plan_partitions(AmkPlan *p, AmkDiagEngine *diag) {
  const AmkModule *m = p->m;
  int64_t *index_of = amk_xmalloc((m->n_buffers ? m->n_buffers : 1) * sizeof *index_of);
  int64_t *count_of = amk_xmalloc((m->n_buffers ? m->n_buffers : 1) * sizeof *count_of);
  for (uint32_t b = 0; b < m->n_buffers; b++)
    index_of[b] = count_of[b] = -1;
  bool ok = true;
  for (uint32_t t = 0; t < p->n_tasks && ok; t++) {
    const AmkPlanTask *c = &p->tasks[t];
    for (uint32_t i = 0; i < c->n_inputs && ok; i++) {
      int64_t index, count;
      if (!combines_partial(c, i, &index, &count))
        continue;
      uint32_t b = c->inputs[i];
      if (index_of[b] >= 0 && (index_of[b] != index || count_of[b] != count)) {
        amk_error(diag, m->tasks[t].loc,
                  "task %d ('%s'): buffer '%s' is partial %" PRId64 " of %" PRId64
                  " here but partial %" PRId64 " of %" PRId64 " of another combine; no "
                  "engine can tell its split-KV partition",
                  m->tasks[t].id, m->tasks[t].label, m->buffers[b].name, index, count,
                  index_of[b], count_of[b]);
        ok = false;
      }
      index_of[b] = index;
      count_of[b] = count;
    }
  }
  for (uint32_t t = 0; t < p->n_tasks && ok; t++) {
    AmkPlanTask *pt = &p->tasks[t];
    if (pt->follow != AMK_PLAN_FOLLOW_PARTITION || pt->n_outputs < 1)
      continue;
    uint32_t out = pt->outputs[0];
    if (count_of[out] > 0) {
      pt->part_index = index_of[out];
      pt->part_count = count_of[out];
      continue;
    }
    /* No combine: the compiled spans. */
    if (pt->n_inputs < 2)
      continue;
    uint32_t cache = pt->inputs[1];
    int64_t mine = pt->params.kv_start.i;
    int64_t next = p->buffers[cache].rank ? p->buffers[cache].shape[0] : 0;
    for (uint32_t u = 0; u < p->n_tasks; u++) {
      const AmkPlanTask *other = &p->tasks[u];
      int64_t start = other->params.kv_start.i;
      if (other->follow == AMK_PLAN_FOLLOW_PARTITION && other->n_inputs >= 2 &&
          other->inputs[1] == cache && start > mine && start < next)
        next = start;
    }
    pt->span = next - mine;
  }
  /* Which partials only partition-following tasks write (1), or also
   * another task (2): a combine reading only the first may skip the
   * partitions past the window. */
  uint8_t *writers = amk_xcalloc(m->n_buffers ? m->n_buffers : 1, 1);
  for (uint32_t t = 0; t < p->n_tasks && ok; t++) {
    const AmkPlanTask *pt = &p->tasks[t];
    bool follows = pt->follow == AMK_PLAN_FOLLOW_PARTITION && pt->part_count > 0;
    for (uint32_t o = 0; o < pt->n_outputs; o++)
      if (writers[pt->outputs[o]] != 2)
        writers[pt->outputs[o]] = follows ? 1 : 2;
  }
  for (uint32_t t = 0; t < p->n_tasks && ok; t++) {
    AmkPlanTask *c = &p->tasks[t];
    bool any = false, all = true;
    for (uint32_t i = 0; i < c->n_inputs; i++) {
      int64_t index, count;
      if (!combines_partial(c, i, &index, &count))
        continue;
      any = true;
      all = all && writers[c->inputs[i]] == 1;
    }
    c->combine_follows = any && all;
  }
  /* A partition-following writer may leave an empty partition unwritten
   * only when every combine reading it skips empty ones. */
  uint8_t *skipped = amk_xcalloc(m->n_buffers ? m->n_buffers : 1, 1); /* 1 yes, 2 no */
  for (uint32_t t = 0; t < p->n_tasks && ok; t++) {
    const AmkPlanTask *c = &p->tasks[t];
    for (uint32_t i = 0; i < c->n_inputs; i++) {
      int64_t index, count;
      if (combines_partial(c, i, &index, &count) && skipped[c->inputs[i]] != 2)
        skipped[c->inputs[i]] = c->combine_follows ? 1 : 2;
    }
  }
  for (uint32_t t = 0; t < p->n_tasks && ok; t++) {
    AmkPlanTask *pt = &p->tasks[t];
    if (pt->follow == AMK_PLAN_FOLLOW_PARTITION && pt->part_count > 0 && pt->n_outputs == 1)
      pt->combine_follows = skipped[pt->outputs[0]] == 1;
  }
  free(skipped);
  free(writers);
  free(index_of);
  free(count_of);
  return ok;
}

/* ---- weight-only quantization --------------------------------------------------- */

static bool is_quantized_tile(const AmkPlanTask *pt) {
  return (pt->op == AMK_OP_GEMV_TILE || pt->op == AMK_OP_GEMM_TILE) && pt->n_inputs >= 3 &&
         amk_inst_param_has(&pt->params, AMK_PARAM_qdtype) &&
         (pt->params.qdtype.i == AMK_QDTYPE_INT8 || pt->params.qdtype.i == AMK_QDTYPE_INT4);
}

static bool same_quant(const AmkPlanQuant *a, const AmkPlanQuant *b) {
  return a->role == b->role && a->partner == b->partner && a->qdtype == b->qdtype &&
         a->group == b->group && a->cols == b->cols;
}

/* "int8 weights (group 128, K 64, scales 'L0.q.scales')" */
static void describe_quant(const AmkModule *m, const AmkPlanQuant *q, char *out, size_t size) {
  bool weights = q->role == AMK_PLAN_QUANT_WEIGHT;
  snprintf(out, size, "%s %s (group %" PRId64 ", K %" PRId64 ", %s '%s')",
           q->qdtype == AMK_QDTYPE_INT8 ? "int8" : "int4", weights ? "weights" : "scales",
           q->group, q->cols, weights ? "scales" : "of", m->buffers[q->partner].name);
}

/* A quantized mlp tile (split_down's, docs/Fusion.md) also reads the down
 * weight [K, I] and its scales at inputs 4 and 5. */
static bool is_quantized_mlp(const AmkPlanTask *pt) {
  return is_quantized_tile(pt) && pt->op == AMK_OP_GEMV_TILE && pt->n_inputs == 6 &&
         amk_inst_param_has(&pt->params, AMK_PARAM_flags) &&
         (uint32_t)pt->params.flags.i >> AMK_PATTERN_SHIFT == AMK_PATTERN_MLP;
}

/* Every quantized tile's weight and scales take their roles; one buffer
 * read two ways (two formats or groups, other scales, or by another task
 * or input) is an error: the loader fills a buffer one way. */
static bool plan_quant(AmkPlan *p, AmkDiagEngine *diag) {
  const AmkModule *m = p->m;
  int32_t *first = amk_xmalloc((m->n_buffers ? m->n_buffers : 1) * sizeof *first);
  for (uint32_t b = 0; b < m->n_buffers; b++)
    first[b] = -1;
  bool ok = true;
  for (uint32_t t = 0; t < p->n_tasks && ok; t++) {
    const AmkPlanTask *pt = &p->tasks[t];
    if (!is_quantized_tile(pt))
      continue;
    /* Pairs of (weight, scales) inputs and their rows' columns: K, and a
     * quantized mlp's down weight, whose columns are the intermediate's
     * (half of the gate|up weight's rows). */
    uint32_t pairs = 1, pair_w[2] = {1, 4}, pair_s[2] = {2, 5};
    int64_t pair_cols[2] = {pt->params.K.i, 0};
    if (is_quantized_mlp(pt)) {
      const AmkPlanBuffer *gu = &p->buffers[pt->inputs[1]];
      pair_cols[1] = gu->rank >= 1 && gu->shape[0] > 0 ? gu->shape[0] / 2 : 0;
      pairs = pair_cols[1] > 0 ? 2 : 1;
    }
    for (uint32_t pi = 0; pi < pairs && ok; pi++) {
      uint32_t w = pt->inputs[pair_w[pi]], s = pt->inputs[pair_s[pi]];
      AmkPlanQuant want = {.qdtype = pt->params.qdtype.i,
                           .group = amk_inst_param_has(&pt->params, AMK_PARAM_group)
                                        ? pt->params.group.i
                                        : pt->params.K.i,
                           .cols = pair_cols[pi]};
      const AmkPlanQuant roles[2] = {
          {AMK_PLAN_QUANT_WEIGHT, (int32_t)s, want.qdtype, want.group, want.cols},
          {AMK_PLAN_QUANT_SCALES, (int32_t)w, want.qdtype, want.group, want.cols}};
      const uint32_t which[2] = {w, s};
      for (int r = 0; r < 2 && ok; r++) {
        AmkPlanQuant *have = &p->buffers[which[r]].quant;
        if (have->role == AMK_PLAN_QUANT_NONE) {
          *have = roles[r];
          first[which[r]] = (int32_t)t;
        } else if (!same_quant(have, &roles[r])) {
          const AmkTask *a = &m->tasks[first[which[r]]], *b = &m->tasks[t];
          char mine[256], theirs[256];
          describe_quant(m, &roles[r], mine, sizeof mine);
          describe_quant(m, have, theirs, sizeof theirs);
          amk_error(diag, b->loc,
                    "task %d ('%s') reads buffer '%s' as %s, but task %d ('%s') reads it as %s; "
                    "one buffer holds one quantized form",
                    b->id, b->label, m->buffers[which[r]].name, mine, a->id, a->label, theirs);
          ok = false;
        }
      }
    }
  }
  /* Nothing else may read them. */
  for (uint32_t t = 0; t < p->n_tasks && ok; t++) {
    const AmkPlanTask *pt = &p->tasks[t];
    bool quantized = is_quantized_tile(pt), mlp = is_quantized_mlp(pt);
    for (uint32_t i = 0; i < pt->n_inputs && ok; i++) {
      const AmkPlanQuant *q = &p->buffers[pt->inputs[i]].quant;
      bool expected = quantized && (((i == 1 || (mlp && i == 4)) &&
                                     q->role == AMK_PLAN_QUANT_WEIGHT) ||
                                    ((i == 2 || (mlp && i == 5)) &&
                                     q->role == AMK_PLAN_QUANT_SCALES));
      if (q->role != AMK_PLAN_QUANT_NONE && !expected) {
        const AmkTask *a = &m->tasks[first[pt->inputs[i]]], *b = &m->tasks[t];
        amk_error(diag, b->loc,
                  "task %d ('%s') reads buffer '%s' as its input %u, but it holds the "
                  "quantized %s of task %d ('%s'); one buffer holds one form",
                  b->id, b->label, m->buffers[pt->inputs[i]].name, i,
                  q->role == AMK_PLAN_QUANT_WEIGHT ? "weights" : "scales",
                  a->id, a->label);
        ok = false;
      }
    }
  }
  free(first);
  return ok;
}

/* ---- IO ------------------------------------------------------------------------ */

/* The IO buffers the host drives, found by the names the lowerings use. */
static bool plan_io(AmkPlan *p, AmkDiagEngine *diag) {
  const AmkModule *m = p->m;
  p->token_buffer = p->pos_buffer = p->logits_buffer = -1;
  for (uint32_t b = 0; b < m->n_buffers; b++) {
    const AmkBuffer *buf = &m->buffers[b];
    if (buf->kind == AMK_KIND_IO_INPUT && strcmp(buf->name, "token_id") == 0)
      p->token_buffer = (int32_t)b;
    else if (buf->kind == AMK_KIND_IO_INPUT && strcmp(buf->name, "pos") == 0)
      p->pos_buffer = (int32_t)b;
    else if (buf->kind == AMK_KIND_IO_OUTPUT && p->logits_buffer < 0)
      p->logits_buffer = (int32_t)b;
    if (buf->kind == AMK_KIND_KV_CACHE && buf->rank >= 1) {
      int64_t rows = p->buffers[b].shape[0];
      if (p->max_seq == 0 || rows < p->max_seq)
        p->max_seq = rows;
    }
  }
  if (p->token_buffer < 0 || p->logits_buffer < 0) {
    amk_error(diag, no_loc(),
              "the program has no %s buffer; the VM feeds an IO_INPUT named 'token_id' and "
              "reads the first IO_OUTPUT as the logits",
              p->token_buffer < 0 ? "IO_INPUT 'token_id'" : "IO_OUTPUT");
    return false;
  }
  AmkDType dt = p->buffers[p->logits_buffer].dtype;
  if (dt != AMK_DTYPE_F32 && dt != AMK_DTYPE_BF16 && dt != AMK_DTYPE_F16) {
    amk_error(diag, no_loc(), "the logits buffer '%s' is not a floating-point buffer",
              m->buffers[p->logits_buffer].name);
    return false;
  }
  /* A prefill program feeds `rows` tokens a step (token_id [rows]) at
   * positions pos..pos+rows-1 (a pos buffer of rows elements, or of one:
   * the first), and writes the logits of its last row, or of every row
   * ([rows, vocab]). */
  p->rows = p->buffers[p->token_buffer].numel;
  if (p->rows < 1 || p->rows > INT32_MAX ||
      (p->pos_buffer >= 0 && p->buffers[p->pos_buffer].numel != 1 &&
       p->buffers[p->pos_buffer].numel != p->rows)) {
    amk_error(diag, no_loc(),
              "the IO_INPUT 'token_id' has %" PRId64 " elements and 'pos' %" PRId64
              "; a step feeds token_id's tokens at positions given by one pos or one per token",
              p->rows, p->pos_buffer >= 0 ? p->buffers[p->pos_buffer].numel : 0);
    return false;
  }
  const AmkPlanBuffer *lb = &p->buffers[p->logits_buffer];
  p->logit_rows = 1;
  if (p->rows > 1 && lb->rank >= 2 && lb->shape[0] == p->rows)
    p->logit_rows = p->rows;
  p->vocab = lb->numel / p->logit_rows;
  if (p->max_seq == 0)
    p->max_seq = INT64_MAX; /* no cache: any position */
  return true;
}

/* ---- synthetic CONST buffers ------------------------------------------------ */

#define ROPE_INV_FREQ_SOURCE "amk.rope_inv_freq:"

/* One number of a synthetic source: the whole text must parse. */
static bool parse_number(const char *text, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || *end != '\0' || errno == ERANGE || !isfinite(v))
    return false;
  *out = v;
  return true;
}

/* Parses "head_dim=..,theta=..[,rope_type=llama3,factor=..,low_freq_factor=..,
 * high_freq_factor=..,original_max_position_embeddings=..]" (docs/Fusion.md).
 * Returns NULL or what is wrong. */
static const char *parse_rope_source(const char *text, AmkRopeSpec *spec) {
  *spec = (AmkRopeSpec){.kind = AMK_ROPE_DEFAULT};
  enum { HEAD_DIM, THETA, TYPE, FACTOR, LOW, HIGH, ORIGINAL, N_KEYS };
  static const char *const keys[N_KEYS] = {
      "head_dim", "theta", "rope_type", AMK_ROPE_PARAM_FACTOR, AMK_ROPE_PARAM_LOW_FREQ_FACTOR,
      AMK_ROPE_PARAM_HIGH_FREQ_FACTOR, AMK_ROPE_PARAM_ORIGINAL_MAX_POS};
  double value[N_KEYS] = {0};
  bool seen[N_KEYS] = {false};
  char copy[512];
  if (strlen(text) >= sizeof copy)
    return "the source is too long";
  memcpy(copy, text, strlen(text) + 1);
  char *save = NULL;
  for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(item, '=');
    if (!eq)
      return "an item is not key=value";
    *eq = '\0';
    int k = -1;
    for (int i = 0; i < N_KEYS; i++)
      if (strcmp(item, keys[i]) == 0)
        k = i;
    if (k < 0)
      return "unknown key";
    if (seen[k])
      return "a key is given twice";
    seen[k] = true;
    if (k == TYPE) {
      if (strcmp(eq + 1, "llama3") != 0)
        return "rope_type must be llama3";
    } else if (!parse_number(eq + 1, &value[k])) {
      return "a value is not a finite number";
    }
  }
  if (!seen[HEAD_DIM] || !seen[THETA])
    return "head_dim and theta are required";
  if (value[HEAD_DIM] != floor(value[HEAD_DIM]) || value[HEAD_DIM] <= 0 ||
      value[HEAD_DIM] > (1 << 20) || (int64_t)value[HEAD_DIM] % 2 != 0)
    return "head_dim must be a positive even integer";
  if (!(value[THETA] > 1.0))
    return "theta must be greater than 1";
  spec->head_dim = (int)value[HEAD_DIM];
  spec->theta = value[THETA];
  int scaled = seen[FACTOR] + seen[LOW] + seen[HIGH] + seen[ORIGINAL];
  if (!seen[TYPE] && scaled == 0)
    return NULL;
  if (!seen[TYPE] || scaled != 4)
    return "llama3 rope needs rope_type=llama3 with factor, low_freq_factor, "
           "high_freq_factor and original_max_position_embeddings";
  if (!(value[FACTOR] > 0.0) || !(value[LOW] > 0.0) || !(value[HIGH] > value[LOW]) ||
      !(value[ORIGINAL] > 0.0))
    return "llama3 rope needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
           "original_max_position_embeddings > 0";
  spec->kind = AMK_ROPE_LLAMA3;
  spec->factor = value[FACTOR];
  spec->low_freq_factor = value[LOW];
  spec->high_freq_factor = value[HIGH];
  spec->original_max_pos = value[ORIGINAL];
  return NULL;
}

/* The inverse frequencies, as fp32 exactly as the unfused path gets them:
 * the ROPE kernel's own 1 / powf(theta, i / half) for default rope (theta
 * marshalled to fp32 as the param is), the fp32 rounding of
 * amk_rope_inv_freq for llama3 (what a ROPE task's table holds). */
static void rope_inv_freq_f32(const AmkRopeSpec *spec, float *out, int half) {
  if (spec->kind == AMK_ROPE_DEFAULT) {
    float theta = (float)spec->theta;
    for (int i = 0; i < half; i++)
      out[i] = 1.0f / powf(theta, (float)i / (float)half);
    return;
  }
  double *freq = amk_xmalloc((size_t)(half > 0 ? half : 1) * sizeof *freq);
  amk_rope_inv_freq(spec, freq, half);
  for (int i = 0; i < half; i++)
    out[i] = (float)freq[i];
  free(freq);
}

/* A CONST buffer whose source starts with "amk." is computed, not loaded:
 * amk.rope_inv_freq:... (ROPE's frequencies) and amk.int:N (an I32 buffer
 * of N everywhere: the row a prefill program's EMBED picks). */
#define INT_SOURCE "amk.int:"
static bool is_synthetic(const AmkBuffer *buf) {
  return buf->kind == AMK_KIND_CONST && buf->source && strncmp(buf->source, "amk.", 4) == 0;
}

/* amk.int:N: every element N (an I32 buffer; N a decimal in int32). */
static bool synthesize_int(PlanStorage *s, uint32_t b, AmkDiagEngine *diag) {
  const AmkBuffer *buf = &s->pub.m->buffers[b];
  AmkPlanBuffer *pb = &s->pub.buffers[b];
  const char *text = buf->source + strlen(INT_SOURCE);
  char *end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || v < INT32_MIN || v > INT32_MAX ||
      buf->dtype != AMK_DTYPE_I32) {
    amk_error(diag, buf->loc,
              "CONST buffer '%s': the source '%s' makes an i32 buffer of one integer "
              "(amk.int:N, N in int32); this one is %s",
              buf->name, buf->source,
              buf->dtype != AMK_DTYPE_I32 ? "not i32" : "not such an integer");
    return false;
  }
  int32_t *ints = amk_xcalloc((size_t)(pb->numel > 0 ? pb->numel : 1), sizeof *ints);
  for (int64_t i = 0; i < pb->numel; i++)
    ints[i] = (int32_t)v;
  s->synthetic[b] = ints;
  pb->synthetic = ints;
  return true;
}

static bool synthesize_const(PlanStorage *s, uint32_t b, AmkDiagEngine *diag) {
  const AmkBuffer *buf = &s->pub.m->buffers[b];
  AmkPlanBuffer *pb = &s->pub.buffers[b];
  if (strncmp(buf->source, INT_SOURCE, strlen(INT_SOURCE)) == 0)
    return synthesize_int(s, b, diag);
  if (strncmp(buf->source, ROPE_INV_FREQ_SOURCE, strlen(ROPE_INV_FREQ_SOURCE)) != 0) {
    amk_error(diag, buf->loc,
              "CONST buffer '%s' has the synthetic source '%s', which the VM does not know "
              "(it computes only " ROPE_INV_FREQ_SOURCE "... and " INT_SOURCE "N)",
              buf->name, buf->source);
    return false;
  }
  AmkRopeSpec spec;
  const char *why = parse_rope_source(buf->source + strlen(ROPE_INV_FREQ_SOURCE), &spec);
  if (why) {
    amk_error(diag, buf->loc, "CONST buffer '%s': malformed source '%s': %s", buf->name,
              buf->source, why);
    return false;
  }
  int half = spec.head_dim / 2;
  if (pb->numel != half || (buf->dtype != AMK_DTYPE_F32 && buf->dtype != AMK_DTYPE_BF16 &&
                            buf->dtype != AMK_DTYPE_F16)) {
    amk_error(diag, buf->loc,
              "CONST buffer '%s' is %s with %" PRId64 " elements; its source '%s' gives %d "
              "floats (head_dim / 2)",
              buf->name, amk_dtype_text_name(buf->dtype), pb->numel, buf->source, half);
    return false;
  }
  char *bytes = amk_xcalloc(1, (size_t)(pb->nbytes > 0 ? pb->nbytes : 1));
  float *freq = amk_xmalloc((size_t)(half > 0 ? half : 1) * sizeof *freq);
  rope_inv_freq_f32(&spec, freq, half);
  for (int i = 0; i < half; i++) {
    if (buf->dtype == AMK_DTYPE_F32) {
      memcpy(bytes + (size_t)i * 4, &freq[i], 4);
    } else {
      uint16_t h = buf->dtype == AMK_DTYPE_BF16 ? amk_f32_to_bf16(freq[i])
                                                : amk_f32_to_f16(freq[i]);
      memcpy(bytes + (size_t)i * 2, &h, 2);
    }
  }
  free(freq);
  s->synthetic[b] = bytes;
  pb->synthetic = bytes;
  return true;
}

/* ---- order ------------------------------------------------------------------------ */

/* A global topological order: the task list when it is one, else Kahn's
 * (FIFO) over counters, a task being ready once every producer of each
 * counter it waits on is placed. Walking its queue in this order, every
 * block's earliest unfinished task is runnable: no deadlock whatever the
 * grid. */
static void plan_order(AmkPlan *p) {
  uint32_t n = p->n_tasks, nc = p->n_counters;
  p->order = amk_xmalloc((n ? n : 1) * sizeof *p->order);
  int64_t *last_producer = amk_xmalloc((nc ? nc : 1) * sizeof *last_producer);
  uint32_t *producers = amk_xcalloc(nc ? nc : 1, sizeof *producers);
  for (uint32_t c = 0; c < nc; c++)
    last_producer[c] = -1;
  for (uint32_t t = 0; t < n; t++) {
    last_producer[p->tasks[t].counter] = t;
    producers[p->tasks[t].counter]++;
  }
  bool list_ok = true;
  for (uint32_t t = 0; t < n && list_ok; t++)
    for (uint32_t k = p->tasks[t].wait_begin; k < p->tasks[t].wait_end; k++)
      if (last_producer[p->wait_counter[k]] >= (int64_t)t)
        list_ok = false;
  p->has_order = true;
  if (list_ok) {
    for (uint32_t t = 0; t < n; t++)
      p->order[t] = t;
  } else {
    uint32_t *placed = amk_xcalloc(nc ? nc : 1, sizeof *placed);
    bool *done = amk_xcalloc(n ? n : 1, sizeof *done);
    uint32_t k = 0;
    bool progress = true;
    while (k < n && progress) {
      progress = false;
      for (uint32_t t = 0; t < n; t++) {
        if (done[t])
          continue;
        bool ready = true;
        for (uint32_t w = p->tasks[t].wait_begin; w < p->tasks[t].wait_end && ready; w++)
          ready = placed[p->wait_counter[w]] == producers[p->wait_counter[w]];
        if (!ready)
          continue;
        done[t] = true;
        p->order[k++] = t;
        placed[p->tasks[t].counter]++;
        progress = true;
      }
    }
    p->has_order = k == n;
    free(placed);
    free(done);
  }
  free(last_producer);
  free(producers);
}

bool amk_plan_queues(const AmkPlan *p, int32_t n_queues, int32_t *queue_of, int32_t *offsets,
                     int32_t *queue, AmkDiagEngine *diag) {
  if (!p->has_order) {
    amk_error(diag, no_loc(), "the program's dependency graph has a cycle; nothing to launch");
    return false;
  }
  if (n_queues < 1)
    n_queues = 1;
  uint32_t n = p->n_tasks;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t t = p->order[k];
    queue_of[t] = p->sm_count > 0 ? p->tasks[t].sm % n_queues : (int32_t)(k % (uint32_t)n_queues);
  }
  memset(offsets, 0, ((size_t)n_queues + 1) * sizeof *offsets);
  for (uint32_t k = 0; k < n; k++)
    offsets[queue_of[p->order[k]] + 1]++;
  for (int32_t b = 0; b < n_queues; b++)
    offsets[b + 1] += offsets[b];
  int32_t *fill = amk_xcalloc((size_t)n_queues, sizeof *fill);
  for (uint32_t k = 0; k < n; k++) {
    int32_t q = queue_of[p->order[k]];
    queue[offsets[q] + fill[q]++] = (int32_t)p->order[k];
  }
  free(fill);
  return true;
}

/* ---- positions ------------------------------------------------------------------- */

AmkInstParams amk_plan_params_at(const AmkPlan *plan, uint32_t t, int64_t pos) {
  const AmkPlanTask *pt = &plan->tasks[t];
  AmkInstParams params = pt->params;
  switch (pt->follow) {
  case AMK_PLAN_FOLLOW_NONE:
    break;
  case AMK_PLAN_FOLLOW_KV_ROW:
    params.pos.i = (int32_t)pos;
    params.present |= AMK_PARAM_BIT(pos);
    break;
  case AMK_PLAN_FOLLOW_WINDOW:
    /* Up to the step's last row (pos + rows - 1). */
    params.kv_start.i = 0;
    params.kv_len.i = (int32_t)(pos + plan->rows);
    break;
  case AMK_PLAN_FOLLOW_PARTITION: {
    int64_t start, end;
    if (pt->part_count > 0) {
      int64_t window = pos + plan->rows;
      int64_t chunk = (window + pt->part_count - 1) / pt->part_count;
      start = pt->part_index * chunk;
      if (start > window)
        start = window;
      end = start + chunk < window ? start + chunk : window;
    } else {
      start = params.kv_start.i;
      end = start + pt->span < pos + plan->rows ? start + pt->span : pos + plan->rows;
    }
    params.kv_start.i = (int32_t)start;
    params.kv_len.i = (int32_t)(end > start ? end - start : 0);
    break;
  }
  }
  return params;
}

/* ---- building ---------------------------------------------------------------------- */

static bool is_low_precision(const AmkModule *m) {
  for (uint32_t b = 0; b < m->n_buffers; b++)
    if ((m->buffers[b].kind == AMK_KIND_WEIGHT || m->buffers[b].kind == AMK_KIND_IO_OUTPUT ||
         m->buffers[b].kind == AMK_KIND_ACTIVATION) &&
        (m->buffers[b].dtype == AMK_DTYPE_BF16 || m->buffers[b].dtype == AMK_DTYPE_F16))
      return true;
  return false;
}

/* An accumulating tile (mlp, attention_o): it adds into its output. */
static bool adds_to_output(const AmkPlanTask *pt) {
  return pt->op == AMK_OP_GEMV_TILE && amk_gemv_pattern_accumulates(pattern_of(&pt->params));
}

/* The accumulators: outputs of accumulating tiles. Their writers add to
 * them, so an engine zeroes them before every step; a page shared with
 * another buffer would hand that buffer's bytes to the first tile, and only
 * accumulating tiles may write one (the validator proves both; the plan
 * refuses them again so no engine can add to stale bytes). */
static bool plan_accumulators(AmkPlan *p, AmkDiagEngine *diag) {
  const AmkModule *m = p->m;
  for (uint32_t t = 0; t < p->n_tasks; t++) {
    const AmkPlanTask *pt = &p->tasks[t];
    if (adds_to_output(pt))
      for (uint32_t o = 0; o < pt->n_outputs; o++)
        p->buffers[pt->outputs[o]].accumulate = true;
  }
  for (uint32_t t = 0; t < p->n_tasks; t++) {
    const AmkPlanTask *pt = &p->tasks[t];
    bool adds = adds_to_output(pt);
    for (uint32_t o = 0; o < pt->n_outputs; o++)
      if (p->buffers[pt->outputs[o]].accumulate && !adds) {
        const AmkTask *task = &m->tasks[t];
        amk_error(diag, task->loc,
                  "task %d ('%s') writes accumulator '%s', which only accumulating tiles "
                  "(mlp, attention_o) may write",
                  task->id, task->label, m->buffers[pt->outputs[o]].name);
        return false;
      }
  }
  for (uint32_t b = 0; b < p->n_buffers; b++) {
    const AmkPlanBuffer *pb = &p->buffers[b];
    if (!pb->accumulate)
      continue;
    if (pb->dtype != AMK_DTYPE_F32) {
      amk_error(diag, m->buffers[b].loc,
                "accumulator '%s' is %s; accumulating tiles (mlp, attention_o) add into f32",
                m->buffers[b].name, amk_dtype_text_name(pb->dtype));
      return false;
    }
    for (uint32_t o = 0; pb->page >= 0 && o < p->n_buffers; o++)
      if (o != b && p->buffers[o].page == pb->page) {
        amk_error(diag, m->buffers[b].loc,
                  "accumulator '%s' shares page %d with '%s'; it needs a page of its own",
                  m->buffers[b].name, pb->page, m->buffers[o].name);
        return false;
      }
  }
  return true;
}

AmkPlan *amk_plan_build(const AmkModule *m, const AmkPlanOptions *opt, AmkDiagEngine *diag) {
  if (!(opt && opt->already_validated)) {
    AmkValidateResult result;
    if (!amk_validate_module(m, diag, NULL, &result)) {
      amk_error(diag, no_loc(),
                "the reference VM refuses to run a program that validate rejects");
      return NULL;
    }
  }
  PlanStorage *s = amk_xcalloc(1, sizeof *s);
  AmkPlan *p = &s->pub;
  p->m = m;
  p->n_tasks = m->n_tasks;
  p->n_buffers = m->n_buffers;
  p->n_counters = m->n_counters;
  s->synthetic = amk_xcalloc(m->n_buffers ? m->n_buffers : 1, sizeof *s->synthetic);
  bool ok = plan_buffers(p, diag) && plan_tasks(s, diag) && plan_partitions(p, diag) &&
            plan_quant(p, diag) && plan_accumulators(p, diag) && plan_io(p, diag);
  for (uint32_t b = 0; ok && b < m->n_buffers; b++)
    if (is_synthetic(&m->buffers[b]))
      ok = synthesize_const(s, b, diag);
  if (!ok) {
    amk_plan_free(p);
    return NULL;
  }
  plan_order(p);
  p->low_precision = is_low_precision(m);
  p->weight_bytes = amk_module_streamed_weight_bytes(m);
  return p;
}
