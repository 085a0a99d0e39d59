/* Random weights of transposed sources (KEY^T): a tensor-parallel rank's
 * slice of a transposed buffer is the same rows of the unsharded
 * program's (amk_weights_random_slices, whose ranges index the tensor
 * before its transpose); where the unsharded program holds the tensor
 * untransposed, a transposed part is the transpose of its slice (never its
 * numbers in place), and an untransposed part is never taken from a
 * transposed buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/io.h"
#include "amk/plan.h"
#include "amk/weights.h"
#include "unit.h"

/* A program of one f32 weight `w` [rows, cols] with `source`, read by a
 * GEMV into the logits. */
static AmkModule *program(const char *source, int64_t rows, int64_t cols) {
  char text[1024];
  snprintf(text, sizeof text,
           "amkir 0.2.0, abi 0.2\n"
           "buffer %%token_id : i32[1] io_input\n"
           "buffer %%x : f32[1, %lld] io_input\n"
           "buffer %%w : f32[%lld, %lld] weight source \"%s\"\n"
           "buffer %%logits : f32[1, %lld] io_output\n"
           "counter #logits \"logits\"\n"
           "task 0 gemv_tile(%%x, %%w) -> %%logits signal #logits "
           "{K = %lld, N_tile = %lld, n_off = 0} label \"logits\"\n",
           (long long)cols, (long long)rows, (long long)cols, source, (long long)rows,
           (long long)cols, (long long)rows);
  AmkDiagEngine *d = amk_diag_new(stderr);
  AmkModule *m = amk_parse_text("<test>", text, strlen(text), d);
  amk_diag_free(d);
  return m;
}

typedef struct {
  AmkModule *m;
  AmkPlan *plan;
} Program;

static Program build(const char *source, int64_t rows, int64_t cols) {
  Program p = {program(source, rows, cols), NULL};
  AmkDiagEngine *d = amk_diag_new(stderr);
  p.plan = p.m ? amk_plan_build(p.m, NULL, d) : NULL;
  amk_diag_free(d);
  return p;
}

static void drop(Program *p) {
  amk_plan_free(p->plan);
  amk_module_free(p->m);
}

static int32_t weight_buffer(const AmkPlan *p) {
  for (uint32_t b = 0; b < p->n_buffers; b++)
    if (strcmp(p->m->buffers[b].name, "w") == 0)
      return (int32_t)b;
  return -1;
}

/* The random weights of the whole program and the rank's slices of them,
 * and each one's w. */
typedef struct {
  AmkWeights *whole, *rank;
  const float *full, *part;
  const AmkPlanBuffer *full_buf, *part_buf;
} RandomPair;

static bool random_pair(const Program *whole, const Program *rank, uint64_t seed,
                        RandomPair *p) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  p->whole = amk_weights_random(whole->plan, seed, d);
  p->rank = amk_weights_random_slices(rank->plan, whole->plan, seed, d);
  amk_diag_free(d);
  if (!p->whole || !p->rank)
    return false;
  int32_t wb = weight_buffer(whole->plan), rb = weight_buffer(rank->plan);
  p->full_buf = &whole->plan->buffers[wb];
  p->part_buf = &rank->plan->buffers[rb];
  p->full = amk_weights_data(p->whole, (uint32_t)wb, NULL);
  p->part = amk_weights_data(p->rank, (uint32_t)rb, NULL);
  return true;
}

static void random_pair_free(RandomPair *p) {
  amk_weights_free(p->rank);
  amk_weights_free(p->whole);
}

/* The rank's w equals rows [row0, row0 + rank rows) and columns
 * [col0, col0 + rank cols) of the whole program's w. */
static bool rank_is_window(const Program *whole, const Program *rank, int64_t row0, int64_t col0,
                           uint64_t seed) {
  RandomPair p;
  bool same = random_pair(whole, rank, seed, &p);
  for (int64_t r = 0; same && r < p.part_buf->shape[0]; r++)
    for (int64_t c = 0; same && c < p.part_buf->shape[1]; c++)
      same = p.part[r * p.part_buf->shape[1] + c] ==
             p.full[(row0 + r) * p.full_buf->shape[1] + col0 + c];
  random_pair_free(&p);
  return same;
}

/* The rank's w (square) is the transpose of the whole program's w. */
static bool rank_is_transpose(const Program *whole, const Program *rank, uint64_t seed) {
  RandomPair p;
  bool same = random_pair(whole, rank, seed, &p);
  int64_t n = same ? p.full_buf->shape[0] : 0;
  for (int64_t r = 0; same && r < n; r++)
    for (int64_t k = 0; same && k < n; k++)
      same = p.part[r * n + k] == p.full[k * n + r];
  random_pair_free(&p);
  return same;
}

/* No random slices for `rank`, with the loader's reason. */
static bool slices_refused(const Program *whole, const Program *rank) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);
  AmkWeights *rw = amk_weights_random_slices(rank->plan, whole->plan, 7, d);
  bool refused = rw == NULL && amk_diag_captured_count(d) == 1 &&
                 strstr(amk_diag_captured(d, 0)->message,
                        "is not made of slices of the random buffers") != NULL;
  amk_weights_free(rw);
  amk_diag_free(d);
  return refused;
}

static void test_transposed_slices(UnitCounts *c) {
  /* The tensor w is [6, 10]; w^T fills [10, 6]. */
  Program whole = build("w^T", 10, 6);
  /* Tensor columns [4, 8) are rows [4, 8) of w^T. */
  Program cols = build("w[:, 4:8]^T", 4, 6);
  /* Tensor rows [2, 5) are columns [2, 5) of w^T. */
  Program rows = build("w[2:5]^T", 10, 3);
  Program both = build("w[1:3, 5:9]^T", 4, 2);
  CHECK(c, whole.plan && cols.plan && rows.plan && both.plan);
  if (whole.plan && cols.plan && rows.plan && both.plan) {
    CHECK(c, rank_is_window(&whole, &cols, 4, 0, 7));
    CHECK(c, rank_is_window(&whole, &rows, 0, 2, 7));
    CHECK(c, rank_is_window(&whole, &both, 5, 1, 7));
  }
  drop(&both);
  drop(&rows);
  drop(&cols);
  drop(&whole);
}

static void test_transpose_must_match(UnitCounts *c) {
  /* Same key, same shape: w^T [6, 6] is w's random numbers transposed, not
   * in place; an untransposed w is no slice of a whole w^T. */
  Program plain = build("w", 6, 6), transposed = build("w^T", 6, 6);
  CHECK(c, plain.plan && transposed.plan);
  if (plain.plan && transposed.plan) {
    CHECK(c, rank_is_transpose(&plain, &transposed, 7));
    CHECK(c, slices_refused(&transposed, &plain));
  }
  drop(&transposed);
  drop(&plain);
}

UNIT_MAIN("test_weights_transposed", test_transposed_slices, test_transpose_must_match)
