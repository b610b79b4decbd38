// server_sim's speculative decoding with a draft model (llama-server --spec-type draft-simple -md): the draft
// context mirrors every cache call of the target (common_memory) and every decoded batch (common_speculative_process),
// drafts n tokens per generating slot one decode at a time (common_speculative_impl_draft_simple::draft), and the
// target decodes each slot's sampled token with its draft and keeps the accepted prefix.
// Source (llama.cpp at the oracles' commit): tools/server/server-context.cpp: update_slots ("determine which slots
// are generating and drafting", "make checkpoints if needed"), server_slot::get_n_draft_max,
// handle_last_sampled_token, post_decode ("speculative decoding - main model sample and accept"),
// server_sample_and_accept_synth; common/common.cpp: common_memory; common/speculative.cpp.
#include "sched/server_sim.h"
#include "sched/server_slot.h"

#include "core/errors.h"

#include <algorithm>
#include <fmt/format.h>
#include <random>

namespace kvsim {

// common_memory::seq_rm / seq_add: the target's cache, then the draft's
void server_sim::mem_seq_rm(int slot, llama_pos p0, llama_pos p1) {
    run_.seq_rm(slot, p0, p1, next_line());
    if (draft_run_) draft_run_->seq_rm(slot, p0, p1, next_line());
}

void server_sim::mem_seq_add(int slot, llama_pos p0, llama_pos p1, llama_pos delta) {
    run_.seq_add(slot, p0, p1, delta, next_line());
    if (draft_run_) draft_run_->seq_add(slot, p0, p1, delta, next_line());
}

void server_sim::mem_seq_cp(int src, int dst, llama_pos p0, llama_pos p1) {
    run_.seq_cp(src, dst, p0, p1, next_line());
    if (draft_run_) draft_run_->seq_cp(src, dst, p0, p1, next_line());
}

// One llama_decode on the draft context; its simulated time on the clock. Returns the rc.
int server_sim::draft_call(const llama_batch_in & b) {
    draft_work_->work.clear();
    const int rc = draft_run_->decode(b, next_line());
    ++totals_.draft_decode_calls;
    draft_timer_->decode_done(rc, draft_work_->work, 0, rc == DECODE_OK ? b.pos.size() : 0);
    return rc;
}

// A drafting decode of (slot, pos) tokens.
int server_sim::draft_decode(const std::vector<std::pair<int, llama_pos>> & toks) {
    llama_batch_in & b = draft_buf_;
    b.pos.clear();
    b.seq_id.clear();
    for (const auto & [slot, pos] : toks) b.add(pos, {(llama_seq_id) slot});
    return draft_call(b);
}

// common_speculative_process after a target decode succeeded: the same tokens into the draft's cache.
void server_sim::draft_mirror(const llama_batch_in & b) {
    if (const int rc = draft_call(b); rc != DECODE_OK) {
        // upstream: "failed to process speculative batch", thrown out of update_slots
        throw usage_error(fmt::format("speculative decoding: the draft context could not decode the target's batch "
                                    "(llama_decode returned {}): llama-server fails the same way (\"failed to process "
                                    "speculative batch\"); give the draft more cells", rc));
    }
}

// The generating slots' tokens of this step: which slots draft (get_n_draft_max > 0), the draft model's decodes
// (the slots' last sampled tokens, then one drafted token per slot still drafting, --spec-draft-n-max in all, as
// with --spec-draft-p-min 0), the draft context's seq_rm of what it drafted, then per slot its sampled token and
// its draft (handle_last_sampled_token).
void server_sim::draft_tokens(std::vector<batch_tok> & batch) {
    struct drafting {
        slot_t * s;
        llama_pos pos0, pos_max;
        int32_t n;   // tokens it drafts (dp.n_max capped by --spec-draft-n-max)
    };
    std::vector<drafting> d;
    std::vector<std::pair<int, llama_pos>> toks;
    for (auto & s : slots_) {
        if (s.st != slot_t::state::generating) continue;
        s.n_draft = 0;
        // room for the sampled token and one more (a context shift), and the generation budget left
        int32_t n_draft_max = n_ctx_slot_ - s.prompt.tokens.n - 2;
        const int32_t n_remaining = s.n_predict_max == -1 ? -1 : s.n_predict_max - s.n_gen;
        if (n_remaining > 0) n_draft_max = std::min(n_draft_max, n_remaining - 1);
        if (n_draft_max <= 0) continue;
        d.push_back({&s, s.prompt.tokens.n, run_.ctx().memory().seq_pos_max(s.id), std::min(n_draft_max, p_.spec.n_max)});
        toks.emplace_back(s.id, s.prompt.tokens.n);
    }
    if (!d.empty()) {
        int32_t n_done = draft_decode(toks) == DECODE_OK ? 1 : 0;   // each slot drafted min(n, n_done) tokens
        int32_t n_longest = 0;
        for (const auto & x : d) n_longest = std::max(n_longest, x.n);
        for (int32_t k = 1; n_done == k && k < n_longest; ++k) {
            toks.clear();
            for (const auto & x : d) {
                if (x.n > k) toks.emplace_back(x.s->id, x.pos0 + k);
            }
            if (draft_decode(toks) == DECODE_OK) ++n_done;
        }
        for (auto & x : d) {
            x.n = std::min(x.n, n_done);
            if (x.n < p_.spec.n_min) x.n = 0;   // a draft shorter than --spec-draft-n-min is dropped
            draft_run_->seq_rm(x.s->id, x.pos_max + 1, -1, next_line());
            x.s->n_draft = x.n;
            results_[x.s->task].n_drafted += x.n;
            totals_.drafted_tokens += (uint64_t) x.n;
        }
    }
    for (auto & s : slots_) {
        if (s.st != slot_t::state::generating) continue;
        // a speculating slot samples through spec_i_batch, its i_batch stays unset
        (s.n_draft > 0 ? s.spec_i0 : s.i_batch) = (int32_t) batch.size();
        for (int32_t i = 0; i <= s.n_draft; ++i) batch.push_back({s.id, s.prompt.tokens.n++, false});
    }
}

// post_decode's first check: a speculating slot whose tokens are not all inside the decoded view (n_batch was halved
// after a failed decode) fails ("got exception", the slot released), as every view checks every slot.
void server_sim::fail_cut_drafts(size_t off, size_t n) {
    for (auto & s : slots_) {
        if (!s.processing() || s.n_draft == 0) continue;
        for (int32_t i = s.spec_i0; i <= s.spec_i0 + s.n_draft; ++i) {
            if (i >= (int32_t) off && i < (int32_t) (off + n)) continue;
            release(s, request_outcome::failed,
                    fmt::format("got exception: speculative batch index {} is not inside the current sub-batch [{}, {})", i, off,
                                off + n));
            break;
        }
    }
}

// The target's verdict on a slot's draft: drafted token i is accepted with probability rate i / rate i-1 once every
// one before it was (one draw per position of the slot's generator, as server_sample_and_accept_synth); the rejected
// ones leave both caches (seq_rm from the next position); each accepted token and the target's own count as
// generated, with process_token's stop conditions.
void server_sim::verify_draft(slot_t & s) {
    std::uniform_real_distribution<double> dist(0.0, 1.0);
    int32_t n_acc = 0;
    while (n_acc < s.n_draft && dist(synth_rng_[(size_t) s.id]) < accept_draws_[(size_t) n_acc]) ++n_acc;
    results_[s.task].n_draft_accepted += n_acc;
    totals_.accepted_tokens += (uint64_t) n_acc;
    s.prompt.tokens.keep_first(s.prompt.tokens.n - (s.n_draft - n_acc));
    s.n_draft = 0;
    mem_seq_rm(s.id, s.prompt.tokens.n, -1);
    for (int32_t i = 0; i <= n_acc; ++i) {
        if (sample_token(s)) return;
    }
}

}  // namespace kvsim
