/* The cross-rank protocol of a tensor-parallel group (amk_validate_tp,
 * docs/Validator.md): what no single rank's program can show. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "amk/tp.h"
#include "amk/validate.h"

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

/* One rank's collectives in the order its waits force on them. */
typedef struct {
  uint32_t *tasks; /* list positions, in order */
  uint32_t n;
} Sequence;

/* The rank's collectives ordered by its waits; false after reporting two
 * that nothing orders (the ranks could then reach them in different
 * orders) or an output another task also writes. */
static bool rank_sequence(const AmkModule *m, uint32_t rank, Sequence *seq, AmkDiagEngine *diag) {
  uint32_t n = m->n_tasks, unordered[2] = {0, 0};
  bool ordered = amk_tp_collective_order(m, &seq->tasks, &seq->n, unordered);
  bool ok = true;
  /* Its output is written by it alone. */
  for (uint32_t i = 0; i < seq->n && ok; i++) {
    const AmkTask *c = &m->tasks[seq->tasks[i]];
    for (uint32_t t = 0; t < n && ok; t++)
      for (uint32_t o = 0; o < m->tasks[t].n_outputs && t != seq->tasks[i]; o++)
        if (c->n_outputs && m->tasks[t].outputs[o] == c->outputs[0]) {
          amk_error(diag, no_loc(), "rank %u: task %" PRId32 " ('%s') writes the output "
                    "of all-reduce '%s'; a collective's output is written by it alone",
                    rank, m->tasks[t].id, m->tasks[t].label, c->label);
          ok = false;
          break;
        }
  }
  if (ok && !ordered) {
    const AmkTask *a = &m->tasks[unordered[0]], *b = &m->tasks[unordered[1]];
    amk_error(diag, no_loc(), "rank %u: all-reduces '%s' (task %" PRId32 ") and '%s' (task %"
              PRId32 ") are not ordered by waits: ranks could reach them in different orders "
              "and deadlock", rank, a->label, a->id, b->label, b->id);
    ok = false;
  }
  return ok;
}

static const AmkBuffer *buffer_at(const AmkModule *m, int32_t id) {
  return amk_module_buffer(m, id);
}

typedef struct {
  int64_t lo, hi;
  uint32_t rank;
} Part;

static int compare_parts(const void *pa, const void *pb) {
  const Part *a = pa, *b = pb;
  return a->lo < b->lo ? -1 : a->lo > b->lo;
}

bool amk_validate_tp(const AmkModule *const *ranks, uint32_t n, AmkDiagEngine *diag) {
  if (n == 0 || n > AMK_TP_MAX_RANKS) {
    amk_error(diag, no_loc(), "a tensor-parallel group has 1 to %d ranks, not %u",
              AMK_TP_MAX_RANKS, n);
    return false;
  }
  for (uint32_t r = 0; r < n; r++) {
    int64_t size = 0, rank = 0;
    if (!amk_module_tp(ranks[r], &size, &rank) || size != n || rank != r) {
      amk_error(diag, no_loc(), "program %u (%s) is not rank %u of %u: its meta %s", r,
                ranks[r]->source_name ? ranks[r]->source_name : "?", r, n,
                size > 0 ? "names another rank or group size (tp_size, tp_rank)"
                         : "has no valid tp_size and tp_rank");
      return false;
    }
  }
  Sequence *seq = amk_xcalloc(n, sizeof *seq);
  bool ok = true;
  for (uint32_t r = 0; r < n; r++)
    ok = rank_sequence(ranks[r], r, &seq[r], diag) && ok;
  for (uint32_t r = 1; ok && r < n; r++)
    if (seq[r].n != seq[0].n) {
      amk_error(diag, no_loc(), "rank %u has %u cross-rank all-reduces, rank 0 has %u: every "
                "rank must reach the same collectives", r, seq[r].n, seq[0].n);
      ok = false;
    }
  Part *parts = amk_xcalloc(n, sizeof *parts);
  for (uint32_t k = 0; ok && k < seq[0].n; k++) {
    const AmkTask *first = &ranks[0]->tasks[seq[0].tasks[k]];
    const AmkBuffer *out0 = buffer_at(ranks[0], first->outputs[0]);
    int64_t numel0 = -1;
    if (!out0 || !amk_buffer_numel(out0, &numel0))
      numel0 = -1;
    bool gather = false;
    for (uint32_t r = 0; ok && r < n; r++) {
      const AmkTask *t = &ranks[r]->tasks[seq[r].tasks[k]];
      const AmkBuffer *out = buffer_at(ranks[r], t->outputs[0]);
      const AmkBuffer *in = t->n_inputs ? buffer_at(ranks[r], t->inputs[0]) : NULL;
      int64_t numel = -1, in_numel = -1, n_off = 0;
      bool has_off = amk_task_param_int(t, "n_off", &n_off);
      if (!out || !in || !amk_buffer_numel(out, &numel) || !amk_buffer_numel(in, &in_numel) ||
          numel != numel0 || out->dtype != out0->dtype || out->rank != out0->rank ||
          amk_task_tp_group(t) != (int64_t)n) {
        amk_error(diag, no_loc(), "rank %u: all-reduce #%u '%s' does not match rank 0's '%s' "
                  "(output elements, dtype or rank, or group=%u)", r, k, t->label,
                  first->label, n);
        ok = false;
        break;
      }
      if (r == 0)
        gather = has_off;
      else if (has_off != gather) {
        amk_error(diag, no_loc(), "rank %u: all-reduce #%u '%s' is %s, rank 0's '%s' is not", r, k,
                  t->label, has_off ? "a gather (n_off)" : "a plain all-reduce", first->label);
        ok = false;
        break;
      }
      if (!gather && in_numel != numel) {
        amk_error(diag, no_loc(), "rank %u: all-reduce #%u '%s' reads %" PRId64 " elements into "
                  "%" PRId64, r, k, t->label, in_numel, numel);
        ok = false;
      }
      parts[r] = (Part){n_off, n_off + in_numel, r};
    }
    if (ok && gather) {
      /* Disjoint parts that cover the output: the sum is an exact gather. */
      qsort(parts, n, sizeof *parts, compare_parts);
      int64_t at = 0;
      for (uint32_t i = 0; ok && i <= n; i++) {
        int64_t lo = i < n ? parts[i].lo : numel0;
        if (lo != at) {
          amk_error(diag, no_loc(), "all-reduce #%u '%s': the ranks' parts %s at element %"
                    PRId64 " of %" PRId64 " (a gather's parts must be disjoint and cover its "
                    "output)", k, first->label, lo < at ? "overlap" : "leave a gap", at, numel0);
          ok = false;
        }
        if (i < n)
          at = parts[i].hi;
      }
    }
  }
  free(parts);
  for (uint32_t r = 0; r < n; r++)
    free(seq[r].tasks);
  free(seq);
  return ok;
}
