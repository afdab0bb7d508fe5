// test/cuda/parity_report.h — What the GPU parity binaries print and write: one line per check
// (PASS / FAIL with the first difference), a JSON summary for tools/gpu_check.sh, and the exit
// code meson reads (0 all passed, 1 any failed, 77 SKIP: no GPU — never a pass).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace tandem::parity {

struct check_result {
    std::string tier, name;
    bool passed = false;
    std::string detail;
};

class report {
public:
    void add(const std::string& tier, const std::string& name, bool passed, const std::string& detail = {}) {
        results_.push_back({tier, name, passed, detail});
        std::printf("%s  [%s] %s%s%s\n", passed ? "PASS" : "FAIL", tier.c_str(), name.c_str(),
                    detail.empty() ? "" : ": ", detail.c_str());
        std::fflush(stdout);
    }
    bool all_passed() const {
        for (const auto& r : results_)
            if (!r.passed) return false;
        return !results_.empty();
    }
    // {"binary": ..., "passed": n, "failed": n, "checks": [{"tier","name","passed","detail"}]}
    void write_json(const std::string& path, const std::string& binary) const {
        if (path.empty()) return;
        std::FILE* f = std::fopen(path.c_str(), "w");
        if (!f) return;
        int passed = 0;
        for (const auto& r : results_) passed += r.passed;
        std::fprintf(f, "{\"binary\":\"%s\",\"passed\":%d,\"failed\":%d,\"checks\":[", binary.c_str(), passed,
                     static_cast<int>(results_.size()) - passed);
        for (size_t i = 0; i < results_.size(); ++i) {
            std::string d;
            for (char c : results_[i].detail) d += (c == '"' || c == '\\') ? '\'' : c;
            std::fprintf(f, "%s{\"tier\":\"%s\",\"name\":\"%s\",\"passed\":%s,\"detail\":\"%s\"}", i ? "," : "",
                         results_[i].tier.c_str(), results_[i].name.c_str(), results_[i].passed ? "true" : "false",
                         d.c_str());
        }
        std::fprintf(f, "]}\n");
        std::fclose(f);
    }
    int exit_code() const { return all_passed() ? 0 : 1; }

private:
    std::vector<check_result> results_;
};

// "--json PATH" from argv, or "".
inline std::string json_path_arg(int argc, char** argv) {
    for (int i = 1; i + 1 < argc; ++i)
        if (std::string(argv[i]) == "--json") return argv[i + 1];
    return {};
}

}  // namespace tandem::parity
