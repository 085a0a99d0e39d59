/* The in-memory IR of an AMK megakernel schedule.
 *
 * One Module type at every stage of the pipeline. Records are plain structs
 * (QBE style) whose storage lives in the module's arena; variable-length
 * arrays are arena slices. Fields whose JSON type the reference accepts
 * loosely (wait thresholds, shape dims, params, meta) are AmkValue so a
 * program that the reference loads can be loaded, reported on and written
 * back byte for byte; the verifier and validator judge their types.
 */
#ifndef AMK_IR_H
#define AMK_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amk/diag.h"
#include "amk/tables.h"

/* ---- enumerations, generated from tables.h ---------------------------- */

typedef enum {
#define X(name, code, text, bits) AMK_DTYPE_##name = code,
  AMK_DTYPES(X)
#undef X
  AMK_DTYPE_COUNT
} AmkDType;

typedef enum {
#define X(name, code, text, onchip) AMK_SPACE_##name = code,
  AMK_MEMSPACES(X)
#undef X
  AMK_SPACE_COUNT
} AmkMemSpace;

typedef enum {
#define X(name, code, text, ro) AMK_KIND_##name = code,
  AMK_BUFFER_KINDS(X)
#undef X
  AMK_KIND_COUNT
} AmkBufferKind;

typedef enum {
#define X(name, code, text, mi, ma, no, req) AMK_OP_##name = code,
  AMK_OPS(X)
#undef X
  AMK_OP_COUNT
} AmkOp;

typedef enum {
#define X(name, type) AMK_PARAM_##name,
  AMK_PARAMS(X)
#undef X
  AMK_PARAM_COUNT
} AmkParamField;

typedef enum {
#define X(name, text) AMK_PAGES_##name,
  AMK_PAGE_POLICIES(X)
#undef X
  AMK_PAGES_COUNT
} AmkPagePolicy;

typedef enum {
#define X(name, text) AMK_SM_##name,
  AMK_SM_POLICIES(X)
#undef X
  AMK_SM_COUNT
} AmkSmPolicy;

typedef enum {
#define X(name, id, text, inputs, desc) AMK_PATTERN_##name = id,
  AMK_GEMV_PATTERNS(X)
#undef X
  AMK_PATTERN_COUNT
} AmkGemvPattern;

/* ---- table queries (ir/tables.c) --------------------------------------- */

/* Upper-case JSON names ("GEMV_TILE") and lower-case text names ("gemv_tile").
 * Lookups return -1 for an unknown name. */
const char *amk_dtype_json_name(AmkDType d);
const char *amk_dtype_text_name(AmkDType d);
int amk_dtype_from_json_name(const char *s);
int amk_dtype_from_text_name(const char *s);
int amk_dtype_bits(AmkDType d);
/* ceil(count * bits / 8) */
int64_t amk_dtype_nbytes(AmkDType d, int64_t count);

const char *amk_space_json_name(AmkMemSpace s);
const char *amk_space_text_name(AmkMemSpace s);
int amk_space_from_json_name(const char *s);
int amk_space_from_text_name(const char *s);
bool amk_space_is_on_chip(AmkMemSpace s);

const char *amk_kind_json_name(AmkBufferKind k);
const char *amk_kind_text_name(AmkBufferKind k);
int amk_kind_from_json_name(const char *s);
int amk_kind_from_text_name(const char *s);
bool amk_kind_is_read_only(AmkBufferKind k);

typedef struct {
  const char *json_name; /* "GEMV_TILE" */
  const char *text_name; /* "gemv_tile" */
  int min_inputs;
  int max_inputs; /* -1: variadic (still capped by AMK_MAX_INPUTS) */
  int n_outputs;
  uint32_t required_params; /* AMK_PARAM_BIT mask | AMK_REQ_RECIPE */
} AmkOpInfo;

/* A GEMV's `qdtype` param names its weight-only format by dtype code:
 * int8 weights are I8, int4 weights I4 (docs/Quantization.md). */
#define AMK_QDTYPE_INT8 AMK_DTYPE_I8
#define AMK_QDTYPE_INT4 AMK_DTYPE_I4

const AmkOpInfo *amk_op_info(AmkOp op);
int amk_op_from_json_name(const char *s);
int amk_op_from_text_name(const char *s);

const char *amk_param_name(AmkParamField p);
char amk_param_type(AmkParamField p); /* 'i' or 'f' */
int amk_param_from_name(const char *s); /* -1 when not a marshalled field */

/* The fused pattern of a GEMV_TILE task's flags, its text name ("norm") and
 * its inputs ("x, W, g"); NULL for an id outside the table. */
const char *amk_gemv_pattern_name(int64_t pattern);
const char *amk_gemv_pattern_inputs(int64_t pattern);
int amk_gemv_pattern_from_name(const char *s);

/* The most inputs a task of `op` may read, given its flags param (0 when it
 * has none): the op table's max_inputs (-1: variadic), except that a
 * GEMV_TILE of pattern combine_residual reads its split-KV partials besides
 * W and r, up to AMK_MAX_INPUTS. Every arity check (verify, validate, the
 * kernels' dispatch) asks here. */
int amk_op_max_inputs(AmkOp op, int64_t flags);
/* Whether a GEMV_TILE of this pattern adds into its output, an f32
 * accumulator the engine zeroes before each step (mlp, attention_o), rather
 * than storing its columns. */
bool amk_gemv_pattern_accumulates(int64_t pattern);

const char *amk_page_policy_name(AmkPagePolicy p);
int amk_page_policy_from_name(const char *s);
const char *amk_sm_policy_name(AmkSmPolicy p);
int amk_sm_policy_from_name(const char *s);

/* ---- the arena ---------------------------------------------------------- */

typedef struct AmkArenaBlock AmkArenaBlock;
typedef struct {
  AmkArenaBlock *head;
} AmkArena;

void *amk_arena_alloc(AmkArena *a, size_t size);  /* zeroed, 16-aligned */
char *amk_arena_strdup(AmkArena *a, const char *s);
char *amk_arena_strndup(AmkArena *a, const char *s, size_t n);
void *amk_arena_memdup(AmkArena *a, const void *p, size_t size);
void amk_arena_free(AmkArena *a);

/* ---- generic values (JSON-shaped) -------------------------------------- */

typedef enum {
  AMK_VALUE_NULL,
  AMK_VALUE_BOOL,
  AMK_VALUE_INT,
  AMK_VALUE_FLOAT,
  AMK_VALUE_STRING,
  AMK_VALUE_LIST,
  AMK_VALUE_OBJECT,
} AmkValueKind;

/* The deepest a value's lists and objects may nest (`[[1]]` is 2), in
 * `.amkir` text and in JSON alike, so that a program either form holds
 * the other can hold too: a program's JSON puts values up to five levels
 * down (tasks[i].waits[j].threshold) and cJSON refuses documents nested
 * deeper than 1000 (CJSON_NESTING_LIMIT). Real values nest two or three
 * levels. */
#define AMK_VALUE_MAX_DEPTH 256

typedef struct AmkValue AmkValue;
typedef struct AmkMember AmkMember;

struct AmkValue {
  AmkValueKind kind;
  uint32_t count; /* elements of a LIST, members of an OBJECT */
  union {
    bool b;
    int64_t i;
    double f;
    const char *s;
    AmkValue *items;    /* LIST */
    AmkMember *members; /* OBJECT, in insertion order */
  } as;
};

struct AmkMember {
  const char *key;
  AmkValue value;
};

static inline AmkValue amk_value_int(int64_t i) {
  AmkValue v = {.kind = AMK_VALUE_INT};
  v.as.i = i;
  return v;
}
static inline AmkValue amk_value_float(double f) {
  AmkValue v = {.kind = AMK_VALUE_FLOAT};
  v.as.f = f;
  return v;
}
/* True for an INT (not BOOL, not FLOAT), storing it in *out. */
bool amk_value_as_int(const AmkValue *v, int64_t *out);
/* True for an INT or FLOAT (a "real number" as the reference means it). */
bool amk_value_as_real(const AmkValue *v, double *out);
const AmkValue *amk_object_get(const AmkValue *obj, const char *key);
bool amk_value_equal(const AmkValue *a, const AmkValue *b);
AmkValue amk_value_clone(AmkArena *arena, const AmkValue *v);

/* Python repr() of a double: the shortest string that round-trips, e.g.
 * "1e-06", "10000.0", "0.25", "1e+16", "nan", "inf". Returns the length
 * written; buf needs 32 bytes. */
int amk_format_float_repr(double f, char buf[32]);

/* ---- records ------------------------------------------------------------ */

typedef struct {
  int32_t id;
  const char *name;
  AmkBufferKind kind;
  AmkDType dtype;
  uint32_t rank;
  AmkValue *shape; /* rank dims; normally INT, but loaded as written */
  AmkMemSpace space;
  const char *source; /* state-dict key, or NULL */
  AmkLoc loc;
} AmkBuffer;

typedef struct {
  int32_t id;
  int64_t init;
  const char *note;
  /* Text-form name (`#name`); NULL prints as `#<id>`. Not part of JSON. */
  const char *name;
  AmkLoc loc;
} AmkCounter;

typedef struct {
  int32_t counter;
  AmkValue threshold; /* a positive INT when valid */
} AmkWait;

typedef struct {
  const char *key;
  AmkValue value;
} AmkParam;

typedef struct {
  int32_t id;
  AmkOp op;
  uint32_t n_inputs, n_outputs, n_waits, n_params;
  int32_t *inputs;  /* buffer ids read */
  int32_t *outputs; /* buffer ids written */
  int32_t out_counter;
  AmkWait *waits;
  AmkParam *params; /* insertion order */
  bool has_sm;
  int32_t sm;
  int64_t est_bytes;
  int64_t est_flops;
  const char *label;
  AmkLoc loc;
} AmkTask;

typedef struct {
  int32_t id;
  AmkMemSpace space;
  int64_t nbytes;
  int64_t live_start, live_end; /* -1: unset */
} AmkPage;

typedef struct {
  int32_t buffer;
  int32_t page;
} AmkPageBinding;

typedef struct {
  uint32_t n_bindings, n_pages;
  AmkPageBinding *bindings; /* buffer_to_page, insertion order */
  AmkPage *pages;
} AmkPageAllocation;

typedef struct {
  int32_t task;
  int32_t sm;
} AmkSmMapEntry;

typedef struct {
  /* {"gemv": {"N_tile": 256}, ...}: an OBJECT of OBJECTs */
  AmkValue tiling;
  /* [["rmsnorm", "gemv_tile"], ...]: a LIST of LISTs of STRINGs */
  AmkValue fusion_grouping;
  AmkSmPolicy sm_assignment;
  uint32_t n_sm_map; /* EXPLICIT only: {task id: sm}, insertion order */
  AmkSmMapEntry *sm_map;
  int64_t pipelining_depth;
  AmkPagePolicy page_allocation;
  int64_t threads_per_block;
  int64_t smem_bytes_per_block;
} AmkConfig;

typedef struct {
  const char *name;
  int64_t sm_arch, num_sms, smem_bytes_per_sm, smem_bytes_per_block_optin,
      regs_per_sm, max_threads_per_sm, max_regs_per_thread, l2_bytes,
      hbm_bytes;
  double hbm_bandwidth_gbs, fp16_tflops, clock_ghz;
  bool supports_cooperative, wddm_tdr;
  double measured_bw_gbs;
  const char *note;
} AmkTarget;

/* Built-in target records (tables.h). NULL for an unknown name. */
const AmkTarget *amk_builtin_target(const char *name);
size_t amk_builtin_target_count(void);
const AmkTarget *amk_builtin_target_at(size_t i);

/* ---- the module ---------------------------------------------------------- */

typedef struct {
  AmkArena arena;
  const char *ir_version;  /* as read; AMK_IR_VERSION when new */
  const char *abi_version; /* as read; AMK_ABI_VERSION when new */
  AmkValue meta;           /* an OBJECT */
  AmkTarget *target;       /* NULL when absent */
  AmkConfig *config;       /* NULL when absent */
  AmkPageAllocation *pages; /* NULL when absent */

  uint32_t n_buffers, n_counters, n_tasks;
  uint32_t cap_buffers, cap_counters, cap_tasks;
  AmkBuffer *buffers;
  AmkCounter *counters;
  AmkTask *tasks;

  /* Where the module came from, for diagnostics. source_text is NULL for
   * modules that were not parsed from text. */
  const char *source_name;
  const char *source_text;
  size_t source_len;
  /* A HuggingFace model folder this module is built from (`model "DIR"`). */
  const char *model_dir;
} AmkModule;

AmkModule *amk_module_new(void);
void amk_module_free(AmkModule *m);

/* Append a zeroed record and return it (pointers into the arrays are
 * invalidated by the next append). */
AmkBuffer *amk_module_add_buffer(AmkModule *m);
AmkCounter *amk_module_add_counter(AmkModule *m);
AmkTask *amk_module_add_task(AmkModule *m);

/* Lookups by id. Ids normally equal list positions (fast path); other ids
 * fall back to a scan. NULL when absent. */
const AmkBuffer *amk_module_buffer(const AmkModule *m, int32_t id);
const AmkCounter *amk_module_counter(const AmkModule *m, int32_t id);
const AmkTask *amk_module_task(const AmkModule *m, int32_t id);

/* Params. */
const AmkValue *amk_task_param(const AmkTask *t, const char *key);
/* True when the param is present and an INT; stores it in *out. */
bool amk_task_param_int(const AmkTask *t, const char *key, int64_t *out);
/* True when the param is present and an INT or FLOAT. */
bool amk_task_param_real(const AmkTask *t, const char *key, double *out);
/* Set or replace a param (insertion order kept for existing keys). */
void amk_task_set_param(AmkModule *m, AmkTask *t, const char *key,
                        AmkValue value);

/* Element count and byte size of a buffer whose dims are all INT. Returns
 * false (and leaves *out alone) when a dim is not an integer or overflows. */
bool amk_buffer_numel(const AmkBuffer *b, int64_t *out);

/* Whether two version strings ("0.2.0", "0.2") share their major part, the
 * text before the first '.', compared as text as the reference does ("00"
 * is not "0"). Both readers (JSON and .amkir) check with it. */
bool amk_same_major_version(const char *a, const char *b);
bool amk_buffer_nbytes(const AmkBuffer *b, int64_t *out);

/* Sum of the bytes of all WEIGHT buffers. */
int64_t amk_module_weight_bytes(const AmkModule *m);

/* The weight bytes one decode step reads: every WEIGHT buffer in full,
 * except tables read only by EMBED, which gathers one row per read. This is
 * the numerator of achieved bandwidth (a tied embedding table is then
 * counted once, by the lm_head that streams it). */
int64_t amk_module_streamed_weight_bytes(const AmkModule *m);

/* The model folder the module names (`model "DIR"`), to read it: a
 * relative one is relative to the folder of the file the module was read
 * from, a folder given on the command line is used as is. malloc'd; NULL
 * when it names none. */
char *amk_module_model_folder(const AmkModule *m);

/* ---- the text form's lexical rules (ir/syntax.c) --------------------- */

/* True when `s` may be written without quotes where a name is expected:
 * [A-Za-z_][A-Za-z0-9_.-]* . */
bool amk_text_is_identifier(const char *s, size_t len);
/* True for the reserved words of the text form (they print quoted where a
 * free word such as a target name is expected). */
bool amk_text_is_keyword(const char *s, size_t len);

#endif
