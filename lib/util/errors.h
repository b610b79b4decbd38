// Errors for bad user input: the CLI prints them and exits with status 2.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kvsim {

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

    // Control bytes in a value would garble the terminal or hide the problem (`'4\r'` printed
    // raw moves the cursor): shown as \r, \n, \t, \0 or \xNN. Other bytes (UTF-8) pass through.
    static std::string escape(const std::string & v) {
        std::string out;
        out.reserve(v.size());
        for (const char ch : v) {
            const unsigned char c = (unsigned char) ch;
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

    std::string file_;
    long line_;
    std::string value_;
};

// A bad combination of options (e.g. n_ubatch > n_batch): also exit status 2.
class usage_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

}  // namespace kvsim
