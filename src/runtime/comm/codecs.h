// Codecs: a message's mean all-reduce in a compressed wire encoding
// (schedule/encoding.h; docs/compression.md). The averaging executor
// (runtime/comm/averaging.cc) hands each message whose encoding is not `none` to the
// codec of that encoding; one implementation per codec, behind one interface:
//   fp16      values / P in float16, summed by Gloo's all-reduce (or all-gather)
//   bf16      a ring of our own (Note [Requantising ring]), bfloat16 on the wire
//   int8      the same ring, int8 with a float32 scale per kInt8Block values, and
//             error feedback
//   powersgd  rank-R factors of every matrix wholly inside the message, fused
//             into one all-reduce for P and one for Q, error feedback and warm
//             start; the other values in float16
//   acpsgd    the same factors, P and Q in alternate messages (Note [Alternating
//             factors]), in one fp16 all-reduce with the other values
//
// Every codec leaves bit-identical means on every rank: what a rank decodes is
// the same bytes every other rank decodes, and any arithmetic after that is the
// same arithmetic on the same values.
//
// Note [Error feedback]
// ---------------------
// A lossy codec with error feedback keeps, per layer, one float32 buffer e the size
// of the layer. A message sends x = g + e and, where an error is made, stores
// in e the error this rank introduced (x − decode(encode(x)) at each of its
// encodes, in sum units). The errors of all ranks add up to exactly what the sum
// lost, and each is sent again next time, so the sum over steps of the averaged
// values differs from the float32 sum by the last step's residual only: it does
// not grow with the number of steps.
//
// Note [Requantising ring]
// ------------------------
// An int8 sum overflows, and an all-gather of P encoded buffers moves P−1 times
// the message per rank, so bf16 and int8 run a reduce-scatter/all-gather ring over
// Gloo's send and recv: the message is cut into P segments; in P−1 steps each rank
// decodes the partial sum it receives, adds its own values in float32 and encodes
// the result for its right neighbour; the owner of each finished segment encodes
// it once more, and the all-gather forwards those bytes unchanged. Each rank
// moves 2(P−1)/P of the encoded message, as a float32 ring moves of float32.
// Segments move in pieces (about 16 KiB, at most 16 per segment) with every
// receive posted at the start, so a piece goes on as soon as it arrives: the link
// does not idle between the 2(P−1) steps, as Gloo's own ring does not.
//
// Thread-safety: a codec is driven by the engine's one communication thread;
// codecs that run several exchanges per message run them, one message after the
// other in the order started, on a thread of their own.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include "runtime/comm/executor.h"
#include "schedule/encoding.h"
#include "schedule/schedule.h"

namespace weft::runtime {

class SiteCollectives;

struct CodecContext {
  c10d::ProcessGroup* group = nullptr;  // REQUIRES: outlives the codec; ranks 0..workers-1 average
  int workers = 1;
  // The layers' tensors (float32, contiguous), for their sizes and shapes.
  const std::vector<std::vector<torch::Tensor>>* layers = nullptr;
  Bytes gather_below = 0;  // Note [Small all-reduces by all-gather], for the Gloo sums
  // Set for messages that average by sites (Reach::kBySites; Note [Sum by sites] in
  // runtime/comm/sites.h), instead of `group`: every sum goes by sites, the ring
  // codecs run their ring between the leaders on their sites' exact sums. Sums
  // are linear, so the mean is the flat codec's but for where each value was
  // rounded; only the encoded bytes cross the WAN. REQUIRES: outlives the codec.
  SiteCollectives* sites = nullptr;
};

class Codec {
 public:
  virtual ~Codec() = default;
  // Starts averaging `packed` (1-D float32, contiguous: the bytes `chunks` name,
  // in order) over the workers. Every rank must start the same messages, of the
  // same chunks, in the same order. `done` fails if an exchange fails.
  virtual OpExecutor::Started start(const std::vector<Chunk>& chunks, torch::Tensor packed) = 0;
  // Once `done` has completed: turns `result` into the float32 mean, as many
  // values as `packed` had.
  virtual void complete(torch::Tensor& result) = 0;
  // For the timeline, e.g. "int8 ring".
  virtual std::string describe() const = 0;
  // Bytes of error-feedback state held now (Note [Error feedback]).
  virtual Bytes state_bytes() const { return 0; }
  // What the codec carries from one message to the next (error-feedback buffers
  // "feedback/<layer>", PowerSGD's factors "q/<layer>/<tensor>"), for a checkpoint
  // (docs/checkpoints.md). REQUIRES: no message in flight.
  virtual std::map<std::string, torch::Tensor> state() const { return {}; }
  // Sets the state to one that state() of the same codec over the same layers
  // returned. REQUIRES: no message in flight. THROWS std::invalid_argument naming an
  // entry this codec does not keep or one of another size.
  virtual void load_state(const std::map<std::string, torch::Tensor>& state);
};

// An element-wise wire format: how the ring (bf16, int8) and the parameter
// server's pushes and answers (fp16, bf16, int8; runtime/comm/parameter_server.h)
// write float32 values as bytes. Thread-safety: immutable.
class WireFormat {
 public:
  virtual ~WireFormat() = default;
  // Bytes on the wire for `values` values: elementwise_wire_bytes.
  virtual Bytes bytes(std::int64_t values) const = 0;
  // Segments start at multiples of this many values (a block's scale stays with it).
  virtual std::int64_t alignment() const { return 1; }
  virtual void encode(const float* in, std::int64_t n, std::uint8_t* out) const = 0;
  virtual void decode(const std::uint8_t* in, std::int64_t n, float* out) const = 0;
  // The same on tensors: `values` 1-D float32 contiguous -> bytes(n) uint8, and back.
  torch::Tensor encoded(const torch::Tensor& values) const;
  torch::Tensor decoded(const torch::Tensor& wire, std::int64_t values) const;
};

// The wire format of fp16, bf16 or int8. THROWS std::logic_error for another encoding.
std::unique_ptr<WireFormat> make_wire_format(const Encoding& encoding);

// The codec of `encoding`. REQUIRES: lossy(encoding); context.workers >= 2, or
// context.sites.
std::unique_ptr<Codec> make_codec(const Encoding& encoding, const CodecContext& context);

// Times each codec's encoding and decoding on this thread, for
// Host::codec_cost (docs/compression.md): fp16, bf16 and int8 in seconds per
// float32 value of a message (what one rank's part of the ring encodes and
// decodes), powersgd and acpsgd in seconds per rows·cols·R of a matrix. Medians of a few
// repetitions on a buffer of a million values; takes about a second.
std::map<std::string, double> measure_codec_costs();

// The chunks of `message` in packing order.
std::vector<Chunk> chunks_of(const Schedule& schedule, const Message& message);

}  // namespace weft::runtime
