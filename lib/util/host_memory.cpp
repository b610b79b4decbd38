#include "util/host_memory.h"

#include <unistd.h>

#include <cstdint>

namespace kvsim {

size_t physical_memory_bytes() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0) return 0;
    size_t r = 0;
    return __builtin_mul_overflow((size_t) pages, (size_t) page, &r) ? SIZE_MAX : r;
}

size_t memory_budget_bytes(size_t phys_bytes) { return phys_bytes / 5 * 4; }

}  // namespace kvsim
