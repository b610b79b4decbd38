// Memory as llama.cpp allocates it for one model and context: the weights, the K/V cache, the
// compute buffer the graph scheduler reserves, the logits buffer, and llama-server's host-RAM
// prompt cache. Named after llama.cpp's llama_memory_breakdown (src/llama-ext.h: model, context,
// compute per buffer type), which common/fit.cpp sums to decide what fits a device.
#pragma once

#include "kv/context.h"

#include <cstddef>
#include <cstdint>

namespace kvsim {

// The compute buffer llama_context::sched_reserve (src/llama-context.cpp) reserves: ggml-alloc's
// peak over the worst-case graph of n_tokens = min(n_ctx, n_ubatch) tokens with n_outputs =
// min(n_tokens, n_batch) logits rows (ggml-alloc.c frees a tensor after its last use, so the
// peak is the largest set of tensors alive at one node). Three candidates, in bytes (f32 = 4):
//   output  the logits and two n_embd rows per token:       T * (n_vocab + 2 n_embd) * 4
//   ffn     the KQ mask (an input every layer reads, so it lives until the last layer's attention)
//           beside one layer's FFN (gate, up, their product) and four n_embd rows:
//           mask + T * (3 n_ff + 4 n_embd) * 4
//   attn    without flash attention, the mask beside the KQ scores of every head and the
//           q/k/v rows (src/llama-graph.cpp: build_attn_mha):
//           mask + T * (n_kv n_head + 5 n_embd + 2 n_embd_k_gqa) * 4
// mask = n_kv * T * (2 with flash attention (F16), else 4) per cache (llama-graph.cpp:
// build_attn_inp_kq_mask: [n_kv, n_tokens/n_stream, 1, n_stream]; n_kv = the cache's cells per
// stream, all of them in the reserve's init_full), the SWA cache's mask too for an iSWA model.
// The constants (2, 3, 4, 5) are read off ggml-alloc's result, not derived: tests/data/memory/
// holds 81 sizes the real library (CPU backend) reported for three model shapes, -ub 256/512/2048,
// -c 4K..1M, -np 1/4, -kvu, -fa on/off, q8_0 K/V, recorded by scripts/memory-probe/record.sh;
// this formula is within 3 % of each (test_memory). Not checked: SWA models, GPU backends.
// 0 for a shape without n_embd / n_ff / n_vocab (a custom shape): unknown.
size_t compute_buffer_bytes(const model_shape & m, const context_params & p, const context_sizes & s);

// The host buffer of logits llama_context's constructor reserves (output_reserve(n_seq_max)):
// n_vocab floats per sequence. 0 without n_vocab.
size_t output_buffer_bytes(const model_shape & m, const context_params & p);

struct memory_breakdown {
    size_t model = 0;        // device: the weights in their GGUF type (llama_model_size)
    size_t context = 0;      // device: K and V of every cache (compute_kv_bytes)
    size_t compute = 0;      // device: compute_buffer_bytes (0 = unknown)
    size_t output = 0;       // host: output_buffer_bytes
    int64_t cache_ram = 0;   // host: llama-server's --cache-ram limit in bytes; 0 = off, -1 = no limit
    size_t device() const { return model + context + compute; }
};

// `weight_bytes`: llama_model_size of the model's file type (time/weight_types.h computes it);
// `cache_ram_mib`: llama-server's --cache-ram (MiB; -1 = no limit, 0 = off).
memory_breakdown compute_memory_breakdown(const model_shape & m, const context_params & p, const context_sizes & s,
                                          double weight_bytes, int64_t cache_ram_mib);

}  // namespace kvsim
