// A progress bar on stderr for long runs; silent when stderr is not a terminal.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace kvsim {

class progress_bar {
public:
    // enabled: unset = only when stderr is a terminal.
    progress_bar(std::string label, std::optional<bool> enabled);
    // Redraws at most ~10 times a second.
    void update(size_t done, size_t total);
    // Clears the bar line.
    void finish();

private:
    std::string label_;
    bool enabled_;
    bool drawn_ = false;
    std::chrono::steady_clock::time_point last_{};
    std::chrono::steady_clock::time_point start_;
};

}  // namespace kvsim
