/* amk-run: decode tokens with a compiled AMK program.
 *
 *   amk-run [options] TARGET
 *
 * TARGET is a HuggingFace model folder (compiled first by the default
 * pipeline) or a compiled .amkir / .json program (weights from the folder it
 * names, or --weights DIR). Generated token ids go to stdout as they are
 * produced; progress and timing go to stderr.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "amk/backend.h"
#include "amk/engine.h"
#include "amk/host.h"
#include "amk/io.h"
#include "amk/pass.h"
#include "amk/pipeline.h"
#include "amk/plan.h"
#include "amk/sampling.h"
#include "amk/vm.h"
#include "amk/weights.h"

typedef struct {
  const char *target;
  const char *device;
  const char *weights;
  const char *pipeline; /* --passes, as given: parsed by the library */
  const char *save_program;
  const char *dump_logits;
  const char *dtype;
  const char *gpu_target;
  const char *quant, *quant_group, *quant_keep; /* as given: the quantize pass parses them */
  int32_t *prompt;
  size_t n_prompt;
  int64_t n_new;
  const char *max_seq; /* as given: parsed (once) as import's --max-seq */
  AmkSamplingParams sampling;
  bool json;
  bool check;          /* --check: the reference VM beside the GPU */
  int64_t check_steps; /* compare only the first N steps (0: all) */
  bool bench;
  const char *bench_pos;
  int64_t bench_steps, bench_warmup;
  double timeout_ms;
  const char *trace; /* --trace FILE: Chrome trace of the last launch */
  bool verbose;
  bool random_weights;
  uint64_t random_seed;
} RunOptions;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void usage(FILE *out) {
  fputs("USAGE: amk-run [options] TARGET\n\n"
        "  TARGET is a HuggingFace model folder (compiled with the default pipeline\n"
        "  " AMK_DEFAULT_PIPELINE ") or a compiled .amkir or .json program.\n\n"
        "OPTIONS:\n"
        "  --device cpu|cuda|auto   where to decode (default auto: the GPU when there is\n"
        "                           one, else the CPU reference VM)\n"
        "  --prompt-ids 1,2,3       the prompt as token ids (default: 1)\n"
        "  -n N                     new tokens to generate (default 16)\n"
        "  --temp T                 sampling temperature (default 0: greedy)\n"
        "  --top-k K                sample among the K most likely tokens (default: all)\n"
        "  --top-p P                sample within the top-P probability mass (default 1)\n"
        "  --seed S                 sampling seed (default 0)\n"
        "  --max-seq N              KV cache length when compiling a model folder\n"
        "  --dtype f32|bf16|f16     program dtype when compiling a model folder\n"
        "  --target NAME            GPU target record when compiling (default h200)\n"
        "  --quant int8|int4        weight-only quantized GEMV weights when compiling\n"
        "                           (the quantize pass after import; the checkpoint's\n"
        "                           float weights are quantized as they load)\n"
        "  --quant-group N          weights per fp16 scale along K (default 128)\n"
        "  --quant-keep LIST        projections left in the program dtype: none, or some\n"
        "                           of q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,\n"
        "                           down_proj,lm_head (default " AMK_QUANT_DEFAULT_KEEP ", measured:\n"
        "                           docs/Quantization.md; the embedding table is never\n"
        "                           quantized)\n"
        "  --passes a,b,c           the pipeline for a model folder (default\n"
        "                           " AMK_DEFAULT_PIPELINE ")\n"
        "  --save-program FILE      write the program compiled from a model folder to\n"
        "                           FILE (.amkir text) before decoding\n"
        "  --weights DIR            the checkpoint folder for a compiled program\n"
        "  --random-weights SEED    seeded random weights at the program's shapes\n"
        "  --dump-logits FILE       write the logits after every fed token as JSON\n"
        "                           [[...], ...] (row i after feeding token i)\n"
        "  --json                   print one JSON object on stdout: prompt, generated,\n"
        "                           device, timing (with --bench: the bench results)\n"
        "  --check                  with the GPU: run the CPU reference VM beside it and\n"
        "                           fail on the first step whose logits differ (f32: by\n"
        "                           more than 1e-4 of the logit scale; bf16/f16: a\n"
        "                           different greedy token)\n"
        "  --check-steps N          compare only the first N steps (the VM is slow at\n"
        "                           real shapes; the GPU decodes the rest alone)\n"
        "  --bench                  time the GPU megakernel: warm-up, then per-token\n"
        "                           kernel time (CUDA events) over --bench-steps steps at\n"
        "                           each --bench-pos position, achieved GB/s against the\n"
        "                           card's read bandwidth measured in the same run\n"
        "  --bench-pos P,Q          positions to time (default 0)\n"
        "  --bench-steps N          timed steps per position (default 128)\n"
        "  --bench-warmup N         untimed steps first (default 10)\n"
        "  --timeout-ms T           GPU watchdog per launch (default 10000); a launch that\n"
        "                           exceeds it is aborted and reported as TIMEOUT (exit 3)\n"
        "  --trace FILE             GPU: stamp every task of every launch; write the\n"
        "                           last launch as a Chrome trace (ui.perfetto.dev) to\n"
        "                           FILE and print where its time went (with --bench:\n"
        "                           one extra traced launch per position after the\n"
        "                           untraced timed ones; FILE holds the last position's)\n"
        "  -v, --verbose            print GPU and compile facts\n"
        "  -h, --help               show this help\n",
        out);
}

static bool parse_int64(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end)
    return false;
  *out = v;
  return true;
}

static bool parse_double(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v))
    return false;
  *out = v;
  return true;
}

static bool parse_prompt(const char *s, RunOptions *o) {
  size_t cap = 8;
  o->prompt = amk_xmalloc(cap * sizeof *o->prompt);
  o->n_prompt = 0;
  const char *p = s;
  while (*p) {
    /* Digits only: strtol would also take leading spaces and signs. */
    if (*p < '0' || *p > '9')
      return false;
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (errno || end == p || v > INT32_MAX || (*end && *end != ','))
      return false;
    if (o->n_prompt == cap) {
      cap *= 2;
      o->prompt = amk_xrealloc(o->prompt, cap * sizeof *o->prompt);
    }
    o->prompt[o->n_prompt++] = (int32_t)v;
    if (*end == ',' && end[1] == '\0')
      return false; /* "1,": a trailing comma names no token */
    p = *end ? end + 1 : end;
  }
  return o->n_prompt > 0;
}

/* Says that an option's value is bad, in amk-run's words: "TAKES, not 'V'". */
static bool bad_value(const char *takes, const char *v) {
  fprintf(stderr, "amk-run: error: %s, not '%s'\n", takes, v);
  return false;
}

/* An integer option's value, within [min, max]. */
static bool int_value(const char *v, int64_t *out, int64_t min, int64_t max, const char *takes) {
  int64_t n;
  if (!parse_int64(v, &n) || n < min || n > max)
    return bad_value(takes, v);
  *out = n;
  return true;
}

/* A seed: any 64-bit integer, kept as its bits. */
static bool seed_value(const char *v, uint64_t *out, const char *takes) {
  int64_t seed;
  if (!parse_int64(v, &seed))
    return bad_value(takes, v);
  *out = (uint64_t)seed;
  return true;
}

/* An option that only switches something on (`on`), or whose value is kept
 * as given (`text`: parsed later, or by the library). */
typedef struct {
  const char *name;
  bool *on;
  const char **text;
} PlainOption;

/* An integer option and the range it accepts. */
typedef struct {
  const char *name;
  int64_t *out;
  int64_t min, max;
  const char *takes;
} IntOption;

/* Returns 0 to run, 1 on a usage error, 2 after --help. */
static int parse_args(int argc, char **argv, RunOptions *o) {
  o->device = "auto";
  o->bench_steps = 128;
  o->bench_warmup = 10;
  o->pipeline = AMK_DEFAULT_PIPELINE;
  o->n_new = 16;
  o->sampling = (AmkSamplingParams){.temperature = 0, .top_k = 0, .top_p = 1, .seed = 0};
  const PlainOption plain[] = {
      {"--json", &o->json, NULL},           {"--check", &o->check, NULL},
      {"--bench", &o->bench, NULL},         {"-v", &o->verbose, NULL},
      {"--verbose", &o->verbose, NULL},     {"--max-seq", NULL, &o->max_seq},
      {"--dtype", NULL, &o->dtype},         {"--target", NULL, &o->gpu_target},
      {"--quant", NULL, &o->quant},         {"--quant-group", NULL, &o->quant_group},
      {"--quant-keep", NULL, &o->quant_keep},
      {"--passes", NULL, &o->pipeline},     {"--save-program", NULL, &o->save_program},
      {"--weights", NULL, &o->weights},     {"--dump-logits", NULL, &o->dump_logits},
      {"--bench-pos", NULL, &o->bench_pos}, {"--trace", NULL, &o->trace}};
  const size_t n_plain = sizeof plain / sizeof plain[0];
  const char *n_takes = "-n takes a count of tokens (0 to 1000000)";
  const IntOption ints[] = {
      {"-n", &o->n_new, 0, 1000000, n_takes},
      {"--n-predict", &o->n_new, 0, 1000000, n_takes},
      {"--top-k", &o->sampling.top_k, 0, INT64_MAX, "--top-k takes an integer >= 0"},
      {"--check-steps", &o->check_steps, 1, INT64_MAX, "--check-steps takes a count >= 1"},
      {"--bench-steps", &o->bench_steps, 1, 100000, "--bench-steps takes a count"},
      {"--bench-warmup", &o->bench_warmup, 0, 100000, "--bench-warmup takes a count"}};
  const size_t n_ints = sizeof ints / sizeof ints[0];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *value = NULL;
    const char *name = a;
    char flag[64];
    if (a[0] == '-' && a[1] == '-' && strchr(a, '=')) {
      size_t n = (size_t)(strchr(a, '=') - a);
      if (n >= sizeof flag) {
        fprintf(stderr, "amk-run: error: unknown option '%s'\n", a);
        return 1;
      }
      memcpy(flag, a, n);
      flag[n] = '\0';
      name = flag;
      value = a + n + 1;
    }
#define IS(s) (strcmp(name, s) == 0)
#define VALUE()                                                                \
  (value ? value                                                               \
         : (i + 1 < argc ? argv[++i]                                           \
                         : (fprintf(stderr, "amk-run: error: '%s' needs a value\n", name), \
                            (const char *)NULL)))
    if (IS("-h") || IS("--help")) {
      usage(stdout);
      return 2;
    } else if (a[0] != '-') {
      if (o->target) {
        fprintf(stderr, "amk-run: error: more than one target ('%s' and '%s')\n", o->target, a);
        return 1;
      }
      o->target = a;
      continue;
    }
    size_t k = 0, j = 0;
    while (k < n_plain && !IS(plain[k].name))
      k++;
    while (j < n_ints && !IS(ints[j].name))
      j++;
    const char *v;
    if (k < n_plain) {
      if (plain[k].on)
        *plain[k].on = true;
      else if (!(*plain[k].text = VALUE()))
        return 1;
    } else if (j < n_ints) {
      const IntOption *opt = &ints[j];
      if (!(v = VALUE()) || !int_value(v, opt->out, opt->min, opt->max, opt->takes))
        return 1;
    } else if (IS("--device")) {
      if (!(v = VALUE()))
        return 1;
      if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "auto")) {
        fprintf(stderr, "amk-run: error: --device must be cpu, cuda or auto, not '%s'\n", v);
        return 1;
      }
      o->device = v;
    } else if (IS("--prompt-ids")) {
      if (!(v = VALUE()))
        return 1;
      if (!parse_prompt(v, o)) {
        bad_value("--prompt-ids takes comma-separated token ids (non-negative integers)", v);
        return 1;
      }
    } else if (IS("--temp")) {
      if (!(v = VALUE()))
        return 1;
      if (!parse_double(v, &o->sampling.temperature) || o->sampling.temperature < 0) {
        bad_value("--temp takes a number >= 0", v);
        return 1;
      }
    } else if (IS("--top-p")) {
      if (!(v = VALUE()))
        return 1;
      if (!parse_double(v, &o->sampling.top_p) || o->sampling.top_p <= 0 ||
          o->sampling.top_p > 1) {
        bad_value("--top-p takes a number in (0, 1]", v);
        return 1;
      }
    } else if (IS("--timeout-ms")) {
      if (!(v = VALUE()))
        return 1;
      if (!parse_double(v, &o->timeout_ms) || o->timeout_ms <= 0) {
        bad_value("--timeout-ms takes a positive number", v);
        return 1;
      }
    } else if (IS("--seed")) {
      if (!(v = VALUE()) || !seed_value(v, &o->sampling.seed, "--seed takes an integer"))
        return 1;
    } else if (IS("--random-weights")) {
      if (!(v = VALUE()) ||
          !seed_value(v, &o->random_seed, "--random-weights takes an integer seed"))
        return 1;
      o->random_weights = true;
    } else {
      fprintf(stderr, "amk-run: error: unknown option '%s'; see 'amk-run --help'\n", a);
      return 1;
    }
#undef IS
#undef VALUE
  }
  if (!o->target) {
    fprintf(stderr, "amk-run: error: no target; give a model folder or a compiled program\n");
    usage(stderr);
    return 1;
  }
  if (!o->prompt) {
    o->prompt = amk_xmalloc(sizeof *o->prompt);
    o->prompt[0] = 1;
    o->n_prompt = 1;
  }
  if ((o->check || o->bench || o->trace) && strcmp(o->device, "cpu") == 0) {
    fprintf(stderr, "amk-run: error: --check, --bench and --trace need the GPU; not with "
                    "--device cpu\n");
    return 1;
  }
  if (o->weights && o->random_weights) {
    fprintf(stderr, "amk-run: error: --weights and --random-weights exclude each other\n");
    return 1;
  }
  return 0;
}

static bool is_directory(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool has_pass(const AmkPipeline *p, const char *name) {
  for (size_t i = 0; i < amk_pipeline_size(p); i++)
    if (strcmp(amk_pipeline_pass_at(p, i)->name, name) == 0)
      return true;
  return false;
}

/* Compiles a model folder through the pipeline, or reads a program. */
static AmkModule *load_program(const RunOptions *o, AmkDiagEngine *diag, char **text_out,
                               size_t *len_out) {
  *text_out = NULL;
  *len_out = 0;
  AmkModule *m;
  bool folder = is_directory(o->target);
  if (folder) {
    m = amk_module_new();
    m->model_dir = amk_arena_strdup(&m->arena, o->target);
    m->source_name = m->model_dir;
  } else {
    if (o->max_seq || o->dtype || o->gpu_target || o->quant || o->quant_group ||
        o->quant_keep) {
      fprintf(stderr, "amk-run: error: --max-seq, --dtype, --target and --quant* apply when "
                      "compiling a model folder; '%s' is already compiled\n", o->target);
      return NULL;
    }
    if (o->save_program) {
      fprintf(stderr, "amk-run: error: --save-program applies when compiling a model folder; "
                      "'%s' is already compiled\n", o->target);
      return NULL;
    }
    size_t len;
    char *text = amk_read_file(o->target, &len, diag);
    if (!text)
      return NULL;
    amk_diag_set_source(diag, o->target, text, len);
    size_t n = strlen(o->target);
    bool json = n >= 5 && strcmp(o->target + n - 5, ".json") == 0;
    m = json ? amk_read_json(o->target, text, len, diag)
             : amk_parse_text(o->target, text, len, diag);
    if (!m || !amk_verify_module(m, diag)) {
      amk_module_free(m);
      free(text);
      return NULL;
    }
    if (!m->source_name)
      m->source_name = amk_arena_strdup(&m->arena, o->target);
    *text_out = text;
    *len_out = len;
    return m;
  }
  /* The library's pipeline, with the compile options as amk-opt's --key=value
   * would give them: each value is parsed once, here. */
  AmkPipeline *pipeline = amk_pipeline_new();
  bool ok = amk_pipeline_parse(pipeline, o->pipeline, diag);
  /* --quant asks for the quantize pass: right after import (a pipeline
   * without import first is refused below). */
  if (ok && (o->quant || o->quant_group || o->quant_keep) && !has_pass(pipeline, "quantize") &&
      strncmp(o->pipeline, "import", 6) == 0 && (o->pipeline[6] == ',' || !o->pipeline[6])) {
    char *text = amk_xmalloc(strlen(o->pipeline) + 16);
    sprintf(text, "import,quantize%s", o->pipeline + 6);
    amk_pipeline_free(pipeline);
    pipeline = amk_pipeline_new();
    ok = amk_pipeline_parse(pipeline, text, diag);
    free(text);
  }
  const struct {
    const char *key, *value;
  } options[] = {{"max-seq", o->max_seq},   {"dtype", o->dtype},
                 {"target", o->gpu_target}, {"quant", o->quant},
                 {"quant-group", o->quant_group}, {"quant-keep", o->quant_keep}};
  for (size_t i = 0; ok && i < sizeof options / sizeof options[0]; i++)
    if (options[i].value)
      ok = amk_pipeline_set_option(pipeline, options[i].key, options[i].value, diag);
  const AmkPassInfo *first = amk_pipeline_pass_at(pipeline, 0);
  if (ok && (!first || strcmp(first->name, "import") != 0)) {
    fprintf(stderr, "amk-run: error: a model folder's pipeline must start with import\n");
    ok = false;
  }
  if (ok)
    ok = amk_pipeline_run(pipeline, m, diag, NULL).status == AMK_PIPELINE_OK;
  amk_pipeline_free(pipeline);
  if (ok && o->save_program) {
    AmkStrBuf sb;
    amk_sb_init(&sb);
    amk_print_text(m, &sb);
    ok = amk_write_file_atomic(o->save_program, sb.data ? sb.data : "", sb.len, diag) == 0;
    amk_sb_free(&sb);
  }
  if (!ok) {
    amk_module_free(m);
    return NULL;
  }
  return m;
}

/* The checkpoint folder for a compiled program: --weights, else the folder
 * the program names, taken relative to the program file when it exists
 * there. Returns a malloc'd path or NULL. */
static char *weights_folder(const RunOptions *o, const AmkModule *m) {
  if (o->weights)
    return amk_xstrdup(o->weights);
  if (!m->model_dir)
    return NULL;
  if (m->model_dir[0] != '/' && !is_directory(o->target)) {
    const char *slash = strrchr(o->target, '/');
    if (slash) {
      size_t n = (size_t)(slash - o->target) + 1 + strlen(m->model_dir) + 1;
      char *joined = amk_xmalloc(n);
      snprintf(joined, n, "%.*s/%s", (int)(slash - o->target), o->target, m->model_dir);
      if (is_directory(joined))
        return joined;
      free(joined);
    }
  }
  return amk_xstrdup(m->model_dir);
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

/* Where device decoding's tokens go as they arrive: the sequence, and
 * stdout once the prompt is done. */
typedef struct {
  int32_t *sequence;
  int64_t *n_seq;
  int64_t n_prompt, total;
  bool json;
  double first_token_ms; /* when the first generated token arrived (-1: none yet) */
} GenerateSink;

static bool generate_sink(void *ctx, int64_t step, int32_t token) {
  GenerateSink *s = ctx;
  if (step + 1 < s->n_prompt)
    return true; /* a prompt step: its argmax is not used */
  if (s->first_token_ms < 0)
    s->first_token_ms = now_ms();
  s->sequence[(*s->n_seq)++] = token;
  if (!s->json) {
    printf("%s%d", *s->n_seq - 1 == s->n_prompt ? "" : " ", token);
    fflush(stdout);
  }
  return *s->n_seq < s->total;
}

static void print_timing_line(const char *what, double ms, int64_t count, const char *unit) {
  fprintf(stderr, "amk-run: %16s = %10.2f ms / %5" PRId64 " %-6s", what, ms, count, unit);
  if (count > 0 && ms > 0)
    fprintf(stderr, " (%8.2f ms per token, %9.2f tokens per second)", ms / (double)count,
            1e3 * (double)count / ms);
  fputc('\n', stderr);
}

/* a + b, or INT64_MAX when the sum would not fit. */
static int64_t add_saturating(int64_t a, int64_t b) {
  return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* The reference VM holds every buffer in host memory: the weights (mapped
 * from the checkpoint in their own dtype, else converted or random copies),
 * the KV caches, the activations and the pages they share. True when they
 * fit the host's memory (amk_host_memory_bytes); else says so before a
 * byte is loaded, rather than failing an allocation part way or
 * thrashing. The GPU's side is the CUDA engine's to check
 * (backend/cuda_vm.c): before uploading it should compare the weight bytes
 * it uploads plus the KV caches, activations and pages it allocates with
 * cuMemGetInfo's free memory, and refuse with both numbers. */
static bool fits_host_memory(const AmkPlan *plan, AmkDiagEngine *diag) {
  int64_t weight_bytes = 0, other_bytes = 0;
  for (uint32_t b = 0; b < plan->n_buffers; b++) {
    const AmkPlanBuffer *pb = &plan->buffers[b];
    if (pb->page >= 0)
      continue; /* counted with its page */
    if (pb->kind == AMK_KIND_WEIGHT || pb->kind == AMK_KIND_CONST)
      weight_bytes = add_saturating(weight_bytes, pb->nbytes);
    else
      other_bytes = add_saturating(other_bytes, pb->nbytes);
  }
  for (uint32_t p = 0; p < plan->n_pages; p++)
    other_bytes = add_saturating(other_bytes, plan->page_bytes[p]);
  int64_t host = 0;
  bool from_env = false;
  if (!amk_host_memory_bytes(&host, &from_env, diag))
    return false;
  int64_t needed = add_saturating(weight_bytes, other_bytes);
  if (needed <= host)
    return true;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  AmkLoc nowhere = {0, 0};
  if (from_env)
    amk_error(diag, nowhere,
              "the reference VM needs %" PRId64 " bytes (%.3g GiB) of host memory, %" PRId64
              " of weights and %" PRId64 " of KV caches and activations, more than the %" PRId64
              " bytes %s allows",
              needed, (double)needed / gib, weight_bytes, other_bytes, host, AMK_HOST_MEMORY_ENV);
  else
    amk_error(diag, nowhere,
              "the reference VM needs %" PRId64 " bytes (%.3g GiB) of host memory, %" PRId64
              " of weights and %" PRId64 " of KV caches and activations, more than this "
              "machine's %.3g GiB; decode it on a GPU, or compile it smaller (--max-seq, "
              "--dtype)",
              needed, (double)needed / gib, weight_bytes, other_bytes, (double)host / gib);
  return false;
}

/* ---- GPU helpers ------------------------------------------------------------- */

/* Exit status of a GPU launch that the watchdog stopped (distinct from a
 * rejected program or a failed check). */
#define EXIT_TIMEOUT 3

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* --trace: the last launch as a Chrome trace in o->trace and its report on
 * stderr. */
static bool write_trace(const RunOptions *o, AmkEngine *engine, int64_t pos, AmkDiagEngine *diag) {
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
static int run_bench(const RunOptions *o, AmkEngine *engine, AmkEngine *reference,
                     AmkDiagEngine *diag) {
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
  int32_t token = o->prompt[0];
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
                      " rows); compile with a larger --max-seq\n", pos, amk_engine_max_seq(engine));
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
      if (!write_trace(o, engine, pos, diag)) {
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

int main(int argc, char **argv) {
  RunOptions o = {0};
  int rc = parse_args(argc, argv, &o);
  if (rc) {
    free(o.prompt);
    return rc == 2 ? 0 : 1;
  }
  AmkDiagEngine *diag = amk_diag_new(stderr);
  amk_diag_set_source(diag, "amk-run", NULL, 0);
  const char *device = "cpu";
  bool try_gpu = strcmp(o.device, "cpu") != 0;
  bool need_gpu = strcmp(o.device, "cuda") == 0 || o.check || o.bench || o.trace;
  if (try_gpu) {
    char why[512];
    if (amk_cuda_available(why, sizeof why)) {
      device = "cuda";
    } else if (need_gpu) {
      fprintf(stderr, "amk-run: error: --device cuda: no usable GPU: %s\n", why);
      amk_diag_free(diag);
      free(o.prompt);
      return 1;
    } else if (!o.json) {
      fprintf(stderr, "amk-run: no usable GPU (%s); decoding on the CPU reference VM\n", why);
    }
  }

  double t_start = now_ms();
  char *text = NULL;
  size_t text_len = 0;
  AmkModule *m = load_program(&o, diag, &text, &text_len);
  char *weights = m ? weights_folder(&o, m) : NULL;
  /* Errors from here on are about weights and runs. One with a place is at
   * a task or buffer of the program file it was read from (a program
   * compiled from a folder has no places); the others name their file
   * themselves, after amk-run. */
  if (text)
    amk_diag_set_source(diag, o.target, text, text_len);
  else
    amk_diag_set_source(diag, o.target, NULL, 0);
  amk_diag_set_unlocated_name(diag, "amk-run");
  AmkPlan *plan = m ? amk_plan_build(m, NULL, diag) : NULL;
  /* The reference VM decodes (no GPU, or beside it with --check/--bench):
   * it needs the whole program in host memory, checked before loading. */
  bool vm_checked = false;
  if (plan && (strcmp(device, "cpu") == 0 || o.check || o.bench)) {
    vm_checked = true;
    if (!fits_host_memory(plan, diag)) {
      amk_plan_free(plan);
      plan = NULL;
    }
  }
  AmkWeights *loaded = NULL;
  if (plan)
    loaded = o.random_weights ? amk_weights_random(plan, o.random_seed, diag)
                              : amk_weights_load(plan, weights, diag);
  bool ok = loaded != NULL;
  int exit_status = 0;
  /* The engine that decodes, and with --check or --bench the reference VM
   * stepping beside it over the same plan and weights. */
  AmkEngineOptions eopt = amk_engine_options_default();
  eopt.timeout_ms = o.timeout_ms;
  eopt.verbose = o.verbose;
  eopt.trace = o.trace != NULL;
  AmkEngine *engine = NULL, *reference = NULL;
  if (ok && strcmp(device, "cuda") == 0) {
    engine = amk_engine_create(amk_cuda_engine(), plan, loaded, &eopt, diag);
    if (!engine && need_gpu) {
      ok = false;
    } else if (!engine) {
      device = "cpu";
      if (!o.json)
        fprintf(stderr, "amk-run: the CUDA backend cannot run this program (above); decoding "
                        "on the CPU reference VM\n");
    } else if (!o.json && !o.bench) {
      fprintf(stderr, "amk-run: decoding on the GPU: %s\n", amk_engine_describe(engine));
    }
  }
  /* The CUDA engine refused and the VM takes over: its memory was not
   * checked yet. */
  if (ok && !engine && !vm_checked)
    ok = fits_host_memory(plan, diag);
  if (ok && !engine)
    ok = (engine = amk_engine_create(amk_vm_engine(), plan, loaded, &eopt, diag)) != NULL;
  if (ok && (o.check || o.bench))
    ok = (reference = amk_engine_create(amk_vm_engine(), plan, loaded, &eopt, diag)) != NULL;
  double t_loaded = now_ms();
  if (ok && o.bench) {
    exit_status = run_bench(&o, engine, reference, diag);
    goto release; /* past the decoding and what only it allocates */
  }
  bool low = plan && plan->low_precision;

  int64_t total = (int64_t)o.n_prompt + o.n_new;
  int32_t *sequence = amk_xmalloc((size_t)(total > 0 ? total : 1) * sizeof *sequence);
  memcpy(sequence, o.prompt, o.n_prompt * sizeof *sequence);
  int64_t n_seq = (int64_t)o.n_prompt;
  AmkSampler sampler;
  amk_sampler_init(&sampler, &o.sampling);
  AmkStrBuf dump;
  amk_sb_init(&dump);
  double prompt_ms = 0, eval_ms = 0, kernel_total = 0;
  int64_t eval_steps = 0, checked = 0;
  double worst_rel = 0;
  int64_t last_launch = -1; /* the position of the last GPU launch */
  if (ok && total > amk_engine_max_seq(engine)) {
    fprintf(stderr, "amk-run: error: %" PRId64 " prompt and new tokens do not fit the KV cache "
                    "of %" PRId64 " positions; compile with a larger --max-seq\n",
            total, amk_engine_max_seq(engine));
    ok = false;
  }
  int64_t launches = 0;
  /* Greedy decoding with nothing else to do per step stays on the device:
   * no logits come back, the device picks and feeds each token. */
  bool on_device = ok && o.sampling.temperature <= 0 && !o.check && !o.dump_logits && !o.trace &&
                   o.n_prompt > 0 && o.n_new > 0 && amk_engine_can_generate(engine);
  if (on_device) {
    GenerateSink sink = {.sequence = sequence, .n_seq = &n_seq, .n_prompt = (int64_t)o.n_prompt,
                         .total = total, .json = o.json, .first_token_ms = -1};
    AmkGenerate g = {.feed = o.prompt,
                     .n_feed = (int64_t)o.n_prompt,
                     .pos = 0,
                     .n_steps = total - 1,
                     .on_token = generate_sink,
                     .ctx = &sink};
    double t0 = now_ms(), kms = 0;
    AmkStepStatus st = amk_engine_generate(engine, &g, &kms, diag);
    double t1 = now_ms();
    if (st != AMK_STEP_OK) {
      ok = false;
      exit_status = st == AMK_STEP_TIMEOUT ? EXIT_TIMEOUT : 1;
    }
    kernel_total = kms;
    launches = g.n_steps;
    double first = sink.first_token_ms >= 0 ? sink.first_token_ms : t1;
    prompt_ms = first - t0;
    eval_ms = t1 - first;
    eval_steps = g.n_steps - (int64_t)o.n_prompt;
  }
  /* Feed every token of the sequence; after the prompt each step's logits
   * choose the next token. With --dump-logits the last generated token is
   * fed too, so there is a row for every token of the sequence. */
  for (int64_t pos = 0; ok && !on_device && pos < n_seq; pos++) {
    double t0 = now_ms();
    const float *logits;
    size_t vocab;
    float kms = 0;
    AmkStepStatus st = amk_engine_step(engine, sequence[pos], pos, &kms, diag);
    if (st != AMK_STEP_OK) {
      ok = false;
      exit_status = st == AMK_STEP_TIMEOUT ? EXIT_TIMEOUT : 1;
      break;
    }
    kernel_total += kms;
    last_launch = pos;
    launches++;
    logits = amk_engine_logits(engine, &vocab);
    double dt = now_ms() - t0;
    if (o.check && (o.check_steps == 0 || checked < o.check_steps)) {
      if (amk_engine_step(reference, sequence[pos], pos, NULL, diag) != AMK_STEP_OK) {
        ok = false;
        break;
      }
      size_t nv;
      const float *ref = amk_engine_logits(reference, &nv);
      size_t ref_bad = amk_count_nonfinite(ref, nv), got_bad = amk_count_nonfinite(logits, vocab);
      if (got_bad > ref_bad) {
        fprintf(stderr,
                "amk-run: CHECK FAILED at step %" PRId64 " (position %" PRId64 "): %zu of %zu "
                "GPU logits are not finite (NaN or Inf); the reference VM has %zu\n",
                pos, pos, got_bad, vocab, ref_bad);
        ok = false;
        exit_status = 2;
        break;
      }
    }
    size_t nonfinite = amk_count_nonfinite(logits, vocab);
    if (nonfinite) {
      fprintf(stderr,
              "amk-run: error: step %" PRId64 " (position %" PRId64 ", token %d): %zu of %zu logits "
              "are not finite (NaN or Inf); the weights or the program produce non-finite "
              "values\n",
              pos, pos, sequence[pos], nonfinite, vocab);
      ok = false;
      exit_status = 1;
      break;
    }
    if (o.check && (o.check_steps == 0 || checked < o.check_steps)) {
      size_t nv;
      const float *ref = amk_engine_logits(reference, &nv);
      AmkLogitCheck cr = amk_check_logits(ref, logits, nv < vocab ? nv : vocab, low);
      double rel = cr.max_abs / (cr.scale > 1 ? cr.scale : 1);
      if (rel > worst_rel)
        worst_rel = rel;
      checked++;
      if (!cr.pass) {
        fprintf(stderr,
                "amk-run: CHECK FAILED at step %" PRId64 " (position %" PRId64 ", token %d): max "
                "|gpu - ref| = %.6g against a logit scale of %.6g (%s); greedy tokens ref %d, "
                "gpu %d\n",
                pos, pos, sequence[pos], cr.max_abs, cr.scale,
                low ? "bf16/f16: within 5% of the scale, greedy tokens equal unless a rounding tie" : "f32 tolerance 1e-4 of the scale",
                cr.ref_token, cr.gpu_token);
        ok = false;
        exit_status = 2;
        break;
      }
    }
    if (pos < (int64_t)o.n_prompt)
      prompt_ms += dt;
    else
      eval_ms += dt, eval_steps++;
    if (o.dump_logits)
      write_logits_row(&dump, logits, vocab, pos == 0);
    if (pos == n_seq - 1 && n_seq < total) {
      int32_t next = amk_sample(&sampler, logits, vocab);
      sequence[n_seq++] = next;
      if (!o.json) {
        printf("%s%d", n_seq - 1 == (int64_t)o.n_prompt ? "" : " ", next);
        fflush(stdout);
      }
      if (n_seq == total && !o.dump_logits)
        break;
    }
  }
  double t_end = now_ms();
  if (ok && !o.json && o.n_new > 0)
    putchar('\n');
  fflush(stdout);
  if (ok && o.trace && last_launch >= 0 && !write_trace(&o, engine, last_launch, diag))
    ok = false;
  fflush(stdout); /* the tokens' line ends before the timing report */

  if (ok && o.dump_logits) {
    if (n_seq == 0)
      amk_sb_puts(&dump, "[");
    amk_sb_puts(&dump, "\n]\n");
    if (amk_write_file_atomic(o.dump_logits, dump.data, dump.len, diag) != 0)
      ok = false;
  }
  int64_t generated = n_seq - (int64_t)o.n_prompt;
  if (ok && o.json) {
    printf("{\"prompt\": [");
    for (size_t i = 0; i < o.n_prompt; i++)
      printf("%s%d", i ? ", " : "", o.prompt[i]);
    printf("], \"generated\": [");
    for (int64_t i = 0; i < generated; i++)
      printf("%s%d", i ? ", " : "", sequence[o.n_prompt + (size_t)i]);
    printf("], \"device\": \"%s\", \"timing\": {\"load_ms\": %.3f, \"prompt_ms\": %.3f, "
           "\"prompt_tokens\": %zu, \"eval_ms\": %.3f, \"eval_tokens\": %" PRId64
           ", \"ms_per_token\": %.4f, \"tokens_per_second\": %.2f}",
           device, t_loaded - t_start, prompt_ms, o.n_prompt, eval_ms, eval_steps,
           eval_steps ? eval_ms / (double)eval_steps : 0.0,
           eval_ms > 0 ? 1e3 * (double)eval_steps / eval_ms : 0.0);
    if (o.check)
      printf(", \"check\": {\"steps\": %" PRId64 ", \"worst_rel_diff\": %.6g}", checked, worst_rel);
    printf("}\n");
  }
  if (ok) {
    fprintf(stderr, "amk-run: %16s = %10.2f ms\n", "load time", t_loaded - t_start);
    print_timing_line("prompt eval time", prompt_ms, (int64_t)o.n_prompt, "tokens");
    print_timing_line("eval time", eval_ms, eval_steps, "runs");
    fprintf(stderr, "amk-run: %16s = %10.2f ms / %5" PRId64 " tokens\n", "total time",
            t_end - t_start, n_seq);
    if (amk_engine_measures_kernel_time(engine))
      fprintf(stderr, "amk-run: %16s = %10.2f ms (CUDA events, %" PRId64 " launches%s)\n",
              "kernel time", kernel_total, launches,
              on_device ? ", tokens chosen on the device" : "");
    if (o.check)
      fprintf(stderr, "amk-run: check PASS: %" PRId64 " steps against the reference VM, worst "
                      "max|diff|/scale %.3g\n", checked, worst_rel);
  }
  amk_sb_free(&dump);
  amk_sampler_free(&sampler);
  free(sequence);
release:
  amk_engine_free(reference);
  amk_engine_free(engine);
  amk_weights_free(loaded);
  amk_plan_free(plan);
  amk_module_free(m);
  free(weights);
  free(text);
  free(o.prompt);
  amk_diag_free(diag);
  if (!ok && exit_status == 0)
    exit_status = 1;
  return exit_status;
}
