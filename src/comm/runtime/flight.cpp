#include "comm/runtime/flight.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "comm/runtime/wait.hpp"

namespace strata::comm {

namespace {

constexpr std::uint64_t kWriting = ~std::uint64_t(0);
constexpr const char* kFormat = "strata-flight/1";
constexpr std::size_t kGroupChars = 47;

std::int64_t now_ns() {
  // The wall clock: dumps of different hosts are compared by it (NTP keeps hosts within far
  // less than the waits a hang or a slow link shows).
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::atomic<int> g_dump_requested{0};
extern "C" void on_dump_signal(int) { g_dump_requested.store(1, std::memory_order_relaxed); }

}  // namespace

struct FlightRecorder::Record {
  std::atomic<std::uint64_t> seq{0};  // 0: empty; kWriting while the issuing thread writes it
  FlightOp op;                        // op.group unused: `group` holds a copy
  char group[kGroupChars + 1] = {};
  std::atomic<std::int64_t> issue_ns{0}, start_ns{0}, end_ns{0};
  std::atomic<FlightState> state{FlightState::Issued};
};

FlightRecorder::FlightRecorder() = default;
FlightRecorder::~FlightRecorder() = default;

std::string_view to_string(FlightState s) {
  switch (s) {
    case FlightState::Issued: return "issued";
    case FlightState::Running: return "running";
    case FlightState::Done: return "done";
    case FlightState::TimedOut: return "timed out";
  }
  return "?";
}

FlightRecorder& flight_recorder() {
  static FlightRecorder recorder;
  return recorder;
}

void FlightRecorder::configure(int capacity, std::filesystem::path dump_dir) {
  if (capacity < 0) throw Error(fmt::format("train.flight_ops = {}: must not be negative", capacity));
  capacity_ = static_cast<std::uint64_t>(capacity);
  ring_ = capacity_ ? std::make_unique<Record[]>(capacity_) : nullptr;
  next_seq_.store(1);
  compute_s_.store(0);
  exposed_s_.store(0);
  timed_steps_.store(0);
  dump_dir_ = std::move(dump_dir);
}

void FlightRecorder::set_places(int world_rank, std::vector<std::string> hosts, const topo::Topology& topology) {
  rank_ = world_rank;
  hosts_ = std::move(hosts);
  tiers_ = topology.tier_names();
}

void set_aside_flight_dumps(const std::filesystem::path& dir) {
  if (!std::filesystem::exists(dir)) return;
  std::filesystem::path previous = dir;
  previous += ".previous";
  std::filesystem::remove_all(previous);
  std::filesystem::rename(dir, previous);
}

FlightRecorder::Record* FlightRecorder::slot(std::uint64_t seq) const { return &ring_[seq % capacity_]; }

std::uint64_t FlightRecorder::issue(const FlightOp& op) {
  if (!capacity_) return 0;
  const std::uint64_t seq = next_seq_.load(std::memory_order_relaxed);
  Record& r = *slot(seq);
  r.seq.store(kWriting, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  r.op = op;
  r.op.group = {};
  const std::size_t n = std::min(op.group.size(), kGroupChars);
  std::memcpy(r.group, op.group.data(), n);
  r.group[n] = '\0';
  r.issue_ns.store(now_ns(), std::memory_order_relaxed);
  r.start_ns.store(0, std::memory_order_relaxed);
  r.end_ns.store(0, std::memory_order_relaxed);
  r.state.store(FlightState::Issued, std::memory_order_relaxed);
  r.seq.store(seq, std::memory_order_release);
  next_seq_.store(seq + 1, std::memory_order_relaxed);
  return seq;
}

void FlightRecorder::stamp(std::uint64_t seq, bool end) {
  if (!capacity_ || seq == 0) return;
  Record& r = *slot(seq);
  if (r.seq.load(std::memory_order_acquire) != seq) return;  // the ring moved on
  (end ? r.end_ns : r.start_ns).store(now_ns(), std::memory_order_relaxed);
  if (!end) {
    r.state.store(FlightState::Running, std::memory_order_relaxed);
    return;
  }
  FlightState running = FlightState::Running;  // a timed-out op stays so
  r.state.compare_exchange_strong(running, FlightState::Done, std::memory_order_relaxed);
  FlightState issued = FlightState::Issued;  // ended without a start stamp (stamped by its waiter)
  r.state.compare_exchange_strong(issued, FlightState::Done, std::memory_order_relaxed);
}

void FlightRecorder::add_step_time(double compute_s, double exposed_comm_s) {
  // One writer (the thread that runs the steps): a load and a store, no read-modify-write.
  compute_s_.store(compute_s_.load(std::memory_order_relaxed) + compute_s, std::memory_order_relaxed);
  exposed_s_.store(exposed_s_.load(std::memory_order_relaxed) + exposed_comm_s, std::memory_order_relaxed);
  timed_steps_.store(timed_steps_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void FlightRecorder::start(std::uint64_t seq) { stamp(seq, false); }
void FlightRecorder::end(std::uint64_t seq) { stamp(seq, true); }

nlohmann::json FlightRecorder::records() const {
  nlohmann::json ops = nlohmann::json::array();
  if (!capacity_) return ops;
  const std::uint64_t next = next_seq_.load(std::memory_order_relaxed);
  const std::uint64_t first = next > capacity_ ? next - capacity_ : 1;
  for (std::uint64_t s = first; s < next; ++s) {
    const Record& r = *slot(s);
    if (r.seq.load(std::memory_order_acquire) != s) continue;
    const FlightOp op = r.op;
    const std::string group = r.group;
    const std::int64_t issued = r.issue_ns.load(std::memory_order_relaxed);
    const std::int64_t started = r.start_ns.load(std::memory_order_relaxed);
    const std::int64_t ended = r.end_ns.load(std::memory_order_relaxed);
    const FlightState state = r.state.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (r.seq.load(std::memory_order_relaxed) != s) continue;  // rewritten while read
    const bool known_tier = op.tier >= 0 && op.tier < static_cast<int>(tiers_.size());
    ops.push_back({{"seq", s},
                   {"op", op.op_id},
                   {"kind", op.kind},
                   {"what", op.what},
                   {"tier", known_tier ? tiers_[op.tier] : std::string()},
                   {"group", group},
                   {"bytes", op.bytes},
                   {"unit", op.unit},
                   {"micro_batch", op.micro_batch},
                   {"step", op.step},
                   {"issue_ns", issued},
                   {"start_ns", started},
                   {"end_ns", ended},
                   {"state", to_string(state)}});
  }
  return ops;
}

nlohmann::json FlightRecorder::dump_json(std::string_view reason, std::string_view message,
                                         const TimedOutWait* timeout) const {
  nlohmann::json j = {{"format", kFormat},
                      {"rank", rank_},
                      {"world_size", hosts_.size()},
                      {"host", rank_ < static_cast<int>(hosts_.size()) ? hosts_[rank_] : std::string()},
                      {"hosts", hosts_},
                      {"reason", reason},
                      {"message", message},
                      {"dumped_ns", now_ns()},
                      {"capacity", capacity_},
                      {"issued", issued()},
                      {"timed_steps", timed_steps_.load(std::memory_order_relaxed)},
                      {"compute_s", compute_s_.load(std::memory_order_relaxed)},
                      {"exposed_comm_s", exposed_s_.load(std::memory_order_relaxed)},
                      {"ops", records()}};
  if (timeout) {
    j["timeout"] = {{"collective", timeout->collective}, {"group", timeout->group},
                    {"waiting_for", timeout->peers},    {"waiting_for_ranks", timeout->peer_ranks},
                    {"waited_s", timeout->waited_s},    {"timeout_s", timeout->timeout_s}};
  }
  return j;
}

std::filesystem::path FlightRecorder::dump(std::string_view reason, std::string_view message,
                                           const TimedOutWait* timeout) const {
  if (!capacity_ || dump_dir_.empty()) return {};
  const std::filesystem::path path = dump_dir_ / fmt::format("rank_{}.json", rank_);
  try {
    std::filesystem::create_directories(dump_dir_);
    atomic_write_file(path, dump_json(reason, message, timeout).dump(1) + "\n");
  } catch (const std::exception& e) {
    const std::string line = fmt::format("strata: rank {}: flight recorder: cannot dump: {}\n", rank_, e.what());
    std::fwrite(line.data(), 1, line.size(), stderr);
    return {};
  }
  return path;
}

void FlightRecorder::install_dump_signal() {
  struct sigaction sa {};
  sa.sa_handler = on_dump_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGUSR2, &sa, nullptr) != 0)
    throw Error(fmt::format("cannot install the SIGUSR2 handler (flight recorder dump): {}", std::strerror(errno)));
}

void FlightRecorder::dump_if_signalled() {
  if (g_dump_requested.load(std::memory_order_relaxed) == 0) return;
  g_dump_requested.store(0, std::memory_order_relaxed);
  const std::filesystem::path path = dump("signal", "SIGUSR2");
  if (!path.empty()) fmt::print(stderr, "strata: rank {}: SIGUSR2: flight recorder dumped to {}\n", rank_, path.string());
}

bool FlightRecorder::on_timeout(const TimedOutWait& w) {
  if (!capacity_ || dump_dir_.empty()) return false;
  const std::uint64_t next = next_seq_.load(std::memory_order_relaxed);
  for (std::uint64_t s = next > capacity_ ? next - capacity_ : 1; s < next; ++s) {
    Record& r = *slot(s);
    FlightState running = FlightState::Running;
    if (r.seq.load(std::memory_order_acquire) == s)
      r.state.compare_exchange_strong(running, FlightState::TimedOut, std::memory_order_relaxed);
  }
  if (dump("timeout", timeout_message(w), &w).empty()) return false;
  // The first rank to create the report file speaks for all (O_EXCL: one winner, also
  // across hosts on a shared file system that honours it).
  const std::filesystem::path report = dump_dir_ / "desync.txt";
  const int fd = ::open(report.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
  if (fd < 0) return false;
  // The ranks stuck behind the same rank time out within moments of each other.
  std::this_thread::sleep_for(std::chrono::duration<double>(std::min(kTimeoutReportGrace, w.timeout_s / 2)));
  std::string text;
  try {
    const DesyncReport r = desync_report(read_flight_dumps(dump_dir_, static_cast<int>(hosts_.size())));
    text = fmt::format("strata: desync report (flight recorder dumps in {}):\n", dump_dir_.string());
    for (const std::string& line : r.lines) text += "  " + line + "\n";
  } catch (const std::exception& e) {
    text = fmt::format("strata: desync report: {}\n", e.what());
  }
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
  write_all(fd, text.data(), text.size(), report);
  ::close(fd);
  return true;
}

// ---- Reading dumps -------------------------------------------------------------------------

namespace {

// Why `j` is not a dump of rank `rank`, or empty.
std::string dump_problem(const nlohmann::json& j, int rank) {
  if (!j.is_object()) return "not a JSON object";
  if (!j.contains("format") || j["format"] != kFormat) return fmt::format("field 'format' is not '{}'", kFormat);
  for (const char* f : {"rank", "world_size", "issued", "timed_steps"})
    if (!j.contains(f) || !j[f].is_number_integer()) return fmt::format("field '{}' missing or not an integer", f);
  if (j["rank"] != rank) return fmt::format("field 'rank' is {}, the file's name says {}", j["rank"].dump(), rank);
  for (const char* f : {"compute_s", "exposed_comm_s"})
    if (!j.contains(f) || !j[f].is_number()) return fmt::format("field '{}' missing or not a number", f);
  if (!j.contains("hosts") || !j["hosts"].is_array()) return "field 'hosts' missing or not an array";
  if (!j.contains("ops") || !j["ops"].is_array()) return "field 'ops' missing or not an array";
  const auto& ops = j["ops"];
  for (std::size_t i = 0; i < ops.size(); ++i) {
    for (const char* f : {"seq", "op", "unit", "micro_batch", "bytes", "issue_ns", "start_ns", "end_ns"})
      if (!ops[i].contains(f) || !ops[i][f].is_number_integer())
        return fmt::format("field 'ops[{}].{}' missing or not an integer", i, f);
    for (const char* f : {"kind", "what", "tier", "group", "state"})
      if (!ops[i].contains(f) || !ops[i][f].is_string())
        return fmt::format("field 'ops[{}].{}' missing or not a string", i, f);
  }
  return "";
}

}  // namespace

int FlightDumps::readable() const {
  return static_cast<int>(std::count_if(dumps.begin(), dumps.end(), [](const auto& j) { return !j.is_null(); }));
}

FlightDumps read_flight_dumps(const std::filesystem::path& dir, int world_size) {
  FlightDumps out;
  out.dir = dir;
  if (!std::filesystem::is_directory(dir)) throw Error(fmt::format("{}: no such folder of flight dumps", dir.string()));
  std::map<int, nlohmann::json> read;
  std::map<int, std::string> problems;
  int highest = -1;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    int rank = -1;
    char tail = 0;
    if (std::sscanf(name.c_str(), "rank_%d.jso%c", &rank, &tail) != 2 || tail != 'n' ||
        name != fmt::format("rank_{}.json", rank))
      continue;
    highest = std::max(highest, rank);
    try {
      nlohmann::json j = nlohmann::json::parse(read_file_text(entry.path()));
      std::string why = dump_problem(j, rank);
      if (why.empty()) read[rank] = std::move(j);
      else problems[rank] = fmt::format("{}: {}", entry.path().string(), why);
    } catch (const std::exception& e) {
      problems[rank] = fmt::format("{}: not a flight dump: {}", entry.path().string(), e.what());
    }
  }
  if (read.empty())
    throw Error(problems.empty() ? fmt::format("{}: holds no flight dump (rank_N.json)", dir.string())
                                 : fmt::format("{}: no readable flight dump ({})", dir.string(),
                                               problems.begin()->second));
  out.world_size = world_size > 0 ? world_size : read.begin()->second["world_size"].get<int>();
  out.world_size = std::max(out.world_size, highest + 1);
  out.dumps.assign(out.world_size, nullptr);
  out.problems.assign(out.world_size, "");
  out.hosts.assign(out.world_size, "?");
  for (auto& [rank, j] : read) {
    const auto& hosts = j["hosts"];
    for (int r = 0; r < out.world_size && r < static_cast<int>(hosts.size()); ++r)
      if (hosts[r].is_string()) out.hosts[r] = hosts[r].get<std::string>();
    out.dumps[rank] = std::move(j);
  }
  for (int r = 0; r < out.world_size; ++r)
    if (out.dumps[r].is_null())
      out.problems[r] = problems.count(r) ? problems[r] : fmt::format("{}: missing", (dir / fmt::format("rank_{}.json", r)).string());
  return out;
}

std::string describe_flight_op(const nlohmann::json& op) {
  std::string s = op["what"].get<std::string>();
  if (op["unit"].get<int>() >= 0) s += fmt::format(", unit {}", op["unit"].get<int>());
  if (op["micro_batch"].get<int>() >= 0) s += fmt::format(", micro-batch {}", op["micro_batch"].get<int>());
  if (!op["tier"].get<std::string>().empty()) s += fmt::format(", {} tier", op["tier"].get<std::string>());
  if (!op["group"].get<std::string>().empty()) s += fmt::format(", group {}", op["group"].get<std::string>());
  return s;
}

namespace {

// Where one rank stands: the op it is stuck in (timed out, or the oldest not done), else the
// last it issued.
struct Standing {
  std::int64_t at = 0, last_issued = 0;
  const nlohmann::json* op = nullptr;  // the record of `at`, if in the ring
  std::string state;
};

Standing standing_of(const nlohmann::json& dump) {
  Standing s;
  s.last_issued = dump["issued"].get<std::int64_t>();
  const nlohmann::json* oldest_open = nullptr;
  const nlohmann::json* timed_out = nullptr;
  const nlohmann::json* last = nullptr;
  for (const auto& op : dump["ops"]) {
    const std::string state = op["state"].get<std::string>();
    if (state == "timed out" && !timed_out) timed_out = &op;
    if ((state == "issued" || state == "running") && !oldest_open) oldest_open = &op;
    last = &op;
  }
  s.op = timed_out ? timed_out : oldest_open ? oldest_open : last;
  s.at = s.op ? (*s.op)["seq"].get<std::int64_t>() : s.last_issued;
  s.state = s.op ? (*s.op)["state"].get<std::string>() : "none";
  return s;
}

std::string ranks_and_hosts(const std::vector<int>& ranks, const std::vector<std::string>& hosts) {
  std::vector<std::string> names;
  for (int r : ranks)
    if (std::find(names.begin(), names.end(), hosts[r]) == names.end()) names.push_back(hosts[r]);
  return fmt::format("{} {} ({} {})", ranks.size() == 1 ? "rank" : "ranks", rank_ranges(ranks),
                     names.size() == 1 ? "host" : "hosts", fmt::join(names, ", "));
}

}  // namespace

DesyncReport desync_report(const FlightDumps& d) {
  DesyncReport out;
  out.json = {{"world_size", d.world_size}, {"missing", nlohmann::json::array()}, {"groups", nlohmann::json::array()}};
  // Who waited for whom, from the timed-out ranks' dumps.
  std::map<int, std::vector<int>> awaited_by;
  for (int r = 0; r < d.world_size; ++r)
    if (!d.dumps[r].is_null() && d.dumps[r].contains("timeout"))
      for (const auto& peer : d.dumps[r]["timeout"]["waiting_for_ranks"]) awaited_by[peer.get<int>()].push_back(r);

  for (int r = 0; r < d.world_size; ++r) {
    if (!d.dumps[r].is_null()) continue;
    std::string line = fmt::format("{} left no dump: it died or stalls ({})", ranks_and_hosts({r}, d.hosts), d.problems[r]);
    if (awaited_by.count(r)) line += fmt::format("; {} waited for it", ranks_and_hosts(awaited_by[r], d.hosts));
    out.lines.push_back(line);
    out.json["missing"].push_back({{"rank", r}, {"host", d.hosts[r]}, {"problem", d.problems[r]},
                                   {"awaited_by", awaited_by.count(r) ? awaited_by[r] : std::vector<int>{}}});
  }

  std::map<std::int64_t, std::vector<int>> by_at;  // op -> ranks standing there
  std::vector<Standing> standing(d.world_size);
  for (int r = 0; r < d.world_size; ++r) {
    if (d.dumps[r].is_null()) continue;
    standing[r] = standing_of(d.dumps[r]);
    by_at[standing[r].at].push_back(r);
  }
  // Op `seq` as rank `r` recorded it (its group is r's own), else as any rank did.
  const auto describe = [&](std::int64_t seq, int r) {
    const nlohmann::json* found = nullptr;
    for (int q = 0; q < d.world_size && !found; ++q) {
      const int who = q == 0 ? r : q - (q <= r);  // r first, then the others in order
      if (d.dumps[who].is_null()) continue;
      for (const auto& op : d.dumps[who]["ops"])
        if (op["seq"].get<std::int64_t>() == seq) found = &op;
    }
    return found ? fmt::format("op {} ({})", seq, describe_flight_op(*found)) : fmt::format("op {}", seq);
  };
  if (by_at.empty()) return out;
  const std::int64_t front = by_at.rbegin()->first;
  const int front_rank = by_at.rbegin()->second.front();
  out.json["front"] = front;
  for (auto it = by_at.rbegin(); it != by_at.rend(); ++it) {
    const auto& [at, ranks] = *it;
    std::int64_t last = 0;
    for (int r : ranks) last = std::max(last, standing[r].last_issued);
    const std::string state = standing[ranks.front()].state;
    std::string line;
    if (at == front)
      line = fmt::format("{} {} {}", ranks_and_hosts(ranks, d.hosts),
                         state == "timed out" ? "timed out in" : state == "done" ? "last finished" : "wait in",
                         describe(at, ranks.front()));
    else if (last < front)
      line = fmt::format("{} never issued {}; {} at {}", ranks_and_hosts(ranks, d.hosts),
                         describe(front, front_rank), ranks.size() == 1 ? "it is" : "they are",
                         describe(at, ranks.front()));
    else
      line = fmt::format("{} are behind, at {}, {}", ranks_and_hosts(ranks, d.hosts), describe(at, ranks.front()),
                         state);
    out.lines.push_back(line);
    std::vector<std::string> hosts;
    for (int r : ranks) hosts.push_back(d.hosts[r]);
    out.json["groups"].push_back(
        {{"ranks", ranks}, {"hosts", hosts}, {"at", at}, {"last_issued", last}, {"state", state}});
  }
  return out;
}

}  // namespace strata::comm
