// --help text for both CLIs. CLI11 writes a negatable flag pair as `--kv-unified,--no-kv-unified{false}`: the
// braces hold the value the negated name stores, which readers take for the default (a fresh-user pass read
// "-kvu is off by default"). The option descriptions say the defaults; the names are shown without braces.
#pragma once

#include "common/llama_args.h"
#include "core/errors.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>

namespace kvsim {

class help_formatter : public CLI::Formatter {
public:
    // list llama.cpp's aliases: kvsim only (kvbench does not rewrite them, so it must not offer them)
    explicit help_formatter(bool llama_aliases) : llama_aliases_(llama_aliases) {}

    std::string make_option_name(const CLI::Option * opt, bool is_positional) const override {
        std::string s = CLI::Formatter::make_option_name(opt, is_positional);
        for (const std::string v : {"{false}", "{true}"}) {
            for (size_t p = s.find(v); p != std::string::npos; p = s.find(v)) s.erase(p, v.size());
        }
        // llama.cpp's multi-letter flags (-np, -kvu, -ctk, ...) are rewritten before parsing, so CLI11 does not know
        // them: listed in front of their long names, as in llama.cpp's own --help (a new user searched for -np)
        if (!llama_aliases_ || is_positional) return s;
        const auto & names = opt->get_lnames();
        const auto has = [&](const std::string & n) { return std::find(names.begin(), names.end(), n) != names.end(); };
        std::string shorts;
        for (const auto & [flag, long_name] : llama_flag_aliases()) {
            if (has(long_name.substr(2))) shorts += flag + ",";
        }
        // -n: llama-server's --n-predict (replay and plan; calibrate's --predict flag is another thing)
        if (has("n-predict")) shorts += "-n,";
        return shorts + s;
    }

private:
    bool llama_aliases_;
};

// CLI11's parse errors quote the value as given: a value holding ESC, CR or a newline reached the terminal raw (a
// newline could forge a second line), and a 100 KB value made a 100 KB line. Its message (CLI::FailureMessage::simple:
// the error, a newline, the "Run with --help" hint) is rewritten with the error cut to k_max_error_bytes and escaped
// as kvsim's own error lines are (escape_controls).
inline constexpr size_t k_max_error_bytes = 400;
inline std::string escaped_failure(const CLI::App * app, const CLI::Error & e) {
    const std::string what = e.what(), simple = CLI::FailureMessage::simple(app, e);
    const std::string hint = simple.compare(0, what.size(), what) == 0 ? simple.substr(what.size()) : "\n";
    std::string text = escape_controls(what);   // then cut: escaping can make a value 4x longer
    if (text.size() > k_max_error_bytes) {
        size_t n = k_max_error_bytes;
        // not inside a UTF-8 character (at most 3 continuation bytes back) nor inside a \xNN of the escaping
        for (int k = 0; k < 3 && n > 0 && ((unsigned char) text[n] & 0xc0) == 0x80; ++k) --n;
        const size_t slash = text.rfind('\\', n);
        if (slash != std::string::npos && n - slash < 4) n = slash;
        text = text.substr(0, n) + fmt::format("... ({} bytes)", what.size());
    }
    return text + hint;
}

// Call before adding subcommands: they take the formatter and the failure message of their parent when created.
inline void use_help_formatter(CLI::App & app, bool llama_aliases) {
    app.formatter(std::make_shared<help_formatter>(llama_aliases));
    app.failure_message(escaped_failure);
}

}  // namespace kvsim
