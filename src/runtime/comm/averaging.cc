#include "runtime/comm/averaging.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/comm/codecs.h"
#include "runtime/comm/process_group.h"
#include "runtime/comm/sites.h"
#include "runtime/model/synchronised.h"

namespace weft::runtime {
namespace {

// Note [Compressed parameter averages]
// ------------------------------------
// A codec averages what is small and changes slowly: gradients, or, for a
// parameter average, each worker's change since the layer's last average (as
// DiLoCo compresses its pseudo-gradients). So a lossy parameter message sends
// x − r, where r is the agreed value of its chunks (the outer optimizer's, or a
// copy kept here from the common start), and the mean is r + mean(x − r), which
// then becomes r. Every rank holds the same r and decodes the same bytes, so the
// means stay bit-identical; error feedback works on the changes as on gradients.
//
// Note [Averages by reach]
// ------------------------
// Rule: a message averages over the workers its reach names (Note [Sites in a
// schedule]): kAll sums on the job's group and divides by the workers; kBySites
// sums by sites (Note [Sum by sites] in runtime/comm/sites.h), codecs included,
// and divides by the workers; kSite sums on the site's group and divides by its
// workers, exact whatever the message's encoding, and then sets the parameters to
// the site's mean as they are: the outer optimizer and the agreed values of Note
// [Compressed parameter averages] follow the averages across sites only, which
// are what every worker agrees on.
class AllReduceMean : public OpExecutor {
 public:
  AllReduceMean(const EngineOptions& options, bool gradients) : options_(options), gradients_(gradients) {
    if (uses_sites(*options_.schedule) && options_.sites == nullptr) {
      throw std::logic_error("engine: the schedule averages over sites (Note [Sites in a schedule]) and "
                             "EngineOptions has no sites");
    }
    // Note [Compressed parameter averages]: the agreed values, kept from the
    // common start, where no outer optimizer keeps them.
    if (gradients_ || options_.outer != nullptr) return;
    for (const auto& ops : options_.schedule->iterations) {
      const bool compressed = std::any_of(ops.begin(), ops.end(), [](const CommOp& op) {
        return op.kind == OpKind::kAverageParameters && op.reach != Reach::kSite && lossy(op.encoding);
      });
      if (compressed) {
        agreed_ = std::make_unique<SynchronisedParameters>(options_.layers);
        return;
      }
    }
  }

  std::vector<torch::Tensor> operands(int layer) override {
    const auto& params = options_.layers[static_cast<size_t>(layer)];
    if (!gradients_) return params;
    std::vector<torch::Tensor> grads;
    for (const auto& p : params) grads.push_back(p.grad());
    return grads;
  }
  Step step() const override { return gradients_ ? Step::kAfterCommunication : Step::kBeforeCommunication; }
  bool ordered_across_ranks() const override { return true; }
  // With an outer optimizer a parameter mean over one worker still steps it.
  bool identity() const override { return options_.workers == 1 && (gradients_ || options_.outer == nullptr); }
  Started start(const Schedule& schedule, const Message& message, torch::Tensor packed) override {
    if (Codec* c = codec(schedule, message)) {
      if (!gradients_) packed.sub_(agreed_values(schedule, message));  // Note [Compressed parameter averages]
      return c->start(chunks_of(schedule, message), std::move(packed));
    }
    Summing sum;
    switch (reach(schedule, message)) {
      case Reach::kAll: sum = start_sum(*options_.collectives, packed, options_.gather_below); break;
      case Reach::kSite: sum = options_.sites->start_site_sum(packed); break;
      case Reach::kBySites: sum = options_.sites->start_sum_by_sites(packed); break;
    }
    return {.done = std::move(sum.done), .result = std::move(sum.result)};
  }
  void complete(const Schedule& schedule, const Message& message, const torch::Tensor&,
                torch::Tensor& result) override {
    completing_ = reach(schedule, message);  // for complete_chunk, which the engine calls next
    if (Codec* c = codec(schedule, message)) {
      c->complete(result);
      if (!gradients_) result.add_(agreed_values(schedule, message));
      return;
    }
    result = sum_of(result);
    const int over = completing_ == Reach::kSite ? options_.sites->site_workers() : options_.workers;
    if (over > 1) result.div_(static_cast<double>(over));
  }
  void complete_chunk(const Chunk& chunk, torch::Tensor values) override {
    if (gradients_ || completing_ == Reach::kSite) return;  // Note [Averages by reach]
    if (options_.outer != nullptr) options_.outer->step(chunk, std::move(values));
    else if (agreed_) agreed_->slice(chunk).copy_(values);
  }
  std::string describe(const Schedule& schedule, const Message& message) const override {
    const Encoding& e = encoding(schedule, message);
    if (lossy(e) && reach(schedule, message) != Reach::kSite) {  // a worker alone never starts its codec (identity())
      const auto found = codecs_.find(to_string(e));
      return found != codecs_.end() ? found->second->describe() : to_string(e);
    }
    switch (reach(schedule, message)) {
      case Reach::kSite: return "site allreduce";
      case Reach::kBySites: return "allreduce by sites";
      case Reach::kAll: break;
    }
    return summed_by_allgather(message.bytes, options_.gather_below) ? "allgather" : "allreduce";
  }
  // "<encoding>/<the codec's entry>", and "agreed/<layer>".
  std::map<std::string, torch::Tensor> state() const override {
    std::map<std::string, torch::Tensor> out;
    for (const auto& [name, codec] : codecs_) {
      for (auto& [entry, value] : codec->state()) out[name + "/" + entry] = value;
    }
    if (agreed_) {
      for (int l = 0; l < agreed_->num_layers(); ++l) out[fmt::format("agreed/{}", l)] = agreed_->flat(l);
    }
    return out;
  }
  void load_state(const std::map<std::string, torch::Tensor>& state) override {
    std::map<std::string, std::map<std::string, torch::Tensor>> of_codec;
    for (const auto& [name, value] : state) {
      const auto slash = name.find('/');
      const std::string head = name.substr(0, slash), rest = slash == std::string::npos ? "" : name.substr(slash + 1);
      if (head == "agreed" && agreed_) {
        const int layer = rest.empty() || rest.size() > 9 || rest.find_first_not_of("0123456789") != std::string::npos
                              ? -1 : std::stoi(rest);
        if (layer < 0 || layer >= agreed_->num_layers() || !value.sizes().equals(agreed_->flat(layer).sizes())) {
          throw std::invalid_argument(fmt::format("engine state {}: no such layer, or another size", name));
        }
        agreed_->flat(layer).copy_(value);
      } else {
        of_codec[head][rest] = value;
      }
    }
    const OpKind kind = gradients_ ? OpKind::kAverageGradients : OpKind::kAverageParameters;
    for (const auto& [name, entries] : of_codec) {
      const CommOp* found = nullptr;
      for (const auto& ops : options_.schedule->iterations) {
        for (const CommOp& op : ops) {
          if (op.kind == kind && op.reach != Reach::kSite && lossy(op.encoding) && to_string(op.encoding) == name) {
            found = &op;
          }
        }
      }
      if (found == nullptr || options_.workers < 2) {
        throw std::invalid_argument(fmt::format("engine state {}/...: this job's {} messages have no codec {}", name,
                                                to_string(kind), name));
      }
      codec(*found)->load_state(entries);
    }
  }

 private:
  static const CommOp& first_op(const Schedule& schedule, const Message& message) {
    const OpRef& ref = message.ops.front();
    return schedule.ops(ref.iteration)[static_cast<size_t>(ref.index)];
  }
  // Fused operations share both (Note [Sites in a schedule]).
  static const Encoding& encoding(const Schedule& schedule, const Message& message) {
    return first_op(schedule, message).encoding;
  }
  static Reach reach(const Schedule& schedule, const Message& message) { return first_op(schedule, message).reach; }
  // The agreed values of the message's chunks, packed as its operands are.
  torch::Tensor agreed_values(const Schedule& schedule, const Message& message) {
    SynchronisedParameters& agreed = options_.outer != nullptr ? options_.outer->agreed() : *agreed_;
    std::vector<torch::Tensor> parts;
    for (const Chunk& chunk : chunks_of(schedule, message)) parts.push_back(agreed.slice(chunk));
    return torch::cat(parts);
  }
  // The message's codec, made on first use; null for `none` and for a site's
  // average, which is exact (Note [Averages by reach]).
  Codec* codec(const Schedule& schedule, const Message& message) {
    const CommOp& op = first_op(schedule, message);
    return lossy(op.encoding) && op.reach != Reach::kSite ? codec(op) : nullptr;
  }
  // One codec per encoding: the messages of one encoding share one reach besides
  // kSite (StrategyInfo::make gives every average across the sites one).
  Codec* codec(const CommOp& op) {
    auto& c = codecs_[to_string(op.encoding)];
    if (!c) {
      c = make_codec(op.encoding, {.group = options_.collectives.get(), .workers = options_.workers,
                                   .layers = &options_.layers, .gather_below = options_.gather_below,
                                   .sites = op.reach == Reach::kBySites ? options_.sites : nullptr});
    }
    return c.get();
  }

  const EngineOptions& options_;
  const bool gradients_;
  std::map<std::string, std::unique_ptr<Codec>> codecs_;
  // Parameter averages with a codec and no outer optimizer: Note [Compressed
  // parameter averages].
  std::unique_ptr<SynchronisedParameters> agreed_;
  Reach completing_ = Reach::kAll;  // the reach of the message complete() last saw
};

}  // namespace

std::unique_ptr<OpExecutor> make_averaging_executor(const EngineOptions& options, bool gradients) {
  return std::make_unique<AllReduceMean>(options, gradients);
}

}  // namespace weft::runtime
