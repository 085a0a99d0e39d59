/* The task DAG as Graphviz dot: one node per task coloured by op, an edge
 * from every producer of a counter to every task that waits on it, and tasks
 * grouped into one cluster per SM once SMs are assigned. */
#include <stdlib.h>
#include <string.h>

#include "amk/compare.h"
#include "amk/io.h"

/* One fill colour per op code (X11 colour names Graphviz knows), in code
 * order; the assertion below makes a new op fail to compile until it has
 * one. */
static const char *const op_colors[] = {
    "white",       "gray80",     "lightyellow", "palegreen",  "palegreen3",
    "lightblue",   "steelblue1", "orange",      "plum",       "khaki",
    "khaki3",      "lightpink",  "pink3",       "wheat",      "tan",
    "lightcyan",   "salmon",     "gold",        "orange3",    "mediumpurple1",
};
_Static_assert(sizeof op_colors / sizeof op_colors[0] == AMK_OP_COUNT,
               "op_colors: give every op in AMK_OPS a colour");

static void put_escaped(AmkStrBuf *out, const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      amk_sb_putc(out, '\\');
    if ((unsigned char)*s < 0x20)
      amk_sb_putc(out, ' ');
    else
      amk_sb_putc(out, *s);
  }
}

static void put_node(const AmkTask *t, AmkStrBuf *out, const char *indent) {
  const AmkOpInfo *info = amk_op_info(t->op);
  amk_sb_printf(out, "%st%d [label=\"%d: %s", indent, t->id, t->id,
                info ? info->text_name : "?");
  if (t->label && *t->label) {
    amk_sb_puts(out, "\\n");
    put_escaped(out, t->label);
  }
  amk_sb_printf(out, "\", fillcolor=\"%s\"];\n",
                (unsigned)t->op < AMK_OP_COUNT ? op_colors[t->op] : "red");
}

static int compare_int(const void *a, const void *b) {
  return amk_compare_i64(*(const int *)a, *(const int *)b);
}

typedef struct {
  int32_t counter, task;
} Producer;

static int compare_producer(const void *a, const void *b) {
  const Producer *x = a, *y = b;
  return amk_compare_i64_then(x->counter, y->counter, x->task, y->task);
}

void amk_print_dot(const AmkModule *m, AmkStrBuf *out) {
  amk_sb_puts(out, "digraph amk {\n  rankdir=TB;\n"
                   "  node [shape=box, style=\"filled,rounded\", fontname=\"monospace\"];\n");
  bool any_sm = false;
  for (uint32_t i = 0; i < m->n_tasks; i++)
    any_sm |= m->tasks[i].has_sm;
  if (any_sm) {
    int *sms = amk_xmalloc((m->n_tasks + 1) * sizeof *sms);
    size_t n = 0;
    for (uint32_t i = 0; i < m->n_tasks; i++)
      if (m->tasks[i].has_sm)
        sms[n++] = m->tasks[i].sm;
    qsort(sms, n, sizeof *sms, compare_int);
    for (size_t k = 0; k < n; k++) {
      if (k && sms[k] == sms[k - 1])
        continue;
      amk_sb_printf(out, "  subgraph cluster_sm%d {\n    label=\"SM %d\";\n",
                    sms[k], sms[k]);
      for (uint32_t i = 0; i < m->n_tasks; i++)
        if (m->tasks[i].has_sm && m->tasks[i].sm == sms[k])
          put_node(&m->tasks[i], out, "    ");
      amk_sb_puts(out, "  }\n");
    }
    free(sms);
  }
  for (uint32_t i = 0; i < m->n_tasks; i++)
    if (!m->tasks[i].has_sm)
      put_node(&m->tasks[i], out, "  ");

  /* Producers by counter: counters are indexed by position in a sorted list
   * of (counter, task) pairs so joins cost O(E log E). */
  Producer *prod = amk_xmalloc((m->n_tasks + 1) * sizeof *prod);
  for (uint32_t i = 0; i < m->n_tasks; i++)
    prod[i] = (Producer){m->tasks[i].out_counter, m->tasks[i].id};
  qsort(prod, m->n_tasks, sizeof *prod, compare_producer);
  for (uint32_t i = 0; i < m->n_tasks; i++) {
    const AmkTask *t = &m->tasks[i];
    for (uint32_t w = 0; w < t->n_waits; w++) {
      int32_t c = t->waits[w].counter;
      size_t lo = 0, hi = m->n_tasks;
      while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (prod[mid].counter < c)
          lo = mid + 1;
        else
          hi = mid;
      }
      for (size_t k = lo; k < m->n_tasks && prod[k].counter == c; k++)
        amk_sb_printf(out, "  t%d -> t%d;\n", prod[k].task, t->id);
    }
  }
  free(prod);
  amk_sb_puts(out, "}\n");
}
