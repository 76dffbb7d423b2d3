/* Fast scanner for the canonical alloc/free CSV log (veotrace.sources.logs.csvscan wraps it).
 *
 * It reads only the plain shape every logger writes: comma-separated fields, optionally quoted
 * without embedded quotes, commas or line ends; LF or CRLF line ends; integer timestamps, integer
 * non-negative sizes, the op names alloc, free, defrag, addresses as 0x-hex (either case, at most
 * 16 digits) or decimal, and integer stream/device ids; empty addresses and ids are null.  Anything else (a float, a sign on a
 * size, an unknown op, a doubled quote, a short row, ...) is not an error here: the scanner stops
 * and reports "unsupported", and the caller hands the whole buffer to pyarrow's CSV reader, which
 * either reads it or sends it on to the exact path that names the line and column.  So this file
 * decides nothing about what is valid; it only makes the common case fast.
 *
 * The scan runs without the GIL, so two threads scan two buffers at once.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE /* memrchr */
#include <Python.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Op codes 0, 1, 2: index into csvscan.OPS ("alloc", "free", "defrag"). */

static inline int op_code(const char *p, const char *q)
{
    /* memcmp of a constant length compiles to a couple of loads and compares. */
    switch (q - p) {
    case 5:
        return memcmp(p, "alloc", 5) == 0 ? 0 : -1;
    case 4:
        return memcmp(p, "free", 4) == 0 ? 1 : -1;
    case 6:
        return memcmp(p, "defrag", 6) == 0 ? 2 : -1;
    default:
        return -1;
    }
}

/* 0 turns scan_line_fast off (csvscan tests compare both paths). */
static int use_fast = 1;

/* What each column of the line is read as (csvscan.KINDS). */
enum { K_SKIP, K_TS, K_OP, K_SIZE, K_ADDR, K_INT, K_TEXT, K_MAXCOLS = 64 };

typedef struct {
    int ncols;
    unsigned char kind[K_MAXCOLS];
    void *out[K_MAXCOLS];       /* int64 (ts, size, int), int32 (op) or uint64 (addr) values */
    uint8_t *valid[K_MAXCOLS];  /* validity bitmap of the nullable kinds (addr, int, text) */
    char *text[K_MAXCOLS];      /* text: the bytes of the values (out holds int32 offsets) */
    Py_ssize_t text_cap[K_MAXCOLS];
    Py_ssize_t cap;
} Out;

/* Bytes that end an unquoted field's text, or a quoted one's. */
static unsigned char SPECIAL[256];
/* Hex digit values, 255 for any other byte. */
static unsigned char HEX[256];

static void init_tables(void)
{
    SPECIAL[(unsigned char)','] = SPECIAL[(unsigned char)'\n'] = 1;
    SPECIAL[(unsigned char)'"'] = SPECIAL[(unsigned char)'\r'] = 1;
    memset(HEX, 255, sizeof HEX);
    for (int i = 0; i < 10; i++)
        HEX['0' + i] = (unsigned char)i;
    for (int i = 0; i < 6; i++)
        HEX['a' + i] = HEX['A' + i] = (unsigned char)(10 + i);
}

/* The first byte at or after p that ends a field (comma, quote, CR, LF); there is one before end.
 * Sixteen bytes at a time where sixteen remain before end: skipped fields (a 14-digit hex address)
 * cost a byte-table lookup per byte otherwise, most of the scan. */
static inline const char *field_end(const char *p, const char *end)
{
#ifdef __SSE2__
    const __m128i comma = _mm_set1_epi8(','), quote = _mm_set1_epi8('"');
    const __m128i lf = _mm_set1_epi8('\n'), cr = _mm_set1_epi8('\r');
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, comma), _mm_cmpeq_epi8(v, quote)),
                                 _mm_or_si128(_mm_cmpeq_epi8(v, lf), _mm_cmpeq_epi8(v, cr)));
        unsigned mask = (unsigned)_mm_movemask_epi8(m);
        if (mask)
            return p + __builtin_ctz(mask);
        p += 16;
    }
#endif
    (void)end;
    while (!SPECIAL[(unsigned char)*p])
        p++;
    return p;
}

#ifdef __SSE2__
/* The number of ASCII digits at p (0-16); sixteen bytes at p must be readable. */
static inline int digit_run(const char *p)
{
    __m128i d = _mm_sub_epi8(_mm_loadu_si128((const __m128i *)p), _mm_set1_epi8('0'));
    __m128i le9 = _mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(9)), d);
    return __builtin_ctz(~(unsigned)_mm_movemask_epi8(le9) | 0x10000u);
}
#endif

/* The value of the n (1-8) ASCII digits at p, eight bytes at p readable: the digits shifted to the
 * top of a little-endian word behind leading zeros, then summed pairwise (two, four, eight digits)
 * with three multiplications instead of a dependent multiply-add per digit. */
static inline uint64_t digits8(const char *p, int n)
{
    uint64_t v;
    memcpy(&v, p, 8);
    v -= 0x3030303030303030ULL; /* no borrow out of the n digit bytes, which are the low ones */
    v <<= 8 * (8 - n);
    v = v * 10 + (v >> 8);
    v = (((v & 0x000000FF000000FFULL) * 0x000F424000000064ULL) +
         (((v >> 16) & 0x000000FF000000FFULL) * 0x0000271000000001ULL)) >> 32;
    return v;
}

static inline void set_valid(uint8_t *bm, Py_ssize_t row, int ok)
{
    uint8_t bit = (uint8_t)(1u << (row & 7));
    bm[row >> 3] = ok ? (uint8_t)(bm[row >> 3] | bit) : (uint8_t)(bm[row >> 3] & ~bit);
}

/* A text value [a, b) of row: ASCII blanks trimmed, empty is null. Returns 0 to decline a value
 * that begins or ends with a non-ASCII byte (pyarrow trims Unicode blanks: it decides). */
static inline int put_text(const Out *o, int col, Py_ssize_t row, const char *a, const char *b)
{
    while (a < b && (*a == ' ' || *a == '\t' || *a == '\v' || *a == '\f'))
        a++;
    while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\v' || b[-1] == '\f'))
        b--;
    if (a < b && (((unsigned char)*a | (unsigned char)b[-1]) & 0x80))
        return 0;
    int32_t *off = o->out[col];
    Py_ssize_t start = off[row], n = b - a;
    if (start + n > o->text_cap[col])
        return 0;
    memcpy(o->text[col] + start, a, (size_t)n);
    off[row + 1] = (int32_t)(start + n);
    set_valid(o->valid[col], row, n != 0);
    return 1;
}

/* An address: 0x/0X and 1-16 hex digits, or 1-19 decimal digits, or empty (null). Anything else
 * (blanks, 17+ hex digits, 20 decimal digits, a sign) declines: the exact path decides. */
static inline const char *scan_addr(const char *p, uint64_t *v, int *present)
{
    uint64_t x = 0;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        const char *ds = p + 2;
        const char *q = ds;
        unsigned h;
        while ((h = HEX[(unsigned char)*q]) != 255) {
            x = (x << 4) | h;
            q++;
        }
        if (q == ds || q - ds > 16)
            return NULL;
        *v = x;
        *present = 1;
        return q;
    }
    const char *q = p;
    unsigned d;
    while ((d = (unsigned)(unsigned char)*q - (unsigned)'0') <= 9) {
        x = x * 10 + d;
        q++;
    }
    if (q - p > 19)
        return NULL;
    *v = x;
    *present = q != p;
    return q;
}

/* One line starting at p, which is known to end with an LF somewhere after p (so no bounds
 * checks: every loop stops at the LF). Returns the start of the next line, or NULL to decline. */
static const char *scan_line(const char *p, const char *end, const Out *o, Py_ssize_t row)
{
    int col = 0;
    for (;;) {
        int quoted = *p == '"';
        p += quoted;
        if (col >= o->ncols)
            return NULL; /* a long row */
        switch (o->kind[col]) {
        case K_TS:
        case K_SIZE:
        case K_INT: {
            int kind = o->kind[col];
            int neg = kind != K_SIZE && *p == '-';
            p += neg;
            const char *ds = p;
            int64_t v = 0;
            unsigned d;
#ifdef __SSE2__
            int n = end - p >= 16 ? digit_run(p) : 16;
            if (n == 0) {
            } else if (n <= 8) {
                v = (int64_t)digits8(p, n);
                p += n;
            } else if (n < 16) {
                v = (int64_t)(digits8(p, n - 8) * 100000000ULL + digits8(p + n - 8, 8));
                p += n;
            } else
#endif
            while ((d = (unsigned)(unsigned char)*p - (unsigned)'0') <= 9) {
                v = v * 10 + (int64_t)d;
                p++;
            }
            if (p - ds > 18) /* might not fit int64: pyarrow decides */
                return NULL;
            if (p == ds) {
                if (kind != K_INT || neg) /* a required value is empty */
                    return NULL;
                set_valid(o->valid[col], row, 0);
                ((int64_t *)o->out[col])[row] = 0;
            } else {
                ((int64_t *)o->out[col])[row] = neg ? -v : v;
                if (kind == K_INT)
                    set_valid(o->valid[col], row, 1);
            }
            break;
        }
        case K_ADDR: {
            uint64_t v = 0;
            int present = 0;
            if (!(p = scan_addr(p, &v, &present)))
                return NULL;
            ((uint64_t *)o->out[col])[row] = v;
            set_valid(o->valid[col], row, present);
            break;
        }
        case K_OP: {
            const char *fs = p;
            while (!SPECIAL[(unsigned char)*p])
                p++;
            int c = op_code(fs, p);
            if (c < 0)
                return NULL;
            ((int32_t *)o->out[col])[row] = c;
            break;
        }
        case K_TEXT: {
            const char *fs = p;
            p = field_end(p, end);
            if (!put_text(o, col, row, fs, p))
                return NULL;
            break;
        }
        default:
            p = field_end(p, end);
        }
        if (quoted) {
            if (*p != '"') /* a quoted comma or line end: pyarrow decides */
                return NULL;
            p++;
        }
        col++;
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p == '\n') {
            p++;
            break;
        }
        if (*p == '\r' && p[1] == '\n') {
            p += 2;
            break;
        }
        return NULL; /* a quote inside a field, text after a closing quote, a lone CR, a bad digit */
    }
    return col == o->ncols ? p : NULL;
}

#ifdef __SSE2__
/* Bits of the 64 bytes at p equal to c. */
static inline uint64_t eq64(const __m128i v[4], char c)
{
    __m128i k = _mm_set1_epi8(c);
    return (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v[0], k)) |
           (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v[1], k)) << 16 |
           (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v[2], k)) << 32 |
           (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v[3], k)) << 48;
}

static inline uint64_t prefix_xor(uint64_t x)
{
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    return x;
}

/* The value of the n (1-16) digits at q (sixteen bytes readable), or -1 when they are not all digits. */
static inline int64_t digits(const char *q, int n)
{
    if (n > 16 || digit_run(q) < n)
        return -1;
    return n <= 8 ? (int64_t)digits8(q, n) : (int64_t)(digits8(q, n - 8) * 100000000ULL + digits8(q + n - 8, 8));
}

enum { FAST_DECLINE, FAST_OK, FAST_SLOW };
/* "alloc", "free", "defrag" as little-endian words (op_code's names). */
#define OP_ALLOC 0x636f6c6c61ULL
#define OP_FREE 0x65657266ULL
#define OP_DEFRAG 0x676172666564ULL


/* scan_line for a line of at most 63 bytes with 80 readable bytes at p: the field ends, quotes, CR
 * and line end of the whole line come from four 64-bit masks at once, so the line's cost is not a
 * chain of one field after another. The rules are scan_line's: it accepts and declines the same
 * lines (FAST_SLOW: a case it leaves to scan_line, e.g. a longer line or a 17-digit number). */
static inline int scan_line_fast(const char *p, const Out *o, Py_ssize_t row, const char **next)
{
    __m128i v[4];
    for (int i = 0; i < 4; i++)
        v[i] = _mm_loadu_si128((const __m128i *)(p + 16 * i));
    uint64_t lfm = eq64(v, '\n');
    if (!lfm)
        return FAST_SLOW;
    int lf = __builtin_ctzll(lfm);
    uint64_t below = (1ULL << lf) - 1;
    uint64_t cm = eq64(v, ',') & below, qm = eq64(v, '"') & below, crm = eq64(v, '\r') & below;
    int cend = lf;
    if (crm) {
        if (crm != 1ULL << (lf - 1))
            return FAST_DECLINE;
        cend = lf - 1;
    }
    if (cend == 0)
        return FAST_DECLINE;
    if (qm) { /* quotes only around whole fields: at a field's first and last byte, in pairs */
        uint64_t content = (1ULL << cend) - 1;
        uint64_t starts = ((cm << 1) | 1) & content, lasts = ((cm >> 1) | (1ULL << (cend - 1))) & content;
        uint64_t inside = prefix_xor(qm); /* bit 63: the parity of the quotes */
        if ((qm & ~(starts | lasts)) || (qm & starts & lasts) || (inside & cm) || (inside >> 63))
            return FAST_DECLINE;
    }
    int s = 0;
    for (int col = 0; col < o->ncols; col++) {
        int e = cend;
        if (col < o->ncols - 1) {
            if (!cm) /* a short row */
                return FAST_DECLINE;
            e = __builtin_ctzll(cm);
            cm &= cm - 1;
        } else if (cm) { /* a long row */
            return FAST_DECLINE;
        }
        int kind = o->kind[col];
        if (kind != K_SKIP) {
            int a = s, b = e;
            if ((qm >> a) & 1) {
                a++;
                b--;
            }
            const char *q = p + a;
            int n = b - a;
            switch (kind) {
            case K_TEXT:
                if (!put_text(o, col, row, q, q + n))
                    return FAST_DECLINE;
                break;
            case K_OP: {
                /* The name as a little-endian word (its n <= 8 bytes, zeros above): no branch on
                 * its length, which changes from row to row. */
                if (n > 8)
                    return FAST_DECLINE;
                uint64_t w;
                memcpy(&w, q, 8);
                w &= n ? ~0ULL >> (64 - 8 * n) : 0;
                int c = w == OP_ALLOC ? 0 : w == OP_FREE ? 1 : w == OP_DEFRAG ? 2 : -1;
                if (c < 0)
                    return FAST_DECLINE;
                ((int32_t *)o->out[col])[row] = c;
                break;
            }
            case K_ADDR: {
                uint64_t x = 0;
                if (n >= 2 && q[0] == '0' && (q[1] == 'x' || q[1] == 'X')) {
                    if (n == 2 || n > 18)
                        return FAST_DECLINE;
                    for (int i = 2; i < n; i++) {
                        unsigned h = HEX[(unsigned char)q[i]];
                        if (h == 255)
                            return FAST_DECLINE;
                        x = (x << 4) | h;
                    }
                } else if (n > 16) {
                    return FAST_SLOW;
                } else if (n) {
                    int64_t d = digits(q, n);
                    if (d < 0)
                        return FAST_DECLINE;
                    x = (uint64_t)d;
                }
                ((uint64_t *)o->out[col])[row] = x;
                set_valid(o->valid[col], row, n != 0);
                break;
            }
            default: { /* K_TS, K_SIZE, K_INT */
                int neg = kind != K_SIZE && n && q[0] == '-';
                q += neg;
                n -= neg;
                if (n > 16)
                    return FAST_SLOW;
                if (n == 0) {
                    if (kind != K_INT || neg)
                        return FAST_DECLINE;
                    ((int64_t *)o->out[col])[row] = 0;
                    set_valid(o->valid[col], row, 0);
                    break;
                }
                int64_t d = digits(q, n);
                if (d < 0)
                    return FAST_DECLINE;
                ((int64_t *)o->out[col])[row] = neg ? -d : d;
                if (kind == K_INT)
                    set_valid(o->valid[col], row, 1);
            }
            }
        }
        s = e + 1;
    }
    *next = p + lf + 1;
    return FAST_OK;
}
#endif

/* Scan [buf, buf + len): whole lines only (the last may lack its line end).
 * Returns the number of rows, -1 when a line is not in the plain shape, or -2 when the rows do not
 * fit the output buffers (the caller counts the lines and scans again). */
static Py_ssize_t scan(const char *buf, Py_ssize_t len, const Out *o)
{
    const char *p = buf, *e = buf + len;
    const char *last_lf = len ? memrchr(buf, '\n', (size_t)len) : NULL;
    const char *body_end = last_lf ? last_lf + 1 : buf; /* lines in [buf, body_end) end with LF */
    Py_ssize_t rows = 0;
    while (p < body_end) {
        if (*p == '\n') { /* empty line: skipped, as pyarrow does */
            p++;
            continue;
        }
        if (*p == '\r' && p[1] == '\n') {
            p += 2;
            continue;
        }
        if (rows >= o->cap)
            return -2;
#ifdef __SSE2__
        if (use_fast && body_end - p >= 80) {
            const char *next;
            int r = scan_line_fast(p, o, rows, &next);
            if (r == FAST_DECLINE)
                return -1;
            if (r == FAST_OK) {
                p = next;
                rows++;
                continue;
            }
        }
#endif
        if (!(p = scan_line(p, body_end, o, rows)))
            return -1;
        rows++;
    }
    if (body_end < e) { /* a last line without LF: scanned from a copy that has one */
        Py_ssize_t n = e - body_end;
        char *tail = malloc((size_t)n + 1);
        if (!tail)
            return -1;
        memcpy(tail, body_end, (size_t)n);
        tail[n] = '\n';
        const char *q = tail;
        int blank = (n == 1 && tail[0] == '\r');
        if (!blank && rows >= o->cap) {
            free(tail);
            return -2;
        }
        if (!blank) {
            q = scan_line(tail, tail + n + 1, o, rows);
            if (q)
                rows++;
        }
        free(tail);
        if (!q)
            return -1;
    }
    return rows;
}

static const Py_ssize_t ITEMSIZE[] = {0, 8, 4, 8, 8, 8, 4};

/* scan(data, kinds, outs, valids): kinds is one byte per column; outs and valids are sequences of
 * one writable buffer (or None) per column. */
static PyObject *py_scan(PyObject *self, PyObject *args)
{
    Py_buffer data, kinds;
    PyObject *outs, *valids, *texts;
    if (!PyArg_ParseTuple(args, "y*y*OOO", &data, &kinds, &outs, &valids, &texts))
        return NULL;
    Py_buffer views[3 * K_MAXCOLS];
    int nviews = 0;
    PyObject *result = NULL;
    Out o;
    o.ncols = (int)kinds.len;
    o.cap = PY_SSIZE_T_MAX;
    if (kinds.len > K_MAXCOLS || PySequence_Size(outs) != kinds.len || PySequence_Size(valids) != kinds.len ||
        PySequence_Size(texts) != kinds.len) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "kinds, outs, valids and texts must have one entry per column (<= 64)");
        goto done;
    }
    for (int c = 0; c < o.ncols; c++) {
        unsigned char k = ((unsigned char *)kinds.buf)[c];
        if (k > K_TEXT) {
            PyErr_SetString(PyExc_ValueError, "unknown column kind");
            goto done;
        }
        o.kind[c] = k;
        o.out[c] = NULL;
        o.valid[c] = NULL;
        o.text[c] = NULL;
        o.text_cap[c] = 0;
        if (k == K_SKIP)
            continue;
        for (int which = 0; which < 3; which++) {
            if ((which == 1 && k != K_ADDR && k != K_INT && k != K_TEXT) || (which == 2 && k != K_TEXT))
                continue;
            PyObject *obj = PySequence_GetItem(which == 2 ? texts : which ? valids : outs, c);
            if (!obj)
                goto done;
            int bad = PyObject_GetBuffer(obj, &views[nviews], PyBUF_WRITABLE);
            Py_DECREF(obj);
            if (bad < 0)
                goto done;
            Py_buffer *v = &views[nviews++];
            if (which == 2) {
                o.text[c] = v->buf;
                o.text_cap[c] = v->len;
                continue;
            }
            Py_ssize_t n = which ? v->len * 8 : v->len / ITEMSIZE[k] - (k == K_TEXT); /* offsets: rows + 1 */
            if (k == K_TEXT && !which) {
                if (n < 0) {
                    PyErr_SetString(PyExc_ValueError, "an offsets buffer is empty");
                    goto done;
                }
                ((int32_t *)v->buf)[0] = 0;
            }
            o.cap = n < o.cap ? n : o.cap;
            if (which)
                o.valid[c] = v->buf;
            else
                o.out[c] = v->buf;
        }
    }
    Py_ssize_t rows;
    Py_BEGIN_ALLOW_THREADS
    rows = scan(data.buf, data.len, &o);
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(rows);
done:
    for (int i = 0; i < nviews; i++)
        PyBuffer_Release(&views[i]);
    PyBuffer_Release(&kinds);
    PyBuffer_Release(&data);
    return result;
}

static PyObject *py_count_lines(PyObject *self, PyObject *args)
{
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data))
        return NULL;
    Py_ssize_t n = 0;
    Py_BEGIN_ALLOW_THREADS
    const char *p = data.buf, *e = p + data.len;
    while (p < e && (p = memchr(p, '\n', (size_t)(e - p))) != NULL) {
        n++;
        p++;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    return PyLong_FromSsize_t(n);
}

static PyObject *py_set_fast(PyObject *self, PyObject *args)
{
    int on;
    if (!PyArg_ParseTuple(args, "p", &on))
        return NULL;
    use_fast = on;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"set_fast", py_set_fast, METH_VARARGS, "set_fast(on): use the whole-line SSE2 path (tests turn it off to compare)."},
    {"scan", py_scan, METH_VARARGS,
     "scan(data, kinds, outs, valids, texts) -> rows, -1 when a line is not in the plain shape (the "
     "caller then uses pyarrow), or -2 when the rows do not fit the outputs. kinds: one byte per column "
     "(0 skip, 1 timestamp, 2 op, 3 size, 4 address, 5 nullable integer, 6 text); outs: a writable "
     "buffer per read column (None when skipped; int32 offsets for text); valids: a validity bitmap per "
     "address, nullable integer or text column; texts: the bytes buffer of each text column."},
    {"count_lines", py_count_lines, METH_VARARGS, "count_lines(data) -> number of LF bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_csvscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__csvscan(void)
{
    init_tables();
    return PyModule_Create(&module);
}
