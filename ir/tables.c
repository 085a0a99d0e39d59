/* Name lookups and properties generated from the X-macro tables. */
#include <string.h>

#include "amk/ir.h"

#define LOOKUP(table, count, field, s)                                         \
  do {                                                                         \
    for (int i_ = 0; i_ < (count); i_++)                                       \
      if (strcmp(table[i_].field, (s)) == 0)                                   \
        return i_;                                                             \
    return -1;                                                                 \
  } while (0)

/* Every table here is indexed by code, and each enum's COUNT is the last
 * code + 1: the codes must be 0..n-1 with no gap (a gap would leave a zeroed
 * entry that every per-op loop then meets). */
#define COUNT_ENTRY(...) +1
_Static_assert(0 AMK_DTYPES(COUNT_ENTRY) == AMK_DTYPE_COUNT,
               "AMK_DTYPES: codes must be 0..n-1 in order");
_Static_assert(0 AMK_MEMSPACES(COUNT_ENTRY) == AMK_SPACE_COUNT,
               "AMK_MEMSPACES: codes must be 0..n-1 in order");
_Static_assert(0 AMK_BUFFER_KINDS(COUNT_ENTRY) == AMK_KIND_COUNT,
               "AMK_BUFFER_KINDS: codes must be 0..n-1 in order");
_Static_assert(0 AMK_OPS(COUNT_ENTRY) == AMK_OP_COUNT,
               "AMK_OPS: codes must be 0..n-1 in order");
_Static_assert(0 AMK_GEMV_PATTERNS(COUNT_ENTRY) == AMK_PATTERN_COUNT,
               "AMK_GEMV_PATTERNS: ids must be 0..n-1 in order");
#undef COUNT_ENTRY

/* ---- dtypes ---------------------------------------------------------------- */

static const struct {
  const char *json, *text;
  int bits;
} dtype_table[] = {
#define X(name, code, text, bits) [code] = {#name, text, bits},
    AMK_DTYPES(X)
#undef X
};

const char *amk_dtype_json_name(AmkDType d) { return dtype_table[d].json; }
const char *amk_dtype_text_name(AmkDType d) { return dtype_table[d].text; }
int amk_dtype_bits(AmkDType d) { return dtype_table[d].bits; }
int amk_dtype_from_json_name(const char *s) {
  LOOKUP(dtype_table, AMK_DTYPE_COUNT, json, s);
}
int amk_dtype_from_text_name(const char *s) {
  LOOKUP(dtype_table, AMK_DTYPE_COUNT, text, s);
}
int64_t amk_dtype_nbytes(AmkDType d, int64_t count) {
  return (count * dtype_table[d].bits + 7) / 8;
}

/* ---- memory spaces ------------------------------------------------------ */

static const struct {
  const char *json, *text;
  bool on_chip;
} space_table[] = {
#define X(name, code, text, onchip) [code] = {#name, text, onchip},
    AMK_MEMSPACES(X)
#undef X
};

const char *amk_space_json_name(AmkMemSpace s) { return space_table[s].json; }
const char *amk_space_text_name(AmkMemSpace s) { return space_table[s].text; }
bool amk_space_is_on_chip(AmkMemSpace s) { return space_table[s].on_chip; }
int amk_space_from_json_name(const char *s) {
  LOOKUP(space_table, AMK_SPACE_COUNT, json, s);
}
int amk_space_from_text_name(const char *s) {
  LOOKUP(space_table, AMK_SPACE_COUNT, text, s);
}

/* ---- buffer kinds --------------------------------------------------------- */

static const struct {
  const char *json, *text;
  bool read_only;
} kind_table[] = {
#define X(name, code, text, ro) [code] = {#name, text, ro},
    AMK_BUFFER_KINDS(X)
#undef X
};

const char *amk_kind_json_name(AmkBufferKind k) { return kind_table[k].json; }
const char *amk_kind_text_name(AmkBufferKind k) { return kind_table[k].text; }
/* An unknown kind (a module the validator has not accepted yet) is not. */
bool amk_kind_is_read_only(AmkBufferKind k) {
  return (unsigned)k < AMK_KIND_COUNT && kind_table[k].read_only;
}
int amk_kind_from_json_name(const char *s) {
  LOOKUP(kind_table, AMK_KIND_COUNT, json, s);
}
int amk_kind_from_text_name(const char *s) {
  LOOKUP(kind_table, AMK_KIND_COUNT, text, s);
}

/* ---- ops --------------------------------------------------------------- */

static const AmkOpInfo op_table[] = {
#define X(name, code, text, min_in, max_in, n_out, req)                        \
  [code] = {#name, text, min_in, max_in, n_out, req},
    AMK_OPS(X)
#undef X
};

const AmkOpInfo *amk_op_info(AmkOp op) {
  return (unsigned)op < AMK_OP_COUNT ? &op_table[op] : NULL;
}
int amk_op_from_json_name(const char *s) {
  LOOKUP(op_table, AMK_OP_COUNT, json_name, s);
}
int amk_op_from_text_name(const char *s) {
  LOOKUP(op_table, AMK_OP_COUNT, text_name, s);
}

/* ---- params ---------------------------------------------------------------- */

static const struct {
  const char *name;
  char type;
} param_table[] = {
#define X(name, type) {#name, type},
    AMK_PARAMS(X)
#undef X
};

const char *amk_param_name(AmkParamField p) { return param_table[p].name; }
char amk_param_type(AmkParamField p) { return param_table[p].type; }
int amk_param_from_name(const char *s) {
  LOOKUP(param_table, AMK_PARAM_COUNT, name, s);
}

/* ---- fused GEMV patterns --------------------------------------------------- */

static const struct {
  const char *name, *inputs;
} pattern_table[] = {
#define X(name, id, text, inputs, desc) [id] = {text, inputs},
    AMK_GEMV_PATTERNS(X)
#undef X
};

const char *amk_gemv_pattern_name(int64_t pattern) {
  return pattern >= 0 && pattern < AMK_PATTERN_COUNT ? pattern_table[pattern].name : NULL;
}
const char *amk_gemv_pattern_inputs(int64_t pattern) {
  return pattern >= 0 && pattern < AMK_PATTERN_COUNT ? pattern_table[pattern].inputs : NULL;
}
int amk_gemv_pattern_from_name(const char *s) {
  LOOKUP(pattern_table, AMK_PATTERN_COUNT, name, s);
}

int amk_op_max_inputs(AmkOp op, int64_t flags) {
  int64_t pattern = flags >= 0 ? flags >> AMK_PATTERN_SHIFT : AMK_PATTERN_PLAIN;
  if (op == AMK_OP_GEMV_TILE && pattern == AMK_PATTERN_COMBINE_RESIDUAL)
    return AMK_MAX_INPUTS;
  /* A weight-only quantized tile of these patterns reads its scales before
   * the pattern's operand: [x, qW, scales, g or r] (silu: [gu, qW, scales],
   * within the table's 3). */
  if (op == AMK_OP_GEMV_TILE &&
      (pattern == AMK_PATTERN_NORM || pattern == AMK_PATTERN_RESIDUAL ||
       pattern == AMK_PATTERN_SILU_RESIDUAL))
    return 4;
  if (op == AMK_OP_GEMV_TILE && pattern == AMK_PATTERN_ATTENTION_O)
    return 5;
  /* mlp: [x, Wgu, g, Wdt], or quantized [x, qWgu, scales, g, qWd, scales]. */
  if (op == AMK_OP_GEMV_TILE && pattern == AMK_PATTERN_MLP)
    return 6;
  return (unsigned)op < AMK_OP_COUNT ? op_table[op].max_inputs : 0;
}

bool amk_gemv_pattern_accumulates(int64_t pattern) {
  if (pattern < 0 || pattern >= AMK_PATTERN_COUNT)
    return false;
  /* Every pattern has a case: a new one fails to compile until it says. */
  switch ((AmkGemvPattern)pattern) {
  case AMK_PATTERN_PLAIN:
  case AMK_PATTERN_NORM:
  case AMK_PATTERN_RESIDUAL:
  case AMK_PATTERN_SILU:
  case AMK_PATTERN_SILU_RESIDUAL:
  case AMK_PATTERN_ROPE_KV:
  case AMK_PATTERN_ATTENTION:
  case AMK_PATTERN_ATTENTION_ROPE:
  case AMK_PATTERN_COMBINE_RESIDUAL:
    return false;
  case AMK_PATTERN_MLP:
  case AMK_PATTERN_ATTENTION_O:
    return true;
  case AMK_PATTERN_COUNT:
    break;
  }
  return false;
}

/* ---- schedule policies ------------------------------------------------------ */

static const struct {
  const char *name;
} page_policy_table[] = {
#define X(name, text) {text},
    AMK_PAGE_POLICIES(X)
#undef X
};
static const struct {
  const char *name;
} sm_policy_table[] = {
#define X(name, text) {text},
    AMK_SM_POLICIES(X)
#undef X
};

const char *amk_page_policy_name(AmkPagePolicy p) {
  return page_policy_table[p].name;
}
int amk_page_policy_from_name(const char *s) {
  LOOKUP(page_policy_table, AMK_PAGES_COUNT, name, s);
}
const char *amk_sm_policy_name(AmkSmPolicy p) { return sm_policy_table[p].name; }
int amk_sm_policy_from_name(const char *s) {
  LOOKUP(sm_policy_table, AMK_SM_COUNT, name, s);
}

/* ---- built-in targets ----------------------------------------------------- */

static const AmkTarget builtin_targets[] = {
#define X(nm, arch, sms, smem, optin, thr, l2, hbm, gbs, tflops, ghz, wddm,     \
          measured, nt)                                                        \
  {.name = nm,                                                                 \
   .sm_arch = arch,                                                            \
   .num_sms = sms,                                                             \
   .smem_bytes_per_sm = smem,                                                  \
   .smem_bytes_per_block_optin = optin,                                        \
   .regs_per_sm = 65536,                                                       \
   .max_threads_per_sm = thr,                                                  \
   .max_regs_per_thread = 255,                                                 \
   .l2_bytes = l2,                                                             \
   .hbm_bytes = hbm,                                                           \
   .hbm_bandwidth_gbs = gbs,                                                   \
   .fp16_tflops = tflops,                                                      \
   .clock_ghz = ghz,                                                           \
   .supports_cooperative = true,                                               \
   .wddm_tdr = wddm,                                                           \
   .measured_bw_gbs = measured,                                                \
   .note = nt},
    AMK_BUILTIN_TARGETS(X)
#undef X
};

size_t amk_builtin_target_count(void) {
  return sizeof builtin_targets / sizeof builtin_targets[0];
}
const AmkTarget *amk_builtin_target_at(size_t i) {
  return i < amk_builtin_target_count() ? &builtin_targets[i] : NULL;
}
const AmkTarget *amk_builtin_target(const char *name) {
  for (size_t i = 0; i < amk_builtin_target_count(); i++)
    if (strcmp(builtin_targets[i].name, name) == 0)
      return &builtin_targets[i];
  return NULL;
}
