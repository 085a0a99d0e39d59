/* Decoding: the prompt, then new tokens until -n of them, an end-of-sequence
 * token or the end of the KV cache; then the timing report in llama.cpp's
 * form (and with --json the whole result). Chat mode decodes turn after
 * turn on one KV cache: each turn feeds only its new tokens, at the
 * positions after those the cache already holds. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/fileio.h"
#include "amk/numerics.h"
#include "amk/progress.h"
#include "amk/strbuf.h"
#include "run.h"

typedef struct {
  const RunContext *rc;
  const RunOptions *o;
  const RunText *text;
  /* The tokens at positions 0, 1, ...: the prompt (in chat mode every
   * turn's), then the generated tokens. The KV cache holds the first n_fed;
   * a decode feeds from there. */
  int32_t *sequence;
  int64_t n_seq, n_fed;
  int64_t n_prompt;        /* where this decode's prompt ends (its first new token's place) */
  int64_t total;           /* this decode ends when n_seq reaches it */
  bool done;               /* no more tokens wanted */
  bool failed;             /* a token could not be printed (reported) */
  bool stopped_at_eos;     /* the end: an end-of-sequence token (not in sequence) */
  int32_t eos_token;
  double first_token_ms;   /* device decoding: when the first new token arrived (-1: not yet) */
  double prompt_ms, eval_ms, kernel_ms;
  int64_t prompt_tokens;   /* fed as prompt, over all decodes */
  int64_t eval_steps, launches;
  int64_t checked;         /* --check: steps compared */
  double worst_rel;
  bool on_device;
  AmkSampler *sampler; /* one over the whole run: a chat's turns draw on */
  /* The prompt's text waits until the prompt is evaluated, so that the
   * progress line drawn meanwhile does not overwrite it on the terminal. */
  bool prompt_unprinted;
} Decoder;

/* The prompt's text (or nothing, for ids), once. False after reporting. */
static bool print_prompt(Decoder *d) {
  if (!d->prompt_unprinted)
    return true;
  d->prompt_unprinted = false;
  const TokenPrinter *p = &d->text->printer;
  return !p->begin || p->begin(p->ctx, d->text->prompt, d->text->n_prompt);
}

/* Whether `token` ends this decode: an end-of-sequence id (unless
 * --ignore-eos), or in chat mode also the template's end of turn. */
static bool is_stop(const Decoder *d, int32_t token) {
  /* A chat reply also ends at the tokenizer's EOS (tokenizer_config.json's
   * eos_token), as llama.cpp ends a turn at any end-of-generation token. */
  if (d->o->chat && !d->o->ignore_eos &&
      (token == d->text->end_of_turn || amk_tokenizer_is_eos(d->text->tok, token)))
    return true;
  return !d->o->ignore_eos && amk_generation_config_is_eos(&d->text->gen, token);
}

/* A token chosen after the prompt. A stop token ends decoding and is not
 * kept; any other is kept and printed. False when no more tokens are
 * wanted. */
static bool accept_token(Decoder *d, int32_t token) {
  if (!print_prompt(d)) {
    d->failed = d->done = true;
    return false;
  }
  if (is_stop(d, token)) {
    d->stopped_at_eos = true;
    d->eos_token = token;
    d->done = true;
    return false;
  }
  d->sequence[d->n_seq++] = token;
  const TokenPrinter *p = &d->text->printer;
  if (p->print && !p->print(p->ctx, token, d->n_seq - 1 - d->n_prompt)) {
    d->failed = d->done = true;
    return false;
  }
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
  if (d->n_fed + step + 1 < d->n_prompt)
    return true; /* a prompt step: its argmax is not used */
  if (d->first_token_ms < 0)
    d->first_token_ms = run_now_ms();
  return accept_token(d, token);
}

/* Greedy decoding with nothing else to do per step stays on the device: no
 * logits come back, the device picks and feeds each token. Launch i feeds
 * the token at position n_fed + i: the known tokens not yet fed (the rest
 * of the prompt, or after a prefill the first new token), then its own. */
static int decode_on_device(Decoder *d, AmkDiagEngine *diag) {
  int64_t start = d->n_fed, n_feed = d->n_seq - start, launches0 = d->launches;
  int64_t n_prompt_feed = d->n_prompt > start ? d->n_prompt - start : 0;
  AmkGenerate g = {.feed = d->sequence + start,
                   .n_feed = n_feed,
                   .pos = start,
                   .n_steps = d->total - 1 - start,
                   .on_token = device_token,
                   .ctx = d};
  d->first_token_ms = -1;
  if (!print_prompt(d))
    return 1;
  double t0 = run_now_ms(), kms = 0;
  AmkStepStatus st = amk_engine_generate(d->rc->engine, &g, &kms, diag);
  double t1 = run_now_ms();
  int64_t launches = d->launches - launches0;
  d->kernel_ms += kms;
  double first = d->first_token_ms >= 0 ? d->first_token_ms : t1;
  if (n_prompt_feed > 0) {
    d->prompt_ms += first - t0;
    d->eval_ms += t1 - first;
  } else {
    d->eval_ms += t1 - t0; /* the prompt went in by prefill */
  }
  d->prompt_tokens += n_prompt_feed;
  d->eval_steps += launches > n_prompt_feed ? launches - n_prompt_feed : 0;
  /* Drained launches past the kept tokens wrote KV rows that the next
   * decode overwrites before any step reads them. */
  d->n_fed = start + launches < d->n_seq ? start + launches : d->n_seq;
  if (st != AMK_STEP_OK)
    return st == AMK_STEP_TIMEOUT ? EXIT_TIMEOUT : 1;
  return d->failed ? 1 : 0;
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

/* --check's comparison of the GPU's logits with the reference VM's, by the
 * decode steps' rule and tolerance. `where` names the step or chunk,
 * `mismatch_where` the same with the token or row a mismatch concerns,
 * `rows` qualifies the logits where some are not finite. Returns the exit
 * status (0: go on). */
static int compare_with_reference(Decoder *d, const float *ref, size_t nv, const float *logits,
                                  size_t vocab, const char *where, const char *mismatch_where,
                                  const char *rows) {
  size_t ref_bad = amk_count_nonfinite(ref, nv), got_bad = amk_count_nonfinite(logits, vocab);
  if (got_bad > ref_bad) {
    amk_progress_break_line(stderr);
    fprintf(stderr,
            "amk-run: CHECK FAILED at %s: %zu of %zu GPU logits%s are not finite (NaN or Inf); "
            "the reference VM has %zu\n",
            where, got_bad, vocab, rows, ref_bad);
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
  amk_progress_break_line(stderr);
  fprintf(stderr,
          "amk-run: CHECK FAILED at %s: max |gpu - ref| = %.6g against a logit scale of %.6g "
          "(%s); greedy tokens ref %d, gpu %d\n",
          mismatch_where, cr.max_abs, cr.scale,
          low ? "bf16/f16: within 5% of the scale, greedy tokens equal unless a rounding tie"
              : "f32 tolerance 1e-4 of the scale",
          cr.ref_token, cr.gpu_token);
  return 2;
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
  char where[96], mismatch[128];
  snprintf(where, sizeof where, "step %" PRId64 " (position %" PRId64 ")", pos, pos);
  snprintf(mismatch, sizeof mismatch, "step %" PRId64 " (position %" PRId64 ", token %d)", pos,
           pos, d->sequence[pos]);
  return compare_with_reference(d, ref, nv, logits, vocab, where, mismatch, "");
}

/* --check with prefill: the reference VM prefills the same chunk (its own
 * prefill program, padded as the GPU's is, on its own caches); the last
 * logits row (the last real row's with --dump-logits, else the program's
 * last, a padding row where padded) must match the reference's by
 * check_step's rule. Returns the exit status. */
static int check_chunk(Decoder *d, int64_t pos, int64_t n, const float *logits, size_t vocab,
                       AmkDiagEngine *diag) {
  AmkStepStatus st = run_prefill_chunk(d->rc->reference_prefill, d->sequence + pos, n, pos, diag);
  if (st != AMK_STEP_OK)
    return 1;
  size_t ref_rows, nv;
  const float *ref = run_prefill_logits(d->rc->reference_prefill, &ref_rows, &nv);
  ref += (ref_rows - 1) * nv;
  char where[96], mismatch[128];
  snprintf(where, sizeof where, "the prompt's chunk at positions %" PRId64 "..%" PRId64, pos,
           pos + n - 1);
  snprintf(mismatch, sizeof mismatch, "%s (its last row)", where);
  return compare_with_reference(d, ref, nv, logits, vocab, where, mismatch,
                                " of its last row");
}

/* Batched prefill: the prompt from n_fed up to its last token in chunks of
 * at most -b tokens, one step each; the last token then goes through the
 * decode program like any step, and its logits choose the first new token.
 * So a chunk's logits choose nothing, and padded chunks (prefill.c) need no
 * logits of a row in their middle. Returns the exit status. */
static int prefill_prompt(Decoder *d, AmkStrBuf *dump, AmkProgress *progress,
                          AmkDiagEngine *diag) {
  const RunOptions *o = d->o;
  RunPrefill *p = d->rc->prefill;
  int64_t batch = run_prefill_batch(p), end = d->n_prompt - 1;
  size_t rows = 0, vocab = 0;
  while (d->n_fed < end) {
    int64_t pos = d->n_fed;
    int64_t n = end - pos < batch ? end - pos : batch;
    double t0 = run_now_ms();
    AmkStepStatus st = run_prefill_chunk(p, d->sequence + pos, n, pos, diag);
    if (st != AMK_STEP_OK)
      return st == AMK_STEP_TIMEOUT ? EXIT_TIMEOUT : 1;
    const float *logits = run_prefill_logits(p, &rows, &vocab);
    d->prompt_ms += run_now_ms() - t0;
    int status;
    if (o->check && d->rc->reference_prefill &&
        (o->check_steps == 0 || d->checked < o->check_steps) &&
        (status = check_chunk(d, pos, n, logits + (rows - 1) * vocab, vocab, diag)) != 0)
      return status;
    d->prompt_tokens += n;
    d->launches++;
    size_t nonfinite = amk_count_nonfinite(logits, rows * vocab);
    if (nonfinite) {
      amk_progress_break_line(stderr);
      fprintf(stderr,
              "amk-run: error: the prompt's chunk at positions %" PRId64 "..%" PRId64 ": %zu "
              "logits are not finite (NaN or Inf); the weights or the program produce "
              "non-finite values\n",
              pos, pos + n - 1, nonfinite);
      return 1;
    }
    /* --dump-logits: the prefill programs write every row's logits. */
    for (size_t r = 0; o->dump_logits && r < rows; r++)
      write_logits_row(dump, logits + r * vocab, vocab, pos + (int64_t)r == 0);
    d->n_fed = pos + n;
    if (progress)
      amk_progress_add(progress, n);
  }
  return 0;
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
  int status = 0;
  /* The prompt's steps before the first new token: on the CPU VM and a
   * large model each takes seconds. */
  AmkProgress *progress =
      d->n_prompt > d->n_fed
          ? amk_progress_begin("amk-run: evaluating the prompt", AMK_PROGRESS_ITEMS, "tokens",
                               d->n_prompt - d->n_fed)
          : NULL;
  if (d->rc->prefill && d->n_prompt - d->n_fed >= 3)
    status = prefill_prompt(d, dump, progress, diag);
  if (status != 0) {
    amk_progress_end(progress);
    return status;
  }
  for (int64_t pos = d->n_fed; pos < d->n_seq && status == 0; pos++) {
    double t0 = run_now_ms();
    float kms = 0;
    AmkStepStatus st = amk_engine_step(engine, d->sequence[pos], pos, &kms, diag);
    if (st != AMK_STEP_OK) {
      status = st == AMK_STEP_TIMEOUT ? EXIT_TIMEOUT : 1;
      break;
    }
    if (progress && pos < d->n_prompt)
      amk_progress_add(progress, 1);
    if (pos + 1 >= d->n_prompt) {
      amk_progress_end(progress);
      progress = NULL;
    }
    d->kernel_ms += kms;
    *last_launch = pos;
    d->launches++;
    d->n_fed = pos + 1;
    size_t vocab;
    const float *logits = amk_engine_logits(engine, &vocab);
    double dt = run_now_ms() - t0;
    if (o->check && (o->check_steps == 0 || d->checked < o->check_steps) &&
        (status = check_step(d, pos, logits, vocab, diag)) != 0)
      break;
    size_t nonfinite = amk_count_nonfinite(logits, vocab);
    if (nonfinite) {
      amk_progress_break_line(stderr);
      fprintf(stderr,
              "amk-run: error: step %" PRId64 " (position %" PRId64 ", token %d): %zu of %zu "
              "logits are not finite (NaN or Inf); the weights or the program produce "
              "non-finite values\n",
              pos, pos, d->sequence[pos], nonfinite, vocab);
      status = 1;
      break;
    }
    if (pos < d->n_prompt)
      d->prompt_ms += dt, d->prompt_tokens++;
    else
      d->eval_ms += dt, d->eval_steps++;
    if (o->dump_logits)
      write_logits_row(dump, logits, vocab, pos == 0);
    if (pos == d->n_seq - 1 && !d->done) {
      bool more = accept_token(d, amk_sample(d->sampler, logits, vocab));
      if (d->failed) {
        status = 1;
        break;
      }
      /* --dump-logits feeds the last kept token too, for its row. */
      if (!more && (d->stopped_at_eos || !o->dump_logits))
        break;
    }
  }
  amk_progress_end(progress);
  return status;
}

static void print_timing_line(const char *what, double ms, int64_t count, const char *unit) {
  fprintf(stderr, "amk-run: %16s = %10.2f ms / %5" PRId64 " %-6s", what, ms, count, unit);
  if (count > 0 && ms > 0)
    fprintf(stderr, " (%8.2f ms per token, %9.2f tokens per second)", ms / (double)count,
            1e3 * (double)count / ms);
  fputc('\n', stderr);
}

/* A JSON string: the text's bytes (valid UTF-8), with '"', '\' and control
 * characters escaped. */
static void print_json_string(const char *text, size_t len) {
  putchar('"');
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c == '\n')
      fputs("\\n", stdout);
    else if (c == '\t')
      fputs("\\t", stdout);
    else if (c == '\r')
      fputs("\\r", stdout);
    else if (c < 0x20)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

/* `"key": "text"` of ids decoded as printing does (special tokens left
 * out). False after reporting an id the tokenizer lacks. */
static bool print_json_text(const RunText *text, const char *key, const int32_t *ids, size_t n,
                            AmkDiagEngine *diag) {
  AmkStrBuf sb;
  amk_sb_init(&sb);
  bool ok = amk_tokenizer_decode(text->tok, ids, n, true, &sb, diag);
  if (ok) {
    printf(", \"%s\": ", key);
    print_json_string(sb.data ? sb.data : "", sb.len);
  }
  amk_sb_free(&sb);
  return ok;
}

static bool print_json(const Decoder *d, AmkDiagEngine *diag) {
  const RunContext *rc = d->rc;
  /* The ids first, so that a failing text leaves no partial object. */
  AmkStrBuf check;
  amk_sb_init(&check);
  bool ok = !d->text->tok ||
            (amk_tokenizer_decode(d->text->tok, d->sequence, (size_t)d->n_seq, true, &check,
                                  diag));
  amk_sb_free(&check);
  if (!ok)
    return false;
  printf("{\"prompt\": [");
  for (int64_t i = 0; i < d->n_prompt; i++)
    printf("%s%d", i ? ", " : "", d->sequence[i]);
  printf("], \"generated\": [");
  for (int64_t i = d->n_prompt; i < d->n_seq; i++)
    printf("%s%d", i > d->n_prompt ? ", " : "", d->sequence[i]);
  putchar(']');
  if (d->text->tok) {
    print_json_text(d->text, "prompt_text", d->sequence, (size_t)d->n_prompt, diag);
    print_json_text(d->text, "text", d->sequence + d->n_prompt, (size_t)(d->n_seq - d->n_prompt),
                    diag);
  }
  printf(", \"stop\": \"%s\", \"seed\": %" PRId64 ", \"device\": \"%s\", "
         "\"timing\": {\"load_ms\": %.3f, \"prompt_ms\": %.3f, \"prompt_tokens\": %" PRId64
         ", \"eval_ms\": %.3f, \"eval_tokens\": %" PRId64 ", \"ms_per_token\": %.4f, "
         "\"tokens_per_second\": %.2f}",
         d->stopped_at_eos ? "eos" : "length", (int64_t)d->o->sampling.seed, rc->device,
         rc->t_loaded - rc->t_start, d->prompt_ms, d->prompt_tokens, d->eval_ms, d->eval_steps,
         d->eval_steps ? d->eval_ms / (double)d->eval_steps : 0.0,
         d->eval_ms > 0 ? 1e3 * (double)d->eval_steps / d->eval_ms : 0.0);
  if (d->o->check)
    printf(", \"check\": {\"steps\": %" PRId64 ", \"worst_rel_diff\": %.6g}", d->checked,
           d->worst_rel);
  printf("}\n");
  return true;
}

static void print_report(const Decoder *d, double t_end) {
  const RunContext *rc = d->rc;
  if (d->stopped_at_eos && !d->o->json && !d->o->chat)
    fprintf(stderr, "amk-run: end of sequence: token %" PRId32 " (eos_token_id of %s)\n",
            d->eos_token, d->text->gen.eos_file);
  fprintf(stderr, "amk-run: %16s = %10.2f ms\n", "load time", rc->t_loaded - rc->t_start);
  print_timing_line("prompt eval time", d->prompt_ms, d->prompt_tokens, "tokens");
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

/* Decodes from d->n_fed: the rest of the prompt up to d->n_prompt, then new
 * tokens until d->total, a stop token or a failure, on the device when
 * nothing else is needed per step. Returns the exit status. */
static int decode_run(Decoder *d, AmkStrBuf *dump, int64_t *last_launch, AmkDiagEngine *diag) {
  const RunOptions *o = d->o;
  d->done = d->n_seq >= d->total;
  d->stopped_at_eos = false;
  bool greedy_device = o->sampling.temperature <= 0 && !o->check && !o->dump_logits &&
                       !o->trace && amk_engine_can_generate(d->rc->engine);
  /* With prefill programs the prompt but its last token goes in by chunks
   * first; the device then feeds that token and decodes from there. */
  if (greedy_device && d->rc->prefill && d->n_prompt - d->n_fed >= 3 && !d->done) {
    int status = prefill_prompt(d, dump, NULL, diag);
    if (status != 0)
      return status;
  }
  d->on_device = greedy_device && d->n_prompt > d->n_fed && d->total > d->n_prompt;
  return d->on_device ? decode_on_device(d, diag)
                      : decode_step_by_step(d, dump, last_launch, diag);
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
  AmkSampler sampler;
  amk_sampler_init(&sampler, &o->sampling);
  Decoder d = {.rc = rc, .o = o, .text = text, .n_prompt = n_prompt, .total = total,
               .first_token_ms = -1, .sampler = &sampler};
  d.sequence = amk_xmalloc((size_t)(total > 0 ? total : 1) * sizeof *d.sequence);
  memcpy(d.sequence, text->prompt, text->n_prompt * sizeof *d.sequence);
  d.n_seq = n_prompt;
  AmkStrBuf dump;
  amk_sb_init(&dump);
  int64_t last_launch = -1; /* the position of the last GPU launch */
  const TokenPrinter *printer = &text->printer;
  d.prompt_unprinted = true;
  int status = 0;
  if (!amk_progress_wanted(stderr))
    status = !print_prompt(&d); /* as it always was: the prompt first */
  if (status == 0)
    status = decode_run(&d, &dump, &last_launch, diag);
  if (status == 0 && !print_prompt(&d)) /* no new token was chosen */
    status = 1;
  double t_end = run_now_ms();
  /* With text the prompt was printed too: its line ends even with no new
   * token. */
  if (status == 0 && (n_new != 0 || text->tok) && printer->finish &&
      !printer->finish(printer->ctx))
    status = 1;
  fflush(stdout); /* the tokens' line ends before the reports */
  if (status == 0 && o->trace && last_launch >= 0 &&
      !run_write_trace(o->trace, rc->engine, last_launch, diag))
    status = 1;
  if (status == 0 && o->dump_logits) {
    if (d.n_seq == 0)
      amk_sb_puts(&dump, "[");
    amk_sb_puts(&dump, "\n]\n");
    if (amk_write_file_atomic(o->dump_logits, dump.data, dump.len, diag) != 0)
      status = 1;
  }
  if (status == 0 && o->json && !print_json(&d, diag))
    status = 1;
  if (status == 0)
    print_report(&d, t_end);
  amk_sb_free(&dump);
  amk_sampler_free(&sampler);
  free(d.sequence);
  return status;
}

/* ---- chat mode ------------------------------------------------------------------ */

/* One line of standard input without its line end (malloc'd), or NULL at
 * the end of input. */
static char *read_user_line(void) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t n = getline(&line, &cap, stdin);
  if (n < 0) {
    free(line);
    return NULL;
  }
  while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
    line[--n] = '\0';
  return line;
}

static void put_ids(const int32_t *ids, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    fprintf(stderr, "%s%" PRId32, i ? "," : "", ids[i]);
}

/* -v: the tokens a turn feeds (the reply's last token when it was not fed,
 * then the turn's own) and their positions. */
static void describe_feed(const Decoder *d, int64_t turn, size_t n_turn) {
  fprintf(stderr, "amk-run: turn %" PRId64 ": %" PRId64 " tokens at positions %" PRId64
                  "..%" PRId64 " (%" PRId64 " of the reply before, %zu of this turn): ",
          turn, d->n_seq - d->n_fed, d->n_fed, d->n_seq - 1,
          d->n_seq - d->n_fed - (int64_t)n_turn, n_turn);
  put_ids(d->sequence + d->n_fed, d->n_seq - d->n_fed);
  fputc('\n', stderr);
}

/* -v: the reply's tokens and what ended it. */
static void describe_reply(const Decoder *d, int64_t turn) {
  int64_t n = d->n_seq - d->n_prompt;
  fprintf(stderr, "amk-run: reply %" PRId64 ": %" PRId64 " tokens at positions %" PRId64
                  "..%" PRId64 ", ended by ",
          turn, n, d->n_prompt, d->n_seq - 1);
  if (d->stopped_at_eos)
    fprintf(stderr, "token %" PRId32 " (%s)", d->eos_token,
            d->eos_token == d->text->end_of_turn ? "end of turn" : "end of sequence");
  else if (d->n_seq == amk_engine_max_seq(d->rc->engine))
    fputs("the end of the KV cache", stderr);
  else
    fputs("-n", stderr);
  fputs(": ", stderr);
  put_ids(d->sequence + d->n_prompt, n);
  fputc('\n', stderr);
}

int run_chat(const RunContext *rc, AmkDiagEngine *diag) {
  const RunOptions *o = rc->o;
  const RunText *text = rc->text;
  int64_t max_seq = amk_engine_max_seq(rc->engine);
  AmkSampler sampler;
  amk_sampler_init(&sampler, &o->sampling);
  Decoder d = {.rc = rc, .o = o, .text = text, .first_token_ms = -1, .sampler = &sampler};
  d.sequence = amk_xmalloc((size_t)max_seq * sizeof *d.sequence);
  AmkStrBuf rendered;
  amk_sb_init(&rendered);
  int status = 0;
  int64_t last_launch = -1;
  for (int64_t turn = 1; status == 0; turn++) {
    fputs("> ", stdout);
    fflush(stdout);
    char *line = read_user_line();
    if (!line) {
      putchar('\n'); /* the end of input: the session ends on a fresh line */
      break;
    }
    if (!line[0]) {
      free(line);
      turn--;
      continue;
    }
    rendered.len = 0;
    AmkChatTurn ct = {.bos_token = text->bos_token, .eos_token = text->eos_token,
                      .system = turn == 1 ? text->system : NULL, .user = line,
                      .first = turn == 1};
    amk_chat_render_turn(text->chat, &ct, &rendered);
    free(line);
    AmkTokenIds ids = {0};
    if (!run_text_encode_turn(text, rendered.data, &ids, diag)) {
      /* Say why and ask again: the conversation so far is kept. */
      fprintf(stderr, "amk-run: that line cannot be encoded (above); type it again\n");
      amk_token_ids_free(&ids);
      turn--;
      continue;
    }
    /* The turn's tokens and at least one position for the reply. */
    if (d.n_seq + (int64_t)ids.len >= max_seq) {
      fprintf(stderr, "amk-run: error: the KV cache is full: %" PRId64 " of its %" PRId64
                      " positions are used and this turn needs %zu more and one for the "
                      "reply; the conversation ends here (compile with a larger "
                      "-c/--ctx-size)\n",
              d.n_seq, max_seq, ids.len);
      amk_token_ids_free(&ids);
      status = 1;
      break;
    }
    for (size_t i = 0; i < ids.len; i++)
      if (ids.ids[i] >= amk_engine_vocab(rc->engine)) {
        fprintf(stderr, "amk-run: error: token %" PRId32 " of this turn is outside the "
                        "model's vocabulary\n", ids.ids[i]);
        status = 1;
      }
    if (status) {
      amk_token_ids_free(&ids);
      break;
    }
    memcpy(d.sequence + d.n_seq, ids.ids, ids.len * sizeof *ids.ids);
    d.n_seq += (int64_t)ids.len;
    /* -v: what is fed where, the ids too (tests rebuild the sequence). */
    if (o->verbose)
      describe_feed(&d, turn, ids.len);
    amk_token_ids_free(&ids);
    d.n_prompt = d.n_seq;
    int64_t room = max_seq - d.n_prompt;
    d.total = d.n_prompt + (o->n_new >= 0 && o->n_new < room ? o->n_new : room);
    status = decode_run(&d, NULL, &last_launch, diag);
    if (status == 0 && !run_text_printer_flush(text->text_printer))
      status = 1;
    putchar('\n');
    fflush(stdout);
    if (status == 0 && o->verbose)
      describe_reply(&d, turn);
    if (status == 0 && !d.stopped_at_eos && d.n_seq == max_seq) {
      fprintf(stderr, "amk-run: the KV cache is full (%" PRId64 " positions): the conversation "
                      "ends here (compile with a larger -c/--ctx-size)\n", max_seq);
      break;
    }
  }
  double t_end = run_now_ms();
  if (status == 0 && o->trace && last_launch >= 0 &&
      !run_write_trace(o->trace, rc->engine, last_launch, diag))
    status = 1;
  if (status == 0)
    print_report(&d, t_end);
  amk_sb_free(&rendered);
  amk_sampler_free(&sampler);
  free(d.sequence);
  return status;
}
