/* Tensor-parallel facts of the IR (include/amk/tp.h). */
#include <stdlib.h>
#include <string.h>

#include "amk/tp.h"

int64_t amk_task_tp_group(const AmkTask *t) {
  if (t->op != AMK_OP_ALLREDUCE_SHARD || !amk_task_param(t, AMK_TP_PARAM))
    return 0;
  int64_t n = 0;
  if (!amk_task_param_int(t, AMK_TP_PARAM, &n) || n < 1)
    return -1;
  return n >= 2 ? n : 0;
}

bool amk_module_tp(const AmkModule *m, int64_t *size, int64_t *rank) {
  const AmkValue *s = amk_object_get(&m->meta, "tp_size");
  const AmkValue *r = amk_object_get(&m->meta, "tp_rank");
  if (!s && !r)
    return false;
  int64_t sv = 0, rv = 0;
  if (!s || !r || !amk_value_as_int(s, &sv) || !amk_value_as_int(r, &rv) || sv < 1 ||
      sv > AMK_TP_MAX_RANKS || rv < 0 || rv >= sv) {
    *size = -1;
    return false;
  }
  *size = sv;
  *rank = rv;
  return true;
}

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

/* The collectives in the order the waits force: sorted by how many
 * collectives each reaches (in a chain all distinct), then each checked to
 * reach the next. */
bool amk_tp_collective_order(const AmkModule *m, uint32_t **tasks, uint32_t *count,
                             uint32_t unordered[2]) {
  uint32_t n = m->n_tasks, k = 0;
  uint32_t *seq = amk_xmalloc((n + 1) * sizeof *seq);
  for (uint32_t t = 0; t < n; t++)
    if (amk_task_tp_group(&m->tasks[t]) != 0)
      seq[k++] = t;
  *tasks = seq;
  *count = k;
  if (k < 2)
    return true;
  Successors s;
  successors_build(m, &s);
  uint8_t *seen = amk_xmalloc(n + 1);
  uint32_t *stack = amk_xmalloc((s.off[n] + n + 1) * sizeof *stack);
  uint32_t *after = amk_xcalloc(k, sizeof *after);
  for (uint32_t i = 0; i < k; i++) {
    reach(&s, n, seq[i], seen, stack);
    for (uint32_t j = 0; j < k; j++)
      after[i] += seen[seq[j]];
  }
  /* Most followers first (insertion sort: few). */
  for (uint32_t i = 1; i < k; i++)
    for (uint32_t j = i; j > 0 && after[j] > after[j - 1]; j--) {
      uint32_t a = after[j], t = seq[j];
      after[j] = after[j - 1];
      seq[j] = seq[j - 1];
      after[j - 1] = a;
      seq[j - 1] = t;
    }
  bool ok = true;
  for (uint32_t i = 0; i + 1 < k && ok; i++) {
    reach(&s, n, seq[i], seen, stack);
    if (!seen[seq[i + 1]]) {
      unordered[0] = seq[i];
      unordered[1] = seq[i + 1];
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

/* Reads "B:E" at *p (decimal, B < E), leaving *p after it. */
static bool parse_range(const char **p, int64_t *begin, int64_t *end) {
  int64_t v[2] = {0, 0};
  for (int i = 0; i < 2; i++) {
    if (**p < '0' || **p > '9')
      return false;
    while (**p >= '0' && **p <= '9') {
      if (v[i] > (INT64_MAX - 9) / 10)
        return false;
      v[i] = v[i] * 10 + (*(*p)++ - '0');
    }
    if (i == 0 && *(*p)++ != ':')
      return false;
  }
  if (v[0] >= v[1])
    return false;
  *begin = v[0];
  *end = v[1];
  return true;
}

bool amk_source_part_parse(const char *text, size_t len, AmkSourcePart *out) {
  out->row_begin = out->row_end = out->col_begin = out->col_end = -1;
  /* A transpose applies to the whole (sliced) part, so it can only come
   * last; the rest parses as an untransposed part. */
  const char *caret = memchr(text, '^', len);
  out->transpose = caret != NULL;
  if (caret) {
    if ((size_t)(caret - text) + 2 != len || caret[1] != 'T')
      return false;
    len -= 2;
  }
  const char *open = memchr(text, '[', len);
  size_t key_len = open ? (size_t)(open - text) : len;
  if (key_len == 0 || key_len >= sizeof out->key)
    return false;
  memcpy(out->key, text, key_len);
  out->key[key_len] = '\0';
  if (!open)
    return !memchr(text, ']', len);
  const char *p = open + 1, *stop = text + len;
  if (stop[-1] != ']' || memchr(p, '[', (size_t)(stop - p)))
    return false;
  if (*p == ':') {
    /* [:, C:D] */
    if (p[1] != ',' || p[2] != ' ')
      return false;
    p += 3;
    if (!parse_range(&p, &out->col_begin, &out->col_end))
      return false;
  } else {
    if (!parse_range(&p, &out->row_begin, &out->row_end))
      return false;
    if (*p == ',') {
      if (p[1] != ' ')
        return false;
      p += 2;
      if (!parse_range(&p, &out->col_begin, &out->col_end))
        return false;
    }
  }
  return p == stop - 1;
}
