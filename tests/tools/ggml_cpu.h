// The prebuilt ggml CPU backend of ../shared/tools/kvoracle (the ISA variant llama.cpp itself loads), for the tools
// that hold a kvsim kernel against llama.cpp's own in one process (kshift_vs_ggml.cpp, fa_vs_ggml.cpp). Header-only:
// each tool is one translation unit built by scripts/vs-ggml.sh.
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

#include "core/ggml_type.h"

namespace ggml_tools {

// Tool arguments, parsed whole (no trailing characters): an integer in [lo, hi] or a finite float; otherwise the tool
// says which argument and exits 2.
[[noreturn]] inline void bad_argument(const char * what, const char * value, const std::string & want) {
    std::fprintf(stderr, "%s '%s': %s\n", what, value, want.c_str());
    std::exit(2);
}
inline long long int_arg(const char * what, const char * value, long long lo, long long hi) {
    char * end = nullptr;
    errno = 0;
    const long long v = std::strtoll(value, &end, 10);
    if (end == value || *end != '\0' || errno != 0 || v < lo || v > hi) {
        bad_argument(what, value, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return v;
}
inline float float_arg(const char * what, const char * value) {
    char * end = nullptr;
    const float v = std::strtof(value, &end);
    if (end == value || *end != '\0' || !std::isfinite(v)) bad_argument(what, value, "a finite number");
    return v;
}

// n_cells rows of row_elems values at dst (rows of ggml_row_size(t, row_elems) bytes): N(0, 1) values of a seeded
// generator rounded to type t by ggml itself (f16 conversion or ggml_quantize_chunk), as a cache holds them.
inline void fill_random_rows(ggml_type t, int64_t n_cells, int64_t row_elems, uint32_t seed, uint8_t * dst) {
    std::vector<float> x((size_t) row_elems);
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    for (int64_t c = 0; c < n_cells; ++c, dst += ggml_row_size(t, row_elems)) {
        for (float & v : x) v = nd(rng);
        if (t == GGML_TYPE_F16) {
            for (int64_t i = 0; i < row_elems; ++i) reinterpret_cast<ggml_fp16_t *>(dst)[i] = ggml_fp32_to_fp16(x[(size_t) i]);
        } else {
            ggml_quantize_chunk(t, x.data(), dst, 0, 1, row_elems, nullptr);
        }
    }
}

// The kvsim name of a cache type the tools use (f16, q8_0, q4_0).
inline kvsim::ggml_type kvsim_type(ggml_type t) {
    switch (t) {
        case GGML_TYPE_F16: return kvsim::ggml_type::f16;
        case GGML_TYPE_Q8_0: return kvsim::ggml_type::q8_0;
        default: return kvsim::ggml_type::q4_0;
    }
}

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

inline double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ggml's CPU device with its registry procs: a backend with n threads and a persistent threadpool of default
// parameters (polling, as llama.cpp's), as llama.cpp runs its graphs.
class cpu_device {
public:
    explicit cpu_device(const char * libdir) {
        ggml_backend_load_all_from_path(libdir);
        dev_ = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
        if (!dev_) throw std::runtime_error(std::string("no ggml CPU backend under ") + libdir);
        reg_ = ggml_backend_dev_backend_reg(dev_);
        set_threads_ = (ggml_backend_set_n_threads_t) proc("ggml_backend_set_n_threads");
        tp_new_ = (decltype(&ggml_threadpool_new)) proc("ggml_threadpool_new");
        tp_free_ = (decltype(&ggml_threadpool_free)) proc("ggml_threadpool_free");
        set_tp_ = (decltype(&ggml_backend_cpu_set_threadpool)) proc("ggml_backend_cpu_set_threadpool");
        // not in the registry's procs: from the loaded variant itself
        if (void * so = dlopen(variant_path().c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
            pause_ = (decltype(&ggml_threadpool_pause)) dlsym(so, "ggml_threadpool_pause");
        }
    }
    // The file name of the ISA variant ggml loaded (libggml-cpu-zen4.so, ...), from /proc/self/maps.
    static std::string variant() {
        const std::string p = variant_path();
        return p.empty() ? "unknown" : p.substr(p.rfind('/') + 1);
    }
    // Parks the threadpool's workers: after a graph they poll for the next one (about 6.5 M rounds at poll 50,
    // tenths of a second), which would take the cores from a kernel timed next to them. The next graph resumes it.
    // False when the variant does not export ggml_threadpool_pause.
    bool pause(ggml_threadpool * pool) const {
        if (!pause_) return false;
        pause_(pool);
        return true;
    }
    ggml_backend_dev_t dev() const { return dev_; }

    // A backend and its threadpool; free with release().
    struct backend {
        ggml_backend_t be = nullptr;
        ggml_threadpool * pool = nullptr;
    };
    backend make_backend(int n_threads) const {
        backend b;
        b.be = ggml_backend_dev_init(dev_, nullptr);
        set_threads_(b.be, n_threads);
        ggml_threadpool_params tpp = ggml_threadpool_params_default(n_threads);
        b.pool = tp_new_(&tpp);
        set_tp_(b.be, b.pool);
        return b;
    }
    void release(backend & b) const {
        ggml_backend_free(b.be);
        tp_free_(b.pool);
        b = {};
    }

private:
    static std::string variant_path() {
        std::ifstream maps("/proc/self/maps");
        for (std::string line; std::getline(maps, line);) {
            const size_t p = line.find("libggml-cpu-"), slash = line.find('/');
            if (p != std::string::npos && slash != std::string::npos) return line.substr(slash);
        }
        return "";
    }
    void * proc(const char * name) const {
        void * p = ggml_backend_reg_get_proc_address(reg_, name);
        if (!p) throw std::runtime_error(std::string("ggml CPU backend lacks ") + name);
        return p;
    }
    ggml_backend_dev_t dev_ = nullptr;
    ggml_backend_reg_t reg_ = nullptr;
    ggml_backend_set_n_threads_t set_threads_ = nullptr;
    decltype(&ggml_threadpool_new) tp_new_ = nullptr;
    decltype(&ggml_threadpool_free) tp_free_ = nullptr;
    decltype(&ggml_backend_cpu_set_threadpool) set_tp_ = nullptr;
    decltype(&ggml_threadpool_pause) pause_ = nullptr;
};

}  // namespace ggml_tools
