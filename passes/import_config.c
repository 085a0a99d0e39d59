/* config.json reader for `import`: the Llama family in both the hub form and
 * the transformers-5 form, with every unsupported feature refused by name. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amk/io.h"
#include "amk/json_strict.h"
#include "amk/model.h"

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

static const cJSON *member(const cJSON *obj, const char *key) {
  return cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
}

/* Present and not JSON null. */
static bool is_set(const cJSON *item) { return item && !cJSON_IsNull(item); }

/* Reads an integer key in [min, max]; absent (or null) keys take `fallback`
 * when `required` is false. */
static bool read_int(const char *path, const cJSON *root, const char *key,
                     bool required, int64_t fallback, int64_t min, int64_t max,
                     int64_t *out, AmkDiagEngine *diag) {
  const cJSON *item = member(root, key);
  if (!is_set(item)) {
    if (required) {
      amk_error(diag, no_loc(), "%s: missing required key '%s'", path, key);
      return false;
    }
    *out = fallback;
    return true;
  }
  double v = cJSON_IsNumber(item) ? item->valuedouble : NAN;
  if (!(v >= (double)min && v <= (double)max) || floor(v) != v) {
    amk_error(diag, no_loc(), "%s: '%s' must be an integer in [%lld, %lld]",
              path, key, (long long)min, (long long)max);
    return false;
  }
  *out = (int64_t)v;
  return true;
}

static bool read_real(const char *path, const cJSON *obj, const char *key,
                      double fallback, double *out, AmkDiagEngine *diag) {
  const cJSON *item = member(obj, key);
  if (!is_set(item)) {
    *out = fallback;
    return true;
  }
  if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble)) {
    amk_error(diag, no_loc(), "%s: '%s' must be a number", path, key);
    return false;
  }
  *out = item->valuedouble;
  return true;
}

static bool unsupported(const char *path, AmkDiagEngine *diag,
                        const char *reason) {
  amk_error(diag, no_loc(), "%s: unsupported model: %s", path, reason);
  return false;
}

/* True when a key is present with a value that turns the feature on: a true
 * bool, a non-zero number, a non-empty string, list or object. */
static bool feature_on(const cJSON *item) {
  if (!is_set(item) || cJSON_IsFalse(item))
    return false;
  if (cJSON_IsNumber(item))
    return item->valuedouble != 0.0;
  if (cJSON_IsString(item))
    return item->valuestring[0] != '\0';
  if (cJSON_IsArray(item) || cJSON_IsObject(item))
    return item->child != NULL;
  return true;
}

/* Refuses the model when one of `keys` turns its feature on: "'<key>'
 * <why>". True when refused. */
static bool refuse_feature(const char *path, const cJSON *root,
                           AmkDiagEngine *diag, const char *why,
                           const char *const *keys, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (feature_on(member(root, keys[i]))) {
      amk_error(diag, no_loc(), "%s: unsupported model: '%s' %s", path,
                keys[i], why);
      return true;
    }
  return false;
}

#define KEYS(...)                                                              \
  (const char *const[]){__VA_ARGS__},                                          \
      sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *)

/* model_type, its architectures entry and its family, in one table. */
static const struct {
  const char *model_type, *architecture;
  AmkModelFamily family;
} families[] = {
    {"llama", "LlamaForCausalLM", AMK_FAMILY_LLAMA},
    {"mistral", "MistralForCausalLM", AMK_FAMILY_MISTRAL},
    {"qwen2", "Qwen2ForCausalLM", AMK_FAMILY_QWEN2},
    {"qwen3", "Qwen3ForCausalLM", AMK_FAMILY_QWEN3},
    {"phi3", "Phi3ForCausalLM", AMK_FAMILY_PHI3},
    {"gemma", "GemmaForCausalLM", AMK_FAMILY_GEMMA},
};
enum { N_FAMILIES = sizeof families / sizeof families[0] };

const char *amk_model_family_name(AmkModelFamily family) {
  for (size_t i = 0; i < N_FAMILIES; i++)
    if (families[i].family == family)
      return families[i].model_type;
  return "?";
}

static void supported_types(char *out, size_t size) {
  size_t at = 0;
  for (size_t i = 0; i < N_FAMILIES && at < size; i++)
    at += (size_t)snprintf(out + at, size - at, "%s'%s'", i ? ", " : "",
                           families[i].model_type);
}

/* The activation of the MLP's gate. Gemma names it `hidden_activation`
 * (transformers' GemmaMLP reads that key), older files `hidden_act`; the
 * other families use `hidden_act` and only SiLU. */
static bool read_activation(const char *path, const cJSON *root,
                            AmkModelConfig *out, AmkDiagEngine *diag) {
  char reason[512];
  const cJSON *act = member(root, "hidden_act");
  const char *key = "hidden_act";
  if (out->family == AMK_FAMILY_GEMMA) {
    const cJSON *activation = member(root, "hidden_activation");
    if (is_set(activation)) {
      if (is_set(act) && cJSON_IsString(act) && cJSON_IsString(activation) &&
          strcmp(act->valuestring, activation->valuestring) != 0) {
        snprintf(reason, sizeof reason,
                 "hidden_activation '%.100s' and hidden_act '%.100s' differ "
                 "(refusing rather than guessing which one the MLP uses)",
                 activation->valuestring, act->valuestring);
        return unsupported(path, diag, reason);
      }
      act = activation;
      key = "hidden_activation";
    }
    /* transformers' legacy default for a Gemma without the key. */
    if (!is_set(act)) {
      out->act = AMK_ACT_GELU_TANH;
      return true;
    }
    if (cJSON_IsString(act) && strcmp(act->valuestring, "gelu_pytorch_tanh") == 0) {
      out->act = AMK_ACT_GELU_TANH;
      return true;
    }
    if (cJSON_IsString(act) && strcmp(act->valuestring, "gelu") == 0) {
      out->act = AMK_ACT_GELU;
      return true;
    }
    snprintf(reason, sizeof reason,
             "%s '%.200s' (a gemma MLP supports 'gelu_pytorch_tanh' and 'gelu')",
             key, cJSON_IsString(act) ? act->valuestring : "?");
    return unsupported(path, diag, reason);
  }
  out->act = AMK_ACT_SILU;
  if (is_set(act) && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0)) {
    snprintf(reason, sizeof reason,
             "hidden_act '%.200s' (a %s MLP supports only 'silu')",
             cJSON_IsString(act) ? act->valuestring : "?",
             amk_model_family_name(out->family));
    return unsupported(path, diag, reason);
  }
  return true;
}

/* The attention window, when the model uses one: Mistral, Phi-3 and the
 * others whenever `sliding_window` is set; Qwen2/Qwen3 only with
 * `use_sliding_window` true (their configs carry a window they do not use);
 * `layer_types` of only "full_attention" turns it off. Whether the cache is
 * short enough for it to be plain attention is import's check, which knows
 * the cache length. */
static bool read_sliding_window(const char *path, const cJSON *root,
                                AmkModelConfig *out, AmkDiagEngine *diag) {
  out->sliding_window = 0;
  const cJSON *window = member(root, "sliding_window");
  const cJSON *use = member(root, "use_sliding_window");
  if (is_set(use) && !cJSON_IsBool(use)) {
    amk_error(diag, no_loc(), "%s: 'use_sliding_window' must be true or false",
              path);
    return false;
  }
  bool uses = is_set(window);
  if (out->family == AMK_FAMILY_QWEN2 || out->family == AMK_FAMILY_QWEN3)
    uses = cJSON_IsTrue(use);
  else if (cJSON_IsTrue(use))
    uses = true;
  const cJSON *types = member(root, "layer_types");
  if (is_set(types)) {
    if (!cJSON_IsArray(types)) {
      amk_error(diag, no_loc(), "%s: 'layer_types' must be a list", path);
      return false;
    }
    bool any_sliding = false;
    int i = 0;
    for (const cJSON *t = types->child; t; t = t->next, i++) {
      bool full = cJSON_IsString(t) && strcmp(t->valuestring, "full_attention") == 0;
      bool sliding = cJSON_IsString(t) && strcmp(t->valuestring, "sliding_attention") == 0;
      if (!full && !sliding) {
        char reason[256];
        snprintf(reason, sizeof reason,
                 "layer_types[%d] is '%.100s' (only 'full_attention' and "
                 "'sliding_attention' layers are supported)",
                 i, cJSON_IsString(t) ? t->valuestring : "?");
        return unsupported(path, diag, reason);
      }
      any_sliding = any_sliding || sliding;
    }
    uses = any_sliding;
  }
  if (!uses)
    return true;
  if (!is_set(window))
    return unsupported(path, diag,
                       "sliding-window attention is on but 'sliding_window' is "
                       "not set");
  int64_t w = 0;
  if (!read_int(path, root, "sliding_window", true, 0, 1, INT64_C(1) << 40, &w,
                diag))
    return false;
  out->sliding_window = w;
  return true;
}

static bool check_family(const char *path, const cJSON *root,
                         AmkModelConfig *out, AmkDiagEngine *diag) {
  char reason[512], known[160];
  supported_types(known, sizeof known);
  const cJSON *model_type = member(root, "model_type");
  if (!cJSON_IsString(model_type)) {
    snprintf(reason, sizeof reason, "no 'model_type' (supported: %s)", known);
    return unsupported(path, diag, reason);
  }
  size_t f = 0;
  while (f < N_FAMILIES && strcmp(model_type->valuestring, families[f].model_type))
    f++;
  if (f == N_FAMILIES) {
    snprintf(reason, sizeof reason, "model_type '%.200s' (supported: %s)",
             model_type->valuestring, known);
    return unsupported(path, diag, reason);
  }
  out->family = families[f].family;
  const cJSON *archs = member(root, "architectures");
  if (cJSON_IsArray(archs)) {
    for (const cJSON *a = archs->child; a; a = a->next)
      if (!cJSON_IsString(a) ||
          strcmp(a->valuestring, families[f].architecture) != 0) {
        snprintf(reason, sizeof reason,
                 "architecture '%.200s' (model_type '%s' supports only '%s')",
                 cJSON_IsString(a) ? a->valuestring : "?",
                 families[f].model_type, families[f].architecture);
        return unsupported(path, diag, reason);
      }
  }
  /* Qwen2 always has q/k/v biases; no family here has o_proj or MLP
   * biases, so `attention_bias` (q, k, v and o) is refused everywhere. */
  if (refuse_feature(path, root, diag,
                     "is true (biases on every attention projection, o_proj "
                     "included, are not supported)",
                     KEYS("attention_bias")) ||
      refuse_feature(path, root, diag,
                     "is true (MLP projections with biases are not supported)",
                     KEYS("mlp_bias")))
    return false;
  out->qkv_bias = out->family == AMK_FAMILY_QWEN2;
  out->qk_norm = out->family == AMK_FAMILY_QWEN3;
  out->fused_proj = out->family == AMK_FAMILY_PHI3;
  out->norm_plus_one = out->embed_scale = out->family == AMK_FAMILY_GEMMA;
  if (!read_activation(path, root, out, diag) ||
      !read_sliding_window(path, root, out, diag))
    return false;
  if (refuse_feature(path, root, diag,
                     "is set (mixture-of-experts models are not supported)",
                     KEYS("num_local_experts", "num_experts", "n_routed_experts",
                          "num_experts_per_tok", "n_shared_experts",
                          "moe_intermediate_size")) ||
      refuse_feature(path, root, diag,
                     "is set (multi-head latent attention is not supported)",
                     KEYS("kv_lora_rank", "q_lora_rank")) ||
      refuse_feature(path, root, diag,
                     "is true (only the rotate-half rotary layout is supported)",
                     KEYS("rope_interleaved")) ||
      refuse_feature(path, root, diag,
                     "is true (bidirectional attention is not a decoder)",
                     KEYS("use_bidirectional_attention")))
    return false;
  if (is_set(member(root, "quantization_config")))
    return unsupported(path, diag,
                       "'quantization_config' is set (pre-quantized "
                       "checkpoints are not supported)");
  return true;
}

static bool partial_rotary_ok(const char *path, const cJSON *obj,
                              AmkDiagEngine *diag) {
  double factor;
  if (!read_real(path, obj, "partial_rotary_factor", 1.0, &factor, diag))
    return false;
  if (factor != 1.0) {
    char reason[160];
    snprintf(reason, sizeof reason,
             "partial_rotary_factor %g (only full rotary embeddings, 1.0, are "
             "supported)", factor);
    return unsupported(path, diag, reason);
  }
  return true;
}

/* rope_parameters (transformers 5) wins over rope_scaling (hub form); theta
 * comes from rope_parameters.rope_theta, else the top-level rope_theta. */
static bool read_rope(const char *path, const cJSON *root, AmkRopeSpec *rope,
                      AmkDiagEngine *diag) {
  const cJSON *params = member(root, "rope_parameters");
  const cJSON *scaling = member(root, "rope_scaling");
  if (is_set(params) && !cJSON_IsObject(params)) {
    amk_error(diag, no_loc(), "%s: 'rope_parameters' must be an object", path);
    return false;
  }
  if (is_set(scaling) && !cJSON_IsObject(scaling)) {
    amk_error(diag, no_loc(), "%s: 'rope_scaling' must be an object or null",
              path);
    return false;
  }
  const cJSON *source = is_set(params) ? params : is_set(scaling) ? scaling : NULL;
  const char *source_key = is_set(params) ? "rope_parameters" : "rope_scaling";
  if (!partial_rotary_ok(path, root, diag) ||
      (source && !partial_rotary_ok(path, source, diag)))
    return false;

  double top_theta;
  if (!read_real(path, root, "rope_theta", 10000.0, &top_theta, diag))
    return false;
  rope->theta = top_theta;
  if (is_set(params) && !read_real(path, params, "rope_theta", top_theta,
                                   &rope->theta, diag))
    return false;
  if (!(rope->theta > 1.0)) {
    amk_error(diag, no_loc(), "%s: rope_theta must be greater than 1", path);
    return false;
  }

  const char *type = "default";
  if (source) {
    const cJSON *t = member(source, "rope_type");
    if (!is_set(t))
      t = member(source, "type");
    if (is_set(t) && !cJSON_IsString(t)) {
      amk_error(diag, no_loc(), "%s: %s.rope_type must be a string", path,
                source_key);
      return false;
    }
    if (cJSON_IsString(t)) {
      type = t->valuestring;
    } else {
      /* Per-layer-type parameters ({"full_attention": {...}, ...}) belong to
       * hybrid-attention models. */
      for (const cJSON *c = source->child; c; c = c->next)
        if (cJSON_IsObject(c))
          return unsupported(path, diag,
                             "per-layer-type rope_parameters are not supported");
      /* transformers takes a missing type as "default", which has no
       * factor: the scaling the file asks for would silently not happen. */
      if (is_set(member(source, "factor"))) {
        amk_error(diag, no_loc(), "%s: '%s.factor' is set but '%s' has no "
                  "'rope_type' (or 'type'); transformers would use default "
                  "rope and ignore the factor", path, source_key, source_key);
        return false;
      }
    }
  }
  char reason[256];
  if (strcmp(type, "default") == 0) {
    rope->kind = AMK_ROPE_DEFAULT;
    return true;
  }
  if (strcmp(type, "llama3") != 0) {
    snprintf(reason, sizeof reason,
             "rope type '%.100s' (only 'default' and 'llama3' are supported)",
             type);
    return unsupported(path, diag, reason);
  }
  rope->kind = AMK_ROPE_LLAMA3;
  static const char *const keys[] = {"factor", "low_freq_factor",
                                     "high_freq_factor",
                                     "original_max_position_embeddings"};
  double *fields[] = {&rope->factor, &rope->low_freq_factor,
                      &rope->high_freq_factor, &rope->original_max_pos};
  for (int i = 0; i < 4; i++) {
    const cJSON *item = member(source, keys[i]);
    if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble)) {
      amk_error(diag, no_loc(), "%s: llama3 rope scaling needs a number "
                "'%s.%s'", path, source_key, keys[i]);
      return false;
    }
    *fields[i] = item->valuedouble;
  }
  if (!(rope->factor > 0) || !(rope->low_freq_factor > 0) ||
      !(rope->high_freq_factor > rope->low_freq_factor) ||
      !(rope->original_max_pos > 0)) {
    amk_error(diag, no_loc(), "%s: llama3 rope scaling needs factor > 0, 0 < "
              "low_freq_factor < high_freq_factor and "
              "original_max_position_embeddings > 0", path);
    return false;
  }
  return true;
}

/* Each field of llama3 scaling can be valid while together they are not: a
 * factor near zero divides the low frequencies into infinities, and every
 * logit would then be NaN. */
static bool rope_frequencies_finite(const char *path, const AmkRopeSpec *rope,
                                    AmkDiagEngine *diag) {
  int half = rope->head_dim / 2;
  double *inv_freq = amk_xmalloc((size_t)half * sizeof *inv_freq);
  amk_rope_inv_freq(rope, inv_freq, half);
  /* Default frequencies (theta > 1, finite) are always positive and finite. */
  int bad = -1;
  for (int i = 0; i < half && bad < 0; i++)
    if (!(inv_freq[i] > 0) || !isfinite(inv_freq[i]))
      bad = i;
  if (bad >= 0)
    amk_error(diag, no_loc(), "%s: llama3 rope scaling makes rotary "
              "frequency %d of %d %g; its factor %g is too small", path, bad,
              half, inv_freq[bad], rope->factor);
  free(inv_freq);
  return bad < 0;
}

static void read_dtype(const cJSON *root, AmkModelConfig *out) {
  const cJSON *d = member(root, "dtype");
  if (!cJSON_IsString(d))
    d = member(root, "torch_dtype");
  out->has_dtype = false;
  if (!cJSON_IsString(d))
    return;
  static const struct {
    const char *name;
    AmkDType dtype;
  } names[] = {{"float32", AMK_DTYPE_F32},
               {"bfloat16", AMK_DTYPE_BF16},
               {"float16", AMK_DTYPE_F16}};
  for (size_t i = 0; i < 3; i++)
    if (strcmp(d->valuestring, names[i].name) == 0) {
      out->has_dtype = true;
      out->dtype = names[i].dtype;
    }
}

bool amk_model_config_parse(const char *path, const char *text, size_t len,
                            AmkModelConfig *out, AmkDiagEngine *diag) {
  memset(out, 0, sizeof *out);
  /* Read as Python's json would, or refuse: no duplicate keys, nothing after
   * the value, no U+0000 in strings. */
  cJSON *root = amk_json_parse_strict(path, text, len, diag);
  if (!root)
    return false;
  bool ok = cJSON_IsObject(root);
  if (!ok)
    amk_error(diag, no_loc(), "%s: the top level must be a JSON object", path);
  ok = ok && check_family(path, root, out, diag);
  ok = ok && read_int(path, root, "hidden_size", true, 0, 1, 1 << 20,
                      &out->hidden, diag);
  ok = ok && read_int(path, root, "num_hidden_layers", true, 0, 1, 4096,
                      &out->n_layers, diag);
  ok = ok && read_int(path, root, "num_attention_heads", true, 0, 1, 4096,
                      &out->n_heads, diag);
  ok = ok && read_int(path, root, "num_key_value_heads", false, out->n_heads,
                      1, 4096, &out->n_kv_heads, diag);
  ok = ok && read_int(path, root, "intermediate_size", true, 0, 1, 1 << 22,
                      &out->intermediate, diag);
  ok = ok && read_int(path, root, "vocab_size", true, 0, 1, 1 << 24,
                      &out->vocab, diag);
  ok = ok && read_int(path, root, "max_position_embeddings", false, 2048, 1,
                      1 << 30, &out->max_position_embeddings, diag);
  if (ok && !is_set(member(root, "head_dim")) && out->hidden % out->n_heads) {
    amk_error(diag, no_loc(), "%s: hidden_size %lld is not a multiple of "
              "num_attention_heads %lld and no head_dim is given", path,
              (long long)out->hidden, (long long)out->n_heads);
    ok = false;
  }
  ok = ok && read_int(path, root, "head_dim", false,
                      out->hidden / (out->n_heads ? out->n_heads : 1), 2, 4096,
                      &out->head_dim, diag);
  if (ok && out->head_dim % 2) {
    amk_error(diag, no_loc(), "%s: head_dim %lld is odd (rotary embeddings "
              "need an even head_dim)", path, (long long)out->head_dim);
    ok = false;
  }
  if (ok && out->n_heads % out->n_kv_heads) {
    amk_error(diag, no_loc(), "%s: num_attention_heads %lld is not a multiple "
              "of num_key_value_heads %lld", path, (long long)out->n_heads,
              (long long)out->n_kv_heads);
    ok = false;
  }
  if (ok && out->n_heads * out->head_dim > (1 << 22)) {
    amk_error(diag, no_loc(), "%s: num_attention_heads x head_dim is too large",
              path);
    ok = false;
  }
  ok = ok && read_real(path, root, "rms_norm_eps", 1e-6, &out->rms_norm_eps,
                       diag);
  if (ok && !(out->rms_norm_eps > 0.0)) {
    amk_error(diag, no_loc(), "%s: 'rms_norm_eps' must be positive", path);
    ok = false;
  }
  if (ok) {
    const cJSON *tie = member(root, "tie_word_embeddings");
    if (is_set(tie) && !cJSON_IsBool(tie)) {
      amk_error(diag, no_loc(), "%s: 'tie_word_embeddings' must be true or "
                "false", path);
      ok = false;
    }
    out->tie_word_embeddings = cJSON_IsTrue(tie);
  }
  ok = ok && read_rope(path, root, &out->rope, diag);
  out->rope.head_dim = (int)out->head_dim;
  ok = ok && (out->rope.kind != AMK_ROPE_LLAMA3 ||
              rope_frequencies_finite(path, &out->rope, diag));
  if (ok)
    read_dtype(root, out);
  cJSON_Delete(root);
  return ok;
}

bool amk_model_config_read(const char *path, AmkModelConfig *out,
                           AmkDiagEngine *diag) {
  size_t len = 0;
  /* Found in a model folder: a FIFO or device there is refused, not waited on. */
  char *text = amk_read_regular_file(path, &len, diag);
  if (!text)
    return false;
  bool ok = amk_model_config_parse(path, text, len, out, diag);
  free(text);
  return ok;
}

void amk_model_size(const AmkModelConfig *cfg, AmkDType dtype, int64_t max_seq,
                    AmkModelSize *out) {
  int64_t h = cfg->hidden, q = cfg->n_heads * cfg->head_dim,
          kv = cfg->n_kv_heads * cfg->head_dim, inter = cfg->intermediate;
  /* As expected_weights in import.c: two norms, four attention and three
   * MLP projections per layer; the embedding, the final norm and the head. */
  int64_t per_layer = 2 * h + q * h + 2 * kv * h + h * q + 3 * inter * h;
  if (cfg->qkv_bias)
    per_layer += q + 2 * kv;
  if (cfg->qk_norm)
    per_layer += 2 * cfg->head_dim;
  int64_t heads = cfg->tie_word_embeddings ? 1 : 2;
  out->params = cfg->n_layers * per_layer + heads * cfg->vocab * h + h;
  /* Bytes per element times elements: amk_dtype_nbytes counts bits, which
   * would overflow for the largest KV caches (2^59 elements). */
  int64_t elem_bytes = amk_dtype_nbytes(dtype, 1);
  out->weight_bytes = elem_bytes * out->params;
  out->kv_cache_bytes = elem_bytes * 2 * cfg->n_layers * max_seq * kv;
  /* Per layer: 9 weights, 2 caches and 15 activations; token_id, pos,
   * embed.w, h0, final_norm.w, hf, lm_head.w and logits. Qwen2 adds 3 bias
   * weights a layer; Qwen3 2 norm weights and 2 normed activations (and 2
   * tasks); Gemma a GELU task and its output a layer, and the embedding
   * scale's task and output. */
  int64_t layer_tasks = 17, layer_buffers = 26, tasks = 3, buffers = 8;
  if (cfg->qkv_bias)
    layer_buffers += 3;
  if (cfg->qk_norm) {
    layer_tasks += 2;
    layer_buffers += 4;
  }
  if (cfg->act != AMK_ACT_SILU) {
    layer_tasks += 1;
    layer_buffers += 1;
  }
  if (cfg->embed_scale) {
    tasks += 1;
    buffers += 1;
  }
  out->tasks = layer_tasks * cfg->n_layers + tasks;
  out->buffers = layer_buffers * cfg->n_layers + buffers;
}
