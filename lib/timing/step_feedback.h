// --step-time measured: the replay's simulated step time takes its attention part from the timed
// kernels instead of the roofline (through the step timer's attention_feedback, time/step_timer.h;
// docs/time-model.md). The rate is the running mean over every timed step so far, so later steps of
// the same replay use the kernels measured before them.
#pragma once

#include "time/step_timer.h"
#include "timing/kernel_account.h"

namespace kvsim {

// With `measured` and a feedback (null: the replay has no step time, an op trace), hands it the
// seconds per K/V byte read by attention (one layer's attn_ns over one layer's kv_bytes, summed over
// the timed steps). Nothing before a byte was read.
void feed_step_time(attention_feedback * feedback, bool measured, const kernel_account & acct);

}  // namespace kvsim
