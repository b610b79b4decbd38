#include "sched/server_sim.h"
#include "sched/server_slot.h"

#include <algorithm>
#include <climits>
#include <fmt/format.h>
#include <stdexcept>

#include "core/errors.h"
#include "util/interrupt.h"
#include "util/nvtx.h"

namespace kvsim {

const char * request_outcome_name(request_outcome o) {
    switch (o) {
        case request_outcome::done: return "done";
        case request_outcome::truncated: return "truncated";
        case request_outcome::failed: return "failed";
        case request_outcome::pending: return "pending";
    }
    return "pending";
}

namespace {
// Bytes of one cache's section of a sequence state blob holding `cells` cells over `n_layer`
// layers (llama_kv_cache::state_write, state_write_meta, state_write_data; one seq id per cell).
size_t cache_state_bytes(const kv_cache & c, size_t cells, uint32_t n_layer, size_t row_bytes) {
    size_t b = 4 + 4 * (size_t) c.get_n_stream();   // n_stream, cell_count per stream
    if (cells == 0) return b;
    b += cells * 12;                                 // pos, n_seq_id, seq_id
    b += 8 + (size_t) n_layer * 24;                  // v_trans, n_layer; type + row size, K and V
    return b + cells * (size_t) n_layer * row_bytes;
}

// Tokens a request generates: its trace length, cut at its limit (server-context.cpp: n_predict_max = the task's
// n_predict unless -1, else the server's -n; a request without the key sends its trace length); the first token
// always comes (n_remaining is checked after it).
int32_t gen_target(const request & rq, int32_t server_n_predict) {
    int32_t limit = rq.n_predict.value_or(rq.n_gen);
    if (limit == -1) limit = server_n_predict;
    return std::max(1, limit < 0 ? rq.n_gen : std::min(rq.n_gen, limit));
}
}  // namespace

server_sim::server_sim(op_runner & run, const server_params & p, const step_time_model & tm, const draft_binding * draft)
    : run_(run), p_(p), timer_(tm, clock_), work_(run.ctx(), tm) {
    p_.validate();
    if (p_.spec.enabled()) {
        if (!draft) throw std::logic_error("server_sim: speculative decoding without a draft context");
        draft_run_ = &draft->run;
        draft_timer_ = std::make_unique<step_timer>(draft->tm, clock_);
        draft_work_.emplace(draft->run.ctx(), draft->tm);
        accept_draws_ = p_.spec.acceptance_draws();
        synth_rng_.resize(run.ctx().params().n_seq_max);
    }
    const context & ctx = run.ctx();
    // server-context.cpp: n_ctx_slot(): the stream's cells, capped by --kv-unified-per-slot and the training context
    uint32_t slot = ctx.sizes().n_ctx_seq;
    if (p_.kv_unified_per_slot > 0) slot = std::min<uint32_t>(slot, (uint32_t) p_.kv_unified_per_slot);
    // the training context as the loaded server reads it: custom YaRN scaling raised it (llama_init_from_model)
    n_ctx_slot_ = (int32_t) std::min<uint32_t>(slot, n_ctx_train_after_init(ctx.model(), ctx.params().rope));
    n_swa_ = ctx.model().has_swa() && !ctx.params().swa_full ? (int32_t) ctx.model().n_swa : 0;
    // server_context_impl::load_model: "ctx_shift is not supported by this context, it will be disabled" (an iSWA
    // model whose SWA cache is smaller than its base cache)
    if (p_.context_shift && !ctx.memory().get_can_shift()) {
        p_.context_shift = false;
        context_shift_refused_ = true;
    }
    // ... and "cache_reuse is not supported by this context, it will be disabled"
    if (p_.n_cache_reuse > 0 && !ctx.memory().get_can_shift()) {
        p_.n_cache_reuse = 0;
        cache_reuse_refused_ = true;
    }
    slots_.resize(ctx.params().n_seq_max);
    for (size_t i = 0; i < slots_.size(); ++i) slots_[i].id = (int) i;
    if (p_.cache_ram_mib != 0) ram_ = std::make_unique<prompt_cache>(p_.cache_ram_mib, ctx.sizes().n_ctx, p_.block_tokens);
    // server_context_impl::init: --cache-idle-slots requires --cache-ram
    if (!ram_) p_.cache_idle_slots = false;
}

server_sim::~server_sim() = default;

// A slot with work to do (one whose request failed waits for its cancel, at the next iteration, with none).
bool server_sim::any_processing() const {
    return std::any_of(slots_.begin(), slots_.end(), [](const slot_t & s) { return s.processing() && !s.cancel; });
}

// Per cache (caches() order), seq s's cells as (cell, pos) in position order, SWA-masked cells
// left out: what llama_kv_cache::state_write puts in the blob. swa_only (PARTIAL_ONLY of an iSWA
// memory): the base cache's list stays empty.
std::vector<saved_cells> server_sim::seq_saved_cells(const context & ctx, llama_seq_id s, bool swa_only) const {
    const auto caches = ctx.memory().caches();
    std::vector<saved_cells> out(caches.size());
    for (size_t k = 0; k < caches.size(); ++k) {
        const kv_cache & c = *caches[k];
        if (swa_only && caches.size() > 1 && c.params().swa == swa_type::none) continue;
        const kv_cells & cells = c.cells(c.seq_to_stream(s));
        const llama_pos pmax = cells.seq_pos_max(s);
        const std::vector<uint32_t> idx = cells.seq_cells(s, 0, INT32_MAX);
        out[k].reserve(idx.size());
        for (uint32_t i : idx) {
            if (!is_masked_swa(c.params().n_swa, c.params().swa, cells.pos_get(i), pmax)) out[k].emplace_back(i, cells.pos_get(i));
        }
    }
    return out;
}

// llama_state_seq_get_size_ext(ctx, s, flags) of a state holding `cells` (seq_saved_cells):
// magic + seq id, then each cache's section (the SWA cache only for PARTIAL_ONLY of an iSWA memory).
size_t server_sim::seq_state_bytes(const context & ctx, const std::vector<saved_cells> & pos, bool swa_only) const {
    const model_shape & m = ctx.model();
    const size_t row = kv_bytes_per_cell_layer(m, ctx.params().type_k, ctx.params().type_v);
    const auto caches = ctx.memory().caches();
    const bool iswa = caches.size() > 1;
    size_t b = 8;
    for (size_t k = 0; k < caches.size(); ++k) {
        const bool is_swa_cache = caches[k]->params().swa != swa_type::none;
        if (swa_only && iswa && !is_swa_cache) continue;
        const uint32_t layers = !iswa ? m.n_layer : (is_swa_cache ? m.n_layer_swa() : m.n_layer - m.n_layer_swa());
        b += cache_state_bytes(*caches[k], pos[k].size(), layers, row);
    }
    return b;
}

void server_sim::enqueue_arrivals(const request_trace & t, size_t & next_arrival) {
    while (next_arrival < t.requests.size() &&
           (p_.arrivals == arrival_mode::saturate || t.requests[next_arrival].arrival_s <= clock_.now())) {
        const size_t i = next_arrival++;
        const size_t n_slots = slots_.size();
        if ((size_t) t.requests[i].n_cmpl > n_slots) {
            // the request's fields are checked before any task exists (server-schema.cpp: n_cmpl's hard limits)
            request_result & r = results_[i];
            r.outcome = request_outcome::failed;
            r.error = fmt::format("Field 'n_cmpl': Value must be between 1 <= value <= {}, but got {}", n_slots, t.requests[i].n_cmpl);
            r.finish = clock_.now();
            for (int32_t k = 1; k < t.requests[i].n_cmpl; ++k) {   // its extra completions were never created
                request_result & c = results_[first_child_[i] + (size_t) k - 1];
                c = r;
                c.parent = (long) i;
            }
            ++n_finished_;
            continue;
        }
        queue_.push_back(i);
    }
}

// process_single_task for a completion task: a slot, or the deferred queue; then, with
// --cache-idle-slots, every idle slot is saved to the RAM cache and, unified, cleared.
void server_sim::process_task(size_t task) {
    const request & rq = trace_->requests[task];
    slot_t * s = get_available_slot(rq);
    if (!s) {
        deferred_.push_back(task);
        return;
    }
    if (rq.n_cmpl > 1 && !launch_children(*s, task)) {
        deferred_.push_back(task);   // "not enough free slots for child tasks"
        return;
    }
    launch(*s, task, task);
    if (p_.cache_idle_slots) cache_idle_slots();
}

server_sim::slot_t * server_sim::get_available_slot(const request & rq) {
    slot_t * ret = nullptr;
    bool update_cache = false;
    if (p_.slot_prompt_similarity != 0.0f) {
        float f_sim_best = 0;
        for (auto & s : slots_) {
            if (s.processing() || s.prompt.tokens.n == 0) continue;
            const float f_sim = float(s.prompt.tokens.common_prefix(rq, p_.block_tokens)) / (float) rq.n_prompt;
            if (f_sim > f_sim_best && f_sim > p_.slot_prompt_similarity) {
                f_sim_best = f_sim;
                ret = &s;
            }
        }
        // about to lose most of the slot's context: save it in the prompt cache
        if (ret && (f_sim_best * (float) rq.n_prompt) / (float) ret->prompt.tokens.n < 0.5f) update_cache = true;
    }
    if (!ret) {
        // least recently used; ties go to the last slot (upstream compares with <=)
        for (auto & s : slots_) {
            if (!s.processing() && (!ret || s.t_last_used <= ret->t_last_used)) ret = &s;
        }
        update_cache = ret != nullptr;
    }
    if (ret) ret->n_restored = 0;
    if (ret && update_cache && ram_) {
        prompt_save(*ret);
        prompt_load(*ret, rq);
        ram_->update();
    }
    return ret;
}

// launch_slot_with_task: slot s serves result `task` of trace request `req` (an extra completion waits for its parent).
void server_sim::launch(slot_t & s, size_t task, size_t req) {
    request_result & r = results_[task];
    r.admission = clock_.now();
    if (p_.arrivals == arrival_mode::saturate) r.arrival = clock_.now();
    r.slot = s.id;
    r.n_ram_restored = task == req ? s.n_restored : 0;
    s.task = (long) task;
    s.req = (long) req;
    s.child = task != req;
    s.parent = !s.child && trace_->requests[req].n_cmpl > 1;
    s.st = s.child ? slot_t::state::wait_other : slot_t::state::started;
    s.n_gen = 0;
    s.n_draft = 0;
    const request & rq = trace_->requests[req];
    // the request sends its n_predict (its trace length when the trace has none); -1 leaves the server's -n
    const int32_t sent = rq.n_predict.value_or(rq.n_gen);
    s.n_predict_max = sent != -1 ? sent : p_.n_predict;
    if (draft_run_) {
        // synthetic draft acceptance: an extra completion k (0-based) samples with the request's seed + k + 1
        // (server_task::add_child)
        const uint32_t seed = rq.seed.value_or((uint32_t) req);
        synth_rng_[(size_t) s.id].seed(s.child ? seed + (uint32_t) (task - first_child_[req]) + 1 : seed);
    }
    s.truncated = false;
    s.i_batch = -1;
}

void server_sim::cache_idle_slots() {
    for (auto & s : slots_) {
        if (s.processing()) continue;
        if (prompt_save(s)) ram_->update();
        if (run_.ctx().params().kv_unified) {
            // [TAG_IDLE_SLOT_CLEAR]: issued for empty slots too
            if (s.prompt.tokens.n > 0) ++totals_.idle_slot_clears;
            prompt_clear(s);
        }
    }
}

bool server_sim::prompt_save(slot_t & s) {
    if (s.prompt.tokens.n == 0 || ram_->contains(s.prompt)) return false;
    auto cells = seq_saved_cells(run_.ctx(), s.id, false);
    size_t bytes = seq_state_bytes(run_.ctx(), cells, false);
    std::vector<saved_cells> draft_cells;   // server_slot::prompt_save: the draft context's state too (data.drft)
    if (draft_run_) {
        draft_cells = seq_saved_cells(draft_run_->ctx(), s.id, false);
        bytes += seq_state_bytes(draft_run_->ctx(), draft_cells, false);
    }
    prompt_cache_state * st = ram_->alloc(s.prompt, bytes);
    if (!st) return false;
    st->cells = std::move(cells);
    st->draft_cells = std::move(draft_cells);
    timer_.save_done((double) st->state_bytes);   // llama_state_seq_get_data_ext: the cells' K/V copied to host memory
    ++totals_.ram_saves;
    totals_.ram_peak_bytes = std::max<uint64_t>(totals_.ram_peak_bytes, ram_->bytes());
    totals_.ram_peak_states = std::max<uint64_t>(totals_.ram_peak_states, ram_->n_states());
    return true;
}

// server_prompt_cache::load: the best saved state goes into the slot (llama_state_seq_set_data_ext:
// per cache seq_rm(dest, -1, -1) and the saved cells placed again; recorded as the server
// oracle writes it). A restore computes no attention: the kernels do not see it.
void server_sim::prompt_load(slot_t & s, const request & rq) {
    auto it = ram_->best_for(s.prompt.tokens, rq);
    if (it == ram_->end()) return;
    ++totals_.ram_restores;
    const auto pos = in_cell_order(it->cells);
    bool ok = run_.restore(s.id, pos, false, fmt::format("R{}", totals_.ram_restores), run_.ctx().sizes().n_ubatch,
                           next_line());
    // server_prompt_cache::load restores the draft context's state after the target's
    if (ok && draft_run_) {
        ok = draft_run_->restore(s.id, in_cell_order(it->draft_cells), false, fmt::format("R{}", totals_.ram_restores),
                                 draft_run_->ctx().sizes().n_ubatch, next_line());
    }
    timer_.restore_done(ok, (double) it->state_bytes);
    if (!ok) {
        // the state did not fit: upstream logs "failed to restore state" and clears the slot
        prompt_clear(s);
        ram_->erase(it);
        return;
    }
    totals_.ram_cells_restored += pos.front().size();
    s.n_restored = (int32_t) pos.front().size();
    s.prompt = std::move(it->prompt);
    ram_->erase(it);
}

void server_sim::prompt_clear(slot_t & s) {
    mem_seq_rm(s.id, -1, -1);
    s.prompt.clear();
}

// server_slot::release: the slot goes idle and server_queue::pop_deferred_task moves the oldest
// deferred task to the FRONT of the queue (so k slots released in one step admit in reverse).
void server_sim::release(slot_t & s, request_outcome o, const std::string & err) {
    request_result & r = results_[s.task];
    r.outcome = o;
    r.error = err;
    r.finish = clock_.now();
    if (o == request_outcome::failed && (s.parent || s.child)) fail_completions(s, err);
    const bool child = s.child;
    s.st = slot_t::state::idle;
    s.task = -1;
    s.req = -1;
    s.parent = s.child = s.cancel = false;
    s.i_batch = -1;
    s.n_draft = 0;   // server_slot::reset: spec_draft, spec_i_batch
    s.t_last_used = ++n_released_;
    if (child) {
        prompt_clear(s);   // "do not keep context of the child slots - the parent's context is enough"
    } else {
        ++n_finished_;
    }
    if (!deferred_.empty()) {
        queue_.push_front(deferred_.front());
        deferred_.pop_front();
    }
}

bool server_sim::try_clear_idle_slots() {
    if (!run_.ctx().params().kv_unified) return false;
    for (auto & s : slots_) {
        if (!s.processing() && s.prompt.tokens.n > 0) {
            prompt_clear(s);
            ++totals_.idle_slot_purges;
            return true;
        }
    }
    return false;
}

void server_sim::context_shift(slot_t & s) {
    const request & rq = trace_->requests[s.req];
    prompt_tokens & tok = s.prompt.tokens;
    // n_keep clamped to n_ctx_slot - 4; in 64 bits so that --keep INT32_MAX plus BOS clamps
    const int64_t n_keep64 = (int64_t) (p_.n_keep < 0 ? rq.n_prompt : p_.n_keep) + (run_.ctx().model().add_bos ? 1 : 0);
    const int32_t n_keep = (int32_t) std::min<int64_t>(n_ctx_slot_ - 4, n_keep64);
    const int32_t n_left = tok.n - n_keep;
    int32_t n_discard = p_.n_discard ? p_.n_discard : n_left / 2;
    n_discard = std::clamp(n_discard, 0, std::max(0, n_left - 1));
    mem_seq_rm(s.id, n_keep, n_keep + n_discard);
    mem_seq_add(s.id, n_keep + n_discard, tok.n, -n_discard);
    tok.discard(std::max(0, n_keep), n_discard);
    s.truncated = true;
    ++results_[s.task].n_shifts;
    ++totals_.context_shifts;
}

// pre_decode: context shifts, then one token per generating slot, then prompt chunks in slot
// order while the batch holds fewer than n_batch tokens (with -nocb only into an empty batch).
void server_sim::pre_decode(std::vector<batch_tok> & batch) {
    for (auto & s : slots_) {
        if (s.st != slot_t::state::generating || s.prompt.tokens.n + 1 < n_ctx_slot_) continue;
        if (!p_.context_shift) {
            release(s, request_outcome::failed, "context shift is disabled");
            continue;
        }
        if (s.parent || s.child) {
            release(s, request_outcome::failed, "context shift cannot be used for shared prompt");
            continue;
        }
        context_shift(s);
    }
    if (draft_run_) {
        draft_tokens(batch);
    } else {
        for (auto & s : slots_) {
            if (s.st != slot_t::state::generating) continue;
            s.i_batch = (int32_t) batch.size();
            batch.push_back({s.id, s.prompt.tokens.n++, false});
        }
    }
    // update_slots: "next, batch any pending prompts" only with continuous batching or an empty batch (-nocb)
    if (!p_.cont_batching && !batch.empty()) return;
    const size_t n_batch = run_.ctx().sizes().n_batch;
    for (auto & s : slots_) {
        if (batch.size() >= n_batch) break;
        if (s.st == slot_t::state::started && !start_prompt(s)) continue;
        if (s.st == slot_t::state::processing_prompt) add_prompt_chunk(s, batch);
    }
}

// The SLOT_STATE_STARTED branch of update_slots: refuse a prompt that does not fit the slot, find
// the cached prefix (n_past), fall back to a checkpoint or to full reprocessing when the SWA cache
// lost what the prefix needs, keep at least one token to evaluate. false = the slot was released.
bool server_sim::start_prompt(slot_t & s) {
    const request & rq = trace_->requests[s.req];
    request_result & r = results_[s.task];
    s.st = slot_t::state::processing_prompt;
    if (rq.n_prompt >= n_ctx_slot_) {
        const std::string err = fmt::format("request ({} tokens) exceeds the available context size ({} tokens), try increasing it",
                                            rq.n_prompt, n_ctx_slot_);
        release(s, request_outcome::failed, err);
        return false;
    }
    int32_t n_past = p_.cache_prompt ? s.prompt.tokens.common_prefix(rq, p_.block_tokens) : 0;
    if (p_.cache_prompt && p_.n_cache_reuse > 0) n_past = reuse_chunks(s, n_past);
    n_past = reuse_from_checkpoint(s, n_past);
    if (n_past == rq.n_prompt && n_past > 0) --n_past;   // [TAG_PROMPT_LOGITS]
    r.n_prefix_reused = n_past;
    if (n_past > 0) {
        ++totals_.prefix_hits;
        totals_.prefix_tokens_reused += (uint64_t) n_past;
    }
    prompt_tokens & tok = s.prompt.tokens;
    tok.keep_first(n_past);
    tok.req = &rq;   // the kept tokens are rq's prompt prefix
    tok.n_head = tok.n;
    tok.shifted = false;
    tok.tail_n = 0;   // [0, n_past) is now rq's prompt: any tail lies inside it
    return true;
}

// --cache-reuse (update_slots: "reuse chunks from the cached prompt by shifting their KV cache in the new position"):
// past the common prefix, every run of at least n_cache_reuse cached tokens equal to the prompt's next tokens moves to
// its prompt position (seq_rm of the gap before it, seq_add of the run; the cache K-shifts at the next decode), and
// the slot's tokens there become the prompt's. Returns the new n_past. Upstream scans the cache one token at a time;
// next_candidate skips the tokens that cannot match.
int32_t server_sim::reuse_chunks(slot_t & s, int32_t n_past) {
    const request & rq = trace_->requests[s.req];
    const prompt_tokens & tok = s.prompt.tokens;
    const int32_t block = p_.block_tokens;
    int32_t head_c = n_past, head_p = n_past;
    while (head_p < rq.n_prompt && (head_c = tok.next_candidate(head_c, rq, head_p, block)) < tok.n) {
        const int32_t n_match = tok.match_run(head_c, rq, head_p, block);
        if (n_match < p_.n_cache_reuse) {
            ++head_c;
            continue;
        }
        mem_seq_rm(s.id, head_p, head_c);
        mem_seq_add(s.id, head_c, head_c + n_match, head_p - head_c);
        n_past += n_match;
        head_c += n_match;
        head_p += n_match;
        ++totals_.cache_reuse_chunks;
        totals_.cache_reuse_tokens += (uint64_t) n_match;
    }
    return n_past;
}

// pos_min_thold and the context-checkpoint search of update_slots. Returns the new n_past. A
// restored checkpoint puts its saved cells back into the SWA cache (load_tgt with PARTIAL_ONLY);
// for an iSWA model that restore has no op-trace form and is not recorded.
int32_t server_sim::reuse_from_checkpoint(slot_t & s, int32_t n_past) {
    const request & rq = trace_->requests[s.req];
    auto & cps = s.prompt.checkpoints;
    llama_pos pos_next = n_past;
    const bool has_new_tokens = n_past < rq.n_prompt;
    const llama_pos pos_min_thold = std::max(0, pos_next - n_swa_ - (has_new_tokens ? 0 : 1));
    if (n_past > 0 && n_past <= s.prompt.tokens.n) {
        const llama_pos pos_min = run_.ctx().memory().seq_pos_min(s.id);
        if (pos_min == -1) throw std::logic_error("server_sim: pos_min == -1 with n_past > 0 (upstream aborts)");
        if (pos_min >= pos_min_thold) {
            auto it = std::find_if(cps.rbegin(), cps.rend(), [&](const context_checkpoint & c) {
                if (c.pos_max > pos_next) return false;   // [TAG_CHECKPOINTS_FIX_POS_MIN]
                return c.pos_min < pos_min_thold || c.pos_min == 0;
            });
            if (it != cps.rend()) {
                const bool iswa = run_.ctx().memory().caches().size() > 1;
                if (!run_.restore(s.id, in_cell_order(it->cells), iswa, "C", run_.ctx().sizes().n_ubatch, next_line())) {
                    throw std::logic_error("server_sim: a context checkpoint did not fit back into the cache (upstream aborts)");
                }
                // load_dft(PARTIAL_ONLY): the draft's SWA cache, or the whole sequence of a draft without SWA layers
                if (draft_run_ && !draft_run_->restore(s.id, in_cell_order(it->draft_cells), draft_run_->ctx().memory().caches().size() > 1,
                                                       "C", draft_run_->ctx().sizes().n_ubatch, next_line())) {
                    throw std::logic_error("server_sim: a context checkpoint did not fit back into the draft's cache (upstream aborts)");
                }
                timer_.restore_done(true, (double) it->bytes);
                pos_next = std::min(pos_next, std::max(it->pos_min + 1, it->pos_max));
                n_past = (int32_t) std::min<int64_t>(std::min(pos_next, s.prompt.tokens.n), it->n_tokens);
                ++totals_.checkpoints_restored;
            } else {
                pos_next = 0;
                n_past = 0;
            }
        }
    }
    cps.remove_if([&](const context_checkpoint & c) { return c.pos_max > pos_next; });
    return n_past;
}

// One prompt chunk of a slot: seq_rm of everything past the cached tokens, then prompt tokens up
// to n_batch; with checkpoints (SWA models) the chunk also ends 4 + n_ubatch and 4 tokens before the
// prompt's end, and a checkpoint is taken before a chunk near the end.
void server_sim::add_prompt_chunk(slot_t & s, std::vector<batch_tok> & batch) {
    const request & rq = trace_->requests[s.req];
    prompt_tokens & tok = s.prompt.tokens;
    const int32_t n_batch = (int32_t) run_.ctx().sizes().n_batch;
    const int32_t n_ubatch = (int32_t) run_.ctx().sizes().n_ubatch;
    mem_seq_rm(s.id, tok.n, -1);
    bool do_checkpoint = p_.n_ctx_checkpoints > 0 && n_swa_ > 0;
    const size_t n_prev = batch.size();
    while (tok.n < rq.n_prompt && (int32_t) batch.size() < n_batch) {
        batch.push_back({s.id, tok.n, true});
        tok.n_head = ++tok.n;
        if (do_checkpoint && (rq.n_prompt == tok.n + std::min(n_batch, 4 + n_ubatch) || rq.n_prompt == tok.n + std::min(n_batch, 4))) {
            break;
        }
    }
    const int32_t n_cur = (int32_t) (batch.size() - n_prev);
    const int32_t n_start = tok.n - n_cur;
    const bool near_prompt_end = rq.n_prompt < tok.n + n_ubatch;
    if (tok.n == rq.n_prompt) {
        s.st = slot_t::state::done_prompt;
        s.i_batch = (int32_t) batch.size() - 1;
        s.n_gen = 0;
    } else if (!near_prompt_end) {
        do_checkpoint = false;   // token-id prompts have no user-message spans
    }
    const llama_pos pos_min = run_.ctx().memory().seq_pos_min(s.id);
    const llama_pos pos_max = run_.ctx().memory().seq_pos_max(s.id);
    if (pos_min < 0) do_checkpoint = false;
    const auto & cps = s.prompt.checkpoints;
    do_checkpoint = do_checkpoint && (cps.empty() || near_prompt_end || n_start > cps.back().n_tokens + p_.checkpoint_min_step);
    if (do_checkpoint) create_checkpoint(s, n_cur, pos_min, pos_max);
}

void server_sim::create_checkpoint(slot_t & s, int32_t n_tokens_cur, llama_pos pos_min, llama_pos pos_max) {
    auto & cps = s.prompt.checkpoints;
    const size_t n_max = (size_t) p_.n_ctx_checkpoints;
    // evict checkpoints within min-step of an earlier one (not this task's), only when full
    int64_t last = -1;
    for (auto it = cps.begin(); cps.size() + 1 >= n_max && it != cps.end();) {
        if (it->id_task != (int) s.task && last >= 0 && it->n_tokens <= last + p_.checkpoint_min_step) {
            it = cps.erase(it);
            continue;
        }
        last = it->n_tokens;
        ++it;
    }
    while (cps.size() >= n_max) cps.pop_front();
    const int64_t n_tokens_new = s.prompt.tokens.n - n_tokens_cur;
    cps.remove_if([&](const context_checkpoint & c) { return c.n_tokens == n_tokens_new; });
    auto cells = seq_saved_cells(run_.ctx(), s.id, true);
    size_t bytes = seq_state_bytes(run_.ctx(), cells, true);
    std::vector<saved_cells> draft_cells;   // update_dft(PARTIAL_ONLY): a draft without SWA layers saves everything
    if (draft_run_) {
        draft_cells = seq_saved_cells(draft_run_->ctx(), s.id, true);
        bytes += seq_state_bytes(draft_run_->ctx(), draft_cells, true);
    }
    cps.push_back({n_tokens_new, (int) s.task, pos_min, pos_max, bytes, std::move(cells), std::move(draft_cells)});
    timer_.save_done((double) bytes);
    ++totals_.checkpoints_created;
}

// update_slots' decode loop: views of n_batch tokens; on a failed llama_decode, free an idle slot
// or halve n_batch and retry the same view; at n_batch 1 (or an invalid batch) fail every slot.
void server_sim::decode_batch(std::vector<batch_tok> & batch) {
    const uint32_t n_batch_full = run_.ctx().sizes().n_batch;
    uint32_t n_batch = n_batch_full;
    for (size_t off = 0; off < batch.size();) {
        const size_t n = std::min<size_t>(n_batch, batch.size() - off);
        llama_batch_in & b = decode_buf_;
        b.pos.clear();
        b.seq_id.clear();
        for (size_t i = off; i < off + n; ++i) b.add(batch[i].pos, {(llama_seq_id) batch[i].slot});
        work_.work.clear();
        const int rc = run_.decode(b, next_line());
        ++totals_.decode_calls;
        uint64_t n_prompt = 0;
        if (rc == DECODE_OK) {
            for (size_t i = off; i < off + n; ++i) n_prompt += batch[i].prompt;
        }
        const uint64_t n_gen = rc == DECODE_OK ? n - n_prompt : 0;
        timer_.decode_done(rc, work_.work, n_prompt, n_gen);
        if (rc == DECODE_OK && draft_run_) draft_mirror(b);
        if (rc == DECODE_OK && any_cmpl_) copy_to_children();
        if (rc == DECODE_OK) {
            totals_.prompt_tokens_decoded += n_prompt;
            totals_.gen_tokens_decoded += n_gen;
            post_decode(batch, off, n);
            off += n;
            n_batch = n_batch_full;
            continue;
        }
        ++totals_.decode_no_slot;
        std::string err;
        if (n_batch == 1 && rc == DECODE_NO_SLOT) err = "Context size has been exceeded.";
        if (rc == -1) err = "Invalid input batch.";
        if (rc < -1) err = "Compute error.";
        if (!err.empty()) {
            ++totals_.context_exceeded;
            for (auto & s : slots_) {
                if (!s.processing()) continue;
                release(s, request_outcome::failed, err);
                prompt_clear(s);
            }
            return;   // upstream throws: the rest of the batch is dropped
        }
        if (!try_clear_idle_slots()) {
            n_batch /= 2;
            ++totals_.batch_halvings;
        }
    }
}

// post_decode + process_token for the slots whose sampled token lies in this view.
// post_decode + process_token for the slots whose sampled token lies in this view; then the speculating slots'
// drafts (all inside this view: fail_cut_drafts failed the others).
void server_sim::post_decode(const std::vector<batch_tok> & batch, size_t off, size_t n) {
    (void) batch;
    if (draft_run_) fail_cut_drafts(off, n);
    for (auto & s : slots_) {
        if (s.i_batch < (int32_t) off || s.i_batch >= (int32_t) (off + n)) continue;
        request_result & r = results_[s.task];
        if (s.st == slot_t::state::done_prompt) {
            s.st = slot_t::state::generating;
            r.first_token = clock_.now();
        } else if (s.st != slot_t::state::generating) {
            continue;
        }
        s.i_batch = -1;
        sample_token(s);
    }
    if (!draft_run_) return;
    for (auto & s : slots_) {
        if (s.st == slot_t::state::generating && s.n_draft > 0) verify_draft(s);   // "main model sample and accept"
    }
}

// process_token's stop conditions for one more generated token; true = the slot was released.
bool server_sim::sample_token(slot_t & s) {
    request_result & r = results_[s.task];
    r.n_gen = ++s.n_gen;
    bool stop = false;
    if (!p_.context_shift && s.prompt.tokens.n + 1 >= n_ctx_slot_) {
        s.truncated = true;   // out of context capacity
        stop = true;
    }
    if (r.n_gen >= r.n_gen_target) stop = true;
    if (stop) release(s, s.truncated ? request_outcome::truncated : request_outcome::done);
    return stop;
}

void server_sim::run(const request_trace & t, const std::function<void(size_t, size_t)> & progress) {
    trace_ = &t;
    results_.assign(t.requests.size(), {});
    first_child_.assign(t.requests.size(), 0);
    for (size_t i = 0; i < t.requests.size(); ++i) {
        results_[i].line = t.requests[i].line;
        results_[i].n_prompt = t.requests[i].n_prompt;
        results_[i].n_gen_target = gen_target(t.requests[i], p_.n_predict);
        results_[i].arrival = t.requests[i].arrival_s;
        // n_cmpl > 1: its extra completions' results after all the requests'
        first_child_[i] = results_.size();
        any_cmpl_ = any_cmpl_ || t.requests[i].n_cmpl > 1;
        for (int32_t k = 1; k < t.requests[i].n_cmpl; ++k) {
            request_result c = results_[i];
            c.parent = (long) i;
            results_.push_back(c);
        }
    }
    work_.next = run_.observer();
    const scoped_decode_observer chained(run_, &work_);   // the caller's observer is back however run() ends
    std::optional<scoped_decode_observer> draft_chained;
    if (draft_run_) {
        draft_work_->next = draft_run_->observer();
        draft_chained.emplace(*draft_run_, &*draft_work_);
    }
    size_t next_arrival = 0;
    std::vector<batch_tok> batch;
    while (true) {
        if (interrupted()) {
            totals_.interrupted = true;
            break;
        }
        // server_queue::start_loop: process_new_tasks(), then update_slots()
        enqueue_arrivals(t, next_arrival);
        if (any_cmpl_) cancel_completions();
        while (!queue_.empty()) {
            const size_t task = queue_.front();
            queue_.pop_front();
            process_task(task);
        }
        if (!any_processing()) {
            if (!deferred_.empty()) throw std::logic_error("server_sim: deferred tasks with every slot idle");
            if (next_arrival >= t.requests.size()) break;
            clock_.wait_until(t.requests[next_arrival].arrival_s);
            continue;
        }
        batch.clear();
        pre_decode(batch);
        if (batch.empty()) {
            if (any_processing()) throw std::logic_error("server_sim: a processing slot produced no token");
            continue;
        }
        clock_.begin_step();
        KVSIM_NVTX_RANGE("step", (int64_t) clock_.step());   // docs/profiling.md: the step's ops and its decode calls
        decode_batch(batch);
        if (progress) progress(n_finished_, t.requests.size());
    }
    if (ram_) totals_.ram_evictions = ram_->evictions();
    totals_.steps = clock_.step();
    totals_.sim_seconds = clock_.now();
}

}  // namespace kvsim
