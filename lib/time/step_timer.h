// The one place a llama_decode call gets its simulated time: the scheduler hands the step timer
// each call's placed ubatches (ubatch_work_collector) once the call returned; the timer computes
// the call's predicted seconds once (step_time_model), advances the clock by them and publishes
// one typed record to the step observers (steps.csv). A RAM-cache or checkpoint restore is
// published the same way with kind `restore`, set by the scheduler that restored. Measured kernel
// times enter through the timer's attention_feedback interface, which owns the model they refine.
#pragma once

#include "time/sim_clock.h"
#include "time/step_time.h"

#include <cstdint>
#include <vector>

namespace kvsim {

enum class step_kind {
    decode,    // a llama_decode the server computes (prompt chunks and generated tokens mixed, as continuous batching does)
    restore,   // a state restore into a slot: the server copies cells and computes nothing
};

const char * step_kind_name(step_kind k);   // "decode" | "restore"

// One llama_decode call (or restore) as the time model saw it.
struct step_record {
    step_kind kind = step_kind::decode;
    int rc = 0;                 // llama_decode's return code (restore: 0 when it fitted)
    uint64_t n_prompt = 0;      // prompt tokens decoded (0 for a failed call and a restore)
    uint64_t n_gen = 0;         // generated tokens decoded
    uint32_t n_ubatch = 0;      // ubatches the call was split into (placed before a failure included)
    uint32_t n_kv = 0;          // largest n_kv (cells read per stream) of its ubatches, first cache
    double kv_visible = 0;      // sum over its ubatches of ubatch_visible_cells, first cache
    ubatch_terms work;          // the call's weight bytes, FLOPs, K/V bytes and tokens, summed over its ubatches
    double t_start = 0;         // simulated seconds when the call started
    double predicted_s = 0;     // the model's time of the call (a restore: its copy into the device); 0 when it failed
};

class step_observer {
public:
    virtual ~step_observer() = default;
    virtual void on_step(const step_record & r) = 0;
};

// Measured kernel times feeding the simulated time (--step-time measured): the kernel hooks call
// this after each timed step with the running mean of seconds per K/V byte read by attention; the
// attention part of every later step is that rate times its K/V bytes (step_time_model).
class attention_feedback {
public:
    virtual ~attention_feedback() = default;
    virtual void measured_attention(double s_per_kv_byte) = 0;
};

class step_timer : public attention_feedback {
public:
    // The timer keeps its own copy of the model (the measured rate refines it) and advances `clock`,
    // which must outlive it.
    step_timer(const step_time_model & tm, sim_clock & clock) : tm_(tm), clock_(clock) {}

    // After a llama_decode call that placed `work` (one entry per ubatch, one per cache; rc its
    // return code): predicted seconds (0 unless rc is 0), the clock advanced by them, the record
    // published and returned.
    const step_record & decode_done(int rc, const std::vector<std::vector<ubatch_work>> & work, uint64_t n_prompt, uint64_t n_gen);
    // After a state restore of `bytes` (`fitted` false: no room, the slot was cleared and nothing was copied): a
    // record of kind restore whose time is the copy into the device (step_time_model::host_copy_seconds).
    const step_record & restore_done(bool fitted, double bytes);
    // A state save of `bytes` to host memory (RAM prompt cache, context checkpoint): the clock advances by the copy;
    // no step record (steps.csv keeps one row per op group of --emit-ops, and a save changes no cell).
    void save_done(double bytes);
    // Bytes copied and seconds spent over the host link by saves and restores, so far.
    double host_copy_bytes() const { return host_bytes_; }
    double host_copy_seconds() const { return host_s_; }

    void add_observer(step_observer * o) {
        if (o) obs_.push_back(o);
    }
    void measured_attention(double s_per_kv_byte) override { tm_.measured_s_per_kv_byte = s_per_kv_byte; }

    const step_time_model & model() const { return tm_; }
    const sim_clock & clock() const { return clock_; }

private:
    const step_record & publish();

    step_time_model tm_;
    sim_clock & clock_;
    step_record last_;
    double host_bytes_ = 0, host_s_ = 0;
    std::vector<step_observer *> obs_;
};

}  // namespace kvsim
