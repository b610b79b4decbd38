// llama-server's task queue and slot loop driving the cache with a request trace, with the
// server's defaults: n_parallel slots, one sequence per slot; tasks deferred when no slot is free
// and moved to the queue front when one is released; slot choice by prompt similarity, else LRU;
// the host-RAM prompt cache (save, restore, idle-slot clearing); context checkpoints for SWA
// models; continuous batching under n_batch; context shift or stop; the decode-failure policy
// (clear an idle slot / halve the batch / fail every slot).
// Source (llama.cpp at the oracles' commit): tools/server/server-context.cpp:
// process_single_task, get_available_slot, try_clear_idle_slots, update_slots, pre_decode, decode,
// post_decode, process_token, create_checkpoint, n_ctx_slot; server_slot::release, prompt_save,
// prompt_load, prompt_clear; tools/server/server-queue.cpp: defer, pop_deferred_task.
#pragma once

#include "drive/op_runner.h"
#include "sched/prompt_cache.h"
#include "sched/request_result.h"
#include "sched/server_params.h"
#include "time/sim_clock.h"
#include "time/step_time.h"
#include "time/step_timer.h"
#include "trace/request_trace.h"

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace kvsim {

// The draft model's side of speculative decoding (server_params::spec enabled): its context and cache behind their
// own op door, and its step-time model (its llama_decode calls take simulated time on the scheduler's one clock).
struct draft_binding {
    op_runner & run;
    step_time_model tm;
};

struct server_totals {
    uint64_t steps = 0;              // update_slots iterations that decoded something
    uint64_t decode_calls = 0;
    uint64_t decode_no_slot = 0;     // llama_decode returned non-zero
    uint64_t batch_halvings = 0;
    uint64_t idle_slot_purges = 0;   // try_clear_idle_slots cleared a slot after a failed decode
    uint64_t context_exceeded = 0;   // "Context size has been exceeded." / invalid batch events
    uint64_t context_shifts = 0;
    uint64_t prefix_hits = 0;        // requests that kept cached tokens (n_past > 0)
    uint64_t prefix_tokens_reused = 0;
    uint64_t cache_reuse_chunks = 0; // --cache-reuse: cached runs moved to their new prompt position (seq_rm + seq_add)
    uint64_t cache_reuse_tokens = 0;
    uint64_t prompt_tokens_decoded = 0;
    uint64_t gen_tokens_decoded = 0;
    // host-RAM prompt cache (server_prompt_cache)
    uint64_t ram_saves = 0;          // slot states saved
    uint64_t ram_restores = 0;       // states restored into a slot
    uint64_t ram_cells_restored = 0;
    uint64_t ram_evictions = 0;
    uint64_t idle_slot_clears = 0;   // idle slots cleared at a launch (unified cache)
    uint64_t ram_peak_bytes = 0;
    uint64_t ram_peak_states = 0;
    // context checkpoints (SWA models)
    uint64_t checkpoints_created = 0;
    uint64_t checkpoints_restored = 0;
    // speculative decoding (-md, --spec-type draft-simple)
    uint64_t draft_decode_calls = 0; // llama_decode calls on the draft context (drafting and mirroring the target's)
    uint64_t drafted_tokens = 0;     // tokens the draft model proposed (stats.n_draft_tokens)
    uint64_t accepted_tokens = 0;    // of them accepted by the target (stats.n_draft_accepted)
    double sim_seconds = 0;
    bool interrupted = false;        // Ctrl-C: stopped between steps; unfinished requests stay pending
};

class server_sim {
public:
    // run: the op door (dumps/records/observes every cache call); slots = ctx n_seq_max; each
    // slot's context = min(n_ctx_seq, the model's n_ctx_train) (n_ctx_slot). The scheduler's step
    // timer times every decode call with (its own copy of) tm and advances the clock. Throws
    // option_error for bad p (p.validate()).
    // draft: the draft model's door and time model; required when p.spec.enabled(), else ignored (may be null).
    server_sim(op_runner & run, const server_params & p, const step_time_model & tm, const draft_binding * draft = nullptr);
    ~server_sim();

    // Replays all requests to completion, or until interrupted() (lib/util/interrupt.h) is set
    // between two steps. progress(done, total) after each step (optional).
    void run(const request_trace & t, const std::function<void(size_t, size_t)> & progress = {});

    const std::vector<request_result> & results() const { return results_; }
    const server_totals & totals() const { return totals_; }
    const sim_clock & clock() const { return clock_; }
    // Step observers (steps.csv) and measured kernel times (attention_feedback) attach here.
    step_timer & timer() { return timer_; }
    const step_timer & timer() const { return timer_; }
    int32_t n_ctx_slot() const { return n_ctx_slot_; }
    // --context-shift was given but the memory cannot shift (llama_memory_can_shift), so it is off, as upstream.
    bool context_shift_refused() const { return context_shift_refused_; }
    // --cache-reuse was given but the memory cannot shift, so it is off, as upstream.
    bool cache_reuse_refused() const { return cache_reuse_refused_; }
    const server_params & params() const { return p_; }

private:
    struct slot_t;
    struct batch_tok;

    void enqueue_arrivals(const request_trace & t, size_t & next_arrival);
    void process_task(size_t task);
    slot_t * get_available_slot(const request & rq);
    void launch(slot_t & s, size_t task, size_t req);
    // n_cmpl (server_cmpl.cpp)
    bool launch_children(slot_t & parent, size_t req);
    void copy_to_children();
    void fail_completions(const slot_t & failed, const std::string & err);
    void cancel_completions();
    void cache_idle_slots();
    bool prompt_save(slot_t & s);
    void prompt_load(slot_t & s, const request & rq);
    void prompt_clear(slot_t & s);
    void release(slot_t & s, request_outcome o, const std::string & err = {});
    bool try_clear_idle_slots();
    void context_shift(slot_t & s);
    void pre_decode(std::vector<batch_tok> & batch);
    bool start_prompt(slot_t & s);
    int32_t reuse_chunks(slot_t & s, int32_t n_past);
    int32_t reuse_from_checkpoint(slot_t & s, int32_t n_past);
    void add_prompt_chunk(slot_t & s, std::vector<batch_tok> & batch);
    void create_checkpoint(slot_t & s, int32_t n_tokens_cur, llama_pos pos_min, llama_pos pos_max);
    void decode_batch(std::vector<batch_tok> & batch);
    void post_decode(const std::vector<batch_tok> & batch, size_t off, size_t n);
    bool sample_token(slot_t & s);
    // speculative decoding (server_spec.cpp)
    void mem_seq_rm(int slot, llama_pos p0, llama_pos p1);
    void mem_seq_add(int slot, llama_pos p0, llama_pos p1, llama_pos delta);
    void mem_seq_cp(int src, int dst, llama_pos p0, llama_pos p1);
    void draft_tokens(std::vector<batch_tok> & batch);
    int draft_call(const llama_batch_in & b);
    int draft_decode(const std::vector<std::pair<int, llama_pos>> & toks);
    void draft_mirror(const llama_batch_in & b);
    void verify_draft(slot_t & s);
    void fail_cut_drafts(size_t off, size_t n);
    std::vector<saved_cells> seq_saved_cells(const context & ctx, llama_seq_id s, bool swa_only) const;
    size_t seq_state_bytes(const context & ctx, const std::vector<saved_cells> & cells, bool swa_only) const;
    bool any_processing() const;
    long next_line() { return ++op_line_; }

    op_runner & run_;
    server_params p_;
    int32_t n_ctx_slot_;
    bool context_shift_refused_ = false;
    bool cache_reuse_refused_ = false;
    int32_t n_swa_;                  // the server's n_swa: the model's window, 0 with --swa-full
    std::vector<slot_t> slots_;
    std::vector<request_result> results_;
    const request_trace * trace_ = nullptr;
    std::deque<size_t> queue_;       // server_queue::queue_tasks (request indices)
    std::deque<size_t> deferred_;    // server_queue::queue_tasks_deferred
    std::unique_ptr<prompt_cache> ram_;
    server_totals totals_;
    sim_clock clock_;
    step_timer timer_;               // the one step-time computation per decode call; advances clock_
    ubatch_work_collector work_;     // the running decode call's placed ubatches, in front of the caller's observer
    llama_batch_in decode_buf_;      // reused by decode_batch: one llama_decode input per step, capacity kept
    // speculative decoding: the draft's door, timer and placed ubatches; per drafted position P(accepted | the ones before were)
    op_runner * draft_run_ = nullptr;
    std::unique_ptr<step_timer> draft_timer_;
    std::optional<ubatch_work_collector> draft_work_;
    std::vector<double> accept_draws_;
    std::vector<std::mt19937> synth_rng_;   // per slot: spec_synth_rng, seeded with the request's seed at launch
                                            // (apart from slot_t, whose loops it would slow)
    llama_batch_in draft_buf_;
    long op_line_ = 0;
    int64_t n_released_ = 0;
    size_t n_finished_ = 0;          // requests finished (their extra completions not counted)
    std::vector<size_t> first_child_;   // per request: the result index of its first extra completion (n_cmpl > 1)
    bool any_cmpl_ = false;             // some request asks for several completions (else their per-step work is skipped)
};

}  // namespace kvsim
