#pragma once
// The flight recorder: each rank keeps the last ops it issued in a bounded ring (what the op
// was, when it was issued, started and ended, and its state), so that when a run hangs or
// slows the ranks can say where. Dumped as OUT/flight/rank_N.json on a collective timeout,
// on a fatal error, on SIGUSR2 (the run goes on) and, when asked, at exit.
//
// Cheap by construction: the ring is allocated once (configure), an op is a fixed-size record
// written in place (no allocation), times are one clock read each. The thread that issues
// ops (the compute thread) is the ring's only writer of new records; the communication thread
// only stamps the start and end of records already there. A dump may run on either thread
// while the other writes: every record is guarded by its sequence number (a seqlock), so a
// record half-written at that moment is left out, never shown torn.
//
// Sequence numbers count the ops a rank issued since the start, and every rank issues the same
// ops in the same order (the schedule), so op N is the same op on every rank: the desync
// report compares ranks by it.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "topo/topology.hpp"

namespace strata::comm {

struct TimedOutWait;

enum class FlightState : std::uint8_t { Issued, Running, Done, TimedOut };
std::string_view to_string(FlightState s);

// What an op is. `kind` and `what` are string literals (the schedule's names); the group's
// name is copied (truncated to fit).
struct FlightOp {
  std::int32_t op_id = -1;        // the schedule's op id; -1: none
  const char* kind = "";          // "all-gather", ...
  const char* what = "";          // its purpose: "W gather (forward)", ...
  std::int16_t tier = -1;         // the tier its messages cross
  std::string_view group;         // the communicator's name
  std::uint64_t bytes = 0;        // this rank's bytes on the wire, sent + received
  std::int32_t unit = -1;         // -1: not tied to a unit
  std::int32_t micro_batch = -1;  // within the step; -1: the step phase
  std::int64_t step = -1;         // the engine's optimizer steps before this one
};

// "on-fault": dumps on a timeout, a fatal error or SIGUSR2; "always": also at exit.
enum class FlightDump { OnFault, Always };
FlightDump parse_flight_dump(std::string_view text);  // throws Error naming train.flight_dump

inline constexpr int kDefaultFlightOps = 4096;

class FlightRecorder {
 public:
  FlightRecorder();
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Sizes the ring (0: recording off) and says where dumps go (empty: nowhere). Call before
  // any op is issued; forgets what was recorded.
  void configure(int capacity, std::filesystem::path dump_dir);
  // Who this is, for the dumps: this rank, every rank's host, the tiers' names (by index).
  void set_places(int world_rank, std::vector<std::string> hosts, const topo::Topology& topology);
  bool enabled() const { return capacity_ != 0; }
  int capacity() const { return static_cast<int>(capacity_); }
  const std::filesystem::path& dump_dir() const { return dump_dir_; }

  // The issuing thread: records an op as issued; returns its sequence number (0 when off).
  std::uint64_t issue(const FlightOp& op);
  // The communication thread: the op `seq` started, ended. A record the ring has reused
  // since is left alone.
  void start(std::uint64_t seq);
  void end(std::uint64_t seq);
  std::uint64_t issued() const { return next_seq_.load(std::memory_order_relaxed) - 1; }
  // A step's time split (the engine's, once a step): computing, and waiting for collectives.
  // Dumps carry the sums: a rank that computes far longer than the others is a straggler.
  void add_step_time(double compute_s, double exposed_comm_s);

  // The records still in the ring, oldest first, as the dump's "ops".
  nlohmann::json records() const;
  // The whole dump: who, why, and the records. `timeout`: the wait that timed out, if any.
  nlohmann::json dump_json(std::string_view reason, std::string_view message, const TimedOutWait* timeout) const;
  // Writes dump_json to dump_dir/rank_N.json (atomically); returns the path, or empty when
  // off or without a folder. Errors are reported on stderr, never thrown: a dump happens
  // while something else already went wrong.
  std::filesystem::path dump(std::string_view reason, std::string_view message = {},
                             const TimedOutWait* timeout = nullptr) const;

  // SIGUSR2: the handler only sets a flag; the run dumps at its next safe point.
  void install_dump_signal();
  void dump_if_signalled();

  // The collective timeout (wait.hpp): marks the running ops timed out and dumps. The first
  // rank to claim the folder's report then waits for the others' dumps and prints the desync
  // report; returns whether this rank did (it aborts first; the others wait longer).
  bool on_timeout(const TimedOutWait& w);

 private:
  struct Record;
  Record* slot(std::uint64_t seq) const;
  void stamp(std::uint64_t seq, bool end);

  std::uint64_t capacity_ = 0;
  std::unique_ptr<Record[]> ring_;
  std::atomic<std::uint64_t> next_seq_{1};
  std::atomic<double> compute_s_{0}, exposed_s_{0};
  std::atomic<std::int64_t> timed_steps_{0};
  std::filesystem::path dump_dir_;
  int rank_ = 0;
  std::vector<std::string> hosts_, tiers_;
};

// The process's recorder (one per process, as the collective timeout is).
FlightRecorder& flight_recorder();

// A new run into a folder keeps the dumps of the one before as DIR.previous (replacing older
// ones), so that a report never mixes two runs' dumps.
void set_aside_flight_dumps(const std::filesystem::path& dir);

// ---- Reading dumps -------------------------------------------------------------------------

// Every rank's dump in a folder, as read back.
struct FlightDumps {
  std::filesystem::path dir;
  int world_size = 0;
  std::vector<nlohmann::json> dumps;   // per world rank; null where missing or damaged
  std::vector<std::string> problems;   // per world rank: empty, or why it is not there, naming the file
  std::vector<std::string> hosts;      // per world rank (from any dump), "?" where unknown
  int readable() const;
};
// Reads dir/rank_N.json for every rank; world_size 0: the dumps' own. A dump that is not
// one (not JSON, a field missing or of the wrong type) is set aside with the reason. Throws
// Error naming the folder when it holds no readable dump.
FlightDumps read_flight_dumps(const std::filesystem::path& dir, int world_size = 0);

// Which ranks reached which op, where they diverge and who is behind, from the dumps
// (a missing dump names its rank): lines of text, and the same as JSON.
struct DesyncReport {
  std::vector<std::string> lines;
  nlohmann::json json;
};
DesyncReport desync_report(const FlightDumps& dumps);
// "W gather (forward), unit 5, tier cluster, group across-cluster#0.1": a dumped op.
std::string describe_flight_op(const nlohmann::json& op);

}  // namespace strata::comm
