// Line-by-line access to a trace file, shared by the CSV and JSONL trace readers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace io {
class LineReader;
}

namespace kvsim {

// Longest line a trace may have, line end included. Real trace lines are under a few KiB; a
// longer one is a binary file or a file without line ends, refused before it is buffered whole.
inline constexpr size_t k_max_line_bytes = (size_t) 1 << 20;

// A trace must be a regular file: kvsim reads it more than once (format detection, then
// parsing) and must see its end, which a device (/dev/zero), FIFO or pipe (<(...)) does not
// give. Throws input_error(path, 0, "", why) when it cannot be opened or is not a regular file.
void check_trace_file(const std::string & path);

// The first line of a trace (without its line end), for format detection. Checks the file as
// check_trace_file does and reads at most k_max_line_bytes: input_error for a longer line.
std::string read_first_line(const std::string & path);

// Reads a text file one line at a time through fast-cpp-csv-parser's io::LineReader, which
// strips a leading UTF-8 BOM and the '\r' of CRLF line ends and accepts a missing final
// newline. Lines are numbered from 1 (the BOM does not count as a line).
// Errors: input_error(name, line, "", why) when the file cannot be opened or is not a regular
// file (check_trace_file), holds a NUL byte, or has a line longer than k_max_line_bytes.
class text_lines {
public:
    // Open a file by path; `name` for errors is the path.
    explicit text_lines(const std::string & path);
    // Read from a stream (not owned; must outlive this object); `name` labels errors.
    text_lines(std::istream & in, const std::string & name);
    ~text_lines();

    // Next line without its line end, or nullopt at end of file. The view stays valid until
    // the next call.
    std::optional<std::string_view> next();
    // Next line that is not empty or whitespace only (blank lines are skipped everywhere).
    std::optional<std::string_view> next_nonblank();

    long line() const { return line_; }              // 1-based number of the last line returned
    const std::string & name() const { return name_; }

private:
    std::string name_;
    std::unique_ptr<io::LineReader> reader_;
    long line_ = 0;
};

// Split one CSV line into fields (RFC 4180 subset: ',' separated, a field may be wrapped in
// double quotes with "" for a literal quote), trimming spaces and tabs around unquoted
// fields, as Python's csv module plus .strip() in kvoracle/csv2script.py does.
// Errors: input_error(file, line, raw line, why) on an unterminated quote.
std::vector<std::string> split_csv_line(std::string_view raw, const std::string & file, long line);

// Parse a base-10 integer field into int32 (tokens, positions, seq ids).
// Errors: input_error(file, line, text, why) naming `column` when `text` is not an integer
// or does not fit in int32.
int32_t parse_int32_field(const std::string & text, const std::string & file, long line, const std::string & column);

// Parse a decimal floating-point field (seconds). Errors: input_error as parse_int32_field.
double parse_double_field(const std::string & text, const std::string & file, long line, const std::string & column);

// True for a line that holds only spaces, tabs or nothing.
bool is_blank(std::string_view s);

}  // namespace kvsim
