// Large text outputs (CSV rows by the hundred thousand) written through one memory buffer: each
// row is formatted in place with fmt::format_to from a compiled format string, and the stream gets
// blocks of 64 KiB. A std::string per row (fmt::format), a format string parsed per row and a
// stream insert per row cost more than the replay that produced the rows (docs/benchmarks.md,
// "Writing the outputs").
#pragma once

#include <fmt/compile.h>
#include <fmt/format.h>

#include <iterator>
#include <ostream>

namespace kvsim {

class row_writer {
public:
    explicit row_writer(std::ostream & out) : out_(out) {}
    // Hands the rest to the stream; write errors stay in the stream (atomic_file reports them at commit).
    ~row_writer() { flush(); }
    row_writer(const row_writer &) = delete;
    row_writer & operator=(const row_writer &) = delete;

    // Appends fmt::format(f, args...) without a temporary string. f: a format string compiled by
    // FMT_COMPILE("..."), parsed once by the compiler instead of once per row.
    template <typename S, typename... T> void row(const S & f, const T &... args) {
        fmt::format_to(std::back_inserter(buf_), f, args...);
        if (buf_.size() >= k_block) flush();
    }

    void flush() {
        out_.write(buf_.data(), (std::streamsize) buf_.size());
        buf_.clear();
    }

private:
    static constexpr size_t k_block = size_t(1) << 16;
    std::ostream & out_;
    fmt::memory_buffer buf_;
};

}  // namespace kvsim
