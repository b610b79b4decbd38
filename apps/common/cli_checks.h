// Checks of option values that only the command line can make: whether a value was given at all. An output option
// given an empty value (`--out ""`, often an unset shell variable) used to mean "not given": the run went on and
// wrote nothing where the user asked for files.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace kvsim {

inline CLI::Validator non_empty_name() {
    return CLI::Validator([](std::string & v) { return v.empty() ? std::string("an empty name (leave the option out for its default)") : std::string(); },
                          "", "non-empty");
}

}  // namespace kvsim
