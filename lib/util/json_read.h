// Reading fields of a JSON document we wrote (kvbench.json) back without trusting it: each field is named in the
// error, integers must be whole numbers inside the target type's range (nlohmann's get<int>() of 1e308 is an
// out-of-range float-to-int conversion, undefined behaviour), and the offending value is shown.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace kvsim {

// s cut to at most max_bytes, "..." ending a cut text: a value quoted in an error stays one readable line. The cut
// backs off to the start of a UTF-8 character (never before a continuation byte 10xxxxxx), so a cut key or
// value is still valid UTF-8 in a terminal and in summary.json.
inline std::string cut_text(std::string s, size_t max_bytes = 80) {
    if (s.size() <= max_bytes) return s;
    size_t n = max_bytes - 3;
    while (n > 0 && ((unsigned char) s[n] & 0xC0) == 0x80) --n;
    return s.substr(0, n) + "...";
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
// in one object, a number beyond a double (1e400). line: the text's line (from 1) where the parser stopped; what()
// names the place of a repeated key in the document too (`[3].avg_ns`: entry 3, key avg_ns).
class json_refused : public std::runtime_error {
public:
    explicit json_refused(const std::string & what, long line_ = 0, std::string value_ = "")
        : std::runtime_error(what), line(line_), value(std::move(value_)) {}
    long line;
    std::string value;   // the repeated key or the number, cut to 40 bytes; "" for the depth and a NUL
};

class json_too_deep : public json_refused {
public:
    using json_refused::json_refused;
};

namespace json_read_detail {
// An iterator over the text that leaves in *seen the last byte the parser read: nlohmann's parser callback and its
// out_of_range (1e400) carry no position, and the line of a refused key or number is what a user needs (a JSONL
// file's line 1 with a key twice named no line).
struct reading_iterator {
    using iterator_category = std::input_iterator_tag;
    using value_type = char;
    using difference_type = std::ptrdiff_t;
    using pointer = const char *;
    using reference = const char &;
    const char * p;
    const char ** seen;
    reference operator*() const {
        *seen = p;
        return *p;
    }
    reading_iterator & operator++() {
        ++p;
        return *this;
    }
    reading_iterator operator++(int) {
        reading_iterator t = *this;
        ++p;
        return t;
    }
    bool operator==(const reading_iterator & o) const { return p == o.p; }
    bool operator!=(const reading_iterator & o) const { return p != o.p; }
};

// The line (from 1) of the byte at `at` in text.
inline long line_at(const std::string & text, const char * at) {
    return 1 + (long) std::count(text.data(), at, '\n');
}

// A SAX handler that builds the document as nlohmann's own DOM parser does, with the checks of
// parse_json_bounded: one frame per open array or object (its element count, or its keys so far), so that a
// repeated key is refused and named by its place, and the depth is bounded as the levels open. Not nlohmann's
// parser callback: its end_object scans the whole parent for a discarded value, so an array of n objects took
// O(n^2) (262,144 `{}` in 105 s).
class bounded_dom {
public:
    using json = nlohmann::json;
    bounded_dom(json & root, int max_depth, const std::string & text, const char * const & seen)
        : root_(root), max_depth_(max_depth), text_(text), seen_(seen) {}

    bool null() { return value(nullptr); }
    bool boolean(bool v) { return value(v); }
    bool number_integer(json::number_integer_t v) { return value(v); }
    bool number_unsigned(json::number_unsigned_t v) { return value(v); }
    bool number_float(json::number_float_t v, const json::string_t &) { return value(v); }
    bool string(json::string_t & v) { return value(std::move(v)); }
    bool binary(json::binary_t & v) { return value(json::binary(std::move(v))); }
    bool start_object(std::size_t) { return open(json::value_t::object); }
    bool start_array(std::size_t) { return open(json::value_t::array); }
    bool end_object() { return close(); }
    bool end_array() { return close(); }

    bool key(json::string_t & k) {
        frame & f = frames_.back();
        if (!f.keys.insert(k).second) {
            throw json_refused("key " + cut_text(json(k).dump(), 40) + " appears twice in one object, at " + place(k) +
                               " (JSON readers differ on which one counts; kvsim refuses)", line_at(text_, seen_), cut_text(k, 40));
        }
        member_ = &(*f.value)[k];
        f.key = std::move(k);
        return true;
    }

    // nlohmann's own exception, its type kept (callers tell parse_error from the rest); a number beyond a double
    // (out_of_range, which has no position of its own) becomes json_refused with its line.
    // The number is cut: nlohmann's message holds all of it (a 2 MB number made a 2 MB error line).
    template <class Exception>
    bool parse_error(std::size_t, const std::string & token, const Exception & e) {
        if constexpr (std::is_same_v<Exception, json::out_of_range>) {
            throw json_refused("number overflow parsing '" + cut_text(token, 40) + "'", line_at(text_, seen_), cut_text(token, 40));
        }
        throw e;
    }

private:
    struct frame {
        json * value;
        size_t index;              // array: elements done
        std::string key;           // object: the current key
        std::set<std::string> keys;
    };

    // v placed where the parser is: the root, the next element of the open array, or the open object's member.
    template <class V>
    json * place_value(V && v) {
        if (frames_.empty()) {
            root_ = json(std::forward<V>(v));
            return &root_;
        }
        frame & f = frames_.back();
        if (f.value->is_array()) {
            f.value->get_ref<json::array_t &>().emplace_back(std::forward<V>(v));
            return &f.value->get_ref<json::array_t &>().back();
        }
        *member_ = json(std::forward<V>(v));
        return member_;
    }
    template <class V>
    bool value(V && v) {
        place_value(std::forward<V>(v));
        element_done();
        return true;
    }
    bool open(json::value_t t) {
        if ((int) frames_.size() >= max_depth_) {
            throw json_too_deep("nested deeper than " + std::to_string(max_depth_) + " levels", line_at(text_, seen_));
        }
        json * v = place_value(t);
        frames_.push_back({v, 0, {}, {}});
        return true;
    }
    bool close() {
        frames_.pop_back();
        element_done();
        return true;
    }
    void element_done() {
        if (!frames_.empty() && frames_.back().value->is_array()) ++frames_.back().index;
    }
    // The path of the open frames, the innermost object's key replaced by `last`.
    std::string place(const std::string & last) const {
        std::string s;
        for (size_t i = 0; i < frames_.size(); ++i) {
            const frame & f = frames_[i];
            // appends, not chained temporaries: GCC 12's -Wrestrict false positive on std::string operator+
            if (f.value->is_array()) {
                s += '[';
                s += std::to_string(f.index);
                s += ']';
                continue;
            }
            if (!s.empty()) s += '.';
            // escaped as JSON writes it: a key's control bytes must not reach the terminal
            const std::string k = json(i + 1 == frames_.size() ? last : f.key).dump();
            s += cut_text(k.substr(1, k.size() - 2), 40);
        }
        return s;
    }
    json & root_;
    int max_depth_;
    const std::string & text_;
    const char * const & seen_;
    json * member_ = nullptr;
    std::vector<frame> frames_;
};
}  // namespace json_read_detail

// nlohmann::json::parse(text), stopped as soon as the parser opens level max_depth + 1 (the parser keeps about
// 75 bytes per open level, so a 64 MiB file of '[' took 5 GB and 40 s before it failed), and refusing a key twice
// in one object (nlohmann keeps the last silently: a llama-bench entry with avg_ns twice fitted the second).
// Throws json_refused (json_too_deep for the depth; a NUL byte too), with the line where the parser stopped, and nlohmann's
// parse_error (with its line and column) for text that is not JSON.
inline nlohmann::json parse_json_bounded(const std::string & text, int max_depth = 64) {
    // nlohmann's lexer reads a NUL byte as the end of the input: a document, a NUL, then anything was accepted
    if (const size_t nul = text.find('\0'); nul != std::string::npos) {
        throw json_refused("a NUL byte (binary data, not JSON text)", json_read_detail::line_at(text, text.data() + nul));
    }
    const char * seen = text.data();
    const json_read_detail::reading_iterator first{text.data(), &seen}, last{text.data() + text.size(), &seen};
    nlohmann::json root;
    json_read_detail::bounded_dom dom(root, max_depth, text, seen);
    nlohmann::json::sax_parse(first, last, &dom);
    return root;
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
