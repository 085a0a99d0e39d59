/* The registry: the pass table and the option table, generated from
 * AMK_PASSES and AMK_PASS_OPTIONS. This file calls every pass and nothing
 * calls back into it from a pass; what passes call (options, statistics) is
 * passes/pass_context.c. */
#include <string.h>

#include "amk/pass.h"

static const AmkPassInfo pass_table[] = {
#define X(ident, flag, analysis, desc) {flag, desc, analysis, amk_pass_##ident},
    AMK_PASSES(X)
#undef X
};

static const AmkPassOptionInfo option_table[] = {
#define X(key, pass, type, min, max, words, help) {key, pass, type, min, max, words, help},
    AMK_PASS_OPTIONS(X)
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

size_t amk_pass_option_count(void) {
  return sizeof option_table / sizeof option_table[0];
}

const AmkPassOptionInfo *amk_pass_option_at(size_t i) {
  return i < amk_pass_option_count() ? &option_table[i] : NULL;
}

const AmkPassOptionInfo *amk_pass_option_lookup(const char *key) {
  for (size_t i = 0; i < amk_pass_option_count(); i++)
    if (strcmp(option_table[i].key, key) == 0)
      return &option_table[i];
  return NULL;
}
