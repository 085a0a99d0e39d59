/* color: bind activation buffers to physical scratch pages.
 *
 * Policies (config.page_allocation, or --page-allocation=):
 *   none         no page table: every activation keeps its own memory;
 *   linear       one page per activation buffer;
 *   graph_color  buffers share a page when their uses are ordered by
 *                happens-before: every use of the earlier buffer is a strict
 *                ancestor (through counter edges) of every writer of the later
 *                one. This is the validator's page-aliasing rule, not list
 *                order, so a shared page can never be clobbered while read.
 *
 * graph_color also places a small buffer in shared memory (SMEM) when every
 * task that touches it runs on one SM (after sm-assign), within that SM's
 * shared-memory budget; on-chip buffers must never cross SMs.
 *
 * Pages are filled greedily in topological order of each buffer's first
 * writer. A page's occupants form a chain (each ordered before the next),
 * and happens-before is transitive, so a new buffer only needs to be ordered
 * after a page's last occupant.
 *
 * Exception: an accumulator (a buffer an accumulating tile writes: mlp,
 * attention_o, docs/Fusion.md) gets a page of its own under every policy that makes pages, whatever the
 * ordering says, and never moves on-chip: the engine zeroes it before each
 * step and the tiles add to it, which would clobber any other occupant (or
 * start the sum from its bytes). The validator rejects a shared one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/compare.h"
#include "amk/pass.h"
#include "amk/tables.h"
#include "validate_graph.h"

typedef struct {
  uint32_t buffer;      /* index into m->buffers */
  uint32_t *uses;       /* tasks reading or writing it */
  uint32_t n_uses;
  uint32_t *writers;    /* tasks writing it */
  uint32_t n_writers;
  uint32_t min_use_pos; /* topological position of its earliest use */
  uint32_t first_write_pos;
  int64_t nbytes;
  int32_t sm;           /* the one SM all its users run on, or -1 */
  bool accumulator;     /* an accumulating tile adds to it: a page of its own */
} Candidate;

typedef struct {
  AmkMemSpace space;
  int32_t sm; /* SMEM pages belong to one SM; -1 otherwise */
  int64_t nbytes;
  uint32_t last;  /* candidate index of the last occupant */
  int64_t live_start, live_end;
  bool exclusive; /* an accumulator's: nothing else joins it */
} PageBuild;

static int compare_candidates(const void *a, const void *b) {
  const Candidate *x = a, *y = b;
  return amk_compare_i64_then(x->first_write_pos, y->first_write_pos, x->buffer, y->buffer);
}

/* Every use of `a` happens before every writer of `b`. */
static bool ordered_before(AmkTaskGraph *g, const Candidate *a, const Candidate *b) {
  for (uint32_t w = 0; w < b->n_writers; w++) {
    uint32_t writer = b->writers[w];
    if (g->topo_pos[writer] <= a->min_use_pos)
      return false;
    amk_graph_mark_ancestors(g, writer, a->min_use_pos);
    for (uint32_t u = 0; u < a->n_uses; u++)
      if (!amk_graph_is_marked(g, a->uses[u]))
        return false;
  }
  return true;
}

/* Whether `t` is an accumulating tile (mlp, attention_o), which adds into
 * its output (an accumulator). */
static bool is_accumulating_tile(const AmkTask *t) {
  int64_t flags;
  return t->op == AMK_OP_GEMV_TILE && amk_task_param_int(t, "flags", &flags) && flags >= 0 &&
         amk_gemv_pattern_accumulates(flags >> AMK_PATTERN_SHIFT);
}

/* One buffer reference of a task. */
typedef struct {
  uint32_t task, buffer; /* positions */
  bool is_output;
} BufferRef;

/* Every reference of a known buffer, task by task, inputs before outputs.
 * malloc'd; the count in *count. */
static BufferRef *buffer_refs(const AmkModule *m, const AmkIdIndex *buffers_by_id,
                              uint32_t *count) {
  size_t cap = 1;
  for (uint32_t t = 0; t < m->n_tasks; t++)
    cap += (size_t)m->tasks[t].n_inputs + m->tasks[t].n_outputs;
  BufferRef *refs = amk_xmalloc(cap * sizeof *refs);
  uint32_t n = 0;
  for (uint32_t t = 0; t < m->n_tasks; t++) {
    const AmkTask *task = &m->tasks[t];
    for (uint32_t i = 0; i < task->n_inputs + task->n_outputs; i++) {
      bool is_output = i >= task->n_inputs;
      int32_t id = is_output ? task->outputs[i - task->n_inputs] : task->inputs[i];
      uint32_t b = amk_id_index_get(buffers_by_id, id);
      if (b != AMK_NO_INDEX)
        refs[n++] = (BufferRef){t, b, is_output};
    }
  }
  *count = n;
  return refs;
}

/* Collects the paged buffers (activations that some task writes) with their
 * users. Returns the count; *out is malloc'd, each entry's arrays too. */
static uint32_t collect_candidates(const AmkModule *m, const AmkTaskGraph *g,
                                   const AmkIdIndex *buffers_by_id, Candidate **out) {
  uint32_t nb = m->n_buffers, n_refs;
  BufferRef *refs = buffer_refs(m, buffers_by_id, &n_refs);
  uint32_t *n_uses = amk_xcalloc(nb ? nb : 1, sizeof *n_uses);
  uint32_t *n_writes = amk_xcalloc(nb ? nb : 1, sizeof *n_writes);
  for (uint32_t r = 0; r < n_refs; r++) {
    n_uses[refs[r].buffer]++;
    n_writes[refs[r].buffer] += refs[r].is_output;
  }
  Candidate *c = amk_xcalloc(nb ? nb : 1, sizeof *c);
  uint32_t *index_of = amk_xmalloc((nb ? nb : 1) * sizeof *index_of);
  uint32_t n = 0;
  for (uint32_t b = 0; b < nb; b++) {
    index_of[b] = AMK_NO_INDEX;
    int64_t nbytes;
    if (m->buffers[b].kind != AMK_KIND_ACTIVATION || n_writes[b] == 0 ||
        !amk_buffer_nbytes(&m->buffers[b], &nbytes))
      continue;
    index_of[b] = n;
    c[n] = (Candidate){.buffer = b, .nbytes = nbytes, .sm = -2,
                       .min_use_pos = UINT32_MAX, .first_write_pos = UINT32_MAX};
    c[n].uses = amk_xmalloc(n_uses[b] * sizeof *c[n].uses);
    c[n].writers = amk_xmalloc(n_writes[b] * sizeof *c[n].writers);
    n++;
  }
  for (uint32_t r = 0; r < n_refs; r++) {
    uint32_t t = refs[r].task, b = refs[r].buffer;
    bool is_output = refs[r].is_output;
    if (index_of[b] == AMK_NO_INDEX)
      continue;
    Candidate *cand = &c[index_of[b]];
    /* A task that both reads and writes a buffer is one use. */
    if (cand->n_uses == 0 || cand->uses[cand->n_uses - 1] != t)
      cand->uses[cand->n_uses++] = t;
    if (is_output && (cand->n_writers == 0 || cand->writers[cand->n_writers - 1] != t))
      cand->writers[cand->n_writers++] = t;
    if (is_output && is_accumulating_tile(&m->tasks[t]))
      cand->accumulator = true;
    uint32_t pos = g->topo_pos[t];
    if (pos < cand->min_use_pos)
      cand->min_use_pos = pos;
    if (is_output && pos < cand->first_write_pos)
      cand->first_write_pos = pos;
    const AmkTask *task = &m->tasks[t];
    int32_t sm = task->has_sm ? task->sm : -1;
    cand->sm = cand->sm == -2 ? sm : (cand->sm == sm ? sm : -1);
  }
  free(refs);
  free(index_of);
  free(n_uses);
  free(n_writes);
  *out = c;
  return n;
}

static void free_candidates(Candidate *c, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    free(c[i].uses);
    free(c[i].writers);
  }
  free(c);
}

bool amk_pass_color(AmkModule *m, AmkPassContext *ctx) {
  AmkPagePolicy policy = m->config ? m->config->page_allocation : AMK_PAGES_GRAPH_COLOR;
  /* The words of --page-allocation in AMK_PASS_OPTIONS, in order. */
  static const AmkPagePolicy policy_by_word[] = {AMK_PAGES_LINEAR, AMK_PAGES_GRAPH_COLOR,
                                                 AMK_PAGES_NONE};
  size_t word;
  if (amk_pass_option_enum(ctx, "page-allocation", &word))
    policy = policy_by_word[word];
  AmkTaskGraph g;
  if (!amk_graph_build_acyclic(&g, m, ctx->diag, "color",
                               "no page can be proven free"))
    return false;
  AmkIdIndex buffers_by_id;
  amk_id_index_build(&buffers_by_id, m->buffers, sizeof *m->buffers, m->n_buffers);
  Candidate *cand;
  uint32_t n = collect_candidates(m, &g, &buffers_by_id, &cand);
  /* graph_color fills pages in execution order; linear numbers them in
   * buffer order. */
  if (policy == AMK_PAGES_GRAPH_COLOR)
    qsort(cand, n, sizeof *cand, compare_candidates);

  int64_t scratch_before = 0;
  for (uint32_t i = 0; i < n; i++)
    scratch_before += cand[i].nbytes;

  /* Each candidate's page, built in order. */
  PageBuild *pages = amk_xmalloc((n ? n : 1) * sizeof *pages);
  uint32_t *page_of = amk_xmalloc((n ? n : 1) * sizeof *page_of);
  uint32_t n_pages = 0, n_smem = 0;
  bool any_sm = false;
  for (uint32_t t = 0; t < m->n_tasks; t++)
    any_sm |= m->tasks[t].has_sm;
  int64_t smem_budget = 0;
  if (m->target)
    smem_budget = m->config && m->config->smem_bytes_per_block > 0
                      ? m->config->smem_bytes_per_block
                      : m->target->smem_bytes_per_block_optin;
  int64_t *smem_used = NULL;
  int64_t num_sms = m->target ? m->target->num_sms : 0;
  if (policy == AMK_PAGES_GRAPH_COLOR && any_sm && num_sms > 0 && num_sms <= 100000)
    smem_used = amk_xcalloc((size_t)num_sms, sizeof *smem_used);

  for (uint32_t i = 0; i < n && policy != AMK_PAGES_NONE; i++) {
    Candidate *c = &cand[i];
    AmkBuffer *buf = &m->buffers[c->buffer];
    AmkMemSpace space = AMK_SPACE_GLOBAL_SCRATCH;
    int32_t sm = -1;
    if (amk_space_is_on_chip(buf->space)) {
      space = buf->space; /* placed on-chip by the lowering: keep it */
      sm = c->sm >= 0 ? c->sm : -1;
    } else if (smem_used && c->sm >= 0 && c->sm < num_sms && !c->accumulator) {
      space = AMK_SPACE_SMEM;
      sm = c->sm;
    }
    uint32_t chosen = UINT32_MAX;
    if (policy == AMK_PAGES_GRAPH_COLOR && !c->accumulator) {
      for (uint32_t p = 0; p < n_pages && chosen == UINT32_MAX; p++) {
        if (pages[p].space != space || pages[p].sm != sm || pages[p].exclusive)
          continue;
        int64_t grow = c->nbytes > pages[p].nbytes ? c->nbytes - pages[p].nbytes : 0;
        if (space == AMK_SPACE_SMEM && smem_used[sm] + grow > smem_budget)
          continue;
        if (ordered_before(&g, &cand[pages[p].last], c))
          chosen = p;
      }
    }
    if (chosen == UINT32_MAX && space == AMK_SPACE_SMEM && smem_used &&
        smem_used[sm] + c->nbytes > smem_budget) {
      space = AMK_SPACE_GLOBAL_SCRATCH; /* no room on-chip: a global page */
      sm = -1;
      for (uint32_t p = 0; p < n_pages && chosen == UINT32_MAX; p++)
        if (pages[p].space == space && !pages[p].exclusive &&
            ordered_before(&g, &cand[pages[p].last], c))
          chosen = p;
    }
    if (chosen == UINT32_MAX) {
      chosen = n_pages++;
      pages[chosen] = (PageBuild){space, sm, 0, i, INT64_MAX, -1, c->accumulator};
    }
    PageBuild *page = &pages[chosen];
    if (space == AMK_SPACE_SMEM && c->nbytes > page->nbytes)
      smem_used[sm] += c->nbytes - page->nbytes;
    if (c->nbytes > page->nbytes)
      page->nbytes = c->nbytes;
    page->last = i;
    for (uint32_t u = 0; u < c->n_uses; u++) {
      int64_t pos = c->uses[u]; /* list position */
      if (pos < page->live_start)
        page->live_start = pos;
      if (pos > page->live_end)
        page->live_end = pos;
    }
    page_of[i] = chosen;
    if (space == AMK_SPACE_SMEM && buf->space != AMK_SPACE_SMEM) {
      buf->space = AMK_SPACE_SMEM;
      n_smem++;
    }
  }

  int64_t scratch_after = 0;
  if (policy == AMK_PAGES_NONE) {
    m->pages = NULL;
  } else {
    AmkPageAllocation *alloc = amk_arena_alloc(&m->arena, sizeof *alloc);
    alloc->n_pages = n_pages;
    alloc->pages = amk_arena_alloc(&m->arena, (n_pages ? n_pages : 1) * sizeof *alloc->pages);
    for (uint32_t p = 0; p < n_pages; p++) {
      alloc->pages[p] = (AmkPage){(int32_t)p, pages[p].space, pages[p].nbytes,
                                  pages[p].live_start, pages[p].live_end};
      scratch_after += pages[p].nbytes;
    }
    /* Bindings in buffer-list order, as a reader expects to find them. */
    alloc->n_bindings = n;
    alloc->bindings = amk_arena_alloc(&m->arena, (n ? n : 1) * sizeof *alloc->bindings);
    uint32_t *page_of_buffer = amk_xmalloc((m->n_buffers ? m->n_buffers : 1) * sizeof(uint32_t));
    memset(page_of_buffer, 0xff, (m->n_buffers ? m->n_buffers : 1) * sizeof(uint32_t));
    for (uint32_t i = 0; i < n; i++)
      page_of_buffer[cand[i].buffer] = page_of[i];
    uint32_t k = 0;
    for (uint32_t b = 0; b < m->n_buffers; b++)
      if (page_of_buffer[b] != UINT32_MAX)
        alloc->bindings[k++] = (AmkPageBinding){m->buffers[b].id, (int32_t)page_of_buffer[b]};
    free(page_of_buffer);
    m->pages = alloc;
  }
  if (m->config)
    m->config->page_allocation = policy;

  if (ctx->stats) {
    amk_stat_str(ctx->stats, "color", "policy", amk_page_policy_name(policy));
    amk_stat_int(ctx->stats, "color", "paged activation buffers", n);
    amk_stat_int(ctx->stats, "color", "pages", n_pages);
    amk_stat_int(ctx->stats, "color", "buffers placed in SMEM", n_smem);
    amk_stat_int(ctx->stats, "color", "scratch bytes before (one page each)", scratch_before);
    amk_stat_int(ctx->stats, "color", "scratch bytes after", scratch_after);
  }
  free(smem_used);
  free(pages);
  free(page_of);
  free_candidates(cand, n);
  amk_id_index_free(&buffers_by_id);
  amk_graph_free(&g);
  return true;
}
