/* KV_APPEND: write new key or value rows into a KV cache. */
#include <inttypes.h>
#include <string.h>

#include "inst_internal.h"

/* inputs [new, cache] -> output cache [max_seq, n_kv, head_dim] (the same
 * memory in a program; when it is not, the output first takes a copy of the
 * input cache). new holds whole rows of n_kv * head_dim; row r goes to
 * position pos + r, pos being the step's position when the caller gives one
 * and the `pos` param otherwise. With M_tile, only new rows
 * [m_off, m_off + M_tile), to cache rows pos + m_off ... */
int amk_kernel_KV_APPEND(const AmkInstCall *call) {
  const AmkTensorView *fresh = &call->in[0], *cache_in = &call->in[1];
  AmkTensorView *cache = &call->out[0];
  int rc;
  int64_t pos;
  if (call->extra->has_position) {
    pos = call->extra->position;
  } else {
    if ((rc = inst_require(call, AMK_PARAM_pos)))
      return rc;
    pos = call->p->pos.i;
  }
  if ((rc = inst_require_numeric(call, fresh, "new rows")) ||
      (rc = inst_require_numeric(call, cache, "cache")) ||
      (rc = inst_require_same_numel(call, cache_in, "input cache", cache,
                                    "output cache")))
    return rc;
  if (cache_in->dtype != cache->dtype)
    return inst_fail(call, AMK_INST_ERR_DTYPE,
                     "input cache is %s but output cache is %s",
                     amk_dtype_text_name(cache_in->dtype),
                     amk_dtype_text_name(cache->dtype));
  if (cache->rank == 0 || cache->shape[0] == 0)
    return inst_fail(call, AMK_INST_ERR_SHAPE, "the cache has no rows");
  int64_t max_seq = cache->shape[0];
  int64_t row_len = cache->numel / max_seq;
  if (row_len == 0 || fresh->numel % row_len != 0)
    return inst_fail(call, AMK_INST_ERR_SHAPE,
                     "%" PRId64 " new elements are not whole cache rows of %" PRId64,
                     fresh->numel, row_len);
  int64_t n_rows = fresh->numel / row_len;
  int64_t first, end;
  if ((rc = inst_row_window(call, n_rows, &first, &end)))
    return rc;
  if (pos < 0 || pos > max_seq - n_rows)
    return inst_fail(call, AMK_INST_ERR_INDEX,
                     "position %" PRId64 " (+%" PRId64
                     " rows) is outside the cache's %" PRId64 " rows",
                     pos, n_rows, max_seq);
  if (cache_in->data != cache->data) {
    /* Sibling windows would each copy the whole input over the rows the
     * others wrote. */
    if (amk_inst_param_has(call->p, AMK_PARAM_M_tile))
      return inst_fail(call, AMK_INST_ERR_SHAPE,
                       "a row window (M_tile) needs the cache updated in place "
                       "(input cache and output the same memory)");
    memcpy(cache->data, cache_in->data, (size_t)inst_nbytes(cache));
  }
  for (int64_t i = first * row_len; i < end * row_len; i++)
    inst_store(cache, pos * row_len + i, inst_load(fresh, i));
  return AMK_INST_OK;
}
