// Occupancy statistics: the word-level free-run count and the shifted-cell counter of kv_cells
// against straight loops over the cells.
#include "kv/cells.h"
#include "report/occupancy.h"

#include <doctest/doctest.h>
#include <random>

using namespace kvsim;

namespace {
std::pair<uint32_t, uint32_t> naive_free_runs(const kv_cells & c) {
    uint32_t runs = 0, longest = 0, cur = 0;
    for (uint32_t i = 0; i < c.size(); ++i) {
        if (c.is_empty(i)) {
            runs += cur == 0;
            longest = std::max(longest, ++cur);
        } else {
            cur = 0;
        }
    }
    return {runs, longest};
}

uint32_t naive_shifted(const kv_cells & c) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < c.size(); ++i) n += c.get_shift(i) != 0;
    return n;
}
}  // namespace

TEST_CASE("free_runs and n_shifted equal straight loops over random cell states") {
    std::mt19937 rng(7);
    for (uint32_t size : {1u, 63u, 64u, 65u, 128u, 200u, 1000u}) {
        kv_cells c;
        c.resize(size);
        CHECK(c.free_runs() == naive_free_runs(c));
        for (int step = 0; step < 400; ++step) {
            const uint32_t i = rng() % size;
            if (c.is_empty(i)) {
                c.pos_set(i, (llama_pos) (rng() % 50));
                c.seq_add(i, (llama_seq_id) (rng() % 3));
            } else if (rng() % 3 == 0) {
                c.pos_add(i, (llama_pos) (rng() % 7) - 3);
            } else if (rng() % 5 == 0) {
                c.pos_div(i, 2);
            } else {
                c.rm(i);
            }
            if (step % 97 == 0) c.reset_shift();
            REQUIRE(c.free_runs() == naive_free_runs(c));
            REQUIRE(c.n_shifted() == naive_shifted(c));
        }
    }
}

TEST_CASE("a fully used and a fully empty stream") {
    kv_cells c;
    c.resize(130);
    CHECK(c.free_runs() == std::pair<uint32_t, uint32_t>{1, 130});
    for (uint32_t i = 0; i < 130; ++i) {
        c.pos_set(i, (llama_pos) i);
        c.seq_add(i, 0);
    }
    CHECK(c.free_runs() == std::pair<uint32_t, uint32_t>{0, 0});
    c.rm(64);
    c.rm(129);
    CHECK(c.free_runs() == std::pair<uint32_t, uint32_t>{2, 1});
}
