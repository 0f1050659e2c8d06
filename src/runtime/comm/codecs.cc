#include "runtime/comm/codecs.h"

#include <algorithm>
#include <chrono>
#include <bit>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <thread>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Half.h>
#include <fmt/format.h>

#include "runtime/comm/process_group.h"
#include "runtime/comm/serial_jobs.h"
#include "runtime/comm/sites.h"

namespace weft::runtime {
namespace {

using Future = c10::intrusive_ptr<c10::ivalue::Future>;
using Work = c10::intrusive_ptr<c10d::Work>;

// Point-to-point tags of the ring, apart from the parameter servers' [0, 2^30).
constexpr int kRingTag = 1 << 30;
// A ring segment moves in pieces of about this many wire bytes, at most kRingPieces.
constexpr std::int64_t kRingPieceBytes = 16 << 10;
constexpr int kRingPieces = 16;

// The sum of `t` over the workers, as the context says: by sites, or on its group.
Summing start_workers_sum(const CodecContext& c, const torch::Tensor& t) {
  return c.sites != nullptr ? c.sites->start_sum_by_sites(t) : start_sum(*c.group, t, c.gather_below);
}

std::int64_t values_of(const Chunk& c) { return c.length / static_cast<Bytes>(sizeof(float)); }

[[noreturn]] void bad_entry(const std::string& name, std::string_view why) {
  throw std::invalid_argument(fmt::format("codec state {}: {}", name, why));
}

// True if `name` is `prefix` followed by as many '/'-separated non-negative
// integers as `out` has, which it sets.
bool parse_indices(const std::string& name, std::string_view prefix, std::vector<int*> out) {
  if (!name.starts_with(prefix)) return false;
  std::size_t at = prefix.size();
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::size_t end = i + 1 < out.size() ? name.find('/', at) : name.size();
    if (end == std::string::npos || end == at || end - at > 9) return false;
    const std::string digits = name.substr(at, end - at);
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
    *out[i] = std::stoi(digits);
    at = end + 1;
  }
  return true;
}

// Note [Error feedback]: one float32 buffer per layer, made on first use.
class ErrorFeedback {
 public:
  explicit ErrorFeedback(const std::vector<std::vector<torch::Tensor>>& layers) : layers_(layers) {}

  // The layer's buffer, as a flat float32 tensor.
  torch::Tensor& of(int layer) {
    torch::Tensor& e = buffers_[layer];
    if (!e.defined()) {
      std::int64_t n = 0;
      for (const auto& t : layers_[static_cast<size_t>(layer)]) n += t.numel();
      e = torch::zeros({n}, torch::kFloat32);
    }
    return e;
  }
  // The errors of `chunks`, packed as the message is.
  torch::Tensor gather(const std::vector<Chunk>& chunks) {
    std::vector<torch::Tensor> parts;
    for (const Chunk& c : chunks) parts.push_back(of(c.layer).narrow(0, c.offset / 4, values_of(c)));
    return torch::cat(parts);
  }
  // Stores `errors` (packed as the message is) as the chunks' new errors.
  void scatter(const std::vector<Chunk>& chunks, const torch::Tensor& errors) {
    std::int64_t at = 0;
    for (const Chunk& c : chunks) {
      of(c.layer).narrow(0, c.offset / 4, values_of(c)).copy_(errors.narrow(0, at, values_of(c)));
      at += values_of(c);
    }
  }
  Bytes bytes() const {
    Bytes total = 0;
    for (const auto& [layer, e] : buffers_) total += static_cast<Bytes>(e.numel()) * 4;
    return total;
  }
  // The buffers made so far as "feedback/<layer>" (Codec::state).
  void save(std::map<std::string, torch::Tensor>& state) const {
    for (const auto& [layer, e] : buffers_) state[fmt::format("feedback/{}", layer)] = e;
  }
  // Loads entry `name` of Codec::state if it is one of ours; false if it is not.
  bool load(const std::string& name, const torch::Tensor& value) {
    int layer = -1;
    if (!parse_indices(name, "feedback/", {&layer})) return false;
    if (layer < 0 || layer >= static_cast<int>(layers_.size())) bad_entry(name, "no such layer");
    std::int64_t n = 0;
    for (const auto& t : layers_[static_cast<size_t>(layer)]) n += t.numel();
    if (value.scalar_type() != torch::kFloat32 || value.dim() != 1 || value.numel() != n) {
      bad_entry(name, "another size");
    }
    of(layer).copy_(value);
    return true;
  }

 private:
  const std::vector<std::vector<torch::Tensor>>& layers_;
  std::map<int, torch::Tensor> buffers_;
};

// ---------------------------------------------------------------------------
// fp16: Gloo sums float16 itself.

class Fp16Codec : public Codec {
 public:
  explicit Fp16Codec(const CodecContext& c) : c_(c) {}
  OpExecutor::Started start(const std::vector<Chunk>&, torch::Tensor packed) override {
    // Divided first, as PyTorch's fp16_compress_hook does, so the sum stays in range.
    torch::Tensor half = packed.div(static_cast<double>(c_.workers)).to(torch::kFloat16);
    Summing sum = start_workers_sum(c_, half);
    return {.done = std::move(sum.done), .result = std::move(sum.result)};
  }
  void complete(torch::Tensor& result) override { result = sum_of(result).to(torch::kFloat32); }
  std::string describe() const override { return c_.sites != nullptr ? "fp16 allreduce by sites" : "fp16 allreduce"; }

 private:
  CodecContext c_;
};

// ---------------------------------------------------------------------------
// The element-wise wire formats, and the requantising ring (Note [Requantising ring]).

// IEEE half, rounded to nearest even (the parameter server's fp16; the all-reduce
// codec lets Gloo sum float16 itself).
class Fp16Format : public WireFormat {
 public:
  Bytes bytes(std::int64_t values) const override { return 2 * values; }
  void encode(const float* in, std::int64_t n, std::uint8_t* out) const override {
    auto* o = reinterpret_cast<c10::Half*>(out);
    for (std::int64_t i = 0; i < n; ++i) o[i] = c10::Half(in[i]);
  }
  void decode(const std::uint8_t* in, std::int64_t n, float* out) const override {
    const auto* h = reinterpret_cast<const c10::Half*>(in);
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(h[i]);
  }
};

// bfloat16: the top 16 bits of float32, rounded to nearest even.
class Bf16Format : public WireFormat {
 public:
  Bytes bytes(std::int64_t values) const override { return 2 * values; }
  void encode(const float* in, std::int64_t n, std::uint8_t* out) const override {
    auto* o = reinterpret_cast<std::uint16_t*>(out);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto u = std::bit_cast<std::uint32_t>(in[i]);
      o[i] = std::isnan(in[i]) ? static_cast<std::uint16_t>((u >> 16) | 0x40)
                               : static_cast<std::uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
    }
  }
  void decode(const std::uint8_t* in, std::int64_t n, float* out) const override {
    const auto* b = reinterpret_cast<const std::uint16_t*>(in);
    for (std::int64_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(b[i]) << 16);
  }
};

// int8: per block of kInt8Block values, a float32 scale max|x|/127 and the values
// rounded to the nearest multiple of it. Layout: the scales, then the values.
class Int8Format : public WireFormat {
 public:
  Bytes bytes(std::int64_t values) const override { return elementwise_wire_bytes({.codec = Encoding::Codec::kInt8}, values); }
  std::int64_t alignment() const override { return kInt8Block; }
  void encode(const float* in, std::int64_t n, std::uint8_t* out) const override {
    const std::int64_t blocks = (n + kInt8Block - 1) / kInt8Block;
    auto* scales = reinterpret_cast<float*>(out);
    auto* q = reinterpret_cast<std::int8_t*>(out + 4 * blocks);
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t begin = b * kInt8Block, end = std::min(n, begin + kInt8Block);
      float m = 0;
      for (std::int64_t i = begin; i < end; ++i) m = std::max(m, std::fabs(in[i]));
      if (std::isnan(m) || std::isinf(m)) m = std::numeric_limits<float>::quiet_NaN();
      const float scale = m / 127.0f;
      std::memcpy(scales + b, &scale, 4);
      for (std::int64_t i = begin; i < end; ++i) {
        q[i] = scale > 0 ? static_cast<std::int8_t>(std::clamp(std::nearbyint(in[i] / scale), -127.0f, 127.0f)) : 0;
      }
    }
  }
  void decode(const std::uint8_t* in, std::int64_t n, float* out) const override {
    const std::int64_t blocks = (n + kInt8Block - 1) / kInt8Block;
    const auto* q = reinterpret_cast<const std::int8_t*>(in + 4 * blocks);
    for (std::int64_t b = 0; b < blocks; ++b) {
      float scale;
      std::memcpy(&scale, in + 4 * b, 4);
      const std::int64_t begin = b * kInt8Block, end = std::min(n, begin + kInt8Block);
      for (std::int64_t i = begin; i < end; ++i) out[i] = static_cast<float>(q[i]) * scale;
    }
  }
};

class RingCodec : public Codec {
 public:
  RingCodec(const CodecContext& c, std::unique_ptr<WireFormat> format, bool feedback, std::string name)
      : c_(c), format_(std::move(format)), name_(std::move(name)) {
    if (feedback) feedback_ = std::make_unique<ErrorFeedback>(*c.layers);
  }

  OpExecutor::Started start(const std::vector<Chunk>& chunks, torch::Tensor packed) override {
    auto result = torch::empty_like(packed);
    Future done = jobs_.add([this, chunks, packed, result]() mutable { ring(chunks, packed, result); });
    return {.done = std::move(done), .result = result};
  }
  void complete(torch::Tensor&) override {}
  std::string describe() const override { return name_ + " ring"; }
  // The mean of `packed` over the group's ranks, on the calling thread: what a
  // leader's ring runs inside a sum by sites (LeadersRingCodec).
  void average_now(const std::vector<Chunk>& chunks, const torch::Tensor& packed, torch::Tensor& result) {
    ring(chunks, packed, result);
  }
  Bytes state_bytes() const override { return feedback_ ? feedback_->bytes() : 0; }
  std::map<std::string, torch::Tensor> state() const override {
    std::map<std::string, torch::Tensor> out;
    if (feedback_) feedback_->save(out);
    return out;
  }
  void load_state(const std::map<std::string, torch::Tensor>& state) override {
    for (const auto& [name, value] : state) {
      if (!feedback_ || !feedback_->load(name, value)) bad_entry(name, fmt::format("{} keeps no such state", name_));
    }
  }

 private:
  using Range = std::pair<std::int64_t, std::int64_t>;

  // The pieces of segment s of n values, each one message (Note [Requantising ring]):
  // aligned, of about kRingPieceBytes on the wire, at most kRingPieces.
  std::vector<Range> pieces(std::int64_t n, int s) const {
    const int p = c_.workers;
    const std::int64_t a = format_->alignment();
    const std::int64_t per = ((n + p - 1) / p + a - 1) / a * a;
    const std::int64_t begin = std::min(n, s * per), end = std::min(n, (s + 1) * per);
    const auto wanted = (format_->bytes(end - begin) + kRingPieceBytes - 1) / kRingPieceBytes;
    const auto count = std::clamp<std::int64_t>(wanted, 1, kRingPieces);
    const std::int64_t size = ((end - begin + count - 1) / count + a - 1) / a * a;
    std::vector<Range> out;
    for (std::int64_t b = begin; b < end; b += size) out.emplace_back(b, std::min(end, b + size));
    return out;
  }

  void ring(const std::vector<Chunk>& chunks, const torch::Tensor& packed, torch::Tensor& result) {
    const int p = c_.workers, r = c_.group->getRank(), steps = 2 * (p - 1);
    const int right = (r + 1) % p, left = (r + p - 1) % p;
    const std::int64_t n = packed.numel();
    torch::Tensor acc = feedback_ ? packed + feedback_->gather(chunks) : packed.clone();
    torch::Tensor errors = feedback_ ? torch::zeros_like(packed) : torch::Tensor();
    float* x = acc.data_ptr<float>();
    float* out = result.data_ptr<float>();
    std::vector<float> decoded;
    auto mod = [p](int s) { return ((s % p) + p) % p; };
    // Step k < p-1 of the reduce-scatter receives the partial sum of segment r-k-1;
    // step p-1+k of the all-gather, the finished segment r-k.
    auto received = [&](int k) { return k < p - 1 ? mod(r - k - 1) : mod(r - (k - (p - 1))); };
    auto wire_of = [&](Range v) {
      return torch::empty({static_cast<std::int64_t>(format_->bytes(v.second - v.first))}, torch::kUInt8);
    };
    // Encodes acc's values v, charging this rank's error (Note [Error feedback]).
    auto encode = [&](Range v) {
      const auto [b, e] = v;
      torch::Tensor wire = wire_of(v);
      format_->encode(x + b, e - b, wire.data_ptr<std::uint8_t>());
      if (feedback_) {
        decoded.resize(static_cast<size_t>(e - b));
        format_->decode(wire.data_ptr<std::uint8_t>(), e - b, decoded.data());
        float* err = errors.data_ptr<float>();
        for (std::int64_t i = b; i < e; ++i) err[i] += x[i] - decoded[static_cast<size_t>(i - b)];
      }
      return wire;
    };
    auto tag = [](int step, size_t piece) { return kRingTag + step * kRingPieces + static_cast<int>(piece); };
    // Every receive is posted at once, so that each piece moves on as soon as it
    // arrives and the link does not idle between steps.
    std::vector<std::vector<torch::Tensor>> in(static_cast<size_t>(steps));
    std::vector<std::vector<Work>> receives(static_cast<size_t>(steps));
    for (int k = 0; k < steps; ++k) {
      for (const Range& v : pieces(n, received(k))) {
        std::vector<torch::Tensor> t{wire_of(v)};
        receives[static_cast<size_t>(k)].push_back(
            jobs_.track(c_.group->recv(t, left, tag(k, in[static_cast<size_t>(k)].size()))));
        in[static_cast<size_t>(k)].push_back(t[0]);
      }
    }
    std::vector<Work> sends;
    auto send = [&](int step, size_t piece, const torch::Tensor& wire) {
      std::vector<torch::Tensor> t{wire};
      sends.push_back(jobs_.track(c_.group->send(t, right, tag(step, piece))));
    };
    auto arrived = [&](int k, size_t j) { receives[static_cast<size_t>(k)][j]->wait(); };

    // Step 0 sends this rank's own segment; a rank alone already owns it finished.
    const std::vector<Range> own_pieces = pieces(n, r);
    std::vector<torch::Tensor> owned;
    for (size_t j = 0; j < own_pieces.size(); ++j) {
      torch::Tensor wire = encode(own_pieces[j]);
      if (p == 1) {
        owned.push_back(wire);
      } else {
        send(0, j, wire);
      }
    }
    // Reduce-scatter: each piece received is added to this rank's values and sent on;
    // the last step's pieces complete the segment this rank owns.
    for (int k = 0; k + 1 < p; ++k) {
      const std::vector<Range> vs = pieces(n, received(k));
      for (size_t j = 0; j < vs.size(); ++j) {
        arrived(k, j);
        const auto [b, e] = vs[j];
        decoded.resize(static_cast<size_t>(e - b));
        format_->decode(in[static_cast<size_t>(k)][j].data_ptr<std::uint8_t>(), e - b, decoded.data());
        for (std::int64_t i = b; i < e; ++i) x[i] += decoded[static_cast<size_t>(i - b)];
        torch::Tensor wire = encode(vs[j]);
        if (k + 2 == p) owned.push_back(wire);
        send(k + 1, j, wire);
      }
    }
    // All-gather: each finished piece is forwarded unchanged, then decoded.
    for (int k = p - 1; k < steps; ++k) {
      for (size_t j = 0; j < in[static_cast<size_t>(k)].size(); ++j) {
        arrived(k, j);
        if (k + 1 < steps) send(k + 1, j, in[static_cast<size_t>(k)][j]);
      }
    }
    for (const Work& w : sends) w->wait();
    auto unpack = [&](int s, const std::vector<torch::Tensor>& wires) {
      const std::vector<Range> vs = pieces(n, s);
      for (size_t j = 0; j < vs.size(); ++j) {
        format_->decode(wires[j].data_ptr<std::uint8_t>(), vs[j].second - vs[j].first, out + vs[j].first);
      }
    };
    unpack(mod(r + 1), owned);
    for (int k = p - 1; k < steps; ++k) unpack(received(k), in[static_cast<size_t>(k)]);
    result.div_(static_cast<double>(p));
    if (feedback_) feedback_->scatter(chunks, errors);
  }

  CodecContext c_;
  std::unique_ptr<WireFormat> format_;
  std::unique_ptr<ErrorFeedback> feedback_;
  std::string name_;
  SerialJobs jobs_;  // last: its thread runs ring(), which uses the members above
};

// bf16 and int8 by sites (CodecContext::sites): each site sums its workers'
// float32 values exactly, the leaders run the requantising ring on their sites'
// sums, and each leader sends the decoded sum inside its site (Note [Sum by
// sites]). The error feedback is the leaders': each leader's encodes are the
// only ones, so its errors are all the sum lost (Note [Error feedback]).
class LeadersRingCodec : public Codec {
 public:
  LeadersRingCodec(const CodecContext& c, std::unique_ptr<WireFormat> format, bool feedback, std::string name)
      : c_(c), name_(std::move(name)) {
    if (c.sites->leaders() != nullptr) {
      ring_ = std::make_unique<RingCodec>(CodecContext{.group = c.sites->leaders(), .workers = c.sites->sites(),
                                                       .layers = c.layers},
                                          std::move(format), feedback, name_);
    }
  }
  OpExecutor::Started start(const std::vector<Chunk>& chunks, torch::Tensor packed) override {
    torch::Tensor sum = packed.clone();
    SiteCollectives::Between between;
    if (ring_) {
      between = [this, chunks](torch::Tensor& site_sum) {
        torch::Tensor mean = torch::empty_like(site_sum);
        ring_->average_now(chunks, site_sum, mean);
        site_sum.copy_(mean.mul_(static_cast<double>(c_.sites->sites())));
      };
    }
    Summing s = c_.sites->start_sum_by_sites(sum, std::move(between));
    return {.done = std::move(s.done), .result = std::move(s.result)};
  }
  void complete(torch::Tensor& result) override { result.div_(static_cast<double>(c_.workers)); }
  std::string describe() const override { return name_ + " ring by sites"; }
  Bytes state_bytes() const override { return ring_ ? ring_->state_bytes() : 0; }
  std::map<std::string, torch::Tensor> state() const override {
    return ring_ ? ring_->state() : std::map<std::string, torch::Tensor>{};
  }
  void load_state(const std::map<std::string, torch::Tensor>& state) override {
    if (ring_) {
      ring_->load_state(state);
    } else if (!state.empty()) {
      bad_entry(state.begin()->first, fmt::format("{} keeps its state on the sites' leaders only", describe()));
    }
  }

 private:
  CodecContext c_;
  std::string name_;
  std::unique_ptr<RingCodec> ring_;  // on a leader with 2+ sites
};

// ---------------------------------------------------------------------------
// PowerSGD (Vogels et al. 2019, as PyTorch's powerSGD_hook): per matrix M (the
// tensor as rows = its first dimension, cols = the rest) plus its error, P = MQ
// summed, orthonormalised, Q = MᵀP summed and divided by the workers; the mean is
// PQᵀ and the error M − PQᵀ. Q is kept for the next step (warm start), starting
// from the same seeded random matrix on every rank. The rest of the message
// (vectors) is summed beside, in fp16 with its rounding fed back (to_wire).

// Note [Alternating factors]
// ---------------------------
// acpsgd (ACP-SGD: Zhang et al., ICDCS 2023) runs PowerSGD's power iteration one
// half per message. Each matrix keeps the summed factor of its last message: kept
// Q, it sends P = M·orth(Q) and decodes P̄·orth(Q)ᵀ, then keeps P̄; kept P, it sends
// Q = Mᵀ·orth(P) and decodes orth(P)·Q̄ᵀ, then keeps Q̄. Either way the decoded
// matrix is the mean M̄ projected on a rank-R space every rank holds alike, so
// error feedback keeps what the projection missed, as in PowerSGD. Why: one sum per
// message instead of two in turn, half the factors' bytes on average, and the
// rest of the message (vectors) fits in the same sum.
//
// That sum is in fp16, values / P, as the fp16 codec's: on small models the
// vectors are most of the bytes. A factor's rounding is part of the decoded
// matrix, so error feedback keeps it; the rest sends its value plus its error
// and keeps what this rank's own rounding lost, as int8 does (PowerSGD's rest
// too). Without that, the fp16 sum learnt less than the float32 one (cnn, ten
// seeds: loss after 60 steps +2.3%); with it, as much.
class LowRankCodec : public Codec {
 public:
  LowRankCodec(const CodecContext& c, const Encoding& encoding)
      : c_(c), rank_(encoding.rank), alternate_(encoding.codec == Encoding::Codec::kAcpSgd), feedback_(*c.layers) {}

  OpExecutor::Started start(const std::vector<Chunk>& chunks, torch::Tensor packed) override {
    auto result = torch::empty_like(packed);
    Future done = jobs_.add([this, chunks, packed, result]() mutable {
      alternate_ ? average_alternating(chunks, packed, result) : average(chunks, packed, result);
    });
    return {.done = std::move(done), .result = result};
  }
  void complete(torch::Tensor&) override {}
  std::string describe() const override {
    return fmt::format("{}:{}{}", alternate_ ? "acpsgd" : "powersgd", rank_, c_.sites != nullptr ? " by sites" : "");
  }
  Bytes state_bytes() const override {
    Bytes factors = 0;
    for (const auto& [key, f] : kept_) factors += static_cast<Bytes>(f.value.numel()) * 4;
    return feedback_.bytes() + factors;
  }
  std::map<std::string, torch::Tensor> state() const override {
    std::map<std::string, torch::Tensor> out;
    feedback_.save(out);
    for (const auto& [key, f] : kept_) out[fmt::format("{}/{}/{}", f.is_p ? "p" : "q", key.first, key.second)] = f.value;
    return out;
  }
  void load_state(const std::map<std::string, torch::Tensor>& state) override {
    for (const auto& [name, value] : state) {
      if (feedback_.load(name, value)) continue;
      int layer = -1, tensor = -1;
      const bool is_p = alternate_ && parse_indices(name, "p/", {&layer, &tensor});
      if (!is_p && !parse_indices(name, "q/", {&layer, &tensor})) bad_entry(name, describe() + " keeps no such state");
      const auto& layers = *c_.layers;
      if (layer >= static_cast<int>(layers.size())) bad_entry(name, "no such layer");
      const auto& tensors = layers[static_cast<size_t>(layer)];
      if (tensor >= static_cast<int>(tensors.size())) bad_entry(name, "no such tensor");
      const torch::Tensor& t = tensors[static_cast<size_t>(tensor)];
      const std::int64_t rows = t.dim() >= 2 ? t.size(0) : t.numel(), cols = t.dim() >= 2 ? t.numel() / rows : 1;
      const std::vector<std::int64_t> shape{is_p ? rows : cols, std::min({static_cast<std::int64_t>(rank_), rows, cols})};
      if (value.scalar_type() != torch::kFloat32 || value.sizes().vec() != shape) bad_entry(name, "another shape");
      kept_[{layer, tensor}] = {.value = value.clone(), .is_p = is_p};
    }
  }

  // Gram-Schmidt on the columns of p, in place (as PyTorch's hook).
  static void orthogonalize(torch::Tensor& p) {
    for (std::int64_t i = 0; i < p.size(1); ++i) {
      torch::Tensor col = p.select(1, i);
      col.div_(col.norm() + 1e-8);
      if (i + 1 < p.size(1)) {
        torch::Tensor rest = p.narrow(1, i + 1, p.size(1) - i - 1);
        rest.sub_(col.unsqueeze(1) * torch::matmul(col.unsqueeze(0), rest));
      }
    }
  }

 private:
  struct Matrix {
    int layer;
    int tensor;
    std::int64_t at;  // first value in the packed message
    std::int64_t rows, cols, layer_at;
  };
  // A run of values of one layer that travels whole: `chunk` of its layer, at
  // value `at` of the packed message.
  struct Piece {
    std::int64_t at;
    Chunk chunk;
  };
  // The summed factor a matrix's next message reuses: Q (powersgd's warm start;
  // acpsgd after a P message) or P (acpsgd after a Q message).
  struct Factor {
    torch::Tensor value;
    bool is_p = false;
  };

  // Splits the message into matrices and the rest, as ranges (Note [Which tensors
  // PowerSGD factorises], schedule/encoding.h).
  void split(const std::vector<Chunk>& chunks, std::vector<Matrix>& matrices,
             std::vector<Piece>& rest) const {
    std::int64_t position = 0;
    for (const Chunk& c : chunks) {
      const std::int64_t begin = c.offset / 4, end = begin + values_of(c);
      std::int64_t t_begin = 0;
      const auto& tensors = (*c_.layers)[static_cast<size_t>(c.layer)];
      for (std::size_t i = 0; i < tensors.size(); ++i) {
        const std::int64_t t_end = t_begin + tensors[i].numel();
        const std::int64_t a = std::max(begin, t_begin), b = std::min(end, t_end);
        if (a < b) {
          const torch::Tensor& t = tensors[i];
          const MatrixShape m = matrix_shape(t.numel(), static_cast<std::size_t>(t.dim()), t.dim() > 0 ? t.size(0) : 1);
          if (a == t_begin && b == t_end && factorised(m, rank_)) {
            matrices.push_back({c.layer, static_cast<int>(i), position + (a - begin), m.rows, m.cols, t_begin});
          } else {
            rest.push_back({position + (a - begin), {.layer = c.layer, .offset = 4 * a, .length = 4 * (b - a)}});
          }
        }
        t_begin = t_end;
      }
      position += end - begin;
    }
  }

  Factor& kept(const Matrix& m) {
    Factor& f = kept_[{m.layer, m.tensor}];
    if (!f.value.defined()) {
      // The same on every rank: seeded by the tensor's place in the model.
      auto generator = at::detail::createCPUGenerator(static_cast<std::uint64_t>(1000003 * m.layer + m.tensor));
      f.value = torch::randn({m.cols, std::min({static_cast<std::int64_t>(rank_), m.rows, m.cols})},
                             generator, torch::kFloat32);
    }
    return f;
  }

  torch::Tensor sum(const torch::Tensor& t) {
    Summing s = start_workers_sum(c_, t);
    jobs_wait(s.done);
    return sum_of(s.result);
  }
  void jobs_wait(const Future& f) {
    f->wait();
    if (f->hasError()) std::rethrow_exception(f->exception_ptr());
  }

  // The matrix of `m` in `packed` plus this rank's carried error.
  torch::Tensor with_feedback(const Matrix& m, const torch::Tensor& packed) {
    torch::Tensor e = feedback_.of(m.layer).narrow(0, m.layer_at, m.rows * m.cols).view({m.rows, m.cols});
    return packed.narrow(0, m.at, m.rows * m.cols).view({m.rows, m.cols}) + e;
  }
  // Writes the decoded `approx` of `m` to `result` and keeps what it missed of `x`.
  void decoded(const Matrix& m, const torch::Tensor& x, const torch::Tensor& approx, torch::Tensor& result) {
    feedback_.of(m.layer).narrow(0, m.layer_at, m.rows * m.cols).copy_((x - approx).reshape({-1}));
    result.narrow(0, m.at, m.rows * m.cols).copy_(approx.reshape({-1}));
  }

  void average(const std::vector<Chunk>& chunks, const torch::Tensor& packed, torch::Tensor& result) {
    torch::NoGradGuard no_grad;
    std::vector<Matrix> matrices;
    std::vector<Piece> rest;
    split(chunks, matrices, rest);
    const double p = c_.workers;
    // The rest in fp16, started first: it runs beside the factors' sums.
    Summing rest_sum;
    if (!rest.empty()) {
      std::vector<torch::Tensor> parts;
      for (const Piece& r : rest) parts.push_back(packed.narrow(0, r.at, values_of(r.chunk)));
      rest_sum = start_workers_sum(c_, to_wire(torch::cat(parts), 0, rest));
    }
    std::vector<torch::Tensor> ms, ps;
    for (const Matrix& m : matrices) {
      ms.push_back(with_feedback(m, packed));
      ps.push_back(torch::matmul(ms.back(), kept(m).value));
    }
    if (!matrices.empty()) {
      torch::Tensor p_all = sum(flat(ps));
      unflat(p_all, ps);
      std::vector<torch::Tensor> qs;
      for (std::size_t i = 0; i < matrices.size(); ++i) {
        orthogonalize(ps[i]);
        qs.push_back(torch::matmul(ms[i].t(), ps[i]));
      }
      torch::Tensor q_all = sum(flat(qs)).div_(p);
      unflat(q_all, qs);
      for (std::size_t i = 0; i < matrices.size(); ++i) {
        kept(matrices[i]).value.copy_(qs[i]);
        decoded(matrices[i], ms[i], torch::matmul(ps[i], qs[i].t()), result);
      }
    }
    if (!rest.empty()) {
      jobs_wait(rest_sum.done);
      copy_rest(sum_of(rest_sum.result).to(torch::kFloat32), rest, result);
    }
  }

  // Note [Alternating factors]: one fp16 sum of this message's factors and rest.
  void average_alternating(const std::vector<Chunk>& chunks, const torch::Tensor& packed, torch::Tensor& result) {
    torch::NoGradGuard no_grad;
    std::vector<Matrix> matrices;
    std::vector<Piece> rest;
    split(chunks, matrices, rest);
    std::vector<torch::Tensor> ms, bases, sent;
    for (const Matrix& m : matrices) {
      ms.push_back(with_feedback(m, packed));
      const Factor& k = kept(m);
      torch::Tensor basis = k.value.clone();
      orthogonalize(basis);
      sent.push_back(k.is_p ? torch::matmul(ms.back().t(), basis) : torch::matmul(ms.back(), basis));
      bases.push_back(std::move(basis));
    }
    std::vector<torch::Tensor> parts;
    for (const auto& f : sent) parts.push_back(f.reshape({-1}));
    std::int64_t factors = 0;
    for (const auto& f : sent) factors += f.numel();
    for (const Piece& r : rest) parts.push_back(packed.narrow(0, r.at, values_of(r.chunk)));
    if (parts.empty()) return;
    const torch::Tensor mean = sum(to_wire(torch::cat(parts), factors, rest)).to(torch::kFloat32);
    unflat(mean, sent);
    for (std::size_t i = 0; i < matrices.size(); ++i) {
      Factor& k = kept(matrices[i]);
      const torch::Tensor approx = k.is_p ? torch::matmul(bases[i], sent[i].t()) : torch::matmul(sent[i], bases[i].t());
      k = {.value = sent[i], .is_p = !k.is_p};
      decoded(matrices[i], ms[i], approx, result);
    }
    copy_rest(mean.narrow(0, factors, mean.numel() - factors), rest, result);
  }

  // `x` / P in fp16, to be summed; its values from `from` on are `rest`'s, which
  // send their value plus their error and keep what this rank's rounding lost (a
  // factor's rounding is part of its decoded matrix: Note [Alternating factors]).
  torch::Tensor to_wire(torch::Tensor x, std::int64_t from, const std::vector<Piece>& rest) {
    const double p = c_.workers;
    std::vector<Chunk> chunks;
    for (const Piece& r : rest) chunks.push_back(r.chunk);
    torch::Tensor values = x.narrow(0, from, x.numel() - from);
    if (!chunks.empty()) values.add_(feedback_.gather(chunks));
    torch::Tensor wire = (x / p).to(torch::kFloat16);
    if (!chunks.empty()) feedback_.scatter(chunks, values - wire.narrow(0, from, values.numel()).to(torch::kFloat32) * p);
    return wire;
  }

  static void copy_rest(const torch::Tensor& values, const std::vector<Piece>& rest,
                        torch::Tensor& result) {
    std::int64_t k = 0;
    for (const Piece& r : rest) {
      result.narrow(0, r.at, values_of(r.chunk)).copy_(values.narrow(0, k, values_of(r.chunk)));
      k += values_of(r.chunk);
    }
  }

  static torch::Tensor flat(const std::vector<torch::Tensor>& ts) {
    std::vector<torch::Tensor> parts;
    for (const auto& t : ts) parts.push_back(t.reshape({-1}));
    return torch::cat(parts);
  }
  static void unflat(const torch::Tensor& all, std::vector<torch::Tensor>& ts) {
    std::int64_t k = 0;
    for (auto& t : ts) {
      t = all.narrow(0, k, t.numel()).view(t.sizes()).clone();
      k += t.numel();
    }
  }

  CodecContext c_;
  const int rank_;
  const bool alternate_;  // acpsgd: Note [Alternating factors]
  ErrorFeedback feedback_;
  std::map<std::pair<int, int>, Factor> kept_;
  SerialJobs jobs_;  // last
};

}  // namespace

void Codec::load_state(const std::map<std::string, torch::Tensor>& state) {
  if (!state.empty()) bad_entry(state.begin()->first, fmt::format("{} keeps no state", describe()));
}

torch::Tensor WireFormat::encoded(const torch::Tensor& values) const {
  auto wire = torch::empty({static_cast<std::int64_t>(bytes(values.numel()))}, torch::kUInt8);
  encode(values.data_ptr<float>(), values.numel(), wire.data_ptr<std::uint8_t>());
  return wire;
}

torch::Tensor WireFormat::decoded(const torch::Tensor& wire, std::int64_t values) const {
  auto out = torch::empty({values}, torch::kFloat32);
  decode(wire.data_ptr<std::uint8_t>(), values, out.data_ptr<float>());
  return out;
}

std::unique_ptr<WireFormat> make_wire_format(const Encoding& encoding) {
  switch (encoding.codec) {
    case Encoding::Codec::kFp16: return std::make_unique<Fp16Format>();
    case Encoding::Codec::kBf16: return std::make_unique<Bf16Format>();
    case Encoding::Codec::kInt8: return std::make_unique<Int8Format>();
    case Encoding::Codec::kNone:
    case Encoding::Codec::kPowerSgd:
    case Encoding::Codec::kAcpSgd: break;
  }
  throw std::logic_error(fmt::format("codecs: {} is not an element-wise wire format", to_string(encoding)));
}

std::unique_ptr<Codec> make_codec(const Encoding& encoding, const CodecContext& context) {
  switch (encoding.codec) {
    case Encoding::Codec::kFp16: return std::make_unique<Fp16Codec>(context);
    case Encoding::Codec::kBf16:
      if (context.sites != nullptr) {
        return std::make_unique<LeadersRingCodec>(context, std::make_unique<Bf16Format>(), /*feedback=*/false, "bf16");
      }
      return std::make_unique<RingCodec>(context, std::make_unique<Bf16Format>(), /*feedback=*/false, "bf16");
    case Encoding::Codec::kInt8:
      if (context.sites != nullptr) {
        return std::make_unique<LeadersRingCodec>(context, std::make_unique<Int8Format>(), /*feedback=*/true, "int8");
      }
      return std::make_unique<RingCodec>(context, std::make_unique<Int8Format>(), /*feedback=*/true, "int8");
    case Encoding::Codec::kPowerSgd:
    case Encoding::Codec::kAcpSgd: return std::make_unique<LowRankCodec>(context, encoding);
    case Encoding::Codec::kNone: break;
  }
  throw std::logic_error(fmt::format("codecs: no codec for {}", to_string(encoding)));
}

namespace {

// The median time of `repeats` runs of `f`.
double median_seconds(int repeats, const std::function<void()>& f) {
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

std::map<std::string, double> measure_codec_costs() {
  torch::NoGradGuard no_grad;
  at::set_num_threads(1);  // as a worker runs
  constexpr std::int64_t kValues = 1 << 20;
  constexpr int kRepeats = 5;
  const torch::Tensor x = torch::randn({kValues});
  std::map<std::string, double> costs;
  costs["fp16"] = median_seconds(kRepeats, [&] { x.div(4.0).to(torch::kFloat16).to(torch::kFloat32); }) / kValues;
  // The ring encodes each value about once and decodes it about twice per rank.
  const std::vector<std::pair<std::string, std::unique_ptr<WireFormat>>> formats = [] {
    std::vector<std::pair<std::string, std::unique_ptr<WireFormat>>> f;
    f.emplace_back("bf16", std::make_unique<Bf16Format>());
    f.emplace_back("int8", std::make_unique<Int8Format>());
    return f;
  }();
  for (const auto& [name, format] : formats) {
    std::vector<std::uint8_t> wire(static_cast<size_t>(format->bytes(kValues)));
    std::vector<float> back(static_cast<size_t>(kValues));
    costs[name] = median_seconds(kRepeats, [&] {
                    format->encode(x.data_ptr<float>(), kValues, wire.data());
                    format->decode(wire.data(), kValues, back.data());
                    format->decode(wire.data(), kValues, back.data());
                  }) /
                  kValues;
  }
  // One matrix's PowerSGD arithmetic: P = MQ, orthogonalisation, Q = MᵀP, PQᵀ, the error.
  constexpr std::int64_t kRows = 512, kCols = 512, kRank = 4;
  const torch::Tensor m = torch::randn({kRows, kCols}), q0 = torch::randn({kCols, kRank});
  costs["powersgd"] = median_seconds(kRepeats, [&] {
                        torch::Tensor p = torch::matmul(m, q0);
                        LowRankCodec::orthogonalize(p);
                        const torch::Tensor q = torch::matmul(m.t(), p);
                        const torch::Tensor error = m - torch::matmul(p, q.t());
                      }) /
                      static_cast<double>(kRows * kCols * kRank);
  // Half of it per message (Note [Alternating factors]): P = M·orth(Q), P·orth(Q)ᵀ, the error.
  costs["acpsgd"] = median_seconds(kRepeats, [&] {
                      torch::Tensor basis = q0.clone();
                      LowRankCodec::orthogonalize(basis);
                      const torch::Tensor p = torch::matmul(m, basis);
                      const torch::Tensor error = m - torch::matmul(p, basis.t());
                    }) /
                    static_cast<double>(kRows * kCols * kRank);
  return costs;
}

std::vector<Chunk> chunks_of(const Schedule& schedule, const Message& message) {
  std::vector<Chunk> out;
  for (const OpRef& ref : message.ops) {
    const auto& op = schedule.ops(ref.iteration)[static_cast<size_t>(ref.index)];
    out.insert(out.end(), op.chunks.begin(), op.chunks.end());
  }
  return out;
}

}  // namespace weft::runtime
