/* Rotary position embedding frequencies, shared by import (which writes them
 * into ROPE params), the reference VM and the backend (which read them).
 *
 * A ROPE task always has `head_dim` and `theta`. Llama-3 scaled rope adds the
 * four params below (all or none); without them the frequencies are the
 * default ones. docs/Import.md states the convention.
 */
#ifndef AMK_ROPE_H
#define AMK_ROPE_H

#include <stdbool.h>

#include "amk/ir.h"

/* Extra ROPE params for `rope_type: llama3` (names as in HF configs). */
#define AMK_ROPE_PARAM_FACTOR "factor"
#define AMK_ROPE_PARAM_LOW_FREQ_FACTOR "low_freq_factor"
#define AMK_ROPE_PARAM_HIGH_FREQ_FACTOR "high_freq_factor"
#define AMK_ROPE_PARAM_ORIGINAL_MAX_POS "original_max_position_embeddings"

typedef enum {
  AMK_ROPE_DEFAULT, /* inv_freq[i] = theta^(-2i/head_dim) */
  AMK_ROPE_LLAMA3,  /* default, then Llama-3 wavelength-band scaling */
} AmkRopeKind;

typedef struct {
  AmkRopeKind kind;
  int head_dim; /* rotary dimension (even); half = head_dim / 2 frequencies */
  double theta;
  /* AMK_ROPE_LLAMA3 only */
  double factor, low_freq_factor, high_freq_factor, original_max_pos;
} AmkRopeSpec;

/* Write the `half` inverse frequencies (half = head_dim / 2), in double
 * precision, as transformers' _compute_default_rope_parameters /
 * _compute_llama3_parameters define them. The attention scaling factor is
 * 1.0 for both kinds. */
void amk_rope_inv_freq(const AmkRopeSpec *spec, double *out, int half);

/* Read a ROPE task's params into a spec. Returns false and sets *why (a
 * static string) when they are missing or inconsistent. */
bool amk_rope_spec_from_task(const AmkTask *task, AmkRopeSpec *out,
                             const char **why);

#endif
