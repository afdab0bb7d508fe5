// cuda/host/device_attention.cpp — the attention sublayer of the device forward: q path (K7), kv
// path (K8, one fused launch after its linear), compressors (K9: ring updates and pooling in one
// launch per compressor and step), indexer (K10 q path fused after its linear, K11 scores, K12
// top-k on the device with the CPU's selection for boundary-tied rows), sparse attention with sink
// over window + compressed rows (K13), grouped output. model/attention.cpp is the reference; each
// phase below names the function there it restates.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "cuda/host/device_forward.h"
#include "model/top_k.h"

namespace tandem::cuda {

namespace {

status stale(const char* what) {
    return make_error(error_code::internal, fmt::format("{} rejected (stale sequence slot, or a sealed or stale page)", what));
}

}  // namespace

// run_compressor + compress: one launch feeds every sequence's tokens through its ring in token
// order and pools each window it closes (kmath::compressor_feed_feature: one thread per
// (sequence, feature), so a closed window is pooled before a later token of the same step
// overwrites its slots, as on the CPU); then every emitted row is normed, RoPE'd at its window's
// first position, simulated (official) and stored — batched, since they depend only on the
// pooled values. The host only plans: each ring's address, and which windows close where.
status device_forward::compress(const cache::layer_view& view, const step_metadata& meta,
                                std::span<const cache::slot_ref> slots, const float* x, const dev_compressor& cw,
                                int64_t dim, bool overlap, bool indexer) {
    const model::layer_config& lc = cfg_.layers[static_cast<size_t>(view.layer())];
    const int64_t T = meta.rows, m = lc.compress_ratio, cd = (overlap ? 2 : 1) * dim, R = cfg_.rope_head_dim;
    const cache::state_kind sk = indexer ? cache::state_kind::index_compressor : cache::state_kind::attn_compressor;
    const cache::buffer_kind bk = indexer ? cache::buffer_kind::index_k : cache::buffer_kind::compressed_kv;
    const kmath::row_codec fmt = row_codec_of(indexer ? view.layout().index_k_row() : view.layout().kv_row());
    result<float*> ckv = scratch<float>(b_ckv, T * cd), cg = scratch<float>(b_cg, T * cd), pooled = scratch<float>(b_pooled, T * dim);
    for (auto* r : {&ckv, &cg, &pooled})
        if (!*r) return r->error();
    TANDEM_RETURN_IF_ERROR(linear(x, T, cw.wkv, *ckv));
    TANDEM_RETURN_IF_ERROR(linear(x, T, cw.wgate, *cg));
    std::vector<float*> rings(slots.size());
    std::vector<int64_t> seq(4 * slots.size());  // row0, rows, start, first emission
    std::vector<int64_t> emit_pos;
    std::vector<uint8_t*> emit_dst;
    for (size_t si = 0; si < slots.size(); ++si) {
        rings[si] = view.compressor_state_for_write(slots[si], sk);
        if (!rings[si]) return stale("compressor state write");
        const int64_t start = meta.item_start[si], rows = meta.item_rows[si];
        seq[4 * si] = meta.item_row0[si], seq[4 * si + 1] = rows, seq[4 * si + 2] = start;
        seq[4 * si + 3] = static_cast<int64_t>(emit_pos.size());
        for (int64_t pos = start; pos < start + rows; ++pos) {
            if (pos % m != m - 1) continue;
            std::byte* row = view.row_for_write(slots[si], bk, pos / m);
            if (!row) return stale("compressed row write");
            emit_pos.push_back(pos + 1 - m);
            emit_dst.push_back(reinterpret_cast<uint8_t*>(row));
        }
    }
    result<float**> ring_ptrs = upload_scratch<float*>(b_rings, rings);
    if (!ring_ptrs) return ring_ptrs.error();
    result<int64_t*> dseq = upload_scratch<int64_t>(b_seq, seq);
    if (!dseq) return dseq.error();
    TANDEM_RETURN_IF_ERROR(ops_.compressor_update(*ckv, *cg, cw.ape.p, *ring_ptrs, *dseq, static_cast<int64_t>(slots.size()),
                                                  m, dim, overlap, *pooled));
    const int64_t E = static_cast<int64_t>(emit_pos.size());
    if (E == 0) return status::ok();
    result<int64_t*> epos = upload_scratch<int64_t>(b_emit_pos, emit_pos);
    if (!epos) return epos.error();
    result<uint8_t**> addr = upload_scratch<uint8_t*>(b_addr, emit_dst);
    if (!addr) return addr.error();
    TANDEM_RETURN_IF_ERROR(ops_.rms_norm(*pooled, E, dim, cw.norm.p, static_cast<float>(cfg_.rms_norm_eps), *pooled));
    TANDEM_RETURN_IF_ERROR(ops_.rope(*pooled, E, 1, dim, rope_compress_.get<float>(), rope_half_compress_, *epos, false));
    if (official_)
        TANDEM_RETURN_IF_ERROR(indexer ? ops_.official_sim(official_sim::indexer_fp4, *pooled, E, dim, 0)
                                       : ops_.official_sim(official_sim::kv_fp8, *pooled, E, dim, dim - R));
    return ops_.encode_rows(fmt, *pooled, E, *addr);
}

// select_rows: every visible compressed row (HCA, or CSA with few rows) — the host knows those —
// else the indexer's top-k over the sequence's index-K rows: K11 scores and K12 on the device, the
// ids staying there for place_selected. Only a row K12 flags as tied at its k-th boundary
// downloads its scores and runs the CPU's selection (model::top_k_ascending), whose ids replace K12's, so
// the rows chosen equal the CPU's exactly; the common case downloads one flag per row.
status device_forward::select_compressed(const cache::layer_view& view, const step_metadata& meta,
                                         std::span<const cache::slot_ref> slots, selection& sel) {
    const model::layer_config& lc = cfg_.layers[static_cast<size_t>(view.layer())];
    const dev_attention& aw = w_.layers[static_cast<size_t>(view.layer())].attn;
    const int64_t T = meta.rows, m = lc.compress_ratio, Di = cfg_.index_head_dim, Hi = cfg_.index_n_heads,
                  K = cfg_.index_topk;
    sel.host.assign(static_cast<size_t>(T), {});
    sel.on_device.assign(static_cast<size_t>(T), 0);
    sel.device = nullptr;
    std::vector<int32_t> n_keys(static_cast<size_t>(T), 0);
    int64_t max_visible = 0;
    bool any_scored = false;
    for (int64_t r = 0; r < T; ++r) {
        const int64_t visible = compressed_rows_visible(meta.position[r], m);
        max_visible = std::max(max_visible, visible);
        if (!aw.has_indexer || visible <= K) {
            sel.host[r].resize(static_cast<size_t>(visible));
            std::iota(sel.host[r].begin(), sel.host[r].end(), 0);
        } else {
            n_keys[r] = static_cast<int32_t>(visible);
            sel.on_device[r] = 1;
            any_scored = true;
        }
    }
    if (!any_scored) return status::ok();
    // Each scored sequence's index-K rows, decoded once: [Σ n_rows, Di].
    std::vector<uint8_t*> src;
    std::vector<int64_t> base(slots.size());
    for (size_t si = 0; si < slots.size(); ++si) {
        base[si] = static_cast<int64_t>(src.size());
        const int64_t n_rows = (meta.item_start[si] + meta.item_rows[si]) / m;
        for (int64_t wv = 0; wv < n_rows; ++wv) {
            const std::byte* row = view.row(slots[si], cache::buffer_kind::index_k, wv);
            if (!row) return stale("index-K row read");
            src.push_back(const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(row)));
        }
    }
    std::vector<int32_t> key_index(static_cast<size_t>(T * max_visible), 0);
    for (int64_t r = 0; r < T; ++r)
        for (int64_t j = 0; j < n_keys[r]; ++j) key_index[r * max_visible + j] = static_cast<int32_t>(base[meta.row_item[r]] + j);
    const kmath::row_codec ik = row_codec_of(view.layout().index_k_row());
    result<uint8_t**> addr = upload_scratch<uint8_t*>(b_addr2, src);
    if (!addr) return addr.error();
    result<float*> rows = scratch<float>(b_idx_rows, static_cast<int64_t>(src.size()) * Di),
                   scores = scratch<float>(b_scores, T * max_visible);
    result<int32_t*> kidx = upload_scratch<int32_t>(b_key_idx, key_index), nk = upload_scratch<int32_t>(b_n_keys, n_keys);
    result<int32_t*> ids = scratch<int32_t>(b_sel, T * K), tied = scratch<int32_t>(b_tied, T);
    for (auto* r : {&rows, &scores})
        if (!*r) return r->error();
    for (auto* r : {&kidx, &nk, &ids, &tied})
        if (!*r) return r->error();
    result<float*> qi = scratch<float>(b_qi, T * Hi * Di), iw = scratch<float>(b_iw, T * Hi);
    if (!qi) return qi.error();
    if (!iw) return iw.error();
    TANDEM_RETURN_IF_ERROR(ops_.decode_rows(ik, *addr, static_cast<int64_t>(src.size()), *rows));
    const float idx_scale = 1.0f / std::sqrt(static_cast<float>(Di)), head_scale = 1.0f / std::sqrt(static_cast<float>(Hi));
    TANDEM_RETURN_IF_ERROR(
        ops_.indexer_scores(*qi, T, Hi, Di, *iw, *rows, *kidx, max_visible, *nk, idx_scale, head_scale, *scores));
    TANDEM_RETURN_IF_ERROR(ops_.top_k(*scores, T, max_visible, *nk, K, *ids, *tied));
    std::vector<int32_t> host_tied(static_cast<size_t>(T));
    TANDEM_RETURN_IF_ERROR(ops_.download(host_tied.data(), *tied, T * 4));
    std::vector<float> row_scores;
    std::vector<int32_t> chosen;
    for (int64_t r = 0; r < T; ++r) {
        if (!sel.on_device[r]) continue;
        ++top_k_.rows;
        if (!host_tied[r]) continue;
        ++top_k_.host_rows;
        row_scores.resize(static_cast<size_t>(n_keys[r]));
        TANDEM_RETURN_IF_ERROR(ops_.download(row_scores.data(), *scores + r * max_visible, n_keys[r] * int64_t{4}));
        model::top_k_ascending(row_scores, K, chosen);
        TANDEM_RETURN_IF_ERROR(ops_.upload(*ids + r * K, chosen.data(), K * 4));
    }
    sel.device = *ids;
    return status::ok();
}

status device_forward::attention(const cache::layer_view& view, const step_metadata& meta,
                                 std::span<const cache::slot_ref> slots, const float* x, float* out) {
    const model::layer_config& lc = cfg_.layers[static_cast<size_t>(view.layer())];
    const dev_attention& aw = w_.layers[static_cast<size_t>(view.layer())].attn;
    const int64_t T = meta.rows, H = cfg_.num_attention_heads, D = cfg_.head_dim, R = cfg_.rope_head_dim, N = D - R,
                  W = cfg_.sliding_window, ql = cfg_.q_lora_rank, m = lc.compress_ratio;
    const float eps = static_cast<float>(cfg_.rms_norm_eps);
    const bool sliding = lc.attention == model::attention_type::sliding;
    const float* table = sliding ? rope_main_.get<float>() : rope_compress_.get<float>();
    const int64_t half = sliding ? rope_half_main_ : rope_half_compress_;
    const kmath::row_codec kv_fmt = row_codec_of(view.layout().kv_row());
    result<float*> qr = scratch<float>(b_qr, T * ql), kv = scratch<float>(b_kv, T * D), q = scratch<float>(b_q, T * H * D),
                   o = scratch<float>(b_o, T * H * D);
    for (auto* r : {&qr, &kv, &q, &o})
        if (!*r) return r->error();
    result<int64_t*> pos = scratch<int64_t>(b_pos, T);
    if (!pos) return pos.error();

    // project(): q (per-head unweighted RMSNorm + RoPE), kv (K8 fused: RMSNorm, RoPE, official
    // FP8, then rounded through its storage format — what every reader sees — in one launch).
    TANDEM_RETURN_IF_ERROR(linear(x, T, aw.wq_a, *qr));
    TANDEM_RETURN_IF_ERROR(linear(x, T, aw.wkv, *kv));
    TANDEM_RETURN_IF_ERROR(ops_.rms_norm(*qr, T, ql, aw.q_norm.p, eps, *qr));
    {
        result<float*> bytes = scratch<float>(b_contrib, (T * kv_fmt.bytes + 3) / 4);
        if (!bytes) return bytes.error();
        TANDEM_RETURN_IF_ERROR(ops_.kv_path(*kv, T, D, aw.kv_norm.p, eps, table, half, *pos, official_, N, kv_fmt,
                                            reinterpret_cast<uint8_t*>(*bytes)));
    }
    TANDEM_RETURN_IF_ERROR(linear(*qr, T, aw.wq_b, *q));
    TANDEM_RETURN_IF_ERROR(ops_.rms_norm(*q, T * H, D, nullptr, eps, *q));
    TANDEM_RETURN_IF_ERROR(ops_.rope(*q, T, H, D, table, half, *pos, false));

    // compress_all()
    selection sel;
    sel.host.assign(static_cast<size_t>(T), {});
    sel.on_device.assign(static_cast<size_t>(T), 0);
    if (aw.has_compressor) {
        TANDEM_RETURN_IF_ERROR(compress(view, meta, slots, x, aw.compressor, D, !sliding && lc.attention == model::attention_type::csa, false));
        if (aw.has_indexer) {
            const int64_t Di = cfg_.index_head_dim, Hi = cfg_.index_n_heads;
            TANDEM_RETURN_IF_ERROR(compress(view, meta, slots, x, aw.idx_compressor, Di, true, true));
            result<float*> qi = scratch<float>(b_qi, T * Hi * Di), iw = scratch<float>(b_iw, T * Hi);
            if (!qi) return qi.error();
            if (!iw) return iw.error();
            TANDEM_RETURN_IF_ERROR(linear(*qr, T, aw.idx_wq_b, *qi));
            TANDEM_RETURN_IF_ERROR(linear(x, T, aw.idx_weights_proj, *iw));
            TANDEM_RETURN_IF_ERROR(
                ops_.indexer_q_path(*qi, T, Hi, Di, rope_compress_.get<float>(), rope_half_compress_, *pos, official_));
        }
        TANDEM_RETURN_IF_ERROR(select_compressed(view, meta, slots, sel));
    }

    // read_state() + attend(): key rows = [this step's kv rows | each sequence's ring rows before
    // the step | its compressed rows], and each token's key list in the CPU's order (window rows
    // by position, then selected compressed rows by index). The host writes the window part and
    // the compressed ids it knows; place_selected writes K12's ids on the device. Only the key
    // rows some list names are decoded (keep).
    std::vector<uint8_t*> src;  // rows the kernels only read
    std::vector<int64_t> win_base(slots.size()), comp_base(slots.size());
    for (size_t si = 0; si < slots.size(); ++si) {
        const int64_t start = meta.item_start[si];
        win_base[si] = T + static_cast<int64_t>(src.size());
        for (int64_t p = std::max<int64_t>(0, start - W); p < start; ++p) {
            const std::byte* row = view.window_row(slots[si], p);
            if (!row) return stale("window row read");
            src.push_back(const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(row)));
        }
        win_base[si] -= std::max<int64_t>(0, start - W);  // so that base + p indexes position p
        comp_base[si] = T + static_cast<int64_t>(src.size());
        if (!aw.has_compressor) continue;
        const int64_t n_rows = (start + meta.item_rows[si]) / m;
        for (int64_t wv = 0; wv < n_rows; ++wv) {
            const std::byte* row = view.row(slots[si], cache::buffer_kind::compressed_kv, wv);
            if (!row) return stale("compressed row read");
            src.push_back(const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(row)));
        }
    }
    const int64_t K = cfg_.index_topk, n_keyrows = T + static_cast<int64_t>(src.size());
    auto n_selected = [&](int64_t r) { return sel.on_device[r] ? K : static_cast<int64_t>(sel.host[r].size()); };
    int64_t max_keys = 1;
    bool any_device = false;
    for (int64_t r = 0; r < T; ++r) {
        max_keys = std::max<int64_t>(max_keys, meta.position[r] - meta.window_first[r] + 1 + n_selected(r));
        any_device |= sel.on_device[r] != 0;
    }
    std::vector<int32_t> key_index(static_cast<size_t>(T * max_keys), 0), n_keys(static_cast<size_t>(T)),
        sel_at(static_cast<size_t>(T), -1), base(static_cast<size_t>(T), 0), keep(static_cast<size_t>(n_keyrows), 0);
    for (int64_t r = 0; r < T; ++r) {
        const int64_t si = meta.row_item[r], start = meta.item_start[si], t = meta.position[r];
        int32_t* ki = &key_index[r * max_keys];
        int64_t j = 0;
        for (int64_t p = meta.window_first[r]; p <= t; ++p)
            ki[j++] = static_cast<int32_t>(p >= start ? meta.item_row0[si] + p - start : win_base[si] + p);
        if (sel.on_device[r]) {
            sel_at[r] = static_cast<int32_t>(j);
            base[r] = static_cast<int32_t>(comp_base[si]);
            n_keys[r] = static_cast<int32_t>(j + K);
        } else {
            for (int32_t wv : sel.host[r]) ki[j++] = static_cast<int32_t>(comp_base[si] + wv);
            n_keys[r] = static_cast<int32_t>(j);
        }
        for (int64_t i = 0; i < j; ++i) keep[ki[i]] = 1;
    }
    result<float*> keys = scratch<float>(b_keys, n_keyrows * D);
    if (!keys) return keys.error();
    result<int32_t*> kidx = upload_scratch<int32_t>(b_key_idx, key_index), nk = upload_scratch<int32_t>(b_n_keys, n_keys),
                     dkeep = upload_scratch<int32_t>(b_keep, keep);
    for (auto* r : {&kidx, &nk, &dkeep})
        if (!*r) return r->error();
    if (any_device) {
        result<int32_t*> dat = upload_scratch<int32_t>(b_at, sel_at), dbase = upload_scratch<int32_t>(b_base, base);
        if (!dat) return dat.error();
        if (!dbase) return dbase.error();
        TANDEM_RETURN_IF_ERROR(ops_.place_selected(sel.device, T, K, *dat, *dbase, *kidx, max_keys, *dkeep));
    }
    TANDEM_RETURN_IF_ERROR(ops_.copy(*keys, *kv, T * D * 4));
    if (!src.empty()) {
        result<uint8_t**> addr = upload_scratch<uint8_t*>(b_addr, src);
        if (!addr) return addr.error();
        TANDEM_RETURN_IF_ERROR(
            ops_.decode_kept_rows(kv_fmt, *addr, static_cast<int64_t>(src.size()), *dkeep + T, *keys + T * D));
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    TANDEM_RETURN_IF_ERROR(ops_.attention(*q, T, H, D, *keys, *kidx, max_keys, *nk, aw.sink.p, scale, *o));
    TANDEM_RETURN_IF_ERROR(ops_.rope(*o, T, H, D, table, half, *pos, true));  // K = V carried RoPE at the key position

    // write_window(): the step's kv rows enter the ring only now.
    std::vector<uint8_t*> dst;
    std::vector<int64_t> first(slots.size()), count(slots.size());
    for (size_t si = 0; si < slots.size(); ++si) {
        const int64_t start = meta.item_start[si], end = start + meta.item_rows[si];
        first[si] = std::max(start, end - W);
        count[si] = end - first[si];
        for (int64_t p = first[si]; p < end; ++p) {
            std::byte* row = view.window_row_for_write(slots[si], p);
            if (!row) return stale("window row write");
            dst.push_back(reinterpret_cast<uint8_t*>(row));
        }
    }
    result<uint8_t**> waddr = upload_scratch<uint8_t*>(b_addr, dst);
    if (!waddr) return waddr.error();
    int64_t at = 0;
    for (size_t si = 0; si < slots.size(); ++si) {
        const int64_t r0 = meta.item_row0[si] + first[si] - meta.item_start[si];
        TANDEM_RETURN_IF_ERROR(ops_.encode_rows(kv_fmt, *kv + r0 * D, count[si], *waddr + at));
        at += count[si];
    }

    // output(): grouped low-rank projection (wo_a without activation QDQ, as the CPU), then wo_b.
    const int64_t g = cfg_.o_groups, ro = cfg_.o_lora_rank, gw = H * D / g;
    result<float*> z = scratch<float>(b_z, T * g * ro);
    if (!z) return z.error();
    for (int64_t gi = 0; gi < g; ++gi) {
        kmath::weight_view slice = aw.wo_a.view;
        slice.row0 += gi * ro;
        slice.rows = ro;
        TANDEM_RETURN_IF_ERROR(ops_.linear(*o + gi * gw, H * D, T, slice, *z + gi * ro, g * ro));
    }
    return linear(*z, T, aw.wo_b, out);
}

}  // namespace tandem::cuda
