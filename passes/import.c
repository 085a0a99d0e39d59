/* The `import` pass: a HuggingFace Llama-family folder (config.json plus
 * safetensors headers) becomes an op-level decode program. docs/Import.md
 * describes what is accepted and the program's shape. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "amk/builder.h"
#include "amk/model.h"
#include "amk/numerics.h"
#include "amk/pass.h"
#include "amk/path.h"
#include "amk/rope.h"
#include "amk/safetensors.h"
#include "amk/strutil.h"

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

/* Default KV cache length cap: long-context models would otherwise ask for
 * caches of 128K rows. --max-seq overrides. */
enum { DEFAULT_MAX_SEQ_CAP = 4096 };

/* The most bytes of weights and KV cache one program may hold: 1 TiB, more
 * than any one GPU has (a program runs on one), far less than the 10^17
 * bytes a config within the reader's limits can ask for. import builds no
 * weights, so the host's memory is not the limit here; amk-run checks that
 * when its reference VM needs the bytes. */
#define IMPORT_MAX_PROGRAM_BYTES ((int64_t)1 << 40)

/* ---- the module builder ---------------------------------------------------- */

typedef struct {
  AmkModule *m;
  AmkDType dtype;
  int64_t elem_bytes; /* bytes per element of the program dtype */
  int64_t rows;       /* token rows a step feeds: 1 (decode) or the batch size */
} Builder;

/* An activation (or cache) and the counter its producer signals. */
typedef struct {
  int32_t buffer;
  int32_t counter;
} Value;

#define fmt(b, ...) amk_arena_printf(&(b)->m->arena, __VA_ARGS__)

static int32_t weight(Builder *b, const char *name, const char *source,
                      int64_t rows, int64_t cols) {
  int64_t dims[2] = {rows, cols};
  return amk_module_add_hbm_buffer(b->m, name, AMK_KIND_WEIGHT, b->dtype,
                                   cols ? 2 : 1, dims, source);
}

static int32_t activation_rows(Builder *b, const char *name, int64_t rows,
                               int64_t width) {
  int64_t dims[2] = {rows, width};
  return amk_module_add_hbm_buffer(b->m, name, AMK_KIND_ACTIVATION, b->dtype,
                                   2, dims, NULL);
}

/* [rows, width]: one row per token of the step. */
static int32_t activation(Builder *b, const char *name, int64_t width) {
  return activation_rows(b, name, b->rows, width);
}

/* One task producing one buffer and signalling a fresh counter named after
 * it. `waits` are the counters of the inputs this task must see written. */
static AmkTask *add_task(Builder *b, AmkOp op, const char *label,
                         const int32_t *inputs, uint32_t n_inputs,
                         int32_t output, const int32_t *waits, uint32_t n_waits,
                         int64_t est_bytes, int64_t est_flops, Value *produced) {
  AmkCounter *c = amk_module_add_counter(b->m);
  c->note = label;
  c->name = b->m->buffers[output].name;
  int32_t counter = c->id;
  AmkTask *t = amk_module_add_task(b->m);
  t->op = op;
  t->label = label;
  t->n_inputs = n_inputs;
  t->inputs = amk_arena_memdup(&b->m->arena, inputs, n_inputs * sizeof *inputs);
  t->n_outputs = 1;
  t->outputs = amk_arena_memdup(&b->m->arena, &output, sizeof output);
  t->out_counter = counter;
  t->n_waits = n_waits;
  t->waits = amk_arena_alloc(&b->m->arena, (n_waits ? n_waits : 1) * sizeof *t->waits);
  for (uint32_t i = 0; i < n_waits; i++)
    t->waits[i] = (AmkWait){waits[i], amk_value_int(1)};
  t->est_bytes = est_bytes;
  t->est_flops = est_flops;
  *produced = (Value){output, counter};
  return t;
}

static void param_int(Builder *b, AmkTask *t, const char *key, int64_t v) {
  amk_task_set_param(b->m, t, key, amk_value_int(v));
}

static void param_real(Builder *b, AmkTask *t, const char *key, double v) {
  amk_task_set_param(b->m, t, key, amk_value_float(v));
}

/* A whole projection as one GEMV task (N_tile = N, n_off = 0), or over the
 * rows of a prefill step one GEMM_TILE (M_tile = rows); `tile` splits it
 * later. */
static Value gemv_bias(Builder *b, const char *label, Value x, int32_t w,
                       int32_t bias, int64_t k, int64_t n, const char *out_name) {
  Value out;
  /* A bias is GEMV_TILE's optional third input (the plain pattern):
   * out[c] = x . W[c] + bias[c]. */
  int32_t inputs[3] = {x.buffer, w, bias};
  uint32_t n_inputs = bias >= 0 ? 3 : 2;
  int64_t rows = b->rows;
  AmkTask *t = add_task(b, rows > 1 ? AMK_OP_GEMM_TILE : AMK_OP_GEMV_TILE, label,
                        inputs, n_inputs, activation(b, out_name, n), &x.counter, 1,
                        (k * n + rows * k + rows * n * (n_inputs - 1)) * b->elem_bytes,
                        2 * k * n * rows, &out);
  param_int(b, t, "K", k);
  param_int(b, t, "N_tile", n);
  param_int(b, t, "n_off", 0);
  if (rows > 1)
    param_int(b, t, "M_tile", rows);
  return out;
}

static Value gemv(Builder *b, const char *label, Value x, int32_t w, int64_t k,
                  int64_t n, const char *out_name) {
  return gemv_bias(b, label, x, w, -1, k, n, out_name);
}

/* RMSNORM over rows of `hidden` elements of a [1, width] vector: the whole
 * hidden state, or (Qwen3's q/k norms) each head. Gemma's norms scale by
 * (1 + w): flags bit AMK_FLAG_NORM_PLUS_ONE. */
static Value rmsnorm_rows(Builder *b, const char *label, Value x, int32_t w,
                          const AmkModelConfig *cfg, int64_t hidden,
                          int64_t width, const char *out_name) {
  Value out;
  int32_t inputs[2] = {x.buffer, w};
  AmkTask *t = add_task(b, AMK_OP_RMSNORM, label, inputs, 2,
                        activation(b, out_name, width), &x.counter, 1,
                        (2 * width + hidden) * b->elem_bytes, 4 * width, &out);
  param_real(b, t, "eps", cfg->rms_norm_eps);
  param_int(b, t, "hidden", hidden);
  if (cfg->norm_plus_one)
    param_int(b, t, "flags", AMK_FLAG_NORM_PLUS_ONE);
  return out;
}

static Value rmsnorm(Builder *b, const char *label, Value x, int32_t w,
                     const AmkModelConfig *cfg, const char *out_name) {
  return rmsnorm_rows(b, label, x, w, cfg, cfg->hidden, cfg->hidden, out_name);
}

static Value binary(Builder *b, AmkOp op, const char *label, Value x, Value y,
                    int64_t width, int64_t flops_per_elem, const char *out_name) {
  Value out;
  int32_t inputs[2] = {x.buffer, y.buffer};
  int32_t waits[2] = {x.counter, y.counter};
  add_task(b, op, label, inputs, 2, activation(b, out_name, width), waits, 2,
           3 * width * b->elem_bytes, flops_per_elem * width, &out);
  return out;
}

static Value rope(Builder *b, const char *label, Value x, Value pos,
                  int64_t heads, const AmkModelConfig *cfg,
                  const char *out_name) {
  Value out;
  int64_t width = heads * cfg->head_dim;
  int32_t inputs[2] = {x.buffer, pos.buffer};
  /* pos is an IO input nobody produces: nothing to wait for. */
  AmkTask *t = add_task(b, AMK_OP_ROPE, label, inputs, 2,
                        activation(b, out_name, width), &x.counter, 1,
                        2 * width * b->elem_bytes + 4, 3 * width, &out);
  param_int(b, t, "head_dim", cfg->head_dim);
  param_real(b, t, "theta", cfg->rope.theta);
  if (cfg->rope.kind == AMK_ROPE_LLAMA3) {
    param_real(b, t, AMK_ROPE_PARAM_FACTOR, cfg->rope.factor);
    param_real(b, t, AMK_ROPE_PARAM_LOW_FREQ_FACTOR, cfg->rope.low_freq_factor);
    param_real(b, t, AMK_ROPE_PARAM_HIGH_FREQ_FACTOR, cfg->rope.high_freq_factor);
    param_real(b, t, AMK_ROPE_PARAM_ORIGINAL_MAX_POS, cfg->rope.original_max_pos);
  }
  return out;
}

static Value kv_append(Builder *b, const char *label, Value x, int32_t cache,
                       const AmkModelConfig *cfg) {
  Value out;
  int32_t inputs[2] = {x.buffer, cache};
  int64_t row = cfg->n_kv_heads * cfg->head_dim;
  AmkTask *t = add_task(b, AMK_OP_KV_APPEND, label, inputs, 2, cache,
                        &x.counter, 1, 2 * b->rows * row * b->elem_bytes, 0, &out);
  /* The run's position (rows pos..pos+rows-1); see docs/Import.md. */
  param_int(b, t, "pos", 0);
  return out;
}

/* A value as a tensor of `dtype` holds it (torch.tensor(v, dtype=...)). */
static double round_to_dtype(AmkDType dtype, double v) {
  float f = (float)v;
  return dtype == AMK_DTYPE_BF16  ? amk_round_bf16(f)
         : dtype == AMK_DTYPE_F16 ? amk_round_f16(f)
                                  : f;
}

/* ---- meta, target, config ------------------------------------------------- */

typedef struct {
  AmkMember items[24];
  uint32_t n;
} MetaList;

static void meta_put(MetaList *ml, const char *key, AmkValue v) {
  AMK_ASSERT(ml->n < sizeof ml->items / sizeof ml->items[0]);
  ml->items[ml->n++] = (AmkMember){key, v};
}

static AmkValue str_value(AmkModule *m, const char *s) {
  AmkValue v = {.kind = AMK_VALUE_STRING};
  v.as.s = amk_arena_strdup(&m->arena, s);
  return v;
}

static AmkValue bool_value(bool b) {
  AmkValue v = {.kind = AMK_VALUE_BOOL};
  v.as.b = b;
  return v;
}

/* ---- the checkpoint --------------------------------------------------------- */

typedef struct {
  char key[128];
  uint32_t rank;
  int64_t shape[2];
} Expected;

static void format_shape(char *out, size_t size, uint32_t rank,
                         const int64_t *shape) {
  size_t at = (size_t)snprintf(out, size, "[");
  for (uint32_t i = 0; i < rank && at < size; i++)
    at += (size_t)snprintf(out + at, size - at, "%s%lld", i ? ", " : "",
                           (long long)shape[i]);
  if (at < size)
    snprintf(out + at, size - at, "]");
}

/* Every tensor the model needs, with its HF shape ([out, in] for
 * projections). */
static Expected *expected_weights(const AmkModelConfig *cfg, size_t *count) {
  size_t cap = 3 + 14 * (size_t)cfg->n_layers, n = 0;
  Expected *list = amk_xcalloc(cap, sizeof *list);
  int64_t h = cfg->hidden, q = cfg->n_heads * cfg->head_dim,
          kv = cfg->n_kv_heads * cfg->head_dim, inter = cfg->intermediate;
#define EXPECT(r, d0, d1, ...)                                                 \
  do {                                                                         \
    snprintf(list[n].key, sizeof list[n].key, __VA_ARGS__);                    \
    list[n].rank = (r);                                                        \
    list[n].shape[0] = (d0);                                                   \
    list[n].shape[1] = (d1);                                                   \
    n++;                                                                       \
  } while (0)
  EXPECT(2, cfg->vocab, h, "model.embed_tokens.weight");
  for (int64_t l = 0; l < cfg->n_layers; l++) {
    EXPECT(1, h, 0, "model.layers.%lld.input_layernorm.weight", (long long)l);
    if (cfg->fused_proj) {
      EXPECT(2, q + 2 * kv, h, "model.layers.%lld.self_attn.qkv_proj.weight",
             (long long)l);
    } else {
      EXPECT(2, q, h, "model.layers.%lld.self_attn.q_proj.weight", (long long)l);
      EXPECT(2, kv, h, "model.layers.%lld.self_attn.k_proj.weight", (long long)l);
      EXPECT(2, kv, h, "model.layers.%lld.self_attn.v_proj.weight", (long long)l);
    }
    if (cfg->qkv_bias) {
      EXPECT(1, q, 0, "model.layers.%lld.self_attn.q_proj.bias", (long long)l);
      EXPECT(1, kv, 0, "model.layers.%lld.self_attn.k_proj.bias", (long long)l);
      EXPECT(1, kv, 0, "model.layers.%lld.self_attn.v_proj.bias", (long long)l);
    }
    if (cfg->qk_norm) {
      EXPECT(1, cfg->head_dim, 0, "model.layers.%lld.self_attn.q_norm.weight",
             (long long)l);
      EXPECT(1, cfg->head_dim, 0, "model.layers.%lld.self_attn.k_norm.weight",
             (long long)l);
    }
    EXPECT(2, h, q, "model.layers.%lld.self_attn.o_proj.weight", (long long)l);
    EXPECT(1, h, 0, "model.layers.%lld.post_attention_layernorm.weight",
           (long long)l);
    if (cfg->fused_proj) {
      EXPECT(2, 2 * inter, h, "model.layers.%lld.mlp.gate_up_proj.weight",
             (long long)l);
    } else {
      EXPECT(2, inter, h, "model.layers.%lld.mlp.gate_proj.weight", (long long)l);
      EXPECT(2, inter, h, "model.layers.%lld.mlp.up_proj.weight", (long long)l);
    }
    EXPECT(2, h, inter, "model.layers.%lld.mlp.down_proj.weight", (long long)l);
  }
  EXPECT(1, h, 0, "model.norm.weight");
  if (!cfg->tie_word_embeddings)
    EXPECT(2, cfg->vocab, h, "lm_head.weight");
#undef EXPECT
  *count = n;
  return list;
}

/* Check the state dict against the config. Sets *ckpt_dtype to the
 * embedding's dtype (the checkpoint's dtype). */
static bool check_weights(const AmkSafetensors *st, const AmkModelConfig *cfg,
                          const char *dir, AmkStDType *ckpt_dtype,
                          AmkDiagEngine *diag) {
  size_t n_tensors = amk_safetensors_count(st);
  size_t n_expected = 0;
  Expected *expected = expected_weights(cfg, &n_expected);
  /* A bias the family does not have would be silently dropped: refuse it
   * (Qwen2's q/k/v biases are expected, so they pass). */
  for (size_t i = 0; i < n_tensors; i++) {
    const AmkStTensor *t = amk_safetensors_at(st, i);
    if (!amk_str_ends_with(t->name, ".bias"))
      continue;
    bool wanted = false;
    for (size_t e = 0; e < n_expected && !wanted; e++)
      wanted = strcmp(expected[e].key, t->name) == 0;
    if (!wanted) {
      amk_error(diag, no_loc(), "%s: unsupported model: the checkpoint has a "
                "bias tensor '%s' (model_type '%s' has no bias there%s)",
                t->file, t->name, amk_model_family_name(cfg->family),
                cfg->qkv_bias ? "; only q_proj, k_proj and v_proj have biases"
                              : "; its config has no attention_bias");
      free(expected);
      return false;
    }
  }
  bool *used = amk_xcalloc(n_tensors ? n_tensors : 1, sizeof *used);
  int problems = 0;
  const int max_problems = 20;
  for (size_t e = 0; e < n_expected && problems < max_problems; e++) {
    char want[64], got[AMK_ST_MAX_RANK * 24 + 4];
    format_shape(want, sizeof want, expected[e].rank, expected[e].shape);
    const AmkStTensor *t = amk_safetensors_find(st, expected[e].key);
    if (!t) {
      amk_error(diag, no_loc(), "missing tensor '%s' in %s (expected shape %s)",
                expected[e].key, dir, want);
      problems++;
      continue;
    }
    used[t - amk_safetensors_at(st, 0)] = true;
    bool same = t->rank == expected[e].rank;
    for (uint32_t d = 0; same && d < t->rank; d++)
      same = t->shape[d] == expected[e].shape[d];
    if (!same) {
      format_shape(got, sizeof got, t->rank, t->shape);
      amk_error(diag, no_loc(), "%s: tensor '%s' has shape %s but config.json "
                "implies %s", t->file, t->name, got, want);
      problems++;
    } else if (!amk_st_dtype_is_float(t->dtype)) {
      amk_error(diag, no_loc(), "%s: tensor '%s' has dtype %s; only F32, BF16, "
                "F16 and F64 weights can be imported", t->file, t->name,
                amk_st_dtype_name(t->dtype));
      problems++;
    }
  }
  /* A tied checkpoint may still carry a copy of the head; it is unused. */
  const AmkStTensor *head = amk_safetensors_find(st, "lm_head.weight");
  if (cfg->tie_word_embeddings && head)
    used[head - amk_safetensors_at(st, 0)] = true;
  size_t unused = 0;
  const char *first_unused = NULL;
  for (size_t i = 0; i < n_tensors; i++) {
    const char *name = amk_safetensors_at(st, i)->name;
    if (!used[i] && !amk_str_ends_with(name, "rotary_emb.inv_freq")) {
      if (!unused++)
        first_unused = name;
    }
  }
  if (unused && problems == 0)
    amk_warning(diag, no_loc(), "%s: %zu tensor%s in the checkpoint %s not "
                "used by the model (first: '%s')", dir, unused,
                unused == 1 ? "" : "s", unused == 1 ? "is" : "are",
                first_unused);
  const AmkStTensor *embed = amk_safetensors_find(st, expected[0].key);
  if (embed)
    *ckpt_dtype = embed->dtype;
  free(used);
  free(expected);
  return problems == 0;
}

/* ---- options ------------------------------------------------------------------ */

/* ---- the folder ---------------------------------------------------------------- */

/* The folder's last path component, for meta.model. */
static void model_name(const char *dir, char *out, size_t size) {
  size_t len = strlen(dir);
  while (len > 1 && dir[len - 1] == '/')
    len--;
  size_t start = len;
  while (start > 0 && dir[start - 1] != '/')
    start--;
  size_t n = len - start;
  if (n == 0 || (n == 1 && dir[start] == '.')) {
    snprintf(out, size, "model");
    return;
  }
  snprintf(out, size, "%.*s", (int)n, dir + start);
}

/* Anything at all at dir/name, even one stat cannot look at: reading it then
 * names the real problem instead of calling it missing. */
static bool file_exists(const char *dir, const char *name) {
  char *path = amk_path_join(dir, name);
  bool exists = amk_path_kind(path) != AMK_PATH_ABSENT;
  free(path);
  return exists;
}

/* ---- the program ------------------------------------------------------------------ */

/* all_logits: a prefill program writes every row's logits ([rows, vocab])
 * instead of the last row's ([1, vocab]). */
static void build_program(Builder *b, const AmkModelConfig *cfg,
                          int64_t max_seq, bool all_logits) {
  int64_t h = cfg->hidden, hd = cfg->head_dim, q_width = cfg->n_heads * hd,
          kv_width = cfg->n_kv_heads * hd, inter = cfg->intermediate;
  int64_t rows = b->rows;
  int64_t one[1] = {rows};
  Value token = {amk_module_add_hbm_buffer(b->m, "token_id", AMK_KIND_IO_INPUT,
                                           AMK_DTYPE_I32, 1, one, NULL),
                 -1};
  /* One position per row: ROPE rotates row r by pos + r. */
  Value pos = {amk_module_add_hbm_buffer(b->m, "pos", AMK_KIND_IO_INPUT,
                                         AMK_DTYPE_I32, 1, one, NULL),
               -1};

  int32_t embed_w = weight(b, "embed.w", "model.embed_tokens.weight",
                           cfg->vocab, h);
  Value hidden;
  int32_t embed_in[2] = {token.buffer, embed_w};
  AmkTask *t = add_task(b, AMK_OP_EMBED, "embed", embed_in, 2,
                        activation(b, cfg->embed_scale ? "emb" : "h0", h), NULL,
                        0, 2 * h * b->elem_bytes + 4, 0, &hidden);
  param_int(b, t, "hidden", h);
  if (cfg->embed_scale) {
    /* Gemma: times sqrt(hidden) as a tensor of the model's dtype, i.e. the
     * factor rounded to the dtype first (transformers' GemmaModel). MUL of
     * one input scales by its `scale` param. */
    Value scaled;
    t = add_task(b, AMK_OP_MUL, "embed_scale", &hidden.buffer, 1,
                 activation(b, "h0", h), &hidden.counter, 1,
                 2 * h * b->elem_bytes, h, &scaled);
    param_real(b, t, "scale",
               round_to_dtype(b->dtype, sqrt((double)cfg->hidden)));
    hidden = scaled;
  }

  for (int64_t l = 0; l < cfg->n_layers; l++) {
    long long L = (long long)l;
#define KEY(suffix) fmt(b, "model.layers.%lld." suffix, L)
#define NAME(suffix) fmt(b, "L%lld." suffix, L)
    int32_t in_norm_w = weight(b, NAME("input_norm.w"),
                               KEY("input_layernorm.weight"), h, 0);
    Value an = rmsnorm(b, NAME("input_norm"), hidden, in_norm_w, cfg,
                       NAME("an"));
    /* Phi-3 stores q|k|v and gate|up as one tensor each: the buffers take
     * their rows (a source `KEY[begin:end]`, docs/Import.md). */
    const char *qkv_key = KEY("self_attn.qkv_proj.weight");
    const char *gate_up_key = KEY("mlp.gate_up_proj.weight");
    int32_t q_w = weight(b, NAME("q_proj.w"),
                         cfg->fused_proj ? fmt(b, "%s[0:%lld]", qkv_key,
                                               (long long)q_width)
                                         : KEY("self_attn.q_proj.weight"),
                         q_width, h);
    int32_t k_w = weight(b, NAME("k_proj.w"),
                         cfg->fused_proj
                             ? fmt(b, "%s[%lld:%lld]", qkv_key,
                                   (long long)q_width,
                                   (long long)(q_width + kv_width))
                             : KEY("self_attn.k_proj.weight"),
                         kv_width, h);
    int32_t v_w = weight(b, NAME("v_proj.w"),
                         cfg->fused_proj
                             ? fmt(b, "%s[%lld:%lld]", qkv_key,
                                   (long long)(q_width + kv_width),
                                   (long long)(q_width + 2 * kv_width))
                             : KEY("self_attn.v_proj.weight"),
                         kv_width, h);
    int32_t q_b = -1, k_b = -1, v_b = -1;
    if (cfg->qkv_bias) {
      q_b = weight(b, NAME("q_proj.b"), KEY("self_attn.q_proj.bias"), q_width, 0);
      k_b = weight(b, NAME("k_proj.b"), KEY("self_attn.k_proj.bias"), kv_width, 0);
      v_b = weight(b, NAME("v_proj.b"), KEY("self_attn.v_proj.bias"), kv_width, 0);
    }
    Value q = gemv_bias(b, NAME("q_proj"), an, q_w, q_b, h, q_width, NAME("q"));
    Value k = gemv_bias(b, NAME("k_proj"), an, k_w, k_b, h, kv_width, NAME("k"));
    Value v = gemv_bias(b, NAME("v_proj"), an, v_w, v_b, h, kv_width, NAME("v"));
    if (cfg->qk_norm) {
      /* Qwen3: RMSNorm of each head of q and k (rows of head_dim) before
       * RoPE. */
      int32_t qn_w = weight(b, NAME("q_norm.w"), KEY("self_attn.q_norm.weight"),
                            hd, 0);
      int32_t kn_w = weight(b, NAME("k_norm.w"), KEY("self_attn.k_norm.weight"),
                            hd, 0);
      q = rmsnorm_rows(b, NAME("q_norm"), q, qn_w, cfg, hd, q_width, NAME("qn"));
      k = rmsnorm_rows(b, NAME("k_norm"), k, kn_w, cfg, hd, kv_width,
                       NAME("kn"));
    }
    Value qr = rope(b, NAME("rope_q"), q, pos, cfg->n_heads, cfg, NAME("qr"));
    Value kr = rope(b, NAME("rope_k"), k, pos, cfg->n_kv_heads, cfg,
                    NAME("kr"));
    int64_t cache_dims[3] = {max_seq, cfg->n_kv_heads, hd};
    int32_t kcache = amk_module_add_hbm_buffer(
        b->m, NAME("kcache"), AMK_KIND_KV_CACHE, b->dtype, 3, cache_dims, NULL);
    int32_t vcache = amk_module_add_hbm_buffer(
        b->m, NAME("vcache"), AMK_KIND_KV_CACHE, b->dtype, 3, cache_dims, NULL);
    Value kc = kv_append(b, NAME("k_append"), kr, kcache, cfg);
    Value vc = kv_append(b, NAME("v_append"), v, vcache, cfg);

    Value attn;
    int32_t attn_in[3] = {qr.buffer, kc.buffer, vc.buffer};
    int32_t attn_waits[3] = {qr.counter, kc.counter, vc.counter};
    /* pos + rows at meta.pos = 0: the window up to the step's last row;
     * with several rows, causal (row r reads up to pos + r). */
    const int64_t kv_len = rows;
    t = add_task(b, AMK_OP_ATTENTION_TILE, NAME("attention"), attn_in, 3,
                 activation(b, NAME("attn"), q_width), attn_waits, 3,
                 (2 * kv_len * kv_width + 2 * rows * q_width) * b->elem_bytes,
                 4 * cfg->n_heads * hd * kv_len * rows, &attn);
    param_int(b, t, "head_dim", hd);
    param_int(b, t, "kv_start", 0);
    param_int(b, t, "kv_len", kv_len);
    if (rows > 1)
      param_int(b, t, "flags", 1);
    param_real(b, t, "scale", 1.0 / sqrt((double)hd));
    param_int(b, t, "n_heads", cfg->n_heads);
    param_int(b, t, "n_kv_heads", cfg->n_kv_heads);

    int32_t o_w = weight(b, NAME("o_proj.w"), KEY("self_attn.o_proj.weight"),
                         h, q_width);
    Value o = gemv(b, NAME("o_proj"), attn, o_w, q_width, h, NAME("o"));
    Value h_attn = binary(b, AMK_OP_ADD, NAME("attn_residual"), hidden, o, h,
                          1, NAME("h_attn"));
    int32_t post_norm_w = weight(b, NAME("post_norm.w"),
                                 KEY("post_attention_layernorm.weight"), h, 0);
    Value mn = rmsnorm(b, NAME("post_norm"), h_attn, post_norm_w, cfg,
                       NAME("mn"));
    int32_t gate_w = weight(b, NAME("gate_proj.w"),
                            cfg->fused_proj
                                ? fmt(b, "%s[0:%lld]", gate_up_key, (long long)inter)
                                : KEY("mlp.gate_proj.weight"),
                            inter, h);
    int32_t up_w = weight(b, NAME("up_proj.w"),
                          cfg->fused_proj
                              ? fmt(b, "%s[%lld:%lld]", gate_up_key,
                                    (long long)inter, (long long)(2 * inter))
                              : KEY("mlp.up_proj.weight"),
                          inter, h);
    Value gate = gemv(b, NAME("gate_proj"), mn, gate_w, h, inter, NAME("gate"));
    Value up = gemv(b, NAME("up_proj"), mn, up_w, h, inter, NAME("up"));
    Value act;
    if (cfg->act == AMK_ACT_SILU) {
      act = binary(b, AMK_OP_SILU_MUL, NAME("swiglu"), gate, up, inter, 4,
                   NAME("act"));
    } else {
      /* GeGLU: gelu(gate) rounded to the dtype, then times up, as
       * transformers' act_fn(gate_proj(x)) * up_proj(x). */
      Value gelu;
      t = add_task(b, AMK_OP_GELU, NAME("gelu"), &gate.buffer, 1,
                   activation(b, NAME("gate_act"), inter), &gate.counter, 1,
                   2 * inter * b->elem_bytes, 8 * inter, &gelu);
      if (cfg->act == AMK_ACT_GELU_TANH)
        param_int(b, t, "flags", AMK_FLAG_GELU_TANH);
      act = binary(b, AMK_OP_MUL, NAME("geglu"), gelu, up, inter, 1,
                   NAME("act"));
    }
    int32_t down_w = weight(b, NAME("down_proj.w"), KEY("mlp.down_proj.weight"),
                            h, inter);
    Value down = gemv(b, NAME("down_proj"), act, down_w, inter, h, NAME("d"));
    hidden = binary(b, AMK_OP_ADD, NAME("mlp_residual"), h_attn, down, h, 1,
                    NAME("h_mlp"));
#undef KEY
#undef NAME
  }
  int32_t final_w = weight(b, "final_norm.w", "model.norm.weight", h, 0);
  int64_t logit_rows = all_logits ? rows : 1;
  if (rows > 1 && !all_logits) {
    /* Only the last row's logits are wanted: EMBED gathers row rows - 1 of
     * the hidden state (a synthetic CONST index), and the norm and the
     * head run on that one row. */
    int32_t last = amk_module_add_hbm_buffer(b->m, "last_row", AMK_KIND_CONST,
                                             AMK_DTYPE_I32, 1, (int64_t[1]){1},
                                             fmt(b, "amk.int:%lld",
                                                 (long long)(rows - 1)));
    int32_t gather_in[2] = {last, hidden.buffer};
    b->rows = 1;
    t = add_task(b, AMK_OP_EMBED, "last_row", gather_in, 2,
                 activation(b, "h_last", h), &hidden.counter, 1,
                 2 * h * b->elem_bytes + 4, 0, &hidden);
    param_int(b, t, "hidden", h);
  }
  Value hf = rmsnorm(b, "final_norm", hidden, final_w, cfg, "hf");
  int32_t head_w = weight(b, "lm_head.w",
                          cfg->tie_word_embeddings ? "model.embed_tokens.weight"
                                                   : "lm_head.weight",
                          cfg->vocab, h);
  int64_t logit_dims[2] = {logit_rows, cfg->vocab};
  int32_t logits = amk_module_add_hbm_buffer(
      b->m, "logits", AMK_KIND_IO_OUTPUT, b->dtype, 2, logit_dims, NULL);
  Value out;
  int32_t head_in[2] = {hf.buffer, head_w};
  t = add_task(b, logit_rows > 1 ? AMK_OP_GEMM_TILE : AMK_OP_GEMV_TILE, "lm_head",
               head_in, 2, logits, &hf.counter, 1,
               (h * cfg->vocab + logit_rows * (h + cfg->vocab)) * b->elem_bytes,
               2 * h * cfg->vocab * logit_rows, &out);
  param_int(b, t, "K", h);
  param_int(b, t, "N_tile", cfg->vocab);
  param_int(b, t, "n_off", 0);
  if (logit_rows > 1)
    param_int(b, t, "M_tile", logit_rows);
  b->rows = rows;
}

/* Refuses, before anything is built, a program larger than one GPU could
 * hold or than the passes after import can handle. */
static bool program_fits(const AmkModelSize *size, const AmkModelConfig *cfg,
                         AmkDType dtype, int64_t max_seq, AmkDiagEngine *diag) {
  /* Each term is below 2^62 (amk_model_size), so the sum does not wrap. */
  int64_t bytes = size->weight_bytes + size->kv_cache_bytes;
  if (bytes > IMPORT_MAX_PROGRAM_BYTES) {
    amk_error(diag, no_loc(), "import: the model needs %.3g bytes, %.3g of "
              "weights (%.3g parameters in %s) and %.3g of KV cache (%lld "
              "layers x %lld positions); one program holds at most 2^40 bytes "
              "(1 TiB), more than any one GPU has; check config.json's "
              "sizes%s", (double)bytes, (double)size->weight_bytes,
              (double)size->params, amk_dtype_text_name(dtype),
              (double)size->kv_cache_bytes, (long long)cfg->n_layers,
              (long long)max_seq,
              size->kv_cache_bytes > size->weight_bytes ? " or give a smaller "
              "--max-seq" : "");
    return false;
  }
  if (size->tasks > AMK_MAX_PROGRAM_TASKS) {
    amk_error(diag, no_loc(), "import: the model would have %lld tasks, more "
              "than the %d a program may have", (long long)size->tasks,
              AMK_MAX_PROGRAM_TASKS);
    return false;
  }
  return true;
}

static void set_meta(AmkModule *m, const AmkModelConfig *cfg, const char *name,
                     const char *gpu, AmkDType dtype, int64_t max_seq,
                     bool has_weights, int64_t weight_bytes, int64_t rows,
                     bool all_logits) {
  MetaList ml = {.n = 0};
  meta_put(&ml, "model", str_value(m, name));
  meta_put(&ml, "gpu", str_value(m, gpu));
  meta_put(&ml, "regime", str_value(m, rows > 1 ? "prefill" : "decode"));
  meta_put(&ml, "pos", amk_value_int(0));
  meta_put(&ml, "kv_len", amk_value_int(rows));
  if (rows > 1) {
    meta_put(&ml, "batch_size", amk_value_int(rows));
    meta_put(&ml, "prefill_logits", str_value(m, all_logits ? "all" : "last"));
  }
  meta_put(&ml, "dtype", str_value(m, amk_dtype_json_name(dtype)));
  meta_put(&ml, "n_layers", amk_value_int(cfg->n_layers));
  meta_put(&ml, "weight_bytes", amk_value_int(weight_bytes));
  meta_put(&ml, "hidden", amk_value_int(cfg->hidden));
  meta_put(&ml, "n_heads", amk_value_int(cfg->n_heads));
  meta_put(&ml, "n_kv_heads", amk_value_int(cfg->n_kv_heads));
  meta_put(&ml, "head_dim", amk_value_int(cfg->head_dim));
  meta_put(&ml, "intermediate", amk_value_int(cfg->intermediate));
  meta_put(&ml, "vocab", amk_value_int(cfg->vocab));
  meta_put(&ml, "max_seq", amk_value_int(max_seq));
  meta_put(&ml, "rope_type",
           str_value(m, cfg->rope.kind == AMK_ROPE_LLAMA3 ? "llama3" : "default"));
  meta_put(&ml, "tie_word_embeddings", bool_value(cfg->tie_word_embeddings));
  meta_put(&ml, "weights", str_value(m, has_weights ? "safetensors" : "none"));
  /* The model_type, for every family but Llama (whose programs predate
   * the key). */
  if (cfg->family != AMK_FAMILY_LLAMA)
    meta_put(&ml, "family", str_value(m, amk_model_family_name(cfg->family)));
  m->meta.kind = AMK_VALUE_OBJECT;
  m->meta.count = ml.n;
  m->meta.as.members = amk_arena_memdup(&m->arena, ml.items,
                                        ml.n * sizeof ml.items[0]);
}

/* ---- the pass -------------------------------------------------------------------- */

bool amk_pass_import(AmkModule *m, AmkPassContext *ctx) {
  AmkDiagEngine *diag = ctx->diag;
  if (!m->model_dir) {
    amk_error(diag, no_loc(), "import: no model folder: give a folder as the "
              "input (amk-opt DIR -import) or a `model \"DIR\"` line");
    return false;
  }
  if (m->n_buffers || m->n_counters || m->n_tasks) {
    amk_error(diag, no_loc(), "import: the module already has %u buffers, %u "
              "counters and %u tasks; import builds a program into an empty "
              "module", m->n_buffers, m->n_counters, m->n_tasks);
    return false;
  }

  /* Options first: a typo should not cost a checkpoint scan. */
  const char *target_name = amk_pass_option_string(ctx, "target");
  const AmkTarget *target = NULL;
  if (target_name) {
    target = amk_builtin_target(target_name);
    if (!target) {
      char known[256];
      size_t at = 0;
      for (size_t i = 0; i < amk_builtin_target_count() && at < sizeof known; i++)
        at += (size_t)snprintf(known + at, sizeof known - at, "%s%s",
                               i ? ", " : "", amk_builtin_target_at(i)->name);
      amk_error(diag, no_loc(), "import: unknown --target '%s' (known: %s)",
                target_name, known);
      return false;
    }
  }
  /* The words of --dtype in AMK_PASS_OPTIONS, in order. */
  static const AmkDType dtype_by_word[] = {AMK_DTYPE_F32, AMK_DTYPE_BF16,
                                           AMK_DTYPE_F16};
  size_t dtype_word = 0;
  bool dtype_forced = amk_pass_option_enum(ctx, "dtype", &dtype_word);
  AmkDType forced_dtype = dtype_by_word[dtype_word];
  int64_t max_seq = 0; /* range-checked by the option table */
  bool max_seq_given = amk_pass_option_int(ctx, "max-seq", &max_seq);
  int64_t batch = 1;
  amk_pass_option_int(ctx, "batch-size", &batch);
  size_t logits_word = 0; /* last|all */
  bool all_logits = amk_pass_option_enum(ctx, "prefill-logits", &logits_word) &&
                    logits_word == 1;

  char *dir = amk_module_model_folder(m);
  bool ok = false;
  AmkSafetensors *st = NULL;
  if (!amk_is_directory(dir)) {
    amk_error(diag, no_loc(), "%s: not a model folder (no such directory)", dir);
    goto done;
  }
  if (!file_exists(dir, "config.json")) {
    amk_error(diag, no_loc(), "%s: no config.json in this folder (not a "
              "HuggingFace model folder)", dir);
    goto done;
  }
  char *config_path = amk_path_join(dir, "config.json");
  AmkModelConfig cfg;
  bool config_ok = amk_model_config_read(config_path, &cfg, diag);
  free(config_path);
  if (!config_ok)
    goto done;

  bool has_weights = amk_safetensors_present(dir);
  AmkStDType ckpt_dtype = AMK_ST_F32;
  bool have_ckpt_dtype = false;
  if (has_weights) {
    st = amk_safetensors_open(dir, diag);
    if (!st || !check_weights(st, &cfg, dir, &ckpt_dtype, diag))
      goto done;
    have_ckpt_dtype = true;
  } else if (file_exists(dir, "pytorch_model.bin") ||
             file_exists(dir, "pytorch_model.bin.index.json")) {
    amk_error(diag, no_loc(), "%s: only safetensors checkpoints can be "
              "imported (found pytorch_model.bin; convert it to "
              "model.safetensors)", dir);
    goto done;
  } else {
    amk_diag(diag, AMK_SEVERITY_REMARK, no_loc(),
             "no safetensors weights in %s; importing from config.json alone "
             "(weight buffers name their sources but have no data)", dir);
  }

  /* Program dtype: --dtype, else the checkpoint's, else config.json's. */
  AmkDType dtype = AMK_DTYPE_F32;
  if (dtype_forced)
    dtype = forced_dtype;
  else if (have_ckpt_dtype)
    dtype = ckpt_dtype == AMK_ST_BF16 ? AMK_DTYPE_BF16
            : ckpt_dtype == AMK_ST_F16 ? AMK_DTYPE_F16
                                       : AMK_DTYPE_F32;
  else if (cfg.has_dtype)
    dtype = cfg.dtype;

  if (!max_seq_given) {
    max_seq = cfg.max_position_embeddings < DEFAULT_MAX_SEQ_CAP
                  ? cfg.max_position_embeddings
                  : DEFAULT_MAX_SEQ_CAP;
  } else if (max_seq > cfg.max_position_embeddings) {
    amk_warning(diag, no_loc(), "import: --max-seq=%lld exceeds the model's "
                "max_position_embeddings (%lld)", (long long)max_seq,
                (long long)cfg.max_position_embeddings);
  }

  /* A window at least as long as the cache never hides a position: plain
   * attention. A shorter one would, and is refused (no windowed kernel). */
  if (cfg.sliding_window > 0 && cfg.sliding_window < max_seq) {
    amk_error(diag, no_loc(), "%s/config.json: unsupported model: "
              "'sliding_window' is %lld, shorter than the KV cache (%lld "
              "positions%s); sliding-window attention is not supported: give "
              "--max-seq=%lld or less", dir, (long long)cfg.sliding_window,
              (long long)max_seq, max_seq_given ? ", --max-seq" : ", from "
              "max_position_embeddings", (long long)cfg.sliding_window);
    goto done;
  }

  AmkModelSize size;
  amk_model_size(&cfg, dtype, max_seq, &size);
  if (!program_fits(&size, &cfg, dtype, max_seq, diag))
    goto done;

  if (!target)
    target = m->target ? m->target : amk_builtin_target("h200");
  AMK_ASSERT(target != NULL);
  AmkTarget *target_copy = amk_arena_memdup(&m->arena, target, sizeof *target);
  m->target = target_copy;
  if (!m->config)
    m->config = amk_config_new_default(m);

  if (batch > max_seq) {
    amk_error(diag, no_loc(), "import: --batch-size=%lld is longer than the KV "
              "cache (%lld positions)", (long long)batch, (long long)max_seq);
    goto done;
  }

  Builder b = {m, dtype, amk_dtype_nbytes(dtype, 1), batch};
  build_program(&b, &cfg, max_seq, all_logits);
  /* The estimate is the program: meta's weight_bytes (each source once, a
   * tied head sharing the embedding's bytes) is read from it. A prefill
   * program keeping the last row's logits adds the gather (one task, its
   * index and its output). */
  int64_t gather = batch > 1 && !all_logits;
  AMK_ASSERT(m->n_tasks == (uint64_t)(size.tasks + gather) &&
             m->n_buffers == (uint64_t)(size.buffers + 2 * gather));
  char name[128];
  model_name(dir, name, sizeof name);
  set_meta(m, &cfg, name, target_copy->name, dtype, max_seq, has_weights,
           size.weight_bytes, batch, all_logits);

  amk_stat_str(ctx->stats, "import", "model", name);
  amk_stat_int(ctx->stats, "import", "layers", cfg.n_layers);
  amk_stat_int(ctx->stats, "import", "tasks", m->n_tasks);
  amk_stat_int(ctx->stats, "import", "buffers", m->n_buffers);
  amk_stat_int(ctx->stats, "import", "weight bytes", size.weight_bytes);
  ok = true;
done:
  amk_safetensors_close(st);
  free(dir);
  return ok;
}
