#include "util/atomic_file.h"

#include "core/errors.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <stdexcept>
#include <streambuf>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

namespace kvsim {

namespace detail {

// A write-only streambuf over a file descriptor that keeps the errno of the first failed write:
// std::ofstream only sets badbit, and by the time commit() looks, errno may describe something
// else, so "No space left on device" (/dev/full, a full disk) would be lost.
class fd_streambuf : public std::streambuf {
public:
    explicit fd_streambuf(int fd) : fd_(fd) { setp(buf_, buf_ + sizeof buf_); }
    ~fd_streambuf() override { close_fd(); }

    // Write what is buffered and close; returns 0 or the errno of the first failure.
    int finish() {
        flush_buffer();
        close_fd();
        return err_;
    }

protected:
    int_type overflow(int_type c) override {
        if (!flush_buffer()) return traits_type::eof();
        if (!traits_type::eq_int_type(c, traits_type::eof())) {
            *pptr() = traits_type::to_char_type(c);
            pbump(1);
        }
        return traits_type::not_eof(c);
    }
    int sync() override { return flush_buffer() ? 0 : -1; }

private:
    bool flush_buffer() {
        const char * p = pbase();
        while (p < pptr() && err_ == 0) {
            const ssize_t n = ::write(fd_, p, (size_t) (pptr() - p));
            if (n < 0 && errno == EINTR) continue;   // Ctrl-C handler installed without SA_RESTART
            if (n <= 0) err_ = n < 0 ? errno : EIO;
            else p += n;
        }
        setp(buf_, buf_ + sizeof buf_);
        return err_ == 0;
    }
    void close_fd() {
        if (fd_ < 0) return;
        if (::close(fd_) != 0 && err_ == 0) err_ = errno;   // NFS and friends report late errors here
        fd_ = -1;
    }

    int fd_;
    int err_ = 0;
    char buf_[1 << 16];
};

}  // namespace detail

namespace {

namespace fs = std::filesystem;

constexpr long k_proc_super_magic = 0x9fa0;   // linux/magic.h PROC_SUPER_MAGIC: the file system of /proc

struct write_plan {
    std::string target;   // the file the bytes go to
    bool direct;          // write target in place instead of temp + rename
};

// True for a name inside /proc, however it is spelled (relative, through /dev/fd -> /proc/self/fd).
bool under_proc(const fs::path & p) {
    std::error_code ec;
    const fs::path dir = fs::weakly_canonical(fs::absolute(p, ec).parent_path(), ec);
    return (dir.string() + "/").rfind("/proc/", 0) == 0;
}

// Follows PATH's symbolic links to the name they end at (which need not exist yet). Stops at a
// link into /proc: /dev/stdout -> /proc/self/fd/1 names a file the shell already opened (a pipe, a
// terminal, a file opened by `>`), which the kernel only reaches by opening the name itself.
fs::path resolve_links(const std::string & path, bool & via_proc) {
    fs::path p = path;
    for (int hops = 0;; ++hops) {
        if (under_proc(p)) {
            via_proc = true;
            break;
        }
        std::error_code ec;
        if (!fs::is_symlink(fs::symlink_status(p, ec))) break;
        if (hops == 40) throw usage_error("cannot write " + path + ": too many levels of symbolic links");
        const fs::path next = fs::read_symlink(p, ec);
        if (ec) throw usage_error("cannot write " + path + ": " + ec.message());
        p = next.is_absolute() ? next : p.parent_path() / next;
    }
    return p;
}

write_plan plan_write(const std::string & path) {
    bool via_proc = false;
    const fs::path p = resolve_links(path, via_proc);
    if (via_proc) return {p.string(), true};
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0) {
        if (S_ISDIR(st.st_mode)) throw usage_error("cannot write " + path + ": is a directory");
        if (!S_ISREG(st.st_mode)) return {p.string(), true};   // device, FIFO, socket
    }
    return {p.string(), false};
}

// The temporary name beside target: NAME.tmp-PID, or .kvsim.tmp-PID-N (N counts this process's such names: several
// outputs of one run share the folder) when NAME.tmp-PID would pass the 255-byte limit on a name.
std::string tmp_name(const std::string & target) {
    static std::atomic<unsigned> n_short{0};
    const std::string suffix = ".tmp-" + std::to_string(getpid());
    const fs::path t = target;
    if (t.filename().string().size() + suffix.size() <= 255) return target + suffix;
    return (t.parent_path() / (".kvsim" + suffix + "-" + std::to_string(n_short++))).string();
}

// The descriptor N of /proc/self/fd/N (or /proc/PID/fd/N of this process) when it is open for writing, else -1:
// `-o /dev/stdout > file` wrote through a new descriptor at offset 0, and the report on standard output then
// overwrote the profile; a duplicate shares the shell's file offset.
int inherited_fd(const std::string & path) {
    std::error_code ec;
    const fs::path p = path;
    const std::string dir = fs::weakly_canonical(fs::absolute(p, ec).parent_path(), ec).string();
    if (ec || dir != "/proc/" + std::to_string(getpid()) + "/fd") return -1;
    const std::string name = p.filename().string();
    if (name.empty() || name.size() > 9 || name.find_first_not_of("0123456789") != std::string::npos) return -1;
    const int n = std::stoi(name);
    const int fl = ::fcntl(n, F_GETFL);
    if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY) return -1;
    return ::fcntl(n, F_DUPFD_CLOEXEC, 0);
}

// Refuses a file on /proc's own file system (statfs of the name, or fstatfs of an open descriptor, succeeded into
// fs_info): a kernel file (/proc/version, or one reached by a link or an inherited descriptor) opens for writing as
// root and fails only at the first write, after all the work.
void refuse_proc(bool got, const struct statfs & fs_info, const std::string & path) {
    if (got && fs_info.f_type == k_proc_super_magic) throw usage_error("cannot write " + path + ": a /proc file, not an output");
}

}  // namespace

void atomic_file::check(const std::string & path) {
    const write_plan w = plan_write(path);
    if (w.direct) {
        // not opened: a FIFO's reader would see the end of the file; stat and statfs follow /dev/fd/N to the open file
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0) throw usage_error("cannot write " + path + ": " + std::strerror(errno));
        if (S_ISDIR(st.st_mode)) throw usage_error("cannot write " + path + ": is a directory");
        struct statfs fs_info {};
        refuse_proc(::statfs(path.c_str(), &fs_info) == 0, fs_info, path);
        return;
    }
    if (fs::path(w.target).filename().string().size() > 255) throw usage_error("cannot write " + path + ": " + std::strerror(ENAMETOOLONG));
    const std::string tmp = tmp_name(w.target);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CLOEXEC | O_CREAT | O_TRUNC, 0666);
    if (fd < 0) throw usage_error("cannot write " + path + ": " + std::strerror(errno));
    ::close(fd);
    std::remove(tmp.c_str());
}

atomic_file::atomic_file(std::string path) : path_(std::move(path)), out_(nullptr) {
    const write_plan w = plan_write(path_);
    target_ = w.target;
    if (!w.direct) tmp_ = tmp_name(target_);
    // Direct writes append: a FIFO or device ignores it, and a file reached through /dev/stdout
    // (`>>` in the shell) keeps what is already there instead of being overwritten from byte 0.
    const int flags = O_WRONLY | O_CLOEXEC | (w.direct ? O_APPEND : O_CREAT | O_TRUNC);
    int fd = w.direct ? inherited_fd(target_) : -1;
    if (fd < 0) fd = ::open(w.direct ? target_.c_str() : tmp_.c_str(), flags, 0666);
    if (fd < 0) throw usage_error("cannot write " + path_ + ": " + std::strerror(errno));
    buf_ = std::make_unique<detail::fd_streambuf>(fd);   // owns fd from here: a refusal below closes it
    struct statfs fs_info {};
    refuse_proc(::fstatfs(fd, &fs_info) == 0, fs_info, path_);
    out_.rdbuf(buf_.get());
}

atomic_file::~atomic_file() {
    out_.rdbuf(nullptr);
    buf_.reset();   // closes the descriptor without writing what is still buffered
    if (!committed_ && !tmp_.empty()) std::remove(tmp_.c_str());
}

void atomic_file::fail(int err) {
    if (!tmp_.empty()) std::remove(tmp_.c_str());
    throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(err));
}

void atomic_file::finish() {
    if (finished_) return;
    out_.flush();
    const int err = buf_->finish();
    if (err != 0) fail(err);
    finished_ = true;
}

void atomic_file::commit() {
    finish();
    if (!tmp_.empty() && std::rename(tmp_.c_str(), target_.c_str()) != 0) fail(errno);
    committed_ = true;
}

}  // namespace kvsim
