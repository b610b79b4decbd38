// memory_probe: the buffer sizes the real llama.cpp reports when it creates a context, for the
// expected values of lib/plan's memory breakdown (tests/data/memory/). Test tooling, built only
// by scripts/memory-probe/record.sh against kvoracle's prebuilt libllama (../shared/tools/kvoracle).
//
// The model is loaded with llama_model_params::no_alloc ("only load metadata and simulate memory
// allocations"), so a GGUF whose tensor data is a sparse hole of the right size works and an 8B
// shape costs no memory; llama_context then logs the sizes it would allocate:
//   llama_kv_cache:        CPU KV buffer size = ... MiB        (src/llama-kv-cache.cpp)
//   llama_context:  CPU  output buffer size = ... MiB          (llama_context constructor)
//   sched_reserve:         CPU compute buffer size = ... MiB   (llama_context::sched_reserve)
// printed with two decimals; this tool prints each as one JSON line with the parameters.
//
// usage: memory_probe MODEL.gguf -c N -ub N [-b N] [-np N] [-fa on|off] [-kvu 0|1] [-ctk T] [-ctv T]
#include "ggml-backend.h"
#include "llama.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {
std::vector<std::string> g_lines;

// Keeps the buffer-size lines; passes llama.cpp's warnings and errors on to stderr.
void capture(ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
    const std::string s = text;
    if (s.find("buffer size") != std::string::npos) g_lines.push_back(s);
}

ggml_type type_by_name(const char * n) {
    if (!strcmp(n, "f16")) return GGML_TYPE_F16;
    if (!strcmp(n, "f32")) return GGML_TYPE_F32;
    if (!strcmp(n, "q8_0")) return GGML_TYPE_Q8_0;
    if (!strcmp(n, "q4_0")) return GGML_TYPE_Q4_0;
    fprintf(stderr, "memory_probe: unknown cache type %s\n", n);
    exit(2);
}

// "llama_context:        CPU compute buffer size =   123.45 MiB" -> ("compute", 123.45)
bool parse(const std::string & line, std::string & kind, double & mib) {
    const size_t at = line.find(" buffer size");
    const size_t eq = line.find('=', at);
    if (at == std::string::npos || eq == std::string::npos) return false;
    size_t b = line.rfind(' ', at - 1);
    kind = line.substr(b + 1, at - b - 1);
    mib = atof(line.c_str() + eq + 1);
    return true;
}
}  // namespace

int main(int argc, char ** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: memory_probe MODEL.gguf -c N -ub N [-b N] [-np N] [-fa on|off] [-kvu 0|1] [-ctk T] [-ctv T]\n");
        return 2;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 4096;
    cp.n_batch = 2048;
    cp.n_ubatch = 512;
    cp.n_seq_max = 1;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    cp.kv_unified = true;
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        const char * v = argv[i + 1];
        if (k == "-c") cp.n_ctx = (uint32_t) atoi(v);
        else if (k == "-ub") cp.n_ubatch = (uint32_t) atoi(v);
        else if (k == "-b") cp.n_batch = (uint32_t) atoi(v);
        else if (k == "-np") cp.n_seq_max = (uint32_t) atoi(v);
        else if (k == "-fa") cp.flash_attn_type = !strcmp(v, "on") ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
        else if (k == "-kvu") cp.kv_unified = atoi(v) != 0;
        else if (k == "-ctk") cp.type_k = type_by_name(v);
        else if (k == "-ctv") cp.type_v = type_by_name(v);
        else {
            fprintf(stderr, "memory_probe: unknown option %s\n", k.c_str());
            return 2;
        }
    }
    llama_log_set(capture, nullptr);
    // the CPU backends are shared objects (libggml-cpu-*.so) next to libllama, loaded at run time
    Dl_info info;
    if (dladdr((void *) &llama_decode, &info) && info.dli_fname) {
        const std::string dir = info.dli_fname;
        ggml_backend_load_all_from_path(dir.substr(0, dir.rfind('/')).c_str());
    }
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.no_alloc = true;
    mp.load_mode = LLAMA_LOAD_MODE_NONE;
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "memory_probe: cannot load %s\n", argv[1]);
        return 1;
    }
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "memory_probe: cannot create the context\n");
        return 1;
    }
    printf("{\"n_ctx\": %u, \"n_ubatch\": %u, \"n_batch\": %u, \"n_seq_max\": %u, \"flash_attn\": %s, \"kv_unified\": %s, "
           "\"n_vocab\": %d, \"n_embd\": %d, \"n_layer\": %d, \"n_head\": %d, \"n_head_kv\": %d",
           llama_n_ctx(ctx), llama_n_ubatch(ctx), llama_n_batch(ctx), llama_n_seq_max(ctx),
           cp.flash_attn_type == LLAMA_FLASH_ATTN_TYPE_ENABLED ? "true" : "false", cp.kv_unified ? "true" : "false",
           llama_vocab_n_tokens(llama_model_get_vocab(model)), llama_model_n_embd(model), llama_model_n_layer(model),
           llama_model_n_head(model), llama_model_n_head_kv(model));
    for (const auto & l : g_lines) {
        std::string kind;
        double mib = 0;
        if (parse(l, kind, mib) && (kind == "compute" || kind == "output")) printf(", \"%s_mib\": %.2f", kind.c_str(), mib);
    }
    printf("}\n");
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
