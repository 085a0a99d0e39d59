/* Tensor parallelism in the IR: a rank program, its collectives, and the
 * slices of checkpoint tensors its weight buffers take.
 *
 * The shard pass (passes/shard.c, docs/TensorParallel.md) turns an op-level
 * program into rank R of N. Such a program records `tp_size` and `tp_rank`
 * in its meta; its cross-rank collectives are ALLREDUCE_SHARD tasks with
 * the param `group = N` (the group size; a marshalled field, so a GPU
 * engine's device code sees it as DEQUANT sees its quantization group).
 * An ALLREDUCE_SHARD without the param (or with group = 1) keeps its
 * one-device meaning: the sum of its inputs. */
#ifndef AMK_TP_H
#define AMK_TP_H

#include <stdbool.h>
#include <stdint.h>

#include "amk/ir.h"

/* The ALLREDUCE_SHARD param naming a cross-rank collective's group size. */
#define AMK_TP_PARAM "group"
/* The most ranks a tensor-parallel group may have. */
#define AMK_TP_MAX_RANKS 64

/* The group size of a cross-rank collective (an ALLREDUCE_SHARD with
 * group >= 2); 0 for any other task, a one-device ALLREDUCE_SHARD included.
 * A group param that is not an integer >= 1 reads as -1 (the validator says
 * why). */
int64_t amk_task_tp_group(const AmkTask *t);

/* meta.tp_size and meta.tp_rank: true (both set) for a rank program,
 * false for any other (neither key), and false with *size = -1 when the
 * keys are there but malformed. */
bool amk_module_tp(const AmkModule *m, int64_t *size, int64_t *rank);

/* A rank program's cross-rank collectives (list positions, malloc'd into
 * *tasks, *n of them) in the order its waits force on them: the k-th is
 * what every rank's k-th meets (amk_validate_tp proves they match). False
 * when two of them are not ordered by waits (unordered: the first such
 * pair; *tasks still holds all of them). */
bool amk_tp_collective_order(const AmkModule *m, uint32_t **tasks, uint32_t *n,
                             uint32_t unordered[2]);

/* One part of a weight buffer's `source`: a state-dict key with optional
 * row and column ranges, optionally transposed (docs/Import.md):
 *   KEY                 the whole tensor
 *   KEY[B:E]            rows [B, E)
 *   KEY[:, B:E]         columns [B, E) of a rank-2 tensor
 *   KEY[B:E, C:D]       rows [B, E) of columns [C, D)
 *   any of these + ^T   the same (rank-2) slice transposed: a slice [R, C]
 *                       fills a buffer [C, R] (KEY^T, KEY[B:E]^T, ...)
 * The ranges index the tensor as stored, before any transpose. A range not
 * given is -1, -1. */
typedef struct {
  char key[512];
  int64_t row_begin, row_end;
  int64_t col_begin, col_end;
  bool transpose; /* a trailing ^T */
} AmkSourcePart;

/* Parses `text` (len bytes, one part: no '+'). False when the key is empty
 * or too long, a range is malformed (B >= E, not decimal, a ']' without
 * its '['), or a '^' is anything but the part's last two bytes "^T". */
bool amk_source_part_parse(const char *text, size_t len, AmkSourcePart *out);

#endif
