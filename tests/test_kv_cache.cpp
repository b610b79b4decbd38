// kv_cache against llama_kv_cache (src/llama-kv-cache.cpp: find_slot, apply_ubatch, prepare,
// seq_*, get_n_kv). Values follow from upstream's code; the ones checked against the real
// llama.cpp say so with the kvoracle command (/work/shared/tools/kvoracle).
#include "cache_test_util.h"
#include "kv/kv_cache.h"

#include <doctest/doctest.h>

#include <stdexcept>

using namespace kvsim;
using kvsim::test::dump;
using kvsim::test::iota_idxs;
using kvsim::test::place;
using kvsim::test::ub_equal;
using kvsim::test::ub_seq;

namespace {
kv_cache make(uint32_t size, uint32_t n_seq_max = 1, bool unified = true, swa_type swa = swa_type::none,
              uint32_t n_swa = 0) {
    kv_cache_params p;
    p.kv_size = size;
    p.n_seq_max = n_seq_max;
    p.unified = unified;
    p.swa = swa;
    p.n_swa = n_swa;
    return kv_cache(p);
}

// A slot at explicit cells of stream 0 (apply_ubatch takes any slot; llama.cpp's find_slot
// would produce it after some history, this just skips the history).
slot_info at(std::vector<uint32_t> idxs, uint32_t stream = 0) {
    slot_info si;
    si.s0 = si.s1 = stream;
    si.strm = {stream};
    si.idxs = {std::move(idxs)};
    return si;
}

std::vector<uint32_t> slot_of(const kv_cache & kv, const ubatch & ub, bool cont = false) {
    const slot_info si = kv.find_slot(ub, cont);
    return si.empty() ? std::vector<uint32_t>{} : si.idxs[0];
}
}  // namespace

TEST_CASE("kv_cache: constructor refuses bad parameters") {
    CHECK_THROWS_AS(make(0), std::invalid_argument);
    CHECK_THROWS_AS(make(16, 0), std::invalid_argument);
    CHECK_THROWS_AS(make(16, 257), std::invalid_argument);
    CHECK_THROWS_AS(make(16, 1, true, swa_type::standard, 0), std::invalid_argument);
    CHECK(make(16, 4, false).get_n_stream() == 4);
    CHECK(make(16, 4, true).get_n_stream() == 1);
}

TEST_CASE("find_slot: starts at head, takes holes one cell at a time") {
    kv_cache kv = make(16);
    place(kv, ub_seq(0, 0, 4));
    CHECK(kv.head(0) == 4);
    kv.seq_rm(0, 1, 2);
    CHECK(kv.head(0) == 1);
    CHECK(slot_of(kv, ub_seq(0, 4, 3)) == std::vector<uint32_t>{1, 4, 5});
}

TEST_CASE("find_slot: head reset heuristic compares the head index with the used count") {
    // cells 0-19 used (20), one more token applied at cell 40: head 41, used 21, 20 free cells before head
    kv_cache kv = make(64);
    place(kv, ub_seq(0, 0, 20));
    kv.apply_ubatch(at({40}), ub_seq(0, 20, 1));
    REQUIRE(kv.head(0) == 41);
    REQUIRE(kv.cells(0).get_used() == 21);
    // 41 > 21 + 2*10 is false: the search starts at head although 20 cells are free before it
    CHECK(slot_of(kv, ub_seq(0, 21, 10)) == iota_idxs(41, 10));
    // 41 > 21 + 2*9: restart from 0
    CHECK(slot_of(kv, ub_seq(0, 21, 9)) == iota_idxs(20, 9));
}

TEST_CASE("find_slot: ring order wraps past the end, result unsorted") {
    kv_cache kv = make(16);
    kv.apply_ubatch(at(iota_idxs(2, 8)), ub_seq(0, 0, 8));
    REQUIRE(kv.head(0) == 10);
    CHECK(slot_of(kv, ub_seq(0, 8, 8)) == std::vector<uint32_t>{10, 11, 12, 13, 14, 15, 0, 1});
    // head == size (after filling the last cell) wraps to 0 too
    kv_cache kv2 = make(8);
    place(kv2, ub_seq(0, 0, 8));
    REQUIRE(kv2.head(0) == 8);
    kv2.seq_rm(0, 7, 8);
    CHECK(kv2.head(0) == 7);
}

TEST_CASE("find_slot: fails after a full scan and when n_tokens > size") {
    kv_cache kv = make(8);
    place(kv, ub_seq(0, 0, 7));
    CHECK(slot_of(kv, ub_seq(0, 7, 2)).empty());
    CHECK(slot_of(kv, ub_seq(0, 7, 1)) == std::vector<uint32_t>{7});
    kv_cache empty = make(8);
    CHECK(empty.find_slot(ub_seq(0, 0, 9), false).empty());
    CHECK(empty.find_slot(ub_seq(0, 0, 9), true).empty());
    CHECK(slot_of(empty, ub_seq(0, 0, 8)) == iota_idxs(0, 8));
}

TEST_CASE("find_slot: contiguous mode is first-fit from head, restarting after a used cell") {
    kv_cache kv = make(16);
    kv.apply_ubatch(at({7}), ub_seq(0, 0, 1));
    kv.apply_ubatch(at({3}), ub_seq(1, 0, 1));
    REQUIRE(kv.head(0) == 4);
    CHECK(slot_of(kv, ub_seq(0, 1, 3), true) == std::vector<uint32_t>{4, 5, 6});
    CHECK(slot_of(kv, ub_seq(0, 1, 4), true) == std::vector<uint32_t>{8, 9, 10, 11});
    CHECK(slot_of(kv, ub_seq(0, 1, 4), false) == std::vector<uint32_t>{4, 5, 6, 8});

    kv_cache small = make(8);
    small.apply_ubatch(at({7}), ub_seq(0, 0, 1));
    small.apply_ubatch(at({3}), ub_seq(1, 0, 1));
    // runs 0-2 and 4-6 hold 3 cells each: no contiguous 4, but 4 scattered ones
    CHECK(small.find_slot(ub_seq(0, 1, 4), true).empty());
    CHECK(slot_of(small, ub_seq(0, 1, 4), false) == std::vector<uint32_t>{4, 5, 6, 0});
}

TEST_CASE("find_slot SWA: masked single-sequence cells are usable, judged by the owner's seq_pos_max + 1") {
    kv_cache kv = make(8, 2, true, swa_type::standard, 4);
    place(kv, ub_seq(0, 0, 4));   // cells 0-3, seq 0 max 3
    place(kv, ub_seq(1, 0, 4));   // cells 4-7, seq 1 max 3
    // the ubatch's own position (100) plays no role: a cell is masked iff owner_max + 1 - pos >= 4
    CHECK(slot_of(kv, ub_seq(1, 100, 2)) == std::vector<uint32_t>{0, 4});
    CHECK(slot_of(kv, ub_seq(1, 100, 3)).empty());

    // a cell shared by two sequences is never reused even if masked for both
    kv.seq_cp(0, 1, 0, 1);
    CHECK(slot_of(kv, ub_seq(1, 100, 1)) == std::vector<uint32_t>{4});
}

TEST_CASE("find_slot SWA: no preference for empty cells over masked ones") {
    kv_cache kv = make(8, 1, true, swa_type::standard, 4);
    place(kv, ub_seq(0, 0, 6));   // cells 6 and 7 stay empty
    kv.seq_add(0, 100, 200, 5);   // nothing in range: head goes to 0 (upstream quirk)
    REQUIRE(kv.head(0) == 0);
    // cell 0 (pos 0, 6 - 0 >= 4) comes first in ring order
    CHECK(slot_of(kv, ub_seq(0, 6, 1)) == std::vector<uint32_t>{0});
    CHECK(slot_of(kv, ub_seq(0, 6, 4)) == std::vector<uint32_t>{0, 1, 2, 6});
}

TEST_CASE("find_slot SWA: each swa_type at the window border") {
    // one sequence at positions 0-7 fills the 8 cells; the window is judged at p1 = 8
    auto full = [](swa_type t, uint32_t n_swa) {
        kv_cache kv = make(8, 1, true, t, n_swa);
        place(kv, ub_seq(0, 0, 8));
        return kv;
    };
    SUBCASE("standard: 8 - p >= 4 -> p <= 4") {
        kv_cache kv = full(swa_type::standard, 4);
        CHECK(slot_of(kv, ub_seq(0, 8, 5)) == iota_idxs(0, 5));
        CHECK(slot_of(kv, ub_seq(0, 8, 6)).empty());
    }
    SUBCASE("chunked: p < (8 / 3) * 3 = 6") {
        kv_cache kv = full(swa_type::chunked, 3);
        CHECK(slot_of(kv, ub_seq(0, 8, 6)) == iota_idxs(0, 6));
        CHECK(slot_of(kv, ub_seq(0, 8, 7)).empty());
    }
    SUBCASE("symmetric: |8 - p| > 4 / 2 -> p <= 5") {
        kv_cache kv = full(swa_type::symmetric, 4);
        CHECK(slot_of(kv, ub_seq(0, 8, 6)) == iota_idxs(0, 6));
        CHECK(slot_of(kv, ub_seq(0, 8, 7)).empty());
    }
    SUBCASE("none: nothing is reusable") {
        kv_cache kv = full(swa_type::none, 0);
        CHECK(slot_of(kv, ub_seq(0, 8, 1)).empty());
    }
    CHECK(is_masked_swa(4, swa_type::standard, 4, 8));
    CHECK_FALSE(is_masked_swa(4, swa_type::standard, 5, 8));
    CHECK(is_masked_swa(4, swa_type::chunked, 7, 8));
    CHECK_FALSE(is_masked_swa(4, swa_type::chunked, 8, 8));
    CHECK(is_masked_swa(4, swa_type::chunked, 3, 7));
    CHECK_FALSE(is_masked_swa(4, swa_type::chunked, 4, 7));
    CHECK(is_masked_swa(4, swa_type::symmetric, 5, 8));
    CHECK_FALSE(is_masked_swa(4, swa_type::symmetric, 6, 8));
    CHECK_FALSE(is_masked_swa(4, swa_type::symmetric, 10, 8));
    CHECK(is_masked_swa(4, swa_type::symmetric, 11, 8));
}

TEST_CASE("find_slot multi-stream: one index list per sequence, each from its stream's head") {
    kv_cache kv = make(16, 2, false);
    place(kv, ub_seq(0, 0, 3));
    const slot_info si = place(kv, ub_equal({{0, 3}, {1, 0}}, 2));
    CHECK(si.strm == std::vector<uint32_t>{0, 1});
    CHECK(si.s0 == 0);
    CHECK(si.s1 == 1);
    CHECK(si.idxs[0] == std::vector<uint32_t>{3, 4});
    CHECK(si.idxs[1] == std::vector<uint32_t>{0, 1});
    CHECK(kv.head(0) == 5);
    CHECK(kv.head(1) == 2);
    CHECK(dump(kv.cells(1)) == "0:0{1} 1:1{1}");
}

TEST_CASE("apply_ubatch: head = last index + 1, even for a wrapped slot") {
    kv_cache kv = make(16);
    kv.apply_ubatch(at({14, 15, 0, 1}), ub_seq(0, 0, 4));
    CHECK(kv.head(0) == 2);
    CHECK(dump(kv.cells(0)) == "0:2{0} 1:3{0} 14:0{0} 15:1{0}");
    CHECK(kv.stats().swa_reused == 0);
}

TEST_CASE("apply_ubatch SWA: overwriting purges the owner's older positions") {
    SUBCASE("a foreign sequence overwrites a masked cell above the owner's minimum") {
        kv_cache kv = make(8, 2, true, swa_type::standard, 2);
        place(kv, ub_seq(0, 0, 4));
        place(kv, ub_seq(1, 0, 4));
        kv.apply_ubatch(at({2}), ub_seq(1, 4, 1));   // seq 0's pos 2 is masked (4 - 2 >= 2)
        // seq 0 keeps no gap: positions below 3 go ([0, 2] purged)
        CHECK(dump(kv.cells(0)) == "2:4{1} 3:3{0} 4:0{1} 5:1{1} 6:2{1} 7:3{1}");
        CHECK(kv.seq_pos_min(0) == 3);
        CHECK(kv.head(0) == 3);
        CHECK(kv.stats().swa_reused == 1);
        CHECK(kv.stats().swa_purged == 1);
    }
    SUBCASE("overwriting the owner's minimum purges nothing") {
        kv_cache kv = make(8, 1, true, swa_type::standard, 4);
        place(kv, ub_seq(0, 0, 8));
        const slot_info si = place(kv, ub_seq(0, 8, 2));
        CHECK(si.idxs[0] == std::vector<uint32_t>{0, 1});
        CHECK(dump(kv.cells(0)) == "0:8{0} 1:9{0} 2:2{0} 3:3{0} 4:4{0} 5:5{0} 6:6{0} 7:7{0}");
        CHECK(kv.stats().swa_reused == 2);
        CHECK(kv.stats().swa_purged == 0);
        CHECK(kv.head(0) == 2);
    }
}

TEST_CASE("prepare: dry run, cells and heads rolled back, slots returned") {
    kv_cache kv = make(16);
    place(kv, ub_seq(0, 0, 4));
    const std::string before = dump(kv.cells(0));
    auto sinfos = kv.prepare({ub_seq(0, 4, 4), ub_seq(0, 8, 4)});
    REQUIRE(sinfos.size() == 2);
    CHECK(sinfos[0].idxs[0] == iota_idxs(4, 4));
    CHECK(sinfos[1].idxs[0] == iota_idxs(8, 4));
    CHECK(dump(kv.cells(0)) == before);
    CHECK(kv.head(0) == 4);
    CHECK(kv.cells(0).get_used() == 4);

    // the second ubatch cannot fit: empty result, state unchanged
    CHECK(kv.prepare({ub_seq(0, 4, 8), ub_seq(0, 12, 8)}).empty());
    CHECK(dump(kv.cells(0)) == before);
    CHECK(kv.head(0) == 4);
    CHECK(kv.cells(0).get_used() == 4);
    CHECK(kv.seq_pos_max(0) == 3);
}

TEST_CASE("prepare SWA: the purge of a rolled-back ubatch stays (upstream behaviour)") {
    kv_cache kv = make(4, 1, true, swa_type::standard, 2);
    place(kv, ub_seq(0, 0, 4));
    kv.seq_add(0, 0, 2, 100);   // cells 0:100 1:101 2:2 3:3, head 0
    kv.update();                // llama_decode applies the shift before prepare
    REQUIRE(kv.head(0) == 0);
    // ubatch 1 (pos 102) takes cell 0 (pos 100, masked: 102 - 100 >= 2) and purges seq 0 below 101:
    // cells 2 and 3. ubatch 2 needs 4 cells, only 2, 3 and 1 are usable then: prepare fails.
    CHECK(kv.prepare({ub_seq(0, 102, 1), ub_seq(0, 103, 4)}).empty());
    CHECK(dump(kv.cells(0)) == "0:100{0} 1:101{0}");
    CHECK(kv.cells(0).get_used() == 2);
    CHECK(kv.seq_pos_min(0) == 100);
}

TEST_CASE("prepare multi-stream: head of strm[s] is restored from the saved head of stream s") {
    // Same quirk seen in the real llama.cpp: after a failed decode of seq 1 the next find_slot of
    // stream 1 logs head = 12 (stream 0's head). Oracle: printf 'decode 0 12\ndecode 1 10\nrm 1 5 -1\n
    // decode 1 252\ndecode 1 1\n' | LLAMA_KV_CACHE_DEBUG=1 kvoracle -m tiny-llama.gguf --ctx 512 --seqs 2
    // --unified 0 --batch 256 --ubatch 8  (last find_slot: head [12], idxs [[5]])
    kv_cache kv = make(16, 2, false);
    place(kv, ub_seq(0, 0, 12));
    place(kv, ub_seq(1, 0, 10));
    kv.seq_rm(1, 5, -1);
    REQUIRE(kv.head(0) == 12);
    REQUIRE(kv.head(1) == 5);
    auto sinfos = kv.prepare({ub_seq(1, 5, 1)});
    REQUIRE(sinfos.size() == 1);
    CHECK(sinfos[0].strm == std::vector<uint32_t>{1});
    CHECK(sinfos[0].idxs[0] == std::vector<uint32_t>{5});
    CHECK(kv.head(0) == 12);
    CHECK(kv.head(1) == 12);   // not 5
    // visible in placement: 12 > 5 + 2*4 is false, so the search starts at 12, not 5
    CHECK(kv.find_slot(ub_seq(1, 5, 4), false).idxs[0] == iota_idxs(12, 4));
}

TEST_CASE("seq_rm: half-open ranges, negative bounds open, head lowered only") {
    kv_cache kv = make(16);
    place(kv, ub_seq(0, 0, 10));
    CHECK(kv.seq_rm(0, 3, 5));
    CHECK(kv.head(0) == 3);
    CHECK(dump(kv.cells(0)) == "0:0{0} 1:1{0} 2:2{0} 5:5{0} 6:6{0} 7:7{0} 8:8{0} 9:9{0}");
    kv.seq_rm(0, 8, -1);
    CHECK(kv.head(0) == 3);   // 8 is not lower
    kv.seq_rm(0, -1, 2);
    CHECK(kv.head(0) == 0);
    CHECK(dump(kv.cells(0)) == "2:2{0} 5:5{0} 6:6{0} 7:7{0}");
    kv.seq_rm(0, 4, 4);   // empty range
    CHECK(kv.cells(0).get_used() == 4);
    CHECK(kv.seq_pos_min(0) == 2);
    CHECK(kv.seq_pos_max(0) == 7);
}

TEST_CASE("seq_rm: shared cells lose one sequence; seq -1 frees every cell of every stream") {
    kv_cache kv = make(16, 2);
    place(kv, ub_seq(0, 0, 4));
    kv.seq_cp(0, 1, 1, 3);
    kv.seq_rm(0, -1, -1);
    CHECK(dump(kv.cells(0)) == "1:1{1} 2:2{1}");
    CHECK(kv.head(0) == 0);

    kv_cache ms = make(16, 2, false);
    place(ms, ub_seq(0, 0, 4));
    place(ms, ub_seq(1, 0, 6));
    ms.seq_rm(-1, 2, -1);
    CHECK(dump(ms.cells(0)) == "0:0{0} 1:1{0}");
    CHECK(dump(ms.cells(1)) == "0:0{1} 1:1{1}");
    CHECK(ms.head(0) == 2);
    CHECK(ms.head(1) == 2);
}

TEST_CASE("seq_keep: frees other sequences' cells, strips shared ones, lowers head") {
    kv_cache kv = make(16, 3);
    place(kv, ub_seq(0, 0, 3));
    place(kv, ub_seq(1, 0, 3));
    kv.seq_cp(1, 2, -1, -1);
    kv.seq_cp(0, 1, 2, 3);
    kv.seq_keep(1);
    CHECK(dump(kv.cells(0)) == "2:2{1} 3:0{1} 4:1{1} 5:2{1}");
    CHECK(kv.head(0) == 0);
    CHECK(kv.seq_pos_max(2) == -1);
}

TEST_CASE("seq_add: shift, free below 0, head = first freed cell or 0") {
    kv_cache kv = make(16);
    place(kv, ub_seq(0, 0, 10));
    kv.seq_add(0, 0, 3, -2);
    CHECK(dump(kv.cells(0)) ==
          "2:0{0}~-2 3:3{0} 4:4{0} 5:5{0} 6:6{0} 7:7{0} 8:8{0} 9:9{0}");
    CHECK(kv.head(0) == 0);
    CHECK(kv.get_has_shift());

    place(kv, ub_seq(0, 10, 2));   // cells 0, 1
    REQUIRE(kv.head(0) == 2);
    kv.seq_add(0, 5, 5, 3);        // p0 == p1: no-op, head kept
    CHECK(kv.head(0) == 2);
    kv.seq_add(0, -1, -1, 0);      // delta 0: no-op
    CHECK(kv.head(0) == 2);
    kv.seq_add(0, 8, -1, 4);       // nothing freed: head to 0
    CHECK(kv.head(0) == 0);
    CHECK(kv.seq_pos_max(0) == 15);
    CHECK(dump(kv.cells(0)) ==
          "0:14{0}~4 1:15{0}~4 2:0{0}~-2 3:3{0} 4:4{0} 5:5{0} 6:6{0} 7:7{0} 8:12{0}~4 9:13{0}~4");

    // head = first freed cell, also when that is above the current head
    place(kv, ub_seq(0, 16, 2));   // cells 10, 11
    kv.seq_rm(0, 0, 1);            // frees cell 2
    REQUIRE(kv.head(0) == 2);
    kv.seq_add(0, 12, 14, -100);   // frees cells 8 and 9
    CHECK(kv.head(0) == 8);
}

TEST_CASE("seq_div: divides positions, accumulates upstream's shift sign, keeps heads") {
    kv_cache kv = make(16);
    place(kv, ub_seq(0, 0, 6));
    kv.seq_rm(0, 5, 6);
    REQUIRE(kv.head(0) == 5);
    kv.seq_div(0, 0, -1, 1);
    CHECK_FALSE(kv.get_has_shift());
    kv.seq_div(0, 2, -1, 2);
    CHECK(dump(kv.cells(0)) == "0:0{0} 1:1{0} 2:1{0}~1 3:1{0}~2 4:2{0}~2");
    CHECK(kv.head(0) == 5);
    CHECK(kv.seq_pos_max(0) == 2);
    CHECK_THROWS_AS(kv.seq_div(0, 0, -1, 0), std::invalid_argument);
}

TEST_CASE("seq_cp same stream: shares cells in range, src == dst is a no-op") {
    kv_cache kv = make(16, 2);
    place(kv, ub_seq(0, 0, 6));
    kv.seq_cp(0, 0, -1, -1);
    kv.seq_cp(0, 1, 2, 5);
    CHECK(dump(kv.cells(0)) == "0:0{0} 1:1{0} 2:2{0,1} 3:3{0,1} 4:4{0,1} 5:5{0}");
    CHECK(kv.cells(0).get_used() == 6);
    CHECK(kv.seq_pos_min(1) == 2);
    CHECK(kv.seq_pos_max(1) == 4);
    CHECK(kv.pending_copies().empty());
}

TEST_CASE("seq_cp twice onto the same cells, then seq_rm of the copy") {
    // kvsim DIFFERS from llama.cpp: upstream's seq_pos is a set of (pos, cell) pairs, so a second
    // seq_add of an already present sequence is idempotent (release build); kvsim counts the
    // position twice and keeps a stale seq_pos_max after the cells are gone.
    // Oracle: printf 'decode 0 4\ncp 0 1 -1 -1\ncp 0 1 -1 -1\nrm 0 -1 -1\nrm 1 2 -1\n' |
    //   kvoracle -m tiny-llama.gguf --ctx 256 --seqs 2   -> after the last op seqs {"1": [0, 1]}
    kv_cache kv = make(256, 2);
    place(kv, ub_seq(0, 0, 4));
    kv.seq_cp(0, 1, -1, -1);
    kv.seq_cp(0, 1, -1, -1);
    kv.seq_rm(0, -1, -1);
    kv.seq_rm(1, 2, -1);
    CHECK(dump(kv.cells(0)) == "0:0{1} 1:1{1}");
    CHECK(kv.seq_pos_min(1) == 0);
    CHECK(kv.seq_pos_max(1) == 1);   // kvsim: 3
}

TEST_CASE("seq_cp across streams: full range only, destination reset, shifts carried, head copied") {
    kv_cache kv = make(16, 2, false);
    place(kv, ub_seq(0, 0, 6));
    kv.seq_add(0, 4, -1, 10);   // cells 4, 5 -> pos 14, 15 with shift 10; head0 -> 0
    REQUIRE(kv.head(0) == 0);
    place(kv, ub_seq(1, 0, 3));
    REQUIRE(kv.head(1) == 3);
    kv.seq_rm(0, 0, 1);

    CHECK_THROWS_AS(kv.seq_cp(0, 1, 2, -1), std::invalid_argument);
    CHECK_THROWS_AS(kv.seq_cp(0, 1, 0, 14), std::invalid_argument);
    CHECK(dump(kv.cells(1)) == "0:0{1} 1:1{1} 2:2{1}");   // unchanged by the refused copies
    CHECK(kv.pending_copies().empty());

    kv.seq_cp(0, 1, 0, 15);   // p1 + 1 == size counts as full
    CHECK(dump(kv.cells(1)) == "1:1{1} 2:2{1} 3:3{1} 4:14{1}~10 5:15{1}~10");
    CHECK(kv.head(1) == 0);
    CHECK(kv.cells(1).get_has_shift());
    REQUIRE(kv.pending_copies().size() == 1);
    CHECK(kv.pending_copies()[0] == std::pair<uint32_t, uint32_t>{0, 1});
    CHECK(kv.seq_pos_max(1) == 15);

    kv.update();
    CHECK(kv.pending_copies().empty());
    CHECK_FALSE(kv.get_has_shift());
    CHECK(dump(kv.cells(1)) == "1:1{1} 2:2{1} 3:3{1} 4:14{1} 5:15{1}");
}

TEST_CASE("clear and out-of-range sequence ids") {
    kv_cache kv = make(16, 2, false);
    place(kv, ub_seq(0, 0, 3));
    place(kv, ub_seq(1, 0, 5));
    kv.clear();
    CHECK(kv.cells(0).get_used() == 0);
    CHECK(kv.cells(1).get_used() == 0);
    CHECK(kv.head(0) == 0);
    CHECK(kv.head(1) == 0);

    CHECK_THROWS_AS(kv.seq_rm(2, -1, -1), std::out_of_range);
    CHECK_THROWS_AS(kv.seq_rm(-2, -1, -1), std::out_of_range);
    CHECK_THROWS_AS(kv.seq_cp(0, 2, -1, -1), std::out_of_range);
    CHECK_THROWS_AS(kv.seq_cp(-1, 0, -1, -1), std::out_of_range);
    CHECK_THROWS_AS(kv.seq_keep(-1), std::out_of_range);
    CHECK_THROWS_AS(kv.seq_add(2, 0, 1, 1), std::out_of_range);
    CHECK_THROWS_AS(kv.seq_div(2, 0, 1, 2), std::out_of_range);
    CHECK_THROWS_AS((void) kv.seq_pos_max(2), std::out_of_range);
    CHECK_THROWS_AS((void) kv.seq_pos_min(-1), std::out_of_range);

    kv_cache uni = make(16, 2, true);
    CHECK(uni.seq_rm(255, -1, -1));   // one stream: any id < LLAMA_MAX_SEQ
    CHECK_THROWS_AS(uni.seq_rm(256, -1, -1), std::out_of_range);
}

TEST_CASE("get_n_kv: max(256, pad256(used_max_p1)) capped at size, over the slot's streams") {
    kv_cache kv = make(1024, 2, false);
    CHECK(kv.get_n_kv(at({0}, 0)) == 256);
    place(kv, ub_seq(0, 0, 600));
    place(kv, ub_seq(1, 0, 10));
    CHECK(kv.get_n_kv(at({0}, 0)) == 768);
    CHECK(kv.get_n_kv(at({0}, 1)) == 256);
    slot_info both;
    both.strm = {0, 1};
    both.idxs = {{0}, {0}};
    CHECK(kv.get_n_kv(both) == 768);
    kv.seq_rm(0, 512, -1);
    CHECK(kv.get_n_kv(at({0}, 0)) == 512);
    kv.seq_rm(0, 256, 511);   // pos 511 at cell 511 keeps used_max_p1 at 512
    CHECK(kv.get_n_kv(at({0}, 0)) == 512);

    kv_cache small = make(300);
    place(small, ub_seq(0, 0, 257));
    CHECK(small.get_n_kv(at({0})) == 300);
    kv_cache tiny = make(8);
    CHECK(tiny.get_n_kv(at({0})) == 8);
}
