// cuda/host/kernel_views.h — Host structs as the plain views the kernels take: a CPU weight matrix
// (cpu/weight_matrix.h) and a cache row format (cache/layout.h). The same stored bytes and scales,
// no conversion; the enums share their order with the host ones.
#pragma once

#include "cache/layout.h"
#include "cpu/weight_matrix.h"
#include "cuda/host/kernel_codec.h"
#include "cuda/host/kernel_math.h"

namespace tandem::cuda {

inline kmath::weight_view weight_view_of(const cpu::weight_matrix& m) {
    return {.form = static_cast<kmath::wform>(m.form), .scale = static_cast<kmath::sform>(m.scale), .rows = m.rows,
            .cols = m.cols, .row0 = m.row0, .data = m.data, .scales = m.scales, .block_rows = m.block_rows,
            .block_cols = m.block_cols, .scale_cols = m.scale_cols};
}

inline kmath::row_codec row_codec_of(const cache::row_format& f) {
    return {.encoding = static_cast<kmath::row_enc>(f.encoding), .dims = f.dims, .value_elems = f.value_elems,
            .value_bytes = f.value_bytes, .rope_elems = f.rope_elems, .rope_bytes = f.rope_bytes,
            .scale_bytes = f.scale_bytes, .pad_bytes = f.pad_bytes, .scale_block = f.scale_block, .bytes = f.bytes};
}

// Bytes of the stored matrix a view reaches: values of rows [0, row0 + rows) and their scales.
struct weight_extent {
    int64_t data = 0, scales = 0;
};
inline weight_extent stored_extent(const kmath::weight_view& w) {
    weight_extent b;
    b.data = (w.row0 + w.rows) * w.row_bytes();
    if (w.scale != kmath::sform::none)
        b.scales = ((w.row0 + w.rows + w.block_rows - 1) / w.block_rows) * w.scale_cols *
                   (w.scale == kmath::sform::f32 ? 4 : 1);
    return b;
}

}  // namespace tandem::cuda
