/* Token selection: greedy ties, top-k = 1, determinism per seed, and the
 * frequencies of sampled tokens against their softmax probabilities. */
#include <math.h>

#include "amk/sampling.h"
#include "unit.h"

int main(void) {
  UnitCounts c = {0};
  const float ties[] = {1.0f, 3.0f, -2.0f, 3.0f};
  CHECK(&c, amk_argmax(ties, 4) == 1); /* the lowest index wins a tie */
  const float with_nan[] = {NAN, -1.0f, -0.5f};
  CHECK(&c, amk_argmax(with_nan, 3) == 2);
  CHECK(&c, amk_argmax(ties, 0) == -1);

  AmkSampler greedy;
  amk_sampler_init(&greedy, &(AmkSamplingParams){.temperature = 0, .seed = 1});
  CHECK(&c, amk_sample(&greedy, ties, 4) == 1);
  amk_sampler_free(&greedy);

  /* top_k = 1 is greedy whatever the temperature. */
  AmkSampler k1;
  amk_sampler_init(&k1, &(AmkSamplingParams){.temperature = 5, .top_k = 1, .seed = 9});
  for (int i = 0; i < 20; i++)
    CHECK(&c, amk_sample(&k1, ties, 4) == 1);
  amk_sampler_free(&k1);

  /* logits ln(1), ln(2), ln(3), ln(4) at temperature 1: p = 0.1 .. 0.4. */
  const float graded[] = {0.0f, 0.6931472f, 1.0986123f, 1.3862944f};
  AmkSampler s;
  amk_sampler_init(&s, &(AmkSamplingParams){.temperature = 1, .seed = 42});
  int counts[4] = {0};
  const int draws = 40000;
  for (int i = 0; i < draws; i++)
    counts[amk_sample(&s, graded, 4)]++;
  for (int t = 0; t < 4; t++) /* 4 standard deviations at most */
    CHECK(&c, fabs(counts[t] / (double)draws - 0.1 * (t + 1)) < 0.01);
  amk_sampler_free(&s);

  /* top_k = 2 keeps tokens 3 and 2 only: p = 4/7 and 3/7. */
  amk_sampler_init(&s, &(AmkSamplingParams){.temperature = 1, .top_k = 2, .seed = 7});
  int kept[4] = {0};
  for (int i = 0; i < draws; i++)
    kept[amk_sample(&s, graded, 4)]++;
  CHECK(&c, kept[0] == 0 && kept[1] == 0);
  CHECK(&c, fabs(kept[3] / (double)draws - 4.0 / 7.0) < 0.01);
  amk_sampler_free(&s);

  /* top_p = 0.5: the nucleus is {3, 2} (0.4 < 0.5 <= 0.7). */
  amk_sampler_init(&s, &(AmkSamplingParams){.temperature = 1, .top_p = 0.5, .seed = 3});
  int nucleus[4] = {0};
  for (int i = 0; i < draws; i++)
    nucleus[amk_sample(&s, graded, 4)]++;
  CHECK(&c, nucleus[0] == 0 && nucleus[1] == 0 && nucleus[2] > 0 && nucleus[3] > 0);
  amk_sampler_free(&s);

  /* The same seed gives the same sequence; another seed a different one. */
  AmkSampler a, b, other;
  amk_sampler_init(&a, &(AmkSamplingParams){.temperature = 1, .seed = 5});
  amk_sampler_init(&b, &(AmkSamplingParams){.temperature = 1, .seed = 5});
  amk_sampler_init(&other, &(AmkSamplingParams){.temperature = 1, .seed = 6});
  int same = 1, differs = 0;
  for (int i = 0; i < 64; i++) {
    int32_t x = amk_sample(&a, graded, 4), y = amk_sample(&b, graded, 4);
    same &= x == y;
    differs |= x != amk_sample(&other, graded, 4);
  }
  CHECK(&c, same);
  CHECK(&c, differs);
  amk_sampler_free(&a);
  amk_sampler_free(&b);
  amk_sampler_free(&other);
  return unit_finish("test_sampling", &c);
}
