/* The tools' command-line convention: flags, values and @file response
 * files (include/amk/cli.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amk/cli.h"
#include "amk/fileio.h"

enum { MAX_RESPONSE_DEPTH = 16 };

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

typedef struct {
  char **argv;
  int argc, cap;
  char **owned;
  size_t n_owned, cap_owned;
} Building;

static void push_arg(Building *b, char *arg) {
  if (b->argc + 1 >= b->cap) {
    b->cap = b->cap ? b->cap * 2 : 16;
    b->argv = amk_xrealloc(b->argv, (size_t)b->cap * sizeof *b->argv);
  }
  b->argv[b->argc++] = arg;
  b->argv[b->argc] = NULL;
}

static void push_owned(Building *b, char *word) {
  if (b->n_owned == b->cap_owned) {
    b->cap_owned = b->cap_owned ? b->cap_owned * 2 : 16;
    b->owned = amk_xrealloc(b->owned, b->cap_owned * sizeof *b->owned);
  }
  b->owned[b->n_owned++] = word;
}

static bool expand_arg(Building *b, char *arg, int depth, AmkDiagEngine *diag);

/* Splits a response file's text into words and expands each. */
static bool expand_file(Building *b, const char *path, int depth, AmkDiagEngine *diag) {
  if (depth >= MAX_RESPONSE_DEPTH) {
    amk_error(diag, no_loc(), "response file '%s' is nested more than %d deep (does it "
              "name itself?)", path, MAX_RESPONSE_DEPTH);
    return false;
  }
  size_t len = 0;
  char *text = amk_read_file(path, &len, diag);
  if (!text)
    return false;
  char *word = amk_xmalloc(len + 1);
  size_t i = 0;
  bool ok = true;
  while (ok) {
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
      i++;
    if (i >= len)
      break;
    size_t n = 0;
    char quote = 0;
    while (i < len) {
      char ch = text[i];
      if (quote) {
        if (ch == quote) {
          quote = 0;
          i++;
        } else if (ch == '\\' && quote == '"' && i + 1 < len) {
          word[n++] = text[i + 1];
          i += 2;
        } else {
          word[n++] = ch;
          i++;
        }
      } else if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
        break;
      } else if (ch == '\'' || ch == '"') {
        quote = ch;
        i++;
      } else if (ch == '\\' && i + 1 < len) {
        word[n++] = text[i + 1];
        i += 2;
      } else {
        word[n++] = ch;
        i++;
      }
    }
    if (quote) {
      amk_error(diag, no_loc(), "response file '%s': a %s quote is not closed", path,
                quote == '"' ? "double" : "single");
      ok = false;
      break;
    }
    word[n] = '\0';
    char *copy = amk_xstrdup(word);
    push_owned(b, copy);
    ok = expand_arg(b, copy, depth + 1, diag);
  }
  free(word);
  free(text);
  return ok;
}

static bool expand_arg(Building *b, char *arg, int depth, AmkDiagEngine *diag) {
  if (arg[0] == '@' && arg[1])
    return expand_file(b, arg + 1, depth, diag);
  push_arg(b, arg);
  return true;
}

bool amk_cli_expand(AmkCliArgs *out, int argc, char **argv, AmkDiagEngine *diag) {
  Building b = {.cap = 16};
  b.argv = amk_xmalloc((size_t)b.cap * sizeof *b.argv);
  b.argv[0] = NULL;
  bool ok = true;
  for (int i = 0; i < argc && ok; i++) {
    if (i == 0)
      push_arg(&b, argv[0]); /* the program's name is never a response file */
    else
      ok = expand_arg(&b, argv[i], 0, diag);
  }
  *out = (AmkCliArgs){b.argc, b.argv, b.owned, b.n_owned};
  if (!ok)
    amk_cli_args_free(out);
  return ok;
}

void amk_cli_args_free(AmkCliArgs *a) {
  for (size_t i = 0; i < a->n_owned; i++)
    free(a->owned[i]);
  free(a->owned);
  free(a->argv);
  *a = (AmkCliArgs){0};
}

bool amk_cli_flag(const char *arg, AmkCliFlag *f) {
  if (arg[0] != '-' || arg[1] == '\0')
    return false;
  f->arg = arg;
  f->dashes = arg[1] == '-' ? 2 : 1;
  f->name = arg + f->dashes;
  const char *eq = strchr(f->name, '=');
  f->name_len = eq ? (size_t)(eq - f->name) : strlen(f->name);
  f->value = eq ? eq + 1 : NULL;
  return true;
}

bool amk_cli_is(const AmkCliFlag *f, const char *name) {
  return f->name_len == strlen(name) && strncmp(f->name, name, f->name_len) == 0;
}

const char *amk_cli_value(const AmkCliFlag *f, int argc, char **argv, int *i, const char *tool) {
  if (f->value)
    return f->value;
  if (*i + 1 >= argc) {
    fprintf(stderr, "%s: error: '%s' needs a value\n", tool, f->arg);
    return NULL;
  }
  return argv[++*i];
}
