/* A HuggingFace Llama-family model description, read from config.json, and
 * the `import` pass's building blocks (docs/Import.md). */
#ifndef AMK_MODEL_H
#define AMK_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "amk/diag.h"
#include "amk/ir.h"
#include "amk/rope.h"

/* The checkpoint families `import` reads (docs/Import.md has the table of
 * what each one changes against Llama's graph). */
typedef enum {
  AMK_FAMILY_LLAMA,
  AMK_FAMILY_MISTRAL,
  AMK_FAMILY_QWEN2,
  AMK_FAMILY_QWEN3,
  AMK_FAMILY_PHI3,
  AMK_FAMILY_GEMMA,
} AmkModelFamily;

/* The MLP's gate activation: SwiGLU or GeGLU (exact or tanh GELU). */
typedef enum {
  AMK_ACT_SILU,
  AMK_ACT_GELU,      /* "gelu": x * 0.5 * (1 + erf(x / sqrt 2)) */
  AMK_ACT_GELU_TANH, /* "gelu_pytorch_tanh": the tanh approximation */
} AmkActivation;

typedef struct {
  AmkModelFamily family;
  AmkActivation act;
  bool qkv_bias;     /* q/k/v projections have biases (Qwen2) */
  bool qk_norm;      /* per-head RMSNorm of q and k before RoPE (Qwen3) */
  bool fused_proj;   /* qkv_proj and gate_up_proj tensors, sliced (Phi-3) */
  bool norm_plus_one; /* RMSNorm scales by (1 + w) (Gemma) */
  bool embed_scale;  /* embeddings times sqrt(hidden) in the dtype (Gemma) */
  /* The attention window (sliding_window) when the model uses one, else 0:
   * plain attention as long as the KV cache is no longer (import checks). */
  int64_t sliding_window;
  int64_t hidden;       /* hidden_size */
  int64_t n_layers;     /* num_hidden_layers */
  int64_t n_heads;      /* num_attention_heads */
  int64_t n_kv_heads;   /* num_key_value_heads (default n_heads) */
  int64_t head_dim;     /* head_dim (default hidden / n_heads) */
  int64_t intermediate; /* intermediate_size */
  int64_t vocab;        /* vocab_size */
  int64_t max_position_embeddings;
  double rms_norm_eps;
  bool tie_word_embeddings;
  AmkRopeSpec rope; /* rope.head_dim == head_dim */
  /* torch_dtype / dtype when it names f32, bf16 or f16. */
  bool has_dtype;
  AmkDType dtype;
} AmkModelConfig;

/* The family's name as config.json's model_type spells it ("qwen2"). */
const char *amk_model_family_name(AmkModelFamily family);

/* Parse config.json text (`path` names it in errors). Accepts the hub form
 * (top-level rope_theta, rope_scaling with `type` or `rope_type`,
 * torch_dtype) and the transformers-5 form (rope_parameters, dtype). Refuses
 * every model the toolchain cannot run exactly, with the reason. */
bool amk_model_config_parse(const char *path, const char *text, size_t len,
                            AmkModelConfig *out, AmkDiagEngine *diag);

/* Read and parse `path`. */
bool amk_model_config_read(const char *path, AmkModelConfig *out,
                           AmkDiagEngine *diag);

/* The size of the program `import` builds for a config, worked out from the
 * config alone so that a model too large to build is refused before
 * anything is allocated. Within the reader's limits (hidden 2^20, 4096
 * layers, intermediate 2^22, vocab 2^24, heads x head_dim 2^22, max_seq
 * 2^24) every count stays below 2^62, so int64 holds them all. */
typedef struct {
  int64_t params;         /* weight elements, a tied head counted once */
  int64_t weight_bytes;   /* params in the program dtype */
  int64_t kv_cache_bytes; /* every layer's K and V caches */
  int64_t tasks;          /* tasks import makes (17 per layer + 3, more for
                             Qwen3's q/k norms and Gemma's scale and GeGLU) */
  int64_t buffers;        /* buffers import makes */
} AmkModelSize;

void amk_model_size(const AmkModelConfig *cfg, AmkDType dtype, int64_t max_seq,
                    AmkModelSize *out);

#endif
