// Checks of option values that only the command line can make: whether a value was given at all. An output option
// given an empty value (`--out ""`, often an unset shell variable) used to mean "not given": the run went on and
// wrote nothing where the user asked for files.
#pragma once

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace kvsim {

// `optional`: the option has a default, which leaving it out gives (the error says so)
inline CLI::Validator non_empty_name(bool optional = true) {
    return CLI::Validator(
        [optional](std::string & v) {
            return v.empty() ? std::string(optional ? "an empty name (leave the option out for its default)" : "an empty name") : std::string();
        },
        "", "non-empty");
}

// A count CLI11 reads into an unsigned type, where -1 wrapped to the largest value (`--limit -1` replayed every
// request); CLI::NonNegativeNumber refused it with a 309-digit range and called "3abc" out of range. Digits only.
inline CLI::Validator whole_count() {
    return CLI::Validator(
        [](std::string & v) {
            const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
            return digits ? std::string() : "'" + v + "' is not a whole number >= 0";
        },
        "", "whole count");
}

// Why an argument spelled with '=' cannot be parsed as meant, or "" when none: `--out=` with nothing after '='
// (`--out=$DIR` with DIR unset: CLI11 then takes the NEXT argument as the value, and `calibrate --out= a.json b.json`
// wrote the profile over the input a.json), or a one-letter option glued to '=' (`-o=p.json`: CLI11 reads the value
// "=p.json"). `typed` is argv; `parsed` the arguments CLI11 gets (llama.cpp's aliases rewritten: `-n=8` becomes
// `--predict=8`, which is fine). Arguments after `--` are values.
inline std::string bad_assignment(const std::vector<std::string> & typed, const std::vector<std::string> & parsed) {
    for (size_t i = 1; i < typed.size(); ++i) {
        const std::string & a = typed[i];
        if (a == "--") break;
        if (a.size() < 2 || a[0] != '-') continue;
        const size_t eq = a.find('=');
        if (eq == a.size() - 1) return a + ": nothing after '=' (an unset shell variable?): give a value, or leave the option out";
        const bool rewritten = i < parsed.size() && parsed[i] != a;
        if (eq == 2 && a[1] != '-' && !rewritten) {
            return a + ": a one-letter option takes its value after a space (" + a.substr(0, 2) + " " + a.substr(3) + ")";
        }
    }
    return {};
}

// `-`, the usual name of standard output, given to a file output: /dev/stdout, which atomic_file writes in place (a file
// named '-' used to be written). True when `path` was `-`.
// A closed standard output (`>&-`) is named as stdout_status names it (an I/O failure, exit 1), not as a missing
// /dev/stdout (exit 2).
inline bool dash_is_stdout(std::string & path) {
    if (path != "-") return false;
    if (::fcntl(STDOUT_FILENO, F_GETFL) == -1) throw std::runtime_error(std::string("cannot write standard output: ") + std::strerror(errno));
    path = "/dev/stdout";
    return true;
}

}  // namespace kvsim
