/* The fusion groups `fuse` runs (docs/Fusion.md, "Choosing the fusions"):
 * the group table, the --fusion / config.fusion_grouping grammar and the
 * AMK_FUSE_* environment overrides. Not a pass itself.
 *
 * Shared by fuse, which runs the groups, and tile, which needs one answer
 * from them before fuse runs: whether split_o will take a layer's attention
 * into its o projection (split_o applies only to unpartitioned attention,
 * so tile's automatic split-KV choice is then one partition). Kept apart
 * from fuse.c so that one pass does not call into another: both use this
 * file, as both use schedule_rewrite.c. */
#ifndef AMK_FUSION_GROUPS_H
#define AMK_FUSION_GROUPS_H

#include <stdbool.h>
#include <stdint.h>

#include "amk/pass.h"

/* X(NAME, spelling, on by default: without --fusion, and with an empty
 * config.fusion_grouping; `--fusion=all` turns on every group). split_down
 * by default applies only where it measured faster
 * (amk_fusion_split_down_min_cols), and split_o only where split_down
 * does. */
#define AMK_FUSION_GROUPS(X)                                                   \
  X(NORM, "rmsnorm+gemv", 1)                                                   \
  X(RESIDUAL, "gemv+add", 1)                                                   \
  X(GATE_UP, "gate+up", 1)                                                     \
  X(SILU, "silu_mul+gemv", 1)                                                  \
  X(QKV, "qkv", 1)                                                             \
  X(ROPE_KV, "rope+kv_append", 1)                                              \
  X(ATTENTION_ROPE, "rope+attention", 1)                                       \
  X(COMBINE, "combine+gemv", 1)                                                \
  X(SPLIT_DOWN, "split_down", 1)                                               \
  X(SPLIT_O, "split_o", 1)

typedef enum {
#define X(name, text, by_default) AMK_FUSION_##name,
  AMK_FUSION_GROUPS(X)
#undef X
      AMK_FUSION_COUNT
} AmkFusionGroup;

typedef struct {
  bool on[AMK_FUSION_COUNT]; /* after the environment's overrides */
  /* The default groups: no --fusion, and no or an empty
   * config.fusion_grouping (split_down then keeps to wide MLPs). */
  bool defaults;
  bool split_down_env; /* AMK_FUSE_SPLIT_DOWN was 0 or 1 */
  bool split_o_env;    /* AMK_FUSE_SPLIT_O was 0 or 1 */
  bool kv_from_qkv;    /* AMK_FUSE_KV_FROM_QKV unset or 1 */
  bool split_down_quant; /* AMK_FUSE_SPLIT_DOWN_QUANT=1: split_down takes quantized MLPs too */
  int64_t split_o_slices; /* AMK_FUSE_SPLIT_O_SLICES: at most this many tiles a query
                           * head (0: as many as the SMs allow) */
} AmkFusionPlan;

/* Reads the groups: --fusion (ctx's "fusion" option), else
 * config.fusion_grouping, else the defaults; then AMK_FUSE_SPLIT_DOWN and
 * AMK_FUSE_SPLIT_O (0 or 1: the group off or on whatever the groups say),
 * AMK_FUSE_KV_FROM_QKV, AMK_FUSE_SPLIT_DOWN_QUANT (0 or 1) and
 * AMK_FUSE_SPLIT_O_SLICES (1 to 1024). False on a bad option, config or environment
 * value, reported through `diag` as fuse's error, or not reported when
 * `diag` is NULL (tile's question: fuse reports it when it runs). */
bool amk_fusion_plan_read(const AmkModule *m, const AmkPassContext *ctx,
                          AmkDiagEngine *diag, AmkFusionPlan *plan);

/* The block rewrites fuse runs, from the groups and what each needs:
 * the attention block (qkv, rope+kv_append, rope+attention together), the
 * MLP (gate+up, silu_mul+gemv), split_down (the MLP, gemv+add and
 * rmsnorm+gemv) and split_o (the attention block with row pos from qkv,
 * gemv+add and split_down). */
bool amk_fusion_attention(const AmkFusionPlan *plan);
bool amk_fusion_mlp(const AmkFusionPlan *plan);
bool amk_fusion_split_down(const AmkFusionPlan *plan);
bool amk_fusion_split_o(const AmkFusionPlan *plan);

/* The fewest intermediate columns a gate|up tile may have for split_down
 * to take its MLP: by default (the default groups, no AMK_FUSE_SPLIT_DOWN)
 * only MLPs it measured faster on (fusion_groups.c), else every one. */
int64_t amk_fusion_split_down_min_cols(const AmkFusionPlan *plan);

/* The fewest intermediate columns a gate|up tile may have for split_o to
 * take a layer whose MLP split_down leaves (a quantized MLP, or split_down
 * off): the o projection's accumulator is then read by the gate|up tiles'
 * norm and the down tiles' residual. By default split_down's rule (wide
 * MLPs: SmolLM2's tiles of 16 columns were slower with it); named
 * (--fusion, the config) or by AMK_FUSE_SPLIT_O=1, every layer it can. */
int64_t amk_fusion_split_o_min_cols(const AmkFusionPlan *plan);

/* Whether quantize's --quant-keep=auto keeps the o projections in the
 * program's dtype: split_o is planned (amk_fusion_split_o_planned) and
 * every MLP's intermediate, cut over the target's SMs (or into
 * --gemv-n-tile columns), is at least its column rule wide, so that fuse
 * will take every layer's o projection into the attention tiles (split_o
 * has no quantized form). */
bool amk_fusion_split_o_wants_fp_o(const AmkModule *m, const AmkPassContext *ctx);

/* Whether fuse will try split_o, for tile: the module's groups (quietly;
 * false where they cannot be read) turn it on with all it needs; then
 * *split_down_min_cols is split_down's rule (0: split_down is off) and
 * *split_o_min_cols split_o's for the layers split_down leaves
 * (amk_fusion_split_o_min_cols). */
bool amk_fusion_split_o_planned(const AmkModule *m, const AmkPassContext *ctx,
                                int64_t *split_down_min_cols, int64_t *split_o_min_cols);

#endif
