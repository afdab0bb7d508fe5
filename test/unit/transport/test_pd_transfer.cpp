// Receiver-side verification: a whole prefill→decode transfer lands verified with per-layer
// gates; corrupt, missing, duplicate and stale writes are rejected and never applied; aborted
// pages stay quarantined until ABORT_ACK or lease expiry, and writes after reuse are stale.
#include <doctest/doctest.h>

#include <cstring>

#include <fmt/format.h>

#include "topo/pd_transfer.h"
#include "transport_test_util.h"

using namespace tandem;
using namespace tandem::topo;
using namespace tandem::transport::testing;

namespace {

struct pd_fixture {
    explicit pd_fixture(int64_t decode_pages = 8) : decode(make_pool(layout, decode_pages, 2)) {}
    cache::layout_spec layout = tiny_layout();
    std::unique_ptr<cache::page_pool> prefill = make_pool(layout, 8, 2);
    std::unique_ptr<cache::page_pool> decode;
    std::mt19937_64 rng{7};
    int64_t tokens = layout.page_size() + layout.page_size() / 2 + 5;  // a partial last page
    cache::slot_ref src_slot, dst_slot;
    std::vector<int64_t> src_pages;

    // The decode side admits the request: its slot and destination pages, then the job.
    prefill_job_msg admit(uint64_t id) {
        dst_slot = decode->alloc_sequence(id);
        REQUIRE(dst_slot.valid());
        REQUIRE(decode->ensure_capacity(dst_slot, tokens));
        prefill_job_msg job;
        job.request_id = id;
        job.token_ids.assign(static_cast<size_t>(tokens), 5);
        auto table = decode->page_table(dst_slot);
        job.pages.assign(table.begin(), table.end());
        job.slot = dst_slot;
        job.deadline_ms = 10000;
        return job;
    }
    // The prefill side "ran" the prompt: random bytes in its pages and slot.
    void prefill_ran(uint64_t id) {
        src_slot = prefill->alloc_sequence(id);
        REQUIRE(prefill->ensure_capacity(src_slot, tokens));
        fill_random(*prefill, src_slot, rng);
        src_pages.clear();
        for (const auto& p : prefill->page_table(src_slot)) src_pages.push_back(p.page);
    }
    std::vector<pd_message> writes(const prefill_job_msg& job, sent_transfer* sent) {
        std::vector<pd_message> out;
        auto r = send_transfer(*prefill, src_pages, src_slot.slot, job, [&](pd_message&& m) {
            out.push_back(std::move(m));
            return status::ok();
        });
        REQUIRE_MESSAGE(r.is_ok(), r.error().message());
        *sent = *r;
        return out;
    }
    transfer_tracker tracker(const prefill_job_msg& job) {
        return transfer_tracker(*decode, job.request_id, job.pages, job.slot, tokens, 1000);
    }
};

status apply(transfer_tracker& t, cache::page_pool& pool, const pd_message& m) {
    if (auto* w = std::get_if<page_write_msg>(&m)) return t.apply(pool, *w);
    return t.apply(pool, std::get<state_write_msg>(m));
}

// The first history write (layer 0 may be a sliding layer that only has state).
size_t first_page_write(const std::vector<pd_message>& msgs) {
    for (size_t i = 0; i < msgs.size(); ++i) {
        if (std::holds_alternative<page_write_msg>(msgs[i])) return i;
    }
    FAIL("no page write");
    return 0;
}

prefill_done_msg done_of(uint64_t id, const sent_transfer& s) {
    prefill_done_msg d;
    d.request_id = id;
    d.first_token = 3;
    d.writes_sent = s.writes;
    d.transfer_checksum = s.checksum;
    return d;
}

}  // namespace

TEST_CASE("pd_transfer: a whole transfer lands byte-exact, layer gates open in order") {
    pd_fixture f;
    auto job = f.admit(1);
    f.prefill_ran(101);
    sent_transfer sent;
    auto msgs = f.writes(job, &sent);
    auto t = f.tracker(job);
    REQUIRE(t.expected_writes() == static_cast<int64_t>(msgs.size()));
    const int64_t layers = static_cast<int64_t>(f.layout.layers().size());
    CHECK(t.layers_ready() == 0);
    int64_t last_ready = 0;
    for (const pd_message& m : msgs) {
        REQUIRE(apply(t, *f.decode, m).is_ok());
        CHECK(t.layers_ready() >= last_ready);  // gates only ever open
        last_ready = t.layers_ready();
        CHECK_FALSE(t.complete());
    }
    CHECK(t.layers_ready() == layers);
    REQUIRE(t.finish(done_of(1, sent)).is_ok());
    CHECK(t.complete());
    // Byte-exact: every span's destination equals its source.
    std::vector<cache::page_move> moves;
    for (size_t i = 0; i < 2; ++i) moves.push_back({f.src_pages[i], job.pages[i]});
    auto plan = cache::plan_transfer(f.prefill->geometry(), f.decode->geometry(), moves, f.tokens,
                                     f.src_slot.slot, f.dst_slot);
    auto sums = cache::checksum_spans(plan, f.prefill->arena());
    CHECK(cache::verify_spans(plan, f.decode->arena(), sums).is_ok());
    CHECK(t.stats().writes_applied == static_cast<int64_t>(msgs.size()));
}

TEST_CASE("pd_transfer: streaming complete pages early sends the same writes and checksum") {
    pd_fixture f;  // 1.5 pages + 5 tokens: page 0 complete, page 1 partial
    auto job = f.admit(1);
    f.prefill_ran(101);
    sent_transfer whole;
    auto all_at_once = f.writes(job, &whole);

    transfer_sender sender(job);
    std::vector<pd_message> streamed;
    auto emit = [&](pd_message&& m) { streamed.push_back(std::move(m)); return status::ok(); };
    const int64_t ps = f.layout.page_size();
    // Nothing is final before the first page is wholly computed.
    REQUIRE(sender.send_complete_pages(*f.prefill, f.src_pages, f.src_slot.slot, ps - 1, emit).is_ok());
    CHECK(streamed.empty());
    REQUIRE(sender.send_complete_pages(*f.prefill, f.src_pages, f.src_slot.slot, ps + 3, emit).is_ok());
    const size_t after_first = streamed.size();
    CHECK(after_first > 0);
    for (const pd_message& m : streamed) {
        REQUIRE(std::holds_alternative<page_write_msg>(m));  // no state before the end
        CHECK(std::get<page_write_msg>(m).page == job.pages[0]);
    }
    // Computing the whole prompt does not send the partial last page: only finish() does.
    REQUIRE(sender.send_complete_pages(*f.prefill, f.src_pages, f.src_slot.slot, f.tokens, emit).is_ok());
    CHECK(streamed.size() == after_first);
    CHECK(sender.writes_sent() == static_cast<int64_t>(after_first));
    auto done = sender.finish(*f.prefill, f.src_pages, f.src_slot.slot, emit);
    REQUIRE(done.is_ok());
    CHECK(streamed.size() == all_at_once.size());
    CHECK(done->writes == whole.writes);
    CHECK(done->checksum == whole.checksum);  // plan order, whatever the send order
    auto t = f.tracker(job);
    for (const pd_message& m : streamed) REQUIRE(apply(t, *f.decode, m).is_ok());
    REQUIRE(t.finish(done_of(1, *done)).is_ok());
    CHECK(t.complete());
}

TEST_CASE("pd_transfer: a corrupt write is never applied and fails the request") {
    pd_fixture f;
    auto job = f.admit(1);
    f.prefill_ran(101);
    sent_transfer sent;
    auto msgs = f.writes(job, &sent);
    auto t = f.tracker(job);
    const size_t k = first_page_write(msgs);
    auto& w = std::get<page_write_msg>(msgs[k]);
    w.data[w.data.size() / 2] ^= std::byte{0x40};  // checksum unchanged: corruption in flight
    const int32_t bi = f.layout.buffer_index(w.layer, w.kind);
    std::vector<std::byte> before(f.decode->page_bytes(w.page.page, bi),
                                  f.decode->page_bytes(w.page.page, bi) + w.data.size());
    status st = apply(t, *f.decode, msgs[k]);
    REQUIRE_FALSE(st.is_ok());
    CHECK(st.code() == error_code::data_loss);
    CHECK(st.message().find("checksum mismatch") != std::string::npos);
    CHECK(std::memcmp(before.data(), f.decode->page_bytes(w.page.page, bi), before.size()) == 0);
    CHECK(t.stats().checksum_failures == 1);
    for (size_t i = k + 1; i < msgs.size(); ++i) CHECK_FALSE(apply(t, *f.decode, msgs[i]).is_ok());
    CHECK_FALSE(t.finish(done_of(1, sent)).is_ok());
    CHECK_FALSE(t.complete());
}

TEST_CASE("pd_transfer: missing, duplicate and foreign writes are caught") {
    pd_fixture f;
    auto job = f.admit(1);
    f.prefill_ran(101);
    sent_transfer sent;
    auto msgs = f.writes(job, &sent);
    SUBCASE("a dropped write fails at PREFILL_DONE, naming the counts") {
        auto t = f.tracker(job);
        for (size_t i = 0; i + 1 < msgs.size(); ++i) REQUIRE(apply(t, *f.decode, msgs[i]).is_ok());
        status st = t.finish(done_of(1, sent));
        REQUIRE_FALSE(st.is_ok());
        CHECK(st.message().find(fmt::format("{} arrived verified", msgs.size() - 1)) != std::string::npos);
    }
    SUBCASE("a duplicate write") {
        auto t = f.tracker(job);
        REQUIRE(apply(t, *f.decode, msgs[0]).is_ok());
        CHECK_FALSE(apply(t, *f.decode, msgs[0]).is_ok());
        CHECK(t.stats().unexpected == 1);
    }
    SUBCASE("a write for another request") {
        auto t = f.tracker(job);
        const size_t k = first_page_write(msgs);
        std::get<page_write_msg>(msgs[k]).request_id = 2;
        CHECK_FALSE(apply(t, *f.decode, msgs[k]).is_ok());
    }
    SUBCASE("a wrong whole-transfer checksum") {
        auto t = f.tracker(job);
        for (const auto& m : msgs) REQUIRE(apply(t, *f.decode, m).is_ok());
        sent.checksum ^= 1;
        CHECK_FALSE(t.finish(done_of(1, sent)).is_ok());
    }
}

TEST_CASE("pd_transfer: abort quarantines pages until ABORT_ACK; writes after reuse are stale") {
    pd_fixture f(/*decode_pages=*/2);  // exactly one request's pages: B must reuse A's
    auto job_a = f.admit(1);
    f.prefill_ran(101);
    sent_transfer sent;
    auto late = f.writes(job_a, &sent);  // A's writes, still "in flight" when A is aborted
    abort_book book;
    book.begin(*f.decode, 1, f.dst_slot, /*lease_deadline_ns=*/1'000'000);
    CHECK(book.pending(1));
    CHECK(f.decode->stats().pages_quarantined == 2);
    const int64_t stale0 = f.decode->stats().stale_writes_rejected;
    // A late write into a quarantined page is rejected and counted.
    status st = apply_page_write(*f.decode, std::get<page_write_msg>(late[first_page_write(late)]));
    CHECK(st.code() == error_code::out_of_range);
    CHECK(f.decode->stats().stale_writes_rejected == stale0 + 1);
    CHECK(f.decode->stats().pages_free == 0);  // not reusable while quarantined
    CHECK_FALSE(book.on_ack(*f.decode, 99));  // an ack for nothing is counted, changes nothing
    CHECK(book.unknown_acks() == 1);
    CHECK(f.decode->stats().pages_quarantined == 2);
    REQUIRE(book.on_ack(*f.decode, 1));
    CHECK(f.decode->stats().pages_quarantined == 0);
    CHECK(f.decode->stats().pages_free == 2);
    f.decode->check_integrity();

    // Reuse: B gets the same pages with new epochs; A's old-epoch writes are stale.
    auto job_b = f.admit(2);
    for (const auto& pb : job_b.pages) {
        const auto& pa = job_a.pages[pb.page == job_a.pages[0].page ? 0 : 1];
        CHECK(pb.page == pa.page);
        CHECK(pb.epoch != pa.epoch);
    }
    auto t = f.tracker(job_b);
    int64_t rejected = 0;
    for (const pd_message& m : late) {
        if (auto* w = std::get_if<page_write_msg>(&m)) {
            CHECK(apply_page_write(*f.decode, *w).code() == error_code::out_of_range);
            ++rejected;
        } else {
            CHECK(apply_state_write(*f.decode, std::get<state_write_msg>(m)).code() == error_code::out_of_range);
            ++rejected;
        }
    }
    CHECK(f.decode->stats().stale_writes_rejected == stale0 + 1 + rejected);
    // Through B's tracker, a late A write is refused before it reaches the pool.
    CHECK_FALSE(apply(t, *f.decode, late[0]).is_ok());
    // B's own transfer still lands.
    auto t2 = f.tracker(job_b);
    f.prefill_ran(102);
    auto msgs_b = f.writes(job_b, &sent);
    for (const auto& m : msgs_b) REQUIRE(apply(t2, *f.decode, m).is_ok());
    CHECK(t2.finish(done_of(2, sent)).is_ok());
}

TEST_CASE("pd_transfer: an unacknowledged abort frees its pages at lease expiry") {
    pd_fixture f;
    f.admit(1);
    abort_book book;
    book.begin(*f.decode, 1, f.dst_slot, /*lease_deadline_ns=*/5000);
    CHECK(book.expire(*f.decode, 4999) == 0);
    CHECK(book.pending(1));
    CHECK(book.expire(*f.decode, 5000) == 3);  // 2 pages + the slot
    CHECK_FALSE(book.pending(1));
    CHECK(f.decode->stats().leases_expired == 3);
    CHECK(f.decode->stats().pages_free == 8);
    f.decode->check_integrity();
}
