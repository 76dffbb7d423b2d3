/* Fast scanner for the canonical alloc/free CSV log (veotrace.sources.csvscan wraps it).
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

/* What each column of the line is read as (csvscan.KINDS). */
enum { K_SKIP, K_TS, K_OP, K_SIZE, K_ADDR, K_INT, K_MAXCOLS = 64 };

typedef struct {
    int ncols;
    unsigned char kind[K_MAXCOLS];
    void *out[K_MAXCOLS];       /* int64 (ts, size, int), int32 (op) or uint64 (addr) values */
    uint8_t *valid[K_MAXCOLS];  /* validity bitmap of the nullable kinds (addr, int) */
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

static inline void set_valid(uint8_t *bm, Py_ssize_t row, int ok)
{
    uint8_t bit = (uint8_t)(1u << (row & 7));
    bm[row >> 3] = ok ? (uint8_t)(bm[row >> 3] | bit) : (uint8_t)(bm[row >> 3] & ~bit);
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
static const char *scan_line(const char *p, const Out *o, Py_ssize_t row)
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
        default:
            while (!SPECIAL[(unsigned char)*p])
                p++;
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

/* Scan [buf, buf + len): whole lines only (the last may lack its line end).
 * Returns the number of rows, or -1 when a line is not in the plain shape. */
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
        if (rows >= o->cap || !(p = scan_line(p, o, rows)))
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
        if (!blank) {
            q = rows < o->cap ? scan_line(tail, o, rows) : NULL;
            if (q)
                rows++;
        }
        free(tail);
        if (!q)
            return -1;
    }
    return rows;
}

static const Py_ssize_t ITEMSIZE[] = {0, 8, 4, 8, 8, 8};

/* scan(data, kinds, outs, valids): kinds is one byte per column; outs and valids are sequences of
 * one writable buffer (or None) per column. */
static PyObject *py_scan(PyObject *self, PyObject *args)
{
    Py_buffer data, kinds;
    PyObject *outs, *valids;
    if (!PyArg_ParseTuple(args, "y*y*OO", &data, &kinds, &outs, &valids))
        return NULL;
    Py_buffer views[2 * K_MAXCOLS];
    int nviews = 0;
    PyObject *result = NULL;
    Out o;
    o.ncols = (int)kinds.len;
    o.cap = PY_SSIZE_T_MAX;
    if (kinds.len > K_MAXCOLS || PySequence_Size(outs) != kinds.len || PySequence_Size(valids) != kinds.len) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "kinds, outs and valids must have one entry per column (<= 64)");
        goto done;
    }
    for (int c = 0; c < o.ncols; c++) {
        unsigned char k = ((unsigned char *)kinds.buf)[c];
        if (k > K_INT) {
            PyErr_SetString(PyExc_ValueError, "unknown column kind");
            goto done;
        }
        o.kind[c] = k;
        o.out[c] = NULL;
        o.valid[c] = NULL;
        if (k == K_SKIP)
            continue;
        for (int which = 0; which < 2; which++) {
            if (which == 1 && k != K_ADDR && k != K_INT)
                break;
            PyObject *obj = PySequence_GetItem(which ? valids : outs, c);
            if (!obj)
                goto done;
            int bad = PyObject_GetBuffer(obj, &views[nviews], PyBUF_WRITABLE);
            Py_DECREF(obj);
            if (bad < 0)
                goto done;
            Py_buffer *v = &views[nviews++];
            Py_ssize_t n = which ? v->len * 8 : v->len / ITEMSIZE[k];
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

static PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS,
     "scan(data, kinds, outs, valids) -> rows, or -1 when a line is not in the plain shape (the caller "
     "then uses pyarrow). kinds: one byte per column (0 skip, 1 timestamp, 2 op, 3 size, 4 address, "
     "5 nullable integer); outs: a writable buffer per read column (None when skipped); valids: a "
     "validity bitmap per address or nullable integer column."},
    {"count_lines", py_count_lines, METH_VARARGS, "count_lines(data) -> number of LF bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_csvscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__csvscan(void)
{
    init_tables();
    return PyModule_Create(&module);
}
