#include "util/atomic_file.h"

#include "util/errors.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <unistd.h>

namespace kvsim {

atomic_file::atomic_file(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp-" + std::to_string(getpid())) {
    out_.open(tmp_, std::ios::binary | std::ios::trunc);
    if (!out_) {
        throw usage_error("cannot write " + path_ + ": " + std::strerror(errno));
    }
}

atomic_file::~atomic_file() {
    if (!committed_) {
        out_.close();
        std::remove(tmp_.c_str());
    }
}

void atomic_file::commit() {
    out_.flush();
    const bool ok = static_cast<bool>(out_);
    out_.close();
    if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
        std::remove(tmp_.c_str());
        throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(errno));
    }
    committed_ = true;
}

}  // namespace kvsim
