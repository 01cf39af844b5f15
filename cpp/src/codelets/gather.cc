// Gather vertex: copies the table rows its indices name.
#include "neurenix/codelets/gather.h"

#include <cstring>

#include "neurenix/error.h"

namespace neurenix {

GatherVertex::GatherVertex(uint32_t tile_, Field table, Field indices, Field out, uint32_t rows, uint32_t cols,
                           uint32_t ld, DeviceType dtype)
    : table_(table), idx_(indices), out_(out), rows_(rows), cols_(cols), ld_(ld), dtype_(dtype) {
  tile = tile_;
  table_.field().access = Access::kRead;
  idx_.field().access = Access::kRead;
  out_.field().access = Access::kWrite;
  NX_CHECK(rows_ == 0 || (rows_ - 1) * static_cast<uint64_t>(ld_) + cols_ <= table_.count, "gather table exceeds its field");
  NX_CHECK(out_.count == idx_.count * cols_, "gather output size mismatch");
}

void GatherVertex::list_fields(std::vector<Field*>& out) {
  out.push_back(&table_.field());
  out.push_back(&idx_.field());
  out.push_back(&out_.field());
}

void GatherVertex::list_refs(std::vector<const FieldRef*>& out) const {
  out.push_back(&table_);
  out.push_back(&idx_);
  out.push_back(&out_);
}

uint64_t GatherVertex::cycles(const TargetSpec& t) const {
  return t.vertex_overhead_cycles +
         worker_rounded(t, idx_.count) * (6 + cols_ * device_type_size(dtype_) / t.local_read_bytes_per_cycle);
}

void GatherVertex::compute(uint8_t* mem) const {
  const int32_t* idx = reinterpret_cast<const int32_t*>(mem + idx_.address);
  const uint8_t* table = mem + table_.address;
  uint8_t* out = mem + out_.address;
  const size_t es = device_type_size(dtype_);
  for (uint64_t i = 0; i < idx_.count; ++i) {
    int64_t r = idx[i];
    if (r < 0) r += rows_;
    uint8_t* dst = out + i * cols_ * es;
    if (r < 0 || r >= static_cast<int64_t>(rows_)) {
      std::memset(dst, 0, cols_ * es);
    } else {
      std::memcpy(dst, table + static_cast<size_t>(r) * ld_ * es, cols_ * es);
    }
  }
}

}  // namespace neurenix
