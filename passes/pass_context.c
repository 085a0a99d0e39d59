/* What passes call: typed option reads and statistics (-stats). Kept apart
 * from the registry, which calls the passes, so no two files use each
 * other. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/pass.h"

/* The value given for `key` (the last one wins), checked to be of `type`. */
static const AmkOptionValue *find_option(const AmkPassContext *ctx, const char *key,
                                         AmkOptionType type) {
  for (size_t i = ctx->n_options; i-- > 0;) {
    const AmkOptionValue *v = &ctx->options[i];
    if (strcmp(v->info->key, key) == 0) {
      AMK_ASSERT(v->info->type == type && "option read as the wrong type");
      return v;
    }
  }
  return NULL;
}

bool amk_pass_option_int(const AmkPassContext *ctx, const char *key, int64_t *out) {
  const AmkOptionValue *v = find_option(ctx, key, AMK_OPTION_INT);
  if (v)
    *out = v->as.i;
  return v != NULL;
}

bool amk_pass_option_real(const AmkPassContext *ctx, const char *key, double *out) {
  const AmkOptionValue *v = find_option(ctx, key, AMK_OPTION_REAL);
  if (v)
    *out = v->as.real;
  return v != NULL;
}

bool amk_pass_option_enum(const AmkPassContext *ctx, const char *key, size_t *word_index) {
  const AmkOptionValue *v = find_option(ctx, key, AMK_OPTION_ENUM);
  if (v)
    *word_index = v->as.word;
  return v != NULL;
}

const char *amk_pass_option_string(const AmkPassContext *ctx, const char *key) {
  const AmkOptionValue *v = find_option(ctx, key, AMK_OPTION_STRING);
  return v ? v->as.s : NULL;
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

size_t amk_stats_count(const AmkStats *s) { return s ? s->n : 0; }

bool amk_stats_at(const AmkStats *s, size_t i, const char **pass, const char **name,
                  const char **value) {
  if (!s || i >= s->n)
    return false;
  *pass = s->items[i].pass;
  *name = s->items[i].name;
  *value = s->items[i].value;
  return true;
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
