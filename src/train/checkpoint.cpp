#include "train/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <csignal>
#include <functional>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <numeric>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/fileio.hpp"
#include "optim/loss_scaler.hpp"
#include "train/faults.hpp"

namespace strata::train {

namespace fs = std::filesystem;

namespace {

constexpr int kStates = 3;                     // master, exp_avg, exp_avg_sq
constexpr std::size_t kChunkFloats = 1 << 20;  // 4 MB of file I/O at a time
// The most floats a checkpoint may hold: their 3 states still count in 64-bit bytes.
constexpr std::uint64_t kMaxArenaFloats = UINT64_MAX / (kStates * sizeof(float));

// An open file descriptor that closes itself.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

struct Hasher {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state{XXH3_createState(), &XXH3_freeState};
  Hasher() {
    if (!state) throw std::bad_alloc();
    XXH3_64bits_reset(state.get());
  }
  void update(const void* p, std::size_t n) { XXH3_64bits_update(state.get(), p, n); }
  std::uint64_t digest() { return XXH3_64bits_digest(state.get()); }
  void reset() { XXH3_64bits_reset(state.get()); }
};

// The checksums of a shard's bytes as they stream past: whole (unless `whole` is false) and
// per block of `block_bytes` (unless 0); `on_block(i, xxh3)` sees each block as it completes.
class ShardHasher {
 public:
  ShardHasher(bool whole, std::uint64_t block_bytes, std::function<void(std::size_t, std::uint64_t)> on_block = {})
      : whole_wanted_(whole), block_bytes_(block_bytes), on_block_(std::move(on_block)) {}
  void update(const void* data, std::size_t n) {
    if (whole_wanted_) whole_.update(data, n);
    if (block_bytes_ == 0) return;
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
      const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(n, block_bytes_ - in_block_));
      block_.update(p, take);
      p += take, n -= take, in_block_ += take;
      if (in_block_ == block_bytes_) end_block();
    }
  }
  // The whole checksum ("" when not wanted), after the last (partial) block.
  std::string finish() {
    if (in_block_ > 0) end_block();
    return whole_wanted_ ? digest_hex(whole_.digest()) : "";
  }
  const std::vector<std::uint64_t>& blocks() const { return blocks_; }

 private:
  void end_block() {
    blocks_.push_back(block_.digest());
    if (on_block_) on_block_(blocks_.size() - 1, blocks_.back());
    block_.reset();
    in_block_ = 0;
  }
  bool whole_wanted_;
  std::uint64_t block_bytes_;
  std::function<void(std::size_t, std::uint64_t)> on_block_;
  Hasher whole_, block_;
  std::uint64_t in_block_ = 0;
  std::vector<std::uint64_t> blocks_;
};

std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Digest terms of n floats of state k that sit at arena positions first, first + 1, ...
// Cloned for x86-64-v4: AVX-512's 64-bit multiplies let the compiler vectorize the loop.
__attribute__((target_clones("arch=x86-64-v4", "default")))
std::uint64_t digest_run(const float* values, std::size_t n, std::size_t first, int k) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, values + i, sizeof bits);
    sum += mix64(mix64(3 * static_cast<std::uint64_t>(first + i) + static_cast<std::uint64_t>(k)) ^ bits);
  }
  return sum;
}

std::uint64_t parse_digest(const std::string& hex, const std::string& origin, const std::string& field) {
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), v, 16);
  if (hex.size() != 16 || ec != std::errc() || end != hex.data() + hex.size())
    throw Error(fmt::format("{}: malformed: field '{}' must be 16 hex digits, not '{}'", origin, field, hex));
  return v;
}

void read_exact(int fd, void* data, std::size_t n, std::uint64_t offset, const fs::path& path) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("{}: read failed: {}", path.string(), std::strerror(errno)));
    }
    if (r == 0) throw Error(fmt::format("{}: truncated (ends at byte {})", path.string(), offset));
    p += r;
    offset += static_cast<std::uint64_t>(r);
    n -= static_cast<std::size_t>(r);
  }
}

// Runs of equal length at equal distances, as manifests write them: [begin, end, stride, repeats].
nlohmann::json runs_to_json(const std::vector<ArenaRange>& runs) {
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = 0; i < runs.size();) {
    const std::size_t length = runs[i].end - runs[i].begin;
    std::size_t j = i + 1, stride = 0;
    if (j < runs.size() && runs[j].begin > runs[i].begin) stride = runs[j].begin - runs[i].begin;
    while (j < runs.size() && stride > 0 && runs[j].end - runs[j].begin == length &&
           runs[j].begin == runs[j - 1].begin + stride)
      ++j;
    if (j - i > 1) out.push_back({runs[i].begin, runs[i].end, stride, j - i});
    else out.push_back({runs[i].begin, runs[i].end});
    i = j;
  }
  return out;
}

// The runs of runs_to_json's groups (already checked: see Checkpoint::open).
std::vector<ArenaRange> runs_from_json(const nlohmann::json& groups) {
  std::vector<ArenaRange> runs;
  for (const auto& g : groups) {
    const auto begin = g[0].get<std::size_t>(), end = g[1].get<std::size_t>();
    const std::size_t stride = g.size() == 4 ? g[2].get<std::size_t>() : 0, repeats = g.size() == 4 ? g[3].get<std::size_t>() : 1;
    for (std::size_t i = 0; i < repeats; ++i) runs.push_back({begin + i * stride, end + i * stride});
  }
  return runs;
}

nlohmann::json record_to_json(const ShardRecord& r) {
  nlohmann::json blocks = nlohmann::json::array();
  for (std::uint64_t b : r.blocks) blocks.push_back(digest_hex(b));
  nlohmann::json j = {{"rank", r.rank}, {"file", r.file}, {"offset", r.offset}};
  // One run keeps the fields of manifests written before records could hold several.
  if (r.runs.size() == 1) j["begin"] = r.runs[0].begin, j["end"] = r.runs[0].end;
  else j["runs"] = runs_to_json(r.runs);
  j.update({{"bytes", r.bytes}, {"xxh3", r.xxh3}, {"blocks", blocks}, {"digest", digest_hex(r.digest)}});
  return j;
}

ShardRecord record_from_json(const nlohmann::json& j) {
  ShardRecord r{j.at("rank").get<int>(),
                j.at("file").get<std::string>(),
                j.at("offset").get<std::uint64_t>(),
                j.contains("runs") ? runs_from_json(j.at("runs"))
                                   : std::vector<ArenaRange>{{j.at("begin").get<std::size_t>(), j.at("end").get<std::size_t>()}},
                j.at("bytes").get<std::uint64_t>(),
                j.at("xxh3").get<std::string>(),
                {},
                std::stoull(j.at("digest").get<std::string>(), nullptr, 16)};
  for (const auto& b : j.at("blocks")) r.blocks.push_back(std::stoull(b.get<std::string>(), nullptr, 16));
  return r;
}

// "bytes [60000, 1108576) of the file": where a shard, or a block of it, lies in its file.
std::string byte_range(std::uint64_t first, std::uint64_t bytes) {
  return fmt::format("bytes [{}, {}) of the file", first, first + bytes);
}

// A step_<digits> folder name -> its step; anything else (step_X.tmp, other files) -> -1.
std::int64_t step_of(const std::string& name) {
  if (!name.starts_with("step_") || name.size() == 5 || name.size() > 5 + 18) return -1;
  if (!std::all_of(name.begin() + 5, name.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) return -1;
  return std::stoll(name.substr(5));
}

// Reads manifest fields, naming the manifest and the field when one is missing or mistyped.
struct ManifestReader {
  std::string origin;  // path of manifest.json
  const nlohmann::json& at(const nlohmann::json& obj, const std::string& key, const std::string& where) const {
    if (!obj.is_object() || !obj.contains(key))
      throw Error(fmt::format("{}: malformed: field '{}{}' missing", origin, where, key));
    return obj[key];
  }
  std::uint64_t uint(const nlohmann::json& obj, const std::string& key, const std::string& where = "",
                     std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) const {
    auto& v = at(obj, key, where);
    if (!v.is_number_unsigned())
      throw Error(fmt::format("{}: malformed: field '{}{}' must be a non-negative integer", origin, where, key));
    const auto u = v.get<std::uint64_t>();
    if (u > max) throw Error(fmt::format("{}: malformed: field '{}{}' = {} exceeds {}", origin, where, key, u, max));
    return u;
  }
  std::string str(const nlohmann::json& obj, const std::string& key, const std::string& where = "") const {
    auto& v = at(obj, key, where);
    if (!v.is_string()) throw Error(fmt::format("{}: malformed: field '{}{}' must be a string", origin, where, key));
    return v.get<std::string>();
  }
};

// Renames `from` to `to`; an existing `to` (a checkpoint of the same step from an earlier
// attempt) is swapped out atomically and then deleted, so the name never points at nothing.
void rename_into_place(const fs::path& from, const fs::path& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return;
  if (errno == EEXIST &&
      ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(from);  // now holds the replaced checkpoint
    return;
  }
  throw Error(fmt::format("{}: cannot rename into place as {}: {}", from.string(), to.string(), std::strerror(errno)));
}


}  // namespace

std::string checkpoint_name(std::int64_t step) { return fmt::format("step_{:08d}", step); }
std::string rank_file_name(int rank) { return fmt::format("rank{:05d}.bin", rank); }

std::size_t ShardRecord::floats() const {
  return std::accumulate(runs.begin(), runs.end(), std::size_t{0},
                         [](std::size_t n, const ArenaRange& r) { return n + (r.end - r.begin); });
}

std::uint64_t state_digest(const SavedShard& s) {
  std::uint64_t sum = 0;
  int k = 0;
  for (const float* state : {s.master, s.exp_avg, s.exp_avg_sq}) {
    for (const ArenaRange& r : s.runs) {
      sum += digest_run(state, r.end - r.begin, r.begin, k);
      state += r.end - r.begin;
    }
    ++k;
  }
  return sum;
}

std::string digest_hex(std::uint64_t digest) { return fmt::format("{:016x}", digest); }

SavedState saved_state(Engine& engine) {
  const model::ParamLayout& layout = engine.layout();
  SavedState out;
  for (const StateShard& s : engine.saved_shards()) {
    if (layout.split().size == 1) {
      out.shards.push_back({{{s.begin, s.end}}, s.master, s.exp_avg, s.exp_avg_sq});
      continue;
    }
    const std::vector<model::WholeRun> pieces = layout.whole_runs(s.begin, s.end, model::WholeCover::Saved);
    std::size_t n = 0;
    for (const model::WholeRun& p : pieces) n += p.count;
    if (n == 0) continue;
    float* packed = out.packed.emplace_back(kStates * n, 0.f).data();  // the padding stays zero
    SavedShard shard{{}, packed, packed + n, packed + 2 * n};
    std::size_t at = 0;
    for (const model::WholeRun& p : pieces) {
      if (!p.zeros) {
        std::copy_n(s.master + p.local, p.count, packed + at);
        std::copy_n(s.exp_avg + p.local, p.count, packed + n + at);
        std::copy_n(s.exp_avg_sq + p.local, p.count, packed + 2 * n + at);
      }
      if (!shard.runs.empty() && shard.runs.back().end == p.whole) shard.runs.back().end += p.count;
      else shard.runs.push_back({p.whole, p.whole + p.count});
      at += p.count;
    }
    out.shards.push_back(std::move(shard));
  }
  return out;
}

std::uint64_t engine_state_digest(Engine& engine) {
  std::uint64_t mine = 0;
  const SavedState saved = saved_state(engine);
  for (const SavedShard& s : saved.shards) mine += state_digest(s);
  std::uint64_t total = 0;
  for (const std::string& d : engine.all_gather_strings(std::to_string(mine))) total += std::stoull(d);
  return total;
}

std::vector<ShardRecord> write_rank_file(const fs::path& dir, int rank, const std::vector<SavedShard>& shards) {
  if (shards.empty()) return {};  // a rank holding only replicas writes no file
  const std::string name = rank_file_name(rank);
  const fs::path path = dir / name;
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.fd < 0) throw Error(fmt::format("{}: cannot create: {}", path.string(), std::strerror(errno)));
  std::vector<ShardRecord> records;
  std::uint64_t offset = 0;
  for (const SavedShard& s : shards) {
    std::size_t n = 0;
    for (const ArenaRange& r : s.runs) n += r.end - r.begin;
    ShardHasher hash(/*whole=*/true, kChecksumBlockBytes);  // the whole one for readers without blocks
    for (const float* state : {s.master, s.exp_avg, s.exp_avg_sq}) {
      write_all(fd.fd, state, n * sizeof(float), path);
      hash.update(state, n * sizeof(float));
    }
    const std::uint64_t bytes = std::uint64_t{kStates} * n * sizeof(float);
    const std::string xxh3 = hash.finish();
    records.push_back({rank, name, offset, s.runs, bytes, xxh3, hash.blocks(), state_digest(s)});
    offset += bytes;
  }
  if (::fsync(fd.fd) != 0) throw Error(fmt::format("{}: fsync failed: {}", path.string(), std::strerror(errno)));
  return records;
}

void write_manifest(const fs::path& dir, const CheckpointInfo& info, std::size_t arena_floats,
                    const std::vector<ShardRecord>& shards) {
  nlohmann::json records = nlohmann::json::array();
  std::uint64_t digest = 0;
  for (const ShardRecord& r : shards) {
    records.push_back(record_to_json(r));
    digest += r.digest;
  }
  nlohmann::json manifest = {{"format", "strata-checkpoint"},
                             {"version", kCheckpointVersion},
                             {"step", info.step},
                             {"world_size", info.world_size},
                             {"model", info.model.to_json()},
                             {"engine", info.engine},
                             {"arena_floats", arena_floats},
                             {"states", {"master", "exp_avg", "exp_avg_sq"}},
                             {"state_digest", digest_hex(digest)},
                             {"block_bytes", kChecksumBlockBytes},
                             {"run", info.run},
                             {"data", info.data},
                             {"rng", info.rng},
                             {"trainer", info.trainer},
                             {"shards", records}};
  atomic_write_file(dir / kManifestName, manifest.dump(2) + "\n");
}

void commit_checkpoint_dir(const fs::path& tmp_dir, const fs::path& final_dir) {
  fsync_directory(tmp_dir);
  rename_into_place(tmp_dir, final_dir);
  fsync_directory(final_dir.parent_path());
}

fs::path save_checkpoint(Engine& engine, const fs::path& root, const CheckpointInfo& info) {
  const std::string name = checkpoint_name(info.step);
  const fs::path final_dir = root / name;
  const fs::path tmp_dir = root / (name + ".tmp");
  const bool leader = engine.rank() == 0;

  agree(engine, [&] {
    if (!leader) return;
    std::error_code ec;
    fs::create_directories(root, ec);
    if (ec) throw Error(fmt::format("{}: cannot create: {}", root.string(), ec.message()));
    fs::remove_all(tmp_dir, ec);  // left over from a save that crashed
    if (!fs::create_directory(tmp_dir, ec) || ec)
      throw Error(fmt::format("{}: cannot create: {}", tmp_dir.string(), ec.message()));
  });

  std::vector<ShardRecord> mine;
  std::string local_error;
  try {
    const SavedState saved = saved_state(engine);
    mine = write_rank_file(tmp_dir, engine.rank(), saved.shards);
  } catch (const Error& e) {
    local_error = e.what();
  }
  if (FaultPlan::from_environment().fires(FaultAction::KillInSave, info.step, engine.rank())) ::raise(SIGKILL);
  nlohmann::json mine_json = nlohmann::json::array();
  for (auto& r : mine) mine_json.push_back(record_to_json(r));
  auto gathered = engine.all_gather_strings(local_error.empty() ? mine_json.dump() : "!" + local_error);

  agree(engine, [&] {
    if (!leader) return;
    std::vector<ShardRecord> shards;
    for (std::size_t r = 0; r < gathered.size(); ++r) {
      if (gathered[r].starts_with("!")) {
        std::error_code ec;
        fs::remove_all(tmp_dir, ec);
        throw Error(gathered.size() == 1 ? gathered[r].substr(1) : fmt::format("rank {}: {}", r, gathered[r].substr(1)));
      }
      for (auto& rec : nlohmann::json::parse(gathered[r])) shards.push_back(record_from_json(rec));
    }
    // The whole model's arena, whatever slice of it this engine's layout holds.
    write_manifest(tmp_dir, info, model::ParamLayout(engine.layout().config()).total_floats(), shards);
    commit_checkpoint_dir(tmp_dir, final_dir);
  });
  return final_dir;
}

namespace {

// A shard file's size, through the one input check (a folder or a FIFO in its place is refused,
// not read); a missing one says so in the words the fault tests and users know.
std::uint64_t shard_file_size(const fs::path& path, int rank) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(fmt::format("{}: missing shard file (rank {})", path.string(), rank));
  try {
    return check_input_file(path, Empty::allow);
  } catch (const Error& e) {
    throw Error(fmt::format("{} (the shard file of rank {})", e.what(), rank));
  }
}

// A record's runs: "begin" and "end", or "runs" (runs_to_json's groups), each checked before
// any is expanded: non-empty, inside the arena, no more floats in all than the arena holds;
// and expanded only when the record's file holds that many floats, so that a manifest cannot
// make a reader allocate more runs than there are floats on disk.
std::vector<ArenaRange> record_runs(const ManifestReader& mr, const nlohmann::json& s, const std::string& where,
                                    std::size_t arena_floats, const fs::path& file, int rank) {
  auto inside = [&](std::uint64_t begin, std::uint64_t end, const std::string& field) {
    if (begin >= end || end > arena_floats)
      throw Error(fmt::format("{}: malformed: field '{}' = [{}, {}) is not a run of the arena of {} floats",
                              mr.origin, field, begin, end, arena_floats));
  };
  if (!s.contains("runs")) {
    const std::uint64_t begin = mr.uint(s, "begin", where), end = mr.uint(s, "end", where);
    inside(begin, end, where + "begin, end");
    return {{begin, end}};
  }
  const nlohmann::json& groups = s["runs"];
  if (!groups.is_array() || groups.empty())
    throw Error(fmt::format("{}: malformed: field '{}runs' must be a non-empty array", mr.origin, where));
  std::uint64_t floats = 0;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const std::string field = fmt::format("{}runs[{}]", where, i);
    const nlohmann::json& g = groups[i];
    if (!g.is_array() || (g.size() != 2 && g.size() != 4) ||
        !std::all_of(g.begin(), g.end(), [](const nlohmann::json& v) { return v.is_number_unsigned(); }))
      throw Error(fmt::format("{}: malformed: field '{}' must be [begin, end] or [begin, end, stride, repeats]",
                              mr.origin, field));
    const auto begin = g[0].get<std::uint64_t>(), end = g[1].get<std::uint64_t>();
    inside(begin, end, field);
    std::uint64_t repeats = 1;
    if (g.size() == 4) {
      const auto stride = g[2].get<std::uint64_t>();
      repeats = g[3].get<std::uint64_t>();
      if (repeats == 0 || stride < end - begin || (repeats - 1) > (arena_floats - end) / std::max<std::uint64_t>(stride, 1))
        throw Error(fmt::format("{}: malformed: field '{}': {} runs {} apart from [{}, {}) do not fit the arena of {} "
                                "floats without overlapping",
                                mr.origin, field, repeats, stride, begin, end, arena_floats));
    }
    if (repeats * (end - begin) > arena_floats - floats)
      throw Error(fmt::format("{}: malformed: the runs of '{}runs' hold more floats than the arena's {}", mr.origin,
                              where, arena_floats));
    floats += repeats * (end - begin);
  }
  const std::uint64_t size = shard_file_size(file, rank);
  if (size / (kStates * sizeof(float)) < floats)
    throw Error(fmt::format("{}: truncated shard file (rank {}): {} bytes, the manifest's {}runs hold {} floats",
                            file.string(), rank, size, where, floats));
  return runs_from_json(groups);
}

}  // namespace

Checkpoint Checkpoint::open(const fs::path& dir) {
  Checkpoint c;
  c.dir_ = dir;
  const fs::path manifest_path = dir / kManifestName;
  std::error_code ec;
  if (!fs::exists(manifest_path, ec))
    throw Error(fmt::format("{}: missing: {} is not a complete checkpoint", manifest_path.string(), dir.string()));
  ManifestReader mr{manifest_path.string()};
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(read_file_text(manifest_path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: malformed: {}", mr.origin, e.what()));
  }
  if (!m.is_object()) throw Error(fmt::format("{}: malformed: expected a JSON object", mr.origin));
  if (const std::string format = mr.str(m, "format"); format != "strata-checkpoint")
    throw Error(fmt::format("{}: not a strata checkpoint manifest (format '{}')", mr.origin, format));
  if (auto v = mr.uint(m, "version"); v != kCheckpointVersion)
    throw Error(fmt::format("{}: format version {} is not supported (this strata reads version {})", mr.origin, v,
                            kCheckpointVersion));

  constexpr auto kMaxInt = static_cast<std::uint64_t>(std::numeric_limits<int>::max());
  c.info_.step = static_cast<std::int64_t>(
      mr.uint(m, "step", "", static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())));
  c.info_.world_size = static_cast<int>(mr.uint(m, "world_size", "", kMaxInt));
  try {
    c.info_.model = model::ModelConfig::from_json(mr.at(m, "model", ""));
  } catch (const Error& e) {
    throw Error(fmt::format("{}: malformed: {}", mr.origin, e.what()));
  }
  c.arena_floats_ = mr.uint(m, "arena_floats");
  c.info_.run = mr.at(m, "run", "");
  c.info_.data = mr.at(m, "data", "");
  c.info_.rng = mr.at(m, "rng", "");
  c.info_.engine = mr.at(m, "engine", "");
  c.info_.trainer = mr.at(m, "trainer", "");
  c.state_digest_ = parse_digest(mr.str(m, "state_digest"), mr.origin, "state_digest");

  // Block checksums came in after version 2 began; a manifest without them is read as before.
  if (m.contains("block_bytes")) {
    c.block_bytes_ = mr.uint(m, "block_bytes");
    if (c.block_bytes_ == 0) throw Error(fmt::format("{}: malformed: field 'block_bytes' must be positive", mr.origin));
  }
  const auto& shards = mr.at(m, "shards", "");
  if (!shards.is_array() || shards.empty())
    throw Error(fmt::format("{}: malformed: 'shards' must be a non-empty array", mr.origin));
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const std::string where = fmt::format("shards[{}].", i);
    const auto& s = shards[i];
    ShardRecord r;
    r.rank = static_cast<int>(mr.uint(s, "rank", where, kMaxInt));
    r.file = mr.str(s, "file", where);
    r.offset = mr.uint(s, "offset", where);
    r.bytes = mr.uint(s, "bytes", where);
    r.xxh3 = mr.str(s, "xxh3", where);
    r.digest = parse_digest(mr.str(s, "digest", where), mr.origin, where + "digest");
    if (c.block_bytes_ > 0) {
      const nlohmann::json& blocks = mr.at(s, "blocks", where);
      if (!blocks.is_array())
        throw Error(fmt::format("{}: malformed: field '{}blocks' must be an array", mr.origin, where));
      for (std::size_t b = 0; b < blocks.size(); ++b) {
        const std::string field = fmt::format("{}blocks[{}]", where, b);
        if (!blocks[b].is_string())
          throw Error(fmt::format("{}: malformed: field '{}' must be a string", mr.origin, field));
        r.blocks.push_back(parse_digest(blocks[b].get<std::string>(), mr.origin, field));
      }
    }
    // Shard files live inside the checkpoint folder; a path elsewhere is not ours to read.
    if (r.file.empty() || r.file.find('/') != std::string::npos || r.file == "." || r.file == "..")
      throw Error(fmt::format("{}: malformed: {}file '{}' is not a file name", mr.origin, where, r.file));
    r.runs = record_runs(mr, s, where, c.arena_floats_, dir / r.file, r.rank);
    // The size limit keeps bytes = 12 x floats (and the sum over all shards) from wrapping.
    if (r.floats() > kMaxArenaFloats || r.bytes != std::uint64_t{kStates} * r.floats() * sizeof(float))
      throw Error(fmt::format("{}: malformed: {}bytes = {} does not hold 3 states of {}", mr.origin, where, r.bytes,
                              r.runs.size() == 1 ? fmt::format("[{}, {})", r.runs[0].begin, r.runs[0].end)
                                                 : fmt::format("its {} runs ({} floats)", r.runs.size(), r.floats())));
    c.shards_.push_back(std::move(r));
  }

  // The records' runs must tile the arena exactly once.
  std::sort(c.shards_.begin(), c.shards_.end(),
            [](auto& a, auto& b) { return a.runs.front().begin < b.runs.front().begin; });
  for (std::size_t i = 0; i < c.shards_.size(); ++i)
    for (const ArenaRange& run : c.shards_[i].runs) c.runs_.push_back({run.begin, run.end, i});
  std::sort(c.runs_.begin(), c.runs_.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
  std::size_t cursor = 0;
  for (const Placed& run : c.runs_) {
    if (run.begin != cursor)
      throw Error(fmt::format("{}: malformed: the shards do not cover the arena exactly once (gap or overlap at "
                              "float {})",
                              mr.origin, cursor));
    cursor = run.end;
  }
  if (cursor != c.arena_floats_ || cursor > kMaxArenaFloats)
    throw Error(fmt::format("{}: malformed: the shards cover {} floats, arena_floats = {}", mr.origin, cursor,
                            c.arena_floats_));

  // Each shard file must hold exactly its records, back to back.
  std::map<std::string, std::vector<const ShardRecord*>> by_file;
  for (auto& r : c.shards_) by_file[r.file].push_back(&r);
  for (auto& [file, recs] : by_file) {
    std::sort(recs.begin(), recs.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    std::uint64_t expected = 0;
    for (auto* r : recs) {
      if (r->offset != expected)
        throw Error(fmt::format("{}: malformed: records of {} are not back to back", mr.origin, file));
      expected += r->bytes;
    }
    const fs::path path = dir / file;
    const std::uint64_t size = shard_file_size(path, recs.front()->rank);
    if (size < expected)
      throw Error(fmt::format("{}: truncated shard file (rank {}): {} bytes, the manifest says {}", path.string(),
                              recs.front()->rank, size, expected));
    if (size > expected)
      throw Error(fmt::format("{}: shard file (rank {}) has {} bytes, the manifest says {}", path.string(),
                              recs.front()->rank, size, expected));
  }
  if (c.block_bytes_ > 0)
    for (std::size_t i = 0; i < shards.size(); ++i) {
      const ShardRecord& r = c.shards_[i];
      const std::uint64_t need = r.bytes / c.block_bytes_ + (r.bytes % c.block_bytes_ != 0);
      if (r.blocks.size() != need)
        throw Error(fmt::format("{}: malformed: the blocks of the shard at byte {} of {} are {} checksums; {} bytes in "
                                "blocks of {} need {}",
                                mr.origin, r.offset, r.file, r.blocks.size(), r.bytes, c.block_bytes_, need));
    }
  // Only now, with arena_floats backed by that many bytes on disk, is the model's layout built:
  // it costs time and memory in n_layer, and every layer holds at least one float.
  if (static_cast<std::size_t>(c.info_.model.n_layer) > c.arena_floats_)
    throw Error(fmt::format("{}: malformed: model.n_layer = {} cannot fit arena_floats = {}", mr.origin,
                            c.info_.model.n_layer, c.arena_floats_));
  if (const std::size_t model_floats = model::ParamLayout(c.info_.model).total_floats();
      c.arena_floats_ != model_floats)
    throw Error(fmt::format("{}: malformed: arena_floats = {} does not match the model ({} floats)", mr.origin,
                            c.arena_floats_, model_floats));
  return c;
}

namespace {

// Streams one shard's bytes in chunks, state by state, handing each chunk to `fn(k, first,
// values, n)` (state k, arena position of values[0]), checking each block's checksum as it
// completes (or, in a manifest without block checksums, the shard's at the end). Errors name the file, the rank that wrote it and the
// bytes of the first damaged block (with block checksums; else the shard's bytes).
void scan_shard(const fs::path& dir, const ShardRecord& r, std::uint64_t block_bytes,
                const std::function<void(int, std::size_t, const float*, std::size_t)>& fn) {
  const fs::path path = dir / r.file;
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0)
    throw Error(fmt::format("{}: cannot open shard file (rank {}): {}", path.string(), r.rank, std::strerror(errno)));
  const std::size_t n = r.floats();
  std::vector<float> buf(std::min(n, kChunkFloats));
  // The blocks cover every byte, so with them the whole checksum would only cost a second pass.
  const bool by_blocks = !r.blocks.empty();
  ShardHasher hash(!by_blocks, by_blocks ? block_bytes : 0, [&](std::size_t b, std::uint64_t got) {
    if (got == r.blocks[b]) return;
    const std::uint64_t first = b * block_bytes;
    throw Error(fmt::format("{}: checksum mismatch in the shard of rank {}: damage within {} (block {} of {}, "
                            "xxh3 {}, the manifest says {}); the file is corrupt",
                            path.string(), r.rank, byte_range(r.offset + first, std::min(block_bytes, r.bytes - first)),
                            b, r.blocks.size(), digest_hex(got), digest_hex(r.blocks[b])));
  });
  std::uint64_t offset = r.offset;
  for (int k = 0; k < kStates; ++k) {
    std::size_t run = 0, into = 0;  // where the next value sits: r.runs[run].begin + into
    for (std::size_t i = 0; i < n; i += kChunkFloats) {
      const std::size_t m = std::min(kChunkFloats, n - i);
      read_exact(fd.fd, buf.data(), m * sizeof(float), offset, path);
      offset += m * sizeof(float);
      hash.update(buf.data(), m * sizeof(float));
      // The chunk, run by run.
      for (std::size_t done = 0; done < m;) {
        const ArenaRange& a = r.runs[run];
        const std::size_t take = std::min(m - done, a.end - a.begin - into);
        fn(k, a.begin + into, buf.data() + done, take);
        done += take, into += take;
        if (into == a.end - a.begin) ++run, into = 0;
      }
    }
  }
  const std::string whole = hash.finish();
  if (!by_blocks && whole != r.xxh3)
    throw Error(fmt::format("{}: checksum mismatch in the shard of rank {} ({}): xxh3 {}, the manifest says {}; the "
                            "file is corrupt",
                            path.string(), r.rank, byte_range(r.offset, r.bytes), whole, r.xxh3));
}

}  // namespace

void Checkpoint::read(std::vector<Copy> copies) const {
  std::sort(copies.begin(), copies.end(), [](const Copy& a, const Copy& b) { return a.begin < b.begin; });
  for (std::size_t i = 0; i < copies.size(); ++i) {
    const Copy& c = copies[i];
    if (c.begin > arena_floats_ || c.count > arena_floats_ - c.begin)
      throw Error(fmt::format("{}: range [{}, {}) lies outside the arena of {} floats", dir_.string(), c.begin,
                              c.begin + c.count, arena_floats_));
    if (i > 0 && copies[i - 1].begin + copies[i - 1].count > c.begin)
      throw Error(fmt::format("{}: ranges to read overlap at float {}", dir_.string(), c.begin));
  }
  // The records any copy touches, each read once (its checksums cover all of it).
  std::vector<bool> needed(shards_.size(), false);
  for (const Copy& c : copies) {
    auto it = std::upper_bound(runs_.begin(), runs_.end(), c.begin,
                               [](std::size_t at, const Placed& p) { return at < p.begin; });
    if (it != runs_.begin()) --it;
    for (; it != runs_.end() && it->begin < c.begin + c.count; ++it)
      if (it->end > c.begin) needed[it->record] = true;
  }
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    if (!needed[i]) continue;
    scan_shard(dir_, shards_[i], block_bytes_, [&](int k, std::size_t first, const float* values, std::size_t m) {
      auto c = std::upper_bound(copies.begin(), copies.end(), first,
                                [](std::size_t at, const Copy& x) { return at < x.begin; });
      if (c != copies.begin()) --c;
      for (; c != copies.end() && c->begin < first + m; ++c) {
        float* const dst[kStates] = {c->master, c->exp_avg, c->exp_avg_sq};
        const std::size_t lo = std::max(first, c->begin), hi = std::min(first + m, c->begin + c->count);
        if (dst[k] && lo < hi) std::memcpy(dst[k] + (lo - c->begin), values + (lo - first), (hi - lo) * sizeof(float));
      }
    });
  }
}

void Checkpoint::verify() const {
  std::uint64_t total = 0;
  for (const ShardRecord& r : shards_) {
    std::uint64_t digest = 0;
    scan_shard(dir_, r, block_bytes_, [&](int k, std::size_t first, const float* values, std::size_t m) {
      digest += digest_run(values, m, first, k);
    });
    if (digest != r.digest)
      throw Error(fmt::format("{}: the shard of rank {} ({}) has content digest {}, the manifest says {}; the "
                              "file or the manifest is corrupt",
                              (dir_ / r.file).string(), r.rank, byte_range(r.offset, r.bytes), digest_hex(digest),
                              digest_hex(r.digest)));
    total += digest;
  }
  if (total != state_digest_)
    throw Error(fmt::format("{}/{}: state_digest {} is not the sum of the shards' digests ({})", dir_.string(),
                            kManifestName, digest_hex(state_digest_), digest_hex(total)));
}

void check_same_model(const Checkpoint& ckpt, const model::ModelConfig& config) {
  const auto saved = ckpt.info().model.to_json(), want = config.to_json();
  for (auto& [key, value] : saved.items()) {
    if (want[key] != value)
      throw Error(fmt::format("{}: checkpoint of another model shape: model.{} = {} in the checkpoint, {} in this run",
                              ckpt.dir().string(), key, value.dump(), want[key].dump()));
  }
}

TrainerState read_trainer_state(const Checkpoint& ckpt) {
  const ManifestReader mr{(ckpt.dir() / kManifestName).string()};
  const CheckpointInfo& info = ckpt.info();
  constexpr auto kMaxInt64 = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  TrainerState state;
  state.train_position = static_cast<std::int64_t>(mr.uint(info.data, "train_position", "data.", kMaxInt64));
  state.skipped_steps = static_cast<std::int64_t>(mr.uint(info.trainer, "skipped_steps", "trainer.", kMaxInt64));
  state.good_steps = static_cast<std::int64_t>(mr.uint(info.trainer, "good_steps", "trainer.", kMaxInt64));
  const std::string scaling = mr.str(info.trainer, "loss_scaling", "trainer.");
  if (scaling != "dynamic" && scaling != "off")
    throw Error(fmt::format("{}: malformed: field 'trainer.loss_scaling' = '{}': expected 'dynamic' or 'off'",
                            mr.origin, scaling));
  state.dynamic_loss_scaling = scaling == "dynamic";
  const nlohmann::json& scale = mr.at(info.trainer, "loss_scale", "trainer.");
  if (!scale.is_number())
    throw Error(fmt::format("{}: malformed: field 'trainer.loss_scale' must be a number", mr.origin));
  state.loss_scale = scale.get<double>();
  if (state.dynamic_loss_scaling && !optim::LossScaler::valid_scale(state.loss_scale))
    throw Error(fmt::format("{}: malformed: field 'trainer.loss_scale' = {}: a dynamic scale is a power of two >= 1",
                            mr.origin, scale.dump()));
  return state;
}

void put_trainer_state(CheckpointInfo& info, const TrainerState& state) {
  info.data["train_position"] = state.train_position;
  info.trainer = {{"skipped_steps", state.skipped_steps},
                  {"loss_scale", state.loss_scale},
                  {"good_steps", state.good_steps},
                  {"loss_scaling", state.dynamic_loss_scaling ? "dynamic" : "off"}};
}

void load_checkpoint(Engine& engine, const Checkpoint& ckpt) {
  agree(engine, [&] {
    const model::ParamLayout& layout = engine.layout();
    check_same_model(ckpt, layout.config());
    std::vector<Checkpoint::Copy> copies;
    for (const StateShard& s : engine.state_shards()) {
      if (layout.split().size > 1)  // a TP slice's own padding comes from nowhere: zero
        for (float* state : {s.master, s.exp_avg, s.exp_avg_sq}) std::fill(state, state + (s.end - s.begin), 0.f);
      for (const model::WholeRun& w : layout.whole_runs(s.begin, s.end, model::WholeCover::Loaded))
        copies.push_back({w.whole, w.count, s.master + w.local, s.exp_avg + w.local, s.exp_avg_sq + w.local});
    }
    ckpt.read(std::move(copies));
  });
  // Whatever the two layouts, the loaded slices must add up to the saved state.
  const std::uint64_t loaded = engine_state_digest(engine);
  if (loaded != ckpt.state_digest())
    throw AgreedError(fmt::format("{}: the state loaded into {} ranks has digest {}, the checkpoint {}", ckpt.dir().string(),
                            engine.world_size(), digest_hex(loaded), digest_hex(ckpt.state_digest())));
  engine.state_loaded();
}

std::vector<std::int64_t> checkpoint_steps(const fs::path& root) {
  std::vector<std::int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return steps;
  for (auto& entry : fs::directory_iterator(root)) {
    const std::int64_t step = step_of(entry.path().filename().string());
    if (step >= 0 && fs::exists(entry.path() / kManifestName)) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

namespace {
fs::path checkpoint_root(const fs::path& path) {
  std::error_code ec;  // a name the OS refuses (too long) is a missing folder, not an exception
  if (!fs::is_directory(path, ec)) throw Error(fmt::format("{}: no such checkpoint or output folder", path.string()));
  return fs::is_directory(path / "ckpt", ec) ? path / "ckpt" : path;
}
}  // namespace

fs::path find_checkpoint(const fs::path& path) {
  std::error_code ec;
  if (fs::exists(path / kManifestName, ec)) return path;
  const fs::path root = checkpoint_root(path);
  const auto steps = checkpoint_steps(root);
  if (steps.empty())
    throw Error(fmt::format("{}: no complete checkpoint in it (expected step_*/manifest.json under {})",
                            path.string(), root.string()));
  return root / checkpoint_name(steps.back());
}

void verify_resumable(const fs::path& dir) {
  const Checkpoint ckpt = Checkpoint::open(dir);
  ckpt.verify();
  read_trainer_state(ckpt);
}

std::string intact_alternative(const fs::path& damaged) {
  const fs::path root = damaged.parent_path();
  const auto steps = checkpoint_steps(root);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const fs::path dir = root / checkpoint_name(*it);
    if (fs::equivalent(dir, damaged)) continue;
    try {
      verify_resumable(dir);
      return fmt::format("\n  the newest intact checkpoint beside it: {}", dir.string());
    } catch (const Error&) {
    }
  }
  return fmt::format("\n  no intact checkpoint beside it in {}", root.string());
}

ResumeChoice choose_checkpoint(const fs::path& path) {
  std::error_code ec;
  if (fs::exists(path / kManifestName, ec)) {
    try {
      verify_resumable(path);
    } catch (const Error& e) {
      throw Error(e.what() + intact_alternative(path));
    }
    return {path, {}};
  }
  const fs::path root = checkpoint_root(path);
  const auto steps = checkpoint_steps(root);
  ResumeChoice choice;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const fs::path dir = root / checkpoint_name(*it);
    try {
      verify_resumable(dir);
      choice.dir = dir;
      return choice;
    } catch (const Error& e) {
      choice.passed_over.push_back(e.what());
    }
  }
  std::string why;
  for (auto& p : choice.passed_over) why += "\n  " + p;
  throw Error(fmt::format("{}: no intact checkpoint in it (expected step_*/manifest.json under {}){}", path.string(),
                          root.string(), why));
}

std::vector<fs::path> prune_checkpoints(const fs::path& root, std::int64_t newest, int keep_last) {
  std::vector<fs::path> deleted;
  if (keep_last <= 0) return deleted;
  std::vector<std::int64_t> older;
  for (std::int64_t step : checkpoint_steps(root))
    if (step < newest) older.push_back(step);
  // The newest counts as one of the kept.
  const std::size_t keep_older = static_cast<std::size_t>(keep_last - 1);
  const std::size_t drop = older.size() > keep_older ? older.size() - keep_older : 0;
  for (std::size_t i = 0; i < drop; ++i) deleted.push_back(root / checkpoint_name(older[i]));
  for (auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".tmp")) {
      const std::int64_t step = step_of(name.substr(0, name.size() - 4));
      if (step >= 0 && step < newest) deleted.push_back(entry.path());
    }
  }
  for (const fs::path& p : deleted) {
    // Remove the manifest first: a folder cut short by a crash is then an unfinished one.
    std::error_code ec;
    fs::remove(p / kManifestName, ec);
    fsync_directory(p);
    fs::remove_all(p, ec);
    if (ec) throw Error(fmt::format("{}: cannot delete (train.keep_last): {}", p.string(), ec.message()));
  }
  if (!deleted.empty()) fsync_directory(root);
  return deleted;
}

}  // namespace strata::train
