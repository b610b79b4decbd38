// batch_allocr against llama_batch_allocr (src/llama-batch.cpp: init, split_simple, split_equal).
#include "cache_test_util.h"
#include "kv/batch_allocr.h"
#include "kv/memory.h"

#include <doctest/doctest.h>

#include <string>

using namespace kvsim;
using kvsim::test::place;
using kvsim::test::seq_rows;
using kvsim::test::ub_seq;

namespace {
kv_memory_single make_mem(uint32_t n_seq_max, bool unified) {
    kv_cache_params p;
    p.kv_size = 64;
    p.n_seq_max = n_seq_max;
    p.unified = unified;
    return kv_memory_single(p);
}

llama_batch_in batch(std::initializer_list<std::pair<llama_pos, std::vector<llama_seq_id>>> toks) {
    llama_batch_in b;
    for (const auto & [p, s] : toks) {
        b.add(p, s);
    }
    return b;
}

// init must fail with a message containing `what`
void check_refused(const llama_batch_in & b, const kv_memory & mem, uint32_t n_seq_max, const std::string & what) {
    batch_allocr ba;
    std::string err;
    CHECK_FALSE(ba.init(b, mem, n_seq_max, &err));
    CHECK_MESSAGE(err.find(what) != std::string::npos, err);
}
}  // namespace

TEST_CASE("batch init: every validation rule refuses with upstream's message") {
    kv_memory_single mem = make_mem(4, true);
    place(*mem.caches()[0], ub_seq(0, 0, 4));   // seq 0 at 0..3

    SUBCASE("empty batch") { check_refused(llama_batch_in{}, mem, 4, "n_tokens == 0"); }
    SUBCASE("seq id >= n_seq_max or negative") {
        check_refused(batch({{0, {4}}}), mem, 4, "invalid seq_id[0] = 4 >= 4");
        check_refused(batch({{0, {1}}, {0, {1, -1}}}), mem, 4, "invalid seq_id[1] = -1 >= 4");
    }
    SUBCASE("Y = X + 1") {
        check_refused(batch({{5, {0}}}), mem, 4, "X = 3 (last in memory), Y = 5 (first in batch)");
        check_refused(batch({{3, {0}}}), mem, 4, "Y = X + 1");
    }
    SUBCASE("non-continuous positions") {
        check_refused(batch({{0, {1}}, {2, {1}}}), mem, 4, "sequence 1 positions are not continuous");
    }
    SUBCASE("coupled sequences diverged") {
        place(*mem.caches()[0], ub_seq(1, 1, 3));   // seq 1 at 1..3: same max, different min
        check_refused(batch({{4, {0, 1}}}), mem, 4, "sequence 1 is coupled to 0 in the input batch, but have diverged");
    }
    SUBCASE("decreasing positions") {
        check_refused(batch({{1, {2}}, {0, {2}}}), mem, 4, "sequence 2 positions are decreasing");
    }
}

TEST_CASE("batch init: accepted batches, including the partial subsets upstream cannot detect") {
    kv_memory_single mem = make_mem(4, true);
    batch_allocr ba;
    std::string err;
    CHECK(ba.init(batch({{0, {0}}, {1, {0}}, {0, {1}}}), mem, 4, &err));
    CHECK(err.empty());
    // upstream's "incompatible sequence sets" check intersects sets that always hold the sequence
    // itself, so it never fires; the real llama.cpp decodes this batch (rc 0). Oracle:
    // printf 'batch 0,1,2:1 0,1:1 1,2:1@1\n' | kvoracle -m tiny-llama.gguf --ctx 256 --seqs 3
    //   -> rc 0, cells [0,0,[0,1,2]] [1,1,[0,1]] [2,1,[1,2]]
    CHECK(ba.init(batch({{0, {0, 1, 2}}, {1, {0, 1}}, {1, {1, 2}}}), mem, 4, &err));
    // repeated positions are continuous and not decreasing
    CHECK(ba.init(batch({{0, {3}}, {0, {3}}, {1, {3}}}), mem, 4, &err));
}

TEST_CASE("split_simple: consecutive chunks of n_ubatch tokens") {
    kv_memory_single mem = make_mem(2, true);
    batch_allocr ba;
    std::string err;
    REQUIRE(ba.init(batch({{0, {0}}, {0, {1}}, {1, {0}}, {1, {1}}, {2, {0}}}), mem, 2, &err));
    ubatch a = ba.split_simple(2);
    CHECK(a.n_tokens == 2);
    CHECK(a.pos == std::vector<llama_pos>{0, 0});
    CHECK(a.seq_id_unq == std::vector<llama_seq_id>{0, 1});
    CHECK_FALSE(a.equal_seqs);
    ubatch b = ba.split_simple(2);
    CHECK(b.pos == std::vector<llama_pos>{1, 1});
    ubatch c = ba.split_simple(2);
    CHECK(c.n_tokens == 1);
    CHECK(c.pos == std::vector<llama_pos>{2});
    CHECK(c.seq_id_unq == std::vector<llama_seq_id>{0});
    CHECK(ba.split_simple(2).n_tokens == 0);
    CHECK(ba.get_n_used() == 5);
}

TEST_CASE("split_equal: equal blocks per sequence set, shortest set bounds the length") {
    kv_memory_single mem = make_mem(2, false);
    batch_allocr ba;
    std::string err;
    REQUIRE(ba.init(batch({{0, {0}}, {1, {0}}, {2, {0}}, {0, {1}}, {1, {1}}}), mem, 2, &err));
    ubatch a = ba.split_equal(8, true);
    CHECK(a.equal_seqs);
    CHECK(a.n_tokens == 4);
    CHECK(a.n_seqs == 2);
    CHECK(a.n_seq_tokens == 2);
    CHECK(a.pos == std::vector<llama_pos>{0, 1, 0, 1});
    CHECK(seq_rows(a.seq_id) == std::vector<std::vector<llama_seq_id>>{{0}, {0}, {1}, {1}});
    ubatch b = ba.split_equal(8, true);
    CHECK(b.n_tokens == 1);
    CHECK(b.pos == std::vector<llama_pos>{2});
    CHECK(ba.split_equal(8, true).n_tokens == 0);

    // n_ubatch bounds the block length: (len + 1) * n_seqs > n_ubatch stops
    ba.split_reset();
    ubatch c = ba.split_equal(4, true);
    CHECK(c.n_tokens == 4);
    ba.split_reset();
    ubatch d = ba.split_equal(3, true);
    CHECK(d.n_tokens == 2);
    CHECK(d.n_seq_tokens == 1);
}

TEST_CASE("split_equal sequential: seq ids must follow each other") {
    kv_memory_single mem = make_mem(3, false);
    batch_allocr ba;
    std::string err;
    REQUIRE(ba.init(batch({{0, {0}}, {0, {2}}}), mem, 3, &err));
    ubatch a = ba.split_equal(8, true);
    CHECK(a.seq_id_unq == std::vector<llama_seq_id>{0});
    ubatch b = ba.split_equal(8, true);
    CHECK(b.seq_id_unq == std::vector<llama_seq_id>{2});
    ba.split_reset();
    ubatch c = ba.split_equal(8, false);
    CHECK(c.seq_id_unq == std::vector<llama_seq_id>{0, 2});
}

TEST_CASE("split_equal: more sequences than n_ubatch gives an n_ubatch + 1 ubatch (upstream edge)") {
    // the set loop breaks only once it holds n_ubatch + 1 sets, all of which get a token
    kv_memory_single mem = make_mem(4, false);
    batch_allocr ba;
    std::string err;
    REQUIRE(ba.init(batch({{0, {0}}, {0, {1}}, {0, {2}}, {0, {3}}}), mem, 4, &err));
    ubatch a = ba.split_equal(2, true);
    CHECK(a.n_tokens == 3);
    CHECK(a.seq_id_unq == std::vector<llama_seq_id>{0, 1, 2});
    ubatch b = ba.split_equal(2, true);
    CHECK(b.n_tokens == 1);
    CHECK(b.seq_id_unq == std::vector<llama_seq_id>{3});
}

TEST_CASE("split_equal: coupled sequences refused in sequential mode, grouped otherwise") {
    kv_memory_single mem = make_mem(3, true);
    batch_allocr ba;
    std::string err;
    REQUIRE(ba.init(batch({{0, {0, 1}}, {1, {0, 1}}, {0, {2}}}), mem, 3, &err));
    CHECK(ba.split_equal(8, true).n_tokens == 0);
    CHECK(ba.get_n_used() == 0);
    ubatch a = ba.split_equal(8, false);
    CHECK(a.n_seqs == 2);
    CHECK(a.n_tokens == 2);
    CHECK(seq_rows(a.seq_id) == std::vector<std::vector<llama_seq_id>>{{0, 1}, {2}});
    CHECK(a.seq_id_unq == std::vector<llama_seq_id>{0, 1, 2});
    ubatch b = ba.split_equal(8, false);
    CHECK(b.n_tokens == 1);
    CHECK(b.pos == std::vector<llama_pos>{1});
}
