#include "neurenix/target.h"

#include <sstream>

#include "neurenix/error.h"

namespace neurenix {
namespace {

// Sources:
//  - tiles, memory, clock: Graphcore IPU product briefs (GC2, GC200/M2000,
//    Bow-2000, C600) and Poplar's target constants (IPU1/IPU2 "numTiles",
//    "bytesPerTile").
//  - FP16/FP32 flops per tile per cycle: 250 TFLOPS FP16 for GC200 =
//    1472 tiles x 128 flops x 1.33 GHz; FP32 is a quarter of FP16 on Mk2, and
//    half of Mk2's rate on Mk1 (125 TFLOPS FP16 at 1216 tiles, 1.6 GHz).
//    C600 doubles FP16's rate for FP8.
//  - six worker contexts per tile, exchange 4 B/cycle/tile, local memory
//    16 B/cycle read and 8 B/cycle write: "Dissecting the Graphcore IPU
//    Architecture via Microbenchmarking" (Jia et al., 2019).
//  - sync 90 cycles: the value PopLibs' planners use for an on-chip sync;
//    cross-IPU syncs go through the GW-Links/IPU-Links and cost more.
//  - IPU-Links 32 GB/s each, 10 per GC200; host link PCIe Gen4 x16 ~64 GB/s
//    (M2000 product brief).
//  - vertex overhead and host latency: calibration estimates, not published.
std::vector<TargetSpec> make_table() {
  TargetSpec ipu2{"ipu2", "GC200 (Mk2, M2000)", 1472, 638976, 1.33e9, 128, 32, 0,
                  6, 4, 16, 8, 90, 800, 32e9, 10, 64e9, 2000, 60};
  TargetSpec ipu1 = ipu2;
  ipu1.version = "ipu1";
  ipu1.chip = "GC2 (Mk1)";
  ipu1.tiles_per_ipu = 1216;
  ipu1.bytes_per_tile = 262144;
  ipu1.clock_hz = 1.6e9;
  ipu1.fp16_flops_per_cycle = 64;
  ipu1.fp32_flops_per_cycle = 16;
  ipu1.ipu_links = 10;
  ipu1.host_link_bytes_per_sec = 32e9;  // PCIe Gen3 x16 on the C2 card
  TargetSpec bow = ipu2;
  bow.version = "bow";
  bow.chip = "Bow IPU";
  bow.clock_hz = 1.85e9;
  TargetSpec ipu21 = ipu2;
  ipu21.version = "ipu21";
  ipu21.chip = "C600 (FP8 capable)";
  ipu21.clock_hz = 1.5e9;
  ipu21.fp8_flops_per_cycle = 256;
  return {ipu1, ipu2, bow, ipu21};
}

}  // namespace

const std::vector<TargetSpec>& all_targets() {
  static const std::vector<TargetSpec> table = make_table();
  return table;
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
