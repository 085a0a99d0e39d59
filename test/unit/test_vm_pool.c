/* The CPU reference VM keeps one pool of worker threads for its whole life:
 * started at the first parallel step, reused by every later step, stopped
 * by amk_vm_free; and the pool computes the same logits as one thread. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/pipeline.h"
#include "amk/plan.h"
#include "amk/vm.h"
#include "amk/weights.h"
#include "unit.h"

/* Threads of this process, from /proc. */
static int thread_count(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d)
    return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

int main(void) {
  UnitCounts c = {0};
  AmkDiagEngine *d = amk_diag_new(stderr);
  const char *folder = AMK_SOURCE_DIR "/examples/llama-tiny";
  /* Small GEMV tiles: 376 tasks, above the VM's 256-task threshold. */
  AmkModule *m = amk_module_new();
  m->model_dir = amk_arena_strdup(&m->arena, folder);
  AmkPipeline *pl = amk_pipeline_new();
  CHECK(&c, amk_pipeline_parse(pl, "import,tile,sm-assign,color", d));
  CHECK(&c, amk_pipeline_set_option(pl, "gemv-n-tile", "4", d));
  CHECK(&c, amk_pipeline_set_option(pl, "max-seq", "16", d));
  AmkPipelineRunOptions run = {0};
  CHECK(&c, amk_pipeline_run(pl, m, d, &run).status == AMK_PIPELINE_OK);
  CHECK(&c, m->n_tasks >= 256);
  AmkPlan *p = amk_plan_build(m, NULL, d);
  AmkWeights *w = p ? amk_weights_load(p, folder, d) : NULL;
  CHECK(&c, p && w);
  if (!p || !w)
    return unit_finish("test_vm_pool", &c);
  int before = thread_count();
  AmkVm *one = amk_vm_create(p, w, 1, d), *four = amk_vm_create(p, w, 4, d);
  CHECK(&c, one && four);
  /* No threads until a step needs them. */
  CHECK(&c, thread_count() == before);
  const int32_t tokens[] = {1, 17, 42, 99, 3, 7};
  bool same = true;
  for (int64_t pos = 0; pos < 6; pos++) {
    CHECK(&c, amk_vm_step(one, tokens[pos], pos, d));
    CHECK(&c, amk_vm_step(four, tokens[pos], pos, d));
    /* The four workers, the same ones after every step. */
    CHECK(&c, thread_count() == before + 4);
    size_t n1 = 0, n4 = 0;
    const float *l1 = amk_vm_logits(one, &n1), *l4 = amk_vm_logits(four, &n4);
    same = same && n1 == n4 && n1 > 0 && memcmp(l1, l4, n1 * sizeof *l1) == 0;
  }
  CHECK(&c, same);
  /* A failed step (a token outside the vocabulary) leaves the pool usable. */
  CHECK(&c, !amk_vm_step(four, 1 << 30, 0, d));
  amk_vm_reset(four);
  CHECK(&c, amk_vm_step(four, 1, 0, d));
  amk_vm_free(four);
  CHECK(&c, thread_count() == before);
  amk_vm_free(one);
  amk_weights_free(w);
  amk_plan_free(p);
  amk_pipeline_free(pl);
  amk_module_free(m);
  amk_diag_free(d);
  return unit_finish("test_vm_pool", &c);
}
