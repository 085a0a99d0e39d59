/* Loading the weights of a plan (include/amk/weights.h). */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amk/numerics.h"
#include "amk/progress.h"
#include "amk/quantize.h"
#include "amk/safetensors.h"
#include "amk/sampling.h"
#include "amk/tp.h"
#include "amk/weights.h"

/* splitmix64 advances its state by this constant per output. */
#define SPLITMIX64_GAMMA 0x9e3779b97f4a7c15ull

typedef struct {
  AmkWeightsOrigin origin;
  /* Into owned, the mapping or the plan; NULL until first asked for when
   * the bytes are made on demand (RANDOM, JOINED). */
  const void *data;
  void *owned;
  size_t nbytes;
  AmkRandomRule rule;     /* AMK_WEIGHTS_RANDOM */
  AmkWeightPiece *pieces; /* AMK_WEIGHTS_MAPPED (one) and AMK_WEIGHTS_JOINED */
  uint32_t n_pieces;
  /* amk_weights_share of bytes the lender makes on demand: its buffer
   * lender_buffer from lender_offset, resolved when first asked for (a GPU
   * prefill engine borrows the device copies and never asks). */
  const struct AmkWeights *lender;
  uint32_t lender_buffer;
  int64_t lender_offset;
  /* AMK_WEIGHTS_REORDERED: columns [0, width) of a matrix of `height` rows
   * of `stride` elements (`elem` bytes) at reorder_from, transposed when
   * reorder_transpose; with reorder_from NULL, the lender's buffer
   * lender_buffer (that shape) transposed, lent while it is copied. */
  const char *reorder_from;
  int64_t reorder_height, reorder_width, reorder_stride;
  size_t reorder_elem;
  bool reorder_transpose;
  /* A host copy made on demand (RANDOM, JOINED, REORDERED) stays once
   * amk_weights_data has handed it out (pinned); one only lent
   * (amk_weights_lend) goes when the last lend is returned. */
  bool pinned;
  uint32_t lent;
} WeightBuffer;

struct AmkWeights {
  const AmkPlan *plan;
  WeightBuffer *buffers;
  /* Column slices (KEY[:, B:E]) and transposed parts (KEY^T) copied out of
   * the checkpoint for a '+'-joined buffer that keeps them as pieces: they
   * live as long as the weights. (A buffer that is one such part is
   * REORDERED, copied on demand; one converted from it drops its copy.) */
  void **scratch;
  size_t *scratch_bytes;
  uint32_t n_scratch;
  AmkSafetensors *checkpoint; /* kept open while a buffer points into it */
};

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

void amk_weights_free(AmkWeights *w) {
  if (!w)
    return;
  if (w->buffers)
    for (uint32_t b = 0; b < w->plan->n_buffers; b++) {
      free(w->buffers[b].owned);
      free(w->buffers[b].pieces);
    }
  free(w->buffers);
  for (uint32_t i = 0; i < w->n_scratch; i++)
    free(w->scratch[i]);
  free(w->scratch);
  free(w->scratch_bytes);
  amk_safetensors_close(w->checkpoint);
  free(w);
}

static bool is_loaded(const AmkPlanBuffer *pb) {
  return (pb->kind == AMK_KIND_WEIGHT || pb->kind == AMK_KIND_CONST) && !pb->synthetic;
}

/* The weights with every synthetic CONST bound to the plan's contents;
 * *needs_loading tells whether any other WEIGHT/CONST buffer remains. */
static AmkWeights *weights_new(const AmkPlan *plan, bool *needs_loading) {
  AmkWeights *w = amk_xcalloc(1, sizeof *w);
  w->plan = plan;
  w->buffers = amk_xcalloc(plan->n_buffers ? plan->n_buffers : 1, sizeof *w->buffers);
  *needs_loading = false;
  for (uint32_t b = 0; b < plan->n_buffers; b++) {
    const AmkPlanBuffer *pb = &plan->buffers[b];
    if (pb->synthetic) {
      w->buffers[b] = (WeightBuffer){.origin = AMK_WEIGHTS_SYNTHETIC, .data = pb->synthetic,
                                     .nbytes = (size_t)pb->nbytes};
    } else if (is_loaded(pb)) {
      *needs_loading = true;
    }
  }
  return w;
}

/* A zeroed host copy of buffer b. */
static void *own_copy(AmkWeights *w, uint32_t b, AmkWeightsOrigin origin) {
  const AmkPlanBuffer *pb = &w->plan->buffers[b];
  WeightBuffer *wb = &w->buffers[b];
  wb->owned = amk_xcalloc(1, (size_t)(pb->nbytes > 0 ? pb->nbytes : 1));
  wb->data = wb->owned;
  wb->nbytes = (size_t)pb->nbytes;
  wb->origin = origin;
  return wb->owned;
}

/* ---- work split over threads ------------------------------------------------------ */

/* fn(ctx, begin, end) over stretches that together cover [0, n). */
typedef void (*RangeFn)(void *ctx, int64_t begin, int64_t end);

typedef struct {
  RangeFn fn;
  void *ctx;
  int64_t begin, end;
} RangeJob;

static void *range_job(void *arg) {
  RangeJob *j = arg;
  j->fn(j->ctx, j->begin, j->end);
  return NULL;
}

/* Large buffers are filled by several threads (the 8B shape has 8 G
 * elements); callers make results that do not depend on the split. */
enum { THREADS_MAX = 32 };

static void parallel_ranges(int64_t n, int64_t min_per_thread, RangeFn fn, void *ctx) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t threads = n / (min_per_thread > 0 ? min_per_thread : 1);
  if (threads > cpus)
    threads = cpus;
  if (threads > THREADS_MAX)
    threads = THREADS_MAX;
  if (threads <= 1) {
    fn(ctx, 0, n);
    return;
  }
  RangeJob jobs[THREADS_MAX];
  pthread_t tids[THREADS_MAX];
  bool started[THREADS_MAX];
  int64_t per = (n + threads - 1) / threads;
  for (int64_t k = 0; k < threads; k++) {
    int64_t begin = k * per, end = begin + per < n ? begin + per : n;
    jobs[k] = (RangeJob){fn, ctx, begin, end};
    started[k] = pthread_create(&tids[k], NULL, range_job, &jobs[k]) == 0;
    if (!started[k])
      range_job(&jobs[k]); /* no thread to be had: do it here */
  }
  for (int64_t k = 0; k < threads; k++)
    if (started[k])
      pthread_join(tids[k], NULL);
}

/* ---- random ------------------------------------------------------------------- */

static bool is_float(AmkDType d) {
  return d == AMK_DTYPE_F32 || d == AMK_DTYPE_BF16 || d == AMK_DTYPE_F16;
}

/* Elements [begin, end) of the rule's stream into dst (which holds element
 * `begin` first): splitmix64 is a counter (output i mixes
 * state + (i + 1) * gamma), so any stretch starts on its own. */
static void random_fill_range(const AmkRandomRule *rule, AmkDType dtype, int64_t begin,
                              int64_t end, void *dst) {
  uint64_t state = rule->state + (uint64_t)begin * SPLITMIX64_GAMMA;
  for (int64_t i = 0; i < end - begin; i++) {
    double u = (double)(amk_splitmix64(&state) >> 11) * (1.0 / 9007199254740992.0);
    float v = (float)(rule->center + rule->scale * (2.0 * u - 1.0));
    switch (dtype) {
    case AMK_DTYPE_F32:
      ((float *)dst)[i] = v;
      break;
    case AMK_DTYPE_BF16:
      ((uint16_t *)dst)[i] = amk_f32_to_bf16(v);
      break;
    case AMK_DTYPE_F16:
      ((uint16_t *)dst)[i] = amk_f32_to_f16(v);
      break;
    default:
      return; /* no random rule for other dtypes: they stay zero */
    }
  }
}

typedef struct {
  const AmkRandomRule *rule;
  AmkDType dtype;
  char *dst;
  int64_t elem;
} FillJob;

static void fill_range(void *arg, int64_t begin, int64_t end) {
  FillJob *j = arg;
  random_fill_range(j->rule, j->dtype, begin, end, j->dst + begin * j->elem);
}

void amk_random_fill(const AmkRandomRule *rule, AmkDType dtype, int64_t numel, void *dst) {
  FillJob job = {rule, dtype, dst, amk_dtype_nbytes(dtype, 1)};
  parallel_ranges(numel, 1 << 20, fill_range, &job);
}

/* ---- quantizing ---------------------------------------------------------------- */

/* Rows of one matrix quantized into a WEIGHT buffer and its scales; the
 * fp32 rows come from a checkpoint tensor or a random rule. */
typedef struct {
  const AmkStTensor *tensor; /* or NULL: */
  const AmkRandomRule *rule;
  int64_t cols, group, groups, row_bytes;
  int bits;
  AmkDType scales_dtype;
  uint8_t *q;    /* row 0 of the rows quantized */
  char *scales;  /* its scales */
  pthread_mutex_t lock;
  int64_t bad_row; /* the first row that has no quantized form, or -1 */
  AmkProgress *progress; /* counts each row's weight and scale bytes */
} QuantJob;

static void quantize_range(void *arg, int64_t begin, int64_t end) {
  QuantJob *j = arg;
  float *row = amk_xmalloc((size_t)j->cols * sizeof *row);
  uint16_t *scales = amk_xmalloc((size_t)j->groups * sizeof *scales);
  int64_t scale_bytes = amk_dtype_nbytes(j->scales_dtype, 1);
  for (int64_t r = begin; r < end; r++) {
    if (j->tensor)
      amk_safetensors_read_f32(j->tensor, r * j->cols, j->cols, row);
    else
      random_fill_range(j->rule, AMK_DTYPE_F32, r * j->cols, (r + 1) * j->cols, row);
    if (!amk_quantize_row(row, j->cols, j->bits, j->group, j->q + r * j->row_bytes, scales)) {
      pthread_mutex_lock(&j->lock);
      if (j->bad_row < 0 || r < j->bad_row)
        j->bad_row = r;
      pthread_mutex_unlock(&j->lock);
      break;
    }
    /* The quantizer's scales are fp16; f32 holds them exactly. */
    char *dst = j->scales + r * j->groups * scale_bytes;
    for (int64_t g = 0; g < j->groups; g++) {
      float f = amk_f16_to_f32(scales[g]);
      if (j->scales_dtype == AMK_DTYPE_F16)
        memcpy(dst + g * 2, &scales[g], 2);
      else if (j->scales_dtype == AMK_DTYPE_BF16)
        ((uint16_t *)dst)[g] = amk_f32_to_bf16(f);
      else
        memcpy(dst + g * 4, &f, 4);
    }
    amk_progress_add(j->progress, j->row_bytes + j->groups * scale_bytes);
  }
  free(scales);
  free(row);
}

/* Quantizes `rows` fp32 rows (from `tensor`, or from `rule` when NULL) into
 * rows [row0, row0 + rows) of WEIGHT buffer b and of its scales, making
 * both host copies on first use. Returns the first row (of the stretch)
 * with no quantized form, or -1. */
static int64_t quantize_rows(AmkWeights *w, uint32_t b, const AmkStTensor *tensor,
                             const AmkRandomRule *rule, int64_t row0, int64_t rows,
                             AmkProgress *progress) {
  const AmkPlanBuffer *pb = &w->plan->buffers[b];
  const AmkPlanQuant *quant = &pb->quant;
  uint32_t s = (uint32_t)quant->partner;
  if (!w->buffers[b].owned)
    own_copy(w, b, AMK_WEIGHTS_QUANTIZED);
  if (!w->buffers[s].owned)
    own_copy(w, s, AMK_WEIGHTS_QUANTIZED);
  int bits = quant->qdtype == AMK_QDTYPE_INT8 ? 8 : 4;
  QuantJob job = {.tensor = tensor,
                  .rule = rule,
                  .cols = quant->cols,
                  .group = quant->group,
                  .groups = amk_quant_groups(quant->cols, quant->group),
                  .row_bytes = amk_quant_row_bytes(bits, quant->cols),
                  .bits = bits,
                  .scales_dtype = w->plan->buffers[s].dtype,
                  .bad_row = -1,
                  .progress = progress};
  job.q = (uint8_t *)w->buffers[b].owned + row0 * job.row_bytes;
  job.scales = (char *)w->buffers[s].owned +
               row0 * job.groups * amk_dtype_nbytes(job.scales_dtype, 1);
  pthread_mutex_init(&job.lock, NULL);
  parallel_ranges(rows, (1 << 20) / (job.cols > 0 ? job.cols : 1) + 1, quantize_range, &job);
  pthread_mutex_destroy(&job.lock);
  return job.bad_row;
}

/* The row layout quantize_rows writes: one weight row and its scale row per
 * matrix row, in buffers the shapes of which say so (the validator checks
 * it; a program built without it is refused here rather than overrun). */
static bool quant_layout_fits(const AmkWeights *w, uint32_t b, AmkDiagEngine *diag) {
  const AmkPlanBuffer *pb = &w->plan->buffers[b];
  const AmkPlanBuffer *sb = &w->plan->buffers[pb->quant.partner];
  int bits = pb->quant.qdtype == AMK_QDTYPE_INT8 ? 8 : 4;
  int64_t rows = pb->rank ? pb->shape[0] : 0;
  int64_t groups = amk_quant_groups(pb->quant.cols, pb->quant.group);
  if (pb->rank >= 1 && rows > 0 && pb->nbytes == rows * amk_quant_row_bytes(bits, pb->quant.cols) &&
      sb->numel == rows * groups)
    return true;
  const AmkModule *m = w->plan->m;
  amk_error(diag, no_loc(),
            "buffers '%s' and '%s' do not hold %" PRId64 " rows of K = %" PRId64
            " quantized weights and ceil(K/group) = %" PRId64 " scales",
            m->buffers[b].name, m->buffers[pb->quant.partner].name, rows, pb->quant.cols,
            groups);
  return false;
}

static void report_unquantizable(const char *what, int64_t row, AmkDiagEngine *diag) {
  amk_error(diag, no_loc(),
            "%s: row %" PRId64 " has a non-finite weight, or one too large for an fp16 scale; "
            "it has no quantized form",
            what, row);
}

/* The bytes of the quantized weights and their scales, which are made as
 * the weights load (the slow part of a load). */
static int64_t quantized_bytes(const AmkPlan *plan) {
  int64_t total = 0;
  for (uint32_t b = 0; b < plan->n_buffers; b++)
    if (is_loaded(&plan->buffers[b]) && plan->buffers[b].quant.role != AMK_PLAN_QUANT_NONE)
      total += plan->buffers[b].nbytes;
  return total;
}

/* The columns of one matrix row of buffer b as amk_weights_random counts
 * them (the quantized weights' K, a matrix's last dim, else every element). */
static int64_t random_cols(const AmkPlanBuffer *pb) {
  return pb->quant.role == AMK_PLAN_QUANT_WEIGHT ? pb->quant.cols
         : pb->rank >= 2                         ? pb->shape[pb->rank - 1]
                                                 : pb->numel;
}

/* The first buffer before b that amk_weights_random fills with b's source
 * and the same matrix (rows and columns), or -1. */
static int64_t same_tensor_before(const AmkPlan *plan, uint32_t b, int64_t cols) {
  const AmkPlanBuffer *pb = &plan->buffers[b];
  const char *src = plan->m->buffers[b].source;
  if (!src)
    return -1;
  int64_t rows =
      pb->quant.role == AMK_PLAN_QUANT_WEIGHT ? pb->shape[0] : pb->numel / (cols ? cols : 1);
  for (uint32_t e = 0; e < b; e++) {
    const AmkPlanBuffer *eb = &plan->buffers[e];
    const char *esrc = plan->m->buffers[e].source;
    if (!is_loaded(eb) || eb->quant.role == AMK_PLAN_QUANT_SCALES || !esrc ||
        strcmp(esrc, src) != 0 || (eb->rank >= 2) != (pb->rank >= 2))
      continue;
    int64_t ecols = random_cols(eb);
    int64_t erows =
        eb->quant.role == AMK_PLAN_QUANT_WEIGHT ? eb->shape[0] : eb->numel / (ecols ? ecols : 1);
    if (ecols == cols && erows == rows)
      return e;
  }
  return -1;
}

AmkWeights *amk_weights_random(const AmkPlan *plan, uint64_t seed, AmkDiagEngine *diag) {
  bool needs_loading;
  AmkWeights *w = weights_new(plan, &needs_loading);
  /* Only quantizing takes time here; the rest is made on demand. */
  int64_t to_quantize = quantized_bytes(plan);
  AmkProgress *progress =
      to_quantize > 0 ? amk_progress_begin("amk: quantizing random weights", AMK_PROGRESS_BYTES,
                                           NULL, to_quantize)
                      : NULL;
  /* One stream over the buffers in list order: a buffer starts where the
   * previous one's elements left the state. Only the rules are made here;
   * the bytes come when an engine asks for them (the GPU fills its own).
   * Quantized weights are the quantized random matrix, made now (no engine
   * quantizes); their scales take no stretch of the stream. */
  uint64_t state = seed;
  uint64_t *rule_states =
      amk_xcalloc(plan->n_buffers ? plan->n_buffers : 1, sizeof *rule_states);
  for (uint32_t b = 0; b < plan->n_buffers; b++) {
    const AmkPlanBuffer *pb = &plan->buffers[b];
    if (!is_loaded(pb) || pb->quant.role == AMK_PLAN_QUANT_SCALES)
      continue;
    int64_t cols = random_cols(pb);
    /* A buffer of a source an earlier one took (a tied lm_head and the
     * embedding) is that tensor again, as a checkpoint would give it: the
     * same rule, no stretch of its own. Programs that borrow weights by
     * source (prefill) then see the numbers whichever buffer they find. */
    int64_t twin = same_tensor_before(plan, b, cols);
    uint64_t rule_state = twin >= 0 ? rule_states[twin] : state;
    rule_states[b] = rule_state;
    AmkRandomRule rule = {
        .state = rule_state,
        .center = pb->rank >= 2 ? 0.0 : 1.0,
        .scale = pb->rank >= 2 ? 1.0 / sqrt((double)(cols > 0 ? cols : 1)) : 0.1,
    };
    if (pb->quant.role == AMK_PLAN_QUANT_WEIGHT) {
      if (!quant_layout_fits(w, b, diag)) {
        amk_progress_end(progress);
        free(rule_states);
        amk_weights_free(w);
        return NULL;
      }
      int64_t rows = pb->shape[0];
      int64_t bad = quantize_rows(w, b, NULL, &rule, 0, rows, progress);
      if (bad >= 0) { /* random weights are finite and small: never */
        amk_progress_end(progress);
        report_unquantizable(plan->m->buffers[b].name, bad, diag);
        free(rule_states);
        amk_weights_free(w);
        return NULL;
      }
      if (twin < 0)
        state += (uint64_t)(rows * cols) * SPLITMIX64_GAMMA;
      continue;
    }
    w->buffers[b] = (WeightBuffer){.origin = AMK_WEIGHTS_RANDOM, .nbytes = (size_t)pb->nbytes,
                                   .rule = rule};
    if (twin < 0)
      state += (uint64_t)pb->numel * SPLITMIX64_GAMMA;
  }
  free(rule_states);
  amk_progress_end(progress);
  return w;
}

/* Where a part's buffer rows and columns start in its tensor (0 where it
 * takes them all): a transposed part's buffer rows are the tensor's
 * columns. */
static void part_origin(const AmkSourcePart *p, int64_t *row, int64_t *col) {
  int64_t tensor_row = p->row_begin >= 0 ? p->row_begin : 0;
  int64_t tensor_col = p->col_begin >= 0 ? p->col_begin : 0;
  *row = p->transpose ? tensor_col : tensor_row;
  *col = p->transpose ? tensor_row : tensor_col;
}

/* The buffer of `full` whose one-part source takes the rows and columns
 * that `part` names of the same tensor, transposed as `part` is, and where
 * they start in it (in buffer rows and columns); -1 when there is none. */
static int64_t find_whole(const AmkPlan *full, const char *name, const AmkSourcePart *part,
                          int64_t rows, int64_t cols, int64_t *row0, int64_t *col0) {
  /* The buffer of the same name first (random buffers of one tensor, a
   * tied head and the embedding, are the same numbers, but a rank's slice
   * is best taken from its own buffer's counterpart). */
  for (uint32_t k = 0; k <= full->n_buffers; k++) {
    uint32_t fb = k;
    if (k == 0) {
      while (fb < full->n_buffers && strcmp(full->m->buffers[fb].name, name) != 0)
        fb++;
      if (fb == full->n_buffers)
        continue;
    } else {
      fb = k - 1;
    }
    const char *src = full->m->buffers[fb].source;
    AmkSourcePart f;
    const AmkPlanBuffer *fpb = &full->buffers[fb];
    if (!is_loaded(fpb) || !src || strchr(src, '+') ||
        !amk_source_part_parse(src, strlen(src), &f) || strcmp(f.key, part->key) != 0 ||
        f.transpose != part->transpose)
      continue;
    int64_t fcols = fpb->rank >= 2 ? fpb->shape[fpb->rank - 1] : 1;
    int64_t frows = fcols > 0 ? fpb->numel / fcols : 0;
    int64_t part_row, part_col, full_row, full_col;
    part_origin(part, &part_row, &part_col);
    part_origin(&f, &full_row, &full_col);
    *row0 = part_row - full_row;
    *col0 = part_col - full_col;
    if (*row0 >= 0 && *col0 >= 0 && *row0 + rows <= frows && *col0 + cols <= fcols)
      return (int64_t)fb;
  }
  return -1;
}

/* Rows [row_at, row_at + rows) of a random slice, each row `cols` elements
 * of the whole's stream from its own offset (rows `fcols` apart there): in
 * parallel over the rows, each standing alone (a 70B rank's partial-width
 * slices are billions of elements). With transpose, the slice's tensor row
 * k is column k of the buffer's rows instead (split_down's transposed
 * down weight on a rank): parallel over k, a line buffer a range. */
typedef struct {
  AmkRandomRule rule;
  AmkDType dtype;
  char *dst;
  int64_t elem, rows, cols, fcols, row_at, total_rows;
} SliceJob;

static void slice_rows(void *arg, int64_t begin, int64_t end) {
  SliceJob *j = arg;
  for (int64_t r = begin; r < end && j->row_at + r < j->total_rows; r++) {
    AmkRandomRule row = j->rule;
    row.state += (uint64_t)(r * j->fcols) * SPLITMIX64_GAMMA;
    random_fill_range(&row, j->dtype, 0, j->cols, j->dst + (j->row_at + r) * j->cols * j->elem);
  }
}

static void slice_columns(void *arg, int64_t begin, int64_t end) {
  SliceJob *j = arg;
  char *line = amk_xmalloc((size_t)(j->rows > 0 ? j->rows : 1) * (size_t)j->elem);
  for (int64_t k = begin; k < end; k++) {
    AmkRandomRule row = j->rule;
    row.state += (uint64_t)(k * j->fcols) * SPLITMIX64_GAMMA;
    random_fill_range(&row, j->dtype, 0, j->rows, line);
    for (int64_t c = 0; c < j->rows && j->row_at + c < j->total_rows; c++)
      memcpy(j->dst + ((j->row_at + c) * j->cols + k) * j->elem, line + c * j->elem,
             (size_t)j->elem);
  }
  free(line);
}

AmkWeights *amk_weights_random_slices(const AmkPlan *plan, const AmkPlan *full, uint64_t seed,
                                      AmkDiagEngine *diag) {
  AmkWeights *whole = amk_weights_random(full, seed, diag);
  if (!whole)
    return NULL;
  bool needs_loading;
  AmkWeights *w = weights_new(plan, &needs_loading);
  int64_t to_quantize = quantized_bytes(plan);
  AmkProgress *progress =
      to_quantize > 0 ? amk_progress_begin("amk: quantizing random weights", AMK_PROGRESS_BYTES,
                                           NULL, to_quantize)
                      : NULL;
  bool ok = true;
  for (uint32_t b = 0; ok && b < plan->n_buffers; b++) {
    const AmkPlanBuffer *pb = &plan->buffers[b];
    /* Scales are made with their weights. */
    if (!is_loaded(pb) || pb->quant.role == AMK_PLAN_QUANT_SCALES)
      continue;
    const AmkBuffer *buf = &plan->m->buffers[b];
    /* Quantized weights: the slice's fp32 numbers (what the unsharded
     * quantized program quantizes, amk_weights_random), then quantized
     * here as a checkpoint's would be. */
    bool quantized = pb->quant.role == AMK_PLAN_QUANT_WEIGHT;
    if (quantized && !quant_layout_fits(w, b, diag)) {
      ok = false;
      break;
    }
    AmkDType fill_dtype = quantized ? AMK_DTYPE_F32 : pb->dtype;
    int64_t cols = quantized ? pb->quant.cols : pb->rank >= 2 ? pb->shape[pb->rank - 1] : 1;
    int64_t total_rows = quantized ? pb->shape[0] : pb->numel / (cols > 0 ? cols : 1);
    int64_t elem = amk_dtype_nbytes(fill_dtype, 1);
    bool one_part = buf->source && !strchr(buf->source, '+');
    /* Each part (stacked along the rows) from the buffer of `full` that
     * holds it; a whole-width single part stays a rule. */
    const char *part = buf->source ? buf->source : "";
    char *dst = NULL;
    int64_t row_at = 0;
    ok = *part != '\0';
    while (ok && *part) {
      const char *end = strchr(part, '+');
      size_t len = end ? (size_t)(end - part) : strlen(part);
      AmkSourcePart sp;
      ok = amk_source_part_parse(part, len, &sp);
      /* The buffer rows it takes: a transposed part's are tensor columns. */
      int64_t range_begin = sp.transpose ? sp.col_begin : sp.row_begin;
      int64_t range_end = sp.transpose ? sp.col_end : sp.row_end;
      int64_t rows = range_begin >= 0 ? range_end - range_begin : -1;
      if (ok && rows < 0)
        rows = total_rows - row_at; /* the rest */
      int64_t row0 = 0, col0 = 0, fb = -1;
      AmkRandomRule rule;
      /* A transposed part (KEY[:, B:E]^T: a rank's slice of split_down's
       * transposed down weight) is a window of the whole's transposed
       * buffer where it has one, else the transpose of the untransposed
       * slice, rows x cols of the buffer being cols x rows of the tensor. */
      AmkSourcePart plain = sp;
      plain.transpose = false;
      bool transpose = false;
      if (ok)
        fb = find_whole(full, buf->name, &sp, rows, cols, &row0, &col0);
      if (ok && fb < 0 && sp.transpose) {
        fb = find_whole(full, "", &plain, cols, rows, &row0, &col0);
        transpose = fb >= 0;
      }
      ok = ok && fb >= 0 && amk_weights_random_rule(whole, (uint32_t)fb, &rule) &&
           (quantized ? is_float(full->buffers[fb].dtype) : full->buffers[fb].dtype == pb->dtype);
      if (!ok)
        break;
      if (quantized && !dst)
        dst = amk_xcalloc((size_t)(total_rows * cols > 0 ? total_rows * cols : 1), (size_t)elem);
      const AmkPlanBuffer *fpb = &full->buffers[fb];
      int64_t fcols = fpb->rank >= 2 ? fpb->shape[fpb->rank - 1] : 1;
      rule.state += (uint64_t)(row0 * fcols + col0) * SPLITMIX64_GAMMA;
      if (transpose) {
        /* Tensor row k of the slice (rows of the buffer's width) lands in
         * column k of the buffer's rows [row_at, row_at + rows). */
        if (!dst)
          dst = own_copy(w, b, AMK_WEIGHTS_CONVERTED);
        SliceJob job = {rule, fill_dtype, dst, elem, rows, cols, fcols, row_at, total_rows};
        parallel_ranges(cols, (1 << 20) / (rows > 0 ? rows : 1) + 1, slice_columns, &job);
      } else if (!quantized && one_part && fcols == cols && rows * cols == pb->numel) {
        w->buffers[b] = (WeightBuffer){.origin = AMK_WEIGHTS_RANDOM,
                                       .nbytes = (size_t)pb->nbytes, .rule = rule};
      } else {
        /* A host copy, not a rule an engine could fill from. */
        if (!dst)
          dst = own_copy(w, b, AMK_WEIGHTS_CONVERTED);
        SliceJob job = {rule, fill_dtype, dst, elem, rows, cols, fcols, row_at, total_rows};
        parallel_ranges(rows, (1 << 20) / (cols > 0 ? cols : 1) + 1, slice_rows, &job);
      }
      row_at += rows;
      part = end ? end + 1 : part + len;
    }
    if (ok && quantized) {
      AmkStTensor floats = {.name = buf->name, .dtype = AMK_ST_F32, .rank = 2,
                            .shape = {total_rows, cols}, .numel = total_rows * cols,
                            .data = dst, .nbytes = (size_t)(total_rows * cols * elem),
                            .file = "random weights"};
      int64_t bad = quantize_rows(w, b, &floats, NULL, 0, total_rows, progress);
      if (bad >= 0) { /* random weights are finite and small: never */
        amk_progress_end(progress);
        report_unquantizable(buf->name, bad, diag);
        free(dst);
        amk_weights_free(whole);
        amk_weights_free(w);
        return NULL;
      }
    }
    if (quantized)
      free(dst);
    if (!ok)
      amk_error(diag, no_loc(), "random weights: buffer '%s' (source '%s') is not made of "
                "slices of the random buffers of the unsharded program", buf->name,
                buf->source ? buf->source : "none");
  }
  amk_progress_end(progress);
  amk_weights_free(whole);
  if (!ok) {
    amk_weights_free(w);
    return NULL;
  }
  return w;
}

bool amk_weights_random_rule(const AmkWeights *w, uint32_t b, AmkRandomRule *out) {
  /* A borrowed buffer may be a slice of the lender's: no rule of its own. */
  if (b >= w->plan->n_buffers || w->buffers[b].origin != AMK_WEIGHTS_RANDOM ||
      w->buffers[b].lender)
    return false;
  *out = w->buffers[b].rule;
  return true;
}

/* ---- checkpoints --------------------------------------------------------------- */


/* How a checkpoint tensor fills its rows of a buffer. */
typedef enum {
  FILL_BYTES,    /* already the buffer's encoding: mapped or copied as is */
  FILL_CONVERT,  /* a float tensor into a float buffer */
  FILL_QUANTIZE, /* a float tensor into quantized weights and their scales */
} FillKind;

/* The fill for tensor t into buffer pb, and the last dim t must have; false
 * when t cannot fill it. int4 weights [N, K] also come as their packed bytes
 * (u8 or i8 [N, ceil(K/2)], as --emit-weights writes them). */
static bool fill_kind(const AmkStTensor *t, const AmkPlanBuffer *pb, FillKind *kind,
                      int64_t *width) {
  int ir = amk_st_dtype_to_ir(t->dtype);
  int64_t last = pb->rank ? pb->shape[pb->rank - 1] : 0;
  *width = last;
  if (ir >= 0 && (AmkDType)ir == pb->dtype) {
    *kind = FILL_BYTES;
  } else if (pb->dtype == AMK_DTYPE_I4 && pb->rank >= 2 && last % 2 == 0 &&
             (t->dtype == AMK_ST_U8 || t->dtype == AMK_ST_I8)) {
    *kind = FILL_BYTES;
    *width = last / 2;
  } else if (amk_st_dtype_is_float(t->dtype) && pb->quant.role == AMK_PLAN_QUANT_WEIGHT) {
    *kind = FILL_QUANTIZE;
    *width = pb->quant.cols;
  } else if (amk_st_dtype_is_float(t->dtype) && is_float(pb->dtype)) {
    *kind = FILL_CONVERT;
  } else {
    return false;
  }
  return true;
}

/* A tensor handed over in place: the buffer's encoding and size, aligned
 * for the dtype (the kernels read it as typed memory). */
static bool can_map(const AmkStTensor *t, const AmkPlanBuffer *pb, size_t bytes) {
  size_t elem = (size_t)amk_dtype_nbytes(pb->dtype, 1);
  return t->nbytes == bytes && elem > 0 && (uintptr_t)t->data % elem == 0;
}

static void add_piece(WeightBuffer *wb, const void *data, size_t offset, size_t nbytes) {
  wb->pieces = amk_xrealloc(wb->pieces, (wb->n_pieces + 1) * sizeof *wb->pieces);
  wb->pieces[wb->n_pieces++] = (AmkWeightPiece){.data = data, .offset = offset, .nbytes = nbytes};
}

static void format_dims(char *out, size_t size, const int64_t *dims, uint32_t rank) {
  out[0] = '\0';
  for (uint32_t d = 0; d < rank; d++)
    snprintf(out + strlen(out), size - strlen(out), "%s%" PRId64, d ? ", " : "", dims[d]);
}

/* The rows x cols matrix at src (rows `stride` elements apart, elements of
 * `elem` bytes) written transposed, cols x rows, to dst. Square blocks keep
 * both the reads and the writes of a block within a few cache lines per
 * row; walking whole rows would stride every write by `rows` elements (an
 * 8192 x 2048 projection misses the cache on each). transpose_matrix
 * calls it with a constant `elem` per common size, so that each copy can
 * compile to one move. */
static inline void transpose_blocks(const char *src, int64_t rows, int64_t cols, int64_t stride,
                                    size_t elem, char *dst) {
  enum { BLOCK = 64 };
  for (int64_t r0 = 0; r0 < rows; r0 += BLOCK) {
    int64_t r1 = r0 + BLOCK < rows ? r0 + BLOCK : rows;
    for (int64_t c0 = 0; c0 < cols; c0 += BLOCK) {
      int64_t c1 = c0 + BLOCK < cols ? c0 + BLOCK : cols;
      for (int64_t c = c0; c < c1; c++)
        for (int64_t r = r0; r < r1; r++)
          memcpy(dst + (size_t)(c * rows + r) * elem, src + (size_t)(r * stride + c) * elem,
                 elem);
    }
  }
}

static void transpose_matrix(const char *src, int64_t rows, int64_t cols, int64_t stride,
                             size_t elem, char *dst) {
  switch (elem) {
  case 1:
    transpose_blocks(src, rows, cols, stride, 1, dst);
    break;
  case 2:
    transpose_blocks(src, rows, cols, stride, 2, dst);
    break;
  case 4:
    transpose_blocks(src, rows, cols, stride, 4, dst);
    break;
  case 8:
    transpose_blocks(src, rows, cols, stride, 8, dst);
    break;
  default:
    transpose_blocks(src, rows, cols, stride, elem, dst);
    break;
  }
}

/* Columns [0, width) of a matrix of `height` rows of `stride` elements
 * (`elem` bytes) at src, written densely to dst: as they are (height x
 * width) or transposed (width x height). */
static void reorder_copy(const char *src, int64_t height, int64_t width, int64_t stride,
                         size_t elem, bool transpose, char *dst) {
  if (transpose) {
    transpose_matrix(src, height, width, stride, elem, dst);
    return;
  }
  for (int64_t r = 0; r < height; r++)
    memcpy(dst + (size_t)(r * width) * elem, src + (size_t)(r * stride) * elem,
           (size_t)width * elem);
}

/* Binds a WEIGHT/CONST buffer from its `source`: one state-dict key (or a
 * slice of it, optionally transposed: include/amk/tp.h), or several joined
 * by '+' whose tensors are stacked along dimension 0. */
static bool bind_weight(AmkWeights *w, uint32_t b, const AmkSafetensors *st,
                        AmkProgress *progress, AmkDiagEngine *diag) {
  const AmkBuffer *buf = &w->plan->m->buffers[b];
  const AmkPlanBuffer *pb = &w->plan->buffers[b];
  if (!buf->source) {
    amk_error(diag, no_loc(), "%s buffer '%s' has no source to load it from",
              amk_kind_text_name(buf->kind), buf->name);
    return false;
  }
  const int64_t *dims = pb->shape;
  if (buf->rank < 1 || dims[0] <= 0 || pb->nbytes % dims[0] != 0) {
    amk_error(diag, no_loc(), "buffer '%s' (%s) does not split into rows of whole bytes to "
              "load", buf->name, amk_dtype_text_name(buf->dtype));
    return false;
  }
  if (pb->quant.role == AMK_PLAN_QUANT_WEIGHT && !quant_layout_fits(w, b, diag))
    return false;
  size_t row_bytes = (size_t)(pb->nbytes / dims[0]);
  size_t offset = 0;
  int64_t rows = 0;
  const char *part = buf->source;
  char *dst = NULL;
  bool quantized = false, as_is = false; /* how the parts of quantized weights came */
  while (*part) {
    const char *end = strchr(part, '+');
    size_t len = end ? (size_t)(end - part) : strlen(part);
    AmkSourcePart sp;
    if (!amk_source_part_parse(part, len, &sp)) {
      amk_error(diag, no_loc(), "buffer '%s' has a malformed source '%s' (a slice is "
                "KEY[B:E], KEY[:, B:E] or KEY[B:E, C:D] with B < E); a part may end in ^T "
                "(transposed)", buf->name, buf->source);
      return false;
    }
    const char *key = sp.key;
    const AmkStTensor *t = amk_safetensors_find(st, key);
    if (!t) {
      amk_error(diag, no_loc(), "tensor '%s' (for buffer '%s') is not in the checkpoint", key,
                buf->name);
      return false;
    }
    if (sp.transpose && t->rank != 2) {
      char have[160];
      uint32_t rank = t->rank < AMK_ST_MAX_RANK ? t->rank : AMK_ST_MAX_RANK;
      format_dims(have, sizeof have, t->shape, rank);
      amk_error(diag, no_loc(), "%s: tensor '%s' has shape [%s]; buffer '%s' takes it transposed "
                "(^T), which needs a matrix (rank 2)", t->file, key, have, buf->name);
      return false;
    }
    AmkStTensor slice, cols;
    char *reordered = NULL; /* this part's columns or transpose, copied out */
    const char *reorder_from = NULL;
    int64_t reorder_height = 0, reorder_width = 0, reorder_stride = 0;
    if (sp.row_begin >= 0) {
      if (t->rank < 1 || sp.row_end > t->shape[0]) {
        amk_error(diag, no_loc(), "%s: tensor '%s' has %" PRId64 " rows; buffer '%s' takes "
                  "rows [%" PRId64 ", %" PRId64 ")", t->file, key,
                  t->rank ? t->shape[0] : 0, buf->name, sp.row_begin, sp.row_end);
        return false;
      }
      /* A view of the rows: the same bytes per row, fewer rows. */
      size_t t_row_bytes = t->nbytes / (size_t)t->shape[0];
      int64_t row_numel = t->numel / t->shape[0];
      slice = *t;
      slice.shape[0] = sp.row_end - sp.row_begin;
      slice.numel = slice.shape[0] * row_numel;
      slice.data = (const char *)t->data + (size_t)sp.row_begin * t_row_bytes;
      slice.nbytes = (size_t)slice.shape[0] * t_row_bytes;
      t = &slice;
    }
    if (sp.col_begin >= 0 || sp.transpose) {
      /* Columns are strided in the file, and a transpose reorders every
       * element: copied out once (the columns and the transpose together),
       * then filled from as any tensor (a tensor-parallel rank's o_proj and
       * down_proj; a fused MLP tile's down_proj, read as rows). */
      if (t->rank != 2 || sp.col_end > t->shape[1] || t->numel <= 0 ||
          t->nbytes % (size_t)t->numel != 0) {
        if (sp.col_begin >= 0)
          amk_error(diag, no_loc(), "%s: tensor '%s' is not a matrix with columns [%" PRId64
                    ", %" PRId64 ") for buffer '%s'", t->file, key, sp.col_begin, sp.col_end,
                    buf->name);
        else
          amk_error(diag, no_loc(), "%s: tensor '%s' has no elements to transpose for buffer "
                    "'%s'", t->file, key, buf->name);
        return false;
      }
      size_t elem = t->nbytes / (size_t)t->numel;
      int64_t first = sp.col_begin >= 0 ? sp.col_begin : 0;
      reorder_width = sp.col_begin >= 0 ? sp.col_end - sp.col_begin : t->shape[1];
      reorder_height = t->shape[0];
      reorder_stride = t->shape[1];
      reorder_from = (const char *)t->data + (size_t)first * elem;
      cols = *t;
      cols.shape[0] = sp.transpose ? reorder_width : reorder_height;
      cols.shape[1] = sp.transpose ? reorder_height : reorder_width;
      cols.numel = reorder_height * reorder_width;
      cols.data = NULL; /* copied below, unless the buffer takes it on demand */
      cols.nbytes = (size_t)cols.numel * elem;
      t = &cols;
    }
    FillKind kind;
    int64_t width;
    if (!fill_kind(t, pb, &kind, &width)) {
      amk_error(diag, no_loc(),
                "tensor '%s' in %s is %s, which cannot fill %s buffer '%s'%s", key, t->file,
                amk_st_dtype_name(t->dtype), amk_dtype_text_name(buf->dtype), buf->name,
                is_float(buf->dtype) ? " (float tensors convert to float buffers)"
                : pb->quant.role == AMK_PLAN_QUANT_WEIGHT
                    ? " (quantized weights come from a float tensor, quantized as it loads, "
                      "or from their own quantized bytes)"
                    : " (an integer buffer loads a tensor of its own encoding)");
      return false;
    }
    if (sp.transpose && kind == FILL_BYTES && pb->dtype == AMK_DTYPE_I4) {
      /* Two int4 columns share a byte: moving bytes would not move columns. */
      amk_error(diag, no_loc(), "%s: tensor '%s' holds packed int4 bytes, which buffer '%s' "
                "cannot take transposed (^T); transpose the float tensor it was quantized from",
                t->file, key, buf->name);
      return false;
    }
    /* Each part has the buffer's shape but for the rows (dimension 0),
     * which add up across the parts. */
    bool fits = t->rank == buf->rank;
    for (uint32_t d = 1; fits && d < buf->rank; d++)
      fits = t->shape[d] == (d + 1 == buf->rank ? width : dims[d]);
    if (!fits) {
      char have[160], want[160], stored[200] = "";
      format_dims(have, sizeof have, t->shape, t->rank < AMK_ST_MAX_RANK ? t->rank : AMK_ST_MAX_RANK);
      format_dims(want, sizeof want, dims, buf->rank);
      if (buf->rank >= 2 && width != dims[buf->rank - 1]) {
        /* quantized from K floats, or packed int4 bytes */
        int64_t tail[AMK_MAX_RANK];
        memcpy(tail, dims, sizeof tail);
        tail[0] = -1;
        tail[buf->rank - 1] = width;
        format_dims(stored, sizeof stored, tail + 1, buf->rank - 1);
      }
      amk_error(diag, no_loc(),
                "tensor '%s' in %s%s has shape [%s], which does not fit buffer '%s' [%s]%s%s%s",
                key, t->file, sp.transpose ? ", transposed," : "", have, buf->name, want,
                stored[0] ? " (it takes a tensor [rows, " : "", stored, stored[0] ? "])" : "");
      return false;
    }
    int64_t part_rows = t->shape[0];
    rows += part_rows;
    size_t bytes = (size_t)part_rows * row_bytes;
    if (rows > dims[0]) {
      amk_error(diag, no_loc(),
                "the tensors of source '%s' have more rows than buffer '%s' (%" PRId64 ")",
                buf->source, buf->name, dims[0]);
      return false;
    }
    if (pb->quant.role == AMK_PLAN_QUANT_WEIGHT && (kind == FILL_QUANTIZE ? as_is : quantized)) {
      amk_error(diag, no_loc(),
                "the tensors of source '%s' mix float and quantized ones; buffer '%s' takes "
                "one or the other",
                buf->source, buf->name);
      return false;
    }
    if (reorder_from && offset == 0 && !end && kind == FILL_BYTES &&
        bytes == (size_t)pb->nbytes && pb->quant.role == AMK_PLAN_QUANT_NONE) {
      /* The whole buffer is the columns or the transpose of a mapped
       * tensor: copied when an engine asks for the bytes (the CUDA engine
       * only lends them for its upload), not at load. */
      w->buffers[b] = (WeightBuffer){.origin = AMK_WEIGHTS_REORDERED, .nbytes = bytes,
                                     .reorder_from = reorder_from,
                                     .reorder_height = reorder_height,
                                     .reorder_width = reorder_width,
                                     .reorder_stride = reorder_stride,
                                     .reorder_elem = t->nbytes / (size_t)t->numel,
                                     .reorder_transpose = sp.transpose};
      as_is = true;
      offset += bytes;
      part = end ? end + 1 : part + len;
      continue;
    }
    if (reorder_from) {
      size_t elem = t->nbytes / (size_t)t->numel;
      reordered = amk_xmalloc(t->nbytes + 1);
      reorder_copy(reorder_from, reorder_height, reorder_width, reorder_stride, elem,
                   sp.transpose, reordered);
      cols.data = reordered;
    }
    bool keeps_part = false; /* the buffer points into this part's bytes */
    if (kind == FILL_QUANTIZE) {
      quantized = true;
      int64_t bad = quantize_rows(w, b, t, NULL, rows - part_rows, part_rows, progress);
      if (bad >= 0) {
        char what[600];
        snprintf(what, sizeof what, "%s: tensor '%s'", t->file, key);
        report_unquantizable(what, bad, diag);
        free(reordered);
        return false;
      }
    } else if (offset == 0 && !end && kind == FILL_BYTES && can_map(t, pb, (size_t)pb->nbytes)) {
      as_is = true;
      keeps_part = true;
      w->buffers[b] = (WeightBuffer){.origin = AMK_WEIGHTS_MAPPED, .data = t->data,
                                     .nbytes = t->nbytes};
      add_piece(&w->buffers[b], t->data, 0, t->nbytes);
    } else if (!dst && kind == FILL_BYTES && can_map(t, pb, bytes)) {
      /* Parts of the buffer's encoding stay in the file as pieces, joined
       * only when a host copy is asked for. */
      as_is = true;
      keeps_part = true;
      WeightBuffer *wb = &w->buffers[b];
      wb->origin = AMK_WEIGHTS_JOINED;
      wb->nbytes = (size_t)pb->nbytes;
      add_piece(wb, t->data, offset, bytes);
    } else {
      as_is = true;
      if (!dst) {
        /* A part needs converting: the whole buffer becomes a copy. */
        WeightBuffer keep = w->buffers[b];
        dst = own_copy(w, b, AMK_WEIGHTS_CONVERTED);
        for (uint32_t i = 0; i < keep.n_pieces; i++)
          memcpy(dst + keep.pieces[i].offset, keep.pieces[i].data, keep.pieces[i].nbytes);
        free(keep.pieces);
      }
      if (kind == FILL_BYTES) {
        if (t->nbytes != bytes) {
          amk_error(diag, no_loc(), "%s: tensor '%s' has %zu bytes, buffer '%s' takes %zu",
                    t->file, key, t->nbytes, buf->name, bytes);
          free(reordered);
          return false;
        }
        memcpy(dst + offset, t->data, bytes);
      } else if (!amk_safetensors_convert(t, buf->dtype, dst + offset, bytes, diag)) {
        free(reordered);
        return false;
      }
    }
    if (reordered && keeps_part) {
      w->scratch = amk_xrealloc(w->scratch, (w->n_scratch + 1) * sizeof *w->scratch);
      w->scratch_bytes =
          amk_xrealloc(w->scratch_bytes, (w->n_scratch + 1) * sizeof *w->scratch_bytes);
      w->scratch_bytes[w->n_scratch] = t->nbytes;
      w->scratch[w->n_scratch++] = reordered;
    } else {
      free(reordered); /* converted or quantized out of it */
    }
    offset += bytes;
    part = end ? end + 1 : part + len;
  }
  if (rows != dims[0]) {
    amk_error(diag, no_loc(),
              "buffer '%s' has %" PRId64 " rows but the tensors of its source '%s' have %" PRId64,
              buf->name, dims[0], buf->source, rows);
    return false;
  }
  return true;
}

AmkWeights *amk_weights_load(const AmkPlan *plan, const char *dir, AmkDiagEngine *diag) {
  bool needs_loading;
  AmkWeights *w = weights_new(plan, &needs_loading);
  if (!needs_loading)
    return w;
  if (!dir)
    dir = plan->m->model_dir;
  if (!dir) {
    amk_error(diag, no_loc(),
              "the program names no model folder to load weights from; give --weights DIR");
    amk_weights_free(w);
    return NULL;
  }
  w->checkpoint = amk_safetensors_open(dir, diag);
  if (!w->checkpoint) {
    amk_weights_free(w);
    return NULL;
  }
  bool ok = true;
  bool mapped = false;
  /* The bytes of every buffer bound below: a quantized one counts its rows
   * (and its scales') as they are made, any other its bytes once bound. */
  int64_t total = 0;
  for (uint32_t b = 0; b < plan->n_buffers; b++)
    if (is_loaded(&plan->buffers[b]) && w->buffers[b].origin == AMK_WEIGHTS_NONE)
      total += plan->buffers[b].nbytes;
  AmkProgress *progress = amk_progress_begin(
      quantized_bytes(plan) > 0 ? "amk: loading and quantizing weights" : "amk: loading weights",
      AMK_PROGRESS_BYTES, NULL, total);
  /* Quantized weights first: one quantized as it loads fills its scales,
   * which then need no tensor of their own. */
  for (int round = 0; round < 2; round++)
    for (uint32_t b = 0; b < plan->n_buffers && ok; b++) {
      const AmkPlanBuffer *pb = &plan->buffers[b];
      if (!is_loaded(pb) || (pb->quant.role == AMK_PLAN_QUANT_WEIGHT) != (round == 0) ||
          w->buffers[b].origin != AMK_WEIGHTS_NONE)
        continue;
      ok = bind_weight(w, b, w->checkpoint, progress, diag);
      if (ok && w->buffers[b].origin != AMK_WEIGHTS_QUANTIZED)
        amk_progress_add(progress, pb->nbytes);
      mapped |= w->buffers[b].origin == AMK_WEIGHTS_MAPPED ||
                w->buffers[b].origin == AMK_WEIGHTS_JOINED ||
                w->buffers[b].origin == AMK_WEIGHTS_REORDERED;
    }
  /* The line ends before an error is reported. */
  amk_progress_end(progress);
  if (!ok) {
    amk_weights_free(w);
    return NULL;
  }
  if (!mapped) { /* nothing points into the files: unmap them now */
    amk_safetensors_close(w->checkpoint);
    w->checkpoint = NULL;
  }
  return w;
}

/* ---- access ------------------------------------------------------------------------- */

/* Buffer b's bytes, made now where they are made on demand. The weights
 * are const to their readers; the copies made on demand are the loader's
 * own business (hence the casts). */
static WeightBuffer *materialize(const AmkWeights *w, uint32_t b) {
  if (!w || b >= w->plan->n_buffers || w->buffers[b].origin == AMK_WEIGHTS_NONE)
    return NULL;
  WeightBuffer *wb = &w->buffers[b];
  if (wb->data)
    return wb;
  if (wb->lender && wb->origin != AMK_WEIGHTS_REORDERED) {
    wb->data = (const char *)amk_weights_data(wb->lender, wb->lender_buffer, NULL) +
               wb->lender_offset;
  } else if (wb->origin == AMK_WEIGHTS_RANDOM) {
    const AmkPlanBuffer *pb = &w->plan->buffers[b];
    wb->owned = amk_xcalloc(1, wb->nbytes ? wb->nbytes : 1);
    amk_random_fill(&wb->rule, pb->dtype, pb->numel, wb->owned);
    wb->data = wb->owned;
  } else if (wb->origin == AMK_WEIGHTS_JOINED) {
    wb->owned = amk_xcalloc(1, wb->nbytes ? wb->nbytes : 1);
    for (uint32_t i = 0; i < wb->n_pieces; i++)
      memcpy((char *)wb->owned + wb->pieces[i].offset, wb->pieces[i].data, wb->pieces[i].nbytes);
    wb->data = wb->owned;
  } else if (wb->origin == AMK_WEIGHTS_REORDERED) {
    wb->owned = amk_xmalloc(wb->nbytes + 1);
    const char *from = wb->reorder_from;
    if (!from) /* the lender's buffer, lent for the copy */
      from = amk_weights_lend(wb->lender, wb->lender_buffer, NULL);
    if (from)
      reorder_copy(from, wb->reorder_height, wb->reorder_width, wb->reorder_stride,
                   wb->reorder_elem, wb->reorder_transpose, (char *)wb->owned);
    else
      memset(wb->owned, 0, wb->nbytes);
    if (!wb->reorder_from)
      amk_weights_unlend(wb->lender, wb->lender_buffer);
    wb->data = wb->owned;
  }
  return wb;
}

const void *amk_weights_data(const AmkWeights *w, uint32_t b, size_t *nbytes) {
  WeightBuffer *wb = materialize(w, b);
  if (nbytes)
    *nbytes = wb ? wb->nbytes : 0;
  if (!wb)
    return NULL;
  wb->pinned = true;
  return wb->data;
}

const void *amk_weights_lend(const AmkWeights *w, uint32_t b, size_t *nbytes) {
  WeightBuffer *wb = materialize(w, b);
  if (nbytes)
    *nbytes = wb ? wb->nbytes : 0;
  if (!wb)
    return NULL;
  wb->lent++;
  return wb->data;
}

void amk_weights_unlend(const AmkWeights *w, uint32_t b) {
  if (!w || b >= w->plan->n_buffers)
    return;
  WeightBuffer *wb = &w->buffers[b];
  if (wb->lent > 0)
    wb->lent--;
  bool on_demand = wb->origin == AMK_WEIGHTS_RANDOM || wb->origin == AMK_WEIGHTS_JOINED ||
                   wb->origin == AMK_WEIGHTS_REORDERED;
  if (on_demand && !wb->pinned && wb->lent == 0 && wb->owned) {
    free(wb->owned);
    wb->owned = NULL;
    wb->data = NULL;
  }
}

bool amk_weights_pieces(const AmkWeights *w, uint32_t b, const AmkWeightPiece **pieces,
                        uint32_t *n) {
  if (!w || b >= w->plan->n_buffers || w->buffers[b].n_pieces == 0 ||
      (w->buffers[b].origin != AMK_WEIGHTS_MAPPED && w->buffers[b].origin != AMK_WEIGHTS_JOINED))
    return false;
  *pieces = w->buffers[b].pieces;
  *n = w->buffers[b].n_pieces;
  return true;
}

bool amk_weights_reorder(const AmkWeights *w, uint32_t b, AmkWeightReorder *out) {
  if (!w || b >= w->plan->n_buffers || w->buffers[b].origin != AMK_WEIGHTS_REORDERED ||
      !w->buffers[b].reorder_from)
    return false;
  const WeightBuffer *wb = &w->buffers[b];
  *out = (AmkWeightReorder){.from = wb->reorder_from, .height = wb->reorder_height,
                            .width = wb->reorder_width, .stride = wb->reorder_stride,
                            .elem = wb->reorder_elem, .transpose = wb->reorder_transpose};
  return true;
}

size_t amk_weights_host_bytes(const AmkWeights *w) {
  if (!w)
    return 0;
  size_t total = 0;
  for (uint32_t b = 0; b < w->plan->n_buffers; b++) {
    const WeightBuffer *wb = &w->buffers[b];
    if (wb->owned)
      total += wb->nbytes;
  }
  for (uint32_t i = 0; i < w->n_scratch; i++)
    total += w->scratch_bytes[i];
  return total;
}

AmkWeightsOrigin amk_weights_origin(const AmkWeights *w, uint32_t b) {
  return w && b < w->plan->n_buffers ? w->buffers[b].origin : AMK_WEIGHTS_NONE;
}

/* The nbytes of `plan`'s buffer whose source is exactly [part, part + len),
 * or -1. */
static int64_t part_bytes(const AmkPlan *plan, const char *part, size_t len) {
  for (uint32_t b = 0; b < plan->n_buffers; b++) {
    const char *src = plan->m->buffers[b].source;
    if (is_loaded(&plan->buffers[b]) && src && strlen(src) == len && strncmp(src, part, len) == 0)
      return plan->buffers[b].nbytes;
  }
  return -1;
}

/* Where the bytes of `plan`'s buffer b lie in `from`: a buffer of the same
 * source, or a '+'-joined source of whole tensors one of whose parts it is
 * (fuse joins q|k|v and gate|up so); the parts before it are sized by the
 * buffers of `plan` holding them. Parts match by their whole text, so a
 * slice or a transpose (KEY^T) is lent only by the same slice or transpose,
 * never by KEY's buffer. Returns from's buffer and *offset, or -1. */
static int64_t find_source(const AmkPlan *plan, uint32_t b, const AmkPlan *from,
                           int64_t *offset) {
  const AmkBuffer *buf = &plan->m->buffers[b];
  const AmkPlanBuffer *pb = &plan->buffers[b];
  if (!buf->source)
    return -1;
  size_t want = strlen(buf->source);
  for (uint32_t f = 0; f < from->n_buffers; f++) {
    const AmkBuffer *fbuf = &from->m->buffers[f];
    const AmkPlanBuffer *fb = &from->buffers[f];
    if (!is_loaded(fb) || !fbuf->source || fb->dtype != pb->dtype || fb->kind != pb->kind)
      continue;
    int64_t at = 0;
    for (const char *part = fbuf->source; at >= 0;) {
      const char *end = strchr(part, '+');
      size_t len = end ? (size_t)(end - part) : strlen(part);
      if (len == want && strncmp(part, buf->source, len) == 0) {
        if (at + pb->nbytes > fb->nbytes)
          break;
        *offset = at;
        return f;
      }
      if (!end)
        break;
      int64_t size = part_bytes(plan, part, len);
      at = size < 0 ? -1 : at + size;
      part = end + 1;
    }
  }
  return -1;
}

int64_t amk_weights_source_in(const AmkPlan *plan, uint32_t b, const AmkPlan *from,
                              int64_t *offset) {
  if (b >= plan->n_buffers || !is_loaded(&plan->buffers[b]))
    return -1;
  *offset = 0;
  return find_source(plan, b, from, offset);
}

/* The buffer of `from` that holds `plan`'s buffer b transposed: a matrix of
 * the swapped shape, same dtype and kind, whose one-part source is b's
 * source with "^T" added or taken off (fuse's split_down reads the down
 * weight as KEY^T, the unfused prefill program as KEY). -1 when none. */
static int64_t find_transposed_source(const AmkPlan *plan, uint32_t b, const AmkPlan *from) {
  const AmkBuffer *buf = &plan->m->buffers[b];
  const AmkPlanBuffer *pb = &plan->buffers[b];
  if (!buf->source || strchr(buf->source, '+') || pb->rank != 2 ||
      pb->quant.role != AMK_PLAN_QUANT_NONE)
    return -1;
  size_t len = strlen(buf->source);
  bool mine_transposed = len > 2 && strcmp(buf->source + len - 2, "^T") == 0;
  for (uint32_t f = 0; f < from->n_buffers; f++) {
    const AmkBuffer *fbuf = &from->m->buffers[f];
    const AmkPlanBuffer *fb = &from->buffers[f];
    if (!is_loaded(fb) || !fbuf->source || fb->dtype != pb->dtype || fb->kind != pb->kind ||
        fb->rank != 2 || fb->shape[0] != pb->shape[1] || fb->shape[1] != pb->shape[0] ||
        fb->quant.role != AMK_PLAN_QUANT_NONE)
      continue;
    size_t flen = strlen(fbuf->source);
    bool same_key = mine_transposed
                        ? flen + 2 == len && strncmp(fbuf->source, buf->source, flen) == 0
                        : flen == len + 2 && strncmp(fbuf->source, buf->source, len) == 0 &&
                              strcmp(fbuf->source + len, "^T") == 0;
    if (same_key)
      return f;
  }
  return -1;
}

AmkWeights *amk_weights_share(const AmkPlan *plan, const AmkWeights *from, AmkDiagEngine *diag) {
  bool needs_loading;
  AmkWeights *w = weights_new(plan, &needs_loading);
  for (uint32_t b = 0; b < plan->n_buffers; b++) {
    const AmkPlanBuffer *pb = &plan->buffers[b];
    if (!is_loaded(pb))
      continue;
    int64_t offset = 0;
    int64_t found = find_source(plan, b, from->plan, &offset);
    int64_t transposed = found < 0 ? find_transposed_source(plan, b, from->plan) : -1;
    if (transposed >= 0) {
      /* Other bytes than the lender's: its transpose (the same model,
       * whatever made the lender's bytes). Where the lender's buffer is
       * itself the transpose of a whole mapped tensor (KEY^T of the
       * checkpoint's KEY), this buffer is that tensor, mapped; else a copy
       * made on demand from the lender's bytes. */
      const AmkPlanBuffer *fb = &from->plan->buffers[transposed];
      const WeightBuffer *lent = &from->buffers[transposed];
      size_t elem = (size_t)amk_dtype_nbytes(pb->dtype, 1);
      if (lent->origin == AMK_WEIGHTS_REORDERED && lent->reorder_from &&
          lent->reorder_transpose && lent->reorder_stride == lent->reorder_width &&
          (uintptr_t)lent->reorder_from % (elem ? elem : 1) == 0) {
        w->buffers[b] = (WeightBuffer){.origin = AMK_WEIGHTS_MAPPED,
                                       .nbytes = (size_t)pb->nbytes,
                                       .data = lent->reorder_from};
        add_piece(&w->buffers[b], lent->reorder_from, 0, (size_t)pb->nbytes);
      } else {
        w->buffers[b] = (WeightBuffer){.origin = AMK_WEIGHTS_REORDERED,
                                       .nbytes = (size_t)pb->nbytes,
                                       .lender = from,
                                       .lender_buffer = (uint32_t)transposed,
                                       .reorder_height = fb->shape[0],
                                       .reorder_width = fb->shape[1],
                                       .reorder_stride = fb->shape[1],
                                       .reorder_elem = elem,
                                       .reorder_transpose = true};
      }
      continue;
    }
    if (found < 0) {
      amk_error(diag, no_loc(),
                "buffer '%s' (source '%s') is not among the other program's weights",
                plan->m->buffers[b].name,
                plan->m->buffers[b].source ? plan->m->buffers[b].source : "");
      amk_weights_free(w);
      return NULL;
    }
    /* Borrowed: `from` keeps the bytes (and the mapping); bytes it makes
     * on demand (random, joined) are asked for only when needed. */
    const WeightBuffer *lent = &from->buffers[found];
    bool on_demand = !lent->data && (lent->origin == AMK_WEIGHTS_RANDOM ||
                                     lent->origin == AMK_WEIGHTS_JOINED ||
                                     lent->origin == AMK_WEIGHTS_REORDERED);
    w->buffers[b] = (WeightBuffer){.origin = lent->origin, .nbytes = (size_t)pb->nbytes};
    if (on_demand) {
      w->buffers[b].lender = from;
      w->buffers[b].lender_buffer = (uint32_t)found;
      w->buffers[b].lender_offset = offset;
    } else {
      w->buffers[b].data = (const char *)amk_weights_data(from, (uint32_t)found, NULL) + offset;
    }
  }
  return w;
}
