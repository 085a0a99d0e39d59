/* amk-bench-validate: how fast `validate` is (a command, not a test).
 *
 *   amk-bench-validate [--seconds S] [--max-tasks N] [TOY.json]
 *
 * Row 1: the 2-layer toy lowering (TOY.json, e.g.
 * shared/conformance/toy2L_pos0.amk.json, or the same program built by
 * amk_synth_llama when no file is given), loaded once and validated in a loop
 * in-process for S seconds on one core, reusing one AmkValidatorWorkspace;
 * row 2 the same through amk_validate_module (memory set up per call). Then generated lowerings of about
 * 10k, 100k and 1M tasks with every check on (best of 3 runs).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amk/diag.h"
#include "amk/io.h"
#include "amk/synth.h"
#include "amk/validate.h"

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static AmkSynthSpec spec_for_tasks(int64_t want) {
  AmkSynthSpec s = {.layers = 1, .hidden = 1024, .n_heads = 16,
                    .n_kv_heads = 4, .head_dim = 64, .intermediate = 4096,
                    .vocab = 32000, .n_tile = 64, .max_seq = 2048, .pos = 7};
  AmkSynthSpec two = s;
  two.layers = 2;
  int64_t per_layer = amk_synth_task_count(&two) - amk_synth_task_count(&s);
  int64_t base = amk_synth_task_count(&s) - per_layer;
  s.layers = (int32_t)((want - base + per_layer / 2) / per_layer);
  if (s.layers < 1)
    s.layers = 1;
  return s;
}

int main(int argc, char **argv) {
  double seconds = 1.0;
  int64_t max_tasks = 1000000;
  const char *toy_path = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
      seconds = atof(argv[++i]);
    else if (strcmp(argv[i], "--max-tasks") == 0 && i + 1 < argc)
      max_tasks = atoll(argv[++i]);
    else
      toy_path = argv[i];
  }
  AmkDiagEngine *diag = amk_diag_new(stderr);
  AmkModule *toy = NULL;
  char *text = NULL;
  if (toy_path) {
    size_t len;
    text = amk_read_file(toy_path, &len, diag);
    toy = text ? amk_read_json(toy_path, text, len, diag) : NULL;
  } else {
    AmkSynthSpec spec = amk_synth_toy_spec();
    toy = amk_synth_llama(&spec);
  }
  if (!toy) {
    fprintf(stderr, "amk-bench-validate: cannot load the toy program\n");
    return 1;
  }
  printf("%-28s %9s %12s %14s %14s %9s\n", "program", "tasks", "edges",
         "time/program", "validations/s", "verdict");
  AmkValidateResult r;
  bool ok = true;
  /* The loop reuses one workspace (as amk-validate-batch does); the second
   * row is the one-off API, which sets up its memory per call. */
  AmkValidatorWorkspace *ws = amk_validator_workspace_new();
  for (int row = 0; row < 2; row++) {
    bool reuse = row == 0;
    ok = reuse ? amk_validate_module_ws(ws, toy, diag, NULL, &r)
               : amk_validate_module(toy, diag, NULL, &r); /* warm up */
    long iterations = 0;
    double start = now_seconds(), elapsed = 0;
    do {
      for (int k = 0; k < 256; k++)
        ok = (reuse ? amk_validate_module_ws(ws, toy, diag, NULL, &r)
                    : amk_validate_module(toy, diag, NULL, &r)) &&
             ok;
      iterations += 256;
      elapsed = now_seconds() - start;
    } while (elapsed < seconds);
    char name[64];
    snprintf(name, sizeof name, "%s%s", toy_path ? "toy2L (JSON)" : "toy2L (synth)",
             reuse ? "" : " no workspace");
    printf("%-28s %9lld %12lld %11.2f us %14.0f %9s\n", name,
           (long long)r.tasks, (long long)r.edges,
           elapsed / (double)iterations * 1e6, (double)iterations / elapsed,
           ok ? "VALID" : "REJECTED");
  }
  amk_module_free(toy);
  free(text);

  const int64_t sizes[] = {10000, 100000, 1000000};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    if (sizes[i] > max_tasks)
      break;
    AmkSynthSpec spec = spec_for_tasks(sizes[i]);
    double t0 = now_seconds();
    AmkModule *m = amk_synth_llama(&spec);
    double build = now_seconds() - t0;
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
      t0 = now_seconds();
      ok = amk_validate_module_ws(ws, m, diag, NULL, &r);
      double t = now_seconds() - t0;
      if (t < best)
        best = t;
    }
    char name[64];
    snprintf(name, sizeof name, "synth %d layers", spec.layers);
    printf("%-28s %9lld %12lld %11.2f ms %14.2f %9s   (%.0f ns/task; build %.2f s)\n",
           name, (long long)r.tasks, (long long)r.edges, best * 1e3, 1.0 / best,
           ok ? "VALID" : "REJECTED", best / (double)r.tasks * 1e9, build);
    amk_module_free(m);
  }
  amk_validator_workspace_free(ws);
  amk_diag_free(diag);
  return 0;
}
