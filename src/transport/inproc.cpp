// transport/inproc.cpp — Two transport endpoints in one process joined by a queue each way.
//
// Why a thread per endpoint rather than direct calls: events must arrive on the transport's own
// thread (as over tcp) so the engines see the same concurrency in every topology, and a slow
// receiver back-pressures only its own queue. Frames travel as objects; the handshake still runs
// so a layout mismatch is refused in-process exactly as across nodes.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "transport/handshake.h"

namespace tandem::transport {

namespace {

constexpr peer_id k_inproc_peer = 1;
constexpr int64_t k_idle_wait_ms = 20;  // bounds how late a handshake deadline is noticed

struct inproc_link {
    std::mutex mu;
    struct side {
        std::deque<frame> inbox;
        std::condition_variable cv;
        bool open = true;
    } sides[2];
};

class inproc_endpoint final : public transport {
public:
    inproc_endpoint(std::shared_ptr<inproc_link> link, int me, handshake_options opt,
                    std::shared_ptr<heartbeat> beat)
        : link_(std::move(link)), me_(me), opt_(std::move(opt)), beat_(std::move(beat)) {}
    ~inproc_endpoint() override { stop(); }

    status start(transport_events events) override {
        if (thread_.joinable()) return make_error(error_code::internal, "inproc: started twice");
        events_ = std::move(events);
        hs_.emplace(opt_, monotonic_ms());
        push_to_peer(handshake_state::hello_frame(opt_));
        thread_ = std::thread([this] { loop(); });
        return status::ok();
    }

    void stop() override {
        if (!thread_.joinable()) return;
        {
            std::lock_guard lock(link_->mu);
            stopping_ = true;
            link_->sides[me_].open = false;
        }
        link_->sides[me_].cv.notify_all();
        link_->sides[1 - me_].cv.notify_all();
        thread_.join();
    }

    status send(peer_id peer, frame f) override {
        if (peer != k_inproc_peer || !ready_.load()) {
            return make_error(error_code::unavailable, "inproc: peer is not connected");
        }
        push_to_peer(std::move(f));
        return status::ok();
    }

    std::vector<peer_id> ready_peers() const override {
        if (ready_.load()) return {k_inproc_peer};
        return {};
    }
    peer_stats stats(peer_id peer) const override {
        if (peer != k_inproc_peer) return {};
        return total_stats();
    }
    peer_stats total_stats() const override {
        std::lock_guard lock(stats_mu_);
        return stats_;
    }

private:
    void push_to_peer(frame f) {
        const int64_t bytes = encoded_frame_bytes(static_cast<int64_t>(f.payload.size()));
        {
            std::lock_guard lock(link_->mu);
            if (!link_->sides[1 - me_].open) return;  // the peer is gone: frames go nowhere
            link_->sides[1 - me_].inbox.push_back(std::move(f));
        }
        link_->sides[1 - me_].cv.notify_one();
        std::lock_guard lock(stats_mu_);
        stats_.frames_sent += 1;
        stats_.bytes_sent += bytes;
    }

    void loop() {
        auto& mine = link_->sides[me_];
        for (;;) {
            std::deque<frame> batch;
            bool peer_open = true;
            {
                std::unique_lock lock(link_->mu);
                mine.cv.wait_for(lock, std::chrono::milliseconds(k_idle_wait_ms), [&] {
                    return stopping_ || !mine.inbox.empty() || !link_->sides[1 - me_].open;
                });
                if (stopping_) break;
                batch.swap(mine.inbox);  // drain everything: one wake-up may cover many frames
                peer_open = link_->sides[1 - me_].open;
            }
            if (beat_) beat_->set_pending(!batch.empty());
            for (frame& f : batch) handle(std::move(f));
            if (!lost_ && !peer_open) {
                lose(make_error(error_code::unavailable, "inproc: the peer endpoint stopped"));
            }
            if (!lost_ && hs_->expired(monotonic_ms())) lose(hs_->deadline_error("inproc peer"));
            if (beat_) {
                beat_->beat();
                beat_->set_pending(false);
            }
        }
        if (beat_) beat_->mark_dead("inproc transport stopped");
    }

    void handle(frame&& f) {
        if (lost_) return;
        const int64_t bytes = encoded_frame_bytes(static_cast<int64_t>(f.payload.size()));
        handshake_state::step s = hs_->on_frame(f);
        if (s.reply) push_to_peer(std::move(*s.reply));
        {
            std::lock_guard lock(stats_mu_);
            stats_.bytes_received += bytes;
            if (s.deliver) stats_.frames_received += 1;
            if (s.dropped) stats_.frames_dropped += 1;
            if (s.became_ready) stats_.connects += 1;
        }
        if (s.dropped) hs_->log_dropped(f, "the inproc peer", drop_log_, monotonic_ms());
        if (!s.failure.is_ok()) {
            lose(s.failure);
            return;
        }
        if (s.became_ready) {
            ready_.store(true);
            if (events_.on_peer_ready) events_.on_peer_ready(k_inproc_peer, "inproc");
        }
        if (s.deliver && events_.on_frame) events_.on_frame(k_inproc_peer, std::move(f));
    }

    // The link is over for good (inproc does not reconnect): close our side so the peer notices.
    void lose(const status& why) {
        lost_ = true;
        ready_.store(false);
        {
            std::lock_guard lock(link_->mu);
            link_->sides[me_].open = false;
        }
        link_->sides[1 - me_].cv.notify_all();
        {
            std::lock_guard lock(stats_mu_);
            stats_.disconnects += 1;
        }
        if (events_.on_peer_lost) events_.on_peer_lost(k_inproc_peer, why);
    }

    std::shared_ptr<inproc_link> link_;
    int me_;
    handshake_options opt_;
    std::shared_ptr<heartbeat> beat_;
    transport_events events_;
    std::optional<handshake_state> hs_;
    std::thread thread_;
    bool stopping_ = false;  // guarded by link_->mu
    bool lost_ = false;      // loop thread only
    std::atomic<bool> ready_{false};
    mutable std::mutex stats_mu_;
    peer_stats stats_;
    log_limiter drop_log_{1000};  // dropped frames: at most one line a second
};

}  // namespace

inproc_pair make_inproc_pair(handshake_options a_opt, handshake_options b_opt,
                             std::shared_ptr<heartbeat> a_beat, std::shared_ptr<heartbeat> b_beat) {
    auto link = std::make_shared<inproc_link>();
    inproc_pair p;
    p.a = std::make_unique<inproc_endpoint>(link, 0, std::move(a_opt), std::move(a_beat));
    p.b = std::make_unique<inproc_endpoint>(link, 1, std::move(b_opt), std::move(b_beat));
    return p;
}

}  // namespace tandem::transport
