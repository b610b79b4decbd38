#include "sched/server_sim.h"

#include <algorithm>
#include <fmt/format.h>
#include <stdexcept>

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

// server_slot: slot i owns sequence i.
struct server_sim::slot_t {
    enum class state { idle, started, prompt, generating };
    int id = 0;
    state st = state::idle;
    long req = -1;                       // request index while processing
    int32_t n_tokens = 0;                // tokens of this slot in the cache (prompt.n_tokens())
    const request * cached = nullptr;    // the request whose prompt heads the cached tokens
    int32_t valid_prefix = 0;            // leading cached tokens equal to that prompt's
    int64_t t_last_used = -1;
    bool processing() const { return st != state::idle; }
};

// One token of the server batch: slot, position, and whether the slot needs its logits.
struct server_sim::batch_tok {
    int slot;
    llama_pos pos;
    bool last;
};

namespace {
// Observer that measures each ubatch for the step-time model, then forwards.
class work_collector : public decode_observer {
public:
    work_collector(std::vector<std::vector<ubatch_work>> & work, const context & ctx, decode_observer * next)
        : work_(work), next_(next), first_cache_(ctx.memory().caches().front()) {
        const auto & m = ctx.model();
        bytes_ = kv_bytes_per_cell_layer(m, ctx.params().type_k, ctx.params().type_v);
        n_swa_layers_ = m.n_layer_swa();
        n_layer_ = m.n_layer;
        iswa_ = ctx.memory().caches().size() > 1;
    }
    void on_update(const kv_memory & mem) override {
        if (next_) next_->on_update(mem);
    }
    void on_apply(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) override {
        if (&c == first_cache_) work_.emplace_back();
        const uint32_t layers = !iswa_ ? n_layer_ : (c.params().swa != swa_type::none ? n_swa_layers_ : n_layer_ - n_swa_layers_);
        work_.back().push_back({ub.n_tokens, n_kv, sinfo.n_stream(), layers, bytes_});
        if (next_) next_->on_apply(c, sinfo, ub, n_kv);
    }
    void on_op(const op_group & g, int rc) override {
        if (next_) next_->on_op(g, rc);
    }
    bool wants_ops() const override { return next_ && next_->wants_ops(); }

private:
    std::vector<std::vector<ubatch_work>> & work_;
    decode_observer * next_;
    const kv_cache * first_cache_;
    size_t bytes_ = 0;
    uint32_t n_swa_layers_ = 0, n_layer_ = 0;
    bool iswa_ = false;
};

// Tokens of block b of r's prompt: 0 past the prompt's end (a trace may list more hash_ids than
// the prompt has blocks at this block size), never negative; 64-bit so b * block cannot overflow.
int32_t block_len(const request & r, size_t b, int32_t block) {
    const int64_t left = (int64_t) r.n_prompt - (int64_t) b * block;
    return (int32_t) std::clamp<int64_t>(left, 0, block);
}
}  // namespace

server_sim::server_sim(op_runner & run, const server_params & p, const step_time_model & tm)
    : run_(run), p_(p), tm_(tm), n_ctx_slot_((int32_t) run.ctx().sizes().n_ctx_seq) {
    slots_.resize(run.ctx().params().n_seq_max);
    for (size_t i = 0; i < slots_.size(); ++i) slots_[i].id = (int) i;
}

server_sim::~server_sim() = default;

int32_t server_sim::common_prefix(const slot_t & s, const request & rq) const {
    if (!s.cached || s.valid_prefix == 0) return 0;
    const request & a = *s.cached;
    int32_t lcp = 0;
    for (size_t b = 0; b < a.hash_ids.size() && b < rq.hash_ids.size() && a.hash_ids[b] == rq.hash_ids[b]; ++b) {
        const int32_t la = block_len(a, b, p_.block_tokens), lb = block_len(rq, b, p_.block_tokens);
        if (la == 0 || lb == 0) break;   // ids beyond the prompt's blocks
        lcp += std::min(la, lb);
        if (la != lb) break;
    }
    return std::min(lcp, s.valid_prefix);
}

server_sim::slot_t * server_sim::pick_slot(const request & rq) {
    // get_available_slot: best LCP similarity above the threshold, else least recently used
    // (ties go to the last slot: upstream compares with <=)
    slot_t * ret = nullptr;
    float best = 0;
    for (auto & s : slots_) {
        if (s.processing() || s.n_tokens == 0 || rq.n_prompt == 0) continue;
        const float sim = (float) common_prefix(s, rq) / (float) rq.n_prompt;
        if (sim > best && sim > p_.slot_prompt_similarity) {
            best = sim;
            ret = &s;
        }
    }
    if (ret) return ret;
    for (auto & s : slots_) {
        if (!s.processing() && (!ret || s.t_last_used <= ret->t_last_used)) ret = &s;
    }
    return ret;
}

void server_sim::admit(const request_trace & t, size_t & next_arrival, std::deque<size_t> & queue) {
    while (next_arrival < t.requests.size() &&
           (p_.arrivals == arrival_mode::saturate || t.requests[next_arrival].arrival_s <= clock_.now)) {
        queue.push_back(next_arrival++);
    }
    size_t taken = 0;
    for (; taken < queue.size(); ++taken) {
        const request & rq = t.requests[queue[taken]];
        slot_t * s = pick_slot(rq);
        if (!s) break;
        request_result & r = results_[queue[taken]];
        r.admission = clock_.now;
        if (p_.arrivals == arrival_mode::saturate) r.arrival = clock_.now;
        r.slot = s->id;
        s->req = (long) queue[taken];
        s->st = slot_t::state::started;
    }
    queue.erase(queue.begin(), queue.begin() + (long) taken);
}

int32_t server_sim::reuse_prefix(slot_t & s, const request & rq) {
    int32_t n_past = p_.cache_prompt ? common_prefix(s, rq) : 0;
    const model_shape & m = run_.ctx().model();
    const bool swa_partial = m.has_swa() && !run_.ctx().params().swa_full;
    if (swa_partial && n_past > 0) {
        // the SWA cache may have dropped what the prefix needs; without context checkpoints
        // (not modelled) the server re-processes the whole prompt
        const llama_pos pos_min = run_.ctx().memory().seq_pos_min(s.id);
        if (pos_min >= std::max<int32_t>(0, n_past - (int32_t) m.n_swa)) n_past = 0;
    }
    if (p_.share_prefix && !m.has_swa()) {
        slot_t * best = nullptr;
        int32_t best_lcp = n_past;
        for (auto & o : slots_) {
            const int32_t l = o.id == s.id ? 0 : common_prefix(o, rq);
            if (l > best_lcp) {
                best_lcp = l;
                best = &o;
            }
        }
        if (best) {
            if (run_.ctx().params().kv_unified) {
                run_.seq_rm(s.id, -1, -1, next_line());
                run_.seq_cp(best->id, s.id, 0, best_lcp, next_line());
            } else {
                run_.seq_cp(best->id, s.id, -1, -1, next_line());
                run_.seq_rm(s.id, best_lcp, -1, next_line());
            }
            n_past = best_lcp;
            results_[s.req].prefix_shared = true;
            ++totals_.prefix_shared_hits;
        }
    }
    return n_past;
}

void server_sim::start_prompt(slot_t & s, const request_trace & t) {
    const request & rq = t.requests[s.req];
    if (rq.n_prompt >= n_ctx_slot_) {
        finish(s, request_outcome::failed,
               fmt::format("request ({} tokens) exceeds the available context size ({} tokens), try increasing it",
                           rq.n_prompt, n_ctx_slot_));
        return;
    }
    int32_t n_past = reuse_prefix(s, rq);
    if (n_past == rq.n_prompt && n_past > 0) {
        --n_past;   // at least one token is evaluated to get logits
    }
    run_.seq_rm(s.id, n_past, -1, next_line());
    s.n_tokens = n_past;
    s.cached = &rq;
    s.valid_prefix = n_past;
    s.st = slot_t::state::prompt;
    results_[s.req].n_prefix_reused = n_past;
    if (n_past > 0) {
        ++totals_.prefix_hits;
        totals_.prefix_tokens_reused += (uint64_t) n_past;
    }
}

void server_sim::context_shift(slot_t & s) {
    const request & rq = trace_->requests[s.req];
    // llama-server clamps n_keep to n_ctx_slot - 4; done in 64 bits so that --keep INT32_MAX plus
    // the BOS token clamps instead of wrapping to a negative n_keep (which wiped the sequence)
    const int64_t n_keep64 = (int64_t) (p_.n_keep < 0 ? rq.n_prompt : p_.n_keep) + (p_.add_bos ? 1 : 0);
    const int32_t n_keep = (int32_t) std::min<int64_t>(n_ctx_slot_ - 4, n_keep64);
    const int32_t n_left = s.n_tokens - n_keep;
    int32_t n_discard = p_.n_discard ? p_.n_discard : n_left / 2;
    n_discard = std::clamp(n_discard, 0, std::max(0, n_left - 1));
    run_.seq_rm(s.id, n_keep, n_keep + n_discard, next_line());
    run_.seq_add(s.id, n_keep + n_discard, s.n_tokens, -n_discard, next_line());
    s.n_tokens -= n_discard;
    s.valid_prefix = std::min(s.valid_prefix, n_keep);
    ++results_[s.req].n_shifts;
    ++totals_.context_shifts;
}

void server_sim::build_batch(std::vector<batch_tok> & batch, const request_trace & t) {
    const uint32_t n_batch = run_.ctx().sizes().n_batch;
    for (auto & s : slots_) {
        if (s.st == slot_t::state::generating && s.n_tokens + 1 >= n_ctx_slot_) {
            if (!p_.context_shift) {
                finish(s, request_outcome::failed, "context shift is disabled");
                continue;
            }
            context_shift(s);
        }
    }
    for (auto & s : slots_) {
        if (s.st == slot_t::state::generating) {
            batch.push_back({s.id, s.n_tokens++, true});
        }
    }
    for (auto & s : slots_) {
        if (batch.size() >= n_batch) break;
        if (s.st == slot_t::state::started) start_prompt(s, t);
        if (s.st != slot_t::state::prompt) continue;
        const int32_t n_prompt = t.requests[s.req].n_prompt;
        while (s.n_tokens < n_prompt && batch.size() < n_batch) {
            batch.push_back({s.id, s.n_tokens, false});
            ++s.n_tokens;
        }
        s.valid_prefix = s.n_tokens;   // the cached tokens are this prompt's, up to here
        if (s.n_tokens == n_prompt) batch.back().last = true;
    }
}

bool server_sim::clear_idle_slot() {
    if (!run_.ctx().params().kv_unified) return false;
    for (auto & s : slots_) {
        if (!s.processing() && s.n_tokens > 0) {
            run_.seq_rm(s.id, -1, -1, next_line());
            s.n_tokens = 0;
            s.cached = nullptr;
            s.valid_prefix = 0;
            ++totals_.idle_slot_purges;
            return true;
        }
    }
    return false;
}

void server_sim::finish(slot_t & s, request_outcome o, const std::string & err) {
    request_result & r = results_[s.req];
    r.outcome = o;
    r.error = err;
    r.finish = clock_.now;
    s.st = slot_t::state::idle;
    s.req = -1;
    s.t_last_used = ++n_released_;
    ++n_finished_;
}

void server_sim::post_decode(const std::vector<batch_tok> & batch, size_t off, size_t n) {
    for (size_t i = off; i < off + n; ++i) {
        const batch_tok & bt = batch[i];
        if (!bt.last) continue;
        slot_t & s = slots_[bt.slot];
        if (!s.processing()) continue;
        request_result & r = results_[s.req];
        if (s.st == slot_t::state::prompt) {
            s.st = slot_t::state::generating;
            r.first_token = clock_.now;
        }
        ++r.n_gen;
        if (r.n_gen >= r.n_gen_target) {
            finish(s, request_outcome::done);
        } else if (!p_.context_shift && s.n_tokens + 1 >= n_ctx_slot_) {
            finish(s, request_outcome::truncated);
        }
    }
}

bool server_sim::decode_batch(std::vector<batch_tok> & batch) {
    const uint32_t n_batch_full = run_.ctx().sizes().n_batch;
    uint32_t n_batch = n_batch_full;
    for (size_t off = 0; off < batch.size();) {
        const size_t n = std::min<size_t>(n_batch, batch.size() - off);
        llama_batch_in & b = decode_buf_;
        b.pos.clear();
        b.seq_id.clear();
        for (size_t i = off; i < off + n; ++i) b.add(batch[i].pos, {(llama_seq_id) batch[i].slot});
        work_.clear();
        const int rc = run_.decode(b, next_line());
        ++totals_.decode_calls;
        if (rc == DECODE_OK) {
            clock_.now += tm_.seconds(work_);
            for (size_t i = off; i < off + n; ++i) {
                (batch[i].last && slots_[batch[i].slot].st == slot_t::state::generating ? totals_.gen_tokens_decoded
                                                                                       : totals_.prompt_tokens_decoded)++;
            }
            post_decode(batch, off, n);
            off += n;
            n_batch = n_batch_full;
            continue;
        }
        ++totals_.decode_no_slot;
        if (rc != DECODE_NO_SLOT || n_batch == 1) {
            const char * err = rc == DECODE_NO_SLOT ? "Context size has been exceeded." : "Invalid input batch.";
            ++totals_.context_exceeded;
            for (auto & s : slots_) {
                if (!s.processing()) continue;
                finish(s, request_outcome::failed, err);
                run_.seq_rm(s.id, -1, -1, next_line());
                s.n_tokens = 0;
                s.cached = nullptr;
                s.valid_prefix = 0;
            }
            return false;
        }
        if (!clear_idle_slot()) {
            n_batch /= 2;
            ++totals_.batch_halvings;
        }
    }
    return true;
}

void server_sim::run(const request_trace & t, const std::function<void(size_t, size_t)> & progress) {
    trace_ = &t;
    results_.assign(t.requests.size(), {});
    for (size_t i = 0; i < t.requests.size(); ++i) {
        results_[i].line = t.requests[i].line;
        results_[i].n_prompt = t.requests[i].n_prompt;
        results_[i].n_gen_target = std::max<int32_t>(1, t.requests[i].n_gen);
        results_[i].arrival = t.requests[i].arrival_s;
    }
    work_collector collector(work_, run_.ctx(), run_.observer());
    decode_observer * user_obs = run_.observer();
    run_.set_observer(&collector);
    std::deque<size_t> queue;
    size_t next_arrival = 0;
    std::vector<batch_tok> batch;
    while (true) {
        if (interrupted()) {
            totals_.interrupted = true;
            break;
        }
        admit(t, next_arrival, queue);
        batch.clear();
        build_batch(batch, t);
        if (batch.empty()) {
            if (std::any_of(slots_.begin(), slots_.end(), [](const slot_t & s) { return s.processing(); })) {
                throw std::logic_error("server_sim: a processing slot produced no token");
            }
            if (next_arrival >= t.requests.size() && queue.empty()) break;
            if (queue.empty()) clock_.now = std::max(clock_.now, t.requests[next_arrival].arrival_s);
            continue;
        }
        ++clock_.step;
        KVSIM_NVTX_RANGE("step", (int64_t) clock_.step);   // docs/profiling.md: the step's ops and its decode calls
        decode_batch(batch);
        if (progress) progress(n_finished_, t.requests.size());
    }
    totals_.steps = clock_.step;
    totals_.sim_seconds = clock_.now;
    run_.set_observer(user_obs);
}

}  // namespace kvsim
