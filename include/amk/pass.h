/* Passes, their options and their statistics.
 *
 * A pass is one function in one file (passes/<name>.c). AMK_PASSES is the
 * single registry: the driver's flags, -passes=, --help and --print-passes
 * all come from it. The pass manager that runs them is amk/pipeline.h.
 */
#ifndef AMK_PASS_H
#define AMK_PASS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "amk/diag.h"
#include "amk/ir.h"

/* The most tasks a pass may make a program hold. A task costs about 450
 * bytes of module and more in the passes after it; real programs have
 * about 10^5 (Llama 3 405B tiled for 132 SMs), so a count past this is a
 * mistaken config or option, refused before the tasks are made rather than
 * ending in "out of memory" gigabytes later. */
#define AMK_MAX_PROGRAM_TASKS 10000000

typedef struct AmkStats AmkStats;
typedef struct AmkPassContext AmkPassContext;

/* How a pass option's value is written. The registry parses and checks a
 * value once, when it is given (amk_pipeline_set_option), so a pass reads a
 * value that is already of its type and in its range. */
typedef enum {
  AMK_OPTION_INT,    /* a decimal integer in [min, max] */
  AMK_OPTION_REAL,   /* a finite number in [min, max] */
  AMK_OPTION_ENUM,   /* one of `words` ("a|b|c"), any case; read as its index */
  AMK_OPTION_STRING, /* non-empty text with a grammar of the pass's own */
} AmkOptionType;

/* One row of AMK_PASS_OPTIONS. */
typedef struct {
  const char *key;  /* `--key=value`; a key equal to its pass's name is the
                       value of `-pass=VALUE` */
  const char *pass; /* the pass that reads it (named in errors) */
  AmkOptionType type;
  double min, max;   /* INT and REAL: the allowed range */
  const char *words; /* ENUM: the allowed words, '|'-separated */
  const char *help;
} AmkPassOptionInfo;

/* A parsed option value, as a pass sees it. */
typedef struct {
  const AmkPassOptionInfo *info;
  const char *text; /* as given, for messages */
  union {
    int64_t i;     /* INT */
    double real;   /* REAL */
    size_t word;   /* ENUM: index into info->words */
    const char *s; /* STRING: the same as text */
  } as;
} AmkOptionValue;

struct AmkPassContext {
  AmkDiagEngine *diag;
  const AmkOptionValue *options; /* a later value for a key wins */
  size_t n_options;
  AmkStats *stats; /* NULL unless -stats */
};

/* Typed option reads: true (and *out set) when the option was given. Reading
 * a key as another type than its AMK_PASS_OPTIONS row is an internal error. */
bool amk_pass_option_int(const AmkPassContext *ctx, const char *key,
                         int64_t *out);
bool amk_pass_option_real(const AmkPassContext *ctx, const char *key,
                          double *out);
bool amk_pass_option_enum(const AmkPassContext *ctx, const char *key,
                          size_t *word_index);
/* The text of a STRING option, or NULL when not given. */
const char *amk_pass_option_string(const AmkPassContext *ctx, const char *key);

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
  X(shard, "shard", 0,                                                       \
    "Split an op-level program into rank --tp-rank of --tp tensor-parallel "  \
    "ranks")                                                                   \
  X(quantize, "quantize", 0,                                                 \
    "Quantize GEMV weights to int8 or int4 (--quant; run it before -fuse)")   \
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

/* The projections quantize leaves in the program's dtype when --quant-keep
 * is not given: auto, the o projection where fuse's split_o will fold it
 * into the attention tiles (split_o has no quantized form; on an H200 the
 * 8B int8 step 4.19 -> 3.68 ms, int4 3.24 -> 2.77, the 1B int8 -2.5%,
 * docs/Quantization.md), else none. Measured (utils/quant-quality.py):
 * keeping lm_head in bf16 keeps no more greedy choices for int8 and about
 * 1 in 70 more for int4, while it streams as many bytes as the rest of an
 * int4 Llama-3.2-1B; so not the head. (The embedding table is a gather,
 * not a GEMV: never quantized.) */
#define AMK_QUANT_DEFAULT_KEEP "auto"

/* Options that passes read: X(key, pass flag name, type, min, max, words,
 * help), see AmkPassOptionInfo. Drivers accept exactly these as
 * `--key=value`. A pass given as `-pass=VALUE` (e.g.
 * `-simulate-adversarial=32`) takes VALUE as its option of the same name.
 * --target and --fusion stay strings: the target table and the fusion-group
 * grammar (shared with config.fusion_grouping) belong to their passes. */
#define AMK_PASS_OPTIONS(X)                                                    \
  X("target", "import", AMK_OPTION_STRING, 0, 0, NULL,                         \
    "GPU target record (default h200)")                                        \
  X("dtype", "import", AMK_OPTION_ENUM, 0, 0, "f32|bf16|f16",                  \
    "program dtype: f32, bf16 or f16 (default: the checkpoint's)")            \
  X("max-seq", "import", AMK_OPTION_INT, 1, 16777216, NULL,                    \
    "KV cache length (default: max_position_embeddings, capped at 4096)")     \
  X("batch-size", "import", AMK_OPTION_INT, 1, 65536, NULL,                   \
    "rows of a prefill program (-b; default 1: the decode program)")          \
  X("prefill-logits", "import", AMK_OPTION_ENUM, 0, 0, "last|all",            \
    "a prefill program's logits: the last row's (default) or every row's")    \
  X("tp", "shard", AMK_OPTION_INT, 1, 64, NULL,                                \
    "tensor-parallel ranks: n_kv_heads must be a multiple")                   \
  X("tp-rank", "shard", AMK_OPTION_INT, 0, 63, NULL,                           \
    "the rank whose program shard writes (0..tp-1; default 0)")               \
  X("quant", "quantize", AMK_OPTION_ENUM, 0, 0, "int8|int4",                  \
    "GEMV weight format: int8 or int4 (weight-only, round to nearest)")       \
  X("quant-group", "quantize", AMK_OPTION_INT, 1, 2147483647, NULL,           \
    "weights per fp16 scale along K (default 128; the last group may be "     \
    "shorter)")                                                                \
  X("quant-keep", "quantize", AMK_OPTION_STRING, 0, 0, NULL,                  \
    "projections left unquantized: auto (o_proj where fuse's split_o takes "  \
    "it), none, or some of q_proj, k_proj, v_proj, o_proj, gate_proj, "       \
    "up_proj, down_proj, lm_head (default " AMK_QUANT_DEFAULT_KEEP            \
    ", measured; the embedding is never quantized)")                          \
  X("gemv-n-tile", "tile", AMK_OPTION_INT, 1, 2147483647, NULL,                \
    "GEMV tile rows, overriding config.tiling.gemv.N_tile (default: per SM)") \
  X("kv-partitions", "tile", AMK_OPTION_INT, 1, 8, NULL,                       \
    "split-KV partitions (1-8) over config.tiling.attention (default: split " \
    "caches of 1024+ rows, into at most 6)")                                   \
  X("fusion", "fuse", AMK_OPTION_STRING, 0, 0, NULL,                           \
    "all, none or groups like rmsnorm+gemv,gemv+add (over fusion_grouping)")  \
  X("sm-assignment", "sm-assign", AMK_OPTION_ENUM, 0, 0,                       \
    "round_robin|load_balance",                                                \
    "round_robin or load_balance, overriding config.sm_assignment")           \
  X("page-allocation", "color", AMK_OPTION_ENUM, 0, 0,                         \
    "linear|graph_color|none",                                                 \
    "linear, graph_color or none, overriding config.page_allocation")         \
  X("simulate-adversarial", "simulate-adversarial", AMK_OPTION_INT, 1,         \
    1000000, NULL, "seeded random orders to try (-simulate-adversarial=N; "    \
    "default 16)")

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

/* The pass table (passes/registry.c). */
size_t amk_pass_count(void);
const AmkPassInfo *amk_pass_at(size_t i);
const AmkPassInfo *amk_pass_lookup(const char *name);

/* The option table (passes/registry.c). */
size_t amk_pass_option_count(void);
const AmkPassOptionInfo *amk_pass_option_at(size_t i);
const AmkPassOptionInfo *amk_pass_option_lookup(const char *key);

/* Statistics (-stats, passes/pass_context.c): each pass records named
 * values; the driver prints them as a table after the pipeline, in the order
 * recorded. A NULL AmkStats records nothing. */
AmkStats *amk_stats_new(void);
void amk_stats_free(AmkStats *s);
void amk_stat_int(AmkStats *s, const char *pass, const char *name, int64_t v);
void amk_stat_real(AmkStats *s, const char *pass, const char *name, double v);
void amk_stat_str(AmkStats *s, const char *pass, const char *name,
                  const char *v);
void amk_stats_print(const AmkStats *s, FILE *out);
/* The i-th recorded value (for tests and tools that print their own way). */
size_t amk_stats_count(const AmkStats *s);
bool amk_stats_at(const AmkStats *s, size_t i, const char **pass,
                  const char **name, const char **value);

/* The structural verifier as a function (also run by the driver after
 * parsing and, with -verify-each, after every pass). Reports through diag;
 * returns false on any error. */
bool amk_verify_module(const AmkModule *m, AmkDiagEngine *diag);

/* The schedule sm-assign predicts for a module whose tasks all have an SM:
 * per task (list position), when its SM's queue reaches it, when its waits
 * hold and when it signals, in microseconds from the launch, under
 * sm-assign's cost model (passes/sm_assign.c). Each array holds n_tasks.
 * False after reporting (no target, a task without an SM, queues that
 * cannot all run). */
bool amk_sm_schedule_predict(const AmkModule *m, double *arrive_us, double *start_us,
                             double *end_us, AmkDiagEngine *diag);

#endif
