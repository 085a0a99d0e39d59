/* The safetensors reader: a valid file, a sharded index, conversions, and
 * one test per kind of corruption (each must fail with its own message);
 * and the writer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amk/numerics.h"
#include "amk/safetensors.h"
#include "unit.h"

typedef struct {
  char dir[64];
  char path[128];
} Scratch;

/* Writes an 8-byte length (`declared`, or the header's length when
 * UINT64_MAX), the header text and `data`. */
static void write_raw(const char *path, const char *header, uint64_t declared,
                      const void *data, size_t data_len) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return;
  uint64_t n = declared == UINT64_MAX ? strlen(header) : declared;
  unsigned char len[8];
  for (int i = 0; i < 8; i++)
    len[i] = (unsigned char)(n >> (8 * i));
  fwrite(len, 1, 8, f);
  fwrite(header, 1, strlen(header), f);
  if (data_len)
    fwrite(data, 1, data_len, f);
  fclose(f);
}

/* Opens `path` expecting failure with an error that names `file` and
 * contains `want`. */
static void expect_error_naming(UnitCounts *c, const char *path,
                                const char *file, const char *want) {
  AmkDiagEngine *d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);
  AmkSafetensors *st = amk_safetensors_open(path, d);
  CHECK(c, st == NULL);
  bool found = false;
  for (size_t i = 0; i < amk_diag_captured_count(d); i++) {
    const AmkDiagnostic *g = amk_diag_captured(d, i);
    if (g->severity == AMK_SEVERITY_ERROR && strstr(g->message, want) &&
        strstr(g->message, file))
      found = true;
  }
  if (!found) {
    fprintf(stderr, "expected an error naming %s with \"%s\"; got:\n", file,
            want);
    for (size_t i = 0; i < amk_diag_captured_count(d); i++)
      fprintf(stderr, "  %s\n", amk_diag_captured(d, i)->message);
  }
  CHECK(c, found);
  amk_safetensors_close(st);
  amk_diag_free(d);
}

static void expect_error(UnitCounts *c, const char *path, const char *want) {
  expect_error_naming(c, path, path, want);
}

static const float six[6] = {1.0f, -2.0f, 0.5f, 3.0f, -0.25f, 65536.0f};

/* A file of `header` (its true length declared) and the 24 bytes of `six`
 * fails to open with an error containing `want`. */
static void expect_header_error(UnitCounts *c, const char *path,
                                const char *header, const char *want) {
  write_raw(path, header, UINT64_MAX, six, 24);
  expect_error(c, path, want);
}

static void test_valid(UnitCounts *c, const Scratch *s) {
  char path[160];
  snprintf(path, sizeof path, "%s/ok.safetensors", s->dir);
  /* Declared out of order; "b" is bf16 [2], "e" empty, "a" f32 [2, 3]. */
  unsigned char data[24 + 4];
  memcpy(data, six, 24);
  uint16_t b[2] = {0x3f80, 0xc000}; /* 1.0, -2.0 */
  memcpy(data + 24, b, 4);
  write_raw(path,
            "{\"__metadata__\":{\"format\":\"pt\"},"
            "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[24,28]},"
            "\"e\":{\"dtype\":\"F16\",\"shape\":[0,4],\"data_offsets\":[24,24]},"
            "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}",
            UINT64_MAX, data, sizeof data);
  AmkDiagEngine *d = amk_diag_new(stderr);
  AmkSafetensors *st = amk_safetensors_open(path, d);
  CHECK(c, st != NULL);
  if (!st) {
    amk_diag_free(d);
    return;
  }
  CHECK(c, amk_safetensors_count(st) == 3);
  CHECK(c, amk_safetensors_file_count(st) == 1);
  CHECK_STR(c, amk_safetensors_at(st, 0)->name, "a");
  CHECK_STR(c, amk_safetensors_at(st, 2)->name, "e");
  const AmkStTensor *a = amk_safetensors_find(st, "a");
  CHECK(c, a && a->dtype == AMK_ST_F32 && a->rank == 2 && a->shape[0] == 2 &&
               a->shape[1] == 3 && a->numel == 6 && a->nbytes == 24);
  CHECK(c, a && memcmp(a->data, six, 24) == 0);
  CHECK_STR(c, a ? a->file : NULL, path);
  CHECK(c, amk_safetensors_find(st, "missing") == NULL);
  CHECK(c, amk_safetensors_find(st, "__metadata__") == NULL);
  const AmkStTensor *e = amk_safetensors_find(st, "e");
  CHECK(c, e && e->numel == 0 && e->nbytes == 0);

  /* f32 -> bf16 / f16 / f32, bf16 -> f32. */
  uint16_t half[6];
  float back[6];
  CHECK(c, amk_safetensors_convert(a, AMK_DTYPE_BF16, half, sizeof half, d));
  CHECK(c, half[0] == 0x3f80 && half[1] == 0xc000 && half[5] == 0x4780);
  CHECK(c, amk_safetensors_convert(a, AMK_DTYPE_F16, half, sizeof half, d));
  CHECK(c, half[0] == 0x3c00 && half[2] == 0x3800 && half[5] == 0x7c00);
  CHECK(c, amk_safetensors_convert(a, AMK_DTYPE_F32, back, sizeof back, d));
  CHECK(c, memcmp(back, six, 24) == 0);
  const AmkStTensor *bt = amk_safetensors_find(st, "b");
  CHECK(c, bt && amk_safetensors_convert(bt, AMK_DTYPE_F32, back, 8, d));
  CHECK(c, back[0] == 1.0f && back[1] == -2.0f);
  CHECK(c, amk_diag_error_count(d) == 0);

  /* Refused conversions. */
  amk_diag_set_capture(d, 1);
  CHECK(c, !amk_safetensors_convert(a, AMK_DTYPE_F32, back, 8, d));
  CHECK(c, !amk_safetensors_convert(a, AMK_DTYPE_I8, back, sizeof back, d));
  CHECK(c, amk_diag_error_count(d) == 2);
  amk_safetensors_close(st);
  amk_diag_free(d);

  /* A folder with model.safetensors opens the same file. */
  char folder_file[160];
  snprintf(folder_file, sizeof folder_file, "%s/model.safetensors", s->dir);
  CHECK(c, rename(path, folder_file) == 0);
  d = amk_diag_new(stderr);
  st = amk_safetensors_open(s->dir, d);
  CHECK(c, st && amk_safetensors_count(st) == 3);
  CHECK(c, amk_safetensors_present(s->dir));
  amk_safetensors_close(st);
  amk_diag_free(d);
  remove(folder_file);
  CHECK(c, !amk_safetensors_present(s->dir));
}

static void test_index(UnitCounts *c, const Scratch *s) {
  char p1[160], p2[160], index[160];
  snprintf(p1, sizeof p1, "%s/s1.safetensors", s->dir);
  snprintf(p2, sizeof p2, "%s/s2.safetensors", s->dir);
  snprintf(index, sizeof index, "%s/idx.json", s->dir);
  write_raw(p1, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
            UINT64_MAX, six, 8);
  write_raw(p2, "{\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
            UINT64_MAX, six + 2, 4);
  FILE *f = fopen(index, "w");
  if (f) {
    fputs("{\"metadata\":{},\"weight_map\":{\"x\":\"s1.safetensors\","
          "\"y\":\"s2.safetensors\"}}", f);
    fclose(f);
  }
  AmkDiagEngine *d = amk_diag_new(stderr);
  AmkSafetensors *st = amk_safetensors_open(index, d);
  CHECK(c, st && amk_safetensors_count(st) == 2 &&
               amk_safetensors_file_count(st) == 2);
  const AmkStTensor *y = st ? amk_safetensors_find(st, "y") : NULL;
  float y0 = 0.0f;
  if (y)
    memcpy(&y0, y->data, sizeof y0); /* tensor data need not be aligned */
  CHECK(c, y0 == 0.5f);
  CHECK_STR(c, y ? y->file : NULL, p2);
  amk_safetensors_close(st);
  amk_diag_free(d);

  /* The index promises a tensor the shard lacks. */
  f = fopen(index, "w");
  if (f) {
    fputs("{\"weight_map\":{\"x\":\"s1.safetensors\",\"z\":\"s2.safetensors\"}}", f);
    fclose(f);
  }
  expect_error(c, index, "tensor 'z' is listed in the index but missing from");
  /* The same tensor in two shards. */
  write_raw(p2, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
            UINT64_MAX, six, 4);
  f = fopen(index, "w");
  if (f) {
    fputs("{\"weight_map\":{\"x\":\"s1.safetensors\",\"w\":\"s2.safetensors\"}}", f);
    fclose(f);
  }
  expect_error_naming(c, index, p2, "tensor 'x' appears twice (also in");
  f = fopen(index, "w");
  if (f) {
    fputs("{\"weight_map\":[]}", f);
    fclose(f);
  }
  expect_error(c, index, "missing or non-object 'weight_map'");
  f = fopen(index, "w");
  if (f) {
    fputs("{\"weight_map\":{\"x\":\"/etc/passwd\"}}", f);
    fclose(f);
  }
  expect_error(c, index, "must name a file inside the checkpoint's folder");
  remove(p1);
  remove(p2);
  remove(index);
}

/* A header of {} or only __metadata__ is a valid checkpoint with no tensors
 * (it used to hand qsort a NULL array). */
static void test_no_tensors(UnitCounts *c, const Scratch *s) {
  char path[160];
  snprintf(path, sizeof path, "%s/empty.safetensors", s->dir);
  const char *headers[] = {"{}", "{\"__metadata__\":{\"format\":\"pt\"}}  "};
  for (size_t i = 0; i < 2; i++) {
    write_raw(path, headers[i], UINT64_MAX, NULL, 0);
    AmkDiagEngine *d = amk_diag_new(stderr);
    AmkSafetensors *st = amk_safetensors_open(path, d);
    CHECK(c, st != NULL);
    if (st) {
      CHECK(c, amk_safetensors_count(st) == 0);
      CHECK(c, amk_safetensors_find(st, "w") == NULL);
    }
    amk_safetensors_close(st);
    amk_diag_free(d);
  }
  remove(path);
}

/* A file in memory reads as the same file on disk: tensors point into the
 * caller's bytes and name the given name; errors name it too. */
static void test_memory(UnitCounts *c) {
  const char *header =
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";
  size_t header_len = strlen(header);
  unsigned char bytes[8 + 128 + 24];
  for (int i = 0; i < 8; i++)
    bytes[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
  memcpy(bytes + 8, header, header_len);
  memcpy(bytes + 8 + header_len, six, 24);
  size_t size = 8 + header_len + 24;
  AmkDiagEngine *d = amk_diag_new(stderr);
  amk_diag_set_capture(d, 1);
  AmkSafetensors *st = amk_safetensors_open_memory("mem.safetensors", bytes,
                                                   size, d);
  CHECK(c, st != NULL);
  if (st) {
    CHECK(c, amk_safetensors_count(st) == 1);
    CHECK(c, amk_safetensors_file_count(st) == 1);
    const AmkStTensor *w = amk_safetensors_find(st, "w");
    CHECK(c, w && w->data == bytes + 8 + header_len && w->nbytes == 24);
    CHECK(c, w && strcmp(w->file, "mem.safetensors") == 0);
  }
  amk_safetensors_close(st);
  /* Cut short: the reader's own message, naming the given name. */
  st = amk_safetensors_open_memory("mem.safetensors", bytes, size - 1, d);
  CHECK(c, st == NULL);
  CHECK(c, amk_diag_captured_count(d) == 1 &&
               strstr(amk_diag_captured(d, 0)->message,
                      "mem.safetensors: tensor 'w': data_offsets [0, 24] point "
                      "past the end of the data (23 bytes)"));
  /* Nothing at all: too short for the length, and no NULL dereferenced. */
  st = amk_safetensors_open_memory("none", NULL, 0, d);
  CHECK(c, st == NULL && amk_diag_error_count(d) == 2);
  amk_diag_free(d);
}

static void test_corruptions(UnitCounts *c, const Scratch *s) {
  char path[160];
  snprintf(path, sizeof path, "%s/bad.safetensors", s->dir);
  const char *ok_entry =
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";

  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite("\x05\x00\x00", 1, 3, f);
    fclose(f);
  }
  expect_error(c, path, "truncated file: 3 bytes, too short for the 8-byte "
                        "header length");
  write_raw(path, ok_entry, strlen(ok_entry) + 25, six, 24);
  expect_error(c, path, "points past the end of the file");
  write_raw(path, ok_entry, (uint64_t)1 << 40, six, 24);
  expect_error(c, path, "exceeds the 104857600-byte limit");
  expect_header_error(c, path,
                      "{\"w\": {\"dtype\": ",
                      "header is not valid JSON");
  expect_header_error(c, path, "[1, 2]", "header is not a JSON object");
  expect_header_error(c, path,
                      "{\"w\":[]}",
                      "tensor 'w': header entry is not an object");
  expect_header_error(c, path,
                      "{\"w\":{\"shape\":[2,3],\"data_offsets\":[0,24]}}",
                      "tensor 'w': missing or non-string 'dtype'");
  expect_header_error(c, path,
                      "{\"w\":{\"dtype\":\"F33\",\"shape\":[2,3],\"data_offsets\":[0,24]}}",
                      "tensor 'w': unknown dtype 'F33'");
  expect_header_error(c, path,
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-3],\"data_offsets\":[0,24]}}",
                      "tensor 'w': shape[1] is not a non-negative integer");
  expect_header_error(c, path,
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,24]}}",
                      "tensor 'w': shape[0] is not a non-negative integer");
  expect_header_error(c, path,
                      "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                      "\"data_offsets\":[0,1]}}",
                      "tensor 'w': rank 9 exceeds the limit of 8");
  expect_header_error(c, path,
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3]}}",
                      "tensor 'w': 'data_offsets' must be a list of two integers");
  expect_header_error(c, path,
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[24,0]}}",
                      "tensor 'w': data_offsets [24, 0] end before they begin");
  expect_header_error(c, path,
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,48]}}",
                      "tensor 'w': data_offsets [0, 48] point past the end of "
                      "the data (24 bytes)");
  write_raw(path, ok_entry, UINT64_MAX, six, 10); /* data cut short */
  expect_error(c, path, "the file is truncated or corrupt");
  expect_header_error(c, path,
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,24]}}",
                      "tensor 'w': shape [2, 2] of F32 needs 16 bytes but "
                      "data_offsets [0, 24] span 24");
  expect_header_error(c, path,
                      "{\"w\":{\"dtype\":\"I64\",\"shape\":[4294967296,4294967296],"
                      "\"data_offsets\":[0,24]}}",
                      "tensor 'w': shape [4294967296, 4294967296] is too large");
  expect_header_error(c, path,
                      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
                      "tensors 'a' [0, 16) and 'b' [8, 24) overlap");
  /* A later tensor nested inside an earlier, longer one. */
  expect_header_error(c, path,
                      "{\"a\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]},"
                      "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[16,20]}}",
                      "tensors 'a' [0, 24) and 'b' [12, 16) overlap");
  expect_header_error(c, path,
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                      "header: duplicate key 'w'");
  expect_header_error(c, path,
                      "{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[6],"
                      "\"data_offsets\":[0,24]}}",
                      "header: duplicate key 'w.dtype'");
  expect_header_error(c, path,
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}"
                      "  x ",
                      "header: unexpected byte 0x78 after the JSON object (at "
                      "byte 59 of 61); only spaces may pad it");
  expect_header_error(c, path,
                      "{\"w\\u0000x\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                      "\"data_offsets\":[0,24]}}",
                      "header: 'w\\u0000x': a string holding U+0000");
  remove(path);
  snprintf(path, sizeof path, "%s/absent.safetensors", s->dir);
  expect_error(c, path, "cannot open");
  expect_error(c, s->dir, "no model.safetensors or model.safetensors.index.json");
}

/* amk_safetensors_write: what it writes opens with the same tensors and
 * bytes, each aligned for its dtype (wider elements first, header padded
 * to 8); metadata is kept; a wrong size or a repeated name is refused and
 * leaves no file; amk_safetensors_read_f32 reads stretches of it. */
static void test_write(UnitCounts *c, const Scratch *s) {
  char path[160];
  snprintf(path, sizeof path, "%s/written.safetensors", s->dir);
  const uint8_t odd[3] = {7, 8, 9};
  const uint16_t halves[3] = {amk_f32_to_f16(1.5f), amk_f32_to_f16(-2.0f),
                              amk_f32_to_f16(0.25f)};
  AmkStWriteTensor t[3] = {
      {.name = "u8", .dtype = AMK_ST_U8, .rank = 1, .shape = {3}, .data = odd, .nbytes = 3},
      {.name = "h", .dtype = AMK_ST_F16, .rank = 2, .shape = {1, 3}, .data = halves,
       .nbytes = 6},
      {.name = "f", .dtype = AMK_ST_F32, .rank = 2, .shape = {2, 3}, .data = six, .nbytes = 24},
  };
  static const char *const meta[] = {"format", "pt", NULL};
  AmkDiagEngine *d = amk_diag_new(stderr);
  CHECK(c, amk_safetensors_write(path, t, 3, meta, d));
  AmkSafetensors *st = amk_safetensors_open(path, d);
  CHECK(c, st && amk_safetensors_count(st) == 3);
  for (int i = 0; st && i < 3; i++) {
    const AmkStTensor *got = amk_safetensors_find(st, t[i].name);
    CHECK(c, got && got->dtype == t[i].dtype && got->rank == t[i].rank &&
                 got->nbytes == t[i].nbytes && memcmp(got->data, t[i].data, t[i].nbytes) == 0 &&
                 (uintptr_t)got->data % amk_st_dtype_size(t[i].dtype) == 0);
  }
  float row[2];
  const AmkStTensor *h = st ? amk_safetensors_find(st, "h") : NULL;
  if (h) {
    amk_safetensors_read_f32(h, 1, 2, row);
    CHECK(c, row[0] == -2.0f && row[1] == 0.25f);
  }
  amk_safetensors_close(st);
  FILE *f = fopen(path, "rb");
  char head[64] = "";
  CHECK(c, f && fread(head, 1, sizeof head - 1, f) > 0);
  if (f)
    fclose(f);
  CHECK(c, strstr(head + 8, "\"__metadata__\":{\"format\":\"pt\"}") != NULL);
  remove(path);
  amk_diag_set_capture(d, 1);
  AmkStWriteTensor bad[2] = {t[2], t[2]};
  CHECK(c, !amk_safetensors_write(path, bad, 2, NULL, d));
  CHECK(c, access(path, F_OK) != 0);
  bad[1].name = "g";
  bad[1].nbytes = 20;
  CHECK(c, !amk_safetensors_write(path, bad, 2, NULL, d));
  CHECK(c, amk_diag_captured_count(d) == 2 &&
               strstr(amk_diag_captured(d, 0)->message, "a second tensor of that name") &&
               strstr(amk_diag_captured(d, 1)->message, "its bytes are not its shape's"));
  CHECK(c, access(path, F_OK) != 0);
  amk_diag_free(d);
}

int main(void) {
  UnitCounts c = {0, 0};
  Scratch s;
  const char *tmp = getenv("TMPDIR");
  snprintf(s.dir, sizeof s.dir, "%s/amk-st-XXXXXX",
           tmp && strlen(tmp) < 40 ? tmp : "/tmp");
  if (!mkdtemp(s.dir)) {
    perror("mkdtemp");
    return 1;
  }
  CHECK(&c, amk_st_dtype_from_name("BF16") == AMK_ST_BF16);
  CHECK(&c, amk_st_dtype_from_name("bf16") == -1);
  CHECK(&c, amk_st_dtype_size(AMK_ST_F64) == 8);
  CHECK(&c, amk_st_dtype_to_ir(AMK_ST_F16) == AMK_DTYPE_F16);
  CHECK(&c, amk_st_dtype_to_ir(AMK_ST_I64) == -1);
  test_valid(&c, &s);
  test_index(&c, &s);
  test_no_tensors(&c, &s);
  test_corruptions(&c, &s);
  test_memory(&c);
  test_write(&c, &s);
  rmdir(s.dir);
  return unit_finish("test_safetensors", &c);
}
