#include "trace/text_lines.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sys/stat.h>

#include "core/errors.h"

// fccp copies file names with strncpy into fixed buffers; GCC flags the (intended) truncation.
#pragma GCC diagnostic push
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-truncation"
#endif
#include <libfccp/csv.h>
#pragma GCC diagnostic pop

#include <charconv>
#include <cmath>
#include <istream>

namespace kvsim {

namespace {

// fccp throws its own exception types; the CLI only knows input_error.
template <typename F> auto map_fccp_errors(const std::string & name, long line, F && f) {
    try {
        return f();
    } catch (const io::error::base & e) {
        throw input_error(name, line, "", e.what());
    }
}

input_error line_too_long(const std::string & name, long line) {
    return input_error(name, line, "",
                       fmt::format("line {} longer than {} bytes (a binary file, or a file without line ends?)", line,
                                   k_max_line_bytes));
}

// One pass over the file before fccp sees it. fccp hands lines back as C strings, so a NUL byte
// would silently cut a line short, and it buffers a line whole (up to 16 MiB) before returning
// it: refuse both, naming the line. Stops at the first problem, so a binary file or a file
// without line ends fails within its first megabyte instead of after being read to the end.
void check_text(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return;   // the reader reports the open failure
    std::vector<char> buf(1 << 16);
    long line = 1;
    size_t run = 0;   // bytes of the current line so far, line end excluded
    while (in) {
        in.read(buf.data(), (std::streamsize) buf.size());
        const size_t n = (size_t) in.gcount();
        for (size_t i = 0; i < n; ++i) {
            if (buf[i] == '\n') {
                ++line;
                run = 0;
            } else if (buf[i] == '\0') {
                throw input_error(path, line, "\\0", "NUL byte in a text trace (binary file?)");
            } else if (++run > k_max_line_bytes) {
                throw line_too_long(path, line);
            }
        }
    }
}

}  // namespace

void check_trace_file(const std::string & path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        throw input_error(path, 0, "", std::string("cannot open trace file: ") + std::strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) throw input_error(path, 0, "", "is a directory, not a trace file");
    if (!S_ISREG(st.st_mode)) {
        throw input_error(path, 0, "",
                          "not a regular file (a device, FIFO or pipe): kvsim reads a trace more than once and needs "
                          "its end; save it to a file first");
    }
}

std::string read_first_line(const std::string & path) {
    check_trace_file(path);
    std::ifstream in(path, std::ios::binary);
    if (!in) throw input_error(path, 0, "", std::string("cannot open trace file: ") + std::strerror(errno));
    std::string line;
    char c = 0;
    while (in.get(c) && c != '\n') {
        if (line.size() == k_max_line_bytes) throw line_too_long(path, 1);
        line += c;
    }
    return line;
}

text_lines::text_lines(const std::string & path) : name_(path) {
    check_trace_file(path);
    check_text(path);
    reader_ = map_fccp_errors(name_, 0, [&] { return std::make_unique<io::LineReader>(path); });
}

text_lines::text_lines(std::istream & in, const std::string & name) : name_(name) {
    reader_ = map_fccp_errors(name_, 0, [&] { return std::make_unique<io::LineReader>(name, in); });
}

text_lines::~text_lines() = default;

std::optional<std::string_view> text_lines::next() {
    char * s = map_fccp_errors(name_, line_ + 1, [&] { return reader_->next_line(); });
    if (s == nullptr) return std::nullopt;
    line_ = (long) reader_->get_file_line();
    const std::string_view v(s);
    // a stream is not pre-checked like a file: hold it to the same line limit here
    if (v.size() > k_max_line_bytes) throw line_too_long(name_, line_);
    return v;
}

std::optional<std::string_view> text_lines::next_nonblank() {
    for (;;) {
        auto l = next();
        if (!l || !is_blank(*l)) return l;
    }
}

bool is_blank(std::string_view s) {
    return s.find_first_not_of(" \t") == std::string_view::npos;
}

static std::string_view trim(std::string_view s) {
    const size_t b = s.find_first_not_of(" \t");
    if (b == std::string_view::npos) return {};
    const size_t e = s.find_last_not_of(" \t");
    return s.substr(b, e - b + 1);
}

std::vector<std::string> split_csv_line(std::string_view raw, const std::string & file, long line) {
    std::vector<std::string> out;
    size_t i = 0;
    for (;;) {
        const size_t start = i;
        while (i < raw.size() && (raw[i] == ' ' || raw[i] == '\t')) ++i;
        if (i < raw.size() && raw[i] == '"') {
            std::string field;
            ++i;
            for (;;) {
                if (i >= raw.size()) throw input_error(file, line, std::string(raw), "unterminated quoted field");
                if (raw[i] == '"') {
                    if (i + 1 < raw.size() && raw[i + 1] == '"') {
                        field += '"';
                        i += 2;
                        continue;
                    }
                    ++i;
                    break;
                }
                field += raw[i++];
            }
            const size_t comma = raw.find(',', i);
            if (!trim(raw.substr(i, comma == std::string_view::npos ? raw.npos : comma - i)).empty()) {
                throw input_error(file, line, std::string(raw), "text after a closing quote");
            }
            out.push_back(std::move(field));
            if (comma == std::string_view::npos) return out;
            i = comma + 1;
        } else {
            const size_t comma = raw.find(',', start);
            out.emplace_back(trim(raw.substr(start, comma == std::string_view::npos ? raw.npos : comma - start)));
            if (comma == std::string_view::npos) return out;
            i = comma + 1;
        }
    }
}

int32_t parse_int32_field(const std::string & text, const std::string & file, long line, const std::string & column) {
    int32_t v = 0;
    const char * b = text.data();
    const char * e = b + text.size();
    const auto [p, ec] = std::from_chars(b, e, v);
    if (ec == std::errc::result_out_of_range) {
        throw input_error(file, line, text, "column '" + column + "' does not fit in a 32-bit integer");
    }
    if (text.empty() || ec != std::errc() || p != e) {
        throw input_error(file, line, text, "column '" + column + "' is not an integer");
    }
    return v;
}

double parse_double_field(const std::string & text, const std::string & file, long line, const std::string & column) {
    double v = 0.0;
    const char * b = text.data();
    const char * e = b + text.size();
    const auto [p, ec] = std::from_chars(b, e, v);
    if (text.empty() || ec != std::errc() || p != e || !std::isfinite(v)) {
        throw input_error(file, line, text, "column '" + column + "' is not a finite number");
    }
    return v;
}

}  // namespace kvsim
