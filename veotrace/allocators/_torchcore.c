/* Compiled core of the `torch` policy: PyTorch's CUDA caching allocator (DeviceCachingAllocator in
 * c10/cuda/CUDACachingAllocator.cpp) for one device, driven over a range of replay requests.
 *
 * veotrace.allocators.torch is the readable reference and this file follows it rule by rule, with
 * PyTorch's function names: round_size (with roundup_power2_next_division), get_allocation_size,
 * get_free_block, alloc_block, should_split, alloc_found_block, free_block, try_merge_blocks,
 * release_block, release_available_cached_blocks, release_blocks, release_cached_blocks,
 * garbage_collect_cached_blocks (garbage_collection_threshold under a memory fraction), expandable segments
 * (expandable.py: find_expandable_block, map_block, try_allocate_expandable_block, unmap_block, best fit by
 * expandable_size), and the seeding of a part-way trace (seed.seed_state, from the same chains).
 * veotrace.allocators.torchcore.choose_core decides which core runs.
 *
 * It emits the same events as the Python Recorder, (request, op, address, size, stream, block bytes)
 * as int64, drained by take_events(), so fragmentation windows and validation see the same stream.
 * Free blocks of a pool are kept in a treap ordered as BlockComparatorSize (stream, size, address):
 * best fit, insert and erase are O(log n) for any free-list length; the unmapped ranges of expandable
 * segments in another, ordered as BlockComparatorAddress (stream, address).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Constants of CUDACachingAllocator.cpp */
#define kMinBlockSize 512LL             /* all sizes are rounded to at least 512 bytes */
#define kSmallSize (1LL << 20)          /* largest "small" allocation is 1 MiB */
#define kSmallBuffer (2LL << 20)        /* "small" allocations are packed in 2 MiB blocks */
#define kLargeBuffer (20LL << 20)       /* "large" allocations may be packed in 20 MiB blocks */
#define kMinLargeAlloc (10LL << 20)     /* allocations between 1 and 10 MiB may use kLargeBuffer */
#define kRoundLarge (2LL << 20)         /* round up large allocations to 2 MiB */
#define VA_ALIGN (2LL << 20)            /* base.VA_ALIGN: device allocations are 2 MiB aligned */
#define ROUNDUP_INTERVALS 16
#define VA_BASE 0x7F0000000000LL        /* base.VA_BASE */
#define DESCENDING_TOP (VA_BASE + (1LL << 44)) /* driver.DESCENDING_TOP */
#define TIE_WALK 32                     /* driver.TIE_WALK */
#define FREED_KEEP 64                   /* driver.FREED_KEEP */
#define NO_LIMIT UINT64_MAX             /* max_split_size default (SIZE_MAX) */

/* Request kinds (requests.REQ_*) and event op codes (base.EV_*). */
enum { R_MALLOC = 0, R_FREE = 1, R_RELEASE = 2, R_SEED = 3 };
/* Kinds of a recorded run of releases (releases.REL_*), the size of an R_RELEASE; negative: not followed. */
enum { REL_EMPTY_CACHE = 0, REL_OOM_RETRY = 1, REL_SPLIT_RETRY = 2, REL_GC = 3, REL_OOM = 4 };
enum { E_ALLOC = 0, E_FREE = 1, E_SEGMENT_ALLOC = 2, E_SEGMENT_FREE = 3, E_SEGMENT_MAP = 4, E_SEGMENT_UNMAP = 5, E_OOM = 6 };

typedef struct Block {
    int64_t size, addr, stream, requested;
    int64_t seg_base, seg_page;  /* the expandable segment holding it (seg_page 0: none) */
    int64_t gc_base;             /* get_free_blocks_call_count when it was last cached (gc_count_base) */
    struct Block *prev, *next;   /* neighbours inside the segment */
    struct Block *left, *right;  /* treap children while free: cached (mapped) or unmapped */
    uint32_t prio;
    unsigned char is_small, allocated, mapped;
} Block;

/* ---- treap of free blocks ordered by (stream, size, address): BlockComparatorSize ---------------- */

static inline int key_cmp_by(const Block *b, int64_t stream, int64_t size, int64_t addr, int by_addr)
{
    if (b->stream != stream) return b->stream < stream ? -1 : 1;
    if (!by_addr && b->size != size) return b->size < size ? -1 : 1;
    if (b->addr != addr) return b->addr < addr ? -1 : 1;
    return 0;
}

/* free blocks: (stream, size, address); unmapped ranges of expandable segments: (stream, address) */
static inline int key_cmp(const Block *b, int64_t stream, int64_t size, int64_t addr)
{
    return key_cmp_by(b, stream, size, addr, 0);
}

static Block *treap_merge(Block *a, Block *b) /* every key of a < every key of b */
{
    if (!a) return b;
    if (!b) return a;
    if (a->prio > b->prio) {
        a->right = treap_merge(a->right, b);
        return a;
    }
    b->left = treap_merge(a, b->left);
    return b;
}

static void treap_split(Block *t, const Block *k, Block **l, Block **r, int by_addr) /* l < k <= r */
{
    if (!t) {
        *l = *r = NULL;
        return;
    }
    if (key_cmp_by(t, k->stream, k->size, k->addr, by_addr) < 0) {
        treap_split(t->right, k, &t->right, r, by_addr);
        *l = t;
    } else {
        treap_split(t->left, k, l, &t->left, by_addr);
        *r = t;
    }
}

/* The first block >= (stream, size, addr) (> with strict), or NULL. */
static Block *first_from(Block *t, int64_t stream, int64_t size, int64_t addr, int by_addr, int strict)
{
    Block *best = NULL;
    while (t) {
        if (key_cmp_by(t, stream, size, addr, by_addr) >= strict) {
            best = t;
            t = t->left;
        } else {
            t = t->right;
        }
    }
    return best;
}

static inline Block *lower_bound(Block *t, int64_t stream, int64_t size, int64_t addr)
{
    return first_from(t, stream, size, addr, 0, 0);
}

/* The block after b in its tree's order, or NULL. */
static inline Block *successor(Block *root, const Block *b, int by_addr)
{
    return first_from(root, b->stream, b->size, b->addr, by_addr, 1);
}

/* The last block < (stream, size, addr), or NULL. */
static Block *last_below(Block *t, int64_t stream, int64_t size, int64_t addr)
{
    Block *best = NULL;
    while (t) {
        if (key_cmp(t, stream, size, addr) < 0) {
            best = t;
            t = t->right;
        } else {
            t = t->left;
        }
    }
    return best;
}

/* ---- request index -> allocated block (the replay's handles), linear probing ----------------------- */

typedef struct {
    int64_t *keys;  /* -1: empty */
    Block **vals;
    size_t cap, n;
} HandleMap;

static inline size_t slot_of(int64_t key, size_t cap)
{
    return (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ULL) >> 17) & (cap - 1);
}

static int map_grow(HandleMap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 16; /* small first: a trace may have a device per request */
    int64_t *keys = PyMem_Malloc(cap * sizeof(int64_t));
    Block **vals = PyMem_Malloc(cap * sizeof(Block *));
    if (!keys || !vals) {
        PyMem_Free(keys);
        PyMem_Free(vals);
        PyErr_NoMemory();
        return -1;
    }
    memset(keys, 0xff, cap * sizeof(int64_t));
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] < 0) continue;
        size_t s = slot_of(m->keys[i], cap);
        while (keys[s] >= 0) s = (s + 1) & (cap - 1);
        keys[s] = m->keys[i];
        vals[s] = m->vals[i];
    }
    PyMem_Free(m->keys);
    PyMem_Free(m->vals);
    m->keys = keys, m->vals = vals, m->cap = cap;
    return 0;
}

static int map_put(HandleMap *m, int64_t key, Block *b)
{
    if ((m->n + 1) * 2 > m->cap && map_grow(m) < 0) return -1;
    size_t s = slot_of(key, m->cap);
    while (m->keys[s] >= 0 && m->keys[s] != key) s = (s + 1) & (m->cap - 1);
    if (m->keys[s] < 0) m->n++;
    m->keys[s] = key;
    m->vals[s] = b;
    return 0;
}

static Block *map_pop(HandleMap *m, int64_t key)
{
    if (!m->cap || key < 0) return NULL;
    size_t mask = m->cap - 1, s = slot_of(key, m->cap);
    while (m->keys[s] != key) {
        if (m->keys[s] < 0) return NULL;
        s = (s + 1) & mask;
    }
    Block *b = m->vals[s];
    m->n--;
    /* backward-shift deletion keeps every probe chain unbroken */
    size_t hole = s, j = s;
    for (;;) {
        j = (j + 1) & mask;
        if (m->keys[j] < 0) break;
        size_t home = slot_of(m->keys[j], m->cap);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            m->keys[hole] = m->keys[j];
            m->vals[hole] = m->vals[j];
            hole = j;
        }
    }
    m->keys[hole] = -1;
    return b;
}

/* ---- the allocator of one device ---------------------------------------------------------------- */

/* Blocks come from slabs of 16, 32, ... up to SLAB blocks: a device that holds a few blocks costs a few
 * hundred bytes, not a full slab (a trace with a device per request makes one core per request). */
#define SLAB 4096
#define FIRST_SLAB 16

typedef struct {
    PyObject_HEAD
    Block *pools[2];          /* free-block treaps: [0] large_blocks, [1] small_blocks */
    Block *unmapped[2];       /* unmapped ranges of expandable segments, by (stream, address), per pool */
    int64_t call_count[2];    /* get_free_blocks_call_count of each pool */
    int expandable;           /* expandable_segments:True */
    int64_t es_memory;        /* an expandable segment reserves 1 1/8 of this (expandable.find_expandable_block) */
    int gc_on;                /* garbage_collection_threshold under a memory fraction */
    int64_t gc_threshold;     /* its bytes (torch.gc_threshold_bytes) */
    int broken;               /* a block was not where the model keeps it: RuntimeError, never a crash */
    Block **scratch;          /* blocks to unmap or to garbage collect, in set order */
    size_t cap_scratch;
    uint64_t max_split_size;  /* NO_LIMIT when unset */
    int64_t max_non_split_rounding_size;
    int divisions[ROUNDUP_INTERVALS];
    int has_capacity, has_allowed;
    int64_t capacity, va_next, allowed; /* the device's memory; allowed_memory_maximum (a fraction of it) */
    /* PolicyCounters (base.py) */
    int64_t reserved, allocated, peak_reserved, peak_allocated, device_allocs, device_frees, flushes,
        alloc_retries, ooms;
    int has_oom;
    int64_t oom_request, oom_size, oom_reserved, oom_allocated;
    int armed;   /* the kind of the recorded release inside the next malloc (TorchAllocator.release), or -1 */
    int exact_releases;     /* the recorded settings: partial releases replayed as recorded */
    int64_t *armed_segs;    /* (bytes, stream) of the recorded partial release armed */
    size_t n_armed, cap_armed;
    int64_t req; /* the request being served: every event names it */
    uint32_t rng;
    HandleMap handles;
    HandleMap seeded; /* address -> allocated block of a seeded segment, until its SEED request takes it */
    int64_t *ev;
    size_t n_ev, cap_ev;
    Block **slabs;
    size_t n_slabs;
    Block *spare; /* recycled blocks, chained through next */
    /* the driver's address space (driver.Driver): live segment ranges by start, the extremes ever used, the
     * learned rule, and the recorded segment_allocs as (request, bytes, address) triples by request */
    struct Range { int64_t start, end; int assumed; } *drv;
    size_t n_drv, cap_drv;
    int drv_any, drv_dir, drv_reuse;
    int64_t drv_lo, drv_hi, drv_start;
    int64_t *drv_rec;
    Py_ssize_t n_rec;
    int64_t assumed_addresses, assumed_ties;
    int64_t assumed_live; /* live ranges at an assumed address (no tie can be the driver's while 0) */
    int drv_same;         /* DriverRule.same_size: a range freed lately goes again to a cudaMalloc of its size */
    int64_t drv_freed[FREED_KEEP][2]; /* (address, bytes) of the ranges freed last, a ring */
    int64_t n_freed;      /* ranges freed in all (the ring holds the last FREED_KEEP) */
} Core;

static Block *new_block(Core *c, int64_t size, int64_t addr, int64_t stream, int is_small)
{
    if (!c->spare) {
        size_t n = c->n_slabs >= 8 ? SLAB : (size_t)FIRST_SLAB << c->n_slabs;
        if (n > SLAB) n = SLAB;
        Block *slab = PyMem_Malloc(n * sizeof(Block));
        Block **slabs = PyMem_Realloc(c->slabs, (c->n_slabs + 1) * sizeof(Block *));
        if (!slab || !slabs) {
            PyMem_Free(slab);
            if (slabs) c->slabs = slabs;
            PyErr_NoMemory();
            return NULL;
        }
        c->slabs = slabs;
        c->slabs[c->n_slabs++] = slab;
        for (size_t i = 0; i < n; i++) {
            slab[i].next = c->spare;
            c->spare = &slab[i];
        }
    }
    Block *b = c->spare;
    c->spare = b->next;
    memset(b, 0, sizeof(Block));
    b->size = size, b->addr = addr, b->stream = stream, b->is_small = (unsigned char)is_small, b->mapped = 1;
    c->rng ^= c->rng << 13, c->rng ^= c->rng >> 17, c->rng ^= c->rng << 5; /* xorshift32 */
    b->prio = c->rng;
    return b;
}

static inline void drop_block(Core *c, Block *b)
{
    b->next = c->spare;
    c->spare = b;
}

static int emit(Core *c, int op, int64_t addr, int64_t size, int64_t stream, int64_t block)
{
    if (c->n_ev + 6 > c->cap_ev) {
        size_t cap = c->cap_ev ? c->cap_ev * 2 : 6 * 16; /* doubles: small for a device with few events */
        int64_t *ev = PyMem_Realloc(c->ev, cap * sizeof(int64_t));
        if (!ev) {
            PyErr_NoMemory();
            return -1;
        }
        c->ev = ev, c->cap_ev = cap;
    }
    int64_t *e = c->ev + c->n_ev;
    e[0] = c->req, e[1] = op, e[2] = addr, e[3] = size, e[4] = stream, e[5] = block;
    c->n_ev += 6;
    return 0;
}

static inline Block **pool_of(Core *c, int is_small) { return &c->pools[is_small ? 1 : 0]; }

static void tree_insert(Block **root, Block *b, int by_addr)
{
    Block *l, *r;
    b->left = b->right = NULL;
    treap_split(*root, b, &l, &r, by_addr);
    *root = treap_merge(treap_merge(l, b), r);
}

static void tree_erase(Core *c, Block **link, Block *b, int by_addr)
{
    while (*link != b) {
        if (!*link) { /* not in its tree: the model's invariants broke (never seen); report, do not crash */
            c->broken = 1;
            return;
        }
        int d = key_cmp_by(*link, b->stream, b->size, b->addr, by_addr);
        link = d < 0 ? &(*link)->right : &(*link)->left;
    }
    *link = treap_merge(b->left, b->right);
    b->left = b->right = NULL;
}

/* BlockPool.insert_into_blocks */
static void insert_into_blocks(Core *c, Block *b)
{
    b->gc_base = c->call_count[b->is_small ? 1 : 0];
    tree_insert(pool_of(c, b->is_small), b, 0);
}

/* BlockPool.erase */
static void pool_erase(Core *c, Block *b) { tree_erase(c, pool_of(c, b->is_small), b, 0); }

/* BlockPool.insert_unmapped, BlockPool.erase_unmapped */
static void insert_unmapped(Core *c, Block *b) { tree_insert(&c->unmapped[b->is_small ? 1 : 0], b, 1); }

static void erase_unmapped(Core *c, Block *b) { tree_erase(c, &c->unmapped[b->is_small ? 1 : 0], b, 1); }

/* The scratch list holds n blocks (grown as needed): 0, or -1 with MemoryError. */
static int scratch_fit(Core *c, size_t n)
{
    if (n <= c->cap_scratch) return 0;
    size_t cap = c->cap_scratch ? c->cap_scratch * 2 : 64;
    while (cap < n) cap *= 2;
    Block **s = PyMem_Realloc(c->scratch, cap * sizeof(Block *));
    if (!s) {
        PyErr_NoMemory();
        return -1;
    }
    c->scratch = s, c->cap_scratch = cap;
    return 0;
}

static inline int bit_length(uint64_t v) { return v ? 64 - __builtin_clzll(v) : 0; }

/* Round size up to the next of `divisions` equal steps between two powers of two. */
static int64_t roundup_power2_next_division(int64_t size, int divisions)
{
    if ((size & (size - 1)) == 0) return size;
    int64_t floor = 1LL << (bit_length((uint64_t)size) - 1);
    int64_t step = floor >> (bit_length((uint64_t)divisions) - 1);
    if (step == 0) return floor << 1;
    int64_t rounded = size & ~(step - 1);
    return rounded == size ? size : rounded + step;
}

/* AllocatorConfig::roundup_power2_divisions(size): the entry of size's power-of-two interval (MiB). */
static int divisions_for(const Core *c, int64_t size)
{
    int index = bit_length((uint64_t)size) - 1 - 20;
    if (index < 0) index = 0;
    if (index > ROUNDUP_INTERVALS - 1) index = ROUNDUP_INTERVALS - 1;
    return c->divisions[index];
}

static int64_t round_size(const Core *c, int64_t size)
{
    if (size < kMinBlockSize) return kMinBlockSize;
    int divisions = divisions_for(c, size);
    if (divisions > 1 && size > kMinBlockSize * divisions) return roundup_power2_next_division(size, divisions);
    return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

static int64_t get_allocation_size(int64_t size)
{
    if (size <= kSmallSize) return kSmallBuffer;
    if (size < kMinLargeAlloc) return kLargeBuffer;
    return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

static inline int64_t expandable_size(const Block *b)
{
    return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
}

/* ---- the driver's addresses (driver.py) ----------------------------------------------------------- */

static inline int64_t align_up(int64_t v) { return (v + VA_ALIGN - 1) / VA_ALIGN * VA_ALIGN; }
static inline int64_t align_down(int64_t v) { return v / VA_ALIGN * VA_ALIGN; }

/* The index of the last live range starting at or below addr, or -1. */
static Py_ssize_t drv_find(const Core *c, int64_t addr)
{
    Py_ssize_t lo = 0, hi = (Py_ssize_t)c->n_drv;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (c->drv[mid].start <= addr) lo = mid + 1;
        else hi = mid;
    }
    return lo - 1;
}

static int drv_is_free(const Core *c, int64_t a, int64_t b)
{
    Py_ssize_t i = drv_find(c, a);
    if (i >= 0 && c->drv[i].end > a) return 0;
    return i + 1 >= (Py_ssize_t)c->n_drv || c->drv[i + 1].start >= b;
}

/* Driver.reserve: mark [addr, addr + size) used. addr, or -1 with an exception set. */
static int64_t drv_reserve(Core *c, int64_t addr, int64_t size, int assumed)
{
    if (c->n_drv == c->cap_drv) {
        size_t cap = c->cap_drv ? 2 * c->cap_drv : 16;
        struct Range *grown = PyMem_Realloc(c->drv, cap * sizeof(struct Range));
        if (!grown) {
            PyErr_NoMemory();
            return -1;
        }
        c->drv = grown, c->cap_drv = cap;
    }
    Py_ssize_t i = drv_find(c, addr) + 1;
    memmove(c->drv + i + 1, c->drv + i, (c->n_drv - (size_t)i) * sizeof(struct Range));
    c->drv[i].start = addr, c->drv[i].end = addr + size, c->drv[i].assumed = assumed;
    c->n_drv++;
    c->assumed_live += assumed;
    if (!c->drv_any || addr < c->drv_lo) c->drv_lo = addr;
    if (!c->drv_any || addr + size > c->drv_hi) c->drv_hi = addr + size;
    c->drv_any = 1;
    return addr;
}

static void drv_release(Core *c, int64_t addr)
{
    Py_ssize_t i = drv_find(c, addr);
    if (i < 0 || c->drv[i].start != addr) return;
    c->assumed_live -= c->drv[i].assumed;
    int64_t *slot = c->drv_freed[c->n_freed % FREED_KEEP];
    slot[0] = addr, slot[1] = c->drv[i].end - addr;
    c->n_freed++;
    memmove(c->drv + i, c->drv + i + 1, (c->n_drv - (size_t)i - 1) * sizeof(struct Range));
    c->n_drv--;
}

/* Driver.assumed: the rule's address for size bytes. */
static int64_t drv_assumed(const Core *c, int64_t size)
{
    int64_t n = align_up(size > 1 ? size : 1), addr;
    if (c->drv_same) { /* a range freed lately, of this size, the newest first */
        int64_t oldest = c->n_freed > FREED_KEEP ? c->n_freed - FREED_KEEP : 0;
        for (int64_t k = c->n_freed - 1; k >= oldest; k--) {
            const int64_t *f = c->drv_freed[k % FREED_KEEP];
            if (f[1] == size && drv_is_free(c, f[0], f[0] + size)) return f[0];
        }
    }
    if (c->drv_dir > 0) {
        int64_t base = c->drv_any ? c->drv_lo : c->drv_start;
        if (c->drv_reuse) {
            int64_t pos = base;
            for (size_t k = 0; k < c->n_drv; k++) {
                if (c->drv[k].start >= pos + n) return pos;
                int64_t e = align_up(c->drv[k].end);
                if (e > pos) pos = e;
            }
            return pos;
        }
        int64_t top = c->drv_any && c->drv_hi > base ? c->drv_hi : base;
        return align_up(top);
    }
    int64_t top = c->drv_any ? c->drv_hi : DESCENDING_TOP;
    if (c->drv_reuse) {
        int64_t pos = align_down(top);
        for (Py_ssize_t k = (Py_ssize_t)c->n_drv - 1; k >= 0; k--) {
            if (c->drv[k].end <= pos - n) return pos - n;
            int64_t s = align_down(c->drv[k].start);
            if (s < pos) pos = s;
        }
        addr = pos - n;
    } else {
        addr = align_down(c->drv_any ? c->drv_lo : top) - n;
    }
    if (addr < VA_ALIGN) addr = align_up(c->drv_any ? c->drv_hi : VA_BASE); /* no room below: above everything */
    return addr;
}

/* Driver.take: the recorded address of a cudaMalloc of size bytes while serving request c->req, else the
 * rule's. -1 with an exception set. */
static int64_t drv_take(Core *c, int64_t size)
{
    Py_ssize_t lo = 0, hi = c->n_rec;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (c->drv_rec[3 * mid] < c->req) lo = mid + 1;
        else hi = mid;
    }
    for (Py_ssize_t k = lo; k < c->n_rec && c->drv_rec[3 * k] == c->req; k++) {
        int64_t a = c->drv_rec[3 * k + 2];
        if (c->drv_rec[3 * k + 1] == size && drv_is_free(c, a, a + size)) {
            c->drv_rec[3 * k + 1] = -1; /* used */
            return drv_reserve(c, a, size, 0);
        }
    }
    c->assumed_addresses++;
    return drv_reserve(c, drv_assumed(c, size), size, 1);
}

/* Driver.take_high: a range above every one used (an expandable segment's reservation). */
static int64_t drv_take_high(Core *c, int64_t span)
{
    int64_t top = c->drv_any && c->drv_hi > c->drv_start ? c->drv_hi : c->drv_start;
    if (top > INT64_MAX - span - VA_ALIGN) {
        PyErr_SetString(PyExc_OverflowError, "the model's address space passed 2^63 bytes");
        return -1;
    }
    c->assumed_addresses++;
    return drv_reserve(c, align_up(top), span, 1);
}

/* Driver.tie: did an assumed address decide between equal free blocks at chosen and other? */
static int drv_tie(const Core *c, int64_t chosen, int64_t other)
{
    Py_ssize_t a = drv_find(c, chosen), b = drv_find(c, other);
    if (a == b || a < 0 || b < 0 || c->drv[a].end <= chosen || c->drv[b].end <= other) return 0;
    return c->drv[a].assumed || c->drv[b].assumed;
}

/* Best fit: the first free block of the stream at least `size`, in (size, address) order (with expandable
 * segments, the following ones while the unmapped space after them makes them a closer fit:
 * Expandable.get_free_block_expandable); an oversize block (>= max_split_size) only for a request that
 * is itself oversize, and then not one max_non_split_rounding_size or more too large. */
static Block *get_free_block(Core *c, int is_small, int64_t size, int64_t stream)
{
    if (c->gc_on) c->call_count[is_small ? 1 : 0]++;
    Block *root = *pool_of(c, is_small);
    Block *block = lower_bound(root, stream, size, INT64_MIN);
    if (!block || block->stream != stream) return NULL;
    while (block->seg_page) {
        Block *next = successor(root, block, 0);
        if (!next || next->stream != stream || expandable_size(next) >= expandable_size(block)) break;
        block = next;
    }
    if ((uint64_t)size < c->max_split_size) {
        if (c->max_split_size <= (uint64_t)block->size) return NULL; /* do not return an oversized block for a small request */
    } else if (block->size >= size + c->max_non_split_rounding_size) {
        return NULL; /* allow oversized blocks only up to max_non_split_rounding_size above the request */
    }
    Block *nx = block; /* equal blocks behind it: was the tie the driver's? */
    for (int k = 0; c->assumed_live && k < TIE_WALK; k++) {
        nx = successor(root, nx, 0);
        if (!nx || nx->stream != stream || nx->size != block->size) break;
        if (drv_tie(c, block->addr, nx->addr)) {
            c->assumed_ties++;
            break;
        }
    }
    pool_erase(c, block);
    return block;
}

/* ---- expandable segments (expandable.py) ----------------------------------------------------------- */

static inline int allocatable(const Block *b) { return b && !b->allocated; }

static void splice(Block *block, Block *before, Block *after)
{
    block->prev = before;
    if (before) before->next = block;
    block->next = after;
    if (after) after->prev = block;
}

/* Absorb a free neighbour of the same mapping into dst; returns the subsumed size (0 when not merged). */
static int64_t try_merge_blocks(Core *c, Block *dst, Block *src)
{
    if (!src || src->allocated || dst->mapped != src->mapped) return 0;
    if (src->mapped)
        pool_erase(c, src);
    else
        erase_unmapped(c, src);
    if (dst->prev == src) {
        dst->addr = src->addr;
        dst->prev = src->prev;
        if (dst->prev) dst->prev->next = dst;
    } else {
        dst->next = src->next;
        if (dst->next) dst->next->prev = dst;
    }
    int64_t subsumed = src->size;
    dst->size += subsumed;
    drop_block(c, src);
    return subsumed;
}

/* The lowest-address unmapped range of the stream (with the free block before it) that can hold size,
 * else a new segment's range (NULL with an exception set on error). */
static Block *find_expandable_block(Core *c, int is_small, int64_t size, int64_t stream)
{
    Block *root = c->unmapped[is_small ? 1 : 0];
    for (Block *u = first_from(root, stream, 0, INT64_MIN, 1, 0); u && u->stream == stream; u = successor(root, u, 1)) {
        Block *cand = allocatable(u->prev) ? u->prev : u, *b = cand;
        int64_t room = 0;
        while (room < size && allocatable(b)) {
            room += b->size;
            b = b->next;
        }
        if (room >= size) return cand;
    }
    int64_t page = is_small ? kSmallBuffer : kLargeBuffer, memory = c->es_memory;
    int64_t want = memory + memory / 8 > size ? memory + memory / 8 : size;
    if (want > INT64_MAX - page) {
        PyErr_SetString(PyExc_OverflowError, "an expandable segment past 2^63 bytes");
        return NULL;
    }
    int64_t span = (want + page - 1) / page * page;
    int64_t base = drv_take_high(c, span);
    if (base < 0) return NULL;
    Block *cand = new_block(c, span, base, stream, is_small);
    if (!cand) return NULL;
    cand->seg_base = base, cand->seg_page = page, cand->mapped = 0;
    insert_unmapped(c, cand);
    return cand;
}

/* Map the pages under the first size bytes of an unmapped range. 1, 0 over capacity, -1 on error. */
static int map_block(Core *c, Block *to_map, int64_t size, int force)
{
    int64_t page = to_map->seg_page, base = to_map->seg_base;
    int64_t begin = (to_map->addr - base) / page, end = (to_map->addr + size - base + page - 1) / page;
    int64_t mapped = (end - begin) * page;
    if (!force && c->has_capacity && c->reserved + mapped > c->capacity) return 0;
    erase_unmapped(c, to_map);
    to_map->mapped = 1;
    int64_t ptr = to_map->addr;
    if (mapped < to_map->size) {
        Block *remaining = new_block(c, to_map->size - mapped, ptr + mapped, to_map->stream, to_map->is_small);
        if (!remaining) return -1;
        remaining->seg_base = base, remaining->seg_page = page, remaining->mapped = 0;
        splice(remaining, to_map, to_map->next);
        insert_unmapped(c, remaining);
        to_map->size = mapped;
    }
    try_merge_blocks(c, to_map, to_map->prev);
    try_merge_blocks(c, to_map, to_map->next);
    insert_into_blocks(c, to_map);
    c->reserved += mapped;
    if (c->reserved > c->peak_reserved) c->peak_reserved = c->reserved;
    c->device_allocs++;
    return emit(c, E_SEGMENT_MAP, ptr, mapped, to_map->stream, mapped) < 0 ? -1 : 1;
}

/* NULL: no block (an exception set on error). */
static Block *try_allocate_expandable_block(Core *c, int is_small, int64_t size, int64_t stream, int force)
{
    Block *cand = find_expandable_block(c, is_small, size, stream);
    if (!cand) return NULL;
    if (!cand->mapped) {
        int ok = map_block(c, cand, cand->size < size ? cand->size : size, force);
        if (ok <= 0) return NULL;
    }
    while (cand->size < size) {
        Block *next = cand->next;
        if (!next) return NULL; /* the segment cannot grow (see expandable.py) */
        int64_t want = size - cand->size;
        int ok = map_block(c, next, want < next->size ? want : next->size, force);
        if (ok <= 0) return NULL;
        cand = next;
    }
    pool_erase(c, cand);
    return cand;
}

/* Unmap the whole pages inside a free block; the partial pages at its ends stay mapped. */
static int unmap_block(Core *c, Block *block)
{
    int64_t page = block->seg_page, base = block->seg_base;
    int64_t begin = (block->addr - base + page - 1) / page, end = (block->addr + block->size - base) / page;
    if (begin >= end) return 0;
    pool_erase(c, block);
    int64_t start = base + begin * page, length = (end - begin) * page;
    int64_t before = start - block->addr, after = block->size - before - length;
    if (before > 0) {
        Block *head = new_block(c, before, block->addr, block->stream, block->is_small);
        if (!head) return -1;
        head->seg_base = base, head->seg_page = page;
        splice(head, block->prev, block);
        insert_into_blocks(c, head);
    }
    if (after > 0) {
        Block *tail = new_block(c, after, start + length, block->stream, block->is_small);
        if (!tail) return -1;
        tail->seg_base = base, tail->seg_page = page;
        splice(tail, block, block->next);
        insert_into_blocks(c, tail);
    }
    block->addr = start, block->size = length, block->mapped = 0;
    try_merge_blocks(c, block, block->prev);
    try_merge_blocks(c, block, block->next);
    insert_unmapped(c, block);
    c->reserved -= length;
    c->device_frees++;
    return emit(c, E_SEGMENT_UNMAP, start, length, block->stream, length);
}

/* ---- segments ------------------------------------------------------------------------------------- */

/* A new segment (cudaMalloc of alloc_size) or expandable pages for size; NULL with no error set when it
 * does not fit the capacity. */
static Block *alloc_block(Core *c, int is_small, int64_t size, int64_t alloc_size, int64_t stream, int force)
{
    /* the allowed maximum (a memory fraction) first, against alloc_size, whatever the segment kind */
    if (!force && c->has_allowed && c->reserved + alloc_size > c->allowed) return NULL;
    if (c->expandable) return try_allocate_expandable_block(c, is_small, size, stream, force);
    if (!force && c->has_capacity && c->reserved + alloc_size > c->capacity) return NULL;
    int64_t addr = drv_take(c, alloc_size);
    if (addr < 0) return NULL;
    Block *block = new_block(c, alloc_size, addr, stream, is_small);
    if (!block) return NULL;
    c->reserved += alloc_size;
    if (c->reserved > c->peak_reserved) c->peak_reserved = c->reserved;
    c->device_allocs++;
    if (emit(c, E_SEGMENT_ALLOC, addr, alloc_size, stream, alloc_size) < 0) return NULL;
    return block;
}

static inline int is_split(const Block *b) { return b->prev != NULL || b->next != NULL; }

/* cudaFree of a whole unsplit cached segment. */
static int release_block(Core *c, Block *block)
{
    c->device_frees++;
    c->reserved -= block->size;
    drv_release(c, block->addr);
    if (emit(c, E_SEGMENT_FREE, block->addr, block->size, block->stream, block->size) < 0) return -1;
    pool_erase(c, block);
    drop_block(c, block);
    return 0;
}

/* With max_split_size set: free one oversize cached block big enough, or several, largest first (never
 * blocks of expandable segments). Returns 1 when enough was freed, 0 when not, -1 on error. */
static int release_available_cached_blocks(Core *c, int is_small, int64_t size, int64_t stream)
{
    if (c->max_split_size == NO_LIMIT) return 0;
    int64_t mss = (int64_t)c->max_split_size;
    int64_t key = size > mss ? size : mss;
    Block *block = lower_bound(*pool_of(c, is_small), stream, key, INT64_MIN);
    if (block && block->stream == stream) {
        if (is_split(block) || block->seg_page) return 0;
        return release_block(c, block) < 0 ? -1 : 1;
    }
    /* no single block is big enough: free the largest unsplit oversize ones until key bytes are freed */
    int64_t released = 0;
    Block *cur = last_below(*pool_of(c, is_small), stream, INT64_MAX, INT64_MAX); /* the stream's largest */
    while (cur && cur->stream == stream) {
        if (released >= key || cur->size < mss) break;
        Block *below = last_below(*pool_of(c, is_small), cur->stream, cur->size, cur->addr);
        if (!is_split(cur) && !cur->seg_page) {
            released += cur->size;
            if (release_block(c, cur) < 0) return -1;
        }
        cur = below;
    }
    return released >= key;
}

/* release_blocks of one pool: free every unsplit cached segment in set order, then unmap the whole pages
 * of the free blocks of expandable segments (and drop a segment left wholly unmapped). */
static int release_blocks(Core *c, int small)
{
    size_t n = 0;
    Block *root = *pool_of(c, small);
    Block *cur = lower_bound(root, INT64_MIN, INT64_MIN, INT64_MIN);
    while (cur) {
        Block *after = successor(*pool_of(c, small), cur, 0);
        if (cur->seg_page) {
            if (scratch_fit(c, n + 1) < 0) return -1;
            c->scratch[n++] = cur;
        } else if (!is_split(cur) && release_block(c, cur) < 0) {
            return -1;
        }
        cur = after;
    }
    for (size_t k = 0; k < n; k++) {
        Block *b = c->scratch[k];
        if (unmap_block(c, b) < 0) return -1;
        if (!is_split(b) && !b->mapped) { /* release_expandable_segment */
            erase_unmapped(c, b);
            drop_block(c, b);
        }
    }
    return 0;
}

/* emptyCache and the last retry of malloc: release_blocks of both pools. */
static int release_cached_blocks(Core *c)
{
    c->flushes++;
    for (int small = 0; small < 2; small++)
        if (release_blocks(c, small) < 0) return -1;
    return 0;
}

/* Free unsplit large cached blocks older than average until reserved <= the threshold. */
static int garbage_collect_cached_blocks(Core *c)
{
    if (c->reserved <= c->gc_threshold) return 0;
    int64_t target = c->reserved - c->gc_threshold, reclaimed = 0, count = c->call_count[0], total_age = 0;
    size_t n = 0;
    for (Block *b = lower_bound(c->pools[0], INT64_MIN, INT64_MIN, INT64_MIN); b; b = successor(c->pools[0], b, 0)) {
        if (is_split(b) || b->seg_page) continue;
        if (scratch_fit(c, n + 1) < 0) return -1;
        c->scratch[n++] = b;
        total_age += count - b->gc_base;
    }
    int freed = 1;
    while (reclaimed < target && freed && n) {
        double age_threshold = (double)total_age / (double)n;
        size_t kept = 0;
        freed = 0;
        for (size_t k = 0; k < n; k++) {
            Block *b = c->scratch[k];
            int64_t age = count - b->gc_base;
            if ((double)age >= age_threshold) {
                freed = 1;
                reclaimed += b->size;
                total_age -= age;
                if (release_block(c, b) < 0) return -1;
            } else {
                c->scratch[kept++] = b;
            }
        }
        n = kept;
    }
    return 0;
}

static int oom(Core *c, int64_t size, int64_t stream)
{
    c->ooms++;
    if (!c->has_oom) {
        c->has_oom = 1;
        c->oom_request = c->req, c->oom_size = size, c->oom_reserved = c->reserved, c->oom_allocated = c->allocated;
    }
    return emit(c, E_OOM, 0, size, stream, 0);
}

/* malloc after no cached block fits: the recorded release, garbage collection, a new segment and the
 * retries (release_available_cached_blocks, then release_cached_blocks); past them an OOM, counted, and
 * the replay goes on with the segment forced. */
/* cudaFree of one recorded segment: the free unsplit block of that size and stream with the lowest address
 * (TorchAllocator.release_cached_segment), if the model holds one. */
static int release_cached_segment(Core *c, int64_t nbytes, int64_t stream)
{
    int small = nbytes == kSmallBuffer;
    for (Block *b = lower_bound(*pool_of(c, small), stream, nbytes, INT64_MIN);
         b && b->stream == stream && b->size == nbytes; b = successor(*pool_of(c, small), b, 0))
        if (!is_split(b) && !b->seg_page) return release_block(c, b);
    return 0;
}

/* The recorded release inside this malloc (TorchAllocator.recorded_release). */
static int recorded_release(Core *c, int is_small, int64_t size, int64_t stream)
{
    int kind = c->armed;
    c->armed = -1;
    if (c->exact_releases && (kind == REL_SPLIT_RETRY || kind == REL_GC)) {
        for (size_t k = 0; k < c->n_armed; k++)
            if (release_cached_segment(c, c->armed_segs[2 * k], c->armed_segs[2 * k + 1]) < 0) return -1;
        return 0;
    }
    if (!c->exact_releases) {
        int freed = release_available_cached_blocks(c, is_small, size, stream);
        if (freed) return freed < 0 ? -1 : 0;
    }
    if (release_cached_blocks(c) < 0) return -1;
    c->alloc_retries++;
    return 0;
}

static Block *malloc_new_block(Core *c, int is_small, int64_t orig_size, int64_t size, int64_t alloc_size,
                               int64_t stream)
{
    if (c->armed >= 0 && recorded_release(c, is_small, size, stream) < 0) return NULL;
    if (c->gc_on && garbage_collect_cached_blocks(c) < 0) return NULL;
    Block *block = alloc_block(c, is_small, size, alloc_size, stream, 0);
    if (!block && PyErr_Occurred()) return NULL;
    if (!block) {
        int freed = release_available_cached_blocks(c, is_small, size, stream);
        if (freed < 0) return NULL;
        if (freed) {
            block = alloc_block(c, is_small, size, alloc_size, stream, 0);
            if (!block && PyErr_Occurred()) return NULL;
        }
    }
    if (!block) {
        if (release_cached_blocks(c) < 0) return NULL;
        c->alloc_retries++;
        block = alloc_block(c, is_small, size, alloc_size, stream, 0);
        if (!block && PyErr_Occurred()) return NULL;
    }
    if (!block) {
        if (oom(c, orig_size, stream) < 0) return NULL;
        block = alloc_block(c, is_small, size, alloc_size, stream, 1);
        if (!block && !PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "an expandable segment could not grow past an OOM");
    }
    return block;
}

static inline int should_split(const Core *c, const Block *block, int64_t size)
{
    int64_t remaining = block->size - size;
    if (block->is_small || c->expandable) return remaining >= kMinBlockSize;
    return (uint64_t)size < c->max_split_size && remaining > kSmallSize;
}

static Block *alloc_found_block(Core *c, Block *block, int64_t size, int64_t orig_size, int split)
{
    if (split) { /* the front becomes the allocation, the rest stays cached */
        Block *remaining = block;
        block = new_block(c, size, remaining->addr, remaining->stream, remaining->is_small);
        if (!block) return NULL;
        block->seg_base = remaining->seg_base, block->seg_page = remaining->seg_page;
        block->prev = remaining->prev;
        if (block->prev) block->prev->next = block;
        block->next = remaining;
        remaining->prev = block;
        remaining->addr += size;
        remaining->size -= size;
        insert_into_blocks(c, remaining);
    }
    block->allocated = 1;
    block->requested = orig_size;
    c->allocated += block->size;
    if (c->allocated > c->peak_allocated) c->peak_allocated = c->allocated;
    if (emit(c, E_ALLOC, block->addr, orig_size, block->stream, block->size) < 0) return NULL;
    return block;
}

static Block *core_malloc(Core *c, int64_t orig_size, int64_t stream)
{
    int64_t size = round_size(c, orig_size);
    int64_t alloc_size = get_allocation_size(size);
    int is_small = size <= kSmallSize;
    Block *block = get_free_block(c, is_small, size, stream);
    if (!block) {
        block = malloc_new_block(c, is_small, orig_size, size, alloc_size, stream);
        if (!block) return NULL;
    } else {
        c->armed = -1; /* a cached block fits: PyTorch's malloc would not have released anything here */
    }
    return alloc_found_block(c, block, size, orig_size, should_split(c, block, size));
}

static void free_block(Core *c, Block *block)
{
    try_merge_blocks(c, block, block->prev);
    try_merge_blocks(c, block, block->next);
    insert_into_blocks(c, block);
}

static int core_free(Core *c, Block *block)
{
    block->allocated = 0;
    c->allocated -= block->size;
    if (emit(c, E_FREE, block->addr, block->requested, block->stream, block->size) < 0) return -1;
    free_block(c, block);
    return 0;
}

/* ---- Python type --------------------------------------------------------------------------------- */

static int Core_init(Core *c, PyObject *args, PyObject *kw)
{
    static char *names[] = {"max_split_size", "max_non_split_rounding_size", "divisions", "capacity", "va_start",
                            "expandable_memory", "gc_threshold", "exact_releases", "allowed", NULL};
    unsigned long long mss;
    long long mnsrs, va, es_memory = 0;
    int exact = 0;
    PyObject *divisions, *capacity, *gc_threshold = Py_None, *allowed = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "KLOOL|LOpO", names, &mss, &mnsrs, &divisions, &capacity, &va,
                                     &es_memory, &gc_threshold, &exact, &allowed))
        return -1;
    c->exact_releases = exact, c->armed = -1;
    c->has_allowed = allowed != Py_None;
    if (c->has_allowed) {
        c->allowed = PyLong_AsLongLong(allowed);
        if (c->allowed == -1 && PyErr_Occurred()) return -1;
    }
    if (es_memory < 0 || es_memory > INT64_MAX / 2) {
        PyErr_SetString(PyExc_ValueError, "expandable_memory must be in 0..2^62");
        return -1;
    }
    c->expandable = es_memory > 0, c->es_memory = es_memory;
    c->gc_on = gc_threshold != Py_None;
    if (c->gc_on) {
        c->gc_threshold = PyLong_AsLongLong(gc_threshold);
        if (c->gc_threshold == -1 && PyErr_Occurred()) return -1;
    }
    PyObject *seq = PySequence_Fast(divisions, "divisions must be a sequence");
    if (!seq) return -1;
    if (PySequence_Fast_GET_SIZE(seq) != ROUNDUP_INTERVALS) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "divisions needs 16 entries");
        return -1;
    }
    for (int i = 0; i < ROUNDUP_INTERVALS; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        c->divisions[i] = (int)v;
    }
    Py_DECREF(seq);
    c->has_capacity = capacity != Py_None;
    if (c->has_capacity) {
        c->capacity = PyLong_AsLongLong(capacity);
        if (c->capacity == -1 && PyErr_Occurred()) return -1;
    }
    c->max_split_size = mss, c->max_non_split_rounding_size = mnsrs, c->va_next = va;
    c->drv_start = align_up(va), c->drv_dir = 1, c->drv_reuse = 1;
    c->rng = 2463534242u;
    return 0;
}

static void Core_dealloc(Core *c)
{
    for (size_t i = 0; i < c->n_slabs; i++) PyMem_Free(c->slabs[i]);
    PyMem_Free(c->slabs);
    PyMem_Free(c->handles.keys);
    PyMem_Free(c->handles.vals);
    PyMem_Free(c->seeded.keys);
    PyMem_Free(c->seeded.vals);
    PyMem_Free(c->ev);
    PyMem_Free(c->scratch);
    PyMem_Free(c->armed_segs);
    PyMem_Free(c->drv);
    PyMem_Free(c->drv_rec);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static int get_q(PyObject *obj, Py_buffer *view, Py_ssize_t n, const char *name)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (view->itemsize != 8 || view->len / 8 < n) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s: expected at least %zd 8-byte integers", name, n);
        return -1;
    }
    return 0;
}

/* One request: request i, at position j of the arrays. 0, or -1 with an exception set. */
/* Arm a recorded release inside the next malloc; a partial one of the recorded settings keeps its segments
 * ((request, address, bytes, stream) records of rel, n_rel int64s in all). 0, or -1 with an exception set. */
static int arm(Core *c, Py_ssize_t i, int kind, const int64_t *rel, Py_ssize_t n_rel)
{
    c->armed = kind;
    c->n_armed = 0;
    if (!c->exact_releases || (kind != REL_SPLIT_RETRY && kind != REL_GC) || !rel) return 0;
    for (Py_ssize_t k = 0; k + 4 <= n_rel; k += 4) {
        if (rel[k] != i) continue;
        if (c->n_armed == c->cap_armed) {
            size_t cap = c->cap_armed ? 2 * c->cap_armed : 16;
            int64_t *grown = PyMem_Realloc(c->armed_segs, cap * 2 * sizeof(int64_t));
            if (!grown) {
                PyErr_NoMemory();
                return -1;
            }
            c->armed_segs = grown, c->cap_armed = cap;
        }
        c->armed_segs[2 * c->n_armed] = rel[k + 2], c->armed_segs[2 * c->n_armed + 1] = rel[k + 3];
        c->n_armed++;
    }
    return 0;
}

static int serve_one(Core *c, Py_ssize_t i, Py_ssize_t j, const int64_t *kind, const int64_t *size,
                     const int64_t *stream, const int64_t *pair, const int64_t *addr, const int64_t *rel,
                     Py_ssize_t n_rel)
{
    c->req = i;
    int64_t k = kind[j];
    if (k == R_MALLOC || k == R_SEED) {
        /* a SEED request takes its seeded block (seeded()), else it is a malloc */
        Block *b = k == R_SEED && addr ? map_pop(&c->seeded, addr[j]) : NULL;
        if (!b) b = core_malloc(c, size[j], stream[j]);
        if (!b || map_put(&c->handles, i, b) < 0) return -1;
    } else if (k == R_FREE) {
        Block *b = map_pop(&c->handles, pair[j]);
        if (!b) {
            PyErr_Format(PyExc_KeyError, "request %zd frees request %lld, which holds no block", i,
                         (long long)pair[j]);
            return -1;
        }
        if (core_free(c, b) < 0) return -1;
    } else if (k == R_RELEASE && size[j] >= 0) { /* a negative kind: recorded, not followed */
        int what = (int)size[j];
        if (what == REL_EMPTY_CACHE || what == REL_OOM) {
            if (release_cached_blocks(c) < 0) return -1; /* the cache emptied at that point */
        } else if (what != REL_GC || c->exact_releases) {
            if (arm(c, i, what, rel, n_rel) < 0) return -1; /* inside the next malloc, if no cached block fits */
        }
    }
    if (c->broken) {
        PyErr_Format(PyExc_RuntimeError, "request %zd: a block was not in the pool the model keeps it in", i);
        return -1;
    }
    return 0;
}

/* run and run_rows: the request arrays (kind, size, stream, pair, device, addr; device and addr optional,
 * Py_None) as buffers of at least n 8-byte integers. Returns how many were got (all 6 on success). */
static int get_arrays(PyObject **o, Py_buffer *v, int *has, Py_ssize_t n)
{
    static const char *names[] = {"kind", "size", "stream", "pair", "device", "addr"};
    int got = 0;
    for (; got < 6; got++) {
        has[got] = got < 4 || o[got] != Py_None;
        if (!has[got]) {
            v[got].obj = NULL;
            continue;
        }
        if (get_q(o[got], &v[got], n, names[got]) < 0) break;
    }
    return got;
}

static void release_arrays(Py_buffer *v, const int *has, int got)
{
    for (int i = 0; i < got; i++)
        if (has[i]) PyBuffer_Release(&v[i]);
}

/* The optional rel buffer (Requests.rel: 4 int64s per released segment of a partial release); NULL for None. */
static int get_rel(PyObject *obj, Py_buffer *view, const int64_t **rel, Py_ssize_t *n)
{
    *rel = NULL, *n = 0;
    view->obj = NULL;
    if (obj == Py_None) return 0;
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (view->itemsize != 8) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "rel: expected 8-byte integers");
        return -1;
    }
    *rel = view->buf, *n = view->len / 8;
    return 0;
}

static PyObject *Core_run(Core *c, PyObject *args)
{
    PyObject *o[6], *rel_obj = Py_None;
    long long dev;
    Py_ssize_t start, end, offset = 0;
    o[5] = Py_None;
    if (!PyArg_ParseTuple(args, "OOOOOLnn|nOO", &o[0], &o[1], &o[2], &o[3], &o[4], &dev, &start, &end, &offset,
                          &o[5], &rel_obj))
        return NULL;
    if (start < offset || end < start) {
        PyErr_SetString(PyExc_ValueError, "run: need offset <= start <= end");
        return NULL;
    }
    Py_buffer v[6], rv;
    int has[6];
    const int64_t *rel;
    Py_ssize_t n_rel;
    if (get_rel(rel_obj, &rv, &rel, &n_rel) < 0) return NULL;
    int got = get_arrays(o, v, has, end - offset);
    if (got < 6) {
        release_arrays(v, has, got);
        if (rv.obj) PyBuffer_Release(&rv);
        return NULL;
    }
    /* the arrays hold requests offset..: request i is at j = i - offset */
    const int64_t *kind = v[0].buf, *size = v[1].buf, *stream = v[2].buf, *pair = v[3].buf;
    const int64_t *device = has[4] ? v[4].buf : NULL, *addr = has[5] ? v[5].buf : NULL;
    PyObject *result = NULL;
    for (Py_ssize_t i = start, j = start - offset; i < end; i++, j++) {
        if (device && device[j] != dev) continue;
        if (serve_one(c, i, j, kind, size, stream, pair, addr, rel, n_rel) < 0) goto done;
    }
    result = Py_NewRef(Py_None);
done:
    release_arrays(v, has, got);
    if (rv.obj) PyBuffer_Release(&rv);
    return result;
}

/* Only the requests at the given positions: the replay groups a chunk by device once, so each device's
 * core serves its own requests instead of scanning the chunk (O(devices x requests)). */
static PyObject *Core_run_rows(Core *c, PyObject *args)
{
    PyObject *o[6], *rows_obj, *rel_obj = Py_None;
    Py_ssize_t lo, hi, offset;
    o[4] = Py_None;
    o[5] = Py_None;
    if (!PyArg_ParseTuple(args, "OOOOOnnn|OO", &o[0], &o[1], &o[2], &o[3], &rows_obj, &lo, &hi, &offset, &o[5],
                          &rel_obj))
        return NULL;
    Py_buffer rv;
    if (PyObject_GetBuffer(rows_obj, &rv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    if (rv.itemsize != 8 || lo < 0 || hi < lo || rv.len / 8 < hi) {
        PyBuffer_Release(&rv);
        PyErr_SetString(PyExc_ValueError, "run_rows: rows must be 8-byte integers and 0 <= lo <= hi <= len(rows)");
        return NULL;
    }
    const int64_t *rows = rv.buf;
    int64_t top = 0;
    for (Py_ssize_t t = lo; t < hi; t++) {
        if (rows[t] < 0 || (t > lo && rows[t] <= rows[t - 1])) {
            PyBuffer_Release(&rv);
            PyErr_SetString(PyExc_ValueError, "run_rows: rows must be ascending and not negative");
            return NULL;
        }
        top = rows[t] + 1;
    }
    Py_buffer v[6], relv;
    int has[6];
    const int64_t *rel;
    Py_ssize_t n_rel;
    if (get_rel(rel_obj, &relv, &rel, &n_rel) < 0) {
        PyBuffer_Release(&rv);
        return NULL;
    }
    int got = get_arrays(o, v, has, (Py_ssize_t)top);
    PyObject *result = NULL;
    if (got == 6) {
        const int64_t *kind = v[0].buf, *size = v[1].buf, *stream = v[2].buf, *pair = v[3].buf;
        const int64_t *addr = has[5] ? v[5].buf : NULL;
        Py_ssize_t t = lo;
        for (; t < hi; t++)
            if (serve_one(c, offset + rows[t], rows[t], kind, size, stream, pair, addr, rel, n_rel) < 0) break;
        if (t == hi) result = Py_NewRef(Py_None);
    }
    release_arrays(v, has, got);
    if (relv.obj) PyBuffer_Release(&relv);
    PyBuffer_Release(&rv);
    return result;
}

/* seed.seed_state: the segments and live blocks of a part-way trace, from seed.seed_chains. */
static PyObject *Core_seed(Core *c, PyObject *args)
{
    long long device;
    PyObject *segments;
    if (!PyArg_ParseTuple(args, "LO", &device, &segments)) return NULL;
    PyObject *segs = PySequence_Fast(segments, "segments must be a sequence");
    if (!segs) return NULL;
    int64_t saved = c->req, top = 0;
    c->req = -1 - device;
    for (Py_ssize_t s = 0; s < PySequence_Fast_GET_SIZE(segs); s++) {
        long long base, size, stream;
        int is_small;
        PyObject *blocks;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(segs, s), "LLLpO", &base, &size, &stream, &is_small, &blocks))
            goto fail;
        PyObject *chain = PySequence_Fast(blocks, "blocks must be a sequence");
        if (!chain) goto fail;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(chain);
        Block *prev = NULL, *first = NULL;
        for (Py_ssize_t k = 0; k < n; k++) {
            long long addr, bsize, requested;
            int allocated;
            if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(chain, k), "LLLp", &addr, &bsize, &requested, &allocated)) {
                Py_DECREF(chain);
                goto fail;
            }
            Block *b = new_block(c, bsize, addr, stream, is_small);
            if (!b) {
                Py_DECREF(chain);
                goto fail;
            }
            if (allocated) {
                b->allocated = 1, b->requested = requested;
                c->allocated += bsize;
                if (map_put(&c->seeded, addr, b) < 0) {
                    Py_DECREF(chain);
                    goto fail;
                }
            }
            b->prev = prev;
            if (prev) prev->next = b;
            prev = b;
            if (!first) first = b;
        }
        Py_DECREF(chain);
        if (emit(c, E_SEGMENT_ALLOC, base, size, stream, size) < 0) goto fail;
        for (Block *b = first; b; b = b->next)
            if (b->allocated && emit(c, E_ALLOC, b->addr, b->requested, stream, b->size) < 0) goto fail;
        for (Block *b = first; b; b = b->next)
            if (!b->allocated) insert_into_blocks(c, b);
        c->reserved += size;
        if (drv_reserve(c, base, size, 0) < 0) goto fail; /* a recorded address */
        if (base + size > top) top = base + size;
    }
    Py_DECREF(segs);
    c->req = saved;
    if (c->reserved > c->peak_reserved) c->peak_reserved = c->reserved;
    if (c->allocated > c->peak_allocated) c->peak_allocated = c->allocated;
    (void)top;
    return Py_NewRef(Py_None);
fail:
    Py_DECREF(segs);
    c->req = saved;
    return NULL;
}

static PyObject *Core_take_events(Core *c, PyObject *noargs)
{
    PyObject *out = PyBytes_FromStringAndSize((const char *)c->ev, (Py_ssize_t)(c->n_ev * sizeof(int64_t)));
    if (out) c->n_ev = 0;
    return out;
}

static PyObject *Core_counters(Core *c, PyObject *noargs)
{
    PyObject *first = c->has_oom ? Py_BuildValue("{s:L,s:L,s:L,s:L}", "request", (long long)c->oom_request,
                                                 "size_bytes", (long long)c->oom_size, "reserved_bytes",
                                                 (long long)c->oom_reserved, "allocated_bytes",
                                                 (long long)c->oom_allocated)
                                 : Py_NewRef(Py_None);
    if (!first) return NULL;
    return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:N}", "assumed_addresses",
                         (long long)c->assumed_addresses, "assumed_ties", (long long)c->assumed_ties,
                         "reserved", (long long)c->reserved,
                         "allocated", (long long)c->allocated, "peak_reserved", (long long)c->peak_reserved,
                         "peak_allocated", (long long)c->peak_allocated, "device_allocs",
                         (long long)c->device_allocs, "device_frees", (long long)c->device_frees, "flushes",
                         (long long)c->flushes, "alloc_retries", (long long)c->alloc_retries, "ooms",
                         (long long)c->ooms, "first_oom", first);
}

static PyObject *Core_live(Core *c, PyObject *noargs) { return PyLong_FromSize_t(c->handles.n); }

/* set_driver(direction, reuse, recorded): the driver's rule and the recorded segment_allocs as a flat
 * sequence of (request, bytes, address), by request. */
static PyObject *Core_set_driver(Core *c, PyObject *args)
{
    int dir, reuse, same = 0;
    PyObject *rec;
    if (!PyArg_ParseTuple(args, "ipO|p", &dir, &reuse, &rec, &same)) return NULL;
    PyObject *seq = PySequence_Fast(rec, "recorded must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int64_t *arr = n ? PyMem_Malloc((size_t)n * sizeof(int64_t)) : NULL;
    if (n && !arr) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        arr[k] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, k));
        if (arr[k] == -1 && PyErr_Occurred()) {
            PyMem_Free(arr);
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    PyMem_Free(c->drv_rec);
    c->drv_rec = arr, c->n_rec = n / 3, c->drv_dir = dir >= 0 ? 1 : -1, c->drv_reuse = reuse, c->drv_same = same;
    return Py_NewRef(Py_None);
}

static PyMethodDef Core_methods[] = {
    {"run", (PyCFunction)Core_run, METH_VARARGS,
     "run(kind, size, stream, pair, device, dev, start, end, offset=0): serve requests start..end-1 (those of "
     "device dev when device is not None); arrays of 8-byte integers as in replay.Requests, holding the "
     "requests from offset on; addr (optional) lets SEED requests take their seeded blocks."},
    {"run_rows", (PyCFunction)Core_run_rows, METH_VARARGS,
     "run_rows(kind, size, stream, pair, rows, lo, hi, offset, addr=None): serve the requests at positions "
     "rows[lo:hi] of the arrays (ascending; request offset + position), as run does."},
    {"seed", (PyCFunction)Core_seed, METH_VARARGS,
     "seed(device, chains): the seeded segments of a part-way trace, chains as seed.seed_chains gives them."},
    {"take_events", (PyCFunction)Core_take_events, METH_NOARGS,
     "take_events() -> bytes of int64 (request, op, address, size, stream, block) rows; clears them."},
    {"counters", (PyCFunction)Core_counters, METH_NOARGS, "counters() -> dict of the PolicyCounters fields."},
    {"live", (PyCFunction)Core_live, METH_NOARGS, "live() -> number of allocated blocks held."},
    {"set_driver", (PyCFunction)Core_set_driver, METH_VARARGS,
     "set_driver(direction, reuse, recorded, same_size=False): the driver's rule (driver.DriverRule) and its recorded "
     "segment_allocs, a flat sequence of (request, bytes, address) by request."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "veotrace.allocators._torchcore.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Core(max_split_size, max_non_split_rounding_size, divisions, capacity, va_start, expandable_memory=0, "
              "gc_threshold=None, exact_releases=False, allowed=None): DeviceCachingAllocator of one device; "
              "expandable_memory > 0 turns expandable segments on (each reserves 1 1/8 of it), gc_threshold (bytes) "
              "garbage_collection_threshold, exact_releases replays the recorded settings' partial releases as "
              "recorded, allowed (bytes) allowed_memory_maximum.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Core_init,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_methods = Core_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_torchcore", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__torchcore(void)
{
    if (PyType_Ready(&CoreType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Core", (PyObject *)&CoreType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
