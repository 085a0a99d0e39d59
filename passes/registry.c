/* The pass registry (generated from AMK_PASSES), pass options and -stats. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/io.h"
#include "amk/pass.h"

static const AmkPassInfo pass_table[] = {
#define X(ident, flag, analysis, desc) {flag, desc, analysis, amk_pass_##ident},
    AMK_PASSES(X)
#undef X
};

size_t amk_pass_count(void) { return sizeof pass_table / sizeof pass_table[0]; }

const AmkPassInfo *amk_pass_at(size_t i) {
  return i < amk_pass_count() ? &pass_table[i] : NULL;
}

const AmkPassInfo *amk_pass_lookup(const char *name) {
  for (size_t i = 0; i < amk_pass_count(); i++)
    if (strcmp(pass_table[i].name, name) == 0)
      return &pass_table[i];
  return NULL;
}

const char *amk_pass_option(const AmkPassContext *ctx, const char *key) {
  /* The last occurrence on the command line wins. */
  for (size_t i = ctx->n_options; i-- > 0;)
    if (strcmp(ctx->options[i].key, key) == 0)
      return ctx->options[i].value;
  return NULL;
}

/* ---- statistics ---------------------------------------------------------- */

typedef struct {
  char *pass, *name, *value;
} Stat;

struct AmkStats {
  Stat *items;
  size_t n, cap;
};

AmkStats *amk_stats_new(void) { return amk_xcalloc(1, sizeof(AmkStats)); }

void amk_stats_free(AmkStats *s) {
  if (!s)
    return;
  for (size_t i = 0; i < s->n; i++) {
    free(s->items[i].pass);
    free(s->items[i].name);
    free(s->items[i].value);
  }
  free(s->items);
  free(s);
}

static void stat_put(AmkStats *s, const char *pass, const char *name,
                     const char *value) {
  if (!s)
    return;
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->items[i].pass, pass) == 0 && strcmp(s->items[i].name, name) == 0) {
      free(s->items[i].value);
      s->items[i].value = amk_xstrdup(value);
      return;
    }
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 16;
    s->items = amk_xrealloc(s->items, s->cap * sizeof *s->items);
  }
  s->items[s->n++] =
      (Stat){amk_xstrdup(pass), amk_xstrdup(name), amk_xstrdup(value)};
}

void amk_stat_int(AmkStats *s, const char *pass, const char *name, int64_t v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%" PRId64, v);
  stat_put(s, pass, name, buf);
}

void amk_stat_real(AmkStats *s, const char *pass, const char *name, double v) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.6g", v);
  stat_put(s, pass, name, buf);
}

void amk_stat_str(AmkStats *s, const char *pass, const char *name,
                  const char *v) {
  stat_put(s, pass, name, v);
}

void amk_stats_print(const AmkStats *s, FILE *out) {
  if (!s || s->n == 0)
    return;
  size_t width = 0;
  for (size_t i = 0; i < s->n; i++) {
    size_t w = strlen(s->items[i].value);
    if (w > width)
      width = w;
  }
  fputs("===--- Statistics Collected ---===\n", out);
  for (size_t i = 0; i < s->n; i++)
    fprintf(out, "%*s %s - %s\n", (int)width, s->items[i].value,
            s->items[i].pass, s->items[i].name);
}
