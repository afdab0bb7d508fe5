// text/utf8.cpp — UTF-8 decoding by the well-formed byte-sequence table (Unicode 15, table 3-7).
#include "text/utf8.h"

namespace tandem::text {

namespace {

// Allowed range of the second byte for a given lead byte; the remaining bytes are 80..BF.
struct lead_info {
    int length;
    uint8_t lo;
    uint8_t hi;
};

lead_info classify_lead(uint8_t b) {
    if (b < 0x80) return {1, 0, 0};
    if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
    if (b == 0xE0) return {3, 0xA0, 0xBF};
    if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
    if (b == 0xED) return {3, 0x80, 0x9F};  // excludes UTF-16 surrogates
    if (b == 0xF0) return {4, 0x90, 0xBF};
    if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
    if (b == 0xF4) return {4, 0x80, 0x8F};  // <= U+10FFFF
    return {0, 0, 0};                       // 80..C1, F5..FF never start a sequence
}

}  // namespace

int utf8_sequence_length(std::string_view s, int64_t i, int* subpart, bool* truncated) {
    const auto n = static_cast<int64_t>(s.size());
    const auto b0 = static_cast<uint8_t>(s[i]);
    lead_info info = classify_lead(b0);
    *truncated = false;
    *subpart = 1;
    if (info.length == 1) return 1;
    if (info.length == 0) return 0;
    for (int k = 1; k < info.length; ++k) {
        if (i + k >= n) {
            *truncated = true;
            *subpart = k;
            return 0;
        }
        const auto b = static_cast<uint8_t>(s[i + k]);
        const uint8_t lo = k == 1 ? info.lo : 0x80;
        const uint8_t hi = k == 1 ? info.hi : 0xBF;
        if (b < lo || b > hi) {
            *subpart = k;  // the valid prefix so far is one maximal subpart
            return 0;
        }
    }
    return info.length;
}

bool utf8_is_valid(std::string_view s) {
    const auto n = static_cast<int64_t>(s.size());
    int64_t i = 0;
    while (i < n) {
        if (static_cast<uint8_t>(s[i]) < 0x80) {
            ++i;
            continue;
        }
        int subpart = 0;
        bool truncated = false;
        int len = utf8_sequence_length(s, i, &subpart, &truncated);
        if (len == 0) return false;
        i += len;
    }
    return true;
}

std::string utf8_sanitize(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    const auto n = static_cast<int64_t>(s.size());
    int64_t i = 0;
    while (i < n) {
        if (static_cast<uint8_t>(s[i]) < 0x80) {
            out.push_back(s[i++]);
            continue;
        }
        int subpart = 0;
        bool truncated = false;
        int len = utf8_sequence_length(s, i, &subpart, &truncated);
        if (len > 0) {
            out.append(s.substr(i, len));
            i += len;
        } else {
            out.append(replacement_char);
            i += subpart;
        }
    }
    return out;
}

int utf8_incomplete_tail(std::string_view s) {
    const auto n = static_cast<int64_t>(s.size());
    for (int back = 1; back <= 3 && back <= n; ++back) {
        const auto b = static_cast<uint8_t>(s[n - back]);
        if (b < 0x80) return 0;
        if (b >= 0xC0) {  // a lead byte: is the rest a valid but truncated prefix?
            int subpart = 0;
            bool truncated = false;
            int len = utf8_sequence_length(s, n - back, &subpart, &truncated);
            return (len == 0 && truncated) ? back : 0;
        }
    }
    return 0;
}

}  // namespace tandem::text
