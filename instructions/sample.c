/* SAMPLE_ARGMAX: greedy decoding. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "inst_internal.h"

/* For each row of the last dim, the index of the largest value; the lowest
 * index wins a tie and a NaN counts as the largest (torch.argmax). */
int amk_kernel_SAMPLE_ARGMAX(const AmkInstCall *call) {
  const AmkTensorView *logits = &call->in[0];
  AmkTensorView *out = &call->out[0];
  int rc;
  if ((rc = inst_require_numeric(call, logits, "logits")) ||
      (rc = inst_require_numeric(call, out, "output")))
    return rc;
  int64_t width = inst_width(logits);
  if (width == 0)
    return inst_fail(call, AMK_INST_ERR_SHAPE, "logits have no columns");
  int64_t rows = logits->numel / width;
  if (out->numel != rows)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "output has %" PRId64 " elements, want one per row (%" PRId64 ")",
                     out->numel, rows);
  for (int64_t r = 0; r < rows; r++) {
    int64_t best = 0;
    float best_value = inst_load(logits, r * width);
    for (int64_t j = 1; j < width && !isnan(best_value); j++) {
      float v = inst_load(logits, r * width + j);
      if (v > best_value || isnan(v)) {
        best = j;
        best_value = v;
      }
    }
    if (out->dtype == AMK_DTYPE_I32) {
      int32_t id = (int32_t)best; /* exact, even past fp32's 2^24 */
      memcpy((char *)out->data + r * 4, &id, 4);
    } else {
      inst_store(out, r, (float)best);
    }
  }
  return AMK_INST_OK;
}
