/* The tools' one command-line convention (support layer), as LLVM's tools
 * and llama.cpp take flags: `-flag` or `--flag`, a value after `=` or in the
 * next argument (`--max-seq=64` and `--max-seq 64`), and `@file` response
 * files whose words are read as arguments. */
#ifndef AMK_CLI_H
#define AMK_CLI_H

#include <stdbool.h>
#include <stddef.h>

#include "amk/diag.h"

/* The command line with every `@file` replaced by the file's words: split
 * on white space, with '...' and "..." quoting and backslash escapes, as
 * GNU tools read them; a word `@other` in a file is read in turn (at most
 * 16 deep). argv[argc] is NULL. */
typedef struct {
  int argc;
  char **argv;
  char **owned; /* the words read from files */
  size_t n_owned;
} AmkCliArgs;

/* False after reporting through diag (an unreadable file, an unterminated
 * quote, response files nested too deep); *out then holds nothing to free. */
bool amk_cli_expand(AmkCliArgs *out, int argc, char **argv, AmkDiagEngine *diag);
void amk_cli_args_free(AmkCliArgs *a);

/* One argument that is a flag: its dashes (1 or 2), its name, and the value
 * after '=' (NULL: none). */
typedef struct {
  const char *arg;  /* as given */
  int dashes;
  const char *name; /* points into arg, name_len bytes */
  size_t name_len;
  const char *value;
} AmkCliFlag;

/* False for an argument that is no flag ("-" or not starting with '-'). */
bool amk_cli_flag(const char *arg, AmkCliFlag *f);
/* True when the flag's name is `name`. */
bool amk_cli_is(const AmkCliFlag *f, const char *name);
/* The flag's value: after '=', else the next argument (*i moves past it).
 * NULL after printing "TOOL: error: 'FLAG' needs a value". */
const char *amk_cli_value(const AmkCliFlag *f, int argc, char **argv, int *i, const char *tool);

#endif
