#include "runtime/train/checkpoint.h"

#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <regex>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "units/files.h"
#include "units/units.h"

namespace weft::runtime {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr std::string_view kMagic = "weft-checkpoint\n";
const std::string kManifest = "latest.json";

fs::path rank_file(const fs::path& dir, int rank, std::int64_t iteration) {
  return dir / fmt::format("rank{}-iter{}.ckpt", rank, iteration);
}

std::string dtype_name(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return "float32";
    case torch::kInt64: return "int64";
    case torch::kUInt8: return "uint8";
    default: break;
  }
  throw std::logic_error(fmt::format("checkpoint: tensors of type {} are not stored", c10::toString(t)));
}

std::optional<torch::ScalarType> dtype_of(const std::string& name) {
  if (name == "float32") return torch::kFloat32;
  if (name == "int64") return torch::kInt64;
  if (name == "uint8") return torch::kUInt8;
  return std::nullopt;
}

std::uint32_t crc_of(std::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths: feed it in pieces.
  for (std::size_t at = 0; at < bytes.size();) {
    const std::size_t n = std::min<std::size_t>(bytes.size() - at, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), static_cast<uInt>(n));
    at += n;
  }
  return static_cast<std::uint32_t>(crc);
}

// The first field of `expected` whose value differs in `found`, as a sentence; empty
// if none does.
std::string difference(const json& found, const json& expected) {
  for (const auto& [key, value] : expected.items()) {
    if (!found.contains(key)) return fmt::format("it records no {}", key);
    if (found[key] != value) return fmt::format("it is of {} {}, this job's is {}", key, found[key].dump(), value.dump());
  }
  for (const auto& [key, value] : found.items()) {
    if (!expected.contains(key)) return fmt::format("it is of {} {}, this job has none", key, value.dump());
  }
  return {};
}

[[noreturn]] void refuse(const fs::path& file, const std::string& why) {
  throw UsageError(fmt::format("--resume {}: {}", file.string(), why));
}

void check_header(const json& header, const fs::path& file, const json& job) {
  if (!header.contains("format") || header["format"] != kCheckpointFormat) {
    refuse(file, fmt::format("checkpoint format {}; this weft reads format {} only",
                             header.contains("format") ? header["format"].dump() : "(none)", kCheckpointFormat));
  }
  if (const std::string why = difference(header.value("job", json::object()), job); !why.empty()) {
    refuse(file, "the checkpoint is of another job: " + why);
  }
}

}  // namespace

void save_rank_checkpoint(const fs::path& dir, const json& job, int rank, const RankCheckpoint& state) {
  json header{{"format", kCheckpointFormat}, {"job", job}, {"rank", rank}, {"iteration", state.iteration},
              {"data_position", state.data_position}};
  std::string payload;
  json tensors = json::array();
  for (const auto& [name, tensor] : state.tensors) {
    const torch::Tensor t = tensor.detach().contiguous();
    tensors.push_back({{"name", name}, {"dtype", dtype_name(t.scalar_type())}, {"shape", t.sizes().vec()},
                       {"offset", payload.size()}, {"bytes", t.nbytes()}});
    payload.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  }
  header["tensors"] = std::move(tensors);
  header["payload_bytes"] = payload.size();
  header["crc32"] = crc_of(payload);
  std::string text(kMagic);
  text += header.dump();
  text += '\n';
  text += payload;
  write_file_atomically(rank_file(dir, rank, state.iteration), text);
}

void commit_checkpoint(const fs::path& dir, const json& job, std::int64_t iteration, int ranks) {
  const json manifest{{"format", kCheckpointFormat}, {"job", job}, {"iteration", iteration}, {"ranks", ranks}};
  write_file_atomically(dir / kManifest, manifest.dump(2) + "\n");
}

void prune_checkpoints(const fs::path& dir, int rank, std::int64_t keep_from) {
  // rank<r>-iter<t>.ckpt, and the temporaries write_file_atomically names
  // <file>.tmp-<pid>-<n> (rank 0 also owns the manifest's).
  const std::regex name(fmt::format("(rank{}-iter([0-9]+)\\.ckpt{})(\\.tmp-([0-9]+)-[0-9]+)?", rank,
                                    rank == 0 ? "|latest\\.json" : ""));
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (!std::regex_match(file, m, name)) continue;
    const bool temporary = m[3].matched;
    const bool stale = temporary ? std::stoll(m[4].str()) != ::getpid()
                                 : m[2].matched && std::stoll(m[2].str()) < keep_from;
    if (stale) fs::remove(entry.path(), ec);
  }
}

namespace {

json read_manifest(const fs::path& dir) {
  const fs::path file = dir / kManifest;
  if (!fs::exists(file)) refuse(dir, "no checkpoint there (no latest.json); start the job without --resume");
  try {
    return json::parse(read_input(file, "the checkpoint manifest"));
  } catch (const json::exception& e) {
    refuse(file, fmt::format("not a checkpoint manifest ({})", e.what()));
  }
}

}  // namespace

std::int64_t latest_checkpoint(const fs::path& dir, const json& job) {
  const fs::path file = dir / kManifest;
  const json manifest = read_manifest(dir);
  check_header(manifest, file, job);
  if (!manifest.contains("iteration") || !manifest["iteration"].is_number_integer() || manifest["iteration"] < 0) {
    refuse(file, "no iteration recorded");
  }
  return manifest["iteration"].get<std::int64_t>();
}

json checkpointed_job(const fs::path& dir) {
  const json manifest = read_manifest(dir);
  if (!manifest.is_object() || !manifest.contains("job") || !manifest["job"].is_object()) {
    refuse(dir / kManifest, "no job recorded");
  }
  return manifest["job"];
}

RankCheckpoint load_rank_checkpoint(const fs::path& dir, const json& job, int rank, std::int64_t iteration) {
  const fs::path file = rank_file(dir, rank, iteration);
  if (!fs::exists(file)) refuse(file, fmt::format("rank {}'s checkpoint of iteration {} is missing", rank, iteration));
  const std::string text = read_input(file, "the checkpoint");
  const auto end_of_header = text.find('\n', kMagic.size());
  if (!text.starts_with(kMagic) || end_of_header == std::string::npos) refuse(file, "not a weft checkpoint");
  json header;
  try {
    header = json::parse(std::string_view(text).substr(kMagic.size(), end_of_header - kMagic.size()));
  } catch (const json::exception&) {
    refuse(file, "its header is not JSON");
  }
  check_header(header, file, job);
  const std::string_view payload = std::string_view(text).substr(end_of_header + 1);
  try {
    if (header.at("rank") != rank || header.at("iteration") != iteration) {
      refuse(file, fmt::format("it is rank {}'s of iteration {}, expected rank {}'s of iteration {}",
                               header["rank"].dump(), header["iteration"].dump(), rank, iteration));
    }
    if (header.at("payload_bytes").get<std::size_t>() != payload.size()) {
      refuse(file, fmt::format("truncated: {} bytes of data, the header declares {}", payload.size(),
                               header["payload_bytes"].dump()));
    }
    if (header.at("crc32").get<std::uint32_t>() != crc_of(payload)) refuse(file, "corrupt (CRC-32 mismatch)");
    RankCheckpoint state{.iteration = iteration, .data_position = header.at("data_position").get<std::int64_t>()};
    for (const json& t : header.at("tensors")) {
      const auto dtype = dtype_of(t.at("dtype").get<std::string>());
      const auto offset = t.at("offset").get<std::size_t>();
      const auto bytes = t.at("bytes").get<std::size_t>();
      if (!dtype || offset > payload.size() || bytes > payload.size() - offset) {
        refuse(file, fmt::format("tensor {} lies outside the data or has an unknown type", t.at("name").dump()));
      }
      torch::Tensor tensor = torch::empty(t.at("shape").get<std::vector<std::int64_t>>(), *dtype);
      if (tensor.nbytes() != bytes) refuse(file, fmt::format("tensor {} has a shape of another size", t["name"].dump()));
      std::memcpy(tensor.data_ptr(), payload.data() + offset, bytes);
      state.tensors.emplace(t.at("name").get<std::string>(), std::move(tensor));
    }
    return state;
  } catch (const json::exception& e) {
    refuse(file, fmt::format("its header is incomplete ({})", e.what()));
  }
}

}  // namespace weft::runtime
