/* The lowered plan (amk/plan.h) and the weights loader (amk/weights.h).
 *
 *   test_plan SPLIT.amkir FUSED.amkir ASSIGNED.amkir CHECKPOINT_DIR UNFUSED.amkir
 *
 * SPLIT is a one-layer program tiled with two split-KV partitions and no SM
 * assignment; FUSED the same layer with three partitions, fused (the combine
 * folded into the o_proj tiles); ASSIGNED a compiled program with every task
 * on an SM and a synthetic rope CONST; CHECKPOINT_DIR a folder whose
 * checkpoint fits ASSIGNED; UNFUSED the same model imported and tiled, not
 * fused (kcache/vcache). Checks follow modes, partitions, params at a
 * position, IO, waits, queues, rope tables, the conflict error, the
 * already-validated option, both weight sources (a tied head's random
 * numbers) and KV rows copied between UNFUSED's and ASSIGNED's caches. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/engine.h"
#include "amk/fileio.h"
#include "amk/io.h"
#include "amk/plan.h"
#include "amk/safetensors.h"
#include "amk/sampling.h"
#include "amk/vm.h"
#include "amk/weights.h"
#include "unit.h"

static AmkDiagEngine *capture(void) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);
  return d;
}

static int count_errors_containing(const AmkDiagEngine *d, const char *needle) {
  int n = 0;
  for (size_t i = 0; i < amk_diag_captured_count(d); i++)
    if (amk_diag_captured(d, i)->severity == AMK_SEVERITY_ERROR &&
        strstr(amk_diag_captured(d, i)->message, needle))
      n++;
  return n;
}

static AmkModule *parse(const char *name, const char *text) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  AmkModule *m = amk_parse_text(name, text, strlen(text), d);
  amk_diag_free(d);
  return m;
}

static char *read_text(const char *path) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  size_t len;
  char *text = amk_read_file(path, &len, d);
  amk_diag_free(d);
  return text;
}

/* text with the first `from` replaced by `to` (malloc'd). */
static char *replace_once(const char *text, const char *from, const char *to) {
  const char *at = strstr(text, from);
  if (!at)
    return NULL;
  size_t n = strlen(text) - strlen(from) + strlen(to) + 1;
  char *out = malloc(n);
  snprintf(out, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
  return out;
}

static int32_t task_labelled(const AmkModule *m, const char *label) {
  for (uint32_t t = 0; t < m->n_tasks; t++)
    if (m->tasks[t].label && strcmp(m->tasks[t].label, label) == 0)
      return (int32_t)t;
  return -1;
}

static int32_t buffer_named(const AmkModule *m, const char *name) {
  for (uint32_t b = 0; b < m->n_buffers; b++)
    if (strcmp(m->buffers[b].name, name) == 0)
      return (int32_t)b;
  return -1;
}

/* Every task once, and each queue in the order of plan->order. */
static bool queues_hold_order(const AmkPlan *p, int32_t n_queues, const int32_t *offsets,
                              const int32_t *queue) {
  uint32_t *rank = calloc(p->n_tasks + 1, sizeof *rank);
  int *seen = calloc(p->n_tasks + 1, sizeof *seen);
  for (uint32_t k = 0; k < p->n_tasks; k++)
    rank[p->order[k]] = k;
  bool ok = offsets[0] == 0 && offsets[n_queues] == (int32_t)p->n_tasks;
  for (int32_t q = 0; q < n_queues && ok; q++)
    for (int32_t i = offsets[q]; i < offsets[q + 1]; i++) {
      seen[queue[i]]++;
      if (i > offsets[q] && rank[queue[i]] <= rank[queue[i - 1]])
        ok = false;
    }
  for (uint32_t t = 0; t < p->n_tasks && ok; t++)
    ok = seen[t] == 1;
  free(rank);
  free(seen);
  return ok;
}

/* Parses `text` and plans it, capturing the diagnostics; false, with
 * nothing left to free, when either step fails. */
static bool parse_and_plan(UnitCounts *c, const char *name, const char *text, AmkModule **m,
                           AmkDiagEngine **d, AmkPlan **p) {
  *m = parse(name, text);
  CHECK(c, *m != NULL);
  if (!*m)
    return false;
  *d = capture();
  *p = amk_plan_build(*m, NULL, *d);
  CHECK(c, *p != NULL);
  CHECK(c, amk_diag_error_count(*d) == 0);
  if (*p)
    return true;
  amk_diag_free(*d);
  amk_module_free(*m);
  return false;
}

static void test_split(UnitCounts *c, const char *text) {
  AmkModule *m;
  AmkDiagEngine *d;
  AmkPlan *p;
  if (!parse_and_plan(c, "split", text, &m, &d, &p))
    return;
  /* IO and sizes. */
  CHECK(c, p->token_buffer == buffer_named(m, "token_id"));
  CHECK(c, p->pos_buffer == buffer_named(m, "pos"));
  CHECK(c, p->logits_buffer == buffer_named(m, "logits"));
  CHECK(c, p->vocab == 64);
  CHECK(c, p->max_seq == 16);
  CHECK(c, !p->low_precision);
  /* Follow modes and partitions. */
  int32_t p0 = task_labelled(m, "L0.attention[p0.kv0]");
  int32_t p1 = task_labelled(m, "L0.attention[p1.kv1]");
  int32_t combine = task_labelled(m, "L0.attention.combine");
  int32_t append = task_labelled(m, "L0.k_append");
  int32_t rope = task_labelled(m, "L0.rope_q");
  int32_t embed = task_labelled(m, "embed");
  CHECK(c, p0 >= 0 && p1 >= 0 && combine >= 0 && append >= 0 && rope >= 0 && embed >= 0);
  if (p0 < 0 || p1 < 0 || combine < 0 || append < 0 || rope < 0 || embed < 0)
    goto done;
  CHECK(c, p->tasks[p0].follow == AMK_PLAN_FOLLOW_PARTITION);
  CHECK(c, p->tasks[p0].part_index == 0 && p->tasks[p0].part_count == 2);
  CHECK(c, p->tasks[p1].follow == AMK_PLAN_FOLLOW_PARTITION);
  CHECK(c, p->tasks[p1].part_index == 1 && p->tasks[p1].part_count == 2);
  CHECK(c, p->tasks[combine].follow == AMK_PLAN_FOLLOW_NONE);
  /* Every partial follows a partition: the combine may skip empty ones,
   * and the partitions need not write them. */
  CHECK(c, p->tasks[combine].combine_follows);
  CHECK(c, p->tasks[p0].combine_follows && p->tasks[p1].combine_follows);
  CHECK(c, !p->tasks[append].combine_follows && !p->tasks[embed].combine_follows);
  CHECK(c, p->tasks[append].follow == AMK_PLAN_FOLLOW_KV_ROW);
  CHECK(c, p->tasks[embed].follow == AMK_PLAN_FOLLOW_NONE);
  /* At position 4 the window is 5 rows, chunks of 3: [0, 3) and [3, 5). */
  AmkInstParams a = amk_plan_params_at(p, (uint32_t)p0, 4);
  CHECK(c, a.kv_start.i == 0 && a.kv_len.i == 3);
  a = amk_plan_params_at(p, (uint32_t)p1, 4);
  CHECK(c, a.kv_start.i == 3 && a.kv_len.i == 2);
  /* At position 0 the second share is empty. */
  a = amk_plan_params_at(p, (uint32_t)p1, 0);
  CHECK(c, a.kv_start.i == 1 && a.kv_len.i == 0);
  a = amk_plan_params_at(p, (uint32_t)append, 7);
  CHECK(c, a.pos.i == 7 && amk_inst_param_has(&a, AMK_PARAM_pos));
  a = amk_plan_params_at(p, (uint32_t)embed, 7);
  CHECK(c, memcmp(&a, &p->tasks[embed].params, sizeof a) == 0);
  /* Buffers and waits: the combine reads both partials and waits for all
   * four partial tiles on one counter. */
  const AmkPlanTask *ct = &p->tasks[combine];
  CHECK(c, ct->n_inputs == 2 && ct->inputs[0] == (uint32_t)buffer_named(m, "L0.attn.part0") &&
               ct->inputs[1] == (uint32_t)buffer_named(m, "L0.attn.part1"));
  CHECK(c, ct->n_outputs == 1 && ct->outputs[0] == (uint32_t)buffer_named(m, "L0.attn"));
  CHECK(c, ct->wait_end - ct->wait_begin == 1);
  CHECK(c, p->wait_threshold[ct->wait_begin] == 4);
  CHECK(c, p->wait_counter[ct->wait_begin] == p->tasks[p0].counter);
  /* A ROPE task without a frequency input gets the kernel's own table. */
  const AmkPlanTask *rt = &p->tasks[rope];
  CHECK(c, rt->rope_inv_freq != NULL && rt->rope_half == 4);
  if (rt->rope_inv_freq)
    CHECK(c, rt->rope_inv_freq[0] == 1.0f &&
                 rt->rope_inv_freq[1] == 1.0f / powf(10000.0f, 0.25f));
  CHECK(c, p->tasks[embed].rope_inv_freq == NULL);
  /* No SM assignment: the queues go round robin in topological order. */
  CHECK(c, p->sm_count == 0 && p->has_order);
  int32_t *queue_of = calloc(p->n_tasks, sizeof *queue_of);
  int32_t offsets[4], *queue = calloc(p->n_tasks, sizeof *queue);
  CHECK(c, amk_plan_queues(p, 3, queue_of, offsets, queue, d));
  CHECK(c, queues_hold_order(p, 3, offsets, queue));
  for (uint32_t k = 0; k < p->n_tasks; k++)
    CHECK(c, queue_of[p->order[k]] == (int32_t)(k % 3));
  free(queue_of);
  free(queue);
done:
  amk_plan_free(p);
  amk_diag_free(d);
  amk_module_free(m);
}

/* Plans m expecting a refusal (no plan); the captured diagnostics, to free. */
static AmkDiagEngine *plan_refused(UnitCounts *c, const AmkModule *m) {
  AmkDiagEngine *d = capture();
  AmkPlan *p = amk_plan_build(m, NULL, d);
  CHECK(c, p == NULL);
  amk_plan_free(p);
  return d;
}

/* Two combines reading a partial as different partitions: one error, from
 * the plan, and no plan. */
static void test_conflict(UnitCounts *c, const char *text) {
  const char *extra =
      "buffer %L0.attn.swapped : f32[1, 32] activation\n"
      "counter #L0.attn.swapped \"L0.attention.swapped\"\n"
      "task 99 attention_combine(%L0.attn.part1, %L0.attn.part0) -> %L0.attn.swapped "
      "wait #L0.attn.partials >= 4 signal #L0.attn.swapped {head_dim = 8, n_heads = 4} "
      "label \"swapped\"\n";
  size_t n = strlen(text) + strlen(extra) + 1;
  char *joined = malloc(n);
  snprintf(joined, n, "%s%s", text, extra);
  AmkModule *m = parse("conflict", joined);
  CHECK(c, m != NULL);
  if (m) {
    AmkDiagEngine *d = plan_refused(c, m);
    CHECK(c, amk_diag_error_count(d) == 1);
    CHECK(c, count_errors_containing(d, "buffer 'L0.attn.part1' is partial 0 of 2 here but "
                                        "partial 1 of 2 of another combine") == 1);
    amk_diag_free(d);
  }
  amk_module_free(m);
  free(joined);
}

/* Partitions come from the combine_residual tiles when no combine is left:
 * input 0 is partition 0, input k >= 3 partition k - 2, of n_inputs - 2;
 * the tiles stream their rows of W. A tile reading the partials in another
 * order is a conflict. */
static void test_fused_split(UnitCounts *c, const char *text) {
  AmkModule *m;
  AmkDiagEngine *d;
  AmkPlan *p;
  if (!parse_and_plan(c, "fused", text, &m, &d, &p))
    return;
  const char *labels[3] = {"L0.attention[p0.kv1]", "L0.attention[p1.kv0]",
                           "L0.attention[p2.kv1]"};
  for (int64_t part = 0; part < 3; part++) {
    int32_t t = task_labelled(m, labels[part]);
    CHECK(c, t >= 0);
    if (t < 0)
      continue;
    CHECK(c, p->tasks[t].follow == AMK_PLAN_FOLLOW_PARTITION);
    CHECK(c, p->tasks[t].part_index == part && p->tasks[t].part_count == 3);
    CHECK(c, p->tasks[t].combine_follows);
    /* At position 4: a window of 5 rows in chunks of 2. */
    AmkInstParams a = amk_plan_params_at(p, (uint32_t)t, 4);
    CHECK(c, a.kv_start.i == 2 * part && a.kv_len.i == (part < 2 ? 2 : 1));
  }
  int32_t o = task_labelled(m, "L0.o_proj[t1]");
  CHECK(c, o >= 0);
  if (o >= 0) {
    const AmkPlanTask *pt = &p->tasks[o];
    int64_t row = 4 * (int64_t)pt->params.K.i;
    CHECK(c, pt->n_inputs == 5 && pt->follow == AMK_PLAN_FOLLOW_NONE);
    CHECK(c, pt->combine_follows);
    CHECK(c, pt->weight_read.buffer == buffer_named(m, "L0.o_proj.w"));
    CHECK(c, pt->weight_read.offset == 16 * row && pt->weight_read.nbytes == 16 * row);
  }
  amk_plan_free(p);
  amk_diag_free(d);
  amk_module_free(m);

  const char *extra =
      "buffer %L0.swapped : f32[1, 32] activation\n"
      "counter #L0.swapped \"L0.swapped\"\n"
      "task 99 gemv_tile(%L0.attn.part0, %L0.o_proj.w, %h0, %L0.attn.part2, %L0.attn.part1) "
      "-> %L0.swapped wait #h0 >= 1, #L0.attn.partials >= 6 signal #L0.swapped "
      "{K = 32, N_tile = 32, n_off = 0, flags = 524288, head_dim = 8, n_heads = 4} "
      "label \"swapped\"\n";
  size_t n = strlen(text) + strlen(extra) + 1;
  char *joined = malloc(n);
  snprintf(joined, n, "%s%s", text, extra);
  m = parse("fused-conflict", joined);
  CHECK(c, m != NULL);
  if (m) {
    d = plan_refused(c, m);
    CHECK(c, amk_diag_error_count(d) == 1);
    CHECK(c, count_errors_containing(d, "buffer 'L0.attn.part2' is partial 1 of 3 here but "
                                        "partial 2 of 3 of another combine") == 1);
    amk_diag_free(d);
  }
  amk_module_free(m);
  free(joined);
}

/* A racy program: refused unless the caller says it validated it. */
static void test_validation_option(UnitCounts *c, const char *text) {
  char *racy = replace_once(text, "wait #L0.attn.partials >= 4 ", "");
  CHECK(c, racy != NULL);
  if (!racy)
    return;
  AmkModule *m = parse("racy", racy);
  CHECK(c, m != NULL);
  if (m) {
    AmkDiagEngine *d = plan_refused(c, m);
    CHECK(c, count_errors_containing(d, "refuses to run a program that validate rejects") == 1);
    amk_diag_free(d);
    d = capture();
    AmkPlanOptions trusted = {.already_validated = true};
    AmkPlan *p = amk_plan_build(m, &trusted, d);
    CHECK(c, p != NULL);
    CHECK(c, amk_diag_error_count(d) == 0);
    amk_plan_free(p);
    amk_diag_free(d);
  }
  amk_module_free(m);
  free(racy);
}

static void test_assigned(UnitCounts *c, const char *text, const char *checkpoint) {
  AmkModule *m;
  AmkDiagEngine *d;
  AmkPlan *p;
  if (!parse_and_plan(c, "assigned", text, &m, &d, &p))
    return;
  /* Every task on an SM: queue sm % n, in topological order. */
  int32_t max_sm = -1;
  for (uint32_t t = 0; t < m->n_tasks; t++)
    if (m->tasks[t].sm > max_sm)
      max_sm = m->tasks[t].sm;
  CHECK(c, p->sm_count == max_sm + 1 && p->sm_count > 2);
  int32_t *queue_of = calloc(p->n_tasks, sizeof *queue_of);
  int32_t *offsets = calloc((size_t)p->sm_count + 1, sizeof *offsets);
  int32_t *queue = calloc(p->n_tasks, sizeof *queue);
  CHECK(c, amk_plan_queues(p, p->sm_count, queue_of, offsets, queue, d));
  CHECK(c, queues_hold_order(p, p->sm_count, offsets, queue));
  for (uint32_t t = 0; t < p->n_tasks; t++)
    CHECK(c, queue_of[t] == m->tasks[t].sm);
  /* Folded onto two blocks. */
  CHECK(c, amk_plan_queues(p, 2, queue_of, offsets, queue, d));
  CHECK(c, queues_hold_order(p, 2, offsets, queue));
  for (uint32_t t = 0; t < p->n_tasks; t++)
    CHECK(c, queue_of[t] == m->tasks[t].sm % 2);
  free(queue_of);
  free(offsets);
  free(queue);
  /* The weight rows a GEMV tile streams. */
  int32_t lm = task_labelled(m, "lm_head[t1]");
  CHECK(c, lm >= 0);
  if (lm >= 0) {
    const AmkPlanTask *pt = &p->tasks[lm];
    int64_t row = 4 * (int64_t)pt->params.K.i;
    CHECK(c, pt->weight_read.buffer == (int32_t)pt->inputs[1]);
    CHECK(c, pt->weight_read.offset == pt->params.n_off.i * row);
    CHECK(c, pt->weight_read.nbytes == pt->params.N_tile.i * row);
  }
  CHECK(c, p->tasks[0].weight_read.buffer == -1); /* embed streams no tile */
  /* The synthetic rope CONST is computed by the plan. */
  int32_t freq = buffer_named(m, "rope.inv_freq");
  CHECK(c, freq >= 0 && p->buffers[freq].synthetic != NULL);
  if (freq >= 0 && p->buffers[freq].synthetic) {
    const float *f = p->buffers[freq].synthetic;
    CHECK(c, f[0] == 1.0f && f[1] < 1.0f && f[1] > 0.0f);
  }

  /* Random weights: a rule per buffer that reproduces its bytes, buffers
   * taking consecutive stretches of one stream. */
  AmkWeights *w = amk_weights_random(p, 42, d);
  CHECK(c, w != NULL);
  int32_t embed_w = buffer_named(m, "embed.w"), norm_w = buffer_named(m, "L0.input_norm.w");
  AmkRandomRule first, second;
  CHECK(c, amk_weights_random_rule(w, (uint32_t)embed_w, &first) && first.state == 42 &&
               first.center == 0.0 && first.scale == 1.0 / sqrt(64.0));
  CHECK(c, amk_weights_random_rule(w, (uint32_t)norm_w, &second) && second.center == 1.0 &&
               second.scale == 0.1);
  CHECK(c, !amk_weights_random_rule(w, (uint32_t)freq, &second));
  CHECK(c, amk_weights_origin(w, (uint32_t)freq) == AMK_WEIGHTS_SYNTHETIC);
  CHECK(c, amk_weights_origin(w, (uint32_t)p->logits_buffer) == AMK_WEIGHTS_NONE);
  size_t nbytes = 0;
  const void *bytes = amk_weights_data(w, (uint32_t)embed_w, &nbytes);
  void *again = malloc(nbytes);
  amk_random_fill(&first, AMK_DTYPE_F32, (int64_t)(nbytes / 4), again);
  CHECK(c, bytes && nbytes == 256 * 64 * 4 && memcmp(bytes, again, nbytes) == 0);
  free(again);
  amk_weights_free(w);

  /* A checkpoint of the program's dtype is handed over in place. */
  w = amk_weights_load(p, checkpoint, d);
  CHECK(c, w != NULL);
  if (w) {
    AmkSafetensors *st = amk_safetensors_open(checkpoint, d);
    const AmkStTensor *t = st ? amk_safetensors_find(st, "model.embed_tokens.weight") : NULL;
    bytes = amk_weights_data(w, (uint32_t)embed_w, &nbytes);
    CHECK(c, t && bytes && nbytes == t->nbytes && memcmp(bytes, t->data, nbytes) == 0);
    CHECK(c, amk_weights_origin(w, (uint32_t)embed_w) == AMK_WEIGHTS_MAPPED ||
                 (uintptr_t)t->data % 4 != 0);
    /* A '+'-joined source of the buffer's dtype stays in the file as pieces
     * in order; the host copy joins them only when asked for. */
    int32_t qkv = buffer_named(m, "L0.qkv_proj.w");
    const char *parts[] = {"model.layers.0.self_attn.q_proj.weight",
                           "model.layers.0.self_attn.k_proj.weight",
                           "model.layers.0.self_attn.v_proj.weight"};
    const AmkWeightPiece *pieces = NULL;
    uint32_t n_pieces = 0;
    CHECK(c, qkv >= 0 && amk_weights_origin(w, (uint32_t)qkv) == AMK_WEIGHTS_JOINED);
    CHECK(c, amk_weights_pieces(w, (uint32_t)qkv, &pieces, &n_pieces) && n_pieces == 3);
    size_t at = 0;
    for (uint32_t i = 0; i < n_pieces && i < 3 && st; i++) {
      const AmkStTensor *part = amk_safetensors_find(st, parts[i]);
      CHECK(c, part && pieces[i].offset == at && pieces[i].nbytes == part->nbytes &&
                   memcmp(pieces[i].data, part->data, part->nbytes) == 0);
      at += part ? part->nbytes : 0;
    }
    bytes = amk_weights_data(w, (uint32_t)qkv, &nbytes);
    CHECK(c, bytes && nbytes == at && nbytes == 128 * 64 * 4);
    for (uint32_t i = 0; bytes && i < n_pieces; i++)
      CHECK(c, memcmp((const char *)bytes + pieces[i].offset, pieces[i].data,
                      pieces[i].nbytes) == 0);
    CHECK(c, !amk_weights_pieces(w, (uint32_t)freq, &pieces, &n_pieces));
    amk_safetensors_close(st);
    amk_weights_free(w);
  }
  /* Large random buffers are filled by several threads; the bytes are the
   * stream's, element by element. */
  {
    AmkRandomRule rule = {.state = 99, .center = 0.0, .scale = 0.5};
    int64_t n = 3 << 20;
    float *got = malloc((size_t)n * sizeof *got);
    amk_random_fill(&rule, AMK_DTYPE_F32, n, got);
    uint64_t state = rule.state;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
      double u = (double)(amk_splitmix64(&state) >> 11) * (1.0 / 9007199254740992.0);
      float want = (float)(rule.center + rule.scale * (2.0 * u - 1.0));
      bad += memcmp(&want, &got[i], sizeof want) != 0;
    }
    CHECK(c, bad == 0);
    free(got);
  }
  /* Two CPU engines over one plan and one set of weights (what --check
   * does with the GPU) agree; the optional hooks the VM lacks say so. */
  w = amk_weights_random(p, 7, d);
  AmkEngineOptions one_thread = amk_engine_options_default(), three = one_thread;
  one_thread.threads = 1;
  three.threads = 3;
  AmkEngine *e1 = amk_engine_create(amk_vm_engine(), p, w, &one_thread, d);
  AmkEngine *e2 = amk_engine_create(amk_vm_engine(), p, w, &three, d);
  CHECK(c, e1 && e2);
  if (e1 && e2) {
    CHECK_STR(c, amk_engine_name(e1), "cpu");
    /* The describe line gives the worker threads, and says when the
     * program is too small for them. */
    CHECK_STR(c, amk_engine_describe(e1), "CPU reference VM, 1 worker thread");
    char want[128];
    snprintf(want, sizeof want,
             "CPU reference VM, 3 worker threads (this program's %u tasks fire in order: "
             "threads start at 256 tasks)",
             (unsigned)p->n_tasks);
    CHECK_STR(c, amk_engine_describe(e2), want);
    CHECK(c, amk_engine_max_seq(e1) == 128 && amk_engine_vocab(e1) == 256);
    CHECK(c, !amk_engine_measures_kernel_time(e1));
    CHECK(c, amk_engine_measure_read_bw(e1, 0, 3, d) <= 0);
    struct AmkTrace *no_trace = NULL;
    CHECK(c, !amk_engine_trace(e1, no_trace, d) &&
                 count_errors_containing(d, "the cpu engine records no traces") == 1);
    for (int64_t pos = 0; pos < 3; pos++) {
      CHECK(c, amk_engine_step(e1, (int32_t)(pos + 5), pos, NULL, d) == AMK_STEP_OK);
      CHECK(c, amk_engine_step(e2, (int32_t)(pos + 5), pos, NULL, d) == AMK_STEP_OK);
    }
    size_t n1 = 0, n2 = 0;
    const float *l1 = amk_engine_logits(e1, &n1), *l2 = amk_engine_logits(e2, &n2);
    CHECK(c, n1 == 256 && n2 == 256 && memcmp(l1, l2, n1 * sizeof *l1) == 0);
    AmkLogitCheck cr = amk_check_logits(l1, l2, n1, false);
    CHECK(c, cr.pass && cr.max_abs == 0);
    CHECK(c, amk_engine_step(e1, 256, 3, NULL, d) == AMK_STEP_ERROR);
    CHECK(c, amk_engine_step(e1, 1, 128, NULL, d) == AMK_STEP_ERROR);
    CHECK(c, amk_engine_reset(e1, d));
  }
  amk_engine_free(e1);
  amk_engine_free(e2);
  amk_weights_free(w);
  /* A missing folder is an error naming it, not a crash. */
  w = amk_weights_load(p, "/nonexistent/amk-plan-test", d);
  CHECK(c, w == NULL && count_errors_containing(d, "amk-plan-test") >= 1);
  amk_plan_free(p);
  amk_diag_free(d);
  amk_module_free(m);
}

/* Random weights of a tied lm_head: the embedding's tensor again (one rule,
 * the same bytes), taking no stretch of the stream, so that a program that
 * finds either buffer by source (a prefill program) sees the same numbers. */
static void test_tied_random(UnitCounts *c, const char *text) {
  char *tied = replace_once(text, "source \"lm_head.weight\"",
                            "source \"model.embed_tokens.weight\"");
  AmkModule *um, *tm;
  AmkDiagEngine *ud, *td;
  AmkPlan *up, *tp;
  CHECK(c, tied != NULL);
  if (!tied || !parse_and_plan(c, "untied", text, &um, &ud, &up)) {
    free(tied);
    return;
  }
  if (!parse_and_plan(c, "tied", tied, &tm, &td, &tp)) {
    amk_plan_free(up);
    amk_diag_free(ud);
    amk_module_free(um);
    free(tied);
    return;
  }
  AmkWeights *uw = amk_weights_random(up, 9, ud), *tw = amk_weights_random(tp, 9, td);
  CHECK(c, uw && tw);
  int32_t embed = buffer_named(tm, "embed.w"), head = buffer_named(tm, "lm_head.w");
  int32_t after = buffer_named(tm, "L0.qkv_proj.w"); /* the next weight in list order */
  AmkRandomRule e, h, u_head, u_after, t_after;
  CHECK(c, embed >= 0 && head > embed && after > head);
  if (uw && tw && embed >= 0 && head > embed && after > head) {
    CHECK(c, amk_weights_random_rule(tw, (uint32_t)embed, &e) &&
                 amk_weights_random_rule(tw, (uint32_t)head, &h) && e.state == h.state &&
                 e.center == h.center && e.scale == h.scale);
    size_t ne = 0, nh = 0;
    const void *be = amk_weights_data(tw, (uint32_t)embed, &ne);
    const void *bh = amk_weights_data(tw, (uint32_t)head, &nh);
    CHECK(c, be && bh && ne == 256 * 64 * 4 && nh == ne && memcmp(be, bh, ne) == 0);
    /* Untied, the head has a stretch of its own; tied, the next buffer
     * starts where the untied head did. */
    CHECK(c, amk_weights_random_rule(uw, (uint32_t)head, &u_head) && u_head.state != e.state);
    CHECK(c, amk_weights_random_rule(uw, (uint32_t)after, &u_after) &&
                 amk_weights_random_rule(tw, (uint32_t)after, &t_after) &&
                 t_after.state == u_head.state && u_after.state != t_after.state);
  }
  amk_weights_free(uw);
  amk_weights_free(tw);
  amk_plan_free(up);
  amk_plan_free(tp);
  amk_diag_free(ud);
  amk_diag_free(td);
  amk_module_free(um);
  amk_module_free(tm);
  free(tied);
}

/* text with every `from` replaced by `to` (malloc'd). */
static char *replace_all(const char *text, const char *from, const char *to) {
  char *out = strdup(text);
  for (char *next; out && strstr(out, from); out = next) {
    next = replace_once(out, from, to);
    free(out);
  }
  return out;
}

/* KV rows across layouts (runtime/kv_layout.c): rows of an unfused
 * program's kcache/vcache [max_seq, n_kv, head_dim] land in a fused one's
 * per-head caches [max_seq, 2, head_dim] (plane 0 keys, 1 values), at the
 * places the layouts' definitions give, and nowhere else; a cache of no
 * known layout is an error naming it. llama-tiny: 2 layers, 2 KV heads,
 * head_dim 16, 128 rows. */
static void test_kv_map(UnitCounts *c, const char *unfused_text, const char *fused_text) {
  AmkModule *um, *fm;
  AmkDiagEngine *ud, *fd;
  AmkPlan *up, *fp;
  if (!parse_and_plan(c, "unfused", unfused_text, &um, &ud, &up))
    return;
  if (!parse_and_plan(c, "fused", fused_text, &fm, &fd, &fp)) {
    amk_plan_free(up);
    amk_diag_free(ud);
    amk_module_free(um);
    return;
  }
  AmkWeights *uw = amk_weights_random(up, 3, ud), *fw = amk_weights_random(fp, 3, fd);
  AmkEngineOptions one = amk_engine_options_default();
  one.threads = 1;
  AmkEngine *ue = uw ? amk_engine_create(amk_vm_engine(), up, uw, &one, ud) : NULL;
  AmkEngine *fe = fw ? amk_engine_create(amk_vm_engine(), fp, fw, &one, fd) : NULL;
  AmkKvMap *to_fused = amk_kv_map_new(fp, up, fd), *to_unfused = amk_kv_map_new(up, fp, ud);
  CHECK(c, ue && fe && to_fused && to_unfused);
  CHECK(c, !amk_kv_same_caches(up, fp) && amk_kv_same_caches(up, up));
  enum { ROWS = 128, NKV = 2, HD = 16 };
  if (ue && fe && to_fused && to_unfused) {
    /* Element e of layer L's kcache holds 1000 * L + e + 1, of its vcache
     * the negative. */
    const char *layers[2] = {"L0.", "L1."};
    for (int l = 0; l < 2; l++)
      for (int plane = 0; plane < 2; plane++) {
        char name[32];
        snprintf(name, sizeof name, "%s%s", layers[l], plane ? "vcache" : "kcache");
        int32_t b = buffer_named(um, name);
        size_t nbytes = 0;
        float *f = b >= 0 ? amk_engine_kv_data(ue, (uint32_t)b, &nbytes) : NULL;
        CHECK(c, f && nbytes == ROWS * NKV * HD * sizeof *f);
        for (size_t e = 0; f && e < nbytes / sizeof *f; e++)
          f[e] = (plane ? -1.0f : 1.0f) * (float)(1000 * l + (int)e + 1);
      }
    CHECK(c, amk_engine_copy_kv_rows(to_fused, fe, ue, 2, 5, fd));
    int bad = 0, copied = 0;
    for (int l = 0; l < 2; l++)
      for (int h = 0; h < NKV; h++) {
        char name[32];
        snprintf(name, sizeof name, "%skv_cache.h%d", layers[l], h);
        int32_t b = buffer_named(fm, name);
        size_t nbytes = 0;
        const float *f = b >= 0 ? amk_engine_kv_data(fe, (uint32_t)b, &nbytes) : NULL;
        CHECK(c, f && nbytes == ROWS * 2 * HD * sizeof *f);
        for (int r = 0; f && r < ROWS; r++)
          for (int plane = 0; plane < 2; plane++)
            for (int d = 0; d < HD; d++) {
              float got = f[(r * 2 + plane) * HD + d];
              float want = r >= 2 && r < 5 ? (plane ? -1.0f : 1.0f) *
                                                 (float)(1000 * l + (r * NKV + h) * HD + d + 1)
                                           : 0.0f;
              bad += got != want;
              copied += got != 0.0f;
            }
      }
    CHECK(c, bad == 0 && copied == 2 * NKV * 3 * 2 * HD);
    /* And back: a row of the fused caches into a cleared unfused pair. */
    amk_engine_reset(ue, ud);
    CHECK(c, amk_engine_copy_kv_rows(to_unfused, ue, fe, 3, 4, ud));
    size_t nbytes = 0;
    const float *k1 = amk_engine_kv_data(ue, (uint32_t)buffer_named(um, "L1.kcache"), &nbytes);
    CHECK(c, k1 && k1[(3 * NKV + 1) * HD + 5] == (float)(1000 + (3 * NKV + 1) * HD + 5 + 1) &&
                 k1[(2 * NKV + 1) * HD + 5] == 0.0f);
  }
  amk_kv_map_free(to_fused);
  amk_kv_map_free(to_unfused);
  /* A per-head cache renamed out of the known layouts. */
  char *renamed = replace_all(fused_text, "L0.kv_cache.h1", "L0.kv_store.h1");
  AmkModule *rm = NULL;
  AmkDiagEngine *rd = NULL;
  AmkPlan *rp = NULL;
  if (renamed && parse_and_plan(c, "renamed", renamed, &rm, &rd, &rp)) {
    CHECK(c, amk_kv_map_new(rp, up, rd) == NULL &&
                 count_errors_containing(rd, "KV cache 'L0.kv_store.h1' is none of the layouts") ==
                     1);
    amk_plan_free(rp);
    amk_diag_free(rd);
    amk_module_free(rm);
  }
  free(renamed);
  amk_engine_free(ue);
  amk_engine_free(fe);
  amk_weights_free(uw);
  amk_weights_free(fw);
  amk_plan_free(up);
  amk_plan_free(fp);
  amk_diag_free(ud);
  amk_diag_free(fd);
  amk_module_free(um);
  amk_module_free(fm);
}

int main(int argc, char **argv) {
  UnitCounts c = {0};
  if (argc != 6) {
    fprintf(stderr, "usage: test_plan SPLIT.amkir FUSED.amkir ASSIGNED.amkir CHECKPOINT_DIR "
                    "UNFUSED.amkir\n");
    return 2;
  }
  char *split = read_text(argv[1]), *fused = read_text(argv[2]);
  char *assigned = read_text(argv[3]);
  CHECK(&c, split != NULL && fused != NULL && assigned != NULL);
  if (split && fused && assigned) {
    test_split(&c, split);
    test_conflict(&c, split);
    test_fused_split(&c, fused);
    test_validation_option(&c, split);
    test_assigned(&c, assigned, argv[4]);
    test_tied_random(&c, assigned);
    char *unfused = read_text(argv[5]);
    CHECK(&c, unfused != NULL);
    if (unfused)
      test_kv_map(&c, unfused, assigned);
    free(unfused);
  }
  free(split);
  free(fused);
  free(assigned);
  return unit_finish("test_plan", &c);
}
