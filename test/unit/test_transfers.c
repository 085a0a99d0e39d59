/* Launch-tagged transfers (backend/transfers.c, docs/Backend.md): which
 * hops become tagged and what waits the device keeps.
 *
 *   test_transfers TINY.amkir ONE_B.amkir
 *
 * TINY is llama-tiny with two split-KV partitions, fused (attention tiles
 * writing partials, o_proj tiles folding the combine); ONE_B the 1B shape
 * through the default pipeline (its mlp tiles too). Every property is
 * checked against the plan's own waits and buffers: a tagged consumer keeps
 * every wait it had (before it runs, or before it signals), reads through
 * shadows exactly the outputs of the producers it no longer waits for, and
 * takes those producers' waits; a hop whose consumer would write a page its
 * producers touch is refused. A third program, llama-tiny with every fusion
 * (split_o's attention_o tiles, built here), has no hop into or out of its
 * attention_o tiles: they read qkv directly and add into an accumulator,
 * which no reader takes through a shadow. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/backend.h"
#include "amk/io.h"
#include "amk/pipeline.h"
#include "amk/plan.h"
#include "unit.h"
#include "unit_program.h"

static AmkPlan *plan_of(const AmkModule *m, bool trusted) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  AmkPlanOptions opt = {.already_validated = trusted};
  AmkPlan *p = amk_plan_build(m, &opt, d);
  amk_diag_free(d);
  return p;
}

static int64_t pattern_of(const AmkPlan *p, uint32_t t) {
  const AmkPlanTask *pt = &p->tasks[t];
  if (pt->op != AMK_OP_GEMV_TILE || !amk_inst_param_has(&pt->params, AMK_PARAM_flags))
    return -1;
  return (int64_t)((uint32_t)pt->params.flags.i >> AMK_PATTERN_SHIFT);
}

static bool has_wait(const uint32_t *counter, const uint32_t *threshold, int n, uint32_t c,
                     uint32_t at_least) {
  for (int i = 0; i < n; i++)
    if (counter[i] == c && threshold[i] >= at_least)
      return true;
  return false;
}

static uint32_t signallers(const AmkPlan *p, uint32_t c) {
  uint32_t n = 0;
  for (uint32_t t = 0; t < p->n_tasks; t++)
    n += p->tasks[t].counter == c;
  return n;
}

/* The properties every tagged consumer has; counts tagged consumers per
 * pattern into by_pattern. */
static void check_consumers(UnitCounts *c, const AmkPlan *p, const AmkTransfers *tr,
                            uint32_t by_pattern[AMK_PATTERN_COUNT]) {
  for (uint32_t t = 0; t < p->n_tasks; t++) {
    const AmkPlanTask *pt = &p->tasks[t];
    const AmkTransferWaits *w = &tr->waits[t];
    if (!tr->tagged_reads[t]) {
      /* Untouched: the plan's waits, none at the signal. */
      bool same = w->n_at_signal == 0 && w->n_blocking == pt->wait_end - pt->wait_begin;
      for (uint32_t i = 0; same && i < w->n_blocking; i++)
        same = w->counter[i] == p->wait_counter[pt->wait_begin + i] &&
               w->threshold[i] == p->wait_threshold[pt->wait_begin + i];
      CHECK(c, same);
      continue;
    }
    int64_t pat = pattern_of(p, t);
    CHECK(c, pat >= 0 && pat < AMK_PATTERN_COUNT);
    if (pat >= 0 && pat < AMK_PATTERN_COUNT)
      by_pattern[pat]++;
    CHECK(c, w->n_at_signal >= 1);
    /* Every old wait is kept, before the task runs or before it signals. */
    for (uint32_t k = pt->wait_begin; k < pt->wait_end; k++) {
      uint32_t oc = p->wait_counter[k], ot = p->wait_threshold[k];
      CHECK(c, has_wait(w->counter, w->threshold, w->n_blocking, oc, ot) ||
                   has_wait(w->signal_counter, w->signal_threshold, w->n_at_signal, oc, ot));
    }
    for (uint32_t s = 0; s < w->n_at_signal; s++) {
      uint32_t sc = w->signal_counter[s];
      /* A whole wait moved: for all the signallers, none kept before. */
      CHECK(c, w->signal_threshold[s] == signallers(p, sc));
      CHECK(c, !has_wait(w->counter, w->threshold, w->n_blocking, sc, 0));
      bool read_one = false;
      for (uint32_t q = 0; q < p->n_tasks; q++) {
        if (p->tasks[q].counter != sc)
          continue;
        /* Its output is shadowed, and the consumer reads it (if at all)
         * through the shadow; the consumer takes the producer's waits. */
        uint32_t out = p->tasks[q].outputs[0];
        for (uint32_t i = 0; i < pt->n_inputs; i++)
          if (pt->inputs[i] == out) {
            CHECK(c, tr->shadowed[out]);
            read_one = true;
          }
        const AmkTransferWaits *pw = &tr->waits[q];
        for (uint32_t i = 0; i < pw->n_blocking; i++)
          CHECK(c, has_wait(w->counter, w->threshold, w->n_blocking, pw->counter[i],
                            pw->threshold[i]));
      }
      CHECK(c, read_one);
    }
  }
}

static void check_off(UnitCounts *c, const AmkPlan *p) {
  AmkTransfers tr;
  amk_cuda_transfers_plan(p, false, &tr);
  uint32_t shadowed = 0, tagged = 0;
  for (uint32_t b = 0; b < p->n_buffers; b++)
    shadowed += tr.shadowed[b];
  for (uint32_t t = 0; t < p->n_tasks; t++)
    tagged += tr.tagged_reads[t];
  CHECK(c, shadowed == 0 && tagged == 0 && tr.n_consumers == 0 && tr.n_hops == 0);
  uint32_t by[AMK_PATTERN_COUNT] = {0};
  check_consumers(c, p, &tr, by);
  amk_cuda_transfers_free(&tr);
}

static void test_tiny(UnitCounts *c, const char *path) {
  AmkModule *m = unit_load_program(path);
  CHECK(c, m != NULL);
  AmkPlan *p = m ? plan_of(m, false) : NULL;
  CHECK(c, p != NULL);
  if (!p) {
    amk_module_free(m);
    return;
  }
  check_off(c, p);
  AmkTransfers tr;
  amk_cuda_transfers_plan(p, true, &tr);
  uint32_t by[AMK_PATTERN_COUNT] = {0};
  check_consumers(c, p, &tr, by);
  /* Every attention tile reads qkv through its shadow, every o_proj tile
   * the partials through theirs; nothing else is tagged here. */
  uint32_t attention = 0, oproj = 0;
  for (uint32_t t = 0; t < p->n_tasks; t++) {
    attention += pattern_of(p, t) == AMK_PATTERN_ATTENTION_ROPE;
    oproj += pattern_of(p, t) == AMK_PATTERN_COMBINE_RESIDUAL;
  }
  CHECK(c, attention > 0 && oproj > 0);
  CHECK(c, by[AMK_PATTERN_ATTENTION_ROPE] == attention && by[AMK_PATTERN_COMBINE_RESIDUAL] == oproj);
  CHECK(c, tr.n_consumers == attention + oproj && tr.n_hops == tr.n_consumers);
  CHECK(c, tr.shadowed[(uint32_t)unit_plan_buffer(p, "L0.qkv")] &&
               tr.shadowed[(uint32_t)unit_plan_buffer(p, "L1.attn.part1")] &&
               !tr.shadowed[(uint32_t)unit_plan_buffer(p, "L0.h_attn")]);
  /* Plan positions are the module's list positions. */
  int32_t h_attn = unit_plan_buffer(p, "L0.h_attn"), qkv = unit_plan_buffer(p, "L0.qkv");
  amk_cuda_transfers_free(&tr);
  amk_plan_free(p);

  /* L0.h_attn (the o_proj tiles' output) moved onto L0.qkv's page, which
   * the attention tiles read: the o_proj tiles would write it before the
   * attention is ordered before them, so their hop is refused (the
   * layer's other hops, and layer 1's, stay). The validator would refuse
   * the page, so the plan is built trusted. */
  int32_t qkv_page = -1;
  for (uint32_t i = 0; m->pages && i < m->pages->n_bindings; i++)
    if (m->pages->bindings[i].buffer == m->buffers[qkv].id)
      qkv_page = m->pages->bindings[i].page;
  CHECK(c, qkv_page >= 0);
  for (uint32_t i = 0; m->pages && i < m->pages->n_bindings; i++)
    if (m->pages->bindings[i].buffer == m->buffers[h_attn].id)
      m->pages->bindings[i].page = qkv_page;
  p = plan_of(m, true);
  CHECK(c, p != NULL);
  if (p) {
    amk_cuda_transfers_plan(p, true, &tr);
    uint32_t by2[AMK_PATTERN_COUNT] = {0};
    check_consumers(c, p, &tr, by2);
    uint32_t l0_oproj = 0, l0_tagged = 0;
    for (uint32_t t = 0; t < p->n_tasks; t++)
      if (pattern_of(p, t) == AMK_PATTERN_COMBINE_RESIDUAL &&
          p->tasks[t].outputs[0] == (uint32_t)h_attn) {
        l0_oproj++;
        l0_tagged += tr.tagged_reads[t];
      }
    CHECK(c, l0_oproj > 0 && l0_tagged == 0);
    CHECK(c, by2[AMK_PATTERN_ATTENTION_ROPE] == attention &&
                 by2[AMK_PATTERN_COMBINE_RESIDUAL] == oproj - l0_oproj);
    amk_cuda_transfers_free(&tr);
    amk_plan_free(p);
  }
  amk_module_free(m);
}

static void test_one_b(UnitCounts *c, const char *path) {
  AmkModule *m = unit_load_program(path);
  AmkPlan *p = m ? plan_of(m, false) : NULL;
  CHECK(c, p != NULL);
  if (p) {
    AmkTransfers tr;
    amk_cuda_transfers_plan(p, true, &tr);
    uint32_t by[AMK_PATTERN_COUNT] = {0};
    check_consumers(c, p, &tr, by);
    /* All three hops of every layer: q/k/v -> attention, attention ->
     * o_proj, o_proj -> mlp; the mlp tiles' atomics into the residual are
     * never a producer. */
    uint32_t want[AMK_PATTERN_COUNT] = {0};
    for (uint32_t t = 0; t < p->n_tasks; t++) {
      int64_t pat = pattern_of(p, t);
      if (pat == AMK_PATTERN_ATTENTION_ROPE || pat == AMK_PATTERN_COMBINE_RESIDUAL ||
          pat == AMK_PATTERN_MLP)
        want[pat]++;
    }
    CHECK(c, want[AMK_PATTERN_MLP] > 0 && by[AMK_PATTERN_MLP] == want[AMK_PATTERN_MLP] &&
                 by[AMK_PATTERN_ATTENTION_ROPE] == want[AMK_PATTERN_ATTENTION_ROPE] &&
                 by[AMK_PATTERN_COMBINE_RESIDUAL] == want[AMK_PATTERN_COMBINE_RESIDUAL]);
    CHECK(c, !tr.shadowed[(uint32_t)unit_plan_buffer(p, "L3.h_mlp")] &&
                 tr.shadowed[(uint32_t)unit_plan_buffer(p, "L3.h_attn")]);
    amk_cuda_transfers_free(&tr);
    amk_plan_free(p);
  }
  amk_module_free(m);
}

/* examples/llama-tiny through import, tile, fuse --fusion=all (split_o
 * too), sm-assign and color: the attention_o tiles are never tagged
 * consumers, and their accumulator (h_attn) is never shadowed. */
static void test_split_o(UnitCounts *c) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  AmkModule *m = amk_module_new();
  AmkPipeline *pl = amk_pipeline_new();
  m->model_dir = amk_arena_strdup(&m->arena, AMK_SOURCE_DIR "/examples/llama-tiny");
  AmkPipelineRunOptions run = {0};
  bool built = amk_pipeline_parse(pl, "import,tile,fuse,sm-assign,color", d) &&
               amk_pipeline_set_option(pl, "fusion", "all", d) &&
               amk_pipeline_run(pl, m, d, &run).status == AMK_PIPELINE_OK;
  AmkPlan *p = built ? plan_of(m, false) : NULL;
  CHECK(c, p != NULL);
  if (p) {
    AmkTransfers tr;
    amk_cuda_transfers_plan(p, true, &tr);
    uint32_t by[AMK_PATTERN_COUNT] = {0};
    check_consumers(c, p, &tr, by);
    uint32_t tiles = 0, tagged = 0;
    for (uint32_t t = 0; t < p->n_tasks; t++)
      if (pattern_of(p, t) == AMK_PATTERN_ATTENTION_O) {
        tiles++;
        tagged += tr.tagged_reads[t];
      }
    CHECK(c, tiles > 0 && tagged == 0 && by[AMK_PATTERN_ATTENTION_O] == 0);
    int32_t h_attn = unit_plan_buffer(p, "L0.h_attn");
    CHECK(c, h_attn >= 0 && p->buffers[h_attn].accumulate && !tr.shadowed[h_attn]);
    amk_cuda_transfers_free(&tr);
    amk_plan_free(p);
  }
  amk_pipeline_free(pl);
  amk_module_free(m);
  amk_diag_free(d);
}

int main(int argc, char **argv) {
  UnitCounts c = {0};
  if (argc != 3) {
    fprintf(stderr, "usage: test_transfers TINY.amkir ONE_B.amkir\n");
    return 2;
  }
  test_tiny(&c, argv[1]);
  test_one_b(&c, argv[2]);
  test_split_o(&c);
  return unit_finish("test_transfers", &c);
}
