// Test-only NVTX injection library (NVTX3 injection protocol, /work/shared/docs/testing-notes.md): loaded by the
// NVTX3 headers from NVTX_INJECTION64_PATH on the first NVTX call, it replaces the domain create/push/pop slots
// and appends one line per event to the file named by KVSIM_NVTX_LOG:
//   push <thread> <domain> <name> <payload>     pop <thread> <domain>
// tests/test_nvtx.cpp compiles it with the system compiler at run time and parses the log.
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace {

struct domain_tag {
    std::string name;
};

std::mutex g_mu;
FILE * g_log = nullptr;

unsigned long thread_tag() { return (unsigned long) std::hash<std::thread::id>{}(std::this_thread::get_id()) % 100000; }

const char * domain_name(nvtxDomainHandle_t d) {
    return d ? reinterpret_cast<const domain_tag *>(d)->name.c_str() : "(default)";
}

nvtxDomainHandle_t NVTX_API domain_create(const char * name) {
    auto * tag = new domain_tag{name ? name : ""};  // lives for the process, as a real tool's domain
    return reinterpret_cast<nvtxDomainHandle_t>(tag);
}

int NVTX_API range_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t * a) {
    const char * name = a && a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii ? a->message.ascii : "(unnamed)";
    const long long payload = a && a->payloadType == NVTX_PAYLOAD_TYPE_INT64 ? (long long) a->payload.llValue : 0;
    std::lock_guard<std::mutex> lk(g_mu);
    if (g_log) std::fprintf(g_log, "push %lu %s %s %lld\n", thread_tag(), domain_name(d), name, payload);
    return 0;
}

int NVTX_API range_pop(nvtxDomainHandle_t d) {
    std::lock_guard<std::mutex> lk(g_mu);
    if (g_log) std::fprintf(g_log, "pop %lu %s\n", thread_tag(), domain_name(d));
    return 0;
}

void close_log() {
    std::lock_guard<std::mutex> lk(g_mu);
    if (g_log) std::fclose(g_log);
    g_log = nullptr;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
    const char * path = std::getenv("KVSIM_NVTX_LOG");
    g_log = std::fopen(path ? path : "/dev/stderr", "w");
    if (!g_log) return 0;
    std::setvbuf(g_log, nullptr, _IOLBF, 0);  // complete lines even if the process dies
    std::atexit(close_log);
    auto * cb = static_cast<const NvtxExportTableCallbacks *>(get_table(NVTX_ETID_CALLBACKS));
    if (!cb) return 0;
    NvtxFunctionTable table = nullptr;
    unsigned int size = 0;
    if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) || !table) return 0;
    if (size <= NVTX_CBID_CORE2_DomainCreateA) return 0;
    *table[NVTX_CBID_CORE2_DomainCreateA] = reinterpret_cast<NvtxFunctionPointer>(&domain_create);
    *table[NVTX_CBID_CORE2_DomainRangePushEx] = reinterpret_cast<NvtxFunctionPointer>(&range_push);
    *table[NVTX_CBID_CORE2_DomainRangePop] = reinterpret_cast<NvtxFunctionPointer>(&range_pop);
    return 1;
}
