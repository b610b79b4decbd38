// tv-decode-timer: replay a kvsim op trace (`kvsim replay --emit-ops`, format in
// docs/trace-formats.md "Native op trace") on the REAL llama.cpp library and time every
// llama_decode call. Output: one CSV row per decode call, in trace order:
//   step,n_tokens,ms,rc,n_outputs,n_rows,line
// step = 0-based index of the decode call in the trace (the index kvsim's steps.csv uses),
// ms = wall time of llama_decode + llama_synchronize (std::chrono::steady_clock), rc = its return.
// Sequence ops (rm/cp/keep/add/div/clear) run untimed, as llama_memory_seq_* / llama_memory_clear.
//
// Mirrors ../../../shared/tools/kvoracle/kvoracle.cpp (do_batch: positions, token ids, one
// llama_batch per call) and lib/trace/op_trace.cpp (the CSV reading), without the oracle's
// interposition: this is a plain client of libllama, built against the native build of
// scripts/time-validation/build.sh (llama.cpp de3ff815).
//
// Outputs (logits) per call, as llama-server asks for them (tools/server/server.cpp
// update_slots: a generated token is always an output, a prompt chunk only at the prompt's
// last token): a row's last token is an output unless the next decode row of the same
// sequence continues it with more than one token (the next prompt chunk). The trace does not
// record outputs, so this is a reconstruction; it matters because each output runs the
// vocabulary projection.
//
// Errors (exit 2, nothing written): bad flag or value, unreadable or malformed trace
// (FILE:LINE and the value), a call with more tokens than -b. Exit 1: llama.cpp cannot load
// the model or create the context.

#include "llama.h"
#include "ggml-backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct input_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

enum class op_kind { decode, rm, cp, keep, add, div, clear };

struct op_row {
    long line = 0;
    op_kind op = op_kind::decode;
    std::string batch;
    std::vector<llama_seq_id> seqs;
    int n_tokens = 0;
    int p0 = -1;         // -1: implicit (decode) / open (ranges)
    int p1 = -1;
    int delta = 0;
    int seq_dst = -1;
    bool output = true;  // decode: last token is an output (see header)
};

struct op_group {
    op_kind op = op_kind::decode;
    std::vector<op_row> rows;
};

std::string trim(const std::string & s) {
    size_t a = s.find_first_not_of(" \t\r"), b = s.find_last_not_of(" \t\r");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// kvsim writes plain fields; a double-quoted one is unquoted ("" = quote) to read any valid file.
std::vector<std::string> split_csv(const std::string & line) {
    std::vector<std::string> out(1);
    bool q = false;
    for (size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (q && c == '"' && i + 1 < line.size() && line[i + 1] == '"') { out.back() += '"'; ++i; }
        else if (c == '"') q = !q;
        else if (c == ',' && !q) out.emplace_back();
        else out.back() += c;
    }
    for (auto & f : out) f = trim(f);
    return out;
}

std::string where(const std::string & path, long line, const std::string & value) {
    return path + ":" + std::to_string(line) + ": value '" + value + "': ";
}

// empty -> dflt; otherwise a base-10 int32
int to_int(const std::string & f, int dflt, const std::string & path, long line) {
    if (f.empty()) return dflt;
    size_t used = 0;
    long long v = 0;
    try { v = std::stoll(f, &used, 10); } catch (const std::exception &) { used = 0; }
    if (used != f.size() || v < INT32_MIN || v > INT32_MAX) throw input_error(where(path, line, f) + "not an int32");
    return (int) v;
}

op_kind kind_of(const std::string & s, const std::string & path, long line) {
    static const std::map<std::string, op_kind> m = {{"decode", op_kind::decode}, {"rm", op_kind::rm}, {"cp", op_kind::cp},
        {"keep", op_kind::keep}, {"add", op_kind::add}, {"div", op_kind::div}, {"clear", op_kind::clear}};
    auto it = m.find(s);
    if (it == m.end()) throw input_error(where(path, line, s) + "unknown op");
    return it->second;
}

op_row parse_row(const std::vector<std::string> & f, const std::string & path, long line) {
    op_row r;
    r.line = line;
    r.batch = f[0];
    r.op = kind_of(f[1], path, line);
    std::stringstream ss(f[2]);
    for (std::string x; std::getline(ss, x, ';');) r.seqs.push_back(to_int(trim(x), -1, path, line));
    r.n_tokens = to_int(f[3], 0, path, line);
    r.p0 = std::max(-1, to_int(f[4], -1, path, line));
    r.p1 = std::max(-1, to_int(f[5], -1, path, line));
    r.delta = to_int(f[6], 0, path, line);
    r.seq_dst = to_int(f[7], -1, path, line);
    if (r.op == op_kind::rm && r.seqs.empty()) r.seqs = {-1};
    if (r.op == op_kind::decode && (r.seqs.empty() || r.n_tokens <= 0))
        throw input_error(where(path, line, f[2] + "," + f[3]) + "decode needs seq and n_tokens > 0");
    if (r.op != op_kind::clear && r.op != op_kind::decode && r.seqs.size() != 1)
        throw input_error(where(path, line, f[2]) + "a sequence op takes exactly one seq id");
    if (r.op == op_kind::cp && r.seq_dst < 0) throw input_error(where(path, line, f[7]) + "cp needs seq_dst");
    if (r.op == op_kind::div && r.delta <= 0) throw input_error(where(path, line, f[6]) + "div needs delta > 0");
    return r;
}

// Groups in file order: consecutive decode rows with the same batch label = one llama_decode.
std::vector<op_group> read_ops(const std::string & path) {
    std::ifstream in(path);
    if (!in) throw input_error(path + ":0: cannot open");
    static const char * header = "batch,op,seq,n_tokens,p0,p1,delta,seq_dst";
    std::vector<op_group> groups;
    std::string line;
    long n = 0;
    bool have_header = false;
    while (std::getline(in, line)) {
        ++n;
        if (n == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line = line.substr(3);
        if (trim(line).empty()) continue;
        auto f = split_csv(line);
        if (!have_header) {
            std::string h;
            for (size_t i = 0; i < f.size(); ++i) h += (i ? "," : "") + f[i];
            if (h != header) throw input_error(where(path, n, trim(line)) + "expected the op-trace header " + header);
            have_header = true;
            continue;
        }
        if (f.size() != 8) throw input_error(where(path, n, trim(line)) + "expected 8 fields");
        op_row r = parse_row(f, path, n);
        const bool joins = r.op == op_kind::decode && !groups.empty() && groups.back().op == op_kind::decode &&
                           groups.back().rows.back().batch == r.batch;
        if (!joins) groups.push_back({r.op, {}});
        groups.back().rows.push_back(r);
    }
    if (!have_header) throw input_error(path + ":0: empty file");
    return groups;
}

// llama-server's outputs (see header): a row's last token is no output when the next decode
// row of its first sequence starts right after it with several tokens (a further prompt chunk).
// kvsim writes an explicit p0 on every decode row; an implicit one counts as a continuation.
void mark_outputs(std::vector<op_group> & groups) {
    std::map<llama_seq_id, op_row *> last;  // the previous decode row of each sequence
    for (auto & g : groups) {
        if (g.op == op_kind::clear || (g.op == op_kind::rm && g.rows[0].seqs[0] < 0)) last.clear();
        else if (g.op == op_kind::rm) last.erase(g.rows[0].seqs[0]);  // a new prompt after it is no continuation
        if (g.op != op_kind::decode) continue;
        for (auto & r : g.rows) {
            auto it = last.find(r.seqs[0]);
            if (it != last.end() && r.n_tokens > 1) {
                op_row & prev = *it->second;
                if (r.p0 < 0 || (prev.p0 >= 0 && r.p0 == prev.p0 + prev.n_tokens)) prev.output = false;
            }
            for (auto s : r.seqs) last[s] = &r;
        }
    }
}

// llama_decode refuses a call with more tokens than n_batch (llama.cpp caps n_batch at n_ctx).
void check_batch_sizes(const std::vector<op_group> & groups, const std::string & path, int n_batch) {
    for (const auto & g : groups) {
        if (g.op != op_kind::decode) continue;
        int n = 0;
        for (const auto & r : g.rows) n += r.n_tokens;
        if (n > n_batch)
            throw input_error(where(path, g.rows[0].line, std::to_string(n)) + "decode call has more tokens than n_batch " +
                              std::to_string(n_batch) + " (-b, capped at -c)");
    }
}

ggml_type type_of(const std::string & s) {
    static const std::map<std::string, ggml_type> m = {{"f32", GGML_TYPE_F32}, {"f16", GGML_TYPE_F16},
        {"bf16", GGML_TYPE_BF16}, {"q8_0", GGML_TYPE_Q8_0}, {"q4_0", GGML_TYPE_Q4_0}, {"q4_1", GGML_TYPE_Q4_1},
        {"q5_0", GGML_TYPE_Q5_0}, {"q5_1", GGML_TYPE_Q5_1}, {"iq4_nl", GGML_TYPE_IQ4_NL}};
    auto it = m.find(s);
    if (it == m.end()) throw input_error("-ctk/-ctv: value '" + s + "': unknown cache type");
    return it->second;
}

struct options {
    std::string model, ops, out;
    int n_ctx = 4096, n_seq = 1, n_batch = 2048, n_ubatch = 512, threads = 2, warmup = 3;
    bool kvu = false;
    std::string fa = "auto", ctk = "f16", ctv = "f16";
};

const char * k_usage =
    "usage: tv-decode-timer -m MODEL.gguf --ops OPS.csv -o STEPS.csv [-c N] [-np N] [-kvu|-no-kvu]\n"
    "                       [-b N] [-ub N] [-fa on|off|auto] [-ctk T] [-ctv T] [-t N] [--warmup N]\n"
    "Use the same -c -np -kvu -b -ub -fa -ctk -ctv as the kvsim replay that wrote OPS.csv.\n";

options parse_args(int argc, char ** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) throw input_error(a + ": missing value");
            return argv[++i];
        };
        auto num = [&]() {
            const std::string v = val();
            const int x = to_int(v, -1, "argument " + a, 0);
            if (x < 0) throw input_error(a + ": value '" + v + "': must be >= 0");
            return x;
        };
        if (a == "-m") o.model = val();
        else if (a == "--ops") o.ops = val();
        else if (a == "-o") o.out = val();
        else if (a == "-c") o.n_ctx = num();
        else if (a == "-np") o.n_seq = num();
        else if (a == "-kvu") o.kvu = true;
        else if (a == "-no-kvu") o.kvu = false;
        else if (a == "-b") o.n_batch = num();
        else if (a == "-ub") o.n_ubatch = num();
        else if (a == "-t") o.threads = num();
        else if (a == "--warmup") o.warmup = num();
        else if (a == "-fa") o.fa = val();
        else if (a == "-ctk") o.ctk = val();
        else if (a == "-ctv") o.ctv = val();
        else if (a == "-h" || a == "--help") { fputs(k_usage, stdout); exit(0); }
        else throw input_error("unknown argument '" + a + "'\n" + k_usage);
    }
    if (o.model.empty() || o.ops.empty() || o.out.empty()) throw input_error(std::string("-m, --ops and -o are required\n") + k_usage);
    if (o.fa != "on" && o.fa != "off" && o.fa != "auto") throw input_error("-fa: value '" + o.fa + "': expected on, off or auto");
    if (o.n_seq < 1 || o.n_batch < 1 || o.n_ubatch < 1 || o.threads < 1) throw input_error("-np, -b, -ub, -t must be >= 1");
    return o;
}

struct engine {
    llama_model * model = nullptr;
    llama_context * ctx = nullptr;
    llama_memory_t mem = nullptr;
    int n_vocab = 0;
};

// One llama_decode with the tokens of `rows` (kvoracle do_batch: explicit p0, else the next
// position of the row's first sequence within this batch, else seq_pos_max + 1).
int run_decode(engine & E, const std::vector<op_row> & rows, int & n_outputs, double & ms) {
    std::map<llama_seq_id, llama_pos> next;
    int n = 0, max_seqs = 1;
    for (const auto & r : rows) { n += r.n_tokens; max_seqs = std::max<int>(max_seqs, (int) r.seqs.size()); }
    llama_batch b = llama_batch_init(n, 0, max_seqs);
    int j = 0;
    n_outputs = 0;
    for (const auto & r : rows) {
        const llama_seq_id s0 = r.seqs[0];
        if (!next.count(s0)) next[s0] = llama_memory_seq_pos_max(E.mem, s0) + 1;
        const llama_pos p = r.p0 >= 0 ? r.p0 : next[s0];
        for (int k = 0; k < r.n_tokens; ++k, ++j) {
            b.token[j] = 3 + (int) (((long long) (p + k) * 7 + s0) % (E.n_vocab - 3));
            b.pos[j] = p + k;
            b.n_seq_id[j] = (int32_t) r.seqs.size();
            for (size_t q = 0; q < r.seqs.size(); ++q) b.seq_id[j][q] = r.seqs[q];
            b.logits[j] = r.output && k + 1 == r.n_tokens;
            n_outputs += b.logits[j] ? 1 : 0;
        }
        for (auto s : r.seqs) next[s] = p + r.n_tokens;
    }
    b.n_tokens = n;
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = llama_decode(E.ctx, b);
    llama_synchronize(E.ctx);
    const auto t1 = std::chrono::steady_clock::now();
    ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    llama_batch_free(b);
    return rc;
}

void run_seq_op(engine & E, const op_row & r) {
    const llama_seq_id s = r.seqs.empty() ? -1 : r.seqs[0];
    switch (r.op) {
        case op_kind::rm: llama_memory_seq_rm(E.mem, s, r.p0, r.p1); break;
        case op_kind::cp: llama_memory_seq_cp(E.mem, s, r.seq_dst, r.p0, r.p1); break;
        case op_kind::keep: llama_memory_seq_keep(E.mem, s); break;
        case op_kind::add: llama_memory_seq_add(E.mem, s, r.p0, r.p1, r.delta); break;
        case op_kind::div: llama_memory_seq_div(E.mem, s, r.p0, r.p1, r.delta); break;
        case op_kind::clear: llama_memory_clear(E.mem, true); break;
        case op_kind::decode: break;
    }
}

// Touch the weights and start the thread pool: one full ubatch and a few 1-token calls on
// sequence 0, then clear the cache (an empty cache with head 0, as at creation).
void warm_up(engine & E, const options & o) {
    if (o.warmup == 0) return;
    op_row r;
    r.seqs = {0};
    r.n_tokens = std::min(o.n_ubatch, std::max(1, (int) llama_n_ctx_seq(E.ctx) / 2));
    int n_out = 0;
    double ms = 0;
    run_decode(E, {r}, n_out, ms);
    r.n_tokens = 1;
    for (int i = 0; i < o.warmup; ++i) run_decode(E, {r}, n_out, ms);
    llama_memory_clear(E.mem, true);
}

void quiet_log(ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

}  // namespace

int main(int argc, char ** argv) {
    options o;
    std::vector<op_group> groups;
    try {
        o = parse_args(argc, argv);
        (void) type_of(o.ctk);
        (void) type_of(o.ctv);
        groups = read_ops(o.ops);
        check_batch_sizes(groups, o.ops, o.n_batch);
    } catch (const input_error & e) {
        fprintf(stderr, "tv-decode-timer: %s\n", e.what());
        return 2;
    }
    mark_outputs(groups);

    llama_log_set(quiet_log, nullptr);
    ggml_backend_load_all();
    llama_backend_init();
    engine E;
    // The weights are read into memory, not mapped (llama-bench -lm none): a host that reclaims cold page cache (DAMON's
    // pageout scheme on the 2-core VMs) dropped mapped weights between steps and made 44-65 of 177 four-token steps stall 2-4x
    // (docs/benchmarks.md, 2026-12-04); no copy of them stalled once read into anonymous memory.
    llama_model_params mp = llama_model_default_params();
    mp.load_mode = LLAMA_LOAD_MODE_NONE;
    E.model = llama_model_load_from_file(o.model.c_str(), mp);
    if (!E.model) { fprintf(stderr, "tv-decode-timer: %s: cannot load the model\n", o.model.c_str()); return 1; }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = o.n_ctx;
    cp.n_seq_max = o.n_seq;
    cp.n_batch = o.n_batch;
    cp.n_ubatch = o.n_ubatch;
    cp.kv_unified = o.kvu;
    cp.flash_attn_type = o.fa == "on" ? LLAMA_FLASH_ATTN_TYPE_ENABLED : o.fa == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_AUTO;
    cp.type_k = type_of(o.ctk);
    cp.type_v = type_of(o.ctv);
    cp.n_threads = o.threads;
    cp.n_threads_batch = o.threads;
    E.ctx = llama_init_from_model(E.model, cp);
    if (!E.ctx) { fprintf(stderr, "tv-decode-timer: cannot create the context\n"); return 1; }
    E.mem = llama_get_memory(E.ctx);
    try {
        check_batch_sizes(groups, o.ops, (int) llama_n_batch(E.ctx));
    } catch (const input_error & e) {
        fprintf(stderr, "tv-decode-timer: %s\n", e.what());
        return 2;
    }
    E.n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(E.model));
    fprintf(stderr, "tv-decode-timer: %s, n_ctx %u, n_ctx_seq %u, n_seq_max %u, n_batch %u, n_ubatch %u, kvu %d, fa %s, "
                    "ctk %s, ctv %s, threads %d, %zu op groups\n",
            o.model.c_str(), llama_n_ctx(E.ctx), llama_n_ctx_seq(E.ctx), llama_n_seq_max(E.ctx), llama_n_batch(E.ctx),
            llama_n_ubatch(E.ctx), (int) o.kvu, o.fa.c_str(), o.ctk.c_str(), o.ctv.c_str(), o.threads, groups.size());

    warm_up(E, o);
    std::ostringstream csv;
    csv << "step,n_tokens,ms,rc,n_outputs,n_rows,line\n";
    long step = 0, n_fail = 0;
    double total_ms = 0;
    for (const auto & g : groups) {
        if (g.op != op_kind::decode) { run_seq_op(E, g.rows[0]); continue; }
        int n = 0, n_out = 0;
        for (const auto & r : g.rows) n += r.n_tokens;
        double ms = 0;
        const int rc = run_decode(E, g.rows, n_out, ms);
        n_fail += rc != 0;
        total_ms += ms;
        char buf[160];
        snprintf(buf, sizeof(buf), "%ld,%d,%.4f,%d,%d,%zu,%ld\n", step++, n, ms, rc, n_out, g.rows.size(), g.rows[0].line);
        csv << buf;
    }
    llama_free(E.ctx);
    llama_model_free(E.model);
    llama_backend_free();

    const std::string tmp = o.out + ".tmp";
    {
        std::ofstream f(tmp);
        f << csv.str();
        if (!f.flush()) { fprintf(stderr, "tv-decode-timer: %s: cannot write\n", tmp.c_str()); return 2; }
    }
    if (std::rename(tmp.c_str(), o.out.c_str()) != 0) { fprintf(stderr, "tv-decode-timer: cannot rename %s\n", tmp.c_str()); return 2; }
    fprintf(stderr, "tv-decode-timer: %ld decode calls (%ld with rc != 0), %.1f ms in llama_decode, -> %s\n", step, n_fail,
            total_ms, o.out.c_str());
    return 0;
}
