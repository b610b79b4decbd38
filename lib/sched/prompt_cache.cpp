#include "sched/prompt_cache.h"

#include <algorithm>
#include <climits>

namespace kvsim {

namespace {
// The tokens two requests' prompts share from their start (prompt_tokens::match_run's token equality).
int32_t prompt_common_prefix(const request & a, const request & b, int32_t block_tokens) {
    prompt_tokens t;
    t.req = &a;
    t.n = t.n_head = a.n_prompt;
    return t.match_run(0, b, 0, block_tokens);
}
}  // namespace

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
    tail_n = std::clamp(n - tail_pos, 0, tail_n);
}

void prompt_tokens::discard(int32_t p0, int32_t n_discard) {
    const int32_t p1 = p0 + n_discard;
    // The run of prompt tokens that continues past p1: the head's, when it reaches past p0 (then there is no tail
    // yet: a tail starts at n_keep, where a shift leaves the head), else the tail's (which starts at p0).
    int32_t pos = tail_pos, src = tail_src, len = tail_n;
    if (n_head > p0) {
        pos = 0;
        src = 0;
        len = n_head;
    }
    const int32_t from = std::max(pos, p1);
    tail_n = std::max(0, pos + len - from);
    tail_src = src + (from - pos);
    tail_pos = from - n_discard;
    n_head = std::min(n_head, p0);
    n -= n_discard;
    shifted = true;
}

int32_t prompt_tokens::common_prefix(const request & rq, int32_t block_tokens) const {
    return match_run(0, rq, 0, block_tokens);
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

// The first position >= i of [start, start + len), whose token at `start` is prompt offset `src`, holding a block
// token at offset k of its block (INT32_MAX when none).
int32_t next_at_offset(int32_t i, int32_t start, int32_t src, int32_t len, int32_t k, int32_t block) {
    const int64_t from = std::max(i, start);
    const int64_t s = src + (from - start);
    const int64_t pos = from + ((k - s % block) % block + block) % block;
    return pos < (int64_t) start + len ? (int32_t) pos : INT32_MAX;
}
}  // namespace

int32_t prompt_tokens::source_at(int32_t i, int32_t & run) const {
    if (i < n_head) {
        run = n_head - i;
        return i;
    }
    if (i >= tail_pos && i < tail_pos + tail_n) {
        run = tail_pos + tail_n - i;
        return tail_src + (i - tail_pos);
    }
    run = 0;
    return -1;
}

int32_t prompt_tokens::match_run(int32_t i, const request & rq, int32_t j, int32_t block_tokens) const {
    if (!req) return 0;
    const request & a = *req;
    const int32_t j0 = j;
    while (j < rq.n_prompt) {
        int32_t avail = 0;
        const int32_t s = source_at(i, avail);
        if (s < 0) break;
        const bool ha = in_block(a, s, block_tokens), hb = in_block(rq, j, block_tokens);
        int32_t step = INT32_MAX;
        if (ha && hb) {
            if (s % block_tokens != j % block_tokens || a.hash_ids[(size_t) (s / block_tokens)] != rq.hash_ids[(size_t) (j / block_tokens)]) break;
            step = block_tokens - s % block_tokens;
        } else if (ha || hb || &a != &rq || s != j) {
            break;
        }
        step = std::min({step, avail, rq.n_prompt - j});
        i += step;
        j += step;
    }
    return j - j0;
}

int32_t prompt_tokens::next_candidate(int32_t i, const request & rq, int32_t j, int32_t block_tokens) const {
    if (!req || j >= rq.n_prompt) return INT32_MAX;
    if (!in_block(rq, j, block_tokens)) {   // a request-unique token: only the same request's token at offset j
        if (&rq != req) return INT32_MAX;
        if (j < n_head && i <= j) return j;
        const int32_t t = tail_pos + (j - tail_src);
        return j >= tail_src && j < tail_src + tail_n && i <= t ? t : INT32_MAX;
    }
    const int32_t k = j % block_tokens;   // a block token equals only the same block's token at the same offset
    return std::min(next_at_offset(i, 0, 0, n_head, k, block_tokens),
                    next_at_offset(i, tail_pos, tail_src, tail_n, k, block_tokens));
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
