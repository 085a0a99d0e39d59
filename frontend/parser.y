/* The `.amkir` grammar (Bison, pure, with locations). docs/LangRef.md is the
 * specification; this file is its executable form. Actions hand every
 * record to the builders in text_parse.c, which write straight into the
 * module; nothing here keeps state outside the AmkTextParser.
 */
%define api.pure full
%define api.prefix {amk_yy}
%define api.token.prefix {TOK_}
%define parse.error custom
%define parse.lac full
%locations
%param {AmkTextParser *p}

%code requires {
#include "text_internal.h"
}

%code provides {
int amk_yylex(AMK_YYSTYPE *lval, AMK_YYLTYPE *lloc, AmkTextParser *p);
}

%code {
#include <stdio.h>
#include <string.h>

static AmkLoc at(AMK_YYLTYPE l) {
  AmkLoc loc = {(uint32_t)l.first_line, (uint32_t)l.first_column};
  return loc;
}

/* Bison calls this only when its stack is exhausted (absurdly deep
 * nesting); syntax errors go through yyreport_syntax_error. */
static void amk_yyerror(AMK_YYLTYPE *loc, AmkTextParser *p, const char *msg) {
  amk_text_error(p, at(*loc), "%s (nesting too deep)", msg);
}

static AmkValue scalar(AmkValueKind kind) {
  AmkValue v = {.kind = kind};
  return v;
}
}

%union {
  AmkTextSlice slice;
  AmkTextNumber num;
  AmkTextRef ref;
  AmkValue value;
  AmkTextFieldValue field;
  const char *cstr;
  size_t mark;
}

%token END 0 "end of file"
%token <slice> IDENT "identifier"
%token <slice> STRING "string"
%token <num> INT "integer"
%token <num> FLOAT "float"
%token <num> VERSION "version number"
%token <ref> BUFREF "buffer reference"
%token <ref> CNTREF "counter reference"
%token ARROW "'->'" GE "'>='" DOTDOT "'..'"
%token KW_AMKIR "'amkir'" KW_ABI "'abi'" KW_MODEL "'model'" KW_META "'meta'"
%token KW_TARGET "'target'" KW_CONFIG "'config'" KW_BUFFER "'buffer'"
%token KW_COUNTER "'counter'" KW_TASK "'task'" KW_WAIT "'wait'"
%token KW_SIGNAL "'signal'" KW_SM "'sm'" KW_COST "'cost'" KW_BYTES "'bytes'"
%token KW_FLOPS "'flops'" KW_LABEL "'label'" KW_PAGES "'pages'"
%token KW_PAGE "'page'" KW_LIVE "'live'" KW_SOURCE "'source'"
%token KW_INIT "'init'" KW_NULL "'null'" KW_TRUE "'true'" KW_FALSE "'false'"

%type <cstr> version word key opt_source opt_note
%type <value> value list object opt_params
%type <field> field_value
%type <slice> opt_space
%type <num> opt_id opt_init

%%

module:
    header items
  ;

header:
    %empty
  | KW_AMKIR { p->context = "the header line"; } version ',' KW_ABI version
      { amk_text_set_versions(p, $3, at(@3), $6, at(@6)); }
  ;

version:
    VERSION { $$ = amk_text_dup(p, $1.text); }
  | INT     { $$ = amk_text_dup(p, $1.text); }
  | FLOAT   { $$ = amk_text_dup(p, $1.text); }
  | STRING  { $$ = $1.ptr; }
  ;

items:
    %empty { p->context = NULL; }
  | items item { p->context = NULL; }
  ;

item:
    model_decl
  | meta_decl
  | target_decl
  | config_decl
  | buffer_decl
  | counter_decl
  | task_decl
  | pages_decl
  ;

model_decl:
    KW_MODEL { p->context = "the model line"; } STRING
      { amk_text_set_model(p, $3.ptr, at(@1)); }
  ;

meta_decl:
    KW_META { p->context = "meta"; } value
      { amk_text_set_meta(p, $3, at(@1), at(@3)); }
  ;

/* ---- target ---------------------------------------------------------- */

target_decl:
    KW_TARGET { p->context = "the target"; } word
      { amk_text_begin_target(p, $3, at(@3)); }
    target_block
      { amk_text_end_target(p); }
  ;

word:
    IDENT  { $$ = amk_text_dup(p, $1); }
  | STRING { $$ = $1.ptr; }
  ;

target_block:
    %empty
  | '{' { p->target_has_block = true; } opt_target_fields '}'
  ;

opt_target_fields:
    %empty
  | target_fields
  ;

target_fields:
    target_field
  | target_fields ',' target_field
  ;

target_field:
    key '=' value { amk_text_target_field(p, $1, at(@1), &$3, at(@3)); }
  ;

/* ---- config ---------------------------------------------------------- */

config_decl:
    KW_CONFIG { p->context = "the config"; amk_text_begin_config(p, at(@1)); }
    '{' opt_config_fields '}'
  ;

opt_config_fields:
    %empty
  | config_fields
  ;

config_fields:
    config_field
  | config_fields ',' config_field
  ;

config_field:
    key '=' field_value
      { amk_text_config_field(p, $1, at(@1), &$3, at(@3)); }
  ;

field_value:
    value { $$.value = $1; $$.is_word = false; }
  | IDENT { memset(&$$, 0, sizeof $$); $$.word = $1; $$.is_word = true; }
  ;

/* ---- buffers and counters ------------------------------------------- */

buffer_decl:
    KW_BUFFER { p->context = "the buffer declaration"; }
    opt_id BUFREF ':' IDENT list IDENT opt_space opt_source
      {
        amk_text_add_buffer(p, at(@1), $3.text.len ? &$3.i : NULL, at(@3),
                            $4, at(@4), $6, at(@6), $7, $8, at(@8), $9,
                            at(@9), $10);
      }
  ;

opt_id:
    %empty { memset(&$$, 0, sizeof $$); }
  | INT
  ;

opt_space:
    %empty { $$.ptr = NULL; $$.len = 0; }
  | IDENT
  ;

opt_source:
    %empty { $$ = NULL; }
  | KW_SOURCE STRING { $$ = $2.ptr; }
  ;

counter_decl:
    KW_COUNTER { p->context = "the counter declaration"; }
    opt_id CNTREF opt_note opt_init
      {
        amk_text_add_counter(p, at(@1), $3.text.len ? &$3.i : NULL, at(@3),
                             $4, at(@4), $5, $6.i);
      }
  ;

opt_note:
    %empty { $$ = ""; }
  | STRING { $$ = $1.ptr; }
  ;

opt_init:
    %empty { memset(&$$, 0, sizeof $$); }
  | KW_INIT INT { $$ = $2; }
  ;

/* ---- tasks ----------------------------------------------------------- */

task_decl:
    KW_TASK { p->context = "the task"; } INT IDENT
      { amk_text_begin_task(p, at(@1), $3.i, at(@3), $4, at(@4)); }
    '(' { p->context = "task inputs"; p->task.inputs_mark = p->refs.len; }
    opt_refs ')'
    ARROW { p->context = "task outputs"; p->task.outputs_mark = p->refs.len; }
    outputs { p->context = "the task"; p->task.waits_mark = p->waits.len; }
    opt_waits
    KW_SIGNAL CNTREF[signal]
      {
        p->context = "the task";
        p->task.signal = $signal;
        p->task.signal_loc = at(@signal);
      }
    opt_params opt_sm opt_cost opt_label
      { amk_text_end_task(p); }
  ;

opt_refs:
    %empty
  | refs
  ;

refs:
    BUFREF { amk_text_push_ref(p, $1, at(@1)); }
  | refs ',' BUFREF { amk_text_push_ref(p, $3, at(@3)); }
  ;

outputs:
    '(' ')'
  | refs
  ;

opt_waits:
    %empty
  | KW_WAIT { p->context = "the wait list"; } waits
  ;

waits:
    wait
  | waits ',' wait
  ;

wait:
    CNTREF GE value { amk_text_push_wait(p, $1, at(@1), $3); }
  ;

opt_params:
    %empty { $$ = scalar(AMK_VALUE_NULL); p->task.params = $$; }
  | { p->context = "task params"; } object
      { $$ = $2; p->task.params = $2; p->context = "the task"; }
  ;

opt_sm:
    %empty
  | KW_SM INT
      { p->task.has_sm = true; p->task.sm = $2.i; p->task.sm_loc = at(@2); }
  ;

opt_cost:
    %empty
  | KW_COST INT KW_BYTES INT KW_FLOPS
      { p->task.est_bytes = $2.i; p->task.est_flops = $4.i; }
  ;

opt_label:
    %empty
  | KW_LABEL STRING { p->task.label = $2.ptr; }
  ;

/* ---- pages ------------------------------------------------------------ */

pages_decl:
    KW_PAGES { p->context = "pages"; amk_text_begin_pages(p, at(@1)); }
    '{' page_items '}'
      { amk_text_end_pages(p); }
  ;

page_items:
    %empty
  | page_items page_item
  ;

page_item:
    KW_PAGE INT IDENT INT
      { amk_text_add_page(p, $2.i, at(@2), $3, at(@3), $4.i, -1, -1); }
  | KW_PAGE INT IDENT INT KW_LIVE INT DOTDOT INT
      { amk_text_add_page(p, $2.i, at(@2), $3, at(@3), $4.i, $6.i, $8.i); }
  | BUFREF ARROW INT
      { amk_text_add_binding(p, $1, at(@1), $3.i, at(@3)); }
  ;

/* ---- values ----------------------------------------------------------- */

value:
    KW_NULL  { $$ = scalar(AMK_VALUE_NULL); }
  | KW_TRUE  { $$ = scalar(AMK_VALUE_BOOL); $$.as.b = true; }
  | KW_FALSE { $$ = scalar(AMK_VALUE_BOOL); $$.as.b = false; }
  | INT      { $$ = amk_value_int($1.i); }
  | FLOAT    { $$ = amk_value_float($1.f); }
  | STRING   { $$ = scalar(AMK_VALUE_STRING); $$.as.s = $1.ptr; }
  | list
  | object
  ;

list:
    '[' <mark>{ $$ = p->values.len; amk_text_open_value(p, at(@1)); } opt_list_items ']'
      { $$ = amk_text_make_list(p, $2); amk_text_close_value(p); }
  ;

opt_list_items:
    %empty
  | list_items
  ;

list_items:
    value { amk_text_push_value(p, $1); }
  | list_items ',' value { amk_text_push_value(p, $3); }
  ;

object:
    '{' <mark>{ $$ = p->members.len; amk_text_open_value(p, at(@1)); } opt_members '}'
      { $$ = amk_text_make_object(p, $2); amk_text_close_value(p); }
  ;

opt_members:
    %empty
  | members
  ;

members:
    member
  | members ',' member
  ;

member:
    key '=' value { amk_text_push_member(p, $1, at(@1), $3); }
  ;

/* Keys are names; reserved words and integers (explicit sm maps) are keys
 * too, spelled as written. */
key:
    IDENT      { $$ = amk_text_dup(p, $1); }
  | STRING     { $$ = $1.ptr; }
  | INT        { $$ = amk_text_dup(p, $1.text); }
  | KW_AMKIR   { $$ = "amkir"; }
  | KW_ABI     { $$ = "abi"; }
  | KW_MODEL   { $$ = "model"; }
  | KW_META    { $$ = "meta"; }
  | KW_TARGET  { $$ = "target"; }
  | KW_CONFIG  { $$ = "config"; }
  | KW_BUFFER  { $$ = "buffer"; }
  | KW_COUNTER { $$ = "counter"; }
  | KW_TASK    { $$ = "task"; }
  | KW_WAIT    { $$ = "wait"; }
  | KW_SIGNAL  { $$ = "signal"; }
  | KW_SM      { $$ = "sm"; }
  | KW_COST    { $$ = "cost"; }
  | KW_BYTES   { $$ = "bytes"; }
  | KW_FLOPS   { $$ = "flops"; }
  | KW_LABEL   { $$ = "label"; }
  | KW_PAGES   { $$ = "pages"; }
  | KW_PAGE    { $$ = "page"; }
  | KW_LIVE    { $$ = "live"; }
  | KW_SOURCE  { $$ = "source"; }
  | KW_INIT    { $$ = "init"; }
  | KW_NULL    { $$ = "null"; }
  | KW_TRUE    { $$ = "true"; }
  | KW_FALSE   { $$ = "false"; }
  ;

%%

/* Token names as a reader thinks of them. Bison's own names carry the
 * quotes of the grammar's aliases, so spell them here. */
static const char *describe_symbol(yysymbol_kind_t kind) {
  switch (kind) {
  case YYSYMBOL_YYEOF: return "end of file";
  case YYSYMBOL_IDENT: return "a name";
  case YYSYMBOL_STRING: return "a string";
  case YYSYMBOL_INT: return "an integer";
  case YYSYMBOL_FLOAT: return "a float";
  case YYSYMBOL_VERSION: return "a version number";
  case YYSYMBOL_BUFREF: return "a buffer reference (%name)";
  case YYSYMBOL_CNTREF: return "a counter reference (#name)";
  default: break;
  }
  return yysymbol_name(kind); /* punctuation and keywords: "'->'" */
}

static void append(char *buf, size_t size, size_t *len, const char *s,
                   size_t n) {
  if (*len + 1 >= size)
    return;
  size_t room = size - 1 - *len;
  if (n > room)
    n = room;
  memcpy(buf + *len, s, n);
  *len += n;
  buf[*len] = 0;
}

static bool has_symbol(const yysymbol_kind_t *set, int n, yysymbol_kind_t k) {
  for (int i = 0; i < n; i++)
    if (set[i] == k)
      return true;
  return false;
}

/* Lists what the parser expected, folding the many tokens that start a
 * value, a key or a declaration into one phrase each. */
static void append_expected(char *msg, size_t size, size_t *len,
                            const yysymbol_kind_t *expected, int n) {
  const char *phrases[YYNTOKENS];
  int n_phrases = 0;
  /* every reserved word is a key; 'abi' is expected nowhere else but the
   * header, and '[' starts a value but never a key */
  bool key = has_symbol(expected, n, YYSYMBOL_KW_ABI) &&
             has_symbol(expected, n, YYSYMBOL_IDENT);
  bool value = has_symbol(expected, n, YYSYMBOL_KW_NULL) &&
               has_symbol(expected, n, YYTRANSLATE('['));
  bool item = !key && has_symbol(expected, n, YYSYMBOL_KW_BUFFER) &&
              has_symbol(expected, n, YYSYMBOL_KW_TASK);
  if (item)
    phrases[n_phrases++] = "a declaration ('buffer', 'counter', 'task', "
                           "'pages', 'meta', 'target', 'config', 'model')";
  if (key)
    phrases[n_phrases++] = "a key";
  if (value)
    phrases[n_phrases++] = "a value";
  for (int i = 0; i < n; i++) {
    yysymbol_kind_t k = expected[i];
    bool is_value_start = k == YYSYMBOL_KW_NULL || k == YYSYMBOL_KW_TRUE ||
                          k == YYSYMBOL_KW_FALSE || k == YYSYMBOL_INT ||
                          k == YYSYMBOL_FLOAT || k == YYSYMBOL_STRING ||
                          k == YYTRANSLATE('[') || k == YYTRANSLATE('{');
    bool is_keyword = k >= YYSYMBOL_KW_AMKIR && k <= YYSYMBOL_KW_FALSE;
    if ((value && is_value_start) ||
        (key && (is_keyword || k == YYSYMBOL_IDENT || k == YYSYMBOL_STRING ||
                 k == YYSYMBOL_INT)))
      continue;
    if (item && (k == YYSYMBOL_KW_BUFFER || k == YYSYMBOL_KW_COUNTER ||
                 k == YYSYMBOL_KW_TASK || k == YYSYMBOL_KW_PAGES ||
                 k == YYSYMBOL_KW_META || k == YYSYMBOL_KW_TARGET ||
                 k == YYSYMBOL_KW_CONFIG || k == YYSYMBOL_KW_MODEL))
      continue;
    if (k != YYSYMBOL_YYEOF)
      phrases[n_phrases++] = describe_symbol(k);
  }
  if (has_symbol(expected, n, YYSYMBOL_YYEOF))
    phrases[n_phrases++] = "end of file";
  append(msg, size, len, "expected ", 9);
  for (int i = 0; i < n_phrases; i++) {
    if (i > 0)
      append(msg, size, len, i == n_phrases - 1 ? " or " : ", ",
             i == n_phrases - 1 ? 4 : 2);
    append(msg, size, len, phrases[i], strlen(phrases[i]));
  }
}

static int yyreport_syntax_error(const yypcontext_t *ctx, AmkTextParser *p) {
  yysymbol_kind_t expected[YYNTOKENS];
  int n = yypcontext_expected_tokens(ctx, expected, YYNTOKENS);
  yysymbol_kind_t found = yypcontext_token(ctx);
  char msg[768];
  size_t len = 0;
  msg[0] = 0;
  if (n > 0)
    append_expected(msg, sizeof msg, &len, expected, n);
  else
    append(msg, sizeof msg, &len, "unexpected token", 16);
  if (p->context) {
    append(msg, sizeof msg, &len, " in ", 4);
    append(msg, sizeof msg, &len, p->context, strlen(p->context));
  }
  append(msg, sizeof msg, &len, ", found ", 8);
  if (found == YYSYMBOL_YYEOF || p->last_token.len == 0) {
    append(msg, sizeof msg, &len, "end of file", 11);
  } else {
    size_t shown = p->last_token.len > 40 ? 40 : p->last_token.len;
    append(msg, sizeof msg, &len, "'", 1);
    append(msg, sizeof msg, &len, p->last_token.ptr, shown);
    if (shown < p->last_token.len)
      append(msg, sizeof msg, &len, "...", 3);
    append(msg, sizeof msg, &len, "'", 1);
  }
  amk_text_error(p, at(*yypcontext_location(ctx)), "%s", msg);
  return 0;
}
