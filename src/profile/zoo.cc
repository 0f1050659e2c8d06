#include "profile/zoo.h"

#include <array>
#include <cstdint>
#include <utility>

#include <fmt/format.h>

#include "units/ranges.h"

namespace weft {

// Note [Zoo time model]
// A zoo layer's forward time is
//     fp = launch_overhead + batch * flops / effective_flops
// where `flops` is the layer's forward work for one sample (an image, or one
// sequence of `sequence_length` tokens) and the two device figures come from the
// device table below. Work is counted where it is large and well defined:
//   - a convolution: 2·k²·cin·cout·Hout·Wout, with the real spatial sizes of a
//     224×224 input;
//   - a linear layer: 2·in·out per token (per image for a CNN's classifier);
//   - attention's two batched matmuls, QKᵀ and the product with V: 2·2·seq²·hidden
//     per sequence, attributed to the attention output projection, the
//     parameter-owning layer that waits for them;
//   - norms and embedding lookups: a few FLOPs per output element.
// Activations, pooling, softmax and residual additions own no parameters and are
// left out; the launch overhead stands for the small kernels they launch. The
// backward pass computes two products per forward one (the gradients of the input
// and of the weights), so bp = 2 · fp, the ratio docs/design.md §1.1 takes from seed 000.

namespace {

// FLOPs per output element of a batch or layer norm in training: mean, variance,
// normalise, scale and shift.
constexpr double kNormFlopsPerElement = 5;
// FLOPs per output element of an embedding lookup: a gather and an add into the
// running sum of embeddings.
constexpr double kEmbeddingFlopsPerElement = 2;
// Backward time per forward time (Note [Zoo time model]).
constexpr double kBackwardPerForward = 2;
// Zoo models train in fp32: each parameter's gradient is 4 bytes on the wire.
constexpr int kBytesPerParam = 4;

// ---------------------------------------------------------------------------
// Device presets.
//
// Note [Device sustained fraction]
// A datasheet peak is reached only by large, well-shaped matrix products; a
// training step also runs norms, elementwise kernels and small GEMMs. We take:
//   - 0.5 of the fp32 peak for GPUs that train in fp32 (Turing, Volta);
//   - 0.25 of the dense TF32 tensor-core peak for Ampere and Hopper: cuDNN runs
//     convolutions in TF32 by default but PyTorch (>= 1.12) keeps plain matmuls in
//     fp32 (torch.backends.cuda.matmul.allow_tf32 = False), so the mix sits well
//     below the tensor-core peak;
//   - 0.3 of the AVX2 fp32 peak for a CPU (oneDNN convolutions; much else is
//     memory-bound).
// The per-layer launch overhead is about one CUDA kernel launch plus PyTorch's
// eager dispatch (~5 us); on a CPU, dispatch plus an OpenMP fork/join (~10 us).
// These are weft's assumptions, stated in each preset's `source`.

struct DeviceSpec {
  std::string_view name;
  std::string_view datasheet;  // where the peak comes from
  double peak_flops;           // FLOP/s
  std::string_view precision;  // the arithmetic whose peak is quoted
  double sustained_fraction;   // Note [Device sustained fraction]
  Seconds launch_overhead;
};

constexpr double kTera = 1e12;
constexpr Seconds kMicro = 1e-6;

constexpr DeviceSpec kDevices[] = {
    {"cpu",
     "an 8-core x86-64 at 3.0 GHz with AVX2 (2 FMA units x 8 fp32 lanes x 2 FLOP "
     "= 32 FLOP/cycle/core)",
     0.768 * kTera, "fp32", 0.30, 10 * kMicro},
    {"rtx2080ti",
     "NVIDIA GeForce RTX 2080 Ti reference specification (4352 CUDA cores at "
     "1545 MHz boost)",
     13.4 * kTera, "fp32", 0.50, 5 * kMicro},
    {"v100", "NVIDIA Tesla V100 SXM2 datasheet", 15.7 * kTera, "fp32", 0.50, 5 * kMicro},
    {"a6000", "NVIDIA RTX A6000 datasheet (154.8 TFLOP/s TF32 with sparsity; dense is half)",
     77.4 * kTera, "tf32 tensor-core", 0.25, 5 * kMicro},
    {"a100", "NVIDIA A100 SXM4 datasheet (312 TFLOP/s TF32 with sparsity; dense is half)",
     156 * kTera, "tf32 tensor-core", 0.25, 5 * kMicro},
    {"h100", "NVIDIA H100 SXM5 datasheet (989 TFLOP/s TF32 with sparsity; dense is half)",
     494.5 * kTera, "tf32 tensor-core", 0.25, 5 * kMicro},
};

DevicePreset make_preset(const DeviceSpec& spec) {
  double effective = spec.peak_flops * spec.sustained_fraction;
  return DevicePreset{
      .name = std::string(spec.name),
      .effective_flops = effective,
      .source =
          fmt::format("{}: {:g} TFLOP/s {} peak x {:.2f} sustained = {:g} TFLOP/s; "
                      "{:g} us per layer pass",
                      spec.datasheet, spec.peak_flops / kTera, spec.precision,
                      spec.sustained_fraction, effective / kTera, spec.launch_overhead / kMicro),
      .launch_overhead = spec.launch_overhead,
  };
}

// ---------------------------------------------------------------------------
// Building blocks. Each returns one parameter-owning module with its exact
// parameter count (PyTorch shapes) and its forward FLOPs for one sample.

struct Module {
  std::string name;
  std::int64_t params = 0;
  double flops = 0;
  std::vector<std::vector<std::int64_t>> shapes;  // PyTorch's, in parameters() order
};
using Modules = std::vector<Module>;

// Side of a square convolution or pooling output.
int conv_out(int side, int kernel, int stride, int padding) {
  return (side + 2 * padding - kernel) / stride + 1;
}

// A k×k convolution with groups = 1, producing a `side`×`side` output.
Module conv(std::string name, int k, std::int64_t cin, std::int64_t cout, bool bias, int side) {
  Module m{std::move(name), k * k * cin * cout + (bias ? cout : 0), 2.0 * k * k * cin * cout * side * side,
           {{cout, cin, k, k}}};
  if (bias) m.shapes.push_back({cout});
  return m;
}

// BatchNorm2d: a weight and a bias per channel (running statistics are buffers).
Module batchnorm(std::string name, std::int64_t channels, int side) {
  return {std::move(name), 2 * channels, kNormFlopsPerElement * channels * side * side, {{channels}, {channels}}};
}

// A linear layer applied to `rows` vectors per sample (tokens, or 1 for a head).
Module linear(std::string name, std::int64_t in, std::int64_t out, bool bias, std::int64_t rows) {
  Module m{std::move(name), in * out + (bias ? out : 0), 2.0 * in * out * rows, {{out, in}}};
  if (bias) m.shapes.push_back({out});
  return m;
}

Module layernorm(std::string name, std::int64_t width, std::int64_t rows) {
  return {std::move(name), 2 * width, kNormFlopsPerElement * width * rows, {{width}, {width}}};
}

// RMSNorm (Llama): a weight, no bias.
Module rmsnorm(std::string name, std::int64_t width, std::int64_t rows) {
  return {std::move(name), width, kNormFlopsPerElement * width * rows, {{width}}};
}

Module embedding(std::string name, std::int64_t entries, std::int64_t width, std::int64_t rows) {
  return {std::move(name), entries * width, kEmbeddingFlopsPerElement * width * rows, {{entries, width}}};
}

// QKᵀ and (softmax)·V for one sequence, summed over heads (Note [Zoo time model]).
double attention_flops(std::int64_t sequence, std::int64_t hidden) {
  return 2.0 * 2.0 * static_cast<double>(sequence) * static_cast<double>(sequence) *
         static_cast<double>(hidden);
}

// ---------------------------------------------------------------------------
// Image models: torchvision, 224×224 input, 1000 classes.

constexpr int kImageSide = 224;
constexpr int kImageChannels = 3;
constexpr int kImageNetClasses = 1000;

// torchvision.models.resnet: BasicBlock (resnet18) or Bottleneck with the stride
// on the 3×3 convolution (ResNet v1.5, resnet50). Within a block the downsample
// branch follows the main branch, as in the module's forward.
Modules resnet(std::array<int, 4> blocks_per_stage, bool bottleneck) {
  Modules m;
  int side = conv_out(kImageSide, 7, 2, 3);
  m.push_back(conv("conv1", 7, kImageChannels, 64, false, side));
  m.push_back(batchnorm("bn1", 64, side));
  side = conv_out(side, 3, 2, 1);  // max pool

  const int expansion = bottleneck ? 4 : 1;
  int in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int planes = 64 << stage;
    const int out = planes * expansion;
    for (int b = 0; b < blocks_per_stage[stage]; ++b) {
      const int stride = (stage > 0 && b == 0) ? 2 : 1;
      const int out_side = conv_out(side, 3, stride, 1);
      auto name = [&](std::string_view module) {
        return fmt::format("layer{}.{}.{}", stage + 1, b, module);
      };
      if (bottleneck) {
        m.push_back(conv(name("conv1"), 1, in, planes, false, side));
        m.push_back(batchnorm(name("bn1"), planes, side));
        m.push_back(conv(name("conv2"), 3, planes, planes, false, out_side));
        m.push_back(batchnorm(name("bn2"), planes, out_side));
        m.push_back(conv(name("conv3"), 1, planes, out, false, out_side));
        m.push_back(batchnorm(name("bn3"), out, out_side));
      } else {
        m.push_back(conv(name("conv1"), 3, in, planes, false, out_side));
        m.push_back(batchnorm(name("bn1"), planes, out_side));
        m.push_back(conv(name("conv2"), 3, planes, planes, false, out_side));
        m.push_back(batchnorm(name("bn2"), planes, out_side));
      }
      if (stride != 1 || in != out) {
        m.push_back(conv(name("downsample.0"), 1, in, out, false, out_side));
        m.push_back(batchnorm(name("downsample.1"), out, out_side));
      }
      in = out;
      side = out_side;
    }
  }
  m.push_back(linear("fc", in, kImageNetClasses, true, 1));  // after global average pooling
  return m;
}

Modules resnet18(int /*sequence*/) { return resnet({2, 2, 2, 2}, false); }
Modules resnet50(int /*sequence*/) { return resnet({3, 4, 6, 3}, true); }

// torchvision.models.vgg16 (configuration "D", no batch norm). Names are the
// indices in its `features` and `classifier` Sequentials.
Modules vgg16(int /*sequence*/) {
  constexpr int kPool = 0;
  // clang-format off
  constexpr int kConfigD[] = {64, 64, kPool,
                              128, 128, kPool,
                              256, 256, 256, kPool,
                              512, 512, 512, kPool,
                              512, 512, 512, kPool};
  // clang-format on
  Modules m;
  int side = kImageSide;
  int in = kImageChannels;
  int index = 0;
  for (int channels : kConfigD) {
    if (channels == kPool) {
      side = conv_out(side, 2, 2, 0);
      index += 1;
      continue;
    }
    m.push_back(conv(fmt::format("features.{}", index), 3, in, channels, true, side));
    in = channels;
    index += 2;  // the convolution and its ReLU
  }
  // Adaptive average pooling to 7×7 is the identity for a 224×224 input.
  const int flat = in * 7 * 7;
  m.push_back(linear("classifier.0", flat, 4096, true, 1));
  m.push_back(linear("classifier.3", 4096, 4096, true, 1));
  m.push_back(linear("classifier.6", 4096, kImageNetClasses, true, 1));
  return m;
}

// ---------------------------------------------------------------------------
// Transformers: HuggingFace module names; `seq` tokens per sample.

// BertModel (bert-base-uncased config), pooler included.
Modules bert_base(int seq) {
  constexpr int kVocab = 30522, kPositions = 512, kTokenTypes = 2;
  constexpr int kHidden = 768, kLayers = 12, kIntermediate = 3072;
  Modules m;
  m.push_back(embedding("embeddings.word_embeddings", kVocab, kHidden, seq));
  m.push_back(embedding("embeddings.position_embeddings", kPositions, kHidden, seq));
  m.push_back(embedding("embeddings.token_type_embeddings", kTokenTypes, kHidden, seq));
  m.push_back(layernorm("embeddings.LayerNorm", kHidden, seq));
  for (int l = 0; l < kLayers; ++l) {
    auto name = [&](std::string_view module) {
      return fmt::format("encoder.layer.{}.{}", l, module);
    };
    m.push_back(linear(name("attention.self.query"), kHidden, kHidden, true, seq));
    m.push_back(linear(name("attention.self.key"), kHidden, kHidden, true, seq));
    m.push_back(linear(name("attention.self.value"), kHidden, kHidden, true, seq));
    Module out = linear(name("attention.output.dense"), kHidden, kHidden, true, seq);
    out.flops += attention_flops(seq, kHidden);
    m.push_back(std::move(out));
    m.push_back(layernorm(name("attention.output.LayerNorm"), kHidden, seq));
    m.push_back(linear(name("intermediate.dense"), kHidden, kIntermediate, true, seq));
    m.push_back(linear(name("output.dense"), kIntermediate, kHidden, true, seq));
    m.push_back(layernorm(name("output.LayerNorm"), kHidden, seq));
  }
  m.push_back(linear("pooler.dense", kHidden, kHidden, true, 1));  // the first token only
  return m;
}

// GPT2Model (the 124M "gpt2" config). The language-model head is tied to `wte`,
// so it owns no parameters of its own and is not a layer here.
Modules gpt2(int seq) {
  constexpr int kVocab = 50257, kPositions = 1024;
  constexpr int kHidden = 768, kLayers = 12, kInner = 4 * kHidden;
  Modules m;
  m.push_back(embedding("wte", kVocab, kHidden, seq));
  m.push_back(embedding("wpe", kPositions, kHidden, seq));
  for (int l = 0; l < kLayers; ++l) {
    auto name = [&](std::string_view module) { return fmt::format("h.{}.{}", l, module); };
    m.push_back(layernorm(name("ln_1"), kHidden, seq));
    m.push_back(linear(name("attn.c_attn"), kHidden, 3 * kHidden, true, seq));  // Conv1D q,k,v
    Module proj = linear(name("attn.c_proj"), kHidden, kHidden, true, seq);
    proj.flops += attention_flops(seq, kHidden);
    m.push_back(std::move(proj));
    m.push_back(layernorm(name("ln_2"), kHidden, seq));
    m.push_back(linear(name("mlp.c_fc"), kHidden, kInner, true, seq));
    m.push_back(linear(name("mlp.c_proj"), kInner, kHidden, true, seq));
  }
  m.push_back(layernorm("ln_f", kHidden, seq));
  return m;
}

// LlamaForCausalLM in the Llama-2 layout, scaled down (docs/design.md §1.1): no biases,
// RMSNorm weights only, rotary positions (no parameters), untied lm_head.
Modules llama_176m(int seq) {
  constexpr int kVocab = 32000, kHidden = 512, kLayers = 8, kIntermediate = 11008;
  Modules m;
  m.push_back(embedding("model.embed_tokens", kVocab, kHidden, seq));
  for (int l = 0; l < kLayers; ++l) {
    auto name = [&](std::string_view module) {
      return fmt::format("model.layers.{}.{}", l, module);
    };
    m.push_back(rmsnorm(name("input_layernorm"), kHidden, seq));
    m.push_back(linear(name("self_attn.q_proj"), kHidden, kHidden, false, seq));
    m.push_back(linear(name("self_attn.k_proj"), kHidden, kHidden, false, seq));
    m.push_back(linear(name("self_attn.v_proj"), kHidden, kHidden, false, seq));
    Module o = linear(name("self_attn.o_proj"), kHidden, kHidden, false, seq);
    o.flops += attention_flops(seq, kHidden);
    m.push_back(std::move(o));
    m.push_back(rmsnorm(name("post_attention_layernorm"), kHidden, seq));
    m.push_back(linear(name("mlp.gate_proj"), kHidden, kIntermediate, false, seq));
    m.push_back(linear(name("mlp.up_proj"), kHidden, kIntermediate, false, seq));
    m.push_back(linear(name("mlp.down_proj"), kIntermediate, kHidden, false, seq));
  }
  m.push_back(rmsnorm("model.norm", kHidden, seq));
  m.push_back(linear("lm_head", kHidden, kVocab, false, seq));
  return m;
}

// ---------------------------------------------------------------------------
// The model table.

struct ZooModel {
  std::string_view name;
  int default_sequence;  // tokens per sample; 0 for an image model
  int max_sequence;      // position-embedding rows, or the context length
  Modules (*build)(int sequence);
};

constexpr ZooModel kModels[] = {
    {"resnet18", 0, 0, resnet18},
    {"resnet50", 0, 0, resnet50},
    {"vgg16", 0, 0, vgg16},
    {"bert-base", 128, 512, bert_base},
    {"gpt2", 1024, 1024, gpt2},
    {"llama-176m", 512, 4096, llama_176m},  // 4096: the Llama-2 context length
};

template <typename Table>
std::string joined_names(const Table& table) {
  std::string names;
  for (const auto& entry : table) {
    if (!names.empty()) names += ", ";
    names += entry.name;
  }
  return names;
}

const ZooModel& find_model(std::string_view name) {
  for (const ZooModel& model : kModels) {
    if (model.name == name) return model;
  }
  throw UsageError(
      fmt::format("unknown zoo model \"{}\"; expected one of: {}", name, joined_names(kModels)));
}

int sequence_for(const ZooModel& model, int requested) {
  if (model.default_sequence == 0) {
    if (requested != 0) {
      throw UsageError(
          fmt::format("sequence length {} does not apply to {}, an image model "
                      "({}x{} input); expected 0",
                      requested, model.name, kImageSide, kImageSide));
    }
    return 0;
  }
  if (requested == 0) return model.default_sequence;
  if (requested < 0 || requested > model.max_sequence) {
    throw UsageError(
        fmt::format("sequence length {} for {}; expected 0 (its default, {}) or "
                    "1..{}",
                    requested, model.name, model.default_sequence, model.max_sequence));
  }
  return requested;
}

}  // namespace

const std::vector<DevicePreset>& device_presets() {
  static const std::vector<DevicePreset> presets = [] {
    std::vector<DevicePreset> out;
    for (const DeviceSpec& spec : kDevices) out.push_back(make_preset(spec));
    return out;
  }();
  return presets;
}

const DevicePreset& device_preset(std::string_view name) {
  const auto& presets = device_presets();
  for (const DevicePreset& preset : presets) {
    if (preset.name == name) return preset;
  }
  throw UsageError(
      fmt::format("{}: not a device preset; expected one of: {}", ranges::given("--device", name), joined_names(presets)));
}

std::vector<std::string> zoo_models() {
  std::vector<std::string> names;
  for (const ZooModel& model : kModels) names.emplace_back(model.name);
  return names;
}

Profile zoo_profile(std::string_view name, const ZooOptions& options) {
  const ZooModel& model = find_model(name);
  const DevicePreset& device = device_preset(options.device);
  if (options.batch < 1) {
    throw UsageError(
        fmt::format("batch {} for zoo model {}; expected an integer >= 1 (samples "
                    "per worker per iteration)",
                    options.batch, model.name));
  }
  const int sequence = sequence_for(model, options.sequence_length);

  Profile profile{.model = std::string(model.name),
                  .batch = options.batch,
                  .device = device.name,
                  .layers = {}};
  for (Module& module : model.build(sequence)) {
    // Note [Zoo time model]
    const Seconds fp =
        device.launch_overhead + options.batch * module.flops / device.effective_flops;
    profile.layers.push_back(Layer{.name = std::move(module.name),
                                   .params = module.params,
                                   .bytes_per_param = kBytesPerParam,
                                   .fp = fp,
                                   .bp = kBackwardPerForward * fp,
                                   .shapes = std::move(module.shapes)});
  }
  return profile;
}

}  // namespace weft
