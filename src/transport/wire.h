// transport/wire.h — Little-endian field writer and a bounds-checked reader for frame payloads.
//
// Why a sticky-failure reader: payloads come from peers (design invariant 5), so every read is
// checked against the remaining bytes and the first short read poisons the reader. Decoders read
// every field, then ask ok() once, instead of checking after each field; a poisoned reader
// returns zeros and never touches memory past the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace tandem::transport {

class wire_writer {
public:
    explicit wire_writer(std::vector<std::byte>& out) : out_(out) {}
    void u8(uint8_t v) { put(&v, 1); }
    void u16(uint16_t v) { put_le(v, 2); }
    void u32(uint32_t v) { put_le(v, 4); }
    void u64(uint64_t v) { put_le(v, 8); }
    void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
    void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
    void f32(float v) { uint32_t b; std::memcpy(&b, &v, 4); u32(b); }
    void f64(double v) { uint64_t b; std::memcpy(&b, &v, 8); u64(b); }
    void bytes(std::span<const std::byte> b) { u32(static_cast<uint32_t>(b.size())); put(b.data(), b.size()); }
    void str(const std::string& s) { bytes(std::as_bytes(std::span(s.data(), s.size()))); }

private:
    void put(const void* p, size_t n) {
        const auto* b = static_cast<const std::byte*>(p);
        out_.insert(out_.end(), b, b + n);
    }
    void put_le(uint64_t v, int n) {
        std::byte b[8];
        for (int i = 0; i < n; ++i) b[i] = static_cast<std::byte>(v >> (8 * i));
        put(b, static_cast<size_t>(n));
    }
    std::vector<std::byte>& out_;
};

class wire_reader {
public:
    explicit wire_reader(std::span<const std::byte> in) : in_(in) {}
    bool ok() const { return ok_; }
    bool at_end() const { return ok_ && pos_ == in_.size(); }
    size_t remaining() const { return ok_ ? in_.size() - pos_ : 0; }
    void fail() { ok_ = false; }

    uint8_t u8() { return static_cast<uint8_t>(get_le(1)); }
    uint16_t u16() { return static_cast<uint16_t>(get_le(2)); }
    uint32_t u32() { return static_cast<uint32_t>(get_le(4)); }
    uint64_t u64() { return get_le(8); }
    int32_t i32() { return static_cast<int32_t>(u32()); }
    int64_t i64() { return static_cast<int64_t>(u64()); }
    float f32() { uint32_t b = u32(); float v; std::memcpy(&v, &b, 4); return v; }
    double f64() { uint64_t b = u64(); double v; std::memcpy(&v, &b, 8); return v; }

    // A length-prefixed byte run; refuses lengths over `max` or past the end (no allocation).
    std::span<const std::byte> bytes(size_t max) {
        const uint32_t n = u32();
        if (!ok_ || n > max || n > in_.size() - pos_) { ok_ = false; return {}; }
        auto out = in_.subspan(pos_, n);
        pos_ += n;
        return out;
    }
    std::string str(size_t max) {
        auto b = bytes(max);
        return std::string(reinterpret_cast<const char*>(b.data()), b.size());
    }
    // A count of elements of `elem_bytes` each: refused when they cannot all fit in what is left,
    // so a hostile count never drives a huge allocation.
    uint32_t count(size_t elem_bytes, size_t max) {
        const uint32_t n = u32();
        if (!ok_ || n > max || static_cast<uint64_t>(n) * elem_bytes > in_.size() - pos_) {
            ok_ = false;
            return 0;
        }
        return n;
    }

private:
    uint64_t get_le(size_t n) {
        if (!ok_ || in_.size() - pos_ < n) { ok_ = false; return 0; }
        uint64_t v = 0;
        for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(in_[pos_ + i]) << (8 * i);
        pos_ += n;
        return v;
    }
    std::span<const std::byte> in_;
    size_t pos_ = 0;
    bool ok_ = true;
};

}  // namespace tandem::transport
