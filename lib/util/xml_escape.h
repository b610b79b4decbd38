// Text from a run (names, CPU model, trace fields) inside HTML or SVG markup: & < > " escaped.
#pragma once

#include <string>

namespace kvsim {

inline std::string xml_escape(const std::string & s) {
    std::string o;
    o.reserve(s.size());
    for (char c : s) {
        switch (c) {
            case '&': o += "&amp;"; break;
            case '<': o += "&lt;"; break;
            case '>': o += "&gt;"; break;
            case '"': o += "&quot;"; break;
            default: o += c;
        }
    }
    return o;
}

}  // namespace kvsim
