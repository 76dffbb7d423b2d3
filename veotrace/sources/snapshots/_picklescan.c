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
 *
 * A FRAME must hold whole opcodes: its length ends where an opcode ends, no FRAME starts inside
 * another, and the one holding STOP ends with it (as every pickler writes them), else -9 at the FRAME.
 * The C unpickler reading a file only checks that a frame's bytes exist, and an opcode running past
 * the frame's end is then read from the bytes after the frame's claim: the same bytes would mean one
 * thing to it and another to a reader that ignores frames (the streaming decoder), so both reads
 * refuse such a pickle instead.  The walk also says where and how it stopped (`stopped`: 1 at STOP,
 * 2 when the data ends inside an opcode or before STOP, 0 at an opcode the unpickler fails at), so
 * that a length claimed past the end of the data (BINBYTES of 4 GiB in an 11-byte file, which the
 * unpickler allocates before it finds the end) is refused as cut short without unpickling.
 *
 * The same walk runs over a whole buffer (depth) or fed in chunks (stream_*), for the snapshot
 * reader that streams files of any size (snapshots/stream.py).
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
/* The chunked walk keeps one byte per memo entry and the decoder a bit, so it takes more: a pickle of
 * 2**28 memo entries is some 30 GB of snapshot. */
#define STREAM_MEMO_MAX (1 << 28)

/* Decimal digits (and a sign and 'L') an integer of `int_bytes` bytes can take in INT/LONG text. */
static uint64_t text_digits(int int_bytes)
{
    return (uint64_t)int_bytes * 8 * 30103 / 100000 + 4;
}

/* The walk's state, kept between calls so that a file can be fed in chunks (the streaming snapshot
 * reader: pass 1 over a file of any size, before anything is decoded).  `memo` holds each memo entry's
 * depth (-1 unset); `needed` a bit per memo index that some GET reads, so the decoder (_snapstream.c)
 * keeps only those objects. */
typedef struct {
    Vec st, marks;
    int8_t *memo;
    Py_ssize_t memo_n, memo_cap;
    uint8_t *needed; /* NULL: not tracked (depth()) */
    Py_ssize_t needed_cap;
    int32_t deepest;
    int limit, int_bytes;
    uint64_t memo_max; /* largest memo index accepted (MEMO_MAX; STREAM_MEMO_MAX for the chunked walk) */
    int stopped; /* STOP seen */
    int64_t frame_at, frame_end; /* the open FRAME's offset and where it ends (-1: none open) */
} ScanState;

static void state_init(ScanState *s, int limit, int int_bytes, uint64_t memo_max)
{
    s->limit = limit; s->int_bytes = int_bytes; s->memo_max = memo_max;
    s->frame_at = s->frame_end = -1;
}

static int memo_set(ScanState *s, uint64_t n, int32_t depth)
{
    if ((Py_ssize_t)n >= s->memo_cap) {
        Py_ssize_t cap = s->memo_cap ? s->memo_cap : 1024;
        while (cap <= (Py_ssize_t)n) cap *= 2;
        int8_t *v = realloc(s->memo, (size_t)cap);
        if (!v) return -1;
        memset(v + s->memo_cap, -1, (size_t)(cap - s->memo_cap));
        s->memo = v; s->memo_cap = cap;
    }
    while (s->memo_n <= (Py_ssize_t)n) s->memo[s->memo_n++] = -1;
    s->memo[n] = (int8_t)(depth > 127 ? 127 : depth);
    return 0;
}

static int need_mark(ScanState *s, uint64_t n)
{
    if (!s->needed) return 0;
    Py_ssize_t byte = (Py_ssize_t)(n >> 3);
    if (byte >= s->needed_cap) {
        Py_ssize_t cap = s->needed_cap * 2;
        while (cap <= byte) cap *= 2;
        uint8_t *v = realloc(s->needed, (size_t)cap);
        if (!v) return -1;
        memset(v + s->needed_cap, 0, (size_t)(cap - s->needed_cap));
        s->needed = v; s->needed_cap = cap;
    }
    s->needed[byte] |= (uint8_t)(1u << (n & 7));
    return 0;
}

static void state_free(ScanState *s)
{
    free(s->st.v); free(s->marks.v); free(s->memo); free(s->needed);
    memset(s, 0, sizeof(*s));
}

/* Walks d[0:len) (the file's bytes from `base`) from the state `s`.  Returns the deepest nesting seen
 * (>= 0) when the walk ended (*where = the offset it ended at: after STOP, at the opcode the data ends
 * in or the unpickler fails at; s->stopped says which), -1 when it passes the limit (*where = offset),
 * -2 when an opcode names a class or callable (*where = offset), -3 on out of memory, -7 at an
 * integer wider than `int_bytes` (*where = offset), -9 at a FRAME whose length does not end with an
 * opcode (*where = the FRAME's offset), and -8 when `final` is 0 and an opcode runs past the end of
 * `d` (*where = its offset: feed again from there with more bytes). */
static long long scan(ScanState *s, const unsigned char *d, Py_ssize_t len, Py_ssize_t base, int final,
                      Py_ssize_t *where)
{
    const unsigned char *p = d, *end = d + len;
    int limit = s->limit, int_bytes = s->int_bytes;
    long long result = -4; /* set below */
    Py_ssize_t op_at = 0;
#define NEED(k) if ((uint64_t)(end - p) < (uint64_t)(k)) goto more
#define TOP (s->st.v[s->st.n - 1])
#define PUSH(x) do { if (vec_push(&s->st, (x)) < 0) { result = -3; goto out; } } while (0)
#define DEPTH(x) do { int32_t _x = (x); if (_x > s->deepest) s->deepest = _x; \
        if (_x > limit) { *where = base + op_at; result = -1; goto out; } } while (0)
    *where = -1;
    while (p < end) {
        op_at = p - d;
        if (s->frame_end >= 0) {
            int64_t here = (int64_t)base + op_at;
            if (here == s->frame_end) s->frame_end = -1;
            else if (here > s->frame_end) { *where = (Py_ssize_t)s->frame_at; result = -9; goto out; }
        }
        unsigned char op = *p++;
        uint64_t n;
        int32_t m, x;
        Py_ssize_t b;
        switch (op) {
        /* scalars: fixed-size arguments */
        case 'J': NEED(4); p += 4; PUSH(0); break;            /* BININT */
        case 'K': NEED(1); p += 1; PUSH(0); break;            /* BININT1 */
        case 'M': NEED(2); p += 2; PUSH(0); break;            /* BININT2 */
        case 'G': NEED(8); p += 8; PUSH(0); break;            /* BINFLOAT */
        case 'N': case 0x88: case 0x89: PUSH(0); break;       /* NONE NEWTRUE NEWFALSE */
        case 0x96: case 0x97: case 0x98:                      /* BYTEARRAY8 NEXT_BUFFER READONLY_BUFFER */
            *where = base + op_at; result = -5; goto out;
        /* scalars: length-prefixed */
        case 0x8a: case 'U': case 0x8c: case 'C':             /* LONG1 SHORT_BINSTRING SHORT_BINUNICODE SHORT_BINBYTES */
            NEED(1); n = p[0];
            if (op == 0x8a && n > (uint64_t)int_bytes) { *where = base + op_at; result = -7; goto out; }
            NEED(1 + n); p += 1 + n; PUSH(0); break;
        case 0x8b: case 'T': case 'X': case 'B':              /* LONG4 BINSTRING BINUNICODE BINBYTES */
            NEED(4); n = le(p, 4);
            if (op == 0x8b || op == 'T') n = (uint64_t)(int64_t)(int32_t)n;
            if (n > (uint64_t)1 << 62) goto done; /* a negative length (LONG4, BINSTRING): the unpickler refuses it */
            if (op == 0x8b && n > (uint64_t)int_bytes) { *where = base + op_at; result = -7; goto out; }
            NEED(4 + n); p += 4 + n; PUSH(0); break;
        case 0x8d: case 0x8e:                                 /* BINUNICODE8 BINBYTES8 */
            NEED(8); n = le(p, 8);
            if (n > (uint64_t)1 << 62) goto done;
            NEED(8 + n); p += 8 + n; PUSH(0); break;
        /* scalars: newline-terminated text (protocol 0 opcodes, still legal later) */
        case 'I': case 'L': case 'F': case 'S': case 'V': {
            const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
            if (!nl) goto more;
            if ((op == 'I' || op == 'L') && (uint64_t)(nl - p) > text_digits(int_bytes)) {
                *where = base + op_at; result = -7; goto out;
            }
            p = nl + 1; PUSH(0); break;
        }
        /* framing and protocol */
        case 0x80: NEED(1); p += 1; break;                    /* PROTO */
        case 0x95:                                            /* FRAME: its bytes follow inline */
            NEED(8); n = le(p, 8); p += 8;
            if (s->frame_end >= 0 || n > ((uint64_t)1 << 62)) { *where = base + op_at; result = -9; goto out; }
            if (n) { s->frame_at = (int64_t)base + op_at; s->frame_end = (int64_t)base + (p - d) + (int64_t)n; }
            break;
        case '.':                                             /* STOP */
            if (s->frame_end >= 0 && s->frame_end != (int64_t)base + (p - d)) {
                *where = (Py_ssize_t)s->frame_at; result = -9; goto out;
            }
            s->stopped = 1; op_at = p - d; goto done;
        /* stack shape */
        case '(': if (vec_push(&s->marks, (int32_t)s->st.n) < 0) { result = -3; goto out; } break;
        case '2': if (!s->st.n) goto done; PUSH(TOP); break;  /* DUP */
        case '0':                                             /* POP */
            if (s->marks.n && s->marks.v[s->marks.n - 1] == s->st.n) s->marks.n--;
            else if (s->st.n) s->st.n--;
            else goto done;
            break;
        case '1': if (!s->marks.n) goto done; s->st.n = s->marks.v[--s->marks.n]; break; /* POP_MARK */
        /* containers */
        case '}': case ']': case ')': case 0x8f: PUSH(1); DEPTH(1); break;
        case 'a':                                             /* APPEND */
            if (s->st.n < 2) goto done;
            x = s->st.v[--s->st.n] + 1; if (x > TOP) TOP = x; DEPTH(TOP); break;
        case 's':                                             /* SETITEM */
            if (s->st.n < 3) goto done;
            x = s->st.v[s->st.n - 1] > s->st.v[s->st.n - 2] ? s->st.v[s->st.n - 1] : s->st.v[s->st.n - 2];
            s->st.n -= 2; x += 1; if (x > TOP) TOP = x; DEPTH(TOP); break;
        case 'e': case 'u': case 0x90:                        /* APPENDS SETITEMS ADDITEMS */
            if (!s->marks.n) goto done;
            b = s->marks.v[s->marks.n - 1];
            if (b < 1 || b > s->st.n) goto done;
            s->marks.n--;
            m = 0; for (Py_ssize_t i = b; i < s->st.n; i++) if (s->st.v[i] > m) m = s->st.v[i];
            s->st.n = b; if (m + 1 > TOP) TOP = m + 1; DEPTH(TOP); break;
        case 'l': case 't': case 'd': case 0x91:              /* LIST TUPLE DICT FROZENSET */
            if (!s->marks.n) goto done;
            b = s->marks.v[s->marks.n - 1];
            if (b > s->st.n) goto done;
            s->marks.n--;
            m = 0; for (Py_ssize_t i = b; i < s->st.n; i++) if (s->st.v[i] > m) m = s->st.v[i];
            s->st.n = b; PUSH(m + 1); DEPTH(m + 1); break;
        case 0x85: case 0x86: case 0x87:                      /* TUPLE1 TUPLE2 TUPLE3 */
            n = op - 0x84; if ((uint64_t)s->st.n < n) goto done;
            m = 0; for (uint64_t i = 0; i < n; i++) if (s->st.v[s->st.n - 1 - i] > m) m = s->st.v[s->st.n - 1 - i];
            s->st.n -= n; PUSH(m + 1); DEPTH(m + 1); break;
        /* memo */
        case 0x94: case 'q': case 'r': case 'p':              /* MEMOIZE BINPUT LONG_BINPUT PUT */
            if (op == 0x94) n = (uint64_t)s->memo_n;
            else if (op == 'q') { NEED(1); n = p[0]; p += 1; }
            else if (op == 'r') { NEED(4); n = le(p, 4); p += 4; }
            else {
                const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
                if (!nl) goto more;
                n = strtoull((const char *)p, NULL, 10); p = nl + 1;
            }
            if (!s->st.n) goto done;
            /* The pickler numbers memo entries in order; a far index makes the C unpickler size its
             * memo table to it (gigabytes for an index near 2**32): refused. */
            if (n > (uint64_t)s->memo_n + MEMO_SLACK || n > s->memo_max) { *where = base + op_at; result = -6; goto out; }
            if (memo_set(s, n, TOP) < 0) { result = -3; goto out; }
            break;
        case 'h': case 'j': case 'g':                         /* BINGET LONG_BINGET GET */
            if (op == 'h') { NEED(1); n = p[0]; p += 1; }
            else if (op == 'j') { NEED(4); n = le(p, 4); p += 4; }
            else {
                const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
                if (!nl) goto more;
                n = strtoull((const char *)p, NULL, 10); p = nl + 1;
            }
            if (n >= (uint64_t)s->memo_n || s->memo[n] < 0) goto done;
            if (need_mark(s, n) < 0) { result = -3; goto out; }
            PUSH(s->memo[n]); break;
        /* anything that reaches a class or callable */
        case 'c': case 0x93: case 'i': case 'o': case 'R': case 'b': case 0x81: case 0x92:
        case 0x82: case 0x83: case 0x84: case 'P': case 'Q':
            *where = base + op_at; result = -2; goto out;
        default:
            goto done; /* unknown opcode: the unpickler refuses it here too */
        }
    }
    op_at = p - d;
    if (!final) { *where = base + op_at; result = -8; goto out; }
    s->stopped = 2; /* the data ends between opcodes, before STOP */
    goto done;
more:
    if (!final) { *where = base + op_at; result = -8; goto out; }
    s->stopped = 2; /* the data ends inside this opcode: cut short */
done:
    *where = base + op_at;
    result = s->deepest;
out:
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
    int stopped;
    ScanState s = {0};
    if (!PyArg_ParseTuple(args, "y*i|i", &buf, &limit, &int_bytes))
        return NULL;
    state_init(&s, limit, int_bytes, MEMO_MAX);
    Py_BEGIN_ALLOW_THREADS
    r = scan(&s, (const unsigned char *)buf.buf, buf.len, 0, 1, &where);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    stopped = s.stopped;
    state_free(&s);
    if (r == -3)
        return PyErr_NoMemory();
    return Py_BuildValue("(Lni)", r, where, stopped);
}

/* The chunked walk: a capsule holding a ScanState. */
static void capsule_free(PyObject *cap)
{
    ScanState *s = PyCapsule_GetPointer(cap, "veotrace.picklescan");
    if (s) { state_free(s); free(s); }
}

static PyObject *py_stream_new(PyObject *self, PyObject *args)
{
    int limit, int_bytes;
    if (!PyArg_ParseTuple(args, "ii", &limit, &int_bytes))
        return NULL;
    ScanState *s = calloc(1, sizeof(ScanState));
    if (!s) return PyErr_NoMemory();
    state_init(s, limit, int_bytes, STREAM_MEMO_MAX);
    s->needed = calloc(1024, 1); s->needed_cap = 1024;
    if (!s->needed) { free(s); return PyErr_NoMemory(); }
    return PyCapsule_New(s, "veotrace.picklescan", capsule_free);
}

static PyObject *py_stream_feed(PyObject *self, PyObject *args)
{
    PyObject *cap;
    Py_buffer buf;
    Py_ssize_t base, where = -1;
    int final;
    long long r;
    if (!PyArg_ParseTuple(args, "Oy*np", &cap, &buf, &base, &final))
        return NULL;
    ScanState *s = PyCapsule_GetPointer(cap, "veotrace.picklescan");
    if (!s) { PyBuffer_Release(&buf); return NULL; }
    Py_BEGIN_ALLOW_THREADS
    r = scan(s, (const unsigned char *)buf.buf, buf.len, base, final, &where);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    if (r == -3)
        return PyErr_NoMemory();
    return Py_BuildValue("(Lni)", r, where, s->stopped);
}

static PyObject *py_stream_needed(PyObject *self, PyObject *args)
{
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O", &cap))
        return NULL;
    ScanState *s = PyCapsule_GetPointer(cap, "veotrace.picklescan");
    if (!s) return NULL;
    Py_ssize_t n = (s->memo_n + 7) / 8;
    return Py_BuildValue("(y#n)", (const char *)s->needed, n < s->needed_cap ? n : s->needed_cap, s->memo_n);
}

static PyMethodDef methods[] = {
    {"depth", py_depth, METH_VARARGS,
     "depth(data, limit, int_bytes=2**30) -> (depth, offset, stopped): the deepest container nesting (>= 0), "
     "with the offset the walk ended at and how (stopped 1: after STOP; 2: the data ends inside an opcode or "
     "before STOP; 0: at an opcode the unpickler fails at); or -1 when it passes limit, -2 when an opcode "
     "names a class or callable, -5 at a bytearray or out-of-band buffer opcode, -6 at a memo index far past "
     "the entries so far, -7 at an integer wider than int_bytes, -9 at a FRAME whose length does not end "
     "with an opcode, with the opcode's offset."},
    {"stream_new", py_stream_new, METH_VARARGS,
     "stream_new(limit, int_bytes) -> state: the same walk fed in chunks (stream_feed), tracking which memo "
     "entries some GET reads (stream_needed)."},
    {"stream_feed", py_stream_feed, METH_VARARGS,
     "stream_feed(state, data, base, final) -> (result, offset, stopped): depth's result over data (the file's "
     "bytes from offset base), or -8 with the offset of an opcode that runs past data's end when not final "
     "(feed again from there with more bytes); stopped: 1 the STOP opcode was seen, 2 the data ended before it (cut "
     "short), 0 the walk stopped at an opcode the unpickler fails at."},
    {"stream_needed", py_stream_needed, METH_VARARGS,
     "stream_needed(state) -> (bitset, memo_count): a bit per memo index that a GET reads."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_picklescan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__picklescan(void)
{
    return PyModule_Create(&module);
}
