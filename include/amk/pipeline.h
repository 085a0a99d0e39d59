/* The pass manager: a pipeline of registered passes with their options,
 * parsed once and run on a module with verification, timing, statistics and
 * print hooks. Drivers (amk-opt, amk-run) build one from their command line
 * and decide how to print; the library decides when. docs/Pipeline.md.
 *
 * A pipeline is a value: it holds no global state, and running it changes
 * only the module, the AmkStats and the AmkTimings it is given, so two
 * pipelines (or one, on two modules with their own stats and timings) may
 * run at once.
 */
#ifndef AMK_PIPELINE_H
#define AMK_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "amk/diag.h"
#include "amk/ir.h"
#include "amk/pass.h"

/* What a HuggingFace model folder goes through before it runs (amk-run) and
 * what amk-opt's -default-pipeline stands for. */
#define AMK_DEFAULT_PIPELINE "import,tile,fuse,sm-assign,color"

typedef struct AmkPipeline AmkPipeline;

AmkPipeline *amk_pipeline_new(void);
void amk_pipeline_free(AmkPipeline *p);

/* Appends the passes of a comma-separated list ("import,tile",
 * "verify,simulate-adversarial=32"). An empty text adds nothing; an empty
 * element, an unknown pass (with a "did you mean") or a bad `=VALUE` is
 * reported through diag and adds nothing of the list. */
bool amk_pipeline_parse(AmkPipeline *p, const char *text, AmkDiagEngine *diag);

/* Appends one pass: "tile" or "simulate-adversarial=32". */
bool amk_pipeline_add_pass(AmkPipeline *p, const char *spec, AmkDiagEngine *diag);

/* Sets `--key=value` for every pass of the pipeline (a later value for the
 * same key replaces the earlier). The value is parsed and checked here, by
 * the option's AMK_PASS_OPTIONS type; an unknown key or a bad value is
 * reported through diag ("import: --max-seq must be an integer in [1,
 * 16777216], not 'abc'"). */
bool amk_pipeline_set_option(AmkPipeline *p, const char *key, const char *value,
                             AmkDiagEngine *diag);

/* Reports every option set on the pipeline whose pass (the one that reads
 * it, AMK_PASS_OPTIONS) the pipeline does not run: such an option would be
 * ignored ("--quant is read by pass 'quantize', which this pipeline does
 * not run"). False when there was one. */
bool amk_pipeline_check_options(const AmkPipeline *p, AmkDiagEngine *diag);

/* Parses one value by its option's type and range into *out (which points
 * into `text`: keep it alive). Reports a bad value through diag as
 * amk_pipeline_set_option does. */
bool amk_pass_option_parse(const AmkPassOptionInfo *info, const char *text,
                           AmkOptionValue *out, AmkDiagEngine *diag);

size_t amk_pipeline_size(const AmkPipeline *p);
const AmkPassInfo *amk_pipeline_pass_at(const AmkPipeline *p, size_t i);
/* True when some pass of the pipeline changes the module. */
bool amk_pipeline_transforms(const AmkPipeline *p);
/* The pipeline as a -passes= list, options after their pass
 * ("import,simulate-adversarial=32"); the caller frees it. */
char *amk_pipeline_text(const AmkPipeline *p);

/* ---- timing -------------------------------------------------------------- */

/* Time spent per named stage (a pass, "verify (each)", or a driver's own
 * "parse"), summed over runs, in the order first seen. */
typedef struct AmkTimings AmkTimings;

typedef struct {
  double wall; /* seconds, monotonic clock */
  double user; /* seconds of user CPU time of the process (getrusage) */
} AmkClock;

AmkClock amk_clock_now(void);
AmkTimings *amk_timings_new(void);
void amk_timings_free(AmkTimings *t);
/* Adds the time from `start` to now to stage `name` (copied). */
void amk_timings_add_since(AmkTimings *t, const char *name, AmkClock start);
void amk_timings_add(AmkTimings *t, const char *name, double wall, double user);
size_t amk_timings_count(const AmkTimings *t);
/* Stage i: its name, wall and user seconds. */
const char *amk_timings_at(const AmkTimings *t, size_t i, double *wall, double *user);
/* The -time-passes table (wall time; the same table amk-opt always printed). */
void amk_timings_print(const AmkTimings *t, FILE *out);

/* ---- running --------------------------------------------------------------- */

/* How to run: every field may stay zero (no verification, no statistics, no
 * timing, no printing). */
typedef struct {
  bool verify_each;   /* verify the module after every transforming pass */
  AmkStats *stats;    /* handed to the passes; NULL: not collected */
  AmkTimings *timings; /* NULL: not timed */

  /* Which passes to print around; the callbacks print. */
  const char *print_before, *print_after; /* a pass name, or NULL */
  bool print_before_all, print_after_all;
  bool print_changed;
  void *user; /* given back to every callback */
  void (*before_pass)(void *user, const AmkPassInfo *pass, const AmkModule *m);
  /* After the pass (and -verify-each); pass_failed when either failed. */
  void (*after_pass)(void *user, const AmkPassInfo *pass, const AmkModule *m,
                     bool pass_failed);
  /* With print_changed: the module's text before and after the pass. */
  void (*changed)(void *user, const AmkPassInfo *pass, const char *before,
                  const char *after, bool is_changed);
} AmkPipelineRunOptions;

typedef enum {
  AMK_PIPELINE_OK,
  AMK_PIPELINE_PASS_FAILED,   /* a pass reported an error (through diag) */
  AMK_PIPELINE_VERIFY_FAILED, /* -verify-each: malformed after a pass */
} AmkPipelineStatus;

typedef struct {
  AmkPipelineStatus status;
  const AmkPassInfo *failed_pass; /* NULL when OK */
  size_t passes_run;              /* the failed one included */
} AmkPipelineResult;

/* Runs the passes in order on `m`, stopping at the first failure. */
AmkPipelineResult amk_pipeline_run(const AmkPipeline *p, AmkModule *m,
                                   AmkDiagEngine *diag,
                                   const AmkPipelineRunOptions *opt);

#endif
