#include "runtime/model/optimizer.h"

#include <cmath>

#include <fmt/format.h>

#include "units/ranges.h"
#include "units/units.h"

namespace weft::runtime {
namespace {

void require(bool ok, std::string_view field, double value, std::string_view accepted) {
  if (!ok) throw UsageError(fmt::format("optimizer {} = {} is not accepted; expected {}", field, value, accepted));
}

}  // namespace

void validate(const OptimizerOptions& o) {
  if (o.kind != "sgd" && o.kind != "momentum" && o.kind != "adam" && o.kind != "adamw" && o.kind != "none") {
    throw UsageError(fmt::format("{}: not an optimizer; accepted: sgd, momentum, adam, adamw, none",
                                 ranges::given("--optimizer", o.kind)));
  }
  // lr 0 is torch.optim's too (a warm-up's first step); the command line asks for > 0 itself.
  require(o.lr >= 0 && o.lr <= ranges::kLr.high, "lr", o.lr, fmt::format("a number in [0, {}]", ranges::kLr.high));
  require(o.weight_decay >= 0 && std::isfinite(o.weight_decay), "weight_decay", o.weight_decay, "a number >= 0");
  if (o.kind == "momentum") require(o.momentum >= 0 && o.momentum < 1, "momentum", o.momentum, "0 <= momentum < 1");
  if (o.kind == "momentum") {
    require(o.dampening >= 0 && o.dampening <= 1, "dampening", o.dampening, "0 <= dampening <= 1");
    if (o.nesterov) require(o.momentum > 0 && o.dampening == 0, "momentum", o.momentum, "> 0 with dampening 0 for nesterov");
  }
  if (o.kind == "adam" || o.kind == "adamw") {
    require(o.beta1 >= 0 && o.beta1 < 1, "beta1", o.beta1, "0 <= beta1 < 1");
    require(o.beta2 >= 0 && o.beta2 < 1, "beta2", o.beta2, "0 <= beta2 < 1");
    require(o.eps > 0 && std::isfinite(o.eps), "eps", o.eps, "a number > 0");
  }
}

LayerOptimizer::LayerOptimizer(std::vector<std::vector<torch::Tensor>> params, OptimizerOptions options)
    : LayerOptimizer(params, [&] {
        std::vector<std::vector<OptimizerOptions>> each;
        for (const auto& layer : params) each.emplace_back(layer.size(), options);
        return each;
      }()) {
  options_ = std::move(options);
}

LayerOptimizer::LayerOptimizer(std::vector<std::vector<torch::Tensor>> params,
                               std::vector<std::vector<OptimizerOptions>> options)
    : params_(std::move(params)), parameter_options_(std::move(options)) {
  if (parameter_options_.size() != params_.size()) {
    throw std::logic_error(fmt::format("LayerOptimizer: options for {} layers, parameters of {}",
                                       parameter_options_.size(), params_.size()));
  }
  for (std::size_t l = 0; l < params_.size(); ++l) {
    if (parameter_options_[l].size() != params_[l].size()) {
      throw std::logic_error(fmt::format("LayerOptimizer: layer {} has {} parameters but options for {}", l,
                                         params_[l].size(), parameter_options_[l].size()));
    }
    for (const OptimizerOptions& o : parameter_options_[l]) validate(o);
  }
  if (!parameter_options_.empty() && !parameter_options_[0].empty()) options_ = parameter_options_[0][0];
  // Moments are allocated on first use (undefined until then), as PyTorch does,
  // so that SGD carries no state at all.
  for (const auto& layer : params_) {
    first_moment_.emplace_back(layer.size());
    second_moment_.emplace_back(layer.size());
  }
  steps_.assign(params_.size(), 0);
}

void LayerOptimizer::set_options(int layer, std::size_t parameter, const OptimizerOptions& options) {
  if (layer < 0 || layer >= num_layers() || parameter >= params_[static_cast<size_t>(layer)].size()) {
    throw std::logic_error(fmt::format("LayerOptimizer::set_options: no parameter {} in layer {}", parameter, layer));
  }
  validate(options);
  std::lock_guard lock(*options_mutex_);
  parameter_options_[static_cast<size_t>(layer)][parameter] = options;
}

const OptimizerOptions& LayerOptimizer::options(int layer, std::size_t parameter) const {
  return parameter_options_.at(static_cast<size_t>(layer)).at(parameter);
}

// The update rules are PyTorch 1.13's single-tensor ones (torch.optim.SGD with
// momentum, dampening and Nesterov; Adam and AdamW without amsgrad), so that a
// layer-wise step equals one step of torch.optim on the same tensors.
void LayerOptimizer::step(int layer) {
  if (layer < 0 || layer >= num_layers()) {
    throw std::logic_error(fmt::format("LayerOptimizer::step: layer {} not in 0..{}", layer, num_layers() - 1));
  }
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor>& params = params_[layer];
  std::vector<OptimizerOptions> options;
  {
    std::lock_guard lock(*options_mutex_);
    options = parameter_options_[static_cast<size_t>(layer)];
  }
  bool any = false;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const OptimizerOptions& o = options[i];
    torch::Tensor& p = params[i];
    if (!p.grad().defined() || o.kind == "none") continue;
    if (!any) {
      any = true;
      ++steps_[layer];
    }
    const bool decoupled = o.kind == "adamw";
    torch::Tensor g = o.weight_decay != 0 && !decoupled ? p.grad().add(p, o.weight_decay) : p.grad();
    if (o.kind == "sgd") {
      p.add_(g, -o.lr);
    } else if (o.kind == "momentum") {
      torch::Tensor& buffer = first_moment_[layer][i];
      if (buffer.defined()) buffer.mul_(o.momentum).add_(g, 1 - o.dampening);
      else buffer = g.clone();
      if (o.nesterov) p.add_(g.add(buffer, o.momentum), -o.lr);
      else p.add_(buffer, -o.lr);
    } else {  // adam, adamw
      if (decoupled && o.weight_decay != 0) p.mul_(1 - o.lr * o.weight_decay);
      torch::Tensor& m = first_moment_[layer][i];
      torch::Tensor& v = second_moment_[layer][i];
      if (!m.defined()) {
        m = torch::zeros_like(p);
        v = torch::zeros_like(p);
      }
      const auto t = static_cast<double>(steps_[layer]);
      const double correction1 = 1 - std::pow(o.beta1, t);
      const double correction2 = 1 - std::pow(o.beta2, t);
      m.mul_(o.beta1).add_(g, 1 - o.beta1);
      v.mul_(o.beta2).addcmul_(g, g, 1 - o.beta2);
      const torch::Tensor denominator = (v.sqrt() / std::sqrt(correction2)).add_(o.eps);
      p.addcdiv_(m, denominator, -o.lr / correction1);
    }
  }
}

// Note [Zeroing unseen]
// ---------------------
// The engine zeroes a layer's gradients after its update in place, not by reset
// (the tensors keep their storage, which fused buffers and hooks may hold), and
// below autograd's in-place bookkeeping, so the tensors' version counters do not
// move. A version that moved between a backward and the next is then the user's
// doing (clip_grad_norm_, a manual zero_) — which is how weft.DataParallel tells
// that a loop changed gradients the overlapped update has already applied
// (docs/python.md, "Update modes").
void LayerOptimizer::zero_grad(int layer) {
  if (layer < 0 || layer >= num_layers()) {
    throw std::logic_error(fmt::format("LayerOptimizer::zero_grad: layer {} not in 0..{}", layer, num_layers() - 1));
  }
  std::vector<torch::Tensor>& params = params_[static_cast<size_t>(layer)];
  std::vector<bool> owned(params.size());
  {
    std::lock_guard lock(*options_mutex_);
    for (std::size_t i = 0; i < params.size(); ++i) {
      owned[i] = parameter_options_[static_cast<size_t>(layer)][i].kind != "none";
    }
  }
  torch::NoGradGuard no_grad;
  at::AutoDispatchBelowADInplaceOrView unseen;  // Note [Zeroing unseen]
  for (std::size_t i = 0; i < params.size(); ++i) {
    // "none": the gradient belongs to whoever steps.
    if (owned[i] && params[i].grad().defined()) params[i].grad().zero_();
  }
}

// ---------------------------------------------------------------------------
// Checkpoints

std::map<std::string, torch::Tensor> LayerOptimizer::state() const {
  std::map<std::string, torch::Tensor> out;
  out["steps"] = torch::tensor(steps_, torch::kInt64);
  for (int l = 0; l < num_layers(); ++l) {
    for (std::size_t i = 0; i < params_[l].size(); ++i) {
      if (first_moment_[l][i].defined()) out[fmt::format("m/{}/{}", l, i)] = first_moment_[l][i].detach().clone();
      if (second_moment_[l][i].defined()) out[fmt::format("v/{}/{}", l, i)] = second_moment_[l][i].detach().clone();
    }
  }
  return out;
}

void LayerOptimizer::load_state(const std::map<std::string, torch::Tensor>& state) {
  const auto steps = state.find("steps");
  if (steps == state.end() || steps->second.scalar_type() != torch::kInt64 ||
      steps->second.numel() != num_layers()) {
    throw std::logic_error(fmt::format("optimizer state: \"steps\" is missing or does not hold {} layers' counts",
                                       num_layers()));
  }
  const torch::Tensor counts = steps->second.contiguous();
  for (int l = 0; l < num_layers(); ++l) steps_[l] = counts.data_ptr<std::int64_t>()[l];
  for (int l = 0; l < num_layers(); ++l) {
    for (std::size_t i = 0; i < params_[l].size(); ++i) {
      for (auto [prefix, moments] : {std::pair{"m", &first_moment_}, std::pair{"v", &second_moment_}}) {
        const std::string name = fmt::format("{}/{}/{}", prefix, l, i);
        torch::Tensor& moment = (*moments)[l][i];
        const auto found = state.find(name);
        if (found == state.end()) {
          moment = torch::Tensor();
          continue;
        }
        if (!found->second.sizes().equals(params_[l][i].sizes()) ||
            found->second.scalar_type() != params_[l][i].scalar_type()) {
          throw std::logic_error(fmt::format("optimizer state: {} does not have the shape and type of its parameter",
                                             name));
        }
        moment = found->second.clone();
      }
    }
  }
}

}  // namespace weft::runtime
