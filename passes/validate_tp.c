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

/* Tasks each task's finish makes ready for sure: B follows A when B waits
 * on A's counter for as many signals as that counter has signallers (a
 * lower threshold may be met by the others). CSR over list positions. */
typedef struct {
  uint32_t *off, *next;
} Successors;

static void successors_build(const AmkModule *m, Successors *s) {
  uint32_t n = m->n_tasks, nc = 0;
  for (uint32_t t = 0; t < n; t++)
    if (m->tasks[t].out_counter >= 0 && (uint32_t)m->tasks[t].out_counter + 1 > nc)
      nc = (uint32_t)m->tasks[t].out_counter + 1;
  for (uint32_t t = 0; t < n; t++)
    for (uint32_t w = 0; w < m->tasks[t].n_waits; w++)
      if (m->tasks[t].waits[w].counter >= 0 && (uint32_t)m->tasks[t].waits[w].counter + 1 > nc)
        nc = (uint32_t)m->tasks[t].waits[w].counter + 1;
  uint32_t *signals = amk_xcalloc(nc + 1, sizeof *signals);
  for (uint32_t t = 0; t < n; t++)
    if (m->tasks[t].out_counter >= 0)
      signals[m->tasks[t].out_counter]++;
  /* Signallers of each counter, CSR. */
  uint32_t *soff = amk_xcalloc(nc + 2, sizeof *soff), *slist = amk_xmalloc((n + 1) * sizeof *slist);
  for (uint32_t c = 0; c < nc; c++)
    soff[c + 1] = soff[c] + signals[c];
  uint32_t *fill = amk_xcalloc(nc + 1, sizeof *fill);
  for (uint32_t t = 0; t < n; t++)
    if (m->tasks[t].out_counter >= 0) {
      uint32_t c = (uint32_t)m->tasks[t].out_counter;
      slist[soff[c] + fill[c]++] = t;
    }
  /* Edges signaller -> waiter, counted then placed. */
  s->off = amk_xcalloc(n + 1, sizeof *s->off);
  for (int pass = 0; pass < 2; pass++) {
    uint32_t *at = pass ? amk_xcalloc(n + 1, sizeof *at) : NULL;
    for (uint32_t t = 0; t < n; t++)
      for (uint32_t w = 0; w < m->tasks[t].n_waits; w++) {
        int64_t thr = 0;
        int32_t c = m->tasks[t].waits[w].counter;
        if (c < 0 || !amk_value_as_int(&m->tasks[t].waits[w].threshold, &thr) ||
            thr < (int64_t)signals[c])
          continue;
        for (uint32_t k = soff[c]; k < soff[c + 1]; k++) {
          uint32_t a = slist[k];
          if (pass == 0)
            s->off[a + 1]++;
          else
            s->next[s->off[a] + at[a]++] = t;
        }
      }
    if (pass == 0) {
      for (uint32_t t = 0; t < n; t++)
        s->off[t + 1] += s->off[t];
      s->next = amk_xmalloc((s->off[n] + 1) * sizeof *s->next);
    }
    free(at);
  }
  free(fill);
  free(slist);
  free(soff);
  free(signals);
}

/* Marks in `seen` every task reachable from `from` (itself excluded). */
static void reach(const Successors *s, uint32_t n, uint32_t from, uint8_t *seen, uint32_t *stack) {
  memset(seen, 0, n);
  uint32_t top = 0;
  stack[top++] = from;
  while (top) {
    uint32_t t = stack[--top];
    for (uint32_t k = s->off[t]; k < s->off[t + 1]; k++)
      if (!seen[s->next[k]]) {
        seen[s->next[k]] = 1;
        stack[top++] = s->next[k];
      }
  }
}

/* The rank's collectives ordered by its waits; false after reporting two
 * that nothing orders (the ranks could then reach them in different
 * orders) or an output another task also writes. */
static bool rank_sequence(const AmkModule *m, uint32_t rank, Sequence *seq, AmkDiagEngine *diag) {
  uint32_t n = m->n_tasks;
  seq->tasks = amk_xmalloc((n + 1) * sizeof *seq->tasks);
  seq->n = 0;
  for (uint32_t t = 0; t < n; t++)
    if (amk_task_tp_group(&m->tasks[t]) != 0)
      seq->tasks[seq->n++] = t;
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
  if (!ok || seq->n < 2)
    return ok;
  Successors s;
  successors_build(m, &s);
  uint8_t *seen = amk_xmalloc(n + 1);
  uint32_t *stack = amk_xmalloc((s.off[n] + n + 1) * sizeof *stack);
  /* How many collectives follow each: in a chain, all distinct. */
  uint32_t *after = amk_xcalloc(seq->n, sizeof *after);
  for (uint32_t i = 0; i < seq->n; i++) {
    reach(&s, n, seq->tasks[i], seen, stack);
    for (uint32_t j = 0; j < seq->n; j++)
      after[i] += seen[seq->tasks[j]];
  }
  /* Sort by collectives following, most first (insertion sort: few). */
  for (uint32_t i = 1; i < seq->n; i++)
    for (uint32_t j = i; j > 0 && after[j] > after[j - 1]; j--) {
      uint32_t a = after[j], t = seq->tasks[j];
      after[j] = after[j - 1];
      seq->tasks[j] = seq->tasks[j - 1];
      after[j - 1] = a;
      seq->tasks[j - 1] = t;
    }
  for (uint32_t i = 0; i + 1 < seq->n && ok; i++) {
    reach(&s, n, seq->tasks[i], seen, stack);
    if (!seen[seq->tasks[i + 1]]) {
      const AmkTask *a = &m->tasks[seq->tasks[i]], *b = &m->tasks[seq->tasks[i + 1]];
      amk_error(diag, no_loc(), "rank %u: all-reduces '%s' (task %" PRId32 ") and '%s' (task %"
                PRId32 ") are not ordered by waits: ranks could reach them in different orders "
                "and deadlock", rank, a->label, a->id, b->label, b->id);
      ok = false;
    }
  }
  free(after);
  free(stack);
  free(seen);
  free(s.off);
  free(s.next);
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
