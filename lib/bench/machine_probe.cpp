#include "bench/machine_probe.h"

#include "bench/provenance.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>
#include <vector>

namespace kvsim {

namespace {

std::string trim(const std::string & s) {
    const auto b = s.find_first_not_of(" \t");
    const auto e = s.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// The value of the first "key ...: value" line of a /proc text file, trimmed; "" when absent.
std::string field_after_colon(const std::string & path, const std::string & key) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(key, 0) == 0) {
            const auto c = line.find(':');
            if (c != std::string::npos) return trim(line.substr(c + 1));
        }
    }
    return {};
}

std::string find_gpu() {
    std::error_code ec;
    const std::filesystem::path dir = "/proc/driver/nvidia/gpus";
    if (!std::filesystem::is_directory(dir, ec)) return {};
    for (const auto & e : std::filesystem::directory_iterator(dir, ec)) {
        const std::string m = field_after_colon((e.path() / "information").string(), "Model");
        if (!m.empty()) return m;
    }
    return {};
}

// Each data or unified cache of cpu0 as (level, bytes), from /sys/devices/system/cpu/cpu0/cache/index*/ (sizes like
// "2048K" or "300M"); unreadable entries are left out.
std::vector<std::pair<int, size_t>> cpu0_caches() {
    std::vector<std::pair<int, size_t>> out;
    for (int i = 0; i < 16; ++i) {
        const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
        std::ifstream lf(dir + "level"), sf(dir + "size"), tf(dir + "type");
        int level = 0;
        std::string size, type;
        if (!(lf >> level) || !(sf >> size) || size.empty()) continue;
        if (tf >> type && type == "Instruction") continue;
        size_t mult = 1;
        if (size.back() == 'K') mult = (size_t) 1 << 10;
        if (size.back() == 'M') mult = (size_t) 1 << 20;
        if (size.back() == 'G') mult = (size_t) 1 << 30;
        if (mult != 1) size.pop_back();
        out.emplace_back(level, (size_t) std::strtoull(size.c_str(), nullptr, 10) * mult);
    }
    return out;
}

}  // namespace

size_t last_level_cache_bytes() {
    std::pair<int, size_t> best{0, 0};
    for (const auto & c : cpu0_caches()) best = std::max(best, c);
    return best.second;
}

size_t cpu_cache_bytes(int level) {
    size_t bytes = 0;
    for (const auto & c : cpu0_caches()) {
        if (c.first == level) bytes = std::max(bytes, c.second);
    }
    return bytes;
}

machine_info collect_machine_info(const std::string & build_type) {
    machine_info m;
    m.cpu_model = field_after_colon("/proc/cpuinfo", "model name");
    m.cores = (int) std::thread::hardware_concurrency();
    m.gpu = find_gpu();
    m.build_type = build_type;
    m.git_commit = git_commit_short();
    m.date = utc_now_iso8601();
    m.host = host_name();
    return m;
}

}  // namespace kvsim
