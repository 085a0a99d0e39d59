/* Fuzz driver: the HuggingFace config.json reader (amk_model_config_parse).
 * A config it accepts must hold what import relies on: consistent head
 * counts, an even head_dim, sizes that amk_model_size computes without
 * overflow (UBSan reports a signed overflow), and finite positive rotary
 * frequencies. */
#include <math.h>
#include <stdlib.h>

#include "amk/model.h"
#include "amk/rope.h"
#include "fuzz.h"

static void check_config(const AmkModelConfig *cfg) {
  if (cfg->head_dim < 2 || cfg->head_dim % 2 || cfg->n_kv_heads < 1 ||
      cfg->n_heads % cfg->n_kv_heads || cfg->rope.head_dim != cfg->head_dim)
    fuzz_fail(NULL, "inconsistent heads: %lld heads, %lld KV heads, head_dim "
              "%lld (rope %d)", (long long)cfg->n_heads,
              (long long)cfg->n_kv_heads, (long long)cfg->head_dim,
              cfg->rope.head_dim);
  if (!(cfg->rms_norm_eps > 0) || !isfinite(cfg->rms_norm_eps))
    fuzz_fail(NULL, "rms_norm_eps %g", cfg->rms_norm_eps);

  /* import's longest KV cache: --max-seq goes up to 2^24. */
  int64_t max_seq = cfg->max_position_embeddings < (1 << 24)
                        ? cfg->max_position_embeddings
                        : (1 << 24);
  static const AmkDType dtypes[] = {AMK_DTYPE_F32, AMK_DTYPE_BF16,
                                    AMK_DTYPE_F16};
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
    AmkModelSize size;
    amk_model_size(cfg, dtypes[i], max_seq, &size);
    if (size.params <= 0 || size.weight_bytes <= 0 || size.kv_cache_bytes <= 0 ||
        size.tasks <= 0 || size.buffers <= 0)
      fuzz_fail(NULL, "model size: %lld params, %lld weight bytes, %lld KV "
                "bytes, %lld tasks", (long long)size.params,
                (long long)size.weight_bytes, (long long)size.kv_cache_bytes,
                (long long)size.tasks);
  }

  int half = (int)(cfg->head_dim / 2);
  double *inv_freq = malloc((size_t)half * sizeof *inv_freq);
  amk_rope_inv_freq(&cfg->rope, inv_freq, half);
  for (int i = 0; i < half; i++)
    if (!(inv_freq[i] > 0) || !isfinite(inv_freq[i]))
      fuzz_fail(NULL, "rotary frequency %d of %d is %g (theta %g, factor %g)",
                i, half, inv_freq[i], cfg->rope.theta, cfg->rope.factor);
  free(inv_freq);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  AmkDiagEngine *diag = fuzz_diag_new();
  AmkModelConfig cfg;
  bool ok = amk_model_config_parse("config.json", (const char *)data, size,
                                   &cfg, diag);
  fuzz_check_verdict("amk_model_config_parse", ok, diag);
  if (ok)
    check_config(&cfg);
  amk_diag_free(diag);
  return 0;
}
