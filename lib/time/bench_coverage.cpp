#include "time/bench_coverage.h"

#include <algorithm>
#include <fmt/format.h>
#include <map>

namespace kvsim {

namespace {
uint32_t quantile(std::vector<uint32_t> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, (size_t) (q * (double) (v.size() - 1) + 0.5))];
}

uint32_t round_up_256(uint32_t x) { return (x + 255) / 256 * 256; }

// The small calls (at most n_seq_max tokens) that make up 1 % of the calls or more, ascending.
std::vector<uint32_t> frequent_small(const std::vector<uint32_t> & tokens, uint32_t n_seq_max) {
    std::map<uint32_t, size_t> count;
    for (uint32_t t : tokens) {
        if (t <= n_seq_max) ++count[t];
    }
    std::vector<uint32_t> v;
    for (const auto & [t, n] : count) {
        if (n * 100 >= tokens.size()) v.push_back(t);
    }
    return v;
}
}  // namespace

void bench_coverage::on_step(const step_record & r) {
    if (r.kind != step_kind::decode || r.rc != 0) return;
    const auto tokens = (uint32_t) (r.n_prompt + r.n_gen);
    tokens_.push_back(tokens);
    if (r.n_prompt > 0) prompt_.push_back(tokens);
    n_kv_.push_back(r.n_kv);
}

std::string bench_coverage::command(const context_params & p) const {
    if (tokens_.empty()) return "";
    std::vector<uint32_t> pp = frequent_small(tokens_, p.n_seq_max);
    for (uint32_t t : {quantile(prompt_, 0.5), quantile(prompt_, 1.0)}) {
        const uint32_t c = std::min(t, p.n_batch);
        if (c > 0 && std::find(pp.begin(), pp.end(), c) == pp.end()) pp.push_back(c);
    }
    std::sort(pp.begin(), pp.end());
    std::vector<uint32_t> d = {0};
    for (uint32_t x : {round_up_256(quantile(n_kv_, 0.5)), round_up_256(quantile(n_kv_, 0.9))}) {
        if (std::find(d.begin(), d.end(), x) == d.end()) d.push_back(x);
    }
    return fmt::format("llama-bench -m MODEL.gguf -p {} -n 32 -d {} -ub {} -b {} -ctk {} -ctv {} -fa {} -r 5 -o json > bench.json",
                       fmt::join(pp, ","), fmt::join(d, ","), p.n_ubatch, p.n_batch, ggml_type_name(p.type_k),
                       ggml_type_name(p.type_v), p.flash_attn ? 1 : 0);
}

std::string bench_coverage::coverage(const context_params & p) const {
    size_t small = 0;
    for (uint32_t t : tokens_) small += t <= p.n_seq_max;
    return fmt::format("{} decode calls: {:.0f} % with 1-{} tokens (slots generating together), prompt calls median {} / "
                       "max {} tokens, n_kv median {} / p90 {}",
                       tokens_.size(), tokens_.empty() ? 0.0 : 100.0 * (double) small / (double) tokens_.size(), p.n_seq_max,
                       quantile(prompt_, 0.5), quantile(prompt_, 1.0), quantile(n_kv_, 0.5), quantile(n_kv_, 0.9));
}

}  // namespace kvsim
