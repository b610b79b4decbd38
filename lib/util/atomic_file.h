// Output files that appear whole or not at all: write to a temporary name, rename on commit().
//
// What the rename lands on:
// - a regular file, or a path that does not exist yet: PATH itself (temporary PATH.tmp-PID);
// - a symbolic link: the link's final target (temporary file next to the target), so the link
//   stays a link and the file it points to gets the new content;
// - a device, FIFO or socket (/dev/null, /dev/full, a named pipe), or an already open file
//   reached through /proc (/dev/stdout, /dev/fd/N): no rename, the bytes are written directly
//   (renaming onto such a node would replace it with a regular file). Such writes are not atomic.
// - a file of /proc itself (/proc/version, also through a link or /dev/fd/N): refused when opened (usage error).
#pragma once

#include <memory>
#include <ostream>
#include <string>

namespace kvsim {

namespace detail {
class fd_streambuf;
}

class atomic_file {
public:
    // Opens the temporary file (or PATH itself, see above) for writing; throws usage_error naming
    // the path if it cannot (a bad output path is the user's to fix: exit status 2).
    explicit atomic_file(std::string path);
    // The checks of opening PATH, with nothing left behind: a command whose work takes long checks its output first
    // (a temporary file created and removed; a direct target only examined, so a FIFO's reader sees no end).
    // Throws usage_error as the constructor does.
    static void check(const std::string & path);
    // Removes the temporary file unless commit() succeeded.
    ~atomic_file();
    atomic_file(const atomic_file &) = delete;
    atomic_file & operator=(const atomic_file &) = delete;

    std::ostream & out() { return out_; }
    const std::string & path() const { return path_; }
    // True when PATH is written directly (device, FIFO, socket, /proc link), without a rename.
    bool direct() const { return tmp_.empty(); }
    // Flush, close and rename onto the final path; throws std::runtime_error naming the path and
    // the first write error (e.g. "No space left on device") on I/O failure.
    void commit();
    // The first half of commit(): flush and close, throwing like commit() on a write error, but
    // no rename yet. Lets several files be checked before any of them is renamed into place.
    void finish();

private:
    [[noreturn]] void fail(int err);

    std::string path_;     // as given, for messages
    std::string target_;   // where the bytes end up: path_ with symbolic links resolved
    std::string tmp_;      // temporary file next to target_; "" when writing target_ directly
    std::unique_ptr<detail::fd_streambuf> buf_;
    std::ostream out_;
    bool committed_ = false;
    bool finished_ = false;
};

}  // namespace kvsim
