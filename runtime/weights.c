/* Loading the weights of a plan (include/amk/weights.h). */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amk/numerics.h"
#include "amk/safetensors.h"
#include "amk/sampling.h"
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
} WeightBuffer;

struct AmkWeights {
  const AmkPlan *plan;
  WeightBuffer *buffers;
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

/* ---- random ------------------------------------------------------------------- */

/* Elements [begin, end) of the rule's stream: splitmix64 is a counter
 * (output i mixes state + (i + 1) * gamma), so any stretch starts on its own. */
static void random_fill_range(const AmkRandomRule *rule, AmkDType dtype, int64_t begin,
                              int64_t end, void *dst) {
  uint64_t state = rule->state + (uint64_t)begin * SPLITMIX64_GAMMA;
  for (int64_t i = begin; i < end; i++) {
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
  int64_t begin, end;
  void *dst;
} FillJob;

static void *fill_job(void *arg) {
  FillJob *j = arg;
  random_fill_range(j->rule, j->dtype, j->begin, j->end, j->dst);
  return NULL;
}

/* Large buffers are filled by several threads (the 8B shape has 8 G
 * elements); the bytes do not depend on how the work is split. */
enum { FILL_THREADS_MAX = 32, FILL_MIN_PER_THREAD = 1 << 20 };

void amk_random_fill(const AmkRandomRule *rule, AmkDType dtype, int64_t numel, void *dst) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t threads = numel / FILL_MIN_PER_THREAD;
  if (threads > cpus)
    threads = cpus;
  if (threads > FILL_THREADS_MAX)
    threads = FILL_THREADS_MAX;
  if (threads <= 1) {
    random_fill_range(rule, dtype, 0, numel, dst);
    return;
  }
  FillJob jobs[FILL_THREADS_MAX];
  pthread_t tids[FILL_THREADS_MAX];
  bool started[FILL_THREADS_MAX];
  int64_t per = (numel + threads - 1) / threads;
  for (int64_t k = 0; k < threads; k++) {
    int64_t begin = k * per, end = begin + per < numel ? begin + per : numel;
    jobs[k] = (FillJob){rule, dtype, begin, end, dst};
    started[k] = pthread_create(&tids[k], NULL, fill_job, &jobs[k]) == 0;
    if (!started[k])
      fill_job(&jobs[k]); /* no thread to be had: do it here */
  }
  for (int64_t k = 0; k < threads; k++)
    if (started[k])
      pthread_join(tids[k], NULL);
}

AmkWeights *amk_weights_random(const AmkPlan *plan, uint64_t seed, AmkDiagEngine *diag) {
  bool needs_loading;
  AmkWeights *w = weights_new(plan, &needs_loading);
  /* One stream over the buffers in list order: a buffer starts where the
   * previous one's elements left the state. Only the rules are made here;
   * the bytes come when an engine asks for them (the GPU fills its own). */
  uint64_t state = seed;
  for (uint32_t b = 0; b < plan->n_buffers; b++) {
    const AmkPlanBuffer *pb = &plan->buffers[b];
    if (!is_loaded(pb))
      continue;
    int64_t cols = pb->rank >= 2 ? pb->shape[pb->rank - 1] : pb->numel;
    AmkRandomRule rule = {
        .state = state,
        .center = pb->rank >= 2 ? 0.0 : 1.0,
        .scale = pb->rank >= 2 ? 1.0 / sqrt((double)(cols > 0 ? cols : 1)) : 0.1,
    };
    w->buffers[b] = (WeightBuffer){.origin = AMK_WEIGHTS_RANDOM, .nbytes = (size_t)pb->nbytes,
                                   .rule = rule};
    state += (uint64_t)pb->numel * SPLITMIX64_GAMMA;
  }
  return w;
}

bool amk_weights_random_rule(const AmkWeights *w, uint32_t b, AmkRandomRule *out) {
  if (b >= w->plan->n_buffers || w->buffers[b].origin != AMK_WEIGHTS_RANDOM)
    return false;
  *out = w->buffers[b].rule;
  return true;
}

/* ---- checkpoints --------------------------------------------------------------- */

/* A tensor handed over in place: one source key, the buffer's dtype and
 * size, aligned for the dtype (the kernels read it as typed memory). */
static bool can_map(const AmkStTensor *t, const AmkPlanBuffer *pb, bool whole_source) {
  int ir = amk_st_dtype_to_ir(t->dtype);
  size_t elem = (size_t)amk_dtype_nbytes(pb->dtype, 1);
  return ir >= 0 && (AmkDType)ir == pb->dtype &&
         (!whole_source || t->nbytes == (size_t)pb->nbytes) && elem > 0 &&
         (uintptr_t)t->data % elem == 0;
}

static void add_piece(WeightBuffer *wb, const void *data, size_t offset, size_t nbytes) {
  wb->pieces = amk_xrealloc(wb->pieces, (wb->n_pieces + 1) * sizeof *wb->pieces);
  wb->pieces[wb->n_pieces++] = (AmkWeightPiece){.data = data, .offset = offset, .nbytes = nbytes};
}

/* Binds a WEIGHT/CONST buffer from its `source`: one state-dict key, or
 * several joined by '+' whose tensors are stacked along dimension 0. */
static bool bind_weight(AmkWeights *w, uint32_t b, const AmkSafetensors *st, AmkDiagEngine *diag) {
  const AmkBuffer *buf = &w->plan->m->buffers[b];
  const AmkPlanBuffer *pb = &w->plan->buffers[b];
  if (!buf->source) {
    amk_error(diag, no_loc(), "%s buffer '%s' has no source to load it from",
              amk_kind_text_name(buf->kind), buf->name);
    return false;
  }
  if (buf->dtype != AMK_DTYPE_F32 && buf->dtype != AMK_DTYPE_BF16 &&
      buf->dtype != AMK_DTYPE_F16) {
    amk_error(diag, no_loc(), "buffer '%s' is %s; the VM loads f32, bf16 and f16 weights",
              buf->name, amk_dtype_text_name(buf->dtype));
    return false;
  }
  size_t elem = (size_t)amk_dtype_nbytes(buf->dtype, 1);
  size_t offset = 0;
  int64_t rows = 0;
  const int64_t *dims = pb->shape;
  const char *part = buf->source;
  char *dst = NULL;
  while (*part) {
    const char *end = strchr(part, '+');
    size_t len = end ? (size_t)(end - part) : strlen(part);
    char key[512];
    if (len == 0 || len >= sizeof key) {
      amk_error(diag, no_loc(), "buffer '%s' has a malformed source '%s'", buf->name,
                buf->source);
      return false;
    }
    memcpy(key, part, len);
    key[len] = '\0';
    const AmkStTensor *t = amk_safetensors_find(st, key);
    if (!t) {
      amk_error(diag, no_loc(), "tensor '%s' (for buffer '%s') is not in the checkpoint", key,
                buf->name);
      return false;
    }
    /* Each part has the buffer's shape but for the rows (dimension 0),
     * which add up across the parts. */
    bool fits = t->rank == buf->rank && buf->rank >= 1;
    for (uint32_t d = 1; fits && d < buf->rank; d++)
      fits = t->shape[d] == dims[d];
    if (!fits) {
      char have[160] = "", want[160] = "";
      for (uint32_t d = 0; d < t->rank && d < AMK_ST_MAX_RANK; d++)
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%" PRId64, d ? ", " : "",
                 t->shape[d]);
      for (uint32_t d = 0; d < buf->rank; d++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%" PRId64, d ? ", " : "",
                 dims[d]);
      amk_error(diag, no_loc(),
                "tensor '%s' in %s has shape [%s], which does not fit buffer '%s' [%s]", key,
                t->file, have, buf->name, want);
      return false;
    }
    rows += t->shape[0];
    size_t bytes = (size_t)t->numel * elem;
    if (rows > dims[0] || offset + bytes > (size_t)pb->nbytes) {
      amk_error(diag, no_loc(),
                "the tensors of source '%s' have more rows than buffer '%s' (%" PRId64 ")",
                buf->source, buf->name, dims[0]);
      return false;
    }
    if (offset == 0 && !end && can_map(t, pb, true)) {
      w->buffers[b] = (WeightBuffer){.origin = AMK_WEIGHTS_MAPPED, .data = t->data,
                                     .nbytes = t->nbytes};
      add_piece(&w->buffers[b], t->data, 0, t->nbytes);
    } else if (!dst && can_map(t, pb, false)) {
      /* Parts of the buffer's dtype stay in the file as pieces, joined
       * only when a host copy is asked for. */
      WeightBuffer *wb = &w->buffers[b];
      wb->origin = AMK_WEIGHTS_JOINED;
      wb->nbytes = (size_t)pb->nbytes;
      add_piece(wb, t->data, offset, bytes);
    } else {
      if (!dst) {
        /* A part needs converting: the whole buffer becomes a copy. */
        WeightBuffer keep = w->buffers[b];
        dst = own_copy(w, b, AMK_WEIGHTS_CONVERTED);
        for (uint32_t i = 0; i < keep.n_pieces; i++)
          memcpy(dst + keep.pieces[i].offset, keep.pieces[i].data, keep.pieces[i].nbytes);
        free(keep.pieces);
      }
      if (!amk_safetensors_convert(t, buf->dtype, dst + offset, bytes, diag))
        return false;
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
  for (uint32_t b = 0; b < plan->n_buffers && ok; b++)
    if (is_loaded(&plan->buffers[b])) {
      ok = bind_weight(w, b, w->checkpoint, diag);
      mapped |= w->buffers[b].origin == AMK_WEIGHTS_MAPPED ||
                w->buffers[b].origin == AMK_WEIGHTS_JOINED;
    }
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

const void *amk_weights_data(const AmkWeights *w, uint32_t b, size_t *nbytes) {
  if (!w || b >= w->plan->n_buffers || w->buffers[b].origin == AMK_WEIGHTS_NONE) {
    if (nbytes)
      *nbytes = 0;
    return NULL;
  }
  WeightBuffer *wb = &w->buffers[b];
  if (!wb->data && wb->origin == AMK_WEIGHTS_RANDOM) {
    const AmkPlanBuffer *pb = &w->plan->buffers[b];
    wb->owned = amk_xcalloc(1, wb->nbytes ? wb->nbytes : 1);
    amk_random_fill(&wb->rule, pb->dtype, pb->numel, wb->owned);
    wb->data = wb->owned;
  } else if (!wb->data && wb->origin == AMK_WEIGHTS_JOINED) {
    wb->owned = amk_xcalloc(1, wb->nbytes ? wb->nbytes : 1);
    for (uint32_t i = 0; i < wb->n_pieces; i++)
      memcpy((char *)wb->owned + wb->pieces[i].offset, wb->pieces[i].data, wb->pieces[i].nbytes);
    wb->data = wb->owned;
  }
  if (nbytes)
    *nbytes = wb->nbytes;
  return wb->data;
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

AmkWeightsOrigin amk_weights_origin(const AmkWeights *w, uint32_t b) {
  return w && b < w->plan->n_buffers ? w->buffers[b].origin : AMK_WEIGHTS_NONE;
}
