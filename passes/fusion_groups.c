/* The fusion groups fuse runs; see fusion_groups.h. */
#include "fusion_groups.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/tp.h"
#include "validate_graph.h" /* amk_value_repr */

static const AmkLoc no_loc = {0, 0};

static const char *const group_names[] = {
#define X(name, text, by_default) text,
    AMK_FUSION_GROUPS(X)
#undef X
};
static const bool group_by_default[] = {
#define X(name, text, by_default) by_default,
    AMK_FUSION_GROUPS(X)
#undef X
};

/* Op spellings accepted in a group, mapped to the names above. */
static const char *canonical_op(const char *op) {
  if (strcmp(op, "gemv_tile") == 0)
    return "gemv";
  if (strcmp(op, "attention_tile") == 0)
    return "attention";
  if (strcmp(op, "attention_combine") == 0)
    return "combine";
  return op;
}

/* Sorted '+'-joined spelling of a group, for an order-free comparison. */
static void group_key(const char *const *ops, size_t n, char *out, size_t size) {
  const char *sorted[8];
  size_t k = n < 8 ? n : 8;
  for (size_t i = 0; i < k; i++)
    sorted[i] = canonical_op(ops[i]);
  for (size_t i = 1; i < k; i++)
    for (size_t j = i; j > 0 && strcmp(sorted[j - 1], sorted[j]) > 0; j--) {
      const char *tmp = sorted[j];
      sorted[j] = sorted[j - 1];
      sorted[j - 1] = tmp;
    }
  size_t at = 0;
  out[0] = '\0';
  for (size_t i = 0; i < k && at < size; i++)
    at += (size_t)snprintf(out + at, size - at, "%s%s", i ? "+" : "", sorted[i]);
}

/* The group named by `ops`, or -1. "q+k+v" is another spelling of qkv. */
static int lookup_group(const char *const *ops, size_t n) {
  char want[256], have[256];
  if (n == 0 || n > 8)
    return -1;
  group_key(ops, n, want, sizeof want);
  if (strcmp(want, "k+q+v") == 0)
    return AMK_FUSION_QKV;
  for (int g = 0; g < AMK_FUSION_COUNT; g++) {
    char copy[64];
    const char *parts[8];
    size_t np = 0;
    snprintf(copy, sizeof copy, "%s", group_names[g]);
    char *save = NULL;
    for (char *tok = strtok_r(copy, "+", &save); tok && np < 8;
         tok = strtok_r(NULL, "+", &save))
      parts[np++] = tok;
    group_key(parts, np, have, sizeof have);
    if (strcmp(want, have) == 0)
      return g;
  }
  return -1;
}

static void known_groups(char *out, size_t size) {
  size_t at = 0;
  for (int g = 0; g < AMK_FUSION_COUNT && at < size; g++)
    at += (size_t)snprintf(out + at, size - at, "%s%s", g ? ", " : "", group_names[g]);
}

static bool parse_fusion_option(const char *text, bool *on, AmkDiagEngine *diag) {
  char known[256];
  known_groups(known, sizeof known);
  if (strcmp(text, "all") == 0) {
    for (int g = 0; g < AMK_FUSION_COUNT; g++)
      on[g] = true;
    return true;
  }
  if (strcmp(text, "none") == 0)
    return true;
  size_t len = strlen(text);
  char *copy = amk_xstrdup(text);
  bool ok = len > 0;
  char *save = NULL;
  for (char *item = strtok_r(copy, ",", &save); item && ok;
       item = strtok_r(NULL, ",", &save)) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", item);
    const char *ops[8];
    size_t n = 0;
    char *save2 = NULL;
    for (char *op = strtok_r(buf, "+", &save2); op && n < 8; op = strtok_r(NULL, "+", &save2))
      ops[n++] = op;
    int g = lookup_group(ops, n);
    if (g < 0) {
      if (diag)
        amk_error(diag, no_loc,
                  "fuse: unknown fusion group '%s' in --fusion (known: %s; or all, none)",
                  item, known);
      ok = false;
    } else {
      on[g] = true;
    }
  }
  if (len == 0 && diag)
    amk_error(diag, no_loc, "fuse: --fusion is empty (give all, none or groups: %s)", known);
  free(copy);
  return ok;
}

static bool parse_fusion_config(const AmkValue *grouping, bool *on, AmkDiagEngine *diag) {
  char known[256], repr[128];
  known_groups(known, sizeof known);
  if (grouping->kind != AMK_VALUE_LIST) {
    if (diag) {
      amk_value_repr(grouping, repr, sizeof repr);
      amk_error(diag, no_loc,
                "fuse: config.fusion_grouping must be a list of lists of op names, not %s",
                repr);
    }
    return false;
  }
  if (grouping->count == 0) { /* an empty grouping asks for the default fusions */
    for (int g = 0; g < AMK_FUSION_COUNT; g++)
      on[g] = group_by_default[g];
    return true;
  }
  for (uint32_t i = 0; i < grouping->count; i++) {
    const AmkValue *item = &grouping->as.items[i];
    const char *ops[8];
    size_t n = 0;
    bool strings = item->kind == AMK_VALUE_LIST && item->count <= 8;
    for (uint32_t j = 0; strings && j < item->count; j++) {
      strings = item->as.items[j].kind == AMK_VALUE_STRING;
      if (strings)
        ops[n++] = item->as.items[j].as.s;
    }
    int g = strings ? lookup_group(ops, n) : -1;
    if (g < 0) {
      if (diag) {
        amk_value_repr(item, repr, sizeof repr);
        amk_error(diag, no_loc,
                  "fuse: unknown fusion group %s in config.fusion_grouping (known: %s)",
                  repr, known);
      }
      return false;
    }
    on[g] = true;
  }
  return true;
}

/* An AMK_FUSE_* switch: unset or empty leaves *value; "0" or "1" sets it
 * (and *given); anything else is an error. */
static bool read_switch(const char *var, AmkDiagEngine *diag, bool *value, bool *given) {
  const char *text = getenv(var);
  if (!text || !*text)
    return true;
  if (strcmp(text, "0") != 0 && strcmp(text, "1") != 0) {
    if (diag)
      amk_error(diag, no_loc, "fuse: %s must be 0 or 1, not '%s'", var, text);
    return false;
  }
  *value = text[0] == '1';
  if (given)
    *given = true;
  return true;
}

bool amk_fusion_plan_read(const AmkModule *m, const AmkPassContext *ctx,
                          AmkDiagEngine *diag, AmkFusionPlan *plan) {
  memset(plan, 0, sizeof *plan);
  const char *option = amk_pass_option_string(ctx, "fusion");
  if (option) {
    if (!parse_fusion_option(option, plan->on, diag))
      return false;
  } else if (m->config) {
    if (!parse_fusion_config(&m->config->fusion_grouping, plan->on, diag))
      return false;
  } else {
    for (int g = 0; g < AMK_FUSION_COUNT; g++)
      plan->on[g] = group_by_default[g];
  }
  plan->defaults = !option && (!m->config || m->config->fusion_grouping.count == 0);
  /* AMK_FUSE_SPLIT_DOWN=0|1 and AMK_FUSE_SPLIT_O=0|1 turn their group off,
   * or on, whatever the groups say, for A/B runs of the same program;
   * AMK_FUSE_KV_FROM_QKV=0 keeps the attention tiles waiting on rope_kv
   * (the form before it was taken off the chain); AMK_FUSE_SPLIT_DOWN_QUANT=1
   * lets split_down take weight-only quantized MLPs too (their mlp tiles
   * read the down weight's columns as it is: docs/Fusion.md; opt-in until
   * it has run on a GPU). */
  plan->kv_from_qkv = true;
  if (!read_switch("AMK_FUSE_SPLIT_DOWN", diag, &plan->on[AMK_FUSION_SPLIT_DOWN],
                   &plan->split_down_env) ||
      !read_switch("AMK_FUSE_SPLIT_O", diag, &plan->on[AMK_FUSION_SPLIT_O], &plan->split_o_env) ||
      !read_switch("AMK_FUSE_KV_FROM_QKV", diag, &plan->kv_from_qkv, NULL) ||
      !read_switch("AMK_FUSE_SPLIT_DOWN_QUANT", diag, &plan->split_down_quant, NULL))
    return false;
  /* AMK_FUSE_SPLIT_O_SLICES=N: split_o's tiles a query head at most N (a
   * measurement knob: fewer tiles read each KV head's window fewer times,
   * more share the o projection's weights). */
  const char *slices = getenv("AMK_FUSE_SPLIT_O_SLICES");
  if (slices && *slices) {
    char *end;
    long n = strtol(slices, &end, 10);
    if (*end || n < 1 || n > 1024) {
      if (diag)
        amk_error(diag, no_loc, "fuse: AMK_FUSE_SPLIT_O_SLICES must be an integer in [1, 1024], "
                                "not '%s'", slices);
      return false;
    }
    plan->split_o_slices = n;
  }
  return true;
}

bool amk_fusion_attention(const AmkFusionPlan *plan) {
  return plan->on[AMK_FUSION_QKV] && plan->on[AMK_FUSION_ROPE_KV] &&
         plan->on[AMK_FUSION_ATTENTION_ROPE];
}

bool amk_fusion_mlp(const AmkFusionPlan *plan) {
  return plan->on[AMK_FUSION_GATE_UP] && plan->on[AMK_FUSION_SILU];
}

bool amk_fusion_split_down(const AmkFusionPlan *plan) {
  return plan->on[AMK_FUSION_SPLIT_DOWN] && amk_fusion_mlp(plan) &&
         plan->on[AMK_FUSION_RESIDUAL] && plan->on[AMK_FUSION_NORM];
}

bool amk_fusion_split_o(const AmkFusionPlan *plan) {
  /* The accumulator's readers: split_down's mlp tiles, or the fused MLP's
   * norm-fused gate|up tiles and residual-fused down tiles. */
  return plan->on[AMK_FUSION_SPLIT_O] && amk_fusion_attention(plan) && plan->kv_from_qkv &&
         plan->on[AMK_FUSION_RESIDUAL] && plan->on[AMK_FUSION_NORM] && amk_fusion_mlp(plan);
}

int64_t amk_fusion_split_down_min_cols(const AmkFusionPlan *plan) {
  /* split_down by default: only MLPs whose gate|up tiles have more than
   * 32 intermediate columns on average. Each mlp tile adds all K elements
   * into the accumulator, so a narrow tile pays those K atomic adds and its
   * fixed costs for little down work. Measured on an H200 (bf16, the
   * decode step against the same program without split_down): tiles of 112
   * columns (8B shape) -4.7%, 64 (1B) -4.4%, 38 (Qwen2.5-0.5B) -7.6%, 32
   * (Qwen3-0.6B) +2.3%, 16 (SmolLM2) +6% (docs/Performance.md). Named
   * explicitly (--fusion, the config) or by AMK_FUSE_SPLIT_DOWN=1 it splits
   * every MLP it can. */
  enum { SPLIT_DOWN_MIN_COLS = 33 };
  return plan->defaults && !plan->split_down_env ? SPLIT_DOWN_MIN_COLS : 1;
}

int64_t amk_fusion_split_o_min_cols(const AmkFusionPlan *plan) {
  /* The same rule as split_down's, measured for split_o over MLPs that
   * split_down leaves (H200, docs/Performance.md "Twenty-eighth session"):
   * the 8B's quantized MLPs (tiles of 108 columns) int8 -12%, int4 -14%,
   * the 1B's (64) int8 -2.5%, int4 -1.7% at position 0; SmolLM2's bf16
   * MLP (16 columns) +5%. */
  enum { SPLIT_O_MIN_COLS = 33 };
  return plan->defaults && !plan->split_o_env ? SPLIT_O_MIN_COLS : 1;
}

bool amk_fusion_split_o_planned(const AmkModule *m, const AmkPassContext *ctx,
                                int64_t *split_down_min_cols, int64_t *split_o_min_cols) {
  /* A rank program's o projection writes a partial for the cross-rank
   * all-reduce, which attention_o tiles do not feed: fuse leaves its
   * attention tiles alone, so tile must not drop their split-KV for it
   * (two H200s, 8B --tp 2: without split-KV the attention at position
   * 1024 took 31 us a layer, one tile per KV head; docs/TensorParallel.md). */
  int64_t tp_size, tp_rank;
  if (amk_module_tp(m, &tp_size, &tp_rank) && tp_size >= 2)
    return false;
  AmkFusionPlan plan;
  if (!amk_fusion_plan_read(m, ctx, NULL, &plan) || !amk_fusion_split_o(&plan))
    return false;
  *split_down_min_cols = amk_fusion_split_down(&plan) ? amk_fusion_split_down_min_cols(&plan) : 0;
  *split_o_min_cols = amk_fusion_split_o_min_cols(&plan);
  return true;
}

bool amk_fusion_split_o_wants_fp_o(const AmkModule *m, const AmkPassContext *ctx) {
  int64_t split_down_min_cols, split_o_min_cols;
  if (!amk_fusion_split_o_planned(m, ctx, &split_down_min_cols, &split_o_min_cols))
    return false;
  /* tile's columns a gate|up tile: --gemv-n-tile, else the intermediate
   * over the target's SMs (its balanced tiles; the rows of a prefill
   * program's GEMMs do not count, so that its o projection takes the
   * decode program's dtype). */
  int64_t n_tile = 0;
  amk_pass_option_int(ctx, "gemv-n-tile", &n_tile);
  int64_t sms = m->target && m->target->num_sms > 0 && m->target->num_sms <= 1000000
                    ? m->target->num_sms
                    : 132;
  int mlps = 0;
  for (uint32_t i = 0; i < m->n_tasks; i++) {
    const AmkTask *t = &m->tasks[i];
    if (t->op != AMK_OP_SILU_MUL || t->n_inputs != 2)
      continue;
    const AmkBuffer *up = amk_module_buffer(m, t->inputs[1]);
    int64_t inter = 0;
    if (!up || up->rank < 1 || !amk_value_as_int(&up->shape[up->rank - 1], &inter) ||
        inter <= 0)
      return false;
    int64_t cols = n_tile > 0 ? (n_tile < inter ? n_tile : inter) : inter / sms;
    if (cols < split_o_min_cols)
      return false;
    mlps++;
  }
  return mlps > 0;
}
