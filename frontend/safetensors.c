/* Safetensors reader: mmap, header validation, lookup, dtype conversion. */
#include "amk/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amk/compare.h"
#include "amk/io.h"
#include "amk/json_strict.h"
#include "amk/numerics.h"
#include "amk/path.h"
#include "amk/strutil.h"

typedef struct {
  char *path;
  const unsigned char *map; /* NULL for an empty file */
  size_t size;
  bool mapped; /* `map` is our mapping (else the caller's memory) */
} MappedFile;

struct AmkSafetensors {
  MappedFile *files;
  size_t n_files;
  AmkStTensor *tensors;
  size_t n_tensors, cap_tensors;
};

/* ---- dtypes ---------------------------------------------------------------- */

static const struct {
  const char *name;
  size_t size;
} st_dtypes[] = {
#define X(name, text, size) {text, size},
    AMK_ST_DTYPES(X)
#undef X
};

const char *amk_st_dtype_name(AmkStDType d) {
  return (unsigned)d < AMK_ST_DTYPE_COUNT ? st_dtypes[d].name : "?";
}

size_t amk_st_dtype_size(AmkStDType d) {
  return (unsigned)d < AMK_ST_DTYPE_COUNT ? st_dtypes[d].size : 0;
}

int amk_st_dtype_from_name(const char *s) {
  for (int i = 0; i < AMK_ST_DTYPE_COUNT; i++)
    if (strcmp(st_dtypes[i].name, s) == 0)
      return i;
  return -1;
}

int amk_st_dtype_to_ir(AmkStDType d) {
  switch (d) {
  case AMK_ST_F32: return AMK_DTYPE_F32;
  case AMK_ST_F16: return AMK_DTYPE_F16;
  case AMK_ST_BF16: return AMK_DTYPE_BF16;
  case AMK_ST_F8_E4M3: return AMK_DTYPE_F8E4M3;
  case AMK_ST_F8_E5M2: return AMK_DTYPE_F8E5M2;
  case AMK_ST_I32: return AMK_DTYPE_I32;
  case AMK_ST_I8: return AMK_DTYPE_I8;
  case AMK_ST_U8: return AMK_DTYPE_U8;
  case AMK_ST_BOOL: return AMK_DTYPE_BOOL;
  default: return -1;
  }
}

/* ---- helpers ----------------------------------------------------------------- */

static AmkLoc no_loc(void) { return (AmkLoc){0, 0}; }

/* A JSON number that is a non-negative integer exactly representable in a
 * double (2^53): the only kind of size or offset we accept. */
static bool json_size(const cJSON *item, uint64_t *out) {
  if (!cJSON_IsNumber(item))
    return false;
  double v = item->valuedouble;
  if (!(v >= 0.0) || v > 9007199254740992.0 || floor(v) != v)
    return false;
  *out = (uint64_t)v;
  return true;
}

/* ---- one file ---------------------------------------------------------------- */

static bool map_file(const char *path, MappedFile *mf, AmkDiagEngine *diag) {
  mf->path = amk_xstrdup(path);
  mf->map = NULL;
  mf->size = 0;
  mf->mapped = false;
  struct stat sb;
  int fd = amk_open_regular_file(path, &sb, diag);
  if (fd < 0)
    return false;
  mf->size = (size_t)sb.st_size;
  if (mf->size > 0) {
    void *p = mmap(NULL, mf->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      amk_error(diag, no_loc(), "%s: cannot map: %s", path, strerror(errno));
      close(fd);
      mf->size = 0;
      return false;
    }
    mf->map = p;
    mf->mapped = true;
  }
  close(fd);
  return true;
}

static void unmap_file(MappedFile *mf) {
  if (mf->mapped)
    munmap((void *)mf->map, mf->size);
  free(mf->path);
}

static AmkStTensor *push_tensor(AmkSafetensors *st) {
  if (st->n_tensors == st->cap_tensors) {
    st->cap_tensors = st->cap_tensors ? st->cap_tensors * 2 : 64;
    st->tensors =
        amk_xrealloc(st->tensors, st->cap_tensors * sizeof *st->tensors);
  }
  AmkStTensor *t = &st->tensors[st->n_tensors++];
  memset(t, 0, sizeof *t);
  return t;
}

/* Validate one tensor entry of a header and append it. `data` is the start of
 * the data section, `data_size` its length. */
static bool add_entry(AmkSafetensors *st, const MappedFile *mf,
                      const cJSON *entry, const unsigned char *data,
                      uint64_t data_size, uint64_t *begin_out,
                      AmkDiagEngine *diag) {
  const char *path = mf->path, *name = entry->string;
  if (!cJSON_IsObject(entry)) {
    amk_error(diag, no_loc(), "%s: tensor '%s': header entry is not an object",
              path, name);
    return false;
  }
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
  const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
  if (!cJSON_IsString(dtype)) {
    amk_error(diag, no_loc(), "%s: tensor '%s': missing or non-string 'dtype'",
              path, name);
    return false;
  }
  int code = amk_st_dtype_from_name(dtype->valuestring);
  if (code < 0) {
    amk_error(diag, no_loc(), "%s: tensor '%s': unknown dtype '%s'", path, name,
              dtype->valuestring);
    return false;
  }
  if (!cJSON_IsArray(shape)) {
    amk_error(diag, no_loc(), "%s: tensor '%s': missing or non-list 'shape'",
              path, name);
    return false;
  }
  int rank = cJSON_GetArraySize(shape);
  if (rank > AMK_ST_MAX_RANK) {
    amk_error(diag, no_loc(), "%s: tensor '%s': rank %d exceeds the limit of %d",
              path, name, rank, AMK_ST_MAX_RANK);
    return false;
  }
  int64_t dims[AMK_ST_MAX_RANK];
  uint64_t numel = 1;
  bool overflow = false;
  for (int i = 0; i < rank; i++) {
    uint64_t d;
    if (!json_size(cJSON_GetArrayItem(shape, i), &d)) {
      amk_error(diag, no_loc(),
                "%s: tensor '%s': shape[%d] is not a non-negative integer",
                path, name, i);
      return false;
    }
    dims[i] = (int64_t)d;
    if (d != 0 && numel > UINT64_MAX / 16 / d)
      overflow = true;
    else
      numel *= d;
  }
  if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2) {
    amk_error(diag, no_loc(),
              "%s: tensor '%s': 'data_offsets' must be a list of two integers",
              path, name);
    return false;
  }
  uint64_t begin, end;
  if (!json_size(cJSON_GetArrayItem(offsets, 0), &begin) ||
      !json_size(cJSON_GetArrayItem(offsets, 1), &end)) {
    amk_error(diag, no_loc(),
              "%s: tensor '%s': 'data_offsets' must be non-negative integers",
              path, name);
    return false;
  }
  if (begin > end) {
    amk_error(diag, no_loc(),
              "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin",
              path, name, (unsigned long long)begin, (unsigned long long)end);
    return false;
  }
  if (end > data_size) {
    amk_error(diag, no_loc(),
              "%s: tensor '%s': data_offsets [%llu, %llu] point past the end of "
              "the data (%llu bytes); the file is truncated or corrupt",
              path, name, (unsigned long long)begin, (unsigned long long)end,
              (unsigned long long)data_size);
    return false;
  }
  size_t elem = amk_st_dtype_size((AmkStDType)code);
  if (overflow || numel * elem != end - begin) {
    char shape_text[AMK_ST_MAX_RANK * 24 + 4];
    size_t at = 0;
    shape_text[at++] = '[';
    for (int i = 0; i < rank; i++)
      at += (size_t)snprintf(shape_text + at, sizeof shape_text - at, "%s%lld",
                             i ? ", " : "", (long long)dims[i]);
    snprintf(shape_text + at, sizeof shape_text - at, "]");
    if (overflow)
      amk_error(diag, no_loc(), "%s: tensor '%s': shape %s is too large", path,
                name, shape_text);
    else
      amk_error(diag, no_loc(),
                "%s: tensor '%s': shape %s of %s needs %llu bytes but "
                "data_offsets [%llu, %llu] span %llu",
                path, name, shape_text, dtype->valuestring,
                (unsigned long long)(numel * elem), (unsigned long long)begin,
                (unsigned long long)end, (unsigned long long)(end - begin));
    return false;
  }
  AmkStTensor *t = push_tensor(st);
  t->name = amk_xstrdup(name);
  t->dtype = (AmkStDType)code;
  t->rank = (uint32_t)rank;
  memcpy(t->shape, dims, (size_t)rank * sizeof dims[0]);
  t->numel = (int64_t)numel;
  t->data = data + begin;
  t->nbytes = (size_t)(end - begin);
  t->file = mf->path;
  *begin_out = begin;
  return true;
}

typedef struct {
  uint64_t begin, end;
  size_t tensor;
} Extent;

static int compare_extents(const void *a, const void *b) {
  const Extent *x = a, *y = b;
  int order = amk_compare_u64(x->begin, y->begin);
  return order ? order : amk_compare_u64(x->end, y->end);
}

/* Parse and validate the header of the mapped file `mf`, appending its
 * tensors. */
static bool read_header(AmkSafetensors *st, const MappedFile *mf,
                        AmkDiagEngine *diag) {
  const char *path = mf->path;
  if (mf->size < 8) {
    amk_error(diag, no_loc(),
              "%s: truncated file: %zu bytes, too short for the 8-byte header "
              "length",
              path, mf->size);
    return false;
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; i--) /* little-endian u64 */
    header_len = (header_len << 8) | mf->map[i];
  if (header_len > AMK_ST_MAX_HEADER_BYTES) {
    amk_error(diag, no_loc(),
              "%s: header length %llu exceeds the %u-byte limit; not a "
              "safetensors file or corrupt",
              path, (unsigned long long)header_len, AMK_ST_MAX_HEADER_BYTES);
    return false;
  }
  if (header_len > mf->size - 8) {
    amk_error(diag, no_loc(),
              "%s: header length %llu points past the end of the file (%zu "
              "bytes); the file is truncated",
              path, (unsigned long long)header_len, mf->size);
    return false;
  }
  const char *header = (const char *)mf->map + 8;
  const char *parse_end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(header, (size_t)header_len,
                                          &parse_end, false);
  if (!root) {
    size_t at = parse_end ? (size_t)(parse_end - header) : 0;
    amk_error(diag, no_loc(), "%s: header is not valid JSON (near byte %zu of "
              "the %llu-byte header)",
              path, at, (unsigned long long)header_len);
    return false;
  }
  if (!cJSON_IsObject(root)) {
    amk_error(diag, no_loc(), "%s: header is not a JSON object", path);
    cJSON_Delete(root);
    return false;
  }
  /* The format pads the header with spaces only; anything else after the
   * object, a duplicate key or a U+0000 would be read otherwise in Python. */
  AmkStrBuf label;
  amk_sb_init(&label);
  amk_sb_printf(&label, "%s: header", path);
  bool strict = amk_json_check_strict(label.data, header, (size_t)header_len,
                                      parse_end, root, AMK_JSON_TRAILING_SPACES,
                                      diag);
  amk_sb_free(&label);
  if (!strict) {
    cJSON_Delete(root);
    return false;
  }
  const unsigned char *data = mf->map + 8 + header_len;
  uint64_t data_size = mf->size - 8 - header_len;
  size_t n_entries = (size_t)cJSON_GetArraySize(root);
  Extent *extents = amk_xmalloc((n_entries ? n_entries : 1) * sizeof *extents);
  size_t n_extents = 0;
  bool ok = true;
  for (const cJSON *entry = root->child; entry && ok; entry = entry->next) {
    if (strcmp(entry->string, "__metadata__") == 0)
      continue; /* free-form string map; nothing we need */
    uint64_t begin = 0;
    ok = add_entry(st, mf, entry, data, data_size, &begin, diag);
    if (ok) {
      const AmkStTensor *t = &st->tensors[st->n_tensors - 1];
      extents[n_extents++] = (Extent){begin, begin + t->nbytes, st->n_tensors - 1};
    }
  }
  if (ok) {
    qsort(extents, n_extents, sizeof *extents, compare_extents);
    /* Each non-empty tensor must start at or after the furthest end so far. */
    size_t furthest = SIZE_MAX;
    for (size_t i = 0; i < n_extents && ok; i++) {
      if (extents[i].begin == extents[i].end)
        continue;
      if (furthest != SIZE_MAX && extents[i].begin < extents[furthest].end) {
        const Extent *a = &extents[furthest], *b = &extents[i];
        amk_error(diag, no_loc(),
                  "%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap",
                  path, st->tensors[a->tensor].name,
                  (unsigned long long)a->begin, (unsigned long long)a->end,
                  st->tensors[b->tensor].name, (unsigned long long)b->begin,
                  (unsigned long long)b->end);
        ok = false;
      }
      if (furthest == SIZE_MAX || extents[i].end > extents[furthest].end)
        furthest = i;
    }
  }
  free(extents);
  cJSON_Delete(root);
  return ok;
}

/* ---- opening ------------------------------------------------------------------- */

static size_t add_file(AmkSafetensors *st, const char *path,
                       AmkDiagEngine *diag, bool *ok) {
  st->files = amk_xrealloc(st->files, (st->n_files + 1) * sizeof *st->files);
  MappedFile *mf = &st->files[st->n_files++];
  *ok = map_file(path, mf, diag) && read_header(st, mf, diag);
  return st->n_files - 1;
}

static int compare_tensor_names(const void *a, const void *b) {
  return strcmp(((const AmkStTensor *)a)->name, ((const AmkStTensor *)b)->name);
}

/* Sort by name and refuse a name that appears twice. */
static bool finish(AmkSafetensors *st, AmkDiagEngine *diag) {
  /* A header of {} or only __metadata__ leaves no tensors (and no array):
   * valid, and refused later by whoever needs a tensor. */
  if (st->n_tensors == 0)
    return true;
  qsort(st->tensors, st->n_tensors, sizeof *st->tensors, compare_tensor_names);
  for (size_t i = 1; i < st->n_tensors; i++)
    if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0) {
      amk_error(diag, no_loc(), "%s: tensor '%s' appears twice (also in %s)",
                st->tensors[i].file, st->tensors[i].name,
                st->tensors[i - 1].file);
      return false;
    }
  return true;
}

/* A shard name from an index must stay inside the checkpoint's folder. */
static bool safe_shard_name(const char *name) {
  if (!*name || name[0] == '/')
    return false;
  for (const char *p = name; *p;) {
    const char *slash = strchr(p, '/');
    size_t n = slash ? (size_t)(slash - p) : strlen(p);
    if (n == 2 && p[0] == '.' && p[1] == '.')
      return false;
    p += n + (slash != NULL);
  }
  return true;
}

static bool open_index(AmkSafetensors *st, const char *index_path,
                       AmkDiagEngine *diag) {
  size_t len = 0;
  char *text = amk_read_regular_file(index_path, &len, diag);
  if (!text)
    return false;
  cJSON *root = amk_json_parse_strict(index_path, text, len, diag);
  if (!root) {
    free(text);
    return false;
  }
  const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  bool ok = cJSON_IsObject(map);
  if (!ok)
    amk_error(diag, no_loc(), "%s: missing or non-object 'weight_map'",
              index_path);
  /* The folder the shard names are relative to. */
  char *dir = amk_xstrdup(index_path);
  char *slash = strrchr(dir, '/');
  if (slash)
    slash[1] = '\0';
  else
    strcpy(dir, ".");
  for (const cJSON *e = ok ? map->child : NULL; e && ok; e = e->next) {
    if (!cJSON_IsString(e) || !safe_shard_name(e->valuestring)) {
      amk_error(diag, no_loc(),
                "%s: weight_map['%s'] must name a file inside the checkpoint's "
                "folder",
                index_path, e->string);
      ok = false;
      break;
    }
    char *shard = amk_path_join(dir, e->valuestring);
    bool seen = false;
    for (size_t f = 0; f < st->n_files && !seen; f++)
      seen = strcmp(st->files[f].path, shard) == 0;
    if (!seen)
      add_file(st, shard, diag, &ok);
    free(shard);
  }
  if (ok && map->child == NULL) {
    amk_error(diag, no_loc(), "%s: 'weight_map' is empty", index_path);
    ok = false;
  }
  if (ok)
    ok = finish(st, diag);
  /* Every tensor the index promises must be in the shard it names. */
  for (const cJSON *e = ok ? map->child : NULL; e && ok; e = e->next) {
    const AmkStTensor *t = amk_safetensors_find(st, e->string);
    char *shard = amk_path_join(dir, e->valuestring);
    if (!t) {
      amk_error(diag, no_loc(), "%s: tensor '%s' is listed in the index but "
                "missing from %s",
                index_path, e->string, shard);
      ok = false;
    } else if (strcmp(t->file, shard) != 0) {
      amk_error(diag, no_loc(), "%s: tensor '%s' is listed in %s but found in "
                "%s",
                index_path, e->string, shard, t->file);
      ok = false;
    }
    free(shard);
  }
  free(dir);
  cJSON_Delete(root);
  free(text);
  return ok;
}

AmkSafetensors *amk_safetensors_open(const char *path, AmkDiagEngine *diag) {
  AmkSafetensors *st = amk_xcalloc(1, sizeof *st);
  bool ok;
  if (amk_is_directory(path)) {
    char *index = amk_path_join(path, "model.safetensors.index.json");
    char *single = amk_path_join(path, "model.safetensors");
    /* Present in any form counts: a FIFO or folder in its place is refused
     * when opened, not mistaken for "no weights". */
    if (amk_path_kind(index) != AMK_PATH_ABSENT) {
      ok = open_index(st, index, diag);
    } else if (amk_path_kind(single) != AMK_PATH_ABSENT) {
      add_file(st, single, diag, &ok);
      ok = ok && finish(st, diag);
    } else {
      amk_error(diag, no_loc(), "%s: no model.safetensors or "
                "model.safetensors.index.json in this folder", path);
      ok = false;
    }
    free(index);
    free(single);
  } else if (amk_str_ends_with(path, ".json")) {
    ok = open_index(st, path, diag);
  } else {
    add_file(st, path, diag, &ok);
    ok = ok && finish(st, diag);
  }
  if (!ok) {
    amk_safetensors_close(st);
    return NULL;
  }
  return st;
}

AmkSafetensors *amk_safetensors_open_memory(const char *name, const void *data,
                                            size_t size, AmkDiagEngine *diag) {
  AmkSafetensors *st = amk_xcalloc(1, sizeof *st);
  st->files = amk_xmalloc(sizeof *st->files);
  st->n_files = 1;
  st->files[0] = (MappedFile){amk_xstrdup(name), size ? data : NULL, size, false};
  if (!read_header(st, &st->files[0], diag) || !finish(st, diag)) {
    amk_safetensors_close(st);
    return NULL;
  }
  return st;
}

void amk_safetensors_close(AmkSafetensors *st) {
  if (!st)
    return;
  for (size_t i = 0; i < st->n_tensors; i++)
    free((char *)st->tensors[i].name);
  for (size_t i = 0; i < st->n_files; i++)
    unmap_file(&st->files[i]);
  free(st->tensors);
  free(st->files);
  free(st);
}

size_t amk_safetensors_count(const AmkSafetensors *st) { return st->n_tensors; }

const AmkStTensor *amk_safetensors_at(const AmkSafetensors *st, size_t i) {
  return i < st->n_tensors ? &st->tensors[i] : NULL;
}

const AmkStTensor *amk_safetensors_find(const AmkSafetensors *st,
                                        const char *name) {
  size_t lo = 0, hi = st->n_tensors;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(st->tensors[mid].name, name);
    if (c == 0)
      return &st->tensors[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

size_t amk_safetensors_file_count(const AmkSafetensors *st) {
  return st->n_files;
}

bool amk_safetensors_present(const char *dir) {
  char *index = amk_path_join(dir, "model.safetensors.index.json");
  char *single = amk_path_join(dir, "model.safetensors");
  /* Anything at either name counts, so a FIFO or folder there is opened and
   * refused rather than silently imported as "no weights". */
  bool present = amk_path_kind(index) != AMK_PATH_ABSENT ||
                 amk_path_kind(single) != AMK_PATH_ABSENT;
  free(index);
  free(single);
  return present;
}

/* ---- conversion ------------------------------------------------------------------ */

static float load_element(const AmkStTensor *t, size_t i) {
  const unsigned char *p = (const unsigned char *)t->data;
  switch (t->dtype) {
  case AMK_ST_F64: {
    double d;
    memcpy(&d, p + i * 8, 8);
    return (float)d;
  }
  case AMK_ST_F32: {
    float f;
    memcpy(&f, p + i * 4, 4);
    return f;
  }
  case AMK_ST_F16: {
    uint16_t h;
    memcpy(&h, p + i * 2, 2);
    return amk_f16_to_f32(h);
  }
  case AMK_ST_BF16: {
    uint16_t h;
    memcpy(&h, p + i * 2, 2);
    return amk_bf16_to_f32(h);
  }
  default:
    AMK_UNREACHABLE("load_element: non-float dtype");
  }
}

bool amk_st_dtype_is_float(AmkStDType d) {
  return d == AMK_ST_F64 || d == AMK_ST_F32 || d == AMK_ST_F16 || d == AMK_ST_BF16;
}

void amk_safetensors_read_f32(const AmkStTensor *t, int64_t first, int64_t count,
                              float *dst) {
  /* The dtype is chosen once per stretch: the weight loader reads whole
   * checkpoints through here when it quantizes. */
  const unsigned char *p = (const unsigned char *)t->data;
  switch (t->dtype) {
  case AMK_ST_F32:
    memcpy(dst, p + (size_t)first * 4, (size_t)count * 4);
    return;
  case AMK_ST_BF16:
  case AMK_ST_F16:
    for (int64_t i = 0; i < count; i++) {
      uint16_t h;
      memcpy(&h, p + (size_t)(first + i) * 2, 2);
      dst[i] = t->dtype == AMK_ST_BF16 ? amk_bf16_to_f32(h) : amk_f16_to_f32(h);
    }
    return;
  default:
    for (int64_t i = 0; i < count; i++)
      dst[i] = load_element(t, (size_t)(first + i));
  }
}

bool amk_safetensors_convert(const AmkStTensor *t, AmkDType to, void *dst,
                             size_t dst_bytes, AmkDiagEngine *diag) {
  if (!amk_st_dtype_is_float(t->dtype)) {
    amk_error(diag, no_loc(), "%s: tensor '%s': cannot convert %s to a float "
              "format", t->file, t->name, amk_st_dtype_name(t->dtype));
    return false;
  }
  if (to != AMK_DTYPE_F32 && to != AMK_DTYPE_BF16 && to != AMK_DTYPE_F16) {
    amk_error(diag, no_loc(), "%s: tensor '%s': conversion to %s is not "
              "supported (only f32, bf16, f16)", t->file, t->name,
              amk_dtype_text_name(to));
    return false;
  }
  size_t n = (size_t)t->numel;
  size_t need = n * (to == AMK_DTYPE_F32 ? 4u : 2u);
  if (dst_bytes < need) {
    amk_error(diag, no_loc(), "%s: tensor '%s': destination holds %zu bytes, "
              "needs %zu", t->file, t->name, dst_bytes, need);
    return false;
  }
  unsigned char *out = dst;
  /* Same encoding: a straight copy keeps NaN payloads bit-exact. */
  if ((to == AMK_DTYPE_F32 && t->dtype == AMK_ST_F32) ||
      (to == AMK_DTYPE_BF16 && t->dtype == AMK_ST_BF16) ||
      (to == AMK_DTYPE_F16 && t->dtype == AMK_ST_F16)) {
    if (need)
      memcpy(out, t->data, need);
    return true;
  }
  for (size_t i = 0; i < n; i++) {
    float f = load_element(t, i);
    if (to == AMK_DTYPE_F32) {
      memcpy(out + i * 4, &f, 4);
    } else {
      uint16_t h = to == AMK_DTYPE_BF16 ? amk_f32_to_bf16(f) : amk_f32_to_f16(f);
      memcpy(out + i * 2, &h, 2);
    }
  }
  return true;
}

/* ---- writing ---------------------------------------------------------------------- */

bool amk_safetensors_write(const char *path, const AmkStWriteTensor *tensors, size_t n,
                           const char *const *metadata, AmkDiagEngine *diag) {
  /* Wider elements first: with the header padded to 8 bytes, every tensor
   * then starts aligned for its dtype (readers may use it in place). */
  size_t *order = amk_xmalloc((n ? n : 1) * sizeof *order);
  size_t k = 0;
  for (size_t width = 8; width >= 1; width /= 2)
    for (size_t i = 0; i < n; i++)
      if (amk_st_dtype_size(tensors[i].dtype) == width)
        order[k++] = i;
  AMK_ASSERT(k == n);
  cJSON *header = cJSON_CreateObject();
  if (metadata && metadata[0]) {
    cJSON *meta = cJSON_AddObjectToObject(header, "__metadata__");
    for (size_t i = 0; metadata[i] && metadata[i + 1]; i += 2)
      cJSON_AddStringToObject(meta, metadata[i], metadata[i + 1]);
  }
  bool ok = true;
  uint64_t offset = 0;
  for (size_t j = 0; j < n && ok; j++) {
    const AmkStWriteTensor *t = &tensors[order[j]];
    uint64_t numel = 1;
    for (uint32_t d = 0; d < t->rank; d++)
      numel *= (uint64_t)t->shape[d];
    if (t->rank > AMK_ST_MAX_RANK || numel * amk_st_dtype_size(t->dtype) != t->nbytes ||
        cJSON_GetObjectItemCaseSensitive(header, t->name)) {
      amk_error(diag, no_loc(), "%s: tensor '%s' cannot be written (%s)", path, t->name,
                cJSON_GetObjectItemCaseSensitive(header, t->name)
                    ? "a second tensor of that name"
                    : "its bytes are not its shape's");
      ok = false;
      break;
    }
    cJSON *entry = cJSON_AddObjectToObject(header, t->name);
    cJSON_AddStringToObject(entry, "dtype", amk_st_dtype_name(t->dtype));
    cJSON *shape = cJSON_AddArrayToObject(entry, "shape");
    for (uint32_t d = 0; d < t->rank; d++)
      cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
    cJSON *offsets = cJSON_AddArrayToObject(entry, "data_offsets");
    cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)offset));
    cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)(offset + t->nbytes)));
    offset += t->nbytes;
  }
  char *json = ok ? cJSON_PrintUnformatted(header) : NULL;
  cJSON_Delete(header);
  if (ok) {
    size_t len = strlen(json), padded = (len + 7) / 8 * 8;
    char *head = amk_xmalloc(8 + padded);
    for (int i = 0; i < 8; i++)
      head[i] = (char)(((uint64_t)padded >> (8 * i)) & 0xff); /* little-endian */
    memcpy(head + 8, json, len);
    memset(head + 8 + len, ' ', padded - len);
    AmkWritePart *parts = amk_xmalloc((n + 1) * sizeof *parts);
    parts[0] = (AmkWritePart){head, 8 + padded};
    for (size_t j = 0; j < n; j++)
      parts[j + 1] = (AmkWritePart){tensors[order[j]].data, tensors[order[j]].nbytes};
    ok = amk_write_file_parts_atomic(path, parts, n + 1, diag) == 0;
    free(parts);
    free(head);
  }
  cJSON_free(json);
  free(order);
  return ok;
}
