#include "cpu/cpu_backend.h"

#include <stdexcept>
#include <string>

#include "cpu/fa_amx.h"
#include "cpu/fa_group.h"

namespace kvsim {

cpu_backend::cpu_backend(int n_threads) : pool_(n_threads) {}

void cpu_backend::set_isa(cpu::cpu_isa isa) {
    if (!cpu::cpu_isa_supported(isa)) {
        throw std::invalid_argument(std::string("cpu_backend::set_isa: this CPU (or build) has no ") + cpu::cpu_isa_name(isa));
    }
    isa_ = isa;
}

std::string cpu_backend::path_name() const {
    const bool grouped = fa_grouped_ && cpu::fa_group_supported(isa_, ggml_type::f16, ggml_type::f16, 128, 128);
    const bool amx = grouped && fa_amx_ && isa_ == cpu::cpu_isa::avx512 && cpu::amx_int8_available();
    return std::string(cpu::cpu_isa_name(isa_)) + (amx ? "+amx (q8_0 K)" : "") +
           (grouped ? ", grouped in-place K/V" : ", f32 tile copy");
}

std::unique_ptr<attn_backend> make_cpu_backend(int n_threads) { return std::make_unique<cpu_backend>(n_threads); }

}  // namespace kvsim
