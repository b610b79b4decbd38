#include "timing/step_feedback.h"

namespace kvsim {

void feed_step_time(attention_feedback * feedback, bool measured, const kernel_account & acct) {
    if (!measured || !feedback || acct.kv_bytes_total() <= 0) return;
    feedback->measured_attention(acct.attn_ns_total() * 1e-9 / acct.kv_bytes_total());
}

}  // namespace kvsim
