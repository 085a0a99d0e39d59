/* The CPU reference VM (include/amk/vm.h). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/instructions.h"
#include "amk/numerics.h"
#include "amk/rope.h"
#include "amk/safetensors.h"
#include "amk/sampling.h"
#include "amk/validate.h"
#include "amk/vm.h"

#include <pthread.h>
#include <unistd.h>

/* Threads fire ready tasks at once only in programs this large: below it
 * starting them costs more than the tasks. */
enum { PARALLEL_MIN_TASKS = 256, VM_MAX_THREADS = 16 };

typedef struct {
  void *data;
  size_t nbytes;
  bool owned; /* false for memory that belongs to a page */
  AmkTensorView view;
} VmBuffer;

/* How a task's params follow the step's position. */
typedef enum {
  FOLLOW_NONE,
  FOLLOW_KV_ROW,       /* KV_APPEND / rope_kv: write row `pos` */
  FOLLOW_WINDOW,       /* attention over [0, pos] */
  FOLLOW_PARTITION,    /* split-KV attention: partition p of P of [0, pos] */
} FollowKind;

typedef struct {
  AmkOp op;
  AmkInstParams params;
  AmkInstExtra extra;
  float *inv_freq; /* owned; ROPE with scaled frequencies */
  uint32_t n_inputs, n_outputs;
  uint32_t *inputs, *outputs; /* buffer indices */
  uint32_t counter;           /* counter index it increments */
  FollowKind follow;
  /* FOLLOW_PARTITION: partition part_index of part_count (from the
   * ATTENTION_COMBINE reading the task's output), or part_count 0 when no
   * combine reads it and the task keeps its compiled span from kv_start. */
  int64_t part_index, part_count, span;
} VmTask;

struct AmkVm {
  const AmkModule *m;
  VmBuffer *buffers;
  void **pages;
  uint32_t n_pages;
  VmTask *tasks;
  uint32_t *counter_value;
  /* Waits in CSR form: task t waits on wait_counter[k] >= wait_threshold[k]
   * for k in [wait_off[t], wait_off[t+1]). */
  uint32_t *wait_off, *wait_counter, *wait_threshold;
  /* For each counter, the waits on it: (task, threshold) pairs. */
  uint32_t *waiter_off, *waiter_task, *waiter_threshold;
  uint32_t *unsatisfied, *queue;
  int threads; /* workers firing ready tasks in a step (1: in order, here) */
  int64_t max_seq, vocab;
  int32_t token_buffer, pos_buffer, logits_buffer;
  float *logits;
};

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

static uint32_t buffer_index(const AmkModule *m, int32_t id) {
  const AmkBuffer *b = amk_module_buffer(m, id);
  return b ? (uint32_t)(b - m->buffers) : UINT32_MAX;
}

static uint32_t counter_index(const AmkModule *m, int32_t id) {
  const AmkCounter *c = amk_module_counter(m, id);
  return c ? (uint32_t)(c - m->counters) : UINT32_MAX;
}

void amk_vm_free(AmkVm *vm) {
  if (!vm)
    return;
  const AmkModule *m = vm->m;
  if (vm->buffers)
    for (uint32_t i = 0; i < m->n_buffers; i++)
      if (vm->buffers[i].owned)
        free(vm->buffers[i].data);
  for (uint32_t p = 0; p < vm->n_pages; p++)
    free(vm->pages[p]);
  if (vm->tasks)
    for (uint32_t t = 0; t < m->n_tasks; t++) {
      free(vm->tasks[t].inv_freq);
      free(vm->tasks[t].inputs);
      free(vm->tasks[t].outputs);
    }
  free(vm->pages);
  free(vm->buffers);
  free(vm->tasks);
  free(vm->counter_value);
  free(vm->wait_off);
  free(vm->wait_counter);
  free(vm->wait_threshold);
  free(vm->waiter_off);
  free(vm->waiter_task);
  free(vm->waiter_threshold);
  free(vm->unsatisfied);
  free(vm->queue);
  free(vm->logits);
  free(vm);
}

/* ---- memory ---------------------------------------------------------------- */

/* Activations bound to a page share its memory; the rest get their own. */
static bool allocate_buffers(AmkVm *vm, AmkDiagEngine *diag) {
  const AmkModule *m = vm->m;
  vm->buffers = amk_xcalloc(m->n_buffers ? m->n_buffers : 1, sizeof *vm->buffers);
  if (m->pages) {
    vm->n_pages = m->pages->n_pages;
    vm->pages = amk_xcalloc(vm->n_pages ? vm->n_pages : 1, sizeof *vm->pages);
    for (uint32_t p = 0; p < vm->n_pages; p++)
      vm->pages[p] = amk_xcalloc(1, (size_t)(m->pages->pages[p].nbytes > 0
                                                  ? m->pages->pages[p].nbytes
                                                  : 1));
    for (uint32_t k = 0; k < m->pages->n_bindings; k++) {
      const AmkPageBinding *bind = &m->pages->bindings[k];
      uint32_t b = buffer_index(m, bind->buffer);
      uint32_t p = UINT32_MAX;
      for (uint32_t q = 0; q < vm->n_pages; q++)
        if (m->pages->pages[q].id == bind->page)
          p = q;
      int64_t nbytes;
      if (b == UINT32_MAX || p == UINT32_MAX || !amk_buffer_nbytes(&m->buffers[b], &nbytes) ||
          nbytes > m->pages->pages[p].nbytes) {
        amk_error(diag, no_loc(), "the page table binds buffer %d to page %d, which cannot hold it",
                  bind->buffer, bind->page);
        return false;
      }
      vm->buffers[b].data = vm->pages[p];
      vm->buffers[b].nbytes = (size_t)nbytes;
    }
  }
  for (uint32_t b = 0; b < m->n_buffers; b++) {
    const AmkBuffer *buf = &m->buffers[b];
    int64_t numel, nbytes;
    if (!amk_buffer_numel(buf, &numel) || !amk_buffer_nbytes(buf, &nbytes) ||
        buf->rank > AMK_MAX_RANK) {
      amk_error(diag, buf->loc, "buffer '%s' has a shape the VM cannot allocate", buf->name);
      return false;
    }
    if (!vm->buffers[b].data) {
      vm->buffers[b].data = calloc(1, (size_t)(nbytes > 0 ? nbytes : 1));
      if (!vm->buffers[b].data) {
        amk_error(diag, buf->loc, "cannot allocate %" PRId64 " bytes for buffer '%s'", nbytes,
                  buf->name);
        return false;
      }
      vm->buffers[b].owned = true;
      vm->buffers[b].nbytes = (size_t)nbytes;
    }
    int64_t dims[AMK_MAX_RANK];
    for (uint32_t d = 0; d < buf->rank; d++)
      amk_value_as_int(&buf->shape[d], &dims[d]);
    vm->buffers[b].view = amk_tensor_view(vm->buffers[b].data, buf->dtype, buf->rank, dims);
  }
  return true;
}

/* Fills a WEIGHT/CONST buffer from its `source`: one state-dict key, or
 * several joined by '+' whose tensors are stacked along dimension 0. */
static bool bind_weight(AmkVm *vm, uint32_t b, const AmkSafetensors *st,
                        AmkDiagEngine *diag) {
  const AmkBuffer *buf = &vm->m->buffers[b];
  VmBuffer *vb = &vm->buffers[b];
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
  const int64_t *dims = vb->view.shape;
  const char *part = buf->source;
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
      amk_error(diag, no_loc(), "tensor '%s' (for buffer '%s') is not in the checkpoint",
                key, buf->name);
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
    if (rows > dims[0] || offset + bytes > vb->nbytes) {
      amk_error(diag, no_loc(),
                "the tensors of source '%s' have more rows than buffer '%s' (%" PRId64 ")",
                buf->source, buf->name, dims[0]);
      return false;
    }
    if (!amk_safetensors_convert(t, buf->dtype, (char *)vb->data + offset, bytes, diag))
      return false;
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

/* ---- synthetic CONST buffers ------------------------------------------------ */

#define ROPE_INV_FREQ_SOURCE "amk.rope_inv_freq:"

/* One number of a synthetic source: the whole text must parse. */
static bool parse_number(const char *text, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || *end != '\0' || errno == ERANGE || !isfinite(v))
    return false;
  *out = v;
  return true;
}

/* Parses "head_dim=..,theta=..[,rope_type=llama3,factor=..,low_freq_factor=..,
 * high_freq_factor=..,original_max_position_embeddings=..]" (docs/Fusion.md).
 * Returns NULL or what is wrong. */
static const char *parse_rope_source(const char *text, AmkRopeSpec *spec) {
  *spec = (AmkRopeSpec){.kind = AMK_ROPE_DEFAULT};
  enum { HEAD_DIM, THETA, TYPE, FACTOR, LOW, HIGH, ORIGINAL, N_KEYS };
  static const char *const keys[N_KEYS] = {
      "head_dim", "theta", "rope_type", AMK_ROPE_PARAM_FACTOR, AMK_ROPE_PARAM_LOW_FREQ_FACTOR,
      AMK_ROPE_PARAM_HIGH_FREQ_FACTOR, AMK_ROPE_PARAM_ORIGINAL_MAX_POS};
  double value[N_KEYS] = {0};
  bool seen[N_KEYS] = {false};
  char copy[512];
  if (strlen(text) >= sizeof copy)
    return "the source is too long";
  memcpy(copy, text, strlen(text) + 1);
  char *save = NULL;
  for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(item, '=');
    if (!eq)
      return "an item is not key=value";
    *eq = '\0';
    int k = -1;
    for (int i = 0; i < N_KEYS; i++)
      if (strcmp(item, keys[i]) == 0)
        k = i;
    if (k < 0)
      return "unknown key";
    if (seen[k])
      return "a key is given twice";
    seen[k] = true;
    if (k == TYPE) {
      if (strcmp(eq + 1, "llama3") != 0)
        return "rope_type must be llama3";
    } else if (!parse_number(eq + 1, &value[k])) {
      return "a value is not a finite number";
    }
  }
  if (!seen[HEAD_DIM] || !seen[THETA])
    return "head_dim and theta are required";
  if (value[HEAD_DIM] != floor(value[HEAD_DIM]) || value[HEAD_DIM] <= 0 ||
      value[HEAD_DIM] > (1 << 20) || (int64_t)value[HEAD_DIM] % 2 != 0)
    return "head_dim must be a positive even integer";
  if (!(value[THETA] > 1.0))
    return "theta must be greater than 1";
  spec->head_dim = (int)value[HEAD_DIM];
  spec->theta = value[THETA];
  int scaled = seen[FACTOR] + seen[LOW] + seen[HIGH] + seen[ORIGINAL];
  if (!seen[TYPE] && scaled == 0)
    return NULL;
  if (!seen[TYPE] || scaled != 4)
    return "llama3 rope needs rope_type=llama3 with factor, low_freq_factor, "
           "high_freq_factor and original_max_position_embeddings";
  if (!(value[FACTOR] > 0.0) || !(value[LOW] > 0.0) || !(value[HIGH] > value[LOW]) ||
      !(value[ORIGINAL] > 0.0))
    return "llama3 rope needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
           "original_max_position_embeddings > 0";
  spec->kind = AMK_ROPE_LLAMA3;
  spec->factor = value[FACTOR];
  spec->low_freq_factor = value[LOW];
  spec->high_freq_factor = value[HIGH];
  spec->original_max_pos = value[ORIGINAL];
  return NULL;
}

/* The inverse frequencies, as fp32 exactly as the unfused path gets them:
 * the ROPE kernel's own 1 / powf(theta, i / half) for default rope (theta
 * marshalled to fp32 as the param is), the VM's fp32 rounding of
 * amk_rope_inv_freq for llama3 (what run_task hands ROPE). */
static void rope_inv_freq_f32(const AmkRopeSpec *spec, float *out, int half) {
  if (spec->kind == AMK_ROPE_DEFAULT) {
    float theta = (float)spec->theta;
    for (int i = 0; i < half; i++)
      out[i] = 1.0f / powf(theta, (float)i / (float)half);
    return;
  }
  double *freq = amk_xmalloc((size_t)(half > 0 ? half : 1) * sizeof *freq);
  amk_rope_inv_freq(spec, freq, half);
  for (int i = 0; i < half; i++)
    out[i] = (float)freq[i];
  free(freq);
}

/* A CONST buffer whose source starts with "amk." is computed, not loaded:
 * amk.rope_inv_freq:... is the only such source. */
static bool is_synthetic(const AmkBuffer *buf) {
  return buf->kind == AMK_KIND_CONST && buf->source && strncmp(buf->source, "amk.", 4) == 0;
}

static bool synthesize_const(AmkVm *vm, uint32_t b, AmkDiagEngine *diag) {
  const AmkBuffer *buf = &vm->m->buffers[b];
  VmBuffer *vb = &vm->buffers[b];
  if (strncmp(buf->source, ROPE_INV_FREQ_SOURCE, strlen(ROPE_INV_FREQ_SOURCE)) != 0) {
    amk_error(diag, buf->loc,
              "CONST buffer '%s' has the synthetic source '%s', which the VM does not know "
              "(it computes only " ROPE_INV_FREQ_SOURCE "...)",
              buf->name, buf->source);
    return false;
  }
  AmkRopeSpec spec;
  const char *why = parse_rope_source(buf->source + strlen(ROPE_INV_FREQ_SOURCE), &spec);
  if (why) {
    amk_error(diag, buf->loc, "CONST buffer '%s': malformed source '%s': %s", buf->name,
              buf->source, why);
    return false;
  }
  int half = spec.head_dim / 2;
  if (vb->view.numel != half ||
      (buf->dtype != AMK_DTYPE_F32 && buf->dtype != AMK_DTYPE_BF16 &&
       buf->dtype != AMK_DTYPE_F16)) {
    amk_error(diag, buf->loc,
              "CONST buffer '%s' is %s with %" PRId64 " elements; its source '%s' gives %d "
              "floats (head_dim / 2)",
              buf->name, amk_dtype_text_name(buf->dtype), vb->view.numel, buf->source, half);
    return false;
  }
  float *freq = amk_xmalloc((size_t)(half > 0 ? half : 1) * sizeof *freq);
  rope_inv_freq_f32(&spec, freq, half);
  for (int i = 0; i < half; i++) {
    if (buf->dtype == AMK_DTYPE_F32)
      memcpy((char *)vb->data + (size_t)i * 4, &freq[i], 4);
    else {
      uint16_t h = buf->dtype == AMK_DTYPE_BF16 ? amk_f32_to_bf16(freq[i])
                                                : amk_f32_to_f16(freq[i]);
      memcpy((char *)vb->data + (size_t)i * 2, &h, 2);
    }
  }
  free(freq);
  return true;
}

/* Random weights at real shapes: matrices uniform in +-1/sqrt(columns),
 * vectors (norm weights) around 1. */
static void fill_random(VmBuffer *vb, const AmkBuffer *buf, uint64_t *state) {
  int64_t numel = vb->view.numel;
  int64_t cols = buf->rank >= 2 ? vb->view.shape[buf->rank - 1] : numel;
  double scale = buf->rank >= 2 ? 1.0 / sqrt((double)(cols > 0 ? cols : 1)) : 0.1;
  double center = buf->rank >= 2 ? 0.0 : 1.0;
  for (int64_t i = 0; i < numel; i++) {
    double u = (double)(amk_splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
    float v = (float)(center + scale * (2.0 * u - 1.0));
    switch (buf->dtype) {
    case AMK_DTYPE_F32:
      ((float *)vb->data)[i] = v;
      break;
    case AMK_DTYPE_BF16:
      ((uint16_t *)vb->data)[i] = amk_f32_to_bf16(v);
      break;
    case AMK_DTYPE_F16:
      ((uint16_t *)vb->data)[i] = amk_f32_to_f16(v);
      break;
    default:
      break;
    }
  }
}

/* ---- schedule --------------------------------------------------------------- */

static bool is_attention(const AmkTask *t, int64_t flags) {
  if (t->op == AMK_OP_ATTENTION_TILE)
    return true;
  int64_t pattern = flags >> AMK_PATTERN_SHIFT;
  return t->op == AMK_OP_GEMV_TILE &&
         (pattern == AMK_PATTERN_ATTENTION || pattern == AMK_PATTERN_ATTENTION_ROPE);
}

/* Split-KV partitions (docs/Fusion.md): partition p of P covers window rows
 * [p * c, min(W, (p + 1) * c)) with W = pos + 1 and c = ceil(W / P). P and p
 * come from the ATTENTION_COMBINE that reads the partial: P is its input
 * count and p the input the partial is. A partial no combine reads keeps
 * its compiled kv_start and spans to the next partial of the same cache
 * (the last to the cache's end). Two combines disagreeing is an error. */
static bool derive_partitions(AmkVm *vm, AmkDiagEngine *diag) {
  const AmkModule *m = vm->m;
  int64_t *index_of = amk_xmalloc((m->n_buffers ? m->n_buffers : 1) * sizeof *index_of);
  int64_t *count_of = amk_xmalloc((m->n_buffers ? m->n_buffers : 1) * sizeof *count_of);
  for (uint32_t b = 0; b < m->n_buffers; b++)
    index_of[b] = count_of[b] = -1;
  bool ok = true;
  for (uint32_t t = 0; t < m->n_tasks && ok; t++) {
    const VmTask *c = &vm->tasks[t];
    if (c->op != AMK_OP_ATTENTION_COMBINE)
      continue;
    for (uint32_t i = 0; i < c->n_inputs && ok; i++) {
      uint32_t b = c->inputs[i];
      if (b >= m->n_buffers)
        continue;
      if (index_of[b] >= 0 && (index_of[b] != i || count_of[b] != c->n_inputs)) {
        amk_error(diag, m->tasks[t].loc,
                  "task %d ('%s'): buffer '%s' is partial %u of %u here but partial %" PRId64
                  " of %" PRId64 " of another combine; the VM cannot tell its split-KV "
                  "partition",
                  m->tasks[t].id, m->tasks[t].label, m->buffers[b].name, i, c->n_inputs,
                  index_of[b], count_of[b]);
        ok = false;
      }
      index_of[b] = i;
      count_of[b] = c->n_inputs;
    }
  }
  for (uint32_t t = 0; t < m->n_tasks && ok; t++) {
    VmTask *vt = &vm->tasks[t];
    if (vt->follow != FOLLOW_PARTITION || vt->n_outputs < 1 || vt->outputs[0] >= m->n_buffers)
      continue;
    uint32_t out = vt->outputs[0];
    if (count_of[out] > 0) {
      vt->part_index = index_of[out];
      vt->part_count = count_of[out];
      continue;
    }
    /* No combine: the compiled spans. */
    if (vt->n_inputs < 2 || vt->inputs[1] >= m->n_buffers)
      continue;
    uint32_t cache = vt->inputs[1];
    int64_t mine = vt->params.kv_start.i;
    int64_t next = vm->buffers[cache].view.rank ? vm->buffers[cache].view.shape[0] : 0;
    for (uint32_t u = 0; u < m->n_tasks; u++) {
      const VmTask *other = &vm->tasks[u];
      int64_t start = other->params.kv_start.i;
      if (other->follow == FOLLOW_PARTITION && other->n_inputs >= 2 &&
          other->inputs[1] == cache && start > mine && start < next)
        next = start;
    }
    vt->span = next - mine;
  }
  free(index_of);
  free(count_of);
  return ok;
}

static bool build_schedule(AmkVm *vm, AmkDiagEngine *diag) {
  const AmkModule *m = vm->m;
  uint32_t n = m->n_tasks, nc = m->n_counters;
  vm->tasks = amk_xcalloc(n ? n : 1, sizeof *vm->tasks);
  vm->counter_value = amk_xcalloc(nc ? nc : 1, sizeof *vm->counter_value);
  vm->wait_off = amk_xcalloc((size_t)n + 1, sizeof *vm->wait_off);
  for (uint32_t t = 0; t < n; t++)
    vm->wait_off[t + 1] = vm->wait_off[t] + m->tasks[t].n_waits;
  uint32_t total_waits = vm->wait_off[n];
  vm->wait_counter = amk_xmalloc((total_waits + 1) * sizeof *vm->wait_counter);
  vm->wait_threshold = amk_xmalloc((total_waits + 1) * sizeof *vm->wait_threshold);
  vm->waiter_off = amk_xcalloc((size_t)nc + 1, sizeof *vm->waiter_off);
  for (uint32_t t = 0; t < n; t++) {
    const AmkTask *task = &m->tasks[t];
    VmTask *vt = &vm->tasks[t];
    char err[256];
    if (amk_inst_params_from_task(task, &vt->params, err, sizeof err) != 0) {
      amk_error(diag, task->loc, "task %d ('%s'): %s", task->id, task->label, err);
      return false;
    }
    vt->op = task->op;
    vt->n_inputs = task->n_inputs;
    vt->n_outputs = task->n_outputs;
    vt->inputs = amk_xmalloc((task->n_inputs + 1) * sizeof *vt->inputs);
    vt->outputs = amk_xmalloc((task->n_outputs + 1) * sizeof *vt->outputs);
    for (uint32_t i = 0; i < task->n_inputs; i++)
      vt->inputs[i] = buffer_index(m, task->inputs[i]);
    for (uint32_t i = 0; i < task->n_outputs; i++)
      vt->outputs[i] = buffer_index(m, task->outputs[i]);
    vt->counter = counter_index(m, task->out_counter);
    vt->extra.recipe = amk_task_param(task, "recipe");
    for (uint32_t w = 0; w < task->n_waits; w++) {
      int64_t threshold = 0;
      amk_value_as_int(&task->waits[w].threshold, &threshold);
      uint32_t c = counter_index(m, task->waits[w].counter);
      vm->wait_counter[vm->wait_off[t] + w] = c;
      vm->wait_threshold[vm->wait_off[t] + w] = (uint32_t)threshold;
      vm->waiter_off[c + 1]++;
    }
    int64_t flags = vt->params.flags.i;
    if (task->op == AMK_OP_KV_APPEND ||
        (task->op == AMK_OP_GEMV_TILE && (flags >> AMK_PATTERN_SHIFT) == AMK_PATTERN_ROPE_KV))
      vt->follow = FOLLOW_KV_ROW;
    else if (is_attention(task, flags))
      vt->follow = (flags & 2) ? FOLLOW_PARTITION : FOLLOW_WINDOW;
    if (task->op == AMK_OP_ROPE) {
      AmkRopeSpec spec;
      const char *why = NULL;
      if (amk_rope_spec_from_task(task, &spec, &why) && spec.kind == AMK_ROPE_LLAMA3) {
        int half = spec.head_dim / 2;
        double *freq = amk_xmalloc((size_t)(half > 0 ? half : 1) * sizeof *freq);
        amk_rope_inv_freq(&spec, freq, half);
        vt->inv_freq = amk_xmalloc((size_t)(half > 0 ? half : 1) * sizeof *vt->inv_freq);
        for (int i = 0; i < half; i++)
          vt->inv_freq[i] = (float)freq[i];
        free(freq);
        vt->extra.rope_inv_freq = vt->inv_freq;
      }
    }
  }
  for (uint32_t c = 0; c < nc; c++)
    vm->waiter_off[c + 1] += vm->waiter_off[c];
  vm->waiter_task = amk_xmalloc((total_waits + 1) * sizeof *vm->waiter_task);
  vm->waiter_threshold = amk_xmalloc((total_waits + 1) * sizeof *vm->waiter_threshold);
  uint32_t *fill = amk_xcalloc(nc ? nc : 1, sizeof *fill);
  for (uint32_t t = 0; t < n; t++)
    for (uint32_t k = vm->wait_off[t]; k < vm->wait_off[t + 1]; k++) {
      uint32_t c = vm->wait_counter[k];
      uint32_t at = vm->waiter_off[c] + fill[c]++;
      vm->waiter_task[at] = t;
      vm->waiter_threshold[at] = vm->wait_threshold[k];
    }
  free(fill);
  vm->unsatisfied = amk_xmalloc((n ? n : 1) * sizeof *vm->unsatisfied);
  vm->queue = amk_xmalloc((n ? n : 1) * sizeof *vm->queue);
  return derive_partitions(vm, diag);
}

/* The IO buffers the host drives, found by the names the lowerings use. */
static bool find_io(AmkVm *vm, AmkDiagEngine *diag) {
  const AmkModule *m = vm->m;
  vm->token_buffer = vm->pos_buffer = vm->logits_buffer = -1;
  for (uint32_t b = 0; b < m->n_buffers; b++) {
    const AmkBuffer *buf = &m->buffers[b];
    if (buf->kind == AMK_KIND_IO_INPUT && strcmp(buf->name, "token_id") == 0)
      vm->token_buffer = (int32_t)b;
    else if (buf->kind == AMK_KIND_IO_INPUT && strcmp(buf->name, "pos") == 0)
      vm->pos_buffer = (int32_t)b;
    else if (buf->kind == AMK_KIND_IO_OUTPUT && vm->logits_buffer < 0)
      vm->logits_buffer = (int32_t)b;
    if (buf->kind == AMK_KIND_KV_CACHE && buf->rank >= 1) {
      int64_t rows = vm->buffers[b].view.shape[0];
      if (vm->max_seq == 0 || rows < vm->max_seq)
        vm->max_seq = rows;
    }
  }
  if (vm->token_buffer < 0 || vm->logits_buffer < 0) {
    amk_error(diag, no_loc(),
              "the program has no %s buffer; the VM feeds an IO_INPUT named 'token_id' and "
              "reads the first IO_OUTPUT as the logits",
              vm->token_buffer < 0 ? "IO_INPUT 'token_id'" : "IO_OUTPUT");
    return false;
  }
  const AmkTensorView *lv = &vm->buffers[vm->logits_buffer].view;
  if (lv->dtype != AMK_DTYPE_F32 && lv->dtype != AMK_DTYPE_BF16 && lv->dtype != AMK_DTYPE_F16) {
    amk_error(diag, no_loc(), "the logits buffer '%s' is not a floating-point buffer",
              m->buffers[vm->logits_buffer].name);
    return false;
  }
  vm->vocab = lv->numel;
  vm->logits = amk_xmalloc((size_t)(vm->vocab > 0 ? vm->vocab : 1) * sizeof *vm->logits);
  if (vm->max_seq == 0)
    vm->max_seq = INT64_MAX; /* no cache: any position */
  return true;
}

static AmkVm *create(const AmkModule *m, const char *weights_dir, bool random,
                     uint64_t seed, AmkDiagEngine *diag) {
  AmkValidateResult result;
  if (!amk_validate_module(m, diag, NULL, &result)) {
    amk_error(diag, no_loc(),
              "the reference VM refuses to run a program that validate rejects");
    return NULL;
  }
  AmkVm *vm = amk_xcalloc(1, sizeof *vm);
  /* $AMK_VM_THREADS, else one per online CPU (at most VM_MAX_THREADS). */
  const char *threads_env = getenv("AMK_VM_THREADS");
  long threads = threads_env ? atol(threads_env) : sysconf(_SC_NPROCESSORS_ONLN);
  vm->threads = threads < 1 ? 1 : threads > VM_MAX_THREADS ? VM_MAX_THREADS : (int)threads;
  vm->m = m;
  if (!allocate_buffers(vm, diag) || !build_schedule(vm, diag) || !find_io(vm, diag)) {
    amk_vm_free(vm);
    return NULL;
  }
  bool needs_weights = false;
  for (uint32_t b = 0; b < m->n_buffers; b++) {
    const AmkBuffer *buf = &m->buffers[b];
    if (is_synthetic(buf)) {
      if (!synthesize_const(vm, b, diag)) {
        amk_vm_free(vm);
        return NULL;
      }
    } else {
      needs_weights |= buf->kind == AMK_KIND_WEIGHT || buf->kind == AMK_KIND_CONST;
    }
  }
  if (!needs_weights)
    return vm;
  if (random) {
    uint64_t state = seed;
    for (uint32_t b = 0; b < m->n_buffers; b++)
      if ((m->buffers[b].kind == AMK_KIND_WEIGHT || m->buffers[b].kind == AMK_KIND_CONST) &&
          !is_synthetic(&m->buffers[b]))
        fill_random(&vm->buffers[b], &m->buffers[b], &state);
    return vm;
  }
  const char *dir = weights_dir ? weights_dir : m->model_dir;
  if (!dir) {
    amk_error(diag, no_loc(),
              "the program names no model folder to load weights from; give --weights DIR");
    amk_vm_free(vm);
    return NULL;
  }
  AmkSafetensors *st = amk_safetensors_open(dir, diag);
  if (!st) {
    amk_vm_free(vm);
    return NULL;
  }
  bool ok = true;
  for (uint32_t b = 0; b < m->n_buffers && ok; b++)
    if ((m->buffers[b].kind == AMK_KIND_WEIGHT || m->buffers[b].kind == AMK_KIND_CONST) &&
        !is_synthetic(&m->buffers[b]))
      ok = bind_weight(vm, b, st, diag);
  amk_safetensors_close(st);
  if (!ok) {
    amk_vm_free(vm);
    return NULL;
  }
  return vm;
}

AmkVm *amk_vm_create(const AmkModule *m, const char *weights_dir, AmkDiagEngine *diag) {
  return create(m, weights_dir, false, 0, diag);
}

AmkVm *amk_vm_create_random(const AmkModule *m, uint64_t seed, AmkDiagEngine *diag) {
  return create(m, NULL, true, seed, diag);
}

int64_t amk_vm_max_seq(const AmkVm *vm) { return vm->max_seq; }
int64_t amk_vm_vocab(const AmkVm *vm) { return vm->vocab; }

void amk_vm_reset(AmkVm *vm) {
  const AmkModule *m = vm->m;
  for (uint32_t b = 0; b < m->n_buffers; b++)
    if (m->buffers[b].kind == AMK_KIND_KV_CACHE)
      memset(vm->buffers[b].data, 0, vm->buffers[b].nbytes);
}

const float *amk_vm_logits(const AmkVm *vm, size_t *n) {
  *n = (size_t)vm->vocab;
  return vm->logits;
}

static void write_i32(VmBuffer *vb, int32_t value) {
  memset(vb->data, 0, vb->nbytes);
  if (vb->nbytes >= sizeof value)
    memcpy(vb->data, &value, sizeof value);
}

/* Runs one task with its params moved to the step's position. On failure
 * the reason is written to err. Safe to call from several threads at once
 * for different tasks (it reads the VM and writes only the task's outputs). */
static bool run_task(const AmkVm *vm, uint32_t t, int64_t pos, char *err, size_t err_len) {
  const AmkTask *task = &vm->m->tasks[t];
  VmTask *vt = &vm->tasks[t];
  AmkInstParams params = vt->params;
  AmkInstExtra extra = vt->extra;
  switch (vt->follow) {
  case FOLLOW_NONE:
    break;
  case FOLLOW_KV_ROW:
    extra.has_position = true;
    extra.position = pos;
    params.pos.i = (int32_t)pos;
    params.present |= AMK_PARAM_BIT(pos);
    break;
  case FOLLOW_WINDOW:
    extra.has_position = true; /* attention_rope rotates q at the step position */
    extra.position = pos;
    params.kv_start.i = 0;
    params.kv_len.i = (int32_t)(pos + 1);
    break;
  case FOLLOW_PARTITION: {
    extra.has_position = true;
    extra.position = pos;
    int64_t start, end;
    if (vt->part_count > 0) {
      int64_t window = pos + 1;
      int64_t chunk = (window + vt->part_count - 1) / vt->part_count;
      start = vt->part_index * chunk;
      if (start > window)
        start = window;
      end = start + chunk < window ? start + chunk : window;
    } else {
      start = params.kv_start.i;
      end = start + vt->span < pos + 1 ? start + vt->span : pos + 1;
    }
    params.kv_start.i = (int32_t)start;
    params.kv_len.i = (int32_t)(end > start ? end - start : 0);
    break;
  }
  }
  AmkTensorView in[AMK_MAX_INPUTS * 4], out[AMK_MAX_OUTPUTS];
  uint32_t n_in = vt->n_inputs < AMK_MAX_INPUTS * 4 ? vt->n_inputs : AMK_MAX_INPUTS * 4;
  for (uint32_t i = 0; i < n_in; i++)
    in[i] = vm->buffers[vt->inputs[i]].view;
  for (uint32_t i = 0; i < vt->n_outputs && i < AMK_MAX_OUTPUTS; i++)
    out[i] = vm->buffers[vt->outputs[i]].view;
  char why[512];
  int rc = amk_inst_execute(vt->op, &params, in, n_in, out, vt->n_outputs, &extra, why,
                            sizeof why);
  if (rc != AMK_INST_OK) {
    snprintf(err, err_len, "task %d ('%s') failed at position %" PRId64 ": %s", task->id,
             task->label, pos, why);
    return false;
  }
  return true;
}

/* Marks task t done: one increment of its counter, and every waiter whose
 * last wait this satisfies joins the ready queue. */
static void finish_task(AmkVm *vm, uint32_t t, uint32_t *tail) {
  uint32_t c = vm->tasks[t].counter;
  uint32_t value = ++vm->counter_value[c];
  for (uint32_t k = vm->waiter_off[c]; k < vm->waiter_off[c + 1]; k++)
    if (vm->waiter_threshold[k] == value && --vm->unsatisfied[vm->waiter_task[k]] == 0)
      vm->queue[(*tail)++] = vm->waiter_task[k];
}

/* Several threads fire ready tasks at once. The result does not depend on
 * the order: the validator proved every read ordered after its writers, and
 * each task computes the same values wherever and whenever it runs. */
typedef struct {
  AmkVm *vm;
  int64_t pos;
  pthread_mutex_t lock;
  pthread_cond_t changed;
  uint32_t head, tail, finished, running;
  bool failed;
  char err[512];
} ParallelStep;

static void *step_worker(void *arg) {
  ParallelStep *s = arg;
  AmkVm *vm = s->vm;
  uint32_t n = vm->m->n_tasks;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (s->head == s->tail && !s->failed && s->finished < n && s->running > 0)
      pthread_cond_wait(&s->changed, &s->lock);
    if (s->failed || s->finished == n || s->head == s->tail)
      break; /* done, failed, or stuck (nothing ready, nothing running) */
    uint32_t t = vm->queue[s->head++];
    s->running++;
    pthread_mutex_unlock(&s->lock);
    char err[512];
    bool ok = run_task(vm, t, s->pos, err, sizeof err);
    pthread_mutex_lock(&s->lock);
    s->running--;
    s->finished++;
    if (!ok && !s->failed) {
      s->failed = true;
      snprintf(s->err, sizeof s->err, "%s", err);
    } else if (ok) {
      finish_task(vm, t, &s->tail);
    }
    pthread_cond_broadcast(&s->changed);
  }
  pthread_cond_broadcast(&s->changed);
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

/* Fires every task of a step; returns the number fired (all of them unless
 * a task failed or the schedule is stuck), the reason in err on failure. */
static uint32_t fire_tasks(AmkVm *vm, int64_t pos, uint32_t tail, char *err, size_t err_len) {
  uint32_t n = vm->m->n_tasks;
  if (vm->threads <= 1 || n < PARALLEL_MIN_TASKS) {
    uint32_t head = 0;
    while (head < tail) {
      uint32_t t = vm->queue[head++];
      if (!run_task(vm, t, pos, err, err_len))
        return UINT32_MAX;
      finish_task(vm, t, &tail);
    }
    return tail;
  }
  ParallelStep s = {.vm = vm, .pos = pos, .head = 0, .tail = tail};
  pthread_mutex_init(&s.lock, NULL);
  pthread_cond_init(&s.changed, NULL);
  pthread_t threads[VM_MAX_THREADS];
  int started = 0;
  for (int i = 0; i < vm->threads; i++)
    if (pthread_create(&threads[started], NULL, step_worker, &s) == 0)
      started++;
  if (started == 0)
    step_worker(&s); /* no threads to be had: fire them here */
  for (int i = 0; i < started; i++)
    pthread_join(threads[i], NULL);
  pthread_cond_destroy(&s.changed);
  pthread_mutex_destroy(&s.lock);
  if (s.failed) {
    snprintf(err, err_len, "%s", s.err);
    return UINT32_MAX;
  }
  return s.tail;
}

bool amk_vm_step(AmkVm *vm, int32_t token, int64_t pos, AmkDiagEngine *diag) {
  const AmkModule *m = vm->m;
  if (token < 0 || token >= vm->vocab) {
    amk_error(diag, no_loc(), "token %d is outside the vocabulary [0, %" PRId64 ")", token,
              vm->vocab);
    return false;
  }
  if (pos < 0 || pos >= vm->max_seq || pos > INT32_MAX - 1) {
    amk_error(diag, no_loc(),
              "position %" PRId64 " is beyond the KV cache (%" PRId64 " rows); compile with a "
              "larger --max-seq",
              pos, vm->max_seq);
    return false;
  }
  for (uint32_t b = 0; b < m->n_buffers; b++)
    if (m->buffers[b].kind == AMK_KIND_IO_INPUT)
      memset(vm->buffers[b].data, 0, vm->buffers[b].nbytes);
  write_i32(&vm->buffers[vm->token_buffer], token);
  if (vm->pos_buffer >= 0)
    write_i32(&vm->buffers[vm->pos_buffer], (int32_t)pos);

  /* Counter-driven firing: a task becomes ready when its last unsatisfied
   * wait is met; ready tasks run in the order they became ready. */
  memset(vm->counter_value, 0, (m->n_counters ? m->n_counters : 1) * sizeof *vm->counter_value);
  uint32_t tail = 0;
  for (uint32_t t = 0; t < m->n_tasks; t++) {
    vm->unsatisfied[t] = vm->wait_off[t + 1] - vm->wait_off[t];
    if (vm->unsatisfied[t] == 0)
      vm->queue[tail++] = t;
  }
  char err[600];
  uint32_t fired = fire_tasks(vm, pos, tail, err, sizeof err);
  if (fired == UINT32_MAX) {
    amk_error(diag, no_loc(), "%s", err);
    return false;
  }
  tail = fired;
  if (tail != m->n_tasks) {
    amk_error(diag, no_loc(), "%u of %u tasks never became ready; the schedule is stuck",
              m->n_tasks - tail, m->n_tasks);
    return false;
  }
  const VmBuffer *lb = &vm->buffers[vm->logits_buffer];
  for (int64_t i = 0; i < vm->vocab; i++) {
    switch (lb->view.dtype) {
    case AMK_DTYPE_BF16:
      vm->logits[i] = amk_bf16_to_f32(((const uint16_t *)lb->data)[i]);
      break;
    case AMK_DTYPE_F16:
      vm->logits[i] = amk_f16_to_f32(((const uint16_t *)lb->data)[i]);
      break;
    default:
      vm->logits[i] = ((const float *)lb->data)[i];
      break;
    }
  }
  return true;
}

/* The host memory of buffer `index` (list position) as loaded: the CUDA
 * backend uploads exactly these bytes (declared in amk/backend.h). */
const void *amk_vm_buffer_host(const AmkVm *vm, uint32_t index, size_t *nbytes) {
  if (!vm || index >= vm->m->n_buffers || !vm->buffers) {
    if (nbytes)
      *nbytes = 0;
    return NULL;
  }
  if (nbytes)
    *nbytes = vm->buffers[index].nbytes;
  return vm->buffers[index].data;
}
