// kvsim's native op trace: a CSV script of llama_decode calls and llama_memory_seq_* ops.
// Format: docs/trace-formats.md. Same format as kvoracle's csv2script.py
// (/work/shared/tools/kvoracle), which turns it into a script for the real llama.cpp cache.
#pragma once

#include "core/types.h"

#include <iosfwd>
#include <string>
#include <vector>

namespace kvsim {

enum class op_kind { decode, rm, cp, keep, add, div, clear };

// One CSV row. Fields an op does not use keep their defaults.
//   decode: seqs (>= 1 distinct ids >= 0, the tokens belong to all of them; ids >= n_seq_max are
//           kept: llama_decode answers them with -1), n_tokens > 0,
//           p0 + has_p0 (explicit first position; otherwise seq_pos_max(seqs[0]) + 1)
//   rm:     seqs = {id} with id in [-1, LLAMA_MAX_SEQ) (-1 = all sequences), p0, p1
//   cp:     seqs = {src}, seq_dst, p0, p1        keep: seqs = {id}
//   add:    seqs = {id}, p0, p1, delta (position shift, tokens)
//   div:    seqs = {id}, p0, p1, delta (divisor, > 0)
//   clear:  nothing
// p0/p1 are a half-open position range [p0, p1); -1 = open end (llama.cpp treats every negative
// bound that way, and the reader normalises them to -1). `line` is the 1-based CSV line.
struct op_row {
    long line = 0;
    op_kind op = op_kind::decode;
    std::string batch;
    std::vector<llama_seq_id> seqs;
    int32_t n_tokens = 0;
    llama_pos p0 = -1;
    bool has_p0 = false;
    llama_pos p1 = -1;
    int32_t delta = 0;
    llama_seq_id seq_dst = -1;
};

// One llama_decode call (consecutive decode rows with the same `batch` value, tokens in row
// order) or one sequence op (exactly one row). `line` is the line of the first row.
struct op_group {
    op_kind op = op_kind::decode;
    std::vector<op_row> rows;
    long line = 0;
};

// A whole trace, groups in file order.
struct op_trace {
    std::string path;
    std::vector<op_group> groups;
};

// Read and validate an op trace file. A UTF-8 BOM and CRLF line ends are stripped, blank lines
// skipped. Errors: input_error(path, line, value, why) for a bad header (missing, extra or
// misordered column), a row with too few/many fields, a non-integer or int32-overflowing
// number, an unknown op, a negative decode seq id, a seq-op id outside [-1, 256) (-1 for rm
// only), several ids other than on decode, a repeated id, n_tokens <= 0 on decode, cp without seq_dst, add without delta, div with delta <= 0,
// an empty file or a header without rows; input_error(path, 0, ...) when it cannot be opened.
// Mirrors the reading of kvoracle/csv2script.py + kvoracle.cpp (parse_item, do_batch).
op_trace read_op_trace(const std::string & path);

// As read_op_trace, from a stream; `name` is used in error messages and as the trace's path.
op_trace parse_op_trace(std::istream & in, const std::string & name);

// Write `t` in the CSV format so that parse_op_trace gives the same groups and rows (except
// `line`). Open bounds are written as -1, an implicit decode p0 as an empty field.
// Throws std::invalid_argument when two adjacent decode groups share a batch label (they would
// be read back as one llama_decode call) or a decode group mixes labels.
void write_op_trace(std::ostream & out, const op_trace & t);

// True when `header_line` (possibly with BOM, CR or spaces) is exactly the op-trace header
// `batch,op,seq,n_tokens,p0,p1,delta,seq_dst`. Used to tell op traces from request traces.
bool looks_like_op_trace(const std::string & header_line);

// "decode", "rm", ... (the CSV spelling).
const char * op_kind_name(op_kind k);

}  // namespace kvsim
