// Which llama-bench runs would calibrate a profile for the steps a replay actually ran (kvsim replay
// --suggest-bench): a multi-slot llama-server decodes 1..n_parallel tokens per call at depth and prompt
// chunks up to n_batch, which llama-bench's usual pp512/tg128 do not cover (issue 24).
#pragma once

#include "kv/context.h"
#include "time/step_timer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvsim {

class bench_coverage : public step_observer {
public:
    void on_step(const step_record & r) override;

    // "llama-bench -m MODEL.gguf -p A,B,... -n 32 -d 0,D1,D2 -ub U -b B -ctk K -ctv V -fa F -r 5 -o json":
    //   -p  the tokens per call of the calls with at most n_seq_max tokens that make up 1 % of the
    //       calls or more (several slots generating together), and the median and largest prompt call;
    //   -d  0 and the median and 90th percentile of the calls' n_kv, rounded up to 256;
    //   the context's -ub, -b, cache types and flash attention.
    // "" when no call was recorded.
    std::string command(const context_params & p) const;
    // What the command covers, for the terminal: calls, tokens per call, n_kv percentiles.
    std::string coverage(const context_params & p) const;

private:
    std::vector<uint32_t> tokens_;   // tokens of each successful decode call
    std::vector<uint32_t> prompt_;   // tokens of the calls holding prompt tokens
    std::vector<uint32_t> n_kv_;     // n_kv of each successful decode call
};

}  // namespace kvsim
