/* EMBED: gather rows of a table by token id. */
#include <inttypes.h>

#include "inst_internal.h"

/* inputs [ids, table[V, ...]] -> output = the rows ids[0], ids[1], ...
 * in order. A row is everything after the first dim of the table, so the
 * op doubles as the reference's reshape (EMBED of id 0 over a [1, n]
 * activation); `hidden` is informational and not checked against it.
 * With M_tile, only ids [m_off, m_off + M_tile) and their output rows. */
int amk_kernel_EMBED(const AmkInstCall *call) {
  const AmkTensorView *ids = &call->in[0], *table = &call->in[1];
  AmkTensorView *out = &call->out[0];
  int rc;
  if ((rc = inst_require_integer(call, ids, "token ids")) ||
      (rc = inst_require_numeric(call, table, "table")) ||
      (rc = inst_require_numeric(call, out, "output")))
    return rc;
  if (table->rank == 0 || table->shape[0] == 0)
    return inst_fail(call, AMK_INST_ERR_SHAPE, "the table has no rows");
  int64_t vocab = table->shape[0];
  int64_t row_len = table->numel / vocab;
  if (out->numel != ids->numel * row_len)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "output has %" PRId64 " elements, want %" PRId64
                     " rows of %" PRId64,
                     out->numel, ids->numel, row_len);
  int64_t first, end;
  if ((rc = inst_row_window(call, ids->numel, &first, &end)))
    return rc;
  /* Check every id of the window before writing anything. */
  for (int64_t t = first; t < end; t++) {
    int64_t id = inst_load_int(ids, t);
    if (id < 0 || id >= vocab)
      return inst_fail(call, AMK_INST_ERR_INDEX,
                       "token id %" PRId64 " is outside the table's %" PRId64
                       " rows",
                       id, vocab);
  }
  for (int64_t t = first; t < end; t++) {
    int64_t id = inst_load_int(ids, t);
    for (int64_t j = 0; j < row_len; j++)
      inst_store(out, t * row_len + j, inst_load(table, id * row_len + j));
  }
  return AMK_INST_OK;
}
