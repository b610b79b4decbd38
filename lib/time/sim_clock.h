// The simulated clock of one replay: the scheduler step and the simulated seconds. One object,
// owned by whoever drives the replay (server_sim for a request trace, the op driver for an op
// trace), read by every observer through a const reference. Only the step timer
// (time/step_timer.h) advances it by a step's time; the scheduler counts steps and jumps to the
// next arrival when it is idle.
#pragma once

#include <algorithm>
#include <cstdint>

namespace kvsim {

class sim_clock {
public:
    // timed false: there is no simulated time (an op trace): now() stays 0 and the timeline and the
    // cell map stamp events by op number instead.
    explicit sim_clock(bool timed = true) : timed_(timed) {}

    uint64_t step() const { return step_; }   // scheduler steps begun (update_slots iterations), or op groups done
    double now() const { return now_; }       // simulated seconds
    bool timed() const { return timed_; }

    void begin_step() { ++step_; }
    void set_step(uint64_t s) { step_ = s; }
    // A step's time passed (seconds >= 0).
    void advance(double seconds) { now_ += seconds; }
    // Idle until `t` (no-op when t is not later than now).
    void wait_until(double t) { now_ = std::max(now_, t); }

private:
    bool timed_;
    uint64_t step_ = 0;
    double now_ = 0;
};

}  // namespace kvsim
