#include "trace/text_lines.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "util/errors.h"

// fccp copies file names with strncpy into fixed buffers; GCC flags the (intended) truncation.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-truncation"
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

}  // namespace

// fccp hands lines back as C strings, so a NUL byte would silently cut a line short: refuse
// such a file up front, naming the line (a binary file given as a trace, usually).
static void check_no_nul(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return;   // the reader reports the open failure
    std::vector<char> buf(1 << 20);
    long line = 1;
    while (in) {
        in.read(buf.data(), (std::streamsize) buf.size());
        const std::streamsize n = in.gcount();
        const char * nul = static_cast<const char *>(std::memchr(buf.data(), '\0', (size_t) n));
        const char * end = nul ? nul : buf.data() + n;
        line += std::count(static_cast<const char *>(buf.data()), end, '\n');
        if (nul) throw input_error(path, line, "\\0", "NUL byte in a text trace (binary file?)");
    }
}

text_lines::text_lines(const std::string & path) : name_(path) {
    check_no_nul(path);
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
    return std::string_view(s);
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
