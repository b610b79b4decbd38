#include "time/calibrate.h"

#include "time/llama_bench_markdown.h"

#include "drive/op_runner.h"
#include "kv/context.h"
#include "core/errors.h"
#include "util/json_read.h"
#include "util/read_file.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <numeric>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

namespace kvsim {

namespace {
using json = nlohmann::json;

// The value is cut to 80 bytes: a hostile model_type of 30 MB was one 30 MB error line.
// Where a result came from: its file and entry, and for a markdown table its line (named instead of the entry).
struct entry_ref {
    const std::string & file;
    size_t index;
    long line;
};

[[noreturn]] void bad_field(const entry_ref & e, const char * field, const std::string & value, const std::string & why) {
    if (e.line > 0) throw input_error(e.file, e.line, cut_text(value), fmt::format("field {} {}", field, why));
    throw input_error(e.file, 0, cut_text(value), fmt::format("entry {}: field {} {}", e.index, field, why));
}

const json & field(const json & o, const entry_ref & e, const char * name) {
    if (!o.contains(name)) bad_field(e, name, "", "is missing");
    return o[name];
}

// A whole number in [min, max]; max keeps the casts to uint32_t / int exact (no wrap to 0). Written as a float it is
// taken when whole (1000000000000000.0: a JSON writer's, not llama-bench's).
double int_field(const json & o, const entry_ref & e, const char * name, double min, double max) {
    const json & v = field(o, e, name);
    if (!v.is_number()) bad_field(e, name, json_text(v), "must be a whole number");
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) bad_field(e, name, json_text(v), "must be a whole number");
    if (d < min || d > max) bad_field(e, name, json_text(v), fmt::format("must be in [{:.0f}, {:.0f}]", min, max));
    return d;
}

// Tokens one result may put in its context (n_depth + n_prompt + n_gen): every token is decoded
// through the cache model, so a hostile 2^29 would take minutes and tens of GB; 2^20 covers
// llama-bench -d 1048576 and runs in seconds.
constexpr double k_max_bench_tokens = 1 << 20;
constexpr double k_u32 = 4294967295.0;
// K/V tiles x sequences the tiled-path count visits over one result's decode steps: about 7 s of replay (2^31)
constexpr double k_max_tile_visits = 2147483648.0;

std::string string_field(const json & o, const entry_ref & e, const char * name) {
    const json & v = field(o, e, name);
    if (!v.is_string()) bad_field(e, name, json_text(v), "must be a string");
    return v.get<std::string>();
}

llama_bench_row parse_point(const json & o, const std::string & file, size_t index) {
    if (!o.is_object()) throw input_error(file, 0, json_text(o).substr(0, 40), fmt::format("entry {} is not a JSON object", index));
    llama_bench_row p;
    p.file = file;
    p.line = o.contains("_line") && o["_line"].is_number_integer() ? o["_line"].get<long>() : 0;
    const entry_ref e{file, index, p.line};
    p.index = index;
    p.model_type = string_field(o, e, "model_type");
    p.model_size = int_field(o, e, "model_size", 1, 1e18);
    p.model_n_params = int_field(o, e, "model_n_params", 1, 1e18);
    p.n_batch = (uint32_t) int_field(o, e, "n_batch", 1, k_u32);
    p.n_ubatch = (uint32_t) int_field(o, e, "n_ubatch", 1, k_u32);
    p.n_threads = (int) int_field(o, e, "n_threads", 0, 65536);
    p.type_k = string_field(o, e, "type_k");
    p.type_v = string_field(o, e, "type_v");
    const json & fa = field(o, e, "flash_attn");
    if (fa.is_boolean()) p.flash_attn = fa.get<bool>() ? 1 : 0;   // llama-bench before the auto mode wrote a bool
    else p.flash_attn = (int) int_field(o, e, "flash_attn", -1, 1);   // llama_flash_attn_type: auto -1, off 0, on 1
    p.n_prompt = (uint32_t) int_field(o, e, "n_prompt", 0, k_max_bench_tokens);
    p.n_gen = (uint32_t) int_field(o, e, "n_gen", 0, k_max_bench_tokens);
    p.n_depth = (uint32_t) int_field(o, e, "n_depth", 0, k_max_bench_tokens);
    if (p.n_prompt + p.n_gen == 0) bad_field(e, "n_prompt", "0", "and n_gen are both 0: nothing was timed");
    if ((double) p.n_prompt + p.n_gen + p.n_depth > k_max_bench_tokens) {
        bad_field(e, "n_depth", fmt::format("{}+{}+{}", p.n_depth, p.n_prompt, p.n_gen),
                  fmt::format("+ n_prompt + n_gen exceed {:.0f} tokens, more than kvsim calibrate replays per result", k_max_bench_tokens));
    }
    // 1e15 ns = 11.6 days: beyond it avg_ns is not a benchmark time (and 2^64-1 is a wrapped counter)
    p.avg_s = int_field(o, e, "avg_ns", 1, 1e15) * 1e-9;
    if (o.contains("n_seq")) p.n_seq = (uint32_t) int_field(o, e, "n_seq", 1, 256);
    if (o.contains("n_seq_gen")) {
        p.n_seq_gen = (uint32_t) int_field(o, e, "n_seq_gen", 1, p.n_seq);   // at most the row's n_seq (default 1)
        if (p.n_gen == 0) bad_field(e, "n_seq_gen", std::to_string(p.n_seq_gen), "says which sequences take the n_gen steps, and n_gen is 0");
    }
    if (o.contains("n_ctx")) p.n_ctx = (uint32_t) int_field(o, e, "n_ctx", 0, k_max_bench_tokens);
    if (o.contains("kv_unified")) {
        if (!o["kv_unified"].is_boolean()) bad_field(e, "kv_unified", json_text(o["kv_unified"]), "must be true or false");
        p.kv_unified = o["kv_unified"].get<bool>();
    }
    if (o.contains("k_shift")) {
        if (!o["k_shift"].is_boolean()) bad_field(e, "k_shift", json_text(o["k_shift"]), "must be true or false");
        p.k_shift = o["k_shift"].get<bool>();
        // the shift moves the one sequence's cells down by one before each step: a step needs a cell to remove
        if (p.k_shift && (p.n_gen == 0 || p.n_prompt != 0 || p.n_seq != 1 || p.n_depth < 2)) {
            bad_field(e, "k_shift", "true", "needs steps of one sequence (n_gen > 0, n_prompt 0, n_seq 1) after a depth of 2 or more");
        }
    }
    if ((double) p.n_seq * (p.n_prompt + p.n_gen + p.n_depth) > k_max_bench_tokens) {
        bad_field(e, "n_seq", std::to_string(p.n_seq), fmt::format("times the tokens per sequence exceeds {:.0f} tokens", k_max_bench_tokens));
    }
    // a context that cannot hold the row's cells could not have run it (bench_context used to widen it silently; a
    // K-shift ropes every cell of the context, so its price depends on the size given)
    if (p.n_ctx > 0 && (double) p.n_ctx < (double) p.n_seq * (p.n_prompt + p.n_gen + p.n_depth)) {
        bad_field(e, "n_ctx", std::to_string(p.n_ctx),
                  fmt::format("is smaller than the row's {} sequence(s) x {} tokens (n_depth + n_prompt + n_gen)", p.n_seq,
                              (uint64_t) p.n_prompt + p.n_gen + p.n_depth));
    }
    // a decode step of 64+ sequences takes ggml's tiled path, whose replay walks K/V tiles x sequences every step
    // (ubatch_tiled_cells): quadratic in n_gen. 256 sequences x 4000 steps, within the token caps, replayed for 8 min
    const double seqs = p.seqs_generating();
    const double tile_visits = seqs < 64 ? 0 : p.n_gen * seqs * (p.n_seq * ((double) p.n_prompt + p.n_gen + p.n_depth) / 64);
    if (tile_visits > k_max_tile_visits) {
        bad_field(e, "n_gen", fmt::format("{} x {} sequences", p.n_gen, p.seqs_generating()),
                  fmt::format("is too long for {} sequences decoding together: n_gen x sequences x cells / 64 = {:.3g}, over the "
                              "{:.3g} kvsim calibrate replays per result", p.seqs_generating(), tile_visits, k_max_tile_visits));
    }
    const auto optional_text = [&](const char * name) {
        if (!o.contains(name)) return std::string();
        if (!o[name].is_string()) bad_field(e, name, json_text(o[name]), "must be a string");
        const std::string v = o[name].get<std::string>();
        return v == "unknown" ? std::string() : v;   // a build without git says "unknown"
    };
    p.build = optional_text("build_commit");
    const std::string gpu = optional_text("gpu_info"), cpu = optional_text("cpu_info");
    p.device = gpu.empty() ? cpu : gpu;
    p.stddev_s = int_field(o, e, "stddev_ns", 0, 1e15) * 1e-9;
    return p;
}

// The tensors a point's ubatch touches, from a context shaped as llama-bench's.
context_params bench_context(const llama_bench_row & p) {
    context_params cp;
    cp.n_ctx = std::max<uint32_t>(p.n_ctx, p.n_seq * (p.n_prompt + p.n_gen + p.n_depth));
    cp.n_seq_max = p.n_seq;
    cp.kv_unified = p.kv_unified;
    cp.n_batch = p.n_batch;
    cp.n_ubatch = std::min(p.n_ubatch, p.n_batch);
    // the field that names an unknown type (a bad type_v was reported as type_k); not e.what(): it repeats the value unescaped
    for (const auto & [field, text, type] : {std::tuple{"type_k", &p.type_k, &cp.type_k}, {"type_v", &p.type_v, &cp.type_v}}) {
        try {
            *type = parse_ggml_type(*text);
        } catch (const std::invalid_argument &) {
            bad_field({p.file, p.index, p.line}, field, *text, "names a cache type kvsim does not model (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl)");
        }
    }
    cp.flash_attn = p.flash_attn != 0;
    return cp;
}

// llama-bench test_prompt: n tokens per sequence from position pos, the first n_seqs sequences' in one batch
// (llama-batched-bench adds sequence 0's, then 1's, ...), decoded in n_batch views through the op door (each decode
// tagged with the result's entry number).
void decode_prompt(op_runner & run, uint32_t n, uint32_t n_batch, llama_pos & pos, const llama_bench_row & p,
                   uint32_t n_seqs) {
    llama_batch_in all;
    for (llama_seq_id s = 0; s < (llama_seq_id) n_seqs; ++s) {
        for (uint32_t i = 0; i < n; ++i) all.add(pos + (llama_pos) i, {s});
    }
    pos += (llama_pos) n;
    for (uint32_t done = 0; done < all.n_tokens();) {
        const uint32_t k = std::min(all.n_tokens() - done, n_batch);
        llama_batch_in b;
        for (uint32_t i = done; i < done + k; ++i) b.add(all.pos[i], all.seq_id[i]);
        if (run.decode(b, (long) p.index) != DECODE_OK) bad_field({p.file, p.index, p.line}, "n_depth", std::to_string(p.n_depth), "does not fit the context");
        done += k;
    }
}

double percentile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const double x = q * (double) (v.size() - 1);
    const size_t i = (size_t) x;
    return i + 1 < v.size() ? v[i] + (v[i + 1] - v[i]) * (x - (double) i) : v[i];
}
}  // namespace

std::string llama_bench_row::test_name() const {
    std::string s = n_prompt && n_gen ? fmt::format("pp{}+tg{}", n_prompt, n_gen) : n_prompt ? fmt::format("pp{}", n_prompt) : fmt::format("tg{}", n_gen);
    if (n_depth) s += fmt::format(" @ d{}", n_depth);
    if (n_seq > 1) s += fmt::format(" x{}", n_seq);   // llama-batched-bench's -npl
    if (seqs_generating() < n_seq) s += fmt::format(" ({} decoding)", seqs_generating());
    if (k_shift) s += " after K-shifts";
    return s;
}

namespace {
// The 1-based line of the one non-blank line of text; 0 when there are several (a pretty-printed object).
long only_line(const std::string & text) {
    long n = 0, found = 0;
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
        ++n;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        if (found) return 0;
        found = n;
    }
    return found;
}
}  // namespace

std::vector<llama_bench_row> read_llama_bench(const std::string & path) {
    const std::string text = read_small_file(path, "llama-bench file");
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) throw input_error(path, 0, "", "is empty (no llama-bench results)");
    json j;
    try {
        if (looks_like_llama_bench_markdown(text)) {
            j = llama_bench_markdown_to_json(text, path);
        } else {
            j = parse_json_bounded(text);
            // "_line" is the readers' own (markdown rows, JSONL lines): a file's "_line" would misname its errors
            if (j.is_object()) {
                j.erase("_line");
                if (const long line = only_line(text); line > 0) j["_line"] = line;   // -o jsonl of one test
            }
            if (j.is_array()) {
                for (auto & o : j) {
                    if (o.is_object()) o.erase("_line");
                }
            }
        }
    } catch (const json::parse_error & e) {
        // -o jsonl: one object per line
        j = json::array();
        std::istringstream lines(text);
        std::string line;
        long n = 0;
        while (std::getline(lines, line)) {
            ++n;
            if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
            try {
                json o = parse_json_bounded(line);
                if (!o.is_object()) {
                    throw input_error(path, n, line.substr(0, 40), "not a llama-bench result: a line of -o jsonl holds one JSON object");
                }
                o["_line"] = n;   // its errors name the line, as a markdown row's do
                j.push_back(std::move(o));
            } catch (const json_refused & le) {   // too deep, a key twice, a number like 1e400
                throw input_error(path, n, "", fmt::format("not a llama-bench result: {}", le.what()));
            } catch (const json::exception & le) {
                // earlier lines parsed: a JSONL file with one bad line, so name that line
                if (!j.empty()) throw input_error(path, n, line.substr(0, 40), fmt::format("not JSON (llama-bench -o jsonl): {}", le.what()));
                throw input_error(path, 0, "", fmt::format("not JSON (llama-bench -o json or -o jsonl): {}", e.what()));
            }
        }
    } catch (const input_error &) {
        throw;
    } catch (const json_refused & e) {   // too deep, a key twice (named by its place), a number like 1e400 (its line)
        throw input_error(path, e.line, "", fmt::format("not a llama-bench result: {}", e.what()));
    } catch (const std::exception & e) {
        throw input_error(path, 0, "", fmt::format("not a llama-bench result: {}", e.what()));
    }
    // one object: the one line of llama-bench -o jsonl with a single test
    if (j.is_object()) j = json::array({std::move(j)});
    if (!j.is_array()) throw input_error(path, 0, "", "not a llama-bench result: expected a JSON array of objects (llama-bench -o json)");
    if (j.empty()) throw input_error(path, 0, "", "holds no llama-bench results (an empty array)");
    std::vector<llama_bench_row> v;
    for (size_t i = 0; i < j.size(); ++i) v.push_back(parse_point(j[i], path, i));
    return v;
}

const weight_file_type & bench_weight_type(const llama_bench_row & p, const weight_file_type * given) {
    std::string t = p.model_type;
    const std::string guessed = "(guessed) ";
    if (const size_t g = t.find(guessed); g != std::string::npos) t.erase(g, guessed.size());
    const weight_file_type * found = nullptr;
    size_t best = 0;
    for (const auto & name : weight_file_type_names()) {
        const weight_file_type & f = parse_weight_file_type(name);
        const std::string fn = f.ftype_name;
        if (t.size() >= fn.size() + 1 && t.compare(t.size() - fn.size(), fn.size(), fn) == 0 && t[t.size() - fn.size() - 1] == ' ' &&
            fn.size() > best) {
            found = &f;
            best = fn.size();
        }
    }
    if (!found) {
        bad_field({p.file, p.index, p.line}, "model_type", p.model_type,
                  fmt::format("does not end in a weight type kvsim knows ({})", fmt::join(weight_file_type_names(), ", ")));
    }
    if (given && given != found) {
        bad_field({p.file, p.index, p.line}, "model_type", p.model_type,
                  fmt::format("says the weights are {}, not --weights {}", found->name, given->name));
    }
    return *found;
}

const model_shape & bench_model(const llama_bench_row & p, const weight_file_type & ft, const std::vector<model_shape> & models) {
    if (models.size() == 1) {
        check_bench_model(p, models.front(), ft);
        return models.front();
    }
    for (const auto & m : models) {
        try {
            check_bench_model(p, m, ft);
            return m;
        } catch (const input_error &) {   // another of the candidates
        }
    }
    std::vector<std::string> names;
    for (const auto & m : models) names.push_back(m.name);
    bad_field({p.file, p.index, p.line}, "model_n_params", fmt::format("{:.0f}", p.model_n_params),
              fmt::format("with model_size {:.0f} matches none of the models {} in {} (parameters within 2 %, size within 3 %): "
                          "a model kvsim has no preset for, or name the results' model with --model",
                          p.model_size, cut_text(fmt::format("{}", fmt::join(names, ", "))), ft.name));
}

void check_bench_model(const llama_bench_row & p, const model_shape & m, const weight_file_type & ft) {
    const weight_bytes w = model_weight_bytes(m, ft);
    if (std::abs(p.model_n_params / w.n_params - 1) > 0.02) {
        bad_field({p.file, p.index, p.line}, "model_n_params", fmt::format("{:.0f}", p.model_n_params),
                  fmt::format("is not model {}'s ({:.0f} parameters): a result of another model", m.name, w.n_params));
    }
    if (std::abs(p.model_size / w.file_bytes() - 1) > 0.03) {
        bad_field({p.file, p.index, p.line}, "model_size", fmt::format("{:.0f}", p.model_size),
                  fmt::format("is not model {} in {} ({:.0f} bytes expected, llama-quantize's tensor types)", m.name, ft.name,
                              w.file_bytes()));
    }
}

std::vector<ubatch_terms> bench_row_ubatches(const llama_bench_row & p, const step_time_model & tm) {
    context ctx(tm.model, bench_context(p));
    op_runner run(ctx);
    // the row's own -t decides whether ggml split a token's cells among threads (ubatch_split_kv_visible)
    step_time_model as_run = tm;
    if (p.n_threads > 0) as_run.device.threads = p.n_threads;
    ubatch_work_collector col(ctx, as_run);
    llama_pos pos = 0;
    decode_prompt(run, p.n_depth, ctx.sizes().n_batch, pos, p, p.n_seq);   // untimed (or restored from a saved state)
    const scoped_decode_observer timed(run, &col);
    decode_prompt(run, p.n_prompt, ctx.sizes().n_batch, pos, p, p.n_seq);
    for (uint32_t i = 0; i < p.n_gen; ++i) {
        if (p.k_shift) {   // the context shift of kshift_steps.py: the oldest cell out, the others one position down
            run.seq_rm(0, 0, 1, (long) p.index);
            run.seq_add(0, 1, -1, -1, (long) p.index);
            --pos;
        }
        decode_prompt(run, 1, ctx.sizes().n_batch, pos, p, p.seqs_generating());   // a token each
    }
    std::vector<ubatch_terms> v;
    for (const auto & w : col.work) v.push_back(tm.terms(w));
    return v;
}

namespace {
// The fitted terms: seconds per weight byte (memory-bound ubatches), per ubatch, per K/V byte,
// per attention FLOP, then seconds per dense FLOP for each ubatch size (compute-bound ubatches).
// Past the GEMM sizes, one column per weight type but the first (fit_state::type0): what its reads cost per byte beyond
// the first type's (results of several models only: fit_row).
enum term { T_WEIGHTS, T_UBATCH, T_KV, T_ATTN_FLOPS, T_EXTRA_PASS, T_SCAN, T_UNPACKED, T_TILED, T_LAYER, T_GEMM_LAYER, T_FLOAT_ROWS, T_KSHIFT,
            T_GEMM0 };
const char * const k_term_names[T_GEMM0] = {"weight_read_fraction", "ubatch_overhead_s", "attn_s_per_kv_byte", "attn_s_per_flop",
                                            "extra_pass_s_per_byte", "attn_s_per_scanned_cell", "unpacked_s_per_param_row",
                                            "attn_tiled_s_per_kv_byte", "layer_overhead_s", "gemm_layer_overhead_s",
                                            "float_gemm_extra_s_per_byte", "k_shift_s_per_theta"};

// What a fit needs of each result beside its ubatches: its model's layers (the per-layer cost) and its weight type (an
// index into the fit's types: a read rate per type)
struct fit_row {
    double n_layer = 0;
    size_t type = 0;
};

// A result's ubatches that a fit cannot tell apart, summed: the same tokens, weight bytes, dense FLOPs and path take the
// same branch and the same columns, the rest of their terms add up (a tg512 result is one group of 512 ubatches). The
// fit's rounds walk groups, not ubatches: 100 rounds over every ubatch of 143 results, per fold of a leave-one-out, were
// minutes (over the CI test's 300 s under ASan).
struct ubatch_group {
    ubatch_terms u;       // n_tokens, weight_bytes, dense_flops and gemv_only of each ubatch; the other terms summed
    double count = 0;     // ubatches in the group
};
std::vector<ubatch_group> group_ubatches(const std::vector<ubatch_terms> & ubatches) {
    std::vector<ubatch_group> v;
    for (const auto & t : ubatches) {
        auto g = std::find_if(v.begin(), v.end(), [&](const ubatch_group & g) {
            return g.u.n_tokens == t.n_tokens && g.u.weight_bytes == t.weight_bytes && g.u.dense_flops == t.dense_flops &&
                   g.u.gemv_output_bytes == t.gemv_output_bytes && g.u.gemv_output_flops == t.gemv_output_flops &&
                   g.u.gemv_only == t.gemv_only && g.u.float_multi_row == t.float_multi_row;
        });
        if (g == v.end()) {
            v.push_back({t, 1});
            continue;
        }
        g->count += 1;
        for (double ubatch_terms::*f : {&ubatch_terms::kv_bytes, &ubatch_terms::attn_flops, &ubatch_terms::extra_pass_bytes,
                                        &ubatch_terms::scanned_cells, &ubatch_terms::unpacked_row_params,
                                        &ubatch_terms::tiled_kv_bytes, &ubatch_terms::tiled_attn_flops, &ubatch_terms::k_shift_thetas}) {
            g->u.*f += t.*f;
        }
    }
    return v;
}
using result_groups = std::vector<std::vector<ubatch_group>>;   // per result

struct fit_state {
    std::vector<double> x;          // T_GEMM0 + sizes.size() + (types - 1) terms
    std::vector<bool> active;
    std::vector<bool> from_base = std::vector<bool>(T_GEMM0, false);   // kept at the base profile's value (keep_from_base)
    std::vector<double> sizes;      // distinct tokens per ubatch, ascending
    std::vector<std::string> types; // the results' weight types (fit_row::type indexes them)
    size_t type0 = 0;               // the column of types[1]'s extra cost per byte
    // a read rate per type (results of several layer counts): one-token ubatches are their reads, whatever the GEMM
    // fraction at one token would say (the matrix-vector kernels' cost per byte is what the per-type rate is; left to
    // the branches, a fit put every quantized decode step on a "GEMM" at 1 token and had no quantized read left to rate)
    bool reads_by_type = false;
    size_t gemm_of(double n_tokens) const {
        return T_GEMM0 + (size_t) (std::lower_bound(sizes.begin(), sizes.end(), n_tokens) - sizes.begin());
    }
    // seconds per weight byte of type `type`
    double read_s(size_t type) const { return x[T_WEIGHTS] + (type > 0 ? x[type0 + type - 1] : 0.0); }
    // the output's one-row pass (ubatch_terms::gemv_output_bytes): read-bound as a one-token step would be
    bool gemv_memory_bound(const ubatch_terms & t, size_t type) const {
        return reads_by_type || t.gemv_output_bytes * read_s(type) >= t.gemv_output_flops * x[gemm_of(1)];
    }
    bool memory_bound(const ubatch_terms & t, size_t type) const {
        return t.gemv_only || (reads_by_type && t.n_tokens <= 1) || t.weight_bytes * read_s(type) >= t.dense_flops * x[gemm_of(t.n_tokens)];
    }
    bool is_type(size_t k) const { return k >= type0; }
    std::string name(size_t k) const {
        if (is_type(k)) return fmt::format("weight_read_fraction_by_type {}", types[k - type0 + 1]);
        return k < T_GEMM0 ? k_term_names[k] : fmt::format("gemm_fraction at {:g} tokens", sizes[k - T_GEMM0]);
    }
    // The fitted GEMM fractions: what the profile's gemm_fraction becomes.
    std::vector<std::pair<double, double>> fractions(double peak) const {
        std::vector<std::pair<double, double>> v;
        for (size_t k = T_GEMM0; k < type0; ++k) {
            if (active[k]) v.emplace_back(sizes[k - T_GEMM0], 1.0 / (x[k] * peak));
        }
        return v;
    }
    // A size without compute-bound ubatches takes the fraction the profile will give it
    // (device_profile::gemm_fraction_at over the fitted sizes), so the branches stay consistent.
    void fill_inactive_sizes(double peak) {
        device_profile d;
        d.gemm_fraction = fractions(peak);
        if (d.gemm_fraction.empty()) return;
        for (size_t k = T_GEMM0; k < type0; ++k) {
            if (!active[k]) x[k] = 1.0 / (d.gemm_fraction_at(sizes[k - T_GEMM0]) * peak);
        }
    }
};

// Gives up the first still active term of `order` (fixed at 0; a note says why); false when none is left.
bool give_up_first(fit_state & s, std::initializer_list<term> order, const char * why, std::vector<std::string> & notes) {
    for (term t : order) {
        if (!s.active[t]) continue;
        s.active[t] = false;
        s.x[t] = 0;
        notes.push_back(fmt::format("{}: {}; fixed at 0{}", s.name(t), why, t == T_TILED ? " (the tiled kernel's K/V priced as the one-row kernel's)" : ""));
        return true;
    }
    return false;
}
// Gives up the last still active weight type's own read rate (its reads then cost what the first type's do).
bool give_up_type(fit_state & s, const char * why, std::vector<std::string> & notes) {
    for (size_t k = s.x.size(); k-- > s.type0;) {
        if (!s.active[k]) continue;
        s.active[k] = false;
        s.x[k] = 0;
        notes.push_back(fmt::format("{}: {}; read at {}'s rate", s.name(k), why, s.types.front()));
        return true;
    }
    return false;
}

// Least squares of the active terms on relative error (rows divided by the measured time);
// false when the active columns are rank-deficient.
bool solve(const result_groups & pts, const std::vector<double> & y, const std::vector<fit_row> & rows,
           fit_state & s, const std::vector<bool> & branch_mem) {
    std::vector<size_t> cols;
    for (size_t k = 0; k < s.x.size(); ++k) {
        if (s.active[k]) cols.push_back(k);
    }
    Eigen::MatrixXd A((Eigen::Index) pts.size(), (Eigen::Index) cols.size());
    Eigen::VectorXd b((Eigen::Index) pts.size());
    size_t ub = 0;
    for (size_t i = 0; i < pts.size(); ++i) {
        std::vector<double> row(s.x.size(), 0.0);
        // no tiled price of its own (inactive at 0): the tiled path's cells priced as the one-row path's, as seconds_of does
        const bool tiled_apart = s.active[T_TILED] || s.x[T_TILED] > 0;
        for (const auto & g : pts[i]) {
            const ubatch_terms t = tiled_apart ? g.u : tiled_as_one_row(g.u);
            const double n = g.count;
            if (branch_mem[ub++]) {
                row[T_WEIGHTS] += n * t.weight_bytes;
                if (rows[i].type > 0) row[s.type0 + rows[i].type - 1] += n * t.weight_bytes;
                if (t.float_multi_row) row[T_FLOAT_ROWS] += n * t.weight_bytes;
            } else {
                row[s.gemm_of(t.n_tokens)] += n * t.dense_flops;
            }
            // the output's one-row pass, on the branch of its own a one-token step would take (the layers' next)
            if (branch_mem[ub++]) {
                row[T_WEIGHTS] += n * t.gemv_output_bytes;
                if (rows[i].type > 0) row[s.type0 + rows[i].type - 1] += n * t.gemv_output_bytes;
            } else {
                row[s.gemm_of(1)] += n * t.gemv_output_flops;
            }
            row[T_UBATCH] += n;
            row[T_LAYER] += n * rows[i].n_layer;
            if (t.n_tokens >= 2) row[T_GEMM_LAYER] += n * rows[i].n_layer;
            row[T_KV] += t.kv_bytes;
            row[T_ATTN_FLOPS] += t.attn_flops;
            row[T_EXTRA_PASS] += t.extra_pass_bytes;
            row[T_SCAN] += t.scanned_cells;
            row[T_UNPACKED] += t.unpacked_row_params;
            row[T_TILED] += t.tiled_kv_bytes;
            row[T_KSHIFT] += t.k_shift_thetas;
        }
        double fixed = 0;
        for (size_t k = 0; k < s.x.size(); ++k) {
            if (!s.active[k]) fixed += row[k] * s.x[k];
        }
        for (size_t c = 0; c < cols.size(); ++c) A((Eigen::Index) i, (Eigen::Index) c) = row[cols[c]] / y[i];
        b[(Eigen::Index) i] = 1.0 - fixed / y[i];
    }
    // unit-norm columns: the rank test must not depend on units (bytes vs FLOPs vs counts)
    const Eigen::VectorXd norm = A.colwise().norm().transpose();
    for (Eigen::Index c = 0; c < A.cols(); ++c) {
        if (norm[c] == 0) return false;
        A.col(c) /= norm[c];
    }
    Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(A);
    qr.setThreshold(1e-9);
    if (qr.rank() < A.cols()) return false;
    const Eigen::VectorXd sol = qr.solve(b);
    for (size_t c = 0; c < cols.size(); ++c) s.x[cols[c]] = sol[(Eigen::Index) c] / norm[(Eigen::Index) c];
    return true;
}

std::vector<bool> branches(const result_groups & pts, const std::vector<fit_row> & rows, const fit_state & s) {
    std::vector<bool> v;
    for (size_t i = 0; i < pts.size(); ++i)
        for (const auto & g : pts[i]) {
            v.push_back(s.memory_bound(g.u, rows[i].type));
            v.push_back(s.gemv_memory_bound(g.u, rows[i].type));
        }
    return v;
}
// Fewer results than free terms (a published pp512 + tg128 pair): the per-ubatch cost, then the
// attention terms, are taken from the base profile, each named in notes, until the results cover the
// rest. False when even the weight-read and GEMM terms outnumber the results.
bool keep_from_base(fit_state & s, const device_profile & base, size_t n_results, std::vector<std::string> & notes) {
    const std::pair<size_t, double> order[] = {{T_KSHIFT, base.k_shift_s_per_theta},
                                               {T_FLOAT_ROWS, base.float_gemm_extra_s_per_byte},
                                               {T_GEMM_LAYER, base.gemm_layer_overhead_s},
                                               {T_LAYER, base.layer_overhead_s},
                                               {T_SCAN, base.attn_s_per_scanned_cell},
                                               {T_UNPACKED, base.unpacked_s_per_param_row},
                                               {T_TILED, base.attn_tiled_s_per_kv_byte},
                                               {T_EXTRA_PASS, base.extra_pass_s_per_byte},
                                               {T_UBATCH, base.ubatch_overhead_s},
                                               {T_ATTN_FLOPS, base.attn_s_per_flop},
                                               {T_KV, base.attn_s_per_kv_byte}};
    const auto enough = [&] { return n_results >= (size_t) std::count(s.active.begin(), s.active.end(), true); };
    // a read rate per weight type first: without it every type reads at the first one's
    while (!enough() && give_up_type(s, fmt::format("{} results cannot also fit it", n_results).c_str(), notes)) {
    }
    for (const auto & [t, value] : order) {
        if (enough()) return true;
        if (!s.active[t]) continue;
        s.active[t] = false;
        s.x[t] = value;
        s.from_base[t] = true;
        notes.push_back(fmt::format("{}: kept from the base profile ({:g}): {} results cannot also fit it", s.name(t), value, n_results));
    }
    return enough();
}

// Each result's weight type (--weights, when given, must be each one's) and model (bench_model among `models`); the
// distinct types go to r.weights, the distinct models' names to r.models.
struct checked_rows {
    std::vector<const weight_file_type *> ft;
    std::vector<const model_shape *> ms;
};
// Cells the replay of one result touches (bench_row_ubatches), an upper bound: its cache's cells (weighted 8: building
// a cell costs about 8 walked ones) and, per timed ubatch, the cells up to n_kv that the step-time counts walk
// (ubatch_tiled_cells for 64+ tokens, with K/V tiles x sequences; ubatch_split_kv_visible for a 1-token step in a
// cache of several sequences). Measured (AMD EPYC, 2 cores): 2-4.5 ns per walked cell, 20 ns per cache cell.
double replay_cells(const llama_bench_row & p) {
    const double seqs = p.n_seq, gen_seqs = p.seqs_generating();
    const double ctx = std::max<double>(p.n_ctx, seqs * ((double) p.n_depth + p.n_prompt + p.n_gen));
    const double ub = std::max<uint32_t>(1, std::min(p.n_ubatch, p.n_batch));
    const double prompt_ubatches = std::ceil(seqs * p.n_prompt / ub);
    const double prompt_kv = seqs * (p.n_depth + p.n_prompt / 2.0);
    const double prompt = prompt_ubatches * prompt_kv * (1 + std::min(ub, seqs) / 64);
    const double gen_kv = seqs * ((double) p.n_depth + p.n_prompt) + gen_seqs * p.n_gen / 2.0;
    const double gen = seqs < 2 ? 0 : p.n_gen * std::ceil(gen_seqs / ub) * gen_kv * (1 + std::min(ub, gen_seqs) / 64);
    // each K-shift walks the cache's cells, about 30x a counted cell (a hostile check: 88 ms a step at 10^6 cells)
    const double shifts = p.k_shift ? 32 * p.n_gen * ctx : 0;
    return 8 * ctx + prompt + gen + shifts;
}

// All the results one command replays: about 10-20 s (2^32 cells). Files of many large results ran for minutes
// (one result of n_prompt 2^20 at -ub 64: 39 s; 2 sequences, 1 decoding, n_gen 65536 at depth 262144: 70 s).
constexpr double k_max_replay_cells = 4294967296.0;

checked_rows check_rows(const std::vector<llama_bench_row> & points, const std::vector<model_shape> & models,
                        const weight_file_type * weights, calibration_result & r) {
    if (points.empty()) throw usage_error("kvsim calibrate: no llama-bench results");
    if (models.empty()) throw usage_error("kvsim calibrate: no model to match the results to");
    double cells = 0;
    for (const auto & p : points) {
        if ((cells += replay_cells(p)) > k_max_replay_cells) {
            throw input_error(p.file, p.line, p.test_name(),
                              fmt::format("{}the results up to this one replay about {:.3g} cache cells (cells built and walked per "
                                          "timed ubatch), more than the {:.3g} kvsim calibrate replays in all; give fewer or shorter results",
                                          p.line > 0 ? "" : fmt::format("entry {}: ", p.index), cells, k_max_replay_cells));
        }
    }
    checked_rows v;
    for (const auto & p : points) {
        const weight_file_type & ft = bench_weight_type(p, weights);
        const model_shape & m = bench_model(p, ft, models);
        v.ft.push_back(&ft);
        v.ms.push_back(&m);
        if (std::find(r.weights.begin(), r.weights.end(), &ft) == r.weights.end()) r.weights.push_back(&ft);
        if (std::find(r.models.begin(), r.models.end(), m.name) == r.models.end()) r.models.push_back(m.name);
    }
    return v;
}
}  // namespace

namespace {
// One fit of the linear terms to results whose ubatches are given (float-weight ubatches' FLOPs already divided by the
// float_gemm_speedup being tried): the profile's terms, and the notes on terms it could not fit.
struct term_fit {
    device_profile profile;
    std::vector<std::string> notes;
    double sq_error = 0;   // sum of squared relative errors over the results
};

// Whether some ubatch has the term (a count above 0, or a flag set).
template <class T>
bool any_ubatch(const result_groups & pts, T ubatch_terms::*term) {
    for (const auto & p : pts)
        for (const auto & g : p)
            if (g.u.*term > 0) return true;
    return false;
}

// The timed ubatches one fit keeps for all its results together (about 300 bytes each).
constexpr size_t k_max_fit_ubatches = size_t(1) << 20;

// The refusal when the weight-read term stays below 0: fit_results adds the pair of results that contradict.
struct weight_term_negative : usage_error {
    using usage_error::usage_error;
};

// The results' models and weight types, as a fit sees them (fit_row), and the types in order of first use.
std::vector<fit_row> fit_rows(const checked_rows & c, std::vector<std::string> & types) {
    std::vector<fit_row> rows;
    for (size_t i = 0; i < c.ft.size(); ++i) {
        const std::string name = c.ft[i]->name;
        auto it = std::find(types.begin(), types.end(), name);
        if (it == types.end()) it = types.insert(types.end(), name);
        rows.push_back({(double) c.ms[i]->n_layer, (size_t) (it - types.begin())});
    }
    return rows;
}

// Results of several layer counts tell the per-layer costs from the per-ubatch one, and several models in one weight
// type let each type's read rate stand apart from the fixed costs (one model's two types cannot: their decode steps are
// two equations for three unknowns). Otherwise the per-layer costs are kept from the base and every type reads at one
// rate (set_read_fractions keeps the base's ratios between types).
bool several_layer_counts(const checked_rows & c) {
    for (const model_shape * m : c.ms) {
        if (m->n_layer != c.ms.front()->n_layer) return true;
    }
    return false;
}

// The per-layer costs and the per-type read rates: free across layer counts, else the base's (named when not 0).
void init_model_terms(fit_state & s, bool several, const device_profile & base, std::vector<std::string> & notes) {
    s.reads_by_type = several;
    for (size_t k = s.type0; k < s.x.size(); ++k) s.active[k] = several;
    for (const auto & [t, value] : {std::pair{T_LAYER, base.layer_overhead_s}, std::pair{T_GEMM_LAYER, base.gemm_layer_overhead_s}}) {
        s.x[t] = value;
        s.active[t] = several;
        if (!several && value > 0) {
            notes.push_back(fmt::format("{}: kept from the base profile ({:g}): results of one layer count cannot tell it from the "
                                        "per-ubatch cost", k_term_names[t], value));
        }
    }
}

// The fitted read rates as the profile holds them: a fraction per type when the fit had one per type (the types not
// fitted then read at their median), else the base's ratios between types scaled to the one fitted rate.
void set_read_fractions(const fit_state & s, const device_profile & base, double bw, device_profile & d, std::vector<std::string> & notes) {
    d.weight_read_fraction_by_type.clear();
    d.weight_read_fraction = 1.0 / (s.x[T_WEIGHTS] * bw);
    bool per_type = false;
    for (size_t k = s.type0; k < s.x.size(); ++k) per_type = per_type || s.active[k];
    if (per_type) {
        std::vector<double> f;
        for (size_t t = 0; t < s.types.size(); ++t) {
            f.push_back(1.0 / (s.read_s(t) * bw));
            d.weight_read_fraction_by_type[s.types[t]] = f.back();
        }
        std::sort(f.begin(), f.end());
        d.weight_read_fraction = f.size() % 2 ? f[f.size() / 2] : (f[f.size() / 2 - 1] + f[f.size() / 2]) / 2;
        return;
    }
    if (base.weight_read_fraction_by_type.empty()) return;
    const double scale = d.weight_read_fraction / base.read_fraction(s.types.front());
    for (const auto & [name, f] : base.weight_read_fraction_by_type) d.weight_read_fraction_by_type[name] = f * scale;
    d.weight_read_fraction = base.weight_read_fraction * scale;
    notes.push_back(fmt::format("weight_read_fraction_by_type: the base profile's ratios between weight types, scaled to the {} reads "
                                "fitted here ({:.3f}x the base's)", s.types.front(), scale));
}

// A K/V price the results could not fit (no K/V read, or one fitted below 0 or not separable: results at depth 0 see
// too few cells), fixed at 0 by the fit, would make every long context free. Priced instead as the profile's own rates
// say the hardware moves bytes and FLOPs: K/V read at its f16 weight-read rate (a decode step's attention streams the
// cache as its matrix-vector kernels stream weights) and, charged per cell up to n_kv and not fitted either, attention
// FLOPs at its float GEMM rate of the largest ubatch (flash attention's tiles run on the same units as cuBLAS's). A
// fitted K/V price is left alone with its FLOPs: on these results it carries what the attention costs, and a FLOP price
// on top would count it twice. On the H200 (fit on depth 0, predicting decode at depth 4096-16384): 16.7 -> 8.3 %
// (docs/benchmarks.md).
void price_unfitted_attention(const fit_state & s, double float_speedup, double peak, device_profile & d,
                              std::vector<std::string> & notes) {
    const auto unfitted = [&](term t) { return !s.active[t] && !s.from_base[t] && s.x[t] == 0; };
    if (d.attention != "linear" || !unfitted(T_KV)) return;
    const double read_gbs = d.bandwidth_gbs * d.read_fraction("f16");
    d.attn_s_per_kv_byte = 1.0 / (read_gbs * 1e9);
    notes.push_back(fmt::format("attn_s_per_kv_byte: instead of 0, K/V read at the profile's f16 weight-read rate ({:.4g} GB/s): these "
                                "results cannot price attention", read_gbs));
    if (d.attention_cells != "n_kv" || !unfitted(T_ATTN_FLOPS) || d.gemm_fraction.empty()) return;
    const double flops = peak * d.gemm_fraction.back().second * float_speedup;
    d.attn_s_per_flop = 1.0 / flops;
    notes.push_back(fmt::format("attn_s_per_flop: instead of 0, attention FLOPs at the profile's float GEMM rate of {:g}-token ubatches "
                                "({:.3g} TFLOP/s)", d.gemm_fraction.back().first, flops / 1e12));
}

// The fit of every term given the float speed-up: `pts` the results' ubatch groups with float-weight FLOPs already
// divided by `float_speedup` (with_float_speedup), `ubatches` the same ubatches one by one (the fitted profile's
// squared error, priced as replay prices them).
term_fit fit_terms(const result_groups & pts, const std::vector<std::vector<ubatch_terms>> & ubatches, double float_speedup,
                   const std::vector<double> & y, const checked_rows & c, const device_profile & base) {
    term_fit r;
    fit_state s;
    const std::vector<fit_row> rows = fit_rows(c, s.types);
    for (const auto & p : pts)
        for (const auto & g : p) s.sizes.push_back(g.u.n_tokens);
    std::sort(s.sizes.begin(), s.sizes.end());
    s.sizes.erase(std::unique(s.sizes.begin(), s.sizes.end()), s.sizes.end());
    const double bw = base.bandwidth_gbs * 1e9, peak = base.peak_tflops * 1e12;
    s.type0 = T_GEMM0 + s.sizes.size();
    s.x.assign(s.type0 + s.types.size() - 1, 0.0);
    s.active.assign(s.x.size(), true);
    s.x[T_WEIGHTS] = 1.0 / (bw * base.read_fraction(s.types.front()));
    for (size_t k = T_GEMM0; k < s.type0; ++k) s.x[k] = 1.0 / (peak * base.gemm_fraction_at(s.sizes[k - T_GEMM0]));
    init_model_terms(s, several_layer_counts(c), base, r.notes);
    // a term no result exercises is not free (no K/V read: all results single tokens at depth 0)
    const bool one_row_kv = any_ubatch(pts, &ubatch_terms::kv_bytes), tiled_kv = any_ubatch(pts, &ubatch_terms::tiled_kv_bytes);
    if (!one_row_kv && !tiled_kv) s.active[T_KV] = s.active[T_ATTN_FLOPS] = false;
    // charged on the visible cells, the K/V bytes and the attention FLOPs are both the visible cells times a constant
    // of the model: one column, fitted as attn_s_per_kv_byte
    if (base.attention_cells == "visible" && s.active[T_ATTN_FLOPS]) {
        s.active[T_ATTN_FLOPS] = false;
        r.notes.push_back("attn_s_per_flop: with the visible cells charged it is proportional to attn_s_per_kv_byte; fixed at 0");
    }
    // the repacked matmul's extra passes (step_time.h: repack_extra_passes): free when some result makes them
    s.x[T_EXTRA_PASS] = base.extra_pass_s_per_byte;
    if (!any_ubatch(pts, &ubatch_terms::extra_pass_bytes)) s.active[T_EXTRA_PASS] = false;
    // cells walked past the mask: only results of several sequences in one stream tell them from the visible ones
    s.x[T_SCAN] = base.attn_s_per_scanned_cell;
    if (!any_ubatch(pts, &ubatch_terms::scanned_cells)) s.active[T_SCAN] = false;
    // rows beyond one through unpacked matrices: results of several sequences (the output), or 2-3 token prompts of
    // a model with unpacked layers
    s.x[T_UNPACKED] = base.unpacked_s_per_param_row;
    if (!any_ubatch(pts, &ubatch_terms::unpacked_row_params)) s.active[T_UNPACKED] = false;
    // float weights read by a CUDA card's GEMM kernels (2+ tokens): free when some result has such ubatches
    s.x[T_FLOAT_ROWS] = base.float_gemm_extra_s_per_byte;
    if (!any_ubatch(pts, &ubatch_terms::float_multi_row)) s.active[T_FLOAT_ROWS] = false;
    // the K-shift's rotation angles: free when some result's steps follow K-shifts (kshift_steps.py's), else the base's
    // price (named in a note when it is not 0)
    const bool shifted = any_ubatch(pts, &ubatch_terms::k_shift_thetas);
    s.x[T_KSHIFT] = base.k_shift_s_per_theta;
    if (!shifted) s.active[T_KSHIFT] = false;
    // the tiled flash-attention path's cells (visible only)
    s.x[T_TILED] = base.attn_tiled_s_per_kv_byte;
    if (!tiled_kv) s.active[T_TILED] = false;
    if (tiled_kv && !one_row_kv) {
        // K/V read by the tiled kernel alone (prompts only): nothing to tell the two kernels apart, so one price for both,
        // fitted as attn_s_per_kv_byte (a price kept from the base for the one-row kernel made a roofline base's decode
        // K/V free)
        s.active[T_TILED] = false;
        s.x[T_TILED] = 0;
        r.notes.push_back("attn_tiled_s_per_kv_byte: no result reads K/V on the one-row kernel; the tiled kernel's K/V are priced "
                          "as attn_s_per_kv_byte");
    }
    std::vector<bool> branch = branches(pts, rows, s);
    std::vector<bool> gemm_free(s.x.size(), true);   // sizes not given up as unseparable
    constexpr int k_max_rounds = 100;
    // What each round leaves to the next: the split, the free terms and the prices of the others (a GEMM size given up
    // takes a price interpolated from the fitted ones). The next round is a function of it, so one met again means the
    // rounds cycle: the rounds up to k_max_rounds are skipped but for the ones that end at the phase of the cycle where
    // round k_max_rounds would end (the same fit, without running the cycle over and over: the H200's depth-0 fit
    // swapped the same ubatches back and forth for all 100 rounds, a third of fit-shipped-profiles.py's time). A split
    // and free terms met again with other fixed prices is no cycle: such rounds went on to settle.
    struct round_end {
        int round = 0;
        std::vector<bool> branch, active, gemm_free;
        std::vector<double> fixed;   // x of the terms not free; 0 for the free ones (solve's to fit)
        bool same_state(const round_end & o) const {
            return branch == o.branch && active == o.active && gemm_free == o.gemm_free && fixed == o.fixed;
        }
    };
    std::vector<round_end> ends;
    int cycle_from = -1, cycle_length = 0, stop_at = k_max_rounds;
    int round = 0;
    for (; round < stop_at; ++round) {
        // a branch no ubatch takes has no column: a size with no compute-bound ubatch is not free
        std::vector<bool> has(s.x.size(), false);
        size_t ub = 0;
        for (size_t i = 0; i < pts.size(); ++i) {
            for (const auto & g : pts[i]) {
                const bool mem = branch[ub++];
                ub++;   // the output's one-row pass: its branch alone makes no column free (its bytes, or its FLOPs, are a
                        // constant per ubatch of each size, the GEMM columns' combination when every ubatch is compute-bound)
                has[mem ? (size_t) T_WEIGHTS : s.gemm_of(g.u.n_tokens)] = true;
                if (mem && rows[i].type > 0) has[s.type0 + rows[i].type - 1] = true;
                if (mem && g.u.float_multi_row) has[T_FLOAT_ROWS] = true;
            }
        }
        if (!has[T_WEIGHTS]) s.active[T_WEIGHTS] = false;
        if (!has[T_FLOAT_ROWS] && s.active[T_FLOAT_ROWS]) {   // float prompts all compute-bound (pp512 and up): no column
            s.active[T_FLOAT_ROWS] = false;
            s.x[T_FLOAT_ROWS] = base.float_gemm_extra_s_per_byte;
        }
        for (size_t k = T_GEMM0; k < s.type0; ++k) s.active[k] = has[k] && gemm_free[k];
        for (size_t k = s.type0; k < s.x.size(); ++k) {   // a type without memory-bound ubatches reads at the first one's rate
            if (!has[k]) s.active[k] = false, s.x[k] = 0;
        }
        if (!keep_from_base(s, base, pts.size(), r.notes)) {
            throw usage_error(fmt::format("kvsim calibrate: {} llama-bench result(s) for {} free terms; run llama-bench with more "
                                          "-p/-n/-d/-ub values (e.g. -p 64,256,512 -n 32 -d 0,1024,4096)",
                                          pts.size(), (size_t) std::count(s.active.begin(), s.active.end(), true)));
        }
        if (std::none_of(s.active.begin(), s.active.end(), [](bool free) { return free; })) {
            // every term given up or kept (a lone deep prompt's GEMM priced below 0): no column left to fit
            throw usage_error(fmt::format("kvsim calibrate: no term of the fit is left{}; these results cannot fit a profile: run "
                                          "llama-bench with more -p/-n/-d values (e.g. -p 64,256,512 -n 32 -d 0,1024,4096)",
                                          r.notes.empty() ? "" : " (the last one: " + r.notes.back() + ")"));
        }
        if (!solve(pts, y, rows, s, branch)) {
            // not separable by these results: give up the least identifiable term, in this order
            // (the per-ubatch cost is collinear with the per-size GEMM terms when every size has one)
            // (a CUDA card's MMA-kernel K/V price, the tiled term with n_sm, needs prompts over long contexts: it goes before
            // the per-ubatch cost, which one model's prompts at depth 0 fit; a CPU's tiled price keeps its later place)
            const char * why = "these results cannot separate it from the other terms";
            const term cuda_tiled = base.n_sm > 0 ? T_TILED : T_SCAN;   // T_SCAN: already first in the list, no second give-up
            if (!give_up_first(s, {T_SCAN, T_KSHIFT, T_UNPACKED, T_FLOAT_ROWS, T_GEMM_LAYER, T_LAYER, cuda_tiled}, why, r.notes) && !give_up_type(s, why, r.notes) &&
                !give_up_first(s, {T_UBATCH, T_TILED, T_ATTN_FLOPS, T_KV, T_EXTRA_PASS}, why, r.notes)) {
                throw usage_error("kvsim calibrate: the results cannot separate the weight-read and GEMM terms");
            }
            continue;
        }
        // a negative cost is not physical: fix the most negative term and fit again
        // (a type's extra cost per byte may be below 0, a faster type than the first, as long as its reads cost time)
        size_t worst = s.x.size();
        for (size_t k = 0; k < s.type0; ++k) {
            if (s.active[k] && s.x[k] < 0 && (worst == s.x.size() || s.x[k] < s.x[worst])) worst = k;
        }
        if (worst == s.x.size()) {
            for (size_t t = 1; t < s.types.size(); ++t) {
                if (s.active[s.type0 + t - 1] && s.read_s(t) <= 0) worst = s.type0 + t - 1;
            }
        }
        if (worst < s.x.size() && s.is_type(worst)) {
            s.active[worst] = false;
            s.x[worst] = 0;
            r.notes.push_back(fmt::format("{}: its reads fitted to take no time; read at {}'s rate", s.name(worst), s.types.front()));
            continue;
        }
        if (worst < s.x.size()) {
            if (worst == T_WEIGHTS) {
                // the per-ubatch cost and the weight reads are both a constant per memory-bound ubatch: noise in
                // results of many small ubatches traded one for the other (measured: llama.cpp -t 2, 35.8 ms per
                // ubatch and weight reads below 0); the per-ubatch cost goes first, then the unseparable order
                if (!give_up_first(s, {T_UBATCH, T_GEMM_LAYER, T_LAYER, T_SCAN, T_KSHIFT, T_UNPACKED, T_FLOAT_ROWS, T_TILED, T_ATTN_FLOPS, T_KV,
                                        T_EXTRA_PASS},
                                   "fitted against the weight reads, which came out below 0", r.notes)) {
                    throw weight_term_negative("kvsim calibrate: the weight-read term came out negative; the results do not look like "
                                               "one model on one machine");
                }
                continue;
            }
            s.active[worst] = false;
            if (worst >= T_GEMM0) gemm_free[worst] = false;
            else s.x[worst] = 0;
            r.notes.push_back(fmt::format("{}: fitted below 0; {}{}", s.name(worst), worst >= T_GEMM0 ? "interpolated from the other sizes" : "fixed at 0",
                                          worst == T_TILED ? " (the tiled kernel's K/V priced as the one-row kernel's)" : ""));
            s.fill_inactive_sizes(peak);
            continue;
        }
        s.fill_inactive_sizes(peak);
        const std::vector<bool> next = branches(pts, rows, s);
        if (next == branch) break;
        if (cycle_from < 0) {
            round_end end{round, next, s.active, gemm_free, s.x};
            for (size_t k = 0; k < s.x.size(); ++k) {
                if (s.active[k]) end.fixed[k] = 0;
            }
            const auto seen = std::find_if(ends.begin(), ends.end(), [&](const round_end & e) { return e.same_state(end); });
            if (seen != ends.end()) {
                cycle_from = seen->round + 1, cycle_length = round - seen->round;
                stop_at = round + 1 + (k_max_rounds - 1 - round) % cycle_length;
            } else {
                ends.push_back(std::move(end));
            }
        }
        branch = next;
    }
    if (round == stop_at) {   // ubatches near the knee of the max can swap sides for ever: say that the last fit is kept
        r.notes.push_back(fmt::format("the split of the ubatches between weight reads and GEMMs did not settle in {} rounds{}; the "
                                      "last round's fit is kept", k_max_rounds,
                                      cycle_from < 0 ? "" : fmt::format(" (from round {} a cycle of {})", cycle_from + 1, cycle_length)));
    }
    device_profile & d = r.profile;
    d = base;
    d.source = "calibrated";
    d.float_gemm_speedup = 1.0;   // the FLOPs given already carry it; calibrate sets the one tried
    set_read_fractions(s, base, bw, d, r.notes);
    d.gemm_fraction = s.fractions(peak);
    if (d.gemm_fraction.empty()) {
        r.notes.push_back("gemm_fraction: no compute-bound ubatch in these results; kept from the base profile");
        d.gemm_fraction = base.gemm_fraction;
    }
    d.ubatch_overhead_s = s.x[T_UBATCH];
    d.layer_overhead_s = s.x[T_LAYER];
    d.gemm_layer_overhead_s = s.x[T_GEMM_LAYER];
    // attention fitted as linear terms, unless both came from the base profile: then its model too
    const bool attention_from_base = s.from_base[T_KV] && s.from_base[T_ATTN_FLOPS];
    d.attention = attention_from_base ? base.attention : "linear";
    d.attn_s_per_kv_byte = s.x[T_KV];
    d.attn_s_per_flop = s.x[T_ATTN_FLOPS];
    d.extra_pass_s_per_byte = s.x[T_EXTRA_PASS];
    d.attn_s_per_scanned_cell = s.x[T_SCAN];
    d.unpacked_s_per_param_row = s.x[T_UNPACKED];
    d.attn_tiled_s_per_kv_byte = s.x[T_TILED];
    d.float_gemm_extra_s_per_byte = s.x[T_FLOAT_ROWS];
    d.k_shift_s_per_theta = s.x[T_KSHIFT];
    if (!shifted && d.k_shift_s_per_theta > 0) {
        r.notes.push_back(fmt::format("k_shift_s_per_theta: kept from the base profile ({:g}): no result's steps follow a K-shift "
                                      "(scripts/time-validation/kshift_steps.py measures them)", d.k_shift_s_per_theta));
    }
    if (!s.active[T_FLOAT_ROWS] && !s.from_base[T_FLOAT_ROWS] && d.float_gemm_extra_s_per_byte > 0) {
        r.notes.push_back(fmt::format("float_gemm_extra_s_per_byte: kept from the base profile ({:g}): no result reads float weights "
                                      "memory-bound in a ubatch of 2 tokens or more", d.float_gemm_extra_s_per_byte));
    }
    price_unfitted_attention(s, float_speedup, peak, d, r.notes);
    for (size_t i = 0; i < pts.size(); ++i) {
        const step_time_model fitted{d, *c.ms[i], c.ft[i]};   // the float speed-up goes in the FLOPs (d's is 1)
        const double speedup = is_float_weight_type(*c.ft[i]) ? float_speedup : 1.0;
        double t = 0;
        for (ubatch_terms u : ubatches[i]) {
            u.dense_flops /= speedup;
            u.gemv_output_flops /= speedup;
            t += fitted.seconds_of(u);
        }
        r.sq_error += (t - y[i]) * (t - y[i]) / (y[i] * y[i]);
    }
    return r;
}

// The results' ubatch groups with the FLOPs of float-weight results divided by `speedup` (what
// step_time_model::seconds_of does with a profile's float_gemm_speedup).
result_groups with_float_speedup(result_groups pts, const std::vector<const weight_file_type *> & ft, double speedup) {
    for (size_t i = 0; i < pts.size(); ++i) {
        if (!is_float_weight_type(*ft[i])) continue;
        for (auto & g : pts[i]) {
            g.u.dense_flops /= speedup;
            g.u.gemv_output_flops /= speedup;
        }
    }
    return pts;
}

// float_gemm_speedup by a search on its logarithm (the other terms are linear given it): a coarse grid over
// 1/4..4, then golden-section around the best grid point. Results of one weight family cannot tell it: the base's.
double fit_float_speedup(const result_groups & groups, const std::vector<std::vector<ubatch_terms>> & pts,
                         const std::vector<double> & y, const checked_rows & c, const device_profile & base) {
    const auto cost = [&](double log_f) {
        try {
            const double f = std::exp(log_f);
            return fit_terms(with_float_speedup(groups, c.ft, f), pts, f, y, c, base).sq_error;
        } catch (const usage_error &) {
            return HUGE_VAL;
        }
    };
    const double lo = std::log(0.25), hi = std::log(4.0);
    const int n = 24;
    double best = 0, best_cost = HUGE_VAL;
    for (int i = 0; i <= n; ++i) {
        const double x = lo + (hi - lo) * i / n, c = cost(x);
        if (c < best_cost) best = x, best_cost = c;
    }
    double a = best - (hi - lo) / n, b = best + (hi - lo) / n;
    const double g = (std::sqrt(5.0) - 1) / 2;
    // golden section: one new fit per step, the other inner point carried over
    double x1 = b - g * (b - a), x2 = a + g * (b - a), c1 = cost(x1), c2 = cost(x2);
    for (int i = 0; i < 30; ++i) {
        if (c1 < c2) {
            b = x2, x2 = x1, c2 = c1;
            x1 = b - g * (b - a), c1 = cost(x1);
        } else {
            a = x1, x1 = x2, c1 = c2;
            x2 = a + g * (b - a), c2 = cost(x2);
        }
    }
    const double mid = (a + b) / 2;
    return std::exp(cost(mid) <= best_cost ? mid : best);
}
}  // namespace

namespace {
// Two results' build_commit (case aside; one may be a shorter prefix of the other, as llama-bench's JSON writes 7
// hex digits where its markdown writes 8) or device names.
bool same_machine_text(const std::string & field, const std::string & a, const std::string & b) {
    if (field != "build_commit") return a == b;
    const size_t n = std::min(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
        if (std::tolower((unsigned char) a[i]) != std::tolower((unsigned char) b[i])) return false;
    }
    return n >= 7 || a.size() == b.size();
}

// "FILE line N" (a markdown row) or "FILE entry N" (a JSON array's)
std::string row_place(const llama_bench_row & p) {
    return p.line > 0 ? fmt::format("{} line {}", p.file, p.line) : fmt::format("{} entry {}", p.file, p.index);
}

// One profile is one machine and one llama.cpp: results that name another build or device than the first that names
// one are refused (a fit across them would average two machines into neither).
void check_one_machine(const std::vector<llama_bench_row> & points) {
    const llama_bench_row * with_build = nullptr, * with_device = nullptr;
    for (const auto & p : points) {
        for (auto [field, value, first] : {std::tuple{"build_commit", &llama_bench_row::build, &with_build},
                                           std::tuple{"device (gpu_info / cpu_info)", &llama_bench_row::device, &with_device}}) {
            if ((p.*value).empty()) continue;
            if (!*first) {
                *first = &p;
            } else if (!same_machine_text(field, (*first)->*value, p.*value)) {
                throw input_error(p.file, p.line, cut_text(p.*value),
                                  fmt::format("{}field {} differs from '{}' in {}: one fit takes the results of one llama.cpp build on one "
                                              "device (calibrate each separately)", p.line > 0 ? "" : fmt::format("entry {}: ", p.index), field,
                                              cut_text((*first)->*value), row_place(**first)));
            }
        }
    }
}
}  // namespace

namespace {
// The results made ready for fits: their weight types checked (r.weights) and their timed ubatches computed once.
// The ubatches depend on the profile only through repack_rows and attention_cells, which every fit keeps from the
// base (fit_terms), and on each result's own n_threads, so they are the fitted profile's ubatches too:
// leave-one-out reuses them (recomputing them per fit decoded every result through the cache model again, minutes
// for rows of 256 sequences).
struct fit_input {
    std::vector<llama_bench_row> points;
    checked_rows rows;   // each result's weight type and model (pointing into the caller's models)
    std::vector<std::vector<ubatch_terms>> pts;
    result_groups groups;   // pts grouped (group_ubatches)

    fit_input(const std::vector<llama_bench_row> & p, const std::vector<model_shape> & models, const weight_file_type * weights,
              const device_profile & base, calibration_result & r)
        : points(p) {
        check_one_machine(points);
        rows = check_rows(points, models, weights, r);
        size_t ubatches = 0;
        for (size_t i = 0; i < points.size(); ++i) {
            pts.push_back(bench_row_ubatches(points[i], step_time_model{base, *rows.ms[i], rows.ft[i]}));
            groups.push_back(group_ubatches(pts.back()));
            // every timed ubatch's terms are kept (and copied per held-out fold): eight results of 2^20 generated
            // tokens took 2.3 GB and over a minute before this bound
            if ((ubatches += pts.back().size()) > k_max_fit_ubatches) {
                throw input_error(points[i].file, points[i].line, points[i].test_name(),
                                  fmt::format("{}the results up to this one time over {} ubatches in all (one per generated token), more "
                                              "than kvsim calibrate fits; give fewer or shorter results",
                                              points[i].line > 0 ? "" : fmt::format("entry {}: ", points[i].index), k_max_fit_ubatches));
            }
        }
    }
    // the results whose index is not in `fold` (held_out_fit's k folds: index % k)
    fit_input without_fold(size_t fold, size_t k) const {
        fit_input rest = *this;
        rest.points.clear(), rest.rows = {}, rest.pts.clear(), rest.groups.clear();
        for (size_t i = 0; i < points.size(); ++i) {
            if (i % k == fold) continue;
            rest.points.push_back(points[i]), rest.rows.ft.push_back(rows.ft[i]), rest.rows.ms.push_back(rows.ms[i]);
            rest.pts.push_back(pts[i]), rest.groups.push_back(groups[i]);
        }
        return rest;
    }
};

// Why a fit's weight reads came out below 0, in the results' own terms: the two results where more tokens per
// ubatch took the least time per ubatch against fewer tokens (no cost term falls as the tokens grow, so one of
// them is another model, machine or mistake); without such a pair, how many results and which is the first.
std::string contradicting_pair(const std::vector<llama_bench_row> & points, const std::vector<std::vector<ubatch_terms>> & pts) {
    std::vector<double> tokens(points.size()), per(points.size());
    for (size_t i = 0; i < points.size(); ++i) {
        for (const auto & u : pts[i]) tokens[i] += u.n_tokens;
        const double n = std::max<double>(1, (double) pts[i].size());
        tokens[i] /= n, per[i] = points[i].avg_s / n;
    }
    // by tokens per ubatch; each result against the slowest one with strictly fewer tokens (a running maximum)
    std::vector<size_t> by(points.size());
    std::iota(by.begin(), by.end(), size_t(0));
    std::stable_sort(by.begin(), by.end(), [&](size_t a, size_t b) { return tokens[a] < tokens[b]; });
    size_t fast = 0, slow = 0, slowest_below = by.size(), k = 0;
    double worst = 1;
    while (k < by.size()) {
        size_t end = k;
        while (end < by.size() && tokens[by[end]] == tokens[by[k]]) ++end;
        for (size_t e = k; slowest_below < by.size() && e < end; ++e) {
            const size_t i = by[e];
            if (per[i] > 0 && per[slowest_below] / per[i] > worst) worst = per[slowest_below] / per[i], fast = i, slow = slowest_below;
        }
        for (size_t e = k; e < end; ++e) {
            if (slowest_below == by.size() || per[by[e]] > per[slowest_below]) slowest_below = by[e];
        }
        k = end;
    }
    if (worst == 1) {   // no such pair (one result, or all of one ubatch size): name the results the fit had
        return fmt::format(": {} result(s), the first {} ({})", points.size(), row_place(points[0]), points[0].test_name());
    }
    return fmt::format(": {} ({}) takes {:.4g} ms per ubatch of {:.4g} tokens, {:.3g}x less than {} ({}) with {:.4g} tokens per ubatch",
                       row_place(points[fast]), points[fast].test_name(), per[fast] * 1e3, tokens[fast], worst, row_place(points[slow]),
                       points[slow].test_name(), tokens[slow]);
}

double predicted_s(const device_profile & d, const model_shape & m, const weight_file_type * ft, const std::vector<ubatch_terms> & pts) {
    const step_time_model tm{d, m, ft};
    double t = 0;
    for (const auto & u : pts) t += tm.seconds_of(u);
    return t;
}

// fit_terms from a base whose GEMM fraction at 2 tokens is 50x lower than its own (its fractions at 1 and 4 tokens
// kept): the rounds start with every 2-token ubatch on the GEMM side. A fit this start cannot make (a usage error)
// loses to the first one.
term_fit fit_from_gemm_at_two(const fit_input & in, const std::vector<std::vector<ubatch_terms>> & pts, double speedup,
                              const std::vector<double> & y, const device_profile & base) {
    device_profile start = base;
    std::vector<std::pair<double, double>> g = {{1.0, base.gemm_fraction_at(1)}, {2.0, base.gemm_fraction_at(2) / 50}, {4.0, base.gemm_fraction_at(4)}};
    for (const auto & p : base.gemm_fraction) {
        if (p.first > 4) g.push_back(p);
    }
    start.gemm_fraction = g;
    try {
        term_fit f = fit_terms(with_float_speedup(in.groups, in.rows.ft, speedup), pts, speedup, y, in.rows, start);
        // a size these results price nowhere takes the base's own fraction, not the start's
        if (f.profile.gemm_fraction == start.gemm_fraction) f.profile.gemm_fraction = base.gemm_fraction;
        return f;
    } catch (const usage_error &) {
        term_fit none;
        none.sq_error = HUGE_VAL;
        return none;
    }
}
// calibrate's fit on prepared results; r holds fit_input's weight list.
calibration_result fit_results(const fit_input & in, const device_profile & base, calibration_result r) {
    if (in.points.empty()) throw usage_error("kvsim calibrate: no llama-bench results");   // leave-one-out of one result
    const auto & points = in.points;
    const auto & ft = in.rows.ft;
    const auto & pts = in.pts;
    std::vector<double> y;
    for (const auto & p : points) y.push_back(p.avg_s);
    // GEMMs of float weights (cuBLAS on CUDA) and of quantized ones (llama.cpp's own kernels) differ per FLOP: with
    // prompts of both families the speed-up is fitted, otherwise kept from the base profile
    const auto has_prompts = [&](bool fl) {
        for (size_t i = 0; i < points.size(); ++i) {
            if (is_float_weight_type(*ft[i]) == fl && points[i].n_prompt > 1) return true;
        }
        return false;
    };
    const bool both = has_prompts(true) && has_prompts(false);
    const double speedup = both ? fit_float_speedup(in.groups, pts, y, in.rows, base) : base.float_gemm_speedup;
    term_fit fit = [&] {
        try {
            return fit_terms(with_float_speedup(in.groups, ft, speedup), pts, speedup, y, in.rows, base);
        } catch (const weight_term_negative & e) {
            throw usage_error(e.what() + contradicting_pair(points, pts));
        }
    }();
    if (base.n_sm == 0) {
        // CPU: the split of the ubatches between weight reads and GEMMs settles where it starts (fit_terms' rounds keep a
        // split that fits its own prices), and a start from the base's prices keeps 2-token ubatches on the read side
        // beside the 1-token ones. ggml-cpu multiplies two or more rows of unrepacked weights (Q8_0 on x86) with
        // tinyBLAS: on the Zen 4 host a 2-token prompt took 1.65x a 1-token one, which one read price for both missed by
        // 25-31 % (docs/benchmarks.md, session 32). A second start with 2-token ubatches on the GEMM side is kept when it
        // fits better.
        const term_fit alt = fit_from_gemm_at_two(in, pts, speedup, y, base);
        if (alt.sq_error < 0.99 * fit.sq_error) {
            fit = alt;
            fit.notes.push_back("the split that starts 2-token ubatches on the GEMM side fits better than the base profile's start: kept");
        }
    }
    r.notes.insert(r.notes.end(), fit.notes.begin(), fit.notes.end());
    if (!both && base.float_gemm_speedup != 1.0) {
        r.notes.push_back(fmt::format("float_gemm_speedup: kept from the base profile ({:g}): prompts of one weight family (float "
                                      "or quantized) cannot tell it", base.float_gemm_speedup));
    }
    device_profile & d = r.profile;
    d = fit.profile;
    d.float_gemm_speedup = speedup;
    // Reads above the base's bandwidth are no device's: a cost these results cannot place went into the other terms
    // (the H200's one-model fit: 1.08-1.12 x 4.8 TB/s beside 2.9 ms per ubatch, docs/benchmarks.md "The H200 measured")
    std::pair<std::string, double> fastest{"", d.weight_read_fraction};
    for (const auto & [name, f] : d.weight_read_fraction_by_type) {
        if (f > fastest.second) fastest = {name, f};
    }
    if (fastest.second > 1.0) {
        r.notes.push_back(fmt::format("weight_read_fraction{} {:.3f}: weight reads faster than the base's {:g} GB/s, which no device does: "
                                      "a cost these results cannot place went into the other terms{}",
                                      fastest.first.empty() ? "" : " of " + fastest.first, fastest.second, d.bandwidth_gbs,
                                      r.models.size() > 1 ? "" : " (one model's results cannot tell a per-layer cost from a per-ubatch one, "
                                                                 "nor one weight type's read rate from another's)"));
    }
    std::map<int, int> threads;
    for (const auto & p : points) ++threads[p.n_threads];
    d.threads = std::max_element(threads.begin(), threads.end(), [](auto a, auto b) { return a.second < b.second; })->first;
    for (size_t i = 0; i < points.size(); ++i) r.points.push_back({points[i], predicted_s(d, *in.rows.ms[i], ft[i], pts[i])});
    // a result 1000x off its own fit is not this machine's time (a unit or a copy mistake): the fit bent every term for
    // it (a pp4 of 1e15 ns made decode K/V reads free, hostile pass of session 27)
    for (const auto & p : r.points) {
        const double ratio = p.predicted_s / p.bench.avg_s;
        if (!(ratio > 1e-3 && ratio < 1e3)) {
            throw usage_error(fmt::format("kvsim calibrate: {} ({}) took {:.6g} s where the fit of all the results gives {:.6g} s: "
                                          "not one model on one machine (a unit or copy mistake?)",
                                          row_place(p.bench), p.bench.test_name(), p.bench.avg_s, p.predicted_s));
        }
    }
    r.in_sample = true;
    return r;
}
}  // namespace

calibration_result calibrate(const std::vector<llama_bench_row> & points, const std::vector<model_shape> & models,
                             const weight_file_type * weights, const device_profile & base) {
    calibration_result r;
    const fit_input in(points, models, weights, base, r);
    return fit_results(in, base, std::move(r));
}

calibration_result predict_bench(const std::vector<llama_bench_row> & points, const std::vector<model_shape> & models,
                                 const weight_file_type * weights, const device_profile & profile) {
    calibration_result r;
    const checked_rows c = check_rows(points, models, weights, r);
    r.profile = profile;
    for (size_t i = 0; i < points.size(); ++i) {
        const step_time_model tm{profile, *c.ms[i], c.ft[i]};
        r.points.push_back({points[i], predicted_s(profile, *c.ms[i], c.ft[i], bench_row_ubatches(points[i], tm))});
    }
    return r;
}

held_out_errors held_out_fit(const std::vector<llama_bench_row> & points, const std::vector<model_shape> & models,
                             const weight_file_type * weights, const device_profile & base) {
    calibration_result checked;
    const fit_input all(points, models, weights, base, checked);
    // one fit per result costs results^2 (23,696 results: over 4 minutes); past k_max_leave_one_out, 10 folds
    const size_t k = points.size() <= k_max_leave_one_out ? points.size() : 10;
    held_out_errors h{k == points.size() ? "leave-one-out" : fmt::format("{}-fold", k), std::vector<double>(points.size(), NAN)};
    for (size_t fold = 0; fold < k; ++fold) {
        try {
            const calibration_result fit = fit_results(all.without_fold(fold, k), base, checked);
            for (size_t i = fold; i < points.size(); i += k) {
                h.errs[i] = calibration_point{points[i], predicted_s(fit.profile, *all.rows.ms[i], all.rows.ft[i], all.pts[i])}.error();
            }
        } catch (const usage_error &) {   // the others alone cannot fit the terms: no held-out figure for this fold
        }
    }
    h.errs.erase(std::remove_if(h.errs.begin(), h.errs.end(), [](double e) { return std::isnan(e); }), h.errs.end());
    return h;
}

std::string calibration_result::models_text() const {
    return fmt::format("{}", fmt::join(models, " + "));
}

std::string calibration_result::weights_text() const {
    std::string s;
    for (const weight_file_type * w : weights) s += (s.empty() ? "" : " + ") + std::string(w->name);
    return s;
}

double abs_error_quantile(const std::vector<double> & errs, double q) {
    std::vector<double> a;
    for (double e : errs) a.push_back(std::abs(e));
    return percentile(std::move(a), q);
}

std::string held_out_line(const held_out_errors & h, size_t n_results) {
    if (h.errs.empty()) return fmt::format("held out ({}): none of the results can be left out and still fit the terms\n", h.method);
    const bool loo = h.method == "leave-one-out";
    return fmt::format("held out ({}, each result predicted by a fit on {}): |error| median {:.1f}%, p90 {:.1f}%, "
                       "max {:.1f}% over {} of {} results\n",
                       h.method, loo ? "the others" : "the other folds", abs_error_quantile(h.errs, 0.5) * 100,
                       abs_error_quantile(h.errs, 0.9) * 100, abs_error_quantile(h.errs, 1.0) * 100, h.errs.size(), n_results);
}

void print_calibration(std::ostream & out, const calibration_result & r) {
    // llama-bench's flash_attn: -1 auto, 0 off, 1 on
    auto fa_name = [](int fa) { return fa < 0 ? "auto" : fa == 0 ? "off" : "on"; };
    std::vector<std::string> labels;
    size_t width = 6;   // "result"
    for (const auto & p : r.points) {
        const auto & b = p.bench;
        // a results file's name may hold control bytes: the terminal gets them escaped, as in every error line
        labels.push_back(fmt::format("{}#{} {}", escape_controls(b.file.substr(b.file.find_last_of('/') + 1)), b.index, b.test_name()));
        width = std::max(width, labels.back().size());
    }
    out << fmt::format("{:<{}} {:>5} {:>5} {:>9} {:>4} {:>12} {:>12} {:>8}\n", "result", width, "ub", "b", "ctk/ctv", "fa", "measured ms",
                       "predicted ms", "error");
    std::vector<double> errs;
    for (size_t i = 0; i < r.points.size(); ++i) {
        const auto & p = r.points[i];
        const auto & b = p.bench;
        out << fmt::format("{:<{}} {:>5} {:>5} {:>9} {:>4} {:>12.3f} {:>12.3f} {:>+7.1f}%\n", labels[i], width, b.n_ubatch, b.n_batch,
                           b.type_k + "/" + b.type_v, fa_name(b.flash_attn), b.avg_s * 1e3, p.predicted_s * 1e3, p.error() * 100);
        errs.push_back(std::abs(p.error()));
    }
    out << fmt::format("{} results: |error| median {:.1f}%, p90 {:.1f}%, max {:.1f}%{}\n", errs.size(), percentile(errs, 0.5) * 100,
                       percentile(errs, 0.9) * 100, percentile(errs, 1.0) * 100,
                       r.in_sample ? " (in-sample residuals of the fit: not its accuracy)" : "");
    for (const auto & n : r.notes) out << "note: " << escape_controls(n) << '\n';
}

}  // namespace kvsim
