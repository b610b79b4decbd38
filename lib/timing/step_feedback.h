// --step-time measured: the replay's simulated step time takes its attention part from the timed
// kernels instead of the roofline (sched/step_time.h: step_time_model::measured_s_per_kv_byte;
// docs/time-model.md). The rate is the running mean over every timed step so far, so later steps of
// the same replay use the kernels measured before them.
#pragma once

#include "timing/kernel_account.h"

namespace kvsim {

struct step_time_model;

// With `measured` and a model, set tm->measured_s_per_kv_byte to seconds per K/V byte read by attention
// (one layer's attn_ns over one layer's kv_bytes, summed over the timed steps). Nothing before a byte was read.
void feed_step_time(step_time_model * tm, bool measured, const kernel_account & acct);

}  // namespace kvsim
