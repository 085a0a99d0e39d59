/* amk-run's command line: llama.cpp's everyday flags (-m, -n, -c, -s, -t,
 * -p, -f, --temp, --top-k, --top-p, --ignore-eos) beside amk-run's own. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/cli.h"
#include "amk/pass.h"
#include "amk/pipeline.h"
#include "amk/strutil.h"
#include "amk/version.h"
#include "run.h"

static void usage(FILE *out) {
  fputs("USAGE: amk-run [options] [-m] TARGET\n\n"
        "  TARGET is a HuggingFace model folder (compiled with the default pipeline\n"
        "  " AMK_DEFAULT_PIPELINE ") or a compiled .amkir or .json program.\n\n"
        "MODEL:\n"
        "  -m, --model PATH         the model folder or compiled program (the same as\n"
        "                           giving PATH alone)\n"
        "  -c, --ctx-size N         KV cache length when compiling a model folder (also\n"
        "                           --max-seq; default: max_position_embeddings, at most\n"
        "                           4096)\n"
        "  --dtype f32|bf16|f16     program dtype when compiling a model folder (default:\n"
        "                           the checkpoint's)\n"
        "  --target NAME            GPU target record when compiling (default h200)\n"
        "  --quant int8|int4        weight-only quantized GEMV weights when compiling\n"
        "                           (the quantize pass after import; the checkpoint's\n"
        "                           float weights are quantized as they load)\n"
        "  --quant-group N          weights per fp16 scale along K (default 128)\n"
        "  --quant-keep LIST        projections left in the program dtype: auto (o_proj\n"
        "                           where the o projection folds into the attention\n"
        "                           tiles), none, or some of q_proj,k_proj,v_proj,\n"
        "                           o_proj,gate_proj,up_proj,down_proj,lm_head (default\n"
        "                           " AMK_QUANT_DEFAULT_KEEP ", measured: docs/Quantization.md; the\n"
        "                           embedding table is never quantized)\n"
        "  --passes a,b,c           the pipeline for a model folder (default\n"
        "                           " AMK_DEFAULT_PIPELINE ")\n"
        "  --save-program FILE      write the program compiled from a model folder to\n"
        "                           FILE (.amkir text) before decoding\n"
        "  --weights DIR            the checkpoint folder for a compiled program\n"
        "  --random-weights SEED    seeded random weights at the program's shapes\n"
        "  --tp N                   tensor parallelism: compile N rank programs (the\n"
        "                           shard pass after import) and run them together,\n"
        "                           rank r on GPU r of this host (NCCL 2.27+, the\n"
        "                           GPUs peer-to-peer), else on the CPU reference VM;\n"
        "                           n_kv_heads must be a multiple of N; 1: one program\n"
        "                           (default)\n\n"
        "PROMPT AND OUTPUT:\n"
        "  -p, --prompt TEXT        the prompt as text, encoded with the BOS as the\n"
        "                           tokenizer's post-processor adds it (see TEXT below)\n"
        "  -f, --file FILE          the prompt as the text of FILE ('-': standard input)\n"
        "  --prompt-ids 1,2,3       the prompt as token ids (default: the model's\n"
        "                           bos_token_id, else 1)\n"
        "  --tokenizer PATH         the tokenizer: a tokenizer.json, or a folder holding\n"
        "                           one (default: the model folder's)\n"
        "  -n, --n-predict N        new tokens to generate (default 16; -1: until an\n"
        "                           end-of-sequence token or the KV cache is full; in\n"
        "                           chat mode: per reply, default -1)\n"
        "  --ignore-eos             go on past end-of-sequence tokens (eos_token_id of\n"
        "                           generation_config.json, else of config.json)\n"
        "  --json                   print one JSON object on stdout: prompt, generated,\n"
        "                           with a tokenizer prompt_text and text, stop (eos or\n"
        "                           length), seed, device, timing (with --bench: the\n"
        "                           bench results)\n"
        "  --dump-logits FILE       write the logits after every fed token as JSON\n"
        "                           [[...], ...] (row i after feeding token i)\n"
        "  -b, --batch-size N       prompt tokens per prefill step (default 512; 1: one\n"
        "                           step per token): for a model folder on the CPU\n"
        "                           reference VM or the GPU, all but the prompt's last\n"
        "                           token go in chunks of N (the GPU runs a shorter one\n"
        "                           padded on the same N-row program, compiled at load;\n"
        "                           f32 there: at most 64); not with --tp (-v says how\n"
        "                           the prompt goes in; --check compares each chunk)\n\n"
        "SAMPLING:\n"
        "  --temp T                 sampling temperature (default 0: greedy)\n"
        "  --top-k K                sample among the K most likely tokens (default: all)\n"
        "  --top-p P                sample within the top-P probability mass (default 1)\n"
        "  -s, --seed S             sampling seed (default 0; -1: a random seed, printed\n"
        "                           on stderr)\n\n"
        "RUNNING:\n"
        "  --device cpu|cuda|auto   where to decode (default auto: the GPU when there is\n"
        "                           one, else the CPU reference VM)\n"
        "  -t, --threads N          the CPU reference VM's worker threads, used by\n"
        "                           programs of 256 tasks or more (default:\n"
        "                           $AMK_VM_THREADS, else one per CPU; at most 16)\n"
        "  --check                  with the GPU: run the CPU reference VM beside it and\n"
        "                           fail on the first step whose logits differ (f32: by\n"
        "                           more than 1e-4 of the logit scale; bf16/f16: a\n"
        "                           different greedy token)\n"
        "  --check-steps N          compare only the first N steps (the VM is slow at\n"
        "                           real shapes; the GPU decodes the rest alone)\n"
        "  --bench                  time the GPU megakernel: warm-up, then per-token\n"
        "                           kernel time (CUDA events) over --bench-steps steps at\n"
        "                           each --bench-pos position, achieved GB/s against the\n"
        "                           card's read bandwidth measured in the same run; with\n"
        "                           --device cpu, the reference VM's wall time per step\n"
        "  -r, --repetitions N      --bench: timed runs of --bench-steps per position\n"
        "                           (default 1); tokens/s is their mean and std. dev.\n"
        "  -o, --output md|csv|json|jsonl  --bench: the results as a Markdown table\n"
        "                           (default), CSV, one JSON object or JSON lines\n"
        "  --bench-pos P,Q          positions to time (default 0)\n"
        "  --bench-steps N          timed steps per position (default 128)\n"
        "  --bench-warmup N         untimed steps first (default 10)\n"
        "  --bench-prompt N         --bench with prefill programs (-b > 1): also time the\n"
        "                           prefill of an N-token prompt from position 0 (one\n"
        "                           untimed, then -r timed, at least 3): prefill tokens/s\n"
        "                           and time to first token (prefill + one decode step;\n"
        "                           default 512)\n"
        "  --timeout-ms T           GPU watchdog per launch (default 10000); a launch that\n"
        "                           exceeds it is aborted and reported as TIMEOUT (exit 3)\n"
        "  --trace FILE             GPU: stamp every task of every launch; write the\n"
        "                           last launch as a Chrome trace (ui.perfetto.dev) to\n"
        "                           FILE and print where its time went (with --bench:\n"
        "                           one extra traced launch per position after the\n"
        "                           untraced timed ones; FILE holds the last position's;\n"
        "                           a timed prefill's first chunk goes to FILE with\n"
        "                           .prefill.json for .json)\n"
        "  -v, --verbose            print GPU, engine, model-folder and compile facts, and\n"
        "                           the time each phase took (compile, plan, weights, engine)\n"
        "  --version                show the version\n"
        "  -h, --help               show this help\n\n"
        "CHAT:\n"
        "  -cnv, --chat             a conversation: read a line from standard input after\n"
        "                           '> ', answer it, and again until end of input; the KV\n"
        "                           cache is kept between turns. -p/-f give the system\n"
        "                           message\n"
        "  -sys, --system TEXT      the system message\n"
        "  --chat-template NAME     the template's format: llama3, chatml, llama2 or\n"
        "                           mistral (default: recognised in the model folder's\n"
        "                           chat template; implies -cnv)\n\n"
        "TEXT:\n"
        "  The tokenizer is the model folder's tokenizer.json, or --tokenizer. With one,\n"
        "  the prompt and the continuation are printed as text (with --prompt-ids too),\n"
        "  streamed as it is produced; special tokens (BOS, EOS) are not printed.\n"
        "  Without one, text prompts are refused and the prompt and output are token\n"
        "  ids. An end-of-sequence token ends decoding and is not printed.\n\n"
        "Text (or token ids) goes to stdout as it is produced; notes and the timing\n"
        "report (load, prompt eval and eval time per token, total) to stderr.\n",
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

/* Comma-separated token ids: digits only, no empty element. */
static bool parse_prompt_ids(const char *s, RunOptions *o) {
  size_t cap = 8;
  free(o->prompt_ids);
  o->prompt_ids = amk_xmalloc(cap * sizeof *o->prompt_ids);
  o->n_prompt_ids = 0;
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
    if (o->n_prompt_ids == cap) {
      cap *= 2;
      o->prompt_ids = amk_xrealloc(o->prompt_ids, cap * sizeof *o->prompt_ids);
    }
    o->prompt_ids[o->n_prompt_ids++] = (int32_t)v;
    if (*end == ',' && end[1] == '\0')
      return false; /* "1,": a trailing comma names no token */
    p = *end ? end + 1 : end;
  }
  return o->n_prompt_ids > 0;
}

typedef enum {
  OPT_SWITCH, /* no value: sets *on */
  OPT_TEXT,   /* the value as given (parsed later, or by the library): *text */
  OPT_INT,    /* an integer in [min, max]: *count */
  OPT_REAL,   /* a finite number in [lo, hi], or (lo, hi] with lo_open: *real */
  OPT_CUSTOM, /* read by `custom` */
} OptionKind;

typedef struct Option Option;
struct Option {
  const char *names[3]; /* the spellings, e.g. "-n", "--n-predict" */
  OptionKind kind;
  bool *on;
  const char **text;
  int64_t *count;
  int64_t min, max;
  double *real;
  double lo, hi;
  bool lo_open;
  /* What the value must be, for errors: "FLAG takes TAKES, not 'VALUE'". */
  const char *takes;
  /* Only compiling a model folder uses it. */
  bool compile_only;
  bool (*custom)(RunOptions *o, const char *flag, const char *value);
};

/* "FLAG takes TAKES, not 'VALUE'": a bad value, in amk-run's words. */
static bool bad_value(const char *flag, const char *takes, const char *value) {
  fprintf(stderr, "amk-run: error: %s takes %s, not '%s'\n", flag, takes, value);
  return false;
}

static bool read_target(RunOptions *o, const char *flag, const char *value) {
  if (o->target) {
    fprintf(stderr, "amk-run: error: more than one target ('%s' and '%s')\n", o->target, value);
    return false;
  }
  o->target = value;
  return true;
}

static bool read_device(RunOptions *o, const char *flag, const char *value) {
  if (strcmp(value, "cpu") && strcmp(value, "cuda") && strcmp(value, "auto")) {
    fprintf(stderr, "amk-run: error: %s must be cpu, cuda or auto, not '%s'\n", flag, value);
    return false;
  }
  o->device = value;
  return true;
}

static bool read_prompt_ids(RunOptions *o, const char *flag, const char *value) {
  return parse_prompt_ids(value, o) ||
         bad_value(flag, "comma-separated token ids (non-negative integers)", value);
}

/* The KV length: checked against import's own range, then given to import
 * as its --max-seq. */
static bool read_ctx_size(RunOptions *o, const char *flag, const char *value) {
  const AmkPassOptionInfo *info = amk_pass_option_lookup("max-seq");
  int64_t n;
  if (!parse_int64(value, &n) || n < (int64_t)info->min || n > (int64_t)info->max) {
    fprintf(stderr, "amk-run: error: %s takes a KV cache length in [%.0f, %.0f], not '%s'\n",
            flag, info->min, info->max, value);
    return false;
  }
  o->max_seq = value;
  return true;
}

/* A sampling seed: any 64-bit integer, kept as its bits; -1 asks for a
 * random one. */
static bool read_seed(RunOptions *o, const char *flag, const char *value) {
  int64_t seed;
  if (!parse_int64(value, &seed))
    return bad_value(flag, "an integer (-1: a random seed)", value);
  o->random_seed = seed == -1;
  o->sampling.seed = (uint64_t)seed;
  return true;
}

static bool read_random_weights(RunOptions *o, const char *flag, const char *value) {
  int64_t seed;
  if (!parse_int64(value, &seed))
    return bad_value(flag, "an integer seed", value);
  o->random_weights_seed = (uint64_t)seed;
  o->random_weights = true;
  return true;
}

static bool read_bench_format(RunOptions *o, const char *flag, const char *value) {
  if (strcmp(value, "md") && strcmp(value, "csv") && strcmp(value, "json") &&
      strcmp(value, "jsonl"))
    return bad_value(flag, "md, csv, json or jsonl", value);
  o->bench_format = value;
  return true;
}

/* Reads opt's value (NULL for a switch) into *o. */
static bool apply_option(RunOptions *o, const Option *opt, const char *flag, const char *value) {
  for (size_t k = 0; k < 3 && opt->compile_only && !o->compile_flag && opt->names[k]; k++)
    if (strcmp(opt->names[k], flag) == 0)
      o->compile_flag = opt->names[k]; /* as the user spelled it */
  switch (opt->kind) {
  case OPT_SWITCH:
    *opt->on = true;
    return true;
  case OPT_TEXT:
    *opt->text = value;
    return true;
  case OPT_INT: {
    int64_t n;
    if (!parse_int64(value, &n) || n < opt->min || n > opt->max)
      return bad_value(flag, opt->takes, value);
    *opt->count = n;
    return true;
  }
  case OPT_REAL: {
    double x;
    if (!parse_double(value, &x) || x < opt->lo || (opt->lo_open && x == opt->lo) || x > opt->hi)
      return bad_value(flag, opt->takes, value);
    *opt->real = x;
    return true;
  }
  case OPT_CUSTOM:
    return opt->custom(o, flag, value);
  }
  return false;
}

/* "did you mean" for an unknown option: the closest spelling of any. */
static const char *suggest_option(const char *name, const Option *opts, size_t n_opts) {
  const char **candidates = amk_xmalloc((3 * n_opts + 2) * sizeof *candidates);
  size_t n = 0;
  for (size_t i = 0; i < n_opts; i++)
    for (size_t k = 0; k < 3 && opts[i].names[k]; k++)
      candidates[n++] = opts[i].names[k];
  candidates[n++] = "-h";
  candidates[n++] = "--help";
  const char *best = amk_suggest(name, strlen(name), candidates, n);
  free(candidates);
  return best;
}

static const Option *find_option(const char *name, const Option *opts, size_t n_opts) {
  for (size_t i = 0; i < n_opts; i++)
    for (size_t k = 0; k < 3 && opts[i].names[k]; k++)
      if (strcmp(opts[i].names[k], name) == 0)
        return &opts[i];
  return NULL;
}

/* The checks that need every option: what goes together and what not. */
static int check_combination(RunOptions *o) {
  if (!o->target) {
    fprintf(stderr, "amk-run: error: no target; give a model folder or a compiled program\n");
    usage(stderr);
    return 1;
  }
  int prompts = (o->prompt_ids != NULL) + (o->prompt_text != NULL) + (o->prompt_file != NULL);
  if (prompts > 1) {
    fprintf(stderr, "amk-run: error: --prompt-ids, -p/--prompt and -f/--file exclude each "
                    "other; give the prompt once\n");
    return 1;
  }
  /* --chat-template names the format of chat mode, so it asks for it. */
  if (o->chat_template)
    o->chat = true;
  if (o->n_new == INT64_MIN)
    o->n_new = o->chat ? -1 : 16;
  if (o->system_text && !o->chat) {
    fprintf(stderr, "amk-run: error: -sys/--system is the system message of chat mode; add "
                    "-cnv\n");
    return 1;
  }
  if (o->chat) {
    /* The conversation is read from stdin and printed as it goes. */
    const char *refused = o->prompt_ids ? "--prompt-ids" : o->json ? "--json"
                          : o->bench ? "--bench" : o->dump_logits ? "--dump-logits" : NULL;
    if (refused) {
      fprintf(stderr, "amk-run: error: %s does not go with chat mode (-cnv), which reads the "
                      "user's turns from standard input and prints the replies as text\n",
              refused);
      return 1;
    }
    if (o->prompt_file && strcmp(o->prompt_file, "-") == 0) {
      fprintf(stderr, "amk-run: error: -f - does not go with chat mode (-cnv): standard input "
                      "holds the conversation; give the system message as a file or with "
                      "-sys\n");
      return 1;
    }
    if (o->system_text && prompts) {
      fprintf(stderr, "amk-run: error: in chat mode -p/--prompt and -f/--file give the system "
                      "message, as -sys/--system does; give it once\n");
      return 1;
    }
  }
  if ((o->check || o->trace) && strcmp(o->device, "cpu") == 0) {
    fprintf(stderr, "amk-run: error: --check and --trace need the GPU; not with "
                    "--device cpu\n");
    return 1;
  }
  if ((o->bench_format || o->bench_reps || o->bench_prompt) && !o->bench) {
    fprintf(stderr, "amk-run: error: -o/--output, -r/--repetitions and --bench-prompt apply "
                    "to --bench\n");
    return 1;
  }
  if (o->weights && o->random_weights) {
    fprintf(stderr, "amk-run: error: --weights and --random-weights exclude each other\n");
    return 1;
  }
  if (o->tp > 1) {
    if (o->save_program) {
      fprintf(stderr, "amk-run: error: --save-program writes one program; with --tp %" PRId64
                      " compile each rank with amk-opt DIR -import -shard --tp=%" PRId64
                      " --tp-rank=R ...\n", o->tp, o->tp);
      return 1;
    }
  }
  return 0;
}

int run_parse_args(int argc, char **argv, RunOptions *o) {
  o->device = "auto";
  o->bench_steps = 128;
  o->bench_warmup = 10;
  o->pipeline = AMK_DEFAULT_PIPELINE;
  o->n_new = INT64_MIN; /* 16, or -1 in chat mode */
  o->batch_size = 512;   /* llama.cpp's default */
  o->sampling = (AmkSamplingParams){.temperature = 0, .top_k = 0, .top_p = 1, .seed = 0};
  const Option opts[] = {
      {{"-m", "--model"}, OPT_CUSTOM, .custom = read_target},
      {{"-c", "--ctx-size", "--max-seq"}, OPT_CUSTOM, .custom = read_ctx_size,
       .compile_only = true},
      {{"--dtype"}, OPT_TEXT, .text = &o->dtype, .compile_only = true},
      {{"--target"}, OPT_TEXT, .text = &o->gpu_target, .compile_only = true},
      {{"--quant"}, OPT_TEXT, .text = &o->quant, .compile_only = true},
      {{"--quant-group"}, OPT_TEXT, .text = &o->quant_group, .compile_only = true},
      {{"--quant-keep"}, OPT_TEXT, .text = &o->quant_keep, .compile_only = true},
      {{"--passes"}, OPT_TEXT, .text = &o->pipeline},
      {{"--save-program"}, OPT_TEXT, .text = &o->save_program},
      {{"--weights"}, OPT_TEXT, .text = &o->weights},
      {{"--random-weights"}, OPT_CUSTOM, .custom = read_random_weights},
      {{"--prompt-ids"}, OPT_CUSTOM, .custom = read_prompt_ids},
      {{"-p", "--prompt"}, OPT_TEXT, .text = &o->prompt_text},
      {{"-f", "--file"}, OPT_TEXT, .text = &o->prompt_file},
      {{"--tokenizer"}, OPT_TEXT, .text = &o->tokenizer},
      {{"-cnv", "--chat"}, OPT_SWITCH, .on = &o->chat},
      {{"--chat-template"}, OPT_TEXT, .text = &o->chat_template},
      {{"-sys", "--system"}, OPT_TEXT, .text = &o->system_text},
      {{"-n", "--n-predict"}, OPT_INT, .count = &o->n_new, .min = -1, .max = 1000000,
       .takes = "a count of tokens (0 to 1000000; -1: until end of sequence)"},
      {{"--ignore-eos"}, OPT_SWITCH, .on = &o->ignore_eos},
      {{"-b", "--batch-size"}, OPT_INT, .count = &o->batch_size, .min = 1, .max = 65536,
       .takes = "a count of prompt tokens per prefill step (1 to 65536; 1: token by token)"},
      {{"--json"}, OPT_SWITCH, .on = &o->json},
      {{"--dump-logits"}, OPT_TEXT, .text = &o->dump_logits},
      {{"--temp"}, OPT_REAL, .real = &o->sampling.temperature, .lo = 0, .hi = INFINITY,
       .takes = "a number >= 0"},
      {{"--top-k"}, OPT_INT, .count = &o->sampling.top_k, .min = 0, .max = INT64_MAX,
       .takes = "an integer >= 0"},
      {{"--top-p"}, OPT_REAL, .real = &o->sampling.top_p, .lo = 0, .hi = 1, .lo_open = true,
       .takes = "a number in (0, 1]"},
      {{"-s", "--seed"}, OPT_CUSTOM, .custom = read_seed},
      {{"--device"}, OPT_CUSTOM, .custom = read_device},
      {{"-t", "--threads"}, OPT_INT, .count = &o->threads, .min = 1, .max = 1000000,
       .takes = "a number of threads >= 1"},
      {{"--check"}, OPT_SWITCH, .on = &o->check},
      {{"--check-steps"}, OPT_INT, .count = &o->check_steps, .min = 1, .max = INT64_MAX,
       .takes = "a count >= 1"},
      {{"--bench"}, OPT_SWITCH, .on = &o->bench},
      {{"--bench-pos"}, OPT_TEXT, .text = &o->bench_pos},
      {{"--bench-steps"}, OPT_INT, .count = &o->bench_steps, .min = 1, .max = 100000,
       .takes = "a count (1 to 100000)"},
      {{"-r", "--repetitions"}, OPT_INT, .count = &o->bench_reps, .min = 1, .max = 1000,
       .takes = "a count (1 to 1000)"},
      {{"-o", "--output"}, OPT_CUSTOM, .custom = read_bench_format},
      {{"--bench-warmup"}, OPT_INT, .count = &o->bench_warmup, .min = 0, .max = 100000,
       .takes = "a count (0 to 100000)"},
      {{"--bench-prompt"}, OPT_INT, .count = &o->bench_prompt, .min = 2, .max = 65536,
       .takes = "a count of prompt tokens (2 to 65536)"},
      {{"--timeout-ms"}, OPT_REAL, .real = &o->timeout_ms, .lo = 0, .hi = INFINITY,
       .lo_open = true, .takes = "a positive number"},
      {{"--trace"}, OPT_TEXT, .text = &o->trace},
      /* After --temp: a typo of it ("--tmep") suggests --temp first. */
      {{"--tp"}, OPT_INT, .count = &o->tp, .min = 1, .max = 64,
       .takes = "a number of ranks from 1 to 64", .compile_only = true},
      {{"-v", "--verbose"}, OPT_SWITCH, .on = &o->verbose},
  };
  const size_t n_opts = sizeof opts / sizeof opts[0];
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (arg[0] != '-') {
      if (!read_target(o, "TARGET", arg))
        return 1;
      continue;
    }
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      usage(stdout);
      return 2;
    }
    if (strcmp(arg, "--version") == 0) {
      amk_version_print(stdout, "amk-run");
      return 2;
    }
    /* --name=value, or the value in the next argument (include/amk/cli.h,
     * as amk-opt takes them). */
    AmkCliFlag f;
    if (!amk_cli_flag(arg, &f)) {
      fprintf(stderr, "amk-run: error: unknown option '%s'; see 'amk-run --help'\n", arg);
      return 1;
    }
    char name[64];
    const char *value = NULL;
    const char *eq = f.value ? f.value - 1 : NULL;
    size_t name_len = (size_t)f.dashes + f.name_len;
    const Option *opt = NULL;
    if (name_len < sizeof name) {
      memcpy(name, arg, name_len);
      name[name_len] = '\0';
      opt = find_option(name, opts, n_opts);
    }
    if (!opt) {
      const char *hint = name_len < sizeof name ? suggest_option(name, opts, n_opts) : NULL;
      if (hint)
        fprintf(stderr, "amk-run: error: unknown option '%s'; did you mean '%s'?\n", arg, hint);
      else
        fprintf(stderr, "amk-run: error: unknown option '%s'; see 'amk-run --help'\n", arg);
      return 1;
    }
    if (eq)
      value = eq + 1;
    if (opt->kind == OPT_SWITCH && value) {
      fprintf(stderr, "amk-run: error: '%s' takes no value\n", name);
      return 1;
    }
    if (opt->kind != OPT_SWITCH && !(value = amk_cli_value(&f, argc, argv, &i, "amk-run")))
      return 1;
    if (!apply_option(o, opt, name, value))
      return 1;
  }
  return check_combination(o);
}

void run_options_free(RunOptions *o) {
  free(o->prompt_ids);
  o->prompt_ids = NULL;
}
