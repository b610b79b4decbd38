// Where a kvbench run's numbers come from: the source revision, the time and the host. Never throws.
#pragma once

#include <string>

namespace kvsim {

// `git rev-parse --short HEAD` run in the current directory; "unknown" when it fails (no git, not a checkout).
std::string git_commit_short();
// The current time, ISO 8601 in UTC ("2026-12-02T04:05:06Z").
std::string utc_now_iso8601();
// gethostname(); "" when it fails.
std::string host_name();

}  // namespace kvsim
