/* ALLREDUCE_SHARD: on one device the sum of the shards; across the ranks
 * of a tensor-parallel group (param group >= 2) the sum of each rank's
 * part, which the VM's group runner calls once all ranks reach it. */
#include <stdio.h>
#include <stdlib.h>

#include "inst_internal.h"

/* out = in[0] + in[1] + ... in input order, in fp32. */
int amk_kernel_ALLREDUCE_SHARD(const AmkInstCall *call) {
  AmkTensorView *out = &call->out[0];
  if (inst_int_or(call, AMK_PARAM_group, 1) >= 2)
    return inst_fail(call, AMK_INST_ERR_PARAM, "group=%d: a cross-rank all-reduce runs only "
                     "with every rank of its group (amk_inst_allreduce_ranks)",
                     (int)inst_int_or(call, AMK_PARAM_group, 1));
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

int amk_inst_allreduce_ranks(const AmkTensorView *parts, const int64_t *n_off, uint32_t n,
                             AmkTensorView *outs, char *err, size_t err_len) {
  if (n == 0)
    return AMK_INST_OK;
  int64_t numel = outs[0].numel;
  for (uint32_t r = 0; r < n; r++) {
    if (outs[r].numel != numel || n_off[r] < 0 || n_off[r] + parts[r].numel > numel) {
      if (err)
        snprintf(err, err_len, "allreduce_shard: rank %u's part (%lld elements at %lld) does "
                 "not fit the output of %lld elements, or the ranks' outputs differ",
                 r, (long long)parts[r].numel, (long long)n_off[r], (long long)numel);
      return AMK_INST_ERR_SHAPE;
    }
  }
  float *acc = calloc((size_t)(numel > 0 ? numel : 1), sizeof *acc);
  if (!acc) {
    if (err)
      snprintf(err, err_len, "allreduce_shard: out of memory");
    return AMK_INST_ERR_NOMEM;
  }
  for (uint32_t r = 0; r < n; r++)
    for (int64_t i = 0; i < parts[r].numel; i++)
      acc[n_off[r] + i] += inst_load(&parts[r], i);
  for (uint32_t r = 0; r < n; r++)
    for (int64_t i = 0; i < numel; i++)
      inst_store(&outs[r], i, acc[i]);
  free(acc);
  return AMK_INST_OK;
}
