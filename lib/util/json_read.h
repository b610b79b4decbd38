// Reading fields of a JSON document we wrote (kvbench.json) back without trusting it: each field is named in the
// error, integers must be whole numbers inside the target type's range (nlohmann's get<int>() of 1e308 is an
// out-of-range float-to-int conversion, undefined behaviour), and the offending value is shown.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
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

// Thrown by parse_json_bounded for a document it refuses: nested deeper than its limit (json_too_deep), a key twice
// in one object, a number beyond a double (1e400). line: the text's line (from 1) where the parser stopped, 0 where
// it is not known; what() names the place in the document instead (`[3].avg_ns`: entry 3, key avg_ns).
class json_refused : public std::runtime_error {
public:
    explicit json_refused(const std::string & what, long line_ = 0) : std::runtime_error(what), line(line_) {}
    long line;
};

class json_too_deep : public json_refused {
public:
    using json_refused::json_refused;
};

namespace json_read_detail {
// The parser callback's view of where it is: one frame per open array or object (its element count, or its
// keys so far), so that a repeated key is refused and named by its place.
class json_walk {
public:
    explicit json_walk(int max_depth) : max_depth_(max_depth) {}

    bool operator()(int depth, nlohmann::json::parse_event_t ev, nlohmann::json & parsed) {
        using E = nlohmann::json::parse_event_t;
        if (depth > max_depth_) throw json_too_deep("nested deeper than " + std::to_string(max_depth_) + " levels");
        if (ev == E::object_start || ev == E::array_start) {
            frames_.push_back({ev == E::object_start, 0, {}, {}});
        } else if (ev == E::key) {
            frame & f = frames_.back();
            std::string k = parsed.get<std::string>();
            if (!f.keys.insert(k).second) {
                throw json_refused("key " + cut_text(nlohmann::json(k).dump(), 40) + " appears twice in one object, at " + place(k) +
                                   " (JSON readers differ on which one counts; kvsim refuses)");
            }
            f.key = std::move(k);
        } else {
            if (ev == E::object_end || ev == E::array_end) frames_.pop_back();
            if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;  // an element of an array done
        }
        return true;
    }

private:
    struct frame {
        bool object;
        size_t index;              // array: elements done
        std::string key;           // object: the current key
        std::set<std::string> keys;
    };
    // The path of the open frames, the innermost object's key replaced by `last`.
    std::string place(const std::string & last) const {
        std::string s;
        for (size_t i = 0; i < frames_.size(); ++i) {
            const frame & f = frames_[i];
            // appends, not chained temporaries: GCC 12's -Wrestrict false positive on std::string operator+
            if (!f.object) {
                s += '[';
                s += std::to_string(f.index);
                s += ']';
                continue;
            }
            if (!s.empty()) s += '.';
            // escaped as JSON writes it: a key's control bytes must not reach the terminal
            const std::string k = nlohmann::json(i + 1 == frames_.size() ? last : f.key).dump();
            s += cut_text(k.substr(1, k.size() - 2), 40);
        }
        return s;
    }
    int max_depth_;
    std::vector<frame> frames_;
};

// Accepts everything and keeps where the parser stopped: run over a text whose DOM parse failed without a
// position (nlohmann's out_of_range for 1e400 has none) to name its line.
struct json_stop_locator : nlohmann::json_sax<nlohmann::json> {
    size_t stop = 0;  // bytes read when the parser stopped
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t &) override { return true; }
    bool string(string_t &) override { return true; }
    bool binary(binary_t &) override { return true; }
    bool start_object(std::size_t) override { return true; }
    bool key(string_t &) override { return true; }
    bool end_object() override { return true; }
    bool start_array(std::size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(std::size_t position, const std::string &, const nlohmann::detail::exception &) override {
        stop = position;
        return false;
    }
};
}  // namespace json_read_detail

// nlohmann::json::parse(text), stopped as soon as the parser opens level max_depth + 1 (the parser keeps about
// 75 bytes per open level, so a 64 MiB file of '[' took 5 GB and 40 s before it failed), and refusing a key twice
// in one object (nlohmann keeps the last silently: a llama-bench entry with avg_ns twice fitted the second).
// Throws json_refused (json_too_deep for the depth; the line for a number beyond a double) and nlohmann's
// parse_error (with its line and column) for text that is not JSON.
inline nlohmann::json parse_json_bounded(const std::string & text, int max_depth = 64) {
    try {
        return nlohmann::json::parse(text, json_read_detail::json_walk(max_depth));
    } catch (const nlohmann::json::out_of_range & e) {
        json_read_detail::json_stop_locator where;
        (void) nlohmann::json::sax_parse(text, &where);
        const long line = 1 + (long) std::count(text.begin(), text.begin() + (long) std::min(where.stop, text.size()), '\n');
        const std::string what = e.what();   // "[json.exception.out_of_range.406] number overflow parsing '1e400'"
        const size_t cut = what.find("] ");
        throw json_refused(cut == std::string::npos ? what : what.substr(cut + 2), line);
    }
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
