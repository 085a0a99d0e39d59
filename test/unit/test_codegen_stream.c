/* The weight stream's options: the environment's tuning, and what codegen
 * emits for each mode (backend/codegen.c, docs/Backend.md). */
#include <stdlib.h>
#include <string.h>

#include "amk/backend.h"
#include "amk/io.h"
#include "unit.h"

static AmkModule *load(const char *path, char **text) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  size_t len = 0;
  *text = amk_read_file(path, &len, d);
  AmkModule *m = *text ? amk_parse_text(path, *text, len, d) : NULL;
  amk_diag_free(d);
  return m;
}

/* The generated source for m under opt (NULL: defaults); malloc'd. */
static char *generate(const AmkModule *m, const AmkCodegenOptions *opt) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  AmkCodegen cg;
  char *source = NULL;
  if (amk_cuda_codegen(m, opt, &cg, d)) {
    source = cg.source;
    cg.source = NULL;
    amk_cuda_codegen_free(&cg);
  }
  amk_diag_free(d);
  return source;
}

static void clear_env(void) {
  unsetenv("AMK_CUDA_STREAM");
  unsetenv("AMK_CUDA_L2_AHEAD_KB");
  unsetenv("AMK_CUDA_L2_HOLD_KB");
  unsetenv("AMK_CUDA_MLP_HEAD_KB");
  unsetenv("AMK_CUDA_NORM_STAGE");
  unsetenv("AMK_CUDA_RING_SLOT_BYTES");
  unsetenv("AMK_CUDA_RING_SLOTS");
  unsetenv("AMK_CUDA_LOOKAHEAD");
  unsetenv("AMK_CUDA_WAIT_GAP_NS");
  unsetenv("AMK_CUDA_WAIT_SLOW_AFTER_NS");
  unsetenv("AMK_CUDA_WAIT_SLOW_GAP_NS");
  unsetenv("AMK_CUDA_WAIT_DEPTH");
  unsetenv("AMK_CUDA_WAIT_CACHE");
  unsetenv("AMK_CUDA_THREADS");
  unsetenv("AMK_CUDA_GEMV_XS_VEC");
  unsetenv("AMK_CUDA_GEMV_PAIR_BYTES");
  unsetenv("AMK_CUDA_GEMV_XS_PAD");
  unsetenv("AMK_CUDA_KV_PREFETCH");
  unsetenv("AMK_CUDA_ATTN_V_LOADS");
  unsetenv("AMK_CUDA_QGEMV_LOADS");
  unsetenv("AMK_CUDA_QGEMV_MMA");
  unsetenv("AMK_CUDA_QGEMV_STAGES");
  unsetenv("AMK_CUDA_QGEMV_EARLY");
  unsetenv("AMK_CUDA_QGEMV_STAGED_KB");
  unsetenv("AMK_CUDA_QGEMV_STAGE_ROWS");
  unsetenv("AMK_CUDA_QGEMV_SPLIT");
  unsetenv("AMK_CUDA_QSPLIT_STAGES");
  unsetenv("AMK_CUDA_QSPLIT_PIECES");
  unsetenv("AMK_CUDA_QSPLIT_MMA");
  unsetenv("AMK_CUDA_QSPLIT_MMA_I8");
  unsetenv("AMK_CUDA_SILU_FAST");
  unsetenv("AMK_CUDA_GEMM_MMA");
  unsetenv("AMK_CUDA_GEMM_TILE_N");
  unsetenv("AMK_CUDA_MLP_LOADS");
  unsetenv("AMK_CUDA_MLP_GU_ROWS");
  unsetenv("AMK_CUDA_GEMV_PAIR_MIN_ROWS");
  unsetenv("AMK_CUDA_GEMV_MMA");
}

static void test_env(UnitCounts *c) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);
  clear_env();
  AmkCodegenOptions o = {0};
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.weight_stream == AMK_WEIGHT_STREAM_DEFAULT &&
               !o.override_lookahead && o.l2_ahead_kb == 0);
  setenv("AMK_CUDA_STREAM", "ring", 1);
  setenv("AMK_CUDA_RING_SLOT_BYTES", "32768", 1);
  setenv("AMK_CUDA_RING_SLOTS", "5", 1);
  setenv("AMK_CUDA_LOOKAHEAD", "0", 1);
  setenv("AMK_CUDA_L2_AHEAD_KB", "64", 1);
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.weight_stream == AMK_WEIGHT_STREAM_RING &&
               o.ring_slot_bytes == 32768 && o.ring_slots == 5 && o.override_lookahead &&
               o.lookahead == 0 && o.l2_ahead_kb == 64);
  setenv("AMK_CUDA_STREAM", "hybrid", 1);
  setenv("AMK_CUDA_GEMV_MMA", "1", 1);
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.weight_stream == AMK_WEIGHT_STREAM_HYBRID &&
               o.gemv_mma);
  unsetenv("AMK_CUDA_GEMV_MMA");
  setenv("AMK_CUDA_STREAM", "fast", 1);
  CHECK(c, !amk_codegen_options_from_env(&o, d));
  CHECK(c, amk_diag_captured_count(d) == 1 &&
               strstr(amk_diag_captured(d, 0)->message,
                      "AMK_CUDA_STREAM must be off, l2, ring or hybrid, not 'fast'"));
  setenv("AMK_CUDA_STREAM", "off", 1);
  setenv("AMK_CUDA_RING_SLOTS", "x3", 1);
  CHECK(c, !amk_codegen_options_from_env(&o, d));
  CHECK(c, amk_diag_captured_count(d) == 2 &&
               strstr(amk_diag_captured(d, 1)->message, "AMK_CUDA_RING_SLOTS must be an integer"));
  clear_env();
  amk_diag_free(d);
}

/* The wait's and the block's knobs: read from the environment, refused out
 * of range, and emitted as the defines megakernel.cuh reads. */
static void test_wait_knobs(UnitCounts *c) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);
  clear_env();
  AmkCodegenOptions o = {0};
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.wait_gap_ns == 0 && o.wait_depth == 0 && !o.no_wait_cache &&
               o.threads_per_block == 0 && !o.gemv_xs_scalar && o.gemv_pair_max_bytes == 0 &&
               !o.gemv_xs_unpadded && o.qgemv_loads == 0 && !o.no_gemm_mma);
  setenv("AMK_CUDA_GEMM_MMA", "1", 1);
  CHECK(c, amk_codegen_options_from_env(&o, d) && !o.no_gemm_mma);
  setenv("AMK_CUDA_GEMM_MMA", "0", 1);
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.no_gemm_mma);
  unsetenv("AMK_CUDA_GEMM_MMA");
  CHECK(c, o.gemm_tile_n == 0);
  setenv("AMK_CUDA_GEMM_TILE_N", "256", 1);
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.gemm_tile_n == 256);
  unsetenv("AMK_CUDA_GEMM_TILE_N");
  setenv("AMK_CUDA_GEMV_XS_PAD", "0", 1);
  setenv("AMK_CUDA_QGEMV_LOADS", "16", 1);
  setenv("AMK_CUDA_KV_PREFETCH", "0", 1);
  setenv("AMK_CUDA_QGEMV_MMA", "1", 1);
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.gemv_xs_unpadded && o.qgemv_loads == 16 &&
               o.kv_prefetch == 1 && o.qgemv_mma);

  setenv("AMK_CUDA_QGEMV_MMA", "2", 1);
  CHECK(c, !amk_codegen_options_from_env(&o, d));
  unsetenv("AMK_CUDA_QGEMV_MMA");
  setenv("AMK_CUDA_QGEMV_LOADS", "65", 1);
  CHECK(c, !amk_codegen_options_from_env(&o, d));
  CHECK(c, amk_diag_captured_count(d) == 2 &&
               strstr(amk_diag_captured(d, 0)->message,
                      "AMK_CUDA_QGEMV_MMA must be an integer in [0, 1], not '2'") &&
               strstr(amk_diag_captured(d, 1)->message,
                      "AMK_CUDA_QGEMV_LOADS must be an integer in [0, 64], not '65'"));
  amk_diag_free(d);
  /* The attention's knobs: the KV prefetch's place (kept as 1 + the mode)
   * and the value rows in flight, a power of two up to 16. */
  d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);
  clear_env();
  o = (AmkCodegenOptions){0};
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.kv_prefetch == 0 && o.attn_v_loads == 0);
  setenv("AMK_CUDA_KV_PREFETCH", "2", 1);
  setenv("AMK_CUDA_ATTN_V_LOADS", "4", 1);
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.kv_prefetch == 3 && o.attn_v_loads == 4);
  setenv("AMK_CUDA_KV_PREFETCH", "3", 1);
  CHECK(c, !amk_codegen_options_from_env(&o, d));
  setenv("AMK_CUDA_KV_PREFETCH", "0", 1);
  setenv("AMK_CUDA_ATTN_V_LOADS", "6", 1);
  CHECK(c, !amk_codegen_options_from_env(&o, d));
  setenv("AMK_CUDA_ATTN_V_LOADS", "32", 1);
  CHECK(c, !amk_codegen_options_from_env(&o, d));
  CHECK(c, amk_diag_captured_count(d) == 3 &&
               strstr(amk_diag_captured(d, 0)->message,
                      "AMK_CUDA_KV_PREFETCH must be an integer in [0, 2], not '3'") &&
               strstr(amk_diag_captured(d, 1)->message,
                      "AMK_CUDA_ATTN_V_LOADS must be a power of two from 1 to 16, not 6") &&
               strstr(amk_diag_captured(d, 2)->message,
                      "AMK_CUDA_ATTN_V_LOADS must be an integer in [0, 16], not '32'"));
  clear_env();
  amk_diag_free(d);
  /* The staged quantized GEMV's knobs: stages a power of two (0: none, kept
   * as -1 so that 0 means the default), early stages and the threshold as
   * 1 + the value and KiB. */
  d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);
  clear_env();
  o = (AmkCodegenOptions){0};
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.qgemv_stages == 0 && o.qgemv_early == 0 &&
               o.qgemv_staged_kb == 0 && o.qgemv_stage_rows == 0);
  setenv("AMK_CUDA_QGEMV_STAGES", "8", 1);
  setenv("AMK_CUDA_QGEMV_EARLY", "0", 1);
  setenv("AMK_CUDA_QGEMV_STAGED_KB", "256", 1);
  setenv("AMK_CUDA_QGEMV_STAGE_ROWS", "2", 1);
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.qgemv_stages == 8 && o.qgemv_early == 1 &&
               o.qgemv_staged_kb == 256 && o.qgemv_stage_rows == 2);
  setenv("AMK_CUDA_QGEMV_STAGE_ROWS", "0", 1);
  CHECK(c, !amk_codegen_options_from_env(&o, d));
  CHECK(c, amk_diag_captured_count(d) == 1 &&
               strstr(amk_diag_captured(d, 0)->message,
                      "AMK_CUDA_QGEMV_STAGE_ROWS must be 1 or 2, not 0"));
  unsetenv("AMK_CUDA_QGEMV_STAGE_ROWS");
  setenv("AMK_CUDA_QGEMV_STAGES", "0", 1);
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.qgemv_stages == -1);
  setenv("AMK_CUDA_QGEMV_STAGES", "12", 1);
  CHECK(c, !amk_codegen_options_from_env(&o, d));
  setenv("AMK_CUDA_QGEMV_STAGES", "128", 1);
  CHECK(c, !amk_codegen_options_from_env(&o, d));
  CHECK(c, amk_diag_captured_count(d) == 3 &&
               strstr(amk_diag_captured(d, 1)->message,
                      "AMK_CUDA_QGEMV_STAGES must be 0 or a power of two up to 64, not 12") &&
               strstr(amk_diag_captured(d, 2)->message,
                      "AMK_CUDA_QGEMV_STAGES must be an integer in [0, 64], not '128'"));
  amk_diag_free(d);
  d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);
  clear_env();
  o = (AmkCodegenOptions){0};
  setenv("AMK_CUDA_WAIT_GAP_NS", "256", 1);
  setenv("AMK_CUDA_WAIT_DEPTH", "2", 1);
  setenv("AMK_CUDA_WAIT_CACHE", "0", 1);
  setenv("AMK_CUDA_THREADS", "512", 1);
  setenv("AMK_CUDA_GEMV_XS_VEC", "0", 1);
  setenv("AMK_CUDA_GEMV_PAIR_BYTES", "16384", 1);
  setenv("AMK_CUDA_WAIT_SLOW_AFTER_NS", "2000", 1);
  setenv("AMK_CUDA_WAIT_SLOW_GAP_NS", "512", 1);
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.wait_gap_ns == 256 && o.wait_depth == 2 && o.no_wait_cache &&
               o.threads_per_block == 512 && o.gemv_xs_scalar && o.gemv_pair_max_bytes == 16384 &&
               o.wait_slow_after_ns == 2000 && o.wait_slow_gap_ns == 512);
  unsetenv("AMK_CUDA_WAIT_SLOW_AFTER_NS");
  setenv("AMK_CUDA_WAIT_SLOW_GAP_NS", "200000", 1);
  CHECK(c, !amk_codegen_options_from_env(&o, d));
  CHECK(c, amk_diag_captured_count(d) == 1 &&
               strstr(amk_diag_captured(d, 0)->message,
                      "AMK_CUDA_WAIT_SLOW_GAP_NS must be an integer in [0, 100000], not '200000'"));
  unsetenv("AMK_CUDA_WAIT_SLOW_GAP_NS");
  setenv("AMK_CUDA_THREADS", "300", 1);
  CHECK(c, !amk_codegen_options_from_env(&o, d));
  CHECK(c, amk_diag_captured_count(d) == 2 &&
               strstr(amk_diag_captured(d, 1)->message,
                      "AMK_CUDA_THREADS must be 128, 256, 512 or 1024, not 300"));
  setenv("AMK_CUDA_THREADS", "256", 1);
  setenv("AMK_CUDA_WAIT_CACHE", "2", 1);
  CHECK(c, !amk_codegen_options_from_env(&o, d));
  CHECK(c, amk_diag_captured_count(d) == 3 &&
               strstr(amk_diag_captured(d, 2)->message,
                      "AMK_CUDA_WAIT_CACHE must be an integer in [0, 1], not '2'"));
  setenv("AMK_CUDA_WAIT_CACHE", "1", 1);
  setenv("AMK_CUDA_WAIT_DEPTH", "9", 1);
  CHECK(c, !amk_codegen_options_from_env(&o, d));
  CHECK(c, amk_diag_captured_count(d) == 4 &&
               strstr(amk_diag_captured(d, 3)->message,
                      "AMK_CUDA_WAIT_DEPTH must be an integer in [0, 8], not '9'"));
  clear_env();
  amk_diag_free(d);

  char *text = NULL;
  AmkModule *m = load(AMK_SOURCE_DIR "/examples/llama-tiny.amkir", &text);
  CHECK(c, m != NULL);
  if (m) {
    char *dflt = generate(m, NULL);
    CHECK(c, dflt && !strstr(dflt, "#define AMK_WAIT_CACHE 0") &&
                 !strstr(dflt, "#define AMK_WAIT_GAP_NS 96\n") &&
                 !strstr(dflt, "#define AMK_WAIT_DEPTH 3\n") &&

                 strstr(dflt, "#define AMK_NT 256\n"));
    /* By default the L2 stream carries the attention variant's KV rows (its
     * case in amk_variant_kv_span), so no variant has a prewait bit; with
     * the prefetch at the tile's arrival (AMK_KV_PREFETCH 1), or without
     * the stream, its bit is in the mask. */
    CHECK(c, dflt && strstr(dflt, "#define AMK_PREWAIT_MASK 0x0ull\n") &&
                 strstr(dflt, ": amk_attention_prewait<") &&
                 strstr(dflt, ": return amk_attention_kv_span<"));
    AmkCodegenOptions at_arrival = {.kv_prefetch = 2};
    AmkCodegenOptions no_stream = {.weight_stream = AMK_WEIGHT_STREAM_OFF};
    char *arr = generate(m, &at_arrival), *off = generate(m, &no_stream);
    CHECK(c, arr && strstr(arr, "#define AMK_PREWAIT_MASK 0x") &&
                 !strstr(arr, "#define AMK_PREWAIT_MASK 0x0ull") &&
                 strstr(arr, "#define AMK_KV_PREFETCH 1\n"));
    CHECK(c, off && strstr(off, "#define AMK_PREWAIT_MASK 0x") &&
                 !strstr(off, "#define AMK_PREWAIT_MASK 0x0ull"));
    free(arr);
    free(off);
    /* ... where the device's defaults say (no define before them). */
    const char *device = dflt ? strstr(dflt, "// ---- backend/megakernel.cuh ----") : NULL;
    const char *kv = dflt ? strstr(dflt, "#define AMK_KV_PREFETCH ") : NULL;
    const char *v = dflt ? strstr(dflt, "#define AMK_ATTN_V_LOADS ") : NULL;
    const char *slow = dflt ? strstr(dflt, "#define AMK_WAIT_SLOW_AFTER_NS ") : NULL;
    const char *slow_gap = dflt ? strstr(dflt, "#define AMK_WAIT_SLOW_GAP_NS ") : NULL;
    CHECK(c, device && kv > device && v > device && slow > device && slow_gap > device);
    CHECK(c, dflt && !strstr(dflt, "#define AMK_GEMV_XS_PAD 0\n") &&
                 !strstr(dflt, "#define AMK_KV_PREFETCH 0\n") &&
                 !strstr(dflt, "#define AMK_QGEMV_LOADS 4\n") &&
                 !strstr(dflt, "#define AMK_QGEMV_MMA 1\n"));
    AmkCodegenOptions knobs = {.threads_per_block = 512, .wait_gap_ns = 96, .wait_depth = 3,
                               .wait_slow_after_ns = 3000, .wait_slow_gap_ns = 768,
                               .no_wait_cache = true, .gemv_xs_scalar = true,
                               .gemv_pair_max_bytes = 2048, .gemv_xs_unpadded = true,
                               .kv_prefetch = 1, .attn_v_loads = 2,
                               .qgemv_loads = 4, .qgemv_mma = true, .qgemv_early = 3};
    char *k = generate(m, &knobs);
    CHECK(c, k && strstr(k, "#define AMK_GEMV_XS_PAD 0\n") &&
                 strstr(k, "#define AMK_KV_PREFETCH 0\n") &&
                 strstr(k, "#define AMK_ATTN_V_LOADS 2\n") &&
                 strstr(k, "#define AMK_QGEMV_LOADS 4\n") &&
                 strstr(k, "#define AMK_QGEMV_MMA 1\n"));
    /* AMK_CUDA_QGEMV_EARLY=N sets the early stages of int8 and int4 tiles
     * alike; by default each type keeps the device's own (int4: none). */
    CHECK(c, k && strstr(k, "#define AMK_QGEMV_EARLY 2\n#define AMK_QGEMV_EARLY_I4 2\n"));
    const char *early_i4 = dflt ? strstr(dflt, "#define AMK_QGEMV_EARLY_I4 ") : NULL;
    CHECK(c, early_i4 && early_i4 > device && strstr(early_i4, "#define AMK_QGEMV_EARLY_I4 0\n") == early_i4);
    CHECK(c, k && strstr(k, "#define AMK_WAIT_CACHE 0\n") &&
                 strstr(k, "#define AMK_GEMV_XS_VEC 0\n") &&
                 strstr(k, "#define AMK_GEMV_PAIR_MAX_BYTES 2048\n") &&
                 strstr(k, "#define AMK_WAIT_GAP_NS 96\n") &&
                 strstr(k, "#define AMK_WAIT_DEPTH 3\n") &&
                 strstr(k, "#define AMK_WAIT_SLOW_AFTER_NS 3000\n") &&
                 strstr(k, "#define AMK_WAIT_SLOW_GAP_NS 768\n") &&
                 strstr(k, "#define AMK_NT 512\n"));
    free(dflt);
    free(k);
  }
  amk_module_free(m);
  free(text);
}

/* The GEMV and mlp streaming knobs: from the environment (0 stays "the
 * device default"; a pair threshold of 0 is a real value, so it is kept as
 * 1 + rows) into the generated defines. */
static void test_row_knobs(UnitCounts *c) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);
  clear_env();
  AmkCodegenOptions o = {0};
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.mlp_gu_rows == 0 &&
               o.gemv_pair_min_rows == 0 && o.mlp_loads == 0);
  setenv("AMK_CUDA_MLP_GU_ROWS", "4", 1);
  setenv("AMK_CUDA_GEMV_PAIR_MIN_ROWS", "0", 1);
  setenv("AMK_CUDA_MLP_LOADS", "8", 1);
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.mlp_gu_rows == 4 &&
               o.gemv_pair_min_rows == 1 && o.mlp_loads == 8);
  setenv("AMK_CUDA_MLP_GU_ROWS", "9", 1);
  CHECK(c, !amk_codegen_options_from_env(&o, d));
  setenv("AMK_CUDA_MLP_GU_ROWS", "1", 1);
  setenv("AMK_CUDA_GEMV_PAIR_MIN_ROWS", "-1", 1);
  CHECK(c, !amk_codegen_options_from_env(&o, d));
  CHECK(c, amk_diag_captured_count(d) == 2 &&
               strstr(amk_diag_captured(d, 0)->message,
                      "AMK_CUDA_MLP_GU_ROWS must be an integer in [0, 8], not '9'") &&
               strstr(amk_diag_captured(d, 1)->message,
                      "AMK_CUDA_GEMV_PAIR_MIN_ROWS must be an integer in [0, 1073741824], "
                      "not '-1'"));
  /* The split-K quantized GEMV and the SiLU prologue: unset leaves the
   * defaults (large tiles split, the fast SiLU), each value maps to its
   * option, and bad values are refused by name. */
  clear_env();
  o = (AmkCodegenOptions){0};
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.qgemv_split == AMK_QGEMV_SPLIT_DEFAULT &&
               o.qsplit_stages == 0 && o.qsplit_pieces == 0 && !o.silu_precise &&
               !o.no_qsplit_mma && !o.no_qsplit_mma_i8);
  setenv("AMK_CUDA_QGEMV_SPLIT", "0", 1);
  setenv("AMK_CUDA_QSPLIT_STAGES", "8", 1);
  setenv("AMK_CUDA_QSPLIT_PIECES", "2", 1);
  setenv("AMK_CUDA_SILU_FAST", "0", 1);
  setenv("AMK_CUDA_QSPLIT_MMA", "0", 1);
  setenv("AMK_CUDA_QSPLIT_MMA_I8", "0", 1);
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.qgemv_split == AMK_QGEMV_SPLIT_NONE &&
               o.qsplit_stages == 8 && o.qsplit_pieces == 2 && o.silu_precise &&
               o.no_qsplit_mma && o.no_qsplit_mma_i8);
  setenv("AMK_CUDA_QGEMV_SPLIT", "1", 1);
  setenv("AMK_CUDA_SILU_FAST", "1", 1);
  setenv("AMK_CUDA_QSPLIT_MMA", "1", 1);
  setenv("AMK_CUDA_QSPLIT_MMA_I8", "1", 1);
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.qgemv_split == AMK_QGEMV_SPLIT_LARGE &&
               !o.silu_precise && !o.no_qsplit_mma && !o.no_qsplit_mma_i8);
  setenv("AMK_CUDA_QGEMV_SPLIT", "2", 1);
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.qgemv_split == AMK_QGEMV_SPLIT_ALL);
  size_t before = amk_diag_captured_count(d);
  setenv("AMK_CUDA_QSPLIT_STAGES", "6", 1);
  CHECK(c, !amk_codegen_options_from_env(&o, d));
  setenv("AMK_CUDA_QSPLIT_STAGES", "4", 1);
  setenv("AMK_CUDA_QSPLIT_PIECES", "17", 1);
  CHECK(c, !amk_codegen_options_from_env(&o, d));
  CHECK(c, amk_diag_captured_count(d) == before + 2 &&
               strstr(amk_diag_captured(d, before)->message,
                      "AMK_CUDA_QSPLIT_STAGES must be a power of two from 1 to 64, not 6") &&
               strstr(amk_diag_captured(d, before + 1)->message,
                      "AMK_CUDA_QSPLIT_PIECES must be an integer in [0, 16], not '17'"));
  clear_env();
  amk_diag_free(d);

  char *text = NULL;
  AmkModule *m = load(AMK_SOURCE_DIR "/examples/llama-tiny.amkir", &text);
  CHECK(c, m != NULL);
  if (m) {
    char *dflt = generate(m, NULL);
    CHECK(c, dflt && !strstr(dflt, "#define AMK_GEMV_PAIR_MIN_ROWS 0\n") &&
                 !strstr(dflt, "#define AMK_MLP_GU_ROWS 4\n") &&
                 strstr(dflt, "#define AMK_GEMV_PAIR_MIN_ROWS 128\n") &&
                 strstr(dflt, "#define AMK_MLP_GU_ROWS 0\n"));
    AmkCodegenOptions knobs = {.gemv_pair_min_rows = 1, .mlp_gu_rows = 4, .mlp_loads = 8};
    char *k = generate(m, &knobs);
    CHECK(c, k && strstr(k, "#define AMK_GEMV_PAIR_MIN_ROWS 0\n") &&
                 strstr(k, "#define AMK_MLP_GU_ROWS 4\n") &&
                 strstr(k, "#define AMK_MLP_DOWN_UNROLL 8\n"));
    free(dflt);
    free(k);
  }
  amk_module_free(m);
  free(text);
}

/* The bundled example program (the source tree's, found at build time). */
static void test_modes(UnitCounts *c) {
  char *text = NULL;
  AmkModule *m = load(AMK_SOURCE_DIR "/examples/llama-tiny.amkir", &text);
  CHECK(c, m != NULL);
  if (m) {
    char *dflt = generate(m, NULL);
    CHECK(c, dflt && strstr(dflt, "#define AMK_STREAM_MODE 1\n") &&
                 strstr(dflt, "#define AMK_L2_AHEAD_BYTES 65536\n") &&
                 strstr(dflt, "#define AMK_LOOKAHEAD 2\n") &&
                 strstr(dflt, "return amk_gemv_stream<"));
    AmkCodegenOptions off = {.weight_stream = AMK_WEIGHT_STREAM_OFF};
    char *none = generate(m, &off);
    CHECK(c, none && !strstr(none, "#define AMK_STREAM_MODE 1") &&
                 !strstr(none, "#define AMK_STREAM_MODE 2"));
    AmkCodegenOptions ring = {.weight_stream = AMK_WEIGHT_STREAM_RING, .ring_slots = 3,
                              .override_lookahead = true, .lookahead = 5};
    char *r = generate(m, &ring);
    CHECK(c, r && strstr(r, "#define AMK_STREAM_MODE 2\n") &&
                 strstr(r, "#define AMK_RING_SLOTS 3\n") &&
                 strstr(r, "#define AMK_RING_SLOT_BYTES 16384\n") &&
                 strstr(r, "#define AMK_LOOKAHEAD 5\n"));
    /* Hybrid: only 16-bit rows are read from the ring, so this f32 program
     * gets the L2 stream alone (the bf16 programs' rings:
     * test/cuda/hybrid-stream-cubin.test). */
    AmkCodegenOptions hy = {.weight_stream = AMK_WEIGHT_STREAM_HYBRID};
    char *h = generate(m, &hy);
    CHECK(c, h && strstr(h, "#define AMK_STREAM_MODE 1\n") &&
                 strstr(h, "#define AMK_RING_SLOTS 0\n"));
    AmkCodegenOptions hy1 = {.weight_stream = AMK_WEIGHT_STREAM_HYBRID, .ring_slots = 1};
    char *h1 = generate(m, &hy1);
    CHECK(c, h1 && strstr(h1, "#define AMK_STREAM_MODE 1\n"));
    /* The tensor-core GEMV is a define of its own (off by default). */
    AmkCodegenOptions mma = {.gemv_mma = true};
    char *g = generate(m, &mma);
    CHECK(c, g && strstr(g, "#define AMK_GEMV_MMA 1\n") && !strstr(dflt, "#define AMK_GEMV_MMA 1"));
    free(dflt);
    free(none);
    free(r);
    free(h);
    free(h1);
    free(g);
  }
  amk_module_free(m);
  free(text);
}

/* How many times `needle` occurs in `hay`. */
static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
    n++;
  return n;
}

/* The stream's staging knobs: the norm weight staged during the waits (on
 * by default, AMK_CUDA_NORM_STAGE=0 off), the L2 hold and the mlp head
 * (off by default): read from the environment, refused out of range, and
 * emitted as megakernel.cuh's defines. The bf16 programs whose norms are
 * staged: test/cuda/norm-stage-cubin.test. */
static void test_stage_knobs(UnitCounts *c) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);
  clear_env();
  AmkCodegenOptions o = {0};
  CHECK(c, amk_codegen_options_from_env(&o, d) && !o.no_norm_stage && o.l2_hold_kb == 0 &&
               o.mlp_head_kb == 0);
  setenv("AMK_CUDA_NORM_STAGE", "0", 1);
  setenv("AMK_CUDA_L2_HOLD_KB", "256", 1);
  setenv("AMK_CUDA_MLP_HEAD_KB", "128", 1);
  CHECK(c, amk_codegen_options_from_env(&o, d) && o.no_norm_stage && o.l2_hold_kb == 256 &&
               o.mlp_head_kb == 128);
  setenv("AMK_CUDA_MLP_HEAD_KB", "201", 1);
  setenv("AMK_CUDA_NORM_STAGE", "2", 1);
  AmkCodegenOptions bad = {0};
  CHECK(c, !amk_codegen_options_from_env(&bad, d));
  CHECK(c, amk_diag_captured_count(d) == 1 &&
               strstr(amk_diag_captured(d, 0)->message,
                      "AMK_CUDA_MLP_HEAD_KB must be an integer in [0, 200], not '201'"));
  setenv("AMK_CUDA_MLP_HEAD_KB", "0", 1);
  CHECK(c, !amk_codegen_options_from_env(&bad, d));
  CHECK(c, amk_diag_captured_count(d) == 2 &&
               strstr(amk_diag_captured(d, 1)->message, "AMK_CUDA_NORM_STAGE"));
  clear_env();
  amk_diag_free(d);

  char *text = NULL;
  AmkModule *m = load(AMK_SOURCE_DIR "/examples/llama-tiny.amkir", &text);
  CHECK(c, m != NULL);
  if (m) {
    /* An f32 program: its norms read f32 inputs, so none is staged and the
     * stream header keeps its size. */
    char *dflt = generate(m, NULL);
    /* (megakernel.cuh's fallbacks are each one define of 0.) */
    CHECK(c, dflt && count_of(dflt, "#define AMK_NORM_STAGE_BYTES ") == 1 &&
                 count_of(dflt, "#define AMK_L2_HOLD_BYTES ") == 1 &&
                 count_of(dflt, "#define AMK_MLP_HEAD_BYTES ") == 1 &&
                 strstr(dflt, "#define AMK_STREAM_HEADER_BYTES 12288\n"));
    AmkCodegenOptions knobs = {.l2_hold_kb = 256, .mlp_head_kb = 64};
    char *k = generate(m, &knobs);
    CHECK(c, k && strstr(k, "#define AMK_L2_HOLD_BYTES 262144\n") &&
                 strstr(k, "#define AMK_MLP_HEAD_BYTES 65536\n") &&
                 strstr(k, "#define AMK_STREAM_HEADER_BYTES 16384\n"));
    /* Neither applies without the L2 stream. */
    AmkCodegenOptions ring = {.weight_stream = AMK_WEIGHT_STREAM_RING, .l2_hold_kb = 256,
                              .mlp_head_kb = 64};
    char *r = generate(m, &ring);
    CHECK(c, r && count_of(r, "#define AMK_L2_HOLD_BYTES ") == 1 &&
                 count_of(r, "#define AMK_MLP_HEAD_BYTES ") == 1);
    free(dflt);
    free(k);
    free(r);
  }
  amk_module_free(m);
  free(text);
}

UNIT_MAIN("test_codegen_stream", test_env, test_wait_knobs, test_row_knobs, test_modes,
          test_stage_knobs)
