// Host-side checks of the CUDA decode flash-attention kernel that need no GPU: the split-KV planner
// (kernels/cuda/fa_split.h, plain C++), the kernel's reduce-scatter of dot products (fa_reduce_scatter.h, the
// same template code run by 32 threads in lock-step), the KVSIM_CUDA_FA choice, which tensors the decode kernel takes and the
// legacy plan (cuda_fa_decode.h, CUDA build only), and the register/spill report of every flash-attention
// kernel (scripts/cuda-regs.sh, nvcc -Xptxas -v; skipped without nvcc).
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <barrier>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cuda/fa_reduce_scatter.h"
#include "cuda/fa_split.h"
#include "test_skip.h"

#if defined(KVSIM_HAVE_CUDA)
#include "cuda_fa_decode.h"
#include "core/errors.h"
#endif

using namespace kvsim::cuda;

namespace {

fa_split_input input(int64_t base, int64_t n_kv, int64_t per_sm, int64_t sms) {
    fa_split_input in;
    in.base_blocks = base;
    in.n_kv = n_kv;
    in.blocks_per_sm = per_sm;
    in.sm_count = sms;
    return in;
}

// The legacy kernel's plan (cuda_fa_decode.cu fa_plan_legacy): ~4 x SMs blocks, chunks of >= 256 cells.
int64_t legacy_chunks(int64_t base, int64_t n_kv, int64_t sms) {
    const int64_t n = std::clamp<int64_t>((4 * sms + base - 1) / base, 1, std::max<int64_t>(1, (n_kv + 255) / 256));
    const int64_t chunk = ((n_kv + n - 1) / n + 63) / 64 * 64;
    return (n_kv + chunk - 1) / chunk;
}

}  // namespace

TEST_CASE("fa_wave_efficiency: whole waves are 1, a tail wave counts its idle slots") {
    int64_t waves = 0;
    CHECK(fa_wave_efficiency(396, 396, &waves) == doctest::Approx(1.0));
    CHECK(waves == 1);
    CHECK(fa_wave_efficiency(397, 396, &waves) == doctest::Approx(397.0 / 792.0));
    CHECK(waves == 2);
    CHECK(fa_wave_efficiency(1, 396) == doctest::Approx(1.0 / 396.0));
}

TEST_CASE("plan_fa_split: Llama-3-8B decode batches fill whole waves where the legacy 4 x SMs plan leaves tails") {
    // H200: 132 SMs; n_head_kv 8, GQA 4 (one row group of 4 rows per kv head), n_kv 32K, one stream per sequence
    for (int64_t per_sm : {2, 3, 4}) {
        for (int64_t batch : {8, 16, 32, 64}) {
            const int64_t base = batch * 8;
            const fa_split s = plan_fa_split(input(base, 32768, per_sm, 132));
            INFO("batch " << batch << " blocks/SM " << per_sm << " chunks " << s.n_chunks << " waves " << s.waves << " eff "
                          << s.efficiency);
            CHECK(s.efficiency >= 0.9);
            CHECK(s.chunk % 64 == 0);
            CHECK(s.n_chunks * s.chunk >= 32768);
            CHECK((s.n_chunks - 1) * s.chunk < 32768);
            // at least as good as the legacy chunk count on the same occupancy
            const double legacy = fa_wave_efficiency(base * legacy_chunks(base, 32768, 132), per_sm * 132);
            CHECK(s.efficiency >= legacy - 1e-9);
        }
    }
    // the numbers: legacy batch 8 gives 9 chunks, 576 blocks on 396 slots (3 blocks/SM): 73 % efficiency
    CHECK(legacy_chunks(64, 32768, 132) == 9);
    CHECK(fa_wave_efficiency(576, 396) == doctest::Approx(0.727).epsilon(0.01));
    const fa_split b8 = plan_fa_split(input(64, 32768, 3, 132));
    CHECK(b8.n_chunks == 6);  // 384 blocks: one wave at 97 %
    CHECK(b8.waves == 1);
}

TEST_CASE("plan_fa_split: short caches, huge grids, tiles and invalid input") {
    // fewer cells than one min_chunk: one chunk
    fa_split s = plan_fa_split(input(4, 100, 4, 132));
    CHECK(s.n_chunks == 1);
    CHECK(s.chunk == 128);  // 2 tiles of 64 cover 100 cells
    // the grid already fills many waves without splitting: no split
    s = plan_fa_split(input(100000, 4096, 4, 132));
    CHECK(s.n_chunks == 1);
    // custom tile and min_chunk
    fa_split_input in = input(8, 10000, 2, 16);
    in.tile = 16;
    in.min_chunk = 1000;
    s = plan_fa_split(in);
    CHECK(s.chunk % 16 == 0);
    CHECK(s.chunk >= 1000);
    CHECK(s.n_chunks * s.chunk >= 10000);
    for (auto bad : {input(0, 10, 1, 1), input(1, 0, 1, 1), input(1, 10, 0, 1), input(1, 10, 1, 0)}) {
        CHECK_THROWS_AS(plan_fa_split(bad), std::invalid_argument);
    }
    in.tile = 0;
    CHECK_THROWS_AS(plan_fa_split(in), std::invalid_argument);
}

TEST_CASE("plan_fa_split: random shapes give covering whole-tile chunks of at least min_chunk cells") {
    std::mt19937_64 rng(18);
    for (int it = 0; it < 20000; ++it) {
        fa_split_input in = input(1 + (int64_t) (rng() % 2000), 1 + (int64_t) (rng() % 300000), 1 + (int64_t) (rng() % 16),
                                  1 + (int64_t) (rng() % 200));
        in.tile = int64_t(1) << (rng() % 7);
        in.min_chunk = (int64_t) (rng() % 1024);
        const fa_split s = plan_fa_split(in);
        const int64_t per_wave = in.blocks_per_sm * in.sm_count;
        INFO("base " << in.base_blocks << " n_kv " << in.n_kv << " per_wave " << per_wave << " tile " << in.tile << " min "
                     << in.min_chunk << " -> chunk " << s.chunk << " x " << s.n_chunks);
        REQUIRE(s.n_chunks >= 1);
        CHECK(s.chunk % in.tile == 0);
        CHECK(s.n_chunks * s.chunk >= in.n_kv);
        CHECK((s.n_chunks - 1) * s.chunk < in.n_kv);
        if (s.n_chunks > 1) CHECK(s.chunk >= in.min_chunk);
        CHECK(s.efficiency > 0.0);
        CHECK(s.efficiency <= 1.0 + 1e-12);
        int64_t waves = 0;
        CHECK(s.efficiency == doctest::Approx(fa_wave_efficiency(in.base_blocks * s.n_chunks, per_wave, &waves)));
        CHECK(s.waves == waves);
    }
}

namespace {

// One warp of 32 lanes in lock-step on host threads: lane L's part is L % G (groups of G lanes, as the kernel);
// shfl(x, o) publishes x, waits for every lane, reads lane L ^ o's value, waits again (__shfl_xor_sync).
// Values are small integers, so every order of the sums is exact and the result must equal the plain sum.
template <int G, int R>
void check_reduce_scatter(std::mt19937 & rng) {
    std::array<std::array<float, R>, 32> in{};
    for (auto & lane : in) {
        for (float & x : lane) x = (float) (int) (rng() % 201) - 100.0f;
    }
    std::array<float, 32> slot{}, out{};
    std::barrier sync(32);
    std::vector<std::thread> lanes;
    for (int L = 0; L < 32; ++L) {
        lanes.emplace_back([&, L] {
            float v[R];
            for (int i = 0; i < R; ++i) v[i] = in[(size_t) L][(size_t) i];
            auto shfl = [&](float x, int o) {
                slot[(size_t) L] = x;
                sync.arrive_and_wait();
                const float y = slot[(size_t) (L ^ o)];
                sync.arrive_and_wait();
                return y;
            };
            fa_reduce_scatter<R, G / 2, R>(v, L % G, shfl);
            out[(size_t) L] = v[0];
        });
    }
    for (auto & t : lanes) t.join();
    int shift = 0;
    while ((R << shift) < G) ++shift;  // log2 G - log2 R
    for (int L = 0; L < 32; ++L) {
        const int g0 = L / G * G, row = (L % G) >> shift;
        float want = 0.0f;
        for (int j = g0; j < g0 + G; ++j) want += in[(size_t) j][(size_t) row];
        INFO("G " << G << " R " << R << " lane " << L << " row " << row);
        CHECK(out[(size_t) L] == want);
    }
}

}  // namespace

TEST_CASE("fa_reduce_scatter: lane p of each group ends with the group's sum of row p >> (log2 G - log2 R)") {
    std::mt19937 rng(18);
    for (int it = 0; it < 3; ++it) {
        check_reduce_scatter<8, 1>(rng);
        check_reduce_scatter<8, 2>(rng);
        check_reduce_scatter<8, 4>(rng);
        check_reduce_scatter<8, 8>(rng);
        check_reduce_scatter<16, 1>(rng);
        check_reduce_scatter<16, 2>(rng);
        check_reduce_scatter<16, 4>(rng);
        check_reduce_scatter<16, 8>(rng);
        check_reduce_scatter<32, 1>(rng);
        check_reduce_scatter<32, 2>(rng);
        check_reduce_scatter<32, 4>(rng);
        check_reduce_scatter<32, 8>(rng);
    }
}

#if defined(KVSIM_HAVE_CUDA)

namespace {

// KVSIM_CUDA_FA = value (nullptr: unset) for the scope; the previous value is restored.
struct fa_env {
    std::string old;
    bool had = false;
    explicit fa_env(const char * value) {
        if (const char * e = std::getenv("KVSIM_CUDA_FA")) {
            had = true;
            old = e;
        }
        if (value) setenv("KVSIM_CUDA_FA", value, 1);
        else unsetenv("KVSIM_CUDA_FA");
    }
    ~fa_env() {
        if (had) setenv("KVSIM_CUDA_FA", old.c_str(), 1);
        else unsetenv("KVSIM_CUDA_FA");
    }
};

}  // namespace

TEST_CASE("KVSIM_CUDA_FA: decode by default, legacy on request, anything else refused with the value") {
    {
        fa_env e(nullptr);
        CHECK(fa_impl_requested() == fa_impl::decode);
    }
    {
        fa_env e("");
        CHECK(fa_impl_requested() == fa_impl::decode);
    }
    {
        fa_env e("decode");
        CHECK(fa_impl_requested() == fa_impl::decode);
    }
    {
        fa_env e("legacy");
        CHECK(fa_impl_requested() == fa_impl::legacy);
    }
    fa_env e("fast");
    try {
        (void) fa_impl_requested();
        FAIL("no exception");
    } catch (const kvsim::usage_error & x) {
        CHECK(std::string(x.what()).find("KVSIM_CUDA_FA") != std::string::npos);
        CHECK(std::string(x.what()).find("'fast'") != std::string::npos);
    }
}

TEST_CASE("fa_decode_supports: same-type pairs of the four cache types with 16-byte aligned data") {
    alignas(16) static char buf[64];
    kvsim::fa_args a;
    a.k.data = buf;
    a.v.data = buf;
    for (kvsim::ggml_type t : {kvsim::ggml_type::f32, kvsim::ggml_type::f16, kvsim::ggml_type::q8_0, kvsim::ggml_type::q4_0}) {
        a.k.type = a.v.type = t;
        CHECK(fa_decode_supports(a));
    }
    a.k.type = kvsim::ggml_type::q8_0;
    a.v.type = kvsim::ggml_type::f16;
    CHECK_FALSE(fa_decode_supports(a));  // mixed pair: the legacy kernel
    a.v.type = kvsim::ggml_type::q8_0;
    a.v.data = buf + 4;
    CHECK_FALSE(fa_decode_supports(a));  // misaligned base
}

TEST_CASE("fa_plan_legacy keeps the legacy kernel's 4 x SMs plan") {
    kvsim::fa_desc d;
    d.n_head = 32;
    d.n_head_kv = 8;
    d.n_kv = 32768;
    d.n_stream = 8;
    const kvsim::fa_plan p = fa_plan_legacy(d, 132);
    CHECK(p.n_chunks == legacy_chunks(64, 32768, 132));
    CHECK(p.n_chunks * p.chunk >= d.n_kv);
    fa_env e("legacy");
    const kvsim::fa_plan q = fa_plan_select(d, 132);  // no occupancy query under legacy: no device needed
    CHECK(q.chunk == p.chunk);
    CHECK(q.n_chunks == p.n_chunks);
}

#endif

TEST_CASE("CUDA flash-attention kernels compile without register spills (scripts/cuda-regs.sh, nvcc -Xptxas -v)") {
#if !defined(KVSIM_HAVE_CUDA)
    KVSIM_SKIP_CASE("kvsim was built without the CUDA backend (nvcc not found); no register report");
#else
    const std::string cmd = std::string("bash ") + KVSIM_SOURCE_DIR + "/scripts/cuda-regs.sh --arch sm_90";
    const int rc = std::system(cmd.c_str());
    REQUIRE(rc != -1);
    const int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    if (code == 77) KVSIM_SKIP_CASE("nvcc not found by scripts/cuda-regs.sh; no register report");
    CHECK(code == 0);
#endif
}
