// `kvsim devices [NAME|FILE] [--json]`: the shipped device profiles with their provenance and the error of their
// simulated times (time/device_profile.h), or one profile in full, so a user can see what a --device stands on.
#pragma once

#include <CLI/CLI.hpp>

#include <ostream>
#include <string>

namespace kvsim {

struct devices_cli {
    std::string name;
    bool json = false;
    CLI::Option * device_opt = nullptr;

    void add_to(CLI::App & cmd);
    int run(std::ostream & term) const;
};

}  // namespace kvsim
