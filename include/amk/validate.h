/* The safety proof (`validate`), the structural verifier and the dynamic
 * cross-checks (`simulate-counters`, `simulate-adversarial`).
 *
 * docs/Validator.md lists every check, its message and every deliberate
 * difference from the Python reference.
 */
#ifndef AMK_VALIDATE_H
#define AMK_VALIDATE_H

#include <stdbool.h>
#include <stdint.h>

#include "amk/diag.h"
#include "amk/ir.h"

/* The reference's report statistics (plus the error/warning counts). */
typedef struct {
  bool ok;
  int64_t tasks, buffers, counters, edges;
  bool acyclic;
  double weight_mb; /* WEIGHT bytes / 1e6, rounded to 2 decimals */
  bool sm_assigned;
  int64_t errors, warnings;
} AmkValidateResult;

typedef struct {
  /* Also check shapes and params against each other (K against the input
   * width, pos against the cache length, ...). On by default. */
  bool semantic_bounds;
  /* Stop after this many errors (the verdict is settled by the first);
   * 0 means the default (200). */
  int max_errors;
} AmkValidateOptions;

/* The default options (every check on). */
AmkValidateOptions amk_validate_default_options(void);

/* Run every check; errors and warnings go to `diag` (which may be in
 * capture mode). Never crashes or hangs on any module the loaders produce.
 * Returns result.ok. `out` may be NULL; `opts` NULL means the defaults. */
bool amk_validate_module(const AmkModule *m, AmkDiagEngine *diag,
                         const AmkValidateOptions *opts,
                         AmkValidateResult *out);

/* Memory reused across validations (scratch arrays and indexes): a loop
 * validating many programs with one workspace allocates only when a program
 * needs more than any before it. Not thread-safe: one workspace per thread. */
typedef struct AmkValidatorWorkspace AmkValidatorWorkspace;
AmkValidatorWorkspace *amk_validator_workspace_new(void);
void amk_validator_workspace_free(AmkValidatorWorkspace *ws); /* NULL ok */
/* amk_validate_module with its memory from `ws` (same checks, same result). */
bool amk_validate_module_ws(AmkValidatorWorkspace *ws, const AmkModule *m,
                            AmkDiagEngine *diag, const AmkValidateOptions *opts,
                            AmkValidateResult *out);

/* The cross-rank protocol of a tensor-parallel group, ranks[r] rank r's
 * program (each validated on its own by amk_validate_module): every meta
 * says tp_size = n and its own tp_rank; each rank's cross-rank all-reduces
 * (amk/tp.h) are totally ordered by its waits, so it reaches them in one
 * order, and each one's output has no other writer; all ranks have the
 * same sequence, the k-th all-reduce of every rank with the same output
 * elements, dtype and rank, group = n, and either plain (a part as large
 * as the output) on all ranks or a gather (n_off) on all, whose parts are
 * disjoint and cover the output. (That its input is written before it and
 * its readers wait for it is each rank's own proof.) Errors name the rank
 * and the task; false when any. */
bool amk_validate_tp(const AmkModule *const *ranks, uint32_t n, AmkDiagEngine *diag);

/* `[VALID] {'tasks': 66, ...}` as the reference prints it (stats only). */
void amk_validate_format_summary(const AmkValidateResult *r, char *buf,
                                 size_t size);

/* Counter-driven firing in repeated list-order sweeps (the reference's
 * simulate_counters). Writes the firing order (task indices) into `order`
 * when non-NULL (room for m->n_tasks) and reports every stuck task through
 * `diag` (as errors). Returns the number of stuck tasks. */
size_t amk_simulate_counters(const AmkModule *m, AmkDiagEngine *diag,
                             uint32_t *order);

/* `seeds` seeded random interleavings of counter-driven firing; reports each
 * read of a transient buffer that happens before every other writer of it
 * fired (a KV cache the reader itself appends to is prior-step state, not a
 * race). Returns the number of distinct violations. */
size_t amk_simulate_adversarial(const AmkModule *m, AmkDiagEngine *diag,
                                uint32_t seeds);

#endif
