// The process allocator is mimalloc: malloc, new and the standard containers all land in its heap.
#include <doctest/doctest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tandem_build_config.h"

#if TANDEM_ALLOCATOR_MIMALLOC
#include <mimalloc.h>

TEST_CASE("malloc, new and std containers allocate from mimalloc") {
    void* p = std::malloc(100);
    auto* q = new int[1000];
    std::vector<double> v(12345);
    std::string s(5000, 'x');
    CHECK(mi_is_in_heap_region(p));
    CHECK(mi_is_in_heap_region(q));
    CHECK(mi_is_in_heap_region(v.data()));
    CHECK(mi_is_in_heap_region(s.data()));
    // A pointer mimalloc never handed out is not in its heap, so the checks above can fail.
    int on_stack = 0;
    CHECK_FALSE(mi_is_in_heap_region(&on_stack));
    std::free(p);
    delete[] q;
}
#else
TEST_CASE("the system allocator is configured (sanitizer builds)") {
    // Sanitizers interpose malloc themselves; mimalloc is deliberately not linked.
    CHECK(std::string(TANDEM_ALLOCATOR) == "system");
}
#endif
