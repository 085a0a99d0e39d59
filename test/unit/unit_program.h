/* What the unit tests that read whole programs share: a program file read
 * as text, and a plan's buffer by name. */
#ifndef AMK_UNIT_PROGRAM_H
#define AMK_UNIT_PROGRAM_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/fileio.h"
#include "amk/io.h"
#include "amk/plan.h"

/* The .amkir program at path, or NULL after its diagnostics (stderr). */
static inline AmkModule *unit_load_program(const char *path) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  size_t len = 0;
  char *text = amk_read_file(path, &len, d);
  AmkModule *m = text ? amk_parse_text(path, text, len, d) : NULL;
  free(text);
  amk_diag_free(d);
  return m;
}

/* The list position of p's buffer called name, or -1. */
static inline int32_t unit_plan_buffer(const AmkPlan *p, const char *name) {
  for (uint32_t b = 0; b < p->n_buffers; b++)
    if (strcmp(p->m->buffers[b].name, name) == 0)
      return (int32_t)b;
  return -1;
}

#endif
