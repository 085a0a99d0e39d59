/* The CUDA backend: codegen, NVRTC, the Driver API loader and the device VM.
 *
 * Nothing here needs the CUDA headers or libraries at build time: libcuda
 * (libcuda.so.1) and libnvrtc are opened with dlopen at run time, driver
 * entry points come from cuGetProcAddress, and every function fails with a
 * clear message (never a crash) when they are absent.
 *
 *   codegen   amk_cuda_codegen: CUDA C++ for one program (one device function
 *             per distinct op/pattern and compile-time shape, the dispatch,
 *             the counter protocol and the persistent megakernel).
 *   nvrtc     amk_nvrtc_compile: source -> cubin for an sm_XX, with an
 *             on-disk cache ($AMK_CACHE_DIR, default ~/.cache/amk).
 *   device    AmkCudaVm: run a plan (amk/plan.h) with its weights
 *             (amk/weights.h), uploaded straight from the loader, one
 *             cooperative kernel per decoded token, with a host watchdog;
 *             one of the engines of amk/engine.h (amk_cuda_engine).
 */
#ifndef AMK_BACKEND_H
#define AMK_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amk/abi.h"
#include "amk/diag.h"
#include "amk/engine.h"
#include "amk/io.h"
#include "amk/ir.h"
#include "amk/plan.h"
#include "amk/weights.h"

/* ---- launch-tagged transfers (backend/transfers.c) -------------------------- */

/* Which producer -> consumer hops of a decode program the device makes
 * through shadows rather than through the consumer's wait (docs/Backend.md,
 * "Launch-tagged transfers"): a producer also writes each element of its
 * output as one 8-byte word {value, launch tag} into a shadow no other
 * buffer shares; a consumer polls the words of that output it reads until
 * they carry this launch's tag, so it starts as soon as its own inputs have
 * landed. Its wait on the producers' counter moves to its signal (whatever
 * follows the consumer is still ordered after the producers), and it takes
 * the producers' own waits before it runs (whatever they had seen, it has
 * seen). A hop qualifies only where that leaves every access the consumer
 * makes ordered as it was: every input it reads directly and every page it
 * writes is reached from its new waits wherever it was from the old. */
typedef struct {
  uint8_t n_blocking, n_at_signal;
  uint32_t counter[AMK_MAX_WAITS], threshold[AMK_MAX_WAITS];
  uint32_t signal_counter[AMK_MAX_SIGNAL_WAITS], signal_threshold[AMK_MAX_SIGNAL_WAITS];
} AmkTransferWaits;

typedef struct {
  uint32_t n_tasks, n_buffers;
  bool *shadowed;         /* per buffer: its writers also write its shadow */
  bool *tagged_reads;     /* per task: reads its shadowed inputs through the shadows */
  AmkTransferWaits *waits; /* per task: the device's waits (the plan's where untouched) */
  uint32_t n_consumers;   /* tasks with tagged_reads */
  uint32_t n_hops;        /* (consumer, producer counter) pairs made tagged */
} AmkTransfers;

/* Decides the tagged hops of a plan (none for a prefill program, a list
 * that is not in dependency order, or with enable false: then every task
 * keeps its waits). Never fails. Free with amk_cuda_transfers_free. */
void amk_cuda_transfers_plan(const AmkPlan *plan, bool enable, AmkTransfers *out);
void amk_cuda_transfers_free(AmkTransfers *t);

/* ---- codegen ---------------------------------------------------------------- */

/* How the megakernel moves weights ahead of the waits (megakernel.cuh,
 * docs/Backend.md). */
typedef enum {
  AMK_WEIGHT_STREAM_DEFAULT = 0, /* bulk L2 prefetch */
  AMK_WEIGHT_STREAM_OFF,         /* only the per-thread L2 prefetch of the next task */
  AMK_WEIGHT_STREAM_L2,          /* bulk L2 prefetches of whole tiles, a budget ahead */
  AMK_WEIGHT_STREAM_RING,        /* bulk copies into a shared-memory ring */
  AMK_WEIGHT_STREAM_HYBRID,      /* small tiles into the ring whole, the rest to L2 */
} AmkWeightStream;

typedef struct {
  int threads_per_block; /* 0: the program's config, else 256 */
  AmkWeightStream weight_stream;
  int l2_ahead_kb;       /* L2: bytes per block prefetched ahead (0: 64 KiB) */
  int l2_hold_kb;        /* L2: nothing is prefetched past a tile of more weight KiB than
                          * this until it has run (0: off) */
  int mlp_head_kb;       /* L2: up to this many KiB of an mlp tile's first gate rows are
                          * copied into shared memory lookahead positions ahead (0: off) */
  int ring_slot_bytes;   /* ring: slot size (0: 16 KiB; at least the longest row) */
  int ring_slots;        /* ring: at most this many slots (0: as many as fit, up to 64) */
  bool override_lookahead; /* else the schedule's pipelining_depth */
  int lookahead;         /* instructions ahead of the running one */
  /* GEMV warps stream two rows at once: for rows of at most
   * gemv_pair_max_bytes (auto), always or never. */
  enum { AMK_GEMV_ROW_PAIRS_AUTO = 0, AMK_GEMV_ROW_PAIRS_ALWAYS, AMK_GEMV_ROW_PAIRS_NEVER }
      gemv_row_pairs;
  int wait_depth;        /* polls of a counter in flight at once (0: 1) */
  int wait_gap_ns;       /* time between two polls issued (0: 128 ns) */
  int wait_slow_after_ns; /* a wait polling this long polls every wait_slow_gap_ns (0: never) */
  int wait_slow_gap_ns;  /* that gap (0: 1024 ns) */
  bool no_wait_cache;    /* poll every wait's counter, even one already seen */
  bool gemv_xs_scalar;   /* GEMV inputs read from shared memory one float at a time */
  int gemv_pair_max_bytes; /* auto row pairs: rows of at most this (0: 2048) */
  int gemv_pair_min_rows; /* 1 + the fewest rows of a tile that takes longer rows in pairs
                           * (0: 128) */
  bool gemv_xs_unpadded; /* GEMV inputs staged without the 16-byte gap per piece */
  int kv_prefetch;       /* 1 + where attention tiles bring their KV rows into L2: 0 not at
                          * all, 1 at the tile's arrival, 2 with the weight stream, lookahead
                          * instructions ahead (0: the default, 2) */
  int attn_v_loads;      /* attention: value rows a thread loads at once, a power of two up
                          * to 16 (0: the default, 8) */
  int attn_o_stage_kb;   /* attention_o: KiB of shared memory for staged key rows, 8 to 192
                          * and at least 32 bytes a thread (0: the default, 64) */
  int qgemv_loads;      /* quantized GEMV: 16-byte loads per lane in flight (CUDA cores, 0: up
                         * to 8 of one row for i8, 4 for i4; set: several rows a warp up to
                         * that many) or in one unit (tensor cores, 0: up to 8) */
  int qgemv_stages;     /* quantized GEMV: pieces a lane copies ahead into shared memory
                         * (a power of two up to 64; 0: the default, 16; -1: none, the
                         * weights go to registers) */
  int qgemv_early;      /* 1 + its stages issued before the input is staged (0: the default, 1) */
  int qgemv_staged_kb;  /* the fewest weight KiB of a tile that takes the staged path (0: 384
                         * for i8, 128 for i4) */
  int qgemv_stage_rows; /* rows a warp streams through one stage, 1 or 2 (0: 1) */
  bool qgemv_mma;       /* quantized GEMV on the tensor cores (bf16/f16 inputs; slower in the
                         * megakernel so far: docs/Quantization.md) */
  bool no_qsplit_mma;   /* the split quantized GEMV's int4 dots on the CUDA cores, not the
                         * tensor cores (which take bf16/f16 inputs and groups of 128
                         * columns or a multiple) */
  bool no_qsplit_mma_i8; /* its int8 dots on the CUDA cores while the int4 ones take the
                          * tensor cores (AMK_CUDA_QSPLIT_MMA_I8=0) */
  enum {
    AMK_QGEMV_SPLIT_DEFAULT = 0, /* large */
    AMK_QGEMV_SPLIT_NONE,  /* no tile: per-warp rows (registers or the staged path) */
    AMK_QGEMV_SPLIT_LARGE, /* the tiles the staged path would take */
    AMK_QGEMV_SPLIT_ALL,   /* every tile of a shape it takes */
  } qgemv_split;        /* quantized GEMV tiles with K split over the block's warps, each
                         * thread's inputs in registers (AmkQSplit; rows of at most 8192
                         * int8 or int4 weights with 256 threads) */
  int qsplit_stages;    /* the split path's ring depth, a power of two (0: 4, halved to fit) */
  int qsplit_pieces;    /* the split path's pieces a thread a stage (0: 4) */
  bool silu_precise;    /* SiLU prologues with expf and an IEEE division (off: the default,
                         * the hardware's exp2 and reciprocal) */
  bool no_gemm_mma;     /* bf16/f16 GEMM tiles on the CUDA cores (the GEMV template) */
  int gemm_tile_n;      /* tensor-core GEMM sub-tile columns, 128 or 256 (0: 128) */
  int mlp_loads;        /* mlp tiles: down-projection loads per lane in flight (0: 16) */
  int mlp_gu_rows;      /* mlp tiles: gate|up rows a warp streams at once (0: 2 for rows of
                         * 8 KiB or more, else 1) */
  int mlp_prefetch_kb;  /* mlp tiles: 1 + the KiB of their down weights sent to L2 as they
                         * start (0: the default) */
  bool gemv_early;      /* small one-row GEMV tiles load their weights into registers before
                         * they stage the input (off: the default until measured) */
  bool attn_key_split;  /* attention's key pass: a key's 16-byte pieces over that many lanes,
                         * several keys a thread in flight (off: a key a thread, the default:
                         * docs/Performance.md, seventeenth session) */
  bool no_attn_k_stage; /* attention's key pass reads each key's row into registers (off:
                         * the default, the chunk's key rows are copied into shared memory
                         * with asynchronous copies first, one round trip) */
  bool no_norm_stage;   /* norm-fused decode tiles whose input is not of their norm weight's
                         * type load that weight after the norm's reduction (off: the default,
                         * the stream's pump copies it into shared memory during their waits) */
  bool gemv_mma;        /* decode GEMV tiles of at most 64 rows on the tensor cores
                         * (amk_gemv_rows_mma; off: the default, slower on an H100 so far:
                         * docs/Performance.md, twenty-first session) */
  bool tp_release_flags; /* cross-rank all-reduce: each flag a release store (off: the flags
                          * stored relaxed after the one system fence, the default) */
  bool trace_phases;    /* traced launches also stamp when a task's inputs are staged and
                         * its body done (amk_trace_t.staged, .body; off: a build without
                         * the stamps, the one that is measured) */
  int pump_warp;        /* 1 + the warp whose lane 0 moves weights ahead, 0 to 3 (0: the
                         * default, warp 1; warp 0 is thread 0, which polls the counters) */
  bool tagged;          /* launch-tagged transfers (AMK_CUDA_TAGGED=1; off by default: slower
                         * so far, docs/Performance.md, eighteenth session) */
  /* The tagged hops the kernel is built for (amk_cuda_transfers_plan on
   * the program's plan), or NULL: none. Consumers get variants that read
   * their shadowed inputs through the shadows. */
  const AmkTransfers *transfers;
} AmkCodegenOptions;

/* The most input rows a GEMV or GEMM tile that the tensor cores do not
 * take (f32 activations; docs/Backend.md) may have: a prefill program of
 * f32 on the GPU takes chunks of at most this many tokens. */
enum { AMK_CUDA_CORE_GEMM_MAX_ROWS = 64 };

/* Tuning from the environment, over *o: AMK_CUDA_STREAM (off, l2, ring or hybrid),
 * AMK_CUDA_L2_AHEAD_KB, AMK_CUDA_L2_HOLD_KB, AMK_CUDA_MLP_HEAD_KB (up to 200),
 * AMK_CUDA_RING_SLOT_BYTES, AMK_CUDA_RING_SLOTS,
 * AMK_CUDA_LOOKAHEAD, AMK_CUDA_GEMV_ROW_PAIRS (0 or 1), AMK_CUDA_WAIT_DEPTH (1 to 8),
 * AMK_CUDA_WAIT_GAP_NS, AMK_CUDA_WAIT_SLOW_AFTER_NS, AMK_CUDA_WAIT_SLOW_GAP_NS,
 * AMK_CUDA_WAIT_CACHE (0 or 1), AMK_CUDA_GEMV_XS_VEC (0 or 1),
 * AMK_CUDA_GEMV_PAIR_BYTES, AMK_CUDA_GEMV_XS_PAD (0 or 1), AMK_CUDA_KV_PREFETCH (0, 1 or 2),
 * AMK_CUDA_ATTN_V_LOADS (1, 2, 4, 8 or 16), AMK_CUDA_ATTN_O_STAGE_KB (8 to 192),
 * AMK_CUDA_QGEMV_LOADS, AMK_CUDA_QGEMV_STAGES (0: none, or a power of two up to 64),
 * AMK_CUDA_QGEMV_EARLY, AMK_CUDA_QGEMV_STAGED_KB, AMK_CUDA_QGEMV_STAGE_ROWS (1 or 2),
 * AMK_CUDA_QGEMV_MMA (0 or 1), AMK_CUDA_QSPLIT_MMA (0 or 1),
 * AMK_CUDA_GEMM_MMA (0 or 1), AMK_CUDA_GEMM_TILE_N (128 or 256), AMK_CUDA_GEMV_PAIR_MIN_ROWS,
 * AMK_CUDA_MLP_LOADS, AMK_CUDA_MLP_GU_ROWS (0 to 8), AMK_CUDA_MLP_PREFETCH_KB,
 * AMK_CUDA_TRACE_PHASES (0 or 1), AMK_CUDA_GEMV_EARLY (0 or 1),
 * AMK_CUDA_ATTN_KEY_SPLIT (0 or 1), AMK_CUDA_TP_RELAXED_FLAGS (0 or 1), AMK_CUDA_TAGGED (0 or 1),
 * AMK_CUDA_PUMP_WARP (0 to 3), AMK_CUDA_ATTN_K_STAGE (0 or 1), AMK_CUDA_GEMV_MMA (0 or 1),
 * AMK_CUDA_NORM_STAGE (0 or 1) and AMK_CUDA_THREADS (128, 256, 512 or 1024 threads per block). False after
 * reporting a value it cannot use. */
bool amk_codegen_options_from_env(AmkCodegenOptions *o, AmkDiagEngine *diag);

typedef struct {
  char *source;           /* malloc'd CUDA C++ */
  int n_variants;         /* distinct device functions */
  int threads_per_block;
  size_t smem_bytes;      /* dynamic shared memory the kernel needs */
  int32_t *variant_of;    /* malloc'd, per task (list position) */
  int tp_size;            /* a rank program's group size (0: no cross-rank all-reduce) */
  size_t tp_mailbox_bytes; /* then the bytes of each rank's mailbox (amk_allreduce_tp) */
  char *error;            /* malloc'd message when codegen fails */
} AmkCodegen;

/* Generates the megakernel source for a program (it need not be validated;
 * unsupported ops or shapes fail with a message naming the task). Returns
 * false after reporting through diag. Free with amk_cuda_codegen_free. */
bool amk_cuda_codegen(const AmkModule *m, const AmkCodegenOptions *opt,
                      AmkCodegen *out, AmkDiagEngine *diag);
void amk_cuda_codegen_free(AmkCodegen *cg);

/* The embedded text of include/amk/tables.h and include/amk/abi.h (the
 * generated source pastes them). */
const char *amk_cuda_embedded_tables_h(void);
const char *amk_cuda_embedded_abi_h(void);

/* ---- NVRTC ------------------------------------------------------------------ */

/* True when libnvrtc can be opened; *why (may be NULL) gets the reason
 * otherwise. */
bool amk_nvrtc_available(char *why, size_t why_len);

/* Compiles `source` to a cubin for `arch` ("sm_90"). With use_cache the
 * cubin is looked up in / written to the cache directory, keyed by the
 * SHA-256 of source, options, and the NVRTC, driver and ABI versions. On an NVRTC error the log is
 * printed with the offending generated source lines. *cubin is malloc'd. */
bool amk_nvrtc_compile(const char *source, const char *arch, bool use_cache,
                       void **cubin, size_t *cubin_size, AmkDiagEngine *diag);

/* The cubin cache (backend/cubin_cache.c). A key is the SHA-256 of a list
 * of strings (the source, the NVRTC options, the NVRTC, driver and ABI
 * versions), each hashed with its length. A cached file holds the key it
 * was stored under and the cubin's own SHA-256; a load checks both and
 * returns NULL (a miss: compile again) on any mismatch, truncation or
 * corruption. */
enum { AMK_CUBIN_KEY_BYTES = 32 };
typedef struct {
  uint8_t bytes[AMK_CUBIN_KEY_BYTES];
} AmkCubinKey;
void amk_cubin_cache_key(const char *const *parts, size_t n_parts, AmkCubinKey *key);
void amk_cubin_key_hex(const AmkCubinKey *key, char hex[2 * AMK_CUBIN_KEY_BYTES + 1]);
/* DIR/<hex key>.cubin */
void amk_cubin_cache_path(const char *dir, const AmkCubinKey *key, char *buf, size_t len);
/* The cubin (malloc'd) stored under `key` at `path`, or NULL. */
void *amk_cubin_cache_load(const char *path, const AmkCubinKey *key, size_t *cubin_size);
/* Stores the cubin under `key` in `dir` (created if missing), atomically. */
bool amk_cubin_cache_store(const char *dir, const AmkCubinKey *key, const void *cubin,
                           size_t size);

/* The cache directory in use ($AMK_CACHE_DIR, else $XDG_CACHE_HOME/amk,
 * else $HOME/.cache/amk), written into buf. */
void amk_nvrtc_cache_dir(char *buf, size_t len);

/* ---- the device ----------------------------------------------------------- */

/* True when libcuda loads, initialises and shows at least one GPU; *why
 * gets the reason otherwise ("libcuda.so.1 not found", "no CUDA device"). */
bool amk_cuda_available(char *why, size_t why_len);

typedef struct AmkCudaVm AmkCudaVm;

/* ---- launch traces ---------------------------------------------------------- */

/* One launch, stamped per instruction (list position t): block_of[t] the
 * block whose queue ran it, stamps[t] when the block reached it, when its
 * waits held and when it signalled (ns; zeros: never reached). */
typedef struct AmkTrace {
  const AmkModule *m;
  const int32_t *block_of;
  const amk_trace_t *stamps;
} AmkTrace;

/* Chrome trace-event JSON (chrome://tracing, ui.perfetto.dev): one track per
 * block, a `wait` slice before each task that waited, the tasks of the
 * critical chain in category "critical". */
void amk_trace_chrome_json(const AmkTrace *t, AmkStrBuf *out);
/* The critical chain, oldest first: from the task that signalled last, back
 * through whichever of each task's queue predecessor or the producers of its
 * waited counters finished last. chain holds n_tasks entries; returns the
 * length. */
size_t amk_trace_critical_chain(const AmkTrace *t, uint32_t *chain);
/* A text report: span, block occupancy, the critical chain's split between
 * running and waiting, and per kind of task (label without `L<n>.` and
 * `[...]`) the run and wait times. */
void amk_trace_report(const AmkTrace *t, AmkStrBuf *out);

typedef struct {
  double timeout_ms;  /* host watchdog per launch (0: 10000) */
  int threads_per_block; /* 0: default */
  bool use_cache;     /* NVRTC cubin cache (default true via amk_cuda_vm_options_default) */
  bool verbose;       /* print device, grid and compile facts to stderr */
  bool trace;         /* stamp every instruction of every launch (amk_cuda_vm_trace) */
  /* A VM over the decode program of the same model (a prefill program's
   * VM): its WEIGHT/CONST buffers of the same source (amk_weights_source_in)
   * and its KV caches of the same name, size and dtype are used in place,
   * not allocated or uploaded again. It must outlive this VM. */
  const struct AmkCudaVm *share;
  int device; /* the GPU's ordinal (0: the first) */
  bool tp_member; /* a rank program is accepted (amk_cuda_group_engine's) */
} AmkCudaVmOptions;

AmkCudaVmOptions amk_cuda_vm_options_default(void);

/* Generates, compiles and loads the plan's program on GPU 0 and uploads
 * the WEIGHT and CONST bytes of `weights` (read once here: the weights may
 * be freed afterwards; the plan must outlive the VM). NULL after
 * reporting. */
AmkCudaVm *amk_cuda_vm_create(const AmkPlan *plan, const AmkWeights *weights,
                              const AmkCudaVmOptions *opt, AmkDiagEngine *diag);
void amk_cuda_vm_free(AmkCudaVm *vm);

typedef enum {
  AMK_CUDA_STEP_OK = 0,
  AMK_CUDA_STEP_ERROR = 1,   /* a driver or device-reported error */
  AMK_CUDA_STEP_TIMEOUT = 2, /* the watchdog aborted the launch */
} AmkCudaStepStatus;

/* One decode step on the GPU: token at position pos. kernel_ms (may be
 * NULL) receives the kernel time measured with CUDA events. */
AmkCudaStepStatus amk_cuda_vm_step(AmkCudaVm *vm, int32_t token, int64_t pos,
                                   float *kernel_ms, AmkDiagEngine *diag);
/* One step of a prefill program (its plan's rows > 1 tokens at positions
 * pos..pos+n-1, n = rows); amk_cuda_vm_logit_rows then holds every logits
 * row the program writes (amk_cuda_vm_logits the last). */
AmkCudaStepStatus amk_cuda_vm_step_rows(AmkCudaVm *vm, const int32_t *tokens, int64_t n,
                                        int64_t pos, float *kernel_ms, AmkDiagEngine *diag);
const float *amk_cuda_vm_logit_rows(const AmkCudaVm *vm, size_t *rows, size_t *vocab);
/* Whether vm runs on from's KV caches: a VM binds them when it is created
 * with AmkCudaVmOptions.share = from (no copy); false after reporting
 * otherwise, naming the cache. */
bool amk_cuda_vm_share_kv(AmkCudaVm *vm, const AmkCudaVm *from, AmkDiagEngine *diag);
/* Rows [row_begin, row_end) of from's KV caches into vm's, piece by piece
 * (copies: plan buffer indices, byte pitches and offsets), device to device
 * on vm's stream; returns when they are done. Both VMs in one context (a
 * prefill VM created on the decode VM). False after reporting. */
bool amk_cuda_vm_copy_kv_rows(AmkCudaVm *vm, const AmkCudaVm *from, const AmkKvRowCopy *copies,
                              uint32_t n, int64_t row_begin, int64_t row_end,
                              AmkDiagEngine *diag);
/* Greedy decoding on the device with no host round trip per token: launch
 * i runs at position pos + i; while the prompt lasts the next token is
 * feed[i + 1], after it the argmax of launch i's logits, which the device
 * writes into the token buffer itself. Up to a few launches are queued
 * ahead; on_token (may be NULL) sees each launch's argmax as it completes
 * and returns false to stop (launches already queued still run). The logits
 * are not copied back (amk_cuda_vm_logits is stale afterwards). kernel_ms
 * receives the summed launch times. */
typedef struct {
  const int32_t *feed;
  int64_t n_feed; /* >= 1: feed[0] is the first launch's token */
  int64_t pos;
  int64_t n_steps;
  bool (*on_token)(void *ctx, int64_t step, int32_t token);
  void *ctx;
} AmkCudaGenerate;
AmkCudaStepStatus amk_cuda_vm_generate(AmkCudaVm *vm, const AmkCudaGenerate *g, double *kernel_ms,
                                       AmkDiagEngine *diag);
/* The logits of the last step as fp32. */
const float *amk_cuda_vm_logits(const AmkCudaVm *vm, size_t *n);
/* A VM created with `trace` stamps every launch; this pauses (false) and
 * resumes (true) the stamping, so timed launches can run without it. */
void amk_cuda_vm_set_tracing(AmkCudaVm *vm, bool on);
/* The trace of the last launch of a VM created with `trace` (copied from
 * the device; valid until the next step or free). False after reporting. */
bool amk_cuda_vm_trace(AmkCudaVm *vm, AmkTrace *out, AmkDiagEngine *diag);
/* Clears the KV caches. */
bool amk_cuda_vm_reset(AmkCudaVm *vm, AmkDiagEngine *diag);
/* A line describing the device and launch ("NVIDIA H200 sm_90, 132 blocks x
 * 256 threads, ..."). */
const char *amk_cuda_vm_describe(const AmkCudaVm *vm);
/* Bytes of WEIGHT buffers (what one token must read). */
int64_t amk_cuda_vm_weight_bytes(const AmkCudaVm *vm);
/* Measures the card's read bandwidth in GB/s with a read-only kernel over
 * `bytes` (0: 1 GiB), median of `reps` runs. Returns <= 0 on failure. */
double amk_cuda_vm_measure_read_bw(AmkCudaVm *vm, size_t bytes, int reps,
                                   AmkDiagEngine *diag);

/* ---- a tensor-parallel group (backend/cuda_group.c) ---------------------------- */

/* Each rank's VM, created on its own GPU (AmkCudaVmOptions.device), is
 * driven by the group: the launches of one step go out on every GPU before
 * any is waited for, since each rank's all-reduces wait for the others'. */
enum { AMK_CUDA_TP_MAX_RANKS = 64 };
/* Queues one decode step (token at pos) without waiting for it. */
AmkCudaStepStatus amk_cuda_vm_step_launch(AmkCudaVm *vm, int32_t token, int64_t pos,
                                          AmkDiagEngine *diag);
/* Waits for the step amk_cuda_vm_step_launch queued (the watchdog as
 * amk_cuda_vm_step's), then reads its logits back. */
AmkCudaStepStatus amk_cuda_vm_step_finish(AmkCudaVm *vm, int64_t pos, float *kernel_ms,
                                          AmkDiagEngine *diag);
/* Raises the launch's host abort flag (a peer rank failed): its waits stop
 * within the watchdog's poll. */
void amk_cuda_vm_raise_abort(AmkCudaVm *vm);
/* The bytes of the mailbox a rank program's all-reduces need (0: not a
 * rank program). */
size_t amk_cuda_vm_tp_mailbox_bytes(const AmkCudaVm *vm);
/* Makes the VM's context current to the calling thread (for NCCL's calls
 * on its GPU). */
bool amk_cuda_vm_make_current(AmkCudaVm *vm, AmkDiagEngine *diag);
/* Binds the VM to rank `rank` of `size`: mailboxes[r] is rank r's mailbox
 * (device addresses this GPU can load from and store to, each
 * amk_cuda_vm_tp_mailbox_bytes long); zeroes its own. False after
 * reporting. */
bool amk_cuda_vm_tp_bind(AmkCudaVm *vm, int rank, int size, const uint64_t *mailboxes,
                         AmkDiagEngine *diag);
/* The group as an engine: AmkEngineOptions.tp_plans, tp_weights and
 * tp_size give the ranks (rank r on GPU r); NCCL bootstraps the group and
 * allocates the mailboxes (ncclMemAlloc, registered as a symmetric
 * window). Rank 0's logits are the group's. */
const AmkEngineOps *amk_cuda_group_engine(void);

/* The CUDA VM as an engine (amk_engine_create); AmkEngineOptions carry the
 * AmkCudaVmOptions fields (0 fields take the defaults above). */
const AmkEngineOps *amk_cuda_engine(void);

#endif
