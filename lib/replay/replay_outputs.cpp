#include "replay/replay_outputs.h"

#include "core/errors.h"
#include "util/json_read.h"
#include "util/read_file.h"

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <utility>

namespace kvsim {

bool holds_kvsim_summary(const std::string & out_dir) {
    const std::string path = out_dir + "/summary.json";
    std::error_code ec;
    // a file of its own, not a link: a link to another run's summary.json made a fresh directory look like a run's
    if (!std::filesystem::is_regular_file(std::filesystem::symlink_status(path, ec))) return false;
    try {
        const nlohmann::json j = parse_json_bounded(read_small_file(path, "summary.json"));
        if (!j.is_object() || !j.contains("tool") || !j["tool"].is_string()) return false;
        const std::string tool = j["tool"].get<std::string>();
        return tool == "kvsim" || tool.rfind("kvsim ", 0) == 0;   // "kvsim 0.1.0", not "kvsimXYZ"
    } catch (const std::exception &) {   // unreadable or not JSON: not a summary kvsim wrote
        return false;
    }
}

namespace {
// The file a write to p lands on: p made absolute, its symbolic links followed, also a last one that dangles (the
// write creates its target; weakly_canonical stops at it), normalised.
std::string output_key(const std::string & p) {
    std::error_code ec;
    std::filesystem::path abs = std::filesystem::absolute(p, ec);
    if (ec) abs = p;
    for (int hops = 0; hops < 40; ++hops) {   // a link loop is left to the open to report
        std::error_code lec;
        if (!std::filesystem::is_symlink(std::filesystem::symlink_status(abs, lec)) || std::filesystem::exists(abs, lec)) break;
        const std::filesystem::path to = std::filesystem::read_symlink(abs, lec);
        if (lec) break;
        abs = to.is_absolute() ? to : abs.parent_path() / to;
    }
    std::filesystem::path canon = std::filesystem::weakly_canonical(abs, ec);
    if (ec) canon = abs;
    return canon.lexically_normal().string();
}
}  // namespace

void check_paths(const replay_options & o, bool is_request_trace) {
    if (!is_request_trace && !o.emit_ops.empty()) {
        throw usage_error("--emit-ops applies to request traces (an op trace already is the op stream)");
    }
    if (!o.emit_draft_ops.empty() && !o.server.spec.enabled()) {
        throw usage_error("--emit-draft-ops writes the draft model's cache calls: it needs speculative decoding on a request "
                          "trace (-md PRESET --spec-type draft-simple)");
    }
    if (o.steps_csv && o.out_dir.empty()) {
        throw usage_error("--steps-csv writes steps.csv into the --out directory: give --out DIR");
    }
    std::vector<std::string> paths;
    for (const std::string * p : {&o.dump_cells, &o.emit_ops, &o.emit_draft_ops, &o.trace_json}) {
        if (!p->empty()) paths.push_back(*p);
    }
    if (!o.out_dir.empty()) {
        // error_code forms: a symbolic-link loop on the way is the user's path to fix (exit 2), not a
        // filesystem_error (exit 1)
        std::error_code sec;
        const auto st = std::filesystem::status(o.out_dir, sec);
        if (sec && sec != std::errc::no_such_file_or_directory && sec != std::errc::not_a_directory) throw usage_error("--out " + o.out_dir + ": " + sec.message());
        if (std::filesystem::exists(st) && !std::filesystem::is_directory(st)) {
            throw usage_error("--out " + o.out_dir + " exists and is not a directory");
        }
        // A dangling link: create_directories would fail late with "File exists" (exit 1).
        std::error_code lec;
        if (std::filesystem::is_symlink(std::filesystem::symlink_status(o.out_dir, lec)) && !std::filesystem::exists(o.out_dir)) {
            throw usage_error("--out " + o.out_dir + " is a symbolic link to a directory that does not exist");
        }
        for (const char * f : k_out_files) paths.push_back(o.out_dir + "/" + f);
    }
    // weakly_canonical of a relative path whose first component does not exist stays relative,
    // hence absolute() first.
    std::vector<std::pair<std::string, std::string>> seen;   // canonical, as given
    for (const auto & p : paths) {
        const std::string key = output_key(p);
        std::error_code pec;
        const auto pst = std::filesystem::status(p, pec);
        if (pec && pec != std::errc::no_such_file_or_directory && pec != std::errc::not_a_directory) throw usage_error("output path " + p + ": " + pec.message());
        if (std::filesystem::is_directory(pst)) throw usage_error("output path " + p + " is a directory");
        // The rename would replace the trace with the output (the input lost): by name, link or hard link.
        std::error_code eq;
        if (!o.trace.empty() && std::filesystem::equivalent(p, o.trace, eq) && !eq) {
            throw usage_error("output path " + p + " is the trace " + o.trace + " (it would be overwritten)");
        }
        for (const auto & [k, given] : seen) {
            if (k == key) {
                throw usage_error(given == p ? "output path " + p + " is given twice"
                                             : "output paths " + given + " and " + p + " are the same file (" + key + ")");
            }
        }
        seen.emplace_back(key, p);
    }
}

// The opening order is the order in which a bad path is reported: --dump-cells first (before
// --out is created), then --emit-ops, --trace-json and the files of --out.
replay_outputs::replay_outputs(const replay_options & o, bool is_request_trace, bool timed) : out_dir_(o.out_dir) {
    check_paths(o, is_request_trace);
    earlier_run_ = !out_dir_.empty() && holds_kvsim_summary(out_dir_);
    if (!o.dump_cells.empty()) dump = std::make_unique<atomic_file>(o.dump_cells);
    if (!o.out_dir.empty()) create_out_dir(o.out_dir);
    try {
        if (!o.emit_ops.empty()) emit = std::make_unique<atomic_file>(o.emit_ops);
        if (!o.emit_draft_ops.empty()) emit_draft = std::make_unique<atomic_file>(o.emit_draft_ops);
        if (!o.trace_json.empty()) timeline = std::make_unique<atomic_file>(o.trace_json);
        if (o.out_dir.empty()) return;
        occupancy = std::make_unique<atomic_file>(o.out_dir + "/occupancy.csv");
        if (is_request_trace) requests = std::make_unique<atomic_file>(o.out_dir + "/requests.csv");
        if (is_request_trace && o.steps_csv) steps = std::make_unique<atomic_file>(o.out_dir + "/steps.csv");
        summary = std::make_unique<atomic_file>(o.out_dir + "/summary.json");
        if (timed) bandwidth = std::make_unique<atomic_file>(o.out_dir + "/bandwidth.csv");
        report = std::make_unique<atomic_file>(o.out_dir + "/report.html");
    } catch (...) {
        discard();   // the destructor does not run for a constructor that throws
        throw;
    }
}

// Remembers the directories this run creates, so that a failed run removes them again (when empty).
void replay_outputs::create_out_dir(const std::string & out_dir) {
    std::error_code ec;
    std::filesystem::path d = std::filesystem::absolute(out_dir, ec).lexically_normal();
    if (!d.has_filename()) d = d.parent_path();   // trailing slash
    auto missing = [](const std::filesystem::path & p) {
        std::error_code e;   // not_found sets e on some libstdc++ versions: only the status counts
        return !std::filesystem::exists(std::filesystem::symlink_status(p, e));
    };
    while (!ec && !d.empty() && d != d.parent_path() && missing(d)) {
        created_dirs_.push_back(d);
        d = d.parent_path();
    }
    ec.clear();
    std::filesystem::create_directories(out_dir, ec);
    if (ec) {
        remove_created_dirs();
        // The user's path to fix (a file on the way, no permission), as an unwritable file is: exit 2.
        throw usage_error("--out " + out_dir + ": cannot create the directory: " + ec.message());
    }
}

replay_outputs::~replay_outputs() {
    if (!committed_) discard();
}

void replay_outputs::commit() {
    atomic_file * const all[] = {dump.get(),      emit.get(),   emit_draft.get(), occupancy.get(), requests.get(),
                                 summary.get(),   bandwidth.get(), report.get(), timeline.get(),   steps.get()};
    for (atomic_file * f : all) {
        if (f) f->finish();
    }
    for (atomic_file * f : all) {
        if (f) f->commit();
    }
    committed_ = true;
    remove_stale();
}

void replay_outputs::discard() noexcept {
    for (auto * f : {&dump, &emit, &emit_draft, &occupancy, &requests, &summary, &bandwidth, &report, &timeline, &steps}) f->reset();
    remove_created_dirs();
}

void replay_outputs::remove_created_dirs() noexcept {
    for (const auto & d : created_dirs_) {
        std::error_code ec;
        if (!std::filesystem::remove(d, ec)) break;   // not empty (or gone): leave it and its parents
    }
}

namespace {
// Only a file or a link: a directory with a kvsim name is never removed.
void remove_if_file(const std::filesystem::path & p) {
    std::error_code ec;
    const auto st = std::filesystem::symlink_status(p, ec);
    if (!std::filesystem::exists(st) || std::filesystem::is_directory(st)) return;
    if (!std::filesystem::remove(p, ec) && ec) {
        throw std::runtime_error("cannot remove " + p.string() + " (left by an earlier run): " + ec.message());
    }
}
}  // namespace

void replay_outputs::remove_stale() const {
    if (!earlier_run_) return;
    const std::pair<const char *, const atomic_file *> written[] = {
        {"occupancy.csv", occupancy.get()}, {"requests.csv", requests.get()}, {"summary.json", summary.get()},
        {"bandwidth.csv", bandwidth.get()}, {"report.html", report.get()},    {"steps.csv", steps.get()}};
    static_assert(std::size(written) == std::size(k_out_files));
    for (const auto & [name, file] : written) {
        if (!file) remove_if_file(std::filesystem::path(out_dir_) / name);
    }
}

}  // namespace kvsim
