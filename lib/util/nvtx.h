// NVTX ranges in the "kvsim" domain, shown as nested bars in Nsight Systems (docs/profiling.md lists the names).
// Header-only: with NVTX3 (CUDA toolkit, KVSIM_HAVE_NVTX=1 from CMake) a range is one push on construction and one
// pop on destruction, each a no-op until a tool (nsys, or NVTX_INJECTION64_PATH) attaches; without NVTX3 it
// compiles to nothing. Names are plain ASCII strings that must outlive the constructor call (use literals).
#pragma once

#include <cstdint>

#if defined(KVSIM_HAVE_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

namespace kvsim {

#if defined(KVSIM_HAVE_NVTX)

// The domain handle, created on first use (nvtxDomainCreateA is thread-safe and idempotent per name).
inline nvtxDomainHandle_t nvtx_domain() {
    static const nvtxDomainHandle_t d = nvtxDomainCreateA("kvsim");
    return d;
}

// Scoped range: pushes `name` with an int64 payload (step number, n_kv, cells: the caller says which) in the kvsim
// domain; pops when destroyed. Mirrors nvtx3::scoped_range_in<D> with a payload (NVTX3 C API,
// nvtxDomainRangePushEx / nvtxDomainRangePop).
class nvtx_range {
public:
    explicit nvtx_range(const char * name, int64_t payload = 0) {
        nvtxEventAttributes_t a{};
        a.version = NVTX_VERSION;
        a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
        a.messageType = NVTX_MESSAGE_TYPE_ASCII;
        a.message.ascii = name;
        a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
        a.payload.llValue = payload;
        nvtxDomainRangePushEx(nvtx_domain(), &a);
    }
    ~nvtx_range() { nvtxDomainRangePop(nvtx_domain()); }
    nvtx_range(const nvtx_range &) = delete;
    nvtx_range & operator=(const nvtx_range &) = delete;
};

#else

// No NVTX3 at build time: nothing is emitted.
class nvtx_range {
public:
    explicit nvtx_range(const char *, int64_t = 0) {}
    nvtx_range(const nvtx_range &) = delete;
    nvtx_range & operator=(const nvtx_range &) = delete;
};

#endif

}  // namespace kvsim

// One scoped range for the rest of the enclosing block: KVSIM_NVTX_RANGE("find_slot", n_tokens).
#define KVSIM_NVTX_CONCAT2(a, b) a##b
#define KVSIM_NVTX_CONCAT(a, b) KVSIM_NVTX_CONCAT2(a, b)
#define KVSIM_NVTX_RANGE(name, payload) ::kvsim::nvtx_range KVSIM_NVTX_CONCAT(kvsim_nvtx_range_, __LINE__)(name, payload)
