/* The GPU bench (--bench) and traces (--trace). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/backend.h"
#include "amk/fileio.h"
#include "amk/strbuf.h"
#include "run.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

bool run_write_trace(const RunOptions *o, AmkEngine *engine, int64_t pos, AmkDiagEngine *diag) {
  AmkTrace tr;
  if (!amk_engine_trace(engine, &tr, diag))
    return false;
  AmkStrBuf json, report;
  amk_sb_init(&json);
  amk_sb_init(&report);
  amk_trace_chrome_json(&tr, &json);
  amk_trace_report(&tr, &report);
  bool ok = amk_write_file_atomic(o->trace, json.data, json.len, diag) == 0;
  fprintf(stderr, "amk-run: trace of the launch at position %" PRId64 "%s%s\n%s", pos,
          ok ? " written to " : "", ok ? o->trace : "", report.data ? report.data : "");
  amk_sb_free(&json);
  amk_sb_free(&report);
  return ok;
}

/* --bench: for each position, one checked step against the reference,
 * warm-up, then timed steps of the engine. Returns the exit status. */
int run_bench(const RunContext *rc, AmkDiagEngine *diag) {
  const RunOptions *o = rc->o;
  AmkEngine *engine = rc->engine, *reference = rc->reference;
  int64_t positions[64];
  size_t n_pos = 0;
  const char *p = o->bench_pos ? o->bench_pos : "0";
  while (*p && n_pos < 64) {
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 0 || (*end && *end != ',')) {
      fprintf(stderr, "amk-run: error: --bench-pos takes positions like 0,1024, not '%s'\n",
              o->bench_pos);
      return 1;
    }
    positions[n_pos++] = v;
    p = *end ? end + 1 : end;
  }
  bool low = amk_engine_plan(engine)->low_precision;
  int32_t token = rc->text->prompt[0];
  double read_bw = amk_engine_measure_read_bw(engine, 0, 20, diag);
  int64_t wbytes = amk_engine_weight_bytes(engine);
  double *times = amk_xmalloc((size_t)o->bench_steps * sizeof *times);
  amk_engine_set_tracing(engine, false);
  AmkStrBuf rows, js;
  amk_sb_init(&rows);
  amk_sb_init(&js);
  int status = 0;
  for (size_t k = 0; k < n_pos && status == 0; k++) {
    int64_t pos = positions[k];
    if (pos >= amk_engine_max_seq(engine)) {
      fprintf(stderr, "amk-run: error: bench position %" PRId64 " is beyond the KV cache (%" PRId64
                      " rows); compile with a larger -c/--ctx-size\n",
              pos, amk_engine_max_seq(engine));
      status = 1;
      break;
    }
    /* The correctness check of this run. */
    AmkStepStatus st = amk_engine_step(engine, token, pos, NULL, diag);
    if (st != AMK_STEP_OK) {
      status = st == AMK_STEP_TIMEOUT ? EXIT_TIMEOUT : 1;
      break;
    }
    if (amk_engine_step(reference, token, pos, NULL, diag) != AMK_STEP_OK) {
      status = 1;
      break;
    }
    size_t nv = 0, ng = 0;
    const float *ref = amk_engine_logits(reference, &nv);
    const float *got = amk_engine_logits(engine, &ng);
    AmkLogitCheck cr = amk_check_logits(ref, got, nv < ng ? nv : ng, low);
    for (int64_t i = 0; i < o->bench_warmup + o->bench_steps && status == 0; i++) {
      float ms = 0;
      st = amk_engine_step(engine, token, pos, &ms, diag);
      if (st != AMK_STEP_OK)
        status = st == AMK_STEP_TIMEOUT ? EXIT_TIMEOUT : 1;
      else if (i >= o->bench_warmup)
        times[i - o->bench_warmup] = ms;
    }
    if (status)
      break;
    if (o->trace) { /* one traced launch after the timed, untraced ones */
      amk_engine_set_tracing(engine, true);
      st = amk_engine_step(engine, token, pos, NULL, diag);
      amk_engine_set_tracing(engine, false);
      if (st != AMK_STEP_OK) {
        status = st == AMK_STEP_TIMEOUT ? EXIT_TIMEOUT : 1;
        break;
      }
      if (!run_write_trace(o, engine, pos, diag)) {
        status = 1;
        break;
      }
    }
    size_t n = (size_t)o->bench_steps;
    qsort(times, n, sizeof *times, cmp_double);
    double med = times[n / 2], p10 = times[n / 10], p90 = times[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1];
    double gbs = med > 0 ? (double)wbytes / (med * 1e-3) / 1e9 : 0;
    double pct = read_bw > 0 ? 100.0 * gbs / read_bw : 0;
    amk_sb_printf(&rows, "| %6" PRId64 " | %5zu | %9.4f | %8.4f | %8.4f | %8.1f | %6.1f%% | %9.1f | %s |\n",
                  pos, n, med, p10, p90, gbs, pct, med > 0 ? 1e3 / med : 0,
                  cr.pass ? "PASS" : "FAIL");
    amk_sb_printf(&js,
                  "%s{\"pos\": %" PRId64 ", \"steps\": %zu, \"median_ms\": %.5f, \"p10_ms\": %.5f, "
                  "\"p90_ms\": %.5f, \"gbs\": %.2f, \"pct_read_bw\": %.2f, \"tokens_per_s\": %.2f, "
                  "\"check\": \"%s\", \"max_abs_diff\": %.6g, \"logit_scale\": %.6g, "
                  "\"ref_token\": %d, \"gpu_token\": %d}",
                  k ? ", " : "", pos, n, med, p10, p90, gbs, pct, med > 0 ? 1e3 / med : 0,
                  cr.pass ? "PASS" : "FAIL", cr.max_abs, cr.scale, cr.ref_token, cr.gpu_token);
    if (!cr.pass) {
      if (cr.got_nonfinite > cr.ref_nonfinite)
        fprintf(stderr, "amk-run: CHECK FAILED at bench position %" PRId64 ": %zu GPU logits "
                        "are not finite (NaN or Inf); the reference VM has %zu\n",
                pos, cr.got_nonfinite, cr.ref_nonfinite);
      else
        fprintf(stderr, "amk-run: CHECK FAILED at bench position %" PRId64 ": max |diff| %.6g, "
                        "logit scale %.6g, tokens ref %d gpu %d\n",
                pos, cr.max_abs, cr.scale, cr.ref_token, cr.gpu_token);
      status = 2;
    }
  }
  if (o->json) {
    printf("{\"device\": \"cuda\", \"gpu\": \"%s\", \"weight_bytes\": %" PRId64
           ", \"read_bw_gbs\": %.2f, \"results\": [%s]}\n",
           amk_engine_describe(engine), wbytes, read_bw, js.data ? js.data : "");
  } else if (rows.data) {
    printf("AMK CUDA bench: %s\n", amk_engine_describe(engine));
    printf("weights %.3f GB; read bandwidth %.1f GB/s (measured in this run, 1 GiB read, median "
           "of 20)\n",
           (double)wbytes / 1e9, read_bw);
    printf("|    pos | steps | median ms |   p10 ms |   p90 ms |     GB/s | %% read bw |  tokens/s | check |\n");
    printf("|--------|-------|-----------|----------|----------|----------|-----------|-----------|-------|\n");
    fputs(rows.data, stdout);
  }
  amk_sb_free(&rows);
  amk_sb_free(&js);
  free(times);
  return status;
}
