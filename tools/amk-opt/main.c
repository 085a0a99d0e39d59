/* amk-opt: the opt-like driver.
 *
 *   amk-opt [options] [input]
 *
 * Reads a module (.amkir text or the reference's JSON), runs the passes named
 * on the command line in the order given, and writes the result. Every flag
 * that names a pass comes from the pass registry (include/amk/pass.h).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "amk/backend.h"
#include "amk/cli.h"
#include "amk/io.h"
#include "amk/pass.h"
#include "amk/tp.h"
#include "amk/validate.h"
#include "amk/path.h"
#include "amk/pipeline.h"
#include "amk/plan.h"
#include "amk/strutil.h"
#include "amk/version.h"

extern char **environ;
#include "amk/weights.h"

typedef enum { FORMAT_AUTO, FORMAT_AMKIR, FORMAT_JSON } InputFormat;
typedef enum { EMIT_AMKIR, EMIT_JSON, EMIT_DOT, EMIT_CUDA, EMIT_CUBIN, EMIT_GANTT } EmitKind;
/* -print-changed[=diff|quiet|diff-quiet]: the whole module or a unified
 * diff after each pass that changed it; quiet leaves out the passes that
 * changed nothing. */
typedef enum { CHANGED_NONE, CHANGED_FULL, CHANGED_DIFF } PrintChanged;
typedef enum { COLOR_AUTO, COLOR_ALWAYS, COLOR_NEVER } ColorMode;

typedef struct {
  const char *input;
  const char *output;
  InputFormat format;
  EmitKind emit;
  bool emit_given;
  const char *arch; /* --arch for --emit=cubin */
  const char *emit_weights; /* --emit-weights DIR */
  AmkPipeline *pipeline; /* the passes and their options, parsed once */
  const char *print_before, *print_after;
  bool print_before_all, print_after_all;
  PrintChanged print_changed;
  bool print_changed_quiet;
  bool diff_failed; /* -print-changed=diff could not run diff: the run fails */
  ColorMode color;
  bool verify_each, disable_verify, disable_output;
  bool time_passes, stats, split_input_file, verify_diagnostics;
} DriverOptions;

/* ---- help ------------------------------------------------------------------ */

static void print_help(FILE *out) {
  fputs("OVERVIEW: AMK megakernel schedule optimizer and validator\n\n"
        "USAGE: amk-opt [options] [input]\n\n"
        "  input is an .amkir text file, a .json program in the reference's\n"
        "  on-disk format, or '-' for standard input (the default).\n\n"
        "GENERAL OPTIONS:\n"
        "  -o <file>              Write output to <file> (written only on success)\n"
        "  -S                     Write text (the default; accepted as opt takes it)\n"
        "  @<file>                Read more arguments from <file> (a response file)\n"
        "  --color[=<auto|always|never>]  Colour diagnostics (default auto: when\n"
        "                         stderr is a terminal; the color pass is -color or\n"
        "                         -passes=color)\n"
        "  -x <amkir|json>        Input format (default: by extension; stdin is sniffed)\n"
        "  --emit=<amkir|json|dot|cuda|cubin|gantt>  Output form (default amkir);\n"
        "                         cuda: the generated megakernel source; cubin: that\n"
        "                         source compiled by NVRTC (needs -o; no GPU needed);\n"
        "                         gantt: the SM timeline sm-assign predicts, as the\n"
        "                         Chrome trace amk-run --trace writes for a launch\n"
        "  --arch=<sm_XY>         GPU architecture for --emit=cubin (default sm_90)\n"
        "  --emit-weights=<dir>   After the passes, write the program's weights as\n"
        "                         <dir>/model.safetensors (quantized weights as they\n"
        "                         will run: no re-quantizing at load) and make the\n"
        "                         program load them from <dir>\n"
        "  -passes=<p1,p2,...>    Run these passes in order (same as -p1 -p2 ...)\n"
        "  -default-pipeline      Run the default pipeline, as amk-run compiles a model\n"
        "                         folder (" AMK_DEFAULT_PIPELINE ")\n"
        "  -disable-verify        Do not verify the input after parsing\n"
        "  -verify-each           Verify the module after every pass\n"
        "  -disable-output        Do not write the module\n"
        "  -print-before=<pass>   Print the module before <pass> (to stderr)\n"
        "  -print-after=<pass>    Print the module after <pass> (to stderr)\n"
        "  -print-before-all      Print the module before every pass\n"
        "  -print-after-all       Print the module after every pass\n"
        "  -print-changed[=<diff|quiet|diff-quiet>]  Print the module after each\n"
        "                         pass that changed it; diff: as a unified diff (by\n"
        "                         the system's diff -u); quiet: nothing for passes\n"
        "                         that changed nothing\n"
        "  -time-passes           Report the user and wall time of each stage\n"
        "  -stats                 Print the statistics passes collected\n"
        "  -split-input-file      Treat '; -----' lines as separating independent inputs\n"
        "  -verify-diagnostics    Check diagnostics against '; expected-error {{...}}'\n"
        "  --print-passes         List the available passes\n"
        "  --version              Print the project, IR and ABI versions\n"
        "  -h, --help             Show this help\n\n"
        "PASSES (run in the order given):\n",
        out);
  for (size_t i = 0; i < amk_pass_count(); i++) {
    const AmkPassInfo *p = amk_pass_at(i);
    fprintf(out, "  -%-22s %s\n", p->name, p->description);
  }
  fputs("\nPASS OPTIONS:\n", out);
  for (size_t i = 0; i < amk_pass_option_count(); i++) {
    const AmkPassOptionInfo *opt = amk_pass_option_at(i);
    if (strcmp(opt->key, opt->pass) != 0) /* -pass=VALUE is in the pass's line */
      fprintf(out, "  --%-21s %s (%s)\n", opt->key, opt->help, opt->pass);
  }
  fputs("\nExit status: 0 on success, 1 on any input or pass error.\n", out);
}

static void print_passes(FILE *out) {
  for (size_t i = 0; i < amk_pass_count(); i++) {
    const AmkPassInfo *p = amk_pass_at(i);
    fprintf(out, "%s%s - %s\n", p->name, p->is_analysis ? " (analysis)" : "",
            p->description);
  }
}

/* True when `program` is an executable file in a folder of $PATH. */
static bool on_path(const char *program) {
  const char *path = getenv("PATH");
  if (!path)
    return false;
  for (const char *p = path;;) {
    const char *colon = strchr(p, ':');
    size_t n = colon ? (size_t)(colon - p) : strlen(p);
    char full[4096];
    if (snprintf(full, sizeof full, "%.*s/%s", (int)n, n ? p : ".", program) <
            (int)sizeof full &&
        access(full, X_OK) == 0)
      return true;
    if (!colon)
      return false;
    p = colon + 1;
  }
}

/* ---- command line --------------------------------------------------------- */

static const char *const driver_flags[] = {
    "o", "x", "emit", "arch", "emit-weights", "passes", "default-pipeline", "disable-verify", "verify-each", "disable-output",
    "print-before", "print-after", "print-before-all", "print-after-all",
    "print-changed", "time-passes", "stats", "split-input-file",
    "verify-diagnostics", "print-passes", "version", "help", "S", "color", NULL};

static void suggest_flag(const char *name) {
  size_t n_flags = 0;
  while (driver_flags[n_flags])
    n_flags++;
  size_t n = n_flags + amk_pass_count() + amk_pass_option_count();
  const char **candidates = amk_xmalloc(n * sizeof *candidates);
  memcpy(candidates, driver_flags, n_flags * sizeof *candidates);
  n = n_flags;
  for (size_t i = 0; i < amk_pass_count(); i++)
    candidates[n++] = amk_pass_at(i)->name;
  for (size_t i = 0; i < amk_pass_option_count(); i++)
    candidates[n++] = amk_pass_option_at(i)->key;
  const char *best = amk_suggest(name, strlen(name), candidates, n);
  if (best)
    fprintf(stderr, "amk-opt: did you mean '-%s'?\n", best);
  free(candidates);
}

/* A flag that only switches something on (`on`), or that keeps its value as
 * given (`text`). */
typedef struct {
  const char *name;
  bool *on;
  const char **text;
} PlainFlag;

/* Returns 0 to continue, 1 on error, 2 when the command is complete (help). */
static int parse_args(int argc, char **argv, DriverOptions *o, AmkDiagEngine *diag) {
  o->pipeline = amk_pipeline_new();
  const PlainFlag plain[] = {
      {"o", NULL, &o->output},
      {"arch", NULL, &o->arch},
      {"emit-weights", NULL, &o->emit_weights},
      {"disable-verify", &o->disable_verify, NULL},
      {"verify-each", &o->verify_each, NULL},
      {"disable-output", &o->disable_output, NULL},
      {"print-before", NULL, &o->print_before},
      {"print-after", NULL, &o->print_after},
      {"print-before-all", &o->print_before_all, NULL},
      {"print-after-all", &o->print_after_all, NULL},
      {"time-passes", &o->time_passes, NULL},
      {"stats", &o->stats, NULL},
      {"split-input-file", &o->split_input_file, NULL},
      {"verify-diagnostics", &o->verify_diagnostics, NULL}};
  const size_t n_plain = sizeof plain / sizeof plain[0];
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    AmkCliFlag f;
    if (!amk_cli_flag(arg, &f)) {
      if (o->input) {
        fprintf(stderr, "amk-opt: error: more than one input file ('%s' and '%s')\n",
                o->input, arg);
        return 1;
      }
      o->input = arg;
      continue;
    }
    const char *flag = f.name;
    size_t name_len = f.name_len;
    const char *value = f.value;
#define IS(s) amk_cli_is(&f, s)
#define NEED_VALUE()                                                           \
  do {                                                                         \
    if (!(value = amk_cli_value(&f, argc, argv, &i, "amk-opt")))               \
      return 1;                                                                \
  } while (0)
    /* --color (two dashes) is the diagnostics' colour, -color the pass. */
    if (IS("color") && f.dashes == 2) {
      if (!value || strcmp(value, "always") == 0)
        o->color = COLOR_ALWAYS;
      else if (strcmp(value, "auto") == 0)
        o->color = COLOR_AUTO;
      else if (strcmp(value, "never") == 0)
        o->color = COLOR_NEVER;
      else {
        fprintf(stderr, "amk-opt: error: --color takes auto, always or never, not '%s' (the "
                        "color pass is -color or -passes=color)\n", value);
        return 1;
      }
      continue;
    }
    if (IS("S")) {
      if (value) {
        fprintf(stderr, "amk-opt: error: '-S' takes no value\n");
        return 1;
      }
      continue; /* text is what amk-opt writes unless --emit says otherwise */
    }
    size_t k = 0;
    while (k < n_plain && !IS(plain[k].name))
      k++;
    if (k < n_plain) {
      if (plain[k].on) {
        *plain[k].on = true;
      } else {
        NEED_VALUE();
        *plain[k].text = value;
      }
    } else if (IS("h") || IS("help")) {
      print_help(stdout);
      return 2;
    } else if (IS("print-passes")) {
      print_passes(stdout);
      return 2;
    } else if (IS("version")) {
      amk_version_print(stdout, "amk-opt");
      return 2;
    } else if (IS("x")) {
      NEED_VALUE();
      if (strcmp(value, "amkir") == 0)
        o->format = FORMAT_AMKIR;
      else if (strcmp(value, "json") == 0)
        o->format = FORMAT_JSON;
      else {
        fprintf(stderr, "amk-opt: error: unknown input format '%s' (expected amkir or json)\n",
                value);
        return 1;
      }
    } else if (IS("emit")) {
      NEED_VALUE();
      o->emit_given = true;
      if (strcmp(value, "amkir") == 0)
        o->emit = EMIT_AMKIR;
      else if (strcmp(value, "json") == 0)
        o->emit = EMIT_JSON;
      else if (strcmp(value, "dot") == 0)
        o->emit = EMIT_DOT;
      else if (strcmp(value, "cuda") == 0)
        o->emit = EMIT_CUDA;
      else if (strcmp(value, "cubin") == 0)
        o->emit = EMIT_CUBIN;
      else if (strcmp(value, "gantt") == 0)
        o->emit = EMIT_GANTT;
      else {
        fprintf(stderr,
                "amk-opt: error: unknown --emit kind '%s' (expected amkir, json, dot, cuda, "
                "cubin or gantt)\n",
                value);
        return 1;
      }
    } else if (IS("passes")) {
      NEED_VALUE();
      if (!amk_pipeline_parse(o->pipeline, value, diag))
        return 1;
    } else if (IS("default-pipeline")) {
      if (!amk_pipeline_parse(o->pipeline, AMK_DEFAULT_PIPELINE, diag))
        return 1;
    } else if (IS("print-changed")) {
      bool diff = value && (strcmp(value, "diff") == 0 || strcmp(value, "diff-quiet") == 0);
      bool quiet = value && (strcmp(value, "quiet") == 0 || strcmp(value, "diff-quiet") == 0);
      if (value && !diff && !quiet) {
        fprintf(stderr, "amk-opt: error: -print-changed takes no value or one of diff, quiet, "
                        "diff-quiet, not '%s'\n", value);
        return 1;
      }
      o->print_changed = diff ? CHANGED_DIFF : CHANGED_FULL;
      o->print_changed_quiet = quiet;
    } else {
      char name[128];
      if (name_len >= sizeof name) {
        fprintf(stderr, "amk-opt: error: unknown option '%s'\n", arg);
        return 1;
      }
      memcpy(name, flag, name_len);
      name[name_len] = '\0';
      if (amk_pass_lookup(name)) {
        if (!amk_pipeline_add_pass(o->pipeline, flag, diag))
          return 1;
        continue;
      }
      if (amk_pass_option_lookup(name)) {
        NEED_VALUE();
        if (!amk_pipeline_set_option(o->pipeline, name, value, diag))
          return 1;
      } else {
        fprintf(stderr, "amk-opt: error: unknown option '%s'\n", arg);
        suggest_flag(name);
        fprintf(stderr, "amk-opt: run 'amk-opt --help' for the list of options\n");
        return 1;
      }
    }
#undef IS
#undef NEED_VALUE
  }
  if (!o->input)
    o->input = "-";
  if (o->emit == EMIT_CUBIN && (!o->output || strcmp(o->output, "-") == 0)) {
    fprintf(stderr, "amk-opt: error: --emit=cubin writes a binary; give -o FILE\n");
    return 1;
  }
  if (o->emit_weights && (o->split_input_file || o->verify_diagnostics)) {
    fprintf(stderr, "amk-opt: error: --emit-weights writes the weights of one program; not "
                    "with -split-input-file or -verify-diagnostics\n");
    return 1;
  }
  if (o->print_changed == CHANGED_DIFF && !on_path("diff")) {
    fprintf(stderr, "amk-opt: error: -print-changed=diff shows changes with the system's "
                    "'diff -u', and there is no 'diff' on PATH (install diffutils)\n");
    return 1;
  }
  if (o->arch && o->emit != EMIT_CUBIN) {
    fprintf(stderr, "amk-opt: error: --arch applies to --emit=cubin\n");
    return 1;
  }
  if (!amk_pipeline_check_options(o->pipeline, diag))
    return 1;
  for (int k = 0; k < 2; k++) {
    const char *p = k ? o->print_after : o->print_before;
    if (p && !amk_pass_lookup(p)) {
      fprintf(stderr, "amk-opt: error: -print-%s names unknown pass '%s'\n",
              k ? "after" : "before", p);
      return 1;
    }
  }
  return 0;
}

/* ---- printing ------------------------------------------------------------ */

static void print_module_to(FILE *out, const AmkModule *m, const char *banner) {
  AmkStrBuf sb;
  amk_sb_init(&sb);
  amk_print_text(m, &sb);
  fprintf(out, "; *** %s ***\n%s", banner, sb.data ? sb.data : "");
  amk_sb_free(&sb);
}

static bool write_temp(char *name, const char *text) {
  int fd = mkstemp(name);
  if (fd < 0)
    return false;
  size_t left = strlen(text);
  bool ok = true;
  while (ok && left > 0) {
    ssize_t w = write(fd, text, left);
    ok = w > 0;
    if (ok)
      text += w, left -= (size_t)w;
  }
  return close(fd) == 0 && ok;
}

/* A unified diff of two printed modules on stderr, by the system's diff -u
 * (as LLVM's -print-changed=diff does): the texts go to temporary files.
 * False when diff could not be run. */
static bool print_diff(const char *pass, const char *before, const char *after) {
  const char *tmpdir = getenv("TMPDIR");
  if (!tmpdir || !*tmpdir)
    tmpdir = "/tmp";
  char a[4096], b[4096];
  snprintf(a, sizeof a, "%s/amk-opt-before-XXXXXX", tmpdir);
  snprintf(b, sizeof b, "%s/amk-opt-after-XXXXXX", tmpdir);
  bool wrote_a = write_temp(a, before), wrote_b = wrote_a && write_temp(b, after);
  bool ok = false;
  if (wrote_b) {
    char label_a[200], label_b[200];
    snprintf(label_a, sizeof label_a, "before %s", pass);
    snprintf(label_b, sizeof label_b, "after %s", pass);
    char *args[] = {"diff", "-u", "--label", label_a, "--label", label_b, a, b, NULL};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
    fflush(stderr);
    pid_t pid;
    int status = 0;
    if (posix_spawnp(&pid, "diff", &actions, NULL, args, environ) == 0 &&
        waitpid(pid, &status, 0) == pid && WIFEXITED(status))
      ok = WEXITSTATUS(status) <= 1; /* 0: same, 1: different, else trouble */
    posix_spawn_file_actions_destroy(&actions);
  }
  if (wrote_a)
    unlink(a);
  if (wrote_b)
    unlink(b);
  return ok;
}

/* ---- -verify-diagnostics ---------------------------------------------------- */

typedef struct {
  AmkSeverity severity;
  uint32_t line; /* 0: @unknown */
  char *text;
  uint32_t comment_line;
  bool matched;
} Expectation;

/* Collects `expected-<severity>[@+N|@-N|@N|@unknown] {{text}}` comments. */
static Expectation *collect_expectations(const char *text, size_t len, size_t *count,
                                         const char *file) {
  Expectation *list = NULL;
  size_t n = 0;
  uint32_t line = 1;
  for (size_t i = 0; i < len; i++) {
    if (text[i] == '\n') {
      line++;
      continue;
    }
    if (strncmp(text + i, "expected-", 9) != 0)
      continue;
    const char *p = text + i + 9;
    AmkSeverity sev;
    size_t wl;
    if (strncmp(p, "error", 5) == 0)
      sev = AMK_SEVERITY_ERROR, wl = 5;
    else if (strncmp(p, "warning", 7) == 0)
      sev = AMK_SEVERITY_WARNING, wl = 7;
    else if (strncmp(p, "note", 4) == 0)
      sev = AMK_SEVERITY_NOTE, wl = 4;
    else if (strncmp(p, "remark", 6) == 0)
      sev = AMK_SEVERITY_REMARK, wl = 6;
    else
      continue;
    p += wl;
    uint32_t target = line;
    if (*p == '@') {
      p++;
      if (strncmp(p, "unknown", 7) == 0) {
        target = 0;
        p += 7;
      } else {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) {
          fprintf(stderr, "%s:%u: error: bad line offset in expected-%s\n", file, line,
                  amk_severity_name(sev));
          continue;
        }
        target = (*p == '+' || *p == '-') ? (uint32_t)((long)line + v) : (uint32_t)v;
        p = end;
      }
    }
    while (*p == ' ' || *p == '\t')
      p++;
    /* Prose that merely mentions expected-error is not an expectation. */
    if (strncmp(p, "{{", 2) != 0)
      continue;
    const char *open = p + 2;
    const char *close = strstr(open, "}}");
    const char *eol = strchr(p, '\n');
    if (!close || (eol && close > eol)) {
      fprintf(stderr, "%s:%u: error: expected '{{...}}' after expected-%s\n", file, line,
              amk_severity_name(sev));
      continue;
    }
    list = amk_xrealloc(list, (n + 1) * sizeof *list);
    char *t = amk_xmalloc((size_t)(close - open) + 1);
    memcpy(t, open, (size_t)(close - open));
    t[close - open] = '\0';
    list[n++] = (Expectation){sev, target, t, line, false};
    i = (size_t)(close - text) + 1;
  }
  *count = n;
  return list;
}

/* Matches captured diagnostics against the expectations; prints every
 * mismatch. Returns true when they agree exactly. */
static bool check_expectations(const AmkDiagEngine *diag, const char *text, size_t len,
                               const char *file) {
  size_t n_expect;
  Expectation *expect = collect_expectations(text, len, &n_expect, file);
  bool ok = true;
  for (size_t d = 0; d < amk_diag_captured_count(diag); d++) {
    const AmkDiagnostic *dg = amk_diag_captured(diag, d);
    bool found = false;
    for (size_t e = 0; e < n_expect && !found; e++)
      if (!expect[e].matched && expect[e].severity == dg->severity &&
          expect[e].line == dg->loc.line && strstr(dg->message, expect[e].text))
        expect[e].matched = found = true;
    if (!found) {
      ok = false;
      if (dg->loc.line)
        fprintf(stderr, "%s:%u:%u: error: unexpected %s: %s\n", file, dg->loc.line,
                dg->loc.col, amk_severity_name(dg->severity), dg->message);
      else
        fprintf(stderr, "%s: error: unexpected %s: %s\n", file, amk_severity_name(dg->severity),
                dg->message);
    }
  }
  for (size_t e = 0; e < n_expect; e++) {
    if (!expect[e].matched) {
      ok = false;
      fprintf(stderr, "%s:%u: error: expected %s \"%s\" on line %u was not produced\n", file,
              expect[e].comment_line, amk_severity_name(expect[e].severity), expect[e].text,
              expect[e].line);
    }
    free(expect[e].text);
  }
  free(expect);
  return ok;
}

/* ---- the pipeline ----------------------------------------------------------- */

static InputFormat detect_format(const DriverOptions *o, const char *text) {
  if (o->format != FORMAT_AUTO)
    return o->format;
  size_t n = strlen(o->input);
  if (n >= 5 && strcmp(o->input + n - 5, ".json") == 0)
    return FORMAT_JSON;
  if (n >= 6 && strcmp(o->input + n - 6, ".amkir") == 0)
    return FORMAT_AMKIR;
  while (*text && isspace((unsigned char)*text))
    text++;
  return *text == '{' ? FORMAT_JSON : FORMAT_AMKIR;
}

/* The pipeline's print hooks: the library says when, these say how. */
static void print_before_pass(void *user, const AmkPassInfo *pass, const AmkModule *m) {
  char banner[160];
  snprintf(banner, sizeof banner, "IR Dump Before %s", pass->name);
  print_module_to(stderr, m, banner);
}

static void print_after_pass(void *user, const AmkPassInfo *pass, const AmkModule *m,
                             bool pass_failed) {
  char banner[160];
  snprintf(banner, sizeof banner, "IR Dump After %s%s", pass->name,
           pass_failed ? " (failed)" : "");
  print_module_to(stderr, m, banner);
}

static void print_changed(void *user, const AmkPassInfo *pass, const char *before,
                          const char *after, bool is_changed) {
  DriverOptions *o = user;
  if (!is_changed) {
    if (!o->print_changed_quiet)
      fprintf(stderr, "; *** IR Dump After %s omitted because no change ***\n", pass->name);
  } else if (o->print_changed == CHANGED_DIFF) {
    fprintf(stderr, "; *** IR Diff After %s ***\n", pass->name);
    if (!o->diff_failed && !print_diff(pass->name, before, after)) {
      fprintf(stderr, "amk-opt: error: -print-changed=diff could not run 'diff -u'\n");
      o->diff_failed = true;
    }
  } else {
    fprintf(stderr, "; *** IR Dump After %s ***\n%s", pass->name, after);
  }
}

/* The folder a program written to `output` names to find `dir`: "." when
 * the program lies in it, else its absolute path (or `dir` as given when
 * the program goes to standard output or a path cannot be resolved). */
static char *folder_from_output(const char *output, const char *dir) {
  char *abs_dir = amk_path_real(dir);
  if (!abs_dir || !output || strcmp(output, "-") == 0) {
    free(abs_dir);
    return amk_xstrdup(dir);
  }
  const char *slash = strrchr(output, '/');
  char *parent = slash ? amk_xstrdup(output) : amk_xstrdup(".");
  if (slash)
    parent[slash - output + (slash == output)] = '\0';
  char *abs_parent = amk_path_real(parent);
  free(parent);
  bool same = abs_parent && strcmp(abs_parent, abs_dir) == 0;
  free(abs_parent);
  if (same) {
    free(abs_dir);
    return amk_xstrdup(".");
  }
  return abs_dir;
}

/* --emit-weights: the program's weights, loaded from its model folder as
 * it would run, written to o->emit_weights; the module then names that
 * folder and its tensors. */
static bool emit_weights(const DriverOptions *o, AmkModule *m, AmkDiagEngine *diag) {
  char *from = amk_module_model_folder(m);
  char *real_from = from ? amk_path_real(from) : NULL, *real_to = amk_path_real(o->emit_weights);
  bool same = real_from && real_to && strcmp(real_from, real_to) == 0;
  free(real_from);
  free(real_to);
  if (same) {
    AmkLoc nowhere = {0, 0};
    amk_error(diag, nowhere,
              "--emit-weights '%s' is the folder the weights are read from; writing there "
              "would replace that checkpoint: give another folder",
              o->emit_weights);
    free(from);
    return false;
  }
  AmkPlan *plan = amk_plan_build(m, NULL, diag);
  AmkWeights *w = plan ? amk_weights_load(plan, from, diag) : NULL;
  static const char *const metadata[] = {"format", "pt", "producer", "amk-opt --emit-weights",
                                         NULL};
  bool ok = w && amk_weights_emit(m, plan, w, o->emit_weights, metadata, diag);
  if (ok) {
    char *folder = folder_from_output(o->output, o->emit_weights);
    m->model_dir = amk_arena_strdup(&m->arena, folder);
    free(folder);
  }
  amk_weights_free(w);
  amk_plan_free(plan);
  free(from);
  return ok;
}

/* --emit=gantt: the predicted schedule as a launch trace, written by the
 * code that writes amk-run --trace's, so the two open side by side. */
static bool emit_gantt(const AmkModule *m, AmkStrBuf *out, AmkDiagEngine *diag) {
  uint32_t n = m->n_tasks ? m->n_tasks : 1;
  double *arrive = amk_xmalloc(n * sizeof *arrive), *start = amk_xmalloc(n * sizeof *start),
         *end = amk_xmalloc(n * sizeof *end);
  bool ok = amk_sm_schedule_predict(m, arrive, start, end, diag);
  if (ok) {
    int32_t *block_of = amk_xmalloc(n * sizeof *block_of);
    amk_trace_t *stamps = amk_xmalloc(n * sizeof *stamps);
    /* ns, from 1 (a zero stamp means "never reached" in a trace). */
    for (uint32_t t = 0; t < m->n_tasks; t++) {
      block_of[t] = m->tasks[t].sm;
      stamps[t] = (amk_trace_t){.arrive = 1 + (uint64_t)(arrive[t] * 1e3 + 0.5),
                                .start = 1 + (uint64_t)(start[t] * 1e3 + 0.5),
                                .end = 1 + (uint64_t)(end[t] * 1e3 + 0.5)};
    }
    AmkTrace trace = {m, block_of, stamps};
    amk_trace_chrome_json(&trace, out);
    free(block_of);
    free(stamps);
  }
  free(arrive);
  free(start);
  free(end);
  return ok;
}

/* Runs one input (a whole file, or one -split-input-file chunk). Appends the
 * output to `out`; returns false on any error. */
static bool process(const DriverOptions *o, const char *text, size_t len,
                    AmkDiagEngine *diag, AmkStats *stats, AmkTimings *timings,
                    AmkStrBuf *out, bool *printed_module) {
  const char *name = strcmp(o->input, "-") == 0 ? "<stdin>" : o->input;
  AmkModule *m;
  AmkClock start = amk_clock_now();
  if (text) {
    amk_diag_set_source(diag, name, text, len);
    InputFormat format = detect_format(o, text);
    m = format == FORMAT_JSON ? amk_read_json(name, text, len, diag)
                              : amk_parse_text(name, text, len, diag);
    amk_timings_add_since(timings, "parse", start);
    if (!m)
      return false;
    if (!m->source_name)
      m->source_name = amk_arena_strdup(&m->arena, name);
  } else {
    /* A model folder: an empty module that -import fills. */
    amk_diag_set_source(diag, name, NULL, 0);
    m = amk_module_new();
    m->model_dir = amk_arena_strdup(&m->arena, o->input);
    m->source_name = m->model_dir;
  }
  bool ok = true;
  if (!o->disable_verify && text) {
    start = amk_clock_now();
    ok = amk_verify_module(m, diag);
    amk_timings_add_since(timings, "verify (input)", start);
  }
  if (ok) {
    AmkPipelineRunOptions run = {
        .verify_each = o->verify_each,
        .stats = stats,
        .timings = timings,
        .print_before = o->print_before,
        .print_after = o->print_after,
        .print_before_all = o->print_before_all,
        .print_after_all = o->print_after_all,
        .print_changed = o->print_changed != CHANGED_NONE,
        .user = (void *)o,
        .before_pass = print_before_pass,
        .after_pass = print_after_pass,
        .changed = print_changed,
    };
    AmkPipelineResult r = amk_pipeline_run(o->pipeline, m, diag, &run);
    ok = r.status == AMK_PIPELINE_OK && !o->diff_failed;
    if (r.status == AMK_PIPELINE_VERIFY_FAILED)
      fprintf(stderr, "amk-opt: error: the module is malformed after pass '%s'\n",
              r.failed_pass->name);
  }
  if (ok && o->emit_weights) {
    start = amk_clock_now();
    ok = emit_weights(o, m, diag);
    amk_timings_add_since(timings, "emit weights", start);
  }
  size_t n_passes = amk_pipeline_size(o->pipeline);
  bool want_output = !o->disable_output &&
                     (o->emit_given || o->output || amk_pipeline_transforms(o->pipeline) ||
                      n_passes == 0);
  if (ok && want_output) {
    start = amk_clock_now();
    switch (o->emit) {
    case EMIT_AMKIR:
      amk_print_text(m, out);
      break;
    case EMIT_JSON:
      amk_write_json(m, out);
      /* The reference writes no trailing newline; on a terminal or pipe of
       * several modules a newline keeps them apart. */
      if (o->split_input_file)
        amk_sb_putc(out, '\n');
      break;
    case EMIT_DOT:
      amk_print_dot(m, out);
      break;
    case EMIT_GANTT:
      ok = emit_gantt(m, out, diag);
      break;
    case EMIT_CUDA:
    case EMIT_CUBIN: {
      /* The same tuning (AMK_CUDA_* variables) as amk-run's launches. */
      AmkCodegen cg;
      AmkCodegenOptions cgo = {0};
      if (!amk_codegen_options_from_env(&cgo, diag)) {
        ok = false;
        break;
      }
      /* The launch-tagged transfers amk-run would plan: on a program the
       * plan takes (validated); codegen does not need one, so a program it
       * refuses is generated without them, as before. */
      AmkTransfers transfers = {0};
      AmkPlan *plan = NULL;
      if (cgo.tagged) {
        AmkDiagEngine *quiet = amk_diag_new(stderr);
        amk_diag_set_capture(quiet, 1);
        plan = amk_plan_build(m, NULL, quiet);
        amk_diag_free(quiet);
        if (plan) {
          amk_cuda_transfers_plan(plan, true, &transfers);
          cgo.transfers = &transfers;
        }
      }
      bool generated = amk_cuda_codegen(m, &cgo, &cg, diag);
      amk_cuda_transfers_free(&transfers);
      amk_plan_free(plan);
      if (!generated) {
        ok = false;
        break;
      }
      if (o->emit == EMIT_CUDA) {
        amk_sb_puts(out, cg.source);
      } else {
        void *cubin = NULL;
        size_t size = 0;
        ok = amk_nvrtc_compile(cg.source, o->arch ? o->arch : "sm_90", true, &cubin, &size,
                               diag);
        if (ok)
          amk_sb_putn(out, cubin, size);
        free(cubin);
      }
      amk_cuda_codegen_free(&cg);
      break;
    }
    }
    amk_timings_add_since(timings, "print", start);
    *printed_module = true;
  }
  amk_module_free(m);
  return ok;
}

/* Splits on lines that are exactly `; -----` or `// -----`. Each chunk is
 * passed as a copy of the whole text with everything outside the chunk blanked
 * (newlines kept), so line and column numbers stay those of the file. */
static size_t split_chunks(const char *text, size_t len, size_t **starts, size_t **ends) {
  size_t n = 0, cap = 8;
  *starts = amk_xmalloc(cap * sizeof **starts);
  *ends = amk_xmalloc(cap * sizeof **ends);
  size_t chunk_start = 0, i = 0;
  while (i <= len) {
    size_t eol = i;
    while (eol < len && text[eol] != '\n')
      eol++;
    size_t l = eol - i;
    bool sep = (l >= 7 && strncmp(text + i, "; -----", 7) == 0) ||
               (l >= 8 && strncmp(text + i, "// -----", 8) == 0);
    if (sep || eol >= len) {
      if (n == cap) {
        cap *= 2;
        *starts = amk_xrealloc(*starts, cap * sizeof **starts);
        *ends = amk_xrealloc(*ends, cap * sizeof **ends);
      }
      (*starts)[n] = chunk_start;
      (*ends)[n] = sep ? i : len;
      n++;
      chunk_start = eol + 1;
      if (!sep)
        break;
    }
    i = eol + 1;
  }
  return n;
}

static void free_options(DriverOptions *o) { amk_pipeline_free(o->pipeline); }

/* Runs the pipeline over the input named on the command line: a model
 * folder (for -import), or a file split into chunks when asked. */
static bool run_input(const DriverOptions *o, AmkDiagEngine *diag, AmkStats *stats,
                      AmkTimings *timings, AmkStrBuf *out, bool *printed) {
  struct stat st;
  if (strcmp(o->input, "-") != 0 && stat(o->input, &st) == 0 && S_ISDIR(st.st_mode)) {
    const AmkPassInfo *first = amk_pipeline_pass_at(o->pipeline, 0);
    if (!first || strcmp(first->name, "import") != 0) {
      fprintf(stderr, "amk-opt: error: '%s' is a directory; a HuggingFace model folder "
                      "must be read by -import, given as the first pass\n", o->input);
      return false;
    }
    return process(o, NULL, 0, diag, stats, timings, out, printed);
  }
  size_t len = 0;
  char *text = amk_read_file(o->input, &len, diag);
  if (!text)
    return false;
  if (memchr(text, '\0', len)) {
    fprintf(stderr, "%s: error: the input contains a NUL byte; it is not a text or JSON "
                    "program\n", o->input);
    free(text);
    return false;
  }
  if (!o->split_input_file && !o->verify_diagnostics) {
    bool ok = process(o, text, len, diag, stats, timings, out, printed);
    free(text);
    return ok;
  }
  size_t *starts, *ends;
  size_t n;
  if (o->split_input_file) {
    n = split_chunks(text, len, &starts, &ends);
  } else {
    n = 1;
    starts = amk_xmalloc(sizeof *starts), ends = amk_xmalloc(sizeof *ends);
    starts[0] = 0, ends[0] = len;
  }
  bool ok = true;
  for (size_t c = 0; c < n; c++) {
    char *chunk = amk_xmalloc(len + 1);
    for (size_t i = 0; i < len; i++)
      chunk[i] = (i >= starts[c] && i < ends[c]) || text[i] == '\n' ? text[i] : ' ';
    chunk[len] = '\0';
    if (o->verify_diagnostics)
      amk_diag_set_capture(diag, 1);
    bool chunk_printed = false;
    bool chunk_ok = process(o, chunk, len, diag, stats, timings, out, &chunk_printed);
    if (o->verify_diagnostics) {
      chunk_ok = check_expectations(diag, chunk, len, o->input);
      amk_diag_clear_captured(diag);
      amk_diag_set_capture(diag, 0);
    }
    amk_diag_set_source(diag, o->input, NULL, 0); /* the chunk is going away */
    ok = ok && chunk_ok;
    *printed |= chunk_printed;
    if (chunk_printed && c + 1 < n)
      amk_sb_puts(out, o->emit == EMIT_AMKIR ? "; -----\n" : "// -----\n");
    free(chunk);
  }
  free(starts);
  free(ends);
  free(text);
  return ok;
}

/* amk-opt --validate-tp RANK0 RANK1 ...: each rank program validated on
 * its own, then the group's cross-rank protocol (amk_validate_tp). */
static int validate_tp_group(int n, char **files) {
  if (n < 1 || n > AMK_TP_MAX_RANKS) {
    fprintf(stderr, "amk-opt: error: --validate-tp takes the group's rank programs, rank 0 "
                    "first (1 to %d files), not %d\n", AMK_TP_MAX_RANKS, n);
    return 1;
  }
  AmkModule *ranks[AMK_TP_MAX_RANKS] = {NULL};
  char *texts[AMK_TP_MAX_RANKS] = {NULL};
  AmkDiagEngine *diag = amk_diag_new(stderr);
  bool ok = true;
  for (int r = 0; r < n && ok; r++) {
    amk_diag_set_source(diag, files[r], NULL, 0);
    size_t len = 0;
    texts[r] = amk_read_file(files[r], &len, diag);
    if (!texts[r]) {
      ok = false;
      break;
    }
    amk_diag_set_source(diag, files[r], texts[r], len);
    size_t name_len = strlen(files[r]);
    bool json = name_len >= 5 && strcmp(files[r] + name_len - 5, ".json") == 0;
    ranks[r] = json ? amk_read_json(files[r], texts[r], len, diag)
                    : amk_parse_text(files[r], texts[r], len, diag);
    ok = ranks[r] && amk_verify_module(ranks[r], diag) &&
         amk_validate_module(ranks[r], diag, NULL, NULL);
    if (ranks[r] && !ranks[r]->source_name)
      ranks[r]->source_name = files[r];
  }
  if (ok) {
    amk_diag_set_source(diag, "amk-opt", NULL, 0);
    ok = amk_validate_tp((const AmkModule *const *)ranks, (uint32_t)n, diag);
  }
  if (ok)
    fprintf(stderr, "amk-opt: [VALID] tensor-parallel group of %d ranks\n", n);
  for (int r = 0; r < n; r++) {
    amk_module_free(ranks[r]);
    free(texts[r]);
  }
  amk_diag_free(diag);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "--validate-tp") == 0)
    return validate_tp_group(argc - 2, argv + 2);
  DriverOptions o = {0};
  /* Command-line errors (bad pass names and option values) read
   * "amk-opt: error: ..."; each input names itself later. */
  AmkDiagEngine *diag = amk_diag_new(stderr);
  amk_diag_set_source(diag, "amk-opt", NULL, 0);
  AmkCliArgs args;
  if (!amk_cli_expand(&args, argc, argv, diag)) {
    amk_diag_free(diag);
    return 1;
  }
  int rc = parse_args(args.argc, args.argv, &o, diag);
  if (rc) {
    free_options(&o);
    amk_diag_free(diag);
    amk_cli_args_free(&args);
    return rc == 2 ? 0 : 1;
  }
  amk_diag_set_color(diag, o.color == COLOR_ALWAYS ||
                               (o.color == COLOR_AUTO && amk_diag_stream_wants_color(stderr)));
  AmkStats *stats = o.stats ? amk_stats_new() : NULL;
  AmkTimings *timings = amk_timings_new();
  AmkStrBuf out;
  amk_sb_init(&out);
  bool printed = false;
  bool ok = run_input(&o, diag, stats, timings, &out, &printed);
  if (ok && printed && out.len &&
      amk_write_file_atomic(o.output ? o.output : "-", out.data, out.len, diag) != 0)
    ok = false;
  if (o.time_passes)
    amk_timings_print(timings, stderr);
  if (stats)
    amk_stats_print(stats, stderr);
  amk_sb_free(&out);
  amk_stats_free(stats);
  amk_timings_free(timings);
  amk_diag_free(diag);
  free_options(&o);
  amk_cli_args_free(&args);
  return ok ? 0 : 1;
}
