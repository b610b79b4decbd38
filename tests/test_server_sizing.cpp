// llama-server's sizing of a context -c leaves unset (replay/server_sizing.h), against what the real programs chose:
// llama.cpp's own --fit on the memories of tests/data/memory/fit.jsonl, and the server's sizes in
// tests/server_golden/sizing_*.scn (test_server_golden replays those).
#include "replay/server_sizing.h"
#include "core/errors.h"
#include "kv/fit.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <string>

using namespace kvsim;

TEST_CASE("fit: an unset -c is sized as llama-server sizes it, on upstream's memory (fit.jsonl)") {
    // the whole path: kvsim's own memory breakdown of each context (not upstream's two measurements) feeds the fit;
    // every case where llama.cpp's --fit found a context must give the same n_ctx
    std::ifstream in(std::string(KVSIM_SOURCE_DIR) + "/tests/data/memory/fit.jsonl");
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
        const auto j = nlohmann::json::parse(line);
        const auto & pr = j["probe"];
        if (pr["n_ctx_given"] != 0 || pr["status"] != 0) continue;
        replay_options o;
        o.model = model_preset(j["model"].get<std::string>());
        o.ctx.n_ctx = 0;
        o.ctx.n_seq_max = pr["n_seq_max"];
        o.ctx.kv_unified = pr["kv_unified"];
        o.ctx.n_ubatch = pr["n_ubatch"];
        o.ctx.flash_attn = pr["flash_attn"];
        o.fit.n_ctx_min = pr["fitc"];
        o.fit.margin = pr["fitt_mib"].get<int64_t>() << 20;
        o.device_memory = pr["memory"];
        const std::string origin = size_server_context(o);
        INFO(j["model"].get<std::string>() << " " << j["args"].get<std::string>() << ": " << origin);
        CHECK(o.ctx.n_ctx == pr["n_ctx"].get<uint32_t>());
        ++n;
    }
    CHECK(n > 40);
}

// The real server's sizes are the golden scenarios tests/server_golden/sizing_*.scn and defaults.scn (recorded from
// llama-server); these pin the same branches where no recording reaches them (a device too small for anything).
TEST_CASE("sizing: -np auto, --kv-unified-per-slot, -c 0, --fit off and a given -c") {
    replay_options o;
    o.model = model_preset("tiny-llama");   // n_ctx_train 4096
    o.ctx.n_ctx = 0;
    o.n_parallel_auto = true;
    size_server_context(o);   // server.cpp: 4 slots, unified; then n_ctx_train x 4
    CHECK(o.ctx.n_seq_max == 4);
    CHECK(o.ctx.kv_unified);
    CHECK(o.ctx.n_ctx == 16384);
    replay_options per = o;
    per.ctx.n_ctx = 0;
    per.server.kv_unified_per_slot = 1000;   // server.cpp: n_parallel x N, before the fit (which keeps a set context)
    CHECK(size_server_context(per).find("--kv-unified-per-slot") == 0);
    CHECK(per.ctx.n_ctx == 4000);
    replay_options zero = per;
    zero.ctx.n_ctx = 0;
    zero.fit.n_ctx_min = UINT32_MAX;   // -c 0: the per-slot sizing does not apply, nor does the fit shrink
    zero.device_memory = 1;            // nothing fits: still n_ctx_train x slots
    size_server_context(zero);
    CHECK(zero.ctx.n_ctx == 16384);
    replay_options off = o;
    off.ctx.n_ctx = 0;
    off.fit.enabled = false;
    size_server_context(off);
    CHECK(off.ctx.n_ctx == 4096);   // llama_context's default, all slots together
    replay_options given = o;
    given.ctx.n_ctx = 2048;
    given.device_memory = 1;
    const std::string note = size_server_context(given);   // kept, and said not to fit the 1-byte device
    CHECK(note.rfind("-c as given (needs ", 0) == 0);
    CHECK(note.find("replayed as asked") != std::string::npos);
    CHECK(given.memory_warning.find("the real llama-server would fail to allocate them") != std::string::npos);
    given.device_memory = -1;
    given.ctx.n_ctx = 2048;
    CHECK(size_server_context(given) == "-c as given");   // h200's memory: fits
    CHECK(given.ctx.n_ctx == 2048);
    replay_options big = o;   // slots x --kv-unified-per-slot past the largest context: refused, not wrapped
    big.ctx.n_ctx = 0;
    big.server.kv_unified_per_slot = 1073741825;
    CHECK_THROWS_AS(size_server_context(big), option_error);
    replay_options nokvu;
    nokvu.n_parallel_auto = true;
    nokvu.no_kv_unified_given = true;
    CHECK_THROWS_AS(size_server_context(nokvu), usage_error);
}

TEST_CASE("fit: the interpolation's product does not overflow on a large device") {
    // 256 slots x 131072 cells and hundreds of GiB: the int64 product of upstream's formula passes 2^63 here
    const int64_t gib = int64_t(1) << 30;
    const auto used_at = [&](uint32_t n) { return (int64_t) n * (128 << 10) + 16 * gib; };   // 128 KiB per cell + weights
    const fit_result r = fit_context(0, 131072, 256, false, 600 * gib, fit_params{}, used_at);
    CHECK(r.reduced);
    CHECK(r.fits);
    CHECK(r.n_ctx > 256u * 4096);             // more than the smallest
    CHECK(r.n_ctx < 256u * 131072);           // less than the largest
    CHECK(used_at(r.n_ctx) <= 599 * gib);     // within the device less the margin
}
