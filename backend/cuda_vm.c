/* The CUDA device VM: loads a program onto the GPU and runs one cooperative
 * persistent kernel per decoded token (include/amk/backend.h). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amk/abi.h"
#include "amk/backend.h"
#include "cuda_api.h"

#define ALIGN 256
/* Launches amk_cuda_vm_generate keeps queued ahead of the one it waits for:
 * enough that the GPU never idles while the host reads a token. */
#define GEN_IN_FLIGHT 4

struct AmkCudaVm {
  const AmkModule *m;
  const AmkPlan *plan;
  AmkCudaDriver drv;
  CUdevice dev;
  CUcontext ctx;
  bool ctx_retained;
  CUmodule mod;
  CUfunction kernel, bw_kernel, fill_kernel, transpose_kernel;
  /* Where a transposed weight lands as the file has it before
   * amk_transpose writes it to its buffer (freed after the upload). */
  CUdeviceptr staging;
  size_t staging_bytes;
  int sm_count;
  CUstream stream;
  CUevent ev0, ev1;
  CUdeviceptr arena;   /* every buffer, page and ROPE frequency table */
  CUdeviceptr tables;  /* buffers, instructions, aux, queues, counters, status */
  size_t arena_bytes;
  /* The accumulators (mlp tiles' outputs) lie first in the arena, in
   * [arena, arena + acc_bytes): zeroed before every launch. */
  size_t acc_bytes;
  uint64_t *buf_addr;  /* device address of each buffer */
  size_t *buf_bytes;
  uint32_t *host_flags; /* host-mapped: [0] abort, [1] token, [2] pos */
  /* A prefill program (rows > 1 tokens a step): pinned staging of its
   * tokens then positions; logit_rows rows of logits. */
  int64_t rows, logit_rows;
  int32_t *rows_host;
  /* Buffers whose device memory is another VM's (a prefill program on the
   * decode program's weights and KV caches): that VM, and per buffer. */
  const AmkCudaVm *share;
  bool *borrowed;
  int64_t borrowed_bytes;
  CUdeviceptr host_flags_dev;
  amk_program_t prog;
  uint32_t launches; /* megakernel launches so far: the next one's tag follows */
  CUdeviceptr counters, status;
  int n_counters;
  int grid, threads;
  size_t smem;
  int token_buffer, pos_buffer, logits_buffer;
  int64_t vocab, max_seq, weight_bytes;
  void *logits_raw; /* pinned */
  float *logits;
  double timeout_ms;
  bool dead; /* a launch that did not stop: the context is unusable */
  int32_t *block_of;      /* per task: the queue (block) that runs it */
  CUdeviceptr trace;      /* amk_trace_t[n_tasks] when tracing, else 0 */
  amk_trace_t *trace_host;
  /* Decoding on the device (amk_cuda_vm_generate): the decode state, the
   * prompt, the host-mapped produced tokens and per-launch events. */
  amk_decode_t no_decode; /* all zero: the host drives the step */
  CUdeviceptr decode_state, decode_feed, produced_dev;
  int32_t *produced;
  size_t feed_cap, produced_cap;
  CUevent gen_start[GEN_IN_FLIGHT], gen_end[GEN_IN_FLIGHT];
  char describe[400];
  /* A rank program's mailbox for its cross-rank all-reduces (codegen's
   * size; 0: none), and whether amk_cuda_vm_tp_bind has given it one. */
  size_t tp_mailbox_bytes;
  int tp_size;
  bool tp_bound;
};

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static bool cu_ok(AmkCudaVm *vm, CUresult r, const char *what, AmkDiagEngine *diag) {
  if (r == 0)
    return true;
  char buf[256];
  amk_error(diag, no_loc(), "CUDA: %s failed: %s", what,
            amk_cuda_error_text(&vm->drv, r, buf, sizeof buf));
  return false;
}
#define CU(call, what)                                                         \
  do {                                                                         \
    if (!cu_ok(vm, (call), (what), diag))                                      \
      goto fail;                                                               \
  } while (0)

/* Fills buffer b on the device by a random rule (amk_fill_random in
 * megakernel.cuh computes what amk_random_fill does on the host, bit for
 * bit). */
static bool fill_random(AmkCudaVm *vm, uint32_t b, const AmkRandomRule *rule, AmkDType dtype,
                        int64_t numel, AmkDiagEngine *diag) {
  if (dtype != AMK_DTYPE_F32 && dtype != AMK_DTYPE_BF16 && dtype != AMK_DTYPE_F16)
    return true; /* no rule for other dtypes: they stay zero, as on the host */
  unsigned long long dst = vm->buf_addr[b], state = rule->state;
  long long n = numel;
  int dt = (int)dtype;
  double center = rule->center, scale = rule->scale;
  void *args[] = {&dst, &n, &dt, &state, &center, &scale};
  unsigned grid = (unsigned)(vm->sm_count > 0 ? vm->sm_count * 4 : 512);
  return cu_ok(vm, vm->drv.cuLaunchKernel(vm->fill_kernel, grid, 1, 1, 256, 1, 1, 0, NULL, args,
                                          NULL),
               "launch amk_fill_random", diag);
}

typedef enum { UPLOAD_DONE, UPLOAD_NOT_MINE, UPLOAD_FAILED } UploadResult;

/* Uploads a weight the checkpoint holds transposed (a KEY^T source of a
 * whole matrix of 2- or 4-byte elements): the file's bytes go up as they
 * are, into the staging buffer, and amk_transpose writes them to buffer b,
 * so the host makes no copy and does no transposing (16 such matrices of
 * the 1B shape took about 1 s of host transposes). UPLOAD_NOT_MINE (nothing
 * done) when the matrix does not qualify; UPLOAD_FAILED after a reported
 * CUDA error. */
static UploadResult upload_transposed(AmkCudaVm *vm, uint32_t b, const AmkWeightReorder *ro,
                                      AmkDiagEngine *diag) {
  size_t bytes = (size_t)(ro->height * ro->width) * ro->elem;
  long long rows = ro->height, cols = ro->width;
  unsigned gx = (unsigned)((cols + 31) / 32), gy = (unsigned)((rows + 31) / 32);
  if (!vm->transpose_kernel || !ro->transpose || ro->stride != ro->width ||
      (ro->elem != 2 && ro->elem != 4) || bytes != vm->buf_bytes[b] || (rows + 31) / 32 > 65535)
    return UPLOAD_NOT_MINE;
  /* The previous matrix's transpose reads the staging buffer until done. */
  if (vm->staging && !cu_ok(vm, vm->drv.cuCtxSynchronize(), "transpose weights", diag))
    return UPLOAD_FAILED;
  if (vm->staging_bytes < bytes) {
    if (vm->staging)
      vm->drv.cuMemFree(vm->staging);
    vm->staging = 0;
    vm->staging_bytes = 0;
    if (!cu_ok(vm, vm->drv.cuMemAlloc(&vm->staging, bytes), "cuMemAlloc (transpose staging)",
               diag))
      return UPLOAD_FAILED;
    vm->staging_bytes = bytes;
  }
  if (!cu_ok(vm, vm->drv.cuMemcpyHtoD(vm->staging, ro->from, bytes), "upload weights", diag))
    return UPLOAD_FAILED;
  unsigned long long dst = vm->buf_addr[b], src = vm->staging;
  int elem = (int)ro->elem;
  void *args[] = {&dst, &src, &rows, &cols, &elem};
  if (!cu_ok(vm, vm->drv.cuLaunchKernel(vm->transpose_kernel, gx, gy, 1, 32, 8, 1, 0, NULL, args,
                                        NULL),
             "launch amk_transpose", diag))
    return UPLOAD_FAILED;
  return UPLOAD_DONE;
}

bool amk_cuda_available(char *why, size_t why_len) {
  AmkCudaDriver d;
  char buf[512];
  bool ok = amk_cuda_driver_open(&d, buf, sizeof buf);
  if (ok)
    amk_cuda_driver_close(&d);
  else if (why)
    snprintf(why, why_len, "%s", buf);
  return ok;
}

AmkCudaVmOptions amk_cuda_vm_options_default(void) {
  AmkCudaVmOptions o = {.timeout_ms = 10000, .threads_per_block = 0, .use_cache = true,
                        .verbose = false};
  const char *env = getenv("AMK_CUDA_TIMEOUT_MS");
  if (env && atof(env) > 0)
    o.timeout_ms = atof(env);
  return o;
}

void amk_cuda_vm_free(AmkCudaVm *vm) {
  if (!vm)
    return;
  if (vm->drv.handle && !vm->dead) {
    if (vm->ctx)
      vm->drv.cuCtxSetCurrent(vm->ctx);
    if (vm->stream)
      vm->drv.cuStreamSynchronize(vm->stream);
    if (vm->ev0)
      vm->drv.cuEventDestroy(vm->ev0);
    for (int i = 0; i < GEN_IN_FLIGHT; i++) {
      if (vm->gen_start[i])
        vm->drv.cuEventDestroy(vm->gen_start[i]);
      if (vm->gen_end[i])
        vm->drv.cuEventDestroy(vm->gen_end[i]);
    }
    if (vm->decode_state)
      vm->drv.cuMemFree(vm->decode_state);
    if (vm->decode_feed)
      vm->drv.cuMemFree(vm->decode_feed);
    if (vm->produced)
      vm->drv.cuMemFreeHost(vm->produced);
    if (vm->ev1)
      vm->drv.cuEventDestroy(vm->ev1);
    if (vm->stream)
      vm->drv.cuStreamDestroy(vm->stream);
    if (vm->arena)
      vm->drv.cuMemFree(vm->arena);
    if (vm->staging)
      vm->drv.cuMemFree(vm->staging);
    if (vm->tables)
      vm->drv.cuMemFree(vm->tables);
    if (vm->trace)
      vm->drv.cuMemFree(vm->trace);
    if (vm->host_flags)
      vm->drv.cuMemFreeHost(vm->host_flags);
    if (vm->logits_raw)
      vm->drv.cuMemFreeHost(vm->logits_raw);
    if (vm->rows_host)
      vm->drv.cuMemFreeHost(vm->rows_host);
    if (vm->mod)
      vm->drv.cuModuleUnload(vm->mod);
    if (vm->ctx_retained)
      vm->drv.cuDevicePrimaryCtxRelease(vm->dev);
  }
  if (vm->drv.handle && !vm->dead)
    amk_cuda_driver_close(&vm->drv);
  free(vm->buf_addr);
  free(vm->buf_bytes);
  free(vm->borrowed);
  free(vm->logits);
  free(vm->block_of);
  free(vm->trace_host);
  free(vm);
}

/* ---- creation -------------------------------------------------------------------- */

static size_t align_up(size_t n) { return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1); }

/* A prefill program's VM on the decode program's device memory: each
 * WEIGHT/CONST buffer whose bytes `from` holds (by source, the rule the
 * host's amk_weights_share borrows by) and each KV cache `from` has by
 * name, size and dtype takes from's address instead of memory of its own.
 * The rest (activations, synthetic CONSTs, a weight `from` lacks) is
 * allocated and filled as usual. */
static bool borrow_buffers(AmkCudaVm *vm, const AmkCudaVm *from, AmkDiagEngine *diag) {
  const AmkPlan *plan = vm->plan;
  if (from->dead) {
    amk_error(diag, no_loc(), "the GPU context is unusable after an earlier timeout");
    return false;
  }
  vm->share = from;
  for (uint32_t b = 0; b < plan->n_buffers; b++) {
    const AmkPlanBuffer *pb = &plan->buffers[b];
    int64_t found = -1, offset = 0;
    if (pb->kind == AMK_KIND_KV_CACHE) {
      for (uint32_t f = 0; f < from->plan->n_buffers && found < 0; f++)
        if (from->plan->buffers[f].kind == AMK_KIND_KV_CACHE &&
            strcmp(from->m->buffers[f].name, vm->m->buffers[b].name) == 0 &&
            from->plan->buffers[f].nbytes == pb->nbytes &&
            from->plan->buffers[f].dtype == pb->dtype)
          found = f;
    } else if (pb->kind == AMK_KIND_WEIGHT || pb->kind == AMK_KIND_CONST) {
      found = amk_weights_source_in(plan, b, from->plan, &offset);
    }
    if (found < 0 || pb->nbytes <= 0)
      continue;
    vm->borrowed[b] = true;
    vm->buf_addr[b] = from->buf_addr[found] + (uint64_t)offset;
    vm->borrowed_bytes += pb->nbytes;
  }
  return true;
}

AmkCudaVm *amk_cuda_vm_create(const AmkPlan *plan, const AmkWeights *weights,
                              const AmkCudaVmOptions *opt_in, AmkDiagEngine *diag) {
  AmkCudaVmOptions opt = opt_in ? *opt_in : amk_cuda_vm_options_default();
  if (opt.timeout_ms <= 0)
    opt.timeout_ms = 10000;
  const AmkModule *m = plan->m;
  AmkCudaVm *vm = amk_xcalloc(1, sizeof *vm);
  vm->m = m;
  vm->plan = plan;
  vm->timeout_ms = opt.timeout_ms;
  AmkCodegen cg = {0};
  void *cubin = NULL;
  size_t cubin_size = 0;
  uint32_t n = plan->n_tasks, nb = plan->n_buffers;
  int32_t *queue_of = NULL, *queue_offsets = NULL, *queue = NULL;
  void *host_tables = NULL;
  float *freq_host = NULL;
  size_t *offset = NULL, *freq_off = NULL;
  AmkTransfers transfers = {0};
  uint64_t *shadow_addr = NULL; /* per buffer: its shadow's device address, or 0 */
  char why[512];
  if (!amk_cuda_driver_open(&vm->drv, why, sizeof why)) {
    amk_error(diag, no_loc(), "%s", why);
    goto fail;
  }
  int n_devices = 0;
  CU(vm->drv.cuDeviceGetCount(&n_devices), "cuDeviceGetCount");
  if (opt.device < 0 || opt.device >= n_devices) {
    amk_error(diag, no_loc(), "GPU %d was asked for; %d %s visible", opt.device, n_devices,
              n_devices == 1 ? "is" : "are");
    goto fail;
  }
  CU(vm->drv.cuDeviceGet(&vm->dev, opt.device), "cuDeviceGet");
  char name[128] = "?";
  vm->drv.cuDeviceGetName(name, sizeof name, vm->dev);
  int cc_major = 0, cc_minor = 0, n_sms = 0, coop = 0, smem_optin = 0;
  CU(vm->drv.cuDeviceGetAttribute(&cc_major, AMK_CU_ATTR_CC_MAJOR, vm->dev), "attributes");
  CU(vm->drv.cuDeviceGetAttribute(&cc_minor, AMK_CU_ATTR_CC_MINOR, vm->dev), "attributes");
  CU(vm->drv.cuDeviceGetAttribute(&n_sms, AMK_CU_ATTR_MULTIPROCESSOR_COUNT, vm->dev),
     "attributes");
  vm->sm_count = n_sms;
  CU(vm->drv.cuDeviceGetAttribute(&coop, AMK_CU_ATTR_COOPERATIVE_LAUNCH, vm->dev), "attributes");
  CU(vm->drv.cuDeviceGetAttribute(&smem_optin, AMK_CU_ATTR_MAX_SHARED_PER_BLOCK_OPTIN, vm->dev),
     "attributes");
  if (!coop) {
    amk_error(diag, no_loc(), "GPU '%s' does not support cooperative launches", name);
    goto fail;
  }
  CU(vm->drv.cuDevicePrimaryCtxRetain(&vm->ctx, vm->dev), "cuDevicePrimaryCtxRetain");
  vm->ctx_retained = true;
  CU(vm->drv.cuCtxSetCurrent(vm->ctx), "cuCtxSetCurrent");

  /* Codegen and NVRTC for this GPU. */
  AmkCodegenOptions cgo = {.threads_per_block = opt.threads_per_block};
  double t_codegen = now_ms();
  if (!amk_codegen_options_from_env(&cgo, diag))
    goto fail;
  amk_cuda_transfers_plan(plan, cgo.tagged, &transfers);
  cgo.transfers = &transfers;
  if (!amk_cuda_codegen(m, &cgo, &cg, diag))
    goto fail;
  if (cg.tp_mailbox_bytes && !opt.tp_member) {
    amk_error(diag, no_loc(), "this is one rank's program of a %d-rank tensor-parallel group: "
                              "it runs only beside the others (amk-run --tp %d on a model "
                              "folder)", cg.tp_size, cg.tp_size);
    goto fail;
  }
  char arch[32];
  snprintf(arch, sizeof arch, "sm_%d%d", cc_major, cc_minor);
  double t0 = now_ms();
  double codegen_ms = t0 - t_codegen;
  if (!amk_nvrtc_compile(cg.source, arch, opt.use_cache, &cubin, &cubin_size, diag))
    goto fail;
  double compile_ms = now_ms() - t0;
  double t_setup = now_ms();
  CU(vm->drv.cuModuleLoadData(&vm->mod, cubin), "cuModuleLoadData");
  CU(vm->drv.cuModuleGetFunction(&vm->kernel, vm->mod, "amk_megakernel"), "get amk_megakernel");
  CU(vm->drv.cuModuleGetFunction(&vm->bw_kernel, vm->mod, "amk_read_bw"), "get amk_read_bw");
  CU(vm->drv.cuModuleGetFunction(&vm->fill_kernel, vm->mod, "amk_fill_random"),
     "get amk_fill_random");
  CU(vm->drv.cuModuleGetFunction(&vm->transpose_kernel, vm->mod, "amk_transpose"),
     "get amk_transpose");
  vm->threads = cg.threads_per_block;
  vm->smem = cg.smem_bytes;
  vm->tp_size = cg.tp_size;
  vm->tp_mailbox_bytes = cg.tp_mailbox_bytes;

  /* The kernel's static shared memory (the norm stage, the wait cache)
   * counts against the same limits as the dynamic part: past 48 KiB in all
   * the launch needs the opt-in, or no block is resident. */
  int static_smem = 0;
  vm->drv.cuFuncGetAttribute(&static_smem, AMK_CU_FUNC_ATTR_STATIC_SHARED, vm->kernel);
  if ((int64_t)vm->smem + static_smem > smem_optin) {
    amk_error(diag, no_loc(), "the program needs %zu bytes of shared memory (%zu dynamic, %d "
                              "static); '%s' allows %d",
              vm->smem + (size_t)static_smem, vm->smem, static_smem, name, smem_optin);
    goto fail;
  }
  if (vm->smem + (size_t)static_smem > 48 * 1024)
    CU(vm->drv.cuFuncSetAttribute(vm->kernel, AMK_CU_FUNC_ATTR_MAX_DYNAMIC_SHARED, (int)vm->smem),
       "cuFuncSetAttribute(max dynamic shared memory)");
  /* AMK_CUDA_SMEM_CARVEOUT=P: the percentage of the SM's L1 and shared
   * memory to make shared memory (a measurement knob: how much the tasks
   * depend on the L1 left beside the kernel's shared memory). */
  const char *carveout = getenv("AMK_CUDA_SMEM_CARVEOUT");
  if (carveout && *carveout) {
    char *end;
    long pct = strtol(carveout, &end, 10);
    if (*end || pct < 0 || pct > 100) {
      amk_error(diag, no_loc(), "AMK_CUDA_SMEM_CARVEOUT must be a percentage in [0, 100], not '%s'",
                carveout);
      goto fail;
    }
    CU(vm->drv.cuFuncSetAttribute(vm->kernel, AMK_CU_FUNC_ATTR_PREFERRED_SHARED_CARVEOUT,
                                  (int)pct),
       "cuFuncSetAttribute(preferred shared memory carveout)");
  }
  int per_sm = 0, regs = 0, local = 0;
  CU(vm->drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, vm->kernel, vm->threads,
                                                         vm->smem),
     "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  vm->drv.cuFuncGetAttribute(&regs, AMK_CU_FUNC_ATTR_NUM_REGS, vm->kernel);
  vm->drv.cuFuncGetAttribute(&local, AMK_CU_FUNC_ATTR_LOCAL_SIZE, vm->kernel);
  if (per_sm < 1) {
    amk_error(diag, no_loc(), "the megakernel (%d threads, %zu + %d bytes of shared memory, %d "
                              "registers) cannot be resident on '%s'",
              vm->threads, vm->smem, static_smem, regs, name);
    goto fail;
  }
  int max_blocks = per_sm * n_sms;

  /* Queues: one per block, from the plan's order and SM assignment (the
   * program's SMs folded onto the grid when more are named than can be
   * resident; round robin when unassigned). */
  int want = plan->sm_count > 0 ? plan->sm_count : (n < (uint32_t)n_sms ? (int)n : n_sms);
  vm->grid = want < 1 ? 1 : (want > max_blocks ? max_blocks : want);
  queue_of = amk_xmalloc((n ? n : 1) * sizeof *queue_of);
  queue_offsets = amk_xmalloc(((size_t)vm->grid + 1) * sizeof *queue_offsets);
  queue = amk_xmalloc((n ? n : 1) * sizeof *queue);
  if (!amk_plan_queues(plan, vm->grid, queue_of, queue_offsets, queue, diag))
    goto fail;

  /* Device memory: the accumulators (one region, zeroed before every
   * launch), the other pages, every other buffer not bound to a page, then
   * the ROPE frequency tables. */
  vm->buf_addr = amk_xcalloc(nb ? nb : 1, sizeof *vm->buf_addr);
  vm->buf_bytes = amk_xcalloc(nb ? nb : 1, sizeof *vm->buf_bytes);
  offset = amk_xcalloc(nb ? nb : 1, sizeof *offset);
  vm->borrowed = amk_xcalloc(nb ? nb : 1, sizeof *vm->borrowed);
  if (opt.share && !borrow_buffers(vm, opt.share, diag))
    goto fail;
  size_t total = 0;
  size_t *page_off = amk_xcalloc(plan->n_pages ? plan->n_pages : 1, sizeof *page_off);
  bool *acc_page = amk_xcalloc(plan->n_pages ? plan->n_pages : 1, sizeof *acc_page);
  for (uint32_t b = 0; b < nb; b++) { /* an accumulator's page holds only it (the plan) */
    const AmkPlanBuffer *pb = &plan->buffers[b];
    vm->buf_bytes[b] = (size_t)(pb->nbytes > 0 ? pb->nbytes : 0);
    if (!pb->accumulate || vm->borrowed[b])
      continue;
    if (pb->page >= 0) {
      acc_page[pb->page] = true;
      page_off[pb->page] = total;
      total += align_up((size_t)(plan->page_bytes[pb->page] > 0 ? plan->page_bytes[pb->page] : 1));
    } else {
      offset[b] = total;
      total += align_up(vm->buf_bytes[b] ? vm->buf_bytes[b] : 1);
    }
  }
  vm->acc_bytes = total;
  for (uint32_t p = 0; p < plan->n_pages; p++) {
    if (acc_page[p])
      continue;
    page_off[p] = total;
    total += align_up((size_t)(plan->page_bytes[p] > 0 ? plan->page_bytes[p] : 1));
  }
  for (uint32_t b = 0; b < nb; b++) {
    const AmkPlanBuffer *pb = &plan->buffers[b];
    if (vm->borrowed[b]) {
      continue; /* the other VM's address, set by borrow_buffers */
    } else if (pb->page >= 0) {
      offset[b] = page_off[pb->page];
    } else if (!pb->accumulate) {
      offset[b] = total;
      total += align_up(vm->buf_bytes[b] ? vm->buf_bytes[b] : 1);
    }
  }
  free(acc_page);
  free(page_off);
  vm->weight_bytes = plan->weight_bytes;
  freq_off = amk_xcalloc(n ? n : 1, sizeof *freq_off);
  size_t freq_floats = 0;
  for (uint32_t t = 0; t < n; t++) {
    if (plan->tasks[t].rope_inv_freq) {
      freq_off[t] = freq_floats;
      int32_t half = plan->tasks[t].rope_half;
      freq_floats += (size_t)(half > 0 ? half : 1);
    }
  }
  size_t freq_base = total;
  total += align_up(freq_floats * 4 + 4);
  /* The shadows of launch-tagged transfers (8 bytes an element), zeroed
   * with the arena: tag 0 is never a launch's. */
  size_t shadow_base = total;
  for (uint32_t b = 0; b < nb; b++)
    if (transfers.shadowed && transfers.shadowed[b])
      total += align_up((size_t)plan->buffers[b].numel * 8);
  vm->arena_bytes = total;
  /* A model too big for the card is a clear refusal, not a failed
   * cuMemAlloc halfway through the upload. */
  size_t free_bytes = 0, card_bytes = 0;
  if (vm->drv.cuMemGetInfo(&free_bytes, &card_bytes) == AMK_CUDA_SUCCESS && total > free_bytes) {
    AmkLoc none = {0, 0};
    amk_error(diag, none,
              "the program needs %.2f GiB of GPU memory (%.2f GiB of weights), more than the "
              "%.2f GiB free of the GPU's %.2f GiB",
              (double)total / 1073741824.0, (double)plan->weight_bytes / 1073741824.0,
              (double)free_bytes / 1073741824.0, (double)card_bytes / 1073741824.0);
    goto fail;
  }
  CU(vm->drv.cuMemAlloc(&vm->arena, total), "cuMemAlloc (buffers)");
  CU(vm->drv.cuMemsetD8(vm->arena, 0, total), "cuMemsetD8");
  for (uint32_t b = 0; b < nb; b++)
    if (!vm->borrowed[b])
      vm->buf_addr[b] = vm->arena + offset[b];
  shadow_addr = amk_xcalloc(nb ? nb : 1, sizeof *shadow_addr);
  for (uint32_t b = 0, at = (uint32_t)0; b < nb; b++)
    if (transfers.shadowed && transfers.shadowed[b]) {
      shadow_addr[b] = vm->arena + shadow_base + at;
      at += (uint32_t)align_up((size_t)plan->buffers[b].numel * 8);
    }
  /* Weights: straight from the loader (mapped checkpoint, converted or
   * random copies, synthetic CONSTs). */
  for (uint32_t b = 0; b < nb; b++) {
    AmkBufferKind kind = plan->buffers[b].kind;
    if (kind != AMK_KIND_WEIGHT && kind != AMK_KIND_CONST)
      continue;
    if (!vm->buf_bytes[b] || vm->borrowed[b])
      continue;
    /* Random weights are made here, by the same rule the host uses; mapped
     * checkpoint stretches go up as they are, with no host copy. */
    AmkRandomRule rule;
    const AmkWeightPiece *pieces;
    uint32_t n_pieces;
    if (amk_weights_random_rule(weights, b, &rule)) {
      if (!fill_random(vm, b, &rule, plan->buffers[b].dtype, plan->buffers[b].numel, diag))
        goto fail;
      continue;
    }
    if (amk_weights_pieces(weights, b, &pieces, &n_pieces)) {
      for (uint32_t i = 0; i < n_pieces; i++)
        if (pieces[i].offset + pieces[i].nbytes <= vm->buf_bytes[b])
          CU(vm->drv.cuMemcpyHtoD(vm->buf_addr[b] + pieces[i].offset, pieces[i].data,
                                  pieces[i].nbytes),
             "upload weights");
      continue;
    }
    AmkWeightReorder ro;
    UploadResult moved = amk_weights_reorder(weights, b, &ro)
                             ? upload_transposed(vm, b, &ro, diag)
                             : UPLOAD_NOT_MINE;
    if (moved == UPLOAD_FAILED)
      goto fail;
    if (moved == UPLOAD_DONE)
      continue;
    /* Bytes made on demand (a transposed or column-sliced tensor, a
     * joined one) are lent for the upload alone: one such host copy at a
     * time, not the model's worth. */
    size_t hb = 0;
    const void *data = amk_weights_lend(weights, b, &hb);
    if (!data || hb < vm->buf_bytes[b]) {
      amk_weights_unlend(weights, b);
      amk_error(diag, no_loc(), "the weights hold no data for buffer '%s'", m->buffers[b].name);
      goto fail;
    }
    CUresult up = vm->drv.cuMemcpyHtoD(vm->buf_addr[b], data, vm->buf_bytes[b]);
    amk_weights_unlend(weights, b);
    CU(up, "upload weights");
  }
  if (vm->fill_kernel)
    CU(vm->drv.cuCtxSynchronize(), "fill random weights");
  if (vm->staging) {
    vm->drv.cuMemFree(vm->staging);
    vm->staging = 0;
    vm->staging_bytes = 0;
  }
  freq_host = amk_xcalloc(freq_floats + 1, sizeof *freq_host);
  for (uint32_t t = 0; t < n; t++)
    if (plan->tasks[t].rope_inv_freq && plan->tasks[t].rope_half > 0)
      memcpy(freq_host + freq_off[t], plan->tasks[t].rope_inv_freq,
             (size_t)plan->tasks[t].rope_half * sizeof *freq_host);
  CU(vm->drv.cuMemcpyHtoD(vm->arena + freq_base, freq_host, freq_floats * 4 + 4),
     "upload rope frequencies");

  /* Tables. */
  vm->n_counters = (int)plan->n_counters;
  size_t sz_buf = align_up((size_t)(nb ? nb : 1) * sizeof(amk_buffer_t));
  size_t sz_inst = align_up((size_t)(n ? n : 1) * sizeof(amk_instruction_t));
  size_t sz_aux = align_up((size_t)(n ? n : 1) * sizeof(amk_inst_aux_t));
  size_t sz_qo = align_up((size_t)(vm->grid + 1) * sizeof(int32_t));
  size_t sz_q = align_up((size_t)(n ? n : 1) * sizeof(int32_t));
  size_t sz_cnt = align_up((size_t)(plan->n_counters ? plan->n_counters : 1) * sizeof(uint32_t));
  size_t sz_st = align_up(8 * sizeof(uint32_t));
  size_t tables_bytes = sz_buf + sz_inst + sz_aux + sz_qo + sz_q + sz_cnt + sz_st;
  host_tables = amk_xcalloc(1, tables_bytes);
  char *ht = host_tables;
  amk_buffer_t *hbuf = (amk_buffer_t *)ht;
  amk_instruction_t *hinst = (amk_instruction_t *)(ht + sz_buf);
  amk_inst_aux_t *haux = (amk_inst_aux_t *)(ht + sz_buf + sz_inst);
  int32_t *hqo = (int32_t *)(ht + sz_buf + sz_inst + sz_aux);
  int32_t *hq = (int32_t *)(ht + sz_buf + sz_inst + sz_aux + sz_qo);
  for (uint32_t b = 0; b < nb; b++) {
    const AmkPlanBuffer *pb = &plan->buffers[b];
    amk_buffer_t *d = &hbuf[b];
    d->ptr = vm->buf_addr[b];
    d->numel = pb->numel;
    d->rank = (int32_t)pb->rank;
    d->dtype = (int32_t)pb->dtype;
    d->space = (int32_t)m->buffers[b].space;
    int64_t stride = 1;
    for (int r = (int)pb->rank - 1; r >= 0; r--) {
      d->shape[r] = pb->shape[r];
      d->stride[r] = stride;
      stride *= d->shape[r];
    }
  }
  const char *stall_env = getenv("AMK_CUDA_TEST_STALL");
  bool stall_test = stall_env && strcmp(stall_env, "1") == 0;
  uint32_t stall_task = 0;
  for (uint32_t t = 0; t < n; t++)
    if (plan->tasks[t].wait_end > plan->tasks[t].wait_begin)
      stall_task = t;
  for (uint32_t t = 0; t < n; t++) {
    const AmkTask *task = &m->tasks[t];
    const AmkPlanTask *pt = &plan->tasks[t];
    amk_instruction_t *d = &hinst[t];
    uint32_t n_waits = pt->wait_end - pt->wait_begin;
    if (pt->n_inputs > AMK_MAX_INPUTS || pt->n_outputs > AMK_MAX_OUTPUTS ||
        n_waits > AMK_MAX_WAITS) {
      amk_error(diag, task->loc, "task %d exceeds the ABI caps", task->id);
      goto fail;
    }
    d->op = (int32_t)pt->op;
    d->n_inputs = (int32_t)pt->n_inputs;
    d->n_outputs = (int32_t)pt->n_outputs;
    d->n_waits = (int32_t)n_waits;
    for (uint32_t i = 0; i < pt->n_inputs; i++)
      d->inputs[i] = (int32_t)pt->inputs[i];
    for (uint32_t i = 0; i < pt->n_outputs; i++)
      d->outputs[i] = (int32_t)pt->outputs[i];
    d->out_counter = (int32_t)pt->counter;
    d->sm = queue_of[t];
#define X(name, type) memcpy(&d->params.name, &pt->params.name, 4);
    AMK_PARAMS(X)
#undef X
    amk_inst_aux_t *a = &haux[t];
    a->variant = cg.variant_of[t];
    a->follow = (int32_t)pt->follow;
    a->part_index = (int32_t)pt->part_index;
    a->part_count = (int32_t)pt->part_count;
    a->combine_follows = pt->combine_follows ? 1 : 0;
    a->span = (int32_t)pt->span;
    if (pt->rope_inv_freq)
      a->inv_freq = vm->arena + freq_base + freq_off[t] * 4;
    if (pt->weight_read.buffer >= 0) {
      a->prefetch_ptr = vm->buf_addr[pt->weight_read.buffer] + (uint64_t)pt->weight_read.offset;
      a->prefetch_bytes = pt->weight_read.nbytes;
    }
    for (uint32_t i = 0; i < pt->n_inputs; i++)
      a->io[i] = vm->buf_addr[pt->inputs[i]];
    for (uint32_t i = 0; i < pt->n_outputs; i++)
      a->io[AMK_MAX_INPUTS + i] = vm->buf_addr[pt->outputs[i]];
    /* Launch-tagged transfers: a consumer's shadowed inputs, any writer's
     * shadowed output, and the waits as transfers.c left them. */
    for (uint32_t i = 0; i < pt->n_inputs; i++)
      if (transfers.tagged_reads[t] && shadow_addr[pt->inputs[i]])
        a->shadow[i] = shadow_addr[pt->inputs[i]];
    for (uint32_t i = 0; i < pt->n_outputs; i++)
      a->shadow[AMK_MAX_INPUTS + i] = shadow_addr[pt->outputs[i]];
    const AmkTransferWaits *tw = &transfers.waits[t];
    d->n_waits = tw->n_blocking;
    for (uint32_t w = 0; w < tw->n_blocking; w++) {
      d->wait_counter[w] = (int32_t)tw->counter[w];
      d->wait_threshold[w] = (int32_t)tw->threshold[w];
    }
    /* AMK_CUDA_TEST_STALL=1 makes the last waiting task wait for a count no
     * producer can reach, only in the device's copy of the tables: the one
     * way to exercise the watchdog, since validate rejects such a program. */
    if (stall_test && tw->n_blocking && t == stall_task)
      d->wait_threshold[0] = INT32_MAX;
    a->n_signal_waits = tw->n_at_signal;
    for (uint32_t w = 0; w < tw->n_at_signal; w++) {
      a->signal_wait_counter[w] = (int32_t)tw->signal_counter[w];
      a->signal_wait_threshold[w] = (int32_t)tw->signal_threshold[w];
    }
  }
  memcpy(hqo, queue_offsets, ((size_t)vm->grid + 1) * sizeof *hqo);
  memcpy(hq, queue, (size_t)n * sizeof *hq);
  CU(vm->drv.cuMemAlloc(&vm->tables, tables_bytes), "cuMemAlloc (tables)");
  CU(vm->drv.cuMemcpyHtoD(vm->tables, host_tables, tables_bytes), "upload tables");
  vm->counters = vm->tables + sz_buf + sz_inst + sz_aux + sz_qo + sz_q;
  vm->status = vm->counters + sz_cnt;
  CU(vm->drv.cuMemHostAlloc((void **)&vm->host_flags, 64, AMK_CU_MEMHOSTALLOC_DEVICEMAP),
     "cuMemHostAlloc");
  memset(vm->host_flags, 0, 64);
  CU(vm->drv.cuMemHostGetDevicePointer(&vm->host_flags_dev, vm->host_flags, 0),
     "cuMemHostGetDevicePointer");
  vm->prog = (amk_program_t){.buffers = vm->tables,
                             .counters = vm->counters,
                             .instructions = vm->tables + sz_buf,
                             .aux = vm->tables + sz_buf + sz_inst,
                             .queue_offsets = vm->tables + sz_buf + sz_inst + sz_aux,
                             .queue = vm->tables + sz_buf + sz_inst + sz_aux + sz_qo,
                             .abort_flag = vm->host_flags_dev,
                             .status = vm->status,
                             .n_buffers = (int32_t)nb,
                             .n_counters = (int32_t)plan->n_counters,
                             .n_instructions = (int32_t)n,
                             .n_queues = vm->grid,
                             .spin_limit_ns = (int64_t)(opt.timeout_ms * 1e6)};

  /* IO, from the plan. */
  vm->token_buffer = plan->token_buffer;
  vm->pos_buffer = plan->pos_buffer;
  vm->logits_buffer = plan->logits_buffer;
  vm->vocab = plan->vocab;
  vm->max_seq = plan->max_seq;
  vm->rows = plan->rows;
  vm->logit_rows = plan->logit_rows;
  CU(vm->drv.cuMemHostAlloc(&vm->logits_raw, vm->buf_bytes[vm->logits_buffer] + 16, 0),
     "cuMemHostAlloc (logits)");
  vm->logits = amk_xcalloc((size_t)(vm->vocab > 0 ? vm->vocab * vm->logit_rows : 1),
                           sizeof *vm->logits);
  if (vm->rows > 1)
    CU(vm->drv.cuMemHostAlloc((void **)&vm->rows_host, (size_t)vm->rows * 2 * sizeof(int32_t), 0),
       "cuMemHostAlloc (prefill tokens)");
  CU(vm->drv.cuStreamCreate(&vm->stream, AMK_CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CU(vm->drv.cuEventCreate(&vm->ev0, AMK_CU_EVENT_DEFAULT), "cuEventCreate");
  CU(vm->drv.cuEventCreate(&vm->ev1, AMK_CU_EVENT_DEFAULT), "cuEventCreate");
  snprintf(vm->describe, sizeof vm->describe,
           "%s %s, %d SMs; %d blocks x %d threads, %zu B shared, %d regs, %d B local; "
           "%d variants; codegen %.0f ms, compile %.0f ms%s, load and upload %.0f ms",
           name, arch, n_sms, vm->grid, vm->threads, vm->smem, regs, local, cg.n_variants,
           codegen_ms, compile_ms, compile_ms < 50 ? " (cached)" : "", now_ms() - t_setup);
  if (transfers.n_hops > 0) {
    size_t used = strlen(vm->describe);
    snprintf(vm->describe + used, sizeof vm->describe - used,
             "; launch-tagged transfers into %" PRIu32 " tasks", transfers.n_consumers);
  }
  if (vm->share) {
    size_t used = strlen(vm->describe);
    snprintf(vm->describe + used, sizeof vm->describe - used,
             "; %" PRId64 " token rows a step, %.1f MB of weights and KV caches shared",
             vm->rows, (double)vm->borrowed_bytes / 1e6);
  }
  if (opt.verbose)
    fprintf(stderr, "amk: cuda: %s\n", vm->describe);
  if (opt.trace) {
    CU(vm->drv.cuMemAlloc(&vm->trace, (n ? n : 1) * sizeof(amk_trace_t)), "cuMemAlloc (trace)");
    vm->prog.trace = vm->trace;
    vm->trace_host = amk_xcalloc(n ? n : 1, sizeof(amk_trace_t));
  }
  vm->block_of = queue_of;
  free(queue_offsets);
  free(queue);
  free(host_tables);
  free(freq_host);
  free(offset);
  free(freq_off);
  free(cubin);
  free(shadow_addr);
  amk_cuda_transfers_free(&transfers);
  amk_cuda_codegen_free(&cg);
  return vm;
fail:
  free(shadow_addr);
  amk_cuda_transfers_free(&transfers);
  free(offset);
  free(freq_off);
  free(queue_of);
  free(queue_offsets);
  free(queue);
  free(host_tables);
  free(freq_host);
  free(cubin);
  amk_cuda_codegen_free(&cg);
  amk_cuda_vm_free(vm);
  return NULL;
}

/* ---- running ---------------------------------------------------------------------- */

static const char *status_name(uint32_t code) {
  switch (code) {
  case AMK_STATUS_ABORTED:
    return "aborted by the host watchdog";
  case AMK_STATUS_INDEX:
    return "a data-dependent index (token, position, KV window) is out of range";
  case AMK_STATUS_SHAPE:
    return "a tile or head range outside the shapes it was compiled for";
  case AMK_STATUS_SPIN:
    return "a counter wait exceeded the time limit";
  default:
    return "unknown device error";
  }
}

/* Waits for a launch to finish (the event `done`, or the whole stream when
 * NULL) under the host watchdog, then reads the device status: OK, or an
 * error or TIMEOUT reported through diag. With read_status false a launch
 * that finished in time is taken as OK without reading the status (a
 * synchronous copy would wait for every launch queued behind it): the
 * caller has its own sign of success. */
static AmkCudaStepStatus wait_launch(AmkCudaVm *vm, CUevent done, int64_t pos, bool read_status,
                                     AmkDiagEngine *diag) {
  uint32_t status[8] = {0};
  CUresult r;
  /* The watchdog: poll; past the limit raise the abort flag, which every
   * waiting block polls, and give the kernel a moment to stop. */
  double start = now_ms();
  bool timed_out = false;
  for (;;) {
    r = done ? vm->drv.cuEventQuery(done) : vm->drv.cuStreamQuery(vm->stream);
    if (r != AMK_CUDA_ERROR_NOT_READY)
      break;
    double elapsed = now_ms() - start;
    if (!timed_out && elapsed > vm->timeout_ms) {
      timed_out = true;
      __atomic_store_n(&vm->host_flags[0], 1u, __ATOMIC_SEQ_CST);
    }
    if (timed_out && elapsed > vm->timeout_ms + 5000) {
      vm->dead = true;
      amk_error(diag, no_loc(),
                "TIMEOUT: the launch at position %" PRId64 " exceeded %.0f ms and did not stop "
                "after the abort flag was raised; the GPU context is abandoned",
                pos, vm->timeout_ms);
      return AMK_CUDA_STEP_TIMEOUT;
    }
    struct timespec ts = {0, elapsed < 2 ? 2000 : 50000};
    nanosleep(&ts, NULL);
  }
  if (r == AMK_CUDA_ERROR_LAUNCH_TIMEOUT) {
    char buf[200];
    amk_error(diag, no_loc(), "TIMEOUT: the driver stopped the launch at position %" PRId64 ": %s",
              pos, amk_cuda_error_text(&vm->drv, r, buf, sizeof buf));
    vm->dead = true;
    return AMK_CUDA_STEP_TIMEOUT;
  }
  if (!cu_ok(vm, r, "the megakernel launch", diag)) {
    vm->dead = true; /* a sticky launch error */
    return AMK_CUDA_STEP_ERROR;
  }
  if (!read_status && !timed_out)
    return AMK_CUDA_STEP_OK;
  if (!cu_ok(vm, vm->drv.cuMemcpyDtoH(status, vm->status, sizeof status), "read status", diag))
    return AMK_CUDA_STEP_ERROR;
  if (timed_out || status[0] == AMK_STATUS_ABORTED || status[0] == AMK_STATUS_SPIN) {
    const AmkTask *t = status[1] < vm->m->n_tasks ? &vm->m->tasks[status[1]] : NULL;
    /* A cross-rank all-reduce names the rank it waited for as -1 - rank. */
    char what[96];
    if ((int32_t)status[2] < 0)
      snprintf(what, sizeof what, "waiting for rank %d's part", -1 - (int32_t)status[2]);
    else
      snprintf(what, sizeof what, "waiting on counter %u for %u", status[2], status[3]);
    amk_error(diag, no_loc(),
              "TIMEOUT: the launch at position %" PRId64 " exceeded %.0f ms and was aborted%s%s%s "
              "(%s)",
              pos, vm->timeout_ms, t ? "; a block was waiting in task '" : "",
              t && t->label ? t->label : "", t ? "'" : "", what);
    return AMK_CUDA_STEP_TIMEOUT;
  }
  if (status[0] != 0) {
    const AmkTask *t = status[1] < vm->m->n_tasks ? &vm->m->tasks[status[1]] : NULL;
    amk_error(diag, no_loc(), "the GPU reported an error at position %" PRId64
                              " in task %d ('%s'): %s (%d, %d)",
              pos, t ? t->id : -1, t && t->label ? t->label : "?", status_name(status[0]),
              (int)status[2], (int)status[3]);
    return AMK_CUDA_STEP_ERROR;
  }
  return AMK_CUDA_STEP_OK;
}

/* Checks a step's tokens and position: n = the program's rows tokens at
 * positions pos..pos+n-1 (the VM's step_begin says the same). */
static bool step_args_ok(AmkCudaVm *vm, const int32_t *tokens, int64_t n, int64_t pos,
                         AmkDiagEngine *diag) {
  if (vm->dead) {
    amk_error(diag, no_loc(), "the GPU context is unusable after an earlier timeout");
    return false;
  }
  if (n != vm->rows) {
    amk_error(diag, no_loc(), "a step of this program feeds %" PRId64 " token%s, not %" PRId64,
              vm->rows, vm->rows == 1 ? "" : "s", n);
    return false;
  }
  for (int64_t r = 0; r < n; r++)
    if (tokens[r] < 0 || tokens[r] >= vm->vocab) {
      amk_error(diag, no_loc(), "token %d is outside the vocabulary [0, %" PRId64 ")",
                tokens[r], vm->vocab);
      return false;
    }
  if (pos < 0 || pos > vm->max_seq - n || pos > INT32_MAX - n) {
    amk_error(diag, no_loc(), "position %" PRId64 " is beyond the KV cache (%" PRId64 " rows)",
              pos + n - 1, vm->max_seq);
    return false;
  }
  return true;
}

/* The accumulators start every step at zero (docs/Fusion.md, mlp): one
 * memset of their region, queued before the launch. */
static bool zero_accumulators(AmkCudaVm *vm, AmkDiagEngine *diag) {
  return vm->acc_bytes == 0 ||
         cu_ok(vm, vm->drv.cuMemsetD32Async(vm->arena, 0, vm->acc_bytes / 4, vm->stream),
               "zero accumulators", diag);
}

/* The next megakernel launch's tag (amk_program_t.launch_tag): a count of
 * launches that skips 0, the tag of the shadows' zeroed words. */
static void next_launch_tag(AmkCudaVm *vm) {
  if (++vm->launches == 0)
    vm->launches = 1;
  vm->prog.launch_tag = vm->launches;
}

/* One launch at position pos once the IO inputs are queued for writing:
 * counters and status cleared, the kernel, and the logits' copy back
 * queued behind it (finish_step waits for them). */
static AmkCudaStepStatus enqueue_step(AmkCudaVm *vm, int64_t pos, AmkDiagEngine *diag) {
  if (vm->tp_mailbox_bytes && !vm->tp_bound) {
    amk_error(diag, no_loc(), "a rank program's all-reduces have no mailboxes yet");
    return AMK_CUDA_STEP_ERROR;
  }
  if (!cu_ok(vm, vm->drv.cuMemsetD32Async(vm->counters, 0, (size_t)(vm->n_counters ? vm->n_counters : 1),
                                          vm->stream),
             "zero counters", diag) ||
      !zero_accumulators(vm, diag) ||
      !cu_ok(vm, vm->drv.cuMemsetD32Async(vm->status, 0, 8, vm->stream), "zero status", diag))
    return AMK_CUDA_STEP_ERROR;
  if (vm->trace &&
      !cu_ok(vm, vm->drv.cuMemsetD32Async(vm->trace, 0, vm->m->n_tasks * sizeof(amk_trace_t) / 4,
                                          vm->stream),
             "zero trace", diag))
    return AMK_CUDA_STEP_ERROR;
  int pos32 = (int)pos;
  next_launch_tag(vm);
  void *args[] = {&vm->prog, &pos32, &vm->no_decode};
  vm->drv.cuEventRecord(vm->ev0, vm->stream);
  CUresult r = vm->drv.cuLaunchCooperativeKernel(vm->kernel, (unsigned)vm->grid, 1, 1,
                                                 (unsigned)vm->threads, 1, 1, (unsigned)vm->smem,
                                                 vm->stream, args);
  if (!cu_ok(vm, r, "cuLaunchCooperativeKernel", diag))
    return AMK_CUDA_STEP_ERROR;
  vm->drv.cuEventRecord(vm->ev1, vm->stream);
  vm->drv.cuMemcpyDtoHAsync(vm->logits_raw, vm->buf_addr[vm->logits_buffer],
                            vm->buf_bytes[vm->logits_buffer], vm->stream);
  return AMK_CUDA_STEP_OK;
}

/* Waits for the launch enqueue_step queued, then every logits row back as
 * fp32. */
static AmkCudaStepStatus finish_step(AmkCudaVm *vm, int64_t pos, float *kernel_ms,
                                     AmkDiagEngine *diag) {
  vm->drv.cuCtxSetCurrent(vm->ctx);
  AmkCudaStepStatus st = wait_launch(vm, NULL, pos, true, diag);
  if (st != AMK_CUDA_STEP_OK)
    return st;
  float ms = 0;
  vm->drv.cuEventElapsedTime(&ms, vm->ev0, vm->ev1);
  if (kernel_ms)
    *kernel_ms = ms;
  AmkDType dt = vm->m->buffers[vm->logits_buffer].dtype;
  for (int64_t i = 0; i < vm->vocab * vm->logit_rows; i++) {
    if (dt == AMK_DTYPE_F32) {
      vm->logits[i] = ((const float *)vm->logits_raw)[i];
    } else {
      uint16_t h = ((const uint16_t *)vm->logits_raw)[i];
      if (dt == AMK_DTYPE_BF16) {
        uint32_t u = (uint32_t)h << 16;
        memcpy(&vm->logits[i], &u, 4);
      } else {
        /* f16 -> f32 */
        uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
        float f;
        if (exp == 0)
          f = ldexpf((float)man, -24);
        else if (exp == 31)
          f = man ? NAN : INFINITY;
        else
          f = ldexpf((float)(man | 0x400), (int)exp - 25);
        vm->logits[i] = sign ? -f : f;
      }
    }
  }
  return AMK_CUDA_STEP_OK;
}

static AmkCudaStepStatus launch_step(AmkCudaVm *vm, int64_t pos, float *kernel_ms,
                                     AmkDiagEngine *diag) {
  AmkCudaStepStatus st = enqueue_step(vm, pos, diag);
  return st == AMK_CUDA_STEP_OK ? finish_step(vm, pos, kernel_ms, diag) : st;
}

/* Writes the token and position of a one-row step, queued on the stream. */
static bool queue_token(AmkCudaVm *vm, int32_t token, int64_t pos, AmkDiagEngine *diag) {
  vm->drv.cuCtxSetCurrent(vm->ctx);
  vm->host_flags[0] = 0;
  vm->host_flags[1] = (uint32_t)token;
  vm->host_flags[2] = (uint32_t)pos;
  if (!cu_ok(vm, vm->drv.cuMemcpyHtoDAsync(vm->buf_addr[vm->token_buffer], &vm->host_flags[1], 4,
                                           vm->stream),
             "write token", diag))
    return false;
  return vm->pos_buffer < 0 ||
         cu_ok(vm, vm->drv.cuMemcpyHtoDAsync(vm->buf_addr[vm->pos_buffer], &vm->host_flags[2], 4,
                                             vm->stream),
               "write pos", diag);
}

AmkCudaStepStatus amk_cuda_vm_step_launch(AmkCudaVm *vm, int32_t token, int64_t pos,
                                          AmkDiagEngine *diag) {
  if (!step_args_ok(vm, &token, 1, pos, diag) || !queue_token(vm, token, pos, diag))
    return AMK_CUDA_STEP_ERROR;
  return enqueue_step(vm, pos, diag);
}

AmkCudaStepStatus amk_cuda_vm_step_finish(AmkCudaVm *vm, int64_t pos, float *kernel_ms,
                                          AmkDiagEngine *diag) {
  return finish_step(vm, pos, kernel_ms, diag);
}

void amk_cuda_vm_raise_abort(AmkCudaVm *vm) {
  if (vm->host_flags)
    __atomic_store_n(&vm->host_flags[0], 1u, __ATOMIC_SEQ_CST);
}

size_t amk_cuda_vm_tp_mailbox_bytes(const AmkCudaVm *vm) { return vm->tp_mailbox_bytes; }

bool amk_cuda_vm_make_current(AmkCudaVm *vm, AmkDiagEngine *diag) {
  return cu_ok(vm, vm->drv.cuCtxSetCurrent(vm->ctx), "cuCtxSetCurrent", diag);
}

bool amk_cuda_vm_tp_bind(AmkCudaVm *vm, int rank, int size, const uint64_t *mailboxes,
                         AmkDiagEngine *diag) {
  if (!vm->tp_mailbox_bytes || size != vm->tp_size || rank < 0 || rank >= size ||
      size > AMK_CUDA_TP_MAX_RANKS) {
    amk_error(diag, no_loc(), "rank %d of %d does not fit a program of a %d-rank group", rank,
              size, vm->tp_size);
    return false;
  }
  /* The device's AmkTp (megakernel.cuh): the mailboxes, then rank, size. */
  struct {
    uint64_t mailbox[AMK_CUDA_TP_MAX_RANKS];
    int32_t rank, size;
  } tp;
  memset(&tp, 0, sizeof tp);
  for (int r = 0; r < size; r++)
    tp.mailbox[r] = mailboxes[r];
  tp.rank = rank;
  tp.size = size;
  CUdeviceptr global = 0;
  size_t bytes = 0;
  vm->drv.cuCtxSetCurrent(vm->ctx);
  if (!cu_ok(vm, vm->drv.cuModuleGetGlobal(&global, &bytes, vm->mod, "amk_tp"), "find amk_tp",
             diag))
    return false;
  if (bytes != sizeof tp) {
    amk_error(diag, no_loc(), "the megakernel's amk_tp is %zu bytes, not %zu", bytes, sizeof tp);
    return false;
  }
  /* Launch counts, flags and slots start at zero on every rank. */
  if (!cu_ok(vm, vm->drv.cuMemsetD8(mailboxes[rank], 0, vm->tp_mailbox_bytes), "zero mailbox",
             diag) ||
      !cu_ok(vm, vm->drv.cuMemcpyHtoD(global, &tp, sizeof tp), "write amk_tp", diag))
    return false;
  vm->tp_bound = true;
  return true;
}

AmkCudaStepStatus amk_cuda_vm_step(AmkCudaVm *vm, int32_t token, int64_t pos, float *kernel_ms,
                                   AmkDiagEngine *diag) {
  if (!step_args_ok(vm, &token, 1, pos, diag) || !queue_token(vm, token, pos, diag))
    return AMK_CUDA_STEP_ERROR;
  return launch_step(vm, pos, kernel_ms, diag);
}

AmkCudaStepStatus amk_cuda_vm_step_rows(AmkCudaVm *vm, const int32_t *tokens, int64_t n,
                                        int64_t pos, float *kernel_ms, AmkDiagEngine *diag) {
  if (vm->rows == 1 && n == 1)
    return amk_cuda_vm_step(vm, tokens[0], pos, kernel_ms, diag);
  if (!step_args_ok(vm, tokens, n, pos, diag))
    return AMK_CUDA_STEP_ERROR;
  vm->drv.cuCtxSetCurrent(vm->ctx);
  vm->host_flags[0] = 0;
  /* Row r's token, and its position pos + r when the pos buffer has one per
   * row (ROPE rotates row r by it), else the first position alone: what the
   * CPU VM's step_begin writes. */
  int32_t *ids = vm->rows_host, *positions = vm->rows_host + n;
  memcpy(ids, tokens, (size_t)n * sizeof *ids);
  for (int64_t r = 0; r < n; r++)
    positions[r] = (int32_t)(pos + r);
  size_t pos_bytes = vm->pos_buffer >= 0 ? vm->buf_bytes[vm->pos_buffer] : 0;
  if (pos_bytes > (size_t)n * sizeof *positions)
    pos_bytes = (size_t)n * sizeof *positions;
  if (pos_bytes < (size_t)n * sizeof *positions)
    pos_bytes = pos_bytes >= sizeof *positions ? sizeof *positions : 0;
  if (!cu_ok(vm, vm->drv.cuMemcpyHtoDAsync(vm->buf_addr[vm->token_buffer], ids,
                                           (size_t)n * sizeof *ids, vm->stream),
             "write tokens", diag) ||
      (pos_bytes && !cu_ok(vm, vm->drv.cuMemcpyHtoDAsync(vm->buf_addr[vm->pos_buffer], positions,
                                                         pos_bytes, vm->stream),
                           "write positions", diag)))
    return AMK_CUDA_STEP_ERROR;
  return launch_step(vm, pos, kernel_ms, diag);
}

const float *amk_cuda_vm_logit_rows(const AmkCudaVm *vm, size_t *rows, size_t *vocab) {
  *rows = (size_t)vm->logit_rows;
  *vocab = (size_t)vm->vocab;
  return vm->logits;
}

bool amk_cuda_vm_share_kv(AmkCudaVm *vm, const AmkCudaVm *from, AmkDiagEngine *diag) {
  for (uint32_t b = 0; b < vm->plan->n_buffers; b++) {
    if (vm->plan->buffers[b].kind != AMK_KIND_KV_CACHE)
      continue;
    if (vm->share != from || !vm->borrowed[b]) {
      amk_error(diag, no_loc(),
                "the programs do not share KV cache '%s': %s", vm->m->buffers[b].name,
                vm->share != from ? "the CUDA engine binds its caches when it is created (the "
                                    "engine option share_with), and this one was created on "
                                    "another engine's or its own"
                                  : "the other program has no KV cache of that name, size "
                                    "and dtype");
      return false;
    }
  }
  return true;
}

bool amk_cuda_vm_copy_kv_rows(AmkCudaVm *vm, const AmkCudaVm *from, const AmkKvRowCopy *copies,
                              uint32_t n, int64_t row_begin, int64_t row_end,
                              AmkDiagEngine *diag) {
  if (vm->dead || from->dead)
    return false;
  if (row_begin < 0 || row_end < row_begin) {
    amk_error(diag, no_loc(), "KV rows [%" PRId64 ", %" PRId64 ") are no range", row_begin,
              row_end);
    return false;
  }
  if (row_end == row_begin)
    return true;
  vm->drv.cuCtxSetCurrent(vm->ctx);
  for (uint32_t i = 0; i < n; i++) {
    const AmkKvRowCopy *c = &copies[i];
    bool in_range = c->to_buffer < vm->plan->n_buffers &&
                    c->from_buffer < from->plan->n_buffers && c->width > 0 &&
                    c->to_offset >= 0 && c->from_offset >= 0 &&
                    c->to_offset + c->width <= c->to_pitch &&
                    c->from_offset + c->width <= c->from_pitch;
    /* Both caches hold rows [0, row_end) whole. */
    if (!in_range || (int64_t)vm->buf_bytes[c->to_buffer] < row_end * c->to_pitch ||
        (int64_t)from->buf_bytes[c->from_buffer] < row_end * c->from_pitch) {
      amk_error(diag, no_loc(), "KV rows up to %" PRId64 " do not fit cache '%s' or '%s'",
                row_end,
                c->to_buffer < vm->plan->n_buffers ? vm->m->buffers[c->to_buffer].name : "?",
                c->from_buffer < from->plan->n_buffers ? from->m->buffers[c->from_buffer].name
                                                      : "?");
      return false;
    }
    AmkCudaMemcpy2D m = {
        .srcMemoryType = AMK_CU_MEMORYTYPE_DEVICE,
        .srcDevice = from->buf_addr[c->from_buffer] + (uint64_t)(row_begin * c->from_pitch +
                                                                 c->from_offset),
        .srcPitch = (size_t)c->from_pitch,
        .dstMemoryType = AMK_CU_MEMORYTYPE_DEVICE,
        .dstDevice = vm->buf_addr[c->to_buffer] + (uint64_t)(row_begin * c->to_pitch +
                                                            c->to_offset),
        .dstPitch = (size_t)c->to_pitch,
        .WidthInBytes = (size_t)c->width,
        .Height = (size_t)(row_end - row_begin)};
    if (!cu_ok(vm, vm->drv.cuMemcpy2DAsync(&m, vm->stream), "cuMemcpy2DAsync (KV rows)", diag))
      return false;
  }
  return cu_ok(vm, vm->drv.cuStreamSynchronize(vm->stream), "cuStreamSynchronize (KV rows)",
               diag);
}

/* Grows the device prompt array and the host-mapped produced array. */
static bool reserve_decode(AmkCudaVm *vm, int64_t n_feed, int64_t n_steps, AmkDiagEngine *diag) {
  if (!vm->decode_state) {
    if (!cu_ok(vm, vm->drv.cuMemAlloc(&vm->decode_state, 16), "cuMemAlloc(decode state)", diag))
      return false;
    for (int i = 0; i < GEN_IN_FLIGHT; i++)
      if (!cu_ok(vm, vm->drv.cuEventCreate(&vm->gen_start[i], AMK_CU_EVENT_DEFAULT),
                 "cuEventCreate", diag) ||
          !cu_ok(vm, vm->drv.cuEventCreate(&vm->gen_end[i], AMK_CU_EVENT_DEFAULT),
                 "cuEventCreate", diag))
        return false;
  }
  if ((size_t)n_feed > vm->feed_cap) {
    if (vm->decode_feed)
      vm->drv.cuMemFree(vm->decode_feed);
    vm->decode_feed = 0;
    vm->feed_cap = 0;
    if (!cu_ok(vm, vm->drv.cuMemAlloc(&vm->decode_feed, (size_t)n_feed * 4), "cuMemAlloc(prompt)",
               diag))
      return false;
    vm->feed_cap = (size_t)n_feed;
  }
  if ((size_t)n_steps > vm->produced_cap) {
    if (vm->produced)
      vm->drv.cuMemFreeHost(vm->produced);
    vm->produced = NULL;
    vm->produced_cap = 0;
    if (!cu_ok(vm, vm->drv.cuMemHostAlloc((void **)&vm->produced, (size_t)n_steps * 4,
                                          AMK_CU_MEMHOSTALLOC_DEVICEMAP),
               "cuMemHostAlloc(tokens)", diag) ||
        !cu_ok(vm, vm->drv.cuMemHostGetDevicePointer(&vm->produced_dev, vm->produced, 0),
               "cuMemHostGetDevicePointer(tokens)", diag))
      return false;
    vm->produced_cap = (size_t)n_steps;
  }
  return true;
}

AmkCudaStepStatus amk_cuda_vm_generate(AmkCudaVm *vm, const AmkCudaGenerate *g, double *kernel_ms,
                                       AmkDiagEngine *diag) {
  if (kernel_ms)
    *kernel_ms = 0;
  if (vm->dead) {
    amk_error(diag, no_loc(), "the GPU context is unusable after an earlier timeout");
    return AMK_CUDA_STEP_ERROR;
  }
  if (g->n_feed < 1 || g->n_steps < 1 || g->n_feed > INT32_MAX || g->n_steps > INT32_MAX ||
      g->pos < 0 || g->pos + g->n_steps > vm->max_seq) {
    amk_error(diag, no_loc(),
              "device decoding of %" PRId64 " steps from position %" PRId64 " (%" PRId64
              " prompt tokens) does not fit the KV cache of %" PRId64 " positions",
              g->n_steps, g->pos, g->n_feed, vm->max_seq);
    return AMK_CUDA_STEP_ERROR;
  }
  for (int64_t i = 0; i < g->n_feed; i++)
    if (g->feed[i] < 0 || g->feed[i] >= vm->vocab) {
      amk_error(diag, no_loc(), "token %d is outside the vocabulary [0, %" PRId64 ")",
                g->feed[i], vm->vocab);
      return AMK_CUDA_STEP_ERROR;
    }
  const AmkBuffer *tb = &vm->m->buffers[vm->token_buffer];
  const AmkBuffer *pb = vm->pos_buffer >= 0 ? &vm->m->buffers[vm->pos_buffer] : NULL;
  const AmkBuffer *lb = &vm->m->buffers[vm->logits_buffer];
  int64_t n_logits = 0;
  if (!amk_buffer_numel(lb, &n_logits) || (tb->dtype != AMK_DTYPE_I32 && tb->dtype != AMK_DTYPE_F32) ||
      (pb && pb->dtype != AMK_DTYPE_I32 && pb->dtype != AMK_DTYPE_F32) ||
      (lb->dtype != AMK_DTYPE_F32 && lb->dtype != AMK_DTYPE_BF16 &&
       lb->dtype != AMK_DTYPE_F16) ||
      n_logits != vm->vocab) {
    amk_error(diag, no_loc(), "device decoding needs i32 or f32 token and position buffers and "
                              "one row of f32, bf16 or f16 logits");
    return AMK_CUDA_STEP_ERROR;
  }
  vm->drv.cuCtxSetCurrent(vm->ctx);
  if (!reserve_decode(vm, g->n_feed, g->n_steps, diag))
    return AMK_CUDA_STEP_ERROR;
  for (int64_t i = 0; i < g->n_steps; i++)
    __atomic_store_n(&vm->produced[i], -1, __ATOMIC_RELAXED);
  uint32_t state[4] = {0, 0, (uint32_t)g->pos, 0};
  int32_t first = g->feed[0], pos32 = (int32_t)g->pos;
  float firstf = (float)first, posf = (float)pos32;
  vm->host_flags[0] = 0;
  if (!cu_ok(vm, vm->drv.cuMemcpyHtoD(vm->decode_feed, g->feed, (size_t)g->n_feed * 4),
             "write prompt", diag) ||
      !cu_ok(vm, vm->drv.cuMemcpyHtoD(vm->decode_state, state, sizeof state), "write state",
             diag) ||
      !cu_ok(vm, vm->drv.cuMemcpyHtoD(vm->buf_addr[vm->token_buffer],
                                      tb->dtype == AMK_DTYPE_I32 ? (const void *)&first
                                                                  : (const void *)&firstf,
                                      4),
             "write token", diag) ||
      (pb && !cu_ok(vm, vm->drv.cuMemcpyHtoD(vm->buf_addr[vm->pos_buffer],
                                             pb->dtype == AMK_DTYPE_I32 ? (const void *)&pos32
                                                                         : (const void *)&posf,
                                             4),
                    "write pos", diag)) ||
      !cu_ok(vm, vm->drv.cuMemsetD32(vm->counters, 0, (size_t)(vm->n_counters ? vm->n_counters : 1)),
             "zero counters", diag) ||
      !cu_ok(vm, vm->drv.cuMemsetD32(vm->status, 0, 8), "zero status", diag))
    return AMK_CUDA_STEP_ERROR;
  amk_decode_t D = {.state = vm->decode_state,
                    .feed = vm->decode_feed,
                    .produced = vm->produced_dev,
                    .n_feed = (int32_t)g->n_feed,
                    .n_steps = (int32_t)g->n_steps,
                    .token_buffer = vm->token_buffer,
                    .pos_buffer = vm->pos_buffer,
                    .logits_buffer = vm->logits_buffer};
  int pos_unused = 0;
  void *args[] = {&vm->prog, &pos_unused, &D};
  uint64_t trace = vm->prog.trace;
  vm->prog.trace = 0; /* one table of stamps cannot hold several queued launches */
  int64_t launched = 0, completed = 0, n_steps = g->n_steps;
  AmkCudaStepStatus st = AMK_CUDA_STEP_OK;
  double total_ms = 0;
  while (completed < n_steps) {
    while (launched < n_steps && launched - completed < GEN_IN_FLIGHT) {
      int slot = (int)(launched % GEN_IN_FLIGHT);
      if (!zero_accumulators(vm, diag)) {
        st = AMK_CUDA_STEP_ERROR;
        break;
      }
      vm->drv.cuEventRecord(vm->gen_start[slot], vm->stream);
      next_launch_tag(vm); /* the parameters are copied as the launch is queued */
      CUresult r = vm->drv.cuLaunchCooperativeKernel(vm->kernel, (unsigned)vm->grid, 1, 1,
                                                     (unsigned)vm->threads, 1, 1,
                                                     (unsigned)vm->smem, vm->stream, args);
      if (!cu_ok(vm, r, "cuLaunchCooperativeKernel", diag)) {
        st = AMK_CUDA_STEP_ERROR;
        break;
      }
      vm->drv.cuEventRecord(vm->gen_end[slot], vm->stream);
      launched++;
    }
    if (st != AMK_CUDA_STEP_OK)
      break;
    int slot = (int)(completed % GEN_IN_FLIGHT);
    int64_t pos = g->pos + completed;
    st = wait_launch(vm, vm->gen_end[slot], pos, false, diag);
    if (st != AMK_CUDA_STEP_OK)
      break;
    int32_t token = __atomic_load_n(&vm->produced[completed], __ATOMIC_ACQUIRE);
    if (token == -2) {
      amk_error(diag, no_loc(),
                "step %" PRId64 " (position %" PRId64 "): the logits are not all finite (NaN or "
                "Inf); the weights or the program produce non-finite values",
                completed, pos);
      st = AMK_CUDA_STEP_ERROR;
      break;
    }
    if (token < 0) {
      /* No block finished the step: read the status for the reason. */
      st = wait_launch(vm, NULL, pos, true, diag);
      if (st == AMK_CUDA_STEP_OK) {
        amk_error(diag, no_loc(), "the launch at position %" PRId64 " produced no token", pos);
        st = AMK_CUDA_STEP_ERROR;
      }
      break;
    }
    float ms = 0;
    vm->drv.cuEventElapsedTime(&ms, vm->gen_start[slot], vm->gen_end[slot]);
    total_ms += ms;
    completed++;
    if (g->on_token && !g->on_token(g->ctx, completed - 1, token))
      n_steps = launched; /* stop queueing; drain what is in flight */
  }
  if (st != AMK_CUDA_STEP_OK && !vm->dead)
    vm->drv.cuStreamSynchronize(vm->stream);
  vm->prog.trace = trace;
  if (kernel_ms)
    *kernel_ms = total_ms;
  return st;
}

const float *amk_cuda_vm_logits(const AmkCudaVm *vm, size_t *n) {
  *n = (size_t)vm->vocab;
  return vm->logits + (vm->logit_rows - 1) * vm->vocab; /* the last row's */
}

void amk_cuda_vm_set_tracing(AmkCudaVm *vm, bool on) { vm->prog.trace = on ? vm->trace : 0; }

bool amk_cuda_vm_trace(AmkCudaVm *vm, AmkTrace *out, AmkDiagEngine *diag) {
  if (!vm->trace) {
    amk_error(diag, no_loc(), "the GPU VM was created without tracing");
    return false;
  }
  if (vm->dead)
    return false;
  vm->drv.cuCtxSetCurrent(vm->ctx);
  if (!cu_ok(vm, vm->drv.cuMemcpyDtoH(vm->trace_host, vm->trace,
                                      vm->m->n_tasks * sizeof(amk_trace_t)),
             "read trace", diag))
    return false;
  *out = (AmkTrace){.m = vm->m, .block_of = vm->block_of, .stamps = vm->trace_host};
  return true;
}

bool amk_cuda_vm_reset(AmkCudaVm *vm, AmkDiagEngine *diag) {
  if (vm->dead)
    return false;
  vm->drv.cuCtxSetCurrent(vm->ctx);
  for (uint32_t b = 0; b < vm->m->n_buffers; b++)
    if (vm->m->buffers[b].kind == AMK_KIND_KV_CACHE && vm->buf_bytes[b] &&
        !cu_ok(vm, vm->drv.cuMemsetD8(vm->buf_addr[b], 0, vm->buf_bytes[b]), "clear KV", diag))
      return false;
  return true;
}

const char *amk_cuda_vm_describe(const AmkCudaVm *vm) { return vm->describe; }
int64_t amk_cuda_vm_weight_bytes(const AmkCudaVm *vm) { return vm->weight_bytes; }

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

double amk_cuda_vm_measure_read_bw(AmkCudaVm *vm, size_t bytes, int reps, AmkDiagEngine *diag) {
  if (vm->dead)
    return -1;
  if (bytes == 0)
    bytes = (size_t)1 << 30;
  bytes &= ~(size_t)15;
  if (reps < 3)
    reps = 3;
  vm->drv.cuCtxSetCurrent(vm->ctx);
  CUdeviceptr src = 0, sink = 0;
  float *times = amk_xcalloc((size_t)reps, sizeof *times);
  double gbs = -1;
  int per_sm = 0, n_sms = 0;
  if (!cu_ok(vm, vm->drv.cuMemAlloc(&src, bytes), "cuMemAlloc (bandwidth)", diag) ||
      !cu_ok(vm, vm->drv.cuMemAlloc(&sink, 16), "cuMemAlloc", diag) ||
      !cu_ok(vm, vm->drv.cuMemsetD32(src, 0x3f8ccccdu, bytes / 4), "cuMemsetD32", diag))
    goto done;
  vm->drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, vm->bw_kernel, vm->threads, 0);
  vm->drv.cuDeviceGetAttribute(&n_sms, AMK_CU_ATTR_MULTIPROCESSOR_COUNT, vm->dev);
  unsigned grid = (unsigned)((per_sm > 0 ? per_sm : 1) * (n_sms > 0 ? n_sms : 1));
  unsigned long long n16 = bytes / 16;
  void *args[] = {&src, &n16, &sink};
  for (int i = -2; i < reps; i++) {
    vm->drv.cuEventRecord(vm->ev0, vm->stream);
    if (!cu_ok(vm, vm->drv.cuLaunchKernel(vm->bw_kernel, grid, 1, 1, (unsigned)vm->threads, 1, 1,
                                          0, vm->stream, args, NULL),
               "launch amk_read_bw", diag))
      goto done;
    vm->drv.cuEventRecord(vm->ev1, vm->stream);
    if (!cu_ok(vm, vm->drv.cuEventSynchronize(vm->ev1), "bandwidth kernel", diag))
      goto done;
    float ms = 0;
    vm->drv.cuEventElapsedTime(&ms, vm->ev0, vm->ev1);
    if (i >= 0)
      times[i] = ms;
  }
  qsort(times, (size_t)reps, sizeof *times, cmp_float);
  if (times[reps / 2] > 0)
    gbs = (double)bytes / ((double)times[reps / 2] * 1e-3) / 1e9;
done:
  if (src)
    vm->drv.cuMemFree(src);
  if (sink)
    vm->drv.cuMemFree(sink);
  free(times);
  return gbs;
}

/* ---- the engine interface ------------------------------------------------------ */

static void *engine_create(const AmkPlan *plan, const AmkWeights *weights,
                           const AmkEngineOptions *opt, AmkDiagEngine *diag) {
  AmkCudaVmOptions copt = amk_cuda_vm_options_default();
  if (opt->timeout_ms > 0)
    copt.timeout_ms = opt->timeout_ms;
  copt.threads_per_block = opt->threads_per_block;
  copt.use_cache = opt->use_cache;
  copt.verbose = opt->verbose;
  copt.trace = opt->trace;
  copt.share = opt->share_self;
  return amk_cuda_vm_create(plan, weights, &copt, diag);
}

static void engine_destroy(void *self) { amk_cuda_vm_free(self); }

static AmkStepStatus engine_status(AmkCudaStepStatus st) {
  switch (st) {
  case AMK_CUDA_STEP_OK:
    return AMK_STEP_OK;
  case AMK_CUDA_STEP_TIMEOUT:
    return AMK_STEP_TIMEOUT;
  case AMK_CUDA_STEP_ERROR:
    return AMK_STEP_ERROR;
  }
  return AMK_STEP_ERROR;
}

static AmkStepStatus engine_step(void *self, int32_t token, int64_t pos, float *kernel_ms,
                                 AmkDiagEngine *diag) {
  return engine_status(amk_cuda_vm_step(self, token, pos, kernel_ms, diag));
}

static AmkStepStatus engine_generate(void *self, const AmkGenerate *g, double *kernel_ms,
                                     AmkDiagEngine *diag) {
  AmkCudaGenerate cg = {.feed = g->feed,
                        .n_feed = g->n_feed,
                        .pos = g->pos,
                        .n_steps = g->n_steps,
                        .on_token = g->on_token,
                        .ctx = g->ctx};
  return engine_status(amk_cuda_vm_generate(self, &cg, kernel_ms, diag));
}

static AmkStepStatus engine_step_rows(void *self, const int32_t *tokens, int64_t n, int64_t pos,
                                      AmkDiagEngine *diag) {
  return engine_status(amk_cuda_vm_step_rows(self, tokens, n, pos, NULL, diag));
}

static const float *engine_logit_rows(const void *self, size_t *rows, size_t *vocab) {
  return amk_cuda_vm_logit_rows(self, rows, vocab);
}

static bool engine_share_kv(void *self, const void *from, AmkDiagEngine *diag) {
  return amk_cuda_vm_share_kv(self, from, diag);
}

static bool engine_copy_kv_rows(void *self, const void *from, const AmkKvRowCopy *copies,
                                uint32_t n, int64_t row_begin, int64_t row_end,
                                AmkDiagEngine *diag) {
  return amk_cuda_vm_copy_kv_rows(self, from, copies, n, row_begin, row_end, diag);
}

static const float *engine_logits(const void *self, size_t *n) {
  return amk_cuda_vm_logits(self, n);
}

static bool engine_reset(void *self, AmkDiagEngine *diag) { return amk_cuda_vm_reset(self, diag); }

static const char *engine_describe(const void *self) { return amk_cuda_vm_describe(self); }

static double engine_read_bw(void *self, size_t bytes, int reps, AmkDiagEngine *diag) {
  return amk_cuda_vm_measure_read_bw(self, bytes, reps, diag);
}

static void engine_set_tracing(void *self, bool on) { amk_cuda_vm_set_tracing(self, on); }

static bool engine_trace(void *self, AmkTrace *out, AmkDiagEngine *diag) {
  return amk_cuda_vm_trace(self, out, diag);
}

const AmkEngineOps *amk_cuda_engine(void) {
  static const AmkEngineOps ops = {
      .name = "cuda",
      .create = engine_create,
      .destroy = engine_destroy,
      .step = engine_step,
      .logits = engine_logits,
      .reset = engine_reset,
      .measures_kernel_time = true,
      .describe = engine_describe,
      .measure_read_bw = engine_read_bw,
      .set_tracing = engine_set_tracing,
      .trace = engine_trace,
      .generate = engine_generate,
      .step_rows = engine_step_rows,
      .copy_kv_rows = engine_copy_kv_rows,
      .logit_rows = engine_logit_rows,
      .share_kv = engine_share_kv,
  };
  return &ops;
}
