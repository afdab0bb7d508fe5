// safetensors reader/writer, dtype decoding, and the weight loader's validation (one error that
// lists every problem; truncated/corrupt files fail cleanly).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <fstream>

#include "model/dtype.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "model_test_util.h"

using namespace tandem::model;
using namespace tandem::model::testing;
namespace fs = std::filesystem;

namespace {

template <typename T>
std::span<const uint8_t> bytes_of(const std::vector<T>& v) {
    return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

void truncate_file(const fs::path& p, int64_t keep) { fs::resize_file(p, static_cast<uintmax_t>(keep)); }

// The permissions column of /proc/self/maps for the mapping holding `p` ("r--p", …), or "".
std::string permissions_at(const void* p) {
    std::ifstream maps("/proc/self/maps");
    const auto at = reinterpret_cast<unsigned long>(p);
    for (std::string line; std::getline(maps, line);) {
        unsigned long lo = 0, hi = 0;
        char perms[8] = {};
        if (std::sscanf(line.c_str(), "%lx-%lx %7s", &lo, &hi, perms) == 3 && lo <= at && at < hi) return perms;
    }
    return "";
}

// Rewrites a checkpoint's model.safetensors with `edit` applied to the tensor list.
void rewrite(const std::string& dir, const std::function<void(std::vector<tensor_to_write>&)>& edit) {
    auto ck = checkpoint::open_dir(dir);
    REQUIRE(ck.is_ok());
    std::vector<std::vector<uint8_t>> keep;
    std::vector<tensor_to_write> ts;
    for (const auto& [name, v] : ck->tensors()) {
        keep.emplace_back(v->data, v->data + v->nbytes);
        ts.push_back({name, v->type, v->shape, {}});
    }
    for (size_t i = 0; i < ts.size(); ++i) ts[i].bytes = keep[i];
    edit(ts);
    std::string tmp = dir + "/rewritten.safetensors";
    REQUIRE(write_safetensors(tmp, ts).is_ok());
    fs::rename(tmp, dir + "/model.safetensors");
}

}  // namespace

TEST_CASE("dtype: narrow formats decode exactly") {
    CHECK(bf16_to_float(0x3f80) == 1.0f);
    CHECK(float_to_bf16(1.0f) == 0x3f80);
    CHECK(float_to_bf16(1.00390625f) == 0x3f80);  // halfway rounds to even
    CHECK(f16_to_float(0x3c00) == 1.0f);
    CHECK(f16_to_float(0x0001) == std::ldexp(1.0f, -24));
    CHECK(e4m3_to_float(0x7e) == 448.0f);
    CHECK(e4m3_to_float(0x38) == 1.0f);
    CHECK(e4m3_to_float(0x01) == std::ldexp(1.0f, -9));
    CHECK(std::isnan(e4m3_to_float(0x7f)));
    for (int code = 0; code < 0x7f; ++code) CHECK(float_to_e4m3(e4m3_to_float(uint8_t(code))) == code);
    CHECK(float_to_e4m3(1.0625f) == 0x38);   // halfway between 1 and 1.125: to even
    CHECK(float_to_e4m3(1.1875f) == 0x3a);   // halfway between 1.125 and 1.25: to even
    CHECK(float_to_e4m3(-500.0f) == 0xfe);   // saturates
    CHECK(float_to_e4m3(0.0146484375f) == 0x08);  // rounds up into the normal range
    CHECK(e8m0_to_float(127) == 1.0f);
    CHECK(e8m0_to_float(130) == 8.0f);
    CHECK(e2m1_to_float(0x7) == 6.0f);
    CHECK(e2m1_to_float(0xb) == -1.5f);
    CHECK(float_to_e2m1(2.4f) == 0x4);
    CHECK(dtype_from_name("F8_E4M3") == dtype::f8_e4m3);
    CHECK_FALSE(dtype_from_name("F4").has_value());
}

TEST_CASE("safetensors: write then read back, single file and sharded") {
    temp_dir dir("st");
    std::vector<float> a = {1.0f, -2.0f, 3.5f, 0.25f, 8.0f, -0.5f};
    std::vector<int64_t> b = {7, -1, 42};
    std::vector<uint16_t> c = {float_to_bf16(1.5f), float_to_bf16(-3.0f)};
    REQUIRE(write_safetensors(dir.str() + "/model.safetensors",
                              {{"a", dtype::f32, {2, 3}, bytes_of(a)}, {"b", dtype::i64, {3}, bytes_of(b)}})
                .is_ok());
    auto ck = checkpoint::open_dir(dir.str());
    REQUIRE_MESSAGE(ck.is_ok(), ck.error().message());
    const tensor_view* ta = ck->find("a");
    REQUIRE(ta);
    CHECK(ta->shape == std::vector<int64_t>{2, 3});
    CHECK(std::memcmp(ta->data, a.data(), 24) == 0);
    CHECK(reinterpret_cast<uintptr_t>(ta->data) % 8 == 0);
    CHECK(ck->find("b")->type == dtype::i64);

    temp_dir sharded("st_shard");
    REQUIRE(write_safetensors(sharded.str() + "/model-00001-of-00002.safetensors", {{"a", dtype::f32, {6}, bytes_of(a)}}).is_ok());
    REQUIRE(write_safetensors(sharded.str() + "/model-00002-of-00002.safetensors", {{"c", dtype::bf16, {2}, bytes_of(c)}}).is_ok());
    std::ofstream(sharded.path / "model.safetensors.index.json")
        << R"({"metadata": {"total_size": 28}, "weight_map": {"a": "model-00001-of-00002.safetensors",
              "c": "model-00002-of-00002.safetensors"}})";
    auto sk = checkpoint::open_dir(sharded.str());
    REQUIRE_MESSAGE(sk.is_ok(), sk.error().message());
    CHECK(sk->tensors().size() == 2);
    CHECK(sk->find("c")->type == dtype::bf16);

    std::ofstream(sharded.path / "model.safetensors.index.json")
        << R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "c": "missing.safetensors"}})";
    auto bad = checkpoint::open_dir(sharded.str());
    REQUIRE_FALSE(bad.is_ok());
    CHECK(bad.error().message().find("missing.safetensors") != std::string::npos);
}

TEST_CASE("safetensors: truncated and corrupt files fail with a clear error") {
    for (const weight_pages mode : {weight_pages::mapped, weight_pages::huge}) {
        CAPTURE(weight_pages_name(mode));
        temp_dir dir("st_bad");
        std::vector<float> a(64, 1.0f);
        const fs::path p = dir.path / "model.safetensors";
        REQUIRE(write_safetensors(p.string(), {{"a", dtype::f32, {64}, bytes_of(a)}}).is_ok());
        const int64_t full = static_cast<int64_t>(fs::file_size(p));
        truncate_file(p, full - 10);
        auto r = safetensors_file::open(p.string(), mode);
        REQUIRE_FALSE(r.is_ok());
        CHECK(r.error().code() == tandem::error_code::data_loss);
        CHECK(r.error().message().find("truncated") != std::string::npos);
        truncate_file(p, 5);
        CHECK_FALSE(safetensors_file::open(p.string(), mode).is_ok());
        {
            std::ofstream f(p, std::ios::binary);
            uint64_t len = 1ull << 40;  // header length far beyond the file
            f.write(reinterpret_cast<const char*>(&len), 8);
            f << "{}";
        }
        CHECK_FALSE(safetensors_file::open(p.string(), mode).is_ok());
        {
            std::ofstream f(p, std::ios::binary);
            std::string h = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,8]},"b":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}} )";
            uint64_t len = h.size();
            f.write(reinterpret_cast<const char*>(&len), 8);
            f << h << std::string(16, '\0');
        }
        auto two = safetensors_file::open(p.string(), mode);
        REQUIRE_FALSE(two.is_ok());
        CHECK(two.error().message().find("'a'") != std::string::npos);  // both problems in one error
        CHECK(two.error().message().find("Q9") != std::string::npos);
        {
            std::ofstream f(p, std::ios::binary);
            std::string h = "{not json";
            uint64_t len = h.size();
            f.write(reinterpret_cast<const char*>(&len), 8);
            f << h;
        }
        CHECK_FALSE(safetensors_file::open(p.string(), mode).is_ok());
    }
}

TEST_CASE("safetensors: written files put every tensor of a multiple of 64 bytes on a line; a copy in memory "
          "puts any file's data section on one") {
    temp_dir dir("st_align");
    const std::string p = dir.str() + "/model.safetensors";
    std::vector<uint16_t> odd = {1, 2, 3}, wide(64), odd2 = {4, 5, 6, 7, 8}, wider(128);
    for (size_t i = 0; i < wide.size(); ++i) wide[i] = static_cast<uint16_t>(100 + i);
    for (size_t i = 0; i < wider.size(); ++i) wider[i] = static_cast<uint16_t>(900 + i);
    REQUIRE(write_safetensors(p, {{"odd", dtype::bf16, {3}, bytes_of(odd)},
                                  {"wide", dtype::bf16, {2, 32}, bytes_of(wide)},
                                  {"odd2", dtype::bf16, {5}, bytes_of(odd2)},
                                  {"wider", dtype::bf16, {4, 32}, bytes_of(wider)}})
                .is_ok());
    for (weight_pages pages : {weight_pages::huge, weight_pages::mapped}) {
        auto ck = checkpoint::open_dir(dir.str(), pages);
        REQUIRE(ck.is_ok());
        // Declared between two odd-sized tensors, the 128- and 256-byte ones still start on a line.
        CHECK(reinterpret_cast<uintptr_t>(ck->find("wide")->data) % 64 == 0);
        CHECK(reinterpret_cast<uintptr_t>(ck->find("wider")->data) % 64 == 0);
        CHECK(std::memcmp(ck->find("odd")->data, odd.data(), 6) == 0);
        CHECK(std::memcmp(ck->find("wide")->data, wide.data(), 128) == 0);
        CHECK(std::memcmp(ck->find("odd2")->data, odd2.data(), 10) == 0);
        CHECK(std::memcmp(ck->find("wider")->data, wider.data(), 256) == 0);
    }

    // A file written elsewhere, its data section 8 + 56 = 64 + 0 … here at 8 + 80 = 88 ≡ 24 (mod 64):
    // the copy starts 40 bytes into its page so the data lands on a line; the mapping cannot.
    const std::string foreign = dir.str() + "/foreign.safetensors";
    {
        std::string header = R"({"t":{"dtype":"BF16","shape":[32],"data_offsets":[0,64]}})";
        while (header.size() < 80) header += ' ';
        std::ofstream f(foreign, std::ios::binary);
        const uint64_t n = header.size();
        f.write(reinterpret_cast<const char*>(&n), 8);
        f << header;
        f.write(reinterpret_cast<const char*>(wide.data()), 64);
    }
    auto copy = file_bytes::open(foreign, weight_pages::huge);
    auto mapped = file_bytes::open(foreign, weight_pages::mapped);
    REQUIRE(copy.is_ok());
    REQUIRE(mapped.is_ok());
    CHECK(reinterpret_cast<uintptr_t>((*copy)->data() + 88) % 64 == 0);
    CHECK(reinterpret_cast<uintptr_t>((*copy)->data()) % 64 == 40);
    CHECK(std::memcmp((*copy)->data(), (*mapped)->data(), static_cast<size_t>((*copy)->size())) == 0);
    CHECK(permissions_at((*copy)->data()) == "r--p");
}

TEST_CASE("safetensors: a file copied into memory holds the file's bytes, read-only, shared while alive") {
    temp_dir dir("st_pages");
    const fs::path p = dir.path / "model.safetensors";
    std::vector<float> a(100000);
    for (size_t i = 0; i < a.size(); ++i) a[i] = float(i) * 0.5f - 7.0f;
    REQUIRE(write_safetensors(p.string(), {{"a", dtype::f32, {100000}, bytes_of(a)}}).is_ok());
    const int64_t size = static_cast<int64_t>(fs::file_size(p));

    auto mapped = file_bytes::open(p.string(), weight_pages::mapped);
    auto copy = file_bytes::open(p.string(), weight_pages::huge);
    REQUIRE(mapped.is_ok());
    REQUIRE(copy.is_ok());
    CHECK((*copy)->mode() == weight_pages::huge);
    REQUIRE((*copy)->size() == size);
    CHECK(std::memcmp((*copy)->data(), (*mapped)->data(), static_cast<size_t>(size)) == 0);
    // Huge-page aligned (our writer starts the data section on a line, so the copy is not shifted).
    CHECK(reinterpret_cast<uintptr_t>((*copy)->data()) % (2 << 20) == 0);
    CHECK((*copy)->huge_page_bytes() <= size);
    CHECK((*mapped)->huge_page_bytes() == 0);
    CHECK(permissions_at((*copy)->data()) == "r--p");  // a stray write faults, as on the mapping
    CHECK(permissions_at((*mapped)->data()) == "r--s");

    // A second open while the first copy lives shares it (pd's two engines in one process) ...
    auto again = file_bytes::open(p.string(), weight_pages::huge);
    REQUIRE(again.is_ok());
    CHECK((*again)->data() == (*copy)->data());
    // ... and a checkpoint opened in huge mode reads its tensors from such a copy.
    auto ck = checkpoint::open_dir(dir.str(), weight_pages::huge);
    REQUIRE(ck.is_ok());
    CHECK(ck->copied_bytes() == size);
    CHECK(ck->file_bytes_total() == size);
    CHECK(std::memcmp(ck->find("a")->data, a.data(), a.size() * 4) == 0);
    auto ck_mapped = checkpoint::open_dir(dir.str(), weight_pages::mapped);
    REQUIRE(ck_mapped.is_ok());
    CHECK(ck_mapped->copied_bytes() == 0);

    // A file rewritten to the same size with other bytes is copied anew ...
    a[3] = 12345.0f;
    REQUIRE(write_safetensors(p.string(), {{"a", dtype::f32, {100000}, bytes_of(a)}}).is_ok());
    auto rewritten = file_bytes::open(p.string(), weight_pages::huge);
    REQUIRE(rewritten.is_ok());
    CHECK((*rewritten)->data() != (*copy)->data());
    float v = 0;
    std::memcpy(&v, (*rewritten)->data() + (size - 100000 * 4) + 3 * 4, 4);
    CHECK(v == 12345.0f);
    // ... and so is a changed file (another size).
    a.push_back(1.0f);
    REQUIRE(write_safetensors(p.string(), {{"a", dtype::f32, {100001}, bytes_of(a)}}).is_ok());
    auto changed = file_bytes::open(p.string(), weight_pages::huge);
    REQUIRE(changed.is_ok());
    CHECK((*changed)->data() != (*copy)->data());
    CHECK((*changed)->size() == static_cast<int64_t>(fs::file_size(p)));

    auto missing = file_bytes::open((dir.path / "nope.safetensors").string(), weight_pages::huge);
    REQUIRE_FALSE(missing.is_ok());
    CHECK(missing.error().code() == tandem::error_code::not_found);
    CHECK(missing.error().message().find("nope.safetensors") != std::string::npos);

    // A copy that would not fit in 90% of the memory available is mapped instead.
    const int64_t gib = int64_t{1} << 30;
    CHECK(pages_that_fit(weight_pages::huge, 8 * gib, 10 * gib) == weight_pages::huge);
    CHECK(pages_that_fit(weight_pages::huge, 9 * gib + 1, 10 * gib) == weight_pages::mapped);
    CHECK(pages_that_fit(weight_pages::huge, 100 * gib, 0) == weight_pages::huge);  // unknown: as asked
    CHECK(pages_that_fit(weight_pages::mapped, 1, 10 * gib) == weight_pages::mapped);
    CHECK(memory_available_bytes() > 0);  // Linux: /proc/meminfo

    auto bad = weight_pages_from("giant");
    REQUIRE_FALSE(bad.is_ok());
    CHECK(bad.error().message().find("model.weight_pages") != std::string::npos);
    CHECK(weight_pages_from("mapped").value() == weight_pages::mapped);
}

TEST_CASE("weights: missing, unexpected, mis-shaped and wrongly typed tensors are listed in one error") {
    temp_dir dir("weights_bad");
    make_checkpoint("tiny", 5, dir.str());
    std::vector<float> extra(3, 0.0f);
    std::vector<int32_t> wrong_type(64, 0);
    rewrite(dir.str(), [&](std::vector<tensor_to_write>& ts) {
        std::erase_if(ts, [](const tensor_to_write& t) { return t.name == "layers.1.attn.indexer.wq_b.weight"; });
        for (auto& t : ts) {
            if (t.name == "layers.2.attn.wkv.weight") t.shape = {t.shape[1], t.shape[0]};
            if (t.name == "norm.weight") t = {t.name, dtype::i32, {64}, bytes_of(wrong_type)};
        }
        ts.push_back({"layers.0.attn.bogus", dtype::f32, {3}, bytes_of(extra)});
    });
    auto r = model::load(dir.str());
    REQUIRE_FALSE(r.is_ok());
    const std::string& msg = r.error().message();
    MESSAGE(msg);
    CHECK(msg.find("missing tensor 'layers.1.attn.indexer.wq_b.weight'") != std::string::npos);
    CHECK(msg.find("'layers.2.attn.wkv.weight': shape") != std::string::npos);
    CHECK(msg.find("'norm.weight': dtype I32") != std::string::npos);
    CHECK(msg.find("unexpected tensor 'layers.0.attn.bogus'") != std::string::npos);
    CHECK(msg.find("4 problem(s)") != std::string::npos);
}

TEST_CASE("weights: a truncated checkpoint fails to load with a clear error") {
    temp_dir dir("weights_trunc");
    make_checkpoint("tiny", 5, dir.str());
    const fs::path p = dir.path / "model.safetensors";
    truncate_file(p, static_cast<int64_t>(fs::file_size(p)) / 2);
    auto r = model::load(dir.str());
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.error().message().find("truncated") != std::string::npos);
}

TEST_CASE("weights: transformers naming (fused experts, no MTP) loads the same model") {
    temp_dir up("naming_up"), hf("naming_hf");
    make_checkpoint("tiny", 6, up.str());
    make_checkpoint("tiny", 6, hf.str(), tensor_naming::transformers);
    session a(up.str(), 1), b(hf.str(), 1);
    std::vector<int32_t> tokens = {3, 17, 99, 1000, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18};
    CHECK(a.run(a.new_sequence(), tokens, 0, true) == b.run(b.new_sequence(), tokens, 0, true));
}

TEST_CASE("weights: flash-shape checkpoint (FP8 block weights, FP4 experts, E8M0 scales) loads") {
    auto cfg = preset_config("flash-shape");
    REQUIRE(cfg.is_ok());
    temp_dir dir("flash");
    make_checkpoint("flash-shape", 1, dir.str());
    auto ck = checkpoint::open_dir(dir.str());
    REQUIRE(ck.is_ok());
    CHECK(ck->find("layers.0.attn.wq_a.weight")->type == dtype::f8_e4m3);
    CHECK(ck->find("layers.0.attn.wq_a.scale")->type == dtype::f8_e8m0);
    CHECK(ck->find("layers.0.ffn.experts.0.w1.weight")->type == dtype::i8);
    CHECK(ck->find("mtp.0.e_proj.weight") != nullptr);
    auto w = load_weights(*cfg, *ck);
    REQUIRE_MESSAGE(w.is_ok(), w.error().message());
    CHECK(w->layers.size() == cfg->layers.size());  // MTP block loaded too
    // Dequantized values are the FP8/FP4 grid times power-of-two scales: finite, non-trivial.
    const tensor& e = w->layers[2].moe.experts[3].w2;
    CHECK(e.shape == std::vector<int64_t>{cfg->hidden_size, cfg->moe_intermediate_size});
    // Kept in place as packed FP4 (no fp32 copy); decoding gives the grid values × scales.
    CHECK(e.mat.form == tandem::cpu::weight_form::fp4_e2m1);
    CHECK(e.data.empty());
    double sum_sq = 0;
    std::vector<float> row(static_cast<size_t>(e.mat.cols));
    for (int64_t r = 0; r < e.mat.rows; ++r) {
        e.mat.decode_row(r, row.data());
        for (float v : row) sum_sq += double(v) * v;
    }
    const double rms = std::sqrt(sum_sq / double(e.mat.rows * e.mat.cols));
    CHECK(rms > 0.5 / std::sqrt(double(cfg->moe_intermediate_size)));
    CHECK(rms < 2.0 / std::sqrt(double(cfg->moe_intermediate_size)));
}

TEST_CASE("safetensors: a file in memory is read and refused like a file on disk") {
    const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    std::vector<uint8_t> bytes(8);
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(header.size() >> (8 * i));
    bytes.insert(bytes.end(), header.begin(), header.end());
    bytes.resize(bytes.size() + 8, 0);
    auto f = safetensors_file::open_bytes(bytes, "mem.safetensors");
    REQUIRE(f);
    REQUIRE((*f)->tensors().count("a") == 1);
    CHECK((*f)->tensors().at("a").nbytes == 8);
    CHECK((*f)->tensors().at("a").data == bytes.data() + 8 + header.size());
    bytes.resize(bytes.size() - 1);  // the data section one byte short
    auto cut = safetensors_file::open_bytes(bytes, "mem.safetensors");
    REQUIRE_FALSE(cut);
    CHECK(cut.error().code() == tandem::error_code::data_loss);
    CHECK(cut.error().message().find("mem.safetensors") != std::string::npos);
    CHECK(cut.error().message().find("runs past the end") != std::string::npos);
}
