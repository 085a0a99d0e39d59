/* A HuggingFace Llama-family model description, read from config.json, and
 * the `import` pass's building blocks (docs/Import.md). */
#ifndef AMK_MODEL_H
#define AMK_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "amk/diag.h"
#include "amk/ir.h"
#include "amk/rope.h"

typedef struct {
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

/* Parse config.json text (`path` names it in errors). Accepts the hub form
 * (top-level rope_theta, rope_scaling with `type` or `rope_type`,
 * torch_dtype) and the transformers-5 form (rope_parameters, dtype). Refuses
 * every model the toolchain cannot run exactly, with the reason. */
bool amk_model_config_parse(const char *path, const char *text, size_t len,
                            AmkModelConfig *out, AmkDiagEngine *diag);

/* Read and parse `path`. */
bool amk_model_config_read(const char *path, AmkModelConfig *out,
                           AmkDiagEngine *diag);

#endif
