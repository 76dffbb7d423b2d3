/* Window x size-class counting in one pass (veotrace.analysis.entropy.windows.WindowCounts.add_sized).
 *
 * For each row with mask[i] set: class = ceil(log2(size / 1024)) clamped to [min_class, max_class]
 * (size_classes in analysis/entropy.py, the same integer rule), and every window k with
 * k*S <= ts[i] < k*S + W gets one count in counts[k - k0][class - min_class].  The numpy path does
 * the same in about ten passes over the batch (compress, classes, ts // S, bincount); this is one,
 * without the GIL.  The caller has sized counts for every k the rows can reach.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* floor(a / b) for b > 0, from a floating-point estimate corrected to the exact integer: a 64-bit
 * integer division costs tens of cycles, most of the loop (numpy divides by a scalar with libdivide). */
static inline int64_t floor_div(int64_t a, int64_t b, double inv_b)
{
    int64_t q = (int64_t)((double)a * inv_b);
    while (q * b > a)
        q--;
    while (a - q * b >= b)
        q++;
    return q;
}

static inline int bit_length(uint64_t x)
{
    return x ? 64 - __builtin_clzll(x) : 0;
}

static int get(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, int writable, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (view->itemsize != itemsize || view->len % itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: items of %zd bytes expected", what, itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* count(ts, size, mask, counts, k0, step_ns, window_ns, min_class, max_class, cap[, origin_ns]) -> rows counted.
 * Window k starts at origin_ns + k*step_ns (default origin 0).
 * ts, size: int64; mask: 1-byte booleans; counts: writable int64 (rows x classes), rows from k0.
 * cap: sizes above it count as it (exactness bound of the class rule, see size_classes). */
static PyObject *py_count(PyObject *self, PyObject *args)
{
    PyObject *ts_o, *size_o, *mask_o, *counts_o;
    long long k0, step, window, min_class, max_class, cap, origin = 0;
    if (!PyArg_ParseTuple(args, "OOOOLLLLLL|L", &ts_o, &size_o, &mask_o, &counts_o, &k0, &step, &window,
                          &min_class, &max_class, &cap, &origin))
        return NULL;
    if (step < 1 || window < 1 || max_class < min_class) {
        PyErr_SetString(PyExc_ValueError, "step and window must be positive, min_class <= max_class");
        return NULL;
    }
    Py_buffer ts, size, mask, counts;
    if (get(ts_o, &ts, 8, 0, "ts") < 0)
        return NULL;
    if (get(size_o, &size, 8, 0, "size") < 0) {
        PyBuffer_Release(&ts);
        return NULL;
    }
    if (get(mask_o, &mask, 1, 0, "mask") < 0) {
        PyBuffer_Release(&ts);
        PyBuffer_Release(&size);
        return NULL;
    }
    if (get(counts_o, &counts, 8, 1, "counts") < 0) {
        PyBuffer_Release(&ts);
        PyBuffer_Release(&size);
        PyBuffer_Release(&mask);
        return NULL;
    }
    Py_ssize_t n = ts.len / 8;
    int64_t n_cls = max_class - min_class + 1;
    int64_t rows = (counts.len / 8) / n_cls;
    int64_t span = (window + step - 1) / step; /* windows one event can fall in */
    long long counted = 0, outside = 0;
    if (size.len / 8 != n || mask.len != n || (counts.len / 8) % n_cls) {
        PyErr_SetString(PyExc_ValueError, "ts, size and mask lengths differ, or counts is not rows x classes");
        goto done;
    }
    const int64_t *t = ts.buf, *sz = size.buf;
    const unsigned char *m = mask.buf;
    int64_t *c = counts.buf;
    double inv = 1.0 / (double)step;
    Py_BEGIN_ALLOW_THREADS
    if (window == step) {
        /* Each event in exactly one window. Every row is placed (the caller sized counts for all of
         * them) and adds its mask bit: no branch on the mask, which flips from row to row. */
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t x = sz[i] - 1;
            x = x < 0 ? 0 : x > cap ? cap : x;
            int64_t cls = (int64_t)bit_length((uint64_t)x) - 10;
            cls = (cls < min_class ? min_class : cls > max_class ? max_class : cls) - min_class;
            int64_t r = floor_div(t[i] - origin, step, inv) - k0;
            if ((uint64_t)r >= (uint64_t)rows) {
                outside++;
                continue;
            }
            c[r * n_cls + cls] += m[i] != 0;
            counted += m[i] != 0;
        }
    } else for (Py_ssize_t i = 0; i < n; i++) {
        if (!m[i])
            continue;
        int64_t x = sz[i] - 1;
        x = x < 0 ? 0 : x > cap ? cap : x;
        int64_t cls = (int64_t)bit_length((uint64_t)x) - 10;
        cls = (cls < min_class ? min_class : cls > max_class ? max_class : cls) - min_class;
        int64_t ti = t[i] - origin;
        int64_t base = floor_div(ti, step, inv);
        counted++;
        for (int64_t j = 0; j < span; j++) {
            int64_t k = base - j;
            if (ti >= k * step + window) /* W < S: the gap after a window */
                continue;
            int64_t r = k - k0;
            if (r < 0 || r >= rows) {
                outside++;
                continue;
            }
            c[r * n_cls + cls]++;
        }
    }
    Py_END_ALLOW_THREADS
    if (outside)
        PyErr_Format(PyExc_ValueError, "%lld counts fall outside the windows sized by the caller", outside);
done:
    PyBuffer_Release(&ts);
    PyBuffer_Release(&size);
    PyBuffer_Release(&mask);
    PyBuffer_Release(&counts);
    if (PyErr_Occurred())
        return NULL;
    return PyLong_FromLongLong(counted);
}

static PyMethodDef methods[] = {
    {"count", py_count, METH_VARARGS, "count(ts, size, mask, counts, k0, step_ns, window_ns, min_class, max_class, cap[, origin_ns]) -> rows counted"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wincount", NULL, -1, methods};

PyMODINIT_FUNC PyInit__wincount(void)
{
    return PyModule_Create(&module);
}
