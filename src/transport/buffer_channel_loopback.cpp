// transport/buffer_channel_loopback.cpp — The in-process buffer channel pair (buffer_channel.h):
// host memory stands in for the device, so CI runs pd's nccl wiring end to end.
//
// A send copies the bytes into the link's queue at once (what NCCL reads at some point before the
// receiver's flush; pd keeps the source held either way). A receive is only posted; flush() matches
// the posted receives with queued sends in order, waiting for sends not yet queued up to its
// deadline — NCCL's semantics, including the sticky failure of a size mismatch.
#include "transport/buffer_channel.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace tandem::transport {

namespace {

constexpr peer_id k_peer = 1;

struct loopback_link {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::vector<std::byte>> queue[2];  // queue[i]: sent by side i, received by 1 - i
};

class loopback_endpoint final : public buffer_channel {
public:
    loopback_endpoint(std::shared_ptr<loopback_link> link, int me,
                      std::function<result<uint64_t>(const void*, int64_t)> checksum)
        : link_(std::move(link)), me_(me), checksum_(std::move(checksum)) {}

    status send_buffer(peer_id peer, const void* src, int64_t bytes) override {
        TANDEM_RETURN_IF_ERROR(check(peer, bytes));
        const auto* p = static_cast<const std::byte*>(src);
        {
            std::lock_guard lock(link_->mu);
            link_->queue[me_].emplace_back(p, p + bytes);
        }
        link_->cv.notify_all();
        return status::ok();
    }
    status recv_buffer(peer_id peer, void* dst, int64_t bytes) override {
        TANDEM_RETURN_IF_ERROR(check(peer, bytes));
        posted_.push_back({static_cast<std::byte*>(dst), bytes});
        return status::ok();
    }
    status discard_buffer(peer_id peer, int64_t bytes) override { return recv_buffer(peer, nullptr, bytes); }

    status flush(peer_id peer, int64_t timeout_ms) override {
        TANDEM_RETURN_IF_ERROR(check(peer, 0));
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
        std::unique_lock lock(link_->mu);
        auto& incoming = link_->queue[1 - me_];
        while (!posted_.empty()) {
            if (incoming.empty()) {
                if (link_->cv.wait_until(lock, deadline) == std::cv_status::timeout && incoming.empty()) {
                    return broken(make_error(error_code::deadline_exceeded,
                                             "buffer channel: the peer's buffer did not arrive within " +
                                                 std::to_string(timeout_ms) + " ms"));
                }
                continue;
            }
            const posted p = posted_.front();
            posted_.pop_front();
            std::vector<std::byte> data = std::move(incoming.front());
            incoming.pop_front();
            if (static_cast<int64_t>(data.size()) != p.bytes) {
                return broken(make_error(error_code::data_loss,
                                         "buffer channel: out of step (a " + std::to_string(p.bytes) +
                                             "-byte receive met a " + std::to_string(data.size()) + "-byte send)"));
            }
            if (p.dst != nullptr && p.bytes > 0) std::memcpy(p.dst, data.data(), data.size());
        }
        return status::ok();
    }
    result<uint64_t> checksum_device(const void* ptr, int64_t bytes) override { return checksum_(ptr, bytes); }

private:
    struct posted {
        std::byte* dst = nullptr;  // null: discard
        int64_t bytes = 0;
    };
    status check(peer_id peer, int64_t bytes) const {
        if (!broken_.is_ok()) return broken_;
        if (peer != k_peer || bytes < 0) return make_error(error_code::invalid_argument, "buffer channel: no such peer");
        return status::ok();
    }
    status broken(status why) {
        broken_ = why;
        posted_.clear();
        return why;
    }

    std::shared_ptr<loopback_link> link_;
    int me_;
    std::function<result<uint64_t>(const void*, int64_t)> checksum_;
    std::deque<posted> posted_;  // the receiving thread's (one at a time per peer)
    status broken_;
};

}  // namespace

buffer_channel_pair make_loopback_buffer_channels(std::function<result<uint64_t>(const void*, int64_t)> checksum) {
    auto link = std::make_shared<loopback_link>();
    return {std::make_unique<loopback_endpoint>(link, 0, checksum), std::make_unique<loopback_endpoint>(link, 1, checksum)};
}

}  // namespace tandem::transport
