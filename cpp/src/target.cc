#include "neurenix/target.h"

#include <sstream>

#include "neurenix/error.h"

namespace neurenix {
namespace {

// Every constant, with its source. "Estimate" marks the ones no public
// figure gives; they are listed by estimated_target_constants() and in
// docs/cost-model.md, and are the ones to recalibrate against a real IPU.
//
//  tiles_per_ipu, bytes_per_tile, clock_hz: Graphcore's product briefs and
//    Poplar's target constants: GC2 1,216 tiles x 256 KiB at 1.6 GHz (C2
//    card); GC200 1,472 tiles x 624 KiB ("900 MB") at 1.33 GHz (IPU-M2000);
//    Bow IPU at 1.85 GHz (Bow-2000); the C600 card's IPU at 1.5 GHz.
//  fp16/fp32_flops_per_cycle: the published peaks divided by tiles x clock:
//    GC200 250 TFLOPS FP16 = 1,472 x 128 x 1.33 GHz and 62.5 TFLOPS FP32 =
//    1,472 x 32 x 1.33 GHz; Bow 350 TFLOPS (x 1.85 GHz); C600 280 TFLOPS FP16
//    (x 1.5 GHz); GC2 125 TFLOPS FP16 = 1,216 x 64 x 1.6 GHz and 31.1 TFLOPS
//    FP32 = 1,216 x 16 x 1.6 GHz (also measured by Jia et al., "Dissecting the
//    Graphcore IPU Architecture via Microbenchmarking", 2019). The briefs give
//    one FP16 peak for float and half partials, so half partials do not
//    change the AMP rate here (they halve partials' bytes: memory, exchange
//    and the reduction vertices).
//  fp8_flops_per_cycle: only the C600's IPU21 multiplies float8 (Poplar's
//    QUARTER type); its brief gives 560 TFLOPS FP8 = 1,472 x 256 x 1.5 GHz
//    (565 TFLOPS: twice the FP16 rate, as PopLibs' convolution planner loads
//    8 float8 inputs per cycle where it loads 4 halves), always with half
//    partials (PopLibs: "Half is the only supported partials type for
//    quarter activations"). Other chips: 0.
//  AMP depth (products per pass along K: 8 float, 16 half, 32 float8): the
//    half figure is PopLibs' weights-per-conv-unit grouping; float and
//    float8 scale it by the input load width (2 floats, 4 halves, 8 float8
//    per cycle in PopLibs' planner). Where the partials are rounded is an
//    assumption, documented in docs/precision.md.
//  worker_threads 6, exchange 4 B/cycle/tile each way, local memory 16 B/cycle
//    read and 8 B/cycle write: Jia et al. 2019 (six hardware worker contexts
//    sharing the tile's issue slots round-robin; 64-bit stores, 128-bit loads).
//  ipu_link_bytes_per_sec, ipu_links: GC2 and GC200 have 10 IPU-Links,
//    320 GB/s per chip (product briefs) = 32 GB/s each.
//  host links (each direction): C2 card PCIe Gen3 x16, 15.75 GB/s; IPU-M2000
//    and Bow-2000: the IPU-Gateway's two 100 Gb/s host-fabric ports
//    (RoCE), 25 GB/s for the four IPUs of the machine; C600 card PCIe Gen4 x16,
//    31.5 GB/s.
//  Estimates: sync_cycles (90 on chip), cross_ipu_sync_cycles (800),
//    exchange_descriptor_cycles (2), vertex_overhead_cycles (60),
//    host_transfer_latency_cycles (2,000).
std::vector<TargetSpec> make_table() {
  TargetSpec ipu2;
  ipu2.version = "ipu2";
  ipu2.chip = "GC200 (Mk2, IPU-M2000)";
  ipu2.tiles_per_ipu = 1472;
  ipu2.bytes_per_tile = 638976;
  ipu2.clock_hz = 1.33e9;
  ipu2.fp16_flops_per_cycle = 128;
  ipu2.fp32_flops_per_cycle = 32;
  ipu2.fp8_flops_per_cycle = 0;
  ipu2.worker_threads = 6;
  ipu2.exchange_bytes_per_cycle = 4;
  ipu2.exchange_descriptor_cycles = 2;
  ipu2.local_read_bytes_per_cycle = 16;
  ipu2.local_write_bytes_per_cycle = 8;
  ipu2.sync_cycles = 90;
  ipu2.cross_ipu_sync_cycles = 800;
  ipu2.ipu_link_bytes_per_sec = 32e9;
  ipu2.ipu_links = 10;
  ipu2.host_link = "IPU-Gateway, 2 x 100 Gb/s host fabric";
  ipu2.host_link_bytes_per_sec = 25e9;
  ipu2.host_transfer_latency_cycles = 2000;
  ipu2.vertex_overhead_cycles = 60;
  TargetSpec ipu1 = ipu2;
  ipu1.version = "ipu1";
  ipu1.chip = "GC2 (Mk1, C2 card)";
  ipu1.tiles_per_ipu = 1216;
  ipu1.bytes_per_tile = 262144;
  ipu1.clock_hz = 1.6e9;
  ipu1.fp16_flops_per_cycle = 64;
  ipu1.fp32_flops_per_cycle = 16;
  ipu1.host_link = "PCIe Gen3 x16";
  ipu1.host_link_bytes_per_sec = 15.75e9;
  TargetSpec bow = ipu2;
  bow.version = "bow";
  bow.chip = "Bow IPU (Bow-2000)";
  bow.clock_hz = 1.85e9;
  TargetSpec ipu21 = ipu2;
  ipu21.version = "ipu21";
  ipu21.chip = "IPU21 (C600 card)";
  ipu21.clock_hz = 1.5e9;
  ipu21.fp8_flops_per_cycle = 256;
  ipu21.host_link = "PCIe Gen4 x16";
  ipu21.host_link_bytes_per_sec = 31.5e9;
  return {ipu1, ipu2, bow, ipu21};
}

}  // namespace

const std::vector<TargetSpec>& all_targets() {
  static const std::vector<TargetSpec> table = make_table();
  return table;
}

const std::vector<std::string>& estimated_target_constants() {
  static const std::vector<std::string> names = {"sync_cycles", "cross_ipu_sync_cycles", "exchange_descriptor_cycles",
                                                  "vertex_overhead_cycles", "host_transfer_latency_cycles"};
  return names;
}

uint32_t amp_flops_per_cycle(const TargetSpec& t, DeviceType in) {
  if (in == DeviceType::kFloat32) return t.fp32_flops_per_cycle;
  if (is_float8(in)) return t.fp8_flops_per_cycle;
  return t.fp16_flops_per_cycle;
}

uint32_t amp_depth(DeviceType in) {
  if (in == DeviceType::kFloat32) return 8;
  if (is_float8(in)) return 32;
  return 16;
}

const TargetSpec& target_for(const std::string& version) {
  for (const auto& t : all_targets())
    if (t.version == version) return t;
  std::string names;
  for (const auto& t : all_targets()) names += (names.empty() ? "" : ", ") + t.version;
  fail(ErrorCode::kInvalidArgument, "unknown IPU version '" + version + "'; expected one of: " + names);
}

void SystemSpec::validate() const {
  const TargetSpec& t = target();  // validates the version
  if (num_ipus == 0 || num_ipus > 1024)
    fail(ErrorCode::kInvalidArgument, "num_ipus must be between 1 and 1024, got " + std::to_string(num_ipus));
  if (tiles_per_ipu > t.tiles_per_ipu)
    fail(ErrorCode::kInvalidArgument, "tiles_per_ipu=" + std::to_string(tiles_per_ipu) + " exceeds the " +
                                          std::to_string(t.tiles_per_ipu) + " tiles of an " + version);
  if (bytes_per_tile != 0 && (bytes_per_tile < 256 || bytes_per_tile > t.bytes_per_tile))
    fail(ErrorCode::kInvalidArgument, "bytes_per_tile=" + std::to_string(bytes_per_tile) +
                                          " must be between 256 and the " + std::to_string(t.bytes_per_tile) +
                                          " bytes of an " + version + " tile");
}

std::string SystemSpec::to_string() const {
  std::ostringstream os;
  os << "version=" << version << ",num_ipus=" << num_ipus << ",tiles_per_ipu=" << tiles()
     << ",bytes_per_tile=" << tile_bytes();
  return os.str();
}

namespace {

uint64_t parse_count(const std::string& key, const std::string& value) {
  if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos || value.size() > 12)
    fail(ErrorCode::kInvalidArgument,
         "bad value for '" + key + "' in the IPU model description: '" + value + "' is not a positive integer");
  return std::stoull(value);
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

SystemSpec parse_system_spec(const std::string& text) {
  SystemSpec spec;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item = trim(item);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      fail(ErrorCode::kInvalidArgument,
           "bad entry '" + item + "' in the IPU model description: expected key=value, e.g. 'version=ipu2,num_ipus=16'");
    std::string key = trim(item.substr(0, eq));
    std::string value = trim(item.substr(eq + 1));
    if (key == "version") {
      spec.version = value;
      target_for(value);
    } else if (key == "num_ipus") {
      uint64_t n = parse_count(key, value);
      if (n == 0 || n > 1024) fail(ErrorCode::kInvalidArgument, "bad value for 'num_ipus': must be between 1 and 1024");
      spec.num_ipus = static_cast<uint32_t>(n);
    } else if (key == "tiles_per_ipu") {
      uint64_t n = parse_count(key, value);
      if (n == 0 || n > 1u << 20) fail(ErrorCode::kInvalidArgument, "bad value for 'tiles_per_ipu': must be at least 1");
      spec.tiles_per_ipu = static_cast<uint32_t>(n);
    } else if (key == "bytes_per_tile") {
      spec.bytes_per_tile = parse_count(key, value);
      if (spec.bytes_per_tile == 0) fail(ErrorCode::kInvalidArgument, "bad value for 'bytes_per_tile': must be at least 256");
    } else {
      fail(ErrorCode::kInvalidArgument, "unknown key '" + key +
                                            "' in the IPU model description; valid keys are version, num_ipus, tiles_per_ipu, bytes_per_tile");
    }
  }
  spec.validate();
  return spec;
}

}  // namespace neurenix
