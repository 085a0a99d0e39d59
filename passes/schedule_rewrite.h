/* Helpers shared by the passes that restructure a schedule (tile, fuse):
 * removing records and renumbering ids, restoring the all-join rule on
 * thresholds after producer counts change, unique names, and the
 * dependent-hop metric both passes report. Not a pass itself. */
#ifndef AMK_SCHEDULE_REWRITE_H
#define AMK_SCHEDULE_REWRITE_H

#include <stdbool.h>
#include <stdint.h>

#include "amk/pass.h"
#include "validate_graph.h"

/* A wait threshold a rewrite leaves for amk_rw_fix_thresholds to set to the
 * counter's final producer count (a full join). */
#define AMK_RW_FULL_JOIN INT64_MIN

/* Producers of each counter, by counter list position (malloc'd, n_counters
 * entries; counters of tasks that name a missing counter are not counted). */
uint32_t *amk_rw_producer_counts(const AmkModule *m, const AmkIdIndex *counters);


/* Records a rewrite removes, and where tasks it adds belong in the list.
 * Task i >= first_new is placed right after the task at list position
 * anchor[i - first_new] (in order of creation), or at the end when the
 * anchor is UINT32_MAX. */
typedef struct {
  uint8_t *dead_task, *dead_buffer, *dead_counter;
  uint32_t cap_task, cap_buffer, cap_counter;
  uint32_t first_new;
  uint32_t *anchor;
  uint32_t n_anchor, cap_anchor;
} AmkRwEdit;

/* Rewrites every wait of a live task that was a full join before the
 * rewrite (threshold == the counter's producer count in `old_counts`, which
 * covers the first `n_old` counters by list position) or that carries
 * AMK_RW_FULL_JOIN, to the number of live producers of its counter now (the
 * all-join rule). `e` may be NULL (no task removed). */
void amk_rw_fix_thresholds(AmkModule *m, const AmkRwEdit *e,
                           const uint32_t *old_counts, uint32_t n_old);

void amk_rw_edit_init(AmkRwEdit *e, const AmkModule *m);
void amk_rw_edit_free(AmkRwEdit *e);
void amk_rw_kill_task(AmkRwEdit *e, uint32_t pos);
void amk_rw_kill_buffer(AmkRwEdit *e, uint32_t pos);
void amk_rw_kill_counter(AmkRwEdit *e, uint32_t pos);
bool amk_rw_task_dead(const AmkRwEdit *e, uint32_t pos);
bool amk_rw_buffer_dead(const AmkRwEdit *e, uint32_t pos);
/* Appends a task placed after list position `anchor`; returns it. */
AmkTask *amk_rw_add_task(AmkModule *m, AmkRwEdit *e, uint32_t anchor);

/* Applies the edit: drops dead records, orders new tasks after their
 * anchors, renumbers buffer, counter and task ids to list positions and
 * rewrites every reference. A page table is dropped (it described the old
 * buffers; run color again). */
void amk_rw_compact(AmkModule *m, AmkRwEdit *e, AmkPassContext *ctx,
                    const char *pass);

/* A buffer or counter name not yet used in the module: `base`, else
 * `base.2`, `base.3`, ... (arena string). */
const char *amk_rw_unique_buffer_name(AmkModule *m, const char *base);
const char *amk_rw_unique_counter_name(AmkModule *m, const char *base);

/* Dependent hops. critical_path: tasks on the longest dependency chain of
 * the whole program. per_layer: the longest chain of tasks of one layer
 * (tasks labelled "L<n>." and edges between them), the most over layers;
 * 0 when no label names a layer. False when the graph has a cycle. */
bool amk_rw_hops(const AmkModule *m, int64_t *critical_path,
                 int64_t *per_layer);

/* Pattern id of a GEMV_TILE task (flags bits 16-31), and its low flag bits. */
int64_t amk_rw_pattern(const AmkTask *t);
int64_t amk_rw_low_flags(const AmkTask *t);

/* Whether a GEMV/GEMM tile reads weight-only quantized weights (a qdtype
 * param): its scales are input 2, a fused pattern's operand input 3
 * (docs/Quantization.md). */
bool amk_rw_quantized(const AmkTask *t);

/* Copy of a task's params into the arena (so a task can edit its own). */
void amk_rw_copy_params(AmkModule *m, AmkTask *dst, const AmkTask *src);

/* Parses a whole decimal integer in [min, max]. */
bool amk_rw_parse_int(const char *text, int64_t min, int64_t max,
                      int64_t *out);

#endif
