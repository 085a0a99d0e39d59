/* The codegen <-> device contract: every device function of
 * backend/megakernel.cuh that a variant calls, with its template arguments.
 *
 * X(name, kinds): the function is amk_<name>(AmkP P, AmkI I, AmkA A, int idx,
 * int pos, float *smem); kinds has one letter per template argument, 'i' for
 * an int and 'L' for a long long (emitted with an LL suffix), and is empty
 * for a plain function. codegen.c emits every call through this list (a call
 * with the wrong number of arguments does not compile), and the unit test
 * test_device_contract checks the list against megakernel.cuh, so renaming a
 * template or changing its arguments on one side only fails the tests.
 */
#ifndef AMK_BACKEND_DEVICE_TEMPLATES_H
#define AMK_BACKEND_DEVICE_TEMPLATES_H

#define AMK_DEVICE_TEMPLATES(X)                                                \
  X(nop, "")                                                                   \
  X(gemv, "iiiiiiiiiiii")                                                      \
  X(gemm_mma, "iiiiiiiii")                                                     \
  X(gemv_combine, "iiiiiiiii")                                                 \
  X(gemv_mlp, "iiiiiii")                                                       \
  X(mlp_quant, "iiiiiii")                                                      \
  X(gemv_quant, "iiiiiiiiiiii")                                                 \
  X(gemv_quant_combine, "iiiiiiiiii")                                          \
  X(gemm_mma_quant, "iiiiiiiii")                                               \
  X(gemm_quant, "iiiiiiii")                                                    \
  X(attention, "iiiiiiiiiii")                                                  \
  X(attention_o, "iiiiiiiiiii")                                                \
  X(attention_rows, "iiiiiiiii")                                                \
  X(attention_rows_mma, "iiiiiiii")                                             \
  X(combine, "iiiii")                                                          \
  X(rope_kv, "iiiiiiii")                                                       \
  X(embed, "iiiLLL")                                                           \
  X(embed_rows, "iiiLLL")                                                      \
  X(norm, "iiiiiLii")                                                          \
  X(norm_rows, "iiiiiLii")                                                     \
  X(rope, "iiiiiLLi")                                                          \
  X(rope_rows, "iiiiiLLi")                                                     \
  X(eltwise, "iiiiLLi")                                                        \
  X(copy_bytes, "L")                                                           \
  X(softmax, "iiLLL")                                                          \
  X(allreduce, "iiLi")                                                         \
  X(allreduce_tp, "iiLLLLLLi")                                                 \
  X(kv_append, "iiLLL")                                                        \
  X(kv_append_rows, "iiLLL")                                                   \
  X(argmax, "iiLL")

#endif
