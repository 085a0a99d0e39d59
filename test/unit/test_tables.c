/* The tables: codes, names and properties match AMK-REFERENCE §1, and every
 * lookup inverts its name function. */
#include "amk/ir.h"
#include "unit.h"

int main(void) {
  UnitCounts c = {0};

  /* Codes are the reference's canonical ABI codes. */
  CHECK(&c, AMK_DTYPE_F32 == 0 && AMK_DTYPE_BF16 == 2 && AMK_DTYPE_I4 == 7 &&
                AMK_DTYPE_BOOL == 9 && AMK_DTYPE_COUNT == 10);
  CHECK(&c, AMK_SPACE_HBM == 0 && AMK_SPACE_REGISTER == 3 && AMK_SPACE_COUNT == 4);
  CHECK(&c, AMK_KIND_WEIGHT == 0 && AMK_KIND_KV_CACHE == 2 && AMK_KIND_CONST == 5);
  CHECK(&c, AMK_OP_NOP == 0 && AMK_OP_GEMV_TILE == 5 && AMK_OP_KV_APPEND == 16 &&
                AMK_OP_ATTENTION_COMBINE == 18 && AMK_OP_FUSED == 19 &&
                AMK_OP_COUNT == 20);
  CHECK(&c, AMK_PARAM_K == 0 && AMK_PARAM_dim == 18 && AMK_PARAM_eps == 19 &&
                AMK_PARAM_theta == 21 && AMK_PARAM_COUNT == 22);
  CHECK(&c, AMK_MAX_INPUTS == 8 && AMK_MAX_OUTPUTS == 4 && AMK_MAX_WAITS == 8 &&
                AMK_MAX_RANK == 4);

  /* Names round-trip through their lookups. */
  for (int i = 0; i < AMK_DTYPE_COUNT; i++) {
    CHECK(&c, amk_dtype_from_json_name(amk_dtype_json_name(i)) == i);
    CHECK(&c, amk_dtype_from_text_name(amk_dtype_text_name(i)) == i);
  }
  for (int i = 0; i < AMK_SPACE_COUNT; i++) {
    CHECK(&c, amk_space_from_json_name(amk_space_json_name(i)) == i);
    CHECK(&c, amk_space_from_text_name(amk_space_text_name(i)) == i);
  }
  for (int i = 0; i < AMK_KIND_COUNT; i++) {
    CHECK(&c, amk_kind_from_json_name(amk_kind_json_name(i)) == i);
    CHECK(&c, amk_kind_from_text_name(amk_kind_text_name(i)) == i);
  }
  for (int i = 0; i < AMK_OP_COUNT; i++) {
    CHECK(&c, amk_op_from_json_name(amk_op_info(i)->json_name) == i);
    CHECK(&c, amk_op_from_text_name(amk_op_info(i)->text_name) == i);
  }
  for (int i = 0; i < AMK_PARAM_COUNT; i++)
    CHECK(&c, amk_param_from_name(amk_param_name(i)) == i);
  CHECK(&c, amk_dtype_from_json_name("F64") == -1);
  CHECK(&c, amk_op_from_json_name("gemv_tile") == -1); /* JSON names are upper case */
  CHECK(&c, amk_op_info(AMK_OP_COUNT) == NULL);

  CHECK_STR(&c, amk_dtype_json_name(AMK_DTYPE_F8E4M3), "F8E4M3");
  CHECK_STR(&c, amk_op_info(AMK_OP_GEMV_TILE)->json_name, "GEMV_TILE");
  CHECK_STR(&c, amk_op_info(AMK_OP_SAMPLE_ARGMAX)->text_name, "sample_argmax");
  CHECK_STR(&c, amk_kind_json_name(AMK_KIND_IO_OUTPUT), "IO_OUTPUT");
  CHECK_STR(&c, amk_space_json_name(AMK_SPACE_GLOBAL_SCRATCH), "GLOBAL_SCRATCH");

  /* Sizes: bits and packed byte counts. */
  CHECK(&c, amk_dtype_bits(AMK_DTYPE_BF16) == 16 && amk_dtype_bits(AMK_DTYPE_I4) == 4 &&
                amk_dtype_bits(AMK_DTYPE_BOOL) == 8);
  CHECK(&c, amk_dtype_nbytes(AMK_DTYPE_I4, 3) == 2);
  CHECK(&c, amk_dtype_nbytes(AMK_DTYPE_F32, 10) == 40);
  CHECK(&c, amk_dtype_nbytes(AMK_DTYPE_I4, 0) == 0);

  /* Properties. */
  CHECK(&c, amk_space_is_on_chip(AMK_SPACE_SMEM) && amk_space_is_on_chip(AMK_SPACE_REGISTER));
  CHECK(&c, !amk_space_is_on_chip(AMK_SPACE_HBM) &&
                !amk_space_is_on_chip(AMK_SPACE_GLOBAL_SCRATCH));
  CHECK(&c, amk_kind_is_read_only(AMK_KIND_WEIGHT) && amk_kind_is_read_only(AMK_KIND_CONST) &&
                amk_kind_is_read_only(AMK_KIND_IO_INPUT));
  CHECK(&c, !amk_kind_is_read_only(AMK_KIND_ACTIVATION) &&
                !amk_kind_is_read_only(AMK_KIND_KV_CACHE) &&
                !amk_kind_is_read_only(AMK_KIND_IO_OUTPUT) &&
                !amk_kind_is_read_only((AmkBufferKind)AMK_KIND_COUNT));

  /* The op registry (arity and required params) of AMK-REFERENCE §1. */
  const AmkOpInfo *gemv = amk_op_info(AMK_OP_GEMV_TILE);
  CHECK(&c, gemv->min_inputs == 2 && gemv->max_inputs == 3 && gemv->n_outputs == 1);
  CHECK(&c, gemv->required_params ==
                (AMK_PARAM_BIT(K) | AMK_PARAM_BIT(N_tile) | AMK_PARAM_BIT(n_off)));
  const AmkOpInfo *attn = amk_op_info(AMK_OP_ATTENTION_TILE);
  CHECK(&c, attn->min_inputs == 3 && attn->max_inputs == 4);
  CHECK(&c, __builtin_popcount(attn->required_params) == 6);
  CHECK(&c, amk_op_info(AMK_OP_NOP)->n_outputs == 0);
  CHECK(&c, amk_op_info(AMK_OP_FUSED)->max_inputs == -1 &&
                amk_op_info(AMK_OP_FUSED)->required_params == AMK_REQ_RECIPE);
  CHECK(&c, amk_op_info(AMK_OP_ALLREDUCE_SHARD)->max_inputs == 8);
  CHECK(&c, amk_op_info(AMK_OP_MUL)->min_inputs == 1);
  CHECK(&c, amk_param_type(AMK_PARAM_eps) == 'f' && amk_param_type(AMK_PARAM_n_off) == 'i');
  /* A GEMV_TILE of pattern combine_residual reads up to 6 partials besides W
   * and r; every other pattern (and op) keeps the registry's range. */
  int64_t combine = (int64_t)AMK_PATTERN_COMBINE_RESIDUAL << AMK_PATTERN_SHIFT;
  CHECK(&c, AMK_PATTERN_COMBINE_RESIDUAL == 8 && AMK_PATTERN_MLP == 9 &&
                AMK_PATTERN_ATTENTION_O == 10 && AMK_PATTERN_COUNT == 11);
  CHECK_STR(&c, amk_gemv_pattern_name(AMK_PATTERN_MLP), "mlp");
  CHECK_STR(&c, amk_gemv_pattern_name(AMK_PATTERN_ATTENTION_O), "attention_o");
  CHECK(&c, amk_gemv_pattern_from_name("attention_o") == AMK_PATTERN_ATTENTION_O);
  CHECK_STR(&c, amk_gemv_pattern_inputs(AMK_PATTERN_ATTENTION_O),
            "qkv, Wot, inv_freq, kv_cache, x");
  CHECK_STR(&c, amk_gemv_pattern_name(AMK_PATTERN_COMBINE_RESIDUAL), "combine_residual");
  CHECK_STR(&c, amk_gemv_pattern_inputs(AMK_PATTERN_COMBINE_RESIDUAL), "p0, W, r, p1..");
  CHECK(&c, amk_gemv_pattern_inputs(AMK_PATTERN_COUNT) == NULL);
  CHECK(&c, amk_op_max_inputs(AMK_OP_GEMV_TILE, combine) == AMK_MAX_INPUTS);
  CHECK(&c, amk_op_max_inputs(AMK_OP_GEMV_TILE, combine | 2) == AMK_MAX_INPUTS);
  CHECK(&c, amk_op_max_inputs(AMK_OP_GEMV_TILE, 0) == 3);
  /* [x, qW, scales, r]: quantized residual-type tiles take a fourth input. */
  CHECK(&c, amk_op_max_inputs(AMK_OP_GEMV_TILE, (int64_t)AMK_PATTERN_RESIDUAL
                                                    << AMK_PATTERN_SHIFT) == 4);
  CHECK(&c, amk_op_max_inputs(AMK_OP_GEMV_TILE, (int64_t)AMK_PATTERN_NORM
                                                    << AMK_PATTERN_SHIFT) == 4);
  CHECK(&c, amk_op_max_inputs(AMK_OP_GEMV_TILE, (int64_t)AMK_PATTERN_SILU
                                                    << AMK_PATTERN_SHIFT) == 3);
  CHECK(&c, amk_op_max_inputs(AMK_OP_GEMV_TILE, (int64_t)AMK_PATTERN_SILU_RESIDUAL
                                                    << AMK_PATTERN_SHIFT) == 4);
  CHECK(&c, amk_op_max_inputs(AMK_OP_GEMV_TILE, (int64_t)AMK_PATTERN_ROPE_KV
                                                    << AMK_PATTERN_SHIFT) == 3);
  CHECK(&c, amk_op_max_inputs(AMK_OP_GEMV_TILE, (int64_t)AMK_PATTERN_ATTENTION_ROPE
                                                    << AMK_PATTERN_SHIFT) == 3);
  /* mlp: [x, Wgu, g, Wdt], or quantized [x, qWgu, scales, g, qWd, scales];
   * attention_o: [qkv, Wot, inv_freq, kv_cache, x] (with its flags bit 2 or
   * not: the arity is the pattern's). */
  CHECK(&c, amk_op_max_inputs(AMK_OP_GEMV_TILE, (int64_t)AMK_PATTERN_MLP
                                                    << AMK_PATTERN_SHIFT) == 6);
  int64_t attention_o = (int64_t)AMK_PATTERN_ATTENTION_O << AMK_PATTERN_SHIFT;
  CHECK(&c, amk_op_max_inputs(AMK_OP_GEMV_TILE, attention_o) == 5);
  CHECK(&c, amk_op_max_inputs(AMK_OP_GEMV_TILE, attention_o | AMK_FLAG_KV_FROM_QKV) == 5);
  CHECK(&c, amk_op_max_inputs(AMK_OP_GEMM_TILE, attention_o) == 3);
  /* Only mlp and attention_o tiles add into their output (an accumulator);
   * out-of-range patterns do not. */
  for (int64_t pattern = -1; pattern <= AMK_PATTERN_COUNT; pattern++)
    CHECK(&c, amk_gemv_pattern_accumulates(pattern) ==
                  (pattern == AMK_PATTERN_MLP || pattern == AMK_PATTERN_ATTENTION_O));
  CHECK(&c, !amk_gemv_pattern_accumulates(INT64_MAX) &&
                !amk_gemv_pattern_accumulates(INT64_MIN));
  CHECK(&c, amk_op_max_inputs(AMK_OP_GEMV_TILE, -combine) == 3);
  CHECK(&c, amk_op_max_inputs(AMK_OP_GEMM_TILE, combine) == 3);
  CHECK(&c, amk_op_max_inputs(AMK_OP_FUSED, 0) == -1);

  /* Policies. */
  CHECK(&c, amk_page_policy_from_name("graph_color") == AMK_PAGES_GRAPH_COLOR);
  CHECK(&c, amk_sm_policy_from_name("round_robin") == AMK_SM_ROUND_ROBIN);
  CHECK(&c, amk_page_policy_from_name("greedy") == -1);

  /* Built-in targets, including the added h200. */
  const AmkTarget *h100 = amk_builtin_target("h100");
  CHECK(&c, h100 && h100->num_sms == 132 && h100->sm_arch == 90 &&
                h100->hbm_bytes == 85899345920LL && h100->measured_bw_gbs == 3089.0);
  const AmkTarget *h200 = amk_builtin_target("h200");
  CHECK(&c, h200 && h200->num_sms == 132 && h200->sm_arch == 90 &&
                h200->smem_bytes_per_block_optin == 232448 &&
                h200->hbm_bandwidth_gbs == 4800.0 && h200->measured_bw_gbs == 4190.0);
  const AmkTarget *rtx = amk_builtin_target("rtx5090");
  CHECK(&c, rtx && rtx->wddm_tdr && rtx->sm_arch == 120 && rtx->num_sms == 82);
  CHECK(&c, amk_builtin_target("mi300x") == NULL);
  CHECK(&c, amk_builtin_target_count() == 9);
  for (size_t i = 0; i < amk_builtin_target_count(); i++) {
    const AmkTarget *t = amk_builtin_target_at(i);
    CHECK(&c, t->regs_per_sm == 65536 && t->max_regs_per_thread == 255 &&
                  t->supports_cooperative);
  }
  return unit_finish("test_tables", &c);
}
