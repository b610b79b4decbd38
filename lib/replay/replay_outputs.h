// The files one `kvsim replay` writes, as one filesystem transaction: all of them appear, or none.
//
// Contract (replay_outputs):
// - Construction checks every path first (check_paths), then creates --out (remembering the
//   directories it created) and opens each output the run will write as an atomic_file
//   (lib/util/atomic_file.h: a temporary next to the final name). Nothing in place changes yet.
// - commit() flushes and closes every file, then renames them all into place, then removes the
//   stale ones: files in --out with kvsim's names (k_out_files) that this run did not write (an
//   op-trace run removes a request-trace run's requests.csv, an untimed run an earlier
//   bandwidth.csv). Done last, so a failed run leaves the previous run's set whole. Only when
//   --out held a summary.json written by kvsim before this run (holds_kvsim_summary): a
//   requests.csv of the user's own in a directory kvsim never wrote to is not kvsim's to delete.
// - Without commit() (an error or an interrupt thrown through the replay), the destructor
//   removes the temporary files and the directories this run created, if they are still empty.
// - Never touched: files in --out with other names, directories (a kvsim name that is a
//   directory stays), and anything outside the given paths.
#pragma once

#include "replay/replay_options.h"
#include "util/atomic_file.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace kvsim {

// The files a replay writes into --out (kvsim's own names: the only ones remove_stale touches).
inline constexpr const char * k_out_files[] = {"occupancy.csv", "requests.csv", "summary.json",
                                               "bandwidth.csv", "report.html",  "steps.csv"};

// Every output (--dump-cells, --emit-ops, --trace-json and the files of --out) must be a distinct
// path that is not a directory: checked before any work, so a bad path fails in a second rather
// than after the replay, and two writers never share a file. Paths are compared absolute and
// normalised with existing symbolic links resolved (`x`, `./x`, `d/../x`, a link to x: one file).
// Throws usage_error: --emit-ops on an op trace (`is_request_trace` false), --steps-csv without
// --out, --out naming a file or a dangling symbolic link, an output path that is a directory, the
// same file given twice, an output path that is the trace itself (o.trace, by any name or hard
// link: it would be replaced).
void check_paths(const replay_options & o, bool is_request_trace);

// True when out_dir/summary.json is a JSON object whose "tool" starts with "kvsim" (what a replay writes): the
// mark that the directory's files with kvsim's names came from an earlier run. False when it is absent,
// unreadable or anything else.
bool holds_kvsim_summary(const std::string & out_dir);

class replay_outputs {
public:
    // Opens the outputs of one run (see the contract above). requests.csv only for a request trace,
    // steps.csv only for a request trace with o.steps_csv, bandwidth.csv only when `timed` (kernel
    // hooks present). Throws what
    // check_paths throws, usage_error for a file that cannot be opened or an --out that cannot be
    // created (a file on the way, no permission); nothing is left behind then.
    replay_outputs(const replay_options & o, bool is_request_trace, bool timed);
    // A run without commit(): the temporary files go, then the directories this run created if empty.
    ~replay_outputs();
    replay_outputs(const replay_outputs &) = delete;
    replay_outputs & operator=(const replay_outputs &) = delete;

    // All or nothing: every file is flushed and closed first (a write error there leaves no new
    // file in place: std::runtime_error naming the file), and only then are they all renamed;
    // then the stale files of --out are removed (std::runtime_error if one cannot be).
    void commit();

    // The open outputs; null when the run does not write that file.
    std::unique_ptr<atomic_file> dump;        // --dump-cells
    std::unique_ptr<atomic_file> emit;        // --emit-ops
    std::unique_ptr<atomic_file> emit_draft;  // --emit-draft-ops
    std::unique_ptr<atomic_file> timeline;    // --trace-json
    std::unique_ptr<atomic_file> occupancy;   // --out: occupancy.csv
    std::unique_ptr<atomic_file> requests;    // requests.csv
    std::unique_ptr<atomic_file> summary;     // summary.json
    std::unique_ptr<atomic_file> bandwidth;   // bandwidth.csv
    std::unique_ptr<atomic_file> report;      // report.html
    std::unique_ptr<atomic_file> steps;       // steps.csv

private:
    std::string out_dir_;
    std::vector<std::filesystem::path> created_dirs_;   // deepest first
    bool committed_ = false;
    bool earlier_run_ = false;   // --out held an earlier kvsim run's summary.json: stale files may be removed

    void create_out_dir(const std::string & out_dir);
    void discard() noexcept;
    void remove_created_dirs() noexcept;
    void remove_stale() const;
};

}  // namespace kvsim
