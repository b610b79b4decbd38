// Running the built kvsim binary from tests: exit status, captured stdout/stderr, a scratch
// directory per test, and readers for the report files.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace kvsim_test {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
struct scratch_dir {
    fs::path path;
    explicit scratch_dir(const std::string & tag) {
        static int n = 0;
        path = fs::temp_directory_path() / ("kvsim_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~scratch_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    std::string operator/(const std::string & name) const { return (path / name).string(); }
};

inline std::string read_text(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

struct cli_result {
    int rc = -1;
    std::string out, err;
};

// Runs `BINARY ARGS` (a built CLI; args already shell-quoted where needed) in the current directory.
inline cli_result run_cli(const std::string & binary, const std::string & args) {
    scratch_dir io("cli_io");
    const std::string cmd = std::string(KVSIM_BINARY_DIR) + "/" + binary + " " + args + " >" + (io / "out") + " 2>" + (io / "err");
    const int st = std::system(cmd.c_str());
    cli_result r;
    r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.out = read_text(io / "out");
    r.err = read_text(io / "err");
    return r;
}

inline cli_result run_kvsim(const std::string & args) { return run_cli("kvsim", args); }
inline cli_result run_kvbench(const std::string & args) { return run_cli("kvbench", args); }

inline std::vector<std::string> lines_of(const std::string & text) {
    std::vector<std::string> v;
    std::istringstream in(text);
    std::string l;
    while (std::getline(in, l)) v.push_back(l);
    return v;
}

// Non-blank data lines of a trace file (all lines minus the header for CSV, all for JSONL).
inline size_t data_lines(const std::string & path) {
    size_t n = 0;
    for (const auto & l : lines_of(read_text(path))) n += l.find_first_not_of(" \r\t") != std::string::npos;
    return path.ends_with(".jsonl") ? n : n - 1;
}

inline size_t files_in(const std::string & dir) {
    if (!fs::exists(dir)) return 0;
    size_t n = 0;
    for (const auto & e : fs::recursive_directory_iterator(dir)) n += e.is_regular_file();
    return n;
}

}  // namespace kvsim_test
