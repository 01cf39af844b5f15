// The target table and the system description parser. The numbers come from
// public sources, each named in the table's comment in cpp/src/target.cc
// (Graphcore's product briefs and Poplar's target constants for tiles, memory
// and clocks; Jia et al., "Dissecting the Graphcore IPU Architecture via
// Microbenchmarking", 2019, for per-tile rates); the cost model and the
// out-of-memory checks are only as right as they are.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "neurenix/target.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

struct Expected {
  const char* version;
  uint32_t tiles;
  uint64_t bytes;
  double clock;
  uint32_t fp16, fp32;
  double host_link;  // bytes per second, each direction
  double peak_fp16_tflops;  // the published peak the flops per cycle reproduce
};

const Expected kExpected[] = {
    {"ipu1", 1216, 262144, 1.6e9, 64, 16, 15.75e9, 125},    // C2 card: PCIe Gen3 x16
    {"ipu2", 1472, 638976, 1.33e9, 128, 32, 25e9, 250},     // IPU-M2000: 2 x 100 Gb/s
    {"bow", 1472, 638976, 1.85e9, 128, 32, 25e9, 350},      // Bow-2000: 2 x 100 Gb/s
    {"ipu21", 1472, 638976, 1.5e9, 128, 32, 31.5e9, 280},   // C600 card: PCIe Gen4 x16
};

TEST(Target, TableHasTheFourSupportedChips) {
  ASSERT_EQ(all_targets().size(), 4u);
  std::set<std::string> names;
  for (const auto& t : all_targets()) names.insert(t.version);
  EXPECT_EQ(names, (std::set<std::string>{"ipu1", "ipu2", "bow", "ipu21"}));
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.version);
    const TargetSpec& t = target_for(e.version);
    EXPECT_EQ(t.version, e.version);
    EXPECT_FALSE(t.chip.empty());
    EXPECT_EQ(t.tiles_per_ipu, e.tiles);
    EXPECT_EQ(t.bytes_per_tile, e.bytes);
    EXPECT_DOUBLE_EQ(t.clock_hz, e.clock);
    EXPECT_EQ(t.fp16_flops_per_cycle, e.fp16);
    EXPECT_EQ(t.fp32_flops_per_cycle, e.fp32);
    EXPECT_DOUBLE_EQ(t.host_link_bytes_per_sec, e.host_link);
    EXPECT_FALSE(t.host_link.empty());
    // The flops per cycle reproduce the published peak within 1%.
    const double peak = t.tiles_per_ipu * t.fp16_flops_per_cycle * t.clock_hz / 1e12;
    EXPECT_NEAR(peak, e.peak_fp16_tflops, e.peak_fp16_tflops * 0.01);
    // Constants every chip shares: six worker contexts, exchange 4 B/cycle,
    // local memory 16 B/cycle read and 8 B/cycle write (Jia et al. 2019);
    // a 90-cycle sync (an estimate); IPU-Links of 32 GB/s, 10 per chip
    // (product briefs).
    EXPECT_EQ(t.worker_threads, 6u);
    EXPECT_EQ(t.exchange_bytes_per_cycle, 4u);
    EXPECT_EQ(t.local_read_bytes_per_cycle, 16u);
    EXPECT_EQ(t.local_write_bytes_per_cycle, 8u);
    EXPECT_EQ(t.sync_cycles, 90u);
    EXPECT_GT(t.cross_ipu_sync_cycles, t.sync_cycles);
    EXPECT_DOUBLE_EQ(t.ipu_link_bytes_per_sec, 32e9);
    EXPECT_EQ(t.ipu_links, 10u);
    EXPECT_GT(t.host_link_bytes_per_sec, 0);
    EXPECT_GT(t.host_transfer_latency_cycles, 0u);
    EXPECT_GT(t.vertex_overhead_cycles, 0u);
  }
}

TEST(Target, EstimatedConstantsAreNamedFieldsOfTheTable) {
  const std::set<std::string> fields = {"sync_cycles", "cross_ipu_sync_cycles", "exchange_descriptor_cycles",
                                        "vertex_overhead_cycles", "host_transfer_latency_cycles"};
  const auto& named = estimated_target_constants();
  EXPECT_EQ(std::set<std::string>(named.begin(), named.end()), fields);
}

TEST(Target, WorkerRoundingFillsWholeRoundsOfWorkerThreads) {
  const TargetSpec& t = target_for("ipu2");
  EXPECT_EQ(worker_rounded(t, 0), 0u);
  EXPECT_EQ(worker_rounded(t, 1), 6u);
  EXPECT_EQ(worker_rounded(t, 6), 6u);
  EXPECT_EQ(worker_rounded(t, 7), 12u);
}

TEST(Target, PeakThroughputMatchesMarketedNumbers) {
  const TargetSpec& ipu2 = target_for("ipu2");
  const double peak = ipu2.tiles_per_ipu * static_cast<double>(ipu2.fp16_flops_per_cycle) * ipu2.clock_hz;
  EXPECT_NEAR(peak, 250.6e12, 0.1e12);
  EXPECT_DOUBLE_EQ(peak, 1472.0 * 128 * 1.33e9);
  const TargetSpec& ipu1 = target_for("ipu1");
  EXPECT_NEAR(ipu1.tiles_per_ipu * static_cast<double>(ipu1.fp16_flops_per_cycle) * ipu1.clock_hz, 124.5e12, 0.1e12);
  // Exchange: 4 B/cycle/tile over a GC200 is about 7.8 TB/s.
  EXPECT_NEAR(ipu2.tiles_per_ipu * static_cast<double>(ipu2.exchange_bytes_per_cycle) * ipu2.clock_hz, 7.83e12, 0.01e12);
  // SRAM per chip: 897 MiB on a GC200.
  EXPECT_NEAR(ipu2.tiles_per_ipu * static_cast<double>(ipu2.bytes_per_tile) / (1 << 20), 897.0, 0.5);
  // FP32 is a quarter of FP16 on Mk2.
  EXPECT_EQ(ipu2.fp16_flops_per_cycle, 4 * ipu2.fp32_flops_per_cycle);
}

TEST(Target, UnknownVersionNamesItAndTheValidOnes) {
  EXPECT_NX_ERROR(kInvalidArgument, target_for("ipu3"), "'ipu3'", "ipu1", "ipu2", "bow", "ipu21");
  EXPECT_NX_ERROR(kInvalidArgument, target_for(""), "''");
  EXPECT_NX_ERROR(kInvalidArgument, target_for("IPU2"), "IPU2");
}

TEST(SystemSpecTest, DefaultsAreAFullPod16) {
  SystemSpec s;
  EXPECT_EQ(s.version, "ipu2");
  EXPECT_EQ(s.num_ipus, 16u);
  EXPECT_EQ(s.tiles(), 1472u);
  EXPECT_EQ(s.tile_bytes(), 638976u);
  EXPECT_NO_THROW(s.validate());
  SystemSpec p = parse_system_spec("");
  EXPECT_EQ(p.version, "ipu2");
  EXPECT_EQ(p.num_ipus, 16u);
  EXPECT_EQ(p.tiles_per_ipu, 0u);
  EXPECT_EQ(p.bytes_per_tile, 0u);
  EXPECT_EQ(parse_system_spec(" , ,").num_ipus, 16u);
}

// Every subset of the keys, in every order, with assorted whitespace.
TEST(SystemSpecTest, ParseAcceptsAnySubsetInAnyOrder) {
  const std::vector<std::pair<std::string, std::string>> kv = {
      {"version", "ipu1"}, {"num_ipus", "4"}, {"tiles_per_ipu", "8"}, {"bytes_per_tile", "65536"}};
  const char* pads[] = {"", " ", "\t", " \n "};
  int cases = 0;
  for (int mask = 0; mask < 16; ++mask) {
    std::vector<int> keys;
    for (int i = 0; i < 4; ++i)
      if (mask & (1 << i)) keys.push_back(i);
    do {
      for (const char* pad : pads) {
        std::string text;
        for (size_t j = 0; j < keys.size(); ++j) {
          if (j) text += ",";
          text += pad + kv[keys[j]].first + pad + "=" + pad + kv[keys[j]].second + pad;
        }
        SCOPED_TRACE(text);
        SystemSpec s = parse_system_spec(text);
        EXPECT_EQ(s.version, (mask & 1) ? "ipu1" : "ipu2");
        EXPECT_EQ(s.num_ipus, (mask & 2) ? 4u : 16u);
        EXPECT_EQ(s.tiles(), (mask & 4) ? 8u : ((mask & 1) ? 1216u : 1472u));
        EXPECT_EQ(s.tile_bytes(), (mask & 8) ? 65536u : ((mask & 1) ? 262144u : 638976u));
        ++cases;
      }
    } while (std::next_permutation(keys.begin(), keys.end()));
  }
  // sum over subsets of k! orders = 1 + 4 + 12 + 24 + 24 = 65, times 4 paddings.
  EXPECT_EQ(cases, 65 * 4);
}

TEST(SystemSpecTest, ParseTheTestSystems) {
  SystemSpec s = parse_system_spec("version=ipu2,num_ipus=2,tiles_per_ipu=4");
  EXPECT_EQ(s.num_ipus, 2u);
  EXPECT_EQ(s.tiles(), 4u);
  EXPECT_EQ(s.tile_bytes(), 638976u);
  SystemSpec b = parse_system_spec("version=bow, num_ipus=1 ,tiles_per_ipu=1472,bytes_per_tile=638976,");
  EXPECT_EQ(b.version, "bow");
  EXPECT_EQ(b.tiles(), 1472u);
  // A later key overrides an earlier one.
  EXPECT_EQ(parse_system_spec("num_ipus=2,num_ipus=8").num_ipus, 8u);
}

TEST(SystemSpecTest, ToStringRoundTrips) {
  for (const char* text : {"version=ipu1,num_ipus=2,tiles_per_ipu=3,bytes_per_tile=1024", "version=ipu21",
                           "num_ipus=1024", "bytes_per_tile=256"}) {
    SystemSpec s = parse_system_spec(text);
    SystemSpec r = parse_system_spec(s.to_string());
    EXPECT_EQ(r.version, s.version);
    EXPECT_EQ(r.num_ipus, s.num_ipus);
    EXPECT_EQ(r.tiles(), s.tiles());
    EXPECT_EQ(r.tile_bytes(), s.tile_bytes());
  }
  EXPECT_EQ(parse_system_spec("version=ipu1,num_ipus=2").to_string(),
            "version=ipu1,num_ipus=2,tiles_per_ipu=1216,bytes_per_tile=262144");
}

TEST(SystemSpecTest, ParseRejectsUnknownKeys) {
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("tiles=4"), "'tiles'", "version", "num_ipus", "tiles_per_ipu",
                  "bytes_per_tile");
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("num_ipus=2,Version=ipu2"), "'Version'");
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("num_ipus=2,=3"), "''");
}

TEST(SystemSpecTest, ParseRejectsBadValues) {
  for (const char* v : {"abc", "-1", "1.5", "", "+2", "0x10", "2 2", "1234567890123"}) {
    SCOPED_TRACE(v);
    EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec(std::string("num_ipus=") + v), "num_ipus");
    EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec(std::string("tiles_per_ipu=") + v), "tiles_per_ipu");
    EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec(std::string("bytes_per_tile=") + v), "bytes_per_tile");
  }
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("num_ipus=abc"), "'abc'");
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("num_ipus=0"), "num_ipus");
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("num_ipus=1025"), "num_ipus");
  EXPECT_NO_THROW(parse_system_spec("num_ipus=1024"));
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("tiles_per_ipu=0"), "tiles_per_ipu");
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("tiles_per_ipu=1473"), "tiles_per_ipu", "1473");
  EXPECT_NO_THROW(parse_system_spec("tiles_per_ipu=1472"));
  // The tile limit is the chip's, whatever order the keys come in.
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("tiles_per_ipu=1300,version=ipu1"), "tiles_per_ipu", "1300");
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("version=ipu1,tiles_per_ipu=1217"), "tiles_per_ipu");
  EXPECT_NO_THROW(parse_system_spec("version=ipu1,tiles_per_ipu=1216"));
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("version=ipu3"), "ipu3");
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("version="), "''");
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("num_ipus"), "num_ipus", "key=value");
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("num_ipus=2;tiles_per_ipu=4"), "num_ipus");
}

TEST(SystemSpecTest, BytesPerTileOverrideLimits) {
  EXPECT_EQ(parse_system_spec("bytes_per_tile=256").tile_bytes(), 256u);
  EXPECT_EQ(parse_system_spec("bytes_per_tile=638976").tile_bytes(), 638976u);
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("bytes_per_tile=255"), "bytes_per_tile", "255");
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("bytes_per_tile=0"), "bytes_per_tile");
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("bytes_per_tile=638977"), "bytes_per_tile", "638977");
  // The ceiling is the chip's SRAM: an ipu1 tile has 256 KiB.
  EXPECT_EQ(parse_system_spec("version=ipu1,bytes_per_tile=262144").tile_bytes(), 262144u);
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("version=ipu1,bytes_per_tile=262145"), "bytes_per_tile", "262145");
  EXPECT_NX_ERROR(kInvalidArgument, parse_system_spec("bytes_per_tile=300000,version=ipu1"), "bytes_per_tile");
}

TEST(SystemSpecTest, ValidateNamesTheBadField) {
  SystemSpec s;
  s.num_ipus = 0;
  EXPECT_NX_ERROR(kInvalidArgument, s.validate(), "num_ipus");
  s = SystemSpec{};
  s.tiles_per_ipu = 5000;
  EXPECT_NX_ERROR(kInvalidArgument, s.validate(), "tiles_per_ipu");
  s = SystemSpec{};
  s.bytes_per_tile = 100;
  EXPECT_NX_ERROR(kInvalidArgument, s.validate(), "bytes_per_tile");
  s = SystemSpec{};
  s.version = "gc2";
  EXPECT_NX_ERROR(kInvalidArgument, s.validate(), "gc2");
}

TEST(SystemSpecTest, GraphUsesTheShrunkenSystem) {
  SystemSpec s = parse_system_spec("version=ipu1,num_ipus=4,tiles_per_ipu=5,bytes_per_tile=4096");
  Graph g(s, 2);
  EXPECT_EQ(g.num_ipus(), 2u);
  EXPECT_EQ(g.tiles_per_ipu(), 5u);
  EXPECT_EQ(g.num_tiles(), 10u);
  EXPECT_EQ(g.bytes_per_tile(), 4096u);
  EXPECT_EQ(g.target().version, "ipu1");
  EXPECT_EQ(g.ipu_of_tile(7), 1u);
  EXPECT_EQ(g.first_tile(1), 5u);
  EXPECT_NX_ERROR(kInvalidArgument, Graph(s, 5), "5");
  EXPECT_NX_ERROR(kInvalidArgument, Graph(s, 0), "0");
}

}  // namespace

TEST(Target, OnlyTheIpu21HasAFloat8MatrixUnitAtTwiceTheHalfRate) {
  for (const auto& t : all_targets()) {
    SCOPED_TRACE(t.version);
    if (t.version == "ipu21") {
      // C600 brief: 560 TFLOPS FP8 (1,472 x 256 x 1.5 GHz = 565).
      EXPECT_NEAR(t.tiles_per_ipu * static_cast<double>(t.fp8_flops_per_cycle) * t.clock_hz / 1e12, 560.0, 560.0 * 0.01);
      EXPECT_EQ(t.fp8_flops_per_cycle, 2 * t.fp16_flops_per_cycle);
      EXPECT_EQ(amp_flops_per_cycle(t, DeviceType::kFloat8E4M3FNUZ), t.fp8_flops_per_cycle);
      EXPECT_EQ(amp_flops_per_cycle(t, DeviceType::kFloat8E5M2FNUZ), t.fp8_flops_per_cycle);
    } else {
      EXPECT_EQ(t.fp8_flops_per_cycle, 0u);
    }
    EXPECT_EQ(amp_flops_per_cycle(t, DeviceType::kFloat16), t.fp16_flops_per_cycle);
    EXPECT_EQ(amp_flops_per_cycle(t, DeviceType::kFloat32), t.fp32_flops_per_cycle);
  }
  EXPECT_EQ(amp_depth(DeviceType::kFloat32), 8u);
  EXPECT_EQ(amp_depth(DeviceType::kFloat16), 16u);
  EXPECT_EQ(amp_depth(DeviceType::kFloat8E4M3FNUZ), 32u);
}
