// The runtime's models (docs/runtime.md §3) as stacks of layers.
//
// Note [No state outside parameters]
// The S-SGD equivalence (K workers on batches of B end with the parameters of one
// process on the combined batch of K·B) holds only if a model's output for a
// sample does not depend on the other samples of its batch, and if the parameters
// are the whole state. BatchNorm breaks both (batch statistics, local running
// buffers), so `cnn` normalises with GroupNorm and `gpt-tiny` with LayerNorm; no
// model registers a buffer (a test checks), so there is nothing to synchronise
// besides the parameters the schedule moves.
//
// Note [Deterministic initialisation]
// `make_model` re-initialises every parameter from a generator of its own seeded
// with `seed`, visiting parameters in registration order, instead of seeding
// LibTorch's global generator: the result is then identical in every process and
// also when several models are built at once on different threads (multi-rank
// tests run ranks as threads). The distributions are LibTorch's defaults (uniform
// ±1/sqrt(fan_in) for Linear and Conv weights and biases, 1 and 0 for norms)
// except embeddings, N(0, 0.02) as in GPT-2.
#include "runtime/model/model.h"

#include <cmath>
#include <unordered_set>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/model/datasets.h"
#include "units/ranges.h"
#include "units/units.h"

namespace weft::runtime {

Profile LayeredModel::layer_profile(std::string_view model_name, int batch) {
  Profile profile{.model = std::string(model_name), .batch = batch, .device = "", .layers = {}};
  for (int l = 0; l < num_layers(); ++l) {
    std::int64_t params = 0;
    int bytes_per_param = 4;
    std::vector<std::vector<std::int64_t>> shapes;
    for (const torch::Tensor& p : layer_parameters(l)) {
      params += p.numel();
      bytes_per_param = static_cast<int>(p.element_size());
      shapes.push_back(p.sizes().vec());
    }
    profile.layers.push_back(
        {.name = layer_name(l), .params = params, .bytes_per_param = bytes_per_param, .shapes = std::move(shapes)});
  }
  return profile;
}

namespace {

// One schedulable layer: a module with a single-tensor forward.
class LayerModule : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
};

// A LayeredModel made of LayerModules registered under their layer names, so that
// named_parameters() reads "block2.conv1.weight".
class LayerStack : public LayeredModel {
 public:
  int num_layers() const override { return static_cast<int>(layers_.size()); }
  std::string layer_name(int layer) const override { return names_.at(layer); }
  std::vector<torch::Tensor> layer_parameters(int layer) override { return layers_.at(layer)->parameters(); }
  torch::Tensor forward_layer(int layer, const torch::Tensor& x) override { return layers_.at(layer)->forward(x); }

 protected:
  void add(std::string name, std::shared_ptr<LayerModule> layer) {
    layers_.push_back(register_module(name, std::move(layer)));
    names_.push_back(std::move(name));
  }

 private:
  std::vector<std::string> names_;
  std::vector<std::shared_ptr<LayerModule>> layers_;
};

// Output [B, classes] against labels [B].
class Classifier : public LayerStack {
 public:
  torch::Tensor loss(const torch::Tensor& output, const torch::Tensor& target) override {
    return torch::nn::functional::cross_entropy(output, target);
  }
  std::int64_t correct(const torch::Tensor& output, const torch::Tensor& target) override {
    return output.argmax(1).eq(target).sum().item<std::int64_t>();
  }
};

// Output [B, T, vocabulary] against next characters [B, T]; `correct` counts
// characters, so accuracy is correct / target.numel().
class CharacterModel : public LayerStack {
 public:
  torch::Tensor loss(const torch::Tensor& output, const torch::Tensor& target) override {
    return torch::nn::functional::cross_entropy(output.reshape({-1, output.size(-1)}), target.reshape({-1}));
  }
  std::int64_t correct(const torch::Tensor& output, const torch::Tensor& target) override {
    return output.argmax(-1).eq(target).sum().item<std::int64_t>();
  }
};

// ---- mlp: Fashion-MNIST 784 → 256 → 128 → 10 ----

class Dense final : public LayerModule {
 public:
  Dense(int in, int out, bool flatten, bool relu)
      : fc_(register_module("fc", torch::nn::Linear(in, out))), flatten_(flatten), relu_(relu) {}
  torch::Tensor forward(const torch::Tensor& x) override {
    torch::Tensor y = fc_(flatten_ ? x.flatten(1) : x);
    return relu_ ? torch::relu(y) : y;
  }

 private:
  torch::nn::Linear fc_;
  bool flatten_;
  bool relu_;
};

class Mlp final : public Classifier {
 public:
  Mlp() {
    add("fc1", std::make_shared<Dense>(28 * 28, 256, /*flatten=*/true, /*relu=*/true));
    add("fc2", std::make_shared<Dense>(256, 128, false, true));
    add("fc3", std::make_shared<Dense>(128, 10, false, false));
  }
};

// ---- cnn: a small residual network for 28×28×1 ----
//
// stem 16@14×14 → block1 32@7×7 → block2 32@7×7 → block3 64@4×4 → pool + linear.
// Sized for one CPU thread: about 5 MFLOP forward per image, so that an epoch of
// Fashion-MNIST takes well under a minute on one core. GroupNorm, not BatchNorm:
// Note [No state outside parameters].

constexpr int kNormGroups = 8;

torch::nn::Conv2d conv(int in, int out, int kernel, int stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

torch::nn::GroupNorm group_norm(int channels) {
  return torch::nn::GroupNorm(torch::nn::GroupNormOptions(kNormGroups, channels));
}

class Stem final : public LayerModule {
 public:
  explicit Stem(int out)
      : conv_(register_module("conv", conv(1, out, 3, 2))), norm_(register_module("norm", group_norm(out))) {}
  torch::Tensor forward(const torch::Tensor& x) override { return torch::relu(norm_(conv_(x))); }

 private:
  torch::nn::Conv2d conv_;
  torch::nn::GroupNorm norm_;
};

// conv-norm-relu-conv-norm plus the input (projected by a 1×1 conv and a norm
// when the shape changes), then relu (He et al. 2016, "basic block").
class ResidualBlock final : public LayerModule {
 public:
  ResidualBlock(int in, int out, int stride)
      : conv1_(register_module("conv1", conv(in, out, 3, stride))),
        norm1_(register_module("norm1", group_norm(out))),
        conv2_(register_module("conv2", conv(out, out, 3, 1))),
        norm2_(register_module("norm2", group_norm(out))) {
    if (stride != 1 || in != out) {
      project_ = register_module("project", conv(in, out, 1, stride));
      project_norm_ = register_module("project_norm", group_norm(out));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    torch::Tensor y = norm2_(conv2_(torch::relu(norm1_(conv1_(x)))));
    return torch::relu(y + (project_ ? project_norm_(project_(x)) : x));
  }

 private:
  torch::nn::Conv2d conv1_;
  torch::nn::GroupNorm norm1_;
  torch::nn::Conv2d conv2_;
  torch::nn::GroupNorm norm2_;
  torch::nn::Conv2d project_{nullptr};
  torch::nn::GroupNorm project_norm_{nullptr};
};

class PoolHead final : public LayerModule {
 public:
  PoolHead(int in, int classes) : fc_(register_module("fc", torch::nn::Linear(in, classes))) {}
  torch::Tensor forward(const torch::Tensor& x) override { return fc_(x.mean({2, 3})); }

 private:
  torch::nn::Linear fc_;
};

class Cnn final : public Classifier {
 public:
  Cnn() {
    add("stem", std::make_shared<Stem>(16));
    add("block1", std::make_shared<ResidualBlock>(16, 32, 2));
    add("block2", std::make_shared<ResidualBlock>(32, 32, 1));
    add("block3", std::make_shared<ResidualBlock>(32, 64, 2));
    add("head", std::make_shared<PoolHead>(64, 10));
  }
};

// ---- gpt-tiny: a character-level decoder ----
//
// Bytes in, next-byte logits out; width 64, 4 heads, 3 pre-LN blocks, context
// kTextContext; the output head is not tied to the embedding (so each layer owns
// its parameters).

constexpr int kWidth = 64;
constexpr int kHeads = 4;
constexpr int kBlocks = 3;

class Embedding final : public LayerModule {
 public:
  Embedding()
      : token_(register_module("token", torch::nn::Embedding(kByteVocabulary, kWidth))),
        position_(register_parameter("position", torch::zeros({kTextContext, kWidth}))) {}
  torch::Tensor forward(const torch::Tensor& x) override {
    return token_(x) + position_.narrow(0, 0, x.size(1));
  }

 private:
  torch::nn::Embedding token_;
  torch::Tensor position_;
};

class TransformerBlock final : public LayerModule {
 public:
  TransformerBlock()
      : norm1_(register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})))),
        qkv_(register_module("qkv", torch::nn::Linear(kWidth, 3 * kWidth))),
        proj_(register_module("proj", torch::nn::Linear(kWidth, kWidth))),
        norm2_(register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})))),
        fc1_(register_module("fc1", torch::nn::Linear(kWidth, 4 * kWidth))),
        fc2_(register_module("fc2", torch::nn::Linear(4 * kWidth, kWidth))) {}

  torch::Tensor forward(const torch::Tensor& x) override {
    const torch::Tensor h = x + proj_(attention(norm1_(x)));
    return h + fc2_(torch::gelu(fc1_(norm2_(h))));
  }

 private:
  // Causal multi-head self-attention of x [B, T, kWidth].
  torch::Tensor attention(const torch::Tensor& x) {
    const std::int64_t batch = x.size(0), time = x.size(1), head = kWidth / kHeads;
    // [B, T, 3, H, D] → [3, B, H, T, D]
    const torch::Tensor qkv = qkv_(x).view({batch, time, 3, kHeads, head}).permute({2, 0, 3, 1, 4});
    const torch::Tensor q = qkv[0], k = qkv[1], v = qkv[2];
    torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head));
    const torch::Tensor future = torch::ones({time, time}, torch::kBool).triu(1);
    scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity()).softmax(-1);
    return torch::matmul(scores, v).transpose(1, 2).reshape({batch, time, kWidth});
  }

  torch::nn::LayerNorm norm1_;
  torch::nn::Linear qkv_;
  torch::nn::Linear proj_;
  torch::nn::LayerNorm norm2_;
  torch::nn::Linear fc1_;
  torch::nn::Linear fc2_;
};

class OutputHead final : public LayerModule {
 public:
  OutputHead()
      : norm_(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})))),
        fc_(register_module("fc", torch::nn::Linear(kWidth, kByteVocabulary))) {}
  torch::Tensor forward(const torch::Tensor& x) override { return fc_(norm_(x)); }

 private:
  torch::nn::LayerNorm norm_;
  torch::nn::Linear fc_;
};

class GptTiny final : public CharacterModel {
 public:
  GptTiny() {
    add("embed", std::make_shared<Embedding>());
    for (int b = 1; b <= kBlocks; ++b) add(fmt::format("block{}", b), std::make_shared<TransformerBlock>());
    add("head", std::make_shared<OutputHead>());
  }
};

// Note [Deterministic initialisation].
void initialise(torch::nn::Module& model, std::uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::unordered_set<const void*> done;
  const auto uniform = [&](torch::Tensor& t, std::int64_t fan_in) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    t.uniform_(-bound, bound, gen);
    done.insert(t.unsafeGetTensorImpl());
  };
  const auto fill = [&](torch::Tensor& t, double value) {
    t.fill_(value);
    done.insert(t.unsafeGetTensorImpl());
  };
  for (const auto& module : model.modules(/*include_self=*/false)) {
    if (auto* linear = module->as<torch::nn::Linear>()) {
      uniform(linear->weight, linear->weight.size(1));
      if (linear->bias.defined()) uniform(linear->bias, linear->weight.size(1));
    } else if (auto* conv2d = module->as<torch::nn::Conv2d>()) {
      const std::int64_t fan_in = conv2d->weight[0].numel();
      uniform(conv2d->weight, fan_in);
      if (conv2d->bias.defined()) uniform(conv2d->bias, fan_in);
    } else if (auto* gn = module->as<torch::nn::GroupNorm>()) {
      fill(gn->weight, 1);
      fill(gn->bias, 0);
    } else if (auto* ln = module->as<torch::nn::LayerNorm>()) {
      fill(ln->weight, 1);
      fill(ln->bias, 0);
    } else if (auto* embedding = module->as<torch::nn::Embedding>()) {
      embedding->weight.normal_(0, 0.02, gen);
      done.insert(embedding->weight.unsafeGetTensorImpl());
    }
  }
  for (auto& item : model.named_parameters()) {
    torch::Tensor& p = item.value();
    if (done.count(p.unsafeGetTensorImpl())) continue;
    if (item.key().ends_with("position")) {  // Embedding's positional table
      p.normal_(0, 0.02, gen);
      continue;
    }
    throw std::logic_error("initialise: parameter '" + item.key() + "' has no initialisation rule");
  }
}

}  // namespace

std::vector<std::string> model_names() { return {"mlp", "cnn", "gpt-tiny"}; }

std::shared_ptr<LayeredModel> make_model(std::string_view name, std::uint64_t seed) {
  std::shared_ptr<LayeredModel> model;
  if (name == "mlp") model = std::make_shared<Mlp>();
  else if (name == "cnn") model = std::make_shared<Cnn>();
  else if (name == "gpt-tiny") model = std::make_shared<GptTiny>();
  else throw UsageError(fmt::format("{}: not a runtime model; accepted: {}", ranges::given("--model", name),
                                    fmt::join(model_names(), ", ")));
  initialise(*model, seed);
  return model;
}

}  // namespace weft::runtime
