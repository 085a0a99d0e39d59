/* The weights of a plan: the bytes of every WEIGHT and CONST buffer, in
 * the buffer's dtype, loaded once and shared by every engine.
 *
 * From a safetensors checkpoint, a buffer whose source is one tensor of the
 * buffer's dtype (suitably aligned) points straight into the mapped file:
 * no host copy; any other buffer (a dtype conversion, a '+'-joined source)
 * gets one converted copy, except a '+'-joined source whose parts all have
 * the buffer's dtype: its parts stay in the file as pieces, and the columns
 * or transpose of one tensor of the buffer's dtype (KEY[:, B:E], KEY^T):
 * copied only when asked for (amk_weights_reorder tells an engine where the
 * file has it; the CUDA engine transposes on the device). Random weights
 * are described per buffer by a rule (amk_weights_random_rule) that
 * amk_random_fill reproduces anywhere; the CUDA engine fills them on the
 * device. Host copies of random and joined buffers are made only when
 * amk_weights_data is asked for them. Synthetic CONST buffers come from the
 * plan. Weight-only quantized weights (the plan's quant roles) come from a
 * float tensor quantized row by row as it is read, with their scales, or
 * from their own quantized bytes (docs/Quantization.md).
 *
 * Engines read the bytes with amk_weights_data; the CUDA engine uploads
 * them and may drop the loader afterwards, the CPU VM keeps pointing at
 * them (the weights must outlive it).
 */
#ifndef AMK_WEIGHTS_H
#define AMK_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amk/diag.h"
#include "amk/plan.h"

typedef struct AmkWeights AmkWeights;

/* Where a buffer's bytes come from. */
typedef enum {
  AMK_WEIGHTS_NONE = 0,  /* not a WEIGHT/CONST buffer: no bytes */
  AMK_WEIGHTS_MAPPED,    /* a pointer into the mapped checkpoint */
  AMK_WEIGHTS_CONVERTED, /* a host copy converted from the checkpoint */
  AMK_WEIGHTS_RANDOM,    /* the random rule (a host copy filled when asked for) */
  AMK_WEIGHTS_SYNTHETIC, /* the plan's computed contents */
  AMK_WEIGHTS_JOINED,    /* pieces of the mapped checkpoint (joined when asked for) */
  AMK_WEIGHTS_QUANTIZED, /* a host copy quantized from a float tensor or random rows,
                            and the scales made with it */
  AMK_WEIGHTS_REORDERED, /* the columns (KEY[:, B:E]) or the transpose (KEY^T) of a mapped
                            tensor or of another program's buffer (copied when asked for) */
} AmkWeightsOrigin;

/* A stretch of a buffer that lies in the mapped checkpoint as it is. */
typedef struct {
  const void *data;
  size_t offset, nbytes; /* where it goes in the buffer, and how much */
} AmkWeightPiece;

/* Seeded random weights of one buffer: element i is
 * center + scale * (2u - 1) with u the top 53 bits of the (i+1)-th
 * splitmix64 output from `state`, rounded to fp32, then to the dtype.
 * Matrices (rank >= 2) get center 0 and scale 1/sqrt(columns), vectors
 * center 1 and scale 0.1; buffers take consecutive stretches of one stream
 * seeded with the seed, in list order. */
typedef struct {
  uint64_t state;
  double center, scale;
} AmkRandomRule;

/* Loads every WEIGHT/CONST buffer from the checkpoint in dir (NULL: the
 * module's model folder). A program with nothing to load opens nothing.
 * NULL after reporting (the tensor or file and the reason). */
AmkWeights *amk_weights_load(const AmkPlan *plan, const char *dir, AmkDiagEngine *diag);
/* Seeded random weights at the program's shapes (f32, bf16, f16 buffers,
 * and quantized weights as the quantized random matrix with its scales;
 * other buffers stay zero). */
AmkWeights *amk_weights_random(const AmkPlan *plan, uint64_t seed, AmkDiagEngine *diag);
/* Random weights of a tensor-parallel rank's plan that are the slices of
 * amk_weights_random(full, seed): each WEIGHT buffer takes the rows and
 * columns its source names (KEY[B:E], KEY[:, B:E]) of the buffer of the same
 * name in `full` (the unsharded program, e.g. import's), so the N ranks
 * together hold the one random model that `full` does. Row slices stay
 * rules (made on demand); column slices are host copies of their columns.
 * Quantized programs are refused. NULL after reporting. */
AmkWeights *amk_weights_random_slices(const AmkPlan *plan, const AmkPlan *full, uint64_t seed,
                                      AmkDiagEngine *diag);
void amk_weights_free(AmkWeights *w);
/* The weights of `plan` borrowed from another plan's: every WEIGHT/CONST
 * buffer takes the bytes of `from`'s buffer of the same source (same kind
 * and dtype), or its rows within a '+'-joined source of whole tensors (as
 * fuse joins q|k|v), else an error. A prefill program and the decode
 * program of one model share one load this way (and the same random
 * weights); `from` must outlive the result. */
AmkWeights *amk_weights_share(const AmkPlan *plan, const AmkWeights *from, AmkDiagEngine *diag);
/* The rule amk_weights_share borrows by: the buffer of `from` whose bytes
 * `plan`'s loaded WEIGHT/CONST buffer b takes (the same source and dtype,
 * or a part of a '+'-joined source), its byte offset in *offset; -1 when
 * there is none (or b is not loaded from a checkpoint source). An engine
 * with device copies uses it to share them (the CUDA engine's prefill
 * programs). */
int64_t amk_weights_source_in(const AmkPlan *plan, uint32_t b, const AmkPlan *from,
                              int64_t *offset);

/* The bytes of buffer b (list position), nbytes of them; NULL (and 0) for
 * a buffer that is not WEIGHT/CONST. Read-only: mapped bytes are the file.
 * Random, joined and reordered buffers get their host copy on the first
 * call (so an engine that fills or uploads them itself never makes one),
 * which then stays as long as the weights; not safe to call from several
 * threads at once. */
const void *amk_weights_data(const AmkWeights *w, uint32_t b, size_t *nbytes);
/* The same bytes lent for a while (an engine's upload): a host copy made
 * for the lend alone goes when every lend is returned with
 * amk_weights_unlend, so uploading a model's reordered weights one by one
 * needs one such copy at a time. A copy amk_weights_data handed out stays. */
const void *amk_weights_lend(const AmkWeights *w, uint32_t b, size_t *nbytes);
void amk_weights_unlend(const AmkWeights *w, uint32_t b);
AmkWeightsOrigin amk_weights_origin(const AmkWeights *w, uint32_t b);
/* The bytes of host copies the weights hold now (converted, quantized,
 * made on demand): what they add to the process beyond the mapped files. */
size_t amk_weights_host_bytes(const AmkWeights *w);
/* For AMK_WEIGHTS_MAPPED and AMK_WEIGHTS_JOINED buffers: the stretches of
 * the mapped checkpoint that make up the buffer (an engine can upload them
 * without a host copy). False for other buffers. */
bool amk_weights_pieces(const AmkWeights *w, uint32_t b, const AmkWeightPiece **pieces,
                        uint32_t *n);
/* For AMK_WEIGHTS_REORDERED buffers taken from a mapped tensor: where the
 * matrix lies (height rows of stride elements of elem bytes; the buffer
 * takes columns [0, width) of it, transposed when `transpose`), so that an
 * engine can move it as it is and reorder it itself. False for others. */
typedef struct {
  const void *from;
  int64_t height, width, stride;
  size_t elem;
  bool transpose;
} AmkWeightReorder;
bool amk_weights_reorder(const AmkWeights *w, uint32_t b, AmkWeightReorder *out);
/* For AMK_WEIGHTS_RANDOM buffers: the rule that produced them. */
bool amk_weights_random_rule(const AmkWeights *w, uint32_t b, AmkRandomRule *out);
/* Fills numel elements of dtype (f32, bf16, f16) at dst by the rule. */
void amk_random_fill(const AmkRandomRule *rule, AmkDType dtype, int64_t numel, void *dst);

/* Writes the bytes of every loaded WEIGHT/CONST buffer as one tensor of
 * DIR/model.safetensors (DIR is made when absent; one level), with string
 * `metadata` pairs (amk_safetensors_write), and points the buffers' sources
 * at what was written, so the module loads from DIR as it is: no float
 * tensor is quantized again, a tied head quantized apart from the embedding
 * gets its own tensor. A tensor is keyed by its buffer's source when that
 * is one key (quantized scales by `KEY.scales`, the reference's names),
 * else by the buffer's name; buffers of one source and the same bytes share
 * it. i4 weights are written as their packed u8 bytes [N, ceil(K/2)].
 * `plan` is m's, `w` its weights. False after reporting. */
bool amk_weights_emit(AmkModule *m, const AmkPlan *plan, const AmkWeights *w, const char *dir,
                      const char *const *metadata, AmkDiagEngine *diag);

#endif
