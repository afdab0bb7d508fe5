// model/file_bytes.cpp — see file_bytes.h.
#include "model/file_bytes.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

namespace tandem::model {

namespace {

constexpr int64_t k_huge_page = int64_t{2} << 20;
constexpr int64_t k_read_chunk = int64_t{64} << 20;

// Which file: the copy is shared only while the file is unchanged — same device, inode, size,
// modification and change times (see same_ends for what these can miss).
using file_key = std::tuple<uint64_t, uint64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

constexpr int64_t k_compared_end = int64_t{64} << 10;

struct copy_registry {
    std::mutex mu;
    std::map<file_key, std::weak_ptr<const file_bytes>> copies;
};

copy_registry& registry() {
    static copy_registry r;
    return r;
}

class fd_closer {
public:
    explicit fd_closer(int fd) : fd_(fd) {}
    ~fd_closer() { ::close(fd_); }
    fd_closer(const fd_closer&) = delete;
    fd_closer& operator=(const fd_closer&) = delete;

private:
    int fd_;
};

// Bytes [begin, end) of the file into dst + begin; a short file (truncated while we read) or a
// read error is an error.
status read_range(int fd, uint8_t* dst, int64_t begin, int64_t end, int64_t size, const std::string& path) {
    for (int64_t done = begin; done < end;) {
        const int64_t want = end - done < k_read_chunk ? end - done : k_read_chunk;
        const ssize_t got = ::pread(fd, dst + done, static_cast<size_t>(want), static_cast<off_t>(done));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return make_error(error_code::io_error,
                              fmt::format("{}: read failed at byte {}: {}", path, done, std::strerror(errno)));
        if (got == 0)
            return make_error(error_code::data_loss,
                              fmt::format("{}: the file ended at byte {} while {} were expected (changed while "
                                          "loading?)", path, done, size));
        done += got;
    }
    return status::ok();
}

// The whole file into dst, on several threads for large files. Why: most of a load's time is the
// kernel zeroing each fresh huge page and copying from the page cache into it, both in the
// faulting thread (flash-slice's 8.6 GiB from the page cache: 45% zeroing, 30% copying, 5.3 s on
// one thread), so the threads split it; ranges are whole huge pages so no page is shared.
status read_all(int fd, uint8_t* dst, int64_t size, const std::string& path) {
    const int64_t per_thread = int64_t{256} << 20;
    const int64_t threads = std::clamp<int64_t>(size / per_thread, 1, std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 8));
    if (threads == 1) return read_range(fd, dst, 0, size, size, path);
    const auto bound = [&](int64_t i) { return i == threads ? size : size * i / threads / k_huge_page * k_huge_page; };
    std::vector<status> results(static_cast<size_t>(threads));
    std::vector<std::thread> readers;
    for (int64_t t = 0; t < threads; ++t) {
        readers.emplace_back([&, t, begin = bound(t), end = bound(t + 1)] {
            results[static_cast<size_t>(t)] = read_range(fd, dst, begin, end, size, path);
        });
    }
    for (auto& r : readers) r.join();
    for (auto& r : results) TANDEM_RETURN_IF_ERROR(r);
    return status::ok();
}

// Whether the file's first and last 64 KiB (the header with every tensor's name and offsets, and
// the last tensor's tail) still equal the copy's. Why: file times tick coarsely (a few ms), and
// an inode freed with its file can be reused by a new one of the same size; the times and inode
// alone could then hand a live copy of the old file to a load of the new one.
bool same_ends(int fd, const file_bytes& copy) {
    const int64_t size = copy.size();
    std::vector<uint8_t> buf(static_cast<size_t>(std::min(size, k_compared_end)));
    for (const int64_t at : {int64_t{0}, size - static_cast<int64_t>(buf.size())}) {
        if (::pread(fd, buf.data(), buf.size(), static_cast<off_t>(at)) != static_cast<ssize_t>(buf.size()))
            return false;
        if (std::memcmp(buf.data(), copy.data() + at, buf.size()) != 0) return false;
    }
    return true;
}

// Bytes to start a copy of a safetensors file into its first page so that its data section
// (8 + header length) lies on a 64-byte boundary; 0 where the file is too short to say.
int64_t line_shift_for_data(int fd, int64_t size) {
    uint8_t len[8];
    if (size < 8 || ::pread(fd, len, 8, 0) != 8) return 0;
    uint64_t header = 0;
    for (int i = 0; i < 8; ++i) header |= static_cast<uint64_t>(len[i]) << (8 * i);
    if (header > static_cast<uint64_t>(size)) return 0;  // the parser reports it
    return static_cast<int64_t>((64 - (8 + header) % 64) % 64);
}

// Names the copy in /proc/<pid>/maps and smaps ("[anon:tandem weights model.safetensors]"), so
// pmap and the soak tool count it as weights, not heap. Best effort: kernels before 5.17, or
// without CONFIG_ANON_VMA_NAME, refuse and the region stays unnamed.
void name_region(void* region, int64_t bytes, const std::string& path) {
#ifdef PR_SET_VMA_ANON_NAME
    std::string name = "tandem weights " + path.substr(path.find_last_of('/') + 1);
    for (char& c : name)
        if (c == '[' || c == ']' || c == '\\' || c == '$' || c == '`' || c < 0x20 || c > 0x7e) c = '_';
    if (name.size() > 79) name.resize(79);
    (void)::prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, reinterpret_cast<unsigned long>(region),
                  static_cast<unsigned long>(bytes), reinterpret_cast<unsigned long>(name.c_str()));
#else
    (void)region, (void)bytes, (void)path;
#endif
}

}  // namespace

result<weight_pages> weight_pages_from(const std::string& name) {
    if (name == "huge") return weight_pages::huge;
    if (name == "mapped") return weight_pages::mapped;
    return make_error(error_code::invalid_argument,
                      fmt::format("model.weight_pages: '{}' is not one of huge, mapped", name));
}

const char* weight_pages_name(weight_pages p) { return p == weight_pages::huge ? "huge" : "mapped"; }

weight_pages pages_that_fit(weight_pages wanted, int64_t total, int64_t available) {
    if (wanted != weight_pages::huge || available <= 0) return wanted;
    return total <= available / 10 * 9 ? weight_pages::huge : weight_pages::mapped;
}

int64_t memory_available_bytes() {
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    int64_t kib = 0;
    while (in >> key >> kib >> unit)
        if (key == "MemAvailable:") return kib << 10;
    return 0;
}

result<std::shared_ptr<const file_bytes>> file_bytes::open(const std::string& path, weight_pages mode) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return make_error(errno == ENOENT ? error_code::not_found : error_code::io_error,
                          fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
    fd_closer closer(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0) return make_error(error_code::io_error, fmt::format("{}: fstat failed", path));
    const int64_t size = static_cast<int64_t>(st.st_size);
    if (size <= 0) {  // mmap refuses a zero length; the parser reports the file as too short
        std::shared_ptr<file_bytes> empty(new file_bytes());
        static const uint8_t nothing = 0;
        empty->data_ = &nothing;
        empty->mode_ = mode;
        return std::shared_ptr<const file_bytes>(std::move(empty));
    }

    if (mode == weight_pages::mapped) {
        void* p = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
            return make_error(error_code::io_error, fmt::format("{}: mmap failed: {}", path, std::strerror(errno)));
        std::shared_ptr<file_bytes> f(new file_bytes());
        f->base_ = f->data_ = static_cast<const uint8_t*>(p);
        f->size_ = size;
        f->mapped_bytes_ = size;
        f->mode_ = mode;
        return std::shared_ptr<const file_bytes>(std::move(f));
    }

    const file_key key{static_cast<uint64_t>(st.st_dev),        static_cast<uint64_t>(st.st_ino), size,
                       static_cast<int64_t>(st.st_mtim.tv_sec), static_cast<int64_t>(st.st_mtim.tv_nsec),
                       static_cast<int64_t>(st.st_ctim.tv_sec), static_cast<int64_t>(st.st_ctim.tv_nsec)};
    copy_registry& reg = registry();
    // Held while copying: a second loader of the same file waits for this copy instead of
    // making its own (loads are rare; two different files wait for each other, which is fine).
    std::lock_guard<std::mutex> lock(reg.mu);
    if (auto it = reg.copies.find(key); it != reg.copies.end())
        if (auto alive = it->second.lock(); alive && same_ends(fd, *alive)) return alive;

    // The copy starts `shift` bytes into its first page so that the safetensors data section (after
    // the 8-byte length and the header) starts on a 64-byte line: checkpoints whose tensor sizes are
    // multiples of 64 bytes (HF's and ours) then have every matrix line-aligned, which the AMX
    // tiles' 64-byte row loads need at full speed (cpu/amx.h). The file's bytes are unchanged.
    const int64_t shift = line_shift_for_data(fd, size);
    // Rounded up to whole huge pages and aligned to one, so every page of the copy can be huge.
    const int64_t rounded = (size + shift + k_huge_page - 1) / k_huge_page * k_huge_page;
    const int64_t region_bytes = rounded + k_huge_page;
    void* region = ::mmap(nullptr, static_cast<size_t>(region_bytes), PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (region == MAP_FAILED)
        return make_error(error_code::io_error,
                          fmt::format("{}: cannot allocate {:.2f} GiB for its weights in memory ({}); "
                                      "model.weight_pages = \"mapped\" maps the file instead",
                                      path, double(size) / (1 << 30), std::strerror(errno)));
    // Keep only the aligned `rounded` bytes: the copy is then one mapping of exactly that size
    // (what /proc/<pid>/smaps shows and tools/soak.py counts as weights), not three pieces.
    auto* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(region) + k_huge_page - 1) &
                                               ~static_cast<uintptr_t>(k_huge_page - 1));
    const int64_t head = aligned - static_cast<uint8_t*>(region), tail = region_bytes - head - rounded;
    if (head > 0) ::munmap(region, static_cast<size_t>(head));
    if (tail > 0) ::munmap(aligned + rounded, static_cast<size_t>(tail));
    std::shared_ptr<file_bytes> f(new file_bytes());
    f->base_ = aligned;
    f->data_ = aligned + shift;
    f->size_ = size;
    f->mapped_bytes_ = rounded;
    f->mode_ = mode;
    // Advice only: without THP (or with it off) the copy still works, in 4 KiB pages.
    (void)::madvise(aligned, static_cast<size_t>(rounded), MADV_HUGEPAGE);
    TANDEM_RETURN_IF_ERROR(read_all(fd, aligned + shift, size, path));
    name_region(aligned, rounded, path);
    // Read-only from here, like the mapping: a stray write faults instead of corrupting a weight.
    if (::mprotect(aligned, static_cast<size_t>(rounded), PROT_READ) != 0)
        return make_error(error_code::internal,
                          fmt::format("{}: mprotect of the weight copy failed: {}", path, std::strerror(errno)));
    std::shared_ptr<const file_bytes> shared = std::move(f);
    reg.copies[key] = shared;
    return shared;
}

file_bytes::~file_bytes() {
    if (mapped_bytes_ > 0) ::munmap(const_cast<uint8_t*>(base_), static_cast<size_t>(mapped_bytes_));
}

int64_t file_bytes::huge_page_bytes() const {
    if (mode_ != weight_pages::huge || mapped_bytes_ == 0) return 0;
    std::ifstream smaps("/proc/self/smaps");
    const auto lo = reinterpret_cast<uintptr_t>(base_), hi = lo + static_cast<uintptr_t>(mapped_bytes_);
    bool inside = false;
    int64_t kib = 0;
    for (std::string line; std::getline(smaps, line);) {
        unsigned long start = 0, end = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx ", &start, &end) == 2) {
            inside = start < hi && end > lo;  // a VMA header line ("start-end perms …")
            continue;
        }
        long long v = 0;
        if (inside && std::sscanf(line.c_str(), "AnonHugePages: %lld kB", &v) == 1) kib += v;
    }
    return std::min<int64_t>(kib << 10, size_);  // the rounding to whole pages is not the file's
}

}  // namespace tandem::model
