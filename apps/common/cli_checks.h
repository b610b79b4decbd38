// Checks of option values that only the command line can make: whether a value was given at all. An output option
// given an empty value (`--out ""`, often an unset shell variable) used to mean "not given": the run went on and
// wrote nothing where the user asked for files.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
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

// The first option spelled with '=' and nothing after it (`--out=$DIR` with DIR unset), or "" when none. CLI11 then
// takes the NEXT argument as the value (`calibrate --out= a.json b.json` wrote the profile over the input a.json), and
// `-o=` is the value "=": both CLIs refuse such an argument before parsing. Arguments after `--` are values.
inline std::string empty_assignment(const std::vector<std::string> & args) {
    for (size_t i = 1; i < args.size(); ++i) {
        const std::string & a = args[i];
        if (a == "--") break;
        if (a.size() > 1 && a[0] == '-' && a.find('=') == a.size() - 1) return a;
    }
    return {};
}

}  // namespace kvsim
