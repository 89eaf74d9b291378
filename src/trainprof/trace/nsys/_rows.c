/* trainprof.trace.nsys._rows: the rows of one query over an Nsight Systems export, column by
 * column, without a Python tuple per row (trace/nsys/schema.py, Export.fetch).
 *
 * SQLite's C API is reached at run time: the library is the one Python's own sqlite3 module
 * uses (dlopen of that module's file, then dlsym, which searches the module and the libraries
 * it was linked against), so nothing here needs SQLite's headers or links against it; the few
 * prototypes are declared below. Where the symbols cannot be found (a Python whose sqlite3 is
 * linked statically with hidden symbols, Windows), fetch raises OSError and schema.py reads the
 * rows through the sqlite3 module instead, into the same arrays.
 *
 * fetch(module_file, uri, sql, spec) opens `uri` read-only, steps `sql` once and returns
 * (ints, texts): `spec` has one letter per result column, 'i' for an integer column, 't' for a
 * text column. `ints` is a bytearray of int64, row-major, the 'i' columns of each row in order;
 * a value that is not an integer raises ValueError. For each 't' column, `texts` holds
 * (codes, values) ('n': two of them): `codes` a bytearray of int32, the index of each row's
 * text in `values`, the list of its distinct texts in the order they first appear (-1 for
 * NULL); a text seen before is found by its UTF-8 bytes in a hash table, without making a
 * Python string. A SQLite error raises RuntimeError with SQLite's message.
 *
 * 'n' is an NVTX range's text (NULL read as ""), cut as torch's emit_nvtx writes it,
 * `<op>[, seq = N][, op_id = N][, sizes = [[...]]][, input_op_ids = [...]]`, into two text
 * columns of `texts`: the key, "T<op>" when a torch field follows the text's first ", " and
 * "X<text>" otherwise (trace/nsys/nvtx.py cuts those once per distinct text), and the sizes
 * text (NULL when absent or for an "X" key). schema.nvtx_key is the same cut in Python. The
 * separators are ASCII, so cutting UTF-8 bytes cuts at the same characters as Python does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#ifndef _WIN32
#include <dlfcn.h>
#endif

#define SQLITE_OK 0
#define SQLITE_ROW 100
#define SQLITE_DONE 101
#define SQLITE_INTEGER 1
#define SQLITE_NULL 5
#define SQLITE_OPEN_READONLY 0x00000001
#define SQLITE_OPEN_URI 0x00000040
#define SQLITE_OPEN_NOMUTEX 0x00008000
#define MAX_COLUMNS 64

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;
typedef struct sqlite3_value sqlite3_value;

static struct {
    int (*open_v2)(const char *, sqlite3 **, int, const char *);
    int (*close)(sqlite3 *);
    int (*prepare_v2)(sqlite3 *, const char *, int, sqlite3_stmt **, const char **);
    int (*step)(sqlite3_stmt *);
    int (*finalize)(sqlite3_stmt *);
    int (*column_count)(sqlite3_stmt *);
    int (*column_type)(sqlite3_stmt *, int);
    const unsigned char *(*column_text)(sqlite3_stmt *, int);
    int (*column_bytes)(sqlite3_stmt *, int);
    sqlite3_value *(*column_value)(sqlite3_stmt *, int);
    int (*value_type)(sqlite3_value *);
    int64_t (*value_int64)(sqlite3_value *);
    const char *(*errmsg)(sqlite3 *);
    int loaded;
} api;

/* Fill `api` from the library behind `module_file`; 0 on success, -1 with OSError set. */
static int load_api(const char *module_file) {
    if (api.loaded) return 0;
#ifdef _WIN32
    (void)module_file;
    PyErr_SetString(PyExc_OSError, "no dlopen on Windows");
    return -1;
#else
    void *lib = dlopen(module_file, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        PyErr_Format(PyExc_OSError, "dlopen: %s", dlerror());
        return -1;
    }
    struct { void **slot; const char *name; } wanted[] = {
        {(void **)&api.open_v2, "sqlite3_open_v2"}, {(void **)&api.close, "sqlite3_close"},
        {(void **)&api.prepare_v2, "sqlite3_prepare_v2"}, {(void **)&api.step, "sqlite3_step"},
        {(void **)&api.finalize, "sqlite3_finalize"},
        {(void **)&api.column_count, "sqlite3_column_count"},
        {(void **)&api.column_type, "sqlite3_column_type"},
        {(void **)&api.column_text, "sqlite3_column_text"},
        {(void **)&api.column_bytes, "sqlite3_column_bytes"},
        {(void **)&api.column_value, "sqlite3_column_value"},
        {(void **)&api.value_type, "sqlite3_value_type"},
        {(void **)&api.value_int64, "sqlite3_value_int64"},
        {(void **)&api.errmsg, "sqlite3_errmsg"},
    };
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        *wanted[i].slot = dlsym(lib, wanted[i].name);
        if (*wanted[i].slot == NULL) {
            PyErr_Format(PyExc_OSError, "%s not found beside %s", wanted[i].name, module_file);
            return -1;  /* the handle stays open: the library is Python's own, loaded anyway */
        }
    }
    api.loaded = 1;
    return 0;
#endif
}

/* A text column: its codes, its distinct texts, and a hash table of their UTF-8 bytes, so that
 * a text seen before costs a hash and a compare, not a Python string. */
typedef struct {
    PyObject *codes;   /* bytearray of int32 */
    PyObject *values;  /* list of str */
    int32_t *slots;    /* open addressing: a code, or -1 for an empty slot */
    uint64_t *hashes;  /* the hash of each code's bytes */
    Py_ssize_t *offsets, *sizes;  /* each code's bytes in `arena` */
    char *arena;
    Py_ssize_t mask, count, arena_used, arena_size;
} TextColumn;

static void text_column_free(TextColumn *t) {
    Py_XDECREF(t->codes);
    Py_XDECREF(t->values);
    PyMem_Free(t->slots);
    PyMem_Free(t->hashes);
    PyMem_Free(t->offsets);
    PyMem_Free(t->sizes);
    PyMem_Free(t->arena);
}

static uint64_t hash_bytes(const char *text, Py_ssize_t size) {
    uint64_t h = 1469598103934665603ULL;  /* FNV-1a */
    for (Py_ssize_t i = 0; i < size; i++) h = (h ^ (unsigned char)text[i]) * 1099511628211ULL;
    return h;
}

/* Double the table (and the per-code arrays); 0, or -1 with MemoryError set. */
static int grow(TextColumn *t) {
    Py_ssize_t size = t->slots ? 2 * (t->mask + 1) : 1024;
    int32_t *slots = PyMem_Malloc((size_t)size * sizeof *slots);
    uint64_t *hashes = PyMem_Realloc(t->hashes, (size_t)size * sizeof *hashes);
    Py_ssize_t *offsets = PyMem_Realloc(t->offsets, (size_t)size * sizeof *offsets);
    Py_ssize_t *sizes = PyMem_Realloc(t->sizes, (size_t)size * sizeof *sizes);
    if (hashes) t->hashes = hashes;
    if (offsets) t->offsets = offsets;
    if (sizes) t->sizes = sizes;
    if (!slots || !hashes || !offsets || !sizes) {
        PyMem_Free(slots);
        PyErr_NoMemory();
        return -1;
    }
    memset(slots, 0xff, (size_t)size * sizeof *slots);
    for (Py_ssize_t c = 0; c < t->count; c++) {
        Py_ssize_t i = (Py_ssize_t)(t->hashes[c] & (uint64_t)(size - 1));
        while (slots[i] >= 0) i = (i + 1) & (size - 1);
        slots[i] = (int32_t)c;
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->mask = size - 1;
    return 0;
}

/* A new code for `size` bytes at `text` (hash `h`) put in slot `i`; -2 with an error set. */
static int32_t add_text(TextColumn *t, const char *text, Py_ssize_t size, uint64_t h,
                        Py_ssize_t i) {
    PyObject *value = PyUnicode_DecodeUTF8(text, size, NULL);
    if (value == NULL) return -2;
    int failed = PyList_Append(t->values, value);
    Py_DECREF(value);
    if (failed) return -2;
    if (t->arena_used + size > t->arena_size) {
        Py_ssize_t want = t->arena_size ? 2 * t->arena_size : 65536;
        while (want < t->arena_used + size) want *= 2;
        char *arena = PyMem_Realloc(t->arena, (size_t)want);
        if (arena == NULL) {
            PyErr_NoMemory();
            return -2;
        }
        t->arena = arena;
        t->arena_size = want;
    }
    memcpy(t->arena + t->arena_used, text, (size_t)size);
    int32_t code = (int32_t)t->count++;
    t->hashes[code] = h;
    t->offsets[code] = t->arena_used;
    t->sizes[code] = size;
    t->arena_used += size;
    t->slots[i] = code;
    return code;
}

/* The code of `size` bytes at `text` in `t`, interned (-2 with a Python error set). */
static int32_t intern(const char *text, Py_ssize_t size, TextColumn *t) {
    if ((t->count + 1) * 2 > t->mask + 1 && grow(t) < 0) return -2;
    uint64_t h = hash_bytes(text, size);
    Py_ssize_t i = (Py_ssize_t)(h & (uint64_t)t->mask);
    for (;; i = (i + 1) & t->mask) {
        int32_t code = t->slots[i];
        if (code < 0) return add_text(t, text, size, h, i);
        if (t->hashes[code] == h && t->sizes[code] == size &&
            memcmp(t->arena + t->offsets[code], text, (size_t)size) == 0)
            return code;
    }
}

/* Append `size` bytes to a bytearray, doubling its allocation as it grows. */
static int append(PyObject *array, Py_ssize_t *used, const void *data, Py_ssize_t size) {
    Py_ssize_t have = PyByteArray_GET_SIZE(array);
    if (*used + size > have) {
        Py_ssize_t want = have < 4096 ? 4096 : have;
        while (want < *used + size) want *= 2;
        if (PyByteArray_Resize(array, want) < 0) return -1;
    }
    memcpy(PyByteArray_AS_STRING(array) + *used, data, (size_t)size);
    *used += size;
    return 0;
}

static int32_t text_code(sqlite3_stmt *stmt, int col, TextColumn *t) {
    if (api.column_type(stmt, col) == SQLITE_NULL) return -1;
    const unsigned char *text = api.column_text(stmt, col);
    return intern((const char *)text, api.column_bytes(stmt, col), t);
}

static const char *find(const char *hay, Py_ssize_t n, const char *needle) {
    size_t k = strlen(needle);
    for (Py_ssize_t i = 0; i + (Py_ssize_t)k <= n; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, k) == 0) return hay + i;
    return NULL;
}

static int starts(const char *s, Py_ssize_t n, const char *prefix) {
    size_t k = strlen(prefix);
    return (Py_ssize_t)k <= n && memcmp(s, prefix, k) == 0;
}

static char *scratch;
static Py_ssize_t scratch_size;

/* `prefix` then `size` bytes of `text`, interned in `t`. */
static int32_t intern_prefixed(char prefix, const char *text, Py_ssize_t size, TextColumn *t) {
    if (size + 1 > scratch_size) {
        char *grown = PyMem_Realloc(scratch, (size_t)(size + 1) * 2);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -2;
        }
        scratch = grown;
        scratch_size = (size + 1) * 2;
    }
    scratch[0] = prefix;
    memcpy(scratch + 1, text, (size_t)size);
    return intern(scratch, size + 1, t);
}

/* The key and sizes codes of an NVTX text (see 'n' above); -1 with a Python error set. */
static int nvtx_codes(sqlite3_stmt *stmt, int col, TextColumn *t, int32_t out[2]) {
    const char *text = (const char *)api.column_text(stmt, col);
    Py_ssize_t n = text ? api.column_bytes(stmt, col) : 0;
    const char *comma = text ? find(text, n, ", ") : NULL;
    out[1] = -1;
    if (comma != NULL && comma > text) {
        const char *rest = comma + 2;
        Py_ssize_t left = n - (rest - text);
        if (starts(rest, left, "seq = ") || starts(rest, left, "op_id = ") ||
            starts(rest, left, "sizes = ")) {
            out[0] = intern_prefixed('T', text, comma - text, &t[0]);
            if (out[0] == -2) return -1;
            const char *at = find(rest, left, "sizes = ");
            if (at != NULL) {
                const char *z = at + 8;
                const char *end = find(z, n - (z - text), ", input_op_ids = ");
                out[1] = intern(z, (end ? end : text + n) - z, &t[1]);
                if (out[1] == -2) return -1;
            }
            return 0;
        }
    }
    out[0] = intern_prefixed('X', text ? text : "", n, &t[0]);
    return out[0] == -2 ? -1 : 0;
}

/* Step every row into the buffers; 0 when done, -1 with a Python error set. */
static int read_rows(sqlite3 *db, sqlite3_stmt *stmt, const char *spec, int n, PyObject *ints,
                     TextColumn *texts, Py_ssize_t *used) {
    int64_t row[MAX_COLUMNS];
    int step;
    while ((step = api.step(stmt)) == SQLITE_ROW) {
        int k = 0, t = 0;
        for (int c = 0; c < n; c++) {
            if (spec[c] == 'i') {
                /* One column call, then the value's own accessors (each sqlite3_column_*
                 * call looks the column up again). */
                sqlite3_value *value = api.column_value(stmt, c);
                if (api.value_type(value) != SQLITE_INTEGER) {
                    PyErr_Format(PyExc_ValueError, "column %d holds a value that is not an "
                                 "integer", c);
                    return -1;
                }
                row[k++] = api.value_int64(value);
            } else if (spec[c] == 't') {
                int32_t code = text_code(stmt, c, &texts[t]);
                if (code == -2) return -1;
                if (append(texts[t].codes, &used[1 + t], &code, sizeof code) < 0) return -1;
                t++;
            } else {
                int32_t codes[2];
                if (nvtx_codes(stmt, c, &texts[t], codes) < 0) return -1;
                if (append(texts[t].codes, &used[1 + t], &codes[0], sizeof codes[0]) < 0 ||
                    append(texts[t + 1].codes, &used[2 + t], &codes[1], sizeof codes[1]) < 0)
                    return -1;
                t += 2;
            }
        }
        if (k && append(ints, &used[0], row, (Py_ssize_t)(k * sizeof(int64_t))) < 0) return -1;
    }
    if (step != SQLITE_DONE) {
        PyErr_Format(PyExc_RuntimeError, "%s", api.errmsg(db));
        return -1;
    }
    return 0;
}

static PyObject *run(sqlite3 *db, const char *sql, const char *spec, int n) {
    sqlite3_stmt *stmt = NULL;
    if (api.prepare_v2(db, sql, -1, &stmt, NULL) != SQLITE_OK) {
        PyErr_Format(PyExc_RuntimeError, "%s", api.errmsg(db));
        return NULL;
    }
    PyObject *result = NULL;
    TextColumn texts[2 * MAX_COLUMNS];
    Py_ssize_t used[2 * MAX_COLUMNS + 1] = {0};
    int n_text = 0;
    PyObject *ints = PyByteArray_FromStringAndSize(NULL, 0);
    if (ints == NULL) goto done;
    if (api.column_count(stmt) != n) {
        PyErr_Format(PyExc_ValueError, "the query has %d columns, the spec %d",
                     api.column_count(stmt), n);
        goto done;
    }
    int n_new = 0;
    for (int c = 0; c < n; c++) n_new += spec[c] == 't' ? 1 : spec[c] == 'n' ? 2 : 0;
    for (int c = 0; c < n_new; c++) {
        memset(&texts[n_text], 0, sizeof texts[n_text]);
        texts[n_text].codes = PyByteArray_FromStringAndSize(NULL, 0);
        texts[n_text].values = PyList_New(0);
        n_text++;
        if (!texts[n_text - 1].codes || !texts[n_text - 1].values) goto done;
    }
    if (read_rows(db, stmt, spec, n, ints, texts, used) < 0) goto done;
    if (PyByteArray_Resize(ints, used[0]) < 0) goto done;
    PyObject *out_texts = PyList_New(n_text);
    if (out_texts == NULL) goto done;
    for (int t = 0; t < n_text; t++) {
        if (PyByteArray_Resize(texts[t].codes, used[1 + t]) < 0) {
            Py_DECREF(out_texts);
            goto done;
        }
        PyObject *pair = Py_BuildValue("(OO)", texts[t].codes, texts[t].values);
        if (pair == NULL) {
            Py_DECREF(out_texts);
            goto done;
        }
        PyList_SET_ITEM(out_texts, t, pair);
    }
    result = Py_BuildValue("(ON)", ints, out_texts);
done:
    api.finalize(stmt);
    Py_XDECREF(ints);
    for (int t = 0; t < n_text; t++) text_column_free(&texts[t]);
    return result;
}

PyDoc_STRVAR(fetch_doc, "fetch(module_file, uri, sql, spec) -> (ints, [(codes, values), ...])");

static PyObject *fetch(PyObject *module, PyObject *args) {
    const char *module_file, *uri, *sql, *spec;
    (void)module;
    if (!PyArg_ParseTuple(args, "ssss", &module_file, &uri, &sql, &spec)) return NULL;
    int n = (int)strlen(spec);
    if (n > MAX_COLUMNS || strspn(spec, "itn") != (size_t)n) {
        PyErr_SetString(PyExc_ValueError, "spec: up to 64 letters, each 'i', 't' or 'n'");
        return NULL;
    }
    if (load_api(module_file) < 0) return NULL;
    sqlite3 *db = NULL;
    /* NOMUTEX: the connection is this call's own, so SQLite need not lock it around each
     * column read (a third of a kernel table's fetch where the library is threadsafe). */
    int flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX;
    if (api.open_v2(uri, &db, flags, NULL) != SQLITE_OK) {
        PyErr_Format(PyExc_RuntimeError, "%s", db ? api.errmsg(db) : "cannot open");
        api.close(db);
        return NULL;
    }
    PyObject *result = run(db, sql, spec, n);
    api.close(db);
    return result;
}

static PyMethodDef methods[] = {
    {"fetch", fetch, METH_VARARGS, fetch_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "trainprof.trace.nsys._rows",
    "The rows of a query over an Nsight Systems export, column by column (schema.py).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__rows(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "VERSION", 1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
