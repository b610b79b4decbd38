// Reading fields of a JSON document we wrote (kvbench.json) back without trusting it: each field is named in the
// error, integers must be whole numbers inside the target type's range (nlohmann's get<int>() of 1e308 is an
// out-of-range float-to-int conversion, undefined behaviour), and the offending value is shown.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace kvsim {

// s cut to at most max_bytes, "..." ending a cut text: a value quoted in an error stays one readable line.
inline std::string cut_text(std::string s, size_t max_bytes = 80) {
    if (s.size() > max_bytes) s = s.substr(0, max_bytes - 3) + "...";
    return s;
}

namespace json_read_detail {
// True when v nests no deeper than `levels` arrays or objects. Stops at that depth, so the recursion is bounded.
inline bool nests_within(const nlohmann::json & v, int levels) {
    if (!v.is_structured()) return true;
    if (levels == 0) return false;
    for (const auto & e : v) {
        if (!nests_within(e, levels - 1)) return false;
    }
    return true;
}
}  // namespace json_read_detail

// v as JSON text for an error message, at most 80 bytes (a longer text is cut, "..." appended). nlohmann's dump()
// recurses once per nesting level, and a line of 100,000 '[' (well inside a trace's 1 MiB line limit) overflows
// the stack there: a value nested deeper than 64 levels is described instead of written out.
inline std::string json_text(const nlohmann::json & v) {
    if (!json_read_detail::nests_within(v, 64)) return v.is_array() ? "[an array nested over 64 levels deep]" : "{an object nested over 64 levels deep}";
    return cut_text(v.dump());
}

// Thrown by parse_json_bounded for a document nested deeper than its limit.
class json_too_deep : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// nlohmann::json::parse(text), stopped as soon as the parser opens level max_depth + 1: the parser keeps about
// 75 bytes per open level, so a 64 MiB file of '[' took 5 GB and 40 s before it failed. Throws json_too_deep
// for that, and what nlohmann::json::parse throws (parse_error, out_of_range for 1e400) otherwise.
inline nlohmann::json parse_json_bounded(const std::string & text, int max_depth = 64) {
    return nlohmann::json::parse(text, [max_depth](int depth, nlohmann::json::parse_event_t, nlohmann::json &) {
        if (depth > max_depth) throw json_too_deep("nested deeper than " + std::to_string(max_depth) + " levels");
        return true;
    });
}

namespace json_read_detail {
[[noreturn]] inline void bad(const std::string & name, const nlohmann::json & v, const char * want) {
    const std::string s = cut_text(json_text(v), 40);
    throw std::runtime_error(name + " is " + s + "; expected " + want);
}
}  // namespace json_read_detail

// j[key]; throws std::runtime_error "<where><key> is missing" when j has no such key (or is not an object).
inline const nlohmann::json & json_field(const nlohmann::json & j, const char * key, const std::string & where) {
    const auto it = j.is_object() ? j.find(key) : j.end();
    if (it == j.end()) throw std::runtime_error(where + key + " is missing");
    return *it;
}

// v as the integer type T; name labels it in the error. Throws std::runtime_error "<name> is <value>; expected
// ..." when v is not a number, not whole or outside T's range.
template <class T>
T json_int_value(const nlohmann::json & v, const std::string & name) {
    static_assert(std::is_integral_v<T>);
    const char * want = std::is_signed_v<T> ? "a whole number in the range of a signed integer" : "a whole number >= 0";
    if (v.is_number_unsigned()) {  // before is_number_integer, which is also true for unsigned values
        const uint64_t u = v.get<uint64_t>();
        if (u > (uint64_t) std::numeric_limits<T>::max()) json_read_detail::bad(name, v, want);
        return (T) u;
    }
    if (v.is_number_integer()) {
        const int64_t s = v.get<int64_t>();
        if (s < (int64_t) std::numeric_limits<T>::min() || (s > 0 && (uint64_t) s > (uint64_t) std::numeric_limits<T>::max())) {
            json_read_detail::bad(name, v, want);
        }
        return (T) s;
    }
    if (v.is_number_float()) {
        const double d = v.get<double>();
        // 2^digits as a double: max() of a 64-bit type rounds up to it, which is itself out of range
        const double hi = std::ldexp(1.0, std::numeric_limits<T>::digits);
        const double lo = std::is_signed_v<T> ? -hi : 0.0;
        if (!(d == std::floor(d) && d >= lo && d < hi)) json_read_detail::bad(name, v, want);
        return (T) d;
    }
    json_read_detail::bad(name, v, want);
}

// j[key] as the integer type T ("<where><key> is missing" when absent).
template <class T>
T json_int(const nlohmann::json & j, const char * key, const std::string & where) {
    return json_int_value<T>(json_field(j, key, where), where + key);
}

// j[key], an array, as integers of type T, each checked as json_int does.
template <class T>
std::vector<T> json_int_array(const nlohmann::json & j, const char * key, const std::string & where) {
    const nlohmann::json & a = json_field(j, key, where);
    if (!a.is_array()) json_read_detail::bad(where + key, a, "an array of whole numbers");
    std::vector<T> r;
    for (size_t i = 0; i < a.size(); ++i) r.push_back(json_int_value<T>(a[i], where + key + "[" + std::to_string(i) + "]"));
    return r;
}

// j[key] as T (double, std::string, bool, ...), naming the field and value when it is missing or of another type.
template <class T>
T json_get(const nlohmann::json & j, const char * key, const std::string & where) {
    const nlohmann::json & v = json_field(j, key, where);
    try {
        return v.get<T>();
    } catch (const nlohmann::json::exception &) {
        json_read_detail::bad(where + key, v,
                              std::is_same_v<T, std::string> ? "a string" : std::is_same_v<T, bool> ? "true or false" : "a number");
    }
}

// A field added after files were first written: json_get, or `absent` when j has no such key (an older file).
// Integer types go through json_int (whole and in range).
template <class T>
T json_get_or(const nlohmann::json & j, const char * key, const std::string & where, T absent) {
    if (!j.contains(key)) return absent;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        return json_int<T>(j, key, where);
    } else {
        return json_get<T>(j, key, where);
    }
}

}  // namespace kvsim
