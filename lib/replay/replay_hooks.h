// What a replay lets an outer layer add without lib/ depending on it: the kernels (kernels/)
// time real attention on real K/V buffers through these hooks; apps/ wires them in.
#pragma once

#include "kv/context.h"
#include "report/bandwidth.h"
#include "time/sim_clock.h"
#include "time/step_timer.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvsim {

class replay_hooks {
public:
    virtual ~replay_hooks() = default;
    // Called once the context exists, before the first op. `clock` is the replay's (valid for the
    // whole replay); measured costs go to `feedback` (null: the replay has no step time).
    virtual void begin(context & ctx, const sim_clock & clock, attention_feedback * feedback) = 0;
    // Sees every update (K-shift) and ubatch placement.
    virtual decode_observer * observer() = 0;
    // Called after the replay: rows for bandwidth.csv and a "bandwidth" section for summary.json
    // and the terminal table (name, value) pairs.
    virtual const std::vector<bandwidth_row> & rows() const = 0;
    virtual nlohmann::json summary() const = 0;
    virtual std::vector<std::pair<std::string, std::string>> terminal_rows() const = 0;
    // Verification failures found (0 when --verify is off or everything agreed).
    virtual uint64_t verify_failures() const { return 0; }
};

// Forwards every event to several observers, in order.
class observer_fanout : public decode_observer {
public:
    void add(decode_observer * o) {
        if (o) obs_.push_back(o);
    }
    void on_update(const kv_memory & mem) override {
        for (auto * o : obs_) o->on_update(mem);
    }
    void on_apply(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) override {
        for (auto * o : obs_) o->on_apply(c, sinfo, ub, n_kv);
    }
    void on_restore(const kv_cache & c, const slot_info & sinfo, const ubatch & ub) override {
        for (auto * o : obs_) o->on_restore(c, sinfo, ub);
    }

private:
    std::vector<decode_observer *> obs_;
};

}  // namespace kvsim
