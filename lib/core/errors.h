// Errors: bad user input (input_error, usage_error, option_error: the CLI prints them and exits with status 2),
// and the library layers' own refusals (lib_error), which the drivers turn into input errors.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kvsim {

// Whether s[i] starts a C1 control U+0080..U+009F in UTF-8 (C2 80..C2 9F): U+009B is a terminal's CSI, so these are
// as dangerous in text we print as the ASCII controls.
inline bool c1_control_at(const std::string & s, size_t i) {
    return (unsigned char) s[i] == 0xc2 && i + 1 < s.size() && (unsigned char) s[i + 1] >= 0x80 && (unsigned char) s[i + 1] <= 0x9f;
}

// The length of the well-formed UTF-8 character at s[i] (RFC 3629: no overlong forms, no surrogates, at most
// U+10FFFF), or 0 when the bytes there are not one.
inline size_t utf8_char_len(const std::string & s, size_t i) {
    const unsigned char c = (unsigned char) s[i];
    if (c < 0x80) return 1;
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xbf;   // the allowed range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        lo = c == 0xe0 ? 0xa0 : 0x80;
        hi = c == 0xed ? 0x9f : 0xbf;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        lo = c == 0xf0 ? 0x90 : 0x80;
        hi = c == 0xf4 ? 0x8f : 0xbf;
    } else {
        return 0;
    }
    if (i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k) {
        const unsigned char b = (unsigned char) s[i + k];
        if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xbf)) return 0;
    }
    return n;
}

// Control bytes in text we print would garble the terminal or hide the problem (`'4\r'` printed raw moves the
// cursor; a file name with ESC ] sets the window title): shown as \r, \n, \t, \0 or \xNN, and so are the C1 controls
// U+0080..U+009F (UTF-8 C2 80..C2 9F; U+009B is a terminal's CSI) and bytes that are not well-formed UTF-8 (a lone
// 0x9B is CSI to a terminal in an 8-bit mode). Other characters pass through; a backslash passes too, so escaping
// twice changes nothing.
inline std::string escape_controls(const std::string & v) {
    std::string out;
    out.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
        const char ch = v[i];
        const unsigned char c = (unsigned char) ch;
        if (c1_control_at(v, i)) {
            out += fmt::format("\\xc2\\x{:02x}", (unsigned char) v[++i]);
            continue;
        }
        if (c >= 0x80) {
            const size_t n = utf8_char_len(v, i);
            if (n == 0) {
                out += fmt::format("\\x{:02x}", c);
            } else {
                out.append(v, i, n);
                i += n - 1;
            }
            continue;
        }
        switch (c) {
            case '\r': out += "\\r"; break;
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            case '\0': out += "\\0"; break;
            default:
                if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
                else out += ch;
        }
    }
    return out;
}

// A problem in a file the user handed us: names the file, the 1-based line (0 = whole file)
// and the offending value. what() is the full human-readable message; control bytes in the value
// are escaped there (value() keeps them raw).
class input_error : public std::runtime_error {
public:
    input_error(std::string file, long line, std::string value, const std::string & why)
        : std::runtime_error(format(file, line, value, why)), file_(std::move(file)), line_(line), value_(std::move(value)) {}

    const std::string & file() const { return file_; }
    long line() const { return line_; }
    const std::string & value() const { return value_; }

private:
    static std::string format(const std::string & file, long line, const std::string & value, const std::string & why) {
        // fmt avoids a GCC 12 -Wrestrict false positive on chained std::string concatenation
        return fmt::format("{}{}: {}{}", file, line > 0 ? fmt::format(":{}", line) : std::string(), why,
                           value.empty() ? std::string() : fmt::format(" (value '{}')", escape(value)));
    }

    static std::string escape(const std::string & v) { return escape_controls(v); }

    std::string file_;
    long line_;
    std::string value_;
};

// A bad combination of options (e.g. n_ubatch > n_batch): also exit status 2.
class usage_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// An option struct the library refuses (its validate(): server_params, replay_options, sweep_config,
// context_params): what() says it in the library's field names ("n_keep must be >= -1, got -2"), and
// fields() lists the names it uses, so that apps/ can say the message in their flags instead
// (said_in_flags, apps/common/llama_args.h). Exit status 2, like any usage_error.
class option_error : public usage_error {
public:
    option_error(std::vector<std::string> fields, const std::string & what) : usage_error(what), fields_(std::move(fields)) {}
    const std::vector<std::string> & fields() const { return fields_; }

private:
    std::vector<std::string> fields_;
};

// A call the library layers refuse (lib/kv, lib/drive): a precondition upstream asserts (a seq id the
// cache cannot hold, a partial cross-stream seq_cp, a divisor <= 0, a decode position past int32).
// The message names the values, never a CLI flag or a file: the driver that knows the trace line
// adds them (op_replay catches lib_error and throws input_error). Mixed into the standard type the
// condition always had (lib_out_of_range, lib_invalid_argument), so a caller catching that still does.
class lib_error {
public:
    virtual ~lib_error() = default;
    virtual const char * what() const noexcept = 0;
    // The offending value the driver quotes, when the refusal names one (a seq_add's delta);
    // empty: the driver quotes the op itself.
    const std::string & value() const { return value_; }

protected:
    lib_error() = default;
    explicit lib_error(std::string value) : value_(std::move(value)) {}

private:
    std::string value_;
};

class lib_out_of_range final : public std::out_of_range, public lib_error {
public:
    using std::out_of_range::out_of_range;
    lib_out_of_range(const std::string & what, std::string value) : std::out_of_range(what), lib_error(std::move(value)) {}
    const char * what() const noexcept override { return std::out_of_range::what(); }
};

class lib_invalid_argument final : public std::invalid_argument, public lib_error {
public:
    using std::invalid_argument::invalid_argument;
    const char * what() const noexcept override { return std::invalid_argument::what(); }
};

}  // namespace kvsim
