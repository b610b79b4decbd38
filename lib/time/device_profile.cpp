#include "time/device_profile.h"

#include "core/errors.h"
#include "time/weight_types.h"
#include "util/json_read.h"
#include "util/read_file.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

namespace kvsim {

namespace {
// The datasheet rooflines, kept under explicit names as upper bounds (no efficiency terms: every fraction 1, no
// overheads; 2-12x optimistic against published llama-bench results, docs/benchmarks.md). Vendor datasheet peaks:
// H200 SXM 4.8 TB/s HBM3e, H100 SXM 3.35 TB/s, A100 80GB SXM 2.039 TB/s; dense BF16 tensor-core peaks 989 / 989 /
// 312 TFLOP/s. Memory: the total nvidia-smi reports for the 141 GB, 80 GB and 80 GB cards (143771, 81559 and 81920
// MiB). cpu: an estimate for the 2-vCPU Zen 3 class machine of this project, 67 GB/s and 0.4 TFLOP/s (measure
// yours: --device host or kvsim calibrate), memory unknown. Host link: PCIe 5.0 x16 (H100, H200) and 4.0 x16 (A100),
// 63 and 31.5 GB/s per direction (PCI-SIG); cpu: a single-threaded memcpy of the cells' rows, about 10 GB/s (estimate).
struct datasheet {
    const char * name, * source;
    double bandwidth_gbs, peak_tflops;
    uint64_t memory_mib;
    double host_link_gbs;
    int repack_rows = 0;   // cpu: ggml-cpu repacks q4_0 and friends on x86 and ARM (step_time.h: repack_extra_passes)
    // cpu: visible, as ggml's CPU flash attention skips the cells a token's mask hides
    // (ggml-cpu/ops.cpp: ggml_compute_forward_flash_attn_ext_f16_one_chunk); a GPU kernel reads every cell up to n_kv
    const char * attention_cells = "n_kv";
    // cpu: llama.cpp's K-shift, 6.4-6.9 ns per rotation angle with two threads of a Zen 4 host (docs/time-model.md,
    // session 33); the GPU rooflines: 0 (not modelled)
    double k_shift_s_per_theta = 0;
};
const datasheet k_presets[] = {{"h200-datasheet", "datasheet", 4800, 989, 143771, 63},
                               {"h100-datasheet", "datasheet", 3350, 989, 81559, 63},
                               {"a100-datasheet", "datasheet", 2039, 312, 81920, 31.5},
                               {"cpu", "estimate", 67, 0.4, 0, 10, 4, "visible", 6.6e-9}};

std::string datasheet_json(const datasheet & d) {
    return fmt::format(R"({{"name": "{}", "source": "{}", "bandwidth_gbs": {}, "peak_tflops": {},
  "weight_read_fraction": 1.0, "gemm_fraction": [[1, 1.0]], "ubatch_overhead_s": 0, "layer_overhead_s": 0,
  "attention": "roofline", "attention_cells": "{}", "attn_s_per_kv_byte": 0, "attn_s_per_flop": 0, "threads": 0, "memory_mib": {},
  "host_link_gbs": {}, "repack_rows": {}, "extra_pass_s_per_byte": {}, "unpacked_s_per_param_row": {}{}}})",
                       d.name, d.source, d.bandwidth_gbs, d.peak_tflops, d.attention_cells, d.memory_mib, d.host_link_gbs, d.repack_rows,
                       // a repacking CPU's extra passes at the bandwidth, its tinyBLAS rows (step_time.h unpacked_row_params)
                       // at the peak: 2 FLOPs per parameter and row, as the roofline's GEMM; a fit replaces both
                       d.repack_rows ? 1.0 / (d.bandwidth_gbs * 1e9) : 0.0, d.repack_rows ? 2.0 / (d.peak_tflops * 1e12) : 0.0,
                       d.k_shift_s_per_theta > 0 ? fmt::format(", \"k_shift_s_per_theta\": {}", d.k_shift_s_per_theta) : "");
}

// The calibrated and derived GPU profiles (lib/time/shipped_profiles.json, written by
// scripts/fit-shipped-profiles.py from published llama-bench results), in the file's order: (name, JSON text).
const std::vector<std::pair<std::string, std::string>> & calibrated_presets() {
    static const auto v = [] {
        const auto j = nlohmann::json::parse(
#include "time/shipped_profiles.inc"
        );
        std::vector<std::pair<std::string, std::string>> out;
        for (const auto & p : j.at("profiles")) out.emplace_back(p.at("name").get<std::string>(), p.dump());
        return out;
    }();
    return v;
}

const std::set<std::string> k_fields = {"name", "source", "bandwidth_gbs", "peak_tflops", "threads", "memory_mib", "weight_read_fraction", "weight_read_fraction_by_type",
                                        "gemm_fraction", "float_gemm_speedup", "host_link_gbs", "repack_rows", "extra_pass_s_per_byte", "unpacked_s_per_param_row", "attn_s_per_scanned_cell", "attn_tiled_s_per_kv_byte", "ubatch_overhead_s", "layer_overhead_s", "gemm_layer_overhead_s", "n_sm", "float_gemm_extra_s_per_byte", "attn_s_per_kv_byte",
                                        "attn_s_per_flop", "k_shift_s_per_theta", "attention", "attention_cells", "description", "calibration"};

// Bounds a profile number must lie in: far beyond any device, yet a typo or a hostile file
// (1e-300 GB/s, 1e300 s per ubatch) cannot turn every predicted time into 1e300 s or inf.
struct range {
    double lo, hi;
    bool lo_open;   // lo itself refused (> lo rather than >= lo)
};

double number(const nlohmann::json & j, const char * key, const std::string & where, double dflt, range r, bool whole = false) {
    if (!j.contains(key)) return dflt;
    const auto & v = j[key];
    if (!v.is_number()) throw input_error(where, 0, json_text(v), fmt::format("field {} must be a number", key));
    const double d = v.get<double>();
    if (!std::isfinite(d) || (r.lo_open ? d <= r.lo : d < r.lo) || d > r.hi || (whole && d != std::floor(d))) {
        throw input_error(where, 0, json_text(v), fmt::format("field {} must be a finite {} in {}{:g}, {:g}]", key, whole ? "whole number" : "number",
                                                          r.lo_open ? "(" : "[", r.lo, r.hi));
    }
    return d;
}
// An optional text field printed in the terminal (time_accuracy_note): a string without control characters.
std::string printable(const nlohmann::json & j, const char * key, const std::string & where) {
    if (!j.contains(key)) return "";
    const auto & v = j[key];
    if (!v.is_string()) throw input_error(where, 0, json_text(v), fmt::format("field {} must be a string", key));
    std::string s = v.get<std::string>();
    // C0 controls, DEL, and the C1 controls U+0080..U+009F (UTF-8 C2 80..C2 9F: U+009B is a terminal's CSI)
    bool control = false;
    for (size_t i = 0; i < s.size() && !control; ++i) {
        const auto ch = (unsigned char) s[i];
        control = ch < 0x20 || ch == 0x7f || c1_control_at(s, i);
    }
    if (control) throw input_error(where, 0, cut_text(s), fmt::format("field {} must be printable text (no control characters)", key));
    return s;
}

// "a + b + c" -> {a, b, c}; "" -> {}.
std::vector<std::string> split_plus(const std::string & w) {
    std::vector<std::string> v;
    for (size_t at = 0; at < w.size();) {
        const size_t plus = w.find(" + ", at);
        v.push_back(w.substr(at, plus == std::string::npos ? std::string::npos : plus - at));
        at = plus == std::string::npos ? w.size() : plus + 3;
    }
    return v;
}
// weight_read_fraction_by_type: {"f16": 0.88, "q4_K_M": 0.38}: GGUF file type names (as --weights spells them), each a
// fraction in weight_read_fraction's range.
void read_fraction_by_type(const nlohmann::json & j, const std::string & where, device_profile & d) {
    if (!j.contains("weight_read_fraction_by_type")) return;
    const auto & o = j["weight_read_fraction_by_type"];
    if (!o.is_object()) throw input_error(where, 0, json_text(o), "field weight_read_fraction_by_type must be an object of file type: fraction");
    for (const auto & [k, v] : o.items()) {
        std::string name;
        try {
            name = parse_weight_file_type(k).name;
        } catch (const std::invalid_argument &) {   // its message would carry the name raw
            throw input_error(where, 0, cut_text(k), fmt::format("field weight_read_fraction_by_type: not a weight type (expected {})",
                                                                 fmt::join(weight_file_type_names(), ", ")));
        }
        if (name != k) {   // one spelling per type, so a lookup by name finds it
            throw input_error(where, 0, cut_text(k), fmt::format("field weight_read_fraction_by_type: write {} as {}", k, name));
        }
        d.weight_read_fraction_by_type[name] = number(o, k.c_str(), where + ": weight_read_fraction_by_type", 1.0, {1e-6, 10, false});
    }
}
// calibration.several_sequences: its two errors, both required, and the files they came from.
void read_several_sequences(const nlohmann::json & c, const std::string & where, device_profile & d) {
    if (!c.contains("several_sequences")) return;
    const auto & m = c["several_sequences"];
    const std::string w = where + ": calibration.several_sequences";
    if (!m.is_object()) throw input_error(where, 0, json_text(m), "field calibration.several_sequences must be an object");
    for (const auto & [k, v] : m.items()) {   // a typo would invent the max from the median
        if (k != "median_abs_error" && k != "max_abs_error" && k != "files") {
            throw input_error(w, 0, cut_text(k), "unknown field (expected median_abs_error, max_abs_error, files)");
        }
    }
    for (const char * k : {"median_abs_error", "max_abs_error"}) {
        if (!m.contains(k)) throw input_error(w, 0, json_text(m), fmt::format("field {} is missing", k));
    }
    d.several_sequences.median_abs = number(m, "median_abs_error", w, -1, {0, 1e3, false});
    d.several_sequences.max_abs = number(m, "max_abs_error", w, d.several_sequences.median_abs, {0, 1e3, false});
    if (d.several_sequences.max_abs < d.several_sequences.median_abs) {
        throw input_error(w, 0, json_text(m["max_abs_error"]), "field max_abs_error is below median_abs_error");
    }
}
// The "calibration" object's model, weights ("q4_K_M + f16") and K/V types ("f16/f16"), when present; other fields are notes.
void read_calibration(const nlohmann::json & j, const std::string & where, device_profile & d) {
    if (!j.contains("calibration")) return;
    const auto & c = j["calibration"];
    if (!c.is_object()) throw input_error(where, 0, json_text(c), "field calibration must be an object");
    // printed in WARNING rows: printable text, as the other printed fields
    const std::string models = printable(c, "model", where + ": calibration");
    d.calibrated_models = split_plus(models);
    // "a + + b", " + ", "a + ": a name lost, and a warning would misname the rest
    const auto loose = [](const std::string & m) { return m.empty() || m.front() == ' ' || m.front() == '+' || m.back() == ' ' || m.back() == '+'; };
    if ((!models.empty() && loose(models)) || std::any_of(d.calibrated_models.begin(), d.calibrated_models.end(), loose)) {
        throw input_error(where, 0, cut_text(models), "field calibration.model must be model names joined by \" + \"");
    }
    d.calibrated_weights = split_plus(printable(c, "weights", where + ": calibration"));
    d.calibrated_kv = split_plus(printable(c, "kv", where + ": calibration"));
    d.derived_from = printable(c, "derived_from", where + ": calibration");
    read_several_sequences(c, where, d);
    if (!c.contains("held_out")) return;
    const auto & h = c["held_out"];
    if (!h.is_object()) throw input_error(where, 0, json_text(h), "field calibration.held_out must be an object");
    const std::string w = where + ": calibration.held_out";
    for (const auto & [k, v] : h.items()) {   // a typo would drop the error silently
        if (k != "median_abs_error" && k != "max_abs_error" && k != "results" && k != "method") {
            throw input_error(w, 0, cut_text(k), "unknown field (expected median_abs_error, max_abs_error, results, method)");
        }
    }
    d.held_out.median_abs = number(h, "median_abs_error", w, -1, {0, 1e3, false});
    d.held_out.max_abs = number(h, "max_abs_error", w, d.held_out.median_abs, {0, 1e3, false});
    if (d.held_out.max_abs < d.held_out.median_abs) {
        throw input_error(w, 0, json_text(h["max_abs_error"]), "field max_abs_error is below median_abs_error");
    }
    d.held_out.results = (size_t) number(h, "results", w, 0, {0, 1e9, false}, true);
    d.held_out.method = printable(h, "method", w);
}

// Same weight shapes: the dimensions the step time reads (a preset renamed for a longer context,
// llama-3-8b and llama-3.1-8b, is the same model to the time model).
bool same_shape(const model_shape & a, const model_shape & b) {
    return a.n_layer == b.n_layer && a.n_head == b.n_head && a.n_head_kv == b.n_head_kv && a.head_dim == b.head_dim &&
           a.n_embd == b.n_embd && a.n_ff == b.n_ff && a.n_vocab == b.n_vocab;
}
}  // namespace

std::string kv_types_name(ggml_type type_k, ggml_type type_v) {
    return fmt::format("{}/{}", ggml_type_name(type_k), ggml_type_name(type_v));
}

std::vector<std::string> profile_warnings(const device_profile & d, const model_shape & m, const std::string & weights,
                                          const std::vector<std::string> & kv, bool flash_attn) {
    std::vector<std::string> w;
    if (!d.calibrated_models.empty()) {
        bool same = false;
        for (const auto & name : d.calibrated_models) {
            same = same || name == m.name;
            try {
                same = same || same_shape(model_preset(name), m);
            } catch (const std::invalid_argument &) {   // a calibration on a preset this build does not know
            }
        }
        if (!same) {
            w.push_back(fmt::format("profile {} was calibrated on {}, not {}: its fitted efficiencies are {}", d.name,
                                    cut_text(fmt::format("{}", fmt::join(d.calibrated_models, " + "))), m.name,
                                    d.calibrated_models.size() > 1 ? "other models'" : "another model's"));
        }
    }
    if (!d.calibrated_weights.empty() &&
        std::find(d.calibrated_weights.begin(), d.calibrated_weights.end(), weights) == d.calibrated_weights.end()) {
        w.push_back(fmt::format("profile {} was calibrated on {} weights, not {}: the GEMMs on other weight types differ",
                                d.name, fmt::join(d.calibrated_weights, " + "), weights));
    }
    std::vector<std::string> other_kv;
    for (const auto & t : kv) {
        if (!d.calibrated_kv.empty() && std::find(d.calibrated_kv.begin(), d.calibrated_kv.end(), t) == d.calibrated_kv.end() &&
            std::find(other_kv.begin(), other_kv.end(), t) == other_kv.end()) {
            other_kv.push_back(t);
        }
    }
    if (!other_kv.empty()) {
        w.push_back(fmt::format("profile {} was calibrated with {} K/V, not {}: attention on other cache types reads other "
                                "bytes through other kernels", d.name, fmt::join(d.calibrated_kv, " + "), fmt::join(other_kv, ", ")));
    }
    if (!flash_attn) w.push_back("-fa off is not modelled: the simulated times are those of flash attention");
    return w;
}

std::string time_accuracy_note(const device_profile & d) {
    // the source may carry ", overridden: ..." after the kind (replay's --bandwidth-gbs / --tflops)
    const std::string over = d.overridden ? "; numbers overridden on the command line" : "";
    if (d.source.starts_with("datasheet")) return "datasheet roofline: an upper bound, 2-12x faster than published llama-bench results" + over;
    if (d.source.starts_with("host")) return "this machine's measured read bandwidth, no fitted terms: not validated" + over;
    if (d.source.starts_with("estimate")) return "an estimate, not validated: calibrate your own (kvsim calibrate) or use --device host" + over;
    std::string s;
    if (d.held_out.median_abs >= 0) {
        const auto & m = d.several_sequences;
        const std::string several = m.median_abs < 0 ? "server steps of several sequences not validated"
                                                     : fmt::format("several sequences in one cache (llama-batched-bench): "
                                                                   "{:.1f} % median, {:.1f} % max", 100 * m.median_abs, 100 * m.max_abs);
        s = fmt::format("{}held-out error {:.1f} % median, {:.1f} % max ({}, {} llama-bench results of one sequence; {})",
                        d.derived_from.empty() ? "" : d.derived_from + "'s ", 100 * d.held_out.median_abs, 100 * d.held_out.max_abs,
                        d.held_out.method.empty() ? "method not recorded" : d.held_out.method, d.held_out.results, several);
    } else {
        s = "no held-out error recorded in the profile";
    }
    if (!d.derived_from.empty()) s = fmt::format("derived from {}, not validated on this card; {}", d.derived_from, s);
    if (d.overridden) s += over + ", which the error does not cover";
    return s;
}

nlohmann::json time_accuracy_json(const device_profile & d) {
    nlohmann::json j = {{"profile", d.name}, {"source", d.source}, {"note", time_accuracy_note(d)}, {"overridden", d.overridden}};
    if (!d.derived_from.empty()) j["derived_from"] = d.derived_from;
    if (d.held_out.median_abs >= 0) {
        j["held_out"] = {{"method", d.held_out.method}, {"results", d.held_out.results},
                         {"median_abs_error", d.held_out.median_abs}, {"max_abs_error", d.held_out.max_abs}};
    }
    if (d.several_sequences.median_abs >= 0) {
        j["several_sequences"] = {{"median_abs_error", d.several_sequences.median_abs}, {"max_abs_error", d.several_sequences.max_abs}};
    }
    return j;
}

double device_profile::read_fraction(std::string_view name) const {
    const auto it = weight_read_fraction_by_type.find(name);
    return it == weight_read_fraction_by_type.end() ? weight_read_fraction : it->second;
}

double device_profile::gemm_fraction_at(double tokens) const {
    const auto & g = gemm_fraction;
    if (g.empty()) return 1.0;
    if (tokens <= g.front().first) return g.front().second;
    if (tokens >= g.back().first) return g.back().second;
    for (size_t i = 1; i < g.size(); ++i) {
        if (tokens <= g[i].first) {
            const double a = std::log2(g[i - 1].first), b = std::log2(g[i].first), x = std::log2(tokens);
            return g[i - 1].second + (g[i].second - g[i - 1].second) * (x - a) / (b - a);
        }
    }
    return g.back().second;
}

const std::string & device_preset_json(const std::string & name) {
    static const auto texts = [] {
        std::vector<std::pair<std::string, std::string>> v = calibrated_presets();
        for (const auto & d : k_presets) v.emplace_back(d.name, datasheet_json(d));
        return v;
    }();
    for (const auto & [n, t] : texts) {
        if (n == name) return t;
    }
    throw std::invalid_argument(fmt::format("unknown device '{}' (expected {}, a profile JSON file, or host)", name,
                                            fmt::join(device_preset_names(), ", ")));
}

std::vector<std::string> device_preset_names(bool calibrated) {
    std::vector<std::string> v;
    if (calibrated) {
        for (const auto & c : calibrated_presets()) v.push_back(c.first);
    } else {
        for (const auto & d : k_presets) v.emplace_back(d.name);
    }
    return v;
}

std::vector<std::string> device_preset_names() {
    std::vector<std::string> v = device_preset_names(true);
    for (const auto & d : device_preset_names(false)) v.push_back(d);
    return v;
}

device_profile device_preset(const std::string & name) {
    return parse_device_profile(nlohmann::json::parse(device_preset_json(name)), "<built-in " + name + ">");
}

namespace {
// gemm_fraction: [[tokens, fraction], ...]
std::vector<std::pair<double, double>> fraction_points(const nlohmann::json & j, const char * key, const std::string & where) {
    const auto & g = j[key];
    const std::string bad = fmt::format("field {} must be a non-empty array of [tokens, fraction] pairs, tokens ascending and >= 1, "
                                        "fractions in [1e-6, 10]", key);
    if (!g.is_array() || g.empty()) throw input_error(where, 0, json_text(g), bad);
    std::vector<std::pair<double, double>> v;
    for (const auto & p : g) {
        if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number()) throw input_error(where, 0, json_text(p), bad);
        const double t = p[0].get<double>(), f = p[1].get<double>();
        if (!std::isfinite(t) || !std::isfinite(f) || t < 1 || f < 1e-6 || f > 10 || (!v.empty() && t <= v.back().first)) {
            throw input_error(where, 0, json_text(p), bad);
        }
        v.emplace_back(t, f);
    }
    return v;
}
}  // namespace

void check_profile_name(const std::string & name, const std::string & where) {
    // a profile file is JSON, always UTF-8; a name from the command line may not be (it was written as U+FFFD)
    for (size_t i = 0; i < name.size();) {
        const size_t n = utf8_char_len(name, i);
        if (n == 0) throw input_error(where, 0, name, "must be UTF-8 text");
        i += n;
    }
    (void) printable(nlohmann::json{{"name", name}}, "name", where);
}

device_profile parse_device_profile(const nlohmann::json & j, const std::string & where) {
    if (!j.is_object()) throw input_error(where, 0, "", "a device profile must be a JSON object");
    for (const auto & [k, v] : j.items()) {
        if (!k_fields.count(k)) throw input_error(where, 0, cut_text(k), "unknown field in device profile");
    }
    device_profile d;
    // printed in replay's terminal summary: an escape sequence in a profile would reach the user's terminal
    if (j.contains("name")) d.name = printable(j, "name", where);
    if (j.contains("source")) d.source = printable(j, "source", where);
    if (j.contains("attention")) {
        const auto & a = j["attention"];
        if (!a.is_string() || (a.get<std::string>() != "roofline" && a.get<std::string>() != "linear")) {
            throw input_error(where, 0, json_text(a), "field attention must be \"roofline\" or \"linear\"");
        }
        d.attention = a.get<std::string>();
    }
    if (j.contains("attention_cells")) {
        const auto & a = j["attention_cells"];
        if (!a.is_string() || (a.get<std::string>() != "n_kv" && a.get<std::string>() != "visible")) {
            throw input_error(where, 0, json_text(a), "field attention_cells must be \"n_kv\" or \"visible\"");
        }
        d.attention_cells = a.get<std::string>();
    }
    for (const char * req : {"bandwidth_gbs", "peak_tflops"}) {
        if (!j.contains(req)) throw input_error(where, 0, req, "device profile lacks a required field");
    }
    read_calibration(j, where, d);
    d.bandwidth_gbs = number(j, "bandwidth_gbs", where, 0, {k_min_bandwidth_gbs, k_max_bandwidth_gbs, false});
    d.peak_tflops = number(j, "peak_tflops", where, 0, {k_min_peak_tflops, k_max_peak_tflops, false});
    d.threads = (int) number(j, "threads", where, 0, {0, 65536, false}, true);
    d.memory_mib = (uint64_t) number(j, "memory_mib", where, 0, {0, 1 << 30, false}, true);   // up to 1 PiB
    // a fraction above 1 is legal: calibrate fits against the base profile's peak, which can be
    // below what the machine reaches; 10x the peak is a wrong profile, not an efficiency
    d.weight_read_fraction = number(j, "weight_read_fraction", where, 1.0, {1e-6, 10, false});
    read_fraction_by_type(j, where, d);
    d.float_gemm_speedup = number(j, "float_gemm_speedup", where, 1.0, {1e-3, 100, false});
    d.ubatch_overhead_s = number(j, "ubatch_overhead_s", where, 0, {0, 1, false});
    d.host_link_gbs = number(j, "host_link_gbs", where, 0, {0, k_max_bandwidth_gbs, false});
    if (d.host_link_gbs > 0 && d.host_link_gbs < k_min_bandwidth_gbs) {   // 0: not timed; a tiny rate: every copy takes forever
        throw input_error(where, 0, json_text(j["host_link_gbs"]),
                          fmt::format("field host_link_gbs must be 0 (not modelled) or in [{:g}, {:g}]", k_min_bandwidth_gbs, k_max_bandwidth_gbs));
    }
    d.repack_rows = (int) number(j, "repack_rows", where, 0, {0, 64, false}, true);
    d.extra_pass_s_per_byte = number(j, "extra_pass_s_per_byte", where, 0, {0, 1e-6, false});
    d.unpacked_s_per_param_row = number(j, "unpacked_s_per_param_row", where, 0, {0, 1e-6, false});
    d.attn_s_per_scanned_cell = number(j, "attn_s_per_scanned_cell", where, 0, {0, 1e-6, false});
    d.k_shift_s_per_theta = number(j, "k_shift_s_per_theta", where, 0, {0, 1e-6, false});
    d.attn_tiled_s_per_kv_byte = number(j, "attn_tiled_s_per_kv_byte", where, 0, {0, 1e-6, false});
    d.layer_overhead_s = number(j, "layer_overhead_s", where, 0, {0, 1, false});
    d.gemm_layer_overhead_s = number(j, "gemm_layer_overhead_s", where, 0, {0, 1, false});
    d.n_sm = (int) number(j, "n_sm", where, 0, {0, k_max_n_sm, false}, true);
    d.float_gemm_extra_s_per_byte = number(j, "float_gemm_extra_s_per_byte", where, 0, {0, 1e-6, false});
    if (d.float_gemm_extra_s_per_byte > 0 && d.n_sm == 0) {   // the price of CUDA's GEMM kernels: with no SMs it would apply to nothing
        throw input_error(where, 0, json_text(j["float_gemm_extra_s_per_byte"]),
                          "field float_gemm_extra_s_per_byte prices a CUDA card's float GEMM kernels: it needs n_sm > 0");
    }
    d.attn_s_per_kv_byte = number(j, "attn_s_per_kv_byte", where, 0, {0, 1e-6, false});   // >= 1 MB/s
    d.attn_s_per_flop = number(j, "attn_s_per_flop", where, 0, {0, 1e-6, false});         // >= 1 MFLOP/s
    if (j.contains("gemm_fraction")) d.gemm_fraction = fraction_points(j, "gemm_fraction", where);
    return d;
}

device_profile load_device_profile(const std::string & path) {
    const std::string text = read_small_file(path, "device profile");
    nlohmann::json j;
    try {
        j = parse_json_bounded(text);
    } catch (const json_refused & e) {   // too deep, a key twice, a number like 1e400
        throw input_error(path, e.line, "", fmt::format("not a device profile: {}", e.what()));
    } catch (const nlohmann::json::exception & e) {   // parse_error (its line and column in the message)
        throw input_error(path, 0, "", fmt::format("not JSON ({})", e.what()));
    }
    device_profile d = parse_device_profile(j, path);
    return d;
}

nlohmann::json device_profile_json(const device_profile & d) {
    nlohmann::json g = nlohmann::json::array();
    for (const auto & [t, f] : d.gemm_fraction) g.push_back({t, f});
    nlohmann::json j = {{"name", d.name},
            {"source", d.source},
            {"bandwidth_gbs", d.bandwidth_gbs},
            {"peak_tflops", d.peak_tflops},
            {"threads", d.threads},
            {"memory_mib", d.memory_mib},
            {"weight_read_fraction", d.weight_read_fraction},
            {"gemm_fraction", g},
            {"float_gemm_speedup", d.float_gemm_speedup},
            {"host_link_gbs", d.host_link_gbs},
            {"repack_rows", d.repack_rows},
            {"extra_pass_s_per_byte", d.extra_pass_s_per_byte},
            {"unpacked_s_per_param_row", d.unpacked_s_per_param_row},
            {"attn_s_per_scanned_cell", d.attn_s_per_scanned_cell},
            {"attn_tiled_s_per_kv_byte", d.attn_tiled_s_per_kv_byte},
            {"ubatch_overhead_s", d.ubatch_overhead_s},
            {"layer_overhead_s", d.layer_overhead_s},
            {"attention", d.attention},
            {"attention_cells", d.attention_cells},
            {"attn_s_per_kv_byte", d.attn_s_per_kv_byte},
            {"attn_s_per_flop", d.attn_s_per_flop}};
    // only when fitted: the profiles without it stay as they were, byte for byte
    if (!d.weight_read_fraction_by_type.empty()) j["weight_read_fraction_by_type"] = d.weight_read_fraction_by_type;
    if (d.gemm_layer_overhead_s > 0) j["gemm_layer_overhead_s"] = d.gemm_layer_overhead_s;
    if (d.n_sm > 0) j["n_sm"] = d.n_sm;
    if (d.float_gemm_extra_s_per_byte > 0) j["float_gemm_extra_s_per_byte"] = d.float_gemm_extra_s_per_byte;
    if (d.k_shift_s_per_theta > 0) j["k_shift_s_per_theta"] = d.k_shift_s_per_theta;

    return j;
}

}  // namespace kvsim
