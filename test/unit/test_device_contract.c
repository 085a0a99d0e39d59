/* The codegen <-> device library contract: backend/device_templates.h (the
 * list codegen emits every call through) against backend/megakernel.cuh as
 * the library embeds it. Each listed function is defined there as a task
 * function with the listed template parameters, and every task function
 * the library defines is listed. The check itself is shown to fail on a
 * renamed template and on a changed parameter. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../backend/device_templates.h"
#include "unit.h"

extern const char amk_embed_megakernel_cuh[]; /* backend_embed.c */

#define TASK_ARGS "(AmkP P, AmkI I, AmkA A, int idx, int pos, float *smem)"

static const struct {
  const char *name, *kinds;
} listed[] = {
#define X(name, kinds) {"amk_" #name, kinds},
    AMK_DEVICE_TEMPLATES(X)
#undef X
};
enum { N_LISTED = sizeof listed / sizeof listed[0] };

static const char *skip_space_back(const char *lo, const char *p) {
  while (p > lo && (p[-1] == ' ' || p[-1] == '\n' || p[-1] == '\t'))
    p--;
  return p;
}

/* The template parameter kinds of the definition whose name starts at
 * `name` ("i" per int, "L" per long long, "?" otherwise; "" for a plain
 * function) into out. */
static void kinds_before(const char *lib, const char *name, char *out, size_t size) {
  size_t n = 0;
  out[0] = '\0';
  const char *dev = "__device__ void ";
  if ((size_t)(name - lib) < strlen(dev) || strncmp(name - strlen(dev), dev, strlen(dev)) != 0)
    return;
  const char *p = skip_space_back(lib, name - strlen(dev));
  if (p == lib || p[-1] != '>')
    return;
  const char *close = p - 1, *open = close;
  while (open > lib && *open != '<')
    open--;
  for (const char *q = open + 1; q < close && n + 1 < size;) {
    while (*q == ' ' || *q == '\n')
      q++;
    const char *end = q;
    while (end < close && *end != ',')
      end++;
    out[n++] = strncmp(q, "long long ", 10) == 0 ? 'L' : strncmp(q, "int ", 4) == 0 ? 'i' : '?';
    q = end < close ? end + 1 : close;
  }
  out[n] = '\0';
}

/* Kinds of task function `name` as `lib` defines it; false when it does not. */
static bool defined_kinds(const char *lib, const char *name, char *out, size_t size) {
  char needle[128];
  snprintf(needle, sizeof needle, "%s" TASK_ARGS " {", name);
  for (const char *p = strstr(lib, needle); p; p = strstr(p + 1, needle))
    if (p > lib && (p[-1] == ' ' || p[-1] == '\n')) {
      kinds_before(lib, p, out, size);
      return true;
    }
  return false;
}

/* Mismatches between the list and `lib`, each printed when `verbose`. */
static int contract_mismatches(const char *lib, bool verbose) {
  int bad = 0;
  char kinds[32];
  for (int i = 0; i < N_LISTED; i++) {
    if (!defined_kinds(lib, listed[i].name, kinds, sizeof kinds)) {
      bad++;
      if (verbose)
        fprintf(stderr, "%s: listed, but megakernel.cuh defines no such task function\n",
                listed[i].name);
    } else if (strcmp(kinds, listed[i].kinds) != 0) {
      bad++;
      if (verbose)
        fprintf(stderr, "%s: megakernel.cuh takes <%s>, device_templates.h lists <%s>\n",
                listed[i].name, kinds, listed[i].kinds);
    }
  }
  /* Every task function defined is listed (a renamed one shows up here too). */
  const char *tail = TASK_ARGS " {";
  for (const char *p = strstr(lib, tail); p; p = strstr(p + 1, tail)) {
    const char *start = p;
    while (start > lib && (start[-1] == '_' || (start[-1] >= 'a' && start[-1] <= 'z') ||
                           (start[-1] >= '0' && start[-1] <= '9')))
      start--;
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(p - start), start);
    bool found = false;
    for (int i = 0; i < N_LISTED && !found; i++)
      found = strcmp(listed[i].name, name) == 0;
    if (!found) {
      bad++;
      if (verbose)
        fprintf(stderr, "%s: defined in megakernel.cuh but not in device_templates.h\n", name);
    }
  }
  return bad;
}

/* `lib` with the first `from` replaced by `to` (malloc'd). */
static char *replaced(const char *lib, const char *from, const char *to) {
  const char *at = strstr(lib, from);
  if (!at)
    return NULL;
  size_t len = strlen(lib) - strlen(from) + strlen(to);
  char *out = malloc(len + 1);
  size_t head = (size_t)(at - lib);
  memcpy(out, lib, head);
  strcpy(out + head, to);
  strcat(out, at + strlen(from));
  return out;
}

int main(void) {
  UnitCounts c = {0};
  const char *lib = amk_embed_megakernel_cuh;

  /* The list and the library agree. */
  CHECK(&c, N_LISTED >= 14);
  CHECK(&c, contract_mismatches(lib, true) == 0);
  char kinds[32];
  CHECK(&c, defined_kinds(lib, "amk_embed", kinds, sizeof kinds) &&
                strcmp(kinds, "iiiLLL") == 0);
  CHECK(&c, defined_kinds(lib, "amk_nop", kinds, sizeof kinds) && kinds[0] == '\0');
  CHECK(&c, !defined_kinds(lib, "amk_dispatch", kinds, sizeof kinds)); /* declared only */

  /* A template renamed in the library: missing from the list's view and
   * unlisted. */
  char *renamed = replaced(lib, "void amk_softmax(", "void amk_softmax_v2(");
  CHECK(&c, renamed && contract_mismatches(renamed, false) == 2);
  free(renamed);
  /* A parameter that changes type or is added. */
  char *retyped = replaced(lib, "long long NBYTES>", "int NBYTES>");
  CHECK(&c, retyped && contract_mismatches(retyped, false) == 1);
  free(retyped);
  char *added = replaced(lib, "long long NBYTES>", "long long NBYTES, int EXTRA>");
  CHECK(&c, added && contract_mismatches(added, false) == 1);
  free(added);

  return unit_finish("test_device_contract", &c);
}
