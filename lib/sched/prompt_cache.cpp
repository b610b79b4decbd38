#include "sched/prompt_cache.h"

#include <algorithm>
#include <climits>

namespace kvsim {

namespace {
// Tokens of block b of r's prompt: 0 past the prompt's end (a trace may list more hash_ids than
// the prompt has blocks at this block size), never negative; 64-bit so b * block cannot overflow.
int32_t block_len(const request & r, size_t b, int32_t block) {
    const int64_t left = (int64_t) r.n_prompt - (int64_t) b * block;
    return (int32_t) std::clamp<int64_t>(left, 0, block);
}

}  // namespace

int32_t prompt_common_prefix(const request & a, const request & b, int32_t block_tokens) {
    int32_t lcp = 0;
    for (size_t i = 0; i < a.hash_ids.size() && i < b.hash_ids.size() && a.hash_ids[i] == b.hash_ids[i]; ++i) {
        const int32_t la = block_len(a, i, block_tokens), lb = block_len(b, i, block_tokens);
        if (la == 0 || lb == 0) break;   // ids beyond the prompt's blocks
        lcp += std::min(la, lb);
        if (la != lb) break;
    }
    return lcp;
}

std::vector<llama_pos> in_cell_order(saved_cells c) {
    // sorted only when a restore needs it: saving is frequent, restoring rare
    if (!std::is_sorted(c.begin(), c.end())) std::sort(c.begin(), c.end());
    std::vector<llama_pos> pos;
    pos.reserve(c.size());
    for (const auto & [cell, p] : c) pos.push_back(p);
    return pos;
}

std::vector<std::vector<llama_pos>> in_cell_order(const std::vector<saved_cells> & per_cache) {
    std::vector<std::vector<llama_pos>> v;
    for (const auto & c : per_cache) v.push_back(in_cell_order(c));
    return v;
}

void prompt_tokens::keep_first(int32_t k) {
    n = std::min(n, std::max(0, k));
    n_head = std::min(n_head, n);
}

int32_t prompt_tokens::common_prefix(const request & rq, int32_t block_tokens) const {
    if (!req || n_head == 0) return 0;
    const int32_t lcp = &rq == req ? rq.n_prompt : prompt_common_prefix(*req, rq, block_tokens);
    return std::min(lcp, n_head);
}

int32_t prompt_tokens::common_prefix(const prompt_tokens & o, int32_t block_tokens) const {
    if (!req || !o.req) return 0;
    const int32_t lcp = req == o.req ? req->n_prompt : prompt_common_prefix(*req, *o.req, block_tokens);
    const bool equal_prompts = lcp == req->n_prompt && lcp == o.req->n_prompt;
    if (equal_prompts && !shifted && !o.shifted) return std::min(n, o.n);
    return std::min({lcp, n_head, o.n_head});
}

namespace {
// Whether prompt position i of r lies in a listed hash_id block (else its token is unique to r).
bool in_block(const request & r, int32_t i, int32_t block) { return (size_t) (i / block) < r.hash_ids.size(); }
}  // namespace

int32_t prompt_tokens::match_run(int32_t i, const request & rq, int32_t j, int32_t block_tokens) const {
    if (!req) return 0;
    const request & a = *req;
    const int32_t i0 = i;
    while (i < n_head && j < rq.n_prompt) {
        const bool ha = in_block(a, i, block_tokens), hb = in_block(rq, j, block_tokens);
        int32_t step = INT32_MAX;
        if (ha && hb) {
            if (i % block_tokens != j % block_tokens || a.hash_ids[(size_t) (i / block_tokens)] != rq.hash_ids[(size_t) (j / block_tokens)]) break;
            step = block_tokens - i % block_tokens;
        } else if (ha || hb || &a != &rq || i != j) {
            break;
        }
        step = std::min({step, n_head - i, rq.n_prompt - j});
        i += step;
        j += step;
    }
    return i - i0;
}

int32_t prompt_tokens::next_candidate(int32_t i, const request & rq, int32_t j, int32_t block_tokens) const {
    if (!req || i >= n_head || j >= rq.n_prompt) return n_head;
    if (!in_block(rq, j, block_tokens)) return &rq == req && i <= j ? j : n_head;   // request-unique: only itself
    const int32_t k = j % block_tokens;   // a block token equals only the same block's token at the same offset
    const int64_t next = (int64_t) i + ((k - i % block_tokens) % block_tokens + block_tokens) % block_tokens;
    return (int32_t) std::min<int64_t>(next, n_head);
}

size_t server_prompt::checkpoint_bytes() const {
    size_t b = 0;
    for (const auto & c : checkpoints) b += c.bytes;
    return b;
}

prompt_cache::prompt_cache(int32_t limit_mib, size_t limit_tokens, int32_t block_tokens)
    : limit_bytes_((size_t) 1024 * 1024 * (size_t) std::max(0, limit_mib)), limit_tokens_(limit_tokens),
      block_tokens_(block_tokens) {}

size_t prompt_cache::bytes() const {
    size_t b = 0;
    for (const auto & s : states_) b += s.bytes();
    return b;
}

size_t prompt_cache::n_tokens() const {
    size_t n = 0;
    for (const auto & s : states_) n += (size_t) s.prompt.tokens.n;
    return n;
}

bool prompt_cache::contains(const server_prompt & p) const {
    return std::any_of(states_.begin(), states_.end(),
                       [&](const prompt_cache_state & s) { return s.prompt.tokens.common_prefix(p.tokens, block_tokens_) == p.tokens.n; });
}

prompt_cache_state * prompt_cache::alloc(const server_prompt & p, size_t state_bytes) {
    const size_t new_bytes = state_bytes + p.checkpoint_bytes();
    if (limit_bytes_ > 0 && new_bytes > limit_bytes_) return nullptr;
    for (auto it = states_.begin(); it != states_.end();) {
        if (it->prompt.tokens.common_prefix(p.tokens, block_tokens_) == it->prompt.tokens.n) {
            it = states_.erase(it);
        } else {
            ++it;
        }
    }
    if (limit_bytes_ > 0) {
        size_t have = bytes();
        while (!states_.empty() && have + new_bytes > limit_bytes_) {
            have -= states_.front().bytes();
            states_.pop_front();
            ++evictions_;
        }
    }
    prompt_cache_state & s = states_.emplace_back();
    s.prompt = p;
    s.state_bytes = state_bytes;
    return &s;
}

std::list<prompt_cache_state>::iterator prompt_cache::best_for(const prompt_tokens & cur, const request & rq) {
    const int32_t lcp_best = cur.common_prefix(rq, block_tokens_);
    float f_keep_best = cur.n > 0 ? float(lcp_best) / (float) cur.n : -1.0f;
    float f_sim_best = float(lcp_best) / (float) rq.n_prompt;
    auto best = states_.end();
    for (auto it = states_.begin(); it != states_.end(); ++it) {
        const int32_t lcp = it->prompt.tokens.common_prefix(rq, block_tokens_);
        const float f_keep = float(lcp) / (float) it->prompt.tokens.n;
        const float f_sim = float(lcp) / (float) rq.n_prompt;
        if (f_keep < 0.25f) continue;   // "don't trash large prompts"
        if (f_keep_best < f_keep && f_sim_best < f_sim) {
            f_keep_best = f_keep;
            f_sim_best = f_sim;
            best = it;
        }
    }
    return best;
}

void prompt_cache::update() {
    size_t have = bytes();
    if (limit_bytes_ > 0) {
        while (!states_.empty() && have > limit_bytes_) {
            have -= states_.front().bytes();
            states_.pop_front();
            ++evictions_;
        }
    }
    size_t toks = n_tokens();
    const float per_token = std::max(1.0f, float(have) / (float) std::max<size_t>(1, toks));
    const size_t limit_cur = limit_bytes_ > 0 ? std::max(limit_tokens_, (size_t) ((float) limit_bytes_ / per_token)) : limit_tokens_;
    if (limit_tokens_ > 0) {
        while (!states_.empty() && toks > limit_cur) {
            toks -= (size_t) states_.front().prompt.tokens.n;
            states_.pop_front();
            ++evictions_;
        }
    }
}

}  // namespace kvsim
