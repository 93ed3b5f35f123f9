#include "comm/instrument/accounting.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace strata::comm {

TierTraffic CommStats::total() const {
  TierTraffic t;
  for (const auto& x : tiers) {
    t.bytes_sent += x.bytes_sent;
    t.bytes_received += x.bytes_received;
    t.messages += x.messages;
  }
  return t;
}

const TierTraffic& CommStats::tier(std::string_view name) const {
  for (std::size_t i = 0; i < tier_names.size(); ++i)
    if (tier_names[i] == name) return tiers[i];
  throw Error(fmt::format("comm stats: no tier named '{}' (tiers: {})", name, fmt::join(tier_names, ", ")));
}

CommStats CommStats::operator-(const CommStats& earlier) const {
  if (earlier.tier_names != tier_names) throw Error("comm stats: difference of snapshots taken over different topologies");
  CommStats d = *this;
  for (std::size_t i = 0; i < tiers.size(); ++i) {
    d.tiers[i].bytes_sent -= earlier.tiers[i].bytes_sent;
    d.tiers[i].bytes_received -= earlier.tiers[i].bytes_received;
    d.tiers[i].messages -= earlier.tiers[i].messages;
    d.busy_s[i] -= earlier.busy_s[i];
  }
  for (auto& [kind, t] : d.kinds) {
    auto it = earlier.kinds.find(kind);
    if (it == earlier.kinds.end()) continue;
    t.calls -= it->second.calls;
    t.seconds -= it->second.seconds;
  }
  std::erase_if(d.kinds, [](const auto& kv) { return kv.second.calls == 0; });
  return d;
}

nlohmann::json CommStats::to_json() const {
  nlohmann::json j;
  j["emulated"] = emulated;
  j["tiers"] = nlohmann::json::object();
  for (std::size_t i = 0; i < tiers.size(); ++i)
    j["tiers"][tier_names[i]] = {{"bytes_sent", tiers[i].bytes_sent},
                                 {"bytes_received", tiers[i].bytes_received},
                                 {"messages", tiers[i].messages},
                                 {"busy_s", busy_s[i]}};
  j["collectives"] = nlohmann::json::object();
  for (const auto& [kind, t] : kinds) j["collectives"][kind] = {{"calls", t.calls}, {"seconds", t.seconds}};
  return j;
}

Accounting::Accounting(std::vector<std::string> tier_names, bool emulated) {
  stats_.tiers.resize(tier_names.size());
  stats_.busy_s.assign(tier_names.size(), 0.0);
  stats_.tier_names = std::move(tier_names);
  stats_.emulated = emulated;
}

void Accounting::record_send(int tier, std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  auto& t = stats_.tiers.at(tier);
  t.bytes_sent += bytes;
  t.messages += 1;
}

void Accounting::record_receive(int tier, std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  stats_.tiers.at(tier).bytes_received += bytes;
}

void Accounting::record_busy(int tier, double seconds) {
  std::lock_guard lock(mutex_);
  stats_.busy_s.at(tier) += seconds;
}

void Accounting::record_time(std::string_view kind, double seconds) {
  std::lock_guard lock(mutex_);
  auto& k = stats_.kinds[std::string(kind)];
  k.calls += 1;
  k.seconds += seconds;
}

CommStats Accounting::snapshot() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void Accounting::reset() {
  std::lock_guard lock(mutex_);
  for (auto& t : stats_.tiers) t = {};
  for (auto& b : stats_.busy_s) b = 0;
  stats_.kinds.clear();
}

}  // namespace strata::comm
