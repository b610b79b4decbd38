// llama-server's view of a slot's cached tokens, its context checkpoints and the host-RAM prompt
// cache, for request traces whose prompts are known only as lengths and Mooncake hash_ids.
// Source: tools/server/server-task.h: server_prompt, server_prompt_cache_state;
// tools/server/server-task.cpp: server_prompt_cache::alloc, load, update;
// common/common.h: common_prompt_checkpoint.
#pragma once

#include "trace/request_trace.h"
#include "core/types.h"

#include <cstddef>
#include <cstdint>
#include <list>
#include <vector>

namespace kvsim {

// A slot's prompt.tokens (server_tokens), by reference to the request whose prompt heads it:
// [0, n_head) are that prompt's tokens; after a context shift, [tail_pos, tail_pos + tail_n) are its tokens from
// tail_src on, which the shift moved there; the rest are generated tokens, which never equal a prompt token (the
// oracle bans them).
struct prompt_tokens {
    const request * req = nullptr;
    int32_t n = 0;         // prompt.n_tokens()
    int32_t n_head = 0;    // leading tokens equal to req's prompt
    bool shifted = false;  // a context shift moved tokens (the generated ones then follow no known prompt)
    int32_t tail_pos = 0, tail_src = 0, tail_n = 0;

    void clear() { *this = {}; }
    // server_tokens::keep_first
    void keep_first(int32_t k);
    // The context shift's edit of the token list: [p0, p0 + n_discard) removed, the tokens after it moved down.
    void discard(int32_t p0, int32_t n_discard);
    // server_tokens::get_common_prefix with a request's prompt: match_run from position 0 of both
    int32_t common_prefix(const request & rq, int32_t block_tokens) const;
    // get_common_prefix of two token lists. Equal prompts generate equal tokens (greedy sampling
    // with the same weights), so two unshifted lists with equal prompts share min(n, other.n).
    int32_t common_prefix(const prompt_tokens & o, int32_t block_tokens) const;
    // The run of equal tokens from this list's position i and rq's prompt position j, as server_tokens compares
    // them: tokens of one hash_id block at one offset are equal, request-unique tokens only to themselves,
    // generated tokens to nothing (the oracle's token ids; docs/trace-formats.md). 0 = differ.
    int32_t match_run(int32_t i, const request & rq, int32_t j, int32_t block_tokens) const;
    // The first position >= i whose token can equal rq's token at j (INT32_MAX when none): the scan of the
    // --cache-reuse loop skips the others, which it would pass one at a time without effect.
    int32_t next_candidate(int32_t i, const request & rq, int32_t j, int32_t block_tokens) const;

private:
    // The offset in req's prompt of the token at position i, and in `run` how many positions from i continue it;
    // -1 (run 0) for a generated token.
    int32_t source_at(int32_t i, int32_t & run) const;
};

// common_prompt_checkpoint: the SWA cache of one sequence, saved before a prompt chunk is decoded.
// The cells of one sequence in one cache as a state blob saves them: (cell index, pos) pairs,
// kept in position order; the blob lists them in cell order (in_cell_order), which a restore needs.
using saved_cells = std::vector<std::pair<uint32_t, llama_pos>>;
// Positions of `c` in cell order.
std::vector<llama_pos> in_cell_order(saved_cells c);
// in_cell_order of every cache's list.
std::vector<std::vector<llama_pos>> in_cell_order(const std::vector<saved_cells> & per_cache);

struct context_checkpoint {
    int64_t n_tokens = 0;     // prompt tokens before the chunk
    int id_task = -1;         // request index that created it
    llama_pos pos_min = -1;   // seq_pos_min / seq_pos_max when it was made
    llama_pos pos_max = -1;
    size_t bytes = 0;         // llama_state_seq_get_size_ext(PARTIAL_ONLY)
    std::vector<saved_cells> cells;   // per cache: the saved cells (base left empty for iSWA)
    std::vector<saved_cells> draft_cells;   // speculative decoding: the draft's, alike (a cache without SWA: all)
};

// server_prompt: tokens plus the slot's checkpoints.
struct server_prompt {
    prompt_tokens tokens;
    std::list<context_checkpoint> checkpoints;

    void clear() {
        tokens.clear();
        checkpoints.clear();
    }
    size_t checkpoint_bytes() const;
};

// One saved slot state (server_prompt_cache_state): its prompt, and per cache the positions of the
// sequence's cells in cell order (what the state blob holds; a restore places them again).
struct prompt_cache_state {
    server_prompt prompt;
    std::vector<saved_cells> cells;   // per cache
    std::vector<saved_cells> draft_cells;   // speculative decoding: the draft context's, per cache (else empty)
    size_t state_bytes = 0;   // llama_state_seq_get_size_ext(NONE)
    size_t bytes() const { return state_bytes + prompt.checkpoint_bytes(); }
};

// server_prompt_cache: a list of saved states, oldest first, bounded by limit_mib (--cache-ram;
// -1 = no limit) and by limit_tokens (n_ctx), which grows when the byte limit allows more.
class prompt_cache {
public:
    prompt_cache(int32_t limit_mib, size_t limit_tokens, int32_t block_tokens);

    // server_prompt_cache::alloc's first refusal: a cached state already holds all of p's tokens.
    // Split out so the caller checks it before gathering the state's cells.
    bool contains(const server_prompt & p) const;
    // The rest of server_prompt_cache::alloc, for a `p` that !contains(p): nullptr when `bytes`
    // alone exceeds the limit; otherwise removes the states that `p` contains, makes room (oldest
    // first) and appends an empty state for the caller to fill.
    prompt_cache_state * alloc(const server_prompt & p, size_t state_bytes);
    // server_prompt_cache::load: the state to restore for a slot holding `cur` that gets `rq`:
    // the one with both the best kept fraction (>= 0.25) and the best similarity, strictly better
    // than the slot's own; end() when none.
    std::list<prompt_cache_state>::iterator best_for(const prompt_tokens & cur, const request & rq);
    std::list<prompt_cache_state>::iterator end() { return states_.end(); }
    void erase(std::list<prompt_cache_state>::iterator it) { states_.erase(it); }
    // server_prompt_cache::update: evict oldest states over the byte limit, then over the token limit.
    void update();

    size_t bytes() const;
    size_t n_tokens() const;
    size_t n_states() const { return states_.size(); }
    uint64_t evictions() const { return evictions_; }

private:
    std::list<prompt_cache_state> states_;
    size_t limit_bytes_ = 0;    // 0 = no limit
    size_t limit_tokens_ = 0;   // 0 = no limit
    int32_t block_tokens_;
    uint64_t evictions_ = 0;
};

}  // namespace kvsim
