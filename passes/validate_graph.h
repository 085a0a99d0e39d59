/* Internal to the validator, verifier and simulators: id indexes that do not
 * assume ids are list positions, and the task graph kept in its bipartite
 * task -> counter -> waiter form so that a counter shared by P producers and
 * W waiters costs P + W, not P * W (the reference's explicit edge set). */
#ifndef AMK_VALIDATE_GRAPH_H
#define AMK_VALIDATE_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amk/diag.h"
#include "amk/ir.h"

#define AMK_NO_INDEX UINT32_MAX

/* A bump allocator whose memory is kept between uses: amk_scratch_reset
 * makes everything allocated so far reusable (one block sized to the
 * largest use so far), so a validator run over a program of a size seen
 * before allocates nothing. Blocks are 16-byte aligned, NOT zeroed. */
typedef struct AmkScratchBlock AmkScratchBlock;
typedef struct {
  AmkScratchBlock *head; /* newest first */
  size_t total;          /* bytes in all blocks */
  size_t used_total;     /* bytes handed out since the last reset */
} AmkScratch;

void *amk_scratch_alloc(AmkScratch *s, size_t size);
void *amk_scratch_calloc(AmkScratch *s, size_t n, size_t size);
/* Reuse every block (merged into one when there were several); with
 * `hint` bytes at least available afterwards. */
void amk_scratch_reset(AmkScratch *s, size_t hint);
void amk_scratch_free(AmkScratch *s);

/* Open-addressing map int32 id -> uint32 index. */
typedef struct {
  uint32_t cap, count;
  int32_t *keys;
  uint32_t *vals; /* AMK_NO_INDEX marks an empty slot */
  AmkScratch *scratch; /* where keys/vals live; NULL: malloc */
} AmkIdMap;

void amk_idmap_init(AmkIdMap *map, size_t expected);
/* The same with its storage in `scratch` (amk_idmap_free is then a no-op). */
void amk_idmap_init_in(AmkIdMap *map, size_t expected, AmkScratch *scratch);
void amk_idmap_free(AmkIdMap *map);
uint32_t amk_idmap_get(const AmkIdMap *map, int32_t key);
/* Inserts key -> val unless present; returns the stored value. */
uint32_t amk_idmap_put(AmkIdMap *map, int32_t key, uint32_t val);

/* id -> list position for one kind of record (first occurrence wins).
 * `identity` is the fast path when every id equals its position. */
typedef struct {
  uint32_t n;
  bool identity;
  uint32_t n_duplicates;
  AmkIdMap map;
} AmkIdIndex;

/* Records whose first field is `int32_t id`, `stride` bytes apart. */
void amk_id_index_build(AmkIdIndex *ix, const void *records, size_t stride,
                        uint32_t n);
void amk_id_index_build_in(AmkIdIndex *ix, const void *records, size_t stride,
                           uint32_t n, AmkScratch *scratch);
void amk_id_index_free(AmkIdIndex *ix);
static inline uint32_t amk_id_index_get(const AmkIdIndex *ix, int32_t id) {
  if (ix->identity)
    return (id >= 0 && (uint32_t)id < ix->n) ? (uint32_t)id : AMK_NO_INDEX;
  return amk_idmap_get(&ix->map, id);
}

/* The dependency graph. A "slot" is one distinct out_counter id; the
 * reference's edge p -> t exists iff t waits on p's slot. */
typedef struct {
  uint32_t n_tasks, n_slots;
  AmkScratch *scratch;       /* where the arrays live; NULL: malloc */
  /* out_counter id -> slot: a dense table over [dense_lo, dense_lo +
   * dense_n) when the ids are compact (the usual case), else the map. */
  int64_t dense_lo;
  uint32_t dense_n;
  uint32_t *dense_slot;
  AmkIdMap slot_of_counter;
  uint32_t *task_slot;       /* slot of each task's out_counter */
  uint32_t *prod_off, *prod; /* producers of each slot, in list order */
  uint32_t *wait_off, *waiter; /* distinct waiters of each slot, ascending */
  uint32_t *tw_off, *tw_slot;  /* distinct producing slots each task waits on */
  int64_t n_edges;            /* |{(p, t)}| as the reference counts them */
  bool acyclic;
  uint32_t *topo;     /* Kahn order (the reference's exact order), n_tasks */
  uint32_t *topo_pos; /* inverse of topo */
  /* Scratch for ancestor searches (generation-stamped marks). */
  uint32_t generation;
  uint32_t *task_mark, *slot_mark, *stack;
} AmkTaskGraph;

void amk_graph_build(AmkTaskGraph *g, const AmkModule *m);
/* The same with every array in `scratch` (amk_graph_free then frees none). */
void amk_graph_build_in(AmkTaskGraph *g, const AmkModule *m,
                        AmkScratch *scratch);
void amk_graph_free(AmkTaskGraph *g);
/* amk_graph_build for a pass that needs an execution order. On a cycle it
 * reports "<pass>: the task graph has a cycle, so <consequence> (run
 * -validate for the cycle)", frees the graph and returns false. */
bool amk_graph_build_acyclic(AmkTaskGraph *g, const AmkModule *m,
                             AmkDiagEngine *diag, const char *pass,
                             const char *consequence);
static inline uint32_t amk_graph_counter_slot(const AmkTaskGraph *g,
                                              int32_t counter_id) {
  if (g->dense_slot) {
    int64_t i = (int64_t)counter_id - g->dense_lo;
    return i >= 0 && i < (int64_t)g->dense_n ? g->dense_slot[i] : AMK_NO_INDEX;
  }
  return amk_idmap_get(&g->slot_of_counter, counter_id);
}
static inline uint32_t amk_graph_producer_count(const AmkTaskGraph *g,
                                                uint32_t slot) {
  return slot == AMK_NO_INDEX ? 0 : g->prod_off[slot + 1] - g->prod_off[slot];
}
/* True when task `t` waits on `slot` (a direct edge from every producer). */
bool amk_graph_waits_on_slot(const AmkTaskGraph *g, uint32_t t, uint32_t slot);
/* Mark every ancestor of `v` whose topological position is >= min_pos (only
 * those can lie on a path from a task at min_pos or later). Needs acyclic.
 * Afterwards amk_graph_is_marked(u) says whether u is a strict ancestor. */
void amk_graph_mark_ancestors(AmkTaskGraph *g, uint32_t v, uint32_t min_pos);
static inline bool amk_graph_is_marked(const AmkTaskGraph *g, uint32_t u) {
  return g->task_mark[u] == g->generation;
}
/* u happens-before v (u a strict ancestor of v). Needs acyclic. */
bool amk_graph_before(AmkTaskGraph *g, uint32_t u, uint32_t v);
/* The reference's cycle witness (`cycle: a:label -> b:label -> a:label`),
 * found by iterative DFS in the reference's visiting order. */
uint32_t amk_graph_describe_cycle(const AmkTaskGraph *g, const AmkModule *m,
                                  char *buf, size_t size);
/* (returns the task the witness starts at, or AMK_NO_INDEX) */

/* Python repr() of a value, truncated with "..." to fit `size`. */
void amk_value_repr(const AmkValue *v, char *buf, size_t size);
/* The label the reference prints for a task in a cycle (label or op name). */
const char *amk_task_display_name(const AmkTask *t);

#endif
