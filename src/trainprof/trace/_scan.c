/* trainprof.trace._scan: one pass over a piece of a Kineto trace's event array.
 *
 * A piece is the JSON text `[ {event}, {event}, ... ]` (trace/stream.py cuts it). scan(piece)
 * returns, for every event in order, the fields ColumnBuilder reads (trace/columns.py).
 * scan_range(buffer, start, cut_after) reads the events `{event}, {event}, ...` from
 * buffer[start] on, in place, up to the first event that closes at or after cut_after and is
 * followed by `,` and the next event's `{` (the cut trace/stream.py makes), as if they were the
 * piece `[ ... ]`; it also returns where that event ends and where the next starts. The fields:
 *
 *   - "span" fields (typed Any or msgspec.Raw in trace/decode.py: ph, cat, name, pid, tid,
 *     args.device, args["Input Dims"], args.grid, ...): the code of the value's exact JSON text
 *     in a table of the piece's unique texts (-1: absent). Python decodes each unique text once.
 *   - "number" fields (ts, dur, args.flops, args.Bytes, ...): a double; NaN for null or absent
 *     (dur: 0.0 when absent, its default).
 *   - "id" fields (id, args.correlation, args["External id"], args["external id"]): an int64;
 *     INT64_MIN for null or absent.
 *   - whether the event has an args object.
 *   - the codes of its (cat, name), (pid, tid) and launch-detail tuples of span codes, in
 *     tables of the piece's unique tuples: Python maps each unique tuple once.
 *
 * It returns None (and the caller decodes the piece with msgspec, which names any problem or
 * repairs it) whenever it cannot be sure that msgspec would decode the piece into exactly these
 * values: invalid JSON (a cut inside a string included), an entry that is not an object, args
 * that are neither an object nor null, ts/dur that are not numbers, an id that is not an
 * integer in int64, a number field holding something other than a number, a duplicate or
 * escaped key, an integer outside int64 or a float that overflows or underflows anywhere,
 * invalid UTF-8, a lone surrogate escape, nesting deeper than MAX_DEPTH.
 *
 * JSON grammar handled (RFC 8259, strictly):
 *   value  = object | array | string | number | true | false | null
 *   object = '{' ws [ string ws ':' ws value ws *( ',' ws string ws ':' ws value ws ) ] '}'
 *   array  = '[' ws [ value ws *( ',' ws value ws ) ] ']'
 *   number = [ '-' ] ( '0' | [1-9] *digit ) [ '.' 1*digit ] [ ( 'e' | 'E' ) [ '+' | '-' ] 1*digit ]
 *   string = '"' *( unescaped | '\' ( '"' | '\' | '/' | 'b' | 'f' | 'n' | 'r' | 't' | 'u' 4hex ) ) '"'
 *   ws     = *( ' ' | '\t' | '\n' | '\r' )
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Bumped whenever the result's layout changes; trace/scan.py refuses a build of another. */
#define SCAN_VERSION 3
#define MAX_DEPTH 64

/* The index of the lowest bit set in x (x != 0). */
#if defined(_MSC_VER)
#include <intrin.h>
static inline int lowest_bit(uint64_t x) {
    unsigned long i;
    _BitScanForward64(&i, x);
    return (int)i;
}
#else
#define lowest_bit(x) __builtin_ctzll(x)
#endif

/* ---- the fields read -------------------------------------------------------------------- */

enum kind { SPAN, NUMBER, ID, ARGS };

typedef struct {
    const char *key;
    enum kind kind;
    int column;  /* index among the fields of its kind */
    Py_ssize_t len;  /* strlen(key), set when the module loads */
    int next;  /* the next field in the same slot of its key index (-1: none), set then too */
    uint64_t word;  /* its first 8 bytes (zeros after a shorter key), set then too */
} Field;

/* Event-level keys. The order of each kind's columns is the layout trace/scan.py reads. */
static Field EVENT_FIELDS[] = {
    {"ph", SPAN, 0}, {"cat", SPAN, 1}, {"name", SPAN, 2}, {"pid", SPAN, 3}, {"tid", SPAN, 4},
    {"ts", NUMBER, 0}, {"dur", NUMBER, 1}, {"id", ID, 0}, {"args", ARGS, 0},
};
#define N_EVENT_FIELDS (sizeof(EVENT_FIELDS) / sizeof(Field))

/* Keys of "args" (decode._Args). */
static Field ARGS_FIELDS[] = {
    {"device", SPAN, 5}, {"stream", SPAN, 6},
    {"Input Dims", SPAN, 7}, {"Input type", SPAN, 8}, {"Concrete Inputs", SPAN, 9},
    {"Call stack", SPAN, 10},
    {"grid", SPAN, 11}, {"block", SPAN, 12}, {"registers per thread", SPAN, 13},
    {"shared memory", SPAN, 14}, {"Collective name", SPAN, 15}, {"In msg nelems", SPAN, 16},
    {"Out msg nelems", SPAN, 17}, {"Group size", SPAN, 18}, {"dtype", SPAN, 19},
    {"Process Group Name", SPAN, 20}, {"Process Group Ranks", SPAN, 21},
    {"blocks per SM", NUMBER, 2}, {"est. achieved occupancy %", NUMBER, 3}, {"bytes", NUMBER, 4},
    {"flops", NUMBER, 5}, {"Device Type", NUMBER, 6}, {"Device Id", NUMBER, 7},
    {"Bytes", NUMBER, 8}, {"Total Allocated", NUMBER, 9}, {"Total Reserved", NUMBER, 10},
    {"Addr", NUMBER, 11},
    {"correlation", ID, 1}, {"External id", ID, 2}, {"external id", ID, 3},
};
#define N_ARGS_FIELDS (sizeof(ARGS_FIELDS) / sizeof(Field))

#define N_SPAN 22
/* Tuples of span codes interned per event (columns of "tuples"): (cat, name), (pid, tid), and
 * the launch and collective fields (grid ... Process Group Ranks), -1 when it has none. */
#define N_TUPLES 3
#define DETAIL_FIRST 11
#define N_DETAIL 11
#define N_NUMBER 12
#define N_ID 4
#define NO_ID INT64_MIN

/* Whether n bytes at a and b are equal (inline: the texts compared are mostly short). */
static inline int same_bytes(const unsigned char *a, const unsigned char *b, Py_ssize_t n) {
    for (; n >= 8; a += 8, b += 8, n -= 8) {
        uint64_t x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y) return 0;
    }
    if (n >= 4) {
        uint32_t x, y;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        if (x != y) return 0;
        a += 4;
        b += 4;
        n -= 4;
    }
    for (; n > 0; a++, b++, n--)
        if (*a != *b) return 0;
    return 1;
}

/* ---- finding a key ------------------------------------------------------------------------ */

/* Each set of fields is indexed by a hash of a key's length and first 8 bytes (`word`, zeros
 * after a shorter key): a key is compared with the field or two of its slot, not with all. */
#define KEY_SLOTS 64
static int EVENT_SLOTS[KEY_SLOTS], ARGS_SLOTS[KEY_SLOTS];

static inline unsigned key_slot(uint64_t word, Py_ssize_t len) {
    return (unsigned)(((word ^ (uint64_t)len) * 0x9E3779B97F4A7C15ULL) >> 58);
}

static void index_fields(Field *fields, size_t n, int *slots) {
    for (size_t j = 0; j < KEY_SLOTS; j++) slots[j] = -1;
    for (size_t i = n; i-- > 0;) {
        fields[i].len = (Py_ssize_t)strlen(fields[i].key);
        fields[i].word = 0;
        memcpy(&fields[i].word, fields[i].key, fields[i].len < 8 ? (size_t)fields[i].len : 8);
        unsigned j = key_slot(fields[i].word, fields[i].len);
        fields[i].next = slots[j];
        slots[j] = (int)i;
    }
}

/* The index of the field a key (the text between its quotes) names, or -1. `word`: the key's
 * first 8 bytes, zeros after a shorter key. */
static inline int find_field(const Field *fields, const int *slots, const unsigned char *key,
                             Py_ssize_t len, uint64_t word) {
    if (len == 0) return -1;
    for (int i = slots[key_slot(word, len)]; i >= 0; i = fields[i].next)
        if (fields[i].len == len && fields[i].word == word &&
            (len <= 8 || same_bytes((const unsigned char *)fields[i].key + 8, key + 8, len - 8)))
            return i;
    return -1;
}

/* ---- growable buffers --------------------------------------------------------------------- */

typedef struct {
    char *data;
    size_t used, cap;  /* bytes */
} Buffer;

static int buffer_grow(Buffer *b, size_t extra) {
    if (b->used + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->used + extra) cap *= 2;
    char *data = PyMem_Realloc(b->data, cap);
    if (data == NULL) return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

/* ---- the table of unique value texts ------------------------------------------------------ */

typedef struct {
    Py_ssize_t start, len;
    uint64_t hash;
    int32_t code;  /* -1: empty slot */
} Slot;

typedef struct {
    Slot *slots;
    size_t mask;   /* slots - 1, a power of two minus one */
    int32_t count;
    Buffer order;  /* (start, len) of each code, in order of first occurrence */
} Table;

/* A hash of n bytes, eight at a time. A text over 32 bytes long is hashed by its length and
 * its first and last 16 bytes (equal hashes are compared in full anyway): most are names, long
 * ones mostly differ there. */
static inline uint64_t hash_bytes(const unsigned char *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    if (n > 32) {
        uint64_t w[4];
        memcpy(w, p, 16);
        memcpy(w + 2, p + n - 16, 16);
        for (int i = 0; i < 4; i++) {
            h = (h ^ w[i]) * 0xFF51AFD7ED558CCDULL;
            h ^= h >> 32;
        }
        return h ^ (h >> 29);
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, (size_t)n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 29);
}

static int table_init(Table *t) {
    t->mask = 1023;
    t->count = 0;
    t->order = (Buffer){NULL, 0, 0};
    t->slots = PyMem_Malloc((t->mask + 1) * sizeof(Slot));
    if (t->slots == NULL) return -1;
    for (size_t i = 0; i <= t->mask; i++) t->slots[i].code = -1;
    return 0;
}

static void table_free(Table *t) {
    PyMem_Free(t->slots);
    PyMem_Free(t->order.data);
}

static int table_rehash(Table *t) {
    size_t mask = t->mask * 2 + 1;
    Slot *slots = PyMem_Malloc((mask + 1) * sizeof(Slot));
    if (slots == NULL) return -1;
    for (size_t i = 0; i <= mask; i++) slots[i].code = -1;
    for (size_t i = 0; i <= t->mask; i++) {
        if (t->slots[i].code < 0) continue;
        size_t j = t->slots[i].hash & mask;
        while (slots[j].code >= 0) j = (j + 1) & mask;
        slots[j] = t->slots[i];
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->mask = mask;
    return 0;
}

/* The code of base[start:start+len], added when new; -1 on memory error. */
static int32_t table_code(Table *t, const unsigned char *base, Py_ssize_t start, Py_ssize_t len) {
    uint64_t h = hash_bytes(base + start, len);
    size_t j = h & t->mask;
    while (t->slots[j].code >= 0) {
        Slot *s = &t->slots[j];
        if (s->hash == h && s->len == len && same_bytes(base + s->start, base + start, len))
            return s->code;
        j = (j + 1) & t->mask;
    }
    if (buffer_grow(&t->order, 2 * sizeof(Py_ssize_t)) < 0) return -1;
    Py_ssize_t *pair = (Py_ssize_t *)(t->order.data + t->order.used);
    pair[0] = start;
    pair[1] = len;
    t->order.used += 2 * sizeof(Py_ssize_t);
    t->slots[j] = (Slot){start, len, h, t->count};
    int32_t code = t->count++;
    if ((size_t)t->count * 2 > t->mask && table_rehash(t) < 0) return -1;
    return code;
}

/* A table of unique fixed-size tuples of codes (an event's category and name, say): each code's
 * tuple is at keys + code * size, and the table above indexes them. */
typedef struct {
    Table index;
    Buffer keys;
    Py_ssize_t size;  /* bytes */
    int32_t last_code;  /* the code of the last tuple looked up (-1: none yet) */
} Tuples;

static int tuples_init(Tuples *t, Py_ssize_t count) {
    t->keys = (Buffer){NULL, 0, 0};
    t->size = count * (Py_ssize_t)sizeof(int32_t);
    t->last_code = -1;
    return table_init(&t->index);
}

static void tuples_free(Tuples *t) {
    table_free(&t->index);
    PyMem_Free(t->keys.data);
}

/* The code of the tuple `key` (added when new); -1 on memory error. */
static int32_t tuple_code(Tuples *t, const int32_t *key) {
    if (t->last_code >= 0 &&
        same_bytes((const unsigned char *)t->keys.data + (size_t)t->last_code * (size_t)t->size,
                   (const unsigned char *)key, t->size))
        return t->last_code;  /* the same as the last event's */
    if (buffer_grow(&t->keys, (size_t)t->size) < 0) return -1;
    Py_ssize_t start = (Py_ssize_t)t->keys.used;
    memcpy(t->keys.data + start, key, (size_t)t->size);  /* a candidate, kept when new */
    int32_t before = t->index.count;
    int32_t code = table_code(&t->index, (const unsigned char *)t->keys.data, start, t->size);
    if (code >= 0 && t->index.count > before) t->keys.used += (size_t)t->size;
    t->last_code = code;
    return code;
}

/* ---- the output rows ---------------------------------------------------------------------- */

/* One column of the result: a bytes object of `cap` rows of `row` bytes, written in place and
 * cut to the rows used at the end (no copy). */
typedef struct {
    PyObject *bytes;
    Py_ssize_t row;
} Column;

enum { SPANS, NUMBERS, IDS, HAS_ARGS, TUPLE_CODES, N_COLUMNS };
static const Py_ssize_t ROW_BYTES[N_COLUMNS] = {
    N_SPAN * sizeof(int32_t), N_NUMBER * sizeof(double), N_ID * sizeof(int64_t), 1,
    N_TUPLES * sizeof(int32_t),
};

typedef struct {
    Column columns[N_COLUMNS];
    Py_ssize_t count, cap;  /* rows */
} Columns;

/* An event's values before any field is read: absent (-1, NaN, NO_ID; dur 0.0). */
static int32_t EMPTY_SPANS[N_SPAN];
static double EMPTY_NUMBERS[N_NUMBER];
static int64_t EMPTY_IDS[N_ID];

static int columns_init(Columns *c, Py_ssize_t rows) {
    c->count = 0;
    c->cap = rows < 16 ? 16 : rows;
    for (int i = 0; i < N_COLUMNS; i++) {
        c->columns[i].row = ROW_BYTES[i];
        c->columns[i].bytes = PyBytes_FromStringAndSize(NULL, c->cap * ROW_BYTES[i]);
        if (c->columns[i].bytes == NULL) return -1;
    }
    return 0;
}

static void columns_free(Columns *c) {
    for (int i = 0; i < N_COLUMNS; i++) Py_CLEAR(c->columns[i].bytes);
}

/* Room for `rows` rows in every column; -1 on memory error (an exception is set). */
static int columns_resize(Columns *c, Py_ssize_t rows) {
    for (int i = 0; i < N_COLUMNS; i++)
        if (_PyBytes_Resize(&c->columns[i].bytes, rows * c->columns[i].row) < 0) return -1;
    c->cap = rows;
    return 0;
}

static inline char *column_row(Columns *c, int column, Py_ssize_t row) {
    return PyBytes_AS_STRING(c->columns[column].bytes) + row * c->columns[column].row;
}

/* ---- the scanner -------------------------------------------------------------------------- */

/* A span text of at most 16 bytes (ph, pid, tid, most categories...) as two words padded with
 * zeros, and its code: each span column keeps the last few by a hash of the words, so that the
 * event kinds that take turns (ph "X" then "f" then "X"...) find theirs without the table. */
typedef struct {
    uint64_t w0, w1;
    int32_t len, code;  /* len 0: an empty entry (no text is empty) */
} ShortText;
#define RECENT_SLOTS 8

typedef struct {
    const unsigned char *base, *p, *end;
    int depth;
    int failed;  /* a memory error (an exception is set), as opposed to a refusal */
    Table table;
    Tuples tuples[N_TUPLES];
    /* Each span column's last text and code: consecutive events mostly repeat their ph,
     * cat, pid and tid, which then need no hashing. */
    Py_ssize_t last_start[N_SPAN], last_len[N_SPAN];
    int32_t last_code[N_SPAN];
    ShortText recent[N_SPAN][RECENT_SLOTS];
} Scanner;

/* One event's fields while it is read: its row of each column. */
typedef struct {
    int32_t *spans;
    double *numbers;
    int64_t *ids;
    uint8_t has_args;
    uint8_t has_detail;  /* a span of DETAIL_FIRST... was read */
    uint32_t seen_event;  /* bit per EVENT_FIELDS entry: a duplicate key is refused */
    uint32_t seen_args;  /* bit per ARGS_FIELDS entry */
} Event;

/* JSON's whitespace as bits of a 64-bit mask (all are below 64). */
#define WS_BITS ((1ULL << ' ') | (1ULL << '\n') | (1ULL << '\r') | (1ULL << '\t'))

static inline int is_ws(unsigned char c) {
    return c <= ' ' && ((WS_BITS >> c) & 1);
}

static inline int is_digit(unsigned char c) {
    return (unsigned)(c - '0') <= 9u;
}

/* High bits at the bytes of w that are not 0 (exact per byte, no borrow between bytes). */
static inline uint64_t nonzero_bytes(uint64_t w) {
    const uint64_t lows = 0x7F7F7F7F7F7F7F7FULL;
    return (((w & lows) + lows) | w) & ~lows;
}

static inline void skip_ws(Scanner *s) {
    const unsigned char *p = s->p, *end = s->end;
    while (p < end && is_ws(*p)) p++;
    s->p = p;
}

static int hex_value(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Four hex digits at p (which has at least 4 bytes), or -1. */
static int hex4(const unsigned char *p) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int d = hex_value(p[i]);
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Length of the valid UTF-8 sequence (2 to 4 bytes, no overlong form, no surrogate) at p,
 * else 0. */
static int utf8_length(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    int n;
    unsigned char lo = 0x80, hi = 0xBF;  /* bounds of the second byte */
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;  /* U+D800..U+DFFF are not characters */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    if (end - p < n || p[1] < lo || p[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return n;
}

/* The bytes of the word w (8 bytes of text, little-endian) that end a plain run of string
 * characters, as high bits: '"', '\\', a control character (< 0x20) or a byte >= 0x80 (the
 * start of a multi-byte character). The lowest bit set is exact (bits above it may be false
 * hits). */
static inline uint64_t special_bits(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\');
    /* A zero byte in x shows as a high bit in (x - ones) & ~x; bytes >= 0x80 are caught by
     * w's own high bits, so the subtractions' false hits on them do not matter. */
    uint64_t hits = ((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) |
                    ((w - ones * 0x20) & ~w) | w;
    return hits & highs;
}

/* Whether any of 8 bytes at p ends a plain run of string characters. */
static inline int special_in_word(const unsigned char *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return special_bits(w) != 0;
}

static inline int plain_char(unsigned char c) {
    return c >= 0x20 && c != '"' && c != '\\' && c < 0x80;
}

/* The rest of a string from p, its first byte that is not plain (or the end): escapes and
 * multi-byte characters checked. The position after its closing quote, or NULL to refuse. */
static const unsigned char *string_rest(const unsigned char *p, const unsigned char *end,
                                        int *escaped) {
    for (;;) {
        while (end - p >= 8 && !special_in_word(p)) p += 8;
        while (p < end && plain_char(*p)) p++;
        if (p >= end || *p < 0x20) return NULL;  /* unterminated, or a raw control character */
        if (*p == '"') return p + 1;
        if (*p >= 0x80) {
            int n = utf8_length(p, end);
            if (n == 0) return NULL;
            p += n;
            continue;
        }
        *escaped = 1;  /* a backslash */
        if (end - p < 2) return NULL;
        unsigned char e = p[1];
        if (e == 'u') {
            if (end - p < 6) return NULL;
            int u = hex4(p + 2);
            if (u < 0 || (u >= 0xDC00 && u <= 0xDFFF)) return NULL;
            p += 6;
            if (u >= 0xD800 && u <= 0xDBFF) {  /* a high surrogate: its low half must follow */
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u') return NULL;
                int low = hex4(p + 2);
                if (low < 0xDC00 || low > 0xDFFF) return NULL;
                p += 6;
            }
        } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' ||
                   e == 'r' || e == 't') {
            p += 2;
        } else return NULL;
    }
}

/* The index (0 to 7) of the first byte of w that ends a plain run of string characters, or 8;
 * *quote: whether that byte is a '"'. */
static inline int first_special(uint64_t w, int *quote) {
    uint64_t special = special_bits(w);
    if (special == 0) return 8;
    uint64_t first = special & (0 - special);
    *quote = (first & ~nonzero_bytes(w ^ (0x0101010101010101ULL * '"'))) != 0;
    return lowest_bit(first) >> 3;
}

/* A string from its opening quote; *escaped tells whether it held an escape. 0, or -1 to
 * refuse. A \u escape must not leave a surrogate unpaired. */
static inline int scan_string(Scanner *s, int *escaped) {
    const unsigned char *p = s->p + 1, *end = s->end;
    *escaped = 0;
    while (end - p >= 8) {  /* plain runs 8 bytes at a time, up to the closing quote */
        uint64_t w;
        int quote = 0;
        memcpy(&w, p, 8);
        int n = first_special(w, &quote);
        p += n;
        if (quote) {
            s->p = p + 1;
            return 0;
        }
        if (n < 8) break;
    }
    p = string_rest(p, end, escaped);
    if (p == NULL) return -1;
    s->p = p;
    return 0;
}

static const double POWERS_OF_TEN[] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
    1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/* The value of the unsigned decimal [p, end) (digits, an optional fraction and exponent, the
 * grammar already checked) when one IEEE operation gives it correctly rounded: the digits form
 * an integer m < 2**53 and the power of ten is 10**-22 to 10**22, both exact, so m * 10**e or
 * m / 10**-e is rounded once (Clinger's fast path). 0 when it is not so: PyOS_string_to_double
 * reads it instead. */
static int exact_float(const unsigned char *p, const unsigned char *end, double *out) {
    uint64_t m = 0;
    int digits = 0, exponent = 0;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        if (digits || *p != '0') digits++;
        m = m * 10 + (uint64_t)(*p - '0');
        if (digits > 15) return 0;
    }
    if (p < end && *p == '.') {
        for (p++; p < end && *p >= '0' && *p <= '9'; p++) {
            if (digits || *p != '0') digits++;
            m = m * 10 + (uint64_t)(*p - '0');
            exponent--;
            if (digits > 15) return 0;
        }
    }
    if (p < end) {  /* 'e' or 'E' */
        int sign = 1, e = 0;
        p++;
        if (*p == '+' || *p == '-') sign = *p++ == '-' ? -1 : 1;
        for (; p < end; p++) {
            e = e * 10 + (*p - '0');
            if (e > 400) return 0;
        }
        exponent += sign * e;
    }
    if (exponent < -22 || exponent > 22) return 0;
    *out = exponent < 0 ? (double)m / POWERS_OF_TEN[-exponent]
                        : (double)m * POWERS_OF_TEN[exponent];
    return 1;
}

typedef struct {
    int is_integer;  /* no fraction, no exponent, and within int64 */
    int64_t integer;
    double value;
} Number;

/* The value of the 8 decimal digits at p, if they are 8 digits (the classic SWAR reading). */
static inline int eight_digits(const unsigned char *p, uint64_t *out) {
    uint64_t w;
    memcpy(&w, p, 8);
    if ((((w + 0x4646464646464646ULL) | (w - 0x3030303030303030ULL)) & 0x8080808080808080ULL)
        != 0)
        return 0;
    w -= 0x3030303030303030ULL;
    w = (w * 10) + (w >> 8);  /* pairs of digits */
    *out = (((w & 0x000000FF000000FFULL) * 0x000F424000000064ULL) +
            (((w >> 16) & 0x000000FF000000FFULL) * 0x0000271000000001ULL)) >> 32;
    return 1;
}

/* The rest of a number with a fraction or an exponent, from int_end (its '.', 'e' or 'E'). */
static int scan_fraction(Scanner *s, const unsigned char *start, const unsigned char *int_end,
                         int negative, Number *out) {
    const unsigned char *p = int_end, *end = s->end;
    int nonzero = 0;
    if (*p == '.') {
        p++;
        if (p >= end || !is_digit(*p)) return -1;
        while (p < end && is_digit(*p)) p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !is_digit(*p)) return -1;
        while (p < end && is_digit(*p)) p++;
    }
    s->p = p;
    out->is_integer = 0;
    if (exact_float(start + negative, p, &out->value)) {
        if (negative) out->value = -out->value;
        return 0;
    }
    char text[64];
    Py_ssize_t n = p - start;
    if (n >= (Py_ssize_t)sizeof(text)) return -1;  /* no trace writes such a float */
    for (const unsigned char *d = start; d < int_end; d++) nonzero |= (*d > '0' && *d <= '9');
    for (const unsigned char *d = int_end; d < p && *d != 'e' && *d != 'E'; d++)
        nonzero |= (*d > '0' && *d <= '9');
    memcpy(text, start, n);
    text[n] = '\0';
    char *stop;
    double v = PyOS_string_to_double(text, &stop, NULL);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    if (stop != text + n || !isfinite(v)) return -1;
    if (nonzero && fabs(v) < 2.2250738585072014e-308) return -1;  /* underflow: refuse */
    out->value = v;
    return 0;
}

/* A number (grammar above). Refused: an integer outside int64 (msgspec would make it a Python
 * int of any size, or a float), a float that overflows or underflows to 0 or a subnormal.
 * An integer's digits are read once (times and ids mostly are integers). */
static inline __attribute__((always_inline)) int scan_number(Scanner *s, Number *out) {
    const unsigned char *start = s->p, *p = s->p, *end = s->end;
    int negative = 0;
    if (p < end && *p == '-') { negative = 1; p++; }
    if (p >= end || !is_digit(*p)) return -1;
    const unsigned char *digits = p;
    uint64_t m = 0;
    if (*p == '0') {
        p++;
        if (p < end && is_digit(*p)) return -1;  /* no leading zero */
    } else {
        uint64_t eight;
        while (end - p >= 8 && eight_digits(p, &eight)) {  /* times have 16 digits */
            m = m * 100000000 + eight;
            p += 8;
        }
        if (p < end && is_digit(*p)) do {
            m = m * 10 + (uint64_t)(*p - '0');  /* wraps past 19 digits: not used then */
            p++;
        } while (p < end && is_digit(*p));
    }
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E'))
        return scan_fraction(s, start, p, negative, out);
    s->p = p;
    out->is_integer = 1;
    int64_t v;
    if (p - digits <= 18) {  /* below 10**18: fits */
        v = negative ? -(int64_t)m : (int64_t)m;
    } else {
        /* Accumulate as a negative number, checked digit by digit: -2**63 fits, 2**63 does
         * not. */
        v = 0;
        for (const unsigned char *d = digits; d < p; d++) {
            int digit = *d - '0';
            if (v < (INT64_MIN + digit) / 10) return -1;
            v = v * 10 - digit;
        }
        if (!negative) {
            if (v == INT64_MIN) return -1;
            v = -v;
        }
    }
    out->integer = v;
    out->value = (double)v;  /* as msgspec turns an integer into a float: exactly rounded */
    return 0;
}

static int scan_value(Scanner *s);

/* An object or array nested inside a value (not an event, not args). */
static int scan_container(Scanner *s) {
    unsigned char close = *s->p == '{' ? '}' : ']';
    int is_object = close == '}';
    if (++s->depth > MAX_DEPTH) return -1;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        s->depth--;
        return 0;
    }
    for (;;) {
        if (is_object) {
            int escaped;
            if (s->p >= s->end || *s->p != '"' || scan_string(s, &escaped) < 0) return -1;
            skip_ws(s);
            if (s->p >= s->end || *s->p != ':') return -1;
            s->p++;
            skip_ws(s);
        }
        if (scan_value(s) < 0) return -1;
        skip_ws(s);
        if (s->p >= s->end) return -1;
        if (*s->p == ',') {
            s->p++;
            skip_ws(s);
            continue;
        }
        if (*s->p != close) return -1;
        s->p++;
        s->depth--;
        return 0;
    }
}

/* Whether the 4 bytes at p (with at least 4 left before end) are `word`. */
static inline int at_word4(const unsigned char *p, const unsigned char *end, const char *word) {
    return end - p >= 4 && p[0] == word[0] && p[1] == word[1] && p[2] == word[2] &&
           p[3] == word[3];
}

/* Any JSON value, checked and skipped (inline where it is read: a scalar, mostly). */
static inline __attribute__((always_inline)) int scan_value_inline(Scanner *s) {
    if (s->p >= s->end) return -1;
    switch (*s->p) {
    case '{': case '[': return scan_container(s);
    case '"': { int escaped; return scan_string(s, &escaped); }
    case 't':
        if (!at_word4(s->p, s->end, "true")) return -1;
        s->p += 4;
        return 0;
    case 'f':
        if (!at_word4(s->p, s->end, "fals") || s->end - s->p < 5 || s->p[4] != 'e') return -1;
        s->p += 5;
        return 0;
    case 'n':
        if (!at_word4(s->p, s->end, "null")) return -1;
        s->p += 4;
        return 0;
    default: { Number num; return scan_number(s, &num); }
    }
}

static int scan_value(Scanner *s) {
    return scan_value_inline(s);
}

/* The code of a short text (1 to 16 bytes, with 16 readable at start), from the column's
 * recent texts or the table; -1 on memory error. */
static int32_t short_code(Scanner *s, int c, const unsigned char *start, Py_ssize_t len) {
    uint64_t w0, w1;
    memcpy(&w0, start, 8);
    memcpy(&w1, start + 8, 8);
    if (len < 8) {
        w0 &= ~0ULL >> (64 - 8 * len);
        w1 = 0;
    } else if (len < 16) {
        w1 = len == 8 ? 0 : w1 & (~0ULL >> (64 - 8 * (len - 8)));
    }
    ShortText *e = &s->recent[c][((w0 ^ (w1 << 1)) * 0x9E3779B97F4A7C15ULL) >> 61];
    if (e->w0 == w0 && e->w1 == w1 && e->len == len) return e->code;
    int32_t code = table_code(&s->table, s->base, start - s->base, len);
    *e = (ShortText){w0, w1, (int32_t)len, code};
    return code;
}

/* A span field's value: the code of its text. */
static int read_span(Scanner *s, int c, Event *ev) {
    const unsigned char *start = s->p;
    if (scan_value_inline(s) < 0) return -1;
    Py_ssize_t len = s->p - start;
    if (len <= 16 && s->end - start >= 16) {
        int32_t code = short_code(s, c, start, len);
        if (code < 0) { s->failed = 1; return -1; }
        ev->spans[c] = code;
        return 0;
    }
    if (len != s->last_len[c] || !same_bytes(start, s->base + s->last_start[c], len)) {
        int32_t code = table_code(&s->table, s->base, start - s->base, len);
        if (code < 0) { s->failed = 1; return -1; }
        s->last_start[c] = start - s->base;
        s->last_len[c] = len;
        s->last_code[c] = code;
    }
    ev->spans[c] = s->last_code[c];
    return 0;
}

/* One field's value into the event. */
static int read_field(Scanner *s, const Field *f, Event *ev) {
    if (f->kind == SPAN) return read_span(s, f->column, ev);
    if (at_word4(s->p, s->end, "null")) {
        s->p += 4;
        if (f->kind == NUMBER) ev->numbers[f->column] = NAN;
        else ev->ids[f->column] = NO_ID;
        return 0;
    }
    Number num;
    if (s->p >= s->end || (*s->p != '-' && !is_digit(*s->p))) return -1;
    if (scan_number(s, &num) < 0) return -1;
    if (f->kind == NUMBER) {
        ev->numbers[f->column] = num.value;
    } else {
        /* A float where an id is expected, or the integer that marks a missing id. */
        if (!num.is_integer || num.integer == NO_ID) return -1;
        ev->ids[f->column] = num.integer;
    }
    return 0;
}

static int scan_members(Scanner *s, Event *ev, int is_args);

/* The value of an event's "args": null, or an object whose members fill `ev`. */
static int read_args(Scanner *s, Event *ev) {
    if (at_word4(s->p, s->end, "null")) {
        s->p += 4;
        return 0;
    }
    if (s->p >= s->end || *s->p != '{') return -1;  /* msgspec's lenient path */
    s->p++;
    ev->has_args = 1;
    return scan_members(s, ev, 1);
}

/* The members of an event or of its args: `"key": value` pairs up to the closing brace, the
 * opening brace already read. Known keys fill `ev`; others are checked and skipped. */
static int scan_members(Scanner *s, Event *ev, int is_args) {
    const Field *fields = is_args ? ARGS_FIELDS : EVENT_FIELDS;
    const int *slots = is_args ? ARGS_SLOTS : EVENT_SLOTS;
    uint32_t *seen = is_args ? &ev->seen_args : &ev->seen_event;
    if (++s->depth > MAX_DEPTH) return -1;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        s->depth--;
        return 0;
    }
    for (;;) {
        if (s->p >= s->end || *s->p != '"') return -1;
        const unsigned char *key = s->p + 1;
        uint64_t word = 0;
        Py_ssize_t key_len = 8;  /* unless its closing quote is in its first 8 bytes */
        if (s->end - key >= 8) {
            int quote = 0;
            memcpy(&word, key, 8);
            int n = first_special(word, &quote);
            if (quote) {  /* a short plain key */
                key_len = n;
                word = n ? word & (~0ULL >> (64 - 8 * n)) : 0;
                s->p = key + n + 1;
            }
        }
        if (key_len == 8) {  /* a longer key, or one near the end of the text */
            int escaped;
            if (scan_string(s, &escaped) < 0 || escaped) return -1;  /* msgspec would unescape */
            key_len = (s->p - 1) - key;
            word = 0;
            memcpy(&word, key, key_len < 8 ? (size_t)key_len : 8);
        }
        skip_ws(s);
        if (s->p >= s->end || *s->p != ':') return -1;
        s->p++;
        skip_ws(s);
        int index = find_field(fields, slots, key, key_len, word);
        if (index >= 0) {
            const Field *f = &fields[index];
            if (*seen & (1U << index)) return -1;  /* a duplicate key */
            *seen |= 1U << index;
            if (f->kind == ARGS) {
                if (read_args(s, ev) < 0) return -1;
            } else {
                if (f->kind == SPAN && f->column >= DETAIL_FIRST) ev->has_detail = 1;
                if (read_field(s, f, ev) < 0) return -1;
            }
        } else if (scan_value_inline(s) < 0) {
            return -1;
        }
        skip_ws(s);
        if (s->p >= s->end) return -1;
        if (*s->p == ',') {
            s->p++;
            skip_ws(s);
            continue;
        }
        if (*s->p != '}') return -1;
        s->p++;
        s->depth--;
        return 0;
    }
}

/* The codes of the event's (cat, name), (pid, tid) and launch details; -1 on memory error. */
static int tuple_codes(Scanner *s, const Event *ev, int32_t *out) {
    if ((out[0] = tuple_code(&s->tuples[0], ev->spans + 1)) < 0) return -1;  /* cat, name */
    if ((out[1] = tuple_code(&s->tuples[1], ev->spans + 3)) < 0) return -1;  /* pid, tid */
    out[2] = -1;
    if (ev->has_detail) {  /* a detail was read (it may be null: its code is still >= 0) */
        if ((out[2] = tuple_code(&s->tuples[2], ev->spans + DETAIL_FIRST)) < 0) return -1;
    }
    return 0;
}

/* One event from its '{', written into the next row of each column. */
static int scan_event(Scanner *s, Columns *c) {
    if (s->p >= s->end || *s->p != '{') return -1;  /* an entry that is not an event */
    s->p++;
    if (c->count == c->cap && columns_resize(c, c->cap * 2) < 0) {
        s->failed = 1;
        return -1;
    }
    Py_ssize_t row = c->count;
    Event ev = {
        (int32_t *)column_row(c, SPANS, row), (double *)column_row(c, NUMBERS, row),
        (int64_t *)column_row(c, IDS, row), 0, 0, 0, 0,
    };
    memcpy(ev.spans, EMPTY_SPANS, sizeof(EMPTY_SPANS));
    memcpy(ev.numbers, EMPTY_NUMBERS, sizeof(EMPTY_NUMBERS));
    memcpy(ev.ids, EMPTY_IDS, sizeof(EMPTY_IDS));
    if (scan_members(s, &ev, 0) < 0) return -1;
    *(uint8_t *)column_row(c, HAS_ARGS, row) = ev.has_args;
    if (tuple_codes(s, &ev, (int32_t *)column_row(c, TUPLE_CODES, row)) < 0) {
        s->failed = 1;
        return -1;
    }
    c->count++;
    return 0;
}

/* The whole piece: ws '[' ws [ event ws *( ',' ws event ws ) ] ']' ws. */
static int scan_piece(Scanner *s, Columns *c) {
    skip_ws(s);
    if (s->p >= s->end || *s->p != '[') return -1;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
    } else {
        for (;;) {
            if (scan_event(s, c) < 0) return -1;
            skip_ws(s);
            if (s->p >= s->end) return -1;
            if (*s->p == ',') {
                s->p++;
                skip_ws(s);
                continue;
            }
            if (*s->p != ']') return -1;
            s->p++;
            break;
        }
    }
    skip_ws(s);
    return s->p == s->end ? 0 : -1;
}

/* Events from s->p: ws event *( ws ',' ws event ), up to the first event whose closing brace
 * is at or after `cut_after` and which ws ',' ws '{' follows. *cut_end: just after that brace;
 * *next: the '{' of the event that follows. Anything else (the array's end, the buffer's end,
 * whatever the piece would refuse) is refused. */
static int scan_run(Scanner *s, Columns *c, Py_ssize_t cut_after, Py_ssize_t *cut_end,
                    Py_ssize_t *next) {
    skip_ws(s);
    for (;;) {
        if (scan_event(s, c) < 0) return -1;
        Py_ssize_t closed = (s->p - 1) - s->base;
        skip_ws(s);
        if (s->p >= s->end || *s->p != ',') return -1;
        s->p++;
        skip_ws(s);
        if (closed >= cut_after) {
            if (s->p >= s->end || *s->p != '{') return -1;
            *cut_end = closed + 1;
            *next = s->p - s->base;
            return 0;
        }
    }
}

/* ---- the Python functions ----------------------------------------------------------------- */

static PyObject *unique_texts(Scanner *s) {
    PyObject *out = PyList_New(s->table.count);
    if (out == NULL) return NULL;
    const Py_ssize_t *pairs = (const Py_ssize_t *)s->table.order.data;
    for (int32_t i = 0; i < s->table.count; i++) {
        PyObject *b = PyBytes_FromStringAndSize((const char *)s->base + pairs[2 * i],
                                                pairs[2 * i + 1]);
        if (b == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, b);
    }
    return out;
}

static PyObject *as_bytes(const Buffer *b) {
    return PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->used);
}

/* Reads base[start:end] with scan_piece (cut_after < 0) or scan_run; the result tuple (with
 * the cut's end and next start first for scan_run), None to refuse, NULL on error. */
static PyObject *scan_text(const unsigned char *base, Py_ssize_t start, Py_ssize_t end,
                           Py_ssize_t cut_after) {
    Scanner s;
    Columns c;
    PyObject *result = NULL;
    memset(&s, 0, sizeof(s));
    memset(&c, 0, sizeof(c));
    s.base = base;
    s.p = base + start;
    s.end = base + end;
    for (int i = 0; i < N_SPAN; i++) s.last_len[i] = -1;
    if (table_init(&s.table) < 0 || tuples_init(&s.tuples[0], 2) < 0 ||
        tuples_init(&s.tuples[1], 2) < 0 || tuples_init(&s.tuples[2], N_DETAIL) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    /* Events are rarely under 100 bytes: few pieces need their columns grown. */
    if (columns_init(&c, (end - start) / 100) < 0) goto done;
    Py_ssize_t cut_end = 0, next = 0;
    int found = cut_after < 0 ? scan_piece(&s, &c) : scan_run(&s, &c, cut_after, &cut_end, &next);
    if (found < 0) {
        if (s.failed) {
            if (!PyErr_Occurred()) PyErr_NoMemory();
        } else result = Py_NewRef(Py_None);
        goto done;
    }
    if (columns_resize(&c, c.count) < 0) goto done;
    PyObject *texts = unique_texts(&s);
    if (texts == NULL) goto done;
    PyObject *cols[N_COLUMNS];
    for (int i = 0; i < N_COLUMNS; i++) {
        cols[i] = c.columns[i].bytes;
        c.columns[i].bytes = NULL;  /* the result owns them */
    }
    if (cut_after < 0)
        result = Py_BuildValue("nNNNNNNNNN", c.count, cols[SPANS], cols[NUMBERS], cols[IDS],
                               cols[HAS_ARGS], texts, cols[TUPLE_CODES],
                               as_bytes(&s.tuples[0].keys), as_bytes(&s.tuples[1].keys),
                               as_bytes(&s.tuples[2].keys));
    else
        result = Py_BuildValue("nnnNNNNNNNNN", cut_end, next, c.count, cols[SPANS],
                               cols[NUMBERS], cols[IDS], cols[HAS_ARGS], texts,
                               cols[TUPLE_CODES], as_bytes(&s.tuples[0].keys),
                               as_bytes(&s.tuples[1].keys), as_bytes(&s.tuples[2].keys));
done:
    table_free(&s.table);
    for (int i = 0; i < N_TUPLES; i++) tuples_free(&s.tuples[i]);
    columns_free(&c);
    return result;
}

PyDoc_STRVAR(scan_doc,
"scan(piece) -> (count, spans, numbers, ids, has_args, texts, tuples, cat_names, threads,\n"
"details) or None\n\n"
"The fields of a piece's events (see the module's C source), or None when the piece must be\n"
"decoded by msgspec. spans: int32 [count, 22]; numbers: float64 [count, 12]; ids: int64\n"
"[count, 4]; has_args: uint8 [count]; texts: the unique value texts the spans index;\n"
"tuples: int32 [count, 3], codes into cat_names (int32 [k, 2]: cat and name span codes),\n"
"threads (int32 [k, 2]: pid, tid) and details (int32 [k, 11]; -1: no such field).");

static PyObject *scan(PyObject *module, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = scan_text(view.buf, 0, view.len, -1);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(scan_range_doc,
"scan_range(buffer, start, cut_after) -> (end, next, count, spans, ...) or None\n\n"
"The events from buffer[start] (after whitespace) up to the first that closes at or after\n"
"cut_after and that ',' and another event's '{' follow, read as scan() reads the piece\n"
"'[' + buffer[start:end] + ']'; next is where the following event's '{' is. None when that\n"
"piece must be decoded by msgspec, or when no such cut is found in the buffer.");

static PyObject *scan_range(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "scan_range(buffer, start, cut_after)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), cut_after = PyLong_AsSsize_t(args[2]);
    if ((start == -1 || cut_after == -1) && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result;
    if (start < 0 || start > view.len || cut_after < 0) {
        PyErr_SetString(PyExc_ValueError, "scan_range: start or cut_after out of range");
        result = NULL;
    } else {
        result = scan_text(view.buf, start, view.len, cut_after);
    }
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, scan_doc},
    {"scan_range", (PyCFunction)(void (*)(void))scan_range, METH_FASTCALL, scan_range_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "trainprof.trace._scan",
    "A compiled scanner of trace pieces (trace/scan.py uses it).", -1, methods,
};

PyMODINIT_FUNC PyInit__scan(void) {
    index_fields(EVENT_FIELDS, N_EVENT_FIELDS, EVENT_SLOTS);
    index_fields(ARGS_FIELDS, N_ARGS_FIELDS, ARGS_SLOTS);
    for (int i = 0; i < N_SPAN; i++) EMPTY_SPANS[i] = -1;
    for (int i = 0; i < N_NUMBER; i++) EMPTY_NUMBERS[i] = NAN;
    EMPTY_NUMBERS[1] = 0.0;  /* dur's default */
    for (int i = 0; i < N_ID; i++) EMPTY_IDS[i] = NO_ID;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "VERSION", SCAN_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "N_DETAIL", N_DETAIL) < 0 ||
        PyModule_AddIntConstant(m, "N_SPAN", N_SPAN) < 0 ||
        PyModule_AddIntConstant(m, "N_NUMBER", N_NUMBER) < 0 ||
        PyModule_AddIntConstant(m, "N_ID", N_ID) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
