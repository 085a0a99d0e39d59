/* Passes and the pass manager.
 *
 * A pass is one function in one file (passes/<name>.c). AMK_PASSES is the
 * single registry: the driver's flags, -passes=, --help and --print-passes
 * all come from it.
 */
#ifndef AMK_PASS_H
#define AMK_PASS_H

#include <stdbool.h>

#include "amk/diag.h"
#include "amk/ir.h"

typedef struct AmkStats AmkStats;
typedef struct AmkPassContext AmkPassContext;

/* Named `--key=value` options that passes read (`--target=h200`). */
typedef struct {
  const char *key;
  const char *value;
} AmkOption;

struct AmkPassContext {
  AmkDiagEngine *diag;
  const AmkOption *options;
  size_t n_options;
  AmkStats *stats; /* NULL unless -stats */
};

/* The value of option `key`, or NULL when not given. */
const char *amk_pass_option(const AmkPassContext *ctx, const char *key);

/* A pass returns false when it reported an error (through ctx->diag). It may
 * change the module in place. */
typedef bool (*AmkPassFn)(AmkModule *m, AmkPassContext *ctx);

/* X(identifier, flag name, is_analysis, one-line description) — implemented
 * by `bool amk_pass_<identifier>(AmkModule *, AmkPassContext *)`. An analysis
 * pass only reports; a pipeline of analyses prints no module unless --emit or
 * -o asks for one. */
#define AMK_PASSES(X)                                                          \
  X(import, "import", 0,                                                     \
    "Import a HuggingFace Llama-family model folder as an op-level program")  \
  X(verify, "verify", 1, "Check structural well-formedness of the module")     \
  X(validate, "validate", 1,                                                   \
    "Prove the schedule cannot deadlock or race (the safety proof)")           \
  X(simulate_counters, "simulate-counters", 1,                                 \
    "Fire tasks by counters in list-order sweeps; report stuck tasks")         \
  X(simulate_adversarial, "simulate-adversarial", 1,                           \
    "=N: fire tasks in N seeded random orders; report reads before writes")  \
  X(tile, "tile", 0,                                                           \
    "Split GEMVs into column tiles and attention per KV head (split-KV)")    \
  X(fuse, "fuse", 0,                                                           \
    "Fuse norms, residual adds, SiLU, RoPE and KV appends into GEMV tiles")  \
  X(sm_assign, "sm-assign", 0,                                                 \
    "Place tasks on SMs (round_robin, load_balance or an explicit map)")       \
  X(color, "color", 0,                                                         \
    "Bind activations to scratch pages (linear, graph_color or none)")

/* Options that passes read: X(key, pass flag name, help). The driver accepts
 * exactly these as `--key=value`. A pass given as `-pass=VALUE` (e.g.
 * `-simulate-adversarial=32`) sees VALUE as option "<pass flag name>":
 * amk_pass_option(ctx, "simulate-adversarial"). */
#define AMK_PASS_OPTIONS(X)                                                    \
  X("target", "import", "GPU target record (default h200)")                  \
  X("dtype", "import",                                                         \
    "program dtype: f32, bf16 or f16 (default: the checkpoint's)")            \
  X("max-seq", "import",                                                       \
    "KV cache length (default: max_position_embeddings, capped at 4096)")     \
  X("gemv-n-tile", "tile",                                                     \
    "GEMV tile rows, overriding config.tiling.gemv.N_tile (default: per SM)") \
  X("kv-partitions", "tile",                                                   \
    "split-KV partitions (1-8) over config.tiling.attention (default: split " \
    "caches of 1024+ rows)")                                                   \
  X("fusion", "fuse",                                                          \
    "all, none or groups like rmsnorm+gemv,gemv+add (over fusion_grouping)")  \
  X("sm-assignment", "sm-assign",                                              \
    "round_robin or load_balance, overriding config.sm_assignment")           \
  X("page-allocation", "color",                                                \
    "linear, graph_color or none, overriding config.page_allocation")

#define X(ident, flag, analysis, desc)                                          \
  bool amk_pass_##ident(AmkModule *m, AmkPassContext *ctx);
AMK_PASSES(X)
#undef X

typedef struct {
  const char *name;
  const char *description;
  bool is_analysis;
  AmkPassFn run;
} AmkPassInfo;

size_t amk_pass_count(void);
const AmkPassInfo *amk_pass_at(size_t i);
const AmkPassInfo *amk_pass_lookup(const char *name);

/* Statistics (-stats): each pass records named values; the driver prints them
 * as a table after the pipeline, in the order recorded. */
AmkStats *amk_stats_new(void);
void amk_stats_free(AmkStats *s);
void amk_stat_int(AmkStats *s, const char *pass, const char *name, int64_t v);
void amk_stat_real(AmkStats *s, const char *pass, const char *name, double v);
void amk_stat_str(AmkStats *s, const char *pass, const char *name,
                  const char *v);
void amk_stats_print(const AmkStats *s, FILE *out);

/* The structural verifier as a function (also run by the driver after
 * parsing and, with -verify-each, after every pass). Reports through diag;
 * returns false on any error. */
bool amk_verify_module(const AmkModule *m, AmkDiagEngine *diag);

#endif
