/* Fuzz driver: the safetensors reader (amk_safetensors_open_memory): every
 * tensor it accepts lies inside the input, has the size its dtype and shape
 * give, is found by its name, and converts to every float format. */
#include <stdlib.h>
#include <string.h>

#include "amk/safetensors.h"
#include "fuzz.h"

static void check_tensor(const AmkSafetensors *st, const AmkStTensor *t,
                         const uint8_t *data, size_t size) {
  const uint8_t *begin = t->data;
  if (t->nbytes && (begin < data || t->nbytes > size ||
                    begin > data + size - t->nbytes))
    fuzz_fail(NULL, "tensor '%s' lies outside the input", t->name);
  if ((uint64_t)t->numel * amk_st_dtype_size(t->dtype) != t->nbytes)
    fuzz_fail(NULL, "tensor '%s': %lld elements of %s in %zu bytes", t->name,
              (long long)t->numel, amk_st_dtype_name(t->dtype), t->nbytes);
  if (amk_safetensors_find(st, t->name) != t)
    fuzz_fail(NULL, "tensor '%s' is not found by its name", t->name);

  bool is_float = t->dtype == AMK_ST_F64 || t->dtype == AMK_ST_F32 ||
                  t->dtype == AMK_ST_F16 || t->dtype == AMK_ST_BF16;
  static const AmkDType formats[] = {AMK_DTYPE_F32, AMK_DTYPE_BF16,
                                     AMK_DTYPE_F16};
  for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
    size_t bytes = (size_t)t->numel * (formats[i] == AMK_DTYPE_F32 ? 4 : 2);
    void *out = malloc(bytes ? bytes : 1);
    AmkDiagEngine *diag = fuzz_diag_new();
    bool ok = amk_safetensors_convert(t, formats[i], out, bytes, diag);
    if (ok != is_float)
      fuzz_fail(diag, "tensor '%s': converting %s %s", t->name,
                amk_st_dtype_name(t->dtype), ok ? "succeeded" : "failed");
    fuzz_check_verdict("amk_safetensors_convert", ok, diag);
    /* Same encoding: the bytes come back unchanged. */
    if (ok && ((formats[i] == AMK_DTYPE_F32 && t->dtype == AMK_ST_F32) ||
               (formats[i] == AMK_DTYPE_BF16 && t->dtype == AMK_ST_BF16) ||
               (formats[i] == AMK_DTYPE_F16 && t->dtype == AMK_ST_F16)) &&
        memcmp(out, t->data, bytes) != 0)
      fuzz_fail(NULL, "tensor '%s': a same-format conversion changed bytes",
                t->name);
    amk_diag_free(diag);
    free(out);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  AmkDiagEngine *diag = fuzz_diag_new();
  AmkSafetensors *st =
      amk_safetensors_open_memory("input.safetensors", data, size, diag);
  fuzz_check_verdict("amk_safetensors_open_memory", st != NULL, diag);
  for (size_t i = 0; st && i < amk_safetensors_count(st); i++) {
    const AmkStTensor *t = amk_safetensors_at(st, i);
    if (i > 0 && strcmp(amk_safetensors_at(st, i - 1)->name, t->name) >= 0)
      fuzz_fail(NULL, "tensors are not sorted by name: '%s' before '%s'",
                amk_safetensors_at(st, i - 1)->name, t->name);
    check_tensor(st, t, data, size);
  }
  amk_safetensors_close(st);
  amk_diag_free(diag);
  return 0;
}
