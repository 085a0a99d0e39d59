// ---- this program's variants ----
__device__ __noinline__ void amk_v0(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem) {
  amk_gemv<1, 2, 2, 2, 2, 576, 960, 1, 1, 0, 0, 0>(P, I, A, idx, pos, smem);
}
