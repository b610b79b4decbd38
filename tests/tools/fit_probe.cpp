// fit_probe: llama.cpp's own --fit (common/fit.cpp: common_fit_params) run on chosen memory
// sizes, for the expected values of lib/kv/fit's arithmetic (tests/data/memory/fit.jsonl). Test
// tooling, built only by scripts/memory-probe/record.sh against kvoracle's prebuilt libllama and
// libllama-common (../shared/tools/kvoracle).
//
// The prebuilt library is CPU-only, so upstream fits the context to host memory (its nd == 0
// path: the CPU device's total memory, the same interpolation and rounding as for one GPU). This
// executable defines ggml_backend_dev_memory itself (exported; libllama-common calls it through
// its PLT, so this definition wins) and reports --memory BYTES as the device's free and total
// memory. It prints, as one JSON line: the inputs, upstream's measured use (model + context +
// compute, common_get_device_memory_data) at the largest context (n_ctx_train x n_seq_max) and at
// the smallest (-fitc x streams), the fit's status and the n_ctx it chose.
//
// usage: fit_probe MODEL.gguf --memory BYTES [-c N] [-np N] [-kvu 0|1] [-fitc N] [-fitt MiB] [-ub N] [-fa on|off]
#include "fit.h"
#include "ggml-backend.h"
#include "llama.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {
size_t g_memory = 0;

void quiet(ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

// upstream's projected use (model + context + compute of the host buffers) at context n_ctx
int64_t used_at(const char * path, const llama_model_params & mp, llama_context_params cp, uint32_t n_ctx) {
    cp.n_ctx = n_ctx;
    std::vector<ggml_backend_dev_t> devs;
    uint32_t ngl = 0, nct = 0, nex = 0;
    const auto d = common_get_device_memory_data(path, &mp, &cp, devs, ngl, nct, nex, GGML_LOG_LEVEL_ERROR);
    return (int64_t) (d.back().model + d.back().context + d.back().compute);
}
}  // namespace

extern "C" void ggml_backend_dev_memory(ggml_backend_dev_t, size_t * free, size_t * total) {
    *free = g_memory;
    *total = g_memory;
}

int main(int argc, char ** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: fit_probe MODEL.gguf --memory BYTES [-c N] [-np N] [-kvu 0|1] [-fitc N] [-fitt MiB] [-ub N] [-fa on|off]\n");
        return 2;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 0;   // llama-server without -c
    cp.n_seq_max = 1;
    cp.kv_unified = true;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    uint32_t fitc = 4096;
    size_t fitt_mib = 1024;
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        const char * v = argv[i + 1];
        if (k == "--memory") g_memory = strtoull(v, nullptr, 10);
        else if (k == "-c") cp.n_ctx = (uint32_t) atoi(v);
        else if (k == "-np") cp.n_seq_max = (uint32_t) atoi(v);
        else if (k == "-kvu") cp.kv_unified = atoi(v) != 0;
        else if (k == "-fitc") fitc = (uint32_t) atoi(v);
        else if (k == "-fitt") fitt_mib = strtoull(v, nullptr, 10);
        else if (k == "-ub") cp.n_ubatch = (uint32_t) atoi(v);
        else if (k == "-fa") cp.flash_attn_type = !strcmp(v, "on") ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
        else {
            fprintf(stderr, "fit_probe: unknown option %s\n", k.c_str());
            return 2;
        }
    }
    llama_log_set(quiet, nullptr);
    Dl_info info;   // the CPU backends are shared objects next to libllama, loaded at run time
    if (dladdr((void *) &llama_decode, &info) && info.dli_fname) {
        const std::string dir = info.dli_fname;
        ggml_backend_load_all_from_path(dir.substr(0, dir.rfind('/')).c_str());
    }
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    const uint32_t n_ctx_given = cp.n_ctx;
    const uint32_t n_streams = cp.kv_unified ? 1 : cp.n_seq_max;

    // the fit's own measurements, taken the way common_params_fit_impl takes them
    llama_model_params mp_probe = mp;
    mp_probe.no_alloc = true;
    mp_probe.load_mode = LLAMA_LOAD_MODE_NONE;   // no_alloc loads refuse mmap
    llama_model * model = llama_model_load_from_file(argv[1], mp_probe);
    if (!model) {
        fprintf(stderr, "fit_probe: cannot load %s\n", argv[1]);
        return 1;
    }
    const uint32_t n_ctx_train = (uint32_t) llama_model_n_ctx_train(model);
    llama_model_free(model);
    const int64_t used_max = used_at(argv[1], mp, cp, n_ctx_given ? n_ctx_given : n_ctx_train * cp.n_seq_max);
    const int64_t used_min = used_at(argv[1], mp, cp, fitc * n_streams);

    std::vector<float> split(llama_max_devices(), 0.0f);
    std::vector<llama_model_tensor_buft_override> overrides(llama_max_tensor_buft_overrides());
    std::vector<size_t> margins(llama_max_devices(), fitt_mib * 1024 * 1024);
    const common_params_fit_status st =
        common_fit_params(argv[1], &mp, &cp, split.data(), overrides.data(), margins.data(), fitc, nullptr, GGML_LOG_LEVEL_ERROR);
    printf("{\"memory\": %zu, \"n_ctx_given\": %u, \"n_seq_max\": %u, \"kv_unified\": %s, \"fitc\": %u, \"fitt_mib\": %zu, "
           "\"n_ubatch\": %u, \"flash_attn\": %s, \"n_ctx_train\": %u, \"used_max\": %lld, \"used_min\": %lld, "
           "\"status\": %d, \"n_ctx\": %u}\n",
           g_memory, n_ctx_given, cp.n_seq_max, cp.kv_unified ? "true" : "false", fitc, fitt_mib, cp.n_ubatch,
           cp.flash_attn_type == LLAMA_FLASH_ATTN_TYPE_ENABLED ? "true" : "false", n_ctx_train, (long long) used_max,
           (long long) used_min, (int) st, cp.n_ctx);
    return 0;
}
