#pragma once
// Exact per-rank traffic counters. Every message a host collective sends or receives is
// charged to the outermost tier it crosses (Topology::tier_between of the two world
// ranks); every top-level collective adds its wall time under its kind ("all_gather",
// "reduce_scatter", ...). Byte and message counts depend only on the sequence of
// collectives and their sizes, so they are identical from run to run.
//
// The trainer takes per-step deltas: `auto before = acc.snapshot(); ...; step = acc.snapshot() - before;`
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace strata::comm {

struct TierTraffic {
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t messages = 0;  // messages sent
  bool operator==(const TierTraffic&) const = default;
};

struct KindTime {
  std::uint64_t calls = 0;
  double seconds = 0;  // wall time on the communication thread, queueing excluded
};

struct CommStats {
  std::vector<std::string> tier_names;  // innermost first
  std::vector<TierTraffic> tiers;       // same order as tier_names
  // Wall time the communication thread spent running this rank's part of collectives over
  // groups whose outermost tier is each tier (same order), queueing excluded: a chain's steps
  // are charged to their own tiers. Timing, not traffic: it varies from run to run.
  std::vector<double> busy_s;
  std::map<std::string, KindTime> kinds;
  bool emulated = false;                // link emulation was on for these messages

  TierTraffic total() const;
  const TierTraffic& tier(std::string_view name) const;  // throws Error on an unknown name
  CommStats operator-(const CommStats& earlier) const;   // counters since `earlier`
  // {"emulated": b, "tiers": {"<name>": {"bytes_sent", "bytes_received", "messages", "busy_s"}, ...},
  //  "collectives": {"<kind>": {"calls", "seconds"}, ...}}
  nlohmann::json to_json() const;
};

class Accounting {
 public:
  explicit Accounting(std::vector<std::string> tier_names, bool emulated = false);

  void record_send(int tier, std::uint64_t bytes);
  void record_receive(int tier, std::uint64_t bytes);
  void record_time(std::string_view kind, double seconds);
  void record_busy(int tier, double seconds);

  CommStats snapshot() const;
  void reset();

 private:
  mutable std::mutex mutex_;
  CommStats stats_;
};

}  // namespace strata::comm
