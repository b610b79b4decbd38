#include "time/step_timer.h"

#include <algorithm>

namespace kvsim {

const char * step_kind_name(step_kind k) { return k == step_kind::restore ? "restore" : "decode"; }

static void add_terms(ubatch_terms & sum, const ubatch_terms & t) {
    sum.n_tokens += t.n_tokens;
    // a step's record: every weight byte and FLOP in one sum, whichever term prices them
    sum.weight_bytes += t.weight_bytes + t.gemv_output_bytes;
    sum.dense_flops += t.dense_flops + t.gemv_output_flops + 2.0 * t.unpacked_row_params;
    sum.kv_bytes += t.kv_bytes;
    sum.attn_flops += t.attn_flops;
}

const step_record & step_timer::decode_done(int rc, const std::vector<std::vector<ubatch_work>> & work, uint64_t n_prompt,
                                            uint64_t n_gen) {
    step_record r;
    r.rc = rc;
    r.n_prompt = n_prompt;
    r.n_gen = n_gen;
    r.n_ubatch = (uint32_t) work.size();
    r.t_start = clock_.now();
    for (const auto & per_cache : work) {
        if (per_cache.empty()) continue;
        r.n_kv = std::max(r.n_kv, per_cache.front().n_kv);
        r.kv_visible += per_cache.front().visible;
        if (rc != 0) continue;
        const ubatch_terms t = tm_.terms(per_cache);
        add_terms(r.work, t);
        r.predicted_s += tm_.seconds_of(t);
    }
    last_ = r;
    clock_.advance(r.predicted_s);
    return publish();
}

const step_record & step_timer::restore_done(bool fitted, double bytes) {
    step_record r;
    r.kind = step_kind::restore;
    r.rc = fitted ? 0 : 1;
    r.t_start = clock_.now();
    if (fitted) {
        r.predicted_s = tm_.host_copy_seconds(bytes);
        host_bytes_ += bytes;
        host_s_ += r.predicted_s;
    }
    last_ = r;
    clock_.advance(r.predicted_s);
    return publish();
}

void step_timer::save_done(double bytes) {
    const double s = tm_.host_copy_seconds(bytes);
    host_bytes_ += bytes;
    host_s_ += s;
    clock_.advance(s);
}

const step_record & step_timer::publish() {
    for (step_observer * o : obs_) o->on_step(last_);
    return last_;
}

}  // namespace kvsim
