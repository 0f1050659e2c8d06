// Checkpoints of `weft train` (docs/checkpoints.md): what one rank needs to continue
// a job — named tensors (parameters, optimizer and outer-optimizer state, the RNG)
// and counters (the iteration, the data position) — in a file per rank, and a
// manifest naming the last checkpoint every rank completed.
//
// Layout of a checkpoint directory DIR:
//   DIR/rank<r>-iter<t>.ckpt  rank r's state after t iterations;
//   DIR/latest.json           written by rank 0 once every rank's file of iteration
//                             t is complete: {"format", "job", "iteration", "ranks"}.
// Every file is written atomically (a temporary beside it, fsync, rename; units/
// files.h), so a reader sees a whole file or none. A rank removes its own files
// older than its previous checkpoint only after every rank has written the newer
// one, so the file the manifest names always exists (Note [Checkpoint commit] in
// trainer.cc).
//
// A rank file is the line "weft-checkpoint", one line of JSON (the header: format
// version, job identity, rank, iteration, data position, and per tensor its name,
// dtype, shape and place in the payload, and the payload's CRC-32), then the
// payload: the tensors' bytes, contiguous, in the header's order.
//
// Thread-safety: functions of distinct files may run concurrently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace weft::runtime {

// The version this program writes and the only one it reads.
inline constexpr int kCheckpointFormat = 1;

struct RankCheckpoint {
  std::int64_t iteration = 0;      // iterations trained; a resumed job starts with this one
  std::int64_t data_position = 0;  // batches this rank's DataSource handed out
  std::map<std::string, torch::Tensor> tensors;  // float32, int64 or uint8; any shape
};

// Writes rank `rank`'s checkpoint of `job` (the job identity; see
// TrainOptions in trainer.cc) into `dir`. THROWS std::runtime_error naming the file
// if it cannot be written (the old checkpoint is left as it was).
void save_rank_checkpoint(const std::filesystem::path& dir, const nlohmann::json& job, int rank,
                          const RankCheckpoint& state);

// Rank 0, once every rank's file of `iteration` exists: points the manifest at it.
void commit_checkpoint(const std::filesystem::path& dir, const nlohmann::json& job, std::int64_t iteration,
                       int ranks);

// Removes rank `rank`'s files of iterations before `keep_from`, and the temporary
// files an earlier process of this rank left behind when it was killed mid-write.
void prune_checkpoints(const std::filesystem::path& dir, int rank, std::int64_t keep_from);

// The iteration of the last committed checkpoint in `dir`.
// THROWS UsageError (the flag --resume, the directory and the reason): no
// checkpoint there, a manifest of another format version, or of another job —
// naming the first field that differs, its value there and here.
std::int64_t latest_checkpoint(const std::filesystem::path& dir, const nlohmann::json& job);

// The job identity the manifest in `dir` records, unchecked (latest_checkpoint
// checks it). THROWS UsageError as latest_checkpoint for a missing or unreadable
// manifest.
nlohmann::json checkpointed_job(const std::filesystem::path& dir);

// Rank `rank`'s checkpoint of `iteration`. THROWS UsageError naming the file if it
// is missing, truncated, corrupt (CRC), of another format or job, rank or iteration.
RankCheckpoint load_rank_checkpoint(const std::filesystem::path& dir, const nlohmann::json& job, int rank,
                                    std::int64_t iteration);

}  // namespace weft::runtime
