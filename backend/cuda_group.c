/* A tensor-parallel group on the GPUs of one host: rank r's program on GPU
 * r, one megakernel launch per rank and token, the all-reduces inside the
 * launches (megakernel.cuh, amk_allreduce_tp) through mailboxes of NCCL
 * symmetric memory (include/amk/backend.h, docs/TensorParallel.md).
 *
 * NCCL makes the group: a communicator per rank, bootstrapped from one
 * unique id (ncclCommInitRank, as ranks in separate processes would be),
 * and per rank a mailbox from ncclMemAlloc, registered as a symmetric
 * window, which the other GPUs of the host load from and store to. The
 * host only launches: a step's launches go out on every GPU before any is
 * waited for, since each rank's all-reduces wait for the others' parts. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/backend.h"
#include "amk/engine.h"
#include "cuda_api.h"
#include "nccl_api.h"

/* ncclMemAlloc's granularity on the GPUs we know: the mailbox is rounded up
 * to it so that the registered window is the allocation. */
#define MAILBOX_ROUND ((size_t)2 << 20)

typedef struct {
  uint32_t size;
  AmkCudaVm *vm[AMK_CUDA_TP_MAX_RANKS];
  AmkNccl nccl;
  ncclComm_t comm[AMK_CUDA_TP_MAX_RANKS];
  void *mailbox[AMK_CUDA_TP_MAX_RANKS];
  ncclWindow_t window[AMK_CUDA_TP_MAX_RANKS];
  size_t mailbox_bytes;
  char describe[600];
} CudaGroup;

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

static bool nccl_ok(CudaGroup *g, ncclResult_t r, const char *what, AmkDiagEngine *diag) {
  if (r == 0)
    return true;
  char buf[300];
  amk_error(diag, no_loc(), "%s: %s", what, amk_nccl_error_text(&g->nccl, r, buf, sizeof buf));
  return false;
}

static void group_free(CudaGroup *g) {
  if (!g)
    return;
  for (uint32_t r = 0; r < g->size; r++) {
    if (!g->vm[r])
      continue;
    amk_cuda_vm_make_current(g->vm[r], NULL);
    if (g->window[r])
      g->nccl.ncclCommWindowDeregister(g->comm[r], g->window[r]);
    if (g->mailbox[r])
      g->nccl.ncclMemFree(g->mailbox[r]);
    if (g->comm[r])
      g->nccl.ncclCommDestroy(g->comm[r]);
  }
  for (uint32_t r = 0; r < g->size; r++)
    amk_cuda_vm_free(g->vm[r]);
  if (g->nccl.handle)
    amk_nccl_close(&g->nccl);
  free(g);
}

/* Every GPU of the group reaches every other's memory (NVLink or PCIe
 * peer-to-peer): the all-reduces store into the peers' mailboxes. */
static bool check_gpus(uint32_t n, AmkDiagEngine *diag) {
  AmkCudaDriver drv;
  char why[512];
  if (!amk_cuda_driver_open(&drv, why, sizeof why)) {
    amk_error(diag, no_loc(), "%s", why);
    return false;
  }
  int count = 0;
  bool ok = drv.cuDeviceGetCount(&count) == 0;
  if (!ok || count < (int)n) {
    amk_error(diag, no_loc(), "--tp %u runs one rank per GPU and needs %u GPUs; %d %s visible", n,
              n, count, count == 1 ? "is" : "are");
    amk_cuda_driver_close(&drv);
    return false;
  }
  for (uint32_t a = 0; a < n && ok; a++)
    for (uint32_t b = 0; b < n && ok; b++) {
      CUdevice da = 0, db = 0;
      int can = 0;
      if (a == b || drv.cuDeviceGet(&da, (int)a) != 0 || drv.cuDeviceGet(&db, (int)b) != 0 ||
          drv.cuDeviceCanAccessPeer(&can, da, db) != 0 || can)
        continue;
      amk_error(diag, no_loc(), "GPU %u cannot reach GPU %u's memory (no peer-to-peer access "
                "over NVLink or PCIe); the group's all-reduces store into the peers' memory",
                a, b);
      ok = false;
    }
  amk_cuda_driver_close(&drv);
  return ok;
}

static void *group_create(const AmkPlan *plan, const AmkWeights *weights,
                          const AmkEngineOptions *opt, AmkDiagEngine *diag) {
  (void)plan;
  (void)weights;
  uint32_t n = opt->tp_size;
  if (n < 2 || n > AMK_CUDA_TP_MAX_RANKS || !opt->tp_plans || !opt->tp_weights) {
    amk_error(diag, no_loc(), "a tensor-parallel group has 2 to %d ranks, each with a plan and "
              "weights", AMK_CUDA_TP_MAX_RANKS);
    return NULL;
  }
  CudaGroup *g = amk_xcalloc(1, sizeof *g);
  g->size = n;
  char why[512];
  if (!amk_nccl_open(&g->nccl, why, sizeof why)) {
    amk_error(diag, no_loc(), "%s", why);
    group_free(g);
    return NULL;
  }
  if (!check_gpus(n, diag)) {
    group_free(g);
    return NULL;
  }
  for (uint32_t r = 0; r < n; r++) {
    AmkCudaVmOptions copt = amk_cuda_vm_options_default();
    if (opt->timeout_ms > 0)
      copt.timeout_ms = opt->timeout_ms;
    copt.threads_per_block = opt->threads_per_block;
    copt.use_cache = opt->use_cache;
    copt.verbose = opt->verbose && r == 0;
    copt.trace = opt->trace && r == 0;
    copt.device = (int)r;
    copt.tp_member = true;
    if (!(g->vm[r] = amk_cuda_vm_create(opt->tp_plans[r], opt->tp_weights[r], &copt, diag))) {
      amk_error(diag, no_loc(), "rank %u of %u (GPU %u) did not start (above)", r, n, r);
      group_free(g);
      return NULL;
    }
    size_t bytes = amk_cuda_vm_tp_mailbox_bytes(g->vm[r]);
    if (bytes == 0 || (r > 0 && bytes != g->mailbox_bytes)) {
      amk_error(diag, no_loc(), "rank %u's program %s", r,
                bytes == 0 ? "has no cross-rank all-reduce: it is not a rank program"
                           : "lays out its all-reduces unlike rank 0's");
      group_free(g);
      return NULL;
    }
    g->mailbox_bytes = bytes;
  }
  /* One unique id, one communicator per rank; then each rank's mailbox,
   * registered as a symmetric window (both collective: in a group). */
  ncclUniqueId id;
  bool ok = nccl_ok(g, g->nccl.ncclGetUniqueId(&id), "ncclGetUniqueId", diag);
  ok = ok && nccl_ok(g, g->nccl.ncclGroupStart(), "ncclGroupStart", diag);
  for (uint32_t r = 0; ok && r < n; r++)
    ok = amk_cuda_vm_make_current(g->vm[r], diag) &&
         nccl_ok(g, g->nccl.ncclCommInitRank(&g->comm[r], (int)n, id, (int)r),
                 "ncclCommInitRank", diag);
  ok = ok && nccl_ok(g, g->nccl.ncclGroupEnd(), "NCCL's group bootstrap", diag);
  size_t bytes = (g->mailbox_bytes + MAILBOX_ROUND - 1) / MAILBOX_ROUND * MAILBOX_ROUND;
  for (uint32_t r = 0; ok && r < n; r++)
    ok = amk_cuda_vm_make_current(g->vm[r], diag) &&
         nccl_ok(g, g->nccl.ncclMemAlloc(&g->mailbox[r], bytes), "ncclMemAlloc (mailbox)", diag);
  ok = ok && nccl_ok(g, g->nccl.ncclGroupStart(), "ncclGroupStart", diag);
  for (uint32_t r = 0; ok && r < n; r++)
    ok = amk_cuda_vm_make_current(g->vm[r], diag) &&
         nccl_ok(g,
                 g->nccl.ncclCommWindowRegister(g->comm[r], g->mailbox[r], bytes, &g->window[r],
                                                AMK_NCCL_WIN_COLL_SYMMETRIC),
                 "ncclCommWindowRegister", diag);
  ok = ok && nccl_ok(g, g->nccl.ncclGroupEnd(), "NCCL's window registration", diag);
  uint64_t addr[AMK_CUDA_TP_MAX_RANKS] = {0};
  for (uint32_t r = 0; r < n; r++)
    addr[r] = (uint64_t)(uintptr_t)g->mailbox[r];
  for (uint32_t r = 0; ok && r < n; r++)
    ok = amk_cuda_vm_tp_bind(g->vm[r], (int)r, (int)n, addr, diag);
  if (!ok) {
    group_free(g);
    return NULL;
  }
  snprintf(g->describe, sizeof g->describe, "%u GPUs, one rank each (NCCL %d.%d.%d), rank 0: %s",
           n, g->nccl.version / 10000, g->nccl.version / 100 % 100, g->nccl.version % 100,
           amk_cuda_vm_describe(g->vm[0]));
  return g;
}

static void group_destroy(void *self) { group_free(self); }

static AmkStepStatus step_status(AmkCudaStepStatus st) {
  return st == AMK_CUDA_STEP_OK        ? AMK_STEP_OK
         : st == AMK_CUDA_STEP_TIMEOUT ? AMK_STEP_TIMEOUT
                                       : AMK_STEP_ERROR;
}

/* Every rank's launch, then every rank's wait. A rank that fails stops the
 * others (their abort flags), so that none waits out the watchdog in an
 * all-reduce the failed rank will never reach. The step's kernel time is
 * the slowest rank's. */
static AmkStepStatus group_step(void *self, int32_t token, int64_t pos, float *kernel_ms,
                                AmkDiagEngine *diag) {
  CudaGroup *g = self;
  AmkCudaStepStatus worst = AMK_CUDA_STEP_OK;
  uint32_t launched = 0;
  /* A test hook: AMK_TP_TEST_DEAD_RANK=R never launches rank R, as if its
   * process had died; the others must stop with an error, not hang. */
  const char *dead_env = getenv("AMK_TP_TEST_DEAD_RANK");
  long dead = dead_env && *dead_env ? strtol(dead_env, NULL, 10) : -1;
  for (; launched < g->size; launched++) {
    if ((long)launched == dead) {
      amk_error(diag, no_loc(), "rank %u: not launched (AMK_TP_TEST_DEAD_RANK)", launched);
      worst = AMK_CUDA_STEP_ERROR;
      continue;
    }
    AmkCudaStepStatus st = amk_cuda_vm_step_launch(g->vm[launched], token, pos, diag);
    if (st != AMK_CUDA_STEP_OK) {
      amk_error(diag, no_loc(), "rank %u: the launch at position %" PRId64 " failed (above)",
                launched, pos);
      worst = st;
      break;
    }
  }
  if (worst != AMK_CUDA_STEP_OK && dead < 0)
    for (uint32_t r = 0; r < launched; r++)
      amk_cuda_vm_raise_abort(g->vm[r]);
  float slowest = 0;
  for (uint32_t r = 0; r < launched; r++) {
    float ms = 0;
    if ((long)r == dead)
      continue;
    AmkCudaStepStatus st = amk_cuda_vm_step_finish(g->vm[r], pos, &ms, diag);
    if (ms > slowest)
      slowest = ms;
    if (st == AMK_CUDA_STEP_OK)
      continue;
    amk_error(diag, no_loc(), "rank %u of %u (GPU %u) failed at position %" PRId64
              " (above); the other ranks are stopped", r, g->size, r, pos);
    for (uint32_t q = r + 1; q < launched; q++)
      amk_cuda_vm_raise_abort(g->vm[q]);
    if (worst == AMK_CUDA_STEP_OK || st == AMK_CUDA_STEP_TIMEOUT)
      worst = st;
  }
  if (kernel_ms)
    *kernel_ms = slowest;
  return step_status(worst);
}

static const float *group_logits(const void *self, size_t *n) {
  const CudaGroup *g = self;
  return amk_cuda_vm_logits(g->vm[0], n);
}

static bool group_reset(void *self, AmkDiagEngine *diag) {
  CudaGroup *g = self;
  for (uint32_t r = 0; r < g->size; r++)
    if (!amk_cuda_vm_reset(g->vm[r], diag))
      return false;
  return true;
}

static const char *group_describe(const void *self) { return ((const CudaGroup *)self)->describe; }

/* One GPU's read bandwidth: every rank streams its own weights at once, so
 * a rank's share of the bytes over one card's bandwidth is the group's
 * share of the aggregate. */
static double group_read_bw(void *self, size_t bytes, int reps, AmkDiagEngine *diag) {
  CudaGroup *g = self;
  return amk_cuda_vm_measure_read_bw(g->vm[0], bytes, reps, diag);
}

static void group_set_tracing(void *self, bool on) {
  amk_cuda_vm_set_tracing(((CudaGroup *)self)->vm[0], on);
}

static bool group_trace(void *self, AmkTrace *out, AmkDiagEngine *diag) {
  return amk_cuda_vm_trace(((CudaGroup *)self)->vm[0], out, diag);
}

const AmkEngineOps *amk_cuda_group_engine(void) {
  static const AmkEngineOps ops = {
      .name = "cuda",
      .create = group_create,
      .destroy = group_destroy,
      .step = group_step,
      .logits = group_logits,
      .reset = group_reset,
      .measures_kernel_time = true,
      .describe = group_describe,
      .measure_read_bw = group_read_bw,
      .set_tracing = group_set_tracing,
      .trace = group_trace,
  };
  return &ops;
}
