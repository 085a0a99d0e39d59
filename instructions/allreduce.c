/* ALLREDUCE_SHARD on one host: the sum of the shards. */
#include "inst_internal.h"

/* out = in[0] + in[1] + ... in input order, in fp32. */
int amk_kernel_ALLREDUCE_SHARD(const AmkInstCall *call) {
  AmkTensorView *out = &call->out[0];
  int rc = inst_require_numeric_like(call, "shard", "a shard", out, "the output");
  if (rc)
    return rc;
  for (int64_t i = 0; i < out->numel; i++) {
    float acc = inst_load(&call->in[0], i);
    for (uint32_t s = 1; s < call->n_in; s++)
      acc += inst_load(&call->in[s], i);
    inst_store(out, i, acc);
  }
  return AMK_INST_OK;
}
