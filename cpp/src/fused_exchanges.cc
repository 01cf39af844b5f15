// Fused exchanges: which exchange and compute steps the host may run tile
// by tile (Executable::fused), and which tiles must wait for every copy.
#include "fused_exchanges.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "host_threads.h"

namespace neurenix {

void fuse_exchanges(Executable& exe) {
  const Graph& g = exe.graph();
  const uint32_t ntiles = g.num_tiles();
  exe.fused_.assign(exe.program_.size(), {});
  exe.fused_late_.assign(exe.program_.size(), {});
  {
    // Pairs are independent: examined on the host's threads, each with its
    // own scratch.
    struct FuseScratch {
      std::vector<std::vector<std::pair<uint64_t, uint64_t>>> writes;  // per tile: byte ranges, merged
      std::vector<uint8_t> late;
      std::vector<uint32_t> touched;
    };
    const int64_t nprog = static_cast<int64_t>(exe.program_.size());
    on_host_threads<FuseScratch>(nprog - 1, [&](int64_t si, FuseScratch& sc) {
      const size_t s = static_cast<size_t>(si);
      const Step& ex = exe.program_[s];
      const Step& cs = exe.program_[s + 1];
      if (ex.kind != StepKind::kExchange || cs.kind != StepKind::kCompute || exe.staged_[ex.index]) return;
      if (std::find(exe.segment_starts_.begin(), exe.segment_starts_.end(), s + 1) != exe.segment_starts_.end()) return;
      if (sc.writes.size() < ntiles) {
        sc.writes.resize(ntiles);
        sc.late.assign(ntiles, 0);
      }
      auto& writes = sc.writes;
      auto& late = sc.late;
      auto& touched = sc.touched;
      const auto& vsched = exe.compute_schedule_[cs.index];
      for (const auto& tv : vsched) {
        auto& w = writes[tv.tile];
        for (const Vertex* v : tv.vertices)
          for (const Field* f : v->fields())
            if (f->access != Access::kRead && f->count)
              w.emplace_back(f->byte_offset, f->byte_offset + f->count * device_type_size(g.var(f->var).dtype));
        std::sort(w.begin(), w.end());
        size_t n = 0;
        for (const auto& r : w) {
          if (n && r.first <= w[n - 1].second) w[n - 1].second = std::max(w[n - 1].second, r.second);
          else w[n++] = r;
        }
        w.resize(n);
        touched.push_back(tv.tile);
      }
      // A byte copy reads [lo, hi) of its source tile; the tile's own copies
      // all run before its vertices.
      const auto& bsched = exe.byte_schedule_[ex.index];
      const auto& copies = exe.byte_copies_[ex.index];
      size_t nlate = 0;
      for (const auto& tb : bsched)
        for (uint32_t k = tb.begin; k < tb.end; ++k) {
          const auto& c = copies[k];
          const auto& w = writes[c.src_tile];
          if (w.empty() || c.src_tile == tb.dst_tile || late[c.src_tile]) continue;
          const int64_t o = static_cast<int64_t>(c.outer) - 1, e = static_cast<int64_t>(c.count) - 1;
          const uint64_t lo = static_cast<uint64_t>(c.src_byte + std::min<int64_t>(0, o * c.src_outer) +
                                                    std::min<int64_t>(0, e * c.src_stride));
          const uint64_t hi = static_cast<uint64_t>(c.src_byte + std::max<int64_t>(0, o * c.src_outer) +
                                                    std::max<int64_t>(0, e * c.src_stride) + c.elem);
          auto it = std::upper_bound(w.begin(), w.end(), std::make_pair(lo, UINT64_MAX));
          if ((it != w.begin() && std::prev(it)->second > lo) || (it != w.end() && it->first < hi)) {
            late[c.src_tile] = 1;
            ++nlate;
          }
        }
      if (nlate < vsched.size()) {
        // Merge the two schedules, both by ascending tile.
        auto& out = exe.fused_[s];
        size_t a = 0, b = 0;
        while (a < bsched.size() || b < vsched.size()) {
          const uint32_t ta = a < bsched.size() ? bsched[a].dst_tile : UINT32_MAX;
          const uint32_t tb = b < vsched.size() ? vsched[b].tile : UINT32_MAX;
          Executable::FusedTile ft{std::min(ta, tb), 0, 0, {nullptr, nullptr}};
          if (ta == ft.tile) {
            ft.begin = bsched[a].begin;
            ft.end = bsched[a].end;
            ++a;
          }
          if (tb == ft.tile) {
            if (late[tb]) exe.fused_late_[s].push_back(vsched[b]);
            else ft.vertices = vsched[b].vertices;
            ++b;
          }
          out.push_back(ft);
        }
      }
      for (uint32_t tile : touched) {
        writes[tile].clear();
        late[tile] = 0;
      }
      touched.clear();
    });
  }
}

}  // namespace neurenix
