/* amk-bench-pipeline: the whole compile pipeline at model scale (a command,
 * not a test).
 *
 *   amk-bench-pipeline [CONFIG_DIR...]
 *
 * For each model folder (default: the SmolLM2-135M, Llama-3.2-1B and
 * Llama-3.1-8B configs under examples/configs, shapes only) runs import,
 * tile, fuse, sm-assign, color and validate in-process, and prints the task
 * count after each pass, its wall time, the dependent hops per layer before
 * and after fusion, and the validator's verdict. Exits 1 if any pass fails.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amk/diag.h"
#include "amk/pass.h"
#include "../passes/schedule_rewrite.h"

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool bench_model(const char *dir) {
  static const char *const pipeline[] = {"import", "tile", "fuse",
                                         "sm-assign", "color", "validate"};
  const size_t n_passes = sizeof pipeline / sizeof pipeline[0];
  /* Diagnostics are captured: the remark that a config has no weights and
   * the validator's note are expected; errors are printed below. */
  AmkDiagEngine *diag = amk_diag_new(stderr);
  amk_diag_set_capture(diag, 1);
  AmkModule *m = amk_module_new();
  m->model_dir = dir;
  AmkPassContext ctx = {diag, NULL, 0, NULL};
  printf("%s\n", dir);
  printf("  %-10s %8s %10s %10s\n", "pass", "tasks", "counters", "time (s)");
  double total = 0;
  int64_t hops_tiled = 0, hops_fused = 0, path;
  bool ok = true;
  for (size_t i = 0; i < n_passes && ok; i++) {
    const AmkPassInfo *pass = amk_pass_lookup(pipeline[i]);
    if (!pass) {
      fprintf(stderr, "amk-bench-pipeline: no pass '%s'\n", pipeline[i]);
      ok = false;
      break;
    }
    double start = now_seconds();
    ok = pass->run(m, &ctx) && amk_diag_error_count(diag) == 0;
    double elapsed = now_seconds() - start;
    total += elapsed;
    printf("  %-10s %8u %10u %10.4f%s\n", pipeline[i], m->n_tasks, m->n_counters,
           elapsed, ok ? "" : "  FAILED");
    if (strcmp(pipeline[i], "tile") == 0)
      amk_rw_hops(m, &path, &hops_tiled);
    else if (strcmp(pipeline[i], "fuse") == 0)
      amk_rw_hops(m, &path, &hops_fused);
  }
  for (size_t d = 0; d < amk_diag_captured_count(diag); d++) {
    const AmkDiagnostic *dg = amk_diag_captured(diag, d);
    if (dg->severity == AMK_SEVERITY_ERROR)
      fprintf(stderr, "amk-bench-pipeline: %s: error: %s\n", dir, dg->message);
  }
  printf("  %-10s %8s %10s %10.4f\n", "total", "", "", total);
  printf("  dependent hops per layer: %lld tiled, %lld fused; validate: %s\n\n",
         (long long)hops_tiled, (long long)hops_fused, ok ? "VALID" : "errors");
  amk_module_free(m);
  amk_diag_free(diag);
  return ok;
}

int main(int argc, char **argv) {
  /* The bundled configs, found from the source tree this was built from. */
  static const char *const defaults[] = {"smollm2-135m", "llama-3.2-1b", "llama-3.1-8b"};
  bool ok = true;
  if (argc > 1) {
    for (int i = 1; i < argc; i++)
      ok = bench_model(argv[i]) && ok;
  } else {
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/examples/configs/%s", AMK_SOURCE_DIR, defaults[i]);
      ok = bench_model(path) && ok;
    }
  }
  return ok ? 0 : 1;
}
