// model/safetensors.cpp — safetensors reading (file bytes + validated header) and writing.
#include "model/safetensors.h"

#include "core/log.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <simdjson.h>
#include <utility>

namespace tandem::model {

namespace {

// A header larger than this is certainly corrupt (real shards have a few hundred KiB).
constexpr int64_t k_max_header_bytes = int64_t{100} << 20;

std::string join_problems(const std::vector<std::string>& problems) {
    std::string s;
    for (const auto& p : problems) s += "\n  - " + p;
    return s;
}

// Multiplies shape dims with an overflow check; -1 on overflow.
int64_t checked_numel(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) {
        if (d < 0) return -1;
        if (d != 0 && n > INT64_MAX / d) return -1;
        n *= d;
    }
    return n;
}

// Parses one tensor entry of the header; appends problems instead of failing fast.
bool parse_entry(const std::string& name, simdjson::dom::element e, int64_t data_size,
                 tensor_view& out, int64_t& begin, std::vector<std::string>& problems) {
    out.name = name;
    simdjson::dom::object obj;
    if (e.get_object().get(obj)) {
        problems.push_back(fmt::format("tensor '{}': entry is not an object", name));
        return false;
    }
    std::string_view dt;
    if (obj["dtype"].get_string().get(dt)) {
        problems.push_back(fmt::format("tensor '{}': missing or non-string 'dtype'", name));
        return false;
    }
    auto type = dtype_from_name(dt);
    if (!type) {
        problems.push_back(fmt::format("tensor '{}': unknown dtype '{}'", name, std::string(dt)));
        return false;
    }
    out.type = *type;
    simdjson::dom::array shape;
    if (obj["shape"].get_array().get(shape)) {
        problems.push_back(fmt::format("tensor '{}': missing or non-array 'shape'", name));
        return false;
    }
    for (auto d : shape) {
        int64_t v;
        if (d.get_int64().get(v) || v < 0) {
            problems.push_back(fmt::format("tensor '{}': shape has a non-integer or negative dim", name));
            return false;
        }
        out.shape.push_back(v);
    }
    simdjson::dom::array offsets;
    int64_t end = 0;
    if (obj["data_offsets"].get_array().get(offsets) || offsets.size() != 2 ||
        offsets.at(0).get_int64().get(begin) || offsets.at(1).get_int64().get(end)) {
        problems.push_back(fmt::format("tensor '{}': 'data_offsets' must be [begin, end]", name));
        return false;
    }
    int64_t numel = checked_numel(out.shape);
    if (numel < 0 || numel > INT64_MAX / 8) {
        problems.push_back(fmt::format("tensor '{}': shape overflows", name));
        return false;
    }
    int64_t expected = numel * dtype_size(out.type);
    if (begin < 0 || end < begin) {
        problems.push_back(fmt::format("tensor '{}': bad data_offsets [{}, {}]", name, begin, end));
        return false;
    }
    if (end - begin != expected) {
        problems.push_back(fmt::format("tensor '{}': {} bytes stored but shape {} × {} needs {}",
                                       name, end - begin, join_dims(out.shape, "x"), std::string(dt), expected));
        return false;
    }
    if (end > data_size) {
        problems.push_back(fmt::format(
            "tensor '{}': data [{}, {}) runs past the end of the data section ({} bytes): "
            "file truncated?", name, begin, end, data_size));
        return false;
    }
    out.nbytes = expected;
    return true;
}

}  // namespace

std::string join_dims(const std::vector<int64_t>& dims, const char* sep) {
    std::string s;
    for (size_t i = 0; i < dims.size(); ++i) {
        if (i) s += sep;
        s += std::to_string(dims[i]);
    }
    return s;
}

int64_t tensor_view::numel() const { return checked_numel(shape); }

result<std::unique_ptr<safetensors_file>> safetensors_file::open(const std::string& path, weight_pages pages) {
    auto bytes = file_bytes::open(path, pages);
    if (!bytes) return bytes.error();
    std::unique_ptr<safetensors_file> f(new safetensors_file());
    f->path_ = path;
    f->size_ = (*bytes)->size();
    f->base_ = (*bytes)->data();
    f->bytes_ = std::move(bytes.value());
    if (f->size_ < 8)
        return make_error(error_code::data_loss,
                          fmt::format("{}: {} bytes is too short for a safetensors file", path, f->size_));
    TANDEM_RETURN_IF_ERROR(f->parse_header().with_context(path));
    return f;
}

result<std::unique_ptr<safetensors_file>> safetensors_file::open_bytes(std::span<const uint8_t> bytes,
                                                                     const std::string& name) {
    std::unique_ptr<safetensors_file> f(new safetensors_file());
    f->path_ = name;
    f->size_ = static_cast<int64_t>(bytes.size());
    if (f->size_ < 8) {
        return make_error(error_code::data_loss,
                          fmt::format("{}: {} bytes is too short for a safetensors file", name, f->size_));
    }
    f->base_ = bytes.data();
    TANDEM_RETURN_IF_ERROR(f->parse_header().with_context(name));
    return f;
}

safetensors_file::~safetensors_file() = default;

status safetensors_file::parse_header() {
    uint64_t header_len = 0;
    for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(base_[i]) << (8 * i);
    if (header_len > static_cast<uint64_t>(k_max_header_bytes) ||
        static_cast<int64_t>(header_len) > size_ - 8)
        return make_error(error_code::data_loss,
                          fmt::format("header length {} does not fit in the {}-byte file "
                                      "(truncated or not a safetensors file)", header_len, size_));
    int64_t data_start = 8 + static_cast<int64_t>(header_len);
    int64_t data_size = size_ - data_start;
    simdjson::dom::parser parser;
    simdjson::padded_string json(reinterpret_cast<const char*>(base_ + 8), header_len);
    simdjson::dom::object root;
    if (parser.parse(json).get_object().get(root))
        return make_error(error_code::data_loss, "header is not a JSON object (corrupt file)");
    std::vector<std::string> problems;
    for (auto field : root) {
        std::string key(field.key);
        if (key == "__metadata__") {
            simdjson::dom::object meta;
            if (field.value.get_object().get(meta)) {
                problems.push_back("'__metadata__' is not an object");
                continue;
            }
            for (auto m : meta) {
                std::string_view v;
                if (!m.value.get_string().get(v)) metadata_[std::string(m.key)] = std::string(v);
            }
            continue;
        }
        tensor_view view;
        int64_t begin = 0;
        if (!parse_entry(key, field.value, data_size, view, begin, problems)) continue;
        view.file = path_;
        view.data = base_ + data_start + begin;
        tensors_.emplace(key, std::move(view));
    }
    // Overlapping ranges mean a corrupt or hostile header.
    std::vector<std::pair<const uint8_t*, const tensor_view*>> ranges;
    for (const auto& [name, v] : tensors_)
        if (v.nbytes > 0) ranges.emplace_back(v.data, &v);
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) {
        const tensor_view* prev = ranges[i - 1].second;
        if (prev->data + prev->nbytes > ranges[i].first)
            problems.push_back(fmt::format("tensors '{}' and '{}' overlap", prev->name,
                                           ranges[i].second->name));
    }
    if (!problems.empty())
        return make_error(error_code::data_loss,
                          fmt::format("{} problem(s) in the header:{}", problems.size(),
                                      join_problems(problems)));
    return status::ok();
}

// ---- checkpoint directory ------------------------------------------------------------------

namespace {

result<std::vector<std::string>> shard_files_from_index(const std::string& index_path,
                                                        std::map<std::string, std::string>& weight_map) {
    simdjson::dom::parser parser;
    simdjson::padded_string json;
    if (simdjson::padded_string::load(index_path).get(json))
        return make_error(error_code::io_error, fmt::format("{}: cannot read", index_path));
    simdjson::dom::object wm;
    if (parser.parse(json)["weight_map"].get_object().get(wm))
        return make_error(error_code::data_loss,
                          fmt::format("{}: no 'weight_map' object (corrupt index)", index_path));
    std::vector<std::string> files;
    for (auto f : wm) {
        std::string_view file;
        if (f.value.get_string().get(file))
            return make_error(error_code::data_loss,
                              fmt::format("{}: weight_map['{}'] is not a string", index_path, f.key));
        weight_map[std::string(f.key)] = std::string(file);
        if (std::find(files.begin(), files.end(), file) == files.end()) files.emplace_back(file);
    }
    return files;
}

}  // namespace

result<checkpoint> checkpoint::open_dir(const std::string& dir, weight_pages pages) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        return make_error(error_code::not_found, fmt::format("{}: not a directory", dir));
    std::vector<std::string> files;
    std::map<std::string, std::string> weight_map;
    fs::path index = fs::path(dir) / "model.safetensors.index.json";
    if (fs::exists(index, ec)) {
        auto r = shard_files_from_index(index.string(), weight_map);
        if (!r) return r.error();
        files = std::move(r.value());
    } else if (fs::exists(fs::path(dir) / "model.safetensors", ec)) {
        files.push_back("model.safetensors");
    } else {
        for (const auto& entry : fs::directory_iterator(dir, ec))
            if (entry.path().extension() == ".safetensors") files.push_back(entry.path().filename());
        std::sort(files.begin(), files.end());
    }
    if (files.empty())
        return make_error(error_code::not_found, fmt::format("{}: no .safetensors files", dir));
    if (pages == weight_pages::huge) {
        int64_t total = 0;
        for (const auto& name : files) {
            const auto size = fs::file_size(fs::path(dir) / name, ec);
            if (!ec) total += static_cast<int64_t>(size);
        }
        const int64_t available = memory_available_bytes();
        pages = pages_that_fit(pages, total, available);
        if (pages == weight_pages::mapped)
            TANDEM_LOG_WARN("{}: the checkpoint's {:.1f} GiB exceed 90% of the {:.1f} GiB of memory available: its files "
                            "are mapped instead of read into huge pages (model.weight_pages); decode streams slower",
                            dir, double(total) / (1 << 30), double(available) / (1 << 30));
    }
    checkpoint ck;
    std::vector<std::string> problems;
    for (const auto& name : files) {
        auto f = safetensors_file::open((fs::path(dir) / name).string(), pages);
        if (!f) {
            problems.push_back(f.error().message());
            continue;
        }
        ck.files_.emplace_back(std::move(f.value()));
        for (const auto& [tname, view] : ck.files_.back()->tensors()) {
            if (!weight_map.empty()) {
                auto it = weight_map.find(tname);
                if (it == weight_map.end() || it->second != name) continue;  // index is authoritative
            }
            if (!ck.index_.emplace(tname, &view).second)
                problems.push_back(fmt::format("tensor '{}' appears in more than one file", tname));
        }
    }
    for (const auto& [tname, file] : weight_map)
        if (!ck.index_.count(tname) && problems.empty())
            problems.push_back(fmt::format("index lists '{}' in {} but the file does not hold it", tname, file));
    if (!problems.empty())
        return make_error(error_code::data_loss, fmt::format("checkpoint {}:{}", dir, join_problems(problems)));
    return ck;
}

const tensor_view* checkpoint::find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : it->second;
}

namespace {

// Σ of(file's bytes) over the files that hold their bytes in memory.
template <class Of>
int64_t sum_over(const std::vector<std::shared_ptr<safetensors_file>>& files, Of of) {
    int64_t n = 0;
    for (const auto& f : files)
        if (f->bytes()) n += of(*f->bytes());
    return n;
}

}  // namespace

int64_t checkpoint::file_bytes_total() const {
    return sum_over(files_, [](const file_bytes& b) { return b.size(); });
}

int64_t checkpoint::copied_bytes() const {
    return sum_over(files_, [](const file_bytes& b) { return b.mode() == weight_pages::huge ? b.size() : 0; });
}

int64_t checkpoint::huge_page_bytes() const {
    return sum_over(files_, [](const file_bytes& b) { return b.huge_page_bytes(); });
}

int64_t checkpoint::total_bytes() const {
    int64_t n = 0;
    for (const auto& [name, v] : index_) n += v->nbytes;
    return n;
}

// ---- writer ---------------------------------------------------------------------------------

namespace {

std::string json_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out;
}

}  // namespace

result<std::unique_ptr<safetensors_writer>> safetensors_writer::create(
    const std::string& path, const std::vector<tensor_header>& tensors, const std::map<std::string, std::string>& metadata) {
    std::string header = "{";
    if (!metadata.empty()) {
        header += "\"__metadata__\":{";
        bool first = true;
        for (const auto& [k, v] : metadata) {
            header += fmt::format("{}\"{}\":\"{}\"", first ? "" : ",", json_escape(k), json_escape(v));
            first = false;
        }
        header += "}";
    }
    // Where each tensor's data goes: first every tensor whose size is a multiple of 64 bytes (in
    // declaration order), then the rest, so with the data section starting on a 64-byte boundary
    // (the header is padded to it) every large matrix starts on a cache line. Why: the AMX path
    // loads 64-byte tile rows, and a row straddling two lines cost it a third of its speed; the
    // exact kernels read lines too. The tensors are still appended in declaration order (append
    // seeks), so the values are the same bits, and the file has no holes.
    std::vector<int64_t> need(tensors.size()), at(tensors.size());
    int64_t offset = 0;
    for (int pass = 0; pass < 2; ++pass)
        for (size_t i = 0; i < tensors.size(); ++i) {
            need[i] = checked_numel(tensors[i].shape) * dtype_size(tensors[i].type);
            if ((need[i] % 64 == 0) != (pass == 0)) continue;
            at[i] = offset;
            offset += need[i];
        }
    for (size_t i = 0; i < tensors.size(); ++i) {
        const auto& t = tensors[i];
        header += fmt::format("{}\"{}\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                              (i == 0 && metadata.empty()) ? "" : ",", json_escape(t.name),
                              dtype_name(t.type), join_dims(t.shape, ","), at[i], at[i] + need[i]);
    }
    header += "}";
    while ((8 + header.size()) % 64 != 0) header += ' ';  // data starts 64-byte aligned
    std::unique_ptr<safetensors_writer> w(new safetensors_writer());
    w->path_ = path;
    w->tmp_ = path + ".tmp";
    w->tensors_ = tensors;
    w->at_ = std::move(at);
    for (int64_t& a : w->at_) a += 8 + static_cast<int64_t>(header.size());
    w->file_ = std::fopen(w->tmp_.c_str(), "wb");
    if (!w->file_)
        return make_error(error_code::io_error, fmt::format("{}: cannot create: {}", w->tmp_, std::strerror(errno)));
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
    if (std::fwrite(len, 1, 8, w->file_) != 8 || std::fwrite(header.data(), 1, header.size(), w->file_) != header.size())
        return make_error(error_code::io_error, fmt::format("{}: write failed", w->tmp_));
    return w;
}

safetensors_writer::~safetensors_writer() {
    if (!file_) return;
    std::fclose(file_);
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);  // unfinished: never leave a partial file behind
}

status safetensors_writer::append(std::span<const uint8_t> bytes) {
    if (!file_ || next_ >= tensors_.size())
        return make_error(error_code::internal, fmt::format("{}: more tensors appended than declared", tmp_));
    const tensor_header& t = tensors_[next_++];
    const int64_t need = checked_numel(t.shape) * dtype_size(t.type);
    if (need != static_cast<int64_t>(bytes.size()))
        return make_error(error_code::internal, fmt::format("write_safetensors: '{}' has {} bytes, shape needs {}",
                                                            t.name, bytes.size(), need));
    if (::fseeko(file_, static_cast<off_t>(at_[next_ - 1]), SEEK_SET) != 0)
        return make_error(error_code::io_error, fmt::format("{}: seek failed: {}", tmp_, std::strerror(errno)));
    if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size())
        return make_error(error_code::io_error, fmt::format("{}: write failed: {}", tmp_, std::strerror(errno)));
    return status::ok();
}

status safetensors_writer::finish() {
    if (!file_) return make_error(error_code::internal, fmt::format("{}: already finished", path_));
    if (next_ != tensors_.size())
        return make_error(error_code::internal, fmt::format("{}: {} of {} tensors appended", tmp_, next_, tensors_.size()));
    const bool ok = std::fclose(file_) == 0;
    file_ = nullptr;
    std::error_code ec;
    if (!ok) {
        std::filesystem::remove(tmp_, ec);
        return make_error(error_code::io_error, fmt::format("{}: write failed", tmp_));
    }
    std::filesystem::rename(tmp_, path_, ec);
    if (ec) return make_error(error_code::io_error, fmt::format("{}: rename failed: {}", path_, ec.message()));
    return status::ok();
}

status write_safetensors(const std::string& path, const std::vector<tensor_to_write>& tensors,
                         const std::map<std::string, std::string>& metadata) {
    std::vector<tensor_header> headers;
    for (const auto& t : tensors) headers.push_back({t.name, t.type, t.shape});
    auto w = safetensors_writer::create(path, headers, metadata);
    if (!w) return w.error();
    for (const auto& t : tensors) TANDEM_RETURN_IF_ERROR((*w)->append(t.bytes));
    return (*w)->finish();
}

}  // namespace tandem::model
