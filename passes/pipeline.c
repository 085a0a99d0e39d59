/* The pass manager (include/amk/pipeline.h): parsing pipelines and option
 * values, running passes with verification, timing and print hooks. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>

#include "amk/io.h"
#include "amk/pipeline.h"
#include "amk/strutil.h"

static const AmkLoc no_loc = {0, 0};

/* A parsed value and the copy of the text it was parsed from. */
typedef struct {
  AmkOptionValue value;
  char *text;
} OwnedValue;

typedef struct {
  const AmkPassInfo *pass;
  bool has_value; /* `-pass=VALUE` */
  OwnedValue own;
} Step;

struct AmkPipeline {
  Step *steps;
  size_t n_steps, cap_steps;
  OwnedValue *options; /* --key=value, one per key */
  size_t n_options;
};

AmkPipeline *amk_pipeline_new(void) { return amk_xcalloc(1, sizeof(AmkPipeline)); }

void amk_pipeline_free(AmkPipeline *p) {
  if (!p)
    return;
  for (size_t i = 0; i < p->n_steps; i++)
    free(p->steps[i].own.text);
  for (size_t i = 0; i < p->n_options; i++)
    free(p->options[i].text);
  free(p->steps);
  free(p->options);
  free(p);
}

size_t amk_pipeline_size(const AmkPipeline *p) { return p->n_steps; }

const AmkPassInfo *amk_pipeline_pass_at(const AmkPipeline *p, size_t i) {
  return i < p->n_steps ? p->steps[i].pass : NULL;
}

bool amk_pipeline_transforms(const AmkPipeline *p) {
  for (size_t i = 0; i < p->n_steps; i++)
    if (!p->steps[i].pass->is_analysis)
      return true;
  return false;
}

char *amk_pipeline_text(const AmkPipeline *p) {
  AmkStrBuf sb;
  amk_sb_init(&sb);
  for (size_t i = 0; i < p->n_steps; i++) {
    amk_sb_printf(&sb, "%s%s", i ? "," : "", p->steps[i].pass->name);
    if (p->steps[i].has_value)
      amk_sb_printf(&sb, "=%s", p->steps[i].own.text);
  }
  return sb.data ? sb.data : amk_xstrdup("");
}

/* ---- option values ------------------------------------------------------- */

/* How errors name the option: "import: --max-seq" (the pass, then the
 * flag), or "-simulate-adversarial" for a pass's own `-pass=VALUE`. */
static void option_flag(const AmkPassOptionInfo *info, char *out, size_t size) {
  if (strcmp(info->key, info->pass) == 0)
    snprintf(out, size, "-%s", info->key);
  else
    snprintf(out, size, "%s: --%s", info->pass, info->key);
}

/* Word `index` of "a|b|c" into out; false past the last word. */
static bool enum_word(const char *words, size_t index, char *out, size_t size) {
  const char *w = words;
  for (size_t i = 0; i < index; i++) {
    w = strchr(w, '|');
    if (!w)
      return false;
    w++;
  }
  size_t n = strcspn(w, "|");
  snprintf(out, size, "%.*s", (int)n, w);
  return true;
}

/* "a, b or c" */
static void enum_list(const char *words, char *out, size_t size) {
  size_t n = 0, at = 0;
  char w[64];
  while (enum_word(words, n, w, sizeof w))
    n++;
  out[0] = '\0';
  for (size_t i = 0; i < n && at < size; i++) {
    enum_word(words, i, w, sizeof w);
    const char *sep = i == 0 ? "" : i + 1 == n ? " or " : ", ";
    at += (size_t)snprintf(out + at, size - at, "%s%s", sep, w);
  }
}

static bool parse_int(const char *text, int64_t *out) {
  /* strtoll would skip leading blanks and take a '+'; a value is digits. */
  const char *digits = text[0] == '-' ? text + 1 : text;
  if (!isdigit((unsigned char)digits[0]))
    return false;
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || *end)
    return false;
  *out = v;
  return true;
}

static bool parse_real(const char *text, double *out) {
  if (!text[0] || isspace((unsigned char)text[0]))
    return false;
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (errno || *end || !isfinite(v))
    return false;
  *out = v;
  return true;
}

bool amk_pass_option_parse(const AmkPassOptionInfo *info, const char *text,
                           AmkOptionValue *out, AmkDiagEngine *diag) {
  char flag[96];
  option_flag(info, flag, sizeof flag);
  *out = (AmkOptionValue){.info = info, .text = text};
  switch (info->type) {
  case AMK_OPTION_INT: {
    int64_t v;
    if (parse_int(text, &v) && (double)v >= info->min && (double)v <= info->max) {
      out->as.i = v;
      return true;
    }
    amk_error(diag, no_loc, "%s must be an integer in [%lld, %lld], not '%s'", flag,
              (long long)info->min, (long long)info->max, text);
    return false;
  }
  case AMK_OPTION_REAL: {
    double v;
    if (parse_real(text, &v) && v >= info->min && v <= info->max) {
      out->as.real = v;
      return true;
    }
    amk_error(diag, no_loc, "%s must be a number in [%g, %g], not '%s'", flag, info->min,
              info->max, text);
    return false;
  }
  case AMK_OPTION_ENUM: {
    char word[64];
    const char *candidates[16];
    char storage[16][64];
    size_t n = 0;
    for (; n < 16 && enum_word(info->words, n, word, sizeof word); n++) {
      if (strcasecmp(word, text) == 0) {
        out->as.word = n;
        return true;
      }
      memcpy(storage[n], word, sizeof word);
      candidates[n] = storage[n];
    }
    char list[256];
    enum_list(info->words, list, sizeof list);
    const char *hint = amk_suggest(text, strlen(text), candidates, n);
    if (hint)
      amk_error(diag, no_loc, "%s must be %s, not '%s'; did you mean '%s'?", flag, list, text,
                hint);
    else
      amk_error(diag, no_loc, "%s must be %s, not '%s'", flag, list, text);
    return false;
  }
  case AMK_OPTION_STRING:
    if (text[0]) {
      out->as.s = text;
      return true;
    }
    amk_error(diag, no_loc, "%s needs a value, not ''", flag);
    return false;
  }
  AMK_UNREACHABLE("option type");
}

/* Parses a copy of `text` into `slot`; on failure the slot is untouched. */
static bool parse_owned(const AmkPassOptionInfo *info, const char *text, OwnedValue *slot,
                        AmkDiagEngine *diag) {
  char *copy = amk_xstrdup(text);
  AmkOptionValue v;
  if (!amk_pass_option_parse(info, copy, &v, diag)) {
    free(copy);
    return false;
  }
  free(slot->text);
  slot->value = v;
  slot->text = copy;
  return true;
}

static const char *pass_name_at(size_t i) { return amk_pass_at(i)->name; }
static const char *option_key_at(size_t i) { return amk_pass_option_at(i)->key; }

/* "unknown WHAT 'PREFIXWORD'", ending "; did you mean 'PREFIXHINT'?" when
 * one of the registry's `count` names (name_at) is close to `word`. */
static void report_unknown(AmkDiagEngine *diag, const char *what, const char *prefix,
                           const char *word, size_t count, const char *(*name_at)(size_t)) {
  const char *names[64];
  size_t n = 0;
  for (; n < count && n < 64; n++)
    names[n] = name_at(n);
  const char *hint = amk_suggest(word, strlen(word), names, n);
  if (hint)
    amk_error(diag, no_loc, "unknown %s '%s%s'; did you mean '%s%s'?", what, prefix, word,
              prefix, hint);
  else
    amk_error(diag, no_loc, "unknown %s '%s%s'", what, prefix, word);
}

bool amk_pipeline_set_option(AmkPipeline *p, const char *key, const char *value,
                             AmkDiagEngine *diag) {
  const AmkPassOptionInfo *info = amk_pass_option_lookup(key);
  if (!info) {
    report_unknown(diag, "pass option", "--", key, amk_pass_option_count(), option_key_at);
    return false;
  }
  for (size_t i = 0; i < p->n_options; i++)
    if (p->options[i].value.info == info)
      return parse_owned(info, value, &p->options[i], diag);
  OwnedValue slot = {{0}, NULL};
  if (!parse_owned(info, value, &slot, diag))
    return false;
  p->options = amk_xrealloc(p->options, (p->n_options + 1) * sizeof *p->options);
  p->options[p->n_options++] = slot;
  return true;
}

bool amk_pipeline_check_options(const AmkPipeline *p, AmkDiagEngine *diag) {
  bool ok = true;
  for (size_t i = 0; i < p->n_options; i++) {
    const AmkPassOptionInfo *info = p->options[i].value.info;
    bool read = false;
    for (size_t s = 0; s < p->n_steps && !read; s++)
      read = strcmp(p->steps[s].pass->name, info->pass) == 0;
    if (!read) {
      amk_error(diag, no_loc,
                "--%s is read by pass '%s', which this pipeline does not run (add -%s, "
                "or leave --%s out)",
                info->key, info->pass, info->pass, info->key);
      ok = false;
    }
  }
  return ok;
}

/* ---- pipeline text ---------------------------------------------------------- */

static bool add_pass_n(AmkPipeline *p, const char *spec, size_t len, AmkDiagEngine *diag) {
  const char *eq = memchr(spec, '=', len);
  size_t name_len = eq ? (size_t)(eq - spec) : len;
  if (name_len == 0) {
    amk_error(diag, no_loc, "pipeline element '%.*s' names no pass", (int)len, spec);
    return false;
  }
  char *name = amk_xmalloc(name_len + 1);
  memcpy(name, spec, name_len);
  name[name_len] = '\0';
  const AmkPassInfo *pass = amk_pass_lookup(name);
  if (!pass) {
    report_unknown(diag, "pass", "", name, amk_pass_count(), pass_name_at);
    free(name);
    return false;
  }
  free(name);
  Step step = {pass, false, {{0}, NULL}};
  if (eq) {
    const AmkPassOptionInfo *own = amk_pass_option_lookup(pass->name);
    if (!own || strcmp(own->pass, pass->name) != 0) {
      amk_error(diag, no_loc, "pass '%s' takes no value (given '%.*s')", pass->name, (int)len,
                spec);
      return false;
    }
    size_t value_len = len - name_len - 1;
    char *value = amk_xmalloc(value_len + 1);
    memcpy(value, eq + 1, value_len);
    value[value_len] = '\0';
    bool ok = parse_owned(own, value, &step.own, diag);
    free(value);
    if (!ok)
      return false;
    step.has_value = true;
  }
  if (p->n_steps == p->cap_steps) {
    p->cap_steps = p->cap_steps ? 2 * p->cap_steps : 8;
    p->steps = amk_xrealloc(p->steps, p->cap_steps * sizeof *p->steps);
  }
  p->steps[p->n_steps++] = step;
  return true;
}

bool amk_pipeline_add_pass(AmkPipeline *p, const char *spec, AmkDiagEngine *diag) {
  return add_pass_n(p, spec, strlen(spec), diag);
}

bool amk_pipeline_parse(AmkPipeline *p, const char *text, AmkDiagEngine *diag) {
  size_t first = p->n_steps;
  if (!text[0])
    return true;
  size_t element = 1;
  for (const char *at = text;; element++) {
    size_t len = strcspn(at, ",");
    bool ok;
    if (len == 0) {
      amk_error(diag, no_loc, "pipeline '%s': element %zu is empty", text, element);
      ok = false;
    } else {
      ok = add_pass_n(p, at, len, diag);
    }
    if (!ok) { /* all of the list or none of it */
      for (size_t i = first; i < p->n_steps; i++)
        free(p->steps[i].own.text);
      p->n_steps = first;
      return false;
    }
    if (!at[len])
      return true;
    at += len + 1;
  }
}

/* ---- timing ---------------------------------------------------------------- */

typedef struct {
  char *name;
  double wall, user;
} Stage;

struct AmkTimings {
  Stage *stages;
  size_t n;
};

AmkClock amk_clock_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (AmkClock){(double)ts.tv_sec + (double)ts.tv_nsec * 1e-9,
                    (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6};
}

AmkTimings *amk_timings_new(void) { return amk_xcalloc(1, sizeof(AmkTimings)); }

void amk_timings_free(AmkTimings *t) {
  if (!t)
    return;
  for (size_t i = 0; i < t->n; i++)
    free(t->stages[i].name);
  free(t->stages);
  free(t);
}

void amk_timings_add(AmkTimings *t, const char *name, double wall, double user) {
  if (!t)
    return;
  for (size_t i = 0; i < t->n; i++)
    if (strcmp(t->stages[i].name, name) == 0) {
      t->stages[i].wall += wall;
      t->stages[i].user += user;
      return;
    }
  t->stages = amk_xrealloc(t->stages, (t->n + 1) * sizeof *t->stages);
  t->stages[t->n++] = (Stage){amk_xstrdup(name), wall, user};
}

void amk_timings_add_since(AmkTimings *t, const char *name, AmkClock start) {
  if (!t)
    return;
  AmkClock now = amk_clock_now();
  amk_timings_add(t, name, now.wall - start.wall, now.user - start.user);
}

size_t amk_timings_count(const AmkTimings *t) { return t ? t->n : 0; }

const char *amk_timings_at(const AmkTimings *t, size_t i, double *wall, double *user) {
  if (!t || i >= t->n)
    return NULL;
  if (wall)
    *wall = t->stages[i].wall;
  if (user)
    *user = t->stages[i].user;
  return t->stages[i].name;
}

/* LLVM's -time-passes table: user (CPU) and wall time per stage, each with
 * its share of the total. */
void amk_timings_print(const AmkTimings *t, FILE *out) {
  double wall = 0, user = 0;
  for (size_t i = 0; i < amk_timings_count(t); i++) {
    wall += t->stages[i].wall;
    user += t->stages[i].user;
  }
  fputs("===--- Pass execution timing report ---===\n", out);
  fprintf(out, "  Total Execution Time: %.4f seconds (%.4f wall clock)\n\n", user, wall);
  fputs("   ---User Time---   --Wall Time--   --- Name ---\n", out);
  for (size_t i = 0; i < amk_timings_count(t); i++)
    fprintf(out, "   %.4f (%5.1f%%)   %.4f (%5.1f%%)  %s\n", t->stages[i].user,
            user > 0 ? 100.0 * t->stages[i].user / user : 0.0, t->stages[i].wall,
            wall > 0 ? 100.0 * t->stages[i].wall / wall : 0.0, t->stages[i].name);
  fprintf(out, "   %.4f (100.0%%)   %.4f (100.0%%)  Total\n", user, wall);
}

/* ---- running --------------------------------------------------------------- */

static char *module_text(const AmkModule *m) {
  AmkStrBuf sb;
  amk_sb_init(&sb);
  amk_print_text(m, &sb);
  return sb.data ? sb.data : amk_xstrdup("");
}

static bool names(const char *selected, const AmkPassInfo *pass) {
  return selected && strcmp(selected, pass->name) == 0;
}

AmkPipelineResult amk_pipeline_run(const AmkPipeline *p, AmkModule *m, AmkDiagEngine *diag,
                                   const AmkPipelineRunOptions *opt) {
  AmkPipelineRunOptions defaults = {0};
  if (!opt)
    opt = &defaults;
  AmkPipelineResult result = {AMK_PIPELINE_OK, NULL, 0};
  /* Each pass sees the pipeline's options and then its own `-pass=VALUE`,
   * which wins (amk_pass_option_* read the last value for a key). */
  AmkOptionValue *values = amk_xmalloc((p->n_options + 1) * sizeof *values);
  for (size_t i = 0; i < p->n_options; i++)
    values[i] = p->options[i].value;
  for (size_t s = 0; s < p->n_steps; s++) {
    const Step *step = &p->steps[s];
    const AmkPassInfo *pass = step->pass;
    if (opt->before_pass && (opt->print_before_all || names(opt->print_before, pass)))
      opt->before_pass(opt->user, pass, m);
    char *before = opt->print_changed && opt->changed ? module_text(m) : NULL;
    size_t n_values = p->n_options;
    if (step->has_value)
      values[n_values++] = step->own.value;
    AmkPassContext ctx = {diag, values, n_values, opt->stats};
    AmkClock start = amk_clock_now();
    bool ok = pass->run(m, &ctx);
    amk_timings_add_since(opt->timings, pass->name, start);
    result.passes_run++;
    if (!ok) {
      result.status = AMK_PIPELINE_PASS_FAILED;
    } else if (opt->verify_each && !pass->is_analysis) {
      start = amk_clock_now();
      ok = amk_verify_module(m, diag);
      amk_timings_add_since(opt->timings, "verify (each)", start);
      if (!ok)
        result.status = AMK_PIPELINE_VERIFY_FAILED;
    }
    if (opt->after_pass && (opt->print_after_all || names(opt->print_after, pass)))
      opt->after_pass(opt->user, pass, m, !ok);
    if (before) {
      char *after = module_text(m);
      opt->changed(opt->user, pass, before, after, strcmp(before, after) != 0);
      free(before);
      free(after);
    }
    if (!ok) {
      result.failed_pass = pass;
      break;
    }
  }
  free(values);
  return result;
}
