/* Decoder of a PyTorch snapshot pickle fed in chunks: plain containers are built as Python objects (the
 * segments, allocator_settings, external_annotations: small), but every entry of device_traces[d] is
 * decoded into columns (device, time_us, size, addr, stream, action, device_free, stack) as it is read
 * and never built as a dict.  veotrace.sources.snapshots.stream drives it.
 *
 * It runs after pass 1 (_picklescan.stream_*) walked the whole file: that pass refused classes,
 * callables, buffers, wide integers and deep nesting, and found which memo entries some GET reads
 * (`needed`); only those objects are kept here, so the memo costs the strings and frames a file shares,
 * not every dict it holds (the C unpickler keeps them all).
 *
 * One reading: what this decoder gives is what pickle's own C unpickler builds from the same bytes (the
 * whole read, safe_pickle), or nothing.  It follows the unpickler's rules where they decide the result
 * (the stack's fence at the top MARK, APPEND(S) on lists only, ADDITEMS on sets, SETITEM(S) on dicts,
 * duplicate keys: the last value wins, unhashable keys refused), and where it cannot build the same thing
 * it stops with -10 and says why (`why`), before anything it decoded is used:
 *   - an opcode no snapshot writer uses (protocol 0 text, DUP, POP_MARK, BINBYTES8, a PROTO above 5, ...),
 *     or one the unpickler fails at (a stack underflow, a type error, an unhashable key: `why` holds its
 *     message);
 *   - an entry, a device's list or the device_traces list kept in the memo and read again (pickle would
 *     share the one object; its entries were decoded into columns here), a 'device_traces' key set twice
 *     on the top-level dict, a device list or entry that does not end where PyTorch's layout puts it
 *     (popped, put in a tuple, not the next item of device_traces, ...), an item of a device's list that
 *     is a dict built another way (DICT);
 *   - a STOP with more than the top-level object on the stack.
 * The caller (stream.py) then reads the file whole, as pickle reads it, when it is within the whole
 * read's bound (VEOTRACE_MAX_FILE_BYTES), and otherwise refuses it naming the byte: the streamed answer
 * is never a different one.  Where an entry is not what _check_entry accepts (a field that is not a
 * plain integer in range, an action that is not a string, no action, not a dict), decoding stops with the
 * offending fields as a dict (`odd`, -9), for the Python side to give the whole read's error.
 *
 * Frames: an entry's frames list is interned to a stack id: by the identity of its frame dicts when the
 * memo holds them all (PyTorch pickles each distinct frame once and refers to it), else by content.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t x = 0;
    for (int i = n - 1; i >= 0; i--) x = (x << 8) | p[i];
    return x;
}

/* T_BORROWED: an object the memo holds (pushed by GET without a reference of its own); T_FRAMES: an
 * entry's frames list, kept as pointers in `fptr` (no list is built unless the stack is new). */
enum { T_OBJ, T_INT, T_UINT, T_ENTRY, T_BORROWED, T_FRAMES };
#define IS_OBJ(v) ((v)->tag == T_OBJ || (v)->tag == T_BORROWED)
enum { R_NONE, R_ROOT, R_OUTER, R_INNER };

typedef struct {
    PyObject *o; /* T_OBJ: owned; T_BORROWED: the memo's */
    int64_t i;   /* T_INT value, T_UINT bits, T_ENTRY pool index, R_INNER: entries sunk */
    uint8_t tag, role;
    int32_t dev; /* R_INNER: device ordinal */
} Val;

/* Known entry keys. */
enum { K_ACTION, K_ADDR, K_SIZE, K_STREAM, K_TIME, K_DEVFREE, K_FRAMES, K_META, NKEYS };
static const char *KEY_NAMES[NKEYS] = {"action", "addr", "size", "stream", "time_us", "device_free", "frames",
                                       "user_metadata"};
#define TIME_US_MAX (INT64_MAX / 1000)

typedef struct {
    PyObject *action, *frames, *bad; /* owned or NULL; bad: dict of fields _check_entry refuses */
    int64_t v[NKEYS];
    uint8_t set[NKEYS]; /* 0 absent, 1 valid int, 2 None, 3 other */
    uint8_t uaddr;      /* addr >= 2**63 */
    uint8_t has_fr;     /* frames given as fptr[fstart:fstart+flen] */
    uint8_t addr_i64;   /* addr is an int64 (negative too): an oom entry's free bytes in older PyTorch */
    Py_ssize_t fstart, flen;
} Entry;

typedef struct {
    void *p;
    Py_ssize_t n, cap, item;
} Buf;

static int buf_push(Buf *b, const void *x)
{
    if (b->n == b->cap) {
        Py_ssize_t cap = b->cap ? b->cap * 2 : 4096;
        void *v = PyMem_Realloc(b->p, (size_t)cap * b->item);
        if (!v) return -1;
        b->p = v; b->cap = cap;
    }
    memcpy((char *)b->p + b->n * b->item, x, b->item);
    b->n++;
    return 0;
}

enum { C_DEV, C_TS, C_TSV, C_SIZE, C_ADDR, C_ADDRV, C_STREAM, C_STREAMV, C_ACTION, C_FREE, C_FREEV, C_STACK, NCOLS };
static const char *COL_NAMES[NCOLS] = {"device", "time_us", "time_valid", "size", "addr", "addr_valid", "stream",
                                       "stream_valid", "action", "device_free", "device_free_valid", "stack"};
static const Py_ssize_t COL_ITEM[NCOLS] = {4, 8, 1, 8, 8, 1, 8, 1, 4, 8, 1, 4};

typedef struct {
    PyObject_HEAD
    Val *st; Py_ssize_t n, cap;
    Py_ssize_t *marks; Py_ssize_t mn, mcap;
    Entry *pool; Py_ssize_t pn, pcap;
    PyObject **memo; /* slots of the needed entries only */
    uint64_t *words; uint32_t *rank; Py_ssize_t nwords, memo_total, memo_n; /* needed bits, their prefix counts */
    int64_t devices; /* inner lists seen */
    Buf cols[NCOLS];
    PyObject *keys[NKEYS];   /* the key strings (owned) */
    PyObject *key_seen[NKEYS]; /* last object seen equal to each key (owned) */
    PyObject *actions;       /* dict action str -> id */
    PyObject *action_list;   /* list of action strs by id */
    PyObject *last_action; int32_t last_action_id;
    PyObject *stacks_by_content; /* dict content tuple -> id */
    PyObject *stack_list;        /* list: each id's frames list */
    /* identity table of stacks: open addressing on a hash of the frame dicts' addresses */
    int64_t *ident_hash; int32_t *ident_id; Py_ssize_t ident_cap, ident_n;
    PyObject **fptr; uint8_t *fown; Py_ssize_t fn, fcap; /* frames of the entries on the stack; fown: owned */
    PyObject *graveyard; /* objects a PUT replaced in the memo while GETs may still lend them */
    PyObject *result, *odd;
    PyObject *why; /* why decoding stopped with -10 (a str), or NULL */
    int64_t odd_dev, odd_index;
    int has_time, has_meta, stopped;
    int outer_done; /* the device_traces list was stored as the top-level dict's 'device_traces' */
    int64_t sunk;   /* entries decoded into columns */
} Decoder;

/* Stop with -10: the decoder cannot build what pickle would from here on (see the header). */
static int unfaithful(Decoder *d, const char *why)
{
    if (!d->why) d->why = PyUnicode_FromString(why);
    return -10;
}

/* The lowest stack index an opcode may take items from: the top MARK's (the unpickler's fence). */
static Py_ssize_t fence(Decoder *d)
{
    return d->mn ? d->marks[d->mn - 1] : 0;
}

static void val_clear(Val *v)
{
    if (v->tag == T_OBJ) Py_CLEAR(v->o);
}

static void entry_clear(Entry *e)
{
    Py_CLEAR(e->action); Py_CLEAR(e->frames); Py_CLEAR(e->bad);
}

static PyObject *int_obj(const Val *v)
{
    if (v->tag == T_INT) return PyLong_FromLongLong(v->i);
    return PyLong_FromUnsignedLongLong((uint64_t)v->i);
}

/* A new reference to the value as a Python object (ints made now); NULL with an error set, or for an
 * entry (never built as an object: the caller says why). */
static PyObject *materialize(Val *v)
{
    if (IS_OBJ(v)) { Py_INCREF(v->o); return v->o; }
    if (v->tag == T_INT || v->tag == T_UINT) return int_obj(v);
    return NULL;
}

static int push(Decoder *d, Val v)
{
    if (d->n == d->cap) {
        Py_ssize_t cap = d->cap ? d->cap * 2 : 256;
        Val *s = PyMem_Realloc(d->st, (size_t)cap * sizeof(Val));
        if (!s) { if (v.tag == T_OBJ) Py_DECREF(v.o); PyErr_NoMemory(); return -1; }
        d->st = s; d->cap = cap;
    }
    d->st[d->n++] = v;
    return 0;
}

static int push_obj(Decoder *d, PyObject *o, uint8_t role)
{
    if (!o) return -1;
    Val v = {o, 0, T_OBJ, role, 0};
    return push(d, v);
}

static int push_int(Decoder *d, int64_t i)
{
    Val v = {NULL, i, T_INT, R_NONE, 0};
    return push(d, v);
}

static Py_ssize_t top_mark(Decoder *d)
{
    return d->mn ? d->marks[d->mn - 1] : -1;
}

/* Whether a list created now holds one device's entries (its parent is the 'device_traces' list: on
 * top, filled by APPEND, or below the mark its items follow), and whether a dict created now is an entry. */
static int new_inner(Decoder *d)
{
    Py_ssize_t m = top_mark(d);
    if (d->n && d->st[d->n - 1].role == R_OUTER) return 1;
    return m >= 1 && m <= d->n && d->st[m - 1].role == R_OUTER && (m == d->n || d->st[d->n - 1].role == R_INNER);
}

/* A list created now is an entry's frames: its key is on top, in the entry's SETITEMS run. */
static int new_frames(Decoder *d);

static int new_entry(Decoder *d)
{
    Py_ssize_t m = top_mark(d);
    if (d->n && d->st[d->n - 1].role == R_INNER) return 1;
    return m >= 1 && m <= d->n && d->st[m - 1].role == R_INNER && (m == d->n || d->st[d->n - 1].tag == T_ENTRY);
}

static int is_key(Decoder *d, PyObject *o, int k)
{
    if (o == d->key_seen[k]) return 1;
    if (!PyUnicode_CheckExact(o)) return 0;
    int eq = PyUnicode_Compare(o, d->keys[k]) == 0;
    if (eq) { Py_INCREF(o); Py_XSETREF(d->key_seen[k], o); }
    return eq;
}

static PyObject *DEVICE_TRACES; /* "device_traces" */

/* A list created now is the root dict's 'device_traces' value: the key is on top, right above the
 * root (SETITEM) or above the root's mark with an even number of items between (SETITEMS). */
static int outer_here(Decoder *d)
{
    if (d->n < 2) return 0;
    Val *k = &d->st[d->n - 1];
    if (!IS_OBJ(k) || !PyUnicode_CheckExact(k->o) || PyUnicode_Compare(k->o, DEVICE_TRACES) != 0) return 0;
    Py_ssize_t m = top_mark(d);
    if (m == 1 && d->st[0].role == R_ROOT && (d->n - 1 - m) % 2 == 0) return 1;
    return d->n == 2 && d->st[0].role == R_ROOT && m < 1;
}

static int new_frames(Decoder *d)
{
    Py_ssize_t m = top_mark(d);
    if (m < 1 || m > d->n || d->st[m - 1].tag != T_ENTRY || (d->n - m) % 2 != 1) return 0;
    Val *k = &d->st[d->n - 1];
    return IS_OBJ(k) && is_key(d, k->o, K_FRAMES);
}

static int64_t hash_ptrs(PyObject **items, Py_ssize_t n)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)n;
    for (Py_ssize_t i = 0; i < n; i++) { h ^= (uint64_t)(uintptr_t)items[i]; h *= 1099511628211ULL; h ^= h >> 29; }
    return (int64_t)(h | 1);
}

static int ident_grow(Decoder *d)
{
    Py_ssize_t cap = d->ident_cap ? d->ident_cap * 2 : 1024;
    int64_t *h = PyMem_Calloc((size_t)cap, sizeof(int64_t));
    int32_t *id = PyMem_Calloc((size_t)cap, sizeof(int32_t));
    if (!h || !id) { PyMem_Free(h); PyMem_Free(id); PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < d->ident_cap; i++) {
        if (!d->ident_hash[i]) continue;
        Py_ssize_t j = (Py_ssize_t)((uint64_t)d->ident_hash[i] & (uint64_t)(cap - 1));
        while (h[j]) j = (j + 1) & (cap - 1);
        h[j] = d->ident_hash[i]; id[j] = d->ident_id[i];
    }
    PyMem_Free(d->ident_hash); PyMem_Free(d->ident_id);
    d->ident_hash = h; d->ident_id = id; d->ident_cap = cap;
    return 0;
}

static int32_t intern_items(Decoder *d, PyObject **items, Py_ssize_t n, int held, PyObject *list);

static int32_t new_stack(Decoder *d, PyObject **items, Py_ssize_t n, PyObject *list)
{
    int32_t id = (int32_t)PyList_GET_SIZE(d->stack_list);
    PyObject *frames = list;
    if (frames && !PyList_CheckExact(frames)) frames = NULL;
    if (frames) Py_INCREF(frames);
    else {
        frames = PyList_New(n);
        if (!frames) return -2;
        for (Py_ssize_t i = 0; i < n; i++) { Py_INCREF(items[i]); PyList_SET_ITEM(frames, i, items[i]); }
    }
    int r = PyList_Append(d->stack_list, frames);
    Py_DECREF(frames);
    return r < 0 ? -2 : id;
}

/* Whether the memo keeps every frame of the entry: pushed by GET, or built here and memoised (a frame's
 * first sight, whose later sights are GETs of the same object). */
static int frames_held(Decoder *d, Entry *e)
{
    for (Py_ssize_t i = 0; i < e->flen; i++)
        if (d->fown[e->fstart + i] && Py_REFCNT(d->fptr[e->fstart + i]) < 2) return 0;
    return 1;
}

static int frames_add(Decoder *d, Val *v)
{
    if (d->fn == d->fcap) {
        Py_ssize_t cap = d->fcap ? d->fcap * 2 : 4096;
        PyObject **p = PyMem_Realloc(d->fptr, (size_t)cap * sizeof(PyObject *));
        if (!p) { PyErr_NoMemory(); return -1; }
        d->fptr = p;
        uint8_t *o = PyMem_Realloc(d->fown, (size_t)cap);
        if (!o) { PyErr_NoMemory(); return -1; }
        d->fown = o; d->fcap = cap;
    }
    if (v->role != R_NONE) return unfaithful(d, "a device list in a frames list");
    if (v->tag == T_BORROWED) { d->fptr[d->fn] = v->o; d->fown[d->fn++] = 0; return 0; }
    PyObject *o = materialize(v);
    if (!o) return PyErr_Occurred() ? -1 : unfaithful(d, "a frames list holding a trace entry or frames list");
    d->fptr[d->fn] = o; d->fown[d->fn++] = 1;
    return 0;
}

/* An entry's frames given as an object (a list shared by the memo, or None, or not a list). */
static int32_t intern_stack(Decoder *d, PyObject *frames)
{
    if (!frames || frames == Py_None) return -1;
    if (!PyList_CheckExact(frames) && !PyTuple_CheckExact(frames)) return -1; /* not a stack, as attribution counts it */
    Py_ssize_t n = PySequence_Fast_GET_SIZE(frames);
    PyObject **items = PySequence_Fast_ITEMS(frames);
    int held = 1;
    for (Py_ssize_t i = 0; i < n && held; i++) held = Py_REFCNT(items[i]) > 1;
    return intern_items(d, items, n, held, frames);
}

static int32_t intern_items(Decoder *d, PyObject **items, Py_ssize_t n, int held, PyObject *list)
{
    if (held) { /* every frame dict is kept by the memo: its address names it for the whole read */
        if (d->ident_n * 2 >= d->ident_cap && ident_grow(d) < 0) return -2;
        int64_t h = hash_ptrs(items, n);
        Py_ssize_t j = (Py_ssize_t)((uint64_t)h & (uint64_t)(d->ident_cap - 1));
        while (d->ident_hash[j]) {
            if (d->ident_hash[j] == h) {
                PyObject *seen = PyList_GET_ITEM(d->stack_list, d->ident_id[j]);
                if (PySequence_Fast_GET_SIZE(seen) == n
                    && !memcmp(PySequence_Fast_ITEMS(seen), items, (size_t)n * sizeof(PyObject *)))
                    return d->ident_id[j];
            }
            j = (j + 1) & (d->ident_cap - 1);
        }
        int32_t id = new_stack(d, items, n, list);
        if (id < 0) return id;
        d->ident_hash[j] = h; d->ident_id[j] = id; d->ident_n++;
        return id;
    }
    /* frames written out in full: by content (each frame dict's values) */
    PyObject *key = PyTuple_New(n);
    if (!key) return -2;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *f = items[i], *k;
        if (PyDict_CheckExact(f)) { /* its (key, value) pairs: a frame is its names and their values */
            PyObject *items = PyDict_Items(f);
            k = items ? PySequence_Tuple(items) : NULL;
            Py_XDECREF(items);
        } else {
            k = f; Py_INCREF(k);
        }
        if (!k) { Py_DECREF(key); return -2; }
        PyTuple_SET_ITEM(key, i, k);
    }
    PyObject *found = PyDict_GetItemWithError(d->stacks_by_content, key);
    if (found) { Py_DECREF(key); return (int32_t)PyLong_AsLong(found); }
    if (PyErr_Occurred()) { /* an unhashable frame: no stack id of its own */
        PyErr_Clear(); Py_DECREF(key); return new_stack(d, items, n, list);
    }
    int32_t id = new_stack(d, items, n, list);
    if (id >= 0) {
        PyObject *o = PyLong_FromLong(id);
        if (!o || PyDict_SetItem(d->stacks_by_content, key, o) < 0) { Py_XDECREF(o); Py_DECREF(key); return -2; }
        Py_DECREF(o);
    }
    Py_DECREF(key);
    return id;
}

/* ---- memo: only the entries pass 1 saw a GET of ---- */

static Py_ssize_t memo_slot(Decoder *d, uint64_t n)
{
    if ((Py_ssize_t)n >= d->memo_total) return -1;
    uint64_t word = d->words[n >> 6], bit = 1ULL << (n & 63);
    if (!(word & bit)) return -1;
    return (Py_ssize_t)d->rank[n >> 6] + __builtin_popcountll(word & (bit - 1));
}

static int memo_put(Decoder *d, uint64_t n)
{
    if (d->n <= fence(d)) return unfaithful(d, "a memo PUT with nothing above the MARK (unpickling stack underflow)");
    if ((Py_ssize_t)n + 1 > d->memo_n) d->memo_n = (Py_ssize_t)n + 1;
    Py_ssize_t slot = memo_slot(d, n);
    if (slot < 0) return 0; /* never read again: not kept */
    Val *t = &d->st[d->n - 1];
    if (t->tag == T_ENTRY || t->role != R_NONE) /* pickle shares the object; here its entries become columns */
        return unfaithful(d, "a trace entry or device list that the memo keeps and the pickle reads again");
    if (t->tag == T_FRAMES) { /* a frames list read again later: built as a list after all */
        if (d->fn != t->i) return unfaithful(d, "a frames list memoised after its first frames");
        PyObject *l = PyList_New(0);
        if (!l) return -1;
        t->o = l; t->tag = T_OBJ;
    }
    if (!IS_OBJ(t)) { /* an int read again later: made an object once, here */
        PyObject *o = int_obj(t);
        if (!o) return -1;
        t->o = o; t->tag = T_OBJ;
    }
    Py_INCREF(t->o);
    if (d->memo[slot]) { /* GETs may have lent the old object to the stack: it lives on */
        int r = PyList_Append(d->graveyard, d->memo[slot]);
        Py_DECREF(d->memo[slot]);
        if (r < 0) return -1;
    }
    d->memo[slot] = t->o;
    return 0;
}

static int memo_get(Decoder *d, uint64_t n)
{
    Py_ssize_t slot = memo_slot(d, n);
    if (slot < 0 || !d->memo[slot]) return unfaithful(d, "a GET of a memo entry never stored (Memo value not found)");
    Val v = {d->memo[slot], 0, T_BORROWED, R_NONE, 0};
    return push(d, v);
}

static int frames_add(Decoder *d, Val *v);

/* Inside the MARK run of an entry's frames list: a GET's object goes to `fptr` straight away, not via the
 * stack (APPENDS then finds no items above its mark). Most of a snapshot's opcodes are these GETs. */
static inline int frames_open(Decoder *d)
{
    return d->mn && d->marks[d->mn - 1] == d->n && d->n && d->st[d->n - 1].tag == T_FRAMES
        && (d->mn < 2 || d->marks[d->mn - 2] != d->n);
}

/* Whether frames GETs went straight to `fptr` since the frames list's MARK (items pickle holds on its
 * stack above the MARK, which an opcode other than APPENDS would take there). */
static inline int frames_hidden(Decoder *d)
{
    return frames_open(d) && d->fn > d->st[d->n - 1].i;
}

static int frame_get(Decoder *d, uint64_t n)
{
    Py_ssize_t slot = memo_slot(d, n);
    if (slot < 0 || !d->memo[slot]) return unfaithful(d, "a GET of a memo entry never stored (Memo value not found)");
    Val v = {d->memo[slot], 0, T_BORROWED, R_NONE, 0};
    return frames_add(d, &v);
}

/* ---- entries ---- */

static int entry_bad(Decoder *d, Entry *e, PyObject *key, Val *v)
{
    PyObject *o = materialize(v);
    if (!o) return PyErr_Occurred() ? -1 : unfaithful(d, "a trace entry's field holds another trace entry or frames list");
    if (!e->bad && !(e->bad = PyDict_New())) { Py_DECREF(o); return -1; }
    int r = PyDict_SetItem(e->bad, key, o);
    Py_DECREF(o);
    return r;
}

/* A field set again (a duplicate key: pickle keeps the last value) is no longer refused for its first. */
static int entry_unbad(Entry *e, PyObject *key)
{
    if (!e->bad) return 0;
    int has = PyDict_Contains(e->bad, key);
    if (has <= 0) return has;
    if (PyDict_DelItem(e->bad, key) < 0) return -1;
    if (!PyDict_GET_SIZE(e->bad)) Py_CLEAR(e->bad);
    return 0;
}

/* entry[key] = v, as pickle's SETITEM(S) on a dict: a key set twice keeps its last value; takes v's reference. */
static int entry_set(Decoder *d, Entry *e, Val *kv, Val *v)
{
    int r = 0, k;
    if (kv->role != R_NONE || v->role != R_NONE || kv->tag == T_ENTRY || kv->tag == T_FRAMES) {
        r = unfaithful(d, "a trace entry keyed by a dict or list, or holding a device list");
        goto drop;
    }
    if (!IS_OBJ(kv)) goto drop; /* an integer key: no field of a snapshot */
    PyObject *key = kv->o;
    if (!PyUnicode_CheckExact(key) && PyObject_Hash(key) == -1) goto drop; /* unhashable: pickle's TypeError */
    for (k = 0; k < NKEYS; k++) if (is_key(d, key, k)) break;
    if (k == NKEYS) goto drop;
    if (k == K_META) { d->has_meta = 1; goto drop; }
    if (k == K_TIME) d->has_time = 1;
    if ((r = entry_unbad(e, key)) < 0) goto drop;
    if (k == K_ACTION) {
        if (IS_OBJ(v) && PyUnicode_Check(v->o)) { Py_INCREF(v->o); Py_XSETREF(e->action, v->o); e->set[k] = 1; }
        else { Py_CLEAR(e->action); e->set[k] = 3; r = entry_bad(d, e, key, v); }
        goto drop;
    }
    if (k == K_FRAMES) {
        if (v->tag == T_FRAMES) { e->has_fr = 1; e->fstart = v->i; e->flen = d->fn - v->i; Py_CLEAR(e->frames); }
        else if (IS_OBJ(v)) { Py_INCREF(v->o); Py_XSETREF(e->frames, v->o); e->has_fr = 0; }
        else r = unfaithful(d, "a trace entry's frames is a number or another trace entry");
        goto drop;
    }
    if (IS_OBJ(v) && PyLong_CheckExact(v->o)) { /* an int the memo keeps (read again by a GET): its value, as pushed */
        int over = 0;
        long long x = PyLong_AsLongLongAndOverflow(v->o, &over);
        if (!over && !(x == -1 && PyErr_Occurred())) { Val iv = {NULL, x, T_INT, R_NONE, 0}; val_clear(v); *v = iv; }
        else if (over > 0 && _PyLong_NumBits(v->o) <= 64) {
            Val uv = {NULL, (int64_t)PyLong_AsUnsignedLongLong(v->o), T_UINT, R_NONE, 0};
            val_clear(v); *v = uv;
        }
        PyErr_Clear();
    }
    if (k == K_ADDR) { e->addr_i64 = v->tag == T_INT; e->v[k] = v->i; e->uaddr = 0; }
    if (IS_OBJ(v) && v->o == Py_None) { e->set[k] = 2; goto drop; }
    if (v->tag == T_INT || v->tag == T_UINT) {
        int ok = v->tag == T_INT ? v->i >= 0 && (k != K_TIME || v->i < TIME_US_MAX) : k == K_ADDR;
        if (k == K_DEVFREE) { e->set[k] = v->tag == T_INT ? 1 : 3; e->v[k] = v->i; goto drop; }
        if (ok) { e->set[k] = 1; e->v[k] = v->i; if (k == K_ADDR) e->uaddr = v->tag == T_UINT; goto drop; }
    }
    e->set[k] = 3;
    if (k != K_DEVFREE) r = entry_bad(d, e, key, v);
drop:
    if (r == 0 && PyErr_Occurred()) r = -1; /* PyObject_Hash's TypeError: the caller says why */
    val_clear(kv);
    val_clear(v);
    return r;
}

static int col_push(Decoder *d, int c, const void *x)
{
    if (buf_push(&d->cols[c], x) < 0) { PyErr_NoMemory(); return -1; }
    return 0;
}

static int32_t action_id(Decoder *d, PyObject *action)
{
    if (action == d->last_action) return d->last_action_id;
    PyObject *id = PyDict_GetItemWithError(d->actions, action);
    int32_t r;
    if (id) r = (int32_t)PyLong_AsLong(id);
    else {
        if (PyErr_Occurred()) return -1;
        r = (int32_t)PyList_GET_SIZE(d->action_list);
        PyObject *o = PyLong_FromLong(r);
        if (!o || PyDict_SetItem(d->actions, action, o) < 0 || PyList_Append(d->action_list, action) < 0) {
            Py_XDECREF(o); return -1;
        }
        Py_DECREF(o);
    }
    Py_INCREF(action);
    Py_XSETREF(d->last_action, action);
    d->last_action_id = r;
    return r;
}

/* Stop on an item of device_traces[dev] that is not an entry _check_entry accepts: `odd` is what the
 * Python side checks (the entry's refused fields and its action, or the item itself). */
static int odd_item(Decoder *d, Val *item, int64_t dev, int64_t index)
{
    PyObject *o;
    if (item->tag == T_ENTRY) {
        Entry *e = &d->pool[item->i];
        o = e->bad ? e->bad : PyDict_New();
        if (!o) return -1;
        if (e->bad) { Py_INCREF(o); }
        if (e->action && PyDict_SetItemString(o, "action", e->action) < 0) { Py_DECREF(o); return -1; }
    } else {
        o = materialize(item);
        if (!o) return -1;
    }
    Py_XSETREF(d->odd, o);
    d->odd_dev = dev; d->odd_index = index;
    return -9;
}

static int sink(Decoder *d, Val *inner, Val *item)
{
    if (item->role != R_NONE || item->tag == T_FRAMES)
        return unfaithful(d, "a device's trace holds a device list or a frames list");
    if (item->tag != T_ENTRY && IS_OBJ(item) && PyDict_Check(item->o))
        return unfaithful(d, "a trace entry built by the DICT opcode, or read from the memo");
    int64_t index = inner->i++;
    int64_t dev = inner->dev;
    if (item->tag != T_ENTRY) return odd_item(d, item, dev, index);
    Entry *e = &d->pool[item->i];
    int oom = e->action && PyUnicode_CompareWithASCIIString(e->action, "oom") == 0;
    if (oom && e->bad && PyDict_GetItemString(e->bad, "addr")) { /* oom entries are not checked for addr */
        if (PyDict_DelItemString(e->bad, "addr") < 0) return -1;
        if (!PyDict_GET_SIZE(e->bad)) Py_CLEAR(e->bad);
    }
    if (!e->action || e->bad) return odd_item(d, item, dev, index);
    int32_t dv = (int32_t)dev, act = action_id(d, e->action);
    int32_t stack = e->has_fr ? intern_items(d, d->fptr + e->fstart, e->flen, frames_held(d, e), NULL)
                              : intern_stack(d, e->frames);
    if (act < 0 || stack == -2) return -1;
    uint8_t tv = e->set[K_TIME] == 1, av = e->set[K_ADDR] == 1 && !oom, sv = e->set[K_STREAM] == 1, fv = 0;
    int64_t size = e->set[K_SIZE] == 1 ? e->v[K_SIZE] : 0, free_bytes = 0;
    if (oom) { /* device_free, or addr in older PyTorch: model.oom_free_bytes (an int64, else None) */
        if (e->set[K_DEVFREE]) { fv = e->set[K_DEVFREE] == 1; free_bytes = e->v[K_DEVFREE]; }
        else if (e->set[K_ADDR] && e->addr_i64) { fv = 1; free_bytes = e->v[K_ADDR]; }
    }
    if (col_push(d, C_DEV, &dv) || col_push(d, C_TS, &e->v[K_TIME]) || col_push(d, C_TSV, &tv)
        || col_push(d, C_SIZE, &size) || col_push(d, C_ADDR, &e->v[K_ADDR]) || col_push(d, C_ADDRV, &av)
        || col_push(d, C_STREAM, &e->v[K_STREAM]) || col_push(d, C_STREAMV, &sv) || col_push(d, C_ACTION, &act)
        || col_push(d, C_FREE, &free_bytes) || col_push(d, C_FREEV, &fv) || col_push(d, C_STACK, &stack))
        return -1;
    d->sunk++;
    return 0;
}

/* Pool entries are freed when no entry remains on the stack (after the APPENDS that sank them). */
static void pool_trim(Decoder *d)
{
    while (d->pn) {
        int used = 0;
        for (Py_ssize_t i = d->n - 1; i >= 0 && !used; i--) if (d->st[i].tag == T_ENTRY) used = 1;
        if (used) return;
        for (Py_ssize_t i = 0; i < d->pn; i++) entry_clear(&d->pool[i]);
        d->pn = 0;
        for (Py_ssize_t i = 0; i < d->fn; i++) if (d->fown[i]) Py_DECREF(d->fptr[i]);
        d->fn = 0;
    }
}

static int new_pool_entry(Decoder *d)
{
    if (d->pn == d->pcap) {
        Py_ssize_t cap = d->pcap ? d->pcap * 2 : 1024;
        Entry *p = PyMem_Realloc(d->pool, (size_t)cap * sizeof(Entry));
        if (!p) { PyErr_NoMemory(); return -1; }
        d->pool = p; d->pcap = cap;
    }
    memset(&d->pool[d->pn], 0, sizeof(Entry));
    Val v = {NULL, d->pn++, T_ENTRY, R_NONE, 0};
    return push(d, v);
}

/* The top-level dict's d[key] = v, where v may be the device_traces list (R_OUTER): it is the value of
 * 'device_traces', once; any other value of that key after it would replace the entries decoded. */
static int root_set(Decoder *d, Val *kv, Val *v)
{
    int is_dt = IS_OBJ(kv) && PyUnicode_CheckExact(kv->o) && PyUnicode_Compare(kv->o, DEVICE_TRACES) == 0;
    if (v->role == R_OUTER && !is_dt) return unfaithful(d, "the device_traces list stored under another key");
    if (is_dt && d->outer_done) return unfaithful(d, "the top-level dict's 'device_traces' key set twice");
    if (v->role == R_OUTER) d->outer_done = 1;
    return 0;
}

/* Items base..n-1 go into the container at base-1 (op: APPEND(S) 'e', SETITEM(S) 'u', ADDITEMS 0x90), with the
 * unpickler's checks: the container above the fence (the MARK below, now the top one), APPEND(S) on a list,
 * ADDITEMS on a set, SETITEM(S) on a dict, an even count of SETITEMS items; no items: nothing is checked. */
static int fill(Decoder *d, Py_ssize_t base, unsigned char op)
{
    if (base > d->n || base <= fence(d)) return unfaithful(d, "unpickling stack underflow");
    if (base == d->n) return 0;
    Val *c = &d->st[base - 1];
    int r = 0;
    Py_ssize_t i;
    if (op == 'u') {
        if ((d->n - base) % 2) return unfaithful(d, "odd number of items for SETITEMS");
        for (i = base; i < d->n && !r; i += 2) {
            if (c->tag == T_ENTRY) { r = entry_set(d, &d->pool[c->i], &d->st[i], &d->st[i + 1]); continue; }
            if (!IS_OBJ(c) || !PyDict_CheckExact(c->o)) { r = unfaithful(d, "SETITEMS on something other than a dict"); break; }
            if (c->role == R_ROOT && (r = root_set(d, &d->st[i], &d->st[i + 1]))) break;
            uint8_t vrole = d->st[i + 1].role;
            if (d->st[i].role != R_NONE || (vrole != R_NONE && !(vrole == R_OUTER && c->role == R_ROOT))) {
                r = unfaithful(d, "a device list stored where PyTorch's layout does not put it");
                break;
            }
            PyObject *k = materialize(&d->st[i]), *v = k ? materialize(&d->st[i + 1]) : NULL;
            r = (!k || !v) ? (PyErr_Occurred() ? -1 : unfaithful(d, "a trace entry or frames list as a dict's key or value"))
                           : PyDict_SetItem(c->o, k, v);
            Py_XDECREF(k); Py_XDECREF(v);
        }
    } else {
        if (c->tag == T_FRAMES && op != 'e') r = unfaithful(d, "ADDITEMS on a list");
        for (i = base; i < d->n && !r; i++) {
            if (c->role == R_INNER && IS_OBJ(c)) {
                r = op == 'e' ? sink(d, c, &d->st[i]) : unfaithful(d, "ADDITEMS on a list");
                continue;
            }
            if (c->tag == T_FRAMES) { r = frames_add(d, &d->st[i]); continue; }
            int ok = IS_OBJ(c) && (op == 'e' ? PyList_CheckExact(c->o) : PySet_CheckExact(c->o));
            if (!ok) { r = unfaithful(d, op == 'e' ? "APPEND(S) on something other than a list" : "ADDITEMS on something other than a set"); break; }
            Val *item = &d->st[i];
            if (c->role == R_OUTER) { /* device_traces: its items are the devices' lists, in order */
                if (item->role != R_INNER || item->dev != (int64_t)PyList_GET_SIZE(c->o)) {
                    r = unfaithful(d, "device_traces holds something other than the devices' lists, in order");
                    break;
                }
            } else if (item->role != R_NONE) {
                r = unfaithful(d, "a device list stored where PyTorch's layout does not put it");
                break;
            }
            PyObject *v = materialize(item);
            r = !v ? (PyErr_Occurred() ? -1 : unfaithful(d, "a trace entry or frames list in a list or set"))
                   : op == 'e' ? PyList_Append(c->o, v) : PySet_Add(c->o, v);
            Py_XDECREF(v);
        }
    }
    for (i = base; i < d->n; i++) val_clear(&d->st[i]);
    d->n = base;
    pool_trim(d);
    return r;
}

/* A tuple/list/dict/frozenset of items base..n-1, replacing them. */
static int build(Decoder *d, Py_ssize_t base, unsigned char op)
{
    if (base < fence(d) || base > d->n) return unfaithful(d, "unpickling stack underflow");
    Py_ssize_t k = d->n - base;
    for (Py_ssize_t i = base; i < d->n; i++)
        if (d->st[i].role != R_NONE) return unfaithful(d, "a device list put in a tuple, list, dict or frozenset");
    if (op == 'd' && k % 2) return unfaithful(d, "odd number of items for DICT");
    PyObject *o = op == 'd' ? PyDict_New() : op == 'l' ? PyList_New(k) : op == 0x91 ? PySet_New(NULL) : PyTuple_New(k);
    if (!o) return -1;
    int r = 0;
    for (Py_ssize_t i = 0; i < k && !r; i++) {
        if (op == 'd') {
            PyObject *kk = materialize(&d->st[base + i]), *v = kk ? materialize(&d->st[base + i + 1]) : NULL;
            r = (!kk || !v) ? (PyErr_Occurred() ? -1 : unfaithful(d, "a trace entry or frames list in a DICT")) : PyDict_SetItem(o, kk, v);
            Py_XDECREF(kk); Py_XDECREF(v);
            i++;
            continue;
        }
        PyObject *v = materialize(&d->st[base + i]);
        if (!v) { r = PyErr_Occurred() ? -1 : unfaithful(d, "a trace entry or frames list in a tuple, list or frozenset"); break; }
        if (op == 'l') PyList_SET_ITEM(o, i, v);
        else if (op == 0x91) { r = PySet_Add(o, v); Py_DECREF(v); }
        else PyTuple_SET_ITEM(o, i, v);
    }
    for (Py_ssize_t i = base; i < d->n; i++) val_clear(&d->st[i]);
    d->n = base;
    pool_trim(d);
    if (r) { Py_DECREF(o); return r; }
    if (op == 0x91) { PyObject *f = PyFrozenSet_New(o); Py_DECREF(o); o = f; }
    return push_obj(d, o, R_NONE);
}

static int push_long(Decoder *d, const unsigned char *p, uint64_t n)
{
    if (n == 0) return push_int(d, 0);
    if (n <= 8) {
        uint64_t x = le(p, (int)n);
        if (n < 8 && (p[n - 1] & 0x80)) x |= ~0ULL << (8 * n);
        return push_int(d, (int64_t)x);
    }
    if (n == 9 && p[8] == 0) {
        uint64_t x = le(p, 8);
        Val v = {NULL, (int64_t)x, (x >> 63) ? T_UINT : T_INT, R_NONE, 0};
        return push(d, v);
    }
    return push_obj(d, _PyLong_FromByteArray(p, (size_t)n, 1, 1), R_NONE);
}

/* Decodes d[0:len) (the file's bytes from `base`).  Returns 1 at STOP, 0 when the data ends inside an
 * opcode or after it (*at = the offset to feed again from), -1 on a Python error, -9 at an odd entry,
 * -10 at an opcode this decoder does not take (*at = its offset). */
static int decode(Decoder *d, const unsigned char *buf, Py_ssize_t len, Py_ssize_t base, Py_ssize_t *at)
{
    const unsigned char *p = buf, *end = buf + len;
    int r = 0;
    Py_ssize_t op_at = 0;
#define NEED(k) if ((uint64_t)(end - p) < (uint64_t)(k)) { r = 0; goto out; }
#define CHECK(x) do { r = (x); if (r) goto out; } while (0)
    while (p < end) {
        op_at = p - buf;
        unsigned char op = *p++;
        uint64_t n;
        switch (op) {
        case 'J': NEED(4); CHECK(push_int(d, (int64_t)(int32_t)le(p, 4))); p += 4; break;
        case 'K': NEED(1); CHECK(push_int(d, p[0])); p += 1; break;
        case 'M': NEED(2); CHECK(push_int(d, (int64_t)le(p, 2))); p += 2; break;
        case 'G': NEED(8); CHECK(push_obj(d, PyFloat_FromDouble(PyFloat_Unpack8((const char *)p, 0)), R_NONE)); p += 8; break;
        case 'N': Py_INCREF(Py_None); CHECK(push_obj(d, Py_None, R_NONE)); break;
        case 0x88: Py_INCREF(Py_True); CHECK(push_obj(d, Py_True, R_NONE)); break;
        case 0x89: Py_INCREF(Py_False); CHECK(push_obj(d, Py_False, R_NONE)); break;
        case 0x8a: NEED(1); n = p[0]; NEED(1 + n); CHECK(push_long(d, p + 1, n)); p += 1 + n; break;
        case 0x8b: NEED(4); n = le(p, 4); if (n > 64) { r = unfaithful(d, "a LONG4 of more than 64 bytes"); goto out; } NEED(4 + n);
            CHECK(push_long(d, p + 4, n)); p += 4 + n; break;
        case 0x8c: NEED(1); n = p[0]; NEED(1 + n);
            CHECK(push_obj(d, PyUnicode_DecodeUTF8((const char *)p + 1, (Py_ssize_t)n, "surrogatepass"), R_NONE));
            p += 1 + n; break;
        case 'X': NEED(4); n = le(p, 4); NEED(4 + n);
            CHECK(push_obj(d, PyUnicode_DecodeUTF8((const char *)p + 4, (Py_ssize_t)n, "surrogatepass"), R_NONE));
            p += 4 + n; break;
        case 0x8d: NEED(8); n = le(p, 8); if (n > ((uint64_t)1 << 40)) { r = unfaithful(d, "a string of more than 2**40 bytes"); goto out; } NEED(8 + n);
            CHECK(push_obj(d, PyUnicode_DecodeUTF8((const char *)p + 8, (Py_ssize_t)n, "surrogatepass"), R_NONE));
            p += 8 + n; break;
        case 'U': NEED(1); n = p[0]; NEED(1 + n);
            CHECK(push_obj(d, PyUnicode_DecodeASCII((const char *)p + 1, (Py_ssize_t)n, "strict"), R_NONE));
            p += 1 + n; break;
        case 'C': NEED(1); n = p[0]; NEED(1 + n);
            CHECK(push_obj(d, PyBytes_FromStringAndSize((const char *)p + 1, (Py_ssize_t)n), R_NONE));
            p += 1 + n; break;
        case 'B': NEED(4); n = le(p, 4); NEED(4 + n);
            CHECK(push_obj(d, PyBytes_FromStringAndSize((const char *)p + 4, (Py_ssize_t)n), R_NONE));
            p += 4 + n; break;
        case 0x80: NEED(1); if (p[0] > 5) { r = unfaithful(d, "unsupported pickle protocol"); goto out; } p += 1; break;
        case 0x95: NEED(8); p += 8; break; /* FRAME: pass 1 checked that its length ends with an opcode */
        case '.':
            if (d->n != 1 || fence(d) >= 1) { r = unfaithful(d, "a STOP with more than the top-level object on the stack"); goto out; }
            if ((d->sunk || d->devices) && (d->st[0].role != R_ROOT || !d->outer_done)) {
                r = unfaithful(d, "trace entries outside the top-level dict's device_traces"); goto out;
            }
            d->result = materialize(&d->st[0]);
            if (!d->result) { r = PyErr_Occurred() ? -1 : unfaithful(d, "the pickle is one trace entry"); goto out; }
            val_clear(&d->st[0]); d->n = 0;
            d->stopped = 1; op_at = p - buf; r = 1; goto out;
        case '(':
            if (d->mn == d->mcap) {
                Py_ssize_t cap = d->mcap ? d->mcap * 2 : 64;
                Py_ssize_t *m = PyMem_Realloc(d->marks, (size_t)cap * sizeof(Py_ssize_t));
                if (!m) { PyErr_NoMemory(); r = -1; goto out; }
                d->marks = m; d->mcap = cap;
            }
            d->marks[d->mn++] = d->n; break;
        case '0':
            if (frames_hidden(d)) { r = unfaithful(d, "a POP of a frame read from the memo"); goto out; }
            if (d->mn && d->marks[d->mn - 1] == d->n) d->mn--;
            else if (d->n > fence(d)) {
                if (d->st[d->n - 1].role != R_NONE) { r = unfaithful(d, "the top-level dict or a device list popped"); goto out; }
                val_clear(&d->st[--d->n]); pool_trim(d);
            }
            else { r = unfaithful(d, "unpickling stack underflow"); goto out; }
            break;
        case '}':
            if (!d->n) { CHECK(push_obj(d, PyDict_New(), R_ROOT)); break; }
            if (new_entry(d)) { CHECK(new_pool_entry(d)); break; }
            CHECK(push_obj(d, PyDict_New(), R_NONE)); break;
        case ']': {
            if (new_frames(d)) { Val v = {NULL, d->fn, T_FRAMES, R_NONE, 0}; CHECK(push(d, v)); break; }
            int role = new_inner(d) ? R_INNER : outer_here(d) ? R_OUTER : R_NONE;
            CHECK(push_obj(d, PyList_New(0), role));
            if (role == R_INNER) d->st[d->n - 1].dev = (int32_t)d->devices++;
            break;
        }
        case ')': CHECK(push_obj(d, PyTuple_New(0), R_NONE)); break;
        case 0x8f: CHECK(push_obj(d, PySet_New(NULL), R_NONE)); break;
        case 'a': CHECK(fill(d, d->n - 1, 'e')); break;
        case 's': CHECK(fill(d, d->n - 2, 'u')); break;
        case 'e': case 'u': case 0x90:
            if (!d->mn) { r = unfaithful(d, "could not find MARK"); goto out; }
            CHECK(fill(d, d->marks[--d->mn], op)); break;
        case 'l': case 't': case 'd': case 0x91:
            if (!d->mn) { r = unfaithful(d, "could not find MARK"); goto out; }
            if (frames_hidden(d)) { r = unfaithful(d, "frames read from the memo built into another container"); goto out; }
            CHECK(build(d, d->marks[--d->mn], op)); break;
        case 0x85: case 0x86: case 0x87:
            CHECK(build(d, d->n - (op - 0x84), 't')); break;
        case 0x94: CHECK(memo_put(d, (uint64_t)d->memo_n)); break;
        case 'q': NEED(1); CHECK(memo_put(d, p[0])); p += 1; break;
        case 'r': NEED(4); CHECK(memo_put(d, le(p, 4))); p += 4; break;
        case 'h': NEED(1); CHECK(frames_open(d) ? frame_get(d, p[0]) : memo_get(d, p[0])); p += 1; break;
        case 'j': NEED(4); CHECK(frames_open(d) ? frame_get(d, le(p, 4)) : memo_get(d, le(p, 4))); p += 4; break;
        default: r = unfaithful(d, "an opcode no snapshot writer uses"); goto out; /* protocol 0 text, POP_MARK, DUP, ... */
        }
    }
    op_at = p - buf;
    r = 0;
out:
    *at = base + op_at;
    if (r == -1) { /* what pickle raises here too (a bad UTF-8 string, an unhashable key): the whole read says it */
        if (!PyErr_Occurred()) r = unfaithful(d, "an internal error");
        else if (!PyErr_ExceptionMatches(PyExc_MemoryError)) {
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyObject *text = value ? PyObject_Str(value) : NULL;
            if (!text) PyErr_Clear();
            if (!d->why) d->why = text ? text : PyUnicode_FromString("an error");
            else Py_XDECREF(text);
            Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(tb);
            r = -10;
        }
    }
    return r;
#undef NEED
#undef CHECK
}

/* Sinks the entries complete on the stack when the data ends (a file cut short): those above the
 * innermost device list's mark, but for the one whose fields were still being read. */
static int flush(Decoder *d, Py_ssize_t *count)
{
    Py_ssize_t j = -1, i, stop = d->n;
    *count = 0;
    for (i = d->n - 1; i >= 0; i--) if (d->st[i].role == R_INNER && IS_OBJ(&d->st[i])) { j = i; break; }
    if (j < 0) return 0;
    for (i = 0; i < d->mn; i++) if (d->marks[i] > j + 1) { stop = d->marks[i] - 1; break; }
    for (i = j + 1; i < stop; i++) {
        if (d->st[i].tag != T_ENTRY || !d->pool[d->st[i].i].action) break;
        int r = sink(d, &d->st[j], &d->st[i]);
        if (r) return r;
        (*count)++;
    }
    return 0;
}

/* ---- the Python type ---- */

static void Decoder_dealloc(Decoder *d)
{
    for (Py_ssize_t i = 0; i < d->n; i++) val_clear(&d->st[i]);
    for (Py_ssize_t i = 0; i < d->pn; i++) entry_clear(&d->pool[i]);
    for (Py_ssize_t i = 0; i < d->fn; i++) if (d->fown[i]) Py_DECREF(d->fptr[i]);
    PyMem_Free(d->fptr); PyMem_Free(d->fown);
    Py_XDECREF(d->graveyard);
    PyMem_Free(d->st); PyMem_Free(d->marks); PyMem_Free(d->pool);
    if (d->memo) {
        Py_ssize_t kept = d->nwords ? (Py_ssize_t)d->rank[d->nwords - 1] + __builtin_popcountll(d->words[d->nwords - 1]) : 0;
        for (Py_ssize_t i = 0; i < kept; i++) Py_XDECREF(d->memo[i]);
    }
    PyMem_Free(d->memo); PyMem_Free(d->words); PyMem_Free(d->rank);
    for (int c = 0; c < NCOLS; c++) PyMem_Free(d->cols[c].p);
    for (int k = 0; k < NKEYS; k++) { Py_XDECREF(d->keys[k]); Py_XDECREF(d->key_seen[k]); }
    Py_XDECREF(d->actions); Py_XDECREF(d->action_list); Py_XDECREF(d->last_action);
    Py_XDECREF(d->stacks_by_content); Py_XDECREF(d->stack_list);
    PyMem_Free(d->ident_hash); PyMem_Free(d->ident_id);
    Py_XDECREF(d->result); Py_XDECREF(d->odd); Py_XDECREF(d->why);
    Py_TYPE(d)->tp_free((PyObject *)d);
}

static int Decoder_init(Decoder *d, PyObject *args, PyObject *kw)
{
    Py_buffer needed;
    Py_ssize_t total;
    if (!PyArg_ParseTuple(args, "y*n", &needed, &total)) return -1;
    d->memo_total = total;
    d->nwords = (total + 63) / 64;
    d->words = PyMem_Calloc((size_t)d->nwords + 1, sizeof(uint64_t));
    d->rank = PyMem_Calloc((size_t)d->nwords + 1, sizeof(uint32_t));
    if (!d->words || !d->rank) { PyBuffer_Release(&needed); PyErr_NoMemory(); return -1; }
    memcpy(d->words, needed.buf, (size_t)(needed.len < d->nwords * 8 ? needed.len : d->nwords * 8));
    PyBuffer_Release(&needed);
    uint64_t kept = 0;
    for (Py_ssize_t w = 0; w < d->nwords; w++) { d->rank[w] = (uint32_t)kept; kept += __builtin_popcountll(d->words[w]); }
    d->memo = PyMem_Calloc((size_t)kept + 1, sizeof(PyObject *));
    if (!d->memo) { PyErr_NoMemory(); return -1; }
    for (int c = 0; c < NCOLS; c++) d->cols[c].item = COL_ITEM[c];
    for (int k = 0; k < NKEYS; k++) if (!(d->keys[k] = PyUnicode_InternFromString(KEY_NAMES[k]))) return -1;
    d->actions = PyDict_New(); d->action_list = PyList_New(0);
    d->stacks_by_content = PyDict_New(); d->stack_list = PyList_New(0); d->graveyard = PyList_New(0);
    if (!d->actions || !d->action_list || !d->stacks_by_content || !d->stack_list || !d->graveyard) return -1;
    return 0;
}

static PyObject *status(Decoder *d, int r, Py_ssize_t at)
{
    if (r == -1) return NULL;
    return Py_BuildValue("(in)", r, at);
}

static PyObject *Decoder_feed(Decoder *d, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t base, at = 0;
    if (!PyArg_ParseTuple(args, "y*n", &buf, &base)) return NULL;
    int r = decode(d, (const unsigned char *)buf.buf, buf.len, base, &at);
    PyBuffer_Release(&buf);
    return status(d, r, at);
}

static PyObject *Decoder_flush(Decoder *d, PyObject *unused)
{
    Py_ssize_t count = 0;
    int r = flush(d, &count);
    if (r) return status(d, r, 0);
    return PyLong_FromSsize_t(count);
}

static PyObject *Decoder_take(Decoder *d, PyObject *unused)
{
    PyObject *out = PyDict_New();
    if (!out) return NULL;
    for (int c = 0; c < NCOLS; c++) {
        Buf *b = &d->cols[c];
        PyObject *bytes = PyBytes_FromStringAndSize(b->p ? b->p : "", b->n * b->item);
        if (!bytes || PyDict_SetItemString(out, COL_NAMES[c], bytes) < 0) { Py_XDECREF(bytes); Py_DECREF(out); return NULL; }
        Py_DECREF(bytes);
        b->n = 0;
        if (b->cap > (1 << 20)) { PyMem_Free(b->p); b->p = NULL; b->cap = 0; }
    }
    return out;
}

static PyObject *Decoder_rows(Decoder *d, void *unused) { return PyLong_FromSsize_t(d->cols[0].n); }
static PyObject *Decoder_result(Decoder *d, void *unused) { return Py_NewRef(d->result ? d->result : Py_None); }
static PyObject *Decoder_why(Decoder *d, void *unused) { return Py_NewRef(d->why ? d->why : Py_None); }
static PyObject *Decoder_odd(Decoder *d, void *unused)
{
    return Py_BuildValue("(OLL)", d->odd ? d->odd : Py_None, (long long)d->odd_dev, (long long)d->odd_index);
}
static PyObject *Decoder_flags(Decoder *d, void *unused)
{
    return Py_BuildValue("{s:O,s:O,s:L}", "has_time", d->has_time ? Py_True : Py_False,
                         "has_user_metadata", d->has_meta ? Py_True : Py_False, "devices", (long long)d->devices);
}
static PyObject *Decoder_actions(Decoder *d, void *unused) { return Py_NewRef(d->action_list); }
static PyObject *Decoder_stacks(Decoder *d, void *unused) { return Py_NewRef(d->stack_list); }

static PyMethodDef Decoder_methods[] = {
    {"feed", (PyCFunction)Decoder_feed, METH_VARARGS,
     "feed(data, base) -> (status, offset): decode data (the file's bytes from offset base). status 1: STOP "
     "(result holds the object, its device lists emptied); 0: feed again from offset with more bytes; -9: an odd "
     "entry (see odd); -10: what pickle would build otherwise (or refuse) from the opcode at offset (see why)."},
    {"take", (PyCFunction)Decoder_take, METH_NOARGS, "take() -> {column: bytes}: the rows decoded since the last take."},
    {"flush", (PyCFunction)Decoder_flush, METH_NOARGS,
     "flush() -> count: sink the complete entries left on the stack when the data ends early."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Decoder_getset[] = {
    {"rows", (getter)Decoder_rows, NULL, "rows not yet taken", NULL},
    {"result", (getter)Decoder_result, NULL, "the unpickled object once STOP was read (None before)", NULL},
    {"odd", (getter)Decoder_odd, NULL, "(fields, device, index) of the entry that stopped decoding", NULL},
    {"why", (getter)Decoder_why, NULL, "why decoding stopped with -10 (what pickle would build differently), or None", NULL},
    {"flags", (getter)Decoder_flags, NULL, "has_time, has_user_metadata (any entry has the key), devices", NULL},
    {"actions", (getter)Decoder_actions, NULL, "the action strings by id", NULL},
    {"stacks", (getter)Decoder_stacks, NULL, "each stack id's frames list (first seen)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject DecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "veotrace.sources.snapshots._snapstream.Decoder",
    .tp_basicsize = sizeof(Decoder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Decoder_init,
    .tp_dealloc = (destructor)Decoder_dealloc,
    .tp_methods = Decoder_methods,
    .tp_getset = Decoder_getset,
    .tp_doc = "Decoder(needed, memo_count): a snapshot pickle fed in chunks, entries decoded into columns.",
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_snapstream", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__snapstream(void)
{
    if (PyType_Ready(&DecoderType) < 0) return NULL;
    if (!(DEVICE_TRACES = PyUnicode_InternFromString("device_traces"))) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&DecoderType);
    if (PyModule_AddObject(m, "Decoder", (PyObject *)&DecoderType) < 0) { Py_DECREF(&DecoderType); Py_DECREF(m); return NULL; }
    return m;
}
