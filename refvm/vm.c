/* The CPU reference VM (include/amk/vm.h): runs a plan with the kernels of
 * instructions/. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/host.h"
#include "amk/instructions.h"
#include "amk/numerics.h"
#include "amk/tp.h"
#include "amk/vm.h"

#include <pthread.h>
#include <unistd.h>

/* Threads fire ready tasks at once only in programs this large: below it
 * starting them costs more than the tasks. */
enum { PARALLEL_MIN_TASKS = 256, VM_MAX_THREADS = 16 };

typedef struct VmPool VmPool;

typedef struct {
  void *data;
  size_t nbytes;
  bool owned; /* false for a page's memory or the weights' */
  AmkTensorView view;
} VmBuffer;

struct AmkVm {
  const AmkPlan *plan;
  const AmkModule *m;
  VmBuffer *buffers;
  void **pages;
  uint32_t *counter_value;
  /* For each counter, the waits on it: (task, threshold) pairs. */
  uint32_t *waiter_off, *waiter_task, *waiter_threshold;
  uint32_t *unsatisfied, *queue;
  /* For each task, whether it adds into an accumulator (the output of an
   * accumulating tile, mlp or attention_o: plan->buffers[b].accumulate):
   * workers stage those adds. */
  bool *accumulates;
  int threads; /* workers firing ready tasks in a step (1: in order, here) */
  VmPool *pool; /* those workers, started at the first step that uses them */
  float *logits;
  char description[128]; /* the engine's describe line */
};

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }
static void pool_stop(VmPool *s);

void amk_vm_free(AmkVm *vm) {
  if (!vm)
    return;
  pool_stop(vm->pool);
  const AmkPlan *plan = vm->plan;
  if (vm->buffers)
    for (uint32_t i = 0; i < plan->n_buffers; i++)
      if (vm->buffers[i].owned)
        free(vm->buffers[i].data);
  if (vm->pages)
    for (uint32_t p = 0; p < plan->n_pages; p++)
      free(vm->pages[p]);
  free(vm->pages);
  free(vm->buffers);
  free(vm->counter_value);
  free(vm->waiter_off);
  free(vm->waiter_task);
  free(vm->waiter_threshold);
  free(vm->unsatisfied);
  free(vm->queue);
  free(vm->accumulates);
  free(vm->logits);
  free(vm);
}

/* Activations bound to a page share its memory, WEIGHT and CONST buffers
 * are the weights' bytes (read-only: the plan refuses a task writing one),
 * the rest get their own zeroed memory. */
static bool allocate_buffers(AmkVm *vm, const AmkWeights *weights, AmkDiagEngine *diag) {
  const AmkPlan *plan = vm->plan;
  vm->buffers = amk_xcalloc(plan->n_buffers ? plan->n_buffers : 1, sizeof *vm->buffers);
  vm->pages = amk_xcalloc(plan->n_pages ? plan->n_pages : 1, sizeof *vm->pages);
  for (uint32_t p = 0; p < plan->n_pages; p++)
    vm->pages[p] = amk_xcalloc(1, (size_t)(plan->page_bytes[p] > 0 ? plan->page_bytes[p] : 1));
  for (uint32_t b = 0; b < plan->n_buffers; b++) {
    const AmkPlanBuffer *pb = &plan->buffers[b];
    VmBuffer *vb = &vm->buffers[b];
    vb->nbytes = (size_t)pb->nbytes;
    if (pb->kind == AMK_KIND_WEIGHT || pb->kind == AMK_KIND_CONST) {
      size_t have = 0;
      const void *data = amk_weights_data(weights, b, &have);
      if (!data || have < vb->nbytes) {
        amk_error(diag, no_loc(), "the weights hold no data for buffer '%s'",
                  vm->m->buffers[b].name);
        return false;
      }
      vb->data = (void *)data; /* the kernels only read inputs */
    } else if (pb->page >= 0) {
      vb->data = vm->pages[pb->page];
    } else {
      vb->data = calloc(1, (size_t)(pb->nbytes > 0 ? pb->nbytes : 1));
      if (!vb->data) {
        amk_error(diag, vm->m->buffers[b].loc, "cannot allocate %" PRId64 " bytes for buffer '%s'",
                  pb->nbytes, vm->m->buffers[b].name);
        return false;
      }
      vb->owned = true;
    }
    vb->view = amk_tensor_view(vb->data, pb->dtype, pb->rank, pb->shape);
  }
  return true;
}

/* For each counter, the tasks waiting on it and at what count, so that
 * finishing a task wakes only its waiters. */
static void index_waiters(AmkVm *vm) {
  const AmkPlan *plan = vm->plan;
  uint32_t n = plan->n_tasks, nc = plan->n_counters;
  vm->counter_value = amk_xcalloc(nc ? nc : 1, sizeof *vm->counter_value);
  vm->waiter_off = amk_xcalloc((size_t)nc + 1, sizeof *vm->waiter_off);
  for (uint32_t k = 0; k < plan->n_waits; k++)
    vm->waiter_off[plan->wait_counter[k] + 1]++;
  for (uint32_t c = 0; c < nc; c++)
    vm->waiter_off[c + 1] += vm->waiter_off[c];
  vm->waiter_task = amk_xmalloc((plan->n_waits + 1) * sizeof *vm->waiter_task);
  vm->waiter_threshold = amk_xmalloc((plan->n_waits + 1) * sizeof *vm->waiter_threshold);
  uint32_t *fill = amk_xcalloc(nc ? nc : 1, sizeof *fill);
  for (uint32_t t = 0; t < n; t++)
    for (uint32_t k = plan->tasks[t].wait_begin; k < plan->tasks[t].wait_end; k++) {
      uint32_t c = plan->wait_counter[k];
      uint32_t at = vm->waiter_off[c] + fill[c]++;
      vm->waiter_task[at] = t;
      vm->waiter_threshold[at] = plan->wait_threshold[k];
    }
  free(fill);
  vm->unsatisfied = amk_xmalloc((n ? n : 1) * sizeof *vm->unsatisfied);
  vm->queue = amk_xmalloc((n ? n : 1) * sizeof *vm->queue);
  vm->accumulates = amk_xcalloc(n ? n : 1, sizeof *vm->accumulates);
  for (uint32_t t = 0; t < n; t++)
    vm->accumulates[t] = plan->tasks[t].n_outputs == 1 &&
                         plan->buffers[plan->tasks[t].outputs[0]].accumulate;
}

static AmkVm *vm_create(const AmkPlan *plan, const AmkWeights *weights, int threads,
                        bool in_group, AmkDiagEngine *diag) {
  if (!in_group)
    for (uint32_t t = 0; t < plan->m->n_tasks; t++)
      if (amk_task_tp_group(&plan->m->tasks[t]) != 0) {
        const AmkTask *task = &plan->m->tasks[t];
        amk_error(diag, task->loc, "task %d ('%s') is a cross-rank all-reduce: this is one "
                  "rank's program of a tensor-parallel group, which runs only with the other "
                  "ranks (amk-run MODEL_DIR --tp N)", task->id, task->label);
        return NULL;
      }
  AmkVm *vm = amk_xcalloc(1, sizeof *vm);
  vm->plan = plan;
  vm->m = plan->m;
  if (threads <= 0) {
    /* $AMK_VM_THREADS, else one per online CPU (at most VM_MAX_THREADS). */
    int64_t wanted = 0;
    bool given = false;
    if (!amk_env_positive_int("AMK_VM_THREADS", "threads", &wanted, &given, diag)) {
      amk_vm_free(vm);
      return NULL;
    }
    if (!given)
      wanted = sysconf(_SC_NPROCESSORS_ONLN);
    threads = wanted < 1 ? 1 : wanted > VM_MAX_THREADS ? VM_MAX_THREADS : (int)wanted;
  }
  vm->threads = threads > VM_MAX_THREADS ? VM_MAX_THREADS : threads;
  if (vm->threads > 1 && plan->n_tasks < PARALLEL_MIN_TASKS)
    snprintf(vm->description, sizeof vm->description,
             "CPU reference VM, %d worker threads (this program's %" PRIu32
             " tasks fire in order: threads start at %d tasks)",
             vm->threads, plan->n_tasks, PARALLEL_MIN_TASKS);
  else
    snprintf(vm->description, sizeof vm->description, "CPU reference VM, %d worker thread%s",
             vm->threads, vm->threads == 1 ? "" : "s");
  if (!allocate_buffers(vm, weights, diag)) {
    amk_vm_free(vm);
    return NULL;
  }
  index_waiters(vm);
  vm->logits = amk_xmalloc((size_t)(plan->vocab > 0 ? plan->vocab * plan->logit_rows : 1) *
                          sizeof *vm->logits);
  return vm;
}

AmkVm *amk_vm_create(const AmkPlan *plan, const AmkWeights *weights, int threads,
                     AmkDiagEngine *diag) {
  return vm_create(plan, weights, threads, false, diag);
}

void amk_vm_reset(AmkVm *vm) {
  const AmkPlan *plan = vm->plan;
  for (uint32_t b = 0; b < plan->n_buffers; b++)
    if (plan->buffers[b].kind == AMK_KIND_KV_CACHE)
      memset(vm->buffers[b].data, 0, vm->buffers[b].nbytes);
}

const float *amk_vm_logits(const AmkVm *vm, size_t *n) {
  *n = (size_t)vm->plan->vocab;
  return vm->logits + (vm->plan->logit_rows - 1) * vm->plan->vocab;
}

const float *amk_vm_logit_rows(const AmkVm *vm, size_t *rows, size_t *vocab) {
  *rows = (size_t)vm->plan->logit_rows;
  *vocab = (size_t)vm->plan->vocab;
  return vm->logits;
}

bool amk_vm_share_kv(AmkVm *vm, const AmkVm *from, AmkDiagEngine *diag) {
  const AmkPlan *plan = vm->plan;
  for (uint32_t b = 0; b < plan->n_buffers; b++) {
    if (plan->buffers[b].kind != AMK_KIND_KV_CACHE)
      continue;
    const char *name = vm->m->buffers[b].name;
    int64_t found = -1;
    for (uint32_t f = 0; f < from->plan->n_buffers && found < 0; f++)
      if (from->plan->buffers[f].kind == AMK_KIND_KV_CACHE &&
          strcmp(from->m->buffers[f].name, name) == 0)
        found = f;
    if (found < 0 || from->buffers[found].nbytes != vm->buffers[b].nbytes ||
        from->plan->buffers[found].dtype != plan->buffers[b].dtype) {
      amk_error(diag, no_loc(),
                "the programs do not share KV cache '%s': the other program has %s",
                name, found < 0 ? "no KV cache of that name" : "one of another size or dtype");
      return false;
    }
    VmBuffer *vb = &vm->buffers[b];
    if (vb->owned)
      free(vb->data);
    vb->data = from->buffers[found].data;
    vb->owned = false;
    vb->view.data = vb->data;
  }
  return true;
}

void *amk_vm_kv_data(AmkVm *vm, uint32_t b, size_t *nbytes) {
  if (b >= vm->plan->n_buffers || vm->plan->buffers[b].kind != AMK_KIND_KV_CACHE) {
    *nbytes = 0;
    return NULL;
  }
  *nbytes = vm->buffers[b].nbytes;
  return vm->buffers[b].data;
}

static void write_i32(VmBuffer *vb, int32_t value) {
  memset(vb->data, 0, vb->nbytes);
  if (vb->nbytes >= sizeof value)
    memcpy(vb->data, &value, sizeof value);
}

/* Runs one task with its params moved to the step's position; with
 * `out0` set, output 0 is that memory instead of its buffer's (same dtype
 * and shape). On failure the reason is written to err. Safe to call from
 * several threads at once for different tasks (it reads the VM and writes
 * only the task's outputs), except two that add into one accumulator:
 * workers stage those (run_accumulating). */
static bool run_task_into(const AmkVm *vm, uint32_t t, int64_t pos, void *out0, char *err,
                          size_t err_len) {
  const AmkTask *task = &vm->m->tasks[t];
  const AmkPlanTask *pt = &vm->plan->tasks[t];
  AmkInstParams params = amk_plan_params_at(vm->plan, t, pos);
  AmkInstExtra extra = {.recipe = pt->recipe, .rope_inv_freq = pt->rope_inv_freq};
  if (pt->follow != AMK_PLAN_FOLLOW_NONE) {
    /* KV rows, rope_kv, attention_rope and attention_o rotate at the step
     * position. */
    extra.has_position = true;
    extra.position = pos;
  }
  AmkTensorView in[AMK_MAX_INPUTS * 4], out[AMK_MAX_OUTPUTS];
  uint32_t n_in = pt->n_inputs < AMK_MAX_INPUTS * 4 ? pt->n_inputs : AMK_MAX_INPUTS * 4;
  for (uint32_t i = 0; i < n_in; i++)
    in[i] = vm->buffers[pt->inputs[i]].view;
  for (uint32_t i = 0; i < pt->n_outputs && i < AMK_MAX_OUTPUTS; i++)
    out[i] = vm->buffers[pt->outputs[i]].view;
  if (out0 && pt->n_outputs > 0)
    out[0].data = out0;
  char why[512];
  int rc = amk_inst_execute(pt->op, &params, in, n_in, out, pt->n_outputs, &extra, why,
                            sizeof why);
  if (rc != AMK_INST_OK) {
    snprintf(err, err_len, "task %d ('%s') failed at position %" PRId64 ": %s", task->id,
             task->label, pos, why);
    return false;
  }
  return true;
}

static bool run_task(const AmkVm *vm, uint32_t t, int64_t pos, char *err, size_t err_len) {
  return run_task_into(vm, t, pos, NULL, err, err_len);
}

/* Marks task t done: one increment of its counter, and every waiter whose
 * last wait this satisfies joins the ready queue. */
static void finish_task(AmkVm *vm, uint32_t t, uint32_t *tail) {
  uint32_t c = vm->plan->tasks[t].counter;
  uint32_t value = ++vm->counter_value[c];
  for (uint32_t k = vm->waiter_off[c]; k < vm->waiter_off[c + 1]; k++)
    if (vm->waiter_threshold[k] == value && --vm->unsatisfied[vm->waiter_task[k]] == 0)
      vm->queue[(*tail)++] = vm->waiter_task[k];
}

/* Several threads fire ready tasks at once. The result does not depend on
 * the order: the validator proved every read ordered after its writers, and
 * each task computes the same values wherever and whenever it runs. An
 * accumulator's tiles (mlp, attention_o), whose fp32 adds do not commute
 * bit for bit, are staged and added in task order by the last of them
 * (run_accumulating), so the workers give the bits of one thread firing the
 * tiles in that order.
 *
 * The workers are started at the first step that uses them and kept for the
 * VM's life (a decode is thousands of steps; starting threads at each one
 * cost more than the smaller programs' tasks). Between steps they sleep on
 * `start`; a step bumps `generation` and waits on `idle` until every worker
 * has left it. */
struct VmPool {
  AmkVm *vm;
  pthread_mutex_t lock;
  pthread_cond_t start;   /* a new step, or shutdown */
  pthread_cond_t changed; /* the step's queue or counts changed */
  pthread_cond_t idle;    /* a worker left the step */
  pthread_mutex_t accumulate_lock; /* guards the staging below */
  /* Per task, an accumulating tile's staged share (NULL until it ran this
   * step); per buffer, how many of its tiles have staged theirs, and how
   * many it has. */
  float **staged;
  uint32_t *acc_landed, *acc_writers;
  pthread_t threads[VM_MAX_THREADS];
  int n_threads;
  uint64_t generation; /* steps begun */
  int active;          /* workers still in the current step */
  bool shutdown;
  /* The current step. */
  int64_t pos;
  uint32_t head, tail, finished, running;
  bool failed;
  char err[512];
};

/* An accumulating task (an mlp or attention_o tile) on a worker. Its
 * kernel adds into a private f32 buffer of the accumulator's size that
 * starts at -0.0f, the identity of fp32 addition (-0 + v is v, bit for
 * bit, signed zeros and NaNs included), so that buffer ends up holding
 * exactly the value the tile adds to each element. The tiles' GEMVs run in parallel; each stages its
 * buffer, and the last of an accumulator's tiles adds every staged buffer
 * into it in task order, before its counter can signal a reader: the bits
 * of running the tiles one after another in task order, whichever worker
 * finishes when. This relies on the tile adding one value per element,
 * out[n] += v[n] with v not read from out (docs/Fusion.md's mlp and
 * attention_o: the validator refuses a tile reading its accumulator), and on
 * the accumulator being f32 (the plan refuses any other). */
static bool run_accumulating(VmPool *s, uint32_t t, char *err, size_t err_len) {
  const AmkVm *vm = s->vm;
  uint32_t b = vm->plan->tasks[t].outputs[0];
  const VmBuffer *acc = &vm->buffers[b];
  size_t n = (size_t)acc->view.numel;
  float *own = malloc((n ? n : 1) * sizeof *own);
  if (!own) {
    const AmkTask *task = &vm->m->tasks[t];
    snprintf(err, err_len, "task %d ('%s'): out of memory for its accumulator's copy",
             task->id, task->label);
    return false;
  }
  for (size_t i = 0; i < n; i++)
    own[i] = -0.0f;
  if (!run_task_into(vm, t, s->pos, own, err, err_len)) {
    free(own);
    return false;
  }
  pthread_mutex_lock(&s->accumulate_lock);
  s->staged[t] = own;
  if (++s->acc_landed[b] == s->acc_writers[b]) {
    float *dst = acc->data;
    for (uint32_t w = 0; w < vm->m->n_tasks; w++) {
      if (!s->staged[w] || vm->plan->tasks[w].outputs[0] != b)
        continue;
      for (size_t i = 0; i < n; i++)
        dst[i] += s->staged[w][i];
      free(s->staged[w]);
      s->staged[w] = NULL;
    }
    s->acc_landed[b] = 0;
  }
  pthread_mutex_unlock(&s->accumulate_lock);
  return true;
}

/* Drops what a failed step left staged. */
static void unstage(VmPool *s) {
  AmkVm *vm = s->vm;
  for (uint32_t t = 0; t < vm->m->n_tasks; t++) {
    free(s->staged[t]);
    s->staged[t] = NULL;
  }
  memset(s->acc_landed, 0, (vm->plan->n_buffers ? vm->plan->n_buffers : 1) * sizeof *s->acc_landed);
}

/* One worker's share of a step; called and returning with the lock held. */
static void step_tasks_locked(VmPool *s) {
  AmkVm *vm = s->vm;
  uint32_t n = vm->m->n_tasks;
  for (;;) {
    while (s->head == s->tail && !s->failed && s->finished < n && s->running > 0)
      pthread_cond_wait(&s->changed, &s->lock);
    if (s->failed || s->finished == n || s->head == s->tail)
      break; /* done, failed, or stuck (nothing ready, nothing running) */
    uint32_t t = vm->queue[s->head++];
    s->running++;
    pthread_mutex_unlock(&s->lock);
    char err[512];
    bool ok = vm->accumulates[t] ? run_accumulating(s, t, err, sizeof err)
                                 : run_task(vm, t, s->pos, err, sizeof err);
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
}

static void *pool_worker(void *arg) {
  VmPool *s = arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->shutdown && s->generation == seen)
      pthread_cond_wait(&s->start, &s->lock);
    if (s->shutdown)
      break;
    seen = s->generation;
    step_tasks_locked(s);
    if (--s->active == 0)
      pthread_cond_signal(&s->idle);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

static VmPool *pool_start(AmkVm *vm) {
  VmPool *s = amk_xcalloc(1, sizeof *s);
  s->vm = vm;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->start, NULL);
  pthread_cond_init(&s->changed, NULL);
  pthread_cond_init(&s->idle, NULL);
  pthread_mutex_init(&s->accumulate_lock, NULL);
  uint32_t nt = vm->m->n_tasks, nb = vm->plan->n_buffers;
  s->staged = amk_xcalloc(nt ? nt : 1, sizeof *s->staged);
  s->acc_landed = amk_xcalloc(nb ? nb : 1, sizeof *s->acc_landed);
  s->acc_writers = amk_xcalloc(nb ? nb : 1, sizeof *s->acc_writers);
  for (uint32_t t = 0; t < nt; t++)
    if (vm->accumulates[t])
      s->acc_writers[vm->plan->tasks[t].outputs[0]]++;
  for (int i = 0; i < vm->threads; i++)
    if (pthread_create(&s->threads[s->n_threads], NULL, pool_worker, s) == 0)
      s->n_threads++;
  return s;
}

static void pool_stop(VmPool *s) {
  if (!s)
    return;
  pthread_mutex_lock(&s->lock);
  s->shutdown = true;
  pthread_cond_broadcast(&s->start);
  pthread_mutex_unlock(&s->lock);
  for (int i = 0; i < s->n_threads; i++)
    pthread_join(s->threads[i], NULL);
  unstage(s);
  free(s->staged);
  free(s->acc_landed);
  free(s->acc_writers);
  pthread_mutex_destroy(&s->accumulate_lock);
  pthread_cond_destroy(&s->idle);
  pthread_cond_destroy(&s->changed);
  pthread_cond_destroy(&s->start);
  pthread_mutex_destroy(&s->lock);
  free(s);
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
  if (!vm->pool)
    vm->pool = pool_start(vm);
  VmPool *s = vm->pool;
  pthread_mutex_lock(&s->lock);
  unstage(s); /* what a failed or stuck step left */
  s->pos = pos;
  s->head = 0;
  s->tail = tail;
  s->finished = s->running = 0;
  s->failed = false;
  s->err[0] = '\0';
  if (s->n_threads == 0) {
    step_tasks_locked(s); /* no threads to be had: fire them here */
  } else {
    s->active = s->n_threads;
    s->generation++;
    pthread_cond_broadcast(&s->start);
    while (s->active > 0)
      pthread_cond_wait(&s->idle, &s->lock);
  }
  bool failed = s->failed;
  uint32_t fired = s->tail;
  if (failed)
    snprintf(err, err_len, "%s", s->err);
  pthread_mutex_unlock(&s->lock);
  return failed ? UINT32_MAX : fired;
}

/* A step's start: the IO inputs set (row r of a prefill program's ids at
 * position pos + r), the counters cleared, and the tasks with no waits
 * queued (*tail of them). False after reporting a token or position out of
 * range. */
static bool step_begin(AmkVm *vm, const int32_t *tokens, int64_t n, int64_t pos, uint32_t *tail,
                       AmkDiagEngine *diag) {
  const AmkPlan *plan = vm->plan;
  if (n != plan->rows) {
    amk_error(diag, no_loc(),
              "a step of this program feeds %" PRId64 " token%s, not %" PRId64, plan->rows,
              plan->rows == 1 ? "" : "s", n);
    return false;
  }
  for (int64_t r = 0; r < n; r++)
    if (tokens[r] < 0 || tokens[r] >= plan->vocab) {
      amk_error(diag, no_loc(), "token %d is outside the vocabulary [0, %" PRId64 ")",
                tokens[r], plan->vocab);
      return false;
    }
  if (pos < 0 || pos > plan->max_seq - n || pos > INT32_MAX - n) {
    amk_error(diag, no_loc(),
              "position %" PRId64 " is beyond the KV cache (%" PRId64 " rows); compile with a "
              "larger --max-seq",
              pos + n - 1, plan->max_seq);
    return false;
  }
  /* Accumulators start every step at zero: the accumulating tiles (mlp,
   * attention_o) add into them. */
  for (uint32_t b = 0; b < plan->n_buffers; b++)
    if (plan->buffers[b].kind == AMK_KIND_IO_INPUT || plan->buffers[b].accumulate)
      memset(vm->buffers[b].data, 0, vm->buffers[b].nbytes);
  int32_t *ids = vm->buffers[plan->token_buffer].data;
  for (int64_t r = 0; r < n; r++)
    ids[r] = tokens[r];
  if (plan->pos_buffer >= 0) {
    /* One position per row (ROPE rotates row r by pos + r), or the first. */
    VmBuffer *pb = &vm->buffers[plan->pos_buffer];
    if (plan->buffers[plan->pos_buffer].numel == n)
      for (int64_t r = 0; r < n; r++)
        ((int32_t *)pb->data)[r] = (int32_t)(pos + r);
    else
      write_i32(pb, (int32_t)pos);
  }

  /* Counter-driven firing: a task becomes ready when its last unsatisfied
   * wait is met; ready tasks run in the order they became ready. */
  memset(vm->counter_value, 0, (plan->n_counters ? plan->n_counters : 1) * sizeof *vm->counter_value);
  *tail = 0;
  for (uint32_t t = 0; t < plan->n_tasks; t++) {
    vm->unsatisfied[t] = plan->tasks[t].wait_end - plan->tasks[t].wait_begin;
    if (vm->unsatisfied[t] == 0)
      vm->queue[(*tail)++] = t;
  }
  return true;
}

/* The IO_OUTPUT logits (every row the program writes) as fp32, after a step. */
static void read_logits(AmkVm *vm) {
  const AmkPlan *plan = vm->plan;
  const VmBuffer *lb = &vm->buffers[plan->logits_buffer];
  for (int64_t i = 0; i < plan->vocab * plan->logit_rows; i++) {
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
}

bool amk_vm_step_rows(AmkVm *vm, const int32_t *tokens, int64_t n, int64_t pos,
                      AmkDiagEngine *diag) {
  const AmkPlan *plan = vm->plan;
  uint32_t tail = 0;
  if (!step_begin(vm, tokens, n, pos, &tail, diag))
    return false;
  char err[600];
  uint32_t fired = fire_tasks(vm, pos, tail, err, sizeof err);
  if (fired == UINT32_MAX) {
    amk_error(diag, no_loc(), "%s", err);
    return false;
  }
  tail = fired;
  if (tail != plan->n_tasks) {
    amk_error(diag, no_loc(), "%u of %u tasks never became ready; the schedule is stuck",
              plan->n_tasks - tail, plan->n_tasks);
    return false;
  }
  read_logits(vm);
  return true;
}

bool amk_vm_step(AmkVm *vm, int32_t token, int64_t pos, AmkDiagEngine *diag) {
  return amk_vm_step_rows(vm, &token, 1, pos, diag);
}

/* ---- a tensor-parallel group ----------------------------------------------------- */

/* The N rank programs of a group run together, deterministically: each rank
 * fires its ready tasks in order until only collectives are left; once
 * every rank holds its next collective, the group sums the parts in rank
 * order (amk_inst_allreduce_ranks), finishes the collective on every rank,
 * and the ranks go on. A rank that ends, or holds a collective the others
 * do not match, is a broken protocol, reported (amk_validate_tp proves it
 * cannot happen to validated programs). */
struct AmkVmGroup {
  uint32_t n;
  AmkVm **ranks;
  uint32_t *head, *tail;
  int64_t *held; /* the collective each rank holds, or -1 */
  char description[160];
};

void amk_vm_group_free(AmkVmGroup *g) {
  if (!g)
    return;
  for (uint32_t r = 0; r < g->n; r++)
    amk_vm_free(g->ranks[r]);
  free(g->ranks);
  free(g->head);
  free(g->tail);
  free(g->held);
  free(g);
}

AmkVmGroup *amk_vm_group_create(const AmkPlan *const *plans, const AmkWeights *const *weights,
                                uint32_t n, AmkDiagEngine *diag) {
  if (n == 0 || n > AMK_TP_MAX_RANKS) {
    amk_error(diag, no_loc(), "a tensor-parallel group has 1 to %d ranks, not %u",
              AMK_TP_MAX_RANKS, n);
    return NULL;
  }
  for (uint32_t r = 0; r < n; r++) {
    int64_t size = 0, rank = 0;
    bool is_rank = amk_module_tp(plans[r]->m, &size, &rank);
    if (n > 1 && (!is_rank || size != n || rank != r)) {
      amk_error(diag, no_loc(), "program %u of the group is not rank %u of %u (meta tp_size "
                "and tp_rank)", r, r, n);
      return NULL;
    }
    if (plans[r]->vocab != plans[0]->vocab || plans[r]->max_seq != plans[0]->max_seq) {
      amk_error(diag, no_loc(), "the ranks' programs differ in vocabulary or KV cache length");
      return NULL;
    }
  }
  AmkVmGroup *g = amk_xcalloc(1, sizeof *g);
  g->n = n;
  g->ranks = amk_xcalloc(n, sizeof *g->ranks);
  g->head = amk_xcalloc(n, sizeof *g->head);
  g->tail = amk_xcalloc(n, sizeof *g->tail);
  g->held = amk_xcalloc(n, sizeof *g->held);
  for (uint32_t r = 0; r < n; r++)
    if (!(g->ranks[r] = vm_create(plans[r], weights[r], 1, true, diag))) {
      amk_vm_group_free(g);
      return NULL;
    }
  snprintf(g->description, sizeof g->description,
           "CPU reference VM, %u tensor-parallel ranks in one process (in order, one thread)", n);
  return g;
}

/* Fires rank vm's queue in order until it is empty, holding back (not
 * running) a cross-rank collective. False after a kernel failed (err). */
static bool run_until_collective(AmkVm *vm, int64_t pos, uint32_t *head, uint32_t *tail,
                                 int64_t *held, char *err, size_t err_len) {
  while (*head < *tail) {
    uint32_t t = vm->queue[(*head)++];
    if (amk_task_tp_group(&vm->m->tasks[t]) != 0) {
      if (*held >= 0) {
        snprintf(err, err_len, "tasks %u and %u, two cross-rank all-reduces, are ready at once: "
                 "the ranks could reach them in different orders", (unsigned)*held, t);
        return false;
      }
      *held = t;
      continue;
    }
    if (!run_task(vm, t, pos, err, err_len))
      return false;
    finish_task(vm, t, tail);
  }
  return true;
}

bool amk_vm_group_step(AmkVmGroup *g, int32_t token, int64_t pos, AmkDiagEngine *diag) {
  for (uint32_t r = 0; r < g->n; r++) {
    g->head[r] = 0;
    g->held[r] = -1;
    if (!step_begin(g->ranks[r], &token, 1, pos, &g->tail[r], diag))
      return false;
  }
  AmkTensorView parts[AMK_TP_MAX_RANKS], outs[AMK_TP_MAX_RANKS];
  int64_t n_off[AMK_TP_MAX_RANKS];
  char err[600];
  for (uint64_t round = 0;; round++) {
    uint32_t holding = 0;
    for (uint32_t r = 0; r < g->n; r++) {
      if (!run_until_collective(g->ranks[r], pos, &g->head[r], &g->tail[r], &g->held[r], err,
                                sizeof err)) {
        amk_error(diag, no_loc(), "rank %u: %s", r, err);
        return false;
      }
      holding += g->held[r] >= 0;
    }
    if (holding == 0)
      break;
    for (uint32_t r = 0; r < g->n; r++) {
      const AmkVm *vm = g->ranks[r];
      if (g->held[r] < 0) {
        const AmkTask *other = &g->ranks[r ? 0 : 1]->m->tasks[g->held[r ? 0 : 1]];
        amk_error(diag, no_loc(), "rank %u cannot reach all-reduce #%" PRIu64 " ('%s' on rank "
                  "%u): it %s", r, round, other->label, r ? 0 : 1,
                  g->tail[r] == vm->plan->n_tasks ? "has finished the step"
                                                  : "is stuck before it");
        return false;
      }
      uint32_t t = (uint32_t)g->held[r];
      const AmkPlanTask *pt = &vm->plan->tasks[t];
      AmkInstParams params = amk_plan_params_at(vm->plan, t, pos);
      parts[r] = vm->buffers[pt->inputs[0]].view;
      outs[r] = vm->buffers[pt->outputs[0]].view;
      n_off[r] = amk_inst_param_has(&params, AMK_PARAM_n_off) ? params.n_off.i : 0;
    }
    int rc = amk_inst_allreduce_ranks(parts, n_off, g->n, outs, err, sizeof err);
    if (rc != AMK_INST_OK) {
      amk_error(diag, no_loc(), "all-reduce #%" PRIu64 " ('%s'): %s", round,
                g->ranks[0]->m->tasks[g->held[0]].label, err);
      return false;
    }
    for (uint32_t r = 0; r < g->n; r++) {
      finish_task(g->ranks[r], (uint32_t)g->held[r], &g->tail[r]);
      g->held[r] = -1;
    }
  }
  for (uint32_t r = 0; r < g->n; r++) {
    const AmkPlan *plan = g->ranks[r]->plan;
    if (g->tail[r] != plan->n_tasks) {
      amk_error(diag, no_loc(), "rank %u: %u of %u tasks never became ready; the schedule is "
                "stuck", r, plan->n_tasks - g->tail[r], plan->n_tasks);
      return false;
    }
  }
  read_logits(g->ranks[0]);
  return true;
}

const float *amk_vm_group_logits(const AmkVmGroup *g, size_t *n) {
  return amk_vm_logits(g->ranks[0], n);
}

void amk_vm_group_reset(AmkVmGroup *g) {
  for (uint32_t r = 0; r < g->n; r++)
    amk_vm_reset(g->ranks[r]);
}

/* ---- the engine interface ------------------------------------------------------ */

static void *engine_create(const AmkPlan *plan, const AmkWeights *weights,
                           const AmkEngineOptions *opt, AmkDiagEngine *diag) {
  return amk_vm_create(plan, weights, opt->threads, diag);
}

static void engine_destroy(void *self) { amk_vm_free(self); }

static const char *engine_describe(const void *self) {
  return ((const AmkVm *)self)->description;
}

static AmkStepStatus engine_step(void *self, int32_t token, int64_t pos, float *kernel_ms,
                                 AmkDiagEngine *diag) {
  return amk_vm_step(self, token, pos, diag) ? AMK_STEP_OK : AMK_STEP_ERROR;
}

static const float *engine_logits(const void *self, size_t *n) { return amk_vm_logits(self, n); }

static AmkStepStatus engine_step_rows(void *self, const int32_t *tokens, int64_t n, int64_t pos,
                                      AmkDiagEngine *diag) {
  return amk_vm_step_rows(self, tokens, n, pos, diag) ? AMK_STEP_OK : AMK_STEP_ERROR;
}

static const float *engine_logit_rows(const void *self, size_t *rows, size_t *vocab) {
  return amk_vm_logit_rows(self, rows, vocab);
}

static bool engine_share_kv(void *self, const void *from, AmkDiagEngine *diag) {
  return amk_vm_share_kv(self, from, diag);
}

static void *engine_kv_data(void *self, uint32_t b, size_t *nbytes) {
  return amk_vm_kv_data(self, b, nbytes);
}

static bool engine_reset(void *self, AmkDiagEngine *diag) {
  amk_vm_reset(self);
  return true;
}

const AmkEngineOps *amk_vm_engine(void) {
  static const AmkEngineOps ops = {
      .name = "cpu",
      .create = engine_create,
      .destroy = engine_destroy,
      .step = engine_step,
      .logits = engine_logits,
      .reset = engine_reset,
      .describe = engine_describe,
      .step_rows = engine_step_rows,
      .logit_rows = engine_logit_rows,
      .share_kv = engine_share_kv,
      .kv_data = engine_kv_data,
  };
  return &ops;
}

/* ---- the group as an engine --------------------------------------------------- */

static void *group_engine_create(const AmkPlan *plan, const AmkWeights *weights,
                                 const AmkEngineOptions *opt, AmkDiagEngine *diag) {
  if (!opt->tp_plans || !opt->tp_weights || opt->tp_size == 0) {
    const AmkPlan *plans[1] = {plan};
    const AmkWeights *w[1] = {weights};
    return amk_vm_group_create(plans, w, 1, diag);
  }
  return amk_vm_group_create(opt->tp_plans, opt->tp_weights, opt->tp_size, diag);
}

static void group_engine_destroy(void *self) { amk_vm_group_free(self); }

static const char *group_engine_describe(const void *self) {
  return ((const AmkVmGroup *)self)->description;
}

static AmkStepStatus group_engine_step(void *self, int32_t token, int64_t pos, float *kernel_ms,
                                       AmkDiagEngine *diag) {
  return amk_vm_group_step(self, token, pos, diag) ? AMK_STEP_OK : AMK_STEP_ERROR;
}

static const float *group_engine_logits(const void *self, size_t *n) {
  return amk_vm_group_logits(self, n);
}

static bool group_engine_reset(void *self, AmkDiagEngine *diag) {
  amk_vm_group_reset(self);
  return true;
}

const AmkEngineOps *amk_vm_group_engine(void) {
  static const AmkEngineOps ops = {
      .name = "cpu",
      .create = group_engine_create,
      .destroy = group_engine_destroy,
      .step = group_engine_step,
      .logits = group_engine_logits,
      .reset = group_engine_reset,
      .describe = group_engine_describe,
  };
  return &ops;
}
