#include "plan/device.hpp"

#include <cmath>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace strata::plan {

namespace {
// The planner's one efficiency guess: dense transformer matmuls at half of peak. Published
// large runs report 30-40% of peak end to end (shared/reference/hardware.md), which also
// pays for communication; this is the compute part alone. --compute-efficiency overrides it.
constexpr double kDefaultComputeEfficiency = 0.5;
// Datasheets give board power (TDP), not idle draw. The planner assumes an idle device draws
// a tenth of it (an assumption, not a measurement; --idle-watts overrides it).
constexpr double kIdleFractionOfTdp = 0.1;
constexpr std::string_view kMemoryNote =
    "memory in GB of 1e9 bytes as marketed; the devices hold GiB, and the difference stands in for the "
    "runtime's own allocations";
constexpr std::string_view kIdleNote =
    "idle draw assumed a tenth of TDP (no datasheet figure; --idle-watts overrides it)";

DeviceFacts facts(std::string name, double tflops, double gb, double hbm, double tdp, std::string_view datasheet) {
  return DeviceFacts{std::move(name), tflops, gb, hbm, kDefaultComputeEfficiency, tdp, tdp * kIdleFractionOfTdp,
                     fmt::format("{}; {}; {}", datasheet, kMemoryNote, kIdleNote), nullptr, std::nullopt};
}

struct ComputeUnits {
  int count = 0;
  std::string_view source;
  bool hopper = false;
};

GpuDatasheet gpu(std::string_view key, DeviceFacts device, ComputeUnits units, double link_GBps,
                 std::string_view link_source, int dies = 1, double die_link_GBps = 0,
                 std::string_view die_link_source = {}) {
  return {key, std::move(device), link_GBps, link_source, dies, die_link_GBps, die_link_source,
          units.count, units.source, units.hopper};
}

// Vendor datasheets (dense bf16 without sparsity; memory; HBM rate; board power; GPU links).
// H100 SXM, A100, MI250X and H200's memory are also in shared/reference/hardware.md.
const std::vector<GpuDatasheet>& datasheets() {
  static const std::vector<GpuDatasheet> table = {
      gpu("h100-sxm",
           facts("NVIDIA H100 SXM5", 989, 80, 3350, 700,
                 "H100 datasheet: ~989 TFLOP/s dense bf16, 80 GB HBM3 at ~3.35 TB/s, up to 700 W TDP"),
           {132, "NVIDIA H100 Tensor Core GPU Architecture whitepaper: 132 SMs (H100 SXM5)", true},
           450, "NVIDIA H100 datasheet: NVLink4, 18 links a GPU, 900 GB/s bidirectional = ~450 GB/s per direction"),
      gpu("h100-pcie",
           facts("NVIDIA H100 PCIe", 756, 80, 2000, 350,
                 "H100 PCIe datasheet: ~756 TFLOP/s dense bf16, 80 GB HBM2e at ~2.0 TB/s, 300-350 W TDP"),
           {114, "NVIDIA H100 Tensor Core GPU Architecture whitepaper: 114 SMs (H100 PCIe)", false},
           64, "NVIDIA H100 PCIe datasheet: PCIe Gen5 x16, 128 GB/s bidirectional = 64 GB/s per direction (its NVLink "
               "bridges join pairs of GPUs only)"),
      gpu("h200",
           facts("NVIDIA H200 SXM", 989, 141, 4800, 700,
                 "H200 datasheet: ~989 TFLOP/s dense bf16 (the H100's chip), 141 GB HBM3e at 4.8 TB/s, up to 700 W TDP"),
           {132, "the H100 SXM5 chip: 132 SMs (NVIDIA H100 whitepaper)", true},
           450, "NVIDIA H200 datasheet: NVLink4, 900 GB/s bidirectional = ~450 GB/s per direction"),
      gpu("a100-40",
           facts("NVIDIA A100 SXM4 40GB", 312, 40, 1555, 400,
                 "A100 datasheet: 312 TFLOP/s dense bf16, 40 GB HBM2 at 1,555 GB/s, 400 W TDP"),
           {108, "NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs", false},
           300, "NVIDIA A100 datasheet: NVLink3, 12 links a GPU, 600 GB/s bidirectional = ~300 GB/s per direction"),
      gpu("a100-80",
           facts("NVIDIA A100 SXM4 80GB", 312, 80, 2000, 400,
                 "A100 datasheet: 312 TFLOP/s dense bf16, 80 GB HBM2e at ~2.0 TB/s, 400 W TDP"),
           {108, "NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs", false},
           300, "NVIDIA A100 datasheet: NVLink3, 12 links a GPU, 600 GB/s bidirectional = ~300 GB/s per direction"),
      gpu("mi250x",
           facts("AMD MI250X GCD", 191.5, 64, 1600, 280,
                 "MI250X datasheet: 383 TFLOP/s dense bf16, 128 GB HBM2e at 3.2 TB/s and 560 W peak board power per "
                 "package of 2 GCDs (280 W a GCD)"),
           {110, "AMD CDNA 2 architecture whitepaper: 220 compute units an MI250X, 110 a GCD", false},
           50,
           "OLCF Frontier User Guide: 1-2 Infinity Fabric links of 50 GB/s between MI250X packages (50-100 GB/s); the "
           "low end, ~50 GB/s, is taken",
           2, 200,
           "OLCF Frontier User Guide / AMD MI250X datasheet: the 2 GCDs of one MI250X are joined by 4 Infinity Fabric "
           "links of 50 GB/s, ~200 GB/s per direction"),
      gpu("mi300x",
           facts("AMD MI300X", 1307.4, 192, 5300, 750,
                 "AMD Instinct MI300X datasheet: 1,307.4 TFLOP/s dense bf16, 192 GB HBM3 at 5.3 TB/s, 750 W board power"),
           {304, "AMD CDNA 3 architecture whitepaper: 304 compute units (MI300X)", false},
           448, "AMD Instinct MI300X datasheet: 7 Infinity Fabric links, 896 GB/s aggregate bidirectional = 448 GB/s per "
                "direction over the 8 GPUs' full mesh (64 GB/s to any one peer)"),
      gpu("gh200",
           facts("NVIDIA GH200 (H100 GPU, 96 GB HBM3)", 989, 96, 4000, 0,
                 "NVIDIA GH200 Grace Hopper Superchip datasheet: the H100 GPU's ~989 TFLOP/s dense bf16, 96 GB HBM3 at "
                 "4 TB/s; its 450-1000 W is the module's (CPU + GPU + memory), so no GPU TDP: give --tdp-watts for "
                 "J/token"),
           {132, "the H100 GPU of GH200: 132 SMs (NVIDIA GH200 datasheet)", true},
           450, "NVIDIA GH200 datasheet: NVLink4, 900 GB/s bidirectional = ~450 GB/s per direction"),
  };
  return table;
}

}  // namespace

void DeviceFacts::validate() const {
  for (auto [flag, v] :
       {std::pair{"--peak-tflops", peak_tflops}, {"--device-memory-gb", memory_gb}, {"--hbm-gbps", hbm_GBps}})
    if (!(v > 0) || !std::isfinite(v)) throw Error(fmt::format("{} = {}: must be positive", flag, v));
  if (!(compute_efficiency > 0 && compute_efficiency <= 1))
    throw Error(fmt::format("--compute-efficiency = {}: must be in (0, 1]", compute_efficiency));
  if (!(tdp_watts >= 0) || !std::isfinite(tdp_watts))
    throw Error(fmt::format("--tdp-watts = {}: must not be negative", tdp_watts));
  if (!(idle_watts >= 0 && idle_watts <= tdp_watts))
    throw Error(fmt::format("--idle-watts = {}: must be between 0 and the TDP ({} W{})", idle_watts, tdp_watts,
                            tdp_watts == 0 ? "; give --tdp-watts" : ""));
}

const GpuDatasheet& gpu_datasheet(std::string_view key) {
  for (const GpuDatasheet& d : datasheets())
    if (d.key == key) return d;
  throw Error(fmt::format("gpu={}: unknown GPU (known: {}; other devices: a topology TOML and --peak-tflops, "
                          "--device-memory-gb, --hbm-gbps)",
                          key, fmt::join(gpu_names(), ", ")));
}

std::vector<std::string> gpu_names() {
  std::vector<std::string> out;
  for (const GpuDatasheet& d : datasheets()) out.emplace_back(d.key);
  return out;
}

std::optional<DeviceFacts> device_for_topology(std::string_view topology_name) {
  if (topology_name == "frontier") return gpu_datasheet("mi250x").device;
  if (topology_name == "dgx-a100") return gpu_datasheet("a100-80").device;
  if (topology_name == "dgx-h100") return gpu_datasheet("h100-sxm").device;
  return std::nullopt;
}

DeviceFacts resolve_device(const std::optional<DeviceFacts>& preset, std::string_view topology_name,
                           const DeviceOverrides& o) {
  DeviceFacts d;
  if (preset) {
    d = *preset;
    if (o.peak_tflops || o.memory_gb || o.hbm_GBps || o.compute_efficiency || o.tdp_watts || o.idle_watts)
      d.source += "; overridden on the command line";
  } else {
    std::vector<std::string> missing;
    if (!o.peak_tflops) missing.push_back("--peak-tflops");
    if (!o.memory_gb) missing.push_back("--device-memory-gb");
    if (!o.hbm_GBps) missing.push_back("--hbm-gbps");
    if (!missing.empty())
      throw Error(fmt::format("topology '{}' has no preset device (frontier, dgx-a100, dgx-h100 and --cluster have): "
                              "give {}",
                              topology_name, fmt::join(missing, ", ")));
    d.name = "given";
    d.compute_efficiency = kDefaultComputeEfficiency;
    d.source = "command line";
  }
  d.peak_tflops = o.peak_tflops.value_or(d.peak_tflops);
  d.memory_gb = o.memory_gb.value_or(d.memory_gb);
  d.hbm_GBps = o.hbm_GBps.value_or(d.hbm_GBps);
  d.compute_efficiency = o.compute_efficiency.value_or(d.compute_efficiency);
  if (o.tdp_watts) {
    // A new TDP moves the assumed idle draw with it unless that is given too.
    d.tdp_watts = *o.tdp_watts;
    d.idle_watts = *o.tdp_watts * kIdleFractionOfTdp;
  }
  d.idle_watts = o.idle_watts.value_or(d.idle_watts);
  d.validate();
  return d;
}

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(DeviceFacts, name, peak_tflops, memory_gb, hbm_GBps, compute_efficiency, tdp_watts,
                                   idle_watts, source)

nlohmann::json DeviceFacts::to_json() const { return *this; }

}  // namespace strata::plan
