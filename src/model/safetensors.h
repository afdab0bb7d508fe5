// model/safetensors.h — Read-only access to safetensors checkpoints held in memory (mapped, or
// copied into huge pages: model/file_bytes.h), and a writer.
//
// Owns: the file format (8-byte little-endian header length, JSON header, raw data), the file
// bytes' lifetime, and validation of everything a header claims (known dtype, non-negative shape, byte
// size = elements × dtype size, data range inside the file, no overlapping ranges). A checkpoint
// directory is either one `model.safetensors` or shards listed by
// `model.safetensors.index.json`. All problems found in a file are reported in one error; a
// truncated or corrupt file is an error value, never a crash.
//
// Callers get raw bytes plus dtype/shape (`tensor_view`); converting to compute types is the
// weight loader's job (model/weights.h). Views stay valid while the checkpoint object lives.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/dtype.h"
#include "model/file_bytes.h"

namespace tandem::model {

// "4x8" / "4, 8": dims joined by `sep` (fmt::join trips a GCC 12 false warning in fmt 9).
std::string join_dims(const std::vector<int64_t>& dims, const char* sep);

struct tensor_view {
    std::string name;
    dtype type = dtype::f32;
    std::vector<int64_t> shape;
    const uint8_t* data = nullptr;  // inside the file's bytes in memory
    int64_t nbytes = 0;
    std::string file;  // which file holds it (for error messages)

    int64_t numel() const;
};

// One .safetensors file, mapped or copied into huge pages (model/file_bytes.h).
class safetensors_file {
public:
    static result<std::unique_ptr<safetensors_file>> open(const std::string& path,
                                                          weight_pages pages = weight_pages::mapped);
    // A file already in memory, validated the same way; `bytes` must outlive the object (the
    // views point into it). `name` stands for the path in errors. The fuzz harness's entry.
    static result<std::unique_ptr<safetensors_file>> open_bytes(std::span<const uint8_t> bytes,
                                                                const std::string& name);
    ~safetensors_file();
    safetensors_file(const safetensors_file&) = delete;
    safetensors_file& operator=(const safetensors_file&) = delete;

    const std::string& path() const { return path_; }
    const std::map<std::string, tensor_view>& tensors() const { return tensors_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // The file's bytes in memory (null for open_bytes, whose bytes the caller owns).
    const file_bytes* bytes() const { return bytes_.get(); }

private:
    safetensors_file() = default;
    status parse_header();

    std::string path_;
    const uint8_t* base_ = nullptr;
    int64_t size_ = 0;
    std::shared_ptr<const file_bytes> bytes_;  // what base_ points into (open), or null (open_bytes)
    std::map<std::string, tensor_view> tensors_;
    std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory, single-file or sharded.
class checkpoint {
public:
    // `dir` holds model.safetensors.index.json (sharded) or model.safetensors, or any set of
    // *.safetensors files when neither name exists. `pages`: how the files are held in memory.
    static result<checkpoint> open_dir(const std::string& dir, weight_pages pages = weight_pages::mapped);

    const tensor_view* find(const std::string& name) const;
    // Every file's size (header included), and how much of it is copied into memory (weight_pages
    // huge) and backed by huge pages there.
    int64_t file_bytes_total() const;
    int64_t copied_bytes() const;
    int64_t huge_page_bytes() const;
    const std::map<std::string, const tensor_view*>& tensors() const { return index_; }
    int64_t total_bytes() const;

private:
    std::vector<std::shared_ptr<safetensors_file>> files_;
    std::map<std::string, const tensor_view*> index_;
};

// Writer: tensors are written in the order given; data must match shape × dtype size.
struct tensor_to_write {
    std::string name;
    dtype type = dtype::f32;
    std::vector<int64_t> shape;
    std::span<const uint8_t> bytes;
};

status write_safetensors(const std::string& path, const std::vector<tensor_to_write>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

// Streaming writer for checkpoints larger than memory: the header is written from names, dtypes
// and shapes up front, then each tensor's bytes are appended in header order. The file appears
// under `path` only when finish() succeeds (written to path + ".tmp" until then).
struct tensor_header {
    std::string name;
    dtype type = dtype::f32;
    std::vector<int64_t> shape;
};

class safetensors_writer {
public:
    static result<std::unique_ptr<safetensors_writer>> create(const std::string& path,
                                                              const std::vector<tensor_header>& tensors,
                                                              const std::map<std::string, std::string>& metadata = {});
    ~safetensors_writer();
    safetensors_writer(const safetensors_writer&) = delete;
    safetensors_writer& operator=(const safetensors_writer&) = delete;

    // The next tensor's data; its size must match that tensor's shape × dtype size.
    status append(std::span<const uint8_t> bytes);
    // Every tensor appended: close and move into place.
    status finish();

private:
    safetensors_writer() = default;
    std::string path_, tmp_;
    std::FILE* file_ = nullptr;
    std::vector<tensor_header> tensors_;
    std::vector<int64_t> at_;  // file offset of each tensor's data, in declaration order
    size_t next_ = 0;
};

}  // namespace tandem::model
