// bench_pd_transfer — pd state-transfer throughput through the real tcp transport on loopback,
// against a raw loopback TCP stream measured in the same run.
//
// Transfer path (both sides in this process, each with its own tcp_transport and loop thread):
// the decode side admits a sequence in its page pool and sends PREFILL_JOB; the prefill side
// (a worker thread, as an engine would) ships a prefilled sequence of the same layout with
// topo::send_transfer — one PAGE_WRITE per (page, layer, buffer kind), one STATE_WRITE per
// (layer, state kind), each XXH3-checksummed, then PREFILL_DONE; the decode side's pd_endpoint
// handlers decode every frame and apply it through a transfer_tracker (checksum verified, copied
// into the pool), and a job counts once PREFILL_DONE matched. Up to --window jobs are in flight.
// With --message-bytes N the prefill side instead sends synthetic PAGE_WRITEs of N bytes, each
// verified on receipt (isolates the per-message cost from the layout's message sizes).
//
// Baseline: one plain POSIX TCP connection on loopback, the same total bytes written in chunks
// of the transfer's mean message size, the receiver reading everything. Reported: bytes, seconds,
// GB/s of both (best of --rounds alternating rounds) and the ratio transfer / raw, so the figure
// depends less on the machine. Data bytes only: frame and message headers are not counted.
//
//   build/bench/pd/bench_pd_transfer [--mib 1024] [--page-size 256] [--tokens 4096]
//                                    [--window 2] [--message-bytes 0] [--rounds 3]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <xxhash.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cache/layout.h"
#include "cache/page_pool.h"
#include "cache/plan_command.h"
#include "core/config.h"
#include "model/make_model.h"
#include "topo/pd_endpoint.h"
#include "topo/pd_transfer.h"
#include "transport/tcp.h"

using namespace tandem;
using clock_type = std::chrono::steady_clock;

namespace {

struct args {
    int64_t mib = 1024;
    int64_t page_size = 256;
    int64_t tokens = 4096;
    int64_t window = 2;
    int64_t message_bytes = 0;  // 0: the layout's real writes
    int64_t rounds = 3;
};

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "bench_pd_transfer: %s\n", what.c_str());
    std::exit(1);
}
template <typename T> T must(result<T> r, const char* what) {
    if (!r) die(fmt::format("{}: {}", what, r.error().message()));
    return std::move(r).value();
}
void must(const status& st, const char* what) {
    if (!st.is_ok()) die(fmt::format("{}: {}", what, st.message()));
}
double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

std::unique_ptr<cache::page_pool> make_pool(const cache::layout_spec& l, int64_t pages, int64_t slots) {
    const int64_t bytes = cache::pool_geometry(l, pages, slots).total_bytes() +
                          cache::pool_geometry::k_region_alignment * int64_t(l.buffers().size() + 1);
    return must(cache::page_pool::create(l, {bytes, slots}), "page pool");
}

void fill_random(cache::page_pool& pool, cache::slot_ref s) {
    std::mt19937_64 rng(7);
    const cache::layout_spec& l = pool.layout();
    for (const cache::page_ref& p : pool.page_table(s)) {
        for (int32_t bi = 0; bi < static_cast<int32_t>(l.buffers().size()); ++bi) {
            auto* dst = reinterpret_cast<uint64_t*>(pool.page_bytes_for_write(p, bi));
            for (int64_t i = 0; i < l.buffers()[bi].bytes_per_page / 8; ++i) dst[i] = rng();
        }
    }
    auto* slot = reinterpret_cast<uint64_t*>(pool.slot_bytes_for_write(s));
    for (int64_t i = 0; i < l.state_bytes_per_sequence() / 8; ++i) slot[i] = rng();
}

// Decode side: trackers per in-flight request, driven by the pd_endpoint handlers.
struct decode_side {
    std::unique_ptr<cache::page_pool> pool;
    std::vector<cache::slot_ref> slots;
    std::mutex mu;
    std::condition_variable cv;
    // In flight; no tracker in synthetic mode (its writes are only checksum-verified).
    std::map<uint64_t, std::optional<topo::transfer_tracker>> trackers;
    int64_t completed = 0, failed = 0, bytes = 0, messages = 0, synthetic_bad = 0;

    template <typename W> void on_write(const W& w) {
        std::lock_guard lock(mu);
        ++messages;
        bytes += static_cast<int64_t>(w.data.size());
        auto it = trackers.find(w.request_id);
        if (it != trackers.end() && it->second) {
            (void)it->second->apply(*pool, w);  // a failure is kept and reported by finish()
        } else if (XXH3_64bits(w.data.data(), w.data.size()) != w.checksum) {
            ++synthetic_bad;
        }
    }
    void on_done(const topo::prefill_done_msg& d) {
        {
            std::lock_guard lock(mu);
            auto it = trackers.find(d.request_id);
            if (it == trackers.end()) {
                ++failed;
            } else {
                if (!it->second || it->second->finish(d).is_ok()) ++completed; else ++failed;
                trackers.erase(it);
            }
        }
        cv.notify_all();
    }
};

// Prefill side: jobs arrive on the transport thread, a worker runs them.
struct prefill_side {
    std::unique_ptr<cache::page_pool> pool;
    cache::slot_ref seq;
    std::vector<int64_t> pages;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<transport::peer_id, topo::prefill_job_msg>> jobs;
    bool stopping = false;
};

struct transfer_result {
    int64_t bytes = 0, messages = 0, jobs = 0;
    double seconds = 0;
};

struct pd_pair {
    topo::pd_endpoint prefill_ep, decode_ep;
    std::unique_ptr<transport::tcp_transport> server, client;
    transport::peer_id to_prefill = 0;
    std::mutex ready_mu;
    std::condition_variable ready_cv;

    explicit pd_pair(const cache::layout_spec& l)
        : prefill_ep(topo::pd_role::prefill, l), decode_ep(topo::pd_role::decode, l) {}
};

// Both transports from the shipped [transport] defaults (tcp_options_from_config).
void connect(pd_pair& pd, decode_side& dec, prefill_side& pre, topo::pd_handlers& ph,
             topo::pd_handlers& dh) {
    transport_section t = must(load_config({}), "config").transport;
    t.listen_host = "127.0.0.1";
    t.listen_port = 0;
    pd.server = must(transport::tcp_transport::create(transport::tcp_options_from_config(
                         t, true, pd.prefill_ep.handshake(t.handshake_timeout_ms))),
                     "prefill transport");
    t.peers = {fmt::format("127.0.0.1:{}", pd.server->bound_port())};
    pd.client = must(transport::tcp_transport::create(transport::tcp_options_from_config(
                         t, false, pd.decode_ep.handshake(t.handshake_timeout_ms))),
                     "decode transport");
    ph.on_job = [&pre](transport::peer_id p, topo::prefill_job_msg&& job) {
        { std::lock_guard lock(pre.mu); pre.jobs.emplace_back(p, std::move(job)); }
        pre.cv.notify_one();
    };
    dh.on_peer_ready = [&pd](transport::peer_id p, const std::string&) {
        { std::lock_guard lock(pd.ready_mu); pd.to_prefill = p; }
        pd.ready_cv.notify_all();
    };
    dh.on_page_write = [&dec](transport::peer_id, topo::page_write_msg&& w) { dec.on_write(w); };
    dh.on_state_write = [&dec](transport::peer_id, topo::state_write_msg&& w) { dec.on_write(w); };
    dh.on_done = [&dec](transport::peer_id, topo::prefill_done_msg&& d) { dec.on_done(d); };
    must(pd.server->start(pd.prefill_ep.events(ph)), "prefill start");
    must(pd.client->start(pd.decode_ep.events(dh)), "decode start");
    std::unique_lock lock(pd.ready_mu);
    if (!pd.ready_cv.wait_for(lock, std::chrono::seconds(10), [&] { return pd.to_prefill != 0; })) {
        die("handshake did not complete");
    }
}

// Synthetic mode: as many --message-bytes writes as the job's history bytes need (at least one).
int64_t synthetic_messages_per_job(const cache::layout_spec& l, const args& a) {
    const int64_t history = a.tokens * l.page_group_bytes() / a.page_size;
    return std::max<int64_t>(1, (history + a.message_bytes - 1) / a.message_bytes);
}

// The prefill worker: real send_transfer, or synthetic PAGE_WRITEs of a fixed size.
void prefill_worker(prefill_side& pre, pd_pair& pd, const args& a) {
    std::vector<std::byte> synthetic(static_cast<size_t>(a.message_bytes));
    std::mt19937_64 rng(3);
    for (auto& b : synthetic) b = std::byte(rng());
    for (;;) {
        std::unique_lock lock(pre.mu);
        pre.cv.wait(lock, [&] { return pre.stopping || !pre.jobs.empty(); });
        if (pre.jobs.empty()) return;
        auto [peer, job] = std::move(pre.jobs.front());
        pre.jobs.pop_front();
        lock.unlock();
        auto emit = [&](topo::pd_message&& m) { return pd.prefill_ep.send(*pd.server, peer, m); };
        topo::prefill_done_msg done;
        done.request_id = job.request_id;
        if (a.message_bytes > 0) {
            const int64_t n = synthetic_messages_per_job(pre.pool->layout(), a);
            for (int64_t i = 0; i < n; ++i) {
                topo::page_write_msg w;
                w.request_id = job.request_id;
                w.page = job.pages.front();
                w.data = synthetic;
                w.checksum = XXH3_64bits(w.data.data(), w.data.size());
                must(emit(std::move(w)), "send");
            }
        } else {
            auto sent = must(topo::send_transfer(*pre.pool, pre.pages, pre.seq.slot, job, emit),
                             "send_transfer");
            done.writes_sent = sent.writes;
            done.transfer_checksum = sent.checksum;
        }
        must(emit(std::move(done)), "send done");
    }
}

// Waits for a free place in the window, tracks request `id` into slot `s`, sends its job. Jobs
// finish in order (one prefill worker), so slot j % window is free again by the time j reuses it.
void admit_and_send(decode_side& dec, pd_pair& pd, const args& a, uint64_t id, cache::slot_ref s) {
    topo::prefill_job_msg job;
    job.request_id = id;
    job.token_ids.assign(static_cast<size_t>(a.tokens), 1);
    auto table = dec.pool->page_table(s);
    job.pages.assign(table.begin(), table.end());
    job.slot = s;
    job.deadline_ms = 60'000;
    {
        std::unique_lock lock(dec.mu);
        dec.cv.wait(lock, [&] { return static_cast<int64_t>(dec.trackers.size()) < a.window; });
        auto& tracker = dec.trackers[id];
        // The tracker's own deadline is not polled here (the bench gives up after 120 s instead).
        constexpr int64_t k_never = std::numeric_limits<int64_t>::max();
        if (a.message_bytes == 0) tracker.emplace(*dec.pool, id, job.pages, s, a.tokens, k_never);
    }
    must(pd.decode_ep.send(*pd.client, pd.to_prefill, job), "send job");
}

transfer_result run_transfer(const cache::layout_spec& layout, const args& a) {
    const int64_t pages_per_seq = (a.tokens + a.page_size - 1) / a.page_size;
    decode_side dec;
    dec.pool = make_pool(layout, pages_per_seq * a.window, a.window);
    for (int64_t i = 0; i < a.window; ++i) {
        cache::slot_ref s = dec.pool->alloc_sequence(static_cast<uint64_t>(i + 1));
        if (!s.valid() || !dec.pool->ensure_capacity(s, a.tokens)) die("decode pool too small");
        dec.slots.push_back(s);
    }
    prefill_side pre;
    pre.pool = make_pool(layout, pages_per_seq, 1);
    pre.seq = pre.pool->alloc_sequence(1);
    if (!pre.seq.valid() || !pre.pool->ensure_capacity(pre.seq, a.tokens)) die("prefill pool too small");
    fill_random(*pre.pool, pre.seq);
    for (const auto& p : pre.pool->page_table(pre.seq)) pre.pages.push_back(p.page);

    pd_pair pd(layout);
    topo::pd_handlers ph, dh;
    connect(pd, dec, pre, ph, dh);
    std::thread worker([&] { prefill_worker(pre, pd, a); });

    // Jobs enough for --mib: a job moves its pages' history plus one slot of fixed state.
    const int64_t per_job = a.message_bytes > 0
        ? synthetic_messages_per_job(layout, a) * a.message_bytes
        : pages_per_seq * layout.page_group_bytes() + layout.state_bytes_per_sequence();
    const int64_t jobs = std::max<int64_t>(1, ((a.mib << 20) + per_job - 1) / per_job);
    transfer_result r;
    const auto t0 = clock_type::now();
    for (int64_t j = 0; j < jobs; ++j) {
        admit_and_send(dec, pd, a, static_cast<uint64_t>(j + 1), dec.slots[static_cast<size_t>(j % a.window)]);
        ++r.jobs;
    }
    {
        std::unique_lock lock(dec.mu);
        if (!dec.cv.wait_for(lock, std::chrono::seconds(120), [&] { return dec.trackers.empty(); })) {
            die("transfers did not finish within 120 s");
        }
    }
    r.seconds = seconds_since(t0);
    {
        std::lock_guard lock(pre.mu);
        pre.stopping = true;
    }
    pre.cv.notify_all();
    worker.join();
    pd.client->stop();
    pd.server->stop();
    std::lock_guard lock(dec.mu);
    if (dec.failed > 0 || dec.synthetic_bad > 0 || dec.completed != r.jobs ||
        (a.message_bytes > 0 && dec.bytes != jobs * per_job)) {
        die(fmt::format("{} of {} jobs verified, {} failed, {} bad synthetic writes",
                        dec.completed, r.jobs, dec.failed, dec.synthetic_bad));
    }
    r.bytes = dec.bytes;
    r.messages = dec.messages;
    return r;
}

// One plain loopback TCP connection: `total` bytes written in `chunk`-byte writes, the receiver
// reads everything; timed from the first write to the receiver's last byte.
double run_raw(int64_t total, int64_t chunk) {
    int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listener, 1) != 0 || ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        die(fmt::format("raw listener: {}", std::strerror(errno)));
    }
    std::atomic<int64_t> received{0};
    clock_type::time_point done_at;
    std::thread reader([&] {
        int c = ::accept(listener, nullptr, nullptr);
        if (c < 0) die("raw accept failed");
        std::vector<char> buf(1 << 20);
        int64_t n = 0;
        for (ssize_t got; (got = ::read(c, buf.data(), buf.size())) > 0;) n += got;
        done_at = clock_type::now();
        received = n;
        ::close(c);
    });
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || ::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        die(fmt::format("raw connect: {}", std::strerror(errno)));
    }
    int one = 1;
    ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // as libuv links are
    std::vector<char> data(static_cast<size_t>(chunk));
    std::mt19937_64 rng(5);
    for (auto& b : data) b = static_cast<char>(rng());
    const auto t0 = clock_type::now();
    for (int64_t sent = 0; sent < total;) {
        const int64_t want = std::min<int64_t>(chunk, total - sent);
        for (int64_t off = 0; off < want;) {
            ssize_t w = ::write(s, data.data() + off, static_cast<size_t>(want - off));
            if (w <= 0) die(fmt::format("raw write: {}", std::strerror(errno)));
            off += w;
        }
        sent += want;
    }
    ::close(s);
    reader.join();
    ::close(listener);
    if (received != total) die(fmt::format("raw: received {} of {} bytes", received.load(), total));
    return std::chrono::duration<double>(done_at - t0).count();
}

bool parse(int argc, char** argv, args& a) {
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        const std::string_view text = argv[i + 1];
        int64_t v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || end != text.data() + text.size()) return false;
        if (flag == "--mib") a.mib = v;
        else if (flag == "--page-size") a.page_size = v;
        else if (flag == "--tokens") a.tokens = v;
        else if (flag == "--window") a.window = v;
        else if (flag == "--message-bytes") a.message_bytes = v;
        else if (flag == "--rounds") a.rounds = v;
        else return false;
    }
    return argc % 2 == 1 && a.mib > 0 && a.tokens > 0 && a.window > 0 && a.message_bytes >= 0 &&
           a.rounds > 0;
}

}  // namespace

int main(int argc, char** argv) {
    const char* usage = "usage: bench_pd_transfer [--mib 1024] [--page-size 256] [--tokens 4096] [--window 2] "
                        "[--message-bytes 0] [--rounds 3]\n"
                        "  pd state transfer over tcp loopback ÷ raw loopback TCP of the same bytes\n";
    if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
        std::fputs(usage, stdout);
        return 0;
    }
    args a;
    if (!parse(argc, argv, a)) {
        std::fputs(usage, stderr);
        return 2;
    }
    auto model = must(model::preset_config("small"), "small preset");
    // The shipped [cache] dtypes (bf16 kv and index keys), the page size from --page-size.
    const config cfg = must(load_config({}), "config");
    cache::layout_options lo = must(cache::layout_options_from(cfg), "layout options");
    lo.page_size = a.page_size;
    auto layout = must(cache::layout_spec::create(model, lo), "layout");
    fmt::print("layout (small preset): {}\n", layout.describe());

    // Rounds alternate the two paths; the best of each is kept, so load from other processes on
    // a shared machine hurts the ratio less than a single run would.
    transfer_result t;
    double raw_s = 0;
    for (int64_t round = 0; round < a.rounds; ++round) {
        transfer_result tr = run_transfer(layout, a);
        const double mean = static_cast<double>(tr.bytes) / static_cast<double>(tr.messages);
        const double rs = run_raw(tr.bytes, std::max<int64_t>(1, static_cast<int64_t>(mean)));
        if (round == 0 || tr.seconds < t.seconds) t = tr;
        if (round == 0 || rs < raw_s) raw_s = rs;
    }
    const double mean_message = static_cast<double>(t.bytes) / static_cast<double>(t.messages);
    const double t_gbs = static_cast<double>(t.bytes) / t.seconds / 1e9;
    const double r_gbs = static_cast<double>(t.bytes) / raw_s / 1e9;
    fmt::print("best of {} rounds; ", a.rounds);
    fmt::print("{} jobs of {} tokens (all verified), {} messages, mean {:.0f} B/message ({})\n", t.jobs, a.tokens,
               t.messages, mean_message,
               a.message_bytes > 0 ? "synthetic PAGE_WRITE" : "PAGE_WRITE + STATE_WRITE, send_transfer");
    fmt::print("{:<28} {:>14} {:>9} {:>8}\n", "path", "bytes", "seconds", "GB/s");
    fmt::print("{:<28} {:>14} {:>9.3f} {:>8.3f}\n", "pd transfer (tcp transport)", t.bytes, t.seconds, t_gbs);
    fmt::print("{:<28} {:>14} {:>9.3f} {:>8.3f}\n", "raw loopback tcp", t.bytes, raw_s, r_gbs);
    fmt::print("ratio transfer / raw: {:.3f}\n", t_gbs / r_gbs);
    return 0;
}
