/* Fast scanner for the canonical alloc/free CSV log (veotrace.sources.csvscan wraps it).
 *
 * It reads only the plain shape every logger writes: comma-separated fields, optionally quoted
 * without embedded quotes, commas or line ends; LF or CRLF line ends; integer timestamps, integer
 * non-negative sizes and the op names alloc, free, defrag.  Anything else (a float, a sign on a
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

typedef struct {
    int ncols, ts_col, op_col, size_col;
    int64_t *ts;
    int32_t *op;
    int64_t *size;
    Py_ssize_t cap;
} Out;

/* Bytes that end an unquoted field's text, or a quoted one's. */
static unsigned char SPECIAL[256];

static void init_special(void)
{
    SPECIAL[(unsigned char)','] = SPECIAL[(unsigned char)'\n'] = 1;
    SPECIAL[(unsigned char)'"'] = SPECIAL[(unsigned char)'\r'] = 1;
}

/* One line starting at p, which is known to end with an LF somewhere after p (so no bounds
 * checks: every loop stops at the LF). Returns the start of the next line, or NULL to decline. */
static const char *scan_line(const char *p, const Out *o, Py_ssize_t row)
{
    int col = 0;
    for (;;) {
        int quoted = *p == '"';
        p += quoted;
        if (col == o->ts_col || col == o->size_col) {
            int neg = col == o->ts_col && *p == '-';
            p += neg;
            const char *ds = p;
            int64_t v = 0;
            unsigned d;
            while ((d = (unsigned)(unsigned char)*p - (unsigned)'0') <= 9) {
                v = v * 10 + (int64_t)d;
                p++;
            }
            if (p == ds || p - ds > 18) /* empty, or might not fit int64: pyarrow decides */
                return NULL;
            if (col == o->ts_col)
                o->ts[row] = neg ? -v : v;
            else
                o->size[row] = v;
        } else {
            const char *fs = p;
            while (!SPECIAL[(unsigned char)*p])
                p++;
            if (col == o->op_col) {
                int c = op_code(fs, p);
                if (c < 0)
                    return NULL;
                o->op[row] = c;
            }
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
        return NULL; /* a quote inside a field, text after a closing quote, a lone CR */
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

static int get_out(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, const char *what)
{
    if (obj == Py_None) {
        view->obj = NULL;
        view->buf = NULL;
        view->len = 0;
        return 1;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE) < 0)
        return 0;
    if (view->len % itemsize) {
        PyErr_Format(PyExc_ValueError, "%s buffer size is not a multiple of %zd", what, itemsize);
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

static PyObject *py_scan(PyObject *self, PyObject *args)
{
    Py_buffer data, ts = {0}, op = {0}, size = {0};
    PyObject *ts_obj, *op_obj, *size_obj;
    Out o;
    if (!PyArg_ParseTuple(args, "y*iiiiOOO", &data, &o.ncols, &o.ts_col, &o.op_col, &o.size_col,
                          &ts_obj, &op_obj, &size_obj))
        return NULL;
    PyObject *result = NULL;
    if (!get_out(ts_obj, &ts, 8, "timestamp"))
        goto done_data;
    if (!get_out(op_obj, &op, 4, "op"))
        goto done_ts;
    if (!get_out(size_obj, &size, 8, "size"))
        goto done_op;
    Py_ssize_t caps[3] = {ts.obj ? ts.len / 8 : PY_SSIZE_T_MAX, op.obj ? op.len / 4 : PY_SSIZE_T_MAX,
                          size.obj ? size.len / 8 : PY_SSIZE_T_MAX};
    o.cap = caps[0] < caps[1] ? caps[0] : caps[1];
    o.cap = o.cap < caps[2] ? o.cap : caps[2];
    o.ts = ts.buf;
    o.op = op.buf;
    o.size = size.buf;
    if ((o.ts_col >= 0 && !o.ts) || (o.op_col >= 0 && !o.op) || (o.size_col >= 0 && !o.size)) {
        PyErr_SetString(PyExc_ValueError, "an output buffer is missing for a scanned column");
        goto done_size;
    }
    Py_ssize_t rows;
    Py_BEGIN_ALLOW_THREADS
    rows = scan(data.buf, data.len, &o);
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(rows);
done_size:
    if (size.obj)
        PyBuffer_Release(&size);
done_op:
    if (op.obj)
        PyBuffer_Release(&op);
done_ts:
    if (ts.obj)
        PyBuffer_Release(&ts);
done_data:
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
     "scan(data, ncols, ts_col, op_col, size_col, ts_out, op_out, size_out) -> rows, or -1 when a "
     "line is not in the plain shape (the caller then uses pyarrow). Columns not scanned are -1 "
     "with None as their output."},
    {"count_lines", py_count_lines, METH_VARARGS, "count_lines(data) -> number of LF bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_csvscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__csvscan(void)
{
    init_special();
    return PyModule_Create(&module);
}
