// --help text for both CLIs. CLI11 writes a negatable flag pair as `--kv-unified,--no-kv-unified{false}`: the
// braces hold the value the negated name stores, which readers take for the default (a fresh-user pass read
// "-kvu is off by default"). The option descriptions say the defaults; the names are shown without braces.
#pragma once

#include "core/errors.h"

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

// CLI11's parse errors quote the value as given: a file name holding ESC or CR would reach the terminal raw. Each
// line of its message is escaped as kvsim's own error lines are (escape_controls), the line breaks kept.
inline std::string escape_lines(const std::string & text) {
    std::string out;
    size_t from = 0;
    for (size_t nl = text.find('\n'); nl != std::string::npos; from = nl + 1, nl = text.find('\n', from)) {
        out += escape_controls(text.substr(from, nl - from)) + '\n';
    }
    return out + escape_controls(text.substr(from));
}

// Call before adding subcommands: they take the formatter and the failure message of their parent when created.
inline void use_help_formatter(CLI::App & app) {
    app.formatter(std::make_shared<help_formatter>());
    app.failure_message([](const CLI::App * a, const CLI::Error & e) { return escape_lines(CLI::FailureMessage::simple(a, e)); });
}

}  // namespace kvsim
