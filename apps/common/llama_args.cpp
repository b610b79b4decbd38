#include "common/llama_args.h"

#include <cctype>
#include <map>

namespace kvsim {

const std::map<std::string, std::string> & llama_flag_aliases() {
    static const std::map<std::string, std::string> alias = {
        {"-np", "--parallel"},         {"-ub", "--ubatch-size"},      {"-kvu", "--kv-unified"},
        {"-ctk", "--cache-type-k"},    {"-ctv", "--cache-type-v"},    {"-fa", "--flash-attn"},
        {"-no-kvu", "--no-kv-unified"}, {"-cram", "--cache-ram"},     {"-ctxcp", "--ctx-checkpoints"},
        {"-sps", "--slot-prompt-similarity"}, {"-cms", "--checkpoint-min-step"}, {"-fit", "--fit"},
        {"-fitc", "--fit-ctx"},        {"-fitt", "--fit-target"},     {"-cb", "--cont-batching"},
        {"-nocb", "--no-cont-batching"}, {"-md", "--model-draft"}, {"-ctkd", "--cache-type-k-draft"},
        {"-ctvd", "--cache-type-v-draft"},
    };
    return alias;
}

std::vector<std::string> rewrite_llama_args(int argc, char ** argv) {
    const auto & alias = llama_flag_aliases();
    // -n is llama-server's --predict only where kvsim has that option (calibrate's --predict means something else)
    const bool server_cmd = argc > 1 && (std::string(argv[1]) == "replay" || std::string(argv[1]) == "plan");
    std::vector<std::string> out;
    bool values_only = false;   // after `--` every argument is a value (a file named -np), as CLI11 takes it
    for (int i = 0; i < argc; ++i) {
        std::string a = argv[i];
        if (values_only || (i > 0 && a == "--")) {
            values_only = true;
            out.push_back(a);
            continue;
        }
        const auto eq = a.find('=');
        const std::string name = a.substr(0, eq);
        const auto it = alias.find(name);
        const char * to = it != alias.end() ? it->second.c_str() : server_cmd && i > 1 && name == "-n" ? "--predict" : nullptr;
        if (i > 0 && to) a = to + (eq == std::string::npos ? "" : a.substr(eq));
        out.push_back(a);
    }
    return out;
}

usage_error said_in_flags(const option_error & e, const flag_names & flags) {
    std::string text = e.what();
    for (const std::string & field : e.fields()) {
        const auto it = flags.find(field);
        if (it == flags.end()) continue;
        const auto is_word = [](char c) { return std::isalnum((unsigned char) c) || c == '_'; };
        for (size_t at = text.find(field); at != std::string::npos; at = text.find(field, at)) {
            const size_t end = at + field.size();
            if ((at > 0 && is_word(text[at - 1])) || (end < text.size() && is_word(text[end]))) {
                at = end;   // part of a longer name (n_ctx in n_ctx_train)
                continue;
            }
            text.replace(at, field.size(), it->second);
            at += it->second.size();
        }
    }
    return usage_error(text);
}

}  // namespace kvsim
