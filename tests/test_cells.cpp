// kv_cells against llama_kv_cells (src/llama-kv-cells.h): every value below follows from that
// header's code, call by call.
#include "cache_test_util.h"
#include "kv/cells.h"
#include "kv/seq_index.h"

#include <random>
#include <set>

#include <doctest/doctest.h>

using namespace kvsim;
using kvsim::test::dump;

namespace {
kv_cells make(uint32_t n) {
    kv_cells c;
    c.resize(n);
    return c;
}

void put(kv_cells & c, uint32_t i, llama_pos p, std::initializer_list<llama_seq_id> seqs) {
    c.pos_set(i, p);
    for (llama_seq_id s : seqs) {
        c.seq_add(i, s);
    }
}
}  // namespace

TEST_CASE("cells: pos_set / seq_add / seq_rm keep used, used_max_p1 and seq_pos_min/max exact") {
    kv_cells c = make(10);
    CHECK(c.get_used() == 0);
    CHECK(c.used_max_p1() == 0);
    CHECK(c.seq_pos_min(0) == -1);
    CHECK(c.seq_pos_max(0) == -1);

    put(c, 2, 7, {0});
    put(c, 5, 3, {0, 1});
    put(c, 8, 9, {1});
    CHECK(c.get_used() == 3);
    CHECK(c.used_max_p1() == 9);
    CHECK(c.seq_pos_min(0) == 3);
    CHECK(c.seq_pos_max(0) == 7);
    CHECK(c.seq_pos_min(1) == 3);
    CHECK(c.seq_pos_max(1) == 9);
    CHECK(c.seq_count(5) == 2);
    CHECK(dump(c) == "2:7{0} 5:3{0,1} 8:9{1}");

    // removing one of two sequences keeps the cell
    CHECK_FALSE(c.seq_rm(5, 0));
    CHECK(c.get_used() == 3);
    CHECK(c.seq_pos_min(0) == 7);
    CHECK(c.seq_get(5) == 1);
    // removing the last sequence frees it
    CHECK(c.seq_rm(8, 1));
    CHECK(c.is_empty(8));
    CHECK(c.get_used() == 2);
    CHECK(c.used_max_p1() == 6);
    CHECK(c.seq_pos_max(1) == 3);

    c.rm(5);   // regardless of its sequences
    CHECK(c.get_used() == 1);
    CHECK(c.used_max_p1() == 3);
    CHECK(c.seq_pos_min(1) == -1);
    c.rm(2);
    CHECK(c.get_used() == 0);
    CHECK(c.used_max_p1() == 0);
}

TEST_CASE("cells: duplicate positions of one sequence are counted, not merged") {
    // upstream keys seq_pos by (pos, cell): the same position in two cells counts twice
    kv_cells c = make(4);
    put(c, 0, 5, {0});
    put(c, 1, 5, {0});
    put(c, 2, 6, {0});
    CHECK(c.seq_pos_max(0) == 6);
    c.rm(2);
    CHECK(c.seq_pos_max(0) == 5);
    CHECK(c.seq_rm(0, 0));
    CHECK(c.seq_pos_min(0) == 5);   // cell 1 still holds pos 5
    CHECK(c.seq_pos_max(0) == 5);
    CHECK(c.seq_rm(1, 0));
    CHECK(c.seq_pos_min(0) == -1);
    CHECK(c.seq_pos_max(0) == -1);
}

TEST_CASE("cells: seq_keep keeps, frees foreign cells, ignores empty ones") {
    kv_cells c = make(4);
    put(c, 0, 0, {0, 1});
    put(c, 1, 1, {0});
    put(c, 2, 2, {1});
    CHECK_FALSE(c.seq_keep(0, 1));
    CHECK(c.seq_get(0) == 1);
    CHECK(c.seq_keep(1, 1));
    CHECK(c.is_empty(1));
    CHECK_FALSE(c.seq_keep(2, 1));
    CHECK_FALSE(c.seq_keep(3, 1));   // empty
    CHECK(c.get_used() == 2);
    CHECK(c.seq_pos_min(0) == -1);
    CHECK(c.seq_pos_min(1) == 0);
    CHECK(c.seq_pos_max(1) == 2);
}

TEST_CASE("cells: pos_add accumulates the shift, frees below 0, sets has_shift") {
    kv_cells c = make(3);
    put(c, 0, 10, {0});
    put(c, 1, 2, {0});
    CHECK_FALSE(c.get_has_shift());
    CHECK_FALSE(c.pos_add(0, -3));
    CHECK(c.pos_get(0) == 7);
    CHECK(c.get_shift(0) == -3);
    CHECK_FALSE(c.pos_add(0, 5));
    CHECK(c.pos_get(0) == 12);
    CHECK(c.get_shift(0) == 2);
    CHECK(c.get_has_shift());
    CHECK(c.seq_pos_max(0) == 12);

    // pos 2 - 2 = 0 stays (not below 0)
    CHECK_FALSE(c.pos_add(1, -2));
    CHECK(c.pos_get(1) == 0);
    // 0 - 1 < 0: freed, shift dropped
    CHECK(c.pos_add(1, -1));
    CHECK(c.is_empty(1));
    CHECK(c.get_shift(1) == 0);
    CHECK(c.get_used() == 1);
    CHECK(c.seq_pos_min(0) == 12);
    CHECK(dump(c) == "0:12{0}~2");
}

TEST_CASE("cells: pos_div uses upstream's sign (shift += old - new), composes with pos_add") {
    kv_cells c = make(2);
    put(c, 0, 10, {0});
    put(c, 1, 7, {1});
    c.pos_div(0, 3);
    CHECK(c.pos_get(0) == 3);
    CHECK(c.get_shift(0) == 7);   // 10 - 3, the opposite sign of the position change
    CHECK(c.get_has_shift());
    CHECK_FALSE(c.pos_add(0, -1));
    CHECK(c.pos_get(0) == 2);
    CHECK(c.get_shift(0) == 6);
    c.pos_div(1, 2);
    CHECK(c.pos_get(1) == 3);
    CHECK(c.get_shift(1) == 4);
    CHECK(c.seq_pos_max(1) == 3);

    c.reset_shift();
    CHECK_FALSE(c.get_has_shift());
    CHECK(c.get_shift(0) == 0);
    CHECK(c.get_shift(1) == 0);
    CHECK(dump(c) == "0:2{0} 1:3{1}");   // positions kept
}

TEST_CASE("cells: used_max_p1 follows the last used cell after frees and refills") {
    kv_cells c = make(200);
    put(c, 150, 0, {0});
    put(c, 3, 1, {0});
    CHECK(c.used_max_p1() == 151);
    c.rm(150);
    CHECK(c.used_max_p1() == 4);
    put(c, 199, 2, {0});
    CHECK(c.used_max_p1() == 200);
    c.rm(3);
    c.rm(199);
    CHECK(c.used_max_p1() == 0);
}

TEST_CASE("cells: next_empty crosses 64-cell words and stops at size") {
    kv_cells c = make(130);
    for (uint32_t i = 0; i < 129; ++i) {
        put(c, i, (llama_pos) i, {0});
    }
    CHECK(c.next_empty(0) == 129);
    CHECK(c.next_empty(129) == 129);
    CHECK(c.next_empty(130) == 130);
    c.rm(64);
    CHECK(c.next_empty(0) == 64);
    CHECK(c.next_empty(65) == 129);
    put(c, 129, 500, {0});
    CHECK(c.next_empty(65) == 130);
}

TEST_CASE("cells: snapshot cp/set restores pos, seqs, used and seq positions") {
    kv_cells c = make(6);
    put(c, 1, 4, {0});
    put(c, 2, 9, {1});
    const auto snap = c.cp({1, 2, 3});
    c.rm(1);
    c.seq_add(2, 0);
    put(c, 3, 20, {2});
    CHECK(c.get_used() == 2);
    CHECK(c.seq_pos_max(2) == 20);
    c.set(snap);
    CHECK(dump(c) == "1:4{0} 2:9{1}");
    CHECK(c.get_used() == 2);
    CHECK(c.used_max_p1() == 3);
    CHECK(c.seq_pos_max(0) == 4);
    CHECK(c.seq_pos_max(2) == -1);
    CHECK(c.seq_pos_min(1) == 9);
}

TEST_CASE("cells: reset empties everything") {
    kv_cells c = make(5);
    put(c, 4, 1, {3});
    c.pos_add(4, 2);
    c.reset();
    CHECK(c.get_used() == 0);
    CHECK(c.used_max_p1() == 0);
    CHECK_FALSE(c.get_has_shift());
    CHECK(c.seq_pos_max(3) == -1);
    CHECK(c.next_empty(0) == 0);
}

// seq_index against std::set, the structure it replaces: random inserts and erases biased to
// the ends (its O(1) paths) and to the middle (its queued path), reads interleaved at random so
// queued edits are folded at every possible moment.
TEST_CASE("seq_index: random edits equal std::set after every read") {
    std::mt19937 rng(7);
    for (int round = 0; round < 40; ++round) {
        seq_index idx;
        std::set<seq_index::key> ref;
        for (int op = 0; op < 2000; ++op) {
            const int kind = (int) (rng() % 10);
            if (kind < 4 || ref.empty()) {
                // insert: past the end, before the front, or anywhere
                const llama_pos base = ref.empty() ? 100 : (kind == 0 ? ref.rbegin()->first + 1 : kind == 1 ? ref.begin()->first - 1 : ref.begin()->first + (llama_pos) (rng() % 64));
                const seq_index::key k{base, (uint32_t) (rng() % 8)};
                if (ref.insert(k).second) idx.insert(k);
            } else if (kind < 8) {
                // erase: the last, the first, or a random present key
                auto it = kind == 4 ? std::prev(ref.end()) : kind == 5 ? ref.begin() : std::next(ref.begin(), (long) (rng() % ref.size()));
                idx.erase(*it);
                ref.erase(it);
            } else {
                const llama_pos p0 = ref.empty() ? 0 : ref.begin()->first + (llama_pos) (rng() % 32);
                const llama_pos p1 = p0 + (llama_pos) (rng() % 48);
                std::vector<uint32_t> got, want;
                idx.cells_in(p0, p1, got);
                for (auto it = ref.lower_bound({p0, 0}); it != ref.end() && it->first < p1; ++it) want.push_back(it->second);
                REQUIRE(got == want);
                REQUIRE(idx.pos_min() == (ref.empty() ? -1 : ref.begin()->first));
                REQUIRE(idx.pos_max() == (ref.empty() ? -1 : ref.rbegin()->first));
                REQUIRE(idx.size() == ref.size());
            }
        }
        CHECK(idx.size() == ref.size());
    }
}
