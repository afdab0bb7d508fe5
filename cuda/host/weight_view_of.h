// cuda/host/weight_view_of.h — A CPU weight matrix (cpu/weight_matrix.h) as the plain view the
// kernels take: the same stored bytes and scales, no conversion. The two enums share their order.
#pragma once

#include "cpu/weight_matrix.h"
#include "cuda/host/kernel_math.h"

namespace tandem::cuda {

inline kmath::weight_view weight_view_of(const cpu::weight_matrix& m) {
    kmath::weight_view v;
    v.form = static_cast<kmath::wform>(m.form);
    v.scale = static_cast<kmath::sform>(m.scale);
    v.rows = m.rows;
    v.cols = m.cols;
    v.row0 = m.row0;
    v.data = m.data;
    v.scales = m.scales;
    v.block_rows = m.block_rows;
    v.block_cols = m.block_cols;
    v.scale_cols = m.scale_cols;
    return v;
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
