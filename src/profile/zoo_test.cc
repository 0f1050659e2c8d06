#include "profile/zoo.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <ostream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace weft {
namespace {

// Forward FLOPs of layer `l` for one sample, recovered from its time
// (Note [Zoo time model] in zoo.cc).
double flops_per_sample(const Profile& p, int l) {
  const DevicePreset& d = device_preset(p.device);
  return (p.layers[l].fp - d.launch_overhead) * d.effective_flops / p.batch;
}

double total_flops_per_sample(const Profile& p) {
  double total = 0;
  for (int l = 0; l < p.size(); ++l) total += flops_per_sample(p, l);
  return total;
}

const Layer& layer_named(const Profile& p, std::string_view name) {
  auto it = std::find_if(p.layers.begin(), p.layers.end(),
                         [&](const Layer& layer) { return layer.name == name; });
  if (it == p.layers.end()) throw std::out_of_range(std::string(name));
  return *it;
}

int index_of(const Profile& p, std::string_view name) {
  return static_cast<int>(&layer_named(p, name) - p.layers.data());
}

struct Expected {
  std::string model;
  std::int64_t params;
  int layers;
};

void PrintTo(const Expected& e, std::ostream* os) { *os << e.model; }

class ZooModelTest : public ::testing::TestWithParam<Expected> {};

// The totals docs/design.md §1.1 fixes, and the layer counts of the architectures
// (resnet18: 20 convs + 20 batch norms + fc; resnet50: 53 + 53 + 1; vgg16: 13 convs
// + 3 linears; bert-base: 4 embedding modules + 12 x 8 + pooler; gpt2: 2 + 12 x 6 +
// ln_f; llama-176m: embed + 8 x 9 + norm + lm_head).
TEST_P(ZooModelTest, ExactParameterTotalsAndLayerCounts) {
  Profile p = zoo_profile(GetParam().model);
  EXPECT_EQ(p.total_params(), GetParam().params);
  EXPECT_EQ(p.size(), GetParam().layers);
  EXPECT_EQ(p.total_bytes(), 4 * GetParam().params);
  EXPECT_EQ(p.model, GetParam().model);
}

TEST_P(ZooModelTest, IsAValidProfileWithUniqueNames) {
  Profile p = zoo_profile(GetParam().model);
  EXPECT_NO_THROW(validate(p));
  std::set<std::string> names;
  for (const Layer& layer : p.layers) {
    EXPECT_TRUE(names.insert(layer.name).second) << "duplicate " << layer.name;
    EXPECT_GT(layer.params, 0) << layer.name;
  }
}

TEST_P(ZooModelTest, BackwardIsTwiceForwardOnEveryDevice) {
  for (const DevicePreset& device : device_presets()) {
    Profile p = zoo_profile(GetParam().model, {.batch = 8, .device = device.name});
    EXPECT_EQ(p.device, device.name);
    for (const Layer& layer : p.layers) {
      EXPECT_DOUBLE_EQ(layer.bp, 2 * layer.fp) << device.name << " " << layer.name;
    }
  }
}

TEST_P(ZooModelTest, EveryLayerTakesAtLeastTheLaunchOverhead) {
  for (const DevicePreset& device : device_presets()) {
    Profile p = zoo_profile(GetParam().model, {.batch = 1, .device = device.name});
    for (const Layer& layer : p.layers) {
      EXPECT_GT(layer.fp, device.launch_overhead) << device.name << " " << layer.name;
    }
  }
}

// Beyond the fixed launch overhead, time is proportional to the batch.
TEST_P(ZooModelTest, ComputeTimeScalesLinearlyWithBatch) {
  const DevicePreset& device = device_preset("a100");
  Profile one = zoo_profile(GetParam().model, {.batch = 1, .device = "a100"});
  for (int batch : {2, 7, 64}) {
    Profile many = zoo_profile(GetParam().model, {.batch = batch, .device = "a100"});
    EXPECT_EQ(many.batch, batch);
    ASSERT_EQ(many.size(), one.size());
    for (int l = 0; l < one.size(); ++l) {
      double expected = batch * (one.layers[l].fp - device.launch_overhead);
      EXPECT_NEAR(many.layers[l].fp - device.launch_overhead, expected, 1e-12 * expected)
          << one.layers[l].name << " batch " << batch;
    }
  }
}

// A faster device never makes a layer slower, and the compute part scales with
// the inverse of the effective FLOP/s.
TEST_P(ZooModelTest, ComputeTimeIsInverselyProportionalToDeviceSpeed) {
  const DevicePreset& v100 = device_preset("v100");
  const DevicePreset& h100 = device_preset("h100");
  Profile slow = zoo_profile(GetParam().model, {.device = "v100"});
  Profile fast = zoo_profile(GetParam().model, {.device = "h100"});
  for (int l = 0; l < slow.size(); ++l) {
    double ratio =
        (slow.layers[l].fp - v100.launch_overhead) / (fast.layers[l].fp - h100.launch_overhead);
    EXPECT_NEAR(ratio, h100.effective_flops / v100.effective_flops, 1e-9 * ratio);
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllModels, ZooModelTest,
    ::testing::Values(Expected{"resnet18", 11'689'512, 41}, Expected{"resnet50", 25'557'032, 107},
                      Expected{"vgg16", 138'357'544, 16}, Expected{"bert-base", 109'482'240, 101},
                      Expected{"gpt2", 124'439'808, 75}, Expected{"llama-176m", 176'431'616, 75}),
    [](const auto& info) {
      std::string name = info.param.model;
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

TEST(Zoo, ListsTheSixModels) {
  EXPECT_EQ(zoo_models(), (std::vector<std::string>{"resnet18", "resnet50", "vgg16", "bert-base",
                                                    "gpt2", "llama-176m"}));
}

TEST(Zoo, LayerShapesMatchTheReferenceImplementations) {
  Profile r50 = zoo_profile("resnet50");
  EXPECT_EQ(r50.layers[0].name, "conv1");
  EXPECT_EQ(r50.layers[0].params, 9408);  // 7*7*3*64
  EXPECT_EQ(r50.layers[1].params, 128);   // bn1
  EXPECT_EQ(layer_named(r50, "layer1.0.downsample.0").params, 64 * 256);
  EXPECT_EQ(layer_named(r50, "layer4.2.conv2").params, 3 * 3 * 512 * 512);
  EXPECT_EQ(layer_named(r50, "fc").params, 2048 * 1000 + 1000);
  EXPECT_EQ(r50.layers.back().name, "fc");

  Profile r18 = zoo_profile("resnet18");
  EXPECT_EQ(layer_named(r18, "fc").params, 513'000);
  EXPECT_THROW(layer_named(r18, "layer1.0.downsample.0"), std::out_of_range);  // 64 -> 64
  EXPECT_EQ(layer_named(r18, "layer2.0.downsample.0").params, 64 * 128);

  Profile vgg = zoo_profile("vgg16");
  EXPECT_EQ(vgg.layers[0].name, "features.0");
  EXPECT_EQ(vgg.layers[0].params, 3 * 3 * 3 * 64 + 64);
  EXPECT_EQ(layer_named(vgg, "features.28").params, 3 * 3 * 512 * 512 + 512);
  EXPECT_EQ(layer_named(vgg, "classifier.0").params, 25088 * 4096 + 4096);

  Profile bert = zoo_profile("bert-base");
  EXPECT_EQ(layer_named(bert, "embeddings.word_embeddings").params, 30522 * 768);
  EXPECT_EQ(layer_named(bert, "encoder.layer.11.intermediate.dense").params, 768 * 3072 + 3072);
  EXPECT_EQ(bert.layers.back().name, "pooler.dense");

  Profile gpt = zoo_profile("gpt2");
  EXPECT_EQ(gpt.layers[0].name, "wte");
  EXPECT_EQ(gpt.layers[0].params, 38'597'376);
  EXPECT_EQ(layer_named(gpt, "h.0.attn.c_attn").params, 768 * 2304 + 2304);
  EXPECT_EQ(gpt.layers.back().name, "ln_f");

  Profile llama = zoo_profile("llama-176m");
  EXPECT_EQ(layer_named(llama, "model.layers.0.self_attn.q_proj").params, 512 * 512);
  EXPECT_EQ(layer_named(llama, "model.layers.7.mlp.down_proj").params, 11008 * 512);
  EXPECT_EQ(layer_named(llama, "model.norm").params, 512);
  EXPECT_EQ(llama.layers.back().name, "lm_head");
  EXPECT_EQ(llama.layers.back().params, 32000 * 512);
}

TEST(Zoo, LayersAreInForwardOrder) {
  Profile r50 = zoo_profile("resnet50");
  // The downsample branch runs after the block's main branch.
  EXPECT_EQ(index_of(r50, "layer1.0.downsample.0"), index_of(r50, "layer1.0.bn3") + 1);
  EXPECT_LT(index_of(r50, "layer1.2.bn3"), index_of(r50, "layer2.0.conv1"));
  Profile llama = zoo_profile("llama-176m");
  EXPECT_LT(index_of(llama, "model.layers.3.self_attn.o_proj"),
            index_of(llama, "model.layers.3.post_attention_layernorm"));
  EXPECT_LT(index_of(llama, "model.layers.3.mlp.gate_proj"),
            index_of(llama, "model.layers.3.mlp.down_proj"));
}

// Forward work of the CNNs against the published multiply-accumulate counts
// (torchvision's model cards: resnet18 1.81, resnet50 4.09, vgg16 15.47 GMACs;
// 2 FLOPs each). Norms add a little on top; a wrong spatial size would be off by
// a factor of 4 or more.
TEST(Zoo, ImageModelFlopsMatchPublishedCounts) {
  struct Case {
    const char* model;
    double gmacs;
  };
  for (Case c : {Case{"resnet18", 1.81}, Case{"resnet50", 4.09}, Case{"vgg16", 15.47}}) {
    double flops = total_flops_per_sample(zoo_profile(c.model, {.batch = 4}));
    EXPECT_GT(flops, 2e9 * c.gmacs * 0.99) << c.model;
    EXPECT_LT(flops, 2e9 * c.gmacs * 1.03) << c.model;
  }
}

TEST(Zoo, TransformerWorkFollowsTheTimeModel) {
  for (int seq : {64, 128, 1024}) {
    Profile gpt = zoo_profile("gpt2", {.batch = 2, .sequence_length = seq});
    // A linear layer: 2 * in * out per token.
    EXPECT_NEAR(flops_per_sample(gpt, index_of(gpt, "h.5.mlp.c_fc")), 2.0 * 768 * 3072 * seq,
                1e-6 * 768 * 3072 * seq);
    // The attention output projection also carries QK^T and AV: 2 * 2 * seq^2 * hidden.
    double expected = 2.0 * 768 * 768 * seq + 4.0 * seq * seq * 768;
    EXPECT_NEAR(flops_per_sample(gpt, index_of(gpt, "h.5.attn.c_proj")), expected, 1e-9 * expected);
  }
}

TEST(Zoo, DefaultOptionsAndDefaultSequenceLengths) {
  Profile p = zoo_profile("resnet50");
  EXPECT_EQ(p.batch, 32);
  EXPECT_EQ(p.device, "v100");
  struct Case {
    const char* model;
    int default_sequence;
  };
  for (Case c : {Case{"bert-base", 128}, Case{"gpt2", 1024}, Case{"llama-176m", 512}}) {
    Profile by_default = zoo_profile(c.model);
    Profile explicit_length = zoo_profile(c.model, {.sequence_length = c.default_sequence});
    Profile other = zoo_profile(c.model, {.sequence_length = c.default_sequence / 2});
    EXPECT_EQ(by_default.forward_time(), explicit_length.forward_time()) << c.model;
    EXPECT_LT(other.forward_time(), by_default.forward_time()) << c.model;
    EXPECT_EQ(other.total_params(), by_default.total_params()) << c.model;
  }
}

void expect_usage_error(const std::function<void()>& call, std::vector<std::string> parts) {
  try {
    call();
    ADD_FAILURE() << "no UsageError";
  } catch (const UsageError& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "\"" << e.what() << "\" lacks \"" << part << "\"";
    }
  }
}

TEST(Zoo, UnknownModelListsTheAcceptedNames) {
  std::vector<std::string> parts = zoo_models();
  parts.push_back("\"resnet101\"");
  expect_usage_error([] { zoo_profile("resnet101"); }, parts);
}

TEST(Zoo, UnknownDeviceListsTheAcceptedNames) {
  std::vector<std::string> parts{"--device tpu: not a device preset"};
  for (const DevicePreset& d : device_presets()) parts.push_back(d.name);
  expect_usage_error([] { device_preset("tpu"); }, parts);
  expect_usage_error([] { zoo_profile("gpt2", {.device = "tpu"}); }, parts);
}

TEST(Zoo, BadOptionsNameTheValueAndWhatIsAccepted) {
  expect_usage_error([] { zoo_profile("gpt2", {.batch = 0}); }, {"batch 0", ">= 1"});
  expect_usage_error([] { zoo_profile("gpt2", {.sequence_length = 2048}); },
                     {"2048", "gpt2", "1..1024"});
  expect_usage_error([] { zoo_profile("bert-base", {.sequence_length = -1}); }, {"-1", "1..512"});
  expect_usage_error([] { zoo_profile("resnet18", {.sequence_length = 128}); },
                     {"128", "resnet18", "expected 0"});
}

TEST(DevicePresets, TableHasTheRequiredDevicesWithSources) {
  std::set<std::string> names;
  for (const DevicePreset& d : device_presets()) {
    EXPECT_TRUE(names.insert(d.name).second) << d.name;
    EXPECT_GT(d.effective_flops, 0) << d.name;
    EXPECT_GT(d.launch_overhead, 0) << d.name;
    EXPECT_NE(d.source.find("peak"), std::string::npos) << d.source;
    EXPECT_NE(d.source.find("sustained"), std::string::npos) << d.source;
    EXPECT_EQ(&device_preset(d.name), &d);
  }
  for (const char* required : {"cpu", "rtx2080ti", "v100", "a6000", "a100", "h100"}) {
    EXPECT_TRUE(names.count(required)) << required;
  }
  // Each generation trains faster than the one before it.
  EXPECT_LT(device_preset("cpu").effective_flops, device_preset("rtx2080ti").effective_flops);
  EXPECT_LT(device_preset("v100").effective_flops, device_preset("a100").effective_flops);
  EXPECT_LT(device_preset("a100").effective_flops, device_preset("h100").effective_flops);
}

}  // namespace
}  // namespace weft
