/* trainprof.trace._scan: one pass over a piece of a Kineto trace's event array.
 *
 * A piece is the JSON text `[ {event}, {event}, ... ]` (trace/stream.py cuts it). scan(piece)
 * returns, for every event in order, the fields ColumnBuilder reads (trace/columns.py):
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
#define SCAN_VERSION 2
#define MAX_DEPTH 64

/* ---- the fields read -------------------------------------------------------------------- */

enum kind { SPAN, NUMBER, ID };

typedef struct {
    const char *key;
    enum kind kind;
    int column;  /* index among the fields of its kind */
    Py_ssize_t len;  /* strlen(key), set when the module loads */
} Field;

/* Event-level keys. The order of each kind's columns is the layout trace/scan.py reads. */
static Field EVENT_FIELDS[] = {
    {"ph", SPAN, 0}, {"cat", SPAN, 1}, {"name", SPAN, 2}, {"pid", SPAN, 3}, {"tid", SPAN, 4},
    {"ts", NUMBER, 0}, {"dur", NUMBER, 1}, {"id", ID, 0},
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

/* ---- growable output ---------------------------------------------------------------------- */

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

/* A hash of n bytes, eight at a time (the texts hashed are names tens to hundreds long). */
static uint64_t hash_bytes(const unsigned char *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
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
        if (s->hash == h && s->len == len && memcmp(base + s->start, base + start, len) == 0)
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
        memcmp(t->keys.data + (size_t)t->last_code * (size_t)t->size, key, (size_t)t->size) == 0)
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

/* ---- the scanner -------------------------------------------------------------------------- */

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
} Scanner;

/* One event's fields while it is read. */
typedef struct {
    int32_t spans[N_SPAN];
    double numbers[N_NUMBER];
    int64_t ids[N_ID];
    uint8_t has_args;
    uint32_t seen_event;  /* bit per EVENT_FIELDS entry: a duplicate key is refused */
    uint64_t seen_args;
} Event;

static void skip_ws(Scanner *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
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

/* Whether any of 8 bytes at p ends a plain run of string characters: '"', '\\', a control
 * character (< 0x20) or a byte >= 0x80 (the start of a multi-byte character). */
static int special_in_word(const unsigned char *p) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t w;
    memcpy(&w, p, 8);
    uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\');
    /* A zero byte in x shows as a high bit in (x - ones) & ~x; bytes >= 0x80 are caught by
     * w's own high bits, so the subtractions' false hits on them do not matter. */
    uint64_t hits = ((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) |
                    ((w - ones * 0x20) & ~w) | w;
    return (hits & highs) != 0;
}

/* A string from its opening quote; *escaped tells whether it held an escape. 0, or -1 to
 * refuse. A \u escape must not leave a surrogate unpaired. */
static int scan_string(Scanner *s, int *escaped) {
    const unsigned char *p = s->p + 1, *end = s->end;
    *escaped = 0;
    for (;;) {
        while (end - p >= 8 && !special_in_word(p)) p += 8;
        while (p < end && *p >= 0x20 && *p != '"' && *p != '\\' && *p < 0x80) p++;
        if (p >= end || *p < 0x20) return -1;  /* unterminated, or a raw control character */
        if (*p == '"') break;
        if (*p >= 0x80) {
            int n = utf8_length(p, end);
            if (n == 0) return -1;
            p += n;
            continue;
        }
        *escaped = 1;  /* a backslash */
        if (end - p < 2) return -1;
        unsigned char e = p[1];
        if (e == 'u') {
            if (end - p < 6) return -1;
            int u = hex4(p + 2);
            if (u < 0 || (u >= 0xDC00 && u <= 0xDFFF)) return -1;
            p += 6;
            if (u >= 0xD800 && u <= 0xDBFF) {  /* a high surrogate: its low half must follow */
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u') return -1;
                int low = hex4(p + 2);
                if (low < 0xDC00 || low > 0xDFFF) return -1;
                p += 6;
            }
        } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' ||
                   e == 'r' || e == 't') {
            p += 2;
        } else return -1;
    }
    s->p = p + 1;
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

/* A number (grammar above). Refused: an integer outside int64 (msgspec would make it a Python
 * int of any size, or a float), a float that overflows or underflows to 0 or a subnormal. */
static int scan_number(Scanner *s, Number *out) {
    const unsigned char *start = s->p, *p = s->p, *end = s->end;
    int negative = 0, nonzero = 0;
    if (p < end && *p == '-') { negative = 1; p++; }
    if (p >= end || *p < '0' || *p > '9') return -1;
    if (*p == '0') {
        p++;
        if (p < end && *p >= '0' && *p <= '9') return -1;  /* no leading zero */
    } else {
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    const unsigned char *int_end = p;
    int is_integer = 1;
    if (p < end && *p == '.') {
        is_integer = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        is_integer = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    s->p = p;
    out->is_integer = is_integer;
    if (is_integer) {
        /* Accumulate as a negative number: -2**63 fits, 2**63 does not. Up to 18 digits
         * cannot overflow; only longer ones are checked digit by digit. */
        int64_t v = 0;
        const unsigned char *d = start + negative;
        if (int_end - d <= 18) {
            for (; d < int_end; d++) v = v * 10 - (*d - '0');
        } else {
            for (; d < int_end; d++) {
                int digit = *d - '0';
                if (v < (INT64_MIN + digit) / 10) return -1;
                v = v * 10 - digit;
            }
        }
        if (!negative) {
            if (v == INT64_MIN) return -1;
            v = -v;
        }
        out->integer = v;
        out->value = (double)v;  /* as msgspec turns an integer into a float: exactly rounded */
        return 0;
    }
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

static int scan_literal(Scanner *s, const char *word, size_t n) {
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0) return -1;
    s->p += n;
    return 0;
}

/* Any JSON value, checked and skipped. */
static int scan_value(Scanner *s) {
    if (s->p >= s->end) return -1;
    switch (*s->p) {
    case '{': case '[': return scan_container(s);
    case '"': { int escaped; return scan_string(s, &escaped); }
    case 't': return scan_literal(s, "true", 4);
    case 'f': return scan_literal(s, "false", 5);
    case 'n': return scan_literal(s, "null", 4);
    default: { Number num; return scan_number(s, &num); }
    }
}

static int at_null(Scanner *s) {
    return s->end - s->p >= 4 && memcmp(s->p, "null", 4) == 0;
}

/* One field's value into the event. */
static int read_field(Scanner *s, const Field *f, Event *ev) {
    if (f->kind == SPAN) {
        Py_ssize_t start = s->p - s->base;
        if (scan_value(s) < 0) return -1;
        Py_ssize_t len = (s->p - s->base) - start;
        int c = f->column;
        if (len != s->last_len[c] ||
            memcmp(s->base + start, s->base + s->last_start[c], (size_t)len) != 0) {
            int32_t code = table_code(&s->table, s->base, start, len);
            if (code < 0) { s->failed = 1; return -1; }
            s->last_start[c] = start;
            s->last_len[c] = len;
            s->last_code[c] = code;
        }
        ev->spans[c] = s->last_code[c];
        return 0;
    }
    if (at_null(s)) {
        s->p += 4;
        if (f->kind == NUMBER) ev->numbers[f->column] = NAN;
        else ev->ids[f->column] = NO_ID;
        return 0;
    }
    Number num;
    if (s->p >= s->end || (*s->p != '-' && (*s->p < '0' || *s->p > '9'))) return -1;
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

/* The field a key names among `fields`, or NULL. The key is the text between the quotes. */
static const Field *find_field(const Field *fields, size_t n, const unsigned char *key,
                               Py_ssize_t len, size_t *index) {
    for (size_t i = 0; i < n; i++) {
        if (fields[i].len == len && fields[i].key[0] == key[0] &&
            memcmp(fields[i].key, key, (size_t)len) == 0) {
            *index = i;
            return &fields[i];
        }
    }
    return NULL;
}

/* The members of an event or of its args: `"key": value` pairs up to the closing brace, the
 * opening brace already read. Known keys fill `ev`; others are checked and skipped. */
static int scan_members(Scanner *s, Event *ev, int is_args) {
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
        int escaped;
        if (scan_string(s, &escaped) < 0 || escaped) return -1;  /* msgspec would unescape */
        Py_ssize_t key_len = (s->p - 1) - key;
        skip_ws(s);
        if (s->p >= s->end || *s->p != ':') return -1;
        s->p++;
        skip_ws(s);
        size_t index;
        const Field *f = is_args ? find_field(ARGS_FIELDS, N_ARGS_FIELDS, key, key_len, &index)
                                 : find_field(EVENT_FIELDS, N_EVENT_FIELDS, key, key_len, &index);
        if (f != NULL) {
            if (is_args) {
                if (ev->seen_args & (1ULL << index)) return -1;  /* a duplicate key */
                ev->seen_args |= 1ULL << index;
            } else {
                if (ev->seen_event & (1U << index)) return -1;
                ev->seen_event |= 1U << index;
            }
            if (read_field(s, f, ev) < 0) return -1;
        } else if (!is_args && key_len == 4 && memcmp(key, "args", 4) == 0) {
            if (ev->seen_event & (1U << N_EVENT_FIELDS)) return -1;
            ev->seen_event |= 1U << N_EVENT_FIELDS;
            if (at_null(s)) {
                s->p += 4;
            } else {
                if (s->p >= s->end || *s->p != '{') return -1;  /* msgspec's lenient path */
                s->p++;
                ev->has_args = 1;
                if (scan_members(s, ev, 1) < 0) return -1;
            }
        } else if (scan_value(s) < 0) {
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

static void event_reset(Event *ev) {
    for (int i = 0; i < N_SPAN; i++) ev->spans[i] = -1;
    for (int i = 0; i < N_NUMBER; i++) ev->numbers[i] = NAN;
    ev->numbers[1] = 0.0;  /* dur's default */
    for (int i = 0; i < N_ID; i++) ev->ids[i] = NO_ID;
    ev->has_args = 0;
    ev->seen_event = 0;
    ev->seen_args = 0;
}

typedef struct {
    Buffer spans, numbers, ids, has_args, tuples;
    Py_ssize_t count;
} Columns;

static int append(Buffer *b, const void *data, size_t n) {
    if (buffer_grow(b, n) < 0) return -1;
    memcpy(b->data + b->used, data, n);
    b->used += n;
    return 0;
}

/* The codes of the event's (cat, name), (pid, tid) and launch details; -1 on memory error. */
static int tuple_codes(Scanner *s, const Event *ev, int32_t *out) {
    int32_t pair[2] = {ev->spans[1], ev->spans[2]};
    if ((out[0] = tuple_code(&s->tuples[0], pair)) < 0) return -1;
    pair[0] = ev->spans[3];
    pair[1] = ev->spans[4];
    if ((out[1] = tuple_code(&s->tuples[1], pair)) < 0) return -1;
    out[2] = -1;
    for (int i = DETAIL_FIRST; i < DETAIL_FIRST + N_DETAIL; i++) {
        if (ev->spans[i] >= 0) {
            if ((out[2] = tuple_code(&s->tuples[2], ev->spans + DETAIL_FIRST)) < 0) return -1;
            break;
        }
    }
    return 0;
}

static int store_event(Scanner *s, Columns *c, const Event *ev) {
    int32_t tuples[N_TUPLES];
    if (tuple_codes(s, ev, tuples) < 0 ||
        append(&c->tuples, tuples, sizeof(tuples)) < 0 ||
        append(&c->spans, ev->spans, sizeof(ev->spans)) < 0 ||
        append(&c->numbers, ev->numbers, sizeof(ev->numbers)) < 0 ||
        append(&c->ids, ev->ids, sizeof(ev->ids)) < 0 ||
        append(&c->has_args, &ev->has_args, 1) < 0)
        return -1;
    c->count++;
    return 0;
}

/* The whole piece: ws '[' ws [ event ws *( ',' ws event ws ) ] ']' ws. */
static int scan_piece(Scanner *s, Columns *c) {
    Event ev;
    skip_ws(s);
    if (s->p >= s->end || *s->p != '[') return -1;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
    } else {
        for (;;) {
            if (s->p >= s->end || *s->p != '{') return -1;  /* an entry that is not an event */
            s->p++;
            event_reset(&ev);
            if (scan_members(s, &ev, 0) < 0) return -1;
            if (store_event(s, c, &ev) < 0) { s->failed = 1; return -1; }
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

/* ---- the Python function ------------------------------------------------------------------ */

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
    Scanner s = {0};
    Columns c = {0};
    PyObject *result = NULL;
    s.base = s.p = view.buf;
    s.end = s.base + view.len;
    for (int i = 0; i < N_SPAN; i++) s.last_len[i] = -1;
    if (table_init(&s.table) < 0 || tuples_init(&s.tuples[0], 2) < 0 ||
        tuples_init(&s.tuples[1], 2) < 0 || tuples_init(&s.tuples[2], N_DETAIL) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (scan_piece(&s, &c) < 0) {
        if (s.failed) PyErr_NoMemory();
        else result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *texts = unique_texts(&s);
    if (texts == NULL) goto done;
    result = Py_BuildValue("nNNNNNNNNN", c.count, as_bytes(&c.spans), as_bytes(&c.numbers),
                           as_bytes(&c.ids), as_bytes(&c.has_args), texts, as_bytes(&c.tuples),
                           as_bytes(&s.tuples[0].keys), as_bytes(&s.tuples[1].keys),
                           as_bytes(&s.tuples[2].keys));
done:
    table_free(&s.table);
    for (int i = 0; i < N_TUPLES; i++) tuples_free(&s.tuples[i]);
    PyMem_Free(c.tuples.data);
    PyMem_Free(c.spans.data);
    PyMem_Free(c.numbers.data);
    PyMem_Free(c.ids.data);
    PyMem_Free(c.has_args.data);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "trainprof.trace._scan",
    "A compiled scanner of trace pieces (trace/scan.py uses it).", -1, methods,
};

PyMODINIT_FUNC PyInit__scan(void) {
    for (size_t i = 0; i < N_EVENT_FIELDS; i++)
        EVENT_FIELDS[i].len = (Py_ssize_t)strlen(EVENT_FIELDS[i].key);
    for (size_t i = 0; i < N_ARGS_FIELDS; i++)
        ARGS_FIELDS[i].len = (Py_ssize_t)strlen(ARGS_FIELDS[i].key);
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
