// The pd request flow over real loopback tcp with the receiver-side helpers: a job's state lands
// verified; a stalled decode reader trips the transfer deadline; an ABORT storm is counted and
// harmless; after an abort, lease expiry and page reuse, the old request's late writes are stale.
// The two "engines" here are test stand-ins working on the transports' threads under a mutex.
#include <doctest/doctest.h>

#include <map>
#include <thread>

#include <fmt/format.h>

#include "topo/pd_transfer.h"
#include "transport/tcp.h"
#include "transport_test_util.h"

using namespace tandem;
using namespace tandem::topo;
using namespace tandem::transport;
using namespace tandem::transport::testing;

namespace {

constexpr int64_t k_tokens_pages = 2;

// Prefill stand-in: runs a job by filling its pool with random bytes, ships it, acks aborts.
struct prefill_stub {
    explicit prefill_stub(const cache::layout_spec& l) : pool(make_pool(l, 8, 4)) {}
    std::mutex mu;
    std::unique_ptr<cache::page_pool> pool;
    std::mt19937_64 rng{11};
    transport::transport* t = nullptr;

    void on_frame(peer_id peer, frame&& f) {
        std::lock_guard lock(mu);
        auto m = decode_message(f.kind, f.payload);
        REQUIRE(m.is_ok());
        if (auto* job = std::get_if<prefill_job_msg>(&*m)) run(peer, *job);
        if (auto* a = std::get_if<abort_msg>(&*m)) (void)t->send(peer, encode_message(abort_ack_msg{a->request_id}));
    }
    void run(peer_id peer, const prefill_job_msg& job) {
        cache::slot_ref s = pool->alloc_sequence(job.request_id);
        REQUIRE(pool->ensure_capacity(s, static_cast<int64_t>(job.token_ids.size())));
        fill_random(*pool, s, rng);
        std::vector<int64_t> pages;
        for (const auto& p : pool->page_table(s)) pages.push_back(p.page);
        auto sent = send_transfer(*pool, pages, s.slot, job, [&](pd_message&& m) {
            return t->send(peer, encode_message(m));
        });
        REQUIRE(sent.is_ok());
        prefill_done_msg done;
        done.request_id = job.request_id;
        done.first_token = 42;
        done.writes_sent = sent->writes;
        done.transfer_checksum = sent->checksum;
        REQUIRE(t->send(peer, encode_message(done)).is_ok());
        pool->free_sequence(s);
    }
};

// Decode stand-in: admits requests, tracks transfers, counts what it had to drop.
struct decode_stub {
    decode_stub(const cache::layout_spec& l, int64_t pages) : pool(make_pool(l, pages, 2)) {}
    std::mutex mu;
    std::unique_ptr<cache::page_pool> pool;
    std::map<uint64_t, transfer_tracker> trackers;
    abort_book book;
    int64_t tokens = 0;
    int64_t stale_rejected = 0, unknown_aborts = 0, completed = 0, acks = 0;

    prefill_job_msg admit(uint64_t id, int64_t deadline_ms) {
        std::lock_guard lock(mu);
        tokens = pool->layout().page_size() * (k_tokens_pages - 1) + 77;
        cache::slot_ref s = pool->alloc_sequence(id);
        REQUIRE(s.valid());
        REQUIRE(pool->ensure_capacity(s, tokens));
        prefill_job_msg job;
        job.request_id = id;
        job.token_ids.assign(static_cast<size_t>(tokens), 1);
        auto table = pool->page_table(s);
        job.pages.assign(table.begin(), table.end());
        job.slot = s;
        job.deadline_ms = deadline_ms;
        trackers.emplace(id, transfer_tracker(*pool, id, job.pages, s, tokens, monotonic_ms() + deadline_ms));
        return job;
    }
    void on_frame(peer_id, frame&& f) {
        std::lock_guard lock(mu);
        auto m = decode_message(f.kind, f.payload);
        REQUIRE(m.is_ok());
        std::visit([&](auto& msg) { handle(msg); }, *m);
    }
    transfer_tracker* find(uint64_t id) {
        auto it = trackers.find(id);
        return it == trackers.end() ? nullptr : &it->second;
    }
    // A write for a request this side no longer tracks still meets the pool's epoch check.
    template <typename W, typename A> void write(const W& w, A apply_untracked) {
        if (transfer_tracker* t = find(w.request_id)) {
            (void)t->apply(*pool, w);
        } else if (apply_untracked(*pool, w).code() == error_code::out_of_range) {
            ++stale_rejected;
        }
    }
    void handle(const page_write_msg& w) { write(w, apply_page_write); }
    void handle(const state_write_msg& w) { write(w, apply_state_write); }
    void handle(const prefill_done_msg& d) {
        if (transfer_tracker* t = find(d.request_id); t && t->finish(d).is_ok()) ++completed;
    }
    void handle(const abort_msg&) { ++unknown_aborts; }
    void handle(const abort_ack_msg& a) { book.on_ack(*pool, a.request_id); ++acks; }
    template <typename T> void handle(const T&) {}
    bool complete(uint64_t id) {
        std::lock_guard lock(mu);
        return find(id) && find(id)->complete();
    }
};

struct pd_over_tcp {
    cache::layout_spec layout = tiny_layout();
    prefill_stub prefill{layout};
    decode_stub decode;
    std::unique_ptr<tcp_transport> server, client;
    event_log ec;

    pd_over_tcp(int64_t decode_pages, fault_options server_faults, fault_options client_faults)
        : decode(layout, decode_pages) {
        tcp_options so;
        so.listen_host = "127.0.0.1";
        so.handshake = pd_handshake(pd_role::prefill, layout);
        so.faults = std::move(server_faults);
        server = tcp_transport::create(std::move(so)).value();
        tcp_options co;
        co.peers = {fmt::format("127.0.0.1:{}", server->bound_port())};
        co.handshake = pd_handshake(pd_role::decode, layout);
        co.faults = std::move(client_faults);
        client = tcp_transport::create(std::move(co)).value();
        prefill.t = server.get();
        transport_events se;
        se.on_frame = [this](peer_id p, frame&& f) { prefill.on_frame(p, std::move(f)); };
        REQUIRE(server->start(se).is_ok());
        transport_events ce = ec.events();
        ce.on_frame = [this](peer_id p, frame&& f) { decode.on_frame(p, std::move(f)); };
        REQUIRE(client->start(ce).is_ok());
        REQUIRE(ec.wait([&] { return ec.ready.size() == 1; }));
    }
    ~pd_over_tcp() {
        client->stop();
        server->stop();
    }
    bool wait_for(const std::function<bool()>& pred, int ms = 5000) {
        const int64_t end = monotonic_ms() + ms;
        while (!pred()) {
            if (monotonic_ms() > end) return false;
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        return true;
    }
};

}  // namespace

TEST_CASE("pd over tcp: a job's state lands verified; an ABORT storm is counted and harmless") {
    fault_options storm;
    storm.abort_storm = 2;
    storm.storm_frame = [](uint64_t n) { return encode_message(abort_msg{1'000'000 + n, abort_cause::client}); };
    pd_over_tcp pd(8, storm, {});
    auto job = pd.decode.admit(1, 5000);
    REQUIRE(pd.client->send(1, encode_message(job)).is_ok());
    REQUIRE(pd.wait_for([&] { return pd.decode.complete(1); }));
    std::lock_guard lock(pd.decode.mu);
    const transfer_tracker& t = pd.decode.trackers.at(1);
    CHECK(t.layers_ready() == static_cast<int64_t>(pd.layout.layers().size()));
    CHECK(t.stats().writes_applied == t.expected_writes());
    // Every protocol frame the prefill side sent (writes + DONE) dragged two storm ABORTs along.
    CHECK(pd.decode.unknown_aborts == 2 * (t.expected_writes() + 1));
}

TEST_CASE("pd over tcp: a stalled decode reader trips the transfer deadline") {
    fault_options stall;
    stall.stall_after_frames = 8;  // the handshake, the job, a few writes
    stall.stall_ms = 1500;
    pd_over_tcp pd(8, {}, stall);
    auto job = pd.decode.admit(1, /*deadline_ms=*/300);
    REQUIRE(pd.client->send(1, encode_message(job)).is_ok());
    REQUIRE(pd.wait_for([&] {
        std::lock_guard lock(pd.decode.mu);
        return pd.decode.trackers.at(1).expired(monotonic_ms());
    }));
    std::lock_guard lock(pd.decode.mu);
    const transfer_tracker& t = pd.decode.trackers.at(1);
    CHECK_FALSE(t.complete());
    CHECK(t.stats().writes_applied < t.expected_writes());
}

TEST_CASE("pd over tcp: after abort, lease expiry and reuse, late writes are stale and rejected") {
    fault_options slow;
    slow.delay_ms = 200;  // the prefill side's writes are still in flight when A is aborted
    pd_over_tcp pd(k_tokens_pages, slow, {});
    auto job_a = pd.decode.admit(1, 5000);
    REQUIRE(pd.client->send(1, encode_message(job_a)).is_ok());
    {
        std::lock_guard lock(pd.decode.mu);
        pd.decode.trackers.erase(1);
        pd.decode.book.begin(*pd.decode.pool, 1, job_a.slot, /*lease_deadline_ns=*/0);
        CHECK(pd.decode.book.expire(*pd.decode.pool, 1) == k_tokens_pages + 1);
    }
    REQUIRE(pd.client->send(1, encode_message(abort_msg{1, abort_cause::client})).is_ok());
    auto job_b = pd.decode.admit(2, 5000);  // the only pages there are: A's, new epochs
    for (size_t i = 0; i < job_b.pages.size(); ++i) CHECK(job_b.pages[i].epoch != job_a.pages[i].epoch);
    REQUIRE(pd.wait_for([&] {
        std::lock_guard lock(pd.decode.mu);
        return pd.decode.acks == 1;  // the ack follows every write of A on the same stream
    }));
    REQUIRE(pd.client->send(1, encode_message(job_b)).is_ok());
    REQUIRE(pd.wait_for([&] { return pd.decode.complete(2); }));
    std::lock_guard lock(pd.decode.mu);
    const int64_t a_writes = pd.decode.trackers.at(2).expected_writes();
    CHECK(pd.decode.stale_rejected == a_writes);  // every late write of A, none applied
    CHECK(pd.decode.pool->stats().stale_writes_rejected == a_writes);
    CHECK(pd.decode.book.unknown_acks() == 1);  // A's ack came after its lease had expired
}
