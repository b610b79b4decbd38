// llama-bench's default output, the markdown table people paste in issues and posts, read into the
// JSON objects of `llama-bench -o json` (the fields calibrate reads), so one reader checks both.
// The layout is tools/llama-bench/llama-bench.cpp: markdown_printer at the pinned commit: columns
// model | size | params | backend [| ngl] [| threads] [| n_batch] [| n_ubatch] [| type_k] [| type_v]
// [| fa] ... | test | t/s, a column only when its value differs from llama-bench's default.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvsim {

// True when `text` holds a line that starts with '|' (a llama-bench table; text around the tables,
// such as a post's prose or its "build:" line, is allowed). JSON never has such a line.
bool looks_like_llama_bench_markdown(const std::string & text);

// Every result row of every table in `text` (several tables and their "build:" lines may follow
// each other), as llama-bench -o json objects: model_type, model_size (bytes, from "4.58 GiB" /
// "636.18 MiB"), model_n_params ("8.03 B" / "494.03 M"), n_prompt / n_gen / n_depth (from the
// test: "pp512", "tg128", "pp512+tg128", " @ d4096"; older builds' "pp 512"), avg_ns and stddev_ns
// (from "t/s" "A ± S": tokens / A seconds, stddev in proportion), and the optional columns or
// llama-bench's defaults when absent: n_batch 2048, n_ubatch 512, type_k / type_v f16, fa auto (-1),
// threads 0 (not shown for GPU backends). Throws input_error(path, line, value, why) for a table
// without model, test or t/s columns or with a column named twice, a row whose cell count differs
// from its header, or a cell that cannot be read.
nlohmann::json llama_bench_markdown_to_json(const std::string & text, const std::string & path);

}  // namespace kvsim
