// --help text for both CLIs. CLI11 writes a negatable flag pair as `--kv-unified,--no-kv-unified{false}`: the
// braces hold the value the negated name stores, which readers take for the default (a fresh-user pass read
// "-kvu is off by default"). The option descriptions say the defaults; the names are shown without braces.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

namespace kvsim {

class help_formatter : public CLI::Formatter {
public:
    std::string make_option_name(const CLI::Option * opt, bool is_positional) const override {
        std::string s = CLI::Formatter::make_option_name(opt, is_positional);
        for (const std::string v : {"{false}", "{true}"}) {
            for (size_t p = s.find(v); p != std::string::npos; p = s.find(v)) s.erase(p, v.size());
        }
        return s;
    }
};

// Call before adding subcommands: they take the formatter of their parent when created.
inline void use_help_formatter(CLI::App & app) { app.formatter(std::make_shared<help_formatter>()); }

}  // namespace kvsim
