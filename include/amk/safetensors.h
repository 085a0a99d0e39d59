/* Reading safetensors checkpoints: a single `model.safetensors`, or a sharded
 * checkpoint described by `model.safetensors.index.json`.
 *
 * Files are mapped read-only (mmap); every header is validated before any
 * tensor is exposed: the 8-byte header length, the JSON header, each dtype,
 * shape and data_offsets pair (in bounds, size = numel x dtype size, no two
 * tensors overlapping). Every error names the file and, where there is one,
 * the tensor. Nothing here aborts on bad input.
 */
#ifndef AMK_SAFETENSORS_H
#define AMK_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amk/diag.h"
#include "amk/ir.h"

/* Safetensors dtype strings. X(NAME, "string", bytes per element) */
#define AMK_ST_DTYPES(X)                                                       \
  X(F64, "F64", 8)                                                             \
  X(F32, "F32", 4)                                                             \
  X(F16, "F16", 2)                                                             \
  X(BF16, "BF16", 2)                                                           \
  X(F8_E4M3, "F8_E4M3", 1)                                                     \
  X(F8_E5M2, "F8_E5M2", 1)                                                     \
  X(I64, "I64", 8)                                                             \
  X(I32, "I32", 4)                                                             \
  X(I16, "I16", 2)                                                             \
  X(I8, "I8", 1)                                                               \
  X(U64, "U64", 8)                                                             \
  X(U32, "U32", 4)                                                             \
  X(U16, "U16", 2)                                                             \
  X(U8, "U8", 1)                                                               \
  X(BOOL, "BOOL", 1)

typedef enum {
#define X(name, text, size) AMK_ST_##name,
  AMK_ST_DTYPES(X)
#undef X
  AMK_ST_DTYPE_COUNT
} AmkStDType;

const char *amk_st_dtype_name(AmkStDType d);
size_t amk_st_dtype_size(AmkStDType d);
/* -1 for a string that is not a safetensors dtype. */
int amk_st_dtype_from_name(const char *s);
/* The IR dtype of the same encoding, or -1 when the IR has none. */
int amk_st_dtype_to_ir(AmkStDType d);

/* Ranks above this are refused (no transformer weight comes close). */
#define AMK_ST_MAX_RANK 8
/* Headers above this size are refused as corrupt (real ones are < 1 MB). */
#define AMK_ST_MAX_HEADER_BYTES (100u * 1024u * 1024u)

typedef struct {
  const char *name;
  AmkStDType dtype;
  uint32_t rank;
  int64_t shape[AMK_ST_MAX_RANK];
  int64_t numel;
  const void *data; /* inside the mapping; not necessarily aligned */
  size_t nbytes;
  const char *file; /* path of the file the tensor lives in */
} AmkStTensor;

typedef struct AmkSafetensors AmkSafetensors;

/* Open a checkpoint. `path` is a `.safetensors` file, a
 * `model.safetensors.index.json`, or a model folder (which uses the index
 * when present, else `model.safetensors`). Returns NULL after reporting
 * through `diag` on any error. */
AmkSafetensors *amk_safetensors_open(const char *path, AmkDiagEngine *diag);
/* One safetensors file already in memory: `size` bytes at `data`, checked as
 * a file of that content would be. `name` stands for the file in errors and
 * in each tensor's `file`. The tensors point into `data`, which must outlive
 * the result. */
AmkSafetensors *amk_safetensors_open_memory(const char *name, const void *data,
                                            size_t size, AmkDiagEngine *diag);
void amk_safetensors_close(AmkSafetensors *st);

/* Tensors sorted by name. */
size_t amk_safetensors_count(const AmkSafetensors *st);
const AmkStTensor *amk_safetensors_at(const AmkSafetensors *st, size_t i);
/* NULL when absent. */
const AmkStTensor *amk_safetensors_find(const AmkSafetensors *st,
                                        const char *name);
/* Number of files mapped (1, or the distinct shards of an index). */
size_t amk_safetensors_file_count(const AmkSafetensors *st);

/* True when a folder holds weights that amk_safetensors_open would read. */
bool amk_safetensors_present(const char *dir);

/* F64, F32, F16 or BF16. */
bool amk_st_dtype_is_float(AmkStDType d);

/* Elements [first, first + count) of a floating-point tensor as fp32 (the
 * caller keeps to its float dtypes and its elements). */
void amk_safetensors_read_f32(const AmkStTensor *t, int64_t first, int64_t count,
                              float *dst);

/* Convert a floating-point tensor (F64, F32, F16, BF16) to `to` (F32, BF16 or
 * F16) into `dst`, which must hold numel elements of `to` (`dst_bytes`).
 * Narrowing rounds to nearest even. Reports and returns false for an integer
 * source, an unsupported target or a short destination. */
bool amk_safetensors_convert(const AmkStTensor *t, AmkDType to, void *dst,
                             size_t dst_bytes, AmkDiagEngine *diag);

/* A tensor to write: its bytes are numel x the dtype's size. */
typedef struct {
  const char *name;
  AmkStDType dtype;
  uint32_t rank;
  int64_t shape[AMK_ST_MAX_RANK];
  const void *data;
  size_t nbytes;
} AmkStWriteTensor;

/* Writes a safetensors file, atomically (a failure leaves no partial file):
 * the JSON header with `metadata` (key, value, key, value, ..., NULL; or
 * NULL) as __metadata__, padded to 8 bytes, then every tensor's bytes with
 * no hole, those of wider elements first so each starts aligned for its
 * dtype. Reports and returns false on a tensor whose bytes do not match its
 * shape, a repeated name, or a write error. */
bool amk_safetensors_write(const char *path, const AmkStWriteTensor *tensors, size_t n,
                           const char *const *metadata, AmkDiagEngine *diag);

#endif
