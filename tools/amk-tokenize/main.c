/* amk-tokenize: encode and decode text with a HuggingFace tokenizer.json.
 *
 *   amk-tokenize --tokenizer T "some text"        ids, comma-separated
 *   amk-tokenize --tokenizer T --batch IN.json    ids and decoded text as JSON
 *   amk-tokenize --tokenizer T --decode 1,2,3     text
 *   amk-tokenize --tokenizer T --bench IN.json    encode speed on one core
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amk/cli.h"
#include "amk/fileio.h"
#include "amk/io.h"
#include "amk/json_strict.h"
#include "amk/strutil.h"
#include "amk/tokenizer.h"
#include "amk/version.h"

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

typedef struct {
  const char *tokenizer;
  const char *text;       /* encode this */
  const char *input;      /* encode this file's text */
  const char *batch;      /* JSON array of strings */
  const char *decode;     /* "1,2,3" */
  const char *bench;      /* JSON array of strings, timed */
  const char *output;     /* -o */
  long repeat;            /* --bench rounds */
  bool no_special, skip_special, tokens, info;
} Options;

static void print_help(FILE *out) {
  fputs(
      "OVERVIEW: encode and decode text with a HuggingFace tokenizer.json\n\n"
      "USAGE: amk-tokenize --tokenizer <file|dir> [options] [text]\n\n"
      "  The tokenizer is a tokenizer.json, or a model folder holding one (its\n"
      "  tokenizer_config.json and generation_config.json then give the BOS and\n"
      "  EOS ids that --info shows).\n\n"
      "WHAT TO DO (one of):\n"
      "  <text>                 Encode the text; print its ids, comma-separated,\n"
      "                         with the special tokens the model is given\n"
      "  --input <file>         Encode a file's text ('-': standard input)\n"
      "  --batch <in.json>      Encode each string of a JSON array; print a JSON\n"
      "                         array of {\"ids\", \"ids_with_special\", \"decoded\"}\n"
      "                         (decoded from ids), as tokenizers gives them\n"
      "  --decode <ids>         Decode comma-separated ids; print the text\n"
      "  --bench <in.json>      Time encoding each string of a JSON array (no\n"
      "                         special tokens) on one core; print MB/s\n"
      "  --info                 Print the vocabulary size, BOS and EOS ids\n\n"
      "OPTIONS:\n"
      "  --tokenizer <path>     The tokenizer.json file or its folder (required)\n"
      "  --no-special           Encode without the template's special tokens\n"
      "  --tokens               Encode: print one 'id<TAB>token' line per id\n"
      "  --skip-special         Decode: leave out special tokens\n"
      "  --repeat <n>           --bench: rounds, the best one is reported (default 5)\n"
      "  -o <file>              Write output to <file> (written only on success)\n"
      "  --version              Show the version\n"
      "  -h, --help             Show this help\n\n"
      "Exit status: 0 on success, 1 on any error.\n",
      out);
}

/* ---- command line ----------------------------------------------------------- */

static const char *const flags[] = {
    "tokenizer", "input", "batch", "decode", "bench", "info", "no-special",
    "tokens", "skip-special", "repeat", "o", "help", "version", NULL};

static void suggest_flag(const char *name, size_t len) {
  size_t n = 0;
  while (flags[n])
    n++;
  const char *best = amk_suggest(name, len, flags, n);
  if (best)
    fprintf(stderr, "amk-tokenize: did you mean '--%s'?\n", best);
}

/* Returns 0 to continue, 1 on error, 2 when the command is complete. */
static int parse_args(int argc, char **argv, Options *o) {
  o->repeat = 5;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (arg[0] != '-' || arg[1] == '\0') {
      if (o->text) {
        fprintf(stderr, "amk-tokenize: error: more than one text ('%s' and "
                "'%s'); quote the text as one argument\n", o->text, arg);
        return 1;
      }
      o->text = arg;
      continue;
    }
    if (strcmp(arg, "--") == 0) {
      /* Everything after is the text, even if it starts with '-'. */
      if (i + 1 < argc && !o->text)
        o->text = argv[++i];
      if (i + 1 < argc) {
        fprintf(stderr, "amk-tokenize: error: more than one text after '--'\n");
        return 1;
      }
      continue;
    }
    AmkCliFlag f; /* --name=value or --name value (include/amk/cli.h) */
    amk_cli_flag(arg, &f);
    const char *flag = f.name;
    size_t name_len = f.name_len;
    const char *value = f.value;
#define IS(s) amk_cli_is(&f, s)
    const char **text_flag = IS("tokenizer") ? &o->tokenizer
                             : IS("input")   ? &o->input
                             : IS("batch")   ? &o->batch
                             : IS("decode")  ? &o->decode
                             : IS("bench")   ? &o->bench
                             : IS("o")       ? &o->output
                                             : NULL;
    bool *switch_flag = IS("no-special")     ? &o->no_special
                        : IS("skip-special") ? &o->skip_special
                        : IS("tokens")       ? &o->tokens
                        : IS("info")         ? &o->info
                                             : NULL;
    if (IS("h") || IS("help")) {
      print_help(stdout);
      return 2;
    }
    if (IS("version")) {
      amk_version_print(stdout, "amk-tokenize");
      return 2;
    }
    if (switch_flag) {
      if (value) {
        fprintf(stderr, "amk-tokenize: error: '--%.*s' takes no value\n",
                (int)name_len, flag);
        return 1;
      }
      *switch_flag = true;
      continue;
    }
    if (!text_flag && !IS("repeat")) {
      fprintf(stderr, "amk-tokenize: error: unknown option '%s'\n", arg);
      suggest_flag(flag, name_len);
      fprintf(stderr, "amk-tokenize: run 'amk-tokenize --help' for the list "
              "of options\n");
      return 1;
    }
    if (!(value = amk_cli_value(&f, argc, argv, &i, "amk-tokenize")))
      return 1;
    if (text_flag) {
      *text_flag = value;
      continue;
    }
    char *end;
    errno = 0;
    o->repeat = strtol(value, &end, 10);
    if (errno || end == value || *end || o->repeat < 1 || o->repeat > 1000) {
      fprintf(stderr, "amk-tokenize: error: --repeat must be an integer in [1, "
              "1000], not '%s'\n", value);
      return 1;
    }
#undef IS
  }
  int actions = (o->text != NULL) + (o->input != NULL) + (o->batch != NULL) +
                (o->decode != NULL) + (o->bench != NULL) + o->info;
  if (!o->tokenizer) {
    fprintf(stderr, "amk-tokenize: error: no tokenizer given (--tokenizer "
            "<tokenizer.json or its folder>)\n");
    return 1;
  }
  if (actions != 1) {
    fprintf(stderr, "amk-tokenize: error: %s (a text, --input, --batch, "
            "--decode, --bench or --info)\n",
            actions ? "give one thing to do, not several" : "nothing to do");
    return 1;
  }
  return 0;
}

/* ---- encoding and decoding ------------------------------------------------------ */

static void put_ids(const AmkTokenIds *ids, AmkStrBuf *out) {
  for (size_t i = 0; i < ids->len; i++)
    amk_sb_printf(out, "%s%d", i ? "," : "", ids->ids[i]);
}

static bool encode_text(AmkTokenizer *t, const Options *o, const char *text,
                        size_t len, AmkStrBuf *out, AmkDiagEngine *diag) {
  AmkTokenIds ids = {0};
  bool ok = amk_tokenizer_encode(t, text, len, !o->no_special, &ids, diag);
  if (ok && o->tokens) {
    for (size_t i = 0; i < ids.len; i++) {
      amk_sb_printf(out, "%d\t", ids.ids[i]);
      const char *token = amk_tokenizer_token(t, ids.ids[i]);
      amk_write_json_string(token ? token : "", out);
      amk_sb_putc(out, '\n');
    }
  } else if (ok) {
    put_ids(&ids, out);
    amk_sb_putc(out, '\n');
  }
  amk_token_ids_free(&ids);
  return ok;
}

/* "1,2,3" (spaces allowed around the ids). */
static bool parse_ids(const char *list, AmkTokenIds *ids) {
  const char *p = list;
  while (*p == ' ')
    p++;
  if (*p == '\0')
    return true;
  for (;;) {
    char *end;
    errno = 0;
    long long id = strtoll(p, &end, 10);
    if (end == p || errno || id < INT32_MIN || id > INT32_MAX) {
      fprintf(stderr, "amk-tokenize: error: --decode: '%s' is not a "
              "comma-separated list of ids\n", list);
      return false;
    }
    if (ids->len == ids->cap) {
      ids->cap = ids->cap ? ids->cap * 2 : 64;
      ids->ids = realloc(ids->ids, ids->cap * sizeof *ids->ids);
      if (!ids->ids)
        abort();
    }
    ids->ids[ids->len++] = (int32_t)id;
    p = end;
    while (*p == ' ')
      p++;
    if (*p == '\0')
      return true;
    if (*p != ',') {
      fprintf(stderr, "amk-tokenize: error: --decode: '%s' is not a "
              "comma-separated list of ids\n", list);
      return false;
    }
    p++;
  }
}

static bool decode_ids(const AmkTokenizer *t, const Options *o, AmkStrBuf *out,
                       AmkDiagEngine *diag) {
  AmkTokenIds ids = {0};
  bool ok = parse_ids(o->decode, &ids) &&
            amk_tokenizer_decode(t, ids.ids, ids.len, o->skip_special, out, diag);
  if (ok)
    amk_sb_putc(out, '\n');
  amk_token_ids_free(&ids);
  return ok;
}

static void print_info(const AmkTokenizer *t, AmkStrBuf *out) {
  amk_sb_printf(out, "vocabulary: %zu ids\n", amk_tokenizer_vocab_size(t));
  int32_t bos = amk_tokenizer_bos_id(t);
  amk_sb_puts(out, "bos: ");
  if (bos < 0) {
    amk_sb_puts(out, "none");
  } else {
    amk_sb_printf(out, "%d ", bos);
    amk_write_json_string(amk_tokenizer_token(t, bos), out);
  }
  const int32_t *eos;
  size_t n = amk_tokenizer_eos_ids(t, &eos);
  amk_sb_puts(out, "\neos:");
  if (n == 0)
    amk_sb_puts(out, " none");
  for (size_t i = 0; i < n; i++) {
    amk_sb_printf(out, " %d ", eos[i]);
    amk_write_json_string(amk_tokenizer_token(t, eos[i]), out);
  }
  amk_sb_putc(out, '\n');
}

/* ---- JSON arrays of strings -------------------------------------------------------- */

/* Reads a JSON array of strings; NULL after reporting. */
static cJSON *read_strings(const char *path, AmkDiagEngine *diag) {
  size_t len;
  char *text = amk_read_file(path, &len, diag);
  if (!text)
    return NULL;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
  bool ok = root != NULL;
  if (!ok)
    amk_error(diag, no_loc(), "%s: not valid JSON (near byte %zu)", path,
              end ? (size_t)(end - text) : (size_t)0);
  ok = ok && amk_json_check_strict(path, text, len, end, root,
                                   AMK_JSON_TRAILING_WHITESPACE, diag);
  if (ok && !cJSON_IsArray(root)) {
    amk_error(diag, no_loc(), "%s: expected a JSON array of strings", path);
    ok = false;
  }
  size_t i = 0;
  for (const cJSON *item = ok ? root->child : NULL; item; item = item->next, i++)
    if (!cJSON_IsString(item)) {
      amk_error(diag, no_loc(), "%s: '[%zu]': expected a string", path, i);
      ok = false;
      break;
    }
  free(text);
  if (!ok) {
    cJSON_Delete(root);
    return NULL;
  }
  return root;
}

static void put_id_array(const AmkTokenIds *ids, AmkStrBuf *out) {
  amk_sb_putc(out, '[');
  for (size_t i = 0; i < ids->len; i++)
    amk_sb_printf(out, "%s%d", i ? ", " : "", ids->ids[i]);
  amk_sb_putc(out, ']');
}

static bool run_batch(AmkTokenizer *t, const Options *o, AmkStrBuf *out,
                      AmkDiagEngine *diag) {
  cJSON *root = read_strings(o->batch, diag);
  if (!root)
    return false;
  AmkTokenIds ids = {0}, with_special = {0};
  AmkStrBuf decoded;
  amk_sb_init(&decoded);
  bool ok = true;
  size_t i = 0;
  amk_sb_putc(out, '[');
  for (const cJSON *item = root->child; item && ok; item = item->next, i++) {
    const char *text = item->valuestring;
    size_t len = strlen(text);
    ids.len = with_special.len = decoded.len = 0;
    ok = amk_tokenizer_encode(t, text, len, false, &ids, diag) &&
         amk_tokenizer_encode(t, text, len, true, &with_special, diag) &&
         amk_tokenizer_decode(t, ids.ids, ids.len, false, &decoded, diag);
    if (!ok) {
      amk_note(diag, no_loc(), "in %s, string [%zu]", o->batch, i);
      break;
    }
    amk_sb_puts(out, i ? ",\n {\"ids\": " : "\n {\"ids\": ");
    put_id_array(&ids, out);
    amk_sb_puts(out, ", \"ids_with_special\": ");
    put_id_array(&with_special, out);
    amk_sb_puts(out, ", \"decoded\": ");
    amk_write_json_string_n(decoded.data ? decoded.data : "", decoded.len, out);
    amk_sb_putc(out, '}');
  }
  amk_sb_puts(out, i ? "\n]\n" : "]\n");
  amk_token_ids_free(&ids);
  amk_token_ids_free(&with_special);
  amk_sb_free(&decoded);
  cJSON_Delete(root);
  return ok;
}

/* The CPU time of this thread: the speed of one core, whatever else the
 * machine is running. */
static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The best of --repeat rounds: the first one also fills the word cache, as
 * a long-running encoder's would be. */
static bool run_bench(AmkTokenizer *t, const Options *o, AmkStrBuf *out,
                      AmkDiagEngine *diag) {
  cJSON *root = read_strings(o->bench, diag);
  if (!root)
    return false;
  size_t bytes = 0, strings = 0, n_ids = 0;
  for (const cJSON *item = root->child; item; item = item->next, strings++)
    bytes += strlen(item->valuestring);
  AmkTokenIds ids = {0};
  double best = -1;
  bool ok = true;
  for (long round = 0; round < o->repeat && ok; round++) {
    n_ids = 0;
    double start = cpu_seconds();
    for (const cJSON *item = root->child; item && ok; item = item->next) {
      ids.len = 0;
      ok = amk_tokenizer_encode(t, item->valuestring, strlen(item->valuestring),
                                false, &ids, diag);
      n_ids += ids.len;
    }
    double seconds = cpu_seconds() - start;
    if (best < 0 || seconds < best)
      best = seconds;
  }
  if (ok)
    amk_sb_printf(out, "encode: %zu strings, %zu bytes, %zu ids; best of %ld: "
                  "%.4f s of CPU, %.2f MB/s\n",
                  strings, bytes, n_ids, o->repeat, best,
                  best > 0 ? (double)bytes / 1e6 / best : 0.0);
  amk_token_ids_free(&ids);
  cJSON_Delete(root);
  return ok;
}

/* ---- main ------------------------------------------------------------------------------ */

static bool run(AmkTokenizer *t, const Options *o, AmkStrBuf *out,
                AmkDiagEngine *diag) {
  if (o->text)
    return encode_text(t, o, o->text, strlen(o->text), out, diag);
  if (o->input) {
    size_t len;
    char *text = amk_read_file(o->input, &len, diag);
    bool ok = text && encode_text(t, o, text, len, out, diag);
    free(text);
    return ok;
  }
  if (o->batch)
    return run_batch(t, o, out, diag);
  if (o->decode)
    return decode_ids(t, o, out, diag);
  if (o->bench)
    return run_bench(t, o, out, diag);
  print_info(t, out);
  return true;
}

int main(int argc, char **argv) {
  Options o = {0};
  int rc = parse_args(argc, argv, &o);
  if (rc)
    return rc == 2 ? 0 : 1;
  AmkDiagEngine *diag = amk_diag_new(stderr);
  amk_diag_set_source(diag, "amk-tokenize", NULL, 0);
  AmkTokenizer *t = amk_tokenizer_load(o.tokenizer, diag);
  AmkStrBuf out;
  amk_sb_init(&out);
  bool ok = t && run(t, &o, &out, diag);
  if (ok && amk_write_file_atomic(o.output ? o.output : "-", out.data ? out.data : "",
                                  out.len, diag) != 0)
    ok = false;
  amk_sb_free(&out);
  amk_tokenizer_free(t);
  amk_diag_free(diag);
  return ok ? 0 : 1;
}
