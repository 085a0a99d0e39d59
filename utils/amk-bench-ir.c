/* amk-bench-ir: throughput of the IR front end on a generated program.
 *
 *   amk-bench-ir [--tasks N] [--reps R]
 *
 * Builds a reference-style decode lowering with at least N tasks (default
 * 100,000), then times JSON write, JSON read, text print, text parse and the
 * structural verifier, each the median of R runs (default 3), and prints a
 * table. A benchmark, not a test: it asserts nothing about speed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amk/io.h"
#include "amk/pass.h"
#include "amk/synth.h"

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef enum { JSON_WRITE, JSON_READ, TEXT_PRINT, TEXT_PARSE, VERIFY, N_STAGES } Stage;
static const char *const stage_names[N_STAGES] = {"json write", "json read", "text print",
                                                  "text parse", "verify"};

int main(int argc, char **argv) {
  int64_t want_tasks = 100000;
  int reps = 3;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--tasks") == 0 && i + 1 < argc)
      want_tasks = atoll(argv[++i]);
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: amk-bench-ir [--tasks N] [--reps R]\n");
      return 1;
    }
  }
  if (want_tasks < 1 || reps < 1 || reps > 100) {
    fprintf(stderr, "amk-bench-ir: --tasks must be positive and --reps in 1..100\n");
    return 1;
  }

  /* A Llama-like shape (hidden 1024, GQA 16/4, N_tile 64); layers are added
   * until the program has the requested number of tasks. */
  AmkSynthSpec spec = {.layers = 1, .hidden = 1024, .n_heads = 16, .n_kv_heads = 4,
                       .head_dim = 64, .intermediate = 4096, .vocab = 32000,
                       .n_tile = 64, .max_seq = 2048, .pos = 7};
  int64_t per_layer = amk_synth_task_count(&(AmkSynthSpec){.layers = 2, .hidden = 1024,
      .n_heads = 16, .n_kv_heads = 4, .head_dim = 64, .intermediate = 4096,
      .vocab = 32000, .n_tile = 64, .max_seq = 2048, .pos = 7}) -
                      amk_synth_task_count(&spec);
  while (amk_synth_task_count(&spec) < want_tasks)
    spec.layers += (int32_t)((want_tasks - amk_synth_task_count(&spec) + per_layer - 1) /
                             per_layer);
  AmkModule *m = amk_synth_llama(&spec);
  if (!m) {
    fprintf(stderr, "amk-bench-ir: could not build the program\n");
    return 1;
  }

  AmkDiagEngine *diag = amk_diag_new(stderr);
  double times[N_STAGES][100];
  size_t bytes[N_STAGES] = {0};
  for (int r = 0; r < reps; r++) {
    AmkStrBuf json, text;
    amk_sb_init(&json);
    amk_sb_init(&text);
    double t0 = now_seconds();
    amk_write_json(m, &json);
    times[JSON_WRITE][r] = now_seconds() - t0;
    bytes[JSON_WRITE] = bytes[JSON_READ] = json.len;

    t0 = now_seconds();
    AmkModule *from_json = amk_read_json("bench.json", json.data, json.len, diag);
    times[JSON_READ][r] = now_seconds() - t0;

    t0 = now_seconds();
    amk_print_text(m, &text);
    times[TEXT_PRINT][r] = now_seconds() - t0;
    bytes[TEXT_PRINT] = bytes[TEXT_PARSE] = text.len;

    amk_diag_set_source(diag, "bench.amkir", text.data, text.len);
    t0 = now_seconds();
    AmkModule *from_text = amk_parse_text("bench.amkir", text.data, text.len, diag);
    times[TEXT_PARSE][r] = now_seconds() - t0;

    t0 = now_seconds();
    bool verified = amk_verify_module(m, diag);
    times[VERIFY][r] = now_seconds() - t0;

    if (!from_json || !from_text || !verified) {
      fprintf(stderr, "amk-bench-ir: a stage failed on the generated program\n");
      return 1;
    }
    amk_module_free(from_json);
    amk_module_free(from_text);
    amk_sb_free(&json);
    amk_sb_free(&text);
  }

  printf("amk-bench-ir: %u tasks, %u buffers, %u counters (%d layers), median of %d runs\n\n",
         m->n_tasks, m->n_buffers, m->n_counters, spec.layers, reps);
  printf("| stage      | median s | tasks/s    | MB/s    |\n");
  printf("|------------|----------|------------|---------|\n");
  for (int s = 0; s < N_STAGES; s++) {
    qsort(times[s], (size_t)reps, sizeof(double), compare_double);
    double med = times[s][reps / 2];
    char mbs[32] = "";
    if (bytes[s] && med > 0)
      snprintf(mbs, sizeof mbs, "%.1f", (double)bytes[s] / 1e6 / med);
    printf("| %-10s | %8.4f | %10.0f | %7s |\n", stage_names[s], med,
           med > 0 ? m->n_tasks / med : 0.0, mbs);
  }
  amk_diag_free(diag);
  amk_module_free(m);
  return 0;
}
