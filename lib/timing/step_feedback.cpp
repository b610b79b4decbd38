#include "timing/step_feedback.h"

#include "sched/step_time.h"

namespace kvsim {

void feed_step_time(step_time_model * tm, bool measured, const kernel_account & acct) {
    if (!measured || !tm || acct.kv_bytes_total() <= 0) return;
    tm->measured_s_per_kv_byte = acct.attn_ns_total() * 1e-9 / acct.kv_bytes_total();
}

}  // namespace kvsim
