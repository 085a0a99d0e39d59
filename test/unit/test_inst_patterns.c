/* Fused GEMV patterns (flags >> 16, docs/Fusion.md): every pattern gives
 * bit for bit what its unfused steps give when run one by one through
 * amk_inst_execute with intermediates of the program dtype (f32, bf16), and
 * bad shapes, heads, positions and params are errors that write nothing. */
#include <stdlib.h>

#include "amk/pipeline.h"
#include "amk/plan.h"
#include "amk/rope.h"
#include "amk/vm.h"
#include "amk/weights.h"
#include "test_inst_util.h"

/* ---- tensors ------------------------------------------------------------- */

typedef struct {
  AmkTensorView v;
} T;

static uint32_t next_random(uint32_t *state) {
  *state = *state * 1664525u + 1013904223u;
  return *state >> 8;
}

/* A tensor of dims (rank 1-3) with uniform values in [-scale, scale]
 * (0 for scale 0), stored in dtype. */
static T make(AmkDType dtype, uint32_t rank, const int64_t *dims, float scale,
              uint32_t *seed) {
  T t;
  t.v = amk_tensor_view(NULL, dtype, rank, dims);
  t.v.data = calloc((size_t)amk_dtype_nbytes(dtype, t.v.numel) + 1, 1);
  for (int64_t i = 0; i < t.v.numel && scale != 0.0f; i++) {
    float x = scale * ((float)(next_random(seed) % 2001) / 1000.0f - 1.0f);
    if (dtype == AMK_DTYPE_F32) {
      ((float *)t.v.data)[i] = x;
    } else if (dtype == AMK_DTYPE_BF16) {
      ((uint16_t *)t.v.data)[i] = amk_f32_to_bf16(x);
    } else if (dtype == AMK_DTYPE_I32) {
      ((int32_t *)t.v.data)[i] = (int32_t)x;
    }
  }
  return t;
}

static T mat(AmkDType dtype, int64_t rows, int64_t cols, float scale,
             uint32_t *seed) {
  int64_t dims[2] = {rows, cols};
  return make(dtype, 2, dims, scale, seed);
}

static T copy_of(const T *src) {
  T t = *src;
  size_t n = (size_t)amk_dtype_nbytes(src->v.dtype, src->v.numel);
  t.v.data = malloc(n + 1);
  memcpy(t.v.data, src->v.data, n);
  return t;
}

static size_t nbytes(const T *t) {
  return (size_t)amk_dtype_nbytes(t->v.dtype, t->v.numel);
}

static int same(const T *a, const T *b) {
  return nbytes(a) == nbytes(b) && same_bits(a->v.data, b->v.data, nbytes(a));
}

/* `count` elements of t from `first`, as a rank-1 view. */
static AmkTensorView part(const T *t, int64_t first, int64_t count) {
  int64_t dims[1] = {count};
  return amk_tensor_view((char *)t->v.data + amk_dtype_nbytes(t->v.dtype, first),
                         t->v.dtype, 1, dims);
}

static void drop(T *t) {
  free(t->v.data);
  t->v.data = NULL;
}

static void drop_all(T *const *tensors, size_t n) {
  for (size_t i = 0; i < n; i++)
    drop(tensors[i]);
}

/* DROP_ALL(&a, &b, ...) frees every tensor named. */
#define DROP_ALL(...)                                                          \
  drop_all((T *const[]){__VA_ARGS__},                                          \
           sizeof((T *const[]){__VA_ARGS__}) / sizeof(T *))

static int exec(AmkOp op, const AmkInstParams *p, AmkTensorView *in,
                uint32_t n_in, T *out, const AmkInstExtra *extra, char *err,
                size_t err_len) {
  return amk_inst_execute(op, p, in, n_in, &out->v, 1, extra, err, err_len);
}

static AmkInstParams gemv_params(int64_t pattern, int64_t k, int64_t n_off,
                                 int64_t n_tile) {
  AmkInstParams p = {0};
  set_int(&p, "K", k);
  set_int(&p, "n_off", n_off);
  set_int(&p, "N_tile", n_tile);
  set_int(&p, "flags", pattern << AMK_PATTERN_SHIFT);
  return p;
}

/* Tiles of 8 columns over [0, n). */
#define TILE 8

/* ---- norm ----------------------------------------------------------------- */

static void test_norm(UnitCounts *c, AmkDType dt) {
  uint32_t seed = 11;
  char err[256];
  const int64_t H = 24, N = 20;
  T x = mat(dt, 1, H, 2.0f, &seed), w = mat(dt, N, H, 0.5f, &seed);
  T g = mat(dt, 1, H, 1.0f, &seed);
  T sentinel = mat(dt, 1, N, 3.0f, &seed);
  /* Unfused: RMSNORM into an activation of dt, then the GEMV tiles. */
  T xn = mat(dt, 1, H, 0, &seed), want = copy_of(&sentinel), got = copy_of(&sentinel);
  AmkInstParams np = {0};
  set_int(&np, "hidden", H);
  set_float(&np, "eps", 1e-5);
  AmkTensorView norm_in[2] = {x.v, g.v};
  CHECK(c, exec(AMK_OP_RMSNORM, &np, norm_in, 2, &xn, NULL, err, sizeof err) == 0);
  for (int64_t off = 0; off < N; off += TILE) {
    int64_t n = N - off < TILE ? N - off : TILE;
    AmkInstParams plain = gemv_params(0, H, off, n);
    AmkTensorView gin[2] = {xn.v, w.v};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &plain, gin, 2, &want, NULL, err, sizeof err) == 0);
    AmkInstParams fused = gemv_params(AMK_PATTERN_NORM, H, off, n);
    set_float(&fused, "eps", 1e-5);
    AmkTensorView fin[3] = {x.v, w.v, g.v};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &fused, fin, 3, &got, NULL, err, sizeof err) == 0);
    if (off == 0) /* one tile writes only its own columns */
      CHECK(c, same_bits((char *)got.v.data + amk_dtype_nbytes(dt, TILE),
                         (char *)sentinel.v.data + amk_dtype_nbytes(dt, TILE),
                         (size_t)amk_dtype_nbytes(dt, N - TILE)));
  }
  CHECK(c, same(&want, &got));

  /* Stacked gate|up: output [2, N], weight [2N, H]; row 0 from the first N
   * weight rows (gate), row 1 from the next N (up). */
  T w2 = mat(dt, 2 * N, H, 0.5f, &seed);
  T gate = mat(dt, 1, N, 0, &seed), up = mat(dt, 1, N, 0, &seed);
  T gu = mat(dt, 2, N, 0, &seed);
  AmkTensorView wg = amk_tensor_view(w2.v.data, dt, 2, (int64_t[]){N, H});
  AmkTensorView wu = amk_tensor_view(
      (char *)w2.v.data + amk_dtype_nbytes(dt, N * H), dt, 2, (int64_t[]){N, H});
  for (int64_t off = 0; off < N; off += TILE) {
    int64_t n = N - off < TILE ? N - off : TILE;
    AmkInstParams plain = gemv_params(0, H, off, n);
    AmkTensorView gin[2] = {xn.v, wg}, uin[2] = {xn.v, wu};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &plain, gin, 2, &gate, NULL, err, sizeof err) == 0);
    CHECK(c, exec(AMK_OP_GEMV_TILE, &plain, uin, 2, &up, NULL, err, sizeof err) == 0);
    AmkInstParams fused = gemv_params(AMK_PATTERN_NORM, H, off, n);
    set_float(&fused, "eps", 1e-5);
    AmkTensorView fin[3] = {x.v, w2.v, g.v};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &fused, fin, 3, &gu, NULL, err, sizeof err) == 0);
  }
  CHECK(c, same_bits(gu.v.data, gate.v.data, nbytes(&gate)));
  CHECK(c, same_bits((char *)gu.v.data + nbytes(&gate), up.v.data, nbytes(&up)));
  /* A plain stacked tile does the same from the normed vector. */
  T gu_plain = mat(dt, 2, N, 0, &seed);
  AmkInstParams all = gemv_params(0, H, 0, N);
  AmkTensorView pin[2] = {xn.v, w2.v};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &all, pin, 2, &gu_plain, NULL, err, sizeof err) == 0);
  CHECK(c, same(&gu_plain, &gu));

  /* Errors. */
  AmkInstParams fused = gemv_params(AMK_PATTERN_NORM, H, 0, TILE);
  AmkTensorView two[2] = {x.v, w.v};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &fused, two, 2, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_ARITY);
  CHECK_STR(c, err, "gemv_tile: norm takes 3 inputs (x, W, g), got 2");
  AmkTensorView fin[3] = {x.v, w.v, g.v};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &fused, fin, 3, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_PARAM);
  CHECK_STR(c, err, "gemv_tile: missing param 'eps'");
  set_float(&fused, "eps", 1e-5);
  AmkTensorView short_g[3] = {x.v, w.v, part(&g, 0, H - 1)};
  T before = copy_of(&got);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &fused, short_g, 3, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_SHAPE);
  CHECK_STR(c, err, "gemv_tile: norm: rmsnorm: input 1 has 23 elements, want hidden = 24");
  CHECK(c, same(&before, &got));
  /* Quantized, the norm weight follows the scales: 3 inputs are too few. */
  set_int(&fused, "qdtype", 6);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &fused, fin, 3, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_ARITY);
  CHECK_STR(c, err, "gemv_tile: norm takes 4 inputs (x, qW, scales, g), got 3");
  /* A stacked output needs exactly R * width weight rows. */
  T gu3 = mat(dt, 3, N, 0, &seed);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &all, pin, 2, &gu3, NULL, err, sizeof err) ==
               AMK_INST_ERR_SHAPE);
  DROP_ALL(&x, &w, &g, &sentinel, &xn, &want, &got, &w2, &gate, &up, &gu,
           &gu_plain, &before, &gu3);
}

/* ---- residual, silu, silu_residual ------------------------------------------- */

/* x [1, K] (or gu [2, K] for silu) through the unfused steps and the
 * pattern, every tile of N columns. */
static void test_residual_silu(UnitCounts *c, AmkDType dt, int64_t pattern) {
  uint32_t seed = 23 + (uint32_t)pattern;
  char err[256];
  const int64_t K = 16, N = 20;
  bool silu = pattern == AMK_PATTERN_SILU || pattern == AMK_PATTERN_SILU_RESIDUAL;
  bool residual = pattern != AMK_PATTERN_SILU;
  T x = mat(dt, silu ? 2 : 1, K, 2.0f, &seed), w = mat(dt, N, K, 0.5f, &seed);
  T r = mat(dt, 1, N, 4.0f, &seed);
  T act = mat(dt, 1, K, 0, &seed), y = mat(dt, 1, N, 0, &seed);
  T want = mat(dt, 1, N, 0, &seed), got = mat(dt, 1, N, 0, &seed);
  /* Unfused: silu_mul (into an activation of dt), the GEMV, the add. */
  const T *gemv_x = &x;
  if (silu) {
    AmkTensorView halves[2] = {part(&x, 0, K), part(&x, K, K)};
    AmkInstParams none = {0};
    CHECK(c, exec(AMK_OP_SILU_MUL, &none, halves, 2, &act, NULL, err, sizeof err) == 0);
    gemv_x = &act;
  }
  AmkInstParams plain = gemv_params(0, K, 0, N);
  AmkTensorView gin[2] = {gemv_x->v, w.v};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &plain, gin, 2, residual ? &y : &want, NULL, err,
                sizeof err) == 0);
  if (residual) {
    AmkTensorView add_in[2] = {r.v, y.v};
    AmkInstParams none = {0};
    CHECK(c, exec(AMK_OP_ADD, &none, add_in, 2, &want, NULL, err, sizeof err) == 0);
  }
  for (int64_t off = 0; off < N; off += TILE) {
    int64_t n = N - off < TILE ? N - off : TILE;
    AmkInstParams fused = gemv_params(pattern, K, off, n);
    AmkTensorView fin[3] = {x.v, w.v, r.v};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &fused, fin, residual ? 3 : 2, &got, NULL, err,
                  sizeof err) == 0);
  }
  CHECK(c, same(&want, &got));

  /* Errors: a residual of the wrong size; gu that is not [2, K]. */
  AmkInstParams fused = gemv_params(pattern, K, 0, TILE);
  T before = copy_of(&got);
  if (residual) {
    AmkTensorView bad[3] = {x.v, w.v, part(&r, 0, N - 1)};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &fused, bad, 3, &got, NULL, err, sizeof err) ==
                 AMK_INST_ERR_SHAPE);
    CHECK(c, strstr(err, "add: input 1 has 19 elements but output has 20") != NULL);
  }
  if (silu) {
    AmkTensorView bad[3] = {part(&x, 0, K), w.v, r.v};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &fused, bad, residual ? 3 : 2, &got, NULL, err,
                  sizeof err) == AMK_INST_ERR_SHAPE);
    CHECK(c, strstr(err, "gu has 16 elements of width 16, want [2, K] with K = 16") != NULL);
  }
  CHECK(c, same(&before, &got));
  DROP_ALL(&x, &w, &r, &act, &y, &want, &got, &before);
}

/* ---- weight-only quantized norm, residual, silu, silu_residual ----------------- */

/* Random quantized weights [rows, K]: int8 bytes in [-127, 127], or int4
 * nibbles (any byte); f16 scales [rows, ceil(K/group)] in [2^-6, 2^-3]. */
static void make_quantized(int qdtype, int64_t rows, int64_t k, int64_t group,
                           uint32_t *seed, T *q, T *scales) {
  int64_t q_dims[2] = {rows, k}, s_dims[2] = {rows, (k + group - 1) / group};
  AmkDType qt = qdtype == AMK_QDTYPE_INT8 ? AMK_DTYPE_I8 : AMK_DTYPE_I4;
  q->v = amk_tensor_view(NULL, qt, 2, q_dims);
  size_t q_bytes = (size_t)amk_dtype_nbytes(qt, q->v.numel);
  q->v.data = calloc(q_bytes + 1, 1);
  for (size_t i = 0; i < q_bytes; i++) {
    uint32_t r = next_random(seed);
    ((uint8_t *)q->v.data)[i] = qdtype == AMK_QDTYPE_INT8 ? (uint8_t)(int8_t)(r % 255 - 127)
                                                           : (uint8_t)r;
  }
  scales->v = amk_tensor_view(NULL, AMK_DTYPE_F16, 2, s_dims);
  scales->v.data = calloc((size_t)scales->v.numel * 2 + 1, 1);
  for (int64_t i = 0; i < scales->v.numel; i++) /* exponents -6..-3 */
    ((uint16_t *)scales->v.data)[i] =
        (uint16_t)(((9 + next_random(seed) % 4) << 10) | (next_random(seed) & 0x3FF));
}

/* A quantized tile of each GEMV-shaped pattern, [x, qW, scales(, g or r)],
 * gives the bits of DEQUANT (to f32) followed by the fp pattern, and of its
 * unfused quantized steps (norm / silu_mul, the plain quantized tile, add). */
static void test_quantized(UnitCounts *c, AmkDType dt, int64_t pattern, int qdtype) {
  uint32_t seed = 31 + (uint32_t)pattern * 7 + (uint32_t)qdtype;
  char err[256];
  const int64_t K = 24, N = 20, GROUP = 16; /* K = 24: a full group and a short one */
  bool silu = pattern == AMK_PATTERN_SILU || pattern == AMK_PATTERN_SILU_RESIDUAL;
  bool has_operand = pattern != AMK_PATTERN_SILU;
  T x = mat(dt, silu ? 2 : 1, K, 2.0f, &seed), q, scales;
  make_quantized(qdtype, N, K, GROUP, &seed, &q, &scales);
  T operand = pattern == AMK_PATTERN_NORM ? mat(dt, 1, K, 1.0f, &seed)
                                          : mat(dt, 1, N, 4.0f, &seed);
  /* DEQUANT, then the fp pattern. */
  T w = mat(AMK_DTYPE_F32, N, K, 0, &seed);
  AmkInstParams dq = {0};
  set_int(&dq, "qdtype", qdtype);
  set_int(&dq, "group", GROUP);
  AmkTensorView dq_in[2] = {q.v, scales.v};
  CHECK(c, exec(AMK_OP_DEQUANT, &dq, dq_in, 2, &w, NULL, err, sizeof err) == 0);
  T want = mat(dt, 1, N, 0, &seed), got = mat(dt, 1, N, 0, &seed);
  T steps = mat(dt, 1, N, 0, &seed);
  for (int64_t off = 0; off < N; off += TILE) {
    int64_t n = N - off < TILE ? N - off : TILE;
    AmkInstParams fp = gemv_params(pattern, K, off, n);
    set_float(&fp, "eps", 1e-5);
    AmkTensorView fp_in[3] = {x.v, w.v, operand.v};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &fp, fp_in, has_operand ? 3 : 2, &want, NULL, err,
                  sizeof err) == 0);
    AmkInstParams qp = fp;
    set_int(&qp, "qdtype", qdtype);
    set_int(&qp, "group", GROUP);
    AmkTensorView q_in[4] = {x.v, q.v, scales.v, operand.v};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &qp, q_in, has_operand ? 4 : 3, &got, NULL, err,
                  sizeof err) == 0);
  }
  CHECK(c, same(&want, &got));
  /* The unfused quantized program: the prologue into an activation of dt,
   * the plain quantized tile, the add. */
  T act = mat(dt, 1, K, 0, &seed), y = mat(dt, 1, N, 0, &seed);
  AmkInstParams none = {0};
  if (pattern == AMK_PATTERN_NORM) {
    AmkInstParams np = {0};
    set_int(&np, "hidden", K);
    set_float(&np, "eps", 1e-5);
    AmkTensorView norm_in[2] = {x.v, operand.v};
    CHECK(c, exec(AMK_OP_RMSNORM, &np, norm_in, 2, &act, NULL, err, sizeof err) == 0);
  } else if (silu) {
    AmkTensorView halves[2] = {part(&x, 0, K), part(&x, K, K)};
    CHECK(c, exec(AMK_OP_SILU_MUL, &none, halves, 2, &act, NULL, err, sizeof err) == 0);
  }
  AmkInstParams plain = gemv_params(AMK_PATTERN_PLAIN, K, 0, N);
  set_int(&plain, "qdtype", qdtype);
  set_int(&plain, "group", GROUP);
  bool residual = pattern == AMK_PATTERN_RESIDUAL || pattern == AMK_PATTERN_SILU_RESIDUAL;
  AmkTensorView p_in[3] = {pattern == AMK_PATTERN_RESIDUAL ? x.v : act.v, q.v, scales.v};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &plain, p_in, 3, residual ? &y : &steps, NULL, err,
                sizeof err) == 0);
  if (residual) {
    AmkTensorView add_in[2] = {y.v, operand.v};
    CHECK(c, exec(AMK_OP_ADD, &none, add_in, 2, &steps, NULL, err, sizeof err) == 0);
  }
  CHECK(c, same(&steps, &got));

  /* Errors, writing nothing: the operand missing, or before the scales. */
  T before = copy_of(&got);
  AmkInstParams qp = gemv_params(pattern, K, 0, TILE);
  set_float(&qp, "eps", 1e-5);
  set_int(&qp, "qdtype", qdtype);
  set_int(&qp, "group", GROUP);
  AmkTensorView short_in[2] = {x.v, q.v};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &qp, short_in, 2, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_ARITY);
  CHECK(c, strstr(err, has_operand ? "takes 4 inputs" : "takes 3 inputs") != NULL);
  CHECK(c, strstr(err, "qW, scales") != NULL);
  if (has_operand) {
    AmkTensorView swapped[4] = {x.v, q.v, operand.v, scales.v};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &qp, swapped, 4, &got, NULL, err, sizeof err) != 0);
  }
  CHECK(c, same(&before, &got));
  DROP_ALL(&x, &q, &scales, &operand, &w, &want, &got, &steps, &act, &y, &before);
}

/* ---- rope_kv, attention, attention_rope ---------------------------------------- */

enum { HD = 8, NH = 4, NKV = 2, SEQ = 6 };
#define QW (NH * HD)
#define KVW (NKV * HD)

static AmkInstParams head_params(int64_t pattern, int64_t n_off, int64_t n_tile) {
  AmkInstParams p = gemv_params(pattern, pattern == AMK_PATTERN_ATTENTION ? QW : QW + 2 * KVW,
                                n_off, n_tile);
  set_int(&p, "head_dim", HD);
  set_int(&p, "n_heads", NH);
  set_int(&p, "n_kv_heads", NKV);
  return p;
}

/* Split the combined cache [SEQ, 2, KVW] into new k and v caches
 * [SEQ, NKV, HD]. */
static void split_cache(const T *cache, T *k, T *v) {
  int64_t dims[3] = {SEQ, NKV, HD};
  *k = make(cache->v.dtype, 3, dims, 0, NULL); /* zeros: no seed used */
  *v = make(cache->v.dtype, 3, dims, 0, NULL);
  size_t row = (size_t)amk_dtype_nbytes(cache->v.dtype, KVW);
  for (int64_t s = 0; s < SEQ; s++) {
    memcpy((char *)k->v.data + s * row, (char *)cache->v.data + 2 * s * row, row);
    memcpy((char *)v->v.data + s * row, (char *)cache->v.data + (2 * s + 1) * row, row);
  }
}

/* A random qkv row [1, QW + 2 * KVW] and combined cache [SEQ, 2, KVW]. */
static void make_qkv_and_cache(AmkDType dt, float cache_scale, uint32_t *seed,
                               T *qkv, T *cache) {
  int64_t dims[3] = {SEQ, 2, KVW};
  *qkv = mat(dt, 1, QW + 2 * KVW, 2.0f, seed);
  *cache = make(dt, 3, dims, cache_scale, seed);
}

/* The default (theta 10000) inverse frequencies as the unfused ROPE
 * computes them. */
static void default_inv_freq(float freq[HD / 2]) {
  for (int i = 0; i < HD / 2; i++)
    freq[i] = 1.0f / powf(10000.0f, (float)i / (float)(HD / 2));
}

static void test_rope_kv(UnitCounts *c, AmkDType dt, bool llama3) {
  uint32_t seed = 41;
  char err[256];
  const int64_t pos = 3;
  T qkv, cache, kc, vc;
  make_qkv_and_cache(dt, 1.0f, &seed, &qkv, &cache);
  split_cache(&cache, &kc, &vc);
  /* The inverse frequencies as the unfused ROPE computes them. */
  float freq[HD / 2];
  if (llama3) {
    AmkRopeSpec spec = {.kind = AMK_ROPE_LLAMA3, .head_dim = HD, .theta = 500000.0,
                        .factor = 8.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0,
                        .original_max_pos = 16.0};
    double d[HD / 2];
    amk_rope_inv_freq(&spec, d, HD / 2);
    for (int i = 0; i < HD / 2; i++)
      freq[i] = (float)d[i];
  } else {
    default_inv_freq(freq);
  }
  AmkTensorView inv_freq = view1(freq, AMK_DTYPE_F32, HD / 2);
  int32_t pos_value = (int32_t)pos;
  AmkTensorView positions = view1(&pos_value, AMK_DTYPE_I32, 1);

  /* Unfused: ROPE(k) into kr of dt, KV_APPEND kr and v at pos. */
  T kr = mat(dt, 1, KVW, 0, &seed);
  AmkInstParams rp = {0};
  set_int(&rp, "head_dim", HD);
  set_float(&rp, "theta", 10000.0);
  AmkInstExtra rope_extra = {.rope_inv_freq = llama3 ? freq : NULL};
  AmkTensorView rin[2] = {part(&qkv, QW, KVW), positions};
  CHECK(c, exec(AMK_OP_ROPE, &rp, rin, 2, &kr, &rope_extra, err, sizeof err) == 0);
  AmkInstParams ap = {0};
  set_int(&ap, "pos", pos);
  AmkTensorView kin[2] = {kr.v, kc.v}, vin[2] = {part(&qkv, QW + KVW, KVW), vc.v};
  CHECK(c, exec(AMK_OP_KV_APPEND, &ap, kin, 2, &kc, NULL, err, sizeof err) == 0);
  CHECK(c, exec(AMK_OP_KV_APPEND, &ap, vin, 2, &vc, NULL, err, sizeof err) == 0);

  /* Fused: one task per KV head, the position from the caller. */
  T got = copy_of(&cache);
  AmkInstExtra at = {.has_position = true, .position = pos};
  for (int64_t h = 0; h < NKV; h++) {
    AmkInstParams p = head_params(AMK_PATTERN_ROPE_KV, h, 1);
    set_int(&p, "pos", 0); /* the caller's position wins */
    AmkTensorView in[3] = {qkv.v, inv_freq, view1(&(int32_t){0}, AMK_DTYPE_I32, 1)};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &p, in, 3, &got, &at, err, sizeof err) == 0);
  }
  {
    /* The combined cache's planes are the unfused caches; row pos alone
     * changed. */
    size_t row = (size_t)amk_dtype_nbytes(dt, KVW);
    T k2, v2;
    split_cache(&got, &k2, &v2);
    CHECK(c, same(&k2, &kc));
    CHECK(c, same(&v2, &vc));
    CHECK(c, same_bits(got.v.data, cache.v.data, 2 * row * (size_t)pos));
    CHECK(c, !same_bits(got.v.data, cache.v.data, 2 * row * (size_t)(pos + 1)));
    drop(&k2);
    drop(&v2);
  }
  /* Without a caller position: the pos param, else the positions input. */
  T got2 = copy_of(&cache), got3 = copy_of(&cache);
  for (int64_t h = 0; h < NKV; h++) {
    AmkInstParams p = head_params(AMK_PATTERN_ROPE_KV, h, 1);
    AmkTensorView in[3] = {qkv.v, inv_freq, positions};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &p, in, 3, &got3, NULL, err, sizeof err) == 0);
    set_int(&p, "pos", pos);
    AmkTensorView in0[3] = {qkv.v, inv_freq, view1(&(int32_t){0}, AMK_DTYPE_I32, 1)};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &p, in0, 3, &got2, NULL, err, sizeof err) == 0);
  }
  CHECK(c, same(&got, &got2));
  CHECK(c, same(&got, &got3));

  /* Errors write nothing. */
  T before = copy_of(&got);
  AmkInstParams p = head_params(AMK_PATTERN_ROPE_KV, 0, 1);
  AmkTensorView in[3] = {qkv.v, inv_freq, positions};
  AmkInstExtra beyond = {.has_position = true, .position = SEQ};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &p, in, 3, &got, &beyond, err, sizeof err) ==
               AMK_INST_ERR_INDEX);
  CHECK_STR(c, err, "gemv_tile: rope_kv: position 6 is outside the cache's 6 rows");
  AmkInstExtra negative = {.has_position = true, .position = -1};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &p, in, 3, &got, &negative, err, sizeof err) ==
               AMK_INST_ERR_INDEX);
  AmkInstParams far = head_params(AMK_PATTERN_ROPE_KV, 1, 2);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &far, in, 3, &got, &at, err, sizeof err) ==
               AMK_INST_ERR_SHAPE);
  CHECK_STR(c, err, "gemv_tile: rope_kv: heads [1, 3) are outside the 2 KV heads");
  AmkTensorView short_qkv[3] = {part(&qkv, 0, QW + KVW), inv_freq, positions};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &p, short_qkv, 3, &got, &at, err, sizeof err) ==
               AMK_INST_ERR_SHAPE);
  AmkTensorView short_freq[3] = {qkv.v, view1(freq, AMK_DTYPE_F32, HD / 2 - 1), positions};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &p, short_freq, 3, &got, &at, err, sizeof err) ==
               AMK_INST_ERR_SHAPE);
  CHECK(c, strstr(err, "rope_kv: rope: inv_freq has 3 elements") != NULL);
  float fpos = 1.0f;
  AmkTensorView float_pos[3] = {qkv.v, inv_freq, view1(&fpos, AMK_DTYPE_F32, 1)};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &p, float_pos, 3, &got, &at, err, sizeof err) ==
               AMK_INST_ERR_DTYPE);
  AmkInstParams odd = head_params(AMK_PATTERN_ROPE_KV, 0, 1);
  set_int(&odd, "head_dim", 7);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &odd, in, 3, &got, &at, err, sizeof err) ==
               AMK_INST_ERR_PARAM);
  AmkTensorView bad_cache_view = amk_tensor_view(got.v.data, dt, 2, (int64_t[]){5, 7});
  T bad_cache = {bad_cache_view};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &p, in, 3, &bad_cache, &at, err, sizeof err) ==
               AMK_INST_ERR_SHAPE);
  CHECK(c, same(&before, &got));
  DROP_ALL(&qkv, &cache, &kc, &vc, &kr, &got, &got2, &got3, &before);
}

static void set_window(AmkInstParams *p, int64_t start, int64_t len, bool partial) {
  set_int(p, "kv_start", start);
  set_int(p, "kv_len", len);
  set_float(p, "scale", 0.35355339059327373);
  if (partial) {
    int64_t flags = (int64_t)p->flags.i | 2;
    set_int(p, "flags", flags);
  }
}

static void test_attention(UnitCounts *c, AmkDType dt, bool rope, bool partial) {
  uint32_t seed = 57 + rope * 2 + partial;
  char err[256];
  const int64_t start = partial ? 1 : 0, len = partial ? 3 : 5, pos = 4;
  T qkv, cache, kc, vc;
  make_qkv_and_cache(dt, 1.5f, &seed, &qkv, &cache);
  split_cache(&cache, &kc, &vc);
  float freq[HD / 2];
  default_inv_freq(freq);
  AmkTensorView inv_freq = view1(freq, AMK_DTYPE_F32, HD / 2);
  int64_t out_width = partial ? NH * (HD + 2) : QW;
  AmkDType out_dt = partial ? AMK_DTYPE_F32 : dt;

  /* Unfused: ROPE(q) into q of dt (or q as given), then ATTENTION_TILE. */
  T q = mat(dt, 1, QW, 0, &seed);
  if (rope) {
    int32_t pos_value = (int32_t)pos;
    AmkInstParams rp = {0};
    set_int(&rp, "head_dim", HD);
    set_float(&rp, "theta", 10000.0);
    AmkTensorView rin[2] = {part(&qkv, 0, QW), view1(&pos_value, AMK_DTYPE_I32, 1)};
    CHECK(c, exec(AMK_OP_ROPE, &rp, rin, 2, &q, NULL, err, sizeof err) == 0);
  } else {
    memcpy(q.v.data, qkv.v.data, nbytes(&q));
  }
  T want = mat(out_dt, 1, out_width, 0, &seed), got = mat(out_dt, 1, out_width, 0, &seed);
  AmkInstParams ap = {0};
  set_int(&ap, "head_dim", HD);
  set_int(&ap, "n_heads", NH);
  set_int(&ap, "n_kv_heads", NKV);
  set_window(&ap, start, len, partial);
  AmkTensorView ain[3] = {q.v, kc.v, vc.v};
  CHECK(c, exec(AMK_OP_ATTENTION_TILE, &ap, ain, 3, &want, NULL, err, sizeof err) == 0);

  /* Fused: one tile per KV head's group of query heads. */
  int64_t pattern = rope ? AMK_PATTERN_ATTENTION_ROPE : AMK_PATTERN_ATTENTION;
  AmkInstExtra at = {.has_position = true, .position = pos};
  int64_t group = NH / NKV;
  for (int64_t g = 0; g < NKV; g++) {
    AmkInstParams p = head_params(pattern, g * group, group);
    set_window(&p, start, len, partial);
    AmkTensorView fin[3] = {qkv.v, inv_freq, cache.v};
    AmkTensorView pin[3] = {q.v, kc.v, vc.v};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &p, rope ? fin : pin, 3, &got, &at, err,
                  sizeof err) == 0);
  }
  CHECK(c, same(&want, &got));

  if (rope && !partial) {
    /* No caller position: a whole window ends at the step's row. */
    T got2 = mat(out_dt, 1, out_width, 0, &seed);
    for (int64_t g = 0; g < NKV; g++) {
      AmkInstParams p = head_params(pattern, g * group, group);
      set_window(&p, start, len, partial);
      AmkTensorView fin[3] = {qkv.v, inv_freq, cache.v};
      CHECK(c, exec(AMK_OP_GEMV_TILE, &p, fin, 3, &got2, NULL, err, sizeof err) == 0);
    }
    CHECK(c, same(&want, &got2));
    drop(&got2);
  }

  /* Errors write nothing. */
  T before = copy_of(&got);
  AmkTensorView fin[3] = {qkv.v, inv_freq, cache.v};
  AmkTensorView pin[3] = {q.v, kc.v, vc.v};
  AmkTensorView *in = rope ? fin : pin;
  AmkInstParams heads = head_params(pattern, 3, 2);
  set_window(&heads, start, len, partial);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &heads, in, 3, &got, &at, err, sizeof err) ==
               AMK_INST_ERR_SHAPE);
  CHECK(c, strstr(err, "heads [3, 5) are outside the 4 query heads") != NULL);
  AmkInstParams window = head_params(pattern, 0, 2);
  set_window(&window, 4, 3, partial);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &window, in, 3, &got, &at, err, sizeof err) ==
               AMK_INST_ERR_INDEX);
  CHECK(c, strstr(err, "window [4, 7) is outside the cache's 6 rows") != NULL);
  AmkInstParams no_scale = head_params(pattern, 0, 2);
  set_int(&no_scale, "kv_start", 0);
  set_int(&no_scale, "kv_len", 1);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &no_scale, in, 3, &got, &at, err, sizeof err) ==
               AMK_INST_ERR_PARAM);
  CHECK_STR(c, err, "gemv_tile: missing param 'scale'");
  AmkInstParams ok = head_params(pattern, 0, 2);
  set_window(&ok, start, len, partial);
  T wrong_out = mat(out_dt, 1, out_width - 1, 0, &seed);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &ok, in, 3, &wrong_out, &at, err, sizeof err) ==
               AMK_INST_ERR_SHAPE);
  if (rope) {
    AmkTensorView short_cache[3] = {qkv.v, inv_freq, part(&cache, 0, 2 * KVW * SEQ - 1)};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &ok, short_cache, 3, &got, &at, err, sizeof err) ==
                 AMK_INST_ERR_SHAPE);
    if (partial) { /* a partition's window does not tell the position */
      CHECK(c, exec(AMK_OP_GEMV_TILE, &ok, in, 3, &got, NULL, err, sizeof err) ==
                   AMK_INST_ERR_PARAM);
      CHECK_STR(c, err, "gemv_tile: attention_rope needs the step position (the "
                        "caller's, or param 'pos')");
    }
  } else {
    AmkTensorView short_q[3] = {part(&q, 0, QW - 1), kc.v, vc.v};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &ok, short_q, 3, &got, &at, err, sizeof err) ==
                 AMK_INST_ERR_SHAPE);
  }
  CHECK(c, same(&before, &got));
  DROP_ALL(&qkv, &cache, &kc, &vc, &q, &want, &got, &before, &wrong_out);
}

/* ---- combine_residual ---------------------------------------------------- */

enum { CHD = 8, CNH = 3, CN = 20 };
#define CK (CNH * CHD)
#define CPART (CNH * (CHD + 2))

/* A random f32 partial [CNH, CHD + 2]: acc in [-3, 3], m in [-4, 4],
 * l in [0.5, 2.5]; heads in `empty` (a bit mask) are an empty share
 * (m = -inf, l = 0), as attention writes one. */
static T make_partial(uint32_t empty, uint32_t *seed) {
  T t = mat(AMK_DTYPE_F32, CNH, CHD + 2, 3.0f, seed);
  float *f = t.v.data;
  for (int64_t h = 0; h < CNH; h++) {
    float *m = &f[h * (CHD + 2) + CHD], *l = m + 1;
    bool is_empty = (empty >> h) & 1;
    *m = is_empty ? -INFINITY : (float)(next_random(seed) % 801) / 100.0f - 4.0f;
    *l = is_empty ? 0.0f : 0.5f + (float)(next_random(seed) % 201) / 100.0f;
  }
  return t;
}

static AmkInstParams combine_params(int64_t n_off, int64_t n_tile) {
  AmkInstParams p = gemv_params(AMK_PATTERN_COMBINE_RESIDUAL, CK, n_off, n_tile);
  set_int(&p, "head_dim", CHD);
  set_int(&p, "n_heads", CNH);
  return p;
}

/* The fused inputs [p0, W, r, p1..] of `n` partials. */
static uint32_t combine_inputs(const T *partials, uint32_t n, const T *w, const T *r,
                               AmkTensorView *in) {
  in[0] = partials[0].v;
  in[1] = w->v;
  in[2] = r->v;
  for (uint32_t i = 1; i < n; i++)
    in[2 + i] = partials[i].v;
  return n + 2;
}

/* With `n` partials (head 1 of partial 1 an empty share), the tiles give
 * exactly ATTENTION_COMBINE into an attn vector of dt followed by the
 * residual tiles over it. One partial is checked against two whose second
 * is wholly empty (weight 0: the same float results). */
static void test_combine_residual(UnitCounts *c, AmkDType dt, uint32_t n) {
  uint32_t seed = 61 + n;
  char err[256];
  T partials[AMK_MAX_INPUTS];
  uint32_t second_empty = n == 1 ? (1u << CNH) - 1 : 2u; /* all heads, or head 1 */
  for (uint32_t i = 0; i < AMK_MAX_INPUTS; i++)
    partials[i] = make_partial(i == 1 ? second_empty : 0u, &seed);
  T w = mat(dt, CN, CK, 0.5f, &seed), r = mat(dt, 1, CN, 4.0f, &seed);
  T attn = mat(dt, 1, CK, 0, &seed), want = mat(dt, 1, CN, 0, &seed);
  T got = mat(dt, 1, CN, 0, &seed);
  /* Unfused: the combine into attn (dt), then the residual tiles. */
  AmkInstParams cp = {0};
  set_int(&cp, "head_dim", CHD);
  set_int(&cp, "n_heads", CNH);
  AmkTensorView cin[AMK_MAX_INPUTS];
  uint32_t n_unfused = n == 1 ? 2 : n;
  for (uint32_t i = 0; i < n_unfused; i++)
    cin[i] = partials[i].v;
  CHECK(c, exec(AMK_OP_ATTENTION_COMBINE, &cp, cin, n_unfused, &attn, NULL, err,
                sizeof err) == 0);
  for (int64_t off = 0; off < CN; off += TILE) {
    int64_t cols = CN - off < TILE ? CN - off : TILE;
    AmkInstParams rp = gemv_params(AMK_PATTERN_RESIDUAL, CK, off, cols);
    AmkTensorView rin[3] = {attn.v, w.v, r.v};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &rp, rin, 3, &want, NULL, err, sizeof err) == 0);
  }
  for (int64_t off = 0; off < CN; off += TILE) {
    int64_t cols = CN - off < TILE ? CN - off : TILE;
    AmkInstParams fp = combine_params(off, cols);
    AmkTensorView fin[AMK_MAX_INPUTS];
    uint32_t n_in = combine_inputs(partials, n, &w, &r, fin);
    CHECK(c, exec(AMK_OP_GEMV_TILE, &fp, fin, n_in, &got, NULL, err, sizeof err) == 0);
  }
  CHECK(c, same(&want, &got));
  for (uint32_t i = 0; i < AMK_MAX_INPUTS; i++)
    drop(&partials[i]);
  DROP_ALL(&w, &r, &attn, &want, &got);
}

/* Quantized weights, [p0, qW, scales, r, p1..] with `n` partials (at most 5
 * fit): exactly ATTENTION_COMBINE into an attn vector of dt followed by the
 * quantized residual tiles [attn, qW, scales, r] over it (one partial
 * against two whose second is wholly empty, as test_combine_residual). */
static void test_combine_residual_quantized(UnitCounts *c, AmkDType dt, uint32_t n, int qdtype) {
  uint32_t seed = 81 + n + (uint32_t)qdtype;
  char err[256];
  const int64_t group = 16; /* K = 24: a full group and a short one */
  T partials[AMK_MAX_INPUTS];
  for (uint32_t i = 0; i < AMK_MAX_INPUTS; i++)
    partials[i] = make_partial(i == 1 ? (n == 1 ? (1u << CNH) - 1 : 2u) : 0u, &seed);
  T q, scales;
  make_quantized(qdtype, CN, CK, group, &seed, &q, &scales);
  T r = mat(dt, 1, CN, 4.0f, &seed), attn = mat(dt, 1, CK, 0, &seed);
  T want = mat(dt, 1, CN, 0, &seed), got = mat(dt, 1, CN, 0, &seed);
  AmkInstParams cp = {0};
  set_int(&cp, "head_dim", CHD);
  set_int(&cp, "n_heads", CNH);
  AmkTensorView in[AMK_MAX_INPUTS];
  uint32_t n_unfused = n == 1 ? 2 : n;
  for (uint32_t i = 0; i < n_unfused; i++)
    in[i] = partials[i].v;
  CHECK(c, exec(AMK_OP_ATTENTION_COMBINE, &cp, in, n_unfused, &attn, NULL, err, sizeof err) ==
               0);
  for (int64_t off = 0; off < CN; off += TILE) {
    int64_t cols = CN - off < TILE ? CN - off : TILE;
    AmkInstParams rp = gemv_params(AMK_PATTERN_RESIDUAL, CK, off, cols);
    set_int(&rp, "qdtype", qdtype);
    set_int(&rp, "group", group);
    AmkTensorView rin[4] = {attn.v, q.v, scales.v, r.v};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &rp, rin, 4, &want, NULL, err, sizeof err) == 0);
  }
  for (int64_t off = 0; off < CN; off += TILE) {
    int64_t cols = CN - off < TILE ? CN - off : TILE;
    AmkInstParams fp = combine_params(off, cols);
    set_int(&fp, "qdtype", qdtype);
    set_int(&fp, "group", group);
    in[0] = partials[0].v;
    in[1] = q.v;
    in[2] = scales.v;
    in[3] = r.v;
    for (uint32_t i = 1; i < n; i++)
      in[3 + i] = partials[i].v;
    CHECK(c, exec(AMK_OP_GEMV_TILE, &fp, in, n + 3, &got, NULL, err, sizeof err) == 0);
  }
  CHECK(c, same(&want, &got));
  /* Without its residual it is an arity error. */
  AmkInstParams bad = combine_params(0, TILE);
  set_int(&bad, "qdtype", qdtype);
  set_int(&bad, "group", group);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &bad, in, 3, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_ARITY);
  CHECK_STR(c, err, "gemv_tile: combine_residual takes 4 to 8 inputs (p0, qW, scales, r, p1..), "
                    "got 3");
  for (uint32_t i = 0; i < AMK_MAX_INPUTS; i++)
    drop(&partials[i]);
  DROP_ALL(&q, &scales, &r, &attn, &want, &got);
}

/* Bad inputs and params are errors that write nothing. */
static void test_combine_residual_errors(UnitCounts *c) {
  uint32_t seed = 71;
  char err[256];
  T partials[AMK_MAX_INPUTS];
  for (uint32_t i = 0; i < AMK_MAX_INPUTS; i++)
    partials[i] = make_partial(0, &seed);
  T w = mat(AMK_DTYPE_F32, CN, CK, 0.5f, &seed), r = mat(AMK_DTYPE_F32, 1, CN, 4.0f, &seed);
  T got = mat(AMK_DTYPE_F32, 1, CN, 3.0f, &seed), before = copy_of(&got);
  AmkInstParams p = combine_params(0, TILE);
  AmkTensorView in[AMK_MAX_INPUTS + 1];
  uint32_t n_in = combine_inputs(partials, 2, &w, &r, in);
  /* Arity: 3 to 8 (the dispatch allows a combine tile 8, other GEMVs 3). */
  CHECK(c, exec(AMK_OP_GEMV_TILE, &p, in, 2, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_ARITY);
  CHECK_STR(c, err, "gemv_tile: combine_residual takes 3 to 8 inputs (p0, W, r, p1..), got 2");
  combine_inputs(partials, AMK_MAX_INPUTS - 1, &w, &r, in);
  in[AMK_MAX_INPUTS] = partials[0].v;
  CHECK(c, exec(AMK_OP_GEMV_TILE, &p, in, AMK_MAX_INPUTS + 1, &got, NULL, err,
                sizeof err) == AMK_INST_ERR_ARITY);
  CHECK_STR(c, err, "gemv_tile: takes 2 to 8 inputs, got 9");
  AmkInstParams plain = gemv_params(AMK_PATTERN_PLAIN, CK, 0, TILE);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &plain, in, 4, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_ARITY);
  CHECK_STR(c, err, "gemv_tile: takes 2 to 3 inputs, got 4");
  /* The dispatch lets a residual tile have 4 (its quantized form); an fp one
   * takes 3. */
  AmkInstParams residual = gemv_params(AMK_PATTERN_RESIDUAL, CK, 0, TILE);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &residual, in, 4, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_ARITY);
  CHECK_STR(c, err, "gemv_tile: residual takes 3 inputs (x, W, r), got 4");
  /* A quantized tile's inputs are [p0, qW, scales, r, p1..]: fp W in qW's
   * place is refused by its DEQUANT step. */
  n_in = combine_inputs(partials, 2, &w, &r, in);
  AmkInstParams quantized = combine_params(0, TILE);
  set_int(&quantized, "qdtype", 6);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &quantized, in, n_in, &got, NULL, err, sizeof err) != 0);
  CHECK(c, strstr(err, "gemv_tile: combine_residual:") == err);
  /* K is the combined vector's n_heads x head_dim. */
  n_in = combine_inputs(partials, 2, &w, &r, in);
  AmkInstParams bad_k = combine_params(0, TILE);
  set_int(&bad_k, "K", CK + 1);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &bad_k, in, n_in, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_PARAM);
  CHECK_STR(c, err, "gemv_tile: combine_residual: K = 25 must be n_heads x head_dim = 3 x 8 "
                    "(both positive)");
  AmkInstParams no_heads = gemv_params(AMK_PATTERN_COMBINE_RESIDUAL, CK, 0, TILE);
  set_int(&no_heads, "head_dim", CHD);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &no_heads, in, n_in, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_PARAM);
  CHECK(c, strstr(err, "n_heads") != NULL);
  /* A partial of the wrong size, a residual of the wrong size. */
  AmkTensorView short_partial = part(&partials[1], 0, CPART - 1);
  in[3] = short_partial;
  CHECK(c, exec(AMK_OP_GEMV_TILE, &p, in, n_in, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_SHAPE);
  CHECK(c, strstr(err, "gemv_tile: combine_residual: attention_combine:") == err);
  n_in = combine_inputs(partials, 2, &w, &r, in);
  in[2] = part(&r, 0, CN - 1);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &p, in, n_in, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_SHAPE);
  CHECK(c, strstr(err, "add: input 1 has 19 elements but output has 20") != NULL);
  CHECK(c, same(&before, &got));
  for (uint32_t i = 0; i < AMK_MAX_INPUTS; i++)
    drop(&partials[i]);
  DROP_ALL(&w, &r, &got, &before);
}

/* ---- mlp ------------------------------------------------------------------- */

#define MK 8 /* hidden */
#define MI 6 /* intermediate */

/* Element i of an f32 or bf16 tensor, widened. */
static float at(const T *t, int64_t i) {
  return t->v.dtype == AMK_DTYPE_BF16 ? amk_bf16_to_f32(((const uint16_t *)t->v.data)[i])
                                      : ((const float *)t->v.data)[i];
}

static AmkInstParams mlp_params(int64_t n_off, int64_t n_tile) {
  AmkInstParams p = gemv_params(AMK_PATTERN_MLP, MK, n_off, n_tile);
  set_float(&p, "eps", 1e-5);
  return p;
}

/* The tile [first, first + count)'s share of a split-K projection (mlp's
 * down, attention_o's o) at output element n, its transposed weight's rows
 * `width` long, summed as the kernel documents: fp32, increasing column,
 * from 0. */
static float down_partial(const T *act, const T *wt, int64_t width, int64_t n, int64_t first,
                          int64_t count) {
  float p = 0.0f;
  for (int64_t col = first; col < first + count; col++)
    p += at(act, col) * at(wt, col * width + n);
  return p;
}

/* Two tiles [0, 3) and [3, 6) summed into a zeroed f32 accumulator give
 * x + Wdt^T . act, act from the unfused RMSNORM, stacked gate|up GEMV and
 * SILU_MUL with intermediates of x's dtype; bit for bit the documented
 * fp32 order whichever tile lands first. */
static void test_mlp(UnitCounts *c, AmkDType dt) {
  uint32_t seed = 97;
  char err[256];
  const int64_t half = MI / 2;
  T x = mat(dt, 1, MK, 2.0f, &seed), wgu = mat(dt, 2 * MI, MK, 0.5f, &seed);
  T g = mat(dt, 1, MK, 1.0f, &seed), wd = mat(dt, MI, MK, 0.5f, &seed); /* Wdt [I, K] */
  /* Unfused: xn = RMSNORM(x, g); [gate; up] = the plain stacked GEMV;
   * act = SILU_MUL(gate, up). */
  T xn = mat(dt, 1, MK, 0, &seed), gu = mat(dt, 2, MI, 0, &seed), act = mat(dt, 1, MI, 0, &seed);
  AmkInstParams np = {0};
  set_int(&np, "hidden", MK);
  set_float(&np, "eps", 1e-5);
  AmkTensorView norm_in[2] = {x.v, g.v};
  CHECK(c, exec(AMK_OP_RMSNORM, &np, norm_in, 2, &xn, NULL, err, sizeof err) == 0);
  AmkInstParams plain = gemv_params(0, MK, 0, MI);
  AmkTensorView gemv_in[2] = {xn.v, wgu.v};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &plain, gemv_in, 2, &gu, NULL, err, sizeof err) == 0);
  AmkInstParams none = {0};
  AmkTensorView halves[2] = {part(&gu, 0, MI), part(&gu, MI, MI)};
  CHECK(c, exec(AMK_OP_SILU_MUL, &none, halves, 2, &act, NULL, err, sizeof err) == 0);

  /* Tile 0 then tile 1, and tile 1 then tile 0, each into a zeroed
   * accumulator. */
  T acc01 = mat(AMK_DTYPE_F32, 1, MK, 0, &seed), acc10 = mat(AMK_DTYPE_F32, 1, MK, 0, &seed);
  T only1 = mat(AMK_DTYPE_F32, 1, MK, 0, &seed);
  AmkInstParams tile0 = mlp_params(0, half), tile1 = mlp_params(half, MI - half);
  AmkTensorView in[4] = {x.v, wgu.v, g.v, wd.v};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &tile0, in, 4, &acc01, NULL, err, sizeof err) == 0);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &tile1, in, 4, &acc01, NULL, err, sizeof err) == 0);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &tile1, in, 4, &acc10, NULL, err, sizeof err) == 0);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &tile0, in, 4, &acc10, NULL, err, sizeof err) == 0);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &tile1, in, 4, &only1, NULL, err, sizeof err) == 0);
  bool close = true, exact01 = true, exact10 = true, exact1 = true;
  for (int64_t n = 0; n < MK; n++) {
    double want = at(&x, n);
    for (int64_t col = 0; col < MI; col++)
      want += (double)at(&act, col) * at(&wd, col * MK + n);
    close = close && near(at(&acc01, n), want, 1e-5) && near(at(&acc10, n), want, 1e-5);
    float p0 = down_partial(&act, &wd, MK, n, 0, half);
    float p1 = down_partial(&act, &wd, MK, n, half, MI - half);
    float first0 = 0.0f + (at(&x, n) + p0), first1 = 0.0f + p1;
    exact01 = exact01 && at(&acc01, n) == first0 + p1;
    exact10 = exact10 && at(&acc10, n) == first1 + (at(&x, n) + p0);
    exact1 = exact1 && at(&only1, n) == first1; /* only the tile at n_off 0 adds x */
  }
  CHECK(c, close);
  CHECK(c, exact01 && exact10 && exact1);
  /* An empty tile adds nothing (but x at n_off 0). */
  T empty = copy_of(&only1);
  AmkInstParams no_cols = mlp_params(half, 0);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &no_cols, in, 4, &empty, NULL, err, sizeof err) == 0);
  CHECK(c, same(&empty, &only1));
  /* Flags bit 0 (a tensor-parallel rank's share): the tile at n_off 0 adds
   * its partial alone, no x. */
  T nores = mat(AMK_DTYPE_F32, 1, MK, 0, &seed);
  AmkInstParams tile0_nores = mlp_params(0, half);
  set_int(&tile0_nores, "flags", (int64_t)AMK_PATTERN_MLP << AMK_PATTERN_SHIFT |
                                     AMK_FLAG_MLP_NO_RESIDUAL);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &tile0_nores, in, 4, &nores, NULL, err, sizeof err) == 0);
  bool exact_nores = true;
  for (int64_t n = 0; n < MK; n++)
    exact_nores = exact_nores && at(&nores, n) == 0.0f + down_partial(&act, &wd, MK, n, 0, half);
  CHECK(c, exact_nores);
  DROP_ALL(&x, &wgu, &g, &wd, &xn, &gu, &act, &acc01, &acc10, &only1, &empty, &nores);
}

/* Bad calls are refused before anything is added to the accumulator. */
static void test_mlp_errors(UnitCounts *c) {
  uint32_t seed = 101;
  char err[256];
  const AmkDType dt = AMK_DTYPE_BF16;
  T x = mat(dt, 1, MK, 2.0f, &seed), wgu = mat(dt, 2 * MI, MK, 0.5f, &seed);
  T g = mat(dt, 1, MK, 1.0f, &seed), wd = mat(dt, MI, MK, 0.5f, &seed); /* Wdt [I, K] */
  T got = mat(AMK_DTYPE_F32, 1, MK, 1.0f, &seed), before = copy_of(&got);
  T bf16_out = mat(dt, 1, MK, 0, &seed);
  AmkInstParams p = mlp_params(0, 3);
  AmkTensorView in[4] = {x.v, wgu.v, g.v, wd.v};
  /* A quantized mlp tile reads six inputs (the scales after each matrix);
   * fp weights under qdtype are refused as int8's. */
  AmkInstParams quantized = p;
  set_int(&quantized, "qdtype", 6);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &quantized, in, 4, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_ARITY);
  CHECK_STR(c, err, "gemv_tile: mlp takes 6 inputs (x, qWgu, scales, g, qWd, scales), got 4");
  T sgu = mat(dt, 2 * MI, 1, 1.0f, &seed);
  AmkTensorView six[6] = {x.v, wgu.v, sgu.v, g.v, wd.v, sgu.v};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &quantized, six, 6, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_DTYPE);
  CHECK_STR(c, err, "gemv_tile: int8 weights must be stored as i8, not bf16");
  CHECK(c, exec(AMK_OP_GEMV_TILE, &p, in, 3, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_ARITY);
  CHECK_STR(c, err, "gemv_tile: mlp takes 4 inputs (x, Wgu, g, Wdt), got 3");
  AmkInstParams no_eps = gemv_params(AMK_PATTERN_MLP, MK, 0, 3);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &no_eps, in, 4, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_PARAM);
  CHECK_STR(c, err, "gemv_tile: missing param 'eps'");
  /* x of the wrong width. */
  AmkTensorView short_x[4] = {part(&x, 0, MK - 1), wgu.v, g.v, wd.v};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &p, short_x, 4, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_SHAPE);
  CHECK_STR(c, err, "gemv_tile: mlp: x has 7 elements, want K = 8 (positive)");
  /* The down weight untransposed ([K, I]), or short a row of the
   * intermediate (then Wgu's 2I rows no longer match). */
  AmkTensorView wd_untransposed[4] = {x.v, wgu.v, g.v, view2(wd.v.data, dt, MK, MI)};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &p, wd_untransposed, 4, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_SHAPE);
  CHECK_STR(c, err, "gemv_tile: mlp: Wdt has 48 elements of width 6, want [I, K] with K = 8");
  AmkTensorView wd_short[4] = {x.v, wgu.v, g.v, view2(wd.v.data, dt, MI - 1, MK)};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &p, wd_short, 4, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_SHAPE);
  CHECK_STR(c, err, "gemv_tile: mlp: Wgu has 96 elements of width 8, want [2I, K] = [10, 8] "
                    "(I = 5, Wdt's rows)");
  /* Wgu holding only the gate rows. */
  AmkTensorView gate_only[4] = {x.v, view2(wgu.v.data, dt, MI, MK), g.v, wd.v};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &p, gate_only, 4, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_SHAPE);
  CHECK_STR(c, err, "gemv_tile: mlp: Wgu has 48 elements of width 8, want [2I, K] = [12, 8] "
                    "(I = 6, Wdt's rows)");
  AmkTensorView short_g[4] = {x.v, wgu.v, part(&g, 0, MK - 1), wd.v};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &p, short_g, 4, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_SHAPE);
  CHECK_STR(c, err, "gemv_tile: mlp: g has 7 elements, want K = 8");
  /* A tile past the intermediate's I columns (not Wgu's 2I rows). */
  AmkInstParams beyond = mlp_params(4, 3);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &beyond, in, 4, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_SHAPE);
  CHECK_STR(c, err, "gemv_tile: mlp: tile [4, 7) is outside the intermediate's 6 columns");
  CHECK(c, same(&before, &got));
  /* The output is the f32 accumulator [1, K]. */
  T bf16_before = copy_of(&bf16_out);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &p, in, 4, &bf16_out, NULL, err, sizeof err) ==
               AMK_INST_ERR_DTYPE);
  CHECK_STR(c, err, "gemv_tile: mlp: output is bf16 with 8 elements, want the f32 "
                    "accumulator [1, K] with K = 8");
  CHECK(c, same(&bf16_before, &bf16_out));
  AmkTensorView short_out = part(&got, 0, MK - 1);
  CHECK(c, amk_inst_execute(AMK_OP_GEMV_TILE, &p, in, 4, &short_out, 1, NULL, err,
                            sizeof err) == AMK_INST_ERR_SHAPE);
  CHECK_STR(c, err, "gemv_tile: mlp: output is f32 with 7 elements, want the f32 "
                    "accumulator [1, K] with K = 8");
  /* An integer x would make the intermediates integers. */
  T ix = mat(AMK_DTYPE_I32, 1, MK, 4.0f, &seed);
  AmkTensorView int_x[4] = {ix.v, wgu.v, g.v, wd.v};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &p, int_x, 4, &got, NULL, err, sizeof err) ==
               AMK_INST_ERR_DTYPE);
  CHECK_STR(c, err, "gemv_tile: mlp: x is i32, want a float dtype");
  CHECK(c, same(&before, &got));
  DROP_ALL(&x, &wgu, &g, &wd, &got, &before, &bf16_out, &bf16_before, &ix, &sgu);
}

/* ---- attention_o ------------------------------------------------------------ */

enum { OHD = 4, ONH = 4, ONKV = 2, OHID = 8, OSEQ = 6, OPOS = 3 };
#define OCOLS (ONH * OHD)             /* the attention output's columns */
#define OQKV ((ONH + 2 * ONKV) * OHD) /* K: the qkv width */
#define OKVW (ONKV * OHD)

/* A tile of attention columns [n_off, n_off + n_tile) attending over rows
 * [0, OPOS] (row OPOS from qkv). */
static AmkInstParams attention_o_params(int64_t n_off, int64_t n_tile) {
  AmkInstParams p = gemv_params(AMK_PATTERN_ATTENTION_O, OQKV, n_off, n_tile);
  set_int(&p, "flags",
          (int64_t)AMK_PATTERN_ATTENTION_O << AMK_PATTERN_SHIFT | AMK_FLAG_KV_FROM_QKV);
  set_int(&p, "head_dim", OHD);
  set_int(&p, "n_heads", ONH);
  set_int(&p, "n_kv_heads", ONKV);
  set_int(&p, "kv_start", 0);
  set_int(&p, "kv_len", OPOS + 1);
  set_float(&p, "scale", 0.5);
  return p;
}

/* t transposed: [rows, cols] -> [cols, rows], the same dtype. */
static T transposed(const T *t, int64_t rows, int64_t cols) {
  T r = mat(t->v.dtype, cols, rows, 0, NULL);
  size_t e = (size_t)amk_dtype_nbytes(t->v.dtype, 1);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++)
      memcpy((char *)r.v.data + (size_t)(j * rows + i) * e,
             (const char *)t->v.data + (size_t)(i * cols + j) * e, e);
  return r;
}

/* KV head g's per-head cache [OSEQ, 2, OHD], cut from the combined one. */
static T per_head_cache(const T *cache, int64_t g) {
  int64_t dims[3] = {OSEQ, 2, OHD};
  T h = make(cache->v.dtype, 3, dims, 0, NULL);
  size_t e = (size_t)amk_dtype_nbytes(cache->v.dtype, 1);
  for (int64_t s = 0; s < OSEQ; s++)
    for (int64_t plane = 0; plane < 2; plane++)
      memcpy((char *)h.v.data + (size_t)((s * 2 + plane) * OHD) * e,
             (const char *)cache->v.data + (size_t)((s * 2 + plane) * OKVW + g * OHD) * e,
             OHD * e);
  return h;
}

/* The tiles: each head's columns as a 1-column and a 3-column slice. */
enum { O_TILES = 2 * ONH };
static void attention_o_tile(int64_t i, int64_t *n_off, int64_t *n_tile) {
  int64_t h = i / 2;
  *n_off = h * OHD + (i % 2 ? 1 : 0);
  *n_tile = i % 2 ? OHD - 1 : 1;
}

/* Every tile of the attention output's columns, added into a zeroed f32
 * accumulator, gives x + Wo . attn up to fp32 summation order, attn the
 * unfused attention (the attention_rope tiles of every head, row pos from
 * qkv, into an activation of qkv's dtype) and the o projection the plain
 * GEMV into f32; bit for bit the documented order (tile by tile, each
 * tile's share summed in increasing column), whichever cache layout and
 * wherever the position comes from. */
static void test_attention_o(UnitCounts *c, AmkDType dt) {
  uint32_t seed = 131;
  char err[256];
  int64_t cache_dims[3] = {OSEQ, 2, OKVW};
  T qkv = mat(dt, 1, OQKV, 2.0f, &seed), cache = make(dt, 3, cache_dims, 1.5f, &seed);
  T wot = mat(dt, OCOLS, OHID, 0.5f, &seed), x = mat(dt, 1, OHID, 2.0f, &seed);
  float freq[OHD / 2];
  for (int i = 0; i < OHD / 2; i++)
    freq[i] = 1.0f / powf(10000.0f, (float)i / (float)(OHD / 2));
  AmkTensorView inv_freq = view1(freq, AMK_DTYPE_F32, OHD / 2);
  AmkInstExtra at_pos = {.has_position = true, .position = OPOS};

  /* Unfused: the attention_rope tiles of every KV head's group into attn
   * (qkv's dtype), then the plain o GEMV (Wo = Wot^T) into f32, plus x. */
  T attn = mat(dt, 1, OCOLS, 0, &seed), proj = mat(AMK_DTYPE_F32, 1, OHID, 0, &seed);
  const int64_t group = ONH / ONKV;
  for (int64_t g = 0; g < ONKV; g++) {
    AmkInstParams p = attention_o_params(g * group, group);
    set_int(&p, "flags",
            (int64_t)AMK_PATTERN_ATTENTION_ROPE << AMK_PATTERN_SHIFT | AMK_FLAG_KV_FROM_QKV);
    AmkTensorView in[3] = {qkv.v, inv_freq, cache.v};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &p, in, 3, &attn, &at_pos, err, sizeof err) == 0);
  }
  T wo = transposed(&wot, OCOLS, OHID);
  AmkInstParams plain = gemv_params(AMK_PATTERN_PLAIN, OCOLS, 0, OHID);
  AmkTensorView gemv_in[2] = {attn.v, wo.v};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &plain, gemv_in, 2, &proj, NULL, err, sizeof err) == 0);

  /* Fused: the tiles in order, in reverse order, with the per-head caches,
   * and with the position from param 'pos' instead of the caller. */
  T fwd = mat(AMK_DTYPE_F32, 1, OHID, 0, &seed), rev = copy_of(&fwd), heads = copy_of(&fwd);
  T by_param = copy_of(&fwd);
  T caches[ONKV];
  for (int64_t g = 0; g < ONKV; g++)
    caches[g] = per_head_cache(&cache, g);
  for (int64_t i = 0; i < O_TILES; i++) {
    int64_t n_off, n_tile, r_off, r_tile;
    attention_o_tile(i, &n_off, &n_tile);
    attention_o_tile(O_TILES - 1 - i, &r_off, &r_tile);
    AmkInstParams p = attention_o_params(n_off, n_tile), r = attention_o_params(r_off, r_tile);
    AmkTensorView in[5] = {qkv.v, wot.v, inv_freq, cache.v, x.v};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &p, in, 5, &fwd, &at_pos, err, sizeof err) == 0);
    CHECK(c, exec(AMK_OP_GEMV_TILE, &r, in, 5, &rev, &at_pos, err, sizeof err) == 0);
    AmkTensorView own[5] = {qkv.v, wot.v, inv_freq, caches[n_off / OHD / group].v, x.v};
    CHECK(c, exec(AMK_OP_GEMV_TILE, &p, own, 5, &heads, &at_pos, err, sizeof err) == 0);
    set_int(&p, "pos", OPOS);
    CHECK(c, exec(AMK_OP_GEMV_TILE, &p, in, 5, &by_param, NULL, err, sizeof err) == 0);
  }
  bool close = true, exact = true;
  float order[OHID] = {0};
  for (int64_t i = 0; i < O_TILES; i++) {
    int64_t n_off, n_tile;
    attention_o_tile(i, &n_off, &n_tile);
    for (int64_t n = 0; n < OHID; n++) {
      float share = down_partial(&attn, &wot, OHID, n, n_off, n_tile);
      order[n] += n_off == 0 ? at(&x, n) + share : share;
    }
  }
  for (int64_t n = 0; n < OHID; n++) {
    double want = (double)at(&proj, n) + at(&x, n);
    close = close && near(at(&fwd, n), want, 1e-5) && near(at(&rev, n), want, 1e-5);
    exact = exact && at(&fwd, n) == order[n];
  }
  CHECK(c, close);
  CHECK(c, exact);
  CHECK(c, same(&fwd, &heads) && same(&fwd, &by_param));

  /* One tile alone adds its share, and x only at n_off 0. */
  T alone = mat(AMK_DTYPE_F32, 1, OHID, 0, &seed), first = copy_of(&alone);
  AmkInstParams mid = attention_o_params(OHD + 1, OHD - 1), zero = attention_o_params(0, 1);
  AmkTensorView in[5] = {qkv.v, wot.v, inv_freq, cache.v, x.v};
  CHECK(c, exec(AMK_OP_GEMV_TILE, &mid, in, 5, &alone, &at_pos, err, sizeof err) == 0);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &zero, in, 5, &first, &at_pos, err, sizeof err) == 0);
  bool alone_ok = true;
  for (int64_t n = 0; n < OHID; n++) {
    alone_ok = alone_ok && at(&alone, n) == 0.0f + down_partial(&attn, &wot, OHID, n, OHD + 1,
                                                                 OHD - 1);
    alone_ok = alone_ok &&
               at(&first, n) == 0.0f + (at(&x, n) + down_partial(&attn, &wot, OHID, n, 0, 1));
  }
  CHECK(c, alone_ok);
  for (int64_t g = 0; g < ONKV; g++)
    drop(&caches[g]);
  DROP_ALL(&qkv, &cache, &wot, &x, &attn, &proj, &wo, &fwd, &rev, &heads, &by_param, &alone,
           &first);
}

/* Bad calls are refused before anything is added to the accumulator. */
static void test_attention_o_errors(UnitCounts *c) {
  uint32_t seed = 137;
  char err[320];
  const AmkDType dt = AMK_DTYPE_BF16;
  int64_t cache_dims[3] = {OSEQ, 2, OKVW};
  T qkv = mat(dt, 1, OQKV, 2.0f, &seed), cache = make(dt, 3, cache_dims, 1.5f, &seed);
  T wot = mat(dt, OCOLS, OHID, 0.5f, &seed), x = mat(dt, 1, OHID, 2.0f, &seed);
  T got = mat(AMK_DTYPE_F32, 1, OHID, 1.0f, &seed), before = copy_of(&got);
  float freq[OHD / 2] = {1.0f, 0.01f};
  AmkTensorView inv_freq = view1(freq, AMK_DTYPE_F32, OHD / 2);
  AmkInstExtra at_pos = {.has_position = true, .position = OPOS};
  AmkTensorView in[5] = {qkv.v, wot.v, inv_freq, cache.v, x.v};
  AmkInstParams ok = attention_o_params(OHD, 2);
  CHECK(c, exec(AMK_OP_GEMV_TILE, &ok, in, 5, &got, &at_pos, err, sizeof err) == 0);
  drop(&before);
  before = copy_of(&got);
#define REFUSED(params, inputs, n_in, out, status, text)                                  \
  do {                                                                                     \
    CHECK(c, exec(AMK_OP_GEMV_TILE, params, inputs, n_in, out, &at_pos, err, sizeof err) == \
                 (status));                                                                \
    CHECK_STR(c, err, text);                                                               \
  } while (0)
  /* Columns crossing from head 0 into head 1, past the output, or none. */
  AmkInstParams cross = attention_o_params(OHD - 1, 2);
  REFUSED(&cross, in, 5, &got, AMK_INST_ERR_SHAPE,
          "gemv_tile: attention_o: columns [3, 5) cross the end of head 0 (head_dim 4); a "
          "tile's columns lie inside one head");
  AmkInstParams past = attention_o_params(OCOLS - 1, 2);
  REFUSED(&past, in, 5, &got, AMK_INST_ERR_SHAPE,
          "gemv_tile: attention_o: columns [15, 17) are outside the attention output's 16 "
          "(n_heads x head_dim)");
  AmkInstParams empty = attention_o_params(OHD, 0);
  REFUSED(&empty, in, 5, &got, AMK_INST_ERR_SHAPE,
          "gemv_tile: attention_o: N_tile is 0, want at least 1");
  /* The inputs: five, fp weights, Wot transposed, K the qkv width. */
  REFUSED(&ok, in, 4, &got, AMK_INST_ERR_ARITY,
          "gemv_tile: attention_o takes 5 inputs (qkv, Wot, inv_freq, kv_cache, x), got 4");
  AmkInstParams quantized = ok;
  set_int(&quantized, "qdtype", 6);
  REFUSED(&quantized, in, 5, &got, AMK_INST_ERR_PARAM,
          "gemv_tile: attention_o takes fp weights, not qdtype 6");
  AmkTensorView wo_untransposed[5] = {qkv.v, view2(wot.v.data, dt, OHID, OCOLS), inv_freq,
                                      cache.v, x.v};
  REFUSED(&ok, wo_untransposed, 5, &got, AMK_INST_ERR_SHAPE,
          "gemv_tile: attention_o: Wot has 128 elements of width 16, want [n_heads x "
          "head_dim, hidden] with 16 rows");
  AmkTensorView short_x[5] = {qkv.v, wot.v, inv_freq, cache.v, part(&x, 0, OHID - 1)};
  REFUSED(&ok, short_x, 5, &got, AMK_INST_ERR_SHAPE,
          "gemv_tile: attention_o: x has 7 elements, want hidden = 8 (Wot's width)");
  AmkInstParams wrong_k = ok;
  set_int(&wrong_k, "K", OCOLS);
  REFUSED(&wrong_k, in, 5, &got, AMK_INST_ERR_SHAPE,
          "gemv_tile: attention_o: qkv has 32 elements of width 32, want one row of K = 16");
  /* Flags: bit 2 is required, and no other low bit is allowed. */
  AmkInstParams no_bit2 = ok;
  set_int(&no_bit2, "flags", (int64_t)AMK_PATTERN_ATTENTION_O << AMK_PATTERN_SHIFT);
  REFUSED(&no_bit2, in, 5, &got, AMK_INST_ERR_PARAM,
          "gemv_tile: attention_o: flags bits 0-15 are 0, want 4 (bit 2 alone: row pos from "
          "qkv, the whole window)");
  AmkInstParams partial = ok;
  set_int(&partial, "flags", (int64_t)AMK_PATTERN_ATTENTION_O << AMK_PATTERN_SHIFT | 6);
  REFUSED(&partial, in, 5, &got, AMK_INST_ERR_PARAM,
          "gemv_tile: attention_o: flags bits 0-15 are 6, want 4 (bit 2 alone: row pos from "
          "qkv, the whole window)");
  /* The attention's own checks, as attention_rope's, under this pattern's
   * name: a window past the step's row, a missing param. */
  AmkInstParams beyond = ok;
  set_int(&beyond, "kv_len", OPOS + 2);
  REFUSED(&beyond, in, 5, &got, AMK_INST_ERR_INDEX,
          "gemv_tile: attention_o: window [0, 5) reaches past the step's row 3 (flags bit 2 "
          "takes row pos from qkv and reads the cache below it)");
  AmkInstParams no_scale = attention_o_params(OHD, 2);
  no_scale.present &= ~AMK_PARAM_BIT(scale);
  REFUSED(&no_scale, in, 5, &got, AMK_INST_ERR_PARAM, "gemv_tile: missing param 'scale'");
  CHECK(c, same(&before, &got));
  /* The output is the f32 accumulator [1, hidden]. */
  T bf16_out = mat(dt, 1, OHID, 0, &seed), bf16_before = copy_of(&bf16_out);
  REFUSED(&ok, in, 5, &bf16_out, AMK_INST_ERR_DTYPE,
          "gemv_tile: attention_o: output is bf16 with 8 elements, want the f32 accumulator "
          "[1, hidden] with hidden = 8");
  CHECK(c, same(&bf16_before, &bf16_out));
  T long_out = mat(AMK_DTYPE_F32, 1, OHID + 1, 1.0f, &seed), long_before = copy_of(&long_out);
  REFUSED(&ok, in, 5, &long_out, AMK_INST_ERR_SHAPE,
          "gemv_tile: attention_o: output is f32 with 9 elements, want the f32 accumulator "
          "[1, hidden] with hidden = 8");
  CHECK(c, same(&long_before, &long_out));
#undef REFUSED
  DROP_ALL(&qkv, &cache, &wot, &x, &got, &before, &bf16_out, &bf16_before, &long_out,
           &long_before);
}

/* ---- mlp on the reference VM: the accumulator of every step ------------------ */

/* examples/llama-tiny (f32) through import, tile (GEMV tiles of 2 columns:
 * enough tasks for the VM's worker threads), fuse with `fusion` and
 * sm-assign, as a plan with its weights; false after a failure. */
typedef struct {
  AmkModule *m;
  AmkPipeline *pl;
  AmkPlan *plan;
  AmkWeights *w;
} TinyProgram;

static bool tiny_program(const char *fusion, AmkDiagEngine *d, TinyProgram *t) {
  const char *folder = AMK_SOURCE_DIR "/examples/llama-tiny";
  *t = (TinyProgram){amk_module_new(), amk_pipeline_new(), NULL, NULL};
  t->m->model_dir = amk_arena_strdup(&t->m->arena, folder);
  AmkPipelineRunOptions run = {0};
  if (!amk_pipeline_parse(t->pl, "import,tile,fuse,sm-assign", d) ||
      !amk_pipeline_set_option(t->pl, "gemv-n-tile", "2", d) ||
      !amk_pipeline_set_option(t->pl, "max-seq", "16", d) ||
      !amk_pipeline_set_option(t->pl, "fusion", fusion, d) ||
      amk_pipeline_run(t->pl, t->m, d, &run).status != AMK_PIPELINE_OK ||
      !(t->plan = amk_plan_build(t->m, NULL, d)))
    return false;
  t->w = amk_weights_load(t->plan, folder, d);
  return t->w != NULL;
}

static void tiny_free(TinyProgram *t) {
  amk_weights_free(t->w);
  amk_plan_free(t->plan);
  amk_pipeline_free(t->pl);
  amk_module_free(t->m);
}

enum { TINY_STEPS = 5 };

/* The logits of steps 0..TINY_STEPS-1 into logits[step * vocab + v]. */
static bool tiny_decode(AmkVm *vm, size_t vocab, float *logits, AmkDiagEngine *d) {
  static const int32_t tokens[TINY_STEPS] = {1, 17, 42, 99, 3};
  for (int64_t pos = 0; pos < TINY_STEPS; pos++) {
    size_t n = 0;
    if (!amk_vm_step(vm, tokens[pos], pos, d))
      return false;
    const float *l = amk_vm_logits(vm, &n);
    if (n != vocab)
      return false;
    memcpy(logits + pos * vocab, l, vocab * sizeof *l);
  }
  return true;
}

/* The default fusions: every group but split_o, so the MLPs alone become
 * accumulating tiles. */
#define FUSIONS_SPLIT_DOWN                                                     \
  "rmsnorm+gemv,gemv+add,gate+up,silu_mul+gemv,qkv,rope+kv_append,"            \
  "rope+attention,combine+gemv,split_down"

/* A program whose MLPs are mlp tiles (and, with `split_o`, whose attention
 * and o projection are attention_o tiles) decodes, step after step, as its
 * unfused form does up to fp32 summation order: the VM starts every
 * step's accumulators at zero (a second decode after a reset repeats the
 * first bit for bit), and its worker threads give the bits of one thread
 * (the tiles' shares added in task order, whichever finishes first). */
static void test_accumulating_vm(UnitCounts *c, bool split_o) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  TinyProgram split, plain;
  bool built = tiny_program(split_o ? FUSIONS_SPLIT_DOWN ",split_o" : FUSIONS_SPLIT_DOWN, d,
                            &split) &&
               tiny_program("none", d, &plain);
  CHECK(c, built);
  if (!built) {
    tiny_free(&split);
    tiny_free(&plain);
    amk_diag_free(d);
    return;
  }
  uint32_t accumulators = 0, tiles[AMK_PATTERN_COUNT] = {0};
  for (uint32_t b = 0; b < split.plan->n_buffers; b++)
    accumulators += split.plan->buffers[b].accumulate;
  for (uint32_t t = 0; t < split.m->n_tasks; t++) {
    int64_t flags = 0;
    if (split.m->tasks[t].op == AMK_OP_GEMV_TILE &&
        amk_task_param_int(&split.m->tasks[t], "flags", &flags) && flags >= 0 &&
        flags >> AMK_PATTERN_SHIFT < AMK_PATTERN_COUNT)
      tiles[flags >> AMK_PATTERN_SHIFT]++;
  }
  /* Per layer (2): the MLP's output (I = 160 in tiles of 2 columns), and
   * with split_o the attention block's (one tile or more per query head,
   * none of the attention_rope and residual tiles left). */
  CHECK(c, accumulators == (split_o ? 4u : 2u) && tiles[AMK_PATTERN_MLP] == 2 * 160 / 2);
  if (split_o)
    CHECK(c, tiles[AMK_PATTERN_ATTENTION_O] >= 2 * 4 && tiles[AMK_PATTERN_ATTENTION_ROPE] == 0 &&
                 tiles[AMK_PATTERN_RESIDUAL] == 0);
  else
    CHECK(c, tiles[AMK_PATTERN_ATTENTION_O] == 0 && tiles[AMK_PATTERN_ATTENTION_ROPE] > 0);
  CHECK(c, split.m->n_tasks >= 256); /* the pool fires them */
  size_t vocab = (size_t)split.plan->vocab, n = TINY_STEPS * vocab;
  float *want = calloc(4 * n, sizeof *want), *one = want + n, *again = one + n, *four = again + n;
  AmkVm *vm_plain = amk_vm_create(plain.plan, plain.w, 1, d);
  AmkVm *vm_one = amk_vm_create(split.plan, split.w, 1, d);
  AmkVm *vm_four = amk_vm_create(split.plan, split.w, 4, d);
  CHECK(c, vm_plain && vm_one && vm_four);
  if (vm_plain && vm_one && vm_four) {
    CHECK(c, tiny_decode(vm_plain, vocab, want, d));
    CHECK(c, tiny_decode(vm_one, vocab, one, d));
    amk_vm_reset(vm_one);
    CHECK(c, tiny_decode(vm_one, vocab, again, d));
    CHECK(c, tiny_decode(vm_four, vocab, four, d));
    CHECK(c, same_bits(one, again, n * sizeof *one));
    CHECK(c, same_bits(one, four, n * sizeof *one));
    bool close = true;
    for (size_t i = 0; i < n; i++)
      close = close && near(one[i], want[i], 1e-4) && near(four[i], want[i], 1e-4);
    CHECK(c, close);
  }
  amk_vm_free(vm_plain);
  amk_vm_free(vm_one);
  amk_vm_free(vm_four);
  free(want);
  tiny_free(&split);
  tiny_free(&plain);
  amk_diag_free(d);
}

/* The plan of a program with attention_o tiles: their outputs are
 * accumulators, their params follow the step's window (the attention's
 * position), and what they may prefetch is their block of Wot's rows, each
 * `hidden` elements long (not K, the qkv width). Built trusting the
 * validator, a program whose accumulator is not f32, or that another task
 * writes, is refused by the plan itself. */
static void test_attention_o_plan(UnitCounts *c) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  TinyProgram t;
  bool built = tiny_program(FUSIONS_SPLIT_DOWN ",split_o", d, &t);
  CHECK(c, built);
  if (!built) {
    tiny_free(&t);
    amk_diag_free(d);
    return;
  }
  const AmkPlan *p = t.plan;
  uint32_t tiles = 0, followed = 0, prefetched = 0, accumulate = 0;
  int32_t acc = -1, other = -1; /* an accumulator's id, a task that is no tile of it */
  for (uint32_t i = 0; i < p->n_tasks; i++) {
    const AmkPlanTask *pt = &p->tasks[i];
    int64_t pattern = amk_inst_param_has(&pt->params, AMK_PARAM_flags)
                          ? (int64_t)((uint32_t)pt->params.flags.i >> AMK_PATTERN_SHIFT)
                          : 0;
    if (pt->op != AMK_OP_GEMV_TILE || pattern != AMK_PATTERN_ATTENTION_O) {
      if (other < 0 && pt->op == AMK_OP_GEMV_TILE && pattern == AMK_PATTERN_ROPE_KV)
        other = (int32_t)i;
      continue;
    }
    tiles++;
    followed += pt->follow == AMK_PLAN_FOLLOW_WINDOW;
    accumulate += p->buffers[pt->outputs[0]].accumulate;
    acc = t.m->buffers[pt->outputs[0]].id;
    const AmkPlanBuffer *wot = &p->buffers[pt->inputs[1]];
    int64_t hidden = wot->shape[wot->rank - 1];
    int64_t row = amk_dtype_nbytes(wot->dtype, hidden);
    prefetched += pt->weight_read.buffer == (int32_t)pt->inputs[1] &&
                  pt->weight_read.offset == pt->params.n_off.i * row &&
                  pt->weight_read.nbytes == pt->params.N_tile.i * row && hidden == 64;
    /* The window follows the position; the other params stay. */
    AmkInstParams at5 = amk_plan_params_at(p, i, 5);
    CHECK(c, at5.kv_start.i == 0 && at5.kv_len.i == 6 && at5.n_off.i == pt->params.n_off.i);
  }
  CHECK(c, tiles > 0 && followed == tiles && prefetched == tiles && accumulate == tiles);
  CHECK(c, acc >= 0 && other >= 0);
  if (acc >= 0 && other >= 0) {
    AmkPlanOptions trusted = {.already_validated = true};
    AmkDiagEngine *quiet = amk_diag_new(stderr);
    amk_diag_set_capture(quiet, 1);
    AmkBuffer *ab = NULL;
    for (uint32_t b = 0; b < t.m->n_buffers; b++)
      if (t.m->buffers[b].id == acc)
        ab = &t.m->buffers[b];
    char want[256];
    /* A bf16 accumulator. */
    ab->dtype = AMK_DTYPE_BF16;
    AmkPlan *refused = amk_plan_build(t.m, &trusted, quiet);
    CHECK(c, refused == NULL && amk_diag_captured_count(quiet) == 1);
    snprintf(want, sizeof want,
             "accumulator '%s' is bf16; accumulating tiles (mlp, attention_o) add into f32",
             ab->name);
    if (amk_diag_captured_count(quiet) == 1)
      CHECK_STR(c, amk_diag_captured(quiet, 0)->message, want);
    amk_plan_free(refused);
    ab->dtype = AMK_DTYPE_F32;
    amk_diag_clear_captured(quiet);
    /* A rope_kv task writing it too. */
    AmkTask *writer = &t.m->tasks[other];
    int32_t kept = writer->outputs[0];
    writer->outputs[0] = acc;
    refused = amk_plan_build(t.m, &trusted, quiet);
    CHECK(c, refused == NULL && amk_diag_captured_count(quiet) == 1);
    snprintf(want, sizeof want,
             "task %d ('%s') writes accumulator '%s', which only accumulating tiles (mlp, "
             "attention_o) may write",
             writer->id, writer->label, ab->name);
    if (amk_diag_captured_count(quiet) == 1)
      CHECK_STR(c, amk_diag_captured(quiet, 0)->message, want);
    amk_plan_free(refused);
    writer->outputs[0] = kept;
    amk_diag_free(quiet);
  }
  tiny_free(&t);
  amk_diag_free(d);
}

static void test_unknown_pattern(UnitCounts *c) {
  char err[256];
  float x[2] = {1, 2}, w[4] = {1, 0, 0, 1}, out[2] = {0};
  AmkTensorView in[2] = {view2(x, AMK_DTYPE_F32, 1, 2), view2(w, AMK_DTYPE_F32, 2, 2)};
  AmkTensorView o = view2(out, AMK_DTYPE_F32, 1, 2);
  AmkInstParams p = gemv_params(AMK_PATTERN_COUNT, 2, 0, 2);
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, in, 2, &o, AMK_INST_ERR_PARAM);
  CHECK_STR(c, err, "gemv_tile: unknown fused pattern 11 (flags >> 16)");
  set_int(&p, "flags", -1);
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, in, 2, &o, AMK_INST_ERR_PARAM);
  /* Low flag bits alone keep the plain GEMV. */
  set_int(&p, "flags", 3);
  CHECK_RUN(c, AMK_OP_GEMV_TILE, &p, in, 2, &o, 0);
  CHECK(c, out[0] == 1.0f && out[1] == 2.0f);
}

int main(void) {
  UnitCounts c = {0};
  const AmkDType dtypes[2] = {AMK_DTYPE_F32, AMK_DTYPE_BF16};
  for (int d = 0; d < 2; d++) {
    AmkDType dt = dtypes[d];
    test_norm(&c, dt);
    test_residual_silu(&c, dt, AMK_PATTERN_RESIDUAL);
    test_residual_silu(&c, dt, AMK_PATTERN_SILU);
    test_residual_silu(&c, dt, AMK_PATTERN_SILU_RESIDUAL);
    test_rope_kv(&c, dt, false);
    test_rope_kv(&c, dt, true);
    for (int rope = 0; rope < 2; rope++)
      for (int partial = 0; partial < 2; partial++)
        test_attention(&c, dt, rope, partial);
    for (uint32_t n = 1; n <= AMK_MAX_INPUTS - 2; n++)
      test_combine_residual(&c, dt, n);
    for (uint32_t n = 1; n <= AMK_MAX_INPUTS - 3; n++) {
      test_combine_residual_quantized(&c, dt, n, AMK_QDTYPE_INT8);
      test_combine_residual_quantized(&c, dt, n, AMK_QDTYPE_INT4);
    }
    const int64_t gemv_patterns[4] = {AMK_PATTERN_NORM, AMK_PATTERN_RESIDUAL,
                                      AMK_PATTERN_SILU, AMK_PATTERN_SILU_RESIDUAL};
    for (int i = 0; i < 4; i++) {
      test_quantized(&c, dt, gemv_patterns[i], AMK_QDTYPE_INT8);
      test_quantized(&c, dt, gemv_patterns[i], AMK_QDTYPE_INT4);
    }
    test_mlp(&c, dt);
    test_attention_o(&c, dt);
  }
  test_mlp_errors(&c);
  test_attention_o_errors(&c);
  test_accumulating_vm(&c, false);
  test_accumulating_vm(&c, true);
  test_attention_o_plan(&c);
  test_combine_residual_errors(&c);
  test_unknown_pattern(&c);
  return unit_finish("test_inst_patterns", &c);
}
