#include "common/llama_args.h"

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

}  // namespace kvsim
