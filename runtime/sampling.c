/* Token selection: greedy and seeded temperature / top-k / top-p sampling. */
#include <math.h>
#include <stdlib.h>

#include "amk/diag.h"
#include "amk/sampling.h"

void amk_sampler_init(AmkSampler *s, const AmkSamplingParams *p) {
  s->params = *p;
  s->state = p->seed;
  s->capacity = 0;
  s->order = NULL;
  s->probs = NULL;
}

void amk_sampler_free(AmkSampler *s) {
  free(s->order);
  free(s->probs);
  s->order = NULL;
  s->probs = NULL;
  s->capacity = 0;
}

int32_t amk_argmax(const float *logits, size_t n) {
  int32_t best = -1;
  for (size_t i = 0; i < n; i++) {
    if (isnan(logits[i]))
      continue;
    if (best < 0 || logits[i] > logits[best])
      best = (int32_t)i;
  }
  return best < 0 && n > 0 ? 0 : best;
}

/* splitmix64: small, fast, and well distributed for a sampler. */
uint64_t amk_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double amk_sampler_uniform(AmkSampler *s) {
  return (double)(amk_splitmix64(&s->state) >> 11) * (1.0 / 9007199254740992.0);
}

/* Sorting candidates by decreasing logit, lower index first on ties, so the
 * cut-offs are deterministic. */
static int compare_candidates(const void *a, const void *b) {
  const AmkCandidate *x = a, *y = b;
  if (x->logit != y->logit)
    return x->logit > y->logit ? -1 : 1;
  return (x->index > y->index) - (x->index < y->index);
}

int32_t amk_sample(AmkSampler *s, const float *logits, size_t n) {
  const AmkSamplingParams *p = &s->params;
  if (n == 0)
    return -1;
  if (p->temperature <= 0 || p->top_k == 1)
    return amk_argmax(logits, n);
  if (s->capacity < n) {
    s->order = amk_xrealloc(s->order, n * sizeof *s->order);
    s->probs = amk_xrealloc(s->probs, n * sizeof *s->probs);
    s->capacity = n;
  }
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (!isnan(logits[i]))
      s->order[m++] = (AmkCandidate){logits[i], (int32_t)i};
  if (m == 0)
    return 0;
  qsort(s->order, m, sizeof *s->order, compare_candidates);
  if (p->top_k > 0 && (size_t)p->top_k < m)
    m = (size_t)p->top_k;
  /* Softmax of logit / temperature over the candidates, in double. */
  double top = (double)s->order[0].logit / p->temperature, total = 0;
  for (size_t i = 0; i < m; i++) {
    s->probs[i] = exp((double)s->order[i].logit / p->temperature - top);
    total += s->probs[i];
  }
  /* Nucleus: the smallest prefix whose probability reaches top_p. */
  if (p->top_p > 0 && p->top_p < 1) {
    double kept = 0;
    size_t keep = 0;
    while (keep < m) {
      kept += s->probs[keep] / total;
      keep++;
      if (kept >= p->top_p)
        break;
    }
    m = keep;
    total = 0;
    for (size_t i = 0; i < m; i++)
      total += s->probs[i];
  }
  double r = amk_sampler_uniform(s) * total;
  for (size_t i = 0; i < m; i++) {
    r -= s->probs[i];
    if (r < 0)
      return s->order[i].index;
  }
  return s->order[m - 1].index;
}
