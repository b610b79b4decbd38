// server_sim's requests for several completions (n_cmpl > 1): the request's slot processes the prompt; each extra
// completion gets a free slot of its own that waits (SLOT_STATE_WAIT_OTHER) until the prompt is decoded, then takes a
// copy of the first slot's cells (seq_rm + seq_cp) and generates on its own; an extra completion's cells are removed
// when it ends.
// Source (llama.cpp at the oracles' commit): tools/server/server-context.cpp: process_single_task (the parent branch),
// get_free_slots, launch_slots_with_parent_task, launch_slot_with_task, update_slots' decode loop ("handle `n_cmpl > 1`
// tasks"), server_slot::copy_state_to, server_slot::release, pre_decode ("context shift cannot be used for shared
// prompt").
#include "sched/server_sim.h"
#include "sched/server_slot.h"

namespace kvsim {

// get_free_slots + the child half of launch_slots_with_parent_task: the first idle slots other than the parent's, in
// slot order, each launched with one extra completion. false (nothing launched) when there are too few.
bool server_sim::launch_children(slot_t & parent, size_t req) {
    const size_t n = (size_t) trace_->requests[req].n_cmpl - 1;
    std::vector<slot_t *> free;
    for (auto & s : slots_) {
        if (free.size() >= n) break;
        if (!s.processing() && s.id != parent.id) free.push_back(&s);
    }
    if (free.size() < n) return false;
    for (size_t k = 0; k < n; ++k) launch(*free[k], first_child_[req] + k, req);
    return true;
}

// After a decoded view: every parent whose prompt is done hands its cells to its waiting children (copy_state_to:
// seq_rm of the child's sequence, seq_cp of the parent's whole sequence, the parent's sampling index and prompt).
void server_sim::copy_to_children() {
    for (auto & p : slots_) {
        if (!p.parent || p.st != slot_t::state::done_prompt) continue;
        for (auto & c : slots_) {
            if (!c.child || c.req != p.req || c.st != slot_t::state::wait_other) continue;
            mem_seq_rm(c.id, -1, -1);
            mem_seq_cp(p.id, c.id, -1, -1);
            c.i_batch = p.i_batch;
            c.prompt = p.prompt;   // prompt.clone(): the tokens and the checkpoints
            results_[c.task].n_prefix_reused = results_[p.task].n_prefix_reused;   // stats
            c.st = slot_t::state::done_prompt;
        }
    }
}

// A completion that fails fails its request: the first error is the HTTP response (server_response_reader::
// wait_for_all), and the reader's stop() cancels the request's other tasks; the cancel tasks go to the front of the
// queue, so those slots are released at the start of the next iteration (cancel_completions).
void server_sim::fail_completions(const slot_t & failed, const std::string & err) {
    request_result & r = results_[failed.req];
    if (failed.child && r.outcome != request_outcome::failed) {
        r.outcome = request_outcome::failed;
        r.error = err;
    }
    for (auto & c : slots_) {
        if (&c != &failed && c.processing() && c.req == failed.req) c.cancel = true;
    }
}

// The cancel tasks of failed requests' other completions (SERVER_TASK_TYPE_CANCEL: the slot released).
void server_sim::cancel_completions() {
    for (auto & s : slots_) {
        if (s.cancel && s.processing()) release(s, request_outcome::failed, results_[s.req].error);
    }
}

}  // namespace kvsim
