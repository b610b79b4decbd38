// LD_PRELOAD'ed in front of the server oracle's shim.so (../shared/tools/server-oracle/shim.c) for speculative
// decoding scenarios (-md): llama-server then drives two contexts, the target's and the draft model's, and the
// shared shim would write both caches' calls into one op trace. This library splits them:
//   - calls on the target context (the context of the process's first llama_decode: the target is loaded, and
//     warmed up, before the draft model) go on to the shared shim, which records them as before;
//   - calls on any other context (the draft's) go straight to libllama and, once the server's main loop runs, are
//     written to $SHIM_DRAFT_OPS in the same CSV form (decode rows: consecutive tokens with the same seq set and
//     contiguous positions; label = the draft context's decode call number).
// A state restore into the draft context (llama_state_seq_set_data_ext: the RAM prompt cache, a context checkpoint) is
// written as the shared shim writes one: "rm DEST -1 -1" and decode rows labelled R<n>.<k> holding the saved positions
// (of the first cache) in cell order, cut at n_ubatch; a checkpoint restore (PARTIAL_ONLY) of an iSWA draft has no
// op-trace form and is not written. A blob it cannot parse aborts the recording.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int32_t llama_token;
typedef int32_t llama_pos;
typedef int32_t llama_seq_id;
typedef void * llama_memory_t;
struct llama_context;

typedef struct llama_batch {
    int32_t n_tokens;
    llama_token * token;
    float * embd;
    llama_pos * pos;
    int32_t * n_seq_id;
    llama_seq_id ** seq_id;
    int8_t * logits;
} llama_batch;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct llama_context * g_tgt;   // first context that decoded
static llama_memory_t g_tgt_mem;
static bool g_main_loop;               // server_queue::process_new_tasks has run once
static FILE * g_out;
static long g_decodes;

static void * sym(void * handle, const char * name) {
    void * p = dlsym(handle, name);
    if (!p) {
        fprintf(stderr, "draft_ops: %s not found: %s\n", name, dlerror());
        abort();
    }
    return p;
}

// libllama's own definition (draft calls bypass the shared shim)
static void * real(const char * name) {
    static void * lib;
    if (!lib) lib = dlopen("libllama.so.0", RTLD_LAZY | RTLD_NOLOAD);
    if (!lib) lib = dlopen("libllama.so", RTLD_LAZY | RTLD_NOLOAD);
    if (!lib) {
        fprintf(stderr, "draft_ops: libllama.so is not loaded\n");
        abort();
    }
    return sym(lib, name);
}

#define NEXT(T, name) static T next_; if (!next_) next_ = (T) sym(RTLD_NEXT, name)
#define REAL(T, name) static T real_; if (!real_) real_ = (T) real(name)

static FILE * out(void) {   // g_mu held; NULL before the main loop or without SHIM_DRAFT_OPS
    if (!g_main_loop) return NULL;
    if (!g_out) {
        const char * p = getenv("SHIM_DRAFT_OPS");
        if (!p || !*p) return NULL;
        g_out = fopen(p, "w");
        if (!g_out) {
            fprintf(stderr, "draft_ops: cannot write %s: %s\n", p, strerror(errno));
            abort();
        }
        fprintf(g_out, "batch,op,seq,n_tokens,p0,p1,delta,seq_dst\n");
    }
    return g_out;
}

static bool is_target_ctx(struct llama_context * ctx) {
    typedef llama_memory_t (*get_memory_t)(const struct llama_context *);
    REAL(get_memory_t, "llama_get_memory");
    pthread_mutex_lock(&g_mu);
    if (!g_tgt) {
        g_tgt = ctx;
        g_tgt_mem = real_(ctx);
    }
    const bool t = ctx == g_tgt;
    pthread_mutex_unlock(&g_mu);
    return t;
}

static bool is_target_mem(llama_memory_t mem) {
    pthread_mutex_lock(&g_mu);
    const bool t = !g_tgt || mem == g_tgt_mem;
    pthread_mutex_unlock(&g_mu);
    return t;
}

static bool same_seqs(const llama_batch * b, int i, int j) {
    const int32_t ni = b->n_seq_id ? b->n_seq_id[i] : 1, nj = b->n_seq_id ? b->n_seq_id[j] : 1;
    if (ni != nj) return false;
    if (!b->seq_id) return true;
    for (int32_t k = 0; k < ni; ++k)
        if (b->seq_id[i][k] != b->seq_id[j][k]) return false;
    return true;
}

static void decode_rows(FILE * f, const llama_batch * b, long label) {
    for (int i = 0; i < b->n_tokens;) {
        int j = i + 1;
        while (j < b->n_tokens && same_seqs(b, i, j) && b->pos && b->pos[j] == b->pos[j - 1] + 1) ++j;
        const int32_t ns = b->seq_id && b->n_seq_id ? b->n_seq_id[i] : 1;
        fprintf(f, "%ld,decode,", label);
        for (int32_t k = 0; k < ns; ++k) fprintf(f, k ? ";%d" : "%d", b->seq_id ? b->seq_id[i][k] : 0);
        if (b->pos) fprintf(f, ",%d,%d,,,\n", j - i, b->pos[i]);
        else fprintf(f, ",%d,,,,\n", j - i);
        i = j;
    }
}

static void pos_field(FILE * f, llama_pos p) { fprintf(f, "%d", p < 0 ? -1 : p); }

static void range_row(const char * op, llama_seq_id seq, llama_pos p0, llama_pos p1, const char * tail) {
    pthread_mutex_lock(&g_mu);
    FILE * f = out();
    if (f) {
        fprintf(f, ",%s,%d,,", op, seq < 0 ? -1 : seq);
        pos_field(f, p0);
        fputc(',', f);
        pos_field(f, p1);
        fprintf(f, ",%s\n", tail);
        fflush(f);
    }
    pthread_mutex_unlock(&g_mu);
}

// bool server_queue::process_new_tasks(bool is_yielding)
bool _ZN12server_queue17process_new_tasksEb(void * self, bool is_yielding) {
    typedef bool (*fn)(void *, bool);
    NEXT(fn, "_ZN12server_queue17process_new_tasksEb");
    pthread_mutex_lock(&g_mu);
    g_main_loop = true;
    pthread_mutex_unlock(&g_mu);
    return next_(self, is_yielding);
}

int32_t llama_decode(struct llama_context * ctx, llama_batch batch) {
    typedef int32_t (*fn)(struct llama_context *, llama_batch);
    if (is_target_ctx(ctx)) {
        NEXT(fn, "llama_decode");
        return next_(ctx, batch);
    }
    REAL(fn, "llama_decode");
    pthread_mutex_lock(&g_mu);
    FILE * f = out();
    if (f) {
        decode_rows(f, &batch, ++g_decodes);
        fflush(f);
    }
    pthread_mutex_unlock(&g_mu);
    return real_(ctx, batch);
}

bool llama_memory_seq_rm(llama_memory_t mem, llama_seq_id seq, llama_pos p0, llama_pos p1) {
    typedef bool (*fn)(llama_memory_t, llama_seq_id, llama_pos, llama_pos);
    if (is_target_mem(mem)) {
        NEXT(fn, "llama_memory_seq_rm");
        return next_(mem, seq, p0, p1);
    }
    REAL(fn, "llama_memory_seq_rm");
    const bool r = real_(mem, seq, p0, p1);
    range_row("rm", seq, p0, p1, ",");
    return r;
}

void llama_memory_seq_cp(llama_memory_t mem, llama_seq_id src, llama_seq_id dst, llama_pos p0, llama_pos p1) {
    typedef void (*fn)(llama_memory_t, llama_seq_id, llama_seq_id, llama_pos, llama_pos);
    if (is_target_mem(mem)) {
        NEXT(fn, "llama_memory_seq_cp");
        next_(mem, src, dst, p0, p1);
        return;
    }
    REAL(fn, "llama_memory_seq_cp");
    real_(mem, src, dst, p0, p1);
    char tail[32];
    snprintf(tail, sizeof tail, ",%d", dst);
    range_row("cp", src, p0, p1, tail);
}

void llama_memory_seq_add(llama_memory_t mem, llama_seq_id seq, llama_pos p0, llama_pos p1, llama_pos delta) {
    typedef void (*fn)(llama_memory_t, llama_seq_id, llama_pos, llama_pos, llama_pos);
    if (is_target_mem(mem)) {
        NEXT(fn, "llama_memory_seq_add");
        next_(mem, seq, p0, p1, delta);
        return;
    }
    REAL(fn, "llama_memory_seq_add");
    real_(mem, seq, p0, p1, delta);
    char tail[32];
    snprintf(tail, sizeof tail, "%d,", delta);
    range_row("add", seq, p0, p1, tail);
}

void llama_memory_clear(llama_memory_t mem, bool data) {
    typedef void (*fn)(llama_memory_t, bool);
    if (is_target_mem(mem)) {
        NEXT(fn, "llama_memory_clear");
        next_(mem, data);
        return;
    }
    REAL(fn, "llama_memory_clear");
    real_(mem, data);
    pthread_mutex_lock(&g_mu);
    FILE * f = out();
    if (f) {
        fprintf(f, ",clear,,,,,,\n");
        fflush(f);
    }
    pthread_mutex_unlock(&g_mu);
}

// The saved positions of a state blob, in cell order (llama_kv_cache::state_write: u32 magic, i32 seq, u32 n_stream,
// per stream u32 cell_count, cell_count x (i32 pos, u32 n_seq_id, n_seq_id x i32), then the K/V data, which is
// skipped). Returns the number of positions, or -1 when the blob is not one such cache section.
static long blob_positions(const uint8_t * p, size_t n, llama_pos * pos, long cap) {
    size_t o = 8;   // magic, seq id
    uint32_t v = 0, n_stream = 0;
    long n_pos = 0;
    if (n < 12 || (memcpy(&v, p, 4), v != 0xaf143cd8u)) return -1;
    memcpy(&n_stream, p + o, 4);
    o += 4;
    for (uint32_t st = 0; st < n_stream; ++st) {
        uint32_t cc = 0;
        if (o + 4 > n) return -1;
        memcpy(&cc, p + o, 4);
        o += 4;
        for (uint32_t i = 0; i < cc; ++i) {
            int32_t ps;
            uint32_t ns;
            if (o + 8 > n || n_pos >= cap) return -1;
            memcpy(&ps, p + o, 4);
            memcpy(&ns, p + o + 4, 4);
            o += 8 + 4 * (size_t) ns;
            pos[n_pos++] = ps;
        }
        if (cc) break;   // the first stream with cells (a slot's sequence lives in one stream); its data follows
    }
    return n_pos;
}

size_t llama_state_seq_set_data_ext(struct llama_context * ctx, const uint8_t * src, size_t size, llama_seq_id dest,
                                    uint32_t flags) {
    typedef size_t (*fn)(struct llama_context *, const uint8_t *, size_t, llama_seq_id, uint32_t);
    if (is_target_ctx(ctx)) {
        NEXT(fn, "llama_state_seq_set_data_ext");
        return next_(ctx, src, size, dest, flags);
    }
    typedef int32_t (*n_swa_t)(const void *);
    typedef const void * (*get_model_t)(const struct llama_context *);
    typedef uint32_t (*n_ubatch_t)(const struct llama_context *);
    REAL(fn, "llama_state_seq_set_data_ext");
    static n_swa_t n_swa;
    static get_model_t get_model;
    static n_ubatch_t n_ubatch;
    if (!n_swa) {
        n_swa = (n_swa_t) real("llama_model_n_swa");
        get_model = (get_model_t) real("llama_get_model");
        n_ubatch = (n_ubatch_t) real("llama_n_ubatch");
    }
    enum { CAP = 1 << 20 };
    static llama_pos pos[CAP];
    pthread_mutex_lock(&g_mu);
    FILE * f = out();
    if (f) {
        // a PARTIAL_ONLY (context checkpoint) restore of an iSWA draft touches its SWA cache only: no op-trace form,
        // as the shared shim; a plain cache ignores the flag and restores the whole sequence
        if ((flags & 1) && n_swa(get_model(ctx)) > 0) {
            pthread_mutex_unlock(&g_mu);
            return real_(ctx, src, size, dest, flags);
        }
        const long n_pos = blob_positions(src, size, pos, CAP);
        if (dest < 0 || n_pos < 0) {
            fprintf(stderr, "draft_ops: a draft-context restore this recorder cannot write (seq %d, flags %u, %ld cells)\n",
                    dest, flags, n_pos);
            abort();
        }
        static long n_restores;
        ++n_restores;
        fprintf(f, ",rm,%d,,-1,-1,,\n", dest);
        const long chunk = n_ubatch(ctx) ? (long) n_ubatch(ctx) : n_pos;
        for (long o = 0, k = 0; o < n_pos; o += chunk, ++k) {
            // decode rows of one chunk: runs of contiguous positions
            const long end = o + chunk < n_pos ? o + chunk : n_pos;
            for (long i = o; i < end;) {
                long j = i + 1;
                while (j < end && pos[j] == pos[j - 1] + 1) ++j;
                fprintf(f, "R%ld.%ld,decode,%d,%ld,%d,,,\n", n_restores, k, dest, j - i, pos[i]);
                i = j;
            }
        }
        fflush(f);
    }
    pthread_mutex_unlock(&g_mu);
    return real_(ctx, src, size, dest, flags);
}
