/* The on-device ABI: the PODs a megakernel reads (AMK-REFERENCE.md §6).
 *
 * Usable from C11 (the host loader) and from CUDA C++ (the generated
 * megakernel source pastes this header and tables.h verbatim, so NVRTC
 * compiles exactly these layouts). Every code and capacity comes from the
 * X-macro tables of tables.h, so nothing here can drift from the IR; the
 * sizes are pinned by static assertions on both sides and by
 * test/unit/test_abi.c (which also compiles the layout checks with NVRTC
 * when it is present).
 *
 * Device pointers are stored as uint64_t so that the host and device views
 * of a struct are byte-identical.
 */
#ifndef AMK_ABI_H
#define AMK_ABI_H

#if defined(__CUDACC_RTC__)
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#define AMK_ABI_STATIC_ASSERT(c, m) static_assert(c, m)
#define AMK_ABI_NO_OFFSETOF 1 /* NVRTC has no offsetof without headers */
#else
#include <stddef.h>
#include <stdint.h>
#if defined(__cplusplus)
#define AMK_ABI_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define AMK_ABI_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif
#define AMK_ABI_OFFSETOF(t, f) offsetof(t, f)
#endif

#ifndef AMK_TABLES_H
#include "amk/tables.h"
#endif

/* ---- codes (generated from tables.h) ------------------------------------ */

typedef enum {
#define X(name, code, text, bits) AMK_ABI_DTYPE_##name = code,
  AMK_DTYPES(X)
#undef X
} amk_dtype_t;

typedef enum {
#define X(name, code, text, onchip) AMK_ABI_SPACE_##name = code,
  AMK_MEMSPACES(X)
#undef X
} amk_memspace_t;

typedef enum {
#define X(name, code, text, mi, ma, no, req) AMK_ABI_OP_##name = code,
  AMK_OPS(X)
#undef X
} amk_opcode_t;

/* Fused GEMV patterns (flags >> AMK_PATTERN_SHIFT). */
typedef enum {
#define X(name, id, text, inputs, desc) AMK_ABI_PATTERN_##name = id,
  AMK_GEMV_PATTERNS(X)
#undef X
} amk_pattern_t;

/* Params slot indices, in amk_params_t order. */
enum {
#define X(name, type) AMK_ABI_PARAM_##name,
  AMK_PARAMS(X)
#undef X
  AMK_ABI_PARAM_COUNT
};

/* ---- PODs ---------------------------------------------------------------- */

/* One 4-byte slot per AMK_PARAMS field: .i for an 'i' field, .f for an 'f'
 * field (the 19 int32 fields first, then eps, scale, theta). */
typedef union {
  int32_t i;
  float f;
} amk_param_slot_t;

typedef struct {
#define X(name, type) amk_param_slot_t name;
  AMK_PARAMS(X)
#undef X
} amk_params_t;

typedef uint32_t amk_counter_t;

typedef struct {
  uint64_t ptr; /* device address, already offset for paged activations */
  int64_t numel;
  int32_t rank;
  int32_t dtype; /* amk_dtype_t */
  int32_t space; /* amk_memspace_t */
  int32_t pad;
  int64_t shape[AMK_MAX_RANK];
  int64_t stride[AMK_MAX_RANK]; /* row-major element strides */
} amk_buffer_t;

typedef struct {
  int32_t op; /* amk_opcode_t */
  int32_t n_inputs, n_outputs, n_waits;
  int32_t inputs[AMK_MAX_INPUTS];   /* buffer table indices */
  int32_t outputs[AMK_MAX_OUTPUTS]; /* buffer table indices */
  int32_t wait_counter[AMK_MAX_WAITS];
  int32_t wait_threshold[AMK_MAX_WAITS];
  int32_t out_counter;
  int32_t sm; /* >= 0 */
  amk_params_t params;
} amk_instruction_t;

/* ---- backend extensions (not part of the reference ABI) ---------------- */

/* How an instruction's params follow the decode step's position (the
 * reference VM's rules, docs/Runtime.md). */
enum {
  AMK_FOLLOW_NONE = 0,
  AMK_FOLLOW_KV_ROW = 1,    /* KV_APPEND / rope_kv: write row pos */
  AMK_FOLLOW_WINDOW = 2,    /* attention over [0, pos] */
  AMK_FOLLOW_PARTITION = 3, /* split-KV: partition p of P of [0, pos] */
};

/* The most waits a task defers to its signal (amk_inst_aux_t). */
#define AMK_MAX_SIGNAL_WAITS 2

/* Per-instruction data the generated kernel needs beside the ABI record. */
typedef struct {
  int32_t variant;  /* which generated device function runs it */
  int32_t follow;   /* AMK_FOLLOW_* */
  int32_t span;     /* AMK_FOLLOW_PARTITION without a combine: compiled rows */
  int32_t part_index; /* AMK_FOLLOW_PARTITION: input index in its combine */
  int32_t part_count; /*   and the combine's input count (0: no combine) */
  int32_t combine_follows; /* AmkPlanTask.combine_follows: empty partitions skipped */
  uint64_t inv_freq;       /* device float[head_dim/2] for ROPE, or 0 */
  uint64_t prefetch_ptr;   /* weight bytes to stream into L2 ahead of the waits */
  int64_t prefetch_bytes;
  /* Device addresses of the inputs, then of the outputs (the buffer
   * table's ptr, resolved by the host): a block stages this record in
   * shared memory ahead of its turn, so a task reaches its data with no
   * chain of dependent loads through the tables. */
  uint64_t io[AMK_MAX_INPUTS + AMK_MAX_OUTPUTS];
  /* Launch-tagged transfers (docs/Backend.md): the shadow of an input the
   * task reads through one, and of the output it also writes one of, as
   * io is laid out (0: none). Each element of a shadow is one 8-byte word,
   * its value as f32 bits in the low half and the launch's tag in the high. */
  uint64_t shadow[AMK_MAX_INPUTS + AMK_MAX_OUTPUTS];
  /* Waits that hold before the task signals rather than before it runs:
   * the counters of the producers it reads through shadows. */
  int32_t n_signal_waits;
  int32_t signal_wait_counter[AMK_MAX_SIGNAL_WAITS];
  int32_t signal_wait_threshold[AMK_MAX_SIGNAL_WAITS];
  int32_t pad[3];
} amk_inst_aux_t;

/* Device status words (host-mapped memory). */
enum {
  AMK_STATUS_OK = 0,
  AMK_STATUS_ABORTED = 1, /* the host watchdog raised the abort flag */
  AMK_STATUS_INDEX = 2,   /* a data-dependent index out of range */
  AMK_STATUS_SHAPE = 3,   /* a shape the variant was not compiled for */
  AMK_STATUS_SPIN = 4,    /* a wait exceeded the device spin budget */
};

/* The program tables, resolved by the host loader before launch. */
typedef struct {
  uint64_t buffers;      /* amk_buffer_t[n_buffers] */
  uint64_t counters;     /* amk_counter_t[n_counters], zeroed per step */
  uint64_t instructions; /* amk_instruction_t[n_instructions] */
  uint64_t aux;          /* amk_inst_aux_t[n_instructions] */
  uint64_t queue_offsets; /* int32[n_queues + 1]: block b runs */
  uint64_t queue;         /*   queue[queue_offsets[b] .. queue_offsets[b+1]) */
  uint64_t abort_flag;    /* volatile uint32, host-mapped: the host watchdog's */
  uint64_t status;        /* uint32[8] in device memory: code, instruction, a, b,
                             device abort (set with the first error) */
  int32_t n_buffers, n_counters, n_instructions, n_queues;
  int64_t spin_limit_ns; /* a wait longer than this raises AMK_STATUS_SPIN */
  uint64_t trace;        /* amk_trace_t[n_instructions], or 0: no tracing */
  /* This launch's tag, never 0 and never that of the launch before (the
   * host counts launches): a shadow word written in this launch carries it. */
  uint32_t launch_tag;
  int32_t pad;
} amk_program_t;

/* One instruction's times in one launch (%globaltimer, ns), written by the
 * block that ran it when the program's trace table is set. */
typedef struct {
  uint64_t arrive; /* its block reached it (weights prefetch issued) */
  uint64_t start;  /* every wait held */
  uint64_t end;    /* signalled */
  /* With AMK_TRACE_PHASES only (else 0): thread 0 had the task's inputs
   * staged (GEMV, mlp, quantized GEMV and combine tiles: after the fused
   * prologue's barrier; attention: the query rotated), and had finished
   * the task's body (before the signal's barrier); and, in the tiles that
   * stream their weights through a loop after preparing their inputs (the
   * quantized GEMV's staged and split paths: thread 0 at its loop's start,
   * and at its end once every warp's is over on the split path; attention_o:
   * its o rows, after the attention; split_down's mlp tile: its down rows,
   * after gate|up and SiLU), that loop's start and end. */
  uint64_t staged;
  uint64_t body;
  uint64_t loop;
  uint64_t looped;
} amk_trace_t;

/* Decoding on the device (a backend extension, passed to the megakernel by
 * value; state 0: the host drives each step). The last block to finish a
 * launch takes the greedy argmax of the logits, records it in produced[step],
 * writes the next token (feed[step + 1] while the prompt lasts, else the
 * argmax) and position into the IO buffers, zeroes the counters and
 * advances the step, so the next launch can follow without the host. */
typedef struct {
  uint64_t state;    /* uint32[4] in device memory: blocks done, step, pos, pad */
  uint64_t feed;     /* int32[n_feed] in device memory: the prompt */
  uint64_t produced; /* int32[n_steps], host-mapped: each step's argmax */
  int32_t n_feed, n_steps;
  int32_t token_buffer, pos_buffer, logits_buffer; /* buffer table indices (-1: none) */
  int32_t pad;
} amk_decode_t;

/* ---- layout pins (AMK-REFERENCE §6) ------------------------------------ */

AMK_ABI_STATIC_ASSERT(sizeof(amk_params_t) == 88, "amk_params_t is 88 bytes");
AMK_ABI_STATIC_ASSERT(sizeof(amk_buffer_t) == 96, "amk_buffer_t is 96 bytes");
AMK_ABI_STATIC_ASSERT(sizeof(amk_instruction_t) == 224,
                      "amk_instruction_t is 224 bytes");
AMK_ABI_STATIC_ASSERT(sizeof(amk_inst_aux_t) == 272, "amk_inst_aux_t is 272 bytes");
AMK_ABI_STATIC_ASSERT(sizeof(amk_program_t) == 104, "amk_program_t is 104 bytes");
AMK_ABI_STATIC_ASSERT(sizeof(amk_trace_t) == 56, "amk_trace_t is 56 bytes");
AMK_ABI_STATIC_ASSERT(sizeof(amk_decode_t) == 48, "amk_decode_t is 48 bytes");
#ifndef AMK_ABI_NO_OFFSETOF
AMK_ABI_STATIC_ASSERT(AMK_ABI_OFFSETOF(amk_params_t, eps) == 76,
                      "eps follows the 19 int32 fields");
AMK_ABI_STATIC_ASSERT(AMK_ABI_OFFSETOF(amk_params_t, theta) == 84,
                      "theta is the last field");
AMK_ABI_STATIC_ASSERT(AMK_ABI_OFFSETOF(amk_buffer_t, shape) == 32,
                      "amk_buffer_t.shape at 32");
AMK_ABI_STATIC_ASSERT(AMK_ABI_OFFSETOF(amk_instruction_t, params) == 136,
                      "amk_instruction_t.params at 136");
#endif

#endif
