// Deterministic K/V cache content: every element is a pure function of (layer, K or V, seq, pos, head, dim), so a
// kernel result can be recomputed anywhere (other backend, other process) without shipping the buffers.
#pragma once

#include <cstdint>

#include "hadamard.h"
#include "kv_tensor.h"
#include "core/types.h"

namespace kvsim {

enum class kv_which : uint32_t { k = 0, v = 1 };

// Value in [-1, 1) (multiples of 2^-23) from a splitmix64 hash of the arguments.
float kv_value(uint32_t layer, kv_which which, llama_seq_id seq, llama_pos pos, int64_t head, int64_t dim);

// Write the row of cell `cell` in stream `stream` of t: element (head h, dim d) = kv_value(layer, which, seq, pos,
// h, d), then rotated with fwht_blocks(rot_n) when rot_n > 0 (the cache stores H·k for rotated quantized caches),
// then converted to t.type. Throws std::out_of_range for a stream/cell outside t.
void write_kv_cell(const kv_tensor & t, int64_t stream, int64_t cell, uint32_t layer, kv_which which, llama_seq_id seq,
                   llama_pos pos, int rot_n);

}  // namespace kvsim
