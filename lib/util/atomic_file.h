// Output files that appear whole or not at all: write to a temporary name, rename on commit().
#pragma once

#include <fstream>
#include <string>

namespace kvsim {

class atomic_file {
public:
    // Opens PATH.tmp-PID for writing; throws usage_error naming the path if it cannot (a bad
    // output path is the user's to fix: exit status 2).
    explicit atomic_file(std::string path);
    // Removes the temporary file unless commit() succeeded.
    ~atomic_file();
    atomic_file(const atomic_file &) = delete;
    atomic_file & operator=(const atomic_file &) = delete;

    std::ostream & out() { return out_; }
    const std::string & path() const { return path_; }
    // Flush, close and rename onto the final path; throws std::runtime_error on I/O failure.
    void commit();

private:
    std::string path_;
    std::string tmp_;
    std::ofstream out_;
    bool committed_ = false;
};

}  // namespace kvsim
