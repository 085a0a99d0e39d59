/* Shared state of one validation run (validate.c, validate_bounds.c). */
#ifndef AMK_VALIDATE_INTERNAL_H
#define AMK_VALIDATE_INTERNAL_H

#include "amk/validate.h"
#include "validate_graph.h"

typedef struct {
  const AmkModule *m;
  AmkDiagEngine *diag;
  AmkValidateOptions opts;
  int64_t errors, warnings;
  bool stopped; /* the error cap was reached: the verdict is settled */
  AmkIdIndex bufs, ctrs, tasks;
  AmkTaskGraph g;
  /* Per buffer index: writer tasks and using tasks, in list order. */
  uint32_t *wr_off, *wr, *use_off, *use;
  uint32_t *write_order; /* buffers by first write (the reference's order) */
  uint32_t n_write_order;
  uint32_t *writer_slot; /* the counter slot all writers share, or none */
  uint32_t *scratch;     /* as many entries as there are writes */
} AmkValidator;

void amk_validator_report(AmkValidator *v, AmkSeverity sev, AmkLoc loc,
                          const char *fmt, ...) AMK_PRINTF(4, 5);
const char *amk_validator_label(const AmkTask *t);
/* Checks beyond the reference: page bindings, shapes, semantic bounds. */
void amk_validate_check_bounds(AmkValidator *v);

#endif
