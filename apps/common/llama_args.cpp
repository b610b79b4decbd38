#include "common/llama_args.h"

#include "core/errors.h"

#include <fmt/format.h>

#include <map>

namespace kvsim {

std::vector<std::string> rewrite_llama_args(int argc, char ** argv) {
    static const std::map<std::string, std::string> alias = {
        {"-np", "--parallel"},         {"-ub", "--ubatch-size"},      {"-kvu", "--kv-unified"},
        {"-ctk", "--cache-type-k"},    {"-ctv", "--cache-type-v"},    {"-fa", "--flash-attn"},
        {"-no-kvu", "--no-kv-unified"}, {"-cram", "--cache-ram"},     {"-ctxcp", "--ctx-checkpoints"},
        {"-sps", "--slot-prompt-similarity"}, {"-cms", "--checkpoint-min-step"},
    };
    std::vector<std::string> out;
    for (int i = 0; i < argc; ++i) {
        std::string a = argv[i];
        const auto eq = a.find('=');
        const auto it = alias.find(a.substr(0, eq));
        if (i > 0 && it != alias.end()) {
            a = it->second + (eq == std::string::npos ? "" : a.substr(eq));
        }
        out.push_back(a);
    }
    return out;
}

void check_context_flags(const context_params & p) {
    if (p.n_ctx == 0 || p.n_ctx > (1u << 30)) throw usage_error(fmt::format("n_ctx (-c) must be in [1, 2^30], got {}", p.n_ctx));
    if (p.n_seq_max == 0 || p.n_seq_max > (uint32_t) LLAMA_MAX_SEQ) {
        throw usage_error(fmt::format("n_seq_max (-np) must be in [1, {}], got {}", LLAMA_MAX_SEQ, p.n_seq_max));
    }
    if (p.n_batch == 0 || p.n_ubatch == 0) throw usage_error("n_batch (-b) and n_ubatch (-ub) must be > 0");
    if (!p.flash_attn && ggml_is_quantized(p.type_v)) {
        throw usage_error("quantized V cache was requested, but this requires Flash Attention (-fa on)");
    }
}

}  // namespace kvsim
