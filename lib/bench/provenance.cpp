#include "bench/provenance.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>

namespace kvsim {

namespace {

// The first line of `cmd`'s standard output without trailing blanks; "" when it cannot run or prints nothing.
std::string first_output_line(const char * cmd) {
    std::unique_ptr<FILE, int (*)(FILE *)> p(popen(cmd, "r"), pclose);
    if (!p) return {};
    std::array<char, 256> buf{};
    if (!fgets(buf.data(), (int) buf.size(), p.get())) return {};
    std::string line = buf.data();
    line.erase(line.find_last_not_of(" \t\r\n") + 1);
    return line;
}

}  // namespace

std::string git_commit_short() {
    const std::string c = first_output_line("git rev-parse --short HEAD 2>/dev/null");
    return c.empty() ? "unknown" : c;
}

std::string utc_now_iso8601() {
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::string host_name() {
    char host[256] = {};
    return gethostname(host, sizeof host - 1) == 0 ? host : "";
}

}  // namespace kvsim
