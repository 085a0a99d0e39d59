/* Synthetic decode lowerings in the reference's shape (see amk/synth.h):
 * the same buffers, counters, task order, params and labels as
 * shared/conformance/toy2L_pos0.amk.json, for any size. */
#include "amk/synth.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "amk/builder.h"
#include "amk/diag.h"

enum { MAX_TILES = 64 }; /* the reference's cap on tiles per projection */

AmkSynthSpec amk_synth_toy_spec(void) {
  AmkSynthSpec s = {.layers = 2, .hidden = 64, .n_heads = 4, .n_kv_heads = 2,
                    .head_dim = 16, .intermediate = 128, .vocab = 256,
                    .n_tile = 32, .max_seq = 256, .pos = 0};
  return s;
}

static bool spec_ok(const AmkSynthSpec *s) {
  return s->layers >= 0 && s->hidden > 0 && s->n_heads > 0 &&
         s->n_kv_heads > 0 && s->head_dim > 0 && s->head_dim % 2 == 0 &&
         s->intermediate > 0 && s->vocab > 0 && s->n_tile > 0 &&
         s->max_seq > 0 && s->pos >= 0 && s->pos < s->max_seq &&
         s->n_heads % s->n_kv_heads == 0 &&
         (int64_t)s->n_heads * s->head_dim <= INT32_MAX;
}

/* The reference's tile width: as asked, but at most MAX_TILES tiles. */
static int32_t tile_width(const AmkSynthSpec *s, int32_t n) {
  int32_t w = s->n_tile < n ? s->n_tile : n;
  if ((n + w - 1) / w > MAX_TILES)
    w = (n + MAX_TILES - 1) / MAX_TILES;
  return w;
}

static int64_t tiles(const AmkSynthSpec *s, int32_t n) {
  int32_t w = tile_width(s, n);
  return (n + w - 1) / w;
}

int64_t amk_synth_task_count(const AmkSynthSpec *s) {
  if (!spec_ok(s))
    return 0;
  int32_t q = s->n_heads * s->head_dim, kv = s->n_kv_heads * s->head_dim;
  int64_t per_layer = 12 + tiles(s, q) + 2 * tiles(s, kv) + tiles(s, s->hidden) +
                      2 * tiles(s, s->intermediate) + tiles(s, s->hidden);
  return 2 + (int64_t)s->layers * per_layer + tiles(s, s->vocab);
}

typedef struct {
  AmkModule *m;
} Builder;

#define fmt(b, ...) amk_arena_printf(&(b)->m->arena, __VA_ARGS__)

#define DIMS(...) (const int64_t[]){__VA_ARGS__}
#define RANK(...) (uint32_t)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define ACT(b, name, ...)                                                      \
  amk_module_add_hbm_buffer((b)->m, name, AMK_KIND_ACTIVATION, AMK_DTYPE_F32,  \
                            RANK(__VA_ARGS__), DIMS(__VA_ARGS__), NULL)
#define WEIGHT(b, name, ...)                                                   \
  amk_module_add_hbm_buffer((b)->m, name, AMK_KIND_WEIGHT, AMK_DTYPE_F32,      \
                            RANK(__VA_ARGS__), DIMS(__VA_ARGS__), name)

static int32_t counter(Builder *b, const char *note) {
  AmkCounter *c = amk_module_add_counter(b->m);
  c->id = (int32_t)(b->m->n_counters - 1);
  c->note = note;
  return c->id;
}

typedef struct {
  int32_t counter, threshold;
} WaitSpec;

typedef struct {
  const char *key;
  AmkValue value;
} ParamSpec;

static void task(Builder *b, AmkOp op, const char *label, int32_t in0,
                 int32_t in1, int32_t in2, int32_t out, int32_t out_counter,
                 const WaitSpec *waits, uint32_t n_waits,
                 const ParamSpec *params, uint32_t n_params, int64_t est_bytes,
                 int64_t est_flops) {
  AmkArena *a = &b->m->arena;
  AmkTask *t = amk_module_add_task(b->m);
  t->id = (int32_t)(b->m->n_tasks - 1);
  t->op = op;
  int32_t ins[3] = {in0, in1, in2};
  t->n_inputs = in2 >= 0 ? 3 : 2;
  t->inputs = amk_arena_memdup(a, ins, sizeof(int32_t) * t->n_inputs);
  t->n_outputs = 1;
  t->outputs = amk_arena_memdup(a, &out, sizeof out);
  t->out_counter = out_counter;
  t->n_waits = n_waits;
  t->waits = amk_arena_alloc(a, sizeof(AmkWait) * (n_waits ? n_waits : 1));
  for (uint32_t i = 0; i < n_waits; i++) {
    t->waits[i].counter = waits[i].counter;
    t->waits[i].threshold = amk_value_int(waits[i].threshold);
  }
  t->n_params = n_params;
  t->params = amk_arena_alloc(a, sizeof(AmkParam) * (n_params ? n_params : 1));
  for (uint32_t i = 0; i < n_params; i++) {
    t->params[i].key = params[i].key;
    t->params[i].value = params[i].value;
  }
  t->label = label;
  t->est_bytes = est_bytes;
  t->est_flops = est_flops;
}

#define WAITS(...) (const WaitSpec[]){__VA_ARGS__}, \
  (uint32_t)(sizeof((const WaitSpec[]){__VA_ARGS__}) / sizeof(WaitSpec))
#define PARAMS(...) (const ParamSpec[]){__VA_ARGS__}, \
  (uint32_t)(sizeof((const ParamSpec[]){__VA_ARGS__}) / sizeof(ParamSpec))
#define NO_PARAMS NULL, 0

/* One projection: GEMV tiles of `x` ([1, K]) by `w` ([N, K]) into `out`,
 * all signalling one new counter; returns it and the tile count. */
static int32_t projection(Builder *b, const AmkSynthSpec *s, const char *label,
                          int32_t x, int32_t w, int32_t out, int32_t k,
                          int32_t n, WaitSpec after, int32_t *n_tiles) {
  int32_t width = tile_width(s, n);
  int32_t count = (n + width - 1) / width;
  int32_t c = counter(b, fmt(b, "%s (%d tiles)", label, count));
  for (int32_t i = 0; i < count; i++) {
    int32_t off = i * width, this = n - off < width ? n - off : width;
    task(b, AMK_OP_GEMV_TILE, fmt(b, "%s[t%d]", label, i), x, w, -1, out, c,
         &after, 1,
         PARAMS({"K", amk_value_int(k)}, {"N_tile", amk_value_int(this)},
                {"n_off", amk_value_int(off)}),
         (int64_t)k * 4 * this, 2 * (int64_t)k * this);
  }
  *n_tiles = count;
  return c;
}

typedef struct {
  int32_t zero_id, pos; /* the IO inputs: reshape id 0, decode position */
  int32_t head_dim;
} RopeInputs;

/* ROPE of layer `layer`'s q or k projection (`which`) as the reference lowers
 * it: a reshape of `x` into heads (an EMBED of row 0) into `heads`, then the
 * ROPE into `out`. Returns the ROPE's counter. */
static int32_t reshape_and_rope(Builder *b, int32_t layer, char which,
                                const RopeInputs *in, int32_t x,
                                WaitSpec after_x, int32_t heads, int32_t out) {
  const char *reshape = fmt(b, "L%d.rope_%c.reshape", layer, which);
  int32_t reshape_ctr = counter(b, reshape);
  task(b, AMK_OP_EMBED, reshape, in->zero_id, x, -1, heads,
       reshape_ctr, &after_x, 1,
       PARAMS({"hidden", amk_value_int(in->head_dim)}), 0, 0);
  const char *rope = fmt(b, "L%d.rope_%c", layer, which);
  int32_t rope_ctr = counter(b, rope);
  task(b, AMK_OP_ROPE, rope, heads, in->pos, -1, out, rope_ctr,
       WAITS({reshape_ctr, 1}),
       PARAMS({"head_dim", amk_value_int(in->head_dim)},
              {"theta", amk_value_float(10000.0)}),
       0, 0);
  return rope_ctr;
}

static AmkValue meta_object(Builder *b, const AmkSynthSpec *s) {
  static const char *const keys[] = {"model", "gpu", "regime", "pos",
                                     "kv_len", "dtype", "n_layers"};
  enum { N = sizeof keys / sizeof keys[0] };
  AmkValue v = {.kind = AMK_VALUE_OBJECT, .count = N};
  v.as.members = amk_arena_alloc(&b->m->arena, sizeof(AmkMember) * N);
  for (int i = 0; i < N; i++)
    v.as.members[i].key = keys[i];
  AmkValue str = {.kind = AMK_VALUE_STRING};
  str.as.s = "synth-llama";
  v.as.members[0].value = str;
  str.as.s = "h100";
  v.as.members[1].value = str;
  str.as.s = "decode";
  v.as.members[2].value = str;
  v.as.members[3].value = amk_value_int(s->pos);
  v.as.members[4].value = amk_value_int(s->pos + 1);
  str.as.s = "F32";
  v.as.members[5].value = str;
  v.as.members[6].value = amk_value_int(s->layers);
  return v;
}

AmkModule *amk_synth_llama(const AmkSynthSpec *s) {
  if (!spec_ok(s) || amk_synth_task_count(s) > INT32_MAX / 2)
    return NULL;
  Builder bld = {amk_module_new()};
  Builder *b = &bld;
  AmkModule *m = b->m;
  m->meta = meta_object(b, s);
  const AmkTarget *h100 = amk_builtin_target("h100");
  if (h100)
    m->target = amk_arena_memdup(&m->arena, h100, sizeof *h100);

  int32_t H = s->hidden, nh = s->n_heads, nkv = s->n_kv_heads, hd = s->head_dim;
  int32_t I = s->intermediate, V = s->vocab, Q = nh * hd, KV = nkv * hd;
  int32_t tiles_q, tiles_k, tiles_v, tiles_o, tiles_g, tiles_u, tiles_d, tiles_lm;

#define IO_INPUT(name)                                                         \
  amk_module_add_hbm_buffer(m, name, AMK_KIND_IO_INPUT, AMK_DTYPE_I32, 1,      \
                            DIMS(1), NULL)
  int32_t token = IO_INPUT("token_id");
  int32_t pos = IO_INPUT("pos");
  int32_t zero_id = IO_INPUT("reshape_id0");
#undef IO_INPUT
  int32_t h = ACT(b, "h0", 1, H);
  int32_t embed_w = WEIGHT(b, "embed.weight", V, H);
  int32_t h_ctr = counter(b, "embed");
  task(b, AMK_OP_EMBED, "embed", token, embed_w, -1, h, h_ctr, NULL, 0,
       PARAMS({"hidden", amk_value_int(H)}), (int64_t)H * 4, 0);

  for (int32_t l = 0; l < s->layers; l++) {
    int32_t an = ACT(b, fmt(b, "L%d.an", l), 1, H);
    int32_t in_norm = WEIGHT(b, fmt(b, "layers.%d.input_norm", l), H);
    int32_t q = ACT(b, fmt(b, "L%d.q", l), 1, Q);
    int32_t q_w = WEIGHT(b, fmt(b, "layers.%d.attn.q_proj.weight", l), Q, H);
    int32_t k = ACT(b, fmt(b, "L%d.k", l), 1, KV);
    int32_t k_w = WEIGHT(b, fmt(b, "layers.%d.attn.k_proj.weight", l), KV, H);
    int32_t v = ACT(b, fmt(b, "L%d.v", l), 1, KV);
    int32_t v_w = WEIGHT(b, fmt(b, "layers.%d.attn.v_proj.weight", l), KV, H);
    int32_t qr_hs = ACT(b, fmt(b, "L%d.qr.hs", l), nh, hd);
    int32_t qr = ACT(b, fmt(b, "L%d.qr", l), nh, hd);
    int32_t kr_hs = ACT(b, fmt(b, "L%d.kr.hs", l), 1, nkv, hd);
    int32_t kr = ACT(b, fmt(b, "L%d.kr", l), 1, nkv, hd);
    int32_t kcache = amk_module_add_hbm_buffer(
        m, fmt(b, "L%d.kcache", l), AMK_KIND_KV_CACHE, AMK_DTYPE_F32, 3,
        DIMS(s->max_seq, nkv, hd), NULL);
    int32_t vcache = amk_module_add_hbm_buffer(
        m, fmt(b, "L%d.vcache", l), AMK_KIND_KV_CACHE, AMK_DTYPE_F32, 3,
        DIMS(s->max_seq, nkv, hd), NULL);
    int32_t attn = ACT(b, fmt(b, "L%d.attn", l), 1, Q);
    int32_t o = ACT(b, fmt(b, "L%d.o", l), 1, H);
    int32_t o_w = WEIGHT(b, fmt(b, "layers.%d.attn.o_proj.weight", l), H, Q);
    int32_t h_attn = ACT(b, fmt(b, "L%d.h_attn", l), 1, H);
    int32_t mn = ACT(b, fmt(b, "L%d.mn", l), 1, H);
    int32_t post_norm = WEIGHT(b, fmt(b, "layers.%d.post_norm", l), H);
    int32_t gate = ACT(b, fmt(b, "L%d.gate", l), 1, I);
    int32_t gate_w = WEIGHT(b, fmt(b, "layers.%d.mlp.gate_proj.weight", l), I, H);
    int32_t up = ACT(b, fmt(b, "L%d.up", l), 1, I);
    int32_t up_w = WEIGHT(b, fmt(b, "layers.%d.mlp.up_proj.weight", l), I, H);
    int32_t act = ACT(b, fmt(b, "L%d.act", l), 1, I);
    int32_t d = ACT(b, fmt(b, "L%d.d", l), 1, H);
    int32_t down_w = WEIGHT(b, fmt(b, "layers.%d.mlp.down_proj.weight", l), H, I);
    int32_t h_mlp = ACT(b, fmt(b, "L%d.h_mlp", l), 1, H);

    int32_t an_ctr = counter(b, fmt(b, "L%d.input_norm", l));
    task(b, AMK_OP_RMSNORM, fmt(b, "L%d.input_norm", l), h, in_norm, -1, an,
         an_ctr, WAITS({h_ctr, 1}),
         PARAMS({"eps", amk_value_float(1e-6)}, {"hidden", amk_value_int(H)}),
         (int64_t)H * 4, 0);
    WaitSpec after_an = {an_ctr, 1};
    int32_t q_ctr = projection(b, s, fmt(b, "L%d.q_proj", l), an, q_w, q, H, Q, after_an, &tiles_q);
    int32_t k_ctr = projection(b, s, fmt(b, "L%d.k_proj", l), an, k_w, k, H, KV, after_an, &tiles_k);
    int32_t v_ctr = projection(b, s, fmt(b, "L%d.v_proj", l), an, v_w, v, H, KV, after_an, &tiles_v);
    RopeInputs rope_in = {zero_id, pos, hd};
    int32_t qr_ctr = reshape_and_rope(b, l, 'q', &rope_in, q,
                                      (WaitSpec){q_ctr, tiles_q}, qr_hs, qr);
    int32_t kr_ctr = reshape_and_rope(b, l, 'k', &rope_in, k,
                                      (WaitSpec){k_ctr, tiles_k}, kr_hs, kr);
    int32_t ka_ctr = counter(b, fmt(b, "L%d.k_append", l));
    task(b, AMK_OP_KV_APPEND, fmt(b, "L%d.k_append", l), kr, kcache, -1,
         kcache, ka_ctr, WAITS({kr_ctr, 1}),
         PARAMS({"pos", amk_value_int(s->pos)}), 0, 0);
    int32_t va_ctr = counter(b, fmt(b, "L%d.v_append", l));
    task(b, AMK_OP_KV_APPEND, fmt(b, "L%d.v_append", l), v, vcache, -1,
         vcache, va_ctr, WAITS({v_ctr, tiles_v}),
         PARAMS({"pos", amk_value_int(s->pos)}), 0, 0);
    int32_t attn_ctr = counter(b, fmt(b, "L%d.attention", l));
    task(b, AMK_OP_ATTENTION_TILE, fmt(b, "L%d.attention", l), qr, kcache,
         vcache, attn, attn_ctr, WAITS({qr_ctr, 1}, {ka_ctr, 1}, {va_ctr, 1}),
         PARAMS({"head_dim", amk_value_int(hd)}, {"kv_start", amk_value_int(0)},
                {"kv_len", amk_value_int(s->pos + 1)},
                {"scale", amk_value_float(1.0 / sqrt((double)hd))},
                {"n_heads", amk_value_int(nh)},
                {"n_kv_heads", amk_value_int(nkv)}),
         0, 0);
    int32_t o_ctr = projection(b, s, fmt(b, "L%d.o_proj", l), attn, o_w, o, Q,
                               H, (WaitSpec){attn_ctr, 1}, &tiles_o);
    int32_t res1_ctr = counter(b, fmt(b, "L%d.attn_residual", l));
    task(b, AMK_OP_ADD, fmt(b, "L%d.attn_residual", l), h, o, -1, h_attn,
         res1_ctr, WAITS({h_ctr, 1}, {o_ctr, tiles_o}), NO_PARAMS, 0, 0);
    int32_t mn_ctr = counter(b, fmt(b, "L%d.post_norm", l));
    task(b, AMK_OP_RMSNORM, fmt(b, "L%d.post_norm", l), h_attn, post_norm, -1,
         mn, mn_ctr, WAITS({res1_ctr, 1}),
         PARAMS({"eps", amk_value_float(1e-6)}, {"hidden", amk_value_int(H)}),
         (int64_t)H * 4, 0);
    WaitSpec after_mn = {mn_ctr, 1};
    int32_t g_ctr = projection(b, s, fmt(b, "L%d.gate_proj", l), mn, gate_w,
                               gate, H, I, after_mn, &tiles_g);
    int32_t u_ctr = projection(b, s, fmt(b, "L%d.up_proj", l), mn, up_w, up, H,
                               I, after_mn, &tiles_u);
    int32_t act_ctr = counter(b, fmt(b, "L%d.swiglu", l));
    task(b, AMK_OP_SILU_MUL, fmt(b, "L%d.swiglu", l), gate, up, -1, act,
         act_ctr, WAITS({g_ctr, tiles_g}, {u_ctr, tiles_u}), NO_PARAMS, 0, 0);
    int32_t d_ctr = projection(b, s, fmt(b, "L%d.down_proj", l), act, down_w, d,
                               I, H, (WaitSpec){act_ctr, 1}, &tiles_d);
    int32_t res2_ctr = counter(b, fmt(b, "L%d.mlp_residual", l));
    task(b, AMK_OP_ADD, fmt(b, "L%d.mlp_residual", l), h_attn, d, -1, h_mlp,
         res2_ctr, WAITS({res1_ctr, 1}, {d_ctr, tiles_d}), NO_PARAMS, 0, 0);
    h = h_mlp;
    h_ctr = res2_ctr;
  }

  int32_t hf = ACT(b, "hf", 1, H);
  int32_t final_norm = WEIGHT(b, "final_norm", H);
  int32_t logits = amk_module_add_hbm_buffer(
      m, "logits", AMK_KIND_IO_OUTPUT, AMK_DTYPE_F32, 2, DIMS(1, V), NULL);
  int32_t lm_w = WEIGHT(b, "lm_head.weight", V, H);
  int32_t hf_ctr = counter(b, "final_norm");
  task(b, AMK_OP_RMSNORM, "final_norm", h, final_norm, -1, hf, hf_ctr,
       WAITS({h_ctr, 1}),
       PARAMS({"eps", amk_value_float(1e-6)}, {"hidden", amk_value_int(H)}),
       (int64_t)H * 4, 0);
  projection(b, s, "lm_head", hf, lm_w, logits, H, V, (WaitSpec){hf_ctr, 1},
             &tiles_lm);
  return m;
}
