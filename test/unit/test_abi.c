/* The device ABI (include/amk/abi.h) against AMK-REFERENCE §6 and the IR
 * tables: codes, capacities, field order, sizes and offsets. When NVRTC is
 * present, the very header text the backend pastes into generated sources
 * is compiled for sm_90 with the host's sizes asserted, so the C and CUDA
 * views cannot drift apart. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/abi.h"
#include "amk/backend.h"
#include "amk/io.h"
#include "amk/ir.h"
#include "unit.h"

int main(void) {
  UnitCounts c = {0};

  /* Codes: the ABI enums are the IR's (both expand tables.h) and the
   * reference's canonical numbers. */
#define X(name, code, text, bits) CHECK(&c, (int)AMK_ABI_DTYPE_##name == (int)AMK_DTYPE_##name);
  AMK_DTYPES(X)
#undef X
#define X(name, code, text, mi, ma, no, req) CHECK(&c, (int)AMK_ABI_OP_##name == (int)AMK_OP_##name);
  AMK_OPS(X)
#undef X
#define X(name, code, text, onchip) CHECK(&c, (int)AMK_ABI_SPACE_##name == (int)AMK_SPACE_##name);
  AMK_MEMSPACES(X)
#undef X
#define X(name, id, text, inputs, desc) CHECK(&c, (int)AMK_ABI_PATTERN_##name == (int)AMK_PATTERN_##name);
  AMK_GEMV_PATTERNS(X)
#undef X
  CHECK(&c, AMK_ABI_OP_NOP == 0 && AMK_ABI_OP_GEMV_TILE == 5 && AMK_ABI_OP_ATTENTION_TILE == 7 &&
                AMK_ABI_OP_KV_APPEND == 16 && AMK_ABI_OP_ATTENTION_COMBINE == 18 &&
                AMK_ABI_OP_FUSED == 19);
  CHECK(&c, AMK_ABI_DTYPE_F32 == 0 && AMK_ABI_DTYPE_BF16 == 2 && AMK_ABI_DTYPE_I32 == 5 &&
                AMK_ABI_DTYPE_BOOL == 9);
  CHECK(&c, AMK_MAX_INPUTS == 8 && AMK_MAX_OUTPUTS == 4 && AMK_MAX_WAITS == 8 &&
                AMK_MAX_RANK == 4);
  CHECK(&c, AMK_ABI_VERSION_MAJOR == 0 && AMK_ABI_VERSION_MINOR == 2);

  /* Params: 19 int32 fields in AMK_PARAMS order, then eps, scale, theta. */
  static const char *const want_params[] = {
      "K",        "N",      "M",   "N_tile",   "M_tile", "n_off", "m_off", "hidden",
      "vocab",    "head_dim", "n_heads", "n_kv_heads", "kv_start", "kv_len", "pos",
      "qdtype",   "flags",  "group", "dim",    "eps",    "scale", "theta"};
  CHECK(&c, AMK_ABI_PARAM_COUNT == 22 && AMK_PARAM_COUNT == 22);
  int slot = 0;
#define X(name, type)                                                          \
  CHECK_STR(&c, #name, want_params[slot]);                                     \
  CHECK(&c, offsetof(amk_params_t, name) == (size_t)slot * 4);                 \
  CHECK(&c, (type) == (slot < 19 ? 'i' : 'f'));                                \
  slot++;
  AMK_PARAMS(X)
#undef X
  CHECK(&c, sizeof(amk_params_t) == 88);

  /* Buffer: ptr, numel, rank, dtype, space, pad, shape[4], stride[4]. */
  CHECK(&c, sizeof(amk_buffer_t) == 96);
  CHECK(&c, offsetof(amk_buffer_t, ptr) == 0 && offsetof(amk_buffer_t, numel) == 8 &&
                offsetof(amk_buffer_t, rank) == 16 && offsetof(amk_buffer_t, dtype) == 20 &&
                offsetof(amk_buffer_t, space) == 24 && offsetof(amk_buffer_t, pad) == 28 &&
                offsetof(amk_buffer_t, shape) == 32 && offsetof(amk_buffer_t, stride) == 64);

  /* Instruction: op, n_inputs, n_outputs, n_waits, inputs[8], outputs[4],
   * wait_counter[8], wait_threshold[8], out_counter, sm, params. */
  CHECK(&c, sizeof(amk_instruction_t) == 224);
  CHECK(&c, offsetof(amk_instruction_t, op) == 0 && offsetof(amk_instruction_t, n_inputs) == 4 &&
                offsetof(amk_instruction_t, n_outputs) == 8 &&
                offsetof(amk_instruction_t, n_waits) == 12 &&
                offsetof(amk_instruction_t, inputs) == 16 &&
                offsetof(amk_instruction_t, outputs) == 48 &&
                offsetof(amk_instruction_t, wait_counter) == 64 &&
                offsetof(amk_instruction_t, wait_threshold) == 96 &&
                offsetof(amk_instruction_t, out_counter) == 128 &&
                offsetof(amk_instruction_t, sm) == 132 &&
                offsetof(amk_instruction_t, params) == 136);
  CHECK(&c, sizeof(amk_counter_t) == 4);

  /* Program: eight table pointers, four counts, the spin limit, the trace
   * table, the launch tag last; a trace record is five timestamps. The aux
   * record: the resolved addresses, then their shadows and the waits held
   * at the signal. */
  CHECK(&c, sizeof(amk_program_t) == 104);
  CHECK(&c, sizeof(amk_inst_aux_t) == 272 && offsetof(amk_inst_aux_t, shadow) == 144 &&
                offsetof(amk_inst_aux_t, n_signal_waits) == 240);
  CHECK(&c, offsetof(amk_program_t, launch_tag) == 96);
  CHECK(&c, offsetof(amk_program_t, n_buffers) == 64 &&
                offsetof(amk_program_t, spin_limit_ns) == 80 &&
                offsetof(amk_program_t, trace) == 88);
  CHECK(&c, sizeof(amk_trace_t) == 56 && offsetof(amk_trace_t, end) == 16 &&
               offsetof(amk_trace_t, staged) == 24 && offsetof(amk_trace_t, body) == 32 &&
               offsetof(amk_trace_t, loop) == 40 && offsetof(amk_trace_t, looped) == 48);

  /* The CUDA view: the embedded header text, compiled by NVRTC. */
  char why[512];
  if (!amk_nvrtc_available(why, sizeof why)) {
    printf("test_abi: NVRTC not available (%s); device layout check skipped\n", why);
  } else {
    AmkStrBuf s;
    amk_sb_init(&s);
    amk_sb_puts(&s, amk_cuda_embedded_tables_h());
    amk_sb_puts(&s, amk_cuda_embedded_abi_h());
    amk_sb_printf(&s,
                  "static_assert(sizeof(amk_params_t) == %zu, \"params\");\n"
                  "static_assert(sizeof(amk_buffer_t) == %zu, \"buffer\");\n"
                  "static_assert(sizeof(amk_instruction_t) == %zu, \"instruction\");\n"
                  "static_assert(sizeof(amk_inst_aux_t) == %zu, \"aux\");\n"
                  "static_assert(sizeof(amk_program_t) == %zu, \"program\");\n"
                  "static_assert(sizeof(amk_trace_t) == %zu, \"trace\");\n"
                  "static_assert(AMK_ABI_OP_FUSED == %d && AMK_ABI_PARAM_theta == %d, \"codes\");\n"
                  "extern \"C\" __global__ void probe(amk_instruction_t *i) { i->params.eps.f = 1; }\n",
                  sizeof(amk_params_t), sizeof(amk_buffer_t), sizeof(amk_instruction_t),
                  sizeof(amk_inst_aux_t), sizeof(amk_program_t), sizeof(amk_trace_t), (int)AMK_OP_FUSED,
                  (int)AMK_PARAM_theta);
    AmkDiagEngine *diag = amk_diag_new(stderr);
    void *cubin = NULL;
    size_t size = 0;
    bool ok = amk_nvrtc_compile(s.data, "sm_90", false, &cubin, &size, diag);
    CHECK(&c, ok && size > 4 && memcmp(cubin, "\177ELF", 4) == 0);
    printf("test_abi: device layout compiled by NVRTC: %s\n", ok ? "ok" : "FAILED");
    free(cubin);
    amk_diag_free(diag);
    amk_sb_free(&s);
  }
  return unit_finish("test_abi", &c);
}
