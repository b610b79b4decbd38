// Bytes-moved accounting, the bandwidth probe's contract, deterministic K/V content, the thread pool.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>
#include <vector>

#include "bandwidth.h"
#include "bytes.h"
#include "cpu/thread_pool.h"
#include "kv_content.h"

using namespace kvsim;

TEST_CASE("bytes moved by the kernels") {
    // Llama-3-8B layer, decode, n_kv 16K, f16: 16384 cells * 8 heads * (256 + 256) bytes
    CHECK(fa_kv_bytes(16384, 1, 8, ggml_type::f16, 128, ggml_type::f16, 128) == 16384ull * 8 * 512);
    CHECK(fa_kv_bytes(100, 2, 8, ggml_type::q8_0, 128, ggml_type::q4_0, 128) == 200ull * 8 * (136 + 72));
    CHECK(kq_mask_bytes(256, 3, 2, ggml_type::f16) == 256 * 3 * 2 * 2);
    CHECK(kq_mask_bytes(256, 3, 2, ggml_type::f32) == 256 * 3 * 2 * 4);
    CHECK(kshift_bytes(1000, 1, 8, ggml_type::q8_0, 128) == 1000ull * (2 * 8 * 136 + 4));
}

TEST_CASE("bandwidth probe returns positive finite rates and rejects bad sizes") {
    const auto r = measure_bandwidth(8 << 20, 2, 2);  // small buffer: contract only, no timing assertion
    CHECK(std::isfinite(r.read_gbs));
    CHECK(r.read_gbs > 0.0);
    CHECK(r.copy_gbs > 0.0);
    CHECK_THROWS_AS(measure_bandwidth(100, 1, 1), std::invalid_argument);
    CHECK_THROWS_AS(measure_bandwidth(1 << 20, 0, 1), std::invalid_argument);

    read_probe p(8 << 20, 2);  // one pass per call, as kvbench takes one after each timed kernel call
    for (int i = 0; i < 3; ++i) {
        const double g = p.read_gbs();
        CHECK(std::isfinite(g));
        CHECK(g > 0.0);
    }
    CHECK_THROWS_AS(read_probe(100, 1), std::invalid_argument);
    CHECK_THROWS_AS(read_probe(1 << 20, 0), std::invalid_argument);
}

TEST_CASE("K/V content: pinned values, in [-1, 1), each argument changes the value") {
    // Written down once from an independent Python implementation of the header's definition
    // (splitmix64 as in Vigna's splitmix64.c: x += 0x9e3779b97f4a7c15, then the two xor-shift-multiply
    // rounds; h = sm((layer << 1) | which), h = sm(h ^ seq), h = sm(h ^ pos), h = sm(h ^ (head << 32) ^ dim);
    // value = (h >> 40) / 2^23 - 1, exact in a float). The same Python gives sm(0) = 0xe220a8397b1dcdaf, the
    // first output of splitmix64.c seeded with 0. A kernel result recomputed in another process or on another
    // backend relies on these values never changing.
    // kv_value(layer, K or V, seq, pos, head, dim) == value;  comment: h >> 40
    CHECK(kv_value(0, kv_which::k, 3, 17, 2, 5) == 0x1.66cbfcp-1f);       // 14267135
    CHECK(kv_value(0, kv_which::v, 3, 17, 2, 5) == -0x1.45efdp-1f);       //  3048460
    CHECK(kv_value(0, kv_which::k, 3, 18, 2, 5) == -0x1.f77b4p-4f);       //  7357478
    CHECK(kv_value(0, kv_which::k, 3, 17, 2, 6) == 0x1.0b10dp-2f);        // 10576410
    CHECK(kv_value(0, kv_which::k, 0, 0, 0, 0) == -0x1.7b3e3p-1f);        //  2175092
    CHECK(kv_value(1, kv_which::v, 0, 0, 0, 0) == 0x1.58e0fp-1f);         // 14039100
    CHECK(kv_value(5, kv_which::v, 7, 65535, 7, 127) == -0x1.dd9108p-2f); //  4476383
    // and the other arguments: a different layer, sequence or head gives a different value
    CHECK(kv_value(1, kv_which::k, 3, 17, 2, 5) != kv_value(0, kv_which::k, 3, 17, 2, 5));
    CHECK(kv_value(0, kv_which::k, 4, 17, 2, 5) != kv_value(0, kv_which::k, 3, 17, 2, 5));
    CHECK(kv_value(0, kv_which::k, 3, 17, 3, 5) != kv_value(0, kv_which::k, 3, 17, 2, 5));
    double sum = 0.0;
    for (int d = 0; d < 4096; ++d) {
        const float x = kv_value(1, kv_which::v, 0, d, 0, d);
        CHECK(x >= -1.0f);
        CHECK(x < 1.0f);
        sum += x;
    }
    CHECK(std::fabs(sum / 4096) < 0.05);
    std::vector<char> buf(2 * 4 * 64 * 2);
    kv_tensor t{buf.data(), ggml_type::f16, 64, 2, 4, 1};
    CHECK_THROWS_AS(write_kv_cell(t, 0, 4, 0, kv_which::k, 0, 0, 0), std::out_of_range);
}

TEST_CASE("thread pool runs every task once and propagates exceptions") {
    thread_pool pool(3);
    std::vector<std::atomic<int>> hits(1000);
    pool.parallel_for(1000, [&](int64_t i, int) { hits[(size_t) i]++; });
    for (auto & h : hits) CHECK(h.load() == 1);
    CHECK_THROWS_AS(pool.parallel_for(10, [](int64_t i, int) { if (i == 5) throw std::runtime_error("x"); }), std::runtime_error);
    std::atomic<int> bad{0};
    pool.parallel_for(100, [&](int64_t, int t) { if (t < 0 || t >= pool.size()) ++bad; });
    CHECK(bad.load() == 0);
    // one task runs on the caller (thread 0) and its exception reaches the caller as the pool's would
    const auto caller = std::this_thread::get_id();
    std::thread::id ran;
    int thread = -1;
    pool.parallel_for(1, [&](int64_t, int t) { ran = std::this_thread::get_id(); thread = t; });
    CHECK(ran == caller);
    CHECK(thread == 0);
    CHECK_THROWS_AS(pool.parallel_for(1, [](int64_t, int) { throw std::runtime_error("x"); }), std::runtime_error);
    // calls back to back (workers still polling) and after a pause longer than the poll (workers asleep)
    std::atomic<int64_t> sum{0};
    for (int call = 0; call < 2000; ++call) {
        if (call % 500 == 499) std::this_thread::sleep_for(std::chrono::microseconds(4 * thread_pool::spin_us));
        pool.parallel_for(7, [&](int64_t i, int) { sum += i; });
    }
    CHECK(sum.load() == 2000 * 21);
    // more threads than CPUs: nobody polls (a polling thread took the core of one still working: 64 threads on 2
    // CPUs ran 20x slower a call, hostile check of session 31)
    thread_pool over((int) std::thread::hardware_concurrency() + 1);
    CHECK(over.spin_limit_us() == 0);
    CHECK(thread_pool(1).spin_limit_us() == thread_pool::spin_us);
}
