/* Synthetic reference-style decode lowerings of a Llama-shaped model, built in
 * memory (no weights): for benchmarks and tests of passes at any size. */
#ifndef AMK_SYNTH_H
#define AMK_SYNTH_H

#include <stdint.h>

#include "amk/ir.h"

typedef struct {
  int32_t layers;
  int32_t hidden;
  int32_t n_heads;
  int32_t n_kv_heads;
  int32_t head_dim;
  int32_t intermediate;
  int32_t vocab;
  int32_t n_tile;  /* GEMV N_tile; tiles per projection = ceil(N / n_tile) */
  int32_t max_seq; /* KV cache length */
  int32_t pos;     /* decode position (KV_APPEND row, attention window) */
} AmkSynthSpec;

/* The 2-layer toy of shared/conformance/toy2L_pos0.amk.json. */
AmkSynthSpec amk_synth_toy_spec(void);

/* Tasks the lowering of `spec` will have. */
int64_t amk_synth_task_count(const AmkSynthSpec *spec);

/* Build the lowering: EMBED; per layer RMSNORM, q/k/v GEMV tiles, reshape
 * (EMBED of a zero id), ROPE q, reshape, ROPE k, KV_APPEND k and v,
 * ATTENTION_TILE, o_proj tiles, ADD, RMSNORM, gate/up tiles, SILU_MUL, down
 * tiles, ADD; final RMSNORM and lm_head tiles into the IO_OUTPUT logits.
 * Target h100, no pages, no SM assignment. NULL on a nonsensical spec
 * (non-positive sizes, heads not divisible, pos >= max_seq). */
AmkModule *amk_synth_llama(const AmkSynthSpec *spec);

#endif
