#include "common/devices_cli.h"

#include "common/replay_cli.h"
#include "core/errors.h"
#include "time/device_profile.h"

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <nlohmann/json.hpp>

namespace kvsim {

void devices_cli::add_to(CLI::App & cmd) {
    device_opt = cmd.add_option("device", name, "A shipped profile's name or a profile file: print it in full (default: list the shipped ones)");
    cmd.add_flag("--json", json, "Print JSON");
}

namespace {
nlohmann::json listing() {
    nlohmann::json a = nlohmann::json::array();
    for (const auto & n : device_preset_names()) {
        const device_profile d = device_preset(n);
        a.push_back({{"name", n}, {"bandwidth_gbs", d.bandwidth_gbs}, {"peak_tflops", d.peak_tflops}, {"memory_mib", d.memory_mib},
                     {"time_accuracy", time_accuracy_json(d)}});
    }
    return a;
}

void print_listing(std::ostream & term, const nlohmann::json & a) {
    fmt::print(term, "{:16} {:>8} {:>8} {:>8}  source; accuracy of its simulated times\n", "device", "GB/s", "TFLOP/s", "GiB");
    for (const auto & d : a) {
        const auto & t = d["time_accuracy"];
        const double mib = d["memory_mib"].get<double>();   // 0: not known (cpu)
        fmt::print(term, "{:16} {:>8g} {:>8g} {:>8}  {}\n{:45}{}\n", d["name"].get<std::string>(), d["bandwidth_gbs"].get<double>(),
                   d["peak_tflops"].get<double>(), mib > 0 ? fmt::format("{:.1f}", mib / 1024) : "-", t["source"].get<std::string>(), "",
                   t["note"].get<std::string>());
    }
    fmt::print(term, "`kvsim devices NAME` prints one in full (its fitted terms, sources and description); docs/time-model.md\n");
}
}  // namespace

int devices_cli::run(std::ostream & term) const {
    if (device_opt && device_opt->count() > 0 && name.empty()) throw usage_error("kvsim devices: an empty device name");
    if (name.empty()) {
        const auto a = listing();
        if (json) {
            term << a.dump(2) << '\n';
        } else {
            print_listing(term, a);
        }
        return 0;
    }
    const device_profile d = resolve_device(name, 0, "kvsim devices");
    nlohmann::json j = device_profile_json(d);
    const auto names = device_preset_names();
    if (std::find(names.begin(), names.end(), name) != names.end()) j = nlohmann::json::parse(device_preset_json(name));
    if (json) {   // the profile alone, so that it can be saved and given to --device
        term << j.dump(2) << '\n';
        return 0;
    }
    fmt::print(term, "{}: {}\n  time accuracy: {}\n", d.name, d.source, time_accuracy_note(d));
    if (j.contains("description")) fmt::print(term, "  {}\n", j["description"].get<std::string>());
    term << j.dump(2) << '\n';
    return 0;
}

}  // namespace kvsim
