/* Helpers for code that builds a module in memory: the parsers, the `import`
 * pass and the synthetic lowerings (ir layer). */
#ifndef AMK_BUILDER_H
#define AMK_BUILDER_H

#include <stdint.h>

#include "amk/diag.h"
#include "amk/ir.h"

/* A config in m's arena holding the reference's ScheduleConfig defaults
 * (tiling {}, fusion_grouping [], load_balance, depth 2, graph_color pages,
 * 256 threads, no smem request). The caller attaches it to the module. */
AmkConfig *amk_config_new_default(AmkModule *m);

/* printf into a string in the arena (at most 255 characters are kept). */
const char *amk_arena_printf(AmkArena *a, const char *format, ...)
    AMK_PRINTF(2, 3);

/* Append an HBM buffer of the given shape and return its id. `name` and
 * `source` (NULL for none) are stored as given, so they must live as long as
 * the module: string literals or strings in its arena. */
int32_t amk_module_add_hbm_buffer(AmkModule *m, const char *name,
                                  AmkBufferKind kind, AmkDType dtype,
                                  uint32_t rank, const int64_t *dims,
                                  const char *source);

/* Whether every buffer's and counter's id is its list position, as the ids
 * amk_module_add_buffer / _add_counter give: then appended records cannot
 * collide with existing ids. */
bool amk_module_ids_are_positions(const AmkModule *m);

#endif
