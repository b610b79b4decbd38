#include "util/progress.h"

#include <cstdio>
#include <unistd.h>

namespace kvsim {

progress_bar::progress_bar(std::string label, std::optional<bool> enabled)
    : label_(std::move(label)), enabled_(enabled.value_or(isatty(STDERR_FILENO) != 0)),
      start_(std::chrono::steady_clock::now()) {}

void progress_bar::update(size_t done, size_t total) {
    if (!enabled_ || total == 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total && drawn_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    drawn_ = true;
    const int width = 30;
    const int fill = (int) (width * done / total);
    const double secs = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% %zu/%zu %.1fs", label_.c_str(), fill, "##############################",
                 width - fill, "", (int) (100 * done / total), done, total, secs);
    std::fflush(stderr);
}

void progress_bar::finish() {
    if (enabled_ && drawn_) {
        std::fprintf(stderr, "\r\033[K");
        std::fflush(stderr);
    }
    drawn_ = false;
}

}  // namespace kvsim
