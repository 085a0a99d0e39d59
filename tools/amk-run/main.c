/* amk-run: decode tokens with a compiled AMK program.
 *
 *   amk-run [options] [-m] TARGET
 *
 * TARGET is a HuggingFace model folder (compiled first by the default
 * pipeline) or a compiled .amkir / .json program (weights from the folder it
 * names, or --weights DIR). The prompt and the generated text (token ids
 * without a tokenizer) go to stdout as they are produced; notes and timing
 * go to stderr; -cnv holds a conversation on stdin and stdout. This file loads the program and
 * the weights and picks the engines; run.h lists the other pieces.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "amk/backend.h"
#include "amk/engine.h"
#include "amk/host.h"
#include "amk/io.h"
#include "amk/pass.h"
#include "amk/path.h"
#include "amk/pipeline.h"
#include "amk/plan.h"
#include "amk/progress.h"
#include "amk/tp.h"
#include "amk/validate.h"
#include "amk/vm.h"
#include "amk/weights.h"
#include "run.h"

double run_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static bool has_pass(const AmkPipeline *p, const char *name) {
  for (size_t i = 0; i < amk_pipeline_size(p); i++)
    if (strcmp(amk_pipeline_pass_at(p, i)->name, name) == 0)
      return true;
  return false;
}

/* Compiles a model folder through the pipeline (with --tp N, rank `rank`'s
 * program: the shard pass right after import; `pipeline` overrides the
 * pipeline when not NULL), or reads a program. */
static AmkModule *load_program(const RunOptions *o, int64_t rank, const char *pipeline_text,
                               AmkDiagEngine *diag, char **text_out, size_t *len_out) {
  *text_out = NULL;
  *len_out = 0;
  AmkModule *m;
  bool folder = amk_is_directory(o->target);
  if (!folder) {
    if (o->compile_flag) {
      fprintf(stderr, "amk-run: error: %s applies when compiling a model folder; '%s' is "
                      "already compiled\n", o->compile_flag, o->target);
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
  return run_compile_folder(o, rank, pipeline_text, 1, false, diag);
}

bool run_prefill_wanted(const RunOptions *o) { return o->prefill; }

/* Whether the program's activations are bf16 or f16, which the tensor
 * cores take (plan->low_precision also counts a quantized f32 program's
 * f16 scales). */
static bool activations_16bit(const AmkPlan *plan) {
  for (uint32_t b = 0; b < plan->n_buffers; b++)
    if (plan->m->buffers[b].kind == AMK_KIND_ACTIVATION &&
        (plan->buffers[b].dtype == AMK_DTYPE_BF16 || plan->buffers[b].dtype == AMK_DTYPE_F16))
      return true;
  return false;
}

/* Whether short prefill chunks are padded: on the GPU (one NVRTC compile
 * for every prompt length), not on the CPU VM (a compile is cheap there, a
 * padding row is a row of work); $AMK_PREFILL_PAD=1 or 0 says otherwise
 * (the tests pad on the CPU). */
static bool prefill_pads(const AmkEngine *engine) {
  const char *env = getenv("AMK_PREFILL_PAD");
  if (env && (strcmp(env, "0") == 0 || strcmp(env, "1") == 0))
    return env[0] == '1';
  return strcmp(amk_engine_name(engine), "cuda") == 0;
}

AmkModule *run_compile_folder(const RunOptions *o, int64_t rank, const char *pipeline_text,
                              int64_t batch_size, bool all_logits, AmkDiagEngine *diag) {
  AmkModule *m = amk_module_new();
  m->model_dir = amk_arena_strdup(&m->arena, o->target);
  m->source_name = m->model_dir;
  bool prefill = batch_size > 1;
  char batch_text[24];
  snprintf(batch_text, sizeof batch_text, "%lld", (long long)batch_size);
  /* The library's pipeline, with the compile options as amk-opt's --key=value
   * would give them: each value is parsed once, here. */
  const char *chosen = pipeline_text ? pipeline_text : o->pipeline;
  bool starts_with_import = strncmp(chosen, "import", 6) == 0 && (chosen[6] == ',' || !chosen[6]);
  bool tp = o->tp > 1 && !pipeline_text;
  /* --quant asks for the quantize pass right after import, unless the
   * pipeline has one; with --tp N the shard pass comes before it (shard
   * splits float weights; each rank then quantizes its slices). A pipeline
   * without import first is refused below. */
  AmkPipeline *pipeline = amk_pipeline_new();
  bool ok = amk_pipeline_parse(pipeline, chosen, diag);
  bool add_quantize = ok && !pipeline_text && (o->quant || o->quant_group || o->quant_keep) &&
                      !has_pass(pipeline, "quantize");
  if (ok && starts_with_import && (tp || add_quantize)) {
    char *composed = amk_xmalloc(strlen(chosen) + 32);
    sprintf(composed, "import%s%s%s", tp ? ",shard" : "", add_quantize ? ",quantize" : "",
            chosen + 6);
    amk_pipeline_free(pipeline);
    pipeline = amk_pipeline_new();
    ok = amk_pipeline_parse(pipeline, composed, diag);
    free(composed);
  }
  const struct {
    const char *key, *value;
  } options[] = {{"max-seq", o->max_seq},   {"dtype", o->dtype},
                 {"target", o->gpu_target}, {"quant", o->quant},
                 {"quant-group", o->quant_group}, {"quant-keep", o->quant_keep},
                 {"batch-size", prefill ? batch_text : NULL},
                 {"prefill-logits", prefill && all_logits ? "all" : NULL}};
  for (size_t i = 0; ok && i < sizeof options / sizeof options[0]; i++)
    if (options[i].value && (!pipeline_text || strncmp(options[i].key, "quant", 5) != 0))
      ok = amk_pipeline_set_option(pipeline, options[i].key, options[i].value, diag);
  if (ok && tp) {
    char n[24], r[24];
    snprintf(n, sizeof n, "%" PRId64, o->tp);
    snprintf(r, sizeof r, "%" PRId64, rank);
    ok = amk_pipeline_set_option(pipeline, "tp", n, diag) &&
         amk_pipeline_set_option(pipeline, "tp-rank", r, diag);
  }
  const AmkPassInfo *first = amk_pipeline_pass_at(pipeline, 0);
  if (ok && (!first || strcmp(first->name, "import") != 0)) {
    fprintf(stderr, "amk-run: error: a model folder's pipeline must start with import\n");
    ok = false;
  }
  if (ok)
    ok = amk_pipeline_run(pipeline, m, diag, NULL).status == AMK_PIPELINE_OK;
  amk_pipeline_free(pipeline);
  if (ok && o->save_program && !prefill) {
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
  if (m->model_dir[0] != '/' && !amk_is_directory(o->target)) {
    const char *slash = strrchr(o->target, '/');
    if (slash) {
      size_t n = (size_t)(slash - o->target) + 1 + strlen(m->model_dir) + 1;
      char *joined = amk_xmalloc(n);
      snprintf(joined, n, "%.*s/%s", (int)(slash - o->target), o->target, m->model_dir);
      if (amk_is_directory(joined))
        return joined;
      free(joined);
    }
  }
  return amk_xstrdup(m->model_dir);
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
static bool fits_host_memory(AmkPlan *const *plans, uint32_t n_plans, AmkDiagEngine *diag) {
  int64_t weight_bytes = 0, other_bytes = 0;
  /* A tensor-parallel group's ranks all live in this process. */
  for (uint32_t i = 0; i < n_plans; i++) {
    const AmkPlan *plan = plans[i];
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
  }
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

/* "12 ms" under a second, else as progress lines write it ("1.2 s"). */
static void format_took(char *buf, size_t size, double ms) {
  if (ms < 999.5)
    snprintf(buf, size, "%.0f ms", ms);
  else
    amk_progress_format_duration(buf, size, ms / 1e3);
}

/* -v: how long a phase took. */
static void say_phase(const char *what, double ms) {
  char took[32];
  format_took(took, sizeof took, ms);
  fprintf(stderr, "amk-run: %s in %s\n", what, took);
}

/* -v: the weights' bytes by where they came from, and the rate of the load
 * (mapped bytes are read from the file only when an engine touches them). */
static void say_weights(const AmkPlan *plan, const AmkWeights *w, double ms) {
  int64_t mapped = 0, converted = 0, quantized = 0, random = 0;
  for (uint32_t b = 0; b < plan->n_buffers; b++) {
    int64_t n = plan->buffers[b].nbytes;
    switch (amk_weights_origin(w, b)) {
    case AMK_WEIGHTS_MAPPED:
    case AMK_WEIGHTS_JOINED:
    case AMK_WEIGHTS_REORDERED: /* columns or a transpose of mapped tensors, copied as used */
      mapped += n;
      break;
    case AMK_WEIGHTS_CONVERTED:
      converted += n;
      break;
    case AMK_WEIGHTS_QUANTIZED:
      quantized += n;
      break;
    case AMK_WEIGHTS_RANDOM:
      random += n;
      break;
    case AMK_WEIGHTS_NONE:
    case AMK_WEIGHTS_SYNTHETIC: /* the plan's own tables, not weights */
      break;
    }
  }
  int64_t total = mapped + converted + quantized + random;
  char size[32], took[32], rate[32] = "";
  amk_progress_format_bytes(size, sizeof size, (double)total);
  format_took(took, sizeof took, ms);
  if (ms > 0) {
    amk_progress_format_bytes(rate, sizeof rate, (double)total / (ms / 1e3));
    strcat(rate, "/s");
  }
  fprintf(stderr, "amk-run: loaded %s of weights in %s%s%s%s", size, took, rate[0] ? " (" : "",
          rate, rate[0] ? ")" : "");
  const struct {
    int64_t bytes;
    const char *how;
  } parts[] = {{mapped, "mapped from the checkpoint"},
               {converted, "converted"},
               {quantized, "quantized"},
               {random, "random, made when first read"}};
  const char *sep = ": ";
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    if (parts[i].bytes > 0) {
      amk_progress_format_bytes(size, sizeof size, (double)parts[i].bytes);
      fprintf(stderr, "%s%s %s", sep, size, parts[i].how);
      sep = ", ";
    }
  fputc('\n', stderr);
}

/* --seed -1: a seed from the system's random source (the clock and the
 * process id where there is none), in [0, 2^32) so that it reads back as
 * --seed. */
static uint64_t random_seed(void) {
  uint32_t seed = 0;
  FILE *f = fopen("/dev/urandom", "rb");
  bool got = f && fread(&seed, sizeof seed, 1, f) == 1;
  if (f)
    fclose(f);
  if (!got) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    seed = (uint32_t)ts.tv_nsec ^ (uint32_t)ts.tv_sec ^ ((uint32_t)getpid() << 16);
  }
  return seed;
}

/* Which device decodes: "cuda" or "cpu"; NULL after reporting when the GPU
 * is needed and there is none. */
static const char *choose_device(const RunOptions *o, bool need_gpu) {
  if (strcmp(o->device, "cpu") == 0)
    return "cpu";
  char why[512];
  if (amk_cuda_available(why, sizeof why))
    return "cuda";
  if (need_gpu) {
    fprintf(stderr, "amk-run: error: --device cuda: no usable GPU: %s\n", why);
    return NULL;
  }
  if (!o->json)
    fprintf(stderr, "amk-run: no usable GPU (%s); decoding on the CPU reference VM\n", why);
  return "cpu";
}

int main(int argc, char **argv) {
  RunOptions o = {0};
  int rc = run_parse_args(argc, argv, &o);
  if (rc) {
    run_options_free(&o);
    return rc == 2 ? 0 : 1;
  }
  if (o.random_seed) {
    o.sampling.seed = random_seed();
    if (!o.json)
      fprintf(stderr, "amk-run: seed = %" PRIu64 "\n", o.sampling.seed);
  }
  /* --bench times the GPU, unless --device cpu asks for the reference VM. */
  bool cpu_bench = o.bench && strcmp(o.device, "cpu") == 0;
  bool need_gpu = strcmp(o.device, "cuda") == 0 || o.check || (o.bench && !cpu_bench) || o.trace;
  const char *device = choose_device(&o, need_gpu);
  if (!device) {
    run_options_free(&o);
    return 1;
  }
  AmkDiagEngine *diag = amk_diag_new(stderr);
  amk_diag_set_source(diag, "amk-run", NULL, 0);
  /* Batched prefill: -b > 1, a model folder (the prefill programs are
   * compiled from it), on the CPU reference VM or the GPU (with --check
   * the reference VM runs the same chunks, compared chunk by chunk), and one
   * rank (tensor-parallel prefill programs do not exist yet). A fused decode
   * program's KV rows are copied from the prefill programs' caches
   * (prefill.c): through host memory on the CPU, device to device on the
   * GPU. */
  o.prefill = o.batch_size > 1 && amk_is_directory(o.target) &&
              (strcmp(device, "cpu") == 0 || strcmp(device, "cuda") == 0) && o.tp <= 1;

  double t_start = run_now_ms();
  char *text = NULL;
  size_t text_len = 0;
  /* With --tp N, N rank programs (rank 0's is `m`, the one the text side
   * and the report read). */
  uint32_t n_ranks = o.tp > 1 ? (uint32_t)o.tp : 1;
  AmkModule *ranks[AMK_TP_MAX_RANKS] = {NULL};
  AmkPlan *plans[AMK_TP_MAX_RANKS] = {NULL};
  AmkWeights *rank_weights[AMK_TP_MAX_RANKS] = {NULL};
  AmkModule *m = load_program(&o, 0, NULL, diag, &text, &text_len);
  ranks[0] = m;
  bool ok = m != NULL;
  for (uint32_t r = 1; ok && r < n_ranks; r++) {
    char *unused_text = NULL;
    size_t unused_len = 0;
    /* Rank 0's compile made the remarks about the folder; the other ranks'
     * would repeat them, so only their errors, warnings and notes pass. */
    AmkDiagEngine *rank_diag = amk_diag_new(stderr);
    amk_diag_set_capture(rank_diag, 1);
    ok = (ranks[r] = load_program(&o, r, NULL, rank_diag, &unused_text, &unused_len)) != NULL;
    for (size_t i = 0; i < amk_diag_captured_count(rank_diag); i++) {
      const AmkDiagnostic *d = amk_diag_captured(rank_diag, i);
      if (d->severity != AMK_SEVERITY_REMARK)
        amk_diag(diag, d->severity, d->loc, "%s", d->message);
    }
    amk_diag_free(rank_diag);
    free(unused_text);
  }
  /* -v says where the time goes, phase by phase. */
  bool say = o.verbose && !o.json;
  if (ok && say) {
    char what[1200];
    if (amk_is_directory(o.target))
      snprintf(what, sizeof what, "compiled %s (%" PRIu32 " tasks%s)", o.target, m->n_tasks,
               n_ranks > 1 ? " on rank 0" : "");
    else
      snprintf(what, sizeof what, "read %s (%" PRIu32 " tasks)", o.target, m->n_tasks);
    say_phase(what, run_now_ms() - t_start);
  }
  char *weights = ok ? weights_folder(&o, m) : NULL;
  /* Errors from here on are about weights and runs. One with a place is at
   * a task or buffer of the program file it was read from (a program
   * compiled from a folder has no places); the others name their file
   * themselves, after amk-run. */
  if (text)
    amk_diag_set_source(diag, o.target, text, text_len);
  else
    amk_diag_set_source(diag, o.target, NULL, 0);
  amk_diag_set_unlocated_name(diag, "amk-run");
  /* The prompt and the model folder's EOS ids, before anything is loaded:
   * a text prompt without a tokenizer fails here. */
  RunText run_text = {0};
  ok = ok && run_text_prepare(&run_text, &o, weights, diag);
  double t_phase = run_now_ms();
  for (uint32_t r = 0; ok && r < n_ranks; r++)
    ok = (plans[r] = amk_plan_build(ranks[r], NULL, diag)) != NULL;
  /* Each plan proved its rank safe; the group's protocol is proved here. */
  if (ok && n_ranks > 1)
    ok = amk_validate_tp((const AmkModule *const *)ranks, n_ranks, diag);
  AmkPlan *plan = plans[0];
  if (ok && say)
    say_phase(n_ranks > 1 ? "validated and planned the rank programs"
                          : "validated and planned the program", run_now_ms() - t_phase);
  ok = ok && run_text_check_vocab(&run_text, plan->vocab, diag);
  /* The reference VM decodes (no GPU, or beside it with --check/--bench):
   * it needs the whole program in host memory, checked before loading. */
  bool vm_checked = false;
  if (ok && (strcmp(device, "cpu") == 0 || o.check || o.bench)) {
    vm_checked = true;
    ok = fits_host_memory(plans, n_ranks, diag);
  }
  t_phase = run_now_ms();
  if (ok && n_ranks > 1 && o.random_weights) {
    /* The ranks' random weights are slices of one random model: the
     * unsharded program's (import's), so --tp N decodes what --tp 1 does. */
    char *unused_text = NULL;
    size_t unused_len = 0;
    /* Rank 0's compile said what there was to say about the folder; this
     * one's notes are kept back, its errors passed on. */
    AmkDiagEngine *quiet = amk_diag_new(stderr);
    amk_diag_set_capture(quiet, 1);
    AmkModule *whole = load_program(&o, 0, "import", quiet, &unused_text, &unused_len);
    free(unused_text);
    AmkPlan *whole_plan = whole ? amk_plan_build(whole, NULL, quiet) : NULL;
    for (size_t i = 0; i < amk_diag_captured_count(quiet); i++)
      if (amk_diag_captured(quiet, i)->severity == AMK_SEVERITY_ERROR)
        amk_diag(diag, AMK_SEVERITY_ERROR, amk_diag_captured(quiet, i)->loc, "%s",
                 amk_diag_captured(quiet, i)->message);
    amk_diag_free(quiet);
    for (uint32_t r = 0; whole_plan && r < n_ranks; r++)
      if (!(rank_weights[r] = amk_weights_random_slices(plans[r], whole_plan,
                                                        o.random_weights_seed, diag)))
        break;
    amk_plan_free(whole_plan);
    amk_module_free(whole);
  } else {
    for (uint32_t r = 0; ok && r < n_ranks; r++)
      if (!(rank_weights[r] = o.random_weights
                                  ? amk_weights_random(plans[r], o.random_weights_seed, diag)
                                  : amk_weights_load(plans[r], weights, diag)))
        break;
  }
  for (uint32_t r = 0; ok && r < n_ranks; r++)
    ok = rank_weights[r] != NULL;
  AmkWeights *loaded = rank_weights[0];
  if (ok && say)
    say_weights(plan, loaded, run_now_ms() - t_phase);
  t_phase = run_now_ms();
  /* The engine that decodes, and with --check or --bench the reference VM
   * stepping beside it over the same plan and weights. */
  AmkEngineOptions eopt = amk_engine_options_default();
  eopt.timeout_ms = o.timeout_ms;
  eopt.verbose = o.verbose;
  eopt.trace = o.trace != NULL;
  eopt.threads = (int)o.threads;
  AmkEngine *engine = NULL, *reference = NULL;
  if (n_ranks > 1) {
    eopt.tp_plans = (const AmkPlan *const *)plans;
    eopt.tp_weights = (const AmkWeights *const *)rank_weights;
    eopt.tp_size = n_ranks;
  }
  if (ok && n_ranks > 1 && strcmp(device, "cuda") == 0) {
    /* One rank per GPU; without the GPUs (or NCCL) the reference VM's group
     * decodes instead, unless the GPU was asked for. */
    engine = amk_engine_create(amk_cuda_group_engine(), plan, loaded, &eopt, diag);
    if (!engine && need_gpu) {
      ok = false;
    } else if (!engine) {
      device = "cpu";
      if (!o.json)
        fprintf(stderr, "amk-run: the GPUs cannot run this group (above); decoding on the CPU "
                        "reference VM\n");
    } else if (!o.json && !o.bench) {
      fprintf(stderr, "amk-run: decoding on %s\n", amk_engine_describe(engine));
    }
    if (engine && say)
      say_phase("started the GPUs' tensor-parallel group (codegen, NVRTC, upload, NCCL)",
                run_now_ms() - t_phase);
    t_phase = run_now_ms();
  }
  if (ok && n_ranks > 1 && !engine) {
    if (!vm_checked)
      ok = fits_host_memory(plans, n_ranks, diag);
    vm_checked = true;
    ok = ok && (engine = amk_engine_create(amk_vm_group_engine(), plan, loaded, &eopt, diag)) != NULL;
    if (ok && say)
      say_phase("started the reference VM's tensor-parallel group", run_now_ms() - t_phase);
    if (ok && o.verbose && !o.json)
      fprintf(stderr, "amk-run: decoding on the %s\n", amk_engine_describe(engine));
  }
  if (ok && !engine && strcmp(device, "cuda") == 0) {
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
    if (engine && say)
      say_phase("started the CUDA engine (codegen, the NVRTC compile or the cubin cache, "
                "upload)", run_now_ms() - t_phase);
    t_phase = run_now_ms();
  }
  /* The CUDA engine refused and the VM takes over: its memory was not
   * checked yet. */
  if (ok && !engine && !vm_checked)
    ok = fits_host_memory(plans, n_ranks, diag);
  if (ok && !engine) {
    ok = (engine = amk_engine_create(amk_vm_engine(), plan, loaded, &eopt, diag)) != NULL;
    if (ok && say)
      say_phase("started the reference VM", run_now_ms() - t_phase);
    if (ok && o.verbose && !o.json)
      fprintf(stderr, "amk-run: decoding on the %s\n", amk_engine_describe(engine));
  }
  if (ok && (o.check || (o.bench && !cpu_bench)))
    ok = (reference = amk_engine_create(n_ranks > 1 ? amk_vm_group_engine() : amk_vm_engine(),
                                        plan, loaded, &eopt, diag)) != NULL;
  /* Batched prefill: from a model folder (the prefill programs are
   * compiled from it), on an engine that runs them; with --check the
   * reference VM prefills the same chunks. */
  RunPrefill *prefill = NULL, *reference_prefill = NULL;
  if (ok && run_prefill_wanted(&o) && amk_engine_can_prefill(engine)) {
    /* The GPU pads short chunks to one -b-row program (prefill.c): one
     * NVRTC compile, done here when the prompt will use it. With --check
     * the reference VM pads alike, so that both run the same rows. */
    bool pad = prefill_pads(engine);
    /* f32 GEMM tiles run on the CUDA cores, which take at most
     * AMK_CUDA_CORE_GEMM_MAX_ROWS rows. */
    int64_t batch = o.batch_size;
    bool f32_gpu = strcmp(amk_engine_name(engine), "cuda") == 0 && !activations_16bit(plan);
    if (f32_gpu && batch > AMK_CUDA_CORE_GEMM_MAX_ROWS)
      batch = AMK_CUDA_CORE_GEMM_MAX_ROWS;
    prefill = run_prefill_new(&o, loaded, engine, pad, batch);
    /* --check: the reference VM prefills the same chunks beside it. */
    if (reference && o.check)
      reference_prefill = run_prefill_new(&o, loaded, reference, pad, batch);
    if (o.verbose && !o.json)
      fprintf(stderr, "amk-run: the prompt is fed in chunks of up to %lld tokens (prefill programs%s%s)\n",
              (long long)batch, batch < o.batch_size ? "; f32 on the GPU: the CUDA cores' GEMM" : "",
              pad ? "; a shorter chunk runs padded on the same program" : "");
    /* The one program now when a prompt will need it (all but the
     * prompt's last token in chunks of two or more). */
    bool needed = o.chat || (o.bench && !cpu_bench) || run_text.n_prompt >= 3;
    if (pad && needed) {
      t_phase = run_now_ms();
      ok = run_prefill_prepare(prefill, diag) &&
           (!reference_prefill || run_prefill_prepare(reference_prefill, diag));
      if (ok && say)
        say_phase("compiled and started the prefill program", run_now_ms() - t_phase);
    }
  } else if (ok && o.verbose && !o.json && o.batch_size > 1)
    fprintf(stderr, "amk-run: the prompt is fed token by token (%s)\n",
            !amk_is_directory(o.target) ? "prefill programs are compiled from a model folder"
            : o.tp > 1 ? "tensor-parallel ranks have no prefill programs yet"
                       : "the engine runs no prefill programs");
  int exit_status = ok ? 0 : 1;
  if (ok) {
    RunContext run = {.o = &o, .text = &run_text, .prefill = prefill, .engine = engine,
                      .reference = reference, .reference_prefill = reference_prefill,
                      .device = device, .t_start = t_start, .t_loaded = run_now_ms()};
    exit_status = o.bench  ? run_bench(&run, diag)
                  : o.chat ? run_chat(&run, diag)
                           : run_decode(&run, diag);
  }
  run_prefill_free(prefill);
  run_prefill_free(reference_prefill);
  amk_engine_free(reference);
  amk_engine_free(engine);
  for (uint32_t r = 0; r < n_ranks; r++) {
    amk_weights_free(rank_weights[r]);
    amk_plan_free(plans[r]);
    amk_module_free(ranks[r]);
  }
  run_text_free(&run_text);
  free(weights);
  free(text);
  run_options_free(&o);
  amk_diag_free(diag);
  return exit_status;
}
