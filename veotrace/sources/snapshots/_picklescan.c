/* Nesting depth of a pickle, found by walking its opcodes without building any object
 * (veotrace.sources.snapshots.safe_pickle wraps it; a pure-Python twin using pickletools is the fallback).
 *
 * Why: CPython's C unpickler hashes dict keys and set items as it builds them, and hashing a
 * tuple nested 200,000 deep recurses in C without a guard: the process dies with SIGSEGV before
 * any Python code can refuse it.  This walk keeps, for each stack item, the depth of containers
 * it holds (scalars 0, containers 1 + their deepest item) and a memo of those depths, and stops
 * as soon as a depth passes the limit.  Tuples and frozensets are immutable, so their depth is
 * exact; lists and dicts filled after they were stored elsewhere may be deeper than counted, which
 * is harmless (the C code that walks them is recursion-guarded).
 *
 * It decides nothing else: an opcode it does not know, a stack underflow or a truncated argument
 * ends the walk with the depth so far, and the real unpickler then fails at that same point
 * before it builds anything past it.  Opcodes that name a class or a callable end the walk with
 * -2 (the caller refuses the file without unpickling it); the protocol 5 buffer opcodes (bytearrays,
 * out-of-band buffers), which no snapshot holds, with -5; a memo index far past the entries so far
 * (which would make the unpickler allocate a table that large) with -6; an integer wider than
 * `int_bytes` bytes (LONG1/LONG4, or INT/LONG text of more digits than that many bytes hold) with -7:
 * a 5,000-digit dict key is built, then any str() of it fails on Python's 4,300-digit bound.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t *v;
    Py_ssize_t n, cap;
} Vec;

static int vec_push(Vec *s, int32_t x)
{
    if (s->n == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 256;
        int32_t *v = realloc(s->v, (size_t)cap * sizeof(int32_t));
        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
    return 0;
}

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t x = 0;
    for (int i = n - 1; i >= 0; i--)
        x = (x << 8) | p[i];
    return x;
}

/* Largest memo index accepted: valid pickles number memo entries from 0 in order. */
#define MEMO_MAX (1 << 26)
#define MEMO_SLACK 4096

/* Decimal digits (and a sign and 'L') an integer of `int_bytes` bytes can take in INT/LONG text. */
static uint64_t text_digits(int int_bytes)
{
    return (uint64_t)int_bytes * 8 * 30103 / 100000 + 4;
}

/* Returns the deepest nesting seen (>= 0), -1 when it passes `limit` (*where = offset), -2 when an
 * opcode names a class or callable (*where = offset), -3 on out of memory, -7 at an integer wider
 * than `int_bytes` (*where = offset). */
static long long scan(const unsigned char *d, Py_ssize_t len, int limit, int int_bytes, Py_ssize_t *where)
{
    Vec st = {0}, marks = {0}, memo = {0};
    const unsigned char *p = d, *end = d + len;
    int32_t deepest = 0;
    long long result = -4; /* set below */
#define NEED(k) if ((uint64_t)(end - p) < (uint64_t)(k)) goto done
#define TOP (st.v[st.n - 1])
#define PUSH(x) do { if (vec_push(&st, (x)) < 0) { result = -3; goto out; } } while (0)
#define DEPTH(x) do { int32_t _x = (x); if (_x > deepest) deepest = _x; \
        if (_x > limit) { *where = op_at; result = -1; goto out; } } while (0)
    while (p < end) {
        Py_ssize_t op_at = p - d;
        unsigned char op = *p++;
        uint64_t n;
        int32_t m, x;
        Py_ssize_t base;
        switch (op) {
        /* scalars: fixed-size arguments */
        case 'J': NEED(4); p += 4; PUSH(0); break;            /* BININT */
        case 'K': NEED(1); p += 1; PUSH(0); break;            /* BININT1 */
        case 'M': NEED(2); p += 2; PUSH(0); break;            /* BININT2 */
        case 'G': NEED(8); p += 8; PUSH(0); break;            /* BINFLOAT */
        case 'N': case 0x88: case 0x89: PUSH(0); break;       /* NONE NEWTRUE NEWFALSE */
        case 0x96: case 0x97: case 0x98:                      /* BYTEARRAY8 NEXT_BUFFER READONLY_BUFFER */
            *where = op_at; result = -5; goto out;
        /* scalars: length-prefixed */
        case 0x8a: case 'U': case 0x8c: case 'C':             /* LONG1 SHORT_BINSTRING SHORT_BINUNICODE SHORT_BINBYTES */
            NEED(1); n = p[0];
            if (op == 0x8a && n > (uint64_t)int_bytes) { *where = op_at; result = -7; goto out; }
            p += 1; NEED(n); p += n; PUSH(0); break;
        case 0x8b: case 'T': case 'X': case 'B':              /* LONG4 BINSTRING BINUNICODE BINBYTES */
            NEED(4); n = le(p, 4); p += 4;
            if (op == 0x8b || op == 'T') n = (uint64_t)(int64_t)(int32_t)n;
            if (op == 0x8b && n > (uint64_t)int_bytes) { *where = op_at; result = -7; goto out; }
            NEED(n); p += n; PUSH(0); break;
        case 0x8d: case 0x8e:                                 /* BINUNICODE8 BINBYTES8 */
            NEED(8); n = le(p, 8); p += 8; NEED(n); p += n; PUSH(0); break;
        /* scalars: newline-terminated text (protocol 0 opcodes, still legal later) */
        case 'I': case 'L': case 'F': case 'S': case 'V': {
            const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
            if (!nl) goto done;
            if ((op == 'I' || op == 'L') && (uint64_t)(nl - p) > text_digits(int_bytes)) {
                *where = op_at; result = -7; goto out;
            }
            p = nl + 1; PUSH(0); break;
        }
        /* framing and protocol */
        case 0x80: NEED(1); p += 1; break;                    /* PROTO */
        case 0x95: NEED(8); p += 8; break;                    /* FRAME: its bytes follow inline */
        case '.': goto done;                                  /* STOP */
        /* stack shape */
        case '(': if (vec_push(&marks, (int32_t)st.n) < 0) { result = -3; goto out; } break;
        case '2': if (!st.n) goto done; PUSH(TOP); break;     /* DUP */
        case '0':                                             /* POP */
            if (marks.n && marks.v[marks.n - 1] == st.n) marks.n--;
            else if (st.n) st.n--;
            else goto done;
            break;
        case '1': if (!marks.n) goto done; st.n = marks.v[--marks.n]; break; /* POP_MARK */
        /* containers */
        case '}': case ']': case ')': case 0x8f: PUSH(1); DEPTH(1); break;
        case 'a':                                             /* APPEND */
            if (st.n < 2) goto done;
            x = st.v[--st.n] + 1; if (x > TOP) TOP = x; DEPTH(TOP); break;
        case 's':                                             /* SETITEM */
            if (st.n < 3) goto done;
            x = st.v[st.n - 1] > st.v[st.n - 2] ? st.v[st.n - 1] : st.v[st.n - 2];
            st.n -= 2; x += 1; if (x > TOP) TOP = x; DEPTH(TOP); break;
        case 'e': case 'u': case 0x90:                        /* APPENDS SETITEMS ADDITEMS */
            if (!marks.n) goto done;
            base = marks.v[--marks.n];
            if (base < 1 || base > st.n) goto done;
            m = 0; for (Py_ssize_t i = base; i < st.n; i++) if (st.v[i] > m) m = st.v[i];
            st.n = base; if (m + 1 > TOP) TOP = m + 1; DEPTH(TOP); break;
        case 'l': case 't': case 'd': case 0x91:              /* LIST TUPLE DICT FROZENSET */
            if (!marks.n) goto done;
            base = marks.v[--marks.n];
            if (base > st.n) goto done;
            m = 0; for (Py_ssize_t i = base; i < st.n; i++) if (st.v[i] > m) m = st.v[i];
            st.n = base; PUSH(m + 1); DEPTH(m + 1); break;
        case 0x85: case 0x86: case 0x87:                      /* TUPLE1 TUPLE2 TUPLE3 */
            n = op - 0x84; if ((uint64_t)st.n < n) goto done;
            m = 0; for (uint64_t i = 0; i < n; i++) if (st.v[st.n - 1 - i] > m) m = st.v[st.n - 1 - i];
            st.n -= n; PUSH(m + 1); DEPTH(m + 1); break;
        /* memo */
        case 0x94: case 'q': case 'r': case 'p':              /* MEMOIZE BINPUT LONG_BINPUT PUT */
            if (op == 0x94) n = (uint64_t)memo.n;
            else if (op == 'q') { NEED(1); n = p[0]; p += 1; }
            else if (op == 'r') { NEED(4); n = le(p, 4); p += 4; }
            else {
                const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
                if (!nl) goto done;
                n = strtoull((const char *)p, NULL, 10); p = nl + 1;
            }
            if (!st.n) goto done;
            /* The pickler numbers memo entries in order; a far index makes the C unpickler size its
             * memo table to it (gigabytes for an index near 2**32): refused. */
            if (n > (uint64_t)memo.n + MEMO_SLACK || n > MEMO_MAX) { *where = op_at; result = -6; goto out; }
            while ((uint64_t)memo.n <= n) if (vec_push(&memo, -1) < 0) { result = -3; goto out; }
            memo.v[n] = TOP; break;
        case 'h': case 'j': case 'g':                         /* BINGET LONG_BINGET GET */
            if (op == 'h') { NEED(1); n = p[0]; p += 1; }
            else if (op == 'j') { NEED(4); n = le(p, 4); p += 4; }
            else {
                const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
                if (!nl) goto done;
                n = strtoull((const char *)p, NULL, 10); p = nl + 1;
            }
            if (n >= (uint64_t)memo.n || memo.v[n] < 0) goto done;
            PUSH(memo.v[n]); break;
        /* anything that reaches a class or callable */
        case 'c': case 0x93: case 'i': case 'o': case 'R': case 'b': case 0x81: case 0x92:
        case 0x82: case 0x83: case 0x84: case 'P': case 'Q':
            *where = op_at; result = -2; goto out;
        default:
            goto done; /* unknown opcode: the unpickler refuses it here too */
        }
    }
done:
    result = deepest;
out:
    free(st.v);
    free(marks.v);
    free(memo.v);
    return result;
#undef NEED
#undef TOP
#undef PUSH
#undef DEPTH
}

static PyObject *py_depth(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    int limit, int_bytes = 1 << 30;
    Py_ssize_t where = -1;
    long long r;
    if (!PyArg_ParseTuple(args, "y*i|i", &buf, &limit, &int_bytes))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    r = scan((const unsigned char *)buf.buf, buf.len, limit, int_bytes, &where);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    if (r == -3)
        return PyErr_NoMemory();
    return Py_BuildValue("(Ln)", r, where);
}

static PyMethodDef methods[] = {
    {"depth", py_depth, METH_VARARGS,
     "depth(data, limit, int_bytes=2**30) -> (depth, offset): the deepest container nesting (>= 0); -1 when "
     "it passes limit, -2 when an opcode names a class or callable, -5 at a bytearray or out-of-band buffer "
     "opcode, -6 at a memo index far past the entries so far, -7 at an integer wider than int_bytes, with "
     "the opcode's offset."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_picklescan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__picklescan(void)
{
    return PyModule_Create(&module);
}
