/* Launch traces (backend/trace.c) on a hand-stamped five-task launch: the
 * critical chain, the report's numbers and the Chrome trace JSON. Every
 * expected value below is worked out by hand from the stamps. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "amk/backend.h"
#include "unit.h"

static const char program[] =
    "amkir 0.2.0, abi 0.2\n"
    "target h100\n"
    "buffer %x : f32[1, 8] io_input\n"
    "buffer %a : f32[1, 8] activation\n"
    "buffer %b : f32[1, 8] activation\n"
    "buffer %y : f32[1, 8] io_output\n"
    "buffer %z : f32[1, 8] io_output\n"
    "counter #a \"a\"\n"
    "counter #b \"b\"\n"
    "counter #y \"y\"\n"
    "counter #z \"z\"\n"
    "task 0 copy(%x) -> %a signal #a label \"embed\"\n"
    "task 1 gelu(%a) -> %b wait #a >= 1 signal #b label \"L0.q_proj[t0]\"\n"
    "task 2 gelu(%a) -> %b wait #a >= 1 signal #b label \"L0.q_proj[t1]\"\n"
    "task 3 copy(%b) -> %y wait #b >= 2 signal #y label \"L12.o_proj[t0]\"\n"
    "task 4 copy(%x) -> %z signal #z\n"
    "task 5 copy(%x) -> %z signal #z label \"never\"\n";

/* Block 0 runs tasks 0, 1, 3; block 1 runs 2, 4 and never reaches 5.
 * Task 2 waits 3 us for task 0; task 3 waits for task 2 (the later of the
 * two #b producers). */
static const int32_t block_of[6] = {0, 0, 1, 0, 1, 1};
static const amk_trace_t stamps[6] = {
    {1000, 1000, 3000, 0, 0, 0, 0},   {3100, 3100, 5100, 0, 0, 0, 0},
    {1000, 4000, 10000, 0, 0, 0, 0},  {5200, 11000, 12000, 0, 0, 0, 0},
    {10100, 10100, 10600, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0},
};

static bool contains(const char *hay, const char *needle) {
  bool found = hay && strstr(hay, needle) != NULL;
  if (!found)
    fprintf(stderr, "missing in the report: %s\n", needle);
  return found;
}

int main(void) {
  UnitCounts c = {0};
  AmkDiagEngine *diag = amk_diag_new(stderr);
  AmkModule *m = amk_parse_text("trace.amkir", program, sizeof program - 1, diag);
  CHECK(&c, m != NULL);
  if (!m)
    return unit_finish("test_trace", &c);
  AmkTrace tr = {.m = m, .block_of = block_of, .stamps = stamps};

  /* The chain: task 3 <- task 2 (#b's last producer, not queue
   * predecessor task 1) <- task 0 (#a); task 0 waited on nothing. */
  uint32_t chain[6] = {0};
  size_t n = amk_trace_critical_chain(&tr, chain);
  CHECK(&c, n == 3);
  CHECK(&c, chain[0] == 0 && chain[1] == 2 && chain[2] == 3);

  AmkStrBuf report;
  amk_sb_init(&report);
  amk_trace_report(&tr, &report);
  /* Span 1000 -> 12000 ns. Busy: block 0 2+2+1 = 5 us (45.5%), block 1
   * 6+0.5 = 6.5 us (59.1%), mean 52.3%. Chain run 2+6+1 = 9 us (81.8%);
   * gaps 4000-3000 and 11000-10000, both across blocks. */
  CHECK(&c, contains(report.data, "trace: 5 of 6 tasks on 2 blocks; 11.0 us from the first "
                                  "arrival to the last signal"));
  CHECK(&c, contains(report.data, "mean 52.3%, least 45.5% (block 0), most 59.1% (block 1)"));
  CHECK(&c, contains(report.data, "critical chain 3 tasks: running 9.0 us (81.8%), waiting on "
                                  "another block 2.0 us over 2 hops (mean 1.00 us), on its own "
                                  "block 0.0 us over 0 hops"));
  /* Kinds without layer prefix and tile suffix, by run time: q_proj (2 +
   * 6 us, 3 us waited, one on the chain), embed, o_proj (5.8 us waited),
   * and the unlabelled task under its op name. */
  CHECK(&c, contains(report.data, "| q_proj               |     2 |        8.0 |        4.00 |"
                                  "       6.00 |         3.0 |        1 |          6.0 |"));
  CHECK(&c, contains(report.data, "| o_proj               |     1 |        1.0 |        1.00 |"
                                  "       1.00 |         5.8 |        1 |          1.0 |"));
  const char *q = strstr(report.data, "| q_proj"), *e = strstr(report.data, "| embed"),
             *o = strstr(report.data, "| o_proj"), *cp = strstr(report.data, "| copy");
  CHECK(&c, q && e && o && cp && q < e && e < o && o < cp);
  CHECK(&c, !strstr(report.data, "never"));
  /* No phase stamps (a build without AMK_CUDA_TRACE_PHASES): no table. */
  CHECK(&c, !strstr(report.data, "phases of a run"));

  /* Phase stamps: q_proj's two tasks staged 0.5 and 1.5 us after their
   * start and done 1.0 and 5.0 us after it, so staged means 1.0, staged
   * to body end 2.0, body 3.0, signal 1.0 (2 - 1 and 6 - 5); o_proj has a
   * body stamp only (no staged column); embed a body stamp outside its
   * run, which counts for nothing. The q_proj tasks' loops start 0.6 and
   * 2.0 us after their start and last 0.3 and 2.0 us, ending 0.1 and 1.0 us
   * before the body's end (means 1.30, 1.15, 0.55); o_proj's loop stamps
   * end after its body, so it has no loop columns. */
  amk_trace_t phased[6];
  memcpy(phased, stamps, sizeof phased);
  phased[1].staged = 3600, phased[1].body = 4100;
  phased[2].staged = 5500, phased[2].body = 9000;
  phased[3].body = 11800;
  phased[1].loop = 3700, phased[1].looped = 4000;
  phased[2].loop = 6000, phased[2].looped = 8000;
  phased[3].loop = 11100, phased[3].looped = 11900;
  phased[0].body = 3500;
  AmkTrace with_phases = {.m = m, .block_of = block_of, .stamps = phased};
  AmkStrBuf pr;
  amk_sb_init(&pr);
  amk_trace_report(&with_phases, &pr);
  CHECK(&c, contains(pr.data, "trace: phases of a run (AMK_CUDA_TRACE_PHASES), mean us\n"));
  CHECK(&c, contains(pr.data, "| q_proj               |     2 |          1.00 |               "
                              "2.00 | 3.00 |   1.00 |    1.30 | 1.15 |                 0.55 |\n"));
  CHECK(&c, contains(pr.data, "| o_proj               |     1 |             - |                "
                              "  - | 0.80 |   0.20 |       - |    - |                    - |\n"));
  const char *phases = strstr(pr.data, "phases of a run");
  CHECK(&c, phases && !strstr(phases, "| embed"));
  amk_sb_free(&pr);

  /* Chrome JSON: 5 task slices and 2 wait slices (tasks 2 and 3), times
   * in us from the first arrival, the chain's tasks in "critical". */
  AmkStrBuf json;
  amk_sb_init(&json);
  amk_trace_chrome_json(&tr, &json);
  cJSON *root = cJSON_Parse(json.data);
  CHECK(&c, root != NULL);
  cJSON *events = cJSON_GetObjectItem(root, "traceEvents");
  CHECK(&c, cJSON_GetArraySize(events) == 7);
  int waits = 0, critical = 0;
  bool task2_ok = false;
  cJSON *ev;
  cJSON_ArrayForEach(ev, events) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(ev, "name"));
    const char *cat = cJSON_GetStringValue(cJSON_GetObjectItem(ev, "cat"));
    if (name && strcmp(name, "wait") == 0)
      waits++;
    if (cat && strcmp(cat, "critical") == 0)
      critical++;
    if (name && strcmp(name, "L0.q_proj[t1]") == 0) {
      cJSON *args = cJSON_GetObjectItem(ev, "args");
      task2_ok = cJSON_GetNumberValue(cJSON_GetObjectItem(ev, "tid")) == 1 &&
                 cJSON_GetNumberValue(cJSON_GetObjectItem(ev, "ts")) == 3.0 &&
                 cJSON_GetNumberValue(cJSON_GetObjectItem(ev, "dur")) == 6.0 &&
                 cJSON_GetNumberValue(cJSON_GetObjectItem(args, "wait_us")) == 3.0 &&
                 strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(args, "kind")), "q_proj") == 0;
    }
  }
  CHECK(&c, waits == 2);
  CHECK(&c, critical == 3);
  CHECK(&c, task2_ok);
  cJSON_Delete(root);

  /* Nothing stamped: a one-line report, an empty chain. */
  amk_trace_t none[6];
  memset(none, 0, sizeof none);
  AmkTrace empty = {.m = m, .block_of = block_of, .stamps = none};
  CHECK(&c, amk_trace_critical_chain(&empty, chain) == 0);
  AmkStrBuf r2;
  amk_sb_init(&r2);
  amk_trace_report(&empty, &r2);
  CHECK_STR(&c, r2.data, "trace: no task of the launch was stamped\n");

  amk_sb_free(&r2);
  amk_sb_free(&json);
  amk_sb_free(&report);
  amk_module_free(m);
  amk_diag_free(diag);
  return unit_finish("test_trace", &c);
}
