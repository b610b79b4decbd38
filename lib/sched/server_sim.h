// llama-server's slot loop driving the cache with a request trace: n_parallel slots, one
// sequence per slot, FIFO admission, continuous batching under n_batch, context shift or stop,
// prompt-prefix reuse, and the decode-failure policy (free idle slots / halve the batch / fail).
// Source: tools/server/server-context.cpp: update_slots, pre_decode, get_available_slot,
// process_token, try_clear_idle_slots, decode; server_slot::release, prompt_clear.
#pragma once

#include "replay/op_runner.h"
#include "sched/step_time.h"
#include "trace/request_trace.h"

#include <deque>
#include <functional>
#include <string>
#include <vector>

namespace kvsim {

enum class arrival_mode { trace, saturate };

struct server_params {
    arrival_mode arrivals = arrival_mode::trace;
    bool context_shift = false;   // --context-shift (off by default since llama.cpp PR #15416)
    int32_t n_keep = 0;           // --keep: tokens kept at a shift; -1 = the whole prompt
    int32_t n_discard = 0;        // 0 = n_left / 2
    bool add_bos = true;          // llama-style vocabularies add BOS: n_keep + 1
    bool cache_prompt = true;     // reuse the slot's own cached prefix (server default)
    bool share_prefix = true;     // kvsim: also copy a longer prefix from another slot (seq_cp)
    float slot_prompt_similarity = 0.1f;   // --slot-prompt-similarity
    int32_t block_tokens = 512;   // tokens per Mooncake hash_id block
};

enum class request_outcome { done, truncated, failed, pending };
const char * request_outcome_name(request_outcome o);

// Per-request result; times in simulated seconds from the start of the replay.
struct request_result {
    long line = 0;
    int slot = -1;
    int32_t n_prompt = 0;
    int32_t n_gen_target = 0;
    int32_t n_gen = 0;            // tokens generated
    int32_t n_prefix_reused = 0;  // prompt tokens found in the cache
    bool prefix_shared = false;   // reused through seq_cp from another slot
    int32_t n_shifts = 0;         // context shifts of this request
    double arrival = 0, admission = -1, first_token = -1, finish = -1;
    request_outcome outcome = request_outcome::pending;
    std::string error;
};

struct server_totals {
    uint64_t steps = 0;              // update_slots iterations that decoded something
    uint64_t decode_calls = 0;
    uint64_t decode_no_slot = 0;     // llama_decode returned 1
    uint64_t batch_halvings = 0;
    uint64_t idle_slot_purges = 0;   // try_clear_idle_slots freed a slot
    uint64_t context_exceeded = 0;   // "Context size has been exceeded." events
    uint64_t context_shifts = 0;
    uint64_t prefix_hits = 0;
    uint64_t prefix_shared_hits = 0;
    uint64_t prefix_tokens_reused = 0;
    uint64_t prompt_tokens_decoded = 0;
    uint64_t gen_tokens_decoded = 0;
    double sim_seconds = 0;
    bool interrupted = false;        // Ctrl-C: stopped between steps; unfinished requests stay pending
};

// Time and step bookkeeping the scheduler exposes to observers (occupancy rows).
struct sched_clock {
    uint64_t step = 0;
    double now = 0;
};

class server_sim {
public:
    // run: the op door (dumps/records/observes every cache call); n_parallel = ctx n_seq_max.
    // tm is read at every step (measured costs may refine it during the replay).
    server_sim(op_runner & run, const server_params & p, const step_time_model & tm);
    ~server_sim();

    // Replays all requests to completion, or until interrupted() (lib/util/interrupt.h) is set
    // between two steps. progress(done, total) after each step (optional).
    void run(const request_trace & t, const std::function<void(size_t, size_t)> & progress = {});

    const std::vector<request_result> & results() const { return results_; }
    const server_totals & totals() const { return totals_; }
    const sched_clock & clock() const { return clock_; }
    // Work of the ubatches of the decode call in flight; filled by the observer hook.
    std::vector<std::vector<ubatch_work>> & current_work() { return work_; }

private:
    struct slot_t;
    struct batch_tok;

    void admit(const request_trace & t, size_t & next_arrival, std::deque<size_t> & queue);
    slot_t * pick_slot(const request & rq);
    void start_prompt(slot_t & s, const request_trace & t);
    int32_t reuse_prefix(slot_t & s, const request & rq);
    void context_shift(slot_t & s);
    void build_batch(std::vector<batch_tok> & batch, const request_trace & t);
    bool decode_batch(std::vector<batch_tok> & batch);
    void post_decode(const std::vector<batch_tok> & batch, size_t off, size_t n);
    void finish(slot_t & s, request_outcome o, const std::string & err = {});
    bool clear_idle_slot();
    int32_t common_prefix(const slot_t & s, const request & rq) const;
    long next_line() { return ++op_line_; }

    op_runner & run_;
    server_params p_;
    const step_time_model & tm_;
    int32_t n_ctx_slot_;
    std::vector<slot_t> slots_;
    std::vector<request_result> results_;
    const request_trace * trace_ = nullptr;
    server_totals totals_;
    sched_clock clock_;
    std::vector<std::vector<ubatch_work>> work_;
    llama_batch_in decode_buf_;   // reused by decode_batch: one llama_decode input per step, capacity kept
    long op_line_ = 0;
    int64_t n_released_ = 0;
    size_t n_finished_ = 0;
};

}  // namespace kvsim
