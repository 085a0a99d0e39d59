/* Choosing the next token from logits: greedy, or sampled with temperature,
 * top-k and top-p (nucleus) from a seeded generator, as llama.cpp and
 * transformers' generate() do. Deterministic for a given seed. */
#ifndef AMK_SAMPLING_H
#define AMK_SAMPLING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  double temperature; /* <= 0: greedy (argmax, lowest index on ties) */
  int64_t top_k;      /* <= 0: no limit */
  double top_p;       /* >= 1: no limit */
  uint64_t seed;
} AmkSamplingParams;

typedef struct {
  float logit;
  int32_t index;
} AmkCandidate;

typedef struct {
  AmkSamplingParams params;
  uint64_t state; /* splitmix64 */
  /* Scratch for sorting candidates, grown as needed. */
  size_t capacity;
  AmkCandidate *order;
  double *probs;
} AmkSampler;

void amk_sampler_init(AmkSampler *s, const AmkSamplingParams *p);
void amk_sampler_free(AmkSampler *s);

/* argmax with the lowest index winning ties; -1 for n == 0. NaN never wins. */
int32_t amk_argmax(const float *logits, size_t n);

/* The next token for these logits (n = vocabulary size). */
int32_t amk_sample(AmkSampler *s, const float *logits, size_t n);

/* splitmix64: advances *state and returns the next 64 random bits (the
 * sampler's generator, also used for seeded random weights). */
uint64_t amk_splitmix64(uint64_t *state);

/* A uniform double in [0, 1) from the sampler's generator. */
double amk_sampler_uniform(AmkSampler *s);

#endif
