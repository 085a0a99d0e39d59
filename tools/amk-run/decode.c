/* Decoding: the prompt, then new tokens until -n of them, an end-of-sequence
 * token or the end of the KV cache; then the timing report in llama.cpp's
 * form (and with --json the whole result). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/fileio.h"
#include "amk/numerics.h"
#include "amk/strbuf.h"
#include "run.h"

typedef struct {
  const RunContext *rc;
  const RunOptions *o;
  const RunText *text;
  int32_t *sequence; /* prompt, then the generated tokens */
  int64_t n_seq, n_prompt, total;
  bool done;               /* no more tokens wanted */
  bool stopped_at_eos;     /* the end: an end-of-sequence token (not in sequence) */
  int32_t eos_token;
  double first_token_ms;   /* device decoding: when the first new token arrived (-1: not yet) */
  double prompt_ms, eval_ms, kernel_ms;
  int64_t eval_steps, launches;
  int64_t checked;         /* --check: steps compared */
  double worst_rel;
  bool on_device;
} Decoder;

/* A token chosen after the prompt. An end-of-sequence token (unless
 * --ignore-eos) ends decoding and is not kept; any other is kept and
 * printed. False when no more tokens are wanted. */
static bool accept_token(Decoder *d, int32_t token) {
  if (!d->o->ignore_eos && amk_generation_config_is_eos(&d->text->gen, token)) {
    d->stopped_at_eos = true;
    d->eos_token = token;
    d->done = true;
    return false;
  }
  d->sequence[d->n_seq++] = token;
  const TokenPrinter *p = &d->text->printer;
  if (p->print)
    p->print(p->ctx, token, d->n_seq - 1 - d->n_prompt);
  d->done = d->n_seq == d->total;
  return !d->done;
}

/* Device decoding calls this with every launch's argmax. The engine may
 * still drain launches queued before it was told to stop: those only
 * count. */
static bool device_token(void *ctx, int64_t step, int32_t token) {
  Decoder *d = ctx;
  d->launches++;
  if (d->done)
    return false;
  if (step + 1 < d->n_prompt)
    return true; /* a prompt step: its argmax is not used */
  if (d->first_token_ms < 0)
    d->first_token_ms = run_now_ms();
  return accept_token(d, token);
}

/* Greedy decoding with nothing else to do per step stays on the device: no
 * logits come back, the device picks and feeds each token. */
static int decode_on_device(Decoder *d, AmkDiagEngine *diag) {
  AmkGenerate g = {.feed = d->text->prompt,
                   .n_feed = d->n_prompt,
                   .pos = 0,
                   .n_steps = d->total - 1,
                   .on_token = device_token,
                   .ctx = d};
  double t0 = run_now_ms(), kms = 0;
  AmkStepStatus st = amk_engine_generate(d->rc->engine, &g, &kms, diag);
  double t1 = run_now_ms();
  d->kernel_ms = kms;
  double first = d->first_token_ms >= 0 ? d->first_token_ms : t1;
  d->prompt_ms = first - t0;
  d->eval_ms = t1 - first;
  d->eval_steps = d->launches > d->n_prompt ? d->launches - d->n_prompt : 0;
  if (st != AMK_STEP_OK)
    return st == AMK_STEP_TIMEOUT ? EXIT_TIMEOUT : 1;
  return 0;
}

static void write_logits_row(AmkStrBuf *sb, const float *logits, size_t n, bool first_row) {
  amk_sb_puts(sb, first_row ? "[\n  [" : ",\n  [");
  for (size_t i = 0; i < n; i++) {
    char num[32];
    amk_format_float_repr((double)logits[i], num);
    if (i)
      amk_sb_puts(sb, ", ");
    amk_sb_puts(sb, num);
  }
  amk_sb_putc(sb, ']');
}

/* --check: the reference VM steps the same token; the engine's logits must
 * match its own. Returns the exit status (0: go on). */
static int check_step(Decoder *d, int64_t pos, const float *logits, size_t vocab,
                      AmkDiagEngine *diag) {
  AmkEngine *reference = d->rc->reference;
  if (amk_engine_step(reference, d->sequence[pos], pos, NULL, diag) != AMK_STEP_OK)
    return 1;
  size_t nv;
  const float *ref = amk_engine_logits(reference, &nv);
  size_t ref_bad = amk_count_nonfinite(ref, nv), got_bad = amk_count_nonfinite(logits, vocab);
  if (got_bad > ref_bad) {
    fprintf(stderr,
            "amk-run: CHECK FAILED at step %" PRId64 " (position %" PRId64 "): %zu of %zu "
            "GPU logits are not finite (NaN or Inf); the reference VM has %zu\n",
            pos, pos, got_bad, vocab, ref_bad);
    return 2;
  }
  if (got_bad)
    return 0; /* the non-finite logits are reported as an error next */
  bool low = amk_engine_plan(d->rc->engine)->low_precision;
  AmkLogitCheck cr = amk_check_logits(ref, logits, nv < vocab ? nv : vocab, low);
  double rel = cr.max_abs / (cr.scale > 1 ? cr.scale : 1);
  if (rel > d->worst_rel)
    d->worst_rel = rel;
  d->checked++;
  if (cr.pass)
    return 0;
  fprintf(stderr,
          "amk-run: CHECK FAILED at step %" PRId64 " (position %" PRId64 ", token %d): max "
          "|gpu - ref| = %.6g against a logit scale of %.6g (%s); greedy tokens ref %d, "
          "gpu %d\n",
          pos, pos, d->sequence[pos], cr.max_abs, cr.scale,
          low ? "bf16/f16: within 5% of the scale, greedy tokens equal unless a rounding tie"
              : "f32 tolerance 1e-4 of the scale",
          cr.ref_token, cr.gpu_token);
  return 2;
}

/* Feeds every token of the sequence; after the prompt each step's logits
 * choose the next token. With --dump-logits the last generated token is fed
 * too, so there is a row for every token of the sequence; an
 * end-of-sequence token is not fed. *last_launch receives the position of
 * the last step. Returns the exit status. */
static int decode_step_by_step(Decoder *d, AmkStrBuf *dump, int64_t *last_launch,
                               AmkDiagEngine *diag) {
  const RunOptions *o = d->o;
  AmkEngine *engine = d->rc->engine;
  AmkSampler sampler;
  amk_sampler_init(&sampler, &o->sampling);
  int status = 0;
  for (int64_t pos = 0; pos < d->n_seq && status == 0; pos++) {
    double t0 = run_now_ms();
    float kms = 0;
    AmkStepStatus st = amk_engine_step(engine, d->sequence[pos], pos, &kms, diag);
    if (st != AMK_STEP_OK) {
      status = st == AMK_STEP_TIMEOUT ? EXIT_TIMEOUT : 1;
      break;
    }
    d->kernel_ms += kms;
    *last_launch = pos;
    d->launches++;
    size_t vocab;
    const float *logits = amk_engine_logits(engine, &vocab);
    double dt = run_now_ms() - t0;
    if (o->check && (o->check_steps == 0 || d->checked < o->check_steps) &&
        (status = check_step(d, pos, logits, vocab, diag)) != 0)
      break;
    size_t nonfinite = amk_count_nonfinite(logits, vocab);
    if (nonfinite) {
      fprintf(stderr,
              "amk-run: error: step %" PRId64 " (position %" PRId64 ", token %d): %zu of %zu "
              "logits are not finite (NaN or Inf); the weights or the program produce "
              "non-finite values\n",
              pos, pos, d->sequence[pos], nonfinite, vocab);
      status = 1;
      break;
    }
    if (pos < d->n_prompt)
      d->prompt_ms += dt;
    else
      d->eval_ms += dt, d->eval_steps++;
    if (o->dump_logits)
      write_logits_row(dump, logits, vocab, pos == 0);
    if (pos == d->n_seq - 1 && !d->done) {
      bool more = accept_token(d, amk_sample(&sampler, logits, vocab));
      /* --dump-logits feeds the last kept token too, for its row. */
      if (!more && (d->stopped_at_eos || !o->dump_logits))
        break;
    }
  }
  amk_sampler_free(&sampler);
  return status;
}

static void print_timing_line(const char *what, double ms, int64_t count, const char *unit) {
  fprintf(stderr, "amk-run: %16s = %10.2f ms / %5" PRId64 " %-6s", what, ms, count, unit);
  if (count > 0 && ms > 0)
    fprintf(stderr, " (%8.2f ms per token, %9.2f tokens per second)", ms / (double)count,
            1e3 * (double)count / ms);
  fputc('\n', stderr);
}

static void print_json(const Decoder *d) {
  const RunContext *rc = d->rc;
  printf("{\"prompt\": [");
  for (int64_t i = 0; i < d->n_prompt; i++)
    printf("%s%d", i ? ", " : "", d->sequence[i]);
  printf("], \"generated\": [");
  for (int64_t i = d->n_prompt; i < d->n_seq; i++)
    printf("%s%d", i > d->n_prompt ? ", " : "", d->sequence[i]);
  printf("], \"stop\": \"%s\", \"seed\": %" PRId64 ", \"device\": \"%s\", "
         "\"timing\": {\"load_ms\": %.3f, \"prompt_ms\": %.3f, \"prompt_tokens\": %" PRId64
         ", \"eval_ms\": %.3f, \"eval_tokens\": %" PRId64 ", \"ms_per_token\": %.4f, "
         "\"tokens_per_second\": %.2f}",
         d->stopped_at_eos ? "eos" : "length", (int64_t)d->o->sampling.seed, rc->device,
         rc->t_loaded - rc->t_start, d->prompt_ms, d->n_prompt, d->eval_ms, d->eval_steps,
         d->eval_steps ? d->eval_ms / (double)d->eval_steps : 0.0,
         d->eval_ms > 0 ? 1e3 * (double)d->eval_steps / d->eval_ms : 0.0);
  if (d->o->check)
    printf(", \"check\": {\"steps\": %" PRId64 ", \"worst_rel_diff\": %.6g}", d->checked,
           d->worst_rel);
  printf("}\n");
}

static void print_report(const Decoder *d, double t_end) {
  const RunContext *rc = d->rc;
  if (d->stopped_at_eos && !d->o->json)
    fprintf(stderr, "amk-run: end of sequence: token %" PRId32 " (eos_token_id of %s)\n",
            d->eos_token, d->text->gen.eos_file);
  fprintf(stderr, "amk-run: %16s = %10.2f ms\n", "load time", rc->t_loaded - rc->t_start);
  print_timing_line("prompt eval time", d->prompt_ms, d->n_prompt, "tokens");
  print_timing_line("eval time", d->eval_ms, d->eval_steps, "runs");
  fprintf(stderr, "amk-run: %16s = %10.2f ms / %5" PRId64 " tokens\n", "total time",
          t_end - rc->t_start, d->n_seq);
  if (amk_engine_measures_kernel_time(rc->engine))
    fprintf(stderr, "amk-run: %16s = %10.2f ms (CUDA events, %" PRId64 " launches%s)\n",
            "kernel time", d->kernel_ms, d->launches,
            d->on_device ? ", tokens chosen on the device" : "");
  if (d->o->check)
    fprintf(stderr, "amk-run: check PASS: %" PRId64 " steps against the reference VM, worst "
                    "max|diff|/scale %.3g\n", d->checked, d->worst_rel);
}

int run_decode(const RunContext *rc, AmkDiagEngine *diag) {
  const RunOptions *o = rc->o;
  const RunText *text = rc->text;
  int64_t max_seq = amk_engine_max_seq(rc->engine);
  int64_t n_prompt = (int64_t)text->n_prompt;
  /* -n -1: as many as the KV cache holds after the prompt. */
  int64_t n_new = o->n_new >= 0 ? o->n_new : (max_seq > n_prompt ? max_seq - n_prompt : 0);
  int64_t total = n_prompt + n_new;
  if (total > max_seq) {
    fprintf(stderr, "amk-run: error: %" PRId64 " prompt and new tokens do not fit the KV cache "
                    "of %" PRId64 " positions; compile with a larger -c/--ctx-size\n",
            total, max_seq);
    return 1;
  }
  run_text_note(text, o);
  Decoder d = {.rc = rc, .o = o, .text = text, .n_prompt = n_prompt, .total = total,
               .first_token_ms = -1};
  d.sequence = amk_xmalloc((size_t)(total > 0 ? total : 1) * sizeof *d.sequence);
  memcpy(d.sequence, text->prompt, text->n_prompt * sizeof *d.sequence);
  d.n_seq = n_prompt;
  d.done = d.n_seq >= total;
  AmkStrBuf dump;
  amk_sb_init(&dump);
  int64_t last_launch = -1; /* the position of the last GPU launch */
  d.on_device = o->sampling.temperature <= 0 && !o->check && !o->dump_logits && !o->trace &&
                n_prompt > 0 && n_new > 0 && amk_engine_can_generate(rc->engine);
  int status = d.on_device ? decode_on_device(&d, diag)
                           : decode_step_by_step(&d, &dump, &last_launch, diag);
  double t_end = run_now_ms();
  if (status == 0 && n_new != 0 && text->printer.finish)
    text->printer.finish(text->printer.ctx);
  fflush(stdout); /* the tokens' line ends before the reports */
  if (status == 0 && o->trace && last_launch >= 0 &&
      !run_write_trace(o, rc->engine, last_launch, diag))
    status = 1;
  if (status == 0 && o->dump_logits) {
    if (d.n_seq == 0)
      amk_sb_puts(&dump, "[");
    amk_sb_puts(&dump, "\n]\n");
    if (amk_write_file_atomic(o->dump_logits, dump.data, dump.len, diag) != 0)
      status = 1;
  }
  if (status == 0 && o->json)
    print_json(&d);
  if (status == 0)
    print_report(&d, t_end);
  amk_sb_free(&dump);
  free(d.sequence);
  return status;
}
