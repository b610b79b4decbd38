// Randomized check of the cache behind context::decode and the sequence ops, against an
// independent model: per stream, the multiset of (pos, seq set) entries the cells must hold,
// with no cell indices, heads or allocator. Invariants of llama_kv_cells are checked after every op.
#include "kv/context.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace kvsim;

namespace {

using entry = std::pair<llama_pos, std::set<llama_seq_id>>;
using stream_model = std::multiset<entry>;

// What the cells of each stream hold, following llama.cpp's seq op semantics (range [p0, p1),
// negative bounds open, positions below 0 dropped by add, cross-stream cp replaces the stream).
struct cache_model {
    std::vector<stream_model> streams;
    bool unified = true;

    stream_model & of(llama_seq_id s) { return streams[unified ? 0 : s]; }

    static void norm(llama_pos & p0, llama_pos & p1) {
        if (p0 < 0) p0 = 0;
        if (p1 < 0) p1 = std::numeric_limits<llama_pos>::max();
    }
    template <class F>
    static void rewrite(stream_model & m, F f) {   // f(entry&) -> keep?
        stream_model out;
        for (entry e : m) {
            if (f(e)) out.insert(std::move(e));
        }
        m = std::move(out);
    }
    void rm(llama_seq_id s, llama_pos p0, llama_pos p1) {
        norm(p0, p1);
        for (size_t st = 0; st < streams.size(); ++st) {
            if (s >= 0 && &streams[st] != &of(s)) continue;
            rewrite(streams[st], [&](entry & e) {
                if (e.first < p0 || e.first >= p1) return true;
                if (s < 0) return false;
                e.second.erase(s);
                return !e.second.empty();
            });
        }
    }
    void cp(llama_seq_id a, llama_seq_id b, llama_pos p0, llama_pos p1) {
        if (&of(a) != &of(b)) {
            stream_model out;
            for (const entry & e : of(a)) {
                if (e.second.count(a)) out.insert({e.first, {b}});
            }
            of(b) = std::move(out);
            return;
        }
        norm(p0, p1);
        rewrite(of(a), [&](entry & e) {
            if (e.first >= p0 && e.first < p1 && e.second.count(a)) e.second.insert(b);
            return true;
        });
    }
    void keep(llama_seq_id s) {
        rewrite(of(s), [&](entry & e) {
            if (!e.second.count(s)) return false;
            e.second = {s};
            return true;
        });
    }
    void add(llama_seq_id s, llama_pos p0, llama_pos p1, llama_pos d) {
        norm(p0, p1);
        rewrite(of(s), [&](entry & e) {
            if (e.first >= p0 && e.first < p1 && e.second.count(s)) e.first += d;
            return e.first >= 0;
        });
    }
    void div(llama_seq_id s, llama_pos p0, llama_pos p1, int d) {
        norm(p0, p1);
        rewrite(of(s), [&](entry & e) {
            if (e.first >= p0 && e.first < p1 && e.second.count(s)) e.first /= d;
            return true;
        });
    }
    void clear() {
        for (auto & m : streams) m.clear();
    }
};

stream_model cells_model(const kv_cells & c) {
    stream_model m;
    for (uint32_t i = 0; i < c.size(); ++i) {
        if (c.is_empty(i)) continue;
        std::set<llama_seq_id> seqs;
        for (int s = 0; s < LLAMA_MAX_SEQ; ++s) {
            if (c.seq_has(i, s)) seqs.insert(s);
        }
        m.insert({c.pos_get(i), seqs});
    }
    return m;
}

// Invariants of one stream that hold for any cache, SWA or not.
void check_cells(const kv_cache & kv, uint32_t st, uint32_t n_seq) {
    const kv_cells & c = kv.cells(st);
    uint32_t used = 0, last = 0;
    std::map<llama_seq_id, std::pair<llama_pos, llama_pos>> mm;
    for (uint32_t i = 0; i < c.size(); ++i) {
        if (c.is_empty(i)) {
            REQUIRE(c.seq_get_all(i).none());
            continue;
        }
        ++used;
        last = i + 1;
        REQUIRE(c.pos_get(i) >= 0);
        REQUIRE(c.seq_count(i) >= 1);
        for (llama_seq_id s = 0; s < (llama_seq_id) n_seq; ++s) {
            if (!c.seq_has(i, s)) continue;
            if (kv.get_n_stream() > 1) REQUIRE(kv.seq_to_stream(s) == st);
            auto it = mm.find(s);
            if (it == mm.end()) {
                mm[s] = {c.pos_get(i), c.pos_get(i)};
            } else {
                it->second.first = std::min(it->second.first, c.pos_get(i));
                it->second.second = std::max(it->second.second, c.pos_get(i));
            }
        }
        REQUIRE(c.seq_count(i) == (int) c.seq_get_all(i).count());
    }
    REQUIRE(c.get_used() == used);
    REQUIRE(c.used_max_p1() == last);
    REQUIRE(kv.head(st) <= c.size());
    for (llama_seq_id s = 0; s < (llama_seq_id) n_seq; ++s) {
        const auto it = mm.find(s);
        REQUIRE(c.seq_pos_min(s) == (it == mm.end() ? -1 : it->second.first));
        REQUIRE(c.seq_pos_max(s) == (it == mm.end() ? -1 : it->second.second));
    }
    slot_info si;
    si.strm = {st};
    si.idxs = {{0}};
    const uint32_t n_kv = kv.get_n_kv(si);
    REQUIRE(n_kv >= last);
    REQUIRE(n_kv == std::min(c.size(), std::max(256u, (last + 255) / 256 * 256)));
}

struct config {
    const char * name;
    const char * model;
    uint32_t n_ctx, n_seq, n_batch, n_ubatch;
    bool unified;
};

// Free cells a non-SWA stream needs for the batch: rc 1 iff some stream lacks them.
bool fits(const kv_cache & kv, const llama_batch_in & b) {
    std::vector<uint32_t> need(kv.get_n_stream(), 0);
    for (uint32_t i = 0; i < b.n_tokens(); ++i) ++need[kv.seq_to_stream(b.seq_id[i][0])];
    for (uint32_t st = 0; st < kv.get_n_stream(); ++st) {
        if (need[st] > kv.get_size() - kv.cells(st).get_used()) return false;
    }
    return true;
}

struct stats {
    uint64_t ok = 0, no_slot = 0, invalid = 0, ops = 0, swa_reused = 0;
};

void run_trace(const config & cfg, uint32_t seed, int n_ops, stats & out) {
    context_params p;
    p.n_ctx = cfg.n_ctx;
    p.n_seq_max = cfg.n_seq;
    p.n_batch = cfg.n_batch;
    p.n_ubatch = cfg.n_ubatch;
    p.kv_unified = cfg.unified;
    context ctx(model_preset(cfg.model), p);
    kv_memory & mem = ctx.memory();
    const auto caches = mem.caches();
    const kv_cache & base = *caches[0];
    cache_model model;
    model.unified = cfg.unified;
    model.streams.resize(base.get_n_stream());

    std::mt19937 rng(seed);
    auto rnd = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int n_seq = (int) cfg.n_seq;
    auto rpos = [&]() { return rnd(0, 5) == 0 ? -1 : rnd(0, 120); };

    for (int op = 0; op < n_ops; ++op) {
        CAPTURE(seed);
        CAPTURE(op);
        const int kind = rnd(0, 99);
        std::string what;
        if (kind < 55) {
            // decode: a few sequences, each continuing after its last position in memory
            llama_batch_in b;
            const int n_rows = rnd(1, std::min(3, n_seq));
            std::set<int> used;
            bool invalid = false;
            for (int r = 0; r < n_rows; ++r) {
                const int s = rnd(0, n_seq - 1);
                if (!used.insert(s).second) continue;
                const llama_pos next = mem.seq_pos_max(s) + 1;
                llama_pos p0 = next;
                if (next > 0 && rnd(0, 30) == 0) {
                    p0 = next + 1;   // breaks Y = X + 1
                    invalid = true;
                }
                const int n = rnd(0, 3) == 0 ? rnd(1, (int) cfg.n_batch / n_rows) : rnd(1, 6);
                for (int i = 0; i < n; ++i) b.add(p0 + i, {s});
            }
            const bool shift_before = mem.get_has_shift();
            const bool fit = fits(base, b);
            const stream_model before0 = cells_model(base.cells(0));
            const int rc = ctx.decode(b);
            what = "decode";
            if (invalid) {
                REQUIRE(rc == DECODE_INVALID);
                REQUIRE(mem.get_has_shift() == shift_before);
                REQUIRE(cells_model(base.cells(0)) == before0);
                ++out.invalid;
            } else if (rc == DECODE_OK) {
                REQUIRE(fit);
                for (uint32_t i = 0; i < b.n_tokens(); ++i) {
                    model.of(b.seq_id[i][0]).insert({b.pos[i], {b.seq_id[i][0]}});
                }
                ++out.ok;
            } else {
                REQUIRE(rc == DECODE_NO_SLOT);
                // a non-SWA cache finds a slot whenever there are enough free cells
                if (caches.size() == 1) REQUIRE_FALSE(fit);
                ++out.no_slot;
            }
            if (rc != DECODE_INVALID) REQUIRE_FALSE(mem.get_has_shift());
        } else {
            const int s = rnd(0, n_seq - 1);
            ++out.ops;
            if (kind < 70) {
                const int sr = rnd(0, 9) == 0 ? -1 : s;
                const llama_pos p0 = rpos(), p1 = rpos();
                mem.seq_rm(sr, p0, p1);
                model.rm(sr, p0, p1);
                what = "rm";
            } else if (kind < 78) {
                const int d = rnd(0, n_seq - 1);
                const bool cross = !cfg.unified && d != s;
                const llama_pos p0 = cross ? -1 : rpos(), p1 = cross ? -1 : rpos();
                mem.seq_cp(s, d, p0, p1);
                model.cp(s, d, p0, p1);
                what = "cp";
            } else if (kind < 80) {
                mem.seq_keep(s);
                model.keep(s);
                what = "keep";
            } else if (kind < 92) {
                const llama_pos p0 = rpos(), p1 = rpos();
                const llama_pos d = rnd(-40, 20);
                mem.seq_add(s, p0, p1, d);
                model.add(s, p0, p1, d);
                what = "add";
            } else if (kind < 97) {
                const llama_pos p0 = rpos(), p1 = rpos();
                const int d = rnd(1, 4);
                mem.seq_div(s, p0, p1, d);
                model.div(s, p0, p1, d);
                what = "div";
            } else {
                mem.clear();
                model.clear();
                what = "clear";
            }
        }
        CAPTURE(what);
        for (const kv_cache * kv : caches) {
            for (uint32_t st = 0; st < kv->get_n_stream(); ++st) {
                check_cells(*kv, st, cfg.n_seq);
            }
        }
        for (uint32_t st = 0; st < base.get_n_stream(); ++st) {
            REQUIRE(cells_model(base.cells(st)) == model.streams[st]);
        }
        if (caches.size() == 2) {
            // llama_memory_seq_pos_max of an iSWA pair reads the SWA cache
            for (llama_seq_id sq = 0; sq < n_seq; ++sq) {
                REQUIRE(mem.seq_pos_max(sq) == caches[1]->cells(0).seq_pos_max(sq));
            }
        }
    }
    for (const kv_cache * kv : caches) out.swa_reused += kv->stats().swa_reused;
}

}  // namespace

TEST_CASE("random traces: decode and seq ops agree with the entry model and keep the cell invariants") {
    const config configs[] = {
        {"unified", "tiny-llama", 256, 4, 64, 16, true},
        {"multi-stream", "tiny-llama", 768, 3, 64, 16, false},
        {"iSWA unified", "tiny-gemma3-swa", 256, 3, 64, 8, true},
    };
    for (const config & cfg : configs) {
        CAPTURE(std::string(cfg.name));
        stats st;
        for (uint32_t seed = 1; seed <= 40; ++seed) {
            run_trace(cfg, seed, 400, st);
        }
        MESSAGE(std::string(cfg.name) << ": " << st.ok << " ok, " << st.no_slot << " no slot, " << st.invalid << " invalid decodes, "
                         << st.ops << " seq ops, " << st.swa_reused << " SWA cells reused");
        // the generator must reach every outcome, or the checks above test too little
        CHECK(st.ok > 1000);
        CHECK(st.no_slot > 20);
        CHECK(st.invalid > 20);
        if (std::string(cfg.model) == "tiny-gemma3-swa") CHECK(st.swa_reused > 100);
    }
}
