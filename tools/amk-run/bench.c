/* The bench (--bench, on the GPU or the CPU reference VM) and traces
 * (--trace). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/backend.h"
#include "amk/fileio.h"
#include "amk/io.h"
#include "amk/strbuf.h"
#include "run.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

bool run_write_trace(const char *path, AmkEngine *engine, int64_t pos, AmkDiagEngine *diag) {
  AmkTrace tr;
  if (!amk_engine_trace(engine, &tr, diag))
    return false;
  AmkStrBuf json, report;
  amk_sb_init(&json);
  amk_sb_init(&report);
  amk_trace_chrome_json(&tr, &json);
  amk_trace_report(&tr, &report);
  bool ok = amk_write_file_atomic(path, json.data, json.len, diag) == 0;
  fprintf(stderr, "amk-run: trace of the launch at position %" PRId64 "%s%s\n%s", pos,
          ok ? " written to " : "", ok ? path : "", report.data ? report.data : "");
  amk_sb_free(&json);
  amk_sb_free(&report);
  return ok;
}

/* One row of the bench: a position's timings over every repetition. */
typedef struct {
  int64_t pos;
  size_t reps, steps; /* steps per repetition */
  double median_ms, p10_ms, p90_ms;
  double tps_mean, tps_sd; /* tokens/s over the repetitions' medians */
  double gbs, pct_read_bw; /* weights read per step at the median (GPU) */
  const char *check;       /* PASS, FAIL, or "-" (no reference: the CPU bench) */
  AmkLogitCheck cr;
} BenchRow;

static double median_of(double *v, size_t n) {
  qsort(v, n, sizeof *v, cmp_double);
  return v[n / 2];
}

/* The prefill the bench times (--bench-prompt). */
typedef struct {
  int64_t tokens, batch;
  size_t reps;
  double prefill_ms;    /* median wall time of the prompt's chunks */
  double first_step_ms; /* median wall time of the decode step after it */
  double ttft_ms;       /* median of prefill + that step, run by run */
  double tokens_per_s;  /* tokens / prefill_ms */
} BenchPrefill;

/* --trace with a timed prefill: one more launch of the first chunk (the
 * same rows again), stamped, written beside the decode trace as
 * NAME.prefill.json (NAME.json's stem). Returns the exit status. */
static int trace_prefill_chunk(const RunContext *rc, const int32_t *ids, int64_t len,
                               AmkDiagEngine *diag) {
  AmkStepStatus st = run_prefill_chunk(rc->prefill, ids, len, 0, diag);
  AmkEngine *e = run_prefill_last_engine(rc->prefill);
  if (st == AMK_STEP_OK && e) {
    amk_engine_set_tracing(e, true);
    st = run_prefill_chunk(rc->prefill, ids, len, 0, diag);
    amk_engine_set_tracing(e, false);
  }
  if (st != AMK_STEP_OK)
    return st == AMK_STEP_TIMEOUT ? EXIT_TIMEOUT : 1;
  const char *t = rc->o->trace;
  size_t stem = strlen(t);
  if (stem > 5 && strcmp(t + stem - 5, ".json") == 0)
    stem -= 5;
  AmkStrBuf path;
  amk_sb_init(&path);
  amk_sb_printf(&path, "%.*s.prefill.json", (int)stem, t);
  bool ok = run_write_trace(path.data, e, 0, diag);
  amk_sb_free(&path);
  return ok ? 0 : 1;
}

/* Feeds a P-token prompt from position 0 through the prefill programs (in
 * chunks of -b), then one decode step at position P, and times both on the
 * host's clock (each step waits for its launch: what a user waits for).
 * The prompt is the run's prompt ids repeated. One untimed round first
 * (the prefill programs compile then), then -r rounds (at least 3).
 * Returns the exit status. */
static int bench_prefill(const RunContext *rc, BenchPrefill *out, AmkDiagEngine *diag) {
  const RunOptions *o = rc->o;
  int64_t n = o->bench_prompt > 0 ? o->bench_prompt : 512;
  int32_t *ids = amk_xmalloc((size_t)(n + 1) * sizeof *ids);
  for (int64_t i = 0; i <= n; i++)
    ids[i] = rc->text->prompt[i % rc->text->n_prompt];
  size_t reps = (size_t)(o->bench_reps > 3 ? o->bench_reps : 3);
  double *pre = amk_xmalloc(reps * sizeof *pre), *step = amk_xmalloc(reps * sizeof *step);
  double *ttft = amk_xmalloc(reps * sizeof *ttft);
  int64_t batch = run_prefill_batch(rc->prefill);
  int status = 0;
  for (size_t r = 0; r <= reps && status == 0; r++) {
    double t0 = run_now_ms();
    for (int64_t pos = 0; pos < n && status == 0; pos += batch) {
      int64_t len = n - pos < batch ? n - pos : batch;
      AmkStepStatus st = run_prefill_chunk(rc->prefill, ids + pos, len, pos, diag);
      if (st != AMK_STEP_OK)
        status = st == AMK_STEP_TIMEOUT ? EXIT_TIMEOUT : 1;
    }
    double t1 = run_now_ms();
    if (status == 0) {
      AmkStepStatus st = amk_engine_step(rc->engine, ids[n], n, NULL, diag);
      if (st != AMK_STEP_OK)
        status = st == AMK_STEP_TIMEOUT ? EXIT_TIMEOUT : 1;
    }
    double t2 = run_now_ms();
    if (status == 0 && r > 0) { /* round 0 warms up (and compiles) */
      pre[r - 1] = t1 - t0;
      step[r - 1] = t2 - t1;
      ttft[r - 1] = t2 - t0;
    }
  }
  if (status == 0 && o->trace)
    status = trace_prefill_chunk(rc, ids, n < batch ? n : batch, diag);
  if (status == 0) {
    *out = (BenchPrefill){.tokens = n, .batch = batch, .reps = reps,
                          .prefill_ms = median_of(pre, reps),
                          .first_step_ms = median_of(step, reps),
                          .ttft_ms = median_of(ttft, reps)};
    out->tokens_per_s = out->prefill_ms > 0 ? (double)n * 1e3 / out->prefill_ms : 0;
  }
  free(ids);
  free(pre);
  free(step);
  free(ttft);
  return status;
}

/* llama-bench's outputs: a Markdown table (md, the default), csv, json (one
 * object) or jsonl (one object a row). */
static void print_rows(const RunContext *rc, const BenchRow *rows, size_t n, double read_bw,
                       int64_t wbytes, const BenchPrefill *pf, const char *format) {
  const char *device = rc->device;
  const char *engine = amk_engine_describe(rc->engine);
  bool gpu = strcmp(device, "cuda") == 0;
  if (strcmp(format, "md") == 0) {
    printf("AMK %s bench: %s\n", gpu ? "CUDA" : "CPU", engine);
    if (gpu)
      printf("weights %.3f GB; read bandwidth %.1f GB/s (measured in this run, 1 GiB read, "
             "median of 20)\n",
             (double)wbytes / 1e9, read_bw);
    else
      printf("weights %.3f GB; wall time per step\n", (double)wbytes / 1e9);
    printf("|    pos |  reps | steps | median ms |   p10 ms |   p90 ms |          tokens/s |"
           "     GB/s | %% read bw | check |\n");
    printf("|-------:|------:|------:|----------:|---------:|---------:|------------------:|"
           "---------:|----------:|:-----:|\n");
    for (size_t i = 0; i < n; i++) {
      const BenchRow *r = &rows[i];
      char pct[32] = "        -"; /* no read bandwidth measured on the CPU */
      if (read_bw > 0)
        snprintf(pct, sizeof pct, "%8.1f%%", r->pct_read_bw);
      printf("| %6" PRId64 " | %5zu | %5zu | %9.4f | %8.4f | %8.4f | %8.1f ± %6.1f | %8.1f |"
             " %9s | %5s |\n",
             r->pos, r->reps, r->steps, r->median_ms, r->p10_ms, r->p90_ms, r->tps_mean,
             r->tps_sd, r->gbs, pct, r->check);
    }
    if (pf) {
      printf("\n| prompt | chunk | reps | prefill ms | prefill tokens/s | first step ms | TTFT ms |\n");
      printf("|-------:|------:|-----:|-----------:|-----------------:|--------------:|--------:|\n");
      printf("| %6" PRId64 " | %5" PRId64 " | %4zu | %10.3f | %16.1f | %13.3f | %7.3f |\n",
             pf->tokens, pf->batch, pf->reps, pf->prefill_ms, pf->tokens_per_s,
             pf->first_step_ms, pf->ttft_ms);
    }
    return;
  }
  if (strcmp(format, "csv") == 0) {
    printf("device,engine,pos,reps,steps,median_ms,p10_ms,p90_ms,tokens_per_s,tokens_per_s_sd,"
           "gbs,pct_read_bw,check\n");
    for (size_t i = 0; i < n; i++) {
      const BenchRow *r = &rows[i];
      /* The engine's line may hold commas: quoted, as CSV quotes. */
      printf("%s,\"", device);
      for (const char *c = engine; *c; c++)
        printf(*c == '"' ? "\"\"" : "%c", *c);
      printf("\",%" PRId64 ",%zu,%zu,%.5f,%.5f,%.5f,%.2f,%.2f,%.2f,%.2f,%s\n", r->pos, r->reps,
             r->steps, r->median_ms, r->p10_ms, r->p90_ms, r->tps_mean, r->tps_sd, r->gbs,
             r->pct_read_bw, r->check);
    }
    if (pf)
      printf("\nprompt,chunk,reps,prefill_ms,prefill_tokens_per_s,first_step_ms,ttft_ms\n"
             "%" PRId64 ",%" PRId64 ",%zu,%.5f,%.2f,%.5f,%.5f\n",
             pf->tokens, pf->batch, pf->reps, pf->prefill_ms, pf->tokens_per_s,
             pf->first_step_ms, pf->ttft_ms);
    return;
  }
  bool lines = strcmp(format, "jsonl") == 0;
  AmkStrBuf out;
  amk_sb_init(&out);
  if (!lines) {
    amk_sb_printf(&out, "{\"device\": \"%s\", \"%s\": ", device, gpu ? "gpu" : "engine");
    amk_write_json_string(engine, &out);
    amk_sb_printf(&out, ", \"weight_bytes\": %" PRId64 ", \"read_bw_gbs\": %.2f, \"results\": [",
                  wbytes, read_bw);
  }
  for (size_t i = 0; i < n; i++) {
    const BenchRow *r = &rows[i];
    if (lines) {
      amk_sb_printf(&out, "{\"device\": \"%s\", \"engine\": ", device);
      amk_write_json_string(engine, &out);
      amk_sb_printf(&out, ", \"weight_bytes\": %" PRId64 ", ", wbytes);
    } else {
      amk_sb_puts(&out, i ? ", {" : "{");
    }
    amk_sb_printf(&out,
                  "\"pos\": %" PRId64 ", \"reps\": %zu, \"steps\": %zu, \"median_ms\": %.5f, "
                  "\"p10_ms\": %.5f, \"p90_ms\": %.5f, \"gbs\": %.2f, \"pct_read_bw\": %.2f, "
                  "\"tokens_per_s\": %.2f, \"tokens_per_s_sd\": %.2f, \"check\": \"%s\"",
                  r->pos, r->reps, r->steps, r->median_ms, r->p10_ms, r->p90_ms, r->gbs,
                  r->pct_read_bw, r->tps_mean, r->tps_sd, r->check);
    if (gpu)
      amk_sb_printf(&out,
                    ", \"max_abs_diff\": %.6g, \"logit_scale\": %.6g, \"ref_token\": %d, "
                    "\"gpu_token\": %d",
                    r->cr.max_abs, r->cr.scale, r->cr.ref_token, r->cr.gpu_token);
    amk_sb_puts(&out, lines ? "}\n" : "}");
  }
  if (pf) {
    if (lines) {
      amk_sb_printf(&out, "{\"device\": \"%s\", \"engine\": ", device);
      amk_write_json_string(engine, &out);
      amk_sb_puts(&out, ", \"prefill\": {");
    } else {
      amk_sb_puts(&out, "], \"prefill\": {");
    }
    amk_sb_printf(&out,
                  "\"prompt_tokens\": %" PRId64 ", \"chunk\": %" PRId64 ", \"reps\": %zu, "
                  "\"prefill_ms\": %.5f, \"prefill_tokens_per_s\": %.2f, "
                  "\"first_step_ms\": %.5f, \"ttft_ms\": %.5f}",
                  pf->tokens, pf->batch, pf->reps, pf->prefill_ms, pf->tokens_per_s,
                  pf->first_step_ms, pf->ttft_ms);
    amk_sb_puts(&out, lines ? "}\n" : "}\n");
  } else if (!lines) {
    amk_sb_puts(&out, "]}\n");
  }
  fputs(out.data ? out.data : "", stdout);
  amk_sb_free(&out);
}

/* --bench: for each position, on the GPU one step checked against the
 * reference VM, then warm-up and -r repetitions of timed steps (kernel
 * time by CUDA events; on the CPU, the VM's wall time per step). Returns
 * the exit status. */
int run_bench(const RunContext *rc, AmkDiagEngine *diag) {
  const RunOptions *o = rc->o;
  AmkEngine *engine = rc->engine, *reference = rc->reference;
  bool gpu = strcmp(rc->device, "cuda") == 0;
  if (o->bench_prompt > 0 && !rc->prefill) {
    fprintf(stderr, "amk-run: error: --bench-prompt times prefill programs, which this run "
                    "does not use (-b 1, a compiled program, fuse in --passes, random weights "
                    "or --tp; -v says which)\n");
    return 1;
  }
  /* The default prompt is timed where it fits; one asked for must fit. */
  int64_t prompt = o->bench_prompt > 0 ? o->bench_prompt : 512;
  bool time_prefill = rc->prefill && prompt < amk_engine_max_seq(engine);
  if (rc->prefill && !time_prefill && o->verbose)
    fprintf(stderr, "amk-run: the prefill is not timed: the default --bench-prompt 512 does "
                    "not fit the KV cache (%" PRId64 " rows)\n",
            amk_engine_max_seq(engine));
  if (rc->prefill && !time_prefill && o->bench_prompt > 0) {
    fprintf(stderr, "amk-run: error: --bench-prompt %" PRId64 " leaves no room for a decode "
                    "step in the KV cache (%" PRId64 " rows); compile with a larger "
                    "-c/--ctx-size\n",
            prompt, amk_engine_max_seq(engine));
    return 1;
  }
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
  double read_bw = gpu ? amk_engine_measure_read_bw(engine, 0, 20, diag) : 0;
  int64_t wbytes = amk_engine_weight_bytes(engine);
  size_t reps = (size_t)(o->bench_reps > 0 ? o->bench_reps : 1), steps = (size_t)o->bench_steps;
  double *times = amk_xmalloc(reps * steps * sizeof *times);
  double *rep_times = amk_xmalloc(steps * sizeof *rep_times);
  double *tps = amk_xmalloc(reps * sizeof *tps);
  BenchRow *rows = amk_xcalloc(n_pos, sizeof *rows);
  size_t n_rows = 0;
  if (gpu)
    amk_engine_set_tracing(engine, false);
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
    BenchRow *row = &rows[n_rows];
    *row = (BenchRow){.pos = pos, .reps = reps, .steps = steps, .check = "-"};
    AmkStepStatus st;
    if (reference) { /* the correctness check of this run */
      st = amk_engine_step(engine, token, pos, NULL, diag);
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
      row->cr = amk_check_logits(ref, got, nv < ng ? nv : ng, low);
      row->check = row->cr.pass ? "PASS" : "FAIL";
    }
    bool kernel_time = amk_engine_measures_kernel_time(engine);
    for (size_t r = 0; r < reps && status == 0; r++) {
      for (int64_t i = 0; i < (r == 0 ? o->bench_warmup : 0) + (int64_t)steps && status == 0;
           i++) {
        float ms = 0;
        double t0 = run_now_ms();
        st = amk_engine_step(engine, token, pos, kernel_time ? &ms : NULL, diag);
        double wall = run_now_ms() - t0;
        int64_t timed = i - (r == 0 ? o->bench_warmup : 0);
        if (st != AMK_STEP_OK)
          status = st == AMK_STEP_TIMEOUT ? EXIT_TIMEOUT : 1;
        else if (timed >= 0)
          rep_times[timed] = times[r * steps + (size_t)timed] = kernel_time ? ms : wall;
      }
      if (status == 0) {
        double med = median_of(rep_times, steps);
        tps[r] = med > 0 ? 1e3 / med : 0;
      }
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
      if (!run_write_trace(o->trace, engine, pos, diag)) {
        status = 1;
        break;
      }
    }
    size_t n = reps * steps;
    qsort(times, n, sizeof *times, cmp_double);
    row->median_ms = times[n / 2];
    row->p10_ms = times[n / 10];
    row->p90_ms = times[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1];
    double sum = 0, sq = 0;
    for (size_t r = 0; r < reps; r++)
      sum += tps[r];
    row->tps_mean = sum / (double)reps;
    for (size_t r = 0; r < reps; r++)
      sq += (tps[r] - row->tps_mean) * (tps[r] - row->tps_mean);
    row->tps_sd = reps > 1 ? sqrt(sq / (double)(reps - 1)) : 0;
    row->gbs = row->median_ms > 0 ? (double)wbytes / (row->median_ms * 1e-3) / 1e9 : 0;
    row->pct_read_bw = read_bw > 0 ? 100.0 * row->gbs / read_bw : 0;
    n_rows++;
    const AmkLogitCheck *cr = &row->cr;
    if (reference && !cr->pass) {
      if (cr->got_nonfinite > cr->ref_nonfinite)
        fprintf(stderr, "amk-run: CHECK FAILED at bench position %" PRId64 ": %zu GPU logits "
                        "are not finite (NaN or Inf); the reference VM has %zu\n",
                pos, cr->got_nonfinite, cr->ref_nonfinite);
      else
        fprintf(stderr, "amk-run: CHECK FAILED at bench position %" PRId64 ": max |diff| %.6g, "
                        "logit scale %.6g, tokens ref %d gpu %d\n",
                pos, cr->max_abs, cr->scale, cr->ref_token, cr->gpu_token);
      status = 2;
    }
  }
  /* The prefill of a --bench-prompt prompt, with prefill programs. */
  BenchPrefill pf = {0};
  bool timed_prefill = false;
  if (status == 0 && time_prefill) {
    status = bench_prefill(rc, &pf, diag);
    timed_prefill = status == 0;
  }
  if (n_rows)
    print_rows(rc, rows, n_rows, read_bw, wbytes, timed_prefill ? &pf : NULL,
               o->bench_format ? o->bench_format : o->json ? "json" : "md");
  free(rows);
  free(tps);
  free(rep_times);
  free(times);
  return status;
}
